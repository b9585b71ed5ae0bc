/* test_model_layers.c: every SimpleCNN layer's GPU launcher, forward and backward,
 * against the CPU double reference (model_ref.c), in fp32 (||out-ref||/||ref|| < 1e-4)
 * and fp16 (< 1e-2), on fresh random inputs each run (the seed is printed on failure).
 * Outputs are poisoned with NaN first, so an element no kernel wrote fails the test.
 */
#include <criterion/criterion.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn_layers.h"
#include "model_ref.h"
#include "pd/pd_cnn.h"

static double tol(cnn_dtype_t dt) { return dt == CNN_F16 ? 1e-2 : 1e-4; }
static const char *dt_name(cnn_dtype_t dt) { return dt == CNN_F16 ? "fp16" : "fp32"; }

static double *dalloc(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  cr_assert_not_null(p);
  return p;
}

static float *falloc(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  cr_assert_not_null(p);
  return p;
}

static cublasHandle_t blas_handle(void) {
  cublasHandle_t h;
  cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
  cr_assert_eq(cublasSetStream(h, 0), CUBLAS_STATUS_SUCCESS);
  return h;
}

#define OK(call)                                                                         \
  do {                                                                                   \
    int ok_rc_ = (call);                                                                 \
    cr_assert_eq(ok_rc_, 0, "%s returned %d (%s)", #call, ok_rc_, cnn_last_error());     \
  } while (0)

/* Compares n floats with a double reference; the message names the case and seed. */
static void expect_close(const char *what, cnn_dtype_t dt, uint64_t seed, const float *out,
                         const double *ref, size_t n) {
  const double err = ref_rel_err(out, ref, n);
  cr_expect(err < tol(dt), "%s (%s): relative error %.3g >= %.0e (seed %llu)", what, dt_name(dt), err,
            tol(dt), (unsigned long long)seed);
}

/* Random conv parameters [cout][kpad]: weights, bias in column k, padding columns random
 * too, so a non-zero im2col padding column would show. */
static double *random_conv_weights(uint64_t *s, const cnn_conv_geom_t *g, cnn_dtype_t dt) {
  const size_t cnt = (size_t)g->cout * g->kpad;
  double *w = dalloc(cnt);
  const double b = 1.0 / sqrt((double)g->k);
  ref_fill(s, w, cnt, -b, b);
  ref_round(dt, w, cnt);
  return w;
}

static cnn_plan_t test_plan(int batch) {
  cnn_plan_t p;
  cr_assert_eq(cnn_plan_init(&p, batch, false, false), 0);
  return p;
}

/* ---- convolutions: forward ----------------------------------------------------- */

static void check_conv_forward(int layer, cnn_dtype_t dt) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const int n = 2;
  const cnn_plan_t plan = test_plan(n);
  const cnn_conv_geom_t *g = &plan.conv[layer];
  const size_t pix = (size_t)n * g->h * g->w, xin = pix * g->cin, yout = pix * g->cout;
  cublasHandle_t h = blas_handle();

  double *x = dalloc(xin), *xr = dalloc(xin), *w = random_conv_weights(&s, g, dt);
  double *y = dalloc(yout);
  ref_fill(&s, x, xin, -1.0, 1.0);
  ref_round(dt, x, xin);
  void *dx;
  if (layer == 0) {
    /* conv1 reads the fp32 NCHW images and casts them itself. */
    dx = dev_upload(CNN_F32, x, xin);
    for (int b = 0; b < n; b++)
      for (int c = 0; c < g->cin; c++)
        for (int p = 0; p < g->h * g->w; p++)
          xr[((size_t)b * g->h * g->w + p) * g->cin + c] = x[((size_t)b * g->cin + c) * g->h * g->w + p];
  } else {
    dx = dev_upload(dt, x, xin);
    /* conv2 applies relu1 on the way in; conv3 reads the pool output as is. */
    if (layer == 1)
      ref_relu(x, xr, xin);
    else
      memcpy(xr, x, xin * sizeof(double));
  }
  void *dw = dev_upload(dt, w, (size_t)g->cout * g->kpad);
  void *cols = dev_poison(pix * g->kpad * cnn_dtype_size(dt));
  void *dy = dev_poison(yout * cnn_dtype_size(dt));
  if (layer == 0)
    OK(cnn_im2col_nchw(dt, dx, n, g, cols, 0));
  else
    OK(cnn_im2col_nhwc(dt, dx, n, g, layer == 1, cols, 0));
  OK(cnn_gemm_conv_forward(h, dt, cols, dw, dy, (int)pix, g));
  float *out = falloc(yout);
  dev_download(dt, dy, yout, out);
  ref_conv_forward(xr, n, g, w, y);
  char what[64];
  snprintf(what, sizeof(what), "conv%d forward", layer + 1);
  expect_close(what, dt, seed, out, y, yout);

  cudaFree(dx), cudaFree(dw), cudaFree(cols), cudaFree(dy);
  free(x), free(xr), free(w), free(y), free(out);
  cublasDestroy(h);
}

