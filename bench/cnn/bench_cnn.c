/* bench_cnn.c: times the SimpleCNN training step (pd_cnn.h) and prints a table.
 *
 * For each configuration:
 *   step ms      median (and p10/p90) of back-to-back steps, from CUDA events recorded
 *                after every step on the model's stream: the steady-state cost of a step
 *                when the host runs ahead, as a training loop sees it
 *   sync ms      median of steps bracketed by cudaStreamSynchronize and read on the host
 *                clock (how profiler_demo times a step)
 *   host ms      median time pd_cnn_train_step() takes to return in those steps: the host
 *                cost of enqueueing one step (the queue is empty after the sync), plus any
 *                waiting the step does itself (forced syncs, cudaFree)
 *   GPU ms       median replay time of the same step captured as one CUDA graph (no
 *                host launch cost: the GPU's own floor). A step is GPU-bound when
 *                step ms is close to this.
 *   kernels      kernel nodes in that captured step
 *   temps        temporaries taken from the allocator per step
 * The graph and the kernel count come from a twin model with the same batch, AMP and
 * TinyOpsBlock mode but static workspaces and no forced syncs (those cannot be captured);
 * allocation mode and syncs add no kernels.
 *
 * usage: bench_cnn [--steps N] [--warmup N] [--quick] [--csv FILE]
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_cnn.h"
#include "pd/pd_common.h"
#include "pd/pd_data.h"

#define BENCH_CHECK_CUDA(call)                                                                  \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "bench_cnn: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

#define BENCH_CHECK_PD(call)                                                                    \
  do {                                                                                          \
    int rc_ = (call);                                                                           \
    if (rc_ != 0) {                                                                             \
      fprintf(stderr, "bench_cnn: %s: %s (%s)\n", #call, pd_strerror(rc_), pd_cnn_last_error()); \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

typedef struct {
  const char *name;
  int batch;
  bool amp;
  pd_tiny_mode_t tiny;
  pd_alloc_mode_t alloc;
  int churn;
  pd_sync_mode_t sync;
} bench_case_t;

typedef struct {
  double step_ms, p10_ms, p90_ms, sync_ms, host_ms, gpu_ms;
  long kernels;
  int temps;
  int graph_note; /* 1: GPU ms/kernels from the chain twin (graph in graph not capturable) */
} bench_result_t;

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  int i = (int)(q * (n - 1) + 0.5);
  return v[i];
}

static pd_cnn_t *make_model(const bench_case_t *c, bool twin, cudaStream_t s) {
  pd_cnn_config_t cfg;
  pd_cnn_config_init(&cfg);
  cfg.batch = c->batch;
  cfg.amp = c->amp;
  cfg.seed = 1;
  cfg.tiny_mode = c->tiny;
  cfg.alloc_mode = twin ? PD_ALLOC_POOL : c->alloc;
  cfg.churn_buffers = twin ? 0 : c->churn;
  cfg.sync_mode = twin ? PD_SYNC_NONE : c->sync;
  pd_cnn_t *m = NULL;
  BENCH_CHECK_PD(pd_cnn_create(&cfg, s, &m));
  return m;
}

/* Captures one step of m; returns the graph or NULL when the step cannot be captured. */
static cudaGraph_t capture_step(pd_cnn_t *m, const float *img, const int32_t *lab, long *kernels) {
  cudaStream_t s = pd_cnn_stream(m);
  cudaGraph_t g = NULL;
  BENCH_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  int rc = pd_cnn_train_step(m, img, lab);
  cudaError_t e = cudaStreamEndCapture(s, &g);
  (void)cudaGetLastError();
  if (rc != 0 || e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    return NULL;
  }
  size_t count = 0;
  BENCH_CHECK_CUDA(cudaGraphGetNodes(g, NULL, &count));
  cudaGraphNode_t *nodes = malloc(count * sizeof(*nodes));
  BENCH_CHECK_CUDA(cudaGraphGetNodes(g, nodes, &count));
  long k = 0;
  for (size_t i = 0; i < count; i++) {
    enum cudaGraphNodeType t;
    BENCH_CHECK_CUDA(cudaGraphNodeGetType(nodes[i], &t));
    k += t == cudaGraphNodeTypeKernel;
  }
  free(nodes);
  *kernels = k;
  return g;
}

