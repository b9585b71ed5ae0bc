/* cupti_source.h: the CUPTI record source of the capture layer (internal interface).
 *
 * cupti_source.c is the only file in the project that includes <cupti.h>; this header
 * carries no CUPTI type. The profiler makes the source with
 * pd_cupti_record_source_create() and drives it through the record-source interface
 * (pd_source.h) only; the unit tests reach the record conversion below. The source owns the process-wide CUPTI state (activity callbacks are global),
 * so at most one source exists at a time; the profiler enforces that.
 *
 * Threads: the buffer-completed callback (a CUPTI thread or the flushing thread) only
 * queues the buffer; every other call is made on the profiler's thread.
 */
#ifndef PD_CUPTI_SOURCE_H
#define PD_CUPTI_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pd/pd_event.h"
#include "pd/pd_source.h"

typedef struct pd_cupti_source pd_cupti_source_t;

typedef struct {
  int device;          /* ordinal whose properties describe the trace */
  bool driver_api;     /* record every CUDA driver API call (costs launch overhead) */
  bool driver_launches;/* record driver-API kernel launches (cuLaunchKernel*, cuGraphLaunch):
                          libraries such as cuBLAS launch this way, and without these
                          records their kernels have no launching call (no flow, no
                          attribution to the host range that launched them) */
  bool memory;         /* device memory alloc/free records (MEMORY2) */
  size_t buffer_bytes; /* CUPTI activity buffer size; 0 = default (8 MiB) */
  size_t buffer_budget_bytes; /* most bytes of buffers out with CUPTI at once; 0 = no limit */
  bool detach;         /* detach CUPTI between cycles (pd_cupti_source_detach) */
  unsigned capture;    /* PD_CUPTI_CAPTURE_* bits: how the records are taken (below) */
} pd_cupti_options_t;

/* Capture variants, measured one against another by bench_prof (docs/performance.md).
 * 0 is the default capture. PD_CUPTI_OPTIONS (a comma list of the names in
 * pd_cupti_capture_parse) sets them for any program that creates a profiler. */
enum {
  /* CUPTI's own clock for its records, moved onto the pd_clock timeline at collection by
   * an offset sampled at enable, instead of a timestamp callback per record. */
  PD_CUPTI_CAPTURE_CUPTI_CLOCK = 1u << 0,
  /* CUPTI's default thread ids (pthread_self) instead of system ids (gettid). The ids
   * then do not match the host ranges' threads: measurement only. */
  PD_CUPTI_CAPTURE_PTHREAD_IDS = 1u << 1,
  /* One activity buffer shared by all threads instead of CUPTI's per-thread buffers. */
  PD_CUPTI_CAPTURE_SHARED_BUFFERS = 1u << 2,
  /* Only kernel records: no runtime, driver, copy, memset, sync or overhead records
   * (measurement only: the outputs need the others). */
  PD_CUPTI_CAPTURE_KERNELS_ONLY = 1u << 3,
  /* A callback-API subscriber on the kernel launch calls (runtime and driver), doing
   * nothing: what a callback per launch costs, to weigh against a runtime record. */
  PD_CUPTI_CAPTURE_LAUNCH_CALLBACKS = 1u << 4,
  /* Runtime records by per-call-id enabling (cuptiActivityEnableRuntimeApi on every id
   * but the query-only ones) instead of the RUNTIME kind with those ids turned off: whether
   * CUPTI then leaves the unrecorded calls alone. */
  PD_CUPTI_CAPTURE_RUNTIME_IDS = 1u << 5,
  /* No DRIVER kind: driver-API launches (cuBLAS, Triton) get no launching call
   * (measurement only). */
  PD_CUPTI_CAPTURE_NO_DRIVER = 1u << 6,
  /* Driver-API launch records by per-call-id enabling (cuptiActivityEnableDriverApi on the
   * launch ids) instead of the DRIVER kind with every other id turned off. */
  PD_CUPTI_CAPTURE_DRIVER_IDS = 1u << 7,
  /* API records written from CUPTI's callback API instead of its RUNTIME and DRIVER
   * activity kinds: a callback on the recorded calls only (the launches, copies, syncs; not
   * the query calls), timed with pd_clock at entry and exit, carrying the call's
   * correlation id. The activity kinds instrument every API call a step makes (1306 in the
   * PyTorch step, of which 147 are recorded); callbacks cost only the calls asked for. */
  PD_CUPTI_CAPTURE_CALLBACK_API = 1u << 8,
};
/* Parses a comma-separated list of capture names ("cupti_clock,pthread_ids,
 * shared_buffers,kernels_only,launch_callbacks,runtime_ids,no_driver,driver_ids,
 * callback_api"; "" or "default" is 0). Returns 0 and sets
 * *bits, or PD_EINVAL naming the unknown word in err. */
