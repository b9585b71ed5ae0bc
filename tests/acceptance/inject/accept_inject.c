/* accept_inject.c: pd_run profiles programs it knows nothing about (GPU).
 *
 * The C example (examples/inject_steps: per step an input copy, forward, 8 tiny kernels,
 * backward, ex_optimizer_step = 11 kernels) under --step_kernel, --step_range (its --nvtx
 * steps; also with --probe) and with neither; then the PyTorch step (tests/torch/train_step.py) with
 * --step_kernel amp_update_scale and with --step_range train_step, with DataLoader workers
 * (forked, no CUDA: they write nothing), under emit_nvtx (ops in the trace, the .item()
 * reads found), and stopped by a KeyboardInterrupt (Python's
 * SIGINT exit: the outputs are still written). Each run checks the exit status, the
 * program's own stdout, the report on stderr, the metrics JSON and the trace.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_test_util.h"

static char g_dir[256];

static void setup(void) { pd_test_tmpdir_make(g_dir, sizeof g_dir, "accept_inject"); }
static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  (void)system(cmd);
}

TestSuite(inject, .init = setup, .fini = teardown, .timeout = 600);

/* Runs pd_run with options and a program; returns the exit status, stdout and stderr. */
static int pd_run(const char *options, const char *program, char **out, char **err) {
  char cmd[4096], op[300], ep[300];
  snprintf(op, sizeof op, "%s/stdout.txt", g_dir);
  snprintf(ep, sizeof ep, "%s/stderr.txt", g_dir);
  snprintf(cmd, sizeof cmd, "%s --trace_dir %s/traces --output_json %s/m.json %s -- %s >%s 2>%s", PD_RUN_EXE, g_dir,
           g_dir, options, program, op, ep);
  int st = system(cmd);
  *out = pd_test_slurp(op);
  *err = pd_test_slurp(ep);
  fprintf(stderr, "---- %s\n%s%s", cmd, *out, *err); /* the report, in the test log */
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static cJSON *metrics_read(void) { return pd_test_json_read(pd_test_path(g_dir, "m.json")); }

static double metric(const cJSON *j, const char *key) {
  const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metrics"), key);
  cr_assert(cJSON_IsNumber(v), "metrics.%s missing", key);
  return v->valuedouble;
}

static const char *config_text(const cJSON *j, const char *key) {
  const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), key);
  cr_assert(cJSON_IsString(v), "config.%s missing", key);
  return v->valuestring;
}

/* The last trace of the run, parsed (a trace object with traceEvents and
 * deviceProperties); its text in *text (the caller frees it) and its path in *path (a
 * string inside j). */
static cJSON *trace_load(const cJSON *j, char **text, const char **path) {
  const cJSON *files = cJSON_GetObjectItem(j, "trace_files");
  cr_assert_geq(cJSON_GetArraySize(files), 1, "no trace listed");
  *path = cJSON_GetArrayItem(files, cJSON_GetArraySize(files) - 1)->valuestring;
  *text = pd_test_slurp(*path);
  cJSON *t = cJSON_Parse(*text);
  cr_assert_not_null(t, "%s does not parse", *path);
  cr_assert(cJSON_IsArray(cJSON_GetObjectItem(t, "traceEvents")));
  cr_assert(cJSON_IsArray(cJSON_GetObjectItem(t, "deviceProperties")));
  return t;
}

/* The last trace of the run: it parses, and holds the named events. */
static void trace_check(const cJSON *j, const char *const *names, size_t n) {
  char *text;
  const char *path;
  cJSON *t = trace_load(j, &text, &path);
  for (size_t i = 0; i < n; i++) cr_assert_not_null(strstr(text, names[i]), "%s not in %s", names[i], path);
  cJSON_Delete(t);
  free(text);
}

