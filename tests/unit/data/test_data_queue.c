/* test_data_queue.c: the CPU half of the data pipeline (src/scen/data_queue.c):
 * in-order delivery with uneven workers, bounded prefetch, epochs with and without
 * persistent workers, determinism across worker counts, num_workers = 0, shutdown while
 * workers block or sleep, failed allocations, and that every buffer is freed. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data_queue.h"
#include "pd/pd_cnn.h"
#include "pd/pd_common.h"
#include "pd/pd_data.h"

#define PIX (PD_CNN_IMAGE_C * PD_CNN_IMAGE_H * PD_CNN_IMAGE_W)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Counting allocator: checks that destroy frees exactly what create allocated, and can
 * fail the n-th allocation. */
typedef struct {
  atomic_int allocs;
  atomic_int frees;
  int fail_at; /* 1-based allocation that returns NULL; 0: never */
} counting_t;

static void *counting_alloc(size_t bytes, void *user) {
  counting_t *c = user;
  int n = atomic_fetch_add(&c->allocs, 1) + 1;
  if (c->fail_at > 0 && n == c->fail_at) {
    atomic_fetch_sub(&c->allocs, 1);
    return NULL;
  }
  return malloc(bytes);
}

static void counting_free(void *p, void *user) {
  counting_t *c = user;
  atomic_fetch_add(&c->frees, 1);
  free(p);
}

static pd_dq_config_t small_config(int workers, int prefetch, int batches_per_epoch) {
  pd_dq_config_t c;
  pd_dq_config_init(&c);
  c.batch_size = 4;
  c.num_workers = workers;
  c.prefetch_factor = prefetch;
  c.cpu_work = 0;
  c.seed = 7;
  c.samples_per_epoch = (int64_t)batches_per_epoch * c.batch_size + 3; /* +3: dropped tail */
  return c;
}

static int64_t produced(pd_dq_t *dq) {
  pd_dq_stats_t st;
  pd_dq_get_stats(dq, &st);
  return st.produced;
}

/* Waits up to timeout_s for the produced count to reach want. */
static bool wait_produced(pd_dq_t *dq, int64_t want, double timeout_s) {
  double end = now_s() + timeout_s;
  while (produced(dq) < want && now_s() < end) sleep_ms(2);
  return produced(dq) >= want;
}

/* Checks one batch against pd_sample_fill() for its indices. */
static void expect_batch_content(const pd_dq_batch_t *b, int batch_size, uint64_t seed) {
  static float img[PIX];
  for (int i = 0; i < batch_size; i++) {
    int32_t label;
    pd_sample_fill(seed, b->first_index + i, 0, img, &label);
    cr_expect_eq(b->labels[i], label, "batch %lld sample %d label", (long long)b->seq, i);
    cr_expect(memcmp(img, b->images + (size_t)i * PIX, sizeof(img)) == 0, "batch %lld sample %d image",
              (long long)b->seq, i);
  }
}

static void slow_worker0(int worker, int64_t seq, void *user) {
  (void)seq;
  (void)user;
  if (worker == 0) sleep_ms(15);
}

Test(data_queue, delivers_in_order_although_worker0_is_slow) {
  pd_dq_config_t c = small_config(3, 2, 10);
  c.before_fill = slow_worker0;
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  for (int64_t i = 0; i < 25; i++) {
    pd_dq_batch_t *b = NULL;
    cr_assert_eq(pd_dq_next(dq, &b), 0, "batch %lld", (long long)i);
    cr_expect_eq(b->seq, i);
    cr_expect_eq(b->epoch, i / 10, "batch %lld epoch %lld", (long long)i, (long long)b->epoch);
    cr_expect_eq(b->first_index, (i % 10) * 4, "batch %lld first_index %lld", (long long)i,
                 (long long)b->first_index);
    cr_expect_eq(b->worker, (int)((i % 10) % 3), "batch %lld from worker %d", (long long)i, b->worker);
    expect_batch_content(b, 4, 7);
    pd_dq_release(dq, b);
  }
  /* the loader's fill time counts the making of each batch: worker 0's 15 ms each */
  pd_dq_stats_t st;
  pd_dq_get_stats(dq, &st);
  cr_expect_geq(st.fill_ns, 9 * 15000000LL, "worker 0 made at least 9 batches of 15 ms: %lld ns",
                (long long)st.fill_ns);
  pd_dq_destroy(dq);
}

