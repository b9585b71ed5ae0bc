/* test_replay.c: the replay engine (pd_replay.h).
 *
 *  - small hand-made graphs check each edge type exactly: program order with gaps that
 *    move, launch at the median launch latency, stream order, event record -> stream
 *    wait, sync at the median wake-up latency, inferred syncs, and the fixes that remove
 *    host work (host code, data wait, blocking reads and their feeding ops);
 *  - traces without step markers, correlation ids or sync records still replay or say
 *    why not, with no NaN where a value is promised;
 *  - every committed trace (tests/fixtures/runs and tests/fixtures/torch), replayed
 *    unchanged with its own medians, reproduces its steps: median error <= 3%, worst <= 8%.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_analyze.h"
#include "pd/pd_replay.h"
#include "pd/pd_stats.h"
#include "pd_test_util.h"

/* ---- hand-made traces ---------------------------------------------------------------------- */

static pd_trace_t *T;

static pd_event_t *add(pd_event_kind_t k, const char *name, double s_us, double e_us, uint64_t corr) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = k;
  e.name = name;
  e.start_ns = (int64_t)(s_us * 1000);
  e.end_ns = (int64_t)(e_us * 1000);
  e.correlation_id = corr;
  e.pid = 1;
  e.tid = 1;
  e.stream = 7;
  if (k == PD_EVENT_RANGE || k == PD_EVENT_CPU_OP || k == PD_EVENT_GPU_RANGE) e.u.range.step = -1;
  cr_assert_eq(pd_trace_add(T, &e), 0);
  return &pd_trace_events_mut(T)[pd_trace_count(T) - 1];
}

static void step(int64_t n, double s_us, double e_us) {
  add(PD_EVENT_RANGE, "ProfilerStep#", s_us, e_us, 0)->u.range.step = n;
}

static pd_event_t *kernel(double s_us, double e_us, uint64_t corr, uint32_t stream) {
  pd_event_t *k = add(PD_EVENT_KERNEL, "k", s_us, e_us, corr);
  k->stream = stream;
  return k;
}

typedef struct {
  pd_trace_index_t ix;
  pd_replay_t *r;
} built_t;

static void build(built_t *b, const pd_replay_cost_t *cost) {
  pd_trace_sort(T);
  cr_assert_eq(pd_trace_index_build(T, &b->ix), 0);
  cr_assert_eq(pd_replay_build(T, &b->ix, cost, &b->r), 0);
}

static void unbuild(built_t *b) {
  pd_replay_destroy(b->r);
  pd_trace_index_free(&b->ix);
}

/* A trace file read, indexed and replayed with its kind's default costs. */
typedef struct {
  pd_trace_t *t;
  built_t b;
} file_built_t;

static void file_build(const char *path, file_built_t *f) {
  f->t = pd_trace_create();
  pd_trace_info_t info;
  char err[512];
  cr_assert_eq(pd_trace_read_file_info(path, f->t, &info, err, sizeof err), 0, "%s: %s", path, err);
  cr_assert_eq(pd_trace_index_build(f->t, &f->b.ix), 0);
  const pd_replay_cost_t cost = pd_replay_cost_default(info.torch);
  cr_assert_eq(pd_replay_build(f->t, &f->b.ix, &cost, &f->b.r), 0);
}

static void file_unbuild(file_built_t *f) {
  unbuild(&f->b);
  pd_trace_destroy(f->t);
}

/* The mean replayed step over the trace's `steps` steps with the fixes in mask, in us. */
static double replay_mean_us(built_t *b, unsigned mask, size_t steps) {
  pd_replay_result_t res;
  cr_assert_eq(pd_replay_run(b->r, mask, &res, NULL), 0);
  cr_assert_eq(res.steps, steps);
  return res.step_us_mean;
}

/* The replayed step (one step) with the fixes in mask, in us. */
static double replay_us(built_t *b, unsigned mask) { return replay_mean_us(b, mask, 1); }

static void setup(void) { T = pd_trace_create(); }
static void teardown(void) { pd_trace_destroy(T); }

TestSuite(replay, .init = setup, .fini = teardown);

#define NEAR(a, b) cr_assert(fabs((a) - (b)) < 1e-6, "%s = %.6f, expected %.6f", #a, (double)(a), (double)(b))

/* Builds the graph of T (with cost, may be NULL), checks the unchanged replay and the replay
 * with the fixes in mask (one step each, in us), and frees the graph. */
static void expect_steps(const pd_replay_cost_t *cost, double unchanged, unsigned mask, double fixed) {
  built_t b;
  build(&b, cost);
  NEAR(replay_us(&b, 0), unchanged);
  NEAR(replay_us(&b, mask), fixed);
  unbuild(&b);
}

/* Program order: host tasks keep their durations and move; the step's own time (host code
 * outside ops) goes with HOST_CODE. */
Test(replay, program_order_keeps_tasks_and_moves_them) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, "aten::add", 20, 40, 0);
  add(PD_EVENT_CPU_OP, "aten::mul", 60, 70, 0);
  expect_steps(NULL, 100.0, PD_FIX_BIT(PD_FIX_HOST_CODE), 30.0);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->quality, PD_REPLAY_APPROXIMATE); /* no GPU work: host tasks only */
  cr_assert_str_eq(in->why, "no GPU activity in the trace: host tasks only");
  unbuild(&b);
}

/* Queue gap: a task already queued when the one before it on its stream ends starts the
 * trace's median queue gap later (2 us here), not at once: a stream of queued kernels
 * before a sync replays as long as it ran. */
Test(replay, a_queued_kernel_starts_a_queue_gap_after_the_one_before) {
  step(1, 0, 60);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 10, 12, 1);
  kernel(17, 30, 1, 7); /* idle stream: launch latency 7 */
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 14, 16, 2);
  kernel(32, 33, 2, 7); /* queued (14 + 7 <= 30): 2 us after the previous end */
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 18, 20, 3);
  kernel(35, 36, 3, 7); /* queued: 2 us */
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 22, 40, 4);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->launch_latency_ns, 7000);
  cr_assert_eq(in->queue_gap_ns, 2000);
  cr_assert_eq(in->wake_latency_ns, 4000);
  /* without the gaps the last kernel would end at 32 and the step 4 us short */
  NEAR(replay_us(&b, 0), 60.0);
  unbuild(&b);
}

/* Launch: a task starts at its call's start + the median launch latency (5, 7, 9 -> 7);
 * sync: the blocking call ends its targets' end + the wake-up latency (10). */
Test(replay, launch_at_median_latency_and_sync_at_wake_latency) {
  step(1, 0, 55);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 10, 12, 1);
  kernel(15, 16, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 20, 22, 2);
  kernel(27, 28, 2, 7);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 30, 32, 3);
  kernel(39, 40, 3, 7);
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 35, 50, 4);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->launch_latency_ns, 7000);
  cr_assert_eq(in->wake_latency_ns, 10000);
  cr_assert_eq(in->blocking_calls, 1);
  cr_assert_eq(in->quality, PD_REPLAY_EXACT, "%s", in->why);
  /* the last kernel replays at 30 + 7 = 37..38, the sync ends at 48, the step 5 us later */
  NEAR(replay_us(&b, 0), 53.0);
  unbuild(&b);
}

/* Stream order: the second task waits for the first on its stream even when its launch
 * comes sooner. */
Test(replay, stream_order) {
  step(1, 0, 50);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 10, 12, 1);
  kernel(15, 35, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 13, 14, 2);
  kernel(35, 40, 2, 7);
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 20, 45, 3);
  /* Without the step's own time: calls at 0..2 and 2..3, the sync from 3. K1 5..25, K2
   * after it 25..30 (its launch alone would put it at 7), the sync ends 30 + 5. */
  expect_steps(NULL, 50.0, PD_FIX_BIT(PD_FIX_HOST_CODE), 35.0);
}

/* Event record -> stream wait (Kineto's wait_on_stream / wait_on_cuda_event_record_corr_id):
 * the kernel on stream 2 follows the copy on stream 1, also when the copy gets shorter. */
