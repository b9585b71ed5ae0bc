/* ranges.c: host ranges (pd_range_push/pop) recorded per thread, mirrored to NVTX.
 *
 * Each thread has a private stack of open ranges (no lock) and a completed-range buffer
 * that the profiler's thread drains at the end of a cycle. The buffer has its own mutex,
 * taken by its thread once per recorded pop and by the collector once per cycle, so
 * threads never contend with each other; no global lock sits on the hot path. Arrays
 * grow by doubling and keep their capacity across cycles, so steady-state push/pop does
 * no malloc. While no profiler is tracing (g_session == 0) a push is a frame store and
 * an NVTX push: no clock read, no copy, no lock.
 *
 * With stacks on (with_stack), a recorded push also captures the call stack's return
 * addresses onto a per-thread LIFO array (stacks.c: no lookup, no lock, no malloc in
 * steady state); the pop files them in the completed-range buffer's table of distinct
 * stacks (a training loop repeats a few hundred stacks, so a range costs a hash of its
 * addresses, not 100+ bytes of copy), and the collector symbolizes each distinct stack
 * once (stacks.c, cached per address) into the events' stack text.
 *
 * A completed range is kept only if it was pushed and popped in the same recording
 * session (see capture_internal.h). Buffers of exited threads stay on the global list until
 * drained, then are freed.
 */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pd/pd_prof.h"
#include "capture_internal.h"
#include "stacks.h"

/* The injection library (src/inject) builds this file with PD_RANGES_NO_NVTX: there it is
 * the program's NVTX tool, and the ranges it records must not come back to it as NVTX. */
#ifdef PD_RANGES_NO_NVTX
#define PD_NVTX(call) ((void)0)
#else
#define PD_NVTX(call) ((void)(call))
#endif

#define NO_SHAPE UINT32_MAX

typedef struct {
  uint32_t session; /* 0: pushed while not recording */
  uint32_t depth;
  uint32_t name_off;  /* into the thread's name stack */
  uint32_t shape_off; /* idem, NO_SHAPE when none */
  uint32_t pcs_off;   /* into the thread's return-address stack */
  uint32_t npcs;      /* 0: no stack captured */
  int64_t start_ns;
} frame_t;

typedef struct {
  uint32_t session;
  uint32_t depth;
  uint32_t name_off; /* into thread_buf_t.chars */
  uint32_t shape_off;
  uint32_t stack; /* distinct stack index + 1 in thread_buf_t; 0 none */
  int64_t start_ns;
  int64_t end_ns;
} done_t;

/* One distinct stack of a thread's buffer: its return addresses in thread_buf_t.pcs. */
typedef struct {
  uint32_t off, n;
  uint64_t hash;
} stack_ref_t;

/* Completed ranges of one thread. `lock` guards everything below it; `next` and `exited`
 * are guarded by g_list_lock. */
typedef struct thread_buf {
  struct thread_buf *next;
  bool exited;
  uint32_t tid;
  pthread_mutex_t lock;
  done_t *done;
  size_t ndone, cap_done;
  char *chars;
  size_t nchars, cap_chars;
  void **pcs; /* the distinct stacks' return addresses */
  size_t npcs, cap_pcs;
  stack_ref_t *stacks;
  size_t nstacks, cap_stacks;
  uint32_t *slots; /* open addressing over stacks: index + 1, 0 empty; at most half full */
  size_t nslots;
} thread_buf_t;

/* Per-thread state, heap-allocated so the pthread key destructor can reach it. */
typedef struct {
  frame_t *frames;
  size_t nframes, cap_frames;
  char *names; /* name stack: recorded frames' names and shapes, LIFO */
  size_t nnames, cap_names;
  void **pcs; /* return-address stack of recorded frames, LIFO */
  size_t npcs, cap_pcs;
  long step_level; /* stack size when this thread's ProfilerStep range opened, -1 none */
  thread_buf_t *buf;
} thread_state_t;

static __thread thread_state_t *t_state;
static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static bool g_key_ok;

static pthread_mutex_t g_list_lock = PTHREAD_MUTEX_INITIALIZER;
static thread_buf_t *g_bufs; /* every thread that ever recorded a range */

static atomic_uint g_session;      /* current session id, 0 = not recording */
static uint32_t g_session_counter; /* profiler thread only */
static atomic_bool g_record_shapes;
static atomic_bool g_with_stack;
static pd_symbolizer_t *g_symbolizer; /* made at the first collect with stacks; g_list_lock */
static atomic_uint_fast64_t g_lost;

