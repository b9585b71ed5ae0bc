/* test_trace_links.c: External id links and gpu_user_annotation spans (src/model/trace_links.c),
 * including the case where GPU work of two ops that do not enclose each other overlaps on
 * one stream (the later span must start where the earlier ends, never overlap it in part)
 * and work of two ops back to back (a span ends before the next op's work, never in it). */
#include <criterion/criterion.h>
#include <string.h>

#include "trace_links.h"

static pd_event_t ev(pd_event_kind_t kind, uint32_t tid, int64_t start, int64_t end, const char *name, uint64_t corr) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.pid = 1;
  e.tid = tid;
  e.start_ns = start;
  e.end_ns = end;
  e.name = name;
  e.correlation_id = corr;
  e.stream = 7;
  e.u.range.step = -1;
  return e;
}

Test(trace_links, ids_stack_per_thread_and_spans_nest) {
  pd_links_t *l = pd_links_create();
  cr_assert_not_null(l);
  pd_event_t a = ev(PD_EVENT_RANGE, 10, 0, 100, "a", 0), b = ev(PD_EVENT_RANGE, 20, 0, 100, "b", 0);
  uint64_t ia = pd_links_range(l, &a), ib = pd_links_range(l, &b);
  cr_expect_eq(ia, 1u);
  cr_expect_eq(ib, 2u);
  /* each thread's call links to its own range */
  pd_event_t ca = ev(PD_EVENT_RUNTIME, 10, 10, 12, "cudaLaunchKernel", 1);
  pd_event_t cb = ev(PD_EVENT_RUNTIME, 20, 11, 13, "cudaLaunchKernel", 2);
  cr_expect_eq(pd_links_call(l, &ca), ia);
  cr_expect_eq(pd_links_call(l, &cb), ib);
  /* their kernels overlap in part on stream 7 (a: 20-60, b: 50-90) */
  pd_event_t ka = ev(PD_EVENT_KERNEL, 0, 20, 60, "ka", 1), kb = ev(PD_EVENT_KERNEL, 0, 50, 90, "kb", 2);
  cr_expect_eq(pd_links_activity(l, &ka), ia);
  cr_expect_eq(pd_links_activity(l, &kb), ib);
  /* a call after the range ended links to nothing; an unknown correlation neither */
  pd_event_t late = ev(PD_EVENT_RUNTIME, 10, 200, 201, "cudaLaunchKernel", 3);
  cr_expect_eq(pd_links_call(l, &late), 0u);
  pd_event_t lost = ev(PD_EVENT_KERNEL, 0, 300, 301, "k", 99);
  cr_expect_eq(pd_links_activity(l, &lost), 0u);
  const pd_gpu_span_t *sp = NULL;
  cr_assert_eq(pd_links_gpu_spans(l, &sp), 2);
  cr_expect_str_eq(sp[0].name, "a");
  cr_expect_eq(sp[0].start_ns, 20);
  cr_expect_eq(sp[0].end_ns, 61, "1 ns past the kernel it holds");
  cr_expect_str_eq(sp[1].name, "b");
  cr_expect_eq(sp[1].start_ns, 61, "the later span starts where the earlier ends");
  cr_expect_eq(sp[1].end_ns, 91);
  cr_expect_eq(pd_links_error(l), 0);
  pd_links_destroy(l);
}

