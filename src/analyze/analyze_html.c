/* analyze_html.c: the self-contained HTML report (profile_analyze --html).
 *
 * One file with inline CSS and inline SVG charts, no script and nothing fetched from the
 * network, so it opens offline and can be attached to a CI run: the verdict and step
 * metrics, the step-time breakdown as stacked bars (one per step, scaled to the longest
 * step), the GPU busy/idle split as stacked bars, the top device rows as bars, the device
 * memory timeline as a line (at most MEM_BUCKETS min/max pairs, so peaks survive
 * down-sampling), then the tables: breakdown, top rows, key averages and the diff.
 * Every text from the trace goes through html_text(). Written atomically.
 */
#include "analyze_internal.h"

#include "pd/pd_replay.h"
#include "pd/pd_out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const part_colors[PD_PART_COUNT] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                       "#59a14f", "#edc948", "#bab0ac"};
static const char *const busy_color = "#4e79a7";
static const char *const idle_colors[PD_IDLE_COUNT] = {"#e15759", "#f28e2b", "#bab0ac"};

/* Escapes &, <, >, " and ' so trace text can never become markup. */
static void html_text(FILE *f, const char *s) {
  if (s == NULL) return;
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default: fputc(*s, f); break;
    }
  }
}

/* Escaped text cut to width characters. */
static void html_fit(FILE *f, const char *s, int width) {
  char buf[256];
  an_fit(buf, sizeof buf, s, width);
  html_text(f, buf);
}

static const char *const css =
    "body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;"
    "max-width:1200px}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}"
    "table{border-collapse:collapse;font-size:12px;margin:8px 0}"
    "th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap}"
    "th{background:#f4f4f4}td.l,th.l{text-align:left}td.name{text-align:left;max-width:520px;overflow:hidden;"
    "text-overflow:ellipsis}"
    ".verdict{padding:10px 14px;background:#fff4e5;border-left:4px solid #f28e2b;margin:12px 0}"
    ".muted{color:#777;font-size:12px}.legend span{display:inline-block;margin-right:14px;font-size:12px}"
    ".legend i{display:inline-block;width:10px;height:10px;margin-right:4px}"
    "svg text{font-size:11px;fill:#333}";

static void legend_item(FILE *f, const char *color, const char *label) {
  fprintf(f, "<span><i style=\"background:%s\"></i>", color);
  html_text(f, label);
  fputs("</span>", f);
}

/* ---- charts ---------------------------------------------------------------------------------- */

#define CHART_W 900
#define LABEL_W 90
#define BAR_H 18
#define BAR_GAP 6

static void step_label(char *buf, size_t len, const pd_step_breakdown_t *s) {
  if (s->step >= 0) snprintf(buf, len, "step %lld", (long long)s->step);
  else snprintf(buf, len, "trace");
}

/* Stacked bars, one per step: the parts (idle = false) or busy + idle kinds (true). */
static void chart_steps(FILE *f, const pd_breakdown_t *b, bool idle) {
  int64_t longest = 1;
  for (size_t s = 0; s < b->nsteps; s++) {
    int64_t len = an_span_ns(b->steps[s].start_ns, b->steps[s].end_ns);
    if (len > longest) longest = len;
  }
  int h = (int)b->nsteps * (BAR_H + BAR_GAP) + 24;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", CHART_W, h);
  double scale = (double)(CHART_W - LABEL_W - 110) / (double)longest;
  for (size_t s = 0; s < b->nsteps; s++) {
    const pd_step_breakdown_t *st = &b->steps[s];
    int y = (int)s * (BAR_H + BAR_GAP);
    char label[32], dur[32];
    step_label(label, sizeof label, st);
    an_fmt_time(dur, sizeof dur, an_span_ns(st->start_ns, st->end_ns));
    fprintf(f, "<text x=\"0\" y=\"%d\">%s</text>\n", y + 13, label);
    double x = LABEL_W;
    int nparts = idle ? 1 + PD_IDLE_COUNT : PD_PART_COUNT;
    for (int p = 0; p < nparts; p++) {
      int64_t v = idle ? (p == 0 ? st->gpu_busy_ns : st->idle_ns[p - 1]) : st->part_ns[p];
      const char *color = idle ? (p == 0 ? busy_color : idle_colors[p - 1]) : part_colors[p];
      const char *name = idle ? (p == 0 ? "GPU busy" : pd_idle_name((pd_idle_t)(p - 1))) : pd_part_name((pd_part_t)p);
      double w = (double)v * scale;
      if (w <= 0) continue;
      char t[32];
      an_fmt_time(t, sizeof t, v);
      fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>%s %s: %s</title></rect>\n", x,
              y, w, BAR_H, color, label, name, t);
      x += w;
    }
    fprintf(f, "<text x=\"%.2f\" y=\"%d\">%s</text>\n", x + 6, y + 13, dur);
  }
  fputs("</svg>\n", f);
}

