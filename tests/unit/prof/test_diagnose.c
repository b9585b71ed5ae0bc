/* test_diagnose.c: the time attribution and the verdict built on it.
 *
 *  - the attribution splits hand-made steps exactly (GPU busy, data wait, a sync that is
 *    cheap and one that is not, allocation, pageable copies, launch latency), and its
 *    costs always sum to the step;
 *  - the verdict names the largest cost when it reaches its share, `compute` or
 *    `host_bound` otherwise, and never names a cause (or lists a finding) under its share;
 *  - on every committed trace, ours and torch.profiler's, the verdict is the one the
 *    measured costs support (tests/fixtures/torch/truth.json has the measurements);
 *  - docs/diagnosis.md and README.md show exactly the tables the code applies.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_analyze.h"
#include "pd/pd_replay.h"
#include "pd/pd_stats.h"
#include "../pd_test_util.h"

/* ---- hand-made traces ------------------------------------------------------------------ */

static pd_trace_t *T;
static uint64_t corr;

static void add(pd_event_kind_t k, const char *name, int64_t s_us, int64_t e_us, uint64_t c) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = k;
  e.name = name;
  e.start_ns = s_us * 1000;
  e.end_ns = e_us * 1000;
  e.correlation_id = c;
  e.pid = 1;
  e.tid = 1;
  if (k == PD_EVENT_RANGE || k == PD_EVENT_CPU_OP) e.u.range.step = -1;
  cr_assert_eq(pd_trace_add(T, &e), 0);
}

static void step(int64_t n, int64_t s_us, int64_t e_us) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = PD_EVENT_RANGE;
  e.name = "ProfilerStep#";
  e.start_ns = s_us * 1000;
  e.end_ns = e_us * 1000;
  e.pid = e.tid = 1;
  e.u.range.step = n;
  cr_assert_eq(pd_trace_add(T, &e), 0);
}

/* A launch call at [l0, l1) and its kernel at [k0, k1). */
static void launch(int64_t l0, int64_t l1, int64_t k0, int64_t k1) {
  corr++;
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", l0, l1, corr);
  add(PD_EVENT_KERNEL, "k", k0, k1, corr);
}

static pd_attribution_t attribute(void) {
  pd_trace_index_t ix;
  cr_assert_eq(pd_trace_index_build(T, &ix), 0);
  pd_attribution_t a;
  cr_assert_eq(pd_attribute(T, &ix, &a), 0);
  pd_trace_index_free(&ix);
  int64_t sum = 0;
  for (int c = 0; c < PD_CAUSE_COUNT; c++) sum += a.cost_ns[c];
  cr_expect_eq(sum, a.step_ns, "costs sum to %lld, steps to %lld", (long long)sum, (long long)a.step_ns);
  return a;
}

static void setup(void) {
  T = pd_trace_create();
  corr = 0;
}
static void teardown(void) { pd_trace_destroy(T); }

#define US(x) ((int64_t)(x) * 1000)

Test(attribute, busy_launch_latency_and_host_gaps, .init = setup, .fini = teardown) {
  step(1, 0, 100);
  launch(0, 5, 10, 40);   /* 0-10: launch latency (the call began at 0) */
  launch(50, 55, 60, 90); /* 40-50: host had not issued it; 50-60: latency; 90-100: tail */
  launch(150, 155, 160, 170);
  pd_attribution_t a = attribute();
  cr_expect_eq(a.steps, 1);
  cr_expect_eq(a.cost_ns[PD_CAUSE_GPU_COMPUTE], US(60));
  cr_expect_eq(a.cost_ns[PD_CAUSE_LAUNCH_BOUND], US(40));
  cr_expect_eq(a.all_busy_ns, US(60));
  cr_expect_eq(a.max_gap_ns_sum, US(20));
}

Test(attribute, data_wait_claims_the_idle_it_overlaps, .init = setup, .fini = teardown) {
  step(1, 0, 1000);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 900, 0);
  launch(900, 905, 910, 1000);
  pd_attribution_t a = attribute();
  cr_expect_eq(a.cost_ns[PD_CAUSE_DATA], US(900));
  cr_expect_eq(a.cost_ns[PD_CAUSE_LAUNCH_BOUND], US(10));
  cr_expect_eq(a.cost_ns[PD_CAUSE_GPU_COMPUTE], US(90));
}

