/* gate_ab.c: the same-job A/B comparison. Runs of a base build and a head build made
 * interleaved on one machine (round i: base[i], head[i]) share the machine's state, which
 * is what makes host-class times comparable at all: between freshly started hosts of one
 * GPU model a host-bound step's time moved by tens of percent (docs/gate.md).
 *
 * Even on one machine a whole process sometimes runs 30-60% slower in every step (seen in
 * one run of two to five on fresh H100 and H200 machines), so a side's value is the mean of
 * its better half of runs (the lower half for lower-is-better metrics), and the test is a
 * paired permutation test over the rounds: under "no change" base and head are
 * exchangeable within a round, so swapping them in any subset of rounds gives a value of
 * the statistic as likely as the observed one. p is the share of the 2^rounds relabellings
 * (exact up to 16 rounds; else 65536 drawn from a fixed seed) whose change is at least the
 * observed one in the observed direction.
 *
 * Options (pd_cmp_options_t): keep (every run, or another share), host times adjusted for
 * each run's traced-call cost (adjust_call_cost: the slow state of a process raises it,
 * docs/gate.md), and the two-sample test (unpaired: any split of the 2n runs into two
 * groups of n; the slow state belongs to a process, not to its round, and C(16, 8) = 12870
 * labellings resolve far below the 256 of eight paired rounds). scripts/gpu_ab.sh uses all
 * three.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"
#include "pd/pd_stats.h"

#include "gate_internal.h"

#define AB_EXACT_MAX_ROUNDS 16
#define AB_PROBE_CAP 100000 /* warmup probes read per run (profiler_demo's --warmup_steps at most) */
#define AB_RANDOM_PERMUTATIONS 65536
/* The minimum detectable effect's simulation: simulated A/Bs per shift, relabellings per
 * simulated test (exact up to 8 rounds), the power asked for, and the bisection steps
 * over shifts in (0, 1] (resolution 0.1%). */
#define AB_MDE_SIMS 100
#define AB_MDE_PERMUTATIONS 256 /* at least; more where alpha needs them (ab_mde_perms) */
#define AB_MDE_POWER 0.8
#define AB_MDE_STEPS 10

/* How one A/B judges its rows (from pd_cmp_options_t). */
typedef struct {
  double alpha;
  bool unpaired;       /* two-sample relabellings instead of within-round swaps */
  double keep;         /* share of each side's runs the statistic keeps */
  const char *primary; /* the one gating host metric; NULL: all host rows gate */
} ab_settings_t;

/* Sorts v ascending: insertion sort, since the rounds of an A/B are few and the
 * permutation tests and simulations sort them hundreds of thousands of times. */
