/* cupti_source.c: CUPTI activity tracing -> pd_event_t (the only file that includes <cupti.h>).
 *
 * The buffer idiom of the CUPTI samples and kineto: CUPTI asks for empty buffers
 * (buf_requested_cb) and hands back filled ones (buf_completed_cb); the completed callback
 * only queues the buffer on a mutex-protected ready list. The profiler's thread flushes
 * (cuptiActivityFlushAll) and parses the queued buffers in one switch over record->kind
 * (pd_cupti_record_to_event), adding events to the cycle's trace. CUPTI timestamps come
 * from our timestamp callback (pd_clock_now_ns), so GPU activity and host ranges share
 * CLOCK_MONOTONIC, and CUPTI reports system thread ids (gettid), as host ranges do.
 *
 * CUPTI's activity callbacks carry no user pointer, so the source's state is process-wide
 * (g_cupti) and at most one source exists at a time.
 */
#include "cupti_source.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pd/pd_common.h"
#include "pd/pd_host_calib.h"
#include "pd/pd_prof.h"

#define PD_CUPTI_DEFAULT_BUFFER_BYTES ((size_t)8 << 20)
/* Buffers kept for reuse after parsing; more are freed so memory stays bounded. */
#define PD_CUPTI_FREE_LIST_MAX 4
/* Each buffer is one allocation: this header, then the record area CUPTI sees. 64 bytes
 * keep the record area aligned to 8 (CUPTI's requirement) and to a cache line. */
#define PD_CUPTI_HDR_BYTES 64

typedef struct pd_cupti_buf {
  struct pd_cupti_buf *next;
  size_t size;  /* bytes of the record area */
  size_t valid; /* bytes CUPTI filled, set by the completed callback */
} pd_cupti_buf_t;

_Static_assert(sizeof(pd_cupti_buf_t) <= PD_CUPTI_HDR_BYTES, "buffer header too large");

struct pd_cupti_source {
  pd_record_source_t base; /* the profiler's view of this source (pd_source.h) */
  pd_cupti_options_t opt;
  pd_device_props_t device;
  bool enabled;
};

/* Process-wide CUPTI state. `lock` guards the two lists; it is taken by CUPTI's threads
 * in the callbacks and by the profiler's thread in collect/destroy, each time only to
 * move list heads, never while parsing. */
static struct {
  pthread_mutex_t lock;
  pd_cupti_buf_t *ready_head; /* FIFO of completed buffers, oldest first */
  pd_cupti_buf_t *ready_tail;
  pd_cupti_buf_t *free_list;
  int free_count;
  size_t buffer_bytes;
  size_t budget_bytes;  /* 0: no limit; else the most bytes out with CUPTI or unparsed */
  size_t outstanding;   /* bytes of buffers handed to CUPTI and not yet recycled */
  atomic_uint_fast64_t dropped;
  atomic_uint_fast64_t completed; /* buffers CUPTI handed back with records */
  atomic_uint_fast64_t callback_errors; /* CUPTI calls that failed inside callbacks */
  atomic_bool attached;                 /* CUPTI initialized, our callbacks registered */
  pd_cupti_source_t *active;
  unsigned capture;                     /* PD_CUPTI_CAPTURE_* of the active source */
  int64_t clock_offset_ns;              /* CUPTI_CLOCK: pd_clock - CUPTI clock, at enable */
  CUpti_SubscriberHandle launch_sub;    /* LAUNCH_CALLBACKS: the no-op subscriber */
} g_cupti = {.lock = PTHREAD_MUTEX_INITIALIZER, .buffer_bytes = PD_CUPTI_DEFAULT_BUFFER_BYTES};

/* ---- error text ------------------------------------------------------------------------ */

static void cupti_errtext(char *err, size_t errlen, const char *call, CUptiResult r) {
  if (err == NULL || errlen == 0) return;
  const char *name = NULL;
  const char *msg = NULL;
  if (cuptiGetResultString(r, &name) != CUPTI_SUCCESS || name == NULL) name = "CUPTI_ERROR_?";
  if (cuptiGetErrorMessage(r, &msg) != CUPTI_SUCCESS || msg == NULL) msg = "";
  snprintf(err, errlen, "%s: %s (%d)%s%s", call, name, (int)r, msg[0] ? ": " : "", msg);
}

/* Maps a failed CUPTI result to the project's code: another CUPTI client (Nsight Systems,
 * compute-sanitizer) -> PD_ECUPTI_BUSY; a missing device/driver -> PD_ENODEV. */
static int cupti_code(CUptiResult r) {
  switch (r) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return PD_ECUPTI_BUSY;
    case CUPTI_ERROR_INVALID_DEVICE:
      return PD_ENODEV;
    case CUPTI_ERROR_OUT_OF_MEMORY:
      return PD_ENOMEM;
    default:
      return PD_ECUPTI;
  }
}

#define CUPTI_TRY(call, err, errlen)              \
  do {                                            \
    CUptiResult pd_r_ = (call);                   \
    if (pd_r_ != CUPTI_SUCCESS) {                 \
      cupti_errtext((err), (errlen), #call, pd_r_); \
      return cupti_code(pd_r_);                   \
    }                                             \
  } while (0)

/* ---- callbacks (CUPTI's threads) ----------------------------------------------------------- */

static uint64_t CUPTIAPI timestamp_cb(void) { return (uint64_t)pd_clock_now_ns(); }

static void CUPTIAPI buf_requested_cb(uint8_t **buffer, size_t *size, size_t *max_records) {
  pd_cupti_buf_t *b = NULL;
  pthread_mutex_lock(&g_cupti.lock);
  size_t want = g_cupti.buffer_bytes;
  if (g_cupti.budget_bytes != 0 && g_cupti.outstanding + want > g_cupti.budget_bytes) {
    /* Over the budget: no buffer. CUPTI drops the records and counts them (reported
     * through pd_prof_dropped_records), instead of the process growing. */
    pthread_mutex_unlock(&g_cupti.lock);
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    return;
  }
  g_cupti.outstanding += want;
  if (g_cupti.free_list != NULL && g_cupti.free_list->size == want) {
    b = g_cupti.free_list;
    g_cupti.free_list = b->next;
    g_cupti.free_count--;
  }
  pthread_mutex_unlock(&g_cupti.lock);
  if (b == NULL) {
    b = aligned_alloc(PD_CUPTI_HDR_BYTES, PD_CUPTI_HDR_BYTES + want);
    if (b == NULL) {
      pthread_mutex_lock(&g_cupti.lock);
      g_cupti.outstanding -= want;
      pthread_mutex_unlock(&g_cupti.lock);
      /* CUPTI then drops records and counts them; we report the count. */
      *buffer = NULL;
      *size = 0;
      *max_records = 0;
      return;
    }
    b->size = want;
  }
  b->next = NULL;
  b->valid = 0;
  *buffer = (uint8_t *)b + PD_CUPTI_HDR_BYTES;
  *size = b->size;
  *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buf_completed_cb(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid) {
  if (buffer == NULL) return;
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
    atomic_fetch_add(&g_cupti.dropped, (uint_fast64_t)dropped);
  else
    atomic_fetch_add(&g_cupti.callback_errors, 1);
  pd_cupti_buf_t *b = (pd_cupti_buf_t *)(buffer - PD_CUPTI_HDR_BYTES);
  b->valid = valid <= size ? valid : size;
  if (b->valid > 0) atomic_fetch_add(&g_cupti.completed, 1);
  b->next = NULL;
  pthread_mutex_lock(&g_cupti.lock);
  if (g_cupti.ready_tail != NULL)
    g_cupti.ready_tail->next = b;
  else
    g_cupti.ready_head = b;
  g_cupti.ready_tail = b;
  pthread_mutex_unlock(&g_cupti.lock);
}

/* Returns a parsed buffer to the free list, or frees it when the list is full. */
static void buf_recycle(pd_cupti_buf_t *b) {
  pthread_mutex_lock(&g_cupti.lock);
  g_cupti.outstanding = g_cupti.outstanding > b->size ? g_cupti.outstanding - b->size : 0;
  if (g_cupti.free_count < PD_CUPTI_FREE_LIST_MAX && b->size == g_cupti.buffer_bytes) {
    b->next = g_cupti.free_list;
    g_cupti.free_list = b;
    g_cupti.free_count++;
    b = NULL;
  }
  pthread_mutex_unlock(&g_cupti.lock);
  free(b);
}

/* ---- record -> event ------------------------------------------------------------------------- */

static pd_mem_kind_t map_mem_kind(unsigned k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE:
      return PD_MEM_PAGEABLE;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return PD_MEM_PINNED;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
      return PD_MEM_DEVICE;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return PD_MEM_MANAGED;
    default:
      return PD_MEM_UNKNOWN;
  }
}

static pd_memcpy_kind_t map_copy_kind(unsigned k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return PD_MEMCPY_HTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return PD_MEMCPY_DTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return PD_MEMCPY_DTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return PD_MEMCPY_HTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return PD_MEMCPY_PTOP;
    default:
      return PD_MEMCPY_UNKNOWN;
  }
}

static pd_sync_kind_t map_sync_kind(unsigned t, const char **name) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      *name = "Event Sync";
      return PD_SYNC_EVENT;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      *name = "Stream Wait Event";
      return PD_SYNC_STREAM_WAIT_EVENT;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      *name = "Stream Sync";
      return PD_SYNC_STREAM;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      *name = "Context Sync";
      return PD_SYNC_CONTEXT;
    default:
      *name = "Unknown Sync";
      return PD_SYNC_UNKNOWN;
  }
}

static const char *overhead_text(unsigned k) {
  switch (k) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER:
      return "Driver Compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH:
      return "CUPTI Buffer Flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION:
      return "CUPTI Instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE:
      return "CUPTI Resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING:
      return "Runtime Triggered Module Loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING:
      return "Lazy Function Loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL:
      return "Command Buffer Full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST:
      return "Activity Buffer Request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT:
      return "UVM Activity Init";
    default:
      return "Unknown Overhead";
  }
}

void pd_cupti_strip_version_suffix(char *name) {
  if (name == NULL) return;
  char *v = strrchr(name, '_');
  if (v == NULL || v[1] != 'v' || v[2] == '\0') return;
  for (const char *p = v + 2; *p; p++)
    if (*p < '0' || *p > '9') return;
  *v = '\0';
}

/* Live device allocations seen while tracing (address -> bytes), so memory events carry
 * the bytes live after them. Open addressing with linear probing and backward-shift
 * deletion; address 0 marks an empty slot (CUDA never hands out address 0). Touched only
 * on the profiler's thread. Allocations made before tracing began are unknown: their
 * release does not lower the tally. */
