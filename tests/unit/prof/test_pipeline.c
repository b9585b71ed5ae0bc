/* test_pipeline.c: the model's cycle pipeline (pd_pipeline.h) on hand-built traces:
 * its stages and their failures, the data-wait union, the per-step samples a trace
 * yields, the verdict stage, and the data-wait classifier behind them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_classify.h"
#include "pd/pd_pipeline.h"
#include "pd_test_util.h"

static void add_range(pd_trace_t *t, const char *name, int64_t start, int64_t end, int64_t step) {
  pd_event_t ev = {.kind = PD_EVENT_RANGE, .start_ns = start, .end_ns = end, .name = name, .pid = 1, .tid = 1};
  ev.u.range.step = step;
  cr_assert_eq(pd_trace_add(t, &ev), 0);
}

static void add_launch(pd_trace_t *t, int64_t at, uint64_t corr, int64_t gpu_ns) {
  pd_event_t call = {.kind = PD_EVENT_RUNTIME, .start_ns = at, .end_ns = at + 10, .correlation_id = corr,
                     .name = "cudaLaunchKernel", .pid = 1, .tid = 1};
  pd_event_t k = {.kind = PD_EVENT_KERNEL, .start_ns = at + 20, .end_ns = at + 20 + gpu_ns, .correlation_id = corr,
                  .name = "k_work", .stream = 7};
  cr_assert_eq(pd_trace_add(t, &call), 0);
  cr_assert_eq(pd_trace_add(t, &k), 0);
}

/* Two steps of 1000 ns; the first waits 300 ns for data in two overlapping ranges, the
 * second 100 ns; one kernel of 200 ns per step, launched inside an op. */
static pd_trace_t *two_steps(void) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  add_range(t, "ProfilerStep#4", 0, 1000, 4);
  add_range(t, PD_RANGE_DATA_WAIT, 100, 300, -1);
  add_range(t, PD_RANGE_DATA_WAIT, 200, 400, -1);
  add_range(t, "train_step", 500, 900, -1);
  add_launch(t, 600, 1, 200);
  add_range(t, "ProfilerStep#5", 1000, 2000, 5);
  add_range(t, "DataLoader.wait", 1050, 1150, -1);
  add_range(t, "train_step", 1500, 1900, -1);
  add_launch(t, 1600, 2, 200);
  pd_trace_sort(t);
  return t;
}

Test(pipeline, a_cycle_goes_through_index_tables_and_metrics) {
  pd_trace_t *t = two_steps();
  pd_pipeline_t pl;
  cr_assert_eq(pd_pipeline_init(&pl, &(pd_pipeline_opts_t){.kernels = true, .group_by_stack_n = 2, .stacks = true}),
               0);
  cr_assert_not_null(pl.kernels);
  cr_assert_not_null(pl.by_stack);
  cr_assert_not_null(pl.stacks);
  cr_expect(isnan(pl.metrics.kernels_per_step), "not measured before a cycle");
  pd_trace_index_t ix;
  cr_assert_eq(pd_pipeline_add_cycle(&pl, t, NULL, NULL, &ix), 0);
  cr_expect_eq(pl.cycles, 1);
  cr_expect(pl.have_metrics);
  cr_expect_eq(pl.failed, PD_PIPE_OK);
  cr_expect_eq(ix.nsteps, 2u, "the index is handed over");
  cr_expect_eq(pl.metrics.kernels_per_step, 1.0);
  cr_expect_eq(pl.metrics.gpu_kernel_time_per_step_us, 0.2);
  cr_expect_eq(pd_op_table_count(pl.kernels), 1u);
  cr_expect_gt(pd_op_table_count(pl.ops), 0u);

  double *st = NULL, *wt = NULL;
  cr_assert_eq(pd_pipeline_trace_samples(t, &ix, &st, &wt), 0);
  cr_expect_float_eq(wt[0], 300e-9, 1e-15, "the union of two overlapping waits");
  cr_expect_float_eq(st[0], 700e-9, 1e-15, "the step minus its data wait");
  cr_expect_float_eq(wt[1], 100e-9, 1e-15, "the older name still counts");
  cr_expect_float_eq(st[1], 900e-9, 1e-15);

  pd_verdict_t v;
  memset(&v, 0, sizeof v);
  pd_pipeline_verdict(&pl, st, wt, 2, PD_ADVICE_DEMO, &v);
  cr_expect_float_eq(pl.metrics.avg_step_time_s, 800e-9, 1e-15);
  cr_expect_float_eq(pl.metrics.avg_dataloader_wait_s, 200e-9, 1e-15);
  cr_expect_neq(v.rule[0], '\0', "a verdict was made");
  pd_pipeline_sort(&pl, PD_SORT_SELF_CUDA_TIME_TOTAL, PD_SORT_SELF_CPU_TIME_TOTAL);
  const pd_op_stat_t *rows = pd_op_table_rows(pl.ops);
  for (size_t i = 1; i < pd_op_table_count(pl.ops); i++)
    cr_expect_geq(rows[i - 1].self_cuda_ns, rows[i].self_cuda_ns, "sorted by self CUDA time");

  free(st);
  free(wt);
  pd_trace_index_free(&ix);
  pd_pipeline_free(&pl);
  pd_pipeline_free(&pl); /* twice: the tables are gone, nothing left to free */
  pd_pipeline_free(NULL);
  pd_trace_destroy(t);
}

