/* profile_compare: the regression gate's program.
 *
 *   profile_compare CURRENT.json BASELINE.json [--json OUT] [--markdown OUT] [--alpha A]
 *   profile_compare --base RUN.json... --head RUN.json... [--json OUT] [--markdown OUT] [--alpha A]
 *                   [--keep F] [--normalize] [--adjust] [--unpaired] [--primary METRIC]
 *   profile_compare --promote RUN.json... -o BASELINE.json [--commit SHA] [--command TEXT]
 *   profile_compare --slug METRICS.json
 *
 * Exit status: 0 within policy, 1 regression, 2 bad input (missing file, not JSON, wrong
 * schema, different GPU or scenario: explained, nothing compared, nothing written), or
 * no verdict for another reason (out of memory, an output that cannot be written): never
 * 1, which a gate reads as a regression.
 * Output files are written to a temporary name and renamed, so a failure leaves nothing.
 * An output named "-" is standard output (one at most); the table then goes to stderr.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"
#include "pd/pd_out.h"

#include "compare_cli.h"

#define EXIT_PASS 0
#define EXIT_REGRESSED 1
#define EXIT_BAD_INPUT 2

static const char k_usage[] =
    "usage:\n"
    "  profile_compare CURRENT.json BASELINE.json [--json OUT] [--markdown OUT] [--alpha A]\n"
    "                  [--quiet]\n"
    "      compare a run's metrics JSON with a baseline of the same GPU model and scenario\n"
    "      --json OUT      also write the table as JSON\n"
    "      --markdown OUT  also write it as Markdown (append to $GITHUB_STEP_SUMMARY)\n"
    "      --alpha A       significance level of the rank tests, 0 < A <= 0.5 (default 0.01)\n"
    "      --quiet         no table on stdout\n"
    "  profile_compare --base RUN.json [RUN.json...] --head RUN.json [RUN.json...]\n"
    "                  [--json OUT] [--markdown OUT] [--alpha A] [--quiet]\n"
    "                  [--keep F] [--normalize] [--adjust] [--unpaired]\n"
    "                  [--primary METRIC]\n"
    "      A/B: runs of a base and a head build made interleaved on one machine, the i-th\n"
    "      base and head runs being round i (scripts/gpu_ab.sh makes them); host and device\n"
    "      times by a paired permutation test over the rounds, counts exactly; each host\n"
    "      row states its minimum detectable effect (mde %, 80% power at alpha)\n"
    "      --keep F        the statistic: mean of the better share F of each side's runs,\n"
    "                      0 < F <= 1 (default 0.5, the better half)\n"
    "      --normalize     host times divided by each run's host_calibration (the launching\n"
    "                      thread's time for a fixed CPU workload), scaled by their median\n"
    "      --adjust        host times adjusted for each run's traced-call cost (the\n"
    "                      profiler's calibration, profiler_cost.calibration.ns_per_cuda_call)\n"
    "                      by analysis of covariance: a process's slow state raises both\n"
    "      --unpaired      a two-sample permutation test over the runs instead of the\n"
    "                      paired one over the rounds (more labellings: 12870 for 8 rounds)\n"
    "      --primary METRIC  only this host metric (e.g. step_time_p10_s) may fail among\n"
    "                      the host rows; the others are reported. 'auto': chosen from\n"
    "                      the runs (untraced steps, the probe, the scenario), said why\n"
    "  profile_compare --promote RUN.json [RUN.json...] -o BASELINE.json\n"
    "                  [--commit SHA] [--command TEXT] [--date ISO8601]\n"
    "      merge runs (or earlier baselines) into a baseline with policy and provenance\n"
    "  profile_compare --slug METRICS.json\n"
    "      print the GPU slug of the file's device (the baselines/<slug>/ folder)\n"
    "  profile_compare --help | --version\n"
    "an OUT or BASELINE.json of - is standard output (one at most); the table then goes to stderr\n"
    "exit status: 0 within policy, 1 regression, 2 bad input or no verdict (out of memory,\n"
    "an output that cannot be written)\n";

/* Prints one line naming the fault, then the usage; returns the bad-input status. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "profile_compare: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n%s", k_usage);
  return EXIT_BAD_INPUT;
}

/* Writes one output through the one output writer (pd_out.h). Inside a batch it is
 * only staged; the batch's commit renames. Prints why it failed, naming the path. */
typedef void (*write_fn)(FILE *out, const void *ctx);
static int write_atomic(const char *path, write_fn fn, const void *ctx) {
  pd_out_t *o = NULL;
  int rc = pd_out_open(path, 0, &o);
  if (rc == 0) {
    fn(pd_out_stream(o), ctx);
    rc = pd_out_commit(o);
  }
  if (rc != 0) fprintf(stderr, "profile_compare: cannot write %s: %s\n", path, pd_strerror(rc));
  return rc;
}

