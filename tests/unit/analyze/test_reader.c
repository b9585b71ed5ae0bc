/* test_reader.c: the trace reader (src/model/trace_reader.c) without a GPU.
 *
 *  - the two torch.profiler fixtures (gzipped Kineto traces): exact event counts per
 *    category (counted independently with Python's json module when the fixtures were
 *    added), steps 2..5, device properties, times relative to baseTimeNanoseconds,
 *    [memory] args, shapes, range depth, every kernel linked to its launching call;
 *  - a synthetic trace of every kind written by the core's pd_trace_write_file() and read
 *    back field by field (zero and non-zero Unix offsets);
 *  - old Kineto spellings, odd rows and skipped entries from JSON in memory;
 *  - bad input: missing file, directory, empty, not JSON, no traceEvents, corrupt gzip.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "pd/pd_analyze.h"
#include "pd/pd_writers.h"
#include "pd_test_util.h"

static const char *fixture(const char *name) { return pd_test_path(pd_test_fixtures("torch"), name); }

static char g_dir[256];

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/pd_reader_test.XXXXXX");
  cr_assert_not_null(mkdtemp(g_dir));
}

static void remove_dir(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

static const char *in_dir(const char *name) { return pd_test_path(g_dir, name); }

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

static pd_trace_t *read_ok(const char *path, pd_trace_info_t *info) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  char err[512] = "";
  int rc = pd_trace_read_file_info(path, t, info, err, sizeof err);
  cr_assert_eq(rc, 0, "read %s: %d %s", path, rc, err);
  return t;
}

/* ---- torch fixtures ------------------------------------------------------------------- */

typedef struct {
  const char *file;
  size_t kernel, memcpy, memset, runtime, driver, range, gpu_range, cpu_op, memory;
  int64_t step2_start_ns, step2_dur_ns;
} torch_expect_t;

static const torch_expect_t k_sync = {"torch_sync.pt.trace.json.gz", 384, 24, 16, 684, 12, 20, 8, 1428, 624,
                                      4380605064562752LL, 3326108};
static const torch_expect_t k_churn = {"torch_memory_churn.pt.trace.json.gz", 584, 20, 80, 1069, 12, 20, 8, 1884,
                                       1296, 4380611019770625LL, 4054880};

static void check_torch(const torch_expect_t *x) {
  pd_trace_info_t info;
  pd_trace_t *t = read_ok(fixture(x->file), &info);
  cr_expect(info.gzipped);
  cr_expect(info.torch);
  cr_expect_eq(info.schema_version, 1);
  cr_expect_eq(info.base_time_ns, 1790857026000000000LL);
  cr_expect_gt(info.text_bytes, 1000000u);
  cr_expect_geq(info.load_s, 0.0);
  const size_t *k = info.kind_counts;
  cr_expect_eq(k[PD_EVENT_KERNEL], x->kernel, "kernels %zu", k[PD_EVENT_KERNEL]);
  cr_expect_eq(k[PD_EVENT_MEMCPY], x->memcpy);
  cr_expect_eq(k[PD_EVENT_MEMSET], x->memset);
  cr_expect_eq(k[PD_EVENT_RUNTIME], x->runtime);
  cr_expect_eq(k[PD_EVENT_DRIVER], x->driver);
  cr_expect_eq(k[PD_EVENT_RANGE], x->range);
  cr_expect_eq(k[PD_EVENT_GPU_RANGE], x->gpu_range);
  cr_expect_eq(k[PD_EVENT_CPU_OP], x->cpu_op);
  cr_expect_eq(k[PD_EVENT_MEMORY], x->memory);
  size_t total = 0;
  for (int i = 0; i < PD_EVENT_KIND_COUNT; i++) total += k[i];
  cr_expect_eq(total, pd_trace_count(t));
  cr_expect_eq(total + info.skipped, info.json_events);

  cr_assert_eq(pd_trace_device_count(t), 1u);
  const pd_device_props_t *d = pd_trace_devices(t);
  cr_expect_str_eq(d->name, "NVIDIA H200");
  cr_expect_eq(d->num_sms, 132);
  cr_expect_eq(d->compute_major, 9);
  cr_expect_eq(d->warp_size, 32);
  cr_expect_eq(d->max_shared_mem_per_block_optin, 232448);
  cr_expect_eq(d->total_global_mem, 150109880320ULL);

  const pd_event_t *ev = pd_trace_events(t);
  size_t n = pd_trace_count(t);
  int64_t steps[8];
  size_t nsteps = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0) cr_assert_geq(ev[i].start_ns, ev[i - 1].start_ns, "sorted by start");
    if (ev[i].kind == PD_EVENT_RANGE && ev[i].u.range.step >= 0) {
      cr_assert_lt(nsteps, 8u);
      steps[nsteps++] = ev[i].u.range.step;
      cr_expect_eq(ev[i].u.range.depth, 0u, "a step range is outermost");
      if (ev[i].u.range.step == 2) {
        cr_expect_leq(llabs(ev[i].start_ns - x->step2_start_ns), 1, "start %lld", (long long)ev[i].start_ns);
        cr_expect_leq(llabs(ev[i].end_ns - ev[i].start_ns - x->step2_dur_ns), 1);
      }
    }
    if (ev[i].kind == PD_EVENT_RANGE && strcmp(ev[i].name, "train_step") == 0)
      cr_expect_eq(ev[i].u.range.depth, 1u, "train_step nests in the step");
  }
  cr_assert_eq(nsteps, 4u);
  for (size_t s = 0; s < 4; s++) cr_expect_eq(steps[s], (int64_t)s + 2);

  /* Every kernel links to a launching call that began before it. */
  size_t linked = 0, kernels = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind != PD_EVENT_KERNEL) continue;
    kernels++;
    cr_assert_neq(ev[i].correlation_id, 0u);
    for (size_t j = 0; j < n; j++) {
      if ((ev[j].kind == PD_EVENT_RUNTIME || ev[j].kind == PD_EVENT_DRIVER) &&
          ev[j].correlation_id == ev[i].correlation_id) {
        cr_expect_leq(ev[j].start_ns, ev[i].start_ns);
        cr_expect(strstr(ev[j].name, "aunchKernel") != NULL, "launch call %s", ev[j].name);
        linked++;
        break;
      }
    }
  }
  cr_expect_eq(linked, kernels, "%zu of %zu kernels linked", linked, kernels);

  /* The first [memory] event and the first op, as the file has them. */
  const pd_event_t *mem = NULL, *op = NULL, *copy = NULL;
  for (size_t i = 0; i < n; i++) {
    if (mem == NULL && ev[i].kind == PD_EVENT_MEMORY) mem = &ev[i];
    if (op == NULL && ev[i].kind == PD_EVENT_CPU_OP) op = &ev[i];
    if (copy == NULL && ev[i].kind == PD_EVENT_MEMCPY) copy = &ev[i];
  }
  cr_assert_not_null(mem);
  cr_expect_eq(mem->u.memory.bytes, -3584);
  cr_expect_eq(mem->u.memory.total_allocated, 69672960);
  cr_expect_eq(mem->u.memory.mem_kind, PD_MEM_DEVICE);
  cr_expect_eq(mem->end_ns, mem->start_ns);
  cr_assert_not_null(op);
  cr_expect_str_eq(op->name, "aten::to");
  cr_expect_str_eq(op->u.range.shape, "[[64, 3, 32, 32], [], [], [], [], [], [], []]");
  cr_assert_not_null(copy);
  cr_expect_eq(copy->u.memcpy.copy_kind, PD_MEMCPY_HTOD);
  cr_expect_eq(copy->u.memcpy.src_kind, PD_MEM_PINNED);
  cr_expect_eq(copy->u.memcpy.dst_kind, PD_MEM_DEVICE);
  cr_expect_eq(copy->u.memcpy.bytes, 786432u);
  cr_expect_null(copy->name, "the kinds regenerate Kineto's name");
  cr_expect_eq(copy->device, 0u);
  cr_expect_eq(copy->stream, 7u);
  pd_trace_destroy(t);
}