int pd_cupti_capture_parse(const char *text, unsigned *bits, char *err, size_t errlen);

/* Checks for a CUDA device, probes CUPTI with a subscription, registers the buffer and
 * timestamp callbacks, then detaches again (opt->detach) until the first enable. Activity
 * stays disabled until pd_cupti_source_enable(). On success *out
 * owns the source (free with pd_cupti_source_destroy()). Returns PD_ENODEV (no device or
 * no driver), PD_ECUPTI_BUSY (another CUPTI client such as Nsight Systems), PD_ECUPTI,
 * PD_ENOMEM or PD_EINVAL; err receives one line of detail. */
int pd_cupti_source_create(const pd_cupti_options_t *opt, pd_cupti_source_t **out,
                           char *err, size_t errlen);
/* The same source behind the record-source interface the profiler drives (pd_source.h):
 * on success *out owns it; its destroy operation frees it. Same returns as above. */
int pd_cupti_record_source_create(const pd_cupti_options_t *opt, pd_record_source_t **out, char *err,
                                  size_t errlen);
/* Forced flush, disables every kind, frees queued buffers, unsubscribes. NULL: no-op. */
void pd_cupti_source_destroy(pd_cupti_source_t *src);

/* Enables the configured activity kinds (called when a traced phase begins). Returns 0,
 * PD_ECUPTI_BUSY or PD_ECUPTI with detail in err. */
int pd_cupti_source_enable(pd_cupti_source_t *src, char *err, size_t errlen);
/* Disables them again (called when tracing ends), so untraced steps cost nothing. */
int pd_cupti_source_disable(pd_cupti_source_t *src, char *err, size_t errlen);
/* Detaches CUPTI from the process (cuptiFinalize, run from the exit callback of a
 * cudaGetDevice call as CUPTI recommends) after disabling and a forced flush, so steps
 * between cycles pay no CUPTI cost at all; the next enable attaches again (a few ms,
 * absorbed by the warmup step). Returns 0, or PD_ECUPTI/PD_ECUPTI_BUSY with detail in
 * err, CUPTI then staying attached and usable. */
int pd_cupti_source_detach(pd_cupti_source_t *src, char *err, size_t errlen);
/* cuptiActivityFlushAll: forced=false hands over buffers whose records are complete,
 * forced=true every buffer (at stop). Returns 0 or PD_ECUPTI. */
int pd_cupti_source_flush(pd_cupti_source_t *src, bool forced, char *err, size_t errlen);
/* Parses every queued buffer into out (events starting before window_start_ns are left
 * out: they belong to a warmup phase) and recycles the buffers. out == NULL discards.
 * Returns the number of events added, or PD_ENOMEM. */
int64_t pd_cupti_source_collect(pd_cupti_source_t *src, pd_trace_t *out, int64_t window_start_ns);
/* Buffers CUPTI handed back holding records, since create. */
uint64_t pd_cupti_source_buffers(const pd_cupti_source_t *src);
/* Bytes of one activity buffer. */
size_t pd_cupti_source_buffer_bytes(const pd_cupti_source_t *src);
/* Records CUPTI dropped so far (summed over completed buffers). */
uint64_t pd_cupti_source_dropped(const pd_cupti_source_t *src);
/* CUPTI calls that failed where no error can be returned (inside CUPTI's callbacks, or a
 * buffer whose records stopped parsing early), summed since create. */
uint64_t pd_cupti_source_errors(const pd_cupti_source_t *src);
/* Properties of the configured device, filled at create. */
const pd_device_props_t *pd_cupti_source_device(const pd_cupti_source_t *src);

/* ---- the injection library's launch hook (src/inject) --------------------------------- */

