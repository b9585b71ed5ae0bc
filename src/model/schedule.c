/* schedule.c: the profiling schedule, with torch.profiler.schedule() semantics.
 *
 * Steps count from 0. The first skip_first steps are NONE; then cycles of `wait` NONE
 * steps, `warmup` WARMUP steps and `active` RECORD steps, the last active step of each
 * cycle being RECORD_AND_SAVE (the trace-ready point). repeat = 0 cycles until the job
 * ends; otherwise every step after `repeat` cycles is NONE. This mirrors torch's
 * schedule_fn line by line, so a torch user's schedule behaves the same here.
 */
#include "pd/pd_schedule.h"

#include <stddef.h>

#include "pd/pd_common.h"

int pd_schedule_validate(const pd_schedule_t *s) {
  if (s == NULL) return PD_EINVAL;
  /* torch asserts the same: wait >= 0, warmup >= 0, active > 0, repeat >= 0,
   * skip_first >= 0. */
  if (s->skip_first < 0 || s->wait < 0 || s->warmup < 0 || s->active < 1 || s->repeat < 0)
    return PD_EINVAL;
  return 0;
}

pd_sched_action_t pd_schedule_action(const pd_schedule_t *s, int64_t step) {
  /* An invalid schedule or a negative step never records (torch would assert). */
  if (pd_schedule_validate(s) != 0 || step < 0) return PD_SCHED_NONE;
  if (step < s->skip_first) return PD_SCHED_NONE;
  step -= s->skip_first;
  /* int64 so that large counts cannot overflow the cycle length */
  int64_t cycle = (int64_t)s->wait + s->warmup + s->active;
  /* torch: `step / num_steps >= repeat` with true division, i.e. step >= repeat*cycle */
  if (s->repeat > 0 && step / cycle >= s->repeat) return PD_SCHED_NONE;
  int64_t mod = step % cycle;
  if (mod < s->wait) return PD_SCHED_NONE;
  if (mod < (int64_t)s->wait + s->warmup) return PD_SCHED_WARMUP;
  return mod < cycle - 1 ? PD_SCHED_RECORD : PD_SCHED_RECORD_AND_SAVE;
}

int64_t pd_schedule_end(const pd_schedule_t *s) {
  if (pd_schedule_validate(s) != 0 || s->repeat == 0) return -1;
  const int64_t cycle = (int64_t)s->wait + s->warmup + s->active;
  if (s->repeat > (INT64_MAX - s->skip_first) / cycle) return -1; /* past any step count */
  return (int64_t)s->skip_first + (int64_t)s->repeat * cycle;
}

const char *pd_sched_action_name(pd_sched_action_t a) {
  switch (a) {
#define PD_SCHED_NAME_GEN(name, text) \
  case PD_SCHED_##name:               \
    return text;
    PD_SCHED_ACTION_MAP(PD_SCHED_NAME_GEN)
#undef PD_SCHED_NAME_GEN
  }
  return "UNKNOWN";
}
