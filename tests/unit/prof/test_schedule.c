/* test_schedule.c: pd_schedule_* against torch.profiler.schedule() semantics. */
#include <criterion/criterion.h>

#include "pd/pd_prof.h"

#define N PD_SCHED_NONE
#define W PD_SCHED_WARMUP
#define R PD_SCHED_RECORD
#define S PD_SCHED_RECORD_AND_SAVE

static void expect_table(const pd_schedule_t *s, const pd_sched_action_t *want, int n) {
  for (int i = 0; i < n; i++) {
    pd_sched_action_t got = pd_schedule_action(s, i);
    cr_expect_eq(got, want[i], "step %d: got %s, want %s", i, pd_sched_action_name(got),
                 pd_sched_action_name(want[i]));
  }
}

/* The example of torch's docs: schedule(skip_first=10, wait=5, warmup=1, active=3, repeat=2). */
Test(schedule, torch_docs_example) {
  pd_schedule_t s = {.skip_first = 10, .wait = 5, .warmup = 1, .active = 3, .repeat = 2};
  cr_assert_eq(pd_schedule_validate(&s), 0);
  static const pd_sched_action_t want[] = {
      N, N, N, N, N, N, N, N, N, N, /* 0-9: skip_first */
      N, N, N, N, N,                /* 10-14: wait */
      W,                            /* 15: warmup */
      R, R, S,                      /* 16-18: active, last saves */
      N, N, N, N, N,                /* 19-23: wait */
      W,                            /* 24 */
      R, R, S,                      /* 25-27 */
      N, N, N, N, N, N, N, N,       /* 28-35: repeat exhausted */
  };
  expect_table(&s, want, (int)(sizeof want / sizeof want[0]));
  cr_expect_eq(pd_schedule_action(&s, 1000000), N);
}

/* The project's default schedule (DESIGN.md section 3): wait=1, warmup=1, active=8, repeat=1. */
Test(schedule, design_default) {
  pd_schedule_t s = {.wait = 1, .warmup = 1, .active = 8, .repeat = 1};
  static const pd_sched_action_t want[] = {N, W, R, R, R, R, R, R, R, S, N, N};
  expect_table(&s, want, 12);
}

Test(schedule, warmup_zero) {
  pd_schedule_t s = {.wait = 2, .warmup = 0, .active = 2, .repeat = 2};
  static const pd_sched_action_t want[] = {N, N, R, S, N, N, R, S, N, N};
  expect_table(&s, want, 10);
}

Test(schedule, wait_zero) {
  pd_schedule_t s = {.wait = 0, .warmup = 1, .active = 2, .repeat = 2};
  static const pd_sched_action_t want[] = {W, R, S, W, R, S, N, N};
  expect_table(&s, want, 8);
}

Test(schedule, active_one_every_step_saves) {
  pd_schedule_t s = {.wait = 0, .warmup = 0, .active = 1, .repeat = 3};
  static const pd_sched_action_t want[] = {S, S, S, N, N};
  expect_table(&s, want, 5);
}

Test(schedule, repeat_zero_cycles_forever) {
  pd_schedule_t s = {.skip_first = 1, .wait = 1, .warmup = 1, .active = 2, .repeat = 0};
  static const pd_sched_action_t want[] = {N, N, W, R, S, N, W, R, S, N, W, R, S};
  expect_table(&s, want, 13);
  /* far away: cycle length 4 after one skipped step; step 4001 is the cycle's first */
  cr_expect_eq(pd_schedule_action(&s, 4001), N);
  cr_expect_eq(pd_schedule_action(&s, 4004), S);
}

