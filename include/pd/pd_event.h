/* pd_event.h: the neutral event model every consumer reads.
 *
 * The CUPTI source, host ranges and the trace reader all produce pd_event_t values
 * (int64 nanoseconds on the pd_clock_now_ns() timeline). Aggregation, writers,
 * metrics, diagnosis and comparison read only this model, so they build and are
 * unit-tested on machines with no GPU, fed with events made by hand.
 */
#ifndef PD_EVENT_H
#define PD_EVENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "pd/pd_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One table for event kinds: X(NAME, chrome trace category). */
#define PD_EVENT_KIND_MAP(X)              \
  X(KERNEL, "kernel")                     \
  X(MEMCPY, "gpu_memcpy")                 \
  X(MEMSET, "gpu_memset")                 \
  X(RUNTIME, "cuda_runtime")              \
  X(DRIVER, "cuda_driver")                \
  X(SYNC, "cuda_sync")                    \
  X(RANGE, "user_annotation")             \
  X(GPU_RANGE, "gpu_user_annotation")     \
  X(CPU_OP, "cpu_op")                     \
  X(MEMORY, "cpu_instant_event")          \
  X(OVERHEAD, "overhead")

typedef enum {
#define PD_EVENT_KIND_GEN(name, cat) PD_EVENT_##name,
  PD_EVENT_KIND_MAP(PD_EVENT_KIND_GEN)
#undef PD_EVENT_KIND_GEN
  PD_EVENT_KIND_COUNT
} pd_event_kind_t;

/* Returns the Chrome trace category ("kernel", "cuda_runtime", ...); never NULL. */
const char *pd_event_kind_category(pd_event_kind_t kind);
/* Returns the kind for a Chrome trace category, or -1 when unknown. */
int pd_event_kind_from_category(const char *cat);

typedef enum {
  PD_MEMCPY_UNKNOWN = 0,
  PD_MEMCPY_HTOD,
  PD_MEMCPY_DTOH,
  PD_MEMCPY_DTOD,
  PD_MEMCPY_HTOH,
  PD_MEMCPY_PTOP
} pd_memcpy_kind_t;

typedef enum {
  PD_MEM_UNKNOWN = 0,
  PD_MEM_PAGEABLE,
  PD_MEM_PINNED,
  PD_MEM_DEVICE,
  PD_MEM_MANAGED
} pd_mem_kind_t;

typedef enum {
  PD_SYNC_UNKNOWN = 0,
  PD_SYNC_EVENT,
  PD_SYNC_STREAM_WAIT_EVENT,
  PD_SYNC_STREAM,
  PD_SYNC_CONTEXT
} pd_sync_kind_t;

/* One event. Strings (name, shape) point into the owning pd_trace_t's string pool.
 * Host events (RUNTIME, DRIVER, RANGE, CPU_OP, MEMORY, OVERHEAD) use pid/tid; device
 * events (KERNEL, MEMCPY, MEMSET, GPU_RANGE) and SYNC records use device/stream (the
 * stream waited on, 0 for a device/context synchronization), as Kineto draws them.
 * Union member by kind: KERNEL -> kernel, MEMCPY -> memcpy, MEMSET -> memset,
 * RUNTIME/DRIVER -> api, SYNC -> sync, RANGE/CPU_OP/GPU_RANGE -> range, MEMORY -> memory.
 * MEMCPY/MEMSET names may be NULL: consumers name them with pd_event_display_name(). */