Test(reader, torch_sync_fixture) {
  check_torch(&k_sync);
}

Test(reader, torch_memory_churn_fixture) {
  check_torch(&k_churn);
}

/* ---- round trip through the core's writer ---------------------------------------------------- */

static pd_event_t host_ev(pd_event_kind_t kind, const char *name, int64_t start, int64_t end) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.name = name;
  e.start_ns = start;
  e.end_ns = end;
  e.pid = 4242;
  e.tid = 4243;
  if (kind == PD_EVENT_RANGE || kind == PD_EVENT_CPU_OP || kind == PD_EVENT_GPU_RANGE) e.u.range.step = -1;
  return e;
}

static pd_event_t gpu_ev(pd_event_kind_t kind, const char *name, int64_t start, int64_t end, uint64_t corr) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.name = name;
  e.start_ns = start;
  e.end_ns = end;
  e.correlation_id = corr;
  e.device = 0;
  e.stream = 7;
  if (kind == PD_EVENT_GPU_RANGE) e.u.range.step = -1;
  return e;
}

/* Every kind, distinct starts (so the order read back is the order written), names that
 * need escaping, times with sub-microsecond parts. */
static pd_trace_t *synthetic(void) {
  pd_trace_t *t = pd_trace_create();
  cr_assert_not_null(t);
  pd_device_props_t d = pd_test_h100();
  cr_assert_eq(pd_trace_add_device(t, &d), 0);
  pd_event_t e;
  e = host_ev(PD_EVENT_RANGE, "ProfilerStep#3", 1000001, 9000999);
  e.u.range.step = 3;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_RANGE, "conv1.forward", 1100002, 1700003);
  e.u.range.shape = "[[64, 3, 32, 32], []]";
  e.u.range.stack = "/src/cnn.c(120): cnn_forward;/src/cnn.c(300): cnn_step;/src/main.c(5): main";
  e.u.range.depth = 1;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_RUNTIME, "cudaLaunchKernel", 1200003, 1205004);
  e.correlation_id = 11;
  e.u.api.cbid = 211;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_CPU_OP, "aten::add \"quoted\" \\ \xc3\xa9", 1300004, 1400005);
  e.u.range.shape = "not a list";
  e.u.range.stack = "/src/\"odd\" dir/a b.c(7): f \xc3\xa9";
  e.u.range.depth = 2;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_DRIVER, "cuLaunchKernel", 1500006, 1500999);
  e.correlation_id = 12;
  e.u.api.cbid = 307;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = gpu_ev(PD_EVENT_KERNEL, "void k<float>(\"x\")", 1600007, 1700008, 11);
  e.u.kernel.grid[0] = 264;
  e.u.kernel.grid[1] = 2;
  e.u.kernel.grid[2] = 1;
  e.u.kernel.block[0] = 256;
  e.u.kernel.block[1] = 1;
  e.u.kernel.block[2] = 1;
  e.u.kernel.registers_per_thread = 40;
  e.u.kernel.static_smem_bytes = 4096;
  e.context = 1;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = gpu_ev(PD_EVENT_MEMCPY, NULL, 1800009, 1900010, 13);
  e.u.memcpy.bytes = 786432;
  e.u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  e.u.memcpy.src_kind = PD_MEM_PINNED;
  e.u.memcpy.dst_kind = PD_MEM_DEVICE;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = gpu_ev(PD_EVENT_MEMCPY, NULL, 2000011, 2000512, 14);
  e.u.memcpy.bytes = 4;
  e.u.memcpy.copy_kind = PD_MEMCPY_DTOH;
  e.u.memcpy.src_kind = PD_MEM_DEVICE;
  e.u.memcpy.dst_kind = PD_MEM_PAGEABLE;
  e.stream = 13;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = gpu_ev(PD_EVENT_MEMSET, NULL, 2100013, 2100999, 15);
  e.u.memset.bytes = 512;
  e.u.memset.dst_kind = PD_MEM_DEVICE;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = gpu_ev(PD_EVENT_SYNC, NULL, 2200014, 2300015, 16);
  e.u.sync.sync_kind = PD_SYNC_STREAM;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  /* a Stream Wait Event that knows its cudaEventRecord (Kineto's wait_on_* args) */
  e = gpu_ev(PD_EVENT_SYNC, NULL, 2200020, 2200021, 17);
  e.u.sync.sync_kind = PD_SYNC_STREAM_WAIT_EVENT;
  e.u.sync.has_wait = true;
  e.u.sync.wait_stream = 21;
  e.u.sync.event_record_corr = 9;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = gpu_ev(PD_EVENT_GPU_RANGE, "gpu annotation", 2400016, 2500017, 0);
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_MEMORY, NULL, 2600018, 2600018);
  e.u.memory.address = 140163438733312ULL;
  e.u.memory.bytes = 1048576;
  e.u.memory.total_allocated = 70000000;
  e.u.memory.mem_kind = PD_MEM_DEVICE;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_MEMORY, NULL, 2700019, 2700019);
  e.u.memory.address = 0x7f0000001000ULL;
  e.u.memory.bytes = -4096;
  e.u.memory.total_allocated = -1;
  e.u.memory.mem_kind = PD_MEM_PAGEABLE;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_OVERHEAD, "CUPTI overhead", 2800020, 2800999);
  cr_assert_eq(pd_trace_add(t, &e), 0);
  e = host_ev(PD_EVENT_RANGE, "DataLoader.wait", 2900021, 2950022);
  e.u.range.depth = 1;
  cr_assert_eq(pd_trace_add(t, &e), 0);
  return t;
}

static void same_str(const char *a, const char *b, size_t i) {
  if (a == NULL || b == NULL) cr_expect(a == b, "event %zu: name %s vs %s", i, a ? a : "NULL", b ? b : "NULL");
  else cr_expect_str_eq(a, b, "event %zu", i);
}

