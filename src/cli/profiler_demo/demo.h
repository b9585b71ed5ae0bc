/* demo.h: profiler_demo's config, option parsing, output preparation and run loop,
 * kept in the static library pd_cli_demo so unit tests drive them without a GPU.
 *
 * Order of a run (each failure writes nothing and leaves no directory it made):
 *   parse + validate (exit 2) -> device check (exit 3) -> output dirs (exit 2 when not
 *   writable) -> data pipeline -> model (exit 4 when the GPU is out of memory) -> warmup
 *   -> profiled steps -> console report -> metrics JSON.
 *
 * With --no_profile the same steps run and are timed the same way, but the profiler is
 * never created (no CUPTI call at all) and no trace directory is made: the run is the
 * "without" half of the profiler-overhead measurement (bench/overhead/).
 */
#ifndef PD_CLI_DEMO_H
#define PD_CLI_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_cnn.h"
#include "pd/pd_data.h"
#include "pd/pd_replay.h"
#include "pd/pd_stats.h"
#include "pd/pd_writers.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PD_DEMO_PROG "profiler_demo"
#define PD_DEMO_PATH_MAX 1024
/* Most steps one run takes after its warmup (--steps, --repeat x cycle): the per-step
 * samples are kept, 16 bytes a step. */
#define PD_DEMO_MAX_STEPS 1000000

/* Exit codes, documented in --help. */
enum {
  PD_DEMO_EXIT_OK = 0,
  PD_DEMO_EXIT_RUNTIME = 1, /* a failure after work started; files of this run removed */
  PD_DEMO_EXIT_USAGE = 2,   /* bad flag or value, or an output path that is not writable */
  PD_DEMO_EXIT_NODEV = 3,   /* no CUDA device */
  PD_DEMO_EXIT_OOM = 4      /* out of GPU memory */
  /* 130 / 143: stopped by SIGINT / SIGTERM; the trace of the steps recorded and a
   * metrics JSON marked "incomplete" are written */
};

typedef enum { PD_DEMO_RUN = 0, PD_DEMO_HELP, PD_DEMO_VERSION, PD_DEMO_LIST } pd_demo_action_t;

/* --profile_level */
enum { PD_DEMO_LEVEL_LEAN = 0, PD_DEMO_LEVEL_FULL = 1 };

/* The one config struct: every flag, after defaults and validation. */
typedef struct {
  pd_demo_action_t action;
  /* run */
  int scenario;       /* pd_scenario_t */
  int batch_size;
  bool amp;
  int warmup_steps;
  int profile_steps;
  int wait_steps;     /* schedule wait: unprofiled steps at the start of each cycle */
  int repeat;         /* schedule repeat: cycles to record; 0 = until --steps ends */
  int64_t steps;      /* steps after the warmup; 0 = (wait + 1 + active) x repeat */
  int64_t seed;
  int device;
  /* data pipeline */
  int num_workers; /* PD_KNOB_SCENARIO: the scenario's (pd_scen.h) */
  int prefetch_factor;
  bool persistent_workers;
  bool pin_memory;
  /* profiler and output */
  char trace_dir[PD_DEMO_PATH_MAX];
  char output_json[PD_DEMO_PATH_MAX];
  bool with_stack;
  char export_stacks[PD_DEMO_PATH_MAX]; /* collapsed stacks file; "" none */
  int stacks_metric;  /* pd_sort_key_t: SELF_CUDA or SELF_CPU_TIME_TOTAL */
  int group_by_stack_n; /* 0: off; N: an ops table grouped by N frames */
  bool trace_gzip;    /* NAME.pt.trace.json.gz, gzipped while written (torch's use_gzip) */
  int cupti_buffer_budget_mib; /* most MiB of CUPTI buffers at once; 0 = no limit */
  int top_n;          /* rows of the ops table; 0: all */
  int sort_by;        /* pd_sort_key_t */
  int profile_level;  /* PD_DEMO_LEVEL_*: what CUPTI records */
  bool quiet;
  bool no_profile;    /* same steps without the profiler: host-timed metrics only */
  bool pin_cpu;       /* the launching thread on the fastest CPU (pd_host_pin_fastest) */
  bool warmup_probe;  /* pd_speed_probe after each warmup step */
  bool list_names;    /* --names: --list_scenarios prints the names only */
  /* fix knobs: PD_KNOB_SCENARIO (-1) keeps the scenario's setting */
  bool no_sync;
  int tiny_ops_mode;  /* pd_tiny_mode_t or -1 */
  int tiny_ops_depth; /* >= 1 or -1 */
  int allocator;      /* pd_alloc_mode_t or -1 */
  int churn_buffers;  /* >= 1 or -1 */
  /* testing */
  double inject_slowdown; /* 0..10: the step gets this fraction longer (host busy time
                             before its launches, src/scen/inject.c) */
  bool inject_alternate;  /* inject only in every other recorded step (its acceptance test) */
  double inject_gpu_slowdown; /* 0..10: extra device time, this fraction of the step's
                                 kernel time measured before the profiled steps */
} pd_demo_config_t;

/* Fills cfg with every default (the PRD's: --scenario dataloader, --batch_size 64, ...). */
void pd_demo_config_init(pd_demo_config_t *cfg);

