/* tsan_threads.c: the host code that threads share, driven hard enough for ThreadSanitizer
 * to see its races, if any:
 *  - host ranges pushed and popped on four threads while the main thread steps a CPU-only
 *    profiler through repeat=0 cycles (ranges.c's per-thread buffers, their collection
 *    and the orphaned buffers of exited threads);
 *  - the data pipeline's bounded queues: four workers, epochs that end and restart
 *    threads, the consumer checking the order, destroyed while workers are busy;
 *  - the output writer: four threads writing files at once (its signal table of live
 *    temporaries) while another records inputs (its input registry).
 * Exit 0 when every check holds; ThreadSanitizer's reports fail the CTest entry. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_queue.h"
#include "pd/pd_common.h"
#include "pd/pd_out.h"
#include "pd/pd_prof.h"

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "tsan_threads: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

/* ---- ranges ------------------------------------------------------------------------------ */

static atomic_int g_stop;
static atomic_long g_cycle_events;

static int count_cb(pd_prof_t *prof, const pd_trace_t *cycle, void *user) {
  (void)prof;
  (void)user;
  atomic_fetch_add(&g_cycle_events, (long)pd_trace_count(cycle));
  return 0;
}

static void *range_worker(void *arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    pd_range_push("outer");
    pd_range_push_shape("inner", "[[1, 2]]");
    pd_range_pop();
    pd_range_pop();
  }
  return NULL;
}

static void ranges_under_threads(void) {
  pd_prof_config_t cfg;
  pd_prof_config_init(&cfg);
  cfg.activities = PD_ACTIVITY_CPU;
  cfg.record_shapes = true;
  cfg.schedule = (pd_schedule_t){.wait = 1, .warmup = 1, .active = 2, .repeat = 0};
  cfg.on_trace_ready = count_cb;
  pd_prof_t *p = NULL;
  CHECK(pd_prof_create(&cfg, &p) == 0);
  CHECK(pd_prof_start(p) == 0);
  pthread_t th[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, range_worker, NULL) == 0);
  for (int s = 0; s < 200; s++) {
    pd_range_push("main");
    usleep(200);
    pd_range_pop();
    CHECK(pd_prof_step(p) == 0);
  }
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  CHECK(pd_prof_stop(p) == 0);
  pd_prof_destroy(p);
  CHECK(atomic_load(&g_cycle_events) > 0);
  printf("ranges: %ld events in the cycles\n", atomic_load(&g_cycle_events));
}

/* ---- data queue -------------------------------------------------------------------------- */

static void data_queue_under_threads(void) {
  for (int persistent = 0; persistent < 2; persistent++) {
    pd_dq_config_t cfg;
    pd_dq_config_init(&cfg);
    cfg.batch_size = 4;
    cfg.num_workers = 4;
    cfg.prefetch_factor = 2;
    cfg.persistent_workers = persistent;
    cfg.cpu_work = 10;
    cfg.samples_per_epoch = 4 * 7; /* 7 batches an epoch: threads restart often */
    pd_dq_t *dq = NULL;
    CHECK(pd_dq_create(&cfg, &dq) == 0);
    for (int64_t k = 0; k < 150; k++) {
      pd_dq_batch_t *b = NULL;
      CHECK(pd_dq_next(dq, &b) == 0);
      CHECK(b->seq == k);
      pd_dq_release(dq, b);
    }
    pd_dq_destroy(dq); /* workers still filling the next batches */
  }
  printf("data queue: 2 x 150 batches in order\n");
}

/* ---- output writer ------------------------------------------------------------------------ */

static char g_dir[64];

static void *out_worker(void *arg) {
  int id = (int)(long)arg;
  char path[128];
  for (int i = 0; i < 50; i++) {
    snprintf(path, sizeof path, "%s/w%d_%d.json", g_dir, id, i % 5);
    CHECK(pd_out_write_all(path, 0, "{\"ok\": true}\n", 13) == 0);
  }
  return NULL;
}

static void *input_worker(void *arg) {
  (void)arg;
  for (int i = 0; i < 200; i++) (void)pd_out_protect_input("/etc/hostname");
  return NULL;
}

static void out_under_threads(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/pd_tsan.XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  pthread_t th[5];
  for (long i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, out_worker, (void *)i) == 0);
  CHECK(pthread_create(&th[4], NULL, input_worker, NULL) == 0);
  for (int i = 0; i < 5; i++) pthread_join(th[i], NULL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  CHECK(system(cmd) == 0);
  printf("output writer: 4 x 50 files at once\n");
}

int main(void) {
  ranges_under_threads();
  data_queue_under_threads();
  out_under_threads();
  printf("tsan_threads: ok\n");
  return 0;
}
