/* profile_analyze: reads a trace (ours or torch.profiler's, plain or gzipped) and prints
 * where the time went, in the spirit of MegEngine's profile_analyze.
 *
 *   profile_analyze TRACE [-t N] [--aggregate-by name|type] [--order-by time|memory|calls]
 *                   [--min-time S] [--type NAME] [--breakdown] [--html OUT.html]
 *                   [--diff OTHER_TRACE] [--json OUT] [--group_by_stack_n N]
 *                   [--export_stacks FILE [--stacks_metric self_cuda_time_total|self_cpu_time_total]]
 *
 * Exit status: 0 ok; 2 bad input (a bad flag or value, a missing or unreadable trace, not
 * JSON, not a Chrome trace): one line naming the fault and a synopsis line on stderr,
 * nothing written; 1 any other failure (out of memory, an output that cannot be written,
 * which is then left absent). Every input is read and checked before any output is made.
 * An output named "-" is standard output (one at most); the tables then go to stderr.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd/pd_analyze.h"
#include "pd/pd_out.h"
#include "pd/pd_common.h"
#include "pd/pd_stats.h"

#include "analyze_cli.h"

#define EXIT_OK 0
#define EXIT_FAILURE_ 1
#define EXIT_BAD_INPUT 2

static const char k_synopsis[] =
    "usage: profile_analyze TRACE [-t N] [--aggregate-by name|type] [--order-by time|memory|calls] "
    "[--min-time S] [--type NAME] [--breakdown] [--html OUT.html] [--diff OTHER_TRACE] [--json OUT] "
    "[--group_by_stack_n N] [--export_stacks FILE] [--stacks_metric METRIC] (--help explains)\n";

static const char k_help[] =
    "usage: profile_analyze TRACE [options]\n"
    "\n"
    "Reads a Chrome trace (profiler_demo's *.pt.trace.json or torch.profiler's, plain or\n"
    "gzipped) and prints the device top table, the step metrics and the verdict.\n"
    "\n"
    "  -t, --top N              rows of each table, N >= 1 (default 10)\n"
    "  --aggregate-by name|type rows per kernel/copy name or per type (kernel, memcpy,\n"
    "                           memset, range) (default name)\n"
    "  --order-by time|memory|calls\n"
    "                           device self time, bytes moved or calls (default time)\n"
    "  --min-time S             keep only activities that ran at least S seconds (default 0)\n"
    "  --type NAME              keep one type (kernel, memcpy, memset, range), or rows whose\n"
    "                           name or launching op contains NAME (default: all)\n"
    "  --breakdown              also print the step-time breakdown, GPU idle split, memory\n"
    "                           timeline and key averages table\n"
    "  --html OUT.html          write a self-contained HTML report (inline SVG charts)\n"
    "  --diff OTHER_TRACE       compare device self time per step with a second trace\n"
    "  --json OUT               write the analysis as JSON\n"
    "  --group_by_stack_n N     also print key averages grouped by the N innermost frames of\n"
    "                           each op's \"Call stack\" (torch's key_averages(group_by_stack_n=N));\n"
    "                           1 <= N <= 100; the trace must carry stacks (with_stack)\n"
    "  --export_stacks FILE     write collapsed stacks (frame;frame;op value_us) for\n"
    "                           flamegraph.pl, inferno and speedscope (torch's export_stacks)\n"
    "  --stacks_metric METRIC   self_cuda_time_total or self_cpu_time_total, the value\n"
    "                           --export_stacks writes (default self_cuda_time_total)\n"
    "  -h, --help               this text\n"
    "  --version                the version\n"
    "\n"
    "An OUT or FILE of - is standard output (one at most); the tables then go to stderr.\n"
    "exit status: 0 ok, 1 failure, 2 bad input\n";

/* Prints one line naming the fault and the synopsis; returns the bad-input status. */
static int bad_input(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_input(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "profile_analyze: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n%s", k_synopsis);
  return EXIT_BAD_INPUT;
}

/* Fills *o from argv (analyze_options.c); returns -1 to go on, or the exit status (help,
 * version, bad input). */
