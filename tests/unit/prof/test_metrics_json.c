/* test_metrics_json.c: the metrics JSON (schema PD_METRICS_SCHEMA_VERSION) read back with cJSON: every key of
 * DESIGN.md section 5, NaN as null, dropped records carried from the trace, top ops,
 * atomic writing and failure without leftovers. */
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_* */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd/pd_common.h"
#include "pd/pd_host_calib.h"
#include "pd/pd_writers.h"
#include "pd/pd_replay.h"
#include "pd_test_util.h"

static char tmpdir[256];

static void make_tmpdir(void) { pd_test_tmpdir_make(tmpdir, sizeof tmpdir, "pd_metrics_json_test"); }
static void remove_tmpdir(void) { pd_test_tmpdir_remove(tmpdir); }

static double num(const cJSON *obj, const char *key) {
  cJSON *v = cJSON_GetObjectItem(obj, key);
  cr_assert(cJSON_IsNumber(v), "\"%s\" missing or not a number", key);
  return v->valuedouble;
}

static const char *str(const cJSON *obj, const char *key) {
  cJSON *v = cJSON_GetObjectItem(obj, key);
  cr_assert(cJSON_IsString(v), "\"%s\" missing or not a string", key);
  return v->valuestring;
}

TestSuite(metrics_json, .init = make_tmpdir, .fini = remove_tmpdir);

/* A small trace with two steps, one kernel in range "conv", 42 dropped records. */
static pd_trace_t *small_trace(void) {
  pd_trace_t *t = pd_trace_create();
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = PD_EVENT_RANGE;
  e.name = "ProfilerStep#1";
  e.start_ns = 0, e.end_ns = 1000, e.u.range.step = 1;
  pd_trace_add(t, &e);
  e.name = "ProfilerStep#2";
  e.start_ns = 1000, e.end_ns = 2000, e.u.range.step = 2;
  pd_trace_add(t, &e);
  e.name = "conv";
  e.start_ns = 100, e.end_ns = 400, e.u.range.step = -1, e.u.range.shape = "[[64, 3, 32, 32]]";
  pd_trace_add(t, &e);
  memset(&e, 0, sizeof e);
  e.kind = PD_EVENT_RUNTIME;
  e.name = "cudaLaunchKernel";
  e.start_ns = 150, e.end_ns = 160, e.correlation_id = 1;
  pd_trace_add(t, &e);
  memset(&e, 0, sizeof e);
  e.kind = PD_EVENT_KERNEL;
  e.name = "conv_kernel";
  e.start_ns = 200, e.end_ns = 700, e.correlation_id = 1;
  pd_trace_add(t, &e);
  pd_trace_set_dropped(t, 42);
  return t;
}