/* Called by CUPTI on the thread making the call, at the entry and the exit of every kernel
 * launch call: runtime (cudaLaunchKernel*, is_runtime) and driver (cuLaunchKernel*, which
 * the runtime's launches also make inside, and libraries such as cuBLAS make directly).
 * kernel is the launched function's name as CUPTI gives it (mangled; may be NULL). */
typedef void (*pd_cupti_launch_cb)(void *user, const char *kernel, bool is_runtime, bool is_exit);

/* Subscribes CUPTI's one subscriber to the kernel launch calls for the process's lifetime
 * (the injection library, which learns of steps from launches). Callable inside cuInit
 * (InitializeInjection). While installed, a CUPTI source never probes for another
 * subscriber and never detaches (detaching would take the subscription away). Returns 0,
 * PD_ECUPTI_BUSY (another CUPTI client, e.g. Nsight Systems) or PD_ECUPTI, with one line in
 * err; PD_ESTATE when already installed. */
int pd_cupti_launch_hook_install(pd_cupti_launch_cb cb, void *user, char *err, size_t errlen);
/* Lets go of CUPTI for good (cuptiFinalize): the hook's subscription and its callbacks go
 * with it, so the program's later calls pay nothing. Call it only from inside the hook's
 * callback at a call's exit (CUPTI's documented call site), after the profiler's source is
 * destroyed. Returns 0 (also when no hook is installed), PD_ESTATE while a source exists,
 * or PD_ECUPTI with one line in err. */
int pd_cupti_launch_hook_finalize(char *err, size_t errlen);
/* Whether the launch hook holds CUPTI's subscriber. */
bool pd_cupti_launch_hook_installed(void);

/* ---- test seam: the record -> event conversion, usable without a GPU ------------------ */

/* Converts one CUPTI activity record (a CUpti_Activity* passed as void*) into *ev. API
 * names (runtime/driver) are written into namebuf and ev->name points there; other names
 * point into the record. Returns 1 when ev was filled, 0 for a kind that is not kept,
 * PD_EINVAL for NULL arguments. Memory records update the live-bytes tally of the
 * converter (see pd_cupti_convert_reset). */
int pd_cupti_record_to_event(const void *record, pd_event_t *ev, char *namebuf, size_t namelen);
/* Returns true for driver API callback ids that launch GPU work (kept when only
 * driver_launches is asked for). */
bool pd_cupti_driver_cbid_is_launch(uint32_t cbid);
/* Converts one record and adds it to out. Returns 1 added, 0 skipped, or a PD_E* code. */
int pd_cupti_convert_record(const void *record, pd_trace_t *out);
/* Converts n records as one collect does, in their order, into out: also the CUDA_EVENT
 * records, which add no event but tell each Event Sync and Stream Wait Event the stream
 * and correlation id of the cudaEventRecord it waits for (u.sync.has_wait, wait_stream,
 * event_record_corr; Kineto's wait_on_stream and wait_on_cuda_event_record_corr_id).
 * Returns the number of events added, or a PD_E* code. */
int pd_cupti_convert_records(const void *const *records, size_t n, pd_trace_t *out);
/* Forgets the live device allocations the converter tracks for total_allocated. */
void pd_cupti_convert_reset(void);
/* Fills pid/tid of SYNC events (CUPTI gives none) from the runtime call with the same
 * correlation id in the same trace, and their device (CUPTI gives their context) from a GPU
 * activity of the same context. Returns 0 or PD_ENOMEM. */
int pd_cupti_link_sync(pd_trace_t *trace);
/* Strips a CUPTI version suffix in place: "cudaLaunchKernel_v7000" -> "cudaLaunchKernel". */
void pd_cupti_strip_version_suffix(char *name);
/* The CALLBACK_API records without CUPTI calling: _on(opt) starts recording the calls opt
 * records (NULL: stops); _call(domain, cbid, cbdata) is CUPTI's callback on the calling
 * thread (cbdata a CUpti_CallbackData: the entry with its correlationData slot, then the exit
 * with the same slot); _drain moves every thread's records into out (NULL: drops them) and
 * returns how many were added or a PD_E* code. */
void pd_cupti_callback_api_test_on(const pd_cupti_options_t *opt);
void pd_cupti_callback_api_test_call(int domain, uint32_t cbid, const void *cbdata);
int64_t pd_cupti_callback_api_test_drain(pd_trace_t *out);

#endif /* PD_CUPTI_SOURCE_H */
