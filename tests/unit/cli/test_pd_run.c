/* test_pd_run.c: pd_run without a GPU. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_test_util.h"
#include "run.h"

/* The argument vector of the last PARSE: the config keeps pointers into it. */
static char *g_argv[64];

static int parse_v(pd_run_config_t *c, char *err, size_t errlen, ...) {
  va_list ap;
  va_start(ap, errlen);
  int n = 0;
  g_argv[n++] = "pd_run";
  char *a;
  while ((a = va_arg(ap, char *)) != NULL && n < 63) g_argv[n++] = a;
  va_end(ap);
  g_argv[n] = NULL;
  err[0] = '\0';
  return pd_run_config_parse(n, g_argv, c, err, errlen);
}
#define PARSE(c, err, ...) parse_v((c), (err), sizeof(err), __VA_ARGS__, (char *)NULL)

/* ---- options ------------------------------------------------------------------------------ */

Test(pd_run_options, every_option_reaches_the_config) {
  pd_run_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--skip_first", "1", "--wait=2", "--warmup", "0", "--active", "4", "--repeat", "3",
                     "--step_kernel", "adam", "--trace_dir", "/tmp/t", "--output_json=/tmp/m.json", "--name", "resnet",
                     "--top_n", "5", "--profile_level", "full", "--with_stack", "--trace_gzip", "--", "./train", "-x"),
               0, "%s", err);
  cr_assert_eq(c.action, PD_RUN_RUN);
  const pd_inject_config_t *i = &c.inject;
  cr_assert_eq(i->schedule.skip_first, 1);
  cr_assert_eq(i->schedule.wait, 2);
  cr_assert_eq(i->schedule.warmup, 0);
  cr_assert_eq(i->schedule.active, 4);
  cr_assert_eq(i->schedule.repeat, 3);
  cr_assert(i->schedule_set);
  cr_assert_str_eq(i->step_kernel, "adam");
  cr_assert_str_eq(i->trace_dir, "/tmp/t");
  cr_assert_str_eq(i->output_json, "/tmp/m.json");
  cr_assert_str_eq(i->name, "resnet");
  cr_assert_eq(i->top_n, 5);
  cr_assert_eq(i->profile_level, PD_INJECT_LEVEL_FULL);
  cr_assert(i->with_stack);
  cr_assert(i->trace_gzip);
  cr_assert_eq(c.argc, 2);
  cr_assert_str_eq(c.argv[0], "./train");
  cr_assert_str_eq(c.argv[1], "-x");
  cr_assert_null(c.argv[2]);
}

Test(pd_run_options, the_program_starts_at_the_first_non_option) {
  pd_run_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--step_range", "train_step", "python3", "--wait", "9"), 0, "%s", err);
  cr_assert_str_eq(c.argv[0], "python3");
  cr_assert_str_eq(c.argv[1], "--wait", "the program's own arguments are left alone");
  cr_assert_not(c.inject.schedule_set);
  cr_assert_eq(PARSE(&c, err, "--help"), 0);
  cr_assert_eq(c.action, PD_RUN_HELP);
  cr_assert_eq(PARSE(&c, err, "--version"), 0);
  cr_assert_eq(c.action, PD_RUN_VERSION);
}