/* What every profiled run of the example shows. */
static void example_checks(const cJSON *j, int steps, const char *steps_by) {
  cr_assert_str_eq(config_text(j, "name"), "inject_steps");
  cr_assert_str_eq(config_text(j, "steps_by"), steps_by);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), steps);
  cr_assert_eq(metric(j, "kernels_per_step"), 11.0, "forward, 8 tiny, backward, optimizer");
  cr_assert_geq(metric(j, "h2d_bytes_per_step"), 65536.0 * 4);
  const cJSON *v = cJSON_GetObjectItem(j, "verdict");
  cr_assert(cJSON_IsString(cJSON_GetObjectItem(v, "bottleneck")), "no verdict");
  const cJSON *cost = cJSON_GetObjectItem(j, "profiler_cost");
  cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cost, "est_added_us_per_step")), "no profiler_cost estimate");
}

Test(inject, example_with_step_kernel) {
  char *out, *err;
  int rc = pd_run("--step_kernel ex_optimizer_step --wait 1 --warmup 1 --active 3", PD_EXAMPLE_EXE " --steps 8",
                  &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_not_null(strstr(out, "inject_steps: 8 steps"), "the program's stdout is its own: %s", out);
  cr_assert_not_null(strstr(err, "Verdict: "), "%s", err);
  cr_assert_not_null(strstr(err, "Top CUDA ops"), "%s", err);
  cr_assert_null(strstr(err, "emit_nvtx"), "no PyTorch here: %s", err);
  cJSON *j = metrics_read();
  example_checks(j, 3, "step_kernel");
  const char *names[] = {"\"ProfilerStep#2\"", "\"ProfilerStep#4\"", "ex_optimizer_step", "ex_forward", "ex_tiny",
                         "cudaLaunchKernel", "\"ac2g\""};
  trace_check(j, names, sizeof(names) / sizeof(names[0]));
  cJSON_Delete(j);
  free(out);
  free(err);
}

/* A run longer than the schedule: after its cycle and 16 untraced steps the outputs are
 * written and CUPTI is let go of (cuptiFinalize at a launch's exit, inside the callback);
 * the program runs its remaining steps to the end, unprofiled, and exits as before. */
Test(inject, example_with_step_kernel_lets_go_of_cupti_after_the_schedule) {
  char *out, *err;
  int rc = pd_run("--step_kernel ex_optimizer_step --wait 1 --warmup 1 --active 3", PD_EXAMPLE_EXE " --steps 60",
                  &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_not_null(strstr(out, "inject_steps: 60 steps"), "the program ran to its end: %s", out);
  cr_assert_not_null(strstr(err, "the schedule ended 16 steps ago (step 21)"), "%s", err);
  cr_assert_null(strstr(err, "CUPTI stays attached"), "the detach failed: %s", err);
  cr_assert_null(strstr(err, "pd_inject: warning"), "%s", err);
  cr_assert_not_null(strstr(err, "Verdict: "), "pd_run reports the JSON written before the end: %s", err);
  cJSON *j = metrics_read();
  example_checks(j, 3, "step_kernel");
  const cJSON *pc = cJSON_GetObjectItem(j, "profiler_cost");
  cr_assert_geq(cJSON_GetObjectItem(pc, "measured_untraced_steps")->valuedouble, 10.0,
                "the untraced steps after the cycle are timed before letting go");
  cJSON_Delete(j);
  free(out);
  free(err);
}

Test(inject, example_with_step_range) {
  char *out, *err;
  int rc = pd_run("--step_range train_step --wait 1 --warmup 1 --active 3", PD_EXAMPLE_EXE " --steps 8 --nvtx", &out,
                  &err);
  cr_assert_eq(rc, 0, "%s", err);
  cJSON *j = metrics_read();
  example_checks(j, 3, "step_range");
  const char *names[] = {"\"ProfilerStep#3\"", "\"train_step\"", "ex_backward"};
  trace_check(j, names, sizeof(names) / sizeof(names[0]));
  cJSON_Delete(j);
  free(out);
  free(err);
}

/* --copy_stream: the input copy on a second stream, each stream waiting for the other
 * through an event. Every Stream Wait Event of the trace (but possibly the window's first)
 * names a stream other than its own and the correlation id of the cudaEventRecord call
 * (Kineto's wait_on_stream and wait_on_cuda_event_record_corr_id), and that call is in
 * the trace. */
Test(inject, example_with_a_copy_stream_names_what_each_wait_waits_for) {
  char *out, *err;
  int rc = pd_run("--step_kernel ex_optimizer_step --wait 1 --warmup 1 --active 3",
                  PD_EXAMPLE_EXE " --steps 8 --copy_stream", &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cJSON *j = metrics_read();
  example_checks(j, 3, "step_kernel");
  char *text;
  const char *path;
  cJSON *t = trace_load(j, &text, &path);
  const cJSON *e = NULL;
  int waits = 0, named = 0;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(t, "traceEvents")) {
    const cJSON *name = cJSON_GetObjectItem(e, "name"), *args = cJSON_GetObjectItem(e, "args");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "Stream Wait Event") != 0) continue;
    waits++;
    const cJSON *ws = cJSON_GetObjectItem(args, "wait_on_stream");
    const cJSON *wc = cJSON_GetObjectItem(args, "wait_on_cuda_event_record_corr_id");
    if (!cJSON_IsNumber(ws) || !cJSON_IsNumber(wc)) continue;
    cr_expect_neq(ws->valuedouble, cJSON_GetObjectItem(args, "stream")->valuedouble, "a wait on another stream");
    const cJSON *r = NULL;
    bool found = false;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(t, "traceEvents")) {
      const cJSON *rn = cJSON_GetObjectItem(r, "name"), *rc2 = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "args"), "correlation");
      if (cJSON_IsString(rn) && strcmp(rn->valuestring, "cudaEventRecord") == 0 && cJSON_IsNumber(rc2) &&
          rc2->valuedouble == wc->valuedouble)
        found = true;
    }
    cr_expect(found, "the cudaEventRecord with correlation %.0f is in the trace", wc->valuedouble);
    named++;
  }
  cr_assert_geq(waits, 4, "two waits a step, 3 steps in the window: %d", waits);
  cr_assert_geq(named, waits - 1, "every wait names its record (the window's first may wait on one before it): %d of %d",
                named, waits);
  cJSON_Delete(t);
  free(text);
  cJSON_Delete(j);
  free(out);
  free(err);
}

