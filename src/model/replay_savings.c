/* replay_savings.c: what every fix would save, from replays of the trace's graph
 * (pd_replay_fill_metrics, pd_replay.h).
 *
 * The baseline is the predicted unprofiled program: the trace replayed with the
 * profiler's own cost taken out (PD_FIX_PROFILER). Each fix is replayed on top of it, and
 * its saving is the baseline's mean step minus the fix's. The fixes that save at least the
 * finding share are then replayed together: where they overlap (a read removed also
 * removes the host code around it), the combination saves less than their sum, and that
 * is what it reports.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_replay.h"

/* The fixes whose savings the metrics carry, in fix order (PROFILER is the baseline). */
static double *saving_field(pd_metrics_t *m, pd_fix_t f) {
  switch (f) {
    case PD_FIX_DATA_WAIT: return &m->saving_data_wait_us_per_step;
    case PD_FIX_LOADER_2X: return &m->saving_loader_2x_us_per_step;
    case PD_FIX_READS: return &m->saving_blocking_reads_us_per_step;
    case PD_FIX_READS_ASYNC: return &m->saving_blocking_reads_async_us_per_step;
    case PD_FIX_PAGEABLE: return &m->saving_pageable_copy_us_per_step;
    case PD_FIX_ALLOCATION: return &m->saving_allocation_us_per_step;
    case PD_FIX_LAUNCH: return &m->saving_launch_overhead_us_per_step;
    case PD_FIX_TINY_OPS: return &m->saving_tiny_ops_us_per_step;
    case PD_FIX_HOST_CODE: return &m->saving_host_code_us_per_step;
    case PD_FIX_PROFILER:
    case PD_FIX_COUNT: break;
  }
  return NULL;
}

double pd_replay_metric_saving(const pd_metrics_t *m, pd_fix_t f) {
  double *p = m != NULL ? saving_field((pd_metrics_t *)m, f) : NULL;
  return p != NULL ? *p : NAN;
}

/* A torch.profiler trace holds cpu_op events; profiler_demo's hold host ranges only (the
 * reader drops the cpu_op copies our writer adds). */
static bool looks_like_torch(const pd_trace_t *trace) {
  const pd_event_t *ev = pd_trace_events(trace);
  for (size_t i = 0, n = pd_trace_count(trace); i < n; i++)
    if (ev[i].kind == PD_EVENT_CPU_OP) return true;
  return false;
}

int pd_replay_fill_metrics(const pd_trace_t *trace, const pd_trace_index_t *ix, const pd_replay_cost_t *cost,
                           pd_metrics_t *m) {
  if (trace == NULL || ix == NULL || m == NULL) return PD_EINVAL;
  pd_replay_cost_t dflt = pd_replay_cost_default(looks_like_torch(trace));
  if (pd_trace_calibration(trace, &dflt.ns_per_call, &dflt.ns_per_range)) {
    dflt.source = "calibration of the recording host (profilerCost)";
    dflt.host_slowdown = 0.0; /* the calibration is per call and range */
  }
  if (cost == NULL || !(cost->ns_per_call >= 0) || !(cost->ns_per_range >= 0)) cost = &dflt;
  pd_replay_t *r = NULL;
  int rc = pd_replay_build(trace, ix, cost, &r);
  if (rc != 0) return rc;
  const pd_replay_info_t *in = pd_replay_info(r);
  m->replay_quality = (int)in->quality;
  snprintf(m->replay_why, sizeof m->replay_why, "%s", in->why);
  snprintf(m->replay_cost_model, sizeof m->replay_cost_model, "%s", cost->source != NULL ? cost->source : "given");
  pd_replay_result_t base, prof;
  if ((rc = pd_replay_run(r, 0, &base, NULL)) != 0 || (rc = pd_replay_run(r, PD_FIX_BIT(PD_FIX_PROFILER), &prof, NULL)) != 0) {
    pd_replay_destroy(r);
    return rc;
  }
  if (base.steps == 0 || !(prof.step_us_mean > 0)) {
    /* unavailable: the metrics stay NaN, the why says so */
    if (m->replay_quality != PD_REPLAY_UNAVAILABLE) {
      m->replay_quality = PD_REPLAY_UNAVAILABLE;
      snprintf(m->replay_why, sizeof m->replay_why, "the replayed steps are empty");
    }
    pd_replay_destroy(r);
    return 0;
  }
  m->replay_step_us = base.step_us_mean;
  m->replay_step_error_median_fraction = base.err_median;
  m->replay_step_error_max_fraction = base.err_max;
  m->predicted_unprofiled_step_us = prof.step_us_mean;
  m->replay_launch_latency_us = (double)in->launch_latency_ns / 1e3;
  m->replay_wake_latency_us = (double)in->wake_latency_ns / 1e3;
  m->replay_queue_gap_us = (double)in->queue_gap_ns / 1e3;
  m->replay_reads_per_step = in->reads_per_step;
  m->replay_ops_known = in->ops_known;
  m->replay_tiny_ops_per_step = in->tiny_ops_per_step;
  m->replay_pinned_gbps = in->pinned_gbps;
  snprintf(m->replay_pinned_source, sizeof m->replay_pinned_source, "%s", in->pinned_source != NULL ? in->pinned_source : "");
  m->replay_data_wait_share = in->data_wait_share;
  unsigned combined = PD_FIX_BIT(PD_FIX_PROFILER);
  for (int f = 0; f < PD_FIX_COUNT; f++) {
    double *field = saving_field(m, (pd_fix_t)f);
    if (field == NULL) continue;
    if (f == PD_FIX_HOST_CODE && !in->host_code_known) {
      *field = NAN; /* no op layer to be outside of (pd_replay_info_t.host_code_known) */
      continue;
    }
    pd_replay_result_t res;
    if ((rc = pd_replay_run(r, PD_FIX_BIT(PD_FIX_PROFILER) | PD_FIX_BIT(f), &res, NULL)) != 0) break;
    double saved = prof.step_us_mean - res.step_us_mean;
    *field = saved > 0 ? saved : 0.0;
    if (pd_fix_is_extra((pd_fix_t)f) && *field >= PD_SAVING_FINDING_SHARE * prof.step_us_mean) combined |= PD_FIX_BIT(f);
  }
  if (rc == 0) {
    pd_replay_result_t res;
    rc = pd_replay_run(r, combined, &res, NULL);
    if (rc == 0) {
      double saved = prof.step_us_mean - res.step_us_mean;
      m->saving_combined_us_per_step = saved > 0 ? saved : 0.0;
      m->replay_combined_mask = combined & ~PD_FIX_BIT(PD_FIX_PROFILER);
    }
  }
  pd_replay_destroy(r);
  return rc;
}

