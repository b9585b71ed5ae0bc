/* bench_prof.c: what the profiler core costs, as tables.
 *
 *  (a) launch overhead: an empty-kernel launch loop without a profiler, with a profiler
 *      between cycles (CUPTI detached, and for comparison kept attached with every kind
 *      disabled), and traced with the default kinds, with memory records and with driver
 *      API records added; us per launch, the added us, what attaching/enabling CUPTI costs
 *      at the warmup step, and what collecting the cycle (flush + parse + sort + detach)
 *      costs per record;
 *  (b) host ranges: ns per push/pop pair untraced, traced, and traced with call stacks
 *      (with_stack: a backtrace() per push, pushed from --stack-depth nested calls so the
 *      stack is as deep as a scenario's), one and four threads, and what collecting the
 *      cycle costs per range (with stacks: symbolizing, cached per address, and joining);
 *  (c) trace writing: events per second and bytes per kernel event for synthetic kernel
 *      events streamed through pd_trace_writer.
 * Each figure is the median of --reps repetitions. Without a GPU (or with --cpu-only)
 * part (a) is skipped and says so.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "bench_kernels.h"
#include "pd/pd_prof.h"
#include "pd/pd_writers.h"
#include "stacks.h" /* the unwinder choice, to measure both */

typedef struct {
  int launches;
  int reps;
  int events;
  int range_pairs;
  int stack_depth;
  const char *out_dir;
  bool cpu_only;
  bool launch_only; /* --launch-only: (a) and the host clock probe, not (b) and (c) */
  int modes;        /* --modes N: the first N rows of (a); 0 = all */
} opts_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_prof [--launches N] [--reps R] [--events N] [--range-pairs N] [--stack-depth N]\n"
          "                  [--out DIR] [--cpu-only]\n"
          "  --launches N     empty-kernel launches per measurement (default 100000)\n"
          "  --reps R         repetitions, the median is reported (default 3)\n"
          "  --events N       synthetic kernel events written (default 1000000)\n"
          "  --range-pairs N  host range push/pop pairs per measurement (default 200000)\n"
          "  --stack-depth N  nested calls above the range loop (default 12: a scenario's depth)\n"
          "  --out DIR        where the synthetic trace is written, then removed (default /tmp)\n"
          "  --cpu-only       skip the GPU launch-overhead table\n"
          "  --launch-only    only the launch-overhead table and the host clock probe\n"
          "  --modes N        only the first N rows of the launch-overhead table (4: no capture variants)\n");
}

