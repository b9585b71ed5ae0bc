/* test_gate_cli.c: the real profile_compare program on fixtures, without a GPU.
 *
 * Runs are built in the test (a 10 ms step with 1% step-to-step noise from a fixed-seed
 * generator, scaled per run) and written as metrics JSONs into a fresh temporary folder;
 * malformed inputs are the small files in data/. Each case checks the exit status (0 pass,
 * 1 regression, 2 bad input) and what the table, JSON or Markdown says.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "pd_test_util.h"

#define H100 "NVIDIA H100 80GB HBM3"
#define NSTEPS 16

static char g_dir[256];
static char g_out[1 << 16]; /* stdout + stderr of the last run (stderr alone with g_split) */
static bool g_split;          /* the next runs keep stdout apart, in g_stdout */
static char g_stdout[1 << 16];

static void gate_setup(void) {
  snprintf(g_dir, sizeof(g_dir), "/tmp/pd_gate_test.XXXXXX");
  cr_assert_not_null(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
}

static void gate_teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(cli, .init = gate_setup, .fini = gate_teardown);

/* Returns "<tmp dir>/<name>" (pd_test_path's rotating buffers). */
static const char *path_in(const char *name) { return pd_test_path(g_dir, name); }

static const char *data_file(const char *name) {
  static char bufs[4][512];
  static int next;
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (run through ctest)");
  char *b = bufs[next++ % 4];
  snprintf(b, 512, "%s/tests/unit/gate/data/%s", src, name);
  return b;
}

/* The address-space limit of the next runs in MiB (0: none), to make them run out of memory. */
static long g_as_limit_mib;

/* Runs profile_compare with a NULL-terminated argument list; returns its exit status and
 * leaves its output in g_out. */
static int pc_run(const char *first, ...) {
  const char *bin = getenv("PD_BINARY_DIR");
  cr_assert_not_null(bin, "PD_BINARY_DIR is not set (run through ctest)");
  char exe[512];
  snprintf(exe, sizeof(exe), "%s/src/cli/profile_compare/profile_compare", bin);
  const char *argv[32] = {exe};
  int argc = 1;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a != NULL && argc < 31; a = va_arg(ap, const char *)) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  const char *log = path_in("pc.log");
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fo = g_split ? open(path_in("pc.stdout"), O_WRONLY | O_CREAT | O_TRUNC, 0644) : fd;
    if (fd < 0 || fo < 0 || chdir(g_dir) != 0) _exit(126); /* a file named "-" would land in g_dir */
    dup2(fo, 1);
    dup2(fd, 2);
    pd_test_child_limit_as(g_as_limit_mib);
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  FILE *f = fopen(log, "r");
  size_t n = f ? fread(g_out, 1, sizeof(g_out) - 1, f) : 0;
  if (f) fclose(f);
  g_out[n] = '\0';
  g_stdout[0] = '\0';
  if (g_split && (f = fopen(path_in("pc.stdout"), "r")) != NULL) {
    g_stdout[fread(g_stdout, 1, sizeof(g_stdout) - 1, f)] = '\0';
    fclose(f);
    unlink(path_in("pc.stdout"));
  }
  unlink(log);
  cr_assert(WIFEXITED(status), "profile_compare crashed:\n%s", g_out);
  cr_assert_neq(WEXITSTATUS(status), 127, "cannot run %s", exe);
  return WEXITSTATUS(status);
}

/* ---- fixtures ---------------------------------------------------------------------------- */

static unsigned long long g_rng = 88172645463325252ull;
static double rng_normal(void) { return pd_test_rng_normal(&g_rng); }

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A run of the clean scenario whose step time is host_scale x 10 ms (1% step noise) and
 * whose GPU time is gpu_scale x 9 ms; every burst_every-th step (0: none) takes burst x
 * as long, like host interference. Its kernel table: sgemm (6 ms per step) and k_adamw
 * (3 ms), both scaled by gpu_scale; its op table: forward (2 ms of self CPU per step). */
static cJSON *fx_run_full(double host_scale, double gpu_scale, int nsteps, int burst_every, double burst) {
  double st[64], dw[64], sorted[64], sum = 0, wsum = 0;
  const double scale = gpu_scale;
  for (int i = 0; i < nsteps; i++) {
    st[i] = 0.010 * host_scale * (1.0 + 0.01 * rng_normal());
    if (burst_every > 0 && i % burst_every == burst_every - 1) st[i] *= burst;
    dw[i] = 0.0002 * (1.0 + 0.1 * rng_normal());
    sum += st[i];
    wsum += dw[i];
    sorted[i] = st[i];
  }
  qsort(sorted, (size_t)nsteps, sizeof(double), dbl_cmp);
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "schema_version", 1);
  cJSON *cfg = cJSON_AddObjectToObject(d, "config");
  cJSON_AddStringToObject(cfg, "scenario", "clean");
  cJSON_AddNumberToObject(cfg, "batch_size", 64);
  cJSON *dev = cJSON_AddObjectToObject(d, "device");
  cJSON_AddStringToObject(dev, "name", H100);
  cJSON_AddStringToObject(dev, "compute_capability", "9.0");
  cJSON_AddNumberToObject(dev, "sm_count", 132);
  cJSON_AddNumberToObject(dev, "driver", 13000);
  cJSON_AddNumberToObject(dev, "runtime", 13000);
  cJSON_AddNumberToObject(dev, "cupti", 130001);
  cJSON *m = cJSON_AddObjectToObject(d, "metrics");
  cJSON_AddNumberToObject(m, "avg_step_time_s", sum / nsteps);
  cJSON_AddNumberToObject(m, "avg_dataloader_wait_s", wsum / nsteps);
  cJSON_AddNumberToObject(m, "p50_step_time_s", sorted[nsteps / 2]);
  cJSON_AddNumberToObject(m, "p95_step_time_s", sorted[nsteps - 1]);
  cJSON_AddNumberToObject(m, "dataloader_wait_fraction", wsum / (sum + wsum));
  cJSON_AddNumberToObject(m, "gpu_busy_fraction", 0.92);
  cJSON_AddNumberToObject(m, "kernels_per_step", 120);
  cJSON_AddNumberToObject(m, "avg_kernel_time_us", 75.0 * scale);
  cJSON_AddNumberToObject(m, "gpu_kernel_time_per_step_us", 9000.0 * scale);
  cJSON_AddNumberToObject(m, "runtime_calls_per_step", 260);
  cJSON_AddNumberToObject(m, "sync_calls_per_step", 0);
  cJSON_AddNumberToObject(m, "sync_time_per_step_us", 0);
  cJSON_AddNumberToObject(m, "device_alloc_calls_per_step", 0);
  cJSON_AddNumberToObject(m, "device_alloc_time_per_step_us", 0);
  cJSON_AddNumberToObject(m, "h2d_bytes_per_step", 786432);
  cJSON_AddNumberToObject(m, "peak_device_memory_bytes", 52428800);
  cJSON_AddNumberToObject(m, "loss_first", 2.31);
  cJSON_AddNumberToObject(m, "loss_last", 1.87);
  cJSON_AddNumberToObject(m, "dropped_records", 0);
  cJSON_AddNumberToObject(d, "steps", nsteps);
  cJSON_AddItemToObject(d, "step_times_s", cJSON_CreateDoubleArray(st, nsteps));
  cJSON_AddItemToObject(d, "dataloader_wait_s", cJSON_CreateDoubleArray(dw, nsteps));
  cJSON *v = cJSON_AddObjectToObject(d, "verdict");
  cJSON_AddStringToObject(v, "bottleneck", "compute");
  cJSON_AddStringToObject(v, "rule", "none");
  cJSON_AddStringToObject(v, "evidence", "GPU busy 92% of the step");
  cJSON *ops = cJSON_AddArrayToObject(d, "top_ops");
  cJSON *op = cJSON_CreateObject();
  cJSON_AddStringToObject(op, "name", "forward");
  cJSON_AddNumberToObject(op, "calls", nsteps);
  cJSON_AddNumberToObject(op, "self_cpu_time_us", 2000.0 * host_scale * nsteps);
  cJSON_AddItemToArray(ops, op);
  cJSON *kern = cJSON_AddArrayToObject(d, "top_kernels");
  static const struct {
    const char *name;
    double us, calls;
  } k_kern[] = {{"sgemm", 6000.0, 10}, {"k_adamw", 3000.0, 1}};
  for (size_t k = 0; k < 2; k++) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "name", k_kern[k].name);
    cJSON_AddNumberToObject(r, "calls", k_kern[k].calls * nsteps);
    cJSON_AddNumberToObject(r, "self_cuda_time_us", k_kern[k].us * gpu_scale * nsteps);
    cJSON_AddItemToArray(kern, r);
  }
  cJSON_AddArrayToObject(d, "trace_files");
  cJSON *tool = cJSON_AddObjectToObject(d, "tool");
  cJSON_AddStringToObject(tool, "name", "profiler_demo");
  cJSON_AddStringToObject(tool, "version", "0.1.0");
  return d;
}