Test(metrics_json, round_trip) {
  pd_trace_t *t = small_trace();
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(t, &m), 0);
  const double steps[] = {0.004, 0.005};
  const double waits[] = {0.001, NAN};
  pd_metrics_from_samples(&m, steps, waits, 2);
  m.loss_first = 2.302585;
  /* loss_last stays NaN: not measured */
  pd_verdict_t v;
  pd_diagnose(&m, PD_ADVICE_DEMO, &v);
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE_AND_SHAPE);
  pd_op_table_add_trace(tab, t);
  pd_op_table_sort(tab, PD_SORT_SELF_CUDA_TIME_TOTAL);
  pd_device_info_t dev = {.name = "NVIDIA H100 80GB HBM3", .compute_major = 9, .compute_minor = 0,
                          .sm_count = 132, .total_global_mem = 84929216512ULL, .driver_version = 13000,
                          .runtime_version = 13000, .cupti_version = 130001};
  const pd_cfg_entry_t cfg[] = {
      {.key = "scenario", .type = PD_CFG_STRING, .s = "dataloader"},
      {.key = "batch_size", .type = PD_CFG_INT, .i = 64},
      {.key = "pin_memory", .type = PD_CFG_BOOL, .b = true},
      {.key = "lr", .type = PD_CFG_DOUBLE, .d = 1e-3},
      {.key = "trace_dir", .type = PD_CFG_STRING, .s = NULL},
  };
  const char *files[] = {"results/traces/host_1.123.pt.trace.json"};
  pd_op_table_t *kern = pd_op_table_create(PD_GROUP_BY_KERNEL);
  pd_op_table_add_trace(kern, t);
  pd_op_table_sort(kern, PD_SORT_SELF_CUDA_TIME_TOTAL);
  pd_host_info_t host = {.name = "runner-7", .boot_id = "0f6c2a1e-boot", .cpu = "Some CPU", .cpus = 16};
  pd_run_report_t r = {.config = cfg, .nconfig = 5, .device = &dev, .metrics = &m, .step_times_s = steps,
                       .dataloader_wait_s = waits, .nsteps = 2, .verdict = &v, .top_ops = tab,
                       .top_ops_limit = 10, .trace_files = files, .ntrace_files = 1,
                       .top_kernels = kern, .host = &host};
  const double warm_periods[3] = {0.0041, 0.0042, 0.0043}, warm_steps[3] = {0.0031, 0.0032, 0.0033};
  r.warmup_periods_s = warm_periods;
  r.warmup_step_times_s = warm_steps;
  const double probe_launch[3] = {2100.5, 2200.25, 2900.0}, probe_compute[3] = {13000, 13100, 17500};
  r.warmup_probe_launch_ns = probe_launch;
  r.warmup_probe_compute_ns = probe_compute;
  r.nwarmup = 3;
  char path[512];
  snprintf(path, sizeof path, "%s/metrics.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);

  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp, "temp file left behind");

  cJSON *j = pd_test_read_json(path);
  cr_expect_eq(num(j, "schema_version"), 3);
  cJSON *tool = cJSON_GetObjectItem(j, "tool");
  cr_expect_str_eq(str(tool, "name"), "profiler_demo");
  cr_expect_str_eq(str(tool, "version"), PD_VERSION_STRING);

  cJSON *c = cJSON_GetObjectItem(j, "config");
  cr_expect_str_eq(str(c, "scenario"), "dataloader");
  cr_expect_eq(num(c, "batch_size"), 64);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(c, "pin_memory")));
  cr_expect_eq(num(c, "lr"), 1e-3);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(c, "trace_dir")));

  cJSON *d = cJSON_GetObjectItem(j, "device");
  cr_expect_str_eq(str(d, "name"), "NVIDIA H100 80GB HBM3");
  cr_expect_str_eq(str(d, "compute_capability"), "9.0");
  cr_expect_eq(num(d, "sm_count"), 132);
  cr_expect_eq(num(d, "total_global_mem"), 84929216512.0);
  cr_expect_eq(num(d, "driver"), 13000);
  cr_expect_eq(num(d, "runtime"), 13000);
  cr_expect_eq(num(d, "cupti"), 130001);

  /* every metric of PD_METRICS_MAP is there, as a number or null */
  cJSON *mj = cJSON_GetObjectItem(j, "metrics");
  size_t nd;
  const pd_metric_desc_t *descs = pd_metric_descs(&nd);
  cr_expect_eq((size_t)cJSON_GetArraySize(mj), nd);
  for (size_t i = 0; i < nd; i++) {
    cJSON *x = cJSON_GetObjectItem(mj, descs[i].name);
    cr_assert_not_null(x, "metric %s missing", descs[i].name);
    double want = *(const double *)((const char *)&m + descs[i].offset);
    if (isnan(want)) cr_expect(cJSON_IsNull(x), "%s is NaN: must be null", descs[i].name);
    else cr_expect(cJSON_IsNumber(x) && x->valuedouble == want, "%s: got %.17g, want %.17g", descs[i].name,
                   x->valuedouble, want);
  }
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(mj, "loss_last")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(mj, "avg_dataloader_wait_s")), "a NaN sample makes the mean NaN");
  cr_expect_eq(num(mj, "dropped_records"), 42, "dropped records reach the JSON");
  cr_expect_eq(num(mj, "kernels_per_step"), 0.5);
  cr_expect_eq(num(mj, "loss_first"), 2.302585);
  cr_expect_eq(num(j, "steps"), 2);

  cJSON *st = cJSON_GetObjectItem(j, "step_times_s"), *dw = cJSON_GetObjectItem(j, "dataloader_wait_s");
  cr_expect(cJSON_GetArraySize(st) == 2 && cJSON_GetArrayItem(st, 1)->valuedouble == 0.005);
  cr_expect(cJSON_GetArraySize(dw) == 2 && cJSON_IsNull(cJSON_GetArrayItem(dw, 1)));
  cJSON *wp = cJSON_GetObjectItem(j, "warmup_periods_s"), *ws = cJSON_GetObjectItem(j, "warmup_step_times_s");
  cr_expect(cJSON_GetArraySize(wp) == 3 && cJSON_GetArrayItem(wp, 2)->valuedouble == 0.0043);
  cr_expect(cJSON_GetArraySize(ws) == 3 && cJSON_GetArrayItem(ws, 0)->valuedouble == 0.0031);
  cJSON *pl = cJSON_GetObjectItem(j, "warmup_probe_launch_ns"), *pc = cJSON_GetObjectItem(j, "warmup_probe_compute_ns");
  cr_expect(cJSON_GetArraySize(pl) == 3 && cJSON_GetArrayItem(pl, 1)->valuedouble == 2200.25, "--warmup_probe's launches");
  cr_expect(cJSON_GetArraySize(pc) == 3 && cJSON_GetArrayItem(pc, 2)->valuedouble == 17500, "--warmup_probe's compute");

  cJSON *vj = cJSON_GetObjectItem(j, "verdict");
  cr_expect_str_eq(str(vj, "bottleneck"), pd_bottleneck_name(v.bottleneck));
  cr_expect_str_eq(str(vj, "rule"), v.rule);
  cr_expect_str_eq(str(vj, "evidence"), v.evidence);

  cJSON *ops = cJSON_GetObjectItem(j, "top_ops");
  cr_assert_eq(cJSON_GetArraySize(ops), 3, "ProfilerStep*, conv, cudaLaunchKernel: %d", cJSON_GetArraySize(ops));
  cJSON *op0 = cJSON_GetArrayItem(ops, 0);
  cr_expect_str_eq(str(op0, "name"), "conv");
  cr_expect_str_eq(str(op0, "shape"), "[[64, 3, 32, 32]]");
  cr_expect_eq(num(op0, "calls"), 1);
  cr_expect_eq(num(op0, "self_cuda_time_us"), 0.5);
  cr_expect_eq(num(op0, "cuda_time_us"), 0.5);
  cr_expect_eq(num(op0, "self_cpu_time_us"), 0.29);
  cr_expect_eq(num(op0, "cpu_time_us"), 0.3);
  cJSON *op;
  cJSON_ArrayForEach(op, ops) {
    if (strcmp(str(op, "name"), "cudaLaunchKernel") == 0)
      cr_expect_null(cJSON_GetObjectItem(op, "shape"), "no shape key for rows without a shape");
  }
  /* every kernel row, with the op rows' fields; the host that made the run */
  cJSON *kj = cJSON_GetObjectItem(j, "top_kernels");
  cr_assert_eq((size_t)cJSON_GetArraySize(kj), pd_op_table_count(kern));
  cr_assert_gt(cJSON_GetArraySize(kj), 0);
  cJSON *k0 = cJSON_GetArrayItem(kj, 0);
  cr_expect_str_eq(str(k0, "name"), pd_op_table_rows(kern)[0].name);
  cr_expect_eq(num(k0, "calls"), (double)pd_op_table_rows(kern)[0].calls);
  cr_expect_eq(num(k0, "self_cuda_time_us"), (double)pd_op_table_rows(kern)[0].self_cuda_ns / 1e3);
  cJSON *hj = cJSON_GetObjectItem(j, "host");
  cr_expect_str_eq(str(hj, "name"), "runner-7");
  cr_expect_str_eq(str(hj, "boot_id"), "0f6c2a1e-boot");
  cr_expect_str_eq(str(hj, "cpu"), "Some CPU");
  cr_expect_eq(num(hj, "cpus"), 16);
  cJSON *tf = cJSON_GetObjectItem(j, "trace_files");
  cr_expect(cJSON_GetArraySize(tf) == 1 && strcmp(cJSON_GetArrayItem(tf, 0)->valuestring, files[0]) == 0);
  cJSON_Delete(j);

  /* top_ops_limit cuts the list */
  r.top_ops_limit = 1;
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  j = pd_test_read_json(path);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "top_ops")), 1);
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(j, "top_ops_complete")), "a cut table must say so");
  cJSON_Delete(j);
  /* a limit the table fits in, or none: whole */
  r.top_ops_limit = 0;
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  j = pd_test_read_json(path);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "top_ops_complete")));
  cr_expect_eq((size_t)cJSON_GetArraySize(cJSON_GetObjectItem(j, "top_ops")), pd_op_table_count(tab));
  cJSON_Delete(j);
  pd_op_table_destroy(tab);
  pd_op_table_destroy(kern);
  pd_trace_destroy(t);
}

