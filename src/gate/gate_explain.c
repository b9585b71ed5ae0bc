/* gate_explain.c: what changed, in kernels and ops, between the two sides of a
 * comparison. A metric that regressed says how much; this says where: the kernels whose
 * device time per step moved most and the host ops whose self CPU time per step moved
 * most, new and gone ones included. It reads the runs' top_kernels and top_ops tables
 * (the profiler's key averages of the traces, kept in every metrics JSON and pooled in
 * a baseline) and pairs them with the analyzer's diff, so `profile_analyze --diff` and
 * the gate agree on what changed.
 *
 * Files written before top_ops was whole kept only the --top_n heaviest ops: an op near
 * the cut is then missing from some runs' tables, which a sum reads as fewer calls or
 * gone. Such a side's figure of the op is marked (base_cut, now_cut), and the report
 * says "not known" rather than "gone".
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_analyze.h"
#include "pd/pd_common.h"
#include "pd/pd_gate.h"

#include "gate_internal.h"

/* Changes smaller than this (ns per step) are noise in any table. */
#define EXPLAIN_MIN_NS 500.0

/* The most documents of a side whose op table is remembered as cut; beyond it every op
 * of a side with a cut table counts as not known. */
#define EXPLAIN_MAX_CUT 64

typedef struct {
  pd_diff_input_t *v;
  size_t n, cap;
  double steps;
  /* Documents whose top_ops may have been cut at --top_n (no "top_ops_complete": true):
   * an op missing from one of them is not known there, not gone. */
  const cJSON *cut[EXPLAIN_MAX_CUT];
  size_t ncut;
  bool cut_overflow; /* more cut documents than cut[] holds */
} explain_side_t;

/* True when the side's figure of this op may be short: one of its cut op tables lacks
 * the op (a plain run), or is a pooled baseline's sum over cut tables (any op may be
 * missing from some of its runs). */
static bool explain_op_cut(const explain_side_t *s, const char *name) {
  if (s->cut_overflow) return true;
  for (size_t i = 0; i < s->ncut; i++) {
    if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(s->cut[i], "runs"))) return true;
    bool found = false;
    const cJSON *row = NULL;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(s->cut[i], "top_ops")) {
      const char *nm = cmp_string_at(row, "name", NULL);
      if (nm != NULL && strcmp(nm, name) == 0) {
        found = true;
        break;
      }
    }
    if (!found) return true;
  }
  return false;
}

static int explain_push(explain_side_t *s, const char *name, pd_dev_type_t type, double calls, double ns) {
  if (s->n == s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 64;
    pd_diff_input_t *v = realloc(s->v, ncap * sizeof(*v));
    if (v == NULL) return PD_ENOMEM;
    s->v = v;
    s->cap = ncap;
  }
  s->v[s->n++] = (pd_diff_input_t){.name = name, .type = type, .calls = calls, .total_ns = ns};
  return 0;
}

/* Returns the number at row[key] when it is finite and of a sane size, else 0. */
static double explain_num(const cJSON *row, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) && fabs(v->valuedouble) < 1e15 ? v->valuedouble : 0.0;
}

/* Adds one document's tables to a side. The steps the tables cover: "tables_steps" for
 * a pooled baseline, "steps" for a run; a document without a usable count adds nothing. */
static int explain_add_doc(explain_side_t *s, const cJSON *doc) {
  bool pooled = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(doc, "runs"));
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(doc, pooled ? "tables_steps" : "steps");
  if (!cJSON_IsNumber(st) || !(st->valuedouble >= 1.0 && st->valuedouble <= 1e9)) return 0;
  static const struct {
    const char *key, *time;
    pd_dev_type_t type;
  } k_tables[] = {{"top_kernels", "self_cuda_time_us", PD_DEV_KERNEL}, {"top_ops", "self_cpu_time_us", PD_DEV_RANGE}};
  bool any = false;
  for (size_t k = 0; k < 2; k++) {
    const cJSON *row = NULL;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(doc, k_tables[k].key)) {
      const char *name = cmp_string_at(row, "name", NULL);
      if (name == NULL) continue;
      int rc = explain_push(s, name, k_tables[k].type, explain_num(row, "calls"),
                            explain_num(row, k_tables[k].time) * 1e3);
      if (rc != 0) return rc;
      any = true;
    }
  }
  if (any) s->steps += st->valuedouble;
  if (any && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "top_ops_complete"))) {
    if (s->ncut < EXPLAIN_MAX_CUT)
      s->cut[s->ncut++] = doc;
    else
      s->cut_overflow = true;
  }
  return 0;
}

int pd_cmp_explain(const cJSON *const *base, size_t nbase, const cJSON *const *now, size_t nnow,
                   pd_cmp_report_t *rep) {
  rep->nchanges = 0;
  explain_side_t a = {0}, b = {0};
  int rc = 0;
  for (size_t i = 0; i < nbase && rc == 0; i++) rc = explain_add_doc(&a, base[i]);
  for (size_t i = 0; i < nnow && rc == 0; i++) rc = explain_add_doc(&b, now[i]);
  pd_diff_t *diff = NULL;
  if (rc == 0 && a.steps > 0 && b.steps > 0) {
    rc = pd_diff_build_rows(a.v, a.n, a.steps, b.v, b.n, b.steps, &diff);
    if (rc == PD_EINVAL) rc = 0; /* nothing usable in the tables: no explanation */
  }
  const pd_diff_row_t *rows = pd_diff_rows(diff);
  for (size_t i = 0; i < pd_diff_count(diff) && rep->nchanges < PD_CMP_MAX_CHANGES; i++) {
    if (fabs(rows[i].delta_ns) < EXPLAIN_MIN_NS) break; /* rows come largest change first */
    pd_cmp_change_t *c = &rep->changes[rep->nchanges++];
    snprintf(c->name, sizeof(c->name), "%s", rows[i].name);
    c->op = rows[i].type == PD_DEV_RANGE;
    c->base_us = rows[i].a_ns / 1e3;
    c->now_us = rows[i].b_ns / 1e3;
    c->base_calls = rows[i].a_calls;
    c->now_calls = rows[i].b_calls;
    c->base_cut = c->op && explain_op_cut(&a, rows[i].name);
    c->now_cut = c->op && explain_op_cut(&b, rows[i].name);
  }
  pd_diff_destroy(diff);
  free(a.v);
  free(b.v);
  return rc;
}
