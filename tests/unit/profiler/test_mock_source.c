/* test_mock_source.c: the real profiler state machine on a scripted record source.
 *
 * pd_prof_config_t.source takes the mock of tests/support (pd_mock_source.h) instead of
 * CUPTI, so the schedule (wait, warmup, active, repeat), the cycles handed to
 * on_trace_ready, the record window, dropped records, callback errors and a source that
 * fails in the middle of a run are all driven end to end without a GPU, and the cycles go
 * through the model's pipeline to a trace and a metrics JSON. Criterion runs each test in
 * its own process (one profiler per process).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <cJSON.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_analyze.h"
#include "pd/pd_pipeline.h"
#include "pd/pd_prof.h"
#include "pd/pd_writers.h"
#include "pd_mock_source.h"
#include "pd_test_util.h"

#define KERNELS_PER_STEP 3
#define MAX_CYCLES 8

/* ---- no CUDA call with a given source ------------------------------------------------------------
 * The first CUDA runtime calls the profiler could make, the CUPTI source's device check
 * and the calibration's stream, are defined here, so the linker binds the library's calls
 * to these counters instead of libcudart; every test checks none was made. */

static int g_cuda_calls;

cudaError_t cudaGetDeviceCount(int *count) {
  g_cuda_calls++;
  if (count != NULL) *count = 0;
  return cudaErrorNoDevice;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  (void)stream;
  (void)flags;
  g_cuda_calls++;
  return cudaErrorNoDevice;
}

/* ---- what the trace-ready callback saw ------------------------------------------------------ */

typedef struct {
  int cycles;
  size_t kernels[MAX_CYCLES], calls[MAX_CYCLES], steps[MAX_CYCLES], devices[MAX_CYCLES];
  uint64_t dropped[MAX_CYCLES];
  int64_t first_step[MAX_CYCLES];
  pd_pipeline_t *pl;  /* when set, each cycle also goes through the pipeline */
  const char *dir;    /* with pl: where the traces go */
  char traces[MAX_CYCLES][512];
} seen_t;

static int seen_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  seen_t *s = user;
  cr_assert_lt(s->cycles, MAX_CYCLES);
  int c = s->cycles++;
  const pd_event_t *ev = pd_trace_events(cycle);
  s->first_step[c] = -1;
  for (size_t i = 0; i < pd_trace_count(cycle); i++) {
    if (ev[i].kind == PD_EVENT_KERNEL) s->kernels[c]++;
    if (ev[i].kind == PD_EVENT_RUNTIME) s->calls[c]++;
    if (ev[i].kind == PD_EVENT_RANGE && ev[i].u.range.step >= 0) {
      if (s->steps[c]++ == 0) s->first_step[c] = ev[i].u.range.step;
    }
  }
  s->devices[c] = pd_trace_device_count(cycle);
  s->dropped[c] = pd_trace_dropped(cycle);
  if (s->pl == NULL) return 0;
  snprintf(s->traces[c], sizeof s->traces[c], "%s/cycle%d.pt.trace.json", s->dir, c);
  pd_trace_meta_t meta = {.unix_offset_ns = pd_clock_unix_offset_ns(), .pid = 1, .links = true};
  pd_prof_cost_t cost;
  if (pd_prof_cost(prof, NULL, &cost) == 0) meta.cost = &cost;
  return pd_pipeline_add_cycle(s->pl, cycle, s->traces[c], &meta, NULL);
}

/* ---- one scripted training step ------------------------------------------------------------------ */

static pd_mock_source_t *g_mock;

/* A step as profiler_demo's looks to the profiler: a data wait, a copy in, KERNELS_PER_STEP
 * launches inside op ranges, a temporary buffer, a loss copy out and a stream sync. */
