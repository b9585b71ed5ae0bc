/* trace_links.c: External id links and gpu_user_annotation spans (trace_links.h).
 *
 * Ranges are kept in one array for the whole trace; a thread's open ranges are a chain of
 * parent indices from the thread's top, so popping a closed range is following its
 * parent. Two hash maps (thread -> top range, correlation id -> range of the launching
 * call) and one span table keyed by (range, device, stream) are all the state; the range
 * names live in a pd_trace_t used as a string pool.
 */
#include "trace_links.h"

#include <stdlib.h>
#include <string.h>

#include "pd/pd_classify.h"

/* ---- u64 -> int64 map (open addressing; key 0 kept aside) -------------------------------- */

typedef struct {
  uint64_t *keys;
  int64_t *vals;
  size_t cap, used;
  bool has_zero;
  int64_t zero_val;
} map_t;

static bool map_get(const map_t *m, uint64_t k, int64_t *v) {
  if (k == 0) {
    if (m->has_zero) *v = m->zero_val;
    return m->has_zero;
  }
  if (m->cap == 0) return false;
  for (size_t j = pd_hash_u64(k) & (m->cap - 1); m->keys[j] != 0; j = (j + 1) & (m->cap - 1)) {
    if (m->keys[j] == k) {
      *v = m->vals[j];
      return true;
    }
  }
  return false;
}

static int map_grow(map_t *m) {
  size_t cap = m->cap ? m->cap * 2 : 256;
  uint64_t *keys = calloc(cap, sizeof(*keys));
  int64_t *vals = malloc(cap * sizeof(*vals));
  if (keys == NULL || vals == NULL) {
    free(keys);
    free(vals);
    return PD_ENOMEM;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (m->keys[i] == 0) continue;
    size_t j = pd_hash_u64(m->keys[i]) & (cap - 1);
    while (keys[j] != 0) j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i];
    vals[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = keys;
  m->vals = vals;
  m->cap = cap;
  return 0;
}

static int map_put(map_t *m, uint64_t k, int64_t v) {
  if (k == 0) {
    m->has_zero = true;
    m->zero_val = v;
    return 0;
  }
  if ((m->used + 1) * 2 > m->cap && map_grow(m) != 0) return PD_ENOMEM;
  size_t j = pd_hash_u64(k) & (m->cap - 1);
  while (m->keys[j] != 0 && m->keys[j] != k) j = (j + 1) & (m->cap - 1);
  if (m->keys[j] == 0) m->used++;
  m->keys[j] = k;
  m->vals[j] = v;
  return 0;
}

static void map_free(map_t *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof(*m));
}

/* ---- the links -------------------------------------------------------------------------------- */

typedef struct {
  int64_t end_ns;
  uint64_t ext_id;
  int32_t parent; /* enclosing range on the same thread, -1 none */
  bool spans;     /* gets gpu_user_annotation spans */
  const char *name;
} range_t;

typedef struct {
  int32_t range;
  uint32_t device, stream;
  int64_t start_ns, end_ns; /* end_ns: padded */
  int64_t work_end_ns;      /* the end of the last activity it holds: the least end */
  int64_t limit_ns;         /* start of the activity of another range after its own: the most end */
} span_t;

typedef struct {
  pd_fwd_range_t at;
  const char *module; /* the name before ".forward", interned */
  size_t len;
  int64_t prev; /* the forward of the same key before this one, not yet taken; -1 none */
} fwd_t;

struct pd_links {
  pd_trace_t *pool; /* string pool for range names */
  range_t *ranges;
  size_t nranges, rcap;
  map_t rows; /* (pid << 32 | tid) -> index of the thread's innermost range, -1 none */
  map_t corr; /* correlation id -> range index of the launching call */
  map_t last; /* (device << 32 | stream) -> range index of the row's latest activity */
  span_t *spans;
  size_t nspans, scap;
  int32_t *slots; /* span table: index into spans, -1 empty */
  size_t nslots;
  pd_gpu_span_t *out;
  map_t fwd;          /* hash of (process, module name) -> latest untaken forward, -1 none */
  fwd_t *fwds;
  size_t nfwds, fcap;
  uint64_t next_ext;
  int err;
};

pd_links_t *pd_links_create(void) {
  pd_links_t *l = calloc(1, sizeof(*l));
  if (l == NULL) return NULL;
  l->pool = pd_trace_create();
  if (l->pool == NULL) {
    free(l);
    return NULL;
  }
  return l;
}

