/* fuzz_gate_docs.c: metrics JSON and baseline loading (pd_cmp_doc_load, from a file as the
 * program reads it), the stored comparison with the input on either side, promotion of the
 * input with a real run and a comparison against what was promoted, an A/B with the input
 * in both rounds, and the report writers (console table, JSON, Markdown). The other side
 * is the committed clean run and baseline (PD_FUZZ_SOURCE_DIR). */
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"
#include "fuzz_util.h"

#ifndef PD_FUZZ_SOURCE_DIR
#error "PD_FUZZ_SOURCE_DIR must name the source tree"
#endif

static FILE *g_null;
static cJSON *g_run, *g_base;

static void report(pd_cmp_report_t *rep) {
  pd_cmp_report_print(g_null, rep);
  pd_cmp_report_write_markdown(g_null, rep);
  cJSON *j = pd_cmp_report_to_json(rep);
  char *text = j != NULL ? cJSON_Print(j) : NULL;
  free(text);
  cJSON_Delete(j);
  pd_cmp_report_free(rep);
}

static void load_fixtures(void) {
  char why[1024];
  g_null = fopen("/dev/null", "w");
  if (pd_cmp_doc_load(PD_FUZZ_SOURCE_DIR "/tests/fixtures/runs/clean.metrics.json", &g_run, why, sizeof why) != 0 ||
      pd_cmp_doc_load(PD_FUZZ_SOURCE_DIR "/baselines/nvidia-h100-80gb-hbm3/clean.json", &g_base, why, sizeof why) != 0) {
    fprintf(stderr, "fuzz_gate_docs: %s\n", why);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_run == NULL) load_fixtures();
  const char *path = fuzz_path("in.json");
  fuzz_write_input(path, data, size);
  char why[1024];
  cJSON *doc = NULL;
  if (pd_cmp_doc_load(path, &doc, why, sizeof why) != 0) return 0;
  pd_cmp_options_t opt = {.alpha = 0.01, .current_name = path, .baseline_name = "base"};
  pd_cmp_report_t rep;
  (void)pd_cmp_compare(doc, g_base, &opt, &rep, why, sizeof why);
  report(&rep);
  (void)pd_cmp_compare(g_run, doc, &opt, &rep, why, sizeof why);
  report(&rep);
  const cJSON *runs[2] = {doc, g_run};
  const char *names[2] = {"fuzz", "clean"};
  pd_promote_info_t info = {.git_commit = "0", .command = "fuzz", .date = "2026-01-01T00:00:00Z"};
  cJSON *promoted = NULL;
  if (pd_baseline_promote(runs, names, 2, &info, &promoted, why, sizeof why) == 0) {
    (void)pd_cmp_compare(g_run, promoted, &opt, &rep, why, sizeof why);
    report(&rep);
    cJSON_Delete(promoted);
  }
  const cJSON *base[2] = {doc, g_run}, *head[2] = {g_run, doc};
  const char *ab_names[4] = {"b0", "b1", "h0", "h1"};
  (void)pd_cmp_ab(base, 2, head, 2, ab_names, &opt, &rep, why, sizeof why);
  report(&rep);
  cJSON_Delete(doc);
  return 0;
}