/* n steps of 1 ms, each waiting wait_us for data, then an op of 200 us with a kernel of
 * 100 us (long enough that the profiler's documented cost leaves the replay a step). */
static pd_trace_t *steps_waiting(int n, int64_t wait_us) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  for (int i = 0; i < n; i++) {
    const int64_t at = i * 1000000;
    add_range(t, i == 0 ? "ProfilerStep#1" : "ProfilerStep#2", at, at + 1000000, i + 1);
    add_range(t, PD_RANGE_DATA_WAIT, at + 10000, at + 10000 + wait_us * 1000, -1);
    add_range(t, "train_step", at + 700000, at + 900000, -1);
    add_launch(t, at + 750000, (uint64_t)i + 1, 100000);
  }
  pd_trace_sort(t);
  return t;
}

/* --repeat: every cycle is replayed on its own, and the verdict reads the savings over all
 * of them, each cycle weighted by its steps (two steps of the first, one of the second,
 * which waits three times as long). */
Test(pipeline, the_verdict_reads_the_savings_over_every_cycle) {
  pd_trace_t *a = steps_waiting(2, 200), *b = steps_waiting(1, 600);
  pd_pipeline_t pl;
  cr_assert_eq(pd_pipeline_init(&pl, NULL), 0);
  cr_assert_eq(pd_pipeline_add_cycle(&pl, a, NULL, NULL, NULL), 0);
  const double wait_a = pl.metrics.saving_data_wait_us_per_step, pred_a = pl.metrics.predicted_unprofiled_step_us;
  cr_assert_eq(pd_pipeline_add_cycle(&pl, b, NULL, NULL, NULL), 0);
  const double wait_b = pl.metrics.saving_data_wait_us_per_step, pred_b = pl.metrics.predicted_unprofiled_step_us;
  cr_assert_eq(pl.cycle_log.n, 2u);
  cr_assert(wait_a > 0 && wait_b > wait_a, "the second cycle waits longer: %f %f (%s)", wait_a, wait_b, pl.metrics.replay_why);
  const double st[] = {800e-6, 800e-6, 400e-6}, wt[] = {200e-6, 200e-6, 600e-6};
  pd_verdict_t v;
  memset(&v, 0, sizeof v);
  pd_pipeline_verdict(&pl, st, wt, 3, PD_ADVICE_DEMO, &v);
  const double want = (2 * wait_a + wait_b) / 3, want_pred = (2 * pred_a + pred_b) / 3;
  cr_expect_float_eq(pl.metrics.saving_data_wait_us_per_step, want, 1e-9, "%f", pl.metrics.saving_data_wait_us_per_step);
  cr_expect_float_eq(pl.metrics.predicted_unprofiled_step_us, want_pred, 1e-9);
  cr_expect_float_eq(v.predicted_unprofiled_step_us, want_pred, 1e-9, "the verdict's step is over all cycles");
  bool found = false;
  for (int i = 0; i < v.nsavings; i++)
    if (strcmp(v.savings[i].cause, "data_wait") == 0) {
      found = true;
      cr_expect_float_eq(v.savings[i].est_saving_us_per_step, want, 1e-9);
    }
  cr_expect(found, "the verdict lists the data wait's saving");
  pd_pipeline_verdict(&pl, st, wt, 3, PD_ADVICE_DEMO, &v); /* twice: the same, from the log */
  cr_expect_float_eq(pl.metrics.saving_data_wait_us_per_step, want, 1e-9);
  pd_pipeline_free(&pl);
  cr_expect_eq(pl.cycle_log.n, 0u, "freed with the pipeline");
  pd_trace_destroy(a);
  pd_trace_destroy(b);
}

