/* attribute.c: splits each step's wall time into causes (pd_stats.h, PD_CAUSE_MAP).
 *
 * Per ProfilerStep#N window [S, E):
 *  1. GPU busy time is the union of kernel/memcpy/memset intervals (all devices and
 *     streams) inside the window. Busy time that only host-to-device copies fill is input
 *     loading (DATA); the rest is GPU_COMPUTE.
 *  2. Every idle gap [g0, g1) inside the window ends with the GPU activity that starts at
 *     g1 (for the tail gap, the next activity after the window). The call that launched
 *     it began at l0 on thread T. From l0 on, the work was on its way: that part of the
 *     gap is launch latency (LAUNCH_BOUND). Before l0 the host had not issued the work
 *     yet, and what T was doing says why:
 *       - time inside data-loading ranges is DATA;
 *       - each host-blocking call on T (a synchronizing call or a device-to-host
 *         read-back: SYNC; cudaMalloc/cudaFree: ALLOCATION; a copy from pageable memory:
 *         PAGEABLE_COPY) put the host behind by its duration; that is credit, claimed by
 *         this and later gaps of the step until used up (see attribute_gap);
 *       - what is left is LAUNCH_BOUND: the host was busy issuing earlier work (op
 *         dispatch, launch calls) and fell behind the GPU.
 *     A gap with no launching call in the trace is OTHER.
 * The causes are disjoint and sum to the step's wall time. O(n log n).
 */
#include "pd/pd_classify.h"
#include "pd/pd_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const cause_names[PD_CAUSE_COUNT] = {
#define PD_CAUSE_STR(name, text) text,
    PD_CAUSE_MAP(PD_CAUSE_STR)
#undef PD_CAUSE_STR
};

const char *pd_cause_name(pd_cause_t c) {
  return (int)c >= 0 && c < PD_CAUSE_COUNT ? cause_names[c] : "?";
}

/* ---- intervals -------------------------------------------------------------------------------- */

typedef struct {
  int64_t start, end;
} span_t;

static int span_cmp(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* Sorts and merges in place; returns the merged count. */
static size_t merge_spans(span_t *s, size_t n) {
  qsort(s, n, sizeof(*s), span_cmp);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m > 0 && s[i].start <= s[m - 1].end) {
      if (s[i].end > s[m - 1].end) s[m - 1].end = s[i].end;
    } else {
      s[m++] = s[i];
    }
  }
  return m;
}

/* First merged span with end > t. */
static size_t first_ending_after(const span_t *s, size_t n, int64_t t) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s[mid].end <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Length of the part of [a, b) covered by merged spans s. */
static int64_t covered(const span_t *s, size_t n, int64_t a, int64_t b) {
  int64_t sum = 0;
  for (size_t i = first_ending_after(s, n, a); i < n && s[i].start < b; i++) {
    int64_t x = s[i].start > a ? s[i].start : a;
    int64_t y = s[i].end < b ? s[i].end : b;
    if (y > x) sum += y - x;
  }
  return sum;
}

/* ---- blocking calls ------------------------------------------------------------------------------- */

typedef struct {
  uint32_t pid, tid;
  int64_t start, end;
  pd_cause_t cause;
} block_t;

static int block_cmp(const void *pa, const void *pb) {
  const block_t *a = pa, *b = pb;
  if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  if (a->end != b->end) return a->end < b->end ? -1 : 1;
  return (a->start > b->start) - (a->start < b->start);
}

/* First blocking call of thread (pid, tid) with end > t. */
static size_t first_block(const block_t *b, size_t n, uint32_t pid, uint32_t tid, int64_t t) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const block_t *x = &b[mid];
    bool before = x->pid < pid || (x->pid == pid && (x->tid < tid || (x->tid == tid && x->end <= t)));
    if (before) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* ---- the attribution ------------------------------------------------------------------------------- */

typedef struct {
  int64_t start;
  int32_t ev;
} act_t;

static int act_cmp(const void *pa, const void *pb) {
  const act_t *a = pa, *b = pb;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  return (a->ev > b->ev) - (a->ev < b->ev);
}

