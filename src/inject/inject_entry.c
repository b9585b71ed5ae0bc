/* inject_entry.c: libpd_inject.so's CUDA entry point (GPU-only: runs inside a CUDA program).
 *
 * The CUDA driver loads the library named by CUDA_INJECTION64_PATH and calls
 * InitializeInjection() inside cuInit, before the program's first CUDA call returns. Inside
 * cuInit nothing may launch work or call the runtime, so this only reads the config,
 * subscribes CUPTI's launch hook (not for NVTX-range steps), hands the session to the NVTX
 * tool and registers the exit handler; the profiler itself (its CUPTI source and calibration) starts at the program's
 * first kernel launch, or its first step range (inject_session.c).
 *
 * It never breaks the program: a bad PD_INJECT_* value, CUPTI missing or held by another
 * tool (Nsight Systems) gives one warning line and the program runs unprofiled. No signal
 * handler is installed; the outputs are written by an atexit handler, which runs on a normal
 * exit, not when a signal kills the process (pd_run reports that). In a Python process the
 * same handler is also registered with Py_AtExit (found in the process, not linked):
 * Python ends an uncaught KeyboardInterrupt by finalizing and then killing itself with
 * SIGINT, which skips atexit but not Py_AtExit, so Ctrl-C'd training still gets its outputs
 * and Python's own KeyboardInterrupt behaviour stays as it is. A forked child (a DataLoader worker) records nothing and
 * writes nothing; an exec'd one loads the library afresh (the variables are inherited).
 */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_source.h"
#include "inject.h"
#include "pd/pd_host_calib.h"
#include "pd/pd_prof.h"

static pd_inject_session_t *g_session;
static atomic_bool g_forked; /* this process is a fork of the one that initialized */

static void launch_cb(void *user, const char *kernel, bool is_runtime, bool is_exit) {
  if (atomic_load_explicit(&g_forked, memory_order_relaxed)) return;
  pd_inject_on_launch(user, kernel, is_runtime, is_exit);
  /* The schedule is over and the outputs written: CUPTI is detached here, at a launch
   * call's exit inside its callback (where CUPTI documents cuptiFinalize as safe), so the
   * program's later launches pay no callback. */
  if (is_exit && pd_inject_session_take_let_go(user)) {
    char err[256];
    if (pd_cupti_launch_hook_finalize(err, sizeof err) != 0)
      fprintf(stderr, "pd_inject: warning: %s; CUPTI stays attached (each launch still pays its callback)\n", err);
  }
}

static void fork_child_cb(void) {
  atomic_store(&g_forked, true);
  pd_inject_nvtx_set_session(NULL);
}

static void exit_cb(void) {
  if (atomic_load(&g_forked) || g_session == NULL) return;
  pd_inject_nvtx_set_session(NULL);
  (void)pd_inject_session_finish(g_session);
  /* The session is not freed: other threads may still be in a launch callback. */
}

/* Before a cycle closes: the GPU's work so far done, so its records are complete. */
static void device_sync_cb(void) { (void)cudaDeviceSynchronize(); }

/* --probe (inject_session.c calls it under its lock, one at a time): pd_speed_probe on a
 * non-blocking stream of the library's own, made at the first probe on the device then
 * current; a probe on another device later fails (the series is dropped). The calls run in
 * relaxed stream-capture mode, so a graph the program is capturing in global mode is not
 * invalidated by them, and a failure leaves the program's last-error slot as it was. */
static cudaStream_t g_probe_stream;
static int g_probe_device = -1;

static int speed_probe_cb(double *launch_ns, double *compute_ns) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  int rc = -1, dev = -1;
  if (cudaGetDevice(&dev) == cudaSuccess) {
    if (g_probe_stream == NULL && cudaStreamCreateWithFlags(&g_probe_stream, cudaStreamNonBlocking) == cudaSuccess)
      g_probe_device = dev;
    if (g_probe_stream != NULL && dev == g_probe_device)
      rc = pd_speed_probe(g_probe_stream, PD_SPEED_PROBE_LAUNCHES, PD_SPEED_PROBE_ITERS, launch_ns, compute_ns);
  }
  if (rc != 0) (void)cudaGetLastError();
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return rc != 0 ? -1 : 0;
}

static int device_info_cb(pd_device_info_t *d) {
  int dev = 0;
  struct cudaDeviceProp p;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    (void)cudaGetLastError(); /* leave the program's last-error slot as it was */
    return -1;
  }
  snprintf(d->name, sizeof d->name, "%s", p.name);
  d->compute_major = p.major;
  d->compute_minor = p.minor;
  d->sm_count = p.multiProcessorCount;
  d->total_global_mem = (uint64_t)p.totalGlobalMem;
  (void)cudaDriverGetVersion(&d->driver_version);
  (void)cudaRuntimeGetVersion(&d->runtime_version);
  d->cupti_version = pd_prof_cupti_version();
  return 0;
}

/* dl_iterate_phdr's visitor: stops (1) at an object whose path names libtorch_cuda.so. */
static int torch_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  return info->dlpi_name != NULL && strstr(info->dlpi_name, "libtorch_cuda.so") != NULL;
}

/* Whether PyTorch's CUDA library is loaded in this process (asked at exit, when it is). */
static bool is_pytorch_cb(void) { return dl_iterate_phdr(torch_object, NULL) != 0; }

PD_INJECT_EXPORT int InitializeInjection(void);

int InitializeInjection(void) {
  static atomic_flag once = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&once)) return 1;
  pd_inject_config_t cfg;
  char err[600];
  if (pd_inject_config_from_env(&cfg, err, sizeof err) != 0) {
    fprintf(stderr, "pd_inject: warning: %s; the program runs unprofiled\n", err);
    return 1;
  }
  const pd_inject_env_t env = {
      .device_sync = device_sync_cb, .device_info = device_info_cb, .speed_probe = speed_probe_cb,
      .is_pytorch = is_pytorch_cb};
  pd_inject_session_t *s = NULL;
  if (pd_inject_session_create(&cfg, &env, &s) != 0) {
    fprintf(stderr, "pd_inject: warning: out of host memory; the program runs unprofiled\n");
    return 1;
  }
  /* Steps by NVTX range need no launch callback: CUPTI then stays out of the process until
   * the first step range and is detached between cycles, as in profiler_demo. Kernel-name
   * steps and the whole-run step need the launches, so CUPTI's subscriber is held. */
  if (pd_inject_config_steps(&cfg) != PD_INJECT_STEPS_RANGE &&
      pd_cupti_launch_hook_install(launch_cb, s, err, sizeof err) != 0) {
    fprintf(stderr, "pd_inject: warning: CUPTI is not available (%s); the program runs unprofiled\n", err);
    pd_inject_session_destroy(s);
    return 1;
  }
  g_session = s;
  pd_inject_nvtx_set_session(s);
  (void)pthread_atfork(NULL, NULL, fork_child_cb);
  if (atexit(exit_cb) != 0)
    fprintf(stderr, "pd_inject: warning: no exit handler could be registered; nothing will be written\n");
  int (*py_at_exit)(void (*)(void)) = (int (*)(void (*)(void)))dlsym(RTLD_DEFAULT, "Py_AtExit");
  if (py_at_exit != NULL) (void)py_at_exit(exit_cb); /* finish runs once: the later call does nothing */
  return 1;
}
