/* test_synthetic_step.c: the real profiler pipeline, without a GPU, on a training step.
 *
 * A CPU-only profiler records the host side as profiler_demo does (schedule, ProfilerStep#N,
 * the data-wait range, op ranges with shapes); every CUDA call the step "makes" is noted
 * with its host time, and the trace-ready callback turns the notes into CUPTI activity
 * records built by hand (runtime and driver launches, kernels with mangled names, copies,
 * a memset, a stream sync, device allocations and frees), fed through the CUPTI source's
 * own conversion (pd_cupti_convert_record, pd_cupti_link_sync: the test seam), sorted and
 * written with profiler_demo's trace meta. The test checks the links the trace carries;
 * with PD_SYNTH_TRACE=<path> it also keeps the trace there, for the peer tools
 * (../shared/peers/run_all.sh) to load it.
 *
 * This test includes <cupti.h> because it builds CUPTI records; nothing in src/ but
 * cupti_source.c may.
 */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cupti_source.h"
#include "pd/pd_prof.h"
#include "pd/pd_writers.h"
#include "pd_test_util.h"

/* ---- the step's CUDA calls, noted on the host -------------------------------------------- */

typedef enum { GPU_NONE, GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET, GPU_SYNC, GPU_ALLOC, GPU_FREE } gpu_work_t;

typedef struct {
  CUpti_ActivityKind api_kind; /* RUNTIME or DRIVER */
  uint32_t cbid;
  int64_t t0, t1; /* host time of the call */
  uint32_t corr;
  gpu_work_t work;
  const char *kernel;     /* KERNEL */
  uint32_t stream;
  uint64_t bytes;         /* copies, sets, allocations */
  int copy_kind, src_kind, dst_kind;
  int64_t gpu_ns;         /* device time of the work */
  uint64_t addr;          /* ALLOC/FREE */
} call_t;

#define MAX_CALLS 4096
static call_t g_calls[MAX_CALLS];
static int g_ncalls;
static uint32_t g_next_corr = 1000;

static void spin_ns(int64_t ns) {
  int64_t end = pd_clock_now_ns() + ns;
  while (pd_clock_now_ns() < end) {
  }
}

/* Notes one CUDA call that takes about 4 us on the host. */
static call_t *call(CUpti_ActivityKind kind, uint32_t cbid, gpu_work_t work) {
  cr_assert_lt(g_ncalls, MAX_CALLS);
  call_t *c = &g_calls[g_ncalls++];
  memset(c, 0, sizeof(*c));
  c->api_kind = kind;
  c->cbid = cbid;
  c->work = work;
  c->corr = g_next_corr++;
  c->stream = 7;
  c->t0 = pd_clock_now_ns();
  spin_ns(work == GPU_SYNC ? 40000 : 4000);
  c->t1 = pd_clock_now_ns();
  return c;
}

static void launch(const char *kernel, int64_t gpu_ns, bool driver) {
  call_t *c = driver ? call(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, GPU_KERNEL)
                     : call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, GPU_KERNEL);
  c->kernel = kernel;
  c->gpu_ns = gpu_ns;
}

/* A GEMM as src/scen/cnn_gemm.c records one: the "aten::mm" op around cuBLASLt's
 * driver-API launch. */
static void mm(const char *kernel, int64_t gpu_ns) {
  cr_assert_eq(pd_range_push("aten::mm"), 0);
  spin_ns(1000);
  launch(kernel, gpu_ns, true);
  cr_assert_eq(pd_range_pop(), 0);
}

static void op(const char *name, const char *shape, const char *kernel, int64_t gpu_ns, bool gemm) {
  cr_assert_eq(shape ? pd_range_push_shape(name, shape) : pd_range_push(name), 0);
  spin_ns(2000);
  launch(kernel, gpu_ns, false);
  if (gemm) mm("nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_TNT", 6000);
  spin_ns(2000);
  cr_assert_eq(pd_range_pop(), 0);
}

#define K_IM2COL "_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d67813k_im2col_nhwcI6__halfLb0EjEEvPKT_PS2_iiiii"
#define K_POOL "_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d67815k_maxpool2_reluI6__halfjEEvPKT_PS2_iiii"
#define K_CE "_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d67815k_cross_entropyI6__halfEEvPKT_PKiPfi"
#define K_BWD "_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d67817k_col2im_relu_bwdI6__halfjEEvPKT_PS2_iiiii"
#define K_ADAMW "_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d6787k_adamwEPfS0_S0_PKfifffff"