void pd_links_destroy(pd_links_t *l) {
  if (l == NULL) return;
  pd_trace_destroy(l->pool);
  free(l->ranges);
  map_free(&l->rows);
  map_free(&l->corr);
  map_free(&l->last);
  map_free(&l->fwd);
  free(l->fwds);
  free(l->spans);
  free(l->slots);
  free(l->out);
  free(l);
}

int pd_links_error(const pd_links_t *l) { return l ? l->err : PD_EINVAL; }

static void fail(pd_links_t *l, int rc) {
  if (l->err == 0) l->err = rc;
}

static uint64_t row_key(const pd_event_t *ev) { return ((uint64_t)ev->pid << 32) | ev->tid; }

/* The innermost range still open on ev's thread at ev's start (-1: none); ranges that
 * ended are popped from the thread's chain. */
static int32_t open_top(pd_links_t *l, const pd_event_t *ev) {
  int64_t top = -1;
  if (!map_get(&l->rows, row_key(ev), &top)) return -1;
  int32_t t = (int32_t)top;
  while (t >= 0 && l->ranges[t].end_ns <= ev->start_ns) t = l->ranges[t].parent;
  if (t != (int32_t)top && map_put(&l->rows, row_key(ev), t) != 0) fail(l, PD_ENOMEM);
  return t;
}

uint64_t pd_links_range(pd_links_t *l, const pd_event_t *ev) {
  if (l == NULL || ev == NULL) return 0;
  int32_t parent = open_top(l, ev);
  if (l->nranges == l->rcap) {
    size_t cap = l->rcap ? l->rcap * 2 : 256;
    range_t *r = realloc(l->ranges, cap * sizeof(*r));
    if (r == NULL) {
      fail(l, PD_ENOMEM);
      return 0;
    }
    l->ranges = r;
    l->rcap = cap;
  }
  range_t *r = &l->ranges[l->nranges];
  r->end_ns = ev->end_ns > ev->start_ns ? ev->end_ns : ev->start_ns;
  r->ext_id = ++l->next_ext;
  r->parent = parent;
  r->spans = ev->kind == PD_EVENT_RANGE && ev->u.range.step < 0 && !pd_range_is_data_wait(ev->name);
  r->name = pd_trace_intern(l->pool, ev->name ? ev->name : "");
  if (r->name == NULL || map_put(&l->rows, row_key(ev), (int64_t)l->nranges) != 0) {
    fail(l, PD_ENOMEM);
    return 0;
  }
  l->nranges++;
  return r->ext_id;
}

uint64_t pd_links_call(pd_links_t *l, const pd_event_t *ev) {
  if (l == NULL || ev == NULL) return 0;
  int32_t top = open_top(l, ev);
  if (top < 0) return 0;
  if (ev->correlation_id != 0 && map_put(&l->corr, ev->correlation_id, top) != 0) fail(l, PD_ENOMEM);
  return l->ranges[top].ext_id;
}

/* ---- forward/backward pairs ----------------------------------------------------------------- */

#define FWD_SUFFIX ".forward"
#define BWD_SUFFIX ".backward"

/* Length of the module name when name ends with suffix after at least one character. */
static size_t module_len(const char *name, const char *suffix) {
  if (name == NULL) return 0;
  size_t n = strlen(name), k = strlen(suffix);
  return n > k && strcmp(name + n - k, suffix) == 0 ? n - k : 0;
}

static uint64_t module_key(uint32_t pid, const char *module, size_t len) {
  return pd_hash_u64(pd_hash_bytes(module, len, pid));
}

bool pd_links_fwdbwd(pd_links_t *l, const pd_event_t *ev, uint64_t ext_id, pd_fwd_range_t *fwd) {
  if (l == NULL || ev == NULL || fwd == NULL || ev->kind != PD_EVENT_RANGE || ext_id == 0) return false;
  size_t len = module_len(ev->name, FWD_SUFFIX);
  if (len > 0) {
    if (l->nfwds == l->fcap) {
      size_t cap = l->fcap ? l->fcap * 2 : 64;
      fwd_t *f = realloc(l->fwds, cap * sizeof(*f));
      if (f == NULL) {
        fail(l, PD_ENOMEM);
        return false;
      }
      l->fwds = f;
      l->fcap = cap;
    }
    const char *module = pd_trace_intern(l->pool, ev->name); /* the prefix is what counts */
    uint64_t key = module_key(ev->pid, ev->name, len);
    int64_t prev = -1;
    if (!map_get(&l->fwd, key, &prev)) prev = -1;
    if (module == NULL || map_put(&l->fwd, key, (int64_t)l->nfwds) != 0) {
      fail(l, PD_ENOMEM);
      return false;
    }
    l->fwds[l->nfwds++] = (fwd_t){.at = {.ext_id = ext_id, .pid = ev->pid, .tid = ev->tid, .start_ns = ev->start_ns},
                                  .module = module, .len = len, .prev = prev};
    return false;
  }
  len = module_len(ev->name, BWD_SUFFIX);
  if (len == 0) return false;
  uint64_t key = module_key(ev->pid, ev->name, len);
  int64_t idx = -1;
  if (!map_get(&l->fwd, key, &idx) || idx < 0) return false;
  const fwd_t *f = &l->fwds[idx];
  if (f->len != len || f->at.pid != ev->pid || strncmp(f->module, ev->name, len) != 0) return false;
  *fwd = f->at;
  /* taken: one backward per forward, the latest first (autograd runs them in reverse) */
  if (map_put(&l->fwd, key, f->prev) != 0) fail(l, PD_ENOMEM);
  return true;
}