Test(data_queue, prefetch_is_bounded_per_worker) {
  pd_dq_config_t c = small_config(2, 3, 100);
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  cr_assert(wait_produced(dq, 6, 5.0), "workers made only %lld batches", (long long)produced(dq));
  sleep_ms(100); /* room to overshoot, if the bound were broken */
  pd_dq_stats_t st;
  pd_dq_get_stats(dq, &st);
  cr_expect_eq(st.produced, 6, "2 workers x prefetch 3 must stop at 6, made %lld", (long long)st.produced);
  cr_expect_eq(st.max_queued, 3, "max queued per worker %d", st.max_queued);
  /* time blocked on a full FIFO (the 100 ms above) is not fill time */
  cr_expect_gt(st.fill_ns, 0);
  cr_expect_lt(st.fill_ns, 50000000LL, "fill time %lld ns counts the wait for room", (long long)st.fill_ns);
  /* Taking one batch frees one place in worker 0's FIFO: exactly one more is made. */
  pd_dq_batch_t *b = NULL;
  cr_assert_eq(pd_dq_next(dq, &b), 0);
  cr_expect(wait_produced(dq, 7, 5.0));
  sleep_ms(50);
  cr_expect_eq(produced(dq), 7, "made %lld after one batch was taken", (long long)produced(dq));
  pd_dq_release(dq, b);
  pd_dq_destroy(dq);
}

Test(data_queue, consumer_may_hold_held_max_batches) {
  pd_dq_config_t c = small_config(1, 1, 100);
  c.held_max = 2;
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  pd_dq_batch_t *a = NULL, *b = NULL, *x = NULL;
  cr_assert_eq(pd_dq_next(dq, &a), 0);
  cr_assert_eq(pd_dq_next(dq, &b), 0);
  cr_expect(a->images != b->images, "two held batches share a buffer");
  cr_expect_eq(pd_dq_next(dq, &x), PD_ESTATE, "a third held batch must be refused");
  cr_expect_null(x);
  /* While both are held the worker still fills its FIFO from its spare buffers. */
  cr_expect(wait_produced(dq, 3, 5.0));
  pd_dq_release(dq, a);
  cr_assert_eq(pd_dq_next(dq, &x), 0);
  cr_expect_eq(x->seq, 2);
  pd_dq_release(dq, b);
  pd_dq_release(dq, x);
  pd_dq_destroy(dq);
}

/* Sums every byte of the first n batches in a position-dependent way. */
static uint64_t stream_digest(int workers, int prefetch, bool persistent, int n) {
  pd_dq_config_t c = small_config(workers, prefetch, 5);
  c.persistent_workers = persistent;
  c.cpu_work = 50;
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0, "workers %d", workers);
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) {
    pd_dq_batch_t *b = NULL;
    cr_assert_eq(pd_dq_next(dq, &b), 0);
    const unsigned char *p = (const unsigned char *)b->images;
    size_t bytes = pd_dq_batch_bytes(c.batch_size);
    for (size_t k = 0; k < bytes; k++) h = (h ^ p[k]) * 1099511628211ull;
    pd_dq_release(dq, b);
  }
  pd_dq_destroy(dq);
  return h;
}

Test(data_queue, batches_are_identical_for_any_worker_count) {
  const int n = 13; /* crosses two epoch boundaries at 5 batches per epoch */
  uint64_t ref = stream_digest(0, 1, false, n);
  cr_expect_eq(stream_digest(1, 1, false, n), ref, "1 worker differs from 0");
  cr_expect_eq(stream_digest(2, 2, false, n), ref, "2 workers differ from 0");
  cr_expect_eq(stream_digest(4, 3, true, n), ref, "4 persistent workers differ from 0");
  cr_expect_eq(stream_digest(7, 1, false, n), ref, "7 workers (more than batches per epoch) differ");
}

static void run_epochs(bool persistent, int64_t *threads, int64_t *epochs) {
  pd_dq_config_t c = small_config(2, 2, 4);
  c.persistent_workers = persistent;
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  for (int i = 0; i < 4; i++) { /* the whole of epoch 0 */
    pd_dq_batch_t *b = NULL;
    cr_assert_eq(pd_dq_next(dq, &b), 0);
    pd_dq_release(dq, b);
  }
  /* Nothing of epoch 1 is made before the consumer asks for it (torch semantics). */
  sleep_ms(80);
  cr_expect_eq(produced(dq), 4, "persistent=%d: %lld batches made before epoch 1 began", persistent,
               (long long)produced(dq));
  for (int i = 4; i < 12; i++) { /* epochs 1 and 2 */
    pd_dq_batch_t *b = NULL;
    cr_assert_eq(pd_dq_next(dq, &b), 0);
    cr_expect_eq(b->epoch, i / 4);
    pd_dq_release(dq, b);
  }
  pd_dq_stats_t st;
  pd_dq_get_stats(dq, &st);
  *threads = st.threads_started;
  *epochs = st.epochs_started;
  pd_dq_destroy(dq);
}

