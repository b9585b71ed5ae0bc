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

static cudaDataType_t cnn_cuda_type(cnn_dtype_t dt) { return dt == CNN_F16 ? CUDA_R_16F : CUDA_R_32F; }

static const float cnn_one = 1.0f;
static const float cnn_zero = 0.0f;

static int conv_args_ok(const void *a, const void *b, const void *c, int p, const cnn_conv_geom_t *g) {
  return a != NULL && b != NULL && c != NULL && p > 0 && g != NULL && g->cout > 0 && g->kpad > g->k;
}

int cnn_gemm_conv_forward(cublasHandle_t h, cnn_dtype_t dt, const void *cols, const void *w,
                          void *y, int p, const cnn_conv_geom_t *g) {
  if (h == NULL || !conv_args_ok(cols, w, y, p, g)) return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* Y^T[cout x p] = (W^T[kpad x cout])^T . cols^T[kpad x p] */
  CNN_BLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, g->cout, p, g->kpad, &cnn_one, w, t, g->kpad,
                        cols, t, g->kpad, &cnn_zero, y, t, g->cout, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
  return 0;
}

int cnn_gemm_conv_wgrad(cublasHandle_t h, cnn_dtype_t dt, const void *cols, const void *dy,
                        float *dw, int p, const cnn_conv_geom_t *g) {
  if (h == NULL || !conv_args_ok(cols, dy, dw, p, g)) return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dW^T[kpad x cout] = cols^T[kpad x p] . (dY^T[cout x p])^T; the bias column of cols
   * makes row k the bias gradient, the zero columns make the padding rows zero. */
  CNN_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, g->kpad, g->cout, p, &cnn_one, cols, t,
                        g->kpad, dy, t, g->cout, &cnn_zero, dw, CUDA_R_32F, g->kpad,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

int cnn_gemm_conv_dgrad(cublasHandle_t h, cnn_dtype_t dt, const void *dy, const void *w,
                        void *dcols, int p, const cnn_conv_geom_t *g) {
  if (h == NULL || !conv_args_ok(dy, w, dcols, p, g)) return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dcols^T[k x p] (leading dimension kpad) = W^T[k x cout] . dY^T[cout x p]; the bias
   * and padding columns have no input to send a gradient to, so they are skipped. */
  CNN_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, g->k, p, g->cout, &cnn_one, w, t, g->kpad, dy,
                        t, g->cout, &cnn_zero, dcols, t, g->kpad, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
  return 0;
}

int cnn_gemm_linear_forward(cublasHandle_t h, cnn_dtype_t dt, const void *x, const void *w,
                            float *y, int n, int in, int out) {
  if (h == NULL || x == NULL || w == NULL || y == NULL || n < 1 || in < 1 || out < 1)
    return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* Y^T[out x n] = (W^T[in x out])^T . X^T[in x n]; fp32 logits for the loss. */
  CNN_BLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &cnn_one, w, t, in, x, t, in,
                        &cnn_zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

int cnn_gemm_linear_dgrad(cublasHandle_t h, cnn_dtype_t dt, const void *dy, const void *w,
                          void *dx, int n, int in, int out) {
  if (h == NULL || dy == NULL || w == NULL || dx == NULL || n < 1 || in < 1 || out < 1)
    return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dX^T[in x n] = W^T[in x out] . dY^T[out x n] */
  CNN_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &cnn_one, w, t, in, dy, t, out,
                        &cnn_zero, dx, t, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

int cnn_gemm_linear_wgrad(cublasHandle_t h, cnn_dtype_t dt, const void *x, const void *dy,
                          float *dw, int n, int in, int out) {
  if (h == NULL || x == NULL || dy == NULL || dw == NULL || n < 1 || in < 1 || out < 1)
    return PD_EINVAL;
  const cudaDataType_t t = cnn_cuda_type(dt);
  /* dW^T[in x out] = X^T[in x n] . (dY^T[out x n])^T */
  CNN_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &cnn_one, x, t, in, dy, t, out,
                        &cnn_zero, dw, CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}
