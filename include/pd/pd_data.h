/* pd_data.h: the synthetic dataset and the data pipeline that feeds the training step.
 *
 * Each sample is generated from (seed, index) alone, so runs are reproducible and any
 * worker can produce any sample. Images carry a class-dependent pattern plus noise, so
 * the loss really falls when the model trains.
 *
 * The pipeline: `num_workers` threads fill a bounded queue of `prefetch_factor` batches
 * per worker; num_workers = 0 loads on the calling thread. Batches are staged in pinned
 * (page-locked) or pageable host memory and copied to the device with cudaMemcpyAsync
 * on the consumer's stream.
 */
#ifndef PD_DATA_H
#define PD_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "pd/pd_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills one 3x32x32 float32 CHW image and its label (0..9) for sample `index`.
 * Deterministic in (seed, index). `cpu_work` extra sin/cos iterations per sample model
 * CPU augmentation (the result feeds into the image so it cannot be optimized away). */
void pd_sample_fill(uint64_t seed, int64_t index, int cpu_work, float *image, int32_t *label);

typedef struct {
  int batch_size;         /* >= 1 */
  int num_workers;        /* >= 0; 0 loads on the calling thread */
  int prefetch_factor;    /* batches queued per worker, >= 1 (ignored when num_workers = 0) */
  bool persistent_workers;/* keep workers alive across epochs (ignored when num_workers = 0) */
  bool pin_memory;        /* stage batches in page-locked memory, copy asynchronously */
  int cpu_work;           /* sin/cos iterations per sample */
  int io_sleep_ms;        /* simulated I/O latency per sample */
  uint64_t seed;
  int64_t samples_per_epoch; /* dataset length; drop_last semantics */
} pd_data_config_t;

typedef struct pd_data pd_data_t;

/* A batch on the device. The pipeline owns the memory.
 *
 * Device buffers are double-buffered: batch i lives in slot i % 2, so the copy of batch
 * i+1 (enqueued by pd_data_prefetch() or the next pd_data_next() call) never overwrites
 * batch i, and work on batch i may still run while batch i+1 is copied. Batch i stays
 * valid until the call that enqueues batch i+2's copy (pd_data_prefetch() after batch
 * i+1 was returned, or the pd_data_next() that returns batch i+2); that copy into the
 * same slot is stream-ordered, so work enqueued on the pipeline's stream before it still
 * reads batch i. Work on another stream must wait on the pipeline's stream first. */
typedef struct {
  const float *images;   /* batch x 3 x 32 x 32, device */
  const int32_t *labels; /* batch, device */
  int64_t first_index;   /* sample index of the batch's first sample */
  int64_t seq;           /* batch number since pd_data_create(): 0, 1, 2, ... */
  int64_t epoch;         /* seq / (samples_per_epoch / batch_size) */
} pd_batch_t;

/* Fills cfg with defaults (batch 64, 2 workers, prefetch 2, cpu_work 200, no sleep,
 * pageable memory, not persistent, seed 0, 4096 samples per epoch). */
void pd_data_config_init(pd_data_config_t *cfg);
/* Creates the pipeline on the current device and starts its workers (they begin
 * prefetching at once, like iter(DataLoader)); copies go on `stream`. On success *out
 * owns it; free with pd_data_destroy(), which joins every thread and frees every buffer.
 * PD_EINVAL on a bad config, PD_ENOMEM (host or pinned memory, threads), PD_EDEVOOM
 * (device buffers), PD_ECUDA (other CUDA failures); nothing is leaked on failure. */
int pd_data_create(const pd_data_config_t *cfg, cudaStream_t stream, pd_data_t **out);
/* Waits for the next batch in order (inside a PD_RANGE_DATA_WAIT host range) and
 * enqueues its host-to-device copy on the stream; fills *batch (see pd_batch_t for how
 * long it stays valid). Batches continue across epochs without end. */
int pd_data_next(pd_data_t *data, pd_batch_t *batch);
/* Enqueues the next batch's host-to-device copy ahead, only if that costs no wait: the
 * slot's previous copy is done and a worker has made the batch already (with 0 workers,
 * or at an epoch's start, it never does). The next pd_data_next() then only hands it
 * over. Same calls and bytes as a copy from pd_data_next(). Call it between steps, after
 * the work on the current batch is enqueued (see pd_batch_t for what stays valid).
 * 0 also when nothing was done; PD_E* as pd_data_next(). */
int pd_data_prefetch(pd_data_t *data);
/* What the loader made so far: its threads, the batches, and the wall time the threads
 * spent making them (summed; waiting for room in a full queue is not counted). Its
 * throughput is max(workers, 1) x batches / fill time. */
typedef struct {
  int workers;      /* num_workers; 0: batches are made on the consumer's thread */
  int64_t batches;
  int64_t fill_ns;
} pd_data_stats_t;

/* Fills *out (zeros for a NULL data). Thread: the consumer's. */
void pd_data_get_stats(pd_data_t *data, pd_data_stats_t *out);
/* Waits for the copies in flight, stops and joins the workers, frees host, pinned and
 * device memory. NULL is a no-op. */
void pd_data_destroy(pd_data_t *data);
/* Returns the detail of the last pd_data_* failure on the calling thread ("cudaMalloc
 * (786432 bytes): out of memory"); static thread-local storage, "" when none. */
const char *pd_data_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* PD_DATA_H */
