/* test_profiler.c: the profiler's state machine and host ranges, CPU activity only.
 *
 * A CPU-only profiler makes no CUDA or CUPTI call, so the schedule transitions, the
 * ProfilerStep#N ranges, warmup discarding, multi-thread ranges, error propagation and
 * memory flatness are all checked here without a GPU. Criterion runs each test in its own
 * process, so the one-profiler-per-process rule does not leak between tests.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pd/pd_prof.h"

/* ---- a trace-ready callback that keeps a summary of every cycle -------------------------- */

typedef struct {
  pd_event_kind_t kind;
  char name[64];
  char shape[64];
  int64_t step;
  uint32_t depth;
  uint32_t tid;
  int64_t start_ns, end_ns;
} ev_copy_t;

typedef struct {
  ev_copy_t *ev;
  size_t n;
  int64_t at_step; /* pd_prof_current_step() during the callback */
  char step_range[64]; /* pd_trace_step_range() of the cycle, "" none */
} cycle_copy_t;

typedef struct {
  cycle_copy_t cycles[64];
  int ncycles; /* callbacks seen (summaries kept for the first 64) */
  int fail_with; /* return this from the callback when != 0 */
} log_t;

static int log_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  log_t *log = user;
  if (log->ncycles < 64) {
    cycle_copy_t *c = &log->cycles[log->ncycles];
    c->n = pd_trace_count(cycle);
    c->ev = calloc(c->n ? c->n : 1, sizeof(*c->ev));
    c->at_step = pd_prof_current_step(prof);
    snprintf(c->step_range, sizeof c->step_range, "%s", pd_trace_step_range(cycle) ? pd_trace_step_range(cycle) : "");
    const pd_event_t *ev = pd_trace_events(cycle);
    for (size_t i = 0; i < c->n; i++) {
      c->ev[i].kind = ev[i].kind;
      snprintf(c->ev[i].name, sizeof(c->ev[i].name), "%s", ev[i].name ? ev[i].name : "");
      snprintf(c->ev[i].shape, sizeof(c->ev[i].shape), "%s",
               ev[i].u.range.shape ? ev[i].u.range.shape : "");
      c->ev[i].step = ev[i].u.range.step;
      c->ev[i].depth = ev[i].u.range.depth;
      c->ev[i].tid = ev[i].tid;
      c->ev[i].start_ns = ev[i].start_ns;
      c->ev[i].end_ns = ev[i].end_ns;
    }
  }
  log->ncycles++;
  return log->fail_with;
}

static void log_free(log_t *log) {
  for (int i = 0; i < log->ncycles && i < 64; i++) free(log->cycles[i].ev);
}

static pd_prof_config_t cpu_config(log_t *log, pd_schedule_t s) {
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = PD_ACTIVITY_CPU;
  cfg.schedule = s;
  cfg.on_trace_ready = log_cb;
  cfg.user = log;
  return cfg;
}

/* Number of events named `name` in a cycle. */
static int count_named(const cycle_copy_t *c, const char *name) {
  int n = 0;
  for (size_t i = 0; i < c->n; i++) n += strcmp(c->ev[i].name, name) == 0;
  return n;
}

/* The step numbers of the ProfilerStep#N ranges of a cycle, in order, as "3,4". */
static void step_list(const cycle_copy_t *c, char *buf, size_t len) {
  buf[0] = '\0';
  for (size_t i = 0; i < c->n; i++) {
    if (c->ev[i].kind != PD_EVENT_RANGE || c->ev[i].step < 0) continue;
    char expect[48];
    snprintf(expect, sizeof(expect), "ProfilerStep#%lld", (long long)c->ev[i].step);
    cr_expect_str_eq(c->ev[i].name, expect, "step range name %s vs step %lld", c->ev[i].name,
                     (long long)c->ev[i].step);
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%lld", used ? "," : "", (long long)c->ev[i].step);
  }
}

