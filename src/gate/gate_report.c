/* gate_report.c: the comparison report as a console table, as JSON and as Markdown
 * (for $GITHUB_STEP_SUMMARY). All three show the same rows: metric, baseline, now,
 * change %, p-value, verdict and a note saying why.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"

#include "gate_internal.h"

/* Formats a value cell: "-" when the side has no value, "null" for NaN. */
static const char *rep_value(const pd_cmp_row_t *r, bool base_side, char *buf, size_t len) {
  if (r->text) {
    snprintf(buf, len, "%s", base_side ? r->base_text : r->now_text);
    return buf;
  }
  double v = base_side ? r->base : r->now;
  bool absent = base_side ? r->verdict == PD_CMP_NEW : r->verdict == PD_CMP_MISSING;
  if (absent)
    snprintf(buf, len, "-");
  else if (isnan(v))
    snprintf(buf, len, "null");
  else
    snprintf(buf, len, "%.6g", v);
  return buf;
}

static const char *rep_change(const pd_cmp_row_t *r, char *buf, size_t len) {
  if (isnan(r->change_pct))
    snprintf(buf, len, "-");
  else if (isinf(r->change_pct))
    snprintf(buf, len, "%sinf", r->change_pct > 0 ? "+" : "-");
  else
    snprintf(buf, len, "%+.2f", r->change_pct);
  return buf;
}

static const char *rep_p(const pd_cmp_row_t *r, char *buf, size_t len) {
  if (isnan(r->p_value))
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%.2g", r->p_value);
  return buf;
}

/* The A/B's minimum detectable effect cell: "4.5" (%), ">100" when none up to 100%
 * would be caught, "-" when not computed. */
static const char *rep_mde(const pd_cmp_row_t *r, char *buf, size_t len) {
  if (isnan(r->mde_fraction))
    snprintf(buf, len, "-");
  else if (isinf(r->mde_fraction))
    snprintf(buf, len, ">100");
  else
    snprintf(buf, len, "%.1f", r->mde_fraction * 100.0);
  return buf;
}

/* "PASS" or "FAIL: 2 regressed, 1 missing". */
static void rep_result(const pd_cmp_report_t *rep, char *buf, size_t len) {
  if (!rep->failed) {
    snprintf(buf, len, "PASS");
    return;
  }
  snprintf(buf, len, "FAIL: %zu regressed, %zu missing", rep->counts[PD_CMP_REGRESSED],
           rep->counts[PD_CMP_MISSING]);
}

static void rep_summary(FILE *out, const pd_cmp_report_t *rep) {
  fprintf(out, "%zu metrics:", rep->nrows);
  for (int v = 0; v < PD_CMP_VERDICT_COUNT; v++)
    if (rep->counts[v] > 0)
      fprintf(out, " %zu %s", rep->counts[v], pd_cmp_verdict_name((pd_cmp_verdict_t)v));
  if (rep->setting == PD_CMP_AB) {
    fprintf(out, "; alpha %g, A/B over %zu interleaved rounds on one machine", rep->alpha, rep->baseline_runs);
    fprintf(out, "; statistic: mean of the better %.0f%% of each side's runs%s", rep->keep * 100.0,
            rep->normalized ? ", host times normalised by each run's host calibration" : "");
    if (rep->adjusted) fprintf(out, ", host times adjusted for each run's traced-call cost");
    if (rep->adjusted && rep->adjust_note[0] != '\0') fprintf(out, " (%s)", rep->adjust_note);
    if (rep->adjusted && rep->untraced_covariate[0] != '\0')
      fprintf(out, ", untraced rows along %s", rep->untraced_covariate);
    fprintf(out, "; %s permutation test", rep->unpaired ? "two-sample" : "paired");
    if (rep->primary[0] != '\0') fprintf(out, "; primary host metric %s", rep->primary);
    if (rep->primary_why[0] != '\0') fprintf(out, " (--primary auto: %s)", rep->primary_why);
    if (rep->undecided > 0)
      fprintf(out, "; %zu undecided (worse by more than half the tolerance, not significant: more rounds would tell)", rep->undecided);
    fprintf(out, "; mde: the smallest slowdown (%%) caught with 80%% power");
  }
  else
    fprintf(out, "; alpha %g, baseline pooled from %zu run%s on %zu host%s", rep->alpha, rep->baseline_runs,
            rep->baseline_runs == 1 ? "" : "s", rep->baseline_hosts, rep->baseline_hosts == 1 ? "" : "s");
}

