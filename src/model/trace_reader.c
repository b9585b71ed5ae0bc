/* trace_reader.c: reads a Chrome trace JSON back into the neutral event model.
 *
 * Two writers are understood: ours (src/model/trace_writer.c, docs/formats.md) and
 * torch.profiler's Kineto, plain or gzip-compressed (detected by content: zlib's gzread
 * passes plain files through). The file is streamed: zlib inflates it a chunk at a time,
 * the pull tokenizer of json_pull.c walks the text, and each traceEvents entry becomes a
 * pd_event_t as soon as its object closes (names and shapes are interned in the trace's
 * string pool), so memory grows with the events kept, not with the size of the text.
 *
 * Mapping (one category table below): "X" events of the kernel, gpu_memcpy, gpu_memset,
 * cuda_runtime, cuda_driver, cuda_sync, user_annotation, gpu_user_annotation, cpu_op and
 * overhead categories, plus "[memory]" cpu_instant_event instants, become pd_event_t;
 * metadata ("M"), flows (ac2g and fwdbwd: the correlation id already links a launch to
 * its GPU work), Kineto's "Trace" spans and python_function events are skipped. GPU rows
 * take device/stream from args (or pid/tid); host rows keep pid/tid. ts/dur go through
 * pd_trace_us_to_ns(), the one conversion, so start_ns counts from baseTimeNanoseconds;
 * numbers the reader uses are range-checked first (a ts of 1e400 is an error, not 0).
 * A cuda_runtime event with a driver API name ("cuLaunchKernelEx") is a driver call.
 * Copy/set kinds are parsed from Kineto's names ("Memcpy HtoD (Pinned -> Device)"), and
 * the name is dropped when the kinds regenerate it, so our traces round-trip exactly.
 * Mangled kernel names ("_ZN...", as CUPTI reports our own kernels) are demangled to the
 * qualified name with template arguments (demangle.c), as Kineto shows them.
 * Range depth is rebuilt from time nesting per thread after sorting.
 */
#define _GNU_SOURCE
#include "pd/pd_out.h"
#include "pd/pd_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "json_pull.h"

/* ---- small helpers ----------------------------------------------------------------------- */

