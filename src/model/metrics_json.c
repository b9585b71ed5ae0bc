/* metrics_json.c: the run's metrics JSON, schema v3 (docs/formats.md).
 *
 * Built with cJSON, printed with cJSON_Print, written through the one writer (pd_out.h: a
 * temporary beside path, fsync'ed and renamed over it), so a reader (the regression gate, a CI artifact upload) sees
 * either the previous file or the complete new one. Metrics that were not measured
 * (NaN) are written as null rather than as a number nobody measured; numbers are
 * printed by pd_json_format_double(), so each reads back as the same double. Every key of
 * PD_METRICS_MAP is written, in the table's order, so adding a metric is one line there.
 */
#include "pd/pd_writers.h"
#include "pd/pd_host_calib.h"
#include "pd/pd_out.h"
#include "pd/pd_replay.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Numbers go in as raw text from pd_json_format_double(): cJSON's own printer accepts
 * a 15-digit form within an epsilon, which loses the last bit; ours reads back exactly
 * (the regression gate compares these values). */
static cJSON *number_item(double v) {
  char text[64];
  pd_json_format_double(text, sizeof text, v); /* NaN/Inf (not measured) -> null */
  return cJSON_CreateRaw(text);
}

static void add_number(pd_json_build_t *b, cJSON *obj, const char *key, double v) {
  if (obj == NULL) return;
  cJSON *item = pd_json_check(b, number_item(v));
  if (item != NULL && !cJSON_AddItemToObject(obj, key, item)) {
    cJSON_Delete(item);
    b->failed = true;
  }
}

static void add_samples(pd_json_build_t *b, cJSON *root, const char *key, const double *xs, size_t n) {
  cJSON *arr = pd_json_check(b, cJSON_AddArrayToObject(root, key));
  if (arr == NULL || xs == NULL) return;
  for (size_t i = 0; i < n; i++) {
    cJSON *item = number_item(xs[i]);
    if (pd_json_check(b, item) == NULL || !cJSON_AddItemToArray(arr, item)) {
      cJSON_Delete(item);
      b->failed = true;
      return;
    }
  }
}

static void add_config(pd_json_build_t *b, cJSON *root, const pd_run_report_t *r) {
  cJSON *cfg = pd_json_check(b, cJSON_AddObjectToObject(root, "config"));
  if (cfg == NULL || r->config == NULL) return;
  for (size_t i = 0; i < r->nconfig; i++) {
    const pd_cfg_entry_t *e = &r->config[i];
    if (e->key == NULL) continue;
    switch (e->type) {
    case PD_CFG_STRING: pd_json_add_string(b, cfg, e->key, e->s); break;
    case PD_CFG_INT: add_number(b, cfg, e->key, (double)e->i); break;
    case PD_CFG_BOOL: pd_json_check(b, cJSON_AddBoolToObject(cfg, e->key, e->b)); break;
    case PD_CFG_DOUBLE: add_number(b, cfg, e->key, e->d); break;
    }
  }
}

static void add_device(pd_json_build_t *b, cJSON *root, const pd_device_info_t *d) {
  if (d == NULL) {
    pd_json_check(b, cJSON_AddNullToObject(root, "device"));
    return;
  }
  cJSON *dev = pd_json_check(b, cJSON_AddObjectToObject(root, "device"));
  if (dev == NULL) return;
  char cc[32];
  snprintf(cc, sizeof cc, "%d.%d", d->compute_major, d->compute_minor);
  pd_json_add_string(b, dev, "name", d->name);
  pd_json_add_string(b, dev, "compute_capability", cc);
  add_number(b, dev, "sm_count", d->sm_count);
  add_number(b, dev, "total_global_mem", (double)d->total_global_mem);
  add_number(b, dev, "driver", d->driver_version);
  add_number(b, dev, "runtime", d->runtime_version);
  add_number(b, dev, "cupti", d->cupti_version);
}

