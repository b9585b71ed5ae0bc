/* test_breakdown.c: step-time breakdown, GPU utilization and the idle-time split
 * (src/analyze/analyze_breakdown.c).
 *
 * Hand-built timelines with every part worked out on paper check the priority carving
 * and the HTA idle categories exactly; the torch fixtures check the invariants on real
 * data (parts sum to the step, idle + busy = step, busy agrees with the core's
 * gpu_busy_fraction) and the planted signatures (sync vs memory_churn per step).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_analyze.h"
#include "pd/pd_prof.h"

static pd_trace_t *g_t;

static void setup(void) {
  g_t = pd_trace_create();
  cr_assert_not_null(g_t);
}

static void teardown(void) {
  pd_trace_destroy(g_t);
}

TestSuite(breakdown, .init = setup, .fini = teardown);

static void add(pd_event_kind_t kind, const char *name, int64_t start, int64_t end, uint64_t corr) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.name = name;
  e.start_ns = start;
  e.end_ns = end;
  e.correlation_id = corr;
  e.pid = 1;
  e.tid = 1;
  e.stream = 7;
  if (kind == PD_EVENT_RANGE || kind == PD_EVENT_CPU_OP || kind == PD_EVENT_GPU_RANGE) e.u.range.step = -1;
  if (kind == PD_EVENT_RANGE && strncmp(name, "ProfilerStep#", 13) == 0) e.u.range.step = atoi(name + 13);
  cr_assert_eq(pd_trace_add(g_t, &e), 0);
}

static void add_mem(int64_t t, int64_t bytes, int64_t total, pd_mem_kind_t kind) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = PD_EVENT_MEMORY;
  e.start_ns = e.end_ns = t;
  e.u.memory.bytes = bytes;
  e.u.memory.total_allocated = total;
  e.u.memory.mem_kind = kind;
  cr_assert_eq(pd_trace_add(g_t, &e), 0);
}

static int64_t parts_sum(const pd_step_breakdown_t *s) {
  int64_t sum = 0;
  for (int p = 0; p < PD_PART_COUNT; p++) sum += s->part_ns[p];
  return sum;
}

static int64_t idle_sum(const pd_step_breakdown_t *s) {
  int64_t sum = 0;
  for (int k = 0; k < PD_IDLE_COUNT; k++) sum += s->idle_ns[k];
  return sum;
}

/* One step [0, 1000):
 *   DataLoader.wait [0,100)   train [100,900)   cudaLaunchKernel [150,200) corr 1
 *   kernel [250,400) corr 1   memcpy [380,450) (no call)
 * kernel 150 | memcpy 50 (380-400 belongs to the kernel) | runtime 50 | dataloader 100 |
 * cpu_exec 100-150, 200-250, 450-900 = 550 | other 900-1000 = 100.
 * idle: [0,250) host wait (the kernel's call began after the GPU went idle, at -inf);
 * [450,1000) other (no later work). */
