/* replay_build.c: builds the replay graph of a trace (pd_replay_build; replay.c says
 * what the nodes and edges are). One sweep over the index's host order per thread, one
 * sort of the GPU tasks per stream, and a topological order by Kahn's algorithm. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_prof.h"
#include "pd/pd_replay.h"
#include "corr_map.h"
#include "replay_internal.h"

/* ---- small growable arrays ------------------------------------------------------------------ */

typedef struct {
  int64_t *v;
  size_t n, cap;
} i64vec_t;

static int i64_push(i64vec_t *a, int64_t x) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 64;
    int64_t *nv = realloc(a->v, cap * sizeof(*nv));
    if (nv == NULL) return PD_ENOMEM;
    a->v = nv;
    a->cap = cap;
  }
  a->v[a->n++] = x;
  return 0;
}

static int i64_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Median of the samples (sorts them); fallback when there is none. */
static int64_t median_or(i64vec_t *a, int64_t fallback) {
  if (a->n == 0) return fallback;
  qsort(a->v, a->n, sizeof(*a->v), i64_cmp);
  return a->v[a->n / 2];
}

/* ---- names -------------------------------------------------------------------------------- */

static const char *strip_aten(const char *name) {
  return name != NULL && strncmp(name, "aten::", 6) == 0 ? name + 6 : name;
}

static bool name_in(const char *name, const char *const *tab, size_t n) {
  if (name == NULL) return false;
  for (size_t i = 0; i < n; i++)
    if (strcmp(name, tab[i]) == 0) return true;
  return false;
}

/* A read of a device value into a host scalar: torch's .item() (and bool(tensor)), and
 * ranges named "<something>.item" as profiler_demo's scenarios push them. */
static bool is_read_op(const char *name) {
  static const char *const reads[] = {"item", "_local_scalar_dense", "is_nonzero"};
  if (name == NULL) return false;
  size_t len = strlen(name);
  if (len > 5 && strcmp(name + len - 5, ".item") == 0) return true;
  return strncmp(name, "aten::", 6) == 0 && name_in(name + 6, reads, sizeof reads / sizeof reads[0]);
}

/* Ops that compute the value a read reads: reductions, and the cheap elementwise and view
 * ops that prepare their input (x.detach().abs().mean().item(), p.grad.norm().item()). */
static bool is_feed_op(const char *name) {
  static const char *const feeds[] = {
      "sum",    "mean",   "norm",    "linalg_vector_norm", "max",    "min",     "amax",  "amin",
      "std",    "var",    "prod",    "all",                "any",    "count_nonzero", "argmax", "argmin",
      "nansum", "logsumexp", "abs",  "detach",             "square", "pow",     "sqrt",  "isnan",
      "isinf",  "isfinite", "ne",    "eq",                 "view",   "reshape", "flatten", "_foreach_norm",
      "stack",  "std_mean", "var_mean"};
  if (name == NULL || strncmp(name, "aten::", 6) != 0) return false;
  return name_in(strip_aten(name), feeds, sizeof feeds / sizeof feeds[0]);
}

/* The AMP gradient scaler's overflow check (torch's GradScaler.unscale_): the read that
 * follows it (found_inf.item() in GradScaler.step) decides whether the optimizer step
 * runs, so the program cannot drop it or make it asynchronous the way it can a read for
 * logging; removed, the replay let the host run a whole step ahead of a GPU-bound step
 * that in truth still waits there every step. */
static bool is_scaler_check(const char *name) {
  return name != NULL && strcmp(name, "aten::_amp_foreach_non_finite_check_and_unscale_") == 0;
}

/* A copy with a pageable host side, which the driver stages (the host blocks). */
static bool is_pageable_copy(const pd_event_t *e) {
  if (e->kind != PD_EVENT_MEMCPY) return false;
  if (e->u.memcpy.copy_kind == PD_MEMCPY_HTOD) return e->u.memcpy.src_kind == PD_MEM_PAGEABLE;
  if (e->u.memcpy.copy_kind == PD_MEMCPY_DTOH) return e->u.memcpy.dst_kind == PD_MEM_PAGEABLE;
  return false;
}

static bool is_pinned_transfer(const pd_event_t *e) {
  if (e->kind != PD_EVENT_MEMCPY) return false;
  if (e->u.memcpy.copy_kind == PD_MEMCPY_HTOD) return e->u.memcpy.src_kind == PD_MEM_PINNED;
  if (e->u.memcpy.copy_kind == PD_MEMCPY_DTOH) return e->u.memcpy.dst_kind == PD_MEM_PINNED;
  return false;
}

/* ---- streams --------------------------------------------------------------------------------- */

typedef struct {
  uint32_t device, stream;
  size_t first, count; /* its tasks in gsorted */
} rp_stream_t;

typedef struct {
  uint32_t pid, tid;
  uint32_t stream; /* index into streams */
} rp_thread_stream_t;

typedef struct {
  const pd_event_t *ev;
  const pd_trace_index_t *ix;
  size_t n;
  pd_replay_t *r;
  const char *step_body; /* the program's per-step range (pd_trace_step_range), or NULL */
  /* per event */
  uint16_t *own, *acc;
  uint8_t *devread; /* the op's subtree copies device to host or blocks on the GPU */
  int32_t *hs, *he, *gnode, *firstgpu, *syncrec;
  uint8_t *gapbits;
  /* GPU tasks sorted by stream, then start */
  int32_t *gsorted;
  int64_t *lt; /* launch time of gsorted[i], monotone within its stream */
  rp_stream_t *streams;
  size_t nstreams;
  rp_thread_stream_t *ts;
  size_t nts, capts;
  pd_corr_map_t corr; /* cudaEventRecord's correlation id -> the call, when a wait names one */
  /* edges before CSR: pairs (owner, source) */
  i64vec_t gdep, bdep; /* (gtask << 32 | node) and (block << 32 | node) */
  i64vec_t lat, wake, unblocked;
} bctx_t;

typedef struct {
  uint32_t device, stream;
  int64_t start;
  int32_t ev;
} gkey_t;

static int gkey_cmp(const void *pa, const void *pb) {
  const gkey_t *a = pa, *b = pb;
  if (a->device != b->device) return a->device < b->device ? -1 : 1;
  if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  return (a->ev > b->ev) - (a->ev < b->ev);
}

static long stream_find(const bctx_t *c, uint32_t device, uint32_t stream) {
  for (size_t i = 0; i < c->nstreams; i++)
    if (c->streams[i].device == device && c->streams[i].stream == stream) return (long)i;
  return -1;
}

static int thread_stream_add(bctx_t *c, uint32_t pid, uint32_t tid, uint32_t s) {
  for (size_t i = 0; i < c->nts; i++)
    if (c->ts[i].pid == pid && c->ts[i].tid == tid && c->ts[i].stream == s) return 0;
  if (c->nts == c->capts) {
    size_t cap = c->capts ? c->capts * 2 : 16;
    rp_thread_stream_t *n = realloc(c->ts, cap * sizeof(*n));
    if (n == NULL) return PD_ENOMEM;
    c->ts = n;
    c->capts = cap;
  }
  c->ts[c->nts++] = (rp_thread_stream_t){pid, tid, s};
  return 0;
}

