/* scenarios_config.c: the mapping from (scenario, knobs) to the training-step and
 * data-pipeline configurations (pd_scenario_configure in pd_scen.h).
 *
 * Each scenario plants exactly one problem on top of the clean configuration (pooled
 * allocator, no host reads inside the step, no TinyOpsBlock, light data loading); the
 * knobs are then applied on top, so a knob can both fix a planted problem and plant one
 * in another scenario for an A/B comparison.
 */
#include "pd/pd_scen.h"

#include <string.h>

void pd_scen_options_init(pd_scen_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->batch_size = 64;
  o->amp = false;
  o->seed = 0;
  o->num_workers = PD_KNOB_SCENARIO;
  o->prefetch_factor = 2;
  o->persistent_workers = false;
  o->pin_memory = false;
  o->tiny_mode = PD_KNOB_SCENARIO;
  o->tiny_ops_depth = PD_KNOB_SCENARIO;
  o->alloc_mode = PD_KNOB_SCENARIO;
  o->churn_buffers = PD_KNOB_SCENARIO;
  o->no_sync = false;
}

/* Rejects option values the model or the pipeline would reject later, so a bad
 * combination fails here, before any GPU work. */
static int pd_scen_options_check(const pd_scen_options_t *o) {
  if (o->batch_size < 1 || (o->num_workers < 0 && o->num_workers != PD_KNOB_SCENARIO) || o->prefetch_factor < 1)
    return PD_EINVAL;
  if (o->tiny_mode != PD_KNOB_SCENARIO &&
      (o->tiny_mode < (int)PD_TINY_OFF || o->tiny_mode > (int)PD_TINY_GRAPH))
    return PD_EINVAL;
  if (o->alloc_mode != PD_KNOB_SCENARIO &&
      (o->alloc_mode < (int)PD_ALLOC_POOL || o->alloc_mode > (int)PD_ALLOC_CHURN))
    return PD_EINVAL;
  if (o->tiny_ops_depth != PD_KNOB_SCENARIO && o->tiny_ops_depth < 1) return PD_EINVAL;
  if (o->churn_buffers != PD_KNOB_SCENARIO && o->churn_buffers < 0) return PD_EINVAL;
  return 0;
}

int pd_scenario_configure(pd_scenario_t s, const pd_scen_options_t *o, pd_cnn_config_t *cnn,
                          pd_data_config_t *data) {
  if (o == NULL || cnn == NULL || data == NULL || pd_scenario_info(s) == NULL)
    return PD_EINVAL;
  int rc = pd_scen_options_check(o);
  if (rc != 0) return rc;

  /* The clean configuration every scenario starts from. */
  pd_cnn_config_init(cnn);
  cnn->batch = o->batch_size;
  cnn->amp = o->amp;
  cnn->seed = o->seed;
  cnn->tiny_mode = PD_TINY_OFF;
  cnn->alloc_mode = PD_ALLOC_POOL;
  cnn->sync_mode = PD_SYNC_NONE;

  pd_data_config_init(data);
  data->batch_size = o->batch_size;
  data->num_workers = o->num_workers != PD_KNOB_SCENARIO ? o->num_workers
                      : s == PD_SCEN_CLEAN               ? PD_SCEN_CLEAN_WORKERS
                                                         : PD_SCEN_DEFAULT_WORKERS;
  data->prefetch_factor = o->prefetch_factor;
  data->persistent_workers = o->persistent_workers;
  data->pin_memory = o->pin_memory;
  data->seed = o->seed;
  data->cpu_work = PD_SCEN_DEFAULT_CPU_WORK;
  data->io_sleep_ms = PD_SCEN_DEFAULT_IO_SLEEP_MS;
  /* drop_last needs at least one full batch per epoch. */
  data->samples_per_epoch =
      o->batch_size > PD_SCEN_SAMPLES_PER_EPOCH ? o->batch_size : PD_SCEN_SAMPLES_PER_EPOCH;

  /* The planted problem. */
  switch (s) {
    case PD_SCEN_CLEAN:
      break;
    case PD_SCEN_DATALOADER:
      data->cpu_work = PD_SCEN_DATALOADER_CPU_WORK;
      data->io_sleep_ms = PD_SCEN_DATALOADER_IO_SLEEP_MS;
      break;
    case PD_SCEN_SYNC:
      cnn->sync_mode = PD_SYNC_FORCED;
      break;
    case PD_SCEN_TINY_OPS:
      cnn->tiny_mode = PD_TINY_CHAIN;
      break;
    case PD_SCEN_MEMORY_CHURN:
      cnn->alloc_mode = PD_ALLOC_CHURN;
      break;
    case PD_SCEN_COUNT:
      return PD_EINVAL;
  }

  /* The knobs, on any scenario. */
  if (o->tiny_mode != PD_KNOB_SCENARIO) cnn->tiny_mode = (pd_tiny_mode_t)o->tiny_mode;
  if (o->tiny_ops_depth != PD_KNOB_SCENARIO) cnn->tiny_ops_depth = o->tiny_ops_depth;
  if (o->alloc_mode != PD_KNOB_SCENARIO) cnn->alloc_mode = (pd_alloc_mode_t)o->alloc_mode;
  if (o->churn_buffers != PD_KNOB_SCENARIO) cnn->churn_buffers = o->churn_buffers;
  if (o->no_sync) cnn->sync_mode = PD_SYNC_NONE;
  return 0;
}