Test(breakdown, priority_carving) {
  add(PD_EVENT_RANGE, "ProfilerStep#4", 0, 1000, 0);
  add(PD_EVENT_RANGE, PD_RANGE_DATA_WAIT, 0, 100, 0);
  add(PD_EVENT_RANGE, "train", 100, 900, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 150, 200, 1);
  add(PD_EVENT_KERNEL, "k", 250, 400, 1);
  add(PD_EVENT_MEMCPY, NULL, 380, 450, 0);
  pd_trace_sort(g_t);
  pd_breakdown_t b;
  cr_assert_eq(pd_breakdown_compute(g_t, -1, &b), 0);
  cr_assert_eq(b.nsteps, 1u);
  cr_expect(!b.whole_trace);
  const pd_step_breakdown_t *s = &b.steps[0];
  cr_expect_eq(s->step, 4);
  cr_expect_eq(s->part_ns[PD_PART_KERNEL], 150);
  cr_expect_eq(s->part_ns[PD_PART_MEMCPY], 50);
  cr_expect_eq(s->part_ns[PD_PART_MEMSET], 0);
  cr_expect_eq(s->part_ns[PD_PART_RUNTIME], 50);
  cr_expect_eq(s->part_ns[PD_PART_DATALOADER], 100);
  cr_expect_eq(s->part_ns[PD_PART_CPU_EXEC], 550);
  cr_expect_eq(s->part_ns[PD_PART_OTHER], 100);
  cr_expect_eq(parts_sum(s), 1000);
  cr_expect_eq(s->gpu_busy_ns, 200);
  cr_expect_eq(s->idle_ns[PD_IDLE_HOST_WAIT], 250);
  cr_expect_eq(s->idle_ns[PD_IDLE_KERNEL_WAIT], 0);
  cr_expect_eq(s->idle_ns[PD_IDLE_OTHER], 550);
  cr_expect_eq(s->data_wait_ns, 100);
  cr_expect_eq(s->kernels, 1);
  cr_expect_eq(s->memcpys, 1);
  cr_expect_eq(s->runtime_calls, 1);
  cr_expect_eq(b.total.end_ns - b.total.start_ns, 1000);
  pd_breakdown_free(&b);
  cr_expect_null(b.steps);
}

/* Four kernels on one stream, step [0, 1000):
 *   call [10,15) -> k1 [100,200); call [20,25) -> k2 [210,300): gap 10 ns, queued -> kernel wait
 *   call [250,255) -> k3 [400,500): gap [300,400), queued, 100 ns -> kernel wait under the
 *     default 3 us threshold, other under a 50 ns one
 *   call [600,605) -> k4 [650,700): enqueued after the GPU went idle at 500 -> host wait 150
 *   leading [0,100): host wait; trailing [700,1000): other. */
static void four_kernels(void) {
  add(PD_EVENT_RANGE, "ProfilerStep#0", 0, 1000, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 10, 15, 1);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 20, 25, 2);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 250, 255, 3);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 600, 605, 4);
  add(PD_EVENT_KERNEL, "k1", 100, 200, 1);
  add(PD_EVENT_KERNEL, "k2", 210, 300, 2);
  add(PD_EVENT_KERNEL, "k3", 400, 500, 3);
  add(PD_EVENT_KERNEL, "k4", 650, 700, 4);
  pd_trace_sort(g_t);
}

Test(breakdown, idle_split_hta) {
  four_kernels();
  pd_breakdown_t b;
  cr_assert_eq(pd_breakdown_compute(g_t, -1, &b), 0);
  const pd_step_breakdown_t *s = &b.steps[0];
  cr_expect_eq(s->gpu_busy_ns, 340);
  cr_expect_eq(s->idle_ns[PD_IDLE_HOST_WAIT], 100 + 150);
  cr_expect_eq(s->idle_ns[PD_IDLE_KERNEL_WAIT], 10 + 100);
  cr_expect_eq(s->idle_ns[PD_IDLE_OTHER], 300);
  cr_expect_eq(idle_sum(s) + s->gpu_busy_ns, 1000);
  pd_breakdown_free(&b);

  /* a 50 ns threshold leaves the queued 100 ns gap to "other" */
  cr_assert_eq(pd_breakdown_compute(g_t, 50, &b), 0);
  cr_expect_eq(b.steps[0].idle_ns[PD_IDLE_KERNEL_WAIT], 10);
  cr_expect_eq(b.steps[0].idle_ns[PD_IDLE_OTHER], 100 + 300);
  pd_breakdown_free(&b);
}

/* The launch call's end decides: k2's call starts before k1 ends but returns after it,
 * so the GPU waited for the host ([200,300) host wait; HTA's start rule would call the
 * work queued). A kernel with no launching call in the trace after a long gap: other. */
