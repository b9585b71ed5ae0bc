/* test_diagnose.c: each rule fires on its scenario's signature, a clean run is
 * `compute`, the order of the table decides ties, and docs/diagnosis.md shows exactly
 * the table the code applies. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_stats.h"

/* A clean SimpleCNN step: busy GPU, a hundred kernels, the harness's two synchronizes. */
static pd_metrics_t clean(void) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  m.steps = 8;
  m.avg_step_time_s = 0.004;
  m.avg_dataloader_wait_s = 0.0002;
  m.dataloader_wait_fraction = 0.0002 / 0.0042;
  m.gpu_busy_fraction = 0.85;
  m.kernels_per_step = 120;
  m.avg_kernel_time_us = 25;
  m.sync_calls_per_step = 2;
  m.sync_time_per_step_us = 900;
  m.device_alloc_calls_per_step = 0;
  m.device_alloc_time_per_step_us = 0;
  return m;
}

static void expect_verdict(const pd_metrics_t *m, pd_bottleneck_t want, const char *rule) {
  pd_verdict_t v;
  pd_diagnose(m, &v);
  cr_expect_eq(v.bottleneck, want, "got %s (rule %s: %s), want %s", pd_bottleneck_name(v.bottleneck), v.rule,
               v.evidence, pd_bottleneck_name(want));
  cr_expect_str_eq(v.rule, rule, "rule: got %s, want %s", v.rule, rule);
}

Test(diagnose, clean_is_compute) {
  pd_metrics_t m = clean();
  expect_verdict(&m, PD_BOTTLENECK_COMPUTE, "none");
  pd_verdict_t v;
  pd_diagnose(&m, &v);
  cr_expect_str_eq(v.evidence, "no rule fired: GPU busy 85% of the step, 120 kernels per step, data wait 5% of the time");
}

Test(diagnose, dataloader_signature) {
  pd_metrics_t m = clean();
  m.avg_dataloader_wait_s = 0.0831;
  m.avg_step_time_s = 0.001;
  m.dataloader_wait_fraction = 0.0831 / 0.0841;
  m.gpu_busy_fraction = 0.01;
  expect_verdict(&m, PD_BOTTLENECK_DATALOADER, "dataloader_wait");
  pd_verdict_t v;
  pd_diagnose(&m, &v);
  cr_expect_str_eq(v.evidence, "data wait 83.1 ms per step vs step 1.0 ms (99% of the step)");
  /* just under the threshold: no */
  m.dataloader_wait_fraction = 0.2999;
  expect_verdict(&m, PD_BOTTLENECK_COMPUTE, "none");
  m.dataloader_wait_fraction = 0.30;
  expect_verdict(&m, PD_BOTTLENECK_DATALOADER, "dataloader_wait");
}

Test(diagnose, sync_signature) {
  pd_metrics_t m = clean();
  m.sync_calls_per_step = 2.0005; /* the harness's two + AMP's overflow read every 2000 steps */
  expect_verdict(&m, PD_BOTTLENECK_COMPUTE, "none");
  m.sync_calls_per_step = 3;
  m.sync_time_per_step_us = 2000;
  m.gpu_busy_fraction = 0.4;
  expect_verdict(&m, PD_BOTTLENECK_SYNC, "sync_calls");
  pd_verdict_t v;
  pd_diagnose(&m, &v);
  cr_expect_str_eq(v.evidence, "3.0 synchronizing calls per step taking 2000.0 us (50% of the step)");
}

Test(diagnose, launch_overhead_signatures) {
  pd_metrics_t m = clean();
  m.kernels_per_step = 2400;
  m.avg_kernel_time_us = 3.2;
  m.gpu_busy_fraction = 0.2;
  expect_verdict(&m, PD_BOTTLENECK_LAUNCH_OVERHEAD, "many_kernels");
  pd_verdict_t v;
  pd_diagnose(&m, &v);
  cr_expect_str_eq(v.evidence, "2400 kernels per step, average kernel 3.20 us, GPU busy 20% of the step");
  /* fewer kernels but tiny and the GPU idle */
  m.kernels_per_step = 400;
  expect_verdict(&m, PD_BOTTLENECK_LAUNCH_OVERHEAD, "tiny_kernels");
  /* same count with a busy GPU: compute */
  m.gpu_busy_fraction = 0.7;
  expect_verdict(&m, PD_BOTTLENECK_COMPUTE, "none");
  /* long kernels: compute */
  m.gpu_busy_fraction = 0.2;
  m.avg_kernel_time_us = 50;
  expect_verdict(&m, PD_BOTTLENECK_COMPUTE, "none");
}

Test(diagnose, allocator_churn_signatures) {
  pd_metrics_t m = clean();
  m.device_alloc_calls_per_step = 64;
  m.device_alloc_time_per_step_us = 120;
  expect_verdict(&m, PD_BOTTLENECK_ALLOCATOR_CHURN, "alloc_calls");
  pd_verdict_t v;
  pd_diagnose(&m, &v);
  cr_expect_str_eq(v.evidence, "64.0 device alloc/free calls per step taking 120.0 us (3% of the step)");
  /* few calls, but slow ones */
  m.device_alloc_calls_per_step = 2;
  m.device_alloc_time_per_step_us = 500; /* 12.5% of a 4 ms step */
  expect_verdict(&m, PD_BOTTLENECK_ALLOCATOR_CHURN, "alloc_time");
  m.device_alloc_time_per_step_us = 300; /* 7.5% */
  expect_verdict(&m, PD_BOTTLENECK_COMPUTE, "none");
}

