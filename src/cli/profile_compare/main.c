/* profile_compare: the regression gate's program.
 *
 *   profile_compare CURRENT.json BASELINE.json [--json OUT] [--markdown OUT] [--alpha A]
 *   profile_compare --base RUN.json... --head RUN.json... [--json OUT] [--markdown OUT] [--alpha A]
 *   profile_compare --promote RUN.json... -o BASELINE.json [--commit SHA] [--command TEXT]
 *   profile_compare --slug METRICS.json
 *
 * Exit status: 0 within policy, 1 regression, 2 bad input (missing file, not JSON, wrong
 * schema, different GPU or scenario: explained, nothing compared, nothing written).
 * Output files are written to a temporary name and renamed, so a failure leaves nothing.
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
    "      A/B: runs of a base and a head build made interleaved on one machine, the i-th\n"
    "      base and head runs being round i (scripts/gpu_ab.sh makes them); host and device\n"
    "      times by a paired permutation test over the rounds, counts exactly\n"
    "  profile_compare --promote RUN.json [RUN.json...] -o BASELINE.json\n"
    "                  [--commit SHA] [--command TEXT] [--date ISO8601]\n"
    "      merge runs (or earlier baselines) into a baseline with policy and provenance\n"
    "  profile_compare --slug METRICS.json\n"
    "      print the GPU slug of the file's device (the baselines/<slug>/ folder)\n"
    "  profile_compare --help | --version\n"
    "exit status: 0 within policy, 1 regression, 2 bad input\n";

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

static int cmd_slug(int argc, char **argv) {
  if (argc != 3) return usage_error("--slug takes exactly one metrics JSON");
  char why[1024], slug[256];
  cJSON *doc = NULL;
  if (pd_cmp_doc_load(argv[2], &doc, why, sizeof(why)) != 0) {
    fprintf(stderr, "profile_compare: %s\n", why);
    return EXIT_BAD_INPUT;
  }
  const char *name = cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetObjectItemCaseSensitive(doc, "device"), "name")->valuestring;
  int rc = pd_gpu_slug(name, slug, sizeof(slug));
  if (rc != 0) fprintf(stderr, "profile_compare: %s: device name '%s' gives no slug\n", argv[2], name);
  else printf("%s\n", slug);
  cJSON_Delete(doc);
  return rc != 0 ? EXIT_BAD_INPUT : EXIT_PASS;
}

static int cmd_promote(int argc, char **argv) {
  const char *out = NULL;
  pd_promote_info_t info = {0};
  const char **paths = calloc((size_t)argc, sizeof(*paths));
  cJSON **docs = calloc((size_t)argc, sizeof(*docs));
  size_t n = 0;
  int status = EXIT_BAD_INPUT;
  if (paths == NULL || docs == NULL) {
    fprintf(stderr, "profile_compare: out of memory\n");
    goto done;
  }
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 ? &out
                       : strcmp(a, "--commit") == 0                        ? &info.git_commit
                       : strcmp(a, "--command") == 0                       ? &info.command
                       : strcmp(a, "--date") == 0                          ? &info.date
                                                                           : NULL;
    if (dst != NULL) {
      if (i + 1 >= argc) {
        usage_error("%s needs a value", a);
        goto done;
      }
      *dst = argv[++i];
    } else if (a[0] == '-' && a[1] != '\0') {
      usage_error("unknown option for --promote: %s", a);
      goto done;
    } else {
      paths[n++] = a;
    }
  }
  if (n == 0 || out == NULL) {
    usage_error("--promote needs at least one metrics JSON and -o BASELINE.json");
    goto done;
  }
  char why[1024];
  for (size_t i = 0; i < n; i++) {
    if (pd_cmp_doc_load(paths[i], &docs[i], why, sizeof(why)) != 0) {
      fprintf(stderr, "profile_compare: %s\n", why);
      goto done;
    }
  }
  cJSON *base = NULL;
  int rc = pd_baseline_promote((const cJSON *const *)docs, paths, n, &info, &base, why,
                               sizeof(why));
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
  rc = write_atomic(out, put_text, text);
  free(text);
  if (rc == 0) {
    printf("profile_compare: promoted %zu file%s into %s\n", n, n == 1 ? "" : "s", out);
    status = EXIT_PASS;
  }
done:
  for (size_t i = 0; docs != NULL && i < n; i++) cJSON_Delete(docs[i]);
  free(docs);
  free(paths);
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

static int cmd_compare(int argc, char **argv) {
  const char *json_out = NULL, *md_out = NULL;
  /* files[0..nfiles): positional (CURRENT, BASELINE); or, in A/B, the base runs then
   * the head runs, each list collected after its flag. */
  const char **base = calloc((size_t)argc, sizeof(*base)), **head = calloc((size_t)argc, sizeof(*head));
  const char *files[2] = {NULL, NULL};
  size_t nfiles = 0, nbase = 0, nhead = 0;
  int list = 0; /* 0 positional, 1 after --base, 2 after --head */
  bool quiet = false, ab = false;
  pd_cmp_options_t opt = {.alpha = 0.01};
  int status = EXIT_BAD_INPUT;
  if (base == NULL || head == NULL) {
    fprintf(stderr, "profile_compare: out of memory\n");
    goto out;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0 || strcmp(a, "--markdown") == 0 || strcmp(a, "--alpha") == 0) {
      list = 0;
      if (i + 1 >= argc) {
        usage_error("%s needs a value", a);
        goto out;
      }
      const char *v = argv[++i];
      if (a[2] == 'j') {
        json_out = v;
      } else if (a[2] == 'm') {
        md_out = v;
      } else {
        char *end = NULL;
        errno = 0;
        opt.alpha = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0' || !(opt.alpha > 0.0 && opt.alpha <= 0.5)) {
          usage_error("--alpha must be a number with 0 < alpha <= 0.5, got '%s'", v);
          goto out;
        }
      }
    } else if (strcmp(a, "--base") == 0 || strcmp(a, "--head") == 0) {
      ab = true;
      list = a[2] == 'b' ? 1 : 2;
    } else if (strcmp(a, "--quiet") == 0) {
      list = 0;
      quiet = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      usage_error("unknown option: %s", a);
      goto out;
    } else if (list == 1) {
      base[nbase++] = a;
    } else if (list == 2) {
      head[nhead++] = a;
    } else if (nfiles < 2) {
      files[nfiles++] = a;
    } else {
      usage_error("one CURRENT and one BASELINE file, got a third: %s", a);
      goto out;
    }
  }
  if (ab && nfiles > 0) {
    usage_error("with --base/--head every file follows one of them; '%s' does not", files[0]);
    goto out;
  }
  if (ab && (nbase < 2 || nbase != nhead)) {
    usage_error("--base and --head take one run per round each, the same number, at least 2; got %zu and %zu",
                nbase, nhead);
    goto out;
  }
  if (!ab && nfiles != 2) {
    usage_error("need CURRENT.json and BASELINE.json (or --base RUN.json... --head RUN.json...)");
    goto out;
  }
  /* An output must not overwrite an input: the comparison would destroy its own evidence. */
  for (int o = 0; o < 2; o++) {
    const char *outp = o == 0 ? json_out : md_out;
    if (outp == NULL) continue;
    const char *const *lists[3] = {files, base, head};
    const size_t counts[3] = {nfiles, nbase, nhead};
    for (int l = 0; l < 3; l++)
      for (size_t k = 0; k < counts[l]; k++)
        if (strcmp(lists[l][k], outp) == 0) {
          usage_error("%s %s is also an input; choose another file", o == 0 ? "--json" : "--markdown", outp);
          goto out;
        }
  }
  if (json_out != NULL && md_out != NULL && strcmp(json_out, md_out) == 0) {
    usage_error("--json and --markdown name the same file %s", json_out);
    goto out;
  }

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
  if (!quiet) pd_cmp_report_print(stdout, &rep);
  status = write_reports(&rep, json_out, md_out, status);
  pd_cmp_report_free(&rep);
out:
  free(base);
  free(head);
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

static int run_main(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    fputs(k_usage, stdout);
    return EXIT_PASS;
  }
  if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
    printf("profile_compare %s\n", PD_VERSION_STRING);
    return EXIT_PASS;
  }
  if (argc >= 2 && strcmp(argv[1], "--slug") == 0) return cmd_slug(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--promote") == 0) return cmd_promote(argc, argv);
  return cmd_compare(argc, argv);
}