static void round_trip(int64_t unix_offset_ns) {
  pd_trace_t *src = synthetic();
  pd_trace_meta_t meta = {.trace_name = "round trip", .unix_offset_ns = unix_offset_ns, .pid = 4242,
                          .profile_memory = true, .process_name = "test"};
  const char *path = in_dir("rt.pt.trace.json");
  cr_assert_eq(pd_trace_write_file(path, src, &meta), 0);
  pd_trace_info_t info;
  pd_trace_t *got = read_ok(path, &info);
  int64_t base = unix_offset_ns / 1000000000LL * 1000000000LL;
  int64_t shift = unix_offset_ns - base; /* ts counts from the rounded base */
  cr_expect_eq(info.base_time_ns, base);
  cr_expect_str_eq(info.trace_name, "round trip");
  cr_expect(!info.gzipped);
  cr_expect(!info.torch);

  cr_expect_eq(info.trace_format, PD_TRACE_FORMAT_VERSION);

  cr_assert_eq(pd_trace_count(got), pd_trace_count(src));
  const pd_event_t *a = pd_trace_events(src), *b = pd_trace_events(got);
  for (size_t i = 0; i < pd_trace_count(src); i++) {
    /* our writer puts host ranges and ops alike under cpu_op (but the step and the data
     * wait): in its traces a cpu_op is a host range */
    pd_event_kind_t kind = a[i].kind == PD_EVENT_CPU_OP ? PD_EVENT_RANGE : a[i].kind;
    cr_assert_eq(b[i].kind, kind, "event %zu kind", i);
    cr_expect_eq(b[i].start_ns, a[i].start_ns + shift, "event %zu start", i);
    cr_expect_eq(b[i].end_ns - b[i].start_ns, a[i].end_ns - a[i].start_ns, "event %zu duration", i);
    same_str(b[i].name, a[i].name, i);
    cr_expect_eq(b[i].correlation_id, a[i].correlation_id, "event %zu correlation", i);
    switch (a[i].kind) {
    case PD_EVENT_KERNEL:
      for (int k = 0; k < 3; k++) {
        cr_expect_eq(b[i].u.kernel.grid[k], a[i].u.kernel.grid[k]);
        cr_expect_eq(b[i].u.kernel.block[k], a[i].u.kernel.block[k]);
      }
      cr_expect_eq(b[i].u.kernel.registers_per_thread, 40);
      cr_expect_eq(b[i].u.kernel.static_smem_bytes + b[i].u.kernel.dynamic_smem_bytes, 4096);
      cr_expect_eq(b[i].device, a[i].device);
      cr_expect_eq(b[i].stream, a[i].stream);
      break;
    case PD_EVENT_MEMCPY:
      cr_expect_eq(b[i].u.memcpy.bytes, a[i].u.memcpy.bytes);
      cr_expect_eq(b[i].u.memcpy.copy_kind, a[i].u.memcpy.copy_kind);
      cr_expect_eq(b[i].u.memcpy.src_kind, a[i].u.memcpy.src_kind);
      cr_expect_eq(b[i].u.memcpy.dst_kind, a[i].u.memcpy.dst_kind);
      cr_expect_eq(b[i].stream, a[i].stream);
      break;
    case PD_EVENT_MEMSET:
      cr_expect_eq(b[i].u.memset.bytes, a[i].u.memset.bytes);
      cr_expect_eq(b[i].u.memset.dst_kind, a[i].u.memset.dst_kind);
      break;
    case PD_EVENT_RUNTIME:
    case PD_EVENT_DRIVER:
      cr_expect_eq(b[i].u.api.cbid, a[i].u.api.cbid);
      cr_expect_eq(b[i].pid, a[i].pid);
      cr_expect_eq(b[i].tid, a[i].tid);
      break;
    case PD_EVENT_SYNC:
      cr_expect_eq(b[i].u.sync.sync_kind, a[i].u.sync.sync_kind);
      cr_expect_eq(b[i].stream, a[i].stream);
      cr_expect_eq(b[i].u.sync.has_wait, a[i].u.sync.has_wait, "event %zu: the wait", i);
      cr_expect_eq(b[i].u.sync.wait_stream, a[i].u.sync.wait_stream);
      cr_expect_eq(b[i].u.sync.event_record_corr, a[i].u.sync.event_record_corr);
      break;
    case PD_EVENT_RANGE:
    case PD_EVENT_CPU_OP:
      cr_expect_eq(b[i].u.range.step, a[i].u.range.step, "event %zu step", i);
      cr_expect_eq(b[i].u.range.depth, a[i].u.range.depth, "event %zu depth", i);
      same_str(b[i].u.range.shape, a[i].u.range.shape, i);
      same_str(b[i].u.range.stack, a[i].u.range.stack, i); /* "Call stack" */
      cr_expect_eq(b[i].pid, a[i].pid);
      cr_expect_eq(b[i].tid, a[i].tid);
      break;
    case PD_EVENT_GPU_RANGE:
      cr_expect_eq(b[i].u.range.step, -1);
      break;
    case PD_EVENT_MEMORY:
      cr_expect_eq(b[i].u.memory.address, a[i].u.memory.address);
      cr_expect_eq(b[i].u.memory.bytes, a[i].u.memory.bytes);
      cr_expect_eq(b[i].u.memory.total_allocated, a[i].u.memory.total_allocated);
      cr_expect_eq(b[i].u.memory.mem_kind, a[i].u.memory.mem_kind);
      cr_expect_eq(b[i].pid, a[i].pid);
      break;
    default:
      break;
    }
  }
  cr_assert_eq(pd_trace_device_count(got), 1u);
  pd_device_props_t want = pd_test_h100();
  const pd_device_props_t *d = pd_trace_devices(got);
  cr_expect(memcmp(d, &want, sizeof want) == 0, "device properties survive");
  pd_trace_destroy(src);
  pd_trace_destroy(got);
}

Test(reader, round_trip_zero_offset, .init = make_dir, .fini = remove_dir) {
  round_trip(0);
}

Test(reader, round_trip_unix_offset, .init = make_dir, .fini = remove_dir) {
  round_trip(1795239691123456789LL);
}

Test(reader, round_trip_gzip, .init = make_dir, .fini = remove_dir) {
  pd_trace_t *src = synthetic();
  const char *plain = in_dir("t.json"), *gz = in_dir("t.json.gz");
  pd_trace_meta_t meta = {.profile_memory = true, .pid = 1};
  cr_assert_eq(pd_trace_write_file(plain, src, &meta), 0);
  FILE *f = fopen(plain, "rb");
  gzFile g = gzopen(gz, "wb");
  cr_assert(f != NULL && g != NULL);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) cr_assert_eq(gzwrite(g, buf, (unsigned)n), (int)n);
  fclose(f);
  cr_assert_eq(gzclose(g), Z_OK);
  pd_trace_info_t ia, ib;
  pd_trace_t *a = read_ok(plain, &ia), *b = read_ok(gz, &ib);
  cr_expect(!ia.gzipped);
  cr_expect(ib.gzipped);
  cr_expect_eq(ia.text_bytes, ib.text_bytes);
  cr_assert_eq(pd_trace_count(a), pd_trace_count(b));
  for (size_t i = 0; i < pd_trace_count(a); i++) {
    cr_expect_eq(pd_trace_events(a)[i].start_ns, pd_trace_events(b)[i].start_ns);
    cr_expect_eq(pd_trace_events(a)[i].kind, pd_trace_events(b)[i].kind);
  }
  pd_trace_destroy(a);
  pd_trace_destroy(b);
  pd_trace_destroy(src);
}

