/* gate_internal.h: helpers shared by the gate's files (gate_compare.c, gate_promote.c,
 * gate_report.c, gate_ab.c, gate_explain.c); not part of the public API. */
#ifndef PD_GATE_INTERNAL_H
#define PD_GATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

#include "pd/pd_gate.h"

/* Writes one line into why; a NULL or empty buffer is allowed. */
void cmp_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Returns obj[a] (or obj[a][b] when b is not NULL) when it is a string, else NULL. The
 * string belongs to obj. */
const char *cmp_string_at(const cJSON *obj, const char *a, const char *b);
/* Adds v to obj as a number, or null when it is NaN or infinite (which JSON cannot hold). */
void cmp_add_number_or_null(cJSON *obj, const char *key, double v);

/* Reads a metric of a document as the comparison does: the median over its runs for a
 * pooled baseline, its own value for a plain metrics JSON. *absent: no such metric. */
int cmp_doc_value(const cJSON *doc, const char *metric, const char *who, double *v, bool *absent,
                  char *why, size_t whylen);
/* Fills host_of_run[i] (at most cap) with run i's host index among runs (by boot id, else
 * host name; runs that recorded none share one index). Returns the number of hosts. */
size_t cmp_host_index(const cJSON *runs, int *host_of_run, size_t cap);
/* Returns the most frequent of n names (NULL entries are skipped; ties: the earliest), or
 * NULL when all are NULL; *count gets how many gave it, *named how many were not NULL
 * (either pointer may be NULL). The bottleneck a baseline's or an A/B side's runs name. */
/* schema_version of a metrics document (0 when absent or out of range). */
int cmp_doc_schema(const cJSON *doc);
const char *cmp_majority(const char *const *names, size_t n, size_t *count, size_t *named);
/* Counts the rows' verdicts into rep->counts and sets rep->failed. */
void cmp_report_tally(pd_cmp_report_t *rep);
/* Appends a row for metric to rep->rows (growing it; *cap is its capacity), values NaN.
 * Returns the row, or NULL when out of memory. */
pd_cmp_row_t *cmp_row_add(pd_cmp_report_t *rep, size_t *cap, const char *metric);
/* Reads a metric value: a number, or null (NaN); other types are PD_EPARSE. */
int cmp_metric_value(const cJSON *it, const char *who, double *v, char *why, size_t whylen);

#endif /* PD_GATE_INTERNAL_H */