static int i64_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* First activity with start >= t. */
static size_t first_act_from(const act_t *a, size_t n, int64_t t) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (a[mid].start < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The host's lead per launching thread: blocking time seen so far in the step, by cause,
 * not yet matched against GPU idle. */
#define MAX_LEAD_THREADS 16
typedef struct {
  uint32_t pid, tid;
  size_t next;                      /* first blocking call of the thread not yet credited */
  int64_t credit[PD_CAUSE_COUNT];
} lead_t;

typedef struct {
  const pd_event_t *ev;
  const pd_trace_index_t *ix;
  const act_t *acts;
  size_t nacts;
  const span_t *data;
  size_t ndata;
  const block_t *blocks;
  size_t nblocks;
  const int8_t *call_cause;
  pd_attribution_t *out;
  int64_t step_start;
  lead_t lead[MAX_LEAD_THREADS];
  size_t nlead;
} ctx_t;

static lead_t *lead_of(ctx_t *c, uint32_t pid, uint32_t tid) {
  for (size_t i = 0; i < c->nlead; i++)
    if (c->lead[i].pid == pid && c->lead[i].tid == tid) return &c->lead[i];
  if (c->nlead == MAX_LEAD_THREADS) return NULL; /* more launching threads: no credit */
  lead_t *l = &c->lead[c->nlead++];
  memset(l, 0, sizeof(*l));
  l->pid = pid;
  l->tid = tid;
  l->next = first_block(c->blocks, c->nblocks, pid, tid, c->step_start); /* this step's calls */
  return l;
}

/* Claim order of the blocking causes when several have credit. */
static const pd_cause_t blocking_causes[] = {PD_CAUSE_SYNC, PD_CAUSE_ALLOCATION, PD_CAUSE_PAGEABLE_COPY};

/* One idle gap [g0, g1) whose end is waiting for activity acts[next] (nacts: none).
 *
 * A blocking call on the launching thread put the host behind by its duration: without it,
 * every later launch of that thread would have come that much sooner. So its duration is
 * credit, and each later stretch of GPU idle that waited for the host (the part before the
 * next launch) is claimed from the credit first, until it is used up or the step ends.
 * In a GPU-bound stretch nothing waits for the host and the credit goes unused (the host
 * was ahead anyway); in a host-bound one the step pays the blocked time in full. */
static void attribute_gap(ctx_t *c, int64_t g0, int64_t g1, size_t next) {
  int64_t *cost = c->out->cost_ns;
  if (g1 <= g0) return;
  int32_t call = next < c->nacts ? c->ix->call[c->acts[next].ev] : -1;
  if (call < 0) {
    cost[PD_CAUSE_OTHER] += g1 - g0;
    return;
  }
  const pd_event_t *l = &c->ev[call];
  int64_t hp_end = l->start_ns < g1 ? l->start_ns : g1; /* host had not issued it before this */
  if (hp_end < g0) hp_end = g0;
  /* From the call on, the work was on its way: launch latency, unless the call is a copy
   * from pageable memory, which the driver stages through a pinned buffer first. */
  cost[c->call_cause[call] == PD_CAUSE_PAGEABLE_COPY ? PD_CAUSE_PAGEABLE_COPY : PD_CAUSE_LAUNCH_BOUND] += g1 - hp_end;
  int64_t left = hp_end - g0;
  if (left <= 0) return;
  int64_t data = covered(c->data, c->ndata, g0, hp_end);
  cost[PD_CAUSE_DATA] += data;
  left -= data;
  lead_t *ld = lead_of(c, l->pid, l->tid);
  if (ld != NULL) {
    /* Credit every blocking call of the thread that ended before it launched this work. */
    for (; ld->next < c->nblocks && c->blocks[ld->next].pid == l->pid && c->blocks[ld->next].tid == l->tid &&
           c->blocks[ld->next].end <= hp_end;
         ld->next++) {
      const block_t *b = &c->blocks[ld->next];
      if (b->end > c->step_start) ld->credit[b->cause] += b->end - (b->start > c->step_start ? b->start : c->step_start);
    }
    for (size_t k = 0; k < sizeof blocking_causes / sizeof blocking_causes[0] && left > 0; k++) {
      pd_cause_t bc = blocking_causes[k];
      int64_t claim = ld->credit[bc] < left ? ld->credit[bc] : left;
      cost[bc] += claim;
      ld->credit[bc] -= claim;
      left -= claim;
    }
  }
  cost[PD_CAUSE_LAUNCH_BOUND] += left;
}

int pd_attribute(const pd_trace_t *trace, const pd_trace_index_t *ix, pd_attribution_t *out) {
  if (trace == NULL || ix == NULL || out == NULL) return PD_EINVAL;
  memset(out, 0, sizeof(*out));
  if (ix->nsteps == 0) return PD_EINVAL;
  /* Sums over steps stay in int64: a trace whose steps could overflow them (a span of
   * centuries in ns) is not a profile. */
  const int64_t step_limit = INT64_MAX / 2 / (int64_t)(ix->nsteps + 1);
  for (size_t s = 0; s < ix->nsteps; s++) {
    int64_t S = ix->steps[s].start_ns, E = ix->steps[s].end_ns;
    if ((S < 0 && E > INT64_MAX + S) || E - S > step_limit) return PD_EPARSE;
  }
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);

  size_t nacts = 0, ndata = 0, nblocks = 0;
  for (size_t i = 0; i < n; i++) {
    pd_event_kind_t k = ev[i].kind;
    if (pd_event_is_gpu_activity(k)) nacts++;
    else if ((k == PD_EVENT_RANGE || k == PD_EVENT_CPU_OP) && pd_range_is_data_wait(ev[i].name)) ndata++;
    else if (k == PD_EVENT_RUNTIME || k == PD_EVENT_DRIVER) nblocks++;
  }
  int rc = PD_ENOMEM;
  size_t na1 = nacts ? nacts : 1;
  act_t *acts = malloc(na1 * sizeof(*acts));
  span_t *all = malloc(na1 * sizeof(*all));
  span_t *comp = malloc(na1 * sizeof(*comp));
  span_t *data = malloc((ndata ? ndata : 1) * sizeof(*data));
  block_t *blocks = malloc((nblocks ? nblocks : 1) * sizeof(*blocks));
  int8_t *call_cause = malloc((n ? n : 1) * sizeof(*call_cause)); /* per call: -1 or a cause */
  if (!acts || !all || !comp || !data || !blocks || !call_cause) goto out;

  for (size_t i = 0; i < n; i++) call_cause[i] = -1;
  size_t nall = 0, ncomp = 0, nd = 0;
  for (size_t i = 0; i < n; i++) {
    const pd_event_t *e = &ev[i];
    if ((e->kind == PD_EVENT_RANGE || e->kind == PD_EVENT_CPU_OP) && pd_range_is_data_wait(e->name)) {
      data[nd].start = e->start_ns;
      data[nd].end = e->end_ns > e->start_ns ? e->end_ns : e->start_ns;
      nd++;
      continue;
    }
    if (!pd_event_is_gpu_activity(e->kind)) continue;
    int64_t end = e->end_ns > e->start_ns ? e->end_ns : e->start_ns;
    acts[nall].start = e->start_ns;
    acts[nall].ev = (int32_t)i;
    all[nall].start = e->start_ns;
    all[nall].end = end;
    nall++;
    bool h2d = e->kind == PD_EVENT_MEMCPY && e->u.memcpy.copy_kind == PD_MEMCPY_HTOD;
    if (!h2d) {
      comp[ncomp].start = e->start_ns;
      comp[ncomp].end = end;
      ncomp++;
    }
    int32_t call = ix->call[i];
    long s = ix->step[i];
    if (e->kind == PD_EVENT_MEMCPY) {
      bool pageable_src = e->u.memcpy.src_kind == PD_MEM_PAGEABLE;
      bool pageable_dst = e->u.memcpy.dst_kind == PD_MEM_PAGEABLE;
      /* A read-back of a device value (.item(), tensor.cpu()) is the "read" of a sync: its
       * call is host time spent on the synchronization. A copy from pageable memory is
       * staged by the driver and blocks the host: the pinned-memory problem. */
      if (call >= 0 && e->u.memcpy.copy_kind == PD_MEMCPY_DTOH) call_cause[call] = PD_CAUSE_SYNC;
      else if (call >= 0 && pageable_src) call_cause[call] = PD_CAUSE_PAGEABLE_COPY;
      if (s >= 0 && (pageable_src || pageable_dst) && e->u.memcpy.copy_kind != PD_MEMCPY_DTOH) {
        out->pageable_copies++;
        out->pageable_bytes += (int64_t)e->u.memcpy.bytes;
      }
    } else if (e->kind == PD_EVENT_KERNEL && s >= 0) {
      int64_t d = pd_event_dur_ns(e);
      bool tc = false;
      out->kernel_ns += d;
      if (pd_kernel_is_matmul(e->name, &tc)) {
        out->matmul_ns += d;
        if (!tc) out->matmul_fp32_ns += d;
      }
    }
  }
  size_t nb = 0;
  for (size_t i = 0; i < n; i++) {
    const pd_event_t *e = &ev[i];
    if (e->kind != PD_EVENT_RUNTIME && e->kind != PD_EVENT_DRIVER) continue;
    int cause = call_cause[i];
    if (cause < 0 && pd_api_is_device_alloc(e->name)) cause = PD_CAUSE_ALLOCATION;
    if (cause < 0 && pd_api_is_sync(e->name)) cause = PD_CAUSE_SYNC;
    if (ix->step[i] >= 0) {
      if (pd_api_is_sync_memcpy(e->name)) out->sync_memcpy_calls++;
      if (pd_api_is_sync_memset(e->name)) out->sync_memset_calls++;
    }
    if (cause < 0) continue;
    blocks[nb].pid = e->pid;
    blocks[nb].tid = e->tid;
    blocks[nb].start = e->start_ns;
    blocks[nb].end = e->end_ns > e->start_ns ? e->end_ns : e->start_ns;
    blocks[nb].cause = (pd_cause_t)cause;
    nb++;
  }
  qsort(acts, nall, sizeof(*acts), act_cmp);
  qsort(blocks, nb, sizeof(*blocks), block_cmp);
  size_t mall = merge_spans(all, nall);
  size_t mcomp = merge_spans(comp, ncomp);
  size_t mdata = merge_spans(data, nd);

  ctx_t c = {.ev = ev, .ix = ix, .acts = acts, .nacts = nall, .data = data, .ndata = mdata, .blocks = blocks,
             .nblocks = nb, .call_cause = call_cause, .out = out};
  /* A step more than twice as long as the median step is a hiccup (a loader thread
   * descheduled, a page-fault storm) only while such steps are rare: at most one in ten.
   * Then it is counted apart, so that one slow step in sixteen does not name the
   * bottleneck of the other fifteen. More of them are a recurring cause (a bursty data
   * loader whose workers fall behind every few steps), and they stay in the costs. */
  int64_t median_ns = 0;
  if (ix->nsteps >= 10) {
    int64_t *w = malloc(ix->nsteps * sizeof(*w));
    if (w == NULL) goto out;
    for (size_t s = 0; s < ix->nsteps; s++) w[s] = ix->steps[s].end_ns - ix->steps[s].start_ns;
    qsort(w, ix->nsteps, sizeof(*w), i64_cmp);
    median_ns = w[ix->nsteps / 2];
    size_t slow = 0;
    for (size_t i = 0; i < ix->nsteps; i++) slow += w[i] > 2 * median_ns;
    if (slow * 10 > ix->nsteps) median_ns = 0; /* recurring: no step is set apart */
    free(w);
  }
  for (size_t s = 0; s < ix->nsteps; s++) {
    int64_t S = ix->steps[s].start_ns, E = ix->steps[s].end_ns;
    if (E <= S) continue;
    int64_t busy = covered(all, mall, S, E);
    out->all_step_ns += E - S;
    out->all_busy_ns += busy;
    if (median_ns > 0 && E - S > 2 * median_ns) {
      out->slow_steps++;
      if (E - S > out->slowest_step_ns) out->slowest_step_ns = E - S;
      continue;
    }
    c.step_start = S;
    c.nlead = 0; /* the lead is counted within a step */
    out->steps++;
    out->step_ns += E - S;
    int64_t compute = covered(comp, mcomp, S, E);
    out->cost_ns[PD_CAUSE_GPU_COMPUTE] += compute;
    out->cost_ns[PD_CAUSE_DATA] += busy - compute; /* only input copies running */
    int64_t cursor = S, max_gap = 0;
    for (size_t i = first_ending_after(all, mall, S); i < mall && all[i].start < E; i++) {
      if (all[i].start > cursor) {
        attribute_gap(&c, cursor, all[i].start, first_act_from(acts, nall, all[i].start));
        if (all[i].start - cursor > max_gap) max_gap = all[i].start - cursor;
      }
      if (all[i].end > cursor) cursor = all[i].end;
    }
    if (cursor < E) {
      attribute_gap(&c, cursor, E, first_act_from(acts, nall, E));
      if (E - cursor > max_gap) max_gap = E - cursor;
    }
    out->max_gap_ns_sum += max_gap;
  }
  rc = out->steps > 0 ? 0 : PD_EINVAL;
out:
  free(acts);
  free(all);
  free(comp);
  free(data);
  free(blocks);
  free(call_cause);
  return rc;
}

