/* test_cupti_convert.c: CUPTI activity records built by hand, fed through cupti_source.c's
 * conversion switch (kineto's mock-record idea), without a GPU.
 *
 * This test includes <cupti.h> because it tests the one file that does; nothing else in
 * the project may.
 */
#include <criterion/criterion.h>
#include <cupti.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cupti_source.h"
#include "pd/pd_event.h"
#include "pd/pd_prof.h"

static pd_event_t convert(const void *rec, char *namebuf, size_t len) {
  pd_event_t ev;
  int rc = pd_cupti_record_to_event(rec, &ev, namebuf, len);
  cr_assert_eq(rc, 1, "record kind %d not converted (rc %d)", ((const CUpti_Activity *)rec)->kind, rc);
  return ev;
}

Test(cupti_convert, kernel_record) {
  CUpti_ActivityKernel10 k;
  memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 1000;
  k.end = 51000;
  k.deviceId = 1;
  k.contextId = 7;
  k.streamId = 13;
  k.gridX = 128;
  k.gridY = 2;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.registersPerThread = 32;
  k.staticSharedMemory = 4096;
  k.dynamicSharedMemory = 1024;
  k.correlationId = 4242;
  k.name = "pd_busy_kernel";
  char nb[256];
  pd_event_t ev = convert(&k, nb, sizeof(nb));
  cr_expect_eq(ev.kind, PD_EVENT_KERNEL);
  cr_expect_eq(ev.start_ns, 1000);
  cr_expect_eq(ev.end_ns, 51000);
  cr_expect_eq(ev.correlation_id, 4242u);
  cr_expect_str_eq(ev.name, "pd_busy_kernel");
  cr_expect_eq(ev.device, 1u);
  cr_expect_eq(ev.context, 7u);
  cr_expect_eq(ev.stream, 13u);
  cr_expect_eq(ev.u.kernel.grid[0], 128);
  cr_expect_eq(ev.u.kernel.grid[1], 2);
  cr_expect_eq(ev.u.kernel.grid[2], 1);
  cr_expect_eq(ev.u.kernel.block[0], 256);
  cr_expect_eq(ev.u.kernel.registers_per_thread, 32);
  cr_expect_eq(ev.u.kernel.static_smem_bytes, 4096);
  cr_expect_eq(ev.u.kernel.dynamic_smem_bytes, 1024);
  k.name = NULL;
  ev = convert(&k, nb, sizeof(nb));
  cr_expect_not_null(ev.name, "a nameless kernel still gets a name");
}

Test(cupti_convert, memcpy_and_memset_records) {
  CUpti_ActivityMemcpy6 m;
  memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.bytes = 1 << 20;
  m.start = 10;
  m.end = 20;
  m.streamId = 3;
  m.correlationId = 9;
  char nb[256];
  pd_event_t ev = convert(&m, nb, sizeof(nb));
  cr_expect_eq(ev.kind, PD_EVENT_MEMCPY);
  cr_expect_eq(ev.u.memcpy.bytes, 1u << 20);
  cr_expect_eq(ev.u.memcpy.copy_kind, PD_MEMCPY_HTOD);
  cr_expect_eq(ev.u.memcpy.src_kind, PD_MEM_PINNED);
  cr_expect_eq(ev.u.memcpy.dst_kind, PD_MEM_DEVICE);
  cr_expect_str_eq(ev.name, "Memcpy HtoD (Pinned -> Device)");
  cr_expect_eq(ev.correlation_id, 9u);
  cr_expect_eq(ev.stream, 3u);

  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  ev = convert(&m, nb, sizeof(nb));
  cr_expect_eq(ev.u.memcpy.copy_kind, PD_MEMCPY_DTOH);
  cr_expect_str_eq(ev.name, "Memcpy DtoH (Device -> Pageable)");

  CUpti_ActivityMemset4 s;
  memset(&s, 0, sizeof(s));
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 4096;
  s.start = 5;
  s.end = 6;
  s.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  s.correlationId = 11;
  ev = convert(&s, nb, sizeof(nb));
  cr_expect_eq(ev.kind, PD_EVENT_MEMSET);
  cr_expect_eq(ev.u.memset.bytes, 4096u);
  cr_expect_eq(ev.u.memset.dst_kind, PD_MEM_DEVICE);
  cr_expect_str_eq(ev.name, "Memset (Device)");
}

