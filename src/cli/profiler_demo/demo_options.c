/* demo_options.c: profiler_demo's flags in ONE table (name, kind, range, group, default,
 * help) that drives parsing, validation, the usage line and --help alike, so adding a
 * flag is one row. Parsing does no I/O: errors come back as one line of text.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "demo.h"
#include "pd/pd_cnn.h"
#include "pd/pd_common.h"
#include "pd/pd_out.h"
#include "pd/pd_scen.h"
#include "pd/pd_stats.h"

typedef enum {
  OPT_INT,    /* int field, [imin, imax] */
  OPT_I64,    /* int64_t field, [imin, imax] */
  OPT_DOUBLE, /* double field, [dmin, dmax] */
  OPT_PATH,   /* char[PD_DEMO_PATH_MAX] field */
  OPT_SWITCH, /* bool field set to true; takes no value */
  OPT_CHOICE, /* int field set to values[i] for the i-th choice */
  OPT_ACTION  /* sets cfg->action */
} opt_kind_t;

typedef struct {
  pd_cli_opt_t cli; /* name ("--scenario"), switch or value: the shared parser's row */
  opt_kind_t kind;
  size_t offset;
  int64_t imin, imax;
  double dmin, dmax;
  const char *const *choices; /* NULL-terminated */
  const int *values;          /* parallel to choices */
  int action;
  const char *metavar;
  const char *group;
  const char *def; /* the default as --help shows it; NULL: none shown */
  const char *help;
} opt_t;

static const char *const scenario_choices[] = {
#define PD_DEMO_SCEN_NAME(id, name, ...) name,
    PD_SCENARIO_MAP(PD_DEMO_SCEN_NAME)
#undef PD_DEMO_SCEN_NAME
        NULL};
static const int scenario_values[] = {
#define PD_DEMO_SCEN_VALUE(id, ...) PD_SCEN_##id,
    PD_SCENARIO_MAP(PD_DEMO_SCEN_VALUE)
#undef PD_DEMO_SCEN_VALUE
};

static const char *const sort_choices[] = {
#define PD_DEMO_SORT_NAME(id, text) text,
    PD_SORT_KEY_MAP(PD_DEMO_SORT_NAME)
#undef PD_DEMO_SORT_NAME
        NULL};
static const int sort_values[] = {
#define PD_DEMO_SORT_VALUE(id, text) PD_SORT_##id,
    PD_SORT_KEY_MAP(PD_DEMO_SORT_VALUE)
#undef PD_DEMO_SORT_VALUE
};

/* --profile_level: what CUPTI records (docs/performance.md) */
static const char *const level_choices[] = {"lean", "full", NULL};
static const int level_values[] = {PD_DEMO_LEVEL_LEAN, PD_DEMO_LEVEL_FULL};

/* export_stacks metrics: torch's prof.export_stacks(path, metric) takes these two */
static const char *const stacks_metric_choices[] = {"self_cuda_time_total", "self_cpu_time_total", NULL};
static const int stacks_metric_values[] = {PD_SORT_SELF_CUDA_TIME_TOTAL, PD_SORT_SELF_CPU_TIME_TOTAL};

static const char *const tiny_choices[] = {"off", "chain", "fused", "graph", NULL};
static const int tiny_values[] = {PD_TINY_OFF, PD_TINY_CHAIN, PD_TINY_FUSED, PD_TINY_GRAPH};

static const char *const alloc_choices[] = {"cudamalloc", "pool", NULL};
static const int alloc_values[] = {PD_ALLOC_CHURN, PD_ALLOC_POOL};

#define OFF(field) offsetof(pd_demo_config_t, field)
/* A row's start: the shared parser's part ("--name", and whether the flag takes a value),
 * then the kind. */
#define ROW(name, kind) \
  {"--" name, (kind) == OPT_SWITCH || (kind) == OPT_ACTION ? PD_CLI_SWITCH : PD_CLI_VALUE, 0}, (kind)
#define G_RUN "Run"
#define G_DATA "Data pipeline"
#define G_OUT "Profiler and output"
#define G_KNOB "Fix knobs (work on any scenario, for A/B comparisons)"
#define G_TEST "Testing"
#define G_INFO "Information"

