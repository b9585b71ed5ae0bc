/* accept_profiler.c: the CUPTI profiler against a workload with known contents (GPU).
 *
 * The workload (workload.cu) issues exactly A allocations, M copies, K memsets and N busy
 * kernels per run; the profiler must report exactly those, link every GPU activity to
 * the runtime call that issued it, place GPU and host events on one timeline, agree with
 * CUDA-event timing of the kernels within 10%, drop nothing, and write a trace that
 * parses. It also checks that another CUPTI subscriber makes pd_prof_create() fail with
 * PD_ECUPTI_BUSY. This test includes <cupti.h> only to play that other subscriber.
 *
 * PD_ACCEPT_KEEP_DIR=<dir> keeps the written trace there (otherwise a temp dir is removed).
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <cupti.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pd/pd_prof.h"
#include "pd/pd_writers.h"
#include "workload.h"

static const pd_wl_spec_t k_spec = {
    .allocs = 3, .h2d = 4, .d2h = 3, .memsets = 5, .kernels = 20, .kernel_us = 80};

/* What the trace-ready callback found in a cycle. */
typedef struct {
  int cycles;
  int kernels, h2d, d2h, memsets, mem_alloc, mem_free, runtime, sync;
  int kernels_unlinked, copies_unlinked, sync_unlinked;
  int h2d_bad_bytes, d2h_bad_bytes, memset_bad_bytes;
  int alloc_seen[PD_WL_MAX_ALLOCS];
  int alloc_unexpected;
  int64_t kernel_ns_sum;
  int64_t step_start, step_end;
  int step_ranges;
  int gpu_outside_step, host_outside_step;
  int runtime_foreign_tid;
  uint32_t main_tid;
  int user_ranges;
  uint64_t dropped;
  size_t devices;
  int device_sms;
  char device_name[256];
  int write_rc;
  char trace_path[600];
} seen_t;

static bool is_gpu(pd_event_kind_t k) {
  return k == PD_EVENT_KERNEL || k == PD_EVENT_MEMCPY || k == PD_EVENT_MEMSET;
}

/* Returns the runtime event with this correlation id, or NULL. */
static const pd_event_t *runtime_of(const pd_event_t *ev, size_t n, uint64_t corr) {
  for (size_t i = 0; i < n; i++)
    if (ev[i].kind == PD_EVENT_RUNTIME && ev[i].correlation_id == corr) return &ev[i];
  return NULL;
}

