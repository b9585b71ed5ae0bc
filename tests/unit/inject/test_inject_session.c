/* test_inject_session.c: the injection session without a GPU. Launch calls and NVTX ranges
 * are made by hand (as CUPTI's launch hook and the NVTX tool deliver them); the record
 * source is scripted: it hands over the kernels the test queued. The whole cycle runs to
 * the trace and the metrics JSON. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "inject.h"
#include "pd/pd_common.h"
#include "pd_test_util.h"

/* ---- the scripted record source ------------------------------------------------------ */

typedef struct {
  pd_record_source_t base;
  pd_event_t q[256];
  int n;
  int enable_rc; /* what enable returns */
  int enables;
} mock_t;

static int m_enable(pd_record_source_t *s, char *err, size_t errlen) {
  mock_t *m = s->impl;
  m->enables++;
  if (m->enable_rc != 0) snprintf(err, errlen, "mock enable refused");
  return m->enable_rc;
}
static int m_switch(pd_record_source_t *s, char *err, size_t errlen) { return 0; }
static int m_flush(pd_record_source_t *s, bool forced, char *err, size_t errlen) { return 0; }
static int64_t m_collect(pd_record_source_t *s, pd_trace_t *out, int64_t window) {
  mock_t *m = s->impl;
  int64_t added = 0;
  for (int i = 0; out != NULL && i < m->n; i++)
    if (m->q[i].start_ns >= window && pd_trace_add(out, &m->q[i]) == 0) added++;
  m->n = 0;
  return added;
}
static const pd_device_props_t *m_device(const pd_record_source_t *s) {
  static pd_device_props_t d;
  d = pd_test_h100();
  return &d;
}
static uint64_t m_zero(const pd_record_source_t *s) { return 0; }
static size_t m_bytes(const pd_record_source_t *s) { return 4096; }
static void m_destroy(pd_record_source_t *s) {}

static const pd_record_source_ops_t k_mock_ops = {
    .name = "mock source", .enable = m_enable, .disable = m_switch, .flush = m_flush, .collect = m_collect,
    .detach = m_switch, .device = m_device, .dropped = m_zero, .errors = m_zero, .buffers = m_zero,
    .buffer_bytes = m_bytes, .destroy = m_destroy};

static mock_t g_mock;
static int g_syncs;
static void sync_cb(void) { g_syncs++; }
static int info_cb(pd_device_info_t *d) {
  snprintf(d->name, sizeof d->name, "Mock GPU");
  d->compute_major = 9;
  d->sm_count = 132;
  return 0;
}