Test(breakdown, idle_host_wait_by_call_end) {
  add(PD_EVENT_RANGE, "ProfilerStep#0", 0, 10000, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 0, 10, 1);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 150, 260, 2);
  add(PD_EVENT_KERNEL, "k1", 100, 200, 1);
  add(PD_EVENT_KERNEL, "k2", 300, 400, 2);
  add(PD_EVENT_KERNEL, "orphan", 5000, 5100, 99);
  add(PD_EVENT_KERNEL, "orphan", 5200, 5300, 98);
  pd_trace_sort(g_t);
  pd_breakdown_t b;
  cr_assert_eq(pd_breakdown_compute(g_t, -1, &b), 0);
  const pd_step_breakdown_t *s = &b.steps[0];
  cr_expect_eq(s->idle_ns[PD_IDLE_HOST_WAIT], 100 + 100, "leading gap and [200,300)");
  cr_expect_eq(s->idle_ns[PD_IDLE_KERNEL_WAIT], 100, "[5100,5200): short, no call");
  cr_expect_eq(s->idle_ns[PD_IDLE_OTHER], 4600 + 4700, "[400,5000) and the tail");
  pd_breakdown_free(&b);
}

Test(breakdown, steps_clip_and_totals) {
  four_kernels();
  /* a second step [1000, 1500) with one kernel spilling out of the first */
  add(PD_EVENT_RANGE, "ProfilerStep#1", 1000, 1500, 0);
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 950, 960, 5);
  add(PD_EVENT_KERNEL, "k5", 980, 1100, 5);
  add(PD_EVENT_RUNTIME, "cudaStreamSynchronize", 1100, 1200, 0);
  add(PD_EVENT_RUNTIME, "cudaMalloc", 1200, 1300, 0);
  add_mem(1210, 4096, -1, PD_MEM_DEVICE);
  add_mem(1220, -4096, -1, PD_MEM_DEVICE);
  add_mem(1230, 100, -1, PD_MEM_PINNED);
  pd_trace_sort(g_t);
  pd_breakdown_t b;
  cr_assert_eq(pd_breakdown_compute(g_t, -1, &b), 0);
  cr_assert_eq(b.nsteps, 2u);
  cr_expect_eq(b.steps[0].step, 0);
  cr_expect_eq(b.steps[1].step, 1);
  /* k5 runs [980,1100): 20 ns in step 0, 100 in step 1 */
  cr_expect_eq(b.steps[0].part_ns[PD_PART_KERNEL], 340 + 20);
  cr_expect_eq(b.steps[1].part_ns[PD_PART_KERNEL], 100);
  cr_expect_eq(b.steps[1].part_ns[PD_PART_RUNTIME], 200);
  cr_expect_eq(b.steps[1].part_ns[PD_PART_OTHER], 200);
  cr_expect_eq(b.steps[1].sync_calls, 1);
  cr_expect_eq(b.steps[1].alloc_calls, 1);
  cr_expect_eq(b.steps[1].mem_allocs, 1);
  cr_expect_eq(b.steps[1].mem_frees, 1);
  cr_expect_eq(b.steps[1].mem_alloc_bytes, 4096);
  cr_expect_eq(b.steps[0].kernels, 5, "k5 starts in step 0");
  for (size_t s = 0; s < 2; s++) {
    int64_t len = b.steps[s].end_ns - b.steps[s].start_ns;
    cr_expect_eq(parts_sum(&b.steps[s]), len);
    cr_expect_eq(idle_sum(&b.steps[s]) + b.steps[s].gpu_busy_ns, len);
  }
  cr_expect_eq(parts_sum(&b.total), 1500);
  cr_expect_eq(b.total.kernels, 5);
  cr_expect_eq(b.total.runtime_calls, 7);
  pd_breakdown_free(&b);
}