Test(model_layers, conv1_forward) {
  check_conv_forward(0, CNN_F32);
  check_conv_forward(0, CNN_F16);
}
Test(model_layers, conv2_forward_with_relu1) {
  check_conv_forward(1, CNN_F32);
  check_conv_forward(1, CNN_F16);
}
Test(model_layers, conv3_forward) {
  check_conv_forward(2, CNN_F32);
  check_conv_forward(2, CNN_F16);
}

/* ---- convolutions: weight and bias gradients ----------------------------------- */

static void check_conv_wgrad(int layer, cnn_dtype_t dt) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const int n = 2;
  const cnn_plan_t plan = test_plan(n);
  const cnn_conv_geom_t *g = &plan.conv[layer];
  const size_t pix = (size_t)n * g->h * g->w, xin = pix * g->cin, yout = pix * g->cout;
  const size_t wcnt = (size_t)g->cout * g->kpad;
  cublasHandle_t h = blas_handle();

  double *x = dalloc(xin), *xr = dalloc(xin), *gy = dalloc(yout), *ref = dalloc(wcnt);
  ref_fill(&s, x, xin, -1.0, 1.0);
  ref_round(dt, x, xin);
  ref_fill(&s, gy, yout, -1.0, 1.0);
  ref_round(dt, gy, yout);
  void *dx;
  if (layer == 0) {
    dx = dev_upload(CNN_F32, x, xin);
    for (int b = 0; b < n; b++)
      for (int c = 0; c < g->cin; c++)
        for (int p = 0; p < g->h * g->w; p++)
          xr[((size_t)b * g->h * g->w + p) * g->cin + c] = x[((size_t)b * g->cin + c) * g->h * g->w + p];
  } else {
    dx = dev_upload(dt, x, xin);
    memcpy(xr, x, xin * sizeof(double));
  }
  void *dgy = dev_upload(dt, gy, yout);
  void *cols = dev_poison(pix * g->kpad * cnn_dtype_size(dt));
  float *dwg = dev_poison(wcnt * sizeof(float));
  if (layer == 0)
    OK(cnn_im2col_nchw(dt, dx, n, g, cols, 0));
  else
    OK(cnn_im2col_nhwc(dt, dx, n, g, false, cols, 0));
  OK(cnn_gemm_conv_wgrad(h, dt, cols, dgy, dwg, (int)pix, g));
  float *out = falloc(wcnt);
  dev_download(CNN_F32, dwg, wcnt, out);
  ref_conv_wgrad(xr, gy, n, g, ref);
  char what[64];
  snprintf(what, sizeof(what), "conv%d weight+bias gradient", layer + 1);
  expect_close(what, dt, seed, out, ref, wcnt);
  /* The bias gradient alone (column k), so a wrong bias column cannot hide in the norm. */
  float *bo = falloc(g->cout);
  double *br = dalloc(g->cout);
  for (int o = 0; o < g->cout; o++) bo[o] = out[(size_t)o * g->kpad + g->k], br[o] = ref[(size_t)o * g->kpad + g->k];
  snprintf(what, sizeof(what), "conv%d bias gradient", layer + 1);
  expect_close(what, dt, seed, bo, br, (size_t)g->cout);
  for (int o = 0; o < g->cout; o++)
    for (int k = g->k + 1; k < g->kpad; k++)
      cr_expect_eq(out[(size_t)o * g->kpad + k], 0.0f, "conv%d padding gradient [%d][%d] = %g", layer + 1, o, k,
                   out[(size_t)o * g->kpad + k]);

  cudaFree(dx), cudaFree(dgy), cudaFree(cols), cudaFree(dwg);
  free(x), free(xr), free(gy), free(ref), free(out), free(bo), free(br);
  cublasDestroy(h);
}

Test(model_layers, conv1_weight_bias_grad) {
  check_conv_wgrad(0, CNN_F32);
  check_conv_wgrad(0, CNN_F16);
}
Test(model_layers, conv2_weight_bias_grad) {
  check_conv_wgrad(1, CNN_F32);
  check_conv_wgrad(1, CNN_F16);
}
Test(model_layers, conv3_weight_bias_grad) {
  check_conv_wgrad(2, CNN_F32);
  check_conv_wgrad(2, CNN_F16);
}

/* ---- convolutions: input gradients --------------------------------------------- */

/* conv2/conv3 input gradient: column GEMM + col2im, optionally with a ReLU mask (relu1's
 * backward, as the step uses it for conv2). conv1's input gradient is never computed:
 * the images need none. */
