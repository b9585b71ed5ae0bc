/* profiler.c: the profiler's state machine (torch.profiler.profile semantics).
 *
 * Each pd_prof_step() closes the current step's ProfilerStep#N range, moves to the next
 * schedule action and runs the transition torch runs between the two actions:
 *   prepare  (tracing on: record source enabled, host-range session opened),
 *   start    (warmup data discarded: new range session, the source's records dropped,
 *             capture window starts now),
 *   stop     (source disabled and flushed, ranges and records moved into the cycle),
 *   ready    (cycle sorted and handed to on_trace_ready, then reset: memory stays flat).
 * GPU-side records come from a record source (pd_source.h), never from CUPTI directly:
 * the CUPTI source this file makes for PD_ACTIVITY_CUDA, the one the config passes
 * (a scripted source in the unit tests), or, with only PD_ACTIVITY_CPU, a source that
 * records nothing. Only the CUPTI source made here is calibrated (calibrate.c), so with
 * any other no CUDA or CUPTI call is made at all and the whole machine is unit-tested
 * without a GPU. All calls come from one thread (the training loop's).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cupti_source.h"
#include "pd/pd_prof.h"
#include "capture_internal.h"

typedef enum { ST_CREATED, ST_RUNNING, ST_STOPPED } prof_state_t;

/* Pseudo-action for pd_prof_stop(): torch's transition to None. */
#define ACTION_STOP (-1)

struct pd_prof {
  pd_prof_config_t cfg; /* strings below are our copies */
  char *trace_dir;
  char *worker_name;
  prof_state_t state;
  int64_t step;
  pd_sched_action_t action;
  pd_trace_t *cycle;
  pd_record_source_t *src; /* never NULL: CUPTI, the config's, or the empty source */
  bool owns_src;           /* made here (CUPTI): destroyed with the profiler */
  bool tracing;
  int64_t window_start_ns;
  uint64_t dropped_seen; /* dropped count already assigned to a cycle */
  uint64_t errors_seen;  /* source callback errors already warned about */
  /* The open ProfilerStep#N range. */
  bool step_open;
  int64_t step_start_ns;
  uint32_t step_depth;
  uint32_t step_tid;
  uint64_t step_nvtx;
  bool warned_detach;
  char last_error[512];
  /* The profiler's own cost (pd_prof_cost): the run so far, the last cycle collected, and
   * the transition times of the cycle being recorded (added to both when it closes). */
  pd_prof_cost_t cost_total;
  pd_prof_cost_t cost_cycle;
  pd_prof_cost_t cost_open;
  int64_t buffers_seen; /* source buffers completed before the cycle being recorded */
  /* The API census over a cycle's warmup steps (pd_source.h): running, and the step it
   * started at. */
  bool census_on;
  int64_t census_step0;
};

static atomic_flag g_one_profiler = ATOMIC_FLAG_INIT;
/* Detail of the last failed pd_prof_create() (no profiler exists to hold it). */
static char g_create_error[512];

static void set_error(pd_prof_t *p, const char *what, int rc) {
  if (p->last_error[0] != '\0' && strstr(p->last_error, what) != NULL) return;
  snprintf(p->last_error, sizeof(p->last_error), "%s: %s", what, pd_strerror(rc));
}

/* Keeps the first error of a transition; later ones only if none happened before. */
static int first_err(int have, int rc) { return have < 0 ? have : rc; }

/* ---- the empty record source (PD_ACTIVITY_CPU only): records nothing, never fails ---- */

static int none_switch(pd_record_source_t *s, char *err, size_t errlen) { return 0; }
static int none_flush(pd_record_source_t *s, bool forced, char *err, size_t errlen) { return 0; }
static int64_t none_collect(pd_record_source_t *s, pd_trace_t *out, int64_t window_start_ns) { return 0; }
static const pd_device_props_t *none_device(const pd_record_source_t *s) { return NULL; }
static uint64_t none_count(const pd_record_source_t *s) { return 0; }
static size_t none_bytes(const pd_record_source_t *s) { return 0; }
static void none_destroy(pd_record_source_t *s) {}

