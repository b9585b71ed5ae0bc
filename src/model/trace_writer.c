/* trace_writer.c: the Kineto-compatible Chrome trace writer, and the occupancy estimate
 * it puts in kernel args.
 *
 * The file looks like what torch.profiler (Kineto) writes, so Perfetto, chrome://tracing,
 * torch-tb-profiler and Holistic Trace Analysis open it: a top-level object with
 * schemaVersion, deviceProperties[], displayTimeUnit, baseTimeNanoseconds, traceEvents[]
 * and traceName; "X" events with Kineto's categories and arg keys; ac2g flows from each
 * launching API call ("s") to its GPU activity ("f", "bp":"e"); fwdbwd flows from a
 * layer's forward range to its backward; [memory] instant events; process/thread name
 * metadata so viewers label the rows; each mangled kernel symbol once, in mangledNames.
 *
 * Events are streamed: each is formatted with hand-rolled integer code into a small
 * buffer and handed to the output stream, so a cycle of a million events never sits in
 * memory as JSON. The file goes through the one output writer (pd_out.h): a temporary
 * beside it, fsync'ed and renamed, so a reader never sees half a trace; a path ending in
 * ".gz" is gzipped on the way (torch.profiler's use_gzip), in the same pass.
 *
 * Time: ts values are microseconds since baseTimeNanoseconds (Unix time), formatted by
 * us_text(), the one place that turns nanoseconds into trace microseconds.
 */
#define _GNU_SOURCE /* fwrite_unlocked, program_invocation_short_name */
#include "pd/pd_writers.h"
#include "pd/pd_out.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd/pd_classify.h"
#include "trace_links.h"

/* ---- occupancy ----------------------------------------------------------------------------- */

#define REG_ALLOC_UNIT 256  /* registers are allocated per warp in units of 256 */
#define SMEM_ALLOC_UNIT 128 /* shared memory allocation granularity on sm_80 / sm_90 */
#define SMEM_RESERVED_SM80 1024 /* per-block reserve of sm_80 and newer */

static int round_up(int v, int unit) {
  return (v + unit - 1) / unit * unit;
}

int pd_occupancy_estimate(const pd_device_props_t *dev, int threads_per_block, int regs_per_thread,
                          int smem_per_block, pd_occupancy_t *out) {
  if (dev == NULL || out == NULL || threads_per_block <= 0 || regs_per_thread < 0 || smem_per_block < 0)
    return PD_EINVAL;
  if (dev->warp_size <= 0 || dev->max_threads_per_sm <= 0) return PD_EINVAL;
  memset(out, 0, sizeof(*out));
  int warp = dev->warp_size;
  int max_warps = dev->max_threads_per_sm / warp;
  int warps_per_block = (threads_per_block + warp - 1) / warp;
  out->max_warps_per_sm = max_warps;
  if (dev->max_threads_per_block > 0 && threads_per_block > dev->max_threads_per_block) {
    out->limiter = "threads";
    return 0; /* the launch would fail: zero resident blocks */
  }

  int limit = max_warps / warps_per_block;
  out->limiter = "warps";
  if (dev->max_blocks_per_sm > 0 && dev->max_blocks_per_sm < limit) {
    limit = dev->max_blocks_per_sm;
    out->limiter = "blocks";
  }
  if (regs_per_thread > 0 && dev->max_regs_per_sm > 0) {
    int regs_per_warp = round_up(regs_per_thread * warp, REG_ALLOC_UNIT);
    if (dev->max_regs_per_block > 0 && regs_per_warp * warps_per_block > dev->max_regs_per_block) {
      out->limiter = "registers";
      return 0;
    }
    int by_regs = (dev->max_regs_per_sm / regs_per_warp) / warps_per_block;
    if (by_regs < limit) {
      limit = by_regs;
      out->limiter = "registers";
    }
  }
  if (dev->max_shared_mem_per_sm > 0) {
    int reserved = dev->compute_major >= 8 ? SMEM_RESERVED_SM80 : 0;
    int per_block = round_up(smem_per_block, SMEM_ALLOC_UNIT) + reserved;
    /* Unknown opt-in limit: cap at the SM's memory rather than at the 48 KiB default,
     * so a kernel that did launch with more is not reported as unlaunchable. */
    int block_cap = dev->max_shared_mem_per_block_optin > 0 ? dev->max_shared_mem_per_block_optin
                                                             : dev->max_shared_mem_per_sm;
    if (block_cap > 0 && smem_per_block > block_cap) {
      out->limiter = "shared memory";
      return 0;
    }
    if (per_block > 0) {
      int by_smem = dev->max_shared_mem_per_sm / per_block;
      if (by_smem < limit) {
        limit = by_smem;
        out->limiter = "shared memory";
      }
    }
  }
  out->blocks_per_sm = limit;
  out->warps_per_sm = limit * warps_per_block;
  out->occupancy = max_warps > 0 ? (double)out->warps_per_sm / max_warps : 0;
  return 0;
}

int pd_kernel_launch_stats(const pd_device_props_t *dev, const pd_event_t *kernel,
                           pd_kernel_launch_stats_t *out) {
  if (dev == NULL || kernel == NULL || out == NULL || kernel->kind != PD_EVENT_KERNEL) return PD_EINVAL;
  if (dev->num_sms <= 0 || dev->max_threads_per_sm <= 0) return PD_EINVAL;
  const int32_t *g = kernel->u.kernel.grid, *b = kernel->u.kernel.block;
  double blocks = (double)g[0] * g[1] * g[2];
  int64_t threads = (int64_t)b[0] * b[1] * b[2];
  if (blocks <= 0 || threads <= 0 || threads > INT_MAX) return PD_EINVAL;
  memset(out, 0, sizeof(*out));
  /* Kineto's definitions: grid blocks spread over all SMs, warps of 32 threads */
  out->blocks_per_sm = blocks / dev->num_sms;
  out->warps_per_sm = out->blocks_per_sm * (double)threads / 32.0;
  pd_occupancy_t occ;
  int smem = kernel->u.kernel.static_smem_bytes + kernel->u.kernel.dynamic_smem_bytes;
  int rc = pd_occupancy_estimate(dev, (int)threads, kernel->u.kernel.registers_per_thread, smem, &occ);
  if (rc != 0) return rc;
  /* A grid smaller than the device fills only part of it: resident blocks are the
   * smaller of what the grid offers and what the limits allow. */
  double resident = out->blocks_per_sm < occ.blocks_per_sm ? out->blocks_per_sm : occ.blocks_per_sm;
  double achieved = resident * (double)threads / dev->max_threads_per_sm;
  out->est_achieved_occupancy_pct = (int)(0.5 + achieved * 100.0);
  return 0;
}

/* ---- number formatting ------------------------------------------------------------------------- */

/* Writes v in decimal at p, returns the end. */
static char *put_u64(char *p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = tmp[--n];
  return p;
}

static char *put_i64(char *p, int64_t v) {
  if (v < 0) {
    *p++ = '-';
    return put_u64(p, (uint64_t)0 - (uint64_t)v);
  }
  return put_u64(p, (uint64_t)v);
}

/* THE nanoseconds -> trace microseconds conversion: ns as "123456.789" (us with exactly
 * three decimals, as Kineto writes them). Every ts and dur goes through here. */
static char *us_text(char *p, int64_t ns) {
  uint64_t mag;
  if (ns < 0) {
    *p++ = '-';
    mag = (uint64_t)0 - (uint64_t)ns;
  } else {
    mag = (uint64_t)ns;
  }
  p = put_u64(p, mag / 1000);
  unsigned frac = (unsigned)(mag % 1000);
  p[0] = '.';
  p[1] = (char)('0' + frac / 100);
  p[2] = (char)('0' + frac / 10 % 10);
  p[3] = (char)('0' + frac % 10);
  return p + 4;
}