Test(pd_run_options, bad_options_fail_with_one_line) {
  const struct {
    const char *a, *b, *expect;
  } cases[] = {
      {"--bogus", "/bin/true", "unknown option '--bogus'"},
      {"--wait", "-1", "--wait must be an integer in [0, 1000000], got '-1'"},
      {"--active", "0", "--active must be an integer in [1, 1000000], got '0'"},
      {"--repeat", "x", "--repeat must be an integer"},
      {"--profile_level", "max", "--profile_level must be lean or full"},
      {"--with_stack=1", "/bin/true", "--with_stack takes no value"},
      {"--name=", "/bin/true", "--name must be a non-empty value"},
      {"--step_kernel", "a(", "is not a regular expression"},
      {"--wait", "2", "needs steps"},
      {"--", "", "no program to run"},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    pd_run_config_t c;
    char err[512];
    int rc = cases[k].b[0] != '\0' ? PARSE(&c, err, (char *)cases[k].a, (char *)cases[k].b, "/bin/true")
                                   : PARSE(&c, err, (char *)cases[k].a);
    if (strcmp(cases[k].a, "--") == 0) rc = PARSE(&c, err, "--trace_gzip");
    cr_assert_eq(rc, PD_RUN_EXIT_USAGE, "%s %s accepted", cases[k].a, cases[k].b);
    cr_assert_not_null(strstr(err, cases[k].expect), "%s: got '%s'", cases[k].a, err);
    cr_assert_null(strchr(err, '\n'));
  }
  pd_run_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--step_kernel", "a", "--step_range", "b", "/bin/true"), PD_RUN_EXIT_USAGE);
  cr_assert_not_null(strstr(err, "exclude each other"), "%s", err);
  cr_assert_eq(PARSE(&c, err, "--top_n"), PD_RUN_EXIT_USAGE);
  cr_assert_not_null(strstr(err, "--top_n needs a value"), "%s", err);
  /* --probe: with step ranges only (kernel-name steps end inside CUPTI's launch callback) */
  cr_assert_eq(PARSE(&c, err, "--probe", "--step_kernel", "adam", "/bin/true"), PD_RUN_EXIT_USAGE);
  cr_assert_not_null(strstr(err, "--probe needs --step_range"), "%s", err);
  cr_assert_eq(PARSE(&c, err, "--probe", "/bin/true"), PD_RUN_EXIT_USAGE);
  cr_assert_eq(PARSE(&c, err, "--probe", "--step_range", "train_step", "/bin/true"), 0, "%s", err);
  cr_assert(c.inject.probe);
  cr_assert_eq(PARSE(&c, err, "--probe=1", "--step_range", "s", "/bin/true"), PD_RUN_EXIT_USAGE);
  cr_assert_not_null(strstr(err, "--probe takes no value"), "%s", err);
}

Test(pd_run_options, default_names) {
  const struct {
    char *argv[4];
    const char *name;
  } cases[] = {
      {{"/usr/bin/python3.12", "tests/torch/train_step.py", "--amp", NULL}, "train_step"},
      {{"python", "-m", "my.module", NULL}, "my.module"},
      {{"./build/examples/inject_steps", "--steps", "5", NULL}, "inject_steps"},
      {{"python3", "-c", "print(1)", NULL}, "python3"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char n[64];
    pd_run_default_name(cases[i].argv, n, sizeof n);
    cr_assert_str_eq(n, cases[i].name);
  }
  pd_run_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "python3", "a/b/script.py"), 0, "%s", err);
  cr_assert_str_eq(c.inject.name, "script", "the name in the config");
}

/* ---- environment, outputs, library ------------------------------------------------------------- */

/* What pd_run accepts, the library reads back from the environment unchanged, to the byte
 * (tests/fuzz/pd_run_options checks it on any command line): a text option given twice, the
 * second shorter, leaves nothing of the first behind its terminator, and a value shorter than
 * the library's default leaves nothing of the default (the fuzzer's finding). */