static const pd_record_source_ops_t none_ops = {
    .name = "none",
    .enable = none_switch,
    .disable = none_switch,
    .flush = none_flush,
    .collect = none_collect,
    .detach = none_switch,
    .device = none_device,
    .dropped = none_count,
    .errors = none_count,
    .buffers = none_count,
    .buffer_bytes = none_bytes,
    .destroy = none_destroy,
};
static pd_record_source_t g_none_source = {.ops = &none_ops, .impl = NULL};

/* ---- config -------------------------------------------------------------------------- */

void pd_prof_config_init(pd_prof_config_t *cfg) {
  if (cfg == NULL) return;
  memset(cfg, 0, sizeof(*cfg));
  cfg->activities = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA;
  cfg->schedule = (pd_schedule_t){.skip_first = 0, .wait = 1, .warmup = 1, .active = 1, .repeat = 1};
  cfg->device = 0;
}

/* Whether every operation of a given source is there (pd_source.h has no optional one). */
static bool source_complete(const pd_record_source_t *s) {
  const pd_record_source_ops_t *o = s->ops;
  return o != NULL && o->name && o->enable && o->disable && o->flush && o->collect && o->detach && o->device && o->dropped &&
         o->errors && o->buffers && o->buffer_bytes && o->destroy;
}

static int validate(const pd_prof_config_t *cfg, char *err, size_t errlen) {
  unsigned known = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA | PD_ACTIVITY_CUDA_DRIVER;
  unsigned act = cfg->activities ? cfg->activities : (PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA);
  if (act & ~known) {
    snprintf(err, errlen, "activities 0x%x has unknown bits (known: 0x%x)", act, known);
    return PD_EINVAL;
  }
  if ((act & PD_ACTIVITY_CUDA_DRIVER) && !(act & PD_ACTIVITY_CUDA)) {
    snprintf(err, errlen, "PD_ACTIVITY_CUDA_DRIVER needs PD_ACTIVITY_CUDA");
    return PD_EINVAL;
  }
  if (cfg->source != NULL && !(act & PD_ACTIVITY_CUDA)) {
    snprintf(err, errlen, "a record source needs PD_ACTIVITY_CUDA");
    return PD_EINVAL;
  }
  if (cfg->source != NULL && !source_complete(cfg->source)) {
    snprintf(err, errlen, "record source: an operation is missing");
    return PD_EINVAL;
  }
  if (pd_schedule_validate(&cfg->schedule) != 0) {
    const pd_schedule_t *s = &cfg->schedule;
    snprintf(err, errlen,
             "bad schedule (skip_first=%d wait=%d warmup=%d active=%d repeat=%d): counts must be "
             ">= 0 and active >= 1",
             s->skip_first, s->wait, s->warmup, s->active, s->repeat);
    return PD_EINVAL;
  }
  if (cfg->device < 0) {
    snprintf(err, errlen, "device %d: must be >= 0", cfg->device);
    return PD_EINVAL;
  }
  if (cfg->worker_name != NULL && (cfg->worker_name[0] == '\0' || strchr(cfg->worker_name, '/'))) {
    snprintf(err, errlen, "worker_name \"%s\": must be non-empty and contain no '/'", cfg->worker_name);
    return PD_EINVAL;
  }
  return 0;
}

static double ms_since(int64_t t0) { return (double)(pd_clock_now_ns() - t0) * 1e-6; }

/* Makes the CUPTI source for the config (PD_ACTIVITY_CUDA without a given source). CUPTI is
 * detached between cycles (kineto's TEARDOWN_CUPTI) unless PD_PROF_CUPTI_DETACH=0:
 * attached, it costs every CUDA call about half a microsecond even with all kinds
 * disabled (docs/performance.md). */
static int cupti_source_make(const pd_prof_config_t *cfg, unsigned activities, pd_record_source_t **out) {
  pd_cupti_options_t opt = {
      .device = cfg->device,
      .driver_api = (activities & PD_ACTIVITY_CUDA_DRIVER) != 0,
      .driver_launches = true,
      .memory = cfg->profile_memory,
      .buffer_bytes = cfg->cupti_buffer_bytes,
      .buffer_budget_bytes = cfg->cupti_buffer_budget_bytes,
      .detach = pd_knob_cupti_detach(),
  };
  /* checked by pd_prof_env_check() before: cannot fail here */
  int rc = pd_knob_cupti_capture(&opt.capture, g_create_error, sizeof(g_create_error));
  if (rc == 0) rc = pd_cupti_record_source_create(&opt, out, g_create_error, sizeof(g_create_error));
  return rc;
}

