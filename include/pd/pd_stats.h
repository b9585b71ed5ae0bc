/* pd_stats.h: what the model layer (src/model) derives from events.
 *
 *  - key averages: torch's key_averages() over host ranges, with GPU work attributed
 *    through correlation ids to the innermost range open on the launching thread;
 *  - step metrics: per-step counts and times read from a cycle's events;
 *  - diagnosis: one table of rules that names the bottleneck with its evidence.
 *
 * Everything here reads pd_event_t only; none of it needs a GPU.
 */
#ifndef PD_STATS_H
#define PD_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_classify.h" /* the classifiers the metrics count by */
#include "pd/pd_event.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- key averages -------------------------------------------------------------- */

typedef struct {
  const char *name;  /* owned by the table */
  const char *shape; /* owned by the table; NULL unless grouped by shape */
  const char *stack; /* owned by the table; NULL unless grouped by stack (see
                        pd_op_table_set_group_by_stack) or for ops without a stack */
  int64_t calls;         /* op instances (kernel view: GPU activities) */
  int64_t self_cpu_ns;   /* duration minus direct children (nested ranges, API calls) */
  int64_t cpu_total_ns;  /* duration */
  int64_t self_cuda_ns;  /* GPU time of kernels/memcpy/memset launched directly in this range */
  int64_t cuda_total_ns; /* ... plus those launched in ranges nested inside it */
  int64_t kernel_count;  /* GPU activities attributed (self) */
} pd_op_stat_t;

/* One table for sort keys: X(NAME, torch's sort_by text). */
#define PD_SORT_KEY_MAP(X)                          \
  X(SELF_CUDA_TIME_TOTAL, "self_cuda_time_total")   \
  X(CUDA_TIME_TOTAL, "cuda_time_total")             \
  X(SELF_CPU_TIME_TOTAL, "self_cpu_time_total")     \
  X(CPU_TIME_TOTAL, "cpu_time_total")               \
  X(COUNT, "count")

typedef enum {
#define PD_SORT_GEN(name, text) PD_SORT_##name,
  PD_SORT_KEY_MAP(PD_SORT_GEN)
#undef PD_SORT_GEN
} pd_sort_key_t;

/* Returns 0 and sets *key for a sort_by text, or PD_EINVAL when unknown. */
int pd_sort_key_parse(const char *text, pd_sort_key_t *key);

typedef struct pd_op_table pd_op_table_t;

typedef enum {
  PD_GROUP_BY_RANGE = 0,       /* host ranges and CUDA API calls are the "ops" (key_averages) */
  PD_GROUP_BY_RANGE_AND_SHAPE, /* key_averages(group_by_input_shape=True) */
  PD_GROUP_BY_KERNEL           /* kernel-level view: GPU activities by name */
} pd_group_by_t;

/* Returns a new empty table, NULL on out of memory. Free with pd_op_table_destroy(). */
pd_op_table_t *pd_op_table_create(pd_group_by_t group_by);
/* Frees the table and its rows' strings. NULL: no-op. */
void pd_op_table_destroy(pd_op_table_t *table);
/* Adds one trace's events (a cycle) to the table; rows accumulate over calls. The
 * trace's order does not matter. O(n log n). Returns 0, PD_EINVAL or PD_ENOMEM. */
int pd_op_table_add_trace(pd_op_table_t *table, const pd_trace_t *trace);
/* Also groups rows by the first n frames (innermost first) of each op's call stack
 * (pd_event_t.u.range.stack), as torch's key_averages(group_by_stack_n=n): the row's
 * stack is those frames joined by ';'. Ops without a stack (API calls, runs without
 * with_stack) group by name as before. n = PD_STACK_ALL_FRAMES keeps whole stacks
 * (what pd_op_table_export_stacks() needs). Call before the first add_trace. Returns 0,
 * or PD_EINVAL for n < 1, the kernel view, or a table that already has rows. */
#define PD_STACK_ALL_FRAMES 1000000
int pd_op_table_set_group_by_stack(pd_op_table_t *table, int n);
/* Writes the rows that carry a stack as collapsed stacks, one line each, as torch's
 * prof.export_stacks(path, metric) does, for flamegraph.pl, inferno and speedscope:
 * frames outermost first joined by ';' (spaces and tabs in a frame become '_', as torch
 * translates them), then the op's name as the leaf frame, a space and the metric in
 * whole microseconds; rows whose value rounds to 0 are left out. metric is
 * PD_SORT_SELF_CUDA_TIME_TOTAL or PD_SORT_SELF_CPU_TIME_TOTAL. Returns the number of
 * lines written, PD_EINVAL (other metric, NULL) or PD_EIO (write error). */
