/* cpu_watch: how fast each CPU of this machine runs a fixed piece of work, over time.
 *
 *   cpu_watch [SECONDS] [DUTY_PERCENT]        (default 10 s, 20%)
 *
 * One thread per CPU the process may use, pinned to it. Each thread repeats, until
 * SECONDS have passed: a compute chunk (pd_host_calib_work, the capture layer's register-
 * only calibration workload, about 100 us), a memory chunk (a dependent walk through a
 * random cycle over 8 MiB of its own, past the core's private caches, about 100 us), then
 * sleeps so that it works DUTY_PERCENT of the time (a light load: the machine is not made
 * busy by watching it). Chunk times are kept per 50 ms bin; printed on stdout, one line per
 * CPU and bin:
 *
 *   cpu <TAB> bin <TAB> compute_ns (median of the bin) <TAB> memory_ns <TAB> chunks
 *
 * after a comment line "# t0_monotonic_ns T bin_ns B" (bin 0 starts at CLOCK_MONOTONIC T) and a
 * header line. bench/gate/cpu_watch_eval.py reads it: whether a CPU's speed moves
 * in episodes, how long they last, whether CPUs move together, and whether compute and
 * memory move alike (docs/gate.md, the slow state). Exit 0; 2 bad usage; 1 a thread could
 * not be started or pinned, or memory ran out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd/pd_host_calib.h"

#define WATCH_BIN_NS 50000000LL
#define WATCH_COMPUTE_ITERS 33000
#define WATCH_WALK_BYTES (8u << 20)
#define WATCH_WALK_STEPS 2048
#define WATCH_MAX_PER_BIN 256

typedef struct {
  int cpu;
  int64_t t0_ns, end_ns;
  double duty;
  int nbins;
  /* per bin: chunk times, then the medians */
  int32_t *n;
  int64_t *compute, *memory; /* nbins * WATCH_MAX_PER_BIN */
  int err;
  uint64_t sink;
} watch_t;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void *watch_main(void *arg) {
  watch_t *w = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(w->cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    w->err = 1;
    return NULL;
  }
  /* A random cycle over cache lines, built here so its pages are this CPU's first touch. */
  const size_t lines = WATCH_WALK_BYTES / 64;
  uint32_t *next = aligned_alloc(64, WATCH_WALK_BYTES);
  uint32_t *order = malloc(lines * sizeof *order);
  if (next == NULL || order == NULL) {
    free(next);
    free(order);
    w->err = 2;
    return NULL;
  }
  uint64_t r = 0x2545F4914F6CDD1DULL ^ (uint64_t)w->cpu;
  for (size_t i = 0; i < lines; i++) order[i] = (uint32_t)i;
  for (size_t i = lines - 1; i > 0; i--) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    size_t j = (size_t)(r % (i + 1));
    uint32_t t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (size_t i = 0; i < lines; i++) next[(size_t)order[i] * 16] = order[(i + 1) % lines] * 16;
  free(order);
  uint32_t at = 0;
  for (;;) {
    const int64_t a = now_ns();
    if (a >= w->end_ns) break;
    w->sink += pd_host_calib_work(WATCH_COMPUTE_ITERS);
    const int64_t b = now_ns();
    for (int s = 0; s < WATCH_WALK_STEPS; s++) at = next[at];
    const int64_t c = now_ns();
    const int bin = (int)((a - w->t0_ns) / WATCH_BIN_NS);
    if (bin >= 0 && bin < w->nbins && w->n[bin] < WATCH_MAX_PER_BIN) {
      const size_t k = (size_t)bin * WATCH_MAX_PER_BIN + (size_t)w->n[bin]++;
      w->compute[k] = b - a;
      w->memory[k] = c - b;
    }
    /* sleep so that the work is duty of the time */
    const int64_t rest = (int64_t)((double)(c - a) * (1.0 / w->duty - 1.0));
    struct timespec ts = {.tv_sec = rest / 1000000000LL, .tv_nsec = rest % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  w->sink += at;
  free(next);
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = 10.0, duty_pct = 20.0;
  char *end;
  if (argc > 3 || (argc > 1 && strcmp(argv[1], "--help") == 0)) {
    fprintf(stderr, "usage: cpu_watch [SECONDS] [DUTY_PERCENT]\n");
    return 2;
  }
  if (argc > 1) {
    seconds = strtod(argv[1], &end);
    if (*end != '\0' || !(seconds >= 1.0 && seconds <= 600.0)) {
      fprintf(stderr, "cpu_watch: SECONDS must be a number from 1 to 600, got '%s'\n", argv[1]);
      return 2;
    }
  }
  if (argc > 2) {
    duty_pct = strtod(argv[2], &end);
    if (*end != '\0' || !(duty_pct >= 1.0 && duty_pct <= 100.0)) {
      fprintf(stderr, "cpu_watch: DUTY_PERCENT must be a number from 1 to 100, got '%s'\n", argv[2]);
      return 2;
    }
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    fprintf(stderr, "cpu_watch: cannot read the allowed CPUs: %s\n", strerror(errno));
    return 1;
  }
  const int ncpu = CPU_COUNT(&allowed);
  watch_t *ws = calloc((size_t)ncpu, sizeof *ws);
  pthread_t *th = calloc((size_t)ncpu, sizeof *th);
  if (ws == NULL || th == NULL) {
    fprintf(stderr, "cpu_watch: out of memory\n");
    return 1;
  }
  const int nbins = (int)(seconds * 1e9 / (double)WATCH_BIN_NS);
  const int64_t t0 = now_ns() + 200000000LL; /* the bins start when every thread is set up */
  int k = 0, rc = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && k < ncpu; cpu++) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    watch_t *w = &ws[k];
    w->cpu = cpu, w->t0_ns = t0, w->end_ns = t0 + (int64_t)nbins * WATCH_BIN_NS, w->duty = duty_pct / 100.0;
    w->nbins = nbins;
    w->n = calloc((size_t)nbins, sizeof *w->n);
    w->compute = malloc((size_t)nbins * WATCH_MAX_PER_BIN * sizeof *w->compute);
    w->memory = malloc((size_t)nbins * WATCH_MAX_PER_BIN * sizeof *w->memory);
    if (w->n == NULL || w->compute == NULL || w->memory == NULL) {
      fprintf(stderr, "cpu_watch: out of memory\n");
      return 1;
    }
    if (pthread_create(&th[k], NULL, watch_main, w) != 0) {
      fprintf(stderr, "cpu_watch: cannot start a thread for CPU %d\n", cpu);
      return 1;
    }
    k++;
  }
  for (int i = 0; i < k; i++) pthread_join(th[i], NULL);
  printf("# t0_monotonic_ns %lld bin_ns %lld\n", (long long)t0, (long long)WATCH_BIN_NS);
  printf("cpu\tbin\tcompute_ns\tmemory_ns\tchunks\n");
  for (int i = 0; i < k; i++) {
    watch_t *w = &ws[i];
    if (w->err != 0) {
      fprintf(stderr, "cpu_watch: CPU %d: %s\n", w->cpu, w->err == 1 ? "cannot pin a thread to it" : "out of memory");
      rc = 1;
      continue;
    }
    for (int b = 0; b < nbins; b++) {
      const int m = w->n[b];
      if (m == 0) continue;
      int64_t *c = w->compute + (size_t)b * WATCH_MAX_PER_BIN, *mm = w->memory + (size_t)b * WATCH_MAX_PER_BIN;
      qsort(c, (size_t)m, sizeof *c, cmp_i64);
      qsort(mm, (size_t)m, sizeof *mm, cmp_i64);
      printf("%d\t%d\t%lld\t%lld\t%d\n", w->cpu, b, (long long)c[m / 2], (long long)mm[m / 2], m);
    }
    free(w->n), free(w->compute), free(w->memory);
  }
  free(ws), free(th);
  return rc;
}