/* ---- helpers ------------------------------------------------------------------------ */

/* Grows *arr (element size `elem`) to hold at least `need` elements. Returns 0 or -1. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem, size_t first) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap : first;
  while (ncap < need) ncap *= 2;
  void *p = realloc(*arr, ncap * elem);
  if (p == NULL) return -1;
  *arr = p;
  *cap = ncap;
  return 0;
}

static void buf_free_arrays(thread_buf_t *b) {
  free(b->done);
  free(b->chars);
  free(b->pcs);
  free(b->stacks);
  free(b->slots);
  b->done = NULL;
  b->chars = NULL;
  b->pcs = NULL;
  b->stacks = NULL;
  b->slots = NULL;
  b->ndone = b->cap_done = b->nchars = b->cap_chars = b->npcs = b->cap_pcs = 0;
  b->nstacks = b->cap_stacks = b->nslots = 0;
}

/* Runs at thread exit: frees the stack, hands the buffer to the collector (or frees it
 * when it holds nothing). */
static void thread_state_destroy(void *arg) {
  thread_state_t *t = arg;
  if (t == NULL) return;
  thread_buf_t *b = t->buf;
  free(t->frames);
  free(t->names);
  free(t->pcs);
  free(t);
  t_state = NULL;
  if (b == NULL) return;
  pthread_mutex_lock(&g_list_lock);
  pthread_mutex_lock(&b->lock);
  bool empty = b->ndone == 0;
  pthread_mutex_unlock(&b->lock);
  if (empty) {
    for (thread_buf_t **pp = &g_bufs; *pp; pp = &(*pp)->next) {
      if (*pp == b) {
        *pp = b->next;
        break;
      }
    }
  } else {
    b->exited = true;
  }
  pthread_mutex_unlock(&g_list_lock);
  if (empty) {
    pthread_mutex_destroy(&b->lock);
    buf_free_arrays(b);
    free(b);
  }
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_key, thread_state_destroy) == 0; }

static thread_state_t *state_get(void) {
  if (t_state != NULL) return t_state;
  pthread_once(&g_key_once, key_init);
  thread_state_t *t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  t->step_level = -1;
  if (g_key_ok) (void)pthread_setspecific(g_key, t); /* without it: leaks at thread exit */
  t_state = t;
  return t;
}

/* Returns the calling thread's completed-range buffer, registering it on first use. */
static thread_buf_t *buf_get(thread_state_t *t) {
  if (t->buf != NULL) return t->buf;
  thread_buf_t *b = calloc(1, sizeof(*b));
  if (b == NULL) return NULL;
  if (pthread_mutex_init(&b->lock, NULL) != 0) {
    free(b);
    return NULL;
  }
  b->tid = (uint32_t)syscall(SYS_gettid);
  pthread_mutex_lock(&g_list_lock);
  b->next = g_bufs;
  g_bufs = b;
  pthread_mutex_unlock(&g_list_lock);
  t->buf = b;
  return b;
}

/* Copies s (with its NUL) onto the thread's name stack. Returns its offset or NO_SHAPE. */
static uint32_t names_push(thread_state_t *t, const char *s) {
  size_t len = strlen(s) + 1;
  if (t->nnames + len >= NO_SHAPE) return NO_SHAPE;
  if (grow((void **)&t->names, &t->cap_names, t->nnames + len, 1, 1024) != 0) return NO_SHAPE;
  memcpy(t->names + t->nnames, s, len);
  uint32_t off = (uint32_t)t->nnames;
  t->nnames += len;
  return off;
}

/* Captures the caller's stack onto the thread's return-address stack for frame f. On out
 * of memory the range goes without a stack (f->npcs = 0). */
static void pd_range_push_stack(thread_state_t *t, frame_t *f) {
  f->pcs_off = (uint32_t)t->npcs;
  f->npcs = 0;
  if (t->npcs + PD_STACK_MAX_PCS >= UINT32_MAX ||
      grow((void **)&t->pcs, &t->cap_pcs, t->npcs + PD_STACK_MAX_PCS, sizeof(void *), 256) != 0)
    return;
  f->npcs = (uint32_t)pd_stack_capture(t->pcs + t->npcs, PD_STACK_MAX_PCS);
  t->npcs += f->npcs;
}

static uint64_t pcs_hash(void *const *pcs, uint32_t n) {
  uint64_t h = n;
  for (uint32_t i = 0; i < n; i++) h = pd_hash_u64(h ^ (uint64_t)(uintptr_t)pcs[i]);
  return h;
}

