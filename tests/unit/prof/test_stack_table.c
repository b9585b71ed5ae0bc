/* test_stack_table.c: key averages grouped by call stack (torch's group_by_stack_n), the
 * collapsed-stack export (torch's export_stacks) and the Source Location column, on a
 * hand-built trace whose ranges carry stacks. No GPU, no symbolizer.
 *
 * thread 1, each range launching one kernel through a 100 ns cudaLaunchKernel:
 *   conv    [0,10000]       a.c(10): conv_fwd;m.c(5): main      kernel 4000 ns
 *   conv    [20000,30000]   a.c(10): conv_fwd;m.c(7): main      kernel 2000 ns
 *   conv    [40000,50000]   b.c(3): other fn;m.c(6): main       kernel 1000 ns
 *   relu    [60000,61000]   (no stack)                          kernel  500 ns
 *   tiny op [70000,72000]   c.c(1): t                           kernel  400 ns (launch 10 ns)
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pd/pd_stats.h"
#include "pd_test_util.h"

static void add_op(pd_trace_t *t, const char *name, const char *stack, int64_t start, int64_t end, uint64_t corr,
                   int64_t launch_ns, int64_t gpu_ns) {
  pd_event_t r;
  memset(&r, 0, sizeof r);
  r.kind = PD_EVENT_RANGE;
  r.name = name;
  r.start_ns = start;
  r.end_ns = end;
  r.pid = 1;
  r.tid = 1;
  r.u.range.step = -1;
  r.u.range.stack = stack;
  cr_assert_eq(pd_trace_add(t, &r), 0);
  pd_event_t c;
  memset(&c, 0, sizeof c);
  c.kind = PD_EVENT_RUNTIME;
  c.name = "cudaLaunchKernel";
  c.start_ns = start + 10;
  c.end_ns = start + 10 + launch_ns;
  c.pid = 1;
  c.tid = 1;
  c.correlation_id = corr;
  cr_assert_eq(pd_trace_add(t, &c), 0);
  pd_event_t k;
  memset(&k, 0, sizeof k);
  k.kind = PD_EVENT_KERNEL;
  k.name = "k";
  k.start_ns = start + 200;
  k.end_ns = start + 200 + gpu_ns;
  k.correlation_id = corr;
  k.stream = 7;
  cr_assert_eq(pd_trace_add(t, &k), 0);
}

static pd_trace_t *build(void) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  add_op(t, "conv", "a.c(10): conv_fwd;m.c(5): main", 0, 10000, 1, 100, 4000);
  add_op(t, "conv", "a.c(10): conv_fwd;m.c(7): main", 20000, 30000, 2, 100, 2000);
  add_op(t, "conv", "b.c(3): other fn;m.c(6): main", 40000, 50000, 3, 100, 1000);
  add_op(t, "relu", NULL, 60000, 61000, 4, 100, 500);
  add_op(t, "tiny op", "c.c(1): t", 70000, 72000, 5, 10, 400);
  return t;
}

static pd_op_table_t *table(int n, pd_sort_key_t key) {
  pd_trace_t *t = build();
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_not_null(tab);
  if (n > 0) cr_assert_eq(pd_op_table_set_group_by_stack(tab, n), 0);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  pd_op_table_sort(tab, key);
  pd_trace_destroy(t);
  return tab;
}

static const pd_op_stat_t *find(const pd_op_table_t *tab, const char *name, const char *stack) {
  const pd_op_stat_t *r = pd_op_table_rows(tab);
  for (size_t i = 0; i < pd_op_table_count(tab); i++) {
    bool same_stack = (stack == NULL && r[i].stack == NULL) ||
                      (stack != NULL && r[i].stack != NULL && strcmp(stack, r[i].stack) == 0);
    if (strcmp(r[i].name, name) == 0 && same_stack) return &r[i];
  }
  return NULL;
}

Test(stack_table, one_frame_groups_by_call_site) {
  pd_op_table_t *tab = table(1, PD_SORT_SELF_CUDA_TIME_TOTAL);
  /* conv from a.c(10) twice (two callers of conv_fwd merge), conv from b.c(3), relu (no
   * stack: by name), tiny op, and the launch calls */
  const pd_op_stat_t *a = find(tab, "conv", "a.c(10): conv_fwd");
  cr_assert_not_null(a);
  cr_expect_eq(a->calls, 2);
  cr_expect_eq(a->self_cuda_ns, 6000);
  const pd_op_stat_t *b = find(tab, "conv", "b.c(3): other fn");
  cr_assert_not_null(b);
  cr_expect_eq(b->calls, 1);
  cr_expect_eq(b->self_cuda_ns, 1000);
  const pd_op_stat_t *relu = find(tab, "relu", NULL);
  cr_assert_not_null(relu);
  cr_expect_eq(relu->self_cuda_ns, 500);
  cr_expect_not_null(find(tab, "tiny op", "c.c(1): t"));
  const pd_op_stat_t *launch = find(tab, "cudaLaunchKernel", NULL);
  cr_assert_not_null(launch, "API calls carry no stack: one row by name");
  cr_expect_eq(launch->calls, 5);
  cr_expect_eq(pd_op_table_count(tab), 5u);
  cr_expect_eq(pd_op_table_stack_rows(tab), 3u);
  /* sorted by self CUDA time: the a.c(10) conv row first */
  cr_expect_eq(&pd_op_table_rows(tab)[0], a);
  pd_op_table_destroy(tab);
}

