/* analyze_report.c: runs every analysis on one trace and prints its summary.
 *
 * The step metrics and the verdict come from the profiler core, on the same code path as
 * a live run: pd_metrics_from_trace() for the GPU-side metrics, and, since a trace file
 * holds no host-timed samples, per-step samples derived from the trace itself and passed
 * through pd_metrics_from_samples(): the data wait of a step is the union of its
 * dataloader ranges (pd_range_is_data_wait(): enumerate(DataLoader)#..., as ours and
 * torch name them, or our older DataLoader.wait), and its step time is the
 * ProfilerStep#N range minus that wait, matching profiler_demo's step time (data wait
 * excluded). pd_diagnose() then names the bottleneck.
 */
#include "analyze_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int pd_analysis_run(const pd_trace_t *trace, const pd_trace_info_t *info, const pd_top_opts_t *opts,
                    pd_analysis_t **out) {
  if (out != NULL) *out = NULL;
  if (trace == NULL || out == NULL) return PD_EINVAL;
  pd_analysis_t *a = calloc(1, sizeof(*a));
  if (a == NULL) return PD_ENOMEM;
  a->trace = trace;
  if (info != NULL) a->info = *info;
  else a->info.schema_version = -1;
  pd_metrics_init(&a->metrics);

  /* One linked index for every part of the analysis. */
  pd_trace_index_t ix;
  int rc = pd_trace_index_build(trace, &ix);
  if (rc != 0) {
    pd_analysis_destroy(a);
    return rc;
  }
  rc = an_breakdown_compute(trace, &ix, -1, &a->breakdown);
  if (rc == 0) {
    int mrc = ix.nsteps > 0 ? pd_metrics_from_index(trace, &ix, &a->metrics) : PD_EINVAL;
    if (mrc == 0 && !a->breakdown.whole_trace) {
      size_t n = a->breakdown.nsteps;
      a->step_times_s = malloc(n * sizeof(double));
      a->data_wait_s = malloc(n * sizeof(double));
      if (a->step_times_s == NULL || a->data_wait_s == NULL) {
        rc = PD_ENOMEM;
      } else {
        for (size_t s = 0; s < n; s++) {
          const pd_step_breakdown_t *st = &a->breakdown.steps[s];
          a->data_wait_s[s] = (double)st->data_wait_ns / 1e9;
          a->step_times_s[s] = (double)(st->end_ns - st->start_ns - st->data_wait_ns) / 1e9;
        }
        pd_metrics_from_samples(&a->metrics, a->step_times_s, a->data_wait_s, n);
        pd_diagnose(&a->metrics, a->info.torch ? PD_ADVICE_TORCH : PD_ADVICE_DEMO, &a->verdict);
        a->have_metrics = true;
      }
    } else if (mrc != 0 && mrc != PD_EINVAL) {
      rc = mrc; /* PD_EINVAL only says there is no step range */
    }
  }
  if (rc == 0) rc = an_top_build(trace, &ix, opts, &a->top);
  if (rc == 0) {
    a->ops = pd_op_table_create(PD_GROUP_BY_RANGE);
    if (a->ops == NULL) rc = PD_ENOMEM;
    else if ((rc = pd_op_table_add_index(a->ops, trace, &ix)) == 0) pd_op_table_sort(a->ops, PD_SORT_SELF_CUDA_TIME_TOTAL);
  }
  if (rc == 0) rc = pd_memtl_build(trace, &a->memory);
  pd_trace_index_free(&ix);
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
    fprintf(out, "  no ProfilerStep#N range: no step metrics and no verdict\n");
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
