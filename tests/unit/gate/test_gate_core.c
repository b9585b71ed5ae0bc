/* test_gate_core.c: the gate's core in-process, without a GPU: promotion of runs from
 * several hosts into a baseline, the stored comparison read the same way on both sides
 * (the 1% wobble), the same-machine A/B (no change, a slowdown, runs in a slow machine
 * state, counts, bad input) and the explanation of a regression from the runs' kernel and
 * op tables. Runs are built here: a 0.3 ms step with 1% step-to-step noise from a
 * fixed-seed generator.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"

#include "pd_test_util.h"

#define H100 "NVIDIA H100 80GB HBM3"
#define NSTEPS 16

static unsigned long long g_rng = 0x9E3779B97F4A7C15ull;
static double rng_normal(void) { return pd_test_rng_normal(&g_rng); }

typedef struct {
  double host;    /* step time scale */
  double gpu;     /* k_adamw device time scale */
  double op_us;   /* extra host op "inject_slowdown" per step, us (0: none) */
  int kernels;    /* kernels per step */
  const char *boot_id;
  const char *bottleneck;
} run_spec_t;

/* The runs' step-to-step noise (a test that needs exact ties sets 0, then puts it back). */
static double step_noise = 0.01;

/* A clean-scenario run's metrics JSON as profiler_demo writes it (the fields the gate reads). */
static cJSON *mk_run(run_spec_t r) {
  double st[NSTEPS], sum = 0;
  for (int i = 0; i < NSTEPS; i++) {
    st[i] = 0.0003 * r.host * (1.0 + step_noise * rng_normal());
    sum += st[i];
  }
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "schema_version", 1);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(d, "config"), "scenario", "clean");
  cJSON *dev = cJSON_AddObjectToObject(d, "device");
  cJSON_AddStringToObject(dev, "name", H100);
  cJSON_AddNumberToObject(dev, "driver", 13000);
  cJSON *host = cJSON_AddObjectToObject(d, "host");
  cJSON_AddStringToObject(host, "name", "vm");
  cJSON_AddStringToObject(host, "boot_id", r.boot_id != NULL ? r.boot_id : "boot-a");
  const double adamw = 30.0 * r.gpu, gemm = 200.0;
  cJSON *m = cJSON_AddObjectToObject(d, "metrics");
  cJSON_AddNumberToObject(m, "avg_step_time_s", sum / NSTEPS);
  cJSON_AddNumberToObject(m, "kernels_per_step", r.kernels > 0 ? r.kernels : 25);
  cJSON_AddNumberToObject(m, "gpu_kernel_time_per_step_us", adamw + gemm);
  cJSON_AddNumberToObject(m, "loss_last", 2.0);
  cJSON_AddNumberToObject(d, "steps", NSTEPS);
  cJSON_AddItemToObject(d, "step_times_s", cJSON_CreateDoubleArray(st, NSTEPS));
  cJSON_AddItemToObject(d, "dataloader_wait_s", cJSON_CreateDoubleArray(st, 0));
  cJSON_AddStringToObject(cJSON_AddObjectToObject(d, "verdict"), "bottleneck",
                          r.bottleneck != NULL ? r.bottleneck : "compute");
  cJSON *kern = cJSON_AddArrayToObject(d, "top_kernels");
  const struct {
    const char *name;
    double us;
  } k[] = {{"sgemm", gemm}, {"k_adamw", adamw}};
  for (size_t i = 0; i < 2; i++) {
    cJSON *row = cJSON_CreateObject();
    cJSON_AddStringToObject(row, "name", k[i].name);
    cJSON_AddNumberToObject(row, "calls", NSTEPS);
    cJSON_AddNumberToObject(row, "self_cuda_time_us", k[i].us * NSTEPS);
    cJSON_AddItemToArray(kern, row);
  }
  cJSON *ops = cJSON_AddArrayToObject(d, "top_ops");
  cJSON *fwd = cJSON_CreateObject();
  cJSON_AddStringToObject(fwd, "name", "forward");
  cJSON_AddNumberToObject(fwd, "calls", NSTEPS);
  cJSON_AddNumberToObject(fwd, "self_cpu_time_us", 100.0 * r.host * NSTEPS);
  cJSON_AddItemToArray(ops, fwd);
  if (r.op_us > 0) {
    cJSON *inj = cJSON_CreateObject();
    cJSON_AddStringToObject(inj, "name", "inject_slowdown");
    cJSON_AddNumberToObject(inj, "calls", NSTEPS);
    cJSON_AddNumberToObject(inj, "self_cpu_time_us", r.op_us * NSTEPS);
    cJSON_AddItemToArray(ops, inj);
  }
  return d;
}

static const pd_cmp_row_t *row_of(const pd_cmp_report_t *rep, const char *metric) {
  for (size_t i = 0; i < rep->nrows; i++)
    if (strcmp(rep->rows[i].metric, metric) == 0) return &rep->rows[i];
  cr_assert_fail("no row %s", metric);
  return NULL;
}

/* ---- promotion and the stored comparison --------------------------------------------------- */

/* Three hosts, three runs each; the third host 40% slower on the host side. */
static cJSON *mk_pooled(void) {
  static const char *const boots[] = {"boot-a", "boot-b", "boot-c"};
  cJSON *runs[9];
  for (int i = 0; i < 9; i++)
    runs[i] = mk_run((run_spec_t){.host = i >= 6 ? 1.4 : 1.0, .gpu = 1.0, .boot_id = boots[i / 3]});
  pd_promote_info_t info = {.git_commit = "abc1234", .command = "test", .date = "2026-11-23T00:00:00Z"};
  cJSON *base = NULL;
  char why[256];
  cr_assert_eq(pd_baseline_promote((const cJSON *const *)runs, NULL, 9, &info, &base, why, sizeof why), 0, "%s",
               why);
  for (int i = 0; i < 9; i++) cJSON_Delete(runs[i]);
  return base;
}

Test(gate_core, promote_keeps_hosts_and_provenance) {
  cJSON *b = mk_pooled();
  cJSON *prov = cJSON_GetObjectItem(b, "provenance");
  cr_assert_eq(cJSON_GetObjectItem(prov, "runs")->valueint, 9);
  cr_assert_eq(cJSON_GetObjectItem(prov, "hosts")->valueint, 3);
  cJSON *run = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "runs"), 7);
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "host"), "boot_id")->valuestring, "boot-c");
  cJSON *rp = cJSON_GetObjectItem(run, "provenance");
  cr_assert_str_eq(cJSON_GetObjectItem(rp, "commit")->valuestring, "abc1234");
  cr_assert_eq(cJSON_GetObjectItem(rp, "driver")->valueint, 13000);
  /* the kernel table pooled over the 9 runs, and the steps it covers */
  cr_assert_eq(cJSON_GetObjectItem(b, "tables_steps")->valueint, 9 * NSTEPS);
  /* an earlier baseline's runs without a host are grouped as one host */
  cJSON *old = mk_pooled();
  cJSON_ArrayForEach(run, cJSON_GetObjectItem(old, "runs")) cJSON_DeleteItemFromObject(run, "host");
  cJSON *extra = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0, .boot_id = "boot-d"});
  const cJSON *in[] = {old, extra};
  cJSON *merged = NULL;
  char why[256];
  cr_assert_eq(pd_baseline_promote(in, NULL, 2, NULL, &merged, why, sizeof why), 0, "%s", why);
  cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(merged, "provenance"), "hosts")->valueint, 2);
  run = cJSON_GetArrayItem(cJSON_GetObjectItem(merged, "runs"), 0);
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "host"), "name")->valuestring, "unrecorded");
  cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "provenance"), "commit")->valuestring, "abc1234");
  cJSON_Delete(merged);
  cJSON_Delete(extra);
  cJSON_Delete(old);
  cJSON_Delete(b);
}

/* The wobble: a pooled baseline with every step time scaled by 1.01, compared with
 * itself, moves the gate's p10 by 1%, not by the difference between a mean and a median
 * of the runs' p10s. */
Test(gate_core, a_one_percent_wobble_reads_as_one_percent) {
  cJSON *b = mk_pooled();
  cJSON *w = cJSON_Duplicate(b, 1);
  cJSON *x = NULL;
  cJSON_ArrayForEach(x, cJSON_GetObjectItem(w, "step_times_s")) cJSON_SetNumberValue(x, x->valuedouble * 1.01);
  cJSON *run = NULL;
  cJSON_ArrayForEach(run, cJSON_GetObjectItem(w, "runs")) {
    cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(run, "metrics"), "avg_step_time_s");
    cJSON_SetNumberValue(m, m->valuedouble * 1.01);
  }
  pd_cmp_report_t rep;
  char why[256];
  cr_assert_eq(pd_cmp_compare(w, b, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->change_pct, 1.0, 1e-9, "%g",
                     row_of(&rep, "step_time_p10_s")->change_pct);
  cr_expect_float_eq(row_of(&rep, "avg_step_time_s")->change_pct, 1.0, 1e-9);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_OK);
  cr_expect(!rep.failed);
  cr_expect_eq(rep.baseline_hosts, 3);
  pd_cmp_report_free(&rep);
  cJSON_Delete(w);
  cJSON_Delete(b);
}

