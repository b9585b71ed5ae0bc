/* inject_session.c: the profiler inside someone else's program (libpd_inject.so).
 *
 * The session decides when the profiler starts and where steps end, from what reaches it:
 * kernel launch calls (CUPTI's launch hook, inject_entry.c) and NVTX ranges (the NVTX
 * tool, inject_nvtx.c). It runs the same cycle as profiler_demo: each finished cycle is
 * written as a Chrome trace and analysed on the same code path as profile_analyze
 * (pd_analysis_run: per-step samples from the ProfilerStep#N ranges, metrics, verdict),
 * the key averages add up over cycles, and at exit the metrics JSON is written with the
 * verdict and profiler_cost.
 *
 * Where calls come from: launches and ranges on any thread of the program, the exit
 * handler on the exiting one. `lock` serializes the profiler (create, step, stop) and the
 * accumulators; the hot paths (a launch that is not a step, a range push) take no lock but
 * the kernel-name cache's. Work the session does itself (the profiler's calibration,
 * device queries) marks its thread busy, so the launches it makes are not seen.
 *
 * Never breaks the program: any failure says one warning line, stops profiling and lets
 * the program run on.
 */
#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "inject.h"
#include "capture_internal.h"
#include "pd/pd_analyze.h"
#include "pd/pd_common.h"
#include "pd/pd_prof.h"
#include "pd/pd_replay.h"
#include "pd/pd_stats.h"

#define LOG_PREFIX "pd_inject"
/* Kernel-name cache: distinct kernel names a program launches (a torch step: a few hundred). */
#define MATCH_SLOTS 4096
/* Step periods kept for the measured added time, per kind (untraced, recorded). */
#define PERIOD_SLOTS 4096
/* Untraced periods left out at the run's start: one-time warm-up (allocator, autotuning). */
#define PERIODS_SKIPPED 2
/* Untraced steps timed after the schedule's last cycle (the measured added time's
 * reference, pd_prof_cost_measure) before kernel-name steps let go of CUPTI. */
#define TAIL_STEPS 16
/* Open NVTX start/end ranges at once; more are not recorded (counted). */
#define SPAN_SLOTS 1024

typedef struct {
  const char *key; /* CUPTI's name pointer (stable for the function's lifetime) */
  bool match;
} match_slot_t;

typedef struct {
  uint64_t id; /* 0: free */
  uint32_t session;
  int64_t start_ns;
  char *name;
} span_t;

struct pd_inject_session {
  pd_inject_config_t cfg;
  pd_inject_env_t env;
  pd_inject_steps_t steps;
  regex_t re;
  bool have_re;
  FILE *log;
  pthread_mutex_t lock;
  atomic_bool started;  /* the profiler runs (or ran) */
  atomic_bool stopped;  /* failed or finished: nothing more is recorded */
  atomic_bool let_go;   /* finished after the schedule's tail: the launch hook may let go of CUPTI */
  pd_prof_t *prof;
  int64_t steps_taken;
  /* step periods (under lock): the time from one step's end to the next's, by whether the
   * step was untraced or recorded, for pd_prof_cost_measure */
  int64_t last_boundary_ns; /* 0: none yet */
  int64_t untraced_seen;    /* untraced periods met, kept or not */
  bool after_cycle;         /* the period now running carries a cycle's write */
  double untraced_s[PERIOD_SLOTS], traced_s[PERIOD_SLOTS];
  size_t nuntraced, ntraced;
  /* --probe, after each kept untraced period, one to one with untraced_s (under lock) */
  double probe_launch_ns[PERIOD_SLOTS], probe_compute_ns[PERIOD_SLOTS];
  size_t nprobe;
  bool probe_off; /* a probe failed: no series is written */
  /* accumulators, under lock */
  pd_op_table_t *ops, *kernels;
  double *step_s, *wait_s;
  size_t nsamples, cap_samples;
  pd_metrics_t metrics; /* the last cycle's */
  pd_cycle_log_t cycle_log; /* each cycle's replay: the verdict's savings are over all */
  bool have_metrics;
  char **traces;
  size_t ntraces, cap_traces;
  int64_t unix_offset_ns;
  pd_device_info_t dev;
  char error[PD_INJECT_PATH_MAX + 128];
  /* kernel-name matches */
  pthread_mutex_t match_lock;
  match_slot_t match[MATCH_SLOTS];
  size_t nmatch;
  /* NVTX start/end ranges */
  pthread_mutex_t span_lock;
  span_t spans[SPAN_SLOTS];
  atomic_uint_fast64_t op_ranges; /* emit_nvtx op ranges seen (recorded under the op's name) */
  uint64_t next_span_id;
  uint64_t spans_lost;
};