/* One training "step": a range named work@N. */
static void do_step_work(pd_prof_t *p) {
  char name[32];
  snprintf(name, sizeof(name), "work@%lld", (long long)pd_prof_current_step(p));
  cr_assert_eq(pd_range_push(name), 0);
  cr_assert_eq(pd_range_pop(), 0);
}

/* Creates a profiler from cfg, starts it, runs n steps of do_step_work and stops it;
 * returns it for the caller to destroy. */
static pd_prof_t *run_steps(const pd_prof_config_t *cfg, int n) {
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(cfg, &p), 0, "create: %s", pd_prof_last_error(NULL));
  cr_assert_eq(pd_prof_start(p), 0);
  for (int i = 0; i < n; i++) {
    do_step_work(p);
    cr_assert_eq(pd_prof_step(p), 0, "step %d: %s", i, pd_prof_last_error(p));
  }
  cr_assert_eq(pd_prof_stop(p), 0);
  return p;
}

/* ---- schedule ------------------------------------------------------------------------- */

Test(profiler, schedule_cycles_and_step_ranges) {
  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.skip_first = 1, .wait = 1, .warmup = 1, .active = 2, .repeat = 2});
  pd_prof_t *p = run_steps(&cfg, 20);
  /* steps: 0 skip | 1 wait, 2 warmup, 3 record, 4 save | 5 wait, 6 warmup, 7, 8 save | off */
  cr_assert_eq(log.ncycles, 2, "cycles: %d", log.ncycles);
  char steps[128];
  step_list(&log.cycles[0], steps, sizeof(steps));
  cr_expect_str_eq(steps, "3,4");
  step_list(&log.cycles[1], steps, sizeof(steps));
  cr_expect_str_eq(steps, "7,8");
  /* The callback runs inside the step() that leaves the save step. */
  cr_expect_eq(log.cycles[0].at_step, 5);
  cr_expect_eq(log.cycles[1].at_step, 9);
  /* Each cycle holds exactly its active steps' work ranges, nested in the step ranges. */
  cr_expect_eq(count_named(&log.cycles[0], "work@3"), 1);
  cr_expect_eq(count_named(&log.cycles[0], "work@4"), 1);
  cr_expect_eq(log.cycles[0].n, 4, "events in cycle 0: %zu", log.cycles[0].n);
  for (size_t i = 0; i < log.cycles[0].n; i++) {
    const ev_copy_t *e = &log.cycles[0].ev[i];
    cr_expect_eq(e->depth, e->step >= 0 ? 0u : 1u, "%s depth %u", e->name, e->depth);
    cr_expect_leq(e->start_ns, e->end_ns);
    if (i > 0) cr_expect_geq(e->start_ns, log.cycles[0].ev[i - 1].start_ns, "sorted by start");
  }
  pd_prof_destroy(p);
  log_free(&log);
}

/* pd_clock_skip_ns moves every timestamp alike: a range and its step that "took" 50 ms
 * without sleeping measure at least that, the steps around them far less, and the order of
 * events holds. */
Test(profiler, a_skipped_clock_moves_ranges_and_steps_alike) {
  log_t log = {0};
  pd_prof_config_t cfg = cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 0, .active = 3, .repeat = 1});
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0, "create: %s", pd_prof_last_error(NULL));
  cr_assert_eq(pd_prof_start(p), 0);
  const int64_t t0 = pd_clock_now_ns();
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(pd_range_push("work"), 0);
    if (i == 1) pd_clock_skip_ns(50000000);
    pd_clock_skip_ns(-1); /* never backward */
    cr_assert_eq(pd_range_pop(), 0);
    cr_assert_eq(pd_prof_step(p), 0);
  }
  cr_assert_geq(pd_clock_now_ns() - t0, 50000000);
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(log.ncycles, 1);
  const cycle_copy_t *c = &log.cycles[0];
  int works = 0, steps = 0;
  for (size_t i = 0; i < c->n; i++) {
    const ev_copy_t *e = &c->ev[i];
    const int64_t d = e->end_ns - e->start_ns;
    const bool is_step = e->step >= 0;
    const int64_t idx = is_step ? steps++ : works++;
    if (idx == 1) cr_expect_geq(d, 50000000, "%s took %lld ns", e->name, (long long)d);
    else cr_expect_lt(d, 40000000, "%s #%lld took %lld ns", e->name, (long long)idx, (long long)d);
    if (i > 0) cr_expect_geq(e->start_ns, c->ev[i - 1].start_ns, "sorted by start");
  }
  cr_expect_eq(works, 3);
  cr_expect_eq(steps, 3);
  pd_prof_destroy(p);
  log_free(&log);
}

