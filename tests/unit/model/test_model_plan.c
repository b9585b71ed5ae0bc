/* test_model_plan.c: the SimpleCNN's host-side pieces, without a GPU: geometry and the
 * flat parameter layout, per-step buffer sizes, the deterministic initialization,
 * GradScaler's update rule (the same function the AdamW kernel runs), the TinyOpsBlock
 * constants, and config validation (rejected before any CUDA call). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnn_plan.h"
#include "pd/pd_cnn.h"

Test(model_plan, geometry_and_layout) {
  cnn_plan_t p;
  cr_assert_eq(cnn_plan_init(&p, 64, false, false), 0);
  const int cin[3] = {3, 32, 64}, cout[3] = {32, 64, 128}, hw[3] = {32, 32, 16}, kpad[3] = {32, 296, 584};
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(p.conv[i].cin, cin[i]);
    cr_expect_eq(p.conv[i].cout, cout[i]);
    cr_expect_eq(p.conv[i].h, hw[i]);
    cr_expect_eq(p.conv[i].w, hw[i]);
    cr_expect_eq(p.conv[i].k, 9 * cin[i]);
    cr_expect_eq(p.conv[i].kpad, kpad[i], "conv%d kpad %d", i + 1, p.conv[i].kpad);
    cr_expect_eq(p.conv[i].kpad % 8, 0);
  }
  /* Blocks back to back, 8-element aligned, nothing left unwritten between them. */
  size_t off = 0;
  for (int id = 0; id < CNN_P_COUNT; id++) {
    cr_expect_eq(p.param[id].offset, off, "%s at %zu, want %zu", cnn_param_name((cnn_param_id_t)id),
                 p.param[id].offset, off);
    cr_expect_eq(p.param[id].offset % 8, 0u);
    cr_expect_eq(p.param[id].count, (size_t)p.param[id].rows * (size_t)p.param[id].cols);
    off += p.param[id].count;
  }
  cr_expect_eq(p.param_count, off);
  /* Weights + biases: 32*28 + 64*289 + 128*577 + 10*128 + 10 real values. */
  cr_expect_eq(p.param_count, 32u * 32 + 64u * 296 + 128u * 584 + 1280 + 10);
  cr_expect_eq(p.param[CNN_P_LIN_W].fan_in, 128);
  cr_expect_eq(p.param[CNN_P_CONV2].fan_in, 288);
}

Test(model_plan, buffer_sizes_follow_batch_and_dtype) {
  cnn_plan_t a, b, t;
  cr_assert_eq(cnn_plan_init(&a, 64, false, false), 0);
  cr_assert_eq(cnn_plan_init(&b, 64, true, false), 0);
  cr_assert_eq(cnn_plan_init(&t, 128, true, true), 0);
  cr_expect_eq(a.buf_bytes[CNN_B_COLS2], (size_t)64 * 1024 * 296 * 4);
  cr_expect_eq(b.buf_bytes[CNN_B_COLS2], (size_t)64 * 1024 * 296 * 2);
  cr_expect_eq(b.buf_bytes[CNN_B_Y3], (size_t)64 * 256 * 128 * 2);
  cr_expect_eq(b.buf_bytes[CNN_B_LOGITS], (size_t)64 * 10 * 4, "logits stay fp32 under AMP");
  cr_expect_eq(b.buf_bytes[CNN_B_GRADS], b.param_count * 4, "gradients stay fp32 under AMP");
  cr_expect_eq(b.buf_bytes[CNN_B_TINY], 0u, "no TinyOpsBlock buffers when it is off");
  cr_expect_eq(t.buf_bytes[CNN_B_TINY], (size_t)128 * 128 * 2);
  cr_expect_eq(t.buf_bytes[CNN_B_P2], (size_t)128 * 256 * 64 * 2);
  int temps = 0;
  for (int i = 0; i < CNN_B_COUNT; i++) {
    cr_expect_neq(strcmp(cnn_buf_name((cnn_buf_id_t)i), "?"), 0);
    temps += !cnn_buf_persistent((cnn_buf_id_t)i);
  }
  cr_expect_eq(temps, CNN_TEMP_MAX);
}

