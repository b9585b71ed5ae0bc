/* knobs.c: the profiler's environment knobs, read and checked in one place.
 *
 * PD_CUPTI_OPTIONS (capture variants, cupti_source.h), PD_PROF_CALIBRATE,
 * PD_PROF_CALIBRATE_COLD and PD_PROF_CUPTI_DETACH (unset, "0" or "1").
 * pd_prof_env_check() refuses a bad value before any work; the readers below then trust
 * what they read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture_internal.h"
#include "cupti_source.h"
#include "pd/pd_out.h"
#include "pd/pd_prof.h"

/* Whether the on/off knob name is unset, "0" or "1"; else err names it and its value. */
static bool env_switch_ok(const char *name, char *err, size_t errlen) {
  const char *v = getenv(name);
  if (v == NULL || strcmp(v, "0") == 0 || strcmp(v, "1") == 0) return true;
  char shown[80];
  if (err != NULL && errlen > 0)
    snprintf(err, errlen, "environment %s='%s' is not allowed (0 or 1, or unset)", name,
             pd_term_escape_line(shown, sizeof shown, v));
  return false;
}

int pd_prof_env_check(char *err, size_t errlen) {
  if (!env_switch_ok("PD_PROF_CALIBRATE", err, errlen) || !env_switch_ok("PD_PROF_CALIBRATE_COLD", err, errlen) ||
      !env_switch_ok("PD_PROF_CUPTI_DETACH", err, errlen))
    return PD_EINVAL;
  unsigned bits = 0;
  char why[256];
  if (pd_knob_cupti_capture(&bits, why, sizeof why) != 0) {
    if (err != NULL && errlen > 0) snprintf(err, errlen, "environment PD_CUPTI_OPTIONS: %s", why);
    return PD_EINVAL;
  }
  return 0;
}

/* An on/off knob that is on unless set to "0". */
static bool env_on_unless_zero(const char *name) {
  const char *v = getenv(name);
  return v == NULL || strcmp(v, "0") != 0;
}

bool pd_knob_cupti_detach(void) { return env_on_unless_zero("PD_PROF_CUPTI_DETACH"); }

bool pd_knob_calibrate(void) { return env_on_unless_zero("PD_PROF_CALIBRATE"); }

/* Off unless "1": the cold launches are a measurement for the overhead bench, recorded
 * and not used by the estimate, and they add 30-40 ms to every start calibration. */
bool pd_knob_calibrate_cold(void) {
  const char *v = getenv("PD_PROF_CALIBRATE_COLD");
  return v != NULL && strcmp(v, "1") == 0;
}

int pd_knob_cupti_capture(unsigned *bits, char *err, size_t errlen) {
  return pd_cupti_capture_parse(getenv("PD_CUPTI_OPTIONS"), bits, err, errlen);
}