static void add_host(pd_json_build_t *b, cJSON *root, const pd_host_info_t *h) {
  if (h == NULL) {
    pd_json_check(b, cJSON_AddNullToObject(root, "host"));
    return;
  }
  cJSON *o = pd_json_check(b, cJSON_AddObjectToObject(root, "host"));
  pd_json_add_string(b, o, "name", h->name);
  pd_json_add_string(b, o, "boot_id", h->boot_id);
  pd_json_add_string(b, o, "cpu", h->cpu);
  add_number(b, o, "cpus", h->cpus);
}

/* host_memory: {rss_start_kib, rss_first_cycle_kib, rss_end_kib, rss_peak_kib,
 * heap_start_kib, heap_first_cycle_kib, heap_end_kib, steps, growth_kib}; growth is end minus first cycle (or start without one); null where not
 * measured. */
static void add_host_memory(pd_json_build_t *b, cJSON *root, const pd_host_memory_t *h) {
  if (h == NULL) {
    pd_json_check(b, cJSON_AddNullToObject(root, "host_memory"));
    return;
  }
  cJSON *o = pd_json_check(b, cJSON_AddObjectToObject(root, "host_memory"));
#define KIB(v) ((v) >= 0 ? (double)(v) : NAN)
  add_number(b, o, "rss_start_kib", KIB(h->rss_start_kib));
  add_number(b, o, "rss_first_cycle_kib", KIB(h->rss_first_cycle_kib));
  add_number(b, o, "rss_end_kib", KIB(h->rss_end_kib));
  add_number(b, o, "rss_peak_kib", KIB(h->rss_peak_kib));
  add_number(b, o, "heap_start_kib", KIB(h->heap_start_kib));
  add_number(b, o, "heap_first_cycle_kib", KIB(h->heap_first_cycle_kib));
  add_number(b, o, "heap_end_kib", KIB(h->heap_end_kib));
  add_number(b, o, "steps", (double)h->steps);
  const int64_t from = h->rss_first_cycle_kib >= 0 ? h->rss_first_cycle_kib : h->rss_start_kib;
  add_number(b, o, "growth_kib", from >= 0 && h->rss_end_kib >= 0 ? (double)(h->rss_end_kib - from) : NAN);
#undef KIB
}

/* "data_loader": the loader's throughput (batches per second its threads make, from the
 * time they spent making them) against the steps' demand (one batch per step: 1 / the
 * mean step time), and their ratio. The control group's loader must keep a margin of 2
 * (issue 23); below 1 the steps wait for data. */
static void add_loader(pd_json_build_t *b, cJSON *root, const pd_loader_rate_t *l, double step_s) {
  if (l == NULL) {
    pd_json_check(b, cJSON_AddNullToObject(root, "data_loader"));
    return;
  }
  cJSON *o = pd_json_check(b, cJSON_AddObjectToObject(root, "data_loader"));
  if (o == NULL) return;
  const double fill_s = (double)l->fill_ns * 1e-9;
  const double rate = l->batches > 0 && fill_s > 0 ? (l->workers > 0 ? l->workers : 1) * (double)l->batches / fill_s
                                                   : NAN;
  const double demand = step_s > 0 ? 1.0 / step_s : NAN;
  add_number(b, o, "workers", (double)l->workers);
  add_number(b, o, "batches", (double)l->batches);
  add_number(b, o, "batch_fill_ms", l->batches > 0 ? fill_s * 1e3 / (double)l->batches : NAN);
  add_number(b, o, "throughput_batches_per_s", rate);
  add_number(b, o, "demand_steps_per_s", demand);
  add_number(b, o, "headroom", rate / demand);
}

/* "host_calibration" (pd_host_calib.h): the launching thread's time for a fixed CPU
 * workload at the run's start and end. */