static int analyse_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  seen_t *s = user;
  s->cycles++;
  size_t n = pd_trace_count(cycle);
  const pd_event_t *ev = pd_trace_events(cycle);
  s->dropped = pd_trace_dropped(cycle);
  s->devices = pd_trace_device_count(cycle);
  if (s->devices > 0) {
    s->device_sms = pd_trace_devices(cycle)[0].num_sms;
    snprintf(s->device_name, sizeof(s->device_name), "%s", pd_trace_devices(cycle)[0].name);
  }
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind == PD_EVENT_RANGE && ev[i].u.range.step >= 0) {
      s->step_ranges++;
      s->step_start = ev[i].start_ns;
      s->step_end = ev[i].end_ns;
    } else if (ev[i].kind == PD_EVENT_RANGE) {
      s->user_ranges++;
    }
  }
  for (size_t i = 0; i < n; i++) {
    const pd_event_t *e = &ev[i];
    switch (e->kind) {
      case PD_EVENT_KERNEL:
        if (strcmp(e->name, PD_WL_KERNEL_NAME) != 0) break;
        s->kernels++;
        s->kernel_ns_sum += e->end_ns - e->start_ns;
        {
          const pd_event_t *rt = runtime_of(ev, n, e->correlation_id);
          if (e->correlation_id == 0 || rt == NULL || strncmp(rt->name, "cudaLaunch", 10) != 0)
            s->kernels_unlinked++;
        }
        break;
      case PD_EVENT_MEMCPY:
        if (e->u.memcpy.copy_kind == PD_MEMCPY_HTOD) {
          s->h2d++;
          s->h2d_bad_bytes += e->u.memcpy.bytes != PD_WL_COPY_BYTES;
        } else if (e->u.memcpy.copy_kind == PD_MEMCPY_DTOH) {
          s->d2h++;
          s->d2h_bad_bytes += e->u.memcpy.bytes != PD_WL_COPY_BYTES;
        }
        if (runtime_of(ev, n, e->correlation_id) == NULL) s->copies_unlinked++;
        break;
      case PD_EVENT_MEMSET:
        s->memsets++;
        s->memset_bad_bytes += e->u.memset.bytes != PD_WL_MEMSET_BYTES;
        if (runtime_of(ev, n, e->correlation_id) == NULL) s->copies_unlinked++;
        break;
      case PD_EVENT_MEMORY:
        if (e->u.memory.mem_kind != PD_MEM_DEVICE) break;
        if (e->u.memory.bytes > 0) {
          s->mem_alloc++;
          int hit = 0;
          for (int a = 0; a < k_spec.allocs; a++)
            if ((size_t)e->u.memory.bytes == pd_wl_alloc_bytes(a)) {
              s->alloc_seen[a]++;
              hit = 1;
            }
          s->alloc_unexpected += !hit;
        } else {
          s->mem_free++;
        }
        break;
      case PD_EVENT_RUNTIME:
        s->runtime++;
        if (e->tid != s->main_tid) s->runtime_foreign_tid++;
        break;
      case PD_EVENT_SYNC:
        s->sync++;
        if (e->tid != s->main_tid) s->sync_unlinked++;
        break;
      default:
        break;
    }
    /* One timeline: the step's work lies inside its ProfilerStep range. GPU timestamps are
     * CUPTI's interpolation onto our clock, so allow them 200 us. */
    if (s->step_ranges == 1) {
      const int64_t slack = is_gpu(e->kind) ? 200000 : 0;
      bool outside = e->start_ns < s->step_start - slack || e->end_ns > s->step_end + slack;
      if (outside && is_gpu(e->kind)) s->gpu_outside_step++;
      bool host = e->kind == PD_EVENT_RUNTIME || (e->kind == PD_EVENT_RANGE && e->u.range.step < 0);
      if (outside && host) s->host_outside_step++;
    }
  }

  /* The trace file: written and parseable. */
  const char *keep = getenv("PD_ACCEPT_KEEP_DIR");
  char dir[512];
  if (keep != NULL && keep[0] != '\0') {
    snprintf(dir, sizeof(dir), "%s", keep);
    mkdir(dir, 0755);
  } else {
    snprintf(dir, sizeof(dir), "/tmp/pd_accept_prof_XXXXXX");
    if (mkdtemp(dir) == NULL) {
      s->write_rc = PD_EIO;
      return 0;
    }
  }
  snprintf(s->trace_path, sizeof(s->trace_path), "%s/accept_profiler.pt.trace.json", dir);
  pd_trace_meta_t meta = {.trace_name = "accept_profiler",
                          .unix_offset_ns = pd_clock_unix_offset_ns(),
                          .pid = (uint32_t)getpid(),
                          .profile_memory = true};
  s->write_rc = pd_trace_write_file(s->trace_path, cycle, &meta);
  (void)prof;
  return 0;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  if (buf != NULL && fread(buf, 1, (size_t)len, f) != (size_t)len) {
    free(buf);
    buf = NULL;
  }
  if (buf != NULL) buf[len] = '\0';
  fclose(f);
  return buf;
}