static struct {
  uint64_t *addr;
  uint64_t *bytes;
  size_t cap; /* power of two or 0 */
  size_t count;
  int64_t live;
} g_live;

static size_t live_slot(uint64_t a, size_t cap) { return (size_t)pd_hash_u64(a) & (cap - 1); }

static int live_grow(void) {
  size_t ncap = g_live.cap ? g_live.cap * 2 : 256;
  uint64_t *na = calloc(ncap, sizeof(*na));
  uint64_t *nb = calloc(ncap, sizeof(*nb));
  if (na == NULL || nb == NULL) {
    free(na);
    free(nb);
    return PD_ENOMEM;
  }
  for (size_t i = 0; i < g_live.cap; i++) {
    if (g_live.addr[i] == 0) continue;
    size_t j = live_slot(g_live.addr[i], ncap);
    while (na[j] != 0) j = (j + 1) & (ncap - 1);
    na[j] = g_live.addr[i];
    nb[j] = g_live.bytes[i];
  }
  free(g_live.addr);
  free(g_live.bytes);
  g_live.addr = na;
  g_live.bytes = nb;
  g_live.cap = ncap;
  return 0;
}

static void live_alloc(uint64_t addr, uint64_t bytes) {
  if (addr == 0) return;
  if ((g_live.count + 1) * 10 > g_live.cap * 7 && live_grow() != 0) return; /* tally only */
  size_t i = live_slot(addr, g_live.cap);
  while (g_live.addr[i] != 0 && g_live.addr[i] != addr) i = (i + 1) & (g_live.cap - 1);
  if (g_live.addr[i] == addr) {
    g_live.live -= (int64_t)g_live.bytes[i]; /* re-use of an address we missed freeing */
  } else {
    g_live.count++;
  }
  g_live.addr[i] = addr;
  g_live.bytes[i] = bytes;
  g_live.live += (int64_t)bytes;
}

static void live_release(uint64_t addr) {
  if (g_live.cap == 0 || addr == 0) return;
  size_t mask = g_live.cap - 1;
  size_t i = live_slot(addr, g_live.cap);
  while (g_live.addr[i] != 0 && g_live.addr[i] != addr) i = (i + 1) & mask;
  if (g_live.addr[i] == 0) return; /* allocated before tracing began */
  g_live.live -= (int64_t)g_live.bytes[i];
  g_live.count--;
  /* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
  size_t j = i;
  for (;;) {
    g_live.addr[i] = 0;
    for (;;) {
      j = (j + 1) & mask;
      if (g_live.addr[j] == 0) return;
      size_t home = live_slot(g_live.addr[j], g_live.cap);
      /* Move j back to i unless its home lies cyclically in (i, j]. */
      bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
      if (!stays) break;
    }
    g_live.addr[i] = g_live.addr[j];
    g_live.bytes[i] = g_live.bytes[j];
    i = j;
  }
}

void pd_cupti_convert_reset(void) {
  free(g_live.addr);
  free(g_live.bytes);
  memset(&g_live, 0, sizeof(g_live));
}

static void api_name(CUpti_CallbackDomain domain, uint32_t cbid, char *namebuf, size_t namelen,
                     const char *fallback) {
  const char *n = NULL;
  if (cuptiGetCallbackName(domain, cbid, &n) != CUPTI_SUCCESS || n == NULL) {
    snprintf(namebuf, namelen, "%s(cbid=%u)", fallback, cbid);
    return;
  }
  snprintf(namebuf, namelen, "%s", n);
  pd_cupti_strip_version_suffix(namebuf);
}

/* The process id, read once: glibc does not cache getpid(), and records are converted by
 * the thousand. */
static uint32_t self_pid(void) {
  static uint32_t pid;
  if (pid == 0) pid = (uint32_t)getpid();
  return pid;
}

/* The fields every GPU activity (kernel, memcpy, memset) fills the same way. */
static void gpu_event_init(pd_event_t *ev, pd_event_kind_t kind, uint64_t start, uint64_t end,
                           uint32_t correlation, uint32_t device, uint32_t context,
                           uint32_t stream) {
  const uint32_t pid = self_pid();
  ev->kind = kind;
  ev->start_ns = (int64_t)start;
  ev->end_ns = (int64_t)end;
  ev->correlation_id = correlation;
  ev->device = device;
  ev->context = context;
  ev->stream = stream;
  ev->pid = pid;
}

/* An API call's event, as the activity API's record and the callbacks' (CALLBACK_API) both
 * give it; the name goes into namebuf. */
static void api_event_init(pd_event_t *ev, bool runtime, int64_t start, int64_t end, uint32_t correlation,
                           uint32_t pid, uint32_t tid, uint32_t cbid, int32_t status, char *namebuf,
                           size_t namelen) {
  ev->kind = runtime ? PD_EVENT_RUNTIME : PD_EVENT_DRIVER;
  ev->start_ns = start;
  ev->end_ns = end;
  ev->correlation_id = correlation;
  ev->pid = pid;
  ev->tid = tid;
  ev->u.api.cbid = cbid;
  ev->u.api.status = status;
  api_name(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, cbid, namebuf, namelen,
           runtime ? "cudaRuntime" : "cuDriver");
  ev->name = namebuf;
}

int pd_cupti_record_to_event(const void *record, pd_event_t *ev, char *namebuf, size_t namelen) {
  if (record == NULL || ev == NULL || namebuf == NULL || namelen == 0) return PD_EINVAL;
  const CUpti_Activity *rec = record;
  memset(ev, 0, sizeof(*ev));
  namebuf[0] = '\0';
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const CUpti_ActivityKernel10 *k = record;
      gpu_event_init(ev, PD_EVENT_KERNEL, k->start, k->end, k->correlationId, k->deviceId,
                     k->contextId, k->streamId);
      ev->name = k->name != NULL ? k->name : "<unnamed kernel>";
      ev->u.kernel.grid[0] = k->gridX;
      ev->u.kernel.grid[1] = k->gridY;
      ev->u.kernel.grid[2] = k->gridZ;
      ev->u.kernel.block[0] = k->blockX;
      ev->u.kernel.block[1] = k->blockY;
      ev->u.kernel.block[2] = k->blockZ;
      ev->u.kernel.registers_per_thread = k->registersPerThread;
      ev->u.kernel.static_smem_bytes = k->staticSharedMemory;
      ev->u.kernel.dynamic_smem_bytes = k->dynamicSharedMemory;
      return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = record;
      gpu_event_init(ev, PD_EVENT_MEMCPY, m->start, m->end, m->correlationId, m->deviceId,
                     m->contextId, m->streamId);
      ev->u.memcpy.bytes = m->bytes;
      ev->u.memcpy.copy_kind = map_copy_kind(m->copyKind);
      ev->u.memcpy.src_kind = map_mem_kind(m->srcKind);
      ev->u.memcpy.dst_kind = map_mem_kind(m->dstKind);
      /* kineto's naming: "Memcpy HtoD (Pinned -> Device)" */
      snprintf(namebuf, namelen, "Memcpy %s (%s -> %s)", pd_memcpy_kind_name(ev->u.memcpy.copy_kind),
               pd_mem_kind_name(ev->u.memcpy.src_kind), pd_mem_kind_name(ev->u.memcpy.dst_kind));
      ev->name = namebuf;
      return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = record;
      gpu_event_init(ev, PD_EVENT_MEMSET, m->start, m->end, m->correlationId, m->deviceId,
                     m->contextId, m->streamId);
      ev->u.memset.bytes = m->bytes;
      ev->u.memset.dst_kind = map_mem_kind(m->memoryKind);
      snprintf(namebuf, namelen, "Memset (%s)", pd_mem_kind_name(ev->u.memset.dst_kind));
      ev->name = namebuf;
      return 1;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const CUpti_ActivityAPI *a = record;
      api_event_init(ev, rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME, (int64_t)a->start, (int64_t)a->end,
                     a->correlationId, a->processId, a->threadId, a->cbid, (int32_t)a->returnValue, namebuf,
                     namelen);
      return 1;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const CUpti_ActivitySynchronization2 *s = record;
      const char *name = NULL;
      ev->kind = PD_EVENT_SYNC;
      ev->start_ns = (int64_t)s->start;
      ev->end_ns = (int64_t)s->end;
      ev->correlation_id = s->correlationId;
      ev->context = s->contextId;
      ev->stream = s->streamId;
      ev->u.sync.sync_kind = map_sync_kind(s->type, &name);
      ev->name = name;
      return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
      const CUpti_ActivityMemory4 *m = record;
      bool alloc = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
      bool release = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
      if (!alloc && !release) return 0;
      ev->kind = PD_EVENT_MEMORY;
      ev->start_ns = ev->end_ns = (int64_t)m->timestamp;
      ev->correlation_id = m->correlationId;
      ev->pid = m->processId;
      ev->device = m->deviceId;
      ev->context = m->contextId;
      ev->stream = m->streamId;
      ev->name = "[memory]";
      ev->u.memory.address = m->address;
      ev->u.memory.bytes = alloc ? (int64_t)m->bytes : -(int64_t)m->bytes;
      ev->u.memory.mem_kind = map_mem_kind(m->memoryKind);
      if (alloc)
        live_alloc(m->address, m->bytes);
      else
        live_release(m->address);
      ev->u.memory.total_allocated = g_live.live;
      return 1;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
      const CUpti_ActivityOverhead3 *o = record;
      ev->kind = PD_EVENT_OVERHEAD;
      ev->start_ns = (int64_t)o->start;
      ev->end_ns = (int64_t)o->end;
      ev->correlation_id = o->correlationId;
      ev->name = overhead_text(o->overheadKind);
      if (o->objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS ||
          o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD) {
        ev->pid = o->objectId.pt.processId;
        ev->tid = o->objectId.pt.threadId;
      } else {
        ev->pid = (uint32_t)getpid();
        ev->device = o->objectId.dcs.deviceId;
        ev->context = o->objectId.dcs.contextId;
        ev->stream = o->objectId.dcs.streamId;
      }
      return 1;
    }
    default:
      return 0; /* kinds we never enable, or newer ones: skipped */
  }
}