Test(stack_table, two_frames_split_by_caller) {
  pd_op_table_t *tab = table(2, PD_SORT_SELF_CUDA_TIME_TOTAL);
  const pd_op_stat_t *a5 = find(tab, "conv", "a.c(10): conv_fwd;m.c(5): main");
  const pd_op_stat_t *a7 = find(tab, "conv", "a.c(10): conv_fwd;m.c(7): main");
  cr_assert_not_null(a5);
  cr_assert_not_null(a7);
  cr_expect_eq(a5->self_cuda_ns, 4000);
  cr_expect_eq(a7->self_cuda_ns, 2000);
  cr_expect_eq(pd_op_table_count(tab), 6u);
  pd_op_table_destroy(tab);
  /* N beyond the depth keeps whole stacks: the same rows */
  tab = table(PD_STACK_ALL_FRAMES, PD_SORT_SELF_CUDA_TIME_TOTAL);
  cr_expect_eq(pd_op_table_count(tab), 6u);
  cr_expect_not_null(find(tab, "conv", "b.c(3): other fn;m.c(6): main"));
  pd_op_table_destroy(tab);
}

Test(stack_table, without_grouping_rows_have_no_stack) {
  pd_op_table_t *tab = table(0, PD_SORT_SELF_CUDA_TIME_TOTAL);
  const pd_op_stat_t *conv = find(tab, "conv", NULL);
  cr_assert_not_null(conv);
  cr_expect_eq(conv->calls, 3);
  cr_expect_eq(pd_op_table_stack_rows(tab), 0u);
  pd_op_table_destroy(tab);
}

Test(stack_table, bad_settings) {
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_expect_eq(pd_op_table_set_group_by_stack(tab, 0), PD_EINVAL);
  cr_expect_eq(pd_op_table_set_group_by_stack(tab, -3), PD_EINVAL);
  cr_expect_eq(pd_op_table_set_group_by_stack(NULL, 2), PD_EINVAL);
  pd_trace_t *t = build();
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  cr_expect_eq(pd_op_table_set_group_by_stack(tab, 2), PD_EINVAL, "rows already added");
  pd_op_table_destroy(tab);
  tab = pd_op_table_create(PD_GROUP_BY_KERNEL);
  cr_expect_eq(pd_op_table_set_group_by_stack(tab, 2), PD_EINVAL, "the kernel view has no stacks");
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}

/* Returns what export_stacks writes for a table (malloc'd). */
static char *export_text(const pd_op_table_t *tab, pd_sort_key_t metric, int64_t *lines) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  *lines = pd_op_table_export_stacks(tab, f, metric);
  fclose(f);
  return buf;
}

Test(stack_table, export_writes_collapsed_stacks_outermost_first) {
  pd_op_table_t *tab = table(PD_STACK_ALL_FRAMES, PD_SORT_SELF_CUDA_TIME_TOTAL);
  int64_t lines = 0;
  char *text = export_text(tab, PD_SORT_SELF_CUDA_TIME_TOTAL, &lines);
  /* whole microseconds; spaces in frames and names become '_' (torch's translation); the
   * op is the leaf; tiny op's 0.4 us rounds to 0 and relu has no stack: both left out */
  cr_expect_str_eq(text,
                   "m.c(5):_main;a.c(10):_conv_fwd;conv 4\n"
                   "m.c(7):_main;a.c(10):_conv_fwd;conv 2\n"
                   "m.c(6):_main;b.c(3):_other_fn;conv 1\n");
  cr_expect_eq(lines, 3);
  free(text);
  pd_op_table_destroy(tab);

  /* self CPU: 10 us minus the 0.1 us launch for each conv, 2 us minus 10 ns for tiny op */
  tab = table(PD_STACK_ALL_FRAMES, PD_SORT_SELF_CPU_TIME_TOTAL);
  text = export_text(tab, PD_SORT_SELF_CPU_TIME_TOTAL, &lines);
  cr_expect_str_eq(text,
                   "m.c(5):_main;a.c(10):_conv_fwd;conv 10\n"
                   "m.c(7):_main;a.c(10):_conv_fwd;conv 10\n"
                   "m.c(6):_main;b.c(3):_other_fn;conv 10\n"
                   "c.c(1):_t;tiny_op 2\n");
  cr_expect_eq(lines, 4);
  free(text);
  pd_op_table_destroy(tab);
}