/* v with up to six decimals, trailing zeros dropped (Kineto prints floats with ~6
 * significant decimals); non-finite or absurd values print as 0. */
static char *put_fixed6(char *p, double v) {
  if (!isfinite(v) || fabs(v) > 9e12) return put_u64(p, 0);
  int64_t scaled = llround(v * 1e6);
  if (scaled < 0) {
    *p++ = '-';
    scaled = -scaled;
  }
  p = put_u64(p, (uint64_t)scaled / 1000000);
  unsigned frac = (unsigned)((uint64_t)scaled % 1000000);
  if (frac != 0) {
    char d[6];
    for (int i = 5; i >= 0; i--) {
      d[i] = (char)('0' + frac % 10);
      frac /= 10;
    }
    int n = 6;
    while (n > 0 && d[n - 1] == '0') n--;
    *p++ = '.';
    memcpy(p, d, (size_t)n);
    p += n;
  }
  return p;
}

#define PUT_LIT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) + sizeof(lit) - 1)

/* ---- small sets --------------------------------------------------------------------------------- */

/* Open-addressing set of uint64 keys (0 is stored by a flag). */
typedef struct {
  uint64_t *keys;
  size_t n, used;
  bool has_zero;
} u64set_t;

static bool u64set_has(const u64set_t *s, uint64_t k) {
  if (k == 0) return s->has_zero;
  if (s->n == 0) return false;
  size_t j = pd_hash_u64(k) & (s->n - 1);
  while (s->keys[j] != 0) {
    if (s->keys[j] == k) return true;
    j = (j + 1) & (s->n - 1);
  }
  return false;
}

/* Returns 1 when added, 0 when present, PD_ENOMEM. */
static int u64set_add(u64set_t *s, uint64_t k) {
  if (k == 0) {
    if (s->has_zero) return 0;
    s->has_zero = true;
    return 1;
  }
  if ((s->used + 1) * 2 > s->n) {
    size_t n = s->n ? s->n * 2 : 64;
    uint64_t *keys = calloc(n, sizeof(*keys));
    if (keys == NULL) return PD_ENOMEM;
    for (size_t i = 0; i < s->n; i++) {
      if (s->keys[i] == 0) continue;
      size_t j = pd_hash_u64(s->keys[i]) & (n - 1);
      while (keys[j] != 0) j = (j + 1) & (n - 1);
      keys[j] = s->keys[i];
    }
    free(s->keys);
    s->keys = keys;
    s->n = n;
  }
  size_t j = pd_hash_u64(k) & (s->n - 1);
  while (s->keys[j] != 0) {
    if (s->keys[j] == k) return 0;
    j = (j + 1) & (s->n - 1);
  }
  s->keys[j] = k;
  s->used++;
  return 1;
}

static void u64set_free(u64set_t *s) {
  free(s->keys);
  memset(s, 0, sizeof(*s));
}

/* The distinct mangled kernel names of a trace, each with the name the trace shows,
 * in first-seen order: written once, at the end, as the top-level "mangledNames". */
typedef struct {
  char **mangled, **shown;
  size_t n, cap;
  int32_t *slots; /* open addressing: index into mangled, -1 empty */
  size_t nslots;
} nameset_t;

static uint64_t str_hash(const char *s) { return pd_hash_u64(pd_hash_bytes(s, strlen(s), 0)); }

static int nameset_grow(nameset_t *t) {
  size_t n = t->nslots ? t->nslots * 2 : 64;
  int32_t *slots = malloc(n * sizeof(*slots));
  if (slots == NULL) return PD_ENOMEM;
  for (size_t i = 0; i < n; i++) slots[i] = -1;
  for (size_t i = 0; i < t->n; i++) {
    size_t j = str_hash(t->mangled[i]) & (n - 1);
    while (slots[j] >= 0) j = (j + 1) & (n - 1);
    slots[j] = (int32_t)i;
  }
  free(t->slots);
  t->slots = slots;
  t->nslots = n;
  return 0;
}

/* Adds (mangled, shown) unless mangled is there. Returns 0 or PD_ENOMEM. */
static int nameset_add(nameset_t *t, const char *mangled, const char *shown) {
  if ((t->n + 1) * 2 > t->nslots && nameset_grow(t) != 0) return PD_ENOMEM;
  size_t j = str_hash(mangled) & (t->nslots - 1);
  for (; t->slots[j] >= 0; j = (j + 1) & (t->nslots - 1))
    if (strcmp(t->mangled[t->slots[j]], mangled) == 0) return 0;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 32;
    char **m = realloc(t->mangled, cap * sizeof(*m));
    if (m == NULL) return PD_ENOMEM;
    t->mangled = m;
    char **sh = realloc(t->shown, cap * sizeof(*sh));
    if (sh == NULL) return PD_ENOMEM;
    t->shown = sh;
    t->cap = cap;
  }
  char *a = strdup(mangled), *b = strdup(shown);
  if (a == NULL || b == NULL) {
    free(a);
    free(b);
    return PD_ENOMEM;
  }
  t->mangled[t->n] = a;
  t->shown[t->n] = b;
  t->slots[j] = (int32_t)t->n++;
  return 0;
}

static void nameset_free(nameset_t *t) {
  for (size_t i = 0; i < t->n; i++) {
    free(t->mangled[i]);
    free(t->shown[i]);
  }
  free(t->mangled);
  free(t->shown);
  free(t->slots);
  memset(t, 0, sizeof(*t));
}

/* ---- the writer ----------------------------------------------------------------------------------- */

#define GPU_SORT_INDEX_BASE 5000000 /* Kineto sorts GPU rows below the host's */

struct pd_trace_writer {
  FILE *f;        /* pd_out_stream(out) */
  pd_out_t *out;  /* the output being written */
  char *trace_name;
  char *process_name;
  uint32_t pid;
  bool profile_memory;
  int64_t unix_offset_ns;
  int64_t base_ns; /* baseTimeNanoseconds: Unix ns that ts values count from */
  pd_device_props_t *devices;
  size_t ndevices;
  size_t nevents; /* traceEvents entries written (for the separators) */
  u64set_t pids;  /* pids that have process metadata */
  u64set_t rows;  /* (pid, tid) rows that have thread metadata */
  nameset_t mangled; /* mangled kernel names -> shown names, for "mangledNames" */
  /* Flow filter for pd_trace_write_file(): correlation ids seen on both sides. NULL
   * when streaming: every correlated event then gets its flow half. */
  const u64set_t *flows;
  pd_links_t *links; /* External ids and GPU spans; NULL unless meta->links */
  pd_nest_t *nest;   /* per-row nesting guard: the dur written for a child (trace_links.h) */
  /* The next GPU activity on the stream of the event being written, set by
   * pd_trace_write_file() (NULL: none or unknown, as when streaming). */
  const pd_event_t *next_gpu;
  uint64_t ev_idx;   /* "Ev Idx" of the next host range or memory record (links) */
  uint64_t nops;     /* host ranges written: the trace span's "Op count" */
  int64_t first_ns, last_ns; /* extent of the events (trace ns), for the trace span */
  bool any_event;
  int err; /* first error; later writes are skipped */
};

static void put_raw(pd_trace_writer_t *w, const char *s, size_t n) {
  if (fwrite_unlocked(s, 1, n, w->f) != n && w->err == 0) w->err = PD_EIO;
}
#define PUT_RAW_LIT(w, lit) put_raw((w), (lit), sizeof(lit) - 1)

/* Starts the next traceEvents entry: a separator unless it is the first. */
static void begin_entry(pd_trace_writer_t *w) {
  if (w->nevents++ > 0) PUT_RAW_LIT(w, ",\n");
  else PUT_RAW_LIT(w, "\n");
}

static void put_name(pd_trace_writer_t *w, const char *name) {
  pd_json_write_string(w->f, name ? name : "");
}

