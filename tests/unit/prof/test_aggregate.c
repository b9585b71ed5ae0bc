/* test_aggregate.c: key averages: attribution of GPU time through correlation ids to the
 * innermost range of the launching thread, self/total CPU and CUDA times, grouping,
 * sorting and the printed table. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_stats.h"
#include "pd_test_util.h"

/* ---- a hand-built trace ---------------------------------------------------------------------
 *
 * thread A (pid 100, tid 1):
 *   ProfilerStep#0 [0,1000]
 *     forward [100,500]
 *       conv [150,300] shape [[64, 3, 32, 32]]
 *         cudaLaunchKernel [160,170] corr 1 -> k1 [200,260]
 *         cudaLaunchKernel [200,210] corr 2 -> k2 [300,340]
 *       cudaLaunchKernel [350,360] corr 3 -> k1 [400,420]      (self of forward)
 *     conv [600,700] shape [[64, 32, 32, 32]]
 *       cudaMemcpyAsync [610,630] corr 4 -> memcpy HtoD [650,690]
 * thread B (pid 100, tid 2):
 *   loader [50,950]
 *     cudaLaunchKernel [100,105] corr 5 -> k3 [500,600]       (B's range, not A's forward)
 *   cudaLaunchKernel [960,970] corr 6 -> k3 [980,990]         (outside every range)
 */

static pd_event_t mk(pd_event_kind_t kind, int64_t start, int64_t end, const char *name, uint32_t tid,
                     uint64_t corr) {
  pd_event_t e = pd_test_event(kind, start, end, name, corr);
  e.pid = 100;
  e.tid = tid;
  if (kind == PD_EVENT_KERNEL || kind == PD_EVENT_MEMCPY) e.stream = 7;
  return e;
}

static void add(pd_trace_t *t, pd_event_t e) {
  cr_assert_eq(pd_trace_add(t, &e), 0);
}

static pd_trace_t *build_trace(void) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  /* GPU events first and host events shuffled: the aggregation must not rely on order */
  add(t, mk(PD_EVENT_KERNEL, 980, 990, "k3", 0, 6));
  add(t, mk(PD_EVENT_KERNEL, 200, 260, "k1", 0, 1));
  pd_event_t cp = mk(PD_EVENT_MEMCPY, 650, 690, NULL, 0, 4);
  cp.u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  cp.u.memcpy.src_kind = PD_MEM_PINNED;
  cp.u.memcpy.dst_kind = PD_MEM_DEVICE;
  cp.u.memcpy.bytes = 4096;
  add(t, cp);
  add(t, mk(PD_EVENT_KERNEL, 300, 340, "k2", 0, 2));
  add(t, mk(PD_EVENT_KERNEL, 400, 420, "k1", 0, 3));
  add(t, mk(PD_EVENT_KERNEL, 500, 600, "k3", 0, 5));

  add(t, mk(PD_EVENT_RUNTIME, 960, 970, "cudaLaunchKernel", 2, 6));
  add(t, mk(PD_EVENT_RUNTIME, 350, 360, "cudaLaunchKernel", 1, 3));
  pd_event_t conv1 = mk(PD_EVENT_RANGE, 150, 300, "conv", 1, 0);
  conv1.u.range.shape = "[[64, 3, 32, 32]]";
  add(t, conv1);
  add(t, mk(PD_EVENT_RUNTIME, 160, 170, "cudaLaunchKernel", 1, 1));
  add(t, mk(PD_EVENT_RANGE, 100, 500, "forward", 1, 0));
  pd_event_t step = mk(PD_EVENT_RANGE, 0, 1000, "ProfilerStep#0", 1, 0);
  step.u.range.step = 0;
  add(t, step);
  add(t, mk(PD_EVENT_RUNTIME, 200, 210, "cudaLaunchKernel", 1, 2));
  pd_event_t conv2 = mk(PD_EVENT_RANGE, 600, 700, "conv", 1, 0);
  conv2.u.range.shape = "[[64, 32, 32, 32]]";
  add(t, conv2);
  add(t, mk(PD_EVENT_RUNTIME, 610, 630, "cudaMemcpyAsync", 1, 4));
  add(t, mk(PD_EVENT_RANGE, 50, 950, "loader", 2, 0));
  add(t, mk(PD_EVENT_RUNTIME, 100, 105, "cudaLaunchKernel", 2, 5));
  return t;
}