/* The writer gzips a path ending in .gz as it writes (profiler_demo --trace_gzip): the
 * file is gzip and reads back to the same events and text as the plain one. */
Test(reader, writer_gzips_gz_paths_in_one_pass, .init = make_dir, .fini = remove_dir) {
  pd_trace_t *src = synthetic();
  const char *plain = in_dir("w.json"), *gz = in_dir("w.pt.trace.json.gz");
  pd_trace_meta_t meta = {.profile_memory = true, .pid = 1, .trace_name = "same"};
  cr_assert_eq(pd_trace_write_file(plain, src, &meta), 0);
  cr_assert_eq(pd_trace_write_file(gz, src, &meta), 0);
  pd_trace_info_t ia, ib;
  pd_trace_t *a = read_ok(plain, &ia), *b = read_ok(gz, &ib);
  cr_expect(!ia.gzipped);
  cr_expect(ib.gzipped, "a .gz path is written gzipped");
  cr_expect_eq(ia.text_bytes, ib.text_bytes);
  cr_expect_eq(pd_trace_count(a), pd_trace_count(b));
  pd_trace_destroy(a);
  pd_trace_destroy(b);
  pd_trace_destroy(src);
}

/* ---- JSON in memory ----------------------------------------------------------------------- */

Test(reader, old_spellings_and_odd_rows) {
  static const char json[] =
      "{\"traceEvents\":["
      "{\"ph\":\"X\",\"cat\":\"Operator\",\"name\":\"ProfilerStep#7\",\"pid\":1,\"tid\":2,\"ts\":10,\"dur\":100},"
      "{\"ph\":\"X\",\"cat\":\"Runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1,\"tid\":2,\"ts\":20,\"dur\":5,"
      "\"args\":{\"correlation\":9,\"cbid\":211}},"
      "{\"ph\":\"X\",\"cat\":\"Kernel\",\"name\":\"k\",\"pid\":0,\"tid\":\"stream 7\",\"ts\":30,\"dur\":10,"
      "\"args\":{\"correlation\":9,\"grid\":[1,2],\"block\":[32,1,1,9]}},"
      "{\"ph\":\"X\",\"cat\":\"Memcpy\",\"name\":\"Memcpy Weird\",\"pid\":0,\"tid\":7,\"ts\":41,\"dur\":1,"
      "\"args\":{\"bytes\":8}},"
      "{\"ph\":\"X\",\"cat\":\"Memset\",\"name\":\"Memset (Nowhere)\",\"pid\":0,\"tid\":7,\"ts\":42,\"dur\":1},"
      "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":\"My Sync\",\"pid\":0,\"tid\":7,\"ts\":43,\"dur\":1},"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::mm\",\"pid\":1,\"tid\":2,\"ts\":44,\"dur\":1,"
      "\"args\":{\"Input Dims\":[[2.5,\"x\",null]],\"External id\":5}},"
      "{\"ph\":\"X\",\"cat\":\"python_function\",\"name\":\"f\",\"pid\":1,\"tid\":2,\"ts\":45,\"dur\":1},"
      "{\"ph\":\"X\",\"cat\":\"mystery\",\"name\":\"m\",\"pid\":1,\"tid\":2,\"ts\":46,\"dur\":1},"
      "{\"ph\":\"B\",\"cat\":\"cpu_op\",\"name\":\"b\",\"pid\":1,\"tid\":2,\"ts\":47},"
      "{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"name\":\"other instant\",\"pid\":1,\"tid\":2,\"ts\":48},"
      "{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"name\":\"[memory]\",\"pid\":1,\"tid\":2,\"ts\":49,"
      "\"args\":{\"Bytes\":64}},"
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#x\",\"pid\":\"Spans\",\"tid\":-3,"
      "\"ts\":\"50.5\",\"dur\":\"4\"},"
      "42, \"text\""
      "]}";
  pd_trace_t *t = pd_trace_create();
  pd_trace_info_t info;
  char err[256];
  cr_assert_eq(pd_trace_read_buffer(json, strlen(json), t, &info, err, sizeof err), 0, "%s", err);
  cr_expect_eq(info.json_events, 15u);
  cr_assert_eq(pd_trace_count(t), 9u);
  cr_expect_eq(info.skipped, 6u);
  cr_expect(info.torch, "an External id marks a torch trace");
  cr_expect_eq(info.schema_version, -1);
  cr_expect_eq(info.base_time_ns, 0);
  const pd_event_t *e = pd_trace_events(t);
  cr_expect_eq(e[0].kind, PD_EVENT_RANGE, "torch 1.x ProfilerStep op becomes the step range");
  cr_expect_eq(e[0].u.range.step, 7);
  cr_expect_eq(e[0].start_ns, 10000);
  cr_expect_eq(e[0].end_ns, 110000);
  cr_expect_eq(e[1].kind, PD_EVENT_RUNTIME);
  cr_expect_eq(e[1].u.api.cbid, 211u);
  cr_expect_eq(e[2].kind, PD_EVENT_KERNEL);
  cr_expect_eq(e[2].stream, 7u, "trailing digits of a string tid");
  cr_expect_eq(e[2].u.kernel.grid[1], 2);
  cr_expect_eq(e[2].u.kernel.grid[2], 0);
  cr_expect_eq(e[2].u.kernel.block[0], 32);
  cr_expect_eq(e[3].kind, PD_EVENT_MEMCPY);
  cr_expect_str_eq(e[3].name, "Memcpy Weird", "an unknown copy name is kept");
  cr_expect_eq(e[4].kind, PD_EVENT_MEMSET);
  cr_expect_str_eq(e[4].name, "Memset (Nowhere)");
  cr_expect_eq(e[5].kind, PD_EVENT_SYNC);
  cr_expect_str_eq(e[5].name, "My Sync");
  cr_expect_eq(e[6].kind, PD_EVENT_CPU_OP);
  cr_expect_str_eq(e[6].u.range.shape, "[[2.5, 'x', None]]");
  cr_expect_eq(e[6].u.range.depth, 1u, "nested in the step range");
  cr_expect_eq(e[7].kind, PD_EVENT_MEMORY);
  cr_expect_eq(e[7].u.memory.bytes, 64);
  cr_expect_eq(e[7].u.memory.total_allocated, -1);
  cr_expect_eq(e[7].u.memory.mem_kind, PD_MEM_UNKNOWN);
  cr_expect_eq(e[8].kind, PD_EVENT_RANGE);
  cr_expect_eq(e[8].u.range.step, -1, "ProfilerStep#x is no step");
  cr_expect_eq(e[8].pid, 0u);
  cr_expect_eq(e[8].tid, (uint32_t)-3);
  cr_expect_eq(e[8].start_ns, 50500, "ts given as a string holding a number");
  cr_expect_eq(e[8].end_ns, 54500, "dur given as a string holding a number");
  pd_trace_destroy(t);
}

