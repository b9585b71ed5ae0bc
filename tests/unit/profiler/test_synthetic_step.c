/* test_synthetic_step.c: the real profiler pipeline, without a GPU, on a training step.
 *
 * The profiler records the host side as profiler_demo does (schedule, ProfilerStep#N, the
 * data-wait range, op ranges with shapes and stacks) and takes the GPU side from the
 * scripted record source of tests/support (pd_mock_source.h), given in its config: every
 * CUDA call the step "makes" is a runtime or driver record spanning real host time, with
 * its GPU work (kernels with mangled names, copies, a memset, a stream sync, device
 * allocations and frees). The profiler's own cycle, collected from the source, goes
 * through the model's cycle pipeline (pd_pipeline.h), which writes it with profiler_demo's
 * trace meta. The test checks the links the trace carries; with PD_SYNTH_TRACE=<path> it
 * also keeps the trace there, for the peer tools (../shared/peers/run_all.sh) to load it.
 */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd/pd_pipeline.h"
#include "pd/pd_prof.h"
#include "pd/pd_writers.h"
#include "pd_mock_source.h"
#include "pd_test_util.h"

/* ---- the step's CUDA calls, as the record source sees them ---------------------------------- */

static pd_mock_source_t *g_src;
static size_t g_kernels; /* kernels launched while the source was recording */

#define CALL_NS 4000 /* a CUDA call's host time */
#define SYNC_NS 40000

static void launch(const char *kernel, int64_t gpu_ns, bool driver) {
  uint64_t c = pd_mock_source_call(g_src, driver ? "cuLaunchKernelEx" : "cudaLaunchKernel", CALL_NS);
  int rc = pd_mock_source_kernel(g_src, c, 7, kernel, gpu_ns);
  cr_assert_geq(rc, 0);
  g_kernels += (size_t)rc;
}

/* A GEMM as src/scen/cnn_gemm.c records one: the "aten::mm" op around cuBLASLt's
 * driver-API launch. */
static void mm(const char *kernel, int64_t gpu_ns) {
  cr_assert_eq(pd_range_push("aten::mm"), 0);
  launch(kernel, gpu_ns, true);
  cr_assert_eq(pd_range_pop(), 0);
}

static void op(const char *name, const char *shape, const char *kernel, int64_t gpu_ns, bool gemm) {
  cr_assert_eq(shape ? pd_range_push_shape(name, shape) : pd_range_push(name), 0);
  launch(kernel, gpu_ns, false);
  if (gemm) mm("nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_TNT", 6000);
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
  int64_t t = pd_clock_now_ns();
  while (pd_clock_now_ns() < t + 60000) {
  }
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_push("DataLoader.to_device"), 0);
  uint64_t c = pd_mock_source_call(g_src, "cudaMemcpyAsync", CALL_NS);
  cr_assert_geq(pd_mock_source_memcpy(g_src, c, 13, PD_MEMCPY_HTOD, 786432, 17000), 0);
  cr_assert_eq(pd_range_pop(), 0);

  cr_assert_eq(pd_range_push("train_step"), 0);
  cr_assert_eq(pd_range_push("forward"), 0);
  op("conv1.forward", "[[64, 3, 32, 32]]", K_IM2COL, 5000, true);
  op("maxpool.forward", "[[64, 64, 32, 32]]", K_POOL, 4000, false);
  op("linear.forward", "[[64, 128]]", K_IM2COL, 3000, true);
  cr_assert_eq(pd_range_push_shape("cross_entropy", "[[64, 10]]"), 0);
  launch(K_CE, 3000, false);
  c = pd_mock_source_call(g_src, "cudaMemsetAsync", CALL_NS);
  cr_assert_geq(pd_mock_source_memset(g_src, c, 7, 4, 1000), 0);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_pop(), 0); /* forward */

  cr_assert_eq(pd_range_push("backward"), 0);
  cr_assert_eq(pd_range_push("conv1.backward"), 0);
  uint64_t addr = g_next_addr;
  g_next_addr += 0x100000;
  c = pd_mock_source_call(g_src, "cudaMalloc", CALL_NS);
  cr_assert_geq(pd_mock_source_memory(g_src, c, addr, 1 << 20), 0);
  launch(K_BWD, 8000, false);
  mm("nvjet_sm90_hsh_128x128_64x6_1x2_h_bz_TNT", 7000);
  c = pd_mock_source_call(g_src, "cudaFree", CALL_NS);
  cr_assert_geq(pd_mock_source_memory(g_src, c, addr, -(1 << 20)), 0);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_pop(), 0); /* backward */

  cr_assert_eq(pd_range_push("optimizer"), 0);
  op("AdamW.step", NULL, K_ADAMW, 6000, false);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_push("loss.item"), 0);
  c = pd_mock_source_call(g_src, "cudaMemcpyAsync", CALL_NS);
  cr_assert_geq(pd_mock_source_memcpy(g_src, c, 7, PD_MEMCPY_DTOH, 4, 1500), 0);
  c = pd_mock_source_call(g_src, "cudaStreamSynchronize", SYNC_NS);
  cr_assert_geq(pd_mock_source_sync(g_src, c, PD_SYNC_STREAM), 0);
  cr_assert_eq(pd_range_pop(), 0);
  cr_assert_eq(pd_range_pop(), 0); /* train_step */
}

/* ---- the cycle through the pipeline, written as profiler_demo writes it -------------------------- */

typedef struct {
  char path[512];
  pd_pipeline_t pl;
} synth_t;

static int synth_ready_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  synth_t *s = user;
  pd_trace_meta_t meta = {.unix_offset_ns = pd_clock_unix_offset_ns(),
                          .pid = (uint32_t)getpid(),
                          .profile_memory = true,
                          .record_shapes = true,
                          .cuda_driver_version = 13000,
                          .cuda_runtime_version = 13000,
                          .cupti_version = 130001,
                          .links = true};
  pd_prof_cost_t cost;
  if (pd_prof_cost(prof, NULL, &cost) == 0) meta.cost = &cost;
  return pd_pipeline_add_cycle(&s->pl, cycle, s->path, &meta, NULL);
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

  cr_assert_eq(pd_pipeline_init(&s.pl, &(pd_pipeline_opts_t){.steps_required = true}), 0);
  g_src = pd_mock_source_create();
  cr_assert_not_null(g_src);
  pd_device_props_t h100 = pd_test_h100();
  pd_mock_source_set_device(g_src, &h100);

  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg); /* CPU|CUDA, from the scripted source */
  cfg.source = pd_mock_source_base(g_src);
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
  cr_assert_eq(s.pl.cycles, 1);
  cr_expect_eq(s.pl.metrics.kernels_per_step, 9.0, "nine kernels in each of the four recorded steps");
  cr_expect_eq(g_kernels, 5u * 9u, "taken in the warmup and the four recorded steps, not in the wait step");
  pd_mock_source_destroy(g_src);
  pd_pipeline_free(&s.pl);

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