int pd_prof_create(const pd_prof_config_t *cfg, pd_prof_t **out) {
  g_create_error[0] = '\0';
  if (cfg == NULL || out == NULL) {
    snprintf(g_create_error, sizeof(g_create_error), "pd_prof_create: NULL argument");
    return PD_EINVAL;
  }
  *out = NULL;
  int rc = validate(cfg, g_create_error, sizeof(g_create_error));
  if (rc == 0) rc = pd_prof_env_check(g_create_error, sizeof(g_create_error));
  if (rc != 0) return rc;
  if (atomic_flag_test_and_set(&g_one_profiler)) {
    snprintf(g_create_error, sizeof(g_create_error),
             "another profiler exists in this process; destroy it first");
    return PD_ESTATE;
  }
  pd_prof_t *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    rc = PD_ENOMEM;
    goto fail;
  }
  p->cfg = *cfg;
  if (p->cfg.activities == 0) p->cfg.activities = PD_ACTIVITY_CPU | PD_ACTIVITY_CUDA;
  p->trace_dir = cfg->trace_dir ? strdup(cfg->trace_dir) : NULL;
  p->worker_name = cfg->worker_name ? strdup(cfg->worker_name) : NULL;
  p->cycle = pd_trace_create();
  if ((cfg->trace_dir && !p->trace_dir) || (cfg->worker_name && !p->worker_name) || !p->cycle) {
    rc = PD_ENOMEM;
    goto fail;
  }
  p->cfg.trace_dir = p->trace_dir;
  p->cfg.worker_name = p->worker_name;
  p->src = &g_none_source;
  if (cfg->source != NULL) {
    p->src = cfg->source;
  } else if (p->cfg.activities & PD_ACTIVITY_CUDA) {
    rc = cupti_source_make(cfg, p->cfg.activities, &p->src);
    if (rc != 0) goto fail;
    p->owns_src = true;
    /* A non-fatal detail (CUPTI could not detach) stays visible as the last error. */
    snprintf(p->last_error, sizeof(p->last_error), "%s", g_create_error);
  }
  pd_ranges_set_record_shapes(cfg->record_shapes);
  pd_ranges_set_with_stack(cfg->with_stack);
  pd_prof_cost_init(&p->cost_total);
  /* Only the CUPTI source made here is calibrated: a given source runs no CUDA. */
  if (p->owns_src && pd_knob_calibrate()) {
    pd_calibrate(p->src, &p->cost_total);
    p->buffers_seen = (int64_t)p->src->ops->buffers(p->src);
  }
  p->cost_total.buffer_bytes = (int64_t)p->src->ops->buffer_bytes(p->src);
  p->cost_cycle = p->cost_total;
  pd_prof_cost_init(&p->cost_open);
  p->state = ST_CREATED;
  p->action = PD_SCHED_NONE;
  *out = p;
  return 0;

fail:
  if (rc == PD_ENOMEM && g_create_error[0] == '\0')
    snprintf(g_create_error, sizeof(g_create_error), "out of host memory");
  if (p != NULL) {
    pd_trace_destroy(p->cycle);
    free(p->trace_dir);
    free(p->worker_name);
    free(p);
  }
  atomic_flag_clear(&g_one_profiler);
  return rc;
}

/* ---- the four transition actions ---------------------------------------------------------- */

/* Ends a running census: with keep, its counts go into the open cycle's cost as per-step
 * figures over the warmup steps it ran (none when it ran over none or failed). */
static void census_end(pd_prof_t *p, bool keep) {
  if (!p->census_on) return;
  p->census_on = false;
  pd_api_census_t c;
  char err[256];
  const int rc = p->src->ops->census(p->src, false, &c, err, sizeof err);
  const int64_t steps = p->step - p->census_step0;
  if (!keep || rc != 0 || steps <= 0) return;
  pd_prof_cost_t *o = &p->cost_open;
  o->census_steps = steps;
  o->census_recorded = c.recorded;
  o->census_runtime_unrecorded = c.runtime_unrecorded;
  o->census_driver_unrecorded = c.driver_unrecorded;
  o->census_driver_internal = c.driver_internal;
}

