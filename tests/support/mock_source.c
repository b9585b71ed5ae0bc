/* mock_source.c: a scripted record source (pd_mock_source.h), CUPTI's behaviour without
 * a GPU: records taken only while enabled, handed over at flush, filtered by the window
 * at collect, drops and callback errors reported at flush, failures on request.
 */
#include "pd_mock_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MOCK_STREAMS 64
#define MOCK_BUFFER_BYTES ((size_t)1 << 20)

typedef struct {
  int64_t start, end;
  uint32_t pid, tid;
} mock_call_t;

struct pd_mock_source {
  pd_record_source_t base;
  pd_device_props_t device;
  bool has_device;
  bool enabled;
  bool attached;
  pd_trace_t *taken; /* records taken, not yet handed over ("inside CUPTI") */
  pd_trace_t *ready; /* handed over by flush, waiting for collect */
  mock_call_t *calls; /* by correlation id - 1 */
  size_t ncalls, calls_cap;
  int64_t stream_free[MOCK_STREAMS]; /* when each stream's last work ends */
  int64_t live_bytes;
  uint64_t drops_pending, errors_pending;
  uint64_t dropped, errors, buffers;
  uint64_t taken_n, ignored_n, collected_n, discarded_n;
  bool census_on;
  pd_api_census_t census; /* counted since the census started */
  int calls_of[PD_MOCK_OP_COUNT];
  int fail_from[PD_MOCK_OP_COUNT]; /* 0: never */
  int fail_rc[PD_MOCK_OP_COUNT];
};

static const char *const op_names[PD_MOCK_OP_COUNT] = {"enable", "disable", "flush", "collect", "detach",
                                                              "census"};

static pd_mock_source_t *mock_of(const pd_record_source_t *s) { return s->impl; }

/* Counts a call of op; returns its scripted failure (0: none) and says so in err. */
static int op_call(pd_mock_source_t *m, pd_mock_op_t op, char *err, size_t errlen) {
  int n = ++m->calls_of[op];
  if (m->fail_from[op] == 0 || n < m->fail_from[op]) return 0;
  if (err != NULL && errlen > 0) snprintf(err, errlen, "mock source: %s failed (scripted)", op_names[op]);
  return m->fail_rc[op];
}

/* ---- the record-source interface ----------------------------------------------------------- */

static int mock_enable(pd_record_source_t *s, char *err, size_t errlen) {
  pd_mock_source_t *m = mock_of(s);
  int rc = op_call(m, PD_MOCK_ENABLE, err, errlen);
  if (rc != 0) return rc;
  m->enabled = true;
  m->attached = true;
  return 0;
}

static int mock_disable(pd_record_source_t *s, char *err, size_t errlen) {
  pd_mock_source_t *m = mock_of(s);
  int rc = op_call(m, PD_MOCK_DISABLE, err, errlen);
  m->enabled = false; /* as CUPTI: a failed disable still leaves nothing recorded */
  return rc;
}

static int mock_flush(pd_record_source_t *s, bool forced, char *err, size_t errlen) {
  pd_mock_source_t *m = mock_of(s);
  int rc = op_call(m, PD_MOCK_FLUSH, err, errlen);
  if (rc != 0) return rc;
  const pd_event_t *ev = pd_trace_events(m->taken);
  size_t n = pd_trace_count(m->taken);
  for (size_t i = 0; i < n; i++) {
    rc = pd_trace_add(m->ready, &ev[i]);
    if (rc != 0) return rc;
  }
  if (n > 0) m->buffers++;
  pd_trace_reset(m->taken);
  m->dropped += m->drops_pending;
  m->errors += m->errors_pending;
  m->drops_pending = m->errors_pending = 0;
  return 0;
}