Test(metrics_json, host_info_reads_this_machine) {
  pd_host_info_t h;
  pd_host_info_read(&h);
  cr_expect_gt(h.cpus, 0);
  cr_expect_gt(strlen(h.name), 0, "gethostname gave nothing");
  /* Linux has a boot id: 36 characters of a UUID */
  cr_expect_eq(strlen(h.boot_id), 36, "boot_id '%s'", h.boot_id);
  pd_host_info_read(NULL); /* no crash */
  int64_t rss = -1, peak = -1;
  cr_assert_eq(pd_host_rss_kib(&rss, &peak), 0);
  cr_expect_gt(rss, 100, "a process has more than 100 KiB resident");
  cr_expect_geq(peak, rss);
  /* 64 MiB touched shows in the resident set and the peak */
  size_t n = (size_t)64 << 20;
  char *big = malloc(n);
  cr_assert_not_null(big);
  memset(big, 1, n);
  int64_t heap = pd_host_heap_in_use_kib();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  cr_expect_eq(heap, -1, "a sanitizer's allocator: glibc's heap figures do not apply, %lld KiB", (long long)heap);
#else
  cr_expect_geq(heap, 64 << 10, "the 64 MiB block is in use: %lld KiB", (long long)heap);
#endif
  int64_t rss2 = -1, peak2 = -1;
  cr_assert_eq(pd_host_rss_kib(&rss2, &peak2), 0);
  cr_expect_geq(rss2 - rss, 60 << 10, "%lld -> %lld KiB", (long long)rss, (long long)rss2);
  cr_expect_geq(peak2, rss2);
  free(big);
}

