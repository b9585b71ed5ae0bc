/* pd_analyze.h: the trace analyzer behind profile_analyze.
 *
 *  - the trace reader (pd_reader.h, model layer), included here;
 *  - device top table in the spirit of MegEngine's profile_analyze: device self time per
 *    kernel/copy/set (or per type), cumulative share, bytes and bandwidth, launching op
 *    and input shapes; and a per-op diff of two traces;
 *  - step breakdown: each ProfilerStep#N carved into disjoint parts (kernel, memcpy,
 *    memset, runtime, dataloader, CPU exec, other), GPU utilization, and GPU idle time
 *    split into host wait / kernel wait / other (Holistic Trace Analysis' definition);
 *  - memory timeline from [memory] events; an analysis bundle with step metrics and the
 *    verdict; text, JSON and self-contained HTML reports.
 *
 * Everything here reads pd_event_t only and needs no GPU. Times are int64 nanoseconds.
 */
#ifndef PD_ANALYZE_H
#define PD_ANALYZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_event.h"
#include "pd/pd_reader.h"
#include "pd/pd_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device top table (MegEngine's profile_analyze) ---------------------------------------- */

/* One table for device row types: X(NAME, text). RANGE rows are gpu_user_annotation
 * spans: they cover the kernels inside them, so they are listed only when the type filter
 * asks for "range", and never count in the device total. */
#define PD_DEV_TYPE_MAP(X) X(KERNEL, "kernel") X(MEMCPY, "memcpy") X(MEMSET, "memset") X(RANGE, "range")
typedef enum {
#define PD_DEV_TYPE_GEN(name, text) PD_DEV_##name,
  PD_DEV_TYPE_MAP(PD_DEV_TYPE_GEN)
#undef PD_DEV_TYPE_GEN
  PD_DEV_TYPE_COUNT
} pd_dev_type_t;

/* Returns "kernel", "memcpy", ...; never NULL. */
const char *pd_dev_type_name(pd_dev_type_t t);
/* Returns 0 and sets *t for a type name, PD_EINVAL when unknown. */
int pd_dev_type_parse(const char *text, pd_dev_type_t *t);

typedef enum { PD_AGG_NAME = 0, PD_AGG_TYPE } pd_aggregate_t;
typedef enum { PD_ORDER_TIME = 0, PD_ORDER_MEMORY, PD_ORDER_CALLS } pd_order_t;

typedef struct {
  pd_aggregate_t aggregate; /* rows per name (default) or per type */
  pd_order_t order;         /* time: device self time; memory: bytes moved; calls */
  int64_t min_time_ns;      /* keep only activities that ran at least this long (0: all) */
  const char *type;         /* NULL: all; a type name keeps that type; any other text keeps
                               rows whose name or launching op contains it */
} pd_top_opts_t;

typedef struct {
  const char *name;   /* kernel name, Kineto copy/set name, or the type name; owned by the table */
  pd_dev_type_t type;
  int64_t calls;
  int64_t total_ns;   /* device self time, summed over calls */
  int64_t min_ns, max_ns;
  uint64_t bytes;     /* memcpy/memset bytes (0 for kernels and ranges) */
  const char *op;     /* innermost host range / torch op of the launching call; NULL unknown */
  bool op_varies;     /* calls came from more than one op */
  const char *shape;  /* that op's input shapes; NULL when none */
  bool shape_varies;  /* calls came with more than one shape */
  double pct;         /* total_ns / device total x 100 (NaN for RANGE rows) */
  double cum_pct;     /* running sum of pct in table order (NaN for RANGE rows) */
} pd_top_row_t;

typedef struct pd_top pd_top_t;

/* Builds the table from a trace's GPU activity. On success *out owns a table: free it
 * with pd_top_destroy(). Returns 0, PD_EINVAL or PD_ENOMEM. */
