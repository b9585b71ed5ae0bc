/* test_trace_writer.c: the Kineto-compatible Chrome trace: a synthetic trace written to
 * a temp dir and read back with cJSON (top-level keys, categories, rows, kernel args,
 * ac2g flow pairing, ts relative to baseTimeNanoseconds, [memory] events, escaping),
 * atomic writing, and the occupancy estimate against Kineto's numbers. */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd/pd_reader.h"
#include "pd/pd_writers.h"
#include "pd/pd_prof.h"
#include "pd_test_util.h"

static char tmpdir[256];

static void make_tmpdir(void) { pd_test_tmpdir_make(tmpdir, sizeof tmpdir, "pd_trace_test"); }
static void remove_tmpdir(void) { pd_test_tmpdir_remove(tmpdir); }

static pd_event_t mk(pd_event_kind_t kind, int64_t start, int64_t end, const char *name, uint64_t corr) {
  return pd_test_event(kind, start, end, name, corr);
}

static const char *const weird_name = "void k<\"q\">(a\\b)\nline2 \xff end";

static pd_trace_t *synthetic_trace(void) {
  pd_trace_t *t = pd_trace_create();
  pd_device_props_t d = pd_test_h100();
  pd_trace_add_device(t, &d);
  pd_event_t step = mk(PD_EVENT_RANGE, 5000000000LL, 5000100000LL, "ProfilerStep#3", 0);
  step.u.range.step = 3;
  pd_trace_add(t, &step);
  pd_event_t fwd = mk(PD_EVENT_RANGE, 5000001000LL, 5000050000LL, "forward", 0);
  fwd.u.range.shape = "[[64, 3, 32, 32], []]";
  pd_trace_add(t, &fwd);
  pd_event_t op = mk(PD_EVENT_CPU_OP, 5000001500LL, 5000002000LL, "aten::conv2d", 0);
  op.u.range.shape = "not a list";
  pd_trace_add(t, &op);
  pd_event_t rt = mk(PD_EVENT_RUNTIME, 5000002000LL, 5000002500LL, "cudaLaunchKernel", 11);
  rt.u.api.cbid = 211;
  pd_trace_add(t, &rt);
  pd_event_t k = mk(PD_EVENT_KERNEL, 5000003000LL, 5000007000LL, weird_name, 11);
  k.device = 0;
  k.stream = 7;
  k.u.kernel.grid[0] = 2048, k.u.kernel.grid[1] = 1, k.u.kernel.grid[2] = 1;
  k.u.kernel.block[0] = 128, k.u.kernel.block[1] = 1, k.u.kernel.block[2] = 1;
  k.u.kernel.registers_per_thread = 32;
  k.u.kernel.static_smem_bytes = 1024;
  k.u.kernel.dynamic_smem_bytes = 1088;
  pd_trace_add(t, &k);
  pd_event_t rt2 = mk(PD_EVENT_RUNTIME, 5000008000LL, 5000009000LL, "cudaMemcpyAsync", 12);
  rt2.u.api.cbid = 41;
  pd_trace_add(t, &rt2);
  pd_event_t cp = mk(PD_EVENT_MEMCPY, 5000010000LL, 5000026960LL, NULL, 12);
  cp.stream = 7;
  cp.u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  cp.u.memcpy.src_kind = PD_MEM_PINNED;
  cp.u.memcpy.dst_kind = PD_MEM_DEVICE;
  cp.u.memcpy.bytes = 786432;
  pd_trace_add(t, &cp);
  pd_event_t ms = mk(PD_EVENT_MEMSET, 5000027000LL, 5000028000LL, NULL, 0);
  ms.stream = 7;
  ms.u.memset.dst_kind = PD_MEM_DEVICE;
  ms.u.memset.bytes = 4;
  pd_trace_add(t, &ms);
  /* a launch whose GPU record was lost, and a GPU record whose launch was lost */
  pd_event_t rt3 = mk(PD_EVENT_RUNTIME, 5000029000LL, 5000029500LL, "cudaLaunchKernel", 13);
  pd_trace_add(t, &rt3);
  pd_event_t k2 = mk(PD_EVENT_KERNEL, 5000030000LL, 5000031000LL, "orphan", 14);
  k2.stream = 8;
  k2.u.kernel.grid[0] = k2.u.kernel.grid[1] = k2.u.kernel.grid[2] = 1;
  k2.u.kernel.block[0] = 32, k2.u.kernel.block[1] = k2.u.kernel.block[2] = 1;
  pd_trace_add(t, &k2);
  pd_event_t sy = mk(PD_EVENT_SYNC, 5000032000LL, 5000033000LL, NULL, 15);
  sy.stream = 7;
  sy.u.sync.sync_kind = PD_SYNC_STREAM;
  pd_trace_add(t, &sy);
  pd_event_t mem = mk(PD_EVENT_MEMORY, 5000034000LL, 5000034000LL, "[memory]", 0);
  mem.u.memory.address = 140163438733312ULL;
  mem.u.memory.bytes = -3584;
  mem.u.memory.total_allocated = 69672960;
  mem.u.memory.mem_kind = PD_MEM_DEVICE;
  pd_trace_add(t, &mem);
  pd_event_t hostmem = mem;
  hostmem.u.memory.mem_kind = PD_MEM_PINNED;
  hostmem.u.memory.total_allocated = -1;
  hostmem.start_ns = hostmem.end_ns = 5000035000LL;
  pd_trace_add(t, &hostmem);
  pd_event_t gr = mk(PD_EVENT_GPU_RANGE, 5000003000LL, 5000040000LL, "train_step", 0);
  gr.stream = 7;
  pd_trace_add(t, &gr);
  pd_event_t ov = mk(PD_EVENT_OVERHEAD, 5000040000LL, 5000041000LL, "Activity Buffer Request", 0);
  pd_trace_add(t, &ov);
  pd_event_t drv = mk(PD_EVENT_DRIVER, 5000042000LL, 5000042100LL, "cuLaunchKernel", 16);
  drv.u.api.cbid = 307;
  pd_trace_add(t, &drv);
  pd_event_t drv2 = mk(PD_EVENT_DRIVER, 5000043000LL, 5000043100LL, "cuCtxSynchronize", 0);
  drv2.u.api.cbid = 17;
  pd_trace_add(t, &drv2);
  return t;
}

static const pd_trace_meta_t meta = {
    .trace_name = "unit_test_trace",
    .unix_offset_ns = 1700000000123456789LL,
    .pid = 4242,
    .profile_memory = true,
    .process_name = "profiler_demo",
};

static cJSON *write_and_parse(const pd_trace_t *t, const pd_trace_meta_t *m, char **text_out) {
  char path[512];
  snprintf(path, sizeof path, "%s/host_1.123.pt.trace.json", tmpdir);
  int rc = pd_trace_write_file(path, t, m);
  cr_assert_eq(rc, 0, "pd_trace_write_file: %s", pd_strerror(rc));
  char *text = pd_test_slurp(path);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "the trace is not valid JSON:\n%.2000s", text);
  if (text_out) *text_out = text;
  else free(text);
  return root;
}

static cJSON *find_event(cJSON *events, const char *ph, const char *cat, const char *name) {
  cJSON *e;
  cJSON_ArrayForEach(e, events) {
    cJSON *p = cJSON_GetObjectItem(e, "ph"), *c = cJSON_GetObjectItem(e, "cat"), *n = cJSON_GetObjectItem(e, "name");
    if (ph && (!p || strcmp(p->valuestring, ph) != 0)) continue;
    if (cat && (!c || !cJSON_IsString(c) || strcmp(c->valuestring, cat) != 0)) continue;
    if (name && (!n || strcmp(n->valuestring, name) != 0)) continue;
    return e;
  }
  return NULL;
}

