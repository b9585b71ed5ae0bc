/* analyze_breakdown.c: step-time breakdown, GPU utilization and the GPU idle-time split.
 *
 * Each ProfilerStep#N range is carved into disjoint parts the way torch-tb-profiler's
 * step-time breakdown does: at every instant the highest-priority activity that is
 * running owns the time, in the order kernel > memcpy > memset > runtime (CUDA runtime
 * and driver calls) > dataloader (pd_range_is_data_wait(): torch's enumerate(DataLoader)#...
 * names, which ours now use, and our older DataLoader.wait)
 * > CPU exec (any other host range or torch op) > other. One sweep over the start/end
 * points of all such events turns the timeline into labelled segments; a step adds up
 * the segments inside it and gives the remainder to "other", so the parts are integers
 * that sum to the step exactly. GPU busy = kernel + memcpy + memset parts (the union of
 * GPU activity on all streams and devices, as pd_metrics_from_trace counts it).
 *
 * Idle time (step minus GPU busy) is split into Holistic Trace Analysis' categories,
 * applied to the union of GPU activity: each idle gap ends when some work starts; if the
 * call that launched that work had not returned when the gap opened, the GPU waited for
 * the host to enqueue it (host wait); else the work was queued, and a gap shorter than
 * the kernel-wait threshold is launch overhead between queued work (kernel wait); the
 * rest is other (waits on events or streams, long gaps without a launching call in the
 * trace, the tail after the last activity). Two choices differ from HTA, for reasons
 * measured on our traces (docs/analyzer.md): the call's end, not its start, decides
 * whether work was queued (a cudaLaunchKernel takes ~3 us, so by HTA's rule a
 * launch-bound loop hardly shows any host wait), and the default threshold is 3 us, not
 * 30 ns (no gap between back-to-back kernels on a Hopper GPU is that short).
 */
#include "analyze_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_classify.h"
#include "pd/pd_pipeline.h"

static const char *const part_names[PD_PART_COUNT] = {
#define PD_PART_TEXT(name, text) text,
    PD_PART_MAP(PD_PART_TEXT)
#undef PD_PART_TEXT
};

static const char *const idle_names[PD_IDLE_COUNT] = {
#define PD_IDLE_TEXT(name, text) text,
    PD_IDLE_MAP(PD_IDLE_TEXT)
#undef PD_IDLE_TEXT
};

const char *pd_part_name(pd_part_t p) {
  if ((int)p < 0 || p >= PD_PART_COUNT) return "unknown";
  return part_names[p];
}

const char *pd_idle_name(pd_idle_t k) {
  if ((int)k < 0 || k >= PD_IDLE_COUNT) return "unknown";
  return idle_names[k];
}

bool pd_range_is_dataloader(const char *name) {
  return pd_range_is_data_wait(name); /* the one name table: PD_RANGE_DATA_WAIT_MAP */
}

/* The part an event's time belongs to, or -1 when it takes none (it leaves "other"). */
static int part_of(const pd_event_t *e) {
  switch (e->kind) {
  case PD_EVENT_KERNEL: return PD_PART_KERNEL;
  case PD_EVENT_MEMCPY: return PD_PART_MEMCPY;
  case PD_EVENT_MEMSET: return PD_PART_MEMSET;
  case PD_EVENT_RUNTIME:
  case PD_EVENT_DRIVER: return PD_PART_RUNTIME;
  case PD_EVENT_RANGE:
  case PD_EVENT_CPU_OP:
    if (e->u.range.step >= 0) return -1; /* the step itself is the window, not a part */
    return pd_range_is_dataloader(e->name) ? PD_PART_DATALOADER : PD_PART_CPU_EXEC;
  default: return -1;
  }
}

/* ---- labelled segments ------------------------------------------------------------------------ */

typedef struct {
  int64_t t;
  int8_t part;
  int8_t delta; /* +1 start, -1 end */
} point_t;

static int point_cmp(const void *pa, const void *pb) {
  const point_t *a = pa, *b = pb;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  return (a->delta > b->delta) - (a->delta < b->delta); /* ends first: no empty overlap */
}