static void check_conv_dgrad(int layer, bool relu_mask, cnn_dtype_t dt) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const int n = 2;
  const cnn_plan_t plan = test_plan(n);
  const cnn_conv_geom_t *g = &plan.conv[layer];
  const size_t pix = (size_t)n * g->h * g->w, xin = pix * g->cin, yout = pix * g->cout;
  cublasHandle_t h = blas_handle();

  double *w = random_conv_weights(&s, g, dt), *gy = dalloc(yout), *ref = dalloc(xin), *x = dalloc(xin);
  ref_fill(&s, gy, yout, -1.0, 1.0);
  ref_round(dt, gy, yout);
  ref_fill(&s, x, xin, -1.0, 1.0);
  ref_round(dt, x, xin);
  void *dw = dev_upload(dt, w, (size_t)g->cout * g->kpad), *dgy = dev_upload(dt, gy, yout);
  void *dxm = dev_upload(dt, x, xin);
  /* Poisoned dcols: its bias and padding columns stay NaN and must never be read. */
  void *dcols = dev_poison(pix * g->kpad * cnn_dtype_size(dt));
  void *dxo = dev_poison(xin * cnn_dtype_size(dt));
  OK(cnn_gemm_conv_dgrad(h, dt, dgy, dw, dcols, (int)pix, g));
  OK(cnn_col2im_relu_backward(dt, dcols, g, n, relu_mask ? dxm : NULL, dxo, 0));
  float *out = falloc(xin);
  dev_download(dt, dxo, xin, out);
  ref_conv_dgrad(gy, w, n, g, ref);
  if (relu_mask) ref_relu_backward(x, ref, ref, xin);
  char what[80];
  snprintf(what, sizeof(what), "conv%d input gradient%s", layer + 1, relu_mask ? " with relu mask" : "");
  expect_close(what, dt, seed, out, ref, xin);

  cudaFree(dw), cudaFree(dgy), cudaFree(dxm), cudaFree(dcols), cudaFree(dxo);
  free(w), free(gy), free(ref), free(x), free(out);
  cublasDestroy(h);
}

Test(model_layers, conv2_input_grad) {
  check_conv_dgrad(1, false, CNN_F32);
  check_conv_dgrad(1, false, CNN_F16);
}
Test(model_layers, conv2_input_grad_with_relu1_backward) {
  check_conv_dgrad(1, true, CNN_F32);
  check_conv_dgrad(1, true, CNN_F16);
}
Test(model_layers, conv3_input_grad) {
  check_conv_dgrad(2, false, CNN_F32);
  check_conv_dgrad(2, false, CNN_F16);
}

/* conv3's input gradient through the fused col2im + maxpool backward + relu2 backward. */
static void check_pool_backward(cnn_dtype_t dt) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const int n = 2;
  const cnn_plan_t plan = test_plan(n);
  const cnn_conv_geom_t *g = &plan.conv[2];
  const size_t pix3 = (size_t)n * g->h * g->w, big = (size_t)n * 32 * 32 * 64, yout = pix3 * g->cout;
  cublasHandle_t h = blas_handle();

  double *w = random_conv_weights(&s, g, dt), *gy = dalloc(yout), *y2 = dalloc(big), *a2 = dalloc(big);
  double *dp = dalloc(pix3 * 64), *da = dalloc(big), *ref = dalloc(big);
  ref_fill(&s, gy, yout, -1.0, 1.0);
  ref_round(dt, gy, yout);
  ref_fill(&s, y2, big, -1.0, 1.0);
  ref_round(dt, y2, big);
  void *dw = dev_upload(dt, w, (size_t)g->cout * g->kpad), *dgy = dev_upload(dt, gy, yout);
  void *dy2 = dev_upload(dt, y2, big);
  void *dcols = dev_poison(pix3 * g->kpad * cnn_dtype_size(dt));
  void *dout = dev_poison(big * cnn_dtype_size(dt));
  OK(cnn_gemm_conv_dgrad(h, dt, dgy, dw, dcols, (int)pix3, g));
  OK(cnn_col2im_maxpool_relu_backward(dt, dcols, g, n, dy2, dout, 0));
  float *out = falloc(big);
  dev_download(dt, dout, big, out);
  ref_conv_dgrad(gy, w, n, g, dp);
  ref_relu(y2, a2, big);
  ref_maxpool_backward(a2, dp, n, 32, 32, 64, da);
  ref_relu_backward(y2, da, ref, big);
  expect_close("col2im + maxpool + relu2 backward", dt, seed, out, ref, big);

  cudaFree(dw), cudaFree(dgy), cudaFree(dy2), cudaFree(dcols), cudaFree(dout);
  free(w), free(gy), free(y2), free(a2), free(dp), free(da), free(ref), free(out);
  cublasDestroy(h);
}

Test(model_layers, maxpool_relu_backward) {
  check_pool_backward(CNN_F32);
  check_pool_backward(CNN_F16);
}

/* ---- pools ---------------------------------------------------------------------- */

static void check_maxpool_forward(cnn_dtype_t dt) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const int n = 3, hh = 32, ww = 32, c = 64;
  const size_t in = (size_t)n * hh * ww * c, outn = in / 4;
  double *x = dalloc(in), *a = dalloc(in), *ref = dalloc(outn);
  ref_fill(&s, x, in, -1.0, 1.0);
  ref_round(dt, x, in);
  void *dx = dev_upload(dt, x, in), *dy = dev_poison(outn * cnn_dtype_size(dt));
  OK(cnn_maxpool2_relu(dt, dx, n, hh, ww, c, dy, 0));
  float *out = falloc(outn);
  dev_download(dt, dy, outn, out);
  ref_relu(x, a, in);
  ref_maxpool_forward(a, n, hh, ww, c, ref);
  expect_close("relu2 + maxpool forward", dt, seed, out, ref, outn);
  cudaFree(dx), cudaFree(dy);
  free(x), free(a), free(ref), free(out);
}

Test(model_layers, maxpool_relu_forward) {
  check_maxpool_forward(CNN_F32);
  check_maxpool_forward(CNN_F16);
}