Test(trace_links, enclosing_ranges_span_their_children_and_steps_get_none) {
  pd_links_t *l = pd_links_create();
  pd_event_t step = ev(PD_EVENT_RANGE, 10, 0, 1000, "ProfilerStep#0", 0);
  step.u.range.step = 0;
  pd_event_t outer = ev(PD_EVENT_RANGE, 10, 10, 500, "forward", 0);
  pd_event_t inner = ev(PD_EVENT_RANGE, 10, 20, 100, "conv", 0);
  uint64_t is = pd_links_range(l, &step), io = pd_links_range(l, &outer), ii = pd_links_range(l, &inner);
  pd_event_t c1 = ev(PD_EVENT_RUNTIME, 10, 30, 35, "cudaLaunchKernel", 1);
  cr_expect_eq(pd_links_call(l, &c1), ii);
  pd_event_t c2 = ev(PD_EVENT_DRIVER, 10, 200, 205, "cuLaunchKernelEx", 2);
  cr_expect_eq(pd_links_call(l, &c2), io, "conv closed: the call belongs to forward");
  pd_event_t c3 = ev(PD_EVENT_RUNTIME, 10, 600, 700, "cudaStreamSynchronize", 3);
  cr_expect_eq(pd_links_call(l, &c3), is);
  pd_event_t k1 = ev(PD_EVENT_KERNEL, 0, 40, 80, "k1", 1), k2 = ev(PD_EVENT_KERNEL, 0, 300, 350, "k2", 2);
  pd_links_activity(l, &k1);
  pd_links_activity(l, &k2);
  pd_event_t sy = ev(PD_EVENT_SYNC, 0, 610, 690, NULL, 3);
  cr_expect_eq(pd_links_activity(l, &sy), is, "a sync links to its call's range, spans nothing");
  const pd_gpu_span_t *sp = NULL;
  cr_assert_eq(pd_links_gpu_spans(l, &sp), 2, "forward and conv; no span for the step");
  cr_expect_str_eq(sp[0].name, "forward");
  cr_expect_eq(sp[0].start_ns, 40);
  cr_expect_eq(sp[0].end_ns, 351, "k2 was launched in forward itself: 1 ns past it");
  cr_expect_str_eq(sp[1].name, "conv");
  cr_expect_eq(sp[1].ext_id, ii);
  cr_expect_eq(sp[1].end_ns, 81);
  pd_links_destroy(l);
}

/* A span never ends on the nanosecond of what it holds: readers compute ends from
 * three-decimal microseconds with different roundings, and a tie can come out either way
 * (speedscope then reports the kernel outliving its span). Each enclosing span ends 1 ns
 * after the span inside it, also where their work ends on one nanosecond. */
Test(trace_links, spans_end_after_the_work_and_the_spans_they_hold) {
  pd_links_t *l = pd_links_create();
  pd_event_t outer = ev(PD_EVENT_RANGE, 10, 0, 500, "conv3.backward", 0);
  pd_event_t mid = ev(PD_EVENT_RANGE, 10, 10, 400, "aten::mm", 0);
  pd_event_t inner = ev(PD_EVENT_RANGE, 10, 20, 300, "gemm", 0);
  uint64_t io = pd_links_range(l, &outer), im = pd_links_range(l, &mid), ii = pd_links_range(l, &inner);
  pd_event_t c1 = ev(PD_EVENT_RUNTIME, 10, 30, 35, "cudaLaunchKernel", 1);
  cr_expect_eq(pd_links_call(l, &c1), ii);
  pd_event_t k1 = ev(PD_EVENT_KERNEL, 0, 1000, 2000, "k1", 1); /* the only work of all three */
  pd_links_activity(l, &k1);
  const pd_gpu_span_t *sp = NULL;
  cr_assert_eq(pd_links_gpu_spans(l, &sp), 3);
  cr_expect(sp[0].ext_id == io && sp[1].ext_id == im && sp[2].ext_id == ii, "outermost first");
  for (int i = 0; i < 3; i++) cr_expect_eq(sp[i].start_ns, 1000);
  cr_expect_eq(sp[2].end_ns, 2001);
  cr_expect_eq(sp[1].end_ns, 2002);
  cr_expect_eq(sp[0].end_ns, 2003);
  pd_links_destroy(l);
}

/* The nesting guard: a child that ends on its parent's nanosecond ends 1 ns before it, a
 * grandchild on the same nanosecond 2 ns before; partial overlaps, siblings, rows and
 * events that do not tie are left alone. */