Test(cupti_convert, runtime_and_driver_api_records) {
  CUpti_ActivityAPI a;
  memset(&a, 0, sizeof(a));
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  a.start = 100;
  a.end = 103;
  a.processId = 77;
  a.threadId = 78;
  a.correlationId = 4242;
  a.returnValue = 0;
  char nb[256];
  pd_event_t ev = convert(&a, nb, sizeof(nb));
  cr_expect_eq(ev.kind, PD_EVENT_RUNTIME);
  cr_expect_str_eq(ev.name, "cudaLaunchKernel", "version suffix stripped");
  cr_expect_eq(ev.pid, 77u);
  cr_expect_eq(ev.tid, 78u);
  cr_expect_eq(ev.correlation_id, 4242u);
  cr_expect_eq(ev.u.api.cbid, (uint32_t)CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);

  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020;
  a.returnValue = 2;
  ev = convert(&a, nb, sizeof(nb));
  cr_expect_str_eq(ev.name, "cudaMemcpy");
  cr_expect_eq(ev.u.api.status, 2);

  a.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  a.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  ev = convert(&a, nb, sizeof(nb));
  cr_expect_eq(ev.kind, PD_EVENT_DRIVER);
  cr_expect_str_eq(ev.name, "cuLaunchKernel");
}

Test(cupti_convert, strip_version_suffix) {
  char a[] = "cudaLaunchKernel_v7000", b[] = "cudaLaunchKernel_ptsz_v7000", c[] = "my_var",
       d[] = "x_v", e[] = "plain";
  pd_cupti_strip_version_suffix(a);
  pd_cupti_strip_version_suffix(b);
  pd_cupti_strip_version_suffix(c);
  pd_cupti_strip_version_suffix(d);
  pd_cupti_strip_version_suffix(e);
  cr_expect_str_eq(a, "cudaLaunchKernel");
  cr_expect_str_eq(b, "cudaLaunchKernel_ptsz");
  cr_expect_str_eq(c, "my_var");
  cr_expect_str_eq(d, "x_v");
  cr_expect_str_eq(e, "plain");
}

Test(cupti_convert, sync_records_get_their_thread_from_the_runtime_call) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  CUpti_ActivityAPI a;
  memset(&a, 0, sizeof(a));
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  a.processId = 10;
  a.threadId = 11;
  a.correlationId = 500;
  a.start = 1;
  a.end = 2;
  cr_assert_eq(pd_cupti_convert_record(&a, t), 1);
  CUpti_ActivitySynchronization2 s;
  memset(&s, 0, sizeof(s));
  s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  s.start = 3;
  s.end = 9;
  s.correlationId = 500;
  s.streamId = 4;
  s.contextId = 1;
  cr_assert_eq(pd_cupti_convert_record(&s, t), 1);
  s.correlationId = 999; /* no runtime call in this trace */
  cr_assert_eq(pd_cupti_convert_record(&s, t), 1);
  cr_assert_eq(pd_cupti_link_sync(t), 0);
  const pd_event_t *ev = pd_trace_events(t);
  cr_assert_eq(pd_trace_count(t), 3u);
  cr_expect_eq(ev[1].kind, PD_EVENT_SYNC);
  cr_expect_eq(ev[1].u.sync.sync_kind, PD_SYNC_STREAM);
  cr_expect_str_eq(ev[1].name, "Stream Sync");
  cr_expect_eq(ev[1].stream, 4u);
  cr_expect_eq(ev[1].pid, 10u);
  cr_expect_eq(ev[1].tid, 11u);
  cr_expect_eq(ev[2].tid, 0u, "unlinked sync keeps tid 0");
  cr_expect_eq(ev[1].device, 0u, "no GPU activity of its context: device 0");
  /* a kernel of the same context on device 3: the syncs of that context are device 3's */
  CUpti_ActivityKernel10 k;
  memset(&k, 0, sizeof(k));
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 4;
  k.end = 5;
  k.deviceId = 3;
  k.contextId = 1;
  k.name = "k";
  cr_assert_eq(pd_cupti_convert_record(&k, t), 1);
  s.contextId = 2; /* another context, no activity of its own */
  cr_assert_eq(pd_cupti_convert_record(&s, t), 1);
  cr_assert_eq(pd_cupti_link_sync(t), 0);
  ev = pd_trace_events(t);
  cr_expect_eq(ev[1].device, 3u);
  cr_expect_eq(ev[2].device, 3u);
  cr_expect_eq(ev[4].device, 0u);
  pd_trace_destroy(t);
}

