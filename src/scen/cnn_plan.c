/* cnn_plan.c: SimpleCNN geometry, flat parameter layout, per-step buffer sizes and the
 * deterministic initialization (plain C; see cnn_plan.h for the layouts). */
#include "cnn_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pd/pd_cnn.h"
#include "pd/pd_common.h"

static const char *const cnn_buf_names[CNN_B_COUNT] = {
#define CNN_BUF_NAME_GEN(id, name, persistent) name,
    CNN_BUF_MAP(CNN_BUF_NAME_GEN)
#undef CNN_BUF_NAME_GEN
};

static const int cnn_buf_persist[CNN_B_COUNT] = {
#define CNN_BUF_PERSIST_GEN(id, name, persistent) persistent,
    CNN_BUF_MAP(CNN_BUF_PERSIST_GEN)
#undef CNN_BUF_PERSIST_GEN
};

static const char *const cnn_param_names[CNN_P_COUNT] = {
#define CNN_PARAM_NAME_GEN(id, name) name,
    CNN_PARAM_MAP(CNN_PARAM_NAME_GEN)
#undef CNN_PARAM_NAME_GEN
};

const char *cnn_buf_name(cnn_buf_id_t id) {
  return (unsigned)id < CNN_B_COUNT ? cnn_buf_names[id] : "?";
}

int cnn_buf_persistent(cnn_buf_id_t id) {
  return (unsigned)id < CNN_B_COUNT ? cnn_buf_persist[id] : 0;
}

const char *cnn_param_name(cnn_param_id_t id) {
  return (unsigned)id < CNN_P_COUNT ? cnn_param_names[id] : "?";
}

static void conv_geom(cnn_conv_geom_t *g, int cin, int cout, int h, int w) {
  g->cin = cin;
  g->cout = cout;
  g->h = h;
  g->w = w;
  g->k = 9 * cin;
  g->kpad = (g->k + 1 + 7) / 8 * 8;
}

int cnn_plan_init(cnn_plan_t *plan, int batch, bool amp, bool tiny) {
  if (plan == NULL || batch < 1 || batch > 65536) return PD_EINVAL;
  memset(plan, 0, sizeof(*plan));
  plan->batch = batch;
  plan->act = amp ? CNN_F16 : CNN_F32;
  conv_geom(&plan->conv[0], PD_CNN_IMAGE_C, 32, PD_CNN_IMAGE_H, PD_CNN_IMAGE_W);
  conv_geom(&plan->conv[1], 32, 64, PD_CNN_IMAGE_H, PD_CNN_IMAGE_W);
  conv_geom(&plan->conv[2], 64, CNN_FEATURES, PD_CNN_IMAGE_H / 2, PD_CNN_IMAGE_W / 2);

  /* Parameter blocks back to back; every block size is a multiple of 8 except the last
   * (the linear bias), so every offset stays 16-byte aligned for fp16 and no gap is
   * left that no kernel would write. */
  size_t off = 0;
  for (int i = 0; i < 3; i++) {
    cnn_param_t *p = &plan->param[CNN_P_CONV1 + i];
    p->offset = off;
    p->rows = plan->conv[i].cout;
    p->cols = plan->conv[i].kpad;
    p->count = (size_t)p->rows * (size_t)p->cols;
    p->fan_in = plan->conv[i].k;
    off += p->count;
  }
  cnn_param_t *lw = &plan->param[CNN_P_LIN_W];
  lw->offset = off;
  lw->rows = PD_CNN_CLASSES;
  lw->cols = CNN_FEATURES;
  lw->count = (size_t)lw->rows * (size_t)lw->cols;
  lw->fan_in = CNN_FEATURES;
  off += lw->count;
  cnn_param_t *lb = &plan->param[CNN_P_LIN_B];
  lb->offset = off;
  lb->rows = 1;
  lb->cols = PD_CNN_CLASSES;
  lb->count = PD_CNN_CLASSES;
  lb->fan_in = CNN_FEATURES;
  off += lb->count;
  plan->param_count = off;

  const size_t es = cnn_dtype_size(plan->act);
  const size_t n = (size_t)batch;
  const cnn_conv_geom_t *c1 = &plan->conv[0], *c2 = &plan->conv[1], *c3 = &plan->conv[2];
  const size_t p1 = n * (size_t)(c1->h * c1->w); /* pixels at 32x32 */
  const size_t p3 = n * (size_t)(c3->h * c3->w); /* pixels at 16x16 */
  size_t *b = plan->buf_bytes;
  b[CNN_B_COLS1] = p1 * (size_t)c1->kpad * es;
  b[CNN_B_Y1] = p1 * (size_t)c1->cout * es;
  b[CNN_B_COLS2] = p1 * (size_t)c2->kpad * es;
  b[CNN_B_Y2] = p1 * (size_t)c2->cout * es;
  b[CNN_B_P2] = p3 * (size_t)c3->cin * es;
  b[CNN_B_COLS3] = p3 * (size_t)c3->kpad * es;
  b[CNN_B_Y3] = p3 * (size_t)c3->cout * es;
  b[CNN_B_LOGITS] = n * PD_CNN_CLASSES * sizeof(float);
  b[CNN_B_DLOGITS] = n * PD_CNN_CLASSES * es;
  b[CNN_B_DY3] = b[CNN_B_Y3];
  b[CNN_B_DCOLS3] = b[CNN_B_COLS3];
  b[CNN_B_DY2] = b[CNN_B_Y2];
  b[CNN_B_DCOLS2] = b[CNN_B_COLS2];
  b[CNN_B_DY1] = b[CNN_B_Y1];
  b[CNN_B_GRADS] = plan->param_count * sizeof(float);
  b[CNN_B_FEATS] = n * CNN_FEATURES * es;
  b[CNN_B_DFEATS] = n * CNN_FEATURES * es;
  b[CNN_B_TINY] = tiny ? n * CNN_FEATURES * es : 0;
  b[CNN_B_DTINY] = tiny ? n * CNN_FEATURES * es : 0;
  return 0;
}