/* The flag table. Order is the order of --help within each group. */
static const opt_t opts[] = {
    {ROW("scenario", OPT_CHOICE), OFF(scenario), 0, 0, 0, 0, scenario_choices, scenario_values, 0, "NAME", G_RUN,
     "dataloader", "the planted bottleneck to run (see --list_scenarios)"},
    {ROW("batch_size", OPT_INT), OFF(batch_size), 1, 65536, 0, 0, NULL, NULL, 0, "N", G_RUN, "64",
     "images per training step"},
    {ROW("amp", OPT_SWITCH), OFF(amp), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_RUN, "off",
     "fp16 compute with fp32 master weights and dynamic loss scaling"},
    {ROW("warmup_steps", OPT_INT), OFF(warmup_steps), 0, 100000, 0, 0, NULL, NULL, 0, "N", G_RUN, "10",
     "unprofiled steps before the profiler starts"},
    {ROW("profile_steps", OPT_INT), OFF(profile_steps), 1, 10000, 0, 0, NULL, NULL, 0, "N", G_RUN, "8",
     "recorded steps per cycle: schedule(wait=W, warmup=1, active=N, repeat=R)"},
    {ROW("wait_steps", OPT_INT), OFF(wait_steps), 0, PD_DEMO_MAX_STEPS, 0, 0, NULL, NULL, 0, "W", G_RUN, "1",
     "unprofiled steps at the start of each cycle (the schedule's wait)"},
    {ROW("repeat", OPT_INT), OFF(repeat), 0, PD_DEMO_MAX_STEPS, 0, 0, NULL, NULL, 0, "R", G_RUN, "1",
     "cycles to record, one trace each; 0 repeats them until --steps ends (torch's repeat=0)"},
    {ROW("steps", OPT_I64), OFF(steps), 0, PD_DEMO_MAX_STEPS, 0, 0, NULL, NULL, 0, "N", G_RUN,
     "(W + 1 + N) x R", "steps after the warmup; past the last cycle they run unprofiled; needed with --repeat 0"},
    {ROW("seed", OPT_I64), OFF(seed), 0, INT64_MAX, 0, 0, NULL, NULL, 0, "N", G_RUN, "0",
     "seed of the weights and of the synthetic data"},
    {ROW("device", OPT_INT), OFF(device), 0, 1023, 0, 0, NULL, NULL, 0, "N", G_RUN, "0", "CUDA device ordinal"},

    {ROW("num_workers", OPT_INT), OFF(num_workers), 0, 256, 0, 0, NULL, NULL, 0, "N", G_DATA,
     "the scenario's (8 for clean, 2 otherwise)",
     "loader threads; 0 loads on the main thread"},
    {ROW("prefetch_factor", OPT_INT), OFF(prefetch_factor), 1, 64, 0, 0, NULL, NULL, 0, "N", G_DATA, "2",
     "batches queued per worker (no effect with --num_workers 0)"},
    {ROW("persistent_workers", OPT_SWITCH), OFF(persistent_workers), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_DATA, "off",
     "keep workers alive across epochs (no effect with --num_workers 0)"},
    {ROW("pin_memory", OPT_SWITCH), OFF(pin_memory), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_DATA, "off",
     "stage batches in page-locked memory and copy them asynchronously"},

    {ROW("trace_dir", OPT_PATH), OFF(trace_dir), 0, 0, 0, 0, NULL, NULL, 0, "DIR", G_OUT,
     "results/traces/profiler_demo", "where the Chrome trace (.pt.trace.json) goes"},
    {ROW("output_json", OPT_PATH), OFF(output_json), 0, 0, 0, 0, NULL, NULL, 0, "FILE", G_OUT,
     "results/metrics_demo.json",
     "the metrics JSON (schema " PD_STRINGIFY(PD_METRICS_SCHEMA_VERSION) "); - writes it to standard output and the "
     "report to stderr"},
    {ROW("cupti_buffer_budget_mib", OPT_INT), OFF(cupti_buffer_budget_mib), 0, 65536, 0, 0, NULL, NULL, 0, "MIB", G_OUT,
     "0 (no limit)",
     "most MiB of CUPTI activity buffers out at once; past it CUPTI drops records, which are "
     "counted, warned about and written as dropped_records"},
    {ROW("trace_gzip", OPT_SWITCH), OFF(trace_gzip), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_OUT, "off",
     "write the trace gzipped as it is written (.pt.trace.json.gz, torch.profiler's use_gzip)"},
    {ROW("with_stack", OPT_SWITCH), OFF(with_stack), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_OUT, "off",
     "record each host range's call stack (function, file, line); the trace carries it as "
     "\"Call stack\" (TensorBoard's call-stack view)"},
    {ROW("export_stacks", OPT_PATH), OFF(export_stacks), 0, 0, 0, 0, NULL, NULL, 0, "FILE", G_OUT, NULL,
     "write collapsed stacks (frame;frame;op value_us) for flamegraph.pl, inferno, speedscope, "
     "as torch's prof.export_stacks (needs --with_stack); - writes them to standard output"},
    {ROW("stacks_metric", OPT_CHOICE), OFF(stacks_metric), 0, 0, 0, 0, stacks_metric_choices, stacks_metric_values, 0,
     "METRIC", G_OUT, "self_cuda_time_total", "the value --export_stacks writes per stack"},
    {ROW("group_by_stack_n", OPT_INT), OFF(group_by_stack_n), 0, 100, 0, 0, NULL, NULL, 0, "N", G_OUT, "0",
     "also print the ops table grouped by the N innermost frames of each op's call stack, as "
     "torch's key_averages(group_by_stack_n=N); 0 off (needs --with_stack)"},
    {ROW("top_n", OPT_INT), OFF(top_n), 0, 100000, 0, 0, NULL, NULL, 0, "N", G_OUT, "15",
     "rows of the top CUDA ops table; 0 prints all"},
    {ROW("sort_by", OPT_CHOICE), OFF(sort_by), 0, 0, 0, 0, sort_choices, sort_values, 0, "KEY", G_OUT,
     "self_cuda_time_total", "column the ops table is sorted by"},
    {ROW("profile_level", OPT_CHOICE), OFF(profile_level), 0, 0, 0, 0, level_choices, level_values, 0, "LEVEL", G_OUT,
     "lean", "lean: what the outputs need (GPU activity, syncs, memory, runtime calls but the query-only ones, "
     "driver-API launches); full: every runtime and driver API call as well (more records, more overhead)"},
    {ROW("quiet", OPT_SWITCH), OFF(quiet), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_OUT, "off",
     "print only the verdict and the output paths"},
    {ROW("no_profile", OPT_SWITCH), OFF(no_profile), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_OUT, "off",
     "run the same steps without the profiler (to measure its overhead); the metrics JSON then has "
     "step times but no trace metrics, and no trace is written"},
    {ROW("pin_cpu", OPT_SWITCH), OFF(pin_cpu), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_RUN, "off",
     "pin the launching thread to the CPU that runs a fixed loop fastest at start (docs/gate.md: a "
     "thread that starts on a slow CPU stays there); the loader threads keep the other CPUs"},
    {ROW("warmup_probe", OPT_SWITCH), OFF(warmup_probe), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_RUN, "off",
     "after each warmup step, outside its time, time 16 empty kernel launches and a fixed piece of "
     "compute on the launching thread (warmup_probe_launch_ns, warmup_probe_compute_ns in the metrics "
     "JSON): the host's speed at that moment (docs/gate.md)"},

    {ROW("no_sync", OPT_SWITCH), OFF(no_sync), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_KNOB, "off",
     "drop the host reads of the loss inside the step (fixes sync)"},
    {ROW("tiny_ops_mode", OPT_CHOICE), OFF(tiny_ops_mode), 0, 0, 0, 0, tiny_choices, tiny_values, 0, "MODE", G_KNOB,
     "the scenario's (chain for tiny_ops, off otherwise)",
     "TinyOpsBlock: chain plants it, fused or graph fix it, off removes it"},
    {ROW("tiny_ops_depth", OPT_INT), OFF(tiny_ops_depth), 1, 100000, 0, 0, NULL, NULL, 0, "N", G_KNOB,
     "the model's (256)", "elementwise kernels in the TinyOpsBlock chain"},
    {ROW("allocator", OPT_CHOICE), OFF(allocator), 0, 0, 0, 0, alloc_choices, alloc_values, 0, "KIND", G_KNOB,
     "the scenario's (cudamalloc for memory_churn, pool otherwise)",
     "step temporaries: cudamalloc (cudaMalloc/cudaFree each step) or pool (cudaMallocAsync)"},
    {ROW("churn_buffers", OPT_INT), OFF(churn_buffers), 0, 100000, 0, 0, NULL, NULL, 0, "N", G_KNOB,
     "the model's (64, i.e. all of them)",
     "how many of the step's per-step buffers (15 in this model) are temporaries taken from the "
     "allocator every step; 0 keeps them all in workspaces made once"},

    {ROW("inject_slowdown", OPT_DOUBLE), OFF(inject_slowdown), 0, 0, 0.0, 10.0, NULL, NULL, 0, "FRACTION", G_TEST,
     "0",
     "make every step from the third warmup step on FRACTION longer: host busy time before its "
     "launches, FRACTION x the median of the steps measured so far in the same phase (warmup, "
     "profiled) (the gate's self-test)"},
    {ROW("inject_alternate", OPT_SWITCH), OFF(inject_alternate), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_TEST, "off",
     "with --inject_slowdown: inject only in every other step (the odd ones of step_times_s "
     "and of the warmup), so injected and plain steps alternate in one process"},
    {ROW("inject_gpu_slowdown", OPT_DOUBLE), OFF(inject_gpu_slowdown), 0, 0, 0.0, 10.0, NULL, NULL, 0, "FRACTION",
     G_TEST, "0",
     "add device time, FRACTION x the step's GPU time measured after the warmup, to the "
     "optimizer kernel of every profiled step (the gate's GPU-side self-test)"},

    {ROW("list_scenarios", OPT_ACTION), 0, 0, 0, 0, 0, NULL, NULL, PD_DEMO_LIST, NULL, G_INFO, NULL,
     "describe the five scenarios and exit"},
    {ROW("names", OPT_SWITCH), OFF(list_names), 0, 0, 0, 0, NULL, NULL, 0, NULL, G_INFO, NULL,
     "with --list_scenarios: the names only, one a line (the list scripts loop over)"},
    {ROW("help", OPT_ACTION), 0, 0, 0, 0, 0, NULL, NULL, PD_DEMO_HELP, NULL, G_INFO, NULL,
     "show this help and exit (also -h)"},
    /* -h: --help's short name; no group, so neither usage nor help lists it apart */
    {{"-h", PD_CLI_SWITCH, 0}, OPT_ACTION, 0, 0, 0, 0, 0, NULL, NULL, PD_DEMO_HELP, NULL, NULL, NULL, NULL},
    {ROW("version", OPT_ACTION), 0, 0, 0, 0, 0, NULL, NULL, PD_DEMO_VERSION, NULL, G_INFO, NULL,
     "show the version and exit"},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))