Test(breakdown, whole_trace_without_steps) {
  add(PD_EVENT_RUNTIME, "cudaLaunchKernel", 100, 110, 1);
  add(PD_EVENT_KERNEL, "k", 120, 220, 1);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 300, 400, 0);
  add(PD_EVENT_RANGE, "enumerate(DataLoader)#again", 350, 420, 0);
  pd_trace_sort(g_t);
  pd_breakdown_t b;
  cr_assert_eq(pd_breakdown_compute(g_t, -1, &b), 0);
  cr_expect(b.whole_trace);
  cr_assert_eq(b.nsteps, 1u);
  cr_expect_eq(b.steps[0].step, -1);
  cr_expect_eq(b.steps[0].start_ns, 100);
  cr_expect_eq(b.steps[0].end_ns, 420);
  cr_expect_eq(b.steps[0].data_wait_ns, 120, "overlapping dataloader ranges count once");
  cr_expect_eq(b.steps[0].part_ns[PD_PART_DATALOADER], 120);
  cr_expect_eq(parts_sum(&b.steps[0]), 320);
  pd_breakdown_free(&b);

  pd_trace_t *empty = pd_trace_create();
  cr_assert_eq(pd_breakdown_compute(empty, -1, &b), 0);
  cr_expect_eq(b.nsteps, 0u);
  pd_breakdown_free(&b);
  pd_trace_destroy(empty);
  cr_expect_eq(pd_breakdown_compute(NULL, -1, &b), PD_EINVAL);
  cr_expect_eq(pd_breakdown_compute(g_t, -1, NULL), PD_EINVAL);
}

Test(breakdown, names) {
  cr_expect(pd_range_is_dataloader("DataLoader.wait"));
  cr_expect(pd_range_is_dataloader("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"));
  cr_expect(!pd_range_is_dataloader("DataLoader.to_device"));
  cr_expect(!pd_range_is_dataloader(NULL));
  cr_expect_str_eq(pd_part_name(PD_PART_CPU_EXEC), "cpu_exec");
  cr_expect_str_eq(pd_part_name(PD_PART_COUNT), "unknown");
  cr_expect_str_eq(pd_idle_name(PD_IDLE_HOST_WAIT), "host_wait");
  cr_expect_str_eq(pd_idle_name(PD_IDLE_COUNT), "unknown");
}

/* ---- torch fixtures ------------------------------------------------------------------------ */

static pd_trace_t *read_fixture(const char *name) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (run through ctest)");
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/tests/fixtures/torch/%s", src, name);
  pd_trace_t *t = pd_trace_create();
  cr_assert_eq(pd_trace_read_file(path, t, err, sizeof err), 0, "%s", err);
  return t;
}

static void check_invariants(pd_trace_t *t, pd_breakdown_t *b) {
  cr_assert_eq(pd_breakdown_compute(t, -1, b), 0);
  cr_assert_eq(b->nsteps, 4u);
  int64_t busy = 0, len = 0;
  for (size_t s = 0; s < b->nsteps; s++) {
    const pd_step_breakdown_t *st = &b->steps[s];
    int64_t l = st->end_ns - st->start_ns;
    cr_expect_eq(st->step, (int64_t)s + 2);
    cr_expect_eq(parts_sum(st), l, "step %zu: parts %lld vs %lld", s, (long long)parts_sum(st), (long long)l);
    cr_expect_eq(idle_sum(st) + st->gpu_busy_ns, l);
    cr_expect_eq(st->gpu_busy_ns, st->part_ns[PD_PART_KERNEL] + st->part_ns[PD_PART_MEMCPY] + st->part_ns[PD_PART_MEMSET]);
    for (int p = 0; p < PD_PART_COUNT; p++) cr_expect_geq(st->part_ns[p], 0);
    cr_expect_gt(st->part_ns[PD_PART_KERNEL], 0);
    cr_expect_gt(st->part_ns[PD_PART_RUNTIME], 0);
    cr_expect_gt(st->part_ns[PD_PART_DATALOADER], 0, "torch's enumerate(DataLoader) range");
    cr_expect_gt(st->data_wait_ns, 0);
    cr_expect_leq(st->part_ns[PD_PART_DATALOADER], st->data_wait_ns);
    busy += st->gpu_busy_ns;
    len += l;
  }
  pd_metrics_t m;
  pd_metrics_init(&m);
  cr_assert_eq(pd_metrics_from_trace(t, &m), 0);
  cr_expect_float_eq(m.gpu_busy_fraction, (double)busy / (double)len, 1e-12,
                     "core %f vs breakdown %f", m.gpu_busy_fraction, (double)busy / (double)len);
}