/* The one parse-and-validate entry: fills defaults, reads argv (`--flag value` and
 * `--flag=value`; the last of a repeated flag wins), checks every value and the
 * cross-flag rules. Returns 0, or PD_DEMO_EXIT_USAGE with one line naming the flag and
 * what is allowed written into err (without the program prefix). Does no I/O. */
int pd_demo_config_parse(int argc, char *const argv[], pd_demo_config_t *cfg, char *err, size_t errlen);
/* The cross-flag rules alone (part of pd_demo_config_parse). Same return as above. */
int pd_demo_config_validate(const pd_demo_config_t *cfg, char *err, size_t errlen);

/* Prints the short usage (after an error), the full --help (every flag, grouped, with
 * its default, scenarios, exit codes), the scenario list, and the version line. */
void pd_demo_print_usage(FILE *out);
void pd_demo_print_help(FILE *out);
void pd_demo_print_scenarios(FILE *out);
/* The scenario names of the scenario table, one a line (--list_scenarios --names). */
void pd_demo_print_scenario_names(FILE *out);
void pd_demo_print_version(FILE *out);

/* ---- output paths --------------------------------------------------------------------- */

#define PD_DEMO_MAX_TRACKED 32

/* What this run created, so a failure can take it back. */
typedef struct {
  char dirs[PD_DEMO_MAX_TRACKED][PD_DEMO_PATH_MAX]; /* in creation order */
  int ndirs;
  char files[PD_DEMO_MAX_TRACKED][PD_DEMO_PATH_MAX];
  int nfiles;
} pd_demo_outputs_t;

/* Creates trace_dir and the JSON's parent directory (like mkdir -p, recording what it
 * made) and proves both writable by creating and removing a probe file; with
 * cfg->no_profile only the JSON's parent (no trace is written). Returns 0, or
 * PD_DEMO_EXIT_USAGE with the reason in err; on failure the directories it made are
 * removed again. */
int pd_demo_outputs_prepare(const pd_demo_config_t *cfg, pd_demo_outputs_t *outs, char *err, size_t errlen);
/* Remembers a file this run wrote (trace, JSON) for pd_demo_outputs_rollback(). */
void pd_demo_outputs_track_file(pd_demo_outputs_t *outs, const char *path);
/* Removes the tracked files, then the directories this run made (deepest first; only
 * those left empty). */
void pd_demo_outputs_rollback(pd_demo_outputs_t *outs);

/* ---- the metrics JSON -------------------------------------------------------------------- */

/* What a finished run hands to the metrics JSON; every pointer is borrowed. */
typedef struct {
  const pd_cnn_config_t *cnn_cfg;   /* the model settings the scenario resolved */
  const pd_data_config_t *data_cfg; /* the data pipeline's (cpu_work, io_sleep_ms) */
  const pd_device_info_t *dev;
  const pd_metrics_t *metrics;      /* NaN: not measured (null in the JSON) */
  const double *step_s;             /* per timed step, seconds */
  const double *wait_s;             /* data wait per timed step, seconds */
  const double *period_s;           /* per timed step, its data wait's start to the next's */
  const double *warm_period_s;      /* the same per warmup step after the first */
  const double *warm_step_s;        /* the step time (between the two synchronizes) of the same */
  const double *warm_probe_launch_ns;  /* --warmup_probe: after the same steps (pd_speed_probe); */
  const double *warm_probe_compute_ns; /* NULL without it */
  size_t nwarm;
  size_t nsamples;
  const pd_verdict_t *verdict;      /* NULL: not available (--no_profile), written as null */
  const pd_cycle_log_t *cycles;     /* each cycle's replay (--repeat); NULL: none */
  const pd_op_table_t *ops;         /* sorted; NULL: no top ops (empty array) */
  const pd_op_table_t *kernels;     /* kernel-level view, every row; NULL: none */
  const pd_host_info_t *host;       /* the machine; NULL: written as null */
  const char *const *traces;        /* trace files written */
  size_t ntraces;
  const char *stopped_by;           /* "SIGINT"/"SIGTERM" for a run stopped early, else NULL */
  int64_t steps_done;               /* training steps that ran */
  const pd_prof_cost_t *cost;       /* the profiler's own cost; NULL: none (--no_profile) */
  const pd_host_memory_t *host_memory; /* RSS over the steps; NULL: null */
  const pd_loader_rate_t *loader;      /* the data loader's throughput; NULL: null */
  const struct pd_host_calib_s *host_calibration; /* NULL: null */
} pd_demo_results_t;

/* Writes cfg->output_json atomically from a run's results (schema
 * PD_METRICS_SCHEMA_VERSION): config (plus
 * "no_profile": true for a run without the profiler; profiled runs keep the keys their
 * baselines have), device, metrics, samples, verdict, top ops (cfg->top_n rows), trace
 * files. Returns 0 or the writer's PD_E* code; on failure nothing is left at the path. */
int pd_demo_metrics_write(const pd_demo_config_t *cfg, const pd_demo_results_t *res);

/* ---- the run ---------------------------------------------------------------------------- */

/* Runs the whole demo for a validated config with action PD_DEMO_RUN; prints the report
 * on stdout and errors on stderr. Returns the process exit code (PD_DEMO_EXIT_*). */
int pd_demo_run(const pd_demo_config_t *cfg);

/* main(): parse, then help/version/list or run. Returns the process exit code. */
int pd_demo_main(int argc, char *const argv[]);

#ifdef __cplusplus
}
#endif
#endif /* PD_CLI_DEMO_H */