Test(stack_table, export_rejects_other_metrics_and_reports_write_errors) {
  pd_op_table_t *tab = table(PD_STACK_ALL_FRAMES, PD_SORT_SELF_CUDA_TIME_TOTAL);
  int64_t lines = 0;
  char *text = export_text(tab, PD_SORT_COUNT, &lines);
  cr_expect_eq(lines, PD_EINVAL);
  free(text);
  cr_expect_eq(pd_op_table_export_stacks(NULL, stdout, PD_SORT_SELF_CUDA_TIME_TOTAL), PD_EINVAL);
  cr_expect_eq(pd_op_table_export_stacks_file(tab, "/nonexistent-dir/x/stacks.txt", PD_SORT_SELF_CUDA_TIME_TOTAL),
               PD_ENOENT); /* the one writer's code for a missing directory */
  cr_expect_eq(pd_op_table_export_stacks_file(tab, "", PD_SORT_SELF_CUDA_TIME_TOTAL), PD_EINVAL);
  cr_expect_eq(pd_op_table_export_stacks_file(tab, "x", PD_SORT_CPU_TIME_TOTAL), PD_EINVAL);

  char dir[256];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_stacks");
  char path[300];
  snprintf(path, sizeof path, "%s/stacks.txt", dir);
  cr_expect_eq(pd_op_table_export_stacks_file(tab, path, PD_SORT_SELF_CUDA_TIME_TOTAL), 3);
  char *got = pd_test_slurp(path);
  cr_expect_not_null(strstr(got, "m.c(6):_main;b.c(3):_other_fn;conv 1\n"));
  free(got);
  /* the directory holds the file and no temporary */
  char tmp[400];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  struct stat st;
  cr_expect_neq(stat(tmp, &st), 0);
  remove(path);
  pd_test_tmpdir_remove(dir);
  pd_op_table_destroy(tab);
}

Test(stack_table, printed_table_has_source_location_column) {
  pd_op_table_t *tab = table(2, PD_SORT_SELF_CUDA_TIME_TOTAL);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  pd_op_table_print(f, tab, 0);
  fclose(f);
  cr_expect_not_null(strstr(buf, "Source Location"));
  /* the first frame on the row's line, the second frame alone on the next line */
  const char *row = strstr(buf, "a.c(10): conv_fwd");
  cr_assert_not_null(row);
  const char *eol = strchr(row, '\n');
  cr_assert_not_null(eol);
  const char *next = eol + 1;
  size_t blank = strspn(next, " ");
  cr_expect_gt(blank, 100u, "continuation lines leave the other columns empty");
  cr_expect_eq(strncmp(next + blank, "m.c(5): main", 12), 0, "got '%.40s'", next + blank);
  free(buf);
  pd_op_table_destroy(tab);

  /* without grouping: no column */
  tab = table(0, PD_SORT_SELF_CUDA_TIME_TOTAL);
  buf = NULL;
  f = open_memstream(&buf, &len);
  pd_op_table_print(f, tab, 0);
  fclose(f);
  cr_expect_null(strstr(buf, "Source Location"));
  free(buf);
  pd_op_table_destroy(tab);
}

Test(stack_table, long_frames_keep_their_end) {
  char frame[300];
  memset(frame, 'd', sizeof frame);
  memcpy(frame, "/", 1);
  snprintf(frame + 250, sizeof frame - 250, "/x.c(9): f");
  pd_trace_t *t = pd_trace_create();
  add_op(t, "op", frame, 0, 1000, 1, 10, 900);
  pd_op_table_t *tab = pd_op_table_create(PD_GROUP_BY_RANGE);
  cr_assert_eq(pd_op_table_set_group_by_stack(tab, 1), 0);
  cr_assert_eq(pd_op_table_add_trace(tab, t), 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pd_op_table_print(f, tab, 0);
  fclose(f);
  cr_expect_not_null(strstr(buf, "...ddd"), "the path's start is cut");
  cr_expect_not_null(strstr(buf, "/x.c(9): f"), "file, line and function stay");
  free(buf);
  pd_op_table_destroy(tab);
  pd_trace_destroy(t);
}