static cJSON *fx_run_bursty(double scale, int nsteps, int burst_every, double burst) {
  return fx_run_full(scale, scale, nsteps, burst_every, burst);
}
static cJSON *fx_run(double scale, int nsteps) { return fx_run_bursty(scale, nsteps, 0, 1.0); }

static const char *fx_write(cJSON *doc, const char *name) {
  const char *p = path_in(name);
  char *text = cJSON_Print(doc);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
  free(text);
  cJSON_Delete(doc);
  return p;
}

static cJSON *fx_load(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s was not written", path);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  cJSON *d = cJSON_Parse(buf);
  cr_assert_not_null(d, "%s is not JSON", path);
  return d;
}

static void fx_set_metric(cJSON *doc, const char *metric, cJSON *value) {
  cJSON *m = cJSON_GetObjectItem(doc, "metrics");
  if (cJSON_GetObjectItem(m, metric) != NULL)
    cJSON_ReplaceItemInObject(m, metric, value);
  else
    cJSON_AddItemToObject(m, metric, value);
}

/* A baseline promoted from five runs within +-0.4% of each other in step time. */
#define NBASE 5
static const char *fx_baseline(void) {
  static const double scales[NBASE] = {1.000, 1.004, 0.997, 1.002, 0.999};
  const char *args[NBASE + 10];
  int n = 0;
  args[n++] = "--promote";
  for (int i = 0; i < NBASE; i++) {
    char name[32];
    snprintf(name, sizeof(name), "run%d.json", i);
    args[n++] = fx_write(fx_run(scales[i], NSTEPS), name);
  }
  const char *base = path_in("baseline.json");
  cr_assert_eq(pc_run(args[0], args[1], args[2], args[3], args[4], args[5], "-o", base,
                      "--commit", "abc123", "--command", "profiler_demo --scenario clean", NULL),
               0, "%s", g_out);
  return base;
}

/* Returns the verdict text of a metric's row in the JSON report at path. */
static const char *row_verdict(cJSON *report, const char *metric) {
  const cJSON *row = NULL;
  cJSON_ArrayForEach(row, cJSON_GetObjectItem(report, "rows")) {
    if (strcmp(cJSON_GetObjectItem(row, "metric")->valuestring, metric) == 0)
      return cJSON_GetObjectItem(row, "verdict")->valuestring;
  }
  return "(no row)";
}

/* Compares current with base writing a JSON report; returns exit status and the report. */
static int compare_json(const char *current, const char *base, cJSON **report) {
  const char *out = path_in("report.json");
  remove(out);
  int rc = pc_run(current, base, "--json", out, NULL);
  *report = rc <= 1 ? fx_load(out) : NULL;
  return rc;
}

/* ---- cases ---------------------------------------------------------------------------------- */

Test(cli, promote_merges_runs) {
  const char *base = fx_baseline();
  cJSON *b = fx_load(base);
  cr_assert_eq(cJSON_GetObjectItem(b, "schema_version")->valueint, 3);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "runs")), NBASE);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "step_times_s")), NBASE * NSTEPS);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "dataloader_wait_s")), NBASE * NSTEPS);
  /* metrics: the median of the runs' values, what a comparison reads */
  double vals[NBASE];
  int k = 0;
  const cJSON *run = NULL;
  cJSON_ArrayForEach(run, cJSON_GetObjectItem(b, "runs")) {
    vals[k++] = cJSON_GetObjectItem(cJSON_GetObjectItem(run, "metrics"), "avg_step_time_s")->valuedouble;
  }
  qsort(vals, NBASE, sizeof(double), dbl_cmp);
  double median = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "metrics"), "avg_step_time_s")->valuedouble;
  cr_assert_float_eq(median, vals[NBASE / 2], 1e-15);
  const cJSON *pol = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "policy"), "avg_step_time_s");
  cr_assert_str_eq(cJSON_GetObjectItem(pol, "direction")->valuestring, "lower_is_better");
  cr_assert_str_eq(cJSON_GetObjectItem(pol, "mode")->valuestring, "significance");
  cr_assert_str_eq(cJSON_GetObjectItem(pol, "class")->valuestring, "host");
  cr_assert_gt(cJSON_GetObjectItem(pol, "tolerance")->valuedouble, 0.0);
  pol = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "policy"), "gpu_kernel_time_per_step_us");
  cr_assert_str_eq(cJSON_GetObjectItem(pol, "class")->valuestring, "device");
  /* the kernel and op tables of all runs, summed, and the steps they cover */
  cr_assert_eq(cJSON_GetObjectItem(b, "tables_steps")->valueint, NBASE * NSTEPS);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "top_kernels")), 2);
  pol = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "policy"), "step_time_p10_s");
  cr_assert_not_null(pol, "the derived statistic has a policy too");
  cr_assert_str_eq(cJSON_GetObjectItem(pol, "mode")->valuestring, "significance");
  pol = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "policy"), "kernels_per_step");
  cr_assert_str_eq(cJSON_GetObjectItem(pol, "mode")->valuestring, "exact");
  const cJSON *prov = cJSON_GetObjectItem(b, "provenance");
  cr_assert_str_eq(cJSON_GetObjectItem(prov, "device")->valuestring, H100);
  cr_assert_str_eq(cJSON_GetObjectItem(prov, "git_commit")->valuestring, "abc123");
  cr_assert_str_eq(cJSON_GetObjectItem(prov, "command")->valuestring,
                   "profiler_demo --scenario clean");
  cr_assert_str_eq(cJSON_GetObjectItem(prov, "tool_version")->valuestring, "0.1.0");
  cr_assert_eq(cJSON_GetObjectItem(prov, "driver")->valueint, 13000);
  cr_assert_eq(cJSON_GetObjectItem(prov, "runs")->valueint, NBASE);
  cr_assert(cJSON_IsString(cJSON_GetObjectItem(prov, "date")));
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "verdict"), "bottleneck")->valuestring,
                   "compute");
  cJSON_Delete(b);

  /* A baseline can be merged again: its runs are taken over. */
  const char *extra = fx_write(fx_run(1.002, NSTEPS), "extra_run.json");
  const char *more = path_in("baseline_more.json");
  cr_assert_eq(pc_run("--promote", base, extra, "-o", more, NULL), 0, "%s", g_out);
  b = fx_load(more);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "runs")), NBASE + 1);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "step_times_s")), (NBASE + 1) * NSTEPS);
  cJSON_Delete(b);
}