Test(trace_links, nest_guard_ends_children_before_their_parents) {
  pd_nest_t *n = pd_nest_create();
  cr_assert_not_null(n);
  int err = 0;
  cr_expect_eq(pd_nest_end(n, 1, 2, 100, 500, &err), 500);
  cr_expect_eq(pd_nest_end(n, 1, 2, 100, 500, &err), 499, "an exact duplicate nests inside");
  cr_expect_eq(pd_nest_end(n, 1, 2, 200, 500, &err), 498, "a grandchild on the same ns");
  cr_expect_eq(pd_nest_end(n, 1, 2, 210, 300, &err), 300, "no tie: as given");
  cr_expect_eq(pd_nest_end(n, 1, 3, 150, 500, &err), 500, "another row has its own stack");
  cr_expect_eq(pd_nest_end(n, 1, 2, 497, 498, &err), 497, "1 ns inside a 1 ns gap: length 0");
  cr_expect_eq(pd_nest_end(n, 1, 2, 400, 600, &err), 600, "a partial overlap is left as it is");
  cr_expect_eq(pd_nest_end(n, 1, 2, 700, 700, &err), 700, "zero length");
  cr_expect_eq(pd_nest_end(n, 1, 2, 700, 800, &err), 800, "the old stack closed before 700");
  cr_expect_eq(pd_nest_end(n, 1, 2, 800, 900, &err), 900, "a sibling that starts at the end");
  cr_expect_eq(pd_nest_end(NULL, 1, 2, 5, 3, &err), 5, "no guard, and an end before the start");
  cr_expect_eq(err, 0);
  for (uint32_t row = 0; row < 100; row++) /* more rows than the first table holds */
    cr_expect_eq(pd_nest_end(n, row, row, 0, 10, &err), 10);
  cr_expect_eq(pd_nest_end(n, 7, 7, 0, 10, &err), 9);
  cr_expect_eq(err, 0);
  pd_nest_destroy(n);
  pd_nest_destroy(NULL);
}

/* Ops run back to back on a stream (the next starts on the nanosecond the last ended, or
 * sooner than the padding): each op's spans end before the next op's work, never reach
 * into it, and never short of their own work; spans of sibling ops do not overlap. */
static pd_event_t kern(int64_t start, int64_t end, uint64_t corr) {
  pd_event_t k = ev(PD_EVENT_KERNEL, 0, start, end, "k", corr);
  k.pid = 0;
  return k;
}

/* Layout: step > train_step > {a > a.mm, b} on thread 10; kernels a.mm: corr 1, b: corr 2. */
static pd_links_t *two_ops(uint64_t *ia, uint64_t *im, uint64_t *ib) {
  pd_links_t *l = pd_links_create();
  cr_assert_not_null(l);
  pd_event_t step = ev(PD_EVENT_RANGE, 10, 0, 1000, "ProfilerStep#0", 0);
  step.u.range.step = 0;
  pd_event_t ts = ev(PD_EVENT_RANGE, 10, 1, 900, "train_step", 0);
  pd_event_t a = ev(PD_EVENT_RANGE, 10, 10, 100, "a", 0), mm = ev(PD_EVENT_RANGE, 10, 20, 90, "aten::mm", 0);
  pd_event_t b = ev(PD_EVENT_RANGE, 10, 200, 300, "b", 0);
  pd_links_range(l, &step);
  pd_links_range(l, &ts);
  *ia = pd_links_range(l, &a);
  *im = pd_links_range(l, &mm);
  pd_event_t c1 = ev(PD_EVENT_RUNTIME, 10, 30, 35, "cudaLaunchKernel", 1);
  cr_expect_eq(pd_links_call(l, &c1), *im);
  *ib = pd_links_range(l, &b);
  pd_event_t c2 = ev(PD_EVENT_RUNTIME, 10, 210, 215, "cudaLaunchKernel", 2);
  cr_expect_eq(pd_links_call(l, &c2), *ib);
  return l;
}

/* The spans as (ext id -> start, end). */
static void span_of(const pd_gpu_span_t *sp, int64_t n, uint64_t id, int64_t *start, int64_t *end) {
  *start = *end = -1;
  for (int64_t i = 0; i < n; i++)
    if (sp[i].ext_id == id) *start = sp[i].start_ns, *end = sp[i].end_ns;
}

