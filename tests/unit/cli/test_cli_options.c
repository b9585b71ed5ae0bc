/* test_cli_options.c: profiler_demo's option parsing and validation in process
 * (pd_demo_config_parse), its help text, and the output-path preparation and rollback.
 * The same bad inputs are run through the real binary in test_cli_binary.c. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "demo.h"
#include "pd/pd_cnn.h"
#include "pd/pd_scen.h"
#include "pd/pd_stats.h"

/* argv as main() gets it; the parser never writes through it. */
#define ARGV(...) ((char *const *)(const char *const[]){"profiler_demo", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((const char *const[]){"profiler_demo", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(cfg, err, ...) pd_demo_config_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (cfg), (err), sizeof(err))

Test(cli_options, no_flags_give_the_prd_defaults) {
  pd_demo_config_t c;
  char err[512];
  char *const argv[] = {"profiler_demo", NULL};
  cr_assert_eq(pd_demo_config_parse(1, argv, &c, err, sizeof(err)), 0, "%s", err);
  cr_expect_eq(c.action, PD_DEMO_RUN);
  cr_expect_eq(c.scenario, PD_SCEN_DATALOADER);
  cr_expect_eq(c.batch_size, 64);
  cr_expect_eq(c.num_workers, PD_KNOB_SCENARIO, "the scenario's (dataloader: 2)");
  cr_expect_not(c.pin_memory);
  cr_expect_not(c.amp);
  cr_expect_eq(c.warmup_steps, 10);
  cr_expect_eq(c.profile_steps, 8);
  cr_expect_str_eq(c.trace_dir, "results/traces/profiler_demo");
  cr_expect_str_eq(c.output_json, "results/metrics_demo.json");
  cr_expect_eq(c.seed, 0);
  cr_expect_not(c.with_stack);
  cr_expect_str_eq(c.export_stacks, "");
  cr_expect_eq(c.stacks_metric, PD_SORT_SELF_CUDA_TIME_TOTAL);
  cr_expect_eq(c.group_by_stack_n, 0);
  cr_expect_eq(c.prefetch_factor, 2);
  cr_expect_not(c.persistent_workers);
  cr_expect_eq(c.device, 0);
  cr_expect_not(c.no_sync);
  cr_expect_eq(c.tiny_ops_mode, PD_KNOB_SCENARIO);
  cr_expect_eq(c.tiny_ops_depth, PD_KNOB_SCENARIO);
  cr_expect_eq(c.allocator, PD_KNOB_SCENARIO);
  cr_expect_eq(c.churn_buffers, PD_KNOB_SCENARIO);
  cr_expect_eq(c.top_n, 15);
  cr_expect_eq(c.sort_by, PD_SORT_SELF_CUDA_TIME_TOTAL);
  cr_expect_not(c.quiet);
  cr_expect_eq(c.inject_slowdown, 0.0);
}

