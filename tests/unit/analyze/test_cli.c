/* test_cli.c: the real profile_analyze program on the torch fixtures, without a GPU.
 *
 * Each case runs the binary with its output captured and checks the exit status (0 ok,
 * 1 failure, 2 bad input), what it prints, and that bad input leaves exactly one line
 * naming the fault (plus the synopsis line), nothing on stdout and no output file.
 */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_test_util.h"

static char g_dir[256];
static char g_out[1 << 17]; /* stdout of the last run */
static char g_err[1 << 14]; /* stderr of the last run */

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/pd_analyze_cli.XXXXXX");
  cr_assert_not_null(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(cli, .init = setup, .fini = teardown);

static const char *in_dir(const char *name) { return pd_test_path(g_dir, name); }

static const char *fixture(const char *name) { return pd_test_path(pd_test_fixtures("torch"), name); }

static void slurp_into(const char *path, char *buf, size_t cap) {
  buf[0] = 0;
  FILE *f = fopen(path, "rb");
  if (f == NULL) return;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
  fclose(f);
}

/* Runs profile_analyze with a NULL-terminated argument list; returns its exit status. */
/* The address-space limit of the next runs in MiB (0: none), to make them run out of memory. */
static long g_as_limit_mib;

static int pa_run(const char *first, ...) {
  const char *bin = getenv("PD_BINARY_DIR");
  cr_assert_not_null(bin, "PD_BINARY_DIR is not set (run through ctest)");
  char exe[512];
  snprintf(exe, sizeof exe, "%s/src/cli/profile_analyze/profile_analyze", bin);
  const char *argv[40] = {exe};
  int argc = 1;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a != NULL && argc < 39; a = va_arg(ap, const char *)) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  char out[512], err[512];
  snprintf(out, sizeof out, "%s/.stdout", g_dir);
  snprintf(err, sizeof err, "%s/.stderr", g_dir);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0 || chdir(g_dir) != 0) _exit(126); /* a file named "-" would land in g_dir */
    dup2(fo, 1);
    dup2(fe, 2);
    pd_test_child_limit_as(g_as_limit_mib);
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  slurp_into(out, g_out, sizeof g_out);
  slurp_into(err, g_err, sizeof g_err);
  unlink(out);
  unlink(err);
  cr_assert(WIFEXITED(st), "profile_analyze did not exit normally");
  return WEXITSTATUS(st);
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Entries in the temp dir (no dot files): bad input must leave none. */
static int dir_entries(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -v '^\\.' | wc -l", g_dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p != NULL) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

/* One line naming the fault, then the synopsis; nothing on stdout, nothing written. */
static void expect_bad_input(int rc, const char *words) {
  cr_expect_eq(rc, 2, "exit %d, stderr: %s", rc, g_err);
  cr_expect_str_eq(g_out, "", "nothing on stdout");
  cr_expect(strncmp(g_err, "profile_analyze: ", 17) == 0, "stderr: %s", g_err);
  const char *nl = strchr(g_err, '\n');
  cr_assert_not_null(nl);
  cr_expect(strstr(g_err, words) != NULL && strstr(g_err, words) < nl, "first line lacks '%s': %s", words, g_err);
  cr_expect(strncmp(nl + 1, "usage: profile_analyze TRACE", 28) == 0, "synopsis: %s", nl + 1);
  cr_expect(strchr(nl + 1, '\n') != NULL && strchr(nl + 1, '\n')[1] == 0, "exactly two lines: %s", g_err);
  cr_expect_eq(dir_entries(), 0, "bad input writes nothing");
}

Test(cli, default_run_on_torch_trace) {
  int rc = pa_run(fixture("torch_sync.pt.trace.json.gz"), NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  cr_expect(strstr(g_out, "written by torch.profiler") != NULL);
  cr_expect(strstr(g_out, "4 steps: ProfilerStep#2 .. #5") != NULL);
  cr_expect(strstr(g_out, "Verdict: host_bound") != NULL, "%s", g_out);
  cr_expect(strstr(g_out, "Device self time: top 10 of") != NULL);
  cr_expect(strstr(g_out, "Step time breakdown") == NULL, "breakdown only with --breakdown");
  cr_expect_str_eq(g_err, "");
}

Test(cli, every_option_and_reports) {
  const char *html = in_dir("r.html"), *json = in_dir("r.json");
  int rc = pa_run(fixture("torch_memory_churn.pt.trace.json.gz"), "-t", "3", "--aggregate-by=type", "--order-by",
                  "memory", "--min-time", "1e-6", "--breakdown", "--html", html, "--json", json, "--diff",
                  fixture("torch_sync.pt.trace.json.gz"), NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  cr_expect(strstr(g_out, "(by type, ordered by memory)") != NULL, "%s", g_out);
  cr_expect(strstr(g_out, "Step time breakdown") != NULL);
  cr_expect(strstr(g_out, "Device memory timeline") != NULL);
  cr_expect(strstr(g_out, "Key averages") != NULL);
  cr_expect(strstr(g_out, "Diff of device self time per step") != NULL);
  cr_expect(exists(html));
  char buf[1 << 16];
  slurp_into(html, buf, sizeof buf);
  cr_expect(strstr(buf, "<svg") != NULL);
  static char js[1 << 20];
  slurp_into(json, js, sizeof js);
  cJSON *root = cJSON_Parse(js);
  cr_assert_not_null(root, "JSON report parses");
  cJSON *top = cJSON_GetObjectItem(root, "top");
  cr_expect_str_eq(cJSON_GetObjectItem(top, "aggregate_by")->valuestring, "type");
  cr_expect_str_eq(cJSON_GetObjectItem(top, "order_by")->valuestring, "memory");
  cr_expect_eq(cJSON_GetObjectItem(top, "min_time_ns")->valuedouble, 1000.0);
  cJSON *rows = cJSON_GetObjectItem(top, "rows");
  cr_assert_eq(cJSON_GetArraySize(rows), 3);
  for (int i = 1; i < 3; i++)
    cr_expect_geq(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, i - 1), "bytes")->valuedouble,
                  cJSON_GetObjectItem(cJSON_GetArrayItem(rows, i), "bytes")->valuedouble, "ordered by bytes");
  cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 2), "type")->valuestring, "kernel",
                   "kernels move no bytes");
  cr_expect(cJSON_IsObject(cJSON_GetObjectItem(root, "diff")));
  cJSON_Delete(root);
}

