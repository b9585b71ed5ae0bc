/* test_cli_binary.c: runs the real profiler_demo binary in a fresh empty directory and
 * checks exit codes, messages and that nothing is written: every bad input exits 2 with
 * one line naming the flag, then the usage; --help, --version and --list_scenarios exit
 * 0; a valid run on a machine without a GPU exits 3 with the no-device line. The
 * no-device case only means something where no GPU is visible, so it skips elsewhere. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "pd_test_util.h"

#ifndef PD_DEMO_EXE
#error "PD_DEMO_EXE must name the profiler_demo binary"
#endif

typedef struct {
  int status; /* exit code, or -1 when it did not exit normally */
  char *out;  /* stdout, NUL-terminated */
  char *err;  /* stderr */
  char dir[64];
} run_t;

/* Runs the binary with args inside a new empty directory; stdout and stderr go to files
 * in a separate directory so the run's own directory can be checked for emptiness. */
static run_t run_demo(const char *const *args) {
  run_t r;
  memset(&r, 0, sizeof(r));
  snprintf(r.dir, sizeof(r.dir), "/tmp/pd_demo_run.XXXXXX");
  cr_assert_not_null(mkdtemp(r.dir));
  char capdir[] = "/tmp/pd_demo_cap.XXXXXX";
  cr_assert_not_null(mkdtemp(capdir));
  char out_path[128], err_path[128];
  snprintf(out_path, sizeof(out_path), "%s/out", capdir);
  snprintf(err_path, sizeof(err_path), "%s/err", capdir);

  char *argv[32] = {PD_DEMO_EXE};
  int argc = 1;
  for (int i = 0; args[i] != NULL && argc < 31; i++) argv[argc++] = (char *)args[i];
  argv[argc] = NULL;

  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0 || chdir(r.dir) != 0) _exit(126);
    dup2(o, 1);
    dup2(e, 2);
    execv(PD_DEMO_EXE, argv);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = pd_test_slurp(out_path);
  r.err = pd_test_slurp(err_path);
  unlink(out_path);
  unlink(err_path);
  rmdir(capdir);
  return r;
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

static void run_free(run_t *r) {
  /* Only an empty directory can be removed: a test that failed leaves evidence. */
  rmdir(r->dir);
  free(r->out);
  free(r->err);
}

#define RUN(...) run_demo((const char *const[]){__VA_ARGS__, NULL})

/* Checks a bad-input run: exit 2, stderr's first line is the message, then the usage;
 * nothing on stdout; nothing in the directory. */
static void expect_bad(const char *const *args, const char *message) {
  run_t r = run_demo(args);
  char first[1024];
  size_t n = strcspn(r.err, "\n");
  snprintf(first, sizeof(first), "%.*s", (int)n, r.err);
  char want[1024];
  snprintf(want, sizeof(want), "profiler_demo: %s", message);
  cr_expect_eq(r.status, 2, "%s: exit %d, stderr: %s", args[0], r.status, r.err);
  cr_expect_str_eq(first, want);
  cr_expect(strncmp(r.err + n, "\nusage: profiler_demo", 21) == 0, "%s: no usage after the message:\n%s", args[0],
            r.err);
  cr_expect_str_eq(r.out, "", "%s: stdout must stay empty", args[0]);
  cr_expect_eq(count_entries(r.dir), 0, "%s: something was written in %s", args[0], r.dir);
  run_free(&r);
}

#define EXPECT_BAD(message, ...) expect_bad((const char *const[]){__VA_ARGS__, NULL}, message)

Test(cli_binary, bad_inputs_exit_2_with_one_line_and_write_nothing) {
  EXPECT_BAD("--scenario must be one of clean, dataloader, sync, tiny_ops, memory_churn, got 'nope'", "--scenario",
             "nope");
  EXPECT_BAD("--batch_size must be an integer from 1 to 65536, got '-1'", "--batch_size", "-1");
  EXPECT_BAD("--batch_size must be an integer from 1 to 65536, got 'abc'", "--batch_size", "abc");
  EXPECT_BAD("--batch_size must be an integer from 1 to 65536, got '1e3'", "--batch_size=1e3");
  EXPECT_BAD("--batch_size must be an integer from 1 to 65536, got '18446744073709551617'", "--batch_size",
             "18446744073709551617");
  EXPECT_BAD("--profile_steps must be an integer from 1 to 10000, got '0'", "--profile_steps", "0");
  EXPECT_BAD("unknown flag '--frobnicate' (see --help)", "--frobnicate");
  EXPECT_BAD("--warmup_steps needs a value (an integer from 0 to 100000)", "--pin_memory", "--warmup_steps");
  EXPECT_BAD("--inject_slowdown must be a number from 0 to 10, got '12'", "--inject_slowdown", "12");
  EXPECT_BAD("--amp is a switch and takes no value, got '--amp=1'", "--amp=1");
  /* A bad value after good ones, with output flags given: still nothing created. */
  EXPECT_BAD("--tiny_ops_mode must be one of off, chain, fused, graph, got 'turbo'", "--trace_dir", "tr",
             "--output_json", "js/m.json", "--tiny_ops_mode", "turbo");
}

