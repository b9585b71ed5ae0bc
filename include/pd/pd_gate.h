/* pd_gate.h: the regression gate (library pd_gate). Two comparisons of metrics JSONs
 * (schema 1 or 2; PD_METRICS_SCHEMA_VERSION is written), and the promotion of runs into
 * baselines:
 *
 *  - STORED: a run against the stored baseline of its GPU model and scenario, which pools
 *    runs from several freshly started hosts. Each metric is judged by its class
 *    (pd_stats.h): device time within a tight band, counts exactly, host times with a
 *    tolerance learned from the spread between hosts (only gross changes fail), with a
 *    one-sided Mann-Whitney U test of the run's per-step samples against the baseline's
 *    pooled samples where there are samples.
 *  - AB: runs of a base and a head build made interleaved on one machine (round i =
 *    base[i], head[i]); device and host metrics by a paired permutation test over the
 *    rounds on the better half of each side's runs, counts exactly.
 *  - In both, the verdict's bottleneck must match; a metric missing from the current run
 *    fails; NaN (JSON null) never passes silently; a regression is explained by the
 *    kernels and ops whose time per step changed most (the analyzer's diff of the runs'
 *    top_kernels and top_ops tables).
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

#include "pd/pd_stats.h"

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
  pd_metric_class_t cls;  /* the metric's class (pd_stats.h); the gate's own p10: host */
  pd_cmp_direction_t direction;
  pd_cmp_mode_t mode;
  double tolerance; /* significance: relative change that counts as large */
  double band;      /* band: relative change allowed either way */
  double min_abs;   /* absolute change (metric's unit) below which nothing is flagged */
} pd_cmp_policy_t;

/* Which comparison a policy serves. */
typedef enum {
  PD_CMP_STORED = 0, /* a run against a stored baseline pooled over several hosts */
  PD_CMP_AB          /* base and head runs interleaved on one machine */
} pd_cmp_setting_t;

/* Returns a metric's class: the core's table, host for the gate's derived statistics,
 * info for a metric this build does not know. */
pd_metric_class_t pd_cmp_metric_class(const char *metric);

/* The stored comparison's per-kernel floor of the kernel time per step: min_abs is raised
 * to 0.06 us per kernel of the baseline (kernels_per_step). A kernel's measured duration
 * has a part that differs between hosts of one GPU model (40-52 ns per kernel measured
 * on tiny_ops' 537 kernels of 1.3 us, docs/gate.md), which a band in percent of a few
 * long kernels does not cover; for 25 kernels of 200 us it changes nothing. Other metrics,
 * the A/B setting (one machine) and unknown counts leave p as it is. */
void pd_cmp_policy_kernel_floor(const char *metric, pd_cmp_setting_t setting, double kernels_per_step,
                                pd_cmp_policy_t *p);

/* Fills the default policy of a metric in a setting (the floors of docs/gate.md).
 * step_time_s (the base side's average step time; NaN when unknown) scales the absolute
 * floors of data wait and sample-less host times. Unknown metrics are reported only
 * (direction none). Never fails. */
void pd_cmp_policy_default(const char *metric, pd_cmp_setting_t setting, double step_time_s,
                           pd_cmp_policy_t *p);

/* Fills a metric's stored-baseline policy from its values in n pooled runs: the default
 * widened to 4 between-run sd and to twice the largest shift of one host's median from
 * the median of all runs, within the class's cap (host times: a step twice as slow
 * still fails). host_of_run[i] is run i's host index (NULL: all one host). COUNT
 * metrics that varied get a band. */
void pd_cmp_policy_derive(const char *metric, const double *run_values, const int *host_of_run,
                          size_t n, double step_time_s, pd_cmp_policy_t *p);

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

/* pd_cmp_options_t.primary's value that lets the A/B choose its primary host metric from
 * the runs (pd_cmp_ab_auto_primary); scripts/gpu_ab.sh passes it. */
#define PD_CMP_PRIMARY_AUTO "auto"

/* The A/B's primary host metric for runs of scenario that all carry untraced warmup
 * samples (untraced) and all carry profiler_demo --warmup_probe's series (probed):
 * untraced_step_p50_s where probed, except clean's untraced_step_p10_s; untraced_step_p10_s
 * where untraced only; step_time_p10_s otherwise. *why (may be NULL) gets one phrase saying
 * which case applied. Static strings. docs/gate.md ("Measured (2026-11-29, later)") has the
 * recordings each choice was measured on. */
const char *pd_cmp_ab_auto_primary(const char *scenario, bool untraced, bool probed, const char **why);

/* Fills vals (at most cap) with the q-quantile of each run's slice of doc[samples]: a
 * baseline's pooled samples are split by its runs[].steps, a plain metrics JSON is one
 * run. Returns the number of values written; 0 when the samples are absent or empty. */
size_t pd_cmp_run_quantiles(const cJSON *doc, const char *samples, double q, double *vals,
                            size_t cap);

/* ---- documents ------------------------------------------------------------------------- */

