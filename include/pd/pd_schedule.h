/* pd_schedule.h: the profiler's schedule (torch.profiler.schedule semantics), model layer.
 *
 * Which steps a profiler traces, warms up or records: a pure function of the step number,
 * used by the capture layer's state machine and by programs that time the same steps.
 */
#ifndef PD_SCHEDULE_H
#define PD_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- schedule ---------------------------------------------------------------- */

/* One table for schedule actions: X(NAME, text). */
#define PD_SCHED_ACTION_MAP(X)  \
  X(NONE, "NONE")               \
  X(WARMUP, "WARMUP")           \
  X(RECORD, "RECORD")           \
  X(RECORD_AND_SAVE, "RECORD_AND_SAVE")

typedef enum {
#define PD_SCHED_GEN(name, text) PD_SCHED_##name,
  PD_SCHED_ACTION_MAP(PD_SCHED_GEN)
#undef PD_SCHED_GEN
} pd_sched_action_t;

typedef struct {
  int skip_first; /* steps ignored before the first cycle */
  int wait;       /* steps off at the start of each cycle */
  int warmup;     /* steps traced but discarded */
  int active;     /* steps recorded; must be >= 1 */
  int repeat;     /* cycles; 0 = cycle until the job ends */
} pd_schedule_t;

/* Returns 0 when the schedule is valid, PD_EINVAL otherwise (negative counts, active < 1). */
int pd_schedule_validate(const pd_schedule_t *s);
/* Returns the action for step number `step` (0-based), torch.profiler semantics. */
pd_sched_action_t pd_schedule_action(const pd_schedule_t *s, int64_t step);
/* The first step after the last cycle (skip_first + repeat x (wait + warmup + active)):
 * from it on every step is NONE. -1 when the schedule never ends (repeat 0), ends past
 * INT64_MAX, or is invalid. */
int64_t pd_schedule_end(const pd_schedule_t *s);
/* Returns a static string ("RECORD_AND_SAVE"); never NULL. */
const char *pd_sched_action_name(pd_sched_action_t a);

#ifdef __cplusplus
}
#endif
#endif /* PD_SCHEDULE_H */