Test(cli, promote_refuses_mixed_gpus_and_scenarios) {
  const char *r0 = fx_write(fx_run(1.0, NSTEPS), "run0.json");
  cJSON *other = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(other, "device"), "name",
                            cJSON_CreateString("NVIDIA A100-SXM4-40GB"));
  const char *r1 = fx_write(other, "run1.json");
  const char *out = path_in("b.json");
  cr_assert_eq(pc_run("--promote", r0, r1, "-o", out, NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "one GPU model") != NULL, "%s", g_out);
  cr_assert_neq(access(out, F_OK), 0, "nothing may be written on bad input");
  cJSON *scen = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(scen, "config"), "scenario",
                            cJSON_CreateString("sync"));
  r1 = fx_write(scen, "run1.json");
  cr_assert_eq(pc_run("--promote", r0, r1, "-o", out, NULL), 2, "%s", g_out);
  cr_assert_neq(access(out, F_OK), 0);
}

Test(cli, equal_run_passes) {
  const char *base = fx_baseline();
  /* run0 is one of the runs the baseline was made of */
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(path_in("run0.json"), base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(cJSON_GetObjectItem(rep, "result")->valuestring, "pass");
  cr_assert_str_eq(row_verdict(rep, "avg_step_time_s"), "ok");
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "ok");
  cr_assert_str_eq(row_verdict(rep, "kernels_per_step"), "ok");
  cr_assert_str_eq(row_verdict(rep, "verdict.bottleneck"), "ok");
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "counts"), "regressed")->valueint, 0);
  cJSON_Delete(rep);
  /* A plain metrics JSON works as a baseline too: identical files pass. */
  cr_assert_eq(pc_run(path_in("run1.json"), path_in("run1.json"), NULL), 0, "%s", g_out);
}

Test(cli, small_wobble_passes) {
  const char *base = fx_baseline();
  /* 1.5% slower: inside the shift tolerance (3%), even though a rank test alone would
   * call it significant; counts unchanged */
  const char *cur = fx_write(fx_run(1.015, NSTEPS), "cur.json");
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(cur, base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "avg_step_time_s"), "ok");
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "ok");
  cJSON_Delete(rep);
}

Test(cli, clear_slowdown_fails) {
  const char *base = fx_baseline();
  const char *cur = fx_write(fx_run(1.10, NSTEPS), "cur.json");
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(cur, base, &rep), 1, "%s", g_out);
  /* GPU and host 10% slower: the device time fails its tight band; the host times stay
   * within the tolerance a stored baseline allows across hosts, and the table shows them */
  cr_assert_str_eq(row_verdict(rep, "gpu_kernel_time_per_step_us"), "regressed");
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "ok");
  cr_assert_str_eq(row_verdict(rep, "avg_step_time_s"), "ok");
  cr_assert_str_eq(cJSON_GetObjectItem(rep, "result")->valuestring, "fail");
  const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "rows"), 0);
  cr_assert_str_eq(cJSON_GetObjectItem(row, "metric")->valuestring, "avg_step_time_s");
  cr_assert_lt(cJSON_GetObjectItem(row, "p_value")->valuedouble, 0.01);
  cr_assert_float_eq(cJSON_GetObjectItem(row, "change_pct")->valuedouble, 10.0, 2.0);
  /* explained: both kernels slower, the larger change first */
  const cJSON *ch = cJSON_GetObjectItem(rep, "changes");
  cr_assert_geq(cJSON_GetArraySize(ch), 2);
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "name")->valuestring, "sgemm");
  cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "now_us_per_step")->valuedouble, 6600.0, 30.0);
  cJSON_Delete(rep);
  cr_assert(strstr(g_out, "result: FAIL") != NULL, "%s", g_out);
  cr_assert(strstr(g_out, "what changed") != NULL && strstr(g_out, "sgemm") != NULL, "%s", g_out);

  /* a step twice as slow on the host fails the host times too */
  cr_assert_eq(compare_json(fx_write(fx_run_full(2.0, 1.0, NSTEPS, 0, 1.0), "cur.json"), base, &rep), 1, "%s",
               g_out);
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "regressed");
  cr_assert_str_eq(row_verdict(rep, "avg_step_time_s"), "regressed");
  cr_assert_str_eq(row_verdict(rep, "p50_step_time_s"), "regressed");
  cr_assert_str_eq(row_verdict(rep, "gpu_kernel_time_per_step_us"), "ok");
  cJSON_Delete(rep);
}

/* What a new runner looks like: the host 45% slower in every step (fresh H100 hosts moved
 * by up to +52%), the GPU the same: within policy. A 3% GPU-side slowdown on a host that
 * did not record the baseline fails, and the explanation names the kernel. */
Test(cli, another_host_passes_a_gpu_slowdown_fails) {
  const char *base = fx_baseline();
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(fx_run_full(1.45, 1.0, NSTEPS, 0, 1.0), "cur.json"), base, &rep), 0, "%s",
               g_out);
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "ok");
  cJSON_Delete(rep);
  cJSON *cur = fx_run_full(1.2, 1.0, NSTEPS, 0, 1.0);
  fx_set_metric(cur, "gpu_kernel_time_per_step_us", cJSON_CreateNumber(9270.0));
  cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItem(cur, "top_kernels"), 1); /* k_adamw: +270 us per step */
  cJSON_ReplaceItemInObject(k, "self_cuda_time_us", cJSON_CreateNumber(3270.0 * NSTEPS));
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), base, &rep), 1, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "gpu_kernel_time_per_step_us"), "regressed");
  const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "changes"), 0);
  cr_assert_not_null(ch, "%s", g_out);
  cr_assert_str_eq(cJSON_GetObjectItem(ch, "name")->valuestring, "forward", "the host op moved most (+400 us)");
  cr_assert(strstr(g_out, "k_adamw") != NULL, "%s", g_out);
  cJSON_Delete(rep);
}

/* A baseline with runs recorded in a slow state of the machine (two of seven 21% slower
 * in every step, as seen on an H100): the shift statistic's baseline value is the median
 * over runs, so the slow runs do not raise the level a slowdown is measured from. */
Test(cli, slow_baseline_runs_do_not_hide_a_slowdown) {
  static const double scales[7] = {1.000, 1.21, 0.998, 1.002, 1.21, 0.999, 1.001};
  const char *args[7];
  for (int i = 0; i < 7; i++) {
    char name[32];
    snprintf(name, sizeof(name), "srun%d.json", i);
    args[i] = fx_write(fx_run(scales[i], NSTEPS), name);
  }
  const char *base = path_in("slow_baseline.json");
  cr_assert_eq(pc_run("--promote", args[0], args[1], args[2], args[3], args[4], args[5], args[6],
                      "-o", base, NULL),
               0, "%s", g_out);
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(fx_run_full(2.0, 1.0, NSTEPS, 0, 1.0), "cur.json"), base, &rep), 1, "%s",
               g_out);
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "regressed");
  /* the baseline's value is the normal runs' level, not pulled up by the slow two */
  const cJSON *row = NULL;
  cJSON_ArrayForEach(row, cJSON_GetObjectItem(rep, "rows")) {
    if (strcmp(cJSON_GetObjectItem(row, "metric")->valuestring, "step_time_p10_s") == 0)
      cr_assert_lt(cJSON_GetObjectItem(row, "baseline")->valuedouble, 0.0101);
  }
  cJSON_Delete(rep);
  cr_assert_eq(compare_json(fx_write(fx_run(1.0, NSTEPS), "cur.json"), base, &rep), 0, "%s",
               g_out);
  cJSON_Delete(rep);
}

/* A run of the dataloader bottleneck: the verdict says so. */
static cJSON *fx_run_dataloader(double scale) {
  cJSON *d = fx_run(scale, NSTEPS);
  cJSON *v = cJSON_GetObjectItem(d, "verdict");
  cJSON_ReplaceItemInObject(v, "bottleneck", cJSON_CreateString("dataloader"));
  return d;
}