static void ab_sort(double *v, size_t n) {
  for (size_t i = 1; i < n; i++) {
    const double x = v[i];
    size_t j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

/* Mean of the better ceil(keep * n) values of v (at least one): the lowest when lower is
 * better, the highest when higher is better. keep 0.5 is the better half. tmp holds n
 * doubles. */
static double ab_better(const double *v, size_t n, bool higher_better, double keep, double *tmp) {
  if (keep >= 1.0) { /* every value: no order needed (the permutation tests' hot path) */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    return n > 0 ? sum / (double)n : NAN;
  }
  memcpy(tmp, v, n * sizeof(*tmp));
  ab_sort(tmp, n);
  size_t h = (size_t)ceil(keep * (double)n - 1e-9);
  if (h < 1) h = 1;
  if (h > n) h = n;
  double sum = 0.0;
  for (size_t i = 0; i < h; i++) sum += higher_better ? tmp[n - 1 - i] : tmp[i];
  return sum / (double)h;
}

/* xorshift64*: the fixed-seed generator of the sampled relabellings and simulations. */
static uint64_t ab_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

/* C(2n, n): the two-sample test's labellings; 0 when over max. */
static uint64_t ab_splits(size_t n, uint64_t max) {
  double c = 1.0;
  for (size_t i = 1; i <= n; i++) c = c * (double)(n + i) / (double)i;
  return c <= (double)max ? (uint64_t)llround(c) : 0;
}

/* One-sided permutation p of the change head - base in direction sign (+1: head larger).
 * b, h: n values each; work: 5n doubles. The relabellings are, paired (st->unpaired
 * false), swaps of base and head within any subset of rounds: exact when 2^n <=
 * max_perms; two-sample, splits of the 2n runs into two groups of n: exact when C(2n, n) <=
 * max_perms (every mask of 2n bits with n set, in Gosper's order). Else max_perms drawn
 * from a fixed seed (random swaps; a Fisher-Yates shuffle of the pooled runs).
 * stop_alpha > 0: returns 1 as soon as p can no longer fall below it (the simulations
 * only ask "significant or not"). */
static double ab_test_p(const double *b, const double *h, size_t n, bool higher_better, const ab_settings_t *st,
                        double sign, uint64_t max_perms, double stop_alpha, double *work) {
  const double keep = st->keep;
  double *pb = work, *ph = work + n, *tmp = work + 2 * n, *pool = work + 3 * n; /* pool: 2n */
  const double observed =
      sign * (ab_better(h, n, higher_better, keep, tmp) - ab_better(b, n, higher_better, keep, tmp));
  const double eps = 1e-12 * (fabs(observed) + 1e-300);
  uint64_t exact_total = 0;
  if (!st->unpaired)
    exact_total = n < 63 && ((uint64_t)1 << n) <= max_perms ? (uint64_t)1 << n : 0;
  else if (2 * n < 63)
    exact_total = ab_splits(n, max_perms);
  const bool exact = exact_total > 0;
  const uint64_t total = exact ? exact_total : max_perms;
  /* hits at which p >= stop_alpha is certain */
  const double stop_hits = stop_alpha > 0 ? (exact ? stop_alpha * (double)total : stop_alpha * (double)(total + 1) - 1.0)
                                          : INFINITY;
  if (st->unpaired) {
    memcpy(pool, b, n * sizeof(*pool));
    memcpy(pool + n, h, n * sizeof(*pool));
  }
  uint64_t hits = 0, seed = 0x9E3779B97F4A7C15ULL, split = ((uint64_t)1 << n) - 1; /* the lowest n bits */
  /* Drawn two-sample relabellings of the mean (keep 1, gpu_ab.sh's default): only which n
   * runs form the head matters, so n steps of a shuffle pick them and the base's mean is
   * the rest of the pooled sum (a third of the work of a whole shuffle and two means: the
   * mde's simulations make millions of these). */
  const bool mean_draws = st->unpaired && !exact && keep >= 1.0;
  double pool_sum = 0.0;
  if (mean_draws)
    for (size_t i = 0; i < 2 * n; i++) pool_sum += pool[i];
  for (uint64_t m = 0; m < total; m++) {
    if (mean_draws) {
      double sh = 0.0;
      for (size_t i = 0; i < n; i++) {
        const size_t j = i + (size_t)(ab_next(&seed) % (2 * n - i));
        const double t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        sh += pool[i];
      }
      if (sign * (sh - (pool_sum - sh)) / (double)n >= observed - eps) hits++;
      if ((double)hits >= stop_hits) return 1.0;
      continue;
    }
    if (!st->unpaired) {
      const uint64_t mask = exact ? m : ab_next(&seed);
      for (size_t i = 0; i < n; i++) {
        bool swap = exact || i < 64 ? (mask >> (i % 64)) & 1u : (ab_next(&seed) & 1u);
        pb[i] = swap ? h[i] : b[i];
        ph[i] = swap ? b[i] : h[i];
      }
    } else if (exact) {
      for (size_t i = 0, kb = 0, kh = 0; i < 2 * n; i++) {
        if ((split >> i) & 1u)
          ph[kh++] = pool[i];
        else
          pb[kb++] = pool[i];
      }
      const uint64_t c = split & (~split + 1), r = split + c; /* the next mask with n bits set */
      split = (((r ^ split) >> 2) / c) | r;
    } else {
      for (size_t i = 2 * n - 1; i > 0; i--) {
        const size_t j = (size_t)(ab_next(&seed) % (i + 1));
        const double t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
      }
      memcpy(pb, pool, n * sizeof(*pb));
      memcpy(ph, pool + n, n * sizeof(*ph));
    }
    double d = sign * (ab_better(ph, n, higher_better, keep, tmp) - ab_better(pb, n, higher_better, keep, tmp));
    if (d >= observed - eps) hits++;
    if ((double)hits >= stop_hits) return 1.0;
  }
  /* Exact: the observed labelling is one of the relabellings, so p > 0. */
  return exact ? (double)hits / (double)total : ((double)hits + 1.0) / ((double)total + 1.0);
}

/* Smallest p the test can give with n rounds: 2^-n paired, 1 / C(2n, n) two-sample. */
static double ab_min_p(size_t n, bool unpaired) {
  if (!unpaired) return n < 63 ? ldexp(1.0, -(int)n) : 0.0;
  const uint64_t c = ab_splits(n, UINT64_MAX >> 11);
  return c > 0 ? 1.0 / (double)c : 0.0;
}

/* Relabellings per simulated test: AB_MDE_PERMUTATIONS, or 2 / alpha where that is more, so
 * that a drawn p ((hits + 1) / (draws + 1)) can fall below alpha with a hit to spare. With
 * 256 at the later looks' alpha (0.0015 with gpu_ab.sh's defaults) no simulated A/B could
 * ever be significant, and every mde read >100%. */
static uint64_t ab_mde_perms(double alpha) {
  const double need = alpha > 0.0 ? ceil(2.0 / alpha) : (double)AB_MDE_PERMUTATIONS;
  return need > (double)AB_MDE_PERMUTATIONS ? (uint64_t)fmin(need, 1e6) : AB_MDE_PERMUTATIONS;
}

/* Whether the A/B of x (base) against y (head) slowed down by f would regress: beyond
 * the row's tolerance and significant at alpha. work: 6n doubles. */
static bool ab_sim_detects(const double *x, const double *y, size_t n, double f, const pd_cmp_policy_t *p,
                           const ab_settings_t *st, double *work) {
  const bool hb = p->direction == PD_CMP_DIR_HIGHER_IS_BETTER;
  double *ys = work;
  for (size_t i = 0; i < n; i++) ys[i] = y[i] * (hb ? 1.0 - f : 1.0 + f);
  const double vb = ab_better(x, n, hb, st->keep, work + n), diff = ab_better(ys, n, hb, st->keep, work + n) - vb;
  if (hb ? diff >= 0 : diff <= 0) return false;
  if (fabs(diff) <= fmax(p->tolerance * fabs(vb), p->min_abs)) return false;
  return ab_test_p(x, ys, n, hb, st, diff > 0 ? 1.0 : -1.0, ab_mde_perms(st->alpha), st->alpha, work + n) < st->alpha;
}

/* The minimum detectable effect of a row (pd_cmp_row_t.mde_fraction): simulated A/Bs
 * made from this A/B's own rounds (drawn with replacement, base and head swapped at
 * random within each, so that no real change is left), the head of each slowed down by
 * f; the smallest f (bisection, fixed seed) that AB_MDE_POWER of them catch; never below
 * the tolerance. +Inf when even f = 1 is caught less often; NaN out of memory. */
static double ab_mde(const double *b, const double *h, size_t n, const pd_cmp_policy_t *p,
                     const ab_settings_t *st) {
  if (ab_min_p(n, st->unpaired) > st->alpha) return INFINITY;
  double *sims = malloc((2 * AB_MDE_SIMS * n + 6 * n) * sizeof(*sims));
  if (sims == NULL) return NAN;
  double *work = sims + 2 * AB_MDE_SIMS * n;
  uint64_t seed = 0xD1B54A32D192ED03ULL;
  for (size_t k = 0; k < AB_MDE_SIMS; k++) {
    double *x = sims + 2 * k * n, *y = x + n;
    for (size_t i = 0; i < n; i++) {
      const size_t j = (size_t)(ab_next(&seed) % n);
      const bool swap = (ab_next(&seed) >> 40) & 1u;
      x[i] = swap ? h[j] : b[j];
      y[i] = swap ? b[j] : h[j];
    }
  }
  const size_t need = (size_t)ceil(AB_MDE_POWER * AB_MDE_SIMS);
  /* The figure is never below the tolerance: try it first, then 100%, then bisect. */
  const double tol = fmin(fmax(p->tolerance, 0.0), 1.0);
  double lo = tol, hi = 1.0, mde = INFINITY;
  for (int step = 0; step <= AB_MDE_STEPS + 1; step++) {
    const double f = step == 0 ? tol : step == 1 ? 1.0 : 0.5 * (lo + hi);
    size_t caught = 0;
    for (size_t k = 0; k < AB_MDE_SIMS && caught < need && caught + (AB_MDE_SIMS - k) >= need; k++)
      caught += ab_sim_detects(sims + 2 * k * n, sims + (2 * k + 1) * n, n, f, p, st, work);
    if (caught >= need) {
      hi = f;
      mde = f;
      if (step == 0) break; /* caught at the tolerance itself */
    } else {
      lo = f;
      if (step == 1) break; /* not even a 100% slowdown */
    }
  }
  free(sims);
  return isinf(mde) ? mde : fmax(mde, p->tolerance);
}

/* One numeric row from each side's per-run values (NaN: null). */
static void ab_eval(pd_cmp_report_t *rep, pd_cmp_row_t *r, const double *b, const double *h, size_t n,
                    const ab_settings_t *st, double *work) {
  const pd_cmp_policy_t *p = &r->policy;
  const double alpha = st->alpha, keep = st->keep;
  bool higher_better = p->direction == PD_CMP_DIR_HIGHER_IS_BETTER;
  size_t nan_b = 0, nan_h = 0;
  for (size_t i = 0; i < n; i++) {
    nan_b += isnan(b[i]);
    nan_h += isnan(h[i]);
  }
  r->p_value = NAN;
  if (nan_b > 0 || nan_h > 0) {
    r->base = nan_b == n ? NAN : pd_quantile(b, n, 0.5);
    r->now = nan_h == n ? NAN : pd_quantile(h, n, 0.5);
    r->change_pct = NAN;
    if (nan_h > 0 && nan_b == 0 && p->direction != PD_CMP_DIR_NONE) {
      r->verdict = PD_CMP_REGRESSED;
      snprintf(r->note, sizeof(r->note), "null (NaN) in %zu head run%s: the metric could not be computed",
               nan_h, nan_h == 1 ? "" : "s");
    } else {
      r->verdict = PD_CMP_SKIPPED;
      snprintf(r->note, sizeof(r->note), "null (NaN) in %zu base and %zu head runs: not compared", nan_b, nan_h);
    }
    return;
  }
  bool report_only = p->direction == PD_CMP_DIR_NONE;
  bool paired = p->mode == PD_CMP_MODE_SIGNIFICANCE && !report_only;
  r->base = paired ? ab_better(b, n, higher_better, keep, work) : pd_quantile(b, n, 0.5);
  r->now = paired ? ab_better(h, n, higher_better, keep, work) : pd_quantile(h, n, 0.5);
  double diff = r->now - r->base;
  r->change_pct = r->base != 0.0 ? diff / fabs(r->base) * 100.0 : (diff == 0.0 ? 0.0 : copysign(INFINITY, diff));
  bool bad = (p->direction == PD_CMP_DIR_LOWER_IS_BETTER && diff > 0) ||
             (p->direction == PD_CMP_DIR_HIGHER_IS_BETTER && diff < 0);
  pd_cmp_verdict_t beyond = bad ? PD_CMP_REGRESSED : PD_CMP_IMPROVED;
  if (report_only) {
    r->verdict = PD_CMP_OK;
    snprintf(r->note, sizeof(r->note), "report only (medians over the runs)");
    return;
  }
  if (!paired) { /* counts: medians, compared exactly */
    bool outside = fabs(diff) > fmax(p->min_abs, 1e-9 * fabs(r->base));
    r->verdict = outside ? beyond : PD_CMP_OK;
    snprintf(r->note, sizeof(r->note), outside ? "count differs (medians over the runs, compared exactly)"
                                               : "exact match (medians over the runs)");
    return;
  }
  r->n_base = r->n_now = n;
  const bool host = p->cls == PD_METRIC_CLASS_HOST;
  if (host) r->mde_fraction = ab_mde(b, h, n, p, st);
  /* With a primary host metric, the other host rows are reported, never failed. */
  const bool secondary = host && st->primary != NULL && strcmp(st->primary, r->metric) != 0;
  double allowed = fmax(p->tolerance * fabs(r->base), p->min_abs);
  bool large = fabs(diff) > allowed;
  double min_p = ab_min_p(n, st->unpaired);
  if (min_p > alpha) {
    r->verdict = PD_CMP_SKIPPED;
    snprintf(r->note, sizeof(r->note),
             "insufficient rounds: %zu can never reach p < %g (best p %.3g); not tested, not failed", n, alpha,
             min_p);
    return;
  }
  if (!large) {
    r->verdict = PD_CMP_OK;
    /* Worse by more than half the tolerance: a real change of a little more than the
     * tolerance reads there about as often as beyond it, so stopping here would pass most
     * of them (a 5% host slowdown measured +0.2..+13% in 8-round A/Bs, docs/gate.md):
     * undecided, as beyond-but-not-significant is. Only more rounds can fail it; the
     * false-alarm rate is the alpha spent on the looks, whatever makes one look again. */
    const bool leaning = bad && !secondary && fabs(diff) > 0.5 * allowed;
    if (leaning) rep->undecided++;
    snprintf(r->note, sizeof(r->note), "within tolerance +-%.3g%% (%s of %zu runs each)%s", p->tolerance * 100.0,
             keep == 0.5 ? "better half" : keep >= 1.0 ? "mean" : "better share", n,
             leaning ? ", worse by more than half of it: undecided, more rounds would tell" : "");
    return;
  }
  r->p_value = ab_test_p(b, h, n, higher_better, st, diff > 0 ? 1.0 : -1.0,
                         st->unpaired ? AB_RANDOM_PERMUTATIONS
                         : n <= AB_EXACT_MAX_ROUNDS ? (uint64_t)1 << n
                                                    : AB_RANDOM_PERMUTATIONS,
                         0.0, work);
  if (r->p_value >= alpha) {
    r->verdict = PD_CMP_OK;
    if (bad && !secondary) rep->undecided++;
    snprintf(r->note, sizeof(r->note), "beyond tolerance but not significant (%s permutation p >= %g)%s",
             st->unpaired ? "two-sample" : "paired", alpha, bad && !secondary ? ": undecided, more rounds would tell" : "");
    return;
  }
  if (secondary && bad) {
    r->verdict = PD_CMP_OK;
    snprintf(r->note, sizeof(r->note),
             "worse beyond tolerance +-%.3g%% and significant, reported: only the primary host metric %s gates",
             p->tolerance * 100.0, st->primary);
    return;
  }
  r->verdict = beyond;
  snprintf(r->note, sizeof(r->note), "%s beyond tolerance +-%.3g%% and significant (%s permutation, %zu rounds)",
           diff > 0 ? "higher" : "lower", p->tolerance * 100.0, st->unpaired ? "two-sample" : "paired", n);
}

/* The bottleneck most runs of a side named (ties: the earliest); NULL when none did.
 * names holds n pointers of scratch. */
static const char *ab_majority(const cJSON *const *docs, size_t n, const char **names) {
  for (size_t i = 0; i < n; i++) names[i] = cmp_string_at(docs[i], "verdict", "bottleneck");
  return cmp_majority(names, n, NULL, NULL);
}

/* Checks that every run is a single run of one GPU model and scenario. */
static int ab_check(const cJSON *const *docs, size_t n, const char *const *names, const char **dev,
                    const char **scen, char *why, size_t whylen) {
  for (size_t i = 0; i < n; i++) {
    const char *name = names != NULL && names[i] != NULL ? names[i] : "input";
    const char *d = cmp_string_at(docs[i], "device", "name");
    const char *s = cmp_string_at(docs[i], "config", "scenario");
    if (d == NULL) {
      cmp_why(why, whylen, "%s: device.name missing; load the files with pd_cmp_doc_load()", name);
      return PD_EPARSE;
    }
    if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(docs[i], "runs"))) {
      cmp_why(why, whylen, "%s is a pooled baseline; --base and --head take the metrics JSONs of single runs", name);
      return PD_EINVAL;
    }
    if (i == 0) {
      *dev = d;
      *scen = s;
    } else if (strcmp(d, *dev) != 0) {
      cmp_why(why, whylen, "%s is from '%s' but %s from '%s': an A/B runs on one machine", name, d,
              names != NULL && names[0] ? names[0] : "the first run", *dev);
      return PD_EMISMATCH;
    } else if ((s == NULL) != (*scen == NULL) || (s != NULL && strcmp(s, *scen) != 0)) {
      cmp_why(why, whylen, "%s is scenario '%s' but %s is '%s': one scenario per comparison", name, s ? s : "?",
              names != NULL && names[0] ? names[0] : "the first run", *scen ? *scen : "?");
      return PD_EMISMATCH;
    }
  }
  return 0;
}