Test(reader, long_shape_is_cut) {
  /* 3000 dims of 5 digits: far past the shape limit */
  size_t cap = 3000 * 8 + 256;
  char *json = malloc(cap);
  cr_assert_not_null(json);
  size_t n = (size_t)snprintf(json, cap, "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"op\","
                                         "\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1,\"args\":{\"Input Dims\":[[");
  for (int i = 0; i < 3000; i++) n += (size_t)snprintf(json + n, cap - n, "%s12345", i ? "," : "");
  n += (size_t)snprintf(json + n, cap - n, "]]}}]}");
  pd_trace_t *t = pd_trace_create();
  char err[256];
  cr_assert_eq(pd_trace_read_buffer(json, n, t, NULL, err, sizeof err), 0, "%s", err);
  const char *shape = pd_trace_events(t)[0].u.range.shape;
  cr_assert_not_null(shape);
  cr_expect_lt(strlen(shape), 4200u);
  cr_expect(strstr(shape, "...") != NULL);
  pd_trace_destroy(t);
  free(json);
}

Test(reader, us_to_ns) {
  cr_expect_eq(pd_trace_us_to_ns(1.0), 1000);
  cr_expect_eq(pd_trace_us_to_ns(26085218.177), 26085218177LL);
  cr_expect_eq(pd_trace_us_to_ns(0.0005), 1, "halves round away from zero");
  cr_expect_eq(pd_trace_us_to_ns(-1.5), -1500);
  cr_expect_eq(pd_trace_us_to_ns(NAN), 0);
  cr_expect_eq(pd_trace_us_to_ns(1e300), INT64_MAX);
  cr_expect_eq(pd_trace_us_to_ns(-1e300), INT64_MIN);
  /* the largest ts in the fixtures: ~4.4e12 us, within 1 ns */
  cr_expect_leq(llabs(pd_trace_us_to_ns(4380605064562.752) - 4380605064562752LL), 1);
}

/* ---- bad input ---------------------------------------------------------------------------------- */

static void expect_error(const char *path, int want, const char *words) {
  pd_trace_t *t = pd_trace_create();
  pd_event_t e = host_ev(PD_EVENT_RANGE, "stale", 1, 2);
  cr_assert_eq(pd_trace_add(t, &e), 0);
  char err[512] = "";
  int rc = pd_trace_read_file(path, t, err, sizeof err);
  cr_expect_eq(rc, want, "%s: rc %d (%s)", path, rc, err);
  cr_expect(strstr(err, words) != NULL, "message '%s' lacks '%s'", err, words);
  cr_expect(strchr(err, '\n') == NULL, "one line");
  cr_expect_eq(pd_trace_count(t), 0u, "nothing partial is left");
  pd_trace_destroy(t);
}

Test(reader, bad_input, .init = make_dir, .fini = remove_dir) {
  expect_error(in_dir("missing.json"), PD_EIO, "No such file");
  expect_error(g_dir, PD_EIO, "not a regular file");
  write_text(in_dir("empty.json"), "");
  expect_error(in_dir("empty.json"), PD_EPARSE, "empty");
  write_text(in_dir("bad.json"), "{\"traceEvents\": [ {\"ph\": \"X\", }");
  expect_error(in_dir("bad.json"), PD_EPARSE, "not valid JSON");
  write_text(in_dir("noevents.json"), "{\"schemaVersion\": 1, \"events\": []}");
  expect_error(in_dir("noevents.json"), PD_EPARSE, "no traceEvents array");
  write_text(in_dir("notarray.json"), "{\"traceEvents\": {}}");
  expect_error(in_dir("notarray.json"), PD_EPARSE, "traceEvents");
  write_text(in_dir("array.json"), "[1, 2, 3]");
  expect_error(in_dir("array.json"), PD_EPARSE, "traceEvents");

  /* a gzip stream cut in half */
  const char *gz = in_dir("cut.json.gz");
  gzFile g = gzopen(gz, "wb");
  cr_assert_not_null(g);
  for (int i = 0; i < 20000; i++) gzprintf(g, "{\"ph\":\"X\",\"ts\":%d,\"noise\":%u},", i, (unsigned)(i * 2654435761u));
  gzclose(g);
  FILE *f = fopen(gz, "r+b");
  cr_assert_not_null(f);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  cr_assert_eq(truncate(gz, size / 2), 0);
  expect_error(gz, PD_EPARSE, "cut.json.gz");

  char err[64];
  pd_trace_t *t = pd_trace_create();
  cr_expect_eq(pd_trace_read_file(NULL, t, err, sizeof err), PD_EINVAL);
  cr_expect_eq(pd_trace_read_file("x", NULL, NULL, 0), PD_EINVAL);
  cr_expect_eq(pd_trace_read_buffer(NULL, 0, t, NULL, err, sizeof err), PD_EINVAL);
  cr_expect_eq(pd_trace_read_buffer("{}", 2, t, NULL, NULL, 0), PD_EPARSE, "no err buffer is fine");
  pd_trace_destroy(t);
}

/* ---- kernel name demangling --------------------------------------------------------------- */

/* Expected texts are c++filt's output up to the parameter list (return type dropped). */
static const struct {
  const char *mangled, *readable;
} k_names[] = {
    {"_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d67813k_im2col_nhwcI6__halfLb0EEEvPKT_iiiiiiPS2_",
     "(anonymous namespace)::k_im2col_nhwc<__half, false>"},
    {"_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d67812k_grad_checkEPKflP11cnn_state_t",
     "(anonymous namespace)::k_grad_check"},
    {"_ZN7cutlass7Kernel2I61cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_32x1_nt_align2EEvNT_6ParamsE",
     "cutlass::Kernel2<cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_32x1_nt_align2>"},
    {"_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT4_EEPKT2_",
     "cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, "
     "false, false>"},
    {"_Z1fI1AI1BIiEEEvv", "f<A<B<int> > >"},
    {"_Z3fooILj5ELl3ELin2EEvv", "foo<5u, 3l, -2>"},
    {"_ZN2ns3barIPKcRiEEvv", "ns::bar<char const*, int&>"},
    /* not understood by the project's demangler: kept as they are, or, where the process
     * has the C++ runtime's demangler (an ASan build does: its runtime brings libstdc++),
     * as that one prints them (runtime_or_raw below) */
    {"_ZN3fooC1Ev", "_ZN3fooC1Ev"},
    {"_ZSt4cout", "_ZSt4cout"},
    {"_ZN3fo", "_ZN3fo"},
    {"_Z1fIT_Evv", "_Z1fIT_Evv"},
    {"_Z99short", "_Z99short"},
    {"_Z1fILf3EEvv", "_Z1fILf3EEvv"},
    {"void at::native::kernel<float>(int)", "void at::native::kernel<float>(int)"},
};

/* The C++ runtime's demangling of m where this process has it, else m itself: what
 * pd_demangle's fallback gives for a name the project's own demangler does not cover. */
static const char *runtime_or_raw(const char *m, char *buf, size_t len) {
  return pd_demangle_cxx_runtime(m, buf, len) ? buf : m;
}

