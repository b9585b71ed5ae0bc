/* cnn_layers.h: C-callable launchers of the SimpleCNN's kernels and GEMMs (internal to
 * pd_scen; acceptance tests call them one by one against a CPU reference).
 *
 * Every launcher enqueues on `stream`, checks its shapes (PD_EINVAL), checks the launch
 * (PD_ECUDA / PD_ECUBLAS) and never synchronizes. `dt` is the element type of the
 * activation and GEMM-operand pointers typed `void *`; `float *` pointers are fp32
 * whatever dt is. Activations are NHWC; see cnn_plan.h for the parameter layouts.
 */
#ifndef PD_CNN_LAYERS_H
#define PD_CNN_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cnn_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error helpers (pd_scen internal) ------------------------------------------- */

/* Records the first failing call's text ("file:line: call: error string") for
 * cnn_last_error(), and returns `code`. */
int cnn_fail(int code, const char *file, int line, const char *call, const char *what);
/* Returns the last recorded failure text of this thread; "" when none. Static storage. */
const char *cnn_last_error(void);

#define CNN_CUDA(call)                                                                  \
  do {                                                                                  \
    cudaError_t cnn_e_ = (call);                                                        \
    if (cnn_e_ != cudaSuccess)                                                          \
      return cnn_fail(PD_ECUDA, __FILE__, __LINE__, #call, cudaGetErrorString(cnn_e_)); \
  } while (0)

#define CNN_BLAS(call)                                                                      \
  do {                                                                                      \
    cublasStatus_t cnn_s_ = (call);                                                         \
    if (cnn_s_ != CUBLAS_STATUS_SUCCESS)                                                    \
      return cnn_fail(PD_ECUBLAS, __FILE__, __LINE__, #call, cublasGetStatusString(cnn_s_)); \
  } while (0)

/* ---- forward ------------------------------------------------------------------- */

/* im2col of an fp32 NCHW batch (conv1's input): cols[p][kpad] with p = (n, h, w),
 * column t * c + ch = x[n][ch][h + dh][w + dw] (0 outside), column 9c = 1, rest 0. */
int cnn_im2col_nchw(cnn_dtype_t dt, const float *x, int n, const cnn_conv_geom_t *g,
                    void *cols, cudaStream_t stream);

/* im2col of an NHWC batch, with relu(x) applied on the way when `relu` (the previous
 * layer's ReLU, fused). Same column layout as above; needs cin % 8 == 0. */
int cnn_im2col_nhwc(cnn_dtype_t dt, const void *x, int n, const cnn_conv_geom_t *g, bool relu,
                    void *cols, cudaStream_t stream);

/* y[n][h/2][w/2][c] = max over the 2x2 window of relu(x) (ReLU fused into the pool). */
int cnn_maxpool2_relu(cnn_dtype_t dt, const void *x, int n, int h, int w, int c, void *y,
                      cudaStream_t stream);

/* y[n][c] = mean over the h*w pixels of relu(x[n][p][c]) (ReLU fused into the pool). */
int cnn_avgpool_relu(cnn_dtype_t dt, const void *x, int n, int hw, int c, void *y,
                     cudaStream_t stream);

/* Softmax cross entropy over `classes` (<= 32) logits plus bias, mean over the batch.
 * Writes state->loss, dlogits[n][classes] = (softmax - onehot) * scale / n (dtype dt)
 * and dbias[classes] = its column sums (fp32), where scale = state->scale when
 * use_scale, else 1. A label outside 0..classes-1 makes the loss NaN and its row's
 * gradient zero. One block: launch cost stays flat in the batch. */
int cnn_cross_entropy(cnn_dtype_t dt, const float *logits, const float *bias,
                      const int32_t *labels, int n, int classes, cnn_state_t *state,
                      bool use_scale, void *dlogits, float *dbias, cudaStream_t stream);

/* TinyOpsBlock, forward: out = op_{depth-1}(...op_0(in)), op_i(y) = y * a_i + b_i
 * (cnn_tiny_coef), rounded to dt after every op. `chain` launches one kernel per op
 * (op 0 in -> out, the rest in place on out); otherwise one fused kernel. Same bits
 * either way. */
int cnn_tiny_forward(cnn_dtype_t dt, const void *in, void *out, int count, int depth,
                     bool chain, cudaStream_t stream);
/* TinyOpsBlock, backward: din = dout * a_{depth-1} * ... * a_0, rounded to dt after
 * every op. `chain`: ops depth-1..1 in place on dout (which is overwritten), op 0 writes
 * din; otherwise one fused kernel that leaves dout alone. */
int cnn_tiny_backward(cnn_dtype_t dt, void *dout, void *din, int count, int depth, bool chain,
                      cudaStream_t stream);

/* ---- backward ------------------------------------------------------------------ */

/* dx[n][p][c] = (x > 0) ? dy[n][c] / hw : 0: average pool backward with the ReLU
 * before it (x is the pre-ReLU conv output). */
int cnn_avgpool_relu_backward(cnn_dtype_t dt, const void *x, const void *dy, int n, int hw,
                              int c, void *dx, cudaStream_t stream);

/* col2im of a conv's column gradient (g: the conv whose input grad this is), then the
 * 2x2 max pool backward (to the first maximum of each window, as torch) and the ReLU
 * backward, against x = the pre-ReLU tensor before the pool (n x 2h x 2w x cin). */
int cnn_col2im_maxpool_relu_backward(cnn_dtype_t dt, const void *dcols,
                                     const cnn_conv_geom_t *g, int n, const void *x, void *dx,
                                     cudaStream_t stream);

/* col2im of a conv's column gradient into dx (n x h x w x cin), masked by x > 0 (ReLU
 * backward) when x is not NULL. */
int cnn_col2im_relu_backward(cnn_dtype_t dt, const void *dcols, const cnn_conv_geom_t *g, int n,
                             const void *x, void *dx, cudaStream_t stream);

/* ---- optimizer ------------------------------------------------------------------- */

/* GradScaler's unscale_/found_inf check: sets state->found_inf when any grad is inf or
 * nan and adds sum(grad^2) to state->grad_sumsq (both cleared by cnn_adamw). */
int cnn_grad_check(const float *grads, size_t count, cnn_state_t *state, cudaStream_t stream);

/* One AdamW step (torch semantics, decoupled weight decay) over the flat buffers, with
 * the gradients divided by state->scale when use_scaler. With use_scaler and
 * state->found_inf set, nothing changes (the step is skipped). The last block to finish
 * applies GradScaler's update (when use_scaler), counts the step, and clears found_inf,
 * grad_sumsq and its own ticket. When params_half is not NULL it receives the fp16 copy
 * of the updated weights that the next forward uses. spin_ns > 0 makes the last block
 * busy-wait that long at its end (injected device time for the gate's self-test). */
int cnn_adamw(float *params, const float *grads, float *m, float *v, void *params_half,
              size_t count, const cnn_adamw_t *hp, bool use_scaler, int scaler_interval,
              cnn_state_t *state, int64_t spin_ns, cudaStream_t stream);

/* Enqueues one thread that holds the stream for ns nanoseconds of GPU time. */
int cnn_delay(int64_t ns, cudaStream_t stream);

/* dst[i] = half(src[i]). */
int cnn_cast_to_half(const float *src, void *dst, size_t count, cudaStream_t stream);

/* ---- GEMMs (cuBLAS, fp32 accumulation; the handle carries the stream) ----------- */

/* y[p][cout] = cols[p][kpad] . w[cout][kpad]^T (bias included through the 1 column). */
int cnn_gemm_conv_forward(cublasHandle_t h, cnn_dtype_t dt, const void *cols, const void *w,
                          void *y, int p, const cnn_conv_geom_t *g);
/* dw[cout][kpad] (fp32) = dy[p][cout]^T . cols[p][kpad]: weight and bias gradient. */
int cnn_gemm_conv_wgrad(cublasHandle_t h, cnn_dtype_t dt, const void *cols, const void *dy,
                        float *dw, int p, const cnn_conv_geom_t *g);
/* dcols[p][0..k) (row stride kpad) = dy[p][cout] . w[cout][0..k). */
int cnn_gemm_conv_dgrad(cublasHandle_t h, cnn_dtype_t dt, const void *dy, const void *w,
                        void *dcols, int p, const cnn_conv_geom_t *g);
/* y[n][out] (fp32) = x[n][in] . w[out][in]^T. */
int cnn_gemm_linear_forward(cublasHandle_t h, cnn_dtype_t dt, const void *x, const void *w,
                            float *y, int n, int in, int out);
/* dx[n][in] = dy[n][out] . w[out][in]. */
int cnn_gemm_linear_dgrad(cublasHandle_t h, cnn_dtype_t dt, const void *dy, const void *w,
                          void *dx, int n, int in, int out);
/* dw[out][in] (fp32) = dy[n][out]^T . x[n][in]. */
int cnn_gemm_linear_wgrad(cublasHandle_t h, cnn_dtype_t dt, const void *x, const void *dy,
                          float *dw, int n, int in, int out);

/* ---- model internals for tests ------------------------------------------------------- */

struct pd_cnn;
/* Device pointers of the model's fp32 master parameters and gradient buffer (the
 * gradient buffer is NULL between steps when it is a temporary), plus the plan.
 * Owned by the model. */
int cnn_debug_buffers(struct pd_cnn *cnn, float **params, float **grads, const cnn_plan_t **plan);
/* Device pointer of one per-step buffer: valid between steps only for buffers that are
 * not temporaries (churn_buffers = 0); NULL otherwise. Owned by the model. */
void *cnn_debug_buffer(struct pd_cnn *cnn, cnn_buf_id_t id);
/* Device pointer of the model's step state. Owned by the model. */
cnn_state_t *cnn_debug_state(struct pd_cnn *cnn);
/* Number of step buffers routed through the allocator each step (0..CNN_TEMP_MAX). */
int cnn_temporaries(const struct pd_cnn *cnn);

#ifdef __cplusplus
}
#endif
#endif /* PD_CNN_LAYERS_H */