/* Tracing on. census: the steps until start_trace are warmup, whose records are dropped:
 * the source also counts the API calls it sees there (pd_source.h), for the estimate of
 * what the recorded steps' unrecorded calls cost. A census that cannot start costs
 * nothing but that count. */
static int prepare_trace(pd_prof_t *p, bool census) {
  if (p->tracing) return 0;
  pd_ranges_session_begin();
  p->window_start_ns = pd_clock_now_ns();
  p->tracing = true;
  int64_t t0 = pd_clock_now_ns();
  int rc = p->src->ops->enable(p->src, p->last_error, sizeof(p->last_error));
  p->cost_open.enable_ms += ms_since(t0);
  if (rc == 0 && census && p->src->ops->census != NULL) {
    char err[256];
    p->census_on = p->src->ops->census(p->src, true, NULL, err, sizeof err) == 0;
    p->census_step0 = p->step;
  }
  return rc;
}

static int start_trace(pd_prof_t *p) {
  /* Everything traced so far was warmup: a new range session orphans warmup ranges,
   * queued CUPTI buffers are dropped, and records still inside CUPTI are filtered out at
   * collection because they start before the window. */
  census_end(p, true);
  pd_ranges_session_begin();
  pd_trace_reset(p->cycle);
  int64_t rc = p->src->ops->collect(p->src, NULL, 0);
  if (rc < 0) {
    set_error(p, "discarding the warmup's records", (int)rc);
    return (int)rc;
  }
  p->window_start_ns = pd_clock_now_ns();
  return 0;
}

/* Ends tracing and moves what was recorded into p->cycle. */
static int stop_trace(pd_prof_t *p, bool forced) {
  int rc = 0;
  if (!p->tracing) return 0;
  census_end(p, false); /* a warmup that never reached a recorded step */
  int64_t t0 = pd_clock_now_ns();
  int64_t n = pd_ranges_collect(p->cycle);
  if (n < 0) {
    set_error(p, "collecting host ranges", (int)n);
    rc = (int)n;
  }
  pd_ranges_session_end();
  /* Disable first so the flush hands over a closed set of records. */
  p->cost_open.parse_ms += ms_since(t0);
  t0 = pd_clock_now_ns();
  int r = p->src->ops->disable(p->src, p->last_error, sizeof(p->last_error));
  rc = first_err(rc, r);
  r = p->src->ops->flush(p->src, forced, p->last_error, sizeof(p->last_error));
  rc = first_err(rc, r);
  p->cost_open.flush_ms += ms_since(t0);
  t0 = pd_clock_now_ns();
  int64_t got = p->src->ops->collect(p->src, p->cycle, p->window_start_ns);
  if (got < 0) {
    set_error(p, "parsing the record source's buffers", (int)got);
    rc = first_err(rc, (int)got);
  }
  p->tracing = false;
  p->cost_open.parse_ms += ms_since(t0); /* the sort is added in trace_ready */
  return rc;
}

/* Closes the cost of the cycle in hand: its counts and transition times become
 * cost_cycle (what on_trace_ready sees) and are added to the run's total. */