static void step_work(void) {
  pd_mock_source_t *m = g_mock;
  cr_assert_eq(pd_range_push(PD_RANGE_DATA_WAIT), 0);
  int64_t t = pd_clock_now_ns();
  while (pd_clock_now_ns() < t + 20000) {
  }
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_push("train_step"), 0);
  uint64_t c = pd_mock_source_call(m, "cudaMemcpyAsync", 2000);
  cr_assert_geq(pd_mock_source_memcpy(m, c, 13, PD_MEMCPY_HTOD, 4096, 3000), 0);
  for (int k = 0; k < KERNELS_PER_STEP; k++) {
    cr_assert_eq(pd_range_push(k == 0 ? "conv1.forward" : "linear.forward"), 0);
    c = pd_mock_source_call(m, "cudaLaunchKernel", 2000);
    cr_assert_geq(pd_mock_source_kernel(m, c, 7, k == 0 ? "k_conv" : "k_linear", 5000), 0);
    cr_assert_eq(pd_range_pop(), 0);
  }
  c = pd_mock_source_call(m, "cudaMalloc", 1000);
  cr_assert_geq(pd_mock_source_memory(m, c, 0x7f0000000000ULL, 1 << 20), 0);
  c = pd_mock_source_call(m, "cudaMemsetAsync", 1000);
  cr_assert_geq(pd_mock_source_memset(m, c, 7, 1 << 20, 1000), 0);
  c = pd_mock_source_call(m, "cudaFree", 1000);
  cr_assert_geq(pd_mock_source_memory(m, c, 0x7f0000000000ULL, -(1 << 20)), 0);
  c = pd_mock_source_call(m, "cudaMemcpyAsync", 1000);
  cr_assert_geq(pd_mock_source_memcpy(m, c, 7, PD_MEMCPY_DTOH, 4, 1000), 0);
  c = pd_mock_source_call(m, "cudaStreamSynchronize", 20000);
  cr_assert_geq(pd_mock_source_sync(m, c, PD_SYNC_STREAM), 0);
  cr_assert_eq(pd_range_pop(), 0);
}

static pd_prof_t *make_profiler(pd_schedule_t sched, seen_t *seen) {
  g_mock = pd_mock_source_create();
  cr_assert_not_null(g_mock);
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg); /* CPU|CUDA */
  cfg.schedule = sched;
  cfg.on_trace_ready = seen_cb;
  cfg.user = seen;
  cfg.source = pd_mock_source_base(g_mock);
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0, "%s", pd_prof_last_error(NULL));
  return p;
}

/* Runs n steps; returns the first failing pd_prof_step() code (0 when none). */
static int run_steps(pd_prof_t *p, int n) {
  for (int i = 0; i < n; i++) {
    step_work();
    int rc = pd_prof_step(p);
    if (rc != 0) return rc;
  }
  return 0;
}

static void finish(pd_prof_t *p) {
  pd_prof_destroy(p);
  cr_expect_eq(g_cuda_calls, 0, "a profiler on a given source makes no CUDA call (no calibration)");
  pd_mock_source_destroy(g_mock);
  g_mock = NULL;
}

/* ---- the schedule and the cycles ---------------------------------------------------------------- */