static int parse_pos(const char *flag, const char *v, int *out) {
  char *end = NULL;
  long x = v ? strtol(v, &end, 10) : 0;
  if (v == NULL || *v == '\0' || *end != '\0' || x < 1 || x > 100000000) {
    fprintf(stderr, "bench_prof: %s needs an integer from 1 to 100000000, got '%s'\n", flag,
            v ? v : "");
    usage(stderr);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *xs, int n) {
  qsort(xs, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

static double now_s(void) { return (double)pd_clock_now_ns() * 1e-9; }

/* ---- host clock probe ---------------------------------------------------------------------- */

/* What the host charges for the calls a traced record may make: the clock read of the
 * timestamp callback, a gettid (system thread ids) and pthread_self. A clock source
 * without a vDSO fast path makes every clock read a system call. */
static void bench_host_clock(void) {
  char cs[64] = "?";
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f != NULL) {
    if (fgets(cs, sizeof(cs), f) == NULL) snprintf(cs, sizeof(cs), "?");
    fclose(f);
    cs[strcspn(cs, "\n")] = '\0';
  }
  const int n = 1000000;
  volatile int64_t sink = 0;
  double t0 = now_s();
  for (int i = 0; i < n; i++) sink += pd_clock_now_ns();
  double clk = (now_s() - t0) * 1e9 / n;
  t0 = now_s();
  for (int i = 0; i < n; i++) sink += (int64_t)syscall(SYS_gettid);
  double tid = (now_s() - t0) * 1e9 / n;
  t0 = now_s();
  for (int i = 0; i < n; i++) sink += (int64_t)pthread_self();
  double pts = (now_s() - t0) * 1e9 / n;
  (void)sink;
  printf("host clock: clocksource %s; ns per call: pd_clock_now_ns %.1f, gettid %.1f, pthread_self %.1f\n\n",
         cs, clk, tid, pts);
}

/* ---- (a) launch overhead ------------------------------------------------------------------ */

typedef struct {
  int64_t kernels;
  int64_t events;
  uint64_t dropped;
  int cycles;
} cycle_stats_t;

static int stats_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  cycle_stats_t *s = user;
  const pd_event_t *ev = pd_trace_events(cycle);
  size_t n = pd_trace_count(cycle);
  int64_t k = 0;
  for (size_t i = 0; i < n; i++)
    k += ev[i].kind == PD_EVENT_KERNEL && strcmp(ev[i].name, PD_BENCH_EMPTY_KERNEL) == 0;
  s->kernels = k;
  s->events = (int64_t)n;
  s->dropped += pd_trace_dropped(cycle);
  s->cycles++;
  return 0;
}

static int timed_launches(int n, double *us_per_launch) {
  char err[256];
  double t0 = now_s();
  if (pd_bench_launch_empty(n, err, sizeof(err)) != 0) {
    fprintf(stderr, "bench_prof: %s\n", err);
    return -1;
  }
  *us_per_launch = (now_s() - t0) * 1e6 / n;
  return 0;
}

typedef struct {
  const char *label;
  unsigned activities;
  bool memory;
  bool keep_attached; /* PD_PROF_CUPTI_DETACH=0: CUPTI stays attached between cycles */
  const char *capture; /* PD_CUPTI_OPTIONS for this mode; NULL = default capture */
} prof_mode_t;

typedef struct {
  double idle_us, traced_us, collect_ms, ns_per_record, enable_ms;
  int64_t kernels, events;
  uint64_t dropped;
} mode_result_t;

static int run_mode(const opts_t *o, const prof_mode_t *m, mode_result_t *r) {
  cycle_stats_t st = {0};
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = m->activities;
  cfg.profile_memory = m->memory;
  cfg.schedule = (pd_schedule_t){.wait = 1, .warmup = 1, .active = 1, .repeat = 0};
  cfg.on_trace_ready = stats_cb;
  cfg.user = &st;
  pd_prof_t *p = NULL;
  if (m->keep_attached) setenv("PD_PROF_CUPTI_DETACH", "0", 1);
  if (m->capture != NULL) setenv("PD_CUPTI_OPTIONS", m->capture, 1);
  int rc = pd_prof_create(&cfg, &p);
  unsetenv("PD_PROF_CUPTI_DETACH");
  unsetenv("PD_CUPTI_OPTIONS");
  if (rc != 0) {
    fprintf(stderr, "bench_prof: pd_prof_create (%s): %s: %s\n", m->label, pd_err_name(rc),
            pd_prof_last_error(NULL));
    return -1;
  }
  double *idle = calloc((size_t)o->reps, sizeof(double));
  double *traced = calloc((size_t)o->reps, sizeof(double));
  double *collect = calloc((size_t)o->reps, sizeof(double));
  double *enable = calloc((size_t)o->reps, sizeof(double));
  int ok = idle && traced && collect && enable && pd_prof_start(p) == 0;
  for (int rep = 0; ok && rep < o->reps; rep++) {
    /* wait step: profiler exists, CUPTI kinds disabled (and CUPTI detached) */
    ok = timed_launches(o->launches, &idle[rep]) == 0;
    double te = now_s();
    ok = ok && pd_prof_step(p) == 0; /* into warmup: attach + enable */
    enable[rep] = (now_s() - te) * 1e3;
    /* warmup step: CUPTI enabled, results discarded */
    char err[256];
    ok = ok && pd_bench_launch_empty(1000, err, sizeof(err)) == 0 && pd_prof_step(p) == 0;
    /* recorded step, then the step() that collects it */
    ok = ok && timed_launches(o->launches, &traced[rep]) == 0;
    double t0 = now_s();
    ok = ok && pd_prof_step(p) == 0;
    collect[rep] = (now_s() - t0) * 1e3;
    if (ok && st.kernels != o->launches)
      fprintf(stderr, "bench_prof: %s: cycle holds %lld kernels, launched %d\n", m->label,
              (long long)st.kernels, o->launches);
  }
  if (!ok) fprintf(stderr, "bench_prof: %s: %s\n", m->label, pd_prof_last_error(p));
  r->kernels = st.kernels;
  r->events = st.events;
  r->dropped = pd_prof_dropped_records(p);
  pd_prof_destroy(p);
  if (ok) {
    r->idle_us = median(idle, o->reps);
    r->traced_us = median(traced, o->reps);
    r->collect_ms = median(collect, o->reps);
    r->ns_per_record = r->events > 0 ? r->collect_ms * 1e6 / (double)r->events : 0;
    r->enable_ms = median(enable, o->reps);
  }
  free(enable);
  free(idle);
  free(traced);
  free(collect);
  return ok ? 0 : -1;
}

static int bench_launch(const opts_t *o) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("(a) launch overhead: skipped, no CUDA device (%s)\n\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  struct cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    fprintf(stderr, "bench_prof: cudaGetDeviceProperties: %s\n", cudaGetErrorString(e));
    return -1;
  }
  int drv = 0, rt = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess || cudaRuntimeGetVersion(&rt) != cudaSuccess) {
    fprintf(stderr, "bench_prof: cannot read CUDA versions\n");
    return -1;
  }
  /* Warm the context and the module before timing anything. */
  char err[256];
  if (pd_bench_launch_empty(1000, err, sizeof(err)) != 0) {
    fprintf(stderr, "bench_prof: %s\n", err);
    return -1;
  }
  double *base = calloc((size_t)o->reps, sizeof(double));
  if (base == NULL) return -1;
  for (int rep = 0; rep < o->reps; rep++)
    if (timed_launches(o->launches, &base[rep]) != 0) {
      free(base);
      return -1;
    }
  double base_us = median(base, o->reps);
  free(base);

  printf("(a) launch overhead: %d empty-kernel launches + sync, median of %d; %s, driver %d, "
         "runtime %d\n\n",
         o->launches, o->reps, prop.name, drv, rt);
  printf("| mode | us/launch | added us/launch | records/cycle | enable ms | collect ms | "
         "ns/record | kernels seen | dropped |\n");
  printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  printf("| no profiler | %.3f | - | - | - | - | - | - | - |\n", base_us);
  const unsigned dflt = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA;
  const prof_mode_t all_modes[] = {
      {"traced: default kinds", dflt, false, false, NULL},
      {"traced: default kinds, CUPTI kept attached", dflt, false, true, NULL},
      {"traced: default + memory", dflt, true, false, NULL},
      {"traced: default + driver API", dflt | PD_ACTIVITY_CUDA_DRIVER, false, false, NULL},
      /* Capture variants (PD_CUPTI_OPTIONS), each also idle with CUPTI kept attached. */
      {"capture cupti_clock (no timestamp callback)", dflt, false, true, "cupti_clock"},
      {"capture pthread_ids", dflt, false, true, "pthread_ids"},
      {"capture shared_buffers", dflt, false, true, "shared_buffers"},
      {"capture cupti_clock,pthread_ids", dflt, false, true, "cupti_clock,pthread_ids"},
      {"capture kernels_only", dflt, false, true, "kernels_only"},
      {"capture kernels_only,launch_callbacks", dflt, false, true, "kernels_only,launch_callbacks"},
      {"capture kernels_only,cupti_clock,pthread_ids", dflt, false, true,
       "kernels_only,cupti_clock,pthread_ids"},
  };
  /* --modes N: the first N (4 = the table without the capture variants). */
  const size_t nmodes = o->modes > 0 && (size_t)o->modes < sizeof(all_modes) / sizeof(all_modes[0])
                            ? (size_t)o->modes
                            : sizeof(all_modes) / sizeof(all_modes[0]);
  const prof_mode_t *modes = all_modes;
  int rc = 0;
  for (size_t i = 0; i < nmodes; i++) {
    mode_result_t r = {0};
    if (run_mode(o, &modes[i], &r) != 0) {
      rc = -1;
      continue;
    }
    if (i <= 1 || modes[i].capture != NULL)
      printf("| profiler idle (between cycles)%s | %.3f | %+.3f | - | - | - | - | - | - |\n",
             modes[i].capture != NULL ? ", CUPTI kept attached, same capture"
             : modes[i].keep_attached ? ", CUPTI kept attached"
                                      : ", CUPTI detached",
             r.idle_us,
             r.idle_us - base_us);
    printf("| %s | %.3f | %+.3f | %lld | %.1f | %.1f | %.0f | %lld | %llu |\n", modes[i].label,
           r.traced_us, r.traced_us - base_us, (long long)r.events, r.enable_ms, r.collect_ms,
           r.ns_per_record, (long long)r.kernels, (unsigned long long)r.dropped);
  }
  printf("\n");
  return rc;
}

