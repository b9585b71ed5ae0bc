/* inject.c: --inject_slowdown, the gate's host-side self-test (pd_scen.h).
 *
 * "F" must mean that the judged step gets F longer: the profiled step, and the untraced
 * warmup step the A/B judges host time on, each from its own state (profiler_demo keeps one
 * per phase, since the warmup step is 15-30% shorter). The step is timed between
 * two device synchronizations, so busy time placed before the step's launches is time
 * the step really waits for: the GPU is idle then, and nothing overlaps it. (Placed after
 * the step's work, as it once was, part of it overlapped the GPU's tail and a 10%
 * injection read +4..+18%.) The target is F x the median plain step of this process in
 * the same phase.
 *
 * Why a feedback loop and not just "spin F x P": an injected step costs more than its
 * busy time. On a fresh H100 (boot 369772e7), clean with F = 0.10 alternating injected
 * and plain steps in one process: plain p50 416.8 us, so 41.7 us of busy time, but the
 * injected p50 was 474.3 us: 57.5 us longer, a ratio of 1.138. tiny_ops with F = 0.05 in
 * the same run: 173 us for 166 us meant (1.052). The surplus is about a fixed cost per
 * injected step (16 us and 7 us; proportional, it would be 38% and 4% of the busy time),
 * and it is not the injection's host range, which the profiler's own calibration puts at
 * 0.18 us: it is the machine's (a launch after the host idled on the GPU, the clock read
 * loop's effect on the core), varies between machines and cannot be a constant here.
 * So the loop measures it: with --inject_alternate both kinds of step run in the
 * process, and the injected steps' rest (step minus busy time) over the plain median is
 * the surplus; the next busy time is the target minus that surplus. A fixed surplus c is
 * then removed exactly; one proportional to the busy time (k x busy) converges to busy =
 * target / k, as the fixed point of busy = target - (k - 1) x busy. Medians over 64
 * steps, so a burst of slow steps moves neither. Without plain profiled steps (normal
 * mode, every step injected) the surplus cannot be told from the step itself: the busy
 * time is F x the rest's median, and the step may read up to the surplus longer than F
 * (docs/gate.md, "an injection that means what it says").
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

int64_t pd_scen_inject_extra_ns(const pd_scen_inject_t *inj) {
  if (inj == NULL || inj->n == 0 || inj->n_rest == 0) return 0;
  return inject_median(inj->rest_ns, inj->n_rest) - inject_median(inj->plain_ns, inj->n);
}

int64_t pd_scen_inject_next_ns(const pd_scen_inject_t *inj) {
  if (inj == NULL || inj->fraction <= 0.0) return 0;
  int64_t plain = inj->base_ns;
  if (inj->n > 0) plain = inject_median(inj->plain_ns, inj->n);
  else if (inj->n_rest > 0) plain = inject_median(inj->rest_ns, inj->n_rest);
  const int64_t target = (int64_t)(inj->fraction * (double)plain + 0.5);
  int64_t busy = target - pd_scen_inject_extra_ns(inj);
  /* A surplus larger than the target cannot be removed: a quarter of the target is still
   * spun, never none. With none the step would be recorded as a plain one, the surplus
   * never measured again, and one slow early injected step (a fresh process's) would end
   * the injection for good: clean's alternating steps read 1.00 where 1.10 was asked on
   * fresh machines (H200 5ff8a1a0 warmup, H100 1515fb9b profiled steps). A negative
   * surplus (injected steps faster than plain ones, noise) is not worth more than
   * doubling the target. */
  const int64_t floor_ns = target / 4 > 0 ? target / 4 : (target > 0 ? 1 : 0);
  if (busy < floor_ns) busy = floor_ns;
  if (busy > 2 * target) busy = 2 * target;
  return busy;
}

static void inject_push(int64_t *win, size_t *n, size_t *next, int64_t v) {
  win[*next] = v;
  *next = (*next + 1) % PD_SCEN_INJECT_WINDOW;
  if (*n < PD_SCEN_INJECT_WINDOW) (*n)++;
}

void pd_scen_inject_record(pd_scen_inject_t *inj, int64_t step_ns, int64_t spun_ns) {
  if (inj == NULL || step_ns <= 0) return;
  if (spun_ns <= 0) {
    inject_push(inj->plain_ns, &inj->n, &inj->next, step_ns);
    return;
  }
  const int64_t rest = step_ns - spun_ns;
  if (rest <= 0) return; /* a clock that went wrong: not a step */
  inject_push(inj->rest_ns, &inj->n_rest, &inj->next_rest, rest);
}

void pd_scen_spin_ns(int64_t ns) {
  /* Busy-waits, not sleeps: a sleeping thread can overshoot by a scheduler tick. */
  const int64_t end = pd_clock_now_ns() + ns;
  while (pd_clock_now_ns() < end) {
  }
}