/* A kernel the GPU "ran" just now, handed over at the next collect. */
static void gpu_kernel(const char *name, int64_t dur_ns) {
  cr_assert_lt(g_mock.n, 256);
  pd_event_t *e = &g_mock.q[g_mock.n++];
  memset(e, 0, sizeof *e);
  e->kind = PD_EVENT_KERNEL;
  e->start_ns = pd_clock_now_ns();
  e->end_ns = e->start_ns + dur_ns;
  e->name = name;
  e->stream = 7;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static char g_dir[256];
static char *g_log_text;
static size_t g_log_len;
static FILE *g_log;

static void setup(void) {
  memset(&g_mock, 0, sizeof g_mock);
  g_mock.base.ops = &k_mock_ops;
  g_mock.base.impl = &g_mock;
  g_syncs = 0;
  pd_test_tmpdir_make(g_dir, sizeof g_dir, "pd_inject_test");
  g_log = open_memstream(&g_log_text, &g_log_len);
}

static void teardown(void) {
  char sub[300];
  snprintf(sub, sizeof sub, "%s/traces", g_dir);
  pd_test_tmpdir_remove(sub);
  pd_test_tmpdir_remove(g_dir);
  if (g_log != NULL) fclose(g_log);
  free(g_log_text);
}

TestSuite(inject_session, .init = setup, .fini = teardown);

static const char *log_text(void) {
  fflush(g_log);
  return g_log_text != NULL ? g_log_text : "";
}

/* A session for c, writing into the test's directory (metrics json_name), on env. */
static pd_inject_session_t *session_make_env(pd_inject_config_t *c, const pd_inject_env_t *env, const char *json_name) {
  snprintf(c->trace_dir, sizeof c->trace_dir, "%s/traces", g_dir);
  snprintf(c->output_json, sizeof c->output_json, "%s/%s", g_dir, json_name);
  char err[512] = "";
  cr_assert_eq(pd_inject_config_validate(c, err, sizeof err), 0, "%s", err);
  pd_inject_session_t *s = NULL;
  cr_assert_eq(pd_inject_session_create(c, env, &s), 0);
  return s;
}

/* The same on the mock source with the usual callbacks, metrics m.json. */
static pd_inject_session_t *session_make(pd_inject_config_t *c) {
  pd_inject_env_t env = {.source = &g_mock.base, .device_sync = sync_cb, .device_info = info_cb, .log = g_log};
  return session_make_env(c, &env, "m.json");
}

/* One runtime launch as CUPTI reports it: the runtime call with the driver launch inside. */
static void launch(pd_inject_session_t *s, const char *kernel) {
  pd_inject_on_launch(s, kernel, true, false);
  pd_inject_on_launch(s, kernel, false, false);
  gpu_kernel(kernel, 20000);
  pd_inject_on_launch(s, kernel, false, true);
  pd_inject_on_launch(s, kernel, true, true);
}

static char *trace_text(const cJSON *metrics) {
  const cJSON *tf = cJSON_GetArrayItem(cJSON_GetObjectItem(metrics, "trace_files"), 0);
  cr_assert(cJSON_IsString(tf), "no trace file listed");
  return pd_test_slurp(tf->valuestring);
}

/* ---- kernel-name steps ------------------------------------------------------------------------ */

Test(inject_session, each_matching_launch_ends_a_step) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "^optim_step$"); /* matches the demangled name only */
  snprintf(c.name, sizeof c.name, "toy");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 1, .warmup = 1, .active = 2, .repeat = 1};
  c.schedule_set = true;
  pd_inject_session_t *s = session_make(&c);
  cr_assert_not(pd_inject_session_started(s));
  for (int step = 0; step < 6; step++) {
    launch(s, "_Z7forwardPf");
    launch(s, "_Z8backwardPf");
    launch(s, "_Z10optim_stepPf");
    cr_assert_eq(pd_inject_session_steps(s), step + 1, "step %d: one step per matching launch", step);
  }
  cr_assert(pd_inject_session_started(s));
  cr_assert_eq(g_syncs, 1, "the device is synchronized once, before the cycle closes");
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  cr_assert_eq(pd_inject_session_finish(s), 0, "a second finish does nothing");

  char path[300];
  snprintf(path, sizeof path, "%s/m.json", g_dir);
  cJSON *j = pd_test_json_read(path);
  const cJSON *cfg = cJSON_GetObjectItem(j, "config");
  cr_assert_str_eq(cJSON_GetObjectItem(cfg, "name")->valuestring, "toy");
  cr_assert_str_eq(cJSON_GetObjectItem(cfg, "steps_by")->valuestring, "step_kernel");
  cr_assert_str_eq(cJSON_GetObjectItem(cfg, "step_kernel")->valuestring, "^optim_step$");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), 2, "the two active steps");
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metrics"), "kernels_per_step")->valuedouble, 3.0);
  cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "verdict")));
  cr_assert(cJSON_IsObject(cJSON_GetObjectItem(j, "profiler_cost")));
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "device"), "name")->valuestring, "Mock GPU");
  char *trace = trace_text(j);
  cr_assert_not_null(strstr(trace, "ProfilerStep#2"));
  cr_assert_not_null(strstr(trace, "ProfilerStep#3"));
  cr_assert_null(strstr(trace, "ProfilerStep#1\""), "the warmup step is not written");
  cr_assert_not_null(strstr(trace, "optim_step"));
  free(trace);
  cJSON_Delete(j);
  cr_assert_not_null(strstr(log_text(), "2 profiled steps"), "%s", log_text());
  pd_inject_session_destroy(s);
}

/* The added time measured in the process: recorded steps 4 ms longer than the untraced ones
 * before the window give about +4000 us, from the untraced periods after the run's first
 * two and the recorded ones (the warmup step's is neither). */
Test(inject_session, the_added_time_is_measured_against_the_untraced_steps) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "^optim_step$");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 6, .warmup = 1, .active = 4, .repeat = 1};
  c.schedule_set = true;
  pd_inject_session_t *s = session_make(&c);
  for (int step = 0; step < 11; step++) {
    launch(s, "_Z7forwardPf");
    /* steps 7..10 are recorded; the clock skips instead of sleeping, so a loaded host
     * adds only its own few microseconds per step (a 2 ms sleep once took 7.9 ms) */
    pd_clock_skip_ns(step >= 7 ? 6000000 : 2000000);
    launch(s, "_Z10optim_stepPf");
  }
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  char path[300];
  snprintf(path, sizeof path, "%s/m.json", g_dir);
  cJSON *j = pd_test_json_read(path);
  const cJSON *pc = cJSON_GetObjectItem(j, "profiler_cost");
  const cJSON *added = cJSON_GetObjectItem(pc, "measured_added_us_per_step");
  cr_assert(cJSON_IsNumber(added), "measured_added_us_per_step missing");
  cr_expect(added->valuedouble > 3000 && added->valuedouble < 8000, "got %.1f us", added->valuedouble);
  cr_expect_eq(cJSON_GetObjectItem(pc, "measured_untraced_steps")->valuedouble, 4.0, "steps 2..5");
  cr_expect_eq(cJSON_GetObjectItem(pc, "measured_traced_steps")->valuedouble, 4.0, "steps 7..10");
  /* the same untraced periods are written as the untraced steps the gate's A/B judges */
  const char *keys[] = {"warmup_step_times_s", "warmup_periods_s"};
  for (size_t k = 0; k < 2; k++) {
    const cJSON *w = cJSON_GetObjectItem(j, keys[k]), *x = NULL;
    cr_assert_eq(cJSON_GetArraySize(w), 4, "%s: steps 2..5", keys[k]);
    cJSON_ArrayForEach(x, w) cr_expect(x->valuedouble > 0.0019 && x->valuedouble < 0.0060, "%s: %g s", keys[k], x->valuedouble);
  }
  cJSON_Delete(j);
  pd_inject_session_destroy(s);
}

