/* trace.c: the pd_trace_t container (pd_event.h).
 *
 * A growable array of events, a string pool with interning (an open-addressing hash
 * set over strings kept in chunked arenas, so a string's address never moves while the
 * trace lives), the device list and the dropped-record count. Also the event-kind
 * table's category strings. Sorting is a stable merge sort by start time: events with
 * equal starts keep their insertion order, which the aggregation relies on (a range and
 * a call that begin on the same nanosecond stay parent-first).
 */
#include "pd/pd_event.h"

#include "corr_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- event kinds ------------------------------------------------------------------ */

static const char *const kind_category[PD_EVENT_KIND_COUNT] = {
#define PD_KIND_CAT_GEN(name, cat) cat,
    PD_EVENT_KIND_MAP(PD_KIND_CAT_GEN)
#undef PD_KIND_CAT_GEN
};

const char *pd_event_kind_category(pd_event_kind_t kind) {
  if ((int)kind < 0 || kind >= PD_EVENT_KIND_COUNT) return "unknown";
  return kind_category[kind];
}

int pd_event_kind_from_category(const char *cat) {
  if (cat == NULL) return -1;
  for (int k = 0; k < PD_EVENT_KIND_COUNT; k++)
    if (strcmp(kind_category[k], cat) == 0) return k;
  return -1;
}