/* Horizontal bars for the first rows of the top table. */
static void chart_top(FILE *f, const pd_top_t *top, int limit) {
  size_t n = pd_top_count(top);
  if (limit > 0 && (size_t)limit < n) n = (size_t)limit;
  if (n > 30) n = 30;
  const pd_top_row_t *r = pd_top_rows(top);
  int64_t longest = 1;
  for (size_t i = 0; i < n; i++)
    if (r[i].total_ns > longest) longest = r[i].total_ns;
  const int name_w = 360;
  int h = (int)n * (BAR_H + BAR_GAP) + 8;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", CHART_W, h);
  double scale = (double)(CHART_W - name_w - 110) / (double)longest;
  for (size_t i = 0; i < n; i++) {
    int y = (int)i * (BAR_H + BAR_GAP);
    char t[32];
    an_fmt_time(t, sizeof t, r[i].total_ns);
    fputs("<text x=\"0\" y=\"", f);
    fprintf(f, "%d\">", y + 13);
    html_fit(f, r[i].name, 56);
    fputs("</text>\n", f);
    const char *color = r[i].type == PD_DEV_KERNEL ? part_colors[PD_PART_KERNEL]
                        : r[i].type == PD_DEV_MEMCPY ? part_colors[PD_PART_MEMCPY]
                        : r[i].type == PD_DEV_MEMSET ? part_colors[PD_PART_MEMSET]
                                                     : part_colors[PD_PART_OTHER];
    double w = (double)r[i].total_ns * scale;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>", name_w, y, w > 1 ? w : 1,
            BAR_H, color);
    html_text(f, r[i].name);
    fprintf(f, ": %s, %lld calls</title></rect>\n", t, (long long)r[i].calls);
    fprintf(f, "<text x=\"%.2f\" y=\"%d\">%s", name_w + (w > 1 ? w : 1) + 6, y + 13, t);
    if (!isnan(r[i].pct)) fprintf(f, " (%.1f%%)", r[i].pct);
    fputs("</text>\n", f);
  }
  fputs("</svg>\n", f);
}

#define MEM_BUCKETS 600
#define MEM_W 900
#define MEM_H 240
#define MEM_LEFT 80
#define MEM_BOTTOM 22