static void check_avgpool(cnn_dtype_t dt) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const int n = 5, hw = 256, c = 128;
  const size_t in = (size_t)n * hw * c, outn = (size_t)n * c;
  double *x = dalloc(in), *a = dalloc(in), *ref = dalloc(outn), *gy = dalloc(outn), *gx = dalloc(in);
  ref_fill(&s, x, in, -1.0, 1.0);
  ref_round(dt, x, in);
  ref_fill(&s, gy, outn, -1.0, 1.0);
  ref_round(dt, gy, outn);
  void *dx = dev_upload(dt, x, in), *dy = dev_poison(outn * cnn_dtype_size(dt));
  OK(cnn_avgpool_relu(dt, dx, n, hw, c, dy, 0));
  float *out = falloc(in);
  dev_download(dt, dy, outn, out);
  ref_relu(x, a, in);
  ref_avgpool_forward(a, n, hw, c, ref);
  expect_close("relu3 + global average pool forward", dt, seed, out, ref, outn);

  void *dgy = dev_upload(dt, gy, outn), *dgx = dev_poison(in * cnn_dtype_size(dt));
  OK(cnn_avgpool_relu_backward(dt, dx, dgy, n, hw, c, dgx, 0));
  dev_download(dt, dgx, in, out);
  ref_avgpool_backward(gy, n, hw, c, gx);
  ref_relu_backward(x, gx, gx, in);
  expect_close("global average pool + relu3 backward", dt, seed, out, gx, in);
  cudaFree(dx), cudaFree(dy), cudaFree(dgy), cudaFree(dgx);
  free(x), free(a), free(ref), free(gy), free(gx), free(out);
}

Test(model_layers, avgpool_relu_forward_backward) {
  check_avgpool(CNN_F32);
  check_avgpool(CNN_F16);
}

/* ---- linear and cross entropy --------------------------------------------------- */

static void check_linear_ce(cnn_dtype_t dt, int n) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const int in = 128, outc = 10;
  const float scale = 1024.0f;
  cublasHandle_t h = blas_handle();
  double *x = dalloc((size_t)n * in), *w = dalloc((size_t)in * outc), *b = dalloc(outc);
  double *z = dalloc((size_t)n * outc), *dz = dalloc((size_t)n * outc);
  int32_t *labels = malloc((size_t)n * sizeof(int32_t));
  cr_assert_not_null(labels);
  ref_fill(&s, x, (size_t)n * in, -1.0, 1.0);
  ref_round(dt, x, (size_t)n * in);
  ref_fill(&s, w, (size_t)in * outc, -0.5, 0.5);
  ref_round(dt, w, (size_t)in * outc);
  ref_fill(&s, b, outc, -0.5, 0.5);
  ref_round(CNN_F32, b, outc);
  for (int r = 0; r < n; r++) labels[r] = (int32_t)(ref_uniform(&s, 0.0, 10.0));

  void *dxx = dev_upload(dt, x, (size_t)n * in), *dw = dev_upload(dt, w, (size_t)in * outc);
  float *db = dev_upload(CNN_F32, b, outc);
  float *dlogits = dev_poison((size_t)n * outc * sizeof(float));
  int32_t *dlab = NULL;
  DEV(cudaMalloc((void **)&dlab, (size_t)n * sizeof(int32_t)));
  DEV(cudaMemcpy(dlab, labels, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice));
  cnn_state_t st = {.loss = NAN, .scale = scale};
  cnn_state_t *dst = NULL;
  DEV(cudaMalloc((void **)&dst, sizeof(st)));
  DEV(cudaMemcpy(dst, &st, sizeof(st), cudaMemcpyHostToDevice));
  void *ddz = dev_poison((size_t)n * outc * cnn_dtype_size(dt));
  float *ddb = dev_poison(outc * sizeof(float));

  OK(cnn_gemm_linear_forward(h, dt, dxx, dw, dlogits, n, in, outc));
  float *out = falloc((size_t)n * in);
  dev_download(CNN_F32, dlogits, (size_t)n * outc, out);
  ref_linear_forward(x, w, NULL, n, in, outc, z);
  expect_close("linear forward", dt, seed, out, z, (size_t)n * outc);

  OK(cnn_cross_entropy(dt, dlogits, db, dlab, n, outc, dst, true, ddz, ddb, 0));
  /* The reference loss uses the GPU's logits, so it checks the loss kernel alone. */
  for (size_t i = 0; i < (size_t)n * outc; i++) z[i] = (double)out[i] + b[i % outc];
  const double loss = ref_cross_entropy(z, labels, n, outc, dz);
  DEV(cudaMemcpy(&st, dst, sizeof(st), cudaMemcpyDeviceToHost));
  const double lerr = fabs(st.loss - loss) / fabs(loss);
  cr_expect(lerr < tol(CNN_F32), "cross entropy loss %.9g vs %.9g (seed %llu)", st.loss, loss,
            (unsigned long long)seed);
  for (size_t i = 0; i < (size_t)n * outc; i++) dz[i] *= scale;
  dev_download(dt, ddz, (size_t)n * outc, out);
  expect_close("softmax cross entropy gradient (scaled)", dt, seed, out, dz, (size_t)n * outc);
  double dbr[10] = {0};
  for (int r = 0; r < n; r++)
    for (int j = 0; j < outc; j++) dbr[j] += dz[(size_t)r * outc + j];
  dev_download(CNN_F32, ddb, outc, out);
  expect_close("linear bias gradient", CNN_F32, seed, out, dbr, outc);

  /* Backward of the linear layer, from the reference upstream gradient. */
  void *dgz = dev_upload(dt, dz, (size_t)n * outc);
  void *dgx = dev_poison((size_t)n * in * cnn_dtype_size(dt));
  float *dgw = dev_poison((size_t)in * outc * sizeof(float));
  double *gx = dalloc((size_t)n * in), *gw = dalloc((size_t)in * outc);
  double *dzr = dalloc((size_t)n * outc);
  memcpy(dzr, dz, (size_t)n * outc * sizeof(double));
  ref_round(dt, dzr, (size_t)n * outc);
  OK(cnn_gemm_linear_dgrad(h, dt, dgz, dw, dgx, n, in, outc));
  OK(cnn_gemm_linear_wgrad(h, dt, dxx, dgz, dgw, n, in, outc));
  ref_linear_dgrad(dzr, w, n, in, outc, gx);
  ref_linear_wgrad(x, dzr, n, in, outc, gw);
  dev_download(dt, dgx, (size_t)n * in, out);
  expect_close("linear input gradient", dt, seed, out, gx, (size_t)n * in);
  dev_download(CNN_F32, dgw, (size_t)in * outc, out);
  expect_close("linear weight gradient", dt, seed, out, gw, (size_t)in * outc);

  cudaFree(dxx), cudaFree(dw), cudaFree(db), cudaFree(dlogits), cudaFree(dlab), cudaFree(dst);
  cudaFree(ddz), cudaFree(ddb), cudaFree(dgz), cudaFree(dgx), cudaFree(dgw);
  free(x), free(w), free(b), free(z), free(dz), free(labels), free(out), free(gx), free(gw), free(dzr);
  cublasDestroy(h);
}

