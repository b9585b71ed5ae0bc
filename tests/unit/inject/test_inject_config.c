/* test_inject_config.c: the injection's config from and to the PD_INJECT_* environment. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "inject.h"
#include "pd/pd_common.h"

/* Every PD_INJECT_* variable unset, so each test starts from the defaults. */
static void env_clear(void) {
  size_t n = 0;
  const char *const *names = pd_inject_env_names(&n);
  for (size_t i = 0; i < n; i++) unsetenv(names[i]);
}

TestSuite(inject_config, .init = env_clear);

Test(inject_config, defaults_from_an_empty_environment) {
  pd_inject_config_t c;
  char err[512] = "";
  cr_assert_eq(pd_inject_config_from_env(&c, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(c.trace_dir, "results/traces/pd_run");
  cr_assert_str_eq(c.output_json, "results/metrics_pd_run.json");
  cr_assert_eq(c.schedule.wait, 1);
  cr_assert_eq(c.schedule.warmup, 1);
  cr_assert_eq(c.schedule.active, 5);
  cr_assert_eq(c.schedule.repeat, 1);
  cr_assert_not(c.schedule_set);
  cr_assert_eq(c.top_n, 15);
  cr_assert_eq(c.root_pid, 0);
  cr_assert_eq(pd_inject_config_steps(&c), PD_INJECT_STEPS_WHOLE_RUN);
}

Test(inject_config, every_variable_is_read) {
  setenv("PD_INJECT_TRACE_DIR", "/tmp/t", 1);
  setenv("PD_INJECT_OUTPUT_JSON", "/tmp/m.json", 1);
  setenv("PD_INJECT_SKIP_FIRST", "3", 1);
  setenv("PD_INJECT_WAIT", "2", 1);
  setenv("PD_INJECT_WARMUP", "0", 1);
  setenv("PD_INJECT_ACTIVE", "7", 1);
  setenv("PD_INJECT_REPEAT", "0", 1);
  setenv("PD_INJECT_STEP_RANGE", "train_step", 1);
  setenv("PD_INJECT_NAME", "my_train", 1);
  setenv("PD_INJECT_PROBE", "1", 1);
  setenv("PD_INJECT_WITH_STACK", "1", 1);
  setenv("PD_INJECT_TRACE_GZIP", "1", 1);
  setenv("PD_INJECT_PROFILE_LEVEL", "full", 1);
  setenv("PD_INJECT_TOP_N", "0", 1);
  setenv("PD_INJECT_ROOT_PID", "4242", 1);
  pd_inject_config_t c;
  char err[512] = "";
  cr_assert_eq(pd_inject_config_from_env(&c, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(c.trace_dir, "/tmp/t");
  cr_assert_str_eq(c.output_json, "/tmp/m.json");
  cr_assert_eq(c.schedule.skip_first, 3);
  cr_assert_eq(c.schedule.wait, 2);
  cr_assert_eq(c.schedule.warmup, 0);
  cr_assert_eq(c.schedule.active, 7);
  cr_assert_eq(c.schedule.repeat, 0);
  cr_assert(c.schedule_set);
  cr_assert_str_eq(c.step_range, "train_step");
  cr_assert_str_eq(c.name, "my_train");
  cr_assert(c.probe);
  cr_assert(c.with_stack);
  cr_assert(c.trace_gzip);
  cr_assert_eq(c.profile_level, PD_INJECT_LEVEL_FULL);
  cr_assert_eq(c.top_n, 0);
  cr_assert_eq(c.root_pid, 4242);
  cr_assert_eq(pd_inject_config_steps(&c), PD_INJECT_STEPS_RANGE);
  /* the step kernel, read on its own (it excludes the step range) */
  env_clear();
  setenv("PD_INJECT_STEP_KERNEL", "adam|sgd", 1);
  cr_assert_eq(pd_inject_config_from_env(&c, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(c.step_kernel, "adam|sgd");
  cr_assert_not(c.probe, "off by default");
  cr_assert_eq(pd_inject_config_steps(&c), PD_INJECT_STEPS_KERNEL);
}

/* Each bad value fails with one line naming the variable and its value. */
Test(inject_config, bad_values_name_the_variable) {
  const struct {
    const char *var, *value, *expect;
  } cases[] = {
      {"PD_INJECT_WAIT", "-1", "PD_INJECT_WAIT='-1'"},
      {"PD_INJECT_WAIT", "2x", "PD_INJECT_WAIT='2x'"},
      {"PD_INJECT_ACTIVE", "0", "PD_INJECT_ACTIVE='0'"},
      {"PD_INJECT_REPEAT", "99999999999", "PD_INJECT_REPEAT"},
      {"PD_INJECT_WITH_STACK", "yes", "PD_INJECT_WITH_STACK='yes'"},
      {"PD_INJECT_TRACE_GZIP", "", "PD_INJECT_TRACE_GZIP=''"},
      {"PD_INJECT_PROFILE_LEVEL", "max", "PD_INJECT_PROFILE_LEVEL='max'"},
      {"PD_INJECT_TOP_N", "", "PD_INJECT_TOP_N=''"},
      {"PD_INJECT_ROOT_PID", "0", "PD_INJECT_ROOT_PID='0'"},
      {"PD_INJECT_STEP_KERNEL", "adam(", "is not a regular expression"},
      {"PD_INJECT_PROBE", "on", "PD_INJECT_PROBE='on'"},
      {"PD_INJECT_PROBE", "1", "--probe needs --step_range"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    env_clear();
    setenv(cases[i].var, cases[i].value, 1);
    pd_inject_config_t c;
    char err[512] = "";
    cr_assert_eq(pd_inject_config_from_env(&c, err, sizeof err), PD_EINVAL, "%s=%s accepted", cases[i].var,
                 cases[i].value);
    cr_assert_not_null(strstr(err, cases[i].expect), "%s: got '%s'", cases[i].var, err);
    cr_assert_null(strchr(err, '\n'), "one line: '%s'", err);
  }
}

Test(inject_config, a_value_too_long_is_refused) {
  char big[PD_INJECT_PATH_MAX + 8];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  setenv("PD_INJECT_TRACE_DIR", big, 1);
  pd_inject_config_t c;
  char err[512] = "";
  cr_assert_eq(pd_inject_config_from_env(&c, err, sizeof err), PD_EINVAL);
  cr_assert_not_null(strstr(err, "at most 1023 bytes"), "%s", err);
}

Test(inject_config, cross_rules) {
  pd_inject_config_t c;
  char err[512] = "";
  pd_inject_config_init(&c);
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), 0, "%s", err);
  snprintf(c.step_kernel, sizeof c.step_kernel, "adam");
  snprintf(c.step_range, sizeof c.step_range, "train_step");
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  cr_assert_not_null(strstr(err, "exclude each other"), "%s", err);
  c.step_kernel[0] = c.step_range[0] = '\0';
  c.schedule_set = true;
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  cr_assert_not_null(strstr(err, "needs steps"), "%s", err);
  snprintf(c.step_range, sizeof c.step_range, "train_step");
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), 0, "%s", err);
  cr_assert_eq(pd_inject_config_steps(&c), PD_INJECT_STEPS_RANGE);
  snprintf(c.output_json, sizeof c.output_json, "%s", c.trace_dir);
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  pd_inject_config_init(&c);
  snprintf(c.name, sizeof c.name, "a/b");
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  pd_inject_config_init(&c);
  c.top_n = -1;
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  pd_inject_config_init(&c);
  c.profile_level = 7;
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  /* the probe runs between untraced steps at a step range's start: never with kernel-name
   * steps (inside CUPTI's launch callback) nor the whole-run step */
  pd_inject_config_init(&c);
  c.probe = true;
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  cr_assert_not_null(strstr(err, "--probe needs --step_range"), "%s", err);
  snprintf(c.step_kernel, sizeof c.step_kernel, "adam");
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  c.step_kernel[0] = '\0';
  snprintf(c.step_range, sizeof c.step_range, "train_step");
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), 0, "%s", err);
  pd_inject_config_init(&c);
  c.trace_dir[0] = '\0';
  cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL);
  cr_assert_not_null(strstr(err, "--trace_dir"), "%s", err);
}