static int64_t mock_collect(pd_record_source_t *s, pd_trace_t *out, int64_t window_start_ns) {
  pd_mock_source_t *m = mock_of(s);
  int rc = op_call(m, PD_MOCK_COLLECT, NULL, 0);
  if (rc != 0) return rc;
  const pd_event_t *ev = pd_trace_events(m->ready);
  size_t n = pd_trace_count(m->ready);
  int64_t added = 0;
  if (out == NULL) {
    m->discarded_n += n;
  } else {
    /* As the CUPTI source: everything added, then the window's rule (pd_trace_clip_window). */
    const size_t first = pd_trace_count(out);
    for (size_t i = 0; i < n; i++) {
      rc = pd_trace_add(out, &ev[i]);
      if (rc != 0) return rc;
    }
    const int64_t dropped = pd_trace_clip_window(out, first, window_start_ns);
    if (dropped < 0) return dropped;
    added = (int64_t)n - dropped;
    m->discarded_n += (uint64_t)dropped;
  }
  m->collected_n += (uint64_t)added;
  pd_trace_reset(m->ready);
  return added;
}

static int mock_detach(pd_record_source_t *s, char *err, size_t errlen) {
  pd_mock_source_t *m = mock_of(s);
  int rc = op_call(m, PD_MOCK_DETACH, err, errlen);
  if (rc != 0) return rc;
  m->attached = false;
  return 0;
}

static int mock_census(pd_record_source_t *s, bool on, pd_api_census_t *out, char *err, size_t errlen) {
  pd_mock_source_t *m = mock_of(s);
  if (out != NULL) *out = (pd_api_census_t){0};
  int rc = op_call(m, PD_MOCK_CENSUS, err, errlen);
  if (rc != 0) {
    m->census_on = false;
    return rc;
  }
  if (!on && out != NULL) *out = m->census;
  m->census = (pd_api_census_t){0};
  m->census_on = on;
  return 0;
}

static const pd_device_props_t *mock_device(const pd_record_source_t *s) {
  const pd_mock_source_t *m = mock_of(s);
  return m->has_device ? &m->device : NULL;
}

static uint64_t mock_dropped(const pd_record_source_t *s) { return mock_of(s)->dropped; }
static uint64_t mock_errors(const pd_record_source_t *s) { return mock_of(s)->errors; }
static uint64_t mock_buffers(const pd_record_source_t *s) { return mock_of(s)->buffers; }
static size_t mock_buffer_bytes(const pd_record_source_t *s) { return MOCK_BUFFER_BYTES; }
static void mock_destroy(pd_record_source_t *s) { pd_mock_source_destroy(mock_of(s)); }

static const pd_record_source_ops_t mock_ops = {
    .name = "mock source",
    .enable = mock_enable,
    .disable = mock_disable,
    .flush = mock_flush,
    .collect = mock_collect,
    .detach = mock_detach,
    .device = mock_device,
    .dropped = mock_dropped,
    .errors = mock_errors,
    .buffers = mock_buffers,
    .buffer_bytes = mock_buffer_bytes,
    .destroy = mock_destroy,
    .census = mock_census,
};

/* ---- making and scripting ------------------------------------------------------------------ */

pd_mock_source_t *pd_mock_source_create(void) {
  pd_mock_source_t *m = calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->taken = pd_trace_create();
  m->ready = pd_trace_create();
  if (m->taken == NULL || m->ready == NULL) {
    pd_mock_source_destroy(m);
    return NULL;
  }
  m->base.ops = &mock_ops;
  m->base.impl = m;
  m->has_device = true;
  pd_device_props_t *d = &m->device;
  snprintf(d->name, sizeof d->name, "Mock GPU");
  d->total_global_mem = (uint64_t)80 << 30;
  d->compute_major = 9;
  d->num_sms = 132;
  d->max_threads_per_block = 1024;
  d->max_threads_per_sm = 2048;
  d->max_regs_per_block = 65536;
  d->max_regs_per_sm = 65536;
  d->max_shared_mem_per_block = 49152;
  d->max_shared_mem_per_sm = 233472;
  d->warp_size = 32;
  d->max_blocks_per_sm = 32;
  return m;
}