/* "--flag value" or "--flag=value"; a following "--x" is a missing value, as argparse sees it */
static const pd_cli_spec_t k_spec = PD_CLI_SPEC(opts, PD_CLI_EQ | PD_CLI_NO_DASHDASH_VALUE);

static const char *const groups[] = {G_RUN, G_DATA, G_OUT, G_KNOB, G_TEST, G_INFO};

/* The verdict names from pd_stats.h's table, without linking the statistics code. */
static const char *bottleneck_text(pd_bottleneck_t b) {
  switch (b) {
#define PD_DEMO_BN_TEXT(id, text) \
  case PD_BOTTLENECK_##id:        \
    return text;
    PD_BOTTLENECK_MAP(PD_DEMO_BN_TEXT)
#undef PD_DEMO_BN_TEXT
    case PD_BOTTLENECK_COUNT:
      break;
  }
  return "unknown";
}

void pd_demo_config_init(pd_demo_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->action = PD_DEMO_RUN;
  cfg->scenario = PD_SCEN_DATALOADER;
  cfg->batch_size = 64;
  cfg->amp = false;
  cfg->warmup_steps = 10;
  cfg->profile_steps = 8;
  cfg->wait_steps = 1;
  cfg->repeat = 1;
  cfg->steps = 0;
  cfg->seed = 0;
  cfg->device = 0;
  cfg->num_workers = PD_KNOB_SCENARIO;
  cfg->prefetch_factor = 2;
  cfg->persistent_workers = false;
  cfg->pin_memory = false;
  snprintf(cfg->trace_dir, sizeof(cfg->trace_dir), "%s", "results/traces/profiler_demo");
  snprintf(cfg->output_json, sizeof(cfg->output_json), "%s", "results/metrics_demo.json");
  cfg->with_stack = false;
  cfg->export_stacks[0] = '\0';
  cfg->stacks_metric = PD_SORT_SELF_CUDA_TIME_TOTAL;
  cfg->group_by_stack_n = 0;
  cfg->top_n = 15;
  cfg->sort_by = PD_SORT_SELF_CUDA_TIME_TOTAL;
  cfg->quiet = false;
  cfg->no_profile = false;
  cfg->pin_cpu = false;
  cfg->warmup_probe = false;
  cfg->no_sync = false;
  cfg->tiny_ops_mode = PD_KNOB_SCENARIO;
  cfg->tiny_ops_depth = PD_KNOB_SCENARIO;
  cfg->allocator = PD_KNOB_SCENARIO;
  cfg->churn_buffers = PD_KNOB_SCENARIO;
  cfg->inject_slowdown = 0.0;
  cfg->inject_gpu_slowdown = 0.0;
}

