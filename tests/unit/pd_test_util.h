/* pd_test_util.h: helpers several unit tests share (header-only; pd_add_unit_test puts
 * tests/unit on the include path). Failures end the calling test through Criterion. */
#ifndef PD_TEST_UTIL_H
#define PD_TEST_UTIL_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "pd/pd_event.h"
#include "pd/pd_stats.h"

/* An H100 SXM's limits, as cudaGetDeviceProperties reports them. */
static inline pd_device_props_t pd_test_h100(void) {
  pd_device_props_t d;
  memset(&d, 0, sizeof d);
  d.id = 0;
  snprintf(d.name, sizeof d.name, "NVIDIA H100 80GB HBM3");
  d.total_global_mem = 84929216512ULL;
  d.compute_major = 9;
  d.compute_minor = 0;
  d.num_sms = 132;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.max_regs_per_block = 65536;
  d.max_regs_per_sm = 65536;
  d.max_shared_mem_per_block = 49152;
  d.max_shared_mem_per_sm = 233472;
  d.max_shared_mem_per_block_optin = 232448;
  d.warp_size = 32;
  d.max_blocks_per_sm = 32;
  return d;
}

/* An event of kind on the host row 4242/4243 (GPU work on device 0, stream 0), with a
 * range's step -1 (not a step): what a test adds and then adjusts. */
static inline pd_event_t pd_test_event(pd_event_kind_t kind, int64_t start, int64_t end, const char *name,
                                       uint64_t corr) {
  pd_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.start_ns = start;
  e.end_ns = end;
  e.name = name;
  e.correlation_id = corr;
  e.pid = 4242;
  e.tid = 4243;
  if (kind == PD_EVENT_RANGE || kind == PD_EVENT_GPU_RANGE || kind == PD_EVENT_CPU_OP) e.u.range.step = -1;
  return e;
}

/* Creates a fresh directory "/tmp/<tag>.XXXXXX" into buf. */
static inline void pd_test_tmpdir_make(char *buf, size_t len, const char *tag) {
  snprintf(buf, len, "/tmp/%s.XXXXXX", tag);
  cr_assert_not_null(mkdtemp(buf), "mkdtemp %s", buf);
}

/* Removes the files directly inside dir (names not starting with '.') and dir itself. */
static inline void pd_test_tmpdir_remove(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* Returns the number of entries in dir (other than . and ..); sets *has_tmp (when not
 * NULL) to whether one of them holds ".tmp." (a writer's unfinished temporary file). */
static inline int pd_test_count_files(const char *dir, bool *has_tmp) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "opendir %s", dir);
  int n = 0;
  struct dirent *e;
  if (has_tmp) *has_tmp = false;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    n++;
    if (has_tmp && strstr(e->d_name, ".tmp.") != NULL) *has_tmp = true;
  }
  closedir(d);
  return n;
}

/* Returns the whole file as a NUL-terminated string; the caller frees it. */
static inline char *pd_test_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  cr_assert_geq(n, 0, "cannot size %s", path);
  char *buf = malloc((size_t)n + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n, "short read of %s", path);
  buf[n] = 0;
  fclose(f);
  return buf;
}

#if defined(cJSON__h) && defined(ZLIB_H)
/* Reads and parses a whole JSON file, plain or gzipped (for tests that include <cJSON.h>
 * and <zlib.h> first); the caller frees with cJSON_Delete. */
static inline cJSON *pd_test_read_json_gz(const char *path) {
  gzFile gz = gzopen(path, "rb");
  cr_assert_not_null(gz, "cannot open %s", path);
  size_t cap = 1 << 20, len = 0;
  char *buf = malloc(cap + 1);
  cr_assert_not_null(buf);
  int got;
  while ((got = gzread(gz, buf + len, (unsigned)(cap - len))) > 0) {
    len += (size_t)got;
    if (len == cap) {
      cap *= 2;
      buf = realloc(buf, cap + 1);
      cr_assert_not_null(buf);
    }
  }
  cr_assert_geq(got, 0, "cannot read %s", path);
  gzclose(gz);
  buf[len] = 0;
  cJSON *j = cJSON_Parse(buf);
  free(buf);
  cr_assert_not_null(j, "%s is not JSON", path);
  return j;
}
#endif