/* With the dataloader bottleneck the step-time statistics are reported, not gated (the
 * idle GPU's step time wanders between hosts); a slower step then passes, while a count
 * still fails. */
Test(cli, dataloader_baseline_reports_step_time_only) {
  const char *args[3];
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof(name), "drun%d.json", i);
    args[i] = fx_write(fx_run_dataloader(1.0 + 0.002 * i), name);
  }
  const char *base = path_in("dl_baseline.json");
  cr_assert_eq(pc_run("--promote", args[0], args[1], args[2], "-o", base, NULL), 0, "%s", g_out);
  cJSON *b = fx_load(base);
  const char *const step[] = {"avg_step_time_s", "p50_step_time_s", "p95_step_time_s",
                              "step_time_p10_s"};
  for (size_t i = 0; i < 4; i++) {
    const cJSON *pol = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "policy"), step[i]);
    cr_assert_not_null(pol, "no policy for %s", step[i]);
    cr_assert_str_eq(cJSON_GetObjectItem(pol, "direction")->valuestring, "none", "%s", step[i]);
  }
  const cJSON *kpol = cJSON_GetObjectItem(cJSON_GetObjectItem(b, "policy"), "kernels_per_step");
  cr_assert_str_eq(cJSON_GetObjectItem(kpol, "direction")->valuestring, "lower_is_better");
  cJSON_Delete(b);
  /* Every step 60% slower (what an H100 host showed), the GPU work the same. */
  cJSON *slow = fx_run_dataloader(1.6), *cur = fx_run_dataloader(1.0);
  cJSON_ReplaceItemInObject(cur, "step_times_s",
                            cJSON_Duplicate(cJSON_GetObjectItem(slow, "step_times_s"), 1));
  for (size_t i = 0; i < 3; i++)
    fx_set_metric(cur, step[i],
                  cJSON_Duplicate(cJSON_GetObjectItem(cJSON_GetObjectItem(slow, "metrics"), step[i]), 1));
  cJSON_Delete(slow);
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "ok");
  cJSON_Delete(rep);
  cJSON *more = fx_run_dataloader(1.0);
  fx_set_metric(more, "kernels_per_step", cJSON_CreateNumber(999));
  cr_assert_eq(compare_json(fx_write(more, "cur.json"), base, &rep), 1, "%s", g_out);
  cJSON_Delete(rep);
}

Test(cli, bursts_of_slow_steps_are_not_a_slowdown) {
  /* every 4th step 1.4x as long (host interference): the mean rises 10%, p95 40%, the
   * median and the 10th percentile stay; within policy */
  const char *base = fx_baseline();
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(fx_run_bursty(1.0, NSTEPS, 4, 1.4), "cur.json"), base, &rep),
               0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "ok");
  cr_assert_str_eq(row_verdict(rep, "avg_step_time_s"), "ok");
  cr_assert_str_eq(row_verdict(rep, "p95_step_time_s"), "ok");
  cJSON_Delete(rep);
  /* bursts that more than double the tail (every 4th step 3.5x) fail on p95 */
  cr_assert_eq(compare_json(fx_write(fx_run_bursty(1.0, NSTEPS, 4, 3.5), "cur.json"), base, &rep),
               1, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "p95_step_time_s"), "regressed");
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "ok");
  cJSON_Delete(rep);
}

Test(cli, clear_speedup_is_improved_not_failed) {
  const char *base = fx_baseline();
  const char *cur = fx_write(fx_run(0.90, NSTEPS), "cur.json");
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(cur, base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "gpu_kernel_time_per_step_us"), "improved");
  cJSON_Delete(rep);
  /* twenty times faster on the host: the host times improve beyond their cross-host
   * tolerance (90%); the unchanged data wait is now 29% of the step instead of 2%, which
   * the wait fraction's band reports as a regression */
  cr_assert_eq(compare_json(fx_write(fx_run_full(0.05, 1.0, NSTEPS, 0, 1.0), "cur.json"), base, &rep), 1, "%s",
               g_out);
  cr_assert_str_eq(row_verdict(rep, "dataloader_wait_fraction"), "regressed");
  cr_assert_str_eq(row_verdict(rep, "avg_step_time_s"), "improved");
  cr_assert_str_eq(row_verdict(rep, "p50_step_time_s"), "improved");
  cJSON_Delete(rep);
}

Test(cli, count_changes_compare_exactly) {
  const char *base = fx_baseline();
  cJSON *more = fx_run(1.0, NSTEPS);
  fx_set_metric(more, "kernels_per_step", cJSON_CreateNumber(121));
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(more, "cur.json"), base, &rep), 1, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "kernels_per_step"), "regressed");
  cJSON_Delete(rep);
  cJSON *fewer = fx_run(1.0, NSTEPS);
  fx_set_metric(fewer, "kernels_per_step", cJSON_CreateNumber(12));
  cr_assert_eq(compare_json(fx_write(fewer, "cur.json"), base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "kernels_per_step"), "improved");
  cJSON_Delete(rep);
}

Test(cli, changed_bottleneck_fails) {
  const char *base = fx_baseline();
  cJSON *cur = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur, "verdict"), "bottleneck",
                            cJSON_CreateString("sync"));
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), base, &rep), 1, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "verdict.bottleneck"), "regressed");
  cJSON_Delete(rep);
}

Test(cli, missing_metric_fails) {
  const char *base = fx_baseline();
  cJSON *cur = fx_run(1.0, NSTEPS);
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cur, "metrics"), "sync_calls_per_step");
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), base, &rep), 1, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "sync_calls_per_step"), "missing");
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "counts"), "missing")->valueint, 1);
  cJSON_Delete(rep);
}

Test(cli, new_metric_is_reported) {
  const char *base = fx_baseline();
  cJSON *cur = fx_run(1.0, NSTEPS);
  fx_set_metric(cur, "l2_hit_rate", cJSON_CreateNumber(0.5));
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "l2_hit_rate"), "new");
  cJSON_Delete(rep);
  cr_assert(strstr(g_out, "l2_hit_rate") != NULL, "the table must show it:\n%s", g_out);
}

Test(cli, zero_values) {
  /* sync calls 0 -> 0 is a match; 0 -> 2 a regression (change +inf%); dropped records
   * 0 -> 0 fine */
  const char *base = fx_baseline();
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(path_in("run1.json"), base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "sync_calls_per_step"), "ok");
  cr_assert_str_eq(row_verdict(rep, "dropped_records"), "ok");
  cJSON_Delete(rep);
  cJSON *cur = fx_run(1.0, NSTEPS);
  fx_set_metric(cur, "sync_calls_per_step", cJSON_CreateNumber(2));
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), base, &rep), 1, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "sync_calls_per_step"), "regressed");
  const cJSON *row = NULL;
  cJSON_ArrayForEach(row, cJSON_GetObjectItem(rep, "rows")) {
    if (strcmp(cJSON_GetObjectItem(row, "metric")->valuestring, "sync_calls_per_step") == 0)
      cr_assert_str_eq(cJSON_GetObjectItem(row, "change_pct")->valuestring, "+inf");
  }
  cJSON_Delete(rep);
}