Test(replay, event_record_to_stream_wait) {
  step(1, 0, 70);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 1, 2, 9);
  kernel(6, 7, 9, 3);
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", 10, 12, 1);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, 15, 55, 1);
  cp->stream = 1;
  cp->u.memcpy.bytes = 1000000; /* at the documented 50 GB/s: 20 us */
  cp->u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  cp->u.memcpy.src_kind = PD_MEM_PAGEABLE;
  cp->u.memcpy.dst_kind = PD_MEM_DEVICE;
  add(PD_EVENT_RUNTIME, "cudaEventRecord", 13, 14, 2);
  add(PD_EVENT_RUNTIME, "cudaStreamWaitEvent", 15, 16, 3);
  pd_event_t *w = add(PD_EVENT_SYNC, NULL, 15, 16, 3);
  w->stream = 2;
  w->u.sync.sync_kind = PD_SYNC_STREAM_WAIT_EVENT;
  w->u.sync.has_wait = true;
  w->u.sync.wait_stream = 1;
  w->u.sync.event_record_corr = 2;
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 17, 18, 4);
  kernel(55, 60, 4, 2);
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 20, 65, 5);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->launch_latency_ns, 5000);
  cr_assert_eq(in->wake_latency_ns, 5000);
  cr_assert_str_eq(in->pinned_source, "documented");
  NEAR(replay_us(&b, 0), 70.0);
  /* Pinned: the copy call takes 0.3 us (no asynchronous copy call to measure), so the
   * calls after it come 1.7 us sooner; the copy runs 15..35, the waiting kernel 35..40 (its
   * launch alone would put it at 20.3), the sync ends at 45 and the step 5 us later. */
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_PAGEABLE)), 50.0);
  unbuild(&b);
}

/* torch's blocking .to() of a pageable tensor: aten::copy_ issues the copy and then syncs
 * its stream. The fix (pinned, non_blocking=True) has neither the blocking copy nor that
 * sync, so PAGEABLE drops the waits of a sync inside the op that issued the copy too. */
Test(replay, pageable_copy_takes_the_ops_own_sync_with_it) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, "aten::copy_", 10, 70, 0);
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", 12, 14, 1);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, 20, 60, 1);
  cp->u.memcpy.bytes = 1000000; /* at the documented 50 GB/s: 20 us */
  cp->u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  cp->u.memcpy.src_kind = PD_MEM_PAGEABLE;
  cp->u.memcpy.dst_kind = PD_MEM_DEVICE;
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 15, 65, 2);
  add(PD_EVENT_CPU_OP, "aten::add", 75, 95, 0);
  built_t b;
  build(&b, NULL);
  NEAR(replay_us(&b, 0), 100.0);
  /* Pinned: the copy (20 us) no longer holds the sync, which keeps only its own short time:
   * the step loses the 40 us the sync waited past the copy call, and the copy call's 1.7 us. */
  double fixed = replay_us(&b, PD_FIX_BIT(PD_FIX_PAGEABLE));
  cr_expect(fixed < 60.0, "the pinned step is %.3f us, expected under 60 (the sync waits for no copy)", fixed);
  unbuild(&b);
}

/* A stream sync with no synchronization record waits for the streams its thread launches
 * onto: inferred, and the replay says so. */
Test(replay, inferred_stream_sync_is_approximate) {
  step(1, 0, 40);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 5, 7, 1);
  kernel(10, 30, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 8, 35, 2);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->inferred_syncs, 1);
  cr_assert_eq(in->quality, PD_REPLAY_APPROXIMATE);
  cr_assert(strstr(in->why, "inferred") != NULL, "%s", in->why);
  NEAR(replay_us(&b, 0), 40.0);
  unbuild(&b);
}

/* The sync record names the stream: no inference, and a stream the sync does not wait
 * for is not a target. */
Test(replay, stream_sync_record_names_its_stream) {
  step(1, 0, 40);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 5, 7, 1);
  kernel(10, 30, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 7, 8, 3);
  kernel(12, 39, 3, 8); /* still running when the sync returns */
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 8, 35, 2);
  pd_event_t *s = add(PD_EVENT_SYNC, NULL, 8, 35, 2);
  s->stream = 7;
  s->u.sync.sync_kind = PD_SYNC_STREAM;
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->inferred_syncs, 0);
  cr_assert_eq(in->quality, PD_REPLAY_EXACT, "%s", in->why);
  NEAR(replay_us(&b, 0), 40.0);
  unbuild(&b);
}

/* A blocking read removed with the ops that feed it and the host time between them; made
 * asynchronous, only its wait goes. */
Test(replay, blocking_read_removed_with_its_feeding_ops) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, "aten::conv2d", 2, 8, 0); /* not a feeding op: stays */
  add(PD_EVENT_CPU_OP, "aten::mean", 10, 20, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 12, 14, 1);
  kernel(17, 30, 1, 7);
  add(PD_EVENT_CPU_OP, "aten::item", 25, 40, 0);
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", 26, 28, 2);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, 31, 32, 2); /* launch 26 + 5 */
  cp->u.memcpy.copy_kind = PD_MEMCPY_DTOH;
  cp->u.memcpy.src_kind = PD_MEM_DEVICE;
  cp->u.memcpy.dst_kind = PD_MEM_PINNED;
  cp->u.memcpy.bytes = 4;
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 29, 36, 3);
  pd_event_t *s = add(PD_EVENT_SYNC, NULL, 29, 36, 3);
  s->u.sync.sync_kind = PD_SYNC_STREAM;
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  NEAR(in->reads_per_step, 1.0);
  NEAR(replay_us(&b, 0), 100.0);
  /* mean (10), the gap (5) and item (15) go: 100 - 30 */
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS)), 70.0);
  /* asynchronous: the sync call keeps its unblocked time (none measured: 0) */
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS_ASYNC)), 93.0);
  unbuild(&b);
}

/* A step whose op `feeder` launches a kernel whose value aten::item then reads (a 1-byte
 * copy and a stream sync). */
static void item_after(const char *feeder) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, feeder, 2, 8, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 3, 5, 1);
  kernel(9, 20, 1, 7);
  add(PD_EVENT_CPU_OP, "aten::item", 10, 30, 0);
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", 11, 13, 2);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, 21, 22, 2);
  cp->u.memcpy.copy_kind = PD_MEMCPY_DTOH;
  cp->u.memcpy.src_kind = PD_MEM_DEVICE;
  cp->u.memcpy.dst_kind = PD_MEM_PINNED;
  cp->u.memcpy.bytes = 1;
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 14, 25, 3);
}

/* GradScaler's overflow check: the .item() that follows
 * aten::_amp_foreach_non_finite_check_and_unscale_ decides whether the optimizer step
 * runs, so no fix drops it or makes it asynchronous; a read of a mean in the same step is
 * one. */
Test(replay, the_grad_scalers_overflow_check_is_not_a_read_to_drop) {
  item_after("aten::_amp_foreach_non_finite_check_and_unscale_");
  built_t b;
  build(&b, NULL);
  NEAR(pd_replay_info(b.r)->reads_per_step, 0.0);
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS)), 100.0);
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS_ASYNC)), 100.0);
  unbuild(&b);
  pd_trace_destroy(T);
  T = pd_trace_create();
  item_after("aten::mean");
  build(&b, NULL);
  NEAR(pd_replay_info(b.r)->reads_per_step, 1.0);
  cr_expect_lt(replay_us(&b, PD_FIX_BIT(PD_FIX_READS)), 90.0);
  unbuild(&b);
}

/* A step of 100 us whose host waits (a blocking read) for its one 80 us kernel, at t0. */
static void gpu_bound_step(int64_t n, double t0, uint64_t corr) {
  step(n, t0, t0 + 100);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", t0 + 2, t0 + 4, corr);
  kernel(t0 + 10, t0 + 90, corr, 7);
  add(PD_EVENT_CPU_OP, "aten::item", t0 + 5, t0 + 97, 0);
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", t0 + 6, t0 + 8, corr + 1);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, t0 + 91, t0 + 92, corr + 1);
  cp->u.memcpy.copy_kind = PD_MEMCPY_DTOH;
  cp->u.memcpy.src_kind = PD_MEM_DEVICE;
  cp->u.memcpy.dst_kind = PD_MEM_PINNED;
  cp->u.memcpy.bytes = 4;
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", t0 + 9, t0 + 95, corr + 2);
  pd_event_t *s = add(PD_EVENT_SYNC, NULL, t0 + 9, t0 + 95, corr + 2);
  s->u.sync.sync_kind = PD_SYNC_STREAM;
}