/* ---- (b) host ranges ---------------------------------------------------------------------- */

static int g_pairs;
static int g_stack_depth;

/* The timed loop, run `depth` calls deep so a captured stack has a scenario's depth. */
__attribute__((noinline)) static void range_loop_at(double *ns, int depth) {
  if (depth > 0) {
    range_loop_at(ns, depth - 1);
    __asm__ volatile("" ::: "memory"); /* no tail call: each level keeps its frame */
    return;
  }
  static const char *names[4] = {"forward", "backward", "optimizer", "conv3x3"};
  double t0 = now_s();
  for (int i = 0; i < g_pairs; i++) {
    pd_range_push(names[i & 3]);
    pd_range_pop();
  }
  *ns = (now_s() - t0) * 1e9 / g_pairs;
}

static void *range_loop(void *arg) {
  range_loop_at(arg, g_stack_depth);
  return NULL;
}

static int count_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  *(int64_t *)user = (int64_t)pd_trace_count(cycle);
  return 0;
}

/* Median ns per pair over reps; threads > 1 run concurrently (mean over threads). */
static int measure_ranges(const opts_t *o, bool traced, bool with_stack, int threads, double *ns_out,
                          double *collect_ns_per_range) {
  double *med = calloc((size_t)o->reps, sizeof(double));
  double *col = calloc((size_t)o->reps, sizeof(double));
  if (med == NULL || col == NULL) return -1;
  int64_t got = 0;
  pd_prof_t *p = NULL;
  if (traced) {
    pd_prof_config_t cfg;
    pd_prof_config_init(&cfg);
    cfg.activities = PD_ACTIVITY_CPU;
    cfg.with_stack = with_stack;
    cfg.schedule = (pd_schedule_t){.wait = 0, .warmup = 0, .active = 1, .repeat = 0};
    cfg.on_trace_ready = count_cb;
    cfg.user = &got;
    if (pd_prof_create(&cfg, &p) != 0 || pd_prof_start(p) != 0) {
      fprintf(stderr, "bench_prof: CPU profiler: %s\n", pd_prof_last_error(p));
      free(med);
      free(col);
      pd_prof_destroy(p);
      return -1;
    }
  }
  g_pairs = o->range_pairs;
  g_stack_depth = o->stack_depth;
  int rc = 0;
  for (int rep = 0; rep < o->reps && rc == 0; rep++) {
    pthread_t th[16];
    double ns[16] = {0};
    int started = 0;
    for (int t = 0; t < threads; t++, started++)
      if (pthread_create(&th[t], NULL, range_loop, &ns[t]) != 0) {
        rc = -1;
        break;
      }
    double sum = 0;
    for (int t = 0; t < started; t++) {
      pthread_join(th[t], NULL);
      sum += ns[t];
    }
    med[rep] = sum / threads;
    if (traced) {
      double t0 = now_s();
      rc = pd_prof_step(p);
      col[rep] = (now_s() - t0) * 1e9 / (double)(got > 0 ? got : 1);
      if (got != (int64_t)threads * o->range_pairs + 1)
        fprintf(stderr, "bench_prof: cycle holds %lld ranges, expected %lld\n", (long long)got,
                (long long)threads * o->range_pairs + 1);
    }
  }
  *ns_out = median(med, o->reps);
  *collect_ns_per_range = traced ? median(col, o->reps) : 0;
  pd_prof_destroy(p);
  free(med);
  free(col);
  return rc;
}