int pd_top_build(const pd_trace_t *trace, const pd_top_opts_t *opts, pd_top_t **out);
/* Frees the table and its strings; NULL is a no-op. */
void pd_top_destroy(pd_top_t *top);
/* Rows in table order (valid while the table lives). */
size_t pd_top_count(const pd_top_t *top);
const pd_top_row_t *pd_top_rows(const pd_top_t *top);
/* Device total: kernel + memcpy + memset time of every activity in the trace (before the
 * filters), the denominator of pct. */
int64_t pd_top_device_total_ns(const pd_top_t *top);
/* Prints the table: device self time, %, cum %, calls, avg, bytes, GB/s, type, name,
 * op and shapes. limit <= 0: every row. */
void pd_top_print(FILE *out, const pd_top_t *top, int limit);

/* ---- diff of two traces ------------------------------------------------------------------ */

typedef struct {
  const char *name;    /* owned by the diff */
  pd_dev_type_t type;
  double a_calls, b_calls; /* per step (per trace when a trace has no step) */
  double a_ns, b_ns;       /* device self time per step */
  double delta_ns;         /* b_ns - a_ns */
  double delta_pct;        /* delta_ns / a_ns x 100; NaN when the row is new in b */
} pd_diff_row_t;

typedef struct pd_diff pd_diff_t;

/* Pairs the rows of two top tables by (type, name); times and calls are divided by each
 * trace's step count (a count <= 0 counts as 1: the whole trace). Rows are ordered by
 * |delta_ns|, largest first. *out owns the result; free with pd_diff_destroy(). Returns
 * 0, PD_EINVAL or PD_ENOMEM. */
int pd_diff_build(const pd_top_t *a, int a_steps, const pd_top_t *b, int b_steps, pd_diff_t **out);

/* One named total of one side of a diff: calls and time summed over that side's steps.
 * Device time for kernels, copies and sets; for RANGE rows whatever time the caller
 * compares (the regression gate uses host ops' self CPU time). */
typedef struct {
  const char *name; /* borrowed */
  pd_dev_type_t type;
  double calls;
  double total_ns;
} pd_diff_input_t;

/* The same diff from plain rows: rows of one side with the same (type, name) are summed
 * (so the rows of several runs can be passed together with their total steps), then
 * paired and divided by each side's steps (<= 0 counts as 1). The device totals add up
 * the non-RANGE rows. Returns 0, PD_EINVAL (NULL with a count, a NULL name, a value that
 * is not finite) or PD_ENOMEM; free *out with pd_diff_destroy(). */
int pd_diff_build_rows(const pd_diff_input_t *a, size_t na, double a_steps, const pd_diff_input_t *b,
                       size_t nb, double b_steps, pd_diff_t **out);
/* Frees the diff; NULL is a no-op. */
void pd_diff_destroy(pd_diff_t *diff);
/* Rows in |change| order (valid while the diff lives). */
size_t pd_diff_count(const pd_diff_t *diff);
const pd_diff_row_t *pd_diff_rows(const pd_diff_t *diff);
/* Prints the diff table (limit <= 0: every row). */
void pd_diff_print(FILE *out, const pd_diff_t *diff, int limit);

/* ---- step breakdown ------------------------------------------------------------------------ */

/* The parts a step is carved into, in priority order: where several are active at one
 * instant, the first listed gets the time, so the parts are disjoint and sum to the step. */
#define PD_PART_MAP(X)                                                    \
  X(KERNEL, "kernel") X(MEMCPY, "memcpy") X(MEMSET, "memset")             \
  X(RUNTIME, "runtime") X(DATALOADER, "dataloader") X(CPU_EXEC, "cpu_exec") \
  X(OTHER, "other")
typedef enum {
#define PD_PART_GEN(name, text) PD_PART_##name,
  PD_PART_MAP(PD_PART_GEN)
#undef PD_PART_GEN
  PD_PART_COUNT
} pd_part_t;

