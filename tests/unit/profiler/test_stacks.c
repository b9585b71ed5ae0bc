/* Host call stacks (with_stack): capture, symbolization to function, file and line from
 * this test binary's own DWARF, the range API's frames left out, the cache, and stacks
 * carried by ranges through the real profiler from several threads. No GPU needed. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_prof.h"
#include "stacks.h"

/* The line each probe's call sits on, set by the probe itself. */
static int g_capture_line, g_push_line, g_thread_push_line;

__attribute__((noinline)) static int stack_probe_inner(void **pcs, int max) {
  g_capture_line = __LINE__ + 1;
  int n = pd_stack_capture(pcs, max);
  __asm__ volatile("" ::: "memory"); /* keep the call from becoming a tail call */
  return n;
}

__attribute__((noinline)) static int stack_probe_outer(void **pcs, int max) {
  int n = stack_probe_inner(pcs, max);
  __asm__ volatile("" ::: "memory");
  return n;
}

/* Returns the frame text at index k of a ';'-joined stack (static buffer). */
static const char *nth_frame(const char *stack, int k) {
  static char buf[1024];
  const char *s = stack;
  for (int i = 0; i < k && s != NULL; i++) {
    s = strchr(s, ';');
    if (s != NULL) s++;
  }
  if (s == NULL) return "";
  size_t n = strcspn(s, ";");
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  return buf;
}

static bool frame_is(const char *frame, const char *function, int line) {
  char want[256];
  snprintf(want, sizeof want, "test_stacks.c(%d): %s", line, function);
  size_t fl = strlen(frame), wl = strlen(want);
  return fl >= wl && strcmp(frame + fl - wl, want) == 0 && frame[0] == '/';
}

Test(stacks, capture_and_symbolize_names_function_file_and_line) {
  void *pcs[PD_STACK_MAX_PCS];
  int n = stack_probe_outer(pcs, PD_STACK_MAX_PCS);
  cr_assert_geq(n, 3, "at least capture, inner and outer: %d", n);

  pd_symbolizer_t *s = pd_symbolizer_create();
  cr_assert_not_null(s);
  char *buf = NULL;
  size_t cap = 0;
  int len = pd_symbolizer_stack_text(s, pcs, n, &buf, &cap);
  cr_assert_gt(len, 0);
  cr_assert_eq((size_t)len, strlen(buf));
  /* pd_stack_capture's own frame is left out: the probe is the first frame */
  const char *f0 = nth_frame(buf, 0);
  cr_expect(frame_is(f0, "stack_probe_inner", g_capture_line), "first frame '%s' (line %d)", f0,
            g_capture_line);
  const char *f1 = nth_frame(buf, 1);
  cr_expect(frame_is(f1, "stack_probe_outer", g_capture_line + 6), "second frame '%s'", f1);
  cr_expect(strstr(buf, "capture_and_symbolize_names_function_file_and_line") != NULL, "test's own frame in '%s'",
            buf);

  /* One lookup per address, cached: the same pointer comes back. Which address is the
   * probe's depends on the unwinder and on whether the capture's own call was a tail call. */
  const pd_stack_frame_t *a = NULL, *b = NULL;
  int k = 0, na = 0;
  for (; k < n; k++) {
    na = pd_symbolizer_lookup(s, pcs[k], &a);
    cr_assert_geq(na, 1);
    if (a[0].function != NULL && strcmp(a[0].function, "stack_probe_inner") == 0) break;
  }
  cr_assert_lt(k, n, "no captured address is in stack_probe_inner");
  int nb = pd_symbolizer_lookup(s, pcs[k], &b);
  cr_expect_eq(na, nb);
  cr_expect_eq(a, b, "cached frames are reused");
  cr_expect_str_eq(a[0].function, "stack_probe_inner");
  cr_expect_eq(a[0].line, g_capture_line);
  cr_expect_not_null(strstr(a[0].file, "test_stacks.c"));
  free(buf);
  pd_symbolizer_destroy(s);
}

/* Returns the first k frames of a stack text (static buffer). */
static const char *first_frames(const char *stack, int k) {
  static char buf[4096];
  const char *end = stack;
  for (int i = 0; i < k && *end; i++) {
    if (i > 0 && *end == ';') end++;
    end += strcspn(end, ";");
  }
  snprintf(buf, sizeof buf, "%.*s", (int)(end - stack), stack);
  return buf;
}