static int parse_options(int argc, char **argv, pd_analyze_cli_t *o) {
  char err[1024];
  switch (pd_analyze_cli_parse(argc, argv, o, err, sizeof err)) {
  case PD_ACLI_HELP:
    fputs(k_help, stdout);
    return EXIT_OK;
  case PD_ACLI_VERSION:
    printf("profile_analyze %s\n", PD_VERSION_STRING);
    return EXIT_OK;
  case PD_ACLI_RUN:
    return -1;
  default:
    return bad_input("%s", err);
  }
}

/* ---- progress line ------------------------------------------------------------------------ */

/* Files this large get a progress line while they are read (when stderr is a terminal):
 * at ~250 MB/s that is half a second and more of silence otherwise. */
#define PROGRESS_MIN_BYTES 100000000ULL
#define PROGRESS_EVERY_S 0.25

typedef struct {
  const char *path;
  double next_s; /* elapsed time of the next update */
  bool shown;    /* a line is on the terminal */
} progress_t;

/* The process's own stderr, for the progress line's control sequences: stdout and
 * stderr themselves escape control characters (pd_term_stream). */
static FILE *g_raw_err;

/* pd_trace_progress_cb: rewrites one line with bytes read, events and rate; on done,
 * leaves a final line when one was shown. */
static void progress_print(const pd_trace_progress_t *pr, void *user) {
  progress_t *pg = user;
  bool large = pr->file_bytes > PROGRESS_MIN_BYTES || pr->text_bytes > PROGRESS_MIN_BYTES;
  if (!large || (!pr->done && pr->elapsed_s < pg->next_s) || (pr->done && !pg->shown)) return;
  pg->next_s = pr->elapsed_s + PROGRESS_EVERY_S;
  double mb = (double)pr->text_bytes / 1e6;
  double pct = pr->file_bytes > 0 ? 100.0 * (double)pr->file_read / (double)pr->file_bytes : 100.0;
  double rate = pr->elapsed_s > 0 ? mb / pr->elapsed_s : 0.0;
  /* \r and erase-to-end-of-line: the line is redrawn in place */
  char name[512];
  fflush(stderr);
  fprintf(g_raw_err, "\r\033[Kprofile_analyze: %s %s: %.0f%% of the file, %.1f MB of JSON, %zu events, %.0f MB/s%s",
          pr->done ? "read" : "reading", pd_term_escape(name, sizeof name, pg->path), pct, mb, pr->events, rate,
          pr->done ? "\n" : "");
  fflush(g_raw_err);
  pg->shown = !pr->done;
}

/* Reads one trace; returns 0 or the exit status. */
static int load(const char *path, pd_trace_t **trace, pd_trace_info_t *info) {
  char err[1024];
  *trace = pd_trace_create();
  if (*trace == NULL) {
    fprintf(stderr, "profile_analyze: out of memory\n");
    return EXIT_FAILURE_;
  }
  progress_t pg = {.path = path};
  bool tty = isatty(STDERR_FILENO) == 1;
  int rc = pd_trace_read_file_progress(path, *trace, info, tty ? progress_print : NULL, &pg, err, sizeof err);
  if (pg.shown) { /* a failed read: clear the line before the message */
    fputs("\r\033[K", g_raw_err);
    fflush(g_raw_err);
  }
  if (rc == PD_ENOMEM) {
    fprintf(stderr, "profile_analyze: %s\n", err);
    return EXIT_FAILURE_;
  }
  if (rc != 0) return bad_input("%s", err);
  return 0;
}

/* The key averages grouped by n stack frames (PD_STACK_ALL_FRAMES: whole stacks) of the
 * trace's ops, sorted by key. Returns 0, or the exit status: bad input when no op of the
 * trace carries a call stack. */
static int stack_table(const pd_trace_t *trace, const char *path, const char *flag, int n, pd_sort_key_t key,
                       pd_op_table_t **out) {
  *out = pd_op_table_create(PD_GROUP_BY_RANGE);
  int rc = *out == NULL ? PD_ENOMEM : pd_op_table_set_group_by_stack(*out, n);
  if (rc == 0) rc = pd_op_table_add_trace(*out, trace);
  if (rc != 0) {
    fprintf(stderr, "profile_analyze: %s: %s\n", flag, pd_strerror(rc));
    return EXIT_FAILURE_;
  }
  if (pd_op_table_stack_rows(*out) == 0)
    return bad_input("%s: no op in '%s' carries a \"Call stack\" (record with profiler_demo --with_stack or "
                     "torch.profiler's with_stack=True)",
                     flag, path);
  pd_op_table_sort(*out, key);
  return 0;
}