static int bench_ranges(const opts_t *o) {
  printf("(b) host ranges: %d push/pop pairs per thread, %d calls deep, median of %d\n\n", o->range_pairs,
         o->stack_depth, o->reps);
  printf("| mode | threads | ns per push+pop | collect+sort ns/range |\n|---|---:|---:|---:|\n");
  const struct {
    const char *label;
    bool traced, stack;
    int threads;
    pd_unwinder_t unwinder;
  } cases[] = {{"untraced", false, false, 1, 0},
               {"traced", true, false, 1, 0},
               {"traced, with_stack (frame pointers)", true, true, 1, PD_UNWIND_FRAME_POINTER},
               {"traced, with_stack (backtrace())", true, true, 1, PD_UNWIND_BACKTRACE},
               {"untraced", false, false, 4, 0},
               {"traced", true, false, 4, 0},
               {"traced, with_stack (frame pointers)", true, true, 4, PD_UNWIND_FRAME_POINTER},
               {"traced, with_stack (backtrace())", true, true, 4, PD_UNWIND_BACKTRACE}};
  pd_unwinder_t saved = pd_stack_unwinder();
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    double ns = 0, col = 0;
    pd_stack_set_unwinder(cases[i].unwinder);
    if (measure_ranges(o, cases[i].traced, cases[i].stack, cases[i].threads, &ns, &col) != 0) return -1;
    if (cases[i].traced)
      printf("| %s | %d | %.1f | %.1f |\n", cases[i].label, cases[i].threads, ns, col);
    else
      printf("| %s | %d | %.1f | - |\n", cases[i].label, cases[i].threads, ns);
  }
  pd_stack_set_unwinder(saved);
  printf("\n");
  return 0;
}