/* A what-if that lets the host run ahead of the GPU (the reads made asynchronous: no sync
 * left) is bounded by the GPU's work: the host's steps shrink to a few us, but the kernels
 * still take 80 us each, so the mean step stays at least their share of the window (the GPU
 * starts at 10 and runs 2 x (80 + 1) us: done at 172 at the earliest, 86 us a step). */
Test(replay, a_host_running_ahead_is_bounded_by_the_gpus_work) {
  gpu_bound_step(1, 0, 1);
  gpu_bound_step(2, 100, 11);
  built_t b;
  build(&b, NULL);
  pd_replay_result_t res;
  cr_assert_eq(pd_replay_run(b.r, 0, &res, NULL), 0);
  cr_assert_eq(res.steps, 2);
  NEAR(res.step_us_mean, 100.0); /* the last read waited for everything: no drain */
  NEAR(res.drain_us, 0.0);
  cr_assert_eq(pd_replay_run(b.r, PD_FIX_BIT(PD_FIX_READS_ASYNC), &res, NULL), 0);
  cr_assert_gt(res.drain_us, 100.0, "drain %.1f us: the kernels outlive the host's steps", res.drain_us);
  cr_assert(res.step_us_mean >= 86.0 - 1e-6 && res.step_us_mean <= 100.0 + 1e-6,
            "mean step %.1f us, bounded by the GPU's 86 us a step", res.step_us_mean);
  unbuild(&b);
}

/* Where the GPU bounds the window, host time between the steps (here 30 us of host code
 * outside any op before the second step) runs while the GPU works: removing it moves the
 * host, not the GPU's end, so the bounded step stays the same length. */
Test(replay, host_time_between_gpu_bound_steps_does_not_lengthen_them) {
  gpu_bound_step(1, 0, 1);
  add(PD_EVENT_CPU_OP, "aten::zeros", 101, 102, 0);
  add(PD_EVENT_CPU_OP, "aten::zeros", 128, 129, 0);
  gpu_bound_step(2, 130, 11);
  built_t b;
  build(&b, NULL);
  pd_replay_result_t ahead, ahead_no_gap;
  cr_assert_eq(pd_replay_run(b.r, PD_FIX_BIT(PD_FIX_READS_ASYNC), &ahead, NULL), 0);
  cr_assert_eq(pd_replay_run(b.r, PD_FIX_BIT(PD_FIX_READS_ASYNC) | PD_FIX_BIT(PD_FIX_HOST_CODE), &ahead_no_gap, NULL), 0);
  cr_assert_gt(ahead.drain_us, 0.0);
  cr_assert(ahead_no_gap.step_us_mean <= ahead.step_us_mean + 1e-6,
            "removing host time between GPU-bound steps lengthened them: %.1f -> %.1f us", ahead.step_us_mean,
            ahead_no_gap.step_us_mean);
  unbuild(&b);
}

/* Builds the graph of T (one step of 100 us, unchanged), checks its reads per step and the
 * step with PD_FIX_READS (us), and frees the graph. */
static void expect_reads(double reads, double fixed) {
  built_t b;
  build(&b, NULL);
  NEAR(pd_replay_info(b.r)->reads_per_step, reads);
  NEAR(replay_us(&b, 0), 100.0);
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS)), fixed);
  unbuild(&b);
}

/* A loop of reads (x.mean().item() after another .item() in the same parent): the host
 * time after the previous read, up to this read's feeding op, is the Python that issues it
 * and goes with it; the time before the first read stays. */
Test(replay, a_loop_of_reads_takes_the_host_time_between_them) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, "aten::item", 10, 20, 0);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 12, 18, 1);
  add(PD_EVENT_CPU_OP, "aten::mean", 30, 35, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 31, 33, 2);
  kernel(34, 35, 2, 7);
  add(PD_EVENT_CPU_OP, "aten::item", 38, 50, 0);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 40, 48, 3);
  /* the first item (10), the Python after it (10), mean (5), the gap (3), the second item
   * (12) go: 100 - 40 */
  expect_reads(2.0, 60.0);
}

/* The read of blocking_read_removed_with_its_feeding_ops without its ops (pd_run on a
 * program with no op ranges): a small device-to-host copy whose thread's next call blocks is
 * a read, found from the calls; the copy's call, the gap and the sync go, the kernel that
 * computed the value (no op says it feeds the read) stays with its launch. bytes: the
 * copy's size; next: the call after the copy. */
static void call_read_trace(uint64_t bytes, const char *next) {
  pd_trace_destroy(T);
  T = pd_trace_create();
  step(1, 0, 100);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 12, 14, 1);
  kernel(17, 30, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", 26, 28, 2);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, 31, 32, 2);
  cp->u.memcpy.copy_kind = PD_MEMCPY_DTOH;
  cp->u.memcpy.src_kind = PD_MEM_DEVICE;
  cp->u.memcpy.dst_kind = PD_MEM_PINNED;
  cp->u.memcpy.bytes = bytes;
  add(PD_EVENT_RUNTIME, next, 29, 36, 3);
}

Test(replay, blocking_read_found_from_the_calls_without_ops) {
  call_read_trace(4, "cudaStreamSynchronize");
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  NEAR(in->reads_per_step, 1.0);
  cr_assert_not(in->ops_known);
  cr_assert_not(in->host_code_known, "no ops and no step range: no host code to remove");
  NEAR(replay_us(&b, 0), 100.0);
  /* the copy's call (2), the gap (1) and the sync (7) go: 100 - 10 */
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS)), 90.0);
  unbuild(&b);
  /* the evidence says what was not seen */
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(T, &m), 0);
  /* against the predicted unprofiled step (the default cost per call comes off first) */
  cr_expect(m.saving_blocking_reads_us_per_step > 5.0 && m.saving_blocking_reads_us_per_step <= 10.0, "%f",
            m.saving_blocking_reads_us_per_step);
  NEAR(m.replay_reads_per_step, 1.0);
  pd_verdict_t v;
  pd_diagnose(&m, PD_ADVICE_TORCH, &v);
  const pd_saving_t *rd = NULL;
  for (int i = 0; i < v.nsavings; i++)
    if (strcmp(v.savings[i].cause, pd_fix_name(PD_FIX_READS)) == 0) rd = &v.savings[i];
  cr_assert_not_null(rd, "a blocking_reads saving");
  cr_expect_not_null(strstr(rd->evidence, "small device-to-host copies that block"), "%s", rd->evidence);
  cr_expect_not_null(strstr(rd->evidence, "shorter"), "not cut: %s", rd->evidence);
}

/* A loop of reads seen from the calls only: each read takes the reduction launched right
 * before it (the kernel the read waits for), and the host time since the previous read. */
static void call_read(double t, uint64_t corr) {
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", t, t + 2, corr);
  kernel(t + 3, t + 4, corr, 7)->name = "void at::native::reduce_kernel<512, 1>";
  add(PD_EVENT_RUNTIME, "cudaMemcpyAsync", t + 5, t + 7, corr + 1);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, t + 8, t + 9, corr + 1);
  cp->u.memcpy.copy_kind = PD_MEMCPY_DTOH;
  cp->u.memcpy.bytes = 4;
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", t + 10, t + 15, corr + 2);
}

Test(replay, a_loop_of_reads_found_from_the_calls_takes_what_feeds_them) {
  step(1, 0, 100);
  call_read(10, 1);
  call_read(35, 4);
  /* 10..25 (the first read with its reduction) and 25..50 (the second, with the host time
   * after the first) go; 0..10 stays */
  expect_reads(2.0, 60.0);
}

