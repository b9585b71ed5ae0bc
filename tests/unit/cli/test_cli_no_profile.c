/* test_cli_no_profile.c: profiler_demo's --no_profile without a GPU: --help lists it in
 * its group, it parses alone and with the benchmark's other flags, output preparation
 * makes no trace directory for it, the metrics JSON of such a run (through the same
 * writer the run uses) has step times but null GPU-side metrics, no verdict and no
 * trace, and the real binary still stops at the device check, writing nothing. */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "demo.h"
#include "pd/pd_scen.h"
#include "pd_test_util.h"

#ifndef PD_DEMO_EXE
#error "PD_DEMO_EXE must name the profiler_demo binary"
#endif

#define ARGV(...) ((char *const *)(const char *const[]){"profiler_demo", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((const char *const[]){"profiler_demo", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(cfg, err, ...) pd_demo_config_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (cfg), (err), sizeof(err))

/* Returns what print writes (caller frees). Not inlined: once inlined, GCC's Release build
 * takes the returned buffer for a pointer to the local that open_memstream fills. */
static __attribute__((noinline)) char *capture(void (*print)(FILE *)) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  print(f);
  fclose(f);
  return buf;
}

/* Copies n bytes of s into out with every run of white space made one space, trimmed. */
static void squash(const char *s, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  bool space = false;
  for (size_t i = 0; i < n && o + 1 < outlen; i++) {
    if (s[i] == ' ' || s[i] == '\n' || s[i] == '\t') {
      space = o > 0;
      continue;
    }
    if (space && o + 2 < outlen) out[o++] = ' ';
    space = false;
    out[o++] = s[i];
  }
  out[o] = '\0';
}

static bool path_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* ---- flag ------------------------------------------------------------------------------ */

Test(cli_no_profile, help_lists_it_in_the_profiler_and_output_group) {
  char *help = capture(pd_demo_print_help);
  const char *group = strstr(help, "\nProfiler and output:\n");
  cr_assert_not_null(group, "no 'Profiler and output' group in --help");
  const char *next_group = strstr(group + 1, "\n\n");
  const char *entry = strstr(help, "\n  --no_profile ");
  cr_assert_not_null(entry, "--help has no --no_profile entry:\n%s", help);
  cr_expect(entry > group && (next_group == NULL || entry < next_group),
            "--no_profile is not inside the 'Profiler and output' group");
  const char *next_flag = strstr(entry + 2, "\n  --");
  const char *def = strstr(entry, "(default: off)");
  cr_expect(def != NULL && (next_flag == NULL || def < next_flag), "--no_profile's entry shows no '(default: off)'");
  /* The help text, wrapped over lines, says what the JSON and the trace become. */
  char text[1024];
  squash(entry, next_flag != NULL ? (size_t)(next_flag - entry) : strlen(entry), text, sizeof(text));
  cr_expect_not_null(strstr(text, "--no_profile run the same steps without the profiler (to measure its overhead); "
                                  "the metrics JSON then has step times but no trace metrics, and no trace is "
                                  "written (default: off)"),
                     "entry: %s", text);
  cr_expect_not_null(strstr(help, "[--no_profile]"), "the usage line does not name --no_profile");
  free(help);
}

Test(cli_no_profile, off_by_default_on_when_given) {
  pd_demo_config_t c;
  char err[512];
  char *const argv[] = {"profiler_demo", NULL};
  cr_assert_eq(pd_demo_config_parse(1, argv, &c, err, sizeof(err)), 0, "%s", err);
  cr_expect_not(c.no_profile);
  cr_assert_eq(PARSE(&c, err, "--no_profile"), 0, "%s", err);
  cr_expect(c.no_profile);
  cr_expect_eq(c.action, PD_DEMO_RUN);
}

Test(cli_no_profile, is_a_switch_without_a_value) {
  pd_demo_config_t c;
  char err[512];
  cr_expect_eq(PARSE(&c, err, "--no_profile=1"), PD_DEMO_EXIT_USAGE);
  cr_expect_str_eq(err, "--no_profile is a switch and takes no value, got '--no_profile=1'");
  /* A word after it is not its value but a stray argument. */
  cr_expect_eq(PARSE(&c, err, "--no_profile", "yes"), PD_DEMO_EXIT_USAGE);
  cr_expect_str_eq(err, "unexpected argument 'yes' (flags are --name or --name=value; see --help)");
}