/* Metric fields of the costs, in cause order. */
static double *cost_field(pd_metrics_t *m, pd_cause_t c) {
  switch (c) {
    case PD_CAUSE_DATA: return &m->cost_data_wait_us_per_step;
    case PD_CAUSE_SYNC: return &m->cost_sync_us_per_step;
    case PD_CAUSE_ALLOCATION: return &m->cost_allocation_us_per_step;
    case PD_CAUSE_PAGEABLE_COPY: return &m->cost_pageable_copy_us_per_step;
    case PD_CAUSE_LAUNCH_BOUND: return &m->cost_launch_bound_us_per_step;
    case PD_CAUSE_GPU_COMPUTE: return &m->cost_gpu_compute_us_per_step;
    case PD_CAUSE_OTHER: return &m->cost_other_us_per_step;
    case PD_CAUSE_COUNT: break;
  }
  return NULL;
}

void pd_attribution_to_metrics(const pd_attribution_t *a, const pd_trace_t *trace, pd_metrics_t *m) {
  if (a == NULL || m == NULL || a->steps == 0) return;
  double ns = (double)a->steps; /* the steps the costs come from (slow ones apart) */
  m->step_wall_us = (double)a->step_ns / ns / 1e3;
  for (int c = 0; c < PD_CAUSE_COUNT; c++) *cost_field(m, (pd_cause_t)c) = (double)a->cost_ns[c] / ns / 1e3;
  m->pageable_copies_per_step = (double)a->pageable_copies / ns;
  m->pageable_copy_bytes_per_step = (double)a->pageable_bytes / ns;
  m->sync_memcpy_calls_per_step = (double)a->sync_memcpy_calls / ns;
  m->sync_memset_calls_per_step = (double)a->sync_memset_calls / ns;
  m->max_gpu_gap_us = (double)a->max_gap_ns_sum / ns / 1e3;
  m->slow_steps = (double)a->slow_steps;
  m->fp32_matmul_time_share = a->kernel_ns > 0 ? (double)a->matmul_fp32_ns / (double)a->kernel_ns : NAN;
  if (trace != NULL && pd_trace_device_count(trace) > 0 && pd_trace_devices(trace)[0].total_global_mem > 0)
    m->device_memory_total_bytes = (double)pd_trace_devices(trace)[0].total_global_mem;
}