Test(model_layers, linear_and_cross_entropy) {
  /* 37: a partial warp; 300: more rows than the loss kernel's threads. */
  check_linear_ce(CNN_F32, 37);
  check_linear_ce(CNN_F16, 37);
  check_linear_ce(CNN_F32, 300);
  check_linear_ce(CNN_F16, 300);
}

Test(model_layers, cross_entropy_rejects_bad_label_visibly) {
  const int n = 4, c = 10;
  float logits[40] = {0}, bias[10] = {0};
  int32_t labels[4] = {1, 2, 10, 3}; /* 10 is out of range */
  float *dl = NULL, *db = NULL, *ddz = NULL, *ddb = NULL;
  int32_t *dlab = NULL;
  cnn_state_t st = {.scale = 1.0f}, *dst = NULL;
  DEV(cudaMalloc((void **)&dl, sizeof(logits)));
  DEV(cudaMalloc((void **)&db, sizeof(bias)));
  DEV(cudaMalloc((void **)&dlab, sizeof(labels)));
  DEV(cudaMalloc((void **)&dst, sizeof(st)));
  DEV(cudaMemcpy(dl, logits, sizeof(logits), cudaMemcpyHostToDevice));
  DEV(cudaMemcpy(db, bias, sizeof(bias), cudaMemcpyHostToDevice));
  DEV(cudaMemcpy(dlab, labels, sizeof(labels), cudaMemcpyHostToDevice));
  DEV(cudaMemcpy(dst, &st, sizeof(st), cudaMemcpyHostToDevice));
  ddz = dev_poison(sizeof(logits));
  ddb = dev_poison(sizeof(bias));
  OK(cnn_cross_entropy(CNN_F32, dl, db, dlab, n, c, dst, false, ddz, ddb, 0));
  float dz[40];
  dev_download(CNN_F32, ddz, 40, dz);
  DEV(cudaMemcpy(&st, dst, sizeof(st), cudaMemcpyDeviceToHost));
  cr_expect(isnan(st.loss), "a label outside 0..9 must make the loss NaN, got %g", st.loss);
  for (int j = 0; j < c; j++) cr_expect_eq(dz[2 * c + j], 0.0f, "bad row's gradient must be 0");
  cr_expect_float_eq(dz[0], 0.1f / n, 1e-7, "uniform softmax gradient");
  cudaFree(dl), cudaFree(db), cudaFree(dlab), cudaFree(dst), cudaFree(ddz), cudaFree(ddb);
}

/* ---- TinyOpsBlock ---------------------------------------------------------------- */

