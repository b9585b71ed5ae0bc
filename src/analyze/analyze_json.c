/* analyze_json.c: the analysis as JSON (profile_analyze --json), for scripts and CI.
 *
 * Built as a cJSON tree and written through the one writer (pd_out.h).
 * Times are integer nanoseconds ("_ns") unless a key says otherwise ("_s" for the
 * metrics, as in the metrics JSON); values that were not measured are null. The layout
 * is documented in docs/analyzer.md.
 */
#include "analyze_internal.h"
#include "pd/pd_writers.h"
#include "pd/pd_out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>


/* cJSON_Add* return NULL when out of memory; the builder's flag (pd_json_build_t)
 * collects that. */
static void add_num(pd_json_build_t *c, cJSON *o, const char *k, double v) {
  if (o != NULL) pd_json_check(c, cJSON_AddNumberToObject(o, k, v)); /* NaN prints as null */
}

static void add_bool(pd_json_build_t *c, cJSON *o, const char *k, bool v) {
  if (o != NULL) pd_json_check(c, cJSON_AddBoolToObject(o, k, v));
}

static cJSON *add_obj(pd_json_build_t *c, cJSON *o, const char *k) {
  return o != NULL ? pd_json_check(c, cJSON_AddObjectToObject(o, k)) : NULL;
}

static cJSON *add_arr(pd_json_build_t *c, cJSON *o, const char *k) {
  return o != NULL ? pd_json_check(c, cJSON_AddArrayToObject(o, k)) : NULL;
}

static void add_trace(pd_json_build_t *c, cJSON *root, const char *path, const pd_analysis_t *a) {
  cJSON *t = add_obj(c, root, "trace");
  pd_json_add_string(c, t, "path", path);
  pd_json_add_string(c, t, "writer", a->info.torch ? "torch.profiler" : "kineto-style");
  add_bool(c, t, "gzipped", a->info.gzipped);
  add_num(c, t, "text_bytes", (double)a->info.text_bytes);
  add_num(c, t, "base_time_ns", (double)a->info.base_time_ns);
  add_num(c, t, "read_s", a->info.load_s + a->info.parse_s + a->info.convert_s);
  cJSON *ev = add_obj(c, t, "events");
  for (int k = 0; k < PD_EVENT_KIND_COUNT; k++)
    add_num(c, ev, pd_event_kind_category((pd_event_kind_t)k), (double)a->info.kind_counts[k]);
  add_num(c, t, "skipped_entries", (double)a->info.skipped);
  cJSON *devs = add_arr(c, t, "devices");
  const pd_device_props_t *d = pd_trace_devices(a->trace);
  for (size_t i = 0; i < pd_trace_device_count(a->trace); i++) {
    cJSON *o = pd_json_append_object(c, devs);
    add_num(c, o, "id", d[i].id);
    pd_json_add_string(c, o, "name", d[i].name);
    add_num(c, o, "compute_major", d[i].compute_major);
    add_num(c, o, "compute_minor", d[i].compute_minor);
    add_num(c, o, "sm_count", d[i].num_sms);
    add_num(c, o, "total_global_mem", (double)d[i].total_global_mem);
  }
}

static void add_step(pd_json_build_t *c, cJSON *o, const pd_step_breakdown_t *s) {
  int64_t len = an_span_ns(s->start_ns, s->end_ns);
  add_num(c, o, "step", (double)s->step);
  add_num(c, o, "start_ns", (double)s->start_ns);
  add_num(c, o, "duration_ns", (double)len);
  cJSON *parts = add_obj(c, o, "parts_ns");
  for (int p = 0; p < PD_PART_COUNT; p++) add_num(c, parts, pd_part_name((pd_part_t)p), (double)s->part_ns[p]);
  add_num(c, o, "gpu_busy_ns", (double)s->gpu_busy_ns);
  add_num(c, o, "gpu_utilization", len > 0 ? (double)s->gpu_busy_ns / (double)len : NAN);
  cJSON *idle = add_obj(c, o, "idle_ns");
  for (int k = 0; k < PD_IDLE_COUNT; k++) add_num(c, idle, pd_idle_name((pd_idle_t)k), (double)s->idle_ns[k]);
  add_num(c, o, "data_wait_ns", (double)s->data_wait_ns);
  add_num(c, o, "kernels", (double)s->kernels);
  add_num(c, o, "memcpys", (double)s->memcpys);
  add_num(c, o, "memsets", (double)s->memsets);
  add_num(c, o, "runtime_calls", (double)s->runtime_calls);
  add_num(c, o, "sync_calls", (double)s->sync_calls);
  add_num(c, o, "alloc_calls", (double)s->alloc_calls);
  add_num(c, o, "mem_allocs", (double)s->mem_allocs);
  add_num(c, o, "mem_frees", (double)s->mem_frees);
  add_num(c, o, "mem_alloc_bytes", (double)s->mem_alloc_bytes);
}