static _Thread_local int t_launch_depth; /* launch calls open on this thread (runtime, driver inside) */
static _Thread_local bool t_pending_match; /* the outermost open launch ends a step */
static _Thread_local bool t_busy;          /* the session's own work on this thread */

bool pd_inject_thread_busy(void) { return t_busy; }

static void say(pd_inject_session_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(pd_inject_session_t *s, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(s->log, "%s: %s\n", LOG_PREFIX, line);
  fflush(s->log);
}

/* Makes dir and its missing parents (mode 0777 before the umask). Returns 0 or -errno. */
static int dir_make(const char *dir) {
  char p[PD_INJECT_PATH_MAX];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return -ENAMETOOLONG;
  for (char *c = p + 1;; c++) {
    bool end = *c == '\0';
    if (*c == '/' || end) {
      *c = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST) return -errno;
      if (end) return 0;
      *c = '/';
    }
  }
}

/* Makes the directory that will hold path. */
static int parent_make(const char *path) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL || slash == path) return 0;
  char d[PD_INJECT_PATH_MAX];
  snprintf(d, sizeof d, "%.*s", (int)(slash - path), path);
  return dir_make(d);
}

/* ---- create / destroy -------------------------------------------------------------------- */

int pd_inject_session_create(const pd_inject_config_t *cfg, const pd_inject_env_t *env, pd_inject_session_t **out) {
  if (cfg == NULL || out == NULL) return PD_EINVAL;
  *out = NULL;
  pd_inject_session_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return PD_ENOMEM;
  s->cfg = *cfg;
  if (env != NULL) s->env = *env;
  s->log = s->env.log != NULL ? s->env.log : stderr;
  s->steps = pd_inject_config_steps(cfg);
  if (s->steps == PD_INJECT_STEPS_KERNEL) {
    if (regcomp(&s->re, cfg->step_kernel, REG_EXTENDED | REG_NOSUB) != 0) {
      free(s);
      return PD_EINVAL;
    }
    s->have_re = true;
  }
  if (s->steps == PD_INJECT_STEPS_WHOLE_RUN)
    s->cfg.schedule = (pd_schedule_t){.skip_first = 0, .wait = 0, .warmup = 0, .active = 1, .repeat = 1};
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->match_lock, NULL);
  pthread_mutex_init(&s->span_lock, NULL);
  pd_metrics_init(&s->metrics);
  s->ops = pd_op_table_create(PD_GROUP_BY_RANGE);
  s->kernels = pd_op_table_create(PD_GROUP_BY_KERNEL);
  if (s->ops == NULL || s->kernels == NULL) {
    pd_inject_session_destroy(s);
    return PD_ENOMEM;
  }
  *out = s;
  return 0;
}

void pd_inject_session_destroy(pd_inject_session_t *s) {
  if (s == NULL) return;
  t_busy = true;
  pd_prof_destroy(s->prof);
  t_busy = false;
  if (s->have_re) regfree(&s->re);
  pd_op_table_destroy(s->ops);
  pd_op_table_destroy(s->kernels);
  free(s->step_s);
  pd_cycle_log_free(&s->cycle_log);
  free(s->wait_s);
  for (size_t i = 0; i < s->ntraces; i++) free(s->traces[i]);
  free(s->traces);
  for (size_t i = 0; i < SPAN_SLOTS; i++) free(s->spans[i].name);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->match_lock);
  pthread_mutex_destroy(&s->span_lock);
  free(s);
}

bool pd_inject_session_started(const pd_inject_session_t *s) { return s != NULL && atomic_load(&s->started); }

int64_t pd_inject_session_steps(const pd_inject_session_t *s) { return s != NULL ? s->steps_taken : 0; }

/* ---- the cycle ---------------------------------------------------------------------------- */