Test(stacks, frame_pointer_walk_and_backtrace_agree_on_this_code) {
  pd_unwinder_t saved = pd_stack_unwinder();
  void *fp_pcs[PD_STACK_MAX_PCS], *bt_pcs[PD_STACK_MAX_PCS];
  pd_stack_set_unwinder(PD_UNWIND_FRAME_POINTER);
  int nfp = stack_probe_outer(fp_pcs, PD_STACK_MAX_PCS);
  pd_stack_set_unwinder(PD_UNWIND_BACKTRACE);
  int nbt = stack_probe_outer(bt_pcs, PD_STACK_MAX_PCS);
  pd_stack_set_unwinder(saved);
  cr_assert_geq(nfp, 3);
  cr_assert_geq(nbt, 3);
  pd_symbolizer_t *s = pd_symbolizer_create();
  cr_assert_not_null(s);
  char *a = NULL, *b = NULL;
  size_t ca = 0, cb = 0;
  cr_assert_gt(pd_symbolizer_stack_text(s, fp_pcs, nfp, &a, &ca), 0);
  cr_assert_gt(pd_symbolizer_stack_text(s, bt_pcs, nbt, &b, &cb), 0);
  /* the probe and its caller: the same frames, lines included; then this test (called
   * from two lines) */
  char want[4096];
  snprintf(want, sizeof want, "%s", first_frames(b, 2));
  cr_expect_str_eq(first_frames(a, 2), want);
  cr_expect_not_null(strstr(nth_frame(a, 2), "frame_pointer_walk_and_backtrace_agree_on_this_code"), "'%s'", a);
  cr_expect(frame_is(nth_frame(a, 0), "stack_probe_inner", g_capture_line), "'%s'", a);
  free(a);
  free(b);
  pd_symbolizer_destroy(s);
  /* no room: nothing written */
  pd_stack_set_unwinder(PD_UNWIND_FRAME_POINTER);
  cr_expect_eq(stack_probe_outer(fp_pcs, 0), 0);
  cr_expect_eq(stack_probe_outer(fp_pcs, 1), 1);
  pd_stack_set_unwinder(saved);
}

Test(stacks, address_outside_every_module_is_printed_raw) {
  pd_symbolizer_t *s = pd_symbolizer_create();
  cr_assert_not_null(s);
  const pd_stack_frame_t *f = NULL;
  cr_assert_eq(pd_symbolizer_lookup(s, (const void *)0x11, &f), 1);
  cr_expect_null(f[0].function);
  cr_expect_null(f[0].file);
  cr_expect_str_eq(f[0].text, "0x10", "looked up at pc - 1");
  /* a libc function (with or without its debug info installed) gets a function name */
  cr_assert_geq(pd_symbolizer_lookup(s, (const void *)((uintptr_t)&strlen + 1), &f), 1);
  cr_expect_not_null(f[0].function);
  pd_symbolizer_destroy(s);
}

Test(stacks, bad_arguments) {
  char *buf = NULL;
  size_t cap = 0;
  const pd_stack_frame_t *f = NULL;
  cr_expect_eq(pd_symbolizer_stack_text(NULL, NULL, 0, &buf, &cap), PD_EINVAL);
  cr_expect_eq(pd_symbolizer_lookup(NULL, NULL, &f), PD_EINVAL);
  cr_expect_eq(pd_stack_capture(NULL, 4), 0);
  void *pc[1];
  cr_expect_eq(pd_stack_capture(pc, 0), 0);
  pd_symbolizer_t *s = pd_symbolizer_create();
  cr_assert_not_null(s);
  cr_expect_eq(pd_symbolizer_stack_text(s, NULL, 0, &buf, &cap), 0, "no frames, empty text");
  cr_expect_eq(pd_symbolizer_stack_text(s, NULL, 2, &buf, &cap), PD_EINVAL);
  free(buf);
  pd_symbolizer_destroy(s);
  pd_symbolizer_destroy(NULL);
}

/* ---- through the profiler ---------------------------------------------------------- */

typedef struct {
  pthread_mutex_t lock;
  int ranges, with_stack;
  char first[8][1024]; /* the stacks of the ranges named "probe*" */
  int nfirst;
} seen_t;

static int seen_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  seen_t *s = user;
  const pd_event_t *ev = pd_trace_events(cycle);
  for (size_t i = 0; i < pd_trace_count(cycle); i++) {
    if (ev[i].kind != PD_EVENT_RANGE || strncmp(ev[i].name, "probe", 5) != 0) continue;
    s->ranges++;
    if (ev[i].u.range.stack == NULL) continue;
    s->with_stack++;
    if (s->nfirst < 8) snprintf(s->first[s->nfirst++], sizeof s->first[0], "%s", ev[i].u.range.stack);
  }
  return 0;
}