static int stack_slots_grow(thread_buf_t *b) {
  size_t n = b->nslots ? b->nslots * 2 : 256;
  uint32_t *slots = calloc(n, sizeof(*slots));
  if (slots == NULL) return -1;
  for (size_t i = 0; i < b->nstacks; i++) {
    size_t j = b->stacks[i].hash & (n - 1);
    while (slots[j] != 0) j = (j + 1) & (n - 1);
    slots[j] = (uint32_t)(i + 1);
  }
  free(b->slots);
  b->slots = slots;
  b->nslots = n;
  return 0;
}

/* Returns the index + 1 of the stack pcs[0..n) in b's table of distinct stacks, adding
 * it when new; 0 when out of memory. Called with b->lock held. */
static uint32_t stack_file(thread_buf_t *b, void *const *pcs, uint32_t n) {
  uint64_t h = pcs_hash(pcs, n);
  if ((b->nstacks + 1) * 2 > b->nslots && stack_slots_grow(b) != 0) return 0;
  size_t mask = b->nslots - 1, j = h & mask;
  for (; b->slots[j] != 0; j = (j + 1) & mask) {
    const stack_ref_t *s = &b->stacks[b->slots[j] - 1];
    if (s->hash == h && s->n == n && memcmp(b->pcs + s->off, pcs, n * sizeof(void *)) == 0) return b->slots[j];
  }
  if (b->npcs + n >= UINT32_MAX || b->nstacks + 1 >= UINT32_MAX ||
      grow((void **)&b->pcs, &b->cap_pcs, b->npcs + n, sizeof(void *), 1024) != 0 ||
      grow((void **)&b->stacks, &b->cap_stacks, b->nstacks + 1, sizeof(stack_ref_t), 64) != 0)
    return 0;
  memcpy(b->pcs + b->npcs, pcs, n * sizeof(void *));
  b->stacks[b->nstacks] = (stack_ref_t){.off = (uint32_t)b->npcs, .n = n, .hash = h};
  b->npcs += n;
  b->slots[j] = (uint32_t)(++b->nstacks);
  return b->slots[j];
}

/* ---- public API ------------------------------------------------------------------------- */

int pd_range_push_shape(const char *name, const char *shape) {
  if (name == NULL) return PD_EINVAL;
  thread_state_t *t = state_get();
  if (t == NULL) return PD_ENOMEM;
  if (grow((void **)&t->frames, &t->cap_frames, t->nframes + 1, sizeof(frame_t), 32) != 0)
    return PD_ENOMEM;
  size_t level = t->nframes;
  frame_t *f = &t->frames[level];
  f->depth = (uint32_t)level + (t->step_level >= 0 && (size_t)t->step_level <= level ? 1u : 0u);
  f->session = atomic_load_explicit(&g_session, memory_order_acquire);
  if (f->session != 0) {
    f->name_off = names_push(t, name);
    f->shape_off = NO_SHAPE;
    if (f->name_off == NO_SHAPE) {
      /* Out of memory for the name: keep the stack balanced, count the loss. */
      f->session = 0;
      atomic_fetch_add(&g_lost, 1);
    } else if (shape != NULL && atomic_load_explicit(&g_record_shapes, memory_order_relaxed)) {
      f->shape_off = names_push(t, shape);
    }
    f->pcs_off = (uint32_t)t->npcs;
    f->npcs = 0;
    if (f->session != 0 && atomic_load_explicit(&g_with_stack, memory_order_relaxed)) pd_range_push_stack(t, f);
    f->start_ns = pd_clock_now_ns();
  }
  t->nframes++;
  PD_NVTX(nvtxRangePushA(name));
  return 0;
}

int pd_range_push(const char *name) { return pd_range_push_shape(name, NULL); }

