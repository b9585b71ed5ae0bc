/* data_queue.c: worker threads, per-worker bounded FIFOs and in-order delivery of host
 * batches (see data_queue.h for the contract).
 *
 * Locking: one mutex (dq->lock) guards every FIFO, free list, epoch counter and
 * statistic. Workers fill a batch with the lock released; they only take it to pop a
 * free buffer and to push the filled batch. Each worker waits on its own condition
 * variable (room in its FIFO, a new epoch, or stop); the consumer waits on
 * dq->can_consume. `stop` is also an atomic so a worker sees it between samples without
 * taking the lock.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "data_queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd/pd_cnn.h"
#include "pd/pd_common.h"
#include "pd/pd_host_calib.h"
#include "pd/pd_data.h"

#define PD_DQ_SAMPLE_FLOATS ((size_t)PD_CNN_IMAGE_C * PD_CNN_IMAGE_H * PD_CNN_IMAGE_W)

/* One pool of buffers; with workers, pool i belongs to worker i. */
typedef struct {
  struct pd_dq *dq;
  int id;
  pthread_t thread;
  bool running;                 /* a thread exists and has not been joined */
  pthread_cond_t can_produce;   /* room in the FIFO, a new epoch, or stop */
  int64_t epoch;                /* epoch this worker is producing */
  int64_t next_b;               /* next batch of that epoch it will make */
  pd_dq_batch_t *bufs;
  int nbufs;
  pd_dq_batch_t **free_list;
  int nfree;
  pd_dq_batch_t **fifo;         /* ring of prefetch_factor */
  int fifo_head;
  int fifo_len;
} pd_dq_pool_t;

struct pd_dq {
  pd_dq_config_t cfg;
  int64_t batches_per_epoch;
  pthread_mutex_t lock;
  pthread_cond_t can_consume;
  atomic_bool stop;
  bool lock_ready;
  bool failed;        /* a new epoch's thread could not start: the queue is unusable */
  int64_t open_epoch; /* the consumer's epoch; persistent workers move to it */
  int64_t next_seq;   /* consumer side: the batch it takes next */
  int held;           /* batches the consumer holds */
  int npools;
  pd_dq_pool_t *pools;
  pd_dq_stats_t stats;
};

size_t pd_dq_batch_bytes(int batch_size) {
  return (size_t)batch_size * (PD_DQ_SAMPLE_FLOATS * sizeof(float) + sizeof(int32_t));
}

void pd_dq_config_init(pd_dq_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->batch_size = 64;
  cfg->num_workers = 2;
  cfg->prefetch_factor = 2;
  cfg->cpu_work = 200;
  cfg->samples_per_epoch = 4096;
  cfg->held_max = 2;
}

static void *pd_dq_default_alloc(size_t bytes, void *user) {
  (void)user;
  return malloc(bytes);
}

static void pd_dq_default_free(void *ptr, void *user) {
  (void)user;
  free(ptr);
}

/* Sleeps ms milliseconds, resuming after signals. */
static void pd_dq_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Makes batch `seq` into b. Returns false when stop was raised midway (the batch is then
 * incomplete and must go back to the free list). Runs without the lock. */
static bool pd_dq_fill(pd_dq_t *dq, pd_dq_batch_t *b, int64_t seq, int worker) {
  const pd_dq_config_t *c = &dq->cfg;
  if (c->before_fill != NULL) c->before_fill(worker, seq, c->fill_user);
  b->seq = seq;
  b->epoch = seq / dq->batches_per_epoch;
  b->first_index = (seq % dq->batches_per_epoch) * c->batch_size;
  b->worker = worker;
  for (int i = 0; i < c->batch_size; i++) {
    if (atomic_load_explicit(&dq->stop, memory_order_relaxed)) return false;
    if (c->io_sleep_ms > 0) pd_dq_sleep_ms(c->io_sleep_ms);
    pd_sample_fill(c->seed, b->first_index + i, c->cpu_work, b->images + (size_t)i * PD_DQ_SAMPLE_FLOATS,
                   &b->labels[i]);
  }
  return true;
}