static double num(cJSON *obj, const char *key) {
  cJSON *v = cJSON_GetObjectItem(obj, key);
  cr_assert(cJSON_IsNumber(v), "key \"%s\" missing or not a number", key);
  return v->valuedouble;
}

TestSuite(trace_writer, .init = make_tmpdir, .fini = remove_tmpdir);

Test(trace_writer, top_level_keys) {
  pd_trace_t *t = synthetic_trace();
  cJSON *root = write_and_parse(t, &meta, NULL);
  cr_expect_eq(num(root, "schemaVersion"), 1);
  cJSON *unit = cJSON_GetObjectItem(root, "displayTimeUnit");
  cr_expect(cJSON_IsString(unit) && strcmp(unit->valuestring, "ms") == 0);
  /* the Unix time of the first event (5 s on the clock) rounded down to a second */
  cr_expect_eq((int64_t)num(root, "baseTimeNanoseconds"), 1700000005000000000LL);
  cr_expect_str_eq(cJSON_GetObjectItem(root, "traceName")->valuestring, "unit_test_trace");
  cJSON *events = cJSON_GetObjectItem(root, "traceEvents");
  cr_assert(cJSON_IsArray(events));
  cJSON *devs = cJSON_GetObjectItem(root, "deviceProperties");
  cr_assert(cJSON_IsArray(devs) && cJSON_GetArraySize(devs) == 1);
  cJSON *d = cJSON_GetArrayItem(devs, 0);
  cr_expect_str_eq(cJSON_GetObjectItem(d, "name")->valuestring, "NVIDIA H100 80GB HBM3");
  cr_expect_eq(num(d, "id"), 0);
  cr_expect_eq(num(d, "totalGlobalMem"), 84929216512.0);
  cr_expect_eq(num(d, "computeMajor"), 9);
  cr_expect_eq(num(d, "computeMinor"), 0);
  cr_expect_eq(num(d, "maxThreadsPerBlock"), 1024);
  cr_expect_eq(num(d, "maxThreadsPerMultiprocessor"), 2048);
  cr_expect_eq(num(d, "regsPerBlock"), 65536);
  cr_expect_eq(num(d, "regsPerMultiprocessor"), 65536);
  cr_expect_eq(num(d, "warpSize"), 32);
  cr_expect_eq(num(d, "sharedMemPerBlock"), 49152);
  cr_expect_eq(num(d, "sharedMemPerMultiprocessor"), 233472);
  cr_expect_eq(num(d, "numSms"), 132);
  cr_expect_eq(num(d, "sharedMemPerBlockOptin"), 232448);
  cJSON_Delete(root);
  pd_trace_destroy(t);

  /* a source that does not know the opt-in limit: the key is left out, not invented */
  t = pd_trace_create();
  pd_device_props_t nd = pd_test_h100();
  nd.max_shared_mem_per_block_optin = 0;
  pd_trace_add_device(t, &nd);
  root = write_and_parse(t, &meta, NULL);
  cr_expect_null(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "deviceProperties"), 0),
                                     "sharedMemPerBlockOptin"));
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

/* The program's per-step range: written as top-level "stepRange" when the meta names it,
 * or, through pd_trace_write_file(), when the trace carries one; read back the same; left
 * out otherwise. The name is escaped as any other. */
Test(trace_writer, step_range_written_and_read_back) {
  pd_trace_t *t = synthetic_trace();
  cJSON *root = write_and_parse(t, &meta, NULL);
  cr_expect_null(cJSON_GetObjectItem(root, "stepRange"), "none named: left out");
  cJSON_Delete(root);
  pd_trace_set_step_range(t, "train \"step\"");
  root = write_and_parse(t, &meta, NULL);
  cJSON *sr = cJSON_GetObjectItem(root, "stepRange");
  cr_assert(cJSON_IsString(sr), "the trace's own step range is written");
  cr_expect_str_eq(sr->valuestring, "train \"step\"");
  cJSON_Delete(root);
  pd_trace_meta_t named = meta;
  named.step_range = "fwd_bwd";
  root = write_and_parse(t, &named, NULL);
  cr_expect_str_eq(cJSON_GetObjectItem(root, "stepRange")->valuestring, "fwd_bwd", "the meta's wins");
  cJSON_Delete(root);
  char path[512], err[256];
  snprintf(path, sizeof path, "%s/host_1.123.pt.trace.json", tmpdir);
  pd_trace_t *back = pd_trace_create();
  cr_assert_eq(pd_trace_read_file_info(path, back, NULL, err, sizeof err), 0, "%s", err);
  cr_expect_str_eq(pd_trace_step_range(back), "fwd_bwd");
  pd_trace_destroy(back);
  pd_trace_destroy(t);
}