Test(mock_source, schedule_with_repeat_hands_each_cycle_its_active_steps) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 1, .warmup = 1, .active = 2, .repeat = 2}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps(p, 8), 0, "%s", pd_prof_last_error(p));
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(seen.cycles, 2);
  for (int c = 0; c < 2; c++) {
    cr_expect_eq(seen.steps[c], 2u, "cycle %d: two ProfilerStep ranges", c);
    cr_expect_eq(seen.first_step[c], 2 + 4 * c, "cycle %d starts at its first active step", c);
    cr_expect_eq(seen.kernels[c], 2u * KERNELS_PER_STEP, "cycle %d: only the active steps' kernels", c);
    cr_expect_eq(seen.calls[c], 2u * (KERNELS_PER_STEP + 6), "cycle %d: every runtime call", c);
    cr_expect_eq(seen.devices[c], 1u, "the source's device describes each cycle");
  }
  /* tracing is on for warmup + active only: the wait steps' records were never taken, the
   * warmup's were discarded, the active steps' collected */
  /* per step: the calls, their GPU work, the sync record and two memory records */
  const uint64_t per_step = (KERNELS_PER_STEP + 6) + (KERNELS_PER_STEP + 3) + 1 + 2;
  cr_expect_eq(pd_mock_source_ignored(g_mock), 2 * per_step, "two wait steps");
  cr_expect_eq(pd_mock_source_discarded(g_mock), 2 * per_step, "two warmup steps");
  cr_expect_eq(pd_mock_source_collected(g_mock), 4 * per_step, "four active steps");
  cr_expect_eq(pd_mock_source_calls(g_mock, PD_MOCK_ENABLE), 2, "enabled once per cycle");
  cr_expect_eq(pd_mock_source_calls(g_mock, PD_MOCK_DISABLE), 2);
  cr_expect_eq(pd_mock_source_calls(g_mock, PD_MOCK_FLUSH), 2);
  cr_expect_geq(pd_mock_source_calls(g_mock, PD_MOCK_DETACH), 2, "detached between cycles");
  cr_expect_not(pd_mock_source_enabled(g_mock));
  pd_prof_cost_t total;
  cr_assert_eq(pd_prof_cost(p, &total, NULL), 0);
  cr_expect_eq(total.cycles, 2);
  cr_expect_eq(total.buffers, 2, "one buffer per flush that carried records");
  cr_expect_eq(total.buffer_bytes, 1 << 20, "the source's buffer size");
  cr_expect_lt(total.calib_ns_per_call, 0.0, "a given source is never calibrated (no CUDA call)");
  finish(p);
}

Test(mock_source, stop_inside_the_active_steps_hands_the_partial_cycle) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 0, .warmup = 1, .active = 3, .repeat = 1}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps(p, 2), 0); /* warmup, then the first active step */
  step_work();                      /* the second active step, stopped inside */
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(seen.cycles, 1);
  cr_expect_eq(seen.steps[0], 2u);
  cr_expect_eq(seen.kernels[0], 2u * KERNELS_PER_STEP, "the forced flush at stop hands the last step's records");
  finish(p);
}

/* ---- dropped records and callback errors ----------------------------------------------------------- */

Test(mock_source, dropped_records_count_in_their_cycle, .init = cr_redirect_stderr) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 0, .warmup = 1, .active = 1, .repeat = 2}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  step_work(); /* warmup */
  cr_assert_eq(pd_prof_step(p), 0);
  pd_mock_source_drop(g_mock, 5); /* the buffer of the first active step overflowed */
  cr_assert_eq(run_steps(p, 3), 0);
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(seen.cycles, 2);
  cr_expect_eq(seen.dropped[0], 5u, "the drops belong to the cycle whose flush reported them");
  cr_expect_eq(seen.dropped[1], 0u);
  cr_expect_eq(pd_prof_dropped_records(p), 5u);
  finish(p);
  fflush(stderr);
  cr_expect_stderr_eq_str("pd_prof: warning: mock source dropped 5 activity records in the cycle ending at step "
                          "2; the trace is incomplete\n");
}

Test(mock_source, callback_errors_warn_and_keep_the_cycle, .init = cr_redirect_stderr) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 0, .warmup = 1, .active = 1, .repeat = 1}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  pd_mock_source_error(g_mock, 2);
  cr_assert_eq(run_steps(p, 2), 0, "a buffer call that failed in a callback does not fail the step");
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_expect_eq(seen.cycles, 1);
  cr_expect_eq(seen.kernels[0], (size_t)KERNELS_PER_STEP);
  finish(p);
  fflush(stderr);
  cr_expect_stderr_eq_str("pd_prof: warning: 2 mock source buffer calls failed in the cycle ending at step 2 "
                          "(dropped-record count or record parsing); the trace may be incomplete\n");
}

