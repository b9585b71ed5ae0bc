/* bench_kernels.cu: the empty kernel and its launch loop for bench_prof. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "bench_kernels.h"

/* ---- kernels ---------------------------------------------------------------------------- */

extern "C" __global__ void pd_bench_empty_kernel(void) {}

/* ---- launchers ---------------------------------------------------------------------------- */

extern "C" int pd_bench_launch_empty(int n, char *err, size_t errlen) {
  /* One error check after the loop, not one per launch: a per-launch cudaGetLastError
   * would itself be a traced runtime call and double what tracing costs per launch. A
   * failed launch leaves its error in the runtime's last-error slot until read. */
  for (int i = 0; i < n; i++) pd_bench_empty_kernel<<<1, 1>>>();
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    snprintf(err, errlen, "kernel launch: %s", cudaGetErrorString(e));
    return -1;
  }
  e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    snprintf(err, errlen, "cudaDeviceSynchronize: %s", cudaGetErrorString(e));
    return -1;
  }
  return 0;
}
