/* test_gate_mwu.c: the gate's statistics and policy helpers, without a GPU.
 *
 * Mann-Whitney U against values printed by scipy.stats.mannwhitneyu (SciPy 1.10.1) and
 * against textbook critical values; the exact distribution against a brute-force
 * enumeration of every split; the minimum reachable p; the GPU slug; derived policies.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"

#define P_EPS 1e-12

/* scipy.stats.mannwhitneyu's documentation example (males vs females). */
static const double k_males[] = {19, 22, 16, 29, 24};
static const double k_females[] = {20, 11, 17, 12};

Test(mwu, exact_small_sample_matches_scipy) {
  pd_mwu_t t;
  cr_assert_eq(pd_mwu_test(k_males, 5, k_females, 4, &t), 0);
  cr_assert(t.exact, "no ties and n = 9: the exact distribution must be used");
  cr_assert_float_eq(t.u, 17.0, P_EPS);
  /* scipy: method='exact': two-sided 0.1111111111111111, greater 0.05555555555555555,
   * less 0.9682539682539684 */
  cr_assert_float_eq(t.p_two_sided, 0.1111111111111111, P_EPS, "two-sided p = %.17g", t.p_two_sided);
  cr_assert_float_eq(t.p_greater, 0.05555555555555555, P_EPS, "greater p = %.17g", t.p_greater);
  cr_assert_float_eq(t.p_less, 0.9682539682539684, P_EPS, "less p = %.17g", t.p_less);
  /* Swapping the samples swaps the sides. */
  pd_mwu_t s;
  cr_assert_eq(pd_mwu_test(k_females, 4, k_males, 5, &s), 0);
  cr_assert_float_eq(s.u, 3.0, P_EPS);
  cr_assert_float_eq(s.p_less, t.p_greater, P_EPS);
  cr_assert_float_eq(s.p_two_sided, t.p_two_sided, P_EPS);
}

Test(mwu, normal_approximation_with_ties_matches_scipy) {
  /* Ties force the normal approximation with tie correction. scipy (asymptotic):
   * U 2.5, two-sided 0.07854585095119067, greater 0.9778107863272566,
   * less 0.039272925475595334 */
  const double x[] = {1, 2, 2, 3}, y[] = {2, 3, 4, 5, 5};
  pd_mwu_t t;
  cr_assert_eq(pd_mwu_test(x, 4, y, 5, &t), 0);
  cr_assert_not(t.exact);
  cr_assert_float_eq(t.u, 2.5, P_EPS);
  cr_assert_float_eq(t.p_two_sided, 0.07854585095119067, 1e-12, "p = %.17g", t.p_two_sided);
  cr_assert_float_eq(t.p_greater, 0.9778107863272566, 1e-12, "p = %.17g", t.p_greater);
  cr_assert_float_eq(t.p_less, 0.039272925475595334, 1e-12, "p = %.17g", t.p_less);

  /* A larger tied sample: U 32.5, two-sided 0.008506751440480857, less
   * 0.004253375720240428, greater 0.9963502130247996 */
  const double a[] = {0.1, 0.2, 0.2, 0.3, 0.35, 0.4, 0.4, 0.5, 0.55, 0.6, 0.6, 0.7};
  const double b[] = {0.3, 0.4, 0.45, 0.5, 0.5, 0.6, 0.65, 0.7, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0};
  cr_assert_eq(pd_mwu_test(a, 12, b, 14, &t), 0);
  cr_assert_float_eq(t.u, 32.5, P_EPS);
  cr_assert_float_eq(t.p_two_sided, 0.008506751440480857, 1e-12, "p = %.17g", t.p_two_sided);
  cr_assert_float_eq(t.p_less, 0.004253375720240428, 1e-12, "p = %.17g", t.p_less);
  cr_assert_float_eq(t.p_greater, 0.9963502130247996, 1e-12, "p = %.17g", t.p_greater);
}