typedef struct {
  pd_event_kind_t kind;
  int64_t start_ns;        /* pd_clock timeline */
  int64_t end_ns;          /* == start_ns for instant events (MEMORY) */
  uint64_t correlation_id; /* runtime call <-> GPU activity; 0 when none */
  const char *name;        /* kernel name, API name, range name */
  uint32_t pid;
  uint32_t tid;
  uint32_t device;
  uint32_t context;
  uint32_t stream;
  union {
    struct {
      int32_t grid[3];
      int32_t block[3];
      int32_t registers_per_thread;
      int32_t static_smem_bytes;
      int32_t dynamic_smem_bytes;
    } kernel;
    struct {
      uint64_t bytes;
      pd_memcpy_kind_t copy_kind;
      pd_mem_kind_t src_kind;
      pd_mem_kind_t dst_kind;
    } memcpy;
    struct {
      uint64_t bytes;
      pd_mem_kind_t dst_kind;
    } memset;
    struct {
      uint32_t cbid;   /* CUPTI callback id of the API call */
      int32_t status;  /* return code of the call */
    } api;
    struct {
      pd_sync_kind_t sync_kind;
      /* Kineto's wait_on_stream and wait_on_cuda_event_record_corr_id (Event Sync and
       * Stream Wait Event): the stream the event was recorded on and the correlation id of
       * the cudaEventRecord call; has_wait false when the record does not say. */
      bool has_wait;
      uint32_t wait_stream;
      uint64_t event_record_corr;
    } sync;
    struct {
      int64_t step;      /* >= 0 for ProfilerStep#N ranges, -1 otherwise */
      const char *shape; /* input shapes text ("[[64, 3, 32, 32]]") or NULL */
      /* host call stack where the range opened (with_stack), as torch writes a host
       * op's "Call stack": frames innermost first, "file(line): function", joined by
       * ';'; NULL when none. RANGE and CPU_OP only. */
      const char *stack;
      uint32_t depth;    /* nesting depth on its thread, 0 = outermost */
    } range;
    struct {
      uint64_t address;
      int64_t bytes;          /* > 0 allocation, < 0 release */
      int64_t total_allocated; /* device bytes live after this event, -1 unknown */
      pd_mem_kind_t mem_kind;
    } memory;
  } u;
} pd_event_t;

/* Static properties of one GPU, as the trace's deviceProperties[] lists them. */
typedef struct {
  int id;
  char name[256];
  uint64_t total_global_mem;
  int compute_major;
  int compute_minor;
  int num_sms;
  int max_threads_per_block;
  int max_threads_per_sm;
  int max_regs_per_block;
  int max_regs_per_sm;
  int max_shared_mem_per_block;
  int max_shared_mem_per_sm;
  int warp_size;
  int max_blocks_per_sm;
  int max_shared_mem_per_block_optin; /* cudaDevAttrMaxSharedMemoryPerBlockOptin; 0 unknown */
} pd_device_props_t;

/* A set of events with the strings they point into: one profiling cycle, or a whole
 * trace file read back. Growable; pd_trace_reset() keeps the capacity. */
typedef struct pd_trace pd_trace_t;

/* Returns a new empty trace, or NULL when out of memory. Free with pd_trace_destroy(). */
pd_trace_t *pd_trace_create(void);
/* Frees the trace, its events and strings (pointers into it die with it). NULL: no-op. */
void pd_trace_destroy(pd_trace_t *trace);
/* Drops all events, strings and devices; keeps allocated capacity. */
void pd_trace_reset(pd_trace_t *trace);
/* Returns a copy of s owned by the trace (equal strings share one copy), or NULL on
 * out of memory. NULL in, NULL out. */
const char *pd_trace_intern(pd_trace_t *trace, const char *s);
/* Copies ev into the trace; name, shape and stack strings (shape and stack for RANGE and CPU_OP) are
 * interned, so the caller's buffers may be reused at once. ev may point into this same
 * trace. Returns 0, PD_EINVAL or PD_ENOMEM. */
int pd_trace_add(pd_trace_t *trace, const pd_event_t *ev);
/* Returns the number of events (0 for NULL). */
size_t pd_trace_count(const pd_trace_t *trace);
/* Returns the events, owned by the trace, valid until the next add/reset. */
const pd_event_t *pd_trace_events(const pd_trace_t *trace);
/* Mutable access, e.g. to sort in place or fix up fields; same lifetime. */
pd_event_t *pd_trace_events_mut(pd_trace_t *trace);
/* Sorts events by start time (stable: equal starts keep their insertion order), in
 * O(n log n); already-sorted input costs one pass. */
void pd_trace_sort(pd_trace_t *trace);
/* The recording window's rule, for the events a record source added at index `from` on:
 * events that start before window_start_ns are warmup and go, and so does the GPU work
 * (KERNEL, MEMCPY, MEMSET) launched by a call that goes, even where it ran inside the
 * window: it belongs to the step that launched it (a step that ends at a kernel's launch,
 * as pd_run's --step_kernel does, would otherwise hand that kernel to the first recorded
 * step). Keeps the order of the rest. Returns the number removed, or PD_ENOMEM /
 * PD_EINVAL. */
