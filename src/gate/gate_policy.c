/* gate_policy.c: the gate's per-metric policies: which way is better, how a metric is
 * compared, and how wide its tolerance is.
 *
 * The metric kinds (TIME, COUNT, RATIO, INFO) come from the core's table in pd_stats.h;
 * this file adds the direction of each metric and turns the run-to-run spread measured
 * in a baseline's runs into tolerances. The numbers below and the measurements that
 * chose them are in docs/gate.md.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_gate.h"
#include "pd/pd_stats.h"

/* Tolerance floors of the sampled TIME metrics (relative change), where the baseline's runs
 * show less spread; measured on an H200 over 25 clean runs (docs/gate.md):
 *  - step_time_p10_s, the gate's shift statistic: between-run sd 0.74-0.76%, and a 5%
 *    injected slowdown moved it by 3.8% at least in 60 runs;
 *  - mean and median step time follow bursts of slow steps from host interference: a
 *    run's median moved by up to +10%, its mean by up to +16%;
 *  - p95 step time and data wait are the bursts themselves: up to +38% and +95%. */
#define GATE_SHIFT_TOL_FLOOR 0.03
#define GATE_TIME_TOL_FLOOR 0.25
#define GATE_TAIL_TOL_FLOOR 0.5
/* Tolerance (or band) = this many between-run standard deviations (robust: from the
 * median absolute deviation, relative to the median) measured in the baseline's runs,
 * when that is wider than the floor. */
#define GATE_SPREAD_FACTOR 4.0
/* TIME metrics without per-step samples have no test against noise: a wide band. */
#define GATE_TIME_BAND_FLOOR 0.5
/* RATIO metrics derive from the times tested above (data wait over step, kernel time over
 * step) and carry their noise (clean's wait fraction: 9% between-run sd): a wide band, and
 * an absolute floor because fractions near zero wobble by large relative amounts. */
#define GATE_RATIO_BAND_FLOOR 0.5
#define GATE_RATIO_MIN_ABS 0.05
/* COUNT metrics that vary between runs at all get at least this band. */
#define GATE_COUNT_BAND_FLOOR 0.02
/* Data wait: changes below this fraction of a step are ignored. */
#define GATE_STEP_FRACTION_MIN_ABS 0.05
/* Sample-less times (sync, allocation and kernel time per step) have no test against
 * noise, and the host's blocking time in its own synchronizations depends on how far it
 * ran ahead: on an H100 the dataloader scenario's sync time per step moved from 75 to
 * 140 us between unchanged runs (a fifth of its 0.4 ms step). Changes below this fraction
 * of a step are ignored; planted regressions there also move the exact counts. */
#define GATE_UNSAMPLED_STEP_FRACTION_MIN_ABS 0.25

static const char *const k_direction_names[] = {
#define PD_CMP_DIR_STR(name, text) text,
    PD_CMP_DIRECTION_MAP(PD_CMP_DIR_STR)
#undef PD_CMP_DIR_STR
};
static const char *const k_mode_names[] = {
#define PD_CMP_MODE_STR(name, text) text,
    PD_CMP_MODE_MAP(PD_CMP_MODE_STR)
#undef PD_CMP_MODE_STR
};
static const struct {
  const char *name;
  bool fails;
} k_verdicts[] = {
#define PD_CMP_VERDICT_STR(name, text, fails) {text, fails},
    PD_CMP_VERDICT_MAP(PD_CMP_VERDICT_STR)
#undef PD_CMP_VERDICT_STR
};

#define GATE_COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

const char *pd_cmp_direction_name(pd_cmp_direction_t d) {
  return (size_t)d < GATE_COUNT_OF(k_direction_names) ? k_direction_names[d] : "?";
}
const char *pd_cmp_mode_name(pd_cmp_mode_t m) {
  return (size_t)m < GATE_COUNT_OF(k_mode_names) ? k_mode_names[m] : "?";
}
const char *pd_cmp_verdict_name(pd_cmp_verdict_t v) {
  return (size_t)v < GATE_COUNT_OF(k_verdicts) ? k_verdicts[v].name : "?";
}
bool pd_cmp_verdict_fails(pd_cmp_verdict_t v) {
  return (size_t)v < GATE_COUNT_OF(k_verdicts) && k_verdicts[v].fails;
}