/* GPU idle time categories (Holistic Trace Analysis'): host wait = the call that launched
 * the work ending the gap returned after the GPU went idle (the host had not enqueued it
 * yet); kernel wait = it was queued and the gap is shorter than the kernel-wait
 * threshold (launch overhead); other = the rest (stream/event waits, long gaps without a
 * launching call in the trace, the tail after the last activity). */
#define PD_IDLE_MAP(X) X(HOST_WAIT, "host_wait") X(KERNEL_WAIT, "kernel_wait") X(OTHER, "other")
typedef enum {
#define PD_IDLE_GEN(name, text) PD_IDLE_##name,
  PD_IDLE_MAP(PD_IDLE_GEN)
#undef PD_IDLE_GEN
  PD_IDLE_COUNT
} pd_idle_t;

/* Gaps shorter than this between queued work are launch overhead (kernel wait). HTA's
 * consecutive_kernel_delay defaults to 30 ns, shorter than any gap between back-to-back
 * kernels on Hopper (0.03-0.13 us with a CUDA graph, 0.8-2.5 us without, on our traces);
 * 3 us covers launch latency and leaves longer waits to "other". */
#define PD_KERNEL_WAIT_DEFAULT_NS 3000

/* Returns "kernel", "dataloader", ... / "host_wait", ...; never NULL. */
const char *pd_part_name(pd_part_t p);
const char *pd_idle_name(pd_idle_t k);
/* Returns true for data-loading ranges: pd_range_is_data_wait() (pd_classify.h's one name
 * table: torch's "enumerate(DataLoader)#..." names, which ours use, and our older
 * "DataLoader.wait"). */
bool pd_range_is_dataloader(const char *name);

typedef struct {
  int64_t step;      /* N of ProfilerStep#N; -1 for the whole-trace window of a trace
                        without step ranges */
  int64_t start_ns, end_ns;
  int64_t part_ns[PD_PART_COUNT]; /* disjoint; they sum to end_ns - start_ns exactly */
  int64_t gpu_busy_ns;            /* union of GPU activity inside the step (= kernel +
                                     memcpy + memset parts) */
  int64_t idle_ns[PD_IDLE_COUNT]; /* they sum to end_ns - start_ns - gpu_busy_ns */
  int64_t data_wait_ns;           /* union of dataloader ranges inside the step */
  /* counts of what starts inside the step */
  int64_t kernels, memcpys, memsets;
  int64_t runtime_calls;          /* runtime and driver API calls */
  int64_t sync_calls;             /* of which host-blocking (pd_api_is_sync) */
  int64_t alloc_calls;            /* of which device alloc/free (pd_api_is_device_alloc) */
  int64_t mem_allocs, mem_frees;  /* device [memory] events with Bytes > 0 / < 0 */
  int64_t mem_alloc_bytes;        /* sum of their positive Bytes */
} pd_step_breakdown_t;

typedef struct {
  pd_step_breakdown_t *steps; /* sorted by start; owned, free with pd_breakdown_free() */
  size_t nsteps;
  bool whole_trace;           /* no ProfilerStep#N range: one window over the whole trace */
  pd_step_breakdown_t total;  /* sums over the steps (step = -1) */
} pd_breakdown_t;

/* Computes the breakdown of every ProfilerStep#N range (or of the whole trace when there
 * is none; an empty trace gives no step). kernel_wait_ns < 0 means the default. Returns
 * 0, PD_EINVAL or PD_ENOMEM; on failure *out is empty. */
int pd_breakdown_compute(const pd_trace_t *trace, int64_t kernel_wait_ns, pd_breakdown_t *out);
/* Frees b->steps and zeroes *b; NULL is a no-op. */
void pd_breakdown_free(pd_breakdown_t *b);
/* Prints one row per step (time per part, GPU util, idle split, data wait) and a total
 * row. */
void pd_breakdown_print(FILE *out, const pd_breakdown_t *b);

/* ---- memory timeline ------------------------------------------------------------------------- */

typedef struct {
  int64_t t_ns;
  int64_t allocated; /* device bytes live after the event */
} pd_mem_point_t;

