/* trace_reader_tree.c: the former whole-tree trace reader (cJSON), kept only while the
 * unit tests compare the streaming reader (trace_reader.c) with it; to be removed.
 *
 * What follows is its original description.
 *
 * Two writers are understood: ours (src/prof/trace_writer.c, docs/formats.md) and
 * torch.profiler's Kineto, plain or gzip-compressed (detected by content: zlib's gzread
 * passes plain files through). The file is loaded whole and parsed with cJSON in one go,
 * which is fine up to a few hundred MB of JSON (docs/analyzer.md has the timings).
 *
 * Mapping (one category table below): "X" events of the kernel, gpu_memcpy, gpu_memset,
 * cuda_runtime, cuda_driver, cuda_sync, user_annotation, gpu_user_annotation, cpu_op and
 * overhead categories, plus "[memory]" cpu_instant_event instants, become pd_event_t;
 * metadata ("M"), flows (ac2g and fwdbwd: the correlation id already links a launch to
 * its GPU work), Kineto's "Trace" spans and python_function events are skipped. GPU rows
 * take device/stream from args (or pid/tid); host rows keep pid/tid. ts/dur go through
 * pd_trace_us_to_ns(), the one conversion, so start_ns counts from baseTimeNanoseconds.
 * Copy/set kinds are parsed from Kineto's names ("Memcpy HtoD (Pinned -> Device)"), and
 * the name is dropped when the kinds regenerate it, so our traces round-trip exactly.
 * Mangled kernel names ("_ZN...", as CUPTI reports our own kernels) are demangled to the
 * qualified name with template arguments (analyze_demangle.c), as Kineto shows them.
 * Range depth is rebuilt from time nesting per thread after sorting.
 */
#define _GNU_SOURCE
#include "pd/pd_analyze.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>
#include <zlib.h>

#include "analyze_internal.h"

/* ---- small helpers ----------------------------------------------------------------------- */


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

/* ---- loading (plain or gzip) ---------------------------------------------------------------- */

#define READ_CHUNK (1u << 20)
#define MAX_TEXT_BYTES ((size_t)4 << 30) /* 4 GiB of JSON: far beyond what cJSON should hold */

/* Reads the whole file, inflating it when it is gzip. On success *text is a
 * NUL-terminated buffer the caller frees. */