__attribute__((noinline)) static void push_probe(const char *name) {
  g_push_line = __LINE__ + 1;
  pd_range_push(name);
  __asm__ volatile("" ::: "memory");
  pd_range_pop();
}

__attribute__((noinline)) static void *thread_probe(void *arg) {
  for (int i = 0; i < 50; i++) {
    g_thread_push_line = __LINE__ + 1;
    pd_range_push("probe_thread");
    __asm__ volatile("" ::: "memory");
    pd_range_pop();
  }
  return arg;
}

static pd_prof_t *cpu_profiler(seen_t *seen, bool with_stack) {
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = PD_ACTIVITY_CPU;
  cfg.with_stack = with_stack;
  cfg.schedule = (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 0};
  cfg.on_trace_ready = seen_cb;
  cfg.user = seen;
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0);
  cr_assert_eq(pd_prof_start(p), 0);
  return p;
}

Test(stacks, ranges_carry_the_stack_of_the_code_that_opened_them) {
  seen_t seen = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pd_prof_t *p = cpu_profiler(&seen, true);
  push_probe("probe_main");
  cr_assert_eq(pd_prof_step(p), 0);
  pd_prof_destroy(p);
  cr_assert_eq(seen.ranges, 1);
  cr_assert_eq(seen.with_stack, 1);
  /* pd_range_push and pd_stack_capture are left out: the caller is the first frame */
  const char *f0 = nth_frame(seen.first[0], 0);
  cr_expect(frame_is(f0, "push_probe", g_push_line), "first frame '%s' (line %d) of '%s'", f0, g_push_line,
            seen.first[0]);
  cr_expect(strstr(seen.first[0], "pd_range_push") == NULL, "no range API frame in '%s'", seen.first[0]);
}

Test(stacks, repeated_stacks_share_one_text_and_different_ones_stay_apart) {
  seen_t seen = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pd_prof_t *p = cpu_profiler(&seen, true);
  for (int i = 0; i < 3; i++) push_probe("probe_loop"); /* one call site, three ranges */
  pd_range_push("probe_other");                          /* another call site */
  int other_line = __LINE__ - 1;
  pd_range_pop();
  cr_assert_eq(pd_prof_step(p), 0);
  pd_prof_destroy(p);
  cr_assert_eq(seen.with_stack, 4);
  cr_expect_str_eq(seen.first[0], seen.first[1]);
  cr_expect_str_eq(seen.first[1], seen.first[2]);
  cr_expect(frame_is(nth_frame(seen.first[0], 0), "push_probe", g_push_line), "'%s'", seen.first[0]);
  const char *f = nth_frame(seen.first[3], 0);
  cr_expect(frame_is(f, "stacks_repeated_stacks_share_one_text_and_different_ones_stay_apart_impl", other_line),
            "'%s'", f);
}

Test(stacks, off_by_default) {
  seen_t seen = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pd_prof_t *p = cpu_profiler(&seen, false);
  push_probe("probe_main");
  cr_assert_eq(pd_prof_step(p), 0);
  pd_prof_destroy(p);
  cr_expect_eq(seen.ranges, 1);
  cr_expect_eq(seen.with_stack, 0);
}

Test(stacks, ranges_from_several_threads_each_get_their_own_stack) {
  seen_t seen = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pd_prof_t *p = cpu_profiler(&seen, true);
  pthread_t th[4];
  for (int t = 0; t < 4; t++) cr_assert_eq(pthread_create(&th[t], NULL, thread_probe, NULL), 0);
  push_probe("probe_main");
  for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
  cr_assert_eq(pd_prof_step(p), 0);
  pd_prof_destroy(p);
  cr_assert_eq(seen.ranges, 4 * 50 + 1);
  cr_assert_eq(seen.with_stack, seen.ranges, "every range has a stack");
  int threads = 0;
  for (int i = 0; i < seen.nfirst; i++) {
    const char *f0 = nth_frame(seen.first[i], 0);
    if (strstr(f0, "thread_probe") == NULL) continue;
    threads++;
    cr_expect(frame_is(f0, "thread_probe", g_thread_push_line), "thread frame '%s'", f0);
  }
  cr_expect_gt(threads, 0, "a worker thread's stack starts in thread_probe");
}