/* ---- (c) trace writing -------------------------------------------------------------------- */

static int write_synthetic(const opts_t *o, bool with_corr, double *events_per_s, double *bytes_per_ev) {
  /* H100 SXM-like limits, fixed so the figures compare across machines. */
  pd_device_props_t dev = {.id = 0, .name = "synthetic H100", .total_global_mem = 85ull << 30,
                           .compute_major = 9, .compute_minor = 0, .num_sms = 132,
                           .max_threads_per_block = 1024, .max_threads_per_sm = 2048,
                           .max_regs_per_block = 65536, .max_regs_per_sm = 65536,
                           .max_shared_mem_per_block = 49152, .max_shared_mem_per_sm = 233472,
                           .warp_size = 32, .max_blocks_per_sm = 32};
  char path[600];
  snprintf(path, sizeof(path), "%s/bench_prof_%d.pt.trace.json", o->out_dir, (int)getpid());
  pd_trace_meta_t meta = {.trace_name = "bench_prof", .unix_offset_ns = pd_clock_unix_offset_ns(),
                          .pid = (uint32_t)getpid(), .profile_memory = false};
  double *eps = calloc((size_t)o->reps, sizeof(double));
  if (eps == NULL) return -1;
  int rc = 0;
  double size = 0;
  for (int rep = 0; rep < o->reps && rc == 0; rep++) {
    pd_trace_writer_t *w = NULL;
    double t0 = now_s();
    rc = pd_trace_writer_open(path, &meta, &dev, 1, &w);
    pd_event_t ev;
    memset(&ev, 0, sizeof(ev));
    ev.kind = PD_EVENT_KERNEL;
    ev.name = "void pd_bench_synthetic_kernel<float, 4>(float*, float const*, int)";
    ev.device = 0;
    ev.context = 1;
    ev.stream = 7;
    ev.pid = (uint32_t)getpid();
    ev.u.kernel.grid[0] = 1024;
    ev.u.kernel.grid[1] = ev.u.kernel.grid[2] = 1;
    ev.u.kernel.block[0] = 256;
    ev.u.kernel.block[1] = ev.u.kernel.block[2] = 1;
    ev.u.kernel.registers_per_thread = 32;
    ev.u.kernel.static_smem_bytes = 4096;
    int64_t base = pd_clock_now_ns();
    for (int i = 0; i < o->events && rc == 0; i++) {
      ev.start_ns = base + (int64_t)i * 2500;
      ev.end_ns = ev.start_ns + 1800 + (i % 97);
      ev.correlation_id = with_corr ? (uint64_t)i + 1 : 0;
      rc = pd_trace_writer_event(w, &ev);
    }
    if (rc == 0)
      rc = pd_trace_writer_close(w);
    else
      pd_trace_writer_abort(w);
    eps[rep] = o->events / (now_s() - t0);
    struct stat stt;
    if (rc == 0 && stat(path, &stt) == 0) size = (double)stt.st_size;
    remove(path);
  }
  if (rc != 0) fprintf(stderr, "bench_prof: trace writer: %s\n", pd_err_name(rc));
  *events_per_s = median(eps, o->reps);
  *bytes_per_ev = size / o->events;
  free(eps);
  return rc;
}