static void *pd_dq_worker_main(void *arg) {
  pd_dq_pool_t *w = arg;
  pd_dq_t *dq = w->dq;
  const int nw = dq->cfg.num_workers;
  pd_host_pin_release_thread(); /* never the launching thread's pinned CPU */
  /* A name of its own, so ps, top and bench/gate/host_probe.sh tell the loader threads
   * from the launching thread and the driver's (best effort: a name never fails a worker). */
  char name[16];
  snprintf(name, sizeof name, "pd_loader%d", w->id % 1000);
  (void)pthread_setname_np(pthread_self(), name);
  pthread_mutex_lock(&dq->lock);
  while (!atomic_load(&dq->stop)) {
    if (w->next_b >= dq->batches_per_epoch) {
      /* This worker's share of the epoch is done. Like torch, nothing of the next epoch
       * is made before the consumer starts it. */
      if (!dq->cfg.persistent_workers) break;
      if (dq->open_epoch > w->epoch) {
        w->epoch = dq->open_epoch;
        w->next_b = w->id;
        continue;
      }
      pthread_cond_wait(&w->can_produce, &dq->lock);
      continue;
    }
    if (w->fifo_len >= dq->cfg.prefetch_factor || w->nfree == 0) {
      pthread_cond_wait(&w->can_produce, &dq->lock);
      continue;
    }
    const int64_t seq = w->epoch * dq->batches_per_epoch + w->next_b;
    w->next_b += nw;
    pd_dq_batch_t *b = w->free_list[--w->nfree];
    pthread_mutex_unlock(&dq->lock);

    const int64_t f0 = pd_clock_now_ns();
    const bool complete = pd_dq_fill(dq, b, seq, w->id);
    const int64_t fill_ns = pd_clock_now_ns() - f0;

    pthread_mutex_lock(&dq->lock);
    if (!complete) {
      w->free_list[w->nfree++] = b;
      break;
    }
    /* A worker makes its batches in order, so its FIFO is in order too. */
    w->fifo[(w->fifo_head + w->fifo_len) % dq->cfg.prefetch_factor] = b;
    w->fifo_len++;
    dq->stats.produced++;
    dq->stats.fill_ns += fill_ns;
    if (w->fifo_len > dq->stats.max_queued) dq->stats.max_queued = w->fifo_len;
    pthread_cond_broadcast(&dq->can_consume);
  }
  pthread_mutex_unlock(&dq->lock);
  return NULL;
}

/* Starts the thread of pool w for `epoch`. Called with the lock not held and the
 * worker's previous thread (if any) joined. */
static int pd_dq_start_worker(pd_dq_t *dq, pd_dq_pool_t *w, int64_t epoch) {
  w->epoch = epoch;
  w->next_b = w->id;
  if (pthread_create(&w->thread, NULL, pd_dq_worker_main, w) != 0) return PD_ENOMEM;
  w->running = true;
  pthread_mutex_lock(&dq->lock);
  dq->stats.threads_started++;
  pthread_mutex_unlock(&dq->lock);
  return 0;
}

static void pd_dq_stop_and_join(pd_dq_t *dq) {
  pthread_mutex_lock(&dq->lock);
  atomic_store(&dq->stop, true);
  for (int i = 0; i < dq->npools; i++) pthread_cond_broadcast(&dq->pools[i].can_produce);
  pthread_cond_broadcast(&dq->can_consume);
  pthread_mutex_unlock(&dq->lock);
  for (int i = 0; i < dq->npools; i++) {
    if (dq->pools[i].running) {
      pthread_join(dq->pools[i].thread, NULL);
      dq->pools[i].running = false;
    }
  }
}

void pd_dq_destroy(pd_dq_t *dq) {
  if (dq == NULL) return;
  if (dq->lock_ready && dq->pools != NULL) pd_dq_stop_and_join(dq);
  if (dq->pools != NULL) {
    for (int i = 0; i < dq->npools; i++) {
      pd_dq_pool_t *p = &dq->pools[i];
      if (p->bufs != NULL) {
        for (int j = 0; j < p->nbufs; j++) {
          /* images is the start of the buffer's one allocation. */
          if (p->bufs[j].images != NULL) dq->cfg.free(p->bufs[j].images, dq->cfg.alloc_user);
        }
      }
      free(p->bufs);
      free(p->free_list);
      free(p->fifo);
      if (dq->lock_ready) pthread_cond_destroy(&p->can_produce);
    }
    free(dq->pools);
  }
  if (dq->lock_ready) {
    pthread_cond_destroy(&dq->can_consume);
    pthread_mutex_destroy(&dq->lock);
  }
  free(dq);
}

static int pd_dq_config_check(const pd_dq_config_t *c) {
  if (c->batch_size < 1 || c->num_workers < 0 || c->prefetch_factor < 1 || c->cpu_work < 0 ||
      c->io_sleep_ms < 0 || c->held_max < 1 || c->samples_per_epoch < c->batch_size)
    return PD_EINVAL;
  if ((c->alloc == NULL) != (c->free == NULL)) return PD_EINVAL;
  return 0;
}