int64_t pd_trace_clip_window(pd_trace_t *trace, size_t from, int64_t window_start_ns);
/* Returns the name to show for ev. MEMCPY records with a known copy kind and MEMSET
 * records with a known memory kind get Kineto's name ("Memcpy HtoD (Pinned -> Device)",
 * "Memset (Device)") written into buf; otherwise ev->name, or for a nameless copy/set
 * Kineto's name with "Unknown" kinds; "" when nothing applies. The result is ev->name,
 * buf or a static string; nothing to free. */
const char *pd_event_display_name(const pd_event_t *ev, char *buf, size_t buflen);
/* Returns Kineto's text for a copy kind ("HtoD") / memory kind ("Pinned"); never NULL. */
const char *pd_memcpy_kind_name(pd_memcpy_kind_t k);
const char *pd_mem_kind_name(pd_mem_kind_t k);
/* Writes the readable form of an Itanium-mangled name ("_ZN...") into buf: the
 * qualified name with its template arguments as c++filt prints them, without return
 * type and parameters ("(anonymous namespace)::k_im2col_nhwc<__half, false>"); a name
 * that form does not cover (lambdas, std::, substitutions: most of PyTorch's kernels) is
 * given as the C++ runtime's __cxa_demangle prints it, as Kineto writes it, where the
 * process has that loaded (looked up at run time, cut to fit buf). Returns false (buf
 * unspecified) for a name that is not mangled or that neither understands; callers then
 * keep the mangled name. Nothing to free. */
bool pd_demangle(const char *mangled, char *buf, size_t len);
/* pd_demangle's fallback alone: the C++ runtime's __cxa_demangle (in the global scope, or
 * in a libstdc++ already loaded RTLD_LOCAL) into buf, cut to fit. Returns false where the
 * process has none or it refuses the name. */
bool pd_demangle_cxx_runtime(const char *mangled, char *buf, size_t len);
/* True for a CUDA driver API name ("cuLaunchKernelEx": "cu" then an upper-case letter),
 * false for runtime names ("cudaLaunchKernel") and NULL. */
bool pd_api_name_is_driver(const char *name);
/* True for the driver API's kernel launches: cuLaunchKernel*, cuLaunchCooperativeKernel*,
 * cuGraphLaunch* (CUPTI's suffixes included). The trace writer files these under
 * cuda_runtime, where torch-tb-profiler looks for the call that launched a kernel. */
bool pd_api_name_is_driver_launch(const char *name);
/* Copies one device's properties into the trace. Returns 0, PD_EINVAL or PD_ENOMEM. */
int pd_trace_add_device(pd_trace_t *trace, const pd_device_props_t *props);
/* Returns the number of devices carried with the trace. */
size_t pd_trace_device_count(const pd_trace_t *trace);
/* Returns the devices, owned by the trace, valid until the next add_device/reset. */
const pd_device_props_t *pd_trace_devices(const pd_trace_t *trace);
/* Sets the records lost by the source (CUPTI buffer overflow) while this trace was
 * collected; pd_metrics_from_trace() reports it as dropped_records. */
void pd_trace_set_dropped(pd_trace_t *trace, uint64_t dropped);
/* Returns that count (0 for NULL). */
uint64_t pd_trace_dropped(const pd_trace_t *trace);
/* Sets the profiler's calibrated cost of one traced CUDA call and of one host range (ns)
 * on the host that recorded the trace (pd_prof_cost_t's calib_*, or a trace's
 * profilerCost.calibration read back); the replay takes it out of the host tasks to
 * predict the unprofiled step. A negative or implausible figure (over 1 ms) clears it. */
void pd_trace_set_calibration(pd_trace_t *trace, double ns_per_call, double ns_per_range);
/* Returns true and the figures when the trace carries a calibration (either pointer may be
 * NULL). */
bool pd_trace_calibration(const pd_trace_t *trace, double *ns_per_call, double *ns_per_range);
/* Sets the name of the range the program opens once per step, whose starts cut the steps
 * (pd_run --step_range; a trace's top-level "stepRange" read back). Below a step marker a
 * range of that name is the step itself, not an op (the replay's op layer). NULL, "" or a
 * name of PD_TRACE_STEP_RANGE_MAX bytes or more clears it. */