/* The largest metrics JSON or baseline pd_cmp_doc_load() reads (checked before it allocates). */
#define PD_CMP_MAX_FILE_BYTES (256 << 20)

/* The most steps a metrics JSON, a baseline or one of its runs may count. */
#define PD_CMP_MAX_STEPS 100000000

/* Reads and validates a metrics JSON or baseline (an object, schema_version 1, 2 or 3, metrics
 * an object, device.name a string, per-step samples finite and >= 0, step counts integers
 * in range, a baseline's runs' steps adding up to its samples). Returns 0 and *out (free
 * with cJSON_Delete), or PD_EIO / PD_ENOTREG / PD_ETOOBIG / PD_EPARSE / PD_ESCHEMA /
 * PD_ENOMEM with one line in why naming the file and the fault. */
int pd_cmp_doc_load(const char *path, cJSON **out, char *why, size_t whylen);
/* The validation half of pd_cmp_doc_load() on a parsed document (the one validator of the
 * comparison's and the promotion's documents), plus: every metric (of "metrics" and of
 * each run's) a number or null. path names the document in why. Returns 0, PD_EPARSE or
 * PD_ESCHEMA with one line in why. */
int pd_cmp_doc_check(const cJSON *doc, const char *path, char *why, size_t whylen);

/* Writes the GPU slug of a device name ("NVIDIA H100 80GB HBM3" ->
 * "nvidia-h100-80gb-hbm3": lower case, runs of other characters become one '-').
 * Returns 0, or PD_EINVAL when the name gives an empty slug or does not fit. */
int pd_gpu_slug(const char *device_name, char *out, size_t outlen);

/* ---- comparison ------------------------------------------------------------------------ */

typedef struct {
  double alpha; /* significance level of the one-sided tests; 0.01 by default */
  /* How messages name the two files of pd_cmp_compare() (their paths); NULL: "current",
   * "baseline". */
  const char *current_name;
  const char *baseline_name;
  /* A/B only (pd_cmp_ab). keep: the share of each side's runs its statistic averages, the
   * better ones (0: 0.5, the better half; 1: every run): a process in a slow machine state
   * falls out. */
  double keep;
  /* Host times of each run divided by its host_calibration (the launching thread's time
   * for a fixed CPU workload, mean of start and end) and multiplied by the median over
   * all runs: a process whose CPU runs slower is scaled back. Every run must carry it. */
  bool normalize_host;
  /* Host times adjusted for each run's traced-call cost (profiler_cost.calibration.
   * ns_per_cuda_call, timed by the profiler in the same process at its start) by analysis
   * of covariance: the pooled within-side slope of log value on log call cost (clamped to
   * [0, 2]) moves each run to the mean call cost of all runs. The slow state of a process
   * on these hosts raises that cost with the step (docs/gate.md); a change under test that
   * does not touch the profiler leaves it alone. Every run must carry it. The untraced
   * rows (untraced_step_p50_s, _p10_s) take the untraced launch time instead, which tracks
   * the same state without CUPTI: the median of warmup_probe_launch_ns (profiler_demo
   * --warmup_probe, timed after every judged step, so it follows the host's slow episodes
   * while they run) where every run has it, else calibration.ns_per_launch_untraced (timed
   * once, after the warmup) where every run has that. */
  bool adjust_call_cost;
  /* A two-sample permutation test (the 2n runs split into two groups of n in every way,
   * exact up to 9 rounds, else 65536 drawn from a fixed seed) instead of the paired one
   * (within-round swaps: 2^rounds labellings, so with 8 rounds p < 0.004 needs every round
   * slower). A process's slow state is its own, not its round's (docs/gate.md), so the
   * pairing buys no precision and costs resolution. */
  bool unpaired;
  /* NULL: every host-class row may fail. Else only this host metric (a row name such as
   * "step_time_p10_s") gates among the host rows; the others are reported: one test of
   * host time per A/B instead of several at alpha each. */
  const char *primary;
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
  /* A/B, host rows: the smallest one-sided slowdown (fraction) this A/B would have caught
   * with 80% power at its alpha, simulated on its own runs, and never below the tolerance;
   * +Inf when none up to 100% would be; NaN: not computed (other rows, stored). */
  double mde_fraction;
  pd_cmp_verdict_t verdict;
  char note[224];
} pd_cmp_row_t;

/* One line of a regression's explanation: a kernel (device time) or a host op (self CPU
 * time) whose time per step changed between the two sides. */
typedef struct {
  char name[160];
  bool op;              /* host op (top_ops, self CPU time); else kernel (top_kernels) */
  double base_us, now_us;       /* time per step, mean over each side's runs */
  double base_calls, now_calls; /* calls per step */
  /* The side's op tables were cut at --top_n (files without "top_ops_complete") and may
   * miss this op in some documents: its figure there is a lower bound, not a measurement. */
  bool base_cut, now_cut;
} pd_cmp_change_t;

#define PD_CMP_MAX_CHANGES 8