/* The GPU node of the last task of stream s launched before t, or -1. */
static int32_t last_launched_before(const bctx_t *c, size_t s, int64_t t) {
  const rp_stream_t *st = &c->streams[s];
  size_t lo = 0, hi = st->count; /* first with lt >= t */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->lt[st->first + mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo == 0 ? -1 : c->gnode[c->gsorted[st->first + lo - 1]];
}

/* The GPU node of the first task of stream s launched at or after t, or -1. */
static int32_t first_launched_from(const bctx_t *c, size_t s, int64_t t) {
  const rp_stream_t *st = &c->streams[s];
  size_t lo = 0, hi = st->count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->lt[st->first + mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo == st->count ? -1 : c->gnode[c->gsorted[st->first + lo]];
}

/* ---- per-event bits ----------------------------------------------------------------------------- */

/* Reads, and the ops that only feed them (walking back over earlier siblings). */
static void mark_reads(bctx_t *c, const int32_t *prev_sib) {
  const pd_event_t *ev = c->ev;
  for (size_t k = 0; k < c->ix->nhost; k++) {
    int32_t e = c->ix->host_order[k];
    if (!is_read_op(ev[e].name)) continue;
    int32_t p = c->ix->parent[e];
    if (p >= 0 && is_read_op(ev[p].name)) continue; /* the outer read op holds the group */
    if (!c->devread[e]) continue; /* a read of a host tensor: nothing waits for the GPU */
    int32_t s = prev_sib[e];
    while (s >= 0 && is_feed_op(ev[s].name)) s = prev_sib[s];
    if (s >= 0 && is_scaler_check(ev[s].name)) continue; /* the step needs it: not a read to drop */
    c->own[e] |= RP_B_READ;
    int32_t next = e;
    for (s = prev_sib[e]; s >= 0 && is_feed_op(ev[s].name); s = prev_sib[s]) {
      c->own[s] |= RP_B_READ;
      c->gapbits[next] |= RP_B_READ; /* the host time between two ops of the group */
      next = s;
    }
    /* after the previous read of the same parent, the host time up to this read's group
     * is the Python that issues it (a loop of x.norm().item()) */
    if (s >= 0 && is_read_op(ev[s].name)) c->gapbits[next] |= RP_B_READ;
  }
}

/* A runtime or driver API call. */
static bool is_call(const pd_event_t *e) { return e->kind == PD_EVENT_RUNTIME || e->kind == PD_EVENT_DRIVER; }

/* A step marker (ProfilerStep#N). The host time right inside one, outside every op, is
 * host code (as torch's ProfilerStep self time). */
static bool is_step_marker(const pd_event_t *e) { return e->kind == PD_EVENT_RANGE && e->u.range.step >= 0; }

/* Whether event e is part of the step layer, not an op: a step marker, or the range the
 * program opens per step (pd_trace_step_range: pd_run --step_range) right under one. That
 * range's own time is not host code: without ops it holds all the framework's work, which
 * is no fix, and with emit_nvtx's ops the time between them also holds what emit_nvtx
 * itself adds per op. */
static bool is_step_layer(const bctx_t *c, int32_t e) {
  const pd_event_t *x = &c->ev[e];
  if (is_step_marker(x)) return true;
  if (c->step_body == NULL || (x->kind != PD_EVENT_RANGE && x->kind != PD_EVENT_CPU_OP) || x->name == NULL ||
      strcmp(x->name, c->step_body) != 0)
    return false;
  int32_t p = c->ix->parent[e];
  return p >= 0 && is_step_marker(&c->ev[p]);
}

/* Whether the trace has an op layer: most of its CUDA calls sit inside a range or op below
 * the step layer (torch's aten ops, emit_nvtx's op ranges, profiler_demo's phases). A
 * library's own NVTX ranges around a few of its calls are not one (CUB's
 * cub::DeviceRadixSort around the sort of an embedding's backward, in a program that opens
 * no other range). A trace without one (pd_run on a program that opens no ranges but its
 * step) shows its host time only as CUDA calls and the gaps between them. */
static bool has_op_layer(const bctx_t *c) {
  const pd_event_t *ev = c->ev;
  size_t calls = 0, inside = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (!is_call(&ev[i])) continue;
    calls++;
    for (int32_t p = c->ix->parent[i]; p >= 0; p = c->ix->parent[p])
      if (!is_step_layer(c, p) && !is_call(&ev[p])) {
        inside++;
        break;
      }
  }
  return inside > 0 && 2 * inside >= calls;
}

/* The device-to-host copy call of a read as the CUDA calls alone show it: a copy of at
 * most RP_CALL_READ_MAX_BYTES from the device. */
static bool is_read_copy_call(const bctx_t *c, int32_t e) {
  const pd_event_t *ev = c->ev;
  if (!is_call(&ev[e])) return false;
  int32_t g = c->firstgpu[e];
  return g >= 0 && ev[g].kind == PD_EVENT_MEMCPY && ev[g].u.memcpy.copy_kind == PD_MEMCPY_DTOH &&
         ev[g].u.memcpy.bytes <= RP_CALL_READ_MAX_BYTES;
}

/* Whether the call blocks the host on the GPU (a sync record, or a synchronizing name). */
static bool call_blocks(const bctx_t *c, int32_t e) {
  return c->syncrec[e] >= 0 || pd_api_sync_scope(c->ev[e].name) != PD_SYNC_SCOPE_NONE;
}

/* A kernel launch call whose kernel is a reduction (torch's reduce_kernel, cub's
 * DeviceReduceKernel): what computes a value a read then reads, where no op says so. */
static bool is_reduce_launch(const bctx_t *c, int32_t e) {
  int32_t g = c->firstgpu[e];
  if (g < 0 || c->ev[g].kind != PD_EVENT_KERNEL || c->ev[g].name == NULL) return false;
  return strstr(c->ev[g].name, "reduce") != NULL || strstr(c->ev[g].name, "Reduce") != NULL;
}

/* The read that starts at call `read` (its copy) takes with it what the calls show
 * feeding it: the reduction launched right before it (`feed`, with the host time between
 * the two), and, where the call before that (`before`) ended the step's previous read, the
 * host time between the two reads too (a loop of reads: x.norm().item() per parameter). */
static void mark_call_read_feed(bctx_t *c, int32_t read, int32_t feed, int32_t before) {
  const pd_trace_index_t *ix = c->ix;
  if (feed < 0 || ix->step[feed] != ix->step[read] || !is_reduce_launch(c, feed)) return;
  c->own[feed] |= RP_B_READ;
  c->gapbits[read] |= RP_B_READ;
  if (before >= 0 && ix->step[before] == ix->step[read] && (c->own[before] & RP_B_READ)) c->gapbits[feed] |= RP_B_READ;
}

/* Reads where the trace has no op layer (has_op_layer): a small device-to-host copy whose
 * call blocks (cudaMemcpy), or whose thread's next CUDA call does (cudaMemcpyAsync, then
 * cudaStreamSynchronize: torch's .item()). The copy's call, the blocking call and the host
 * time between them are the read, with what mark_call_read_feed finds feeding it. Other
 * work that computed the value is not told apart from the rest of the step there, so it
 * stays (blocking_reads removes less than with ops). Returns the reads marked inside a
 * step. */
static size_t mark_call_reads(bctx_t *c) {
  const pd_event_t *ev = c->ev;
  const pd_trace_index_t *ix = c->ix;
  size_t reads = 0;
  int32_t prev = -1, prev2 = -1;  /* the thread's two CUDA calls before this one */
  int32_t copy = -1, cprev = -1, cprev2 = -1; /* a read's copy call waiting for the next call, and its two */
  for (size_t k = 0; k < ix->nhost; k++) {
    int32_t e = ix->host_order[k];
    if (!is_call(&ev[e])) continue;
    if (prev >= 0 && (ev[prev].pid != ev[e].pid || ev[prev].tid != ev[e].tid)) prev = prev2 = copy = -1;
    if (copy >= 0 && call_blocks(c, e)) {
      c->own[copy] |= RP_B_READ;
      c->own[e] |= RP_B_READ;
      c->gapbits[e] |= RP_B_READ; /* the host time between the copy's call and the wait */
      mark_call_read_feed(c, copy, cprev, cprev2);
      reads += ix->step[copy] >= 0;
      copy = -1;
    } else {
      copy = -1;
      if (is_read_copy_call(c, e)) {
        if (call_blocks(c, e)) { /* a synchronous copy: a read by itself */
          c->own[e] |= RP_B_READ;
          mark_call_read_feed(c, e, prev, prev2);
          reads += ix->step[e] >= 0;
        } else { /* an asynchronous one: a read if the thread's next call blocks */
          copy = e;
          cprev = prev;
          cprev2 = prev2;
        }
      }
    }
    prev2 = prev;
    prev = e;
  }
  return reads;
}

static bool same_name(const char *a, const char *b) {
  return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* Chains of tiny ops: consecutive kernel launches of one thread, each of a kernel shorter
 * than the host takes to issue the next launch. The unit of a launch is its highest
 * ancestor that holds no other launch (the op that made it, or the call itself). */
static int mark_tiny(bctx_t *c) {
  const pd_event_t *ev = c->ev;
  const pd_trace_index_t *ix = c->ix;
  int32_t *launches = calloc(c->n ? c->n : 1, sizeof(*launches));
  int32_t *chain = malloc((ix->nhost ? ix->nhost : 1) * sizeof(*chain));
  if (launches == NULL || chain == NULL) {
    free(launches);
    free(chain);
    return PD_ENOMEM;
  }
  for (size_t k = 0; k < ix->nhost; k++) {
    int32_t e = ix->host_order[k];
    if (c->firstgpu[e] < 0 || ev[c->firstgpu[e]].kind != PD_EVENT_KERNEL) continue;
    for (int32_t a = e; a >= 0; a = ix->parent[a]) launches[a]++;
  }
  size_t nch = 0;
  uint32_t pid = 0, tid = 0;
  int32_t last = -1;
  for (size_t k = 0; k <= ix->nhost; k++) {
    int32_t e = k < ix->nhost ? ix->host_order[k] : -1;
    bool is_launch = e >= 0 && c->firstgpu[e] >= 0 && ev[c->firstgpu[e]].kind == PD_EVENT_KERNEL &&
                     is_call(&ev[e]);
    bool new_thread = e >= 0 && (ev[e].pid != pid || ev[e].tid != tid);
    if (e >= 0 && !is_launch && !new_thread) continue;
    /* close the chain when this launch does not continue it */
    bool extends = false;
    if (is_launch && !new_thread && last >= 0) {
      const pd_event_t *kprev = &ev[c->firstgpu[last]];
      int64_t issue = ev[e].start_ns - ev[last].start_ns;
      extends = pd_event_dur_ns(kprev) < issue && pd_event_dur_ns(kprev) < RP_TINY_KERNEL_NS;
    }
    if (!extends) {
      if (nch >= RP_TINY_CHAIN_MIN) {
        /* Fused, the chain costs one op of each kind it repeats (a multi-tensor op, one
         * kernel over all the tensors; a graph launch where the units are bare calls): the
         * first unit of each name stays, with the host time before it; the rest go. */
        const char *kinds[RP_TINY_KINDS_MAX];
        size_t nkinds = 0;
        int32_t prev_unit = -1;
        for (size_t i = 0; i < nch; i++) {
          int32_t u = chain[i];
          while (ix->parent[u] >= 0 && launches[ix->parent[u]] == 1) u = ix->parent[u];
          c->r->info.tiny_ops_per_step += 1.0;
          bool seen = nkinds == RP_TINY_KINDS_MAX;
          for (size_t j = 0; j < nkinds && !seen; j++) seen = same_name(kinds[j], ev[u].name);
          if (!seen) {
            kinds[nkinds++] = ev[u].name;
            prev_unit = u;
            continue;
          }
          c->own[u] |= RP_B_TINY;
          if (prev_unit >= 0) c->gapbits[u] |= RP_B_TINY;
          prev_unit = u;
        }
      }
      nch = 0;
    }
    if (e < 0) break;
    if (new_thread) {
      pid = ev[e].pid;
      tid = ev[e].tid;
      last = -1;
      if (!is_launch) continue;
    }
    chain[nch++] = e;
    last = e;
  }
  free(launches);
  free(chain);
  return 0;
}

/* ---- host nodes ----------------------------------------------------------------------------------- */

static int32_t emit(bctx_t *c, uint8_t type, int32_t e, int64_t t0, int32_t *prev, int64_t *tlast, uint16_t bits,
                    int64_t cut) {
  pd_replay_t *r = c->r;
  int32_t id = (int32_t)r->nnodes++;
  rp_node_t *x = &r->nodes[id];
  memset(x, 0, sizeof(*x));
  x->type = type;
  x->ev = e;
  x->t0 = t0;
  x->t = *prev >= 0 && *tlast > t0 ? *tlast : t0;
  x->seg = *prev >= 0 ? x->t - *tlast : 0;
  x->prev = *prev;
  x->aux = -1;
  x->fork = -1;
  x->bits = bits;
  x->cut = cut;
  x->anchor = RP_NOT_DONE;
  *prev = id;
  *tlast = x->t;
  return id;
}

/* Another thread's op that starts outside every op of its thread began when the step
 * thread let it (torch's autograd thread runs a backward pass when the main thread calls
 * it): it follows the step thread's last node at or before it, at the measured distance,
 * instead of keeping its idle gap. */
static size_t first_main_after(const pd_replay_t *r, size_t m0, size_t m1, int64_t t) {
  size_t lo = m0, hi = m1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->nodes[mid].t <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void link_forks(bctx_t *c, size_t m0, size_t m1) {
  pd_replay_t *r = c->r;
  for (size_t i = 0; i < r->nnodes; i++) {
    rp_node_t *x = &r->nodes[i];
    if (x->fork == -2) {
      /* Only where the step thread did something after this thread's previous task: an op
       * that follows its own thread's work with the step thread idle since (torch's
       * autograd thread going from one backward function to the next while the main thread
       * waits in backward()) was started by that work, and keeps its own thread's order;
       * pinned to the step thread, every backward function kept its measured start and
       * the pass its measured length, whatever the replay took out of it. */
      x->fork = -1;
      size_t lo = first_main_after(r, m0, m1, x->t);
      if (lo > m0 && (x->prev < 0 || r->nodes[lo - 1].t >= r->nodes[x->prev].t)) x->fork = (int32_t)(lo - 1);
      continue;
    }
    /* The end of another thread's outermost op inside an idle stretch of the step thread
     * that also holds its start: the step thread's node after it joins it. */
    if (x->type != RP_HEND || (i >= m0 && i < m1) || c->ix->parent[x->ev] >= 0) continue;
    size_t j = first_main_after(r, m0, m1, x->t);
    if (j >= m1 || j == m0) continue;
    rp_node_t *m = &r->nodes[j];
    const rp_node_t *mp = &r->nodes[j - 1];
    if (!(m->bits & RP_B_HOSTCODE) || (m->bits & RP_B_DATA)) continue;
    if (c->r->nodes[c->hs[x->ev]].t < mp->t) continue;
    if (m->fork < 0 || r->nodes[m->fork].t < x->t) m->fork = (int32_t)i;
  }
}

/* The median stretch outside every op (RP_B_HOSTCODE, not a data wait) among nodes
 * [n0, n1) of one thread, in *out (0 with none). Returns 0 or PD_ENOMEM. */
static int outside_median_ns(const pd_replay_t *r, size_t n0, size_t n1, int64_t *out) {
  i64vec_t segs = {0};
  for (size_t i = n0; i < n1; i++) {
    const rp_node_t *x = &r->nodes[i];
    if ((x->bits & RP_B_HOSTCODE) && !(x->bits & RP_B_DATA) && x->seg > 0 && i64_push(&segs, x->seg) != 0) {
      free(segs.v);
      return PD_ENOMEM;
    }
  }
  *out = median_or(&segs, 0);
  free(segs.v);
  return 0;
}

/* Python work, not dispatch. Between two ops the interpreter runs the lines of the
 * program that issue the next op: a few to tens of microseconds, the step thread's median
 * stretch outside every op. No change to the program's Python takes those away (compiling
 * the step does, which host_code does not model). A stretch in which the interpreter could
 * have issued PD_HOST_WORK_GAPS ops and issued none is work the program does on the step's
 * thread (a tokenizer, logging, the loop's bookkeeping): moving it out of the step saves
 * it, and only those keep RP_B_HOSTCODE. Only where the trace has ops: without them (pd_run
 * on a program with no op ranges) every stretch between the step ranges is the program's. */
static int keep_host_work(bctx_t *c, size_t m0, size_t m1) {
  int64_t dispatch;
  if (outside_median_ns(c->r, m0, m1, &dispatch) != 0) return PD_ENOMEM;
  for (size_t i = m0; i < m1; i++) {
    rp_node_t *x = &c->r->nodes[i];
    if ((x->bits & RP_B_HOSTCODE) && x->seg < PD_HOST_WORK_GAPS * dispatch) x->bits &= (uint16_t)~RP_B_HOSTCODE;
  }
  return 0;
}

/* A thread other than the step's: the stretches outside its ops are no Python of the step
 * (host_code is the step thread's); the short ones are the thread issuing its next op, host
 * work the profiler slows like any other, and one of PD_HOST_WORK_GAPS times the thread's
 * median stretch or more is the thread waiting for work (RP_B_IDLE). */
static int mark_thread_idle(bctx_t *c, size_t t0, size_t t1) {
  pd_replay_t *r = c->r;
  int64_t dispatch;
  if (outside_median_ns(r, t0, t1, &dispatch) != 0) return PD_ENOMEM;
  for (size_t i = t0; i < t1; i++) {
    rp_node_t *x = &r->nodes[i];
    if (!(x->bits & RP_B_HOSTCODE) || (x->bits & RP_B_DATA)) continue;
    x->bits &= (uint16_t)~RP_B_HOSTCODE;
    if (x->seg >= PD_HOST_WORK_GAPS * dispatch) x->bits |= RP_B_IDLE;
  }
  return 0;
}

static int sweep_host(bctx_t *c, const pd_replay_cost_t *cost, int32_t *stack, bool ops) {
  const pd_event_t *ev = c->ev;
  const pd_trace_index_t *ix = c->ix;
  const pd_event_t *step0 = &ev[ix->steps[0].ev];
  size_t m0 = 0, m1 = 0;
  const int64_t per_call = cost != NULL && cost->ns_per_call > 0 ? (int64_t)cost->ns_per_call : 0;
  const int64_t per_range = cost != NULL && cost->ns_per_range > 0 ? (int64_t)cost->ns_per_range : 0;
  size_t k = 0;
  while (k < ix->nhost) {
    const uint32_t pid = ev[ix->host_order[k]].pid, tid = ev[ix->host_order[k]].tid;
    size_t depth = 0;
    int32_t prev = -1;
    int64_t tlast = 0;
    const bool main_thread = pid == step0->pid && tid == step0->tid;
    const size_t t0 = c->r->nnodes;
    if (main_thread) m0 = t0;
    for (;; k++) {
      bool more = k < ix->nhost && ev[ix->host_order[k]].pid == pid && ev[ix->host_order[k]].tid == tid;
      int64_t s = more ? ev[ix->host_order[k]].start_ns : INT64_MAX;
      while (depth > 0 && (!more || (ev[stack[depth - 1]].end_ns > ev[stack[depth - 1]].start_ns
                                         ? ev[stack[depth - 1]].end_ns
                                         : ev[stack[depth - 1]].start_ns) <= s)) {
        int32_t top = stack[--depth];
        bool call = is_call(&ev[top]);
        uint16_t b = c->acc[top];
        if (is_step_marker(&ev[top])) b |= RP_B_HOSTCODE; /* the step marker's self time */
        int64_t end = ev[top].end_ns > ev[top].start_ns ? ev[top].end_ns : ev[top].start_ns;
        c->he[top] = emit(c, RP_HEND, top, end, &prev, &tlast, b, call ? per_call : per_range / 2);
      }
      if (!more) break;
      int32_t e = ix->host_order[k];
      int32_t p = depth > 0 ? stack[depth - 1] : -1;
      uint16_t outer = p >= 0 ? c->acc[p] : 0;
      uint16_t b = p >= 0 ? outer : RP_B_HOSTCODE; /* the task before this start: outside every op */
      if (p >= 0 && is_step_marker(&ev[p])) b |= RP_B_HOSTCODE;
      b |= c->gapbits[e];
      bool call = is_call(&ev[e]);
      c->acc[e] = (uint16_t)((outer & (uint16_t)~RP_B_PAGEABLE) | c->own[e]);
      if (c->acc[e] & RP_B_READ) c->acc[e] &= (uint16_t)~RP_B_PAGEABLE; /* a read is not an input copy */
      c->hs[e] = emit(c, RP_HSTART, e, ev[e].start_ns, &prev, &tlast, b, call ? 0 : per_range / 2);
      if (p < 0 && !main_thread) c->r->nodes[c->hs[e]].fork = -2;
      stack[depth++] = e;
    }
    if (main_thread) m1 = c->r->nnodes;
    else if (mark_thread_idle(c, t0, c->r->nnodes) != 0) return PD_ENOMEM;
  }
  link_forks(c, m0, m1);
  return ops ? keep_host_work(c, m0, m1) : 0;
}

/* ---- GPU nodes -------------------------------------------------------------------------------------- */

/* The queue gap's class of a GPU task. */
static int qclass(const pd_event_t *e) {
  return e->kind == PD_EVENT_KERNEL ? RP_Q_KERNEL : e->kind == PD_EVENT_MEMCPY ? RP_Q_COPY : RP_Q_OTHER;
}

static int build_gpu(bctx_t *c, double pinned_gbps) {
  const pd_event_t *ev = c->ev;
  pd_replay_t *r = c->r;
  size_t ng = 0;
  for (size_t i = 0; i < c->n; i++)
    if (pd_event_is_gpu_activity(ev[i].kind)) ng++;
  gkey_t *keys = malloc((ng ? ng : 1) * sizeof(*keys));
  if (keys == NULL) return PD_ENOMEM;
  ng = 0;
  for (size_t i = 0; i < c->n; i++)
    if (pd_event_is_gpu_activity(ev[i].kind))
      keys[ng++] = (gkey_t){ev[i].device, ev[i].stream, ev[i].start_ns, (int32_t)i};
  if (ng > 1) qsort(keys, ng, sizeof(*keys), gkey_cmp);
  for (size_t k = 0; k < ng; k++) c->gsorted[k] = keys[k].ev;
  free(keys);
  r->ngt = ng;
  int64_t tlast = 0, prev_end = 0;
  int32_t prev = -1;
  for (size_t k = 0; k < ng; k++) {
    const int32_t i = c->gsorted[k];
    const pd_event_t *e = &ev[i];
    if (k == 0 || e->device != ev[c->gsorted[k - 1]].device || e->stream != ev[c->gsorted[k - 1]].stream) {
      rp_stream_t *st = &c->streams[c->nstreams++];
      st->device = e->device;
      st->stream = e->stream;
      st->first = k;
      st->count = 0;
      prev = -1;
    }
    rp_stream_t *st = &c->streams[c->nstreams - 1];
    st->count++;
    const int32_t call = c->ix->call[i];
    int32_t id = (int32_t)r->nnodes++;
    rp_node_t *x = &r->nodes[id];
    memset(x, 0, sizeof(*x));
    x->fork = -1;
    x->type = RP_GPU;
    x->ev = i;
    x->t0 = e->start_ns;
    x->t = prev >= 0 && tlast > e->start_ns ? tlast : e->start_ns;
    x->prev = prev;
    x->aux = (int32_t)k;
    c->gnode[i] = id;
    rp_gtask_t *g = &r->gt[k];
    memset(g, 0, sizeof(*g));
    g->dur = pd_event_dur_ns(e);
    g->gap = prev >= 0 && e->start_ns > prev_end ? e->start_ns - prev_end : 0;
    g->launch = -1;
    g->qkey = prev >= 0 ? RP_QKEY(qclass(&ev[r->nodes[prev].ev]), qclass(e)) : -1;
    int64_t lt = e->start_ns;
    if (call >= 0 && c->hs[call] >= 0 && ev[call].start_ns <= e->start_ns) {
      g->launch = c->hs[call];
      lt = ev[call].start_ns;
      if ((prev < 0 || prev_end <= ev[call].start_ns) && i64_push(&c->lat, e->start_ns - ev[call].start_ns) != 0)
        return PD_ENOMEM;
      if (thread_stream_add(c, ev[call].pid, ev[call].tid, (uint32_t)(c->nstreams - 1)) != 0) return PD_ENOMEM;
    }
    c->lt[k] = k > st->first && c->lt[k - 1] > lt ? c->lt[k - 1] : lt;
    uint16_t cb = call >= 0 ? c->acc[call] : 0;
    g->bits = cb & (RP_B_READ | RP_B_TINY);
    if (is_pageable_copy(e) && !(cb & RP_B_READ)) {
      g->bits |= RP_B_PAGEABLE;
      r->info.pageable_copies_per_step += c->ix->step[i] >= 0 ? 1.0 : 0.0;
    }
    if (e->kind == PD_EVENT_KERNEL && c->ix->step[i] >= 0) r->info.launches_per_step += 1.0;
    g->pinned_dur = pd_sat_i64_from_f64((double)(e->kind == PD_EVENT_MEMCPY ? e->u.memcpy.bytes : 0) / pinned_gbps);
    prev = id;
    tlast = x->t;
    prev_end = e->end_ns > e->start_ns ? e->end_ns : e->start_ns;
  }
  return 0;
}

/* The queue gaps: per class pair, the median of (start - previous task's end) over the
 * tasks that were queued when the previous task on their stream ended (launching call's
 * start + the launch latency before that end), so the stream, not the host, started them.
 * Run after the launch latency is known. */
static int measure_queue_gaps(bctx_t *c) {
  pd_replay_t *r = c->r;
  const pd_event_t *ev = c->ev;
  i64vec_t v[RP_Q_CLASSES * RP_Q_CLASSES] = {{0}};
  int rc = 0;
  for (size_t k = 1; k < r->ngt && rc == 0; k++) {
    const int32_t i = c->gsorted[k], p = c->gsorted[k - 1];
    if (ev[i].device != ev[p].device || ev[i].stream != ev[p].stream) continue;
    const int32_t call = c->ix->call[i];
    if (call < 0 || c->hs[call] < 0) continue;
    const int64_t pend = ev[p].end_ns > ev[p].start_ns ? ev[p].end_ns : ev[p].start_ns;
    if (ev[call].start_ns + r->info.launch_latency_ns > pend || ev[i].start_ns < pend) continue;
    rc = i64_push(&v[RP_QKEY(qclass(&ev[p]), qclass(&ev[i]))], ev[i].start_ns - pend);
  }
  for (size_t q = 0; q < RP_Q_CLASSES * RP_Q_CLASSES; q++) {
    r->qgap_ns[q] = median_or(&v[q], 0);
    free(v[q].v);
  }
  if (rc == 0) r->info.queue_gap_ns = r->qgap_ns[RP_QKEY(RP_Q_KERNEL, RP_Q_KERNEL)];
  return rc;
}

/* Pinned host-to-device bandwidth by GPU kind (a substring of the trace's device name),
 * for a trace that holds no pinned copy large enough to measure it: the median over
 * torch.profiler traces of a pinned, non-blocking 128 MiB copy per step
 * (record_torch_traces.py, pageable_input_b64's fixed program), 9 recordings on freshly
 * started H200s, 52.3-55.5 GB/s (docs/diagnosis.md). */
static const struct {
  const char *gpu;
  const char *source;
  double gbps;
} pinned_by_gpu[] = {
    {"H200", "documented for NVIDIA H200", 55.2},
};

static double documented_pinned_gbps(const pd_trace_t *trace, const char **source) {
  const pd_device_props_t *d = pd_trace_devices(trace);
  for (size_t i = 0; d != NULL && i < pd_trace_device_count(trace); i++)
    for (size_t k = 0; k < sizeof pinned_by_gpu / sizeof pinned_by_gpu[0]; k++)
      if (strstr(d[i].name, pinned_by_gpu[k].gpu) != NULL) {
        *source = pinned_by_gpu[k].source;
        return pinned_by_gpu[k].gbps;
      }
  *source = "documented";
  return RP_PINNED_GBPS_DOCUMENTED;
}

/* The pinned bandwidth: the median of the trace's pinned transfers of at least 1 MiB, else
 * the documented figure of its GPU kind. */
static double measure_pinned_gbps(const pd_trace_t *trace, const char **source) {
  const pd_event_t *ev = pd_trace_events(trace);
  const size_t n = pd_trace_count(trace);
  i64vec_t bw = {0};
  for (size_t i = 0; i < n; i++) {
    if (!is_pinned_transfer(&ev[i]) || ev[i].u.memcpy.bytes < RP_BW_MIN_BYTES || pd_event_dur_ns(&ev[i]) <= 0)
      continue;
    /* bytes per ns = GB/s; kept in MB/s for the integer median. A rate no host link
     * reaches (a size or duration read from a file that cannot be) measures nothing. */
    const double mbps = (double)ev[i].u.memcpy.bytes / (double)pd_event_dur_ns(&ev[i]) * 1e3;
    if (!(mbps <= RP_BW_MAX_MBPS)) continue;
    if (i64_push(&bw, (int64_t)mbps) != 0) break;
  }
  double g = bw.n > 0 ? (double)median_or(&bw, 0) / 1e3 : 0;
  free(bw.v);
  if (g > 0) {
    *source = "measured";
    return g;
  }
  return documented_pinned_gbps(trace, source);
}

/* ---- blocking calls and event waits ------------------------------------------------------------------- */

static int add_target(bctx_t *c, size_t block, int32_t node, int64_t call_end, int64_t *g) {
  if (node < 0) return 0;
  const pd_event_t *t = &c->ev[c->r->nodes[node].ev];
  int64_t end = t->end_ns > t->start_ns ? t->end_ns : t->start_ns;
  if (end > call_end) return 0; /* the call ended first: it did not wait for this */
  if (end > *g) *g = end;
  c->r->info.edges++;
  return i64_push(&c->bdep, (int64_t)block << 32 | (int64_t)node);
}

static int build_blocks(bctx_t *c) {
  const pd_event_t *ev = c->ev;
  pd_replay_t *r = c->r;
  const pd_trace_index_t *ix = c->ix;
  for (size_t k = 0; k < ix->nhost; k++) {
    const int32_t e = ix->host_order[k];
    if (!is_call(&ev[e])) continue;
    if (c->he[e] < 0 || c->hs[e] < 0) continue;
    pd_sync_scope_t scope = pd_api_sync_scope(ev[e].name);
    const int32_t own = c->firstgpu[e];
    const bool pageable = own >= 0 && is_pageable_copy(&ev[own]);
    const int32_t sr = c->syncrec[e];
    const bool host_rec = sr >= 0 && ev[sr].u.sync.sync_kind != PD_SYNC_STREAM_WAIT_EVENT;
    if (scope == PD_SYNC_SCOPE_NONE && !pageable && !host_rec) continue;
    const size_t b = r->nblk;
    const int64_t s = ev[e].start_ns, end = ev[e].end_ns > s ? ev[e].end_ns : s;
    int64_t g = INT64_MIN;
    size_t before = c->bdep.n;
    int rc = 0;
    if (host_rec && ev[sr].u.sync.sync_kind == PD_SYNC_STREAM) {
      long st = stream_find(c, ev[sr].device, ev[sr].stream);
      if (st >= 0) rc = add_target(c, b, last_launched_before(c, (size_t)st, s), end, &g);
    } else if (host_rec && ev[sr].u.sync.sync_kind == PD_SYNC_EVENT && ev[sr].u.sync.has_wait) {
      long st = stream_find(c, ev[sr].device, ev[sr].u.sync.wait_stream);
      int32_t rec = pd_corr_map_get(&c->corr, ev[sr].u.sync.event_record_corr);
      if (st >= 0) rc = add_target(c, b, last_launched_before(c, (size_t)st, rec >= 0 ? ev[rec].start_ns : s), end, &g);
    } else if (host_rec && ev[sr].u.sync.sync_kind == PD_SYNC_CONTEXT) {
      for (size_t st = 0; st < c->nstreams && rc == 0; st++)
        if (c->streams[st].device == ev[sr].device) rc = add_target(c, b, last_launched_before(c, st, s), end, &g);
    } else if (scope == PD_SYNC_SCOPE_COPY || pageable) {
      if (own >= 0) rc = add_target(c, b, c->gnode[own], end, &g);
    } else if (scope == PD_SYNC_SCOPE_DEVICE || (host_rec && ev[sr].u.sync.sync_kind == PD_SYNC_CONTEXT)) {
      for (size_t st = 0; st < c->nstreams && rc == 0; st++) rc = add_target(c, b, last_launched_before(c, st, s), end, &g);
    } else {
      /* A stream or event sync the trace gives no target for: the streams this thread
       * launches onto. */
      r->info.inferred_syncs++;
      for (size_t i = 0; i < c->nts && rc == 0; i++)
        if (c->ts[i].pid == ev[e].pid && c->ts[i].tid == ev[e].tid)
          rc = add_target(c, b, last_launched_before(c, c->ts[i].stream, s), end, &g);
    }
    if (rc != 0) return rc;
    if (c->bdep.n == before) continue; /* nothing it waited for: an ordinary call */
    rp_block_t *bk = &r->blk[r->nblk++];
    memset(bk, 0, sizeof(*bk));
    rp_node_t *x = &r->nodes[c->he[e]];
    x->aux = (int32_t)b;
    bk->bits = c->acc[e] & (RP_B_READ | RP_B_ALLOC);
    /* the call of a pageable copy, or a sync inside the op that issued one */
    if ((pageable || (c->acc[e] & RP_B_PGOP)) && !(c->acc[e] & RP_B_READ)) bk->bits |= RP_B_PAGEABLE;
    bk->base_left = end - s; /* set from the medians below when it waited */
    if (g > s) {
      /* An allocator call that synchronizes does its own work after the wait: it gives no
       * wake-up sample, and keeps that work (post, below). */
      if (!(c->acc[e] & RP_B_ALLOC) && i64_push(&c->wake, end - g) != 0) return PD_ENOMEM;
      bk->post = c->acc[e] & RP_B_ALLOC ? end - g : 0;
      bk->base_left = -1; /* mark: blocked */
    } else if (i64_push(&c->unblocked, end - s) != 0) {
      return PD_ENOMEM;
    }
    r->info.blocking_calls++;
  }
  const int64_t unblocked = median_or(&c->unblocked, 0);
  r->info.wake_latency_ns = median_or(&c->wake, 0);
  for (size_t b = 0; b < r->nblk; b++) {
    rp_block_t *bk = &r->blk[b];
    bk->post = bk->post > r->info.wake_latency_ns ? bk->post - r->info.wake_latency_ns : 0;
    if (r->blk[b].base_left >= 0) continue;
    r->blk[b].base_left = unblocked;
  }
  /* base_left is what is left of the unblocked duration for the call's last task */
  for (size_t i = 0; i < r->nnodes; i++) {
    rp_node_t *x = &r->nodes[i];
    if (x->type != RP_HEND || x->aux < 0) continue;
    rp_block_t *bk = &r->blk[x->aux];
    int64_t s = c->ev[x->ev].start_ns;
    int64_t dur = x->t0 - s;
    int64_t base = bk->base_left < dur ? bk->base_left : dur;
    int64_t before = x->prev >= 0 ? r->nodes[x->prev].t - s : 0;
    bk->base_left = base - (before > 0 ? before : 0);
    if (bk->base_left < 0) bk->base_left = 0;
  }
  return 0;
}

/* Whether event i is a data wait inside a step, with its own host node. */
static bool is_step_wait(const bctx_t *c, size_t i) {
  return (c->own[i] & RP_B_DATA) && c->ix->step[i] >= 0 && c->he[i] >= 0;
}

/* The data waits that waited for the loader (pd_replay.h): over twice the trace's median
 * data wait and RP_WAIT_BLOCKED_MIN_NS more. Each ends at its batch's ready time, which the
 * loader sets: a replay whose host reaches it sooner (the profiler's cost gone, a fix
 * applied) waits longer there, as the unprofiled program does. Where every step waits
 * alike (the median wait is itself a blocked one) none is anchored, and the waits keep
 * their measured length. */
static int anchor_waits(bctx_t *c) {
  const pd_event_t *ev = c->ev;
  pd_replay_t *r = c->r;
  i64vec_t d = {0};
  for (size_t i = 0; i < c->n; i++)
    if (is_step_wait(c, i) && i64_push(&d, pd_event_dur_ns(&ev[i])) != 0) {
      free(d.v);
      return PD_ENOMEM;
    }
  r->wait_d0_ns = median_or(&d, 0);
  free(d.v);
  int32_t first = -1; /* the earliest anchored wait */
  for (size_t i = 0; i < c->n; i++) {
    if (!is_step_wait(c, i)) continue;
    int64_t dur = pd_event_dur_ns(&ev[i]);
    if (dur <= 2 * r->wait_d0_ns + RP_WAIT_BLOCKED_MIN_NS) continue;
    r->nodes[c->he[i]].anchor = ev[i].end_ns;
    r->info.anchored_waits++;
    if (first < 0 || ev[i].start_ns < ev[first].start_ns) first = (int32_t)i;
  }
  /* Before its first blocked wait the loader kept ahead of the step, making each batch as
   * the step freed a place in its queue: its ready times followed the step, and a replayed
   * step that runs ahead of the measured one (the profiler's cost gone) would have had
   * them as much earlier. So the anchors count from the last data wait before the first
   * blocked one, on the same thread: pd_replay_run moves them all by the replay's lead
   * there. (Anchored to the trace's clock, a single hiccup late in the window, such as a
   * loader restarting its workers at an epoch's end, absorbed the profiler's cost of every
   * step before it, and removing it read as saving that much each step.) */
  int64_t best = INT64_MIN; /* r->loader_sync is -1 from pd_replay_build */
  for (size_t i = 0; first >= 0 && i < c->n; i++) {
    if (!is_step_wait(c, i)) continue;
    if (ev[i].pid != ev[first].pid || ev[i].tid != ev[first].tid || ev[i].end_ns > ev[first].start_ns) continue;
    if (ev[i].end_ns > best) {
      best = ev[i].end_ns;
      r->loader_sync = c->he[i];
    }
  }
  return 0;
}

/* LOADER_2X's factor (pd_replay.h): W, the host time of data-wait tasks whose event lies
 * in a step (the index's step of the event at the task's end), against S, the steps'
 * measured time. At twice the loader's throughput the steps'
 * total wait becomes max(0, S/2 - (S - W)); every data wait keeps that share of W. */
static void loader_share(pd_replay_t *r, const pd_trace_index_t *ix, const pd_event_t *ev) {
  int64_t S = 0, W = 0;
  for (size_t s = 0; s < ix->nsteps; s++) {
    const pd_event_t *e = &ev[ix->steps[s].ev];
    S += e->end_ns - e->start_ns;
  }
  for (size_t i = 0; i < r->nnodes; i++) {
    const rp_node_t *x = &r->nodes[i];
    if (x->type != RP_GPU && (x->bits & RP_B_DATA) && x->seg > 0 && ix->step[x->ev] >= 0) W += x->seg;
  }
  r->info.data_wait_share = S > 0 ? (double)W / (double)S : 0.0;
  r->anchor0_ns = ix->nsteps > 0 ? ev[ix->steps[0].ev].start_ns : 0;
  r->info.loader_2x_keep = 1.0;
  if (W > 0 && r->info.anchored_waits == 0) { /* with anchors, the anchors carry it */
    double left = (double)S / 2.0 - (double)(S - W);
    r->info.loader_2x_keep = left > 0 ? left / (double)W : 0.0;
  }
}

/* The profiler's cost lands where the tracing happens, around each op and call; where a
 * host task is shorter than the cost assigned to it, the rest moves on to the thread's
 * next tasks (never into a blocking call's wait, whose length the GPU sets).
 *
 * With a cost model that is a share of the host's work (pd_replay_cost_t.host_slowdown >
 * 1), every host task inside an op or a call, and every short stretch between ops (the
 * program issuing the next one), runs `slowdown` times as long traced, so 1 - 1/slowdown
 * of it is the profiler's, and nothing is carried. Not slowed: the Python between ops that
 * host_code counts as work (a stretch outside every op of ten times the median or more:
 * keep_host_work), a blocking call's wait (its cut stays the per-call one, split across the
 * wait as below), and an allocator or pageable-copy call, whose time is the driver's
 * (docs/diagnosis.md, "The profiler's cost, phase by phase"). */
static void carry_cuts(pd_replay_t *r, double slowdown) {
  const double share = slowdown > 1.0 ? 1.0 - 1.0 / slowdown : 0.0;
  int64_t carry = 0;
  for (size_t i = 0; i < r->nnodes; i++) {
    rp_node_t *x = &r->nodes[i];
    if (x->type == RP_GPU) continue;
    if (x->prev < 0) carry = 0; /* a new thread */
    if (x->type == RP_HEND && x->aux >= 0) {
      /* A blocking call: the half of its own cost paid on entry comes off its time before
       * the wait, the half paid on exit off the wake-up latency (pd_replay_run); what was
       * carried in passes on. */
      x->cut /= 2;
      continue;
    }
    if (share > 0.0) {
      x->cut = (x->bits & (RP_B_HOSTCODE | RP_B_IDLE | RP_B_ALLOC | RP_B_PAGEABLE)) ? 0 : (int64_t)((double)x->seg * share);
      continue;
    }
    int64_t want = x->cut + carry;
    int64_t room = x->seg;
    x->cut = want < room ? want : room;
    carry = want - x->cut;
  }
}

/* Kineto's Stream Wait Event: the waiting stream's first task launched after the wait
 * starts after the last task the recording stream had when the event was recorded. */
static int build_waits(bctx_t *c) {
  const pd_event_t *ev = c->ev;
  for (size_t i = 0; i < c->n; i++) {
    if (ev[i].kind != PD_EVENT_SYNC || ev[i].u.sync.sync_kind != PD_SYNC_STREAM_WAIT_EVENT || !ev[i].u.sync.has_wait)
      continue;
    int32_t w = c->ix->call[i];
    if (w < 0) continue;
    int32_t rec = pd_corr_map_get(&c->corr, ev[i].u.sync.event_record_corr);
    long src_st = stream_find(c, ev[i].device, ev[i].u.sync.wait_stream);
    long dst_st = stream_find(c, ev[i].device, ev[i].stream);
    if (src_st < 0 || dst_st < 0 || src_st == dst_st) continue;
    int32_t src = last_launched_before(c, (size_t)src_st, rec >= 0 ? ev[rec].start_ns : ev[w].start_ns);
    int32_t dst = first_launched_from(c, (size_t)dst_st, ev[w].start_ns);
    if (src < 0 || dst < 0) continue;
    const pd_event_t *se = &ev[c->r->nodes[src].ev];
    if ((se->end_ns > se->start_ns ? se->end_ns : se->start_ns) > ev[c->r->nodes[dst].ev].start_ns) continue;
    c->r->info.edges++;
    if (i64_push(&c->gdep, (int64_t)c->r->nodes[dst].aux << 32 | (int64_t)src) != 0) return PD_ENOMEM;
  }
  return 0;
}

/* Pairs (owner << 32 | node) sorted by owner -> deps[] with per-owner offset and count. */
static void to_csr(pd_replay_t *r, i64vec_t *pairs, size_t *off_n, size_t base, bool gtask) {
  if (pairs->n > 1) qsort(pairs->v, pairs->n, sizeof(*pairs->v), i64_cmp);
  for (size_t i = 0; i < pairs->n; i++) {
    size_t owner = (size_t)(pairs->v[i] >> 32);
    int32_t node = (int32_t)(pairs->v[i] & 0xffffffff);
    int32_t *off = gtask ? &r->gt[owner].dep_off : &r->blk[owner].dep_off;
    int32_t *cnt = gtask ? &r->gt[owner].dep_n : &r->blk[owner].dep_n;
    if (*cnt == 0) *off = (int32_t)(base + i);
    (*cnt)++;
    r->deps[base + i] = node;
  }
  *off_n = base + pairs->n;
}

/* A topological order of the nodes (Kahn). Nodes left over by a cycle (clock skew can make
 * one) follow in their measured order, their unfinished sources ignored. */
static int topo_order(pd_replay_t *r) {
  const size_t n = r->nnodes;
  int32_t *indeg = calloc(n ? n : 1, sizeof(*indeg));
  int32_t *outoff = calloc(n + 1, sizeof(*outoff));
  i64vec_t edges = {0};
  int rc = PD_ENOMEM;
  if (indeg == NULL || outoff == NULL) goto out;
  for (size_t i = 0; i < n; i++) {
    const rp_node_t *x = &r->nodes[i];
    if (x->prev >= 0 && i64_push(&edges, (int64_t)x->prev << 32 | (int64_t)i) != 0) goto out;
    if (x->fork >= 0 && i64_push(&edges, (int64_t)x->fork << 32 | (int64_t)i) != 0) goto out;
    if (x->type == RP_GPU) {
      const rp_gtask_t *g = &r->gt[x->aux];
      if (g->launch >= 0 && i64_push(&edges, (int64_t)g->launch << 32 | (int64_t)i) != 0) goto out;
      for (int32_t d = g->dep_off; d < g->dep_off + g->dep_n; d++)
        if (i64_push(&edges, (int64_t)r->deps[d] << 32 | (int64_t)i) != 0) goto out;
    } else if (x->type == RP_HEND && x->aux >= 0) {
      const rp_block_t *b = &r->blk[x->aux];
      for (int32_t d = b->dep_off; d < b->dep_off + b->dep_n; d++)
        if (i64_push(&edges, (int64_t)r->deps[d] << 32 | (int64_t)i) != 0) goto out;
    }
  }
  if (edges.n > 1) qsort(edges.v, edges.n, sizeof(*edges.v), i64_cmp);
  for (size_t i = 0; i < edges.n; i++) {
    outoff[(edges.v[i] >> 32) + 1]++;
    indeg[edges.v[i] & 0xffffffff]++;
  }
  for (size_t i = 0; i < n; i++) outoff[i + 1] += outoff[i];
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < n; i++)
    if (indeg[i] == 0) r->order[tail++] = (int32_t)i;
  while (head < tail) {
    int32_t u = r->order[head++];
    for (int32_t j = outoff[u]; j < outoff[u + 1]; j++) {
      int32_t v = (int32_t)(edges.v[j] & 0xffffffff);
      if (--indeg[v] == 0) r->order[tail++] = v;
    }
  }
  if (tail < n) {
    for (size_t i = 0; i < n; i++)
      if (indeg[i] > 0) r->order[tail++] = (int32_t)i;
  }
  rc = 0;
out:
  free(indeg);
  free(outoff);
  free(edges.v);
  return rc;
}

static void set_quality(pd_replay_t *r, pd_replay_quality_t q, const char *why) {
  if (q < r->info.quality) return;
  if (q > r->info.quality) r->info.why[0] = '\0';
  r->info.quality = q;
  size_t len = strlen(r->info.why);
  snprintf(r->info.why + len, sizeof r->info.why - len, "%s%s", len ? "; " : "", why);
}

int pd_replay_build(const pd_trace_t *trace, const pd_trace_index_t *ix, const pd_replay_cost_t *cost,
                    pd_replay_t **out) {
  if (trace == NULL || ix == NULL || out == NULL) return PD_EINVAL;
  *out = NULL;
  const size_t n = pd_trace_count(trace);
  if (ix->n != n) return PD_EINVAL;
  const pd_event_t *ev = pd_trace_events(trace);
  pd_replay_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return PD_ENOMEM;
  r->info.quality = PD_REPLAY_EXACT;
  r->info.steps = ix->nsteps;
  r->graph_node_ns = RP_GRAPH_NODE_NS;
  r->loader_sync = -1;
  size_t ng = 0, nsync = 0, ncalls = 0, nwaitcorr = 0;
  for (size_t i = 0; i < n; i++) {
    if (pd_event_is_gpu_activity(ev[i].kind)) ng++;
    if (ev[i].kind == PD_EVENT_SYNC) nsync++;
    if (is_call(&ev[i])) ncalls++;
    if (ev[i].kind == PD_EVENT_SYNC && ev[i].u.sync.event_record_corr != 0) nwaitcorr++;
  }
  if (ix->nsteps == 0) {
    set_quality(r, PD_REPLAY_UNAVAILABLE, "no step markers (ProfilerStep#N ranges) to cut the replay at");
    r->info.steps = 0;
    *out = r;
    return 0;
  }
  if (ix->nhost == 0) {
    set_quality(r, PD_REPLAY_UNAVAILABLE, "no host ops or calls to replay");
    r->info.steps = 0;
    *out = r;
    return 0;
  }
  bctx_t c = {.ev = ev, .ix = ix, .n = n, .r = r, .step_body = pd_trace_step_range(trace)};
  const size_t n1 = n ? n : 1, nodes = 2 * ix->nhost + ng;
  c.own = calloc(n1, sizeof(*c.own));
  c.acc = calloc(n1, sizeof(*c.acc));
  c.gapbits = calloc(n1, sizeof(*c.gapbits));
  c.devread = calloc(n1, sizeof(*c.devread));
  c.hs = malloc(n1 * sizeof(*c.hs));
  c.he = malloc(n1 * sizeof(*c.he));
  c.gnode = malloc(n1 * sizeof(*c.gnode));
  c.firstgpu = malloc(n1 * sizeof(*c.firstgpu));
  c.syncrec = malloc(n1 * sizeof(*c.syncrec));
  c.gsorted = malloc((ng ? ng : 1) * sizeof(*c.gsorted));
  c.lt = malloc((ng ? ng : 1) * sizeof(*c.lt));
  c.streams = malloc((ng ? ng : 1) * sizeof(*c.streams));
  int32_t *prev_sib = malloc(n1 * sizeof(*prev_sib));
  int32_t *last_child = malloc(n1 * sizeof(*last_child));
  int32_t *stack = malloc((ix->nhost ? ix->nhost : 1) * sizeof(*stack));
  r->nodes = malloc(nodes * sizeof(*r->nodes));
  r->order = malloc(nodes * sizeof(*r->order));
  r->gt = malloc((ng ? ng : 1) * sizeof(*r->gt));
  r->blk = malloc((ncalls ? ncalls : 1) * sizeof(*r->blk));
  r->step_node = malloc(2 * ix->nsteps * sizeof(*r->step_node));
  r->rt = malloc(nodes * sizeof(*r->rt));
  r->rend = malloc(nodes * sizeof(*r->rend));
  int rc = PD_ENOMEM;
  if (!c.own || !c.acc || !c.gapbits || !c.devread || !c.hs || !c.he || !c.gnode || !c.firstgpu || !c.syncrec || !c.gsorted ||
      !c.lt || !c.streams || !prev_sib || !last_child || !stack || !r->nodes || !r->order || !r->gt || !r->blk ||
      !r->step_node || !r->rt || !r->rend)
    goto out;
  if (nwaitcorr > 0 && pd_corr_map_init(&c.corr, ncalls) != 0) goto out;
  for (size_t i = 0; i < n; i++) c.hs[i] = c.he[i] = c.gnode[i] = c.firstgpu[i] = c.syncrec[i] = last_child[i] = -1;

  /* What each event is. */
  for (size_t i = 0; i < n; i++) {
    const pd_event_t *e = &ev[i];
    int32_t call = ix->call[i];
    if (pd_event_is_gpu_activity(e->kind) && call >= 0) {
      if (c.firstgpu[call] < 0) c.firstgpu[call] = (int32_t)i;
    } else if (e->kind == PD_EVENT_SYNC && call >= 0 && c.syncrec[call] < 0) {
      c.syncrec[call] = (int32_t)i;
    } else if (is_call(e)) {
      if (pd_api_is_device_alloc(e->name)) c.own[i] |= RP_B_ALLOC;
      if (nwaitcorr && e->correlation_id != 0) pd_corr_map_put(&c.corr, e->correlation_id, (int32_t)i);
    } else if ((e->kind == PD_EVENT_RANGE || e->kind == PD_EVENT_CPU_OP) && pd_range_is_data_wait(e->name)) {
      c.own[i] |= RP_B_DATA;
    }
  }
  for (size_t i = 0; i < n; i++) {
    int32_t call = ix->call[i];
    if (ev[i].kind == PD_EVENT_MEMCPY && call >= 0 && is_pageable_copy(&ev[i]) && !(c.own[call] & RP_B_READ)) {
      c.own[call] |= RP_B_PAGEABLE;
      int32_t op = ix->parent[call];
      if (op >= 0 && ev[op].kind == PD_EVENT_CPU_OP) c.own[op] |= RP_B_PGOP;
    }
  }
  /* Earlier siblings: per parent (or per thread at the top), the op before. */
  {
    int32_t top_last = -1;
    uint32_t pid = 0, tid = 0;
    for (size_t k = 0; k < ix->nhost; k++) {
      int32_t e = ix->host_order[k];
      if (k == 0 || ev[e].pid != pid || ev[e].tid != tid) {
        pid = ev[e].pid;
        tid = ev[e].tid;
        top_last = -1;
      }
      int32_t p = ix->parent[e];
      if (p >= 0) {
        prev_sib[e] = last_child[p];
        last_child[p] = e;
      } else {
        prev_sib[e] = top_last;
        top_last = e;
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (!is_call(&ev[i])) continue;
    int32_t g = c.firstgpu[i];
    bool dev = (g >= 0 && ev[g].kind == PD_EVENT_MEMCPY && ev[g].u.memcpy.copy_kind == PD_MEMCPY_DTOH) ||
               call_blocks(&c, (int32_t)i);
    for (int32_t a = (int32_t)i; dev && a >= 0 && !c.devread[a]; a = ix->parent[a]) c.devread[a] = 1;
  }
  const bool ops = has_op_layer(&c);
  size_t call_reads = 0;
  if (ops) mark_reads(&c, prev_sib);
  else call_reads = mark_call_reads(&c);
  if (mark_tiny(&c) != 0) goto out;

  r->nnodes = 0;
  r->call_cost_ns = cost != NULL && cost->ns_per_call > 0 ? (int64_t)cost->ns_per_call : 0;
  if (sweep_host(&c, cost, stack, ops) != 0) goto out;
  r->info.host_tasks = r->nnodes;
  r->info.pinned_gbps = measure_pinned_gbps(trace, &r->info.pinned_source);
  if (build_gpu(&c, r->info.pinned_gbps) != 0) goto out;
  r->info.gpu_tasks = ng;
  if (build_blocks(&c) != 0 || build_waits(&c) != 0) goto out;
  carry_cuts(r, cost != NULL ? cost->host_slowdown : 0.0);
  r->deps = malloc((c.bdep.n + c.gdep.n + 1) * sizeof(*r->deps));
  if (r->deps == NULL) goto out;
  size_t nd = 0;
  to_csr(r, &c.gdep, &nd, 0, true);
  to_csr(r, &c.bdep, &r->ndeps, nd, false);
  r->info.launch_latency_ns = median_or(&c.lat, 0);
  if (measure_queue_gaps(&c) != 0) goto out;
  {
    /* a non-blocking copy call, for PD_FIX_PAGEABLE's asynchronous copies */
    i64vec_t ac = {0};
    for (size_t i = 0; i < n; i++) {
      int32_t g = c.firstgpu[i];
      if (g >= 0 && ev[g].kind == PD_EVENT_MEMCPY && !is_pageable_copy(&ev[g]) &&
          pd_api_sync_scope(ev[i].name) == PD_SYNC_SCOPE_NONE && i64_push(&ac, pd_event_dur_ns(&ev[i])) != 0) {
        free(ac.v);
        goto out;
      }
    }
    r->async_copy_ns = median_or(&ac, RP_GRAPH_NODE_NS);
    free(ac.v);
  }
  for (size_t i = 0; i < r->nnodes; i++) {
    const rp_node_t *x = &r->nodes[i];
    if (x->type == RP_GPU && r->gt[x->aux].launch >= 0) r->info.edges++;
    if (x->prev >= 0) r->info.edges++;
  }
  /* Per-step counts of what the fixes touch. */
  double steps = (double)ix->nsteps;
  size_t reads = call_reads, allocs = 0;
  for (size_t i = 0; i < n; i++) {
    if (ix->step[i] < 0) continue;
    if ((c.own[i] & RP_B_READ) && is_read_op(ev[i].name) && !(ix->parent[i] >= 0 && is_read_op(ev[ix->parent[i]].name)))
      reads++;
    if (c.own[i] & RP_B_ALLOC) allocs++;
  }
  r->info.reads_per_step = (double)reads / steps;
  r->info.alloc_calls_per_step = (double)allocs / steps;
  r->info.pageable_copies_per_step /= steps;
  r->info.launches_per_step /= steps;
  r->info.tiny_ops_per_step /= steps;
  if (anchor_waits(&c) != 0) goto out;
  r->info.ops_known = ops;
  r->info.host_code_known = ops;
  /* without ops, the program's step ranges leave the time between them */
  for (size_t i = 0; i < n && !r->info.host_code_known; i++)
    r->info.host_code_known = !is_step_marker(&ev[i]) && is_step_layer(&c, (int32_t)i);
  loader_share(r, ix, ev);
  for (size_t s = 0; s < ix->nsteps; s++) {
    r->step_node[2 * s] = c.hs[ix->steps[s].ev];
    r->step_node[2 * s + 1] = c.he[ix->steps[s].ev];
  }
  if (topo_order(r) != 0) goto out;

  if (ng == 0) set_quality(r, PD_REPLAY_APPROXIMATE, "no GPU activity in the trace: host tasks only");
  else if (c.lat.n == 0) set_quality(r, PD_REPLAY_APPROXIMATE, "no correlation ids link GPU work to its launches");
  if (nsync == 0 && r->info.inferred_syncs > 0)
    set_quality(r, PD_REPLAY_APPROXIMATE, "no synchronization records: sync targets inferred from API names");
  else if (r->info.inferred_syncs > 0)
    set_quality(r, PD_REPLAY_APPROXIMATE, "some sync targets inferred from API names");
  rc = 0;
out:
  free(c.own);
  free(c.acc);
  free(c.gapbits);
  free(c.devread);
  free(c.hs);
  free(c.he);
  free(c.gnode);
  free(c.firstgpu);
  free(c.syncrec);
  free(c.gsorted);
  free(c.lt);
  free(c.streams);
  free(c.ts);
  pd_corr_map_free(&c.corr);
  free(c.gdep.v);
  free(c.bdep.v);
  free(c.lat.v);
  free(c.wake.v);
  free(c.unblocked.v);
  free(prev_sib);
  free(last_child);
  free(stack);
  if (rc != 0) {
    pd_replay_destroy(r);
    return rc;
  }
  *out = r;
  return 0;
}