static void put_text(FILE *out, const void *ctx) {
  fputs((const char *)ctx, out);
  fputc('\n', out);
}
static void put_markdown(FILE *out, const void *ctx) {
  pd_cmp_report_write_markdown(out, (const pd_cmp_report_t *)ctx);
}

static int cmd_slug(const pd_compare_cli_t *c) {
  char why[1024], slug[256];
  cJSON *doc = NULL;
  if (pd_cmp_doc_load(c->files[0], &doc, why, sizeof(why)) != 0) {
    fprintf(stderr, "profile_compare: %s\n", why);
    return EXIT_BAD_INPUT;
  }
  const char *name = cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetObjectItemCaseSensitive(doc, "device"), "name")->valuestring;
  int rc = pd_gpu_slug(name, slug, sizeof(slug));
  if (rc != 0) fprintf(stderr, "profile_compare: %s: device name '%s' gives no slug\n", c->files[0], name);
  else printf("%s\n", slug);
  cJSON_Delete(doc);
  return rc != 0 ? EXIT_BAD_INPUT : EXIT_PASS;
}

static int cmd_promote(const pd_compare_cli_t *c) {
  pd_promote_info_t info = {.git_commit = c->commit, .command = c->command, .date = c->date};
  const size_t n = c->nruns;
  cJSON **docs = calloc(n, sizeof(*docs));
  int status = EXIT_BAD_INPUT;
  if (docs == NULL) {
    fprintf(stderr, "profile_compare: out of memory\n");
    return status;
  }
  char why[1024];
  for (size_t i = 0; i < n; i++) {
    if (pd_cmp_doc_load(c->runs[i], &docs[i], why, sizeof(why)) != 0) {
      fprintf(stderr, "profile_compare: %s\n", why);
      goto done;
    }
  }
  cJSON *base = NULL;
  int rc = pd_baseline_promote((const cJSON *const *)docs, c->runs, n, &info, &base, why, sizeof(why));
  if (rc != 0) {
    fprintf(stderr, "profile_compare: cannot promote: %s\n", why);
    goto done;
  }
  char *text = cJSON_Print(base);
  cJSON_Delete(base);
  if (text == NULL) {
    fprintf(stderr, "profile_compare: out of memory printing the baseline\n");
    goto done;
  }
  rc = write_atomic(c->out, put_text, text);
  free(text);
  if (rc == 0) {
    printf("profile_compare: promoted %zu file%s into %s\n", n, n == 1 ? "" : "s", c->out);
    status = EXIT_PASS;
  }
done:
  for (size_t i = 0; i < n; i++) cJSON_Delete(docs[i]);
  free(docs);
  return status;
}

/* Writes the report's --json and --markdown files, all or none (staged, then renamed
 * together). Returns the status to exit with. */
static int write_reports(const pd_cmp_report_t *rep, const char *json_out, const char *md_out, int status) {
  const int status_in = status;
  pd_out_batch_begin();
  if (json_out != NULL) {
    cJSON *j = pd_cmp_report_to_json(rep);
    char *text = j != NULL ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (text == NULL) {
      fprintf(stderr, "profile_compare: out of memory writing %s\n", json_out);
      status = EXIT_BAD_INPUT;
    } else if (write_atomic(json_out, put_text, text) != 0) {
      status = EXIT_BAD_INPUT;
    }
    free(text);
  }
  if (md_out != NULL && status != EXIT_BAD_INPUT && write_atomic(md_out, put_markdown, rep) != 0)
    status = EXIT_BAD_INPUT;
  if (status != status_in) {
    pd_out_batch_abort();
  } else {
    int rc = pd_out_batch_commit();
    if (rc != 0) {
      fprintf(stderr, "profile_compare: cannot write the reports: %s\n", pd_strerror(rc));
      status = EXIT_BAD_INPUT;
    }
  }
  return status;
}

/* Loads n files into docs (all or none). Returns 0 or prints why and returns nonzero. */
static int load_all(const char *const *paths, size_t n, cJSON **docs) {
  char why[1024];
  for (size_t i = 0; i < n; i++) {
    if (pd_cmp_doc_load(paths[i], &docs[i], why, sizeof(why)) != 0) {
      fprintf(stderr, "profile_compare: %s\n", why);
      for (size_t j = 0; j < i; j++) cJSON_Delete(docs[j]);
      return 1;
    }
  }
  return 0;
}