/* ---- savings over cycles ------------------------------------------------------------------ */

int pd_cycle_log_add(pd_cycle_log_t *log, const pd_metrics_t *m, int64_t steps) {
  if (log == NULL || m == NULL || steps < 0) return PD_EINVAL;
  if (log->n == log->cap) {
    size_t cap = log->cap ? log->cap * 2 : 8;
    pd_cycle_savings_t *v = realloc(log->v, cap * sizeof(*v));
    if (v == NULL) return PD_ENOMEM;
    log->v = v;
    log->cap = cap;
  }
  pd_cycle_savings_t *c = &log->v[log->n++];
  c->steps = steps;
  c->predicted_unprofiled_step_us = m->predicted_unprofiled_step_us;
  c->replayed_step_us = m->replay_step_us;
  for (int f = 0; f < PD_FIX_COUNT; f++) c->saving_us[f] = pd_replay_metric_saving(m, (pd_fix_t)f);
  c->combined_us = m->saving_combined_us_per_step;
  c->combined_mask = m->replay_combined_mask;
  c->error_median = m->replay_step_error_median_fraction;
  c->error_max = m->replay_step_error_max_fraction;
  return 0;
}

static bool cycle_replayed(const pd_cycle_savings_t *c) { return c->steps > 0 && c->predicted_unprofiled_step_us > 0; }

size_t pd_cycle_log_overall(const pd_cycle_log_t *log, pd_metrics_t *m) {
  if (log == NULL || m == NULL) return 0;
  size_t k = 0;
  bool same_mask = true;
  const pd_cycle_savings_t *first = NULL;
  for (size_t i = 0; i < log->n; i++) {
    if (!cycle_replayed(&log->v[i])) continue;
    if (first == NULL) first = &log->v[i];
    same_mask = same_mask && log->v[i].combined_mask == first->combined_mask;
    k++;
  }
  if (k < 2) return k;
  double w = 0, pred = 0, rep = 0, comb = 0, err_median = 0, err_max = 0;
  double sav[PD_FIX_COUNT] = {0}, wsav[PD_FIX_COUNT] = {0};
  for (size_t i = 0; i < log->n; i++) {
    const pd_cycle_savings_t *c = &log->v[i];
    if (!cycle_replayed(c)) continue;
    const double s = (double)c->steps;
    w += s;
    pred += s * c->predicted_unprofiled_step_us;
    rep += s * c->replayed_step_us;
    comb += s * c->combined_us;
    for (int f = 0; f < PD_FIX_COUNT; f++)
      if (isfinite(c->saving_us[f])) {
        sav[f] += s * c->saving_us[f];
        wsav[f] += s;
      }
    err_median = fmax(err_median, c->error_median);
    err_max = fmax(err_max, c->error_max);
  }
  m->predicted_unprofiled_step_us = pred / w;
  m->replay_step_us = rep / w;
  for (int f = 0; f < PD_FIX_COUNT; f++) {
    double *field = saving_field(m, (pd_fix_t)f);
    if (field != NULL) *field = wsav[f] > 0 ? sav[f] / wsav[f] : NAN;
  }
  m->saving_combined_us_per_step = same_mask && isfinite(comb) ? comb / w : NAN;
  m->replay_combined_mask = same_mask ? first->combined_mask : 0;
  m->replay_step_error_median_fraction = err_median;
  m->replay_step_error_max_fraction = err_max;
  return k;
}

void pd_cycle_log_print(FILE *out, const pd_cycle_log_t *log) {
  if (out == NULL || log == NULL || log->n < 2) return;
  fprintf(out, "  per cycle (the savings above are over all %zu, weighted by their steps):\n", log->n);
  for (size_t i = 0; i < log->n; i++) {
    const pd_cycle_savings_t *c = &log->v[i];
    fprintf(out, "   cycle %zu: %lld step%s", i + 1, (long long)c->steps, c->steps == 1 ? "" : "s");
    if (!cycle_replayed(c)) {
      fprintf(out, ", no replay\n");
      continue;
    }
    fprintf(out, ", predicted unprofiled step %.1f us;", c->predicted_unprofiled_step_us);
    bool any = false;
    for (int f = 0; f < PD_FIX_COUNT; f++) {
      const double s = c->saving_us[f];
      if (!(s >= PD_SAVING_FINDING_SHARE * c->predicted_unprofiled_step_us)) continue;
      fprintf(out, " %s %.1f%%", pd_fix_name((pd_fix_t)f), 100.0 * s / c->predicted_unprofiled_step_us);
      any = true;
    }
    fprintf(out, any ? "\n" : " no fix saves 5%%\n");
  }
}

void pd_cycle_log_free(pd_cycle_log_t *log) {
  if (log == NULL) return;
  free(log->v);
  memset(log, 0, sizeof(*log));
}
