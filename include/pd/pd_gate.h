/* pd_gate.h: the regression gate. Compares a run's metrics JSON (schema v1) with a
 * stored baseline of the same GPU model and scenario, and promotes runs into baselines.
 *
 *  - A TIME metric with per-step samples (step times, data wait) regresses only when its
 *    change is beyond the policy's tolerance AND a one-sided Mann-Whitney U test of the
 *    current run's samples against the baseline's pooled samples says it is significant.
 *  - COUNT metrics compare exactly or within a relative band; RATIO and sample-less TIME
 *    metrics within a band; INFO metrics are reported only.
 *  - The verdict's bottleneck must match; a metric missing from the current run fails;
 *    NaN (JSON null) never passes silently.
 *
 * The rules, the default policies and why they were chosen are in docs/gate.md.
 * Everything here reads JSON only; none of it needs a GPU.
 */
#ifndef PD_GATE_H
#define PD_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Mann-Whitney U ---------------------------------------------------------------- */

typedef struct {
  double u;           /* U of x: pairs (x_i, y_j) with x_i > y_j, a tie counting 1/2 */
  double p_greater;   /* one-sided p: x stochastically greater than y */
  double p_less;      /* one-sided p: x stochastically less than y */
  double p_two_sided; /* min(1, 2 * the smaller one-sided p) */
  double z;           /* normal approximation's z (continuity corrected); NaN when exact */
  bool exact;         /* exact null distribution (no ties, small n) or normal approximation */
} pd_mwu_t;

/* Runs the test on samples x (nx) and y (ny). Exact distribution when there are no ties
 * and nx + ny <= PD_MWU_EXACT_MAX_N, otherwise the normal approximation with tie
 * correction and continuity correction (as scipy.stats.mannwhitneyu does). Returns 0,
 * PD_EINVAL when a side is empty or holds a NaN, PD_ENOMEM. */
int pd_mwu_test(const double *x, size_t nx, const double *y, size_t ny, pd_mwu_t *out);
#define PD_MWU_EXACT_MAX_N 50

/* Returns the smallest one-sided p-value any data of these sizes can produce,
 * 1 / C(nx + ny, nx): when it exceeds alpha the test can never reject. */
double pd_mwu_min_p(size_t nx, size_t ny);

/* ---- policies ------------------------------------------------------------------------ */

/* One table per enumeration: X(NAME, JSON text). */
#define PD_CMP_DIRECTION_MAP(X)              \
  X(LOWER_IS_BETTER, "lower_is_better")      \
  X(HIGHER_IS_BETTER, "higher_is_better")    \
  X(NONE, "none")

#define PD_CMP_MODE_MAP(X)           \
  X(SIGNIFICANCE, "significance")    \
  X(EXACT, "exact")                  \
  X(BAND, "band")

/* X(NAME, text, fails the gate) */
#define PD_CMP_VERDICT_MAP(X)        \
  X(OK, "ok", false)                 \
  X(REGRESSED, "regressed", true)    \
  X(IMPROVED, "improved", false)     \
  X(NEW, "new", false)               \
  X(MISSING, "missing", true)        \
  X(SKIPPED, "skipped", false)

typedef enum {
#define PD_CMP_DIR_GEN(name, text) PD_CMP_DIR_##name,
  PD_CMP_DIRECTION_MAP(PD_CMP_DIR_GEN)
#undef PD_CMP_DIR_GEN
} pd_cmp_direction_t;

typedef enum {
#define PD_CMP_MODE_GEN(name, text) PD_CMP_MODE_##name,
  PD_CMP_MODE_MAP(PD_CMP_MODE_GEN)
#undef PD_CMP_MODE_GEN
} pd_cmp_mode_t;

typedef enum {
#define PD_CMP_VERDICT_GEN(name, text, fails) PD_CMP_##name,
  PD_CMP_VERDICT_MAP(PD_CMP_VERDICT_GEN)
#undef PD_CMP_VERDICT_GEN
  PD_CMP_VERDICT_COUNT
} pd_cmp_verdict_t;

/* Returns a static string ("lower_is_better", "band", "regressed"); never NULL. */
const char *pd_cmp_direction_name(pd_cmp_direction_t d);
const char *pd_cmp_mode_name(pd_cmp_mode_t m);
const char *pd_cmp_verdict_name(pd_cmp_verdict_t v);
/* Returns true when a row with this verdict fails the gate (regressed, missing). */
bool pd_cmp_verdict_fails(pd_cmp_verdict_t v);

typedef struct {
  pd_cmp_direction_t direction;
  pd_cmp_mode_t mode;
  double tolerance; /* significance: relative change that counts as large */
  double band;      /* band: relative change allowed either way */
  double min_abs;   /* absolute change (metric's unit) below which nothing is flagged */
} pd_cmp_policy_t;

/* Fills the default policy of a metric when no run-to-run data is known (the floors of
 * docs/gate.md). Unknown metrics are reported only (direction none). Never fails. */
void pd_cmp_policy_default(const char *metric, pd_cmp_policy_t *p);

/* Fills a metric's policy from its values in n baseline runs: the default widened to
 * cover the measured between-run spread. step_time_s (the baseline's average step time,
 * NaN when unknown) scales the absolute floors of data-wait and sample-less time
 * metrics. */
void pd_cmp_policy_derive(const char *metric, const double *run_values, size_t n,
                          double step_time_s, pd_cmp_policy_t *p);

