/* pd_replay.h: replay of a trace's dependency graph, and what-if replays (model layer).
 *
 * The graph is built once from a trace and its index (pd_trace_index_build):
 *  - host tasks per thread: the stretches between consecutive starts and ends of the
 *    thread's ops and calls (an op's self time, a call's time, the untraced gap between
 *    two ops), each keeping its measured duration while it moves in time;
 *  - GPU tasks per stream: kernels, copies, sets, keeping their measured durations;
 *  - edges: program order per thread; launch (correlation id: the task starts no sooner
 *    than its call's start plus one launch latency per trace, the median measured); stream
 *    order; CUDA event record -> stream wait (Kineto's wait_on_stream and
 *    wait_on_cuda_event_record_corr_id); sync: a blocking call ends no sooner than the GPU
 *    work it waits for plus one wake-up latency per trace (the median measured).
 * Where a trace has no synchronization records for a blocking call, its targets are
 * inferred from the call's name and the streams of its thread, and the replay says it is
 * approximate.
 *
 * A replay computes every node's time in one pass in the measured time order (a
 * topological order of the graph: each edge honoured goes forward in measured time); the
 * cost is O(n log n) to build (one sort) and O(events + edges) per replay. A what-if is a
 * set of fixes (PD_FIX_MAP) applied to the graph before the pass. Steps are cut at the
 * ProfilerStep#N markers: a step's replayed time is its marker's replayed end minus its
 * replayed start.
 */
#ifndef PD_REPLAY_H
#define PD_REPLAY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_event.h"
#include "pd/pd_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One table for the fixes a what-if applies: X(NAME, text, what it does).
 *  - PROFILER: the profiler's own cost per traced call and per range taken out of the host
 *    tasks (the predicted unprofiled program; every saving is stated against it);
 *  - DATA_WAIT: host time inside data-loading ranges removed;
 *  - (every replay) a data wait that waited for the loader (over twice the trace's median
 *    wait and 20 us more) ends at its batch's ready time, which the loader sets: a host
 *    that gets there sooner waits longer, as the unprofiled program does;
 *  - LOADER_2X: the loader twice as fast (twice the workers): those ready times come twice
 *    as fast after the first step's start; where no wait is anchored, a loader that keeps the step
 *    waiting produces one batch per measured step, so at twice its throughput the step
 *    is at most half as long and never shorter than without the wait; each data wait
 *    shrinks by one factor so that the steps' total wait becomes
 *    max(0, S/2 - (S - W)), S the measured steps' total time, W their total wait;
 *  - READS: blocking reads of device values (.item() and the like) removed with the host
 *    work that only feeds them (the reduction ops issued for them since the previous read
 *    in the same parent, and the host time between those ops), and their GPU work;
 *  - READS_ASYNC: the same reads kept but made asynchronous (their waits dropped);
 *  - PAGEABLE: copies from or to pageable host memory at the pinned bandwidth, asynchronous;
 *  - ALLOCATION: cudaMalloc/cudaFree (and driver equivalents) removed with their syncs;
 *  - LAUNCH: the step's launches as one CUDA graph: the host time of the ops that launch
 *    GPU work is gone, and the kernels follow each other at the graph's per-kernel cost;
 *  - TINY_OPS: chains of tiny GPU ops (many consecutive ops whose kernels each run a few
 *    microseconds) fused away: their host time and their GPU work removed;
 *  - HOST_CODE: host time outside any op (inside the step range only, or outside every
 *    range: Python between ops) removed. */
#define PD_FIX_MAP(X)                  \
  X(PROFILER, "profiler")              \
  X(DATA_WAIT, "data_wait")            \
  X(LOADER_2X, "loader_2x")            \
  X(READS, "blocking_reads")           \
  X(READS_ASYNC, "blocking_reads_async") \
  X(PAGEABLE, "pageable_copy")         \
  X(ALLOCATION, "allocation")          \
  X(LAUNCH, "launch_overhead")         \
  X(TINY_OPS, "tiny_ops")              \
  X(HOST_CODE, "host_code")

typedef enum {
#define PD_FIX_GEN(name, text) PD_FIX_##name,
  PD_FIX_MAP(PD_FIX_GEN)
#undef PD_FIX_GEN
  PD_FIX_COUNT
} pd_fix_t;

#define PD_FIX_BIT(f) (1u << (unsigned)(f))

/* Returns "profiler", "data_wait", ...; "?" out of range. Static storage. */
const char *pd_fix_name(pd_fix_t f);
/* Whether a fix is one of its own, to list as a finding and to replay with the other
 * findings: not the profiler's removal (the baseline), nor the asynchronous reads or the
 * twice-as-fast loader, the partial fixes of what blocking_reads and data_wait fix. */
bool pd_fix_is_extra(pd_fix_t f);