static void add_host_calibration(pd_json_build_t *b, cJSON *root, const pd_host_calib_t *c) {
  if (c == NULL) {
    pd_json_check(b, cJSON_AddNullToObject(root, "host_calibration"));
    return;
  }
  cJSON *o = pd_json_check(b, cJSON_AddObjectToObject(root, "host_calibration"));
  if (o == NULL) return;
  add_number(b, o, "iterations", (double)c->iters);
  add_number(b, o, "repetitions", (double)c->reps);
  add_number(b, o, "start_ns", (double)c->start.wall_ns);
  add_number(b, o, "end_ns", (double)c->end.wall_ns);
  add_number(b, o, "start_cpu_time_ns", (double)c->start.cpu_ns);
  add_number(b, o, "end_cpu_time_ns", (double)c->end.cpu_ns);
  add_number(b, o, "start_cpu", (double)c->start.cpu);
  add_number(b, o, "end_cpu", (double)c->end.cpu);
  /* The launching thread's pin to the fastest CPU (pd_host_pin_fastest), or null. */
  if (c->pin.ncpus <= 0 || c->pin.cpu < 0) {
    pd_json_check(b, cJSON_AddNullToObject(o, "pinned_cpu"));
    return;
  }
  add_number(b, o, "pinned_cpu", (double)c->pin.cpu);
  add_number(b, o, "pin_cpus_timed", (double)c->pin.ncpus);
  add_number(b, o, "pin_fastest_ns", (double)c->pin.fastest_ns);
  add_number(b, o, "pin_median_ns", (double)c->pin.median_ns);
  add_number(b, o, "pin_slowest_ns", (double)c->pin.slowest_ns);
}

/* top_ops (host ranges) and top_kernels (GPU activities by name): the same row fields,
 * totals over the profiled steps ("steps" at the top level divides them). */
static void add_op_rows(pd_json_build_t *b, cJSON *root, const char *key, const pd_op_table_t *table, int limit) {
  cJSON *arr = pd_json_check(b, cJSON_AddArrayToObject(root, key));
  if (arr == NULL || table == NULL) return;
  size_t n = pd_op_table_count(table);
  if (limit > 0 && (size_t)limit < n) n = (size_t)limit;
  const pd_op_stat_t *rows = pd_op_table_rows(table);
  for (size_t i = 0; i < n; i++) {
    cJSON *op = pd_json_append_object(b, arr);
    if (op == NULL) return;
    pd_json_add_string(b, op, "name", rows[i].name);
    if (rows[i].shape != NULL) pd_json_add_string(b, op, "shape", rows[i].shape);
    add_number(b, op, "calls", (double)rows[i].calls);
    add_number(b, op, "self_cuda_time_us", (double)rows[i].self_cuda_ns / 1e3);
    add_number(b, op, "cuda_time_us", (double)rows[i].cuda_total_ns / 1e3);
    add_number(b, op, "self_cpu_time_us", (double)rows[i].self_cpu_ns / 1e3);
    add_number(b, op, "cpu_time_us", (double)rows[i].cpu_total_ns / 1e3);
  }
}

/* One finding or the verdict's own cause: share and cost are null when not a time cost. */
static void add_cost_fields(pd_json_build_t *b, cJSON *o, double share, double cost, const char *evidence,
                            const char *advice) {
  add_number(b, o, "share_of_step", share);
  add_number(b, o, "cost_us_per_step", cost);
  pd_json_add_string(b, o, "evidence", evidence);
  pd_json_add_string(b, o, "advice", advice);
}