Test(gate_core, stored_classes_device_tight_host_gross) {
  cJSON *b = mk_pooled();
  pd_cmp_report_t rep;
  char why[256];
  /* another host, 60% slower on the host side, GPU unchanged: within policy */
  cJSON *cur = mk_run((run_spec_t){.host = 1.6, .gpu = 1.0, .boot_id = "boot-z"});
  cr_assert_eq(pd_cmp_compare(cur, b, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect(!rep.failed);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->policy.cls, PD_METRIC_CLASS_HOST);
  pd_cmp_report_free(&rep);
  cJSON_Delete(cur);
  /* k_adamw 25% slower: +7.5 us of 230 (3.3%) fails the device band and is explained */
  cur = mk_run((run_spec_t){.host = 1.0, .gpu = 1.25, .boot_id = "boot-z"});
  cr_assert_eq(pd_cmp_compare(cur, b, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect(rep.failed);
  cr_expect_eq(row_of(&rep, "gpu_kernel_time_per_step_us")->verdict, PD_CMP_REGRESSED);
  cr_expect_eq(row_of(&rep, "gpu_kernel_time_per_step_us")->policy.cls, PD_METRIC_CLASS_DEVICE);
  /* the pooled baseline's forward op is slower (one host in three at 1.4x), so it moved
   * most; k_adamw is there with its device time per step */
  const pd_cmp_change_t *adamw = NULL;
  for (size_t i = 0; i < rep.nchanges; i++)
    if (strcmp(rep.changes[i].name, "k_adamw") == 0) adamw = &rep.changes[i];
  cr_assert_not_null(adamw);
  cr_expect(!adamw->op);
  cr_expect_float_eq(adamw->base_us, 30.0, 1e-9);
  cr_expect_float_eq(adamw->now_us, 37.5, 1e-9);
  cr_expect_float_eq(adamw->now_calls, 1.0, 1e-12);
  pd_cmp_report_free(&rep);
  cJSON_Delete(cur);
  /* one kernel more per step: the count is exact */
  cur = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0, .kernels = 26});
  cr_assert_eq(pd_cmp_compare(cur, b, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "kernels_per_step")->verdict, PD_CMP_REGRESSED);
  pd_cmp_report_free(&rep);
  cJSON_Delete(cur);
  cJSON_Delete(b);
}

/* Many tiny kernels: the kernel time per step may move 0.06 us per kernel between hosts
 * (the stored floor), a few long kernels keep the 1.5% band. */
Test(gate_core, kernel_time_has_a_per_kernel_floor) {
  cJSON *runs[6];
  for (int i = 0; i < 6; i++)
    runs[i] = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0, .kernels = 537, .boot_id = i < 3 ? "boot-a" : "boot-b"});
  pd_promote_info_t info = {.git_commit = "abc1234", .command = "test", .date = "2026-11-23T00:00:00Z"};
  cJSON *b = NULL;
  char why[256];
  cr_assert_eq(pd_baseline_promote((const cJSON *const *)runs, NULL, 6, &info, &b, why, sizeof why), 0, "%s", why);
  for (int i = 0; i < 6; i++) cJSON_Delete(runs[i]);
  pd_cmp_report_t rep;
  /* +7.5 us of 230 (+3.3%): past the 1.5% band, within 537 x 0.06 = 32.2 us */
  cJSON *cur = mk_run((run_spec_t){.host = 1.0, .gpu = 1.25, .kernels = 537, .boot_id = "boot-z"});
  cr_assert_eq(pd_cmp_compare(cur, b, NULL, &rep, why, sizeof why), 0, "%s", why);
  const pd_cmp_row_t *r = row_of(&rep, "gpu_kernel_time_per_step_us");
  cr_expect_eq(r->verdict, PD_CMP_OK, "%s", r->note);
  cr_expect_float_eq(r->policy.min_abs, 537 * 0.06, 1e-9);
  cr_expect(strstr(r->note, "absolute floor") != NULL, "note: %s", r->note);
  pd_cmp_report_free(&rep);
  cJSON_Delete(cur);
  /* +45 us (+19.6%): beyond the floor */
  cur = mk_run((run_spec_t){.host = 1.0, .gpu = 2.5, .kernels = 537, .boot_id = "boot-z"});
  cr_assert_eq(pd_cmp_compare(cur, b, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "gpu_kernel_time_per_step_us")->verdict, PD_CMP_REGRESSED);
  pd_cmp_report_free(&rep);
  cJSON_Delete(cur);
  cJSON_Delete(b);
  /* The function itself: only this metric, only stored, only a sane count. */
  pd_cmp_policy_t p;
  pd_cmp_policy_default("gpu_kernel_time_per_step_us", PD_CMP_STORED, NAN, &p);
  pd_cmp_policy_kernel_floor("gpu_kernel_time_per_step_us", PD_CMP_STORED, 25, &p);
  cr_expect_float_eq(p.min_abs, 1.5, 1e-12);
  pd_cmp_policy_kernel_floor("gpu_kernel_time_per_step_us", PD_CMP_AB, 537, &p);
  pd_cmp_policy_kernel_floor("gpu_memcpy_time_per_step_us", PD_CMP_STORED, 537, &p);
  pd_cmp_policy_kernel_floor("gpu_kernel_time_per_step_us", PD_CMP_STORED, NAN, &p);
  pd_cmp_policy_kernel_floor("gpu_kernel_time_per_step_us", PD_CMP_STORED, -5, &p);
  pd_cmp_policy_kernel_floor("gpu_kernel_time_per_step_us", PD_CMP_STORED, 1e300, &p);
  cr_expect_float_eq(p.min_abs, 1.5, 1e-12);
  pd_cmp_policy_kernel_floor(NULL, PD_CMP_STORED, 5, &p);
  pd_cmp_policy_kernel_floor("gpu_kernel_time_per_step_us", PD_CMP_STORED, 5, NULL);
}

/* A baseline whose runs[].steps are absurd (wrap past 2^64, 1e115) must not be split by
 * them: the pooled samples are then one run, never read out of bounds. */
Test(gate_core, run_step_counts_are_range_checked) {
  cJSON *b = mk_pooled();
  cJSON *run = NULL;
  int i = 0;
  cJSON_ArrayForEach(run, cJSON_GetObjectItem(b, "runs")) {
    cJSON_ReplaceItemInObject(run, "steps", cJSON_CreateNumber(i++ == 0 ? 1e115 : 18446744073709551615.0));
  }
  double q[16];
  cr_expect_eq(pd_cmp_run_quantiles(b, "step_times_s", 0.1, q, 16), 1);
  cJSON_ArrayForEach(run, cJSON_GetObjectItem(b, "runs")) cJSON_ReplaceItemInObject(run, "steps", cJSON_CreateNumber(2.5));
  cr_expect_eq(pd_cmp_run_quantiles(b, "step_times_s", 0.1, q, 16), 1, "fractional counts: one run");
  cJSON_Delete(b);
}

/* ---- A/B ------------------------------------------------------------------------------------ */

#define ROUNDS 10

/* Rounds of base and head runs; every slow_every-th round (0: none) both runs of... one
 * side lands in a slow machine state (every step 50% longer). */
static void ab(double head_host, double head_gpu, double head_op_us, int slow_every, bool slow_head_only,
               pd_cmp_report_t *rep) {
  cJSON *b[ROUNDS], *h[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    bool slow = slow_every > 0 && r % slow_every == slow_every - 1;
    b[r] = mk_run((run_spec_t){.host = slow && !slow_head_only ? 1.5 : 1.0, .gpu = 1.0});
    h[r] = mk_run((run_spec_t){.host = head_host * (slow ? 1.5 : 1.0), .gpu = head_gpu, .op_us = head_op_us});
  }
  char why[256];
  cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, ROUNDS, (const cJSON *const *)h, ROUNDS, NULL, NULL, rep, why,
                         sizeof why),
               0, "%s", why);
  for (int r = 0; r < ROUNDS; r++) {
    cJSON_Delete(b[r]);
    cJSON_Delete(h[r]);
  }
}

Test(gate_core, ab_no_change_passes) {
  pd_cmp_report_t rep;
  ab(1.0, 1.0, 0, 0, false, &rep);
  cr_expect(!rep.failed);
  cr_expect_eq(rep.setting, PD_CMP_AB);
  cr_expect_eq(rep.baseline_runs, ROUNDS);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_OK);
  cr_expect_eq(row_of(&rep, "verdict.bottleneck")->verdict, PD_CMP_OK);
  pd_cmp_report_free(&rep);
  /* slow machine states in some rounds, on the head side only: its better half of runs
   * is still the normal state, so no regression */
  ab(1.0, 1.0, 0, 4, true, &rep);
  cr_expect(!rep.failed, "two slow head runs in ten must not fail");
  pd_cmp_report_free(&rep);
}