/* Allocates pool p's buffers and bookkeeping. */
static int pd_dq_pool_init(pd_dq_t *dq, pd_dq_pool_t *p, int id, int nbufs, int fifo_cap) {
  p->dq = dq;
  p->id = id;
  p->nbufs = nbufs;
  p->bufs = calloc((size_t)nbufs, sizeof(*p->bufs));
  p->free_list = calloc((size_t)nbufs, sizeof(*p->free_list));
  if (fifo_cap > 0) p->fifo = calloc((size_t)fifo_cap, sizeof(*p->fifo));
  if (p->bufs == NULL || p->free_list == NULL || (fifo_cap > 0 && p->fifo == NULL))
    return PD_ENOMEM;
  const size_t floats = (size_t)dq->cfg.batch_size * PD_DQ_SAMPLE_FLOATS;
  for (int j = 0; j < nbufs; j++) {
    void *mem = dq->cfg.alloc(pd_dq_batch_bytes(dq->cfg.batch_size), dq->cfg.alloc_user);
    if (mem == NULL) return PD_ENOMEM;
    p->bufs[j].images = mem;
    p->bufs[j].labels = (int32_t *)(p->bufs[j].images + floats);
    p->bufs[j].pool_ = id;
    p->free_list[p->nfree++] = &p->bufs[j];
  }
  return 0;
}

int pd_dq_create(const pd_dq_config_t *cfg, pd_dq_t **out) {
  if (cfg == NULL || out == NULL) return PD_EINVAL;
  *out = NULL;
  int rc = pd_dq_config_check(cfg);
  if (rc != 0) return rc;
  pd_dq_t *dq = calloc(1, sizeof(*dq));
  if (dq == NULL) return PD_ENOMEM;
  dq->cfg = *cfg;
  if (dq->cfg.alloc == NULL) {
    dq->cfg.alloc = pd_dq_default_alloc;
    dq->cfg.free = pd_dq_default_free;
  }
  dq->batches_per_epoch = cfg->samples_per_epoch / cfg->batch_size; /* drop_last */
  atomic_init(&dq->stop, false);
  if (pthread_mutex_init(&dq->lock, NULL) != 0) {
    free(dq);
    return PD_ENOMEM;
  }
  if (pthread_cond_init(&dq->can_consume, NULL) != 0) {
    pthread_mutex_destroy(&dq->lock);
    free(dq);
    return PD_ENOMEM;
  }
  dq->lock_ready = true;

  const int nw = cfg->num_workers;
  dq->npools = nw > 0 ? nw : 1;
  dq->pools = calloc((size_t)dq->npools, sizeof(*dq->pools));
  if (dq->pools == NULL) {
    pd_dq_destroy(dq);
    return PD_ENOMEM;
  }
  /* Condition variables first, so destroy can always destroy all of them. */
  for (int i = 0; i < dq->npools; i++) {
    if (pthread_cond_init(&dq->pools[i].can_produce, NULL) != 0) {
      /* Only the first i pools exist as far as destroy is concerned. */
      dq->npools = i;
      pd_dq_destroy(dq);
      return PD_ENOMEM;
    }
  }
  for (int i = 0; i < dq->npools; i++) {
    const int nbufs = nw > 0 ? cfg->prefetch_factor + cfg->held_max : cfg->held_max;
    rc = pd_dq_pool_init(dq, &dq->pools[i], i, nbufs, nw > 0 ? cfg->prefetch_factor : 0);
    if (rc != 0) {
      pd_dq_destroy(dq);
      return rc;
    }
  }
  dq->stats.epochs_started = 1;
  for (int i = 0; i < nw; i++) {
    rc = pd_dq_start_worker(dq, &dq->pools[i], 0);
    if (rc != 0) {
      pd_dq_destroy(dq);
      return rc;
    }
  }
  *out = dq;
  return 0;
}

