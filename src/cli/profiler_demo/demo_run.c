/* demo_run.c: profiler_demo's run (PRD sections 4.1-4.9): device check, output dirs,
 * data pipeline, model, warmup, the profiled steps under schedule(wait=1, warmup=1,
 * active=profile_steps, repeat=1), the console report and the metrics JSON.
 *
 * Step timing, per step (PRD 4.8): data wait runs from the previous step's end to the
 * batch in hand (pd_data_next returned, its copy enqueued: ahead, between steps, by
 * pd_data_prefetch when the loader had it ready, which is not waiting); synchronize; t0; the
 * (optional injected slowdown, src/scen/inject.c); "train_step" range around
 * pd_cnn_train_step; synchronize; t1. Step time is t1 - t0. Only the active steps' samples are kept.
 *
 * --no_profile runs the same warmup and the same 1 + 1 + profile_steps steps, timed the
 * same way and with the same host ranges (no-ops without a tracing profiler), but never
 * creates the profiler: no CUPTI call, no trace, no ops tables. Its metrics JSON keeps
 * the host-timed metrics (step time, data wait, loss) and the per-step samples; the
 * GPU-side metrics are null (not measured) and so is the verdict, because the rules that
 * tell sync, launch overhead and allocator churn apart need those metrics, and a
 * verdict from the rest would name `compute` for want of evidence.
 *
 * Any failure after work started removes the files and directories this run created.
 */
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "demo.h"
#include "pd/pd_cnn.h"
#include "pd/pd_common.h"
#include "pd/pd_data.h"
#include "pd/pd_host_calib.h"
#include "pd/pd_out.h"
#include "pd/pd_pipeline.h"
#include "pd/pd_prof.h"
#include "pd/pd_scen.h"
#include "pd/pd_stats.h"
#include "pd/pd_writers.h"

typedef struct {
  const pd_demo_config_t *cfg;
  pd_demo_outputs_t outs;
  int64_t unix_offset_ns;
  pd_device_info_t dev; /* versions for the trace's top-level keys */
  /* The cycle pipeline (pd_pipeline.h), fed by the trace-ready callback: the ops table
   * (key_averages), the kernel-level view, the tables grouped by call site
   * (--group_by_stack_n) and by whole stack (--export_stacks), the metrics, the cycles. */
  pd_pipeline_t pl;
  pd_prof_cost_t cost; /* the profiler's own cost over the run, read after it stops */
  char **traces; /* one per cycle (--repeat), in order */
  int ntraces, traces_cap;
  pd_host_memory_t mem; /* RSS over the steps after the warmup */
  char cb_error[PD_DEMO_PATH_MAX + 256];
  /* the run */
  cudaStream_t stream;
  pd_data_t *data;
  pd_cnn_t *cnn;
  pd_prof_t *prof;
  pd_cnn_config_t cnn_cfg;
  pd_data_config_t data_cfg;
  int64_t prev_end_ns;
  int64_t gpu_spin_ns; /* --inject_gpu_slowdown: device time added per step */
  pd_host_calib_t calib; /* the launching thread's speed at start and end (host_calib.c) */
  pd_loader_rate_t loader; /* what the data pipeline made, read after the steps */
  bool progress; /* stdout is a terminal */
  bool outs_ready; /* the output directories exist: a failure takes them back */
  /* the schedule: cycles of wait, warmup 1 and active steps, repeat times (0: until the
   * steps end); with --no_profile it only picks which steps are timed */
  pd_schedule_t sched;
  int64_t total_steps; /* after the warmup */
  int active_steps;    /* the steps the schedule records, over all cycles */
  const char *config_note;
  /* the steps */
  int64_t steps_done;
  double warm_sum;  /* warmup step times, the base of --inject_slowdown */
  int warm_n;
  pd_scen_inject_t inject; /* --inject_slowdown, sized from the steps after the warmup */
  pd_scen_inject_t warm_inject; /* --inject_slowdown in the warmup, sized from its own steps */
  double *step_s, *wait_s, *period_s; /* per timed (active) step */
  double *warm_period_s, *warm_step_s; /* per warmup step after the first */
  double *warm_probe_launch_ns, *warm_probe_compute_ns; /* the same, --warmup_probe (else NULL) */
  int nwarm_period;
  int nsamples;
  /* the results */
  pd_verdict_t verdict;
  bool json_written;
} demo_run_t;

/* Prints "profiler_demo: <message>" on stderr. */
static void demo_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void demo_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", PD_DEMO_PROG);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

/* Checks a CUDA call in the run; on failure prints file:line, the call and CUDA's text
 * and jumps to the run's cleanup with exit code 1 (4 when out of memory). */