/* A library's own NVTX range around a few of its calls (CUB's sort in an embedding's
 * backward) is not an op layer: the reads are still found from the calls. */
Test(replay, a_library_range_around_a_few_calls_is_not_an_op_layer) {
  step(1, 0, 100);
  add(PD_EVENT_RANGE, "cub::DeviceRadixSort", 1, 4, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 2, 3, 9);
  kernel(4, 5, 9, 7);
  call_read(10, 1);
  call_read(35, 4);
  expect_reads(2.0, 60.0);
  /* with most calls inside ranges below the step, the trace has ops: no read op, no read */
  add(PD_EVENT_RANGE, "aten::norm", 9, 16, 0);
  add(PD_EVENT_RANGE, "aten::norm", 34, 41, 0);
  built_t b;
  build(&b, NULL);
  cr_expect(pd_replay_info(b.r)->ops_known);
  NEAR(pd_replay_info(b.r)->reads_per_step, 0.0);
  unbuild(&b);
}

/* A synchronous copy is a read by itself (cudaMemcpy of a loss to the host): with the
 * reduction launched right before it, it goes; the call after it (a launch) stays. */
Test(replay, a_blocking_copy_call_is_a_read_without_ops) {
  step(1, 0, 100);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 10, 12, 1);
  kernel(13, 14, 1, 7)->name = "void at::native::reduce_kernel<512, 1>";
  add(PD_EVENT_RUNTIME, "cudaMemcpy", 15, 25, 2);
  pd_event_t *cp = add(PD_EVENT_MEMCPY, NULL, 18, 19, 2); /* the launches' latency, 3 */
  cp->u.memcpy.copy_kind = PD_MEMCPY_DTOH;
  cp->u.memcpy.bytes = 4;
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 30, 32, 3);
  kernel(33, 40, 3, 7);
  /* the launch (2), the gap (3) and the copy's call (10) go: 100 - 15 */
  expect_reads(1.0, 85.0);
}

/* pd_run --step_range: the program's own step range sits under each step marker. Named as
 * the trace's step range it is the step, not an op: the trace has no op layer, its reads
 * are found from the calls, and host code is only the time between the program's step
 * ranges (here 0..1 and 99..100). Unnamed, it reads as one op around everything (an op
 * layer, no read op in it: no read). */
static void step_body_trace(const char *step_range) {
  call_read_trace(4, "cudaStreamSynchronize");
  add(PD_EVENT_CPU_OP, "train_step", 1, 99, 0);
  pd_trace_set_step_range(T, step_range);
}

Test(replay, the_programs_step_range_is_the_step_not_an_op) {
  step_body_trace("train_step");
  built_t b;
  build(&b, NULL);
  cr_expect_not(pd_replay_info(b.r)->ops_known);
  cr_expect(pd_replay_info(b.r)->host_code_known, "the time between the step ranges");
  NEAR(pd_replay_info(b.r)->reads_per_step, 1.0);
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS)), 90.0);
  NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_HOST_CODE)), 98.0);
  unbuild(&b);
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(T, &m), 0);
  pd_verdict_t v;
  pd_diagnose(&m, PD_ADVICE_TORCH, &v);
  bool said = false;
  for (int i = 0; i < v.nsavings; i++)
    if (strcmp(v.savings[i].cause, pd_fix_name(PD_FIX_HOST_CODE)) == 0)
      said = strstr(v.savings[i].evidence, "between the program's step ranges") != NULL;
  cr_expect(said, "the host_code evidence says which host time it is");
  step_body_trace(NULL);
  build(&b, NULL);
  cr_expect(pd_replay_info(b.r)->ops_known);
  NEAR(pd_replay_info(b.r)->reads_per_step, 0.0);
  unbuild(&b);
  step_body_trace("other_range"); /* another name: still an op */
  build(&b, NULL);
  cr_expect(pd_replay_info(b.r)->ops_known);
  unbuild(&b);
}

/* Not reads: a copy larger than a value (the step's output), and a small copy whose
 * thread goes on without waiting. */
Test(replay, call_reads_need_a_small_copy_that_blocks) {
  static const struct {
    uint64_t bytes;
    const char *next;
  } cases[] = {{1u << 20, "cudaStreamSynchronize"}, {4, "cudaLaunchKernel"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    call_read_trace(cases[i].bytes, cases[i].next);
    built_t b;
    build(&b, NULL);
    cr_expect_eq(pd_replay_info(b.r)->reads_per_step, 0.0, "case %zu", i);
    NEAR(replay_us(&b, PD_FIX_BIT(PD_FIX_READS)), replay_us(&b, 0));
    unbuild(&b);
  }
}

/* Data wait removed: the launches move up, the GPU work with them. */
Test(replay, data_wait_removed) {
  step(1, 0, 100);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 50, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 50, 55, 1);
  kernel(60, 90, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 60, 95, 2);
  /* launch at 0, kernel 10..40, sync ends 45, step 5 us later */
  expect_steps(NULL, 100.0, PD_FIX_BIT(PD_FIX_DATA_WAIT), 50.0);
}

/* A loader twice as fast: two steps of 100 us wait 80 us each (S = 200, W = 160); at twice
 * the throughput the total wait is max(0, 100 - 40) = 60, so each wait keeps 60/160 and
 * every step is 50 us: half as long. A step that waits less than half its time loses
 * all its wait. */
Test(replay, loader_twice_as_fast_halves_a_loader_bound_step) {
  step(1, 0, 100);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 80, 0);
  add(PD_EVENT_CPU_OP, "aten::add", 80, 100, 0);
  step(2, 100, 200);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 100, 180, 0);
  add(PD_EVENT_CPU_OP, "aten::add", 180, 200, 0);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  NEAR(in->data_wait_share, 0.8);
  NEAR(in->loader_2x_keep, 60.0 / 160.0);
  NEAR(replay_mean_us(&b, PD_FIX_BIT(PD_FIX_LOADER_2X), 2), 50.0);
  NEAR(replay_mean_us(&b, PD_FIX_BIT(PD_FIX_DATA_WAIT), 2), 20.0);
  unbuild(&b);
}

Test(replay, loader_twice_as_fast_removes_a_short_wait) {
  step(1, 0, 100);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 30, 0);
  add(PD_EVENT_CPU_OP, "aten::add", 30, 100, 0);
  expect_steps(NULL, 100.0, PD_FIX_BIT(PD_FIX_LOADER_2X), 70.0);
}