Test(reader, kernel_names_demangled) {
  char json[8192];
  size_t n = (size_t)snprintf(json, sizeof json, "{\"traceEvents\":[");
  size_t count = sizeof k_names / sizeof k_names[0];
  for (size_t i = 0; i < count; i++)
    n += (size_t)snprintf(json + n, sizeof json - n,
                          "%s{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"%s\",\"pid\":0,\"tid\":7,\"ts\":%zu,\"dur\":1}",
                          i ? "," : "", k_names[i].mangled, i + 1);
  n += (size_t)snprintf(json + n, sizeof json - n,
                        ",{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"_Z1fv\",\"pid\":1,\"tid\":1,\"ts\":99,\"dur\":1}]}");
  cr_assert_lt(n, sizeof json);
  pd_trace_t *t = pd_trace_create();
  char err[256];
  cr_assert_eq(pd_trace_read_buffer(json, n, t, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(pd_trace_count(t), count + 1);
  char rt[512];
  for (size_t i = 0; i < count; i++) {
    /* rows the project's demangler understands give their readable form in any process */
    const bool ours = strcmp(k_names[i].readable, k_names[i].mangled) != 0;
    const char *want = ours ? k_names[i].readable : runtime_or_raw(k_names[i].mangled, rt, sizeof rt);
    cr_expect_str_eq(pd_trace_events(t)[i].name, want, "%s", k_names[i].mangled);
  }
  cr_expect_str_eq(pd_trace_events(t)[count].name, "_Z1fv", "only kernel names are demangled");
  pd_trace_destroy(t);
}

/* A name the project's demangler gives up on (a lambda, std::, substitutions: most of
 * PyTorch's kernels) is demangled by the C++ runtime's __cxa_demangle where the process has
 * it, as Kineto writes it; a PyTorch program under pd_run always has it loaded. Here the
 * test loads libstdc++ itself (in its own process: Criterion forks per test). */
Test(reader, cxx_runtime_demangles_what_ours_cannot) {
  static const char torch_kernel[] = "_ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_"
                                     "cudaERNS_18TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_";
  char buf[512];
  /* RTLD_LOCAL, as Python loads PyTorch's libraries: not in the global scope */
  void *h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "libstdc++.so.6: %s", dlerror());
  cr_assert(pd_demangle(torch_kernel, buf, sizeof buf));
  cr_expect_str_eq(buf,
                   "void at::native::vectorized_elementwise_kernel<8, at::native::float16_copy_kernel_cuda("
                   "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
                   "at::native::float16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
                   "std::array<char*, 2ul>)");
  /* ours still answers first where it can: our kernels keep their short names */
  cr_assert(pd_demangle("_ZN12_GLOBAL__N_17k_adamwEv", buf, sizeof buf));
  cr_expect_str_eq(buf, "(anonymous namespace)::k_adamw");
  /* cut to fit, never overrun */
  char small[16];
  cr_assert(pd_demangle(torch_kernel, small, sizeof small));
  cr_expect_eq(strlen(small), sizeof small - 1);
  /* not mangled, or not a name: false */
  cr_expect_not(pd_demangle("_Zxyz", buf, sizeof buf));
  cr_expect_not(pd_demangle("cudaLaunchKernel", buf, sizeof buf));
}

/* profiler_demo writes each host range once more as a cpu_op (same row, times, name and
 * External id) for torch-tb-profiler; the reader keeps one op, and tells the trace from
 * torch.profiler's by its traceWriter key. */
static size_t count_kind(const pd_trace_t *t, pd_event_kind_t kind) {
  size_t n = 0;
  for (size_t i = 0; i < pd_trace_count(t); i++) n += pd_trace_events(t)[i].kind == kind;
  return n;
}

Test(reader, our_cpu_op_copies_are_one_op) {
  static const char ours[] =
      "{\"schemaVersion\":1,\"trace_id\":\"AB\",\"traceWriter\":\"profiler_demo 0.1.0\",\"traceEvents\":["
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"conv\",\"pid\":1,\"tid\":2,\"ts\":10,\"dur\":5,"
      "\"args\":{\"External id\":7}},"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"conv\",\"pid\":1,\"tid\":2,\"ts\":10,\"dur\":5,"
      "\"args\":{\"External id\":7}},"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::add\",\"pid\":1,\"tid\":2,\"ts\":11,\"dur\":1}"
      "],\"traceName\":\"x\"}";
  char err[256];
  pd_trace_info_t info;
  pd_trace_t *t = pd_trace_create();
  cr_assert_eq(pd_trace_read_buffer(ours, strlen(ours), t, &info, err, sizeof err), 0, "%s", err);
  cr_expect_eq(count_kind(t, PD_EVENT_RANGE), 1, "the annotation");
  cr_expect_eq(count_kind(t, PD_EVENT_CPU_OP), 1, "aten::add only: the copy of conv is dropped");
  cr_expect(!info.torch, "traceWriter names profiler_demo");
  cr_expect_eq(info.trace_format, 1, "no traceFormatVersion: format 1");
  pd_trace_destroy(t);

  /* the same events from torch (no traceWriter): External id and trace_id say torch */
  static const char torch[] =
      "{\"schemaVersion\":1,\"trace_id\":\"AB\",\"traceEvents\":["
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::add\",\"pid\":1,\"tid\":2,\"ts\":11,\"dur\":1,"
      "\"args\":{\"External id\":3}}]}";
  t = pd_trace_create();
  cr_assert_eq(pd_trace_read_buffer(torch, strlen(torch), t, &info, err, sizeof err), 0, "%s", err);
  cr_expect(info.torch);
  pd_trace_destroy(t);

  /* a traceWriter that is not a string is skipped whole, and what follows still reads */
  static const char odd[] = "{\"traceWriter\":{\"a\":[1,2]},\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"kernel\","
                            "\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":1,\"dur\":2}],\"traceName\":\"y\"}";
  t = pd_trace_create();
  cr_assert_eq(pd_trace_read_buffer(odd, strlen(odd), t, &info, err, sizeof err), 0, "%s", err);
  cr_expect_eq(count_kind(t, PD_EVENT_KERNEL), 1);
  cr_expect_str_eq(info.trace_name, "y");
  pd_trace_destroy(t);
}

/* Format 2 writes each host range once: the step and the data wait as user_annotation,
 * the rest as cpu_op, which in our traces are host ranges (RANGE), nothing dropped; a
 * range and an op of the same times and name are two ranges then. The version is
 * range-checked. */
Test(reader, format_2_cpu_ops_are_our_ranges) {
  static const char v2[] =
      "{\"schemaVersion\":1,\"traceWriter\":\"profiler_demo 0.2.0\",\"traceFormatVersion\":2,\"traceEvents\":["
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#4\",\"pid\":1,\"tid\":2,\"ts\":1,\"dur\":50},"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"conv\",\"pid\":1,\"tid\":2,\"ts\":10,\"dur\":5,"
      "\"args\":{\"External id\":7}},"
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"conv\",\"pid\":1,\"tid\":2,\"ts\":10,\"dur\":4.999,"
      "\"args\":{\"External id\":8}}"
      "],\"traceName\":\"x\"}";
  char err[256];
  pd_trace_info_t info;
  pd_trace_t *t = pd_trace_create();
  cr_assert_eq(pd_trace_read_buffer(v2, strlen(v2), t, &info, err, sizeof err), 0, "%s", err);
  cr_expect_eq(info.trace_format, 2);
  cr_expect_eq(count_kind(t, PD_EVENT_RANGE), 3, "the step and two conv ranges");
  cr_expect_eq(count_kind(t, PD_EVENT_CPU_OP), 0);
  cr_expect_eq(pd_trace_events(t)[0].u.range.step, 4);
  pd_trace_destroy(t);

  /* torch's cpu_op stay ops: no traceWriter, no format */
  static const char torch[] = "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::mm\","
                              "\"pid\":1,\"tid\":2,\"ts\":1,\"dur\":2}]}";
  t = pd_trace_create();
  cr_assert_eq(pd_trace_read_buffer(torch, strlen(torch), t, &info, err, sizeof err), 0, "%s", err);
  cr_expect_eq(info.trace_format, 0, "another writer");
  cr_expect_eq(count_kind(t, PD_EVENT_CPU_OP), 1);
  pd_trace_destroy(t);

  static const char *const bad[] = {"0", "-1", "1001", "\"2\""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[256];
    snprintf(text, sizeof text, "{\"traceFormatVersion\":%s,\"traceEvents\":[]}", bad[i]);
    t = pd_trace_create();
    cr_expect_eq(pd_trace_read_buffer(text, strlen(text), t, &info, err, sizeof err), PD_EPARSE, "%s", bad[i]);
    cr_expect(strstr(err, "traceFormatVersion") != NULL, "%s: %s", bad[i], err);
    pd_trace_destroy(t);
  }
}

/* Both generations of our trace: the older one wrote driver launches as cuda_driver and the
 * mangled name on each kernel; the newer one files driver launches under cuda_runtime,
 * adds queued, finished, fwdbwd flows and the top-level mangledNames. Same events either
 * way. */
Test(reader, old_and_new_writer_generations) {
  static const char old_gen[] =
      "{\"traceWriter\":\"profiler_demo 0.1.0\",\"traceEvents\":["
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"conv1.forward\",\"pid\":1,\"tid\":2,\"ts\":10,\"dur\":50},"
      "{\"ph\":\"X\",\"cat\":\"cuda_driver\",\"name\":\"cuLaunchKernelEx\",\"pid\":1,\"tid\":2,\"ts\":11,\"dur\":2,"
      "\"args\":{\"cbid\":652,\"correlation\":9}},"
      "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k_tiny_op\",\"pid\":0,\"tid\":7,\"ts\":20,\"dur\":3,"
      "\"args\":{\"device\":0,\"stream\":7,\"correlation\":9,\"warps per SM\":1.5,\"mangled name\":\"_Z9k_tiny_opv\"}},"
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"conv1.backward\",\"pid\":1,\"tid\":2,\"ts\":70,\"dur\":5},"
      "{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"s\":\"t\",\"name\":\"[memory]\",\"pid\":1,\"tid\":2,\"ts\":80,"
      "\"args\":{\"Bytes\":64,\"Total Allocated\":64,\"Device Id\":0,\"Device Type\":1,\"Addr\":4096}}"
      "],\"traceName\":\"old\"}";
  static const char new_gen[] =
      "{\"traceWriter\":\"profiler_demo 0.2.0\",\"traceEvents\":["
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"conv1.forward\",\"pid\":1,\"tid\":2,\"ts\":10,\"dur\":50},"
      "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cuLaunchKernelEx\",\"pid\":1,\"tid\":2,\"ts\":11,\"dur\":2,"
      "\"args\":{\"cbid\":652,\"correlation\":9}},"
      "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k_tiny_op\",\"pid\":0,\"tid\":7,\"ts\":20,\"dur\":3,"
      "\"args\":{\"queued\":0,\"device\":0,\"stream\":7,\"correlation\":9}},"
      "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"conv1.backward\",\"pid\":1,\"tid\":2,\"ts\":70,\"dur\":5},"
      "{\"ph\":\"s\",\"id\":1,\"pid\":1,\"tid\":2,\"ts\":10,\"cat\":\"fwdbwd\",\"name\":\"fwdbwd\"},"
      "{\"ph\":\"f\",\"id\":1,\"pid\":1,\"tid\":2,\"ts\":70,\"cat\":\"fwdbwd\",\"name\":\"fwdbwd\",\"bp\":\"e\"},"
      "{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"s\":\"t\",\"name\":\"[memory]\",\"pid\":1,\"tid\":2,\"ts\":80,"
      "\"args\":{\"Bytes\":64,\"Total Allocated\":64,\"Device Id\":0,\"Device Type\":1,\"Addr\":4096,"
      "\"finished\":false}}"
      "],\"mangledNames\":{\"_Z9k_tiny_opv\":\"k_tiny_op\"},\"traceName\":\"new\"}";
  const char *const texts[] = {old_gen, new_gen};
  for (int g = 0; g < 2; g++) {
    char err[256];
    pd_trace_info_t info;
    pd_trace_t *t = pd_trace_create();
    cr_assert_eq(pd_trace_read_buffer(texts[g], strlen(texts[g]), t, &info, err, sizeof err), 0, "%s", err);
    cr_assert_eq(pd_trace_count(t), 5u, "generation %d", g);
    const pd_event_t *e = pd_trace_events(t);
    cr_expect_eq(e[1].kind, PD_EVENT_DRIVER, "generation %d: the driver launch stays a driver call", g);
    cr_expect_eq(e[1].u.api.cbid, 652u);
    cr_expect_eq(e[1].correlation_id, 9u);
    cr_expect_eq(e[2].kind, PD_EVENT_KERNEL);
    cr_expect_str_eq(e[2].name, "k_tiny_op");
    cr_expect_eq(e[4].kind, PD_EVENT_MEMORY);
    cr_expect_eq(e[4].u.memory.bytes, 64);
    cr_expect_eq(info.skipped, g == 0 ? 0u : 2u, "the fwdbwd flows are skipped");
    cr_expect_str_eq(info.trace_name, g == 0 ? "old" : "new", "mangledNames does not stop the read");
    pd_trace_destroy(t);
  }
  /* a runtime name under cuda_runtime stays a runtime call */
  cr_expect(!pd_api_name_is_driver("cudaLaunchKernel"));
  cr_expect(pd_api_name_is_driver("cuLaunchKernelEx") && pd_api_name_is_driver_launch("cuLaunchKernelEx_ptsz"));
  cr_expect(pd_api_name_is_driver("cuCtxSynchronize") && !pd_api_name_is_driver_launch("cuCtxSynchronize"));
  cr_expect(pd_api_name_is_driver_launch("cuGraphLaunch") && pd_api_name_is_driver_launch("cuLaunchCooperativeKernel"));
  cr_expect(!pd_api_name_is_driver(NULL) && !pd_api_name_is_driver("cu") && !pd_api_name_is_driver_launch(NULL));
}

/* Kineto's Stream Wait Event and Event Sync name the recording stream and the
 * cudaEventRecord call (the replay's record -> wait edge); a Stream Sync does not. */
Test(reader, sync_records_keep_their_wait_stream_and_record) {
  const char *json =
      "{\"traceEvents\":["
      "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":\"Stream Wait Event\",\"pid\":0,\"tid\":9,\"ts\":1,\"dur\":1,"
      "\"args\":{\"device\":0,\"stream\":9,\"correlation\":5,\"wait_on_stream\":7,"
      "\"wait_on_cuda_event_record_corr_id\":4}},"
      "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":\"Stream Sync\",\"pid\":0,\"tid\":7,\"ts\":3,\"dur\":1,"
      "\"args\":{\"device\":0,\"stream\":7,\"correlation\":6}},"
      "{\"ph\":\"X\",\"cat\":\"cuda_sync\",\"name\":\"Event Sync\",\"pid\":0,\"tid\":7,\"ts\":5,\"dur\":1,"
      "\"args\":{\"device\":0,\"stream\":-1,\"correlation\":8,\"wait_on_stream\":-1,"
      "\"wait_on_cuda_event_record_corr_id\":4}}"
      "]}";
  pd_trace_t *t = pd_trace_create();
  char err[256];
  cr_assert_eq(pd_trace_read_buffer(json, strlen(json), t, NULL, err, sizeof err), 0, "%s", err);
  cr_assert_eq(pd_trace_count(t), 3u);
  const pd_event_t *e = pd_trace_events(t);
  cr_expect_eq(e[0].u.sync.sync_kind, PD_SYNC_STREAM_WAIT_EVENT);
  cr_expect(e[0].u.sync.has_wait);
  cr_expect_eq(e[0].u.sync.wait_stream, 7u);
  cr_expect_eq(e[0].u.sync.event_record_corr, 4u);
  cr_expect_eq(e[1].u.sync.sync_kind, PD_SYNC_STREAM);
  cr_expect(!e[1].u.sync.has_wait);
  cr_expect(!e[2].u.sync.has_wait, "a negative stream is none");
  pd_trace_destroy(t);
}

/* profiler_demo's profilerCost.calibration comes back with the trace (the replay takes it
 * out to predict the unprofiled step); a figure that is no number or out of range does not. */
/* Top-level "stepRange" (pd_run --step_range): a string is kept; anything else (a number,
 * null, a name of PD_TRACE_STEP_RANGE_MAX bytes or more, one holding a NUL) is none; reset
 * clears it. */
Test(reader, step_range) {
  char err[256];
  pd_trace_t *t = pd_trace_create();
  cr_expect_null(pd_trace_step_range(t), "a new trace has none");
  const char *ok = "{\"stepRange\":\"train_step\",\"traceEvents\":[]}";
  cr_assert_eq(pd_trace_read_buffer(ok, strlen(ok), t, NULL, err, sizeof err), 0, "%s", err);
  cr_expect_str_eq(pd_trace_step_range(t), "train_step");
  pd_trace_reset(t);
  cr_expect_null(pd_trace_step_range(t), "reset clears it");
  char long_name[PD_TRACE_STEP_RANGE_MAX + 64];
  int len = snprintf(long_name, sizeof long_name, "{\"stepRange\":\"%0*d\",\"traceEvents\":[]}",
                     PD_TRACE_STEP_RANGE_MAX, 7);
  const char *bad[] = {"{\"stepRange\":7,\"traceEvents\":[]}", "{\"stepRange\":null,\"traceEvents\":[]}",
                       "{\"stepRange\":\"a\\u0000b\",\"traceEvents\":[]}", "{\"stepRange\":\"\",\"traceEvents\":[]}",
                       long_name};
  cr_assert_lt(len, (int)sizeof long_name);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pd_trace_t *u = pd_trace_create();
    cr_assert_eq(pd_trace_read_buffer(bad[i], strlen(bad[i]), u, NULL, err, sizeof err), 0, "%s", err);
    cr_expect_null(pd_trace_step_range(u), "%.60s", bad[i]);
    pd_trace_destroy(u);
  }
  pd_trace_set_step_range(t, "x");
  pd_trace_set_step_range(t, NULL);
  cr_expect_null(pd_trace_step_range(t), "NULL clears it");
  pd_trace_destroy(t);
}