int64_t pd_op_table_export_stacks(const pd_op_table_t *table, FILE *out, pd_sort_key_t metric);
/* Same, into the file at path, written to "<path>.tmp.<pid>" and renamed: on failure
 * nothing is left at path. Returns the number of lines, PD_EINVAL or PD_EIO. */
int64_t pd_op_table_export_stacks_file(const pd_op_table_t *table, const char *path, pd_sort_key_t metric);
/* Returns the number of rows that carry a stack (0: no op had one, e.g. a run without
 * with_stack, or the table is not grouped by stack). */
size_t pd_op_table_stack_rows(const pd_op_table_t *table);
/* Sorts rows by key, largest first (ties by name), like torch's sort_by. */
void pd_op_table_sort(pd_op_table_t *table, pd_sort_key_t key);

/* Returns the number of rows. */
size_t pd_op_table_count(const pd_op_table_t *table);
/* Returns the rows, owned by the table, valid until the next add/sort/destroy. */
const pd_op_stat_t *pd_op_table_rows(const pd_op_table_t *table);
/* Prints the table like torch's key_averages().table(): Name, Self CPU %, Self CPU,
 * CPU total %, CPU total, CPU time avg, Self CUDA, Self CUDA %, CUDA total, CUDA time
 * avg, # of Calls (and Input Shapes when grouped by shape, Source Location when grouped
 * by stack: the first frame on the row's line, the others on the lines below, as torch
 * prints them), then "Self CPU time total" and "Self CUDA time total" over all rows. Rows print in the table's current order
 * (pd_op_table_sort() first). row_limit <= 0: all. */
void pd_op_table_print(FILE *out, const pd_op_table_t *table, int row_limit);

/* ---- the linked trace ------------------------------------------------------------ */

/* One ProfilerStep#N range of a trace. */
typedef struct {
  int64_t start_ns, end_ns;
  int64_t number; /* N */
  int32_t ev;     /* index of the RANGE event */
} pd_index_step_t;

/* One linked view of a trace (src/model/trace_index.c), built once and read by key
 * averages, step metrics, the time attribution and the analyzer. Arrays are indexed by
 * event index (-1: none):
 *  - call[i]: for a GPU activity, SYNC or GPU_RANGE record, the RUNTIME/DRIVER call with
 *    its correlation id (the first such call);
 *  - op[i]: the innermost RANGE/CPU_OP open on the thread when host op i began (i itself
 *    for a range); for device records, the op of their call;
 *  - parent[i], depth[i]: nesting of host ops (RANGE, CPU_OP, RUNTIME, DRIVER) per
 *    (pid, tid); depth 0 = outermost;
 *  - step[i]: index into steps[] of the step holding the start of the event's launching
 *    call (its own start when it has none); -1 outside every step.
 * host_order lists the host ops in sweep order (per thread, by start, parents before
 * their children). steps[] is sorted by start. */
typedef struct {
  size_t n;
  int32_t *call, *op, *parent, *step;
  uint32_t *depth;
  int32_t *host_order;
  size_t nhost;
  pd_index_step_t *steps;
  size_t nsteps;
} pd_trace_index_t;

/* Builds the index of trace (any event order). Returns 0, PD_EINVAL or PD_ENOMEM (then
 * *ix is empty). Free with pd_trace_index_free(). */
int pd_trace_index_build(const pd_trace_t *trace, pd_trace_index_t *ix);
/* Frees the arrays and zeroes *ix; NULL is a no-op. */
void pd_trace_index_free(pd_trace_index_t *ix);
/* Index into ix->steps of the step whose [start, end) holds t, or -1. */
long pd_trace_index_step_at(const pd_trace_index_t *ix, int64_t t);
/* pd_op_table_add_trace() from an index of that trace already built (one index serves
 * the whole analysis). Returns 0, PD_EINVAL (an index of another trace) or PD_ENOMEM. */
int pd_op_table_add_index(pd_op_table_t *table, const pd_trace_t *trace, const pd_trace_index_t *ix);
/* Kernel, memcpy or memset. */
bool pd_event_is_gpu_activity(pd_event_kind_t k);
/* RANGE, CPU_OP, RUNTIME or DRIVER. */
bool pd_event_is_host_op(pd_event_kind_t k);
/* end - start, never negative. */
int64_t pd_event_dur_ns(const pd_event_t *e);