/* True for the rows --normalize scales: host-class times (the gate's p10 included), not
 * host ratios, which a uniformly slower CPU leaves as they are. */
static bool ab_host_time(const char *metric, const pd_cmp_derived_t *derived) {
  if (derived != NULL) return true;
  const pd_metric_desc_t *d = pd_metric_find(metric);
  return d != NULL && d->cls == PD_METRIC_CLASS_HOST && d->kind == PD_METRIC_TIME;
}

/* Fills cal[i] with run i's host calibration (mean of host_calibration.start_ns and
 * end_ns), range-checked (0, 1e12) ns. */
static int ab_calibrations(const cJSON *const *docs, size_t n, const char *const *names, double *cal, char *why,
                           size_t whylen) {
  for (size_t i = 0; i < n; i++) {
    const cJSON *hc = cJSON_GetObjectItemCaseSensitive(docs[i], "host_calibration");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(hc, "start_ns"), *z = cJSON_GetObjectItemCaseSensitive(hc, "end_ns");
    const char *name = names != NULL && names[i] != NULL ? names[i] : "input";
    if (!cJSON_IsNumber(a) || !cJSON_IsNumber(z) || !(a->valuedouble > 0 && a->valuedouble < 1e12) ||
        !(z->valuedouble > 0 && z->valuedouble < 1e12)) {
      cmp_why(why, whylen,
              "%s: host_calibration.start_ns and end_ns must be numbers in (0, 1e12) ns; --normalize needs them in "
              "every run (runs of profiler_demo from before they existed have none)",
              name);
      return PD_EPARSE;
    }
    cal[i] = 0.5 * (a->valuedouble + z->valuedouble);
  }
  return 0;
}