/* Live device bytes over time, with step boundaries as dashed lines. */
static void chart_memory(FILE *f, const pd_memtl_t *m, const pd_breakdown_t *b) {
  int64_t t0 = m->points[0].t_ns, t1 = m->points[m->npoints - 1].t_ns;
  if (!b->whole_trace && b->nsteps > 0) {
    if (b->steps[0].start_ns < t0) t0 = b->steps[0].start_ns;
    if (b->steps[b->nsteps - 1].end_ns > t1) t1 = b->steps[b->nsteps - 1].end_ns;
  }
  if (t1 <= t0) t1 = t0 + 1;
  int64_t lo = m->low < 0 ? m->low : 0, hi = m->peak > lo ? m->peak : lo + 1;
  double pw = MEM_W - MEM_LEFT - 10, ph = MEM_H - MEM_BOTTOM - 10;
  double sx = pw / (double)an_span_ns(t0, t1), sy = ph / (double)pd_sub_sat_i64(hi, lo);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", MEM_W, MEM_H);
  fprintf(f, "<rect x=\"%d\" y=\"10\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#ccc\"/>\n", MEM_LEFT, pw, ph);
  char top[32], bottom[32], span[32];
  an_fmt_bytes(top, sizeof top, (double)hi);
  an_fmt_bytes(bottom, sizeof bottom, (double)lo);
  an_fmt_time(span, sizeof span, an_span_ns(t0, t1));
  fprintf(f, "<text x=\"0\" y=\"20\">%s</text><text x=\"0\" y=\"%.0f\">%s</text>\n", top, 10 + ph, bottom);
  fprintf(f, "<text x=\"%d\" y=\"%d\">0</text><text x=\"%.0f\" y=\"%d\" text-anchor=\"end\">%s</text>\n", MEM_LEFT,
          MEM_H - 4, MEM_LEFT + pw, MEM_H - 4, span);
  if (!b->whole_trace) {
    for (size_t s = 0; s < b->nsteps; s++) {
      double x = MEM_LEFT + (double)an_span_ns(t0, b->steps[s].start_ns) * sx;
      fprintf(f, "<line x1=\"%.2f\" y1=\"10\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#999\" stroke-dasharray=\"3,3\"/>\n", x, x,
              10 + ph);
      fprintf(f, "<text x=\"%.2f\" y=\"%d\">#%lld</text>\n", x + 2, 22, (long long)b->steps[s].step);
    }
  }
  /* Step line through min/max per bucket: a sawtooth keeps its teeth. */
  fputs("<polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"1.5\" points=\"", f);
  double y0 = 10 + ph;
  size_t i = 0;
  double prev_y = y0 - (double)(m->points[0].allocated - lo) * sy;
  fprintf(f, "%d,%.2f ", MEM_LEFT, prev_y);
  while (i < m->npoints) {
    int bucket = (int)((double)an_span_ns(t0, m->points[i].t_ns) * sx * MEM_BUCKETS / pw);
    int64_t bmin = m->points[i].allocated, bmax = bmin, last = bmin;
    int64_t bt = m->points[i].t_ns;
    size_t j = i;
    while (j < m->npoints && (int)((double)an_span_ns(t0, m->points[j].t_ns) * sx * MEM_BUCKETS / pw) == bucket) {
      if (m->points[j].allocated < bmin) bmin = m->points[j].allocated;
      if (m->points[j].allocated > bmax) bmax = m->points[j].allocated;
      last = m->points[j].allocated;
      j++;
    }
    double x = MEM_LEFT + (double)an_span_ns(t0, bt) * sx;
    fprintf(f, "%.2f,%.2f ", x, prev_y);
    fprintf(f, "%.2f,%.2f %.2f,%.2f ", x, y0 - (double)(bmax - lo) * sy, x, y0 - (double)(bmin - lo) * sy);
    prev_y = y0 - (double)(last - lo) * sy;
    fprintf(f, "%.2f,%.2f ", x, prev_y);
    i = j;
  }
  fprintf(f, "%.2f,%.2f\"/>\n</svg>\n", MEM_LEFT + pw, prev_y);
}

/* ---- tables ---------------------------------------------------------------------------------- */

static void table_breakdown(FILE *f, const pd_breakdown_t *b) {
  fputs("<table><tr><th class=\"l\">step</th><th>duration</th>", f);
  for (int p = 0; p < PD_PART_COUNT; p++) fprintf(f, "<th>%s</th>", pd_part_name((pd_part_t)p));
  fputs("<th>GPU util</th>", f);
  for (int k = 0; k < PD_IDLE_COUNT; k++) fprintf(f, "<th>idle: %s</th>", pd_idle_name((pd_idle_t)k));
  fputs("<th>data wait</th><th>kernels</th><th>sync calls</th><th>device allocs</th></tr>\n", f);
  for (size_t s = 0; s <= b->nsteps; s++) {
    const pd_step_breakdown_t *st = s < b->nsteps ? &b->steps[s] : &b->total;
    if (s == b->nsteps && b->nsteps < 2) break;
    char label[32], t[32];
    if (s == b->nsteps) snprintf(label, sizeof label, "all");
    else step_label(label, sizeof label, st);
    int64_t len = an_span_ns(st->start_ns, st->end_ns);
    an_fmt_time(t, sizeof t, len);
    fprintf(f, "<tr><td class=\"l\">%s</td><td>%s</td>", label, t);
    for (int p = 0; p < PD_PART_COUNT; p++) {
      an_fmt_time(t, sizeof t, st->part_ns[p]);
      fprintf(f, "<td>%s</td>", t);
    }
    fprintf(f, "<td>%.1f%%</td>", len > 0 ? (double)st->gpu_busy_ns * 100.0 / (double)len : 0.0);
    for (int k = 0; k < PD_IDLE_COUNT; k++) {
      an_fmt_time(t, sizeof t, st->idle_ns[k]);
      fprintf(f, "<td>%s</td>", t);
    }
    an_fmt_time(t, sizeof t, st->data_wait_ns);
    fprintf(f, "<td>%s</td><td>%lld</td><td>%lld</td><td>%lld</td></tr>\n", t, (long long)st->kernels,
            (long long)st->sync_calls, (long long)st->mem_allocs);
  }
  fputs("</table>\n", f);
}