static uint64_t g_next_addr = 0x7f0000000000ULL;

/* One training step, shaped like profiler_demo's: data wait, copy to the device, forward,
 * backward with a temporary buffer, optimizer, loss read back with a stream sync. */
static void train_step(void) {
  cr_assert_eq(pd_range_push(PD_RANGE_DATA_WAIT), 0);
  spin_ns(60000);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_push("DataLoader.to_device"), 0);
  call_t *c = call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, GPU_MEMCPY);
  c->bytes = 786432, c->gpu_ns = 17000, c->stream = 13;
  c->copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  c->src_kind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED, c->dst_kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  cr_assert_eq(pd_range_pop(), 0);

  cr_assert_eq(pd_range_push("train_step"), 0);
  cr_assert_eq(pd_range_push("forward"), 0);
  op("conv1.forward", "[[64, 3, 32, 32]]", K_IM2COL, 5000, true);
  op("maxpool.forward", "[[64, 64, 32, 32]]", K_POOL, 4000, false);
  op("linear.forward", "[[64, 128]]", K_IM2COL, 3000, true);
  cr_assert_eq(pd_range_push_shape("cross_entropy", "[[64, 10]]"), 0);
  launch(K_CE, 3000, false);
  c = call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, GPU_MEMSET);
  c->bytes = 4, c->gpu_ns = 1000, c->dst_kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_pop(), 0); /* forward */

  cr_assert_eq(pd_range_push("backward"), 0);
  cr_assert_eq(pd_range_push("conv1.backward"), 0);
  uint64_t addr = g_next_addr;
  g_next_addr += 0x100000;
  c = call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, GPU_ALLOC);
  c->bytes = 1 << 20, c->addr = addr;
  launch(K_BWD, 8000, false);
  mm("nvjet_sm90_hsh_128x128_64x6_1x2_h_bz_TNT", 7000);
  c = call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, GPU_FREE);
  c->bytes = 1 << 20, c->addr = addr;
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_pop(), 0); /* backward */

  cr_assert_eq(pd_range_push("optimizer"), 0);
  op("AdamW.step", NULL, K_ADAMW, 6000, false);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_push("loss.item"), 0);
  c = call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, GPU_MEMCPY);
  c->bytes = 4, c->gpu_ns = 1500;
  c->copy_kind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  c->src_kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, c->dst_kind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, GPU_SYNC);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_pop(), 0); /* train_step */
}

/* ---- the calls as CUPTI records, through the source's conversion ----------------------------- */

typedef struct {
  int64_t cursor[64]; /* per stream: when the GPU is free again */
  int64_t live;       /* device bytes allocated */
} gpu_t;

static void add(pd_trace_t *t, const void *rec) { cr_assert_eq(pd_cupti_convert_record(rec, t), 1); }