static void run_case(const bench_case_t *c, int warmup, int steps, const float *img,
                     const int32_t *lab, bench_result_t *r) {
  cudaStream_t s;
  BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  memset(r, 0, sizeof(*r));

  /* GPU floor and kernel count from the capturable twin. */
  bench_case_t tc = *c;
  pd_cnn_t *twin = make_model(&tc, true, s);
  BENCH_CHECK_PD(pd_cnn_train_step(twin, img, lab)); /* lazy module loading happens here */
  BENCH_CHECK_CUDA(cudaStreamSynchronize(s));
  cudaGraph_t g = capture_step(twin, img, lab, &r->kernels);
  if (g == NULL && c->tiny == PD_TINY_GRAPH) {
    pd_cnn_destroy(twin);
    tc.tiny = PD_TINY_CHAIN;
    twin = make_model(&tc, true, s);
    BENCH_CHECK_PD(pd_cnn_train_step(twin, img, lab));
    BENCH_CHECK_CUDA(cudaStreamSynchronize(s));
    g = capture_step(twin, img, lab, &r->kernels);
    r->graph_note = 1;
  }
  if (g != NULL) {
    cudaGraphExec_t ge;
    BENCH_CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    const int reps = steps < 50 ? steps : 50;
    double *t = malloc((size_t)reps * sizeof(double));
    cudaEvent_t e0, e1;
    BENCH_CHECK_CUDA(cudaEventCreate(&e0));
    BENCH_CHECK_CUDA(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) BENCH_CHECK_CUDA(cudaGraphLaunch(ge, s));
    for (int i = 0; i < reps; i++) {
      BENCH_CHECK_CUDA(cudaEventRecord(e0, s));
      BENCH_CHECK_CUDA(cudaGraphLaunch(ge, s));
      BENCH_CHECK_CUDA(cudaEventRecord(e1, s));
      BENCH_CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0.0f;
      BENCH_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      t[i] = ms;
    }
    r->gpu_ms = quantile(t, reps, 0.5);
    free(t);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  } else {
    r->gpu_ms = -1.0;
    r->kernels = -1;
  }
  pd_cnn_destroy(twin);

  /* The configuration itself: back-to-back steps timed by events. */
  pd_cnn_t *m = make_model(c, false, s);
  r->temps = pd_cnn_temporaries(m);
  for (int i = 0; i < warmup; i++) BENCH_CHECK_PD(pd_cnn_train_step(m, img, lab));
  BENCH_CHECK_CUDA(cudaStreamSynchronize(s));
  cudaEvent_t *ev = malloc((size_t)(steps + 1) * sizeof(cudaEvent_t));
  for (int i = 0; i <= steps; i++) BENCH_CHECK_CUDA(cudaEventCreate(&ev[i]));
  BENCH_CHECK_CUDA(cudaEventRecord(ev[0], s));
  for (int i = 1; i <= steps; i++) {
    BENCH_CHECK_PD(pd_cnn_train_step(m, img, lab));
    BENCH_CHECK_CUDA(cudaEventRecord(ev[i], s));
  }
  BENCH_CHECK_CUDA(cudaStreamSynchronize(s));
  double *t = malloc((size_t)steps * sizeof(double));
  for (int i = 0; i < steps; i++) {
    float ms = 0.0f;
    BENCH_CHECK_CUDA(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    t[i] = ms;
  }
  r->p10_ms = quantile(t, steps, 0.1);
  r->step_ms = quantile(t, steps, 0.5);
  r->p90_ms = quantile(t, steps, 0.9);
  for (int i = 0; i <= steps; i++) cudaEventDestroy(ev[i]);
  free(ev);

  /* Steps bracketed by synchronizations, on the host clock. */
  const int sync_steps = steps < 50 ? steps : 50;
  double *th = malloc((size_t)sync_steps * sizeof(double));
  for (int i = 0; i < sync_steps; i++) {
    BENCH_CHECK_CUDA(cudaStreamSynchronize(s));
    const int64_t t0 = pd_clock_now_ns();
    BENCH_CHECK_PD(pd_cnn_train_step(m, img, lab));
    const int64_t t1 = pd_clock_now_ns();
    BENCH_CHECK_CUDA(cudaStreamSynchronize(s));
    t[i] = (double)(pd_clock_now_ns() - t0) / 1e6;
    th[i] = (double)(t1 - t0) / 1e6;
  }
  r->sync_ms = quantile(t, sync_steps, 0.5);
  r->host_ms = quantile(th, sync_steps, 0.5);
  free(th);
  free(t);
  float loss = 0.0f;
  BENCH_CHECK_PD(pd_cnn_last_loss(m, &loss));
  if (!(loss == loss)) fprintf(stderr, "bench_cnn: warning: %s batch %d: loss is NaN\n", c->name, c->batch);
  pd_cnn_destroy(m);
  BENCH_CHECK_CUDA(cudaStreamDestroy(s));
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_cnn [--steps N] [--warmup N] [--quick] [--csv FILE]\n"
          "  --steps N    timed steps per configuration (default 200, >= 10)\n"
          "  --warmup N   untimed steps first (default 20, >= 1)\n"
          "  --quick      batch 64 rows only, 50 steps\n"
          "  --csv FILE   also write the table as CSV\n");
}