int pd_verdict_add_json(cJSON *parent, const char *key, const pd_verdict_t *v) {
  if (parent == NULL || key == NULL || v == NULL) return PD_EINVAL;
  pd_json_build_t b = {false};
  cJSON *o = pd_json_check(&b, cJSON_AddObjectToObject(parent, key));
  if (o == NULL) return PD_ENOMEM;
  pd_json_add_string(&b, o, "bottleneck", pd_bottleneck_name(v->bottleneck));
  pd_json_add_string(&b, o, "rule", v->rule);
  add_cost_fields(&b, o, v->share_of_step, v->cost_us_per_step, v->evidence, v->advice);
  cJSON *arr = pd_json_check(&b, cJSON_AddArrayToObject(o, "findings"));
  for (int i = 0; arr != NULL && i < v->nfindings && i < PD_MAX_FINDINGS; i++) {
    cJSON *f = pd_json_append_object(&b, arr);
    if (f == NULL) break;
    pd_json_add_string(&b, f, "cause", v->findings[i].cause);
    add_cost_fields(&b, f, v->findings[i].share_of_step, v->findings[i].cost_us_per_step,
                    v->findings[i].evidence, v->findings[i].advice);
  }
  /* What each fix would save (the replay), and how far the replay can be trusted. */
  cJSON *sv = pd_json_check(&b, cJSON_AddArrayToObject(o, "savings"));
  for (int i = 0; sv != NULL && i < v->nsavings && i < PD_MAX_SAVINGS; i++) {
    cJSON *f = pd_json_append_object(&b, sv);
    if (f == NULL) break;
    pd_json_add_string(&b, f, "cause", v->savings[i].cause);
    add_number(&b, f, "est_saving_us_per_step", v->savings[i].est_saving_us_per_step);
    add_number(&b, f, "est_saving_fraction", v->savings[i].est_saving_fraction);
    pd_json_add_string(&b, f, "evidence", v->savings[i].evidence);
    pd_json_add_string(&b, f, "advice", v->savings[i].advice);
  }
  cJSON *rp = pd_json_check(&b, cJSON_AddObjectToObject(o, "replay"));
  if (rp != NULL) {
    pd_json_add_string(&b, rp, "status",
               v->replay_quality >= 0 ? pd_replay_quality_name((pd_replay_quality_t)v->replay_quality) : "unavailable");
    pd_json_add_string(&b, rp, "why", v->replay_quality >= 0 ? v->replay_why : "no replay in these metrics");
    pd_json_add_string(&b, rp, "cost_model", v->replay_cost_model);
    add_number(&b, rp, "step_error_median_fraction", v->replay_error_median);
    add_number(&b, rp, "step_error_max_fraction", v->replay_error_max);
    add_number(&b, rp, "replayed_step_us", v->replay_step_us);
    add_number(&b, rp, "predicted_unprofiled_step_us", v->predicted_unprofiled_step_us);
  }
  return b.failed ? PD_ENOMEM : 0;
}

/* "replay_cycles": each cycle's replay where a run recorded several (--repeat): its steps,
 * predicted unprofiled and replayed step, step errors, and every fix's saving per step by
 * name (null where the cycle has none), with the combination's. */
static void add_cycles(pd_json_build_t *b, cJSON *root, const pd_cycle_log_t *log) {
  if (log == NULL || log->n < 2) return;
  cJSON *arr = pd_json_check(b, cJSON_AddArrayToObject(root, "replay_cycles"));
  for (size_t i = 0; arr != NULL && i < log->n; i++) {
    const pd_cycle_savings_t *c = &log->v[i];
    cJSON *o = pd_json_append_object(b, arr);
    if (o == NULL) return;
    add_number(b, o, "steps", (double)c->steps);
    add_number(b, o, "predicted_unprofiled_step_us", c->predicted_unprofiled_step_us);
    add_number(b, o, "replayed_step_us", c->replayed_step_us);
    add_number(b, o, "step_error_median_fraction", c->error_median);
    add_number(b, o, "step_error_max_fraction", c->error_max);
    cJSON *sv = pd_json_check(b, cJSON_AddObjectToObject(o, "savings_us_per_step"));
    for (int f = 0; sv != NULL && f < PD_FIX_COUNT; f++)
      if (f != PD_FIX_PROFILER) add_number(b, sv, pd_fix_name((pd_fix_t)f), c->saving_us[f]);
    if (sv != NULL) add_number(b, sv, "combined", c->combined_us);
  }
}