Test(pd_run_env, the_library_reads_back_what_pd_run_accepted) {
  pd_run_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--step_range", "train_step", "--probe", "--output_json", "/tmp/a_longer_name/m.json",
                     "--output_json", "/tmp/m.json", "--wait", "0", "/bin/true"),
               0, "%s", err);
  cr_assert_eq(pd_inject_config_to_env(&c.inject), 0);
  pd_inject_config_t back;
  cr_assert_eq(pd_inject_config_from_env(&back, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(back.output_json, "/tmp/m.json");
  cr_assert_eq(memcmp(&back, &c.inject, sizeof back), 0, "the config changed on its way through the environment");
}

Test(pd_run_env, the_child_environment) {
  pd_run_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--step_range", "train_step", "--active", "3", "/bin/true"), 0, "%s", err);
  setenv("PD_INJECT_ROOT_PID", "1", 1);
  cr_assert_eq(pd_run_env_apply(&c, "/opt/lib/libpd_inject.so"), 0);
  cr_assert_str_eq(getenv("CUDA_INJECTION64_PATH"), "/opt/lib/libpd_inject.so");
  cr_assert_str_eq(getenv("NVTX_INJECTION64_PATH"), "/opt/lib/libpd_inject.so");
  cr_assert_str_eq(getenv("PD_INJECT_STEP_RANGE"), "train_step");
  cr_assert_str_eq(getenv("PD_INJECT_ACTIVE"), "3");
  cr_assert_str_eq(getenv("PD_INJECT_NAME"), "true");
  cr_assert_null(getenv("PD_INJECT_ROOT_PID"), "a stale root is removed; the child sets its own");
}

Test(pd_run_env, outputs_are_made_and_checked) {
  char dir[256];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_run_out");
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.trace_dir, sizeof c.trace_dir, "%s/t/u", dir);
  snprintf(c.output_json, sizeof c.output_json, "%s/j/m.json", dir);
  char err[512] = "";
  cr_assert_eq(pd_run_outputs_prepare(&c, err, sizeof err), 0, "%s", err);
  struct stat st;
  cr_assert_eq(stat(c.trace_dir, &st), 0);
  snprintf(c.output_json, sizeof c.output_json, "%s", c.trace_dir);
  cr_assert_eq(pd_run_outputs_prepare(&c, err, sizeof err), PD_RUN_EXIT_USAGE);
  cr_assert_not_null(strstr(err, "is a directory"), "%s", err);
  snprintf(c.trace_dir, sizeof c.trace_dir, "/proc/self/pd_run_no/t");
  cr_assert_eq(pd_run_outputs_prepare(&c, err, sizeof err), PD_RUN_EXIT_USAGE);
  cr_assert_not_null(strstr(err, "--trace_dir: cannot create '/proc/self/pd_run_no'"), "%s", err);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

Test(pd_run_env, the_library_is_found) {
  char lib[1024], err[512];
  unsetenv("PD_INJECT_LIBRARY");
  cr_assert_eq(pd_run_find_library("/nonexistent/pd_run", lib, sizeof lib, err, sizeof err), 0, "%s", err);
  cr_assert_not_null(strstr(lib, "libpd_inject.so"), "%s", lib);
  /* next to the binary */
  char dir[256], self[300], here[300];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_run_lib");
  snprintf(self, sizeof self, "%s/pd_run", dir);
  snprintf(here, sizeof here, "%s/libpd_inject.so", dir);
  FILE *f = fopen(here, "w");
  fclose(f);
  f = fopen(self, "w");
  fclose(f);
  cr_assert_eq(pd_run_find_library(self, lib, sizeof lib, err, sizeof err), 0, "%s", err);
  char real[300];
  cr_assert_not_null(realpath(here, real));
  cr_assert_str_eq(lib, real);
  setenv("PD_INJECT_LIBRARY", "/nonexistent/libx.so", 1);
  cr_assert_eq(pd_run_find_library(self, lib, sizeof lib, err, sizeof err), PD_RUN_EXIT_USAGE);
  cr_assert_not_null(strstr(err, "PD_INJECT_LIBRARY='/nonexistent/libx.so'"), "%s", err);
  setenv("PD_INJECT_LIBRARY", here, 1);
  cr_assert_eq(pd_run_find_library("/x", lib, sizeof lib, err, sizeof err), 0);
  unsetenv("PD_INJECT_LIBRARY");
  pd_test_tmpdir_remove(dir);
}

/* ---- the child -------------------------------------------------------------------------------------- */

static int spawn(char **argv, int *sig, char **said) {
  size_t len = 0;
  FILE *err = open_memstream(said, &len);
  int rc = pd_run_spawn(argv, err, sig);
  fclose(err);
  return rc;
}

Test(pd_run_child, exit_statuses) {
  int sig = -2;
  char *said = NULL;
  char *t[] = {"/bin/true", NULL};
  cr_assert_eq(spawn(t, &sig, &said), 0);
  cr_assert_eq(sig, 0);
  cr_assert_str_eq(said, "");
  free(said);
  char *three[] = {"/bin/sh", "-c", "exit 3", NULL};
  cr_assert_eq(spawn(three, &sig, &said), 3);
  free(said);
  char *own127[] = {"/bin/sh", "-c", "exit 127", NULL};
  cr_assert_eq(spawn(own127, &sig, &said), 127);
  cr_assert_str_eq(said, "", "the program's own 127 is not pd_run's");
  free(said);
  char *term[] = {"/bin/sh", "-c", "kill -TERM $$", NULL};
  cr_assert_eq(spawn(term, &sig, &said), 128 + SIGTERM);
  cr_assert_eq(sig, SIGTERM);
  free(said);
  cr_assert_eq(pd_run_exit_status(9), 128 + 9);
  cr_assert_eq(pd_run_exit_status(5 << 8), 5);
}

Test(pd_run_child, not_found_and_not_executable) {
  int sig = 0;
  char *said = NULL;
  char *nf[] = {"pd_run_no_such_program", NULL};
  cr_assert_eq(spawn(nf, &sig, &said), PD_RUN_EXIT_NOT_FOUND);
  cr_assert_eq(sig, -1);
  cr_assert_str_eq(said, "pd_run: pd_run_no_such_program: command not found\n");
  free(said);
  char dir[256], p[300];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_run_noexec");
  snprintf(p, sizeof p, "%s/script", dir);
  FILE *f = fopen(p, "w");
  fputs("#!/bin/sh\nexit 0\n", f);
  fclose(f);
  chmod(p, 0644);
  char *ne[] = {p, NULL};
  cr_assert_eq(spawn(ne, &sig, &said), PD_RUN_EXIT_NOT_EXEC);
  cr_assert_not_null(strstr(said, "cannot execute: Permission denied"), "%s", said);
  free(said);
  pd_test_tmpdir_remove(dir);
}

Test(pd_run_child, the_root_pid_is_the_child) {
  int sig = 0;
  char *said = NULL;
  char *a[] = {"/bin/sh", "-c", "test \"$PD_INJECT_ROOT_PID\" = \"$$\"", NULL};
  cr_assert_eq(spawn(a, &sig, &said), 0, "PD_INJECT_ROOT_PID is the exec'd program's pid");
  free(said);
}

/* A signal sent to pd_run alone reaches the program: the child asks its parent (this test,
 * in pd_run's place) to be interrupted, and its trap turns the forwarded SIGINT into exit 7. */
Test(pd_run_child, signals_are_forwarded) {
  int sig = 0;
  char *said = NULL;
  char *a[] = {"/bin/sh", "-c", "trap 'exit 7' INT; kill -INT $PPID; sleep 5 & wait", NULL};
  cr_assert_eq(spawn(a, &sig, &said), 7);
  free(said);
  char *b[] = {"/bin/sh", "-c", "trap 'exit 9' HUP; kill -HUP $PPID; sleep 5 & wait", NULL};
  cr_assert_eq(spawn(b, &sig, &said), 9);
  free(said);
}

/* ---- the report ------------------------------------------------------------------------------------ */

static const char *k_metrics =
    "{\"schema_version\":2,\"config\":{\"name\":\"toy\",\"steps_by\":\"step_kernel\"},"
    "\"device\":{\"name\":\"NVIDIA H100\"},"
    "\"steps\":3,\"metrics\":{\"avg_step_time_s\":0.01,\"gpu_busy_fraction\":0.5,\"kernels_per_step\":12,"
    "\"avg_kernel_time_us\":-4,\"dropped_records\":2},"
    "\"top_ops\":[{\"name\":\"forward\",\"calls\":3,\"self_cuda_time_us\":10.5,\"cuda_time_us\":11,"
    "\"self_cpu_time_us\":null}],"
    "\"verdict\":{\"bottleneck\":\"launch_overhead\",\"evidence\":\"GPU idle\",\"advice\":\"use CUDA graphs\","
    "\"findings\":[{\"cause\":\"sync\",\"evidence\":\"3 syncs\"}]},"
    "\"profiler_cost\":{\"est_added_us_per_step\":12.5,\"measured_added_us_per_step\":-3.25,"
    "\"measured_traced_steps\":3,\"measured_untraced_steps\":9,"
    "\"api_census\":{\"steps\":1,\"runtime_unrecorded_per_step\":832,\"driver_unrecorded_per_step\":318}},"
    "\"trace_files\":[\"t/a.pt.trace.json\"]}";

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s", path);
  fputs(text, f);
  fclose(f);
}

