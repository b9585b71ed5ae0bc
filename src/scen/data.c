/* data.c: the GPU half of the data pipeline (pd_data.h).
 *
 * The CPU half (worker threads, bounded FIFOs, in-order delivery) is data_queue.c; this
 * file gives it pinned (cudaHostAlloc) or pageable (malloc) staging buffers, copies each
 * batch into one of two device slots with cudaMemcpyAsync on the consumer's stream, and
 * hands a staging buffer back to its worker only once its copy has completed, so a
 * worker never overwrites memory the DMA engine still reads.
 *
 * How completion is known without a CUDA call per batch: after each copy the stream
 * writes the batch's number + 1 into a mapped pinned word (cuStreamWriteValue64, found
 * with cudaGetDriverEntryPointByVersion, so nothing links the driver library), and the
 * host reads that word. Even a non-blocking cudaEventQuery shows up in CUPTI as an
 * "Event Sync" record that the profiler counts as a synchronizing call per step, which
 * would be the pipeline's artefact, not the user's. Only when a copy is really still
 * running does the host block, in cudaEventSynchronize. Where stream memory operations
 * are unavailable, cudaEventQuery decides instead.
 *
 * Prefetch (pd_data_prefetch): the loop may enqueue the next batch's copy ahead, between
 * steps, as a CUDA data prefetcher does in a torch loop. It never waits: only when the
 * slot's previous copy is done and a worker has the next batch made already. The copy is
 * on the same stream, in the same order as pd_data_next() would enqueue it (after all
 * work the consumer enqueued before, so the slot's previous batch is no longer read), and
 * with the same calls, so a step's API calls and bytes do not change; pd_data_next() then
 * only hands the slot over. Why: under CUPTI the copy's four calls (two cudaMemcpyAsync,
 * cudaEventRecord, cuStreamWriteValue64) cost about 20 us, which the run counted as data
 * wait although nothing waited for the loader (clean read 7% of its step as data wait on
 * a fresh H100). A batch not ready is still waited for, and copied, in pd_data_next().
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* types of cuStreamWriteValue64 only; called through an entry point */
#include <cuda_runtime_api.h>

#include "data_queue.h"
#include "pd/pd_cnn.h"
#include "pd/pd_data.h"
#include "pd/pd_prof.h"

#define PD_DATA_SLOTS 2
/* Host range around the copy enqueue (the wait itself is PD_RANGE_DATA_WAIT[_MAIN]). */
#define PD_DATA_RANGE_COPY "DataLoader.to_device"

typedef CUresult (*pd_write_value64_t)(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags);

struct pd_data {
  pd_data_config_t cfg;
  cudaStream_t stream;
  pd_dq_t *dq;
  float *d_images[PD_DATA_SLOTS];
  int32_t *d_labels[PD_DATA_SLOTS];
  cudaEvent_t copied[PD_DATA_SLOTS];     /* recorded after the slot's last copy */
  pd_dq_batch_t *staged[PD_DATA_SLOTS];  /* host batch whose copy may be in flight */
  int64_t seq;
  pd_dq_batch_t *ready; /* batch seq, its copy already enqueued by pd_data_prefetch() */
  /* Copy-completion word: the stream writes seq + 1 of each copied batch into it. */
  pd_write_value64_t write_value64; /* NULL: completion is asked with cudaEventQuery */
  uint64_t *done_host;              /* mapped pinned memory */
  CUdeviceptr done_dev;
};

static _Thread_local char pd_data_err_[256];

const char *pd_data_last_error(void) { return pd_data_err_; }

static void pd_data_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pd_data_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pd_data_err_, sizeof(pd_data_err_), fmt, ap);
  va_end(ap);
}

