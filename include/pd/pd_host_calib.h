/* pd_host_calib.h: the host calibration of a run (capture layer, src/prof/host_calib.c).
 *
 * On fresh cloud machines a whole process sometimes lands in a state where its CPU runs
 * the same work 30-86% slower, for every step (docs/gate.md, "Host noise"). A fixed CPU
 * workload timed on the launching thread at the start and at the end of the run measures
 * that state, so a comparison can tell "this process was slow" from "this code is slow"
 * (profile_compare --normalize) and a user's program can record it too.
 */
#ifndef PD_HOST_CALIB_H
#define PD_HOST_CALIB_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Iterations of the workload in one repetition (about 0.2 ms on a 3 GHz core). */
#define PD_HOST_CALIB_ITERS 200000
/* Repetitions per measurement; the median is kept. */
#define PD_HOST_CALIB_REPS 5

/* One measurement: the median repetition's wall and thread CPU time, and the CPU the
 * thread was on (-1: unknown). */
typedef struct {
  int64_t wall_ns;
  int64_t cpu_ns;
  int cpu;
} pd_host_calib_sample_t;

/* A run's calibration: measured at its start and at its end. */
typedef struct pd_host_calib_s {
  pd_host_calib_sample_t start, end;
  int64_t iters; /* PD_HOST_CALIB_ITERS */
  int reps;      /* PD_HOST_CALIB_REPS */
} pd_host_calib_t;

/* Times the workload PD_HOST_CALIB_REPS times on the calling thread and fills *out with the
 * median repetition. Returns 0, or PD_EINVAL for a NULL out. Allocates nothing. */
int pd_host_calib_measure(pd_host_calib_sample_t *out);

/* Returns a checksum of the workload for iters iterations (what it computes: the test of
 * its determinism, and what keeps the compiler from removing it). */
uint64_t pd_host_calib_work(int64_t iters);

#ifdef __cplusplus
}
#endif
#endif /* PD_HOST_CALIB_H */
