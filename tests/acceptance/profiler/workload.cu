/* workload.cu: kernels and launchers of the profiler acceptance workload (workload.h). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "workload.h"

/* ---- kernels ---------------------------------------------------------------------------- */

/* Spins for `ns` nanoseconds of the GPU's global timer, so its duration does not depend on
 * the SM clock; the guarded store keeps the loop from being optimized away. */
extern "C" __global__ void pd_wl_busy_kernel(unsigned long long ns, float *sink) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  float acc = 0.f;
  do {
    acc += 1.0f;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  if (threadIdx.x == 0 && acc < 0.f) sink[blockIdx.x] = acc;
}

/* ---- launchers ---------------------------------------------------------------------------- */

struct pd_wl {
  cudaStream_t stream;
  cudaEvent_t e0, e1;
  void *host;
  void *copy_dev;
  float *sink;
};

#define WL_CHECK(call)                                                                    \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      snprintf(err, errlen, "%s at %s:%d: %s", #call, __FILE__, __LINE__,                 \
               cudaGetErrorString(e_));                                                   \
      return -1;                                                                          \
    }                                                                                     \
  } while (0)

extern "C" size_t pd_wl_alloc_bytes(int i) { return (size_t)(i + 1) << 20; }

static int wl_setup(pd_wl_t *wl, char *err, size_t errlen) {
  WL_CHECK(cudaStreamCreateWithFlags(&wl->stream, cudaStreamNonBlocking));
  WL_CHECK(cudaEventCreate(&wl->e0));
  WL_CHECK(cudaEventCreate(&wl->e1));
  WL_CHECK(cudaMallocHost(&wl->host, PD_WL_COPY_BYTES));
  WL_CHECK(cudaMalloc(&wl->copy_dev, PD_WL_COPY_BYTES));
  WL_CHECK(cudaMalloc((void **)&wl->sink, 64 * sizeof(float)));
  WL_CHECK(cudaDeviceSynchronize());
  return 0;
}

extern "C" pd_wl_t *pd_wl_setup(char *err, size_t errlen) {
  pd_wl_t *wl = (pd_wl_t *)calloc(1, sizeof(*wl));
  if (wl == NULL) {
    snprintf(err, errlen, "out of host memory");
    return NULL;
  }
  if (wl_setup(wl, err, errlen) != 0) {
    pd_wl_teardown(wl);
    return NULL;
  }
  return wl;
}

extern "C" void pd_wl_teardown(pd_wl_t *wl) {
  if (wl == NULL) return;
  /* Best effort: teardown errors have nowhere useful to go in a test. */
  if (wl->sink) (void)cudaFree(wl->sink);
  if (wl->copy_dev) (void)cudaFree(wl->copy_dev);
  if (wl->host) (void)cudaFreeHost(wl->host);
  if (wl->e0) (void)cudaEventDestroy(wl->e0);
  if (wl->e1) (void)cudaEventDestroy(wl->e1);
  if (wl->stream) (void)cudaStreamDestroy(wl->stream);
  free(wl);
}

extern "C" int pd_wl_run(pd_wl_t *wl, const pd_wl_spec_t *spec, double *kernels_event_ms,
                         char *err, size_t errlen) {
  void *dev[PD_WL_MAX_ALLOCS] = {0};
  if (spec->allocs > PD_WL_MAX_ALLOCS) {
    snprintf(err, errlen, "at most %d allocations", PD_WL_MAX_ALLOCS);
    return -1;
  }
  for (int i = 0; i < spec->allocs; i++) WL_CHECK(cudaMalloc(&dev[i], pd_wl_alloc_bytes(i)));
  for (int i = 0; i < spec->h2d; i++)
    WL_CHECK(cudaMemcpyAsync(wl->copy_dev, wl->host, PD_WL_COPY_BYTES, cudaMemcpyHostToDevice,
                             wl->stream));
  for (int i = 0; i < spec->d2h; i++)
    WL_CHECK(cudaMemcpyAsync(wl->host, wl->copy_dev, PD_WL_COPY_BYTES, cudaMemcpyDeviceToHost,
                             wl->stream));
  for (int i = 0; i < spec->memsets; i++)
    WL_CHECK(cudaMemsetAsync(wl->copy_dev, i & 0xff, PD_WL_MEMSET_BYTES, wl->stream));
  WL_CHECK(cudaEventRecord(wl->e0, wl->stream));
  for (int i = 0; i < spec->kernels; i++) {
    pd_wl_busy_kernel<<<1, 64, 0, wl->stream>>>((unsigned long long)spec->kernel_us * 1000ull,
                                                 wl->sink);
    WL_CHECK(cudaGetLastError());
  }
  WL_CHECK(cudaEventRecord(wl->e1, wl->stream));
  WL_CHECK(cudaStreamSynchronize(wl->stream));
  float ms = 0.f;
  WL_CHECK(cudaEventElapsedTime(&ms, wl->e0, wl->e1));
  *kernels_event_ms = ms;
  for (int i = 0; i < spec->allocs; i++) WL_CHECK(cudaFree(dev[i]));
  WL_CHECK(cudaDeviceSynchronize());
  return 0;
}
