/* prof_cost.c: the profiler's account of its own cost (pd_prof_cost_t): counting what a
 * cycle recorded, the estimate of the time it added per step, and its JSON form, which
 * the metrics JSON ("profiler_cost") and the trace ("profilerCost") both carry. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_event.h"
#include "pd/pd_stats.h"
#include "pd/pd_writers.h"

void pd_prof_cost_init(pd_prof_cost_t *c) {
  if (c == NULL) return;
  *c = (pd_prof_cost_t){0};
  c->calib_ns_per_call = -1.0;
  c->calib_ns_per_range = -1.0;
  c->calib_ns_launch_untraced = -1.0;
  c->calib_ns_launch_traced = -1.0;
  c->calib_ns_launch_record = -1.0;
  c->calib_ns_per_recorded_call = -1.0;
  c->calib_ns_per_unrecorded_runtime = -1.0;
  c->calib_ns_per_unrecorded_driver = -1.0;
  c->calib_ns_launch_cold_untraced = -1.0;
  c->calib_ns_launch_cold_traced = -1.0;
  c->est_added_us_per_step = -1.0;
  c->measured_added_us_per_step = NAN;
}

/* A runtime kernel-launch call (cudaLaunchKernel, its _ptsz and Ex forms, and the
 * __cudaLaunchKernel that nvcc 13 compiles <<<>>> to): what the calibration times. */
static bool is_runtime_launch(const pd_event_t *e) {
  return e->kind == PD_EVENT_RUNTIME && e->name != NULL && strstr(e->name, "cudaLaunchKernel") != NULL;
}

/* Any kernel launch call, runtime or driver (graph launches included): what costs a launch
 * record and a kernel record. A host function's launch runs no kernel. */
static bool is_launch_call(const pd_event_t *e) {
  if (e->name == NULL || strstr(e->name, "LaunchHostFunc") != NULL) return false;
  if (e->kind == PD_EVENT_RUNTIME) return strstr(e->name, "cudaLaunch") != NULL || strstr(e->name, "cudaGraphLaunch") != NULL;
  if (e->kind == PD_EVENT_DRIVER) return strncmp(e->name, "cuLaunch", 8) == 0 || strncmp(e->name, "cuGraphLaunch", 13) == 0;
  return false;
}

/* The median duration of the cycle's traced runtime launch calls, in ns; -1 when none. */
static double window_launch_ns(const pd_event_t *ev, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += is_runtime_launch(&ev[i]);
  if (k == 0) return -1.0;
  double *d = malloc(k * sizeof(*d));
  if (d == NULL) return -1.0;
  k = 0;
  for (size_t i = 0; i < n; i++)
    if (is_runtime_launch(&ev[i])) d[k++] = (double)pd_event_dur_ns(&ev[i]);
  double m = pd_quantile(d, k, 0.5);
  free(d);
  return m;
}

double pd_prof_cost_launch_median_ns(const pd_trace_t *t) {
  return t != NULL ? window_launch_ns(pd_trace_events(t), pd_trace_count(t)) : -1.0;
}

void pd_prof_cost_count(pd_prof_cost_t *c, const pd_trace_t *cycle) {
  if (c == NULL || cycle == NULL) return;
  const pd_event_t *ev = pd_trace_events(cycle);
  const size_t n = pd_trace_count(cycle);
  const double wl = window_launch_ns(ev, n);
  if (wl >= 0.0) {
    c->win_ns_per_launch_sum += wl;
    c->win_cycles++;
  }
  for (size_t i = 0; i < n; i++) {
    switch (ev[i].kind) {
      case PD_EVENT_KERNEL:
      case PD_EVENT_MEMCPY:
      case PD_EVENT_MEMSET:
        c->records++;
        c->gpu_activities++;
        break;
      case PD_EVENT_RUNTIME:
      case PD_EVENT_DRIVER:
        c->records++;
        c->api_calls++;
        c->launch_calls += is_launch_call(&ev[i]);
        break;
      case PD_EVENT_SYNC:
      case PD_EVENT_MEMORY:
      case PD_EVENT_OVERHEAD:
        c->records++;
        break;
      case PD_EVENT_RANGE:
        c->host_ranges++;
        if (ev[i].u.range.step >= 0) c->steps++;
        break;
      default:
        break; /* derived or read-back kinds (GPU_RANGE, CPU_OP) are not recorded */
    }
  }
}

double pd_prof_cost_window_call_ns(const pd_prof_cost_t *c) {
  if (c == NULL || c->win_cycles <= 0 || !(c->calib_ns_launch_record >= 0.0) || !(c->calib_ns_per_call >= 0.0))
    return -1.0;
  const double w =
      c->calib_ns_per_call + c->win_ns_per_launch_sum / (double)c->win_cycles - c->calib_ns_launch_record;
  return w > 0.0 ? w : 0.0;
}

