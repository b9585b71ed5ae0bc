/* test_prof_cost.c: the profiler's account of its own cost without a GPU: what a cycle's
 * events count as, the estimate from a calibration, its JSON form in the metrics JSON
 * ("profiler_cost") and in the trace ("profilerCost"), and the unknown cases. */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_writers.h"
#include "pd_test_util.h"

static char tmpdir[256];
static void make_tmpdir(void) { pd_test_tmpdir_make(tmpdir, sizeof tmpdir, "pd_prof_cost_test"); }
static void remove_tmpdir(void) { pd_test_tmpdir_remove(tmpdir); }
TestSuite(prof_cost, .init = make_tmpdir, .fini = remove_tmpdir);

static void add(pd_trace_t *t, pd_event_kind_t kind, int64_t step) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.name = kind == PD_EVENT_RANGE ? (step >= 0 ? "ProfilerStep#0" : "conv") : "x";
  e.start_ns = 10, e.end_ns = 20;
  if (kind == PD_EVENT_RANGE) e.u.range.step = step;
  cr_assert_eq(pd_trace_add(t, &e), 0);
}

/* Two steps; per step: 3 kernels, 1 copy, 4 runtime calls, 1 driver launch, 1 sync, 2
 * ranges besides the step range; plus one memory record and one overhead record. */
static pd_trace_t *cycle(void) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  for (int s = 0; s < 2; s++) {
    add(t, PD_EVENT_RANGE, s);
    for (int i = 0; i < 3; i++) add(t, PD_EVENT_KERNEL, -1);
    add(t, PD_EVENT_MEMCPY, -1);
    for (int i = 0; i < 4; i++) add(t, PD_EVENT_RUNTIME, -1);
    add(t, PD_EVENT_DRIVER, -1);
    add(t, PD_EVENT_SYNC, -1);
    add(t, PD_EVENT_RANGE, -1);
    add(t, PD_EVENT_RANGE, -1);
  }
  add(t, PD_EVENT_MEMORY, -1);
  add(t, PD_EVENT_OVERHEAD, -1);
  add(t, PD_EVENT_GPU_RANGE, -1); /* derived by the writer, never recorded: not counted */
  return t;
}

Test(prof_cost, counts_each_kind_once) {
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  cr_expect_eq(c.calib_ns_per_call, -1.0);
  cr_expect_eq(c.est_added_us_per_step, -1.0);
  pd_trace_t *t = cycle();
  pd_prof_cost_count(&c, t);
  cr_expect_eq(c.steps, 2);
  cr_expect_eq(c.gpu_activities, 8);
  cr_expect_eq(c.api_calls, 10);
  cr_expect_eq(c.host_ranges, 6);
  cr_expect_eq(c.records, 8 + 10 + 2 + 2, "kernels+copies, API calls, syncs, memory+overhead: %lld",
               (long long)c.records);
  /* Counting adds: a second cycle doubles everything. */
  pd_prof_cost_count(&c, t);
  cr_expect_eq(c.steps, 4);
  cr_expect_eq(c.records, 44);
  pd_prof_cost_count(&c, NULL);
  pd_prof_cost_count(NULL, t);
  cr_expect_eq(c.records, 44);
  pd_trace_destroy(t);
}

Test(prof_cost, estimate_from_calibration) {
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  pd_trace_t *t = cycle();
  pd_prof_cost_count(&c, t);
  pd_trace_destroy(t);
  pd_prof_cost_estimate(&c);
  cr_expect_eq(c.est_added_us_per_step, -1.0, "not calibrated: unknown");
  c.calib_ns_per_call = 1500.0;
  c.calib_ns_per_range = 100.0;
  pd_prof_cost_estimate(&c);
  /* (10 calls x 1500 ns + 6 ranges x 100 ns) / 2 steps = 7800 ns = 7.8 us */
  cr_expect_float_eq(c.est_added_us_per_step, 7.8, 1e-9, "got %.6f", c.est_added_us_per_step);
  c.calib_ns_per_range = -1.0;
  pd_prof_cost_estimate(&c);
  cr_expect_eq(c.est_added_us_per_step, -1.0, "half a calibration is none");
  c.calib_ns_per_range = 0.0;
  c.steps = 0;
  pd_prof_cost_estimate(&c);
  cr_expect_eq(c.est_added_us_per_step, -1.0, "no recorded step: unknown, not a division by zero");
  c.steps = 2;
  c.calib_ns_per_call = NAN;
  pd_prof_cost_estimate(&c);
  cr_expect_eq(c.est_added_us_per_step, -1.0, "a NaN calibration is none");
}