/* What pd_run writes, the library reads back unchanged. */
Test(inject_config, environment_round_trip) {
  pd_inject_config_t a, b;
  pd_inject_config_init(&a);
  snprintf(a.trace_dir, sizeof a.trace_dir, "/tmp/x/traces");
  snprintf(a.output_json, sizeof a.output_json, "/tmp/x/m.json");
  snprintf(a.step_range, sizeof a.step_range, "train step");
  snprintf(a.name, sizeof a.name, "resnet");
  a.schedule = (pd_schedule_t){.skip_first = 1, .wait = 2, .warmup = 3, .active = 4, .repeat = 5};
  a.schedule_set = true;
  a.with_stack = true;
  a.probe = true;
  a.profile_level = PD_INJECT_LEVEL_FULL;
  a.top_n = 9;
  setenv("PD_INJECT_STEP_KERNEL", "stale", 1); /* inherited from pd_run's own environment */
  cr_assert_eq(pd_inject_config_to_env(&a), 0);
  cr_assert_null(getenv("PD_INJECT_STEP_KERNEL"), "an empty value is unset");
  char err[512] = "";
  cr_assert_eq(pd_inject_config_from_env(&b, err, sizeof err), 0, "%s", err);
  cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "config changed on the way");
  /* without a schedule, the schedule variables are left unset: the library's defaults */
  a.schedule_set = false;
  cr_assert_eq(pd_inject_config_to_env(&a), 0);
  cr_assert_null(getenv("PD_INJECT_WAIT"));
}