/* A sync after a long queue (GPU-bound): the host waited 500 us, the GPU then idles 30 us
 * until the next launch: the sync costs the 30 us gap. */
Test(attribute, sync_costs_the_smaller_of_block_and_gap, .init = setup, .fini = teardown) {
  step(1, 0, 1000);
  launch(0, 5, 10, 510);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 10, 512, 0);
  launch(540, 545, 550, 1000);
  pd_attribution_t a = attribute();
  cr_expect_eq(a.cost_ns[PD_CAUSE_SYNC], US(30), "sync %lld", (long long)a.cost_ns[PD_CAUSE_SYNC]);
  cr_expect_eq(a.cost_ns[PD_CAUSE_LAUNCH_BOUND], US(20)); /* 0-10 and 540-550 latency */
}

/* A short sync in a host-bound step: blocked 4 us, then the host takes 200 us to issue
 * the next work: the sync costs its 4 us, the rest is the host's. */
Test(attribute, cheap_sync_in_a_host_bound_step, .init = setup, .fini = teardown) {
  step(1, 0, 1000);
  launch(0, 5, 10, 20);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 18, 22, 0);
  launch(222, 227, 232, 1000);
  pd_attribution_t a = attribute();
  cr_expect_eq(a.cost_ns[PD_CAUSE_SYNC], US(4));
  cr_expect_eq(a.cost_ns[PD_CAUSE_LAUNCH_BOUND], US(10 + 198 + 10));
}

Test(attribute, allocation_and_pageable_copies, .init = setup, .fini = teardown) {
  step(1, 0, 1000);
  add(PD_EVENT_RUNTIME, "cudaMalloc", 0, 300, 0);
  corr++;
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", 300, 600, corr);
  pd_event_t c;
  memset(&c, 0, sizeof c);
  c.kind = PD_EVENT_MEMCPY;
  c.start_ns = US(580);
  c.end_ns = US(600);
  c.correlation_id = corr;
  c.u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  c.u.memcpy.src_kind = PD_MEM_PAGEABLE;
  c.u.memcpy.dst_kind = PD_MEM_DEVICE;
  c.u.memcpy.bytes = 4096;
  cr_assert_eq(pd_trace_add(T, &c), 0);
  launch(600, 605, 610, 1000);
  pd_attribution_t a = attribute();
  cr_expect_eq(a.cost_ns[PD_CAUSE_ALLOCATION], US(300));
  cr_expect_eq(a.cost_ns[PD_CAUSE_PAGEABLE_COPY], US(280)); /* 300-580: the driver stages the data */
  cr_expect_eq(a.cost_ns[PD_CAUSE_DATA], US(20));           /* the input copy running alone */
  cr_expect_eq(a.pageable_copies, 1);
  cr_expect_eq(a.pageable_bytes, 4096);
}

Test(attribute, idle_without_a_launching_call_is_other, .init = setup, .fini = teardown) {
  step(1, 0, 100);
  add(PD_EVENT_KERNEL, "k", 50, 60, 0); /* no call in the trace */
  pd_attribution_t a = attribute();
  cr_expect_eq(a.cost_ns[PD_CAUSE_OTHER], US(90));
}

Test(attribute, steps_too_long_to_sum_are_refused, .init = setup, .fini = teardown) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = PD_EVENT_RANGE;
  e.name = "ProfilerStep#";
  e.pid = e.tid = 1;
  for (int i = 0; i < 3; i++) {
    e.u.range.step = i;
    e.start_ns = -4600000000000000000LL + i;
    e.end_ns = 4600000000000000000LL;
    cr_assert_eq(pd_trace_add(T, &e), 0);
  }
  pd_trace_index_t ix;
  cr_assert_eq(pd_trace_index_build(T, &ix), 0);
  pd_attribution_t a;
  cr_expect_eq(pd_attribute(T, &ix, &a), PD_EPARSE);
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_expect_eq(pd_metrics_from_index(T, &ix, &m), PD_EPARSE);
  pd_trace_index_free(&ix);
}

/* One step in ten at ten times the others is a hiccup: counted apart, not in the costs
 * (a loader stall in one step must not name the bottleneck of the rest). */