/* Returns the document, or NULL when out of memory. The caller frees it with cJSON_Delete. */
static cJSON *build_report(const pd_run_report_t *r) {
  pd_json_build_t b = {false};
  cJSON *root = cJSON_CreateObject();
  if (root == NULL) return NULL;
  add_number(&b, root, "schema_version", PD_METRICS_SCHEMA_VERSION);
  cJSON *tool = pd_json_check(&b, cJSON_AddObjectToObject(root, "tool"));
  pd_json_add_string(&b, tool, "name", "profiler_demo");
  pd_json_add_string(&b, tool, "version", PD_VERSION_STRING);
  add_config(&b, root, r);
  add_device(&b, root, r->device);
  add_host(&b, root, r->host);

  cJSON *metrics = pd_json_check(&b, cJSON_AddObjectToObject(root, "metrics"));
  size_t nd = 0;
  const pd_metric_desc_t *descs = pd_metric_descs(&nd);
  for (size_t i = 0; i < nd; i++)
    add_number(&b, metrics, descs[i].name, *(const double *)((const char *)r->metrics + descs[i].offset));
  add_number(&b, root, "steps", r->metrics->steps);
  if (r->stopped_by != NULL) {
    pd_json_check(&b, cJSON_AddBoolToObject(root, "incomplete", 1));
    pd_json_add_string(&b, root, "stopped_by", r->stopped_by);
    add_number(&b, root, "steps_done", (double)r->steps_done);
  }
  add_samples(&b, root, "step_times_s", r->step_times_s, r->nsteps);
  add_samples(&b, root, "dataloader_wait_s", r->dataloader_wait_s, r->nsteps);
  if (r->step_periods_s != NULL) add_samples(&b, root, "step_periods_s", r->step_periods_s, r->nsteps);
  if (r->warmup_periods_s != NULL && r->nwarmup > 0)
    add_samples(&b, root, "warmup_periods_s", r->warmup_periods_s, r->nwarmup);
  if (r->warmup_step_times_s != NULL && r->nwarmup > 0)
    add_samples(&b, root, "warmup_step_times_s", r->warmup_step_times_s, r->nwarmup);
  if (r->warmup_probe_launch_ns != NULL && r->warmup_probe_compute_ns != NULL && r->nwarmup > 0) {
    add_samples(&b, root, "warmup_probe_launch_ns", r->warmup_probe_launch_ns, r->nwarmup);
    add_samples(&b, root, "warmup_probe_compute_ns", r->warmup_probe_compute_ns, r->nwarmup);
  }

  if (r->verdict != NULL) {
    if (pd_verdict_add_json(root, "verdict", r->verdict) != 0) b.failed = true;
  } else {
    pd_json_check(&b, cJSON_AddNullToObject(root, "verdict"));
  }
  add_cycles(&b, root, r->cycles);
  if (r->cost != NULL) {
    cJSON *cost = pd_json_check(&b, pd_prof_cost_to_json(r->cost, r->metrics->avg_step_time_s));
    if (cost != NULL && !cJSON_AddItemToObject(root, "profiler_cost", cost)) {
      cJSON_Delete(cost);
      b.failed = true;
    }
  } else {
    pd_json_check(&b, cJSON_AddNullToObject(root, "profiler_cost"));
  }
  add_host_memory(&b, root, r->host_memory);
  add_loader(&b, root, r->loader, r->metrics->avg_step_time_s);
  add_host_calibration(&b, root, r->host_calibration);
  add_op_rows(&b, root, "top_ops", r->top_ops, r->top_ops_limit);
  /* Whether top_ops holds every op: the gate reads an op missing from a cut table as
   * "not known", not as gone (gate_explain.c). top_kernels is always whole. */
  pd_json_check(&b, cJSON_AddBoolToObject(root, "top_ops_complete",
                                  r->top_ops_limit <= 0 || r->top_ops == NULL ||
                                      pd_op_table_count(r->top_ops) <= (size_t)r->top_ops_limit));
  add_op_rows(&b, root, "top_kernels", r->top_kernels, 0);
  cJSON *files = pd_json_check(&b, cJSON_AddArrayToObject(root, "trace_files"));
  for (size_t i = 0; files != NULL && r->trace_files != NULL && i < r->ntrace_files; i++) {
    if (r->trace_files[i] == NULL) continue;
    cJSON *s = pd_json_check(&b, cJSON_CreateString(r->trace_files[i]));
    if (s != NULL && !cJSON_AddItemToArray(files, s)) {
      cJSON_Delete(s);
      b.failed = true;
    }
  }
  if (b.failed) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

int pd_metrics_json_write(const char *path, const pd_run_report_t *report) {
  if (path == NULL || path[0] == 0 || report == NULL || report->metrics == NULL) return PD_EINVAL;
  cJSON *root = build_report(report);
  if (root == NULL) return PD_ENOMEM;
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (text == NULL) return PD_ENOMEM;
  /* The one output writer: temporary, fsync, rename; "\n" ends the file. */
  size_t len = strlen(text);
  text[len] = '\n';
  int rc = pd_out_write_all(path, 0, text, len + 1);
  cJSON_free(text);
  return rc;
}