static void add_metrics(pd_json_build_t *c, cJSON *root, const pd_analysis_t *a) {
  if (!a->have_metrics) {
    pd_json_check(c, cJSON_AddNullToObject(root, "metrics"));
    if (!a->have_verdict) pd_json_check(c, cJSON_AddNullToObject(root, "verdict"));
    else if (pd_verdict_add_json(root, "verdict", &a->verdict) != 0) c->failed = true;
    return;
  }
  cJSON *m = add_obj(c, root, "metrics");
  size_t nd = 0;
  const pd_metric_desc_t *desc = pd_metric_descs(&nd);
  for (size_t i = 0; i < nd; i++)
    add_num(c, m, desc[i].name, *(const double *)((const char *)&a->metrics + desc[i].offset));
  add_num(c, m, "steps", a->metrics.steps);
  cJSON *st = add_arr(c, root, "step_times_s");
  cJSON *dw = add_arr(c, root, "dataloader_wait_s");
  for (size_t s = 0; s < a->breakdown.nsteps && st != NULL && dw != NULL; s++) {
    if (!cJSON_AddItemToArray(st, pd_json_check(c, cJSON_CreateNumber(a->step_times_s[s])))) c->failed = true;
    if (!cJSON_AddItemToArray(dw, pd_json_check(c, cJSON_CreateNumber(a->data_wait_s[s])))) c->failed = true;
  }
  if (pd_verdict_add_json(root, "verdict", &a->verdict) != 0) c->failed = true;
}

static size_t limited(size_t n, int limit) {
  return limit > 0 && (size_t)limit < n ? (size_t)limit : n;
}

static void add_top(pd_json_build_t *c, cJSON *root, const pd_top_t *top, int limit) {
  static const char *const order_names[] = {"time", "memory", "calls"};
  const pd_top_opts_t *o = an_top_opts(top);
  cJSON *t = add_obj(c, root, "top");
  pd_json_add_string(c, t, "aggregate_by", o->aggregate == PD_AGG_TYPE ? "type" : "name");
  pd_json_add_string(c, t, "order_by", order_names[o->order]);
  add_num(c, t, "min_time_ns", (double)o->min_time_ns);
  add_num(c, t, "device_total_ns", (double)pd_top_device_total_ns(top));
  add_num(c, t, "row_count", (double)pd_top_count(top));
  cJSON *rows = add_arr(c, t, "rows");
  const pd_top_row_t *r = pd_top_rows(top);
  for (size_t i = 0; i < limited(pd_top_count(top), limit); i++) {
    cJSON *x = pd_json_append_object(c, rows);
    pd_json_add_string(c, x, "name", r[i].name);
    pd_json_add_string(c, x, "type", pd_dev_type_name(r[i].type));
    add_num(c, x, "calls", (double)r[i].calls);
    add_num(c, x, "total_ns", (double)r[i].total_ns);
    add_num(c, x, "avg_ns", r[i].calls > 0 ? (double)r[i].total_ns / (double)r[i].calls : NAN);
    add_num(c, x, "min_ns", (double)r[i].min_ns);
    add_num(c, x, "max_ns", (double)r[i].max_ns);
    add_num(c, x, "bytes", (double)r[i].bytes);
    add_num(c, x, "gb_per_s", r[i].bytes > 0 && r[i].total_ns > 0 ? (double)r[i].bytes / (double)r[i].total_ns : NAN);
    add_num(c, x, "pct", r[i].pct);
    add_num(c, x, "cum_pct", r[i].cum_pct);
    pd_json_add_string(c, x, "op", r[i].op);
    add_bool(c, x, "op_varies", r[i].op_varies);
    pd_json_add_string(c, x, "shape", r[i].shape);
    add_bool(c, x, "shape_varies", r[i].shape_varies);
  }
}

static void add_key_averages(pd_json_build_t *c, cJSON *root, const pd_op_table_t *ops, int limit) {
  cJSON *arr = add_arr(c, root, "key_averages");
  const pd_op_stat_t *r = pd_op_table_rows(ops);
  for (size_t i = 0; i < limited(pd_op_table_count(ops), limit); i++) {
    cJSON *x = pd_json_append_object(c, arr);
    pd_json_add_string(c, x, "name", r[i].name);
    add_num(c, x, "calls", (double)r[i].calls);
    add_num(c, x, "self_cpu_time_us", (double)r[i].self_cpu_ns / 1e3);
    add_num(c, x, "cpu_time_us", (double)r[i].cpu_total_ns / 1e3);
    add_num(c, x, "self_cuda_time_us", (double)r[i].self_cuda_ns / 1e3);
    add_num(c, x, "cuda_time_us", (double)r[i].cuda_total_ns / 1e3);
  }
}