Test(mwu, normal_approximation_for_large_samples_matches_scipy) {
  /* No ties but n = 60 > PD_MWU_EXACT_MAX_N. scipy (asymptotic): U 300, two-sided
   * 0.027086318388295935, less 0.013543159194147968, greater 0.9869612613459606 */
  double x[30], y[30];
  for (int i = 0; i < 30; i++) {
    x[i] = i;
    y[i] = i + 5.5;
  }
  pd_mwu_t t;
  cr_assert_eq(pd_mwu_test(x, 30, y, 30, &t), 0);
  cr_assert_not(t.exact);
  cr_assert_float_eq(t.u, 300.0, P_EPS);
  cr_assert_float_eq(t.p_two_sided, 0.027086318388295935, 1e-12, "p = %.17g", t.p_two_sided);
  cr_assert_float_eq(t.p_less, 0.013543159194147968, 1e-12);
  cr_assert_float_eq(t.p_greater, 0.9869612613459606, 1e-12);
}

Test(mwu, exact_eight_by_eight_matches_scipy) {
  /* scipy (exact): U 21, two-sided 0.2786324786324786 */
  const double x[] = {1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5}, y[] = {3, 4, 5, 6, 7, 8, 9, 10};
  pd_mwu_t t;
  cr_assert_eq(pd_mwu_test(x, 8, y, 8, &t), 0);
  cr_assert(t.exact);
  cr_assert_float_eq(t.u, 21.0, P_EPS);
  cr_assert_float_eq(t.p_two_sided, 0.2786324786324786, P_EPS, "p = %.17g", t.p_two_sided);
}

/* Builds samples whose U is exactly u: x takes the ranks that put u pairs above y. */
static void make_samples_with_u(size_t nx, size_t ny, size_t u, double *x, double *y) {
  /* Start with x all below y (U = 0), then move x's largest values up past y values. */
  for (size_t j = 0; j < ny; j++) y[j] = 2.0 * (double)j + 1.0; /* odd numbers */
  size_t left = u;
  for (size_t i = nx; i-- > 0;) {
    size_t above = left < ny ? left : ny; /* how many y this x exceeds */
    left -= above;
    x[i] = 2.0 * (double)above - 0.5 + 0.001 * (double)i; /* between y values, distinct */
  }
}

Test(mwu, exact_critical_values_match_textbook_tables) {
  /* Two-tailed critical U of the standard Mann-Whitney tables: the largest U with
   * P(U <= u) <= alpha/2. (n1, n2, alpha, critical U) */
  static const struct {
    size_t n1, n2;
    double alpha;
    size_t crit;
  } table[] = {
      {5, 5, 0.05, 2}, {8, 8, 0.05, 13}, {10, 10, 0.05, 23},
      {8, 8, 0.01, 7}, {10, 10, 0.01, 16}, {6, 9, 0.05, 10},
  };
  for (size_t k = 0; k < sizeof(table) / sizeof(table[0]); k++) {
    double x[16], y[16];
    pd_mwu_t at, above;
    make_samples_with_u(table[k].n1, table[k].n2, table[k].crit, x, y);
    cr_assert_eq(pd_mwu_test(x, table[k].n1, y, table[k].n2, &at), 0);
    cr_assert_float_eq(at.u, (double)table[k].crit, 1e-9, "constructed U %g", at.u);
    make_samples_with_u(table[k].n1, table[k].n2, table[k].crit + 1, x, y);
    cr_assert_eq(pd_mwu_test(x, table[k].n1, y, table[k].n2, &above), 0);
    cr_assert(at.exact && above.exact);
    cr_expect(at.p_less <= table[k].alpha / 2,
              "n=%zu,%zu: P(U <= %zu) = %g should be <= %g", table[k].n1, table[k].n2,
              table[k].crit, at.p_less, table[k].alpha / 2);
    cr_expect(above.p_less > table[k].alpha / 2,
              "n=%zu,%zu: P(U <= %zu) = %g should be > %g", table[k].n1, table[k].n2,
              table[k].crit + 1, above.p_less, table[k].alpha / 2);
  }
}

