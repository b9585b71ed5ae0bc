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
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"

#include "gate_internal.h"

#define AB_EXACT_MAX_ROUNDS 16
#define AB_RANDOM_PERMUTATIONS 65536

static int ab_dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Mean of the better half (ceil(n/2) values) of v: the lowest when lower is better, the
 * highest when higher is better. tmp holds n doubles. */
static double ab_better_half(const double *v, size_t n, bool higher_better, double *tmp) {
  memcpy(tmp, v, n * sizeof(*tmp));
  qsort(tmp, n, sizeof(*tmp), ab_dcmp);
  size_t h = (n + 1) / 2;
  double sum = 0.0;
  for (size_t i = 0; i < h; i++) sum += higher_better ? tmp[n - 1 - i] : tmp[i];
  return sum / (double)h;
}

/* xorshift64*: the fixed-seed generator of the sampled relabellings. */
static uint64_t ab_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

/* One-sided permutation p of the change head - base in direction sign (+1: head larger).
 * b, h: n values each; work: 4n doubles. */
static double ab_perm_p(const double *b, const double *h, size_t n, bool higher_better, double sign,
                        double *work) {
  double *pb = work, *ph = work + n, *tmp = work + 2 * n;
  const double observed = sign * (ab_better_half(h, n, higher_better, tmp) - ab_better_half(b, n, higher_better, tmp));
  const double eps = 1e-12 * (fabs(observed) + 1e-300);
  bool exact = n <= AB_EXACT_MAX_ROUNDS;
  uint64_t total = exact ? (uint64_t)1 << n : AB_RANDOM_PERMUTATIONS, hits = 0, seed = 0x9E3779B97F4A7C15ULL;
  for (uint64_t m = 0; m < total; m++) {
    uint64_t mask = exact ? m : ab_next(&seed);
    for (size_t i = 0; i < n; i++) {
      bool swap = exact || i < 64 ? (mask >> (i % 64)) & 1u : (ab_next(&seed) & 1u);
      pb[i] = swap ? h[i] : b[i];
      ph[i] = swap ? b[i] : h[i];
    }
    double d = sign * (ab_better_half(ph, n, higher_better, tmp) - ab_better_half(pb, n, higher_better, tmp));
    if (d >= observed - eps) hits++;
  }
  /* The observed labelling is one of the relabellings (mask 0), so p > 0 when exact. */
  return exact ? (double)hits / (double)total : ((double)hits + 1.0) / ((double)total + 1.0);
}

/* One numeric row from each side's per-run values (NaN: null). */
static void ab_eval(pd_cmp_row_t *r, const double *b, const double *h, size_t n, double alpha, double *work) {
  const pd_cmp_policy_t *p = &r->policy;
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
  r->base = paired ? ab_better_half(b, n, higher_better, work) : pd_quantile(b, n, 0.5);
  r->now = paired ? ab_better_half(h, n, higher_better, work) : pd_quantile(h, n, 0.5);
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
  double allowed = fmax(p->tolerance * fabs(r->base), p->min_abs);
  bool large = fabs(diff) > allowed;
  double min_p = n < 63 ? ldexp(1.0, -(int)n) : 0.0;
  if (min_p > alpha) {
    r->verdict = PD_CMP_SKIPPED;
    snprintf(r->note, sizeof(r->note),
             "insufficient rounds: %zu can never reach p < %g (best p %.3g); not tested, not failed", n, alpha,
             min_p);
    return;
  }
  if (!large) {
    r->verdict = PD_CMP_OK;
    snprintf(r->note, sizeof(r->note), "within tolerance +-%.3g%% (better half of %zu runs each)",
             p->tolerance * 100.0, n);
    return;
  }
  r->p_value = ab_perm_p(b, h, n, higher_better, diff > 0 ? 1.0 : -1.0, work);
  if (r->p_value >= alpha) {
    r->verdict = PD_CMP_OK;
    snprintf(r->note, sizeof(r->note), "beyond tolerance but not significant (paired permutation p >= %g)", alpha);
    return;
  }
  r->verdict = beyond;
  snprintf(r->note, sizeof(r->note), "%s beyond tolerance +-%.3g%% and significant (paired permutation, %zu rounds)",
           diff > 0 ? "higher" : "lower", p->tolerance * 100.0, n);
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

/* Fills v[i] with run i's value of metric (NaN: null or absent); *present counts the runs
 * that have it. The gate's derived statistics come from each run's samples. */
static int ab_values(const cJSON *const *docs, size_t n, const char *metric, const pd_cmp_derived_t *derived,
                     const char *const *names, double *v, size_t *present, char *why, size_t whylen) {
  *present = 0;
  for (size_t i = 0; i < n; i++) {
    v[i] = NAN;
    if (derived != NULL) {
      double q = NAN;
      if (pd_cmp_run_quantiles(docs[i], derived->samples, derived->q, &q, 1) == 1) {
        v[i] = q;
        (*present)++;
      }
      continue;
    }
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(docs[i], "metrics"), metric);
    if (it == NULL) continue;
    (*present)++;
    int rc = cmp_metric_value(it, names != NULL && names[i] ? names[i] : "input", &v[i], why, whylen);
    if (rc != 0) return rc;
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

  double *b = malloc(n * sizeof(*b)), *h = malloc(n * sizeof(*h)), *work = malloc(4 * n * sizeof(*work));
  const char **names_of = malloc(n * sizeof(*names_of)); /* the runs' bottlenecks */
  if (b == NULL || h == NULL || work == NULL || names_of == NULL) {
    free(b);
    free(h);
    free(work);
    free(names_of);
    return PD_ENOMEM;
  }
  size_t present = 0, cap = 0;
  rc = ab_values(base, n, "avg_step_time_s", NULL, names, b, &present, why, whylen);
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
    if ((rc = ab_values(base, n, metric, d, names, b, &pb, why, whylen)) != 0) break;
    if ((rc = ab_values(head, n, metric, d, names != NULL ? names + n : NULL, h, &ph, why, whylen)) != 0) break;
    if (d != NULL && pb == 0) continue; /* no samples: no derived row */
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
    ab_eval(r, b, h, n, rep->alpha, work);
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
    if ((rc = ab_values(head, n, it->string, NULL, names != NULL ? names + n : NULL, h, &ph, why, whylen)) != 0)
      break;
    pd_cmp_policy_default(it->string, PD_CMP_AB, base_step, &r->policy);
    r->now = pd_quantile(h, n, 0.5);
    r->verdict = PD_CMP_NEW;
    snprintf(r->note, sizeof(r->note), "not in the base runs: reported, not compared");
  }
  free(b);
  free(h);
  free(work);
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