static int bench_writer(const opts_t *o) {
  printf("(c) trace writing: %d synthetic kernel events through pd_trace_writer into %s, median "
         "of %d\n\n",
         o->events, o->out_dir, o->reps);
  printf("| events | M events/s | bytes per kernel event |\n|---|---:|---:|\n");
  for (int corr = 0; corr < 2; corr++) {
    double eps = 0, bpe = 0;
    if (write_synthetic(o, corr == 1, &eps, &bpe) != 0) return -1;
    printf("| kernel%s | %.2f | %.0f |\n", corr ? " + ac2g flow end (correlation id)" : " only", eps / 1e6,
           bpe);
  }
  printf("\n");
  return 0;
}

int main(int argc, char **argv) {
  opts_t o = {.launches = 100000, .reps = 3, .events = 1000000, .range_pairs = 200000, .stack_depth = 12,
              .out_dir = "/tmp", .cpu_only = false};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (strcmp(a, "--launches") == 0) {
      rc = parse_pos(a, v, &o.launches), i++;
    } else if (strcmp(a, "--reps") == 0) {
      rc = parse_pos(a, v, &o.reps), i++;
    } else if (strcmp(a, "--events") == 0) {
      rc = parse_pos(a, v, &o.events), i++;
    } else if (strcmp(a, "--range-pairs") == 0) {
      rc = parse_pos(a, v, &o.range_pairs), i++;
    } else if (strcmp(a, "--stack-depth") == 0) {
      rc = parse_pos(a, v, &o.stack_depth), i++;
      if (rc == 0 && o.stack_depth > 1000) {
        fprintf(stderr, "bench_prof: --stack-depth needs an integer from 1 to 1000, got '%s'\n", v);
        rc = -1;
      }
    } else if (strcmp(a, "--out") == 0) {
      struct stat st;
      if (v == NULL || stat(v, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "bench_prof: --out needs an existing directory, got '%s'\n", v ? v : "");
        usage(stderr);
        return 2;
      }
      o.out_dir = v;
      i++;
    } else if (strcmp(a, "--cpu-only") == 0) {
      o.cpu_only = true;
    } else if (strcmp(a, "--launch-only") == 0) {
      o.launch_only = true;
    } else if (strcmp(a, "--modes") == 0) {
      rc = parse_pos(a, v, &o.modes), i++;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "bench_prof: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (rc != 0) return 2;
  }
  if (o.reps > 1000) o.reps = 1000;
  int rc = 0;
  bench_host_clock();
  if (o.cpu_only)
    printf("(a) launch overhead: skipped (--cpu-only)\n\n");
  else
    rc |= bench_launch(&o);
  if (o.launch_only) return rc ? 1 : 0;
  rc |= bench_ranges(&o);
  rc |= bench_writer(&o);
  return rc ? 1 : 0;
}