Test(inject_config, per_process_output_names) {
  pd_inject_config_t c;
  pd_inject_config_init(&c);
  snprintf(c.output_json, sizeof c.output_json, "out/m.json");
  char p[256];
  cr_assert_eq(pd_inject_output_json_for(&c, 77, NULL, p, sizeof p), 0);
  cr_assert_str_eq(p, "out/m.json", "no root known: the given name");
  c.root_pid = 77;
  cr_assert_eq(pd_inject_output_json_for(&c, 77, "3", p, sizeof p), 0);
  cr_assert_str_eq(p, "out/m.json", "the root keeps it");
  cr_assert_eq(pd_inject_output_json_for(&c, 78, NULL, p, sizeof p), 0);
  cr_assert_str_eq(p, "out/m.pid78.json");
  cr_assert_eq(pd_inject_output_json_for(&c, 78, "3", p, sizeof p), 0);
  cr_assert_str_eq(p, "out/m.pid78.rank3.json");
  cr_assert_eq(pd_inject_output_json_for(&c, 78, "../x", p, sizeof p), 0);
  cr_assert_str_eq(p, "out/m.pid78.json", "a rank that is not a number is left out");
  snprintf(c.output_json, sizeof c.output_json, "dir.d/metrics");
  cr_assert_eq(pd_inject_output_json_for(&c, 5, NULL, p, sizeof p), 0);
  cr_assert_str_eq(p, "dir.d/metrics.pid5.json");
  cr_assert_eq(pd_inject_output_json_for(&c, 5, NULL, p, 8), PD_EINVAL);
}

Test(inject_config, the_variable_table) {
  size_t n = 0, m = 0;
  const char *const *names = pd_inject_env_names(&n);
  const char *const *texts = pd_inject_env_texts(&m);
  cr_assert_eq(n, m);
  cr_assert_eq(n, 16);
  cr_assert_str_eq(names[0], "PD_INJECT_TRACE_DIR");
  for (size_t i = 0; i < n; i++) cr_assert(strlen(texts[i]) > 0);
}
