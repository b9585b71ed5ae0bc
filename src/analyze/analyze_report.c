/* analyze_report.c: runs every analysis on one trace and prints its summary.
 *
 * The step metrics and the verdict come from the model's cycle pipeline (pd_pipeline.h),
 * the same stages profiler_demo runs on a live cycle: index, key averages, GPU-side
 * metrics, then the verdict. A trace file holds no host-timed samples, so the per-step
 * samples come from the trace's own steps (pd_pipeline_trace_samples()): the data wait
 * of a step is the union of its dataloader ranges (pd_range_is_data_wait():
 * enumerate(DataLoader)#..., as ours and torch name them, or our older DataLoader.wait),
 * and its step time is the ProfilerStep#N range minus that wait, matching
 * profiler_demo's step time (data wait excluded). pd_diagnose() then names the
 * bottleneck.
 */
#include "analyze_internal.h"

#include "pd/pd_replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_pipeline.h"

void pd_analysis_destroy(pd_analysis_t *a) {
  if (a == NULL) return;
  pd_breakdown_free(&a->breakdown);
  free(a->step_times_s);
  free(a->data_wait_s);
  pd_top_destroy(a->top);
  pd_op_table_destroy(a->ops);
  pd_memtl_free(&a->memory);
  free(a);
}

/* A trace without ProfilerStep#N ranges still gets a verdict: a copy of it with one step
 * range around the whole window, on the thread with the most host events, is measured and
 * replayed (the replay's why says so). Returns 0 (no verdict for a trace with nothing to
 * replay), or PD_ENOMEM. */
static int whole_trace_verdict(const pd_trace_t *trace, pd_analysis_t *a) {
  const pd_event_t *ev = pd_trace_events(trace);
  const size_t n = pd_trace_count(trace);
  if (n == 0) return 0;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  uint32_t pid = 0, tid = 0;
  size_t best = 0, run = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].start_ns < lo) lo = ev[i].start_ns;
    if (ev[i].end_ns > hi) hi = ev[i].end_ns;
  }
  /* the thread with the most host events (a linear count over a sorted copy is not
   * needed: threads are few, count by a small table) */
  enum { NT = 64 };
  uint32_t tp[NT], tt[NT];
  size_t tc[NT], nt = 0;
  for (size_t i = 0; i < n; i++) {
    if (!pd_event_is_host_op(ev[i].kind)) continue;
    size_t k = 0;
    while (k < nt && (tp[k] != ev[i].pid || tt[k] != ev[i].tid)) k++;
    if (k == nt) {
      if (nt == NT) continue;
      tp[nt] = ev[i].pid;
      tt[nt] = ev[i].tid;
      tc[nt++] = 0;
    }
    run = ++tc[k];
    if (run > best) best = run, pid = tp[k], tid = tt[k];
  }
  if (best == 0 || hi <= lo) return 0;
  pd_trace_t *w = pd_trace_create();
  if (w == NULL) return PD_ENOMEM;
  int rc = 0;
  pd_event_t st;
  memset(&st, 0, sizeof st);
  st.kind = PD_EVENT_RANGE;
  st.name = "ProfilerStep#0";
  st.start_ns = lo;
  st.end_ns = hi;
  st.pid = pid;
  st.tid = tid;
  st.u.range.step = 0;
  rc = pd_trace_add(w, &st);
  for (size_t i = 0; i < n && rc == 0; i++) rc = pd_trace_add(w, &ev[i]);
  for (size_t i = 0; i < pd_trace_device_count(trace) && rc == 0; i++)
    rc = pd_trace_add_device(w, &pd_trace_devices(trace)[i]);
  double call, range;
  if (pd_trace_calibration(trace, &call, &range)) pd_trace_set_calibration(w, call, range);
  pd_trace_set_step_range(w, pd_trace_step_range(trace));
  pd_trace_sort(w);
  pd_trace_index_t ix;
  if (rc == 0) rc = pd_trace_index_build(w, &ix);
  if (rc == 0) {
    pd_metrics_t m;
    pd_metrics_init(&m);
    int mrc = pd_metrics_from_index(w, &ix, &m);
    if (mrc == 0) {
      size_t len = strlen(m.replay_why);
      snprintf(m.replay_why + len, sizeof m.replay_why - len, "%s%s", len ? "; " : "",
               "no step markers: the whole trace replayed as one step");
      if (m.replay_quality == PD_REPLAY_EXACT) m.replay_quality = PD_REPLAY_APPROXIMATE;
      pd_diagnose(&m, a->info.torch ? PD_ADVICE_TORCH : PD_ADVICE_DEMO, &a->verdict);
      a->have_verdict = true;
    } else if (mrc == PD_ENOMEM) {
      rc = mrc;
    }
    pd_trace_index_free(&ix);
  }
  pd_trace_destroy(w);
  return rc;
}