/* ---- a source that fails in the middle of a run ------------------------------------------------------ */

/* Runs steps_ok steps with op scripted to fail with rc from its first_call-th call on,
 * then one more step, which must fail with rc and a last error containing want. Returns
 * the cycles handed over before it. */
static int expect_failing_step(pd_schedule_t sched, pd_mock_op_t op, int first_call, int rc, int steps_ok,
                               const char *want) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler(sched, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  pd_mock_source_fail(g_mock, op, first_call, rc);
  cr_assert_eq(run_steps(p, steps_ok), 0, "the steps before run: %s", pd_prof_last_error(p));
  step_work();
  cr_expect_eq(pd_prof_step(p), rc);
  cr_expect_not_null(strstr(pd_prof_last_error(p), want), "%s", pd_prof_last_error(p));
  finish(p);
  return seen.cycles;
}

Test(mock_source, enable_failing_at_the_second_cycle_fails_that_step) {
  /* the second cycle's wait step ends: its warmup would start tracing */
  int cycles = expect_failing_step((pd_schedule_t){.wait = 1, .warmup = 1, .active = 1, .repeat = 2}, PD_MOCK_ENABLE,
                                   2, PD_ECUPTI, 3, "mock source: enable failed (scripted)");
  cr_expect_eq(cycles, 1, "the first cycle was handed over");
}

Test(mock_source, collect_failing_at_the_end_of_a_cycle_fails_that_step) {
  /* the first collect discards the warmup; the second parses the cycle */
  expect_failing_step((pd_schedule_t){.wait = 0, .warmup = 1, .active = 1, .repeat = 1}, PD_MOCK_COLLECT, 2,
                      PD_ENOMEM, 1, "parsing the record source's buffers");
}

Test(mock_source, collect_failing_on_the_warmup_discard_fails_that_step) {
  expect_failing_step((pd_schedule_t){.wait = 0, .warmup = 1, .active = 1, .repeat = 1}, PD_MOCK_COLLECT, 1,
                      PD_ECUPTI, 0, "discarding the warmup's records");
}

Test(mock_source, flush_failing_at_stop_fails_the_stop) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 0, .warmup = 1, .active = 2, .repeat = 1}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps(p, 2), 0);
  pd_mock_source_fail(g_mock, PD_MOCK_FLUSH, 1, PD_ECUPTI);
  cr_expect_eq(pd_prof_stop(p), PD_ECUPTI);
  cr_expect_str_eq(pd_prof_last_error(p), "mock source: flush failed (scripted)");
  cr_expect_eq(seen.cycles, 1, "the cycle is still handed over, without the records that were not flushed");
  cr_expect_eq(seen.kernels[0], 0u);
  finish(p);
}

Test(mock_source, detach_failing_warns_once_and_goes_on, .init = cr_redirect_stderr) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 1, .warmup = 1, .active = 1, .repeat = 2}, &seen);
  pd_mock_source_fail(g_mock, PD_MOCK_DETACH, 1, PD_ECUPTI_BUSY);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps(p, 6), 0, "failing to detach costs speed only");
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_expect_eq(seen.cycles, 2);
  cr_expect_str_eq(pd_prof_last_error(p), "warning: mock source: detach failed (scripted)");
  cr_expect_geq(pd_mock_source_calls(g_mock, PD_MOCK_DETACH), 3);
  finish(p);
  fflush(stderr);
  cr_expect_stderr_eq_str("pd_prof: warning: mock source: detach failed (scripted)\n");
}

Test(mock_source, without_a_given_source_the_cuda_calls_are_seen) {
  /* the counters above do see the library's calls: the CUPTI source's device check */
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg); /* CPU|CUDA, no source: CUPTI */
  pd_prof_t *p = NULL;
  cr_expect_eq(pd_prof_create(&cfg, &p), PD_ENODEV);
  cr_expect_eq(g_cuda_calls, 1);
}

