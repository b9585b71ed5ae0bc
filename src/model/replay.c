/* replay.c: the dependency graph of a trace and its replay (pd_replay.h).
 *
 * Nodes: every host op and call of a thread gives a start node and an end node; the
 * stretch between two consecutive nodes of a thread is a host task that keeps its
 * measured duration (the op's self time, the call's time, the untraced gap between ops).
 * Every kernel, copy and set is one GPU node with its measured duration.
 *
 * Edges (each honoured only where it goes forward in measured time, so the measured
 * order is a topological order and one pass replays the graph):
 *  - program order: a host node comes its task's duration after the previous node of
 *    its thread;
 *  - launch: a GPU task starts no sooner than its call's start + L, L the median over the
 *    trace of (task start - call start) for tasks launched onto an idle stream;
 *  - stream order: a GPU task starts no sooner than the previous task of its stream ends;
 *  - event record -> stream wait: the first task of the waiting stream launched after the
 *    cudaStreamWaitEvent starts no sooner than the last task of the recording stream
 *    launched before the cudaEventRecord ends;
 *  - sync: a blocking call ends no sooner than its targets' ends + W, W the median over
 *    the trace of (call end - targets' end) for calls that waited. Targets come from the
 *    trace's synchronization records (stream, context, event) or, where it has none, from
 *    the call's name: the device's streams for cudaDeviceSynchronize and cudaFree, the
 *    thread's streams for a stream or event sync (inferred: the replay is approximate),
 *    the call's own copy for a synchronous or pageable copy. A target that ended after the
 *    call did was not waited for, and is dropped.
 *
 * A what-if (pd_replay_run's mask) changes task durations and drops edges; see the fix
 * table in pd_replay.h and docs/diagnosis.md.
 */
#include "pd/pd_replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_prof.h"
#include "replay_internal.h"

static const char *const fix_names[PD_FIX_COUNT] = {
#define PD_FIX_STR(name, text) text,
    PD_FIX_MAP(PD_FIX_STR)
#undef PD_FIX_STR
};

const char *pd_fix_name(pd_fix_t f) { return (int)f >= 0 && f < PD_FIX_COUNT ? fix_names[f] : "?"; }

bool pd_fix_is_extra(pd_fix_t f) {
  return (int)f >= 0 && f < PD_FIX_COUNT && f != PD_FIX_PROFILER && f != PD_FIX_READS_ASYNC && f != PD_FIX_LOADER_2X;
}

static const char *const quality_names[] = {
#define PD_RQ_STR(name, text) text,
    PD_REPLAY_QUALITY_MAP(PD_RQ_STR)
#undef PD_RQ_STR
};

const char *pd_replay_quality_name(pd_replay_quality_t q) {
  return (int)q >= 0 && q <= PD_REPLAY_UNAVAILABLE ? quality_names[q] : "?";
}

/* Documented costs (docs/diagnosis.md, "The profiler's own cost"). */
pd_replay_cost_t pd_replay_cost_default(bool torch_trace) {
  pd_replay_cost_t c;
  if (torch_trace) {
    c.ns_per_call = RP_TORCH_NS_PER_EVENT;
    c.ns_per_range = RP_TORCH_NS_PER_EVENT;
    c.host_slowdown = RP_TORCH_HOST_SLOWDOWN;
    c.source = "documented torch.profiler cost: host work in ops and calls " RP_STR(RP_TORCH_HOST_SLOWDOWN) "x as long";
  } else {
    c.ns_per_call = RP_OURS_NS_PER_CALL;
    c.ns_per_range = RP_OURS_NS_PER_RANGE;
    c.host_slowdown = 0.0;
    c.source = "documented profiler_demo cost per call and range";
  }
  return c;
}

const pd_replay_info_t *pd_replay_info(const pd_replay_t *r) { return r != NULL ? &r->info : NULL; }

void pd_replay_destroy(pd_replay_t *r) {
  if (r == NULL) return;
  free(r->nodes);
  free(r->order);
  free(r->gt);
  free(r->blk);
  free(r->deps);
  free(r->step_node);
  free(r->rt);
  free(r->rend);
  free(r);
}

/* ---- the pass ------------------------------------------------------------------------------ */

/* a + b for replayed times: saturated at the int64 range (a trace's timestamps may lie
 * anywhere in it, and a gap or latency measured from such a trace may be as large), and
 * never the RP_NOT_DONE sentinel. */