void pd_mock_source_destroy(pd_mock_source_t *m) {
  if (m == NULL) return;
  pd_trace_destroy(m->taken);
  pd_trace_destroy(m->ready);
  free(m->calls);
  free(m);
}

pd_record_source_t *pd_mock_source_base(pd_mock_source_t *m) { return m != NULL ? &m->base : NULL; }

void pd_mock_source_set_device(pd_mock_source_t *m, const pd_device_props_t *dev) {
  m->has_device = dev != NULL;
  if (dev != NULL) m->device = *dev;
}

int pd_mock_source_record(pd_mock_source_t *m, const pd_event_t *ev) {
  if (!m->enabled) {
    m->ignored_n++;
    return 0;
  }
  int rc = pd_trace_add(m->taken, ev);
  if (rc != 0) return rc;
  m->taken_n++;
  return 1;
}

static void spin_until(int64_t t) {
  while (pd_clock_now_ns() < t) {
  }
}

uint64_t pd_mock_source_call(pd_mock_source_t *m, const char *api, int64_t call_ns) {
  if (m->ncalls == m->calls_cap) {
    size_t cap = m->calls_cap ? 2 * m->calls_cap : 256;
    mock_call_t *grown = realloc(m->calls, cap * sizeof(*grown));
    if (grown == NULL) return 0;
    m->calls = grown;
    m->calls_cap = cap;
  }
  mock_call_t *c = &m->calls[m->ncalls++];
  c->pid = (uint32_t)getpid();
  c->tid = (uint32_t)syscall(SYS_gettid);
  c->start = pd_clock_now_ns();
  spin_until(c->start + call_ns);
  c->end = pd_clock_now_ns();
  const uint64_t corr = (uint64_t)m->ncalls;
  const bool driver = strncmp(api, "cu", 2) == 0 && strncmp(api, "cuda", 4) != 0;
  pd_event_t ev = {.kind = driver ? PD_EVENT_DRIVER : PD_EVENT_RUNTIME,
                   .start_ns = c->start,
                   .end_ns = c->end,
                   .correlation_id = corr,
                   .name = api,
                   .pid = c->pid,
                   .tid = c->tid};
  if (pd_mock_source_record(m, &ev) == 1 && m->census_on) m->census.recorded++;
  return corr;
}

void pd_mock_source_unrecorded_call(pd_mock_source_t *m, bool driver) {
  if (!m->enabled || !m->census_on) return;
  if (driver)
    m->census.driver_unrecorded++;
  else
    m->census.runtime_unrecorded++;
}

static const mock_call_t *call_of(const pd_mock_source_t *m, uint64_t corr) {
  return corr >= 1 && corr <= m->ncalls ? &m->calls[corr - 1] : NULL;
}

/* GPU work of a call: starts when the call has ended and the stream is free. */
static int gpu_work(pd_mock_source_t *m, pd_event_t *ev, uint64_t corr, uint32_t stream, int64_t gpu_ns) {
  const mock_call_t *c = call_of(m, corr);
  if (c == NULL) return PD_EINVAL;
  int64_t *free_at = &m->stream_free[stream % MOCK_STREAMS];
  ev->start_ns = c->end > *free_at ? c->end : *free_at;
  ev->end_ns = ev->start_ns + gpu_ns;
  ev->correlation_id = corr;
  ev->context = 1;
  ev->stream = stream;
  *free_at = ev->end_ns;
  return pd_mock_source_record(m, ev);
}

int pd_mock_source_kernel(pd_mock_source_t *m, uint64_t corr, uint32_t stream, const char *name, int64_t gpu_ns) {
  pd_event_t ev = {.kind = PD_EVENT_KERNEL, .name = name};
  ev.u.kernel.grid[0] = 128, ev.u.kernel.grid[1] = 1, ev.u.kernel.grid[2] = 1;
  ev.u.kernel.block[0] = 256, ev.u.kernel.block[1] = 1, ev.u.kernel.block[2] = 1;
  ev.u.kernel.registers_per_thread = 40;
  ev.u.kernel.static_smem_bytes = 4096;
  return gpu_work(m, &ev, corr, stream, gpu_ns);
}