/* The log of one profiler_cost.calibration figure of every run (field: ns_per_cuda_call,
 * the traced call cost, or ns_per_launch_untraced, an empty kernel's launch with no CUPTI
 * attached, timed in the same process), into lc. Returns n, or the index of the first run
 * that lacks it or has it out of (0, 1e7) ns. */
static size_t ab_calib_logs(const cJSON *const *docs, size_t n, const char *field, double *lc) {
  for (size_t i = 0; i < n; i++) {
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(docs[i], "profiler_cost");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pc, "calibration"), field);
    if (!cJSON_IsNumber(c) || !(c->valuedouble > 0.0 && c->valuedouble < 1e7)) return i;
    lc[i] = log(c->valuedouble);
  }
  return n;
}

/* The log of the median of each run's warmup_probe_launch_ns (profiler_demo --warmup_probe:
 * the untraced launch time measured after every warmup step, so it follows the host's slow
 * episodes while the judged steps run), into lc. Returns n, or the index of the first run
 * without at least AB_PROBE_MIN samples, each in (0, 1e7) ns. */
#define AB_PROBE_MIN 4
static size_t ab_probe_logs(const cJSON *const *docs, size_t n, double *lc, double *work) {
  for (size_t i = 0; i < n; i++) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(docs[i], "warmup_probe_launch_ns"), *x = NULL;
    size_t k = 0;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < AB_PROBE_MIN || cJSON_GetArraySize(arr) > AB_PROBE_CAP) return i;
    cJSON_ArrayForEach(x, arr) {
      if (!cJSON_IsNumber(x) || !(x->valuedouble > 0.0 && x->valuedouble < 1e7)) return i;
      work[k++] = x->valuedouble;
    }
    lc[i] = log(pd_quantile(work, k, 0.5));
  }
  return n;
}