/* Which way is better, per metric of PD_METRICS_MAP. Metrics not listed are reported
 * only: avg_kernel_time_us rises when kernels are fused (fewer, longer kernels), which is
 * an improvement, so its direction says nothing; the losses depend on the seed. */
static const struct {
  const char *name;
  pd_cmp_direction_t direction;
} k_directions[] = {
    {"avg_step_time_s", PD_CMP_DIR_LOWER_IS_BETTER},
    {"avg_dataloader_wait_s", PD_CMP_DIR_LOWER_IS_BETTER},
    {"p50_step_time_s", PD_CMP_DIR_LOWER_IS_BETTER},
    {"p95_step_time_s", PD_CMP_DIR_LOWER_IS_BETTER},
    {"dataloader_wait_fraction", PD_CMP_DIR_LOWER_IS_BETTER},
    {"gpu_busy_fraction", PD_CMP_DIR_HIGHER_IS_BETTER},
    {"kernels_per_step", PD_CMP_DIR_LOWER_IS_BETTER},
    {"gpu_kernel_time_per_step_us", PD_CMP_DIR_LOWER_IS_BETTER},
    {"runtime_calls_per_step", PD_CMP_DIR_LOWER_IS_BETTER},
    {"sync_calls_per_step", PD_CMP_DIR_LOWER_IS_BETTER},
    {"sync_time_per_step_us", PD_CMP_DIR_LOWER_IS_BETTER},
    {"device_alloc_calls_per_step", PD_CMP_DIR_LOWER_IS_BETTER},
    {"device_alloc_time_per_step_us", PD_CMP_DIR_LOWER_IS_BETTER},
    {"h2d_bytes_per_step", PD_CMP_DIR_LOWER_IS_BETTER},
    {"peak_device_memory_bytes", PD_CMP_DIR_LOWER_IS_BETTER},
    {"dropped_records", PD_CMP_DIR_LOWER_IS_BETTER},
};

/* Per-step sample arrays of the metrics JSON, the metrics computed from them, and their
 * tolerance floors. */
static const struct {
  const char *metric;
  const char *samples;
  double floor;
} k_sampled[] = {
    {"avg_step_time_s", "step_times_s", GATE_TIME_TOL_FLOOR},
    {"p50_step_time_s", "step_times_s", GATE_TIME_TOL_FLOOR},
    {"p95_step_time_s", "step_times_s", GATE_TAIL_TOL_FLOOR},
    {"avg_dataloader_wait_s", "dataloader_wait_s", GATE_TAIL_TOL_FLOOR},
};

static const pd_cmp_derived_t k_derived[] = {
    {"step_time_p10_s", "step_times_s", 0.10},
};

const pd_cmp_derived_t *pd_cmp_derived_metrics(size_t *count) {
  *count = GATE_COUNT_OF(k_derived);
  return k_derived;
}

static const pd_cmp_derived_t *gate_derived(const char *metric) {
  for (size_t i = 0; metric != NULL && i < GATE_COUNT_OF(k_derived); i++)
    if (strcmp(k_derived[i].name, metric) == 0) return &k_derived[i];
  return NULL;
}

/* Returns the index of a sampled metric in k_sampled, or -1. */
static int gate_sampled(const char *metric) {
  for (size_t i = 0; metric != NULL && i < GATE_COUNT_OF(k_sampled); i++)
    if (strcmp(k_sampled[i].metric, metric) == 0) return (int)i;
  return -1;
}

const char *pd_cmp_metric_samples_key(const char *metric) {
  const pd_cmp_derived_t *d = gate_derived(metric);
  if (d != NULL) return d->samples;
  int i = gate_sampled(metric);
  return i >= 0 ? k_sampled[i].samples : NULL;
}

static pd_cmp_direction_t gate_direction(const char *metric) {
  for (size_t i = 0; i < GATE_COUNT_OF(k_directions); i++)
    if (strcmp(k_directions[i].name, metric) == 0) return k_directions[i].direction;
  return PD_CMP_DIR_NONE;
}

/* Seconds to the metric's own unit, read from its name's suffix. */
static double gate_unit_per_second(const char *metric) {
  size_t len = strlen(metric);
  if (len > 3 && strcmp(metric + len - 3, "_us") == 0) return 1e6;
  if (len > 3 && strcmp(metric + len - 3, "_ms") == 0) return 1e3;
  return 1.0;
}

