/* test_trace.c: the pd_trace_t container: interning, growth, stable sort, devices,
 * dropped count, kind categories and display names. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "pd/pd_event.h"
#include "pd_test_util.h"

static pd_event_t ev_at(pd_event_kind_t kind, int64_t start, int64_t end, const char *name) {
  pd_event_t e = pd_test_event(kind, start, end, name, 0);
  e.pid = e.tid = 0;
  return e;
}

Test(trace, intern_shares_equal_strings) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  char a[] = "volta_sgemm", b[] = "volta_sgemm";
  const char *ia = pd_trace_intern(t, a);
  const char *ib = pd_trace_intern(t, b);
  cr_assert_not_null(ia);
  cr_expect_eq(ia, ib, "equal strings must share one copy (%p vs %p)", (void *)ia, (void *)ib);
  cr_expect_neq((void *)ia, (void *)a, "the trace must own a copy");
  a[0] = 'X'; /* the caller's buffer changing must not change the interned copy */
  cr_expect_str_eq(ia, "volta_sgemm");
  cr_expect_neq(pd_trace_intern(t, "other"), ia);
  cr_expect_null(pd_trace_intern(t, NULL));
  cr_expect_null(pd_trace_intern(NULL, "x"));
  cr_expect_str_eq(pd_trace_intern(t, ""), "");
  pd_trace_destroy(t);
}

Test(trace, intern_many_and_long_strings_stay_valid) {
  pd_trace_t *t = pd_trace_create();
  const char *ptrs[5000];
  char buf[64];
  for (int i = 0; i < 5000; i++) {
    snprintf(buf, sizeof buf, "kernel_%d", i);
    ptrs[i] = pd_trace_intern(t, buf);
    cr_assert_not_null(ptrs[i]);
  }
  /* a string larger than an arena chunk */
  static char big[200000];
  memset(big, 'k', sizeof big - 1);
  const char *ibig = pd_trace_intern(t, big);
  cr_assert_not_null(ibig);
  cr_expect_eq(strlen(ibig), sizeof big - 1);
  for (int i = 0; i < 5000; i++) {
    snprintf(buf, sizeof buf, "kernel_%d", i);
    cr_expect_str_eq(ptrs[i], buf, "string %d moved or changed: %s", i, ptrs[i]);
    cr_expect_eq(pd_trace_intern(t, buf), ptrs[i]);
  }
  cr_expect_eq(pd_trace_intern(t, big), ibig);
  pd_trace_destroy(t);
}

Test(trace, add_copies_and_interns_names_and_shapes) {
  pd_trace_t *t = pd_trace_create();
  char name[] = "forward", shape[] = "[[64, 3, 32, 32]]";
  pd_event_t e = ev_at(PD_EVENT_RANGE, 10, 20, name);
  e.u.range.shape = shape;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  name[0] = 'X';
  shape[1] = 'X';
  cr_assert_eq(pd_trace_count(t), 1);
  const pd_event_t *got = pd_trace_events(t);
  cr_expect_str_eq(got[0].name, "forward");
  cr_expect_str_eq(got[0].u.range.shape, "[[64, 3, 32, 32]]");
  cr_expect_eq(got[0].start_ns, 10);
  cr_expect_eq(got[0].end_ns, 20);
  cr_expect_eq(got[0].name, pd_trace_intern(t, "forward"));
  cr_expect_eq(pd_trace_add(t, NULL), PD_EINVAL);
  cr_expect_eq(pd_trace_add(NULL, &e), PD_EINVAL);
  pd_trace_destroy(t);
}

Test(trace, grows_past_initial_capacity_and_adds_from_itself) {
  pd_trace_t *t = pd_trace_create();
  for (int i = 0; i < 100000; i++) {
    pd_event_t e = ev_at(PD_EVENT_KERNEL, i, i + 1, (i % 2) ? "odd" : "even");
    cr_assert_eq(pd_trace_add(t, &e), 0);
  }
  cr_assert_eq(pd_trace_count(t), 100000);
  /* adding an event that lives in the trace's own array, across a reallocation */
  size_t before = pd_trace_count(t);
  for (int i = 0; i < 40000; i++) cr_assert_eq(pd_trace_add(t, &pd_trace_events(t)[i]), 0);
  cr_assert_eq(pd_trace_count(t), before + 40000);
  const pd_event_t *ev = pd_trace_events(t);
  for (size_t i = 0; i < pd_trace_count(t); i++) {
    int64_t want = (int64_t)(i < before ? i : i - before);
    cr_assert_eq(ev[i].start_ns, want, "event %zu: start %lld, want %lld", i, (long long)ev[i].start_ns,
                 (long long)want);
    cr_assert_str_eq(ev[i].name, (want % 2) ? "odd" : "even");
  }
  pd_trace_destroy(t);
}