/* n steps back to back, each a data wait of len[k] us, 49 us of host code and a 50 us op. */
static void loader_steps(const double *len, int n) {
  double s = 0;
  for (int k = 0; k < n; k++) {
    const double w = s + len[k];
    step(k + 1, s, w + 99);
    add(PD_EVENT_RANGE, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", s, w, 0);
    add(PD_EVENT_CPU_OP, "aten::add", w + 49, w + 99, 0);
    s = w + 99;
  }
}

/* loader_steps(len, n) replayed: the anchored waits, and the mean step unchanged, without
 * the host code, with a loader twice as fast and without the data wait. */
static void expect_loader(const double *len, int n, size_t anchored, const double mean[4]) {
  loader_steps(len, n);
  built_t b;
  build(&b, NULL);
  cr_assert_eq(pd_replay_info(b.r)->anchored_waits, anchored);
  const unsigned masks[4] = {0, PD_FIX_BIT(PD_FIX_HOST_CODE), PD_FIX_BIT(PD_FIX_LOADER_2X),
                             PD_FIX_BIT(PD_FIX_DATA_WAIT)};
  for (int i = 0; i < 4; i++) NEAR(replay_mean_us(&b, masks[i], (size_t)n), mean[i]);
  unbuild(&b);
}

/* A wait for the loader ends when its batch is ready, whatever the host does before it,
 * once the loader has kept the step waiting: the first and fourth steps' 101 us waits
 * (over twice the median wait of 1 us and 20 us more) are anchored at 101 and 501. With
 * the host code between ops gone (49 us a step), the second, third and fifth steps shrink
 * to 51 us, while the fourth waits until 501 (298 us), as a loader-bound program does when
 * the profiler's cost is gone: mean 120.4, not 70.6. A loader twice as fast makes those
 * batches ready at 50.5 and 250.5: the first step waits for its batch until 50.5 (149.5
 * us), the fourth no longer waits, and the others are 100 us as measured: mean 109.9. */
Test(replay, a_wait_for_the_loader_ends_when_the_batch_is_ready) {
  const double len[5] = {101, 1, 1, 101, 1}, mean[4] = {140.0, 120.4, 109.9, 99.0};
  expect_loader(len, 5, 2, mean);
}

/* Before its first blocked wait the loader kept ahead of the step, making each batch as the
 * step took the last: its ready times follow the step. Four steps; the third's wait is a
 * hiccup (101 us, anchored at 301). With the host code gone the first two steps shrink to
 * 51 us, and the replay reaches the second step's wait, the last batch the loader had
 * ready, 49 us early: the hiccup's batch is ready 49 us earlier too (252), its wait is 149
 * us, and the steps are 51, 51, 200 and 51: mean 88.25. Anchored to the trace's clock
 * (301) the hiccup would have absorbed all the time taken out before it (mean 100.5). */
Test(replay, a_loader_that_kept_ahead_follows_the_step_until_it_blocks) {
  const double len[4] = {1, 1, 101, 1}, mean[4] = {125.0, 88.25, 100.0, 99.0};
  expect_loader(len, 4, 1, mean);
}

/* profiler_demo's tiny_ops with 48 warmup steps: its loader restarts at the epoch's end, in
 * the 15th of 16 profiled steps, and that one wait blocks for 200 us. The profiler's cost
 * (10 us a traced call, one call a step) comes out of every step (91 us, the hiccup's step
 * 301); removing the data wait then saves the hiccup's 200 us, the call the loader's clock
 * lags by (10) and the sixteen waits' own 1 us: (211 + 15) / 16 = 14.125 us a step. With
 * the anchor on the trace's clock it read 22.25: the hiccup also absorbed the profiler's
 * cost of the fourteen steps before it (the verdict named the data loader for every
 * tiny_ops run of the gate's A/B recordings, 312 of 312). */
Test(replay, a_late_hiccup_saves_its_own_length) {
  const char *wait = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";
  double s = 0;
  for (int k = 0; k < 16; k++) {
    double w = s + (k == 14 ? 201 : 1);
    step(k + 1, s, w + 100);
    add(PD_EVENT_RANGE, wait, s, w, 0);
    add(PD_EVENT_RUNTIME, "cudaGetDevice", w, w + 10, 0);
    add(PD_EVENT_CPU_OP, "aten::add", w + 10, w + 100, 0);
    s = w + 100;
  }
  pd_replay_cost_t cost = {.ns_per_call = 10000, .ns_per_range = 0, .source = "test"};
  built_t b;
  build(&b, &cost);
  cr_assert_eq(pd_replay_info(b.r)->anchored_waits, 1);
  const double unprofiled = replay_mean_us(&b, PD_FIX_BIT(PD_FIX_PROFILER), 16);
  const double no_wait = replay_mean_us(&b, PD_FIX_BIT(PD_FIX_PROFILER) | PD_FIX_BIT(PD_FIX_DATA_WAIT), 16);
  NEAR(unprofiled, 104.125);
  NEAR(unprofiled - no_wait, 14.125);
  unbuild(&b);
}

/* The profiler's own cost per call and per range comes out of the host tasks. */
Test(replay, profiler_cost_removed) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, "aten::add", 20, 40, 0);
  add(PD_EVENT_RUNTIME, "cudaGetDevice", 50, 60, 0);
  pd_replay_cost_t cost = {.ns_per_call = 4000, .ns_per_range = 2000, .source = "test"};
  /* a range's cost is split between the task before its start and its last task, a
   * call's is its last task's; what does not fit moves to the next task: the step range
   * 2 us, the op 2 us, the call 4 us */
  expect_steps(&cost, 100.0, PD_FIX_BIT(PD_FIX_PROFILER), 92.0);
}

/* A traced call's cost also sits in the latencies around a wait: half delayed the GPU's
 * start after the launch call (launch latency 10 -> 8), half the wake-up after the sync
 * (6 -> 4). Kernel 18..28, sync ends 32, the step's 14 us after it stay: 46, where taking
 * the cost out of the host tasks alone (hidden under the wait) would leave 50. */
Test(replay, profiler_cost_leaves_the_launch_and_wake_latencies) {
  step(1, 0, 50);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 10, 14, 1);
  kernel(20, 30, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 15, 36, 2);
  pd_replay_cost_t cost = {.ns_per_call = 4000, .ns_per_range = 0, .source = "test"};
  expect_steps(&cost, 50.0, PD_FIX_BIT(PD_FIX_PROFILER), 46.0);
}

/* torch.profiler's cost as a share of the host's work (host_slowdown 2: half of each task
 * inside an op or a call, and of the short stretches between ops that issue them): the
 * op's 20 us, the call's 6, aten::empty's own 1 + 1 and the four 1 us stretches before and
 * between ops lose half, 31 / 2 us; the 61 us of Python between the call and aten::empty
 * (ten times the median stretch between ops and more) and the cudaMalloc inside
 * aten::empty (the driver's time) are not the profiler's. */
Test(replay, torch_profiler_cost_is_a_share_of_the_host_work) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, "aten::add", 1, 21, 0);
  add(PD_EVENT_RUNTIME, "cudaGetDevice", 22, 28, 0);
  add(PD_EVENT_CPU_OP, "aten::empty", 89, 99, 0);
  add(PD_EVENT_RUNTIME, "cudaMalloc", 90, 98, 0);
  pd_replay_cost_t cost = {.ns_per_call = 0, .ns_per_range = 0, .host_slowdown = 2.0, .source = "test"};
  expect_steps(&cost, 100.0, PD_FIX_BIT(PD_FIX_PROFILER), 100.0 - 31.0 / 2.0);
  /* a slowdown of 1 is the per-event model, here with no cost per event */
  pd_replay_cost_t per_event = {.ns_per_call = 0, .ns_per_range = 0, .host_slowdown = 1.0, .source = "test"};
  expect_steps(&per_event, 100.0, PD_FIX_BIT(PD_FIX_PROFILER), 100.0);
}

/* A cost longer than the task it lands on moves on to the thread's next tasks. */
Test(replay, profiler_cost_carries_over_short_tasks) {
  step(1, 0, 100);
  add(PD_EVENT_RUNTIME, "cudaGetDevice", 10, 11, 0); /* 1 us: 3 us of its cost move on */
  add(PD_EVENT_CPU_OP, "aten::add", 11, 50, 0);
  pd_replay_cost_t cost = {.ns_per_call = 4000, .ns_per_range = 0, .source = "test"};
  expect_steps(&cost, 100.0, PD_FIX_BIT(PD_FIX_PROFILER), 96.0);
}

/* Another thread's op begins when the step thread lets it and the step thread waits for
 * it (torch's autograd thread in backward()): host time taken out on either moves both. */
Test(replay, other_thread_forks_and_joins_the_step_thread) {
  step(1, 0, 100);
  add(PD_EVENT_CPU_OP, "aten::mul", 10, 30, 0);   /* forward on the main thread */
  pd_event_t *bw = add(PD_EVENT_CPU_OP, "MulBackward0", 35, 75, 0);
  bw->tid = 2;                                    /* backward on the autograd thread */
  add(PD_EVENT_CPU_OP, "Optimizer.step", 80, 95, 0); /* after backward() returns */
  /* without the main thread's idle time: the forward 0..20, the backward follows it at the
   * measured distance (5) 25..65, the optimizer joins it at the measured distance (5)
   * 70..85 */
  expect_steps(NULL, 100.0, PD_FIX_BIT(PD_FIX_HOST_CODE), 85.0);
}