static void add_call(pd_trace_t *t, const call_t *c, gpu_t *g) {
  uint32_t pid = (uint32_t)getpid(), tid = (uint32_t)syscall(SYS_gettid);
  CUpti_ActivityAPI a;
  memset(&a, 0, sizeof(a));
  a.kind = c->api_kind;
  a.cbid = c->cbid;
  a.start = (uint64_t)c->t0;
  a.end = (uint64_t)c->t1;
  a.processId = pid;
  a.threadId = tid;
  a.correlationId = c->corr;
  add(t, &a);
  int64_t *cur = &g->cursor[c->stream % 64];
  int64_t start = c->t1 - 1000 > *cur ? c->t1 - 1000 : *cur; /* queued work waits for the stream */
  switch (c->work) {
  case GPU_KERNEL: {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof(k));
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = (uint64_t)start;
    k.end = (uint64_t)(start + c->gpu_ns);
    k.deviceId = 0;
    k.contextId = 1;
    k.streamId = c->stream;
    k.gridX = 128, k.gridY = 1, k.gridZ = 1;
    k.blockX = 256, k.blockY = 1, k.blockZ = 1;
    k.registersPerThread = 40;
    k.staticSharedMemory = 4096;
    k.correlationId = c->corr;
    k.name = c->kernel;
    add(t, &k);
    *cur = start + c->gpu_ns;
    break;
  }
  case GPU_MEMCPY: {
    CUpti_ActivityMemcpy6 m;
    memset(&m, 0, sizeof(m));
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = (uint8_t)c->copy_kind;
    m.srcKind = (uint8_t)c->src_kind;
    m.dstKind = (uint8_t)c->dst_kind;
    m.bytes = c->bytes;
    m.start = (uint64_t)start;
    m.end = (uint64_t)(start + c->gpu_ns);
    m.contextId = 1;
    m.streamId = c->stream;
    m.correlationId = c->corr;
    add(t, &m);
    *cur = start + c->gpu_ns;
    break;
  }
  case GPU_MEMSET: {
    CUpti_ActivityMemset4 s;
    memset(&s, 0, sizeof(s));
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.bytes = c->bytes;
    s.start = (uint64_t)start;
    s.end = (uint64_t)(start + c->gpu_ns);
    s.memoryKind = (uint16_t)c->dst_kind;
    s.contextId = 1;
    s.streamId = c->stream;
    s.correlationId = c->corr;
    add(t, &s);
    *cur = start + c->gpu_ns;
    break;
  }
  case GPU_SYNC: {
    /* the host waits from inside the call until the stream drains */
    CUpti_ActivitySynchronization2 s;
    memset(&s, 0, sizeof(s));
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    s.start = (uint64_t)(c->t0 + 500);
    s.end = (uint64_t)(c->t1 - 500);
    s.contextId = 1;
    s.streamId = c->stream;
    s.correlationId = c->corr;
    add(t, &s);
    break;
  }
  case GPU_ALLOC:
  case GPU_FREE: {
    CUpti_ActivityMemory4 m;
    memset(&m, 0, sizeof(m));
    m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    m.memoryOperationType = c->work == GPU_ALLOC ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                                                 : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.address = c->addr;
    m.bytes = c->bytes;
    m.timestamp = (uint64_t)(c->t0 + 1000);
    m.deviceId = 0;
    m.contextId = 1;
    m.processId = pid;
    m.correlationId = c->corr;
    add(t, &m);
    break;
  }
  case GPU_NONE:
    break;
  }
}

typedef struct {
  char path[512];
  int cycles;
  size_t kernels;
} synth_t;

/* What the CUPTI source's collect would add to the cycle, then profiler_demo's writing. */
static int synth_ready_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  (void)prof;
  synth_t *s = user;
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  const pd_event_t *ev = pd_trace_events(cycle);
  for (size_t i = 0; i < pd_trace_count(cycle); i++) {
    cr_assert_eq(pd_trace_add(t, &ev[i]), 0);
    if (ev[i].kind == PD_EVENT_RANGE && ev[i].u.range.step >= 0) {
      if (ev[i].start_ns < lo) lo = ev[i].start_ns;
      if (ev[i].end_ns > hi) hi = ev[i].end_ns;
    }
  }
  pd_cupti_convert_reset();
  gpu_t g;
  memset(&g, 0, sizeof(g));
  for (int i = 0; i < g_ncalls; i++) {
    if (g_calls[i].t0 < lo || g_calls[i].t0 >= hi) continue; /* outside the recorded steps */
    add_call(t, &g_calls[i], &g);
    s->kernels += g_calls[i].work == GPU_KERNEL;
  }
  cr_assert_eq(pd_cupti_link_sync(t), 0);
  pd_trace_sort(t);
  pd_device_props_t d = pd_test_h100();
  cr_assert_eq(pd_trace_add_device(t, &d), 0);
  pd_trace_meta_t meta = {.unix_offset_ns = pd_clock_unix_offset_ns(),
                          .pid = (uint32_t)getpid(),
                          .profile_memory = true,
                          .record_shapes = true,
                          .cuda_driver_version = 13000,
                          .cuda_runtime_version = 13000,
                          .cupti_version = CUPTI_API_VERSION,
                          .links = true};
  int rc = pd_trace_write_file(s->path, t, &meta);
  pd_trace_destroy(t);
  s->cycles++;
  return rc;
}

static int count_cat(const cJSON *events, const char *cat, const char *key) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "cat");
    if (!cJSON_IsString(c) || strcmp(c->valuestring, cat) != 0) continue;
    if (key == NULL || cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), key) != NULL) n++;
  }
  return n;
}

static int count_named(const cJSON *events, const char *cat, const char *name) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "cat"), *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (cJSON_IsString(c) && strcmp(c->valuestring, cat) == 0 && cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0)
      n++;
  }
  return n;
}