/* Keeps the analysis of one cycle: its per-step samples, its metrics, its ops. */
static int cycle_absorb(pd_inject_session_t *s, const pd_trace_t *cycle) {
  pd_top_opts_t opts;
  memset(&opts, 0, sizeof opts);
  pd_analysis_t *a = NULL;
  int rc = pd_analysis_run(cycle, NULL, &opts, &a);
  if (rc != 0) return rc;
  if (a->have_metrics) {
    size_t n = a->breakdown.nsteps;
    double *ws = s->wait_s;
    size_t wcap = s->cap_samples;
    rc = pd_array_grow((void **)&s->step_s, &s->cap_samples, s->nsamples + n, sizeof(double));
    if (rc == 0) rc = pd_array_grow((void **)&ws, &wcap, s->nsamples + n, sizeof(double));
    if (rc == 0) {
      s->wait_s = ws;
      memcpy(s->step_s + s->nsamples, a->step_times_s, n * sizeof(double));
      memcpy(s->wait_s + s->nsamples, a->data_wait_s, n * sizeof(double));
      s->nsamples += n;
      s->metrics = a->metrics;
      s->have_metrics = true;
      rc = pd_cycle_log_add(&s->cycle_log, &a->metrics, (int64_t)n);
    }
  }
  pd_analysis_destroy(a);
  if (rc != 0) return rc;
  pd_trace_index_t ix;
  rc = pd_trace_index_build(cycle, &ix);
  if (rc != 0) return rc;
  rc = pd_op_table_add_index(s->ops, cycle, &ix);
  if (rc == 0) rc = pd_op_table_add_trace(s->kernels, cycle);
  pd_trace_index_free(&ix);
  return rc;
}

/* on_trace_ready: writes the cycle's trace and absorbs its analysis. Runs under s->lock,
 * on the thread whose launch or range ended the cycle (or the exiting one). */
static int cycle_ready_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  pd_inject_session_t *s = user;
  char path[PD_INJECT_PATH_MAX + 8];
  int rc = pd_prof_trace_file_path(prof, path, sizeof(path) - 4);
  if (rc != 0) {
    snprintf(s->error, sizeof s->error, "trace file name under '%s': %s", s->cfg.trace_dir, pd_strerror(rc));
    return rc;
  }
  if (s->cfg.trace_gzip) strcat(path, ".gz");
  if (pd_array_grow((void **)&s->traces, &s->cap_traces, s->ntraces + 1, sizeof(char *)) != 0) {
    snprintf(s->error, sizeof s->error, "out of host memory for the trace list");
    return PD_ENOMEM;
  }
  pd_trace_meta_t meta = {.unix_offset_ns = s->unix_offset_ns,
                          .pid = (uint32_t)getpid(),
                          .profile_memory = true,
                          .record_shapes = false,
                          .cuda_driver_version = s->dev.driver_version,
                          .cuda_runtime_version = s->dev.runtime_version,
                          .cupti_version = s->dev.cupti_version,
                          .links = true};
  pd_prof_cost_t cost;
  if (pd_prof_cost(prof, NULL, &cost) == 0) meta.cost = &cost;
  rc = pd_trace_write_file(path, cycle, &meta);
  if (rc != 0) {
    snprintf(s->error, sizeof s->error, "cannot write trace '%s': %s", path, pd_strerror(rc));
    return rc;
  }
  if ((s->traces[s->ntraces] = strdup(path)) == NULL) {
    snprintf(s->error, sizeof s->error, "out of host memory for the trace list");
    return PD_ENOMEM;
  }
  s->ntraces++;
  rc = cycle_absorb(s, cycle);
  if (rc != 0) snprintf(s->error, sizeof s->error, "analysing the cycle: %s", pd_strerror(rc));
  return rc;
}

/* Gives up profiling after a failure (said once); the program runs on. Under s->lock. */
static void give_up(pd_inject_session_t *s, const char *what, int rc) {
  const char *detail = s->error[0] != '\0' ? s->error : pd_prof_last_error(s->prof);
  say(s, "warning: %s: %s%s%s; profiling stops, the program runs on unprofiled", what, pd_strerror(rc),
      detail[0] != '\0' ? ": " : "", detail);
  atomic_store(&s->stopped, true);
  pd_prof_destroy(s->prof);
  s->prof = NULL;
}