Test(attribute, a_slow_step_is_counted_apart, .init = setup, .fini = teardown) {
  for (int i = 0; i < 9; i++) {
    step(i, i * 100, i * 100 + 100);
    launch(i * 100, i * 100 + 5, i * 100 + 10, i * 100 + 100);
  }
  step(9, 900, 1900);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 900, 1800, 0);
  launch(1800, 1805, 1810, 1900);
  pd_attribution_t a = attribute();
  cr_expect_eq(a.steps, 9);
  cr_expect_eq(a.slow_steps, 1);
  cr_expect_eq(a.slowest_step_ns, US(1000));
  cr_expect_eq(a.cost_ns[PD_CAUSE_DATA], 0, "the stall is not a cost of the typical step");
  cr_expect_eq(a.all_step_ns, US(1900));
}

/* Slow steps that recur (two in ten: a bursty loader) are a cause, never "slow steps":
 * they stay in the costs (issue 22, item 4). */
Test(attribute, recurring_slow_steps_stay_in_the_costs, .init = setup, .fini = teardown) {
  for (int i = 0; i < 10; i++) {
    bool slow = i % 5 == 4;
    int64_t s0 = i * 1000, len = slow ? 1000 : 100;
    step(i, s0, s0 + len);
    if (slow) add(PD_EVENT_RANGE, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", s0, s0 + 900, 0);
    launch(s0 + len - 100, s0 + len - 95, s0 + len - 90, s0 + len);
  }
  pd_attribution_t a = attribute();
  cr_expect_eq(a.steps, 10);
  cr_expect_eq(a.slow_steps, 0);
  cr_expect_eq(a.cost_ns[PD_CAUSE_DATA], US(1800), "both bursts are data wait");
}

Test(attribute, kernel_names_for_tensor_cores) {
  bool tc;
  cr_expect(pd_kernel_is_matmul("ampere_sgemm_128x64_nn", &tc) && !tc);
  cr_expect(pd_kernel_is_matmul("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc", &tc) && tc);
  cr_expect(pd_kernel_is_matmul("nvjet_sm90_hsh_288x128_64x3_1x2_h_bz_coopA_NNN", &tc) && tc);
  cr_expect(pd_kernel_is_matmul("nvjet_sm90_sss_128x64_64x4_1x2_h_bz_NNN", &tc) && !tc);
  cr_expect(pd_kernel_is_matmul("void implicit_convolve_sgemm<float, float, 1024>", &tc) && !tc);
  cr_expect(!pd_kernel_is_matmul("void at::native::vectorized_elementwise_kernel<4>", &tc));
  cr_expect(!pd_kernel_is_matmul(NULL, &tc));
}

/* ---- the verdict on made-up costs -------------------------------------------------------- */

/* A step of wall us, with costs given as shares; the rest is GPU compute. */
static pd_metrics_t costs(double data, double sync, double alloc, double pageable, double launch) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  m.steps = 4;
  m.step_wall_us = 1000;
  m.cost_data_wait_us_per_step = data * 1000;
  m.cost_sync_us_per_step = sync * 1000;
  m.cost_allocation_us_per_step = alloc * 1000;
  m.cost_pageable_copy_us_per_step = pageable * 1000;
  m.cost_launch_bound_us_per_step = launch * 1000;
  m.cost_other_us_per_step = 0;
  m.cost_gpu_compute_us_per_step = (1 - data - sync - alloc - pageable - launch) * 1000;
  m.gpu_busy_fraction = 1 - data - sync - alloc - pageable - launch;
  m.kernels_per_step = 100;
  m.avg_kernel_time_us = 5;
  m.gpu_kernel_time_per_step_us = 500;
  m.sync_calls_per_step = 3;
  m.sync_time_per_step_us = 10;
  m.device_alloc_calls_per_step = 0;
  m.max_gpu_gap_us = 10;
  m.fp32_matmul_time_share = 0;
  return m;
}

static pd_verdict_t diag(const pd_metrics_t *m) {
  pd_verdict_t v;
  pd_diagnose(m, PD_ADVICE_TORCH, &v);
  return v;
}

static bool has_finding(const pd_verdict_t *v, const char *cause) {
  for (int i = 0; i < v->nfindings; i++)
    if (strcmp(v->findings[i].cause, cause) == 0) return true;
  return false;
}

