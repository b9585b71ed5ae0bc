/* host_calib.c: a fixed CPU workload timed on the calling thread (pd_host_calib.h).
 *
 * The workload is a dependent chain of integer (xorshift) and floating-point
 * (multiply-add) operations on registers: no memory traffic, no system calls, the same
 * instructions on every run, so its time reads the speed the core gives this thread.
 * Repeated PD_HOST_CALIB_REPS times; the median repetition is kept, so one interrupt or
 * preemption does not decide it. Wall time (CLOCK_MONOTONIC) and thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID) are both kept: a slower core raises both, a preempted thread
 * only the wall time.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stddef.h>
#include <time.h>

#include "pd/pd_common.h"
#include "pd/pd_host_calib.h"

uint64_t pd_host_calib_work(int64_t iters) {
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  double y = 1.0;
  for (int64_t i = 0; i < iters; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    y = y * 0.999999 + (double)(x & 0xFF) * 1e-9;
  }
  return x ^ (uint64_t)(y * 1e9);
}

static int64_t calib_thread_cpu_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int pd_host_calib_measure(pd_host_calib_sample_t *out) {
  if (out == NULL) return PD_EINVAL;
  int64_t wall[PD_HOST_CALIB_REPS], cpu[PD_HOST_CALIB_REPS];
  volatile uint64_t sink = 0; /* the result is used: the loop cannot be removed */
  for (int r = 0; r < PD_HOST_CALIB_REPS; r++) {
    const int64_t c0 = calib_thread_cpu_ns(), w0 = pd_clock_now_ns();
    sink = sink + pd_host_calib_work(PD_HOST_CALIB_ITERS);
    wall[r] = pd_clock_now_ns() - w0;
    cpu[r] = calib_thread_cpu_ns() - c0;
  }
  (void)sink;
  /* median by wall time (insertion sort of the indices; a handful of values) */
  int idx[PD_HOST_CALIB_REPS];
  for (int i = 0; i < PD_HOST_CALIB_REPS; i++) {
    int j = i;
    for (; j > 0 && wall[idx[j - 1]] > wall[i]; j--) idx[j] = idx[j - 1];
    idx[j] = i;
  }
  const int m = idx[PD_HOST_CALIB_REPS / 2];
  out->wall_ns = wall[m];
  out->cpu_ns = cpu[m];
  out->cpu = sched_getcpu();
  return 0;
}