/* "an integer from 1 to 65536", "one of a, b, c": what the flag allows, in words. */
static void opt_allowed(const opt_t *o, char *buf, size_t len) {
  switch (o->kind) {
    case OPT_INT:
    case OPT_I64:
      snprintf(buf, len, "an integer from %" PRId64 " to %" PRId64, o->imin, o->imax);
      return;
    case OPT_DOUBLE:
      snprintf(buf, len, "a number from %g to %g", o->dmin, o->dmax);
      return;
    case OPT_PATH:
      snprintf(buf, len, "a non-empty path of at most %d bytes", PD_DEMO_PATH_MAX - 1);
      return;
    case OPT_CHOICE: {
      size_t used = (size_t)snprintf(buf, len, "one of ");
      for (int i = 0; o->choices[i] != NULL && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", o->choices[i]);
      return;
    }
    case OPT_SWITCH:
    case OPT_ACTION:
      snprintf(buf, len, "no value");
      return;
  }
}

static int opt_error(char *err, size_t errlen, const opt_t *o, const char *value) {
  char allowed[256];
  opt_allowed(o, allowed, sizeof(allowed));
  snprintf(err, errlen, "%s must be %s, got '%s'", o->cli.name, allowed, value);
  return PD_DEMO_EXIT_USAGE;
}

static int opt_set(const opt_t *o, const char *value, pd_demo_config_t *cfg, char *err, size_t errlen) {
  char *field = (char *)cfg + o->offset;
  switch (o->kind) {
    case OPT_INT:
    case OPT_I64: {
      int64_t v = 0;
      if (!pd_cli_int(value, o->imin, o->imax, true, &v)) return opt_error(err, errlen, o, value);
      if (o->kind == OPT_INT) {
        int iv = (int)v;
        memcpy(field, &iv, sizeof(iv));
      } else {
        memcpy(field, &v, sizeof(v));
      }
      return 0;
    }
    case OPT_DOUBLE: {
      double v = 0;
      if (!pd_cli_number(value, true, &v) || v < o->dmin || v > o->dmax) return opt_error(err, errlen, o, value);
      memcpy(field, &v, sizeof(v));
      return 0;
    }
    case OPT_PATH: {
      size_t n = strlen(value);
      if (n == 0 || n >= PD_DEMO_PATH_MAX) return opt_error(err, errlen, o, value);
      memcpy(field, value, n + 1);
      return 0;
    }
    case OPT_CHOICE: {
      int i = pd_cli_choice(value, o->choices);
      if (i < 0) return opt_error(err, errlen, o, value);
      memcpy(field, &o->values[i], sizeof(int));
      return 0;
    }
    case OPT_SWITCH: {
      bool t = true;
      memcpy(field, &t, sizeof(t));
      return 0;
    }
    case OPT_ACTION:
      cfg->action = (pd_demo_action_t)o->action;
      return 0;
  }
  return 0;
}

int pd_demo_config_validate(const pd_demo_config_t *cfg, char *err, size_t errlen) {
  const int64_t cycle = (int64_t)cfg->wait_steps + 1 + cfg->profile_steps;
  if (cfg->list_names && cfg->action != PD_DEMO_LIST) {
    snprintf(err, errlen, "--names goes with --list_scenarios (it lists the scenario names only)");
    return PD_DEMO_EXIT_USAGE;
  }
  if (cfg->repeat == 0 && cfg->steps == 0) {
    snprintf(err, errlen, "--repeat 0 repeats the cycle until the steps end: give --steps N as well");
    return PD_DEMO_EXIT_USAGE;
  }
  if (cfg->steps > 0 && cfg->steps < cycle) {
    snprintf(err, errlen,
             "--steps %" PRId64 " is shorter than one cycle (wait %d + warmup 1 + active %d = %" PRId64 " steps)",
             cfg->steps, cfg->wait_steps, cfg->profile_steps, cycle);
    return PD_DEMO_EXIT_USAGE;
  }
  if (cfg->steps == 0 && cycle * cfg->repeat > PD_DEMO_MAX_STEPS) {
    snprintf(err, errlen,
             "--repeat %d cycles of %" PRId64 " steps make %" PRId64 " steps, more than %d; give fewer or --steps N",
             cfg->repeat, cycle, cycle * cfg->repeat, PD_DEMO_MAX_STEPS);
    return PD_DEMO_EXIT_USAGE;
  }
  if (cfg->inject_slowdown > 0.0 && cfg->warmup_steps < 1) {
    snprintf(err, errlen,
             "--inject_slowdown needs --warmup_steps of at least 1 (the first steps' slowdown is a "
             "fraction of the mean warmup step time), got --warmup_steps %d",
             cfg->warmup_steps);
    return PD_DEMO_EXIT_USAGE;
  }
  if (cfg->inject_alternate && !(cfg->inject_slowdown > 0.0)) {
    snprintf(err, errlen, "--inject_alternate needs --inject_slowdown FRACTION above 0");
    return PD_DEMO_EXIT_USAGE;
  }
  if (cfg->inject_gpu_slowdown > 0.0 && cfg->warmup_steps < 1) {
    snprintf(err, errlen,
             "--inject_gpu_slowdown needs --warmup_steps of at least 1 (the step's GPU time is "
             "measured after the warmup), got --warmup_steps %d",
             cfg->warmup_steps);
    return PD_DEMO_EXIT_USAGE;
  }
  const char *stack_flag = cfg->export_stacks[0] ? "--export_stacks" : cfg->group_by_stack_n > 0 ? "--group_by_stack_n" : NULL;
  if (stack_flag != NULL && (!cfg->with_stack || cfg->no_profile)) {
    snprintf(err, errlen, "%s needs --with_stack%s (ranges record no call stack otherwise)", stack_flag,
             cfg->no_profile ? " and the profiler, not --no_profile" : "");
    return PD_DEMO_EXIT_USAGE;
  }
  size_t es = strlen(cfg->export_stacks);
  if (es > 0 && cfg->export_stacks[es - 1] == '/') {
    snprintf(err, errlen, "--export_stacks must name a file, got the directory '%s'", cfg->export_stacks);
    return PD_DEMO_EXIT_USAGE;
  }
  if (es > 0 && (strcmp(cfg->export_stacks, cfg->output_json) == 0 || strcmp(cfg->export_stacks, cfg->trace_dir) == 0)) {
    snprintf(err, errlen, "--export_stacks must differ from --output_json and --trace_dir, got '%s'",
             cfg->export_stacks);
    return PD_DEMO_EXIT_USAGE;
  }
  size_t n = strlen(cfg->output_json);
  if (n > 0 && cfg->output_json[n - 1] == '/') {
    snprintf(err, errlen, "--output_json must name a file, got the directory '%s'", cfg->output_json);
    return PD_DEMO_EXIT_USAGE;
  }
  if (strcmp(cfg->output_json, cfg->trace_dir) == 0) {
    snprintf(err, errlen, "--output_json must differ from --trace_dir, got '%s' for both", cfg->output_json);
    return PD_DEMO_EXIT_USAGE;
  }
  return 0;
}

static int config_parse(int argc, char *const argv[], pd_demo_config_t *cfg, char *err, size_t errlen) {
  pd_demo_config_init(cfg);
  if (errlen > 0) err[0] = '\0';
  pd_cli_iter_t iter;
  pd_cli_item_t it;
  pd_cli_iter_init(&iter, &k_spec, argc, argv, 1);
  while (pd_cli_next(&iter, &it) != PD_CLI_END) {
    const opt_t *o = it.row;
    char allowed[256];
    switch (it.kind) {
      case PD_CLI_OPTION: {
        int rc = opt_set(o, it.value, cfg, err, errlen);
        if (rc != 0) return rc;
        /* --help and --version win over whatever follows, as with argparse. */
        if (cfg->action == PD_DEMO_HELP || cfg->action == PD_DEMO_VERSION) return 0;
        continue;
      }
      case PD_CLI_POSITIONAL:
        snprintf(err, errlen, "unexpected argument '%s' (flags are --name or --name=value; see --help)", it.arg);
        break;
      case PD_CLI_UNKNOWN:
        if (strncmp(it.arg, "--", 2) != 0 || it.arg[2] == '\0')
          snprintf(err, errlen, "unknown flag '%s' (flags are --name or --name=value; see --help)", it.arg);
        else
          snprintf(err, errlen, "unknown flag '%.*s' (see --help)", (int)it.name_len, it.arg);
        break;
      case PD_CLI_SWITCH_VALUE:
        snprintf(err, errlen, "%s is a switch and takes no value, got '%s'", o->cli.name, it.arg);
        break;
      default: /* PD_CLI_NO_VALUE */
        opt_allowed(o, allowed, sizeof(allowed));
        snprintf(err, errlen, "%s needs a value (%s)", o->cli.name, allowed);
        break;
    }
    return PD_DEMO_EXIT_USAGE;
  }
  return pd_demo_config_validate(cfg, err, errlen);
}

int pd_demo_config_parse(int argc, char *const argv[], pd_demo_config_t *cfg, char *err, size_t errlen) {
  int rc = config_parse(argc, argv, cfg, err, errlen);
  if (rc != 0 && errlen > 0) {
    /* a value with a newline or an escape keeps the message one line */
    char line[2048];
    snprintf(line, sizeof line, "%s", err);
    pd_term_escape_line(err, errlen, line);
  }
  return rc;
}

/* ---- usage and help --------------------------------------------------------------------- */

static void opt_synopsis(const opt_t *o, char *buf, size_t len) {
  if (o->kind == OPT_SWITCH || o->kind == OPT_ACTION)
    snprintf(buf, len, "[%s]", o->cli.name);
  else if (o->kind == OPT_CHOICE && o->values != sort_values) { /* sort keys: too long inline */
    size_t used = (size_t)snprintf(buf, len, "[%s {", o->cli.name);
    for (int i = 0; o->choices[i] != NULL && used < len; i++)
      used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "", o->choices[i]);
    if (used < len) snprintf(buf + used, len - used, "}]");
  } else {
    snprintf(buf, len, "[%s %s]", o->cli.name, o->metavar);
  }
}