/* The config's step range (pd_run --step_range) is set on every cycle's trace; none
 * without it. */
Test(profiler, cycles_carry_the_programs_step_range) {
  for (int named = 0; named < 2; named++) {
    log_t log = {0};
    pd_prof_config_t cfg = cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 2});
    if (named) cfg.step_range = "train_step";
    pd_prof_t *p = run_steps(&cfg, 3);
    cr_assert_eq(log.ncycles, 2);
    for (int c = 0; c < log.ncycles; c++)
      cr_expect_str_eq(log.cycles[c].step_range, named ? "train_step" : "", "cycle %d", c);
    pd_prof_destroy(p);
    log_free(&log);
  }
}

Test(profiler, warmup_steps_are_discarded) {
  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 3, .active = 1, .repeat = 1});
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  /* A range opened in warmup and closed in the recorded step straddles the boundary. */
  cr_assert_eq(pd_range_push("straddle"), 0);
  for (int i = 0; i < 6; i++) {
    do_step_work(p);
    if (i == 3) cr_assert_eq(pd_range_pop(), 0); /* in step 3, the recorded one */
    cr_assert_eq(pd_prof_step(p), 0);
  }
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(log.ncycles, 1);
  const cycle_copy_t *c = &log.cycles[0];
  for (int s = 0; s < 3; s++) {
    char name[32];
    snprintf(name, sizeof(name), "work@%d", s);
    cr_expect_eq(count_named(c, name), 0, "%s from warmup leaked into the cycle", name);
  }
  cr_expect_eq(count_named(c, "work@3"), 1);
  cr_expect_eq(count_named(c, "straddle"), 0, "a range begun in warmup must not be kept");
  char steps[64];
  step_list(c, steps, sizeof(steps));
  cr_expect_str_eq(steps, "3");
  cr_expect_eq(c->n, 2);
  pd_prof_destroy(p);
  log_free(&log);
}

Test(profiler, repeat_zero_keeps_cycling_and_stop_hands_over_the_open_cycle) {
  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 1, .warmup = 0, .active = 2, .repeat = 0});
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  /* Cycles of 3 steps (wait, record, save); 30 steps complete 10 cycles. */
  for (int i = 0; i < 30; i++) cr_assert_eq(pd_prof_step(p), 0);
  cr_expect_eq(log.ncycles, 10);
  /* Step 30 waits, 31 records; stopping in 31 hands over the unfinished cycle. */
  cr_assert_eq(pd_prof_step(p), 0);
  do_step_work(p);
  cr_expect_eq(pd_prof_current_step(p), 31);
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(log.ncycles, 11);
  char steps[64];
  step_list(&log.cycles[10], steps, sizeof(steps));
  cr_expect_str_eq(steps, "31");
  cr_expect_eq(count_named(&log.cycles[10], "work@31"), 1);
  step_list(&log.cycles[9], steps, sizeof(steps));
  cr_expect_str_eq(steps, "28,29");
  cr_expect_eq(pd_prof_stop(p), PD_ESTATE, "stop twice");
  cr_expect_eq(pd_prof_step(p), PD_ESTATE, "step after stop");
  pd_prof_destroy(p);
  log_free(&log);
}