int64_t pd_trace_us_to_ns(double us) {
  if (!isfinite(us)) return 0;
  double ns = us * 1000.0;
  if (ns >= 9.2e18) return INT64_MAX;
  if (ns <= -9.2e18) return INT64_MIN;
  return llround(ns);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static double seconds_since(int64_t t0) {
  return (double)(pd_clock_now_ns() - t0) / 1e9;
}

/* ---- categories --------------------------------------------------------------------------------- */

typedef struct {
  const char *cat;
  int kind; /* pd_event_kind_t, or -1: skipped on purpose */
} cat_entry_t;

/* Kineto's categories, and the capitalized names of torch 1.8-1.9 traces. */
static const cat_entry_t cat_table[] = {
    {"kernel", PD_EVENT_KERNEL},           {"Kernel", PD_EVENT_KERNEL},
    {"gpu_memcpy", PD_EVENT_MEMCPY},       {"Memcpy", PD_EVENT_MEMCPY},
    {"gpu_memset", PD_EVENT_MEMSET},       {"Memset", PD_EVENT_MEMSET},
    {"cuda_runtime", PD_EVENT_RUNTIME},    {"Runtime", PD_EVENT_RUNTIME},
    {"cuda_driver", PD_EVENT_DRIVER},      {"cuda_sync", PD_EVENT_SYNC},
    {"user_annotation", PD_EVENT_RANGE},   {"gpu_user_annotation", PD_EVENT_GPU_RANGE},
    {"cpu_op", PD_EVENT_CPU_OP},           {"Operator", PD_EVENT_CPU_OP},
    {"overhead", PD_EVENT_OVERHEAD},       {"Trace", -1},
    {"python_function", -1},               {"ac2g", -1},
    {"fwdbwd", -1},
};

static int kind_of_cat(const char *cat) {
  if (cat == NULL) return -1;
  for (size_t i = 0; i < sizeof cat_table / sizeof cat_table[0]; i++)
    if (strcmp(cat_table[i].cat, cat) == 0) return cat_table[i].kind;
  return -1;
}

static bool is_device_kind(pd_event_kind_t k) {
  return k == PD_EVENT_KERNEL || k == PD_EVENT_MEMCPY || k == PD_EVENT_MEMSET || k == PD_EVENT_GPU_RANGE ||
         k == PD_EVENT_SYNC;
}

/* ---- names that encode kinds ------------------------------------------------------------------ */

static const pd_memcpy_kind_t copy_kinds[] = {PD_MEMCPY_HTOD, PD_MEMCPY_DTOH, PD_MEMCPY_DTOD, PD_MEMCPY_HTOH,
                                              PD_MEMCPY_PTOP};
static const pd_mem_kind_t mem_kinds[] = {PD_MEM_UNKNOWN, PD_MEM_PAGEABLE, PD_MEM_PINNED, PD_MEM_DEVICE,
                                          PD_MEM_MANAGED};

/* Matches a memory kind name at *p ("Pinned"), advancing *p. */
static bool take_mem_kind(const char **p, pd_mem_kind_t *k) {
  for (size_t i = 0; i < sizeof mem_kinds / sizeof mem_kinds[0]; i++) {
    const char *t = pd_mem_kind_name(mem_kinds[i]);
    size_t n = strlen(t);
    if (strncmp(*p, t, n) == 0) {
      *p += n;
      *k = mem_kinds[i];
      return true;
    }
  }
  return false;
}

/* "Memcpy HtoD (Pinned -> Device)" -> kinds. */
static bool parse_memcpy_name(const char *name, pd_event_t *ev) {
  if (name == NULL || strncmp(name, "Memcpy ", 7) != 0) return false;
  const char *p = name + 7;
  bool found = false;
  for (size_t i = 0; i < sizeof copy_kinds / sizeof copy_kinds[0]; i++) {
    const char *t = pd_memcpy_kind_name(copy_kinds[i]);
    size_t n = strlen(t);
    if (strncmp(p, t, n) == 0) {
      ev->u.memcpy.copy_kind = copy_kinds[i];
      p += n;
      found = true;
      break;
    }
  }
  if (!found || strncmp(p, " (", 2) != 0) return found;
  p += 2;
  pd_mem_kind_t src, dst;
  if (!take_mem_kind(&p, &src) || strncmp(p, " -> ", 4) != 0) return true;
  p += 4;
  if (!take_mem_kind(&p, &dst) || strcmp(p, ")") != 0) return true;
  ev->u.memcpy.src_kind = src;
  ev->u.memcpy.dst_kind = dst;
  return true;
}

/* "Memset (Device)" -> kind. */
static bool parse_memset_name(const char *name, pd_event_t *ev) {
  if (name == NULL || strncmp(name, "Memset (", 8) != 0) return false;
  const char *p = name + 8;
  pd_mem_kind_t k;
  if (!take_mem_kind(&p, &k) || strcmp(p, ")") != 0) return false;
  ev->u.memset.dst_kind = k;
  return true;
}

static const struct {
  const char *name;
  pd_sync_kind_t kind;
} sync_names[] = {
    {"Event Sync", PD_SYNC_EVENT},
    {"Stream Wait Event", PD_SYNC_STREAM_WAIT_EVENT},
    {"Stream Sync", PD_SYNC_STREAM},
    {"Context Sync", PD_SYNC_CONTEXT},
};

/* ProfilerStep#N -> N, else -1. */
static int64_t step_of_name(const char *name) {
  if (name == NULL || strncmp(name, "ProfilerStep#", 13) != 0) return -1;
  const char *p = name + 13;
  if (*p < '0' || *p > '9') return -1;
  char *end;
  long long v = strtoll(p, &end, 10);
  return *end == 0 ? (int64_t)v : -1;
}

/* ---- shapes --------------------------------------------------------------------------------------- */

typedef struct {
  char *s;
  size_t n, cap;
  bool oom;
} sbuf_t;

#define SHAPE_MAX_CHARS 4096 /* a shape longer than this is cut with "..." */

static void sb_put(sbuf_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (b->n + n + 1 > cap) cap *= 2;
    char *ns = realloc(b->s, cap);
    if (ns == NULL) {
      b->oom = true;
      return;
    }
    b->s = ns;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}


/* ---- numbers the reader uses ------------------------------------------------------------- */

/* ts and dur must stay below 2^62 ns (146 years): then start + dur cannot overflow. */
#define TIME_LIMIT_US 4.6e15
/* The analysis adds durations up (per step, per kernel name, per op, in totals); each
 * such sum is a part of the sum of all events' durations. Bounding that sum to 2^62 ns
 * (146 years, one event at the ts/dur limit) keeps every sum and its differences within int64 (fuzzing found traces of
 * overlapping events near the ts/dur limit that overflowed the breakdown's and the top
 * table's sums). */
#define DUR_SUM_LIMIT_NS (INT64_C(1) << 62)
/* A traceFormatVersion above this is no version of ours (a corrupt or foreign file). */
#define TRACE_FORMAT_MAX 1000

/* A number field as read; it is checked and converted only when its entry becomes an
 * event, so a skipped entry with odd numbers costs nothing. */
typedef struct {
  bool set;      /* the field held a number (or, for pid/tid, a string) */
  bool bad;      /* ts/dur: the field is there but holds no number (text says what) */
  bool is_int;   /* i is exact */
  int64_t i;
  double d;
  char text[24]; /* the number as written, cut, for messages */
} num_t;

static void num_take(num_t *n, const an_json_t *p) {
  n->set = true;
  n->is_int = p->num_is_int;
  n->i = p->num_i64;
  n->d = p->num;
  memcpy(n->text, p->num_text, sizeof n->text); /* num_text is longer: no overrun */
  n->text[sizeof n->text - 1] = 0;
}

/* pid/tid given as text, such as "stream 7" (older Kineto): its trailing digits; any
 * other text ("Spans") is 0. */
static void num_take_id_text(num_t *n, const char *s, size_t len) {
  size_t d = len;
  while (d > 0 && s[d - 1] >= '0' && s[d - 1] <= '9') d--;
  n->set = n->is_int = true;
  n->i = d < len ? (int64_t)(uint32_t)strtoul(s + d, NULL, 10) : 0;
  n->text[0] = 0;
}

/* ---- one entry of traceEvents ------------------------------------------------------------ */

/* The args keys the reader uses: X(NAME, key, value when absent or not a number). */
#define ARG_MAP(X)                                                                                   \
  X(CORRELATION, "correlation", 0) X(CONTEXT, "context", 0) X(DEVICE, "device", 0)                   \
  X(STREAM, "stream", 0) X(REGISTERS, "registers per thread", 0) X(SHARED_MEM, "shared memory", 0)   \
  X(BYTES, "bytes", 0) X(CBID, "cbid", 0) X(ADDR, "Addr", 0) X(MEM_BYTES, "Bytes", 0)                \
  X(TOTAL_ALLOCATED, "Total Allocated", -1) X(DEVICE_TYPE, "Device Type", -1)                        \
  X(DEVICE_ID, "Device Id", -1) X(WAIT_STREAM, "wait_on_stream", -1)                                 \
  X(EVENT_RECORD, "wait_on_cuda_event_record_corr_id", 0)
typedef enum {
#define ARG_GEN(name, key, dflt) ARG_##name,
  ARG_MAP(ARG_GEN)
#undef ARG_GEN
  ARG_COUNT
} arg_t;

static const struct {
  const char *key;
  size_t len;
  int64_t dflt;
} arg_table[] = {
#define ARG_ROW(name, key, dflt) {key, sizeof key - 1, dflt},
    ARG_MAP(ARG_ROW)
#undef ARG_ROW
};

typedef struct {
  bool has_ph;
  char ph[3];      /* the first two characters (a longer ph matches nothing) */
  int cat_kind;    /* pd_event_kind_t from the category table, -1 skipped or absent */
  bool cat_instant; /* cat is "cpu_instant_event" */
  bool has_name;   /* the name is in conv_t.name */
  num_t pid, tid, ts, dur;
  num_t arg[ARG_COUNT];
  num_t grid[3], block[3];
  bool external_id; /* args has an "External id" (torch's record functions) */
  bool has_shape;   /* "Input Dims" text is in conv_t.shape */
  bool has_stack;   /* "Call stack" text (torch's with_stack) is in conv_t.stack */
} entry_t;

typedef struct {
  pd_trace_t *out;
  pd_trace_info_t *info;
  const char *label;   /* the file name, for messages */
  bool torch;
  bool ours;           /* the top level names profiler_demo as the writer */
  int format;          /* its traceFormatVersion; 0: absent (format 1, or another writer) */
  /* The last host range read: profiler_demo's format 1 wrote each host range once more
   * right after it as a cpu_op (for torch-tb-profiler's Operator page); that copy is not
   * kept. */
  bool have_range;
  uint32_t range_pid, range_tid;
  int64_t range_start, range_end;
  char range_name[256];
  size_t index;        /* of the entry in traceEvents */
  int rc;              /* first conversion error */
  char msg[320];
  entry_t e;
  sbuf_t name, shape;  /* the entry's name and shape text, reused */
  sbuf_t stack;        /* the entry's "Call stack" text, reused */
  int64_t dur_sum_ns;  /* the events' durations so far (bounded: DUR_SUM_LIMIT_NS) */
} conv_t;

static int conv_fail(conv_t *cv, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int conv_fail(conv_t *cv, int rc, const char *fmt, ...) {
  if (cv->rc != 0) return cv->rc;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cv->msg, sizeof cv->msg, fmt, ap);
  va_end(ap);
  cv->rc = rc;
  return rc;
}

/* An integer field: dflt when it is no number, the number rounded otherwise, and an
 * error when it lies beyond int64. */
static int get_i64(conv_t *cv, const num_t *n, const char *what, int64_t dflt, int64_t *out) {
  *out = dflt;
  if (!n->set) return 0;
  if (n->is_int) {
    *out = n->i;
    return 0;
  }
  if (!isfinite(n->d) || n->d >= 9.2e18 || n->d <= -9.2e18)
    return conv_fail(cv, PD_EPARSE, "'%s': traceEvents[%zu] %s %s is out of range (an integer within +-9.2e18)",
                     cv->label, cv->index, what, n->text);
  *out = llround(n->d);
  return 0;
}

/* An integer field stored as 32 bits (grid, block, registers, shared memory, device
 * properties): get_i64, then an error when it lies beyond int32. */
static int get_i32(conv_t *cv, const num_t *n, const char *what, int64_t dflt, int32_t *out) {
  int64_t v;
  *out = (int32_t)dflt;
  if (get_i64(cv, n, what, dflt, &v) != 0) return cv->rc;
  if (v < INT32_MIN || v > INT32_MAX)
    return conv_fail(cv, PD_EPARSE, "'%s': traceEvents[%zu] %s %lld is out of range (a 32-bit integer)", cv->label,
                     cv->index, what, (long long)v);
  *out = (int32_t)v;
  return 0;
}

/* ts or dur in microseconds, checked against TIME_LIMIT_US. */
static int get_time(conv_t *cv, const num_t *n, const char *what, double *us) {
  *us = n->d;
  if (what[0] == 'd' && n->d < 0)
    return conv_fail(cv, PD_EPARSE, "'%s': traceEvents[%zu] dur %s is negative", cv->label, cv->index, n->text);
  if (isfinite(n->d) && fabs(n->d) < TIME_LIMIT_US) return 0;
  return conv_fail(cv, PD_EPARSE, "'%s': traceEvents[%zu] %s %s is out of range (|%s| < %.1e us)", cv->label,
                   cv->index, what, n->text, what, TIME_LIMIT_US);
}

/* Value of a field the entry reads as a scalar: containers are passed over. */
static an_json_type_t scalar(an_json_t *p) {
  an_json_type_t t = an_json_value(p);
  if ((t == AN_JSON_OBJECT || t == AN_JSON_ARRAY) && an_json_skip_rest(p, t) != 0) return AN_JSON_ERROR;
  return t;
}

static void read_num(an_json_t *p, num_t *n) {
  if (scalar(p) == AN_JSON_NUMBER) num_take(n, p);
}

/* ts or dur: a number, or a string holding one (Perfetto's JSON importer accepts
 * "ts": "123.456", which some writers use to keep every digit). Anything else marks the
 * field bad, with what it held in text; the entry is refused if it becomes an event. */
static void read_time_field(an_json_t *p, num_t *n) {
  memset(n, 0, sizeof *n);
  an_json_type_t t = scalar(p);
  if (t == AN_JSON_NUMBER) {
    num_take(n, p);
    return;
  }
  if (t == AN_JSON_STRING) {
    char buf[64];
    if (p->len > 0 && p->len < sizeof buf && memchr(p->str, 0, p->len) == NULL) {
      memcpy(buf, p->str, p->len);
      buf[p->len] = 0;
      char *end;
      errno = 0;
      double d = strtod(buf, &end);
      /* decimal only: no blanks, hex, inf or nan */
      bool decimal = strspn(buf, "+-0123456789.eE") == p->len;
      if (decimal && *end == 0 && end != buf) {
        n->set = true;
        n->d = d; /* out-of-range values are refused by get_time, as numbers are */
        snprintf(n->text, sizeof n->text, "\"%.20s\"", buf);
        return;
      }
    }
    n->bad = true;
    snprintf(n->text, sizeof n->text, "\"%.*s%s\"", p->len > 16 ? 16 : (int)p->len, p->str,
             p->len > 16 ? "..." : "");
    return;
  }
  static const char *const type_text[] = {
#define TYPE_TEXT(name, text) text,
      AN_JSON_TYPE_MAP(TYPE_TEXT)
#undef TYPE_TEXT
  };
  n->bad = true;
  snprintf(n->text, sizeof n->text, "%s", t >= 0 ? type_text[t] : "invalid");
}

static bool key_is(const an_json_t *p, const char *key, size_t len) {
  return p->len == len && memcmp(p->str, key, len) == 0;
}
#define KEY_IS(p, lit) key_is(p, lit, sizeof lit - 1)

/* Formats "Input Dims" as torch prints shapes: "[[64, 3, 32, 32], []]", cut with "..."
 * past SHAPE_MAX_CHARS. Reads the value whose first token is t. */
static int shape_from(an_json_t *p, an_json_type_t t, sbuf_t *b);

static int shape_value(an_json_t *p, sbuf_t *b) {
  return shape_from(p, an_json_value(p), b);
}

static void shape_number(const an_json_t *p, sbuf_t *b) {
  char num[40];
  int n;
  double v = p->num;
  if (p->num_is_int && p->num_i64 < 9000000000000000LL && p->num_i64 > -9000000000000000LL) {
    /* the common case, digits by hand: snprintf per dimension is most of the cost */
    char tmp[24];
    int k = 0;
    uint64_t u = p->num_i64 < 0 ? (uint64_t)0 - (uint64_t)p->num_i64 : (uint64_t)p->num_i64;
    do {
      tmp[k++] = (char)('0' + u % 10);
      u /= 10;
    } while (u != 0);
    n = 0;
    if (p->num_i64 < 0) num[n++] = '-';
    while (k > 0) num[n++] = tmp[--k];
  } else if (v == floor(v) && fabs(v) < 9e15) {
    n = snprintf(num, sizeof num, "%lld", (long long)v);
  } else {
    n = snprintf(num, sizeof num, "%.17g", v);
  }
  sb_put(b, num, (size_t)n);
}

static int shape_from(an_json_t *p, an_json_type_t t, sbuf_t *b) {
  if (t == AN_JSON_ERROR) return -1;
  if (b->n > SHAPE_MAX_CHARS) return an_json_skip_rest(p, t);
  switch (t) {
  case AN_JSON_ARRAY: {
    sb_put(b, "[", 1);
    bool first = true, cut = false;
    int r;
    while ((r = an_json_elem(p)) > 0) {
      if (cut) {
        if (an_json_skip(p) != 0) return -1;
        continue;
      }
      if (!first) sb_put(b, ", ", 2);
      first = false;
      if (shape_value(p, b) != 0) return -1;
      if (b->n > SHAPE_MAX_CHARS) {
        sb_put(b, "...", 3);
        cut = true;
      }
    }
    if (r < 0) return -1;
    if (!cut) sb_put(b, "]", 1);
    return 0;
  }
  case AN_JSON_NUMBER:
    shape_number(p, b);
    return 0;
  case AN_JSON_STRING:
    sb_put(b, "'", 1);
    sb_put(b, p->str, p->len);
    sb_put(b, "'", 1);
    return 0;
  case AN_JSON_OBJECT:
    if (an_json_skip_rest(p, t) != 0) return -1;
    sb_put(b, "None", 4);
    return 0;
  default:
    sb_put(b, "None", 4);
    return 0;
  }
}

static int read_dims(conv_t *cv, an_json_t *p) {
  an_json_type_t t = an_json_value(p);
  if (t == AN_JSON_STRING) {
    cv->shape.n = 0;
    sb_put(&cv->shape, p->str, p->len);
    cv->e.has_shape = true;
  } else if (t == AN_JSON_ARRAY) {
    cv->shape.n = 0;
    if (shape_from(p, t, &cv->shape) != 0) return -1;
    cv->e.has_shape = true;
  } else if (an_json_skip_rest(p, t) != 0) {
    return -1;
  }
  if (cv->shape.oom) return conv_fail(cv, PD_ENOMEM, "cannot read '%s': out of memory", cv->label);
  return 0;
}

/* "Call stack": torch's text, kept as written (a non-string is skipped). */
static int read_stack(conv_t *cv, an_json_t *p) {
  an_json_type_t t = an_json_value(p);
  if (t != AN_JSON_STRING) return an_json_skip_rest(p, t);
  cv->stack.n = 0;
  sb_put(&cv->stack, p->str, p->len);
  if (cv->stack.oom) return conv_fail(cv, PD_ENOMEM, "cannot read '%s': out of memory", cv->label);
  cv->e.has_stack = p->len > 0;
  return 0;
}

/* grid / block: up to three numbers; a non-number element counts as 0. */
static int read_dim3(an_json_t *p, num_t dst[3]) {
  an_json_type_t t = an_json_value(p);
  if (t != AN_JSON_ARRAY) return an_json_skip_rest(p, t);
  int r, i = 0;
  while ((r = an_json_elem(p)) > 0) {
    if (i < 3) read_num(p, &dst[i++]);
    else if (an_json_skip(p) != 0) return -1;
  }
  return r < 0 ? -1 : 0;
}

static int read_args(conv_t *cv, an_json_t *p) {
  int r;
  while ((r = an_json_key(p)) > 0) {
    int rc = 0;
    size_t a = 0;
    while (a < ARG_COUNT && !key_is(p, arg_table[a].key, arg_table[a].len)) a++;
    if (a < ARG_COUNT) {
      read_num(p, &cv->e.arg[a]);
    } else if (KEY_IS(p, "grid")) {
      rc = read_dim3(p, cv->e.grid);
    } else if (KEY_IS(p, "block")) {
      rc = read_dim3(p, cv->e.block);
    } else if (KEY_IS(p, "Input Dims")) {
      rc = read_dims(cv, p);
    } else if (KEY_IS(p, "Call stack")) {
      rc = read_stack(cv, p);
    } else {
      if (KEY_IS(p, "External id")) cv->e.external_id = true;
      rc = an_json_skip(p);
    }
    if (rc != 0 || p->failed) return -1;
  }
  return r;
}

/* Clears what read_entry fills: the flags, not the 1 KiB of number texts behind them
 * (a memset per entry cost about 15% of the parse time). */
static void entry_reset(entry_t *e) {
  e->has_ph = e->cat_instant = e->has_name = e->external_id = e->has_shape = e->has_stack = false;
  e->cat_kind = -1;
  e->pid.set = e->tid.set = e->ts.set = e->dur.set = false;
  for (size_t a = 0; a < ARG_COUNT; a++) e->arg[a].set = false;
  for (int i = 0; i < 3; i++) e->grid[i].set = e->block[i].set = false;
}

/* Reads one traceEvents object (its '{' read) into cv->e. Returns 0 or -1. */
static int read_entry(conv_t *cv, an_json_t *p) {
  entry_t *e = &cv->e;
  entry_reset(e);
  int r;
  while ((r = an_json_key(p)) > 0) {
    int rc = 0;
    an_json_type_t t;
    switch (p->len) {
    case 2:
      if (KEY_IS(p, "ph")) {
        if ((t = scalar(p)) == AN_JSON_STRING) {
          e->has_ph = true;
          e->ph[0] = p->str[0];
          e->ph[1] = p->len > 1 ? p->str[1] : 0;
          e->ph[2] = p->len > 2 ? 1 : 0; /* longer than two characters: no phase we know */
        }
      } else if (KEY_IS(p, "ts")) {
        read_time_field(p, &e->ts);
      } else {
        rc = an_json_skip(p);
      }
      break;
    case 3:
      if (KEY_IS(p, "cat")) {
        if ((t = scalar(p)) == AN_JSON_STRING) {
          e->cat_kind = kind_of_cat(p->str);
          e->cat_instant = strcmp(p->str, "cpu_instant_event") == 0;
        }
      } else if (KEY_IS(p, "pid") || KEY_IS(p, "tid")) {
        num_t *n = p->str[0] == 'p' ? &e->pid : &e->tid;
        memset(n, 0, sizeof(*n));
        if ((t = scalar(p)) == AN_JSON_NUMBER) num_take(n, p);
        else if (t == AN_JSON_STRING) num_take_id_text(n, p->str, p->len);
      } else if (KEY_IS(p, "dur")) {
        read_time_field(p, &e->dur);
      } else {
        rc = an_json_skip(p);
      }
      break;
    case 4:
      if (KEY_IS(p, "name")) {
        if ((t = scalar(p)) == AN_JSON_STRING) {
          cv->name.n = 0;
          sb_put(&cv->name, p->str, p->len);
          if (cv->name.oom) return conv_fail(cv, PD_ENOMEM, "cannot read '%s': out of memory", cv->label);
          e->has_name = true;
        }
      } else if (KEY_IS(p, "args")) {
        t = an_json_value(p);
        rc = t == AN_JSON_OBJECT ? read_args(cv, p) : an_json_skip_rest(p, t);
      } else {
        rc = an_json_skip(p);
      }
      break;
    default:
      rc = an_json_skip(p);
      break;
    }
    if (rc != 0 || p->failed || cv->rc != 0) return -1;
  }
  return r;
}

/* ---- entry -> event ---------------------------------------------------------------------- */

static int convert_x(conv_t *cv, pd_event_kind_t kind, const int64_t *arg) {
  const entry_t *e = &cv->e;
  const char *name = e->has_name ? cv->name.s : NULL;
  pd_event_t ev;
  memset(&ev, 0, sizeof ev);
  /* A driver call under cuda_runtime (our writer files driver kernel launches there for
   * torch-tb-profiler) is a driver call all the same: its name says so. */
  if (kind == PD_EVENT_RUNTIME && pd_api_name_is_driver(name)) kind = PD_EVENT_DRIVER;
  ev.kind = kind;
  ev.name = name;
  double ts, dur = 0;
  if (get_time(cv, &e->ts, "ts", &ts) != 0 || (e->dur.set && get_time(cv, &e->dur, "dur", &dur) != 0))
    return cv->rc;
  ev.start_ns = pd_trace_us_to_ns(ts);
  ev.end_ns = ev.start_ns + (dur > 0 ? pd_trace_us_to_ns(dur) : 0);
  const int64_t d = ev.end_ns - ev.start_ns;
  if (d > DUR_SUM_LIMIT_NS - cv->dur_sum_ns)
    return conv_fail(cv, PD_EPARSE,
                     "'%s': traceEvents[%zu] dur: the events' durations add up to more than 2^62 ns (146 years); "
                     "such a trace cannot be analyzed",
                     cv->label, cv->index);
  cv->dur_sum_ns += d;
  int64_t pid, tid;
  if (get_i64(cv, &e->pid, "pid", 0, &pid) != 0 || get_i64(cv, &e->tid, "tid", 0, &tid) != 0) return cv->rc;
  bool device_row = is_device_kind(kind);
  if (device_row) {
    ev.device = e->arg[ARG_DEVICE].set ? (uint32_t)arg[ARG_DEVICE] : (uint32_t)pid;
    ev.stream = e->arg[ARG_STREAM].set ? (uint32_t)arg[ARG_STREAM] : (uint32_t)tid;
  } else {
    ev.pid = (uint32_t)pid;
    ev.tid = (uint32_t)tid;
  }
  ev.correlation_id = (uint64_t)arg[ARG_CORRELATION];
  ev.context = (uint32_t)arg[ARG_CONTEXT];

  switch (kind) {
  case PD_EVENT_KERNEL: {
    for (int i = 0; i < 3; i++) {
      if (get_i32(cv, &e->grid[i], "args.grid", 0, &ev.u.kernel.grid[i]) != 0 ||
          get_i32(cv, &e->block[i], "args.block", 0, &ev.u.kernel.block[i]) != 0)
        return cv->rc;
    }
    /* the writers put static + dynamic shared memory in one field; it comes back as static */
    if (get_i32(cv, &e->arg[ARG_REGISTERS], "args.registers per thread", 0, &ev.u.kernel.registers_per_thread) != 0 ||
        get_i32(cv, &e->arg[ARG_SHARED_MEM], "args.shared memory", 0, &ev.u.kernel.static_smem_bytes) != 0)
      return cv->rc;
    /* CUPTI's mangled names, shown readable as Kineto shows them */
    char readable[1024];
    if (name != NULL && name[0] == '_' && pd_demangle(name, readable, sizeof readable)) {
      ev.name = readable;
      return pd_trace_add(cv->out, &ev); /* interns the name before readable goes */
    }
    break;
  }
  case PD_EVENT_MEMCPY:
  case PD_EVENT_MEMSET: {
    uint64_t bytes = (uint64_t)arg[ARG_BYTES];
    char buf[128];
    if (kind == PD_EVENT_MEMCPY) {
      ev.u.memcpy.bytes = bytes;
      parse_memcpy_name(name, &ev);
    } else {
      ev.u.memset.bytes = bytes;
      parse_memset_name(name, &ev);
    }
    /* Keep the name only when the kinds do not regenerate it. */
    pd_event_t probe = ev;
    probe.name = NULL;
    const char *regen = pd_event_display_name(&probe, buf, sizeof buf);
    if (name != NULL && strcmp(regen, name) == 0) ev.name = NULL;
    break;
  }
  case PD_EVENT_RUNTIME:
  case PD_EVENT_DRIVER:
    ev.u.api.cbid = (uint32_t)arg[ARG_CBID];
    break;
  case PD_EVENT_SYNC:
    /* Kineto's Event Sync and Stream Wait Event name the stream and the cudaEventRecord
     * call they wait on; the replay draws the record -> wait edge from them. */
    if (e->arg[ARG_WAIT_STREAM].set && arg[ARG_WAIT_STREAM] >= 0 && arg[ARG_WAIT_STREAM] <= UINT32_MAX) {
      ev.u.sync.has_wait = true;
      ev.u.sync.wait_stream = (uint32_t)arg[ARG_WAIT_STREAM];
      ev.u.sync.event_record_corr = arg[ARG_EVENT_RECORD] > 0 ? (uint64_t)arg[ARG_EVENT_RECORD] : 0;
    }
    for (size_t i = 0; i < sizeof sync_names / sizeof sync_names[0]; i++) {
      if (name != NULL && strcmp(name, sync_names[i].name) == 0) {
        ev.u.sync.sync_kind = sync_names[i].kind;
        ev.name = NULL; /* the writer names a kind-only record the same way */
        break;
      }
    }
    break;
  case PD_EVENT_CPU_OP:
  case PD_EVENT_RANGE:
  case PD_EVENT_GPU_RANGE:
    ev.u.range.step = step_of_name(name);
    /* torch 1.x wrote ProfilerStep#N as an op: it is the step range all the same. */
    if (ev.u.range.step >= 0 && kind == PD_EVENT_CPU_OP) ev.kind = PD_EVENT_RANGE;
    if (kind == PD_EVENT_GPU_RANGE) {
      ev.u.range.step = -1;
      break; /* the container keeps shapes of host ranges only */
    }
    /* From format 2 on, profiler_demo writes each host range once, all but the step and
     * the data wait as cpu_op: in its traces a cpu_op is a host range. */
    if (ev.kind == PD_EVENT_CPU_OP && cv->ours && cv->format >= 2) ev.kind = PD_EVENT_RANGE;
    /* Before (no traceFormatVersion): a cpu_op that repeats the range just read (same
     * row, times and name) is the copy format 1 wrote for torch-tb-profiler: one op, not
     * two. */
    if (cv->format < 2 && ev.kind == PD_EVENT_CPU_OP && cv->have_range && ev.pid == cv->range_pid &&
        ev.tid == cv->range_tid && ev.start_ns == cv->range_start && ev.end_ns == cv->range_end && name != NULL &&
        strcmp(name, cv->range_name) == 0)
      return 0;
    if (ev.kind == PD_EVENT_RANGE && name != NULL && strlen(name) < sizeof cv->range_name) {
      cv->have_range = true;
      cv->range_pid = ev.pid;
      cv->range_tid = ev.tid;
      cv->range_start = ev.start_ns;
      cv->range_end = ev.end_ns;
      memcpy(cv->range_name, name, strlen(name) + 1);
    }
    /* torch's record functions carry an External id (profiler_demo's too, since it
     * links its events the same way; its traces say so at the top level) */
    if (e->external_id) cv->torch = true;
    if (e->has_shape) ev.u.range.shape = cv->shape.s;
    if (e->has_stack) ev.u.range.stack = cv->stack.s;
    break;
  case PD_EVENT_MEMORY:
  case PD_EVENT_OVERHEAD:
  case PD_EVENT_KIND_COUNT:
    break;
  }
  return pd_trace_add(cv->out, &ev);
}

static int convert_memory(conv_t *cv, const int64_t *arg) {
  const entry_t *e = &cv->e;
  pd_event_t ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = PD_EVENT_MEMORY;
  double ts;
  int64_t pid, tid;
  if (get_time(cv, &e->ts, "ts", &ts) != 0 || get_i64(cv, &e->pid, "pid", 0, &pid) != 0 ||
      get_i64(cv, &e->tid, "tid", 0, &tid) != 0)
    return cv->rc;
  ev.start_ns = ev.end_ns = pd_trace_us_to_ns(ts);
  ev.pid = (uint32_t)pid;
  ev.tid = (uint32_t)tid;
  ev.u.memory.address = (uint64_t)arg[ARG_ADDR];
  ev.u.memory.bytes = arg[ARG_MEM_BYTES];
  ev.u.memory.total_allocated = arg[ARG_TOTAL_ALLOCATED];
  /* c10::DeviceType: 0 = CPU, 1 = CUDA. Host memory cannot tell pinned from pageable:
   * it comes back as pageable. */
  if (arg[ARG_DEVICE_TYPE] == 1) {
    ev.u.memory.mem_kind = PD_MEM_DEVICE;
    ev.device = arg[ARG_DEVICE_ID] >= 0 ? (uint32_t)arg[ARG_DEVICE_ID] : 0;
  } else if (arg[ARG_DEVICE_TYPE] == 0) {
    ev.u.memory.mem_kind = PD_MEM_PAGEABLE;
  } else {
    ev.u.memory.mem_kind = PD_MEM_UNKNOWN;
  }
  return pd_trace_add(cv->out, &ev);
}

/* Returns 1 when the entry became an event, 0 when skipped, or a PD_E* code. */
static int convert_entry(conv_t *cv) {
  const entry_t *e = &cv->e;
  if (!e->has_ph) return 0;
  bool instant = (e->ph[0] == 'i' || e->ph[0] == 'I') && e->ph[1] == 0;
  bool complete = e->ph[0] == 'X' && e->ph[1] == 0;
  if (instant && !(e->cat_instant && e->has_name && strcmp(cv->name.s, "[memory]") == 0)) return 0;
  if (!instant && (!complete || e->cat_kind < 0)) return 0;
  /* An entry of a kind the analysis reads must place itself in time. */
  if (e->ts.bad)
    return conv_fail(cv, PD_EPARSE, "'%s': traceEvents[%zu] ts %s is not a number", cv->label, cv->index,
                     e->ts.text);
  if (!e->ts.set)
    return conv_fail(cv, PD_EPARSE, "'%s': traceEvents[%zu] (ph \"%s\") has no ts", cv->label, cv->index, e->ph);
  if (e->dur.bad)
    return conv_fail(cv, PD_EPARSE, "'%s': traceEvents[%zu] dur %s is not a number", cv->label, cv->index,
                     e->dur.text);
  int64_t arg[ARG_COUNT];
  for (size_t a = 0; a < ARG_COUNT; a++) {
    char what[40];
    if (e->arg[a].set && !e->arg[a].is_int) snprintf(what, sizeof what, "args.%s", arg_table[a].key);
    else what[0] = 0;
    if (get_i64(cv, &e->arg[a], what, arg_table[a].dflt, &arg[a]) != 0) return cv->rc;
  }
  int rc = instant ? convert_memory(cv, arg) : convert_x(cv, (pd_event_kind_t)e->cat_kind, arg);
  if (rc != 0) return conv_fail(cv, rc, "cannot read '%s': %s", cv->label, pd_strerror(rc));
  return 1;
}

/* ---- range depth --------------------------------------------------------------------------------- */

typedef struct {
  uint64_t row; /* (kind class, pid, tid) packed */
  int64_t start, end;
  size_t ev;
} nest_t;

static int nest_cmp(const void *pa, const void *pb) {
  const nest_t *a = pa, *b = pb;
  if (a->row != b->row) return a->row < b->row ? -1 : 1;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  if (a->end != b->end) return a->end > b->end ? -1 : 1; /* outer first */
  return (a->ev > b->ev) - (a->ev < b->ev);
}

/* Depth of each range on its row: how many ranges of the row still open at its start. */
static int fill_depths(pd_trace_t *t) {
  pd_event_t *ev = pd_trace_events_mut(t);
  size_t n = pd_trace_count(t), k = 0;
  for (size_t i = 0; i < n; i++)
    if (ev[i].kind == PD_EVENT_RANGE || ev[i].kind == PD_EVENT_CPU_OP || ev[i].kind == PD_EVENT_GPU_RANGE) k++;
  if (k == 0) return 0;
  nest_t *v = malloc(k * sizeof(*v));
  int64_t *stack = malloc(k * sizeof(*stack));
  if (v == NULL || stack == NULL) {
    free(v);
    free(stack);
    return PD_ENOMEM;
  }
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    const pd_event_t *e = &ev[i];
    if (e->kind != PD_EVENT_RANGE && e->kind != PD_EVENT_CPU_OP && e->kind != PD_EVENT_GPU_RANGE) continue;
    bool gpu = e->kind == PD_EVENT_GPU_RANGE;
    /* host rows: pid/tid; GPU rows: device/stream, kept apart by a top bit */
    uint64_t a = gpu ? e->device : e->pid, b = gpu ? e->stream : e->tid;
    v[j].row = ((uint64_t)gpu << 63) | ((a & 0x7fffffffULL) << 32) | b;
    v[j].start = e->start_ns;
    v[j].end = e->end_ns;
    v[j].ev = i;
    j++;
  }
  qsort(v, k, sizeof(*v), nest_cmp);
  size_t depth = 0;
  for (size_t i = 0; i < k; i++) {
    if (i > 0 && v[i].row != v[i - 1].row) depth = 0;
    while (depth > 0 && stack[depth - 1] <= v[i].start) depth--;
    ev[v[i].ev].u.range.depth = (uint32_t)depth;
    stack[depth++] = v[i].end;
  }
  free(v);
  free(stack);
  return 0;
}