/* The window's candidate cost per call (recorded, not used): the calibration's (1.5 us)
 * moved by how much longer the window's traced launches took than the calibration's, as
 * CUPTI recorded both: the median of each cycle (three launches of 4, 6 and 9 us: 6 us),
 * averaged over cycles, against the calibration's 5 us: 2.5 us a call. The estimate keeps
 * the calibration's. Without the calibration's launch records, or with no launch recorded in
 * the window, unknown. */
static void add_launch(pd_trace_t *t, double us) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = PD_EVENT_RUNTIME;
  e.name = "cudaLaunchKernel";
  e.start_ns = 100, e.end_ns = 100 + (int64_t)(us * 1000);
  cr_assert_eq(pd_trace_add(t, &e), 0);
}

Test(prof_cost, window_call_cost_is_recorded_not_used) {
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  cr_expect_eq(pd_prof_cost_window_call_ns(&c), -1.0, "nothing known");
  pd_trace_t *t = cycle(); /* its 4 runtime calls a step are named "x": no launch */
  pd_prof_cost_count(&c, t);
  cr_expect_eq(c.win_cycles, 0);
  add_launch(t, 4.0), add_launch(t, 9.0), add_launch(t, 6.0);
  pd_prof_cost_t d;
  pd_prof_cost_init(&d);
  pd_prof_cost_count(&d, t);
  pd_prof_cost_count(&d, t); /* two cycles alike */
  pd_trace_destroy(t);
  cr_expect_eq(d.win_cycles, 2);
  cr_expect_float_eq(d.win_ns_per_launch_sum, 12000.0, 1e-6);
  d.calib_ns_per_call = 1500.0, d.calib_ns_per_range = 100.0;
  cr_expect_eq(pd_prof_cost_window_call_ns(&d), -1.0, "no calibration launch records: unknown");
  d.calib_ns_launch_record = 5000.0;
  cr_expect_float_eq(pd_prof_cost_window_call_ns(&d), 2500.0, 1e-9);
  pd_prof_cost_estimate(&d);
  /* the estimate keeps the calibration: two cycles of 13 calls (10 + the 3 launches) and 6
   * ranges, (26 x 1500 ns + 12 x 100 ns) / 4 steps = 10.05 us */
  cr_expect_float_eq(d.est_added_us_per_step, 10.05, 1e-9, "got %.6f", d.est_added_us_per_step);
  d.calib_ns_launch_record = 9000.0; /* the window 3 us faster than the calibration's: 0, not -1.5 */
  cr_expect_eq(pd_prof_cost_window_call_ns(&d), 0.0);
  d.calib_ns_launch_record = 5000.0;
  cJSON *j = pd_prof_cost_to_json(&d, 0.001);
  cr_assert_not_null(j);
  const cJSON *cal = cJSON_GetObjectItem(j, "calibration");
  cr_expect_float_eq(cJSON_GetObjectItem(cal, "ns_per_launch_window")->valuedouble, 6000.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItem(cal, "ns_per_launch_record")->valuedouble, 5000.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItem(cal, "ns_per_cuda_call_window")->valuedouble, 2500.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItem(cal, "ns_per_cuda_call")->valuedouble, 1500.0, 1e-9);
  cJSON_Delete(j);
}

/* The calibration run again at cycle ends: the mean over the cycles it ran in, in the
 * JSON beside the start's; unknown (null, -1) where it never ran. */
Test(prof_cost, end_calibration_is_the_mean_over_cycles) {
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  double call = 0.0, range = 0.0, untraced = 0.0;
  cr_expect_not(pd_prof_cost_end_calibration(&c, &call, &range, &untraced));
  cr_expect_eq(call, -1.0);
  cr_expect_eq(range, -1.0);
  cr_expect_eq(untraced, -1.0);
  cr_expect_not(pd_prof_cost_end_calibration(NULL, &call, NULL, NULL));
  cJSON *j = pd_prof_cost_to_json(&c, 0.001);
  cr_assert_not_null(j);
  const cJSON *cal = cJSON_GetObjectItem(j, "calibration");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cal, "ns_per_cuda_call_end")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cal, "ns_per_host_range_end")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cal, "ns_per_launch_untraced_end")));
  untraced = 0.0;
  cr_expect_not(pd_prof_cost_end_calibration(NULL, NULL, NULL, &untraced));
  cr_expect_eq(untraced, -1.0);
  cJSON_Delete(j);
  c.end_ns_per_call_sum = 1800.0 + 2600.0, c.end_ns_per_range_sum = 90.0 + 130.0, c.end_cycles = 2;
  c.end_ns_launch_untraced_sum = 4100.0 + 4500.0;
  c.calibrate_ms = 41.25;
  cr_expect(pd_prof_cost_end_calibration(&c, &call, &range, &untraced));
  cr_expect_float_eq(call, 2200.0, 1e-9);
  cr_expect_float_eq(range, 110.0, 1e-9);
  cr_expect_float_eq(untraced, 4300.0, 1e-9);
  j = pd_prof_cost_to_json(&c, 0.001);
  cr_assert_not_null(j);
  cal = cJSON_GetObjectItem(j, "calibration");
  cr_expect_float_eq(cJSON_GetObjectItem(cal, "ns_per_cuda_call_end")->valuedouble, 2200.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItem(cal, "ns_per_host_range_end")->valuedouble, 110.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItem(cal, "ns_per_launch_untraced_end")->valuedouble, 4300.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItem(j, "calibrate_ms")->valuedouble, 41.25, 1e-9);
  cJSON_Delete(j);
}

