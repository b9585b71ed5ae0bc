/* stack_export.c: an op table grouped by call stack as collapsed stacks (torch's
 * prof.export_stacks), the text flamegraph.pl, inferno and speedscope read. Reads the
 * table through its public accessors only (pd_stats.h); grouping by stack is the table's
 * (aggregate.c, pd_op_table_set_group_by_stack).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd/pd_out.h"
#include "pd/pd_stats.h"

/* Writes s[0..n) with the characters that the collapsed format reserves (the ' ' before
 * the value, line breaks) as '_', as torch's export_stacks translates " ;\t\n". */
static void put_frame(FILE *out, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) fputc(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == ';' ? '_' : s[i], out);
}

int64_t pd_op_table_export_stacks(const pd_op_table_t *table, FILE *out, pd_sort_key_t metric) {
  if (table == NULL || out == NULL ||
      (metric != PD_SORT_SELF_CUDA_TIME_TOTAL && metric != PD_SORT_SELF_CPU_TIME_TOTAL))
    return PD_EINVAL;
  int64_t lines = 0;
  const pd_op_stat_t *rows = pd_op_table_rows(table);
  for (size_t i = 0; i < pd_op_table_count(table); i++) {
    const pd_op_stat_t *r = &rows[i];
    if (r->stack == NULL) continue;
    int64_t ns = metric == PD_SORT_SELF_CUDA_TIME_TOTAL ? r->self_cuda_ns : r->self_cpu_ns;
    int64_t us = (ns + 500) / 1000;
    if (us <= 0) continue;
    /* frames are innermost first: write them from the last one back */
    const char *s = r->stack;
    size_t end = strlen(s);
    while (end > 0) {
      size_t start = end;
      while (start > 0 && s[start - 1] != ';') start--;
      put_frame(out, s + start, end - start);
      fputc(';', out);
      end = start > 0 ? start - 1 : 0;
    }
    put_frame(out, r->name, strlen(r->name));
    fprintf(out, " %" PRId64 "\n", us);
    lines++;
  }
  return ferror(out) ? PD_EIO : lines;
}

int64_t pd_op_table_export_stacks_file(const pd_op_table_t *table, const char *path, pd_sort_key_t metric) {
  if (table == NULL || path == NULL || path[0] == '\0' ||
      (metric != PD_SORT_SELF_CUDA_TIME_TOTAL && metric != PD_SORT_SELF_CPU_TIME_TOTAL))
    return PD_EINVAL;
  /* The one writer (pd_out.h): a temporary beside the target, renamed when complete. */
  pd_out_t *o = NULL;
  int rc = pd_out_open(path, 0, &o);
  if (rc != 0) return rc;
  int64_t lines = pd_op_table_export_stacks(table, pd_out_stream(o), metric);
  if (lines < 0) {
    pd_out_abort(o);
    return lines;
  }
  rc = pd_out_commit(o);
  return rc != 0 ? rc : lines;
}

size_t pd_op_table_stack_rows(const pd_op_table_t *table) {
  size_t n = 0;
  const pd_op_stat_t *rows = pd_op_table_rows(table);
  for (size_t i = 0; i < pd_op_table_count(table); i++) n += rows[i].stack != NULL;
  return n;
}
