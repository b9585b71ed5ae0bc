/* pd_prof.h: the profiler's public API (capture layer, src/capture).
 *
 * Create a profiler from a config, start it, call pd_prof_step() once per training
 * step, stop and destroy it. A schedule with torch.profiler semantics decides which
 * steps are traced; the last active step of each cycle hands that cycle's events to
 * the trace-ready callback and then frees them, so memory stays flat over long jobs.
 *
 * Host ranges (pd_range_push/pop) are recorded on the calling thread and also emitted
 * as NVTX ranges, so Nsight Systems shows the same names.
 *
 * Every call returns 0 or a negative PD_E* code (pd_common.h); the library never exits.
 */
#ifndef PD_PROF_H
#define PD_PROF_H

#include <stdbool.h>
#include <stdint.h>

#include "pd/pd_classify.h" /* PD_RANGE_DATA_WAIT: the data pipeline names its wait range */
#include "pd/pd_common.h"
#include "pd/pd_event.h"
#include "pd/pd_schedule.h"
#include "pd/pd_source.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- profiler ---------------------------------------------------------------- */

enum {
  PD_ACTIVITY_CPU = 1u << 0,  /* host ranges */
  PD_ACTIVITY_CUDA = 1u << 1, /* CUPTI: kernels, memcpy, memset, runtime, sync, memory */
  /* With PD_ACTIVITY_CUDA: full API tracing, every CUDA driver API call (cuda_driver) and
   * the query-only runtime calls (cudaGetLastError, cudaGetDevice, ...). Without this bit
   * only driver-API kernel launches are kept (cuLaunchKernel*, cuGraphLaunch), as kineto
   * does: cuBLAS launches its kernels that way, and they need a launching call for flows
   * and attribution; query-only runtime calls are not recorded, since each record costs
   * CUPTI time and they say nothing about GPU work (docs/performance.md). */
  PD_ACTIVITY_CUDA_DRIVER = 1u << 2
};

typedef struct pd_prof pd_prof_t;

/* Called on the thread that calls pd_prof_step()/pd_prof_stop() when a cycle is
 * complete. `cycle` holds that cycle's events sorted by start time, with step ranges
 * (ProfilerStep#N) included; it is freed after the callback returns. Return 0, or a
 * negative PD_E* code that pd_prof_step()/pd_prof_stop() then returns. */
typedef int (*pd_trace_ready_cb)(pd_prof_t *prof, const pd_trace_t *cycle, void *user);

typedef struct {
  unsigned activities;   /* PD_ACTIVITY_* bits; 0 means CPU|CUDA */
  bool record_shapes;    /* keep shapes given to pd_range_push_shape() */
  bool profile_memory;   /* device memory alloc/free records */
  bool with_stack;       /* host ranges record their call stack (pd_event_t.u.range.stack) */
  pd_schedule_t schedule;
  pd_trace_ready_cb on_trace_ready; /* may be NULL: cycles are then dropped */
  void *user;
  const char *trace_dir;   /* used by pd_trace_file_path(); may be NULL */
  const char *worker_name; /* defaults to "<hostname>_<pid>" */
  int device;              /* CUDA device ordinal to describe in deviceProperties */
  /* CUPTI activity buffers: each cupti_buffer_bytes (0: 8 MiB), and at most
   * cupti_buffer_budget_bytes of them handed to CUPTI and not yet parsed (0: no limit;
   * a budget under one buffer shrinks the buffers to it). Past the budget CUPTI drops
   * records instead of the process growing: pd_prof_dropped_records() counts them. */
  size_t cupti_buffer_bytes;
  size_t cupti_buffer_budget_bytes;
  /* The record source for PD_ACTIVITY_CUDA (pd_source.h); NULL: the CUPTI source, made
   * and destroyed by the profiler (the cupti_buffer_* fields and the environment knobs
   * configure it). A given source is borrowed: destroy it after pd_prof_destroy(). The
   * profiler then makes no CUDA or CUPTI call at all (no calibration), so unit tests
   * drive the whole cycle with a scripted source and no GPU. */
  pd_record_source_t *source;
  /* The range the program opens per step, whose starts cut the steps (pd_run
   * --step_range), set on every cycle's trace (pd_trace_set_step_range); borrowed, it
   * must outlive the profiler. NULL: none. */
  const char *step_range;
} pd_prof_config_t;

/* Fills cfg with defaults: CPU|CUDA, schedule(wait=1, warmup=1, active=1, repeat=1). */
void pd_prof_config_init(pd_prof_config_t *cfg);