/* --probe: a mock probe that takes 20 ms (of the skipped clock) and returns known values; the n-th call fails when
 * g_probe_fail_at is n (1-based; 0 never). */
static int g_probe_calls, g_probe_fail_at;
static int probe_cb(double *launch_ns, double *compute_ns) {
  g_probe_calls++;
  pd_clock_skip_ns(20000000);
  if (g_probe_calls == g_probe_fail_at) return -1;
  *launch_ns = 4000.0 + g_probe_calls;
  *compute_ns = 30000.0 + g_probe_calls;
  return 0;
}

/* Runs 14 range steps of 2 ms (the clock skips, pd_clock_skip_ns; wait 8, warmup 1, active 2: the untraced steps 2..7 are
 * kept, the run's first two left out) and 2 more after the cycle (the first after it is
 * left out), with --probe and the mock probe; returns the metrics JSON. */
static cJSON *probe_run(void) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_range, sizeof c.step_range, "train_step");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 8, .warmup = 1, .active = 2, .repeat = 1};
  c.schedule_set = true;
  c.probe = true;
  pd_inject_env_t env = {.source = &g_mock.base, .device_sync = sync_cb, .device_info = info_cb,
                         .speed_probe = probe_cb, .log = g_log};
  pd_inject_session_t *s = session_make_env(&c, &env, "m.json");
  for (int step = 0; step < 14; step++) {
    pd_inject_on_range_push(s, "train_step");
    launch(s, "_Z7forwardPf");
    pd_clock_skip_ns(2000000);
    pd_inject_on_range_pop(s);
  }
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  pd_inject_session_destroy(s);
  char path[300];
  snprintf(path, sizeof path, "%s/m.json", g_dir);
  return pd_test_json_read(path);
}

/* After each kept untraced step the probe runs once, its values written one to one with
 * the untraced steps (warmup_probe_launch_ns, as profiler_demo --warmup_probe's, which the
 * A/B takes as its covariate), and its 20 ms stay out of every step's period. */
Test(inject_session, the_probe_follows_each_kept_untraced_step_outside_its_time) {
  g_probe_calls = 0;
  g_probe_fail_at = 0;
  cJSON *j = probe_run();
  const cJSON *w = cJSON_GetObjectItem(j, "warmup_step_times_s"), *x = NULL;
  const cJSON *pl = cJSON_GetObjectItem(j, "warmup_probe_launch_ns");
  const cJSON *pc = cJSON_GetObjectItem(j, "warmup_probe_compute_ns");
  const int n = cJSON_GetArraySize(w);
  cr_assert_eq(n, 7, "untraced steps 2..7 and 12 (the first after the cycle is left out)");
  cr_assert_eq(g_probe_calls, n, "one probe per kept untraced step");
  cr_assert_eq(cJSON_GetArraySize(pl), n);
  cr_assert_eq(cJSON_GetArraySize(pc), n);
  for (int i = 0; i < n; i++) {
    cr_expect_eq(cJSON_GetArrayItem(pl, i)->valuedouble, 4001.0 + i, "launch ns of probe %d", i);
    cr_expect_eq(cJSON_GetArrayItem(pc, i)->valuedouble, 30001.0 + i, "compute ns of probe %d", i);
  }
  /* a 2 ms step with the probe's 20 ms inside would read over 22 ms */
  cJSON_ArrayForEach(x, w) cr_expect(x->valuedouble > 0.0019 && x->valuedouble < 0.012, "period %g s", x->valuedouble);
  cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "probe")));
  cJSON_Delete(j);
}

/* A probe that fails ends the series, said once: the metrics JSON carries none (its values
 * would no longer pair with the untraced steps), and the untraced steps are still written. */