/* ---- the document --------------------------------------------------------------------------------- */

static const struct {
  const char *key;
  size_t off;
} device_ints[] = {
    {"id", offsetof(pd_device_props_t, id)},
    {"computeMajor", offsetof(pd_device_props_t, compute_major)},
    {"computeMinor", offsetof(pd_device_props_t, compute_minor)},
    {"numSms", offsetof(pd_device_props_t, num_sms)},
    {"maxThreadsPerBlock", offsetof(pd_device_props_t, max_threads_per_block)},
    {"maxThreadsPerMultiprocessor", offsetof(pd_device_props_t, max_threads_per_sm)},
    {"regsPerBlock", offsetof(pd_device_props_t, max_regs_per_block)},
    {"regsPerMultiprocessor", offsetof(pd_device_props_t, max_regs_per_sm)},
    {"sharedMemPerBlock", offsetof(pd_device_props_t, max_shared_mem_per_block)},
    {"sharedMemPerMultiprocessor", offsetof(pd_device_props_t, max_shared_mem_per_sm)},
    {"warpSize", offsetof(pd_device_props_t, warp_size)},
    {"maxBlocksPerMultiprocessor", offsetof(pd_device_props_t, max_blocks_per_sm)},
    {"sharedMemPerBlockOptin", offsetof(pd_device_props_t, max_shared_mem_per_block_optin)},
};