/* Whether the step about to end closes a cycle (its records are then flushed). */
static bool step_closes_cycle(const pd_inject_session_t *s) {
  pd_sched_action_t a = pd_schedule_action(&s->cfg.schedule, pd_prof_current_step(s->prof));
  return a == PD_SCHED_RECORD_AND_SAVE;
}

/* Creates and starts the profiler (the first launch, or the first step range). */
static void profiler_start(pd_inject_session_t *s) {
  pthread_mutex_lock(&s->lock);
  if (atomic_load(&s->started) || atomic_load(&s->stopped)) {
    pthread_mutex_unlock(&s->lock);
    return;
  }
  t_busy = true;
  if (s->env.device_info != NULL) (void)s->env.device_info(&s->dev);
  s->unix_offset_ns = pd_clock_unix_offset_ns();
  int drc = dir_make(s->cfg.trace_dir);
  if (drc != 0) {
    say(s, "warning: cannot create the trace directory '%s': %s; the program runs on unprofiled", s->cfg.trace_dir,
        strerror(-drc));
    atomic_store(&s->stopped, true);
    t_busy = false;
    pthread_mutex_unlock(&s->lock);
    return;
  }
  if (s->steps == PD_INJECT_STEPS_WHOLE_RUN)
    say(s, "no --step_kernel or --step_range: the whole run is one step (ProfilerStep#0)");
  pd_prof_config_t pc;
  pd_prof_config_init(&pc);
  pc.activities = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA;
  if (s->cfg.profile_level == PD_INJECT_LEVEL_FULL) pc.activities |= PD_ACTIVITY_CUDA_DRIVER;
  pc.profile_memory = true;
  pc.with_stack = s->cfg.with_stack;
  pc.schedule = s->cfg.schedule;
  pc.on_trace_ready = cycle_ready_cb;
  pc.user = s;
  pc.trace_dir = s->cfg.trace_dir;
  pc.step_range = s->steps == PD_INJECT_STEPS_RANGE ? s->cfg.step_range : NULL;
  pc.source = s->env.source;
  int rc = pd_prof_create(&pc, &s->prof);
  if (rc != 0) {
    say(s, "warning: the profiler could not start: %s (%s); the program runs on unprofiled", pd_strerror(rc),
        pd_prof_last_error(NULL));
    atomic_store(&s->stopped, true);
  } else {
    rc = pd_prof_start(s->prof);
    s->last_boundary_ns = pd_clock_now_ns(); /* step 0 begins */
    atomic_store(&s->started, true);
    if (rc != 0) give_up(s, "profiler start", rc);
  }
  t_busy = false;
  pthread_mutex_unlock(&s->lock);
}

/* Keeps the period of the step ending now, by its schedule action: untraced ones (not the
 * run's first PERIODS_SKIPPED, not one that follows a cycle's end, which carries its trace
 * write and calibration) and recorded ones; warmup steps are neither. */
static void period_note(pd_inject_session_t *s, int64_t now_ns, pd_sched_action_t a) {
  if (s->last_boundary_ns > 0) {
    const double p = (double)(now_ns - s->last_boundary_ns) * 1e-9;
    if (a == PD_SCHED_NONE && !s->after_cycle) {
      if (s->untraced_seen++ >= PERIODS_SKIPPED && s->nuntraced < PERIOD_SLOTS) s->untraced_s[s->nuntraced++] = p;
    } else if ((a == PD_SCHED_RECORD || a == PD_SCHED_RECORD_AND_SAVE) && s->ntraced < PERIOD_SLOTS) {
      s->traced_s[s->ntraced++] = p;
    }
  }
  s->after_cycle = a == PD_SCHED_RECORD_AND_SAVE;
  s->last_boundary_ns = now_ns;
}

/* --probe: the thread's speed right after an untraced step kept for the A/B (the step's
 * period is already noted), outside the step periods: the next period starts after it, as
 * profiler_demo --warmup_probe's next step does. Before the profiler's step, so a cycle
 * about to begin records none of it. One failure ends the series, said once: the metrics
 * JSON then carries none (its values pair with the untraced steps one to one). Under
 * s->lock, with t_busy set (the probe's own launches are not the program's). */
