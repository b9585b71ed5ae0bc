/* test_runs.c: the analyzer against profiler_demo's own recorded runs (tests/fixtures/runs:
 * one H100 run per scenario, its metrics JSON and its trace).
 *
 * Reading the trace back and analyzing it must give what the live run computed from the
 * same events: every trace-side metric identical (the same core functions on the events
 * read back) and the same verdict (for runs recorded before the replay, the same planted
 * cause). Step time and data wait cannot be identical (the live
 * run times them on the host around synchronizations; the analyzer takes them from the
 * ProfilerStep and DataLoader.wait ranges), so they are checked against a band.
 */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_analyze.h"
#include "pd_test_util.h"

static double metric(const cJSON *root, const char *key) {
  const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "metrics"), key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void check_run(const char *scenario) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (run through ctest)");
  char trace_path[512], json_path[512], err[512];
  snprintf(trace_path, sizeof trace_path, "%s/tests/fixtures/runs/%s.pt.trace.json.gz", src, scenario);
  snprintf(json_path, sizeof json_path, "%s/tests/fixtures/runs/%s.metrics.json", src, scenario);
  cJSON *live = pd_test_read_json(json_path);
  pd_trace_t *t = pd_trace_create();
  pd_trace_info_t info;
  cr_assert_eq(pd_trace_read_file_info(trace_path, t, &info, err, sizeof err), 0, "%s", err);
  cr_expect(!info.torch);
  pd_analysis_t *a = NULL;
  cr_assert_eq(pd_analysis_run(t, &info, NULL, &a), 0);
  cr_assert(a->have_metrics);

  /* trace-side metrics: the same functions on the same events */
  static const char *const same[] = {"gpu_busy_fraction",   "kernels_per_step",          "avg_kernel_time_us",
                                     "gpu_kernel_time_per_step_us", "runtime_calls_per_step", "sync_calls_per_step",
                                     "sync_time_per_step_us", "device_alloc_calls_per_step",
                                     "device_alloc_time_per_step_us", "h2d_bytes_per_step",
                                     "peak_device_memory_bytes"};
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
    double want = metric(live, same[i]);
    double got = *(const double *)((const char *)&a->metrics + pd_metric_find(same[i])->offset);
    cr_expect(fabs(got - want) <= 1e-9 * fabs(want) + 1e-12, "%s %s: trace %.12g vs live %.12g", scenario, same[i],
              got, want);
  }
  cr_expect_eq(a->metrics.steps, (int)cJSON_GetObjectItem(live, "steps")->valuedouble);
  /* A planted scenario keeps its verdict. The clean step's verdict is its host/GPU balance
   * (compute, host_bound or launch_overhead), which moves with the model (since
   * 2026-11-30 a CUDA graph of the whole step is a finding, never the bottleneck) as it
   * moves between hosts: a balance it stays. */
  const char *verdict = cJSON_GetObjectItem(cJSON_GetObjectItem(live, "verdict"), "bottleneck")->valuestring;
  cr_expect(pd_test_verdict_kept(verdict, pd_bottleneck_name(a->verdict.bottleneck)), "%s: recorded %s, now %s",
            scenario, verdict, pd_bottleneck_name(a->verdict.bottleneck));

  /* host-timed vs range-derived: the step range also holds the profiler's step
   * bookkeeping and the batch copy, so it runs a little longer */
  double host_step = metric(live, "avg_step_time_s"), step = a->metrics.avg_step_time_s;
  cr_expect(step >= 0.9 * host_step && step <= 1.3 * host_step, "%s step: trace %.6f s vs host %.6f s", scenario,
            step, host_step);
  double host_wait = metric(live, "avg_dataloader_wait_s"), wait = a->metrics.avg_dataloader_wait_s;
  cr_expect_leq(wait, host_wait * 1.05, "%s: the wait range sits inside the host-timed wait", scenario);
  if (host_wait > 1e-3) cr_expect_geq(wait, 0.95 * host_wait, "%s: a long wait is the range", scenario);
  pd_analysis_destroy(a);
  pd_trace_destroy(t);
  cJSON_Delete(live);
}

Test(runs, clean) { check_run("clean"); }
Test(runs, dataloader) { check_run("dataloader"); }
Test(runs, sync) { check_run("sync"); }
Test(runs, tiny_ops) { check_run("tiny_ops"); }
Test(runs, memory_churn) { check_run("memory_churn"); }