int pd_cupti_capture_parse(const char *text, unsigned *bits, char *err, size_t errlen) {
  static const struct {
    const char *name;
    unsigned bit;
  } names[] = {{"default", 0},
               {"cupti_clock", PD_CUPTI_CAPTURE_CUPTI_CLOCK},
               {"pthread_ids", PD_CUPTI_CAPTURE_PTHREAD_IDS},
               {"shared_buffers", PD_CUPTI_CAPTURE_SHARED_BUFFERS},
               {"kernels_only", PD_CUPTI_CAPTURE_KERNELS_ONLY},
               {"launch_callbacks", PD_CUPTI_CAPTURE_LAUNCH_CALLBACKS},
               {"runtime_ids", PD_CUPTI_CAPTURE_RUNTIME_IDS},
               {"no_driver", PD_CUPTI_CAPTURE_NO_DRIVER},
               {"driver_ids", PD_CUPTI_CAPTURE_DRIVER_IDS},
               {"callback_api", PD_CUPTI_CAPTURE_CALLBACK_API}};
  if (bits == NULL) return PD_EINVAL;
  *bits = 0;
  if (text == NULL) return 0;
  unsigned out = 0;
  const char *p = text;
  while (*p != '\0') {
    size_t n = strcspn(p, ",");
    bool found = n == 0; /* empty items (",,") are allowed */
    for (size_t i = 0; !found && i < sizeof(names) / sizeof(names[0]); i++)
      if (strlen(names[i].name) == n && strncmp(p, names[i].name, n) == 0) {
        out |= names[i].bit;
        found = true;
      }
    if (!found) {
      if (err != NULL && errlen > 0)
        snprintf(err, errlen,
                 "unknown CUPTI capture option '%.*s' (known: default, cupti_clock, pthread_ids, "
                 "shared_buffers, kernels_only, launch_callbacks, runtime_ids, no_driver, driver_ids, "
                 "callback_api)",
                 (int)(n > 64 ? 64 : n), p);
      return PD_EINVAL;
    }
    p += n;
    if (*p == ',') p++;
  }
  *bits = out;
  return 0;
}

bool pd_cupti_driver_cbid_is_launch(uint32_t cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      return true;
    default:
      return false;
  }
}

/* ---- event waits: which cudaEventRecord an Event Sync or Stream Wait Event waits for --------------- */

/* A CUDA_EVENT record (a cudaEventRecord call: its stream and correlation id), and a sync
 * record of the trace that waits on an event, matched at the end of a collect: CUPTI hands
 * the two kinds over in any order. cudaEventSyncId ties a wait to the event's latest
 * record; where CUPTI gives none, the event id's last record seen stands in. */
typedef struct {
  uint64_t sync_id;
  uint32_t event_id, stream, corr;
  size_t order; /* its place among the collect's records */
} ev_record_t;
typedef struct {
  size_t idx; /* the sync event in the trace */
  uint64_t sync_id;
  uint32_t event_id;
} ev_wait_t;
typedef struct {
  ev_record_t *recs;
  size_t nrecs, cap_recs;
  ev_wait_t *waits;
  size_t nwaits, cap_waits;
} pd_cupti_join_t;

/* Notes a CUDA_EVENT record (the trace gets no event of it) for the join. Returns 1 noted,
 * 0 another kind of record, or PD_ENOMEM. */
static int join_note_record(pd_cupti_join_t *j, const CUpti_Activity *rec) {
  if (rec->kind != CUPTI_ACTIVITY_KIND_CUDA_EVENT) return 0;
  const CUpti_ActivityCudaEvent2 *e = (const void *)rec;
  if (pd_array_grow((void **)&j->recs, &j->cap_recs, j->nrecs + 1, sizeof(*j->recs)) != 0) return PD_ENOMEM;
  j->recs[j->nrecs++] = (ev_record_t){.sync_id = e->cudaEventSyncId, .event_id = e->eventId,
                                      .stream = e->streamId, .corr = e->correlationId};
  return 1;
}

/* Notes the record just added to the trace as event idx, where it waits on an event (Event
 * Sync, Stream Wait Event). Returns 0 or PD_ENOMEM. */
static int join_note_wait(pd_cupti_join_t *j, const CUpti_Activity *rec, size_t idx) {
  if (rec->kind != CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) return 0;
  const CUpti_ActivitySynchronization2 *s = (const void *)rec;
  if (s->type != CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE &&
      s->type != CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT)
    return 0;
  if (s->cudaEventId == CUPTI_SYNCHRONIZATION_INVALID_VALUE) return 0;
  if (pd_array_grow((void **)&j->waits, &j->cap_waits, j->nwaits + 1, sizeof(*j->waits)) != 0) return PD_ENOMEM;
  j->waits[j->nwaits++] = (ev_wait_t){.idx = idx, .sync_id = s->cudaEventSyncId, .event_id = s->cudaEventId};
  return 0;
}

/* Records in order of (key, then the order CUPTI gave them), for a binary search of a key's
 * last record. */
static uint64_t join_key(const ev_record_t *r, bool by_sync) { return by_sync ? r->sync_id : r->event_id; }
static int join_cmp(const ev_record_t *x, const ev_record_t *y, bool by_sync) {
  const uint64_t kx = join_key(x, by_sync), ky = join_key(y, by_sync);
  if (kx != ky) return kx < ky ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}
static int join_cmp_sync(const void *a, const void *b) { return join_cmp(a, b, true); }
static int join_cmp_event(const void *a, const void *b) { return join_cmp(a, b, false); }

/* The last record with key k in recs (sorted by join_cmp on the same key), or NULL. */
static const ev_record_t *join_find(const ev_record_t *recs, size_t n, uint64_t k, bool by_sync) {
  size_t lo = 0, hi = n; /* first index whose key is above k */
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (join_key(&recs[mid], by_sync) <= k) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && join_key(&recs[lo - 1], by_sync) == k ? &recs[lo - 1] : NULL;
}

/* Fills the noted waits' record stream and correlation (Kineto's wait_on_stream and
 * wait_on_cuda_event_record_corr_id) where their event's record was seen; then empties j.
 * Sorted copies keep it O((waits + records) log records) for long cycles. */
static int join_apply(pd_cupti_join_t *j, pd_trace_t *out) {
  const uint64_t invalid = (uint64_t)CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  pd_event_t *ev = out != NULL ? pd_trace_events_mut(out) : NULL;
  const size_t n = out != NULL ? pd_trace_count(out) : 0;
  int rc = 0;
  ev_record_t *by_event = NULL;
  if (ev != NULL && j->nwaits > 0 && j->nrecs > 0) {
    by_event = malloc(j->nrecs * sizeof(*by_event));
    if (by_event == NULL) rc = PD_ENOMEM;
  }
  if (by_event != NULL) {
    for (size_t r = 0; r < j->nrecs; r++) j->recs[r].order = r;
    memcpy(by_event, j->recs, j->nrecs * sizeof(*by_event));
    qsort(j->recs, j->nrecs, sizeof(*j->recs), join_cmp_sync);
    qsort(by_event, j->nrecs, sizeof(*by_event), join_cmp_event);
    for (size_t w = 0; w < j->nwaits; w++) {
      const ev_wait_t *wt = &j->waits[w];
      const bool sync_id = wt->sync_id != invalid && wt->sync_id != 0;
      const ev_record_t *hit = sync_id ? join_find(j->recs, j->nrecs, wt->sync_id, true)
                                       : join_find(by_event, j->nrecs, wt->event_id, false);
      if (hit == NULL || wt->idx >= n || ev[wt->idx].kind != PD_EVENT_SYNC) continue;
      ev[wt->idx].u.sync.has_wait = true;
      ev[wt->idx].u.sync.wait_stream = hit->stream;
      ev[wt->idx].u.sync.event_record_corr = hit->corr;
    }
  }
  free(by_event);
  j->nrecs = j->nwaits = 0;
  return rc;
}

static void join_free(pd_cupti_join_t *j) {
  free(j->recs);
  free(j->waits);
  memset(j, 0, sizeof(*j));
}

/* One record into out, noted for the event-wait join: 1 added, 0 skipped, or a PD_E* code. */
static int convert_one(const CUpti_Activity *rec, pd_trace_t *out, pd_cupti_join_t *j, unsigned capture,
                       bool driver_api, char *namebuf, size_t namelen) {
  pd_event_t ev;
  int rc = join_note_record(j, rec);
  if (rc != 0) return rc < 0 ? rc : 0; /* a CUDA_EVENT record: for the join only */
  if (pd_cupti_record_to_event(rec, &ev, namebuf, namelen) != 1) return 0;
  if (capture & PD_CUPTI_CAPTURE_CUPTI_CLOCK) {
    ev.start_ns += g_cupti.clock_offset_ns;
    ev.end_ns += g_cupti.clock_offset_ns;
  }
  if (ev.kind == PD_EVENT_DRIVER && !driver_api && !pd_cupti_driver_cbid_is_launch(ev.u.api.cbid))
    return 0; /* launch-only driver tracing: other driver calls are noise */
  const int arc = pd_trace_add(out, &ev);
  if (arc < 0) return arc;
  rc = join_note_wait(j, rec, pd_trace_count(out) - 1);
  return rc < 0 ? rc : 1;
}

int pd_cupti_convert_records(const void *const *records, size_t n, pd_trace_t *out) {
  if (out == NULL || (records == NULL && n > 0)) return PD_EINVAL;
  pd_cupti_join_t j = {0};
  char namebuf[512];
  int64_t added = 0;
  for (size_t i = 0; i < n; i++) {
    const int rc = convert_one(records[i], out, &j, 0, true, namebuf, sizeof namebuf);
    if (rc < 0) {
      join_free(&j);
      return rc;
    }
    added += rc;
  }
  const int rc = join_apply(&j, out);
  join_free(&j);
  return rc < 0 ? rc : (int)added;
}

int pd_cupti_convert_record(const void *record, pd_trace_t *out) {
  if (out == NULL) return PD_EINVAL;
  char namebuf[512];
  pd_event_t ev;
  int rc = pd_cupti_record_to_event(record, &ev, namebuf, sizeof(namebuf));
  if (rc <= 0) return rc;
  int arc = pd_trace_add(out, &ev);
  return arc < 0 ? arc : 1;
}

/* ---- correlation fix-up ------------------------------------------------------------------------ */

typedef struct {
  uint64_t corr;
  uint32_t pid;
  uint32_t tid;
} corr_owner_t;

static int corr_cmp(const void *a, const void *b) {
  uint64_t x = ((const corr_owner_t *)a)->corr, y = ((const corr_owner_t *)b)->corr;
  return (x > y) - (x < y);
}

/* A SYNC record names its context, not its device: the device of a GPU activity of the same
 * context, where the trace has one (contexts are few: a short list). */
