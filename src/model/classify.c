/* classify.c: the model's classifiers, one definition each (pd_classify.h).
 */
#include "pd/pd_classify.h"

#include <stddef.h>
#include <string.h>

/* ---- data-wait ranges ------------------------------------------------------------------ */

static const char *const data_wait_names[] = {
#define PD_DATA_WAIT_GEN(name) name,
    PD_RANGE_DATA_WAIT_MAP(PD_DATA_WAIT_GEN)
#undef PD_DATA_WAIT_GEN
};

bool pd_range_is_data_wait(const char *name) {
  if (name == NULL) return false;
  for (size_t i = 0; i < sizeof data_wait_names / sizeof data_wait_names[0]; i++)
    if (strcmp(name, data_wait_names[i]) == 0) return true;
  return strncmp(name, "enumerate(DataLoader)#", 22) == 0 || strncmp(name, "enumerate(DataPipe)#", 20) == 0;
}

bool pd_event_is_data_wait(const pd_event_t *ev) {
  return ev != NULL && (ev->kind == PD_EVENT_RANGE || ev->kind == PD_EVENT_CPU_OP) && ev->u.range.step < 0 &&
         pd_range_is_data_wait(ev->name);
}