static void probe_after_untraced(pd_inject_session_t *s) {
  if (!s->cfg.probe || s->probe_off || s->env.speed_probe == NULL) return;
  double launch_ns = 0.0, compute_ns = 0.0;
  const int rc = s->env.speed_probe(&launch_ns, &compute_ns);
  if (rc != 0 || !(launch_ns > 0.0 && launch_ns < 1e9) || !(compute_ns > 0.0 && compute_ns < 1e12) ||
      s->nprobe + 1 != s->nuntraced) {
    s->probe_off = true;
    say(s, "warning: --probe after untraced step %zu: %s; the metrics JSON carries no probe series", s->nuntraced,
        rc != 0 ? "the probe failed" : "an out-of-range or unpaired probe value");
    return;
  }
  s->probe_launch_ns[s->nprobe] = launch_ns;
  s->probe_compute_ns[s->nprobe] = compute_ns;
  s->nprobe++;
  s->last_boundary_ns = pd_clock_now_ns();
}

static int finish_locked(pd_inject_session_t *s);

/* Kernel-name steps see steps through CUPTI's launch callback, which costs every launch of
 * the run, profiled or not (docs/inject.md). Once the schedule's last cycle is written and
 * TAIL_STEPS untraced steps after it are timed, nothing more will be recorded: whether that
 * point is reached now. NVTX-range steps need no callback; the whole-run step never ends. */
static bool schedule_tail_done(const pd_inject_session_t *s) {
  const int64_t end = pd_schedule_end(&s->cfg.schedule);
  return s->steps == PD_INJECT_STEPS_KERNEL && end >= 0 && s->steps_taken >= end + TAIL_STEPS;
}

/* Writes the outputs now instead of at exit, and lets the launch hook go (the entry point
 * detaches CUPTI at this launch's exit), so the program's later steps run unprofiled.
 * Under s->lock. */
static void finish_early(pd_inject_session_t *s) {
  say(s, "the schedule ended %d steps ago (step %lld): writing the outputs now and letting go of CUPTI; "
         "later steps run unprofiled",
      TAIL_STEPS, (long long)s->steps_taken);
  (void)finish_locked(s);
  atomic_store(&s->let_go, true);
}

/* Ends the current step (ProfilerStep#N) and begins the next. */
static void profiler_step(pd_inject_session_t *s) {
  const int64_t now = pd_clock_now_ns(); /* the step's end, before any of the profiler's work */
  pthread_mutex_lock(&s->lock);
  if (s->prof != NULL && !atomic_load(&s->stopped)) {
    t_busy = true;
    const size_t kept = s->nuntraced;
    period_note(s, now, pd_schedule_action(&s->cfg.schedule, pd_prof_current_step(s->prof)));
    if (s->nuntraced > kept) probe_after_untraced(s);
    if (step_closes_cycle(s) && s->env.device_sync != NULL) s->env.device_sync();
    int rc = pd_prof_step(s->prof);
    s->steps_taken = pd_prof_current_step(s->prof);
    if (rc != 0) give_up(s, "profiler step", rc);
    else if (schedule_tail_done(s)) finish_early(s);
    t_busy = false;
  }
  pthread_mutex_unlock(&s->lock);
}

/* ---- launches ------------------------------------------------------------------------------ */

static size_t ptr_slot(const void *p) { return (size_t)(pd_hash_u64((uint64_t)(uintptr_t)p) & (MATCH_SLOTS - 1)); }

/* Whether kernel matches the step regex, mangled or demangled; cached per name pointer. */
static bool kernel_matches(pd_inject_session_t *s, const char *kernel) {
  if (kernel == NULL) return false;
  pthread_mutex_lock(&s->match_lock);
  size_t i = ptr_slot(kernel);
  for (size_t probes = 0; probes < MATCH_SLOTS && s->match[i].key != NULL; probes++) {
    if (s->match[i].key == kernel) {
      bool m = s->match[i].match;
      pthread_mutex_unlock(&s->match_lock);
      return m;
    }
    i = (i + 1) & (MATCH_SLOTS - 1);
  }
  bool m = regexec(&s->re, kernel, 0, NULL, 0) == 0;
  if (!m) {
    char dem[1024];
    if (pd_demangle(kernel, dem, sizeof dem)) m = regexec(&s->re, dem, 0, NULL, 0) == 0;
  }
  /* A full table (more distinct kernels than slots) only stops caching. */
  if (s->match[i].key == NULL && s->nmatch < MATCH_SLOTS - 1) {
    s->match[i].key = kernel;
    s->match[i].match = m;
    s->nmatch++;
  }
  pthread_mutex_unlock(&s->match_lock);
  return m;
}