Test(cli_options, every_flag_takes_a_good_value_in_both_syntaxes) {
  pd_demo_config_t c;
  char err[512];
  int rc = PARSE(&c, err, "--scenario", "tiny_ops", "--batch_size=128", "--num_workers", "0", "--pin_memory",
                 "--amp", "--warmup_steps=3", "--profile_steps", "20", "--trace_dir=t/d", "--output_json", "o/m.json",
                 "--seed", "9223372036854775807", "--with_stack", "--prefetch_factor=4", "--persistent_workers",
                 "--device", "1", "--no_sync", "--tiny_ops_mode=graph", "--tiny_ops_depth", "17", "--allocator",
                 "cudamalloc", "--churn_buffers=5", "--top_n", "0", "--sort_by=count", "--quiet",
                 "--inject_slowdown", "0.25", "--export_stacks", "s/st.txt", "--stacks_metric=self_cpu_time_total",
                 "--group_by_stack_n", "5", "--trace_gzip", "--cupti_buffer_budget_mib=16");
  cr_assert_eq(rc, 0, "%s", err);
  cr_expect_str_eq(c.export_stacks, "s/st.txt");
  cr_expect_eq(c.stacks_metric, PD_SORT_SELF_CPU_TIME_TOTAL);
  cr_expect_eq(c.group_by_stack_n, 5);
  cr_expect(c.trace_gzip);
  cr_expect_eq(c.cupti_buffer_budget_mib, 16);
  cr_expect_eq(c.scenario, PD_SCEN_TINY_OPS);
  cr_expect_eq(c.batch_size, 128);
  cr_expect_eq(c.num_workers, 0);
  cr_expect(c.pin_memory && c.amp && c.with_stack && c.persistent_workers && c.no_sync && c.quiet);
  cr_expect_eq(c.warmup_steps, 3);
  cr_expect_eq(c.profile_steps, 20);
  cr_expect_str_eq(c.trace_dir, "t/d");
  cr_expect_str_eq(c.output_json, "o/m.json");
  cr_expect_eq(c.seed, INT64_MAX);
  cr_expect_eq(c.prefetch_factor, 4);
  cr_expect_eq(c.device, 1);
  cr_expect_eq(c.tiny_ops_mode, PD_TINY_GRAPH);
  cr_expect_eq(c.tiny_ops_depth, 17);
  cr_expect_eq(c.allocator, PD_ALLOC_CHURN);
  cr_expect_eq(c.churn_buffers, 5);
  cr_expect_eq(c.top_n, 0);
  cr_expect_eq(c.sort_by, PD_SORT_COUNT);
  cr_expect_eq(c.inject_slowdown, 0.25);
}

Test(cli_options, every_scenario_and_choice_parses) {
  pd_demo_config_t c;
  char err[512];
  size_t n = 0;
  const pd_scenario_info_t *t = pd_scenario_table(&n);
  cr_assert_eq(n, 5);
  for (size_t i = 0; i < n; i++) {
    cr_assert_eq(PARSE(&c, err, "--scenario", t[i].name), 0, "%s", err);
    cr_expect_eq(c.scenario, (int)t[i].id);
  }
  const char *tiny[] = {"off", "chain", "fused", "graph"};
  const int tiny_v[] = {PD_TINY_OFF, PD_TINY_CHAIN, PD_TINY_FUSED, PD_TINY_GRAPH};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(PARSE(&c, err, "--tiny_ops_mode", tiny[i]), 0, "%s", err);
    cr_expect_eq(c.tiny_ops_mode, tiny_v[i]);
  }
  cr_assert_eq(PARSE(&c, err, "--allocator=pool"), 0, "%s", err);
  cr_expect_eq(c.allocator, PD_ALLOC_POOL);
  const char *keys[] = {"self_cuda_time_total", "cuda_time_total", "self_cpu_time_total", "cpu_time_total", "count"};
  const int key_v[] = {PD_SORT_SELF_CUDA_TIME_TOTAL, PD_SORT_CUDA_TIME_TOTAL, PD_SORT_SELF_CPU_TIME_TOTAL,
                       PD_SORT_CPU_TIME_TOTAL, PD_SORT_COUNT};
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(PARSE(&c, err, "--sort_by", keys[i]), 0, "%s", err);
    cr_expect_eq(c.sort_by, key_v[i]);
  }
}

Test(cli_options, last_repeated_flag_wins_and_bounds_are_inclusive) {
  pd_demo_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--batch_size", "1", "--batch_size=65536", "--inject_slowdown", "10"), 0, "%s", err);
  cr_expect_eq(c.batch_size, 65536);
  cr_expect_eq(c.inject_slowdown, 10.0);
  cr_assert_eq(PARSE(&c, err, "--batch_size", "1", "--num_workers", "0", "--warmup_steps", "0", "--profile_steps", "1"),
               0, "%s", err);
  cr_expect_eq(c.batch_size, 1);
  cr_expect_eq(c.warmup_steps, 0);
  cr_expect_eq(c.profile_steps, 1);
}