static void table_top(FILE *f, const pd_top_t *top, int limit) {
  size_t n = pd_top_count(top);
  if (limit > 0 && (size_t)limit < n) n = (size_t)limit;
  const pd_top_row_t *r = pd_top_rows(top);
  fputs("<table><tr><th>#</th><th>self time</th><th>%</th><th>cum %</th><th>calls</th><th>avg</th><th>max</th>"
        "<th>bytes</th><th>GB/s</th><th class=\"l\">type</th><th class=\"l\">name</th><th class=\"l\">op</th>"
        "<th class=\"l\">shapes</th></tr>\n",
        f);
  for (size_t i = 0; i < n; i++) {
    char t[32], avg[32], mx[32], by[32];
    an_fmt_time(t, sizeof t, r[i].total_ns);
    an_fmt_time_d(avg, sizeof avg, r[i].calls ? (double)r[i].total_ns / (double)r[i].calls : 0);
    an_fmt_time(mx, sizeof mx, r[i].max_ns);
    an_fmt_bytes(by, sizeof by, (double)r[i].bytes);
    fprintf(f, "<tr><td>%zu</td><td>%s</td>", i + 1, t);
    if (isnan(r[i].pct)) fputs("<td>-</td><td>-</td>", f);
    else fprintf(f, "<td>%.1f%%</td><td>%.1f%%</td>", r[i].pct, r[i].cum_pct);
    fprintf(f, "<td>%lld</td><td>%s</td><td>%s</td>", (long long)r[i].calls, avg, mx);
    if (r[i].bytes > 0 && r[i].total_ns > 0)
      fprintf(f, "<td>%s</td><td>%.2f</td>", by, (double)r[i].bytes / (double)r[i].total_ns);
    else fputs("<td>-</td><td>-</td>", f);
    fprintf(f, "<td class=\"l\">%s</td><td class=\"name\" title=\"", pd_dev_type_name(r[i].type));
    html_text(f, r[i].name);
    fputs("\">", f);
    html_fit(f, r[i].name, 90);
    fputs("</td><td class=\"l\">", f);
    html_text(f, r[i].op ? r[i].op : "-");
    if (r[i].op_varies) fputs(" (+others)", f);
    fputs("</td><td class=\"l\">", f);
    html_fit(f, r[i].shape ? r[i].shape : "", 80);
    if (r[i].shape_varies) fputs(" (+others)", f);
    fputs("</td></tr>\n", f);
  }
  fputs("</table>\n", f);
}

static void table_ops(FILE *f, const pd_op_table_t *ops, int limit) {
  size_t n = pd_op_table_count(ops);
  if (limit > 0 && (size_t)limit < n) n = (size_t)limit;
  const pd_op_stat_t *r = pd_op_table_rows(ops);
  fputs("<table><tr><th class=\"l\">name</th><th>calls</th><th>self CPU</th><th>CPU total</th><th>self CUDA</th>"
        "<th>CUDA total</th></tr>\n",
        f);
  for (size_t i = 0; i < n; i++) {
    char a[32], b[32], c[32], d[32];
    an_fmt_time(a, sizeof a, r[i].self_cpu_ns);
    an_fmt_time(b, sizeof b, r[i].cpu_total_ns);
    an_fmt_time(c, sizeof c, r[i].self_cuda_ns);
    an_fmt_time(d, sizeof d, r[i].cuda_total_ns);
    fputs("<tr><td class=\"name\">", f);
    html_fit(f, r[i].name, 90);
    fprintf(f, "</td><td>%lld</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", (long long)r[i].calls, a, b,
            c, d);
  }
  fputs("</table>\n", f);
}