/* The probe's series of every run, read once for both of its uses (--primary auto chooses
 * by whether every run has it, --adjust moves the untraced rows along it): each run's log
 * median into plog, base then head (2n), and *probed when every run has it. Returns 0 or
 * PD_ENOMEM. */
static int ab_probe_read(const cJSON *const *base, const cJSON *const *head, size_t n, double *plog,
                         bool *probed) {
  double *pw = malloc(AB_PROBE_CAP * sizeof(*pw));
  if (pw == NULL) return PD_ENOMEM;
  *probed = ab_probe_logs(base, n, plog, pw) == n && ab_probe_logs(head, n, plog + n, pw) == n;
  free(pw);
  return 0;
}

/* Whether every run, base and head, has untraced warmup samples (--primary auto). */
static bool ab_all_untraced(const cJSON *const *base, const cJSON *const *head, size_t n) {
  for (size_t i = 0; i < 2 * n; i++) {
    double q = NAN;
    if (pd_cmp_run_quantiles(i < n ? base[i] : head[i - n], "warmup_step_times_s", 0.5, &q, 1) != 1) return false;
  }
  return true;
}

/* The traced call cost of every run, base then head (names likewise), into lc: NULL when
 * every run has it, else the name of the first run that lacks it. */
static const char *ab_call_costs(const cJSON *const *base, const cJSON *const *head, size_t n,
                                 const char *const *names, double *lc) {
  size_t i = ab_calib_logs(base, n, "ns_per_cuda_call", lc);
  if (i == n) {
    i = ab_calib_logs(head, n, "ns_per_cuda_call", lc + n);
    if (i == n) return NULL;
    i += n;
  }
  return names != NULL && names[i] != NULL ? names[i] : "input";
}