Test(trace, sort_is_stable_by_start) {
  pd_trace_t *t = pd_trace_create();
  /* starts 5,3,5,1,3,5,... with names carrying the insertion order */
  const int64_t starts[] = {5, 3, 5, 1, 3, 5, 0, 3, 9, 1};
  char name[16];
  for (int i = 0; i < 10; i++) {
    snprintf(name, sizeof name, "%d", i);
    pd_event_t e = ev_at(PD_EVENT_RUNTIME, starts[i], starts[i] + 1, name);
    pd_trace_add(t, &e);
  }
  pd_trace_sort(t);
  const char *want[] = {"6", "3", "9", "1", "4", "7", "0", "2", "5", "8"};
  const pd_event_t *ev = pd_trace_events(t);
  for (int i = 0; i < 10; i++)
    cr_expect_str_eq(ev[i].name, want[i], "position %d: got %s, want %s", i, ev[i].name, want[i]);
  pd_trace_destroy(t);
}

Test(trace, sort_large_reverse_and_already_sorted) {
  pd_trace_t *t = pd_trace_create();
  for (int i = 0; i < 50000; i++) {
    pd_event_t e = ev_at(PD_EVENT_KERNEL, (50000 - i) / 2, 0, NULL); /* pairs of equal starts */
    e.correlation_id = (uint64_t)i;
    pd_trace_add(t, &e);
  }
  pd_trace_sort(t);
  const pd_event_t *ev = pd_trace_events(t);
  for (size_t i = 1; i < pd_trace_count(t); i++) {
    cr_assert_leq(ev[i - 1].start_ns, ev[i].start_ns);
    if (ev[i - 1].start_ns == ev[i].start_ns)
      cr_assert_lt(ev[i - 1].correlation_id, ev[i].correlation_id, "equal starts lost insertion order at %zu", i);
  }
  pd_trace_sort(t); /* sorted input: unchanged */
  for (size_t i = 1; i < pd_trace_count(t); i++) cr_assert_leq(ev[i - 1].start_ns, ev[i].start_ns);
  pd_trace_sort(NULL);
  pd_trace_destroy(t);
}

Test(trace, reset_keeps_nothing_but_works_again) {
  pd_trace_t *t = pd_trace_create();
  pd_event_t e = ev_at(PD_EVENT_KERNEL, 1, 2, "k");
  pd_device_props_t d = {.id = 0, .name = "GPU"};
  pd_trace_add(t, &e);
  pd_trace_add_device(t, &d);
  pd_trace_set_dropped(t, 7);
  pd_trace_reset(t);
  cr_expect_eq(pd_trace_count(t), 0);
  cr_expect_eq(pd_trace_device_count(t), 0);
  cr_expect_eq(pd_trace_dropped(t), 0);
  cr_expect_eq(pd_trace_add(t, &e), 0);
  cr_expect_str_eq(pd_trace_events(t)[0].name, "k");
  cr_expect_eq(pd_trace_intern(t, "k"), pd_trace_events(t)[0].name);
  pd_trace_reset(NULL);
  pd_trace_destroy(t);
  pd_trace_destroy(NULL);
}

Test(trace, devices_and_dropped) {
  pd_trace_t *t = pd_trace_create();
  for (int i = 0; i < 9; i++) {
    pd_device_props_t d = {.id = i, .num_sms = 100 + i};
    snprintf(d.name, sizeof d.name, "GPU %d", i);
    cr_assert_eq(pd_trace_add_device(t, &d), 0);
  }
  cr_assert_eq(pd_trace_device_count(t), 9);
  cr_expect_eq(pd_trace_devices(t)[8].num_sms, 108);
  cr_expect_str_eq(pd_trace_devices(t)[3].name, "GPU 3");
  cr_expect_eq(pd_trace_add_device(t, NULL), PD_EINVAL);
  pd_trace_set_dropped(t, 12345);
  cr_expect_eq(pd_trace_dropped(t), 12345);
  cr_expect_eq(pd_trace_dropped(NULL), 0);
  cr_expect_eq(pd_trace_count(NULL), 0);
  cr_expect_null(pd_trace_events(NULL));
  cr_expect_null(pd_trace_events_mut(NULL));
  cr_expect_null(pd_trace_devices(NULL));
  cr_expect_eq(pd_trace_device_count(NULL), 0);
  pd_trace_destroy(t);
}

Test(trace, kind_categories_round_trip) {
  for (int k = 0; k < PD_EVENT_KIND_COUNT; k++) {
    const char *cat = pd_event_kind_category((pd_event_kind_t)k);
    cr_expect_eq(pd_event_kind_from_category(cat), k, "category %s", cat);
  }
  cr_expect_str_eq(pd_event_kind_category(PD_EVENT_KERNEL), "kernel");
  cr_expect_str_eq(pd_event_kind_category(PD_EVENT_RANGE), "user_annotation");
  cr_expect_str_eq(pd_event_kind_category((pd_event_kind_t)99), "unknown");
  cr_expect_eq(pd_event_kind_from_category("python_function"), -1);
  cr_expect_eq(pd_event_kind_from_category(NULL), -1);
}