Test(diagnose, largest_cost_names_the_bottleneck) {
  pd_metrics_t m = costs(0.70, 0.02, 0, 0, 0.10);
  pd_verdict_t v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_DATALOADER, "%s", v.evidence);
  cr_expect_float_eq(v.share_of_step, 0.70, 1e-9);
  cr_expect_float_eq(v.cost_us_per_step, 700, 1e-9);
  cr_expect(strstr(v.advice, "num_workers") != NULL, "%s", v.advice);
  cr_expect(has_finding(&v, "launch_bound"));
  cr_expect(!has_finding(&v, "sync"), "a 2%% sync is under the finding share");
  m = costs(0, 0.40, 0, 0, 0.30);
  cr_expect_eq(diag(&m).bottleneck, PD_BOTTLENECK_SYNC);
  m = costs(0, 0, 0.50, 0, 0.1);
  cr_expect_eq(diag(&m).bottleneck, PD_BOTTLENECK_ALLOCATOR_CHURN);
  m = costs(0, 0, 0, 0.45, 0.2);
  cr_expect_eq(diag(&m).bottleneck, PD_BOTTLENECK_PAGEABLE_COPY);
  m = costs(0, 0, 0, 0, 0.85);
  cr_expect_eq(diag(&m).bottleneck, PD_BOTTLENECK_LAUNCH_OVERHEAD);
}

Test(diagnose, a_cause_under_its_share_is_never_named) {
  /* GPU compute is the largest cost: a sync of 20% is a finding. */
  pd_metrics_t m = costs(0, 0.20, 0, 0, 0.15);
  pd_verdict_t v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_COMPUTE, "GPU busy 65%%: %s", v.evidence);
  cr_expect(has_finding(&v, "sync"));
  /* A sync of 14% under launch-bound gaps of 50% (under their 60%): nothing dominates. */
  m = costs(0, 0.14, 0, 0, 0.50);
  v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_HOST_BOUND, "%s", v.evidence);
  cr_expect(has_finding(&v, "sync") && has_finding(&v, "launch_bound"));
  /* The planted sync scenario as measured: sync 29%, launch-bound 36%, GPU 32%: the
   * sync is the largest cause over its share. */
  m = costs(0, 0.29, 0, 0, 0.36);
  v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_SYNC, "%s", v.evidence);
  cr_expect(has_finding(&v, "launch_bound"));
  /* Launch-bound at 50% is under its 60% share; with the GPU busy 30%, the host is the
   * limit without a dominant cause. */
  m = costs(0.1, 0.1, 0, 0, 0.50);
  v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_HOST_BOUND, "%s", v.evidence);
  cr_expect_str_eq(v.rule, "no_dominant_cause");
  /* 3 synchronizing calls per step that cost nothing: no sync anywhere. */
  m = costs(0, 0.001, 0, 0, 0.1);
  v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_COMPUTE);
  cr_expect(!has_finding(&v, "sync"));
}

Test(diagnose, rules_fire_on_their_evidence_only) {
  pd_metrics_t m = costs(0, 0, 0, 0, 0.1);
  m.fp32_matmul_time_share = 0.5;
  pd_verdict_t v = diag(&m);
  cr_expect(has_finding(&v, "tensor_cores_unused"), "fp32 GEMMs half the kernel time");
  cr_expect(strstr(v.findings[v.nfindings - 1].advice, "autocast") != NULL);
  m.fp32_matmul_time_share = 0.10;
  cr_expect(!has_finding((v = diag(&m), &v), "tensor_cores_unused"));
  m.max_gpu_gap_us = 200;
  cr_expect(has_finding((v = diag(&m), &v), "gpu_gap"));
  m.peak_device_memory_bytes = 95e9;
  m.device_memory_total_bytes = 100e9;
  cr_expect(has_finding((v = diag(&m), &v), "memory_near_capacity"));
  m = costs(0, 0, 0, 0, 0.85);
  cr_expect(has_finding((v = diag(&m), &v), "low_gpu_utilization"));
}

