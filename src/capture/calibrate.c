/* calibrate.c: what tracing adds to one CUDA call and one host range, on this host
 * (pd_prof_cost_t's calib_ns_per_call and calib_ns_per_range; the launch times it is the
 * difference of are kept too, calib_ns_launch_untraced and _traced, and the traced
 * launches' durations as CUPTI recorded them, calib_ns_launch_record). pd_calibrate runs
 * once, before the first step; pd_calibrate_end runs the same measure again at each
 * cycle's end (end_ns_per_call_sum, end_ns_per_range_sum), to show whether the first
 * still holds after the window.
 *
 * GPU only: every path past its first CUDA call needs a device, so the unit tests, which
 * run the profiler on a scripted record source, never come here (gcovr.cfg); the
 * acceptance tests do. pd_prof_create() calibrates only the CUPTI source it made itself.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "capture_internal.h"
#include "pd/pd_prof.h"
#include "pd/pd_stats.h"

#define CAL_LAUNCHES 256 /* per timed batch: well under a stream's queue, so launches never block */
#define CAL_BATCHES 7
#define CAL_RANGES 2000

/* One phase of the calibration: the median ns per launch over CAL_BATCHES batches of
 * CAL_LAUNCHES empty kernels (the host's issue time only; the stream is drained after each
 * batch, untimed), then ns per push+pop over CAL_RANGES host ranges. Returns false when a
 * CUDA call failed. */
static bool cal_phase(cudaStream_t s, double *launch_ns, double *range_ns) {
  double batch[CAL_BATCHES];
  for (int i = 0; i < CAL_BATCHES; i++) {
    int64_t t0 = pd_clock_now_ns();
    if (pd_calibration_launch(CAL_LAUNCHES, s) != 0) return false;
    batch[i] = (double)(pd_clock_now_ns() - t0) / CAL_LAUNCHES;
    if (cudaStreamSynchronize(s) != cudaSuccess) return false;
  }
  *launch_ns = pd_quantile(batch, CAL_BATCHES, 0.5);
  int64_t t0 = pd_clock_now_ns();
  for (int i = 0; i < CAL_RANGES; i++) {
    (void)pd_range_push("pd_calibration");
    (void)pd_range_pop();
  }
  *range_ns = (double)(pd_clock_now_ns() - t0) / CAL_RANGES;
  return true;
}

/* What one calibration measured (ns; -1 where unknown). */
typedef struct {
  double per_call, per_range, launch_untraced, launch_traced, launch_record;
} calib_figures_t;

/* Untraced, traced, untraced again: the differences are what tracing adds. */
static bool calibrate(pd_record_source_t *src, calib_figures_t *f) {
  const pd_record_source_ops_t *ops = src->ops;
  cudaStream_t s = NULL;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  double off = 0, on = 0, off2 = 0, r_off = 0, r_on = 0, r_off2 = 0;
  char err[256];
  /* The first launch loads the module: untimed. */
  bool ok = pd_calibration_launch(8, s) == 0 && cudaStreamSynchronize(s) == cudaSuccess;
  ok = ok && cal_phase(s, &off, &r_off);
  ok = ok && ops->enable(src, err, sizeof(err)) == 0;
  pd_ranges_session_begin();
  ok = ok && pd_calibration_launch(8, s) == 0 && cudaStreamSynchronize(s) == cudaSuccess;
  ok = ok && cal_phase(s, &on, &r_on);
  pd_ranges_session_end();
  (void)pd_ranges_collect(NULL);
  (void)ops->disable(src, err, sizeof(err));
  (void)ops->flush(src, true, err, sizeof(err));
  /* The traced launches as CUPTI recorded them: the window's launch records are set
   * against their median (pd_prof_cost_window_call_ns). */
  double rec = -1.0;
  pd_trace_t *cal = pd_trace_create();
  if (cal != NULL && ops->collect(src, cal, 0) >= 0) rec = pd_prof_cost_launch_median_ns(cal);
  else (void)ops->collect(src, NULL, 0);
  pd_trace_destroy(cal);
  (void)ops->detach(src, err, sizeof(err));
  ok = ok && cal_phase(s, &off2, &r_off2);
  (void)cudaStreamDestroy(s);
  (void)cudaGetLastError();
  if (!ok) return false;
  *f = (calib_figures_t){
      .per_call = on - fmin(off, off2),
      .per_range = r_on - fmin(r_off, r_off2),
      .launch_untraced = fmin(off, off2),
      .launch_traced = on,
      .launch_record = rec,
  };
  return true;
}

void pd_calibrate(pd_record_source_t *src, pd_prof_cost_t *cost) {
  const int64_t t0 = pd_clock_now_ns();
  calib_figures_t f;
  if (calibrate(src, &f)) {
    cost->calib_ns_per_call = f.per_call;
    cost->calib_ns_per_range = f.per_range;
    cost->calib_ns_launch_untraced = f.launch_untraced;
    cost->calib_ns_launch_traced = f.launch_traced;
    cost->calib_ns_launch_record = f.launch_record;
  }
  cost->calibrate_ms += (double)(pd_clock_now_ns() - t0) * 1e-6;
}

void pd_calibrate_end(pd_record_source_t *src, pd_prof_cost_t *cost) {
  const int64_t t0 = pd_clock_now_ns();
  calib_figures_t f;
  if (calibrate(src, &f)) {
    cost->end_ns_per_call_sum += f.per_call;
    cost->end_ns_per_range_sum += f.per_range;
    cost->end_cycles++;
  }
  cost->calibrate_ms += (double)(pd_clock_now_ns() - t0) * 1e-6;
}