void pd_inject_on_launch(pd_inject_session_t *s, const char *kernel, bool is_runtime, bool is_exit) {
  if (s == NULL || t_busy) return;
  if (!is_exit) {
    if (t_launch_depth++ > 0) return; /* the driver launch inside a runtime launch */
    if (atomic_load_explicit(&s->stopped, memory_order_relaxed)) return;
    if (!atomic_load_explicit(&s->started, memory_order_acquire) && s->steps != PD_INJECT_STEPS_RANGE)
      profiler_start(s);
    t_pending_match = s->steps == PD_INJECT_STEPS_KERNEL && kernel_matches(s, kernel);
    return;
  }
  if (t_launch_depth == 0) return; /* an exit whose entry came before the hook */
  if (--t_launch_depth > 0) return;
  if (t_pending_match) {
    t_pending_match = false;
    profiler_step(s);
  }
}

/* ---- NVTX ranges ------------------------------------------------------------------------------ */

static bool is_step_range(const pd_inject_session_t *s, const char *name) {
  return s->steps == PD_INJECT_STEPS_RANGE && name != NULL && strcmp(name, s->cfg.step_range) == 0;
}

/* A step range begins: the first starts the profiler, each later one begins a step. */
static void step_range_begins(pd_inject_session_t *s) {
  if (atomic_load(&s->stopped)) return;
  if (!atomic_load(&s->started)) profiler_start(s);
  else profiler_step(s);
}

/* The name a range is recorded under: an emit_nvtx op's own name (counted), else the text. */
static const char *range_name(pd_inject_session_t *s, const char *text, char *buf, size_t len) {
  if (text == NULL) return "(unnamed range)";
  if (pd_inject_nvtx_op_name(text, buf, len) == 0) return text;
  atomic_fetch_add_explicit(&s->op_ranges, 1, memory_order_relaxed);
  return buf;
}

void pd_inject_on_range_push(pd_inject_session_t *s, const char *name) {
  if (s == NULL || t_busy) return;
  if (is_step_range(s, name)) step_range_begins(s);
  char op[256];
  (void)pd_range_push(range_name(s, name, op, sizeof op));
}

void pd_inject_on_range_pop(pd_inject_session_t *s) {
  if (s == NULL || t_busy) return;
  (void)pd_range_pop(); /* PD_ESTATE: a pop without its push (pushed before we were loaded) */
}

uint64_t pd_inject_on_range_start(pd_inject_session_t *s, const char *name) {
  if (s == NULL || t_busy) return 0;
  if (is_step_range(s, name)) step_range_begins(s);
  uint32_t session = pd_ranges_session_id();
  if (session == 0) return 0; /* not recording: nothing to remember */
  char op[256];
  char *copy = strdup(range_name(s, name, op, sizeof op));
  pthread_mutex_lock(&s->span_lock);
  uint64_t id = 0;
  for (size_t i = 0; copy != NULL && i < SPAN_SLOTS; i++) {
    span_t *sp = &s->spans[(s->next_span_id + i) % SPAN_SLOTS];
    if (sp->id != 0) continue;
    id = ++s->next_span_id;
    *sp = (span_t){.id = id, .session = session, .start_ns = pd_clock_now_ns(), .name = copy};
    copy = NULL;
    break;
  }
  if (copy != NULL || id == 0) s->spans_lost++;
  pthread_mutex_unlock(&s->span_lock);
  free(copy);
  return id;
}

void pd_inject_on_range_end(pd_inject_session_t *s, uint64_t id) {
  if (s == NULL || t_busy || id == 0) return;
  int64_t end = pd_clock_now_ns();
  span_t got = {0};
  pthread_mutex_lock(&s->span_lock);
  for (size_t i = 0; i < SPAN_SLOTS; i++) {
    if (s->spans[i].id == id) {
      got = s->spans[i];
      s->spans[i] = (span_t){0};
      break;
    }
  }
  pthread_mutex_unlock(&s->span_lock);
  if (got.id == 0) return;
  (void)pd_range_add_span(got.name, got.session, got.start_ns, end);
  free(got.name);
}

/* ---- at exit ---------------------------------------------------------------------------------- */