/* One deviceProperties object (its '{' read). Returns 0 or -1. */
static int read_device(conv_t *cv, an_json_t *p, pd_device_props_t *d) {
  memset(d, 0, sizeof(*d));
  int r;
  while ((r = an_json_key(p)) > 0) {
    size_t i = 0;
    while (i < sizeof device_ints / sizeof device_ints[0] && strcmp(p->str, device_ints[i].key) != 0) i++;
    bool total = KEY_IS(p, "totalGlobalMem");
    if (KEY_IS(p, "name")) {
      if (scalar(p) == AN_JSON_STRING) snprintf(d->name, sizeof d->name, "%s", p->str);
    } else if (total || i < sizeof device_ints / sizeof device_ints[0]) {
      num_t n = {0};
      int64_t v;
      read_num(p, &n);
      if (get_i64(cv, &n, "deviceProperties value", 0, &v) != 0) return -1;
      if (total ? v < 0 : (v < INT32_MIN || v > INT32_MAX)) {
        conv_fail(cv, PD_EPARSE, "'%s': deviceProperties %s %lld is out of range", cv->label,
                  total ? "totalGlobalMem" : device_ints[i].key, (long long)v);
        return -1;
      }
      if (total) d->total_global_mem = (uint64_t)v;
      else *(int *)((char *)d + device_ints[i].off) = (int)v;
    } else if (an_json_skip(p) != 0) {
      return -1;
    }
    if (p->failed) return -1;
  }
  return r;
}