static int64_t rp_add(int64_t a, int64_t b) {
  const int64_t v = pd_add_sat_i64(a, b);
  return v == RP_NOT_DONE ? RP_NOT_DONE + 1 : v;
}

/* Bits a fix removes from host tasks. */
static uint16_t removed_bits(unsigned mask) {
  uint16_t b = 0;
  if (mask & PD_FIX_BIT(PD_FIX_DATA_WAIT)) b |= RP_B_DATA;
  if (mask & PD_FIX_BIT(PD_FIX_READS)) b |= RP_B_READ;
  if (mask & PD_FIX_BIT(PD_FIX_ALLOCATION)) b |= RP_B_ALLOC;
  if (mask & PD_FIX_BIT(PD_FIX_TINY_OPS)) b |= RP_B_TINY;
  if (mask & PD_FIX_BIT(PD_FIX_HOST_CODE)) b |= RP_B_HOSTCODE;
  return b;
}

/* The replayed duration of the host task ending at node x. */
static int64_t task_dur(const pd_replay_t *r, const rp_node_t *x, int64_t seg, unsigned mask, uint16_t rm) {
  if (x->bits & rm) return 0;
  if ((mask & PD_FIX_BIT(PD_FIX_LOADER_2X)) && (x->bits & RP_B_DATA))
    seg = (int64_t)((double)seg * r->info.loader_2x_keep + 0.5);
  if ((mask & PD_FIX_BIT(PD_FIX_PAGEABLE)) && (x->bits & RP_B_PAGEABLE) && seg > r->async_copy_ns)
    seg = r->async_copy_ns;
  if (mask & PD_FIX_BIT(PD_FIX_PROFILER)) seg -= x->cut;
  return seg > 0 ? seg : 0;
}

/* PD_FIX_LAUNCH, the step captured in a CUDA graph and replayed: the host work of its ops
 * and calls, and the stretches that issue them, is gone. What a graph cannot hold stays: a
 * blocking call (pd_replay_run keeps it apart), a data wait, a pageable copy, the Python
 * outside every op that host_code counts as the program's work, and another thread's idle
 * wait. (A graph replays the captured kernels with no host dispatch at all: graphed_b64's
 * truth, docs/diagnosis.md.) */
static bool captured(const rp_node_t *x) {
  return !(x->bits & (RP_B_HOSTCODE | RP_B_DATA | RP_B_PAGEABLE | RP_B_IDLE));
}

/* Whether the sync edges of blocking call b stay in the what-if. */
static bool block_waits(const rp_block_t *b, unsigned mask, uint16_t rm, uint16_t end_bits) {
  if (end_bits & rm) return false; /* the call itself is gone */
  if ((mask & PD_FIX_BIT(PD_FIX_READS_ASYNC)) && (b->bits & RP_B_READ)) return false;
  if ((mask & PD_FIX_BIT(PD_FIX_PAGEABLE)) && (b->bits & RP_B_PAGEABLE)) return false;
  return true;
}

static int64_t gpu_dur(const pd_replay_t *r, const rp_gtask_t *g, unsigned mask) {
  (void)r;
  if ((mask & PD_FIX_BIT(PD_FIX_READS)) && (g->bits & RP_B_READ)) return 0;
  if ((mask & PD_FIX_BIT(PD_FIX_PAGEABLE)) && (g->bits & RP_B_PAGEABLE) && g->pinned_dur < g->dur)
    return g->pinned_dur;
  return g->dur;
}

/* The GPU backlog at nodes n0 and n1 (*b0, *b1), in one pass over the GPU tasks: how long
 * after the node's replayed time the GPU work launched (by its call's measured time) at or
 * before it still runs; 0 when it ends sooner, or for a node not replayed. A task with no
 * launch edge is left out: the replay keeps it at its measured time whatever the host
 * does, so it would bound every what-if by the measured run. */
static void replay_backlogs_ns(const pd_replay_t *r, int32_t n0, int32_t n1, int64_t *b0, int64_t *b1) {
  const int32_t n[2] = {n0, n1};
  bool ok[2];
  int64_t hi[2] = {0, 0}, end[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    ok[k] = n[k] >= 0 && r->rt[n[k]] != RP_NOT_DONE;
    if (ok[k]) {
      hi[k] = r->nodes[n[k]].t;
      end[k] = r->rt[n[k]];
    }
  }
  for (size_t i = 0; (ok[0] || ok[1]) && i < r->nnodes; i++) {
    const rp_node_t *x = &r->nodes[i];
    if (x->type != RP_GPU || r->rt[i] == RP_NOT_DONE) continue;
    const int32_t l = r->gt[x->aux].launch;
    if (l < 0) continue;
    for (int k = 0; k < 2; k++)
      if (ok[k] && r->nodes[l].t <= hi[k] && r->rend[i] > end[k]) end[k] = r->rend[i];
  }
  *b0 = ok[0] ? pd_sub_sat_i64(end[0], r->rt[n0]) : 0;
  *b1 = ok[1] ? pd_sub_sat_i64(end[1], r->rt[n1]) : 0;
}