Test(model_plan, rejects_bad_batch) {
  cnn_plan_t p;
  cr_expect_eq(cnn_plan_init(&p, 0, false, false), PD_EINVAL);
  cr_expect_eq(cnn_plan_init(&p, -3, false, false), PD_EINVAL);
  cr_expect_eq(cnn_plan_init(&p, 65537, false, false), PD_EINVAL);
  cr_expect_eq(cnn_plan_init(NULL, 4, false, false), PD_EINVAL);
}

Test(model_plan, init_is_deterministic_bounded_and_padded) {
  cnn_plan_t p;
  cr_assert_eq(cnn_plan_init(&p, 8, false, false), 0);
  float *a = malloc(p.param_count * sizeof(float)), *b = malloc(p.param_count * sizeof(float));
  float *c = malloc(p.param_count * sizeof(float));
  cr_assert(a && b && c);
  cnn_params_init(&p, 42, a);
  cnn_params_init(&p, 42, b);
  cnn_params_init(&p, 43, c);
  cr_expect(memcmp(a, b, p.param_count * sizeof(float)) == 0, "same seed, same weights");
  cr_expect(memcmp(a, c, p.param_count * sizeof(float)) != 0, "another seed, other weights");
  for (int i = 0; i < 3; i++) {
    const cnn_param_t *pp = &p.param[CNN_P_CONV1 + i];
    const cnn_conv_geom_t *g = &p.conv[i];
    const float bound = 1.0f / sqrtf((float)g->k);
    double sum = 0.0, sq = 0.0;
    int n = 0;
    for (int o = 0; o < g->cout; o++) {
      const float *row = a + pp->offset + (size_t)o * g->kpad;
      for (int k = 0; k <= g->k; k++) {
        cr_assert(fabsf(row[k]) <= bound, "conv%d [%d][%d] = %g outside +-%g", i + 1, o, k, row[k], bound);
        sum += row[k], sq += (double)row[k] * row[k], n++;
      }
      for (int k = g->k + 1; k < g->kpad; k++) cr_assert_eq(row[k], 0.0f, "padding must be zero");
    }
    /* U(-b, b): mean ~0, variance b^2/3. */
    const double mean = sum / n, var = sq / n - mean * mean;
    cr_expect(fabs(mean) < 0.1 * bound, "conv%d mean %g", i + 1, mean);
    cr_expect(fabs(var / (bound * bound / 3.0) - 1.0) < 0.15, "conv%d variance ratio %g", i + 1,
              var / (bound * bound / 3.0));
  }
  const float lb = 1.0f / sqrtf(128.0f);
  for (size_t i = 0; i < p.param[CNN_P_LIN_W].count + p.param[CNN_P_LIN_B].count; i++)
    cr_assert(fabsf(a[p.param[CNN_P_LIN_W].offset + i]) <= lb);
  free(a), free(b), free(c);
}

Test(model_plan, grad_scaler_rule) {
  float scale = CNN_SCALER_INIT;
  int32_t tracker = 0;
  for (int i = 0; i < CNN_SCALER_INTERVAL - 1; i++) cnn_scaler_update(&scale, &tracker, 0, CNN_SCALER_INTERVAL);
  cr_expect_eq(scale, CNN_SCALER_INIT);
  cr_expect_eq(tracker, CNN_SCALER_INTERVAL - 1);
  cnn_scaler_update(&scale, &tracker, 0, CNN_SCALER_INTERVAL);
  cr_expect_eq(scale, 2 * CNN_SCALER_INIT, "x2 after 2000 clean steps");
  cr_expect_eq(tracker, 0);
  for (int i = 0; i < 7; i++) cnn_scaler_update(&scale, &tracker, 0, CNN_SCALER_INTERVAL);
  cnn_scaler_update(&scale, &tracker, 1, CNN_SCALER_INTERVAL);
  cr_expect_eq(scale, CNN_SCALER_INIT, "x0.5 on inf/nan");
  cr_expect_eq(tracker, 0, "an overflow restarts the count");
  cnn_scaler_update(&scale, &tracker, 1, CNN_SCALER_INTERVAL);
  cr_expect_eq(scale, CNN_SCALER_INIT / 2);
  /* Growth that would overflow float keeps the old scale, like torch. */
  scale = 3e38f;
  tracker = CNN_SCALER_INTERVAL - 1;
  cnn_scaler_update(&scale, &tracker, 0, CNN_SCALER_INTERVAL);
  cr_expect_eq(scale, 3e38f);
  cr_expect_eq(tracker, 0);
  cr_expect(cnn_isfinite(1.0f) && !cnn_isfinite(INFINITY) && !cnn_isfinite(-INFINITY) && !cnn_isfinite(NAN));
}

