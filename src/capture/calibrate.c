/* calibrate.c: what tracing adds to one CUDA call and one host range, on this host
 * (pd_prof_cost_t's calib_ns_per_call and calib_ns_per_range; the launch times it is the
 * difference of are kept too, calib_ns_launch_untraced and _traced, and the traced
 * launches' durations as CUPTI recorded them, calib_ns_launch_record). pd_calibrate runs
 * once, before the first step; pd_calibrate_end runs the same measure again at each
 * cycle's end (end_ns_per_call_sum, end_ns_per_range_sum), to show whether the first
 * still holds after the window. The same phases also time three other kinds of call, for
 * the estimate's per-kind costs: a recorded call that launches nothing, and a runtime and a
 * driver call the capture instruments without recording (calib_ns_per_recorded_call,
 * calib_ns_per_unrecorded_runtime, _driver; start calibration only).
 *
 * GPU only: every path past its first CUDA call needs a device, so the unit tests, which
 * run the profiler on a scripted record source, never come here (gcovr.cfg); the
 * acceptance tests do. pd_prof_create() calibrates only the CUPTI source it made itself.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>

#include "capture_internal.h"
#include "pd/pd_host_calib.h"
#include "pd/pd_prof.h"
#include "pd/pd_stats.h"

#define CAL_LAUNCHES 256 /* per timed batch: well under a stream's queue, so launches never block */
#define CAL_BATCHES 7
#define CAL_RANGES 2000
#define CAL_CALLS 500 /* per timed batch of the other calls */
/* Cold launches: each one timed alone after a walk that writes a buffer larger than a
 * core's L2, so the launch path (the driver's and CUPTI's data, and code held in L2) runs
 * from farther away, as between the launches of a real program, whose own work evicts
 * them; a tight loop of launches keeps them all in cache. */
#define CAL_COLD_LAUNCHES 32
#define CAL_COLD_BYTES ((size_t)8 << 20)

typedef int (*cu_ctx_get_current_fn)(void **ctx); /* CUresult cuCtxGetCurrent(CUcontext *) */

/* What one phase measured, ns per item (see calib_figures_t). */
typedef struct {
  double launch, range, recorded, runtime, driver;
  double cold; /* ns per cold launch (cal_cold); -1 where not measured */
} cal_times_t;

/* The median ns of CAL_COLD_LAUNCHES launches, each timed alone right after a walk that
 * writes every cache line of buf (CAL_COLD_BYTES); the stream is drained after them. -1
 * when a CUDA call failed. */
static double cal_cold(cudaStream_t s, unsigned char *buf) {
  double t[CAL_COLD_LAUNCHES];
  for (int i = 0; i < CAL_COLD_LAUNCHES; i++) {
    for (size_t k = 0; k < CAL_COLD_BYTES; k += 64) buf[k] = (unsigned char)(buf[k] + 1u);
    const int64_t t0 = pd_clock_now_ns();
    if (pd_calibration_launch(1, s) != 0) return -1.0;
    t[i] = (double)(pd_clock_now_ns() - t0);
  }
  if (cudaStreamSynchronize(s) != cudaSuccess) return -1.0;
  return pd_quantile(t, CAL_COLD_LAUNCHES, 0.5);
}

/* The median ns per call of CAL_BATCHES batches of CAL_CALLS calls of one kind: 0 a
 * recorded call that launches nothing (cudaStreamQuery on the idle stream), 1 a runtime
 * query (cudaGetDevice), 2 a driver call (cuCtxGetCurrent). -1 when a call failed. */
static double cal_calls(int kind, cudaStream_t s, cu_ctx_get_current_fn drv) {
  double batch[CAL_BATCHES];
  int dev = 0;
  void *ctx = NULL;
  for (int i = 0; i < CAL_BATCHES; i++) {
    bool ok = true;
    int64_t t0 = pd_clock_now_ns();
    for (int k = 0; k < CAL_CALLS; k++) {
      if (kind == 0) ok &= cudaStreamQuery(s) == cudaSuccess;
      else if (kind == 1) ok &= cudaGetDevice(&dev) == cudaSuccess;
      else ok &= drv(&ctx) == 0;
    }
    batch[i] = (double)(pd_clock_now_ns() - t0) / CAL_CALLS;
    if (!ok) return -1.0;
  }
  return pd_quantile(batch, CAL_BATCHES, 0.5);
}