/* How much the replay can be trusted: X(NAME, text). */
#define PD_REPLAY_QUALITY_MAP(X) \
  X(EXACT, "exact")              \
  X(APPROXIMATE, "approximate")  \
  X(UNAVAILABLE, "unavailable")
typedef enum {
#define PD_RQ_GEN(name, text) PD_REPLAY_##name,
  PD_REPLAY_QUALITY_MAP(PD_RQ_GEN)
#undef PD_RQ_GEN
} pd_replay_quality_t;

/* Returns "exact", "approximate" or "unavailable"; "?" out of range. */
const char *pd_replay_quality_name(pd_replay_quality_t q);

/* The profiler's own cost per traced host event, taken out by PD_FIX_PROFILER. */
typedef struct {
  double ns_per_call;  /* per runtime/driver call; < 0 unknown (then no cost is removed) */
  double ns_per_range; /* per host range or op; < 0 unknown */
  /* > 1: the profiler makes the host's work inside ops and calls (and the short stretches
   * that issue the next op) this many times as long, and that share of each such task is
   * its cost, in place of the per-call and per-range figures (the Python between ops that
   * host_code removes, blocking calls' waits and allocator or pageable-copy calls are not
   * slowed; a blocking call and the launch latency keep ns_per_call); otherwise off */
  double host_slowdown;
  const char *source; /* where the figures come from, for the JSON ("calibration", ...) */
} pd_replay_cost_t;

/* The documented per-event costs when a trace carries no calibration of its own
 * (docs/diagnosis.md says where they come from): for a trace of profiler_demo and for a
 * torch.profiler trace. */
pd_replay_cost_t pd_replay_cost_default(bool torch_trace);

/* Figures of the graph, fixed when it is built. */
typedef struct {
  pd_replay_quality_t quality;
  char why[256];                /* why approximate or unavailable; "" when exact */
  int64_t launch_latency_ns;    /* median call start -> task start of tasks launched to an idle stream */
  int64_t wake_latency_ns;      /* median GPU work end -> blocking call end of calls that waited */
  int64_t queue_gap_ns;         /* median end -> start of a kernel queued behind a kernel on its stream
                                   (the replay keeps one such median per pair of task classes) */
  double pinned_gbps;           /* host<->device bandwidth used for PD_FIX_PAGEABLE */
  const char *pinned_source;    /* "measured" (pinned copies in the trace), "documented for
                                   <GPU>" (a figure measured on that GPU kind) or "documented" */
  size_t steps;                 /* step markers replayed */
  size_t host_tasks, gpu_tasks, edges;
  size_t blocking_calls, inferred_syncs; /* of those, targets inferred from names */
  double reads_per_step;        /* blocking reads PD_FIX_READS removes, per step */
  double alloc_calls_per_step;  /* allocator calls PD_FIX_ALLOCATION removes */
  double pageable_copies_per_step;
  double tiny_ops_per_step;     /* ops PD_FIX_TINY_OPS removes */
  double launches_per_step;
  double data_wait_share;       /* the steps' data wait over their time (W / S of LOADER_2X) */
  double loader_2x_keep;        /* the share of each data wait LOADER_2X keeps, in [0, 1] */
  bool ops_known;               /* some CUDA call runs inside an op or a range below the
                                   step layer (step markers and the program's step range,
                                   pd_trace_step_range): without that layer (pd_run on a
                                   program that opens no op ranges) reads are found from the
                                   CUDA calls alone (a small device-to-host copy that
                                   blocks), without the ops that feed them */
  bool host_code_known;         /* HOST_CODE has host time to remove: with ops, the time
                                   outside them; without ops, only the time between the
                                   program's step ranges (inside a step marker, outside the
                                   step range), where the trace has such ranges. Else all
                                   host work is "outside every op", and HOST_CODE is no
                                   fix: its saving is left out (NaN) */
  size_t anchored_waits;        /* data waits that waited for the loader: they end at the
                                   batch's ready time, not after a fixed duration */
} pd_replay_info_t;

typedef struct pd_replay pd_replay_t;

/* Builds the graph of trace (indexed by ix, which must stay alive as long as the replay)
 * with the profiler cost model cost (NULL: unknown). Returns 0 and a graph to free with
 * pd_replay_destroy(); PD_EINVAL for NULL arguments or an index of another trace;
 * PD_ENOMEM. A trace without step markers, or with nothing to replay, still gives a graph
 * whose info says unavailable (and every replay reports no step). */
int pd_replay_build(const pd_trace_t *trace, const pd_trace_index_t *ix, const pd_replay_cost_t *cost,
                    pd_replay_t **out);
/* Frees the graph. NULL: no-op. */
void pd_replay_destroy(pd_replay_t *r);
/* The graph's figures; owned by r. */
const pd_replay_info_t *pd_replay_info(const pd_replay_t *r);