static CUpti_ActivityMemory4 mem_rec(bool alloc, uint64_t addr, uint64_t bytes, uint64_t ts) {
  CUpti_ActivityMemory4 m;
  memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType =
      alloc ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.address = addr;
  m.bytes = bytes;
  m.timestamp = ts;
  m.deviceId = 0;
  m.correlationId = (uint32_t)ts;
  return m;
}

Test(cupti_convert, memory_records_track_live_bytes) {
  pd_cupti_convert_reset();
  char nb[64];
  CUpti_ActivityMemory4 m = mem_rec(true, 0x7f0000000000ULL, 1000, 10);
  pd_event_t ev = convert(&m, nb, sizeof(nb));
  cr_expect_eq(ev.kind, PD_EVENT_MEMORY);
  cr_expect_eq(ev.start_ns, 10);
  cr_expect_eq(ev.end_ns, 10);
  cr_expect_eq(ev.u.memory.address, 0x7f0000000000ULL);
  cr_expect_eq(ev.u.memory.bytes, 1000);
  cr_expect_eq(ev.u.memory.total_allocated, 1000);
  cr_expect_eq(ev.u.memory.mem_kind, PD_MEM_DEVICE);
  m = mem_rec(true, 0x7f0000100000ULL, 500, 11);
  ev = convert(&m, nb, sizeof(nb));
  cr_expect_eq(ev.u.memory.total_allocated, 1500);
  m = mem_rec(false, 0x7f0000000000ULL, 1000, 12);
  ev = convert(&m, nb, sizeof(nb));
  cr_expect_eq(ev.u.memory.bytes, -1000);
  cr_expect_eq(ev.u.memory.total_allocated, 500);
  /* Released, but allocated before tracing began: the tally cannot go below what it saw. */
  m = mem_rec(false, 0x7e0000000000ULL, 4096, 13);
  ev = convert(&m, nb, sizeof(nb));
  cr_expect_eq(ev.u.memory.bytes, -4096);
  cr_expect_eq(ev.u.memory.total_allocated, 500);

  /* Many allocations and releases in mixed order (exercises growth and deletion). */
  int64_t expect = 500;
  for (uint64_t i = 0; i < 5000; i++) {
    m = mem_rec(true, 0x100000000ULL + i * 0x200, 100 + i, 100 + i);
    ev = convert(&m, nb, sizeof(nb));
    expect += (int64_t)(100 + i);
    cr_assert_eq(ev.u.memory.total_allocated, expect, "after alloc %llu", (unsigned long long)i);
  }
  for (uint64_t i = 0; i < 5000; i += 2) {
    m = mem_rec(false, 0x100000000ULL + i * 0x200, 100 + i, 9000 + i);
    ev = convert(&m, nb, sizeof(nb));
    expect -= (int64_t)(100 + i);
    cr_assert_eq(ev.u.memory.total_allocated, expect, "after free %llu", (unsigned long long)i);
  }
  for (uint64_t i = 1; i < 5000; i += 2) {
    m = mem_rec(false, 0x100000000ULL + i * 0x200, 100 + i, 20000 + i);
    ev = convert(&m, nb, sizeof(nb));
    expect -= (int64_t)(100 + i);
  }
  cr_expect_eq(ev.u.memory.total_allocated, 500);
  cr_expect_eq(expect, 500);
  pd_cupti_convert_reset();
}

Test(cupti_convert, overhead_and_unknown_kinds) {
  CUpti_ActivityOverhead3 o;
  memset(&o, 0, sizeof(o));
  o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
  o.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  o.objectId.pt.processId = 5;
  o.objectId.pt.threadId = 6;
  o.start = 1;
  o.end = 4;
  char nb[64];
  pd_event_t ev = convert(&o, nb, sizeof(nb));
  cr_expect_eq(ev.kind, PD_EVENT_OVERHEAD);
  cr_expect_str_eq(ev.name, "CUPTI Buffer Flush");
  cr_expect_eq(ev.tid, 6u);

  CUpti_ActivityName n;
  memset(&n, 0, sizeof(n));
  n.kind = CUPTI_ACTIVITY_KIND_NAME;
  cr_expect_eq(pd_cupti_record_to_event(&n, &ev, nb, sizeof(nb)), 0, "kinds we do not keep are skipped");
  cr_expect_eq(pd_cupti_record_to_event(NULL, &ev, nb, sizeof(nb)), PD_EINVAL);
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  cr_expect_eq(pd_cupti_convert_record(&n, t), 0);
  cr_expect_eq(pd_trace_count(t), 0u);
  pd_trace_destroy(t);
}

