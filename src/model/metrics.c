/* metrics.c: step metrics from a cycle's events and from host-timed samples.
 *
 * Steps are the RANGE events with u.range.step >= 0 (ProfilerStep#N). Work is given to
 * the step whose [start, end) holds its time: host calls by their start, GPU activity
 * by the start of the API call that launched it (its own start when that call is not in
 * the trace), so a kernel that runs late still counts for the step that asked for it.
 * Work outside every step is left out. Per-step values are totals over all steps
 * divided by the number of steps. gpu_busy_fraction is total busy time over total step
 * time (a duration-weighted mean, not the mean of per-step fractions), where busy time
 * is the length of the union of all kernel/memcpy/memset intervals of all streams and
 * devices, clipped to the step. Synchronizing and device-allocating API calls are told
 * apart by name, from the two tables below.
 */
#include "pd/pd_replay.h"
#include "pd/pd_stats.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- metric descriptors ----------------------------------------------------------------- */

static const pd_metric_desc_t metric_descs[] = {
#define PD_METRIC_DESC_GEN(field, kind, cls) \
  {#field, PD_METRIC_##kind, PD_METRIC_CLASS_##cls, offsetof(pd_metrics_t, field)},
    PD_METRICS_MAP(PD_METRIC_DESC_GEN)
#undef PD_METRIC_DESC_GEN
};
#define NMETRICS (sizeof metric_descs / sizeof metric_descs[0])

const pd_metric_desc_t *pd_metric_descs(size_t *count) {
  if (count != NULL) *count = NMETRICS;
  return metric_descs;
}

static const char *const metric_class_names[] = {
#define PD_MC_STR(name, text) text,
    PD_METRIC_CLASS_MAP(PD_MC_STR)
#undef PD_MC_STR
};

const char *pd_metric_class_name(pd_metric_class_t c) {
  return (size_t)c < sizeof metric_class_names / sizeof metric_class_names[0] ? metric_class_names[c] : "?";
}

const pd_metric_desc_t *pd_metric_find(const char *name) {
  if (name == NULL) return NULL;
  for (size_t i = 0; i < NMETRICS; i++)
    if (strcmp(metric_descs[i].name, name) == 0) return &metric_descs[i];
  return NULL;
}

void pd_metrics_init(pd_metrics_t *m) {
  if (m == NULL) return;
  for (size_t i = 0; i < NMETRICS; i++) *(double *)((char *)m + metric_descs[i].offset) = NAN;
  m->steps = 0;
  m->replay_quality = -1;
  m->replay_why[0] = '\0';
  m->replay_cost_model[0] = '\0';
  m->replay_combined_mask = 0;
  m->replay_ops_known = false;
}

/* ---- quantiles -------------------------------------------------------------------------------- */

static int double_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double pd_quantile(const double *xs, size_t n, double q) {
  if (xs == NULL || n == 0 || isnan(q)) return NAN;
  double *v = malloc(n * sizeof(*v));
  if (v == NULL) return NAN;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(xs[i])) v[k++] = xs[i]; /* a missing sample is not a value */
  double r = NAN;
  if (k > 0) {
    qsort(v, k, sizeof(*v), double_cmp);
    if (q < 0) q = 0;
    if (q > 1) q = 1;
    /* linear interpolation between closest ranks (numpy's default) */
    double pos = q * (double)(k - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < k ? lo + 1 : lo;
    double frac = pos - (double)lo;
    r = v[lo] + (v[hi] - v[lo]) * frac;
  }
  free(v);
  return r;
}

void pd_metrics_from_samples(pd_metrics_t *m, const double *step_times_s,
                             const double *data_wait_s, size_t n) {
  if (m == NULL) return;
  m->avg_step_time_s = m->p50_step_time_s = m->p95_step_time_s = NAN;
  m->avg_dataloader_wait_s = m->dataloader_wait_fraction = NAN;
  if (n == 0) return;
  double step_sum = NAN, wait_sum = NAN;
  if (step_times_s != NULL) {
    step_sum = 0;
    for (size_t i = 0; i < n; i++) step_sum += step_times_s[i];
    m->avg_step_time_s = step_sum / (double)n;
    m->p50_step_time_s = pd_quantile(step_times_s, n, 0.50);
    m->p95_step_time_s = pd_quantile(step_times_s, n, 0.95);
  }
  if (data_wait_s != NULL) {
    wait_sum = 0;
    for (size_t i = 0; i < n; i++) wait_sum += data_wait_s[i];
    m->avg_dataloader_wait_s = wait_sum / (double)n;
  }
  if (!isnan(step_sum) && !isnan(wait_sum) && wait_sum + step_sum > 0)
    m->dataloader_wait_fraction = wait_sum / (wait_sum + step_sum);
}

/* ---- metrics from a trace --------------------------------------------------------------------- */

typedef struct {
  int64_t kernels, kernel_ns;
  int64_t memcpy_ns, memset_ns; /* device time of copies and sets */
  int64_t api_calls;
  int64_t sync_calls, sync_ns;
  int64_t alloc_calls, alloc_ns;
  int64_t h2d_bytes;
} step_acc_t;

static bool is_device_memory(pd_mem_kind_t k) {
  return k != PD_MEM_PAGEABLE && k != PD_MEM_PINNED;
}

typedef struct {
  int64_t t;
  int64_t bytes;
  size_t order;
} mem_delta_t;

static int mem_delta_cmp(const void *a, const void *b) {
  const mem_delta_t *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

/* Peak device memory: the largest total_allocated when the source reports it, else the
 * peak of the running sum of allocation sizes (memory live before the trace began is
 * then unknown and not counted). NaN when the trace has no device memory records. */
static int peak_memory(const pd_event_t *ev, size_t n, double *peak) {
  size_t nmem = 0;
  int64_t max_total = -1;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind != PD_EVENT_MEMORY || !is_device_memory(ev[i].u.memory.mem_kind)) continue;
    nmem++;
    if (ev[i].u.memory.total_allocated > max_total) max_total = ev[i].u.memory.total_allocated;
  }
  *peak = NAN;
  if (nmem == 0) return 0;
  if (max_total >= 0) {
    *peak = (double)max_total;
    return 0;
  }
  mem_delta_t *d = malloc(nmem * sizeof(*d));
  if (d == NULL) return PD_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind != PD_EVENT_MEMORY || !is_device_memory(ev[i].u.memory.mem_kind)) continue;
    d[k].t = ev[i].start_ns;
    d[k].bytes = ev[i].u.memory.bytes;
    d[k].order = k;
    k++;
  }
  qsort(d, nmem, sizeof(*d), mem_delta_cmp);
  int64_t live = 0, best = 0;
  for (size_t i = 0; i < nmem; i++) {
    live += d[i].bytes;
    if (live > best) best = live;
  }
  free(d);
  *peak = (double)best;
  return 0;
}