/* ---- a given source is checked ----------------------------------------------------------------------- */

Test(mock_source, a_source_needs_cuda_activity_and_every_operation) {
  pd_mock_source_t *m = pd_mock_source_create();
  cr_assert_not_null(m);
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = PD_ACTIVITY_CPU;
  cfg.source = pd_mock_source_base(m);
  pd_prof_t *p = NULL;
  cr_expect_eq(pd_prof_create(&cfg, &p), PD_EINVAL);
  cr_expect_str_eq(pd_prof_last_error(NULL), "a record source needs PD_ACTIVITY_CUDA");
  pd_record_source_ops_t ops = *pd_mock_source_base(m)->ops;
  ops.collect = NULL;
  pd_record_source_t partial = {.ops = &ops, .impl = m};
  cfg.activities = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA;
  cfg.source = &partial;
  cr_expect_eq(pd_prof_create(&cfg, &p), PD_EINVAL);
  cr_expect_str_eq(pd_prof_last_error(NULL), "record source: an operation is missing");
  cr_expect_null(p);
  pd_mock_source_destroy(m);
}

Test(mock_source, a_cycle_without_a_device_is_not_described) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 0, .warmup = 1, .active = 1, .repeat = 1}, &seen);
  pd_mock_source_set_device(g_mock, NULL);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps(p, 2), 0);
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_expect_eq(seen.cycles, 1);
  cr_expect_eq(seen.devices[0], 0u);
  finish(p);
}

/* ---- end to end: the cycles through the pipeline to a trace and a metrics JSON ------------------------ */

Test(mock_source, cycles_through_the_pipeline_to_json_match_the_traces_read_back) {
  char dir[256];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_mock");
  pd_pipeline_t pl;
  cr_assert_eq(pd_pipeline_init(&pl, &(pd_pipeline_opts_t){.kernels = true, .steps_required = true}), 0);
  seen_t seen = {.pl = &pl, .dir = dir};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 1, .warmup = 1, .active = 3, .repeat = 1}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps(p, 5), 0, "%s", pd_prof_last_error(p));
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(pl.cycles, 1);
  cr_assert(pl.have_metrics);

  /* the verdict stage over host samples, then the metrics JSON */
  const double step_s[3] = {0.001, 0.001, 0.001}, wait_s[3] = {0.0002, 0.0002, 0.0002};
  pd_verdict_t verdict;
  memset(&verdict, 0, sizeof verdict);
  pd_pipeline_verdict(&pl, step_s, wait_s, 3, PD_ADVICE_DEMO, &verdict);
  pd_pipeline_sort(&pl, PD_SORT_SELF_CUDA_TIME_TOTAL, PD_SORT_SELF_CUDA_TIME_TOTAL);
  const pd_metrics_t *m = &pl.metrics;
  cr_expect_eq(m->kernels_per_step, KERNELS_PER_STEP);
  cr_expect_eq(m->sync_calls_per_step, 1.0);
  cr_expect_eq(m->device_alloc_calls_per_step, 2.0, "cudaMalloc and cudaFree");
  cr_expect_eq(m->h2d_bytes_per_step, 4096.0);
  cr_expect_float_eq(m->avg_step_time_s, 0.001, 1e-12);
  cr_expect_neq(verdict.rule[0], '\0', "the verdict names what decided it");
  const char *files[1] = {seen.traces[0]};
  pd_run_report_t report = {.metrics = m,
                            .step_times_s = step_s,
                            .dataloader_wait_s = wait_s,
                            .nsteps = 3,
                            .verdict = &verdict,
                            .top_ops = pl.ops,
                            .top_kernels = pl.kernels,
                            .trace_files = files,
                            .ntrace_files = 1};
  const char *json = pd_test_path(dir, "run.metrics.json");
  cr_assert_eq(pd_metrics_json_write(json, &report), 0);
  cJSON *root = pd_test_read_json(json);
  cr_assert_not_null(root);
  const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(root, "metrics");
  cr_expect_eq(cJSON_GetObjectItemCaseSensitive(metrics, "kernels_per_step")->valuedouble, KERNELS_PER_STEP);
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "verdict"), "bottleneck");
  cr_expect(cJSON_IsString(b) && strcmp(b->valuestring, pd_bottleneck_name(verdict.bottleneck)) == 0);
  cJSON_Delete(root);

  /* the same trace read back and run through the same pipeline counts the same */
  pd_trace_t *back = pd_trace_create();
  char err[256];
  cr_assert_eq(pd_trace_read_file(seen.traces[0], back, err, sizeof err), 0, "%s", err);
  pd_pipeline_t again;
  pd_trace_index_t ix;
  cr_assert_eq(pd_pipeline_init(&again, NULL), 0);
  cr_assert_eq(pd_pipeline_add_cycle(&again, back, NULL, NULL, &ix), 0);
  cr_expect_eq(again.metrics.kernels_per_step, m->kernels_per_step);
  cr_expect_eq(again.metrics.sync_calls_per_step, m->sync_calls_per_step);
  /* where the mock's kernels run back to back (its clock decides), the writer ends each one
   * up to 1 ns per span it sits in (its layer's and train_step's), and 1 ns more, before
   * the next */
  double short_us = m->gpu_kernel_time_per_step_us - again.metrics.gpu_kernel_time_per_step_us;
  cr_expect(short_us >= 0 && short_us <= KERNELS_PER_STEP * (2 + 1) * 1e-3 + 1e-9,
            "kernel time read back %.3f us short", short_us);
  cr_expect_eq(pd_op_table_count(again.ops), pd_op_table_count(pl.ops));
  double *st = NULL, *wt = NULL;
  cr_assert_eq(pd_pipeline_trace_samples(back, &ix, &st, &wt), 0);
  cr_assert_eq(ix.nsteps, 3u);
  for (size_t s = 0; s < 3; s++) cr_expect_gt(wt[s], 0.0, "step %zu's data wait is in the trace", s);
  free(st);
  free(wt);
  pd_trace_index_free(&ix);
  pd_pipeline_free(&again);
  pd_trace_destroy(back);
  pd_pipeline_free(&pl);
  finish(p);
  pd_test_tmpdir_remove(dir);
}

