/* diagnose.c: names the bottleneck of a run from its attributed costs.
 *
 * The time attribution (attribute.c) splits every step's wall time into disjoint costs,
 * one per cause. When GPU compute is the largest cost and fills at least half the step
 * the verdict is `compute`; otherwise the largest cause that reaches its naming share is
 * named, and when none does, the
 * verdict says so: `compute` when the GPU is busy at least half the step, `host_bound`
 * otherwise. Every other cause
 * at or above its finding share becomes a finding, and so does each rule below that
 * fires (the ones Nsight Systems' expert rules and torch-tb-profiler's recommendations
 * have, where a trace holds what they need). Nothing is named whose cost is under its
 * threshold.
 *
 * The thresholds live in the two tables below and nowhere else; docs/diagnosis.md prints
 * them (pd_diagnose_print_rules) with the measurements that set them.
 */
#include "pd/pd_replay.h"
#include "pd/pd_stats.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bottleneck names --------------------------------------------------------------------- */

static const char *const bottleneck_names[PD_BOTTLENECK_COUNT] = {
#define PD_BN_NAME_GEN(name, text) text,
    PD_BOTTLENECK_MAP(PD_BN_NAME_GEN)
#undef PD_BN_NAME_GEN
};

const char *pd_bottleneck_name(pd_bottleneck_t b) {
  if ((int)b < 0 || b >= PD_BOTTLENECK_COUNT) return "unknown";
  return bottleneck_names[b];
}

int pd_bottleneck_parse(const char *name, pd_bottleneck_t *b) {
  if (name == NULL || b == NULL) return PD_EINVAL;
  for (int i = 0; i < PD_BOTTLENECK_COUNT; i++) {
    if (strcmp(name, bottleneck_names[i]) == 0) {
      *b = (pd_bottleneck_t)i;
      return 0;
    }
  }
  return PD_EINVAL;
}

bool pd_bottleneck_is_balance(const char *name) {
  pd_bottleneck_t b;
  if (pd_bottleneck_parse(name, &b) != 0) return false;
  return b == PD_BOTTLENECK_COMPUTE || b == PD_BOTTLENECK_HOST_BOUND || b == PD_BOTTLENECK_LAUNCH_OVERHEAD;
}

/* ---- the cause table ------------------------------------------------------------------------ */

/* Share of the step a cause must reach to name the bottleneck, and to be listed as a
 * finding. docs/diagnosis.md has the measurements behind them. */
#define NAME_SHARE 0.15
#define FINDING_SHARE 0.05
/* Launch-bound steps measured 82-91% (tiny_ops, torch eager at batch 64); balanced steps
 * 38-51% (the clean step on a slow host, torch at batch 512-1024). */
#define LAUNCH_NAME_SHARE 0.60
/* Without a dominant cause: `compute` when the GPU is busy at least this share. */
#define BUSY_SHARE 0.50

typedef struct {
  pd_cause_t cause;
  pd_bottleneck_t bottleneck;
  double name_share;    /* >= this and the largest: names the bottleneck (<= 0: never) */
  double finding_share; /* >= this: a finding */
  const char *what;     /* what the cost is, in words */
  const char *advice_demo;
  const char *advice_torch;
} cause_rule_t;