static const char *program_name(void) {
  extern char *program_invocation_short_name; /* glibc */
  return program_invocation_short_name != NULL && program_invocation_short_name[0] != '\0'
             ? program_invocation_short_name
             : "program";
}

static int metrics_write(pd_inject_session_t *s, const char *path, const pd_verdict_t *v, const pd_prof_cost_t *cost) {
  const pd_inject_config_t *c = &s->cfg;
  const char *name = c->name[0] != '\0' ? c->name : program_name();
  const bool probe_ok = c->probe && !s->probe_off && s->nuntraced > 0 && s->nprobe == s->nuntraced;
  const char *rank = getenv("RANK");
  const char *steps_by = s->steps == PD_INJECT_STEPS_KERNEL ? "step_kernel"
                         : s->steps == PD_INJECT_STEPS_RANGE ? "step_range"
                                                             : "whole_run";
  pd_cfg_entry_t entries[] = {
      {.key = "name", .type = PD_CFG_STRING, .s = name},
      /* the gate keys baselines by config.scenario: a program's is its name */
      {.key = "scenario", .type = PD_CFG_STRING, .s = name},
      {.key = "profiler", .type = PD_CFG_STRING, .s = "pd_inject"},
      {.key = "steps_by", .type = PD_CFG_STRING, .s = steps_by},
      {.key = "step_kernel", .type = PD_CFG_STRING, .s = c->step_kernel},
      {.key = "step_range", .type = PD_CFG_STRING, .s = c->step_range},
      {.key = "skip_first", .type = PD_CFG_INT, .i = s->cfg.schedule.skip_first},
      {.key = "wait", .type = PD_CFG_INT, .i = s->cfg.schedule.wait},
      {.key = "warmup", .type = PD_CFG_INT, .i = s->cfg.schedule.warmup},
      {.key = "active", .type = PD_CFG_INT, .i = s->cfg.schedule.active},
      {.key = "repeat", .type = PD_CFG_INT, .i = s->cfg.schedule.repeat},
      {.key = "with_stack", .type = PD_CFG_BOOL, .b = c->with_stack},
      {.key = "probe", .type = PD_CFG_BOOL, .b = c->probe},
      {.key = "profile_level", .type = PD_CFG_STRING, .s = c->profile_level == PD_INJECT_LEVEL_FULL ? "full" : "lean"},
      {.key = "pid", .type = PD_CFG_INT, .i = (int64_t)getpid()},
      {.key = "rank", .type = PD_CFG_STRING, .s = rank != NULL ? rank : ""},
  };
  pd_host_info_t host;
  pd_host_info_read(&host);
  pd_run_report_t report = {
      .config = entries,
      .nconfig = sizeof(entries) / sizeof(entries[0]),
      .device = &s->dev,
      .metrics = &s->metrics,
      .step_times_s = s->step_s,
      .dataloader_wait_s = s->wait_s,
      .nsteps = s->nsamples,
      /* the untraced steps' periods (period_note): for a program under pd_run the step's
       * time and its period are one figure; the gate's A/B judges host time on them */
      .warmup_periods_s = s->nuntraced > 0 ? s->untraced_s : NULL,
      .warmup_step_times_s = s->nuntraced > 0 ? s->untraced_s : NULL,
      /* --probe's series where every kept untraced step has its probe */
      .warmup_probe_launch_ns = probe_ok ? s->probe_launch_ns : NULL,
      .warmup_probe_compute_ns = probe_ok ? s->probe_compute_ns : NULL,
      .nwarmup = s->nuntraced,
      .verdict = v,
      .cycles = &s->cycle_log,
      .top_ops = s->ops,
      .top_ops_limit = c->top_n,
      .top_kernels = s->kernels,
      .host = &host,
      .trace_files = (const char *const *)s->traces,
      .ntrace_files = s->ntraces,
      .steps_done = s->steps_taken + 1,
      .cost = cost,
  };
  return pd_metrics_json_write(path, &report);
}