/* Brute force: enumerate every choice of which nx of the n ranks belong to x. */
static void brute_force(size_t nx, size_t ny, double u_obs, double *p_ge, double *p_le) {
  size_t n = nx + ny;
  double ge = 0, le = 0, total = 0;
  for (unsigned mask = 0; mask < (1u << n); mask++) {
    if ((size_t)__builtin_popcount(mask) != nx) continue;
    /* U = sum over x members of (number of y members with a lower rank) */
    double u = 0;
    size_t ys_below = 0;
    for (size_t r = 0; r < n; r++) {
      if (mask & (1u << r))
        u += (double)ys_below;
      else
        ys_below++;
    }
    total += 1;
    if (u >= u_obs) ge += 1;
    if (u <= u_obs) le += 1;
  }
  *p_ge = ge / total;
  *p_le = le / total;
}

Test(mwu, exact_distribution_matches_brute_force) {
  static const size_t sizes[][2] = {{1, 1}, {1, 6}, {3, 4}, {5, 5}, {4, 9}, {7, 6}, {2, 12}};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    size_t nx = sizes[k][0], ny = sizes[k][1];
    for (size_t u = 0; u <= nx * ny; u++) {
      double x[16], y[16], ge, le;
      make_samples_with_u(nx, ny, u, x, y);
      pd_mwu_t t;
      cr_assert_eq(pd_mwu_test(x, nx, y, ny, &t), 0);
      cr_assert_float_eq(t.u, (double)u, 1e-9);
      brute_force(nx, ny, (double)u, &ge, &le);
      cr_assert_float_eq(t.p_greater, ge, 1e-12, "n=%zu,%zu U=%zu: %g vs %g", nx, ny, u,
                         t.p_greater, ge);
      cr_assert_float_eq(t.p_less, le, 1e-12, "n=%zu,%zu U=%zu: %g vs %g", nx, ny, u, t.p_less,
                         le);
    }
  }
}

Test(mwu, min_p_and_bad_input) {
  /* 1 / C(n1 + n2, n1) */
  cr_assert_float_eq(pd_mwu_min_p(4, 4), 1.0 / 70.0, P_EPS);
  cr_assert_float_eq(pd_mwu_min_p(2, 2), 1.0 / 6.0, P_EPS);
  cr_assert_float_eq(pd_mwu_min_p(1, 99), 1.0 / 100.0, P_EPS);
  cr_assert_float_eq(pd_mwu_min_p(0, 5), 1.0, P_EPS);
  cr_assert(pd_mwu_min_p(16, 48) < 1e-12);
  /* The smallest p an exact test reaches is that bound. */
  const double lo[] = {1, 2, 3, 4}, hi[] = {5, 6, 7, 8};
  pd_mwu_t t;
  cr_assert_eq(pd_mwu_test(hi, 4, lo, 4, &t), 0);
  cr_assert_float_eq(t.p_greater, 1.0 / 70.0, P_EPS);

  const double with_nan[] = {1, NAN, 3};
  cr_assert_eq(pd_mwu_test(with_nan, 3, lo, 4, &t), PD_EINVAL);
  cr_assert_eq(pd_mwu_test(lo, 0, hi, 4, &t), PD_EINVAL);
  /* All values tied: no evidence either way. */
  const double same[] = {2, 2, 2};
  cr_assert_eq(pd_mwu_test(same, 3, same, 3, &t), 0);
  cr_assert_float_eq(t.p_two_sided, 1.0, P_EPS);
}

Test(gate, gpu_slug) {
  char s[64];
  cr_assert_eq(pd_gpu_slug("NVIDIA H100 80GB HBM3", s, sizeof(s)), 0);
  cr_assert_str_eq(s, "nvidia-h100-80gb-hbm3");
  cr_assert_eq(pd_gpu_slug("  NVIDIA  A100-SXM4-40GB ", s, sizeof(s)), 0);
  cr_assert_str_eq(s, "nvidia-a100-sxm4-40gb");
  cr_assert_eq(pd_gpu_slug("NVIDIA H200", s, sizeof(s)), 0);
  cr_assert_str_eq(s, "nvidia-h200");
  cr_assert_eq(pd_gpu_slug(" -- ", s, sizeof(s)), PD_EINVAL);
  cr_assert_eq(pd_gpu_slug("NVIDIA H100 80GB HBM3", s, 8), PD_EINVAL);
}