Test(cli, nan_never_passes_silently) {
  const char *base = fx_baseline();
  /* a NaN (null) now where the baseline had a number fails */
  cJSON *cur = fx_run(1.0, NSTEPS);
  fx_set_metric(cur, "gpu_kernel_time_per_step_us", cJSON_CreateNull());
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), base, &rep), 1, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "gpu_kernel_time_per_step_us"), "regressed");
  cJSON_Delete(rep);
  cr_assert(strstr(g_out, "NaN") != NULL, "%s", g_out);

  /* null in both: reported as skipped, with the reason, not as ok */
  cJSON *b = fx_load(base);
  fx_set_metric(b, "avg_kernel_time_us", cJSON_CreateNull());
  cJSON *brun = NULL; /* the comparison reads a pooled baseline's runs */
  cJSON_ArrayForEach(brun, cJSON_GetObjectItem(b, "runs")) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(brun, "metrics"), "avg_kernel_time_us", cJSON_CreateNull());
  }
  const char *nan_base = fx_write(b, "nan_base.json");
  cur = fx_run(1.0, NSTEPS);
  fx_set_metric(cur, "avg_kernel_time_us", cJSON_CreateNull());
  cr_assert_eq(compare_json(fx_write(cur, "cur.json"), nan_base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "avg_kernel_time_us"), "skipped");
  cJSON_Delete(rep);

  /* a null inside the per-step samples is bad input, not a silent pass */
  cur = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cur, "step_times_s"), 3, cJSON_CreateNull());
  cr_assert_eq(pc_run(fx_write(cur, "cur.json"), base, NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "step_times_s") != NULL, "%s", g_out);
}

Test(cli, too_few_samples_is_reported_not_failed) {
  /* 3 steps against 3 steps: the smallest one-sided p is 1/C(6,3) = 0.05 > alpha 0.01,
   * so even a 40% slowdown cannot be shown significant: skipped, said so, exit 0 */
  const char *base = fx_write(fx_run(1.0, 3), "tiny_base.json");
  const char *cur = fx_write(fx_run_full(1.4, 1.0, 3, 0, 1.0), "tiny_cur.json");
  cJSON *rep = NULL;
  cr_assert_eq(compare_json(cur, base, &rep), 0, "%s", g_out);
  cr_assert_str_eq(row_verdict(rep, "avg_step_time_s"), "skipped");
  cr_assert_str_eq(row_verdict(rep, "step_time_p10_s"), "skipped");
  cJSON_Delete(rep);
  cr_assert(strstr(g_out, "insufficient samples") != NULL, "%s", g_out);
}

Test(cli, different_gpu_is_bad_input) {
  const char *base = fx_baseline();
  cJSON *cur = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur, "device"), "name",
                            cJSON_CreateString("NVIDIA H200"));
  const char *out = path_in("never.json");
  cr_assert_eq(pc_run(fx_write(cur, "cur.json"), base, "--json", out, NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "different GPU") != NULL, "%s", g_out);
  cr_assert(strstr(g_out, "NVIDIA H200") != NULL, "%s", g_out);
  cr_assert_neq(access(out, F_OK), 0, "nothing may be written when nothing was compared");
}

Test(cli, different_scenario_is_bad_input) {
  const char *base = fx_baseline();
  cJSON *cur = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur, "config"), "scenario",
                            cJSON_CreateString("tiny_ops"));
  cr_assert_eq(pc_run(fx_write(cur, "cur.json"), base, NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "different scenario") != NULL, "%s", g_out);
}

/* Each malformed input: exit 2, exactly one line naming the file and the fault, and no
 * report written. */
static void expect_bad_file(const char *file, const char *reason) {
  const char *good = fx_write(fx_run(1.0, NSTEPS), "good.json");
  const char *out = path_in("never.json");
  for (int side = 0; side < 2; side++) {
    int rc = side == 0 ? pc_run(file, good, "--json", out, NULL)
                       : pc_run(good, file, "--json", out, NULL);
    cr_assert_eq(rc, 2, "%s as %s: exit %d\n%s", file, side ? "baseline" : "current", rc, g_out);
    cr_assert(strstr(g_out, file) != NULL, "the message must name %s:\n%s", file, g_out);
    cr_assert(strstr(g_out, reason) != NULL, "expected '%s' in:\n%s", reason, g_out);
    char *nl = strchr(g_out, '\n');
    cr_assert(nl != NULL && nl[1] == '\0', "one line expected:\n%s", g_out);
    cr_assert_neq(access(out, F_OK), 0, "nothing may be written on bad input");
  }
}

Test(cli, malformed_inputs_are_bad_input) {
  expect_bad_file(path_in("does_not_exist.json"), "cannot open");
  expect_bad_file(data_file("empty.json"), "empty");
  expect_bad_file(data_file("not_json.json"), "not valid JSON");
  expect_bad_file(data_file("not_object.json"), "not a JSON object");
  expect_bad_file(data_file("schema_v4.json"), "schema_version 4");
  expect_bad_file(data_file("no_schema.json"), "schema_version");
  expect_bad_file(data_file("metrics_not_object.json"), "\"metrics\"");
  expect_bad_file(data_file("no_device.json"), "device.name");
}

Test(cli, bad_arguments_are_bad_input) {
  const char *good = fx_write(fx_run(1.0, NSTEPS), "good.json");
  cr_assert_eq(pc_run(good, NULL), 2);
  cr_assert(strstr(g_out, "usage") != NULL, "%s", g_out);
  cr_assert_eq(pc_run(good, good, "--alpha", "0", NULL), 2);
  cr_assert(strstr(g_out, "--alpha") != NULL, "%s", g_out);
  cr_assert_eq(pc_run(good, good, "--alpha", "abc", NULL), 2);
  cr_assert_eq(pc_run(good, good, "--frobnicate", NULL), 2);
  cr_assert(strstr(g_out, "--frobnicate") != NULL, "%s", g_out);
  cr_assert_eq(pc_run("--promote", good, NULL), 2);
  cr_assert_eq(pc_run("--help", NULL), 0);
}

Test(cli, json_and_markdown_outputs_hold_the_table) {
  const char *base = fx_baseline();
  const char *cur = fx_write(fx_run(1.10, NSTEPS), "cur.json");
  const char *js = path_in("out.json"), *md = path_in("out.md");
  cr_assert_eq(pc_run(cur, base, "--json", js, "--markdown", md, NULL), 1, "%s", g_out);
  /* the console table */
  cr_assert(strstr(g_out, "metric") && strstr(g_out, "baseline") && strstr(g_out, "change %") &&
                strstr(g_out, "p-value") && strstr(g_out, "verdict"),
            "%s", g_out);
  /* JSON: every row has the table's columns */
  cJSON *rep = fx_load(js);
  cr_assert_str_eq(cJSON_GetObjectItem(rep, "scenario")->valuestring, "clean");
  cr_assert_str_eq(cJSON_GetObjectItem(rep, "device")->valuestring, H100);
  cr_assert_eq(cJSON_GetObjectItem(rep, "baseline_runs")->valueint, NBASE);
  int rows = 0;
  const cJSON *row = NULL;
  cJSON_ArrayForEach(row, cJSON_GetObjectItem(rep, "rows")) {
    static const char *const cols[] = {"metric", "class", "baseline", "now", "change_pct", "p_value",
                                       "verdict", "note", "policy"};
    for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
      cr_assert_not_null(cJSON_GetObjectItem(row, cols[c]), "row %d lacks %s", rows, cols[c]);
    rows++;
  }
  cr_assert_geq(rows, 21, "19 metrics, step_time_p10_s and the verdict, got %d rows", rows);
  cr_assert_str_eq(cJSON_GetObjectItem(rep, "setting")->valuestring, "stored");
  cJSON_Delete(rep);
  /* Markdown: a header, a separator and a row per metric */
  FILE *f = fopen(md, "r");
  cr_assert_not_null(f);
  char text[1 << 14];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  cr_assert(strstr(text, "| metric | class | baseline | now | change % | p-value | verdict | note |"),
            "%s", text);
  cr_assert(strstr(text, "|---|"), "%s", text);
  cr_assert(strstr(text, "| `avg_step_time_s` | host |"), "%s", text);
  cr_assert(strstr(text, "**What changed**"), "%s", text);
  cr_assert(strstr(text, "**regressed**"), "%s", text);
  cr_assert(strstr(text, "**FAIL"), "%s", text);
}