/* The added time measured in the process: median recorded period minus median untraced
 * period; NaN (null in the JSON) with fewer than 3 of either or a period out of range. */
Test(prof_cost, measured_added_time_is_the_difference_of_medians) {
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  cr_expect(isnan(c.measured_added_us_per_step), "not measured after init");
  const double untraced[] = {0.0010, 0.0011, 0.0050, 0.0012}; /* median 1.15 ms: the outlier does not move it */
  const double traced[] = {0.0014, 0.0013, 0.0015};            /* median 1.4 ms */
  pd_prof_cost_measure(&c, untraced, 4, traced, 3);
  cr_expect_float_eq(c.measured_added_us_per_step, 250.0, 1e-6, "got %f", c.measured_added_us_per_step);
  cr_expect_eq(c.measured_untraced_steps, 4);
  cr_expect_eq(c.measured_traced_steps, 3);
  cJSON *j = pd_prof_cost_to_json(&c, 0.0014);
  cr_assert_not_null(j);
  cr_expect_float_eq(cJSON_GetObjectItem(j, "measured_added_us_per_step")->valuedouble, 250.0, 1e-6);
  cr_expect_eq(cJSON_GetObjectItem(j, "measured_traced_steps")->valuedouble, 3.0);
  cJSON_Delete(j);
  pd_prof_cost_measure(&c, traced, 3, untraced, 4); /* faster when traced: negative, kept */
  cr_expect_float_eq(c.measured_added_us_per_step, -250.0, 1e-6);
  pd_prof_cost_measure(&c, untraced, 2, traced, 3);
  cr_expect(isnan(c.measured_added_us_per_step), "two untraced periods are too few");
  cr_expect_eq(c.measured_untraced_steps, 0);
  const double bad[] = {0.001, -0.001, 0.001};
  pd_prof_cost_measure(&c, bad, 3, traced, 3);
  cr_expect(isnan(c.measured_added_us_per_step), "a negative period");
  const double huge[] = {0.001, 1e5, 0.001};
  pd_prof_cost_measure(&c, untraced, 4, huge, 3);
  cr_expect(isnan(c.measured_added_us_per_step), "a period over 1e4 s");
  pd_prof_cost_measure(&c, NULL, 3, traced, 3);
  cr_expect(isnan(c.measured_added_us_per_step));
  j = pd_prof_cost_to_json(&c, 0.0014);
  cr_assert_not_null(j);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "measured_added_us_per_step")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "measured_traced_steps")));
  cJSON_Delete(j);
  pd_prof_cost_measure(NULL, untraced, 4, traced, 3); /* no crash */
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  cr_assert(cJSON_IsNumber(v), "\"%s\" missing or not a number", k);
  return v->valuedouble;
}

