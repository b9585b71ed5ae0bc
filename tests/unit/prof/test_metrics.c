/* test_metrics.c: step metrics from a hand-built two-step trace (exact numbers), the
 * sync/alloc call tables, quantiles and host-timed samples. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "pd/pd_stats.h"
#include "pd_test_util.h"

static pd_event_t mk(pd_event_kind_t kind, int64_t start, int64_t end, const char *name, uint64_t corr) {
  pd_event_t e = pd_test_event(kind, start, end, name, corr);
  e.pid = 1;
  e.tid = 1;
  return e;
}

static void add(pd_trace_t *t, pd_event_t e) {
  cr_assert_eq(pd_trace_add(t, &e), 0);
}

static pd_event_t step_range(int64_t step, int64_t start, int64_t end) {
  pd_event_t e = mk(PD_EVENT_RANGE, start, end, step == 0 ? "ProfilerStep#0" : "ProfilerStep#1", 0);
  e.u.range.step = step;
  return e;
}

static pd_event_t kernel(int64_t start, int64_t end, uint64_t corr, uint32_t stream) {
  pd_event_t e = mk(PD_EVENT_KERNEL, start, end, "k", corr);
  e.stream = stream;
  return e;
}

static pd_event_t memcpy_ev(int64_t start, int64_t end, uint64_t corr, pd_memcpy_kind_t kind, uint64_t bytes) {
  pd_event_t e = mk(PD_EVENT_MEMCPY, start, end, NULL, corr);
  e.u.memcpy.copy_kind = kind;
  e.u.memcpy.bytes = bytes;
  return e;
}

static pd_event_t sync_ev(int64_t start, int64_t end, uint64_t corr, pd_sync_kind_t kind) {
  pd_event_t e = mk(PD_EVENT_SYNC, start, end, NULL, corr);
  e.u.sync.sync_kind = kind;
  return e;
}

static pd_event_t mem_ev(int64_t t, int64_t bytes, int64_t total, pd_mem_kind_t kind) {
  pd_event_t e = mk(PD_EVENT_MEMORY, t, t, "[memory]", 0);
  e.u.memory.bytes = bytes;
  e.u.memory.total_allocated = total;
  e.u.memory.mem_kind = kind;
  return e;
}

/* Two steps: [0,10000) and [10000,30000). See the expected numbers in the test. */
static pd_trace_t *two_step_trace(void) {
  pd_trace_t *t = pd_trace_create();
  add(t, step_range(1, 10000, 30000));
  add(t, step_range(0, 0, 10000));
  /* step 0 */
  add(t, mk(PD_EVENT_RUNTIME, 100, 200, "cudaLaunchKernel", 1));
  add(t, kernel(1000, 3000, 1, 7));
  add(t, mk(PD_EVENT_RUNTIME, 300, 400, "cudaLaunchKernel", 2));
  add(t, kernel(2500, 4000, 2, 8)); /* overlaps the first on another stream */
  add(t, mk(PD_EVENT_RUNTIME, 500, 600, "cudaMemcpyAsync", 3));
  add(t, memcpy_ev(4500, 5000, 3, PD_MEMCPY_HTOD, 1000));
  add(t, mk(PD_EVENT_RUNTIME, 700, 900, "cudaMalloc_v3020", 4));
  add(t, mk(PD_EVENT_RUNTIME, 5000, 6000, "cudaStreamSynchronize", 5));
  add(t, sync_ev(5000, 6200, 5, PD_SYNC_STREAM)); /* same call: counted once, longer time */
  add(t, mk(PD_EVENT_RUNTIME, 9900, 9950, "cudaLaunchKernel", 6));
  add(t, kernel(10500, 11500, 6, 7)); /* runs in step 1, launched in step 0 */
  add(t, mk(PD_EVENT_RUNTIME, 9960, 9990, "cudaDeviceSynchronize", 7));
  /* step 1 */
  add(t, mk(PD_EVENT_RUNTIME, 11000, 11100, "cudaLaunchKernel", 8));
  add(t, kernel(12000, 16000, 8, 7));
  add(t, mk(PD_EVENT_RUNTIME, 17000, 18000, "cudaMemcpy", 9));
  add(t, memcpy_ev(17500, 17600, 9, PD_MEMCPY_DTOH, 4));
  add(t, mk(PD_EVENT_RUNTIME, 19000, 19050, "cudaStreamWaitEvent", 10));
  add(t, sync_ev(19000, 19100, 10, PD_SYNC_STREAM_WAIT_EVENT)); /* device-side: not a sync */
  add(t, mk(PD_EVENT_RUNTIME, 20000, 20300, "cudaFree", 11));
  add(t, mk(PD_EVENT_RUNTIME, 20400, 20500, "cudaMallocAsync", 12)); /* the pooled fix: not counted */
  add(t, sync_ev(21000, 21500, 0, PD_SYNC_CONTEXT));                /* SYNC record alone */
  add(t, memcpy_ev(25000, 26000, 99, PD_MEMCPY_HTOD, 2000));        /* launching call not in trace */
  pd_event_t ms = mk(PD_EVENT_MEMSET, 26000, 26500, NULL, 0);
  add(t, ms);
  /* outside every step: ignored */
  add(t, mk(PD_EVENT_RUNTIME, 40000, 40100, "cudaLaunchKernel", 13));
  add(t, kernel(40200, 40300, 13, 7));
  add(t, mk(PD_EVENT_RUNTIME, 40400, 40500, "cudaDeviceSynchronize", 14));
  /* device memory: +4096, -4096, +8192 (peak 8192); pinned host memory is not device memory */
  add(t, mem_ev(800, 4096, -1, PD_MEM_DEVICE));
  add(t, mem_ev(20100, -4096, -1, PD_MEM_DEVICE));
  add(t, mem_ev(20150, 8192, -1, PD_MEM_DEVICE));
  add(t, mem_ev(20160, 1000000, -1, PD_MEM_PINNED));
  pd_trace_set_dropped(t, 5);
  return t;
}