Test(cupti_convert, kernel_and_runtime_pair_share_a_correlation_in_a_trace) {
  /* The path the profiler takes: records -> trace -> sorted, links intact. */
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  for (uint32_t i = 0; i < 100; i++) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof(k));
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = 1000 + 100 * i + 50;
    k.end = k.start + 40;
    k.correlationId = 1 + i;
    k.name = i % 2 ? "odd_kernel" : "even_kernel";
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof(a));
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    a.start = 1000 + 100 * i;
    a.end = a.start + 5;
    a.correlationId = 1 + i;
    cr_assert_eq(pd_cupti_convert_record(&k, t), 1);
    cr_assert_eq(pd_cupti_convert_record(&a, t), 1);
  }
  pd_trace_sort(t);
  const pd_event_t *ev = pd_trace_events(t);
  cr_assert_eq(pd_trace_count(t), 200u);
  for (size_t i = 0; i < 200; i += 2) {
    cr_expect_eq(ev[i].kind, PD_EVENT_RUNTIME);
    cr_expect_eq(ev[i + 1].kind, PD_EVENT_KERNEL);
    cr_expect_eq(ev[i].correlation_id, ev[i + 1].correlation_id);
    cr_expect_str_eq(ev[i].name, "cudaLaunchKernel");
  }
  pd_trace_destroy(t);
}

Test(cupti_convert, cupti_version_without_gpu) {
  /* The version comes from the library itself; no device or driver is needed. */
  int v = pd_prof_cupti_version();
  cr_expect_eq(v, CUPTI_API_VERSION, "libcupti reports %d, headers say %d", v, CUPTI_API_VERSION);
}

/* PD_CUPTI_OPTIONS: the capture variants bench_prof measures. */
Test(cupti_convert, capture_options_parse) {
  unsigned bits = 123;
  char err[256] = "";
  cr_expect_eq(pd_cupti_capture_parse(NULL, &bits, err, sizeof err), 0);
  cr_expect_eq(bits, 0u);
  cr_expect_eq(pd_cupti_capture_parse("", &bits, err, sizeof err), 0);
  cr_expect_eq(bits, 0u);
  cr_expect_eq(pd_cupti_capture_parse("default", &bits, err, sizeof err), 0);
  cr_expect_eq(bits, 0u);
  cr_expect_eq(pd_cupti_capture_parse("cupti_clock,pthread_ids", &bits, err, sizeof err), 0);
  cr_expect_eq(bits, (unsigned)(PD_CUPTI_CAPTURE_CUPTI_CLOCK | PD_CUPTI_CAPTURE_PTHREAD_IDS));
  cr_expect_eq(pd_cupti_capture_parse("kernels_only,,launch_callbacks,shared_buffers", &bits, err, sizeof err), 0);
  cr_expect_eq(bits, (unsigned)(PD_CUPTI_CAPTURE_KERNELS_ONLY | PD_CUPTI_CAPTURE_LAUNCH_CALLBACKS |
                                PD_CUPTI_CAPTURE_SHARED_BUFFERS));
  cr_expect_eq(pd_cupti_capture_parse("runtime_ids,no_driver,driver_ids", &bits, err, sizeof err), 0);
  cr_expect_eq(bits, (unsigned)(PD_CUPTI_CAPTURE_RUNTIME_IDS | PD_CUPTI_CAPTURE_NO_DRIVER | PD_CUPTI_CAPTURE_DRIVER_IDS));
  cr_expect_eq(pd_cupti_capture_parse("callback_api", &bits, err, sizeof err), 0);
  cr_expect_eq(bits, (unsigned)PD_CUPTI_CAPTURE_CALLBACK_API);
  bits = 7;
  cr_expect_eq(pd_cupti_capture_parse("cupti_clock,fast", &bits, err, sizeof err), PD_EINVAL);
  cr_expect_eq(bits, 0u, "nothing half-applied");
  cr_expect(strstr(err, "unknown CUPTI capture option 'fast'") != NULL, "message: %s", err);
  cr_expect_eq(pd_cupti_capture_parse("cupti_clockx", &bits, err, sizeof err), PD_EINVAL, "no prefix match");
  cr_expect_eq(pd_cupti_capture_parse("x", NULL, err, sizeof err), PD_EINVAL);
}