int pd_replay_run(pd_replay_t *r, unsigned mask, pd_replay_result_t *res, double *step_us) {
  if (r == NULL || res == NULL) return PD_EINVAL;
  res->steps = 0;
  res->step_us_mean = res->measured_us_mean = res->err_median = res->err_max = NAN;
  res->drain_us = 0;
  if (r->info.quality == PD_REPLAY_UNAVAILABLE) return 0;
  const uint16_t rm = removed_bits(mask);
  int64_t *rt = r->rt, *rend = r->rend;
  for (size_t i = 0; i < r->nnodes; i++) rt[i] = RP_NOT_DONE;
  const bool tiny = (mask & PD_FIX_BIT(PD_FIX_TINY_OPS)) != 0;
  const bool graph = (mask & PD_FIX_BIT(PD_FIX_LAUNCH)) != 0;
  /* Without the profiler, a traced call's cost also leaves the latencies around it: the
   * part paid on entry (its records and timestamps before the driver submits) delayed the
   * GPU's start, the part paid on exit delayed the wake-up after a wait; half each. */
  int64_t launch_lat = r->info.launch_latency_ns, wake_lat = r->info.wake_latency_ns;
  if (mask & PD_FIX_BIT(PD_FIX_PROFILER)) {
    launch_lat = launch_lat > r->call_cost_ns / 2 ? launch_lat - r->call_cost_ns / 2 : 0;
    wake_lat = wake_lat > r->call_cost_ns / 2 ? wake_lat - r->call_cost_ns / 2 : 0;
  }
  for (size_t k = 0; k < r->nnodes; k++) {
    const int32_t id = r->order[k];
    const rp_node_t *x = &r->nodes[id];
    int64_t t;
    if (x->type == RP_GPU) {
      const rp_gtask_t *g = &r->gt[x->aux];
      const int64_t prev_end = x->prev >= 0 && rt[x->prev] != RP_NOT_DONE ? rend[x->prev] : RP_NOT_DONE;
      const bool launched = g->launch >= 0 && rt[g->launch] != RP_NOT_DONE;
      if (launched) {
        t = rp_add(rt[g->launch], launch_lat);
        int64_t after = prev_end;
        if (after != RP_NOT_DONE && g->qkey >= 0)
          after = rp_add(after, graph || (tiny && (g->bits & RP_B_TINY)) ? r->graph_node_ns : r->qgap_ns[g->qkey]);
        if (after != RP_NOT_DONE && after > t) t = after;
      } else if (prev_end != RP_NOT_DONE) {
        t = rp_add(prev_end, g->gap);
      } else {
        t = x->t;
      }
      for (int32_t d = g->dep_off; d < g->dep_off + g->dep_n; d++) {
        int32_t src = r->deps[d];
        if (rt[src] != RP_NOT_DONE && rend[src] > t) t = rend[src];
      }
      rt[id] = t;
      rend[id] = rp_add(t, gpu_dur(r, g, mask));
      continue;
    }
    if (x->fork >= 0 && rt[x->fork] != RP_NOT_DONE) {
      /* in a graph no thread hands work to another: the hand-off's distance goes */
      t = rp_add(rt[x->fork], graph ? 0 : pd_sub_sat_i64(x->t, r->nodes[x->fork].t));
      if (x->prev >= 0 && rt[x->prev] != RP_NOT_DONE && rt[x->prev] > t) t = rt[x->prev];
      rt[id] = t;
      continue;
    }
    if (x->prev < 0 || rt[x->prev] == RP_NOT_DONE) {
      rt[id] = x->t; /* the first node of a thread keeps its measured time */
      continue;
    }
    const int64_t base = rt[x->prev];
    if (x->type == RP_HEND && x->aux >= 0) {
      const rp_block_t *b = &r->blk[x->aux];
      int64_t seg = x->seg < b->base_left ? x->seg : b->base_left;
      t = rp_add(base, task_dur(r, x, seg, mask, rm));
      if (block_waits(b, mask, rm, x->bits)) {
        for (int32_t d = b->dep_off; d < b->dep_off + b->dep_n; d++) {
          int32_t src = r->deps[d];
          int64_t ready = rt[src] != RP_NOT_DONE ? rp_add(rp_add(rend[src], wake_lat), b->post) : RP_NOT_DONE;
          if (ready != RP_NOT_DONE && ready > t) t = ready;
        }
      }
      rt[id] = t;
      continue;
    }
    if (x->anchor != RP_NOT_DONE && !(rm & RP_B_DATA)) {
      /* a wait for the loader: its own cost, then the batch's ready time (LOADER_2X: the
       * loader, started with the first step, makes each batch in half the time) */
      const int64_t own = x->seg < r->wait_d0_ns ? x->seg : r->wait_d0_ns;
      int64_t ready = x->anchor;
      if (r->loader_sync >= 0 && rt[r->loader_sync] != RP_NOT_DONE) {
        /* the loader's clock: the replay's lead at the last batch it had ready */
        const int64_t lead = pd_sub_sat_i64(r->nodes[r->loader_sync].t, rt[r->loader_sync]);
        if (lead > 0) ready = pd_sub_sat_i64(ready, lead);
      }
      if (mask & PD_FIX_BIT(PD_FIX_LOADER_2X)) ready = rp_add(r->anchor0_ns, pd_sub_sat_i64(ready, r->anchor0_ns) / 2);
      t = rp_add(base, task_dur(r, x, own, mask & ~PD_FIX_BIT(PD_FIX_LOADER_2X), rm));
      rt[id] = t > ready ? t : ready;
      continue;
    }
    rt[id] = graph && captured(x) ? base : rp_add(base, task_dur(r, x, x->seg, mask, rm));
  }

  /* Steps. */
  size_t ns = 0;
  double sum = 0, msum = 0;
  int32_t first = -1, last = -1; /* start node of the first step replayed, end of the last */
  double *err = r->info.steps ? malloc(r->info.steps * sizeof(*err)) : NULL;
  if (r->info.steps && err == NULL) return PD_ENOMEM;
  for (size_t s = 0; s < r->info.steps; s++) {
    const int32_t a = r->step_node[2 * s], b = r->step_node[2 * s + 1];
    double us = NAN;
    if (a >= 0 && b >= 0 && rt[a] != RP_NOT_DONE && rt[b] != RP_NOT_DONE) {
      us = (double)pd_sub_sat_i64(rt[b], rt[a]) / 1e3;
      const double m = (double)pd_sub_sat_i64(r->nodes[b].t0, r->nodes[a].t0) / 1e3;
      sum += us;
      msum += m;
      err[ns++] = m > 0 ? fabs(us - m) / m : 0.0;
      if (first < 0 || r->nodes[a].t < r->nodes[first].t) first = a;
      if (last < 0 || r->nodes[b].t > r->nodes[last].t) last = b;
    }
    if (step_us != NULL) step_us[s] = us;
  }
  res->steps = ns;
  if (ns > 0) {
    /* Where the GPU work still running when the last step's host part ends exceeds what
     * was running when the first began, the GPU sets the window: from the first step's
     * start to the GPU's end, less the backlog the window began with. The drain is what
     * that adds to the steps' host time (the GPU's tail and the host time between steps,
     * during which the GPU kept working); spread over the steps, it bounds a what-if
     * whose host runs ahead of the GPU (no sync left) by the GPU's own work, as the
     * launch queue bounds the program. A window that starts and ends with the same
     * backlog (a GPU-bound program in its steady state) adds nothing. */
    int64_t b0, b1;
    replay_backlogs_ns(r, first, last, &b0, &b1);
    if (b1 > b0) {
      const double span_us = (double)pd_sub_sat_i64(rt[last], rt[first]) / 1e3;
      const double gpu_window_us = span_us + (double)(b1 - b0) / 1e3;
      res->drain_us = gpu_window_us > sum ? gpu_window_us - sum : 0.0;
    }
    res->step_us_mean = (sum + res->drain_us) / (double)ns;
    res->measured_us_mean = msum / (double)ns;
    res->err_median = pd_quantile(err, ns, 0.5);
    double mx = 0;
    for (size_t i = 0; i < ns; i++)
      if (err[i] > mx) mx = err[i];
    res->err_max = mx;
  }
  free(err);
  return 0;
}