Test(breakdown, torch_fixtures_sync_vs_churn) {
  pd_trace_t *sync = read_fixture("torch_sync.pt.trace.json.gz");
  pd_trace_t *churn = read_fixture("torch_memory_churn.pt.trace.json.gz");
  pd_breakdown_t bs, bc;
  check_invariants(sync, &bs);
  check_invariants(churn, &bc);
  double n = 4.0;
  /* sync: more host-blocking calls per step; churn: many more allocations per step */
  double sync_s = (double)bs.total.sync_calls / n, sync_c = (double)bc.total.sync_calls / n;
  double alloc_s = (double)bs.total.mem_allocs / n, alloc_c = (double)bc.total.mem_allocs / n;
  double bytes_s = (double)bs.total.mem_alloc_bytes / n, bytes_c = (double)bc.total.mem_alloc_bytes / n;
  cr_expect_gt(sync_s, sync_c, "sync calls per step: sync %.1f vs churn %.1f", sync_s, sync_c);
  cr_expect_gt(alloc_c, 1.5 * alloc_s, "allocations per step: churn %.1f vs sync %.1f", alloc_c, alloc_s);
  cr_expect_gt(bytes_c, 2.0 * bytes_s, "bytes allocated per step: churn %.0f vs sync %.0f", bytes_c, bytes_s);
  cr_expect_eq(sync_s, 4.0);
  cr_expect_eq(sync_c, 3.0);
  cr_expect_eq(alloc_s, 76.0);
  cr_expect_eq(alloc_c, 158.0);
  /* the DtoH copy of the loss: the sync run copies device -> host every step */
  pd_breakdown_free(&bs);
  pd_breakdown_free(&bc);
  pd_trace_destroy(sync);
  pd_trace_destroy(churn);
}

Test(breakdown, print) {
  four_kernels();
  pd_breakdown_t b;
  cr_assert_eq(pd_breakdown_compute(g_t, -1, &b), 0);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cr_assert_not_null(f);
  pd_breakdown_print(f, &b);
  fclose(f);
  cr_expect(strstr(text, "kernel > memcpy > memset > runtime > dataloader > cpu_exec > other") != NULL, "%s", text);
  cr_expect(strstr(text, "34.0%") != NULL, "GPU util of the step: %s", text);
  cr_expect(strstr(text, "host_wait 250 ns, kernel_wait 110 ns, other 300 ns") != NULL, "%s", text);
  free(text);
  pd_breakdown_free(&b);

  pd_breakdown_t none = {0};
  f = open_memstream(&text, &len);
  pd_breakdown_print(f, &none);
  fclose(f);
  cr_expect(strstr(text, "empty trace") != NULL);
  free(text);
}

/* Fuzz finding (trace_analyze, UBSan): overlapping events near the reader's ts/dur limit
 * made the breakdown's per-part sums (analyze_breakdown.c, after 100341 executions) and,
 * once those saturated, the top table's device total (analyze_top.c, 211 executions into
 * the next run) overflow int64. The reader now bounds the events' summed durations to
 * 2^62 ns, so every sum the analysis makes fits: this input is refused, naming the file
 * and the field. */
/* A finding of the trace_analyze fuzz target (tests/fuzz/trace_analyze/findings/NAME) into
 * text; returns its length. */