static void add_memory(pd_json_build_t *c, cJSON *root, const pd_memtl_t *m) {
  cJSON *o = add_obj(c, root, "memory");
  add_num(c, o, "events", (double)m->npoints);
  add_bool(c, o, "totals_known", m->totals_known);
  bool any = m->npoints > 0;
  add_num(c, o, "peak_bytes", any ? (double)m->peak : NAN);
  add_num(c, o, "peak_t_ns", any ? (double)m->peak_t_ns : NAN);
  add_num(c, o, "low_bytes", any ? (double)m->low : NAN);
  add_num(c, o, "final_bytes", any ? (double)m->final : NAN);
  add_num(c, o, "allocations", (double)m->allocs);
  add_num(c, o, "releases", (double)m->frees);
  add_num(c, o, "allocated_bytes", (double)m->alloc_bytes);
  add_num(c, o, "host_events", (double)m->host_events);
}

static void add_diff(pd_json_build_t *c, cJSON *root, const pd_report_t *r) {
  if (r->diff == NULL) {
    pd_json_check(c, cJSON_AddNullToObject(root, "diff"));
    return;
  }
  cJSON *d = add_obj(c, root, "diff");
  pd_json_add_string(c, d, "a_path", r->path);
  pd_json_add_string(c, d, "b_path", r->diff_path);
  double ta = 0, tb = 0;
  an_diff_totals(r->diff, &ta, &tb);
  add_num(c, d, "a_device_ns_per_step", ta);
  add_num(c, d, "b_device_ns_per_step", tb);
  if (r->b != NULL && r->b->have_metrics) {
    pd_json_add_string(c, d, "b_verdict", pd_bottleneck_name(r->b->verdict.bottleneck));
    add_num(c, d, "b_avg_step_time_s", r->b->metrics.avg_step_time_s);
  }
  cJSON *rows = add_arr(c, d, "rows");
  const pd_diff_row_t *x = pd_diff_rows(r->diff);
  for (size_t i = 0; i < limited(pd_diff_count(r->diff), r->limit); i++) {
    cJSON *o = pd_json_append_object(c, rows);
    pd_json_add_string(c, o, "name", x[i].name);
    pd_json_add_string(c, o, "type", pd_dev_type_name(x[i].type));
    add_num(c, o, "a_calls_per_step", x[i].a_calls);
    add_num(c, o, "b_calls_per_step", x[i].b_calls);
    add_num(c, o, "a_ns_per_step", x[i].a_ns);
    add_num(c, o, "b_ns_per_step", x[i].b_ns);
    add_num(c, o, "delta_ns", x[i].delta_ns);
    add_num(c, o, "delta_pct", x[i].delta_pct);
  }
}

int pd_report_json_write(const char *path, const pd_report_t *r) {
  if (path == NULL || r == NULL || r->a == NULL) return PD_EINVAL;
  const pd_analysis_t *a = r->a;
  pd_json_build_t c = {false};
  cJSON *root = pd_json_check(&c, cJSON_CreateObject());
  add_num(&c, root, "schema_version", PD_ANALYSIS_SCHEMA_VERSION);
  cJSON *tool = add_obj(&c, root, "tool");
  pd_json_add_string(&c, tool, "name", "profile_analyze");
  pd_json_add_string(&c, tool, "version", PD_VERSION_STRING);
  add_trace(&c, root, r->path, a);
  add_metrics(&c, root, a);
  cJSON *steps = add_arr(&c, root, "steps");
  for (size_t s = 0; s < a->breakdown.nsteps; s++) add_step(&c, pd_json_append_object(&c, steps), &a->breakdown.steps[s]);
  if (root != NULL) add_step(&c, add_obj(&c, root, "total"), &a->breakdown.total);
  add_bool(&c, root, "whole_trace_window", a->breakdown.whole_trace);
  add_top(&c, root, a->top, r->limit);
  add_key_averages(&c, root, a->ops, r->limit);
  add_memory(&c, root, &a->memory);
  add_diff(&c, root, r);
  char *text = c.failed ? NULL : cJSON_Print(root);
  cJSON_Delete(root);
  if (text == NULL) return PD_ENOMEM;
  size_t len = strlen(text);
  text[len] = '\n'; /* in place of the NUL: the file ends with a newline */
  int rc = pd_out_write_all(path, 0, text, len + 1);
  free(text);
  return rc;
}
