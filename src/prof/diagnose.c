/* diagnose.c: names the bottleneck of a run from its metrics.
 *
 * One table of rules, tried in order; the first that fires names the bottleneck, and
 * `compute` is the verdict when none does. Each rule carries its thresholds (tuned on a
 * GPU: change them here and nowhere else), the condition as README text and an
 * evidence template. Templates name derived quantities in braces ("{wait_ms}"), filled
 * from one quantity table, so the numbers in a verdict and the rule table that
 * pd_diagnose_print_rules() prints (docs/diagnosis.md) come from the same place.
 *
 * Order matters: a data-starved step also shows an idle GPU, and cudaFree churn also
 * stalls the host, so the more specific signatures are tried first.
 */
#include "pd/pd_stats.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- bottleneck names --------------------------------------------------------------------- */

static const char *const bottleneck_names[PD_BOTTLENECK_COUNT] = {
#define PD_BN_NAME_GEN(name, text) text,
    PD_BOTTLENECK_MAP(PD_BN_NAME_GEN)
#undef PD_BN_NAME_GEN
};

const char *pd_bottleneck_name(pd_bottleneck_t b) {
  if ((int)b < 0 || b >= PD_BOTTLENECK_COUNT) return "unknown";
  return bottleneck_names[b];
}

int pd_bottleneck_parse(const char *name, pd_bottleneck_t *b) {
  if (name == NULL || b == NULL) return PD_EINVAL;
  for (int i = 0; i < PD_BOTTLENECK_COUNT; i++) {
    if (strcmp(name, bottleneck_names[i]) == 0) {
      *b = (pd_bottleneck_t)i;
      return 0;
    }
  }
  return PD_EINVAL;
}

/* ---- derived quantities, named in templates -------------------------------------------------- */

static double step_us(const pd_metrics_t *m) {
  return m->avg_step_time_s > 0 ? m->avg_step_time_s * 1e6 : NAN;
}
static double q_wait_ms(const pd_metrics_t *m) { return m->avg_dataloader_wait_s * 1e3; }
static double q_step_ms(const pd_metrics_t *m) { return m->avg_step_time_s * 1e3; }
static double q_wait_pct(const pd_metrics_t *m) { return m->dataloader_wait_fraction * 100.0; }
static double q_alloc_calls(const pd_metrics_t *m) { return m->device_alloc_calls_per_step; }
static double q_alloc_us(const pd_metrics_t *m) { return m->device_alloc_time_per_step_us; }
static double q_alloc_pct(const pd_metrics_t *m) {
  return m->device_alloc_time_per_step_us / step_us(m) * 100.0;
}
static double q_sync_calls(const pd_metrics_t *m) { return m->sync_calls_per_step; }
static double q_sync_us(const pd_metrics_t *m) { return m->sync_time_per_step_us; }
static double q_sync_pct(const pd_metrics_t *m) { return m->sync_time_per_step_us / step_us(m) * 100.0; }
static double q_kernels(const pd_metrics_t *m) { return m->kernels_per_step; }
static double q_avg_kernel_us(const pd_metrics_t *m) { return m->avg_kernel_time_us; }
static double q_busy_pct(const pd_metrics_t *m) { return m->gpu_busy_fraction * 100.0; }

typedef struct {
  const char *name;
  double (*value)(const pd_metrics_t *m);
  int decimals;
} quantity_t;

static const quantity_t quantities[] = {
    {"wait_ms", q_wait_ms, 1},         {"step_ms", q_step_ms, 1},
    {"wait_pct", q_wait_pct, 0},       {"alloc_calls", q_alloc_calls, 1},
    {"alloc_us", q_alloc_us, 1},       {"alloc_pct", q_alloc_pct, 0},
    {"sync_calls", q_sync_calls, 1},   {"sync_us", q_sync_us, 1},
    {"sync_pct", q_sync_pct, 0},       {"kernels", q_kernels, 0},
    {"avg_kernel_us", q_avg_kernel_us, 2}, {"busy_pct", q_busy_pct, 0},
};

/* ---- the rule table ----------------------------------------------------------------------------- */

