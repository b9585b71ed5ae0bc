/* cnn.c: the SimpleCNN training step (pd_cnn.h): model creation, the step's launch
 * sequence with its host ranges, the planted knobs, and the step's temporaries.
 *
 * The step per batch, all on the model's one stream:
 *   forward   im2col -> GEMM for each conv (bias through the im2col 1 column, ReLU
 *             fused into the next reader), maxpool, average pool, [TinyOpsBlock],
 *             linear GEMM, softmax cross entropy (loss, its gradient and the bias
 *             gradient in one kernel)
 *   backward  linear GEMMs, [TinyOpsBlock], avgpool+ReLU backward, and per conv a
 *             weight GEMM and a column GEMM whose col2im is fused with the pool and
 *             ReLU backward that follow
 *   optimizer GradScaler's inf check (AMP), one AdamW kernel over the flat parameter
 *             buffer that also writes the fp16 weights and updates the scale
 * Nothing waits for the device unless sync_mode is PD_SYNC_FORCED.
 */
#include "pd/pd_cnn.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn_layers.h"
#include "cnn_plan.h"
#include "pd/pd_prof.h"

/* cuBLAS's recommended workspace on Hopper; given once, so it never allocates in a step. */
#define CNN_BLAS_WORKSPACE (32u << 20)
#define CNN_MAX_DEPTH 100000
#define CNN_RANGE_STACK 16

enum { SH_CONV1, SH_CONV2, SH_POOL, SH_CONV3, SH_AVG, SH_FEAT, SH_LOSS, SH_COUNT };

struct pd_cnn {
  pd_cnn_config_t cfg;
  cnn_plan_t plan;
  cnn_adamw_t adamw;
  cudaStream_t stream;
  cublasHandle_t blas;
  void *blas_ws;
  float *params; /* fp32 master weights, flat (cnn_plan.h) */
  float *adam_m, *adam_v;
  void *params_half;       /* AMP: fp16 copy the GEMMs read, rewritten by AdamW */
  cnn_state_t *state;      /* device */
  cnn_state_t *host_state; /* pinned, for the reads the host asks for */
  void *slab;              /* the persistent per-step buffers */
  void *buf[CNN_B_COUNT];
  unsigned temp_mask; /* bit b: buffer b is a temporary */
  unsigned held_mask; /* temporaries allocated right now */
  int n_temps;
  cudaMemPool_t pool;
  int has_pool;
  cudaGraphExec_t tiny_fwd, tiny_bwd;
  int range_depth;
  unsigned char range_pushed[CNN_RANGE_STACK];
  bool layer_reads;   /* planted sync: read a device value back after every layer */
  cudaError_t read_err; /* first failure of those reads, reported after the pass */
  int64_t steps;
  int64_t gpu_spin_ns; /* injected device time per step (pd_cnn_set_gpu_slowdown) */
  size_t device_bytes;
  char shape[SH_COUNT][64];
};

/* ---- errors ------------------------------------------------------------------------ */

static _Thread_local char cnn_err_text[320];

int cnn_fail(int code, const char *file, int line, const char *call, const char *what) {
  const char *base = strrchr(file, '/');
  snprintf(cnn_err_text, sizeof(cnn_err_text), "%s:%d: %s: %s", base ? base + 1 : file, line, call,
           what ? what : "");
  return code;
}

const char *cnn_last_error(void) { return cnn_err_text; }
const char *pd_cnn_last_error(void) { return cnn_err_text; }

/* An allocation failure is PD_EDEVOOM; cudaMalloc's error is not sticky, so clear it
 * lest the next launch check report it. */