#define EXPECT_NEAR(got, want)                                                                     \
  cr_expect(fabs((got) - (want)) <= 1e-9 * (fabs(want) > 1 ? fabs(want) : 1), "%s: got %.12g, want %.12g", \
            #got, (double)(got), (double)(want))

Test(metrics, two_step_trace_exact) {
  pd_trace_t *t = two_step_trace();
  pd_metrics_t m;
  pd_metrics_init(&m);
  m.loss_first = 2.3; /* host-side fields are left alone */
  cr_assert_eq(pd_metrics_from_trace(t, &m), 0);
  cr_expect_eq(m.steps, 2);
  EXPECT_NEAR(m.kernels_per_step, 2.0);            /* 3 in step 0, 1 in step 1 */
  EXPECT_NEAR(m.avg_kernel_time_us, 2.125);        /* 8500 ns / 4 kernels */
  EXPECT_NEAR(m.gpu_kernel_time_per_step_us, 4.25);
  EXPECT_NEAR(m.gpu_memcpy_time_per_step_us, 0.8);  /* (500 + 100 + 1000) ns / 2, DtoH too */
  EXPECT_NEAR(m.gpu_memset_time_per_step_us, 0.25); /* 500 ns in step 1 */
  EXPECT_NEAR(m.gpu_busy_fraction, 10100.0 / 30000.0); /* union: 3500 + 6600 ns */
  EXPECT_NEAR(m.runtime_calls_per_step, 6.0);      /* 7 + 5 */
  EXPECT_NEAR(m.sync_calls_per_step, 2.0);         /* 2 + 2 */
  EXPECT_NEAR(m.sync_time_per_step_us, 1.365);     /* (1200 + 30 + 1000 + 500) / 2 */
  EXPECT_NEAR(m.device_alloc_calls_per_step, 1.0); /* cudaMalloc_v3020, cudaFree */
  EXPECT_NEAR(m.device_alloc_time_per_step_us, 0.25);
  EXPECT_NEAR(m.h2d_bytes_per_step, 1500.0);
  EXPECT_NEAR(m.peak_device_memory_bytes, 8192.0);
  EXPECT_NEAR(m.dropped_records, 5.0);
  EXPECT_NEAR(m.loss_first, 2.3);
  cr_expect(isnan(m.avg_step_time_s), "host-timed fields stay unset: %g", m.avg_step_time_s);
  pd_trace_destroy(t);
}

Test(metrics, peak_from_total_allocated_when_reported) {
  pd_trace_t *t = pd_trace_create();
  add(t, step_range(0, 0, 100));
  add(t, mem_ev(10, 100, 5000, PD_MEM_DEVICE));
  add(t, mem_ev(20, 100, 7000, PD_MEM_DEVICE));
  add(t, mem_ev(30, -100, 6000, PD_MEM_DEVICE));
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(t, &m), 0);
  EXPECT_NEAR(m.peak_device_memory_bytes, 7000.0);
  cr_expect(isnan(m.avg_kernel_time_us), "no kernel: average unknown, got %g", m.avg_kernel_time_us);
  EXPECT_NEAR(m.kernels_per_step, 0.0);
  EXPECT_NEAR(m.gpu_busy_fraction, 0.0);
  EXPECT_NEAR(m.dropped_records, 0.0);
  pd_trace_destroy(t);
}

