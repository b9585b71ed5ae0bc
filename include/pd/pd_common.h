/* pd_common.h: error codes, the one clock, and small helpers shared by every layer.
 *
 * Library code (profiler core, scenarios, analyzer) returns one of the PD_E* codes
 * below (0 on success, negative on failure) and never exits the process. Programs
 * turn a code into text with pd_strerror().
 */
#ifndef PD_COMMON_H
#define PD_COMMON_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The programs' version: --version and --help print it; a docs test checks that README.md
 * and the pages under docs/ name no other. */
#define PD_VERSION_STRING "0.1.0"
/* Turns a macro's value into a string literal (PD_STRINGIFY(PD_METRICS_SCHEMA_VERSION)). */
#define PD_STRINGIFY_(x) #x
#define PD_STRINGIFY(x) PD_STRINGIFY_(x)

/* Mixes the bits of a 64-bit key (MurmurHash3's 64-bit finalizer): the hash of every
 * open-addressing table in the project, and the mixer of the trace's ids. */
static inline uint64_t pd_hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* FNV-1a over len bytes (start with seed 0 for plain FNV-1a): the hash of strings in the
 * open-addressing tables of the core (the trace's string pool, the writer's kernel
 * symbols, the links' forward ranges). */
static inline uint64_t pd_hash_bytes(const void *p, size_t len, uint64_t seed) {
  const unsigned char *s = (const unsigned char *)p;
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (size_t i = 0; i < len; i++) {
    h ^= s[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* a + b, clamped to INT64_MIN..INT64_MAX instead of overflowing (undefined behaviour):
 * for sums of durations read from files, which are range-checked one by one but can
 * still add up past the limit. */
static inline int64_t pd_add_sat_i64(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

/* a - b, clamped likewise. */
static inline int64_t pd_sub_sat_i64(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_sub_overflow(a, b, &r)) return r;
  return b < 0 ? INT64_MAX : INT64_MIN;
}

/* v as int64, clamped to INT64_MIN..INT64_MAX (a cast out of range is undefined
 * behaviour), NaN as 0: for times derived from sizes and rates read from files. */
static inline int64_t pd_sat_i64_from_f64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX; /* 2^63 */
  if (v < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

/* One table for error codes: X(name, value, message). */
#define PD_ERRNO_MAP(X)                                                              \
  X(OK, 0, "success")                                                                \
  X(INVAL, -1, "invalid argument")                                                   \
  X(NOMEM, -2, "out of host memory")                                                 \
  X(IO, -3, "file input/output error")                                               \
  X(STATE, -4, "call not allowed in the profiler's current state")                   \
  X(NODEV, -5, "no CUDA device is available")                                        \
  X(CUDA, -6, "a CUDA runtime call failed")                                          \
  X(CUPTI, -7, "a CUPTI call failed")                                                \
  X(CUPTI_BUSY, -8,                                                                  \
    "CUPTI is already in use by another profiler (Nsight Systems, compute-sanitizer)") \
  X(PARSE, -9, "input is not valid JSON or not in the expected format")              \
  X(SCHEMA, -10, "input has an unsupported schema version")                          \
  X(DEVOOM, -11, "out of GPU memory")                                                \
  X(CUBLAS, -12, "a cuBLAS call failed")                                             \
  X(MISMATCH, -13, "inputs are not comparable")                                     \
  X(NOSPC, -14, "no space left on device (or the file size limit)")                  \
  X(ROFS, -15, "read-only file system")                                              \
  X(ACCES, -16, "permission denied")                                                 \
  X(NOTREG, -17, "not a regular file (a directory, device node, FIFO or socket)")    \
  X(ISINPUT, -18, "the output would replace one of the program's inputs")            \
  X(NOENT, -19, "no such file or directory")                                         \
  X(TOOBIG, -20, "larger than the size limit for this input")                       \
  X(STDOUT, -21, "standard output ('-') already carries another output")

typedef enum {
#define PD_ERRNO_GEN(name, value, msg) PD_E##name = (value),
  PD_ERRNO_MAP(PD_ERRNO_GEN)
#undef PD_ERRNO_GEN
} pd_err_t;

/* Returns a static string for an error code; never NULL. */
const char *pd_strerror(int err);
/* Returns the symbolic name ("PD_ECUPTI_BUSY"); never NULL. */
const char *pd_err_name(int err);

/* Grows *arr (elements of elem bytes, capacity *cap) to hold at least need elements:
 * doubling, from 64. Returns 0 or PD_ENOMEM (then *arr and *cap are as they were). */
int pd_array_grow(void **arr, size_t *cap, size_t need, size_t elem);

/* The project's one clock: CLOCK_MONOTONIC in int64 nanoseconds. Host ranges, step
 * timing and (through CUPTI's timestamp callback) GPU activity all use it. */
int64_t pd_clock_now_ns(void);
/* Moves pd_clock_now_ns() forward by ns (> 0) for the rest of the process, as if that
 * much time had passed at once: unit tests make a step "take" a known time without
 * sleeping, and every timestamp (host ranges, step markers, a scripted source's records)
 * moves alike. Thread-safe; never moves the clock back. Not for programs. */
void pd_clock_skip_ns(int64_t ns);
/* Nanoseconds to add to a pd_clock_now_ns() value to get Unix time (CLOCK_REALTIME). */
int64_t pd_clock_unix_offset_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* PD_COMMON_H */