/* Maps a failed CUDA call to a PD code, keeping "file:line call: text" for the caller. */
static int pd_data_cuda_fail(cudaError_t e, const char *call, int line) {
  pd_data_set_error("data.c:%d %s: %s", line, call, cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? PD_EDEVOOM : PD_ECUDA;
}

#define PD_DATA_CUDA(call)                                          \
  do {                                                              \
    cudaError_t pd_e_ = (call);                                     \
    if (pd_e_ != cudaSuccess) return pd_data_cuda_fail(pd_e_, #call, __LINE__); \
  } while (0)

void pd_data_config_init(pd_data_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->batch_size = 64;
  cfg->num_workers = 2;
  cfg->prefetch_factor = 2;
  cfg->persistent_workers = false;
  cfg->pin_memory = false;
  cfg->cpu_work = 200;
  cfg->io_sleep_ms = 0;
  cfg->seed = 0;
  cfg->samples_per_epoch = 4096;
}

/* Pinned staging: page-locked memory is what lets cudaMemcpyAsync run as a true
 * asynchronous DMA. Failures come back as NULL (PD_ENOMEM from the queue); the text is
 * kept for pd_data_last_error(). */
static void *pd_data_pinned_alloc(size_t bytes, void *user) {
  (void)user;
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    pd_data_set_error("cudaHostAlloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    return NULL;
  }
  return p;
}

static void pd_data_pinned_free(void *ptr, void *user) {
  (void)user;
  /* Teardown cannot report: the pipeline is going away whatever this returns. */
  (void)cudaFreeHost(ptr);
}

static void *pd_data_pageable_alloc(size_t bytes, void *user) {
  (void)user;
  void *p = malloc(bytes);
  if (p == NULL) pd_data_set_error("malloc(%zu bytes) for a host batch failed", bytes);
  return p;
}

static void pd_data_pageable_free(void *ptr, void *user) {
  (void)user;
  free(ptr);
}

void pd_data_destroy(pd_data_t *data) {
  if (data == NULL) return;
  /* Copies still reading staging buffers must finish before those buffers are freed.
   * Errors are ignored on purpose: this is teardown, and every resource is released
   * regardless. */
  for (int i = 0; i < PD_DATA_SLOTS; i++) {
    if (data->staged[i] != NULL && data->copied[i] != NULL) (void)cudaEventSynchronize(data->copied[i]);
  }
  pd_dq_destroy(data->dq);
  if (data->done_host != NULL) (void)cudaFreeHost(data->done_host);
  for (int i = 0; i < PD_DATA_SLOTS; i++) {
    if (data->d_images[i] != NULL) (void)cudaFree(data->d_images[i]);
    if (data->d_labels[i] != NULL) (void)cudaFree(data->d_labels[i]);
    if (data->copied[i] != NULL) (void)cudaEventDestroy(data->copied[i]);
  }
  free(data);
}

static int pd_data_config_check(const pd_data_config_t *c) {
  if (c->batch_size < 1) {
    pd_data_set_error("batch_size must be >= 1, got %d", c->batch_size);
    return PD_EINVAL;
  }
  if (c->num_workers < 0 || c->prefetch_factor < 1 || c->cpu_work < 0 || c->io_sleep_ms < 0) {
    pd_data_set_error("num_workers >= 0, prefetch_factor >= 1, cpu_work >= 0 and io_sleep_ms >= 0 "
                      "are required");
    return PD_EINVAL;
  }
  if (c->samples_per_epoch < c->batch_size) {
    pd_data_set_error("samples_per_epoch (%lld) must hold at least one batch of %d (drop_last)",
                      (long long)c->samples_per_epoch, c->batch_size);
    return PD_EINVAL;
  }
  return 0;
}

static int pd_data_create_gpu(pd_data_t *data) {
  const size_t image_bytes = (size_t)data->cfg.batch_size * PD_CNN_IMAGE_C * PD_CNN_IMAGE_H *
                             PD_CNN_IMAGE_W * sizeof(float);
  const size_t label_bytes = (size_t)data->cfg.batch_size * sizeof(int32_t);
  for (int i = 0; i < PD_DATA_SLOTS; i++) {
    PD_DATA_CUDA(cudaEventCreateWithFlags(&data->copied[i], cudaEventDisableTiming));
    PD_DATA_CUDA(cudaMalloc((void **)&data->d_images[i], image_bytes));
    PD_DATA_CUDA(cudaMalloc((void **)&data->d_labels[i], label_bytes));
  }
  return 0;
}

/* Sets up the copy-completion word. Best effort: on any failure the pipeline asks
 * cudaEventQuery instead, so this never fails the pipeline. Runs once, at create, where
 * its synchronize is outside any profiled step. */
static void pd_data_init_done_word(pd_data_t *data) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == NULL) {
    (void)cudaGetLastError(); /* not sticky: clear it so later calls do not report it */
    return;
  }
  void *dev = NULL;
  if (cudaHostAlloc((void **)&data->done_host, sizeof(uint64_t), cudaHostAllocMapped) != cudaSuccess ||
      cudaHostGetDevicePointer(&dev, data->done_host, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  __atomic_store_n(data->done_host, 0, __ATOMIC_RELEASE);
  data->done_dev = (CUdeviceptr)(uintptr_t)dev;
  pd_write_value64_t write = (pd_write_value64_t)fn;
  /* A trial write proves the device takes stream memory operations. */
  if (write((CUstream)data->stream, data->done_dev, 0, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS ||
      cudaStreamSynchronize(data->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  data->write_value64 = write;
}

int pd_data_create(const pd_data_config_t *cfg, cudaStream_t stream, pd_data_t **out) {
  if (cfg == NULL || out == NULL) return PD_EINVAL;
  *out = NULL;
  pd_data_err_[0] = '\0';
  int rc = pd_data_config_check(cfg);
  if (rc != 0) return rc;
  pd_data_t *data = calloc(1, sizeof(*data));
  if (data == NULL) return PD_ENOMEM;
  data->cfg = *cfg;
  data->stream = stream;

  rc = pd_data_create_gpu(data);
  if (rc != 0) {
    pd_data_destroy(data);
    return rc;
  }
  pd_data_init_done_word(data);

  pd_dq_config_t q;
  pd_dq_config_init(&q);
  q.batch_size = cfg->batch_size;
  q.num_workers = cfg->num_workers;
  q.prefetch_factor = cfg->prefetch_factor;
  q.persistent_workers = cfg->persistent_workers;
  q.cpu_work = cfg->cpu_work;
  q.io_sleep_ms = cfg->io_sleep_ms;
  q.seed = cfg->seed;
  q.samples_per_epoch = cfg->samples_per_epoch;
  q.held_max = PD_DATA_SLOTS; /* one staged batch per device slot */
  q.alloc = cfg->pin_memory ? pd_data_pinned_alloc : pd_data_pageable_alloc;
  q.free = cfg->pin_memory ? pd_data_pinned_free : pd_data_pageable_free;
  rc = pd_dq_create(&q, &data->dq);
  if (rc != 0) {
    if (pd_data_err_[0] == '\0') pd_data_set_error("data queue: %s", pd_strerror(rc));
    pd_data_destroy(data);
    return rc;
  }
  *out = data;
  return 0;
}

/* Gives the slot's previous staging buffer back to its worker once its copy is done.
 * That copy was enqueued two batches ago and is almost always finished. Still copying:
 * when `block`, a real wait (the profiler rightly sees it as one); else *released stays
 * false and nothing changes. */
static int pd_data_release_slot(pd_data_t *data, int slot, bool block, bool *released) {
  *released = true;
  if (data->staged[slot] == NULL) return 0;
  bool done = false;
  if (data->write_value64 != NULL) {
    done = __atomic_load_n(data->done_host, __ATOMIC_ACQUIRE) >= (uint64_t)data->staged[slot]->seq + 1;
  } else {
    cudaError_t q = cudaEventQuery(data->copied[slot]);
    if (q == cudaSuccess) done = true;
    else if (q != cudaErrorNotReady) return pd_data_cuda_fail(q, "cudaEventQuery(copied[slot])", __LINE__);
  }
  if (!done && !block) {
    *released = false;
    return 0;
  }
  if (!done) PD_DATA_CUDA(cudaEventSynchronize(data->copied[slot]));
  pd_dq_release(data->dq, data->staged[slot]);
  data->staged[slot] = NULL;
  return 0;
}

/* Takes the next host batch from the queue: the part the step waits on. */
static int pd_data_wait_batch(pd_data_t *data, int slot, pd_dq_batch_t **hb) {
  bool released = false;
  int rc = pd_data_release_slot(data, slot, true, &released);
  if (rc != 0) return rc;
  rc = pd_dq_next(data->dq, hb);
  if (rc != 0) pd_data_set_error("data queue: %s", pd_strerror(rc));
  return rc;
}

/* Enqueues the host-to-device copy of hb into device slot `slot`, in a host range of
 * its own so the copy's GPU time is attributed to it, like torch's `.to(device)`. */
static int pd_data_copy(pd_data_t *data, int slot, const pd_dq_batch_t *hb) {
  const size_t image_bytes = (size_t)data->cfg.batch_size * PD_CNN_IMAGE_C * PD_CNN_IMAGE_H *
                             PD_CNN_IMAGE_W * sizeof(float);
  const size_t label_bytes = (size_t)data->cfg.batch_size * sizeof(int32_t);
  const bool ranged = pd_range_push(PD_DATA_RANGE_COPY) == 0;
  /* From pinned memory these return at once; from pageable memory the driver stages
   * the data itself first, which is the cost --pin_memory removes. */
  cudaError_t e = cudaMemcpyAsync(data->d_images[slot], hb->images, image_bytes, cudaMemcpyHostToDevice,
                                  data->stream);
  const char *call = "cudaMemcpyAsync(images)";
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(data->d_labels[slot], hb->labels, label_bytes, cudaMemcpyHostToDevice, data->stream);
    call = "cudaMemcpyAsync(labels)";
  }
  if (e == cudaSuccess) {
    e = cudaEventRecord(data->copied[slot], data->stream);
    call = "cudaEventRecord(copied[slot])";
  }
  CUresult w = CUDA_SUCCESS;
  if (e == cudaSuccess && data->write_value64 != NULL)
    w = data->write_value64((CUstream)data->stream, data->done_dev, (cuuint64_t)hb->seq + 1,
                            CU_STREAM_WRITE_VALUE_DEFAULT);
  if (ranged) (void)pd_range_pop();
  if (w != CUDA_SUCCESS) {
    pd_data_set_error("data.c:%d cuStreamWriteValue64: CUresult %d", __LINE__, (int)w);
    return PD_ECUDA;
  }
  return e == cudaSuccess ? 0 : pd_data_cuda_fail(e, call, __LINE__);
}

int pd_data_prefetch(pd_data_t *data) {
  if (data == NULL) return PD_EINVAL;
  if (data->ready != NULL) return 0;
  const int slot = (int)(data->seq % PD_DATA_SLOTS);
  bool released = false;
  int rc = pd_data_release_slot(data, slot, false, &released);
  if (rc != 0 || !released) return rc;
  pd_dq_batch_t *hb = NULL;
  rc = pd_dq_try_next(data->dq, &hb);
  if (rc != 0) {
    pd_data_set_error("data queue: %s", pd_strerror(rc));
    return rc;
  }
  if (hb == NULL) return 0; /* not made yet: pd_data_next() waits for it */
  data->staged[slot] = hb;
  rc = pd_data_copy(data, slot, hb);
  if (rc == 0) data->ready = hb;
  return rc;
}

int pd_data_next(pd_data_t *data, pd_batch_t *batch) {
  if (data == NULL || batch == NULL) return PD_EINVAL;
  const int slot = (int)(data->seq % PD_DATA_SLOTS);
  pd_dq_batch_t *hb = data->ready;
  /* A range that fails to open (no profiler state to record into) must not fail the
   * batch; only a range that opened is closed. The range is there for a prefetched
   * batch too, so every step has one (a trace reads the wait as ~0 then). */
  const bool ranged =
      pd_range_push(data->cfg.num_workers > 0 ? PD_RANGE_DATA_WAIT : PD_RANGE_DATA_WAIT_MAIN) == 0;
  int rc = hb != NULL ? 0 : pd_data_wait_batch(data, slot, &hb);
  if (ranged) (void)pd_range_pop();
  if (rc != 0) return rc;

  if (data->ready != NULL) {
    data->ready = NULL; /* its copy is on the stream already */
  } else {
    data->staged[slot] = hb;
    rc = pd_data_copy(data, slot, hb);
    if (rc != 0) return rc;
  }

  batch->images = data->d_images[slot];
  batch->labels = data->d_labels[slot];
  batch->first_index = hb->first_index;
  batch->seq = hb->seq;
  batch->epoch = hb->epoch;
  data->seq++;
  return 0;
}

void pd_data_get_stats(pd_data_t *data, pd_data_stats_t *out) {
  memset(out, 0, sizeof(*out));
  if (data == NULL) return;
  pd_dq_stats_t st;
  pd_dq_get_stats(data->dq, &st);
  out->workers = data->cfg.num_workers;
  out->batches = st.produced;
  out->fill_ns = st.fill_ns;
}
