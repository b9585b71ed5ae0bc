/* pipeline.c: the one cycle pipeline (pd_pipeline.h): write -> link/index -> key
 * averages -> metrics for each cycle, then samples -> verdict -> sorted tables.
 */
#include "pd/pd_pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "pd/pd_classify.h"

int pd_pipeline_init(pd_pipeline_t *pl, const pd_pipeline_opts_t *opts) {
  if (pl == NULL) return PD_EINVAL;
  memset(pl, 0, sizeof(*pl));
  pd_metrics_init(&pl->metrics);
  pd_pipeline_opts_t none = {0};
  if (opts == NULL) opts = &none;
  bool ok = (pl->ops = pd_op_table_create(PD_GROUP_BY_RANGE)) != NULL;
  if (ok && opts->kernels) ok = (pl->kernels = pd_op_table_create(PD_GROUP_BY_KERNEL)) != NULL;
  if (ok && opts->group_by_stack_n > 0)
    ok = (pl->by_stack = pd_op_table_create(PD_GROUP_BY_RANGE)) != NULL &&
         pd_op_table_set_group_by_stack(pl->by_stack, opts->group_by_stack_n) == 0;
  if (ok && opts->stacks)
    ok = (pl->stacks = pd_op_table_create(PD_GROUP_BY_RANGE)) != NULL &&
         pd_op_table_set_group_by_stack(pl->stacks, PD_STACK_ALL_FRAMES) == 0;
  pl->failed = PD_PIPE_OK;
  pl->steps_required = opts->steps_required;
  if (!ok) {
    pd_pipeline_free(pl);
    return PD_ENOMEM;
  }
  return 0;
}

void pd_pipeline_free(pd_pipeline_t *pl) {
  if (pl == NULL) return;
  pd_op_table_destroy(pl->ops);
  pd_op_table_destroy(pl->kernels);
  pd_op_table_destroy(pl->by_stack);
  pd_op_table_destroy(pl->stacks);
  pl->ops = pl->kernels = pl->by_stack = pl->stacks = NULL;
  pd_cycle_log_free(&pl->cycle_log);
}

/* Records the failing stage; returns rc. */
static int fail(pd_pipeline_t *pl, pd_pipe_stage_t stage, int rc) {
  pl->failed = stage;
  return rc;
}

int pd_pipeline_add_cycle(pd_pipeline_t *pl, const pd_trace_t *cycle, const char *path,
                          const pd_trace_meta_t *meta, pd_trace_index_t *ix_out) {
  if (ix_out != NULL) memset(ix_out, 0, sizeof(*ix_out));
  if (pl == NULL || cycle == NULL) return PD_EINVAL;
  pl->failed = PD_PIPE_OK;
  /* write: the trace file carries its own links (the writer builds them) */
  if (path != NULL) {
    int rc = pd_trace_write_file(path, cycle, meta);
    if (rc != 0) return fail(pl, PD_PIPE_WRITE, rc);
  }
  /* link + index: one linked view for every table and metric */
  pd_trace_index_t ix;
  int rc = pd_trace_index_build(cycle, &ix);
  if (rc != 0) return fail(pl, PD_PIPE_INDEX, rc);
  rc = pd_op_table_add_index(pl->ops, cycle, &ix);
  if (rc == 0 && pl->kernels != NULL) rc = pd_op_table_add_trace(pl->kernels, cycle);
  if (rc == 0 && pl->by_stack != NULL) rc = pd_op_table_add_index(pl->by_stack, cycle, &ix);
  if (rc == 0 && pl->stacks != NULL) rc = pd_op_table_add_index(pl->stacks, cycle, &ix);
  if (rc != 0) {
    pd_trace_index_free(&ix);
    return fail(pl, PD_PIPE_INDEX, rc);
  }
  /* metrics: a cycle without steps has none (a trace read back may hold no step) */
  if (ix.nsteps > 0 || pl->steps_required) {
    rc = pd_metrics_from_index(cycle, &ix, &pl->metrics);
    if (rc == 0) rc = pd_cycle_log_add(&pl->cycle_log, &pl->metrics, (int64_t)ix.nsteps);
    if (rc != 0) {
      pd_trace_index_free(&ix);
      return fail(pl, PD_PIPE_METRICS, rc);
    }
    pl->have_metrics = true;
  }
  pl->cycles++;
  if (ix_out != NULL) *ix_out = ix;
  else pd_trace_index_free(&ix);
  return 0;
}