Test(cli_options, schedule_flags) {
  pd_demo_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--repeat", "0", "--steps", "10000", "--wait_steps=990"), 0, "%s", err);
  cr_expect_eq(c.repeat, 0);
  cr_expect_eq(c.steps, 10000);
  cr_expect_eq(c.wait_steps, 990);
  cr_assert_eq(PARSE(&c, err, "--quiet"), 0, "%s", err);
  cr_expect_eq(c.repeat, 1, "one cycle by default, as before");
  cr_expect_eq(c.wait_steps, 1);
  cr_expect_eq(c.steps, 0);
  /* one cycle exactly; and more steps than the cycles take (they run unprofiled) */
  cr_assert_eq(PARSE(&c, err, "--wait_steps", "0", "--profile_steps", "3", "--steps", "4"), 0, "%s", err);
  cr_assert_eq(PARSE(&c, err, "--repeat", "2", "--steps", "1000000"), 0, "%s", err);
}

Test(cli_options, actions) {
  pd_demo_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--help"), 0);
  cr_expect_eq(c.action, PD_DEMO_HELP);
  cr_assert_eq(PARSE(&c, err, "-h"), 0);
  cr_expect_eq(c.action, PD_DEMO_HELP);
  cr_assert_eq(PARSE(&c, err, "--version"), 0);
  cr_expect_eq(c.action, PD_DEMO_VERSION);
  cr_assert_eq(PARSE(&c, err, "--list_scenarios"), 0);
  cr_expect_eq(c.action, PD_DEMO_LIST);
  /* --help wins over a bad flag after it, as with argparse. */
  cr_assert_eq(PARSE(&c, err, "--help", "--nope"), 0);
  cr_expect_eq(c.action, PD_DEMO_HELP);
}