/* ---- step metrics ------------------------------------------------------------------ */

/* One table for the metrics of the metrics JSON: X(field, kind, class). The field name is
 * the JSON key.
 *
 * Kinds say what a value is: TIME (seconds or us), COUNT (per step, or bytes), RATIO,
 * INFO (reported only).
 *
 * Classes say where a value is stable, and so how the regression gate judges it
 * (docs/gate.md has the measurements):
 *  - DEVICE: GPU time measured by CUPTI (kernel, memcpy, memset time per step, the mean
 *    kernel time). The same on every host of one GPU model (0.3% between two H100
 *    hosts), so it is held to stored per-GPU baselines with a tight tolerance.
 *  - COUNT: kernels, calls, syncs, allocations, bytes per step, peak memory, dropped
 *    records. Exact on every host.
 *  - HOST: wall-clock times and what derives from them (step time, data wait, time
 *    inside sync and alloc calls, the busy and wait fractions). A host-bound step's time
 *    moved 15-52% between hosts of one GPU model, so against stored baselines only a
 *    gross change fails; finer changes are judged A/B on one machine.
 *  - INFO: reported, never judged (the losses). */
#define PD_METRIC_KIND_MAP(X) X(TIME) X(COUNT) X(RATIO) X(INFO)
typedef enum {
#define PD_MK_GEN(name) PD_METRIC_##name,
  PD_METRIC_KIND_MAP(PD_MK_GEN)
#undef PD_MK_GEN
} pd_metric_kind_t;

/* X(NAME, text) */
#define PD_METRIC_CLASS_MAP(X) \
  X(DEVICE, "device")          \
  X(COUNT, "count")            \
  X(HOST, "host")              \
  X(INFO, "info")
typedef enum {
#define PD_MC_GEN(name, text) PD_METRIC_CLASS_##name,
  PD_METRIC_CLASS_MAP(PD_MC_GEN)
#undef PD_MC_GEN
  PD_METRIC_NCLASSES
} pd_metric_class_t;

/* Returns "device", "count", "host" or "info"; "?" out of range. Static storage. */
const char *pd_metric_class_name(pd_metric_class_t c);

#define PD_METRICS_MAP(X)                              \
  X(avg_step_time_s, TIME, HOST)                       \
  X(avg_dataloader_wait_s, TIME, HOST)                 \
  X(p50_step_time_s, TIME, HOST)                       \
  X(p95_step_time_s, TIME, HOST)                       \
  X(dataloader_wait_fraction, RATIO, HOST)             \
  X(gpu_busy_fraction, RATIO, HOST)                    \
  X(kernels_per_step, COUNT, COUNT)                    \
  X(avg_kernel_time_us, TIME, DEVICE)                  \
  X(gpu_kernel_time_per_step_us, TIME, DEVICE)         \
  X(gpu_memcpy_time_per_step_us, TIME, DEVICE)         \
  X(gpu_memset_time_per_step_us, TIME, DEVICE)         \
  X(runtime_calls_per_step, COUNT, COUNT)              \
  X(sync_calls_per_step, COUNT, COUNT)                 \
  X(sync_time_per_step_us, TIME, HOST)                 \
  X(device_alloc_calls_per_step, COUNT, COUNT)         \
  X(device_alloc_time_per_step_us, TIME, HOST)         \
  X(h2d_bytes_per_step, COUNT, COUNT)                  \
  X(peak_device_memory_bytes, COUNT, COUNT)            \
  X(loss_first, INFO, INFO)                            \
  X(loss_last, INFO, INFO)                             \
  X(dropped_records, COUNT, COUNT)                     \
  X(step_wall_us, TIME, INFO)                          \
  X(cost_data_wait_us_per_step, TIME, INFO)            \
  X(cost_sync_us_per_step, TIME, INFO)                 \
  X(cost_allocation_us_per_step, TIME, INFO)           \
  X(cost_pageable_copy_us_per_step, TIME, INFO)        \
  X(cost_launch_bound_us_per_step, TIME, INFO)         \
  X(cost_gpu_compute_us_per_step, TIME, INFO)          \
  X(cost_other_us_per_step, TIME, INFO)                \
  X(pageable_copies_per_step, COUNT, COUNT)             \
  X(pageable_copy_bytes_per_step, COUNT, COUNT)         \
  X(sync_memcpy_calls_per_step, COUNT, COUNT)           \
  X(sync_memset_calls_per_step, COUNT, COUNT)           \
  X(max_gpu_gap_us, TIME, INFO)                        \
  X(fp32_matmul_time_share, RATIO, INFO)               \
  X(device_memory_total_bytes, COUNT, COUNT)          \
  X(slow_steps, INFO, INFO)                            \
  X(replay_step_us, TIME, INFO)                        \
  X(replay_step_error_median_fraction, RATIO, INFO)    \
  X(replay_step_error_max_fraction, RATIO, INFO)       \
  X(predicted_unprofiled_step_us, TIME, INFO)          \
  X(replay_launch_latency_us, TIME, INFO)              \
  X(replay_wake_latency_us, TIME, INFO)                \
  X(replay_queue_gap_us, TIME, INFO)                   \
  X(replay_reads_per_step, INFO, INFO)                 \
  X(replay_tiny_ops_per_step, INFO, INFO)              \
  X(replay_data_wait_share, RATIO, INFO)               \
  X(saving_data_wait_us_per_step, TIME, INFO)          \
  X(saving_loader_2x_us_per_step, TIME, INFO)          \
  X(saving_blocking_reads_us_per_step, TIME, INFO)     \
  X(saving_blocking_reads_async_us_per_step, TIME, INFO) \
  X(saving_pageable_copy_us_per_step, TIME, INFO)      \
  X(saving_allocation_us_per_step, TIME, INFO)         \
  X(saving_launch_overhead_us_per_step, TIME, INFO)    \
  X(saving_tiny_ops_us_per_step, TIME, INFO)           \
  X(saving_host_code_us_per_step, TIME, INFO)          \
  X(saving_combined_us_per_step, TIME, INFO)