Test(metrics_json, host_memory_with_growth_and_nulls) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  pd_host_memory_t h = {.rss_start_kib = 1000, .rss_first_cycle_kib = 1500, .rss_end_kib = 1520,
                        .rss_peak_kib = 1600, .heap_start_kib = 500, .heap_first_cycle_kib = 800,
                        .heap_end_kib = -1, .steps = 10000};
  pd_run_report_t r = {.metrics = &m, .host_memory = &h};
  char path[512];
  snprintf(path, sizeof path, "%s/mem.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  cJSON *j = pd_test_read_json(path);
  const cJSON *o = cJSON_GetObjectItem(j, "host_memory");
  cr_assert(cJSON_IsObject(o));
  cr_expect_eq(num(o, "rss_start_kib"), 1000);
  cr_expect_eq(num(o, "rss_first_cycle_kib"), 1500);
  cr_expect_eq(num(o, "rss_end_kib"), 1520);
  cr_expect_eq(num(o, "rss_peak_kib"), 1600);
  cr_expect_eq(num(o, "steps"), 10000);
  cr_expect_eq(num(o, "growth_kib"), 20, "from the first cycle to the end");
  cr_expect_eq(num(o, "heap_start_kib"), 500);
  cr_expect_eq(num(o, "heap_first_cycle_kib"), 800);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "heap_end_kib")), "-1 is not measured: null");
  cJSON_Delete(j);
  /* no cycle (--no_profile): growth from the start; an unknown value is null */
  h.rss_first_cycle_kib = -1;
  h.rss_peak_kib = -1;
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  j = pd_test_read_json(path);
  o = cJSON_GetObjectItem(j, "host_memory");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "rss_first_cycle_kib")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "rss_peak_kib")));
  cr_expect_eq(num(o, "growth_kib"), 520);
  cJSON_Delete(j);
}