static char *report(const pd_run_config_t *c, int killed, int *files) {
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  *files = pd_run_report(f, c, time(NULL) - 5, killed);
  fclose(f);
  return out;
}

Test(pd_run_report, reads_the_metrics_json_back) {
  char dir[256];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_run_report");
  pd_run_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "/bin/true"), 0);
  snprintf(c.inject.output_json, sizeof c.inject.output_json, "%s/m.json", dir);
  int files = -1;
  char *out = report(&c, 0, &files);
  cr_assert_eq(files, 0);
  cr_assert_not_null(strstr(out, "nothing to profile: /bin/true wrote no metrics"), "%s", out);
  free(out);
  out = report(&c, SIGKILL, &files);
  cr_assert_not_null(strstr(out, "killed by signal 9"), "%s", out);
  free(out);

  write_file(c.inject.output_json, k_metrics);
  char child[300];
  snprintf(child, sizeof child, "%s/m.pid42.rank1.json", dir);
  write_file(child, k_metrics);
  out = report(&c, 0, &files);
  cr_assert_eq(files, 2, "the program's and its child's: %s", out);
  const char *want[] = {"toy on NVIDIA H100, 3 profiled steps (steps by step_kernel)", "GPU busy", "50%",
                        "avg kernel time              n/a", "dropped records", "forward", "Verdict: launch_overhead",
                        "advice:   use CUDA graphs", "finding:  sync: 3 syncs", "about 12.5 us per step",
                        "with 1150 API calls per step traced but not recorded",
                        "-3.2 us per step measured in the process (median of 3 recorded steps against 9 untraced)",
                        "Trace:   t/a.pt.trace.json", "m.pid42.rank1.json"};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    cr_assert_not_null(strstr(out, want[i]), "'%s' not in:\n%s", want[i], out);
  free(out);
  write_file(c.inject.output_json, "not json");
  unlink(child);
  out = report(&c, 0, &files);
  cr_assert_not_null(strstr(out, "cannot read the metrics JSON"), "%s", out);
  cr_assert_not_null(strstr(out, "nothing to profile"), "%s", out);
  free(out);
  pd_test_tmpdir_remove(dir);
}