Test(trace, display_names_follow_kineto) {
  char buf[96];
  pd_event_t e = ev_at(PD_EVENT_MEMCPY, 0, 1, NULL);
  e.u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  e.u.memcpy.src_kind = PD_MEM_PINNED;
  e.u.memcpy.dst_kind = PD_MEM_DEVICE;
  cr_expect_str_eq(pd_event_display_name(&e, buf, sizeof buf), "Memcpy HtoD (Pinned -> Device)");
  e.name = "whatever the source said";
  cr_expect_str_eq(pd_event_display_name(&e, buf, sizeof buf), "Memcpy HtoD (Pinned -> Device)");
  e.u.memcpy.copy_kind = PD_MEMCPY_UNKNOWN;
  cr_expect_str_eq(pd_event_display_name(&e, buf, sizeof buf), "whatever the source said");
  e.name = NULL;
  e.u.memcpy.src_kind = PD_MEM_UNKNOWN;
  e.u.memcpy.dst_kind = PD_MEM_UNKNOWN;
  cr_expect_str_eq(pd_event_display_name(&e, buf, sizeof buf), "Memcpy Unknown (Unknown -> Unknown)");
  pd_event_t s = ev_at(PD_EVENT_MEMSET, 0, 1, NULL);
  s.u.memset.dst_kind = PD_MEM_DEVICE;
  cr_expect_str_eq(pd_event_display_name(&s, buf, sizeof buf), "Memset (Device)");
  pd_event_t k = ev_at(PD_EVENT_KERNEL, 0, 1, "gemm");
  cr_expect_str_eq(pd_event_display_name(&k, buf, sizeof buf), "gemm");
  k.name = NULL;
  cr_expect_str_eq(pd_event_display_name(&k, buf, sizeof buf), "");
  cr_expect_str_eq(pd_event_display_name(NULL, buf, sizeof buf), "");
  cr_expect_str_eq(pd_memcpy_kind_name(PD_MEMCPY_DTOH), "DtoH");
  cr_expect_str_eq(pd_memcpy_kind_name(PD_MEMCPY_DTOD), "DtoD");
  cr_expect_str_eq(pd_memcpy_kind_name(PD_MEMCPY_HTOH), "HtoH");
  cr_expect_str_eq(pd_memcpy_kind_name(PD_MEMCPY_PTOP), "PtoP");
  cr_expect_str_eq(pd_mem_kind_name(PD_MEM_PAGEABLE), "Pageable");
  cr_expect_str_eq(pd_mem_kind_name(PD_MEM_MANAGED), "Managed");
}

/* The window's rule: events that start before the window go, and so does the GPU work
 * their calls launched, also where it ran inside the window; GPU work of kept calls, work
 * without a correlation id, and everything before `from` stay, in order. */
Test(trace, clip_window_drops_warmup_and_the_work_its_calls_launched) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  const pd_event_t evs[] = {
      pd_test_event(PD_EVENT_KERNEL, 0, 5, "before_from", 7),         /* index 0: before `from` */
      pd_test_event(PD_EVENT_RUNTIME, 6, 8, "cudaLaunchKernel", 7),   /* before the window (10) */
      pd_test_event(PD_EVENT_KERNEL, 10, 20, "early_kernel", 7),      /* its kernel, inside */
      pd_test_event(PD_EVENT_RUNTIME, 11, 12, "cudaLaunchKernel", 8),
      pd_test_event(PD_EVENT_DRIVER, 9, 10, "cuMemcpyHtoDAsync", 9),  /* before the window */
      pd_test_event(PD_EVENT_MEMCPY, 21, 25, NULL, 9),                /* its copy, inside */
      pd_test_event(PD_EVENT_KERNEL, 22, 30, "kept_kernel", 8),
      pd_test_event(PD_EVENT_RANGE, 8, 40, "warmup_range", 0),         /* starts before: goes */
      pd_test_event(PD_EVENT_MEMSET, 31, 32, NULL, 0),
  };
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) cr_assert_eq(pd_trace_add(t, &evs[i]), 0);
  cr_assert_eq(pd_trace_clip_window(t, 1, 10), 5);
  cr_assert_eq(pd_trace_count(t), 4);
  const pd_event_t *e = pd_trace_events(t);
  cr_expect_str_eq(e[0].name, "before_from");
  cr_expect_eq(e[1].kind, PD_EVENT_RUNTIME);
  cr_expect_eq(e[1].correlation_id, 8);
  cr_expect_str_eq(e[2].name, "kept_kernel");
  cr_expect_eq(e[3].kind, PD_EVENT_MEMSET);
  cr_expect_eq(pd_trace_clip_window(t, 0, 0), 0);
  cr_expect_eq(pd_trace_clip_window(t, 99, 1000), 0);
  cr_expect_eq(pd_trace_clip_window(NULL, 0, 0), PD_EINVAL);
  pd_trace_destroy(t);
}