/* Each bad input: exit code 2 and exactly this message. */
typedef struct {
  const char *args[4];
  const char *message;
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {{"--scenario", "nope"}, "--scenario must be one of clean, dataloader, sync, tiny_ops, memory_churn, got 'nope'"},
    {{"--batch_size", "-1"}, "--batch_size must be an integer from 1 to 65536, got '-1'"},
    {{"--batch_size", "abc"}, "--batch_size must be an integer from 1 to 65536, got 'abc'"},
    {{"--batch_size", "1e3"}, "--batch_size must be an integer from 1 to 65536, got '1e3'"},
    {{"--batch_size", "0"}, "--batch_size must be an integer from 1 to 65536, got '0'"},
    {{"--batch_size", "65537"}, "--batch_size must be an integer from 1 to 65536, got '65537'"},
    {{"--batch_size", " 5"}, "--batch_size must be an integer from 1 to 65536, got ' 5'"},
    {{"--batch_size", "+5"}, "--batch_size must be an integer from 1 to 65536, got '+5'"},
    {{"--batch_size="}, "--batch_size must be an integer from 1 to 65536, got ''"},
    {{"--batch_size", "99999999999999999999"},
     "--batch_size must be an integer from 1 to 65536, got '99999999999999999999'"},
    {{"--seed", "9223372036854775808"}, "--seed must be an integer from 0 to 9223372036854775807, got "
                                        "'9223372036854775808'"},
    {{"--seed", "-1"}, "--seed must be an integer from 0 to 9223372036854775807, got '-1'"},
    {{"--profile_steps", "0"}, "--profile_steps must be an integer from 1 to 10000, got '0'"},
    {{"--warmup_steps", "-3"}, "--warmup_steps must be an integer from 0 to 100000, got '-3'"},
    {{"--num_workers", "2.5"}, "--num_workers must be an integer from 0 to 256, got '2.5'"},
    {{"--prefetch_factor", "0"}, "--prefetch_factor must be an integer from 1 to 64, got '0'"},
    {{"--device", "x"}, "--device must be an integer from 0 to 1023, got 'x'"},
    {{"--top_n", "-1"}, "--top_n must be an integer from 0 to 100000, got '-1'"},
    {{"--tiny_ops_depth", "0"}, "--tiny_ops_depth must be an integer from 1 to 100000, got '0'"},
    {{"--churn_buffers", "many"}, "--churn_buffers must be an integer from 0 to 100000, got 'many'"},
    {{"--churn_buffers", "-2"}, "--churn_buffers must be an integer from 0 to 100000, got '-2'"},
    {{"--tiny_ops_mode", "fast"}, "--tiny_ops_mode must be one of off, chain, fused, graph, got 'fast'"},
    {{"--allocator", "malloc"}, "--allocator must be one of cudamalloc, pool, got 'malloc'"},
    {{"--sort_by", "time"}, "--sort_by must be one of self_cuda_time_total, cuda_time_total, "
                            "self_cpu_time_total, cpu_time_total, count, got 'time'"},
    {{"--inject_slowdown", "11"}, "--inject_slowdown must be a number from 0 to 10, got '11'"},
    {{"--inject_slowdown", "-0.5"}, "--inject_slowdown must be a number from 0 to 10, got '-0.5'"},
    {{"--inject_slowdown", "nan"}, "--inject_slowdown must be a number from 0 to 10, got 'nan'"},
    {{"--inject_slowdown", "0.1x"}, "--inject_slowdown must be a number from 0 to 10, got '0.1x'"},
    {{"--inject_gpu_slowdown", "10.5"}, "--inject_gpu_slowdown must be a number from 0 to 10, got '10.5'"},
    {{"--inject_gpu_slowdown", "-0.01"}, "--inject_gpu_slowdown must be a number from 0 to 10, got '-0.01'"},
    {{"--inject_gpu_slowdown", "inf"}, "--inject_gpu_slowdown must be a number from 0 to 10, got 'inf'"},
    {{"--inject_gpu_slowdown"}, "--inject_gpu_slowdown needs a value (a number from 0 to 10)"},
    {{"--inject_gpu_slowdown", "0.03", "--warmup_steps", "0"},
     "--inject_gpu_slowdown needs --warmup_steps of at least 1 (the step's GPU time is measured after the "
     "warmup), got --warmup_steps 0"},
    {{"--trace_dir="}, "--trace_dir must be a non-empty path of at most 1023 bytes, got ''"},
    {{"--cupti_buffer_budget_mib", "-1"}, "--cupti_buffer_budget_mib must be an integer from 0 to 65536, got '-1'"},
    {{"--trace_gzip=1"}, "--trace_gzip is a switch and takes no value, got '--trace_gzip=1'"},
    {{"--nope"}, "unknown flag '--nope' (see --help)"},
    {{"--nope=3"}, "unknown flag '--nope' (see --help)"},
    {{"-x"}, "unknown flag '-x' (flags are --name or --name=value; see --help)"},
    {{"stray"}, "unexpected argument 'stray' (flags are --name or --name=value; see --help)"},
    {{"--batch_size"}, "--batch_size needs a value (an integer from 1 to 65536)"},
    {{"--scenario", "--amp"},
     "--scenario needs a value (one of clean, dataloader, sync, tiny_ops, memory_churn)"},
    {{"--output_json"}, "--output_json needs a value (a non-empty path of at most 1023 bytes)"},
    {{"--pin_memory=yes"}, "--pin_memory is a switch and takes no value, got '--pin_memory=yes'"},
    {{"--inject_slowdown", "0.5", "--warmup_steps", "0"},
     "--inject_slowdown needs --warmup_steps of at least 1 (the first steps' slowdown is a fraction of the mean "
     "warmup step time), got --warmup_steps 0"},
    {{"--inject_alternate"}, "--inject_alternate needs --inject_slowdown FRACTION above 0"},
    {{"--output_json", "res/"}, "--output_json must name a file, got the directory 'res/'"},
    {{"--output_json", "same", "--trace_dir", "same"}, "--output_json must differ from --trace_dir, got 'same' for both"},
    {{"--export_stacks", "st.txt"}, "--export_stacks needs --with_stack (ranges record no call stack otherwise)"},
    {{"--group_by_stack_n", "3"}, "--group_by_stack_n needs --with_stack (ranges record no call stack otherwise)"},
    {{"--with_stack", "--group_by_stack_n", "2", "--no_profile"},
     "--group_by_stack_n needs --with_stack and the profiler, not --no_profile (ranges record no call stack "
     "otherwise)"},
    {{"--group_by_stack_n", "101"}, "--group_by_stack_n must be an integer from 0 to 100, got '101'"},
    {{"--group_by_stack_n", "-1"}, "--group_by_stack_n must be an integer from 0 to 100, got '-1'"},
    {{"--stacks_metric", "count"},
     "--stacks_metric must be one of self_cuda_time_total, self_cpu_time_total, got 'count'"},
    {{"--with_stack", "--export_stacks", "out/"}, "--export_stacks must name a file, got the directory 'out/'"},
    {{"--with_stack", "--export_stacks", "m.json", "--output_json=m.json"},
     "--export_stacks must differ from --output_json and --trace_dir, got 'm.json'"},
    {{"--export_stacks="}, "--export_stacks must be a non-empty path of at most 1023 bytes, got ''"},
    {{"--scenario", "x\ny"}, "--scenario must be one of clean, dataloader, sync, tiny_ops, memory_churn, got 'x\\x0ay'"},
    {{"--repeat", "0"}, "--repeat 0 repeats the cycle until the steps end: give --steps N as well"},
    {{"--repeat", "-1"}, "--repeat must be an integer from 0 to 1000000, got '-1'"},
    {{"--wait_steps", "x"}, "--wait_steps must be an integer from 0 to 1000000, got 'x'"},
    {{"--steps", "1000001"}, "--steps must be an integer from 0 to 1000000, got '1000001'"},
    {{"--steps", "9"}, "--steps 9 is shorter than one cycle (wait 1 + warmup 1 + active 8 = 10 steps)"},
    {{"--repeat", "1000", "--wait_steps", "999"},
     "--repeat 1000 cycles of 1008 steps make 1008000 steps, more than 1000000; give fewer or --steps N"},
};