/* Moves the workers to `epoch` (the consumer asked for its first batch). */
static int pd_dq_begin_epoch(pd_dq_t *dq, int64_t epoch) {
  pthread_mutex_lock(&dq->lock);
  dq->open_epoch = epoch;
  dq->stats.epochs_started++;
  if (dq->cfg.persistent_workers) {
    for (int i = 0; i < dq->npools; i++) pthread_cond_signal(&dq->pools[i].can_produce);
    pthread_mutex_unlock(&dq->lock);
    return 0;
  }
  pthread_mutex_unlock(&dq->lock);
  /* Every batch of the previous epoch was taken, so every worker has made its share
   * and is exiting: the joins do not wait on work. */
  for (int i = 0; i < dq->npools; i++) {
    if (dq->pools[i].running) {
      pthread_join(dq->pools[i].thread, NULL);
      dq->pools[i].running = false;
    }
  }
  for (int i = 0; i < dq->npools; i++) {
    int rc = pd_dq_start_worker(dq, &dq->pools[i], epoch);
    if (rc != 0) {
      dq->failed = true;
      return rc;
    }
  }
  return 0;
}

/* Hands over the next batch in order from its worker's FIFO; waits for it when `wait`,
 * else leaves *out NULL when it is not there yet. The epoch must be open. */
static int pd_dq_take(pd_dq_t *dq, bool wait, pd_dq_batch_t **out) {
  pd_dq_pool_t *w = &dq->pools[(dq->next_seq % dq->batches_per_epoch) % dq->cfg.num_workers];
  pthread_mutex_lock(&dq->lock);
  while (wait && w->fifo_len == 0 && !atomic_load(&dq->stop)) pthread_cond_wait(&dq->can_consume, &dq->lock);
  if (w->fifo_len == 0) {
    pthread_mutex_unlock(&dq->lock);
    return wait ? PD_ESTATE : 0;
  }
  pd_dq_batch_t *b = w->fifo[w->fifo_head];
  w->fifo_head = (w->fifo_head + 1) % dq->cfg.prefetch_factor;
  w->fifo_len--;
  dq->held++;
  pthread_cond_signal(&w->can_produce);
  pthread_mutex_unlock(&dq->lock);
  dq->next_seq++;
  *out = b;
  return 0;
}

int pd_dq_next(pd_dq_t *dq, pd_dq_batch_t **out) {
  if (dq == NULL || out == NULL) return PD_EINVAL;
  *out = NULL;
  if (dq->failed) return PD_ENOMEM;
  if (dq->held >= dq->cfg.held_max) return PD_ESTATE;
  const int64_t seq = dq->next_seq;
  const int64_t epoch = seq / dq->batches_per_epoch;

  if (dq->cfg.num_workers == 0) {
    /* On the calling thread: no FIFO, no prefetch, nothing to lock against. */
    pd_dq_pool_t *p = &dq->pools[0];
    if (p->nfree == 0) return PD_ESTATE;
    pd_dq_batch_t *b = p->free_list[--p->nfree];
    if (epoch > dq->open_epoch) {
      dq->open_epoch = epoch;
      dq->stats.epochs_started++;
    }
    const int64_t f0 = pd_clock_now_ns();
    pd_dq_fill(dq, b, seq, -1);
    dq->stats.fill_ns += pd_clock_now_ns() - f0;
    dq->stats.produced++;
    dq->next_seq++;
    dq->held++;
    *out = b;
    return 0;
  }

  if (epoch > dq->open_epoch) {
    int rc = pd_dq_begin_epoch(dq, epoch);
    if (rc != 0) return rc;
  }
  return pd_dq_take(dq, true, out);
}

int pd_dq_try_next(pd_dq_t *dq, pd_dq_batch_t **out) {
  if (dq == NULL || out == NULL) return PD_EINVAL;
  *out = NULL;
  if (dq->failed) return PD_ENOMEM;
  if (dq->held >= dq->cfg.held_max) return PD_ESTATE;
  /* Making a batch (no workers) or starting an epoch's workers is work the consumer
   * waits for: that stays in pd_dq_next(). */
  if (dq->cfg.num_workers == 0 || dq->next_seq / dq->batches_per_epoch > dq->open_epoch) return 0;
  return pd_dq_take(dq, false, out);
}

void pd_dq_release(pd_dq_t *dq, pd_dq_batch_t *batch) {
  if (dq == NULL || batch == NULL) return;
  pd_dq_pool_t *p = &dq->pools[batch->pool_];
  pthread_mutex_lock(&dq->lock);
  p->free_list[p->nfree++] = batch;
  dq->held--;
  pthread_cond_signal(&p->can_produce);
  pthread_mutex_unlock(&dq->lock);
}

void pd_dq_get_stats(pd_dq_t *dq, pd_dq_stats_t *stats) {
  pthread_mutex_lock(&dq->lock);
  *stats = dq->stats;
  pthread_mutex_unlock(&dq->lock);
}
