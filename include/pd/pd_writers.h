/* pd_writers.h: the model layer's outputs (src/model).
 *
 *  - the Kineto-compatible Chrome trace (Perfetto, chrome://tracing, torch-tb-profiler,
 *    Holistic Trace Analysis), streamed event by event to a temporary file and renamed;
 *  - the metrics JSON, schema PD_METRICS_SCHEMA_VERSION (docs/formats.md), written atomically;
 *  - JSON text helpers: locale-independent numbers, NaN/Inf as null, escaped strings.
 */
#ifndef PD_WRITERS_H
#define PD_WRITERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_event.h"
#include "pd/pd_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the profiler's own cost ---------------------------------------------------------- */

struct cJSON;
/* The cost as a JSON object (the metrics JSON's "profiler_cost", the trace's
 * "profilerCost"): est_added_us_per_step, est_added_fraction_of_step (of step_s, the
 * mean profiled step; null when step_s <= 0), the counts, the ms spent at transitions and
 * the calibration; unknown values are null. Returns NULL when out of memory. */
struct cJSON *pd_prof_cost_to_json(const pd_prof_cost_t *c, double step_s);

/* ---- Chrome trace ------------------------------------------------------------------- */

/* The trace writer's format version, written as top-level "traceFormatVersion" (absent
 * in traces of format 1). Raise it with every change to what the writer puts in a trace,
 * and re-record the committed fixtures (scripts/make_fixtures.sh): a unit test compares
 * it with theirs. 2: each host range written once (user_annotation or cpu_op), a child
 * never ending on its parent's nanosecond, gpu_user_annotation spans ending after the
 * work they hold, GPU work overlapping the work ahead of it on the stream's overlap row,
 * ts counted from the first event's second (docs/formats.md). */
#define PD_TRACE_FORMAT_VERSION 2

typedef struct {
  const char *trace_name;     /* "traceName"; may be NULL (then the file path) */
  int64_t unix_offset_ns;     /* pd_clock_unix_offset_ns(): added to event times */
  uint32_t pid;               /* host process id for host events */
  bool profile_memory;        /* write [memory] instant events; top-level "profile_memory" */
  const char *process_name;   /* label of the host process row; NULL: the program's name */
  bool record_shapes;         /* top-level "record_shapes" (ranges carry "Input Dims") */
  int cuda_driver_version;    /* top-level "cuda_driver_version" (13000); 0: unknown, left out */
  int cuda_runtime_version;   /* top-level "cuda_runtime_version"; 0: unknown, left out */
  int cupti_version;          /* top-level "cupti_version" (130001); 0: unknown, left out */
  /* Link ops to their CUDA calls and GPU work as torch.profiler does, for
   * torch-tb-profiler's Operator and Kernel pages and HTA's annotation breakdowns:
   * "External id" on host ranges, calls, GPU activity and syncs, gpu_user_annotation
   * spans, fwdbwd flows, "Ev Idx", a "trace_id". profiler_demo turns it
   * on; off, the file holds each recorded event once and nothing derived. */
  bool links;
  /* The cycle's profiler cost, written as top-level "profilerCost"; NULL: left out. */
  const pd_prof_cost_t *cost;
  /* The range the program opens per step, whose starts cut the steps (pd_run
   * --step_range), written as top-level "stepRange"; NULL: left out, except that
   * pd_trace_write_file() then takes the trace's own (pd_trace_step_range). */
  const char *step_range;
} pd_trace_meta_t;

typedef struct pd_trace_writer pd_trace_writer_t;

/* Kineto's offset from a stream's tid to its synchronization row's tid. */
#define PD_TRACE_SYNC_TID_OFFSET 1000000u
/* Offset from a stream's tid to its overlap row's: GPU work that starts before the work
 * ahead of it on the stream has ended (programmatic dependent launch) is drawn there. */
#define PD_TRACE_OVERLAP_TID_OFFSET 2000000u
/* The row of the whole-trace span ("Trace" category): a pid no process or GPU has, as
 * Kineto's "Spans" (its sort index), but a number so every viewer takes it. */
#define PD_TRACE_SPAN_PID 536870912u

/* Opens "<path>.tmp.<pid>" and writes the header (schemaVersion, deviceProperties, ...).
 * baseTimeNanoseconds is meta->unix_offset_ns rounded down to a second (the events are
 * not known yet; pd_trace_write_file() rounds the first event's Unix time instead); every
 * ts is microseconds after it. meta may be NULL (pid = getpid(), offset 0, no memory events).
 * On success *out owns the writer; finish with pd_trace_writer_close() or _abort().
 * Returns 0, PD_EINVAL, PD_ENOMEM, or PD_EIO when the file cannot be created. */