Test(inject_session, a_failed_probe_drops_the_series_and_says_so_once) {
  g_probe_calls = 0;
  g_probe_fail_at = 3;
  cJSON *j = probe_run();
  cr_assert_eq(g_probe_calls, 3, "no probe after the failed one");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "warmup_step_times_s")), 7);
  cr_assert_null(cJSON_GetObjectItem(j, "warmup_probe_launch_ns"));
  cr_assert_null(cJSON_GetObjectItem(j, "warmup_probe_compute_ns"));
  const char *log = log_text();
  const char *first = strstr(log, "--probe after untraced step 3: the probe failed");
  cr_assert_not_null(first, "%s", log);
  cr_assert_null(strstr(first + 1, "--probe after"), "said once: %s", log);
  cJSON_Delete(j);
}

/* Kernel-name steps: once the schedule's last cycle is written and 16 untraced steps after
 * it are timed, the outputs are written at that step (not at exit) and the launch hook is
 * told, once, to let go of CUPTI; later launches are not seen and exit writes nothing more. */
Test(inject_session, kernel_steps_finish_after_the_schedule_and_let_go_once) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "^optim_step$");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 1, .warmup = 1, .active = 3, .repeat = 1};
  c.schedule_set = true;
  pd_inject_session_t *s = session_make(&c);
  char path[300];
  snprintf(path, sizeof path, "%s/m.json", g_dir);
  struct stat st;
  /* the schedule ends after step 4 (end = 5); the outputs are written when step 20 ends */
  for (int step = 0; step < 20; step++) {
    launch(s, "_Z7forwardPf");
    launch(s, "_Z10optim_stepPf");
    cr_assert_not(pd_inject_session_take_let_go(s), "step %d: too early", step);
  }
  cr_assert_neq(stat(path, &st), 0, "nothing written before the tail is timed");
  launch(s, "_Z7forwardPf");
  launch(s, "_Z10optim_stepPf");
  cr_assert_eq(pd_inject_session_steps(s), 21);
  cr_assert_eq(stat(path, &st), 0, "the metrics JSON is written at the tail's end: %s", log_text());
  cr_assert(pd_inject_session_take_let_go(s), "the hook is told to let go");
  cr_assert_not(pd_inject_session_take_let_go(s), "once");
  cr_assert_not_null(strstr(log_text(), "the schedule ended 16 steps ago (step 21)"), "%s", log_text());
  cr_assert_not_null(strstr(log_text(), "3 profiled steps"), "%s", log_text());
  cJSON *j = pd_test_json_read(path);
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), 3);
  const cJSON *pc = cJSON_GetObjectItem(j, "profiler_cost");
  /* untraced periods: step 0 and steps 6..20 (step 5 carries the cycle's write), the
   * run's first two left out; traced: steps 2..4 */
  cr_expect_eq(cJSON_GetObjectItem(pc, "measured_untraced_steps")->valuedouble, 14.0);
  cr_expect_eq(cJSON_GetObjectItem(pc, "measured_traced_steps")->valuedouble, 3.0);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "warmup_step_times_s")), 14);
  cJSON_Delete(j);
  cr_assert_eq(remove(path), 0);
  for (int step = 0; step < 5; step++) launch(s, "_Z10optim_stepPf");
  cr_assert_eq(pd_inject_session_steps(s), 21, "later launches are not seen");
  cr_assert_not(pd_inject_session_take_let_go(s));
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  cr_assert_neq(stat(path, &st), 0, "exit writes nothing more");
  pd_inject_session_destroy(s);
}

/* Steps by NVTX range need no launch callback, and repeat 0 never ends: neither lets go. */
Test(inject_session, range_steps_and_endless_schedules_never_let_go) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "^optim_step$");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 1, .warmup = 0, .active = 1, .repeat = 0};
  c.schedule_set = true;
  pd_inject_session_t *s = session_make(&c);
  for (int step = 0; step < 40; step++) launch(s, "_Z10optim_stepPf");
  cr_assert_eq(pd_inject_session_steps(s), 40);
  cr_assert_not(pd_inject_session_take_let_go(s), "repeat 0 cycles until the program ends");
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  pd_inject_session_destroy(s);
  pd_inject_config_init(&c);
  pd_inject_session_t *w = session_make(&c);
  for (int i = 0; i < 40; i++) launch(w, "_Z1kv");
  cr_assert_not(pd_inject_session_take_let_go(w), "the whole run is one step");
  cr_assert_eq(pd_inject_session_finish(w), 0, "%s", log_text());
  pd_inject_session_destroy(w);
  pd_inject_config_init(&c);
  snprintf(c.step_range, sizeof c.step_range, "train_step");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 1, .warmup = 0, .active = 1, .repeat = 1};
  c.schedule_set = true;
  pd_inject_session_t *r = session_make(&c);
  for (int step = 0; step < 40; step++) {
    pd_inject_on_range_push(r, "train_step");
    launch(r, "_Z10optim_stepPf");
    pd_inject_on_range_pop(r);
  }
  cr_assert_not(pd_inject_session_take_let_go(r), "range steps hold no launch callback to let go of");
  cr_assert_eq(pd_inject_session_finish(r), 0, "%s", log_text());
  pd_inject_session_destroy(r);
  cr_assert_null(strstr(log_text(), "the schedule ended"), "%s", log_text());
}

