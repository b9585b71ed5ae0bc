/* capture_internal.h: what profiler.c needs from the capture layer's other files (host
 * ranges, calibration, environment knobs), not public.
 *
 * Host ranges are recorded per thread (ranges.c). The profiler opens a recording
 * "session" when a traced phase begins and collects completed ranges at the end of a
 * cycle. A range is kept only when it was pushed and popped within the same session, so
 * warmup ranges and ranges that straddle a cycle boundary never leak into a cycle.
 */
#ifndef PD_CAPTURE_INTERNAL_H
#define PD_CAPTURE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pd/pd_event.h"
#include "pd/pd_source.h"

/* Starts a new recording session (drops whatever the previous one left uncollected). */
void pd_ranges_session_begin(void);
/* Stops recording; pushes and pops become cheap again. */
void pd_ranges_session_end(void);
/* Moves the completed ranges of the current session from every thread into out and
 * empties the per-thread buffers (their capacity is kept). Returns the number of events
 * added or PD_ENOMEM. */
int64_t pd_ranges_collect(pd_trace_t *out);
/* Keeps shapes given to pd_range_push_shape() (record_shapes). */
void pd_ranges_set_record_shapes(bool on);
/* Captures each recorded range's call stack when it opens (with_stack); the collector
 * symbolizes it into the event's stack text. */
void pd_ranges_set_with_stack(bool on);

/* The ProfilerStep#N range lives outside the thread's push/pop stack (it closes at the
 * next pd_prof_step() even when user ranges are still open), but ranges the thread
 * pushes while it is open nest one level deeper. step_begin opens an NVTX start/end
 * range named `name` (its id goes to *nvtx_id) and returns the depth the step range has
 * on the calling thread; step_end closes both. */
uint32_t pd_ranges_step_begin(const char *name, uint64_t *nvtx_id);
void pd_ranges_step_end(uint64_t nvtx_id);
/* Ranges that do not nest (NVTX start/end, which may end on another thread; the injection
 * library's NVTX tool): take the session id when the range starts, and add the finished
 * range on the ending thread. It is kept when that session is still the recording one
 * (returns 0 either way); PD_EINVAL for a NULL name or end before start, PD_ENOMEM (lost,
 * counted). */
uint32_t pd_ranges_session_id(void);
int pd_range_add_span(const char *name, uint32_t session, int64_t start_ns, int64_t end_ns);
/* Ranges that could not be recorded (out of memory) since the process started. */
uint64_t pd_ranges_lost(void);

/* Launches n empty kernels on `stream` (a cudaStream_t) for the profiler's calibration
 * (calibrate_kernel.cu). Returns 0, or -1 when a launch failed. */
#ifdef __cplusplus
extern "C"
#endif
int pd_calibration_launch(int n, void *stream);

/* Measures what tracing through src adds to one CUDA call and one host range on this
 * host (empty kernels and host ranges timed untraced, traced, untraced again; 35-100 ms
 * measured on H100 and H200) into cost->calib_ns_per_call and calib_ns_per_range, and to
 * the other kinds of call (calib_ns_per_recorded_call, calib_ns_per_unrecorded_runtime,
 * _driver); a failure leaves them unknown. Everything it records is discarded and src is detached again (calibrate.c;
 * needs a GPU). */
void pd_calibrate(pd_record_source_t *src, pd_prof_cost_t *cost);
/* The same measure again, after a cycle's last step (src disabled and its records
 * collected): adds its figures to cost->end_ns_per_call_sum and end_ns_per_range_sum and
 * counts cost->end_cycles; a failure adds nothing. Both add their own time to
 * cost->calibrate_ms. */
void pd_calibrate_end(pd_record_source_t *src, pd_prof_cost_t *cost);

/* ---- environment knobs (knobs.c) --------------------------------------------------------- */

/* PD_PROF_CUPTI_DETACH: CUPTI is detached between cycles unless it is "0". */
bool pd_knob_cupti_detach(void);
/* PD_PROF_CALIBRATE: the CUPTI source is calibrated unless it is "0". */
bool pd_knob_calibrate(void);
/* PD_PROF_CALIBRATE_COLD=1: the start calibration also times the cold launches (off by default). */
bool pd_knob_calibrate_cold(void);
/* PD_CUPTI_OPTIONS parsed into PD_CUPTI_CAPTURE_* bits. Returns 0, or PD_EINVAL naming the
 * unknown word in err. */
int pd_knob_cupti_capture(unsigned *bits, char *err, size_t errlen);

/* Frees the buffers of threads that have exited and the calling thread's idle buffers.
 * Called when the profiler is destroyed. */
void pd_ranges_release(void);

#endif /* PD_CAPTURE_INTERNAL_H */