/* torch's autograd thread runs the backward functions one after another while the main
 * thread waits in backward(): only the first follows the main thread (it did something
 * since the autograd thread's last task); the others follow their own thread, so the
 * profiler's share taken out of each shortens the whole pass, and the optimizer, which
 * joins the last, moves with it. A long stretch between two of them with the main thread
 * idle (the autograd thread waiting for work) is not the profiler's. Slowdown 2, tasks in
 * us: main 0..10 (5 off), mul 10..30 (10 off); B1..B4 at 5, 6, 6, 6 after each other (the
 * 2 us stretches 1 off, the ops 5 off: 20..43); the 60 us wait kept, B5 103..108; the
 * optimizer 6 + 3 after it, 15 us, and the 10 us to the step's end 5: 137. Pinned to the
 * measured backward (each function at its measured distance from the mul), the step read
 * 160. */
Test(replay, an_autograd_chain_follows_its_own_thread_not_the_step_thread) {
  step(1, 0, 200);
  /* each op launches a kernel (the op layer: the main thread's short stretches are the
   * program issuing its next op) */
  const double ops[7][2] = {{10, 30}, {35, 45}, {47, 57}, {59, 69}, {71, 81}, {141, 151}, {160, 190}};
  for (int i = 0; i < 7; i++) {
    const char *name = i == 0 ? "aten::mul" : i == 6 ? "Optimizer.step" : "autograd::engine::evaluate_function";
    const uint32_t tid = i == 0 || i == 6 ? 1 : 2;
    add(PD_EVENT_CPU_OP, name, ops[i][0], ops[i][1], 0)->tid = tid;
    add(PD_EVENT_RUNTIME, "cudaLaunchKernel", ops[i][0] + 1, ops[i][0] + 2, 0)->tid = tid;
  }
  pd_replay_cost_t cost = {.ns_per_call = 0, .ns_per_range = 0, .host_slowdown = 2.0, .source = "test"};
  expect_steps(&cost, 200.0, PD_FIX_BIT(PD_FIX_PROFILER), 137.0);
}

/* launch_overhead, the step captured in a CUDA graph: the host's work in ops and calls and
 * the stretches that issue them go; the kernels run from the graph, and what a graph
 * cannot hold stays: the 102 us of Python outside every op (ten times the median stretch
 * and more) and the blocking sync with its wait. Host 0..131: add 1..10 launching k1 (run
 * 10..15), Python 10..112, mul 112..122 launching k2 (121..126), the sync 123..128 until
 * k2 ends (launch latency 8, wake-up 2). Graphed: k1 8..13, the Python 0..102, k2
 * launched at 102 runs 110..115, the sync ends 117, and the 3 us to the step's end go:
 * 117. */
Test(replay, launch_overhead_replays_the_step_from_a_graph) {
  step(1, 0, 131);
  add(PD_EVENT_CPU_OP, "aten::add", 1, 10, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 2, 3, 1);
  kernel(10, 15, 1, 7);
  add(PD_EVENT_CPU_OP, "aten::mul", 112, 122, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 113, 114, 2);
  kernel(121, 126, 2, 7);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 123, 128, 3);
  pd_event_t *sy = add(PD_EVENT_SYNC, NULL, 123, 128, 3);
  sy->u.sync.sync_kind = PD_SYNC_STREAM;
  expect_steps(NULL, 131.0, PD_FIX_BIT(PD_FIX_LAUNCH), 117.0);
}

/* tiny_ops fuses a chain: one op of each kind it repeats stays (a multi-tensor op, the
 * foreach optimizer's; a graph launch where the units are bare calls), with the host time
 * before it; the rest go, their kernels kept back to back. Here 20 aten::mul_ and 20
 * aten::add_ alternate (10 us each, 2 us apart, a 0.5 us kernel each), and the chain runs
 * on into an aten::to (the next step's first op, which a fix of the chain keeps): the
 * first mul_, the first add_ and the to stay with the 2 us before the last two, 38 ops
 * and their gaps (456 us) go; the step's last 40 us are host time after the chain, longer
 * than the GPU's 41 kernels. Removing every unit of the chain and the gaps between them
 * (the rule before) gives 45 us. */
Test(replay, a_fused_chain_keeps_one_op_of_each_kind) {
  step(1, 0, 535);
  for (uint64_t i = 0; i < 41; i++) {
    double t = 5 + 12.0 * (double)i;
    add(PD_EVENT_CPU_OP, i == 40 ? "aten::to" : (i % 2 ? "aten::add_" : "aten::mul_"), t, t + 10, 0);
    add(PD_EVENT_RUNTIME, "cudaLaunchKernel", t + 2, t + 4, i + 1);
    kernel(t + 6, t + 6.5, i + 1, 7);
  }
  expect_steps(NULL, 535.0, PD_FIX_BIT(PD_FIX_TINY_OPS), 79.0);
}

/* A fix of its own is listed as a finding and replayed with the others; the profiler's
 * removal (the baseline) and the partial fixes (asynchronous reads, a faster loader) are
 * not; nor is a value out of range. */
Test(replay, a_fix_of_its_own_is_every_fix_but_the_baseline_and_the_partial_ones) {
  for (int f = 0; f < PD_FIX_COUNT; f++) {
    const bool partial = f == PD_FIX_PROFILER || f == PD_FIX_READS_ASYNC || f == PD_FIX_LOADER_2X;
    cr_expect_eq(pd_fix_is_extra((pd_fix_t)f), !partial, "%s", pd_fix_name((pd_fix_t)f));
  }
  cr_expect_not(pd_fix_is_extra(PD_FIX_COUNT));
  cr_expect_not(pd_fix_is_extra((pd_fix_t)-1));
}

/* A trace that carries its recording host's calibration is replayed with it. */
Test(replay, the_traces_calibration_is_the_cost_model) {
  step(1, 0, 100);
  add(PD_EVENT_RUNTIME, "cudaGetDevice", 50, 60, 0);
  pd_trace_set_calibration(T, 5000, 0);
  pd_trace_index_t ix;
  cr_assert_eq(pd_trace_index_build(T, &ix), 0);
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_replay_fill_metrics(T, &ix, NULL, &m), 0);
  cr_expect(strstr(m.replay_cost_model, "calibration") != NULL, "%s", m.replay_cost_model);
  NEAR(m.predicted_unprofiled_step_us, 95.0);
  NEAR(m.replay_step_us, 100.0);
  pd_trace_index_free(&ix);
}

/* ---- traces that lack what the graph needs --------------------------------------------------- */

Test(replay, no_step_markers_is_unavailable) {
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 5, 7, 1);
  kernel(10, 30, 1, 7);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->quality, PD_REPLAY_UNAVAILABLE);
  cr_assert(strstr(in->why, "no step markers") != NULL);
  pd_replay_result_t res;
  cr_assert_eq(pd_replay_run(b.r, 0, &res, NULL), 0);
  cr_assert_eq(res.steps, 0);
  unbuild(&b);
}

Test(replay, no_correlation_ids_is_approximate) {
  step(1, 0, 40);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 5, 7, 0);
  kernel(10, 30, 0, 7);
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 8, 35, 0);
  built_t b;
  build(&b, NULL);
  const pd_replay_info_t *in = pd_replay_info(b.r);
  cr_assert_eq(in->quality, PD_REPLAY_APPROXIMATE);
  cr_assert(strstr(in->why, "correlation") != NULL, "%s", in->why);
  pd_replay_result_t res;
  cr_assert_eq(pd_replay_run(b.r, 0, &res, NULL), 0);
  cr_assert(isfinite(res.step_us_mean) && isfinite(res.err_max));
  unbuild(&b);
}

/* A trace with no correlation ids and no sync records still gets a verdict from the
 * replay, which says it is approximate and why; no NaN where a saving is given. */