/* True when some numeric row moved beyond its policy: the changes explain it. */
static bool rep_moved(const pd_cmp_report_t *rep) {
  for (size_t i = 0; i < rep->nrows; i++)
    if (!rep->rows[i].text && (rep->rows[i].verdict == PD_CMP_REGRESSED || rep->rows[i].verdict == PD_CMP_IMPROVED))
      return true;
  return false;
}

/* "12.3 -> 15.1 us/step (+2.8, +23%; calls 1 -> 1)" and its kind. */
static void rep_change_text(const pd_cmp_change_t *c, char *buf, size_t len) {
  double d = c->now_us - c->base_us;
  char pct[32] = "new";
  if (c->base_us > 0) snprintf(pct, sizeof(pct), "%+.0f%%", d / c->base_us * 100.0);
  else if (c->now_us <= 0) snprintf(pct, sizeof(pct), "-");
  if (c->now_us <= 0 && c->now_calls <= 0) snprintf(pct, sizeof(pct), "gone");
  /* A cut table's missing op is not known, neither gone nor new. */
  const char *cut = c->base_cut && c->now_cut ? "; not in every table of either side (cut at --top_n): not known"
                    : c->base_cut             ? "; not in every base table (cut at --top_n): not known"
                    : c->now_cut              ? "; not in every current table (cut at --top_n): not known"
                                              : "";
  if (c->base_cut || c->now_cut) snprintf(pct, sizeof(pct), "?");
  snprintf(buf, len, "%.1f -> %.1f us/step (%+.1f us, %s; calls/step %.3g -> %.3g%s)", c->base_us, c->now_us, d, pct,
           c->base_calls, c->now_calls, cut);
}

static const char *rep_change_kind(const pd_cmp_change_t *c) {
  return c->op ? "op (self CPU)" : "kernel (device)";
}

static void rep_print_changes(FILE *out, const pd_cmp_report_t *rep) {
  if (!rep_moved(rep)) return;
  if (rep->nchanges == 0) {
    fprintf(out, "\nwhat changed: no kernel or op moved by 0.5 us per step or more in the runs' tables\n");
    return;
  }
  fprintf(out, "\nwhat changed (kernel device time and op self CPU time per step, largest first):\n");
  char text[256];
  for (size_t i = 0; i < rep->nchanges; i++) {
    rep_change_text(&rep->changes[i], text, sizeof(text));
    fprintf(out, "  %-15s %-48s %s\n", rep_change_kind(&rep->changes[i]), rep->changes[i].name, text);
  }
}

void pd_cmp_report_print(FILE *out, const pd_cmp_report_t *rep) {
  char res[96];
  rep_result(rep, res, sizeof(res));
  bool ab = rep->setting == PD_CMP_AB;
  fprintf(out, "profile_compare%s: scenario %s on %s\n", ab ? " (A/B)" : "", rep->scenario, rep->device);
  if (rep->current_path[0] != '\0')
    fprintf(out, ab ? "  base %s\n  head %s\n" : "  current  %s\n  baseline %s\n",
            ab ? rep->baseline_path : rep->current_path, ab ? rep->current_path : rep->baseline_path);
  if (rep->config_note[0] != '\0') fprintf(out, "  config differs: %s\n", rep->config_note);
  fprintf(out, "%-30s %-6s %14s %14s %10s %8s", "metric", "class", ab ? "base" : "baseline", ab ? "head" : "now",
          "change %", "p-value");
  if (ab) fprintf(out, " %6s", "mde %");
  fprintf(out, " %-9s  %s\n", "verdict", "note");
  char b[72], n[72], c[32], p[32], m[32];
  for (size_t i = 0; i < rep->nrows; i++) {
    const pd_cmp_row_t *r = &rep->rows[i];
    fprintf(out, "%-30s %-6s %14s %14s %10s %8s", r->metric, r->text ? "verdict" : pd_metric_class_name(r->policy.cls),
            rep_value(r, true, b, sizeof(b)), rep_value(r, false, n, sizeof(n)), rep_change(r, c, sizeof(c)),
            rep_p(r, p, sizeof(p)));
    if (ab) fprintf(out, " %6s", rep_mde(r, m, sizeof(m)));
    fprintf(out, " %-9s  %s\n", pd_cmp_verdict_name(r->verdict), r->note);
  }
  rep_summary(out, rep);
  fputc('\n', out);
  rep_print_changes(out, rep);
  fprintf(out, "\nresult: %s\n", res);
}

void cmp_add_number_or_null(cJSON *obj, const char *key, double v) {
  if (isfinite(v))
    cJSON_AddNumberToObject(obj, key, v);
  else
    cJSON_AddNullToObject(obj, key);
}