/* The A/B judges a verdict change as the stored-baseline comparison does: a move between
 * balance verdicts (clean flips between compute, host_bound and launch_overhead from one
 * process to the next) is no regression; a planted cause appearing is. */
static pd_cmp_verdict_t ab_verdict(const char *base_bn, const char *head_bn) {
  cJSON *b[3], *h[3];
  for (int r = 0; r < 3; r++) {
    b[r] = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0, .bottleneck = base_bn});
    h[r] = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0, .bottleneck = head_bn});
  }
  pd_cmp_report_t rep;
  char why[256];
  cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, 3, (const cJSON *const *)h, 3, NULL, NULL, &rep, why, sizeof why), 0,
               "%s", why);
  pd_cmp_verdict_t v = row_of(&rep, "verdict.bottleneck")->verdict;
  pd_cmp_report_free(&rep);
  for (int r = 0; r < 3; r++) {
    cJSON_Delete(b[r]);
    cJSON_Delete(h[r]);
  }
  return v;
}

Test(gate_core, ab_balance_moves_pass_planted_causes_fail) {
  cr_expect_eq(ab_verdict("compute", "launch_overhead"), PD_CMP_OK);
  cr_expect_eq(ab_verdict("launch_overhead", "host_bound"), PD_CMP_OK);
  cr_expect_eq(ab_verdict("compute", "sync"), PD_CMP_REGRESSED);
  cr_expect_eq(ab_verdict("compute", "dataloader"), PD_CMP_REGRESSED);
}

Test(gate_core, ab_host_slowdown_fails_and_is_explained) {
  pd_cmp_report_t rep;
  /* every step 5% longer, 15 us per step in a new op */
  ab(1.05, 1.0, 15.0, 0, false, &rep);
  cr_expect(rep.failed);
  const pd_cmp_row_t *p10 = row_of(&rep, "step_time_p10_s");
  cr_expect_eq(p10->verdict, PD_CMP_REGRESSED);
  cr_expect_float_eq(p10->change_pct, 5.0, 1.0, "%g", p10->change_pct);
  cr_expect_lt(p10->p_value, 0.01);
  cr_expect_float_eq(p10->p_value, 1.0 / 1024.0, 1e-12, "every relabelling is smaller: p = 2^-10");
  bool named = false;
  for (size_t i = 0; i < rep.nchanges; i++)
    if (strcmp(rep.changes[i].name, "inject_slowdown") == 0 && rep.changes[i].op && rep.changes[i].base_us == 0.0)
      named = true;
  cr_expect(named, "the new op is named");
  pd_cmp_report_free(&rep);
  /* the same with slow states in both sides' rounds */
  ab(1.05, 1.0, 0, 5, false, &rep);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_REGRESSED);
  pd_cmp_report_free(&rep);
  /* a 2% device-time slowdown fails the device row (tolerance 1.5%) */
  ab(1.0, 1.16, 0, 0, false, &rep); /* k_adamw +16%: +4.8 us of 230 */
  cr_expect_eq(row_of(&rep, "gpu_kernel_time_per_step_us")->verdict, PD_CMP_REGRESSED);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_OK);
  pd_cmp_report_free(&rep);
}

Test(gate_core, ab_counts_and_too_few_rounds) {
  cJSON *b[3], *h[3];
  for (int r = 0; r < 3; r++) {
    b[r] = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0});
    h[r] = mk_run((run_spec_t){.host = 2.0, .gpu = 1.0, .kernels = 27});
  }
  pd_cmp_report_t rep;
  char why[256];
  cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, 3, (const cJSON *const *)h, 3, NULL, NULL, &rep, why, sizeof why),
               0, "%s", why);
  cr_expect_eq(row_of(&rep, "kernels_per_step")->verdict, PD_CMP_REGRESSED, "counts: exact, any rounds");
  const pd_cmp_row_t *p10 = row_of(&rep, "step_time_p10_s");
  cr_expect_eq(p10->verdict, PD_CMP_SKIPPED, "3 rounds can never reach p < 0.01 (best 1/8)");
  cr_expect_not_null(strstr(p10->note, "insufficient rounds"), "%s", p10->note);
  pd_cmp_report_free(&rep);
  /* bad input: unequal sides, one round, a pooled baseline among the runs, another GPU */
  cr_expect_eq(pd_cmp_ab((const cJSON *const *)b, 3, (const cJSON *const *)h, 2, NULL, NULL, &rep, why, sizeof why),
               PD_EINVAL);
  pd_cmp_report_free(&rep);
  cr_expect_not_null(strstr(why, "one base and one head run per round"), "%s", why);
  cr_expect_eq(pd_cmp_ab((const cJSON *const *)b, 1, (const cJSON *const *)h, 1, NULL, NULL, &rep, why, sizeof why),
               PD_EINVAL);
  pd_cmp_report_free(&rep);
  cJSON *pooled = mk_pooled();
  const cJSON *mixed[] = {b[0], pooled};
  const char *names[] = {"b0.json", "base.json", "h0.json", "h1.json"};
  cr_expect_eq(pd_cmp_ab(mixed, 2, (const cJSON *const *)h, 2, names, NULL, &rep, why, sizeof why), PD_EINVAL);
  pd_cmp_report_free(&rep);
  cr_expect_not_null(strstr(why, "base.json is a pooled baseline"), "%s", why);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(h[1], "device"), "name", cJSON_CreateString("NVIDIA H200"));
  cr_expect_eq(pd_cmp_ab((const cJSON *const *)b, 2, (const cJSON *const *)h, 2, names, NULL, &rep, why, sizeof why),
               PD_EMISMATCH);
  pd_cmp_report_free(&rep);
  cr_expect_not_null(strstr(why, "h1.json"), "the message names the file: %s", why);
  cJSON_Delete(pooled);
  for (int r = 0; r < 3; r++) {
    cJSON_Delete(b[r]);
    cJSON_Delete(h[r]);
  }
}

Test(gate_core, explain_without_tables_says_nothing) {
  cJSON *a = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0});
  cJSON *c = mk_run((run_spec_t){.host = 1.0, .gpu = 2.0});
  cJSON_DeleteItemFromObject(a, "top_kernels");
  cJSON_DeleteItemFromObject(a, "top_ops");
  pd_cmp_report_t rep;
  memset(&rep, 0, sizeof rep);
  const cJSON *ca = a, *cc = c;
  cr_assert_eq(pd_cmp_explain(&ca, 1, &cc, 1, &rep), 0);
  cr_expect_eq(rep.nchanges, 0, "one side has no tables: no explanation rather than a wrong one");
  /* garbage in a table row is ignored, not read as a number */
  cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "top_kernels"), 0), "self_cuda_time_us",
                            cJSON_CreateString("lots"));
  cJSON *b2 = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0});
  const cJSON *cb = b2;
  cr_assert_eq(pd_cmp_explain(&cb, 1, &cc, 1, &rep), 0);
  cr_assert_geq(rep.nchanges, 1);
  cr_expect_str_eq(rep.changes[0].name, "sgemm", "sgemm now reads 0 us: the largest change");
  cJSON_Delete(a);
  cJSON_Delete(b2);
  cJSON_Delete(c);
}

/* The stored gate on the verdict: a planted cause that appears or goes fails; a move
 * between the balance verdicts (compute, host_bound, launch_overhead) is host-dependent
 * and passes with a note; a schema-1 baseline's rule-table verdict is not compared. */
static pd_cmp_verdict_t verdict_row(const char *base_bn, const char *now_bn, int base_schema) {
  cJSON *runs[3];
  for (int i = 0; i < 3; i++) runs[i] = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0, .bottleneck = base_bn});
  pd_promote_info_t info = {.git_commit = "abc1234", .command = "test", .date = "2026-11-23T00:00:00Z"};
  cJSON *base = NULL;
  char why[256];
  cr_assert_eq(pd_baseline_promote((const cJSON *const *)runs, NULL, 3, &info, &base, why, sizeof why), 0, "%s",
               why);
  cJSON_ReplaceItemInObject(base, "schema_version", cJSON_CreateNumber(base_schema));
  cJSON *cur = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0, .bottleneck = now_bn});
  cJSON_ReplaceItemInObject(cur, "schema_version", cJSON_CreateNumber(2));
  pd_cmp_report_t rep;
  cr_assert_eq(pd_cmp_compare(cur, base, NULL, &rep, why, sizeof why), 0, "%s", why);
  pd_cmp_verdict_t v = row_of(&rep, "verdict.bottleneck")->verdict;
  pd_cmp_report_free(&rep);
  for (int i = 0; i < 3; i++) cJSON_Delete(runs[i]);
  cJSON_Delete(base);
  cJSON_Delete(cur);
  return v;
}