typedef struct {
  pd_cmp_setting_t setting;
  char scenario[64];
  char device[256];
  char current_path[512];   /* STORED: the run; AB: "N head runs" */
  char baseline_path[512];  /* STORED: the baseline; AB: "N base runs" */
  double alpha;
  size_t baseline_runs;     /* runs pooled in the baseline (1 for a plain metrics JSON);
                               AB: rounds */
  size_t baseline_hosts;    /* distinct hosts among the baseline's runs (0: not recorded) */
  pd_cmp_row_t *rows;       /* owned; free with pd_cmp_report_free() */
  size_t nrows;
  size_t counts[PD_CMP_VERDICT_COUNT];
  bool failed;              /* some row regressed or is missing */
  /* A/B: gating rows worse by more than half their tolerance and not significant (beyond
   * it, or within it): more rounds would decide them (scripts/gpu_ab.sh runs more). */
  size_t undecided;
  double keep;              /* A/B: the statistic's share of runs (pd_cmp_options_t.keep) */
  bool normalized;          /* A/B: host times normalised by the runs' host_calibration */
  bool adjusted;            /* A/B: host times adjusted for the runs' traced-call cost */
  /* A/B with --adjust: why the traced rows were left unadjusted ("" when they were not):
   * a run whose calibration read no positive traced-call cost (tracing added nothing
   * measurable to its calls, or a build without it), while every run has the untraced
   * launch the untraced rows (the primary by default) are adjusted along. */
  char adjust_note[192];
  /* A/B with --adjust: what the untraced rows were adjusted along: "warmup_probe_launch_ns"
   * (the median of profiler_demo --warmup_probe's launch times, where every run has them),
   * "ns_per_launch_untraced" (the profiler's calibration), or "" (not adjusted). */
  char untraced_covariate[32];
  bool unpaired;            /* A/B: the two-sample permutation test, not the paired one */
  char primary[96];         /* A/B: the one gating host metric; "" when all gate */
  /* A/B with --primary auto: why that metric was chosen (pd_cmp_ab_auto_primary); "" when
   * the metric was given. */
  char primary_why[96];
  char config_note[512];    /* config keys that differ (reported, not failed); "" if none */
  /* What changed most, largest first: kernels by device time, host ops by self CPU time
   * per step (from the runs' top_kernels and top_ops). Filled for every comparison;
   * printed when a metric regressed or improved. */
  pd_cmp_change_t changes[PD_CMP_MAX_CHANGES];
  size_t nchanges;
} pd_cmp_report_t;

/* Compares current with baseline (both from pd_cmp_doc_load). Returns 0 with *rep filled
 * (rep->failed says whether the gate fails); PD_EMISMATCH when they are not comparable
 * (different GPU model or scenario) or PD_EPARSE for a malformed policy or sample array,
 * with why explaining; PD_ENOMEM. Free *rep with pd_cmp_report_free() in every case. */
int pd_cmp_compare(const cJSON *current, const cJSON *baseline, const pd_cmp_options_t *opt,
                   pd_cmp_report_t *rep, char *why, size_t whylen);
void pd_cmp_report_free(pd_cmp_report_t *rep);

/* Compares head runs with base runs of two builds made interleaved on one machine: base[i]
 * and head[i] are round i (nbase == nhead >= 2). Each metric's value per run (its
 * metrics entry, or the gate's p10 of its step times; host times optionally normalised
 * by the run's host_calibration, opt->normalize_host) is compared on the better half
 * (opt->keep) of each side's runs (a whole process landing in a slow machine state must
 * not decide),
 * with a one-sided paired permutation test over the rounds (exact up to 16 rounds, else
 * 2^16 random relabellings from a fixed seed); regressed when the change is beyond the
 * AB policy and p < alpha (with opt->primary, only that host row may fail; gating rows
 * worse by more than half the tolerance but not significant are counted in
 * rep->undecided). Each host row states its
 * minimum detectable effect (mde_fraction). Counts by their median over the runs, exactly. With fewer
 * rounds than can reach alpha (2^-rounds > alpha) timing rows are skipped, said why.
 * Returns 0 with *rep filled, PD_EINVAL (rounds differ or < 2), PD_EMISMATCH (GPU or
 * scenario differ among the runs), PD_EPARSE, PD_ENOMEM, with why naming the file by
 * names[i] (base first, then head). Free *rep with pd_cmp_report_free() in every case. */
int pd_cmp_ab(const cJSON *const *base, size_t nbase, const cJSON *const *head, size_t nhead,
              const char *const *names, const pd_cmp_options_t *opt, pd_cmp_report_t *rep, char *why,
              size_t whylen);

/* Fills rep->changes from the two sides' kernel and op tables: top_kernels' device time
 * and top_ops' self CPU time, summed over each side's documents and divided by their
 * "steps", paired by name with the analyzer's diff (pd_diff_build_rows), largest change
 * first; rows that moved less than 0.5 us per step are left out. A document without the
 * tables adds nothing. Returns 0 or PD_ENOMEM. */
int pd_cmp_explain(const cJSON *const *base, size_t nbase, const cJSON *const *now, size_t nnow,
                   pd_cmp_report_t *rep);

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