Test(data_queue, persistent_workers_survive_epochs) {
  int64_t threads = 0, epochs = 0;
  run_epochs(true, &threads, &epochs);
  cr_expect_eq(threads, 2, "persistent: %lld threads started over 3 epochs", (long long)threads);
  cr_expect_eq(epochs, 3);
  run_epochs(false, &threads, &epochs);
  cr_expect_eq(threads, 6, "not persistent: %lld threads started over 3 epochs", (long long)threads);
  cr_expect_eq(epochs, 3);
}

Test(data_queue, zero_workers_load_on_the_calling_thread) {
  pd_dq_config_t c = small_config(0, 5, 3);
  c.persistent_workers = true; /* ignored */
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  sleep_ms(20);
  cr_expect_eq(produced(dq), 0, "nothing may be made before it is asked for");
  for (int64_t i = 0; i < 7; i++) {
    pd_dq_batch_t *b = NULL;
    cr_assert_eq(pd_dq_next(dq, &b), 0);
    cr_expect_eq(b->worker, -1);
    cr_expect_eq(b->seq, i);
    cr_expect_eq(b->first_index, (i % 3) * 4);
    expect_batch_content(b, 4, 7);
    pd_dq_release(dq, b);
  }
  pd_dq_stats_t st;
  pd_dq_get_stats(dq, &st);
  cr_expect_eq(st.threads_started, 0);
  cr_expect_eq(st.produced, 7);
  cr_expect_eq(st.epochs_started, 3);
  pd_dq_destroy(dq);
}

Test(data_queue, destroy_returns_while_workers_block_on_full_fifos) {
  counting_t cnt = {0};
  pd_dq_config_t c = small_config(3, 2, 100);
  c.alloc = counting_alloc;
  c.free = counting_free;
  c.alloc_user = &cnt;
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  cr_assert(wait_produced(dq, 6, 5.0));
  pd_dq_batch_t *held = NULL;
  cr_assert_eq(pd_dq_next(dq, &held), 0); /* destroy also frees a batch still held */
  double t0 = now_s();
  pd_dq_destroy(dq);
  double took = now_s() - t0;
  cr_expect(took < 1.0, "destroy took %.3f s", took);
  cr_expect_eq(atomic_load(&cnt.allocs), 3 * (2 + 2), "allocations: %d", atomic_load(&cnt.allocs));
  cr_expect_eq(atomic_load(&cnt.frees), atomic_load(&cnt.allocs), "%d freed of %d allocated",
               atomic_load(&cnt.frees), atomic_load(&cnt.allocs));
}

Test(data_queue, destroy_interrupts_workers_between_samples) {
  pd_dq_config_t c = small_config(2, 2, 100);
  c.batch_size = 64;
  c.samples_per_epoch = 64 * 10;
  c.io_sleep_ms = 20; /* a batch takes 1.3 s */
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  sleep_ms(50);
  double t0 = now_s();
  pd_dq_destroy(dq);
  double took = now_s() - t0;
  cr_expect(took < 0.5, "destroy waited %.3f s for half-made batches", took);
}

Test(data_queue, failed_allocation_frees_everything) {
  for (int fail_at = 1; fail_at <= 6; fail_at++) {
    counting_t cnt = {0};
    cnt.fail_at = fail_at;
    pd_dq_config_t c = small_config(2, 1, 10); /* 2 pools x 3 buffers */
    c.alloc = counting_alloc;
    c.free = counting_free;
    c.alloc_user = &cnt;
    pd_dq_t *dq = (pd_dq_t *)&cnt; /* must be reset to NULL on failure */
    cr_expect_eq(pd_dq_create(&c, &dq), PD_ENOMEM, "fail_at %d", fail_at);
    cr_expect_null(dq);
    cr_expect_eq(atomic_load(&cnt.frees), atomic_load(&cnt.allocs), "fail_at %d: %d freed of %d", fail_at,
                 atomic_load(&cnt.frees), atomic_load(&cnt.allocs));
  }
}