/* Analysis of covariance on log values: the pooled within-side slope of log v on the log
 * call cost lc, clamped to [0, 2], and every run's value moved along it to the mean call
 * cost of all runs. Runs without a positive finite value are left out and kept as they
 * are. Both sides share one slope and one reference, so a difference between the sides
 * that the call cost does not explain stays whole. */
static void ab_adjust(double *b, double *h, const double *lcb, const double *lch, size_t n) {
  double *side[2] = {b, h};
  const double *lc[2] = {lcb, lch};
  double sxy = 0.0, sxx = 0.0, csum = 0.0;
  size_t call = 0;
  for (int s = 0; s < 2; s++) {
    double mv = 0.0, mc = 0.0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
      if (isfinite(side[s][i]) && side[s][i] > 0.0) {
        mv += log(side[s][i]);
        mc += lc[s][i];
        k++;
      }
    if (k == 0) continue;
    mv /= (double)k;
    mc /= (double)k;
    for (size_t i = 0; i < n; i++)
      if (isfinite(side[s][i]) && side[s][i] > 0.0) {
        sxy += (lc[s][i] - mc) * (log(side[s][i]) - mv);
        sxx += (lc[s][i] - mc) * (lc[s][i] - mc);
      }
    csum += mc * (double)k;
    call += k;
  }
  if (call == 0 || !(sxx > 0.0)) return;
  const double slope = fmin(2.0, fmax(0.0, sxy / sxx)), ref = csum / (double)call;
  for (int s = 0; s < 2; s++)
    for (size_t i = 0; i < n; i++)
      if (isfinite(side[s][i]) && side[s][i] > 0.0) side[s][i] *= exp(-slope * (lc[s][i] - ref));
}

/* Fills v[i] with run i's value of metric (NaN: null or absent); *present counts the runs
 * that have it. The gate's derived statistics come from each run's samples. scale (NULL:
 * none) multiplies host times (ab_host_time). */
static int ab_values(const cJSON *const *docs, size_t n, const char *metric, const pd_cmp_derived_t *derived,
                     const char *const *names, const double *scale, double *v, size_t *present, char *why,
                     size_t whylen) {
  *present = 0;
  const bool scaled = scale != NULL && ab_host_time(metric, derived);
  for (size_t i = 0; i < n; i++) {
    v[i] = NAN;
    if (derived != NULL) {
      double q = NAN;
      if (pd_cmp_run_quantiles(docs[i], derived->samples, derived->q, &q, 1) == 1) {
        v[i] = scaled ? q * scale[i] : q;
        (*present)++;
      }
      continue;
    }
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(docs[i], "metrics"), metric);
    if (it == NULL) continue;
    (*present)++;
    int rc = cmp_metric_value(it, names != NULL && names[i] ? names[i] : "input", &v[i], why, whylen);
    if (rc != 0) return rc;
    if (scaled) v[i] *= scale[i];
  }
  return 0;
}