Test(cli_binary, help_version_and_list_exit_0_and_write_nothing) {
  run_t r = RUN("--help");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_not_null(strstr(r.out, "--inject_slowdown FRACTION"));
  cr_expect_not_null(strstr(r.out, "(default: results/metrics_demo.json)"));
  cr_expect_not_null(strstr(r.out, "Exit codes:"));
  cr_expect_str_eq(r.err, "");
  cr_expect_eq(count_entries(r.dir), 0);
  run_free(&r);

  r = RUN("--version");
  cr_expect_eq(r.status, 0);
  cr_expect(strncmp(r.out, "profiler_demo ", 14) == 0, "version: %s", r.out);
  cr_expect_eq(count_entries(r.dir), 0);
  run_free(&r);

  r = RUN("--list_scenarios");
  cr_expect_eq(r.status, 0);
  const char *names[] = {"clean\n", "dataloader\n", "sync\n", "tiny_ops\n", "memory_churn\n"};
  for (int i = 0; i < 5; i++) cr_expect_not_null(strstr(r.out, names[i]), "missing %s", names[i]);
  cr_expect_eq(count_entries(r.dir), 0);
  run_free(&r);
}

/* True when this machine has no usable CUDA device. Probed in a child so this process
 * never initializes CUDA. */
static bool no_gpu_here(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 1 : 0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

Test(cli_binary, no_device_exits_3_and_writes_nothing) {
  if (!no_gpu_here()) cr_skip_test("a CUDA device is visible; the no-device path cannot be exercised here");
  run_t r = RUN("--scenario", "clean", "--pin_memory", "--amp");
  cr_expect_eq(r.status, 3, "exit %d, stderr: %s", r.status, r.err);
  const char *lead = "profiler_demo: no CUDA device available (";
  cr_expect(strncmp(r.err, lead, strlen(lead)) == 0, "stderr: %s", r.err);
  cr_expect_not_null(strstr(r.err, "); this demo profiles GPU work\n"), "stderr: %s", r.err);
  cr_expect_eq(strchr(r.err, '\n') - r.err + 1, (long)strlen(r.err), "one line expected: %s", r.err);
  cr_expect_eq(count_entries(r.dir), 0, "the default results/ must not be created without a device");
  run_free(&r);
}

/* A bad output path: exit 2 and one line naming the flag and the path, checked before the
 * GPU is looked for (so the same on a machine with or without one), nothing created. */
static void expect_bad_output(const char *const *args, const char *needle) {
  run_t r = run_demo(args);
  cr_expect_eq(r.status, 2, "exit %d, stderr: %s", r.status, r.err);
  cr_expect_eq(strchr(r.err, '\n') - r.err + 1, (long)strlen(r.err), "one line expected: %s", r.err);
  cr_expect_not_null(strstr(r.err, needle), "'%s' not in: %s", needle, r.err);
  cr_expect_str_eq(r.out, "");
  cr_expect_eq(count_entries(r.dir), 0, "something was created in %s", r.dir);
  run_free(&r);
}
#define EXPECT_BAD_OUTPUT(needle, ...) expect_bad_output((const char *const[]){__VA_ARGS__, NULL}, needle)

Test(cli_binary, output_paths_are_checked_before_the_device) {
  char side[] = "/tmp/pd_demo_side.XXXXXX";
  cr_assert_not_null(mkdtemp(side));
  char file[128], dir[128], trace_in_file[160];
  snprintf(file, sizeof file, "%s/a_file", side);
  snprintf(dir, sizeof dir, "%s/a_dir", side);
  snprintf(trace_in_file, sizeof trace_in_file, "%s/sub", file);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  cr_assert_eq(mkdir(dir, 0700), 0);
  EXPECT_BAD_OUTPUT("--output_json '/dev/null' is not a regular file", "--output_json", "/dev/null");
  EXPECT_BAD_OUTPUT("is a directory", "--output_json", dir);
  EXPECT_BAD_OUTPUT("--trace_dir", "--trace_dir", file);
  EXPECT_BAD_OUTPUT("--trace_dir", "--trace_dir", trace_in_file, "--output_json", "m.json");
  EXPECT_BAD_OUTPUT("--output_json '/proc/no_such': cannot create", "--output_json", "/proc/no_such/m.json");
  EXPECT_BAD_OUTPUT("--output_json", "--trace_gzip", "--output_json", "/proc/version");
  rmdir(dir);
  unlink(file);
  rmdir(side);
}

/* The profiler's environment knobs are input too: a bad value is exit 2 with one line
 * naming the variable, before the GPU is looked for, nothing created. --no_profile does
 * not use them and runs as before (exit 3 here without a GPU). */
Test(cli_binary, environment_knobs_are_checked_before_the_device) {
  static const struct {
    const char *name, *value, *needle;
  } cases[] = {
      {"PD_PROF_CALIBRATE", "yes", "environment PD_PROF_CALIBRATE='yes' is not allowed (0 or 1, or unset)"},
      {"PD_PROF_CUPTI_DETACH", "", "environment PD_PROF_CUPTI_DETACH='' is not allowed"},
      {"PD_PROF_CALIBRATE", "1\n2", "environment PD_PROF_CALIBRATE='1\\x0a2'"},
      {"PD_PROF_CALIBRATE_COLD", "on", "environment PD_PROF_CALIBRATE_COLD='on' is not allowed (0 or 1, or unset)"},
      {"PD_CUPTI_OPTIONS", "kernels_only,turbo",
       "environment PD_CUPTI_OPTIONS: unknown CUPTI capture option 'turbo' (known: default,"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_assert_eq(setenv(cases[i].name, cases[i].value, 1), 0);
    EXPECT_BAD_OUTPUT(cases[i].needle, "--scenario", "clean", "--output_json", "m.json");
    cr_assert_eq(unsetenv(cases[i].name), 0);
  }
  cr_assert_eq(setenv("PD_CUPTI_OPTIONS", "kernels_only,,cupti_clock", 1), 0);
  cr_assert_eq(setenv("PD_PROF_CALIBRATE", "0", 1), 0);
  if (no_gpu_here()) { /* good values pass the check and meet the device check */
    run_t r = RUN("--scenario", "clean");
    cr_expect_eq(r.status, 3, "exit %d, stderr: %s", r.status, r.err);
    run_free(&r);
  }
  cr_assert_eq(setenv("PD_PROF_CALIBRATE", "yes", 1), 0);
  if (no_gpu_here()) {
    run_t r = RUN("--scenario", "clean", "--no_profile");
    cr_expect_eq(r.status, 3, "--no_profile does not read the knobs: exit %d, stderr: %s", r.status, r.err);
    run_free(&r);
  }
}

/* "-" is standard output for --output_json and --export_stacks (it used to name a file
 * "-"): two of them on "-" are bad input; without a GPU the run fails (exit 3) and writes
 * nothing, on stdout or in the directory; the report line goes to stderr. */
Test(cli_binary, dash_is_standard_output) {
  EXPECT_BAD("--export_stacks must differ from --output_json and --trace_dir, got '-'", "--with_stack",
             "--export_stacks", "-", "--output_json", "-");
  if (!no_gpu_here()) cr_skip_test("a CUDA device is visible; the no-device path cannot be exercised here");
  run_t r = RUN("--scenario", "clean", "--output_json", "-", "--no_profile");
  cr_expect_eq(r.status, 3, "exit %d, stderr: %s", r.status, r.err);
  cr_expect_str_eq(r.out, "", "a failed run wrote to stdout");
  cr_expect_not_null(strstr(r.err, "no CUDA device available"), "%s", r.err);
  cr_expect_eq(count_entries(r.dir), 0, "something was created in %s", r.dir);
  run_free(&r);
}

Test(cli_binary, list_scenarios_names_one_a_line) {
  run_t r = RUN("--list_scenarios", "--names");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "clean\ndataloader\nsync\ntiny_ops\nmemory_churn\n");
  cr_expect_str_eq(r.err, "");
  cr_expect_eq(count_entries(r.dir), 0);
  run_free(&r);
}
