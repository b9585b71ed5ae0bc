/* inject_calib.c: the calibration's empty kernel, for libpd_inject.so.
 *
 * A library with device code registers it with the CUDA runtime when it is loaded, and
 * libpd_inject.so is loaded inside cuInit, where a call into the runtime may wait on the
 * runtime's own initialization. So the kernel (src/capture/calibrate_kernel.cu) lives in
 * libpd_inject_calib.so beside it, loaded at the first calibration (the program's first
 * kernel launch, long after cuInit). Missing, the calibration fails and profiler_cost says
 * its estimate is unknown; nothing else changes. GPU-only (runs inside a CUDA program).
 */
#define _GNU_SOURCE 1 /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "capture_internal.h"

static int (*g_launch)(int n, void *stream);
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void calib_load(void) {
  Dl_info info;
  if (dladdr((void *)&calib_load, &info) == 0 || info.dli_fname == NULL) return;
  const char *slash = strrchr(info.dli_fname, '/');
  char path[4096];
  int n = slash != NULL ? snprintf(path, sizeof path, "%.*s/libpd_inject_calib.so", (int)(slash - info.dli_fname),
                                   info.dli_fname)
                        : snprintf(path, sizeof path, "libpd_inject_calib.so");
  if (n < 0 || (size_t)n >= sizeof path) return;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h != NULL) g_launch = (int (*)(int, void *))dlsym(h, "pd_calibration_launch");
}

int pd_calibration_launch(int n, void *stream) {
  pthread_once(&g_once, calib_load);
  return g_launch != NULL ? g_launch(n, stream) : -1;
}