static int run(const pd_analyze_cli_t *o) {
  pd_trace_t *ta = NULL, *tb = NULL;
  pd_trace_info_t ia, ib;
  pd_analysis_t *a = NULL, *b = NULL;
  pd_diff_t *diff = NULL;
  pd_op_table_t *by_stack = NULL, *stacks = NULL;
  int status = load(o->trace, &ta, &ia);
  if (status == 0 && o->diff != NULL) status = load(o->diff, &tb, &ib);
  if (status == 0 && o->group_by_stack_n > 0)
    status = stack_table(ta, o->trace, "--group_by_stack_n", o->group_by_stack_n, PD_SORT_SELF_CUDA_TIME_TOTAL,
                         &by_stack);
  if (status == 0 && o->export_stacks != NULL)
    status = stack_table(ta, o->trace, "--export_stacks", PD_STACK_ALL_FRAMES, o->stacks_metric, &stacks);
  if (status == 0) {
    int rc = pd_analysis_run(ta, &ia, &o->opts, &a);
    if (rc == 0 && tb != NULL) rc = pd_analysis_run(tb, &ib, &o->opts, &b);
    if (rc == 0 && b != NULL)
      rc = pd_diff_build(a->top, a->have_metrics ? a->metrics.steps : 0, b->top, b->have_metrics ? b->metrics.steps : 0,
                         &diff);
    if (rc != 0) {
      fprintf(stderr, "profile_analyze: analysis failed: %s\n", pd_strerror(rc));
      status = EXIT_FAILURE_;
    }
  }
  if (status == 0) {
    pd_analysis_print_summary(stdout, a, o->trace);
    fputc('\n', stdout);
    pd_top_print(stdout, a->top, o->top);
    if (o->breakdown) {
      fputc('\n', stdout);
      pd_breakdown_print(stdout, &a->breakdown);
      fputc('\n', stdout);
      pd_memtl_print(stdout, &a->memory, &a->breakdown);
      fprintf(stdout, "\nKey averages (host ranges and ops; sorted by self CUDA time)\n");
      pd_op_table_print(stdout, a->ops, o->top);
    }
    if (by_stack != NULL) {
      fprintf(stdout, "\nKey averages by call site (group_by_stack_n=%d; sorted by self CUDA time)\n",
              o->group_by_stack_n);
      pd_op_table_print(stdout, by_stack, o->top);
    }
    if (diff != NULL) {
      fprintf(stdout, "\nA = %s\nB = %s", o->trace, o->diff);
      if (a->have_metrics && b->have_metrics) {
        fprintf(stdout, "\n  avg step time: A %.3f ms, B %.3f ms; verdict: A %s, B %s",
                a->metrics.avg_step_time_s * 1e3, b->metrics.avg_step_time_s * 1e3,
                pd_bottleneck_name(a->verdict.bottleneck), pd_bottleneck_name(b->verdict.bottleneck));
      }
      const pd_step_breakdown_t *ta_ = &a->breakdown.total, *tb_ = &b->breakdown.total;
      if (a->breakdown.nsteps > 0 && b->breakdown.nsteps > 0) {
        int64_t la = ta_->end_ns - ta_->start_ns, lb = tb_->end_ns - tb_->start_ns;
        fprintf(stdout, "\n  GPU busy: A %.1f%%, B %.1f%%; GPU idle waiting for the host: A %.1f%%, B %.1f%% of the time",
                la > 0 ? 100.0 * (double)ta_->gpu_busy_ns / (double)la : 0.0,
                lb > 0 ? 100.0 * (double)tb_->gpu_busy_ns / (double)lb : 0.0,
                la > 0 ? 100.0 * (double)ta_->idle_ns[PD_IDLE_HOST_WAIT] / (double)la : 0.0,
                lb > 0 ? 100.0 * (double)tb_->idle_ns[PD_IDLE_HOST_WAIT] / (double)lb : 0.0);
      }
      fputc('\n', stdout);
      pd_diff_print(stdout, diff, o->top);
    }
    fflush(stdout);
    pd_report_t rep = {.path = o->trace, .a = a, .diff_path = o->diff, .b = b, .diff = diff, .limit = o->top};
    /* All outputs or none: both are staged complete, then renamed together. */
    pd_out_batch_begin();
    if (o->html != NULL) {
      int rc = pd_report_html_write(o->html, &rep);
      if (rc != 0) {
        fprintf(stderr, "profile_analyze: cannot write %s: %s\n", o->html, pd_strerror(rc));
        status = EXIT_FAILURE_;
      }
    }
    if (status == 0 && o->json != NULL) {
      int rc = pd_report_json_write(o->json, &rep);
      if (rc != 0) {
        fprintf(stderr, "profile_analyze: cannot write %s: %s\n", o->json, pd_strerror(rc));
        status = EXIT_FAILURE_;
      }
    }
    if (status != 0) {
      pd_out_batch_abort();
    } else {
      int rc = pd_out_batch_commit();
      if (rc != 0) {
        fprintf(stderr, "profile_analyze: cannot write the reports: %s\n", pd_strerror(rc));
        status = EXIT_FAILURE_;
      }
    }
    if (status == 0 && stacks != NULL) {
      int64_t lines = pd_op_table_export_stacks_file(stacks, o->export_stacks, o->stacks_metric);
      if (lines < 0) {
        fprintf(stderr, "profile_analyze: cannot write %s: %s\n", o->export_stacks, pd_strerror((int)lines));
        status = EXIT_FAILURE_;
        if (o->html != NULL && !pd_out_is_stdout(o->html)) remove(o->html);
        if (o->json != NULL && !pd_out_is_stdout(o->json)) remove(o->json);
      } else {
        fprintf(stdout, "Stacks: %s (%lld stacks by %s)\n", o->export_stacks, (long long)lines,
                o->stacks_metric == PD_SORT_SELF_CPU_TIME_TOTAL ? "self_cpu_time_total" : "self_cuda_time_total");
      }
    }
  }
  pd_op_table_destroy(by_stack);
  pd_op_table_destroy(stacks);
  pd_diff_destroy(diff);
  pd_analysis_destroy(a);
  pd_analysis_destroy(b);
  pd_trace_destroy(ta);
  pd_trace_destroy(tb);
  return status;
}