void pd_cmp_policy_default(const char *metric, pd_cmp_policy_t *p) {
  memset(p, 0, sizeof(*p));
  if (gate_derived(metric) != NULL) { /* a slowdown of every step: lower is better */
    p->direction = PD_CMP_DIR_LOWER_IS_BETTER;
    p->mode = PD_CMP_MODE_SIGNIFICANCE;
    p->tolerance = GATE_SHIFT_TOL_FLOOR;
    return;
  }
  const pd_metric_desc_t *desc = metric != NULL ? pd_metric_find(metric) : NULL;
  p->direction = metric != NULL ? gate_direction(metric) : PD_CMP_DIR_NONE;
  p->mode = PD_CMP_MODE_BAND;
  if (desc == NULL) {
    p->direction = PD_CMP_DIR_NONE; /* a metric this build does not know: report only */
    p->band = GATE_TIME_BAND_FLOOR;
    return;
  }
  switch (desc->kind) {
    case PD_METRIC_TIME:
      if (gate_sampled(metric) >= 0) {
        p->mode = PD_CMP_MODE_SIGNIFICANCE;
        p->tolerance = k_sampled[gate_sampled(metric)].floor;
      } else {
        p->band = GATE_TIME_BAND_FLOOR;
      }
      break;
    case PD_METRIC_COUNT:
      p->mode = PD_CMP_MODE_EXACT;
      break;
    case PD_METRIC_RATIO:
      p->band = GATE_RATIO_BAND_FLOOR;
      p->min_abs = GATE_RATIO_MIN_ABS;
      break;
    case PD_METRIC_INFO:
      p->direction = PD_CMP_DIR_NONE;
      p->band = GATE_TIME_BAND_FLOOR;
      break;
  }
}

void pd_cmp_policy_derive(const char *metric, const double *run_values, size_t n,
                          double step_time_s, pd_cmp_policy_t *p) {
  pd_cmp_policy_default(metric, p);
  /* Between-run spread, robustly: 1.4826 x the median absolute deviation of the finite
   * run values, over their median (the standard deviation for normal data). A run that
   * landed in a slow state of a shared machine (docs/gate.md) must not widen every
   * tolerance; such runs are the acceptance suite's confirmation rerun's business. */
  double *xs = malloc((n > 0 ? n : 1) * sizeof(*xs));
  size_t finite = 0;
  for (size_t i = 0; xs != NULL && i < n; i++)
    if (isfinite(run_values[i])) xs[finite++] = run_values[i];
  double spread = 0.0;
  if (xs != NULL && finite >= 2) {
    double median = pd_quantile(xs, finite, 0.5);
    for (size_t i = 0; i < finite; i++) xs[i] = fabs(xs[i] - median);
    double sd = 1.4826 * pd_quantile(xs, finite, 0.5);
    spread = median != 0.0 ? sd / fabs(median) : (sd > 0.0 ? INFINITY : 0.0);
  }
  free(xs);
  double widened = GATE_SPREAD_FACTOR * spread;
  if (gate_derived(metric) != NULL) {
    p->tolerance = fmax(p->tolerance, widened);
    return;
  }
  const pd_metric_desc_t *desc = pd_metric_find(metric);
  if (desc == NULL) return;
  const char *samples = pd_cmp_metric_samples_key(metric);
  double step_floor = isfinite(step_time_s) && step_time_s > 0.0
                          ? GATE_STEP_FRACTION_MIN_ABS * step_time_s * gate_unit_per_second(metric)
                          : 0.0;
  switch (desc->kind) {
    case PD_METRIC_TIME:
      if (samples != NULL) {
        p->tolerance = fmax(p->tolerance, widened);
        /* Data wait sits near zero when the pipeline keeps up; a change worth less than
         * a small part of a step is not what the gate hunts. */
        if (strcmp(samples, "dataloader_wait_s") == 0) p->min_abs = step_floor;
      } else {
        p->band = fmax(p->band, widened);
        p->min_abs = step_floor * (GATE_UNSAMPLED_STEP_FRACTION_MIN_ABS / GATE_STEP_FRACTION_MIN_ABS);
      }
      break;
    case PD_METRIC_COUNT:
      if (spread > 0.0) {
        p->mode = PD_CMP_MODE_BAND;
        p->band = fmax(GATE_COUNT_BAND_FLOOR, widened);
      }
      break;
    case PD_METRIC_RATIO:
      p->band = fmax(p->band, widened);
      break;
    case PD_METRIC_INFO:
      break;
  }
}