static uint64_t span_hash(int32_t range, uint32_t device, uint32_t stream) {
  return pd_hash_u64(((uint64_t)(uint32_t)range << 32) ^ ((uint64_t)device << 20) ^ stream);
}

static int span_table_grow(pd_links_t *l) {
  size_t n = l->nslots ? l->nslots * 2 : 256;
  while (n < 2 * (l->nspans + 1)) n *= 2;
  int32_t *slots = malloc(n * sizeof(*slots));
  if (slots == NULL) return PD_ENOMEM;
  for (size_t i = 0; i < n; i++) slots[i] = -1;
  for (size_t i = 0; i < l->nspans; i++) {
    const span_t *s = &l->spans[i];
    size_t j = span_hash(s->range, s->device, s->stream) & (n - 1);
    while (slots[j] >= 0) j = (j + 1) & (n - 1);
    slots[j] = (int32_t)i;
  }
  free(l->slots);
  l->slots = slots;
  l->nslots = n;
  return 0;
}

/* Range r's span on (device, stream), a new one when create and there is none; NULL when
 * there is none or out of memory. */
static span_t *find_span(pd_links_t *l, int32_t r, uint32_t device, uint32_t stream, bool create) {
  if (create && (l->nspans + 1) * 2 > l->nslots && span_table_grow(l) != 0) {
    fail(l, PD_ENOMEM);
    return NULL;
  }
  if (l->nslots == 0) return NULL;
  size_t j = span_hash(r, device, stream) & (l->nslots - 1);
  for (; l->slots[j] >= 0; j = (j + 1) & (l->nslots - 1)) {
    span_t *s = &l->spans[l->slots[j]];
    if (s->range == r && s->device == device && s->stream == stream) return s;
  }
  if (!create) return NULL;
  if (l->nspans == l->scap) {
    size_t cap = l->scap ? l->scap * 2 : 256;
    span_t *sp = realloc(l->spans, cap * sizeof(*sp));
    if (sp == NULL) {
      fail(l, PD_ENOMEM);
      return NULL;
    }
    l->spans = sp;
    l->scap = cap;
  }
  span_t *s = &l->spans[l->nspans];
  *s = (span_t){.range = r, .device = device, .stream = stream, .start_ns = INT64_MAX, .end_ns = INT64_MIN,
                .work_end_ns = INT64_MIN, .limit_ns = INT64_MAX};
  l->slots[j] = (int32_t)l->nspans++;
  return s;
}

/* Widens range r's span on ev's (device, stream) to cover [start, end + pad). */
static void widen(pd_links_t *l, int32_t r, const pd_event_t *ev, int64_t pad) {
  span_t *s = find_span(l, r, ev->device, ev->stream, true);
  if (s == NULL) return;
  int64_t end = ev->end_ns > ev->start_ns ? ev->end_ns : ev->start_ns;
  if (ev->start_ns < s->start_ns) s->start_ns = ev->start_ns;
  if (end + pad > s->end_ns) s->end_ns = end + pad;
  if (end > s->work_end_ns) s->work_end_ns = end;
  /* Its own work again after another range's: the span holds that work, whatever its end. */
  if (ev->start_ns >= s->limit_ns) s->limit_ns = INT64_MAX;
}

/* Whether range r is chain or one of the ranges enclosing it. */
static bool in_chain(const pd_links_t *l, int32_t r, int32_t chain) {
  for (; chain >= 0; chain = l->ranges[chain].parent)
    if (chain == r) return true;
  return false;
}

/* The range whose call launched GPU activity ev, or -1. */
static int32_t launcher(const pd_links_t *l, const pd_event_t *ev) {
  int64_t idx = -1;
  if (ev == NULL || ev->kind == PD_EVENT_SYNC || ev->correlation_id == 0 || !map_get(&l->corr, ev->correlation_id, &idx))
    return -1;
  return (int32_t)idx;
}