Test(gate_core, verdict_planted_causes_fail_balance_moves_pass) {
  cr_expect_eq(verdict_row("sync", "sync", 2), PD_CMP_OK);
  cr_expect_eq(verdict_row("sync", "launch_overhead", 2), PD_CMP_REGRESSED);
  cr_expect_eq(verdict_row("compute", "dataloader", 2), PD_CMP_REGRESSED);
  cr_expect_eq(verdict_row("compute", "host_bound", 2), PD_CMP_OK);
  cr_expect_eq(verdict_row("launch_overhead", "compute", 2), PD_CMP_OK);
  cr_expect_eq(verdict_row("sync", "launch_overhead", 1), PD_CMP_SKIPPED);
}

/* Adds an op row of us per step (NSTEPS calls) to a run's top_ops. */
static void add_op(cJSON *run, const char *name, double us) {
  cJSON *row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "name", name);
  cJSON_AddNumberToObject(row, "calls", NSTEPS);
  cJSON_AddNumberToObject(row, "self_cpu_time_us", us * NSTEPS);
  cJSON_AddItemToArray(cJSON_GetObjectItem(run, "top_ops"), row);
}

/* Issue 23 item 6: an op near the --top_n cut of an older run is missing from its table;
 * against a whole table it must read "not known", not "new" or "gone". */
Test(gate_core, explain_cut_op_tables_say_not_known) {
  cJSON *old = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0}); /* no top_ops_complete: cut */
  cJSON *now = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0});
  cJSON_AddBoolToObject(now, "top_ops_complete", true);
  add_op(now, "near_cut", 20.0);
  pd_cmp_report_t rep;
  memset(&rep, 0, sizeof rep);
  const cJSON *co = old, *cn = now;
  cr_assert_eq(pd_cmp_explain(&co, 1, &cn, 1, &rep), 0);
  cr_assert_eq(rep.nchanges, 1);
  cr_expect_str_eq(rep.changes[0].name, "near_cut");
  cr_expect(rep.changes[0].base_cut && !rep.changes[0].now_cut);
  /* the same base with a whole table: the op is really new */
  cJSON_AddBoolToObject(old, "top_ops_complete", true);
  cr_assert_eq(pd_cmp_explain(&co, 1, &cn, 1, &rep), 0);
  cr_assert_eq(rep.nchanges, 1);
  cr_expect(!rep.changes[0].base_cut && !rep.changes[0].now_cut);
  /* the report's text: "not known", never "gone", for a cut side */
  cJSON_DeleteItemFromObject(old, "top_ops_complete");
  cr_assert_eq(pd_cmp_explain(&cn, 1, &co, 1, &rep), 0); /* reversed: the op "went" */
  cr_assert_eq(rep.nchanges, 1);
  cr_expect(rep.changes[0].now_cut);
  rep.counts[PD_CMP_REGRESSED] = 1;
  rep.nrows = 1;
  pd_cmp_row_t row = {.metric = "step_time_p10_s", .verdict = PD_CMP_REGRESSED};
  rep.rows = &row;
  char buf[4096] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  cr_assert_not_null(f);
  pd_cmp_report_print(f, &rep);
  fclose(f);
  cr_expect_not_null(strstr(buf, "not known"), "%s", buf);
  cr_expect_null(strstr(buf, "gone"), "%s", buf);
  cJSON *j = pd_cmp_report_to_json(&rep);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "changes"), 0), "now_table_cut")));
  cJSON_Delete(j);
  rep.rows = NULL;
  /* a pooled baseline is whole only when every run's table was */
  const cJSON *in[] = {now, old};
  cJSON *pooled = NULL;
  char why[256];
  cr_assert_eq(pd_baseline_promote(in, NULL, 2, NULL, &pooled, why, sizeof why), 0, "%s", why);
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(pooled, "top_ops_complete")));
  cJSON_Delete(pooled);
  cr_assert_eq(pd_baseline_promote(in, NULL, 1, NULL, &pooled, why, sizeof why), 0, "%s", why);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(pooled, "top_ops_complete")));
  cJSON_Delete(pooled);
  cJSON_Delete(old);
  cJSON_Delete(now);
}

/* ---- A/B: minimum detectable effect, statistic, normalisation, primary metric ------------- */

/* An A/B of n rounds: base runs at host scale base_host[r], head runs at head_host[r];
 * per run, when given: the host calibration (host_calibration start_ns and end_ns, cal_*)
 * and the traced-call cost (profiler_cost.calibration.ns_per_cuda_call, cost_*). */
static int ab_runs_with(size_t n, const double *base_host, const double *head_host, const double *cal_b,
                        const double *cal_h, const double *cost_b, const double *cost_h, const pd_cmp_options_t *opt,
                        pd_cmp_report_t *rep, char *why, size_t whylen) {
  cJSON *b[32], *h[32];
  cr_assert_leq(n, 32);
  for (size_t r = 0; r < n; r++) {
    b[r] = mk_run((run_spec_t){.host = base_host[r], .gpu = 1.0});
    h[r] = mk_run((run_spec_t){.host = head_host[r], .gpu = 1.0});
    for (int side = 0; side < 2; side++) {
      cJSON *run = side == 0 ? b[r] : h[r];
      const double *cal = side == 0 ? cal_b : cal_h, *cost = side == 0 ? cost_b : cost_h;
      if (cal != NULL) {
        cJSON *hc = cJSON_AddObjectToObject(run, "host_calibration");
        cJSON_AddNumberToObject(hc, "start_ns", cal[r]);
        cJSON_AddNumberToObject(hc, "end_ns", cal[r]);
      }
      if (cost != NULL) {
        cJSON *pc = cJSON_AddObjectToObject(run, "profiler_cost");
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(pc, "calibration"), "ns_per_cuda_call", cost[r]);
      }
    }
  }
  int rc = pd_cmp_ab((const cJSON *const *)b, n, (const cJSON *const *)h, n, NULL, opt, rep, why, whylen);
  for (size_t r = 0; r < n; r++) {
    cJSON_Delete(b[r]);
    cJSON_Delete(h[r]);
  }
  return rc;
}

/* ab_runs_with, host calibration only. */
static int ab_runs(size_t n, const double *base_host, const double *head_host, const double *cal_b,
                   const double *cal_h, const pd_cmp_options_t *opt, pd_cmp_report_t *rep, char *why, size_t whylen) {
  return ab_runs_with(n, base_host, head_host, cal_b, cal_h, NULL, NULL, opt, rep, why, whylen);
}

/* Issue 23 item 4: each host row states the smallest slowdown it would catch; quiet runs
 * catch what is beyond the tolerance, two-state runs need more, too few rounds none, and
 * an A/B slowed by a little more than the stated figure is indeed caught. */