#define CNN_ALLOC(call)                                                                  \
  do {                                                                                   \
    cudaError_t cnn_e_ = (call);                                                         \
    if (cnn_e_ != cudaSuccess) {                                                         \
      (void)cudaGetLastError();                                                          \
      return cnn_fail(cnn_e_ == cudaErrorMemoryAllocation ? PD_EDEVOOM : PD_ECUDA, __FILE__, \
                      __LINE__, #call, cudaGetErrorString(cnn_e_));                      \
    }                                                                                    \
  } while (0)

#define TRY(expr)               \
  do {                          \
    int cnn_rc_ = (expr);       \
    if (cnn_rc_ != 0) return cnn_rc_; \
  } while (0)

/* ---- config ------------------------------------------------------------------------ */

void pd_cnn_config_init(pd_cnn_config_t *cfg) {
  if (cfg == NULL) return;
  memset(cfg, 0, sizeof(*cfg));
  cfg->batch = 64;
  cfg->amp = false;
  cfg->seed = 0;
  cfg->lr = 1e-3f;
  cfg->weight_decay = 1e-2f;
  cfg->tiny_mode = PD_TINY_OFF;
  cfg->tiny_ops_depth = 256;
  cfg->alloc_mode = PD_ALLOC_POOL;
  cfg->churn_buffers = 64;
  cfg->sync_mode = PD_SYNC_NONE;
}

/* Returns NULL when the config is valid, else the text naming the bad field. */
static const char *config_check(const pd_cnn_config_t *c) {
  if (c->batch < 1 || c->batch > 65536) return "batch must be 1..65536";
  if (!(c->lr > 0.0f) || !isfinite(c->lr)) return "lr must be a finite value > 0";
  if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
    return "weight_decay must be a finite value >= 0";
  if ((unsigned)c->tiny_mode > (unsigned)PD_TINY_GRAPH) return "tiny_mode is not a pd_tiny_mode_t";
  if (c->tiny_mode != PD_TINY_OFF && (c->tiny_ops_depth < 1 || c->tiny_ops_depth > CNN_MAX_DEPTH))
    return "tiny_ops_depth must be 1..100000 when the TinyOpsBlock is on";
  if ((unsigned)c->alloc_mode > (unsigned)PD_ALLOC_CHURN) return "alloc_mode is not a pd_alloc_mode_t";
  if (c->churn_buffers < 0) return "churn_buffers must be >= 0";
  if ((unsigned)c->sync_mode > (unsigned)PD_SYNC_FORCED) return "sync_mode is not a pd_sync_mode_t";
  return NULL;
}

/* ---- host ranges ------------------------------------------------------------------- */

/* Ranges are diagnostics: a failed push does not fail the step, but its pop is then
 * skipped so the profiler's stack stays balanced. */
static void rpush(pd_cnn_t *m, const char *name, const char *shape) {
  int ok = (shape ? pd_range_push_shape(name, shape) : pd_range_push(name)) == 0;
  if (m->range_depth < CNN_RANGE_STACK) m->range_pushed[m->range_depth] = (unsigned char)ok;
  m->range_depth++;
}

static void rpop(pd_cnn_t *m) {
  if (m->range_depth <= 0) return;
  m->range_depth--;
  if (m->range_depth < CNN_RANGE_STACK && m->range_pushed[m->range_depth]) (void)pd_range_pop();
  /* The planted sync, per layer: a statistic of the layer read back at once, as a
   * training loop that logs `x.abs().mean().item()` after every layer does. The host
   * waits for the layer, and the GPU then waits for the host to issue the next one. */
  if (m->layer_reads && m->range_depth == 1) {
    m->layer_reads = false; /* the read's own range must not trigger another */
    rpush(m, "layer_stats.item", NULL);
    cudaError_t e = cudaMemcpyAsync(&m->host_state->loss, &m->state->loss, sizeof(float),
                                    cudaMemcpyDeviceToHost, m->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(m->stream);
    if (e != cudaSuccess && m->read_err == cudaSuccess) m->read_err = e;
    rpop(m);
    m->layer_reads = true;
  }
}

/* ---- temporaries ------------------------------------------------------------------- */

static int buf_get(pd_cnn_t *m, cnn_buf_id_t b) {
  const unsigned bit = 1u << b;
  if (!(m->temp_mask & bit) || (m->held_mask & bit)) return 0;
  const size_t bytes = m->plan.buf_bytes[b];
  if (m->cfg.alloc_mode == PD_ALLOC_CHURN)
    CNN_ALLOC(cudaMalloc(&m->buf[b], bytes));
  else
    CNN_ALLOC(cudaMallocFromPoolAsync(&m->buf[b], bytes, m->pool, m->stream));
  m->held_mask |= bit;
  return 0;
}

static int buf_put(pd_cnn_t *m, cnn_buf_id_t b) {
  const unsigned bit = 1u << b;
  if (!(m->held_mask & bit)) return 0;
  void *p = m->buf[b];
  m->buf[b] = NULL;
  m->held_mask &= ~bit;
  /* cudaFree waits for the device, so the kernels still reading p are safe; the pool
   * free is ordered on the stream behind them. */
  if (m->cfg.alloc_mode == PD_ALLOC_CHURN)
    CNN_CUDA(cudaFree(p));
  else
    CNN_CUDA(cudaFreeAsync(p, m->stream));
  return 0;
}

static void buf_put_all(pd_cnn_t *m) {
  for (int b = 0; b < CNN_B_COUNT; b++) (void)buf_put(m, (cnn_buf_id_t)b);
}

/* ---- pointers into the flat parameter buffers ------------------------------------ */

static const void *weights(const pd_cnn_t *m, cnn_param_id_t id) {
  const size_t off = m->plan.param[id].offset;
  if (m->params_half != NULL) return (const char *)m->params_half + off * 2u;
  return m->params + off;
}

static float *grad(const pd_cnn_t *m, cnn_param_id_t id) {
  return (float *)m->buf[CNN_B_GRADS] + m->plan.param[id].offset;
}

/* ---- create / destroy -------------------------------------------------------------- */

static int capture_tiny(pd_cnn_t *m, bool forward, cudaGraphExec_t *exec) {
  const cnn_plan_t *pl = &m->plan;
  const int count = pl->batch * CNN_FEATURES;
  cudaStream_t cs;
  /* A private stream: capture is not allowed on the legacy default stream, which a
   * caller may have given us. Thread-local mode leaves other threads' CUDA calls
   * (data workers) alone. */
  CNN_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  cudaError_t e = cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    (void)cudaStreamDestroy(cs);
    return cnn_fail(PD_ECUDA, __FILE__, __LINE__, "cudaStreamBeginCapture", cudaGetErrorString(e));
  }
  int rc = forward ? cnn_tiny_forward(pl->act, m->buf[CNN_B_FEATS], m->buf[CNN_B_TINY], count,
                                      m->cfg.tiny_ops_depth, true, cs)
                   : cnn_tiny_backward(pl->act, m->buf[CNN_B_DTINY], m->buf[CNN_B_DFEATS], count,
                                       m->cfg.tiny_ops_depth, true, cs);
  cudaGraph_t graph = NULL;
  e = cudaStreamEndCapture(cs, &graph);
  (void)cudaStreamDestroy(cs);
  if (rc == 0 && e != cudaSuccess)
    rc = cnn_fail(PD_ECUDA, __FILE__, __LINE__, "cudaStreamEndCapture", cudaGetErrorString(e));
  if (rc == 0) {
    e = cudaGraphInstantiate(exec, graph, 0);
    if (e != cudaSuccess)
      rc = cnn_fail(PD_ECUDA, __FILE__, __LINE__, "cudaGraphInstantiate", cudaGetErrorString(e));
    else
      e = cudaGraphUpload(*exec, m->stream);
    if (rc == 0 && e != cudaSuccess)
      rc = cnn_fail(PD_ECUDA, __FILE__, __LINE__, "cudaGraphUpload", cudaGetErrorString(e));
  }
  if (graph != NULL) (void)cudaGraphDestroy(graph);
  return rc;
}

static void make_shapes(pd_cnn_t *m) {
  const int n = m->plan.batch;
  const cnn_conv_geom_t *g = m->plan.conv;
  int d[4];
  d[0] = n, d[1] = g[0].cin, d[2] = g[0].h, d[3] = g[0].w;
  cnn_shape_text(m->shape[SH_CONV1], sizeof(m->shape[0]), d, 4);
  d[1] = g[1].cin, d[2] = g[1].h, d[3] = g[1].w;
  cnn_shape_text(m->shape[SH_CONV2], sizeof(m->shape[0]), d, 4);
  d[1] = g[1].cout;
  cnn_shape_text(m->shape[SH_POOL], sizeof(m->shape[0]), d, 4);
  d[1] = g[2].cin, d[2] = g[2].h, d[3] = g[2].w;
  cnn_shape_text(m->shape[SH_CONV3], sizeof(m->shape[0]), d, 4);
  d[1] = g[2].cout;
  cnn_shape_text(m->shape[SH_AVG], sizeof(m->shape[0]), d, 4);
  d[1] = CNN_FEATURES;
  cnn_shape_text(m->shape[SH_FEAT], sizeof(m->shape[0]), d, 2);
  snprintf(m->shape[SH_LOSS], sizeof(m->shape[0]), "[[%d, %d], [%d]]", n, PD_CNN_CLASSES, n);
}

static int create_body(pd_cnn_t *m) {
  const cnn_plan_t *pl = &m->plan;
  const size_t np = pl->param_count;

  CNN_BLAS(cublasCreate(&m->blas));
  CNN_BLAS(cublasSetStream(m->blas, m->stream));
  CNN_ALLOC(cudaMalloc(&m->blas_ws, CNN_BLAS_WORKSPACE));
  m->device_bytes += CNN_BLAS_WORKSPACE;
  CNN_BLAS(cublasSetWorkspace(m->blas, m->blas_ws, CNN_BLAS_WORKSPACE));

  CNN_ALLOC(cudaMalloc((void **)&m->params, np * sizeof(float)));
  CNN_ALLOC(cudaMalloc((void **)&m->adam_m, np * sizeof(float)));
  CNN_ALLOC(cudaMalloc((void **)&m->adam_v, np * sizeof(float)));
  m->device_bytes += 3 * np * sizeof(float);
  if (m->cfg.amp) {
    CNN_ALLOC(cudaMalloc(&m->params_half, np * 2u));
    m->device_bytes += np * 2u;
  }
  CNN_ALLOC(cudaMalloc((void **)&m->state, sizeof(cnn_state_t)));
  m->device_bytes += sizeof(cnn_state_t);
  CNN_ALLOC(cudaMallocHost((void **)&m->host_state, sizeof(cnn_state_t)));

  float *init = malloc(np * sizeof(float));
  if (init == NULL) return PD_ENOMEM;
  cnn_params_init(pl, m->cfg.seed, init);
  cudaError_t e = cudaMemcpyAsync(m->params, init, np * sizeof(float), cudaMemcpyHostToDevice,
                                  m->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(m->stream); /* before `init` is freed */
  free(init);
  if (e != cudaSuccess) return cnn_fail(PD_ECUDA, __FILE__, __LINE__, "upload params", cudaGetErrorString(e));
  CNN_CUDA(cudaMemsetAsync(m->adam_m, 0, np * sizeof(float), m->stream));
  CNN_CUDA(cudaMemsetAsync(m->adam_v, 0, np * sizeof(float), m->stream));
  if (m->cfg.amp) TRY(cnn_cast_to_half(m->params, m->params_half, np, m->stream));

  memset(m->host_state, 0, sizeof(*m->host_state));
  m->host_state->loss = NAN;
  m->host_state->scale = m->cfg.amp ? CNN_SCALER_INIT : 1.0f;
  CNN_CUDA(cudaMemcpyAsync(m->state, m->host_state, sizeof(cnn_state_t), cudaMemcpyHostToDevice,
                           m->stream));

  /* Which buffers are temporaries: the first churn_buffers non-persistent ones. */
  int want = m->cfg.churn_buffers < CNN_TEMP_MAX ? m->cfg.churn_buffers : CNN_TEMP_MAX;
  for (int b = 0; b < CNN_B_COUNT && m->n_temps < want; b++) {
    if (cnn_buf_persistent((cnn_buf_id_t)b) || pl->buf_bytes[b] == 0) continue;
    m->temp_mask |= 1u << b;
    m->n_temps++;
  }
  /* The rest live in one slab, each at a 256-byte boundary. */
  size_t slab_bytes = 0;
  for (int b = 0; b < CNN_B_COUNT; b++)
    if (!(m->temp_mask & (1u << b)) && pl->buf_bytes[b]) slab_bytes += (pl->buf_bytes[b] + 255u) & ~(size_t)255u;
  if (slab_bytes) {
    CNN_ALLOC(cudaMalloc(&m->slab, slab_bytes));
    m->device_bytes += slab_bytes;
    size_t off = 0;
    for (int b = 0; b < CNN_B_COUNT; b++) {
      if ((m->temp_mask & (1u << b)) || pl->buf_bytes[b] == 0) continue;
      m->buf[b] = (char *)m->slab + off;
      off += (pl->buf_bytes[b] + 255u) & ~(size_t)255u;
    }
  }
  if (m->n_temps > 0 && m->cfg.alloc_mode == PD_ALLOC_POOL) {
    int dev = 0;
    CNN_CUDA(cudaGetDevice(&dev));
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    CNN_CUDA(cudaMemPoolCreate(&m->pool, &props));
    m->has_pool = 1;
    /* Keep freed memory in the pool across synchronizations: no OS call in steady state. */
    uint64_t keep = UINT64_MAX;
    CNN_CUDA(cudaMemPoolSetAttribute(m->pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  if (m->cfg.tiny_mode == PD_TINY_GRAPH) {
    TRY(capture_tiny(m, true, &m->tiny_fwd));
    TRY(capture_tiny(m, false, &m->tiny_bwd));
  }
  make_shapes(m);
  CNN_CUDA(cudaStreamSynchronize(m->stream));
  return 0;
}

int pd_cnn_create(const pd_cnn_config_t *cfg, cudaStream_t stream, pd_cnn_t **out) {
  if (out == NULL) return PD_EINVAL;
  *out = NULL;
  if (cfg == NULL) return PD_EINVAL;
  const char *bad = config_check(cfg);
  if (bad != NULL) return cnn_fail(PD_EINVAL, __FILE__, __LINE__, "pd_cnn_create", bad);
  pd_cnn_t *m = calloc(1, sizeof(*m));
  if (m == NULL) return PD_ENOMEM;
  m->cfg = *cfg;
  m->stream = stream;
  m->adamw.lr = cfg->lr;
  m->adamw.beta1 = 0.9f;
  m->adamw.beta2 = 0.999f;
  m->adamw.eps = 1e-8f;
  m->adamw.weight_decay = cfg->weight_decay;
  int rc = cnn_plan_init(&m->plan, cfg->batch, cfg->amp, cfg->tiny_mode != PD_TINY_OFF);
  if (rc == 0) rc = create_body(m);
  if (rc != 0) {
    pd_cnn_destroy(m);
    return rc;
  }
  *out = m;
  return 0;
}

void pd_cnn_destroy(pd_cnn_t *m) {
  if (m == NULL) return;
  /* Teardown is best effort: keep freeing whatever else failed. */
  (void)cudaStreamSynchronize(m->stream);
  buf_put_all(m);
  (void)cudaStreamSynchronize(m->stream);
  if (m->tiny_fwd) (void)cudaGraphExecDestroy(m->tiny_fwd);
  if (m->tiny_bwd) (void)cudaGraphExecDestroy(m->tiny_bwd);
  if (m->has_pool) (void)cudaMemPoolDestroy(m->pool);
  if (m->blas) (void)cublasDestroy(m->blas);
  cudaFree(m->blas_ws);
  cudaFree(m->params);
  cudaFree(m->adam_m);
  cudaFree(m->adam_v);
  cudaFree(m->params_half);
  cudaFree(m->state);
  cudaFree(m->slab);
  if (m->host_state) (void)cudaFreeHost(m->host_state);
  free(m);
}

/* ---- the step ---------------------------------------------------------------------- */

/* A blocking device->host read, as loss.item() does: copy then wait. */
static int host_read(pd_cnn_t *m, void *dst, const void *src, size_t bytes) {
  CNN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, m->stream));
  CNN_CUDA(cudaStreamSynchronize(m->stream));
  return 0;
}

static int step_forward(pd_cnn_t *m, const float *images, const int32_t *labels) {
  const cnn_plan_t *pl = &m->plan;
  const cnn_dtype_t dt = pl->act;
  const cnn_conv_geom_t *g1 = &pl->conv[0], *g2 = &pl->conv[1], *g3 = &pl->conv[2];
  const int n = pl->batch, p1 = n * g1->h * g1->w, p3 = n * g3->h * g3->w;
  cudaStream_t s = m->stream;
  void **B = m->buf;

  rpush(m, "conv1.forward", m->shape[SH_CONV1]);
  TRY(buf_get(m, CNN_B_COLS1));
  TRY(buf_get(m, CNN_B_Y1));
  TRY(cnn_im2col_nchw(dt, images, n, g1, B[CNN_B_COLS1], s));
  TRY(cnn_gemm_conv_forward(m->blas, dt, B[CNN_B_COLS1], weights(m, CNN_P_CONV1), B[CNN_B_Y1], p1, g1));
  rpop(m);

  /* relu1 is applied by conv2's im2col as it reads conv1's output. */
  rpush(m, "conv2.forward", m->shape[SH_CONV2]);
  TRY(buf_get(m, CNN_B_COLS2));
  TRY(buf_get(m, CNN_B_Y2));
  TRY(cnn_im2col_nhwc(dt, B[CNN_B_Y1], n, g2, true, B[CNN_B_COLS2], s));
  TRY(cnn_gemm_conv_forward(m->blas, dt, B[CNN_B_COLS2], weights(m, CNN_P_CONV2), B[CNN_B_Y2], p1, g2));
  rpop(m);

  rpush(m, "maxpool.forward", m->shape[SH_POOL]); /* relu2 fused */
  TRY(buf_get(m, CNN_B_P2));
  TRY(cnn_maxpool2_relu(dt, B[CNN_B_Y2], n, g2->h, g2->w, g2->cout, B[CNN_B_P2], s));
  rpop(m);

  rpush(m, "conv3.forward", m->shape[SH_CONV3]);
  TRY(buf_get(m, CNN_B_COLS3));
  TRY(buf_get(m, CNN_B_Y3));
  TRY(cnn_im2col_nhwc(dt, B[CNN_B_P2], n, g3, false, B[CNN_B_COLS3], s));
  TRY(buf_put(m, CNN_B_P2));
  TRY(cnn_gemm_conv_forward(m->blas, dt, B[CNN_B_COLS3], weights(m, CNN_P_CONV3), B[CNN_B_Y3], p3, g3));
  rpop(m);

  rpush(m, "avgpool.forward", m->shape[SH_AVG]); /* relu3 fused */
  TRY(cnn_avgpool_relu(dt, B[CNN_B_Y3], n, g3->h * g3->w, g3->cout, B[CNN_B_FEATS], s));
  rpop(m);

  const void *lin_in = B[CNN_B_FEATS];
  if (m->cfg.tiny_mode != PD_TINY_OFF) {
    rpush(m, "tiny_ops.forward", m->shape[SH_FEAT]);
    if (m->cfg.tiny_mode == PD_TINY_GRAPH)
      CNN_CUDA(cudaGraphLaunch(m->tiny_fwd, s));
    else
      TRY(cnn_tiny_forward(dt, B[CNN_B_FEATS], B[CNN_B_TINY], n * CNN_FEATURES, m->cfg.tiny_ops_depth,
                           m->cfg.tiny_mode == PD_TINY_CHAIN, s));
    rpop(m);
    lin_in = B[CNN_B_TINY];
  }

  rpush(m, "linear.forward", m->shape[SH_FEAT]);
  TRY(buf_get(m, CNN_B_LOGITS));
  TRY(cnn_gemm_linear_forward(m->blas, dt, lin_in, weights(m, CNN_P_LIN_W), B[CNN_B_LOGITS], n,
                              CNN_FEATURES, PD_CNN_CLASSES));
  rpop(m);

  /* The loss and its gradient (scaled for AMP) come out of one kernel, as does the
   * linear bias gradient: the first write into the gradient buffer. */
  rpush(m, "cross_entropy", m->shape[SH_LOSS]);
  TRY(buf_get(m, CNN_B_GRADS));
  TRY(buf_get(m, CNN_B_DLOGITS));
  TRY(cnn_cross_entropy(dt, B[CNN_B_LOGITS], m->params + pl->param[CNN_P_LIN_B].offset, labels, n,
                        PD_CNN_CLASSES, m->state, m->cfg.amp, B[CNN_B_DLOGITS],
                        grad(m, CNN_P_LIN_B), s));
  TRY(buf_put(m, CNN_B_LOGITS));
  rpop(m);
  return 0;
}

static int step_backward(pd_cnn_t *m) {
  const cnn_plan_t *pl = &m->plan;
  const cnn_dtype_t dt = pl->act;
  const cnn_conv_geom_t *g1 = &pl->conv[0], *g2 = &pl->conv[1], *g3 = &pl->conv[2];
  const int n = pl->batch, p1 = n * g1->h * g1->w, p3 = n * g3->h * g3->w;
  cudaStream_t s = m->stream;
  void **B = m->buf;
  const bool tiny = m->cfg.tiny_mode != PD_TINY_OFF;

  rpush(m, "linear.backward", m->shape[SH_FEAT]);
  TRY(cnn_gemm_linear_dgrad(m->blas, dt, B[CNN_B_DLOGITS], weights(m, CNN_P_LIN_W),
                            tiny ? B[CNN_B_DTINY] : B[CNN_B_DFEATS], n, CNN_FEATURES, PD_CNN_CLASSES));
  TRY(cnn_gemm_linear_wgrad(m->blas, dt, tiny ? B[CNN_B_TINY] : B[CNN_B_FEATS], B[CNN_B_DLOGITS],
                            grad(m, CNN_P_LIN_W), n, CNN_FEATURES, PD_CNN_CLASSES));
  TRY(buf_put(m, CNN_B_DLOGITS));
  rpop(m);

  if (tiny) {
    rpush(m, "tiny_ops.backward", m->shape[SH_FEAT]);
    if (m->cfg.tiny_mode == PD_TINY_GRAPH)
      CNN_CUDA(cudaGraphLaunch(m->tiny_bwd, s));
    else
      TRY(cnn_tiny_backward(dt, B[CNN_B_DTINY], B[CNN_B_DFEATS], n * CNN_FEATURES,
                            m->cfg.tiny_ops_depth, m->cfg.tiny_mode == PD_TINY_CHAIN, s));
    rpop(m);
  }

  rpush(m, "avgpool.backward", m->shape[SH_AVG]); /* with relu3's backward */
  TRY(buf_get(m, CNN_B_DY3));
  TRY(cnn_avgpool_relu_backward(dt, B[CNN_B_Y3], B[CNN_B_DFEATS], n, g3->h * g3->w, g3->cout,
                                B[CNN_B_DY3], s));
  TRY(buf_put(m, CNN_B_Y3));
  rpop(m);

  rpush(m, "conv3.backward", m->shape[SH_CONV3]);
  TRY(cnn_gemm_conv_wgrad(m->blas, dt, B[CNN_B_COLS3], B[CNN_B_DY3], grad(m, CNN_P_CONV3), p3, g3));
  TRY(buf_get(m, CNN_B_DCOLS3));
  TRY(cnn_gemm_conv_dgrad(m->blas, dt, B[CNN_B_DY3], weights(m, CNN_P_CONV3), B[CNN_B_DCOLS3], p3, g3));
  TRY(buf_put(m, CNN_B_COLS3));
  TRY(buf_put(m, CNN_B_DY3));
  rpop(m);

  /* conv3's col2im, the max pool backward and relu2's backward in one kernel. */
  rpush(m, "maxpool.backward", m->shape[SH_POOL]);
  TRY(buf_get(m, CNN_B_DY2));
  TRY(cnn_col2im_maxpool_relu_backward(dt, B[CNN_B_DCOLS3], g3, n, B[CNN_B_Y2], B[CNN_B_DY2], s));
  TRY(buf_put(m, CNN_B_DCOLS3));
  TRY(buf_put(m, CNN_B_Y2));
  rpop(m);

  /* conv2's weight and column GEMMs, then its col2im fused with relu1's backward. */
  rpush(m, "conv2.backward", m->shape[SH_CONV2]);
  TRY(cnn_gemm_conv_wgrad(m->blas, dt, B[CNN_B_COLS2], B[CNN_B_DY2], grad(m, CNN_P_CONV2), p1, g2));
  TRY(buf_get(m, CNN_B_DCOLS2));
  TRY(cnn_gemm_conv_dgrad(m->blas, dt, B[CNN_B_DY2], weights(m, CNN_P_CONV2), B[CNN_B_DCOLS2], p1, g2));
  TRY(buf_put(m, CNN_B_COLS2));
  TRY(buf_put(m, CNN_B_DY2));
  TRY(buf_get(m, CNN_B_DY1));
  TRY(cnn_col2im_relu_backward(dt, B[CNN_B_DCOLS2], g2, n, B[CNN_B_Y1], B[CNN_B_DY1], s));
  TRY(buf_put(m, CNN_B_DCOLS2));
  TRY(buf_put(m, CNN_B_Y1));
  rpop(m);

  /* The images need no gradient, so conv1 computes only its weight gradient. */
  rpush(m, "conv1.backward", m->shape[SH_CONV1]);
  TRY(cnn_gemm_conv_wgrad(m->blas, dt, B[CNN_B_COLS1], B[CNN_B_DY1], grad(m, CNN_P_CONV1), p1, g1));
  TRY(buf_put(m, CNN_B_COLS1));
  TRY(buf_put(m, CNN_B_DY1));
  rpop(m);
  return 0;
}

static int step_optimizer(pd_cnn_t *m) {
  const size_t np = m->plan.param_count;
  const bool forced = m->cfg.sync_mode == PD_SYNC_FORCED;
  float *g = m->buf[CNN_B_GRADS];
  if (m->cfg.amp || forced) {
    /* AMP needs found_inf; the planted sync mode also reads the gradient norm. */
    rpush(m, m->cfg.amp ? "GradScaler.unscale_" : "grad_norm", NULL);
    TRY(cnn_grad_check(g, np, m->state, m->stream));
    rpop(m);
  }
  if (forced) {
    rpush(m, "found_inf.item", NULL);
    TRY(host_read(m, m->host_state, m->state, sizeof(cnn_state_t)));
    rpop(m);
  }
  rpush(m, "AdamW.step", NULL);
  TRY(cnn_adamw(m->params, g, m->adam_m, m->adam_v, m->params_half, np, &m->adamw, m->cfg.amp,
                CNN_SCALER_INTERVAL, m->state, m->gpu_spin_ns, m->stream));
  rpop(m);
  TRY(buf_put(m, CNN_B_GRADS));
  return 0;
}

static int step_body(pd_cnn_t *m, const float *images, const int32_t *labels) {
  const bool forced = m->cfg.sync_mode == PD_SYNC_FORCED;
  m->layer_reads = forced;
  m->read_err = cudaSuccess;
  rpush(m, "forward", NULL);
  int frc = step_forward(m, images, labels);
  m->layer_reads = false;
  TRY(frc);
  CNN_CUDA(m->read_err);
  rpop(m);
  if (forced) {
    rpush(m, "loss.item", NULL);
    TRY(host_read(m, &m->host_state->loss, &m->state->loss, sizeof(float)));
    rpop(m);
  }
  m->layer_reads = forced;
  rpush(m, "backward", NULL);
  int brc = step_backward(m);
  m->layer_reads = false;
  TRY(brc);
  CNN_CUDA(m->read_err);
  rpop(m);
  if (forced) {
    rpush(m, "cudaStreamSynchronize", NULL);
    CNN_CUDA(cudaStreamSynchronize(m->stream));
    rpop(m);
  }
  rpush(m, "optimizer", NULL);
  TRY(step_optimizer(m));
  rpop(m);
  return 0;
}

int pd_cnn_train_step(pd_cnn_t *m, const float *images, const int32_t *labels) {
  if (m == NULL || images == NULL || labels == NULL) return PD_EINVAL;
  m->range_depth = 0;
  int rc = step_body(m, images, labels);
  m->layer_reads = false;
  if (rc != 0) {
    /* Leave nothing allocated and every range closed; the model stays usable. */
    buf_put_all(m);
    while (m->range_depth > 0) rpop(m);
    return rc;
  }
  m->steps++;
  return 0;
}

int pd_cnn_set_gpu_slowdown(pd_cnn_t *m, int64_t ns) {
  if (m == NULL || ns < 0) return PD_EINVAL;
  m->gpu_spin_ns = ns;
  return 0;
}

int pd_cnn_gpu_delay(pd_cnn_t *m, int64_t ns) {
  if (m == NULL || ns < 0) return PD_EINVAL;
  return cnn_delay(ns, m->stream);
}

int pd_cnn_last_loss(pd_cnn_t *m, float *loss) {
  if (m == NULL || loss == NULL) return PD_EINVAL;
  if (m->steps == 0) return PD_ESTATE;
  TRY(host_read(m, &m->host_state->loss, &m->state->loss, sizeof(float)));
  *loss = m->host_state->loss;
  return 0;
}

int pd_cnn_amp_state(pd_cnn_t *m, float *scale, int64_t *skipped_steps) {
  if (m == NULL) return PD_EINVAL;
  TRY(host_read(m, m->host_state, m->state, sizeof(cnn_state_t)));
  if (scale) *scale = m->host_state->scale;
  if (skipped_steps) *skipped_steps = m->host_state->skipped;
  return 0;
}

cudaStream_t pd_cnn_stream(const pd_cnn_t *m) { return m ? m->stream : NULL; }

size_t pd_cnn_device_bytes(const pd_cnn_t *m) {
  if (m == NULL) return 0;
  size_t bytes = m->device_bytes;
  if (m->has_pool) {
    uint64_t reserved = 0;
    if (cudaMemPoolGetAttribute(m->pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess)
      bytes += (size_t)reserved;
  }
  return bytes;
}

int pd_cnn_temporaries(const pd_cnn_t *m) { return m ? m->n_temps : 0; }

int cnn_temporaries(const struct pd_cnn *m) { return pd_cnn_temporaries(m); }

int cnn_debug_buffers(struct pd_cnn *m, float **params, float **grads, const cnn_plan_t **plan) {
  if (m == NULL) return PD_EINVAL;
  if (params) *params = m->params;
  if (grads) *grads = m->buf[CNN_B_GRADS];
  if (plan) *plan = &m->plan;
  return 0;
}

cnn_state_t *cnn_debug_state(struct pd_cnn *m) { return m ? m->state : NULL; }

void *cnn_debug_buffer(struct pd_cnn *m, cnn_buf_id_t id) {
  if (m == NULL || (unsigned)id >= CNN_B_COUNT) return NULL;
  return m->buf[id];
}