Test(trace_links, span_depth_counts_the_spans_that_end_between_two_activities) {
  uint64_t ia, im, ib;
  pd_links_t *l = two_ops(&ia, &im, &ib);
  pd_event_t k1 = kern(1000, 2000, 1), k2 = kern(2000, 3000, 2), lost = kern(0, 1, 99);
  cr_expect_eq(pd_links_span_depth(l, &k1, NULL), 3, "aten::mm, a, train_step; the step gets none");
  cr_expect_eq(pd_links_span_depth(l, &k1, &k2), 2, "aten::mm and a end there; train_step holds both");
  cr_expect_eq(pd_links_span_depth(l, &k2, &k1), 1);
  cr_expect_eq(pd_links_span_depth(l, &k1, &k1), 0, "the same range's next work: nothing ends");
  cr_expect_eq(pd_links_span_depth(l, &k1, &lost), 3, "next not linked: all that hold it");
  cr_expect_eq(pd_links_span_depth(l, &lost, &k1), 0);
  pd_event_t sy = k1;
  sy.kind = PD_EVENT_SYNC;
  cr_expect_eq(pd_links_span_depth(l, &sy, NULL), 0, "a sync is held by no span");
  cr_expect_eq(pd_links_span_depth(NULL, &k1, NULL), 0);
  pd_links_destroy(l);
}

Test(trace_links, zero_gap_spans_end_on_their_work_not_in_the_next) {
  uint64_t ia, im, ib;
  pd_links_t *l = two_ops(&ia, &im, &ib);
  pd_event_t k1 = kern(1000, 2000, 1), k2 = kern(2000, 3000, 2);
  pd_links_activity(l, &k1);
  pd_links_activity(l, &k2);
  const pd_gpu_span_t *sp = NULL;
  int64_t n = pd_links_gpu_spans(l, &sp), s, e;
  cr_assert_eq(n, 4, "train_step, a, aten::mm, b");
  span_of(sp, n, im, &s, &e);
  cr_expect(s == 1000 && e == 2000, "aten::mm: no room to pad, ends on its work: %lld-%lld", (long long)s, (long long)e);
  span_of(sp, n, ia, &s, &e);
  cr_expect(s == 1000 && e == 2000, "a: %lld-%lld", (long long)s, (long long)e);
  span_of(sp, n, ib, &s, &e);
  cr_expect(s == 2000 && e == 3001, "b starts on its work, not after the padded a: %lld-%lld", (long long)s,
            (long long)e);
  cr_expect_eq(sp[0].end_ns, 3002, "train_step holds both, padded past b");
  pd_links_destroy(l);
}

Test(trace_links, gap_smaller_than_the_padding_pads_less) {
  uint64_t ia, im, ib;
  pd_links_t *l = two_ops(&ia, &im, &ib);
  pd_event_t k1 = kern(1000, 2000, 1), k2 = kern(2003, 3000, 2); /* room for 2 ends before 2003 */
  pd_links_activity(l, &k1);
  pd_links_activity(l, &k2);
  const pd_gpu_span_t *sp = NULL;
  int64_t n = pd_links_gpu_spans(l, &sp), s, e;
  cr_assert_eq(n, 4);
  span_of(sp, n, im, &s, &e);
  cr_expect_eq(e, 2001, "aten::mm: 1 ns past its work, as with room");
  span_of(sp, n, ia, &s, &e);
  cr_expect_eq(e, 2002, "a: 1 ns before b's work, not on it");
  span_of(sp, n, ib, &s, &e);
  cr_expect_eq(s, 2003);
  /* the spans of the two siblings do not overlap */
  int64_t as, ae;
  span_of(sp, n, ia, &as, &ae);
  cr_expect_leq(ae, s);
  pd_links_destroy(l);
}

/* Nested ranges whose work runs back to back: the inner op's spans end before the outer
 * op's next work, the outer span holds all of it and is padded past its last. */