static void table_diff(FILE *f, const pd_report_t *r) {
  size_t n = pd_diff_count(r->diff);
  if (r->limit > 0 && (size_t)r->limit < n) n = (size_t)r->limit;
  const pd_diff_row_t *x = pd_diff_rows(r->diff);
  double ta, tb;
  an_diff_totals(r->diff, &ta, &tb);
  char a[32], b[32];
  an_fmt_time_d(a, sizeof a, ta);
  an_fmt_time_d(b, sizeof b, tb);
  fputs("<p>A = ", f);
  html_text(f, r->path);
  fputs(", B = ", f);
  html_text(f, r->diff_path);
  fprintf(f, ". Device time per step: A %s, B %s.", a, b);
  if (r->b != NULL && r->b->have_metrics && r->a->have_metrics)
    fprintf(f, " Verdict: A %s, B %s.", pd_bottleneck_name(r->a->verdict.bottleneck),
            pd_bottleneck_name(r->b->verdict.bottleneck));
  fputs("</p>\n<table><tr><th>#</th><th>A per step</th><th>B per step</th><th>change</th><th>change %</th>"
        "<th>A calls</th><th>B calls</th><th class=\"l\">type</th><th class=\"l\">name</th></tr>\n",
        f);
  for (size_t i = 0; i < n; i++) {
    char ca[32], cb[32], cd[32];
    an_fmt_time_d(ca, sizeof ca, x[i].a_ns);
    an_fmt_time_d(cb, sizeof cb, x[i].b_ns);
    an_fmt_time_d(cd, sizeof cd, x[i].delta_ns);
    fprintf(f, "<tr><td>%zu</td><td>%s</td><td>%s</td><td>%s</td>", i + 1, ca, cb, cd);
    if (isnan(x[i].delta_pct)) fputs("<td>new</td>", f);
    else fprintf(f, "<td>%+.1f%%</td>", x[i].delta_pct);
    fprintf(f, "<td>%.1f</td><td>%.1f</td><td class=\"l\">%s</td><td class=\"name\">", x[i].a_calls, x[i].b_calls,
            pd_dev_type_name(x[i].type));
    html_fit(f, x[i].name, 90);
    fputs("</td></tr>\n", f);
  }
  fputs("</table>\n", f);
}

/* One bar per fix with its predicted saving, and the predicted unprofiled step on top: the
 * replay's answer to "how much faster would the step be if I fixed X". */