static int parse_int(const char *flag, const char *text, int lo, int *out) {
  char *end = NULL;
  long v = text ? strtol(text, &end, 10) : 0;
  if (text == NULL || *text == '\0' || *end != '\0' || v < lo || v > 100000) {
    fprintf(stderr, "bench_cnn: %s needs an integer from %d to 100000, got '%s'\n", flag, lo, text ? text : "");
    usage(stderr);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  int steps = 200, warmup = 20, quick = 0;
  const char *csv_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--steps") == 0) {
      if (parse_int("--steps", i + 1 < argc ? argv[++i] : NULL, 10, &steps)) return 2;
    } else if (strcmp(argv[i], "--warmup") == 0) {
      if (parse_int("--warmup", i + 1 < argc ? argv[++i] : NULL, 1, &warmup)) return 2;
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv_path = argv[++i];
    } else if (strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "bench_cnn: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (quick) steps = 50;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "bench_cnn: no CUDA device is available\n");
    return 3;
  }
  struct cudaDeviceProp prop;
  BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);

  bench_case_t cases[64];
  int nc = 0;
  static const int batches[] = {16, 32, 64, 128, 256, 512, 1024};
  for (int amp = 0; amp < 2; amp++)
    for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); b++) {
      if (quick && batches[b] != 64) continue;
      cases[nc++] = (bench_case_t){"clean", batches[b], amp, PD_TINY_OFF, PD_ALLOC_POOL, 64, PD_SYNC_NONE};
    }
  for (int amp = 1; amp >= 0; amp--) {
    cases[nc++] = (bench_case_t){"static workspaces", 64, amp, PD_TINY_OFF, PD_ALLOC_POOL, 0, PD_SYNC_NONE};
    cases[nc++] = (bench_case_t){"tiny_ops chain", 64, amp, PD_TINY_CHAIN, PD_ALLOC_POOL, 64, PD_SYNC_NONE};
    cases[nc++] = (bench_case_t){"tiny_ops fused", 64, amp, PD_TINY_FUSED, PD_ALLOC_POOL, 64, PD_SYNC_NONE};
    cases[nc++] = (bench_case_t){"tiny_ops graph", 64, amp, PD_TINY_GRAPH, PD_ALLOC_POOL, 64, PD_SYNC_NONE};
    cases[nc++] = (bench_case_t){"churn (cudaMalloc)", 64, amp, PD_TINY_OFF, PD_ALLOC_CHURN, 64, PD_SYNC_NONE};
    cases[nc++] = (bench_case_t){"pool (cudaMallocAsync)", 64, amp, PD_TINY_OFF, PD_ALLOC_POOL, 64, PD_SYNC_NONE};
    cases[nc++] = (bench_case_t){"sync forced", 64, amp, PD_TINY_OFF, PD_ALLOC_POOL, 64, PD_SYNC_FORCED};
    if (quick) break;
  }

  /* One batch of real samples, reused: timing does not depend on the values. */
  const int maxb = quick ? 64 : 1024;
  float *h_img = malloc((size_t)maxb * 3072 * sizeof(float));
  int32_t *h_lab = malloc((size_t)maxb * sizeof(int32_t));
  if (!h_img || !h_lab) {
    fprintf(stderr, "bench_cnn: out of host memory\n");
    return 1;
  }
  for (int i = 0; i < maxb; i++) pd_sample_fill(1, i, 0, h_img + (size_t)i * 3072, &h_lab[i]);
  float *img = NULL;
  int32_t *lab = NULL;
  BENCH_CHECK_CUDA(cudaMalloc((void **)&img, (size_t)maxb * 3072 * sizeof(float)));
  BENCH_CHECK_CUDA(cudaMalloc((void **)&lab, (size_t)maxb * sizeof(int32_t)));
  BENCH_CHECK_CUDA(cudaMemcpy(img, h_img, (size_t)maxb * 3072 * sizeof(float), cudaMemcpyHostToDevice));
  BENCH_CHECK_CUDA(cudaMemcpy(lab, h_lab, (size_t)maxb * sizeof(int32_t), cudaMemcpyHostToDevice));

  printf("device: %s (%d SMs), driver %d, runtime %d; %d timed steps after %d warmup\n\n", prop.name,
         prop.multiProcessorCount, driver, runtime, steps, warmup);
  printf("| config | batch | AMP | step ms (median) | p10 | p90 | sync'd step ms | host ms | GPU ms (graph) | kernels/step | temps/step | images/s |\n");
  printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
  if (csv_path && csv == NULL) {
    fprintf(stderr, "bench_cnn: cannot write %s\n", csv_path);
    return 2;
  }
  if (csv) fprintf(csv, "config,batch,amp,step_ms,p10_ms,p90_ms,sync_ms,host_ms,gpu_ms,kernels,temps,images_per_s\n");
  for (int i = 0; i < nc; i++) {
    bench_result_t r;
    run_case(&cases[i], warmup, steps, img, lab, &r);
    const double ips = cases[i].batch / (r.step_ms / 1e3);
    printf("| %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f%s | %ld%s | %d | %.0f |\n", cases[i].name,
           cases[i].batch, cases[i].amp ? "on" : "off", r.step_ms, r.p10_ms, r.p90_ms, r.sync_ms, r.host_ms,
           r.gpu_ms, r.graph_note ? "*" : "", r.kernels, r.graph_note ? "*" : "", r.temps, ips);
    fflush(stdout);
    if (csv)
      fprintf(csv, "%s,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%ld,%d,%.1f\n", cases[i].name, cases[i].batch,
              cases[i].amp ? 1 : 0, r.step_ms, r.p10_ms, r.p90_ms, r.sync_ms, r.host_ms, r.gpu_ms, r.kernels,
              r.temps, ips);
  }
  printf("\n* graph replays inside a captured step are not capturable here; GPU ms and kernels of the\n"
         "  chain twin (the same kernels) are shown.\n");
  if (csv) fclose(csv);
  cudaFree(img), cudaFree(lab);
  free(h_img), free(h_lab);
  return 0;
}