Test(profiler, consecutive_save_steps_each_make_a_cycle) {
  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 3});
  pd_prof_t *p = run_steps(&cfg, 5);
  cr_assert_eq(log.ncycles, 3);
  for (int c = 0; c < 3; c++) {
    char steps[16], expect[16], work[16];
    step_list(&log.cycles[c], steps, sizeof(steps));
    snprintf(expect, sizeof(expect), "%d", c);
    snprintf(work, sizeof(work), "work@%d", c);
    cr_expect_str_eq(steps, expect);
    cr_expect_eq(count_named(&log.cycles[c], work), 1);
    cr_expect_eq(log.cycles[c].n, 2, "cycle %d has %zu events", c, log.cycles[c].n);
  }
  pd_prof_destroy(p);
  log_free(&log);
}

/* ---- ranges on several threads --------------------------------------------------------- */

#define NTHREADS 4
typedef struct {
  uint32_t tid;
  int idx;
} worker_arg_t;

static void *worker(void *arg) {
  worker_arg_t *w = arg;
  w->tid = (uint32_t)syscall(SYS_gettid);
  char outer[32];
  snprintf(outer, sizeof(outer), "outer%d", w->idx);
  for (int rep = 0; rep < 3; rep++) {
    pd_range_push(outer);
    pd_range_push("inner");
    pd_range_push_shape("innermost", "[[64, 3, 32, 32]]");
    pd_range_pop();
    pd_range_pop();
    pd_range_pop();
  }
  return NULL;
}

Test(profiler, ranges_from_many_threads_keep_tid_and_depth) {
  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 1});
  cfg.record_shapes = true;
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  pthread_t th[NTHREADS];
  worker_arg_t args[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    args[i] = (worker_arg_t){.idx = i};
    cr_assert_eq(pthread_create(&th[i], NULL, worker, &args[i]), 0);
  }
  /* The main thread nests inside its ProfilerStep range: depth 1 and 2. */
  pd_range_push("main_outer");
  pd_range_push("main_inner");
  pd_range_pop();
  pd_range_pop();
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL); /* threads exit: buffers orphaned */
  cr_assert_eq(pd_prof_step(p), 0);
  cr_assert_eq(log.ncycles, 1);
  const cycle_copy_t *c = &log.cycles[0];
  uint32_t main_tid = (uint32_t)syscall(SYS_gettid);
  cr_expect_eq(c->n, 1 + 2 + NTHREADS * 9, "events: %zu", c->n);
  for (int i = 0; i < NTHREADS; i++) {
    char outer[32];
    snprintf(outer, sizeof(outer), "outer%d", i);
    int seen[3] = {0};
    for (size_t k = 0; k < c->n; k++) {
      const ev_copy_t *e = &c->ev[k];
      if (e->tid != args[i].tid) continue;
      int level = strcmp(e->name, outer) == 0 ? 0 : strcmp(e->name, "inner") == 0 ? 1
                  : strcmp(e->name, "innermost") == 0                         ? 2
                                                                              : -1;
      cr_assert_geq(level, 0, "unexpected range %s on thread %d", e->name, i);
      cr_expect_eq(e->depth, (uint32_t)level, "%s depth %u", e->name, e->depth);
      cr_expect_eq(e->step, -1);
      if (level == 2)
        cr_expect_str_eq(e->shape, "[[64, 3, 32, 32]]");
      else
        cr_expect_str_eq(e->shape, "");
      seen[level]++;
    }
    cr_expect_eq(seen[0], 3);
    cr_expect_eq(seen[1], 3);
    cr_expect_eq(seen[2], 3);
  }
  /* Nesting: every inner range lies inside an outer range of its thread. */
  for (size_t k = 0; k < c->n; k++) {
    const ev_copy_t *e = &c->ev[k];
    if (e->depth == 0 || e->tid == main_tid) continue;
    bool inside = false;
    for (size_t j = 0; j < c->n; j++) {
      const ev_copy_t *o = &c->ev[j];
      if (o->tid == e->tid && o->depth + 1 == e->depth && o->start_ns <= e->start_ns &&
          e->end_ns <= o->end_ns)
        inside = true;
    }
    cr_expect(inside, "%s (depth %u) has no parent on its thread", e->name, e->depth);
  }
  for (size_t k = 0; k < c->n; k++) {
    const ev_copy_t *e = &c->ev[k];
    if (strcmp(e->name, "main_outer") == 0) cr_expect_eq(e->depth, 1u);
    if (strcmp(e->name, "main_inner") == 0) cr_expect_eq(e->depth, 2u);
    if (strcmp(e->name, "main_outer") == 0 || e->step >= 0) cr_expect_eq(e->tid, main_tid);
  }
  pd_prof_destroy(p);
  log_free(&log);
}