typedef struct {
  int64_t start, end;
  int part; /* for idle gaps: a pd_idle_t */
} seg_t;

/* Adds the parts of [s, e) held in segs (sorted, disjoint) into acc. */
static void add_segments(const seg_t *segs, size_t n, int64_t s, int64_t e, int64_t *acc) {
  size_t lo = 0, hi = n; /* first segment ending after s */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (segs[mid].end <= s) lo = mid + 1;
    else hi = mid;
  }
  for (size_t i = lo; i < n && segs[i].start < e; i++) {
    int64_t a = segs[i].start > s ? segs[i].start : s;
    int64_t b = segs[i].end < e ? segs[i].end : e;
    if (b > a) acc[segs[i].part] = pd_add_sat_i64(acc[segs[i].part], pd_sub_sat_i64(b, a));
  }
}

/* Sweeps the events into segments labelled with the highest-priority active part. */
static int build_part_segments(const pd_event_t *ev, size_t n, seg_t **out, size_t *nout) {
  size_t np = 0;
  for (size_t i = 0; i < n; i++)
    if (part_of(&ev[i]) >= 0 && ev[i].end_ns > ev[i].start_ns) np += 2;
  point_t *pts = malloc((np ? np : 1) * sizeof(*pts));
  seg_t *segs = malloc((np ? np : 1) * sizeof(*segs));
  if (pts == NULL || segs == NULL) {
    free(pts);
    free(segs);
    return PD_ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int p = part_of(&ev[i]);
    if (p < 0 || ev[i].end_ns <= ev[i].start_ns) continue;
    pts[k++] = (point_t){ev[i].start_ns, (int8_t)p, +1};
    pts[k++] = (point_t){ev[i].end_ns, (int8_t)p, -1};
  }
  qsort(pts, np, sizeof(*pts), point_cmp);
  int64_t active[PD_PART_COUNT] = {0};
  size_t ns = 0;
  for (size_t i = 0; i < np; i++) {
    active[pts[i].part] += pts[i].delta;
    int64_t t0 = pts[i].t, t1 = i + 1 < np ? pts[i + 1].t : t0;
    if (t1 <= t0) continue;
    int top = -1;
    for (int p = 0; p < PD_PART_COUNT; p++) {
      if (active[p] > 0) {
        top = p;
        break;
      }
    }
    if (top < 0) continue;
    if (ns > 0 && segs[ns - 1].part == top && segs[ns - 1].end == t0) {
      segs[ns - 1].end = t1;
    } else {
      segs[ns++] = (seg_t){t0, t1, top};
    }
  }
  free(pts);
  *out = segs;
  *nout = ns;
  return 0;
}

/* ---- idle gaps ----------------------------------------------------------------------------------- */

typedef struct {
  int64_t start, end;
  int64_t launch; /* end of the launching call (the work is enqueued); INT64_MIN unknown */
} act_t;

static int act_cmp(const void *pa, const void *pb) {
  const act_t *a = pa, *b = pb;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  /* on equal starts the earliest enqueue decides whether the host was late */
  return (a->launch > b->launch) - (a->launch < b->launch);
}

/* The complement of the GPU busy union, as labelled gaps: the leading gap runs from
 * INT64_MIN, the trailing one to INT64_MAX. */