Test(trace_writer, categories_rows_and_times) {
  pd_trace_t *t = synthetic_trace();
  char *text = NULL;
  cJSON *root = write_and_parse(t, &meta, &text);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  static const char *const cats[] = {"user_annotation", "cpu_op", "cuda_runtime", "kernel", "gpu_memcpy",
                                     "gpu_memset", "cuda_sync", "cpu_instant_event", "gpu_user_annotation",
                                     "overhead", "cuda_driver"};
  for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
    cr_expect_not_null(find_event(ev, NULL, cats[i], NULL), "no event of category %s", cats[i]);

  /* host rows: pid/tid of the process and thread */
  cJSON *step = find_event(ev, "X", "user_annotation", "ProfilerStep#3");
  cr_assert_not_null(step);
  cr_expect_eq(num(step, "pid"), 4242);
  cr_expect_eq(num(step, "tid"), 4243);
  /* ts: 123456789 ns after the base (the first event's second), in us with 3 decimals;
   * dur 100 us */
  cr_expect(fabs(num(step, "ts") - 123456.789) < 1e-6, "ts %.6f", num(step, "ts"));
  cr_expect(fabs(num(step, "dur") - 100.0) < 1e-9, "dur %.6f", num(step, "dur"));
  cr_expect(strstr(text, "\"ts\":123456.789,\"dur\":100.000") != NULL, "ts text");
  /* GPU rows: pid = device, tid = stream */
  cJSON *cp = find_event(ev, "X", "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)");
  cr_assert_not_null(cp, "memcpy named like Kineto");
  cr_expect_eq(num(cp, "pid"), 0);
  cr_expect_eq(num(cp, "tid"), 7);
  cJSON *a = cJSON_GetObjectItem(cp, "args");
  cr_expect_eq(num(a, "bytes"), 786432);
  cr_expect(fabs(num(a, "memory bandwidth (GB/s)") - 786432.0 / 16960.0) < 1e-6, "bandwidth %f",
            num(a, "memory bandwidth (GB/s)"));
  cr_expect_eq(num(a, "correlation"), 12);
  cr_expect_eq(num(a, "stream"), 7);
  cr_expect_eq(num(a, "device"), 0);
  cr_expect_not_null(find_event(ev, "X", "gpu_memset", "Memset (Device)"));
  cJSON *sy = find_event(ev, "X", "cuda_sync", "Stream Sync");
  cr_assert_not_null(sy);
  /* its own row, Kineto's "stream 7 (sync)": it spans the kernels it waits for */
  cr_expect_eq(num(sy, "tid"), 7 + PD_TRACE_SYNC_TID_OFFSET);
  cr_expect_eq(num(cJSON_GetObjectItem(sy, "args"), "stream"), 7);
  cJSON *gr = find_event(ev, "X", "gpu_user_annotation", "train_step");
  cr_expect_eq(num(gr, "pid"), 0);
  cJSON *rt = find_event(ev, "X", "cuda_runtime", "cudaLaunchKernel");
  cr_expect_eq(num(cJSON_GetObjectItem(rt, "args"), "cbid"), 211);
  cr_expect_eq(num(cJSON_GetObjectItem(rt, "args"), "correlation"), 11);
  cr_expect_eq(num(rt, "tid"), 4243);
  /* a driver kernel launch goes under cuda_runtime (torch-tb-profiler reads launches
   * there only), keeping its driver name; other driver calls stay cuda_driver */
  cJSON *drv = find_event(ev, "X", "cuda_runtime", "cuLaunchKernel");
  cr_assert_not_null(drv, "driver launch under cuda_runtime");
  cr_expect_eq(num(cJSON_GetObjectItem(drv, "args"), "cbid"), 307);
  cr_expect_null(find_event(ev, "X", "cuda_driver", "cuLaunchKernel"));
  cr_expect_not_null(find_event(ev, "X", "cuda_driver", "cuCtxSynchronize"));
  /* shapes: a list is written as Kineto's Input Dims array, anything else as a string */
  cJSON *dims = cJSON_GetObjectItem(cJSON_GetObjectItem(find_event(ev, "X", "cpu_op", "forward"), "args"),
                                    "Input Dims");
  cr_expect(cJSON_IsArray(dims) && cJSON_GetArraySize(dims) == 2, "Input Dims array");
  dims = cJSON_GetObjectItem(cJSON_GetObjectItem(find_event(ev, "X", "cpu_op", "aten::conv2d"), "args"),
                             "Input Dims");
  cr_expect(cJSON_IsString(dims) && strcmp(dims->valuestring, "not a list") == 0);
  /* metadata rows so viewers label them */
  cJSON *m;
  int proc_names = 0, stream_names = 0;
  cJSON_ArrayForEach(m, ev) {
    cJSON *ph = cJSON_GetObjectItem(m, "ph");
    if (!ph || strcmp(ph->valuestring, "M") != 0) continue;
    const char *n = cJSON_GetObjectItem(m, "name")->valuestring;
    const char *arg = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "args"), "name")
                          ? cJSON_GetObjectItem(cJSON_GetObjectItem(m, "args"), "name")->valuestring
                          : "";
    if (strcmp(n, "process_name") == 0 && (strcmp(arg, "profiler_demo") == 0 || strcmp(arg, "GPU 0") == 0))
      proc_names++;
    if (strcmp(n, "thread_name") == 0 && strcmp(arg, "stream 7") == 0) stream_names++;
  }
  cr_expect_eq(proc_names, 2, "process names for host and GPU 0: %d", proc_names);
  cr_expect_eq(stream_names, 1, "one thread_name per stream row: %d", stream_names);
  free(text);
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, kernel_args_and_escaped_name) {
  pd_trace_t *t = synthetic_trace();
  cJSON *root = write_and_parse(t, &meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  cJSON *k = find_event(ev, "X", "kernel", "void k<\"q\">(a\\b)\nline2 \xef\xbf\xbd end");
  cr_assert_not_null(k, "kernel name with quotes, backslash, newline, invalid UTF-8 must read back");
  cr_expect_eq(num(k, "pid"), 0);
  cr_expect_eq(num(k, "tid"), 7);
  cr_expect(fabs(num(k, "dur") - 4.0) < 1e-9);
  cJSON *a = cJSON_GetObjectItem(k, "args");
  cr_expect_eq(num(a, "device"), 0);
  cr_expect_eq(num(a, "stream"), 7);
  cr_expect_eq(num(a, "correlation"), 11);
  cr_expect_eq(num(a, "registers per thread"), 32);
  cr_expect_eq(num(a, "shared memory"), 2112);
  /* Kineto: 2048 blocks / 132 SMs; x 4 warps; min(15.5, 16) x 128 / 2048 = 97% */
  cr_expect(fabs(num(a, "blocks per SM") - 15.515152) < 1e-6, "blocks per SM %f", num(a, "blocks per SM"));
  cr_expect(fabs(num(a, "warps per SM") - 62.060606) < 1e-6, "warps per SM %f", num(a, "warps per SM"));
  /* one CUDA context per device: Kineto's "context" is left out, "device" says it */
  cr_expect_null(cJSON_GetObjectItem(a, "context"));
  /* CUPTI's queued time is not collected: Kineto's 0 for unknown */
  cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(a, "queued")) && num(a, "queued") == 0);
  cr_expect_eq(num(a, "est. achieved occupancy %"), 97);
  cJSON *grid = cJSON_GetObjectItem(a, "grid"), *block = cJSON_GetObjectItem(a, "block");
  cr_expect(cJSON_GetArraySize(grid) == 3 && cJSON_GetArrayItem(grid, 0)->valueint == 2048);
  cr_expect(cJSON_GetArraySize(block) == 3 && cJSON_GetArrayItem(block, 0)->valueint == 128 &&
            cJSON_GetArrayItem(block, 2)->valueint == 1);
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, flows_pair_up) {
  pd_trace_t *t = synthetic_trace();
  cJSON *root = write_and_parse(t, &meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  int starts = 0, finishes = 0;
  cJSON *f;
  cJSON_ArrayForEach(f, ev) {
    cJSON *ph = cJSON_GetObjectItem(f, "ph");
    if (!ph) continue;
    if (strcmp(ph->valuestring, "s") == 0) starts++;
    if (strcmp(ph->valuestring, "f") != 0) continue;
    finishes++;
    cr_expect_str_eq(cJSON_GetObjectItem(f, "cat")->valuestring, "ac2g");
    cr_expect_str_eq(cJSON_GetObjectItem(f, "name")->valuestring, "ac2g");
    cr_expect_str_eq(cJSON_GetObjectItem(f, "bp")->valuestring, "e");
    double id = num(f, "id");
    bool found = false;
    cJSON *s;
    cJSON_ArrayForEach(s, ev) {
      cJSON *sph = cJSON_GetObjectItem(s, "ph");
      if (sph && strcmp(sph->valuestring, "s") == 0 && num(s, "id") == id) found = true;
    }
    cr_expect(found, "flow end %g has no start", id);
  }
  /* corr 11 (kernel) and 12 (memcpy) pair; 13 (no GPU record), 14 (no launch) and 16 do not */
  cr_expect_eq(starts, 2, "flow starts: %d", starts);
  cr_expect_eq(finishes, 2, "flow ends: %d", finishes);
  /* the start sits on the launching call, the end on the kernel */
  cJSON *k = find_event(ev, "X", "kernel", NULL);
  cJSON_ArrayForEach(f, ev) {
    cJSON *ph = cJSON_GetObjectItem(f, "ph");
    if (!ph || (strcmp(ph->valuestring, "s") != 0 && strcmp(ph->valuestring, "f") != 0) || num(f, "id") != 11)
      continue;
    if (strcmp(ph->valuestring, "f") == 0) {
      cr_expect_eq(num(f, "ts"), num(k, "ts"));
      cr_expect_eq(num(f, "pid"), 0);
      cr_expect_eq(num(f, "tid"), 7);
    } else {
      cr_expect(fabs(num(f, "ts") - 123458.789) < 1e-6, "s ts %.6f", num(f, "ts"));
      cr_expect_eq(num(f, "pid"), 4242);
      cr_expect_eq(num(f, "tid"), 4243);
    }
  }
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, memory_instant_events) {
  pd_trace_t *t = synthetic_trace();
  cJSON *root = write_and_parse(t, &meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  cJSON *m = find_event(ev, "i", "cpu_instant_event", "[memory]");
  cr_assert_not_null(m);
  cr_expect_str_eq(cJSON_GetObjectItem(m, "s")->valuestring, "t");
  cr_expect_eq(num(m, "pid"), 4242);
  cJSON *a = cJSON_GetObjectItem(m, "args");
  cr_expect_eq(num(a, "Addr"), 140163438733312.0);
  cr_expect_eq(num(a, "Bytes"), -3584);
  cr_expect_eq(num(a, "Total Allocated"), 69672960);
  cr_expect_eq(num(a, "Device Id"), 0);
  cr_expect_eq(num(a, "Device Type"), 1);
  int n = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, ev) if (cJSON_GetObjectItem(e, "ph") && strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "i") == 0 &&
                                strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "[memory]") == 0) {
    n++;
    if (n == 2) {
      cr_expect_eq(num(cJSON_GetObjectItem(e, "args"), "Device Type"), 0, "pinned host memory is CPU memory");
      cr_expect_null(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "Total Allocated"));
    }
  }
  cr_expect_eq(n, 2);
  cJSON_Delete(root);

  /* without profile_memory: no [memory] events */
  pd_trace_meta_t nomem = meta;
  nomem.profile_memory = false;
  root = write_and_parse(t, &nomem, NULL);
  cr_expect_null(find_event(cJSON_GetObjectItem(root, "traceEvents"), "i", NULL, "[memory]"));
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, atomic_write_leaves_no_temp) {
  pd_trace_t *t = synthetic_trace();
  cJSON *root = write_and_parse(t, &meta, NULL);
  cJSON_Delete(root);
  bool has_tmp = true;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp, "a .tmp. file was left behind");
  pd_trace_destroy(t);
}

