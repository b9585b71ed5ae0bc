/* calibrate_kernel.cu: the empty kernel the profiler launches to measure, on this host,
 * what tracing adds to one CUDA call (pd_prof_create's calibration, pd_prof_cost_t). */
#include <cuda_runtime.h>

#include "capture_internal.h"

static __global__ void pd_calibration_empty(void) {}

extern "C" int pd_calibration_launch(int n, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  for (int i = 0; i < n; i++) pd_calibration_empty<<<1, 1, 0, s>>>();
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