int pd_range_pop(void) {
  thread_state_t *t = t_state;
  if (t == NULL || t->nframes == 0) return PD_ESTATE;
  frame_t *f = &t->frames[--t->nframes];
  PD_NVTX(nvtxRangePop());
  if (f->session == 0) return 0;
  int64_t end = pd_clock_now_ns();
  t->nnames = f->name_off; /* LIFO: drop this frame's name (and shape) from the stack */
  t->npcs = f->pcs_off;    /* and its return addresses (still intact below) */
  if (atomic_load_explicit(&g_session, memory_order_acquire) != f->session) return 0;

  thread_buf_t *b = buf_get(t);
  if (b == NULL) {
    atomic_fetch_add(&g_lost, 1);
    return 0;
  }
  const char *name = t->names + f->name_off; /* still intact: truncation only moved nnames */
  size_t nlen = strlen(name) + 1;
  const char *shape = f->shape_off != NO_SHAPE ? t->names + f->shape_off : NULL;
  size_t slen = shape != NULL ? strlen(shape) + 1 : 0;

  pthread_mutex_lock(&b->lock);
  if (grow((void **)&b->done, &b->cap_done, b->ndone + 1, sizeof(done_t), 256) != 0 ||
      grow((void **)&b->chars, &b->cap_chars, b->nchars + nlen + slen, 1, 8192) != 0 ||
      b->nchars + nlen + slen >= NO_SHAPE) {
    pthread_mutex_unlock(&b->lock);
    atomic_fetch_add(&g_lost, 1);
    return 0;
  }
  done_t *d = &b->done[b->ndone++];
  d->session = f->session;
  d->depth = f->depth;
  d->start_ns = f->start_ns;
  d->end_ns = end;
  d->name_off = (uint32_t)b->nchars;
  memcpy(b->chars + b->nchars, name, nlen);
  b->nchars += nlen;
  d->shape_off = NO_SHAPE;
  if (shape != NULL) {
    d->shape_off = (uint32_t)b->nchars;
    memcpy(b->chars + b->nchars, shape, slen);
    b->nchars += slen;
  }
  /* out of memory for the stack: the range is kept without one */
  d->stack = f->npcs > 0 ? stack_file(b, t->pcs + f->pcs_off, f->npcs) : 0;
  pthread_mutex_unlock(&b->lock);
  return 0;
}

uint32_t pd_ranges_session_id(void) { return atomic_load_explicit(&g_session, memory_order_acquire); }

int pd_range_add_span(const char *name, uint32_t session, int64_t start_ns, int64_t end_ns) {
  if (name == NULL || end_ns < start_ns) return PD_EINVAL;
  if (session == 0 || atomic_load_explicit(&g_session, memory_order_acquire) != session) return 0;
  thread_state_t *t = state_get();
  thread_buf_t *b = t != NULL ? buf_get(t) : NULL;
  size_t nlen = strlen(name) + 1;
  if (b != NULL) pthread_mutex_lock(&b->lock);
  if (b == NULL || grow((void **)&b->done, &b->cap_done, b->ndone + 1, sizeof(done_t), 256) != 0 ||
      grow((void **)&b->chars, &b->cap_chars, b->nchars + nlen, 1, 8192) != 0 || b->nchars + nlen >= NO_SHAPE) {
    if (b != NULL) pthread_mutex_unlock(&b->lock);
    atomic_fetch_add(&g_lost, 1);
    return PD_ENOMEM;
  }
  done_t *d = &b->done[b->ndone++];
  d->session = session;
  d->depth = (uint32_t)t->nframes;
  d->start_ns = start_ns;
  d->end_ns = end_ns;
  d->name_off = (uint32_t)b->nchars;
  memcpy(b->chars + b->nchars, name, nlen);
  b->nchars += nlen;
  d->shape_off = NO_SHAPE;
  d->stack = 0;
  pthread_mutex_unlock(&b->lock);
  return 0;
}

/* ---- profiler side ------------------------------------------------------------------------ */

void pd_ranges_set_record_shapes(bool on) { atomic_store(&g_record_shapes, on); }

void pd_ranges_set_with_stack(bool on) {
  if (on) pd_stack_capture_init();
  atomic_store(&g_with_stack, on);
}

void pd_ranges_session_begin(void) {
  if (++g_session_counter == 0) g_session_counter = 1; /* 0 means "not recording" */
  atomic_store_explicit(&g_session, g_session_counter, memory_order_release);
}

void pd_ranges_session_end(void) { atomic_store_explicit(&g_session, 0, memory_order_release); }

uint64_t pd_ranges_lost(void) { return (uint64_t)atomic_load(&g_lost); }

/* Sets *text to the stack text of b's distinct stack `id` (index + 1), interned in out,
 * symbolizing it on first use in this collect (texts[] caches it; "" for a stack with no
 * frame left, NULL when libdw cannot read this process). Called with g_list_lock held,
 * which also guards g_symbolizer. Returns 0 or PD_ENOMEM. */