/* --probe: after each untraced step the launching thread's speed, one value per untraced
 * step written, in a plausible range; none of the probe's empty kernels in the trace (they
 * run outside the cycle, on the library's own stream); the program's output its own and no
 * warning. */
Test(inject, example_with_step_range_and_probe) {
  char *out, *err;
  int rc = pd_run("--step_range train_step --skip_first 8 --wait 0 --warmup 1 --active 3 --probe",
                  PD_EXAMPLE_EXE " --steps 20 --nvtx", &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_not_null(strstr(out, "inject_steps: 20 steps"), "the program's stdout is its own: %s", out);
  cr_assert_null(strstr(err, "pd_inject: warning"), "%s", err);
  cJSON *j = metrics_read();
  example_checks(j, 3, "step_range");
  cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "probe")));
  const cJSON *w = cJSON_GetObjectItem(j, "warmup_step_times_s");
  const cJSON *pl = cJSON_GetObjectItem(j, "warmup_probe_launch_ns");
  const cJSON *pc = cJSON_GetObjectItem(j, "warmup_probe_compute_ns");
  const int n = cJSON_GetArraySize(w);
  cr_assert_geq(n, 6, "untraced steps 2..7 before the cycle at least");
  cr_assert_eq(cJSON_GetArraySize(pl), n, "one probe per untraced step");
  cr_assert_eq(cJSON_GetArraySize(pc), n, "one probe per untraced step");
  for (int i = 0; i < n; i++) {
    const double l = cJSON_GetArrayItem(pl, i)->valuedouble, c = cJSON_GetArrayItem(pc, i)->valuedouble;
    fprintf(stderr, "probe %d: %.0f ns per launch, %.0f ns of compute\n", i, l, c);
    cr_expect(l > 100.0 && l < 1e6, "probe %d: %.0f ns per empty launch", i, l);
    cr_expect(c > 1e3 && c < 1e9, "probe %d: %.0f ns of compute", i, c);
  }
  const char *names[] = {"\"ProfilerStep#11\"", "ex_backward"};
  trace_check(j, names, sizeof(names) / sizeof(names[0]));
  const char *path = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "trace_files"), 0)->valuestring;
  char *text = pd_test_slurp(path);
  cr_assert_null(strstr(text, "pd_calibration_empty"), "a probe kernel in the trace %s", path);
  free(text);
  cJSON_Delete(j);
  free(out);
  free(err);
}