Test(cli_no_profile, combines_with_the_benchmark_flags_in_any_order) {
  pd_demo_config_t a, b;
  char err[512];
  cr_assert_eq(PARSE(&a, err, "--scenario", "tiny_ops", "--amp", "--pin_memory", "--profile_steps", "50",
                     "--warmup_steps", "20", "--quiet", "--output_json", "o/m.json", "--trace_dir", "o/t",
                     "--no_profile"),
               0, "%s", err);
  cr_assert_eq(PARSE(&b, err, "--no_profile", "--scenario=tiny_ops", "--amp", "--pin_memory", "--profile_steps=50",
                     "--warmup_steps=20", "--quiet", "--output_json=o/m.json", "--trace_dir=o/t"),
               0, "%s", err);
  const pd_demo_config_t *cs[] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    const pd_demo_config_t *c = cs[i];
    cr_expect(c->no_profile);
    cr_expect_eq(c->scenario, PD_SCEN_TINY_OPS);
    cr_expect(c->amp && c->pin_memory && c->quiet);
    cr_expect_eq(c->profile_steps, 50);
    cr_expect_eq(c->warmup_steps, 20);
    cr_expect_str_eq(c->output_json, "o/m.json");
    cr_expect_str_eq(c->trace_dir, "o/t");
  }
  /* With the flags that then have no effect, and the test knob: all accepted. */
  cr_assert_eq(PARSE(&a, err, "--no_profile", "--with_stack", "--top_n", "3", "--sort_by", "count",
                     "--inject_slowdown", "0.5", "--scenario", "clean"),
               0, "%s", err);
  cr_expect(a.no_profile && a.with_stack);
  cr_expect_eq(a.inject_slowdown, 0.5);
  /* The other flags' rules still hold with it. */
  cr_expect_eq(PARSE(&a, err, "--no_profile", "--inject_slowdown", "0.5", "--warmup_steps", "0"),
               PD_DEMO_EXIT_USAGE);
  cr_expect_not_null(strstr(err, "--inject_slowdown needs --warmup_steps of at least 1"), "%s", err);
  cr_expect_eq(PARSE(&a, err, "--no_profile", "--batch_size", "0"), PD_DEMO_EXIT_USAGE);
  cr_expect_str_eq(err, "--batch_size must be an integer from 1 to 65536, got '0'");
}

/* ---- output directories ------------------------------------------------------------------ */

Test(cli_no_profile, prepare_makes_no_trace_dir) {
  char base[] = "/tmp/pd_noprof_out.XXXXXX";
  cr_assert_not_null(mkdtemp(base));
  pd_demo_config_t c;
  pd_demo_config_init(&c);
  c.no_profile = true;
  snprintf(c.trace_dir, sizeof(c.trace_dir), "%s/traces/deep", base);
  snprintf(c.output_json, sizeof(c.output_json), "%s/json/m.json", base);
  pd_demo_outputs_t outs;
  char err[PD_DEMO_PATH_MAX + 256];
  cr_assert_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), 0, "%s", err);
  char p[PD_DEMO_PATH_MAX + 32];
  snprintf(p, sizeof(p), "%s/json", base);
  cr_expect(path_exists(p), "the JSON's directory must be made");
  snprintf(p, sizeof(p), "%s/traces", base);
  cr_expect_not(path_exists(p), "--no_profile must not make the trace directory");
  pd_demo_outputs_rollback(&outs);
  snprintf(p, sizeof(p), "%s/json", base);
  cr_expect_not(path_exists(p));

  /* A trace directory that could never be made does not stop a run that writes none... */
  snprintf(c.trace_dir, sizeof(c.trace_dir), "/proc/pd_no_such_dir/traces");
  cr_expect_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), 0, "%s", err);
  pd_demo_outputs_rollback(&outs);
  /* ...while a profiled run is refused with it, as before. */
  c.no_profile = false;
  cr_expect_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), PD_DEMO_EXIT_USAGE);
  cr_expect_not_null(strstr(err, "--trace_dir"), "%s", err);
  cr_expect_eq(rmdir(base), 0, "%s was left non-empty", base);
}

/* ---- the metrics JSON of a --no_profile run ------------------------------------------------ */

/* Builds the results a --no_profile run hands to the writer, as pd_demo_run() does:
 * metrics NaN-initialized, the loss read on the host, the host-timed figures from the
 * samples, no verdict, no ops, no trace. */
static void unprofiled_results(pd_metrics_t *m, const double *step_s, const double *wait_s, size_t n,
                               pd_cnn_config_t *cnn, pd_data_config_t *data, pd_device_info_t *dev,
                               pd_demo_results_t *res) {
  pd_metrics_init(m);
  m->loss_first = 2.5f;
  m->loss_last = 1.25f;
  pd_metrics_from_samples(m, step_s, wait_s, n);
  m->steps = (int)n;
  pd_cnn_config_init(cnn);
  memset(data, 0, sizeof(*data));
  data->cpu_work = 200;
  memset(dev, 0, sizeof(*dev));
  snprintf(dev->name, sizeof(dev->name), "Test GPU");
  dev->compute_major = 9;
  *res = (pd_demo_results_t){.cnn_cfg = cnn,
                             .data_cfg = data,
                             .dev = dev,
                             .metrics = m,
                             .step_s = step_s,
                             .wait_s = wait_s,
                             .nsamples = n,
                             .verdict = NULL,
                             .ops = NULL,
                             .traces = NULL,
                             .ntraces = 0};
}