Test(trace_writer, unwritable_dir_is_eio_and_leaves_nothing) {
  pd_trace_t *t = synthetic_trace();
  char path[512];
  snprintf(path, sizeof path, "%s/missing_dir/x.pt.trace.json", tmpdir);
  cr_expect_eq(pd_trace_write_file(path, t, &meta), PD_ENOENT);
  cr_expect_eq(pd_test_count_files(tmpdir, NULL), 0);
  if (geteuid() != 0) { /* root writes anywhere: only meaningful as a normal user */
    char ro[300];
    snprintf(ro, sizeof ro, "%s/ro", tmpdir);
    cr_assert_eq(mkdir(ro, 0500), 0);
    snprintf(path, sizeof path, "%s/x.pt.trace.json", ro);
    cr_expect_eq(pd_trace_write_file(path, t, &meta), PD_EACCES);
    DIR *d = opendir(ro);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    closedir(d);
    cr_expect_eq(n, 0);
    rmdir(ro);
  }
  cr_expect_eq(pd_trace_write_file(NULL, t, &meta), PD_EINVAL);
  cr_expect_eq(pd_trace_write_file(path, NULL, &meta), PD_EINVAL);
  pd_trace_destroy(t);
}

Test(trace_writer, streaming_api_and_abort) {
  char path[512];
  snprintf(path, sizeof path, "%s/stream.pt.trace.json", tmpdir);
  pd_device_props_t d = pd_test_h100();
  pd_trace_writer_t *w = NULL;
  cr_assert_eq(pd_trace_writer_open(path, NULL, &d, 1, &w), 0);
  pd_event_t k = mk(PD_EVENT_KERNEL, 1000, 2000, "k", 5);
  k.u.kernel.grid[0] = k.u.kernel.grid[1] = k.u.kernel.grid[2] = 1;
  k.u.kernel.block[0] = k.u.kernel.block[1] = k.u.kernel.block[2] = 1;
  cr_expect_eq(pd_trace_writer_event(w, &k), 0);
  pd_trace_writer_abort(w);
  cr_expect_eq(pd_test_count_files(tmpdir, NULL), 0, "abort removes the temp file");

  cr_assert_eq(pd_trace_writer_open(path, NULL, &d, 1, &w), 0);
  cr_expect_eq(pd_trace_writer_event(w, &k), 0);
  pd_event_t bad = k;
  bad.kind = (pd_event_kind_t)77;
  cr_expect_eq(pd_trace_writer_event(w, &bad), PD_EINVAL);
  cr_expect_eq(pd_trace_writer_event(w, NULL), PD_EINVAL);
  pd_event_t mem = mk(PD_EVENT_MEMORY, 1500, 1500, "[memory]", 0); /* meta NULL: no memory events */
  cr_expect_eq(pd_trace_writer_event(w, &mem), 0);
  cr_assert_eq(pd_trace_writer_close(w), 0);
  char *text = pd_test_slurp(path);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "%s", text);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  /* streaming writes the flow half of every correlated event */
  cr_expect_not_null(find_event(ev, "f", "ac2g", "ac2g"));
  cr_expect_null(find_event(ev, "i", NULL, "[memory]"));
  cr_expect_str_eq(cJSON_GetObjectItem(root, "traceName")->valuestring, path);
  cr_expect_eq(num(root, "baseTimeNanoseconds"), 0);
  cJSON *kk = find_event(ev, "X", "kernel", "k");
  cr_expect(fabs(num(kk, "ts") - 1.0) < 1e-9);
  cr_expect_eq(num(cJSON_GetObjectItem(kk, "args"), "est. achieved occupancy %"), 0);
  cJSON_Delete(root);
  free(text);
  cr_expect_eq(pd_trace_writer_open(NULL, NULL, NULL, 0, &w), PD_EINVAL);
  cr_expect_null(w);
  cr_expect_eq(pd_trace_writer_open(path, NULL, NULL, 1, &w), PD_EINVAL);
  cr_expect_eq(pd_trace_writer_close(NULL), PD_EINVAL);
  pd_trace_writer_abort(NULL);
}

Test(trace_writer, negative_and_sub_microsecond_times) {
  pd_trace_t *t = pd_trace_create();
  pd_event_t r = mk(PD_EVENT_RANGE, -1500, 7, "early", 0);
  pd_trace_add(t, &r);
  pd_trace_meta_t m = {.trace_name = "n", .unix_offset_ns = -2500000000LL, .pid = 1};
  char *text = NULL;
  cJSON *root = write_and_parse(t, &m, &text);
  /* base = -3 s (rounded down); ts = -1500 ns - 2.5 s + 3 s = 499998.5 us */
  cr_expect_eq(num(root, "baseTimeNanoseconds"), -3000000000.0);
  cJSON *e = find_event(cJSON_GetObjectItem(root, "traceEvents"), "X", NULL, "early");
  cr_expect(strstr(text, "\"ts\":499998.500,\"dur\":1.507") != NULL, "%s", text);
  cr_expect(fabs(num(e, "ts") - 499998.5) < 1e-9);
  cJSON_Delete(root);
  free(text);
  pd_trace_destroy(t);

  /* a negative ts renders with a sign */
  t = pd_trace_create();
  r = mk(PD_EVENT_RANGE, -1234567, 0, "neg", 0);
  pd_trace_add(t, &r);
  pd_trace_meta_t z = {.trace_name = "z", .pid = 1};
  root = write_and_parse(t, &z, &text);
  cr_expect(strstr(text, "\"ts\":-1234.567,\"dur\":1234.567") != NULL, "%s", text);
  cJSON_Delete(root);
  free(text);
  pd_trace_destroy(t);
}