static int build_idle_segments(const pd_trace_t *trace, const pd_trace_index_t *ix, int64_t kernel_wait_ns, seg_t **out,
                               size_t *nout) {
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace), na = 0;
  for (size_t i = 0; i < n; i++)
    if (an_is_gpu_activity(ev[i].kind) && ev[i].end_ns > ev[i].start_ns) na++;
  act_t *acts = malloc((na ? na : 1) * sizeof(*acts));
  seg_t *gaps = malloc((na + 1) * sizeof(*gaps));
  if (acts == NULL || gaps == NULL) {
    free(acts);
    free(gaps);
    return PD_ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!an_is_gpu_activity(ev[i].kind) || ev[i].end_ns <= ev[i].start_ns) continue;
    acts[k].start = ev[i].start_ns;
    acts[k].end = ev[i].end_ns;
    acts[k].launch = ix->call[i] >= 0 ? ev[ix->call[i]].end_ns : INT64_MIN;
    k++;
  }
  qsort(acts, na, sizeof(*acts), act_cmp);

  size_t ng = 0;
  int64_t busy_end = INT64_MIN; /* end of the current busy group */
  for (size_t i = 0; i < na; i++) {
    if (i > 0 && acts[i].start <= busy_end) {
      if (acts[i].end > busy_end) busy_end = acts[i].end;
      continue;
    }
    /* a gap [busy_end, start) ends here, opened by acts[i] */
    int cat;
    if (acts[i].launch != INT64_MIN && acts[i].launch > busy_end) cat = PD_IDLE_HOST_WAIT;
    else if (busy_end != INT64_MIN && acts[i].start - busy_end < kernel_wait_ns) cat = PD_IDLE_KERNEL_WAIT;
    else cat = PD_IDLE_OTHER;
    gaps[ng++] = (seg_t){busy_end, acts[i].start, cat};
    busy_end = acts[i].end;
  }
  gaps[ng++] = (seg_t){na > 0 ? busy_end : INT64_MIN, INT64_MAX, PD_IDLE_OTHER};
  free(acts);
  *out = gaps;
  *nout = ng;
  return 0;
}

/* ---- steps ------------------------------------------------------------------------------------- */

static void count_event(pd_step_breakdown_t *s, const pd_event_t *e) {
  switch (e->kind) {
  case PD_EVENT_KERNEL: s->kernels++; break;
  case PD_EVENT_MEMCPY: s->memcpys++; break;
  case PD_EVENT_MEMSET: s->memsets++; break;
  case PD_EVENT_RUNTIME:
  case PD_EVENT_DRIVER:
    s->runtime_calls++;
    if (pd_api_is_sync(e->name)) s->sync_calls++;
    if (pd_api_is_device_alloc(e->name)) s->alloc_calls++;
    break;
  case PD_EVENT_MEMORY:
    if (e->u.memory.mem_kind == PD_MEM_PAGEABLE || e->u.memory.mem_kind == PD_MEM_PINNED) break;
    if (e->u.memory.bytes > 0) {
      s->mem_allocs++;
      s->mem_alloc_bytes = pd_add_sat_i64(s->mem_alloc_bytes, e->u.memory.bytes);
    } else if (e->u.memory.bytes < 0) {
      s->mem_frees++;
    }
    break;
  default: break;
  }
}

void pd_breakdown_free(pd_breakdown_t *b) {
  if (b == NULL) return;
  free(b->steps);
  memset(b, 0, sizeof(*b));
}

static void add_into(pd_step_breakdown_t *t, const pd_step_breakdown_t *s) {
  /* Saturating: steps read from a file may overlap and add up past int64. */
  for (int p = 0; p < PD_PART_COUNT; p++) t->part_ns[p] = pd_add_sat_i64(t->part_ns[p], s->part_ns[p]);
  for (int k = 0; k < PD_IDLE_COUNT; k++) t->idle_ns[k] = pd_add_sat_i64(t->idle_ns[k], s->idle_ns[k]);
  t->end_ns = pd_add_sat_i64(t->end_ns, pd_sub_sat_i64(s->end_ns, s->start_ns));
  t->gpu_busy_ns = pd_add_sat_i64(t->gpu_busy_ns, s->gpu_busy_ns);
  t->data_wait_ns = pd_add_sat_i64(t->data_wait_ns, s->data_wait_ns);
  t->kernels += s->kernels;
  t->memcpys += s->memcpys;
  t->memsets += s->memsets;
  t->runtime_calls += s->runtime_calls;
  t->sync_calls += s->sync_calls;
  t->alloc_calls += s->alloc_calls;
  t->mem_allocs += s->mem_allocs;
  t->mem_frees += s->mem_frees;
  t->mem_alloc_bytes = pd_add_sat_i64(t->mem_alloc_bytes, s->mem_alloc_bytes);
}