#define PD_TRACE_STEP_RANGE_MAX 256
void pd_trace_set_step_range(pd_trace_t *trace, const char *name);
/* That name, or NULL when the trace has none. */
const char *pd_trace_step_range(const pd_trace_t *trace);

/* What the profiler itself cost: for one cycle (pd_prof_cycle_cost) or the whole run
 * (pd_prof_cost). The estimate of the time it added inside the recorded steps comes from
 * a calibration on this host (pd_prof_create): the added host time of one traced CUDA
 * call (an empty-kernel launch, timed with CUPTI detached and with the default capture
 * enabled; it carries the call's record and its kernel's) and of one host range, times
 * how many of each the steps made. Times in ms are outside the steps (the transitions
 * between them). */
typedef struct {
  int64_t cycles;         /* cycles collected */
  int64_t steps;          /* recorded steps (ProfilerStep ranges) in them */
  int64_t records;        /* events kept from CUPTI: GPU activity, API calls, syncs, memory */
  int64_t api_calls;      /* of those, runtime and driver API calls */
  int64_t launch_calls;   /* of those, kernel launches (cudaLaunch*, cuLaunch*, cuGraphLaunch) */
  int64_t gpu_activities; /* of those, kernels, copies and memsets */
  int64_t host_ranges;    /* host ranges recorded (step ranges included) */
  int64_t buffers;        /* CUPTI activity buffers completed */
  int64_t buffer_bytes;   /* bytes of one CUPTI buffer */
  uint64_t dropped;       /* records CUPTI dropped */
  double enable_ms;       /* attaching CUPTI and enabling its kinds */
  double flush_ms;        /* disabling and flushing (records handed over) */
  double parse_ms;        /* parsing the buffers, collecting ranges, sorting the cycle */
  double calib_ns_per_call;  /* < 0: not calibrated (no GPU, or PD_PROF_CALIBRATE=0) */
  double calib_ns_per_range; /* < 0: not calibrated */
  double calib_ns_launch_untraced; /* the calibration's own figures: an empty kernel's launch */
  double calib_ns_launch_traced;   /* untraced and traced, ns per launch (< 0: not calibrated) */
  double calib_ns_launch_record;   /* the median duration CUPTI recorded for the calibration's
                                      traced launches (< 0: unknown): like for like with the
                                      window's launch records (win_ns_per_launch_sum) */
  double win_ns_per_launch_sum; /* per cycle, the median traced kernel-launch call (runtime
                                   cudaLaunchKernel*) of the cycle's window, summed ... */
  int64_t win_cycles;           /* ... over this many cycles (0: no launch recorded) */
  double end_ns_per_call_sum;  /* per cycle, the calibration run again at the cycle's end,
                                  right after its last step (calib_ns_per_call's measure) ... */
  double end_ns_per_range_sum; /* ... and calib_ns_per_range's ... */
  double end_ns_launch_untraced_sum; /* ... and calib_ns_launch_untraced's, summed ... */
  int64_t end_cycles;          /* ... over this many cycles (0: never run or failed; not at
                                  pd_prof_stop(), where the program may be exiting) */
  double calibrate_ms;         /* calibrating, at start and at the cycles' ends */
  /* Per kind of call, what tracing adds (ns, < 0: not calibrated): a recorded call that
   * launches nothing (cudaStreamQuery on an idle stream), and calls the capture instruments
   * without recording them, a runtime query (cudaGetDevice) and a driver call
   * (cuCtxGetCurrent). Set by the same calibration as calib_ns_per_call. */
  double calib_ns_per_recorded_call;
  double calib_ns_per_unrecorded_runtime;
  double calib_ns_per_unrecorded_driver;
  /* A cold launch (ns, < 0: not measured): an empty kernel's launch timed alone right after
   * a walk that evicts the launch path's data from the core's caches, untraced and traced;
   * a real program's launches run between its own work, not in a tight loop. */
  double calib_ns_launch_cold_untraced;
  double calib_ns_launch_cold_traced;
  /* The API census over the cycles' warmup steps (pd_source.h): steps counted (0: none, as
   * with no warmup step or a source that cannot count), and the calls seen there, recorded
   * and not. */
  int64_t census_steps;
  int64_t census_recorded;
  int64_t census_runtime_unrecorded;
  int64_t census_driver_unrecorded;
  int64_t census_driver_internal; /* made inside runtime calls: in their calibrated cost */
  double est_added_us_per_step; /* < 0: unknown (not calibrated, or no step recorded) */
  double measured_added_us_per_step; /* measured in the process (pd_prof_cost_measure); NaN:
                                        not measured */
  int64_t measured_untraced_steps;   /* the untraced step periods it compared ... */
  int64_t measured_traced_steps;     /* ... with this many recorded ones */
} pd_prof_cost_t;

