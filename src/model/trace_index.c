/* trace_index.c: one linked view of a trace, built once per analysis (pd_stats.h).
 *
 * Every consumer that asks "which call launched this kernel", "which op was it launched
 * in", "which step does it belong to" or "what is this op's parent" reads the answer from
 * here, so key averages, step metrics, the time attribution and the analyzer's tables all
 * count the same way:
 *
 *  - host ops (RANGE, CPU_OP, RUNTIME, DRIVER) nest per (pid, tid) by time: a stack sweep
 *    over the thread's ops sorted by start (ranges before calls, outer before inner on
 *    ties) gives each op its parent and depth, and each op the innermost range open when
 *    it began (itself for a range);
 *  - GPU activities (kernel, memcpy, memset) and SYNC records are linked to the RUNTIME or
 *    DRIVER call with their correlation id (the first such call wins), and inherit its op;
 *  - steps are the ProfilerStep#N ranges; an event belongs to the step whose [start, end)
 *    holds the start of its launching call (its own start when it has none), so a kernel
 *    that runs late still counts for the step that asked for it.
 *
 * Cost: one sort of the host ops, one sort of the steps, one hash map; O(n log n).
 */
#include "pd/pd_stats.h"

#include <stdlib.h>
#include <string.h>

#include "corr_map.h"

typedef struct {
  int64_t start, end;
  uint32_t pid, tid;
  int32_t ev;
  uint8_t is_range;
} hop_t;

static int hop_cmp(const void *pa, const void *pb) {
  const hop_t *a = pa, *b = pb;
  if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  /* same start: ranges open before API calls, and the longer (outer) op first */
  if (a->is_range != b->is_range) return a->is_range ? -1 : 1;
  if (a->end != b->end) return a->end > b->end ? -1 : 1;
  return (a->ev > b->ev) - (a->ev < b->ev);
}

static int step_cmp(const void *pa, const void *pb) {
  const pd_index_step_t *a = pa, *b = pb;
  if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
  return (a->ev > b->ev) - (a->ev < b->ev);
}

bool pd_event_is_gpu_activity(pd_event_kind_t k) {
  return k == PD_EVENT_KERNEL || k == PD_EVENT_MEMCPY || k == PD_EVENT_MEMSET;
}

bool pd_event_is_host_op(pd_event_kind_t k) {
  return k == PD_EVENT_RANGE || k == PD_EVENT_CPU_OP || k == PD_EVENT_RUNTIME || k == PD_EVENT_DRIVER;
}

int64_t pd_event_dur_ns(const pd_event_t *e) {
  return e->end_ns > e->start_ns ? e->end_ns - e->start_ns : 0;
}

void pd_trace_index_free(pd_trace_index_t *ix) {
  if (ix == NULL) return;
  free(ix->call);
  free(ix->op);
  free(ix->parent);
  free(ix->depth);
  free(ix->step);
  free(ix->host_order);
  free(ix->steps);
  memset(ix, 0, sizeof(*ix));
}

long pd_trace_index_step_at(const pd_trace_index_t *ix, int64_t t) {
  size_t lo = 0, hi = ix->nsteps; /* first step with start > t */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (ix->steps[mid].start_ns <= t) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return -1;
  return t < ix->steps[lo - 1].end_ns ? (long)(lo - 1) : -1;
}