/* Checks the profiler's environment knobs without a GPU: PD_CUPTI_OPTIONS (a comma list
 * of capture options), PD_PROF_CALIBRATE, PD_PROF_CALIBRATE_COLD and PD_PROF_CUPTI_DETACH
 * (unset, "0" or "1").
 * Returns 0, or PD_EINVAL with one line in err naming the variable, its value and what is
 * allowed. pd_prof_create() makes the same check; a program calls it first to refuse a
 * bad value before any work. */
int pd_prof_env_check(char *err, size_t errlen);

/* Creates a profiler. On success *out owns it; free with pd_prof_destroy(). Fails with
 * PD_EINVAL on a bad config (a given source without PD_ACTIVITY_CUDA or with an operation
 * missing) or environment knob (pd_prof_env_check), PD_ENODEV/PD_ECUPTI/PD_ECUPTI_BUSY
 * when CUDA activity is asked for without a given source and CUPTI cannot be used. Only one
 * profiler may exist at a time. */
int pd_prof_create(const pd_prof_config_t *cfg, pd_prof_t **out);
/* Starts step 0 of the schedule. */
int pd_prof_start(pd_prof_t *prof);
/* Ends the current step and begins the next one; may invoke on_trace_ready. */
int pd_prof_step(pd_prof_t *prof);
/* Stops; a cycle still being recorded is flushed (forced) and handed over. */
int pd_prof_stop(pd_prof_t *prof);
/* Stops if needed and frees everything. NULL is a no-op. */
void pd_prof_destroy(pd_prof_t *prof);
/* Records lost so far (CUPTI buffers that overflowed). */
uint64_t pd_prof_dropped_records(const pd_prof_t *prof);
/* The profiler's own cost (pd_prof_cost_t, pd_event.h): over the run so far (*total) and
 * of the last cycle collected (*cycle: inside on_trace_ready, the cycle being handed
 * over). The calibration is made in pd_prof_create(), when CUDA activity is traced:
 * a few hundred empty-kernel launches and a few thousand host ranges, timed untraced and
 * traced (35-100 ms measured on H100 and H200; PD_PROF_CALIBRATE=0 skips it). It runs again at the end of each
 * cycle that pd_prof_step() closes, after the cycle's last step and before on_trace_ready
 * (end_ns_per_call_sum; not at pd_prof_stop()). Either pointer may be NULL.
 * Returns 0 or PD_EINVAL. */
int pd_prof_cost(const pd_prof_t *prof, pd_prof_cost_t *total, pd_prof_cost_t *cycle);
/* The step number the profiler is in (0-based). */
int64_t pd_prof_current_step(const pd_prof_t *prof);
/* Returns the last error's detail text ("cuptiActivityEnable(KERNEL): CUPTI_ERROR_...");
 * owned by the profiler; empty string when none. With prof == NULL: the detail of the
 * last failed pd_prof_create() (static storage, overwritten by the next create). */
const char *pd_prof_last_error(const pd_prof_t *prof);
/* Writes "<trace_dir>/<worker>.<unix time ns>.pt.trace.json" into buf. Returns 0 or PD_EINVAL
 * when buf is too small or trace_dir is unset. */
int pd_prof_trace_file_path(const pd_prof_t *prof, char *buf, size_t buflen);

/* Returns the CUPTI API version of the loaded libcupti (cuptiGetVersion, e.g. 130001), or 0
 * when it cannot be read. Needs no GPU and does not attach CUPTI to the process. */
int pd_prof_cupti_version(void);

/* ---- host ranges ------------------------------------------------------------- */

/* Opens a named range on the calling thread (and an NVTX range of the same name).
 * Recorded only while a profiler is tracing; cheap otherwise. name is copied. */
int pd_range_push(const char *name);
/* Same, with an input-shape text kept when record_shapes is on. */
int pd_range_push_shape(const char *name, const char *shape);
/* Closes the innermost range of the calling thread. PD_ESTATE when none is open. */
int pd_range_pop(void);

/* Scoped range: PD_RANGE_SCOPE("forward") { ... } closes the range when the block
 * ends (also on break). Do not return or goto out of the block. */
#define PD_RANGE_SCOPE(name)                                                   \
  for (int pd__once_ = (pd_range_push(name), 1); pd__once_; pd__once_ = 0, pd_range_pop())

#ifdef __cplusplus
}
#endif
#endif /* PD_PROF_H */