static int load_file(const char *path, char **text, size_t *len, bool *gzipped, char *err, size_t errlen) {
  *text = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    set_err(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    return PD_EIO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "cannot read '%s': not a regular file", path);
    close(fd);
    return PD_EIO;
  }
  gzFile gz = gzdopen(fd, "rb");
  if (gz == NULL) {
    close(fd);
    set_err(err, errlen, "cannot read '%s': out of memory", path);
    return PD_ENOMEM;
  }
  (void)gzbuffer(gz, 256u * 1024u);
  size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : READ_CHUNK;
  if (cap < READ_CHUNK) cap = READ_CHUNK;
  char *buf = malloc(cap);
  size_t n = 0;
  int rc = 0;
  if (buf == NULL) rc = PD_ENOMEM;
  while (rc == 0) {
    if (cap - n < READ_CHUNK + 1) {
      if (cap >= MAX_TEXT_BYTES) {
        set_err(err, errlen, "'%s' is larger than %zu GiB of JSON", path, MAX_TEXT_BYTES >> 30);
        rc = PD_EIO;
        break;
      }
      size_t ncap = cap * 2;
      char *nb = realloc(buf, ncap);
      if (nb == NULL) {
        rc = PD_ENOMEM;
        break;
      }
      buf = nb;
      cap = ncap;
    }
    int got = gzread(gz, buf + n, READ_CHUNK);
    if (got < 0) {
      int zerr = 0;
      const char *msg = gzerror(gz, &zerr);
      set_err(err, errlen, "cannot read '%s': %s", path,
              zerr == Z_ERRNO ? strerror(errno) : (msg ? msg : "read error"));
      rc = zerr == Z_ERRNO ? PD_EIO : PD_EPARSE;
      break;
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  if (rc == 0) {
    /* gzread stops at a truncated stream's end without an error return: ask. */
    int zerr = 0;
    const char *msg = gzerror(gz, &zerr);
    if (zerr != Z_OK && zerr != Z_STREAM_END) {
      set_err(err, errlen, "cannot read '%s': corrupt gzip data (%s)", path, msg ? msg : "unknown");
      rc = PD_EPARSE;
    }
  }
  *gzipped = gzdirect(gz) == 0;
  gzclose_r(gz); /* closes fd */
  if (rc == PD_ENOMEM) set_err(err, errlen, "cannot read '%s': out of memory", path);
  if (rc != 0) {
    free(buf);
    return rc;
  }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return 0;
}

/* ---- JSON field access ------------------------------------------------------------------------ */

static bool num_of(const cJSON *it, double *v) {
  if (it == NULL || !cJSON_IsNumber(it)) return false;
  *v = it->valuedouble;
  return isfinite(*v);
}

static int64_t i64_of(const cJSON *it, int64_t dflt) {
  double v;
  if (!num_of(it, &v) || v >= 9.2e18 || v <= -9.2e18) return dflt;
  return (int64_t)llround(v);
}

/* pid/tid: numbers, or strings such as "stream 7" (older Kineto) whose trailing digits
 * are taken; anything else ("Spans") is 0. */
static uint32_t id_of(const cJSON *it) {
  double v;
  if (num_of(it, &v)) {
    if (v < 0) return (uint32_t)(int32_t)llround(v);
    return (uint32_t)(uint64_t)llround(v);
  }
  if (cJSON_IsString(it) && it->valuestring != NULL) {
    const char *s = it->valuestring;
    size_t n = strlen(s), d = n;
    while (d > 0 && s[d - 1] >= '0' && s[d - 1] <= '9') d--;
    if (d < n) return (uint32_t)strtoul(s + d, NULL, 10);
  }
  return 0;
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

/* Formats "Input Dims" as torch prints shapes: "[[64, 3, 32, 32], []]". */
static void shape_text(sbuf_t *b, const cJSON *it) {
  if (b->n > SHAPE_MAX_CHARS) return;
  if (cJSON_IsArray(it)) {
    sb_put(b, "[", 1);
    bool first = true;
    for (const cJSON *c = it->child; c != NULL; c = c->next) {
      if (!first) sb_put(b, ", ", 2);
      first = false;
      shape_text(b, c);
      if (b->n > SHAPE_MAX_CHARS) {
        sb_put(b, "...", 3);
        return;
      }
    }
    sb_put(b, "]", 1);
  } else if (cJSON_IsNumber(it)) {
    char num[40];
    double v = it->valuedouble;
    int n = (v == floor(v) && fabs(v) < 9e15) ? snprintf(num, sizeof num, "%lld", (long long)v)
                                             : snprintf(num, sizeof num, "%.17g", v);
    sb_put(b, num, (size_t)n);
  } else if (cJSON_IsString(it)) {
    sb_put(b, "'", 1);
    sb_put(b, it->valuestring, strlen(it->valuestring));
    sb_put(b, "'", 1);
  } else {
    sb_put(b, "None", 4);
  }
}

/* ---- one event ------------------------------------------------------------------------------------- */

typedef struct {
  pd_trace_t *out;
  pd_trace_info_t *info;
  sbuf_t shape;
  bool torch;
} conv_t;

static void read_kernel_args(const cJSON *args, pd_event_t *ev) {
  for (const cJSON *a = args ? args->child : NULL; a != NULL; a = a->next) {
    const char *k = a->string;
    if (strcmp(k, "grid") == 0 || strcmp(k, "block") == 0) {
      int32_t *dst = k[0] == 'g' ? ev->u.kernel.grid : ev->u.kernel.block;
      int i = 0;
      for (const cJSON *c = cJSON_IsArray(a) ? a->child : NULL; c != NULL && i < 3; c = c->next)
        dst[i++] = (int32_t)i64_of(c, 0);
    } else if (strcmp(k, "registers per thread") == 0) {
      ev->u.kernel.registers_per_thread = (int32_t)i64_of(a, 0);
    } else if (strcmp(k, "shared memory") == 0) {
      /* the writers put static + dynamic here; it comes back as static */
      ev->u.kernel.static_smem_bytes = (int32_t)i64_of(a, 0);
    }
  }
}

/* Fills the fields every GPU row carries in args. */
static void read_common_args(const cJSON *args, pd_event_t *ev, bool device_row) {
  for (const cJSON *a = args ? args->child : NULL; a != NULL; a = a->next) {
    const char *k = a->string;
    if (strcmp(k, "correlation") == 0) ev->correlation_id = (uint64_t)i64_of(a, 0);
    else if (strcmp(k, "context") == 0) ev->context = (uint32_t)i64_of(a, 0);
    else if (device_row && strcmp(k, "device") == 0) ev->device = (uint32_t)i64_of(a, ev->device);
    else if (device_row && strcmp(k, "stream") == 0) ev->stream = (uint32_t)i64_of(a, ev->stream);
  }
}

static int convert_x(conv_t *cv, pd_event_kind_t kind, const char *name, const cJSON *pid, const cJSON *tid,
                     double ts, double dur, const cJSON *args) {
  pd_event_t ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = kind;
  ev.name = name;
  ev.start_ns = pd_trace_us_to_ns(ts);
  int64_t d = dur > 0 ? pd_trace_us_to_ns(dur) : 0;
  ev.end_ns = ev.start_ns + d;
  bool device_row = is_device_kind(kind);
  if (device_row) {
    ev.device = id_of(pid);
    ev.stream = id_of(tid);
  } else {
    ev.pid = id_of(pid);
    ev.tid = id_of(tid);
  }
  read_common_args(args, &ev, device_row);

  switch (kind) {
  case PD_EVENT_KERNEL: {
    read_kernel_args(args, &ev);
    /* CUPTI's mangled names, shown readable as Kineto shows them */
    char readable[1024];
    if (name != NULL && an_demangle(name, readable, sizeof readable)) {
      ev.name = readable;
      return pd_trace_add(cv->out, &ev); /* interns the name before readable goes */
    }
    break;
  }
  case PD_EVENT_MEMCPY:
  case PD_EVENT_MEMSET: {
    uint64_t bytes = (uint64_t)i64_of(cJSON_GetObjectItemCaseSensitive(args, "bytes"), 0);
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
    ev.u.api.cbid = (uint32_t)i64_of(cJSON_GetObjectItemCaseSensitive(args, "cbid"), 0);
    break;
  case PD_EVENT_SYNC:
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
  case PD_EVENT_GPU_RANGE: {
    ev.u.range.step = step_of_name(name);
    /* torch 1.x wrote ProfilerStep#N as an op: it is the step range all the same. */
    if (ev.u.range.step >= 0 && kind == PD_EVENT_CPU_OP) ev.kind = PD_EVENT_RANGE;
    if (kind == PD_EVENT_GPU_RANGE) {
      ev.u.range.step = -1;
      break; /* the container keeps shapes of host ranges only */
    }
    /* torch's record functions carry an External id; our writer never writes one */
    if (cJSON_GetObjectItemCaseSensitive(args, "External id") != NULL) cv->torch = true;
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(args, "Input Dims");
    if (cJSON_IsString(dims)) {
      ev.u.range.shape = dims->valuestring;
    } else if (cJSON_IsArray(dims)) {
      cv->shape.n = 0;
      shape_text(&cv->shape, dims);
      if (cv->shape.oom) return PD_ENOMEM;
      ev.u.range.shape = cv->shape.s;
    }
    break;
  }
  case PD_EVENT_MEMORY:
  case PD_EVENT_OVERHEAD:
  case PD_EVENT_KIND_COUNT:
    break;
  }
  return pd_trace_add(cv->out, &ev);
}

static int convert_memory(conv_t *cv, const cJSON *pid, const cJSON *tid, double ts, const cJSON *args) {
  pd_event_t ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = PD_EVENT_MEMORY;
  ev.start_ns = ev.end_ns = pd_trace_us_to_ns(ts);
  ev.pid = id_of(pid);
  ev.tid = id_of(tid);
  ev.u.memory.total_allocated = -1;
  int64_t device_type = -1, device_id = -1;
  for (const cJSON *a = args ? args->child : NULL; a != NULL; a = a->next) {
    const char *k = a->string;
    if (strcmp(k, "Addr") == 0) ev.u.memory.address = (uint64_t)i64_of(a, 0);
    else if (strcmp(k, "Bytes") == 0) ev.u.memory.bytes = i64_of(a, 0);
    else if (strcmp(k, "Total Allocated") == 0) ev.u.memory.total_allocated = i64_of(a, -1);
    else if (strcmp(k, "Device Type") == 0) device_type = i64_of(a, -1);
    else if (strcmp(k, "Device Id") == 0) device_id = i64_of(a, -1);
  }
  /* c10::DeviceType: 0 = CPU, 1 = CUDA. Host memory cannot tell pinned from pageable:
   * it comes back as pageable. */
  if (device_type == 1) {
    ev.u.memory.mem_kind = PD_MEM_DEVICE;
    ev.device = device_id >= 0 ? (uint32_t)device_id : 0;
  } else if (device_type == 0) {
    ev.u.memory.mem_kind = PD_MEM_PAGEABLE;
  } else {
    ev.u.memory.mem_kind = PD_MEM_UNKNOWN;
  }
  return pd_trace_add(cv->out, &ev);
}

/* Returns 1 when the entry became an event, 0 when skipped, or a PD_E* code. */
static int convert_entry(conv_t *cv, const cJSON *e) {
  if (!cJSON_IsObject(e)) return 0;
  const char *ph = NULL, *cat = NULL, *name = NULL;
  const cJSON *pid = NULL, *tid = NULL, *args = NULL;
  double ts = NAN, dur = 0;
  for (const cJSON *f = e->child; f != NULL; f = f->next) {
    const char *k = f->string;
    switch (k[0]) {
    case 'p':
      if (strcmp(k, "ph") == 0 && cJSON_IsString(f)) ph = f->valuestring;
      else if (strcmp(k, "pid") == 0) pid = f;
      break;
    case 'c':
      if (strcmp(k, "cat") == 0 && cJSON_IsString(f)) cat = f->valuestring;
      break;
    case 'n':
      if (strcmp(k, "name") == 0 && cJSON_IsString(f)) name = f->valuestring;
      break;
    case 't':
      if (strcmp(k, "tid") == 0) tid = f;
      else if (strcmp(k, "ts") == 0) (void)num_of(f, &ts);
      break;
    case 'd':
      if (strcmp(k, "dur") == 0) (void)num_of(f, &dur);
      break;
    case 'a':
      if (strcmp(k, "args") == 0 && cJSON_IsObject(f)) args = f;
      break;
    default:
      break;
    }
  }
  if (ph == NULL || isnan(ts)) return 0;
  if ((ph[0] == 'i' || ph[0] == 'I') && ph[1] == 0) {
    if (cat != NULL && strcmp(cat, "cpu_instant_event") == 0 && name != NULL && strcmp(name, "[memory]") == 0) {
      int rc = convert_memory(cv, pid, tid, ts, args);
      return rc == 0 ? 1 : rc;
    }
    return 0;
  }
  if (ph[0] != 'X' || ph[1] != 0) return 0;
  int kind = kind_of_cat(cat);
  if (kind < 0) return 0;
  int rc = convert_x(cv, (pd_event_kind_t)kind, name, pid, tid, ts, dur, args);
  return rc == 0 ? 1 : rc;
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

static void read_device(const cJSON *d, pd_device_props_t *p) {
  memset(p, 0, sizeof(*p));
  static const struct {
    const char *key;
    size_t off;
  } ints[] = {
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
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    *(int *)((char *)p + ints[i].off) = (int)i64_of(cJSON_GetObjectItemCaseSensitive(d, ints[i].key), 0);
  p->total_global_mem = (uint64_t)i64_of(cJSON_GetObjectItemCaseSensitive(d, "totalGlobalMem"), 0);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
  if (cJSON_IsString(name)) snprintf(p->name, sizeof p->name, "%s", name->valuestring);
}

static int convert_document(const cJSON *root, const char *label, pd_trace_t *out, pd_trace_info_t *info,
                            char *err, size_t errlen) {
  const cJSON *events = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "traceEvents") : NULL;
  if (!cJSON_IsArray(events)) {
    set_err(err, errlen, "'%s' has no traceEvents array (not a Chrome trace)", label);
    return PD_EPARSE;
  }
  info->base_time_ns = i64_of(cJSON_GetObjectItemCaseSensitive(root, "baseTimeNanoseconds"), 0);
  info->schema_version = (int)i64_of(cJSON_GetObjectItemCaseSensitive(root, "schemaVersion"), -1);
  const cJSON *tn = cJSON_GetObjectItemCaseSensitive(root, "traceName");
  if (cJSON_IsString(tn)) snprintf(info->trace_name, sizeof info->trace_name, "%s", tn->valuestring);

  int rc = 0;
  const cJSON *devs = cJSON_GetObjectItemCaseSensitive(root, "deviceProperties");
  for (const cJSON *d = cJSON_IsArray(devs) ? devs->child : NULL; d != NULL && rc == 0; d = d->next) {
    if (!cJSON_IsObject(d)) continue;
    pd_device_props_t p;
    read_device(d, &p);
    rc = pd_trace_add_device(out, &p);
  }

  conv_t cv = {.out = out, .info = info};
  cv.torch = cJSON_GetObjectItemCaseSensitive(root, "trace_id") != NULL;
  for (const cJSON *e = events->child; e != NULL && rc == 0; e = e->next) {
    info->json_events++;
    int r = convert_entry(&cv, e);
    if (r < 0) rc = r;
    else if (r == 0) info->skipped++;
  }
  free(cv.shape.s);
  if (rc != 0) {
    set_err(err, errlen, "cannot read '%s': %s", label, pd_strerror(rc));
    return rc;
  }
  info->torch = cv.torch;
  pd_trace_sort(out);
  if ((rc = fill_depths(out)) != 0) {
    set_err(err, errlen, "cannot read '%s': %s", label, pd_strerror(rc));
    return rc;
  }
  const pd_event_t *ev = pd_trace_events(out);
  for (size_t i = 0, n = pd_trace_count(out); i < n; i++) info->kind_counts[ev[i].kind]++;
  return 0;
}

/* Parses text (freed here when owned: the tree holds its own copies, so the text need
 * not stay alive while the events are made) and converts the tree. */
static int parse_and_convert(char *text, bool owned, size_t len, const char *label, pd_trace_t *out,
                             pd_trace_info_t *info, char *err, size_t errlen) {
  int64_t t0 = pd_clock_now_ns();
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  info->parse_s = seconds_since(t0);
  size_t at = root == NULL && end != NULL && end >= text ? (size_t)(end - text) : 0;
  if (owned) free(text);
  if (root == NULL) {
    if (len == 0) set_err(err, errlen, "'%s' is empty (not JSON)", label);
    else set_err(err, errlen, "'%s' is not valid JSON (parse error near byte %zu)", label, at);
    return PD_EPARSE;
  }
  t0 = pd_clock_now_ns();
  int rc = convert_document(root, label, out, info, err, errlen);
  cJSON_Delete(root);
  info->convert_s = seconds_since(t0);
  return rc;
}

int an_trace_read_buffer_tree(const char *text, size_t len, pd_trace_t *out, pd_trace_info_t *info, char *err,
                         size_t errlen) {
  if (text == NULL || out == NULL) {
    set_err(err, errlen, "invalid argument");
    return PD_EINVAL;
  }
  pd_trace_info_t local;
  if (info == NULL) info = &local;
  memset(info, 0, sizeof(*info));
  info->schema_version = -1;
  info->text_bytes = len;
  pd_trace_reset(out);
  int rc = parse_and_convert((char *)text, false, len, "<buffer>", out, info, err, errlen);
  if (rc != 0) pd_trace_reset(out);
  return rc;
}

int an_trace_read_file_tree(const char *path, pd_trace_t *out, pd_trace_info_t *info, char *err,
                            size_t errlen) {
  if (path == NULL || out == NULL) {
    set_err(err, errlen, "invalid argument");
    return PD_EINVAL;
  }
  pd_trace_info_t local;
  if (info == NULL) info = &local;
  memset(info, 0, sizeof(*info));
  info->schema_version = -1;
  pd_trace_reset(out);

  int64_t t0 = pd_clock_now_ns();
  char *text = NULL;
  size_t len = 0;
  int rc = load_file(path, &text, &len, &info->gzipped, err, errlen);
  info->load_s = seconds_since(t0);
  if (rc != 0) return rc;
  info->text_bytes = len;
  rc = parse_and_convert(text, true, len, path, out, info, err, errlen);
  if (rc != 0) pd_trace_reset(out);
  return rc;
}