Test(metrics, no_memory_records_means_unknown_peak) {
  pd_trace_t *t = pd_trace_create();
  add(t, step_range(0, 0, 100));
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(t, &m), 0);
  cr_expect(isnan(m.peak_device_memory_bytes), "got %g", m.peak_device_memory_bytes);
  pd_trace_destroy(t);
}

Test(metrics, no_step_range_is_an_error) {
  pd_trace_t *t = pd_trace_create();
  add(t, mk(PD_EVENT_RANGE, 0, 100, "forward", 0)); /* step -1: not a step */
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_expect_eq(pd_metrics_from_trace(t, &m), PD_EINVAL);
  cr_expect_eq(pd_metrics_from_trace(NULL, &m), PD_EINVAL);
  cr_expect_eq(pd_metrics_from_trace(t, NULL), PD_EINVAL);
  pd_trace_destroy(t);
}

Test(metrics, sync_classification) {
  static const char *const yes[] = {
      "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
      "cudaMemcpy2D",          "cudaMemcpyFromSymbol",  "cudaMemcpy_v3020",     "cudaStreamSynchronize_ptsz",
      "cudaMemcpy_ptds",       "cuCtxSynchronize",      "cuMemcpyDtoH_v2",      "cudaDeviceSynchronize_v3020",
  };
  static const char *const no[] = {
      "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaStreamWaitEvent", "cudaLaunchKernel", "cudaEventRecord",
      "cudaMalloc",      "cudaFree",          "cudaMemcpyAsync_v3020", "cudaMemcpyX",    "", "cudaMemcpy_vx",
  };
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) cr_expect(pd_api_is_sync(yes[i]), "%s is a sync", yes[i]);
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) cr_expect(!pd_api_is_sync(no[i]), "%s is not a sync", no[i]);
  cr_expect(!pd_api_is_sync(NULL));
}