Test(cli_options, bad_values_name_the_flag_and_what_is_allowed) {
  for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
    char *argv[6] = {"profiler_demo"};
    int argc = 1;
    for (int k = 0; k < 4 && bad_cases[i].args[k] != NULL; k++) argv[argc++] = (char *)bad_cases[i].args[k];
    argv[argc] = NULL;
    pd_demo_config_t c;
    char err[512] = "";
    int rc = pd_demo_config_parse(argc, argv, &c, err, sizeof(err));
    cr_expect_eq(rc, PD_DEMO_EXIT_USAGE, "case %zu (%s): rc %d", i, bad_cases[i].args[0], rc);
    cr_expect_str_eq(err, bad_cases[i].message, "case %zu", i);
    cr_expect_null(strchr(err, '\n'), "case %zu: the message must be one line", i);
  }
}

static char *capture(void (*print)(FILE *)) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  print(f);
  fclose(f);
  return buf;
}

Test(cli_options, help_lists_every_flag_with_its_default) {
  char *help = capture(pd_demo_print_help);
  /* flag, default as --help must show it (NULL: an action without a default) */
  const char *flags[][2] = {
      {"--scenario NAME", "dataloader"}, {"--batch_size N", "64"}, {"--num_workers N", "the scenario's (8 for clean, 2 otherwise)"},
      {"--pin_memory", "off"}, {"--amp", "off"}, {"--warmup_steps N", "10"}, {"--profile_steps N", "8"},
      {"--trace_dir DIR", "results/traces/profiler_demo"}, {"--output_json FILE", "results/metrics_demo.json"},
      {"--seed N", "0"}, {"--with_stack", "off"}, {"--export_stacks FILE", NULL},
      {"--stacks_metric METRIC", "self_cuda_time_total"}, {"--group_by_stack_n N", "0"},
      {"--prefetch_factor N", "2"}, {"--persistent_workers", "off"},
      {"--device N", "0"}, {"--no_sync", "off"}, {"--tiny_ops_mode MODE", "the scenario's"},
      {"--tiny_ops_depth N", "the model's (256)"}, {"--allocator KIND", "the scenario's"},
      {"--churn_buffers N", "the model's (64"}, {"--top_n N", "15"}, {"--sort_by KEY", "self_cuda_time_total"},
      {"--quiet", "off"}, {"--inject_slowdown FRACTION", "0"}, {"--list_scenarios", NULL}, {"--help", NULL},
      {"--version", NULL},
  };
  for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
    /* The entry starts a line; the usage line above names each flag too. */
    char entry[128];
    snprintf(entry, sizeof(entry), "\n  %s ", flags[i][0]);
    const char *at = strstr(help, entry);
    cr_expect_not_null(at, "--help has no entry for %s", flags[i][0]);
    if (at == NULL || flags[i][1] == NULL) continue;
    /* The default follows the flag's line, before the next flag. */
    const char *next = strstr(at + 2, "\n  --");
    char want[128];
    snprintf(want, sizeof(want), "(default: %s", flags[i][1]);
    const char *def = strstr(at, want);
    cr_expect(def != NULL && (next == NULL || def < next), "%s: no '%s' in its entry", flags[i][0], want);
  }
  for (int code = 0; code <= 4; code++) {
    char want[16];
    snprintf(want, sizeof(want), "\n  %d  ", code);
    cr_expect_not_null(strstr(help, want), "--help does not document exit code %d", code);
  }
  cr_expect_not_null(strstr(help, "usage: profiler_demo"));
  free(help);
}