Test(metrics_json, minimal_report_has_every_section) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  pd_run_report_t r = {.metrics = &m};
  char path[512];
  snprintf(path, sizeof path, "%s/min.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  cJSON *j = pd_test_read_json(path);
  static const char *const keys[] = {"schema_version", "tool",  "config",  "device",  "metrics",
                                     "steps",          "step_times_s", "dataloader_wait_s", "verdict",
                                     "top_ops",        "top_kernels",  "host",       "trace_files",
                                     "profiler_cost",  "host_memory", "data_loader", "host_calibration"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    cr_expect(cJSON_HasObjectItem(j, keys[i]), "key %s missing", keys[i]);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "device")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "verdict")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "host")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "profiler_cost")), "no profiler (--no_profile): null");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "host_memory")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "data_loader")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(j, "host_calibration")));
  cr_expect(!cJSON_HasObjectItem(j, "warmup_probe_launch_ns") && !cJSON_HasObjectItem(j, "warmup_probe_compute_ns"),
            "not probed: the keys are left out");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "top_ops")), 0);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "top_kernels")), 0);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metrics"), "gpu_busy_fraction")));
  cJSON_Delete(j);
}

/* --repeat: each cycle's replay as "replay_cycles", only where there are at least two. */
Test(metrics_json, replay_cycles_only_with_several) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  pd_cycle_log_t log = {0};
  m.predicted_unprofiled_step_us = 400;
  m.replay_step_us = 500;
  m.saving_data_wait_us_per_step = 100;
  m.saving_combined_us_per_step = 120;
  m.replay_step_error_median_fraction = 0.01;
  m.replay_step_error_max_fraction = 0.02;
  cr_assert_eq(pd_cycle_log_add(&log, &m, 4), 0);
  pd_run_report_t r = {.metrics = &m, .cycles = &log};
  char path[512];
  snprintf(path, sizeof path, "%s/cycles.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  cJSON *j = pd_test_read_json(path);
  cr_expect(!cJSON_HasObjectItem(j, "replay_cycles"), "one cycle: its replay is the verdict's");
  cJSON_Delete(j);
  m.saving_data_wait_us_per_step = NAN;
  cr_assert_eq(pd_cycle_log_add(&log, &m, 6), 0);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  j = pd_test_read_json(path);
  cJSON *cy = cJSON_GetObjectItem(j, "replay_cycles");
  cr_assert_eq(cJSON_GetArraySize(cy), 2);
  cJSON *c0 = cJSON_GetArrayItem(cy, 0), *c1 = cJSON_GetArrayItem(cy, 1);
  cr_expect_eq(num(c0, "steps"), 4);
  cr_expect_eq(num(c0, "predicted_unprofiled_step_us"), 400);
  cr_expect_eq(num(c0, "replayed_step_us"), 500);
  cr_expect_eq(num(c0, "step_error_max_fraction"), 0.02);
  cJSON *s0 = cJSON_GetObjectItem(c0, "savings_us_per_step"), *s1 = cJSON_GetObjectItem(c1, "savings_us_per_step");
  cr_expect_eq(num(s0, "data_wait"), 100);
  cr_expect_eq(num(s0, "combined"), 120);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(s1, "data_wait")), "not measured in that cycle: null");
  cr_expect(!cJSON_HasObjectItem(s0, "profiler"), "the profiler is the baseline, not a fix");
  cr_expect(cJSON_HasObjectItem(s0, "host_code") && cJSON_HasObjectItem(s0, "loader_2x"), "every fix by name");
  cJSON_Delete(j);
  pd_cycle_log_free(&log);
  cr_expect_eq(log.n, 0u);
}