Test(diagnose, advice_follows_the_source) {
  pd_metrics_t m = costs(0, 0.50, 0, 0, 0.1);
  pd_verdict_t v;
  pd_diagnose(&m, PD_ADVICE_DEMO, &v);
  cr_expect(strstr(v.advice, "--no_sync") != NULL, "%s", v.advice);
  pd_diagnose(&m, PD_ADVICE_TORCH, &v);
  cr_expect(strstr(v.advice, ".item()") != NULL, "%s", v.advice);
}

Test(diagnose, metrics_without_attribution_fall_back) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  m.dataloader_wait_fraction = 0.9;
  pd_verdict_t v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_DATALOADER);
  m.dataloader_wait_fraction = 0.01;
  m.sync_calls_per_step = 40; /* a count alone names nothing */
  v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_COMPUTE);
  cr_expect_str_eq(v.rule, "no_attribution");
  pd_diagnose(NULL, PD_ADVICE_DEMO, &v);
  cr_expect_str_eq(v.rule, "no_metrics");
}

/* ---- the committed traces ------------------------------------------------------------------- */

typedef struct {
  const char *file;
  pd_bottleneck_t want;
  const char *absent;  /* a cause that must be neither named nor a finding, or NULL */
  const char *present; /* a cause that must be named or a finding, or NULL */
} fixture_t;

/* The verdicts the replay's savings support (tests/fixtures/torch/truth.json holds what
 * removing each planted problem saved, unprofiled; docs/diagnosis.md puts the predicted
 * savings next to them). Where a plant measured >= 10% it is the bottleneck; under 5% it
 * is not:
 *  - sync_b64: removing the five .item() calls saved 4.2%: not the bottleneck (predicted
 *    9.2%, a finding);
 *  - sync_b512: saved 14.2%: sync (predicted 15.8%);
 *  - tiny_ops_b64: saved 42.8%: launch_overhead (the tiny-op chains, predicted 45.7%);
 *  - memory_churn_b64: saved 27%: allocator_churn (predicted 17.2%: the replay sees the
 *    cudaMalloc/cudaFree calls and their syncs, not the rest of empty_cache's cost);
 *  - dataloader_b64: saved 83.9%: dataloader (predicted 89.3%).
 * The variants without a plant get their balance: no cause's fix saves 10%, so host_bound
 * at batch 64 and in the older H200 traces, with capturing the step in a CUDA graph as a
 * finding (a graph is no cause, never the bottleneck: it saved 79% of the plain step,
 * graphed_b64 in docs/diagnosis.md); sync_b64's five reads (4.2% measured, 9% predicted)
 * stay a finding. GradScaler's one .item() per step is no read a program drops (it decides
 * whether the optimizer step runs), so at batch 1024 the GPU, busy 74% of the step, makes
 * it compute, as in fp32 (the Python that issues their ops is dispatch, not work host_code
 * moves out: replay::host_code_is_the_work_between_ops_not_their_dispatch). */
static const fixture_t fixtures[] = {
    {"runs/dataloader.pt.trace.json.gz", PD_BOTTLENECK_DATALOADER, NULL, NULL},
    {"runs/sync.pt.trace.json.gz", PD_BOTTLENECK_SYNC, NULL, NULL},
    {"runs/memory_churn.pt.trace.json.gz", PD_BOTTLENECK_ALLOCATOR_CHURN, NULL, NULL},
    {"runs/tiny_ops.pt.trace.json.gz", PD_BOTTLENECK_LAUNCH_OVERHEAD, "blocking_reads", "tiny_ops"},
    {"torch/torch_dataloader_b64.pt.trace.json.gz", PD_BOTTLENECK_DATALOADER, "blocking_reads", NULL},
    {"torch/torch_plain_b64.pt.trace.json.gz", PD_BOTTLENECK_HOST_BOUND, "blocking_reads", "launch_overhead"},
    {"torch/torch_sync_b64.pt.trace.json.gz", PD_BOTTLENECK_HOST_BOUND, NULL, "blocking_reads"},
    {"torch/torch_sync_b512.pt.trace.json.gz", PD_BOTTLENECK_SYNC, NULL, "blocking_reads"},
    {"torch/torch_sync.pt.trace.json.gz", PD_BOTTLENECK_HOST_BOUND, "blocking_reads", NULL},
    {"torch/torch_tiny_ops_b64.pt.trace.json.gz", PD_BOTTLENECK_LAUNCH_OVERHEAD, "blocking_reads", "tiny_ops"},
    {"torch/torch_heavy_b1024.pt.trace.json.gz", PD_BOTTLENECK_COMPUTE, "blocking_reads", NULL},
    {"torch/torch_heavy_b1024_fp32.pt.trace.json.gz", PD_BOTTLENECK_COMPUTE, "blocking_reads", NULL},
    {"torch/torch_memory_churn.pt.trace.json.gz", PD_BOTTLENECK_HOST_BOUND, "blocking_reads", "launch_overhead"},
    {"torch/torch_memory_churn_b64.pt.trace.json.gz", PD_BOTTLENECK_ALLOCATOR_CHURN, "blocking_reads", "allocation"},
};