Test(profiler, shapes_dropped_unless_record_shapes) {
  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 1});
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  PD_RANGE_SCOPE("scoped") { cr_assert_eq(pd_range_push_shape("conv", "[[1, 2]]"), 0); pd_range_pop(); }
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(log.ncycles, 1);
  cr_expect_eq(count_named(&log.cycles[0], "scoped"), 1);
  for (size_t k = 0; k < log.cycles[0].n; k++) {
    cr_expect_str_eq(log.cycles[0].ev[k].shape, "", "%s kept a shape", log.cycles[0].ev[k].name);
    if (strcmp(log.cycles[0].ev[k].name, "conv") == 0) cr_expect_eq(log.cycles[0].ev[k].depth, 2u);
  }
  pd_prof_destroy(p);
  log_free(&log);
}

Test(profiler, ranges_outside_tracing_are_not_recorded) {
  cr_expect_eq(pd_range_pop(), PD_ESTATE, "pop with nothing open");
  /* No profiler at all: push/pop still balance and succeed. */
  cr_expect_eq(pd_range_push("untraced"), 0);
  cr_expect_eq(pd_range_pop(), 0);
  cr_expect_eq(pd_range_push(NULL), PD_EINVAL);

  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 2, .warmup = 0, .active = 1, .repeat = 1});
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  do_step_work(p); /* step 0: wait */
  cr_assert_eq(pd_prof_step(p), 0);
  do_step_work(p); /* step 1: wait */
  cr_assert_eq(pd_range_push("pushed_untraced"), 0);
  cr_assert_eq(pd_prof_step(p), 0);
  do_step_work(p); /* step 2: save */
  cr_assert_eq(pd_range_push("open_across_cycle_end"), 0);
  cr_assert_eq(pd_prof_step(p), 0); /* the cycle ends here */
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_pop(), 0);
  cr_expect_eq(pd_range_pop(), PD_ESTATE);
  cr_assert_eq(pd_prof_stop(p), 0);
  cr_assert_eq(log.ncycles, 1);
  cr_expect_eq(count_named(&log.cycles[0], "work@0"), 0);
  cr_expect_eq(count_named(&log.cycles[0], "work@1"), 0);
  cr_expect_eq(count_named(&log.cycles[0], "work@2"), 1);
  cr_expect_eq(count_named(&log.cycles[0], "pushed_untraced"), 0);
  cr_expect_eq(count_named(&log.cycles[0], "open_across_cycle_end"), 0);
  /* work@2 sits inside the untraced range, which still counts for nesting. */
  for (size_t k = 0; k < log.cycles[0].n; k++)
    if (strcmp(log.cycles[0].ev[k].name, "work@2") == 0) cr_expect_eq(log.cycles[0].ev[k].depth, 2u);
  pd_prof_destroy(p);
  log_free(&log);
}

/* ---- errors ---------------------------------------------------------------------------- */

Test(profiler, failing_callback_error_propagates) {
  log_t log = {.fail_with = PD_EIO};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 0});
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  cr_expect_eq(pd_prof_step(p), PD_EIO);
  cr_expect_neq(pd_prof_last_error(p)[0], '\0');
  cr_expect(strstr(pd_prof_last_error(p), "on_trace_ready") != NULL, "%s", pd_prof_last_error(p));
  /* The machine is still consistent: the next cycle is traced and handed over. */
  log.fail_with = 0;
  do_step_work(p);
  cr_expect_eq(pd_prof_step(p), 0);
  cr_expect_eq(log.ncycles, 2);
  cr_expect_eq(count_named(&log.cycles[1], "work@1"), 1);
  log.fail_with = PD_ENOMEM;
  cr_expect_eq(pd_prof_stop(p), PD_ENOMEM, "stop returns the callback's error too");
  pd_prof_destroy(p);
  log_free(&log);
}