Test(cli_no_profile, metrics_json_has_step_times_and_null_gpu_metrics) {
  char dir[] = "/tmp/pd_noprof_json.XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  pd_demo_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--scenario", "clean", "--profile_steps", "4", "--no_profile"), 0, "%s", err);
  snprintf(c.output_json, sizeof(c.output_json), "%s/m.json", dir);
  const double step_s[] = {0.004, 0.001, 0.003, 0.002};
  const double wait_s[] = {0.0001, 0.0002, 0.0003, 0.0004};
  pd_metrics_t m;
  pd_cnn_config_t cnn;
  pd_data_config_t data;
  pd_device_info_t dev;
  pd_demo_results_t res;
  unprofiled_results(&m, step_s, wait_s, 4, &cnn, &data, &dev, &res);
  cr_assert_eq(pd_demo_metrics_write(&c, &res), 0);

  cJSON *root = pd_test_read_json(c.output_json);
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(config, "no_profile")), "config.no_profile must be true");
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(config, "scenario")), "clean");
  const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(root, "metrics");
  cr_assert(cJSON_IsObject(metrics));
  /* Host-timed: numbers, from the samples. */
  const cJSON *avg = cJSON_GetObjectItemCaseSensitive(metrics, "avg_step_time_s");
  const cJSON *p50 = cJSON_GetObjectItemCaseSensitive(metrics, "p50_step_time_s");
  cr_assert(cJSON_IsNumber(avg) && cJSON_IsNumber(p50));
  cr_expect_float_eq(avg->valuedouble, 0.0025, 1e-12);
  cr_expect_float_eq(p50->valuedouble, 0.0025, 1e-12);
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(metrics, "avg_dataloader_wait_s")));
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(metrics, "loss_last")));
  /* GPU-side: every one null, not a made-up 0. */
  const char *gpu_side[] = {"gpu_busy_fraction",    "kernels_per_step",           "avg_kernel_time_us",
                            "sync_calls_per_step",  "device_alloc_calls_per_step", "h2d_bytes_per_step",
                            "peak_device_memory_bytes", "dropped_records",        "runtime_calls_per_step"};
  for (size_t i = 0; i < sizeof(gpu_side) / sizeof(gpu_side[0]); i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(metrics, gpu_side[i]);
    cr_expect(cJSON_IsNull(v), "metrics.%s must be null without the profiler", gpu_side[i]);
  }
  const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "step_times_s");
  cr_expect_eq(cJSON_GetArraySize(steps), 4);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "dataloader_wait_s")), 4);
  cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "verdict")), "verdict must be null");
  const cJSON *traces = cJSON_GetObjectItemCaseSensitive(root, "trace_files");
  cr_expect(cJSON_IsArray(traces) && cJSON_GetArraySize(traces) == 0, "trace_files must be empty");
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "top_ops");
  cr_expect(cJSON_IsArray(ops) && cJSON_GetArraySize(ops) == 0, "top_ops must be empty");
  cJSON_Delete(root);

  /* A profiled run's config has no no_profile key (its baselines have none). */
  c.no_profile = false;
  cr_assert_eq(pd_demo_metrics_write(&c, &res), 0);
  root = pd_test_read_json(c.output_json);
  config = cJSON_GetObjectItemCaseSensitive(root, "config");
  cr_expect_null(cJSON_GetObjectItemCaseSensitive(config, "no_profile"));
  cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(config, "inject_slowdown"));
  cJSON_Delete(root);
  cr_expect_eq(unlink(c.output_json), 0);
  cr_expect_eq(rmdir(dir), 0, "the writer left a temporary file in %s", dir);
}

/* ---- the binary ------------------------------------------------------------------------------ */

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

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

Test(cli_no_profile, binary_without_a_device_exits_3_and_writes_nothing) {
  if (!no_gpu_here()) cr_skip_test("a CUDA device is visible; the no-device path cannot be exercised here");
  char dir[] = "/tmp/pd_noprof_run.XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char errpath[] = "/tmp/pd_noprof_err.XXXXXX";
  int efd = mkstemp(errpath);
  cr_assert(efd >= 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull < 0 || chdir(dir) != 0) _exit(126);
    dup2(devnull, 1);
    dup2(efd, 2);
    execl(PD_DEMO_EXE, PD_DEMO_EXE, "--scenario", "clean", "--amp", "--pin_memory", "--no_profile", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  char err[2048] = {0};
  ssize_t n = pread(efd, err, sizeof(err) - 1, 0);
  close(efd);
  unlink(errpath);
  cr_expect(n > 0);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "exit status %d, stderr: %s", st, err);
  cr_expect(strncmp(err, "profiler_demo: no CUDA device available (", 41) == 0, "stderr: %s", err);
  cr_expect_eq(count_entries(dir), 0, "nothing may be written without a device");
  cr_expect_eq(rmdir(dir), 0);
}