Test(gate, policy_defaults_follow_metric_classes) {
  pd_cmp_policy_t p;
  /* stored baselines, host class: only gross changes fail, and a step twice as slow does */
  pd_cmp_policy_default("step_time_p10_s", PD_CMP_STORED, NAN, &p);
  cr_assert_eq(p.cls, PD_METRIC_CLASS_HOST);
  cr_assert_eq(p.mode, PD_CMP_MODE_SIGNIFICANCE);
  cr_assert_eq(p.direction, PD_CMP_DIR_LOWER_IS_BETTER);
  cr_assert(p.tolerance >= 0.5 && p.tolerance < 1.0, "tolerance %g", p.tolerance);
  pd_cmp_policy_t avg, p95;
  pd_cmp_policy_default("avg_step_time_s", PD_CMP_STORED, NAN, &avg);
  pd_cmp_policy_default("p95_step_time_s", PD_CMP_STORED, NAN, &p95);
  cr_assert_eq(avg.cls, PD_METRIC_CLASS_HOST);
  cr_assert_eq(avg.direction, PD_CMP_DIR_LOWER_IS_BETTER);
  cr_assert_float_eq(avg.tolerance, p.tolerance, 1e-12);
  cr_assert_gt(p95.tolerance, avg.tolerance);
  /* device class: a tight band that a 3% GPU-side slowdown leaves */
  pd_cmp_policy_default("gpu_kernel_time_per_step_us", PD_CMP_STORED, NAN, &p);
  cr_assert_eq(p.cls, PD_METRIC_CLASS_DEVICE);
  cr_assert_eq(p.mode, PD_CMP_MODE_BAND);
  cr_assert(p.band > 0.0 && p.band < 0.03, "band %g", p.band);
  pd_cmp_policy_default("avg_kernel_time_us", PD_CMP_STORED, NAN, &p);
  cr_assert_eq(p.cls, PD_METRIC_CLASS_DEVICE);
  cr_assert_eq(p.direction, PD_CMP_DIR_NONE, "fusing kernels raises it: no direction");
  pd_cmp_policy_default("kernels_per_step", PD_CMP_STORED, NAN, &p);
  cr_assert_eq(p.cls, PD_METRIC_CLASS_COUNT);
  cr_assert_eq(p.mode, PD_CMP_MODE_EXACT);
  pd_cmp_policy_default("gpu_busy_fraction", PD_CMP_STORED, NAN, &p);
  cr_assert_eq(p.cls, PD_METRIC_CLASS_HOST);
  cr_assert_eq(p.mode, PD_CMP_MODE_BAND);
  cr_assert_eq(p.direction, PD_CMP_DIR_HIGHER_IS_BETTER);
  pd_cmp_policy_default("loss_last", PD_CMP_STORED, NAN, &p);
  cr_assert_eq(p.cls, PD_METRIC_CLASS_INFO);
  cr_assert_eq(p.direction, PD_CMP_DIR_NONE);
  pd_cmp_policy_default("no_such_metric", PD_CMP_STORED, NAN, &p);
  cr_assert_eq(p.cls, PD_METRIC_CLASS_INFO);
  cr_assert_eq(p.direction, PD_CMP_DIR_NONE);
  /* A/B on one machine: host times are held to a few percent, device time tighter */
  pd_cmp_policy_default("step_time_p10_s", PD_CMP_AB, NAN, &p);
  cr_assert_eq(p.mode, PD_CMP_MODE_SIGNIFICANCE);
  cr_assert(p.tolerance > 0.0 && p.tolerance <= 0.03, "A/B tolerance %g", p.tolerance);
  pd_cmp_policy_default("gpu_kernel_time_per_step_us", PD_CMP_AB, NAN, &p);
  cr_assert_eq(p.mode, PD_CMP_MODE_SIGNIFICANCE);
  cr_assert(p.tolerance > 0.0 && p.tolerance < 0.03, "A/B device tolerance %g", p.tolerance);
  pd_cmp_policy_default("h2d_bytes_per_step", PD_CMP_AB, NAN, &p);
  cr_assert_eq(p.mode, PD_CMP_MODE_EXACT);
  cr_assert_eq(pd_cmp_metric_class("step_time_p10_s"), PD_METRIC_CLASS_HOST);
  cr_assert_eq(pd_cmp_metric_class("sync_calls_per_step"), PD_METRIC_CLASS_COUNT);
  cr_assert_eq(pd_cmp_metric_class("not_a_metric"), PD_METRIC_CLASS_INFO);
  cr_assert_str_eq(pd_cmp_metric_samples_key("p95_step_time_s"), "step_times_s");
  cr_assert_str_eq(pd_cmp_metric_samples_key("step_time_p10_s"), "step_times_s");
  cr_assert_str_eq(pd_cmp_metric_samples_key("avg_dataloader_wait_s"), "dataloader_wait_s");
  cr_assert_null(pd_cmp_metric_samples_key("kernels_per_step"));
  size_t n = 0;
  const pd_cmp_derived_t *d = pd_cmp_derived_metrics(&n);
  cr_assert_eq(n, 3);
  cr_assert_str_eq(d[0].name, "step_time_p10_s");
  cr_assert_float_eq(d[0].q, 0.10, 1e-12);
  /* the untraced warmup steps' median and p10, host class, for the A/B */
  cr_assert_str_eq(d[1].name, "untraced_step_p50_s");
  cr_assert_str_eq(d[1].samples, "warmup_step_times_s");
  cr_assert_float_eq(d[1].q, 0.50, 1e-12);
  cr_assert_str_eq(d[2].name, "untraced_step_p10_s");
  cr_assert_float_eq(d[2].q, 0.10, 1e-12);
  cr_assert_eq(pd_cmp_metric_class("untraced_step_p50_s"), PD_METRIC_CLASS_HOST);
  cr_assert_str_eq(pd_cmp_metric_samples_key("untraced_step_p50_s"), "warmup_step_times_s");
  pd_cmp_policy_default("untraced_step_p50_s", PD_CMP_AB, 0.0003, &p);
  cr_assert_eq(p.direction, PD_CMP_DIR_LOWER_IS_BETTER);
  cr_assert_eq(p.mode, PD_CMP_MODE_SIGNIFICANCE);
}