static int read_devices(conv_t *cv, an_json_t *p) {
  an_json_type_t t = an_json_value(p);
  if (t != AN_JSON_ARRAY) return an_json_skip_rest(p, t);
  int r;
  while ((r = an_json_elem(p)) > 0) {
    t = an_json_value(p);
    if (t != AN_JSON_OBJECT) {
      if (an_json_skip_rest(p, t) != 0) return -1;
      continue;
    }
    pd_device_props_t d;
    if (read_device(cv, p, &d) != 0) return -1;
    int rc = pd_trace_add_device(cv->out, &d);
    if (rc != 0) return conv_fail(cv, rc, "cannot read '%s': %s", cv->label, pd_strerror(rc));
  }
  return r < 0 ? -1 : 0;
}

static int read_events(conv_t *cv, an_json_t *p) {
  int r;
  while ((r = an_json_elem(p)) > 0) {
    cv->index = cv->info->json_events++;
    an_json_type_t t = an_json_value(p);
    int made = 0;
    if (t == AN_JSON_OBJECT) {
      if (read_entry(cv, p) != 0) return -1;
      made = convert_entry(cv);
      if (made < 0) return -1;
    } else if (an_json_skip_rest(p, t) != 0) {
      return -1;
    }
    if (made == 0) cv->info->skipped++;
  }
  return r < 0 ? -1 : 0;
}