/* ---- the API census over the warmup steps ---------------------------------------------------------- */

/* A step that also makes calls the source sees without recording them (as CUPTI sees
 * cudaGetDevice in the default capture): five runtime and two driver calls. */
static int run_steps_with_unrecorded(pd_prof_t *p, int n) {
  for (int i = 0; i < n; i++) {
    step_work();
    for (int k = 0; k < 5; k++) pd_mock_source_unrecorded_call(g_mock, false);
    for (int k = 0; k < 2; k++) pd_mock_source_unrecorded_call(g_mock, true);
    int rc = pd_prof_step(p);
    if (rc != 0) return rc;
  }
  return 0;
}

Test(mock_source, census_counts_the_calls_of_the_warmup_steps_only) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 1, .warmup = 2, .active = 2, .repeat = 1}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps_with_unrecorded(p, 6), 0, "%s", pd_prof_last_error(p));
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(seen.cycles, 1);
  cr_expect_eq(pd_mock_source_calls(g_mock, PD_MOCK_CENSUS), 2, "started at the warmup, ended at the first active step");
  pd_prof_cost_t total;
  cr_assert_eq(pd_prof_cost(p, &total, NULL), 0);
  cr_expect_eq(total.census_steps, 2, "the two warmup steps");
  cr_expect_eq(total.census_runtime_unrecorded, 10, "5 a warmup step; the wait and active steps' not counted");
  cr_expect_eq(total.census_driver_unrecorded, 4);
  cr_expect_eq(total.census_recorded, 2 * (KERNELS_PER_STEP + 6), "the recorded calls of the warmup steps");
  cr_expect_eq(total.launch_calls, 2 * KERNELS_PER_STEP, "the active steps' launches");
  /* Calibrated, the unrecorded calls add their cost per step to the estimate: the active
   * steps' (3 launches x 2 us + 6 other calls x 0.5 us) + 5 x 0.1 us + 2 x 0.2 us a step. */
  total.calib_ns_per_call = 2000.0, total.calib_ns_per_range = 0.0, total.host_ranges = 0;
  total.calib_ns_per_recorded_call = 500.0;
  total.calib_ns_per_unrecorded_runtime = 100.0, total.calib_ns_per_unrecorded_driver = 200.0;
  pd_prof_cost_estimate(&total);
  cr_expect_float_eq(total.est_added_us_per_step, 6.0 + 3.0 + 0.5 + 0.4, 1e-9, "got %.4f", total.est_added_us_per_step);
  cJSON *j = pd_prof_cost_to_json(&total, 0.001);
  cr_assert_not_null(j);
  const cJSON *ce = cJSON_GetObjectItemCaseSensitive(j, "api_census");
  cr_assert(cJSON_IsObject(ce));
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(ce, "steps")->valuedouble, 2.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(ce, "runtime_unrecorded_per_step")->valuedouble, 5.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(ce, "driver_unrecorded_per_step")->valuedouble, 2.0, 1e-9);
  cr_expect_float_eq(cJSON_GetObjectItemCaseSensitive(ce, "recorded_per_step")->valuedouble, KERNELS_PER_STEP + 6.0, 1e-9);
  cJSON_Delete(j);
  finish(p);
}