Test(inject_session, the_mangled_name_matches_too_and_results_are_cached) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "_Z4stepv");
  pd_inject_session_t *s = session_make(&c);
  const char *name = "_Z4stepv";
  for (int i = 0; i < 3; i++) launch(s, name);
  launch(s, "_Z5otherv");
  cr_assert_eq(pd_inject_session_steps(s), 3);
  /* a driver launch of its own (cuBLAS's way) counts as well */
  pd_inject_on_launch(s, name, false, false);
  pd_inject_on_launch(s, name, false, true);
  cr_assert_eq(pd_inject_session_steps(s), 4);
  /* an exit whose entry was never seen is ignored */
  pd_inject_on_launch(s, name, true, true);
  cr_assert_eq(pd_inject_session_steps(s), 4);
  pd_inject_session_destroy(s);
}

Test(inject_session, the_whole_run_is_one_step_without_a_step_source) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  pd_inject_session_t *s = session_make(&c);
  for (int i = 0; i < 4; i++) launch(s, "_Z1kv");
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  cr_assert_not_null(strstr(log_text(), "the whole run is one step"), "%s", log_text());
  char path[300];
  snprintf(path, sizeof path, "%s/m.json", g_dir);
  cJSON *j = pd_test_json_read(path);
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "steps_by")->valuestring, "whole_run");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), 1);
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metrics"), "kernels_per_step")->valuedouble, 4.0);
  cJSON_Delete(j);
  pd_inject_session_destroy(s);
}

Test(inject_session, a_program_that_never_launches_writes_nothing) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  pd_inject_session_t *s = session_make(&c);
  cr_assert_eq(pd_inject_session_finish(s), 0);
  cr_assert_not(pd_inject_session_started(s));
  cr_assert_eq(pd_test_count_files(g_dir, NULL), 0, "nothing written");
  cr_assert_str_eq(log_text(), "", "nothing said");
  pd_inject_session_destroy(s);
}

Test(inject_session, a_schedule_that_records_nothing_writes_nothing) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "step");
  c.schedule.skip_first = 100;
  c.schedule_set = true;
  pd_inject_session_t *s = session_make(&c);
  for (int i = 0; i < 3; i++) launch(s, "step");
  cr_assert_eq(pd_inject_session_finish(s), 0);
  cr_assert_not_null(strstr(log_text(), "recorded none: nothing written"), "%s", log_text());
  struct stat st;
  char path[300];
  snprintf(path, sizeof path, "%s/m.json", g_dir);
  cr_assert_neq(stat(path, &st), 0);
  pd_inject_session_destroy(s);
}

/* ---- it never breaks the program ---------------------------------------------------------------- */

Test(inject_session, an_unwritable_trace_directory_warns_once_and_stops) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  pd_inject_session_t *s = NULL;
  snprintf(c.trace_dir, sizeof c.trace_dir, "/dev/null/traces");
  snprintf(c.output_json, sizeof c.output_json, "%s/m.json", g_dir);
  pd_inject_env_t env = {.source = &g_mock.base, .log = g_log};
  cr_assert_eq(pd_inject_session_create(&c, &env, &s), 0);
  for (int i = 0; i < 3; i++) launch(s, "k");
  cr_assert_eq(pd_inject_session_finish(s), 0);
  const char *log = log_text();
  cr_assert_not_null(strstr(log, "cannot create the trace directory '/dev/null/traces'"), "%s", log);
  cr_assert_not_null(strstr(log, "runs on unprofiled"), "%s", log);
  cr_assert_null(strchr(strchr(log, '\n') + 1, '\n'), "one line: %s", log);
  cr_assert_eq(g_mock.enables, 0, "no record was taken");
  pd_inject_session_destroy(s);
}

Test(inject_session, a_source_that_cannot_start_warns_and_the_program_runs_on) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "step");
  c.schedule = (pd_schedule_t){.active = 1, .repeat = 1};
  c.schedule_set = true;
  g_mock.enable_rc = PD_ECUPTI_BUSY;
  pd_inject_session_t *s = session_make(&c);
  for (int i = 0; i < 3; i++) launch(s, "step");
  cr_assert_eq(pd_inject_session_finish(s), 0);
  const char *log = log_text();
  cr_assert_not_null(strstr(log, "warning: profiler start"), "%s", log);
  cr_assert_not_null(strstr(log, "mock enable refused"), "%s", log);
  cr_assert_eq(g_mock.enables, 1, "no retry after the failure");
  pd_inject_session_destroy(s);
}

