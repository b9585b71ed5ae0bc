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
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

/* ---- pinning the launching thread to the fastest CPU ------------------------------------------ */

static struct {
  pthread_mutex_t lock;
  cpu_set_t orig; /* the pinned thread's CPUs before its pin */
  int cpu;        /* where it is pinned; -1: no pin */
  pid_t tid;      /* the pinned thread */
  int suspended;  /* open pd_host_pin_suspend() calls of the pinned thread */
} g_pin = {PTHREAD_MUTEX_INITIALIZER, {{0}}, -1, 0, 0};

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static bool pin_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof one, &one) == 0;
}

int pd_host_pin_fastest(pd_host_pin_t *out) {
  if (out == NULL) return PD_EINVAL;
  *out = (pd_host_pin_t){.cpu = -1};
  cpu_set_t orig;
  pthread_mutex_lock(&g_pin.lock);
  const bool again = g_pin.cpu >= 0 && g_pin.tid == (pid_t)syscall(SYS_gettid);
  if (again) {
    orig = g_pin.orig;
    (void)sched_setaffinity(0, sizeof orig, &orig);
  } else if (sched_getaffinity(0, sizeof orig, &orig) != 0) {
    pthread_mutex_unlock(&g_pin.lock);
    return 0;
  }
  int cpus[PD_HOST_PIN_MAX_CPUS];
  int64_t best[PD_HOST_PIN_MAX_CPUS], sorted[PD_HOST_PIN_MAX_CPUS];
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < PD_HOST_PIN_MAX_CPUS; c++)
    if (CPU_ISSET(c, &orig)) cpus[n++] = c;
  int timed = 0;
  volatile uint64_t sink = 0;
  for (int i = 0; i < n && n > 1; i++) {
    if (!pin_to(cpus[i])) continue;
    int64_t b = INT64_MAX;
    for (int r = 0; r < PD_HOST_PIN_REPS; r++) {
      const int64_t t0 = pd_clock_now_ns();
      sink = sink + pd_host_calib_work(PD_HOST_PIN_ITERS);
      const int64_t t = pd_clock_now_ns() - t0;
      if (t < b) b = t;
    }
    (void)sink;
    cpus[timed] = cpus[i];
    best[timed] = b;
    timed++;
  }
  int pick = -1;
  for (int i = 0; i < timed; i++)
    if (pick < 0 || best[i] < best[pick]) pick = i;
  if (pick < 0 || !pin_to(cpus[pick])) {
    (void)sched_setaffinity(0, sizeof orig, &orig);
    g_pin.cpu = -1;
    pthread_mutex_unlock(&g_pin.lock);
    return 0;
  }
  memcpy(sorted, best, (size_t)timed * sizeof best[0]);
  qsort(sorted, (size_t)timed, sizeof sorted[0], cmp_i64);
  out->cpu = cpus[pick];
  out->ncpus = timed;
  out->fastest_ns = sorted[0];
  out->median_ns = sorted[timed / 2];
  out->slowest_ns = sorted[timed - 1];
  g_pin.orig = orig;
  g_pin.cpu = cpus[pick];
  g_pin.tid = (pid_t)syscall(SYS_gettid);
  g_pin.suspended = 0;
  pthread_mutex_unlock(&g_pin.lock);
  return 0;
}

void pd_host_pin_release_thread(void) {
  pthread_mutex_lock(&g_pin.lock);
  if (g_pin.cpu >= 0 && g_pin.tid != (pid_t)syscall(SYS_gettid))
    (void)sched_setaffinity(0, sizeof g_pin.orig, &g_pin.orig);
  pthread_mutex_unlock(&g_pin.lock);
}

/* Suspensions nest: CUPTI's enable attaches inside its own suspension, and the pin
 * returns only when the outermost one ends. */
void pd_host_pin_suspend(void) {
  pthread_mutex_lock(&g_pin.lock);
  if (g_pin.cpu >= 0 && g_pin.tid == (pid_t)syscall(SYS_gettid) && g_pin.suspended++ == 0)
    (void)sched_setaffinity(0, sizeof g_pin.orig, &g_pin.orig);
  pthread_mutex_unlock(&g_pin.lock);
}

void pd_host_pin_resume(void) {
  pthread_mutex_lock(&g_pin.lock);
  if (g_pin.cpu >= 0 && g_pin.tid == (pid_t)syscall(SYS_gettid) && g_pin.suspended > 0 && --g_pin.suspended == 0)
    (void)pin_to(g_pin.cpu);
  pthread_mutex_unlock(&g_pin.lock);
}
