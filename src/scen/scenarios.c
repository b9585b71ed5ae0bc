/* scenarios.c: the scenario table (PD_SCENARIO_MAP in pd_scen.h) and its lookups.
 * The mapping to model and pipeline configs is scenarios_config.c, so programs that only
 * list scenarios (and their tests) do not link the model.
 */
#include "pd/pd_scen.h"

#include <string.h>

static const pd_scenario_info_t pd_scenarios_[PD_SCEN_COUNT] = {
#define PD_SCEN_ROW(id, name, desc, planted, sig, flag, hint, verdict) \
  {PD_SCEN_##id, name, desc, planted, sig, flag, hint, verdict},
    PD_SCENARIO_MAP(PD_SCEN_ROW)
#undef PD_SCEN_ROW
};

const pd_scenario_info_t *pd_scenario_table(size_t *count) {
  if (count != NULL) *count = PD_SCEN_COUNT;
  return pd_scenarios_;
}

const pd_scenario_info_t *pd_scenario_info(pd_scenario_t s) {
  if ((int)s < 0 || s >= PD_SCEN_COUNT) return NULL;
  return &pd_scenarios_[s];
}

int pd_scenario_parse(const char *name, pd_scenario_t *s) {
  if (name == NULL || s == NULL) return PD_EINVAL;
  for (int i = 0; i < PD_SCEN_COUNT; i++) {
    if (strcmp(name, pd_scenarios_[i].name) == 0) {
      *s = (pd_scenario_t)i;
      return 0;
    }
  }
  return PD_EINVAL;
}

const char *pd_scenario_name(pd_scenario_t s) {
  const pd_scenario_info_t *info = pd_scenario_info(s);
  return info != NULL ? info->name : "unknown";
}