/* Union of the dataloader ranges (the model's one definition), clipped to each step. */
static int add_data_wait(const pd_trace_t *trace, pd_breakdown_t *b) {
  pd_interval_t *v = NULL;
  size_t m = 0;
  int rc = pd_data_wait_union(trace, &v, &m);
  if (rc != 0) return rc;
  for (size_t s = 0; s < b->nsteps; s++)
    b->steps[s].data_wait_ns = pd_interval_overlap_ns(v, m, b->steps[s].start_ns, b->steps[s].end_ns);
  free(v);
  return 0;
}

int pd_breakdown_compute(const pd_trace_t *trace, int64_t kernel_wait_ns, pd_breakdown_t *out) {
  if (trace == NULL || out == NULL) return PD_EINVAL;
  pd_trace_index_t ix;
  int rc = pd_trace_index_build(trace, &ix);
  if (rc != 0) {
    memset(out, 0, sizeof(*out));
    return rc;
  }
  rc = an_breakdown_compute(trace, &ix, kernel_wait_ns, out);
  pd_trace_index_free(&ix);
  return rc;
}

int an_breakdown_compute(const pd_trace_t *trace, const pd_trace_index_t *ix, int64_t kernel_wait_ns,
                         pd_breakdown_t *out) {
  if (out != NULL) memset(out, 0, sizeof(*out));
  if (trace == NULL || out == NULL) return PD_EINVAL;
  if (kernel_wait_ns < 0) kernel_wait_ns = PD_KERNEL_WAIT_DEFAULT_NS;
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);
  out->total.step = -1;

  /* The steps are the index's (sorted by start). */
  const size_t nsteps = ix->nsteps;
  out->whole_trace = nsteps == 0;
  if (n == 0) return 0;
  out->steps = calloc(nsteps ? nsteps : 1, sizeof(*out->steps));
  if (out->steps == NULL) return PD_ENOMEM;
  if (nsteps == 0) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
      if (ev[i].start_ns < lo) lo = ev[i].start_ns;
      if (ev[i].end_ns > hi) hi = ev[i].end_ns;
    }
    out->steps[0] = (pd_step_breakdown_t){.step = -1, .start_ns = lo, .end_ns = hi > lo ? hi : lo};
    out->nsteps = 1;
  } else {
    for (size_t k = 0; k < nsteps; k++)
      out->steps[k] = (pd_step_breakdown_t){
          .step = ix->steps[k].number, .start_ns = ix->steps[k].start_ns, .end_ns = ix->steps[k].end_ns};
    out->nsteps = nsteps;
  }

  seg_t *segs = NULL, *gaps = NULL;
  size_t nsegs = 0, ngaps = 0;
  int rc = build_part_segments(ev, n, &segs, &nsegs);
  if (rc == 0) rc = build_idle_segments(trace, ix, kernel_wait_ns, &gaps, &ngaps);
  if (rc == 0) rc = add_data_wait(trace, out);
  if (rc != 0) {
    free(segs);
    free(gaps);
    pd_breakdown_free(out);
    return rc;
  }
  for (size_t s = 0; s < out->nsteps; s++) {
    pd_step_breakdown_t *st = &out->steps[s];
    add_segments(segs, nsegs, st->start_ns, st->end_ns, st->part_ns);
    int64_t len = pd_sub_sat_i64(st->end_ns, st->start_ns), used = 0;
    for (int p = 0; p < PD_PART_COUNT; p++) used = pd_add_sat_i64(used, st->part_ns[p]);
    st->part_ns[PD_PART_OTHER] = pd_add_sat_i64(st->part_ns[PD_PART_OTHER], pd_sub_sat_i64(len, used));
    st->gpu_busy_ns = pd_add_sat_i64(pd_add_sat_i64(st->part_ns[PD_PART_KERNEL], st->part_ns[PD_PART_MEMCPY]),
                                     st->part_ns[PD_PART_MEMSET]);
    add_segments(gaps, ngaps, st->start_ns, st->end_ns, st->idle_ns);
  }
  free(segs);
  free(gaps);
  /* Counts in the index's step of each event: GPU work belongs to the step of the call
   * that launched it, so a kernel that runs late still counts for the step that asked
   * for it, as in the step metrics. Without steps the whole trace is the one window. */
  for (size_t i = 0; i < n; i++) {
    long s = ix->step[i];
    if (out->whole_trace) {
      const int64_t t = an_is_gpu_activity(ev[i].kind) && ix->call[i] >= 0 ? ev[ix->call[i]].start_ns : ev[i].start_ns;
      s = t < out->steps[0].end_ns ? 0 : -1; /* every event starts at or after the window's start */
    }
    if (s >= 0) count_event(&out->steps[s], &ev[i]);
  }
  for (size_t s = 0; s < out->nsteps; s++) add_into(&out->total, &out->steps[s]);
  return 0;
}

