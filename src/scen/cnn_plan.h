/* cnn_plan.h: the SimpleCNN's shapes, memory layout and the small rules shared by host
 * and device code (internal to pd_scen; plain C, so unit tests use it without a GPU).
 *
 * - cnn_plan_t: every layer's geometry for one batch size, where each parameter lives
 *   in the one flat fp32 buffer, and the size of every per-step buffer.
 * - cnn_params_init(): torch's default initialization (Kaiming-uniform with a = sqrt(5),
 *   i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases), deterministic in
 *   the seed.
 * - cnn_scaler_update(): GradScaler's update rule, compiled for the host (unit tests)
 *   and for the device (the AdamW kernel applies it, so AMP needs no host sync).
 * - cnn_tiny_coef(): the TinyOpsBlock's constants, the same bits on host and device.
 *
 * Layouts. Activations are channels-last (NHWC) so that a convolution is
 * im2col + one GEMM whose output is already the next layer's input. A convolution's
 * parameters are one row-major [cout][kpad] block: column k = tap * cin + c holds the
 * weight of input channel c at tap (dh, dw) = (tap / 3 - 1, tap % 3 - 1); column
 * k = 9 * cin holds the bias (the im2col rows carry a 1 there); the columns up to kpad
 * (a multiple of 8, for 16-byte rows in fp16) are zero. The linear layer is a [10][128]
 * weight block followed by a [10] bias block.
 */
#ifndef PD_CNN_PLAN_H
#define PD_CNN_PLAN_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define CNN_HD __host__ __device__
#else
#define CNN_HD
#endif

/* Element type of activations and GEMM operands: fp32, or fp16 under AMP. */
typedef enum { CNN_F32 = 0, CNN_F16 = 1 } cnn_dtype_t;

/* Bytes per element of a dtype. */
static inline size_t cnn_dtype_size(cnn_dtype_t dt) { return dt == CNN_F16 ? 2u : 4u; }

#define CNN_FEATURES 128 /* channels out of conv3 = linear input */

/* One 3x3, pad 1, stride 1 convolution over an h x w image (output is h x w too). */
typedef struct {
  int cin, cout, h, w;
  int k;    /* 9 * cin: the im2col row length without the bias column */
  int kpad; /* k + 1 (bias) rounded up to a multiple of 8 */
} cnn_conv_geom_t;

/* Parameter blocks in the flat buffer, in this order. */
#define CNN_PARAM_MAP(X) \
  X(CONV1, "conv1")      \
  X(CONV2, "conv2")      \
  X(CONV3, "conv3")      \
  X(LIN_W, "linear.weight") \
  X(LIN_B, "linear.bias")

typedef enum {
#define CNN_PARAM_GEN(id, name) CNN_P_##id,
  CNN_PARAM_MAP(CNN_PARAM_GEN)
#undef CNN_PARAM_GEN
  CNN_P_COUNT
} cnn_param_id_t;

typedef struct {
  size_t offset; /* elements from the start of the flat buffer; a multiple of 8 */
  size_t count;  /* rows * cols */
  int rows, cols;
  int fan_in;    /* for the init bound */
} cnn_param_t;

/* Per-step buffers. `persistent` ones always live in workspaces made at create (the
 * TinyOpsBlock's CUDA graph needs fixed addresses); the others are the step's
 * temporaries, which alloc_mode/churn_buffers may route through an allocator every
 * step. X(id, name, persistent). The order is the order in which churn_buffers picks
 * temporaries. */
#define CNN_BUF_MAP(X)          \
  X(COLS1, "conv1.im2col", 0)   \
  X(Y1, "conv1.out", 0)         \
  X(COLS2, "conv2.im2col", 0)   \
  X(Y2, "conv2.out", 0)         \
  X(P2, "maxpool.out", 0)       \
  X(COLS3, "conv3.im2col", 0)   \
  X(Y3, "conv3.out", 0)         \
  X(LOGITS, "linear.out", 0)    \
  X(DLOGITS, "loss.grad", 0)    \
  X(DY3, "conv3.out.grad", 0)   \
  X(DCOLS3, "conv3.col.grad", 0) \
  X(DY2, "conv2.out.grad", 0)   \
  X(DCOLS2, "conv2.col.grad", 0) \
  X(DY1, "conv1.out.grad", 0)   \
  X(GRADS, "param.grad", 0)     \
  X(FEATS, "avgpool.out", 1)    \
  X(TINY, "tiny_ops.out", 1)    \
  X(DTINY, "tiny_ops.out.grad", 1) \
  X(DFEATS, "avgpool.out.grad", 1)

