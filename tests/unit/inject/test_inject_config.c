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

/* A text field as pd_run's parser sets it: cleared, then the value (nothing of the default
 * left behind the terminator). */
static void text_set(char *field, size_t size, const char *value) {
  memset(field, 0, size);
  snprintf(field, size, "%s", value);
}

/* A step regex's compiled size, estimated: ordinary patterns are small; what glibc's regcomp
 * compiles in exponential memory or time is refused before it sees it, with one line naming
 * which: a large estimate (a 60-byte "a++...+" took over 2 GB under the fuzzer), stacked
 * operators on one piece (undefined in POSIX; "a??{0,30}*" ran for minutes) and a repeated
 * group that repeats inside ("(((a|b?)*)?){40}" ran for minutes). */
Test(inject_config, a_regex_that_would_compile_to_gigabytes_is_refused) {
  const struct {
    const char *re;
    double size;
    bool stacked, nested;
  } sizes[] = {
      {"", 0, false, false},
      {"adam", 4, false, false},
      {"^optim_step$", 12, false, false},
      {"adam|sgd", 7, false, false},
      {"a+", 2, false, false},
      {"a*b?", 4, false, false},
      {"(ab)+", 4, false, false},
      {"[+*]{2}x", 4, false, false},
      {"\\+\\+", 2, false, false}, /* escaped: two atoms */
      {"amp_update_scale|multi_tensor_apply", 34, false, false},
      {"multi_tensor_apply_kernel.*(Adam|SGD)", 34, false, false},
      {"a{3,5}", 6, false, false},
      {"a{,5}", 5, false, false}, /* not an interval here: five atoms, as counted (regcomp judges it) */
      {"a+{x", 4, false, false},  /* '{' literal after a repetition: not stacked */
      {"[[:alpha:]]+", 2, false, false},
      {"(ab?){333}", 1001, false, true}, /* one level only: a repeated group may not repeat inside */
      {"(a|bc){99}", 300, false, false},
      {"a*?", 4, true, false},
      {"a??{0,30}*b", 249, true, false},
      {"a++++++++++++++++++++++++++++", 1001, true, false},
      {"(a+)*", 4, false, true},
      {"(((a|b?)*)?){40}", 492, false, true},
      {"((((((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+", 1001, false, true},
      {"(a{100}){100}", 1001, false, true},
      {"(abc){500}", 1001, false, false},
  };
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    bool stacked = !sizes[i].stacked, nested = !sizes[i].nested;
    const double n = pd_inject_regex_size(sizes[i].re, &stacked, &nested);
    cr_expect_eq(n, sizes[i].size, "'%s': estimated %g, want %g", sizes[i].re, n, sizes[i].size);
    cr_expect_eq(stacked, sizes[i].stacked, "'%s': stacked %d", sizes[i].re, stacked);
    cr_expect_eq(nested, sizes[i].nested, "'%s': nested %d", sizes[i].re, nested);
  }
  const struct {
    const char *re, *why;
  } refused[] = {{"(abc){500}", "repeats too much"},
                 {"(((a|b?)*)?){40}", "repeats a group that repeats inside"},
                 {"a++++++++++++++++++++++++++++", "stacks repetition operators"},
                 {".*?optim", "stacks repetition operators"}};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    pd_inject_config_t c;
    char err[512] = "";
    pd_inject_config_init(&c);
    snprintf(c.step_kernel, sizeof c.step_kernel, "%s", refused[i].re);
    cr_assert_eq(pd_inject_config_validate(&c, err, sizeof err), PD_EINVAL, "'%s' accepted", refused[i].re);
    cr_assert_not_null(strstr(err, refused[i].why), "%s", err);
    cr_assert_null(strchr(err, '\n'), "one line: %s", err);
  }
  env_clear();
  setenv("PD_INJECT_STEP_KERNEL", "x+++++++++++++++++++++++++++++++", 1);
  pd_inject_config_t c;
  char err[512] = "";
  cr_assert_eq(pd_inject_config_from_env(&c, err, sizeof err), PD_EINVAL);
  cr_assert_not_null(strstr(err, "PD_INJECT_* environment: --step_kernel"), "%s", err);
  cr_assert_not_null(strstr(err, "stacks repetition operators"), "%s", err);
}

/* What pd_run writes, the library reads back unchanged, to the byte: its values shorter than
 * the defaults leave nothing of them behind. */
Test(inject_config, environment_round_trip) {
  pd_inject_config_t a, b;
  pd_inject_config_init(&a);
  text_set(a.trace_dir, sizeof a.trace_dir, "/tmp/x/traces");
  text_set(a.output_json, sizeof a.output_json, "/tmp/x/m.json");
  text_set(a.step_range, sizeof a.step_range, "train step");
  text_set(a.name, sizeof a.name, "resnet");
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