Test(profiler, bad_config_rejected) {
  log_t log = {0};
  pd_prof_t *p = (pd_prof_t *)&log; /* must be reset to NULL on failure */
  pd_prof_config_t cfg;
  const pd_schedule_t bad[] = {
      {.wait = 0, .warmup = 0, .active = 0, .repeat = 1},
      {.wait = -1, .warmup = 0, .active = 1, .repeat = 1},
      {.wait = 0, .warmup = -2, .active = 1, .repeat = 1},
      {.skip_first = -1, .wait = 0, .warmup = 0, .active = 1, .repeat = 1},
      {.wait = 0, .warmup = 0, .active = 1, .repeat = -1},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cfg = cpu_config(&log, bad[i]);
    p = (pd_prof_t *)&log;
    cr_expect_eq(pd_prof_create(&cfg, &p), PD_EINVAL, "schedule %zu", i);
    cr_expect_null(p);
    cr_expect(strstr(pd_prof_last_error(NULL), "schedule") != NULL, "%s", pd_prof_last_error(NULL));
  }
  pd_schedule_t ok = {.wait = 0, .warmup = 0, .active = 1, .repeat = 1};
  cfg = cpu_config(&log, ok);
  cfg.activities = 1u << 7;
  cr_expect_eq(pd_prof_create(&cfg, &p), PD_EINVAL, "unknown activity bit");
  cfg.activities = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA_DRIVER;
  cr_expect_eq(pd_prof_create(&cfg, &p), PD_EINVAL, "driver without CUDA");
  cfg = cpu_config(&log, ok);
  cfg.worker_name = "a/b";
  cr_expect_eq(pd_prof_create(&cfg, &p), PD_EINVAL, "worker name with a slash");
  cfg = cpu_config(&log, ok);
  cfg.device = -1;
  cr_expect_eq(pd_prof_create(&cfg, &p), PD_EINVAL, "negative device");
  cr_expect_eq(pd_prof_create(NULL, &p), PD_EINVAL);
  cr_expect_eq(pd_prof_create(&cfg, NULL), PD_EINVAL);
  /* A rejected config leaves no profiler behind: a good one can be made now. */
  cfg = cpu_config(&log, ok);
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  pd_prof_destroy(p);
}

Test(profiler, one_profiler_at_a_time_and_state_errors) {
  log_t log = {0};
  pd_prof_config_t cfg =
      cpu_config(&log, (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 1});
  pd_prof_t *a = NULL, *b = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &a), 0);
  cr_expect_eq(pd_prof_create(&cfg, &b), PD_ESTATE);
  cr_expect_null(b);
  cr_expect_eq(pd_prof_step(a), PD_ESTATE, "step before start");
  cr_expect_eq(pd_prof_stop(a), PD_ESTATE, "stop before start");
  cr_expect_eq(pd_prof_start(a), 0);
  cr_expect_eq(pd_prof_start(a), PD_ESTATE, "start twice");
  pd_prof_destroy(a); /* stops and hands over the open cycle */
  cr_expect_eq(log.ncycles, 1);
  cr_assert_eq(pd_prof_create(&cfg, &b), 0, "after destroy a new profiler may be made");
  pd_prof_destroy(b);
  pd_prof_destroy(NULL);
  cr_expect_eq(pd_prof_dropped_records(NULL), 0u);
  log_free(&log);
}