/* Checks that each output can be written before the (possibly long) read. */
static int probe_outputs(const pd_analyze_cli_t *o) {
  const char *outputs[] = {o->html, o->json};
  const char *flags[] = {"--html", "--json"};
  for (size_t i = 0; i < 2; i++) {
    if (outputs[i] == NULL) continue;
    int rc = pd_out_probe(outputs[i]);
    if (rc != 0) return bad_input("%s '%s': cannot write there: %s", flags[i], outputs[i], pd_strerror(rc));
  }
  return -1;
}

int main(int argc, char **argv) {
  /* Names from traces reach the terminal escaped; temporaries go on SIGINT/SIGTERM. */
  g_raw_err = stderr;
  pd_term_guard_t term;
  pd_term_begin(&term);
  pd_out_cleanup_on_signals();
  pd_analyze_cli_t o;
  int status = parse_options(argc, argv, &o);
  if (status < 0) status = probe_outputs(&o);
  /* An output on "-" takes standard output: the tables go to stderr, and the output is
   * written only when the whole run succeeded. */
  bool dash = false;
  if (status < 0) dash = pd_out_is_stdout(o.html) || pd_out_is_stdout(o.json) || pd_out_is_stdout(o.export_stacks);
  if (dash && pd_out_stdout_begin() != 0) {
    fprintf(stderr, "profile_analyze: cannot move the report to stderr\n");
    status = EXIT_FAILURE_;
  }
  if (status < 0) status = run(&o);
  if (dash && pd_out_stdout_end(status == EXIT_OK) != 0 && status == EXIT_OK) {
    fprintf(stderr, "profile_analyze: cannot write to standard output\n");
    status = EXIT_FAILURE_;
  }
  pd_term_end(&term);
  return status;
}