Test(cli_options, list_scenarios_describes_all_five) {
  char *text = capture(pd_demo_print_scenarios);
  const char *names[] = {"clean\n", "dataloader\n", "sync\n", "tiny_ops\n", "memory_churn\n"};
  for (int i = 0; i < 5; i++) cr_expect_not_null(strstr(text, names[i]), "missing %s", names[i]);
  const char *verdicts[] = {"verdict:   compute", "verdict:   dataloader", "verdict:   sync",
                            "verdict:   launch_overhead", "verdict:   allocator_churn"};
  for (int i = 0; i < 5; i++) cr_expect_not_null(strstr(text, verdicts[i]), "missing '%s'", verdicts[i]);
  cr_expect_not_null(strstr(text, "cpu_work 4000"));
  cr_expect_not_null(strstr(text, "--allocator pool"));
  free(text);
}

Test(cli_options, version_names_the_program_and_version) {
  char *text = capture(pd_demo_print_version);
  cr_expect(strncmp(text, "profiler_demo " PD_VERSION_STRING, strlen("profiler_demo " PD_VERSION_STRING)) == 0,
            "version line: %s", text);
  free(text);
}

/* ---- output paths --------------------------------------------------------------------------- */

static char *make_tmpdir(void) {
  char tmpl[] = "/tmp/pd_cli_test.XXXXXX";
  char *d = mkdtemp(tmpl);
  cr_assert_not_null(d);
  return strdup(d);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

Test(cli_outputs, prepare_creates_both_dirs_and_rollback_removes_them) {
  char *root = make_tmpdir();
  pd_demo_config_t c;
  pd_demo_config_init(&c);
  snprintf(c.trace_dir, sizeof(c.trace_dir), "%s/a/b/traces", root);
  snprintf(c.output_json, sizeof(c.output_json), "%s/a/json/m.json", root);
  pd_demo_outputs_t outs;
  char err[2048];
  cr_assert_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), 0, "%s", err);
  struct stat st;
  cr_expect(stat(c.trace_dir, &st) == 0 && S_ISDIR(st.st_mode));
  char json_dir[1200];
  snprintf(json_dir, sizeof(json_dir), "%s/a/json", root);
  cr_expect(stat(json_dir, &st) == 0 && S_ISDIR(st.st_mode));
  cr_expect_eq(count_entries(c.trace_dir), 0, "the writability probe must not stay behind");
  cr_expect_eq(outs.ndirs, 4, "made %d dirs (a, a/b, a/b/traces, a/json)", outs.ndirs);
  /* A file the run wrote goes too. */
  char file[1200];
  snprintf(file, sizeof(file), "%s/x.pt.trace.json", c.trace_dir);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  pd_demo_outputs_track_file(&outs, file);
  pd_demo_outputs_rollback(&outs);
  cr_expect_eq(count_entries(root), 0, "rollback left something in %s", root);
  rmdir(root);
  free(root);
}