/* ---- the binary ------------------------------------------------------------------------------------- */

static int run_binary(const char *args, char **said) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", PD_RUN_EXE, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  buf[n] = '\0';
  *said = buf;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(pd_run_binary, bad_option_before_the_program_and_a_program_without_cuda) {
  char dir[256];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_run_bin");
  char *said = NULL;
  char args[700];
  snprintf(args, sizeof args, "--wait 2 -- /bin/sh -c 'echo ran > %s/ran'", dir);
  cr_assert_eq(run_binary(args, &said), 2);
  cr_assert_str_eq(said, "pd_run: a schedule (--skip_first --wait --warmup --active --repeat) needs steps: give "
                         "--step_kernel or --step_range\n");
  cr_assert_eq(pd_test_count_files(dir, NULL), 0, "the program never started");
  snprintf(args, sizeof args, "--trace_dir %s/t --output_json %s/m.json -- /bin/sh -c 'echo out; exit 4'", dir, dir);
  cr_assert_eq(run_binary(args, &said), 4);
  cr_assert_not_null(strstr(said, "out\n"), "%s", said);
  cr_assert_not_null(strstr(said, "pd_run: nothing to profile"), "%s", said);
  cr_assert_eq(run_binary("--version", &said), 0);
  cr_assert_str_eq(said, "pd_run " PD_VERSION_STRING "\n");
  cr_assert_eq(run_binary("--help", &said), 0);
  cr_assert_not_null(strstr(said, "--step_kernel"), "%s", said);
  snprintf(args, sizeof args, "--trace_dir /proc/self/x -- /bin/true");
  cr_assert_eq(run_binary(args, &said), 2);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}
