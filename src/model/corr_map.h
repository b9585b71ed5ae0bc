/* corr_map.h: correlation id -> event index, open addressing (internal to pd_prof).
 *
 * The one map from a CUDA call's correlation id to the call's event, used by the trace
 * index (GPU activity -> launching call) and the replay (a cudaEventRecord's id -> the
 * call). The first insert of an id wins; 0 is "no id" in the event model and never a key.
 * The caller sizes it for its keys and frees keys and vals.
 */
#ifndef PD_CORR_MAP_H
#define PD_CORR_MAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "pd/pd_common.h"

typedef struct {
  uint64_t *keys;
  int32_t *vals;
  size_t n; /* a power of two, at least twice the keys */
} pd_corr_map_t;

/* Allocates room for nkeys keys. Returns 0 or PD_ENOMEM (then free what is set). */
static inline int pd_corr_map_init(pd_corr_map_t *m, size_t nkeys) {
  m->n = 16;
  while (m->n < nkeys * 2) m->n *= 2;
  m->keys = (uint64_t *)calloc(m->n, sizeof(*m->keys));
  m->vals = (int32_t *)malloc(m->n * sizeof(*m->vals));
  return m->keys != NULL && m->vals != NULL ? 0 : PD_ENOMEM;
}

static inline void pd_corr_map_free(pd_corr_map_t *m) {
  free(m->keys);
  free(m->vals);
  m->keys = NULL;
  m->vals = NULL;
}

static inline void pd_corr_map_put(pd_corr_map_t *m, uint64_t key, int32_t val) {
  size_t j = pd_hash_u64(key) & (m->n - 1);
  while (m->keys[j] != 0) {
    if (m->keys[j] == key) return; /* first insert wins */
    j = (j + 1) & (m->n - 1);
  }
  m->keys[j] = key;
  m->vals[j] = val;
}

/* The value of key, or -1 (also for key 0 and an empty map). */
static inline int32_t pd_corr_map_get(const pd_corr_map_t *m, uint64_t key) {
  if (key == 0 || m->keys == NULL) return -1;
  size_t j = pd_hash_u64(key) & (m->n - 1);
  while (m->keys[j] != 0) {
    if (m->keys[j] == key) return m->vals[j];
    j = (j + 1) & (m->n - 1);
  }
  return -1;
}

#endif /* PD_CORR_MAP_H */