int pd_mock_source_memcpy(pd_mock_source_t *m, uint64_t corr, uint32_t stream, pd_memcpy_kind_t kind,
                          uint64_t bytes, int64_t gpu_ns) {
  pd_event_t ev = {.kind = PD_EVENT_MEMCPY, .name = NULL};
  ev.u.memcpy.bytes = bytes;
  ev.u.memcpy.copy_kind = kind;
  ev.u.memcpy.src_kind = kind == PD_MEMCPY_HTOD ? PD_MEM_PINNED : PD_MEM_DEVICE;
  ev.u.memcpy.dst_kind = kind == PD_MEMCPY_DTOH ? PD_MEM_PAGEABLE : PD_MEM_DEVICE;
  return gpu_work(m, &ev, corr, stream, gpu_ns);
}

int pd_mock_source_memset(pd_mock_source_t *m, uint64_t corr, uint32_t stream, uint64_t bytes, int64_t gpu_ns) {
  pd_event_t ev = {.kind = PD_EVENT_MEMSET, .name = NULL};
  ev.u.memset.bytes = bytes;
  ev.u.memset.dst_kind = PD_MEM_DEVICE;
  return gpu_work(m, &ev, corr, stream, gpu_ns);
}

int pd_mock_source_sync(pd_mock_source_t *m, uint64_t corr, pd_sync_kind_t kind) {
  const mock_call_t *c = call_of(m, corr);
  if (c == NULL) return PD_EINVAL;
  /* CUPTI gives a SYNC record no thread; the CUPTI source fills it from the call. */
  pd_event_t ev = {.kind = PD_EVENT_SYNC,
                   .start_ns = c->start + (c->end - c->start) / 8,
                   .end_ns = c->end - (c->end - c->start) / 8,
                   .correlation_id = corr,
                   .pid = c->pid,
                   .tid = c->tid,
                   .context = 1};
  ev.u.sync.sync_kind = kind;
  return pd_mock_source_record(m, &ev);
}

int pd_mock_source_memory(pd_mock_source_t *m, uint64_t corr, uint64_t address, int64_t bytes) {
  const mock_call_t *c = call_of(m, corr);
  if (c == NULL) return PD_EINVAL;
  m->live_bytes += bytes;
  pd_event_t ev = {.kind = PD_EVENT_MEMORY,
                   .start_ns = c->start + (c->end - c->start) / 2,
                   .correlation_id = corr,
                   .pid = c->pid,
                   .tid = c->tid};
  ev.end_ns = ev.start_ns;
  ev.u.memory.address = address;
  ev.u.memory.bytes = bytes;
  ev.u.memory.total_allocated = m->live_bytes;
  ev.u.memory.mem_kind = PD_MEM_DEVICE;
  return pd_mock_source_record(m, &ev);
}

void pd_mock_source_drop(pd_mock_source_t *m, uint64_t records) { m->drops_pending += records; }

void pd_mock_source_error(pd_mock_source_t *m, uint64_t count) { m->errors_pending += count; }

void pd_mock_source_fail(pd_mock_source_t *m, pd_mock_op_t op, int first_call, int rc) {
  m->fail_from[op] = rc != 0 ? first_call : 0;
  m->fail_rc[op] = rc;
}

int pd_mock_source_calls(const pd_mock_source_t *m, pd_mock_op_t op) { return m->calls_of[op]; }
uint64_t pd_mock_source_taken(const pd_mock_source_t *m) { return m->taken_n; }
uint64_t pd_mock_source_ignored(const pd_mock_source_t *m) { return m->ignored_n; }
uint64_t pd_mock_source_collected(const pd_mock_source_t *m) { return m->collected_n; }
uint64_t pd_mock_source_discarded(const pd_mock_source_t *m) { return m->discarded_n; }
bool pd_mock_source_enabled(const pd_mock_source_t *m) { return m->enabled; }