int pd_cmp_ab(const cJSON *const *base, size_t nbase, const cJSON *const *head, size_t nhead,
              const char *const *names, const pd_cmp_options_t *opt, pd_cmp_report_t *rep, char *why,
              size_t whylen) {
  memset(rep, 0, sizeof(*rep));
  rep->setting = PD_CMP_AB;
  rep->alpha = opt != NULL && opt->alpha > 0.0 ? opt->alpha : 0.01;
  if (base == NULL || head == NULL || nbase != nhead || nbase < 2) {
    cmp_why(why, whylen,
            "an A/B needs one base and one head run per round and at least 2 rounds; got %zu base and %zu head runs",
            nbase, nhead);
    return PD_EINVAL;
  }
  const size_t n = nbase;
  const char *dev = NULL, *scen = NULL, *hdev = NULL, *hscen = NULL;
  int rc = ab_check(base, n, names, &dev, &scen, why, whylen);
  if (rc == 0) rc = ab_check(head, n, names != NULL ? names + n : NULL, &hdev, &hscen, why, whylen);
  if (rc != 0) return rc;
  if (strcmp(dev, hdev) != 0 || (scen == NULL) != (hscen == NULL) || (scen != NULL && strcmp(scen, hscen) != 0)) {
    cmp_why(why, whylen, "the head runs are '%s' on '%s', the base runs '%s' on '%s': nothing compared",
            hscen ? hscen : "?", hdev, scen ? scen : "?", dev);
    return PD_EMISMATCH;
  }
  snprintf(rep->device, sizeof(rep->device), "%s", dev);
  snprintf(rep->scenario, sizeof(rep->scenario), "%s", scen ? scen : "?");
  snprintf(rep->baseline_path, sizeof(rep->baseline_path), "%zu base runs", n);
  snprintf(rep->current_path, sizeof(rep->current_path), "%zu head runs", n);
  rep->baseline_runs = n;
  const char *primary = opt != NULL ? opt->primary : NULL;
  const bool auto_primary = primary != NULL && strcmp(primary, PD_CMP_PRIMARY_AUTO) == 0;
  double *plog = NULL; /* each run's log median probe, base then head (ab_probe_read) */
  bool probed = false;
  if (auto_primary || (opt != NULL && opt->adjust_call_cost)) {
    plog = malloc(2 * n * sizeof(*plog));
    rc = plog == NULL ? PD_ENOMEM : ab_probe_read(base, head, n, plog, &probed);
    if (rc != 0) {
      free(plog);
      return rc;
    }
  }
  if (auto_primary) {
    const char *pwhy = NULL;
    primary = pd_cmp_ab_auto_primary(scen, ab_all_untraced(base, head, n), probed, &pwhy);
    snprintf(rep->primary_why, sizeof rep->primary_why, "%s", pwhy);
  }
  const ab_settings_t st = {.alpha = rep->alpha,
                            .unpaired = opt != NULL && opt->unpaired,
                            .keep = opt != NULL && opt->keep > 0.0 && opt->keep <= 1.0 ? opt->keep : 0.5,
                            .primary = primary};
  rep->keep = st.keep;
  rep->normalized = opt != NULL && opt->normalize_host;
  rep->adjusted = opt != NULL && opt->adjust_call_cost;
  rep->unpaired = st.unpaired;
  snprintf(rep->primary, sizeof(rep->primary), "%s", st.primary != NULL ? st.primary : "");

  double *b = malloc(n * sizeof(*b)), *h = malloc(n * sizeof(*h)), *work = malloc(5 * n * sizeof(*work));
  double *scale = rep->normalized ? malloc(2 * n * sizeof(*scale)) : NULL;
  /* --adjust: [0, 2n) the traced-call cost, [2n, 4n) the untraced launch (untraced rows) */
  double *lcost = rep->adjusted ? malloc(4 * n * sizeof(*lcost)) : NULL;
  bool untraced_cov = false;
  const char **names_of = malloc(n * sizeof(*names_of)); /* the runs' bottlenecks */
  if (b == NULL || h == NULL || work == NULL || names_of == NULL || (rep->normalized && scale == NULL) ||
      (rep->adjusted && lcost == NULL)) {
    free(b);
    free(h);
    free(work);
    free(scale);
    free(lcost);
    free(plog);
    free(names_of);
    return PD_ENOMEM;
  }
  if (scale != NULL) {
    /* each run's host times x (median calibration of all runs / the run's own) */
    rc = ab_calibrations(base, n, names, scale, why, whylen);
    if (rc == 0) rc = ab_calibrations(head, n, names != NULL ? names + n : NULL, scale + n, why, whylen);
    if (rc == 0) {
      const double ref = pd_quantile(scale, 2 * n, 0.5);
      for (size_t i = 0; i < 2 * n; i++) scale[i] = ref / scale[i];
    }
  }
  bool traced_cov = false;
  if (rc == 0 && lcost != NULL) {
    /* The untraced rows' covariate: the in-process probe where every run has it, else the
     * one untraced launch calibration after the warmup. */
    untraced_cov = probed;
    if (untraced_cov) {
      memcpy(lcost + 2 * n, plog, 2 * n * sizeof(*plog));
      snprintf(rep->untraced_covariate, sizeof rep->untraced_covariate, "warmup_probe_launch_ns");
    } else {
      untraced_cov = ab_calib_logs(base, n, "ns_per_launch_untraced", lcost + 2 * n) == n &&
                     ab_calib_logs(head, n, "ns_per_launch_untraced", lcost + 3 * n) == n;
      if (untraced_cov) snprintf(rep->untraced_covariate, sizeof rep->untraced_covariate, "ns_per_launch_untraced");
    }
  }
  if (rc == 0 && lcost != NULL) {
    const char *lacking = ab_call_costs(base, head, n, names, lcost);
    traced_cov = lacking == NULL;
    /* One run whose calibration read no positive traced-call cost (noise on a host where
     * tracing adds little: a fresh H200's tiny_ops run did) leaves the traced rows as they
     * are; the untraced rows keep their own covariate. Neither covariate: refused. */
    if (!traced_cov && !untraced_cov) {
      cmp_why(why, whylen,
              "%s: profiler_cost.calibration.ns_per_cuda_call must be a number in (0, 1e7) ns; --adjust needs it "
              "in every run (a profiled run on a GPU; --no_profile runs have none)",
              lacking);
      rc = PD_EPARSE;
    } else if (!traced_cov) {
      snprintf(rep->adjust_note, sizeof rep->adjust_note,
               "traced rows not adjusted: %.80s: profiler_cost.calibration.ns_per_cuda_call is not a number in "
               "(0, 1e7) ns",
               lacking);
    }
  }
  const double *scale_b = scale, *scale_h = scale != NULL ? scale + n : NULL;
  size_t present = 0, cap = 0;
  if (rc == 0) rc = ab_values(base, n, "avg_step_time_s", NULL, names, NULL, b, &present, why, whylen);
  const double base_step = rc == 0 && present > 0 ? pd_quantile(b, n, 0.5) : NAN;

  /* Rows: the base runs' metrics in order, the gate's derived statistics, then metrics
   * only the head runs have. */
  size_t nderived = 0;
  const pd_cmp_derived_t *derived = pd_cmp_derived_metrics(&nderived);
  const cJSON *bm = cJSON_GetObjectItemCaseSensitive(base[0], "metrics"), *it = NULL;
  int nbm = cJSON_GetArraySize(bm);
  for (int k = 0; rc == 0 && k < nbm + (int)nderived; k++) {
    const pd_cmp_derived_t *d = k >= nbm ? &derived[k - nbm] : NULL;
    const char *metric = d != NULL ? d->name : cJSON_GetArrayItem(bm, k)->string;
    size_t pb = 0, ph = 0;
    if ((rc = ab_values(base, n, metric, d, names, scale_b, b, &pb, why, whylen)) != 0) break;
    if ((rc = ab_values(head, n, metric, d, names != NULL ? names + n : NULL, scale_h, h, &ph, why, whylen)) != 0)
      break;
    if (d != NULL && pb == 0) continue; /* no samples: no derived row */
    if (lcost != NULL && ab_host_time(metric, d)) {
      /* An untraced row's covariate is the untraced launch: the slow state of a process is in
       * the driver's launch path with or without CUPTI (docs/gate.md); runs without that
       * figure fall back to the traced-call cost. */
      const bool unt = untraced_cov && d != NULL && strcmp(d->samples, "warmup_step_times_s") == 0;
      if (unt || traced_cov) ab_adjust(b, h, unt ? lcost + 2 * n : lcost, unt ? lcost + 3 * n : lcost + n, n);
    }
    pd_cmp_row_t *r = cmp_row_add(rep, &cap, metric);
    if (r == NULL) {
      rc = PD_ENOMEM;
      break;
    }
    pd_cmp_policy_default(metric, PD_CMP_AB, base_step, &r->policy);
    if (ph == 0) {
      r->base = pd_quantile(b, n, 0.5);
      r->verdict = PD_CMP_MISSING;
      snprintf(r->note, sizeof(r->note), "in the base runs but not in the head runs");
      continue;
    }
    ab_eval(rep, r, b, h, n, &st, work);
  }
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(head[0], "metrics")) {
    if (rc != 0) break;
    if (cJSON_GetObjectItemCaseSensitive(bm, it->string) != NULL) continue;
    pd_cmp_row_t *r = cmp_row_add(rep, &cap, it->string);
    if (r == NULL) {
      rc = PD_ENOMEM;
      break;
    }
    size_t ph = 0;
    if ((rc = ab_values(head, n, it->string, NULL, names != NULL ? names + n : NULL, scale_h, h, &ph, why,
                        whylen)) != 0)
      break;
    pd_cmp_policy_default(it->string, PD_CMP_AB, base_step, &r->policy);
    r->now = pd_quantile(h, n, 0.5);
    r->verdict = PD_CMP_NEW;
    snprintf(r->note, sizeof(r->note), "not in the base runs: reported, not compared");
  }
  free(b);
  free(h);
  free(work);
  free(scale);
  free(lcost);
  free(plog);
  if (rc == 0 && st.primary != NULL) {
    bool found = false;
    for (size_t i = 0; i < rep->nrows && !found; i++)
      found = strcmp(rep->rows[i].metric, st.primary) == 0 && rep->rows[i].policy.cls == PD_METRIC_CLASS_HOST &&
              rep->rows[i].policy.mode == PD_CMP_MODE_SIGNIFICANCE;
    if (!found) {
      cmp_why(why, whylen, "primary metric '%s' is not a tested host-class row of these runs (e.g. step_time_p10_s)",
              st.primary);
      rc = PD_EINVAL;
    }
  }
  if (rc == 0) {
    pd_cmp_row_t *r = cmp_row_add(rep, &cap, "verdict.bottleneck");
    if (r == NULL) {
      rc = PD_ENOMEM;
    } else {
      const char *vb = ab_majority(base, n, names_of), *vh = ab_majority(head, n, names_of);
      r->text = true;
      r->policy.mode = PD_CMP_MODE_EXACT;
      r->policy.cls = PD_METRIC_CLASS_INFO;
      snprintf(r->base_text, sizeof(r->base_text), "%s", vb ? vb : "-");
      snprintf(r->now_text, sizeof(r->now_text), "%s", vh ? vh : "-");
      if (vb == NULL) {
        r->verdict = PD_CMP_SKIPPED;
        snprintf(r->note, sizeof(r->note), "the base runs name no bottleneck");
      } else if (vh == NULL) {
        r->verdict = PD_CMP_MISSING;
        snprintf(r->note, sizeof(r->note), "the head runs name no bottleneck");
      } else if (strcmp(vb, vh) != 0 && pd_bottleneck_is_balance(vb) && pd_bottleneck_is_balance(vh)) {
        /* as the stored-baseline comparison judges it (gate_compare.c): compute, host_bound
         * and launch_overhead say where the step's host/GPU balance lies, which moves from
         * process to process on one machine (clean's verdict flips between them in runs of
         * one build); the kernel and call counts guard the step's shape, the host rows its
         * time */
        r->verdict = PD_CMP_OK;
        snprintf(r->note, sizeof(r->note), "host/GPU balance (most runs) moved from %s to %s (not a planted cause)",
                 vb, vh);
      } else if (strcmp(vb, vh) != 0) {
        r->verdict = PD_CMP_REGRESSED;
        snprintf(r->note, sizeof(r->note), "bottleneck (most runs) changed from %s to %s", vb, vh);
      } else {
        r->verdict = PD_CMP_OK;
        snprintf(r->note, sizeof(r->note), "same bottleneck (most runs)");
      }
    }
  }
  free(names_of);
  if (rc == 0) rc = pd_cmp_explain(base, n, head, n, rep);
  if (rc != 0) return rc;
  cmp_report_tally(rep);
  return 0;
}