/* ---- occupancy -------------------------------------------------------------------------------- */

static void expect_occ(int threads, int regs, int smem, int blocks, double occ, const char *limiter) {
  pd_device_props_t d = pd_test_h100();
  pd_occupancy_t o;
  cr_assert_eq(pd_occupancy_estimate(&d, threads, regs, smem, &o), 0);
  cr_expect_eq(o.blocks_per_sm, blocks, "%d threads, %d regs, %d smem: %d blocks, want %d", threads, regs, smem,
               o.blocks_per_sm, blocks);
  cr_expect(fabs(o.occupancy - occ) < 1e-12, "occupancy %g, want %g", o.occupancy, occ);
  cr_expect_str_eq(o.limiter, limiter, "limiter %s, want %s", o.limiter, limiter);
  cr_expect_eq(o.max_warps_per_sm, 64);
}

Test(occupancy, limits) {
  expect_occ(128, 32, 0, 16, 1.0, "warps");
  expect_occ(256, 64, 0, 4, 0.5, "registers");          /* 2048 regs/warp: 32 warps */
  expect_occ(128, 0, 49152, 4, 0.25, "shared memory");  /* (48 KiB + 1 KiB) per block */
  expect_occ(32, 16, 0, 32, 0.5, "blocks");             /* 32 blocks of one warp */
  expect_occ(1024, 255, 0, 0, 0.0, "registers");        /* 8192 x 32 warps > 64 K: cannot launch */
  expect_occ(2048, 32, 0, 0, 0.0, "threads");           /* more than 1024 threads per block */
  expect_occ(128, 0, 240000, 0, 0.0, "shared memory");  /* beyond the opt-in maximum */
  expect_occ(96, 32, 0, 21, 63.0 / 64.0, "warps");      /* 3 warps per block: 21 blocks */
  expect_occ(96, 40, 0, 17, 51.0 / 64.0, "registers");  /* 1280 regs/warp: 51 warps */
  pd_device_props_t d = pd_test_h100();
  pd_occupancy_t o;
  /* opt-in limit unknown: 64 KiB per block still launches (3 blocks of 65 KiB fit) */
  d.max_shared_mem_per_block_optin = 0;
  cr_assert_eq(pd_occupancy_estimate(&d, 128, 32, 65536, &o), 0);
  cr_expect_eq(o.blocks_per_sm, 3, "got %d", o.blocks_per_sm);
  cr_expect_str_eq(o.limiter, "shared memory");
  d = pd_test_h100();
  cr_expect_eq(pd_occupancy_estimate(NULL, 128, 32, 0, &o), PD_EINVAL);
  cr_expect_eq(pd_occupancy_estimate(&d, 0, 32, 0, &o), PD_EINVAL);
  cr_expect_eq(pd_occupancy_estimate(&d, 128, -1, 0, &o), PD_EINVAL);
  d.warp_size = 0;
  cr_expect_eq(pd_occupancy_estimate(&d, 128, 32, 0, &o), PD_EINVAL);
}

static void expect_kineto(int gx, int gy, int gz, int bx, int regs, int smem, double bps, double wps, int pct) {
  pd_device_props_t d = pd_test_h100();
  pd_event_t k = mk(PD_EVENT_KERNEL, 0, 1, "k", 0);
  k.u.kernel.grid[0] = gx, k.u.kernel.grid[1] = gy, k.u.kernel.grid[2] = gz;
  k.u.kernel.block[0] = bx, k.u.kernel.block[1] = 1, k.u.kernel.block[2] = 1;
  k.u.kernel.registers_per_thread = regs;
  k.u.kernel.dynamic_smem_bytes = smem;
  pd_kernel_launch_stats_t s;
  cr_assert_eq(pd_kernel_launch_stats(&d, &k, &s), 0);
  cr_expect(fabs(s.blocks_per_sm - bps) < 1e-5, "blocks per SM %f, want %f", s.blocks_per_sm, bps);
  cr_expect(fabs(s.warps_per_sm - wps) < 1e-4, "warps per SM %f, want %f", s.warps_per_sm, wps);
  cr_expect_eq(s.est_achieved_occupancy_pct, pct, "occupancy %d%%, want %d%%", s.est_achieved_occupancy_pct, pct);
}

/* Kernel args of a real torch.profiler trace on an H200 (132 SMs, same limits as H100):
 * /work/shared/fixtures/torch/torch_sync.pt.trace.json.gz */
Test(occupancy, matches_kineto_trace) {
  expect_kineto(4096, 1, 1, 128, 18, 0, 31.030304, 124.121216, 100);
  expect_kineto(2048, 1, 1, 128, 32, 0, 15.515152, 62.060608, 97);
  expect_kineto(1, 2, 128, 256, 32, 2112, 1.939394, 15.515152, 24);
  expect_kineto(8, 4, 64, 256, 32, 2112, 15.515152, 124.121216, 100);
  expect_kineto(1, 1, 1, 128, 32, 0, 0.007576, 0.030303, 0);
  pd_device_props_t d = pd_test_h100();
  pd_event_t k = mk(PD_EVENT_RUNTIME, 0, 1, "x", 0);
  pd_kernel_launch_stats_t s;
  cr_expect_eq(pd_kernel_launch_stats(&d, &k, &s), PD_EINVAL);
  k.kind = PD_EVENT_KERNEL; /* empty grid */
  cr_expect_eq(pd_kernel_launch_stats(&d, &k, &s), PD_EINVAL);
}

/* ---- what torch.profiler writes beyond the events: links, mirrors, spans, top level ---- */

#define TID 4243
#define MANGLED "_ZN47_GLOBAL__N__d9dd58db_14_cnn_kernels_cu_62a9d6789k_tiny_opI6__halfEEvPKT_PS2_i"

static void add_kernel(pd_trace_t *t, int64_t start, int64_t end, const char *name, uint64_t corr) {
  pd_event_t k = mk(PD_EVENT_KERNEL, start, end, name, corr);
  k.stream = 7;
  k.context = 1;
  k.u.kernel.grid[0] = 64, k.u.kernel.grid[1] = k.u.kernel.grid[2] = 1;
  k.u.kernel.block[0] = 256, k.u.kernel.block[1] = k.u.kernel.block[2] = 1;
  k.u.kernel.registers_per_thread = 32;
  pd_trace_add(t, &k);
}

/* One training step as the profiler hands it over (sorted by start): step range, data
 * wait, forward with two ops, a runtime and a driver launch, a copy, a sync, memory. */