static void sync_devices(pd_trace_t *trace) {
  const size_t n = pd_trace_count(trace);
  pd_event_t *ev = pd_trace_events_mut(trace);
  typedef struct {
    uint32_t context, device;
  } ctx_device_t;
  ctx_device_t map[64];
  size_t nmap = 0;
  for (size_t i = 0; i < n && nmap < sizeof(map) / sizeof(map[0]); i++) {
    if (ev[i].kind != PD_EVENT_KERNEL && ev[i].kind != PD_EVENT_MEMCPY && ev[i].kind != PD_EVENT_MEMSET) continue;
    size_t m = 0;
    while (m < nmap && map[m].context != ev[i].context) m++;
    if (m == nmap) map[nmap++] = (ctx_device_t){ev[i].context, ev[i].device};
  }
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind != PD_EVENT_SYNC) continue;
    for (size_t m = 0; m < nmap; m++)
      if (map[m].context == ev[i].context) ev[i].device = map[m].device;
  }
}

int pd_cupti_link_sync(pd_trace_t *trace) {
  if (trace == NULL) return PD_EINVAL;
  size_t n = pd_trace_count(trace);
  pd_event_t *ev = pd_trace_events_mut(trace);
  size_t nrt = 0, need = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind == PD_EVENT_RUNTIME || ev[i].kind == PD_EVENT_DRIVER) nrt++;
    if ((ev[i].kind == PD_EVENT_SYNC || ev[i].kind == PD_EVENT_MEMORY) && ev[i].tid == 0) need++;
  }
  sync_devices(trace);
  if (nrt == 0 || need == 0) return 0;
  corr_owner_t *own = malloc(nrt * sizeof(*own));
  if (own == NULL) return PD_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (ev[i].kind == PD_EVENT_RUNTIME || ev[i].kind == PD_EVENT_DRIVER)
      own[k++] = (corr_owner_t){ev[i].correlation_id, ev[i].pid, ev[i].tid};
  qsort(own, nrt, sizeof(*own), corr_cmp);
  for (size_t i = 0; i < n; i++) {
    if ((ev[i].kind != PD_EVENT_SYNC && ev[i].kind != PD_EVENT_MEMORY) || ev[i].tid != 0) continue;
    corr_owner_t key = {.corr = ev[i].correlation_id};
    const corr_owner_t *hit = bsearch(&key, own, nrt, sizeof(*own), corr_cmp);
    if (hit != NULL) {
      ev[i].pid = hit->pid;
      ev[i].tid = hit->tid;
    }
  }
  free(own);
  return 0;
}

/* ---- the source ----------------------------------------------------------------------------------- */

static void fill_props(int device, const struct cudaDeviceProp *p, pd_device_props_t *d) {
  memset(d, 0, sizeof(*d));
  d->id = device;
  snprintf(d->name, sizeof(d->name), "%s", p->name);
  d->total_global_mem = p->totalGlobalMem;
  d->compute_major = p->major;
  d->compute_minor = p->minor;
  d->num_sms = p->multiProcessorCount;
  d->max_threads_per_block = p->maxThreadsPerBlock;
  d->max_threads_per_sm = p->maxThreadsPerMultiProcessor;
  d->max_regs_per_block = p->regsPerBlock;
  d->max_regs_per_sm = p->regsPerMultiprocessor;
  d->max_shared_mem_per_block = (int)p->sharedMemPerBlock;
  d->max_shared_mem_per_sm = (int)p->sharedMemPerMultiprocessor;
  d->max_shared_mem_per_block_optin = (int)p->sharedMemPerBlockOptin;
  d->warp_size = p->warpSize;
  d->max_blocks_per_sm = p->maxBlocksPerMultiProcessor;
}

/* A no-op subscriber callback: subscribing only probes whether CUPTI is free. */
static void CUPTIAPI probe_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                              const void *data) {}

/* Registers our callbacks with CUPTI, once per attachment (again after a detach, since
 * cuptiFinalize forgets them). Order matters: the timestamp callback must be in place
 * before any kind is enabled. */
static int cupti_attach_now(char *err, size_t errlen);
/* CUPTI may start its threads while it attaches and enables: they would inherit a pinned
 * launching thread's single CPU (pd_host_pin_fastest), so the pin is lifted meanwhile. */
static int cupti_attach(char *err, size_t errlen) {
  pd_host_pin_suspend();
  const int rc = cupti_attach_now(err, errlen);
  pd_host_pin_resume();
  return rc;
}

static int cupti_attach_now(char *err, size_t errlen) {
  if (atomic_load(&g_cupti.attached)) return 0;
  if (pd_cupti_launch_hook_installed()) goto registered; /* the subscriber is ours */
  /* Probe for another CUPTI client: under Nsight Systems or compute-sanitizer the
   * subscription fails with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED. Subscribing
   * also (re)initializes CUPTI after a cuptiFinalize. */
  CUpti_SubscriberHandle sub = NULL;
  CUptiResult r = cuptiSubscribe(&sub, probe_cb, NULL);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiSubscribe", r);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && err != NULL) {
      size_t used = strlen(err);
      snprintf(err + used, errlen - used,
               " -- another CUPTI client (Nsight Systems, Nsight Compute or compute-sanitizer) "
               "holds CUPTI; run without it or disable CUDA activity");
    }
    return cupti_code(r);
  }
  CUPTI_TRY(cuptiUnsubscribe(sub), err, errlen);
registered:;
  const unsigned cap = g_cupti.capture;
  if (!(cap & PD_CUPTI_CAPTURE_PTHREAD_IDS))
    CUPTI_TRY(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), err, errlen);
  if (!(cap & PD_CUPTI_CAPTURE_CUPTI_CLOCK))
    CUPTI_TRY(cuptiActivityRegisterTimestampCallback(timestamp_cb), err, errlen);
  if (cap & PD_CUPTI_CAPTURE_SHARED_BUFFERS) {
    uint8_t off = 0;
    size_t sz = sizeof(off);
    CUPTI_TRY(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &sz, &off), err,
              errlen);
  }
  CUPTI_TRY(cuptiActivityRegisterCallbacks(buf_requested_cb, buf_completed_cb), err, errlen);
  atomic_store(&g_cupti.attached, true);
  return 0;
}

/* Set by pd_cupti_source_detach() just before it makes the runtime call whose exit
 * callback runs cuptiFinalize, the call site CUPTI documents as safe. */
static atomic_bool g_finalize_requested;
static atomic_int g_finalize_result;

static void CUPTIAPI finalize_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data) {
  const CUpti_CallbackData *cb = data;
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || cb == NULL || cb->callbackSite != CUPTI_API_EXIT)
    return;
  if (atomic_exchange(&g_finalize_requested, false))
    atomic_store(&g_finalize_result, (int)cuptiFinalize());
}

int pd_cupti_source_create(const pd_cupti_options_t *opt, pd_cupti_source_t **out, char *err,
                           size_t errlen) {
  if (err != NULL && errlen > 0) err[0] = '\0';
  if (opt == NULL || out == NULL || opt->device < 0) {
    if (err) snprintf(err, errlen, "pd_cupti_source_create: bad arguments");
    return PD_EINVAL;
  }
  *out = NULL;
  if (g_cupti.active != NULL) {
    if (err) snprintf(err, errlen, "a CUPTI source already exists in this process");
    return PD_ESTATE;
  }
  /* A missing driver or device shows here, before CUPTI is touched. */
  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count == 0) {
    if (err)
      snprintf(err, errlen, "no usable CUDA device (cudaGetDeviceCount: %s)",
               ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    (void)cudaGetLastError(); /* reset the runtime's last-error slot for the caller */
    return PD_ENODEV;
  }
  if (opt->device >= count) {
    if (err) snprintf(err, errlen, "CUDA device %d not present (%d visible)", opt->device, count);
    return PD_ENODEV;
  }
  struct cudaDeviceProp prop;
  ce = cudaGetDeviceProperties(&prop, opt->device);
  if (ce != cudaSuccess) {
    if (err) snprintf(err, errlen, "cudaGetDeviceProperties(%d): %s", opt->device, cudaGetErrorString(ce));
    return PD_ECUDA;
  }

  /* Attaching now surfaces a busy or broken CUPTI at create time rather than mid-run. */
  atomic_store(&g_cupti.attached, false);
  g_cupti.capture = opt->capture;
  g_cupti.launch_sub = NULL;
  int rc = cupti_attach(err, errlen);
  if (rc != 0) return rc;

  pd_cupti_source_t *src = calloc(1, sizeof(*src));
  if (src == NULL) {
    if (err) snprintf(err, errlen, "out of host memory");
    return PD_ENOMEM;
  }
  src->opt = *opt;
  fill_props(opt->device, &prop, &src->device);
  pthread_mutex_lock(&g_cupti.lock);
  g_cupti.buffer_bytes = opt->buffer_bytes ? (opt->buffer_bytes + 7) & ~(size_t)7
                                           : PD_CUPTI_DEFAULT_BUFFER_BYTES;
  g_cupti.budget_bytes = opt->buffer_budget_bytes;
  if (g_cupti.budget_bytes != 0 && g_cupti.budget_bytes < g_cupti.buffer_bytes)
    g_cupti.buffer_bytes = g_cupti.budget_bytes & ~(size_t)7; /* one buffer fits the budget */
  if (g_cupti.buffer_bytes < 1024) g_cupti.buffer_bytes = 1024;
  g_cupti.outstanding = 0;
  pthread_mutex_unlock(&g_cupti.lock);
  atomic_store(&g_cupti.dropped, 0);
  atomic_store(&g_cupti.completed, 0);
  atomic_store(&g_cupti.callback_errors, 0);
  pd_cupti_convert_reset();
  g_cupti.active = src;
  *out = src;
  /* Until the first traced step nothing should cost anything: detach again. A failure
   * here only means CUPTI stays attached (some overhead per CUDA call), so it is not
   * fatal; the profiler reports it through pd_prof_last_error(). */
  (void)pd_cupti_source_detach(src, err, errlen);
  return 0;
}