int pd_analysis_run(const pd_trace_t *trace, const pd_trace_info_t *info, const pd_top_opts_t *opts,
                    pd_analysis_t **out) {
  if (out != NULL) *out = NULL;
  if (trace == NULL || out == NULL) return PD_EINVAL;
  pd_analysis_t *a = calloc(1, sizeof(*a));
  if (a == NULL) return PD_ENOMEM;
  a->trace = trace;
  if (info != NULL) a->info = *info;
  else a->info.schema_version = -1;

  /* The cycle pipeline: one linked index, the key averages and the step metrics. */
  pd_pipeline_t pl;
  pd_trace_index_t ix;
  int rc = pd_pipeline_init(&pl, NULL);
  if (rc == 0) rc = pd_pipeline_add_cycle(&pl, trace, NULL, NULL, &ix);
  if (rc != 0) {
    pd_pipeline_free(&pl);
    pd_analysis_destroy(a);
    return rc;
  }
  rc = an_breakdown_compute(trace, &ix, -1, &a->breakdown);
  if (rc == 0 && pl.have_metrics) {
    rc = pd_pipeline_trace_samples(trace, &ix, &a->step_times_s, &a->data_wait_s);
    if (rc == 0) {
      pd_pipeline_verdict(&pl, a->step_times_s, a->data_wait_s, ix.nsteps,
                          a->info.torch ? PD_ADVICE_TORCH : PD_ADVICE_DEMO, &a->verdict);
      a->have_metrics = true;
    }
  }
  a->metrics = pl.metrics;
  if (rc == 0 && ix.nsteps == 0) rc = whole_trace_verdict(trace, a);
  if (rc == 0) rc = an_top_build(trace, &ix, opts, &a->top);
  if (rc == 0) {
    pd_pipeline_sort(&pl, PD_SORT_SELF_CUDA_TIME_TOTAL, PD_SORT_SELF_CUDA_TIME_TOTAL);
    a->ops = pl.ops; /* the analysis keeps the key averages */
    pl.ops = NULL;
  }
  if (rc == 0) rc = pd_memtl_build(trace, &a->memory);
  pd_trace_index_free(&ix);
  pd_pipeline_free(&pl);
  if (rc != 0) {
    pd_analysis_destroy(a);
    return rc;
  }
  *out = a;
  return 0;
}

/* Prints a metric the way its unit reads best. */
static void print_metric(FILE *out, const char *name, double v) {
  if (isnan(v)) {
    fprintf(out, "  %-32s n/a\n", name);
    return;
  }
  size_t len = strlen(name);
  if (len > 2 && strcmp(name + len - 2, "_s") == 0) {
    char t[32];
    an_fmt_time_d(t, sizeof t, v * 1e9);
    fprintf(out, "  %-32s %-14.6g (%s)\n", name, v, t);
  } else if (strstr(name, "bytes") != NULL) {
    char b[32];
    an_fmt_bytes(b, sizeof b, v);
    fprintf(out, "  %-32s %-14.6g (%s)\n", name, v, b);
  } else if (strstr(name, "fraction") != NULL) {
    fprintf(out, "  %-32s %-14.4f (%.1f%%)\n", name, v, v * 100.0);
  } else {
    fprintf(out, "  %-32s %.6g\n", name, v);
  }
}

void pd_analysis_print_summary(FILE *out, const pd_analysis_t *a, const char *path) {
  if (out == NULL || a == NULL) return;
  const pd_trace_info_t *in = &a->info;
  char size[32];
  an_fmt_bytes(size, sizeof size, (double)in->text_bytes);
  fprintf(out, "Trace %s\n", path ? path : "(memory)");
  fprintf(out, "  written by %s; %s of JSON%s; read in %.3f s (load %.3f s, parse %.3f s, convert %.3f s)\n",
          in->torch ? "torch.profiler (Kineto)" : "profiler_demo or another Kineto-style writer", size,
          in->gzipped ? " (gzip)" : "", in->load_s + in->parse_s + in->convert_s, in->load_s, in->parse_s,
          in->convert_s);
  fprintf(out, "  events:");
  bool first = true;
  for (int k = 0; k < PD_EVENT_KIND_COUNT; k++) {
    if (in->kind_counts[k] == 0) continue;
    fprintf(out, "%s %zu %s", first ? "" : ",", in->kind_counts[k], pd_event_kind_category((pd_event_kind_t)k));
    first = false;
  }
  if (first) fprintf(out, " none");
  fprintf(out, "; %zu other entries skipped (metadata, flows, other categories)\n", in->skipped);
  const pd_device_props_t *d = pd_trace_devices(a->trace);
  for (size_t i = 0; i < pd_trace_device_count(a->trace); i++) {
    char mem[32];
    an_fmt_bytes(mem, sizeof mem, (double)d[i].total_global_mem);
    fprintf(out, "  device %d: %s, compute capability %d.%d, %d SMs, %s\n", d[i].id, d[i].name, d[i].compute_major,
            d[i].compute_minor, d[i].num_sms, mem);
  }
  const pd_breakdown_t *b = &a->breakdown;
  if (b->whole_trace || b->nsteps == 0) {
    if (!a->have_verdict) {
      fprintf(out, "  no ProfilerStep#N range: no step metrics and no verdict\n");
      return;
    }
    fprintf(out, "  no ProfilerStep#N range: no step metrics; the verdict replays the whole trace as one step\n\n");
    pd_verdict_print(out, &a->verdict);
    return;
  }
  fprintf(out, "  %zu steps: ProfilerStep#%lld .. #%lld\n", b->nsteps, (long long)b->steps[0].step,
          (long long)b->steps[b->nsteps - 1].step);
  if (!a->have_metrics) return;
  fprintf(out, "\nStep metrics (step time = ProfilerStep range minus its data wait; data wait = dataloader ranges)\n");
  size_t nd = 0;
  const pd_metric_desc_t *desc = pd_metric_descs(&nd);
  for (size_t i = 0; i < nd; i++) {
    if (desc[i].kind == PD_METRIC_INFO) continue; /* loss is not in a trace */
    print_metric(out, desc[i].name, *(const double *)((const char *)&a->metrics + desc[i].offset));
  }
  fputc('\n', out);
  pd_verdict_print(out, &a->verdict);
}