Test(gate, policy_tolerance_widens_with_between_run_spread) {
  pd_cmp_policy_t quiet, noisy;
  /* device time: the 1.5% floor, widened to 4 between-run sd */
  const double tight[] = {233.1, 233.2, 232.9};
  const double wide[] = {230.0, 240.0, 235.0}; /* MAD 5: sd 7.4, 3.2% of the median */
  pd_cmp_policy_derive("gpu_kernel_time_per_step_us", tight, NULL, 3, 0.0003, &quiet);
  pd_cmp_policy_derive("gpu_kernel_time_per_step_us", wide, NULL, 3, 0.0003, &noisy);
  cr_assert_float_eq(quiet.band, 0.015, 1e-12, "the floor: %g", quiet.band);
  cr_assert(noisy.band >= 4 * 7.41 / 235.0 - 1e-3, "band %g must cover the spread", noisy.band);
  /* Counts that never varied are compared exactly; varying ones within a band. */
  const double same[] = {120, 120, 120}, vary[] = {300, 302, 301};
  pd_cmp_policy_derive("kernels_per_step", same, NULL, 3, 0.01, &quiet);
  cr_assert_eq(quiet.mode, PD_CMP_MODE_EXACT);
  pd_cmp_policy_derive("runtime_calls_per_step", vary, NULL, 3, 0.01, &noisy);
  cr_assert_eq(noisy.mode, PD_CMP_MODE_BAND);
  cr_assert(noisy.band >= 0.02, "band %g", noisy.band);
  /* One run says nothing about spread: the floor. */
  pd_cmp_policy_derive("gpu_kernel_time_per_step_us", wide, NULL, 1, 0.01, &quiet);
  cr_assert_float_eq(quiet.band, 0.015, 1e-12);
  /* Data wait gets an absolute floor from the step time: against a stored baseline a
   * whole step (10 ms), in an A/B 5% of it. */
  const double waits[] = {1e-5, 2e-5, 1.5e-5};
  pd_cmp_policy_derive("avg_dataloader_wait_s", waits, NULL, 3, 0.01, &quiet);
  cr_assert_float_eq(quiet.min_abs, 0.01, 1e-12);
  pd_cmp_policy_default("avg_dataloader_wait_s", PD_CMP_AB, 0.01, &quiet);
  cr_assert_float_eq(quiet.min_abs, 0.0005, 1e-12);
  /* Sample-less host times get a wider floor (25% of a 10 ms step), scaled to their unit
   * (microseconds here). */
  const double sync_us[] = {8000, 8100, 8050};
  pd_cmp_policy_derive("sync_time_per_step_us", sync_us, NULL, 3, 0.01, &quiet);
  cr_assert_eq(quiet.mode, PD_CMP_MODE_BAND);
  cr_assert_float_eq(quiet.min_abs, 2500.0, 1e-9);
}

