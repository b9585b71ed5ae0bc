/* inject_steps: a toy training loop in CUDA C, for profiling from outside (pd_run).
 *
 * Each step: an input copy to the device, a forward and a backward kernel, a chain of tiny
 * elementwise kernels (--tiny_kernels), and an optimizer kernel, ex_optimizer_step, whose
 * launch ends the step for `pd_run --step_kernel ex_optimizer_step`. With --nvtx each step
 * is an NVTX range "train_step" (nvtxRangePushA/Pop), for `pd_run --step_range train_step`.
 * --sync reads the loss back with a blocking copy every step (a planted sync), --pageable
 * copies the input from pageable host memory instead of pinned, --copy_stream copies it on a
 * second stream that the compute stream waits for through an event (cudaEventRecord and
 * cudaStreamWaitEvent each way: the copy also waits for the last step's kernels, which read
 * the buffer it overwrites). The program prints one line
 * with the final loss on stdout; it has no profiler code.
 */
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EX_CHECK(call)                                                                        \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "inject_steps: %s:%d %s failed: %s\n", __FILE__, __LINE__, #call,       \
              cudaGetErrorString(e_));                                                        \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

/* ---- kernels ------------------------------------------------------------------------- */

__global__ void ex_forward(const float *x, const float *w, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = 0.0f;
    for (int k = 0; k < 64; k++) acc += x[(i + k) % n] * w[k];
    y[i] = tanhf(acc);
  }
}

__global__ void ex_backward(const float *x, const float *y, float *g, int n) {
  int k = threadIdx.x; /* 64 weights, one block */
  float acc = 0.0f;
  for (int i = k; i < n; i += 64) acc += (y[i] - 0.5f) * x[i];
  g[k] = acc / (float)n;
}

__global__ void ex_tiny(float *y, int n, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * s + 1e-3f;
}

__global__ void ex_optimizer_step(float *w, const float *g, float *loss, float lr) {
  int k = threadIdx.x;
  w[k] -= lr * g[k];
  if (k == 0) *loss = fabsf(g[0]);
}

/* ---- launchers ------------------------------------------------------------------------- */

typedef struct {
  int steps, n, tiny;
  bool nvtx, sync, pageable, copy_stream;
} ex_opts_t;

static void usage(void) {
  fprintf(stderr,
          "usage: inject_steps [--steps N] [--n N] [--tiny_kernels N] [--nvtx] [--sync] [--pageable] "
          "[--copy_stream]\n");
}

static int parse(int argc, char **argv, ex_opts_t *o) {
  *o = (ex_opts_t){
      .steps = 20, .n = 1 << 16, .tiny = 8, .nvtx = false, .sync = false, .pageable = false, .copy_stream = false};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int *target = strcmp(a, "--steps") == 0 ? &o->steps : strcmp(a, "--n") == 0 ? &o->n
                  : strcmp(a, "--tiny_kernels") == 0 ? &o->tiny : NULL;
    if (target != NULL && i + 1 < argc) {
      char *end = NULL;
      long v = strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v > (1 << 26)) return -1;
      *target = (int)v;
    } else if (strcmp(a, "--nvtx") == 0) {
      o->nvtx = true;
    } else if (strcmp(a, "--sync") == 0) {
      o->sync = true;
    } else if (strcmp(a, "--pageable") == 0) {
      o->pageable = true;
    } else if (strcmp(a, "--copy_stream") == 0) {
      o->copy_stream = true;
    } else {
      return -1;
    }
  }
  return o->n >= 64 && o->steps >= 1 ? 0 : -1;
}

int main(int argc, char **argv) {
  ex_opts_t o;
  if (parse(argc, argv, &o) != 0) {
    usage();
    return 2;
  }
  const int n = o.n, threads = 256, blocks = (n + threads - 1) / threads;
  cudaStream_t st, cs = NULL;
  cudaEvent_t copied = NULL, consumed = NULL;
  EX_CHECK(cudaStreamCreate(&st));
  if (o.copy_stream) {
    EX_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    EX_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    EX_CHECK(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
  }
  float *hx = NULL, *x, *w, *y, *g, *loss;
  if (o.pageable) hx = (float *)malloc((size_t)n * sizeof(float));
  else EX_CHECK(cudaMallocHost(&hx, (size_t)n * sizeof(float)));
  if (hx == NULL) return 1;
  for (int i = 0; i < n; i++) hx[i] = (float)((i * 7919) % 1000) / 1000.0f;
  EX_CHECK(cudaMalloc(&x, (size_t)n * sizeof(float)));
  EX_CHECK(cudaMalloc(&y, (size_t)n * sizeof(float)));
  EX_CHECK(cudaMalloc(&w, 64 * sizeof(float)));
  EX_CHECK(cudaMalloc(&g, 64 * sizeof(float)));
  EX_CHECK(cudaMalloc(&loss, sizeof(float)));
  EX_CHECK(cudaMemsetAsync(w, 0, 64 * sizeof(float), st));
  float host_loss = 0.0f;
  for (int s = 0; s < o.steps; s++) {
    if (o.nvtx) nvtxRangePushA("train_step");
    if (o.copy_stream) {
      if (s > 0) EX_CHECK(cudaStreamWaitEvent(cs, consumed, 0)); /* the last step is done with x */
      EX_CHECK(cudaMemcpyAsync(x, hx, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, cs));
      EX_CHECK(cudaEventRecord(copied, cs));
      EX_CHECK(cudaStreamWaitEvent(st, copied, 0));
    } else {
      EX_CHECK(cudaMemcpyAsync(x, hx, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, st));
    }
    ex_forward<<<blocks, threads, 0, st>>>(x, w, y, n);
    EX_CHECK(cudaGetLastError());
    for (int t = 0; t < o.tiny; t++) {
      ex_tiny<<<blocks, threads, 0, st>>>(y, n, 0.999f);
      EX_CHECK(cudaGetLastError());
    }
    ex_backward<<<1, 64, 0, st>>>(x, y, g, n);
    EX_CHECK(cudaGetLastError());
    ex_optimizer_step<<<1, 64, 0, st>>>(w, g, loss, 0.1f);
    EX_CHECK(cudaGetLastError());
    if (o.copy_stream) EX_CHECK(cudaEventRecord(consumed, st));
    if (o.sync) EX_CHECK(cudaMemcpy(&host_loss, loss, sizeof(float), cudaMemcpyDeviceToHost));
    if (o.nvtx) nvtxRangePop();
  }
  EX_CHECK(cudaMemcpyAsync(&host_loss, loss, sizeof(float), cudaMemcpyDeviceToHost, st));
  EX_CHECK(cudaStreamSynchronize(st));
  printf("inject_steps: %d steps, loss %.6f\n", o.steps, host_loss);
  EX_CHECK(cudaFree(x));
  EX_CHECK(cudaFree(y));
  EX_CHECK(cudaFree(w));
  EX_CHECK(cudaFree(g));
  EX_CHECK(cudaFree(loss));
  if (o.pageable) free(hx);
  else EX_CHECK(cudaFreeHost(hx));
  if (o.copy_stream) {
    EX_CHECK(cudaEventDestroy(copied));
    EX_CHECK(cudaEventDestroy(consumed));
    EX_CHECK(cudaStreamDestroy(cs));
  }
  EX_CHECK(cudaStreamDestroy(st));
  return 0;
}