/* The result of one replay. */
typedef struct {
  size_t steps;          /* steps replayed (0 when unavailable) */
  double step_us_mean;   /* mean replayed step, the drain included; NaN with no step */
  /* Where the window ends with more GPU work running than it began with, what the GPU's
   * window (first step's start to the GPU's end, less the starting backlog) adds to the
   * steps' host time; else 0. step_us_mean = (sum of the steps + drain_us) / steps, while
   * step_us[] and the errors compare the steps' host ranges alone. */
  double drain_us;
  double measured_us_mean; /* mean measured step of the same steps */
  double err_median;     /* |replayed - measured| / measured over steps, median; NaN without steps */
  double err_max;
} pd_replay_result_t;

/* Replays the graph with the fixes in mask (PD_FIX_BIT(...) or-ed; 0 = unchanged).
 * step_us (may be NULL) receives the replayed time of each step, steps in
 * pd_trace_index_t order (its length is info->steps). Returns 0, PD_EINVAL, PD_ENOMEM. */
int pd_replay_run(pd_replay_t *r, unsigned mask, pd_replay_result_t *res, double *step_us);

/* ---- savings ------------------------------------------------------------------------------ */

/* A fix saving at least this share of the predicted unprofiled step is a finding, and is
 * replayed in the combination; the one saving most names the bottleneck from this share
 * on (docs/diagnosis.md). */
#define PD_SAVING_FINDING_SHARE 0.05
#define PD_SAVING_NAME_SHARE 0.10
/* Host code is work, not dispatch, where a stretch of the step thread's time outside every
 * op is at least this many of its median such stretches: the interpreter could have
 * issued this many ops in it and issued none (docs/diagnosis.md, the host_code fix). */
#define PD_HOST_WORK_GAPS 10

/* Replays the indexed trace unchanged, without the profiler's cost (cost; NULL or a
 * negative figure: pd_replay_cost_default() for the trace's writer, torch when it holds
 * cpu_op events), and with each fix, and fills the replay_* and saving_* metrics of m, its
 * replay_quality, replay_why, replay_cost_model and replay_combined_mask. An unavailable
 * replay leaves the metrics NaN with the why filled. Returns 0, PD_EINVAL or PD_ENOMEM. */
int pd_replay_fill_metrics(const pd_trace_t *trace, const pd_trace_index_t *ix, const pd_replay_cost_t *cost,
                           pd_metrics_t *m);
/* The saving metric of fix f in m (NaN for PROFILER, an unknown fix or no replay). */
double pd_replay_metric_saving(const pd_metrics_t *m, pd_fix_t f);

/* ---- savings over cycles (--repeat) ------------------------------------------------------- */

/* One cycle's replay, as its metrics carry it: its steps, its predicted unprofiled step and
 * replayed step, every fix's saving per step (NaN for PROFILER and where the cycle has
 * none), the combination's saving and mask, and its step errors. */
typedef struct {
  int64_t steps;
  double predicted_unprofiled_step_us, replayed_step_us;
  double saving_us[PD_FIX_COUNT];
  double combined_us;
  unsigned combined_mask;
  double error_median, error_max;
} pd_cycle_savings_t;

/* Every cycle of a run, in order. Zero-initialise; free with pd_cycle_log_free(). */
typedef struct pd_cycle_log_s {
  pd_cycle_savings_t *v;
  size_t n, cap;
} pd_cycle_log_t;

/* Appends the cycle whose replay m holds (pd_replay_fill_metrics) and its step count.
 * A cycle without a replay (NaN predicted step) is kept and counts for nothing over all.
 * Returns 0, PD_EINVAL (NULL, steps < 0) or PD_ENOMEM. */
int pd_cycle_log_add(pd_cycle_log_t *log, const pd_metrics_t *m, int64_t steps);
/* The savings over all cycles into m, for the verdict: each fix's saving per step, the
 * predicted unprofiled step and the replayed step are the means over the cycles with a
 * replay weighted by their steps (the time saved over every recorded step, per step); the
 * combination is averaged only where every such cycle combined the same fixes (else NaN);
 * the step errors are the worst cycle's. With fewer than two such cycles m is left as it
 * is (its own cycle's replay). Returns the number of cycles averaged. */
size_t pd_cycle_log_overall(const pd_cycle_log_t *log, pd_metrics_t *m);
/* One line per cycle: its steps, predicted unprofiled step, and each fix saving at least
 * PD_SAVING_FINDING_SHARE of it. Nothing for fewer than two cycles. */
void pd_cycle_log_print(FILE *out, const pd_cycle_log_t *log);
void pd_cycle_log_free(pd_cycle_log_t *log);

#ifdef __cplusplus
}
#endif
#endif /* PD_REPLAY_H */