int pd_metrics_from_trace(const pd_trace_t *trace, pd_metrics_t *m) {
  if (trace == NULL || m == NULL) return PD_EINVAL;
  pd_trace_index_t ix;
  int rc = pd_trace_index_build(trace, &ix);
  if (rc != 0) return rc;
  rc = pd_metrics_from_index(trace, &ix, m);
  pd_trace_index_free(&ix);
  return rc;
}

int pd_metrics_from_index(const pd_trace_t *trace, const pd_trace_index_t *ix, pd_metrics_t *m) {
  if (trace == NULL || ix == NULL || m == NULL) return PD_EINVAL;
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);
  size_t nsteps = ix->nsteps;
  if (nsteps == 0) return PD_EINVAL;

  int rc = PD_ENOMEM;
  step_acc_t *acc = calloc(nsteps, sizeof(*acc));
  bool *blocking = calloc(n ? n : 1, sizeof(*blocking)); /* per event: a counted sync call */
  if (acc == NULL || blocking == NULL) goto out;

  /* Pass 1: host API calls (counts, sync and alloc classes). */
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind != PD_EVENT_RUNTIME && ev[i].kind != PD_EVENT_DRIVER) continue;
    long s = ix->step[i];
    if (s < 0) continue;
    acc[s].api_calls++;
    if (pd_api_is_sync(ev[i].name)) {
      blocking[i] = true;
      acc[s].sync_calls++;
      acc[s].sync_ns += pd_event_dur_ns(&ev[i]);
    }
    if (pd_api_is_device_alloc(ev[i].name)) {
      acc[s].alloc_calls++;
      acc[s].alloc_ns += pd_event_dur_ns(&ev[i]);
    }
  }

  /* Pass 2: SYNC records and GPU activity, in the step of their launching call. */
  for (size_t i = 0; i < n; i++) {
    const pd_event_t *e = &ev[i];
    const pd_event_t *call = ix->call[i] >= 0 ? &ev[ix->call[i]] : NULL;
    long s = ix->step[i];
    if (e->kind == PD_EVENT_SYNC) {
      /* A stream-wait-event record is a device-side wait: the host is not blocked. */
      if (e->u.sync.sync_kind == PD_SYNC_STREAM_WAIT_EVENT) continue;
      if (call != NULL && blocking[ix->call[i]]) {
        /* Same call seen twice (API record + SYNC record): count it once, with the
         * longer of the two durations. */
        if (s >= 0 && pd_event_dur_ns(e) > pd_event_dur_ns(call))
          acc[s].sync_ns += pd_event_dur_ns(e) - pd_event_dur_ns(call);
        continue;
      }
      if (s < 0) continue;
      acc[s].sync_calls++;
      acc[s].sync_ns += pd_event_dur_ns(e);
      continue;
    }
    if (!pd_event_is_gpu_activity(e->kind) || s < 0) continue;
    if (e->kind == PD_EVENT_KERNEL) {
      acc[s].kernels++;
      acc[s].kernel_ns += pd_event_dur_ns(e);
    } else if (e->kind == PD_EVENT_MEMCPY) {
      acc[s].memcpy_ns += pd_event_dur_ns(e);
      if (e->u.memcpy.copy_kind == PD_MEMCPY_HTOD) acc[s].h2d_bytes += (int64_t)e->u.memcpy.bytes;
    } else if (e->kind == PD_EVENT_MEMSET) {
      acc[s].memset_ns += pd_event_dur_ns(e);
    }
  }

  step_acc_t tot = {0};
  for (size_t s = 0; s < nsteps; s++) {
    tot.kernels += acc[s].kernels;
    tot.kernel_ns += acc[s].kernel_ns;
    tot.memcpy_ns += acc[s].memcpy_ns;
    tot.memset_ns += acc[s].memset_ns;
    tot.api_calls += acc[s].api_calls;
    tot.sync_calls += acc[s].sync_calls;
    tot.sync_ns += acc[s].sync_ns;
    tot.alloc_calls += acc[s].alloc_calls;
    tot.alloc_ns += acc[s].alloc_ns;
    tot.h2d_bytes += acc[s].h2d_bytes;
  }

  /* Busy time and the causes of the rest, from the one attribution. */
  pd_attribution_t attr;
  rc = pd_attribute(trace, ix, &attr);
  if (rc != 0) goto out;
  /* What each fix would save: the replay of the step's dependency graph. */
  rc = pd_replay_fill_metrics(trace, ix, NULL, m);
  if (rc != 0) goto out;
  rc = PD_ENOMEM;

  double peak;
  if (peak_memory(ev, n, &peak) != 0) goto out;

  double ns = (double)nsteps;
  m->steps = (int)nsteps;
  m->kernels_per_step = (double)tot.kernels / ns;
  m->avg_kernel_time_us = tot.kernels > 0 ? (double)tot.kernel_ns / (double)tot.kernels / 1e3 : NAN;
  m->gpu_kernel_time_per_step_us = (double)tot.kernel_ns / ns / 1e3;
  m->gpu_memcpy_time_per_step_us = (double)tot.memcpy_ns / ns / 1e3;
  m->gpu_memset_time_per_step_us = (double)tot.memset_ns / ns / 1e3;
  m->gpu_busy_fraction = attr.all_step_ns > 0 ? (double)attr.all_busy_ns / (double)attr.all_step_ns : NAN;
  m->runtime_calls_per_step = (double)tot.api_calls / ns;
  m->sync_calls_per_step = (double)tot.sync_calls / ns;
  m->sync_time_per_step_us = (double)tot.sync_ns / ns / 1e3;
  m->device_alloc_calls_per_step = (double)tot.alloc_calls / ns;
  m->device_alloc_time_per_step_us = (double)tot.alloc_ns / ns / 1e3;
  m->h2d_bytes_per_step = (double)tot.h2d_bytes / ns;
  m->peak_device_memory_bytes = peak;
  m->dropped_records = (double)pd_trace_dropped(trace);
  pd_attribution_to_metrics(&attr, trace, m);
  rc = 0;
out:
  free(acc);
  free(blocking);
  return rc;
}
