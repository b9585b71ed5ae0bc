/* model_ref.c: CPU double reference of the SimpleCNN's layers and device helpers for
 * the model acceptance tests (see model_ref.h). */
#include "model_ref.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd/pd_cnn.h"

/* ---- random numbers and errors ---------------------------------------------------- */

static uint64_t ref_mix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t ref_fresh_seed(void) {
  static uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (++counter << 40);
  return ref_mix(&s);
}

double ref_uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(ref_mix(s) >> 11) * (1.0 / 9007199254740992.0);
}

void ref_fill(uint64_t *s, double *x, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++) x[i] = ref_uniform(s, lo, hi);
}

void ref_round(cnn_dtype_t dt, double *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = dt == CNN_F16 ? (double)(_Float16)(float)x[i] : (double)(float)x[i];
}

double ref_rel_err(const float *out, const double *ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(out[i])) return INFINITY;
    const double d = (double)out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* ---- device helpers ---------------------------------------------------------------- */

void dev_check(cudaError_t e, const char *what, const char *file, int line) {
  if (e != cudaSuccess) cr_assert_fail("%s:%d: %s: %s", file, line, what, cudaGetErrorString(e));
}

void *dev_upload(cnn_dtype_t dt, const double *src, size_t n) {
  const size_t es = cnn_dtype_size(dt);
  void *host = malloc(n * es);
  cr_assert_not_null(host);
  for (size_t i = 0; i < n; i++) {
    if (dt == CNN_F16)
      ((_Float16 *)host)[i] = (_Float16)(float)src[i];
    else
      ((float *)host)[i] = (float)src[i];
  }
  void *d = NULL;
  DEV(cudaMalloc(&d, n * es));
  DEV(cudaMemcpy(d, host, n * es, cudaMemcpyHostToDevice));
  free(host);
  return d;
}

void *dev_poison(size_t bytes) {
  void *d = NULL;
  DEV(cudaMalloc(&d, bytes));
  DEV(cudaMemset(d, 0xFF, bytes));
  return d;
}