Test(model_plan, tiny_coefficients_keep_the_chain_bounded) {
  double prod = 1.0;
  for (int i = 0; i < 256; i++) {
    float a, b;
    cnn_tiny_coef(i, &a, &b);
    cr_expect(a == 1.25f || a == 0.8f);
    cr_expect(fabsf(b) <= 0.01f + 1e-9f);
    prod *= a;
  }
  cr_expect(fabs(prod - 1.0) < 1e-4, "product of 256 factors %g", prod);
}

Test(model_plan, shape_text) {
  char buf[64];
  int d[4] = {64, 3, 32, 32};
  cnn_shape_text(buf, sizeof(buf), d, 4);
  cr_expect_str_eq(buf, "[[64, 3, 32, 32]]");
  cnn_shape_text(buf, 8, d, 4);
  cr_expect_eq(strlen(buf), 7u, "truncated, still terminated");
}

Test(model_plan, config_defaults_and_validation) {
  pd_cnn_config_t cfg;
  pd_cnn_config_init(&cfg);
  cr_expect_eq(cfg.batch, 64);
  cr_expect_eq(cfg.amp, false);
  cr_expect_float_eq(cfg.lr, 1e-3f, 1e-9);
  cr_expect_float_eq(cfg.weight_decay, 1e-2f, 1e-9);
  cr_expect_eq(cfg.tiny_mode, PD_TINY_OFF);
  cr_expect_eq(cfg.tiny_ops_depth, 256);
  cr_expect_eq(cfg.alloc_mode, PD_ALLOC_POOL);
  cr_expect_eq(cfg.churn_buffers, 64);
  cr_expect_eq(cfg.sync_mode, PD_SYNC_NONE);

  /* Each bad value is rejected before any CUDA call, so this runs without a GPU. */
  pd_cnn_t *m = (pd_cnn_t *)0x1;
  pd_cnn_config_t bad;
#define EXPECT_REJECTED(field, value)                                                    \
  do {                                                                                   \
    bad = cfg;                                                                           \
    bad.field = value;                                                                   \
    m = (pd_cnn_t *)0x1;                                                                 \
    cr_expect_eq(pd_cnn_create(&bad, NULL, &m), PD_EINVAL, #field " = " #value);         \
    cr_expect_null(m, "nothing is handed out on failure");                               \
  } while (0)
  EXPECT_REJECTED(batch, 0);
  EXPECT_REJECTED(batch, 70000);
  EXPECT_REJECTED(lr, 0.0f);
  EXPECT_REJECTED(lr, NAN);
  EXPECT_REJECTED(weight_decay, -1.0f);
  EXPECT_REJECTED(tiny_mode, (pd_tiny_mode_t)7);
  EXPECT_REJECTED(alloc_mode, (pd_alloc_mode_t)5);
  EXPECT_REJECTED(sync_mode, (pd_sync_mode_t)2);
  EXPECT_REJECTED(churn_buffers, -1);
  bad = cfg;
  bad.tiny_mode = PD_TINY_CHAIN;
  bad.tiny_ops_depth = 0;
  cr_expect_eq(pd_cnn_create(&bad, NULL, &m), PD_EINVAL, "depth 0 with the block on");
  cr_expect_neq(strlen(pd_cnn_last_error()), 0u, "the failure is described");
  cr_expect_eq(pd_cnn_create(NULL, NULL, &m), PD_EINVAL);
  cr_expect_eq(pd_cnn_create(&cfg, NULL, NULL), PD_EINVAL);
  pd_cnn_destroy(NULL);
}