#define DEMO_CUDA(call)                                                                          \
  do {                                                                                           \
    cudaError_t demo_e_ = (call);                                                                \
    if (demo_e_ != cudaSuccess) {                                                                \
      demo_err("%s:%d %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(demo_e_)); \
      exit_code = demo_e_ == cudaErrorMemoryAllocation ? PD_DEMO_EXIT_OOM : PD_DEMO_EXIT_RUNTIME; \
      goto done;                                                                                 \
    }                                                                                            \
  } while (0)

/* ---- the trace-ready callback ------------------------------------------------------------ */

/* Runs the cycle through the pipeline: its trace written, added to the ops tables, its
 * GPU-side metrics read.
 * Runs on the loop's thread inside pd_prof_step()/pd_prof_stop(). */
static int demo_trace_ready_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  demo_run_t *r = user;
  if (r->ntraces == r->traces_cap) {
    int cap = r->traces_cap > 0 ? 2 * r->traces_cap : 8;
    char **grown = realloc(r->traces, (size_t)cap * sizeof *grown);
    if (grown == NULL) {
      snprintf(r->cb_error, sizeof(r->cb_error), "out of host memory for the trace list");
      return PD_ENOMEM;
    }
    r->traces = grown;
    r->traces_cap = cap;
  }
  char path[PD_DEMO_PATH_MAX];
  int rc = pd_prof_trace_file_path(prof, path, PD_DEMO_PATH_MAX - 3);
  if (rc == 0 && r->cfg->trace_gzip) strcat(path, ".gz"); /* gzipped on the way (pd_out) */
  if (rc != 0) {
    snprintf(r->cb_error, sizeof(r->cb_error), "trace file name under '%s': %s", r->cfg->trace_dir,
             pd_strerror(rc));
    return rc;
  }
  pd_trace_meta_t meta = {.trace_name = NULL,
                          .unix_offset_ns = r->unix_offset_ns,
                          .pid = (uint32_t)getpid(),
                          .profile_memory = true,
                          .record_shapes = true,
                          .cuda_driver_version = r->dev.driver_version,
                          .cuda_runtime_version = r->dev.runtime_version,
                          .cupti_version = r->dev.cupti_version,
                          .links = true};
  pd_prof_cost_t cycle_cost;
  if (pd_prof_cost(prof, NULL, &cycle_cost) == 0) meta.cost = &cycle_cost;
  /* write -> link and index -> key averages -> the cycle's step metrics */
  rc = pd_pipeline_add_cycle(&r->pl, cycle, path, &meta, NULL);
  if (rc != 0 && r->pl.failed == PD_PIPE_WRITE) {
    snprintf(r->cb_error, sizeof(r->cb_error), "cannot write trace '%s': %s", path, pd_strerror(rc));
    return rc;
  }
  /* Written: listed (and taken back on failure) even when a later stage failed. */
  if ((r->traces[r->ntraces] = strdup(path)) == NULL) {
    (void)unlink(path);
    snprintf(r->cb_error, sizeof(r->cb_error), "out of host memory for the trace list");
    return PD_ENOMEM;
  }
  r->ntraces++;
  if (rc != 0) {
    snprintf(r->cb_error, sizeof(r->cb_error), "%s: %s",
             r->pl.failed == PD_PIPE_METRICS ? "step metrics from the cycle" : "aggregating the cycle",
             pd_strerror(rc));
    return rc;
  }
  if (r->pl.cycles == 1) {
    (void)pd_host_rss_kib(&r->mem.rss_first_cycle_kib, NULL);
    r->mem.heap_first_cycle_kib = pd_host_heap_in_use_kib();
  }
  return 0;
}

/* After a cycle's trace is written and freed: hands the freed memory back to the system.
 * glibc raises its mmap threshold each time a large mmapped block is freed, so the next
 * cycles' large buffers come from the heap, which keeps them; over 200 cycles of a long run
 * that was +19 MiB of resident memory with the heap in use flat (+5.6 MiB with a fixed
 * threshold; docs/reliability.md). */
static void demo_release_heap(void) {
#ifdef __GLIBC__
  (void)malloc_trim(0);
#endif
}

/* ---- one training step ------------------------------------------------------------------- */

typedef struct {
  double step_s;
  double wait_s;
  int rc;          /* PD_E* of the failing library call, 0 when a CUDA call failed or all ok */
  const char *what; /* which call failed */
} demo_step_result_t;

static int demo_step(demo_run_t *r, int64_t spin_ns, demo_step_result_t *res) {
  int exit_code = PD_DEMO_EXIT_OK;
  memset(res, 0, sizeof(*res));
  pd_batch_t batch;
  int rc = pd_data_next(r->data, &batch);
  if (rc != 0) {
    res->rc = rc;
    res->what = "the data pipeline";
    return rc == PD_EDEVOOM ? PD_DEMO_EXIT_OOM : PD_DEMO_EXIT_RUNTIME;
  }
  res->wait_s = (double)(pd_clock_now_ns() - r->prev_end_ns) * 1e-9;
  /* PRD 4.8: synchronize, then t0. Here this waits for the batch's host-to-device copy,
   * which is thus in neither the data wait nor the step time (it is in the trace). */
  DEMO_CUDA(cudaStreamSynchronize(r->stream));
  const int64_t t0 = pd_clock_now_ns();
  if (spin_ns > 0) {
    /* --inject_slowdown: before the launches, so the step waits for all of it (inject.c).
     * A named range, so a trace reader sees why these steps are longer. */
    const bool spun = pd_range_push("inject_slowdown") == 0;
    pd_scen_spin_ns(spin_ns);
    if (spun) (void)pd_range_pop();
  }

  const bool ranged = pd_range_push("train_step") == 0;
  rc = pd_cnn_train_step(r->cnn, batch.images, batch.labels);
  if (ranged) (void)pd_range_pop();
  if (rc != 0) {
    res->rc = rc;
    res->what = "the training step";
    return rc == PD_EDEVOOM ? PD_DEMO_EXIT_OOM : PD_DEMO_EXIT_RUNTIME;
  }
  DEMO_CUDA(cudaStreamSynchronize(r->stream));
  const int64_t t1 = pd_clock_now_ns();
  res->step_s = (double)(t1 - t0) * 1e-9;
  r->prev_end_ns = t1;
done:
  return exit_code;
}

/* Measures one training step's GPU time without host gaps, for --inject_gpu_slowdown:
 * the stream is held by a device-side wait long enough for the host to enqueue the
 * whole step behind it, so CUDA events around the step time its kernels back to back.
 * Median of three. *host_blocked is set when the host could not finish enqueuing before
 * the wait ran out (a scenario that synchronizes inside the step): the figure then also
 * holds the GPU's idle time after that synchronization. Runs before the profiler starts,
 * so none of it reaches a trace. */
static int demo_measure_step_gpu(demo_run_t *r, double warm_step_s, int64_t *gpu_ns, bool *host_blocked) {
  int exit_code = PD_DEMO_EXIT_OK;
  cudaEvent_t ev[2] = {NULL, NULL};
  int64_t samples[3];
  *host_blocked = false;
  /* Four warmup steps of host time plus a millisecond, within [2 ms, 200 ms]. */
  int64_t hold_ns = (int64_t)(4.0 * warm_step_s * 1e9) + 1000000;
  if (hold_ns < 2000000) hold_ns = 2000000;
  if (hold_ns > 200000000) hold_ns = 200000000;
  DEMO_CUDA(cudaEventCreate(&ev[0]));
  DEMO_CUDA(cudaEventCreate(&ev[1]));
  for (int i = 0; i < 3; i++) {
    pd_batch_t batch;
    int rc = pd_data_next(r->data, &batch);
    if (rc == 0) {
      DEMO_CUDA(cudaStreamSynchronize(r->stream));
      rc = pd_cnn_gpu_delay(r->cnn, hold_ns);
    }
    int64_t h0 = 0, h1 = 0;
    if (rc == 0) {
      DEMO_CUDA(cudaEventRecord(ev[0], r->stream));
      h0 = pd_clock_now_ns();
      rc = pd_cnn_train_step(r->cnn, batch.images, batch.labels);
      h1 = pd_clock_now_ns();
    }
    if (rc != 0) {
      demo_err("measuring the step's GPU time for --inject_gpu_slowdown: %s", pd_strerror(rc));
      exit_code = rc == PD_EDEVOOM ? PD_DEMO_EXIT_OOM : PD_DEMO_EXIT_RUNTIME;
      goto done;
    }
    DEMO_CUDA(cudaEventRecord(ev[1], r->stream));
    DEMO_CUDA(cudaEventSynchronize(ev[1]));
    float ms = 0.0f;
    DEMO_CUDA(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    samples[i] = (int64_t)((double)ms * 1e6);
    if (h1 - h0 > hold_ns * 9 / 10) *host_blocked = true;
  }
  /* median of three */
  int64_t a = samples[0], b = samples[1], c = samples[2];
  *gpu_ns = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
done:
  for (int i = 0; i < 2; i++)
    if (ev[i] != NULL) (void)cudaEventDestroy(ev[i]);
  return exit_code;
}

/* Reports a failed step and returns its exit code. */
static int demo_step_failed(const demo_run_t *r, const demo_step_result_t *res, int code, const char *phase,
                            int index) {
  if (res->rc == 0) return code; /* a CUDA call failed and was reported already */
  if (code == PD_DEMO_EXIT_OOM) {
    demo_err("out of GPU memory at batch %d; try a smaller --batch_size", r->cfg->batch_size);
  } else {
    const char *detail = res->rc != 0 && strcmp(res->what, "the data pipeline") == 0 ? pd_data_last_error() : "";
    demo_err("%s step %d: %s failed: %s%s%s", phase, index, res->what, pd_strerror(res->rc),
             detail[0] ? ": " : "", detail);
  }
  return code;
}

/* Reports a failed pd_prof_step() (step >= 0) or pd_prof_stop() (step < 0). A failure of
 * this program's own trace-ready handler (writing a trace, say) is said in its own words,
 * which name the path and the cause; any other is the profiler's, with its detail. */
static void demo_profiler_failed(const demo_run_t *r, const char *what, int step, int rc) {
  char at[48] = "";
  if (step >= 0) snprintf(at, sizeof at, " at profiler step %d", step);
  if (r->cb_error[0] != '\0')
    demo_err("%s%s", r->cb_error, at);
  else
    demo_err("%s%s: %s (%s)", what, at, pd_strerror(rc), pd_prof_last_error(r->prof));
}

static void demo_progress(const demo_run_t *r, const char *phase, int i, int n) {
  if (!r->progress) return;
  printf("\r  %s step %d/%d   ", phase, i, n);
  fflush(stdout);
}

static void demo_progress_clear(const demo_run_t *r) {
  if (!r->progress) return;
  printf("\r%60s\r", "");
  fflush(stdout);
}

/* ---- report ---------------------------------------------------------------------------- */

static const char *demo_tiny_text(pd_tiny_mode_t m) {
  switch (m) {
    case PD_TINY_OFF:
      return "off";
    case PD_TINY_CHAIN:
      return "chain";
    case PD_TINY_FUSED:
      return "fused";
    case PD_TINY_GRAPH:
      return "graph";
  }
  return "unknown";
}

static const char *demo_alloc_text(pd_alloc_mode_t m) {
  return m == PD_ALLOC_CHURN ? "cudamalloc" : "pool";
}

static const char *demo_sort_text(int key) {
  switch (key) {
#define PD_DEMO_SORT_CASE(id, text) \
  case PD_SORT_##id:                \
    return text;
    PD_SORT_KEY_MAP(PD_DEMO_SORT_CASE)
#undef PD_DEMO_SORT_CASE
  }
  return "unknown";
}

/* The run's settings under the report's title line. */
static void demo_print_config_line(const demo_run_t *r) {
  const pd_demo_config_t *c = r->cfg;
  printf("  batch_size %d, num_workers %d, prefetch_factor %d%s%s%s, tiny_ops %s, allocator %s, sync %s\n",
         c->batch_size, r->data_cfg.num_workers, c->prefetch_factor, c->persistent_workers ? ", persistent" : "",
         c->pin_memory ? ", pin_memory" : "", c->amp ? ", amp" : "", demo_tiny_text(r->cnn_cfg.tiny_mode),
         demo_alloc_text(r->cnn_cfg.alloc_mode), r->cnn_cfg.sync_mode == PD_SYNC_FORCED ? "forced" : "none");
  if (c->inject_slowdown > 0) printf("  inject_slowdown %.3f (test only)\n", c->inject_slowdown);
}

/* The report of a --no_profile run: the host-timed quick stats and why the rest is
 * missing. */
static void demo_print_unprofiled(const demo_run_t *r) {
  const pd_demo_config_t *c = r->cfg;
  const pd_metrics_t *m = &r->pl.metrics;
  if (!c->quiet) {
    printf("\nQuick stats (%d timed steps, profiler off):\n", m->steps);
    printf("  %-28s %.6f\n", "avg_step_time_s", m->avg_step_time_s);
    printf("  %-28s %.6f\n", "avg_dataloader_wait_s", m->avg_dataloader_wait_s);
    printf("  %-28s %.6f / %.6f\n", "p50 / p95 step time (s)", m->p50_step_time_s, m->p95_step_time_s);
    printf("  %-28s %.1f%%\n", "dataloader wait share", 100.0 * m->dataloader_wait_fraction);
    printf("  %-28s %.4f -> %.4f\n", "loss (first -> last)", m->loss_first, m->loss_last);
    printf("  %-28s not measured (null in the metrics JSON)\n", "GPU-side metrics");
  }
  printf("\nProfiling: off (--no_profile): no CUPTI, no trace, no ops tables");
  if (!c->quiet) printf("; --trace_dir, --with_stack, --top_n and --sort_by have no effect");
  printf("\nVerdict: not available (the rules need the profiler's GPU-side metrics)\n");
}

/* One line: how much of the profiled steps is the profiler itself (pd_prof_cost_t). */
static void demo_print_cost(const pd_prof_cost_t *c, double step_s) {
  const double per_step = c->steps > 0 ? (double)c->records / (double)c->steps : 0.0;
  if (c->est_added_us_per_step >= 0.0) {
    printf("Profiler cost: about %.1f us per step", c->est_added_us_per_step);
    if (step_s > 0.0) printf(" (%.1f%% of the profiled step)", c->est_added_us_per_step * 1e-4 / step_s);
    printf(" from %.0f records and %.0f host ranges per step, at +%.0f ns per traced launch and +%.0f ns "
           "per range (calibrated on this host)",
           per_step, c->steps > 0 ? (double)c->host_ranges / (double)c->steps : 0.0, c->calib_ns_per_call,
           c->calib_ns_per_range);
    if (c->census_steps > 0)
      printf(", with %.0f API calls per step traced but not recorded (counted in the warmup)",
             (double)(c->census_runtime_unrecorded + c->census_driver_unrecorded) / (double)c->census_steps);
  } else {
    printf("Profiler cost: not estimated (no calibration: PD_PROF_CALIBRATE=0 or it failed); %.0f records per step",
           per_step);
  }
  if (isfinite(c->measured_added_us_per_step))
    printf("; measured in this process: %+.1f us per step (median of %lld recorded steps against %lld untraced)",
           c->measured_added_us_per_step, (long long)c->measured_traced_steps, (long long)c->measured_untraced_steps);
  printf("; outside the steps: flush %.1f ms, parse %.1f ms, %lld buffers\n", c->flush_ms, c->parse_ms,
         (long long)c->buffers);
}

/* One line: host memory over the steps (flat over a long run, or how it grew). */
static void demo_print_host_memory(const pd_host_memory_t *h, int cycles) {
  if (h->rss_start_kib < 0 || h->rss_end_kib < 0) return;
  printf("Host memory: RSS %.1f MiB before the steps", h->rss_start_kib / 1024.0);
  if (h->rss_first_cycle_kib >= 0 && cycles > 1)
    printf(", %.1f MiB after the first cycle", h->rss_first_cycle_kib / 1024.0);
  const int64_t from = h->rss_first_cycle_kib >= 0 && cycles > 1 ? h->rss_first_cycle_kib : h->rss_start_kib;
  printf(", %.1f MiB after %lld steps (%+.1f MiB), peak %.1f MiB", h->rss_end_kib / 1024.0, (long long)h->steps,
         (h->rss_end_kib - from) / 1024.0, h->rss_peak_kib / 1024.0);
  const int64_t heap_from = h->heap_first_cycle_kib >= 0 && cycles > 1 ? h->heap_first_cycle_kib : h->heap_start_kib;
  if (heap_from >= 0 && h->heap_end_kib >= 0)
    printf("; malloc heap in use %.1f -> %.1f MiB", heap_from / 1024.0, h->heap_end_kib / 1024.0);
  printf("\n");
}

static void demo_print_report(const demo_run_t *r, const pd_device_info_t *dev, const pd_verdict_t *v) {
  const pd_demo_config_t *c = r->cfg;
  const pd_metrics_t *m = &r->pl.metrics;
  if (c->no_profile) {
    if (!c->quiet) {
      printf("\n%s: scenario %s on %s (sm_%d%d)\n", PD_DEMO_PROG, pd_scenario_name((pd_scenario_t)c->scenario),
             dev->name, dev->compute_major, dev->compute_minor);
      demo_print_config_line(r);
    }
    demo_print_unprofiled(r);
    demo_print_host_memory(&r->mem, r->pl.cycles);
    return;
  }
  if (!c->quiet) {
    printf("\n%s: scenario %s on %s (sm_%d%d)\n", PD_DEMO_PROG, pd_scenario_name((pd_scenario_t)c->scenario),
           dev->name, dev->compute_major, dev->compute_minor);
    demo_print_config_line(r);
    printf("\nQuick stats (%d profiled steps%s):\n", m->steps,
           r->pl.cycles > 1 ? "; GPU-side figures from the last cycle" : "");
    printf("  %-28s %.6f\n", "avg_step_time_s", m->avg_step_time_s);
    printf("  %-28s %.6f\n", "avg_dataloader_wait_s", m->avg_dataloader_wait_s);
    printf("  %-28s %.6f / %.6f\n", "p50 / p95 step time (s)", m->p50_step_time_s, m->p95_step_time_s);
    printf("  %-28s %.1f%%\n", "dataloader wait share", 100.0 * m->dataloader_wait_fraction);
    printf("  %-28s %.1f%%\n", "GPU busy", 100.0 * m->gpu_busy_fraction);
    printf("  %-28s %.1f (avg %.2f us)\n", "kernels per step", m->kernels_per_step, m->avg_kernel_time_us);
    printf("  %-28s %.1f (%.1f us)\n", "sync calls per step", m->sync_calls_per_step, m->sync_time_per_step_us);
    printf("  %-28s %.1f (%.1f us)\n", "device allocs per step", m->device_alloc_calls_per_step,
           m->device_alloc_time_per_step_us);
    printf("  %-28s %.0f\n", "H2D bytes per step", m->h2d_bytes_per_step);
    printf("  %-28s %.1f MiB\n", "peak device memory", m->peak_device_memory_bytes / (1024.0 * 1024.0));
    printf("  %-28s %.4f -> %.4f\n", "loss (first -> last)", m->loss_first, m->loss_last);
    if (m->dropped_records > 0) printf("  %-28s %.0f (CUPTI buffers overflowed)\n", "dropped records", m->dropped_records);
    printf("\nTop CUDA ops (host ranges, sorted by %s):\n", demo_sort_text(c->sort_by));
    pd_op_table_print(stdout, r->pl.ops, c->top_n);
    printf("\nTop kernels (sorted by %s):\n", demo_sort_text(c->sort_by));
    pd_op_table_print(stdout, r->pl.kernels, c->top_n < 10 && c->top_n > 0 ? c->top_n : 10);
    if (r->pl.by_stack != NULL) {
      printf("\nTop CUDA ops by call site (group_by_stack_n=%d, sorted by %s):\n", c->group_by_stack_n,
             demo_sort_text(c->sort_by));
      pd_op_table_print(stdout, r->pl.by_stack, c->top_n);
    }
  }
  printf("\n");
  demo_print_cost(&r->cost, m->avg_step_time_s);
  demo_print_host_memory(&r->mem, r->pl.cycles);
  pd_verdict_print(stdout, v);
  pd_cycle_log_print(stdout, &r->pl.cycle_log);
  /* a long run's many cycles: the first and the last traces */
  for (int i = 0; i < r->ntraces; i++) {
    if (r->ntraces > 8 && i == 3) {
      printf("Trace:   ... %d more\n", r->ntraces - 6);
      i = r->ntraces - 3;
      continue;
    }
    printf("Trace:   %s\n", r->traces[i]);
  }
}

/* ---- the metrics JSON ------------------------------------------------------------------ */

int pd_demo_metrics_write(const pd_demo_config_t *cfg, const pd_demo_results_t *res) {
  if (cfg == NULL || res == NULL || res->cnn_cfg == NULL || res->data_cfg == NULL) return PD_EINVAL;
  const pd_demo_config_t *c = cfg;
  const pd_cnn_config_t *m = res->cnn_cfg;
  pd_cfg_entry_t entries[] = {
      {.key = "scenario", .type = PD_CFG_STRING, .s = pd_scenario_name((pd_scenario_t)c->scenario)},
      {.key = "batch_size", .type = PD_CFG_INT, .i = c->batch_size},
      {.key = "num_workers", .type = PD_CFG_INT, .i = res->data_cfg->num_workers},
      {.key = "prefetch_factor", .type = PD_CFG_INT, .i = c->prefetch_factor},
      {.key = "persistent_workers", .type = PD_CFG_BOOL, .b = c->persistent_workers},
      {.key = "pin_memory", .type = PD_CFG_BOOL, .b = c->pin_memory},
      {.key = "amp", .type = PD_CFG_BOOL, .b = c->amp},
      {.key = "warmup_steps", .type = PD_CFG_INT, .i = c->warmup_steps},
      {.key = "profile_steps", .type = PD_CFG_INT, .i = c->profile_steps},
      {.key = "seed", .type = PD_CFG_INT, .i = c->seed},
      {.key = "pin_cpu", .type = PD_CFG_BOOL, .b = c->pin_cpu},
      {.key = "device", .type = PD_CFG_INT, .i = c->device},
      {.key = "with_stack", .type = PD_CFG_BOOL, .b = c->with_stack},
      {.key = "cpu_work", .type = PD_CFG_INT, .i = res->data_cfg->cpu_work},
      {.key = "io_sleep_ms", .type = PD_CFG_INT, .i = res->data_cfg->io_sleep_ms},
      {.key = "no_sync", .type = PD_CFG_BOOL, .b = c->no_sync},
      {.key = "sync_mode", .type = PD_CFG_STRING, .s = m->sync_mode == PD_SYNC_FORCED ? "forced" : "none"},
      {.key = "tiny_ops_mode", .type = PD_CFG_STRING, .s = demo_tiny_text(m->tiny_mode)},
      {.key = "tiny_ops_depth", .type = PD_CFG_INT, .i = m->tiny_ops_depth},
      {.key = "allocator", .type = PD_CFG_STRING, .s = demo_alloc_text(m->alloc_mode)},
      {.key = "churn_buffers", .type = PD_CFG_INT, .i = m->churn_buffers},
      {.key = "inject_slowdown", .type = PD_CFG_DOUBLE, .d = c->inject_slowdown},
      {.key = "inject_gpu_slowdown", .type = PD_CFG_DOUBLE, .d = c->inject_gpu_slowdown},
      /* Last, and only when not the default: a run's config keeps the keys of the
       * baselines made before these flags existed, so the gate notes no difference. */
      {.key = "wait_steps", .type = PD_CFG_INT, .i = c->wait_steps},
      {.key = "repeat", .type = PD_CFG_INT, .i = c->repeat},
      {.key = "steps", .type = PD_CFG_INT, .i = c->steps},
      {.key = "no_profile", .type = PD_CFG_BOOL, .b = true},
      {.key = "warmup_probe", .type = PD_CFG_BOOL, .b = true},
  };
  const size_t nentries = sizeof(entries) / sizeof(entries[0]);
  enum { NOPT = 5 };
  const bool optional_set[NOPT] = {c->wait_steps != 1, c->repeat != 1, c->steps != 0, c->no_profile, c->warmup_probe};
  size_t nconfig = nentries - NOPT;
  for (size_t i = 0; i < NOPT; i++)
    if (optional_set[i]) entries[nconfig++] = entries[nentries - NOPT + i];
  pd_run_report_t report = {
      .config = entries,
      .nconfig = nconfig,
      .device = res->dev,
      .metrics = res->metrics,
      .step_times_s = res->step_s,
      .dataloader_wait_s = res->wait_s,
      .step_periods_s = res->period_s,
      .warmup_periods_s = res->warm_period_s,
      .warmup_step_times_s = res->warm_step_s,
      .warmup_probe_launch_ns = res->warm_probe_launch_ns,
      .warmup_probe_compute_ns = res->warm_probe_compute_ns,
      .nwarmup = res->nwarm,
      .nsteps = res->nsamples,
      .verdict = res->verdict,
      .cycles = res->cycles,
      .top_ops = res->ops,
      .top_ops_limit = 0, /* whole (the console prints --top_n): the gate explains from it */
      .top_kernels = res->kernels,
      .host = res->host,
      .trace_files = res->traces,
      .ntrace_files = res->ntraces,
      .stopped_by = res->stopped_by,
      .steps_done = res->steps_done,
      .cost = res->cost,
      .host_memory = res->host_memory,
      .loader = res->loader,
      .host_calibration = res->host_calibration,
  };
  return pd_metrics_json_write(c->output_json, &report);
}

/* ---- signals --------------------------------------------------------------------------- */

/* SIGINT or SIGTERM while the run works: the first stops the steps at the end of the
 * current one; the profiler is stopped (CUPTI flushed, the cycle's trace written) and a
 * metrics JSON marked incomplete is written, then the program exits 128 + the signal
 * (130, 143). A second signal leaves at once, removing the output temporaries. */
static volatile sig_atomic_t g_stop_signal;

static void demo_signal_cb(int sig) {
  if (g_stop_signal != 0) {
    pd_out_remove_temps();
    _exit(128 + sig);
  }
  g_stop_signal = sig;
}

static void demo_signals_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = demo_signal_cb;
  sa.sa_flags = SA_RESTART; /* CUDA's and the loader's system calls go on */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* True (once told) when a stop was asked for; prints one line the first time. */
static bool demo_stop_requested(demo_run_t *r, int64_t steps_done) {
  if (g_stop_signal == 0) return false;
  static bool told;
  if (!told) {
    demo_progress_clear(r);
    demo_err("%s after %" PRId64 " steps: stopping; writing what was recorded (send it again to quit at once)",
             g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", steps_done);
    told = true;
  }
  return true;
}

/* ---- the run --------------------------------------------------------------------------- */

static int demo_device_check(const pd_demo_config_t *cfg) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    demo_err("no CUDA device available (%s); this demo profiles GPU work",
             e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
    return PD_DEMO_EXIT_NODEV;
  }
  if (cfg->device >= count) {
    demo_err("--device must be an integer from 0 to %d on this machine, got '%d'", count - 1, cfg->device);
    pd_demo_print_usage(stderr);
    return PD_DEMO_EXIT_USAGE;
  }
  return 0;
}

/* Phases of the run, in order. Each returns PD_DEMO_EXIT_OK to go on or the exit code
 * of its failure, which it has reported; demo_run_free() is the one cleanup of them all. */

/* 1. The profiler's environment knobs, output directories and paths, proven good before
 * the GPU is even looked for: a bad value or path is the user's to fix whatever machine
 * this is (exit 2, one line). */
static int demo_phase_outputs(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  char err[PD_DEMO_PATH_MAX + 256];
  if ((!cfg->no_profile && pd_prof_env_check(err, sizeof(err)) != 0) ||
      pd_demo_outputs_prepare(cfg, &r->outs, err, sizeof(err)) != 0) {
    demo_err("%s", err);
    return PD_DEMO_EXIT_USAGE;
  }
  r->outs_ready = true;
  return PD_DEMO_EXIT_OK;
}

/* 3. Scenario -> model and pipeline configs (validated options cannot fail here, but
 * check anyway); the cycle pipeline's tables and the per-step samples. */
static int demo_phase_configure(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  pd_scen_options_t so;
  pd_scen_options_init(&so);
  so.batch_size = cfg->batch_size;
  so.amp = cfg->amp;
  so.seed = (uint64_t)cfg->seed;
  so.num_workers = cfg->num_workers;
  so.prefetch_factor = cfg->prefetch_factor;
  so.persistent_workers = cfg->persistent_workers;
  so.pin_memory = cfg->pin_memory;
  so.tiny_mode = cfg->tiny_ops_mode;
  so.tiny_ops_depth = cfg->tiny_ops_depth;
  so.alloc_mode = cfg->allocator;
  so.churn_buffers = cfg->churn_buffers;
  so.no_sync = cfg->no_sync;
  int rc = pd_scenario_configure((pd_scenario_t)cfg->scenario, &so, &r->cnn_cfg, &r->data_cfg);
  if (rc != 0) {
    demo_err("scenario configuration rejected: %s", pd_strerror(rc));
    return PD_DEMO_EXIT_RUNTIME;
  }
  if (r->data_cfg.num_workers == 0) r->config_note = "--num_workers 0 loads batches on the main thread; "
                                              "--prefetch_factor and --persistent_workers have no effect";
  r->progress = !cfg->quiet && isatty(STDOUT_FILENO);
  r->unix_offset_ns = pd_clock_unix_offset_ns();
  /* Without the profiler nothing fills the GPU-side metrics: NaN says "not measured". */
  const pd_pipeline_opts_t po = {.kernels = true,
                                 .group_by_stack_n = cfg->group_by_stack_n,
                                 .stacks = cfg->export_stacks[0] != '\0',
                                 .steps_required = true};
  const bool tables_ok = pd_pipeline_init(&r->pl, &po) == 0;
  r->step_s = calloc((size_t)r->active_steps, sizeof(double));
  r->wait_s = calloc((size_t)r->active_steps, sizeof(double));
  r->period_s = calloc((size_t)r->active_steps, sizeof(double));
  /* one slot per warmup step (at least one: calloc(0) may return NULL) */
  const size_t nwarm = cfg->warmup_steps > 0 ? (size_t)cfg->warmup_steps : 1;
  r->warm_period_s = calloc(nwarm, sizeof(double));
  r->warm_step_s = calloc(nwarm, sizeof(double));
  if (cfg->warmup_probe) {
    r->warm_probe_launch_ns = calloc(nwarm, sizeof(double));
    r->warm_probe_compute_ns = calloc(nwarm, sizeof(double));
  }
  if (!tables_ok || r->step_s == NULL || r->wait_s == NULL || r->period_s == NULL || r->warm_period_s == NULL ||
      r->warm_step_s == NULL || (cfg->warmup_probe && (r->warm_probe_launch_ns == NULL || r->warm_probe_compute_ns == NULL))) {
    demo_err("out of host memory");
    return PD_DEMO_EXIT_RUNTIME;
  }
  return PD_DEMO_EXIT_OK;
}

/* The exit code and message of a failed pd_data_create() or pd_cnn_create(). */
static int demo_create_failed(const demo_run_t *r, int rc, const char *what, const char *detail) {
  if (rc == PD_EDEVOOM) {
    demo_err("out of GPU memory at batch %d; try a smaller --batch_size", r->cfg->batch_size);
    return PD_DEMO_EXIT_OOM;
  }
  if (detail != NULL) demo_err("%s: %s (%s)", what, pd_strerror(rc), detail);
  else demo_err("%s: %s", what, pd_strerror(rc));
  return PD_DEMO_EXIT_RUNTIME;
}

/* 4. Device, stream, data pipeline, model. */
static int demo_phase_setup(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  int exit_code = PD_DEMO_EXIT_OK;
  DEMO_CUDA(cudaSetDevice(cfg->device));
  pd_device_info_t *dev = &r->dev;
  memset(dev, 0, sizeof(*dev));
  struct cudaDeviceProp prop;
  DEMO_CUDA(cudaGetDeviceProperties(&prop, cfg->device));
  snprintf(dev->name, sizeof(dev->name), "%s", prop.name);
  dev->compute_major = prop.major;
  dev->compute_minor = prop.minor;
  dev->sm_count = prop.multiProcessorCount;
  dev->total_global_mem = (uint64_t)prop.totalGlobalMem;
  DEMO_CUDA(cudaDriverGetVersion(&dev->driver_version));
  DEMO_CUDA(cudaRuntimeGetVersion(&dev->runtime_version));
  /* 0 when libcupti cannot tell, and with --no_profile, which makes no CUPTI call. */
  dev->cupti_version = cfg->no_profile ? 0 : pd_prof_cupti_version();
  DEMO_CUDA(cudaStreamCreate(&r->stream));
  if (r->config_note != NULL && !cfg->quiet) printf("%s: note: %s\n", PD_DEMO_PROG, r->config_note);

  /* Before the loader threads start: the pin (the loader threads release it) and the
   * launching thread's speed, alone. */
  r->calib.iters = PD_HOST_CALIB_ITERS;
  r->calib.reps = PD_HOST_CALIB_REPS;
  r->calib.pin.cpu = -1;
  if (cfg->pin_cpu) (void)pd_host_pin_fastest(&r->calib.pin);
  (void)pd_host_calib_measure(&r->calib.start);
  int rc = pd_data_create(&r->data_cfg, r->stream, &r->data);
  if (rc != 0) return demo_create_failed(r, rc, "data pipeline", pd_data_last_error());
  rc = pd_cnn_create(&r->cnn_cfg, r->stream, &r->cnn);
  if (rc != 0) return demo_create_failed(r, rc, "model", NULL);
done:
  return exit_code;
}

/* Enqueues the next batch's copy ahead when the loader has it ready (pd_data_prefetch):
 * between steps, after the step's work, like a CUDA data prefetcher in a torch loop. It
 * never waits, so it is not data wait: the wait of a step whose batch was ready is the
 * slot's handover only, and that of a batch not ready is measured as before. */
static int demo_prefetch(const demo_run_t *r, const char *phase, int index) {
  const int rc = pd_data_prefetch(r->data);
  if (rc == 0) return PD_DEMO_EXIT_OK;
  const demo_step_result_t res = {.rc = rc, .what = "the data pipeline"};
  return demo_step_failed(r, &res, rc == PD_EDEVOOM ? PD_DEMO_EXIT_OOM : PD_DEMO_EXIT_RUNTIME, phase, index);
}

/* Reads the loss of the step just run into *loss; reports a failure. */
static int demo_read_loss(const demo_run_t *r, const char *which, double *loss) {
  float value = 0;
  int rc = pd_cnn_last_loss(r->cnn, &value);
  if (rc != 0) {
    demo_err("reading the %s loss: %s", which, pd_strerror(rc));
    return PD_DEMO_EXIT_RUNTIME;
  }
  *loss = value;
  return PD_DEMO_EXIT_OK;
}

/* 5. Warmup, unprofiled; its mean step time is the base of --inject_slowdown.
 *
 * --inject_slowdown also lengthens the warmup steps after the second: the gate's A/B
 * judges host time on these untraced steps (warmup_step_times_s), where CUPTI's per-call
 * state, which puts whole processes 15-40% apart, is not in the step (docs/gate.md), so
 * its self-test must slow them as a slower build would. The busy time follows the warmup's
 * own steps (inject.c): the second step sets the base; every later one is injected, or
 * every other one under --inject_alternate, whose plain steps feed the surplus loop. */
static int demo_phase_warmup(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  demo_step_result_t res;
  pd_scen_inject_init(&r->warm_inject, 0.0, 0);
  r->prev_end_ns = pd_clock_now_ns();
  for (int i = 0; i < cfg->warmup_steps; i++) {
    demo_progress(r, "warmup", i + 1, cfg->warmup_steps);
    const int64_t iter_start_ns = r->prev_end_ns;
    const bool inject_now = i >= 2 && (!cfg->inject_alternate || i % 2 == 0); /* odd samples */
    const int64_t spin_ns = inject_now ? pd_scen_inject_next_ns(&r->warm_inject) : 0;
    int code = demo_step(r, spin_ns, &res);
    if (code != 0) return demo_step_failed(r, &res, code, "warmup", i);
    r->steps_done++;
    if (i == 0) {
      code = demo_read_loss(r, "first", &r->pl.metrics.loss_first);
      if (code != 0) return code;
      r->prev_end_ns = pd_clock_now_ns(); /* the loss read is not data wait */
    }
    const int64_t step_ns = (int64_t)(res.step_s * 1e9);
    if (i == 1) pd_scen_inject_init(&r->warm_inject, cfg->inject_slowdown, step_ns);
    else if (i > 1) pd_scen_inject_record(&r->warm_inject, step_ns, spin_ns);
    /* The first step pays one-time costs (cuBLAS handles, lazy module loading), so it
     * is left out of the base when later steps exist; the base is the plain step. */
    if (i > 0 || cfg->warmup_steps == 1) {
      r->warm_sum += res.step_s - (double)spin_ns * 1e-9;
      r->warm_n++;
    }
    code = demo_prefetch(r, "warmup", i);
    if (code != 0) return code;
    r->prev_end_ns = pd_clock_now_ns();
    /* the first step pays one-time costs, and its loss read is no part of an iteration */
    if (i > 0) {
      r->warm_step_s[r->nwarm_period] = res.step_s;
      r->warm_period_s[r->nwarm_period] = (double)(r->prev_end_ns - iter_start_ns) * 1e-9;
      if (cfg->warmup_probe) {
        /* outside the step and its period (as the loss read): the next period starts after it */
        const int prc = pd_speed_probe(r->stream, PD_SPEED_PROBE_LAUNCHES, PD_SPEED_PROBE_ITERS,
                                       &r->warm_probe_launch_ns[r->nwarm_period],
                                       &r->warm_probe_compute_ns[r->nwarm_period]);
        if (prc != 0) {
          demo_err("--warmup_probe after warmup step %d: %s", i, pd_strerror(prc));
          return PD_DEMO_EXIT_RUNTIME;
        }
        r->prev_end_ns = pd_clock_now_ns();
      }
      r->nwarm_period++;
    }
    if (demo_stop_requested(r, r->steps_done)) break;
  }
  if (cfg->inject_slowdown > 0 && !cfg->quiet)
    printf("%s: inject_slowdown %.3f in the warmup: last busy time %.1f us, an injected step's surplus over it "
           "%.1f us (test only)\n",
           PD_DEMO_PROG, cfg->inject_slowdown, (double)pd_scen_inject_next_ns(&r->warm_inject) / 1e3,
           (double)pd_scen_inject_extra_ns(&r->warm_inject) / 1e3);
  return PD_DEMO_EXIT_OK;
}

/* 6. The injected slowdowns (test only): host time per step from the warmup's mean, and
 * device time per step from a measurement of the step's GPU time. */
static int demo_phase_slowdown(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  pd_scen_inject_init(&r->inject, cfg->inject_slowdown, r->warm_n > 0 ? (int64_t)(r->warm_sum / r->warm_n * 1e9) : 0);
  if (cfg->inject_gpu_slowdown <= 0 || r->warm_n == 0) return PD_DEMO_EXIT_OK;
  int64_t step_gpu_ns = 0;
  bool blocked = false;
  int exit_code = demo_measure_step_gpu(r, r->warm_sum / r->warm_n, &step_gpu_ns, &blocked);
  if (exit_code != 0) return exit_code;
  r->gpu_spin_ns = (int64_t)(cfg->inject_gpu_slowdown * (double)step_gpu_ns);
  int rc = pd_cnn_set_gpu_slowdown(r->cnn, r->gpu_spin_ns);
  if (rc != 0) {
    demo_err("--inject_gpu_slowdown: %s", pd_strerror(rc));
    return PD_DEMO_EXIT_RUNTIME;
  }
  if (!cfg->quiet)
    printf("%s: inject_gpu_slowdown %.3f x %.1f us of GPU time per step = %.1f us added to "
           "k_adamw%s (test only)\n",
           PD_DEMO_PROG, cfg->inject_gpu_slowdown, (double)step_gpu_ns / 1e3, (double)r->gpu_spin_ns / 1e3,
           blocked ? "; the step synchronizes inside, so the measured GPU time includes idle time" : "");
  r->prev_end_ns = pd_clock_now_ns(); /* the measurement is not data wait */
  return PD_DEMO_EXIT_OK;
}

/* 7. The profiler: schedule(wait=W, warmup=1, active=profile_steps, repeat=R). With
 * --no_profile none is made. */
static int demo_phase_profiler(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  if (cfg->no_profile) return PD_DEMO_EXIT_OK;
  pd_prof_config_t pc;
  pd_prof_config_init(&pc);
  pc.activities = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA;
  if (cfg->profile_level == PD_DEMO_LEVEL_FULL) pc.activities |= PD_ACTIVITY_CUDA_DRIVER;
  pc.record_shapes = true;
  pc.profile_memory = true;
  pc.with_stack = cfg->with_stack;
  pc.schedule = r->sched;
  pc.on_trace_ready = demo_trace_ready_cb;
  pc.user = r;
  pc.trace_dir = cfg->trace_dir;
  pc.device = cfg->device;
  pc.cupti_buffer_budget_bytes = (size_t)cfg->cupti_buffer_budget_mib << 20;
  int rc = pd_prof_create(&pc, &r->prof);
  if (rc != 0) {
    demo_err("profiler: %s (%s)", pd_strerror(rc), pd_prof_last_error(NULL));
    return PD_DEMO_EXIT_RUNTIME;
  }
  rc = pd_prof_start(r->prof);
  if (rc != 0) {
    demo_err("profiler start: %s (%s)", pd_strerror(rc), pd_prof_last_error(r->prof));
    return PD_DEMO_EXIT_RUNTIME;
  }
  return PD_DEMO_EXIT_OK;
}

/* 8. The schedule's steps: (wait + 1 + active) x repeat, or --steps. */
static int demo_phase_steps(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  const int total = (int)r->total_steps;
  const char *phase = cfg->no_profile ? "timed" : "profiled";
  demo_step_result_t res;
  (void)pd_host_rss_kib(&r->mem.rss_start_kib, NULL);
  r->mem.heap_start_kib = pd_host_heap_in_use_kib();
  r->prev_end_ns = pd_clock_now_ns();
  for (int s = 0; s < total; s++) {
    demo_progress(r, phase, s + 1, total);
    const int64_t iter_start_ns = r->prev_end_ns;
    const int timed = r->nsamples;
    /* --inject_alternate: only every other recorded step (the odd samples) is injected */
    const pd_sched_action_t act_now = pd_schedule_action(&r->sched, s);
    const bool odd_sample = (act_now == PD_SCHED_RECORD || act_now == PD_SCHED_RECORD_AND_SAVE) &&
                            r->nsamples < r->active_steps && r->nsamples % 2 == 1;
    const int64_t spin_ns = !cfg->inject_alternate || odd_sample ? pd_scen_inject_next_ns(&r->inject) : 0;
    int code = demo_step(r, spin_ns, &res);
    if (code != 0) return demo_step_failed(r, &res, code, phase, s);
    pd_scen_inject_record(&r->inject, (int64_t)(res.step_s * 1e9), spin_ns);
    r->steps_done++;
    if (cfg->warmup_steps == 0 && s == 0) {
      /* No warmup: the first loss comes from the schedule's wait step (not traced). */
      code = demo_read_loss(r, "first", &r->pl.metrics.loss_first);
      if (code != 0) return code;
    }
    pd_sched_action_t act = pd_schedule_action(&r->sched, s);
    if ((act == PD_SCHED_RECORD || act == PD_SCHED_RECORD_AND_SAVE) && r->nsamples < r->active_steps) {
      r->step_s[r->nsamples] = res.step_s;
      r->wait_s[r->nsamples] = res.wait_s;
      r->nsamples++;
    }
    const int cycles_before = r->pl.cycles;
    int rc = r->prof != NULL ? pd_prof_step(r->prof) : 0;
    if (r->pl.cycles != cycles_before) demo_release_heap();
    if (rc != 0) {
      demo_progress_clear(r);
      demo_profiler_failed(r, "profiler step", s, rc);
      return PD_DEMO_EXIT_RUNTIME;
    }
    /* After the profiler's step, so the copy's calls fall in the step of the batch. */
    code = demo_prefetch(r, phase, s);
    if (code != 0) return code;
    /* Profiler bookkeeping (and the trace write on the last step) is not data wait. */
    r->prev_end_ns = pd_clock_now_ns();
    if (r->nsamples > timed) r->period_s[timed] = (double)(r->prev_end_ns - iter_start_ns) * 1e-9;
    if (demo_stop_requested(r, r->steps_done)) break;
  }
  if (cfg->inject_slowdown > 0 && !cfg->quiet)
    printf("%s: inject_slowdown %.3f: last busy time %.1f us, an injected step's surplus over it %.1f us "
           "(test only)\n",
           PD_DEMO_PROG, cfg->inject_slowdown, (double)pd_scen_inject_next_ns(&r->inject) / 1e3,
           (double)pd_scen_inject_extra_ns(&r->inject) / 1e3);
  return PD_DEMO_EXIT_OK;
}

/* 9. Stop: host memory over the steps; stopping inside the active steps flushes the
 * records (forced) and writes the partial cycle; then every cycle must be there. */
static int demo_phase_stop(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  demo_progress_clear(r);
  (void)pd_host_calib_measure(&r->calib.end); /* the loader is idle (its queue full) */
  {
    pd_data_stats_t ds;
    pd_data_get_stats(r->data, &ds);
    r->loader = (pd_loader_rate_t){.workers = ds.workers, .batches = ds.batches, .fill_ns = ds.fill_ns};
  }
  r->mem.steps = r->steps_done - cfg->warmup_steps > 0 ? r->steps_done - cfg->warmup_steps : 0;
  (void)pd_host_rss_kib(&r->mem.rss_end_kib, &r->mem.rss_peak_kib);
  r->mem.heap_end_kib = pd_host_heap_in_use_kib();
  int rc = r->prof != NULL ? pd_prof_stop(r->prof) : 0;
  if (rc != 0) {
    demo_profiler_failed(r, "profiler stop", -1, rc);
    return PD_DEMO_EXIT_RUNTIME;
  }
  if (g_stop_signal != 0) return PD_DEMO_EXIT_OK; /* a partial run: said so in the JSON */
  if (cfg->no_profile && r->nsamples != r->active_steps) {
    demo_err("%d of %d active steps were timed; expected all of them", r->nsamples, r->active_steps);
    return PD_DEMO_EXIT_RUNTIME;
  }
  if (!cfg->no_profile && (r->pl.cycles == 0 || r->nsamples != r->active_steps)) {
    demo_err("the profiler handed over %d cycles and %d of %d active steps were timed; expected every cycle",
             r->pl.cycles, r->nsamples, r->active_steps);
    return PD_DEMO_EXIT_RUNTIME;
  }
  return PD_DEMO_EXIT_OK;
}

/* 10. The pipeline's verdict stage over the host-timed samples, then the console. */
static int demo_phase_verdict(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  pd_metrics_t *m = &r->pl.metrics;
  int code = demo_read_loss(r, "last", &m->loss_last);
  if (code != 0) return code;
  /* The tables add up every cycle; the GPU-side per-step metrics are the last cycle's. */
  if (cfg->no_profile || r->pl.cycles > 1) m->steps = r->nsamples;
  if (!cfg->no_profile) {
    (void)pd_prof_cost(r->prof, &r->cost, NULL);
    /* The warmup's periods are the same loop untraced; the last recorded one carries the
     * trace write. An injected slowdown (test only) starts after the warmup: no measure. */
    if (cfg->inject_slowdown <= 0 && cfg->inject_gpu_slowdown <= 0 && r->nsamples > 1)
      pd_prof_cost_measure(&r->cost, r->warm_period_s, (size_t)r->nwarm_period, r->period_s,
                           (size_t)r->nsamples - 1);
    const double dropped = (double)pd_prof_dropped_records(r->prof);
    if (dropped > m->dropped_records) m->dropped_records = dropped;
    if (m->dropped_records > 0)
      demo_err("warning: CUPTI dropped %.0f activity records (buffers full%s); the trace and the GPU metrics miss "
               "them",
               m->dropped_records, cfg->cupti_buffer_budget_mib > 0 ? " or over --cupti_buffer_budget_mib" : "");
  }
  /* No verdict without the profiler: the rules need its GPU-side metrics. */
  pd_pipeline_verdict(&r->pl, r->step_s, r->wait_s, (size_t)r->nsamples, PD_ADVICE_DEMO,
                      cfg->no_profile ? NULL : &r->verdict);
  if (!cfg->no_profile)
    pd_pipeline_sort(&r->pl, (pd_sort_key_t)cfg->sort_by, (pd_sort_key_t)cfg->stacks_metric);
  demo_print_report(r, &r->dev, &r->verdict);
  return PD_DEMO_EXIT_OK;
}

/* 11. Collapsed stacks (--export_stacks), written atomically. */
static int demo_phase_stacks(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  const pd_op_table_t *stacks = r->pl.stacks;
  if (stacks == NULL) return PD_DEMO_EXIT_OK;
  if (pd_op_table_stack_rows(stacks) == 0) {
    demo_err("--export_stacks: no recorded range carries a call stack (the stacks could not be symbolized)");
    return PD_DEMO_EXIT_RUNTIME;
  }
  int64_t lines = pd_op_table_export_stacks_file(stacks, cfg->export_stacks, (pd_sort_key_t)cfg->stacks_metric);
  if (lines < 0) {
    demo_err("writing --export_stacks '%s': %s", cfg->export_stacks, pd_strerror((int)lines));
    return PD_DEMO_EXIT_RUNTIME;
  }
  pd_demo_outputs_track_file(&r->outs, cfg->export_stacks);
  printf("Stacks:  %s (%" PRId64 " stacks by %s)\n", cfg->export_stacks, lines,
         cfg->stacks_metric == PD_SORT_SELF_CPU_TIME_TOTAL ? "self_cpu_time_total" : "self_cuda_time_total");
  return PD_DEMO_EXIT_OK;
}

/* 12. The metrics JSON, written last and atomically. A run stopped by a signal exits
 * 128 + the signal after writing it. */
static int demo_phase_json(demo_run_t *r) {
  const pd_demo_config_t *cfg = r->cfg;
  pd_host_info_t host;
  pd_host_info_read(&host);
  const pd_demo_results_t results = {
      .cnn_cfg = &r->cnn_cfg,
      .data_cfg = &r->data_cfg,
      .dev = &r->dev,
      .metrics = &r->pl.metrics,
      .step_s = r->step_s,
      .wait_s = r->wait_s,
      .period_s = r->period_s,
      .warm_period_s = r->warm_period_s,
      .warm_step_s = r->warm_step_s,
      .warm_probe_launch_ns = r->warm_probe_launch_ns,
      .warm_probe_compute_ns = r->warm_probe_compute_ns,
      .nwarm = (size_t)r->nwarm_period,
      .nsamples = (size_t)r->nsamples,
      .verdict = cfg->no_profile ? NULL : &r->verdict,
      .cycles = cfg->no_profile ? NULL : &r->pl.cycle_log,
      .ops = cfg->no_profile ? NULL : r->pl.ops,
      .kernels = cfg->no_profile ? NULL : r->pl.kernels,
      .host = &host,
      .traces = (const char *const *)r->traces,
      .ntraces = (size_t)r->ntraces,
      .stopped_by = g_stop_signal == 0 ? NULL : g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
      .steps_done = r->steps_done,
      .cost = cfg->no_profile ? NULL : &r->cost,
      .host_memory = &r->mem,
      .loader = &r->loader,
      .host_calibration = &r->calib,
  };
  int rc = pd_demo_metrics_write(cfg, &results);
  if (rc != 0) {
    demo_err("writing --output_json '%s': %s", cfg->output_json, pd_strerror(rc));
    return PD_DEMO_EXIT_RUNTIME;
  }
  r->json_written = true;
  printf("Metrics: %s%s\n", cfg->output_json, results.stopped_by != NULL ? " (incomplete: stopped early)" : "");
  if (results.stopped_by != NULL) return 128 + (strcmp(results.stopped_by, "SIGINT") == 0 ? SIGINT : SIGTERM);
  return PD_DEMO_EXIT_OK;
}

/* The one cleanup: teardown in reverse order of creation; a failure takes back this
 * run's files (a run stopped by a signal keeps them). Returns the exit code, 1 when
 * only the stream's teardown failed. */
static int demo_run_free(demo_run_t *r, int exit_code) {
  demo_progress_clear(r);
  pd_prof_destroy(r->prof);
  if (r->cnn != NULL) pd_cnn_destroy(r->cnn);
  pd_data_destroy(r->data);
  if (r->stream != NULL) {
    cudaError_t e = cudaStreamDestroy(r->stream);
    if (e != cudaSuccess && exit_code == PD_DEMO_EXIT_OK) {
      demo_err("cudaStreamDestroy failed: %s", cudaGetErrorString(e));
      exit_code = PD_DEMO_EXIT_RUNTIME;
    }
  }
  if (exit_code != PD_DEMO_EXIT_OK && exit_code < 128 && r->outs_ready) {
    if (r->json_written) pd_demo_outputs_track_file(&r->outs, r->cfg->output_json);
    for (int i = 0; i < r->ntraces; i++) (void)unlink(r->traces[i]);
    pd_demo_outputs_rollback(&r->outs);
  }
  for (int i = 0; i < r->ntraces; i++) free(r->traces[i]);
  free(r->traces);
  pd_pipeline_free(&r->pl);
  free(r->step_s);
  free(r->period_s);
  free(r->warm_period_s);
  free(r->warm_step_s);
  free(r->warm_probe_launch_ns);
  free(r->warm_probe_compute_ns);
  free(r->wait_s);
  free(r);
  return exit_code;
}

int pd_demo_run(const pd_demo_config_t *cfg) {
  demo_run_t *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    demo_err("out of host memory");
    return PD_DEMO_EXIT_RUNTIME;
  }
  r->cfg = cfg;
  r->mem = (pd_host_memory_t){-1, -1, -1, -1, -1, -1, -1, 0};
  r->sched = (pd_schedule_t){
      .skip_first = 0, .wait = cfg->wait_steps, .warmup = 1, .active = cfg->profile_steps, .repeat = cfg->repeat};
  r->total_steps = cfg->steps > 0 ? cfg->steps : ((int64_t)cfg->wait_steps + 1 + cfg->profile_steps) * cfg->repeat;
  for (int64_t s = 0; s < r->total_steps; s++) {
    pd_sched_action_t act = pd_schedule_action(&r->sched, (int)s);
    r->active_steps += act == PD_SCHED_RECORD || act == PD_SCHED_RECORD_AND_SAVE;
  }

  int code = demo_phase_outputs(r);
  if (code == PD_DEMO_EXIT_OK) {
    /* From here on a signal stops the run cleanly (see demo_signals_install). */
    g_stop_signal = 0;
    demo_signals_install();
    code = demo_device_check(cfg); /* 2. on failure the directories made are taken back */
  }
  if (code == PD_DEMO_EXIT_OK) code = demo_phase_configure(r);
  if (code == PD_DEMO_EXIT_OK) code = demo_phase_setup(r);
  if (code == PD_DEMO_EXIT_OK) code = demo_phase_warmup(r);
  /* A stop asked for in the warmup comes before the profiler: nothing traced. */
  const bool stopped_in_warmup = g_stop_signal != 0;
  if (code == PD_DEMO_EXIT_OK && !stopped_in_warmup) code = demo_phase_slowdown(r);
  if (code == PD_DEMO_EXIT_OK && !stopped_in_warmup) code = demo_phase_profiler(r);
  if (code == PD_DEMO_EXIT_OK && !stopped_in_warmup) code = demo_phase_steps(r);
  if (code == PD_DEMO_EXIT_OK) code = demo_phase_stop(r);
  if (code == PD_DEMO_EXIT_OK) code = demo_phase_verdict(r);
  if (code == PD_DEMO_EXIT_OK) code = demo_phase_stacks(r);
  if (code == PD_DEMO_EXIT_OK) code = demo_phase_json(r);
  return demo_run_free(r, code);
}