Test(metrics_json, failures_leave_nothing) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  pd_run_report_t r = {.metrics = &m};
  char path[512];
  snprintf(path, sizeof path, "%s/no_such_dir/m.json", tmpdir);
  cr_expect_eq(pd_metrics_json_write(path, &r), PD_ENOENT);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 0);
  /* the target is a directory: refused before anything is written */
  snprintf(path, sizeof path, "%s/adir", tmpdir);
  cr_assert_eq(mkdir(path, 0700), 0);
  cr_expect_eq(pd_metrics_json_write(path, &r), PD_ENOTREG);
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1, "only the directory is left");
  cr_expect(!has_tmp);
  rmdir(path);
  cr_expect_eq(pd_metrics_json_write(NULL, &r), PD_EINVAL);
  cr_expect_eq(pd_metrics_json_write(path, NULL), PD_EINVAL);
  r.metrics = NULL;
  cr_expect_eq(pd_metrics_json_write(path, &r), PD_EINVAL);
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 0);
}

Test(metrics_json, stopped_run_is_marked_incomplete) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  double steps[2] = {0.01, 0.02}, waits[2] = {0, 0};
  pd_run_report_t r = {.metrics = &m, .step_times_s = steps, .dataloader_wait_s = waits, .nsteps = 2,
                       .stopped_by = "SIGTERM", .steps_done = 13};
  char path[512];
  snprintf(path, sizeof path, "%s/stopped.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  char *text = pd_test_slurp(path);
  cJSON *j = cJSON_Parse(text);
  free(text);
  cr_assert_not_null(j);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(j, "incomplete")));
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "stopped_by")), "SIGTERM");
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "steps_done")), 13);
  cJSON_Delete(j);
  /* a complete run has none of these keys */
  r.stopped_by = NULL;
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  text = pd_test_slurp(path);
  j = cJSON_Parse(text);
  free(text);
  cr_expect_null(cJSON_GetObjectItem(j, "incomplete"));
  cr_expect_null(cJSON_GetObjectItem(j, "steps_done"));
  cJSON_Delete(j);
}

Test(metrics_json, profiler_cost_with_share_of_the_step) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  m.avg_step_time_s = 0.004;
  pd_prof_cost_t c;
  pd_prof_cost_init(&c);
  c.cycles = 1, c.steps = 10, c.api_calls = 2000, c.host_ranges = 100, c.records = 4200;
  c.calib_ns_per_call = 1000.0, c.calib_ns_per_range = 200.0;
  pd_prof_cost_estimate(&c); /* (2000 us + 20 us) / 10 = 202 us per step */
  pd_run_report_t r = {.metrics = &m, .cost = &c};
  char path[512];
  snprintf(path, sizeof path, "%s/cost.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  cJSON *j = pd_test_read_json(path);
  const cJSON *pc = cJSON_GetObjectItem(j, "profiler_cost");
  cr_assert(cJSON_IsObject(pc));
  cr_expect_float_eq(num(pc, "est_added_us_per_step"), 202.0, 1e-9);
  cr_expect_float_eq(num(pc, "est_added_fraction_of_step"), 0.0505, 1e-9, "202 us of a 4 ms step");
  cr_expect_float_eq(num(pc, "records_per_step"), 420.0, 1e-9);
  const cJSON *cal = cJSON_GetObjectItem(pc, "calibration");
  cr_expect_float_eq(num(cal, "ns_per_cuda_call"), 1000.0, 1e-9);
  /* the launch times the calibration is the difference of: null when not measured */
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cal, "ns_per_launch_untraced")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cal, "ns_per_launch_traced")));
  cJSON_Delete(j);
  c.calib_ns_launch_untraced = 2500.0, c.calib_ns_launch_traced = 3500.0;
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  j = pd_test_read_json(path);
  cal = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "profiler_cost"), "calibration");
  cr_expect_float_eq(num(cal, "ns_per_launch_untraced"), 2500.0, 1e-9);
  cr_expect_float_eq(num(cal, "ns_per_launch_traced"), 3500.0, 1e-9);
  cJSON_Delete(j);
}

/* "data_loader": throughput from the threads' fill time against one batch per step;
 * "host_calibration": the calibration's two samples. */