bool pd_api_name_is_driver(const char *name) {
  return name != NULL && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

bool pd_api_name_is_driver_launch(const char *name) {
  return pd_api_name_is_driver(name) &&
         (strncmp(name, "cuLaunchKernel", 14) == 0 || strncmp(name, "cuLaunchCooperativeKernel", 25) == 0 ||
          strncmp(name, "cuGraphLaunch", 13) == 0);
}

/* ---- string pool --------------------------------------------------------------------- */

/* Strings live in arena chunks; a chunk is never moved or freed before reset/destroy,
 * so interned pointers stay valid while events are added. */
typedef struct pool_chunk {
  struct pool_chunk *next;
  size_t used;
  size_t cap;
  char data[];
} pool_chunk_t;

#define POOL_CHUNK_BYTES (64u * 1024u)

struct pd_trace {
  pd_event_t *events;
  size_t count;
  size_t cap;

  /* hash set of interned strings: slots hold pointers into the chunks, NULL = empty */
  const char **slots;
  size_t nslots; /* power of two, or 0 before the first intern */
  size_t nstrings;
  pool_chunk_t *chunks; /* newest first */

  pd_device_props_t *devices;
  size_t ndevices;
  size_t devcap;

  uint64_t dropped;
  double calib_ns_per_call, calib_ns_per_range; /* < 0: not calibrated */
  char step_range[PD_TRACE_STEP_RANGE_MAX];     /* "": none (pd_trace_set_step_range) */
};

pd_trace_t *pd_trace_create(void) {
  pd_trace_t *t = calloc(1, sizeof(pd_trace_t));
  if (t != NULL) t->calib_ns_per_call = t->calib_ns_per_range = -1.0;
  return t;
}

static void pool_free_chunks(pool_chunk_t *c) {
  while (c != NULL) {
    pool_chunk_t *next = c->next;
    free(c);
    c = next;
  }
}

void pd_trace_destroy(pd_trace_t *trace) {
  if (trace == NULL) return;
  free(trace->events);
  free(trace->slots);
  pool_free_chunks(trace->chunks);
  free(trace->devices);
  free(trace);
}

void pd_trace_reset(pd_trace_t *trace) {
  if (trace == NULL) return;
  trace->count = 0;
  trace->ndevices = 0;
  trace->dropped = 0;
  trace->calib_ns_per_call = trace->calib_ns_per_range = -1.0;
  trace->step_range[0] = '\0';
  if (trace->slots != NULL) memset(trace->slots, 0, trace->nslots * sizeof(*trace->slots));
  trace->nstrings = 0;
  /* Keep the newest chunk (the usual case: one cycle's strings fit in a few chunks);
   * free older ones so a single huge cycle does not pin its memory forever. */
  if (trace->chunks != NULL) {
    pool_free_chunks(trace->chunks->next);
    trace->chunks->next = NULL;
    trace->chunks->used = 0;
  }
}

static uint64_t str_hash(const char *s, size_t len) { return pd_hash_bytes(s, len, 0); }

static int pool_grow_slots(pd_trace_t *t) {
  size_t n = t->nslots ? t->nslots * 2 : 256;
  const char **slots = calloc(n, sizeof(*slots));
  if (slots == NULL) return PD_ENOMEM;
  for (size_t i = 0; i < t->nslots; i++) {
    const char *s = t->slots[i];
    if (s == NULL) continue;
    size_t j = str_hash(s, strlen(s)) & (n - 1);
    while (slots[j] != NULL) j = (j + 1) & (n - 1);
    slots[j] = s;
  }
  free(t->slots);
  t->slots = slots;
  t->nslots = n;
  return 0;
}

static char *pool_alloc(pd_trace_t *t, size_t bytes) {
  pool_chunk_t *c = t->chunks;
  if (c == NULL || c->cap - c->used < bytes) {
    size_t cap = bytes > POOL_CHUNK_BYTES ? bytes : POOL_CHUNK_BYTES;
    pool_chunk_t *n = malloc(sizeof(pool_chunk_t) + cap);
    if (n == NULL) return NULL;
    n->used = 0;
    n->cap = cap;
    /* A big one-off string gets its own chunk behind the current one, so the current
     * chunk's free space is not abandoned. */
    if (c != NULL && bytes > POOL_CHUNK_BYTES) {
      n->next = c->next;
      c->next = n;
    } else {
      n->next = c;
      t->chunks = n;
    }
    c = n;
  }
  char *p = c->data + c->used;
  c->used += bytes;
  return p;
}

const char *pd_trace_intern(pd_trace_t *trace, const char *s) {
  if (trace == NULL || s == NULL) return NULL;
  /* keep the load factor under 1/2 so probes stay short */
  if ((trace->nstrings + 1) * 2 > trace->nslots && pool_grow_slots(trace) != 0) return NULL;
  size_t len = strlen(s);
  size_t mask = trace->nslots - 1;
  size_t j = str_hash(s, len) & mask;
  while (trace->slots[j] != NULL) {
    if (strcmp(trace->slots[j], s) == 0) return trace->slots[j];
    j = (j + 1) & mask;
  }
  char *copy = pool_alloc(trace, len + 1);
  if (copy == NULL) return NULL;
  memcpy(copy, s, len + 1);
  trace->slots[j] = copy;
  trace->nstrings++;
  return copy;
}

/* ---- events -------------------------------------------------------------------------- */

static bool kind_has_shape(pd_event_kind_t k) {
  return k == PD_EVENT_RANGE || k == PD_EVENT_CPU_OP;
}

int pd_trace_add(pd_trace_t *trace, const pd_event_t *ev) {
  if (trace == NULL || ev == NULL) return PD_EINVAL;
  /* Copy first: ev may point into this trace's own array, which realloc may move. */
  pd_event_t copy = *ev;
  if (trace->count == trace->cap) {
    size_t cap = trace->cap ? trace->cap * 2 : 1024;
    pd_event_t *events = realloc(trace->events, cap * sizeof(*events));
    if (events == NULL) return PD_ENOMEM;
    trace->events = events;
    trace->cap = cap;
  }
  if (copy.name != NULL && (copy.name = pd_trace_intern(trace, copy.name)) == NULL)
    return PD_ENOMEM;
  if (kind_has_shape(copy.kind) && copy.u.range.shape != NULL &&
      (copy.u.range.shape = pd_trace_intern(trace, copy.u.range.shape)) == NULL)
    return PD_ENOMEM;
  if (kind_has_shape(copy.kind) && copy.u.range.stack != NULL &&
      (copy.u.range.stack = pd_trace_intern(trace, copy.u.range.stack)) == NULL)
    return PD_ENOMEM;
  trace->events[trace->count++] = copy;
  return 0;
}

size_t pd_trace_count(const pd_trace_t *trace) {
  return trace ? trace->count : 0;
}

const pd_event_t *pd_trace_events(const pd_trace_t *trace) {
  return trace ? trace->events : NULL;
}

pd_event_t *pd_trace_events_mut(pd_trace_t *trace) {
  return trace ? trace->events : NULL;
}

static bool is_gpu_work(const pd_event_t *ev) {
  return ev->kind == PD_EVENT_KERNEL || ev->kind == PD_EVENT_MEMCPY || ev->kind == PD_EVENT_MEMSET;
}

static bool is_early_call(const pd_event_t *ev, int64_t window_start_ns) {
  return ev->start_ns < window_start_ns && (ev->kind == PD_EVENT_RUNTIME || ev->kind == PD_EVENT_DRIVER) &&
         ev->correlation_id != 0;
}

int64_t pd_trace_clip_window(pd_trace_t *trace, size_t from, int64_t window_start_ns) {
  if (trace == NULL) return PD_EINVAL;
  if (from >= trace->count) return 0;
  size_t nearly = 0;
  for (size_t i = from; i < trace->count; i++) nearly += is_early_call(&trace->events[i], window_start_ns);
  pd_corr_map_t early = {0};
  if (nearly > 0 && pd_corr_map_init(&early, nearly) != 0) {
    pd_corr_map_free(&early);
    return PD_ENOMEM;
  }
  for (size_t i = from; i < trace->count; i++)
    if (is_early_call(&trace->events[i], window_start_ns)) pd_corr_map_put(&early, trace->events[i].correlation_id, 0);
  size_t keep = from;
  for (size_t i = from; i < trace->count; i++) {
    const pd_event_t *ev = &trace->events[i];
    if (ev->start_ns < window_start_ns) continue;
    if (nearly > 0 && is_gpu_work(ev) && pd_corr_map_get(&early, ev->correlation_id) >= 0) continue;
    if (keep != i) trace->events[keep] = trace->events[i];
    keep++;
  }
  pd_corr_map_free(&early);
  const int64_t removed = (int64_t)(trace->count - keep);
  trace->count = keep;
  return removed;
}

/* Bottom-up merge sort: stable, O(n log n), one scratch array. Taking from the left run
 * on ties is what keeps it stable. */
void pd_trace_sort(pd_trace_t *trace) {
  if (trace == NULL || trace->count < 2) return;
  size_t n = trace->count;
  pd_event_t *a = trace->events;
  size_t i;
  for (i = 1; i < n; i++)
    if (a[i].start_ns < a[i - 1].start_ns) break;
  if (i == n) return; /* already sorted: the common case for one source */

  pd_event_t *tmp = malloc(n * sizeof(*tmp));
  if (tmp == NULL) {
    /* No scratch memory: fall back to insertion sort, still stable, just slower. */
    for (i = 1; i < n; i++) {
      pd_event_t x = a[i];
      size_t j = i;
      while (j > 0 && a[j - 1].start_ns > x.start_ns) {
        a[j] = a[j - 1];
        j--;
      }
      a[j] = x;
    }
    return;
  }
  pd_event_t *src = a, *dst = tmp;
  for (size_t width = 1; width < n; width *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * width) {
      size_t mid = lo + width < n ? lo + width : n;
      size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      size_t l = lo, r = mid, k = lo;
      while (l < mid && r < hi) dst[k++] = (src[r].start_ns < src[l].start_ns) ? src[r++] : src[l++];
      while (l < mid) dst[k++] = src[l++];
      while (r < hi) dst[k++] = src[r++];
    }
    pd_event_t *swap = src;
    src = dst;
    dst = swap;
  }
  if (src != a) memcpy(a, src, n * sizeof(*a));
  free(tmp);
}