/* profiler_demo's "profilerCost" ({..., "calibration": {"ns_per_cuda_call",
 * "ns_per_host_range"}}): the calibrated cost of one traced call and range on the recording
 * host, which the replay takes out to predict the unprofiled step (the window's candidate,
 * "ns_per_cuda_call_window", is not taken: pd_prof_cost_window_call_ns says why). Other keys are skipped;
 * a figure that is not a number, or out of range, leaves the trace uncalibrated. */
static int read_profiler_cost(conv_t *cv, an_json_t *p) {
  an_json_type_t t = an_json_value(p);
  if (t != AN_JSON_OBJECT) return an_json_skip_rest(p, t);
  double call = -1, range = -1;
  int r;
  while ((r = an_json_key(p)) > 0) {
    if (!KEY_IS(p, "calibration")) {
      if (an_json_skip(p) != 0) return -1;
      continue;
    }
    t = an_json_value(p);
    if (t != AN_JSON_OBJECT) {
      if (an_json_skip_rest(p, t) != 0) return -1;
      continue;
    }
    while ((r = an_json_key(p)) > 0) {
      bool is_call = KEY_IS(p, "ns_per_cuda_call"), is_range = KEY_IS(p, "ns_per_host_range");
      if (!is_call && !is_range) {
        if (an_json_skip(p) != 0) return -1;
        continue;
      }
      t = an_json_value(p);
      if (t == AN_JSON_NUMBER) *(is_call ? &call : &range) = p->num;
      else if (an_json_skip_rest(p, t) != 0) return -1;
    }
    if (r < 0) return -1;
  }
  if (r < 0) return -1;
  pd_trace_set_calibration(cv->out, call, range);
  return 0;
}

