/* analyze_util.c: the analyzer's shared helpers (analyze_internal.h).
 *
 * Launch attribution follows the profiler core's aggregation (src/prof/aggregate.c): per
 * host thread, ops (ranges, torch ops) and API calls are sorted by start, ranges first and
 * outer first on ties; a stack sweep finds the innermost range open when each call begins;
 * a correlation-id map then ties each kernel/copy/set to its call. O(n log n).
 */
#define _GNU_SOURCE
#include "analyze_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- correlation id -> event index ---------------------------------------------------------- */

typedef struct {
  uint64_t *keys; /* 0 = empty: correlation id 0 means "none" */
  int32_t *vals;
  size_t n;       /* power of two */
} cmap_t;

static int cmap_init(cmap_t *m, size_t expected) {
  m->n = 16;
  while (m->n < expected * 2) m->n *= 2;
  m->keys = calloc(m->n, sizeof(*m->keys));
  m->vals = malloc(m->n * sizeof(*m->vals));
  if (m->keys == NULL || m->vals == NULL) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    return PD_ENOMEM;
  }
  return 0;
}

/* First insert wins: a correlation id belongs to one launching call. */
static void cmap_put(cmap_t *m, uint64_t key, int32_t val) {
  size_t j = pd_hash_u64(key) & (m->n - 1);
  while (m->keys[j] != 0) {
    if (m->keys[j] == key) return;
    j = (j + 1) & (m->n - 1);
  }
  m->keys[j] = key;
  m->vals[j] = val;
}

static int32_t cmap_get(const cmap_t *m, uint64_t key) {
  size_t j = pd_hash_u64(key) & (m->n - 1);
  while (m->keys[j] != 0) {
    if (m->keys[j] == key) return m->vals[j];
    j = (j + 1) & (m->n - 1);
  }
  return -1;
}

/* ---- attribution ------------------------------------------------------------------------------ */

typedef struct {
  uint32_t pid, tid;
  int64_t start, end;
  int32_t ev;
  uint8_t is_range;
} hop_t;

static int hop_cmp(const void *pa, const void *pb) {
  const hop_t *a = pa, *b = pb;
  if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  if (a->is_range != b->is_range) return a->is_range ? -1 : 1;
  if (a->end != b->end) return a->end > b->end ? -1 : 1;
  return (a->ev > b->ev) - (a->ev < b->ev);
}

void an_attr_free(an_attr_t *a) {
  if (a == NULL) return;
  free(a->call);
  free(a->op);
  memset(a, 0, sizeof(*a));
}

int an_attr_build(const pd_trace_t *trace, an_attr_t *a) {
  memset(a, 0, sizeof(*a));
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);
  a->n = n;
  a->call = malloc((n ? n : 1) * sizeof(*a->call));
  a->op = malloc((n ? n : 1) * sizeof(*a->op));
  size_t nh = 0, ncalls = 0;
  for (size_t i = 0; i < n; i++) {
    pd_event_kind_t k = ev[i].kind;
    if (k == PD_EVENT_RANGE || k == PD_EVENT_CPU_OP) nh++;
    else if (k == PD_EVENT_RUNTIME || k == PD_EVENT_DRIVER) nh++, ncalls++;
  }
  hop_t *h = malloc((nh ? nh : 1) * sizeof(*h));
  int32_t *stack = malloc((nh ? nh : 1) * sizeof(*stack));
  int32_t *call_op = malloc((n ? n : 1) * sizeof(*call_op)); /* per event: op of a call */
  cmap_t cm = {0};
  if (a->call == NULL || a->op == NULL || h == NULL || stack == NULL || call_op == NULL ||
      cmap_init(&cm, ncalls) != 0) {
    free(h);
    free(stack);
    free(call_op);
    free(cm.keys);
    free(cm.vals);
    an_attr_free(a);
    return PD_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) a->call[i] = a->op[i] = call_op[i] = -1;

  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    pd_event_kind_t k = ev[i].kind;
    bool range = k == PD_EVENT_RANGE || k == PD_EVENT_CPU_OP;
    if (!range && k != PD_EVENT_RUNTIME && k != PD_EVENT_DRIVER) continue;
    h[j].pid = ev[i].pid;
    h[j].tid = ev[i].tid;
    h[j].start = ev[i].start_ns;
    h[j].end = ev[i].end_ns > ev[i].start_ns ? ev[i].end_ns : ev[i].start_ns;
    h[j].ev = (int32_t)i;
    h[j].is_range = range;
    j++;
  }
  qsort(h, nh, sizeof(*h), hop_cmp);
  size_t depth = 0;
  for (size_t i = 0; i < nh; i++) {
    if (i > 0 && (h[i].pid != h[i - 1].pid || h[i].tid != h[i - 1].tid)) depth = 0;
    while (depth > 0 && h[stack[depth - 1]].end <= h[i].start) depth--;
    if (h[i].is_range) {
      stack[depth++] = (int32_t)i;
    } else {
      call_op[h[i].ev] = depth > 0 ? h[stack[depth - 1]].ev : -1;
      if (ev[h[i].ev].correlation_id != 0) cmap_put(&cm, ev[h[i].ev].correlation_id, h[i].ev);
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (!an_is_gpu_activity(ev[i].kind) || ev[i].correlation_id == 0) continue;
    int32_t c = cmap_get(&cm, ev[i].correlation_id);
    if (c < 0) continue;
    a->call[i] = c;
    a->op[i] = call_op[c];
  }
  free(h);
  free(stack);
  free(call_op);
  free(cm.keys);
  free(cm.vals);
  return 0;
}

/* ---- names and numbers ------------------------------------------------------------------------ */

const char *an_event_name(const pd_event_t *ev, char *buf, size_t len) {
  if (ev->kind == PD_EVENT_SYNC && ev->name == NULL) {
    switch (ev->u.sync.sync_kind) {
    case PD_SYNC_EVENT: return "Event Sync";
    case PD_SYNC_STREAM_WAIT_EVENT: return "Stream Wait Event";
    case PD_SYNC_STREAM: return "Stream Sync";
    case PD_SYNC_CONTEXT: return "Context Sync";
    case PD_SYNC_UNKNOWN: return "Unknown Sync";
    }
  }
  const char *s = pd_event_display_name(ev, buf, len);
  return s != NULL ? s : "";
}

void an_fmt_time_d(char *buf, size_t len, double ns) {
  double a = ns < 0 ? -ns : ns;
  if (a >= 1e9) snprintf(buf, len, "%.3f s", ns / 1e9);
  else if (a >= 1e6) snprintf(buf, len, "%.3f ms", ns / 1e6);
  else if (a >= 1e3) snprintf(buf, len, "%.3f us", ns / 1e3);
  else snprintf(buf, len, "%.0f ns", ns);
}

void an_fmt_time(char *buf, size_t len, int64_t ns) {
  an_fmt_time_d(buf, len, (double)ns);
}

void an_fmt_bytes(char *buf, size_t len, double bytes) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double a = bytes < 0 ? -bytes : bytes;
  int u = 0;
  while (a >= 1024.0 && u < 4) {
    a /= 1024.0;
    bytes /= 1024.0;
    u++;
  }
  if (u == 0) snprintf(buf, len, "%.0f B", bytes);
  else snprintf(buf, len, "%.1f %s", bytes, unit[u]);
}

void an_fit(char *buf, size_t len, const char *s, int width) {
  if (s == NULL) s = "";
  size_t n = strlen(s);
  if (width < 4 || n <= (size_t)width) {
    snprintf(buf, len, "%s", s);
    return;
  }
  snprintf(buf, len, "%.*s...", width - 3, s);
}