Test(inject, example_as_one_whole_run_step_and_a_planted_sync) {
  char *out, *err;
  int rc = pd_run("", PD_EXAMPLE_EXE " --steps 4 --sync", &out, &err);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert_not_null(strstr(err, "the whole run is one step"), "%s", err);
  cJSON *j = metrics_read();
  cr_assert_str_eq(config_text(j, "steps_by"), "whole_run");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), 1);
  /* 4 steps of 11 kernels; the first launch starts the profiler from inside its own call,
   * so that one kernel counts only when CUPTI does not record its launching call */
  const double k = metric(j, "kernels_per_step");
  cr_assert(k == 43.0 || k == 44.0, "kernels in the whole run: %.0f", k);
  cr_assert_geq(metric(j, "sync_calls_per_step"), 4.0, "the planted blocking reads");
  cJSON_Delete(j);
  free(out);
  free(err);
}

Test(inject, a_program_without_cuda_has_nothing_to_profile) {
  char *out, *err;
  cr_assert_eq(pd_run("", "/bin/sh -c 'echo hi; exit 3'", &out, &err), 3);
  cr_assert_str_eq(out, "hi\n");
  cr_assert_not_null(strstr(err, "nothing to profile"), "%s", err);
  free(out);
  free(err);
}

/* ---- PyTorch --------------------------------------------------------------------------------- */

static void need_torch(void) {
  if (system("python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1") != 0)
    cr_skip_test("python3 cannot import torch with CUDA here: the PyTorch runs are skipped");
}

static char g_torch[1024];
static const char *torch_cmd(const char *extra) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is set by CTest");
  snprintf(g_torch, sizeof g_torch, "python3 %s/tests/torch/train_step.py --warmup 3 --active 5 %s", src, extra);
  return g_torch;
}

/* Runs the PyTorch step (its `args`) under pd_run, steps by `steps` (--step_kernel or
 * --step_range) and the tests' schedule: 3 skipped, 1 warmup, 5 active. Asserts it exited
 * 0; returns its metrics, its stdout and stderr in *out and *err (the caller frees all). */
static cJSON *torch_run(const char *steps, const char *args, char **out, char **err) {
  need_torch();
  char options[300];
  snprintf(options, sizeof options, "%s --skip_first 3 --wait 0 --warmup 1 --active 5", steps);
  int rc = pd_run(options, torch_cmd(args), out, err);
  cr_assert_eq(rc, 0, "%s", *err);
  return metrics_read();
}

static void torch_checks(const cJSON *j, const char *steps_by) {
  cr_assert_str_eq(config_text(j, "name"), "train_step");
  cr_assert_str_eq(config_text(j, "steps_by"), steps_by);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), 5);
  cr_assert_gt(metric(j, "kernels_per_step"), 20.0, "a SimpleCNN training step");
  const char *names[] = {"\"ProfilerStep#5\"", "amp_update_scale"};
  trace_check(j, names, sizeof(names) / sizeof(names[0]));
}

Test(inject, torch_step_with_step_kernel_and_workers) {
  char *out, *err;
  cJSON *j = torch_run("--step_kernel amp_update_scale", "--workers 2", &out, &err);
  cr_assert_not_null(strstr(out, "train_step: plain_b64"), "%s", out);
  torch_checks(j, "step_kernel");
  cJSON_Delete(j);
  /* the DataLoader's forked workers never used CUDA: no per-process file */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "ls %s/m.pid*.json >/dev/null 2>&1", g_dir);
  cr_assert_neq(system(cmd), 0, "a worker wrote metrics");
  free(out);
  free(err);
}