int pd_trace_writer_open(const char *path, const pd_trace_meta_t *meta,
                         const pd_device_props_t *devices, size_t ndevices,
                         pd_trace_writer_t **out);
/* Appends one event: GPU rows (kernel, memcpy, memset, gpu_user_annotation) use
 * pid = device, tid = stream, cuda_sync records their stream's own sync row (tid =
 * stream + PD_TRACE_SYNC_TID_OFFSET, "stream N (sync)", as Kineto); host rows pid/tid.
 * A host range is written once: ProfilerStep#N and data-wait ranges as user_annotation,
 * the others (and CPU_OP events) as cpu_op. An event that ends on the nanosecond of the
 * event it lies in on its row is written 1 ns shorter (per level), so every reader's
 * ts + dur keeps it inside (pd_nest_end(), trace_links.h); events of a row must come in
 * start order for that.
 * A RUNTIME/DRIVER call with a correlation id also gets its ac2g flow start ("s"), a
 * kernel/memcpy/memset its flow end ("f"); pd_trace_write_file() keeps only the pairs
 * whose both halves exist. Mangled kernel names are written demangled, each mangled one
 * once in the top-level "mangledNames"; driver-API kernel launches go under cuda_runtime.
 * With meta->links, a "<m>.backward" range also gets a fwdbwd flow from the latest
 * "<m>.forward" range of its process. MEMORY events are skipped unless
 * meta->profile_memory. With meta->links, events must come in start order (a sorted
 * trace) for the External ids to link.
 * Returns 0, PD_EINVAL or the writer's first error (PD_EIO, PD_ENOMEM). */
int pd_trace_writer_event(pd_trace_writer_t *w, const pd_event_t *ev);
/* Writes the trace span, the gpu_user_annotation spans (meta->links) and the footer,
 * flushes, renames the temporary file to its final path, frees w.
 * On failure the temporary file is removed and nothing is left at the final path. */
int pd_trace_writer_close(pd_trace_writer_t *w);
/* Removes the temporary file and frees w. NULL is a no-op. */
void pd_trace_writer_abort(pd_trace_writer_t *w);
/* Convenience: writes a whole trace (its events in their current order, its devices)
 * to path (open, every event, close), with baseTimeNanoseconds the Unix time of its
 * earliest event rounded down to a second, so ts stay small whatever the host's uptime.
 * Returns 0 or the first error; on error nothing is left at path. */
int pd_trace_write_file(const char *path, const pd_trace_t *trace, const pd_trace_meta_t *meta);

/* Theoretical occupancy of a kernel launch from the device limits (threads and warps,
 * blocks, registers in 256-register warp units, shared memory with its 128-byte
 * granularity and sm_80+'s 1 KiB per-block reserve): an estimate in the spirit of the
 * CUDA occupancy calculator, without its sub-partition details. */
typedef struct {
  int blocks_per_sm;      /* resident blocks per SM at full load; 0: cannot launch */
  int warps_per_sm;       /* resident warps per SM */
  int max_warps_per_sm;
  double occupancy;       /* warps_per_sm / max_warps_per_sm, 0..1 */
  const char *limiter;    /* "warps", "blocks", "registers", "shared memory", "threads" */
} pd_occupancy_t;

/* Fills *out; returns 0, or PD_EINVAL on bad arguments or props without warp size or
 * threads per SM. */
int pd_occupancy_estimate(const pd_device_props_t *dev, int threads_per_block, int regs_per_thread,
                          int smem_per_block, pd_occupancy_t *out);

/* The kernel args Kineto derives from a launch: blocks per SM = grid blocks / SMs,
 * warps per SM = blocks per SM x threads per block / 32, and est. achieved occupancy %
 * = min(blocks per SM, resident blocks) x threads per block / max threads per SM, in
 * percent rounded to an integer. */
typedef struct {
  double blocks_per_sm;
  double warps_per_sm;
  int est_achieved_occupancy_pct;
} pd_kernel_launch_stats_t;

/* Fills *out for a KERNEL event. Returns 0, or PD_EINVAL (not a kernel, empty grid or
 * block, props without SM count). */
int pd_kernel_launch_stats(const pd_device_props_t *dev, const pd_event_t *kernel,
                           pd_kernel_launch_stats_t *out);