static void cost_close_cycle(pd_prof_t *p) {
  pd_prof_cost_t *t = &p->cost_total, c = p->cost_open;
  pd_prof_cost_count(&c, p->cycle);
  const int64_t buffers = (int64_t)p->src->ops->buffers(p->src);
  c.cycles = 1;
  c.buffers = buffers - p->buffers_seen;
  c.buffer_bytes = t->buffer_bytes;
  c.dropped = pd_trace_dropped(p->cycle);
  c.calib_ns_per_call = t->calib_ns_per_call;
  c.calib_ns_per_range = t->calib_ns_per_range;
  c.calib_ns_launch_untraced = t->calib_ns_launch_untraced;
  c.calib_ns_launch_traced = t->calib_ns_launch_traced;
  c.calib_ns_launch_record = t->calib_ns_launch_record;
  c.calib_ns_per_recorded_call = t->calib_ns_per_recorded_call;
  c.calib_ns_per_unrecorded_runtime = t->calib_ns_per_unrecorded_runtime;
  c.calib_ns_per_unrecorded_driver = t->calib_ns_per_unrecorded_driver;
  c.calib_ns_launch_cold_untraced = t->calib_ns_launch_cold_untraced;
  c.calib_ns_launch_cold_traced = t->calib_ns_launch_cold_traced;
  pd_prof_cost_estimate(&c);
  t->win_ns_per_launch_sum += c.win_ns_per_launch_sum;
  t->win_cycles += c.win_cycles;
  t->cycles += c.cycles;
  t->steps += c.steps;
  t->records += c.records;
  t->api_calls += c.api_calls;
  t->launch_calls += c.launch_calls;
  t->census_steps += c.census_steps;
  t->census_recorded += c.census_recorded;
  t->census_runtime_unrecorded += c.census_runtime_unrecorded;
  t->census_driver_unrecorded += c.census_driver_unrecorded;
  t->census_driver_internal += c.census_driver_internal;
  t->gpu_activities += c.gpu_activities;
  t->host_ranges += c.host_ranges;
  t->buffers += c.buffers;
  t->dropped += c.dropped;
  t->enable_ms += c.enable_ms;
  t->flush_ms += c.flush_ms;
  t->parse_ms += c.parse_ms;
  t->calibrate_ms += c.calibrate_ms;
  t->end_ns_per_call_sum += c.end_ns_per_call_sum;
  t->end_ns_per_range_sum += c.end_ns_per_range_sum;
  t->end_ns_launch_untraced_sum += c.end_ns_launch_untraced_sum;
  t->end_cycles += c.end_cycles;
  pd_prof_cost_estimate(t);
  p->cost_cycle = c;
  p->buffers_seen = buffers;
  pd_prof_cost_init(&p->cost_open);
}

/* Hands the collected cycle to on_trace_ready. With `calibrate_end` (a cycle ended by
 * pd_prof_step, not pd_prof_stop, where the program may be exiting), the calibration runs
 * again first, right after the cycle's last step (calibrate.c). */
static int trace_ready(pd_prof_t *p, bool calibrate_end) {
  int rc = 0;
  const pd_record_source_ops_t *ops = p->src->ops;
  const pd_device_props_t *dev = ops->device(p->src);
  if (dev != NULL) rc = pd_trace_add_device(p->cycle, dev);
  if (rc != 0) set_error(p, "describing the device", rc);
  uint64_t total = ops->dropped(p->src);
  uint64_t cycle_dropped = total - p->dropped_seen;
  p->dropped_seen = total;
  pd_trace_set_dropped(p->cycle, cycle_dropped);
  if (cycle_dropped > 0)
    fprintf(stderr,
            "pd_prof: warning: %s dropped %llu activity records in the cycle ending at step "
            "%lld; the trace is incomplete\n",
            p->src->ops->name, (unsigned long long)cycle_dropped, (long long)p->step);
  uint64_t errs = ops->errors(p->src);
  if (errs > p->errors_seen) {
    fprintf(stderr,
            "pd_prof: warning: %llu %s buffer calls failed in the cycle ending at step %lld "
            "(dropped-record count or record parsing); the trace may be incomplete\n",
            (unsigned long long)(errs - p->errors_seen), p->src->ops->name, (long long)p->step);
    p->errors_seen = errs;
  }
  if (calibrate_end && p->owns_src && pd_knob_calibrate()) {
    /* its CUPTI buffers are no part of the cycle's */
    const int64_t b0 = (int64_t)ops->buffers(p->src);
    pd_calibrate_end(p->src, &p->cost_open);
    p->buffers_seen += (int64_t)ops->buffers(p->src) - b0;
  }
  int64_t t_sort = pd_clock_now_ns();
  pd_trace_sort(p->cycle);
  p->cost_open.parse_ms += ms_since(t_sort);
  cost_close_cycle(p);
  pd_trace_set_calibration(p->cycle, p->cost_total.calib_ns_per_call, p->cost_total.calib_ns_per_range);
  pd_trace_set_step_range(p->cycle, p->cfg.step_range);
  if (rc == 0 && p->cfg.on_trace_ready != NULL) {
    rc = p->cfg.on_trace_ready(p, p->cycle, p->cfg.user);
    if (rc != 0) {
      snprintf(p->last_error, sizeof(p->last_error), "on_trace_ready returned %d (%s)", rc,
               pd_strerror(rc));
      if (rc > 0) rc = PD_EINVAL; /* callbacks must return 0 or a negative code */
    }
  }
  pd_trace_reset(p->cycle);
  return rc;
}