static const pd_device_props_t *find_device(const pd_trace_writer_t *w, uint32_t id) {
  for (size_t i = 0; i < w->ndevices; i++)
    if ((uint32_t)w->devices[i].id == id) return &w->devices[i];
  return NULL;
}

static void write_process_meta(pd_trace_writer_t *w, uint32_t pid, bool device) {
  char label[48];
  const char *name;
  int64_t sort_index;
  if (device) {
    snprintf(label, sizeof label, "GPU %u", pid);
    name = label;
    sort_index = GPU_SORT_INDEX_BASE + (int64_t)pid;
  } else {
    snprintf(label, sizeof label, "CPU");
    name = pid == w->pid ? w->process_name : "process";
    sort_index = pid;
  }
  char buf[160], *p;
  begin_entry(w);
  p = PUT_LIT(buf, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":0,\"args\":{\"name\":");
  put_raw(w, buf, (size_t)(p - buf));
  put_name(w, name);
  PUT_RAW_LIT(w, "}}");
  begin_entry(w);
  p = PUT_LIT(buf, "{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":0,\"args\":{\"labels\":");
  put_raw(w, buf, (size_t)(p - buf));
  put_name(w, label);
  PUT_RAW_LIT(w, "}}");
  begin_entry(w);
  p = PUT_LIT(buf, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":0,\"args\":{\"sort_index\":");
  p = put_i64(p, sort_index);
  p = PUT_LIT(p, "}}");
  put_raw(w, buf, (size_t)(p - buf));
}

typedef enum { ROW_HOST, ROW_STREAM, ROW_SYNC, ROW_OVERLAP } row_kind_t;

/* Process and thread name metadata the first time a row appears: "thread <tid>",
 * "stream <id>", "stream <id> (sync)" (Kineto's) or "stream <id> (overlap)", the last
 * two sorted with their stream. */
static void note_row(pd_trace_writer_t *w, uint32_t pid, uint32_t tid, row_kind_t kind) {
  bool device = kind != ROW_HOST;
  int added = u64set_add(&w->pids, pid);
  if (added < 0) {
    w->err = added;
    return;
  }
  if (added) write_process_meta(w, pid, device);
  added = u64set_add(&w->rows, ((uint64_t)pid << 32) | tid);
  if (added < 0) {
    w->err = added;
    return;
  }
  if (!added) return;
  char buf[320], *p; /* two metadata entries with 10-digit ids: under 240 bytes */
  begin_entry(w);
  p = PUT_LIT(buf, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":");
  p = put_u64(p, tid);
  uint32_t shown = kind == ROW_SYNC      ? tid - PD_TRACE_SYNC_TID_OFFSET
                  : kind == ROW_OVERLAP ? tid - PD_TRACE_OVERLAP_TID_OFFSET
                                        : tid;
  p = device ? PUT_LIT(p, ",\"args\":{\"name\":\"stream ") : PUT_LIT(p, ",\"args\":{\"name\":\"thread ");
  p = put_u64(p, shown);
  if (kind == ROW_SYNC) p = PUT_LIT(p, " (sync)");
  if (kind == ROW_OVERLAP) p = PUT_LIT(p, " (overlap)");
  p = PUT_LIT(p, "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":");
  p = put_u64(p, tid);
  p = PUT_LIT(p, ",\"args\":{\"sort_index\":");
  p = put_u64(p, shown);
  p = PUT_LIT(p, "}}");
  w->nevents++; /* two entries in this buffer */
  put_raw(w, buf, (size_t)(p - buf));
}

static void write_device_props(pd_trace_writer_t *w, const pd_device_props_t *d, bool first) {
  char buf[768], *p = buf;
  if (!first) p = PUT_LIT(p, ",");
  p = PUT_LIT(p, "\n    {\"id\":");
  p = put_i64(p, d->id);
  p = PUT_LIT(p, ",\"name\":");
  put_raw(w, buf, (size_t)(p - buf));
  put_name(w, d->name);
  p = PUT_LIT(buf, ",\"totalGlobalMem\":");
  p = put_u64(p, d->total_global_mem);
  p = PUT_LIT(p, ",\"computeMajor\":");
  p = put_i64(p, d->compute_major);
  p = PUT_LIT(p, ",\"computeMinor\":");
  p = put_i64(p, d->compute_minor);
  p = PUT_LIT(p, ",\"maxThreadsPerBlock\":");
  p = put_i64(p, d->max_threads_per_block);
  p = PUT_LIT(p, ",\"maxThreadsPerMultiprocessor\":");
  p = put_i64(p, d->max_threads_per_sm);
  p = PUT_LIT(p, ",\"regsPerBlock\":");
  p = put_i64(p, d->max_regs_per_block);
  p = PUT_LIT(p, ",\"regsPerMultiprocessor\":");
  p = put_i64(p, d->max_regs_per_sm);
  p = PUT_LIT(p, ",\"warpSize\":");
  p = put_i64(p, d->warp_size);
  p = PUT_LIT(p, ",\"sharedMemPerBlock\":");
  p = put_i64(p, d->max_shared_mem_per_block);
  p = PUT_LIT(p, ",\"sharedMemPerMultiprocessor\":");
  p = put_i64(p, d->max_shared_mem_per_sm);
  p = PUT_LIT(p, ",\"numSms\":");
  p = put_i64(p, d->num_sms);
  if (d->max_shared_mem_per_block_optin > 0) { /* left out when the source did not say */
    p = PUT_LIT(p, ",\"sharedMemPerBlockOptin\":");
    p = put_i64(p, d->max_shared_mem_per_block_optin);
  }
  p = PUT_LIT(p, ",\"maxBlocksPerMultiprocessor\":");
  p = put_i64(p, d->max_blocks_per_sm);
  p = PUT_LIT(p, "}");
  put_raw(w, buf, (size_t)(p - buf));
}

/* A trace id as Kineto writes one: 32 upper-case hex digits, from the process, the
 * trace's base time and the clock now, so two traces of one run differ. */
static char *put_trace_id(char *p, const pd_trace_writer_t *w) {
  uint64_t a = pd_hash_u64((uint64_t)w->base_ns ^ ((uint64_t)w->pid << 32));
  uint64_t b = pd_hash_u64((uint64_t)pd_clock_now_ns() ^ (uint64_t)(uintptr_t)w ^ a);
  static const char hex[] = "0123456789ABCDEF";
  for (int i = 60; i >= 0; i -= 4) *p++ = hex[(a >> i) & 15];
  for (int i = 60; i >= 0; i -= 4) *p++ = hex[(b >> i) & 15];
  return p;
}

/* The top-level keys torch.profiler writes after deviceProperties: the trace id (with
 * links), the profiler's settings, the CUDA/CUPTI versions it knows, and
 * distributedInfo (one process: rank 0 of 1, which HTA needs to place the trace). */
static void write_top_level(pd_trace_writer_t *w, const pd_trace_meta_t *meta) {
  char buf[512], *p = buf;
  if (w->links != NULL) {
    p = PUT_LIT(p, "\n  \"trace_id\": \"");
    p = put_trace_id(p, w);
    p = PUT_LIT(p, "\",");
  }
  p = PUT_LIT(p, "\n  \"profile_memory\": ");
  p = put_u64(p, w->profile_memory ? 1 : 0);
  p = PUT_LIT(p, ",\n  \"record_shapes\": ");
  p = put_u64(p, meta != NULL && meta->record_shapes ? 1 : 0);
  p = PUT_LIT(p, ",");
  if (meta != NULL && meta->cuda_driver_version > 0) {
    p = PUT_LIT(p, "\n  \"cuda_driver_version\": ");
    p = put_i64(p, meta->cuda_driver_version);
    p = PUT_LIT(p, ",");
  }
  if (meta != NULL && meta->cuda_runtime_version > 0) {
    p = PUT_LIT(p, "\n  \"cuda_runtime_version\": ");
    p = put_i64(p, meta->cuda_runtime_version);
    p = PUT_LIT(p, ",");
  }
  if (meta != NULL && meta->cupti_version > 0) {
    p = PUT_LIT(p, "\n  \"cupti_version\": ");
    p = put_i64(p, meta->cupti_version);
    p = PUT_LIT(p, ",");
  }
  p = PUT_LIT(p, "\n  \"distributedInfo\": {\"rank\": 0, \"world_size\": 1},");
  /* Which writer made the file: a reader tells our traces from torch.profiler's by it
   * (both carry trace_id and External id). */
  p = PUT_LIT(p, "\n  \"traceWriter\": \"profiler_demo " PD_VERSION_STRING "\",");
  /* What this writer's output looks like (PD_TRACE_FORMAT_VERSION): readers and the
   * fixture test go by it, not by the program's version. */
  p = PUT_LIT(p, "\n  \"traceFormatVersion\": ");
  p = put_u64(p, PD_TRACE_FORMAT_VERSION);
  p = PUT_LIT(p, ",");
  put_raw(w, buf, (size_t)(p - buf));
  /* The program's own per-step range (pd_run --step_range): a reader keeps it apart from
   * the ops (pd_trace_set_step_range). */
  if (meta != NULL && meta->step_range != NULL && meta->step_range[0] != '\0') {
    PUT_RAW_LIT(w, "\n  \"stepRange\": ");
    put_name(w, meta->step_range);
    PUT_RAW_LIT(w, ",");
  }
  /* What recording this cycle cost (pd_prof_cost_t), so the trace says how much of its
   * steps is the profiler. */
  if (meta != NULL && meta->cost != NULL) {
    cJSON *cost = pd_prof_cost_to_json(meta->cost, 0.0);
    char *text = cost != NULL ? cJSON_PrintUnformatted(cost) : NULL;
    cJSON_Delete(cost);
    if (text != NULL) {
      PUT_RAW_LIT(w, "\n  \"profilerCost\": ");
      put_raw(w, text, strlen(text));
      PUT_RAW_LIT(w, ",");
      cJSON_free(text);
    }
  }
}

static char *dup_str(const char *s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s) + 1;
  char *c = malloc(n);
  if (c != NULL) memcpy(c, s, n);
  return c;
}