/* Walks the whole document. Returns 0, or -1 with the fault in p->err or cv->msg. */
static int read_document(conv_t *cv, an_json_t *p, bool *have_events) {
  pd_trace_info_t *info = cv->info;
  an_json_type_t t = an_json_value(p);
  if (t != AN_JSON_OBJECT) {
    if (an_json_skip_rest(p, t) != 0) return -1;
    return an_json_finish(p);
  }
  int r;
  while ((r = an_json_key(p)) > 0) {
    int rc = 0;
    if (KEY_IS(p, "traceEvents")) {
      t = an_json_value(p);
      if (t == AN_JSON_ARRAY) {
        *have_events = true;
        rc = read_events(cv, p);
      } else {
        rc = an_json_skip_rest(p, t);
      }
    } else if (KEY_IS(p, "deviceProperties")) {
      rc = read_devices(cv, p);
    } else if (KEY_IS(p, "baseTimeNanoseconds") || KEY_IS(p, "schemaVersion")) {
      bool base = p->str[0] == 'b';
      num_t n = {0};
      int64_t v;
      read_num(p, &n);
      if (get_i64(cv, &n, base ? "baseTimeNanoseconds" : "schemaVersion", base ? 0 : -1, &v) != 0) return -1;
      if (base) info->base_time_ns = v;
      else info->schema_version = (int)v;
    } else if (KEY_IS(p, "profilerCost")) {
      rc = read_profiler_cost(cv, p);
    } else if (KEY_IS(p, "stepRange")) {
      /* a name too long to keep, holding a NUL, or not a string, is none
       * (pd_trace_set_step_range) */
      bool named = scalar(p) == AN_JSON_STRING && memchr(p->str, 0, p->len) == NULL;
      pd_trace_set_step_range(cv->out, named ? p->str : NULL);
    } else if (KEY_IS(p, "traceName")) {
      if (scalar(p) == AN_JSON_STRING) snprintf(info->trace_name, sizeof info->trace_name, "%s", p->str);
    } else {
      if (KEY_IS(p, "trace_id")) cv->torch = true;
      if (KEY_IS(p, "traceWriter")) {
        if (scalar(p) == AN_JSON_STRING) cv->ours = strncmp(p->str, "profiler_demo", 13) == 0;
      } else if (KEY_IS(p, "traceFormatVersion")) {
        num_t n = {0};
        int64_t v;
        read_num(p, &n);
        if (get_i64(cv, &n, "traceFormatVersion", 0, &v) != 0) return -1;
        if (v < 1 || v > TRACE_FORMAT_MAX) {
          conv_fail(cv, PD_EPARSE, "'%s': traceFormatVersion %lld is not a format version (1 to %d)", cv->label,
                    (long long)v, TRACE_FORMAT_MAX);
          return -1;
        }
        cv->format = (int)v;
      } else {
        rc = an_json_skip(p);
      }
    }
    if (rc != 0 || p->failed || cv->rc != 0) return -1;
  }
  if (r < 0) return -1;
  return an_json_finish(p);
}

/* ---- reading a file ---------------------------------------------------------------------------- */

typedef struct {
  gzFile gz;
  const char *path;
  int rc;                  /* PD_EIO or PD_EPARSE when a read failed */
  int64_t load_ns;         /* time inside gzread */
  int64_t t0;
  uint64_t file_bytes, text_bytes;
  const pd_trace_t *out;
  pd_trace_progress_cb progress;
  void *user;
} file_src_t;

static void report_progress(file_src_t *s, bool done) {
  if (s->progress == NULL) return;
  pd_trace_progress_t pr = {
      .file_bytes = s->file_bytes,
      .file_read = done ? s->file_bytes : (uint64_t)gzoffset(s->gz),
      .text_bytes = s->text_bytes,
      .events = pd_trace_count(s->out),
      .elapsed_s = seconds_since(s->t0),
      .done = done,
  };
  s->progress(&pr, s->user);
}