/* torch.profiler's action map, (prev, cur) -> actions; cur == ACTION_STOP at stop(). */
static int transit(pd_prof_t *p, pd_sched_action_t prev, int cur) {
  int rc = 0;
  bool stopping = cur == ACTION_STOP;
  bool cur_records = cur == PD_SCHED_RECORD || cur == PD_SCHED_RECORD_AND_SAVE;
  switch (prev) {
    case PD_SCHED_NONE:
      if (cur == PD_SCHED_WARMUP) rc = prepare_trace(p, true);
      if (cur_records) {
        rc = prepare_trace(p, false);
        rc = first_err(rc, start_trace(p));
      }
      break;
    case PD_SCHED_WARMUP:
      if (cur == PD_SCHED_NONE || stopping) {
        /* Warmup that never reaches a recorded step: torch starts and stops, hands nothing. */
        rc = stop_trace(p, stopping);
        pd_trace_reset(p->cycle);
      } else if (cur_records) {
        rc = start_trace(p);
      }
      break;
    case PD_SCHED_RECORD:
      if (stopping) {
        rc = stop_trace(p, true);
        rc = first_err(rc, trace_ready(p, false));
      } else if (cur == PD_SCHED_NONE || cur == PD_SCHED_WARMUP) {
        /* Only an invalid schedule gets here (torch warns); the partial cycle is dropped. */
        rc = stop_trace(p, false);
        pd_trace_reset(p->cycle);
        if (cur == PD_SCHED_WARMUP) rc = first_err(rc, prepare_trace(p, true));
      }
      break;
    case PD_SCHED_RECORD_AND_SAVE:
      rc = stop_trace(p, stopping);
      rc = first_err(rc, trace_ready(p, !stopping));
      if (cur == PD_SCHED_WARMUP) rc = first_err(rc, prepare_trace(p, true));
      if (cur_records) {
        rc = first_err(rc, prepare_trace(p, false));
        rc = first_err(rc, start_trace(p));
      }
      break;
  }
  if (!p->tracing) {
    /* Untraced steps follow: take the source (CUPTI) out of the process so they cost
     * nothing. Failing to detach costs only speed, so it is reported but does not fail
     * the step. */
    char why[256] = "";
    if (p->src->ops->detach(p->src, why, sizeof(why)) != 0) {
      snprintf(p->last_error, sizeof(p->last_error), "warning: %s", why);
      if (!p->warned_detach) fprintf(stderr, "pd_prof: warning: %s\n", why);
      p->warned_detach = true;
    }
  }
  return rc;
}

/* ---- step ranges ------------------------------------------------------------------------------- */

static void open_step(pd_prof_t *p) {
  char name[48];
  snprintf(name, sizeof(name), "ProfilerStep#%lld", (long long)p->step);
  /* The NVTX range is emitted for every step so Nsight Systems shows all of them. */
  p->step_depth = pd_ranges_step_begin(name, &p->step_nvtx);
  p->step_tid = (uint32_t)syscall(SYS_gettid);
  p->step_start_ns = pd_clock_now_ns();
  p->step_open = true;
}

static int close_step(pd_prof_t *p) {
  if (!p->step_open) return 0;
  int64_t end = pd_clock_now_ns();
  pd_ranges_step_end(p->step_nvtx);
  p->step_open = false;
  if (p->action != PD_SCHED_RECORD && p->action != PD_SCHED_RECORD_AND_SAVE) return 0;
  char name[48];
  snprintf(name, sizeof(name), "ProfilerStep#%lld", (long long)p->step);
  pd_event_t ev;
  memset(&ev, 0, sizeof(ev));
  ev.kind = PD_EVENT_RANGE;
  ev.start_ns = p->step_start_ns;
  ev.end_ns = end;
  ev.name = name;
  ev.pid = (uint32_t)getpid();
  ev.tid = p->step_tid;
  ev.u.range.step = p->step;
  ev.u.range.depth = p->step_depth;
  int rc = pd_trace_add(p->cycle, &ev);
  if (rc != 0) set_error(p, "recording the step range", rc);
  return rc;
}