static const pd_op_stat_t *find_row(const pd_op_table_t *tab, const char *name, const char *shape) {
  const pd_op_stat_t *rows = pd_op_table_rows(tab);
  for (size_t i = 0; i < pd_op_table_count(tab); i++) {
    if (strcmp(rows[i].name, name) != 0) continue;
    if (shape == NULL && rows[i].shape == NULL) return &rows[i];
    if (shape != NULL && rows[i].shape != NULL && strcmp(rows[i].shape, shape) == 0) return &rows[i];
  }
  return NULL;
}

static void expect_row(const pd_op_table_t *tab, const char *name, const char *shape, int64_t calls,
                       int64_t self_cpu, int64_t cpu_total, int64_t self_cuda, int64_t cuda_total) {
  const pd_op_stat_t *r = find_row(tab, name, shape);
  cr_assert_not_null(r, "row %s %s missing", name, shape ? shape : "");
  cr_expect_eq(r->calls, calls, "%s calls: got %lld, want %lld", name, (long long)r->calls, (long long)calls);
  cr_expect_eq(r->self_cpu_ns, self_cpu, "%s self CPU: got %lld, want %lld", name, (long long)r->self_cpu_ns,
               (long long)self_cpu);
  cr_expect_eq(r->cpu_total_ns, cpu_total, "%s CPU total: got %lld, want %lld", name,
               (long long)r->cpu_total_ns, (long long)cpu_total);
  cr_expect_eq(r->self_cuda_ns, self_cuda, "%s self CUDA: got %lld, want %lld", name,
               (long long)r->self_cuda_ns, (long long)self_cuda);
  cr_expect_eq(r->cuda_total_ns, cuda_total, "%s CUDA total: got %lld, want %lld", name,
               (long long)r->cuda_total_ns, (long long)cuda_total);
}