#ifdef cJSON__h
/* Reads and parses a whole JSON file (for tests that include <cJSON.h> first); a file that
 * does not parse fails the test, showing its text. The caller frees with cJSON_Delete. */
static inline cJSON *pd_test_read_json(const char *path) {
  char *text = pd_test_slurp(path);
  cJSON *j = cJSON_Parse(text);
  if (j == NULL) cr_assert_fail("%s is not valid JSON:\n%s", path, text);
  free(text);
  return j;
}
#endif

/* In a forked child before exec: limits its address space to mib MiB (0: no limit), so
 * the program run there meets out of memory; _exit(125) when the limit cannot be set. */
static inline void pd_test_child_limit_as(long mib) {
  if (mib <= 0) return;
  struct rlimit rl = {.rlim_cur = (rlim_t)mib << 20, .rlim_max = (rlim_t)mib << 20};
  if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(125);
}

/* Skips the calling test where an address-space limit cannot make a child run out of
 * memory the way it would alone: under ASan or TSan (their runtimes reserve more address
 * space than any limit) and under valgrind (which preloads itself into every child and
 * needs far more). */
#define PD_TEST_SKIP_UNLESS_AS_LIMIT_WORKS()                                                         \
  do {                                                                                             \
    const char *pd_pre_ = getenv("LD_PRELOAD");                                                     \
    if (pd_test_sanitized() || (pd_pre_ != NULL && strstr(pd_pre_, "vgpreload") != NULL))           \
      cr_skip_test("under a sanitizer or valgrind an address-space limit starves the tool itself"); \
  } while (0)

static inline bool pd_test_sanitized(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

/* Whether today's verdict `now` keeps a recorded run's `recorded` one: a cause must be the
 * same; a balance (compute, host_bound, launch_overhead) may become another balance, which
 * moves with the model and the host (the gate judges it so too, gate_compare.c). */
static inline bool pd_test_verdict_kept(const char *recorded, const char *now) {
  return strcmp(recorded, now) == 0 || (pd_bottleneck_is_balance(recorded) && pd_bottleneck_is_balance(now));
}

/* Returns the next of 64 rotating path buffers (512 bytes): a test keeps fewer paths than
 * that alive at once. */
static inline char *pd_test_buf(void) {
  static char bufs[64][512];
  static unsigned next;
  return bufs[next++ % 64];
}

/* Returns "<dir>/<name>" in a rotating buffer. */
static inline const char *pd_test_path(const char *dir, const char *name) {
  char *b = pd_test_buf();
  snprintf(b, 512, "%s/%s", dir, name);
  return b;
}

/* Returns "$PD_SOURCE_DIR/tests/fixtures/<sub>" in a rotating buffer; ends the test when
 * PD_SOURCE_DIR is not set (ctest sets it). */
static inline const char *pd_test_fixtures(const char *sub) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (run through ctest)");
  char *b = pd_test_buf();
  snprintf(b, 512, "%s/tests/fixtures/%s", src, sub);
  return b;
}

/* A standard normal deviate (Box-Muller) from a xorshift64 state: fixed-seed test data. */
static inline double pd_test_rng_normal(unsigned long long *state) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    u[i] = ((double)(*state >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2.0 * log(u[0])) * cos(2.0 * M_PI * u[1]);
}

/* With cJSON included first: the file at path parsed; ends the test when it is not JSON. The
 * caller frees the result with cJSON_Delete(). */
#ifdef cJSON__h
static inline cJSON *pd_test_json_read(const char *path) {
  char *text = pd_test_slurp(path);
  cJSON *root = cJSON_Parse(text);
  free(text);
  cr_assert_not_null(root, "%s is not JSON", path);
  return root;
}
#endif

/* The replay's error targets on a committed trace (issue 22): median step error at most 3%,
 * worst step at most 8%, on every one (runs/sync.pt.trace.json.gz, 4.14% median before the
 * replay kept the stream's queue gaps, is at 1.67% since). `name` is the file name, with or
 * without its folder. */
static inline void pd_test_replay_limits(const char *name, double *median, double *worst) {
  (void)name;
  *median = 0.03;
  *worst = 0.08;
}

#endif /* PD_TEST_UTIL_H */