Test(cli, slug_of_a_metrics_file) {
  const char *good = fx_write(fx_run(1.0, NSTEPS), "good.json");
  cr_assert_eq(pc_run("--slug", good, NULL), 0, "%s", g_out);
  cr_assert_str_eq(g_out, "nvidia-h100-80gb-hbm3\n");
}

/* The A/B through the program: 8 rounds, a 6% slower head fails on the host times; bad
 * uses of --base/--head are bad input with one line and nothing written. */
Test(cli, ab_mode_and_its_bad_input) {
  const char *b[8], *h[8], *h6[8];
  for (int r = 0; r < 8; r++) {
    char name[32];
    snprintf(name, sizeof(name), "b%d.json", r);
    b[r] = fx_write(fx_run(1.0, NSTEPS), name);
    snprintf(name, sizeof(name), "h%d.json", r);
    h[r] = fx_write(fx_run(1.0, NSTEPS), name);
    snprintf(name, sizeof(name), "s%d.json", r);
    h6[r] = fx_write(fx_run_full(1.06, 1.0, NSTEPS, 0, 1.0), name);
  }
  const char *js = path_in("ab.json"), *md = path_in("ab.md");
  cr_assert_eq(pc_run("--base", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], "--head", h[0], h[1], h[2], h[3], h[4],
                      h[5], h[6], h[7], "--json", js, NULL),
               0, "%s", g_out);
  cr_assert(strstr(g_out, "(A/B)") != NULL && strstr(g_out, "8 interleaved rounds") != NULL, "%s", g_out);
  cJSON *rep = fx_load(js);
  cr_assert_str_eq(cJSON_GetObjectItem(rep, "setting")->valuestring, "ab");
  cJSON_Delete(rep);
  cr_assert_eq(pc_run("--base", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], "--head", h6[0], h6[1], h6[2], h6[3],
                      h6[4], h6[5], h6[6], h6[7], "--markdown", md, NULL),
               1, "%s", g_out);
  cr_assert(strstr(g_out, "step_time_p10_s") != NULL && strstr(g_out, "regressed") != NULL, "%s", g_out);
  cr_assert(strstr(g_out, "what changed") != NULL && strstr(g_out, "forward") != NULL, "%s", g_out);
  cr_assert_eq(access(md, F_OK), 0, "the Markdown is written for a regression too");

  const char *never = path_in("never.json");
  const char *base = fx_baseline();
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], "--json", never, NULL), 2);
  cr_expect(strstr(g_out, "the same number, at least 2") != NULL, "%s", g_out);
  cr_expect_eq(pc_run("--base", b[0], "--head", h[0], "--json", never, NULL), 2);
  cr_expect(strstr(g_out, "the same number, at least 2") != NULL, "%s", g_out);
  cr_expect_eq(pc_run(b[2], "--base", b[0], b[1], "--head", h[0], h[1], "--json", never, NULL), 2);
  cr_expect(strstr(g_out, "every file follows one of them") != NULL, "%s", g_out);
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], h[1], "--json", b[1], NULL), 2);
  cr_expect(strstr(g_out, "is also an input") != NULL, "%s", g_out);
  cr_expect_eq(pc_run("--base", b[0], base, "--head", h[0], h[1], "--json", never, NULL), 2);
  cr_expect(strstr(g_out, "is a pooled baseline") != NULL, "%s", g_out);
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], h[1], "--json", never, "--markdown", never, NULL), 2);
  cr_expect(strstr(g_out, "the same file") != NULL, "%s", g_out);
  cr_assert_neq(access(never, F_OK), 0, "nothing written on bad input");
  /* the file that --json would have overwritten is intact */
  cJSON *still = fx_load(b[1]);
  cr_assert_not_null(cJSON_GetObjectItem(still, "metrics"));
  cJSON_Delete(still);
}

/* Inputs that are not regular files, or too large, are refused before anything is read
 * or allocated; a run stopped early is refused; messages name the file by its path. */
Test(cli, hostile_inputs_are_refused_at_once) {
  expect_bad_file("/dev/zero", "not a regular file");
  const char *fifo = path_in("fifo.json");
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  expect_bad_file(fifo, "not a regular file"); /* no writer: must not hang */
  expect_bad_file(g_dir, "not a regular file");
  const char *big = path_in("big.json");
  int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, (off_t)300 << 20), 0); /* sparse: costs no disk */
  close(fd);
  expect_bad_file(big, "more than the 256 MiB");
  cJSON *stopped = fx_run(1.0, NSTEPS);
  cJSON_AddBoolToObject(stopped, "incomplete", 1);
  expect_bad_file(fx_write(stopped, "stopped.json"), "stopped early");
  /* a policy fault in the baseline names the baseline's path, not its role */
  cJSON *b = fx_load(fx_baseline());
  cJSON_ReplaceItemInObject(b, "policy", cJSON_CreateNumber(3));
  const char *bad_base = fx_write(b, "bad_policy.json");
  const char *cur = fx_write(fx_run(1.0, NSTEPS), "cur.json");
  cr_assert_eq(pc_run(cur, bad_base, NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "bad_policy.json: \"policy\" is not an object") != NULL, "%s", g_out);
}

/* Outputs: never onto an input or a device, all or none, and valid UTF-8 JSON with the
 * names' control characters escaped on the terminal. */
Test(cli, outputs_are_safe_and_all_or_none) {
  const char *base = fx_baseline();
  cJSON *c = fx_run(1.0, NSTEPS);
  const char *cur = fx_write(c, "cur.json");
  char *before = pd_test_slurp(cur);
  cr_assert_eq(pc_run(cur, base, "--json", cur, "--quiet", NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "input") != NULL, "%s", g_out);
  char *after = pd_test_slurp(cur);
  cr_assert_str_eq(before, after, "the input was overwritten");
  free(before);
  free(after);
  cr_assert_eq(pc_run(cur, base, "--json", "/dev/null", "--quiet", NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "/dev/null: not a regular file") != NULL, "%s", g_out);
  /* --markdown cannot be written: the --json is not left behind either */
  const char *js = path_in("r.json");
  cr_assert_eq(mkdir(path_in("md_dir"), 0700), 0);
  cr_assert_eq(pc_run(cur, base, "--json", js, "--markdown", path_in("md_dir"), "--quiet", NULL), 2, "%s", g_out);
  cr_assert_neq(access(js, F_OK), 0, "a failed --markdown left the --json");
  /* --promote -o onto one of its inputs */
  cr_assert_eq(pc_run("--promote", cur, "-o", cur, NULL), 2, "%s", g_out);
  /* names with invalid UTF-8 and terminal controls */
  cJSON *odd = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(odd, "config"), "scenario", cJSON_CreateString("clean"));
  const char *path = fx_write(odd, "odd.json");
  /* patch raw bytes into the file: cJSON would escape them on the way in */
  char *text = pd_test_slurp(path);
  char *at = strstr(text, "\"config\"");
  cr_assert_not_null(at);
  at = strchr(at, '{') + 1; /* a config key: the table's "config differs" line shows it */
  const char *junk = "\"junk\x1b[2J\r\xff\xfe\": 1, ";
  size_t jl = strlen(junk), tl = strlen(text), off = (size_t)(at - text);
  char *patched = malloc(tl + jl + 1);
  memcpy(patched, text, off);
  memcpy(patched + off, junk, jl);
  memcpy(patched + off + jl, text + off, tl - off + 1);
  FILE *f = fopen(path, "w");
  fputs(patched, f);
  fclose(f);
  free(text);
  free(patched);
  cr_assert_eq(pc_run(path, base, "--json", js, NULL), 0, "%s", g_out);
  cr_assert_null(strchr(g_out, '\x1b'), "ESC reached the terminal:\n%s", g_out);
  cr_assert_not_null(strstr(g_out, "junk\\x1b[2J\\x0d\\xff\\xfe=1"), "the name, escaped:\n%s", g_out);
  cJSON_Delete(fx_load(js));
  char *out = pd_test_slurp(js);
  cr_assert_null(strchr(out, '\xff'), "raw invalid UTF-8 in the JSON report");
  cr_assert_not_null(strstr(out, "junk\\u001b[2J\\r\xef\xbf\xbd\xef\xbf\xbd=1"), "U+FFFD for each bad byte:\n%s", out);
  free(out);
}