/* One phase of the calibration: the median ns per launch over CAL_BATCHES batches of
 * CAL_LAUNCHES empty kernels (the host's issue time only; the stream is drained after each
 * batch, untimed), then ns per push+pop over CAL_RANGES host ranges, then, with kinds, ns
 * per call of the three other kinds (cal_calls; the driver kind only where drv is known,
 * else -1; without kinds all three are -1). Returns false when a CUDA call failed. */
static bool cal_phase(cudaStream_t s, cu_ctx_get_current_fn drv, bool kinds, unsigned char *cold,
                      cal_times_t *t) {
  double batch[CAL_BATCHES];
  for (int i = 0; i < CAL_BATCHES; i++) {
    int64_t t0 = pd_clock_now_ns();
    if (pd_calibration_launch(CAL_LAUNCHES, s) != 0) return false;
    batch[i] = (double)(pd_clock_now_ns() - t0) / CAL_LAUNCHES;
    if (cudaStreamSynchronize(s) != cudaSuccess) return false;
  }
  t->launch = pd_quantile(batch, CAL_BATCHES, 0.5);
  int64_t t0 = pd_clock_now_ns();
  for (int i = 0; i < CAL_RANGES; i++) {
    (void)pd_range_push("pd_calibration");
    (void)pd_range_pop();
  }
  t->range = (double)(pd_clock_now_ns() - t0) / CAL_RANGES;
  t->recorded = kinds ? cal_calls(0, s, drv) : -1.0;
  t->runtime = kinds ? cal_calls(1, s, drv) : -1.0;
  t->driver = kinds && drv != NULL ? cal_calls(2, s, drv) : -1.0;
  t->cold = cold != NULL ? cal_cold(s, cold) : -1.0;
  return true;
}

/* What one calibration measured (ns; -1 where unknown). */
typedef struct {
  double per_call, per_range, launch_untraced, launch_traced, launch_record;
  double recorded, runtime, driver; /* added per call of the other kinds (cal_calls); NaN unknown */
  double cold_untraced, cold_traced;  /* a cold launch (cal_cold): -1 unknown */
} calib_figures_t;

/* What tracing added to one kind of call: traced against the faster untraced phase; NaN
 * where a phase could not time it. */
static double added(double on, double off, double off2) {
  return on >= 0.0 && off >= 0.0 && off2 >= 0.0 ? on - fmin(off, off2) : NAN;
}

/* A per-kind figure as pd_prof_cost_t keeps it: -1 unknown, noise below 0 as 0. */
static double kept(double v) { return isnan(v) ? -1.0 : fmax(0.0, v); }

/* The driver's cuCtxGetCurrent through the runtime (the profiler links no driver library);
 * NULL when the driver does not give it. */
static cu_ctx_get_current_fn driver_call(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult st;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &st) != cudaSuccess ||
      st != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return (cu_ctx_get_current_fn)fn;
}

/* Untraced, traced, untraced again: the differences are what tracing adds. kinds: also the
 * per-kind calls (the start calibration only: the end one keeps the launch and range). */