Test(cli_outputs, existing_dirs_are_kept_on_rollback) {
  char *root = make_tmpdir();
  pd_demo_config_t c;
  pd_demo_config_init(&c);
  snprintf(c.trace_dir, sizeof(c.trace_dir), "%s", root);
  snprintf(c.output_json, sizeof(c.output_json), "%s/m.json", root);
  pd_demo_outputs_t outs;
  char err[2048];
  cr_assert_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), 0, "%s", err);
  cr_expect_eq(outs.ndirs, 0);
  pd_demo_outputs_rollback(&outs);
  struct stat st;
  cr_expect(stat(root, &st) == 0, "rollback removed a directory the run did not make");
  rmdir(root);
  free(root);
}

Test(cli_outputs, unwritable_paths_fail_with_exit_2_and_leave_nothing) {
  char *root = make_tmpdir();
  char file[1200];
  snprintf(file, sizeof(file), "%s/plainfile", root);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);

  pd_demo_config_t c;
  pd_demo_outputs_t outs;
  char err[2048];
  /* trace_dir below a regular file */
  pd_demo_config_init(&c);
  snprintf(c.trace_dir, sizeof(c.trace_dir), "%s/plainfile/traces", root);
  snprintf(c.output_json, sizeof(c.output_json), "%s/new/m.json", root);
  cr_expect_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), PD_DEMO_EXIT_USAGE);
  cr_expect_not_null(strstr(err, "--trace_dir"), "message: %s", err);
  cr_expect_not_null(strstr(err, "is not a directory"), "message: %s", err);
  /* JSON parent below a regular file; trace_dir fine but new: must be removed again */
  pd_demo_config_init(&c);
  snprintf(c.trace_dir, sizeof(c.trace_dir), "%s/t1/t2", root);
  snprintf(c.output_json, sizeof(c.output_json), "%s/plainfile/m.json", root);
  cr_expect_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), PD_DEMO_EXIT_USAGE);
  cr_expect_not_null(strstr(err, "--output_json"), "message: %s", err);
  /* output_json naming an existing directory */
  pd_demo_config_init(&c);
  snprintf(c.trace_dir, sizeof(c.trace_dir), "%s/t3", root);
  snprintf(c.output_json, sizeof(c.output_json), "%s", root);
  cr_expect_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), PD_DEMO_EXIT_USAGE);
  cr_expect_not_null(strstr(err, "is a directory"), "message: %s", err);

  /* export_stacks below a regular file; the other outputs fine but new: removed again */
  pd_demo_config_init(&c);
  snprintf(c.trace_dir, sizeof(c.trace_dir), "%s/t4", root);
  snprintf(c.output_json, sizeof(c.output_json), "%s/t5/m.json", root);
  snprintf(c.export_stacks, sizeof(c.export_stacks), "%s/plainfile/stacks.txt", root);
  cr_expect_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), PD_DEMO_EXIT_USAGE);
  cr_expect_not_null(strstr(err, "--export_stacks"), "message: %s", err);
  /* export_stacks naming an existing directory */
  snprintf(c.export_stacks, sizeof(c.export_stacks), "%s", root);
  cr_expect_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), PD_DEMO_EXIT_USAGE);
  cr_expect_not_null(strstr(err, "--export_stacks"), "message: %s", err);
  cr_expect_not_null(strstr(err, "is a directory"), "message: %s", err);

  cr_expect_eq(count_entries(root), 1, "only plainfile may remain in %s", root);
  unlink(file);
  rmdir(root);
  free(root);
}