/* A report's text field: "" is written as null. */
static void rep_add_text_or_null(cJSON *obj, const char *key, const char *text) {
  if (text[0] != '\0')
    cJSON_AddStringToObject(obj, key, text);
  else
    cJSON_AddNullToObject(obj, key);
}

cJSON *pd_cmp_report_to_json(const pd_cmp_report_t *rep) {
  cJSON *root = cJSON_CreateObject();
  if (root == NULL) return NULL;
  char res[96];
  rep_result(rep, res, sizeof(res));
  cJSON_AddStringToObject(root, "tool", "profile_compare");
  cJSON_AddStringToObject(root, "version", PD_VERSION_STRING);
  cJSON_AddStringToObject(root, "scenario", rep->scenario);
  cJSON_AddStringToObject(root, "device", rep->device);
  cJSON_AddStringToObject(root, "current", rep->current_path);
  cJSON_AddStringToObject(root, "baseline", rep->baseline_path);
  cJSON_AddNumberToObject(root, "alpha", rep->alpha);
  cJSON_AddStringToObject(root, "setting", rep->setting == PD_CMP_AB ? "ab" : "stored");
  cJSON_AddNumberToObject(root, "baseline_runs", (double)rep->baseline_runs);
  cJSON_AddNumberToObject(root, "baseline_hosts", (double)rep->baseline_hosts);
  cJSON_AddStringToObject(root, "result", rep->failed ? "fail" : "pass");
  cJSON_AddStringToObject(root, "summary", res);
  cJSON_AddStringToObject(root, "config_differences", rep->config_note);
  if (rep->setting == PD_CMP_AB) {
    cJSON_AddNumberToObject(root, "undecided", (double)rep->undecided);
    cJSON *stat = cJSON_AddObjectToObject(root, "statistic");
    if (stat != NULL) {
      cJSON_AddNumberToObject(stat, "keep", rep->keep);
      cJSON_AddBoolToObject(stat, "normalized_by_host_calibration", rep->normalized);
      cJSON_AddBoolToObject(stat, "adjusted_for_call_cost", rep->adjusted);
      rep_add_text_or_null(stat, "adjust_note", rep->adjust_note);
      rep_add_text_or_null(stat, "untraced_covariate", rep->untraced_covariate);
      cJSON_AddStringToObject(stat, "test", rep->unpaired ? "two_sample_permutation" : "paired_permutation");
      rep_add_text_or_null(stat, "primary", rep->primary);
      rep_add_text_or_null(stat, "primary_auto", rep->primary_why);
    }
  }
  cJSON *counts = cJSON_AddObjectToObject(root, "counts");
  for (int v = 0; counts != NULL && v < PD_CMP_VERDICT_COUNT; v++)
    cJSON_AddNumberToObject(counts, pd_cmp_verdict_name((pd_cmp_verdict_t)v),
                            (double)rep->counts[v]);
  cJSON *rows = cJSON_AddArrayToObject(root, "rows");
  for (size_t i = 0; rows != NULL && i < rep->nrows; i++) {
    const pd_cmp_row_t *r = &rep->rows[i];
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) break;
    cJSON_AddItemToArray(rows, o);
    cJSON_AddStringToObject(o, "metric", r->metric);
    cJSON_AddStringToObject(o, "class", r->text ? "verdict" : pd_metric_class_name(r->policy.cls));
    if (r->text) {
      cJSON_AddStringToObject(o, "baseline", r->base_text);
      cJSON_AddStringToObject(o, "now", r->now_text);
    } else {
      cmp_add_number_or_null(o, "baseline", r->base);
      cmp_add_number_or_null(o, "now", r->now);
    }
    /* change_pct: +-Inf from a zero baseline is written as a string so it is not lost. */
    if (isinf(r->change_pct))
      cJSON_AddStringToObject(o, "change_pct", r->change_pct > 0 ? "+inf" : "-inf");
    else
      cmp_add_number_or_null(o, "change_pct", r->change_pct);
    cmp_add_number_or_null(o, "p_value", r->p_value);
    /* +Inf (no slowdown up to 100% would be caught) as a string, like change_pct */
    if (isinf(r->mde_fraction))
      cJSON_AddStringToObject(o, "mde_fraction", "+inf");
    else
      cmp_add_number_or_null(o, "mde_fraction", r->mde_fraction);
    cJSON_AddNumberToObject(o, "n_baseline", (double)r->n_base);
    cJSON_AddNumberToObject(o, "n_now", (double)r->n_now);
    cJSON_AddStringToObject(o, "verdict", pd_cmp_verdict_name(r->verdict));
    cJSON *pol = cJSON_AddObjectToObject(o, "policy");
    if (pol != NULL) {
      cJSON_AddStringToObject(pol, "direction", pd_cmp_direction_name(r->policy.direction));
      cJSON_AddStringToObject(pol, "mode", pd_cmp_mode_name(r->policy.mode));
      cJSON_AddNumberToObject(pol, "tolerance", r->policy.tolerance);
      cJSON_AddNumberToObject(pol, "band", r->policy.band);
      cJSON_AddNumberToObject(pol, "min_abs", r->policy.min_abs);
    }
    cJSON_AddStringToObject(o, "note", r->note);
  }
  cJSON *changes = cJSON_AddArrayToObject(root, "changes");
  for (size_t i = 0; changes != NULL && i < rep->nchanges; i++) {
    const pd_cmp_change_t *c = &rep->changes[i];
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) break;
    cJSON_AddItemToArray(changes, o);
    cJSON_AddStringToObject(o, "kind", c->op ? "op" : "kernel");
    cJSON_AddStringToObject(o, "name", c->name);
    cmp_add_number_or_null(o, "base_us_per_step", c->base_us);
    cmp_add_number_or_null(o, "now_us_per_step", c->now_us);
    cmp_add_number_or_null(o, "base_calls_per_step", c->base_calls);
    cmp_add_number_or_null(o, "now_calls_per_step", c->now_calls);
    cJSON_AddBoolToObject(o, "base_table_cut", c->base_cut);
    cJSON_AddBoolToObject(o, "now_table_cut", c->now_cut);
  }
  return root;
}