Test(metrics_json, loader_headroom_and_host_calibration) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  m.avg_step_time_s = 0.0005; /* demand: 2000 steps/s */
  pd_loader_rate_t loader = {.workers = 4, .batches = 100, .fill_ns = 50000000}; /* 0.5 ms a batch */
  pd_host_calib_t cal = {.start = {.wall_ns = 200000, .cpu_ns = 199000, .cpu = 3},
                         .end = {.wall_ns = 260000, .cpu_ns = 258000, .cpu = 5},
                         .iters = PD_HOST_CALIB_ITERS,
                         .reps = PD_HOST_CALIB_REPS};
  pd_run_report_t r = {.metrics = &m, .loader = &loader, .host_calibration = &cal};
  char path[512];
  snprintf(path, sizeof path, "%s/loader.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  cJSON *j = pd_test_read_json(path);
  cJSON *o = cJSON_GetObjectItem(j, "data_loader");
  cr_expect_eq(num(o, "workers"), 4);
  cr_expect_float_eq(num(o, "batch_fill_ms"), 0.5, 1e-9);
  cr_expect_float_eq(num(o, "throughput_batches_per_s"), 8000.0, 1e-6, "4 threads x 2000 batches/s each");
  cr_expect_float_eq(num(o, "demand_steps_per_s"), 2000.0, 1e-6);
  cr_expect_float_eq(num(o, "headroom"), 4.0, 1e-9);
  o = cJSON_GetObjectItem(j, "host_calibration");
  cr_expect_eq(num(o, "start_ns"), 200000);
  cr_expect_eq(num(o, "end_ns"), 260000);
  cr_expect_eq(num(o, "end_cpu_time_ns"), 258000);
  cr_expect_eq(num(o, "start_cpu"), 3);
  cr_expect_eq(num(o, "iterations"), PD_HOST_CALIB_ITERS);
  cJSON_Delete(j);
  /* nothing made yet, or 0 workers: a number where it means one, null where not */
  loader = (pd_loader_rate_t){.workers = 0, .batches = 0, .fill_ns = 0};
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  j = pd_test_read_json(path);
  o = cJSON_GetObjectItem(j, "data_loader");
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "headroom")));
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "batch_fill_ms")));
  cJSON_Delete(j);
}

/* The calibration's workload is deterministic, and its measurement is a positive time
 * with the thread's CPU time no larger than the wall time (plus clock granularity). */
/* pd_speed_probe refuses what it cannot time, before any CUDA call (no GPU needed). */
Test(metrics_json, speed_probe_refuses_bad_arguments) {
  double l = -1.0, c = -1.0;
  cr_expect_eq(pd_speed_probe(NULL, 0, 8000, &l, &c), PD_EINVAL, "no launch");
  cr_expect_eq(pd_speed_probe(NULL, 1025, 8000, &l, &c), PD_EINVAL, "too many launches");
  cr_expect_eq(pd_speed_probe(NULL, 16, 0, &l, &c), PD_EINVAL, "no compute");
  cr_expect_eq(pd_speed_probe(NULL, 16, 100000001, &l, &c), PD_EINVAL, "too much compute");
  cr_expect_eq(pd_speed_probe(NULL, 16, 8000, NULL, &c), PD_EINVAL);
  cr_expect_eq(pd_speed_probe(NULL, 16, 8000, &l, NULL), PD_EINVAL);
  cr_expect(l == -1.0 && c == -1.0, "outputs untouched on refusal");
}

Test(metrics_json, host_calibration_measures_the_workload) {
  cr_expect_eq(pd_host_calib_work(1000), pd_host_calib_work(1000));
  cr_expect_neq(pd_host_calib_work(1000), pd_host_calib_work(1001));
  pd_host_calib_sample_t s;
  cr_assert_eq(pd_host_calib_measure(&s), 0);
  cr_expect_gt(s.wall_ns, 0);
  cr_expect_gt(s.cpu_ns, 0);
  cr_expect_leq(s.cpu_ns, s.wall_ns + 1000000, "cpu %lld wall %lld", (long long)s.cpu_ns, (long long)s.wall_ns);
  cr_expect_geq(s.cpu, -1);
  cr_expect_eq(pd_host_calib_measure(NULL), PD_EINVAL);
}