Test(pipeline, the_verdict_stage_without_a_verdict_fills_the_samples_only) {
  pd_pipeline_t pl;
  cr_assert_eq(pd_pipeline_init(&pl, NULL), 0);
  cr_expect_null(pl.kernels);
  const double st[2] = {0.002, 0.004};
  pd_pipeline_verdict(&pl, st, NULL, 2, PD_ADVICE_DEMO, NULL);
  cr_expect_float_eq(pl.metrics.avg_step_time_s, 0.003, 1e-12);
  cr_expect(isnan(pl.metrics.avg_dataloader_wait_s), "no wait samples: not measured");
  pd_pipeline_verdict(NULL, st, NULL, 2, PD_ADVICE_DEMO, NULL); /* no-op */
  pd_pipeline_sort(NULL, PD_SORT_COUNT, PD_SORT_COUNT);
  pd_pipeline_free(&pl);
}

Test(pipeline, a_cycle_without_steps_has_tables_but_no_metrics_unless_steps_are_required) {
  pd_trace_t *t = pd_trace_create();
  add_range(t, "train_step", 0, 100, -1);
  add_launch(t, 10, 1, 50);
  pd_trace_sort(t);
  pd_pipeline_t pl;
  cr_assert_eq(pd_pipeline_init(&pl, NULL), 0);
  pd_trace_index_t ix;
  cr_assert_eq(pd_pipeline_add_cycle(&pl, t, NULL, NULL, &ix), 0);
  cr_expect_not(pl.have_metrics);
  cr_expect(isnan(pl.metrics.kernels_per_step));
  cr_expect_gt(pd_op_table_count(pl.ops), 0u);
  double *st = (double *)1, *wt = (double *)1;
  cr_expect_eq(pd_pipeline_trace_samples(t, &ix, &st, &wt), 0);
  cr_expect_null(st, "no step: no samples");
  cr_expect_null(wt);
  cr_expect_eq(pd_pipeline_trace_samples(NULL, &ix, &st, &wt), PD_EINVAL);
  pd_trace_index_free(&ix);
  pd_pipeline_free(&pl);

  cr_assert_eq(pd_pipeline_init(&pl, &(pd_pipeline_opts_t){.steps_required = true}), 0);
  cr_expect_eq(pd_pipeline_add_cycle(&pl, t, NULL, NULL, &ix), PD_EINVAL);
  cr_expect_eq(pl.failed, PD_PIPE_METRICS);
  cr_expect_eq(pl.cycles, 0);
  cr_expect_eq(ix.nsteps, 0u, "the index is not handed over on failure");
  cr_expect_null(ix.step);
  cr_expect_eq(pd_pipeline_add_cycle(&pl, NULL, NULL, NULL, NULL), PD_EINVAL);
  pd_pipeline_free(&pl);
  pd_trace_destroy(t);
}