/* Sets every count to 0, the calibration and estimate to -1 (unknown) and the measured
 * added time to NaN (not measured). */
void pd_prof_cost_init(pd_prof_cost_t *c);
/* Counts what `cycle` holds into c (records, api_calls, gpu_activities, host_ranges,
 * steps), adding to what c has. */
void pd_prof_cost_count(pd_prof_cost_t *c, const pd_trace_t *cycle);
/* A candidate for the profiler's cost of one traced call in the recorded window, recorded
 * (profiler_cost.calibration.ns_per_cuda_call_window) and not used: the calibration's
 * calib_ns_per_call moved by how much longer the window's traced launch calls took than the
 * calibration's own, both as CUPTI recorded them (the mean over cycles of the window's
 * median against calib_ns_launch_record); never below 0; -1 where either is unknown. It
 * follows a process whose traced calls slowed down after the calibration ran
 * (bench/diagnosis/calib_drift.sh), but it also counts a program's launches being heavier
 * than the calibration's empty kernel as profiler cost (docs/diagnosis.md). */
double pd_prof_cost_window_call_ns(const pd_prof_cost_t *c);
/* The calibration as run again at the cycles' ends (the mean over those cycles of
 * end_ns_per_call_sum, end_ns_per_range_sum and end_ns_launch_untraced_sum): recorded, not
 * used (profiler_cost.calibration.ns_per_cuda_call_end, ns_per_host_range_end,
 * ns_per_launch_untraced_end), to show whether the start calibration still holds after the
 * window (bench/diagnosis/calib_drift.sh; the mean of both predicted the unprofiled step no
 * better than the start's, docs/diagnosis.md) and how much the A/B's covariate moves within
 * a process (docs/gate.md). Returns false, and -1 in each, where it never ran. Any pointer
 * may be NULL. */
bool pd_prof_cost_end_calibration(const pd_prof_cost_t *c, double *ns_per_call, double *ns_per_range,
                                  double *ns_launch_untraced);
/* The median duration of the runtime kernel-launch calls (cudaLaunchKernel and its forms)
 * in t, in ns; -1 when it has none. */
double pd_prof_cost_launch_median_ns(const pd_trace_t *t);
/* Sets c->est_added_us_per_step from the counts and the calibration, in us per recorded
 * step: (launch_calls x calib_ns_per_call + the other api_calls x calib_ns_per_recorded_call
 * (calib_ns_per_call where that is not calibrated) + host_ranges x calib_ns_per_range) /
 * steps, plus, where the census counted warmup steps and both unrecorded kinds are
 * calibrated, the census's unrecorded runtime and driver calls per step times their
 * calibrated costs. -1 when calib_ns_per_call or calib_ns_per_range is unknown or no step
 * was recorded. Negative calibrations (noise) count as 0. */
void pd_prof_cost_estimate(pd_prof_cost_t *c);
/* What the profiler added to a step, measured in the process rather than estimated: the
 * median period (seconds, one iteration each, whatever the step does between its work) of
 * the recorded steps minus the median of the same process's untraced ones, in us, into
 * c->measured_added_us_per_step with the two counts. It holds everything tracing cost the
 * step, including what the calibration does not see (calls CUPTI instruments without
 * recording them, a program's heavier calls); it can be negative where the two medians
 * differ by less than the steps' own spread. The caller leaves out periods that carry
 * anything else (the trace write, an injected slowdown, one-time warm-up). Fewer than 3 of
 * either, or a period that is not a finite number in (0, 1e4) s: NaN and counts 0. */
void pd_prof_cost_measure(pd_prof_cost_t *c, const double *untraced_s, size_t n_untraced, const double *traced_s,
                          size_t n_traced);

#ifdef __cplusplus
}
#endif
#endif /* PD_EVENT_H */
