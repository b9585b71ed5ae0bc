/* cnn_gemm.c: the SimpleCNN's GEMMs through cuBLAS (cublasGemmEx, fp32 accumulation
 * with CUBLAS_COMPUTE_32F; fp16 operands under AMP, fp32 otherwise).
 *
 * cuBLAS is column-major; our matrices are row-major, and a row-major r x c matrix is
 * the column-major c x r matrix with the same bytes. So each product below is written
 * for the transposes: Y = X . W^T (row-major) is Y^T = W . X^T (column-major).
 */
#include <cublas_v2.h>

#include "cnn_layers.h"
#include "pd/pd_common.h"
#include "pd/pd_prof.h"

static cudaDataType_t cnn_cuda_type(cnn_dtype_t dt) { return dt == CNN_F16 ? CUDA_R_16F : CUDA_R_32F; }

static const float cnn_one = 1.0f;
static const float cnn_zero = 0.0f;

/* Every GEMM here is a plain matrix product through cuBLAS (alpha 1, beta 0), the
 * operation torch records as the op "aten::mm" on CUDA (which also calls cuBLAS, and
 * shows the same nvjet/cublasLt kernels under it). The range carries that name, so the
 * trace has its ops at ATen's level where ours compute exactly an ATen operator, inside
 * the layer's own range (as torch's module ranges hold their aten ops); HTA's ATen-op
 * launch analysis reads ops by that name. Own kernels (im2col, pooling, the loss,
 * AdamW) fuse several ATen operators and get no such name. */
#define CNN_MM_OP "aten::mm"

static cublasStatus_t mm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const void *a, cudaDataType_t at, int lda, const void *b, cudaDataType_t bt, int ldb,
                         void *c, cudaDataType_t ct, int ldc) {
  const bool ranged = pd_range_push(CNN_MM_OP) == 0;
  cublasStatus_t st = cublasGemmEx(h, ta, tb, m, n, k, &cnn_one, a, at, lda, b, bt, ldb, &cnn_zero, c, ct, ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (ranged) (void)pd_range_pop();
  return st;
}

static int conv_args_ok(const void *a, const void *b, const void *c, int p, const cnn_conv_geom_t *g) {
  return a != NULL && b != NULL && c != NULL && p > 0 && g != NULL && g->cout > 0 && g->kpad > g->k;
}

int cnn_gemm_conv_forward(cublasHandle_t h, cnn_dtype_t dt, const void *cols, const void *w,
                          void *y, int p, const cnn_conv_geom_t *g) {
  if (h == NULL || !conv_args_ok(cols, w, y, p, g)) return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* Y^T[cout x p] = (W^T[kpad x cout])^T . cols^T[kpad x p] */
  CNN_BLAS(mm(h, CUBLAS_OP_T, CUBLAS_OP_N, g->cout, p, g->kpad, w, t, g->kpad,
              cols, t, g->kpad, y, t, g->cout));
  return 0;
}

int cnn_gemm_conv_wgrad(cublasHandle_t h, cnn_dtype_t dt, const void *cols, const void *dy,
                        float *dw, int p, const cnn_conv_geom_t *g) {
  if (h == NULL || !conv_args_ok(cols, dy, dw, p, g)) return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dW^T[kpad x cout] = cols^T[kpad x p] . (dY^T[cout x p])^T; the bias column of cols
   * makes row k the bias gradient, the zero columns make the padding rows zero. */
  CNN_BLAS(mm(h, CUBLAS_OP_N, CUBLAS_OP_T, g->kpad, g->cout, p, cols, t, g->kpad,
              dy, t, g->cout, dw, CUDA_R_32F, g->kpad));
  return 0;
}

int cnn_gemm_conv_dgrad(cublasHandle_t h, cnn_dtype_t dt, const void *dy, const void *w,
                        void *dcols, int p, const cnn_conv_geom_t *g) {
  if (h == NULL || !conv_args_ok(dy, w, dcols, p, g)) return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dcols^T[k x p] (leading dimension kpad) = W^T[k x cout] . dY^T[cout x p]; the bias
   * and padding columns have no input to send a gradient to, so they are skipped. */
  CNN_BLAS(mm(h, CUBLAS_OP_N, CUBLAS_OP_N, g->k, p, g->cout, w, t, g->kpad,
              dy, t, g->cout, dcols, t, g->kpad));
  return 0;
}

int cnn_gemm_linear_forward(cublasHandle_t h, cnn_dtype_t dt, const void *x, const void *w,
                            float *y, int n, int in, int out) {
  if (h == NULL || x == NULL || w == NULL || y == NULL || n < 1 || in < 1 || out < 1)
    return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* Y^T[out x n] = (W^T[in x out])^T . X^T[in x n]; fp32 logits for the loss. */
  CNN_BLAS(mm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, t, in, x, t, in, y, CUDA_R_32F, out));
  return 0;
}

int cnn_gemm_linear_dgrad(cublasHandle_t h, cnn_dtype_t dt, const void *dy, const void *w,
                          void *dx, int n, int in, int out) {
  if (h == NULL || dy == NULL || w == NULL || dx == NULL || n < 1 || in < 1 || out < 1)
    return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dX^T[in x n] = W^T[in x out] . dY^T[out x n] */
  CNN_BLAS(mm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, t, in, dy, t, out, dx, t, in));
  return 0;
}

int cnn_gemm_linear_wgrad(cublasHandle_t h, cnn_dtype_t dt, const void *x, const void *dy,
                          float *dw, int n, int in, int out) {
  if (h == NULL || x == NULL || dy == NULL || dw == NULL || n < 1 || in < 1 || out < 1)
    return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dW^T[in x out] = X^T[in x n] . (dY^T[out x n])^T */
  CNN_BLAS(mm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, t, in, dy, t, out, dw, CUDA_R_32F, in));
  return 0;
}