bool pd_prof_cost_end_calibration(const pd_prof_cost_t *c, double *ns_per_call, double *ns_per_range,
                                  double *ns_launch_untraced) {
  const bool ok = c != NULL && c->end_cycles > 0;
  if (ns_per_call != NULL) *ns_per_call = ok ? c->end_ns_per_call_sum / (double)c->end_cycles : -1.0;
  if (ns_per_range != NULL) *ns_per_range = ok ? c->end_ns_per_range_sum / (double)c->end_cycles : -1.0;
  if (ns_launch_untraced != NULL)
    *ns_launch_untraced = ok ? c->end_ns_launch_untraced_sum / (double)c->end_cycles : -1.0;
  return ok;
}

void pd_prof_cost_estimate(pd_prof_cost_t *c) {
  if (c == NULL) return;
  c->est_added_us_per_step = -1.0;
  if (c->steps <= 0 || !(c->calib_ns_per_call >= 0.0) || !(c->calib_ns_per_range >= 0.0)) return;
  const double launch = fmax(0.0, c->calib_ns_per_call);
  const double other = c->calib_ns_per_recorded_call >= 0.0 ? c->calib_ns_per_recorded_call : launch;
  const int64_t others = c->api_calls > c->launch_calls ? c->api_calls - c->launch_calls : 0;
  const double ns = (double)(c->api_calls - others) * launch + (double)others * other +
                    (double)c->host_ranges * fmax(0.0, c->calib_ns_per_range);
  double us = ns / (double)c->steps / 1000.0;
  if (c->census_steps > 0 && c->calib_ns_per_unrecorded_runtime >= 0.0 && c->calib_ns_per_unrecorded_driver >= 0.0)
    us += ((double)c->census_runtime_unrecorded * c->calib_ns_per_unrecorded_runtime +
           (double)c->census_driver_unrecorded * c->calib_ns_per_unrecorded_driver) /
          (double)c->census_steps / 1000.0;
  c->est_added_us_per_step = us;
}

/* The median of n periods into *med; false where n < 3 or one is not in (0, 1e4) s. */
static bool periods_median(const double *p, size_t n, double *med) {
  if (p == NULL || n < 3) return false;
  for (size_t i = 0; i < n; i++)
    if (!(p[i] > 0.0 && p[i] < 1e4)) return false;
  *med = pd_quantile(p, n, 0.5);
  return true;
}

void pd_prof_cost_measure(pd_prof_cost_t *c, const double *untraced_s, size_t n_untraced, const double *traced_s,
                          size_t n_traced) {
  if (c == NULL) return;
  double u, t;
  const bool ok = periods_median(untraced_s, n_untraced, &u) && periods_median(traced_s, n_traced, &t);
  c->measured_added_us_per_step = ok ? (t - u) * 1e6 : NAN;
  c->measured_untraced_steps = ok ? (int64_t)n_untraced : 0;
  c->measured_traced_steps = ok ? (int64_t)n_traced : 0;
}

static bool add_num(cJSON *o, const char *key, double v, bool known) {
  cJSON *item = known && isfinite(v) ? cJSON_AddNumberToObject(o, key, v) : cJSON_AddNullToObject(o, key);
  return item != NULL;
}

