/* pd_pipeline.h: the one cycle pipeline (model layer, src/model/pipeline.c).
 *
 * Every cycle, recorded live or read back from a file, goes through the same stages in
 * the same order:
 *   collect  the cycle's events, sorted: the profiler's on_trace_ready (capture layer)
 *            or the trace reader (pd_reader.h);
 *   link     the trace file's links (written with the trace) and the index's: launching
 *            call, enclosing op and step of every event;
 *   index    pd_trace_index_build(), one linked view read by every stage below;
 *   metrics  key averages (op tables, added up over the cycles) and the cycle's GPU-side
 *            step metrics;
 *   verdict  per-step samples (host-timed in a live run, or taken from the trace's own
 *            steps) into the step-time metrics, then pd_diagnose();
 *   write    the cycle's trace file (when a path is given), the tables sorted for the
 *            reports and the metrics JSON (pd_metrics_json_write()).
 * profiler_demo (src/cli/profiler_demo/demo_run.c), profile_analyze
 * (src/analyze/analyze_report.c) and the unit tests (on a scripted record source) run
 * it; any later entry point should too, so that every program counts the same way.
 */
#ifndef PD_PIPELINE_H
#define PD_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pd/pd_event.h"
#include "pd/pd_replay.h"
#include "pd/pd_stats.h"
#include "pd/pd_writers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stage a pipeline call failed in (pd_pipeline_t.failed). */
typedef enum {
  PD_PIPE_OK = 0,
  PD_PIPE_WRITE,     /* writing the cycle's trace file */
  PD_PIPE_INDEX,     /* linking and indexing, or adding to the op tables */
  PD_PIPE_METRICS    /* the cycle's step metrics */
} pd_pipe_stage_t;

typedef struct {
  bool kernels;          /* keep the kernel-level table (PD_GROUP_BY_KERNEL) */
  int group_by_stack_n;  /* > 0: keep ops grouped by the N innermost frames */
  bool stacks;           /* keep ops grouped by their whole stack (collapsed stacks) */
  bool steps_required;   /* a cycle without a ProfilerStep#N range fails (PD_EINVAL);
                            else it adds to the tables and leaves the metrics alone */
} pd_pipeline_opts_t;

typedef struct {
  pd_op_table_t *ops;      /* key averages by range over every cycle */
  pd_op_table_t *kernels;  /* kernel-level view; NULL unless opts.kernels */
  pd_op_table_t *by_stack; /* NULL unless opts.group_by_stack_n > 0 */
  pd_op_table_t *stacks;   /* NULL unless opts.stacks */
  pd_metrics_t metrics;    /* GPU-side metrics of the last cycle with steps (NaN: not
                              measured); the step-time ones after pd_pipeline_verdict() */
  bool have_metrics;       /* a cycle with steps went through the metrics stage */
  int cycles;              /* cycles that went through every stage */
  pd_cycle_log_t cycle_log; /* each cycle's replay (--repeat): the verdict reads the savings
                               over all of them (pd_cycle_log_overall) */
  pd_pipe_stage_t failed;  /* the stage of the last failure, PD_PIPE_OK when none */
  bool steps_required;     /* from the options */
} pd_pipeline_t;

/* Sets up the tables opts asks for (NULL opts: the key averages only) and NaN metrics.
 * Returns 0 or PD_ENOMEM (then nothing to free). Free with pd_pipeline_free(). */
int pd_pipeline_init(pd_pipeline_t *pl, const pd_pipeline_opts_t *opts);
/* Frees the tables still owned by pl (a caller may take one and set the field to NULL).
 * NULL is a no-op. */
void pd_pipeline_free(pd_pipeline_t *pl);

/* One collected cycle (events sorted by start) through write (when path != NULL:
 * pd_trace_write_file(path, cycle, meta)), link and index, the op tables and the
 * metrics. ix_out != NULL receives the index for the caller's own analysis (free it with
 * pd_trace_index_free()); it is freed otherwise. Returns 0, or PD_EINVAL/PD_ENOMEM/the
 * writer's code with pl->failed naming the stage (a trace file written before a later
 * stage failed stays on disk; ix_out is then empty). */
int pd_pipeline_add_cycle(pd_pipeline_t *pl, const pd_trace_t *cycle, const char *path,
                          const pd_trace_meta_t *meta, pd_trace_index_t *ix_out);

/* Per-step samples from a trace's own steps (ix->steps, in order), for traces without
 * host-timed samples: the data wait of a step is the union of its data-wait ranges
 * (pd_event_is_data_wait()) clipped to the step, its time the step range minus that
 * wait (profiler_demo's step time excludes the data wait too). On success *step_s and
 * *wait_s hold ix->nsteps values each (malloc'd, the caller frees both; NULL when there
 * is no step). Returns 0, PD_EINVAL or PD_ENOMEM. */
int pd_pipeline_trace_samples(const pd_trace_t *trace, const pd_trace_index_t *ix, double **step_s,
                              double **wait_s);

/* The verdict stage: the step-time metrics from n per-step samples (seconds; either
 * array may be NULL), the savings over all cycles where there are several
 * (pd_cycle_log_overall), then pd_diagnose() with the advice for the program that reads
 * it. */
void pd_pipeline_verdict(pd_pipeline_t *pl, const double *step_s, const double *wait_s, size_t n,
                         pd_advice_t advice, pd_verdict_t *verdict);
/* Sorts the tables for the reports: ops, kernels and by_stack by key, stacks by
 * stacks_key. */
void pd_pipeline_sort(pd_pipeline_t *pl, pd_sort_key_t key, pd_sort_key_t stacks_key);

/* ---- data-wait time ------------------------------------------------------------------------- */

/* A half-open time interval [start_ns, end_ns). */
typedef struct {
  int64_t start_ns, end_ns;
} pd_interval_t;

/* The union of the trace's data-wait ranges (pd_event_is_data_wait(), non-empty ones) as
 * sorted, disjoint intervals. The trace's events must be sorted by start. *out is
 * malloc'd (NULL when there is none); the caller frees it. Returns 0, PD_EINVAL or
 * PD_ENOMEM. */
int pd_data_wait_union(const pd_trace_t *trace, pd_interval_t **out, size_t *n);
/* Time of [start_ns, end_ns) covered by n sorted, disjoint intervals (saturating). */
int64_t pd_interval_overlap_ns(const pd_interval_t *v, size_t n, int64_t start_ns, int64_t end_ns);

#ifdef __cplusplus
}
#endif
#endif /* PD_PIPELINE_H */