Test(prof_cost, json_known_and_unknown) {
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  c.cycles = 1, c.steps = 4, c.records = 1000, c.api_calls = 500, c.gpu_activities = 450, c.host_ranges = 40;
  c.buffers = 2, c.buffer_bytes = 8 << 20, c.flush_ms = 1.25, c.parse_ms = 3.5, c.enable_ms = 6.0;
  c.calib_ns_per_call = 2000.0, c.calib_ns_per_range = 150.0;
  pd_prof_cost_estimate(&c);
  cJSON *o = pd_prof_cost_to_json(&c, 0.002); /* a 2 ms step */
  cr_assert_not_null(o);
  cr_expect_float_eq(num(o, "est_added_us_per_step"), 251.5, 1e-9); /* (500x2000 + 40x150)/4 ns */
  cr_expect_float_eq(num(o, "est_added_fraction_of_step"), 0.1258, 1e-9);
  cr_expect_eq(num(o, "records_per_step"), 250.0);
  cr_expect_eq(num(o, "buffers"), 2.0);
  cr_expect_eq(num(o, "buffer_bytes"), 8388608.0);
  cr_expect_eq(num(o, "flush_ms"), 1.25);
  const cJSON *cal = cJSON_GetObjectItemCaseSensitive(o, "calibration");
  cr_expect_eq(num(cal, "ns_per_cuda_call"), 2000.0);
  cr_expect_eq(num(cal, "ns_per_host_range"), 150.0);
  cJSON_Delete(o);

  pd_prof_cost_t u;
  pd_prof_cost_init(&u);
  o = pd_prof_cost_to_json(&u, 0.0);
  cr_assert_not_null(o);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "est_added_us_per_step")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "est_added_fraction_of_step")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "records_per_step")), "no step: null");
  cal = cJSON_GetObjectItemCaseSensitive(o, "calibration");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_cuda_call")));
  cJSON_Delete(o);
  cr_expect_null(pd_prof_cost_to_json(NULL, 1.0));
}

/* A calibration whose traced phase read less than the untraced one for a call (noise, one
 * process of a fresh H200 recording): that figure is unknown, and the estimate with it, but
 * the other figures, the untraced launch (the A/B's covariate) among them, are still written. */
Test(prof_cost, a_negative_figure_leaves_the_others_known) {
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  c.cycles = 1, c.steps = 4, c.api_calls = 500, c.host_ranges = 40;
  c.calib_ns_per_call = -120.0, c.calib_ns_per_range = 150.0;
  c.calib_ns_launch_untraced = 4300.0, c.calib_ns_launch_traced = 4180.0, c.calib_ns_launch_record = 5100.0;
  pd_prof_cost_estimate(&c);
  cJSON *o = pd_prof_cost_to_json(&c, 0.002);
  cr_assert_not_null(o);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "est_added_us_per_step")));
  const cJSON *cal = cJSON_GetObjectItemCaseSensitive(o, "calibration");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_cuda_call")));
  cr_expect_eq(num(cal, "ns_per_host_range"), 150.0);
  cr_expect_eq(num(cal, "ns_per_launch_untraced"), 4300.0);
  cr_expect_eq(num(cal, "ns_per_launch_traced"), 4180.0);
  cr_expect_eq(num(cal, "ns_per_launch_record"), 5100.0);
  /* the cold launches were not measured: null, not -1 */
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_launch_cold_untraced")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_launch_cold_traced")));
  cJSON_Delete(o);
  c.calib_ns_launch_cold_untraced = 6100.04, c.calib_ns_launch_cold_traced = 9800.0;
  o = pd_prof_cost_to_json(&c, 0.002);
  cal = cJSON_GetObjectItemCaseSensitive(o, "calibration");
  cr_expect_eq(num(cal, "ns_per_launch_cold_untraced"), 6100.0);
  cr_expect_eq(num(cal, "ns_per_launch_cold_traced"), 9800.0);
  cJSON_Delete(o);
  c.calib_ns_per_call = 2000.0, c.calib_ns_per_range = -3.0;
  o = pd_prof_cost_to_json(&c, 0.002);
  cal = cJSON_GetObjectItemCaseSensitive(o, "calibration");
  cr_expect_eq(num(cal, "ns_per_cuda_call"), 2000.0);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_host_range")));
  cr_expect_eq(num(cal, "ns_per_launch_untraced"), 4300.0);
  cJSON_Delete(o);
}

Test(prof_cost, trace_carries_profiler_cost) {
  pd_trace_t *t = cycle();
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  pd_prof_cost_count(&c, t);
  c.calib_ns_per_call = 1000.0, c.calib_ns_per_range = 0.0;
  pd_prof_cost_estimate(&c);
  char path[512];
  snprintf(path, sizeof path, "%s/t.pt.trace.json", tmpdir);
  pd_trace_meta_t meta = {.pid = 1, .cost = &c};
  cr_assert_eq(pd_trace_write_file(path, t, &meta), 0);
  cJSON *j = pd_test_read_json(path);
  const cJSON *pc = cJSON_GetObjectItemCaseSensitive(j, "profilerCost");
  cr_assert(cJSON_IsObject(pc), "no profilerCost object");
  cr_expect_float_eq(num(pc, "est_added_us_per_step"), 5.0, 1e-9); /* 10 calls x 1 us / 2 steps */
  cr_expect_eq(num(pc, "records"), 22.0);
  cr_expect(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "traceEvents")), "the events still follow");
  cJSON_Delete(j);
  /* Without a cost the key is left out. */
  meta.cost = NULL;
  cr_assert_eq(pd_trace_write_file(path, t, &meta), 0);
  j = pd_test_read_json(path);
  cr_expect_null(cJSON_GetObjectItemCaseSensitive(j, "profilerCost"));
  cJSON_Delete(j);
  pd_trace_destroy(t);
}