cJSON *pd_prof_cost_to_json(const pd_prof_cost_t *c, double step_s) {
  if (c == NULL) return NULL;
  cJSON *o = cJSON_CreateObject();
  if (o == NULL) return NULL;
  const double steps = (double)c->steps;
  const bool est = c->est_added_us_per_step >= 0.0;
  bool ok = add_num(o, "est_added_us_per_step", round(c->est_added_us_per_step * 100.0) / 100.0, est);
  ok = ok && add_num(o, "est_added_fraction_of_step",
                     step_s > 0.0 ? round(c->est_added_us_per_step * 1e-6 / step_s * 1e4) / 1e4 : 0.0,
                     est && step_s > 0.0 && isfinite(step_s));
  const bool meas = isfinite(c->measured_added_us_per_step);
  ok = ok && add_num(o, "measured_added_us_per_step", round(c->measured_added_us_per_step * 100.0) / 100.0, meas);
  ok = ok && add_num(o, "measured_untraced_steps", (double)c->measured_untraced_steps, meas);
  ok = ok && add_num(o, "measured_traced_steps", (double)c->measured_traced_steps, meas);
  ok = ok && add_num(o, "cycles", (double)c->cycles, true);
  ok = ok && add_num(o, "steps", steps, true);
  ok = ok && add_num(o, "records", (double)c->records, true);
  ok = ok && add_num(o, "records_per_step", round((double)c->records / steps * 10.0) / 10.0, c->steps > 0);
  ok = ok && add_num(o, "api_calls", (double)c->api_calls, true);
  ok = ok && add_num(o, "launch_calls", (double)c->launch_calls, true);
  ok = ok && add_num(o, "gpu_activities", (double)c->gpu_activities, true);
  ok = ok && add_num(o, "host_ranges", (double)c->host_ranges, true);
  ok = ok && add_num(o, "buffers", (double)c->buffers, true);
  ok = ok && add_num(o, "buffer_bytes", (double)c->buffer_bytes, true);
  ok = ok && add_num(o, "dropped_records", (double)c->dropped, true);
  ok = ok && add_num(o, "enable_ms", round(c->enable_ms * 1000.0) / 1000.0, true);
  ok = ok && add_num(o, "flush_ms", round(c->flush_ms * 1000.0) / 1000.0, true);
  ok = ok && add_num(o, "parse_ms", round(c->parse_ms * 1000.0) / 1000.0, true);
  ok = ok && add_num(o, "calibrate_ms", round(c->calibrate_ms * 1000.0) / 1000.0, true);
  cJSON *cj = ok ? cJSON_AddObjectToObject(o, "calibration") : NULL;
  ok = cj != NULL;
  /* Each figure on its own: a calibration whose traced phase read no cost for one kind (a
   * negative difference, noise) still times the untraced launch, the A/B's covariate. */
  ok = ok && add_num(cj, "ns_per_cuda_call", round(c->calib_ns_per_call * 10.0) / 10.0, c->calib_ns_per_call >= 0.0);
  ok = ok && add_num(cj, "ns_per_host_range", round(c->calib_ns_per_range * 10.0) / 10.0, c->calib_ns_per_range >= 0.0);
  ok = ok && add_num(cj, "ns_per_launch_untraced", round(c->calib_ns_launch_untraced * 10.0) / 10.0,
                     c->calib_ns_launch_untraced >= 0.0);
  ok = ok && add_num(cj, "ns_per_launch_traced", round(c->calib_ns_launch_traced * 10.0) / 10.0,
                     c->calib_ns_launch_traced >= 0.0);
  const double win = pd_prof_cost_window_call_ns(c);
  ok = ok && add_num(cj, "ns_per_launch_record", round(c->calib_ns_launch_record * 10.0) / 10.0,
                     c->calib_ns_launch_record >= 0.0);
  ok = ok && add_num(cj, "ns_per_launch_window",
                     c->win_cycles > 0 ? round(c->win_ns_per_launch_sum / (double)c->win_cycles * 10.0) / 10.0 : 0.0,
                     c->win_cycles > 0);
  ok = ok && add_num(cj, "ns_per_cuda_call_window", round(win * 10.0) / 10.0, win >= 0.0);
  ok = ok && add_num(cj, "ns_per_recorded_call", round(c->calib_ns_per_recorded_call * 10.0) / 10.0,
                     c->calib_ns_per_recorded_call >= 0.0);
  ok = ok && add_num(cj, "ns_per_unrecorded_runtime_call", round(c->calib_ns_per_unrecorded_runtime * 10.0) / 10.0,
                     c->calib_ns_per_unrecorded_runtime >= 0.0);
  ok = ok && add_num(cj, "ns_per_unrecorded_driver_call", round(c->calib_ns_per_unrecorded_driver * 10.0) / 10.0,
                     c->calib_ns_per_unrecorded_driver >= 0.0);
  ok = ok && add_num(cj, "ns_per_launch_cold_untraced", round(c->calib_ns_launch_cold_untraced * 10.0) / 10.0,
                     c->calib_ns_launch_cold_untraced >= 0.0);
  ok = ok && add_num(cj, "ns_per_launch_cold_traced", round(c->calib_ns_launch_cold_traced * 10.0) / 10.0,
                     c->calib_ns_launch_cold_traced >= 0.0);
  double end_call = -1.0, end_range = -1.0, end_untraced = -1.0;
  const bool end = pd_prof_cost_end_calibration(c, &end_call, &end_range, &end_untraced);
  ok = ok && add_num(cj, "ns_per_cuda_call_end", round(end_call * 10.0) / 10.0, end);
  ok = ok && add_num(cj, "ns_per_host_range_end", round(end_range * 10.0) / 10.0, end);
  ok = ok && add_num(cj, "ns_per_launch_untraced_end", round(end_untraced * 10.0) / 10.0, end);
  if (ok && c->census_steps > 0) {
    const double n = (double)c->census_steps;
    cJSON *ce = cJSON_AddObjectToObject(o, "api_census");
    ok = ce != NULL;
    ok = ok && add_num(ce, "steps", n, true);
    ok = ok && add_num(ce, "recorded_per_step", round((double)c->census_recorded / n * 10.0) / 10.0, true);
    ok = ok && add_num(ce, "runtime_unrecorded_per_step", round((double)c->census_runtime_unrecorded / n * 10.0) / 10.0,
                       true);
    ok = ok && add_num(ce, "driver_unrecorded_per_step", round((double)c->census_driver_unrecorded / n * 10.0) / 10.0,
                       true);
    ok = ok && add_num(ce, "driver_internal_per_step", round((double)c->census_driver_internal / n * 10.0) / 10.0, true);
  } else if (ok) {
    ok = cJSON_AddNullToObject(o, "api_census") != NULL;
  }
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}
