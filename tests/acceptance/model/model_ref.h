/* model_ref.h: a CPU double-precision reference of every SimpleCNN layer, forward and
 * backward, in the GPU's layouts (NHWC activations, [cout][kpad] conv blocks with the
 * bias in column k), plus the whole model's loss and gradients; and small device
 * helpers (upload in fp32/fp16, download, NaN poisoning, relative error).
 *
 * The references are written straight from the definitions (loops over taps and
 * channels), not from the GPU's im2col formulation, so they check it independently.
 */
#ifndef PD_TEST_MODEL_REF_H
#define PD_TEST_MODEL_REF_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cnn_plan.h"

/* ---- random numbers and errors ---------------------------------------------------- */

/* A fresh seed per call (clock and counter); tests print it when they fail. */
uint64_t ref_fresh_seed(void);
/* Uniform in [lo, hi) from splitmix64 state *s. */
double ref_uniform(uint64_t *s, double lo, double hi);
/* Fills n values uniform in [lo, hi). */
void ref_fill(uint64_t *s, double *x, size_t n, double lo, double hi);
/* Rounds every value to what dtype dt stores (fp16 round-to-nearest-even, or fp32). */
void ref_round(cnn_dtype_t dt, double *x, size_t n);
/* ||out - ref|| / ||ref||; INFINITY when any out is inf/nan (poisoned, unwritten). */
double ref_rel_err(const float *out, const double *ref, size_t n);

/* ---- device helpers (abort the test on a CUDA error) ------------------------------ */

/* Returns a device buffer of n elements of dt holding src (converted); cudaFree it. */
void *dev_upload(cnn_dtype_t dt, const double *src, size_t n);
/* Returns a device buffer of `bytes` filled with 0xFF bytes (NaN in fp32 and fp16). */
void *dev_poison(size_t bytes);
/* Copies n elements of dt from the device into dst as floats (synchronous). */
void dev_download(cnn_dtype_t dt, const void *src, size_t n, float *dst);
/* Aborts the test with file:line and the CUDA error text when e is not cudaSuccess. */
void dev_check(cudaError_t e, const char *what, const char *file, int line);
#define DEV(call) dev_check((call), #call, __FILE__, __LINE__)

/* ---- layers (all double, NHWC) ----------------------------------------------------- */

/* y[n][h][w][cout] = sum over taps, channels of x * w + bias (pad 1). */
void ref_conv_forward(const double *x, int n, const cnn_conv_geom_t *g, const double *w, double *y);
/* dw[cout][kpad]: weight gradient in columns tap*cin+c, bias gradient in column k,
 * zeros in the padding. */
void ref_conv_wgrad(const double *x, const double *dy, int n, const cnn_conv_geom_t *g, double *dw);
/* dx[n][h][w][cin] = input gradient. */
void ref_conv_dgrad(const double *dy, const double *w, int n, const cnn_conv_geom_t *g, double *dx);
void ref_relu(const double *x, double *y, size_t count);
/* y = relu'(x) * dy. */
void ref_relu_backward(const double *x, const double *dy, double *dx, size_t count);
/* 2x2 max pool, stride 2; backward routes to the first maximum of each window. */
void ref_maxpool_forward(const double *x, int n, int h, int w, int c, double *y);
void ref_maxpool_backward(const double *x, const double *dy, int n, int h, int w, int c, double *dx);
void ref_avgpool_forward(const double *x, int n, int hw, int c, double *y);
void ref_avgpool_backward(const double *dy, int n, int hw, int c, double *dx);
/* y[n][out] = x . w^T (+ b when b is not NULL). */
void ref_linear_forward(const double *x, const double *w, const double *b, int n, int in, int out,
                        double *y);
void ref_linear_dgrad(const double *dy, const double *w, int n, int in, int out, double *dx);
void ref_linear_wgrad(const double *x, const double *dy, int n, int in, int out, double *dw);
/* Returns the mean cross entropy; dz[n][classes] = (softmax - onehot) / n. */
double ref_cross_entropy(const double *z, const int32_t *labels, int n, int classes, double *dz);
/* TinyOpsBlock in double: op i is y = y * a_i + b_i. */
void ref_tiny_forward(const double *x, double *y, size_t count, int depth);
void ref_tiny_backward(const double *dy, double *dx, size_t count, int depth);

/* The whole model: loss and the flat gradient (plan layout, unscaled) for fp32 params
 * `params`, NCHW images and labels; tiny_depth 0 = no TinyOpsBlock.
 * dec[0..2], when not NULL, are the GPU's pre-ReLU outputs of conv1..3 (NHWC floats):
 * the ReLU masks and max-pool choices then follow them instead of the reference's own
 * values. Those decisions are discontinuous, so a near tie may legitimately go the other
 * way (under fp16 often, under fp32 rarely); with them fixed the reference checks the arithmetic, in double. */
double ref_model_grads(const cnn_plan_t *plan, const float *params, const float *images,
                       const int32_t *labels, int tiny_depth, const float *const dec[3],
                       double *grads);

#endif /* PD_TEST_MODEL_REF_H */