void pd_demo_print_usage(FILE *out) {
  const char *lead = "usage: " PD_DEMO_PROG;
  const int indent = (int)strlen(lead);
  int col = fprintf(out, "%s", lead);
  for (size_t i = 0; i < NOPTS; i++) {
    if (opts[i].group == NULL) continue; /* a short name (-h) */
    char item[512];
    opt_synopsis(&opts[i], item, sizeof(item));
    int w = (int)strlen(item) + 1;
    if (col + w > 100) {
      fprintf(out, "\n%*s", indent, "");
      col = indent;
    }
    col += fprintf(out, " %s", item);
  }
  fprintf(out, "\n");
}

/* Prints text after a 30-column head, wrapped at 100 columns. */
static void help_wrap(FILE *out, const char *text) {
  const int indent = 30, width = 100;
  int col = indent;
  const char *p = text;
  while (*p != '\0') {
    size_t w = strcspn(p, " ");
    if (col > indent && col + 1 + (int)w > width) {
      fprintf(out, "\n%*s", indent, "");
      col = indent;
    }
    col += fprintf(out, " %.*s", (int)w, p);
    p += w;
    while (*p == ' ') p++;
  }
  fprintf(out, "\n");
}

void pd_demo_print_help(FILE *out) {
  fprintf(out,
          "%s %s: a GPU bottleneck lab. Runs a SimpleCNN training step with one planted\n"
          "performance problem, profiles it with its own CUPTI profiler, and prints quick stats,\n"
          "the top CUDA ops and a verdict; writes a Chrome trace and a metrics JSON.\n\n",
          PD_DEMO_PROG, PD_VERSION_STRING);
  pd_demo_print_usage(out);
  fprintf(out, "\nFlags take `--flag value` or `--flag=value`.\n");
  for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
    fprintf(out, "\n%s:\n", groups[g]);
    for (size_t i = 0; i < NOPTS; i++) {
      const opt_t *o = &opts[i];
      if (o->group == NULL || strcmp(o->group, groups[g]) != 0) continue;
      char head[128];
      if (o->kind == OPT_SWITCH || o->kind == OPT_ACTION)
        snprintf(head, sizeof(head), "%s", o->cli.name);
      else
        snprintf(head, sizeof(head), "%s %s", o->cli.name, o->metavar);
      fprintf(out, "  %-28s", head);
      help_wrap(out, o->help);
      if (o->kind == OPT_CHOICE) {
        char allowed[256];
        opt_allowed(o, allowed, sizeof(allowed));
        fprintf(out, "  %-28s", "");
        help_wrap(out, allowed);
      }
      if (o->def != NULL) fprintf(out, "  %-28s (default: %s)\n", "", o->def);
    }
  }
  fprintf(out, "\nScenarios (--list_scenarios tells more):\n");
  size_t n = 0;
  const pd_scenario_info_t *t = pd_scenario_table(&n);
  for (size_t i = 0; i < n; i++)
    fprintf(out, "  %-14s %s%s%s\n", t[i].name, t[i].description, t[i].fix_flag[0] ? "; fix: " : "",
            t[i].fix_flag);
  fprintf(out,
          "\nExit codes:\n"
          "  0  success\n"
          "  1  runtime failure after work started (files of this run are removed)\n"
          "  2  bad flag or value, or an output directory that cannot be written (nothing written)\n"
          "  3  no CUDA device available (nothing written)\n"
          "  4  out of GPU memory (nothing written; try a smaller --batch_size)\n"
          "  130, 143  stopped by SIGINT, SIGTERM: the steps stop, the trace of what was recorded\n"
          "     and a metrics JSON marked \"incomplete\" are written; a second signal quits at once\n"
          "\nExamples:\n"
          "  %s --scenario dataloader --pin_memory --amp\n"
          "  %s --scenario dataloader --pin_memory --amp --num_workers 8     # the fix\n"
          "  %s --scenario tiny_ops --tiny_ops_mode graph\n",
          PD_DEMO_PROG, PD_DEMO_PROG, PD_DEMO_PROG);
}

void pd_demo_print_scenarios(FILE *out) {
  size_t n = 0;
  const pd_scenario_info_t *t = pd_scenario_table(&n);
  for (size_t i = 0; i < n; i++) {
    fprintf(out, "%s\n", t[i].name);
    fprintf(out, "  what:      %s\n", t[i].description);
    fprintf(out, "  planted:   %s\n", t[i].planted);
    fprintf(out, "  signature: %s\n", t[i].signature);
    fprintf(out, "  verdict:   %s\n", bottleneck_text(t[i].expected_verdict));
    if (t[i].fix_flag[0] != '\0') fprintf(out, "  fix:       %s\n", t[i].fix_hint);
    if (i + 1 < n) fprintf(out, "\n");
  }
}

void pd_demo_print_scenario_names(FILE *out) {
  size_t n = 0;
  const pd_scenario_info_t *t = pd_scenario_table(&n);
  for (size_t i = 0; i < n; i++) fprintf(out, "%s\n", t[i].name);
}

void pd_demo_print_version(FILE *out) {
  fprintf(out, "%s %s (CUDA runtime built against %d.%d)\n", PD_DEMO_PROG, PD_VERSION_STRING,
          CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
}