/* ---- metrics JSON --------------------------------------------------------------------- */

/* The metrics JSON's schema_version: the one constant that help texts and docs name
 * (tests/unit/docs checks the docs against it). */
#define PD_METRICS_SCHEMA_VERSION 3

typedef struct {
  char name[256];
  int compute_major;
  int compute_minor;
  int sm_count;
  uint64_t total_global_mem;
  int driver_version;  /* cudaDriverGetVersion */
  int runtime_version; /* cudaRuntimeGetVersion */
  int cupti_version;   /* cuptiGetVersion; 0 when unknown */
} pd_device_info_t;

/* The machine a run was made on: the regression gate pools baseline runs from several
 * hosts and learns the between-host spread of host-class metrics from them. A freshly
 * started machine has a new boot id even where every machine has the same host name. */
typedef struct {
  char name[256];    /* gethostname(); "" when unknown */
  char boot_id[64];  /* /proc/sys/kernel/random/boot_id; "" when unknown */
  char cpu[128];     /* the first "model name" of /proc/cpuinfo; "" when unknown */
  int cpus;          /* online processors */
} pd_host_info_t;

/* Fills *out with what this machine tells; fields it cannot read stay "" (never fails). */
void pd_host_info_read(pd_host_info_t *out);

/* This process's resident set now and its peak so far (VmRSS, VmHWM of
 * /proc/self/status), in KiB. Returns 0, or PD_EIO where the kernel does not tell (both
 * then -1). */
int pd_host_rss_kib(int64_t *rss_kib, int64_t *peak_kib);
/* Bytes the C library's allocator has handed out and not had back (glibc's mallinfo2:
 * arena chunks in use plus mmapped chunks), in KiB; -1 where unknown. Against the RSS it
 * tells a leak (this grows) from memory the allocator keeps (only the RSS grows). */
int64_t pd_host_heap_in_use_kib(void);

/* Host memory over a run's steps (a long run shows whether it stays flat). -1: not
 * measured. */
typedef struct {
  int64_t rss_start_kib;       /* before the first step after the warmup */
  int64_t rss_first_cycle_kib; /* after the first cycle's trace was written (CUPTI's
                                  buffers, the tables and the writer have grown to size) */
  int64_t rss_end_kib;         /* after the last step, before the outputs are written */
  int64_t rss_peak_kib;        /* the process's peak up to the end */
  int64_t heap_start_kib, heap_first_cycle_kib, heap_end_kib; /* pd_host_heap_in_use_kib */
  int64_t steps;               /* steps between start and end */
} pd_host_memory_t;

/* Config entries are generic key/value pairs so the core knows nothing of scenarios. */
typedef enum { PD_CFG_STRING, PD_CFG_INT, PD_CFG_BOOL, PD_CFG_DOUBLE } pd_cfg_type_t;
typedef struct {
  const char *key;
  pd_cfg_type_t type;
  const char *s;
  int64_t i;
  bool b;
  double d;
} pd_cfg_entry_t;

/* The data loader's throughput, for the metrics JSON's "data_loader" (filled by the
 * program from its pipeline, pd_data_get_stats). */
typedef struct {
  int workers;     /* loader threads; 0: batches made on the step's thread */
  int64_t batches; /* batches made */
  int64_t fill_ns; /* wall time the threads spent making them, summed */
} pd_loader_rate_t;

struct pd_host_calib_s;
struct pd_cycle_log_s; /* pd_cycle_log_t, pd_replay.h */