/* ---- devices, dropped count ------------------------------------------------------------ */

int pd_trace_add_device(pd_trace_t *trace, const pd_device_props_t *props) {
  if (trace == NULL || props == NULL) return PD_EINVAL;
  if (trace->ndevices == trace->devcap) {
    size_t cap = trace->devcap ? trace->devcap * 2 : 4;
    pd_device_props_t *d = realloc(trace->devices, cap * sizeof(*d));
    if (d == NULL) return PD_ENOMEM;
    trace->devices = d;
    trace->devcap = cap;
  }
  trace->devices[trace->ndevices++] = *props;
  return 0;
}

size_t pd_trace_device_count(const pd_trace_t *trace) {
  return trace ? trace->ndevices : 0;
}

const pd_device_props_t *pd_trace_devices(const pd_trace_t *trace) {
  return trace ? trace->devices : NULL;
}

void pd_trace_set_dropped(pd_trace_t *trace, uint64_t dropped) {
  if (trace != NULL) trace->dropped = dropped;
}

uint64_t pd_trace_dropped(const pd_trace_t *trace) {
  return trace ? trace->dropped : 0;
}

void pd_trace_set_calibration(pd_trace_t *trace, double ns_per_call, double ns_per_range) {
  if (trace == NULL) return;
  /* a figure outside 0 .. 1 ms per event is no calibration */
  bool ok = ns_per_call >= 0 && ns_per_call <= 1e6 && ns_per_range >= 0 && ns_per_range <= 1e6;
  trace->calib_ns_per_call = ok ? ns_per_call : -1.0;
  trace->calib_ns_per_range = ok ? ns_per_range : -1.0;
}