/* The fix named (the verdict's evidence starts with it) or listed as a finding. */
static bool names_or_lists(const pd_verdict_t *v, const char *fix) {
  size_t n = strlen(fix);
  bool named = strcmp(v->rule, "replay") == 0 && strncmp(v->evidence, fix, n) == 0 && v->evidence[n] == ' ';
  return named || has_finding(v, fix);
}

static void check_fixture(const fixture_t *fx) {
  char path[4096];
  snprintf(path, sizeof path, "%s", pd_test_fixtures(fx->file));
  pd_trace_t *t = pd_trace_create();
  char err[512] = "";
  pd_trace_info_t info;
  cr_assert_eq(pd_trace_read_file_info(path, t, &info, err, sizeof err), 0, "%s", err);
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(t, &m), 0);
  double sum = 0;
  for (int c = 0; c < PD_CAUSE_COUNT; c++) {
    static const size_t off[] = {
        offsetof(pd_metrics_t, cost_data_wait_us_per_step), offsetof(pd_metrics_t, cost_sync_us_per_step),
        offsetof(pd_metrics_t, cost_allocation_us_per_step), offsetof(pd_metrics_t, cost_pageable_copy_us_per_step),
        offsetof(pd_metrics_t, cost_launch_bound_us_per_step), offsetof(pd_metrics_t, cost_gpu_compute_us_per_step),
        offsetof(pd_metrics_t, cost_other_us_per_step)};
    sum += *(const double *)((const char *)&m + off[c]);
  }
  cr_expect_float_eq(sum, m.step_wall_us, 1e-6 * m.step_wall_us, "%s: costs %g vs step %g", fx->file, sum,
                     m.step_wall_us);
  pd_verdict_t v;
  pd_diagnose(&m, info.torch ? PD_ADVICE_TORCH : PD_ADVICE_DEMO, &v);
  cr_expect_eq(v.bottleneck, fx->want, "%s: got %s (%s), want %s", fx->file, pd_bottleneck_name(v.bottleneck),
               v.evidence, pd_bottleneck_name(fx->want));
  if (fx->absent != NULL)
    cr_expect(!names_or_lists(&v, fx->absent), "%s names or lists %s: %s", fx->file, fx->absent, v.evidence);
  if (fx->present != NULL)
    cr_expect(names_or_lists(&v, fx->present), "%s: %s neither named nor listed", fx->file, fx->present);
  /* The replay ran, reproduces the steps, and names nothing under its share. */
  cr_expect_str_eq(v.rule[0] == 'r' ? "replay" : v.rule, "replay", "%s: rule %s", fx->file, v.rule);
  double lim_median, lim_worst;
  pd_test_replay_limits(fx->file, &lim_median, &lim_worst);
  cr_expect(v.replay_error_median <= lim_median && v.replay_error_max <= lim_worst, "%s: replay error %.2f%% / %.2f%%",
            fx->file, v.replay_error_median * 100, v.replay_error_max * 100);
  if (strcmp(v.rule, "replay") == 0) cr_expect_geq(v.share_of_step, PD_SAVING_NAME_SHARE, "%s", fx->file);
  cr_expect_geq(v.nsavings, 8, "%s: every fix has a saving", fx->file);
  for (int i = 1; i < v.nsavings; i++)
    if (strcmp(v.savings[i].cause, "combined") != 0)
      cr_expect_geq(v.savings[i - 1].est_saving_us_per_step, v.savings[i].est_saving_us_per_step, "%s: sorted",
                    fx->file);
  for (int i = 0; i < v.nfindings; i++)
    if (isfinite(v.findings[i].share_of_step))
      cr_expect_geq(v.findings[i].share_of_step, 0.05, "%s: finding %s", fx->file, v.findings[i].cause);
  pd_trace_destroy(t);
}