/* ---- printing ------------------------------------------------------------------------------------- */

static double pct_of(int64_t part, int64_t whole) {
  return whole > 0 ? (double)part * 100.0 / (double)whole : 0.0;
}

static void print_row(FILE *out, const char *label, const pd_step_breakdown_t *s) {
  int64_t len = an_span_ns(s->start_ns, s->end_ns);
  char dur[32], wait[32];
  an_fmt_time(dur, sizeof dur, len);
  an_fmt_time(wait, sizeof wait, s->data_wait_ns);
  fprintf(out, "%8s  %12s", label, dur);
  for (int p = 0; p < PD_PART_COUNT; p++) fprintf(out, "  %9.1f%%", pct_of(s->part_ns[p], len));
  fprintf(out, "  %8.1f%%", pct_of(s->gpu_busy_ns, len));
  for (int k = 0; k < PD_IDLE_COUNT; k++) fprintf(out, "  %10.1f%%", pct_of(s->idle_ns[k], len));
  fprintf(out, "  %11s\n", wait);
}

void pd_breakdown_print(FILE *out, const pd_breakdown_t *b) {
  if (out == NULL || b == NULL) return;
  fprintf(out, "Step time breakdown (disjoint parts, %% of the step; priority");
  for (int p = 0; p < PD_PART_COUNT; p++) fprintf(out, "%s%s", p ? " > " : " ", part_names[p]);
  fprintf(out, ")\n");
  if (b->nsteps == 0) {
    fprintf(out, "  (empty trace)\n");
    return;
  }
  if (b->whole_trace) fprintf(out, "  no ProfilerStep#N range: the whole trace is one window\n");
  fprintf(out, "%8s  %12s", "step", "duration");
  for (int p = 0; p < PD_PART_COUNT; p++) fprintf(out, "  %10s", part_names[p]);
  fprintf(out, "  %9s", "GPU util");
  fprintf(out, "  %11s  %11s  %11s", "idle: host", "kernel wait", "other idle");
  fprintf(out, "  %11s\n", "data wait");
  for (size_t s = 0; s < b->nsteps; s++) {
    char label[24];
    if (b->steps[s].step >= 0) snprintf(label, sizeof label, "%lld", (long long)b->steps[s].step);
    else snprintf(label, sizeof label, "trace");
    print_row(out, label, &b->steps[s]);
  }
  if (b->nsteps > 1) print_row(out, "all", &b->total);
  double ns = (double)b->nsteps;
  fprintf(out, "  average per step:");
  for (int p = 0; p < PD_PART_COUNT; p++) {
    char t[32];
    an_fmt_time_d(t, sizeof t, (double)b->total.part_ns[p] / ns);
    fprintf(out, "%s %s %s", p ? "," : "", part_names[p], t);
  }
  fprintf(out, "\n  GPU idle per step:");
  for (int k = 0; k < PD_IDLE_COUNT; k++) {
    char t[32];
    an_fmt_time_d(t, sizeof t, (double)b->total.idle_ns[k] / ns);
    fprintf(out, "%s %s %s", k ? "," : "", idle_names[k], t);
  }
  fprintf(out, "\n  per step: %.1f kernels, %.1f copies, %.1f sets, %.1f runtime calls (%.1f synchronizing, %.1f "
               "alloc/free), %.1f device allocations\n",
          (double)b->total.kernels / ns, (double)b->total.memcpys / ns, (double)b->total.memsets / ns,
          (double)b->total.runtime_calls / ns, (double)b->total.sync_calls / ns, (double)b->total.alloc_calls / ns,
          (double)b->total.mem_allocs / ns);
}