bool pd_trace_calibration(const pd_trace_t *trace, double *ns_per_call, double *ns_per_range) {
  if (trace == NULL || !(trace->calib_ns_per_call >= 0)) return false;
  if (ns_per_call != NULL) *ns_per_call = trace->calib_ns_per_call;
  if (ns_per_range != NULL) *ns_per_range = trace->calib_ns_per_range;
  return true;
}

void pd_trace_set_step_range(pd_trace_t *trace, const char *name) {
  if (trace == NULL) return;
  size_t n = name != NULL ? strlen(name) : 0;
  if (n >= sizeof trace->step_range) n = 0;
  memcpy(trace->step_range, name != NULL ? name : "", n);
  trace->step_range[n] = '\0';
}

const char *pd_trace_step_range(const pd_trace_t *trace) {
  return trace != NULL && trace->step_range[0] != '\0' ? trace->step_range : NULL;
}

/* ---- display names (Kineto's, so our traces and torch's group the same way) ---------- */

const char *pd_memcpy_kind_name(pd_memcpy_kind_t k) {
  switch (k) {
  case PD_MEMCPY_HTOD: return "HtoD";
  case PD_MEMCPY_DTOH: return "DtoH";
  case PD_MEMCPY_DTOD: return "DtoD";
  case PD_MEMCPY_HTOH: return "HtoH";
  case PD_MEMCPY_PTOP: return "PtoP";
  case PD_MEMCPY_UNKNOWN: break;
  }
  return "Unknown";
}

const char *pd_mem_kind_name(pd_mem_kind_t k) {
  switch (k) {
  case PD_MEM_PAGEABLE: return "Pageable";
  case PD_MEM_PINNED: return "Pinned";
  case PD_MEM_DEVICE: return "Device";
  case PD_MEM_MANAGED: return "Managed";
  case PD_MEM_UNKNOWN: break;
  }
  return "Unknown";
}

const char *pd_event_display_name(const pd_event_t *ev, char *buf, size_t buflen) {
  if (ev == NULL) return "";
  /* Records whose kinds are known always get Kineto's name, whatever the source put in
   * name, so that copies group the same way in our tables and in torch's. */
  bool known = (ev->kind == PD_EVENT_MEMCPY && ev->u.memcpy.copy_kind != PD_MEMCPY_UNKNOWN) ||
               (ev->kind == PD_EVENT_MEMSET && ev->u.memset.dst_kind != PD_MEM_UNKNOWN);
  if (!known && ev->name != NULL) return ev->name;
  if (buf == NULL || buflen == 0) return ev->name ? ev->name : "";
  if (ev->kind == PD_EVENT_MEMCPY) {
    snprintf(buf, buflen, "Memcpy %s (%s -> %s)", pd_memcpy_kind_name(ev->u.memcpy.copy_kind),
             pd_mem_kind_name(ev->u.memcpy.src_kind), pd_mem_kind_name(ev->u.memcpy.dst_kind));
    return buf;
  }
  if (ev->kind == PD_EVENT_MEMSET) {
    snprintf(buf, buflen, "Memset (%s)", pd_mem_kind_name(ev->u.memset.dst_kind));
    return buf;
  }
  return "";
}