/* The kinds to enable, in order; `when` filters optional ones. */
typedef enum { KIND_ALWAYS, KIND_DRIVER, KIND_MEMORY } kind_when_t;
static const struct {
  CUpti_ActivityKind kind;
  const char *name;
  kind_when_t when;
  bool best_effort; /* a CUPTI that refuses it only loses what it adds */
} k_kinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", KIND_ALWAYS, false},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY", KIND_ALWAYS, false},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET", KIND_ALWAYS, false},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME", KIND_ALWAYS, false},
    {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION", KIND_ALWAYS, false},
    /* where each event was recorded: the waits' record -> wait edges (convert_one) */
    {CUPTI_ACTIVITY_KIND_CUDA_EVENT, "CUDA_EVENT", KIND_ALWAYS, true},
    {CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD", KIND_ALWAYS, false},
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER", KIND_DRIVER, false},
    {CUPTI_ACTIVITY_KIND_MEMORY2, "MEMORY2", KIND_MEMORY, false},
};
#define K_NKINDS (sizeof(k_kinds) / sizeof(k_kinds[0]))

static bool kind_wanted(const pd_cupti_options_t *opt, size_t i) {
  if (opt->capture & PD_CUPTI_CAPTURE_KERNELS_ONLY)
    return k_kinds[i].kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  if (k_kinds[i].kind == CUPTI_ACTIVITY_KIND_RUNTIME && (opt->capture & PD_CUPTI_CAPTURE_RUNTIME_IDS))
    return false; /* enabled id by id in api_filter_apply() */
  if ((opt->capture & PD_CUPTI_CAPTURE_CALLBACK_API) &&
      (k_kinds[i].kind == CUPTI_ACTIVITY_KIND_RUNTIME || k_kinds[i].kind == CUPTI_ACTIVITY_KIND_DRIVER))
    return false; /* the API records come from callbacks (cbapi_set()) */
  switch (k_kinds[i].when) {
    case KIND_DRIVER:
      if (opt->capture & PD_CUPTI_CAPTURE_NO_DRIVER) return false;
      if ((opt->capture & PD_CUPTI_CAPTURE_DRIVER_IDS) && !opt->driver_api) return false;
      return opt->driver_api || opt->driver_launches; /* see api_filter_apply() */
    case KIND_MEMORY:
      return opt->memory;
    default:
      return true;
  }
}

/* Runtime calls that only query state. Their records say nothing about the GPU work yet
 * each costs CUPTI time per call: the model checks cudaGetLastError after every launch,
 * so in a launch-bound step they would double the runtime records. Recorded only when
 * full API tracing (driver_api) is asked for. */
static const CUpti_CallbackId k_quiet_runtime[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaPeekAtLastError_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceCount_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceGetAttribute_v5000,
};
/* Whether a runtime call is one of the query-only ones above. */
static bool runtime_cbid_quiet(uint32_t cbid) {
  for (size_t i = 0; i < sizeof(k_quiet_runtime) / sizeof(k_quiet_runtime[0]); i++)
    if (k_quiet_runtime[i] == cbid) return true;
  return false;
}

/* Whether the activity kind is enabled by this capture. */
static bool kind_on(const pd_cupti_options_t *opt, CUpti_ActivityKind kind) {
  for (size_t i = 0; i < K_NKINDS; i++)
    if (k_kinds[i].kind == kind) return kind_wanted(opt, i);
  return false;
}

/* Whether the capture writes an activity record for an API call: the one rule behind
 * api_filter_apply() (which switches the records off id by id) and the API census (which
 * sorts the calls it sees by it). Ids enabled without their kind record nothing on CUDA 13
 * (the runtime_ids and driver_ids variants), so a kind that is off records no call. */
static bool api_call_recorded(const pd_cupti_options_t *opt, CUpti_CallbackDomain domain, uint32_t cbid) {
  const bool callbacks = (opt->capture & PD_CUPTI_CAPTURE_CALLBACK_API) && !(opt->capture & PD_CUPTI_CAPTURE_KERNELS_ONLY);
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    return (callbacks || kind_on(opt, CUPTI_ACTIVITY_KIND_RUNTIME)) && (opt->driver_api || !runtime_cbid_quiet(cbid));
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    return (callbacks ? opt->driver_api || opt->driver_launches : kind_on(opt, CUPTI_ACTIVITY_KIND_DRIVER)) &&
           (opt->driver_api || pd_cupti_driver_cbid_is_launch(cbid));
  return false;
}

/* Applies the per-API selections after the kinds are enabled (enabling the RUNTIME or
 * DRIVER kind resets them). With launches only, every other driver call's record is
 * switched off one callback id at a time: enabling just the launch ids without the DRIVER
 * kind produced no records on CUDA 13 (H100, driver 580), nor did the runtime's ids
 * without the RUNTIME kind (the runtime_ids and driver_ids capture variants,
 * docs/performance.md), so the kinds stay on and the rest are turned off. on = false needs
 * no undo for the driver ids: the kind goes off. */
static int api_filter_apply(const pd_cupti_source_t *src, bool on, char *err, size_t errlen) {
  if (src->opt.capture & (PD_CUPTI_CAPTURE_KERNELS_ONLY | PD_CUPTI_CAPTURE_CALLBACK_API)) return 0;
  if (src->opt.capture & PD_CUPTI_CAPTURE_RUNTIME_IDS) {
    /* best effort per id: retired ids may refuse */
    for (uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_INVALID + 1; cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE; cbid++)
      if (src->opt.driver_api || !runtime_cbid_quiet(cbid)) (void)cuptiActivityEnableRuntimeApi(cbid, on ? 1 : 0);
  }
  if (src->opt.driver_api) return 0; /* full API tracing: every call recorded */
  for (size_t i = 0; kind_on(&src->opt, CUPTI_ACTIVITY_KIND_RUNTIME) && i < sizeof(k_quiet_runtime) / sizeof(k_quiet_runtime[0]); i++) {
    const CUpti_CallbackId cbid = k_quiet_runtime[i];
    CUptiResult r = cuptiActivityEnableRuntimeApi(cbid, on ? api_call_recorded(&src->opt, CUPTI_CB_DOMAIN_RUNTIME_API, cbid) : 1);
    if (r != CUPTI_SUCCESS) {
      cupti_errtext(err, errlen, "cuptiActivityEnableRuntimeApi", r);
      return cupti_code(r);
    }
  }
  if (!src->opt.driver_launches || (src->opt.capture & PD_CUPTI_CAPTURE_NO_DRIVER)) return 0;
  if (src->opt.capture & PD_CUPTI_CAPTURE_DRIVER_IDS) { /* the variant: launch ids without the kind */
    for (uint32_t cbid = CUPTI_DRIVER_TRACE_CBID_INVALID + 1; cbid < CUPTI_DRIVER_TRACE_CBID_SIZE; cbid++)
      if (pd_cupti_driver_cbid_is_launch(cbid)) (void)cuptiActivityEnableDriverApi(cbid, on ? 1 : 0);
    return 0;
  }
  if (!on) return 0;
  for (uint32_t cbid = CUPTI_DRIVER_TRACE_CBID_INVALID + 1; cbid < CUPTI_DRIVER_TRACE_CBID_SIZE;
       cbid++)
    if (!api_call_recorded(&src->opt, CUPTI_CB_DOMAIN_DRIVER_API, cbid))
      (void)cuptiActivityEnableDriverApi(cbid, 0); /* best effort: retired ids may refuse */
  return 0;
}

static void disable_first(const pd_cupti_source_t *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (kind_wanted(&src->opt, i)) (void)cuptiActivityDisable(k_kinds[i].kind); /* best effort undo */
}

static void CUPTIAPI launch_noop_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                    const void *data) {}

static int hook_enable_launches(CUpti_SubscriberHandle sub);

/* LAUNCH_CALLBACKS: subscribes the no-op callback to the launch hook's calls while enabled (one
 * subscriber at a time: the detach path subscribes its own after this one is gone). */
static int launch_callbacks_set(const pd_cupti_source_t *src, bool on, char *err, size_t errlen) {
  /* With CALLBACK_API the launches already have callbacks (and CUPTI one subscriber). */
  if (!(src->opt.capture & PD_CUPTI_CAPTURE_LAUNCH_CALLBACKS) || (src->opt.capture & PD_CUPTI_CAPTURE_CALLBACK_API))
    return 0;
  if (!on) {
    if (g_cupti.launch_sub != NULL) (void)cuptiUnsubscribe(g_cupti.launch_sub);
    g_cupti.launch_sub = NULL;
    return 0;
  }
  if (g_cupti.launch_sub != NULL) return 0;
  CUPTI_TRY(cuptiSubscribe(&g_cupti.launch_sub, launch_noop_cb, NULL), err, errlen);
  const CUptiResult r = hook_enable_launches(g_cupti.launch_sub);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiEnableCallback(launch)", r);
    (void)cuptiUnsubscribe(g_cupti.launch_sub);
    g_cupti.launch_sub = NULL;
    return cupti_code(r);
  }
  return 0;
}

/* CUPTI_CLOCK: the offset from CUPTI's clock to pd_clock, from the tightest of a few
 * bracketed reads. */
static void clock_offset_sample(void) {
  int64_t best_gap = INT64_MAX, best = 0;
  for (int i = 0; i < 5; i++) {
    uint64_t c = 0;
    int64_t a = pd_clock_now_ns();
    if (cuptiGetTimestamp(&c) != CUPTI_SUCCESS) continue;
    int64_t b = pd_clock_now_ns();
    if (b - a < best_gap) {
      best_gap = b - a;
      best = a + (b - a) / 2 - (int64_t)c;
    }
  }
  g_cupti.clock_offset_ns = best;
}

/* CALLBACK_API: the API records' callbacks on (or off again), and the records they wrote
 * moved into a trace (out == NULL: dropped) or freed for good (below, with the launch hook). */
static int cbapi_set(const pd_cupti_source_t *src, bool on, char *err, size_t errlen);
static int64_t cbapi_drain(pd_trace_t *out);
static void cbapi_free(void);

static int source_enable(pd_cupti_source_t *src, char *err, size_t errlen);
int pd_cupti_source_enable(pd_cupti_source_t *src, char *err, size_t errlen) {
  if (src == NULL) return PD_EINVAL;
  if (src->enabled) return 0;
  pd_host_pin_suspend(); /* as in cupti_attach */
  const int rc = source_enable(src, err, errlen);
  pd_host_pin_resume();
  return rc;
}

static int source_enable(pd_cupti_source_t *src, char *err, size_t errlen) {
  int rc = cupti_attach(err, errlen);
  if (rc != 0) return rc;
  for (size_t i = 0; i < K_NKINDS; i++) {
    if (!kind_wanted(&src->opt, i)) continue;
    CUptiResult r = cuptiActivityEnable(k_kinds[i].kind);
    if (r != CUPTI_SUCCESS && k_kinds[i].best_effort) continue;
    if (r != CUPTI_SUCCESS) {
      char call[80];
      snprintf(call, sizeof(call), "cuptiActivityEnable(%s)", k_kinds[i].name);
      cupti_errtext(err, errlen, call, r);
      disable_first(src, i);
      return cupti_code(r);
    }
  }
  rc = api_filter_apply(src, true, err, errlen);
  if (rc == 0) rc = launch_callbacks_set(src, true, err, errlen);
  if (rc == 0) rc = cbapi_set(src, true, err, errlen);
  if (rc != 0) {
    (void)launch_callbacks_set(src, false, NULL, 0);
    (void)api_filter_apply(src, false, NULL, 0);
    disable_first(src, K_NKINDS);
    return rc;
  }
  if (src->opt.capture & PD_CUPTI_CAPTURE_CUPTI_CLOCK) clock_offset_sample();
  src->enabled = true;
  return 0;
}