typedef struct {
#define PD_METRIC_FIELD(field, kind, cls) double field;
  PD_METRICS_MAP(PD_METRIC_FIELD)
#undef PD_METRIC_FIELD
  int steps; /* number of profiled steps the metrics come from */
  /* The replay behind the saving_* metrics (pd_replay.h), not in the metrics table: its
   * pd_replay_quality_t (-1: no replay was run), why it is approximate or unavailable, the
   * profiler cost model it took out, and the fixes replayed together for
   * saving_combined_us_per_step (PD_FIX_BIT mask). */
  int replay_quality;
  char replay_why[256];
  char replay_cost_model[96];
  unsigned replay_combined_mask;
  bool replay_ops_known; /* pd_replay_info_t.ops_known: false, the reads and host code were
                            found without ops (the evidence says so) */
  /* pd_replay_info_t.pinned_gbps and pinned_source: the bandwidth the pageable_copy fix
   * copies at (its evidence names it); 0 and "" without a replay */
  double replay_pinned_gbps;
  char replay_pinned_source[48];
} pd_metrics_t;

typedef struct {
  const char *name;
  pd_metric_kind_t kind;
  pd_metric_class_t cls;
  size_t offset; /* offsetof(pd_metrics_t, field) */
} pd_metric_desc_t;

/* Returns the metric descriptor table and its length (static storage). */
const pd_metric_desc_t *pd_metric_descs(size_t *count);
/* Returns the descriptor for a JSON key, or NULL when unknown. */
const pd_metric_desc_t *pd_metric_find(const char *name);
/* Sets every metric to NaN ("not measured", null in the metrics JSON) and steps to 0. */
void pd_metrics_init(pd_metrics_t *m);


/* Fills the GPU-side metrics of *m (kernels_per_step, avg_kernel_time_us,
 * gpu_busy_fraction, sync/alloc calls, h2d bytes, peak memory, dropped_records,
 * steps, ...) from a cycle's events, per ProfilerStep#N range (docs/formats.md says how
 * each is counted). Host-timed fields (step times, data wait, loss) are left as they
 * are. Values that cannot be measured (avg kernel time with no kernel, peak memory
 * with no memory record) are NaN. Returns 0, PD_EINVAL when the trace holds no step
 * range, or PD_ENOMEM. */
int pd_metrics_from_trace(const pd_trace_t *trace, pd_metrics_t *m);

/* The same from a trace and its index (pd_trace_index_build()), for callers that
 * already have one. */
int pd_metrics_from_index(const pd_trace_t *trace, const pd_trace_index_t *ix, pd_metrics_t *m);