typedef struct rule rule_t;
struct rule {
  const char *name;
  pd_bottleneck_t bottleneck;
  bool (*fires)(const pd_metrics_t *m, const rule_t *r);
  double t[3];           /* thresholds; the condition text shows them as {t0} {t1} {t2} */
  const char *condition; /* README text of the predicate */
  const char *evidence;  /* template: {quantity} placeholders */
};

/* NaN (not measured) compares false everywhere, so a missing metric never fires a rule. */
static bool fires_wait_fraction(const pd_metrics_t *m, const rule_t *r) {
  return m->dataloader_wait_fraction >= r->t[0];
}
static bool fires_alloc_calls(const pd_metrics_t *m, const rule_t *r) {
  return m->device_alloc_calls_per_step >= r->t[0];
}
static bool fires_alloc_time(const pd_metrics_t *m, const rule_t *r) {
  return m->device_alloc_time_per_step_us >= r->t[0] * step_us(m);
}
static bool fires_sync_calls(const pd_metrics_t *m, const rule_t *r) {
  return m->sync_calls_per_step >= r->t[0];
}
static bool fires_many_kernels(const pd_metrics_t *m, const rule_t *r) {
  return m->kernels_per_step >= r->t[0];
}
static bool fires_tiny_kernels(const pd_metrics_t *m, const rule_t *r) {
  return m->avg_kernel_time_us < r->t[0] && m->gpu_busy_fraction < r->t[1] &&
         m->kernels_per_step >= r->t[2];
}

static const char *const launch_evidence =
    "{kernels} kernels per step, average kernel {avg_kernel_us} us, GPU busy {busy_pct}% of the step";
static const char *const alloc_evidence =
    "{alloc_calls} device alloc/free calls per step taking {alloc_us} us ({alloc_pct}% of the step)";

static const rule_t rules[] = {
    {"dataloader_wait", PD_BOTTLENECK_DATALOADER, fires_wait_fraction, {0.30, 0, 0},
     "`dataloader_wait_fraction` >= {t0} (data wait / (data wait + step time))",
     "data wait {wait_ms} ms per step vs step {step_ms} ms ({wait_pct}% of the step)"},
    {"alloc_calls", PD_BOTTLENECK_ALLOCATOR_CHURN, fires_alloc_calls, {8, 0, 0},
     "`device_alloc_calls_per_step` >= {t0} (cudaMalloc/cudaFree and driver equivalents)",
     alloc_evidence},
    {"alloc_time", PD_BOTTLENECK_ALLOCATOR_CHURN, fires_alloc_time, {0.10, 0, 0},
     "`device_alloc_time_per_step_us` >= {t0} x the step time (`avg_step_time_s`)", alloc_evidence},
    /* The harness synchronizes twice per step (before t0 and after the step, so the
     * host-timed step is exact): two blocking calls per step are normal, a third means
     * the step itself waits for the device (a forced .item(), an explicit sync). */
    {"sync_calls", PD_BOTTLENECK_SYNC, fires_sync_calls, {3, 0, 0},
     "`sync_calls_per_step` >= {t0} (host-blocking calls; the harness's own 2 per step are normal)",
     "{sync_calls} synchronizing calls per step taking {sync_us} us ({sync_pct}% of the step)"},
    {"many_kernels", PD_BOTTLENECK_LAUNCH_OVERHEAD, fires_many_kernels, {1000, 0, 0},
     "`kernels_per_step` >= {t0}", launch_evidence},
    {"tiny_kernels", PD_BOTTLENECK_LAUNCH_OVERHEAD, fires_tiny_kernels, {10, 0.5, 300},
     "`avg_kernel_time_us` < {t0} and `gpu_busy_fraction` < {t1} and `kernels_per_step` >= {t2}",
     launch_evidence},
};
#define NRULES (sizeof rules / sizeof rules[0])

static const char *const default_rule = "none";
static const char *const default_condition = "no rule above fires";
static const char *const default_evidence =
    "no rule fired: GPU busy {busy_pct}% of the step, {kernels} kernels per step, "
    "data wait {wait_pct}% of the time";