Test(profiler_gpu, exact_counts_links_timing_and_trace) {
  char err[512];
  pd_wl_t *wl = pd_wl_setup(err, sizeof(err));
  cr_assert_not_null(wl, "workload setup: %s", err);
  seen_t s = {.main_tid = (uint32_t)syscall(SYS_gettid)};
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.profile_memory = true;
  cfg.schedule = (pd_schedule_t){.wait = 0, .warmup = 1, .active = 1, .repeat = 1};
  cfg.on_trace_ready = analyse_cb;
  cfg.user = &s;
  pd_prof_t *p = NULL;
  int rc = pd_prof_create(&cfg, &p);
  cr_assert_eq(rc, 0, "pd_prof_create: %s: %s", pd_err_name(rc), pd_prof_last_error(NULL));
  cr_assert_eq(pd_prof_start(p), 0, "%s", pd_prof_last_error(p));
  double ms_warm = 0, ms = 0;
  /* step 0: warmup, traced then discarded: a run whose records must not be counted */
  cr_assert_eq(pd_wl_run(wl, &k_spec, &ms_warm, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(pd_prof_step(p), 0, "%s", pd_prof_last_error(p));
  /* step 1: recorded and saved */
  cr_assert_eq(pd_range_push("workload"), 0);
  cr_assert_eq(pd_wl_run(wl, &k_spec, &ms, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_prof_step(p), 0, "%s", pd_prof_last_error(p));
  cr_assert_eq(pd_prof_stop(p), 0, "%s", pd_prof_last_error(p));
  uint64_t dropped = pd_prof_dropped_records(p);
  pd_prof_destroy(p);
  pd_wl_teardown(wl);

  cr_assert_eq(s.cycles, 1);
  cr_expect_eq(s.step_ranges, 1, "ProfilerStep ranges: %d", s.step_ranges);
  cr_expect_eq(s.user_ranges, 1);
  cr_expect_eq(s.kernels, k_spec.kernels, "kernels %d", s.kernels);
  cr_expect_eq(s.h2d, k_spec.h2d, "HtoD copies %d", s.h2d);
  cr_expect_eq(s.d2h, k_spec.d2h, "DtoH copies %d", s.d2h);
  cr_expect_eq(s.memsets, k_spec.memsets, "memsets %d", s.memsets);
  cr_expect_eq(s.h2d_bad_bytes + s.d2h_bad_bytes + s.memset_bad_bytes, 0, "wrong byte counts");
  cr_expect_eq(s.mem_alloc, k_spec.allocs, "device allocations %d", s.mem_alloc);
  cr_expect_eq(s.mem_free, k_spec.allocs, "device frees %d", s.mem_free);
  cr_expect_eq(s.alloc_unexpected, 0);
  for (int a = 0; a < k_spec.allocs; a++)
    cr_expect_eq(s.alloc_seen[a], 1, "allocation of %zu bytes seen %d times", pd_wl_alloc_bytes(a),
                 s.alloc_seen[a]);
  cr_expect_eq(s.kernels_unlinked, 0, "kernels without their launch call: %d", s.kernels_unlinked);
  cr_expect_eq(s.copies_unlinked, 0, "copies/memsets without their runtime call: %d", s.copies_unlinked);
  cr_expect_gt(s.runtime, k_spec.kernels);
  cr_expect_eq(s.runtime_foreign_tid, 0, "runtime calls with a tid other than gettid()");
  cr_expect_gt(s.sync, 0, "no synchronization records");
  cr_expect_eq(s.sync_unlinked, 0, "sync records not linked to the calling thread: %d", s.sync_unlinked);
  cr_expect_eq(s.gpu_outside_step, 0, "GPU events outside the step range: %d", s.gpu_outside_step);
  cr_expect_eq(s.host_outside_step, 0, "host events outside the step range: %d", s.host_outside_step);
  cr_expect_eq(s.dropped, 0u);
  cr_expect_eq(dropped, 0u);
  cr_expect_eq(s.devices, 1u);
  cr_expect_gt(s.device_sms, 0);
  double sum_ms = (double)s.kernel_ns_sum / 1e6;
  double rel = fabs(sum_ms - ms) / ms;
  cr_log_info("device %s: %d kernels, CUPTI sum %.3f ms, CUDA events %.3f ms (%.2f%% apart)",
              s.device_name, s.kernels, sum_ms, ms, 100.0 * rel);
  cr_expect_leq(rel, 0.10, "kernel time: CUPTI %.3f ms vs events %.3f ms", sum_ms, ms);

  cr_assert_eq(s.write_rc, 0, "pd_trace_write_file: %s", pd_err_name(s.write_rc));
  char *text = slurp(s.trace_path);
  cr_assert_not_null(text, "cannot read %s", s.trace_path);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "trace %s is not JSON", s.trace_path);
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  cr_assert(cJSON_IsArray(events));
  int kernels_in_file = 0, step_in_file = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (cJSON_IsString(cat) && strcmp(cat->valuestring, "kernel") == 0 && cJSON_IsString(name) &&
        strcmp(name->valuestring, PD_WL_KERNEL_NAME) == 0)
      kernels_in_file++;
    if (cJSON_IsString(name) && strcmp(name->valuestring, "ProfilerStep#1") == 0) step_in_file++;
  }
  cr_expect_eq(kernels_in_file, k_spec.kernels);
  cr_expect_eq(step_in_file, 1);
  cr_expect(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "deviceProperties")));
  cJSON_Delete(root);
  free(text);
  if (getenv("PD_ACCEPT_KEEP_DIR") == NULL) {
    remove(s.trace_path);
    char *slash = strrchr(s.trace_path, '/');
    *slash = '\0';
    rmdir(s.trace_path);
  }
}

/* Counts workload kernels per cycle. */
static int count_kernels_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  int *counts = user;
  int k = 0;
  const pd_event_t *ev = pd_trace_events(cycle);
  for (size_t i = 0; i < pd_trace_count(cycle); i++)
    k += ev[i].kind == PD_EVENT_KERNEL && strcmp(ev[i].name, PD_WL_KERNEL_NAME) == 0;
  counts[1 + counts[0] % 7] = k;
  counts[0]++;
  return 0;
}