int pd_cupti_source_disable(pd_cupti_source_t *src, char *err, size_t errlen) {
  if (src == NULL) return PD_EINVAL;
  if (!src->enabled) return 0;
  int rc = api_filter_apply(src, false, err, errlen);
  (void)launch_callbacks_set(src, false, NULL, 0);
  const int cbrc = cbapi_set(src, false, err, errlen);
  if (rc == 0) rc = cbrc;
  for (size_t i = 0; i < K_NKINDS; i++) {
    if (!kind_wanted(&src->opt, i)) continue;
    CUptiResult r = cuptiActivityDisable(k_kinds[i].kind);
    if (r != CUPTI_SUCCESS && rc == 0 && !k_kinds[i].best_effort) { /* never enabled, maybe */
      char call[80];
      snprintf(call, sizeof(call), "cuptiActivityDisable(%s)", k_kinds[i].name);
      cupti_errtext(err, errlen, call, r);
      rc = cupti_code(r);
    }
  }
  src->enabled = false;
  return rc;
}

int pd_cupti_source_flush(pd_cupti_source_t *src, bool forced, char *err, size_t errlen) {
  if (src == NULL) return PD_EINVAL;
  CUptiResult r = cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, forced ? "cuptiActivityFlushAll(FORCED)" : "cuptiActivityFlushAll(0)", r);
    return cupti_code(r);
  }
  return 0;
}

int64_t pd_cupti_source_collect(pd_cupti_source_t *src, pd_trace_t *out, int64_t window_start_ns) {
  if (src == NULL) return PD_EINVAL;
  pthread_mutex_lock(&g_cupti.lock);
  pd_cupti_buf_t *b = g_cupti.ready_head;
  g_cupti.ready_head = g_cupti.ready_tail = NULL;
  pthread_mutex_unlock(&g_cupti.lock);

  int64_t added = 0;
  int rc = 0;
  char namebuf[512];
  pd_cupti_join_t join = {0};
  /* Everything is added, then the window's rule applied once (pd_trace_clip_window):
   * warmup records go, with the GPU work their calls launched. */
  const size_t first = out != NULL ? pd_trace_count(out) : 0;
  while (b != NULL) {
    pd_cupti_buf_t *next = b->next;
    uint8_t *data = (uint8_t *)b + PD_CUPTI_HDR_BYTES;
    CUpti_Activity *rec = NULL;
    /* A parse stops at the first failed add; the rest of the buffers are still recycled. */
    while (out != NULL && rc == 0 && b->valid > 0) {
      CUptiResult r = cuptiActivityGetNextRecord(data, b->valid, &rec);
      if (r != CUPTI_SUCCESS) {
        /* MAX_LIMIT_REACHED is the normal end of a buffer; anything else ends it early. */
        if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) atomic_fetch_add(&g_cupti.callback_errors, 1);
        break;
      }
      const int arc = convert_one(rec, out, &join, src->opt.capture, src->opt.driver_api, namebuf, sizeof(namebuf));
      if (arc < 0)
        rc = arc;
      else
        added += arc;
    }
    buf_recycle(b);
    b = next;
  }
  /* The API records of CALLBACK_API, on the same timeline (pd_clock) as the rest. */
  const int64_t from_callbacks = cbapi_drain(rc == 0 ? out : NULL);
  if (from_callbacks < 0)
    rc = (int)from_callbacks;
  else
    added += from_callbacks;
  if (rc == 0) rc = join_apply(&join, out); /* before the clip: it moves the events */
  join_free(&join);
  if (rc == 0 && out != NULL) {
    const int64_t dropped = pd_trace_clip_window(out, first, window_start_ns);
    if (dropped < 0) rc = (int)dropped;
    else added -= dropped;
  }
  if (rc < 0) return rc;
  if (out != NULL) {
    rc = pd_cupti_link_sync(out);
    if (rc < 0) return rc;
  }
  return added;
}

int pd_prof_cupti_version(void) {
  uint32_t v = 0;
  if (cuptiGetVersion(&v) != CUPTI_SUCCESS) return 0;
  return (int)v;
}

uint64_t pd_cupti_source_dropped(const pd_cupti_source_t *src) {
  (void)src;
  return (uint64_t)atomic_load(&g_cupti.dropped);
}

uint64_t pd_cupti_source_buffers(const pd_cupti_source_t *src) {
  (void)src;
  return (uint64_t)atomic_load(&g_cupti.completed);
}

size_t pd_cupti_source_buffer_bytes(const pd_cupti_source_t *src) {
  (void)src;
  pthread_mutex_lock(&g_cupti.lock);
  size_t n = g_cupti.buffer_bytes;
  pthread_mutex_unlock(&g_cupti.lock);
  return n;
}

uint64_t pd_cupti_source_errors(const pd_cupti_source_t *src) {
  (void)src;
  return (uint64_t)atomic_load(&g_cupti.callback_errors);
}

const pd_device_props_t *pd_cupti_source_device(const pd_cupti_source_t *src) {
  return src != NULL ? &src->device : NULL;
}

int pd_cupti_source_detach(pd_cupti_source_t *src, char *err, size_t errlen) {
  if (src == NULL) return PD_EINVAL;
  if (!atomic_load(&g_cupti.attached) || !src->opt.detach || pd_cupti_launch_hook_installed()) return 0;
  int rc = pd_cupti_source_disable(src, err, errlen);
  if (rc != 0) return rc;
  /* Every buffer back first: cuptiFinalize frees what CUPTI still holds. Records are
   * queued for the caller's next collect (after a cycle's collect there are none left). */
  CUPTI_TRY(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), err, errlen);
  CUpti_SubscriberHandle sub = NULL;
  CUPTI_TRY(cuptiSubscribe(&sub, finalize_cb, NULL), err, errlen);
  CUptiResult r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiEnableCallback(cudaGetDevice)", r);
    (void)cuptiUnsubscribe(sub);
    return cupti_code(r);
  }
  atomic_store(&g_finalize_result, (int)CUPTI_SUCCESS);
  atomic_store(&g_finalize_requested, true);
  int dev = 0;
  cudaError_t ce = cudaGetDevice(&dev); /* its exit callback runs cuptiFinalize */
  if (atomic_exchange(&g_finalize_requested, false)) {
    /* The callback never ran: CUPTI stays attached, still usable, only not detached. */
    (void)cuptiUnsubscribe(sub);
    if (err != NULL)
      snprintf(err, errlen, "CUPTI detach: the cudaGetDevice exit callback did not run (%s)",
               ce == cudaSuccess ? "no error" : cudaGetErrorString(ce));
    return PD_ECUPTI;
  }
  r = (CUptiResult)atomic_load(&g_finalize_result);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiFinalize", r);
    return cupti_code(r);
  }
  /* The subscriber went with CUPTI's state; callbacks must be registered again. */
  atomic_store(&g_cupti.attached, false);
  return 0;
}

void pd_cupti_source_destroy(pd_cupti_source_t *src) {
  if (src == NULL) return;
  (void)pd_cupti_source_disable(src, NULL, 0);
  /* Forced flush hands back every buffer CUPTI holds, so none leaks past destroy. */
  if (atomic_load(&g_cupti.attached))
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  (void)pd_cupti_source_collect(src, NULL, 0);
  /* Leave the process as it was before the profiler: no CUPTI attached. */
  (void)pd_cupti_source_detach(src, NULL, 0);
  pthread_mutex_lock(&g_cupti.lock);
  pd_cupti_buf_t *f = g_cupti.free_list;
  g_cupti.free_list = NULL;
  g_cupti.free_count = 0;
  pthread_mutex_unlock(&g_cupti.lock);
  while (f != NULL) {
    pd_cupti_buf_t *next = f->next;
    free(f);
    f = next;
  }
  pd_cupti_convert_reset();
  cbapi_free();
  if (g_cupti.active == src) g_cupti.active = NULL;
  free(src);
}

/* ---- the injection library's launch hook ------------------------------------------------------- */

static struct {
  CUpti_SubscriberHandle sub;
  pd_cupti_launch_cb cb;
  void *user;
} g_hook;

/* ---- the API census's state (its functions below, with pd_source.h's census) ------------------ */

/* Every runtime and driver call's entry while on, sorted by whether the source's capture
 * records it (api_call_recorded()); the driver calls a
 * runtime call makes inside itself are counted apart. The callbacks come from the
 * subscriber the launch hook or the callback API records hold (cbapi_sub(); CUPTI allows
 * one), else from a subscriber of the census's own. */
static struct {
  atomic_bool on;
  atomic_uint generation; /* one per census: a thread's depth from an earlier one is stale */
  atomic_int_fast64_t recorded, runtime_unrecorded, driver_unrecorded, driver_internal;
  pd_cupti_options_t opt; /* the capture's: api_call_recorded() sorts the calls by it */
  CUpti_SubscriberHandle own;
} g_census;

/* How deep the calling thread is inside runtime calls, for this census: a driver call
 * there is the runtime's own (CUPTI's activity API records none of those). */
static _Thread_local struct {
  unsigned generation;
  int depth;
} t_census;

/* ---- API records from callbacks (PD_CUPTI_CAPTURE_CALLBACK_API) ----------------------------- */

/* One API call as its exit callback saw it. */
typedef struct {
  int64_t start_ns, end_ns;
  uint32_t correlation_id;
  uint32_t cbid;
  int32_t status;
  bool runtime;
} cb_rec_t;

/* The API records of one thread. `lock` guards recs/n/cap, taken by the thread once per
 * recorded call and by the collector once per collect, to swap the array for `spare` (the
 * collector's own, converted outside the lock). `next` and `exited` are g_cbapi.lock's. */
typedef struct cb_buf {
  struct cb_buf *next;
  bool exited;
  uint32_t tid;
  pthread_mutex_t lock;
  cb_rec_t *recs;
  size_t n, cap;
  cb_rec_t *spare;
  size_t spare_cap;
} cb_buf_t;

/* Records one thread may hold between two collects (40 bytes each: 80 MiB); more are
 * counted as dropped, as CUPTI counts the records it has no buffer for. */
#define CB_MAX_RECORDS ((size_t)1 << 21)

static struct {
  atomic_bool on;
  atomic_uint generation;     /* one per enable: a thread's depth from before is stale */
  atomic_int_fast64_t since_ns; /* the enable's time: a call entered before it is not kept */
  pd_cupti_options_t opt;     /* the capture's: api_call_recorded() picks the calls */
  CUpti_SubscriberHandle own; /* the subscriber, where the launch hook holds none */
  pthread_mutex_t lock;       /* guards the list of buffers */
  cb_buf_t *bufs;
  pthread_key_t key;
  bool key_ok;
} g_cbapi = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t g_cbapi_once = PTHREAD_ONCE_INIT;