static int range_stack(pd_trace_t *out, const thread_buf_t *b, uint32_t id, const char **texts, char **buf,
                       size_t *cap, const char **text) {
  *text = NULL;
  if (texts[id - 1] == NULL) {
    if (g_symbolizer == NULL && (g_symbolizer = pd_symbolizer_create()) == NULL) return 0;
    const stack_ref_t *s = &b->stacks[id - 1];
    int len = pd_symbolizer_stack_text(g_symbolizer, b->pcs + s->off, (int)s->n, buf, cap);
    if (len < 0) return len;
    texts[id - 1] = len > 0 ? pd_trace_intern(out, *buf) : "";
    if (texts[id - 1] == NULL) return PD_ENOMEM;
  }
  if (texts[id - 1][0] != '\0') *text = texts[id - 1];
  return 0;
}

int64_t pd_ranges_collect(pd_trace_t *out) {
  uint32_t session = atomic_load(&g_session);
  uint32_t pid = (uint32_t)getpid();
  int64_t added = 0;
  int rc = 0;
  char *stack = NULL; /* one stack's text, reused */
  size_t stack_cap = 0;
  pthread_mutex_lock(&g_list_lock);
  thread_buf_t **pp = &g_bufs;
  while (*pp != NULL) {
    thread_buf_t *b = *pp;
    /* Lock order: g_list_lock, then a buffer's lock (as in thread_state_destroy). */
    pthread_mutex_lock(&b->lock);
    const char **texts = b->nstacks > 0 ? calloc(b->nstacks, sizeof(*texts)) : NULL;
    if (b->nstacks > 0 && texts == NULL) rc = PD_ENOMEM;
    for (size_t i = 0; i < b->ndone && rc == 0 && out != NULL; i++) {
      const done_t *d = &b->done[i];
      if (session == 0 || d->session != session) continue; /* stale: another session */
      pd_event_t ev;
      memset(&ev, 0, sizeof(ev));
      ev.kind = PD_EVENT_RANGE;
      ev.start_ns = d->start_ns;
      ev.end_ns = d->end_ns;
      ev.name = b->chars + d->name_off;
      ev.pid = pid;
      ev.tid = b->tid;
      ev.u.range.step = -1;
      ev.u.range.depth = d->depth;
      ev.u.range.shape = d->shape_off != NO_SHAPE ? b->chars + d->shape_off : NULL;
      if (d->stack > 0) rc = range_stack(out, b, d->stack, texts, &stack, &stack_cap, &ev.u.range.stack);
      if (rc == 0) rc = pd_trace_add(out, &ev);
      if (rc == 0) added++;
    }
    free(texts);
    b->ndone = 0;
    b->nchars = 0;
    b->npcs = 0;
    b->nstacks = 0;
    if (b->slots != NULL) memset(b->slots, 0, b->nslots * sizeof(*b->slots));
    pthread_mutex_unlock(&b->lock);
    if (b->exited) {
      *pp = b->next;
      pthread_mutex_destroy(&b->lock);
      buf_free_arrays(b);
      free(b);
    } else {
      pp = &b->next;
    }
  }
  pthread_mutex_unlock(&g_list_lock);
  free(stack);
  return rc < 0 ? rc : added;
}

void pd_ranges_release(void) {
  pd_ranges_session_end();
  pthread_mutex_lock(&g_list_lock);
  thread_buf_t **pp = &g_bufs;
  while (*pp != NULL) {
    thread_buf_t *b = *pp;
    pthread_mutex_lock(&b->lock);
    buf_free_arrays(b);
    pthread_mutex_unlock(&b->lock);
    if (b->exited) {
      *pp = b->next;
      pthread_mutex_destroy(&b->lock);
      free(b);
    } else {
      pp = &b->next;
    }
  }
  pd_symbolizer_destroy(g_symbolizer);
  g_symbolizer = NULL;
  pthread_mutex_unlock(&g_list_lock);
}

uint32_t pd_ranges_step_begin(const char *name, uint64_t *nvtx_id) {
  thread_state_t *t = state_get();
  nvtxRangeId_t id = 0;
  PD_NVTX(id = nvtxRangeStartA(name));
  if (nvtx_id != NULL) *nvtx_id = (uint64_t)id;
  if (t == NULL) return 0;
  t->step_level = (long)t->nframes;
  return (uint32_t)t->nframes;
}

void pd_ranges_step_end(uint64_t nvtx_id) {
  PD_NVTX(nvtxRangeEnd((nvtxRangeId_t)nvtx_id));
  if (t_state != NULL) t_state->step_level = -1;
}