/* --promote used to accept null samples and write a baseline that compare then refused:
 * the loader now refuses them, naming the path, the array and the index. */
Test(cli, promote_refuses_null_and_negative_samples) {
  cJSON *r = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInArray(cJSON_GetObjectItem(r, "step_times_s"), 2, cJSON_CreateNull());
  const char *bad = fx_write(r, "null_sample.json");
  const char *out = path_in("never_base.json");
  cr_assert_eq(pc_run("--promote", bad, "-o", out, NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "null_sample.json: \"step_times_s\"[2] is null (NaN)") != NULL, "%s", g_out);
  cr_assert_neq(access(out, F_OK), 0, "a baseline was written");
  cJSON *w = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInArray(cJSON_GetObjectItem(w, "dataloader_wait_s"), 0, cJSON_CreateNumber(-1));
  cr_assert_eq(pc_run("--promote", fx_write(w, "neg.json"), "-o", out, NULL), 2, "%s", g_out);
  cr_assert(strstr(g_out, "\"dataloader_wait_s\"[0] is negative") != NULL, "%s", g_out);
}

/* A baseline's runs[].steps split its pooled samples: a count that wraps past 2^64 to the
 * sample count, one beyond any integer, a fraction, zero, a missing one or counts that do
 * not add up to the samples are refused at load, naming the path and the field; neither
 * the comparison's --json nor --promote's -o is written. */
Test(cli, baseline_run_step_counts_are_checked_against_the_samples) {
  char cur[512], js[512], out[512]; /* path_in's buffers rotate: keep copies */
  snprintf(cur, sizeof cur, "%s", fx_write(fx_run(1.0, NSTEPS), "cur.json"));
  snprintf(js, sizeof js, "%s", path_in("r.json"));
  snprintf(out, sizeof out, "%s", path_in("promoted.json"));
  static const struct {
    const char *steps; /* the raw JSON text put in runs[0].steps (NULL: key removed) */
    const char *says;
  } cases[] = {
      {"18446744073709551632", "\"runs[0].steps\" must be an integer from 1 to 100000000"}, /* 2^64 + 16 */
      {"1e115", "\"runs[0].steps\" must be an integer from 1 to 100000000"},
      {"2.5", "\"runs[0].steps\" must be an integer from 1 to 100000000"},
      {"0", "\"runs[0].steps\" must be an integer from 1 to 100000000"},
      {"\"16\"", "\"runs[0].steps\" must be an integer from 1 to 100000000"},
      {NULL, "\"runs[0].steps\" is missing"},
      {"17", "the runs' \"steps\" add up to"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cJSON *b = fx_load(fx_baseline());
    cJSON *run0 = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "runs"), 0);
    cr_assert_not_null(run0);
    if (cases[i].steps == NULL)
      cJSON_DeleteItemFromObject(run0, "steps");
    else
      cJSON_ReplaceItemInObject(run0, "steps", cJSON_CreateRaw(cases[i].steps));
    char name[32];
    snprintf(name, sizeof name, "bad_steps_%zu.json", i);
    const char *bad = fx_write(b, name);
    cr_assert_eq(pc_run(cur, bad, "--json", js, "--quiet", NULL), 2, "case %zu: %s", i, g_out);
    cr_expect(strstr(g_out, bad) != NULL && strstr(g_out, cases[i].says) != NULL, "case %zu: %s", i, g_out);
    cr_expect(strchr(g_out, '\n') == strrchr(g_out, '\n'), "case %zu: one line: %s", i, g_out);
    cr_expect_neq(access(js, F_OK), 0, "case %zu: a --json was written", i);
    cr_assert_eq(pc_run("--promote", bad, cur, "-o", out, NULL), 2, "case %zu: %s", i, g_out);
    cr_expect(strstr(g_out, cases[i].says) != NULL, "case %zu: %s", i, g_out);
    cr_expect_neq(access(out, F_OK), 0, "case %zu: a baseline was written", i);
  }
  /* a run's own "steps" is range-checked the same way */
  cJSON *r = fx_run(1.0, NSTEPS);
  cJSON_ReplaceItemInObject(r, "steps", cJSON_CreateNumber(-3));
  cr_assert_eq(pc_run(fx_write(r, "neg_steps.json"), fx_baseline(), NULL), 2, "%s", g_out);
  cr_expect(strstr(g_out, "neg_steps.json: \"steps\" must be an integer") != NULL, "%s", g_out);
}

/* Running out of memory while parsing says so (not "not valid JSON"), names the file and
 * gives no verdict (exit 2, never 1): a baseline padded with 3 million numbers (about 200
 * MiB of parsed nodes from 6 MB of text) under a 64 MiB address-space limit within which
 * a plain comparison runs. */
Test(cli, out_of_memory_is_said_and_is_no_verdict) {
  PD_TEST_SKIP_UNLESS_AS_LIMIT_WORKS();
  char cur[512], base[512], big[512], js[512];
  snprintf(cur, sizeof cur, "%s", fx_write(fx_run(1.0, NSTEPS), "cur.json"));
  snprintf(base, sizeof base, "%s", fx_baseline());
  snprintf(js, sizeof js, "%s", path_in("r.json"));
  /* the baseline's text with a large array spliced in before its last '}' */
  char *text = pd_test_slurp(base);
  cr_assert_not_null(text);
  char *close = strrchr(text, '}');
  cr_assert_not_null(close);
  *close = '\0';
  snprintf(big, sizeof big, "%s", path_in("big_base.json"));
  FILE *f = fopen(big, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fputs(", \"pad\": [", f);
  for (int i = 0; i < 3000000; i++) fputs(i ? ",1" : "1", f);
  fputs("]}", f);
  cr_assert_eq(fclose(f), 0);
  free(text);
  g_as_limit_mib = 64;
  int control = pc_run(cur, base, "--quiet", NULL);
  char control_out[1024];
  snprintf(control_out, sizeof control_out, "%.1000s", g_out);
  int rc = pc_run(cur, big, "--json", js, "--quiet", NULL);
  g_as_limit_mib = 0;
  cr_assert_eq(control, 0, "the control runs within 64 MiB: %s", control_out);
  cr_expect_eq(rc, 2, "exit %d: %s", rc, g_out);
  cr_expect(strstr(g_out, "big_base.json: out of memory parsing the file") != NULL, "%s", g_out);
  cr_expect(strchr(g_out, '\n') == strrchr(g_out, '\n'), "one line: %s", g_out);
  cr_expect_neq(access(js, F_OK), 0, "nothing written");
}

/* --promote wrote baselines that the comparison then refused: a metric given as a string or
 * an object (the run's copy kept it), an empty or an absent per-step array (a run of zero
 * steps, which a baseline's runs[].steps may not be). One validator decides for both now:
 * promote refuses (exit 2, nothing written) each input that compare refuses, naming it,
 * and what it promotes compare reads. */
Test(cli, promote_refuses_what_compare_refuses) {
  char cur[512], out[512];
  snprintf(cur, sizeof cur, "%s", fx_write(fx_run(1.0, NSTEPS), "cur.json"));
  snprintf(out, sizeof out, "%s", path_in("never_base.json"));
  static const struct {
    const char *what;
    const char *says;
  } cases[] = {
      {"string", "metrics.avg_step_time_s is not a number or null"},
      {"object", "metrics.avg_step_time_s is not a number or null"},
      {"empty", "\"step_times_s\" holds no samples"},
      {"absent", "\"step_times_s\" holds no samples"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cJSON *r = fx_run(1.0, NSTEPS);
    const char *w = cases[i].what;
    if (strcmp(w, "string") == 0)
      cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "metrics"), "avg_step_time_s", cJSON_CreateString("0.01"));
    else if (strcmp(w, "object") == 0)
      cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "metrics"), "avg_step_time_s", cJSON_CreateObject());
    else if (strcmp(w, "empty") == 0)
      cJSON_ReplaceItemInObject(r, "step_times_s", cJSON_CreateArray());
    else
      cJSON_DeleteItemFromObject(r, "step_times_s");
    char name[32];
    snprintf(name, sizeof name, "bad_%s.json", w);
    char bad[512];
    snprintf(bad, sizeof bad, "%s", fx_write(r, name));
    int prc = pc_run("--promote", cur, bad, "-o", out, NULL);
    if (prc == 0) { /* before the fix: the baseline was written; show that compare refuses it */
      int crc = pc_run(cur, out, "--quiet", NULL);
      cr_assert_fail("case %s: promote wrote a baseline that compare answers with %d:\n%s", w, crc, g_out);
    }
    cr_assert_eq(prc, 2, "case %s: %s", w, g_out);
    cr_expect(strstr(g_out, bad) != NULL && strstr(g_out, cases[i].says) != NULL, "case %s: %s", w, g_out);
    cr_expect(strchr(g_out, '\n') == strrchr(g_out, '\n'), "case %s: one line: %s", w, g_out);
    cr_expect_neq(access(out, F_OK), 0, "case %s: a baseline was written", w);
    /* the comparison refuses the same input as a baseline, with the same words */
    if (strcmp(w, "string") == 0 || strcmp(w, "object") == 0) {
      cr_assert_eq(pc_run(cur, bad, "--quiet", NULL), 2, "case %s: %s", w, g_out);
      cr_expect(strstr(g_out, cases[i].says) != NULL, "case %s: %s", w, g_out);
    }
  }
}