Test(replay, verdict_without_correlation_or_sync_records) {
  step(1, 0, 100);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 60, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 61, 63, 0);
  kernel(70, 90, 0, 7);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 64, 95, 0);
  step(2, 100, 200);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 101, 160, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 161, 163, 0);
  kernel(170, 190, 0, 7);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 164, 195, 0);
  pd_trace_sort(T);
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(T, &m), 0);
  cr_expect_eq(m.replay_quality, PD_REPLAY_APPROXIMATE);
  cr_expect(strstr(m.replay_why, "correlation") != NULL, "%s", m.replay_why);
  pd_verdict_t v;
  pd_diagnose(&m, PD_ADVICE_TORCH, &v);
  cr_expect_eq(v.bottleneck, PD_BOTTLENECK_DATALOADER, "%s", v.evidence);
  cr_expect_str_eq(v.rule, "replay");
  cr_expect_geq(v.nsavings, 8);
  for (int i = 0; i < v.nsavings; i++)
    cr_expect(isfinite(v.savings[i].est_saving_us_per_step) && isfinite(v.savings[i].est_saving_fraction), "%s",
              v.savings[i].cause);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  pd_verdict_print(f, &v);
  fclose(f);
  cr_expect(strstr(text, "approximate") != NULL && strstr(text, "nan") == NULL, "%s", text);
  free(text);
}

/* Host code is time outside every op: a trace whose CUDA calls sit in no op or range below
 * the step (pd_run on a program without NVTX ranges) has no such layer, so removing "the
 * host time outside ops" would remove the whole framework: no saving is offered. With one
 * op around the launch, it is. */
static double host_code_saving(bool with_op) {
  pd_trace_destroy(T);
  T = pd_trace_create();
  step(1, 0, 100);
  if (with_op) add(PD_EVENT_CPU_OP, "aten::relu", 4, 8, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 5, 7, 1);
  kernel(10, 30, 1, 7);
  add(PD_EVENT_RUNTIME, "cudaDeviceSynchronize", 60, 95, 2);
  pd_trace_sort(T);
  pd_trace_index_t ix;
  cr_assert_eq(pd_trace_index_build(T, &ix), 0);
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_replay_fill_metrics(T, &ix, NULL, &m), 0);
  pd_trace_index_free(&ix);
  return m.saving_host_code_us_per_step;
}

Test(replay, host_code_needs_an_op_layer) {
  cr_expect(isnan(host_code_saving(false)), "no op layer: no host_code saving");
  double with = host_code_saving(true);
  cr_expect(isfinite(with) && with > 0, "with an op around the launch: %f", with);
}

/* Python work, not dispatch: twelve ops 5 us apart (the interpreter issuing the next op),
 * and once 200 us with no op (a tokenizer on the step's thread). Removing host code takes
 * the 200 us only: the 5 us stretches are the program's own dispatch, which moving Python
 * work out of the step does not remove (before, all 260 us of them went: 380 -> 120). */
Test(replay, host_code_is_the_work_between_ops_not_their_dispatch) {
  step(1, 0, 380);
  double t = 5;
  for (uint64_t i = 0; i < 12; i++) {
    add(PD_EVENT_CPU_OP, "aten::add", t, t + 10, 0);
    add(PD_EVENT_RUNTIME, "cudaLaunchKernel", t + 2, t + 4, i + 1);
    kernel(t + 5, t + 6, i + 1, 7);
    t += 10 + (i == 5 ? 200 : 5);
  }
  cr_assert(fabs(t - 380) < 1e-9, "the last op ends 5 us before the step: %f", t);
  expect_steps(NULL, 380.0, PD_FIX_BIT(PD_FIX_HOST_CODE), 180.0);
}

/* No step markers: the metrics have no step, and the replay says why. */
Test(replay, metrics_without_steps_say_why) {
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 5, 7, 1);
  kernel(10, 30, 1, 7);
  pd_trace_index_t ix;
  cr_assert_eq(pd_trace_index_build(T, &ix), 0);
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_replay_fill_metrics(T, &ix, NULL, &m), 0);
  cr_expect_eq(m.replay_quality, PD_REPLAY_UNAVAILABLE);
  cr_expect(strstr(m.replay_why, "no step markers") != NULL);
  cr_expect(isnan(m.predicted_unprofiled_step_us), "not measured stays NaN (null in JSON)");
  cr_expect(isnan(pd_replay_metric_saving(&m, PD_FIX_PROFILER)));
  cr_expect_eq(pd_replay_fill_metrics(NULL, &ix, NULL, &m), PD_EINVAL);
  pd_trace_index_free(&ix);
}

Test(replay, bad_arguments) {
  pd_replay_t *r = NULL;
  pd_trace_index_t ix;
  memset(&ix, 0, sizeof ix);
  cr_assert_eq(pd_replay_build(NULL, &ix, NULL, &r), PD_EINVAL);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 5, 7, 0);
  cr_assert_eq(pd_replay_build(T, &ix, NULL, &r), PD_EINVAL); /* an index of another trace */
  cr_assert_eq(pd_replay_run(NULL, 0, NULL, NULL), PD_EINVAL);
  pd_replay_destroy(NULL);
  cr_assert_str_eq(pd_fix_name(PD_FIX_READS), "blocking_reads");
  cr_assert_str_eq(pd_fix_name(PD_FIX_COUNT), "?");
  cr_assert_str_eq(pd_replay_quality_name(PD_REPLAY_APPROXIMATE), "approximate");
  cr_assert_str_eq(pd_replay_quality_name((pd_replay_quality_t)9), "?");
  cr_assert(pd_replay_cost_default(true).ns_per_call > 0);
  cr_assert(pd_replay_cost_default(false).ns_per_range > 0);
}

/* Fuzz finding (trace_analyze, UBSan, CI's fuzz stage): a trace whose GPU tasks start
 * near the reader's ts limit (8.4e18 ns) and whose measured queue gap is 2.8e18 ns made the
 * replay's time sums overflow int64 (replay.c, a queued task's start). The replay's sums
 * now saturate (never reading as "not done"): every what-if runs, and a step's replayed
 * time is a number or NaN, never undefined behaviour (which the sanitizer stage would
 * stop at). */
Test(replay, fuzz_times_near_the_int64_limit_saturate) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (ctest sets it)");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fuzz/trace_analyze/findings/replay_overflow.json", src);
  file_built_t fb;
  file_build(path, &fb);
  pd_replay_t *r = fb.b.r;
  cr_assert_neq(pd_replay_info(r)->quality, PD_REPLAY_UNAVAILABLE, "the finding must reach the pass");
  for (int f = -1; f < PD_FIX_COUNT; f++) {
    pd_replay_result_t res;
    cr_assert_eq(pd_replay_run(r, f < 0 ? 0u : PD_FIX_BIT(PD_FIX_PROFILER) | PD_FIX_BIT(f), &res, NULL), 0);
    cr_expect(res.steps == 0 || !isinf(res.step_us_mean), "fix %d: %g", f, res.step_us_mean);
  }
  file_unbuild(&fb);
}

/* Fuzz finding (trace_analyze, UBSan; the input is breakdown::fuzz_a_pinned_copy_faster_than_any_link):
 * a pinned copy of 1.7e19 bytes in a nanosecond made the pinned bandwidth's conversion to an
 * integer overflow (measure_pinned_gbps). A rate no host link reaches now measures nothing;
 * the real copy beside it still does. */
Test(replay, an_impossible_pinned_copy_measures_no_bandwidth) {
  step(1, 0, 3000);
  pd_event_t *huge = add(PD_EVENT_MEMCPY, NULL, 10, 10.001, 0);
  huge->u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  huge->u.memcpy.src_kind = PD_MEM_PINNED;
  huge->u.memcpy.bytes = 17000000000000000000ull;
  /* 50 MB in 1.25 ms (40 GB/s) and 60 MB in 1 ms (60 GB/s): the median of the two is the
   * upper one; with the impossible copy counted (its rate cast to an integer overflows,
   * INT64_MIN on x86) it would be the lower */
  for (int k = 0; k < 2; k++) {
    pd_event_t *real = add(PD_EVENT_MEMCPY, NULL, 100 + 1500 * k, k ? 1600 + 1000 : 1350, 0);
    real->u.memcpy.copy_kind = PD_MEMCPY_HTOD;
    real->u.memcpy.src_kind = PD_MEM_PINNED;
    real->u.memcpy.bytes = k ? 60000000 : 50000000;
  }
  built_t b;
  build(&b, NULL);
  cr_expect_float_eq(pd_replay_info(b.r)->pinned_gbps, 60.0, 1e-9);
  cr_expect_str_eq(pd_replay_info(b.r)->pinned_source, "measured");
  unbuild(&b);
}