static int cmd_compare(const pd_compare_cli_t *c) {
  const char *const *base = c->base, *const *head = c->head, *const *files = c->files;
  const size_t nbase = c->nbase, nhead = c->nhead;
  const bool ab = c->mode == PD_CCLI_AB;
  pd_cmp_options_t opt = {.alpha = c->alpha, .keep = c->keep, .normalize_host = c->normalize,
                           .adjust_call_cost = c->adjust, .unpaired = c->unpaired, .primary = c->primary};
  int status = EXIT_BAD_INPUT;
  char why[1024];
  pd_cmp_report_t rep;
  int rc;
  if (ab) {
    size_t n = nbase + nhead;
    cJSON **docs = calloc(n, sizeof(*docs));
    const char **names = calloc(n, sizeof(*names));
    if (docs == NULL || names == NULL || load_all(base, nbase, docs) != 0) {
      free(docs);
      free(names);
      goto out;
    }
    if (load_all(head, nhead, docs + nbase) != 0) {
      for (size_t i = 0; i < nbase; i++) cJSON_Delete(docs[i]);
      free(docs);
      free(names);
      goto out;
    }
    for (size_t i = 0; i < n; i++) names[i] = i < nbase ? base[i] : head[i - nbase];
    rc = pd_cmp_ab((const cJSON *const *)docs, nbase, (const cJSON *const *)docs + nbase, nhead, names, &opt, &rep,
                   why, sizeof(why));
    for (size_t i = 0; i < n; i++) cJSON_Delete(docs[i]);
    free(docs);
    free(names);
  } else {
    cJSON *docs[2] = {NULL, NULL};
    if (load_all(files, 2, docs) != 0) goto out;
    opt.current_name = files[0];
    opt.baseline_name = files[1];
    rc = pd_cmp_compare(docs[0], docs[1], &opt, &rep, why, sizeof(why));
    cJSON_Delete(docs[0]);
    cJSON_Delete(docs[1]);
    if (rc == 0) {
      snprintf(rep.current_path, sizeof(rep.current_path), "%s", files[0]);
      snprintf(rep.baseline_path, sizeof(rep.baseline_path), "%s", files[1]);
    }
  }
  if (rc != 0) {
    fprintf(stderr, "profile_compare: %s\n", rc == PD_ENOMEM ? "out of memory" : why);
    pd_cmp_report_free(&rep);
    goto out;
  }
  status = rep.failed ? EXIT_REGRESSED : EXIT_PASS;
  if (!c->quiet) pd_cmp_report_print(stdout, &rep);
  status = write_reports(&rep, c->json_out, c->md_out, status);
  pd_cmp_report_free(&rep);
out:
  return status;
}

static int run_main(int argc, char **argv);

int main(int argc, char **argv) {
  /* Names from the files reach the terminal escaped; temporaries go on SIGINT/SIGTERM. */
  pd_term_guard_t term;
  pd_term_begin(&term);
  pd_out_cleanup_on_signals();
  int status = run_main(argc, argv);
  pd_term_end(&term);
  return status;
}

/* Runs the parsed command; returns the exit status. */
static int dispatch(const pd_compare_cli_t *c) {
  switch (c->mode) {
  case PD_CCLI_HELP:
    fputs(k_usage, stdout);
    return EXIT_PASS;
  case PD_CCLI_VERSION:
    printf("profile_compare %s\n", PD_VERSION_STRING);
    return EXIT_PASS;
  case PD_CCLI_SLUG:
    return cmd_slug(c);
  case PD_CCLI_PROMOTE:
    return cmd_promote(c);
  case PD_CCLI_COMPARE:
  case PD_CCLI_AB:
    break;
  }
  return cmd_compare(c);
}

static int run_main(int argc, char **argv) {
  pd_compare_cli_t c;
  char err[1024];
  int rc = pd_compare_cli_parse(argc, argv, &c, err, sizeof err);
  int status = EXIT_BAD_INPUT;
  if (rc == PD_ENOMEM) {
    fprintf(stderr, "profile_compare: out of memory\n");
  } else if (rc != 0) {
    usage_error("%s", err);
  } else {
    /* An output on "-" takes standard output: the table goes to stderr, and the output is
     * written only when a verdict was reached (exit 0 or 1). */
    bool dash = (c.mode == PD_CCLI_PROMOTE && pd_out_is_stdout(c.out)) ||
                ((c.mode == PD_CCLI_COMPARE || c.mode == PD_CCLI_AB) &&
                 (pd_out_is_stdout(c.json_out) || pd_out_is_stdout(c.md_out)));
    if (dash && pd_out_stdout_begin() != 0)
      fprintf(stderr, "profile_compare: cannot move the report to stderr\n");
    else
      status = dispatch(&c);
    if (dash && pd_out_stdout_end(status != EXIT_BAD_INPUT) != 0 && status != EXIT_BAD_INPUT) {
      fprintf(stderr, "profile_compare: cannot write to standard output\n");
      status = EXIT_BAD_INPUT;
    }
  }
  pd_compare_cli_free(&c);
  return status;
}