int pd_inject_session_finish(pd_inject_session_t *s) {
  if (s == NULL) return 0;
  pthread_mutex_lock(&s->lock);
  const int rc = finish_locked(s);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

bool pd_inject_session_take_let_go(pd_inject_session_t *s) {
  /* Asked at every launch's exit: a plain load first, so the hot path writes nothing. */
  return s != NULL && atomic_load_explicit(&s->let_go, memory_order_relaxed) && atomic_exchange(&s->let_go, false);
}

/* pd_inject_session_finish under s->lock (also from finish_early). */
static int finish_locked(pd_inject_session_t *s) {
  if (s->prof == NULL) {
    /* never started (no kernel launched, no step range), failed before, or finished */
    if (!atomic_load(&s->started) && !atomic_load(&s->stopped) && s->steps == PD_INJECT_STEPS_RANGE)
      say(s, "no NVTX range '%s' was opened: nothing profiled", s->cfg.step_range);
    atomic_store(&s->stopped, true);
    return 0;
  }
  t_busy = true;
  pd_sched_action_t a = pd_schedule_action(&s->cfg.schedule, pd_prof_current_step(s->prof));
  if (a != PD_SCHED_NONE && s->env.device_sync != NULL) s->env.device_sync();
  int rc = pd_prof_stop(s->prof);
  s->steps_taken = pd_prof_current_step(s->prof);
  if (rc != 0) {
    give_up(s, "profiler stop", rc);
    t_busy = false;
    return rc;
  }
  pd_prof_cost_t cost;
  (void)pd_prof_cost(s->prof, &cost, NULL);
  pd_prof_cost_measure(&cost, s->untraced_s, s->nuntraced, s->traced_s, s->ntraced);
  const double dropped = (double)pd_prof_dropped_records(s->prof);
  atomic_store(&s->stopped, true);
  char path[PD_INJECT_PATH_MAX + 64];
  if (s->ntraces == 0) {
    say(s, "%lld steps ran; the schedule (skip_first=%d wait=%d warmup=%d active=%d) recorded none: nothing written",
        (long long)s->steps_taken + 1, s->cfg.schedule.skip_first, s->cfg.schedule.wait, s->cfg.schedule.warmup,
        s->cfg.schedule.active);
  } else if (pd_inject_output_json_for(&s->cfg, (long)getpid(), getenv("RANK"), path, sizeof path) != 0) {
    say(s, "warning: the metrics JSON path for this process is too long; not written");
    rc = PD_EINVAL;
  } else if ((rc = parent_make(path)) != 0) {
    say(s, "warning: cannot create the directory of the metrics JSON '%s': %s; not written", path, strerror(-rc));
    rc = PD_EIO;
  } else {
    if (dropped > s->metrics.dropped_records || isnan(s->metrics.dropped_records)) s->metrics.dropped_records = dropped;
    pd_metrics_from_samples(&s->metrics, s->step_s, s->wait_s, s->nsamples);
    (void)pd_cycle_log_overall(&s->cycle_log, &s->metrics);
    s->metrics.steps = (int)s->nsamples;
    pd_verdict_t v;
    memset(&v, 0, sizeof v);
    pd_diagnose(&s->metrics, PD_ADVICE_TORCH, &v);
    pd_op_table_sort(s->ops, PD_SORT_SELF_CUDA_TIME_TOTAL);
    pd_op_table_sort(s->kernels, PD_SORT_SELF_CUDA_TIME_TOTAL);
    rc = metrics_write(s, path, &v, &cost);
    if (rc != 0)
      say(s, "warning: cannot write the metrics JSON '%s': %s", path, pd_strerror(rc));
    else
      say(s, "%zu profiled steps, %zu trace%s (%s%s), metrics %s; verdict: %s", s->nsamples, s->ntraces,
          s->ntraces == 1 ? "" : "s", s->traces[s->ntraces - 1], s->ntraces > 1 ? " and earlier" : "", path,
          pd_bottleneck_name(v.bottleneck));
    /* CUPTI sees CUDA calls, not PyTorch's ops: without them .item() reads are found from
     * their copies alone and DataLoader waits look like host time (docs/inject.md,
     * "Planted causes under pd_run") */
    if (rc == 0 && atomic_load(&s->op_ranges) == 0 && s->env.is_pytorch != NULL && s->env.is_pytorch())
      say(s, "a PyTorch program without op ranges: the verdict sees .item() reads only as their copies (not "
             "the ops that compute them) and cannot see DataLoader waits; run its steps under "
             "torch.autograd.profiler.emit_nvtx() to give it the ops (docs/inject.md)");
  }
  pd_prof_destroy(s->prof);
  s->prof = NULL;
  t_busy = false;
  return rc;
}