static void chart_savings(FILE *f, const pd_verdict_t *vd) {
  if (!(vd->predicted_unprofiled_step_us > 0) || vd->nsavings == 0) {
    if (vd->replay_quality >= 0) {
      fputs("<p class=\"muted\">Replay unavailable: ", f);
      html_text(f, vd->replay_why);
      fputs("</p>\n", f);
    }
    return;
  }
  fprintf(f, "<h3>Predicted savings per step (replay, %s", pd_replay_quality_name((pd_replay_quality_t)vd->replay_quality));
  if (vd->replay_why[0] != '\0') {
    fputs(": ", f);
    html_text(f, vd->replay_why);
  }
  fprintf(f, "; step error median %.1f%%, worst %.1f%%)</h3>\n", vd->replay_error_median * 100.0,
          vd->replay_error_max * 100.0);
  const int name_w = 200, n = vd->nsavings + 1;
  const int h = n * (BAR_H + BAR_GAP) + 8;
  const double longest = vd->predicted_unprofiled_step_us;
  const double scale = (double)(CHART_W - name_w - 160) / longest;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", CHART_W, h);
  fprintf(f, "<text x=\"0\" y=\"13\">predicted unprofiled step</text>\n");
  fprintf(f, "<rect x=\"%d\" y=\"0\" width=\"%.2f\" height=\"%d\" fill=\"#888\"><title>", name_w,
          longest * scale, BAR_H);
  html_text(f, vd->replay_cost_model);
  fprintf(f, "</title></rect>\n<text x=\"%.2f\" y=\"13\">%.1f us</text>\n", name_w + longest * scale + 6, longest);
  for (int i = 0; i < vd->nsavings && i < PD_MAX_SAVINGS; i++) {
    const pd_saving_t *sv = &vd->savings[i];
    int y = (i + 1) * (BAR_H + BAR_GAP);
    double w = sv->est_saving_us_per_step * scale;
    fprintf(f, "<text x=\"0\" y=\"%d\">", y + 13);
    html_text(f, sv->cause);
    fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>", name_w, y,
            w > 1 ? w : 1, BAR_H, strcmp(sv->cause, "combined") == 0 ? "#2b8a3e" : "#1c7ed6");
    html_text(f, sv->evidence);
    fprintf(f, "</title></rect>\n<text x=\"%.2f\" y=\"%d\">%.1f us (%.1f%%)</text>\n", name_w + (w > 1 ? w : 1) + 6,
            y + 13, sv->est_saving_us_per_step, sv->est_saving_fraction * 100.0);
  }
  fputs("</svg>\n", f);
}

static void section_metrics(FILE *f, const pd_analysis_t *a) {
  if (!a->have_metrics && !a->have_verdict) {
    fputs("<p class=\"muted\">No ProfilerStep#N range in the trace: no step metrics and no verdict.</p>\n", f);
    return;
  }
  if (!a->have_metrics)
    fputs("<p class=\"muted\">No ProfilerStep#N range in the trace: no step metrics; the verdict replays the whole "
          "trace as one step.</p>\n", f);
  const pd_verdict_t *vd = &a->verdict;
  fprintf(f, "<div class=\"verdict\"><b>Verdict: %s</b>", pd_bottleneck_name(vd->bottleneck));
  if (isfinite(vd->share_of_step) && isfinite(vd->cost_us_per_step))
    fprintf(f, " (%.0f%% of the step, %.1f us per step)", vd->share_of_step * 100.0, vd->cost_us_per_step);
  else if (isfinite(vd->share_of_step))
    fprintf(f, " (%.0f%% of the step)", vd->share_of_step * 100.0);
  fputs("<br>", f);
  html_text(f, vd->evidence);
  if (vd->advice[0] != '\0') {
    fputs("<br><i>Advice:</i> ", f);
    html_text(f, vd->advice);
  }
  if (vd->nfindings > 0) fputs("<ul class=\"findings\">", f);
  for (int i = 0; i < vd->nfindings && i < PD_MAX_FINDINGS; i++) {
    const pd_finding_t *fd = &vd->findings[i];
    fputs("<li><b>", f);
    html_text(f, fd->cause);
    fputs("</b>", f);
    if (isfinite(fd->share_of_step)) fprintf(f, " (%.0f%% of the step)", fd->share_of_step * 100.0);
    fputs(": ", f);
    html_text(f, fd->evidence);
    fputs(" <i>Advice:</i> ", f);
    html_text(f, fd->advice);
    fputs("</li>", f);
  }
  if (vd->nfindings > 0) fputs("</ul>", f);
  fputs("</div>\n", f);
  chart_savings(f, vd);
  if (!a->have_metrics) return;
  fputs("<table><tr><th class=\"l\">metric</th><th>value</th></tr>\n", f);
  size_t nd = 0;
  const pd_metric_desc_t *desc = pd_metric_descs(&nd);
  for (size_t i = 0; i < nd; i++) {
    if (desc[i].kind == PD_METRIC_INFO) continue;
    double v = *(const double *)((const char *)&a->metrics + desc[i].offset);
    if (isnan(v)) fprintf(f, "<tr><td class=\"l\">%s</td><td>n/a</td></tr>\n", desc[i].name);
    else fprintf(f, "<tr><td class=\"l\">%s</td><td>%.6g</td></tr>\n", desc[i].name, v);
  }
  fputs("</table>\n", f);
}