/* host_calibration.pinned_cpu: null without a pin, the pin's figures with one. */
Test(metrics_json, host_calibration_pin) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  pd_host_calib_t cal = {.start = {.wall_ns = 200000, .cpu = 3}, .end = {.wall_ns = 210000, .cpu = 3},
                         .iters = PD_HOST_CALIB_ITERS, .reps = PD_HOST_CALIB_REPS};
  pd_run_report_t r = {.metrics = &m, .host_calibration = &cal};
  char path[512];
  snprintf(path, sizeof path, "%s/pin.json", tmpdir);
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  cJSON *j = pd_test_read_json(path);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "host_calibration"), "pinned_cpu")),
            "no CPUs timed: not pinned (a zeroed pin is not CPU 0)");
  cJSON_Delete(j);
  cal.pin = (pd_host_pin_t){.cpu = 7, .ncpus = 16, .fastest_ns = 40000, .median_ns = 52000, .slowest_ns = 63000};
  cr_assert_eq(pd_metrics_json_write(path, &r), 0);
  j = pd_test_read_json(path);
  cJSON *o = cJSON_GetObjectItem(j, "host_calibration");
  cr_expect_eq(num(o, "pinned_cpu"), 7);
  cr_expect_eq(num(o, "pin_cpus_timed"), 16);
  cr_expect_eq(num(o, "pin_fastest_ns"), 40000);
  cr_expect_eq(num(o, "pin_slowest_ns"), 63000);
  cJSON_Delete(j);
}

static void *affinity_of_new_thread(void *arg) {
  pd_host_pin_release_thread();
  cpu_set_t *set = arg;
  (void)sched_getaffinity(0, sizeof *set, set);
  return NULL;
}

/* pd_host_pin_fastest: the thread ends on one of the CPUs it had, timed them all; a thread
 * it starts gets the original CPUs back; suspend widens and resume pins again. */
Test(host_pin, pins_to_one_allowed_cpu_and_threads_it_starts_are_released) {
  cpu_set_t orig, now;
  cr_assert_eq(sched_getaffinity(0, sizeof orig, &orig), 0);
  pd_host_pin_t pin;
  cr_assert_eq(pd_host_pin_fastest(NULL), PD_EINVAL);
  cr_assert_eq(pd_host_pin_fastest(&pin), 0);
  if (CPU_COUNT(&orig) < 2) {
    cr_expect_eq(pin.cpu, -1, "one CPU allowed: nothing to choose");
    return;
  }
  cr_assert_geq(pin.cpu, 0);
  cr_expect(CPU_ISSET(pin.cpu, &orig), "the pin is one of the thread's own CPUs");
  cr_expect_eq(pin.ncpus, CPU_COUNT(&orig));
  cr_expect(pin.fastest_ns > 0 && pin.fastest_ns <= pin.median_ns && pin.median_ns <= pin.slowest_ns);
  cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
  cr_expect_eq(CPU_COUNT(&now), 1);
  cr_expect(CPU_ISSET(pin.cpu, &now));
  pthread_t t;
  cpu_set_t child;
  CPU_ZERO(&child);
  cr_assert_eq(pthread_create(&t, NULL, affinity_of_new_thread, &child), 0);
  cr_assert_eq(pthread_join(t, NULL), 0);
  cr_expect(CPU_EQUAL(&child, &orig), "a released thread has the original CPUs");
  pd_host_pin_suspend();
  cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
  cr_expect(CPU_EQUAL(&now, &orig), "suspended: the original CPUs");
  pd_host_pin_suspend(); /* nested, as CUPTI's enable attaches inside its own suspension */
  pd_host_pin_resume();
  cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
  cr_expect(CPU_EQUAL(&now, &orig), "an inner resume keeps the outer suspension");
  pd_host_pin_resume();
  cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
  cr_expect(CPU_COUNT(&now) == 1 && CPU_ISSET(pin.cpu, &now), "resumed: pinned again");
  /* a second pin re-times from the original CPUs, not from the single pinned one */
  cr_assert_eq(pd_host_pin_fastest(&pin), 0);
  cr_expect_eq(pin.ncpus, CPU_COUNT(&orig));
  (void)sched_setaffinity(0, sizeof orig, &orig);
}