/* ---- public state machine ------------------------------------------------------------------------ */

int pd_prof_start(pd_prof_t *p) {
  if (p == NULL) return PD_EINVAL;
  if (p->state != ST_CREATED) {
    snprintf(p->last_error, sizeof(p->last_error), "pd_prof_start: profiler already %s",
             p->state == ST_RUNNING ? "started" : "stopped");
    return PD_ESTATE;
  }
  p->last_error[0] = '\0';
  p->state = ST_RUNNING;
  p->step = 0;
  p->action = pd_schedule_action(&p->cfg.schedule, 0);
  int rc = transit(p, PD_SCHED_NONE, (int)p->action);
  open_step(p);
  return rc;
}

int pd_prof_step(pd_prof_t *p) {
  if (p == NULL) return PD_EINVAL;
  if (p->state != ST_RUNNING) {
    snprintf(p->last_error, sizeof(p->last_error), "pd_prof_step: profiler not started");
    return PD_ESTATE;
  }
  int rc = close_step(p);
  pd_sched_action_t prev = p->action;
  p->step++;
  p->action = pd_schedule_action(&p->cfg.schedule, p->step);
  rc = first_err(rc, transit(p, prev, (int)p->action));
  open_step(p);
  return rc;
}

int pd_prof_stop(pd_prof_t *p) {
  if (p == NULL) return PD_EINVAL;
  if (p->state != ST_RUNNING) {
    snprintf(p->last_error, sizeof(p->last_error), "pd_prof_stop: profiler not running");
    return PD_ESTATE;
  }
  int rc = close_step(p);
  rc = first_err(rc, transit(p, p->action, ACTION_STOP));
  p->action = PD_SCHED_NONE;
  p->state = ST_STOPPED;
  return rc;
}

void pd_prof_destroy(pd_prof_t *p) {
  if (p == NULL) return;
  if (p->state == ST_RUNNING) (void)pd_prof_stop(p); /* errors have nowhere to go */
  if (p->owns_src) p->src->ops->destroy(p->src);
  pd_ranges_release();
  pd_trace_destroy(p->cycle);
  free(p->trace_dir);
  free(p->worker_name);
  free(p);
  atomic_flag_clear(&g_one_profiler);
}

uint64_t pd_prof_dropped_records(const pd_prof_t *p) {
  if (p == NULL) return 0;
  return p->src->ops->dropped(p->src);
}

int64_t pd_prof_current_step(const pd_prof_t *p) { return p != NULL ? p->step : -1; }

const char *pd_prof_last_error(const pd_prof_t *p) {
  return p != NULL ? p->last_error : g_create_error;
}

int pd_prof_trace_file_path(const pd_prof_t *p, char *buf, size_t buflen) {
  if (p == NULL || buf == NULL || buflen == 0 || p->trace_dir == NULL || p->trace_dir[0] == '\0')
    return PD_EINVAL;
  char worker[300];
  if (p->worker_name != NULL) {
    snprintf(worker, sizeof(worker), "%s", p->worker_name);
  } else {
    char host[256];
    if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    snprintf(worker, sizeof(worker), "%s_%d", host, (int)getpid());
  }
  long long unix_ns = (long long)(pd_clock_now_ns() + pd_clock_unix_offset_ns());
  size_t dl = strlen(p->trace_dir);
  const char *sep = (dl > 0 && p->trace_dir[dl - 1] == '/') ? "" : "/";
  int n = snprintf(buf, buflen, "%s%s%s.%lld.pt.trace.json", p->trace_dir, sep, worker, unix_ns);
  if (n < 0 || (size_t)n >= buflen) {
    buf[0] = '\0';
    return PD_EINVAL;
  }
  return 0;
}

int pd_prof_cost(const pd_prof_t *p, pd_prof_cost_t *total, pd_prof_cost_t *cycle) {
  if (p == NULL) return PD_EINVAL;
  if (total != NULL) {
    /* Transitions of a cycle not closed yet count in the run's total already. */
    *total = p->cost_total;
    total->enable_ms += p->cost_open.enable_ms;
    total->flush_ms += p->cost_open.flush_ms;
    total->parse_ms += p->cost_open.parse_ms;
  }
  if (cycle != NULL) *cycle = p->cost_cycle;
  return 0;
}