/* Returns the per-step sample array ("step_times_s", "dataloader_wait_s") a metric is
 * computed from, or NULL when it has none. Static storage. */
const char *pd_cmp_metric_samples_key(const char *metric);

/* Statistics the gate derives from the per-step samples itself, beside the tool's
 * metrics. step_time_p10_s, the 10th percentile of a run's step times, moves with a
 * slowdown of every step but hardly with bursts of slow steps from host interference,
 * which make the mean and median wander between runs (docs/gate.md). */
typedef struct {
  const char *name;    /* row name, and its key in a baseline's "policy" */
  const char *samples; /* the per-step array it is computed from */
  double q;            /* the quantile of each run's samples */
} pd_cmp_derived_t;

/* Returns the derived statistics' table and its length (static storage). */
const pd_cmp_derived_t *pd_cmp_derived_metrics(size_t *count);

/* Fills vals (at most cap) with the q-quantile of each run's slice of doc[samples]: a
 * baseline's pooled samples are split by its runs[].steps, a plain metrics JSON is one
 * run. Returns the number of values written; 0 when the samples are absent or empty. */
size_t pd_cmp_run_quantiles(const cJSON *doc, const char *samples, double q, double *vals,
                            size_t cap);

/* ---- documents ------------------------------------------------------------------------- */

/* Reads and validates a metrics JSON or baseline (an object, schema_version 1, metrics an
 * object, device.name a string). Returns 0 and *out (free with cJSON_Delete), or
 * PD_EIO / PD_EPARSE / PD_ESCHEMA with one line in why naming the file and the fault. */
int pd_cmp_doc_load(const char *path, cJSON **out, char *why, size_t whylen);

/* Writes the GPU slug of a device name ("NVIDIA H100 80GB HBM3" ->
 * "nvidia-h100-80gb-hbm3": lower case, runs of other characters become one '-').
 * Returns 0, or PD_EINVAL when the name gives an empty slug or does not fit. */
int pd_gpu_slug(const char *device_name, char *out, size_t outlen);

/* ---- comparison ------------------------------------------------------------------------ */

typedef struct {
  double alpha; /* significance level of the one-sided tests; 0.01 by default */
} pd_cmp_options_t;

typedef struct {
  char metric[96];
  bool text;                /* the verdict row: compares base_text with now_text */
  char base_text[64];
  char now_text[64];
  pd_cmp_policy_t policy;
  double base;              /* baseline value; NaN when absent or null */
  double now;               /* current value; NaN when absent or null */
  double change_pct;        /* (now - base) / |base| * 100; +-Inf from zero; NaN: n/a */
  double p_value;           /* one-sided p in the direction of the change; NaN: no test */
  size_t n_base, n_now;     /* samples the test used (0: no test) */
  pd_cmp_verdict_t verdict;
  char note[224];
} pd_cmp_row_t;

typedef struct {
  char scenario[64];
  char device[256];
  char current_path[512];
  char baseline_path[512];
  double alpha;
  size_t baseline_runs;     /* runs pooled in the baseline (1 for a plain metrics JSON) */
  pd_cmp_row_t *rows;       /* owned; free with pd_cmp_report_free() */
  size_t nrows;
  size_t counts[PD_CMP_VERDICT_COUNT];
  bool failed;              /* some row regressed or is missing */
  char config_note[512];    /* config keys that differ (reported, not failed); "" if none */
} pd_cmp_report_t;

/* Compares current with baseline (both from pd_cmp_doc_load). Returns 0 with *rep filled
 * (rep->failed says whether the gate fails); PD_EMISMATCH when they are not comparable
 * (different GPU model or scenario) or PD_EPARSE for a malformed policy or sample array,
 * with why explaining; PD_ENOMEM. Free *rep with pd_cmp_report_free() in every case. */
int pd_cmp_compare(const cJSON *current, const cJSON *baseline, const pd_cmp_options_t *opt,
                   pd_cmp_report_t *rep, char *why, size_t whylen);
void pd_cmp_report_free(pd_cmp_report_t *rep);

/* Prints the table (metric, baseline, now, change %, p-value, verdict, note) and a
 * summary line. */
void pd_cmp_report_print(FILE *out, const pd_cmp_report_t *rep);
/* Returns the report as a JSON object (caller frees with cJSON_Delete), NULL on OOM. */
cJSON *pd_cmp_report_to_json(const pd_cmp_report_t *rep);
/* Writes the report as GitHub-flavoured Markdown (for $GITHUB_STEP_SUMMARY). */
void pd_cmp_report_write_markdown(FILE *out, const pd_cmp_report_t *rep);

/* ---- promotion ---------------------------------------------------------------------------- */

typedef struct {
  const char *git_commit; /* NULL: "unknown" */
  const char *command;    /* the command that produced the runs; NULL: "unknown" */
  const char *date;       /* ISO 8601; NULL: now, UTC */
} pd_promote_info_t;

/* Merges n metrics JSONs of one GPU model and scenario (or earlier baselines) into a
 * baseline: per-step samples concatenated, "runs" with each run's metrics, metrics the
 * mean over runs, the most frequent verdict, a policy derived from the between-run
 * spread and provenance. Returns 0 and *out (free with cJSON_Delete), or PD_EMISMATCH /
 * PD_EPARSE with why naming the input at fault, PD_ENOMEM. */
int pd_baseline_promote(const cJSON *const *runs, const char *const *names, size_t n,
                        const pd_promote_info_t *info, cJSON **out, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif /* PD_GATE_H */