int pd_links_span_depth(const pd_links_t *l, const pd_event_t *ev, const pd_event_t *next) {
  if (l == NULL) return 0;
  int32_t own = launcher(l, ev), other = launcher(l, next);
  int depth = 0;
  for (int32_t r = own; r >= 0; r = l->ranges[r].parent) depth += l->ranges[r].spans && !in_chain(l, r, other);
  return depth;
}

uint64_t pd_links_activity(pd_links_t *l, const pd_event_t *ev) {
  if (l == NULL || ev == NULL || ev->correlation_id == 0) return 0;
  int64_t idx = -1;
  if (!map_get(&l->corr, ev->correlation_id, &idx) || idx < 0) return 0;
  if (ev->kind != PD_EVENT_SYNC) {
    /* The spans that held the row's previous activity and do not hold this one end by
     * its start: a span never reaches into another range's work (where that work
     * overlaps theirs, pd_links_gpu_spans() moves the later span's start instead). */
    uint64_t row = ((uint64_t)ev->device << 32) | ev->stream;
    int64_t prev = -1;
    if (map_get(&l->last, row, &prev) && prev != idx) {
      for (int32_t r = (int32_t)prev; r >= 0; r = l->ranges[r].parent) {
        if (!l->ranges[r].spans || in_chain(l, r, (int32_t)idx)) continue;
        span_t *s = find_span(l, r, ev->device, ev->stream, false);
        if (s != NULL && ev->start_ns >= s->work_end_ns && ev->start_ns < s->limit_ns) s->limit_ns = ev->start_ns;
      }
    }
    if (map_put(&l->last, row, idx) != 0) fail(l, PD_ENOMEM);
    /* Each span ends 1 ns after the activity, its parent's 1 ns after its own, and so
     * on: a span never ends on the nanosecond of the work or the span it holds, whose
     * ends readers compute from ts + dur with different roundings (docs/formats.md).
     * Where another range's work starts sooner, the span ends there (pads less); the
     * trace writer ends the work earlier so that the pads fit (pd_links_span_depth()). */
    int64_t pad = 0;
    for (int32_t r = (int32_t)idx; r >= 0; r = l->ranges[r].parent)
      if (l->ranges[r].spans) widen(l, r, ev, ++pad);
  }
  return l->ranges[idx].ext_id;
}

/* Row, then start, then the longer span first, then the outer range (lower index) first:
 * a parent comes before the children it encloses, also when their spans are equal. */
static int span_cmp(const void *pa, const void *pb) {
  const span_t *a = pa, *b = pb;
  if (a->device != b->device) return a->device < b->device ? -1 : 1;
  if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
  if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
  if (a->end_ns != b->end_ns) return a->end_ns > b->end_ns ? -1 : 1;
  return a->range < b->range ? -1 : a->range > b->range;
}

int64_t pd_links_gpu_spans(pd_links_t *l, const pd_gpu_span_t **out) {
  if (l == NULL || out == NULL) return PD_EINVAL;
  *out = NULL;
  if (l->nspans == 0) return 0;
  qsort(l->spans, l->nspans, sizeof(*l->spans), span_cmp);
  free(l->out);
  l->out = malloc(l->nspans * sizeof(*l->out));
  size_t *stack = malloc(l->nspans * sizeof(*stack));
  if (l->out == NULL || stack == NULL) {
    free(stack);
    return PD_ENOMEM;
  }
  size_t depth = 0;
  for (size_t i = 0; i < l->nspans; i++) {
    const span_t *s = &l->spans[i];
    pd_gpu_span_t *o = &l->out[i];
    /* Padded, but ending before the next range's work starts (an end on its nanosecond
     * reads back past it as often as not); never short of its own work. */
    int64_t end = s->limit_ns == INT64_MAX || s->end_ns < s->limit_ns ? s->end_ns : s->limit_ns - 1;
    *o = (pd_gpu_span_t){.name = l->ranges[s->range].name, .ext_id = l->ranges[s->range].ext_id,
                         .device = s->device, .stream = s->stream, .start_ns = s->start_ns,
                         .end_ns = end > s->work_end_ns ? end : s->work_end_ns};
    if (i > 0 && (s->device != l->spans[i - 1].device || s->stream != l->spans[i - 1].stream)) depth = 0;
    while (depth > 0 && l->out[stack[depth - 1]].end_ns <= o->start_ns) depth--;
    /* A partial overlap with a span that does not enclose this one: start where it ends. */
    while (depth > 0 && o->end_ns > l->out[stack[depth - 1]].end_ns) {
      o->start_ns = l->out[stack[--depth]].end_ns;
      while (depth > 0 && l->out[stack[depth - 1]].end_ns <= o->start_ns) depth--;
    }
    stack[depth++] = i;
  }
  free(stack);
  /* The sort moved the spans: rebuild the table so that later widening finds them. */
  free(l->slots);
  l->slots = NULL;
  l->nslots = 0;
  if (span_table_grow(l) != 0) return PD_ENOMEM;
  *out = l->out;
  return (int64_t)l->nspans;
}