static void writer_free(pd_trace_writer_t *w) {
  if (w == NULL) return;
  pd_out_abort(w->out); /* NULL once committed */
  free(w->trace_name);
  free(w->process_name);
  free(w->devices);
  u64set_free(&w->pids);
  u64set_free(&w->rows);
  nameset_free(&w->mangled);
  pd_links_destroy(w->links);
  pd_nest_destroy(w->nest);
  free(w);
}

/* pd_trace_writer_open() with the trace's first event time (clock ns) when known (first:
 * NULL when not). */
static int writer_open(const char *path, const pd_trace_meta_t *meta, const pd_device_props_t *devices,
                       size_t ndevices, const int64_t *first, pd_trace_writer_t **out) {
  if (out != NULL) *out = NULL;
  if (path == NULL || path[0] == 0 || out == NULL || (ndevices > 0 && devices == NULL)) return PD_EINVAL;
  pd_trace_writer_t *w = calloc(1, sizeof(*w));
  if (w == NULL) return PD_ENOMEM;
  w->trace_name = dup_str(meta && meta->trace_name ? meta->trace_name : path);
  const char *pname = meta && meta->process_name ? meta->process_name : program_invocation_short_name;
  w->process_name = dup_str(pname ? pname : "process");
  if (ndevices > 0) w->devices = malloc(ndevices * sizeof(*devices));
  w->nest = pd_nest_create();
  if (w->trace_name == NULL || w->process_name == NULL || (ndevices > 0 && w->devices == NULL) || w->nest == NULL) {
    writer_free(w);
    return PD_ENOMEM;
  }
  if (ndevices > 0) memcpy(w->devices, devices, ndevices * sizeof(*devices));
  w->ndevices = ndevices;
  w->pid = meta ? meta->pid : (uint32_t)getpid();
  w->profile_memory = meta ? meta->profile_memory : false;
  w->unix_offset_ns = meta ? meta->unix_offset_ns : 0;
  if (meta != NULL && meta->links && (w->links = pd_links_create()) == NULL) {
    writer_free(w);
    return PD_ENOMEM;
  }
  /* Base time: a whole second, as Kineto's base is a round number, at or before every
   * event: the Unix time of the first event rounded down where the whole trace is known,
   * else the Unix offset rounded down (ts then stay positive: the clock is
   * CLOCK_MONOTONIC, >= 0). From the first event, ts stay within the trace's length plus
   * a second, where float64 holds three-decimal microseconds to 1e-10 us; from the offset
   * they grow with the host's uptime (2^41 us after 25 days, where its error nears a
   * nanosecond and readers' ts + dur could reorder the ends the nesting guard keeps
   * apart). */
  int64_t anchor = w->unix_offset_ns;
  if (first != NULL && *first >= 0 && __builtin_add_overflow(w->unix_offset_ns, *first, &anchor)) anchor = w->unix_offset_ns;
  int64_t sec = anchor / 1000000000LL;
  if (anchor < 0 && anchor % 1000000000LL != 0) sec--;
  w->base_ns = sec * 1000000000LL;

  size_t plen = strlen(path);
  unsigned oflags = plen > 3 && strcmp(path + plen - 3, ".gz") == 0 ? PD_OUT_GZIP : 0;
  int orc = pd_out_open(path, oflags, &w->out);
  if (orc != 0) {
    writer_free(w);
    return orc;
  }
  w->f = pd_out_stream(w->out);

  char buf[128], *p;
  PUT_RAW_LIT(w, "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [");
  for (size_t i = 0; i < ndevices; i++) write_device_props(w, &devices[i], i == 0);
  PUT_RAW_LIT(w, "\n  ],");
  write_top_level(w, meta);
  PUT_RAW_LIT(w, "\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": ");
  p = put_i64(buf, w->base_ns);
  p = PUT_LIT(p, ",\n  \"traceEvents\": [");
  put_raw(w, buf, (size_t)(p - buf));
  /* Rows for the host process and every known device, before any event. */
  if (u64set_add(&w->pids, w->pid) > 0) write_process_meta(w, w->pid, false);
  for (size_t i = 0; i < ndevices; i++)
    if (u64set_add(&w->pids, (uint32_t)devices[i].id) > 0) write_process_meta(w, (uint32_t)devices[i].id, true);
  if (w->err != 0) {
    int rc = w->err;
    pd_trace_writer_abort(w);
    return rc;
  }
  *out = w;
  return 0;
}

int pd_trace_writer_open(const char *path, const pd_trace_meta_t *meta,
                         const pd_device_props_t *devices, size_t ndevices,
                         pd_trace_writer_t **out) {
  return writer_open(path, meta, devices, ndevices, NULL, out);
}

static bool is_activity(pd_event_kind_t k) {
  return k == PD_EVENT_KERNEL || k == PD_EVENT_MEMCPY || k == PD_EVENT_MEMSET;
}

static bool is_gpu_row(pd_event_kind_t k) {
  return k == PD_EVENT_KERNEL || k == PD_EVENT_MEMCPY || k == PD_EVENT_MEMSET ||
         k == PD_EVENT_GPU_RANGE || k == PD_EVENT_SYNC;
}

static const char *sync_name(pd_sync_kind_t k) {
  switch (k) {
  case PD_SYNC_EVENT: return "Event Sync";
  case PD_SYNC_STREAM_WAIT_EVENT: return "Stream Wait Event";
  case PD_SYNC_STREAM: return "Stream Sync";
  case PD_SYNC_CONTEXT: return "Context Sync";
  case PD_SYNC_UNKNOWN: break;
  }
  return "Unknown Sync";
}

/* Shapes that already are JSON arrays of integers ("[[64, 3, 32, 32], []]") are written
 * as arrays, as Kineto's "Input Dims"; anything else as a string. */
static bool shape_is_int_array(const char *s) {
  if (s == NULL || s[0] != '[') return false;
  int depth = 0;
  for (const char *p = s; *p; p++) {
    char c = *p;
    if (c == '[') depth++;
    else if (c == ']') {
      if (--depth < 0) return false;
      if (depth == 0 && p[1] != 0) return false;
    } else if (!((c >= '0' && c <= '9') || c == ',' || c == ' ' || c == '-')) {
      return false;
    }
  }
  return depth == 0;
}

/* The flow half of a correlated event, unless the writer filters flows out. */
static bool wants_flow(const pd_trace_writer_t *w, uint64_t corr) {
  return corr != 0 && (w->flows == NULL || u64set_has(w->flows, corr));
}

/* ---- one event ---------------------------------------------------------------------------------- */

/* What the links give an event: its External id (0: none) and, for host ranges and
 * memory records, its Ev Idx. */
typedef struct {
  uint64_t ext_id;
  bool has_idx;
  uint64_t ev_idx;
} event_links_t;

static event_links_t link_event(pd_trace_writer_t *w, const pd_event_t *ev) {
  event_links_t lk = {0, false, 0};
  if (w->links == NULL) return lk;
  switch (ev->kind) {
  case PD_EVENT_RANGE:
  case PD_EVENT_CPU_OP:
    lk.ext_id = pd_links_range(w->links, ev);
    lk.has_idx = true;
    break;
  case PD_EVENT_RUNTIME:
  case PD_EVENT_DRIVER:
    lk.ext_id = pd_links_call(w->links, ev);
    break;
  case PD_EVENT_KERNEL:
  case PD_EVENT_MEMCPY:
  case PD_EVENT_MEMSET:
  case PD_EVENT_SYNC:
    lk.ext_id = pd_links_activity(w->links, ev);
    break;
  case PD_EVENT_MEMORY:
    lk.has_idx = true;
    break;
  default:
    break;
  }
  if (lk.has_idx) lk.ev_idx = w->ev_idx++;
  if (pd_links_error(w->links) != 0 && w->err == 0) w->err = pd_links_error(w->links);
  return lk;
}

static char *put_ext_id(char *p, uint64_t ext_id) {
  if (ext_id == 0) return p;
  p = PUT_LIT(p, "\"External id\":");
  p = put_u64(p, ext_id);
  return PUT_LIT(p, ",");
}

/* device, stream, correlation: the args every GPU record starts with. Kineto also writes
 * the CUDA context id; we leave it out: the runtime uses one (primary) context per device,
 * which "device" names already, and neither torch-tb-profiler nor HTA reads it. */
static char *put_gpu_ids(char *p, const pd_event_t *ev) {
  p = PUT_LIT(p, "\"device\":");
  p = put_u64(p, ev->device);
  p = PUT_LIT(p, ",\"stream\":");
  p = put_u64(p, ev->stream);
  p = PUT_LIT(p, ",\"correlation\":");
  return put_u64(p, ev->correlation_id);
}

/* Kernel args, Kineto's keys in Kineto's order. "queued" is CUPTI's queued timestamp,
 * which CUPTI fills only with latency timestamps on (we leave them off: they cost on
 * every launch); Kineto writes CUPTI's value as is, 0 when it is unknown, and so do we. */
static char *put_kernel_args(pd_trace_writer_t *w, char *p, const pd_event_t *ev) {
  p = PUT_LIT(p, "\"queued\":0,");
  p = put_gpu_ids(p, ev);
  p = PUT_LIT(p, ",\"registers per thread\":");
  p = put_i64(p, ev->u.kernel.registers_per_thread);
  p = PUT_LIT(p, ",\"shared memory\":");
  p = put_i64(p, (int64_t)ev->u.kernel.static_smem_bytes + ev->u.kernel.dynamic_smem_bytes);
  pd_kernel_launch_stats_t ls;
  const pd_device_props_t *dev = find_device(w, ev->device);
  bool have_stats = dev != NULL && pd_kernel_launch_stats(dev, ev, &ls) == 0;
  if (have_stats) {
    p = PUT_LIT(p, ",\"blocks per SM\":");
    p = put_fixed6(p, ls.blocks_per_sm);
    p = PUT_LIT(p, ",\"warps per SM\":");
    p = put_fixed6(p, ls.warps_per_sm);
  }
  p = PUT_LIT(p, ",\"grid\":[");
  for (int i = 0; i < 3; i++) {
    if (i) *p++ = ',';
    p = put_i64(p, ev->u.kernel.grid[i]);
  }
  p = PUT_LIT(p, "],\"block\":[");
  for (int i = 0; i < 3; i++) {
    if (i) *p++ = ',';
    p = put_i64(p, ev->u.kernel.block[i]);
  }
  p = PUT_LIT(p, "]");
  if (have_stats) {
    p = PUT_LIT(p, ",\"est. achieved occupancy %\":");
    p = put_i64(p, ls.est_achieved_occupancy_pct);
  }
  return PUT_LIT(p, "}}");
}

static char *put_copy_args(char *p, const pd_event_t *ev, int64_t dur_ns) {
  uint64_t bytes = ev->kind == PD_EVENT_MEMCPY ? ev->u.memcpy.bytes : ev->u.memset.bytes;
  p = put_gpu_ids(p, ev);
  p = PUT_LIT(p, ",\"bytes\":");
  p = put_u64(p, bytes);
  /* bytes per nanosecond is GB/s */
  p = PUT_LIT(p, ",\"memory bandwidth (GB/s)\":");
  p = put_fixed6(p, dur_ns > 0 ? (double)bytes / (double)dur_ns : 0.0);
  return PUT_LIT(p, "}}");
}

/* [memory] args as torch writes them. Our allocations are plain cudaMalloc-style calls
 * with no caching allocator in between, so what is reserved is what is allocated:
 * "Total Reserved" repeats "Total Allocated" (torch-tb-profiler's memory curves need it). */
static char *put_memory_args(char *p, const pd_event_t *ev, const event_links_t *lk) {
  bool on_device = ev->u.memory.mem_kind != PD_MEM_PAGEABLE && ev->u.memory.mem_kind != PD_MEM_PINNED;
  if (ev->u.memory.total_allocated >= 0) {
    p = PUT_LIT(p, "\"Total Reserved\":");
    p = put_i64(p, ev->u.memory.total_allocated);
    p = PUT_LIT(p, ",\"Total Allocated\":");
    p = put_i64(p, ev->u.memory.total_allocated);
    p = PUT_LIT(p, ",");
  }
  p = PUT_LIT(p, "\"Bytes\":");
  p = put_i64(p, ev->u.memory.bytes);
  p = PUT_LIT(p, ",\"Device Id\":");
  p = on_device ? put_u64(p, ev->device) : PUT_LIT(p, "-1");
  /* c10::DeviceType: 0 = CPU, 1 = CUDA */
  p = on_device ? PUT_LIT(p, ",\"Device Type\":1") : PUT_LIT(p, ",\"Device Type\":0");
  p = PUT_LIT(p, ",\"Addr\":");
  p = put_u64(p, ev->u.memory.address);
  /* Kineto marks a record that has no end with "finished": false; an instant never has
   * one, so torch writes it on every [memory] record. */
  p = PUT_LIT(p, ",\"finished\":false");
  if (lk->has_idx) {
    p = PUT_LIT(p, ",\"Ev Idx\":");
    p = put_u64(p, lk->ev_idx);
  }
  return PUT_LIT(p, "}}");
}

/* Range args: External id, Ev Idx, Input Dims (an array when the shape text is one),
 * Call stack (torch's text for with_stack: frames innermost first, joined by ';', which
 * torch-tb-profiler's call-stack view splits and links to "file(line)"). */
static char *put_range_args(pd_trace_writer_t *w, char *buf, char *p, const pd_event_t *ev, uint64_t ext_id,
                            const uint64_t *ev_idx) {
  const char *sep = "";
  if (ext_id != 0) {
    p = PUT_LIT(p, "\"External id\":");
    p = put_u64(p, ext_id);
    sep = ",";
  }
  if (ev_idx != NULL) {
    p = *sep ? PUT_LIT(p, ",\"Ev Idx\":") : PUT_LIT(p, "\"Ev Idx\":");
    p = put_u64(p, *ev_idx);
    sep = ",";
  }
  if (ev->kind != PD_EVENT_GPU_RANGE && ev->u.range.shape != NULL) {
    p = *sep ? PUT_LIT(p, ",\"Input Dims\":") : PUT_LIT(p, "\"Input Dims\":");
    put_raw(w, buf, (size_t)(p - buf));
    if (shape_is_int_array(ev->u.range.shape)) put_raw(w, ev->u.range.shape, strlen(ev->u.range.shape));
    else put_name(w, ev->u.range.shape);
    p = buf;
    sep = ",";
  }
  if (ev->kind != PD_EVENT_GPU_RANGE && ev->u.range.stack != NULL) {
    p = *sep ? PUT_LIT(p, ",\"Call stack\":") : PUT_LIT(p, "\"Call stack\":");
    put_raw(w, buf, (size_t)(p - buf));
    put_name(w, ev->u.range.stack);
    p = buf;
  }
  return PUT_LIT(p, "}}");
}

/* {"ph":"X","cat":<cat>,"name":<name>,"pid":..,"tid":..,"ts":..,"dur":..,"args":{
 * written up to the args' first key; returns the end in buf. */
static char *put_x_head(pd_trace_writer_t *w, char *buf, const char *cat, const char *name, uint32_t pid,
                        uint32_t tid, int64_t ts_ns, int64_t dur_ns) {
  char *p = PUT_LIT(buf, "{\"ph\":\"X\",\"cat\":\"");
  size_t n = strlen(cat);
  memcpy(p, cat, n);
  p += n;
  p = PUT_LIT(p, "\",\"name\":");
  put_raw(w, buf, (size_t)(p - buf));
  put_name(w, name);
  p = PUT_LIT(buf, ",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":");
  p = put_u64(p, tid);
  p = PUT_LIT(p, ",\"ts\":");
  p = us_text(p, ts_ns);
  p = PUT_LIT(p, ",\"dur\":");
  p = us_text(p, dur_ns);
  return PUT_LIT(p, ",\"args\":{");
}

/* ac2g flow halves: "s" at the launching call, "f" (binding to the enclosing slice)
 * at the GPU activity, both with the correlation id as flow id. */
static char *put_flow(pd_trace_writer_t *w, char *p, const pd_event_t *ev, uint32_t pid, uint32_t tid,
                      int64_t ts_ns) {
  bool launch = ev->kind == PD_EVENT_RUNTIME || ev->kind == PD_EVENT_DRIVER;
  bool activity = ev->kind == PD_EVENT_KERNEL || ev->kind == PD_EVENT_MEMCPY || ev->kind == PD_EVENT_MEMSET;
  if (!(launch || activity) || !wants_flow(w, ev->correlation_id)) return p;
  p = launch ? PUT_LIT(p, ",\n{\"ph\":\"s\",\"id\":") : PUT_LIT(p, ",\n{\"ph\":\"f\",\"id\":");
  p = put_u64(p, ev->correlation_id);
  p = PUT_LIT(p, ",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":");
  p = put_u64(p, tid);
  p = PUT_LIT(p, ",\"ts\":");
  p = us_text(p, ts_ns);
  p = launch ? PUT_LIT(p, ",\"cat\":\"ac2g\",\"name\":\"ac2g\"}")
             : PUT_LIT(p, ",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}");
  w->nevents++;
  return p;
}

/* torch's fwdbwd flow from a forward range ("s" at its start) to its backward range
 * ("f" at its start, bound to it), both halves at once, so none dangles; the flow id is
 * the forward's External id. */
static void write_fwdbwd(pd_trace_writer_t *w, const pd_fwd_range_t *fwd, uint32_t pid, uint32_t tid,
                         int64_t ts_ns) {
  char buf[320], *p;
  begin_entry(w);
  p = PUT_LIT(buf, "{\"ph\":\"s\",\"id\":");
  p = put_u64(p, fwd->ext_id);
  p = PUT_LIT(p, ",\"pid\":");
  p = put_u64(p, fwd->pid);
  p = PUT_LIT(p, ",\"tid\":");
  p = put_u64(p, fwd->tid);
  p = PUT_LIT(p, ",\"ts\":");
  p = us_text(p, fwd->start_ns + w->unix_offset_ns - w->base_ns);
  p = PUT_LIT(p, ",\"cat\":\"fwdbwd\",\"name\":\"fwdbwd\"},\n{\"ph\":\"f\",\"id\":");
  p = put_u64(p, fwd->ext_id);
  p = PUT_LIT(p, ",\"pid\":");
  p = put_u64(p, pid);
  p = PUT_LIT(p, ",\"tid\":");
  p = put_u64(p, tid);
  p = PUT_LIT(p, ",\"ts\":");
  p = us_text(p, ts_ns);
  p = PUT_LIT(p, ",\"cat\":\"fwdbwd\",\"name\":\"fwdbwd\",\"bp\":\"e\"}");
  w->nevents++; /* two entries in this buffer */
  put_raw(w, buf, (size_t)(p - buf));
}

/* The category an X event is written in (docs/formats.md, "Events"). Each host range is
 * written once, so that one thread's events nest without a tie: ProfilerStep#N and the
 * data wait as user_annotation (torch-tb-profiler finds those by name in either
 * category), every other range as cpu_op (the Operator page, op tree and kernel-to-op
 * table of torch-tb-profiler take ops from cpu_op only; HTA's aten-op and critical-path
 * analyses read cpu_op too). Driver-API kernel launches (cuBLASLt's cuLaunchKernelEx) go
 * under cuda_runtime: torch-tb-profiler reads the launching call of a kernel from that
 * category only. */
static const char *x_category(const pd_event_t *ev, const char *name) {
  if (ev->kind == PD_EVENT_RANGE)
    return ev->u.range.step >= 0 || pd_range_is_data_wait(ev->name) ? pd_event_kind_category(PD_EVENT_RANGE)
                                                                      : pd_event_kind_category(PD_EVENT_CPU_OP);
  if (ev->kind == PD_EVENT_DRIVER && pd_api_name_is_driver_launch(name)) return pd_event_kind_category(PD_EVENT_RUNTIME);
  return pd_event_kind_category(ev->kind);
}

static void note_extent(pd_trace_writer_t *w, int64_t ts_ns, int64_t end_ns) {
  if (!w->any_event || ts_ns < w->first_ns) w->first_ns = ts_ns;
  if (!w->any_event || end_ns > w->last_ns) w->last_ns = end_ns;
  w->any_event = true;
}

int pd_trace_writer_event(pd_trace_writer_t *w, const pd_event_t *ev) {
  if (w == NULL || ev == NULL) return PD_EINVAL;
  if (w->err != 0) return w->err;
  if ((int)ev->kind < 0 || ev->kind >= PD_EVENT_KIND_COUNT) return PD_EINVAL;
  if (ev->kind == PD_EVENT_MEMORY && !w->profile_memory) return 0;

  /* GPU work ends before the next work on its stream starts, with room for the spans that
   * end 1 ns past it per level (trace_links.c) and 1 ns more: readers compute an end from
   * ts + dur, and an end on the next start's nanosecond comes out past it about a third
   * of the time (docs/formats.md). Where the gap is smaller, the work ends earlier, as a
   * host child ending on its parent's nanosecond ends 1 ns before it. */
  pd_event_t trimmed;
  const pd_event_t *next = w->next_gpu;
  if (next != NULL && is_activity(ev->kind) && ev->end_ns <= next->start_ns) {
    int64_t room = pd_links_span_depth(w->links, ev, next) + 1;
    if (next->start_ns - ev->end_ns < room) {
      trimmed = *ev;
      trimmed.end_ns = next->start_ns - room > ev->start_ns ? next->start_ns - room : ev->start_ns;
      ev = &trimmed;
    }
  }

  bool gpu = is_gpu_row(ev->kind);
  uint32_t pid = gpu ? ev->device : ev->pid;
  uint32_t tid = gpu ? ev->stream : ev->tid;
  row_kind_t row = gpu ? ROW_STREAM : ROW_HOST;
  /* Kineto's own row per stream for synchronization: a sync record spans the kernels it
   * waits for, and on the kernels' row it would overlap them in part. */
  if (ev->kind == PD_EVENT_SYNC) {
    tid = ev->stream + PD_TRACE_SYNC_TID_OFFSET;
    row = ROW_SYNC;
  }
  int64_t ts_ns = ev->start_ns + w->unix_offset_ns - w->base_ns;
  int64_t dur_ns = ev->end_ns > ev->start_ns ? ev->end_ns - ev->start_ns : 0;
  /* GPU work that starts before the work ahead of it on its stream has ended (a kernel
   * launched with programmatic dependent launch, as cuBLAS's split-K reduction is) goes
   * to the stream's overlap row: on one row the two would overlap in part, which no
   * viewer that stacks a row can draw (speedscope, Perfetto). args.stream still names
   * the stream. */
  if (row == ROW_STREAM && ev->kind != PD_EVENT_GPU_RANGE && pd_nest_overlaps(w->nest, pid, tid, ts_ns, ts_ns + dur_ns)) {
    tid = ev->stream + PD_TRACE_OVERLAP_TID_OFFSET;
    row = ROW_OVERLAP;
  }
  note_row(w, pid, tid, row);
  if (w->err != 0) return w->err;
  event_links_t lk = link_event(w, ev);
  if (w->err != 0) return w->err;

  char buf[1024], *p;
  char namebuf[1024];
  note_extent(w, ts_ns, ts_ns + dur_ns);
  bool mangled = ev->kind == PD_EVENT_KERNEL && pd_demangle(ev->name, namebuf, sizeof namebuf);
  const char *name = mangled ? namebuf
                     : ev->kind == PD_EVENT_SYNC && ev->name == NULL
                         ? sync_name(ev->u.sync.sync_kind)
                         : pd_event_display_name(ev, namebuf, sizeof namebuf);

  begin_entry(w);
  if (ev->kind == PD_EVENT_MEMORY) {
    p = PUT_LIT(buf, "{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"s\":\"t\",\"name\":\"[memory]\",\"pid\":");
    p = put_u64(p, pid);
    p = PUT_LIT(p, ",\"tid\":");
    p = put_u64(p, tid);
    p = PUT_LIT(p, ",\"ts\":");
    p = us_text(p, ts_ns);
    p = PUT_LIT(p, ",\"args\":{");
  } else {
    int nrc = 0;
    int64_t end_ns = pd_nest_end(w->nest, pid, tid, ts_ns, ts_ns + dur_ns, &nrc);
    if (nrc != 0 && w->err == 0) w->err = nrc;
    p = put_x_head(w, buf, x_category(ev, name), name, pid, tid, ts_ns, end_ns - ts_ns);
  }

  switch (ev->kind) {
  case PD_EVENT_KERNEL:
    p = put_ext_id(p, lk.ext_id);
    p = put_kernel_args(w, p, ev);
    if (mangled) {
      int rc = nameset_add(&w->mangled, ev->name, name);
      if (rc != 0 && w->err == 0) w->err = rc;
    }
    break;
  case PD_EVENT_MEMCPY:
  case PD_EVENT_MEMSET:
    p = put_ext_id(p, lk.ext_id);
    p = put_copy_args(p, ev, dur_ns);
    break;
  case PD_EVENT_RUNTIME:
  case PD_EVENT_DRIVER:
    p = put_ext_id(p, lk.ext_id);
    p = PUT_LIT(p, "\"cbid\":");
    p = put_u64(p, ev->u.api.cbid);
    p = PUT_LIT(p, ",\"correlation\":");
    p = put_u64(p, ev->correlation_id);
    p = PUT_LIT(p, "}}");
    break;
  case PD_EVENT_SYNC:
    p = put_ext_id(p, lk.ext_id);
    p = put_gpu_ids(p, ev);
    if (ev->u.sync.has_wait) {
      /* Kineto's keys for the cudaEventRecord an Event Sync or Stream Wait Event waits
       * for: HTA's critical path and our replay draw the record -> wait edge from them. */
      p = PUT_LIT(p, ",\"wait_on_stream\":");
      p = put_u64(p, ev->u.sync.wait_stream);
      p = PUT_LIT(p, ",\"wait_on_cuda_event_record_corr_id\":");
      p = put_u64(p, ev->u.sync.event_record_corr);
    }
    p = PUT_LIT(p, "}}");
    break;
  case PD_EVENT_MEMORY:
    p = put_memory_args(p, ev, &lk);
    break;
  case PD_EVENT_RANGE:
  case PD_EVENT_CPU_OP:
  case PD_EVENT_GPU_RANGE:
    w->nops += ev->kind != PD_EVENT_GPU_RANGE;
    p = put_range_args(w, buf, p, ev, lk.ext_id, lk.has_idx ? &lk.ev_idx : NULL);
    break;
  case PD_EVENT_OVERHEAD:
  case PD_EVENT_KIND_COUNT:
    p = PUT_LIT(p, "}}");
    break;
  }
  p = put_flow(w, p, ev, pid, tid, ts_ns);
  put_raw(w, buf, (size_t)(p - buf));

  pd_fwd_range_t fwd;
  if (ev->kind == PD_EVENT_RANGE && w->links != NULL && pd_links_fwdbwd(w->links, ev, lk.ext_id, &fwd))
    write_fwdbwd(w, &fwd, pid, tid, ts_ns);
  if (w->links != NULL && pd_links_error(w->links) != 0 && w->err == 0) w->err = pd_links_error(w->links);
  return w->err;
}

/* The spans Kineto closes a trace with: "Trace" over the whole recording on the
 * PD_TRACE_SPAN_PID row, and its global "Iteration Start" marker. */
static void write_trace_span(pd_trace_writer_t *w) {
  if (!w->any_event) return;
  char buf[1024], *p; /* about 700 bytes of metadata, span and marker */
  begin_entry(w);
  p = PUT_LIT(buf, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, PD_TRACE_SPAN_PID);
  p = PUT_LIT(p, ",\"tid\":0,\"args\":{\"name\":\"Spans\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, PD_TRACE_SPAN_PID);
  p = PUT_LIT(p, ",\"tid\":0,\"args\":{\"sort_index\":");
  p = put_u64(p, PD_TRACE_SPAN_PID);
  p = PUT_LIT(p, "}},\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":");
  p = put_u64(p, PD_TRACE_SPAN_PID);
  p = PUT_LIT(p, ",\"tid\":0,\"args\":{\"name\":\"PyTorch Profiler\"}},\n");
  p = PUT_LIT(p, "{\"ph\":\"X\",\"cat\":\"Trace\",\"name\":\"PyTorch Profiler (0)\",\"pid\":");
  p = put_u64(p, PD_TRACE_SPAN_PID);
  p = PUT_LIT(p, ",\"tid\":0,\"ts\":");
  p = us_text(p, w->first_ns);
  p = PUT_LIT(p, ",\"dur\":");
  p = us_text(p, w->last_ns - w->first_ns);
  p = PUT_LIT(p, ",\"args\":{\"Op count\":");
  p = put_u64(p, w->nops);
  p = PUT_LIT(p, "}},\n{\"name\":\"Iteration Start: PyTorch Profiler\",\"ph\":\"i\",\"s\":\"g\",\"pid\":");
  p = put_u64(p, PD_TRACE_SPAN_PID);
  p = PUT_LIT(p, ",\"tid\":0,\"ts\":");
  p = us_text(p, w->first_ns);
  p = PUT_LIT(p, "}");
  w->nevents += 4;
  put_raw(w, buf, (size_t)(p - buf));
}

/* The gpu_user_annotation spans the links gathered, on their streams' rows. */
static void write_gpu_spans(pd_trace_writer_t *w) {
  if (w->links == NULL) return;
  const pd_gpu_span_t *sp = NULL;
  int64_t n = pd_links_gpu_spans(w->links, &sp);
  if (n < 0) {
    if (w->err == 0) w->err = (int)n;
    return;
  }
  char buf[256], *p;
  for (int64_t i = 0; i < n && w->err == 0; i++) {
    note_row(w, sp[i].device, sp[i].stream, ROW_STREAM);
    begin_entry(w);
    p = put_x_head(w, buf, "gpu_user_annotation", sp[i].name, sp[i].device, sp[i].stream,
                   sp[i].start_ns + w->unix_offset_ns - w->base_ns, sp[i].end_ns - sp[i].start_ns);
    p = PUT_LIT(p, "\"External id\":");
    p = put_u64(p, sp[i].ext_id);
    p = PUT_LIT(p, "}}");
    put_raw(w, buf, (size_t)(p - buf));
  }
}

/* "mangledNames": {"<mangled>": "<name shown>", ...}, each kernel symbol once, so the
 * kernel events carry only the readable name, as Kineto's do. */
static void write_mangled_names(pd_trace_writer_t *w) {
  if (w->mangled.n == 0) return;
  PUT_RAW_LIT(w, "\n  \"mangledNames\": {");
  for (size_t i = 0; i < w->mangled.n; i++) {
    PUT_RAW_LIT(w, "\n    ");
    put_name(w, w->mangled.mangled[i]);
    PUT_RAW_LIT(w, ": ");
    put_name(w, w->mangled.shown[i]);
    if (i + 1 < w->mangled.n) PUT_RAW_LIT(w, ",");
  }
  PUT_RAW_LIT(w, "\n  },");
}

void pd_trace_writer_abort(pd_trace_writer_t *w) {
  writer_free(w); /* removes the temporary */
}

int pd_trace_writer_close(pd_trace_writer_t *w) {
  if (w == NULL) return PD_EINVAL;
  if (w->err == 0) write_gpu_spans(w);
  if (w->err == 0) write_trace_span(w);
  if (w->err == 0) PUT_RAW_LIT(w, "\n  ],");
  if (w->err == 0) write_mangled_names(w);
  if (w->err == 0) {
    PUT_RAW_LIT(w, "\n  \"traceName\": ");
    put_name(w, w->trace_name);
    PUT_RAW_LIT(w, "\n}\n");
  }
  /* The output's own code says why (a full disk, a read-only file system) even when
   * the write that failed set only w->err. */
  pd_out_t *out = w->out;
  int rc;
  if (w->err != 0) { /* not the stream's (out of memory) */
    rc = w->err;
    pd_out_abort(out);
  } else {
    rc = pd_out_commit(out); /* fails when any write to the file did */
  }
  w->out = NULL;
  w->f = NULL;
  writer_free(w);
  return rc;
}

/* next[i]: the index of the first GPU activity after ev[i] (in start order) on ev[i]'s
 * stream, for a GPU activity; n for the rest and the last on each stream. Returns 0 or
 * PD_ENOMEM. */
static int next_on_stream(const pd_event_t *ev, size_t n, size_t *next) {
  uint64_t *keys = NULL; /* the streams seen (few), each with its latest activity seen */
  size_t *latest = NULL;
  size_t nkeys = 0, cap = 0;
  for (size_t i = n; i-- > 0;) {
    next[i] = n;
    if (!is_activity(ev[i].kind)) continue;
    uint64_t key = ((uint64_t)ev[i].device << 32) | ev[i].stream;
    size_t k = 0;
    while (k < nkeys && keys[k] != key) k++;
    if (k == nkeys) {
      if (nkeys == cap) {
        cap = cap ? cap * 2 : 16;
        uint64_t *nk = realloc(keys, cap * sizeof(*nk));
        if (nk != NULL) keys = nk;
        size_t *nl = nk != NULL ? realloc(latest, cap * sizeof(*nl)) : NULL;
        if (nl == NULL) {
          free(keys);
          free(latest);
          return PD_ENOMEM;
        }
        latest = nl;
      }
      keys[nkeys] = key;
      latest[nkeys++] = n;
    }
    next[i] = latest[k];
    latest[k] = i;
  }
  free(keys);
  free(latest);
  return 0;
}

int pd_trace_write_file(const char *path, const pd_trace_t *trace, const pd_trace_meta_t *meta) {
  if (path == NULL || trace == NULL) return PD_EINVAL;
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace);

  /* Flows only where both halves exist, so every "f" has its "s" and no arrow dangles. */
  u64set_t launches = {0}, activities = {0}, both = {0};
  int rc = 0;
  for (size_t i = 0; i < n && rc >= 0; i++) {
    if (ev[i].correlation_id == 0) continue;
    if (ev[i].kind == PD_EVENT_RUNTIME || ev[i].kind == PD_EVENT_DRIVER) rc = u64set_add(&launches, ev[i].correlation_id);
    else if (ev[i].kind == PD_EVENT_KERNEL || ev[i].kind == PD_EVENT_MEMCPY || ev[i].kind == PD_EVENT_MEMSET)
      rc = u64set_add(&activities, ev[i].correlation_id);
  }
  for (size_t i = 0; i < activities.n && rc >= 0; i++)
    if (activities.keys[i] != 0 && u64set_has(&launches, activities.keys[i])) rc = u64set_add(&both, activities.keys[i]);
  u64set_free(&launches);
  u64set_free(&activities);
  /* Per event, the next GPU activity on its stream (the events are in start
   * order): how much room its spans' padding has (pd_trace_writer_event()). */
  size_t *next = n > 0 ? malloc(n * sizeof(*next)) : NULL;
  if (rc >= 0 && n > 0 && (next == NULL || next_on_stream(ev, n, next) != 0)) rc = PD_ENOMEM;
  if (rc < 0) {
    free(next);
    u64set_free(&both);
    return rc;
  }

  pd_trace_writer_t *w = NULL;
  int64_t first = INT64_MAX;
  for (size_t i = 0; i < n; i++)
    if (ev[i].start_ns < first) first = ev[i].start_ns;
  pd_trace_meta_t with_range;
  if (meta != NULL && meta->step_range == NULL && pd_trace_step_range(trace) != NULL) {
    with_range = *meta;
    with_range.step_range = pd_trace_step_range(trace);
    meta = &with_range;
  }
  rc = writer_open(path, meta, pd_trace_devices(trace), pd_trace_device_count(trace), n > 0 ? &first : NULL, &w);
  if (rc != 0) {
    free(next);
    u64set_free(&both);
    return rc;
  }
  w->flows = &both;
  for (size_t i = 0; i < n && rc == 0; i++) {
    w->next_gpu = next[i] < n ? &ev[next[i]] : NULL;
    rc = pd_trace_writer_event(w, &ev[i]);
  }
  free(next);
  if (rc != 0) {
    pd_trace_writer_abort(w);
  } else {
    rc = pd_trace_writer_close(w);
  }
  u64set_free(&both);
  return rc;
}