static size_t read_finding(const char *name, char *text, size_t cap) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (run through ctest)");
  char path[512];
  snprintf(path, sizeof path, "%s/tests/fuzz/trace_analyze/findings/%s", src, name);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  const size_t n = fread(text, 1, cap, f);
  fclose(f);
  return n;
}

/* A finding that the reader takes, read into a new trace (the caller destroys it). */
static pd_trace_t *finding_trace(const char *name, pd_trace_info_t *info) {
  static char text[1 << 16];
  const size_t n = read_finding(name, text, sizeof text);
  pd_trace_t *t = pd_trace_create();
  char err[512] = "";
  cr_assert_eq(pd_trace_read_buffer(text, n, t, info, err, sizeof err), 0, "%s: %s", name, err);
  return t;
}

/* A fuzz finding (trace_analyze, UBSan, 2026-11-29): a pinned copy of 1.7e19 bytes that
 * took a nanosecond, in a trace the analysis replays as one step: its rate overflowed the
 * replay's integer bandwidth (undefined behaviour, which the sanitizer stage stops at).
 * Such a rate now measures nothing, and a copy's time at the pinned bandwidth saturates:
 * the analysis runs to the end (replay::an_impossible_pinned_copy_measures_no_bandwidth
 * checks the rule itself). */
Test(breakdown, fuzz_a_pinned_copy_faster_than_any_link) {
  pd_trace_info_t info;
  pd_trace_t *t = finding_trace("pinned_bw_overflow.json", &info);
  pd_top_opts_t opts = {0};
  pd_analysis_t *a = NULL;
  cr_assert_eq(pd_analysis_run(t, &info, &opts, &a), 0);
  cr_assert(a->have_verdict, "the whole trace is replayed as one step");
  for (int i = 0; i < a->verdict.nsavings; i++)
    cr_expect(!isinf(a->verdict.savings[i].est_saving_us_per_step), "%s: %g", a->verdict.savings[i].cause,
              a->verdict.savings[i].est_saving_us_per_step);
  pd_analysis_destroy(a);
  pd_trace_destroy(t);
}

/* A fuzz finding (trace_analyze, 2026-11-29): a window from -4.5e18 to 8.5e18 ns, each end
 * inside the reader's range, whose length passes int64. Every span the reports print is
 * taken saturated (an_span_ns): the table shows the longest length int64 holds, where the
 * plain difference wrapped to about -5.4e18 (and is undefined behaviour in C). */
Test(breakdown, fuzz_a_window_longer_than_int64_prints_saturated) {
  pd_trace_info_t info;
  pd_trace_t *t = finding_trace("span_overflow.json", &info);
  pd_breakdown_t b;
  cr_assert_eq(pd_breakdown_compute(t, -1, &b), 0);
  cr_assert_eq(b.nsteps, 1u);
  cr_assert_lt(b.steps[0].start_ns, 0);
  cr_assert_gt(b.steps[0].end_ns, INT64_MAX + b.steps[0].start_ns, "the window is longer than int64 holds");
  char *out = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&out, &len);
  pd_breakdown_print(m, &b);
  fclose(m);
  cr_expect_not_null(strstr(out, "9223372036.855 s"), "the saturated span: %s", out);
  cr_expect_null(strstr(out, " -"), "no negative duration: %s", out);
  free(out);
  pd_breakdown_free(&b);
  pd_trace_destroy(t);
}

Test(breakdown, fuzz_overlapping_huge_steps_are_refused_by_the_reader) {
  static char text[1 << 16];
  const size_t n = read_finding("breakdown_overflow.json", text, sizeof text);
  pd_trace_t *t = pd_trace_create();
  pd_trace_info_t info;
  char err[512];
  cr_expect_eq(pd_trace_read_buffer(text, n, t, &info, err, sizeof err), PD_EPARSE);
  cr_expect_not_null(strstr(err, "dur: the events' durations add up to more than 2^62 ns"), "%s", err);
  pd_trace_destroy(t);
}