Test(gate, host_tolerance_learned_from_pooled_hosts) {
  const int host[] = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  /* A central step-time statistic is held at +-90% against a stored baseline whatever
   * the hosts show: unchanged runs reached +86%, and a step twice as slow must fail. */
  const double p10[] = {300, 301, 299, 302, 300, 303, 460, 461, 462};
  pd_cmp_policy_t one, pooled, shifted;
  pd_cmp_policy_derive("step_time_p10_s", p10, NULL, 9, 0.0003, &one);
  pd_cmp_policy_derive("step_time_p10_s", p10, host, 9, 0.0003, &pooled);
  cr_assert_float_eq(one.tolerance, 0.9, 1e-12, "%g", one.tolerance);
  cr_assert_float_eq(pooled.tolerance, 0.9, 1e-12, "capped: %g", pooled.tolerance);
  /* p95 (no cap): three hosts, one 133% above the others. Twice the largest shift of a
   * host's median from the median of all runs. */
  const double p95[] = {300, 301, 299, 302, 300, 303, 700, 701, 702};
  pd_cmp_policy_derive("p95_step_time_s", p95, host, 9, 0.0003, &pooled);
  cr_assert_float_eq(pooled.tolerance, 2.0 * (701.0 - 302.0) / 302.0, 1e-9, "%g", pooled.tolerance);
  /* the same runs as one host: no host shift; the envelope, 1.1 x the farthest run
   * (+132%), is 146%: the 150% floor */
  const int same[] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  pd_cmp_policy_derive("p95_step_time_s", p95, same, 9, 0.0003, &shifted);
  cr_assert_float_eq(shifted.tolerance, 1.5, 1e-9, "%g", shifted.tolerance);
  /* a run farther out widens it: 1.1 x 200% */
  const double wide[] = {300, 301, 299, 302, 300, 303, 301, 300, 906};
  pd_cmp_policy_derive("p95_step_time_s", wide, same, 9, 0.0003, &shifted);
  cr_assert_float_eq(shifted.tolerance, 1.1 * (906.0 - 301.0) / 301.0, 1e-9, "%g", shifted.tolerance);
  /* hosts that agree: the floor */
  const double calm[] = {300, 301, 299, 302, 300, 303, 301, 300, 302};
  pd_cmp_policy_derive("p95_step_time_s", calm, host, 9, 0.0003, &shifted);
  cr_assert_float_eq(shifted.tolerance, 1.5, 1e-12, "%g", shifted.tolerance);
  /* device time across hosts: a 0.3% host shift stays within the 1.5% floor; a 2% one widens it */
  const double dev[] = {233.0, 233.1, 232.9, 233.7, 233.8, 233.6, 237.6, 237.7, 237.8};
  pd_cmp_policy_t d;
  pd_cmp_policy_derive("gpu_kernel_time_per_step_us", dev, host, 9, 0.0003, &d);
  cr_assert(d.band >= 2 * (237.7 - 233.7) / 233.7 - 1e-9, "band %g covers twice the host shift", d.band);
}