Test(schedule, invalid_values) {
  pd_schedule_t base = {.wait = 1, .warmup = 1, .active = 1, .repeat = 1};
  pd_schedule_t s;
  cr_expect_eq(pd_schedule_validate(NULL), PD_EINVAL);
  s = base, s.active = 0;
  cr_expect_eq(pd_schedule_validate(&s), PD_EINVAL, "active=0 must be rejected");
  s = base, s.wait = -1;
  cr_expect_eq(pd_schedule_validate(&s), PD_EINVAL);
  s = base, s.warmup = -1;
  cr_expect_eq(pd_schedule_validate(&s), PD_EINVAL);
  s = base, s.repeat = -1;
  cr_expect_eq(pd_schedule_validate(&s), PD_EINVAL);
  s = base, s.skip_first = -1;
  cr_expect_eq(pd_schedule_validate(&s), PD_EINVAL);
  /* an invalid schedule never records; nor does a negative step */
  s = base, s.active = 0;
  cr_expect_eq(pd_schedule_action(&s, 2), N);
  cr_expect_eq(pd_schedule_action(NULL, 2), N);
  cr_expect_eq(pd_schedule_action(&base, -1), N);
  cr_expect_eq(pd_schedule_validate(&base), 0);
}

Test(schedule, large_counts_do_not_overflow) {
  pd_schedule_t s = {.wait = 2147483647, .warmup = 2147483647, .active = 2147483647, .repeat = 1};
  cr_assert_eq(pd_schedule_validate(&s), 0);
  cr_expect_eq(pd_schedule_action(&s, 2147483646), N);
  cr_expect_eq(pd_schedule_action(&s, 2147483647), W);
  cr_expect_eq(pd_schedule_action(&s, 3LL * 2147483647 - 1), S);
  cr_expect_eq(pd_schedule_action(&s, 3LL * 2147483647), N);
}

Test(schedule, action_names) {
  cr_expect_str_eq(pd_sched_action_name(PD_SCHED_NONE), "NONE");
  cr_expect_str_eq(pd_sched_action_name(PD_SCHED_WARMUP), "WARMUP");
  cr_expect_str_eq(pd_sched_action_name(PD_SCHED_RECORD), "RECORD");
  cr_expect_str_eq(pd_sched_action_name(PD_SCHED_RECORD_AND_SAVE), "RECORD_AND_SAVE");
  cr_expect_str_eq(pd_sched_action_name((pd_sched_action_t)42), "UNKNOWN");
}

/* The end is the first step from which every action is NONE, right after a cycle's save. */
Test(schedule, end_is_the_first_step_after_the_last_cycle) {
  const pd_schedule_t cases[] = {
      {.skip_first = 0, .wait = 1, .warmup = 1, .active = 5, .repeat = 1},
      {.skip_first = 3, .wait = 0, .warmup = 0, .active = 1, .repeat = 4},
      {.skip_first = 2, .wait = 2, .warmup = 1, .active = 3, .repeat = 2},
      {.skip_first = 0, .wait = 0, .warmup = 2, .active = 2, .repeat = 3},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const pd_schedule_t *s = &cases[i];
    const int64_t end = pd_schedule_end(s);
    cr_assert_gt(end, 0, "case %zu", i);
    cr_expect_eq(pd_schedule_action(s, end - 1), S, "case %zu: the step before the end saves", i);
    for (int64_t k = end; k < end + 50; k++) cr_expect_eq(pd_schedule_action(s, k), N, "case %zu step %lld", i, (long long)k);
    int64_t saves = 0;
    for (int64_t k = 0; k < end; k++) saves += pd_schedule_action(s, k) == S;
    cr_expect_eq(saves, s->repeat, "case %zu: every cycle ends before the end", i);
  }
  pd_schedule_t forever = {.wait = 1, .active = 1, .repeat = 0};
  cr_expect_eq(pd_schedule_end(&forever), -1, "repeat 0 never ends");
  pd_schedule_t bad = {.active = 0, .repeat = 1};
  cr_expect_eq(pd_schedule_end(&bad), -1);
  cr_expect_eq(pd_schedule_end(NULL), -1);
  pd_schedule_t huge = {.skip_first = 2147483647, .wait = 2147483647, .warmup = 2147483647, .active = 2147483647,
                        .repeat = 2147483647};
  cr_expect_eq(pd_schedule_end(&huge), -1, "an end past INT64_MAX is never reached");
  pd_schedule_t big = {.wait = 2147483647, .warmup = 2147483647, .active = 2147483647, .repeat = 2};
  cr_expect_eq(pd_schedule_end(&big), 6LL * 2147483647);
}