/* an_json_read_cb over gzread: inflates gzip, passes plain text through. */
static long file_read(void *user, char *buf, size_t cap, char *err, size_t errlen) {
  file_src_t *s = user;
  int64_t t0 = pd_clock_now_ns();
  int got = gzread(s->gz, buf, (unsigned)cap);
  s->load_ns += pd_clock_now_ns() - t0;
  int zerr = Z_OK;
  const char *msg = NULL;
  if (got < 0) {
    msg = gzerror(s->gz, &zerr);
    set_err(err, errlen, "%s", zerr == Z_ERRNO ? strerror(errno) : (msg ? msg : "read error"));
    s->rc = zerr == Z_ERRNO ? PD_EIO : zerr == Z_MEM_ERROR ? PD_ENOMEM : PD_EPARSE;
    if (zerr == Z_DATA_ERROR) set_err(err, errlen, "corrupt gzip data (%s)", msg ? msg : "unknown");
    if (zerr == Z_MEM_ERROR) set_err(err, errlen, "out of memory inflating gzip data");
    return -1;
  }
  if (got == 0) {
    /* gzread stops at a truncated stream's end without an error return: ask. */
    msg = gzerror(s->gz, &zerr);
    if (zerr != Z_OK && zerr != Z_STREAM_END) {
      set_err(err, errlen, "corrupt gzip data (%s)", msg ? msg : "unknown");
      s->rc = PD_EPARSE;
      return -1;
    }
    return 0;
  }
  s->text_bytes += (uint64_t)got;
  report_progress(s, false);
  return got;
}

/* Turns the outcome of a walk into the one-line message and code. */
static int finish_read(conv_t *cv, an_json_t *p, int walk, bool have_events, int src_rc, char *err,
                       size_t errlen) {
  const char *label = cv->label;
  if (cv->rc != 0) {
    set_err(err, errlen, "%s", cv->msg);
    return cv->rc;
  }
  if (walk != 0 && p->read_failed) {
    set_err(err, errlen, "cannot read '%s': %s", label, p->err);
    return src_rc != 0 ? src_rc : PD_EIO;
  }
  if (walk != 0 && p->out_of_memory) {
    set_err(err, errlen, "cannot read '%s': %s", label, p->err);
    return PD_ENOMEM;
  }
  if (walk != 0 && p->over_limit) {
    set_err(err, errlen, "cannot read '%s': %s (a reader limit; trace names, shapes and numbers are far shorter)",
            label, p->err);
    return PD_ETOOBIG;
  }
  if (walk != 0) {
    if (an_json_offset(p) == 0 && p->at_eof) set_err(err, errlen, "'%s' is empty (not JSON)", label);
    else set_err(err, errlen, "'%s' is not valid JSON (%s)", label, p->err);
    return PD_EPARSE;
  }
  if (!have_events) {
    set_err(err, errlen, "'%s' has no traceEvents array (not a Chrome trace)", label);
    return PD_EPARSE;
  }
  return 0;
}

/* Sorts, rebuilds range depth and counts kinds once every event is in. */
static int finish_events(conv_t *cv) {
  pd_trace_info_t *info = cv->info;
  info->torch = cv->torch && !cv->ours;
  info->trace_format = cv->ours ? (cv->format > 0 ? cv->format : 1) : cv->format;
  pd_trace_sort(cv->out);
  int rc = fill_depths(cv->out);
  if (rc != 0) return conv_fail(cv, rc, "cannot read '%s': %s", cv->label, pd_strerror(rc));
  const pd_event_t *ev = pd_trace_events(cv->out);
  for (size_t i = 0, n = pd_trace_count(cv->out); i < n; i++) info->kind_counts[ev[i].kind]++;
  return 0;
}

static void info_reset(pd_trace_info_t *info) {
  memset(info, 0, sizeof(*info));
  info->schema_version = -1;
}

/* Reads with parser p set up over the text; the common part of the file and buffer paths. */
static int read_with(an_json_t *p, const char *label, pd_trace_t *out, pd_trace_info_t *info, int *src_rc,
                     char *err, size_t errlen) {
  conv_t cv = {.out = out, .info = info, .label = label};
  int64_t t0 = pd_clock_now_ns();
  bool have_events = false;
  int walk = read_document(&cv, p, &have_events);
  info->parse_s = seconds_since(t0);
  info->text_bytes = (size_t)an_json_offset(p);
  free(cv.name.s);
  free(cv.shape.s);
  free(cv.stack.s);
  int rc = finish_read(&cv, p, walk, have_events, src_rc ? *src_rc : 0, err, errlen);
  if (rc == 0) {
    t0 = pd_clock_now_ns();
    rc = finish_events(&cv);
    info->convert_s = seconds_since(t0);
    if (rc != 0) set_err(err, errlen, "%s", cv.msg);
  }
  if (rc != 0) pd_trace_reset(out);
  return rc;
}

int pd_trace_read_buffer(const char *text, size_t len, pd_trace_t *out, pd_trace_info_t *info, char *err,
                         size_t errlen) {
  if (text == NULL || out == NULL) {
    set_err(err, errlen, "invalid argument");
    return PD_EINVAL;
  }
  pd_trace_info_t local;
  if (info == NULL) info = &local;
  info_reset(info);
  pd_trace_reset(out);
  an_json_t p;
  an_json_init_buffer(&p, text, len);
  int rc = read_with(&p, "<buffer>", out, info, NULL, err, errlen);
  an_json_free(&p);
  return rc;
}

int pd_trace_read_file_progress(const char *path, pd_trace_t *out, pd_trace_info_t *info,
                                pd_trace_progress_cb progress, void *user, char *err, size_t errlen) {
  if (path == NULL || out == NULL) {
    set_err(err, errlen, "invalid argument");
    return PD_EINVAL;
  }
  pd_trace_info_t local;
  if (info == NULL) info = &local;
  info_reset(info);
  pd_trace_reset(out);

  /* A FIFO, a terminal or /dev/zero could block or never end: only regular files are
   * read. O_NONBLOCK keeps open() itself from waiting for a FIFO's writer. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    set_err(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    return PD_EIO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fcntl(fd, F_SETFL, 0) != 0) {
    set_err(err, errlen, "cannot read '%s': not a regular file", path);
    close(fd);
    return PD_EIO;
  }
  (void)pd_out_protect_fd(fd); /* no output of this process may replace an input */
  file_src_t src = {.path = path, .file_bytes = (uint64_t)st.st_size, .out = out, .progress = progress,
                    .user = user, .t0 = pd_clock_now_ns()};
  src.gz = gzdopen(fd, "rb");
  an_json_t p;
  if (src.gz == NULL || an_json_init_reader(&p, file_read, &src) != 0) {
    if (src.gz != NULL) gzclose_r(src.gz);
    else close(fd);
    set_err(err, errlen, "cannot read '%s': out of memory", path);
    return PD_ENOMEM;
  }
  (void)gzbuffer(src.gz, 256u * 1024u);
  int rc = read_with(&p, path, out, info, &src.rc, err, errlen);
  info->gzipped = gzdirect(src.gz) == 0;
  info->load_s = (double)src.load_ns / 1e9;
  info->parse_s -= info->load_s;
  if (rc == 0) report_progress(&src, true);
  gzclose_r(src.gz); /* closes fd */
  an_json_free(&p);
  return rc;
}

int pd_trace_read_file_info(const char *path, pd_trace_t *out, pd_trace_info_t *info, char *err,
                            size_t errlen) {
  return pd_trace_read_file_progress(path, out, info, NULL, NULL, err, errlen);
}

int pd_trace_read_file(const char *path, pd_trace_t *out, char *err, size_t errlen) {
  return pd_trace_read_file_progress(path, out, NULL, NULL, NULL, err, errlen);
}
