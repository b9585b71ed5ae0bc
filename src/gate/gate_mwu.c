/* gate_mwu.c: the Mann-Whitney U rank test the gate uses on per-step samples.
 *
 * U counts the pairs (x_i, y_j) with x_i > y_j (a tie counts 1/2). Without ties and with
 * few samples the p-value comes from the exact null distribution: the number of
 * arrangements giving each U is a coefficient of the Gaussian binomial
 * [nx+ny choose nx]_q, built as a product of (1 - q^(n+i)) / (1 - q^i). Otherwise the
 * normal approximation with the tie-corrected variance and a 0.5 continuity correction,
 * the same choices as scipy.stats.mannwhitneyu, so results can be checked against it.
 */
#include <math.h>
#include <stdlib.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"

typedef struct {
  double v;
  int group; /* 0: x, 1: y */
} mwu_item_t;

static int mwu_item_cmp(const void *a, const void *b) {
  double va = ((const mwu_item_t *)a)->v, vb = ((const mwu_item_t *)b)->v;
  return (va > vb) - (va < vb);
}

double pd_mwu_min_p(size_t nx, size_t ny) {
  if (nx == 0 || ny == 0) return 1.0;
  /* C(nx+ny, nx) as a running product in doubles: exact enough for a threshold. */
  size_t k = nx < ny ? nx : ny, n = nx + ny;
  double c = 1.0;
  for (size_t i = 1; i <= k; i++) {
    c = c * (double)(n - k + i) / (double)i;
    if (c > 1e300) return 0.0;
  }
  return 1.0 / c;
}

/* Fills counts[0..m*n] with the number of arrangements giving each U (exact integers
 * held in doubles: they stay below 2^53 for m + n <= 50). Returns 0 or PD_ENOMEM. */
static int mwu_exact_counts(size_t m, size_t n, double **out) {
  size_t cap = (m + 1) * (n + 1) + 1;
  double *c = calloc(cap, sizeof(*c));
  if (c == NULL) return PD_ENOMEM;
  c[0] = 1.0;
  size_t deg = 0;
  for (size_t i = 1; i <= m; i++) {
    size_t s = n + i, newdeg = deg + s;
    for (size_t k = newdeg; k >= s; k--) c[k] -= c[k - s]; /* times (1 - q^(n+i)) */
    for (size_t k = i; k <= newdeg; k++) c[k] += c[k - i];  /* over (1 - q^i) */
    deg += n;
  }
  *out = c;
  return 0;
}

static double mwu_norm_sf(double z) { return 0.5 * erfc(z / sqrt(2.0)); }

int pd_mwu_test(const double *x, size_t nx, const double *y, size_t ny, pd_mwu_t *out) {
  if (x == NULL || y == NULL || out == NULL || nx == 0 || ny == 0) return PD_EINVAL;
  size_t n = nx + ny;
  mwu_item_t *items = malloc(n * sizeof(*items));
  if (items == NULL) return PD_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    items[i].v = i < nx ? x[i] : y[i - nx];
    items[i].group = i < nx ? 0 : 1;
    if (isnan(items[i].v)) {
      free(items);
      return PD_EINVAL;
    }
  }
  qsort(items, n, sizeof(*items), mwu_item_cmp);

  /* Average ranks over runs of ties; T = sum(t^3 - t) for the variance correction. */
  double rank_sum_x = 0.0, tie_term = 0.0;
  bool ties = false;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && items[j].v == items[i].v) j++;
    double t = (double)(j - i), avg_rank = ((double)i + 1.0 + (double)j) / 2.0;
    if (j - i > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    for (size_t k = i; k < j; k++)
      if (items[k].group == 0) rank_sum_x += avg_rank;
    i = j;
  }
  free(items);

  double dnx = (double)nx, dny = (double)ny, dn = (double)n;
  double u = rank_sum_x - dnx * (dnx + 1.0) / 2.0;
  out->u = u;
  out->z = NAN;

  if (!ties && n <= PD_MWU_EXACT_MAX_N) {
    size_t m = nx < ny ? nx : ny, other = n - m;
    double *c = NULL;
    int rc = mwu_exact_counts(m, other, &c);
    if (rc != 0) return rc;
    size_t umax = nx * ny, ui = (size_t)llround(u);
    double total = 0.0, le = 0.0, ge = 0.0;
    for (size_t k = 0; k <= umax; k++) {
      total += c[k];
      if (k <= ui) le += c[k];
      if (k >= ui) ge += c[k];
    }
    free(c);
    out->exact = true;
    out->p_greater = ge / total;
    out->p_less = le / total;
  } else {
    double mean = dnx * dny / 2.0;
    double var = dnx * dny / 12.0 * ((dn + 1.0) - tie_term / (dn * (dn - 1.0)));
    out->exact = false;
    if (var <= 0.0) { /* every value tied: no evidence either way */
      out->p_greater = out->p_less = 1.0;
      out->z = 0.0;
    } else {
      double sd = sqrt(var);
      double zg = (u - mean - 0.5) / sd, zl = (u - mean + 0.5) / sd;
      out->p_greater = mwu_norm_sf(zg);
      out->p_less = mwu_norm_sf(-zl);
      out->z = u >= mean ? zg : zl;
    }
  }
  double p = 2.0 * fmin(out->p_greater, out->p_less);
  out->p_two_sided = p > 1.0 ? 1.0 : p;
  return 0;
}