Test(metrics, alloc_classification) {
  static const char *const yes[] = {"cudaMalloc", "cudaFree", "cudaMallocPitch", "cudaMalloc3D", "cudaMalloc_v3020",
                                    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocPitch_v2"};
  static const char *const no[] = {"cudaMallocAsync", "cudaFreeAsync",   "cudaMallocHost", "cudaFreeHost",
                                   "cudaHostAlloc",   "cudaMallocManaged", "cuMemAllocHost", "cudaMemset"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    cr_expect(pd_api_is_device_alloc(yes[i]), "%s is a device allocation", yes[i]);
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    cr_expect(!pd_api_is_device_alloc(no[i]), "%s is not a device allocation", no[i]);
  cr_expect(!pd_api_is_device_alloc(NULL));
}

Test(metrics, quantiles) {
  const double xs[] = {4, 1, 3, 2, NAN};
  EXPECT_NEAR(pd_quantile(xs, 5, 0.0), 1.0);
  EXPECT_NEAR(pd_quantile(xs, 5, 1.0), 4.0);
  EXPECT_NEAR(pd_quantile(xs, 5, 0.5), 2.5);
  EXPECT_NEAR(pd_quantile(xs, 5, 0.95), 3.85);
  EXPECT_NEAR(pd_quantile(xs, 5, 2.0), 4.0); /* q clamped */
  EXPECT_NEAR(xs[0], 4.0);                   /* input untouched */
  cr_expect(isnan(pd_quantile(xs, 0, 0.5)));
  cr_expect(isnan(pd_quantile(NULL, 3, 0.5)));
  cr_expect(isnan(pd_quantile(xs, 5, NAN)));
  const double only_nan[] = {NAN, NAN};
  cr_expect(isnan(pd_quantile(only_nan, 2, 0.5)));
  const double one[] = {7};
  EXPECT_NEAR(pd_quantile(one, 1, 0.95), 7.0);
}

Test(metrics, from_samples) {
  const double steps[] = {0.010, 0.040, 0.030, 0.020};
  const double waits[] = {0.001, 0.002, 0.003, 0.004};
  pd_metrics_t m;
  pd_metrics_init(&m);
  pd_metrics_from_samples(&m, steps, waits, 4);
  EXPECT_NEAR(m.avg_step_time_s, 0.025);
  EXPECT_NEAR(m.p50_step_time_s, 0.025);
  EXPECT_NEAR(m.p95_step_time_s, 0.0385);
  EXPECT_NEAR(m.avg_dataloader_wait_s, 0.0025);
  EXPECT_NEAR(m.dataloader_wait_fraction, 0.01 / 0.11);
  cr_expect(isnan(m.kernels_per_step), "trace-side fields stay unset");

  pd_metrics_from_samples(&m, steps, NULL, 4);
  EXPECT_NEAR(m.avg_step_time_s, 0.025);
  cr_expect(isnan(m.avg_dataloader_wait_s) && isnan(m.dataloader_wait_fraction));
  pd_metrics_from_samples(&m, steps, waits, 0);
  cr_expect(isnan(m.avg_step_time_s) && isnan(m.p95_step_time_s));
  pd_metrics_from_samples(NULL, steps, waits, 4); /* no crash */
}

Test(metrics, descriptor_table) {
  size_t n = 0;
  const pd_metric_desc_t *d = pd_metric_descs(&n);
  cr_assert_eq(n, 57, "PD_METRICS_MAP has %zu entries", n);
  cr_expect_str_eq(d[0].name, "avg_step_time_s");
  const pd_metric_desc_t *k = pd_metric_find("kernels_per_step");
  cr_assert_not_null(k);
  cr_expect_eq(k->kind, PD_METRIC_COUNT);
  cr_expect_eq(k->offset, offsetof(pd_metrics_t, kernels_per_step));
  cr_expect_eq(pd_metric_find("gpu_busy_fraction")->kind, PD_METRIC_RATIO);
  cr_expect_eq(pd_metric_find("loss_last")->kind, PD_METRIC_INFO);
  /* classes: where a value is stable decides how the gate judges it */
  cr_expect_eq(pd_metric_find("gpu_kernel_time_per_step_us")->cls, PD_METRIC_CLASS_DEVICE);
  cr_expect_eq(pd_metric_find("gpu_memcpy_time_per_step_us")->cls, PD_METRIC_CLASS_DEVICE);
  cr_expect_eq(pd_metric_find("kernels_per_step")->cls, PD_METRIC_CLASS_COUNT);
  cr_expect_eq(pd_metric_find("p50_step_time_s")->cls, PD_METRIC_CLASS_HOST);
  cr_expect_eq(pd_metric_find("sync_time_per_step_us")->cls, PD_METRIC_CLASS_HOST);
  cr_expect_eq(pd_metric_find("loss_first")->cls, PD_METRIC_CLASS_INFO);
  cr_expect_str_eq(pd_metric_class_name(PD_METRIC_CLASS_DEVICE), "device");
  cr_expect_str_eq(pd_metric_class_name(PD_METRIC_CLASS_HOST), "host");
  cr_expect_str_eq(pd_metric_class_name((pd_metric_class_t)99), "?");
  for (size_t i = 0; i < n; i++) /* a COUNT-kind metric is in the count class and back */
    cr_expect_eq(d[i].kind == PD_METRIC_COUNT, d[i].cls == PD_METRIC_CLASS_COUNT, "%s", d[i].name);
  cr_expect_null(pd_metric_find("nope"));
  cr_expect_null(pd_metric_find(NULL));
  pd_metrics_t m;
  pd_metrics_init(&m);
  for (size_t i = 0; i < n; i++)
    cr_expect(isnan(*(const double *)((const char *)&m + d[i].offset)), "%s not NaN after init", d[i].name);
  cr_expect_eq(m.steps, 0);
}