/* "-" (standard output) needs no directory: prepare makes none for it and checks no file
 * named "-" (here a directory of that name, which a file check refuses), and a failed
 * run's rollback leaves a file of that name alone. */
Test(cli_outputs, dash_is_standard_output_not_a_file) {
  char *root = make_tmpdir();
  char cwd[1024];
  cr_assert_not_null(getcwd(cwd, sizeof cwd));
  cr_assert_eq(chdir(root), 0);
  cr_assert_eq(mkdir("-", 0700), 0);
  pd_demo_config_t c;
  char err[2048];
  const char *argv[] = {"profiler_demo", "--output_json", "-", "--with_stack", "--export_stacks=-", NULL};
  cr_assert_eq(pd_demo_config_parse(3, (char *const *)argv, &c, err, sizeof err), 0, "%s", err);
  cr_expect_str_eq(c.output_json, "-");
  cr_expect_eq(pd_demo_config_parse(5, (char *const *)argv, &c, err, sizeof err), PD_DEMO_EXIT_USAGE);
  cr_expect_str_eq(err, "--export_stacks must differ from --output_json and --trace_dir, got '-'");
  pd_demo_config_init(&c);
  c.no_profile = true;
  snprintf(c.output_json, sizeof c.output_json, "-");
  pd_demo_outputs_t outs;
  cr_assert_eq(pd_demo_outputs_prepare(&c, &outs, err, sizeof(err)), 0, "%s", err);
  cr_expect_eq(outs.ndirs, 0);
  cr_assert_eq(rmdir("-"), 0);
  FILE *f = fopen("-", "w");
  cr_assert_not_null(f);
  fclose(f);
  pd_demo_outputs_track_file(&outs, c.output_json);
  pd_demo_outputs_rollback(&outs);
  cr_expect_eq(access("-", F_OK), 0, "the rollback removed a file named '-'");
  unlink("-");
  cr_assert_eq(chdir(cwd), 0);
  cr_expect_eq(count_entries(root), 0);
  rmdir(root);
  free(root);
}

/* --list_scenarios --names: the scenario table's names, one a line, nothing else (what the
 * scripts loop over); --names alone is bad input. */
Test(cli_options, list_scenarios_names_is_the_table) {
  pd_demo_config_t c;
  char err[512];
  cr_assert_eq(PARSE(&c, err, "--list_scenarios", "--names"), 0, "%s", err);
  cr_expect_eq(c.action, PD_DEMO_LIST);
  cr_expect(c.list_names);
  cr_assert_eq(PARSE(&c, err, "--names", "--list_scenarios"), 0, "%s", err);
  cr_expect(c.list_names);
  cr_expect_eq(PARSE(&c, err, "--names"), PD_DEMO_EXIT_USAGE);
  cr_expect_str_eq(err, "--names goes with --list_scenarios (it lists the scenario names only)");
  cr_expect_eq(PARSE(&c, err, "--list_scenarios", "--names=1"), PD_DEMO_EXIT_USAGE);
  char *text = capture(pd_demo_print_scenario_names);
  size_t n = 0;
  const pd_scenario_info_t *t = pd_scenario_table(&n);
  char want[512] = "";
  for (size_t i = 0; i < n; i++) {
    strcat(want, t[i].name);
    strcat(want, "\n");
  }
  cr_expect_gt(n, 1);
  cr_expect_str_eq(text, want);
  free(text);
}