Test(profiler_gpu, untraced_steps_record_nothing_and_stop_hands_over) {
  char err[512];
  pd_wl_t *wl = pd_wl_setup(err, sizeof(err));
  cr_assert_not_null(wl, "workload setup: %s", err);
  int counts[8] = {0};
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.schedule = (pd_schedule_t){.skip_first = 1, .wait = 1, .warmup = 0, .active = 4, .repeat = 1};
  cfg.on_trace_ready = count_kernels_cb;
  cfg.user = counts;
  pd_prof_t *p = NULL;
  int rc = pd_prof_create(&cfg, &p);
  cr_assert_eq(rc, 0, "pd_prof_create: %s", pd_prof_last_error(NULL));
  cr_assert_eq(pd_prof_start(p), 0);
  const int per_step[4] = {7, 11, 13, 2};
  double ms;
  for (int step = 0; step < 4; step++) {
    pd_wl_spec_t spec = {.kernels = per_step[step], .kernel_us = 20};
    cr_assert_eq(pd_wl_run(wl, &spec, &ms, err, sizeof(err)), 0, "%s", err);
    if (step < 3) cr_assert_eq(pd_prof_step(p), 0, "%s", pd_prof_last_error(p));
  }
  /* Steps 0 (skip) and 1 (wait) are untraced; 2 and 3 are recorded; stop in step 3
   * (before the cycle's end at step 5) flushes with the forced flag and hands over. */
  cr_assert_eq(pd_prof_stop(p), 0, "%s", pd_prof_last_error(p));
  pd_prof_destroy(p);
  pd_wl_teardown(wl);
  cr_assert_eq(counts[0], 1);
  cr_expect_eq(counts[1], per_step[2] + per_step[3], "kernels in the cycle: %d", counts[1]);
}

Test(profiler_gpu, cycles_repeat_with_cupti_detached_between) {
  /* wait=1: CUPTI is detached in every wait step and attached again at the warmup step;
   * each of the three cycles must still hold exactly its own step's kernels. */
  char err[512];
  pd_wl_t *wl = pd_wl_setup(err, sizeof(err));
  cr_assert_not_null(wl, "workload setup: %s", err);
  int counts[8] = {0};
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.schedule = (pd_schedule_t){.wait = 1, .warmup = 1, .active = 1, .repeat = 3};
  cfg.on_trace_ready = count_kernels_cb;
  cfg.user = counts;
  pd_prof_t *p = NULL;
  int rc = pd_prof_create(&cfg, &p);
  cr_assert_eq(rc, 0, "pd_prof_create: %s", pd_prof_last_error(NULL));
  cr_assert_eq(pd_prof_start(p), 0);
  double ms;
  for (int step = 0; step < 10; step++) {
    pd_wl_spec_t spec = {.kernels = 3 + step, .kernel_us = 10};
    cr_assert_eq(pd_wl_run(wl, &spec, &ms, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(pd_prof_step(p), 0, "step %d: %s", step, pd_prof_last_error(p));
  }
  cr_assert_eq(pd_prof_stop(p), 0, "%s", pd_prof_last_error(p));
  cr_expect_eq(pd_prof_dropped_records(p), 0u);
  cr_expect(strncmp(pd_prof_last_error(p), "warning", 7) != 0, "%s", pd_prof_last_error(p));
  pd_prof_destroy(p);
  pd_wl_teardown(wl);
  cr_assert_eq(counts[0], 3);
  /* recorded steps 2, 5, 8 ran 5, 8 and 11 kernels */
  cr_expect_eq(counts[1], 5);
  cr_expect_eq(counts[2], 8);
  cr_expect_eq(counts[3], 11);
}

static void CUPTIAPI other_tool_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                   const void *data) {}

Test(profiler_gpu, another_cupti_subscriber_means_busy) {
  CUpti_SubscriberHandle other = NULL;
  CUptiResult r = cuptiSubscribe(&other, other_tool_cb, NULL);
  cr_assert_eq(r, CUPTI_SUCCESS, "the test's own subscription failed (%d)", (int)r);
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  pd_prof_t *p = NULL;
  int rc = pd_prof_create(&cfg, &p);
  cr_expect_eq(rc, PD_ECUPTI_BUSY, "rc %s: %s", pd_err_name(rc), pd_prof_last_error(NULL));
  cr_expect_null(p);
  cr_expect(strstr(pd_prof_last_error(NULL), "CUPTI") != NULL, "%s", pd_prof_last_error(NULL));
  cr_log_info("busy message: %s", pd_prof_last_error(NULL));
  cr_assert_eq(cuptiUnsubscribe(other), CUPTI_SUCCESS);
  rc = pd_prof_create(&cfg, &p);
  cr_expect_eq(rc, 0, "after the other tool left: %s: %s", pd_err_name(rc), pd_prof_last_error(NULL));
  pd_prof_destroy(p);
}