typedef enum {
#define CNN_BUF_GEN(id, name, persistent) CNN_B_##id,
  CNN_BUF_MAP(CNN_BUF_GEN)
#undef CNN_BUF_GEN
  CNN_B_COUNT
} cnn_buf_id_t;

/* Number of per-step buffers that may be temporaries (the non-persistent ones). */
#define CNN_TEMP_MAX 15

typedef struct {
  int batch;
  cnn_dtype_t act;               /* activations and GEMM operands */
  cnn_conv_geom_t conv[3];
  cnn_param_t param[CNN_P_COUNT];
  size_t param_count;            /* length of the flat parameter buffer */
  size_t buf_bytes[CNN_B_COUNT]; /* bytes of each per-step buffer (0 = unused) */
} cnn_plan_t;

/* Fills *plan for `batch` images (>= 1) with fp16 activations when amp. Buffers of the
 * TinyOpsBlock get a size only when `tiny` is set. Returns 0, or PD_EINVAL for a batch
 * outside 1..65536. */
int cnn_plan_init(cnn_plan_t *plan, int batch, bool amp, bool tiny);

/* Returns the static name of a buffer ("conv2.im2col"); never NULL. */
const char *cnn_buf_name(cnn_buf_id_t id);
/* Returns 1 when a buffer always lives in a create-time workspace. */
int cnn_buf_persistent(cnn_buf_id_t id);
/* Returns the static name of a parameter block ("conv1"); never NULL. */
const char *cnn_param_name(cnn_param_id_t id);

/* Writes the initial parameters (plan->param_count floats, padding zero) into `out`,
 * deterministic in `seed`: every weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
void cnn_params_init(const cnn_plan_t *plan, uint64_t seed, float *out);

/* Writes "[[64, 3, 32, 32]]"-style text into buf (always terminated). */
void cnn_shape_text(char *buf, size_t len, const int *dims, int ndims);

/* ---- GradScaler ------------------------------------------------------------------ */

#define CNN_SCALER_INIT 65536.0f
#define CNN_SCALER_GROWTH 2.0f
#define CNN_SCALER_BACKOFF 0.5f
#define CNN_SCALER_INTERVAL 2000

/* Device-resident step state: read by kernels, written by the CE and AdamW kernels.
 * The host reads it only when asked (pd_cnn_last_loss, pd_cnn_amp_state) or when the
 * planted sync mode says so. */
typedef struct {
  float loss;             /* last step's mean cross entropy (unscaled) */
  float scale;            /* current loss scale; 1 when AMP is off */
  float grad_sumsq;       /* sum of squares of the scaled gradients, when checked */
  int32_t found_inf;      /* set by the check kernel; consumed and cleared by AdamW */
  int32_t growth_tracker; /* consecutive clean steps since the last scale change */
  uint32_t blocks_done;   /* AdamW's last-block ticket; back to 0 after each step */
  int64_t skipped;        /* steps skipped because a gradient was inf/nan */
  int64_t step;           /* optimizer steps taken: AdamW's t */
} cnn_state_t;

/* Returns 1 when x is neither inf nor nan (valid on host and device, no fast-math). */
static inline CNN_HD int cnn_isfinite(float x) { return fabsf(x) <= FLT_MAX; }

/* GradScaler.update() with torch's rule: on inf/nan multiply the scale by the backoff
 * factor and restart the tracker; otherwise count the clean step and, after `interval`
 * of them, multiply by the growth factor (kept only if finite). */
static inline CNN_HD void cnn_scaler_update(float *scale, int32_t *tracker, int found_inf,
                                            int interval) {
  if (found_inf) {
    *scale = *scale * CNN_SCALER_BACKOFF;
    *tracker = 0;
    return;
  }
  int32_t successful = *tracker + 1;
  if (successful == interval) {
    float grown = *scale * CNN_SCALER_GROWTH;
    if (cnn_isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker = successful;
  }
}

/* ---- TinyOpsBlock ---------------------------------------------------------------- */

/* Op i of the block computes y = y * a + b elementwise. The factors alternate 1.25 and
 * 0.8 so the chain neither explodes nor vanishes however deep it is. */
static inline CNN_HD void cnn_tiny_coef(int i, float *a, float *b) {
  *a = (i & 1) ? 0.8f : 1.25f;
  *b = 0.01f * (float)((i % 3) - 1);
}

/* ---- AdamW ------------------------------------------------------------------------ */

typedef struct {
  float lr, beta1, beta2, eps, weight_decay;
} cnn_adamw_t;

#ifdef __cplusplus
}
#endif
#endif /* PD_CNN_PLAN_H */