Test(data_queue, rejects_bad_configs) {
  pd_dq_t *dq = NULL;
  pd_dq_config_t c = small_config(2, 2, 4);
  c.batch_size = 0;
  cr_expect_eq(pd_dq_create(&c, &dq), PD_EINVAL);
  c = small_config(2, 2, 4);
  c.prefetch_factor = 0;
  cr_expect_eq(pd_dq_create(&c, &dq), PD_EINVAL);
  c = small_config(-1, 2, 4);
  cr_expect_eq(pd_dq_create(&c, &dq), PD_EINVAL);
  c = small_config(2, 2, 4);
  c.samples_per_epoch = c.batch_size - 1;
  cr_expect_eq(pd_dq_create(&c, &dq), PD_EINVAL);
  c = small_config(2, 2, 4);
  c.held_max = 0;
  cr_expect_eq(pd_dq_create(&c, &dq), PD_EINVAL);
  c = small_config(2, 2, 4);
  c.alloc = counting_alloc; /* alloc without free */
  cr_expect_eq(pd_dq_create(&c, &dq), PD_EINVAL);
  cr_expect_null(dq);
}

/* pd_dq_try_next (the device prefetch's source) never waits and never makes a batch: it
 * hands over only what a worker has made, in order, and leaves an epoch's start and the
 * zero-worker loader to pd_dq_next. */
static void block_worker1(int worker, int64_t seq, void *user) {
  (void)seq;
  if (worker == 1) {
    while (!__atomic_load_n((int *)user, __ATOMIC_ACQUIRE)) sleep_ms(1);
  }
}

Test(data_queue, try_next_takes_only_a_made_batch_in_order) {
  int go = 0;
  pd_dq_config_t c = small_config(2, 2, 4);
  c.before_fill = block_worker1;
  c.fill_user = &go;
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  pd_dq_batch_t *b = NULL;
  /* Epoch 0's workers start with the queue, so a try_next here could already take batch 0
   * (it did under AddressSanitizer): the first batch comes from pd_dq_next, as in a run. */
  cr_assert_eq(pd_dq_next(dq, &b), 0);
  cr_expect_eq(b->seq, 0);
  pd_dq_release(dq, b);
  /* batch 1 is worker 1's, which is held: not ready, and try_next returns at once */
  cr_assert(wait_produced(dq, 2, 5.0)); /* worker 0 made batches 0 and 2 */
  const double t0 = now_s();
  cr_expect_eq(pd_dq_try_next(dq, &b), 0);
  cr_expect_null(b, "batch 1 is not made yet");
  cr_expect_lt(now_s() - t0, 0.5, "try_next waited");
  __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
  cr_assert(wait_produced(dq, 3, 5.0));
  cr_expect_eq(pd_dq_try_next(dq, &b), 0);
  cr_assert_not_null(b, "batch 1 was made");
  cr_expect_eq(b->seq, 1);
  expect_batch_content(b, 4, 7);
  pd_dq_release(dq, b);
  cr_expect_eq(pd_dq_try_next(dq, &b), 0);
  cr_assert_not_null(b);
  cr_expect_eq(b->seq, 2);
  pd_dq_release(dq, b);
  cr_expect_eq(pd_dq_try_next(NULL, &b), PD_EINVAL);
  cr_expect_eq(pd_dq_try_next(dq, NULL), PD_EINVAL);
  pd_dq_destroy(dq);
}

Test(data_queue, try_next_leaves_zero_workers_and_held_max_alone) {
  pd_dq_config_t c = small_config(0, 2, 4);
  c.held_max = 1;
  pd_dq_t *dq = NULL;
  cr_assert_eq(pd_dq_create(&c, &dq), 0);
  pd_dq_batch_t *b = NULL, *x = NULL;
  cr_expect_eq(pd_dq_try_next(dq, &b), 0);
  cr_expect_null(b, "with no workers the consumer makes the batch: that is a wait");
  cr_expect_eq(produced(dq), 0);
  cr_assert_eq(pd_dq_next(dq, &b), 0);
  cr_expect_eq(pd_dq_try_next(dq, &x), PD_ESTATE, "held_max batches are held");
  cr_expect_null(x);
  pd_dq_release(dq, b);
  pd_dq_destroy(dq);
}
