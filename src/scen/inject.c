/* inject.c: --inject_slowdown, the gate's host-side self-test (pd_scen.h).
 *
 * "F" must mean that the judged (profiled) step gets F longer. The step is timed between
 * two device synchronizations, so busy time placed before the step's launches is time
 * the step really waits for: the GPU is idle then, and nothing overlaps it. (Placed after
 * the step's work, as it once was, part of it overlapped the GPU's tail and a 10%
 * injection read +4..+18%.) The busy time is F x the median of the un-injected part of
 * the steps measured so far (step time minus the busy time inserted in it), so it
 * follows the profiled step rather than the unprofiled warmup, which is 15-30% shorter.
 */
#include <string.h>

#include "pd/pd_common.h"
#include "pd/pd_scen.h"

void pd_scen_inject_init(pd_scen_inject_t *inj, double fraction, int64_t base_ns) {
  memset(inj, 0, sizeof(*inj));
  inj->fraction = fraction > 0.0 ? fraction : 0.0;
  inj->base_ns = base_ns > 0 ? base_ns : 0;
}

/* Median of n values (n <= PD_SCEN_INJECT_WINDOW), by sorting a copy. */
static int64_t inject_median(const int64_t *v, size_t n) {
  int64_t s[PD_SCEN_INJECT_WINDOW];
  memcpy(s, v, n * sizeof(*s));
  for (size_t i = 1; i < n; i++) {
    const int64_t x = s[i];
    size_t j = i;
    for (; j > 0 && s[j - 1] > x; j--) s[j] = s[j - 1];
    s[j] = x;
  }
  return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int64_t pd_scen_inject_next_ns(const pd_scen_inject_t *inj) {
  if (inj == NULL || inj->fraction <= 0.0) return 0;
  const int64_t plain = inj->n > 0 ? inject_median(inj->plain_ns, inj->n) : inj->base_ns;
  return (int64_t)(inj->fraction * (double)plain + 0.5);
}

void pd_scen_inject_record(pd_scen_inject_t *inj, int64_t step_ns, int64_t spun_ns) {
  if (inj == NULL || step_ns <= 0) return;
  int64_t plain = step_ns - (spun_ns > 0 ? spun_ns : 0);
  if (plain <= 0) return; /* a clock that went wrong: not a step */
  inj->plain_ns[inj->next] = plain;
  inj->next = (inj->next + 1) % PD_SCEN_INJECT_WINDOW;
  if (inj->n < PD_SCEN_INJECT_WINDOW) inj->n++;
}

void pd_scen_spin_ns(int64_t ns) {
  /* Busy-waits, not sleeps: a sleeping thread can overshoot by a scheduler tick. */
  const int64_t end = pd_clock_now_ns() + ns;
  while (pd_clock_now_ns() < end) {
  }
}