/* The calling thread's buffer, and how deep it is inside recorded runtime calls in this
 * enable: a driver call there is the runtime's own, which the activity API never records
 * either (each cudaLaunchKernel makes a cuLaunchKernel). */
static _Thread_local struct {
  cb_buf_t *buf;
  unsigned generation;
  int depth;
} t_cb;

/* Thread exit: the buffer goes to the collector, which frees it once drained. */
static void cbapi_thread_exit(void *arg) {
  cb_buf_t *b = arg;
  t_cb.buf = NULL;
  pthread_mutex_lock(&g_cbapi.lock);
  b->exited = true;
  pthread_mutex_unlock(&g_cbapi.lock);
}

static void cbapi_key_init(void) { g_cbapi.key_ok = pthread_key_create(&g_cbapi.key, cbapi_thread_exit) == 0; }

static cb_buf_t *cbapi_buf(void) {
  if (t_cb.buf != NULL) return t_cb.buf;
  pthread_once(&g_cbapi_once, cbapi_key_init);
  cb_buf_t *b = calloc(1, sizeof(*b));
  if (b == NULL) return NULL;
  if (pthread_mutex_init(&b->lock, NULL) != 0) {
    free(b);
    return NULL;
  }
  b->tid = (uint32_t)syscall(SYS_gettid);
  pthread_mutex_lock(&g_cbapi.lock);
  b->next = g_cbapi.bufs;
  g_cbapi.bufs = b;
  pthread_mutex_unlock(&g_cbapi.lock);
  if (g_cbapi.key_ok) (void)pthread_setspecific(g_cbapi.key, b); /* without it: kept to the end */
  t_cb.buf = b;
  return b;
}

/* At a recorded call's entry: its start in the call's own slot; at its exit: the record. */
static void cbapi_record(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData *cb) {
  const unsigned gen = atomic_load_explicit(&g_cbapi.generation, memory_order_relaxed);
  if (t_cb.generation != gen) t_cb.generation = gen, t_cb.depth = 0;
  /* Only the recorded calls have callbacks, but the launch hook's and the census's come
   * through here as well. */
  if (!api_call_recorded(&g_cbapi.opt, domain, cbid) || cb->correlationData == NULL) return;
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (runtime)
      t_cb.depth++;
    else if (t_cb.depth > 0)
      return; /* the runtime call's own driver call */
    *cb->correlationData = (uint64_t)pd_clock_now_ns();
    return;
  }
  if (runtime) {
    if (t_cb.depth > 0) t_cb.depth--;
  } else if (t_cb.depth > 0) {
    return;
  }
  const int64_t end = pd_clock_now_ns();
  const int64_t start = (int64_t)*cb->correlationData;
  /* A call entered before this enable has no start of ours in its slot. */
  if (start < atomic_load_explicit(&g_cbapi.since_ns, memory_order_relaxed) || start > end) return;
  cb_buf_t *b = cbapi_buf();
  if (b == NULL) {
    atomic_fetch_add(&g_cupti.dropped, 1);
    return;
  }
  const int32_t status = cb->functionReturnValue != NULL ? *(const int32_t *)cb->functionReturnValue : 0;
  pthread_mutex_lock(&b->lock);
  if (b->n == b->cap) {
    const size_t ncap = b->cap ? b->cap * 2 : 1024;
    cb_rec_t *p = ncap <= CB_MAX_RECORDS ? realloc(b->recs, ncap * sizeof(*p)) : NULL;
    if (p == NULL) {
      pthread_mutex_unlock(&b->lock);
      atomic_fetch_add(&g_cupti.dropped, 1);
      return;
    }
    b->recs = p;
    b->cap = ncap;
  }
  b->recs[b->n++] = (cb_rec_t){.start_ns = start, .end_ns = end, .correlation_id = cb->correlationId,
                               .cbid = cbid, .status = status, .runtime = runtime};
  pthread_mutex_unlock(&b->lock);
}

static void census_count(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData *cb);

/* The subscriber's callback where the launch hook holds none (the census's too, while one
 * runs: CUPTI allows one subscriber). */
static void CUPTIAPI cbapi_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
  const CUpti_CallbackData *cb = data;
  if (cb == NULL || (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)) return;
  if (atomic_load_explicit(&g_census.on, memory_order_relaxed)) census_count(domain, cbid, cb);
  if (atomic_load_explicit(&g_cbapi.on, memory_order_relaxed)) cbapi_record(domain, cbid, cb);
}

static bool hook_cbid_is_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);

/* The recorded calls' callbacks on sub, on or off (off leaves the launch hook's own on).
 * Best effort per id (retired ids refuse); an error only when none could be set. */
static CUptiResult cbapi_ids(CUpti_SubscriberHandle sub, const pd_cupti_options_t *opt, bool on) {
  CUptiResult first = CUPTI_SUCCESS;
  int ok = 0;
  static const struct {
    CUpti_CallbackDomain domain;
    uint32_t size;
  } d[] = {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE},
           {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE}};
  for (size_t k = 0; k < sizeof(d) / sizeof(d[0]); k++)
    for (uint32_t cbid = 1; cbid < d[k].size; cbid++) {
      if (!api_call_recorded(opt, d[k].domain, cbid)) continue;
      if (!on && sub == g_hook.sub && hook_cbid_is_launch(d[k].domain, cbid)) continue;
      const CUptiResult r = cuptiEnableCallback(on ? 1 : 0, sub, d[k].domain, cbid);
      if (r == CUPTI_SUCCESS)
        ok++;
      else if (first == CUPTI_SUCCESS)
        first = r;
    }
  return ok > 0 ? CUPTI_SUCCESS : first;
}

/* The subscriber the API records' callbacks share: the launch hook's, else our own. */
static CUpti_SubscriberHandle cbapi_sub(void) { return g_hook.sub != NULL ? g_hook.sub : g_cbapi.own; }

static int cbapi_set(const pd_cupti_source_t *src, bool on, char *err, size_t errlen) {
  const unsigned cap = src->opt.capture;
  if (!(cap & PD_CUPTI_CAPTURE_CALLBACK_API) || (cap & PD_CUPTI_CAPTURE_KERNELS_ONLY)) return 0;
  if (!on) {
    if (!atomic_exchange(&g_cbapi.on, false)) return 0;
    CUptiResult r = CUPTI_SUCCESS;
    if (g_cbapi.own != NULL) {
      r = cuptiUnsubscribe(g_cbapi.own); /* the detach path subscribes its own next */
      g_cbapi.own = NULL;
    } else if (g_hook.sub != NULL) {
      r = cbapi_ids(g_hook.sub, &g_cbapi.opt, false);
    }
    if (r != CUPTI_SUCCESS) {
      cupti_errtext(err, errlen, "API callbacks off", r);
      return cupti_code(r);
    }
    return 0;
  }
  g_cbapi.opt = src->opt;
  atomic_store(&g_cbapi.since_ns, pd_clock_now_ns());
  atomic_fetch_add(&g_cbapi.generation, 1);
  if (g_hook.sub == NULL && g_cbapi.own == NULL)
    CUPTI_TRY(cuptiSubscribe(&g_cbapi.own, cbapi_cb, NULL), err, errlen);
  atomic_store(&g_cbapi.on, true);
  const CUptiResult r = cbapi_ids(cbapi_sub(), &src->opt, true);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiEnableCallback(API records)", r);
    (void)cbapi_set(src, false, NULL, 0);
    return cupti_code(r);
  }
  return 0;
}

static void cbapi_buf_destroy(cb_buf_t *b) {
  pthread_mutex_destroy(&b->lock);
  free(b->recs);
  free(b->spare);
  free(b);
}

/* Moves every thread's records into out (NULL: dropped), as events like the activity API's;
 * frees the buffers of exited threads. Returns the number added or a PD_E* code. */
static int64_t cbapi_drain(pd_trace_t *out) {
  const uint32_t pid = self_pid();
  int64_t added = 0;
  int rc = 0;
  char namebuf[256];
  pthread_mutex_lock(&g_cbapi.lock);
  for (cb_buf_t **pp = &g_cbapi.bufs; *pp != NULL;) {
    cb_buf_t *b = *pp;
    pthread_mutex_lock(&b->lock);
    cb_rec_t *recs = b->recs;
    const size_t n = b->n, cap = b->cap;
    b->recs = b->spare;
    b->cap = b->spare_cap;
    b->n = 0;
    pthread_mutex_unlock(&b->lock);
    for (size_t i = 0; out != NULL && rc == 0 && i < n; i++) {
      const cb_rec_t *c = &recs[i];
      pd_event_t ev;
      memset(&ev, 0, sizeof(ev));
      api_event_init(&ev, c->runtime, c->start_ns, c->end_ns, c->correlation_id, pid, b->tid, c->cbid, c->status,
                     namebuf, sizeof(namebuf));
      const int arc = pd_trace_add(out, &ev);
      if (arc < 0)
        rc = arc;
      else
        added++;
    }
    b->spare = recs; /* the collector's until the next swap */
    b->spare_cap = cap;
    if (b->exited) {
      *pp = b->next;
      cbapi_buf_destroy(b);
    } else {
      pp = &b->next;
    }
  }
  pthread_mutex_unlock(&g_cbapi.lock);
  return rc < 0 ? rc : added;
}

/* At the source's destroy: the records dropped and their memory returned. A live thread's
 * buffer stays (its thread still points at it), empty; an exited thread's goes. */
static void cbapi_free(void) {
  (void)cbapi_drain(NULL);
  pthread_mutex_lock(&g_cbapi.lock);
  for (cb_buf_t *b = g_cbapi.bufs; b != NULL; b = b->next) {
    pthread_mutex_lock(&b->lock);
    free(b->recs);
    b->recs = NULL;
    b->n = b->cap = 0;
    pthread_mutex_unlock(&b->lock);
    free(b->spare);
    b->spare = NULL;
    b->spare_cap = 0;
  }
  pthread_mutex_unlock(&g_cbapi.lock);
}

void pd_cupti_callback_api_test_on(const pd_cupti_options_t *opt) {
  if (opt == NULL) {
    atomic_store(&g_cbapi.on, false);
    return;
  }
  g_cbapi.opt = *opt;
  atomic_store(&g_cbapi.since_ns, pd_clock_now_ns());
  atomic_fetch_add(&g_cbapi.generation, 1);
  atomic_store(&g_cbapi.on, true);
}

void pd_cupti_callback_api_test_call(int domain, uint32_t cbid, const void *cbdata) {
  if (cbdata != NULL) cbapi_cb(NULL, (CUpti_CallbackDomain)domain, cbid, cbdata);
}

