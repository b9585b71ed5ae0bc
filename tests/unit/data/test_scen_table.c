/* test_scen_table.c: the scenario table (lookups, names, expected verdicts) and the
 * mapping of (scenario, knobs) to the model and data pipeline configs. */
#include <criterion/criterion.h>
#include <string.h>

#include "pd/pd_scen.h"

Test(scenarios, table_has_the_five_scenarios_in_order) {
  size_t n = 0;
  const pd_scenario_info_t *t = pd_scenario_table(&n);
  cr_assert_eq(n, 5);
  const char *names[] = {"clean", "dataloader", "sync", "tiny_ops", "memory_churn"};
  const pd_bottleneck_t verdicts[] = {PD_BOTTLENECK_COMPUTE, PD_BOTTLENECK_DATALOADER, PD_BOTTLENECK_SYNC,
                                      PD_BOTTLENECK_LAUNCH_OVERHEAD, PD_BOTTLENECK_ALLOCATOR_CHURN};
  const char *fixes[] = {"", "--num_workers", "--no_sync", "--tiny_ops_mode", "--allocator"};
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq((size_t)t[i].id, i);
    cr_expect_str_eq(t[i].name, names[i]);
    cr_expect_eq(t[i].expected_verdict, verdicts[i], "%s", names[i]);
    cr_expect_str_eq(t[i].fix_flag, fixes[i]);
    cr_expect(strlen(t[i].description) > 10 && strlen(t[i].planted) > 5 && strlen(t[i].signature) > 10,
              "%s: empty text", names[i]);
    pd_scenario_t s;
    cr_expect_eq(pd_scenario_parse(names[i], &s), 0);
    cr_expect_eq(s, t[i].id);
    cr_expect_eq(pd_scenario_info(s), &t[i]);
    cr_expect_str_eq(pd_scenario_name(s), names[i]);
  }
}

Test(scenarios, unknown_names_and_ids_are_rejected) {
  pd_scenario_t s = PD_SCEN_CLEAN;
  cr_expect_eq(pd_scenario_parse("nope", &s), PD_EINVAL);
  cr_expect_eq(pd_scenario_parse("Clean", &s), PD_EINVAL);
  cr_expect_eq(pd_scenario_parse("", &s), PD_EINVAL);
  cr_expect_eq(pd_scenario_parse(NULL, &s), PD_EINVAL);
  cr_expect_null(pd_scenario_info(PD_SCEN_COUNT));
  cr_expect_null(pd_scenario_info((pd_scenario_t)-1));
  cr_expect_str_eq(pd_scenario_name(PD_SCEN_COUNT), "unknown");
}

static void configure(pd_scenario_t s, const pd_scen_options_t *o, pd_cnn_config_t *cnn, pd_data_config_t *data) {
  cr_assert_eq(pd_scenario_configure(s, o, cnn, data), 0, "scenario %s", pd_scenario_name(s));
}

Test(scenarios, each_scenario_plants_exactly_its_problem) {
  pd_scen_options_t o;
  pd_scen_options_init(&o);
  o.batch_size = 32;
  o.amp = true;
  o.seed = 5;
  o.num_workers = 3;
  o.prefetch_factor = 4;
  o.pin_memory = true;
  pd_cnn_config_t cnn;
  pd_data_config_t data;
  for (int i = 0; i < PD_SCEN_COUNT; i++) {
    pd_scenario_t s = (pd_scenario_t)i;
    configure(s, &o, &cnn, &data);
    /* common settings flow through */
    cr_expect_eq(cnn.batch, 32);
    cr_expect(cnn.amp);
    cr_expect_eq(cnn.seed, 5);
    cr_expect_eq(data.batch_size, 32);
    cr_expect_eq(data.num_workers, 3);
    cr_expect_eq(data.prefetch_factor, 4);
    cr_expect(data.pin_memory);
    cr_expect_eq(data.seed, 5);
    cr_expect_geq(data.samples_per_epoch, data.batch_size);
    /* the planted problem, and nothing else */
    cr_expect_eq(data.cpu_work, s == PD_SCEN_DATALOADER ? 4000 : 200, "%s", pd_scenario_name(s));
    cr_expect_eq(data.io_sleep_ms, s == PD_SCEN_DATALOADER ? 2 : 0, "%s", pd_scenario_name(s));
    cr_expect_eq(cnn.sync_mode, s == PD_SCEN_SYNC ? PD_SYNC_FORCED : PD_SYNC_NONE, "%s", pd_scenario_name(s));
    cr_expect_eq(cnn.tiny_mode, s == PD_SCEN_TINY_OPS ? PD_TINY_CHAIN : PD_TINY_OFF, "%s", pd_scenario_name(s));
    cr_expect_eq(cnn.alloc_mode, s == PD_SCEN_MEMORY_CHURN ? PD_ALLOC_CHURN : PD_ALLOC_POOL, "%s",
                 pd_scenario_name(s));
  }
}