/* Fills avg/p50/p95 step time, avg data wait and dataloader_wait_fraction (total wait /
 * (total wait + total step time)) from per-step samples (seconds). Either array may be
 * NULL; fields that cannot be computed (n == 0, a NULL array) become NaN. */
void pd_metrics_from_samples(pd_metrics_t *m, const double *step_times_s,
                             const double *data_wait_s, size_t n);

/* ---- time attribution ---------------------------------------------------------------- */

/* Where a step's wall time went, one table: X(NAME, text). Each step's time is split
 * into disjoint costs (src/model/attribute.c; docs/diagnosis.md says how):
 *  - DATA: GPU idle while the launching thread waits in a data-loading range, plus GPU
 *    time that only host-to-device copies fill (input copies);
 *  - SYNC: GPU idle a host-blocking call causes: its blocked time is credit that later
 *    stretches of GPU idle waiting for the host (in the same step) are claimed from;
 *  - ALLOCATION: the same for cudaMalloc/cudaFree and their driver equivalents;
 *  - PAGEABLE_COPY: the same for copies from or to pageable host memory;
 *  - LAUNCH_BOUND: the rest of the GPU idle before a launch: the host was issuing work
 *    slower than the GPU finished it (op dispatch, launch calls, launch latency);
 *  - GPU_COMPUTE: GPU busy with kernels, sets or other copies;
 *  - OTHER: GPU idle with no launch to blame (the tail after the last activity, waits on
 *    other streams or events). */
#define PD_CAUSE_MAP(X)                 \
  X(DATA, "data_wait")                  \
  X(SYNC, "sync")                       \
  X(ALLOCATION, "allocation")           \
  X(PAGEABLE_COPY, "pageable_copy")     \
  X(LAUNCH_BOUND, "launch_bound")       \
  X(GPU_COMPUTE, "gpu_compute")         \
  X(OTHER, "other")

typedef enum {
#define PD_CAUSE_GEN(name, text) PD_CAUSE_##name,
  PD_CAUSE_MAP(PD_CAUSE_GEN)
#undef PD_CAUSE_GEN
  PD_CAUSE_COUNT
} pd_cause_t;

/* Returns "data_wait", ...; "?" out of range. */
const char *pd_cause_name(pd_cause_t c);

typedef struct {
  size_t steps;                     /* steps the costs come from */
  int64_t step_ns;                  /* sum of those steps' wall time */
  int64_t cost_ns[PD_CAUSE_COUNT];  /* disjoint; they sum to step_ns */
  int64_t max_gap_ns_sum;           /* sum over steps of each step's longest GPU idle gap */
  int64_t pageable_copies, pageable_bytes;
  int64_t sync_memcpy_calls, sync_memset_calls;
  int64_t matmul_ns, matmul_fp32_ns; /* kernel time of GEMM/convolution kernels; of which
                                        without Tensor Cores (by name) */
  int64_t kernel_ns;
  size_t slow_steps;        /* steps over twice the median step: counted apart, not in the costs */
  int64_t all_step_ns, all_busy_ns; /* wall and GPU busy time of every step, slow ones included */
  int64_t slowest_step_ns;
} pd_attribution_t;

/* Splits the wall time of every step of the indexed trace into causes, summed over the
 * steps. Returns 0, PD_EINVAL (no step), PD_EPARSE (steps too long to sum in int64 ns) or
 * PD_ENOMEM. */
int pd_attribute(const pd_trace_t *trace, const pd_trace_index_t *ix, pd_attribution_t *out);
/* Copies the attribution into the metrics (per-step costs, step_wall_us, the counts
 * behind the findings); device_memory_total_bytes from the trace's first device. */
void pd_attribution_to_metrics(const pd_attribution_t *a, const pd_trace_t *trace, pd_metrics_t *m);

/* ---- diagnosis ----------------------------------------------------------------------- */

/* One table for bottleneck names: X(NAME, text). */
#define PD_BOTTLENECK_MAP(X)                 \
  X(COMPUTE, "compute")                      \
  X(DATALOADER, "dataloader")                \
  X(SYNC, "sync")                            \
  X(LAUNCH_OVERHEAD, "launch_overhead")      \
  X(ALLOCATOR_CHURN, "allocator_churn")      \
  X(PAGEABLE_COPY, "pageable_copy")          \
  X(HOST_BOUND, "host_bound")                \
  X(HOST_CODE, "host_code")