Test(inject_session, an_unwritable_metrics_json_is_said) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  pd_inject_session_t *s = session_make(&c);
  snprintf(c.output_json, sizeof c.output_json, "%s/m.json", g_dir);
  launch(s, "k");
  /* the JSON's directory turns into a file under the program's feet */
  pd_inject_session_t *t = s;
  char blocker[300];
  snprintf(blocker, sizeof blocker, "%s/m.json", g_dir);
  cr_assert_eq(mkdir(blocker, 0700), 0);
  cr_assert_neq(pd_inject_session_finish(t), 0);
  cr_assert_not_null(strstr(log_text(), "cannot write the metrics JSON"), "%s", log_text());
  rmdir(blocker);
  pd_inject_session_destroy(s);
}

/* ---- NVTX ranges through the NVTX tool's entry point ----------------------------------------------- */

/* A hand-made NVTX export table: the tool fills our slot arrays. */
static NvtxFunctionPointer g_core_fn[NVTX_CBID_CORE_SIZE];
static NvtxFunctionPointer *g_core[NVTX_CBID_CORE_SIZE + 1];
static NvtxFunctionPointer g_core2_fn[NVTX_CBID_CORE2_SIZE];
static NvtxFunctionPointer *g_core2[NVTX_CBID_CORE2_SIZE + 1];

static int NVTX_API fake_module_table(NvtxCallbackModule module, NvtxFunctionTable *out, unsigned int *size) {
  if (module == NVTX_CB_MODULE_CORE) {
    for (int i = 1; i < NVTX_CBID_CORE_SIZE; i++) g_core[i] = &g_core_fn[i];
    *out = g_core;
    *size = NVTX_CBID_CORE_SIZE;
    return 1;
  }
  if (module == NVTX_CB_MODULE_CORE2) {
    for (int i = 1; i < NVTX_CBID_CORE2_SIZE; i++) g_core2[i] = &g_core2_fn[i];
    *out = g_core2;
    *size = NVTX_CBID_CORE2_SIZE;
    return 1;
  }
  return 0;
}

static const NvtxExportTableCallbacks k_callbacks = {sizeof(NvtxExportTableCallbacks), fake_module_table};

static const void *NVTX_API fake_export_table(uint32_t id) { return id == NVTX_ETID_CALLBACKS ? &k_callbacks : NULL; }

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