Test(profiler, trace_file_path) {
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = PD_ACTIVITY_CPU;
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  char buf[512];
  cr_expect_eq(pd_prof_trace_file_path(p, buf, sizeof(buf)), PD_EINVAL, "no trace_dir");
  pd_prof_destroy(p);

  cfg.trace_dir = "results/traces/x";
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_trace_file_path(p, buf, sizeof(buf)), 0);
  char host[256];
  cr_assert_eq(gethostname(host, sizeof(host)), 0);
  char pattern[600];
  snprintf(pattern, sizeof(pattern), "^results/traces/x/%s_%d\\.[0-9]{19}\\.pt\\.trace\\.json$", host,
           (int)getpid());
  regex_t re;
  cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
  cr_expect_eq(regexec(&re, buf, 0, NULL, 0), 0, "%s !~ %s", buf, pattern);
  regfree(&re);
  /* The Unix time is now, in nanoseconds. */
  const char *dot = strchr(buf + strlen("results/traces/x/"), '.');
  long long ns = atoll(dot + 1);
  long long now = (long long)(pd_clock_now_ns() + pd_clock_unix_offset_ns());
  cr_expect(now - ns >= 0 && now - ns < 5000000000LL, "time %lld vs now %lld", ns, now);
  cr_expect_eq(pd_prof_trace_file_path(p, buf, 20), PD_EINVAL, "buffer too small");
  pd_prof_destroy(p);

  cfg.trace_dir = "out/";
  cfg.worker_name = "rank0";
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_trace_file_path(p, buf, sizeof(buf)), 0);
  cr_expect_eq(strncmp(buf, "out/rank0.", 10), 0, "%s", buf);
  pd_prof_destroy(p);
}

/* ---- memory stays flat ------------------------------------------------------------------- */

static int count_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  size_t *counts = user;
  counts[0]++;
  if (counts[1] == 0) counts[1] = pd_trace_count(cycle);
  if (pd_trace_count(cycle) != counts[1]) counts[2]++; /* cycles that differ in size */
  return 0;
}

Test(profiler, memory_flat_over_1000_cycles) {
  size_t counts[3] = {0};
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = PD_ACTIVITY_CPU;
  cfg.schedule = (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 0};
  cfg.on_trace_ready = count_cb;
  cfg.user = counts;
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  size_t heap_after_warm = 0;
  for (int cycle = 0; cycle < 1100; cycle++) {
    for (int r = 0; r < 200; r++) {
      char name[32];
      snprintf(name, sizeof(name), "op%d", r % 50);
      pd_range_push(name);
      pd_range_pop();
    }
    cr_assert_eq(pd_prof_step(p), 0);
    if (cycle == 99) heap_after_warm = mallinfo2().uordblks;
  }
  size_t heap_end = mallinfo2().uordblks;
  cr_expect_eq(counts[0], 1100u);
  cr_expect_eq(counts[1], 201u, "events per cycle: %zu", counts[1]);
  cr_expect_eq(counts[2], 0u, "cycles of a different size");
  /* 1000 further cycles of 201 events each (~50 MB if nothing were freed) must not grow
   * the heap: the cycle trace and the range buffers are reset, not reallocated. */
  cr_expect_lt(heap_end, heap_after_warm + 64 * 1024, "heap grew from %zu to %zu bytes",
               heap_after_warm, heap_end);
  pd_prof_destroy(p);
}

/* ---- CUDA activity on a machine without a usable GPU ---------------------------------------- */

Test(profiler, cuda_activity_without_gpu_fails_cleanly) {
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg); /* CPU|CUDA */
  pd_prof_t *p = NULL;
  int rc = pd_prof_create(&cfg, &p);
  if (rc == 0) {
    /* A GPU runner: CUPTI works; the acceptance tests cover it. */
    cr_expect_not_null(p);
    pd_prof_destroy(p);
    return;
  }
  cr_expect(rc == PD_ENODEV || rc == PD_ECUPTI || rc == PD_ECUPTI_BUSY, "rc %d (%s)", rc,
            pd_err_name(rc));
  cr_expect_null(p);
  const char *msg = pd_prof_last_error(NULL);
  cr_expect_neq(msg[0], '\0', "no detail message");
  cr_log_info("pd_prof_create without GPU: %s: %s", pd_err_name(rc), msg);
  /* The failed create left nothing behind: a CPU-only profiler works. */
  cfg.activities = PD_ACTIVITY_CPU;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  pd_prof_destroy(p);
}