/* ---- CALLBACK_API: API records from CUPTI's callbacks ---------------------------------------- */

/* One call as CUPTI reports it: entry, then exit, sharing the call's slot. */
static void cb_call(CUpti_CallbackDomain domain, uint32_t cbid, uint32_t corr, uint64_t *slot, int32_t ret,
                    bool exit) {
  CUpti_CallbackData d;
  memset(&d, 0, sizeof(d));
  d.callbackSite = exit ? CUPTI_API_EXIT : CUPTI_API_ENTER;
  d.correlationId = corr;
  d.correlationData = slot;
  d.functionReturnValue = exit ? &ret : NULL;
  pd_cupti_callback_api_test_call((int)domain, cbid, &d);
}

static void cb_whole(CUpti_CallbackDomain domain, uint32_t cbid, uint32_t corr, int32_t ret) {
  uint64_t slot = 0;
  cb_call(domain, cbid, corr, &slot, 0, false);
  cb_call(domain, cbid, corr, &slot, ret, true);
}

static void *memcpy_on_another_thread(void *arg) {
  (void)arg;
  cb_whole(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 40, 0);
  return NULL; /* the thread exits with its record not yet collected */
}

static const pd_event_t *find_corr(const pd_trace_t *t, uint32_t corr) {
  for (size_t i = 0; i < pd_trace_count(t); i++)
    if (pd_trace_events(t)[i].correlation_id == corr) return &pd_trace_events(t)[i];
  return NULL;
}

Test(cupti_convert, callback_api_records_the_calls_the_activity_api_would) {
  pd_cupti_options_t opt = {.driver_launches = true, .capture = PD_CUPTI_CAPTURE_CALLBACK_API};
  (void)pd_cupti_callback_api_test_drain(NULL); /* nothing from another test */
  pd_cupti_callback_api_test_on(&opt);
  /* a runtime launch, with the driver launch it makes inside: one record, the runtime's */
  uint64_t slot = 0, inner = 0;
  cb_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 10, &slot, 0, false);
  cb_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 11, &inner, 0, false);
  cb_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 11, &inner, 0, true);
  cb_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 10, &slot, 0, true);
  /* a library's own driver launch (cuBLAS): recorded */
  cb_whole(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 20, 0);
  /* a query call and a driver call that is no launch: not recorded in the lean capture */
  cb_whole(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, 30, 0);
  cb_whole(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent, 31, 0);
  /* a failing synchronize keeps its status */
  cb_whole(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, 32, 700);
  /* a call entered before the records were on: its slot holds no start of ours */
  uint64_t old = 1;
  cb_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, 33, &old, 0, true);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, memcpy_on_another_thread, NULL), 0);
  cr_assert_eq(pthread_join(th, NULL), 0);

  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  cr_assert_eq(pd_cupti_callback_api_test_drain(t), 4);
  cr_assert_eq(pd_trace_count(t), 4u);
  const pd_event_t *launch = find_corr(t, 10), *lib = find_corr(t, 20), *sync = find_corr(t, 32),
                   *copy = find_corr(t, 40);
  cr_assert(launch && lib && sync && copy);
  cr_expect_eq(launch->kind, PD_EVENT_RUNTIME);
  cr_expect_str_eq(launch->name, "cudaLaunchKernel");
  cr_expect_eq(launch->u.api.cbid, (uint32_t)CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
  cr_expect(launch->start_ns > 0 && launch->start_ns <= launch->end_ns);
  cr_expect_eq(launch->pid, (uint32_t)getpid());
  cr_expect_eq(launch->tid, (uint32_t)syscall(SYS_gettid));
  cr_expect_eq(lib->kind, PD_EVENT_DRIVER);
  cr_expect_str_eq(lib->name, "cuLaunchKernel");
  cr_expect(lib->start_ns >= launch->end_ns, "recorded in call order");
  cr_expect_eq(sync->u.api.status, 700);
  cr_expect_str_eq(copy->name, "cudaMemcpyAsync");
  cr_expect_neq(copy->tid, launch->tid, "the other thread's own id");

  /* drained: nothing twice; the exited thread's buffer went with the drain */
  pd_trace_reset(t);
  cr_expect_eq(pd_cupti_callback_api_test_drain(t), 0);

  /* off: nothing recorded */
  pd_cupti_callback_api_test_on(NULL);
  cb_whole(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 50, 0);
  cr_expect_eq(pd_cupti_callback_api_test_drain(t), 0);
  pd_trace_destroy(t);
}