Test(diagnose, every_fixture_gets_the_verdict_its_costs_support) {
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) check_fixture(&fixtures[i]);
}

Test(diagnose, bottleneck_names) {
  for (int b = 0; b < PD_BOTTLENECK_COUNT; b++) {
    pd_bottleneck_t got;
    cr_expect_eq(pd_bottleneck_parse(pd_bottleneck_name((pd_bottleneck_t)b), &got), 0);
    cr_expect_eq(got, b);
  }
  pd_bottleneck_t got;
  cr_expect_str_eq(pd_bottleneck_name(PD_BOTTLENECK_HOST_BOUND), "host_bound");
  cr_expect_str_eq(pd_bottleneck_name((pd_bottleneck_t)99), "unknown");
  cr_expect_eq(pd_bottleneck_parse("gpu", &got), PD_EINVAL);
  cr_expect_eq(pd_bottleneck_parse(NULL, &got), PD_EINVAL);
  cr_expect(pd_bottleneck_is_balance("compute") && pd_bottleneck_is_balance("host_bound") &&
            pd_bottleneck_is_balance("launch_overhead"));
  cr_expect(!pd_bottleneck_is_balance("sync") && !pd_bottleneck_is_balance("dataloader") &&
            !pd_bottleneck_is_balance("allocator_churn") && !pd_bottleneck_is_balance("pageable_copy"));
  cr_expect(!pd_bottleneck_is_balance(NULL) && !pd_bottleneck_is_balance("gpu"));
  cr_expect_str_eq(pd_cause_name(PD_CAUSE_LAUNCH_BOUND), "launch_bound");
  cr_expect_str_eq(pd_cause_name((pd_cause_t)99), "?");
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
  static const char *const want[] = {
      "| `data_wait` | `dataloader` | >= 15%, the largest such | >= 5% |",
      "| `launch_bound` | `launch_overhead` | >= 60%, the largest such | >= 5% |",
      "| `gpu_compute` | `compute` | largest cost, or busy >= 50% |",
      "| (none dominant) | `host_bound` |",
      "| `tensor_cores_unused` |",
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

/* ---- the verdict from savings (the replay) --------------------------------------------------- */

/* Metrics with a replay: predicted unprofiled step 1000 us, each fix's saving given. */
static pd_metrics_t savings(double reads, double reads_async, double host_code, double launch, double busy) {
  pd_metrics_t m = costs(0.0, 0.30, 0, 0, 0.20); /* the attribution says sync 30% */
  m.gpu_busy_fraction = busy;
  m.replay_quality = PD_REPLAY_APPROXIMATE;
  snprintf(m.replay_why, sizeof m.replay_why, "test");
  snprintf(m.replay_cost_model, sizeof m.replay_cost_model, "test model");
  m.replay_step_us = 1200;
  m.replay_step_error_median_fraction = 0.01;
  m.replay_step_error_max_fraction = 0.02;
  m.predicted_unprofiled_step_us = 1000;
  m.saving_data_wait_us_per_step = 0;
  m.saving_blocking_reads_us_per_step = reads;
  m.saving_blocking_reads_async_us_per_step = reads_async;
  m.saving_pageable_copy_us_per_step = 0;
  m.saving_allocation_us_per_step = 0;
  m.saving_launch_overhead_us_per_step = launch;
  m.saving_tiny_ops_us_per_step = 0;
  m.saving_host_code_us_per_step = host_code;
  m.saving_combined_us_per_step = reads + host_code - 20; /* they overlap */
  m.replay_combined_mask = PD_FIX_BIT(PD_FIX_READS) | PD_FIX_BIT(PD_FIX_HOST_CODE);
  m.replay_reads_per_step = 5;
  return m;
}

/* The fix that saves most from 10% on names the bottleneck; the others from 5% are
 * findings, the asynchronous reads never name one, the overlap is replayed, not summed. */
Test(diagnose, the_largest_saving_names_the_bottleneck) {
  pd_metrics_t m = savings(250, 400, 80, 30, 0.30);
  pd_verdict_t v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_SYNC, "%s", v.evidence);
  cr_expect_str_eq(v.rule, "replay");
  cr_expect_float_eq(v.share_of_step, 0.25, 1e-9);
  cr_expect_float_eq(v.cost_us_per_step, 250, 1e-9);
  cr_expect(strncmp(v.evidence, "blocking_reads saves 5.0 blocking reads per step", 48) == 0, "%s", v.evidence);
  cr_expect(has_finding(&v, "host_code"), "8%% is a finding");
  cr_expect(!has_finding(&v, "launch_overhead"), "3%% is not");
  cr_expect(!has_finding(&v, "blocking_reads_async"), "the other way to fix the reads is no finding");
  cr_expect(!has_finding(&v, "sync"), "the attribution's costs are no findings once the replay speaks");
  cr_expect(has_finding(&v, "low_gpu_utilization"), "the rules stay as notes");
  cr_expect_str_eq(v.savings[0].cause, "blocking_reads_async", "every fix's saving, largest first");
  cr_expect_str_eq(v.savings[v.nsavings - 1].cause, "combined");
  cr_expect_float_eq(v.savings[v.nsavings - 1].est_saving_us_per_step, 310, 1e-9);
  cr_expect(strstr(v.savings[v.nsavings - 1].evidence, "blocking_reads host_code") != NULL, "%s",
            v.savings[v.nsavings - 1].evidence);
  cr_expect_float_eq(v.predicted_unprofiled_step_us, 1000, 1e-9);
  cr_expect_eq(v.replay_quality, PD_REPLAY_APPROXIMATE);
  cr_expect_str_eq(v.replay_cost_model, "test model");
}

/* host_code is a cause like the others. */
Test(diagnose, host_code_names_itself) {
  pd_metrics_t m = savings(20, 10, 150, 60, 0.30);
  pd_verdict_t v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_HOST_CODE, "%s", v.evidence);
  cr_expect(has_finding(&v, "launch_overhead"));
  cr_expect(!has_finding(&v, "blocking_reads"), "2%% is not a finding");
}