/* Without a pinned copy of 1 MiB or more to measure, the bandwidth is the documented figure
 * of the trace's GPU kind: measured on H200s (55.2 GB/s), the general 50 GB/s for a GPU the
 * table does not hold (an H100 here) or a trace without device properties. */
Test(replay, the_pinned_bandwidth_is_documented_per_gpu_kind) {
  static const struct {
    const char *device;
    double gbps;
    const char *source;
  } cases[] = {
      {"NVIDIA H200", 55.2, "documented for NVIDIA H200"},
      {"NVIDIA H100 80GB HBM3", 50.0, "documented"},
      {NULL, 50.0, "documented"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pd_trace_destroy(T);
    T = pd_trace_create();
    step(1, 0, 100);
    pd_event_t *small = add(PD_EVENT_MEMCPY, NULL, 10, 20, 0); /* pinned, under 1 MiB: no measure */
    small->u.memcpy.copy_kind = PD_MEMCPY_HTOD;
    small->u.memcpy.src_kind = PD_MEM_PINNED;
    small->u.memcpy.bytes = 500000;
    if (cases[i].device != NULL) {
      pd_device_props_t d;
      memset(&d, 0, sizeof d);
      snprintf(d.name, sizeof d.name, "%s", cases[i].device);
      cr_assert_eq(pd_trace_add_device(T, &d), 0);
    }
    built_t b;
    build(&b, NULL);
    cr_expect_float_eq(pd_replay_info(b.r)->pinned_gbps, cases[i].gbps, 1e-9, "%s", cases[i].source);
    cr_expect_str_eq(pd_replay_info(b.r)->pinned_source, cases[i].source);
    unbuild(&b);
  }
}

/* ---- every committed trace --------------------------------------------------------------------- */

static void check_dir(const char *sub, size_t *checked) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (ctest sets it)");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", src, sub);
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "%s", dir);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len < 17 || strcmp(de->d_name + len - 17, ".pt.trace.json.gz") != 0) continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    file_built_t fb;
    file_build(path, &fb);
    pd_replay_t *r = fb.b.r;
    pd_replay_result_t res;
    cr_assert_eq(pd_replay_run(r, 0, &res, NULL), 0);
    cr_assert_eq(res.steps, fb.b.ix.nsteps, "%s", de->d_name);
    cr_log_info("%s: step error median %.2f%%, max %.2f%% (%s)", de->d_name, res.err_median * 100,
                res.err_max * 100, pd_replay_quality_name(pd_replay_info(r)->quality));
    double lim_median, lim_worst;
    pd_test_replay_limits(strcmp(sub, "runs") == 0 ? de->d_name : path, &lim_median, &lim_worst);
    cr_expect(res.err_median <= lim_median, "%s: median step error %.2f%% > %.1f%%", de->d_name, res.err_median * 100,
              lim_median * 100);
    cr_expect(res.err_max <= lim_worst, "%s: worst step error %.2f%% > %.1f%%", de->d_name, res.err_max * 100,
              lim_worst * 100);
    /* every fix replays to a finite step no longer than the profiled one plus the error */
    for (int f = 0; f < PD_FIX_COUNT; f++) {
      pd_replay_result_t fr;
      cr_assert_eq(pd_replay_run(r, PD_FIX_BIT(PD_FIX_PROFILER) | PD_FIX_BIT(f), &fr, NULL), 0);
      cr_expect(isfinite(fr.step_us_mean) && fr.step_us_mean > 0, "%s %s", de->d_name, pd_fix_name((pd_fix_t)f));
      cr_expect(fr.step_us_mean <= res.step_us_mean * 1.0001, "%s: %s lengthens the step (%.1f > %.1f)",
                de->d_name, pd_fix_name((pd_fix_t)f), fr.step_us_mean, res.step_us_mean);
    }
    file_unbuild(&fb);
    (*checked)++;
  }
  closedir(d);
}

Test(replay_fixtures, unchanged_replay_reproduces_every_step) {
  size_t checked = 0;
  check_dir("runs", &checked);
  check_dir("torch", &checked);
  cr_assert_geq(checked, 15, "only %zu fixtures found", checked);
}

/* Savings over cycles (--repeat): weighted by steps; a fix a cycle has no saving for is
 * averaged over the others; the combination only where every cycle combined the same
 * fixes; the worst cycle's errors; a cycle without a replay counts for nothing. */
static pd_metrics_t cycle_metrics(double pred, double data_wait, double host_code, unsigned mask, double err) {
  pd_metrics_t m;
  pd_metrics_init(&m);
  m.predicted_unprofiled_step_us = pred;
  m.replay_step_us = pred + 100;
  m.saving_data_wait_us_per_step = data_wait;
  m.saving_host_code_us_per_step = host_code;
  m.saving_combined_us_per_step = data_wait + 1;
  m.replay_combined_mask = mask;
  m.replay_step_error_median_fraction = err / 2;
  m.replay_step_error_max_fraction = err;
  return m;
}

Test(replay, savings_over_cycles_are_weighted_by_their_steps) {
  pd_cycle_log_t log = {0};
  const unsigned dw = PD_FIX_BIT(PD_FIX_DATA_WAIT);
  pd_metrics_t c1 = cycle_metrics(1000, 100, NAN, dw, 0.01), c2 = cycle_metrics(2000, 400, 50, dw, 0.03);
  pd_metrics_t none = cycle_metrics(NAN, NAN, NAN, 0, NAN);
  cr_assert_eq(pd_cycle_log_add(&log, &c1, 3), 0);
  pd_metrics_t out = cycle_metrics(7, 7, 7, 7, 0.5);
  cr_expect_eq(pd_cycle_log_overall(&log, &out), 1u);
  NEAR(out.saving_data_wait_us_per_step, 7.0); /* one cycle: left as it is */
  cr_assert_eq(pd_cycle_log_add(&log, &none, 5), 0);
  cr_assert_eq(pd_cycle_log_add(&log, &c2, 1), 0);
  cr_expect_eq(pd_cycle_log_add(&log, &c2, -1), PD_EINVAL);
  cr_expect_eq(pd_cycle_log_add(NULL, &c2, 1), PD_EINVAL);
  cr_expect_eq(pd_cycle_log_overall(&log, &out), 2u);
  NEAR(out.predicted_unprofiled_step_us, (3 * 1000.0 + 2000.0) / 4);
  NEAR(out.replay_step_us, (3 * 1100.0 + 2100.0) / 4);
  NEAR(out.saving_data_wait_us_per_step, (3 * 100.0 + 400.0) / 4);
  NEAR(out.saving_host_code_us_per_step, 50.0); /* the one cycle that has it */
  NEAR(out.saving_combined_us_per_step, (3 * 101.0 + 401.0) / 4);
  cr_expect_eq(out.replay_combined_mask, dw);
  NEAR(out.replay_step_error_max_fraction, 0.03);
  NEAR(out.replay_step_error_median_fraction, 0.015);
  cr_expect(isnan(out.saving_allocation_us_per_step), "no cycle has it: NaN");
  pd_metrics_t c3 = cycle_metrics(1000, 100, NAN, dw | PD_FIX_BIT(PD_FIX_HOST_CODE), 0.0);
  cr_assert_eq(pd_cycle_log_add(&log, &c3, 1), 0);
  cr_expect_eq(pd_cycle_log_overall(&log, &out), 3u);
  cr_expect(isnan(out.saving_combined_us_per_step), "different combinations are not averaged");
  cr_expect_eq(out.replay_combined_mask, 0u);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cr_assert_not_null(f);
  pd_cycle_log_print(f, &log);
  fclose(f);
  cr_expect(strstr(text, "over all 4") != NULL && strstr(text, "cycle 2: 5 steps, no replay") != NULL, "%s", text);
  cr_expect(strstr(text, "cycle 3: 1 step, predicted unprofiled step 2000.0 us; data_wait 20.0%") != NULL, "%s", text);
  free(text);
  pd_cycle_log_free(&log);
  pd_cycle_log_free(&log);
  pd_cycle_log_free(NULL);
}