static const cause_rule_t cause_rules[] = {
    {PD_CAUSE_DATA, PD_BOTTLENECK_DATALOADER, NAME_SHARE, FINDING_SHARE,
     "GPU idle while the step waits for its batch, plus input copies running alone",
     "raise --num_workers (and --prefetch_factor), add --pin_memory; make per-sample work cheaper",
     "raise DataLoader num_workers, set pin_memory=True and persistent_workers=True; move per-sample "
     "CPU work out of __getitem__ (pre-process, or decode on the GPU)"},
    {PD_CAUSE_SYNC, PD_BOTTLENECK_SYNC, NAME_SHARE, FINDING_SHARE,
     "GPU idle caused by host-blocking calls (synchronizations, read-backs of device values)",
     "--no_sync: keep the step free of host reads of device values",
     "drop .item(), .cpu(), print() of GPU tensors and torch.cuda.synchronize() inside the step; "
     "accumulate on the GPU and read once every N steps"},
    {PD_CAUSE_ALLOCATION, PD_BOTTLENECK_ALLOCATOR_CHURN, NAME_SHARE, FINDING_SHARE,
     "GPU idle caused by cudaMalloc/cudaFree calls",
     "--allocator pool: allocate once and reuse (or a stream-ordered pool)",
     "do not call torch.cuda.empty_cache() in the loop and keep the caching allocator on; reuse "
     "buffers, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
    {PD_CAUSE_PAGEABLE_COPY, PD_BOTTLENECK_PAGEABLE_COPY, NAME_SHARE, FINDING_SHARE,
     "GPU idle caused by copies from pageable host memory (staged by the driver, host blocked)",
     "--pin_memory: pinned host buffers make the copies asynchronous",
     "DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True)"},
    {PD_CAUSE_LAUNCH_BOUND, PD_BOTTLENECK_LAUNCH_OVERHEAD, LAUNCH_NAME_SHARE, FINDING_SHARE,
     "GPU idle while the host issues work slower than the GPU finishes it (op dispatch, launches)",
     "--tiny_ops_mode graph (or fused): fewer, larger launches; or a larger --batch_size",
     "capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\")), fuse small ops "
     "(torch.compile, fused/foreach optimizers), or raise the batch size"},
    {PD_CAUSE_GPU_COMPUTE, PD_BOTTLENECK_COMPUTE, 0.0, 0.0, "GPU busy (kernels, sets, copies)",
     "the GPU is the limit: --amp for Tensor Cores, then faster kernels",
     "the GPU is the limit: AMP (torch.autocast), channels_last, faster kernels"},
};
#define NCAUSE_RULES (sizeof cause_rules / sizeof cause_rules[0])

/* ---- the rules (findings that are not one cause's time) ---------------------------------------- */

#define LOW_UTIL_SHARE 0.50       /* tb-profiler: GPU utilization under 50% */
#define GAP_SHARE 0.10            /* a single idle gap of 10% of the step or more ... */
#define GAP_MIN_US 100.0          /* ... and at least this long */
#define FP32_MATMUL_SHARE 0.15    /* kernel time in GEMM/conv kernels without Tensor Cores */
#define FP32_MIN_COMPUTE 0.25     /* ... only when the GPU's busy share is at least this */
#define MEMORY_PEAK_SHARE 0.90    /* tb-profiler: peak memory over 90% of the device */

typedef struct {
  const char *name;
  const char *condition;
  const char *advice_demo;
  const char *advice_torch;
} rule_t;

enum { R_LOW_UTIL, R_GAP, R_TENSOR_CORES, R_MEMORY, NRULES };

static const rule_t rules[NRULES] = {
    {"low_gpu_utilization", "GPU busy < 50% of the step (tb-profiler's low-utilization hint)",
     "see the largest cost above: it says what the GPU waits for",
     "see the largest cost above: it says what the GPU waits for"},
    {"gpu_gap", "the longest GPU idle gap in a step >= 10% of the step and >= 100 us (nsys gpu_gaps)",
     "open the trace at the gap: the host row shows what ran instead",
     "open the trace at the gap: the host row shows what ran instead"},
    {"tensor_cores_unused",
     "GEMM/convolution kernels without Tensor Cores >= 15% of kernel time and GPU busy >= 25% "
     "(tb-profiler's Tensor Core hint)",
     "--amp: half-precision GEMMs run on Tensor Cores",
     "enable AMP (torch.autocast with float16 or bfloat16), or allow TF32 "
     "(torch.backends.cuda.matmul.allow_tf32 = True)"},
    {"memory_near_capacity", "peak device memory >= 90% of the device (tb-profiler's memory hint)",
     "a smaller --batch_size, or --amp to halve activations",
     "a smaller batch, activation checkpointing, or AMP"},
};

/* ---- text ------------------------------------------------------------------------------------------ */

static void fmt_us(char *buf, size_t len, double us) {
  if (!isfinite(us)) snprintf(buf, len, "n/a");
  else if (us >= 1e3) snprintf(buf, len, "%.2f ms", us / 1e3);
  else snprintf(buf, len, "%.1f us", us);
}

static void addf(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

static double cost_of(const pd_metrics_t *m, pd_cause_t c) {
  switch (c) {
    case PD_CAUSE_DATA: return m->cost_data_wait_us_per_step;
    case PD_CAUSE_SYNC: return m->cost_sync_us_per_step;
    case PD_CAUSE_ALLOCATION: return m->cost_allocation_us_per_step;
    case PD_CAUSE_PAGEABLE_COPY: return m->cost_pageable_copy_us_per_step;
    case PD_CAUSE_LAUNCH_BOUND: return m->cost_launch_bound_us_per_step;
    case PD_CAUSE_GPU_COMPUTE: return m->cost_gpu_compute_us_per_step;
    case PD_CAUSE_OTHER: return m->cost_other_us_per_step;
    case PD_CAUSE_COUNT: break;
  }
  return NAN;
}

/* The numbers behind one cause: its cost and share, then what it is made of. */
static void cause_evidence(char *buf, size_t len, const pd_metrics_t *m, const cause_rule_t *r) {
  char cost[32], step[32];
  double c = cost_of(m, r->cause);
  fmt_us(cost, sizeof cost, c);
  fmt_us(step, sizeof step, m->step_wall_us);
  buf[0] = '\0';
  addf(buf, len, "%s per step of %s (%.0f%%)", cost, step, 100.0 * c / m->step_wall_us);
  char t[32];
  switch (r->cause) {
    case PD_CAUSE_DATA:
      if (isfinite(m->avg_dataloader_wait_s)) {
        fmt_us(t, sizeof t, m->avg_dataloader_wait_s * 1e6);
        addf(buf, len, ": data wait %s per step", t);
      }
      break;
    case PD_CAUSE_SYNC:
      fmt_us(t, sizeof t, m->sync_time_per_step_us);
      addf(buf, len, ": %.1f blocking calls per step, %s inside them", m->sync_calls_per_step, t);
      if (m->sync_memcpy_calls_per_step > 0 || m->sync_memset_calls_per_step > 0)
        addf(buf, len, " (%.1f synchronous cudaMemcpy, %.1f cudaMemset)", m->sync_memcpy_calls_per_step,
             m->sync_memset_calls_per_step);
      break;
    case PD_CAUSE_ALLOCATION:
      fmt_us(t, sizeof t, m->device_alloc_time_per_step_us);
      addf(buf, len, ": %.1f cudaMalloc/cudaFree calls per step, %s inside them",
           m->device_alloc_calls_per_step, t);
      break;
    case PD_CAUSE_PAGEABLE_COPY:
      addf(buf, len, ": %.1f copies per step from pageable memory, %.1f KiB", m->pageable_copies_per_step,
           m->pageable_copy_bytes_per_step / 1024.0);
      break;
    case PD_CAUSE_LAUNCH_BOUND:
      addf(buf, len, ": %.0f kernels per step, average %.2f us, GPU busy %.0f%% of the step",
           m->kernels_per_step, m->avg_kernel_time_us, m->gpu_busy_fraction * 100.0);
      break;
    case PD_CAUSE_GPU_COMPUTE:
      fmt_us(t, sizeof t, m->gpu_kernel_time_per_step_us);
      addf(buf, len, ": %.0f kernels per step, kernel time %s per step", m->kernels_per_step, t);
      break;
    case PD_CAUSE_OTHER:
    case PD_CAUSE_COUNT:
      break;
  }
}

static void add_finding(pd_verdict_t *v, const char *cause, double share, double cost, const char *evidence,
                        const char *advice) {
  if (v->nfindings >= PD_MAX_FINDINGS) return;
  pd_finding_t *f = &v->findings[v->nfindings++];
  snprintf(f->cause, sizeof f->cause, "%s", cause);
  f->share_of_step = share;
  f->cost_us_per_step = cost;
  snprintf(f->evidence, sizeof f->evidence, "%s", evidence);
  snprintf(f->advice, sizeof f->advice, "%s", advice);
}

/* ---- diagnosis ----------------------------------------------------------------------------------- */

/* Metrics without a time attribution (a metrics JSON of schema 1): only the data wait is
 * told apart, everything else is `compute` with that said. */
static void diagnose_unattributed(const pd_metrics_t *m, pd_advice_t advice, pd_verdict_t *v) {
  v->share_of_step = NAN;
  v->cost_us_per_step = NAN;
  if (m->dataloader_wait_fraction >= 0.30) {
    v->bottleneck = PD_BOTTLENECK_DATALOADER;
    snprintf(v->rule, sizeof v->rule, "data_wait_fraction");
    snprintf(v->evidence, sizeof v->evidence, "data wait %.0f%% of the time (no time attribution in these metrics)",
             m->dataloader_wait_fraction * 100.0);
    snprintf(v->advice, sizeof v->advice, "%s",
             advice == PD_ADVICE_TORCH ? cause_rules[0].advice_torch : cause_rules[0].advice_demo);
    v->share_of_step = m->dataloader_wait_fraction;
    return;
  }
  v->bottleneck = PD_BOTTLENECK_COMPUTE;
  snprintf(v->rule, sizeof v->rule, "no_attribution");
  snprintf(v->evidence, sizeof v->evidence, "no time attribution in these metrics; GPU busy %.0f%% of the step",
           m->gpu_busy_fraction * 100.0);
}

static void diagnose_savings(const pd_metrics_t *m, pd_advice_t advice, pd_verdict_t *v);

void pd_diagnose(const pd_metrics_t *m, pd_advice_t advice, pd_verdict_t *v) {
  if (v == NULL) return;
  memset(v, 0, sizeof(*v));
  v->replay_quality = -1;
  v->replay_error_median = v->replay_error_max = v->replay_step_us = v->predicted_unprofiled_step_us = NAN;
  v->bottleneck = PD_BOTTLENECK_COMPUTE;
  if (m == NULL) {
    snprintf(v->rule, sizeof v->rule, "no_metrics");
    snprintf(v->evidence, sizeof v->evidence, "no metrics");
    v->share_of_step = v->cost_us_per_step = NAN;
    return;
  }
  if (!(m->step_wall_us > 0) || !isfinite(m->cost_gpu_compute_us_per_step)) {
    diagnose_unattributed(m, advice, v);
    return;
  }
  const bool torch = advice == PD_ADVICE_TORCH;
  const double wall = m->step_wall_us;

  /* The largest cost; ties go to the earlier cause in the table. */
  const cause_rule_t *top = NULL, *top_host = NULL;
  for (size_t i = 0; i < NCAUSE_RULES; i++) {
    double c = cost_of(m, cause_rules[i].cause);
    if (!isfinite(c)) continue;
    if (top == NULL || c > cost_of(m, top->cause)) top = &cause_rules[i];
    if (cause_rules[i].cause != PD_CAUSE_GPU_COMPUTE &&
        (top_host == NULL || c > cost_of(m, top_host->cause)))
      top_host = &cause_rules[i];
  }
  const double busy_share = cost_of(m, PD_CAUSE_GPU_COMPUTE) / wall;
  /* Unless the GPU's own work is the largest cost and fills most of the step, the largest
   * cause that reaches its naming share is named (a GPU busy 39% of the step is not what
   * limits it, even when no other single cost is larger). A launch-bound share under its (higher) naming share is the
   * step's ordinary host/GPU balance, not a problem of its own: a planted sync that costs
   * 29% of a step whose ordinary dispatch gaps are 36% is what the step should be rid of. */
  const cause_rule_t *named = NULL;
  if (top != NULL && !(top->cause == PD_CAUSE_GPU_COMPUTE && busy_share >= BUSY_SHARE)) {
    for (size_t i = 0; i < NCAUSE_RULES; i++) {
      const cause_rule_t *r = &cause_rules[i];
      double c = cost_of(m, r->cause);
      if (r->cause == PD_CAUSE_GPU_COMPUTE || !isfinite(c) || c / wall < r->name_share) continue;
      if (named == NULL || c > cost_of(m, named->cause)) named = r;
    }
  }

  char ev[440];
  if (named != NULL) {
    v->bottleneck = named->bottleneck;
    snprintf(v->rule, sizeof v->rule, "%s", pd_cause_name(named->cause));
    cause_evidence(ev, sizeof ev, m, named);
    snprintf(v->evidence, sizeof v->evidence, "%s costs %s", pd_cause_name(named->cause), ev);
    v->cost_us_per_step = cost_of(m, named->cause);
    v->share_of_step = v->cost_us_per_step / wall;
    snprintf(v->advice, sizeof v->advice, "%s", torch ? named->advice_torch : named->advice_demo);
  } else if (busy_share >= BUSY_SHARE) {
    const cause_rule_t *g = &cause_rules[NCAUSE_RULES - 1];
    v->bottleneck = PD_BOTTLENECK_COMPUTE;
    snprintf(v->rule, sizeof v->rule, "gpu_busy");
    cause_evidence(ev, sizeof ev, m, g);
    snprintf(v->evidence, sizeof v->evidence, "GPU busy %s", ev);
    v->cost_us_per_step = cost_of(m, PD_CAUSE_GPU_COMPUTE);
    v->share_of_step = busy_share;
    snprintf(v->advice, sizeof v->advice, "%s", torch ? g->advice_torch : g->advice_demo);
  } else {
    v->bottleneck = PD_BOTTLENECK_HOST_BOUND;
    snprintf(v->rule, sizeof v->rule, "no_dominant_cause");
    char c1[32];
    fmt_us(c1, sizeof c1, wall - cost_of(m, PD_CAUSE_GPU_COMPUTE));
    snprintf(v->evidence, sizeof v->evidence,
             "GPU idle %s per step (%.0f%% of the step) and no single cause reaches %.0f%%: largest %s %.0f%%",
             c1, 100.0 * (1.0 - busy_share), NAME_SHARE * 100.0,
             top_host != NULL ? pd_cause_name(top_host->cause) : "none",
             top_host != NULL ? 100.0 * cost_of(m, top_host->cause) / wall : 0.0);
    v->cost_us_per_step = wall - cost_of(m, PD_CAUSE_GPU_COMPUTE);
    v->share_of_step = 1.0 - busy_share;
    snprintf(v->advice, sizeof v->advice, "%s",
             "the host is the limit: start with the largest finding below, then profile the host side");
  }

  /* Other causes at or above their finding share, largest first. */
  bool used[NCAUSE_RULES] = {false};
  for (;;) {
    const cause_rule_t *best = NULL;
    size_t bi = 0;
    for (size_t i = 0; i < NCAUSE_RULES; i++) {
      const cause_rule_t *r = &cause_rules[i];
      if (used[i] || r == named || r->cause == PD_CAUSE_GPU_COMPUTE) continue;
      double c = cost_of(m, r->cause);
      if (!isfinite(c) || c / wall < r->finding_share) continue;
      if (best == NULL || c > cost_of(m, best->cause)) best = r, bi = i;
    }
    if (best == NULL) break;
    used[bi] = true;
    cause_evidence(ev, sizeof ev, m, best);
    double c = cost_of(m, best->cause);
    add_finding(v, pd_cause_name(best->cause), c / wall, c, ev, torch ? best->advice_torch : best->advice_demo);
  }

  /* The rules. */
  if (busy_share < LOW_UTIL_SHARE) {
    char t[32];
    fmt_us(t, sizeof t, wall - cost_of(m, PD_CAUSE_GPU_COMPUTE));
    snprintf(ev, sizeof ev, "GPU busy %.0f%% of the step, idle %s per step", busy_share * 100.0, t);
    const rule_t *r = &rules[R_LOW_UTIL];
    add_finding(v, r->name, 1.0 - busy_share, wall - cost_of(m, PD_CAUSE_GPU_COMPUTE), ev,
                torch ? r->advice_torch : r->advice_demo);
  }
  if (m->max_gpu_gap_us >= GAP_MIN_US && m->max_gpu_gap_us / wall >= GAP_SHARE) {
    char t[32];
    fmt_us(t, sizeof t, m->max_gpu_gap_us);
    snprintf(ev, sizeof ev, "the longest GPU idle gap is %s per step (%.0f%% of the step)", t,
             100.0 * m->max_gpu_gap_us / wall);
    const rule_t *r = &rules[R_GAP];
    add_finding(v, r->name, m->max_gpu_gap_us / wall, m->max_gpu_gap_us, ev,
                torch ? r->advice_torch : r->advice_demo);
  }
  if (m->fp32_matmul_time_share >= FP32_MATMUL_SHARE && busy_share >= FP32_MIN_COMPUTE) {
    double cost = m->fp32_matmul_time_share * m->gpu_kernel_time_per_step_us;
    snprintf(ev, sizeof ev,
             "GEMM/convolution kernels without Tensor Cores take %.0f%% of kernel time (%.1f us per step)",
             m->fp32_matmul_time_share * 100.0, cost);
    const rule_t *r = &rules[R_TENSOR_CORES];
    add_finding(v, r->name, cost / wall, cost, ev, torch ? r->advice_torch : r->advice_demo);
  }
  if (m->slow_steps > 0) {
    snprintf(ev, sizeof ev,
             "%.0f of %d steps took over twice the median step; they are left out of the costs above",
             m->slow_steps, m->steps);
    add_finding(v, "slow_steps", NAN, NAN, ev, "look at those steps in the trace: a data loader hiccup or a one-off stall");
  }
  if (m->device_memory_total_bytes > 0 && m->peak_device_memory_bytes / m->device_memory_total_bytes >= MEMORY_PEAK_SHARE) {
    snprintf(ev, sizeof ev, "peak device memory %.1f GiB of %.1f GiB (%.0f%%)", m->peak_device_memory_bytes / 1073741824.0,
             m->device_memory_total_bytes / 1073741824.0,
             100.0 * m->peak_device_memory_bytes / m->device_memory_total_bytes);
    const rule_t *r = &rules[R_MEMORY];
    add_finding(v, r->name, NAN, NAN, ev, torch ? r->advice_torch : r->advice_demo);
  }
  if (m->replay_quality >= 0) {
    /* how far the replay got, also when it gave no saving */
    v->replay_quality = m->replay_quality;
    snprintf(v->replay_why, sizeof v->replay_why, "%s", m->replay_why);
    snprintf(v->replay_cost_model, sizeof v->replay_cost_model, "%s", m->replay_cost_model);
  }
  if (m->predicted_unprofiled_step_us > 0 && isfinite(m->predicted_unprofiled_step_us)) diagnose_savings(m, advice, v);
}

/* ---- the verdict from savings (the replay) ------------------------------------------------------- */

/* Each fix of the replay: the bottleneck it names, whether it may name it, and its advice.
 * A fix is listed as a finding where pd_fix_is_extra() says it is one of its own (not the
 * asynchronous reads or the faster loader, partial fixes of a cause another fix names);
 * those two never name. Nor does capturing the step in a CUDA graph, no cause of its own
 * (it takes away all the host's dispatch, so it saves much of any host-bound step and
 * would hide the cause the step was found to have): a finding only. */
typedef struct {
  pd_fix_t fix;
  pd_bottleneck_t bottleneck;
  bool names;
  const char *advice_demo;
  const char *advice_torch;
} fix_rule_t;

static const fix_rule_t fix_rules[] = {
    {PD_FIX_DATA_WAIT, PD_BOTTLENECK_DATALOADER, true,
     "raise --num_workers (and --prefetch_factor), add --pin_memory; make per-sample work cheaper",
     "raise DataLoader num_workers, set pin_memory=True and persistent_workers=True; move per-sample "
     "CPU work out of __getitem__"},
    {PD_FIX_LOADER_2X, PD_BOTTLENECK_DATALOADER, false, "double --num_workers (the loader twice as fast)",
     "double DataLoader num_workers (or halve the per-sample CPU work)"},
    {PD_FIX_READS, PD_BOTTLENECK_SYNC, true, "--no_sync: keep the step free of host reads of device values",
     "drop .item(), .cpu() and print() of GPU tensors inside the step (and the ops that only feed them); "
     "accumulate on the GPU and read once every N steps"},
    {PD_FIX_READS_ASYNC, PD_BOTTLENECK_SYNC, false, "read the values asynchronously (pinned buffer, event)",
     "copy the values with .to('cpu', non_blocking=True) into pinned memory and read them a step later"},
    {PD_FIX_PAGEABLE, PD_BOTTLENECK_PAGEABLE_COPY, true, "--pin_memory: pinned host buffers make the copies asynchronous",
     "pin the host tensors (DataLoader(pin_memory=True), tensor.pin_memory()) and copy with non_blocking=True"},
    {PD_FIX_ALLOCATION, PD_BOTTLENECK_ALLOCATOR_CHURN, true,
     "--allocator pool: allocate once and reuse (or a stream-ordered pool)",
     "do not call torch.cuda.empty_cache() in the loop and keep the caching allocator on; reuse buffers"},
    {PD_FIX_LAUNCH, PD_BOTTLENECK_LAUNCH_OVERHEAD, false,
     "capture the whole step in a CUDA graph (profiler_demo graphs only the tiny-op chain: --tiny_ops_mode graph)",
     "capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs)"},
    {PD_FIX_TINY_OPS, PD_BOTTLENECK_LAUNCH_OVERHEAD, true, "--tiny_ops_mode graph (or fused): fewer, larger launches",
     "fuse the chains of small ops (torch.compile, foreach/fused optimizers) or capture them in a CUDA graph"},
    {PD_FIX_HOST_CODE, PD_BOTTLENECK_HOST_CODE, true,
     "move per-step host work outside the ops (logging, bookkeeping) out of the step",
     "move Python work between ops (tokenizing, logging, bookkeeping) out of the step, into DataLoader "
     "workers or a background thread"},
};
#define NFIX_RULES (sizeof fix_rules / sizeof fix_rules[0])

/* The mechanism behind one fix's saving, in words. */
static void fix_evidence(char *buf, size_t len, const pd_metrics_t *m, pd_fix_t f, double saving, double base) {
  char sv[32], t[32];
  fmt_us(sv, sizeof sv, saving);
  buf[0] = '\0';
  switch (f) {
    case PD_FIX_DATA_WAIT:
      fmt_us(t, sizeof t, isfinite(m->avg_dataloader_wait_s) ? m->avg_dataloader_wait_s * 1e6 : 0.0);
      addf(buf, len, "data wait %s per step; without it the step is %s shorter", t, sv);
      break;
    case PD_FIX_LOADER_2X:
      addf(buf, len,
           "data wait %.0f%% of the step: a loader that keeps the step waiting sets its pace, so at twice its "
           "throughput the step is at most half as long: %s",
           100.0 * m->replay_data_wait_share, sv);
      break;
    case PD_FIX_READS:
      if (!m->replay_ops_known) /* pd_replay_info_t.ops_known */
        addf(buf, len,
             "%.1f blocking reads per step, small device-to-host copies that block (no ops: what computes each "
             "value is not seen and stays, so this is a lower bound); removed, the step is %s shorter",
             m->replay_reads_per_step, sv);
      else
        addf(buf, len,
             "%.1f blocking reads per step; each drains the GPU queue and waits; removed with the host work that "
             "only feeds them, the step is %s shorter",
             m->replay_reads_per_step, sv);
      break;
    case PD_FIX_READS_ASYNC:
      addf(buf, len, "the same %.1f reads per step made asynchronous (the wait dropped, the work kept): %s",
           m->replay_reads_per_step, sv);
      break;
    case PD_FIX_PAGEABLE:
      addf(buf, len, "%.1f copies per step from or to pageable memory (%.1f KiB) at the pinned bandwidth (%.1f GB/s, %s): %s",
           m->pageable_copies_per_step, m->pageable_copy_bytes_per_step / 1024.0, m->replay_pinned_gbps,
           m->replay_pinned_source[0] ? m->replay_pinned_source : "documented", sv);
      break;
    case PD_FIX_ALLOCATION:
      addf(buf, len, "%.1f cudaMalloc/cudaFree calls per step, with the synchronizations they imply: %s",
           m->device_alloc_calls_per_step, sv);
      break;
    case PD_FIX_LAUNCH:
      addf(buf, len,
           "the step captured in a CUDA graph: its %.0f kernels per step back to back, the ops' host dispatch "
           "gone (syncs, data waits, pageable copies, Python outside ops kept): %s",
           m->kernels_per_step, sv);
      break;
    case PD_FIX_TINY_OPS:
      addf(buf, len,
           "%.0f tiny ops per step in chains (kernels of a few us the host issues slower than the GPU runs "
           "them) fused, one op of each kind kept: %s",
           m->replay_tiny_ops_per_step, sv);
      break;
    case PD_FIX_HOST_CODE:
      if (!m->replay_ops_known)
        addf(buf, len,
             "host time between the program's step ranges (inside each step, outside its range: the loop, the "
             "data loader's next(), logging) removed: %s",
             sv);
      else
        addf(buf, len,
             "host work outside any op (stretches of %dx the median gap between ops or more: Python such as "
             "tokenizing or logging, not the issuing of the next op) removed: %s",
             PD_HOST_WORK_GAPS, sv);
      break;
    case PD_FIX_PROFILER:
    case PD_FIX_COUNT:
      break;
  }
  addf(buf, len, " (%.0f%% of the predicted unprofiled step)", base > 0 ? 100.0 * saving / base : 0.0);
}

static int saving_cmp(const void *pa, const void *pb) {
  const pd_saving_t *a = pa, *b = pb;
  if (a->est_saving_us_per_step != b->est_saving_us_per_step)
    return a->est_saving_us_per_step > b->est_saving_us_per_step ? -1 : 1;
  return strcmp(a->cause, b->cause);
}

static bool is_cause_name(const char *name) {
  for (int c = 0; c < PD_CAUSE_COUNT; c++)
    if (strcmp(name, pd_cause_name((pd_cause_t)c)) == 0) return true;
  return false;
}

/* The verdict from the replay's savings: the fix that saves most among those that may name
 * (fix_rules) names the bottleneck when it saves at least PD_SAVING_NAME_SHARE of the
 * predicted unprofiled step; otherwise the step's balance does. Capturing the step in a
 * CUDA graph never names (it saved 79% of the plain SimpleCNN step, graphed_b64,
 * docs/diagnosis.md): where it saves at least PD_SAVING_FINDING_SHARE it is a finding, the
 * first one of a host_bound step. Every other listed fix saving at least
 * PD_SAVING_FINDING_SHARE is a finding; the rule findings stay, after them, as notes. */
static void diagnose_savings(const pd_metrics_t *m, pd_advice_t advice, pd_verdict_t *v) {
  const bool torch = advice == PD_ADVICE_TORCH;
  const double base = m->predicted_unprofiled_step_us;
  v->replay_quality = m->replay_quality;
  snprintf(v->replay_why, sizeof v->replay_why, "%s", m->replay_why);
  snprintf(v->replay_cost_model, sizeof v->replay_cost_model, "%s", m->replay_cost_model);
  v->replay_error_median = m->replay_step_error_median_fraction;
  v->replay_error_max = m->replay_step_error_max_fraction;
  v->replay_step_us = m->replay_step_us;
  v->predicted_unprofiled_step_us = base;
  for (size_t i = 0; i < NFIX_RULES; i++) {
    const fix_rule_t *r = &fix_rules[i];
    double s = pd_replay_metric_saving(m, r->fix);
    if (!isfinite(s) || v->nsavings >= PD_MAX_SAVINGS - 1) continue;
    pd_saving_t *o = &v->savings[v->nsavings++];
    snprintf(o->cause, sizeof o->cause, "%s", pd_fix_name(r->fix));
    o->est_saving_us_per_step = s;
    o->est_saving_fraction = s / base;
    fix_evidence(o->evidence, sizeof o->evidence, m, r->fix, s, base);
    snprintf(o->advice, sizeof o->advice, "%s", torch ? r->advice_torch : r->advice_demo);
  }
  if (v->nsavings > 1) qsort(v->savings, (size_t)v->nsavings, sizeof(v->savings[0]), saving_cmp);
  const pd_saving_t *best = NULL;
  const fix_rule_t *best_rule = NULL;
  for (int i = 0; i < v->nsavings && best == NULL; i++) {
    for (size_t k = 0; k < NFIX_RULES; k++) {
      if (strcmp(v->savings[i].cause, pd_fix_name(fix_rules[k].fix)) != 0 || !fix_rules[k].names) continue;
      best = &v->savings[i];
      best_rule = &fix_rules[k];
    }
  }
  /* the rule findings (not a cause's time) stay as notes */
  pd_finding_t notes[PD_MAX_FINDINGS];
  int nnotes = 0;
  for (int i = 0; i < v->nfindings; i++)
    if (!is_cause_name(v->findings[i].cause)) notes[nnotes++] = v->findings[i];
  v->nfindings = 0;
  const double busy = m->gpu_busy_fraction;
  if (best != NULL && best->est_saving_fraction >= PD_SAVING_NAME_SHARE) {
    v->bottleneck = best_rule->bottleneck;
    snprintf(v->rule, sizeof v->rule, "replay");
    snprintf(v->evidence, sizeof v->evidence, "%s saves %s", best->cause, best->evidence);
    v->share_of_step = best->est_saving_fraction;
    v->cost_us_per_step = best->est_saving_us_per_step;
    snprintf(v->advice, sizeof v->advice, "%s", best->advice);
  } else {
    v->bottleneck = busy >= BUSY_SHARE ? PD_BOTTLENECK_COMPUTE : PD_BOTTLENECK_HOST_BOUND;
    snprintf(v->rule, sizeof v->rule, "replay_balance");
    char b[32];
    fmt_us(b, sizeof b, base);
    snprintf(v->evidence, sizeof v->evidence,
             "no cause's fix saves %.0f%% of the predicted unprofiled step (%s); largest: %s %.1f%%; GPU busy %.0f%% "
             "of the step",
             PD_SAVING_NAME_SHARE * 100.0, b, best != NULL ? best->cause : "none",
             best != NULL ? best->est_saving_fraction * 100.0 : 0.0, busy * 100.0);
    v->share_of_step = busy >= BUSY_SHARE ? busy : 1.0 - busy;
    v->cost_us_per_step = NAN;
    const cause_rule_t *g = &cause_rules[NCAUSE_RULES - 1];
    snprintf(v->advice, sizeof v->advice, "%s",
             busy >= BUSY_SHARE ? (torch ? g->advice_torch : g->advice_demo)
                                : "the host is the limit: start with the largest saving below, then profile the "
                                  "host side");
  }
  for (int i = 0; i < v->nsavings; i++) {
    const pd_saving_t *s = &v->savings[i];
    if (s == best && strcmp(v->rule, "replay") == 0) continue;
    bool finding = false;
    for (size_t k = 0; k < NFIX_RULES; k++)
      if (strcmp(s->cause, pd_fix_name(fix_rules[k].fix)) == 0) finding = pd_fix_is_extra(fix_rules[k].fix);
    if (!finding || !(s->est_saving_fraction >= PD_SAVING_FINDING_SHARE)) continue;
    add_finding(v, s->cause, s->est_saving_fraction, s->est_saving_us_per_step, s->evidence, s->advice);
  }
  for (int i = 0; i < nnotes; i++)
    add_finding(v, notes[i].cause, notes[i].share_of_step, notes[i].cost_us_per_step, notes[i].evidence,
                notes[i].advice);
  /* the findings replayed together: overlapping fixes are not summed */
  int nfix = 0;
  for (int f = 0; f < PD_FIX_COUNT; f++) nfix += (m->replay_combined_mask >> f) & 1u;
  if (nfix >= 2 && isfinite(m->saving_combined_us_per_step) && v->nsavings < PD_MAX_SAVINGS) {
    pd_saving_t *o = &v->savings[v->nsavings++];
    snprintf(o->cause, sizeof o->cause, "combined");
    o->est_saving_us_per_step = m->saving_combined_us_per_step;
    o->est_saving_fraction = m->saving_combined_us_per_step / base;
    snprintf(o->evidence, sizeof o->evidence, "the %d fixes that save %.0f%% or more, replayed together:", nfix,
             PD_SAVING_FINDING_SHARE * 100.0);
    for (int f = 0; f < PD_FIX_COUNT; f++)
      if ((m->replay_combined_mask >> f) & 1u) addf(o->evidence, sizeof o->evidence, " %s", pd_fix_name((pd_fix_t)f));
    snprintf(o->advice, sizeof o->advice, "%s", "apply the findings together");
  }
}

void pd_diagnose_print_rules(FILE *out) {
  if (out == NULL) return;
  fprintf(out, "Unless GPU compute is the largest cost and at least %.0f%% of the step, the largest cause at or over "
               "its naming share names the bottleneck.\n\n",
          BUSY_SHARE * 100);
  fprintf(out, "| cause | bottleneck | names it at | finding at | what it is | advice (profiler_demo) | advice (torch) |\n");
  fprintf(out, "|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < NCAUSE_RULES; i++) {
    const cause_rule_t *r = &cause_rules[i];
    char name_at[48], find_at[48];
    if (r->cause == PD_CAUSE_GPU_COMPUTE) {
      snprintf(name_at, sizeof name_at, "largest cost, or busy >= %.0f%%", BUSY_SHARE * 100);
      snprintf(find_at, sizeof find_at, "-");
    } else {
      snprintf(name_at, sizeof name_at, ">= %.0f%%, the largest such", r->name_share * 100);
      snprintf(find_at, sizeof find_at, ">= %.0f%%", r->finding_share * 100);
    }
    fprintf(out, "| `%s` | `%s` | %s | %s | %s | %s | %s |\n", pd_cause_name(r->cause),
            pd_bottleneck_name(r->bottleneck), name_at, find_at, r->what, r->advice_demo, r->advice_torch);
  }
  fprintf(out, "| (none dominant) | `host_bound` | no cause above reaches its share and GPU busy < %.0f%% | - | "
               "the host is the limit without one cause | the largest finding | the largest finding |\n",
          BUSY_SHARE * 100);
  fprintf(out, "\n| rule | fires when | advice (profiler_demo) | advice (torch) |\n|---|---|---|---|\n");
  for (size_t i = 0; i < NRULES; i++)
    fprintf(out, "| `%s` | %s | %s | %s |\n", rules[i].name, rules[i].condition, rules[i].advice_demo,
            rules[i].advice_torch);
}

static void print_share(FILE *out, double share, double cost) {
  if (!isfinite(share)) return;
  char t[32];
  fmt_us(t, sizeof t, cost);
  fprintf(out, " [%.0f%% of the step, %s per step]", share * 100.0, t);
}

void pd_verdict_print(FILE *out, const pd_verdict_t *v) {
  if (out == NULL || v == NULL) return;
  fprintf(out, "Verdict: %s", pd_bottleneck_name(v->bottleneck));
  print_share(out, v->share_of_step, v->cost_us_per_step);
  fprintf(out, "\n  evidence: %s\n", v->evidence);
  if (v->advice[0] != '\0') fprintf(out, "  advice:   %s\n", v->advice);
  if (v->nfindings > 0) fprintf(out, "  also:\n");
  for (int i = 0; i < v->nfindings && i < PD_MAX_FINDINGS; i++) {
    const pd_finding_t *f = &v->findings[i];
    fprintf(out, "   - %s", f->cause);
    print_share(out, f->share_of_step, f->cost_us_per_step);
    fprintf(out, ": %s\n     advice: %s\n", f->evidence, f->advice);
  }
  if (v->replay_quality < 0) return;
  if (!(v->predicted_unprofiled_step_us > 0)) {
    fprintf(out, "  replay: unavailable (%s)\n", v->replay_why);
    return;
  }
  char b[32], r[32];
  fmt_us(b, sizeof b, v->predicted_unprofiled_step_us);
  fmt_us(r, sizeof r, v->replay_step_us);
  fprintf(out, "  replay (%s%s%s): replayed step %s, error median %.1f%% / worst %.1f%%; predicted unprofiled step %s\n",
          pd_replay_quality_name((pd_replay_quality_t)v->replay_quality), v->replay_why[0] ? ": " : "", v->replay_why,
          r, v->replay_error_median * 100.0, v->replay_error_max * 100.0, b);
  fprintf(out, "  predicted savings per step (unprofiled):\n");
  for (int i = 0; i < v->nsavings && i < PD_MAX_SAVINGS; i++) {
    char t[32];
    fmt_us(t, sizeof t, v->savings[i].est_saving_us_per_step);
    fprintf(out, "   %-22s %10s %5.1f%%\n", v->savings[i].cause, t, v->savings[i].est_saving_fraction * 100.0);
  }
}