Test(gate_core, ab_states_its_minimum_detectable_effect) {
  double one[16], two_state[17], tiny[5];
  for (int r = 0; r < 17; r++) {
    two_state[r] = r % 3 == 1 ? 1.4 : 1.0 + 0.04 * (r % 4); /* a slow state in a third of the runs */
  }
  for (int r = 0; r < 16; r++) one[r] = 1.0;
  for (int r = 0; r < 5; r++) tiny[r] = 1.0;
  pd_cmp_report_t rep;
  char why[256];
  g_rng = 0x1234;
  cr_assert_eq(ab_runs(10, one, one, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  const double quiet = row_of(&rep, "step_time_p10_s")->mde_fraction;
  cr_expect_geq(quiet, 0.03, "never below the tolerance (3%%): %g", quiet);
  cr_expect_leq(quiet, 0.05, "1%% step noise: a slowdown just beyond the tolerance is caught: %g", quiet);
  cr_expect(isnan(row_of(&rep, "gpu_kernel_time_per_step_us")->mde_fraction), "device rows: not computed");
  char buf[8192] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  pd_cmp_report_print(f, &rep);
  fclose(f);
  cr_expect_not_null(strstr(buf, "mde %"), "%s", buf);
  cJSON *j = pd_cmp_report_to_json(&rep);
  const cJSON *row = NULL;
  cJSON_ArrayForEach(row, cJSON_GetObjectItem(j, "rows")) {
    if (strcmp(cJSON_GetObjectItem(row, "metric")->valuestring, "step_time_p10_s") == 0)
      cr_expect_float_eq(cJSON_GetObjectItem(row, "mde_fraction")->valuedouble, quiet, 1e-12);
  }
  cJSON_Delete(j);
  f = fmemopen(buf, sizeof buf - 1, "w");
  pd_cmp_report_write_markdown(f, &rep);
  fclose(f);
  cr_expect_not_null(strstr(buf, "| mde % |"), "%s", buf);
  pd_cmp_report_free(&rep);

  g_rng = 0x1234;
  cr_assert_eq(ab_runs(16, two_state, two_state + 1, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  const double noisy = row_of(&rep, "avg_step_time_s")->mde_fraction;
  cr_expect_gt(noisy, quiet + 0.01, "runs in two states need a larger slowdown: %g vs %g", noisy, quiet);
  pd_cmp_report_free(&rep);
  /* deterministic: the same runs give the same figure */
  g_rng = 0x1234;
  cr_assert_eq(ab_runs(16, two_state, two_state + 1, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "avg_step_time_s")->mde_fraction, noisy);
  pd_cmp_report_free(&rep);

  /* a head slowed by 1.2x the stated figure is caught (the same base runs) */
  double slowed[10];
  for (int r = 0; r < 10; r++) slowed[r] = 1.0 + 1.2 * quiet;
  g_rng = 0x1234;
  cr_assert_eq(ab_runs(10, one, slowed, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_REGRESSED);
  pd_cmp_report_free(&rep);

  /* at a later look's alpha (0.0015, gpu_ab.sh's defaults) with 24 quiet rounds, two
   * samples: the figure is found, not >100% (the simulation's relabellings must be able
   * to reach that alpha) */
  double q24[24];
  for (int r = 0; r < 24; r++) q24[r] = 1.0;
  pd_cmp_options_t late = {.alpha = 0.0015, .unpaired = true, .keep = 1.0};
  g_rng = 0x1234;
  cr_assert_eq(ab_runs(24, q24, q24, NULL, NULL, &late, &rep, why, sizeof why), 0, "%s", why);
  const double late_mde = row_of(&rep, "step_time_p10_s")->mde_fraction;
  cr_expect(isfinite(late_mde) && late_mde >= 0.03 && late_mde <= 0.05, "24 quiet rounds at alpha 0.0015: %g",
            late_mde);
  pd_cmp_report_free(&rep);

  /* 5 rounds can never reach p < 0.01: no slowdown is detectable */
  cr_assert_eq(ab_runs(5, tiny, tiny, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect(isinf(row_of(&rep, "step_time_p10_s")->mde_fraction));
  j = pd_cmp_report_to_json(&rep);
  cJSON_ArrayForEach(row, cJSON_GetObjectItem(j, "rows")) {
    if (strcmp(cJSON_GetObjectItem(row, "metric")->valuestring, "step_time_p10_s") == 0)
      cr_expect_str_eq(cJSON_GetObjectItem(row, "mde_fraction")->valuestring, "+inf");
  }
  cJSON_Delete(j);
  pd_cmp_report_free(&rep);
}

/* --normalize: a head whose CPU ran 20% slower in every run, which its calibration shows,
 * is not a regression once normalised; without it, it is. Runs without a calibration are
 * refused, naming the field. */
Test(gate_core, ab_normalises_host_times_by_calibration) {
  double one[8], slow[8], cal1[8], cal_slow[8];
  for (int r = 0; r < 8; r++) {
    one[r] = 1.0;
    slow[r] = 1.2;
    cal1[r] = 1e6;
    cal_slow[r] = 1.2e6;
  }
  pd_cmp_report_t rep;
  char why[256];
  cr_assert_eq(ab_runs(8, one, slow, cal1, cal_slow, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_REGRESSED);
  pd_cmp_report_free(&rep);
  pd_cmp_options_t opt = {.normalize_host = true};
  cr_assert_eq(ab_runs(8, one, slow, cal1, cal_slow, &opt, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_OK);
  cr_expect_eq(row_of(&rep, "avg_step_time_s")->verdict, PD_CMP_OK);
  cr_expect(rep.normalized);
  /* the scale is the median calibration: values stay in seconds near the runs' own */
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->base, 0.0003 * 1.1, 0.00003);
  pd_cmp_report_free(&rep);
  cr_expect_eq(ab_runs(8, one, slow, cal1, NULL, &opt, &rep, why, sizeof why), PD_EPARSE);
  cr_expect_not_null(strstr(why, "host_calibration"), "%s", why);
  pd_cmp_report_free(&rep);
}

/* ab_runs_with, traced-call cost only. */
static int ab_runs_cost(size_t n, const double *base_host, const double *head_host, const double *cost_b,
                        const double *cost_h, const pd_cmp_options_t *opt, pd_cmp_report_t *rep, char *why,
                        size_t whylen) {
  return ab_runs_with(n, base_host, head_host, NULL, NULL, cost_b, cost_h, opt, rep, why, whylen);
}

/* --adjust: processes in a slow state (their traced-call cost 1.6x, the step 1.3x), few on
 * the base side and most on the head side, read as a regression unadjusted and as none
 * once adjusted; a real 15% slowdown with the same states on both sides is still caught;
 * runs without the cost are refused, naming the field. */
Test(gate_core, ab_adjusts_host_times_for_the_call_cost) {
  enum { N = 12 };
  double cb[N], ch[N], vb[N], vh[N], cs[N], v1[N], v115[N];
  for (int r = 0; r < N; r++) {
    const bool slow_b = r == 0, slow_h = r != 0; /* 1 of 12 against 11 of 12 */
    const double jitter = 1.0 + 0.004 * (r % 3);
    cb[r] = slow_b ? 2400.0 : 1500.0;
    ch[r] = slow_h ? 2400.0 : 1500.0;
    vb[r] = (slow_b ? 1.3 : 1.0) * jitter;
    vh[r] = (slow_h ? 1.3 : 1.0) * jitter;
    cs[r] = r % 3 == 0 ? 2400.0 : 1500.0; /* the same states on both sides */
    v1[r] = (r % 3 == 0 ? 1.3 : 1.0) * jitter;
    v115[r] = 1.15 * v1[r];
  }
  pd_cmp_report_t rep;
  char why[256];
  pd_cmp_options_t keep_all = {.keep = 1.0};
  cr_assert_eq(ab_runs_cost(N, vb, vh, cb, ch, &keep_all, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_REGRESSED, "unadjusted: the states decide");
  cr_expect_not(rep.adjusted);
  pd_cmp_report_free(&rep);
  pd_cmp_options_t adj = {.keep = 1.0, .adjust_call_cost = true};
  cr_assert_eq(ab_runs_cost(N, vb, vh, cb, ch, &adj, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_OK, "adjusted: %g%%",
               row_of(&rep, "step_time_p10_s")->change_pct);
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->change_pct, 0.0, 1.0, "%g",
                     row_of(&rep, "step_time_p10_s")->change_pct);
  cr_expect(rep.adjusted);
  cJSON *j = pd_cmp_report_to_json(&rep);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "statistic"), "adjusted_for_call_cost")));
  cJSON_Delete(j);
  pd_cmp_report_free(&rep);
  cr_assert_eq(ab_runs_cost(N, v1, v115, cs, cs, &adj, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "step_time_p10_s")->verdict, PD_CMP_REGRESSED, "a real slowdown stays");
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->change_pct, 15.0, 1.0, "%g",
                     row_of(&rep, "step_time_p10_s")->change_pct);
  pd_cmp_report_free(&rep);
  cr_expect_eq(ab_runs_cost(N, v1, v115, cs, NULL, &adj, &rep, why, sizeof why), PD_EPARSE);
  cr_expect_not_null(strstr(why, "ns_per_cuda_call"), "%s", why);
  pd_cmp_report_free(&rep);
}

/* --unpaired: the two-sample permutation test. Eight rounds, the head 0.15 slower in seven
 * and 0.05 faster in one: the paired test's 256 labellings give p = 2/256 (undecided at
 * alpha 0.004), the two-sample test's C(16, 8) = 12870 splits give p = 32/12870 (both
 * counted by brute force in Python, independently of this code, on these exact values;
 * the runs' p10 carries the fixture's 1% step noise, which moves a few near splits, so the
 * two-sample p is checked to lie in [20, 45] / 12870): regressed. Its smallest p is 1/12870
 * where the paired one's is 1/256. */
Test(gate_core, ab_unpaired_uses_every_split_of_the_runs) {
  double b[8], h[8], hi[8];
  for (int r = 0; r < 8; r++) {
    b[r] = 1.00 + 0.01 * r + 0.00113 * r * r; /* no two sums of eight alike: no ties */
    h[r] = r == 3 ? b[r] - 0.05 : b[r] + 0.15;
    hi[r] = b[r] + 0.5;
  }
  pd_cmp_report_t rep;
  char why[256];
  pd_cmp_options_t opt = {.alpha = 0.004, .keep = 1.0, .primary = "step_time_p10_s"};
  cr_assert_eq(ab_runs(8, b, h, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  const pd_cmp_row_t *r = row_of(&rep, "step_time_p10_s");
  cr_expect_float_eq(r->p_value, 2.0 / 256.0, 1e-12, "paired p %g", r->p_value);
  cr_expect_eq(r->verdict, PD_CMP_OK);
  cr_expect_eq(rep.undecided, 1);
  cr_expect_not(rep.unpaired);
  pd_cmp_report_free(&rep);
  opt.unpaired = true;
  cr_assert_eq(ab_runs(8, b, h, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  r = row_of(&rep, "step_time_p10_s");
  cr_expect(r->p_value >= 20.0 / 12870.0 && r->p_value <= 45.0 / 12870.0, "two-sample p %g (x12870 = %.1f)",
            r->p_value, r->p_value * 12870.0);
  cr_expect_eq(r->verdict, PD_CMP_REGRESSED);
  cr_expect_not_null(strstr(r->note, "two-sample permutation"), "%s", r->note);
  cr_expect(rep.unpaired);
  cJSON *j = pd_cmp_report_to_json(&rep);
  cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "statistic"), "test")->valuestring,
                   "two_sample_permutation");
  cJSON_Delete(j);
  pd_cmp_report_free(&rep);
  /* every head run above every base run: the one split of 12870 */
  cr_assert_eq(ab_runs(8, b, hi, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->p_value, 1.0 / 12870.0, 1e-12);
  pd_cmp_report_free(&rep);
  /* 12 rounds: C(24, 12) is over 65536, so 65536 splits drawn from the fixed seed */
  double b12[12], h12[12];
  for (int i = 0; i < 12; i++) {
    b12[i] = 1.0 + 0.01 * i;
    h12[i] = b12[i] + 0.5;
  }
  cr_assert_eq(ab_runs(12, b12, h12, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->p_value, 1.0 / 65537.0, 1e-12, "%g",
                     row_of(&rep, "step_time_p10_s")->p_value);
  cr_expect(isfinite(row_of(&rep, "step_time_p10_s")->mde_fraction));
  pd_cmp_report_free(&rep);
}

/* The drawn two-sample relabellings of the mean pick the head's runs by a partial shuffle:
 * each split must be equally likely. 12 rounds (C(24, 12) is over 65536: drawn), every run
 * 1.0 but two head runs at 10.0: a relabelling is at least as extreme as the observed one
 * exactly when both 10.0s fall in the head, C(22, 10) / C(24, 12) = 132 / 552 = 0.2391;
 * with one 10.0, when it does, 0.5 (the runs' steps without noise, so that the 1.0s tie
 * exactly). 65536 draws: a standard error of 0.0017 and 0.002. */
Test(gate_core, ab_drawn_two_sample_splits_are_uniform) {
  double b[12], h2[12], h1[12];
  step_noise = 0.0;
  for (int i = 0; i < 12; i++) {
    b[i] = 1.0;
    h2[i] = i < 2 ? 10.0 : 1.0;
    h1[i] = i < 1 ? 10.0 : 1.0;
  }
  pd_cmp_report_t rep;
  char why[256];
  pd_cmp_options_t opt = {.alpha = 0.01, .keep = 1.0, .unpaired = true, .primary = "step_time_p10_s"};
  cr_assert_eq(ab_runs(12, b, h2, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  double p = row_of(&rep, "step_time_p10_s")->p_value;
  cr_expect(fabs(p - 132.0 / 552.0) < 0.007, "two outliers: p %g, want 0.2391", p);
  pd_cmp_report_free(&rep);
  cr_assert_eq(ab_runs(12, b, h1, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  p = row_of(&rep, "step_time_p10_s")->p_value;
  cr_expect(fabs(p - 0.5) < 0.008, "one outlier: p %g, want 0.5", p);
  pd_cmp_report_free(&rep);
  step_noise = 0.01;
}

/* --primary: only the named host metric gates; a regression of another host row is
 * reported. --keep 1 averages every run. An A/B beyond tolerance but not significant is
 * counted as undecided. */
Test(gate_core, ab_primary_keep_and_undecided) {
  double one[10], slower[10];
  for (int r = 0; r < 10; r++) {
    one[r] = 1.0;
    slower[r] = 1.08;
  }
  pd_cmp_report_t rep;
  char why[256];
  pd_cmp_options_t opt = {.primary = "avg_step_time_s"};
  cr_assert_eq(ab_runs(10, one, slower, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(row_of(&rep, "avg_step_time_s")->verdict, PD_CMP_REGRESSED);
  const pd_cmp_row_t *p10 = row_of(&rep, "step_time_p10_s");
  cr_expect_eq(p10->verdict, PD_CMP_OK, "a secondary host row is reported, not failed");
  cr_expect_not_null(strstr(p10->note, "only the primary host metric avg_step_time_s gates"), "%s", p10->note);
  cr_expect(rep.failed);
  pd_cmp_report_free(&rep);
  opt.primary = "no_such_metric";
  cr_expect_eq(ab_runs(10, one, slower, NULL, NULL, &opt, &rep, why, sizeof why), PD_EINVAL);
  cr_expect_not_null(strstr(why, "no_such_metric"), "%s", why);
  pd_cmp_report_free(&rep);
  /* keep 1: the mean of every run; two slow head runs of ten then move it */
  double two_slow[10];
  for (int r = 0; r < 10; r++) two_slow[r] = r < 2 ? 1.5 : 1.0;
  opt = (pd_cmp_options_t){.keep = 1.0};
  cr_assert_eq(ab_runs(10, one, two_slow, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->change_pct, 10.0, 1.5, "%g",
                     row_of(&rep, "step_time_p10_s")->change_pct);
  cr_expect_float_eq(rep.keep, 1.0, 1e-12);
  pd_cmp_report_free(&rep);
  cr_assert_eq(ab_runs(10, one, two_slow, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_float_eq(row_of(&rep, "step_time_p10_s")->change_pct, 0.0, 1.5, "the better half drops them");
  pd_cmp_report_free(&rep);
  /* 7 rounds: +10% in six, -10% in one: beyond tolerance, p >= 2/128: undecided */
  double h7[7];
  for (int r = 0; r < 7; r++) h7[r] = r == 6 ? 0.9 : 1.1;
  cr_assert_eq(ab_runs(7, one, h7, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  p10 = row_of(&rep, "step_time_p10_s");
  cr_expect_eq(p10->verdict, PD_CMP_OK);
  cr_expect_geq(p10->p_value, 0.01);
  cr_expect_geq(rep.undecided, 1);
  cr_expect_not_null(strstr(p10->note, "undecided"), "%s", p10->note);
  cJSON *j = pd_cmp_report_to_json(&rep);
  cr_expect_geq(cJSON_GetObjectItem(j, "undecided")->valueint, 1);
  cJSON_Delete(j);
  pd_cmp_report_free(&rep);
}

/* A gating row worse by more than half its tolerance (3% for the step's center) but within
 * it is undecided too: a real change a little beyond the tolerance reads there about as
 * often as beyond it, and stopping would pass it. Half the tolerance or less, or better,
 * is decided (a pass); a secondary row never counts. */
Test(gate_core, ab_worse_by_more_than_half_the_tolerance_is_undecided) {
  double one[10], h2[10], h1[10], faster[10];
  for (int r = 0; r < 10; r++) {
    one[r] = 1.0;
    h2[r] = 1.02;
    h1[r] = 1.01;
    faster[r] = 0.98;
  }
  pd_cmp_report_t rep;
  char why[256];
  pd_cmp_options_t opt = {.primary = "avg_step_time_s"};
  cr_assert_eq(ab_runs(10, one, h2, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  const pd_cmp_row_t *r = row_of(&rep, "avg_step_time_s");
  cr_expect_float_eq(r->change_pct, 2.0, 0.2, "%g", r->change_pct);
  cr_expect_eq(r->verdict, PD_CMP_OK);
  cr_expect_eq(rep.undecided, 1, "the primary row only: %zu", rep.undecided);
  cr_expect_not_null(strstr(r->note, "more than half of it: undecided"), "%s", r->note);
  cr_expect_not(rep.failed);
  pd_cmp_report_free(&rep);
  cr_assert_eq(ab_runs(10, one, h1, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(rep.undecided, 0, "+1%% is within half the tolerance");
  cr_expect_null(strstr(row_of(&rep, "avg_step_time_s")->note, "undecided"));
  pd_cmp_report_free(&rep);
  cr_assert_eq(ab_runs(10, one, faster, NULL, NULL, &opt, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_eq(rep.undecided, 0, "faster is never undecided");
  pd_cmp_report_free(&rep);
  cr_assert_eq(ab_runs(10, one, h2, NULL, NULL, NULL, &rep, why, sizeof why), 0, "%s", why);
  cr_expect_geq(rep.undecided, 2, "without a primary every host row gates: %zu", rep.undecided);
  pd_cmp_report_free(&rep);
}

/* Runs whose untraced warmup steps (warmup_step_times_s) carry the head's 8% slowdown while
 * their traced steps are in a slow state one process in three, as the traced call's state
 * puts them on these hosts: the A/B's untraced_step_p50_s row sees +8% and, as the primary,
 * fails the A/B; its p10 sibling is a row too. A stored comparison has no untraced row (its
 * baselines do not pool those samples), and a base without them has none either. */
Test(gate_core, ab_judges_the_untraced_warmup_steps) {
  enum { N = 9, W = 40 };
  cJSON *b[N], *h[N];
  for (int r = 0; r < N; r++) {
    b[r] = mk_run((run_spec_t){.host = r % 3 == 0 ? 1.4 : 1.0, .gpu = 1.0});
    h[r] = mk_run((run_spec_t){.host = r % 3 == 1 ? 1.4 : 1.0, .gpu = 1.0});
    double wb[W], wh[W];
    for (int i = 0; i < W; i++) {
      wb[i] = 0.00025 * (1.0 + 0.01 * rng_normal());
      wh[i] = 0.00025 * 1.08 * (1.0 + 0.01 * rng_normal());
    }
    cJSON_AddItemToObject(b[r], "warmup_step_times_s", cJSON_CreateDoubleArray(wb, W));
    cJSON_AddItemToObject(h[r], "warmup_step_times_s", cJSON_CreateDoubleArray(wh, W));
  }
  pd_cmp_report_t rep;
  char why[256];
  pd_cmp_options_t opt = {.keep = 1.0, .unpaired = true, .primary = "untraced_step_p50_s"};
  cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)h, N, NULL, &opt, &rep, why, sizeof why),
               0, "%s", why);
  const pd_cmp_row_t *u = row_of(&rep, "untraced_step_p50_s");
  cr_expect_eq(u->policy.cls, PD_METRIC_CLASS_HOST);
  cr_expect_float_eq(u->change_pct, 8.0, 1.0, "%g", u->change_pct);
  cr_expect_eq(u->verdict, PD_CMP_REGRESSED);
  cr_expect_float_eq(row_of(&rep, "untraced_step_p10_s")->change_pct, 8.0, 1.5, "%g",
                     row_of(&rep, "untraced_step_p10_s")->change_pct);
  cr_expect(rep.failed);
  pd_cmp_report_free(&rep);
  /* the same build on both sides: no failure from the untraced row */
  cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)b, N, NULL, &opt, &rep, why, sizeof why),
               0, "%s", why);
  cr_expect_eq(row_of(&rep, "untraced_step_p50_s")->verdict, PD_CMP_OK);
  pd_cmp_report_free(&rep);
  /* stored: a run against a single-run "baseline" that has the samples: no untraced row */
  cr_assert_eq(pd_cmp_compare(h[0], b[1], NULL, &rep, why, sizeof why), 0, "%s", why);
  for (size_t i = 0; i < rep.nrows; i++)
    cr_expect_null(strstr(rep.rows[i].metric, "untraced"), "stored row %s", rep.rows[i].metric);
  pd_cmp_report_free(&rep);
  /* a base build before the samples: no untraced row, and naming it as the primary is refused */
  for (int r = 0; r < N; r++) cJSON_DeleteItemFromObject(b[r], "warmup_step_times_s");
  cr_expect_neq(pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)h, N, NULL, &opt, &rep, why, sizeof why),
                0);
  cr_expect_not_null(strstr(why, "primary metric 'untraced_step_p50_s'"), "%s", why);
  pd_cmp_report_free(&rep); /* in every case (pd_gate.h) */
  for (int r = 0; r < N; r++) {
    cJSON_Delete(b[r]);
    cJSON_Delete(h[r]);
  }
}

/* One run whose untraced warmup steps are w x 0.25 ms (1% noise), with the two calibration
 * figures --adjust reads. */
static cJSON *mk_untraced_run(double w, double call_ns, double launch_untraced_ns) {
  cJSON *d = mk_run((run_spec_t){.host = 1.0, .gpu = 1.0});
  double ws[40];
  for (int i = 0; i < 40; i++) ws[i] = 0.00025 * w * (1.0 + 0.01 * rng_normal());
  cJSON_AddItemToObject(d, "warmup_step_times_s", cJSON_CreateDoubleArray(ws, 40));
  cJSON *cal = cJSON_AddObjectToObject(cJSON_AddObjectToObject(d, "profiler_cost"), "calibration");
  cJSON_AddNumberToObject(cal, "ns_per_cuda_call", call_ns);
  if (launch_untraced_ns > 0) cJSON_AddNumberToObject(cal, "ns_per_launch_untraced", launch_untraced_ns);
  return d;
}

/* --primary auto: the rule (pd_cmp_ab_auto_primary) and the A/B that applies it to its
 * runs. Nine rounds, the head's untraced steps 10% slower, its traced ones not: the row
 * chosen gates (regressed), the report names it and why. The choice follows the runs:
 * clean with the probe in every run takes the untraced p10, another scenario the p50; one
 * head run without the probe, the p10; one base run without untraced steps, the traced
 * p10 (which sees no change). */
Test(gate_core, ab_primary_auto_chooses_from_the_runs) {
  const char *why = NULL;
  cr_expect_str_eq(pd_cmp_ab_auto_primary("clean", true, true, &why), "untraced_step_p10_s");
  cr_expect_str_eq(pd_cmp_ab_auto_primary("tiny_ops", true, true, &why), "untraced_step_p50_s");
  cr_expect_str_eq(pd_cmp_ab_auto_primary(NULL, true, true, NULL), "untraced_step_p50_s");
  cr_expect_str_eq(pd_cmp_ab_auto_primary("clean", true, false, &why), "untraced_step_p10_s");
  cr_expect_str_eq(pd_cmp_ab_auto_primary("tiny_ops", false, true, &why), "step_time_p10_s");
  cr_expect(why != NULL && why[0] != '\0');
  enum { N = 9, W = 40 };
  const struct {
    const char *scenario;
    int drop; /* 0 none, 1 one head run's probe, 2 one base run's untraced steps */
    const char *primary, *why;
    bool failed;
  } cases[] = {
      {"clean", 0, "untraced_step_p10_s", "untraced steps and the probe, clean", true},
      {"tiny_ops", 0, "untraced_step_p50_s", "untraced steps and the probe", true},
      {"tiny_ops", 1, "untraced_step_p10_s", "untraced steps without the probe in every run", true},
      {"tiny_ops", 2, "step_time_p10_s", "some run has no untraced warmup steps", false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cJSON *b[N], *h[N];
    for (int r = 0; r < N; r++) {
      b[r] = mk_untraced_run(1.0, 1500.0, 4000.0);
      h[r] = mk_untraced_run(1.10, 1500.0, 4000.0);
      double pr[W];
      for (int i = 0; i < W; i++) pr[i] = 4000.0 * (1.0 + 0.01 * rng_normal());
      cJSON_AddItemToObject(b[r], "warmup_probe_launch_ns", cJSON_CreateDoubleArray(pr, W));
      if (!(cases[c].drop == 1 && r == 3)) cJSON_AddItemToObject(h[r], "warmup_probe_launch_ns", cJSON_CreateDoubleArray(pr, W));
      if (cases[c].drop == 2 && r == 5) cJSON_DeleteItemFromObject(b[r], "warmup_step_times_s");
      cJSON_ReplaceItemInObject(cJSON_GetObjectItem(b[r], "config"), "scenario", cJSON_CreateString(cases[c].scenario));
      cJSON_ReplaceItemInObject(cJSON_GetObjectItem(h[r], "config"), "scenario", cJSON_CreateString(cases[c].scenario));
    }
    pd_cmp_report_t rep;
    char err[256];
    pd_cmp_options_t opt = {.keep = 1.0, .unpaired = true, .adjust_call_cost = true, .primary = PD_CMP_PRIMARY_AUTO};
    cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)h, N, NULL, &opt, &rep, err, sizeof err),
                 0, "case %zu: %s", c, err);
    cr_expect_str_eq(rep.primary, cases[c].primary, "case %zu", c);
    cr_expect_str_eq(rep.primary_why, cases[c].why, "case %zu", c);
    cr_expect_eq(rep.failed, cases[c].failed, "case %zu: failed %d", c, rep.failed);
    if (cases[c].failed) cr_expect_eq(row_of(&rep, cases[c].primary)->verdict, PD_CMP_REGRESSED, "case %zu", c);
    pd_cmp_report_free(&rep);
    /* a named primary is kept, and no reason is given */
    opt.primary = "untraced_step_p10_s";
    if (cases[c].drop != 2) {
      cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)h, N, NULL, &opt, &rep, err, sizeof err),
                   0, "case %zu: %s", c, err);
      cr_expect_str_eq(rep.primary_why, "", "case %zu", c);
      pd_cmp_report_free(&rep);
    }
    for (int r = 0; r < N; r++) {
      cJSON_Delete(b[r]);
      cJSON_Delete(h[r]);
    }
  }
}

/* The process states of round r in the two untraced-covariate tests below: the base slow
 * (1.3x) in round 0 only and the head in every other round, so that unadjusted the states
 * decide; with same_states, both sides slow one round in three and the head 10% slower
 * (*fh). A little jitter per round on both. */
static void untraced_states(int r, bool same_states, bool *sb, bool *sh, double *jitter, double *fh) {
  *jitter = 1.0 + 0.004 * (r % 3);
  *sb = r == 0;
  *sh = r != 0;
  *fh = 1.0;
  if (same_states) {
    *sb = *sh = r % 3 == 0;
    *fh = 1.10;
  }
}

/* --adjust prefers the in-process probe (warmup_probe_launch_ns, its median per run) for the
 * untraced rows: processes in a slow state (the probe's launches 1.5x, the untraced steps
 * 1.3x) while the one calibration after the warmup missed it (4000 ns in every run), 1 of
 * 12 slow on the base side and 11 of 12 on the head side. Variant 0: every run probed: the
 * states are adjusted away and the report names the probe; variant 1: the same states on
 * both sides and the head 10% slower: caught; variant 2: one head run without the probe
 * and variant 3: one with a probe sample out of range: the calibration is the covariate
 * (named so), which misses the states: a regression. */
Test(gate_core, ab_adjusts_untraced_rows_for_the_warmup_probe) {
  enum { N = 12, W = 40 };
  for (int variant = 0; variant < 4; variant++) {
    cJSON *b[N], *h[N];
    for (int r = 0; r < N; r++) {
      bool sb, sh;
      double jitter, fh;
      untraced_states(r, variant == 1, &sb, &sh, &jitter, &fh);
      b[r] = mk_untraced_run((sb ? 1.3 : 1.0) * jitter, 1500.0, 4000.0);
      h[r] = mk_untraced_run((sh ? 1.3 : 1.0) * jitter * fh, 1500.0, 4000.0);
      double pb[W], ph[W];
      for (int i = 0; i < W; i++) {
        pb[i] = (sb ? 6000.0 : 4000.0) * (1.0 + 0.01 * rng_normal());
        ph[i] = (sh ? 6000.0 : 4000.0) * (1.0 + 0.01 * rng_normal());
      }
      if (variant == 3 && r == 4) ph[7] = 2e7; /* out of (0, 1e7) ns */
      cJSON_AddItemToObject(b[r], "warmup_probe_launch_ns", cJSON_CreateDoubleArray(pb, W));
      if (!(variant == 2 && r == 4)) cJSON_AddItemToObject(h[r], "warmup_probe_launch_ns", cJSON_CreateDoubleArray(ph, W));
    }
    pd_cmp_report_t rep;
    char why[256];
    pd_cmp_options_t opt = {.keep = 1.0, .unpaired = true, .adjust_call_cost = true,
                            .primary = "untraced_step_p50_s"};
    cr_assert_eq(pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)h, N, NULL, &opt, &rep, why, sizeof why),
                 0, "%s", why);
    const pd_cmp_row_t *u = row_of(&rep, "untraced_step_p50_s");
    if (variant == 0) {
      cr_expect_str_eq(rep.untraced_covariate, "warmup_probe_launch_ns");
      cr_expect_eq(u->verdict, PD_CMP_OK, "adjusted along the probe: %g%%", u->change_pct);
      cr_expect_float_eq(u->change_pct, 0.0, 1.5, "%g", u->change_pct);
      cJSON *j = pd_cmp_report_to_json(&rep);
      const cJSON *cov = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "statistic"), "untraced_covariate");
      cr_expect(cJSON_IsString(cov) && strcmp(cov->valuestring, "warmup_probe_launch_ns") == 0);
      cJSON_Delete(j);
    } else if (variant == 1) {
      cr_expect_str_eq(rep.untraced_covariate, "warmup_probe_launch_ns");
      cr_expect_eq(u->verdict, PD_CMP_REGRESSED, "a real 10%% slowdown: %g%%", u->change_pct);
      cr_expect_float_eq(u->change_pct, 10.0, 1.5, "%g", u->change_pct);
    } else {
      cr_expect_str_eq(rep.untraced_covariate, "ns_per_launch_untraced", "variant %d", variant);
      cr_expect_eq(u->verdict, PD_CMP_REGRESSED, "variant %d: the calibration misses the states (%g%%)", variant,
                   u->change_pct);
    }
    pd_cmp_report_free(&rep);
    for (int r = 0; r < N; r++) {
      cJSON_Delete(b[r]);
      cJSON_Delete(h[r]);
    }
  }
}

/* --adjust on the untraced rows uses the untraced launch time: processes in a slow state
 * (untraced launch 1.5x, the untraced step 1.3x; the traced-call cost unmoved), 1 of 12
 * on the base side and 11 of 12 on the head side, read as a regression unadjusted and as
 * none adjusted; a real 10% slowdown of the untraced steps with the same states on both
 * sides is caught adjusted; runs without the untraced launch fall back to the traced-call
 * cost, which does not track this state: the regression stays. Variant 3: one head run's
 * calibration read no positive traced-call cost (0): the untraced rows are adjusted all
 * the same and the report says the traced rows were not; variant 4: that run and no
 * untraced launch figure: no covariate at all, refused, naming the field. */
Test(gate_core, ab_adjusts_untraced_rows_for_the_untraced_launch) {
  enum { N = 12 };
  for (int variant = 0; variant < 5; variant++) {
    cJSON *b[N], *h[N];
    for (int r = 0; r < N; r++) {
      bool sb, sh;
      double jitter, fh;
      untraced_states(r, variant == 1, &sb, &sh, &jitter, &fh);
      const double lu = variant == 2 || variant == 4 ? 0.0 : 1.0; /* no untraced launch figure */
      const double call_h = variant >= 3 && r == 5 ? 0.0 : 1500.0;
      b[r] = mk_untraced_run((sb ? 1.3 : 1.0) * jitter, 1500.0, lu * (sb ? 6000.0 : 4000.0));
      h[r] = mk_untraced_run((sh ? 1.3 : 1.0) * jitter * fh, call_h, lu * (sh ? 6000.0 : 4000.0));
    }
    pd_cmp_report_t rep;
    char why[256];
    pd_cmp_options_t opt = {.keep = 1.0, .unpaired = true, .adjust_call_cost = true,
                            .primary = "untraced_step_p50_s"};
    const char *names[2 * N];
    for (int r = 0; r < N; r++) {
      names[r] = "base.json";
      names[N + r] = r == 5 ? "head.6.json" : "head.json";
    }
    const int rc =
        pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)h, N, names, &opt, &rep, why, sizeof why);
    if (variant == 4) {
      cr_expect_eq(rc, PD_EPARSE);
      cr_expect_not_null(strstr(why, "head.6.json: profiler_cost.calibration.ns_per_cuda_call"), "%s", why);
      pd_cmp_report_free(&rep);
      for (int r = 0; r < N; r++) {
        cJSON_Delete(b[r]);
        cJSON_Delete(h[r]);
      }
      continue;
    }
    cr_assert_eq(rc, 0, "%s", why);
    cr_expect_eq(rep.adjust_note[0] != '\0', variant == 3, "note '%s'", rep.adjust_note);
    const pd_cmp_row_t *u = row_of(&rep, "untraced_step_p50_s");
    if (variant == 0 || variant == 3) {
      cr_expect_eq(u->verdict, PD_CMP_OK, "adjusted by the untraced launch: %g%%", u->change_pct);
      cr_expect_float_eq(u->change_pct, 0.0, 1.5, "%g", u->change_pct);
    } else if (variant == 1) {
      cr_expect_eq(u->verdict, PD_CMP_REGRESSED, "a real 10%% slowdown: %g%%", u->change_pct);
      cr_expect_float_eq(u->change_pct, 10.0, 1.5, "%g", u->change_pct);
    } else {
      cr_expect_eq(u->verdict, PD_CMP_REGRESSED, "no untraced launch figure: the states decide (%g%%)",
                   u->change_pct);
    }
    if (variant == 3) {
      cr_expect_not_null(strstr(rep.adjust_note, "traced rows not adjusted: head.6.json"), "%s", rep.adjust_note);
      cJSON *j = pd_cmp_report_to_json(&rep);
      const cJSON *note = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "statistic"), "adjust_note");
      cr_expect(cJSON_IsString(note) && strstr(note->valuestring, "ns_per_cuda_call") != NULL);
      cJSON_Delete(j);
    }
    pd_cmp_report_free(&rep);
    if (variant == 0) {
      opt.adjust_call_cost = false;
      cr_assert_eq(
          pd_cmp_ab((const cJSON *const *)b, N, (const cJSON *const *)h, N, NULL, &opt, &rep, why, sizeof why), 0,
          "%s", why);
      cr_expect_eq(row_of(&rep, "untraced_step_p50_s")->verdict, PD_CMP_REGRESSED, "unadjusted: the states decide");
      pd_cmp_report_free(&rep);
    }
    for (int r = 0; r < N; r++) {
      cJSON_Delete(b[r]);
      cJSON_Delete(h[r]);
    }
  }
}