Test(cli, type_filter_and_plain_trace) {
  int rc = pa_run(fixture("torch_sync.pt.trace.json.gz"), "--type", "memcpy", "--order-by", "calls", NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  cr_expect(strstr(g_out, "Memcpy HtoD (Pinned -> Device)") != NULL, "%s", g_out);
  cr_expect(strstr(g_out, "  kernel  ") == NULL, "only copies");
  rc = pa_run(fixture("torch_sync.pt.trace.json.gz"), "--type", "aten::cudnn_convolution", "-t", "2", NULL);
  cr_assert_eq(rc, 0);
  cr_expect(strstr(g_out, "top 2 of") != NULL);
  cr_expect(strstr(g_out, "aten::cudnn_convolution") != NULL);
}

Test(cli, help_and_version) {
  cr_expect_eq(pa_run("--help", NULL), 0);
  cr_expect(strstr(g_out, "--aggregate-by name|type") != NULL);
  cr_expect(strstr(g_out, "exit status") != NULL);
  cr_expect_eq(pa_run("--version", NULL), 0);
  cr_expect(strncmp(g_out, "profile_analyze ", 16) == 0);
}

Test(cli, bad_input_missing_file) {
  expect_bad_input(pa_run(in_dir("missing.json"), "--html", in_dir("x.html"), NULL), "No such file");
}

Test(cli, bad_input_not_json) {
  const char *p = in_dir("notjson.json");
  FILE *f = fopen(p, "w");
  fputs("this is not json {", f);
  fclose(f);
  char html[512];
  snprintf(html, sizeof html, "%s", in_dir("x.html"));
  int rc = pa_run(p, "--html", html, "--json", in_dir("x.json"), NULL);
  unlink(p);
  expect_bad_input(rc, "not valid JSON");
}

Test(cli, bad_input_number_out_of_range) {
  const char *p = in_dir("inf.json");
  FILE *f = fopen(p, "w");
  fputs("{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"ts\":1e400,\"dur\":1}]}", f);
  fclose(f);
  int rc = pa_run(p, "--json", in_dir("x.json"), NULL);
  unlink(p);
  expect_bad_input(rc, "ts 1e400 is out of range");
}

/* Running out of memory is a failure (exit 1) that says so and names the file, not bad
 * input: a trace of 300,000 kernels needs about 60 MiB, read under a 32 MiB address-space
 * limit that a small trace runs within. Nothing is written. */
Test(cli, out_of_memory_is_a_failure_not_bad_input) {
  PD_TEST_SKIP_UNLESS_AS_LIMIT_WORKS();
  const char *p = in_dir("big.json");
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fputs("{\"traceEvents\":[", f);
  for (int i = 0; i < 300000; i++)
    fprintf(f, "%s{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"ts\":%d,\"dur\":1}", i ? "," : "", 2 * i);
  fputs("]}", f);
  cr_assert_eq(fclose(f), 0);
  char big[512], out[512];
  snprintf(big, sizeof big, "%s", p);
  snprintf(out, sizeof out, "%s", in_dir("r.json"));
  g_as_limit_mib = 32;
  int small = pa_run(fixture("torch_sync.pt.trace.json.gz"), NULL);
  int rc = pa_run(big, "--json", out, NULL);
  g_as_limit_mib = 0;
  cr_assert_eq(small, 0, "the control: a small trace runs within 32 MiB (stderr: %s)", g_err);
  cr_expect_eq(rc, 1, "exit %d (1: failure), stderr: %s", rc, g_err);
  cr_expect(strstr(g_err, "out of host memory") != NULL && strstr(g_err, big) != NULL, "stderr: %s", g_err);
  cr_expect(strchr(g_err, '\n') == strrchr(g_err, '\n'), "one line: %s", g_err);
  cr_expect_str_eq(g_out, "", "nothing on stdout");
  cr_expect(!exists(out), "nothing written");
  unlink(big);
}

Test(cli, bad_input_fifo_is_refused_not_waited_on) {
  const char *p = in_dir("fifo.json");
  cr_assert_eq(mkfifo(p, 0600), 0);
  int rc = pa_run(p, NULL);
  unlink(p);
  expect_bad_input(rc, "not a regular file");
}

Test(cli, no_progress_line_when_stderr_is_no_terminal) {
  int rc = pa_run(fixture("torch_sync.pt.trace.json.gz"), NULL);
  cr_assert_eq(rc, 0);
  cr_expect_str_eq(g_err, "", "stderr is a file here: silent");
}

Test(cli, bad_input_diff_trace) {
  expect_bad_input(pa_run(fixture("torch_sync.pt.trace.json.gz"), "--diff", in_dir("gone.json"), "--json",
                          in_dir("x.json"), NULL),
                   "gone.json");
}

Test(cli, bad_input_flags) {
  const char *t = fixture("torch_sync.pt.trace.json.gz");
  expect_bad_input(pa_run(t, "--frobnicate", NULL), "unknown option '--frobnicate'");
  expect_bad_input(pa_run(t, "-t", "abc", NULL), "bad -t value 'abc'");
  expect_bad_input(pa_run(t, "-t", "0", NULL), "bad -t value '0'");
  expect_bad_input(pa_run(t, "--top=-3", NULL), "bad --top value '-3'");
  expect_bad_input(pa_run(t, "-t", NULL), "-t needs a value");
  expect_bad_input(pa_run(t, "--aggregate-by", "op", NULL), "bad --aggregate-by value 'op'");
  expect_bad_input(pa_run(t, "--order-by", "size", NULL), "bad --order-by value 'size'");
  expect_bad_input(pa_run(t, "--min-time", "-1", NULL), "bad --min-time value '-1'");
  expect_bad_input(pa_run(t, "--min-time", "1ms", NULL), "bad --min-time value '1ms'");
  expect_bad_input(pa_run(t, "--type", "", NULL), "--type needs a non-empty NAME");
  expect_bad_input(pa_run(t, "--html=", NULL), "--html needs a file name");
  expect_bad_input(pa_run(NULL), "no TRACE given");
  expect_bad_input(pa_run(t, t, NULL), "more than one TRACE");
  expect_bad_input(pa_run(t, "--json", t, NULL), "would overwrite the input trace");
  expect_bad_input(pa_run(t, "--json", in_dir("a"), "--html", in_dir("a"), NULL), "name the same file");
}

Test(cli, unwritable_output_fails_cleanly) {
  const char *html = in_dir("ok.html");
  /* found before the trace is read: bad input, one line naming the flag and the path */
  int rc = pa_run(fixture("torch_sync.pt.trace.json.gz"), "--html", html, "--json", in_dir("no/dir/r.json"), NULL);
  cr_expect_eq(rc, 2, "stderr: %s", g_err);
  cr_expect(strstr(g_err, "--json") != NULL && strstr(g_err, "no/dir/r.json': cannot write there: no such file") != NULL,
            "%s", g_err);
  cr_expect(!exists(html), "all outputs or none");
  cr_expect_eq(dir_entries(), 0);
}

/* ---- call stacks: group_by_stack_n, export_stacks ----------------------------------------- */

/* A torch-style trace whose ops carry "Call stack" (frames innermost first), each launching
 * one kernel. A dot file, so dir_entries() does not count it. */
static const char *stacked_trace(void) {
  static char path[300];
  snprintf(path, sizeof path, "%s/.stacked.pt.trace.json", g_dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("{\"schemaVersion\":1,\"traceEvents\":[\n"
        "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::conv2d\",\"pid\":1,\"tid\":1,\"ts\":100,\"dur\":50,"
        "\"args\":{\"External id\":1,\"Call stack\":\"model.py(12): forward;train.py(40): step\"}},\n"
        "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":110,\"dur\":5,"
        "\"args\":{\"External id\":1,\"correlation\":7}},\n"
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"conv_kernel\",\"pid\":0,\"tid\":7,\"ts\":130,\"dur\":20,"
        "\"args\":{\"correlation\":7,\"device\":0,\"stream\":7}},\n"
        "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::relu\",\"pid\":1,\"tid\":1,\"ts\":200,\"dur\":30,"
        "\"args\":{\"External id\":2,\"Call stack\":\"model.py(13): forward;train.py(40): step\"}},\n"
        "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":1,\"ts\":205,\"dur\":5,"
        "\"args\":{\"External id\":2,\"correlation\":8}},\n"
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"relu_kernel\",\"pid\":0,\"tid\":7,\"ts\":240,\"dur\":3,"
        "\"args\":{\"correlation\":8,\"device\":0,\"stream\":7}}\n"
        "]}\n",
        f);
  fclose(f);
  return path;
}

Test(cli, group_by_stack_and_export_stacks) {
  const char *t = stacked_trace();
  const char *out = in_dir("stacks.txt");
  int rc = pa_run(t, "--group_by_stack_n", "1", "--export_stacks", out, NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  cr_expect(strstr(g_out, "Key averages by call site (group_by_stack_n=1") != NULL, "%s", g_out);
  cr_expect(strstr(g_out, "Source Location") != NULL);
  cr_expect(strstr(g_out, "model.py(12): forward") != NULL);
  cr_expect(strstr(g_out, "Stacks: ") != NULL);
  char buf[4096];
  slurp_into(out, buf, sizeof buf);
  cr_expect_str_eq(buf,
                   "train.py(40):_step;model.py(12):_forward;aten::conv2d 20\n"
                   "train.py(40):_step;model.py(13):_forward;aten::relu 3\n");
  rc = pa_run(t, "--export_stacks", out, "--stacks_metric", "self_cpu_time_total", NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  slurp_into(out, buf, sizeof buf);
  cr_expect_str_eq(buf,
                   "train.py(40):_step;model.py(12):_forward;aten::conv2d 45\n"
                   "train.py(40):_step;model.py(13):_forward;aten::relu 25\n");
}

Test(cli, bad_input_stack_flags) {
  const char *t = fixture("torch_sync.pt.trace.json.gz");
  expect_bad_input(pa_run(t, "--group_by_stack_n", "0", NULL), "bad --group_by_stack_n value '0'");
  expect_bad_input(pa_run(t, "--group_by_stack_n", "101", NULL), "bad --group_by_stack_n value '101'");
  expect_bad_input(pa_run(t, "--export_stacks", in_dir("s.txt"), "--stacks_metric", "count", NULL),
                   "bad --stacks_metric value 'count'");
  expect_bad_input(pa_run(t, "--stacks_metric", "self_cpu_time_total", NULL), "--stacks_metric needs --export_stacks");
  expect_bad_input(pa_run(t, "--export_stacks=", NULL), "--export_stacks needs a file name");
  expect_bad_input(pa_run(t, "--export_stacks", t, NULL), "would overwrite the input trace");
  expect_bad_input(pa_run(t, "--export_stacks", in_dir("a"), "--json", in_dir("a"), NULL), "name the same file");
  /* a trace without stacks: refused before anything is written */
  expect_bad_input(pa_run(t, "--export_stacks", in_dir("s.txt"), "--json", in_dir("r.json"), NULL),
                   "carries a \"Call stack\"");
  expect_bad_input(pa_run(t, "--group_by_stack_n", "3", NULL), "carries a \"Call stack\"");
}

Test(cli, unwritable_stacks_file_leaves_no_output) {
  const char *json = in_dir("r.json");
  int rc = pa_run(stacked_trace(), "--json", json, "--export_stacks", in_dir("no/dir/s.txt"), NULL);
  cr_expect_eq(rc, 1, "stderr: %s", g_err);
  cr_expect(strstr(g_err, "cannot write") != NULL, "%s", g_err);
  cr_expect(!exists(json), "all outputs or none");
  cr_expect_eq(dir_entries(), 0);
}

/* "-" is standard output for every output (it used to write a file named "-"): the
 * tables go to stderr then, stdout carries the output alone; two outputs on "-" are bad
 * input; a failure writes nothing to stdout. */
Test(cli, dash_is_standard_output) {
  const char *t = fixture("torch_sync.pt.trace.json.gz");
  int rc = pa_run(t, "--json", "-", NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  cJSON *j = cJSON_Parse(g_out);
  cr_expect_not_null(j, "stdout is the JSON alone: %s", g_out);
  cJSON_Delete(j);
  cr_expect(strstr(g_err, "Device self time: top 10 of") != NULL, "the tables on stderr: %s", g_err);
  cr_expect_eq(dir_entries(), 0, "no file named '-'");
  rc = pa_run(t, "--html=-", NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  cr_expect(strncmp(g_out, "<!DOCTYPE html>", 15) == 0, "%.40s", g_out);
  rc = pa_run(stacked_trace(), "--export_stacks", "-", NULL);
  cr_assert_eq(rc, 0, "stderr: %s", g_err);
  cr_expect_str_eq(g_out, "train.py(40):_step;model.py(12):_forward;aten::conv2d 20\n"
                          "train.py(40):_step;model.py(13):_forward;aten::relu 3\n");
  cr_expect(strstr(g_err, "Stacks: -") != NULL, "%s", g_err);
  expect_bad_input(pa_run(t, "--json", "-", "--html", "-", NULL), "two outputs name the same file '-'");
  /* a failure after the JSON was staged: nothing on stdout */
  rc = pa_run(stacked_trace(), "--json", "-", "--export_stacks", in_dir("no/dir/s.txt"), NULL);
  cr_expect_eq(rc, 1, "stderr: %s", g_err);
  cr_expect_str_eq(g_out, "", "a failure wrote to stdout");
  expect_bad_input(pa_run(t, "--json", "-", "--export_stacks", in_dir("s.txt"), NULL), "carries a \"Call stack\"");
  /* other device nodes stay refused */
  expect_bad_input(pa_run(t, "--json", "/dev/null", NULL), "not a regular file");
}
