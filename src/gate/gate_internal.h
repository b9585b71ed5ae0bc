/* gate_internal.h: helpers shared by the gate's files (gate_compare.c, gate_promote.c,
 * gate_report.c, gate_ab.c, gate_explain.c); not part of the public API. */
#ifndef PD_GATE_INTERNAL_H
#define PD_GATE_INTERNAL_H

#include <stddef.h>

#include <cJSON.h>

/* Writes one line into why; a NULL or empty buffer is allowed. */
void cmp_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Returns obj[a] (or obj[a][b] when b is not NULL) when it is a string, else NULL. The
 * string belongs to obj. */
const char *cmp_string_at(const cJSON *obj, const char *a, const char *b);
/* Adds v to obj as a number, or null when it is NaN or infinite (which JSON cannot hold). */
void cmp_add_number_or_null(cJSON *obj, const char *key, double v);

#endif /* PD_GATE_INTERNAL_H */