/* No fix saves 10%: the balance names it (host_bound with the GPU idle, compute when busy),
 * with no cost per step. */
Test(diagnose, no_large_saving_is_the_balance) {
  pd_metrics_t m = savings(90, 40, 60, 20, 0.30);
  pd_verdict_t v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_HOST_BOUND, "%s", v.evidence);
  cr_expect_str_eq(v.rule, "replay_balance");
  cr_expect(isnan(v.cost_us_per_step));
  cr_expect(strstr(v.evidence, "largest: blocking_reads 9.0%") != NULL, "%s", v.evidence);
  cr_expect(has_finding(&v, "blocking_reads") && has_finding(&v, "host_code"));
  m = savings(90, 40, 60, 20, 0.80);
  v = diag(&m);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_COMPUTE, "%s", v.evidence);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pd_verdict_print(f, &v);
  fclose(f);
  cr_expect(strstr(text, "predicted savings per step (unprofiled)") != NULL, "%s", text);
  cr_expect(strstr(text, "replay (approximate: test)") != NULL, "%s", text);
  cr_expect(strstr(text, "nan") == NULL, "%s", text);
  free(text);
}

/* A replay that ran but gave no saving still says why; metrics without one keep the
 * attribution's verdict. */
Test(diagnose, replay_without_savings_says_why) {
  pd_metrics_t m = costs(0.0, 0.30, 0, 0, 0.20);
  pd_verdict_t v = diag(&m);
  cr_expect_eq(v.replay_quality, -1);
  cr_expect_eq(v.nsavings, 0);
  cr_expect_str_eq(v.rule, "sync");
  m.replay_quality = PD_REPLAY_UNAVAILABLE;
  snprintf(m.replay_why, sizeof m.replay_why, "no step markers");
  v = diag(&m);
  cr_expect_eq(v.replay_quality, PD_REPLAY_UNAVAILABLE);
  cr_expect_str_eq(v.rule, "sync", "the attribution's verdict stays");
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pd_verdict_print(f, &v);
  fclose(f);
  cr_expect(strstr(text, "replay: unavailable (no step markers)") != NULL, "%s", text);
  free(text);
}
