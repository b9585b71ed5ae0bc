/* test_scen_inject.c: --inject_slowdown's sizing (src/scen/inject.c), without a GPU. The
 * busy time must make the step `fraction` longer, so it follows the un-injected part of
 * the steps measured so far (step minus what was inserted), not the warmup. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "pd/pd_common.h"
#include "pd/pd_scen.h"

Test(scen_inject, off_injects_nothing) {
  pd_scen_inject_t inj;
  pd_scen_inject_init(&inj, 0.0, 300000);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 0);
  pd_scen_inject_record(&inj, 400000, 0);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 0);
  cr_expect_eq(pd_scen_inject_next_ns(NULL), 0);
  pd_scen_inject_init(&inj, -1.0, -5);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 0, "a negative fraction is off");
}

/* The first step is sized from the warmup; then from the median of what the steps took
 * without the injection: a profiled step 30% longer than the warmup's gets 10% of itself. */
Test(scen_inject, follows_the_measured_step_not_the_warmup) {
  pd_scen_inject_t inj;
  pd_scen_inject_init(&inj, 0.10, 300000);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 30000);
  int64_t spin = pd_scen_inject_next_ns(&inj);
  pd_scen_inject_record(&inj, 390000 + spin, spin); /* the profiled step is 390 us */
  spin = pd_scen_inject_next_ns(&inj);
  cr_expect_eq(spin, 39000);
  for (int i = 0; i < 20; i++) {
    spin = pd_scen_inject_next_ns(&inj);
    pd_scen_inject_record(&inj, 390000 + spin, spin);
  }
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 39000, "an injected step's plain part is the plain step");
  /* a burst of slow steps moves the median little */
  for (int i = 0; i < 5; i++) pd_scen_inject_record(&inj, 2000000, 0);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 39000);
  /* a bad clock reading is not a step */
  pd_scen_inject_record(&inj, 1000, 5000);
  pd_scen_inject_record(&inj, 0, 0);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 39000);
}

/* The window keeps the last PD_SCEN_INJECT_WINDOW steps: a step that changes for good is
 * followed; an even count takes the middle pair's mean. */
Test(scen_inject, window_follows_a_lasting_change) {
  pd_scen_inject_t inj;
  pd_scen_inject_init(&inj, 1.0, 1);
  pd_scen_inject_record(&inj, 100, 0);
  pd_scen_inject_record(&inj, 200, 0);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 150);
  for (int i = 0; i < PD_SCEN_INJECT_WINDOW; i++) pd_scen_inject_record(&inj, 500, 0);
  cr_expect_eq(pd_scen_inject_next_ns(&inj), 500);
}

Test(scen_inject, spin_waits_at_least_as_long_as_asked) {
  const int64_t t0 = pd_clock_now_ns();
  pd_scen_spin_ns(2000000);
  cr_expect_geq(pd_clock_now_ns() - t0, 2000000);
}