/* "-" is standard output for --json, --markdown and --promote's -o (each used to write a
 * file named "-"): the table then goes to stderr; two outputs on "-" are refused; a run
 * that fails writes nothing to stdout. */
Test(cli, dash_is_standard_output) {
  char cur[512], base[512];
  snprintf(cur, sizeof cur, "%s", fx_write(fx_run(1.0, NSTEPS), "cur.json"));
  snprintf(base, sizeof base, "%s", fx_baseline());
  g_split = true;
  cr_assert_eq(pc_run(cur, base, "--json", "-", NULL), 0, "%s", g_out);
  cJSON *j = cJSON_Parse(g_stdout);
  cr_expect_not_null(j, "stdout is the JSON alone: %s", g_stdout);
  cJSON_Delete(j);
  cr_expect(strstr(g_out, "avg_step_time_s") != NULL, "the table on stderr: %s", g_out);
  cr_assert_eq(pc_run(cur, base, "--markdown", "-", "--quiet", NULL), 0, "%s", g_out);
  cr_expect(strncmp(g_stdout, "### profile_compare", 19) == 0 && strstr(g_stdout, "| metric |") != NULL, "%s", g_stdout);
  cr_expect_str_eq(g_out, "");
  cr_assert_eq(pc_run("--promote", cur, "-o", "-", NULL), 0, "%s", g_out);
  j = cJSON_Parse(g_stdout);
  cr_assert_not_null(j, "stdout is the baseline alone: %s", g_stdout);
  cr_expect_not_null(cJSON_GetObjectItem(j, "runs"));
  cJSON_Delete(j);
  cr_expect(strstr(g_out, "promoted 1 file into -") != NULL, "%s", g_out);
  cr_assert_eq(pc_run(cur, base, "--json", "-", "--markdown", "-", NULL), 2, "%s", g_out);
  cr_expect(strstr(g_out, "--json and --markdown name the same file -") != NULL, "%s", g_out);
  cr_expect_str_eq(g_stdout, "");
  cJSON *r = fx_run(1.0, NSTEPS);
  cJSON_DeleteItemFromObject(r, "step_times_s");
  cr_assert_eq(pc_run("--promote", fx_write(r, "nosamples.json"), "-o", "-", NULL), 2, "%s", g_out);
  cr_expect_str_eq(g_stdout, "", "a failure wrote to stdout");
  cr_assert_eq(pc_run(cur, base, "--json", "/dev/null", NULL), 2, "%s", g_out);
  cr_expect(strstr(g_out, "not a regular file") != NULL, "%s", g_out);
  g_split = false;
  cr_expect_eq(access(path_in("-"), F_OK), -1, "a file named '-' was written");
}

/* The A/B's own options: --keep, --normalize, --adjust, --unpaired, --primary (checked, A/B only), and the
 * minimum detectable effect column. */
Test(cli, ab_options_and_mde_column) {
  const char *b[8], *h[8];
  for (int r = 0; r < 8; r++) {
    char name[32];
    snprintf(name, sizeof(name), "b%d.json", r);
    b[r] = fx_write(fx_run(1.0, NSTEPS), name);
    snprintf(name, sizeof(name), "h%d.json", r);
    h[r] = fx_write(fx_run(1.0, NSTEPS), name);
  }
  const char *js = path_in("ab.json");
  cr_assert_eq(pc_run("--base", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], "--head", h[0], h[1], h[2], h[3], h[4],
                      h[5], h[6], h[7], "--keep", "0.25", "--primary", "step_time_p10_s", "--json", js, NULL),
               0, "%s", g_out);
  cr_expect(strstr(g_out, "mde %") != NULL && strstr(g_out, "better 25%") != NULL, "%s", g_out);
  cr_expect(strstr(g_out, "primary host metric step_time_p10_s") != NULL, "%s", g_out);
  cJSON *rep = fx_load(js);
  cJSON *stat = cJSON_GetObjectItem(rep, "statistic");
  cr_expect_float_eq(cJSON_GetObjectItem(stat, "keep")->valuedouble, 0.25, 1e-12);
  cr_expect_str_eq(cJSON_GetObjectItem(stat, "primary")->valuestring, "step_time_p10_s");
  cJSON_Delete(rep);
  /* the runs carry no host_calibration: --normalize is refused, naming the field */
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], h[1], "--normalize", NULL), 2);
  cr_expect(strstr(g_out, "host_calibration") != NULL, "%s", g_out);
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], h[1], "--keep", "0", NULL), 2);
  cr_expect(strstr(g_out, "--keep must be") != NULL, "%s", g_out);
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], h[1], "--primary", NULL), 2);
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], h[1], "--primary", "", NULL), 2);
  cr_expect_eq(pc_run(b[0], b[1], "--normalize", NULL), 2);
  cr_expect(strstr(g_out, "is an A/B option") != NULL, "%s", g_out);
  /* --adjust: A/B only, and every run must carry the profiler's traced-call cost */
  cr_expect_eq(pc_run(b[0], b[1], "--adjust", NULL), 2);
  cr_expect(strstr(g_out, "is an A/B option") != NULL, "%s", g_out);
  cr_expect_eq(pc_run(b[0], b[1], "--unpaired", NULL), 2);
  cr_expect(strstr(g_out, "is an A/B option") != NULL, "%s", g_out);
  cr_expect_eq(pc_run("--base", b[0], b[1], "--head", h[0], h[1], "--adjust", NULL), 2);
  cr_expect(strstr(g_out, "ns_per_cuda_call") != NULL, "%s", g_out);
}