Test(mock_source, census_that_cannot_start_leaves_the_cycle_and_counts_nothing) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 0, .warmup = 1, .active = 2, .repeat = 1}, &seen);
  pd_mock_source_fail(g_mock, PD_MOCK_CENSUS, 1, PD_ECUPTI);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps_with_unrecorded(p, 4), 0, "a census is no reason to fail a step: %s", pd_prof_last_error(p));
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_expect_eq(seen.cycles, 1);
  cr_expect_eq(seen.kernels[0], 2u * KERNELS_PER_STEP);
  pd_prof_cost_t total;
  cr_assert_eq(pd_prof_cost(p, &total, NULL), 0);
  cr_expect_eq(total.census_steps, 0);
  cr_expect_eq(total.census_runtime_unrecorded, 0);
  cJSON *j = pd_prof_cost_to_json(&total, 0.001);
  cr_assert_not_null(j);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "api_census")), "no census: null, not zeros");
  cJSON_Delete(j);
  finish(p);
}

Test(mock_source, census_needs_a_warmup_step_and_ends_with_a_stop_inside_it) {
  seen_t seen = {0};
  pd_prof_t *p = make_profiler((pd_schedule_t){.wait = 1, .warmup = 0, .active = 2, .repeat = 1}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps_with_unrecorded(p, 4), 0, "%s", pd_prof_last_error(p));
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_expect_eq(pd_mock_source_calls(g_mock, PD_MOCK_CENSUS), 0, "no warmup step: no census");
  finish(p);

  seen = (seen_t){0};
  p = make_profiler((pd_schedule_t){.wait = 0, .warmup = 3, .active = 2, .repeat = 1}, &seen);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_assert_eq(run_steps_with_unrecorded(p, 1), 0, "%s", pd_prof_last_error(p));
  cr_assert_eq(pd_prof_stop(p), 0); /* inside the warmup */
  cr_expect_eq(seen.cycles, 0);
  cr_expect_eq(pd_mock_source_calls(g_mock, PD_MOCK_CENSUS), 2, "the census ended with the warmup");
  pd_prof_cost_t total;
  cr_assert_eq(pd_prof_cost(p, &total, NULL), 0);
  cr_expect_eq(total.census_steps, 0, "a warmup that never reached a recorded step counts nothing");
  finish(p);
}
