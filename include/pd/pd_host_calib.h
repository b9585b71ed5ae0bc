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

/* ---- the fastest CPU for the launching thread ----
 *
 * On the cloud GPU hosts the same fixed loop runs 14 ms on one CPU and 22 ms on another,
 * and a CPU is fast at one moment and slow a second later (bench/gate/host_probe.sh); the
 * kernel keeps a busy thread where it started, so a launching thread that starts on a slow
 * CPU stays slow for the whole run: the "slow state" of docs/gate.md. pd_host_pin_fastest
 * times a short piece of the workload on every CPU the thread may use and pins the thread
 * to the fastest. Threads created afterwards inherit the pin: threads the program starts
 * call pd_host_pin_release_thread() first, and code that makes a library start threads
 * (CUPTI's attach) runs between pd_host_pin_suspend() and pd_host_pin_resume(). */

/* Iterations of one timing on one CPU (about 0.05 ms), and timings per CPU (the fastest
 * kept: the first after a migration pays for cold caches). */
#define PD_HOST_PIN_ITERS 25000
#define PD_HOST_PIN_REPS 3
/* CPUs timed at most (the rest of a larger mask is not considered). */
#define PD_HOST_PIN_MAX_CPUS 256

/* What pd_host_pin_fastest found. cpu < 0: not pinned (only one CPU allowed, or the
 * affinity calls failed; the thread is left as it was). Times are ns for PD_HOST_PIN_ITERS. */
typedef struct {
  int cpu;
  int ncpus;
  int64_t fastest_ns, median_ns, slowest_ns;
} pd_host_pin_t;

/* Pins the calling thread to the fastest of its allowed CPUs. Returns 0 (also when it
 * could not pin: out->cpu is then -1), or PD_EINVAL for a NULL out. One pin per process:
 * a second call from any thread re-times and moves that thread. */
int pd_host_pin_fastest(pd_host_pin_t *out);
/* Gives the calling thread the CPUs the pinned thread had before its pin (nothing when no
 * pin was made). For threads created by the pinned thread. */
void pd_host_pin_release_thread(void);
/* On the pinned thread: widen it back to its original CPUs (suspend) and pin it again
 * (resume); nothing on other threads or without a pin. Pairs nest: the pin returns at the
 * outermost resume. */
void pd_host_pin_suspend(void);
void pd_host_pin_resume(void);

/* A run's calibration: measured at its start and at its end. */
typedef struct pd_host_calib_s {
  pd_host_calib_sample_t start, end;
  pd_host_pin_t pin; /* the launching thread's pin (pin.cpu < 0: none) */
  int64_t iters; /* PD_HOST_CALIB_ITERS */
  int reps;      /* PD_HOST_CALIB_REPS */
} pd_host_calib_t;

/* Times the workload PD_HOST_CALIB_REPS times on the calling thread and fills *out with the
 * median repetition. Returns 0, or PD_EINVAL for a NULL out. Allocates nothing. */
int pd_host_calib_measure(pd_host_calib_sample_t *out);

/* Returns a checksum of the workload for iters iterations (what it computes: the test of
 * its determinism, and what keeps the compiler from removing it). */
uint64_t pd_host_calib_work(int64_t iters);

/* This thread's speed at this moment, for a series of them between a program's steps (a
 * host's CPUs slow down by a quarter for 0.2-4 s at a time: docs/gate.md): the issue time
 * of `launches` empty kernels on `stream` (a cudaStream_t; NULL the default stream), ns per
 * launch, the stream drained after, untimed; then `compute_iters` of pd_host_calib_work,
 * ns. GPU only (src/capture/calibrate.c). Returns 0; PD_EINVAL for launches outside 1..1024,
 * compute_iters outside 1..10^8 or a NULL output; PD_ECUDA when a CUDA call failed. */
int pd_speed_probe(void *stream, int launches, int64_t compute_iters, double *launch_ns, double *compute_ns);
/* One probe's size, as profiler_demo --warmup_probe and pd_run --probe take it: empty
 * launches and workload iterations (about 30 us of the launching thread's time). */
#define PD_SPEED_PROBE_LAUNCHES 16
#define PD_SPEED_PROBE_ITERS 8000

#ifdef __cplusplus
}
#endif
#endif /* PD_HOST_CALIB_H */