/* A runtime call left open when the records go off must not hide the next enable's driver
 * launches (they would read as the runtime's own), and full API tracing records every call. */
Test(cupti_convert, callback_api_depth_is_per_enable_and_full_records_all) {
  pd_cupti_options_t opt = {.driver_launches = true, .capture = PD_CUPTI_CAPTURE_CALLBACK_API};
  (void)pd_cupti_callback_api_test_drain(NULL);
  pd_cupti_callback_api_test_on(&opt);
  uint64_t slot = 0;
  cb_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 1, &slot, 0, false);
  pd_cupti_callback_api_test_on(&opt); /* the next cycle's enable, the call never exited */
  cb_whole(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 2, 0);
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  cr_expect_eq(pd_cupti_callback_api_test_drain(t), 1);
  cr_expect_not_null(find_corr(t, 2));

  pd_trace_reset(t);
  opt.driver_api = true; /* full: the query calls and every driver call too */
  pd_cupti_callback_api_test_on(&opt);
  cb_whole(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, 3, 0);
  cb_whole(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent, 4, 0);
  cr_expect_eq(pd_cupti_callback_api_test_drain(t), 2);
  pd_cupti_callback_api_test_on(NULL);
  pd_trace_destroy(t);
}

/* ---- event waits: CUDA_EVENT records tell a wait which cudaEventRecord it waits for ----- */

static CUpti_ActivityCudaEvent2 event_record(uint32_t corr, uint32_t stream, uint32_t event_id, uint64_t sync_id) {
  CUpti_ActivityCudaEvent2 e;
  memset(&e, 0, sizeof(e));
  e.kind = CUPTI_ACTIVITY_KIND_CUDA_EVENT;
  e.correlationId = corr;
  e.streamId = stream;
  e.eventId = event_id;
  e.cudaEventSyncId = sync_id;
  return e;
}

static CUpti_ActivitySynchronization2 event_wait(CUpti_ActivitySynchronizationType type, uint32_t corr,
                                                 uint32_t stream, uint32_t event_id, uint64_t sync_id) {
  CUpti_ActivitySynchronization2 s;
  memset(&s, 0, sizeof(s));
  s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s.type = type;
  s.start = 1000 + corr;
  s.end = 2000 + corr;
  s.correlationId = corr;
  s.streamId = stream;
  s.cudaEventId = event_id;
  s.cudaEventSyncId = sync_id;
  return s;
}

static const pd_event_t *sync_of(const pd_trace_t *t, uint32_t corr) {
  for (size_t i = 0; i < pd_trace_count(t); i++)
    if (pd_trace_events(t)[i].kind == PD_EVENT_SYNC && pd_trace_events(t)[i].correlation_id == corr)
      return &pd_trace_events(t)[i];
  cr_assert_fail("no sync record with correlation %u", corr);
  return NULL;
}