Test(aggregate, attribution_by_range_name) {
  pd_trace_t *t = build_trace();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  cr_expect_eq(pd_op_table_count(tab), 6, "rows: %zu", pd_op_table_count(tab));
  /* name, shape, calls, self CPU, CPU total, self CUDA, CUDA total */
  expect_row(tab, "ProfilerStep*", NULL, 1, 1000 - 400 - 100, 1000, 0, 20 + 100 + 40);
  expect_row(tab, "forward", NULL, 1, 400 - 150 - 10, 400, 20, 120);
  expect_row(tab, "conv", NULL, 2, (150 - 20) + (100 - 20), 250, 100 + 40, 140);
  expect_row(tab, "loader", NULL, 1, 900 - 5, 900, 100, 100);
  expect_row(tab, "cudaLaunchKernel", NULL, 5, 45, 45, 0, 0);
  expect_row(tab, "cudaMemcpyAsync", NULL, 1, 20, 20, 0, 0);
  cr_expect_eq(find_row(tab, "conv", NULL)->kernel_count, 3);
  cr_expect_eq(find_row(tab, "forward", NULL)->kernel_count, 1);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

Test(aggregate, outside_any_range_goes_to_no_range_but_to_kernel_view) {
  pd_trace_t *t = build_trace();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  pd_op_table_add_trace(tab, t);
  int64_t self_cuda = 0;
  for (size_t i = 0; i < pd_op_table_count(tab); i++) self_cuda += pd_op_table_rows(tab)[i].self_cuda_ns;
  cr_expect_eq(self_cuda, 260, "k3 launched outside every range must count nowhere: %lld", (long long)self_cuda);
  pd_op_table_destroy(tab);

  pd_op_table_t *kv = pd_op_table_create(PD_GROUP_BY_KERNEL);
  cr_assert_eq(pd_op_table_add_trace(kv, t), 0);
  cr_expect_eq(pd_op_table_count(kv), 4);
  expect_row(kv, "k1", NULL, 2, 0, 0, 80, 80);
  expect_row(kv, "k2", NULL, 1, 0, 0, 40, 40);
  expect_row(kv, "k3", NULL, 2, 0, 0, 110, 110);
  expect_row(kv, "Memcpy HtoD (Pinned -> Device)", NULL, 1, 0, 0, 40, 40);
  pd_op_table_destroy(kv);
  pd_trace_destroy(t);
}

Test(aggregate, group_by_shape_splits_rows) {
  pd_trace_t *t = build_trace();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE_AND_SHAPE);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  cr_expect_eq(pd_op_table_count(tab), 7);
  expect_row(tab, "conv", "[[64, 3, 32, 32]]", 1, 130, 150, 100, 100);
  expect_row(tab, "conv", "[[64, 32, 32, 32]]", 1, 80, 100, 40, 40);
  expect_row(tab, "forward", NULL, 1, 240, 400, 20, 120);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

Test(aggregate, several_traces_accumulate) {
  pd_trace_t *t = build_trace();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  pd_op_table_sort(tab, PD_SORT_COUNT); /* sorting in between must not break the lookup */
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  cr_expect_eq(pd_op_table_count(tab), 6);
  expect_row(tab, "conv", NULL, 4, 420, 500, 280, 280);
  expect_row(tab, "cudaLaunchKernel", NULL, 10, 90, 90, 0, 0);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

static void expect_order(pd_op_table_t *tab, pd_sort_key_t key, const char *const *want, size_t n) {
  pd_op_table_sort(tab, key);
  cr_assert_eq(pd_op_table_count(tab), n);
  const pd_op_stat_t *rows = pd_op_table_rows(tab);
  for (size_t i = 0; i < n; i++)
    cr_expect_str_eq(rows[i].name, want[i], "key %d position %zu: got %s, want %s", (int)key, i, rows[i].name,
                     want[i]);
}

Test(aggregate, sort_by_each_key) {
  pd_trace_t *t = build_trace();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  pd_op_table_add_trace(tab, t);
  static const char *const self_cuda[] = {"conv", "loader", "forward", "ProfilerStep*", "cudaLaunchKernel",
                                          "cudaMemcpyAsync"};
  static const char *const cuda_total[] = {"ProfilerStep*", "conv", "forward", "loader", "cudaLaunchKernel",
                                           "cudaMemcpyAsync"};
  static const char *const self_cpu[] = {"loader", "ProfilerStep*", "forward", "conv", "cudaLaunchKernel",
                                         "cudaMemcpyAsync"};
  static const char *const cpu_total[] = {"ProfilerStep*", "loader", "forward", "conv", "cudaLaunchKernel",
                                          "cudaMemcpyAsync"};
  static const char *const count[] = {"cudaLaunchKernel", "conv", "ProfilerStep*", "cudaMemcpyAsync", "forward",
                                      "loader"};
  expect_order(tab, PD_SORT_SELF_CUDA_TIME_TOTAL, self_cuda, 6);
  expect_order(tab, PD_SORT_CUDA_TIME_TOTAL, cuda_total, 6);
  expect_order(tab, PD_SORT_SELF_CPU_TIME_TOTAL, self_cpu, 6);
  expect_order(tab, PD_SORT_CPU_TIME_TOTAL, cpu_total, 6);
  expect_order(tab, PD_SORT_COUNT, count, 6);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

Test(aggregate, sort_key_parse) {
  pd_sort_key_t k;
  cr_expect_eq(pd_sort_key_parse("self_cuda_time_total", &k), 0);
  cr_expect_eq(k, PD_SORT_SELF_CUDA_TIME_TOTAL);
  cr_expect_eq(pd_sort_key_parse("cuda_time_total", &k), 0);
  cr_expect_eq(k, PD_SORT_CUDA_TIME_TOTAL);
  cr_expect_eq(pd_sort_key_parse("self_cpu_time_total", &k), 0);
  cr_expect_eq(k, PD_SORT_SELF_CPU_TIME_TOTAL);
  cr_expect_eq(pd_sort_key_parse("cpu_time_total", &k), 0);
  cr_expect_eq(k, PD_SORT_CPU_TIME_TOTAL);
  cr_expect_eq(pd_sort_key_parse("count", &k), 0);
  cr_expect_eq(k, PD_SORT_COUNT);
  cr_expect_eq(pd_sort_key_parse("self_cuda_time", &k), PD_EINVAL);
  cr_expect_eq(pd_sort_key_parse(NULL, &k), PD_EINVAL);
}

Test(aggregate, same_start_nesting_and_partial_overlap) {
  pd_trace_t *t = pd_trace_create();
  /* outer and inner start on the same ns; the call starts there too */
  add(t, mk(PD_EVENT_RUNTIME, 0, 10, "cudaLaunchKernel", 1, 9));
  add(t, mk(PD_EVENT_RANGE, 0, 50, "inner", 1, 0));
  add(t, mk(PD_EVENT_RANGE, 0, 100, "outer", 1, 0));
  add(t, mk(PD_EVENT_KERNEL, 20, 30, "k", 0, 9));
  /* a range that starts inside outer and ends after it (a step range closing while a
   * user range is open): counted as outer's child, clipped to outer's end */
  add(t, mk(PD_EVENT_RANGE, 80, 130, "straddle", 1, 0));
  /* a range ending exactly where the next one begins is not its parent */
  add(t, mk(PD_EVENT_RANGE, 130, 140, "after", 1, 0));
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  expect_row(tab, "inner", NULL, 1, 40, 50, 10, 10);
  expect_row(tab, "outer", NULL, 1, 100 - 50 - 20, 100, 0, 10);
  expect_row(tab, "straddle", NULL, 1, 50, 50, 0, 0);
  expect_row(tab, "after", NULL, 1, 10, 10, 0, 0);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

Test(aggregate, cpu_op_records_are_ops_and_driver_calls_link) {
  pd_trace_t *t = pd_trace_create();
  add(t, mk(PD_EVENT_CPU_OP, 0, 100, "aten::mm", 1, 0));
  add(t, mk(PD_EVENT_DRIVER, 10, 20, "cuLaunchKernel", 1, 3));
  add(t, mk(PD_EVENT_KERNEL, 30, 80, "gemm", 0, 3));
  add(t, mk(PD_EVENT_KERNEL, 30, 80, "orphan", 0, 77)); /* no launching call in the trace */
  add(t, mk(PD_EVENT_KERNEL, 30, 80, "nocorr", 0, 0));
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  expect_row(tab, "aten::mm", NULL, 1, 90, 100, 50, 50);
  expect_row(tab, "cuLaunchKernel", NULL, 1, 10, 10, 0, 0);
  cr_expect_eq(pd_op_table_count(tab), 2);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

Test(aggregate, empty_and_bad_arguments) {
  pd_trace_t *t = pd_trace_create();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_expect_eq(pd_op_table_add_trace(tab, t), 0);
  cr_expect_eq(pd_op_table_count(tab), 0);
  cr_expect_eq(pd_op_table_add_trace(NULL, t), PD_EINVAL);
  cr_expect_eq(pd_op_table_add_trace(tab, NULL), PD_EINVAL);
  cr_expect_null(pd_op_table_create((pd_group_by_t)17));
  cr_expect_eq(pd_op_table_count(NULL), 0);
  cr_expect_null(pd_op_table_rows(NULL));
  pd_op_table_sort(tab, PD_SORT_COUNT); /* empty: nothing to do */
  pd_op_table_sort(NULL, PD_SORT_COUNT);
  pd_op_table_print(NULL, tab, 0);
  pd_op_table_destroy(tab);
  pd_op_table_destroy(NULL);
  pd_trace_destroy(t);
}

/* A cycle of hundreds of thousands of events: a quadratic attribution would take
 * minutes here and trip the test timeout. */
Test(aggregate, large_trace_scales, .timeout = 60) {
  pd_trace_t *t = pd_trace_create();
  const int n = 100000;
  add(t, mk(PD_EVENT_RANGE, 0, 10LL * n + 10, "step", 1, 0));
  for (int i = 0; i < n; i++) {
    int64_t s = 10LL * i + 1;
    add(t, mk(PD_EVENT_RANGE, s, s + 8, (i % 3) ? "op_a" : "op_b", 1, 0));
    add(t, mk(PD_EVENT_RUNTIME, s + 1, s + 3, "cudaLaunchKernel", 1, (uint64_t)i + 1));
    add(t, mk(PD_EVENT_KERNEL, s + 2, s + 7, "k", 0, (uint64_t)i + 1));
  }
  /* and one deep nest: 20000 ranges inside each other */
  for (int d = 0; d < 20000; d++) add(t, mk(PD_EVENT_RANGE, 100LL * n + d, 200LL * n - d, "deep", 2, 0));
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  const pd_op_stat_t *a = find_row(tab, "op_a", NULL), *b = find_row(tab, "op_b", NULL);
  cr_assert(a && b);
  cr_expect_eq(a->calls + b->calls, n);
  cr_expect_eq(a->self_cuda_ns + b->self_cuda_ns, 5LL * n);
  cr_expect_eq(find_row(tab, "step", NULL)->cuda_total_ns, 5LL * n);
  /* nested self times add up to the outermost duration: 100n */
  cr_expect_eq(find_row(tab, "deep", NULL)->self_cpu_ns, 100LL * n, "deep self CPU %lld",
               (long long)find_row(tab, "deep", NULL)->self_cpu_ns);
  cr_expect_eq(find_row(tab, "deep", NULL)->calls, 20000);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

/* ---- the printed table ------------------------------------------------------------------------- */

static char *print_to_string(const pd_op_table_t *tab, int limit) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  pd_op_table_print(f, tab, limit);
  fclose(f);
  return buf;
}

Test(aggregate, table_prints_like_torch) {
  pd_trace_t *t = build_trace();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  pd_op_table_add_trace(tab, t);
  pd_op_table_sort(tab, PD_SORT_SELF_CUDA_TIME_TOTAL);
  char *out = print_to_string(tab, 0);
  static const char *const golden[] = {
      "Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "Self CUDA", "Self CUDA %",
      "CUDA total", "CUDA time avg", "# of Calls", "Self CPU time total: 1.910us\n",
      "Self CUDA time total: 0.260us\n",
      /* conv: self CPU 210 ns of 1910 (10.99%), self CUDA 140 of 260 (53.85%), avg 70 ns */
      "conv         10.99%        0.210us         13.09%        0.250us        0.125us        0.140us         53.85%"
      "        0.140us        0.070us              2  \n",
  };
  for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++)
    cr_expect(strstr(out, golden[i]) != NULL, "missing \"%s\" in:\n%s", golden[i], out);
  /* rows come in table order: conv before loader before forward */
  cr_expect(strstr(out, " conv ") < strstr(out, " loader ") && strstr(out, " loader ") < strstr(out, " forward "),
            "order:\n%s", out);
  /* every line of the table body has the same width (aligned columns) */
  size_t width = 0;
  int lines = 0;
  for (char *line = out; *line && strncmp(line, "Self CPU time total", 19) != 0;) {
    char *nl = strchr(line, '\n');
    cr_assert_not_null(nl);
    size_t w = (size_t)(nl - line);
    if (width == 0) width = w;
    cr_expect_eq(w, width, "line %d is %zu wide, not %zu:\n%s", lines, w, width, out);
    lines++;
    line = nl + 1;
  }
  cr_expect_eq(lines, 3 + 6 + 1, "header 3 lines, 6 rows, 1 rule: %d", lines);
  free(out);

  out = print_to_string(tab, 2);
  cr_expect(strstr(out, " loader ") != NULL && strstr(out, " forward ") == NULL, "row limit 2:\n%s", out);
  free(out);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

Test(aggregate, table_units_names_and_shapes) {
  pd_trace_t *t = pd_trace_create();
  const char *longname = "a_very_long_range_name_that_goes_on_and_on_beyond_the_name_column_width";
  pd_event_t r1 = mk(PD_EVENT_RANGE, 0, 3000000000LL, longname, 1, 0);
  r1.u.range.shape = "[[1, 2]]";
  add(t, r1);
  add(t, mk(PD_EVENT_RANGE, 3000000000LL, 3002500000LL, "ms_range", 1, 0));
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE_AND_SHAPE);
  pd_op_table_add_trace(tab, t);
  pd_op_table_sort(tab, PD_SORT_CPU_TIME_TOTAL);
  char *out = print_to_string(tab, -1);
  cr_expect(strstr(out, "3.000s") != NULL, "seconds:\n%s", out);
  cr_expect(strstr(out, "2.500ms") != NULL, "milliseconds:\n%s", out);
  cr_expect(strstr(out, "a_very_long_range_name_that_goes_on_and_on_beyond_th...") != NULL, "cut name:\n%s", out);
  cr_expect(strstr(out, longname) == NULL);
  cr_expect(strstr(out, "Input Shapes") != NULL && strstr(out, "[[1, 2]]") != NULL, "shapes:\n%s", out);
  cr_expect(strstr(out, "NaN") != NULL, "no CUDA time at all: shares are NaN as in torch:\n%s", out);
  cr_expect(strstr(out, "Self CUDA time total: 0.000us") != NULL, "%s", out);
  free(out);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

/* More distinct ops than the lookup's first size (64): sorting rebuilds the lookup for
 * every row, and adding another trace afterwards still finds each row. (The bug this
 * guards against hung; CTest's timeout ends such a run. A Criterion .timeout here leaks
 * 48 bytes inside Criterion's runner, which fails the sanitizer build.) */
Test(aggregate, sort_with_many_rows_then_add_again) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  char name[32];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof(name), "op%03d", i);
    add(t, mk(PD_EVENT_RANGE, 1000 * i, 1000 * i + 10 + i, name, 1, 0));
  }
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_not_null(tab);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  cr_assert_eq(pd_op_table_count(tab), 300);
  pd_op_table_sort(tab, PD_SORT_CPU_TIME_TOTAL);
  const pd_op_stat_t *rows = pd_op_table_rows(tab);
  cr_assert_str_eq(rows[0].name, "op299");
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  cr_assert_eq(pd_op_table_count(tab), 300, "rows duplicated after the sort: %zu",
               pd_op_table_count(tab));
  cr_assert_eq(pd_op_table_rows(tab)[0].calls, 2);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}
