/* common.c: error strings and the project's one clock. */
#include "pd/pd_common.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

const char *pd_strerror(int err) {
  switch (err) {
#define PD_STRERROR_GEN(name, value, msg) \
  case PD_E##name:                        \
    return msg;
    PD_ERRNO_MAP(PD_STRERROR_GEN)
#undef PD_STRERROR_GEN
  }
  return "unknown error";
}

const char *pd_err_name(int err) {
  switch (err) {
#define PD_ERRNAME_GEN(name, value, msg) \
  case PD_E##name:                       \
    return "PD_E" #name;
    PD_ERRNO_MAP(PD_ERRNAME_GEN)
#undef PD_ERRNAME_GEN
  }
  return "PD_EUNKNOWN";
}

/* pd_clock_skip_ns's total; a relaxed load is a plain load where the clock is read */
static _Atomic int64_t g_clock_skip_ns;

int64_t pd_clock_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + atomic_load_explicit(&g_clock_skip_ns, memory_order_relaxed);
}

void pd_clock_skip_ns(int64_t ns) {
  if (ns > 0) atomic_fetch_add_explicit(&g_clock_skip_ns, ns, memory_order_relaxed);
}

int64_t pd_clock_unix_offset_ns(void) {
  /* Sample realtime between two monotonic reads to bound the error by their gap. */
  struct timespec rt;
  int64_t m0 = pd_clock_now_ns();
  clock_gettime(CLOCK_REALTIME, &rt);
  int64_t m1 = pd_clock_now_ns();
  int64_t real = (int64_t)rt.tv_sec * 1000000000LL + rt.tv_nsec;
  return real - (m0 + (m1 - m0) / 2);
}

int pd_array_grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap > 0 ? *cap * 2 : 64;
  while (n < need) n *= 2;
  void *p = realloc(*arr, n * elem);
  if (p == NULL) return PD_ENOMEM;
  *arr = p;
  *cap = n;
  return 0;
}