Test(cupti_convert, event_waits_learn_the_record_they_wait_for) {
  const uint32_t none = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  /* event 5 recorded twice on stream 13 (calls 40 and 60): each wait goes to its own record;
   * a wait may come before its record in CUPTI's buffers */
  CUpti_ActivityCudaEvent2 r1 = event_record(40, 13, 5, 1001), r2 = event_record(60, 13, 5, 1002);
  CUpti_ActivitySynchronization2 w1 = event_wait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, 41, 7, 5, 1001);
  CUpti_ActivitySynchronization2 w2 = event_wait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, 61, none, 5, 1002);
  /* no sync id from CUPTI: the event's last record stands in */
  CUpti_ActivityCudaEvent2 r3 = event_record(70, 14, 6, (uint64_t)none);
  CUpti_ActivitySynchronization2 w3 = event_wait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, 71, 7, 6, (uint64_t)none);
  /* a wait whose record is not in this collect (recorded before the window), and a stream sync */
  CUpti_ActivitySynchronization2 w4 = event_wait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, 81, 7, 9, 2000);
  CUpti_ActivitySynchronization2 w5 = event_wait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 91, 7, none, (uint64_t)none);
  const void *recs[] = {&w1, &r1, &r2, &w2, &r3, &w3, &w4, &w5};
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  cr_assert_eq(pd_cupti_convert_records(recs, sizeof(recs) / sizeof(recs[0]), t), 5, "the CUDA_EVENT records add no event");
  cr_assert_eq(pd_trace_count(t), 5u);
  const pd_event_t *a = sync_of(t, 41), *b = sync_of(t, 61), *c = sync_of(t, 71), *d = sync_of(t, 81), *e = sync_of(t, 91);
  cr_expect(a->u.sync.has_wait);
  cr_expect_eq(a->u.sync.sync_kind, PD_SYNC_STREAM_WAIT_EVENT);
  cr_expect_eq(a->u.sync.wait_stream, 13u);
  cr_expect_eq(a->u.sync.event_record_corr, 40u, "the record with the same sync id, though it came later");
  cr_expect(b->u.sync.has_wait);
  cr_expect_eq(b->u.sync.event_record_corr, 60u, "the event's second record, not its first");
  cr_expect(c->u.sync.has_wait);
  cr_expect_eq(c->u.sync.wait_stream, 14u);
  cr_expect_eq(c->u.sync.event_record_corr, 70u);
  cr_expect_not(d->u.sync.has_wait, "its record is not known");
  cr_expect_not(e->u.sync.has_wait, "no event");
  cr_expect_eq(pd_cupti_convert_records(NULL, 1, t), PD_EINVAL);
  cr_expect_eq(pd_cupti_convert_records(recs, 1, NULL), PD_EINVAL);
  pd_trace_destroy(t);
}

/* Many events, each recorded twice, their waits in another order: each wait finds its own
 * record (by sync id), or its event's last one (without). */
Test(cupti_convert, event_waits_many_records) {
  enum { N = 300 };
  static CUpti_ActivityCudaEvent2 recs[2 * N];
  static CUpti_ActivitySynchronization2 waits[2 * N];
  static const void *all[4 * N];
  size_t k = 0;
  for (uint32_t e = 0; e < N; e++) {
    recs[2 * e] = event_record(10000 + 2 * e, 20 + e % 3, e, 1 + 2 * (uint64_t)e);
    recs[2 * e + 1] = event_record(10001 + 2 * e, 20 + e % 3, e, 2 + 2 * (uint64_t)e);
  }
  for (uint32_t e = 0; e < N; e++) {
    /* even events: a wait on each record by sync id; odd ones: no sync id */
    const uint64_t none = (uint64_t)CUPTI_SYNCHRONIZATION_INVALID_VALUE;
    waits[2 * e] = event_wait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, 50000 + 2 * e, 7, e,
                              e % 2 == 0 ? 1 + 2 * (uint64_t)e : none);
    waits[2 * e + 1] = event_wait(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, 50001 + 2 * e, 7, e,
                                  e % 2 == 0 ? 2 + 2 * (uint64_t)e : none);
  }
  for (size_t i = 2 * N; i-- > 0;) all[k++] = &waits[i]; /* the waits first, backwards */
  for (size_t i = 0; i < 2 * N; i++) all[k++] = &recs[i];
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  cr_assert_eq(pd_cupti_convert_records(all, k, t), 2 * N);
  for (uint32_t e = 0; e < N; e++) {
    const pd_event_t *a = sync_of(t, 50000 + 2 * e), *b = sync_of(t, 50001 + 2 * e);
    cr_assert(a->u.sync.has_wait && b->u.sync.has_wait, "event %u", e);
    cr_expect_eq(a->u.sync.wait_stream, 20 + e % 3);
    cr_expect_eq(a->u.sync.event_record_corr, e % 2 == 0 ? 10000 + 2 * e : 10001 + 2 * e, "event %u", e);
    cr_expect_eq(b->u.sync.event_record_corr, 10001 + 2 * e, "event %u", e);
  }
  pd_trace_destroy(t);
}