Test(inject, torch_step_with_step_range) {
  char *out, *err;
  cJSON *j = torch_run("--step_range train_step", "--nvtx", &out, &err);
  cr_assert_not_null(strstr(err, "torch.autograd.profiler.emit_nvtx()"),
                     "a PyTorch program without op ranges is told how to give the verdict its ops: %s", err);
  torch_checks(j, "step_range");
  cJSON_Delete(j);
  free(out);
  free(err);
}

/* Under torch.autograd.profiler.emit_nvtx() every op is an NVTX range: the trace has the ops
 * under their own names, the planted .item() reads (sync_b64: 5 a step) are found through
 * them, and the line about op ranges is not printed. */
Test(inject, torch_step_with_emit_nvtx_has_ops_and_reads) {
  char *out, *err;
  cJSON *j = torch_run("--step_range train_step", "--nvtx --emit_nvtx --variant sync_b64", &out, &err);
  cr_assert_null(strstr(err, "torch.autograd.profiler.emit_nvtx()"), "%s", err);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), 5);
  cr_assert_geq(metric(j, "replay_reads_per_step"), 1.0, "the .item() reads are found through the ops");
  const char *names[] = {"\"aten::_local_scalar_dense\"", "\"aten::conv2d\"", "\"ProfilerStep#5\""};
  trace_check(j, names, sizeof(names) / sizeof(names[0]));
  cJSON_Delete(j);
  free(out);
  free(err);
}

/* Without emit_nvtx the trace has no ops, only the program's step range, which the trace
 * names (stepRange) and the analysis counts as the step: the planted .item() reads
 * (sync_b64: 5 a step) are found from their calls (a small device-to-host copy, then a
 * stream sync), and the blocking_reads saving says it was found without ops. */
Test(inject, torch_step_without_ops_finds_reads_from_the_calls) {
  char *out, *err;
  cJSON *j = torch_run("--step_range train_step", "--nvtx --variant sync_b64", &out, &err);
  cr_assert_geq(metric(j, "replay_reads_per_step"), 4.0, "the .item() reads are found from the calls");
  const cJSON *sv = NULL, *reads = NULL;
  cJSON_ArrayForEach(sv, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "verdict"), "savings")) {
    const cJSON *c = cJSON_GetObjectItem(sv, "cause");
    if (cJSON_IsString(c) && strcmp(c->valuestring, "blocking_reads") == 0) reads = sv;
  }
  cr_assert_not_null(reads, "a blocking_reads saving");
  cr_expect_gt(cJSON_GetObjectItem(reads, "est_saving_us_per_step")->valuedouble, 0.0);
  const cJSON *ev = cJSON_GetObjectItem(reads, "evidence");
  cr_expect(cJSON_IsString(ev) && strstr(ev->valuestring, "small device-to-host copies") != NULL, "%s",
            cJSON_IsString(ev) ? ev->valuestring : "(none)");
  const char *names[] = {"\"stepRange\": \"train_step\"", "\"ProfilerStep#5\""};
  trace_check(j, names, sizeof(names) / sizeof(names[0]));
  cJSON_Delete(j);
  free(out);
  free(err);
}

Test(inject, torch_keyboard_interrupt_still_writes) {
  need_torch();
  char *out, *err;
  char prog[600];
  snprintf(prog, sizeof prog,
           "python3 -c \"import os, signal, torch; x = torch.ones(1 << 20, device='cuda'); "
           "[x.mul_(1.0001) for _ in range(50)]; torch.cuda.synchronize(); os.kill(os.getpid(), signal.SIGINT)\"");
  int rc = pd_run("", prog, &out, &err);
  cr_assert_eq(rc, 128 + 2, "Python's KeyboardInterrupt exit: %s", err);
  cr_assert_not_null(strstr(err, "KeyboardInterrupt"), "Python's own behaviour stays: %s", err);
  cJSON *j = metrics_read();
  cr_assert_geq(metric(j, "kernels_per_step"), 50.0);
  cJSON_Delete(j);
  free(out);
  free(err);
}