/* ---- nesting on a row ------------------------------------------------------------------------ */

typedef struct {
  int64_t start_ns, end_ns; /* as written */
  int64_t limit_ns;         /* the end as given: what a child must lie within */
} nest_open_t;

typedef struct {
  nest_open_t *open; /* the row's open events, outermost first */
  size_t n, cap;
} nest_row_t;

struct pd_nest {
  map_t rows; /* (pid << 32 | tid) -> index into row */
  nest_row_t *row;
  size_t nrows, rcap;
};

pd_nest_t *pd_nest_create(void) { return calloc(1, sizeof(pd_nest_t)); }

void pd_nest_destroy(pd_nest_t *n) {
  if (n == NULL) return;
  for (size_t i = 0; i < n->nrows; i++) free(n->row[i].open);
  free(n->row);
  map_free(&n->rows);
  free(n);
}

/* The row's state, created on first use; NULL when out of memory. */
static nest_row_t *nest_row(pd_nest_t *n, uint64_t key) {
  int64_t idx = -1;
  if (map_get(&n->rows, key, &idx)) return &n->row[idx];
  if (n->nrows == n->rcap) {
    size_t cap = n->rcap ? n->rcap * 2 : 16;
    nest_row_t *r = realloc(n->row, cap * sizeof(*r));
    if (r == NULL) return NULL;
    n->row = r;
    n->rcap = cap;
  }
  if (map_put(&n->rows, key, (int64_t)n->nrows) != 0) return NULL;
  n->row[n->nrows] = (nest_row_t){0};
  return &n->row[n->nrows++];
}

/* The innermost event open on the row at start_ns (closed ones are popped), or NULL. */
static const nest_open_t *nest_top(pd_nest_t *n, uint32_t pid, uint32_t tid, int64_t start_ns) {
  int64_t idx = -1;
  if (!map_get(&n->rows, ((uint64_t)pid << 32) | tid, &idx)) return NULL;
  nest_row_t *row = &n->row[idx];
  while (row->n > 0 && row->open[row->n - 1].end_ns <= start_ns) row->n--;
  return row->n > 0 ? &row->open[row->n - 1] : NULL;
}

bool pd_nest_overlaps(pd_nest_t *n, uint32_t pid, uint32_t tid, int64_t start_ns, int64_t end_ns) {
  if (n == NULL) return false;
  const nest_open_t *top = nest_top(n, pid, tid, start_ns);
  return top != NULL && start_ns >= top->start_ns && end_ns > top->limit_ns;
}

int64_t pd_nest_end(pd_nest_t *n, uint32_t pid, uint32_t tid, int64_t start_ns, int64_t end_ns, int *err) {
  if (n == NULL || end_ns <= start_ns) return end_ns > start_ns ? end_ns : start_ns;
  nest_row_t *row = nest_row(n, ((uint64_t)pid << 32) | tid);
  if (row == NULL) {
    if (err != NULL) *err = PD_ENOMEM;
    return end_ns;
  }
  const nest_open_t *top = nest_top(n, pid, tid, start_ns);
  int64_t end = end_ns;
  if (top != NULL) {
    /* Inside the parent as given, but not before the end written for it: end just
     * before that (top->end_ns > start_ns, so the child keeps a length >= 0). */
    if (start_ns >= top->start_ns && end_ns <= top->limit_ns && end_ns >= top->end_ns) end = top->end_ns - 1;
  }
  if (end <= start_ns) return start_ns;
  if (row->n == row->cap) {
    size_t cap = row->cap ? row->cap * 2 : 16;
    nest_open_t *o = realloc(row->open, cap * sizeof(*o));
    if (o == NULL) {
      if (err != NULL) *err = PD_ENOMEM;
      return end;
    }
    row->open = o;
    row->cap = cap;
  }
  row->open[row->n++] = (nest_open_t){.start_ns = start_ns, .end_ns = end, .limit_ns = end_ns};
  return end;
}
