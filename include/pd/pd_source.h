/* pd_source.h: the record source under the profiler (the capture layer's test seam).
 *
 * The profiler's state machine (src/capture/profiler.c) takes GPU-side records from a
 * record source through this table of operations and never names CUPTI. The one source
 * for GPUs is the CUPTI source (src/capture/cupti_source.c), which pd_prof_create() makes
 * when CUDA activity is asked for; a program or a unit test may pass its own in
 * pd_prof_config_t.source instead: tests/support/mock_source.c replays scripted records
 * (kernels, copies, syncs, runtime calls, drops, errors, failing calls), so the whole
 * cycle runs to JSON without a GPU (kineto's mock activity source). A profiler driving
 * a source it did not make makes no CUDA call (no calibration).
 *
 * Order of calls in one traced phase: enable, then at its end disable, flush(forced),
 * collect; collect(out = NULL) discards what was recorded during a warmup. detach runs
 * when untraced steps follow. Every call comes from the profiler's thread.
 */
#ifndef PD_SOURCE_H
#define PD_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pd/pd_event.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_record_source pd_record_source_t;

/* The API calls a source saw over a census (the warmup steps of a cycle): those it
 * records, and those it instruments without recording (with CUPTI: the query-only runtime
 * calls such as cudaGetDevice and cudaGetLastError, and the driver calls other than kernel
 * launches, each still costing the program time). pd_prof_cost_t counts them per step. */
typedef struct {
  int64_t recorded;           /* calls whose records the source keeps */
  int64_t runtime_unrecorded; /* runtime calls seen and not recorded */
  int64_t driver_unrecorded;  /* driver calls seen and not recorded */
  int64_t driver_internal;    /* driver calls made inside a runtime call (cudaLaunchKernel's own
                                 launch): CUPTI records none of them, and their cost is part of
                                 the runtime call's */
} pd_api_census_t;

/* Every operation gets the source itself. Calls that can fail return 0 or a negative
 * PD_E* code and then write one line of detail into err (errlen > 0). */
typedef struct {
  const char *name; /* "CUPTI", "mock source", ...: names the source in warnings */
  /* Starts taking records (a traced phase begins). */
  int (*enable)(pd_record_source_t *src, char *err, size_t errlen);
  /* Stops taking records, so untraced steps cost nothing. */
  int (*disable)(pd_record_source_t *src, char *err, size_t errlen);
  /* Hands over the records taken so far: forced=false those complete, forced=true all. */
  int (*flush)(pd_record_source_t *src, bool forced, char *err, size_t errlen);
  /* Converts the handed-over records into events added to out (those starting before
   * window_start_ns are left out: warmup); out == NULL discards them. Returns the number
   * of events added or a negative PD_E* code. */
  int64_t (*collect)(pd_record_source_t *src, pd_trace_t *out, int64_t window_start_ns);
  /* Takes the source out of the process between cycles (it attaches again at the next
   * enable). A failure costs only speed: the profiler warns once and goes on. */
  int (*detach)(pd_record_source_t *src, char *err, size_t errlen);
  /* The device the records come from; NULL: none to describe. Owned by the source. */
  const pd_device_props_t *(*device)(const pd_record_source_t *src);
  /* Records lost so far (buffers full), summed since the source was made. */
  uint64_t (*dropped)(const pd_record_source_t *src);
  /* Calls that failed where no error could be returned (in a callback, a buffer whose
   * records stopped parsing early), summed since the source was made. */
  uint64_t (*errors)(const pd_record_source_t *src);
  /* Buffers handed over holding records, since the source was made; bytes of one. */
  uint64_t (*buffers)(const pd_record_source_t *src);
  size_t (*buffer_bytes)(const pd_record_source_t *src);
  /* Frees the source (and the object holding it). */
  void (*destroy)(pd_record_source_t *src);
  /* Optional (NULL: the source counts nothing). on = true starts counting every API call
   * the source sees (from now until the next census call, while enabled); on = false stops
   * and writes the counts into *out (may be NULL to discard them). The profiler runs it
   * over the warmup steps only, whose records are dropped anyway: counting costs each call
   * a callback. Returns 0, or a PD_E* code with err (then *out is zeroed). */
  int (*census)(pd_record_source_t *src, bool on, pd_api_census_t *out, char *err, size_t errlen);
} pd_record_source_ops_t;

/* A source is its operations and the implementation's state; implementations embed it
 * or allocate it next to their state. */
struct pd_record_source {
  const pd_record_source_ops_t *ops;
  void *impl;
};

#ifdef __cplusplus
}
#endif
#endif /* PD_SOURCE_H */