Test(diagnose, first_match_wins_in_table_order) {
  pd_metrics_t m = clean();
  /* churn also forces syncs and tiny kernels: the allocator rule comes first */
  m.device_alloc_calls_per_step = 64;
  m.sync_calls_per_step = 10;
  m.kernels_per_step = 5000;
  expect_verdict(&m, PD_BOTTLENECK_ALLOCATOR_CHURN, "alloc_calls");
  /* a starved pipeline wins over everything */
  m.dataloader_wait_fraction = 0.9;
  expect_verdict(&m, PD_BOTTLENECK_DATALOADER, "dataloader_wait");
}

Test(diagnose, unmeasured_metrics_never_fire) {
  pd_metrics_t m;
  pd_metrics_init(&m); /* all NaN */
  expect_verdict(&m, PD_BOTTLENECK_COMPUTE, "none");
  pd_verdict_t v;
  pd_diagnose(&m, &v);
  cr_expect(strstr(v.evidence, "n/a") != NULL, "%s", v.evidence);
  pd_diagnose(NULL, &v);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_COMPUTE);
  pd_diagnose(&m, NULL); /* no crash */
}

Test(diagnose, bottleneck_names) {
  for (int b = 0; b < PD_BOTTLENECK_COUNT; b++) {
    pd_bottleneck_t got;
    cr_expect_eq(pd_bottleneck_parse(pd_bottleneck_name((pd_bottleneck_t)b), &got), 0);
    cr_expect_eq(got, b);
  }
  pd_bottleneck_t got;
  cr_expect_str_eq(pd_bottleneck_name(PD_BOTTLENECK_LAUNCH_OVERHEAD), "launch_overhead");
  cr_expect_str_eq(pd_bottleneck_name((pd_bottleneck_t)99), "unknown");
  cr_expect_eq(pd_bottleneck_parse("gpu", &got), PD_EINVAL);
  cr_expect_eq(pd_bottleneck_parse(NULL, &got), PD_EINVAL);
}

static char *rules_markdown(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  pd_diagnose_print_rules(f);
  fclose(f);
  return buf;
}

Test(diagnose, rule_table_markdown) {
  char *md = rules_markdown();
  cr_expect(strncmp(md, "| # | rule | bottleneck | fires when | evidence |\n|---|", 52) == 0, "%s", md);
  static const char *const want[] = {
      "| 1 | `dataloader_wait` | `dataloader` | `dataloader_wait_fraction` >= 0.3",
      "| 2 | `alloc_calls` | `allocator_churn` | `device_alloc_calls_per_step` >= 8",
      "| 3 | `alloc_time` | `allocator_churn` | `device_alloc_time_per_step_us` >= 0.1 x the step time "
      "(`avg_step_time_s`)",
      "| 4 | `sync_calls` | `sync` | `sync_calls_per_step` >= 3",
      "| 5 | `many_kernels` | `launch_overhead` | `kernels_per_step` >= 1000",
      "| 6 | `tiny_kernels` | `launch_overhead` | `avg_kernel_time_us` < 10 and `gpu_busy_fraction` < 0.5 and "
      "`kernels_per_step` >= 300",
      "| - | `none` | `compute` | no rule above fires",
      "data wait {wait_ms} ms per step vs step {step_ms} ms ({wait_pct}% of the step)",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_expect(strstr(md, want[i]) != NULL, "missing \"%s\" in:\n%s", want[i], md);
  free(md);
}

/* docs/diagnosis.md and README.md carry the table between two markers; it must be byte
 * for byte what the code prints. Regenerate with: PD_UPDATE_DOCS=1 ./test_prof_diagnose */
static void check_rules_block(const char *relpath) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (ctest sets it)");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", src, relpath);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  static char doc[262144];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = 0;
  const char *begin_mark = "<!-- rules:begin (generated by pd_diagnose_print_rules) -->\n";
  const char *end_mark = "<!-- rules:end -->";
  char *b = strstr(doc, begin_mark), *e = b ? strstr(b, end_mark) : NULL;
  cr_assert(b != NULL && e != NULL, "markers missing in %s", path);
  b += strlen(begin_mark);
  char *md = rules_markdown();
  if (getenv("PD_UPDATE_DOCS") != NULL) {
    FILE *w = fopen(path, "wb");
    cr_assert_not_null(w);
    fwrite(doc, 1, (size_t)(b - doc), w);
    fputs(md, w);
    fputs(e, w);
    fclose(w);
  } else {
    size_t len = (size_t)(e - b);
    cr_expect(len == strlen(md) && strncmp(b, md, len) == 0,
              "%s is out of date; run PD_UPDATE_DOCS=1 PD_SOURCE_DIR=... %s\n--- docs:\n%.*s\n--- code:\n%s",
              relpath, "test_prof_diagnose", (int)len, b, md);
  }
  free(md);
}

Test(diagnose, docs_table_matches_code) { check_rules_block("docs/diagnosis.md"); }

Test(diagnose, readme_table_matches_code) { check_rules_block("README.md"); }