/* Per kind of call: the launches (runtime cudaLaunch*, driver cuLaunch* and cuGraphLaunch)
 * at the launch calibration, every other recorded call at the recorded-call calibration,
 * and the census's unrecorded calls per step at theirs; without a recorded-call
 * calibration the launch's stands in, without the unrecorded ones they are left out. */
static void add_call(pd_trace_t *t, pd_event_kind_t kind, const char *name) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.name = name;
  e.start_ns = 10, e.end_ns = 20;
  cr_assert_eq(pd_trace_add(t, &e), 0);
}

Test(prof_cost, estimate_per_kind_of_call) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  add(t, PD_EVENT_RANGE, 0);
  add_call(t, PD_EVENT_RUNTIME, "cudaLaunchKernel");
  add_call(t, PD_EVENT_RUNTIME, "cudaLaunchKernelExC");
  add_call(t, PD_EVENT_DRIVER, "cuLaunchKernel");
  add_call(t, PD_EVENT_DRIVER, "cuGraphLaunch");
  add_call(t, PD_EVENT_RUNTIME, "cudaMemcpyAsync");
  add_call(t, PD_EVENT_RUNTIME, "cudaGetErrorString");
  add_call(t, PD_EVENT_DRIVER, "cuCtxGetCurrent");
  add_call(t, PD_EVENT_RUNTIME, NULL); /* no name: not a launch */
  add_call(t, PD_EVENT_RUNTIME, "cudaLaunchHostFunc"); /* runs no kernel */
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  pd_prof_cost_count(&c, t);
  pd_trace_destroy(t);
  cr_expect_eq(c.api_calls, 9);
  cr_expect_eq(c.launch_calls, 4);
  c.calib_ns_per_call = 3000.0, c.calib_ns_per_range = 0.0;
  pd_prof_cost_estimate(&c);
  cr_expect_float_eq(c.est_added_us_per_step, 27.0, 1e-9, "9 calls at the launch's 3 us: %.4f", c.est_added_us_per_step);
  c.calib_ns_per_recorded_call = 500.0;
  pd_prof_cost_estimate(&c);
  cr_expect_float_eq(c.est_added_us_per_step, 14.5, 1e-9, "4 x 3 us + 5 x 0.5 us: %.4f", c.est_added_us_per_step);
  c.census_steps = 2, c.census_runtime_unrecorded = 2000, c.census_driver_unrecorded = 600;
  pd_prof_cost_estimate(&c);
  cr_expect_float_eq(c.est_added_us_per_step, 14.5, 1e-9, "unrecorded calls not calibrated: left out");
  c.calib_ns_per_unrecorded_runtime = 200.0, c.calib_ns_per_unrecorded_driver = 50.0;
  pd_prof_cost_estimate(&c);
  /* + (1000 x 0.2 us + 300 x 0.05 us) a step */
  cr_expect_float_eq(c.est_added_us_per_step, 14.5 + 200.0 + 15.0, 1e-9, "got %.4f", c.est_added_us_per_step);
  c.census_steps = 0;
  pd_prof_cost_estimate(&c);
  cr_expect_float_eq(c.est_added_us_per_step, 14.5, 1e-9, "no census: the recorded calls only");
  cJSON *j = pd_prof_cost_to_json(&c, 0.001);
  cr_assert_not_null(j);
  const cJSON *cal = cJSON_GetObjectItemCaseSensitive(j, "calibration");
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_recorded_call")->valuedouble, 500.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_unrecorded_runtime_call")->valuedouble, 200.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_unrecorded_driver_call")->valuedouble, 50.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(j, "launch_calls")->valuedouble, 4.0, 1e-9);
  cJSON_Delete(j);
  pd_prof_cost_init(&c);
  j = pd_prof_cost_to_json(&c, 0.001);
  cr_assert_not_null(j);
  cal = cJSON_GetObjectItemCaseSensitive(j, "calibration");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_recorded_call")), "not calibrated: null");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cal, "ns_per_unrecorded_runtime_call")));
  cJSON_Delete(j);
}