Test(pipeline, the_write_stage_writes_the_trace_or_fails_first) {
  char dir[256];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_pipe");
  pd_trace_t *t = two_steps();
  pd_pipeline_t pl;
  cr_assert_eq(pd_pipeline_init(&pl, NULL), 0);
  pd_trace_meta_t meta = {.pid = 1, .links = true};
  char path[512];
  snprintf(path, sizeof path, "%s/no/such/dir/cycle.pt.trace.json", dir);
  cr_expect_neq(pd_pipeline_add_cycle(&pl, t, path, &meta, NULL), 0);
  cr_expect_eq(pl.failed, PD_PIPE_WRITE);
  cr_expect_eq(pl.cycles, 0, "nothing after a failed write");
  cr_expect_not(pl.have_metrics);
  snprintf(path, sizeof path, "%s/cycle.pt.trace.json", dir);
  cr_assert_eq(pd_pipeline_add_cycle(&pl, t, path, &meta, NULL), 0);
  cr_expect_eq(pl.failed, PD_PIPE_OK, "a success clears the failure");
  char *text = pd_test_slurp(path);
  cr_assert_not_null(text);
  cr_expect_not_null(strstr(text, "ProfilerStep#5"));
  free(text);
  pd_pipeline_free(&pl);
  pd_trace_destroy(t);
  pd_test_tmpdir_remove(dir);
}

Test(pipeline, the_data_wait_union_merges_and_clips) {
  pd_trace_t *t = pd_trace_create();
  add_range(t, PD_RANGE_DATA_WAIT, 0, 100, -1);
  add_range(t, PD_RANGE_DATA_WAIT_MAIN, 50, 150, -1);  /* overlaps: merged */
  add_range(t, "enumerate(DataPipe)#Mapper", 150, 170, -1); /* touches: merged */
  add_range(t, PD_RANGE_DATA_WAIT, 300, 300, -1);     /* empty: left out */
  add_range(t, PD_RANGE_DATA_WAIT, 400, 500, -1);
  add_range(t, "forward", 420, 480, -1);              /* not a wait */
  pd_trace_sort(t);
  pd_interval_t *v = NULL;
  size_t n = 0;
  cr_assert_eq(pd_data_wait_union(t, &v, &n), 0);
  cr_assert_eq(n, 2u);
  cr_expect_eq(v[0].start_ns, 0);
  cr_expect_eq(v[0].end_ns, 170);
  cr_expect_eq(v[1].start_ns, 400);
  cr_expect_eq(v[1].end_ns, 500);
  cr_expect_eq(pd_interval_overlap_ns(v, n, 100, 450), 70 + 50);
  cr_expect_eq(pd_interval_overlap_ns(v, n, 170, 400), 0, "between the waits");
  cr_expect_eq(pd_interval_overlap_ns(v, n, INT64_MIN, INT64_MAX), 270);
  cr_expect_eq(pd_interval_overlap_ns(NULL, 0, 0, 10), 0);
  free(v);
  cr_expect_eq(pd_data_wait_union(NULL, &v, &n), PD_EINVAL);
  pd_trace_reset(t);
  cr_assert_eq(pd_data_wait_union(t, &v, &n), 0);
  cr_expect_null(v);
  cr_expect_eq(n, 0u);
  pd_trace_destroy(t);
}

Test(pipeline, a_data_wait_is_a_named_host_range_that_is_not_a_step) {
  pd_event_t ev = {.kind = PD_EVENT_RANGE, .name = PD_RANGE_DATA_WAIT};
  ev.u.range.step = -1;
  cr_expect(pd_event_is_data_wait(&ev));
  ev.kind = PD_EVENT_CPU_OP;
  cr_expect(pd_event_is_data_wait(&ev), "torch writes it as a cpu_op too");
  ev.u.range.step = 3;
  cr_expect_not(pd_event_is_data_wait(&ev), "a ProfilerStep range is the window, not a wait");
  ev.u.range.step = -1;
  ev.name = "forward";
  cr_expect_not(pd_event_is_data_wait(&ev));
  pd_event_t k = {.kind = PD_EVENT_KERNEL, .name = PD_RANGE_DATA_WAIT};
  cr_expect_not(pd_event_is_data_wait(&k), "only host ranges wait for data");
  cr_expect_not(pd_event_is_data_wait(NULL));
  cr_expect_not(pd_range_is_data_wait(NULL));
}