static pd_trace_t *step_trace(void) {
  pd_trace_t *t = pd_trace_create();
  pd_device_props_t d = pd_test_h100();
  pd_trace_add_device(t, &d);
  pd_event_t e = mk(PD_EVENT_RANGE, 0, 1000000, "ProfilerStep#3", 0);
  e.u.range.step = 3;
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 10000, 50000, PD_RANGE_DATA_WAIT, 0);
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RUNTIME, 55000, 56000, "cudaMemcpyAsync", 20);
  pd_trace_add(t, &e);
  pd_event_t cp = mk(PD_EVENT_MEMCPY, 57000, 90000, NULL, 20);
  cp.stream = 7;
  cp.context = 1;
  cp.u.memcpy.copy_kind = PD_MEMCPY_HTOD;
  cp.u.memcpy.src_kind = PD_MEM_PINNED;
  cp.u.memcpy.dst_kind = PD_MEM_DEVICE;
  cp.u.memcpy.bytes = 4096;
  pd_trace_add(t, &cp);
  e = mk(PD_EVENT_RANGE, 100000, 600000, "forward", 0);
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 110000, 300000, "conv1.forward", 0);
  e.u.range.shape = "[[64, 3, 32, 32]]";
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RUNTIME, 120000, 130000, "cudaLaunchKernel", 21);
  pd_trace_add(t, &e);
  pd_event_t m = mk(PD_EVENT_MEMORY, 125000, 125000, "[memory]", 0);
  m.u.memory.address = 0x7f0000000000ULL;
  m.u.memory.bytes = 1000;
  m.u.memory.total_allocated = 5000;
  m.u.memory.mem_kind = PD_MEM_DEVICE;
  pd_trace_add(t, &m);
  add_kernel(t, 200000, 260000, MANGLED, 21);
  e = mk(PD_EVENT_RANGE, 310000, 500000, "linear.forward", 0);
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_DRIVER, 320000, 330000, "cuLaunchKernelEx", 22);
  pd_trace_add(t, &e);
  add_kernel(t, 400000, 450000, "nvjet_sm90_tst", 22);
  e = mk(PD_EVENT_RUNTIME, 600000, 700000, "cudaStreamSynchronize", 23);
  pd_trace_add(t, &e);
  pd_event_t sy = mk(PD_EVENT_SYNC, 610000, 700000, NULL, 23);
  sy.stream = 7;
  sy.u.sync.sync_kind = PD_SYNC_STREAM;
  pd_trace_add(t, &sy);
  return t;
}

static const pd_trace_meta_t links_meta = {
    .trace_name = "links",
    .unix_offset_ns = 1700000000000000000LL,
    .pid = 4242,
    .profile_memory = true,
    .process_name = "profiler_demo",
    .record_shapes = true,
    .cuda_driver_version = 13000,
    .cuda_runtime_version = 12080,
    .cupti_version = 130001,
    .links = true,
};

static int64_t ext_of(cJSON *e) {
  cr_assert_not_null(e, "event missing");
  cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "External id");
  return cJSON_IsNumber(x) ? (int64_t)x->valuedouble : 0;
}

static cJSON *find_corr(cJSON *events, const char *cat, int corr) {
  cJSON *e;
  cJSON_ArrayForEach(e, events) {
    cJSON *c = cJSON_GetObjectItem(e, "cat");
    cJSON *k = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "correlation");
    if (cJSON_IsString(c) && strcmp(c->valuestring, cat) == 0 && cJSON_IsNumber(k) && (int)k->valuedouble == corr)
      return e;
  }
  return NULL;
}

static int count_events(cJSON *events, const char *cat, const char *name) {
  int n = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, events) {
    cJSON *c = cJSON_GetObjectItem(e, "cat"), *nm = cJSON_GetObjectItem(e, "name");
    if (cat && (!cJSON_IsString(c) || strcmp(c->valuestring, cat) != 0)) continue;
    if (name && (!cJSON_IsString(nm) || strcmp(nm->valuestring, name) != 0)) continue;
    n++;
  }
  return n;
}

Test(trace_writer, top_level_keys_torch_writes) {
  pd_trace_t *t = step_trace();
  cJSON *root = write_and_parse(t, &links_meta, NULL);
  cJSON *id = cJSON_GetObjectItem(root, "trace_id");
  cr_assert(cJSON_IsString(id), "trace_id");
  cr_expect_eq(strlen(id->valuestring), 32u);
  cr_expect_eq(strspn(id->valuestring, "0123456789ABCDEF"), 32u, "hex: %s", id->valuestring);
  cr_expect_eq(num(root, "profile_memory"), 1);
  cr_expect_eq(num(root, "record_shapes"), 1);
  cr_expect_eq(num(root, "cuda_driver_version"), 13000);
  cr_expect_eq(num(root, "cuda_runtime_version"), 12080);
  cr_expect_eq(num(root, "cupti_version"), 130001);
  cJSON *dist = cJSON_GetObjectItem(root, "distributedInfo");
  cr_expect_eq(num(dist, "rank"), 0, "HTA places the trace by its rank");
  cr_expect_eq(num(dist, "world_size"), 1);
  cJSON_Delete(root);

  /* unknown versions are left out, not written as 0; a second trace gets another id */
  pd_trace_meta_t m = links_meta;
  m.cuda_driver_version = m.cuda_runtime_version = m.cupti_version = 0;
  m.record_shapes = false;
  cJSON *again = write_and_parse(t, &m, NULL);
  cr_expect_null(cJSON_GetObjectItem(again, "cuda_driver_version"));
  cr_expect_null(cJSON_GetObjectItem(again, "cupti_version"));
  cr_expect_eq(num(again, "record_shapes"), 0);
  cJSON_Delete(again);
  pd_trace_destroy(t);
}