typedef struct {
  pd_mem_point_t *points; /* device memory events in time order; owned */
  size_t npoints;
  bool totals_known;      /* from "Total Allocated"; otherwise a running sum of Bytes from 0 */
  int64_t peak, peak_t_ns, low, final;
  int64_t allocs, frees;  /* events with Bytes > 0 / < 0 */
  int64_t alloc_bytes;    /* sum of positive Bytes */
  int64_t host_events;    /* host (pinned/pageable) memory events, not in the timeline */
} pd_memtl_t;

/* Builds the device memory timeline. Returns 0, PD_EINVAL or PD_ENOMEM; free with
 * pd_memtl_free(). An empty timeline (npoints 0) means the trace has no device memory
 * events. */
int pd_memtl_build(const pd_trace_t *trace, pd_memtl_t *out);
/* Frees m->points and zeroes *m; NULL is a no-op. */
void pd_memtl_free(pd_memtl_t *m);
/* Prints the summary and per-step allocation counts (b may be NULL). */
void pd_memtl_print(FILE *out, const pd_memtl_t *m, const pd_breakdown_t *b);

/* ---- analysis bundle and reports ----------------------------------------------------------------- */

typedef struct {
  const pd_trace_t *trace;  /* not owned: must outlive the analysis */
  pd_trace_info_t info;
  pd_breakdown_t breakdown;
  bool have_metrics;        /* false when the trace has no ProfilerStep#N range */
  pd_metrics_t metrics;     /* trace-side metrics plus step time / data wait samples */
  pd_verdict_t verdict;     /* valid when have_metrics or have_verdict */
  bool have_verdict;        /* a trace without steps: the verdict of the whole trace replayed
                               as one step (no step metrics) */
  double *step_times_s;     /* per step: step range minus its data wait (breakdown order) */
  double *data_wait_s;      /* per step: union of dataloader ranges */
  pd_top_t *top;
  pd_op_table_t *ops;       /* key averages, sorted by self CUDA time */
  pd_memtl_t memory;
} pd_analysis_t;

/* Runs every analysis on trace. info may be NULL (then zeros). *out owns the result;
 * free with pd_analysis_destroy(). Returns 0, PD_EINVAL or PD_ENOMEM. */
int pd_analysis_run(const pd_trace_t *trace, const pd_trace_info_t *info, const pd_top_opts_t *opts,
                    pd_analysis_t **out);
/* Frees the analysis (not its trace); NULL is a no-op. */
void pd_analysis_destroy(pd_analysis_t *a);
/* Prints the trace summary, step metrics and verdict. */
void pd_analysis_print_summary(FILE *out, const pd_analysis_t *a, const char *path);

typedef struct {
  const char *path;          /* trace file shown in the report */
  const pd_analysis_t *a;
  const char *diff_path;     /* second trace, or NULL */
  const pd_analysis_t *b;    /* its analysis, or NULL */
  const pd_diff_t *diff;     /* NULL when no diff */
  int limit;                 /* top rows to show (<= 0: all) */
} pd_report_t;

/* Writes a self-contained HTML report (inline CSS and SVG: step breakdown stacked bars,
 * top device rows, memory timeline; no script, no network) to "<path>.tmp.<pid>" and
 * renames it to path. Returns 0, PD_EINVAL, PD_ENOMEM or PD_EIO (nothing left at path). */
int pd_report_html_write(const char *path, const pd_report_t *r);
/* The analysis JSON's schema_version (docs/analyzer.md names it; a docs test checks). */
#define PD_ANALYSIS_SCHEMA_VERSION 2

/* Writes the analysis as JSON ({"schema_version":PD_ANALYSIS_SCHEMA_VERSION, "trace", "metrics", "verdict",
 * "top", "steps", "idle", "memory", "key_averages", "diff"}), atomically as above. */
int pd_report_json_write(const char *path, const pd_report_t *r);

#ifdef __cplusplus
}
#endif
#endif /* PD_ANALYZE_H */