/* Writes text for a Markdown table cell: '|' escaped, newlines as spaces. */
static void rep_md_cell(FILE *out, const char *s) {
  for (; *s != '\0'; s++) {
    if (*s == '|')
      fputs("\\|", out);
    else if (*s == '\n' || *s == '\r')
      fputc(' ', out);
    else
      fputc(*s, out);
  }
}

void pd_cmp_report_write_markdown(FILE *out, const pd_cmp_report_t *rep) {
  char res[96];
  rep_result(rep, res, sizeof(res));
  bool ab = rep->setting == PD_CMP_AB;
  fprintf(out, "### profile_compare%s: `", ab ? " (A/B)" : "");
  rep_md_cell(out, rep->scenario);
  fprintf(out, "` on ");
  rep_md_cell(out, rep->device);
  fprintf(out, ": **%s**\n\n", res);
  if (rep->config_note[0] != '\0') {
    fprintf(out, "Config differs from the baseline: ");
    rep_md_cell(out, rep->config_note);
    fprintf(out, "\n\n");
  }
  fprintf(out, "| metric | class | %s | %s | change %% | p-value |%s verdict | note |\n", ab ? "base" : "baseline",
          ab ? "head" : "now", ab ? " mde % |" : "");
  fprintf(out, "|---|---|---:|---:|---:|---:|%s---|---|\n", ab ? "---:|" : "");
  char b[72], n[72], c[32], p[32], m[32];
  for (size_t i = 0; i < rep->nrows; i++) {
    const pd_cmp_row_t *r = &rep->rows[i];
    fprintf(out, "| `%s` | %s | ", r->metric, r->text ? "verdict" : pd_metric_class_name(r->policy.cls));
    rep_md_cell(out, rep_value(r, true, b, sizeof(b)));
    fprintf(out, " | ");
    rep_md_cell(out, rep_value(r, false, n, sizeof(n)));
    fprintf(out, " | %s | %s |", rep_change(r, c, sizeof(c)), rep_p(r, p, sizeof(p)));
    if (ab) fprintf(out, " %s |", rep_mde(r, m, sizeof(m)));
    fprintf(out, " %s%s%s | ", pd_cmp_verdict_fails(r->verdict) ? "**" : "", pd_cmp_verdict_name(r->verdict),
            pd_cmp_verdict_fails(r->verdict) ? "**" : "");
    rep_md_cell(out, r->note);
    fprintf(out, " |\n");
  }
  fprintf(out, "\n");
  rep_summary(out, rep);
  fprintf(out, ".\n");
  if (rep_moved(rep) && rep->nchanges > 0) {
    fprintf(out, "\n**What changed** (kernel device time and op self CPU time per step, largest first):\n\n");
    fprintf(out, "| kind | name | change |\n|---|---|---|\n");
    char text[256];
    for (size_t i = 0; i < rep->nchanges; i++) {
      rep_change_text(&rep->changes[i], text, sizeof(text));
      fprintf(out, "| %s | `", rep_change_kind(&rep->changes[i]));
      rep_md_cell(out, rep->changes[i].name);
      fprintf(out, "` | %s |\n", text);
    }
  }
}
