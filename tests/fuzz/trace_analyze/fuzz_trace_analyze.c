/* fuzz_trace_analyze.c: the trace reader (JSON text in memory, the same pull parser and
 * conversion as files), then every analysis (breakdown, top table, key averages, memory
 * timeline, metrics and verdict, a diff against itself) and every report writer (HTML and
 * JSON through the one output writer, the console tables). Any crash, sanitizer report,
 * leak or hang is a finding. */
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_analyze.h"
#include "pd/pd_common.h"
#include "pd/pd_event.h"
#include "fuzz_util.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_null == NULL) g_null = fopen("/dev/null", "w");
  pd_trace_t *t = pd_trace_create();
  if (t == NULL) return 0;
  pd_trace_info_t info;
  char err[512];
  if (pd_trace_read_buffer((const char *)data, size, t, &info, err, sizeof err) != 0) {
    pd_trace_destroy(t);
    return 0;
  }
  pd_top_opts_t opts = {0};
  pd_analysis_t *a = NULL;
  if (pd_analysis_run(t, &info, &opts, &a) == 0) {
    pd_diff_t *diff = NULL;
    (void)pd_diff_build(a->top, a->have_metrics ? a->metrics.steps : 0, a->top, a->have_metrics ? a->metrics.steps : 0,
                        &diff);
    pd_analysis_print_summary(g_null, a, "fuzz");
    pd_top_print(g_null, a->top, 0);
    pd_breakdown_print(g_null, &a->breakdown);
    pd_memtl_print(g_null, &a->memory, &a->breakdown);
    pd_op_table_print(g_null, a->ops, 0);
    if (diff != NULL) pd_diff_print(g_null, diff, 0);
    pd_report_t rep = {.path = "fuzz", .a = a, .diff_path = diff ? "fuzz" : NULL, .b = diff ? a : NULL, .diff = diff,
                       .limit = 20};
    (void)pd_report_html_write(fuzz_path("r.html"), &rep);
    (void)pd_report_json_write(fuzz_path("r.json"), &rep);
    pd_diff_destroy(diff);
    pd_analysis_destroy(a);
  }
  pd_trace_destroy(t);
  return 0;
}