int pd_trace_index_build(const pd_trace_t *trace, pd_trace_index_t *ix) {
  if (trace == NULL || ix == NULL) return PD_EINVAL;
  memset(ix, 0, sizeof(*ix));
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);
  if (n > (size_t)INT32_MAX) return PD_EINVAL; /* indices are int32 */
  ix->n = n;
  size_t nh = 0, ncalls = 0, nsteps = 0;
  for (size_t i = 0; i < n; i++) {
    pd_event_kind_t k = ev[i].kind;
    if (pd_event_is_host_op(k)) nh++;
    if (k == PD_EVENT_RUNTIME || k == PD_EVENT_DRIVER) ncalls++;
    if (k == PD_EVENT_RANGE && ev[i].u.range.step >= 0) nsteps++;
  }
  size_t n1 = n ? n : 1;
  ix->call = malloc(n1 * sizeof(*ix->call));
  ix->op = malloc(n1 * sizeof(*ix->op));
  ix->parent = malloc(n1 * sizeof(*ix->parent));
  ix->depth = calloc(n1, sizeof(*ix->depth));
  ix->step = malloc(n1 * sizeof(*ix->step));
  ix->host_order = malloc((nh ? nh : 1) * sizeof(*ix->host_order));
  ix->steps = malloc((nsteps ? nsteps : 1) * sizeof(*ix->steps));
  hop_t *h = malloc((nh ? nh : 1) * sizeof(*h));
  int32_t *stack = malloc((nh ? nh : 1) * sizeof(*stack));
  pd_corr_map_t cm = {0};
  (void)pd_corr_map_init(&cm, ncalls); /* a failure leaves keys or vals NULL: checked below */
  int rc = PD_ENOMEM;
  if (!ix->call || !ix->op || !ix->parent || !ix->depth || !ix->step || !ix->host_order || !ix->steps || !h ||
      !stack || !cm.keys || !cm.vals)
    goto out;
  for (size_t i = 0; i < n; i++) ix->call[i] = ix->op[i] = ix->parent[i] = ix->step[i] = -1;

  /* Steps. */
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind != PD_EVENT_RANGE || ev[i].u.range.step < 0) continue;
    ix->steps[k].start_ns = ev[i].start_ns;
    ix->steps[k].end_ns = ev[i].end_ns > ev[i].start_ns ? ev[i].end_ns : ev[i].start_ns;
    ix->steps[k].number = ev[i].u.range.step;
    ix->steps[k].ev = (int32_t)i;
    k++;
  }
  ix->nsteps = nsteps;
  qsort(ix->steps, nsteps, sizeof(*ix->steps), step_cmp);

  /* Host ops: nesting per thread. */
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    pd_event_kind_t kk = ev[i].kind;
    if (!pd_event_is_host_op(kk)) continue;
    h[j].pid = ev[i].pid;
    h[j].tid = ev[i].tid;
    h[j].start = ev[i].start_ns;
    h[j].end = ev[i].end_ns > ev[i].start_ns ? ev[i].end_ns : ev[i].start_ns;
    h[j].ev = (int32_t)i;
    h[j].is_range = (kk == PD_EVENT_RANGE || kk == PD_EVENT_CPU_OP);
    j++;
  }
  qsort(h, nh, sizeof(*h), hop_cmp);
  size_t depth = 0;
  for (size_t i = 0; i < nh; i++) {
    if (i > 0 && (h[i].pid != h[i - 1].pid || h[i].tid != h[i - 1].tid)) depth = 0;
    while (depth > 0 && h[stack[depth - 1]].end <= h[i].start) depth--;
    int32_t e = h[i].ev;
    int32_t p = depth > 0 ? h[stack[depth - 1]].ev : -1;
    ix->host_order[i] = e;
    ix->parent[e] = p;
    ix->depth[e] = (uint32_t)depth;
    ix->op[e] = h[i].is_range ? e : (p >= 0 ? ix->op[p] : -1);
    stack[depth++] = (int32_t)i;
    if (!h[i].is_range && ev[e].correlation_id != 0) pd_corr_map_put(&cm, ev[e].correlation_id, e);
    ix->step[e] = (int32_t)pd_trace_index_step_at(ix, ev[e].start_ns);
  }
  ix->nhost = nh;

  /* Device side: the launching call, its op and its step. */
  for (size_t i = 0; i < n; i++) {
    pd_event_kind_t kk = ev[i].kind;
    if (pd_event_is_host_op(kk)) continue;
    int32_t c = -1;
    if ((pd_event_is_gpu_activity(kk) || kk == PD_EVENT_SYNC || kk == PD_EVENT_GPU_RANGE) &&
        ev[i].correlation_id != 0)
      c = pd_corr_map_get(&cm, ev[i].correlation_id);
    ix->call[i] = c;
    ix->op[i] = c >= 0 ? ix->op[c] : -1;
    ix->step[i] = (int32_t)pd_trace_index_step_at(ix, c >= 0 ? ev[c].start_ns : ev[i].start_ns);
  }
  rc = 0;
out:
  free(h);
  free(stack);
  pd_corr_map_free(&cm);
  if (rc != 0) pd_trace_index_free(ix);
  return rc;
}