static bool calibrate(pd_record_source_t *src, bool kinds, calib_figures_t *f) {
  const pd_record_source_ops_t *ops = src->ops;
  cudaStream_t s = NULL;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const cu_ctx_get_current_fn drv = kinds ? driver_call() : NULL;
  /* the cold launches with the per-kind calls only (the start calibration), and only when
   * asked (PD_PROF_CALIBRATE_COLD=1); calloc'd pages are touched by the first walk, before
   * any timed launch */
  unsigned char *cold = kinds && pd_knob_calibrate_cold() ? calloc(1, CAL_COLD_BYTES) : NULL;
  cal_times_t off = {0}, on = {0}, off2 = {0};
  char err[256];
  /* The first launch loads the module: untimed. */
  bool ok = pd_calibration_launch(8, s) == 0 && cudaStreamSynchronize(s) == cudaSuccess;
  ok = ok && cal_phase(s, drv, kinds, cold, &off);
  ok = ok && ops->enable(src, err, sizeof(err)) == 0;
  pd_ranges_session_begin();
  ok = ok && pd_calibration_launch(8, s) == 0 && cudaStreamSynchronize(s) == cudaSuccess;
  ok = ok && cal_phase(s, drv, kinds, cold, &on);
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
  ok = ok && cal_phase(s, drv, kinds, cold, &off2);
  (void)cudaStreamDestroy(s);
  (void)cudaGetLastError();
  free(cold);
  if (!ok) return false;
  *f = (calib_figures_t){
      .per_call = on.launch - fmin(off.launch, off2.launch),
      .per_range = on.range - fmin(off.range, off2.range),
      .launch_untraced = fmin(off.launch, off2.launch),
      .launch_traced = on.launch,
      .launch_record = rec,
      .recorded = added(on.recorded, off.recorded, off2.recorded),
      .runtime = added(on.runtime, off.runtime, off2.runtime),
      .driver = added(on.driver, off.driver, off2.driver),
      .cold_untraced = off.cold >= 0.0 && off2.cold >= 0.0 ? fmin(off.cold, off2.cold) : -1.0,
      .cold_traced = on.cold,
  };
  return true;
}

void pd_calibrate(pd_record_source_t *src, pd_prof_cost_t *cost) {
  const int64_t t0 = pd_clock_now_ns();
  calib_figures_t f;
  if (calibrate(src, true, &f)) {
    cost->calib_ns_per_call = f.per_call;
    cost->calib_ns_per_range = f.per_range;
    cost->calib_ns_launch_untraced = f.launch_untraced;
    cost->calib_ns_launch_traced = f.launch_traced;
    cost->calib_ns_launch_record = f.launch_record;
    cost->calib_ns_per_recorded_call = kept(f.recorded);
    cost->calib_ns_per_unrecorded_runtime = kept(f.runtime);
    cost->calib_ns_per_unrecorded_driver = kept(f.driver);
    cost->calib_ns_launch_cold_untraced = f.cold_untraced;
    cost->calib_ns_launch_cold_traced = f.cold_traced;
  }
  cost->calibrate_ms += (double)(pd_clock_now_ns() - t0) * 1e-6;
}

void pd_calibrate_end(pd_record_source_t *src, pd_prof_cost_t *cost) {
  const int64_t t0 = pd_clock_now_ns();
  calib_figures_t f;
  if (calibrate(src, false, &f)) {
    cost->end_ns_per_call_sum += f.per_call;
    cost->end_ns_per_range_sum += f.per_range;
    cost->end_ns_launch_untraced_sum += f.launch_untraced;
    cost->end_cycles++;
  }
  cost->calibrate_ms += (double)(pd_clock_now_ns() - t0) * 1e-6;
}

int pd_speed_probe(void *stream, int launches, int64_t compute_iters, double *launch_ns, double *compute_ns) {
  if (launches < 1 || launches > 1024 || compute_iters < 1 || compute_iters > 100000000 || launch_ns == NULL ||
      compute_ns == NULL)
    return PD_EINVAL;
  cudaStream_t s = (cudaStream_t)stream;
  const int64_t t0 = pd_clock_now_ns();
  if (pd_calibration_launch(launches, s) != 0) return PD_ECUDA;
  const int64_t t1 = pd_clock_now_ns();
  if (cudaStreamSynchronize(s) != cudaSuccess) return PD_ECUDA;
  volatile uint64_t sink = 0;
  const int64_t t2 = pd_clock_now_ns();
  sink = pd_host_calib_work(compute_iters);
  const int64_t t3 = pd_clock_now_ns();
  (void)sink;
  *launch_ns = (double)(t1 - t0) / launches;
  *compute_ns = (double)(t3 - t2);
  return 0;
}