Test(inject_session, nvtx_ranges_make_steps_and_host_ranges) {
  memset(g_core_fn, 0, sizeof g_core_fn);
  memset(g_core2_fn, 0, sizeof g_core2_fn);
  cr_assert_eq(InitializeInjectionNvtx2(fake_export_table), 1);
  cr_assert_null(g_core_fn[NVTX_CBID_CORE_MarkA], "marks stay no-ops");
  cr_assert_null(g_core_fn[NVTX_CBID_CORE_NameOsThreadA], "thread names stay no-ops");
  nvtxRangePushA_impl_fntype push_a = (nvtxRangePushA_impl_fntype)g_core_fn[NVTX_CBID_CORE_RangePushA];
  nvtxRangePushW_impl_fntype push_w = (nvtxRangePushW_impl_fntype)g_core_fn[NVTX_CBID_CORE_RangePushW];
  nvtxRangePushEx_impl_fntype push_ex = (nvtxRangePushEx_impl_fntype)g_core_fn[NVTX_CBID_CORE_RangePushEx];
  nvtxRangePop_impl_fntype pop = (nvtxRangePop_impl_fntype)g_core_fn[NVTX_CBID_CORE_RangePop];
  nvtxRangeStartA_impl_fntype start_a = (nvtxRangeStartA_impl_fntype)g_core_fn[NVTX_CBID_CORE_RangeStartA];
  nvtxRangeEnd_impl_fntype end = (nvtxRangeEnd_impl_fntype)g_core_fn[NVTX_CBID_CORE_RangeEnd];
  nvtxDomainCreateA_impl_fntype dcreate = (nvtxDomainCreateA_impl_fntype)g_core2_fn[NVTX_CBID_CORE2_DomainCreateA];
  nvtxDomainRegisterStringA_impl_fntype reg =
      (nvtxDomainRegisterStringA_impl_fntype)g_core2_fn[NVTX_CBID_CORE2_DomainRegisterStringA];
  nvtxDomainRangePushEx_impl_fntype dpush = (nvtxDomainRangePushEx_impl_fntype)g_core2_fn[NVTX_CBID_CORE2_DomainRangePushEx];
  nvtxDomainRangePop_impl_fntype dpop = (nvtxDomainRangePop_impl_fntype)g_core2_fn[NVTX_CBID_CORE2_DomainRangePop];
  nvtxDomainDestroy_impl_fntype ddestroy = (nvtxDomainDestroy_impl_fntype)g_core2_fn[NVTX_CBID_CORE2_DomainDestroy];
  cr_assert(push_a && push_w && push_ex && pop && start_a && end && dcreate && reg && dpush && dpop && ddestroy);

  /* before CUDA is initialized there is no session: ranges do nothing */
  pd_inject_nvtx_set_session(NULL);
  cr_assert_eq(push_a("train_step"), 0);
  cr_assert_eq(pop(), 0);
  cr_assert_eq(pop(), -1, "a pop without a push");

  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_range, sizeof c.step_range, "train_step");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 0, .warmup = 0, .active = 3, .repeat = 1};
  c.schedule_set = true;
  pd_inject_session_t *s = session_make(&c);
  pd_inject_nvtx_set_session(s);
  nvtxDomainHandle_t dom = dcreate("my_domain");
  cr_assert_not_null(dom);
  nvtxStringHandle_t fwd = reg(dom, "forward");
  cr_assert_eq(reg(dom, "forward"), fwd, "registered once, the same handle again");
  cr_assert_eq(dcreate("my_domain"), dom);
  nvtxEventAttributes_t at;
  memset(&at, 0, sizeof at);
  at.version = NVTX_VERSION;
  at.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  at.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  at.message.registered = fwd;
  for (int step = 0; step < 3; step++) {
    cr_assert_eq(push_a("train_step"), 0);
    cr_assert_eq(pd_inject_session_steps(s), step, "the step range begins step %d", step);
    cr_assert_eq(dpush(dom, &at), 1);
    launch(s, "_Z3fwdv");
    cr_assert_eq(dpop(dom), 1);
    nvtxRangeId_t id = start_a("data");
    cr_assert_neq(id, 0, "recorded while tracing");
    end(id);
    cr_assert_eq(push_w(L"wide"), 1);
    cr_assert_eq(pop(), 1);
    at.messageType = NVTX_MESSAGE_TYPE_ASCII;
    at.message.ascii = "ex_range";
    cr_assert_eq(push_ex(&at), 1);
    cr_assert_eq(pop(), 1);
    /* an op range as torch's emit_nvtx writes it: recorded under the op's own name */
    cr_assert_eq(push_a("aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], [3, 4]]"), 1);
    launch(s, "_Z4gemmv");
    cr_assert_eq(pop(), 1);
    at.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    at.message.registered = fwd;
    cr_assert_eq(pop(), 0);
  }
  end(0);     /* a range started while not recording: nothing */
  end(12345); /* unknown id: nothing */
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  pd_inject_nvtx_set_session(NULL);
  ddestroy(dom);

  char path[300];
  snprintf(path, sizeof path, "%s/m.json", g_dir);
  cJSON *j = pd_test_json_read(path);
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "steps_by")->valuestring, "step_range");
  cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "step_times_s")), 3);
  char *trace = trace_text(j);
  const char *names[] = {"\"ProfilerStep#0\"", "\"ProfilerStep#2\"", "\"train_step\"", "\"forward\"", "\"data\"",
                         "\"wide\"", "\"ex_range\"", "\"aten::mm\""};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    cr_assert_not_null(strstr(trace, names[i]), "%s not in the trace", names[i]);
  cr_assert_null(strstr(trace, "seq = 3"), "emit_nvtx's details are not part of the op's name");
  cr_assert_not_null(strstr(trace, "\"stepRange\": \"train_step\""), "the trace names the program's step range");
  free(trace);
  cJSON_Delete(j);
  pd_inject_session_destroy(s);
}

Test(inject_session, a_step_range_never_opened_is_said) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_range, sizeof c.step_range, "train_step");
  pd_inject_session_t *s = session_make(&c);
  launch(s, "k"); /* launches do not start a range-stepped profiler */
  pd_inject_on_range_push(s, "other");
  pd_inject_on_range_pop(s);
  cr_assert_not(pd_inject_session_started(s));
  cr_assert_eq(pd_inject_session_finish(s), 0);
  cr_assert_not_null(strstr(log_text(), "no NVTX range 'train_step' was opened"), "%s", log_text());
  pd_inject_session_destroy(s);
}

Test(inject_session, the_nvtx_entry_refuses_a_bad_export_table) {
  cr_assert_eq(InitializeInjectionNvtx2(NULL), 0);
}

/* PyTorch's emit_nvtx op ranges: the op's name is what precedes the details, and only a
 * text of exactly that form is split. */