/* ---- data-wait time ------------------------------------------------------------------------- */

int pd_data_wait_union(const pd_trace_t *trace, pd_interval_t **out, size_t *n) {
  if (out != NULL) *out = NULL;
  if (n != NULL) *n = 0;
  if (trace == NULL || out == NULL || n == NULL) return PD_EINVAL;
  const pd_event_t *ev = pd_trace_events(trace);
  size_t count = pd_trace_count(trace), k = 0;
  for (size_t i = 0; i < count; i++)
    if (pd_event_is_data_wait(&ev[i]) && ev[i].end_ns > ev[i].start_ns) k++;
  if (k == 0) return 0;
  pd_interval_t *v = malloc(k * sizeof(*v));
  if (v == NULL) return PD_ENOMEM;
  size_t m = 0;
  for (size_t i = 0; i < count; i++) {
    if (!pd_event_is_data_wait(&ev[i]) || ev[i].end_ns <= ev[i].start_ns) continue;
    /* events are sorted by start: merge as they come */
    if (m > 0 && ev[i].start_ns <= v[m - 1].end_ns) {
      if (ev[i].end_ns > v[m - 1].end_ns) v[m - 1].end_ns = ev[i].end_ns;
    } else {
      v[m++] = (pd_interval_t){ev[i].start_ns, ev[i].end_ns};
    }
  }
  *out = v;
  *n = m;
  return 0;
}

int64_t pd_interval_overlap_ns(const pd_interval_t *v, size_t n, int64_t start_ns, int64_t end_ns) {
  size_t lo = 0, hi = n; /* first interval ending after start_ns */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].end_ns <= start_ns) lo = mid + 1;
    else hi = mid;
  }
  int64_t acc = 0;
  for (size_t i = lo; i < n && v[i].start_ns < end_ns; i++) {
    int64_t a = v[i].start_ns > start_ns ? v[i].start_ns : start_ns;
    int64_t b = v[i].end_ns < end_ns ? v[i].end_ns : end_ns;
    if (b > a) acc = pd_add_sat_i64(acc, pd_sub_sat_i64(b, a));
  }
  return acc;
}

int pd_pipeline_trace_samples(const pd_trace_t *trace, const pd_trace_index_t *ix, double **step_s,
                              double **wait_s) {
  if (step_s != NULL) *step_s = NULL;
  if (wait_s != NULL) *wait_s = NULL;
  if (trace == NULL || ix == NULL || step_s == NULL || wait_s == NULL) return PD_EINVAL;
  size_t n = ix->nsteps;
  if (n == 0) return 0;
  pd_interval_t *waits = NULL;
  size_t nwaits = 0;
  int rc = pd_data_wait_union(trace, &waits, &nwaits);
  if (rc != 0) return rc;
  double *st = malloc(n * sizeof(double)), *wt = malloc(n * sizeof(double));
  if (st == NULL || wt == NULL) {
    free(st);
    free(wt);
    free(waits);
    return PD_ENOMEM;
  }
  for (size_t s = 0; s < n; s++) {
    const pd_index_step_t *step = &ix->steps[s];
    const int64_t wait = pd_interval_overlap_ns(waits, nwaits, step->start_ns, step->end_ns);
    wt[s] = (double)wait / 1e9;
    st[s] = (double)(step->end_ns - step->start_ns - wait) / 1e9;
  }
  free(waits);
  *step_s = st;
  *wait_s = wt;
  return 0;
}

/* ---- verdict and reports ---------------------------------------------------------------------- */

void pd_pipeline_verdict(pd_pipeline_t *pl, const double *step_s, const double *wait_s, size_t n,
                         pd_advice_t advice, pd_verdict_t *verdict) {
  if (pl == NULL) return;
  pd_metrics_from_samples(&pl->metrics, step_s, wait_s, n);
  (void)pd_cycle_log_overall(&pl->cycle_log, &pl->metrics);
  if (verdict != NULL) pd_diagnose(&pl->metrics, advice, verdict);
}

void pd_pipeline_sort(pd_pipeline_t *pl, pd_sort_key_t key, pd_sort_key_t stacks_key) {
  if (pl == NULL) return;
  pd_op_table_sort(pl->ops, key);
  pd_op_table_sort(pl->kernels, key);
  pd_op_table_sort(pl->by_stack, key);
  pd_op_table_sort(pl->stacks, stacks_key);
}