static void write_report(FILE *f, const pd_report_t *r) {
  const pd_analysis_t *a = r->a;
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>profile_analyze: ", f);
  html_text(f, r->path);
  fprintf(f, "</title>\n<style>%s</style></head><body>\n<h1>profile_analyze report</h1>\n<p>Trace <code>", css);
  html_text(f, r->path);
  char size[32];
  an_fmt_bytes(size, sizeof size, (double)a->info.text_bytes);
  fprintf(f, "</code> (%s, %s of JSON%s)</p>\n", a->info.torch ? "torch.profiler" : "Kineto-style", size,
          a->info.gzipped ? ", gzip" : "");
  const pd_device_props_t *d = pd_trace_devices(a->trace);
  for (size_t i = 0; i < pd_trace_device_count(a->trace); i++) {
    fprintf(f, "<p class=\"muted\">device %d: ", d[i].id);
    html_text(f, d[i].name);
    fprintf(f, ", compute capability %d.%d, %d SMs</p>\n", d[i].compute_major, d[i].compute_minor, d[i].num_sms);
  }

  fputs("<h2>Verdict and step metrics</h2>\n", f);
  section_metrics(f, a);

  const pd_breakdown_t *b = &a->breakdown;
  fputs("<h2>Step time breakdown</h2>\n", f);
  if (b->nsteps == 0) {
    fputs("<p class=\"muted\">Empty trace.</p>\n", f);
  } else {
    fputs("<p class=\"muted\">Disjoint parts of each step, by priority", f);
    for (int p = 0; p < PD_PART_COUNT; p++) fprintf(f, "%s%s", p ? " &gt; " : " ", pd_part_name((pd_part_t)p));
    fputs(".</p>\n<div class=\"legend\">", f);
    for (int p = 0; p < PD_PART_COUNT; p++) legend_item(f, part_colors[p], pd_part_name((pd_part_t)p));
    fputs("</div>\n", f);
    chart_steps(f, b, false);
    fputs("<h2>GPU utilization and idle time</h2>\n<div class=\"legend\">", f);
    legend_item(f, busy_color, "GPU busy");
    for (int k = 0; k < PD_IDLE_COUNT; k++) legend_item(f, idle_colors[k], pd_idle_name((pd_idle_t)k));
    fputs("</div>\n", f);
    chart_steps(f, b, true);
    table_breakdown(f, b);
  }

  fputs("<h2>Top device activity</h2>\n", f);
  if (pd_top_count(a->top) == 0) {
    fputs("<p class=\"muted\">No GPU activity matches.</p>\n", f);
  } else {
    chart_top(f, a->top, r->limit);
    table_top(f, a->top, r->limit);
  }

  fputs("<h2>Device memory timeline</h2>\n", f);
  if (a->memory.npoints == 0) {
    fputs("<p class=\"muted\">No device [memory] events in the trace.</p>\n", f);
  } else {
    char peak[32];
    an_fmt_bytes(peak, sizeof peak, (double)a->memory.peak);
    fprintf(f, "<p class=\"muted\">%zu events, %lld allocations, peak %s live (%s).</p>\n", a->memory.npoints,
            (long long)a->memory.allocs, peak,
            a->memory.totals_known ? "from Total Allocated" : "summed from 0: no totals in the trace");
    chart_memory(f, &a->memory, b);
  }

  fputs("<h2>Key averages (host ranges and ops, by self CUDA time)</h2>\n", f);
  table_ops(f, a->ops, r->limit);

  if (r->diff != NULL) {
    fputs("<h2>Diff (device self time per step, B - A)</h2>\n", f);
    table_diff(f, r);
  }
  fprintf(f, "<p class=\"muted\">profile_analyze %s</p>\n</body></html>\n", PD_VERSION_STRING);
}

int pd_report_html_write(const char *path, const pd_report_t *r) {
  if (path == NULL || r == NULL || r->a == NULL) return PD_EINVAL;
  pd_out_t *o = NULL;
  int rc = pd_out_open(path, 0, &o);
  if (rc != 0) return rc;
  write_report(pd_out_stream(o), r);
  return pd_out_commit(o); /* fails if any write did */
}