Test(inject_session, emit_nvtx_op_ranges_keep_the_op_name) {
  char name[64];
  static const struct {
    const char *text, *want; /* want NULL: not split */
  } cases[] = {
      {"aten::mm, seq = 3", "aten::mm"},
      {"aten::add_, op_id = 12", "aten::add_"},
      {"aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], [3, 4]], input_op_ids = [(5,0), (6,1)]", "aten::mm"},
      {"aten::ones, sizes = []", "aten::ones"},
      {"aten::empty, sizes = [[], [0]]", "aten::empty"},
      {"autograd::engine::evaluate_function: MulBackward0, seq = 9, op_id = 40", "autograd::engine::evaluate_function: MulBackward0"},
      {"a, b, seq = 1", "a, b"},
      {"train_step", NULL},
      {"aten::mm", NULL},
      {", seq = 3", NULL},                          /* no name */
      {"aten::mm, seq = x", NULL},                  /* not a number */
      {"aten::mm, seq = 3, extra", NULL},           /* something after the parts */
      {"aten::mm, op_id = 7, seq = 3", NULL},       /* out of order */
      {"aten::mm, sizes = [[2, 3]", NULL},          /* unclosed */
      {"aten::mm, input_op_ids = [(5,0)", NULL},    /* unclosed */
      {"load, seq = 3 items", NULL},                /* a user's text that only looks like it */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    memset(name, 'x', sizeof name);
    const size_t n = pd_inject_nvtx_op_name(cases[i].text, name, sizeof name);
    if (cases[i].want == NULL) {
      cr_expect_eq(n, 0u, "'%s' must keep its whole text", cases[i].text);
    } else {
      cr_expect_eq(n, strlen(cases[i].want), "'%s'", cases[i].text);
      cr_expect_str_eq(name, cases[i].want);
    }
  }
  cr_expect_eq(pd_inject_nvtx_op_name("aten::mm, seq = 3", name, 8), 0u, "a name that does not fit is not cut");
  cr_expect_eq(pd_inject_nvtx_op_name("aten::mm, seq = 3", name, 9), 8u);
  cr_expect_eq(pd_inject_nvtx_op_name(NULL, name, sizeof name), 0u);
  cr_expect_eq(pd_inject_nvtx_op_name("aten::mm, seq = 3", NULL, 5), 0u);
}

/* ---- the line for a PyTorch program without op ranges ------------------------------------------ */

static bool pytorch_yes(void) { return true; }
static bool pytorch_no(void) { return false; }

/* One run of 4 steps (a kernel ends each) with is_pytorch as given; with op_range, each step
 * also opens an op range as torch's emit_nvtx writes it. Returns what the run added to the log. */
static char *pytorch_run(bool (*is_pytorch)(void), bool op_range, int run) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.step_kernel, sizeof c.step_kernel, "optim_step");
  c.schedule = (pd_schedule_t){.skip_first = 0, .wait = 0, .warmup = 1, .active = 2, .repeat = 1};
  c.schedule_set = true;
  pd_inject_env_t env = {.source = &g_mock.base, .device_sync = sync_cb, .device_info = info_cb,
                         .is_pytorch = is_pytorch, .log = g_log};
  char json[32];
  snprintf(json, sizeof json, "m%d.json", run);
  pd_inject_session_t *s = session_make_env(&c, &env, json);
  const size_t before = strlen(log_text());
  for (int step = 0; step < 4; step++) {
    if (op_range) pd_inject_on_range_push(s, "aten::mm, seq = 3, op_id = 7");
    launch(s, "_Z3fwdv");
    if (op_range) pd_inject_on_range_pop(s);
    launch(s, "_Z10optim_stepPf");
  }
  cr_assert_eq(pd_inject_session_finish(s), 0, "%s", log_text());
  pd_inject_session_destroy(s);
  return strdup(log_text() + before);
}

/* CUPTI sees CUDA calls, not PyTorch's ops: a PyTorch program that opened no op range is told
 * once what the verdict cannot see and how to give it the ops; one with emit_nvtx's op
 * ranges, or a program without PyTorch, is not. */
Test(inject_session, a_pytorch_program_without_op_ranges_is_told_of_emit_nvtx) {
  const struct {
    bool (*is_pytorch)(void);
    bool op_range, told;
  } cases[] = {{pytorch_yes, false, true}, {pytorch_yes, true, false}, {pytorch_no, false, false}, {NULL, false, false}};
  for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
    char *added = pytorch_run(cases[i].is_pytorch, cases[i].op_range, i);
    cr_assert_not_null(strstr(added, "verdict:"), "case %d: the run's line first: %s", i, added);
    const char *hint = strstr(added, "torch.autograd.profiler.emit_nvtx()");
    if (cases[i].told) {
      cr_expect_not_null(hint, "case %d: %s", i, added);
      cr_expect_null(hint != NULL ? strstr(hint + 1, "torch.autograd.profiler.emit_nvtx()") : NULL, "once");
    } else {
      cr_expect_null(hint, "case %d: %s", i, added);
    }
    free(added);
  }
}