Test(synthetic_step, profiler_pipeline_writes_a_linked_trace) {
  char dir[256];
  pd_test_tmpdir_make(dir, sizeof dir, "pd_synth");
  synth_t s;
  memset(&s, 0, sizeof(s));
  const char *keep = getenv("PD_SYNTH_TRACE");
  snprintf(s.path, sizeof s.path, "%s", keep && keep[0] ? keep : "");
  if (s.path[0] == '\0') snprintf(s.path, sizeof s.path, "%s/synthetic_step.pt.trace.json", dir);

  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = PD_ACTIVITY_CPU;
  cfg.record_shapes = true;
  cfg.with_stack = true;
  cfg.schedule = (pd_schedule_t){.wait = 1, .warmup = 1, .active = 4, .repeat = 1};
  cfg.on_trace_ready = synth_ready_cb;
  cfg.user = &s;
  pd_prof_t *p = NULL;
  cr_assert_eq(pd_prof_create(&cfg, &p), 0, "%s", pd_prof_last_error(NULL));
  cr_assert_eq(pd_prof_start(p), 0);
  for (int i = 0; i < 6; i++) {
    train_step();
    cr_assert_eq(pd_prof_step(p), 0, "step %d: %s", i, pd_prof_last_error(p));
  }
  cr_assert_eq(pd_prof_stop(p), 0);
  pd_prof_destroy(p);
  cr_assert_eq(s.cycles, 1);
  cr_expect_eq(s.kernels, 4u * 9u, "nine kernels in each of the four recorded steps");

  char *text = pd_test_slurp(s.path);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root);
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  /* every kernel, copy and set is linked to an op; every op has its cpu_op */
  cr_expect_eq(count_cat(ev, "kernel", "External id"), count_cat(ev, "kernel", NULL));
  cr_expect_eq(count_cat(ev, "gpu_memcpy", "External id"), count_cat(ev, "gpu_memcpy", NULL));
  cr_expect_eq(count_cat(ev, "gpu_memset", "External id"), 4);
  /* cuBLASLt's driver launches are linked too, under cuda_runtime where
   * torch-tb-profiler looks for a kernel's launching call */
  cr_expect_eq(count_cat(ev, "cuda_runtime", "External id"), count_cat(ev, "cuda_runtime", NULL));
  cr_expect_eq(count_named(ev, "cuda_runtime", "cuLaunchKernelEx"), 4 * 3);
  cr_expect_eq(count_cat(ev, "cuda_driver", NULL), 0);
  cr_expect_gt(count_cat(ev, "cpu_op", NULL), 0);
  /* with_stack: every op carries torch's "Call stack", naming this file's functions */
  cr_expect_eq(count_cat(ev, "cpu_op", "Call stack"), count_cat(ev, "cpu_op", NULL));
  cr_expect_not_null(strstr(text, "test_synthetic_step.c("), "frames name this file and its lines");
  cr_expect_not_null(strstr(text, "): train_step"), "and the function that opened the range");
  cr_expect_gt(count_cat(ev, "gpu_user_annotation", NULL), 0);
  cr_expect_eq(count_cat(ev, "cuda_sync", "External id"), 4);
  cr_expect_eq(count_cat(ev, "cpu_instant_event", "Total Reserved"), 4 * 2);
  /* kernels carry Kineto's "queued" (0: unknown) and only their readable name; each
   * mangled symbol is listed once, at the top level */
  cr_expect_eq(count_cat(ev, "kernel", "queued"), count_cat(ev, "kernel", NULL));
  cr_expect_eq(count_cat(ev, "kernel", "mangled name"), 0);
  cr_expect_null(strstr(text, "\"name\":\"_Z"), "every kernel name demangled");
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(root, "mangledNames");
  cr_expect_eq(cJSON_GetArraySize(names), 5, "five mangled symbols, once each");
  const cJSON *pool = cJSON_GetObjectItemCaseSensitive(names, K_POOL);
  cr_expect(cJSON_IsString(pool) && count_named(ev, "kernel", pool->valuestring) == 4,
            "maps to the name its kernels show");
  /* conv1.forward -> conv1.backward in each recorded step: torch's fwdbwd flows */
  cr_expect_eq(count_named(ev, "fwdbwd", "fwdbwd"), 4 * 2);
  cr_expect_eq(count_cat(ev, "cpu_instant_event", "finished"), 4 * 2);
  cr_expect_null(strstr(text, "DataLoader.wait"), "the data wait is named as torch names it");
  cJSON_Delete(root);
  free(text);
  pd_test_tmpdir_remove(dir);
}