void dev_download(cnn_dtype_t dt, const void *src, size_t n, float *dst) {
  DEV(cudaDeviceSynchronize());
  if (dt == CNN_F32) {
    DEV(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
    return;
  }
  _Float16 *h = malloc(n * sizeof(_Float16));
  cr_assert_not_null(h);
  DEV(cudaMemcpy(h, src, n * sizeof(_Float16), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) dst[i] = (float)h[i];
  free(h);
}

/* ---- layers ------------------------------------------------------------------------- */

void ref_conv_forward(const double *x, int n, const cnn_conv_geom_t *g, const double *w, double *y) {
  const int H = g->h, W = g->w, C = g->cin, O = g->cout;
  for (int b = 0; b < n; b++)
    for (int h = 0; h < H; h++)
      for (int ww = 0; ww < W; ww++)
        for (int o = 0; o < O; o++) {
          const double *wo = w + (size_t)o * g->kpad;
          double acc = wo[g->k]; /* bias */
          for (int dh = -1; dh <= 1; dh++)
            for (int dw = -1; dw <= 1; dw++) {
              const int hh = h + dh, xw = ww + dw;
              if (hh < 0 || hh >= H || xw < 0 || xw >= W) continue;
              const int tap = (dh + 1) * 3 + (dw + 1);
              const double *xp = x + (((size_t)b * H + hh) * W + xw) * C;
              for (int c = 0; c < C; c++) acc += xp[c] * wo[tap * C + c];
            }
          y[(((size_t)b * H + h) * W + ww) * O + o] = acc;
        }
}

void ref_conv_wgrad(const double *x, const double *dy, int n, const cnn_conv_geom_t *g, double *dw) {
  const int H = g->h, W = g->w, C = g->cin, O = g->cout;
  memset(dw, 0, (size_t)O * g->kpad * sizeof(double));
  for (int b = 0; b < n; b++)
    for (int h = 0; h < H; h++)
      for (int ww = 0; ww < W; ww++)
        for (int o = 0; o < O; o++) {
          const double d = dy[(((size_t)b * H + h) * W + ww) * O + o];
          double *wo = dw + (size_t)o * g->kpad;
          wo[g->k] += d;
          for (int dh = -1; dh <= 1; dh++)
            for (int dwi = -1; dwi <= 1; dwi++) {
              const int hh = h + dh, xw = ww + dwi;
              if (hh < 0 || hh >= H || xw < 0 || xw >= W) continue;
              const int tap = (dh + 1) * 3 + (dwi + 1);
              const double *xp = x + (((size_t)b * H + hh) * W + xw) * C;
              for (int c = 0; c < C; c++) wo[tap * C + c] += d * xp[c];
            }
        }
}

void ref_conv_dgrad(const double *dy, const double *w, int n, const cnn_conv_geom_t *g, double *dx) {
  const int H = g->h, W = g->w, C = g->cin, O = g->cout;
  memset(dx, 0, (size_t)n * H * W * C * sizeof(double));
  for (int b = 0; b < n; b++)
    for (int h = 0; h < H; h++)
      for (int ww = 0; ww < W; ww++)
        for (int o = 0; o < O; o++) {
          const double d = dy[(((size_t)b * H + h) * W + ww) * O + o];
          const double *wo = w + (size_t)o * g->kpad;
          for (int dh = -1; dh <= 1; dh++)
            for (int dwi = -1; dwi <= 1; dwi++) {
              const int hh = h + dh, xw = ww + dwi;
              if (hh < 0 || hh >= H || xw < 0 || xw >= W) continue;
              const int tap = (dh + 1) * 3 + (dwi + 1);
              double *xp = dx + (((size_t)b * H + hh) * W + xw) * C;
              for (int c = 0; c < C; c++) xp[c] += d * wo[tap * C + c];
            }
        }
}

void ref_relu(const double *x, double *y, size_t count) {
  for (size_t i = 0; i < count; i++) y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void ref_relu_backward(const double *x, const double *dy, double *dx, size_t count) {
  for (size_t i = 0; i < count; i++) dx[i] = x[i] > 0.0 ? dy[i] : 0.0;
}

void ref_maxpool_forward(const double *x, int n, int h, int w, int c, double *y) {
  for (int b = 0; b < n; b++)
    for (int oh = 0; oh < h / 2; oh++)
      for (int ow = 0; ow < w / 2; ow++)
        for (int ch = 0; ch < c; ch++) {
          double best = -INFINITY;
          for (int j = 0; j < 4; j++) {
            const double v = x[(((size_t)b * h + 2 * oh + j / 2) * w + 2 * ow + j % 2) * c + ch];
            if (v > best) best = v;
          }
          y[(((size_t)b * (h / 2) + oh) * (w / 2) + ow) * c + ch] = best;
        }
}

void ref_maxpool_backward(const double *x, const double *dy, int n, int h, int w, int c, double *dx) {
  memset(dx, 0, (size_t)n * h * w * c * sizeof(double));
  for (int b = 0; b < n; b++)
    for (int oh = 0; oh < h / 2; oh++)
      for (int ow = 0; ow < w / 2; ow++)
        for (int ch = 0; ch < c; ch++) {
          double best = -INFINITY;
          size_t arg = 0;
          for (int j = 0; j < 4; j++) {
            const size_t at = (((size_t)b * h + 2 * oh + j / 2) * w + 2 * ow + j % 2) * c + ch;
            if (x[at] > best) {
              best = x[at];
              arg = at;
            }
          }
          dx[arg] += dy[(((size_t)b * (h / 2) + oh) * (w / 2) + ow) * c + ch];
        }
}

void ref_avgpool_forward(const double *x, int n, int hw, int c, double *y) {
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++) {
      double s = 0.0;
      for (int p = 0; p < hw; p++) s += x[((size_t)b * hw + p) * c + ch];
      y[(size_t)b * c + ch] = s / hw;
    }
}

void ref_avgpool_backward(const double *dy, int n, int hw, int c, double *dx) {
  for (int b = 0; b < n; b++)
    for (int p = 0; p < hw; p++)
      for (int ch = 0; ch < c; ch++) dx[((size_t)b * hw + p) * c + ch] = dy[(size_t)b * c + ch] / hw;
}

void ref_linear_forward(const double *x, const double *w, const double *b, int n, int in, int out,
                        double *y) {
  for (int r = 0; r < n; r++)
    for (int o = 0; o < out; o++) {
      double s = b ? b[o] : 0.0;
      for (int i = 0; i < in; i++) s += x[(size_t)r * in + i] * w[(size_t)o * in + i];
      y[(size_t)r * out + o] = s;
    }
}

void ref_linear_dgrad(const double *dy, const double *w, int n, int in, int out, double *dx) {
  for (int r = 0; r < n; r++)
    for (int i = 0; i < in; i++) {
      double s = 0.0;
      for (int o = 0; o < out; o++) s += dy[(size_t)r * out + o] * w[(size_t)o * in + i];
      dx[(size_t)r * in + i] = s;
    }
}

void ref_linear_wgrad(const double *x, const double *dy, int n, int in, int out, double *dw) {
  for (int o = 0; o < out; o++)
    for (int i = 0; i < in; i++) {
      double s = 0.0;
      for (int r = 0; r < n; r++) s += dy[(size_t)r * out + o] * x[(size_t)r * in + i];
      dw[(size_t)o * in + i] = s;
    }
}

double ref_cross_entropy(const double *z, const int32_t *labels, int n, int classes, double *dz) {
  double loss = 0.0;
  for (int r = 0; r < n; r++) {
    const double *zr = z + (size_t)r * classes;
    double mx = zr[0];
    for (int j = 1; j < classes; j++) mx = zr[j] > mx ? zr[j] : mx;
    double sum = 0.0;
    for (int j = 0; j < classes; j++) sum += exp(zr[j] - mx);
    loss += mx + log(sum) - zr[labels[r]];
    for (int j = 0; j < classes; j++)
      dz[(size_t)r * classes + j] = (exp(zr[j] - mx) / sum - (j == labels[r] ? 1.0 : 0.0)) / n;
  }
  return loss / n;
}

void ref_tiny_forward(const double *x, double *y, size_t count, int depth) {
  for (size_t i = 0; i < count; i++) {
    double v = x[i];
    for (int d = 0; d < depth; d++) {
      float a, b;
      cnn_tiny_coef(d, &a, &b);
      v = v * a + b;
    }
    y[i] = v;
  }
}

void ref_tiny_backward(const double *dy, double *dx, size_t count, int depth) {
  for (size_t i = 0; i < count; i++) {
    double v = dy[i];
    for (int d = depth - 1; d >= 0; d--) {
      float a, b;
      cnn_tiny_coef(d, &a, &b);
      v *= a;
    }
    dx[i] = v;
  }
}

/* ---- the whole model -------------------------------------------------------------- */

static double *ref_alloc(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  cr_assert_not_null(p, "out of host memory for %zu doubles", n);
  return p;
}

/* Decision-following pieces of the model reference: `d` holds the values whose signs
 * and maxima decide, `v` the values that flow. */
static void dec_relu(const double *d, const double *v, double *y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = d[i] > 0.0 ? v[i] : 0.0;
}

/* First maximum of each 2x2 window of d (torch's rule), then the ReLU on it. Forward:
 * y = v at that position when d > 0 there. Backward (dy != NULL): dx gets dy there. */
static void dec_maxpool(const double *d, const double *v, int n, int h, int w, int c, double *y,
                        const double *dy, double *dx) {
  if (dx) memset(dx, 0, (size_t)n * h * w * c * sizeof(double));
  for (int b = 0; b < n; b++)
    for (int oh = 0; oh < h / 2; oh++)
      for (int ow = 0; ow < w / 2; ow++)
        for (int ch = 0; ch < c; ch++) {
          double best = -INFINITY;
          size_t arg = 0;
          for (int j = 0; j < 4; j++) {
            const size_t at = (((size_t)b * h + 2 * oh + j / 2) * w + 2 * ow + j % 2) * c + ch;
            if (d[at] > best) best = d[at], arg = at;
          }
          const size_t o = (((size_t)b * (h / 2) + oh) * (w / 2) + ow) * c + ch;
          if (y) y[o] = d[arg] > 0.0 ? v[arg] : 0.0;
          if (dx && d[arg] > 0.0) dx[arg] += dy[o];
        }
}

double ref_model_grads(const cnn_plan_t *plan, const float *params, const float *images,
                       const int32_t *labels, int tiny_depth, const float *const dec[3],
                       double *grads) {
  const int n = plan->batch;
  const cnn_conv_geom_t *g1 = &plan->conv[0], *g2 = &plan->conv[1], *g3 = &plan->conv[2];
  const size_t np = plan->param_count;
  double *w = ref_alloc(np);
  for (size_t i = 0; i < np; i++) w[i] = params[i];
  const double *w1 = w + plan->param[CNN_P_CONV1].offset, *w2 = w + plan->param[CNN_P_CONV2].offset,
               *w3 = w + plan->param[CNN_P_CONV3].offset, *wl = w + plan->param[CNN_P_LIN_W].offset,
               *bl = w + plan->param[CNN_P_LIN_B].offset;
  const size_t s1 = (size_t)n * 32 * 32, s3 = (size_t)n * 16 * 16;
  const size_t sz[3] = {s1 * 32, s1 * 64, s3 * 128};
  /* NCHW images to NHWC. */
  double *x0 = ref_alloc(s1 * 3);
  for (int b = 0; b < n; b++)
    for (int c = 0; c < 3; c++)
      for (int p = 0; p < 1024; p++) x0[((size_t)b * 1024 + p) * 3 + c] = images[((size_t)b * 3 + c) * 1024 + p];
  double *y1 = ref_alloc(sz[0]), *a1 = ref_alloc(sz[0]);
  double *y2 = ref_alloc(sz[1]), *p2 = ref_alloc(s3 * 64);
  double *y3 = ref_alloc(sz[2]), *a3 = ref_alloc(sz[2]);
  double *f = ref_alloc((size_t)n * 128), *t = ref_alloc((size_t)n * 128), *z = ref_alloc((size_t)n * 10);
  double *dd[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++) {
    if (dec == NULL || dec[i] == NULL) continue;
    dd[i] = ref_alloc(sz[i]);
    for (size_t j = 0; j < sz[i]; j++) dd[i][j] = dec[i][j];
  }
  ref_conv_forward(x0, n, g1, w1, y1);
  const double *d1 = dd[0] ? dd[0] : y1;
  dec_relu(d1, y1, a1, sz[0]);
  ref_conv_forward(a1, n, g2, w2, y2);
  const double *d2 = dd[1] ? dd[1] : y2;
  dec_maxpool(d2, y2, n, 32, 32, 64, p2, NULL, NULL);
  ref_conv_forward(p2, n, g3, w3, y3);
  const double *d3 = dd[2] ? dd[2] : y3;
  dec_relu(d3, y3, a3, sz[2]);
  ref_avgpool_forward(a3, n, 256, 128, f);
  const double *lin_in = f;
  if (tiny_depth > 0) {
    ref_tiny_forward(f, t, (size_t)n * 128, tiny_depth);
    lin_in = t;
  }
  ref_linear_forward(lin_in, wl, bl, n, 128, 10, z);
  double *dz = ref_alloc((size_t)n * 10);
  const double loss = ref_cross_entropy(z, labels, n, 10, dz);

  memset(grads, 0, np * sizeof(double));
  double *glw = grads + plan->param[CNN_P_LIN_W].offset, *glb = grads + plan->param[CNN_P_LIN_B].offset;
  ref_linear_wgrad(lin_in, dz, n, 128, 10, glw);
  for (int o = 0; o < 10; o++) {
    double s = 0.0;
    for (int r = 0; r < n; r++) s += dz[(size_t)r * 10 + o];
    glb[o] = s;
  }
  double *dt = ref_alloc((size_t)n * 128), *df = ref_alloc((size_t)n * 128);
  ref_linear_dgrad(dz, wl, n, 128, 10, dt);
  if (tiny_depth > 0)
    ref_tiny_backward(dt, df, (size_t)n * 128, tiny_depth);
  else
    memcpy(df, dt, (size_t)n * 128 * sizeof(double));
  double *da3 = ref_alloc(sz[2]), *dy3 = ref_alloc(sz[2]);
  ref_avgpool_backward(df, n, 256, 128, da3);
  ref_relu_backward(d3, da3, dy3, sz[2]);
  ref_conv_wgrad(p2, dy3, n, g3, grads + plan->param[CNN_P_CONV3].offset);
  double *dp2 = ref_alloc(s3 * 64), *dy2 = ref_alloc(sz[1]);
  ref_conv_dgrad(dy3, w3, n, g3, dp2);
  dec_maxpool(d2, y2, n, 32, 32, 64, NULL, dp2, dy2);
  ref_conv_wgrad(a1, dy2, n, g2, grads + plan->param[CNN_P_CONV2].offset);
  double *da1 = ref_alloc(sz[0]), *dy1 = ref_alloc(sz[0]);
  ref_conv_dgrad(dy2, w2, n, g2, da1);
  ref_relu_backward(d1, da1, dy1, sz[0]);
  ref_conv_wgrad(x0, dy1, n, g1, grads + plan->param[CNN_P_CONV1].offset);

  double *bufs[] = {w, x0, y1, a1, y2, p2, y3, a3, f, t, z, dz, dt, df, da3, dy3, dp2, dy2, da1, dy1,
                    dd[0], dd[1], dd[2]};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
  return loss;
}