Test(scenarios, fix_knobs_undo_the_planted_problem) {
  pd_scen_options_t o;
  pd_scen_options_init(&o);
  pd_cnn_config_t cnn;
  pd_data_config_t data;

  o.no_sync = true;
  configure(PD_SCEN_SYNC, &o, &cnn, &data);
  cr_expect_eq(cnn.sync_mode, PD_SYNC_NONE);

  pd_scen_options_init(&o);
  o.tiny_mode = PD_TINY_FUSED;
  configure(PD_SCEN_TINY_OPS, &o, &cnn, &data);
  cr_expect_eq(cnn.tiny_mode, PD_TINY_FUSED);
  o.tiny_mode = PD_TINY_GRAPH;
  o.tiny_ops_depth = 32;
  configure(PD_SCEN_TINY_OPS, &o, &cnn, &data);
  cr_expect_eq(cnn.tiny_mode, PD_TINY_GRAPH);
  cr_expect_eq(cnn.tiny_ops_depth, 32);

  pd_scen_options_init(&o);
  o.alloc_mode = PD_ALLOC_POOL;
  configure(PD_SCEN_MEMORY_CHURN, &o, &cnn, &data);
  cr_expect_eq(cnn.alloc_mode, PD_ALLOC_POOL);

  pd_scen_options_init(&o);
  o.num_workers = 16;
  configure(PD_SCEN_DATALOADER, &o, &cnn, &data);
  cr_expect_eq(data.num_workers, 16);
  cr_expect_eq(data.cpu_work, 4000, "more workers fix the wait, not the work per sample");
}

Test(scenarios, knobs_plant_problems_in_any_scenario_for_ab) {
  pd_scen_options_t o;
  pd_scen_options_init(&o);
  o.tiny_mode = PD_TINY_CHAIN;
  o.alloc_mode = PD_ALLOC_CHURN;
  o.churn_buffers = 7;
  pd_cnn_config_t cnn;
  pd_data_config_t data;
  configure(PD_SCEN_CLEAN, &o, &cnn, &data);
  cr_expect_eq(cnn.tiny_mode, PD_TINY_CHAIN);
  cr_expect_eq(cnn.alloc_mode, PD_ALLOC_CHURN);
  cr_expect_eq(cnn.churn_buffers, 7);
  cr_expect_eq(cnn.sync_mode, PD_SYNC_NONE);
}

Test(scenarios, defaults_keep_the_model_defaults) {
  pd_scen_options_t o;
  pd_scen_options_init(&o);
  pd_cnn_config_t ref, cnn;
  pd_data_config_t data;
  pd_cnn_config_init(&ref);
  configure(PD_SCEN_TINY_OPS, &o, &cnn, &data);
  cr_expect_eq(cnn.tiny_ops_depth, ref.tiny_ops_depth);
  cr_expect_eq(cnn.churn_buffers, ref.churn_buffers);
  cr_expect_eq(cnn.lr, ref.lr);
  cr_expect_eq(cnn.weight_decay, ref.weight_decay);
  cr_expect_eq(data.batch_size, 64);
  cr_expect_eq(data.num_workers, PD_SCEN_DEFAULT_WORKERS);
  cr_expect_eq(data.prefetch_factor, 2);
  /* the control group's loader has twice the margin (issue 23: a loader that fell behind
   * made clean read `dataloader`); a given --num_workers wins */
  configure(PD_SCEN_CLEAN, &o, &cnn, &data);
  cr_expect_eq(data.num_workers, PD_SCEN_CLEAN_WORKERS);
  cr_expect_eq(data.num_workers, 8);
  configure(PD_SCEN_DATALOADER, &o, &cnn, &data);
  cr_expect_eq(data.num_workers, 2, "the dataloader scenario's fix is more workers: it starts at 2");
  o.num_workers = 2;
  configure(PD_SCEN_CLEAN, &o, &cnn, &data);
  cr_expect_eq(data.num_workers, 2);
}

Test(scenarios, big_batches_still_fill_one_epoch) {
  pd_scen_options_t o;
  pd_scen_options_init(&o);
  o.batch_size = 10000;
  pd_cnn_config_t cnn;
  pd_data_config_t data;
  configure(PD_SCEN_CLEAN, &o, &cnn, &data);
  cr_expect_geq(data.samples_per_epoch, 10000);
}

Test(scenarios, bad_options_are_rejected) {
  pd_cnn_config_t cnn;
  pd_data_config_t data;
  pd_scen_options_t o;
  pd_scen_options_init(&o);
  cr_expect_eq(pd_scenario_configure(PD_SCEN_COUNT, &o, &cnn, &data), PD_EINVAL);
  o.batch_size = 0;
  cr_expect_eq(pd_scenario_configure(PD_SCEN_CLEAN, &o, &cnn, &data), PD_EINVAL);
  pd_scen_options_init(&o);
  o.tiny_mode = 17;
  cr_expect_eq(pd_scenario_configure(PD_SCEN_CLEAN, &o, &cnn, &data), PD_EINVAL);
  pd_scen_options_init(&o);
  o.alloc_mode = 9;
  cr_expect_eq(pd_scenario_configure(PD_SCEN_CLEAN, &o, &cnn, &data), PD_EINVAL);
  pd_scen_options_init(&o);
  o.tiny_ops_depth = 0;
  cr_expect_eq(pd_scenario_configure(PD_SCEN_CLEAN, &o, &cnn, &data), PD_EINVAL);
  pd_scen_options_init(&o);
  o.churn_buffers = -2;
  cr_expect_eq(pd_scenario_configure(PD_SCEN_CLEAN, &o, &cnn, &data), PD_EINVAL);
  pd_scen_options_init(&o);
  o.num_workers = -2; /* -1 is PD_KNOB_SCENARIO */
  cr_expect_eq(pd_scenario_configure(PD_SCEN_CLEAN, &o, &cnn, &data), PD_EINVAL);
  cr_expect_eq(pd_scenario_configure(PD_SCEN_CLEAN, NULL, &cnn, &data), PD_EINVAL);
}