Test(trace_links, nested_ranges_back_to_back_stay_nested) {
  pd_links_t *l = pd_links_create();
  pd_event_t outer = ev(PD_EVENT_RANGE, 10, 0, 500, "conv1.forward", 0);
  pd_event_t inner = ev(PD_EVENT_RANGE, 10, 10, 100, "aten::mm", 0);
  uint64_t io = pd_links_range(l, &outer), ii = pd_links_range(l, &inner);
  pd_event_t c1 = ev(PD_EVENT_RUNTIME, 10, 20, 25, "cudaLaunchKernel", 1);
  cr_expect_eq(pd_links_call(l, &c1), ii);
  pd_event_t c2 = ev(PD_EVENT_RUNTIME, 10, 200, 205, "cudaLaunchKernel", 2);
  cr_expect_eq(pd_links_call(l, &c2), io);
  pd_event_t k1 = kern(1000, 2000, 1), k2 = kern(2000, 2500, 2); /* mm's GEMM, then conv's own */
  cr_expect_eq(pd_links_span_depth(l, &k1, &k2), 1, "only aten::mm ends between them");
  pd_links_activity(l, &k1);
  pd_links_activity(l, &k2);
  /* the same range's work again after another's: its span holds what lies between */
  pd_event_t c3 = ev(PD_EVENT_RUNTIME, 10, 30, 35, "cudaLaunchKernel", 3);
  pd_event_t c4 = ev(PD_EVENT_RUNTIME, 10, 300, 305, "cudaLaunchKernel", 4);
  pd_links_call(l, &c3); /* closed ranges popped: both link to conv1.forward */
  pd_links_call(l, &c4);
  const pd_gpu_span_t *sp = NULL;
  int64_t n = pd_links_gpu_spans(l, &sp), s, e;
  cr_assert_eq(n, 2);
  span_of(sp, n, ii, &s, &e);
  cr_expect(s == 1000 && e == 2000, "aten::mm ends by conv's next work: %lld-%lld", (long long)s, (long long)e);
  span_of(sp, n, io, &s, &e);
  cr_expect(s == 1000 && e == 2501, "conv1.forward: 1 ns past its own last work: %lld-%lld", (long long)s, (long long)e);
  pd_links_destroy(l);
}

/* A range's work, another range's, then the first's again (two threads on one stream):
 * the first span must hold its later work, so it reaches over the other's. */
Test(trace_links, interleaved_work_keeps_every_span_around_its_own) {
  pd_links_t *l = pd_links_create();
  pd_event_t a = ev(PD_EVENT_RANGE, 10, 0, 500, "a", 0), b = ev(PD_EVENT_RANGE, 20, 0, 500, "b", 0);
  uint64_t ia = pd_links_range(l, &a), ib = pd_links_range(l, &b);
  pd_event_t ca1 = ev(PD_EVENT_RUNTIME, 10, 10, 12, "cudaLaunchKernel", 1);
  pd_event_t cb = ev(PD_EVENT_RUNTIME, 20, 11, 13, "cudaLaunchKernel", 2);
  pd_event_t ca2 = ev(PD_EVENT_RUNTIME, 10, 14, 16, "cudaLaunchKernel", 3);
  pd_links_call(l, &ca1);
  pd_links_call(l, &cb);
  pd_links_call(l, &ca2);
  pd_event_t k1 = kern(100, 200, 1), k2 = kern(200, 300, 2), k3 = kern(300, 400, 3);
  pd_links_activity(l, &k1);
  pd_links_activity(l, &k2);
  pd_links_activity(l, &k3);
  const pd_gpu_span_t *sp = NULL;
  int64_t n = pd_links_gpu_spans(l, &sp), s, e;
  cr_assert_eq(n, 2);
  span_of(sp, n, ia, &s, &e);
  cr_expect(s == 100 && e == 401, "a: %lld-%lld", (long long)s, (long long)e);
  span_of(sp, n, ib, &s, &e);
  cr_expect(s == 200 && e == 300, "b inside a, not into a's next work: %lld-%lld", (long long)s, (long long)e);
  pd_links_destroy(l);
}