typedef enum {
#define PD_BN_GEN(name, text) PD_BOTTLENECK_##name,
  PD_BOTTLENECK_MAP(PD_BN_GEN)
#undef PD_BN_GEN
  PD_BOTTLENECK_COUNT
} pd_bottleneck_t;

/* Whose advice a verdict gives: the project's knobs, or what a torch.profiler user does. */
typedef enum { PD_ADVICE_DEMO = 0, PD_ADVICE_TORCH } pd_advice_t;

#define PD_MAX_FINDINGS 12

/* One cost or rule behind a verdict. */
typedef struct {
  char cause[32];          /* a cause name (pd_cause_name) or a rule ("tensor_cores_unused") */
  double share_of_step;    /* of the step's wall time; NaN for a rule that is not a time cost */
  double cost_us_per_step; /* NaN likewise */
  char evidence[256];
  char advice[200];
} pd_finding_t;

/* One fix's predicted saving (the replay with it applied, against the predicted unprofiled
 * step). */
#define PD_MAX_SAVINGS 12
typedef struct {
  char cause[32];                /* the fix's name (pd_fix_name) or "combined" */
  double est_saving_us_per_step;
  double est_saving_fraction;    /* of the predicted unprofiled step */
  char evidence[256];
  char advice[200];
} pd_saving_t;

typedef struct {
  pd_bottleneck_t bottleneck;
  char rule[64];           /* what named it: a cause, "gpu_busy", "no_dominant_cause", or
                              "replay" (the fix that saves most) / "replay_balance" */
  char evidence[512];      /* the numbers, in words */
  double share_of_step;    /* of the named cause (the GPU's busy share for compute) */
  double cost_us_per_step;
  char advice[200];
  pd_finding_t findings[PD_MAX_FINDINGS]; /* other causes above their finding share, then rules */
  int nfindings;
  /* From the replay (empty when the metrics carry none): every fix's saving, largest
   * first, then the fixes that are findings replayed together ("combined"). */
  pd_saving_t savings[PD_MAX_SAVINGS];
  int nsavings;
  int replay_quality;            /* pd_replay_quality_t; -1 no replay */
  char replay_why[256];
  char replay_cost_model[96];
  double replay_error_median, replay_error_max; /* fractions; NaN without replay */
  double replay_step_us, predicted_unprofiled_step_us;
} pd_verdict_t;

/* Returns a static string ("launch_overhead"); never NULL. */
const char *pd_bottleneck_name(pd_bottleneck_t b);
/* Returns 0 and sets *b for a name, PD_EINVAL when unknown. */
int pd_bottleneck_parse(const char *name, pd_bottleneck_t *b);
/* True for the verdicts that say where a step's host/GPU balance lies (compute,
 * host_bound, launch_overhead), which moves between hosts of one GPU model, as opposed to
 * a planted cause (dataloader, sync, allocator_churn, pageable_copy). NULL or an unknown
 * name: false. */
bool pd_bottleneck_is_balance(const char *name);
/* Names the bottleneck from the attributed costs in m (cost_*_us_per_step, step_wall_us):
 * the largest cost names it when it reaches its cause's share; GPU compute names
 * `compute`; with no cause dominant, `compute` when the GPU is busy at least half the
 * step and `host_bound` otherwise. Other causes above their finding share and the rules
 * (pageable and synchronous copies, GPU gaps, low utilization, Tensor Cores unused,
 * memory near capacity) become findings. A trace without attribution (old metrics)
 * falls back to the data-wait fraction only. Fills *v (no allocation). */
void pd_diagnose(const pd_metrics_t *m, pd_advice_t advice, pd_verdict_t *v);
/* Prints the verdict, its share and cost, evidence, advice and findings (the console
 * form both programs print). */
void pd_verdict_print(FILE *out, const pd_verdict_t *v);
/* Prints the cause and rule tables (thresholds, what sets them, advice) as Markdown;
 * docs/diagnosis.md carries the same text. */
void pd_diagnose_print_rules(FILE *out);

/* ---- small statistics helpers ---------------------------------------------------------- */

/* Returns the q-quantile (0..1, linear interpolation between closest ranks, as numpy)
 * of n samples, NaN samples ignored; NaN when no sample is left. Does not modify xs. */
double pd_quantile(const double *xs, size_t n, double q);

#ifdef __cplusplus
}
#endif
#endif /* PD_STATS_H */