/* ---- templates --------------------------------------------------------------------------------- */

/* Appends text to buf at *pos, never past len-1; keeps buf terminated. */
static void append(char *buf, size_t len, size_t *pos, const char *text, size_t n) {
  if (*pos + 1 >= len) return;
  size_t room = len - 1 - *pos;
  if (n > room) n = room;
  memcpy(buf + *pos, text, n);
  *pos += n;
  buf[*pos] = 0;
}

/* Expands "{name}" placeholders: quantities of m when m is set, thresholds {t0}..{t2}
 * of r when r is set. Unknown names are copied as they are; NaN prints as "n/a". */
static void expand(char *buf, size_t len, const char *tmpl, const pd_metrics_t *m, const rule_t *r) {
  size_t pos = 0;
  if (len == 0) return;
  buf[0] = 0;
  const char *p = tmpl;
  while (*p != 0) {
    const char *open = strchr(p, '{');
    const char *close = open ? strchr(open, '}') : NULL;
    if (open == NULL || close == NULL) {
      append(buf, len, &pos, p, strlen(p));
      return;
    }
    append(buf, len, &pos, p, (size_t)(open - p));
    size_t nlen = (size_t)(close - open - 1);
    char num[64];
    int done = 0;
    if (r != NULL && nlen == 2 && open[1] == 't' && open[2] >= '0' && open[2] <= '2') {
      snprintf(num, sizeof num, "%g", r->t[open[2] - '0']);
      done = 1;
    }
    for (size_t q = 0; !done && m != NULL && q < sizeof quantities / sizeof quantities[0]; q++) {
      if (strlen(quantities[q].name) == nlen && strncmp(quantities[q].name, open + 1, nlen) == 0) {
        double v = quantities[q].value(m);
        if (isfinite(v)) snprintf(num, sizeof num, "%.*f", quantities[q].decimals, v);
        else snprintf(num, sizeof num, "n/a");
        done = 1;
      }
    }
    if (done) append(buf, len, &pos, num, strlen(num));
    else append(buf, len, &pos, open, (size_t)(close - open + 1));
    p = close + 1;
  }
}

/* ---- diagnosis ----------------------------------------------------------------------------------- */

void pd_diagnose(const pd_metrics_t *m, pd_verdict_t *v) {
  if (v == NULL) return;
  memset(v, 0, sizeof(*v));
  v->bottleneck = PD_BOTTLENECK_COMPUTE;
  if (m == NULL) {
    snprintf(v->rule, sizeof v->rule, "%s", default_rule);
    snprintf(v->evidence, sizeof v->evidence, "no metrics");
    return;
  }
  for (size_t i = 0; i < NRULES; i++) {
    if (rules[i].fires(m, &rules[i])) {
      v->bottleneck = rules[i].bottleneck;
      snprintf(v->rule, sizeof v->rule, "%s", rules[i].name);
      expand(v->evidence, sizeof v->evidence, rules[i].evidence, m, &rules[i]);
      return;
    }
  }
  snprintf(v->rule, sizeof v->rule, "%s", default_rule);
  expand(v->evidence, sizeof v->evidence, default_evidence, m, NULL);
}

void pd_diagnose_print_rules(FILE *out) {
  if (out == NULL) return;
  char cond[512], evid[512];
  fprintf(out, "| # | rule | bottleneck | fires when | evidence |\n");
  fprintf(out, "|---|---|---|---|---|\n");
  for (size_t i = 0; i < NRULES; i++) {
    expand(cond, sizeof cond, rules[i].condition, NULL, &rules[i]);
    /* evidence placeholders stay as names: the README shows which numbers are quoted */
    expand(evid, sizeof evid, rules[i].evidence, NULL, NULL);
    fprintf(out, "| %zu | `%s` | `%s` | %s | %s |\n", i + 1, rules[i].name,
            pd_bottleneck_name(rules[i].bottleneck), cond, evid);
  }
  fprintf(out, "| - | `%s` | `%s` | %s | %s |\n", default_rule,
          pd_bottleneck_name(PD_BOTTLENECK_COMPUTE), default_condition, default_evidence);
}