int64_t pd_cupti_callback_api_test_drain(pd_trace_t *out) { return cbapi_drain(out); }

/* ---- the API census (pd_source.h) ------------------------------------------------------------ */


static void census_count(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData *cb) {
  if (cb == NULL) return;
  const unsigned gen = atomic_load_explicit(&g_census.generation, memory_order_relaxed);
  if (t_census.generation != gen) t_census.generation = gen, t_census.depth = 0;
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    if (!enter) {
      if (t_census.depth > 0) t_census.depth--; /* a call entered before the census: no count */
      return;
    }
    t_census.depth++;
    if (api_call_recorded(&g_census.opt, domain, cbid))
      atomic_fetch_add(&g_census.recorded, 1);
    else
      atomic_fetch_add(&g_census.runtime_unrecorded, 1);
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && enter && t_census.depth > 0) {
    atomic_fetch_add(&g_census.driver_internal, 1);
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && enter) {
    if (api_call_recorded(&g_census.opt, domain, cbid))
      atomic_fetch_add(&g_census.recorded, 1);
    else
      atomic_fetch_add(&g_census.driver_unrecorded, 1);
  }
}

static void CUPTIAPI census_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
  if (atomic_load_explicit(&g_census.on, memory_order_relaxed)) census_count(domain, cbid, data);
}

static int census_domains(CUpti_SubscriberHandle sub, bool on) {
  CUptiResult r = cuptiEnableDomain(on ? 1 : 0, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  if (r == CUPTI_SUCCESS) r = cuptiEnableDomain(on ? 1 : 0, sub, CUPTI_CB_DOMAIN_DRIVER_API);
  return r;
}

static int census_stop(void) {
  atomic_store(&g_census.on, false);
  CUptiResult r = CUPTI_SUCCESS;
  if (g_census.own != NULL) {
    r = cuptiUnsubscribe(g_census.own);
    g_census.own = NULL;
  } else if (cbapi_sub() != NULL) {
    /* back to what the shared subscriber had: the hook's launches, the API records' calls */
    r = census_domains(cbapi_sub(), false);
    if (r == CUPTI_SUCCESS && g_hook.sub != NULL) r = hook_enable_launches(g_hook.sub);
    if (r == CUPTI_SUCCESS && atomic_load(&g_cbapi.on)) r = cbapi_ids(cbapi_sub(), &g_cbapi.opt, true);
  }
  return r;
}

static int census_start(const pd_cupti_source_t *src, char *err, size_t errlen) {
  g_census.opt = src->opt;
  atomic_store(&g_census.recorded, 0);
  atomic_store(&g_census.runtime_unrecorded, 0);
  atomic_store(&g_census.driver_unrecorded, 0);
  atomic_store(&g_census.driver_internal, 0);
  atomic_fetch_add(&g_census.generation, 1);
  CUptiResult r;
  if (cbapi_sub() != NULL) {
    r = census_domains(cbapi_sub(), true);
  } else {
    r = cuptiSubscribe(&g_census.own, census_cb, NULL);
    if (r == CUPTI_SUCCESS) {
      r = census_domains(g_census.own, true);
      if (r != CUPTI_SUCCESS) {
        (void)cuptiUnsubscribe(g_census.own);
        g_census.own = NULL;
      }
    } else {
      g_census.own = NULL;
    }
  }
  if (r != CUPTI_SUCCESS) {
    if (cbapi_sub() != NULL) (void)census_stop();
    cupti_errtext(err, errlen, "API census", r);
    return cupti_code(r);
  }
  atomic_store(&g_census.on, true);
  return 0;
}

static int rs_census(pd_record_source_t *s, bool on, pd_api_census_t *out, char *err, size_t errlen) {
  const pd_cupti_source_t *src = s->impl;
  if (out != NULL) *out = (pd_api_census_t){0};
  if (on) {
    if (atomic_load(&g_census.on)) (void)census_stop();
    return src->enabled ? census_start(src, err, errlen) : PD_ESTATE;
  }
  if (!atomic_load(&g_census.on)) return 0;
  const CUptiResult r = census_stop();
  if (out != NULL)
    *out = (pd_api_census_t){.recorded = atomic_load(&g_census.recorded),
                             .runtime_unrecorded = atomic_load(&g_census.runtime_unrecorded),
                             .driver_unrecorded = atomic_load(&g_census.driver_unrecorded),
                             .driver_internal = atomic_load(&g_census.driver_internal)};
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "API census end", r);
    return cupti_code(r);
  }
  return 0;
}

static void CUPTIAPI launch_hook_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                    const void *data) {
  const CUpti_CallbackData *cb = data;
  if (cb == NULL || (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)) return;
  const bool census = atomic_load_explicit(&g_census.on, memory_order_relaxed);
  const bool records = atomic_load_explicit(&g_cbapi.on, memory_order_relaxed);
  if (census) census_count(domain, cbid, cb);
  if (records) cbapi_record(domain, cbid, cb);
  /* The census and the API records enable more calls than the launches. */
  if ((census || records) && !hook_cbid_is_launch(domain, cbid)) return;
  g_hook.cb(g_hook.user, cb->symbolName, domain == CUPTI_CB_DOMAIN_RUNTIME_API, cb->callbackSite == CUPTI_API_EXIT);
}

/* The runtime's kernel launch calls (the driver's come from pd_cupti_driver_cbid_is_launch). */
static const CUpti_CallbackId k_runtime_launches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000, /* <<<>>> as nvcc 13 compiles it */
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
};

static bool hook_cbid_is_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    return pd_cupti_driver_cbid_is_launch(cbid) && cbid != CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch &&
           cbid != CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  for (size_t i = 0; i < sizeof(k_runtime_launches) / sizeof(k_runtime_launches[0]); i++)
    if (k_runtime_launches[i] == cbid) return true;
  return false;
}

/* The hook's callbacks: the kernel launch calls, runtime and driver (graph launches are no
 * kernel's launch). */
static int hook_enable_launches(CUpti_SubscriberHandle sub) {
  CUptiResult r = CUPTI_SUCCESS;
  for (size_t i = 0; r == CUPTI_SUCCESS && i < sizeof(k_runtime_launches) / sizeof(k_runtime_launches[0]); i++)
    r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, k_runtime_launches[i]);
  for (uint32_t cbid = CUPTI_DRIVER_TRACE_CBID_INVALID + 1; r == CUPTI_SUCCESS && cbid < CUPTI_DRIVER_TRACE_CBID_SIZE;
       cbid++)
    if (hook_cbid_is_launch(CUPTI_CB_DOMAIN_DRIVER_API, cbid)) r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
  return r;
}

bool pd_cupti_launch_hook_installed(void) { return g_hook.sub != NULL; }

int pd_cupti_launch_hook_install(pd_cupti_launch_cb cb, void *user, char *err, size_t errlen) {
  if (cb == NULL) return PD_EINVAL;
  if (g_hook.sub != NULL) {
    if (err != NULL) snprintf(err, errlen, "the launch hook is already installed");
    return PD_ESTATE;
  }
  g_hook.cb = cb;
  g_hook.user = user;
  CUpti_SubscriberHandle sub = NULL;
  CUptiResult r = cuptiSubscribe(&sub, launch_hook_cb, NULL);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiSubscribe", r);
    return cupti_code(r);
  }
  r = hook_enable_launches(sub);
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiEnableCallback(kernel launches)", r);
    (void)cuptiUnsubscribe(sub);
    return cupti_code(r);
  }
  g_hook.sub = sub;
  return 0;
}

int pd_cupti_launch_hook_finalize(char *err, size_t errlen) {
  if (g_hook.sub == NULL) return 0;
  if (g_cupti.active != NULL) {
    if (err != NULL) snprintf(err, errlen, "CUPTI detach: the profiler's source still exists");
    return PD_ESTATE;
  }
  const CUptiResult r = cuptiFinalize();
  if (r != CUPTI_SUCCESS) {
    cupti_errtext(err, errlen, "cuptiFinalize", r);
    return cupti_code(r);
  }
  g_hook.sub = NULL; /* the subscriber went with CUPTI's state */
  atomic_store(&g_cupti.attached, false);
  return 0;
}

/* ---- the record-source interface (pd_source.h) ----------------------------------------------- */

static int rs_enable(pd_record_source_t *s, char *err, size_t errlen) {
  return pd_cupti_source_enable(s->impl, err, errlen);
}
static int rs_disable(pd_record_source_t *s, char *err, size_t errlen) {
  return pd_cupti_source_disable(s->impl, err, errlen);
}
static int rs_flush(pd_record_source_t *s, bool forced, char *err, size_t errlen) {
  return pd_cupti_source_flush(s->impl, forced, err, errlen);
}
static int64_t rs_collect(pd_record_source_t *s, pd_trace_t *out, int64_t window_start_ns) {
  return pd_cupti_source_collect(s->impl, out, window_start_ns);
}
static int rs_detach(pd_record_source_t *s, char *err, size_t errlen) {
  return pd_cupti_source_detach(s->impl, err, errlen);
}
static const pd_device_props_t *rs_device(const pd_record_source_t *s) { return pd_cupti_source_device(s->impl); }
static uint64_t rs_dropped(const pd_record_source_t *s) { return pd_cupti_source_dropped(s->impl); }
static uint64_t rs_errors(const pd_record_source_t *s) { return pd_cupti_source_errors(s->impl); }
static uint64_t rs_buffers(const pd_record_source_t *s) { return pd_cupti_source_buffers(s->impl); }
static size_t rs_buffer_bytes(const pd_record_source_t *s) { return pd_cupti_source_buffer_bytes(s->impl); }
static void rs_destroy(pd_record_source_t *s) { pd_cupti_source_destroy(s->impl); }

static const pd_record_source_ops_t cupti_ops = {
    .name = "CUPTI", /* the word the profiler's warnings have always used */
    .enable = rs_enable,
    .disable = rs_disable,
    .flush = rs_flush,
    .collect = rs_collect,
    .detach = rs_detach,
    .device = rs_device,
    .dropped = rs_dropped,
    .errors = rs_errors,
    .buffers = rs_buffers,
    .buffer_bytes = rs_buffer_bytes,
    .destroy = rs_destroy,
    .census = rs_census,
};

int pd_cupti_record_source_create(const pd_cupti_options_t *opt, pd_record_source_t **out, char *err,
                                  size_t errlen) {
  if (out == NULL) return PD_EINVAL;
  *out = NULL;
  pd_cupti_source_t *src = NULL;
  int rc = pd_cupti_source_create(opt, &src, err, errlen);
  if (rc != 0) return rc;
  src->base.ops = &cupti_ops;
  src->base.impl = src;
  *out = &src->base;
  return 0;
}