Test(reader, profiler_cost_calibration) {
  const char *ok = "{\"profilerCost\":{\"est_added_us_per_step\":12.5,\"calibration\":{\"ns_per_cuda_call\":2500.5,"
                   "\"ns_per_host_range\":400,\"other\":[1]}},\"traceEvents\":[]}";
  const char *bad[] = {
      "{\"profilerCost\":{\"calibration\":{\"ns_per_cuda_call\":\"fast\",\"ns_per_host_range\":400}},\"traceEvents\":[]}",
      "{\"profilerCost\":{\"calibration\":{\"ns_per_cuda_call\":-1,\"ns_per_host_range\":400}},\"traceEvents\":[]}",
      "{\"profilerCost\":{\"calibration\":null},\"traceEvents\":[]}",
      "{\"profilerCost\":null,\"traceEvents\":[]}",
      "{\"profilerCost\":{\"calibration\":{\"ns_per_cuda_call\":1e12,\"ns_per_host_range\":1}},\"traceEvents\":[]}",
  };
  char err[256];
  pd_trace_t *t = pd_trace_create();
  double call = 0, range = 0;
  cr_expect(!pd_trace_calibration(t, &call, &range), "a new trace has none");
  cr_assert_eq(pd_trace_read_buffer(ok, strlen(ok), t, NULL, err, sizeof err), 0, "%s", err);
  cr_assert(pd_trace_calibration(t, &call, &range));
  cr_expect_float_eq(call, 2500.5, 1e-9);
  cr_expect_float_eq(range, 400.0, 1e-9);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pd_trace_t *u = pd_trace_create();
    cr_assert_eq(pd_trace_read_buffer(bad[i], strlen(bad[i]), u, NULL, err, sizeof err), 0, "%s", err);
    cr_expect(!pd_trace_calibration(u, NULL, NULL), "%s", bad[i]);
    pd_trace_destroy(u);
  }
  /* the window's candidate cost per call is recorded, not taken: the start calibration is */
  const char *win = "{\"profilerCost\":{\"calibration\":{\"ns_per_cuda_call\":1500,\"ns_per_host_range\":400,"
                    "\"ns_per_cuda_call_window\":3200}},\"traceEvents\":[]}";
  pd_trace_reset(t);
  cr_assert_eq(pd_trace_read_buffer(win, strlen(win), t, NULL, err, sizeof err), 0, "%s", err);
  cr_assert(pd_trace_calibration(t, &call, &range));
  cr_expect_float_eq(call, 1500.0, 1e-9);
  pd_trace_reset(t);
  cr_expect(!pd_trace_calibration(t, NULL, NULL), "reset clears it");
  pd_trace_destroy(t);
}