static void tiny_run(cnn_dtype_t dt, int mode, const double *x, const double *gy, size_t count,
                     int depth, void *fwd_out, void *bwd_out) {
  /* mode 0 chain, 1 fused, 2 chain captured as a graph and replayed. */
  void *din = dev_upload(dt, x, count);
  void *dgy = dev_upload(dt, gy, count);
  DEV(cudaMemset(fwd_out, 0xFF, count * cnn_dtype_size(dt)));
  DEV(cudaMemset(bwd_out, 0xFF, count * cnn_dtype_size(dt)));
  if (mode < 2) {
    OK(cnn_tiny_forward(dt, din, fwd_out, (int)count, depth, mode == 0, 0));
    OK(cnn_tiny_backward(dt, dgy, bwd_out, (int)count, depth, mode == 0, 0));
  } else {
    cudaStream_t cs;
    DEV(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t gf, gb;
    cudaGraphExec_t ef, eb;
    DEV(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    OK(cnn_tiny_forward(dt, din, fwd_out, (int)count, depth, true, cs));
    DEV(cudaStreamEndCapture(cs, &gf));
    DEV(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    OK(cnn_tiny_backward(dt, dgy, bwd_out, (int)count, depth, true, cs));
    DEV(cudaStreamEndCapture(cs, &gb));
    size_t nodes = 0;
    DEV(cudaGraphGetNodes(gf, NULL, &nodes));
    cr_expect_eq(nodes, (size_t)depth, "forward graph holds %zu nodes, want %d", nodes, depth);
    DEV(cudaGraphInstantiate(&ef, gf, 0));
    DEV(cudaGraphInstantiate(&eb, gb, 0));
    DEV(cudaGraphLaunch(ef, cs));
    DEV(cudaGraphLaunch(eb, cs));
    DEV(cudaStreamSynchronize(cs));
    cudaGraphExecDestroy(ef), cudaGraphExecDestroy(eb), cudaGraphDestroy(gf), cudaGraphDestroy(gb);
    cudaStreamDestroy(cs);
  }
  DEV(cudaDeviceSynchronize());
  cudaFree(din), cudaFree(dgy);
}

static void check_tiny(cnn_dtype_t dt) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const size_t count = 64 * 128;
  const int depth = 256;
  const size_t bytes = count * cnn_dtype_size(dt);
  double *x = dalloc(count), *gy = dalloc(count), *ry = dalloc(count), *rg = dalloc(count);
  ref_fill(&s, x, count, -1.0, 1.0);
  ref_round(dt, x, count);
  ref_fill(&s, gy, count, -1.0, 1.0);
  ref_round(dt, gy, count);
  void *fo[3], *bo[3];
  unsigned char *hf[3], *hb[3];
  for (int mode = 0; mode < 3; mode++) {
    DEV(cudaMalloc(&fo[mode], bytes));
    DEV(cudaMalloc(&bo[mode], bytes));
    tiny_run(dt, mode, x, gy, count, depth, fo[mode], bo[mode]);
    hf[mode] = malloc(bytes), hb[mode] = malloc(bytes);
    DEV(cudaMemcpy(hf[mode], fo[mode], bytes, cudaMemcpyDeviceToHost));
    DEV(cudaMemcpy(hb[mode], bo[mode], bytes, cudaMemcpyDeviceToHost));
  }
  cr_expect(memcmp(hf[0], hf[1], bytes) == 0, "tiny forward: chain and fused differ (%s)", dt_name(dt));
  cr_expect(memcmp(hf[0], hf[2], bytes) == 0, "tiny forward: chain and graph differ (%s)", dt_name(dt));
  cr_expect(memcmp(hb[0], hb[1], bytes) == 0, "tiny backward: chain and fused differ (%s)", dt_name(dt));
  cr_expect(memcmp(hb[0], hb[2], bytes) == 0, "tiny backward: chain and graph differ (%s)", dt_name(dt));
  float *out = falloc(count);
  ref_tiny_forward(x, ry, count, depth);
  ref_tiny_backward(gy, rg, count, depth);
  for (int mode = 0; mode < 3; mode++) {
    static const char *names[3] = {"chain", "fused", "graph"};
    char what[64];
    dev_download(dt, fo[mode], count, out);
    snprintf(what, sizeof(what), "tiny ops forward (%s)", names[mode]);
    expect_close(what, dt, seed, out, ry, count);
    dev_download(dt, bo[mode], count, out);
    snprintf(what, sizeof(what), "tiny ops backward (%s)", names[mode]);
    expect_close(what, dt, seed, out, rg, count);
    cudaFree(fo[mode]), cudaFree(bo[mode]), free(hf[mode]), free(hb[mode]);
  }
  free(x), free(gy), free(ry), free(rg), free(out);
}

Test(model_layers, tiny_ops_chain_fused_graph_agree) {
  check_tiny(CNN_F32);
  check_tiny(CNN_F16);
}

/* ---- optimizer ---------------------------------------------------------------------- */

typedef struct {
  float *p, *g, *m, *v;
  void *ph;
  cnn_state_t *st;
} opt_dev_t;

static opt_dev_t opt_upload(const double *p, size_t count, float scale) {
  opt_dev_t d;
  d.p = dev_upload(CNN_F32, p, count);
  d.g = dev_poison(count * sizeof(float));
  DEV(cudaMalloc((void **)&d.m, count * sizeof(float)));
  DEV(cudaMalloc((void **)&d.v, count * sizeof(float)));
  DEV(cudaMemset(d.m, 0, count * sizeof(float)));
  DEV(cudaMemset(d.v, 0, count * sizeof(float)));
  d.ph = dev_poison(count * 2);
  cnn_state_t st;
  memset(&st, 0, sizeof(st));
  st.scale = scale;
  DEV(cudaMalloc((void **)&d.st, sizeof(st)));
  DEV(cudaMemcpy(d.st, &st, sizeof(st), cudaMemcpyHostToDevice));
  return d;
}

static void opt_free(opt_dev_t *d) {
  cudaFree(d->p), cudaFree(d->g), cudaFree(d->m), cudaFree(d->v), cudaFree(d->ph), cudaFree(d->st);
}

static cnn_state_t opt_state(const opt_dev_t *d) {
  cnn_state_t st;
  DEV(cudaMemcpy(&st, d->st, sizeof(st), cudaMemcpyDeviceToHost));
  return st;
}

Test(model_layers, adamw_matches_torch_formula_with_unscale) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const size_t count = 100003; /* many blocks, and a ragged tail */
  const float scale = 1024.0f;
  const cnn_adamw_t hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f};
  double *p = dalloc(count), *m = dalloc(count), *v = dalloc(count), *g = dalloc(count);
  ref_fill(&s, p, count, -1.0, 1.0);
  ref_round(CNN_F32, p, count);
  opt_dev_t d = opt_upload(p, count, scale);
  const int steps = 5;
  for (int t = 1; t <= steps; t++) {
    ref_fill(&s, g, count, -0.1, 0.1);
    ref_round(CNN_F32, g, count);
    double *gs = dalloc(count);
    for (size_t i = 0; i < count; i++) gs[i] = g[i] * scale; /* exact: scale is 2^10 */
    float *tmp = dev_upload(CNN_F32, gs, count);
    DEV(cudaMemcpy(d.g, tmp, count * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaFree(tmp), free(gs);
    OK(cnn_grad_check(d.g, count, d.st, 0));
    if (t == 1) {
      cnn_state_t st = opt_state(&d);
      double ss = 0.0;
      for (size_t i = 0; i < count; i++) ss += (g[i] * scale) * (g[i] * scale);
      cr_expect(fabs(st.grad_sumsq - ss) / ss < 1e-4, "grad sum of squares %g vs %g (seed %llu)",
                st.grad_sumsq, ss, (unsigned long long)seed);
      cr_expect_eq(st.found_inf, 0);
    }
    OK(cnn_adamw(d.p, d.g, d.m, d.v, d.ph, count, &hp, true, CNN_SCALER_INTERVAL, d.st, 0, 0));
    /* torch.optim.AdamW, in double. */
    const double bc1 = 1.0 - pow(0.9, t), bc2 = 1.0 - pow(0.999, t);
    for (size_t i = 0; i < count; i++) {
      p[i] *= 1.0 - 1e-3 * 1e-2;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      p[i] -= (1e-3 / bc1) * m[i] / (sqrt(v[i]) / sqrt(bc2) + 1e-8);
    }
  }
  float *out = falloc(count);
  dev_download(CNN_F32, d.p, count, out);
  expect_close("AdamW parameters", CNN_F32, seed, out, p, count);
  /* The fp16 copy is exactly the rounded fp32 parameters. */
  _Float16 *ph = malloc(count * sizeof(_Float16));
  DEV(cudaMemcpy(ph, d.ph, count * 2, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) bad += (ph[i] != (_Float16)out[i]);
  cr_expect_eq(bad, 0, "%zu fp16 weights differ from the rounded fp32 ones", bad);
  dev_download(CNN_F32, d.m, count, out);
  expect_close("AdamW first moment", CNN_F32, seed, out, m, count);
  dev_download(CNN_F32, d.v, count, out);
  expect_close("AdamW second moment", CNN_F32, seed, out, v, count);
  cnn_state_t st = opt_state(&d);
  cr_expect_eq(st.step, steps, "optimizer steps %lld", (long long)st.step);
  cr_expect_eq(st.skipped, 0);
  cr_expect_eq(st.scale, scale, "no growth before 2000 clean steps");
  cr_expect_eq(st.growth_tracker, steps);
  cr_expect_eq(st.found_inf, 0);
  cr_expect_eq(st.grad_sumsq, 0.0f, "AdamW clears the norm accumulator");
  cr_expect_eq(st.blocks_done, 0u, "the last block resets its ticket");
  opt_free(&d);
  free(p), free(m), free(v), free(g), free(out), free(ph);
}

Test(model_layers, grad_scaler_skips_step_on_inf_and_halves_scale) {
  const uint64_t seed = ref_fresh_seed();
  uint64_t s = seed;
  const size_t count = 50000;
  const cnn_adamw_t hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f};
  double *p = dalloc(count), *g = dalloc(count);
  ref_fill(&s, p, count, -1.0, 1.0);
  ref_fill(&s, g, count, -1.0, 1.0);
  opt_dev_t d = opt_upload(p, count, CNN_SCALER_INIT);
  for (int bad_kind = 0; bad_kind < 2; bad_kind++) {
    g[(size_t)ref_uniform(&s, 0.0, (double)count)] = bad_kind ? NAN : INFINITY;
    float *tmp = dev_upload(CNN_F32, g, count);
    DEV(cudaMemcpy(d.g, tmp, count * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaFree(tmp);
    float *before = falloc(count), *after = falloc(count);
    dev_download(CNN_F32, d.p, count, before);
    OK(cnn_grad_check(d.g, count, d.st, 0));
    OK(cnn_adamw(d.p, d.g, d.m, d.v, d.ph, count, &hp, true, CNN_SCALER_INTERVAL, d.st, 0, 0));
    dev_download(CNN_F32, d.p, count, after);
    cr_expect(memcmp(before, after, count * sizeof(float)) == 0, "weights changed on a %s gradient",
              bad_kind ? "nan" : "inf");
    cnn_state_t st = opt_state(&d);
    const float want = CNN_SCALER_INIT * (bad_kind ? 0.25f : 0.5f);
    cr_expect_eq(st.scale, want, "scale %g after %d bad steps, want %g", st.scale, bad_kind + 1, want);
    cr_expect_eq(st.skipped, bad_kind + 1);
    cr_expect_eq(st.step, 0, "a skipped step is not an optimizer step");
    cr_expect_eq(st.found_inf, 0, "found_inf is cleared for the next step");
    free(before), free(after);
    for (size_t i = 0; i < count; i++)
      if (!isfinite(g[i])) g[i] = 0.5;
  }
  /* A clean step afterwards updates the weights and counts as step 1. */
  float *tmp = dev_upload(CNN_F32, g, count);
  DEV(cudaMemcpy(d.g, tmp, count * sizeof(float), cudaMemcpyDeviceToDevice));
  cudaFree(tmp);
  float *before = falloc(count), *after = falloc(count);
  dev_download(CNN_F32, d.p, count, before);
  OK(cnn_grad_check(d.g, count, d.st, 0));
  OK(cnn_adamw(d.p, d.g, d.m, d.v, d.ph, count, &hp, true, CNN_SCALER_INTERVAL, d.st, 0, 0));
  dev_download(CNN_F32, d.p, count, after);
  cr_expect(memcmp(before, after, count * sizeof(float)) != 0, "a clean step must update the weights");
  cnn_state_t st = opt_state(&d);
  cr_expect_eq(st.step, 1);
  cr_expect_eq(st.growth_tracker, 1);
  opt_free(&d);
  free(p), free(g), free(before), free(after);
}

Test(model_layers, grad_scaler_grows_after_2000_clean_steps) {
  const size_t count = 4096;
  const cnn_adamw_t hp = {.lr = 1e-6f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
  double *p = dalloc(count);
  uint64_t s = ref_fresh_seed();
  ref_fill(&s, p, count, -1.0, 1.0);
  opt_dev_t d = opt_upload(p, count, 1024.0f);
  float *tmp = dev_upload(CNN_F32, p, count); /* any finite gradient */
  DEV(cudaMemcpy(d.g, tmp, count * sizeof(float), cudaMemcpyDeviceToDevice));
  cudaFree(tmp);
  for (int i = 0; i < CNN_SCALER_INTERVAL - 1; i++) {
    OK(cnn_grad_check(d.g, count, d.st, 0));
    OK(cnn_adamw(d.p, d.g, d.m, d.v, NULL, count, &hp, true, CNN_SCALER_INTERVAL, d.st, 0, 0));
  }
  cnn_state_t st = opt_state(&d);
  cr_expect_eq(st.scale, 1024.0f, "grew early: %g after %d steps", st.scale, CNN_SCALER_INTERVAL - 1);
  cr_expect_eq(st.growth_tracker, CNN_SCALER_INTERVAL - 1);
  OK(cnn_grad_check(d.g, count, d.st, 0));
  OK(cnn_adamw(d.p, d.g, d.m, d.v, NULL, count, &hp, true, CNN_SCALER_INTERVAL, d.st, 0, 0));
  st = opt_state(&d);
  cr_expect_eq(st.scale, 2048.0f, "scale %g after %d clean steps, want 2048", st.scale, CNN_SCALER_INTERVAL);
  cr_expect_eq(st.growth_tracker, 0);
  cr_expect_eq(st.step, CNN_SCALER_INTERVAL);
  opt_free(&d);
  free(p);
}

Test(model_layers, launchers_reject_bad_shapes) {
  cnn_conv_geom_t g = {.cin = 3, .cout = 32, .h = 32, .w = 32, .k = 27, .kpad = 32};
  int dummy = 0;
  /* cin 3 cannot be read in 16-byte vectors from NHWC. */
  cr_expect_eq(cnn_im2col_nhwc(CNN_F16, &dummy, 1, &g, false, &dummy, 0), PD_EINVAL);
  g.kpad = 30;
  cr_expect_eq(cnn_im2col_nchw(CNN_F16, (const float *)&dummy, 1, &g, &dummy, 0), PD_EINVAL);
  cr_expect_eq(cnn_maxpool2_relu(CNN_F32, &dummy, 1, 3, 4, 8, &dummy, 0), PD_EINVAL);
  cr_expect_eq(cnn_cross_entropy(CNN_F32, (const float *)&dummy, (const float *)&dummy,
                                 (const int32_t *)&dummy, 4, 33, NULL, false, &dummy, (float *)&dummy, 0),
               PD_EINVAL);
  cr_expect_eq(cnn_tiny_forward(CNN_F32, &dummy, &dummy, 16, 0, true, 0), PD_EINVAL);
  cr_expect_eq(cnn_adamw(NULL, NULL, NULL, NULL, NULL, 0, NULL, false, 1, NULL, 0, 0), PD_EINVAL);
}