Test(trace_writer, external_ids_link_ops_calls_and_gpu_work) {
  pd_trace_t *t = step_trace();
  cJSON *root = write_and_parse(t, &links_meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  int64_t step = ext_of(find_event(ev, "X", "user_annotation", "ProfilerStep#3"));
  int64_t conv = ext_of(find_event(ev, "X", "cpu_op", "conv1.forward"));
  int64_t lin = ext_of(find_event(ev, "X", "cpu_op", "linear.forward"));
  int64_t fwd = ext_of(find_event(ev, "X", "cpu_op", "forward"));
  cr_expect(step > 0 && conv > 0 && lin > 0 && fwd > 0);
  cr_expect(step != conv && conv != lin && lin != fwd && fwd != step, "one id per range");
  /* a call carries its innermost op's id, its GPU work the call's */
  cr_expect_eq(ext_of(find_corr(ev, "cuda_runtime", 21)), conv);
  cr_expect_eq(ext_of(find_corr(ev, "kernel", 21)), conv);
  cr_expect_eq(ext_of(find_corr(ev, "cuda_runtime", 22)), lin, "driver launches link too");
  cr_expect_eq(ext_of(find_corr(ev, "kernel", 22)), lin);
  /* calls outside every op range link to the step; so do their copies and syncs */
  cr_expect_eq(ext_of(find_corr(ev, "cuda_runtime", 20)), step);
  cr_expect_eq(ext_of(find_corr(ev, "gpu_memcpy", 20)), step);
  cr_expect_eq(ext_of(find_corr(ev, "cuda_runtime", 23)), step, "forward ended before the sync call");
  cr_expect_eq(ext_of(find_corr(ev, "cuda_sync", 23)), step);
  cJSON_Delete(root);

  /* without links: the events only (each range once all the same), no ids, spans or
   * trace id */
  pd_trace_meta_t plain = links_meta;
  plain.links = false;
  char *text = NULL;
  root = write_and_parse(t, &plain, &text);
  cr_expect_null(strstr(text, "External id"));
  cr_expect_null(strstr(text, "Ev Idx"));
  cr_expect_null(cJSON_GetObjectItem(root, "trace_id"));
  ev = cJSON_GetObjectItem(root, "traceEvents");
  cr_expect_eq(count_events(ev, "cpu_op", NULL), 3, "forward, conv1.forward, linear.forward");
  cr_expect_eq(count_events(ev, "user_annotation", NULL), 2, "the step and the data wait");
  cr_expect_eq(count_events(ev, "gpu_user_annotation", NULL), 0);
  free(text);
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

/* Each host range is one event on its thread (a user_annotation and a cpu_op of the same
 * ts and dur left viewers unable to tell which encloses which): ops as cpu_op, which
 * torch-tb-profiler's Operator page and op tree read, with their id, Ev Idx and shapes;
 * the step and the data wait as user_annotation, which tb-profiler reads by name. */
Test(trace_writer, host_ranges_written_once) {
  pd_trace_t *t = step_trace();
  cJSON *root = write_and_parse(t, &links_meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  static const char *const ops[] = {"forward", "conv1.forward", "linear.forward"};
  int64_t idx[3];
  for (size_t i = 0; i < 3; i++) {
    cJSON *op = find_event(ev, "X", "cpu_op", ops[i]);
    cr_assert_not_null(op, "no cpu_op %s", ops[i]);
    cr_expect_eq(count_events(ev, "cpu_op", ops[i]), 1);
    cr_expect_eq(count_events(ev, "user_annotation", ops[i]), 0, "%s written once", ops[i]);
    cr_expect_gt(ext_of(op), 0);
    cr_expect_eq(num(op, "tid"), TID);
    idx[i] = (int64_t)num(cJSON_GetObjectItem(op, "args"), "Ev Idx");
  }
  cr_expect(idx[0] != idx[1] && idx[1] != idx[2] && idx[0] != idx[2], "each range its own Ev Idx");
  cJSON *dims = cJSON_GetObjectItem(cJSON_GetObjectItem(find_event(ev, "X", "cpu_op", "conv1.forward"), "args"),
                                    "Input Dims");
  cr_expect(cJSON_IsArray(dims), "the op keeps its shapes");
  cr_expect_eq(count_events(ev, "cpu_op", "ProfilerStep#3"), 0);
  cr_expect_eq(count_events(ev, "user_annotation", "ProfilerStep#3"), 1);
  cr_expect_eq(count_events(ev, "cpu_op", PD_RANGE_DATA_WAIT), 0);
  cr_expect_eq(count_events(ev, "user_annotation", PD_RANGE_DATA_WAIT), 1);
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, gpu_user_annotation_spans) {
  pd_trace_t *t = step_trace();
  cJSON *root = write_and_parse(t, &links_meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  cJSON *conv = find_event(ev, "X", "gpu_user_annotation", "conv1.forward");
  cJSON *lin = find_event(ev, "X", "gpu_user_annotation", "linear.forward");
  cJSON *fwd = find_event(ev, "X", "gpu_user_annotation", "forward");
  cr_assert(conv && lin && fwd, "a span for each op range that launched GPU work");
  cr_expect_eq(num(conv, "pid"), 0);
  cr_expect_eq(num(conv, "tid"), 7, "on the stream's row, as Kineto");
  /* ts counts from the base (unix offset 1.7e18 is a whole second): kernel 200-260 us;
   * a span ends 1 ns after the work it holds, an enclosing span 1 ns after that */
  cr_expect(fabs(num(conv, "ts") - 200.0) < 1e-9 && fabs(num(conv, "dur") - 60.001) < 1e-9);
  cr_expect(fabs(num(lin, "ts") - 400.0) < 1e-9 && fabs(num(lin, "dur") - 50.001) < 1e-9);
  cr_expect(fabs(num(fwd, "ts") - 200.0) < 1e-9 && fabs(num(fwd, "dur") - 250.002) < 1e-9,
            "the enclosing range spans all of it, and past its children's spans");
  cr_expect_eq(ext_of(conv), ext_of(find_event(ev, "X", "cpu_op", "conv1.forward")));
  cr_expect_eq(count_events(ev, "gpu_user_annotation", "ProfilerStep#3"), 0, "no span for the step");
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, kernel_names_demangled_and_gpu_args) {
  pd_trace_t *t = step_trace();
  add_kernel(t, 800000, 810000, MANGLED, 30); /* a second kernel of the same symbol */
  char *text = NULL;
  cJSON *root = write_and_parse(t, &links_meta, &text);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  cJSON *k = find_corr(ev, "kernel", 21);
  cr_expect_str_eq(cJSON_GetObjectItem(k, "name")->valuestring, "(anonymous namespace)::k_tiny_op<__half>");
  cJSON *a = cJSON_GetObjectItem(k, "args");
  cr_expect_null(cJSON_GetObjectItem(a, "mangled name"), "the kernel carries the readable name only");
  /* each mangled symbol once, at the top level, with the name its kernels show */
  cJSON *names = cJSON_GetObjectItem(root, "mangledNames");
  cr_assert(cJSON_IsObject(names), "mangledNames");
  cr_expect_eq(cJSON_GetArraySize(names), 1, "two kernels of one symbol: one entry");
  cr_expect_str_eq(cJSON_GetObjectItem(names, MANGLED)->valuestring, "(anonymous namespace)::k_tiny_op<__half>");
  cJSON *plain = find_corr(ev, "kernel", 22);
  cr_expect_str_eq(cJSON_GetObjectItem(plain, "name")->valuestring, "nvjet_sm90_tst");
  cr_expect_null(cJSON_GetObjectItem(cJSON_GetObjectItem(find_corr(ev, "gpu_memcpy", 20), "args"), "context"));
  cr_expect_null(strstr(text, "\"name\":\"_Z"), "no mangled name left in a name");
  free(text);
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, sync_row_memory_totals_and_trace_span) {
  pd_trace_t *t = step_trace();
  cJSON *root = write_and_parse(t, &links_meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  /* the sync row is named and sorted like Kineto's */
  bool named = false;
  cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    cJSON *n = cJSON_GetObjectItem(e, "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, "thread_name") == 0 &&
        num(e, "tid") == 7 + PD_TRACE_SYNC_TID_OFFSET) {
      cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name")->valuestring, "stream 7 (sync)");
      named = true;
    }
  }
  cr_expect(named, "sync row has its thread_name");
  cJSON *m = find_event(ev, "i", "cpu_instant_event", "[memory]");
  cJSON *a = cJSON_GetObjectItem(m, "args");
  cr_expect_eq(num(a, "Total Reserved"), 5000, "no caching allocator: reserved is allocated");
  cr_expect_eq(num(a, "Total Allocated"), 5000);
  cr_expect(num(a, "Ev Idx") >= 0);
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(a, "finished")), "torch's finished: false on an instant");
  /* the whole-trace span and its marker, on a numeric pid */
  cJSON *span = find_event(ev, "X", "Trace", "PyTorch Profiler (0)");
  cr_assert_not_null(span);
  cr_expect_eq(num(span, "pid"), PD_TRACE_SPAN_PID);
  cr_expect(fabs(num(span, "ts") - 0.0) < 1e-9 && fabs(num(span, "dur") - 1000.0) < 1e-9, "covers the step");
  cr_expect_eq(num(cJSON_GetObjectItem(span, "args"), "Op count"), 5, "host ranges, each counted once");
  cJSON *it = find_event(ev, "i", NULL, "Iteration Start: PyTorch Profiler");
  cr_assert_not_null(it);
  cr_expect_str_eq(cJSON_GetObjectItem(it, "s")->valuestring, "g");
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

static cJSON *find_flow(cJSON *events, const char *ph, int64_t id) {
  cJSON *e;
  cJSON_ArrayForEach(e, events) {
    cJSON *c = cJSON_GetObjectItem(e, "cat"), *p = cJSON_GetObjectItem(e, "ph");
    if (cJSON_IsString(c) && strcmp(c->valuestring, "fwdbwd") == 0 && strcmp(p->valuestring, ph) == 0 &&
        (int64_t)num(e, "id") == id)
      return e;
  }
  return NULL;
}

Test(trace_writer, fwdbwd_flows_join_forward_and_backward_ranges) {
  pd_trace_t *t = pd_trace_create();
  pd_event_t e = mk(PD_EVENT_RANGE, 0, 1000000, "ProfilerStep#1", 0);
  e.u.range.step = 1;
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 1000, 2000, "x.backward", 0); /* its forward is not in the trace */
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 10000, 20000, "conv1.forward", 0);
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 30000, 40000, "linear.forward", 0);
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 50000, 60000, "linear.forward", 0); /* called twice */
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 70000, 80000, "linear.backward", 0);
  e.tid = 5000; /* autograd's thread: same process, another row */
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 90000, 95000, "linear.backward", 0);
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 100000, 110000, "conv1.backward", 0);
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 120000, 130000, "conv1.backward", 0); /* no forward left */
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 140000, 150000, "conv1.forward", 0); /* no backward in the trace */
  pd_trace_add(t, &e);
  e = mk(PD_EVENT_RANGE, 160000, 170000, ".backward", 0); /* no module name */
  pd_trace_add(t, &e);
  cJSON *root = write_and_parse(t, &links_meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  cr_expect_eq(count_events(ev, "fwdbwd", "fwdbwd"), 3 * 2, "three pairs, both halves each");
  /* autograd order: the second linear.forward pairs with the first linear.backward */
  int64_t lin2 = -1, conv = ext_of(find_event(ev, "X", "cpu_op", "conv1.forward"));
  cJSON *x;
  cJSON_ArrayForEach(x, ev) {
    cJSON *n = cJSON_GetObjectItem(x, "name"), *c = cJSON_GetObjectItem(x, "cat");
    if (cJSON_IsString(n) && strcmp(n->valuestring, "linear.forward") == 0 && strcmp(c->valuestring, "cpu_op") == 0 &&
        fabs(num(x, "ts") - 50.0) < 1e-9)
      lin2 = ext_of(x);
  }
  cJSON *s = find_flow(ev, "s", lin2), *f = find_flow(ev, "f", lin2);
  cr_assert(s && f, "linear's second forward flows to its first backward");
  cr_expect(fabs(num(s, "ts") - 50.0) < 1e-9 && num(s, "tid") == 4243, "starts at the forward op");
  cr_expect(fabs(num(f, "ts") - 70.0) < 1e-9 && num(f, "tid") == 5000, "ends at the backward op");
  cr_expect_str_eq(cJSON_GetObjectItem(f, "bp")->valuestring, "e");
  cr_expect_null(cJSON_GetObjectItem(s, "bp"));
  s = find_flow(ev, "s", conv), f = find_flow(ev, "f", conv);
  cr_assert(s && f, "conv1");
  cr_expect(fabs(num(s, "ts") - 10.0) < 1e-9 && fabs(num(f, "ts") - 100.0) < 1e-9);
  cJSON_Delete(root);

  pd_trace_meta_t plain = links_meta;
  plain.links = false;
  root = write_and_parse(t, &plain, NULL);
  cr_expect_eq(count_events(cJSON_GetObjectItem(root, "traceEvents"), "fwdbwd", NULL), 0, "links off: none");
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, kernel_event_stays_under_400_bytes) {
  /* The bench's synthetic kernel (bench/prof/bench_prof.c), linked to an op: one event
   * line with every arg it carries, without its flow half. */
  pd_trace_t *t = pd_trace_create();
  pd_device_props_t d = pd_test_h100();
  pd_trace_add_device(t, &d);
  pd_event_t r = mk(PD_EVENT_RANGE, 5000000000LL, 5000100000LL, "op", 0);
  pd_trace_add(t, &r);
  pd_event_t rt = mk(PD_EVENT_RUNTIME, 5000001000LL, 5000002000LL, "cudaLaunchKernel", 123456);
  pd_trace_add(t, &rt);
  pd_event_t k = mk(PD_EVENT_KERNEL, 5000003000LL, 5000004899LL,
                    "void pd_bench_synthetic_kernel<float, 4>(float*, float const*, int)", 123456);
  k.context = 1;
  k.stream = 7;
  k.u.kernel.grid[0] = 1024, k.u.kernel.grid[1] = k.u.kernel.grid[2] = 1;
  k.u.kernel.block[0] = 256, k.u.kernel.block[1] = k.u.kernel.block[2] = 1;
  k.u.kernel.registers_per_thread = 32;
  k.u.kernel.static_smem_bytes = 4096;
  pd_trace_add(t, &k);
  char *text = NULL;
  cJSON *root = write_and_parse(t, &links_meta, &text);
  const char *line = strstr(text, "{\"ph\":\"X\",\"cat\":\"kernel\"");
  cr_assert_not_null(line);
  const char *eol = strchr(line, '\n');
  size_t bytes = (size_t)(eol - line) + 1; /* with its separator */
  cr_expect_leq(bytes, 400u, "kernel event is %zu bytes: %.*s", bytes, (int)(eol - line), line);
  cr_expect_not_null(strstr(line, "\"External id\":"), "measured with its External id");
  free(text);
  cJSON_Delete(root);
  pd_trace_destroy(t);
}