typedef struct {
  const pd_cfg_entry_t *config;
  size_t nconfig;
  const pd_device_info_t *device;
  const pd_metrics_t *metrics;
  const double *step_times_s; /* per profiled step */
  const double *dataloader_wait_s;
  /* per profiled step: from the start of its data wait to the start of the next step's
   * (the whole iteration, as the ProfilerStep markers cut it); NULL: not measured */
  const double *step_periods_s;
  size_t nsteps;
  /* the same for the unprofiled warmup steps before the profiler starts (the first, which
   * pays one-time costs, left out): the same process's unprofiled iteration; NULL: none */
  const double *warmup_periods_s;
  /* the same steps' step times (between the two synchronizes, as step_times_s): what the
   * gate's A/B judges host time on (untraced, so CUPTI's per-call state is not in it);
   * NULL: none */
  const double *warmup_step_times_s;
  /* profiler_demo --warmup_probe: after each of the same steps, outside its time, the
   * launching thread's ns per empty kernel launch and ns for a fixed piece of compute
   * (pd_speed_probe); NULL: not probed (the keys are left out) */
  const double *warmup_probe_launch_ns;
  const double *warmup_probe_compute_ns;
  size_t nwarmup;
  const pd_verdict_t *verdict;
  /* Each cycle's replay (--repeat): written as "replay_cycles" where there are at least
   * two (the verdict's savings are then over all of them); NULL: none. */
  const struct pd_cycle_log_s *cycles;
  const pd_op_table_t *top_ops; /* sorted as it should appear; may be NULL */
  int top_ops_limit;            /* rows to write; <= 0: all */
  /* Kernel-level view (PD_GROUP_BY_KERNEL), every row: the gate explains a regression
   * from the two sides' kernel tables. May be NULL. */
  const pd_op_table_t *top_kernels;
  const pd_host_info_t *host; /* may be NULL (written as null) */
  const char *const *trace_files;
  size_t ntrace_files;
  /* A run stopped early (SIGINT/SIGTERM): written as "incomplete": true, "stopped_by"
   * (this text) and "steps_done"; the gate refuses such a file. NULL: a complete run (no
   * such keys). */
  const char *stopped_by;
  int64_t steps_done; /* training steps that ran (warmup and schedule steps) */
  /* The profiler's own cost over the run (written as "profiler_cost"); NULL: null. */
  const pd_prof_cost_t *cost;
  /* Host memory over the steps (written as "host_memory"); NULL: null. */
  const pd_host_memory_t *host_memory;
  /* The loader's throughput against the steps' demand ("data_loader"); NULL: null. */
  const pd_loader_rate_t *loader;
  /* The launching thread's calibration at start and end ("host_calibration",
   * pd_host_calib.h); NULL: null. */
  const struct pd_host_calib_s *host_calibration;
} pd_run_report_t;

/* Adds the verdict as key of parent: {bottleneck, rule, share_of_step, cost_us_per_step,
 * evidence, advice, findings: [{cause, share_of_step, cost_us_per_step, evidence,
 * advice}]} (docs/formats.md). One writer for the metrics JSON and profile_analyze --json.
 * Returns 0, PD_EINVAL or PD_ENOMEM. */
struct cJSON;
int pd_verdict_add_json(struct cJSON *parent, const char *key, const pd_verdict_t *v);
/* Writes the metrics JSON (schema PD_METRICS_SCHEMA_VERSION, docs/formats.md) through the one output writer
 * (pd_out.h: temporary, fsync, rename). NaN/Inf metrics (not measured) are written as null. Returns
 * 0; PD_EINVAL (NULL path/report, or no metrics); PD_ENOMEM; or PD_EIO with nothing
 * left at path (an existing file at path is then untouched). */
int pd_metrics_json_write(const char *path, const pd_run_report_t *report);

/* ---- JSON text helpers ------------------------------------------------------------------ */

/* Writes s as a JSON string literal (quotes included): escapes quotes, backslashes and
 * control characters; replaces invalid UTF-8 bytes with U+FFFD. NULL writes null. */
void pd_json_write_string(FILE *out, const char *s);
/* Writes a number with '.' as decimal point whatever the locale, shortest form that
 * round-trips a double; NaN and Inf as null. */
void pd_json_write_double(FILE *out, double v);
/* Formats v as pd_json_write_double() writes it into buf (always terminated, cut to
 * buflen-1). Returns the length of the full text (snprintf-style); 32 bytes suffice. */
size_t pd_json_format_double(char *buf, size_t buflen, double v);

/* Building a cJSON document (the metrics JSON, profile_analyze --json): cJSON's Create and
 * Add calls return NULL when out of memory; a builder gathers those failures in one flag,
 * which the writer checks once at the end. */
typedef struct {
  bool failed;
} pd_json_build_t;
/* Returns item; sets b->failed when item is NULL. */
struct cJSON *pd_json_check(pd_json_build_t *b, struct cJSON *item);
/* A new object at the end of arr. NULL when arr is NULL (its own failure was counted where
 * it was made) or when the object cannot be made or added (b->failed set). */
struct cJSON *pd_json_append_object(pd_json_build_t *b, struct cJSON *arr);
/* Adds key to obj: s as a string, null when s is NULL; nothing when obj is NULL. */
void pd_json_add_string(pd_json_build_t *b, struct cJSON *obj, const char *key, const char *s);

#ifdef __cplusplus
}
#endif
#endif /* PD_WRITERS_H */