/* splitmix64: a tiny, well-mixed generator; one stream per parameter block. */
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-bound, bound) from the top 24 bits, so every value is exact in float. */
static float uniform_sym(uint64_t *s, float bound) {
  float u = (float)(splitmix64(s) >> 40) * (1.0f / 16777216.0f);
  return (2.0f * u - 1.0f) * bound;
}

void cnn_params_init(const cnn_plan_t *plan, uint64_t seed, float *out) {
  memset(out, 0, plan->param_count * sizeof(float));
  for (int i = 0; i < 3; i++) {
    const cnn_param_t *p = &plan->param[CNN_P_CONV1 + i];
    const cnn_conv_geom_t *g = &plan->conv[i];
    uint64_t s = seed ^ (0xC0FFEEull * (uint64_t)(i + 1));
    const float bound = 1.0f / sqrtf((float)p->fan_in);
    for (int co = 0; co < g->cout; co++) {
      float *row = out + p->offset + (size_t)co * (size_t)g->kpad;
      for (int k = 0; k <= g->k; k++) row[k] = uniform_sym(&s, bound); /* k == K: bias */
    }
  }
  const cnn_param_t *lw = &plan->param[CNN_P_LIN_W], *lb = &plan->param[CNN_P_LIN_B];
  uint64_t s = seed ^ (0xC0FFEEull * 4u);
  const float bound = 1.0f / sqrtf((float)lw->fan_in);
  for (size_t i = 0; i < lw->count; i++) out[lw->offset + i] = uniform_sym(&s, bound);
  for (size_t i = 0; i < lb->count; i++) out[lb->offset + i] = uniform_sym(&s, bound);
}

void cnn_shape_text(char *buf, size_t len, const int *dims, int ndims) {
  if (len == 0) return;
  size_t used = 0;
  int w = snprintf(buf, len, "[[");
  used = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < ndims && used < len; i++) {
    w = snprintf(buf + used, len - used, i ? ", %d" : "%d", dims[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used < len) snprintf(buf + used, len - used, "]]");
}