Test(trace_writer, many_symbols_and_forward_backward_pairs) {
  /* 100 distinct mangled symbols (two kernels each) and 100 layers' forward/backward
   * pairs: every symbol listed once, every pair joined, in the streaming writer too. */
  pd_trace_t *t = pd_trace_create();
  pd_device_props_t d = pd_test_h100();
  pd_trace_add_device(t, &d);
  static char names[100][16], fwd[100][24], bwd[100][24];
  int64_t ts = 1000;
  for (int i = 0; i < 100; i++) {
    snprintf(fwd[i], sizeof fwd[i], "layer%d.forward", i);
    pd_event_t e = mk(PD_EVENT_RANGE, ts, ts + 500, fwd[i], 0);
    pd_trace_add(t, &e);
    ts += 1000;
  }
  for (int i = 99; i >= 0; i--) {
    snprintf(bwd[i], sizeof bwd[i], "layer%d.backward", i);
    pd_event_t e = mk(PD_EVENT_RANGE, ts, ts + 500, bwd[i], 0);
    pd_trace_add(t, &e);
    ts += 1000;
  }
  for (int i = 0; i < 200; i++) {
    snprintf(names[i % 100], sizeof names[i % 100], "_Z4k%03dv", i % 100);
    add_kernel(t, ts, ts + 100, names[i % 100], 0);
    ts += 1000;
  }
  cJSON *root = write_and_parse(t, &links_meta, NULL);
  cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  cJSON *syms = cJSON_GetObjectItem(root, "mangledNames");
  cr_expect_eq(cJSON_GetArraySize(syms), 100);
  cr_expect_str_eq(cJSON_GetObjectItem(syms, "_Z4k042v")->valuestring, "k042");
  cr_expect_eq(count_events(ev, "fwdbwd", "fwdbwd"), 200, "one pair per layer");
  int64_t f7 = ext_of(find_event(ev, "X", "cpu_op", "layer7.forward"));
  cJSON *s = find_flow(ev, "s", f7), *f = find_flow(ev, "f", f7);
  cr_assert(s && f);
  cr_expect(fabs(num(s, "ts") - 8.0) < 1e-9 && fabs(num(f, "ts") - (101000 + 92 * 1000) / 1000.0) < 1e-9,
            "layer7's forward at 8 us, its backward at %f", num(f, "ts"));
  cJSON_Delete(root);
  pd_trace_destroy(t);
}
