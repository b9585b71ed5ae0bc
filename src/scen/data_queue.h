/* data_queue.h (internal to pd_scen): the CPU half of the data pipeline.
 *
 * `num_workers` threads make host batches into per-worker bounded FIFOs of
 * `prefetch_factor` batches; the consumer takes batch k from worker k % num_workers, so
 * batches arrive in order whatever the workers' speed (torch's DataLoader does the
 * same). num_workers = 0 makes each batch on the consumer's thread, in pd_dq_next().
 *
 * Epochs follow torch: a batch is never prefetched across an epoch boundary; the next
 * epoch starts when the consumer asks for its first batch. persistent_workers keeps the
 * threads alive across epochs; otherwise they exit at the end of their epoch and new
 * ones start with the next one.
 *
 * No CUDA here: host buffers come from an allocation hook (pinned memory in data.c,
 * malloc by default), so the threading is unit-tested on machines without a GPU.
 *
 * Threads: pd_dq_next, pd_dq_release and pd_dq_destroy are called from one thread (the
 * consumer); the workers are internal. The hooks run on worker threads (fill) and on the
 * creating/destroying thread (alloc/free).
 */
#ifndef PD_DATA_QUEUE_H
#define PD_DATA_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pd_dq pd_dq_t;

/* One host batch. The consumer owns it from pd_dq_next() until pd_dq_release(). */
typedef struct {
  float *images;       /* batch_size x 3 x 32 x 32 float32, host */
  int32_t *labels;     /* batch_size, host */
  int64_t seq;         /* batch number since creation: 0, 1, 2, ... */
  int64_t epoch;       /* seq / batches_per_epoch */
  int64_t first_index; /* sample index of images[0] */
  int worker;          /* producing worker, -1 when made on the consumer's thread */
  int pool_;           /* internal: the pool the buffer returns to */
} pd_dq_batch_t;

/* Host buffer hooks: return NULL on failure. */
typedef void *(*pd_dq_alloc_cb)(size_t bytes, void *user);
typedef void (*pd_dq_free_cb)(void *ptr, void *user);
/* Test seam: called on the producing thread just before batch `seq` is filled. */
typedef void (*pd_dq_fill_cb)(int worker, int64_t seq, void *user);

typedef struct {
  int batch_size;          /* >= 1 */
  int num_workers;         /* >= 0 */
  int prefetch_factor;     /* >= 1: batches queued per worker */
  bool persistent_workers;
  int cpu_work;            /* >= 0 */
  int io_sleep_ms;         /* >= 0 */
  uint64_t seed;
  int64_t samples_per_epoch; /* >= batch_size (drop_last) */
  int held_max;            /* batches the consumer holds at once before releasing, >= 1 */
  pd_dq_alloc_cb alloc;    /* NULL: malloc */
  pd_dq_free_cb free;      /* NULL: free */
  void *alloc_user;
  pd_dq_fill_cb before_fill; /* NULL: none */
  void *fill_user;
} pd_dq_config_t;

/* Counters for tests and the CLI's notes. */
typedef struct {
  int64_t produced;              /* batches made so far */
  int64_t fill_ns;               /* wall time spent making them, summed over the threads
                                    (not the time a worker waited for room): the loader's
                                    throughput is workers x produced / fill_ns */
  int max_queued;                /* most batches ever waiting in one worker's FIFO */
  int64_t threads_started;       /* worker threads created so far */
  int64_t epochs_started;
} pd_dq_stats_t;

/* Fills cfg with defaults (batch 64, 2 workers, prefetch 2, held_max 2, malloc). */
void pd_dq_config_init(pd_dq_config_t *cfg);
/* Allocates every buffer up front (num_workers x (prefetch_factor + held_max), or
 * held_max when num_workers = 0) and starts the workers. On success *out owns it; free
 * with pd_dq_destroy(). PD_EINVAL on a bad config, PD_ENOMEM when an allocation or a
 * thread fails (nothing is leaked). */
int pd_dq_create(const pd_dq_config_t *cfg, pd_dq_t **out);
/* Blocks until the next batch in order is ready and hands it over. PD_ESTATE when the
 * consumer already holds held_max batches; PD_ENOMEM when a new epoch's thread fails. */
int pd_dq_next(pd_dq_t *dq, pd_dq_batch_t **out);
/* Hands over the next batch in order only if a worker has made it already: never
 * blocks, never makes a batch itself. 0 with *out NULL when it is not ready (not made
 * yet, a new epoch's workers to start, or num_workers = 0: pd_dq_next() does those);
 * errors as pd_dq_next(). */
int pd_dq_try_next(pd_dq_t *dq, pd_dq_batch_t **out);
/* Gives a batch back to its pool so its buffer can be refilled. */
void pd_dq_release(pd_dq_t *dq, pd_dq_batch_t *batch);
/* Stops the workers (also those blocked on a full FIFO or sleeping between samples),
 * joins them and frees every buffer, including batches the consumer still holds.
 * NULL is a no-op. */
void pd_dq_destroy(pd_dq_t *dq);
void pd_dq_get_stats(pd_dq_t *dq, pd_dq_stats_t *stats);
/* Bytes of one host batch buffer (images then labels). */
size_t pd_dq_batch_bytes(int batch_size);

#endif /* PD_DATA_QUEUE_H */
