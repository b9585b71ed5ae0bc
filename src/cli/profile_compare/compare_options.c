/* compare_options.c: profile_compare's option parser (compare_cli.h). */
#include "compare_cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_common.h"
#include "pd/pd_out.h"

/* Writes one line into err; returns PD_EINVAL. */
static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pd_term_escape_line(err, errlen, line); /* a value with a newline keeps it one line */
  return PD_EINVAL;
}

static int parse_slug(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  c->mode = PD_CCLI_SLUG;
  if (argc != 3) return bad(err, errlen, "--slug takes exactly one metrics JSON");
  c->files[0] = argv[2];
  c->nfiles = 1;
  return 0;
}

static int parse_promote(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  c->mode = PD_CCLI_PROMOTE;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 ? &c->out
                       : strcmp(a, "--commit") == 0                        ? &c->commit
                       : strcmp(a, "--command") == 0                       ? &c->command
                       : strcmp(a, "--date") == 0                          ? &c->date
                                                                           : NULL;
    if (dst != NULL) {
      if (i + 1 >= argc) return bad(err, errlen, "%s needs a value", a);
      *dst = argv[++i];
    } else if (a[0] == '-' && a[1] != '\0') {
      return bad(err, errlen, "unknown option for --promote: %s", a);
    } else {
      c->runs[c->nruns++] = a;
    }
  }
  if (c->nruns == 0 || c->out == NULL)
    return bad(err, errlen, "--promote needs at least one metrics JSON and -o BASELINE.json");
  return 0;
}

static int parse_compare(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  int list = 0; /* 0 positional, 1 after --base, 2 after --head */
  bool ab = false;
  const char *ab_only = NULL; /* an A/B-only option given */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0 || strcmp(a, "--markdown") == 0 || strcmp(a, "--alpha") == 0) {
      list = 0;
      if (i + 1 >= argc) return bad(err, errlen, "%s needs a value", a);
      const char *v = argv[++i];
      if (a[2] == 'j') {
        c->json_out = v;
      } else if (a[2] == 'm') {
        c->md_out = v;
      } else {
        char *end = NULL;
        errno = 0;
        c->alpha = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0' || !(c->alpha > 0.0 && c->alpha <= 0.5))
          return bad(err, errlen, "--alpha must be a number with 0 < alpha <= 0.5, got '%s'", v);
      }
    } else if (strcmp(a, "--keep") == 0 || strcmp(a, "--primary") == 0) {
      list = 0;
      ab_only = a;
      if (i + 1 >= argc) return bad(err, errlen, "%s needs a value", a);
      const char *v = argv[++i];
      if (a[2] == 'p') {
        if (v[0] == '\0') return bad(err, errlen, "--primary needs a metric name");
        c->primary = v;
      } else {
        char *end = NULL;
        errno = 0;
        c->keep = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0' || !(c->keep > 0.0 && c->keep <= 1.0))
          return bad(err, errlen, "--keep must be a share of the runs with 0 < keep <= 1, got '%s'", v);
      }
    } else if (strcmp(a, "--normalize") == 0) {
      list = 0;
      ab_only = a;
      c->normalize = true;
    } else if (strcmp(a, "--base") == 0 || strcmp(a, "--head") == 0) {
      ab = true;
      list = a[2] == 'b' ? 1 : 2;
    } else if (strcmp(a, "--quiet") == 0) {
      list = 0;
      c->quiet = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      return bad(err, errlen, "unknown option: %s", a);
    } else if (list == 1) {
      c->base[c->nbase++] = a;
    } else if (list == 2) {
      c->head[c->nhead++] = a;
    } else if (c->nfiles < 2) {
      c->files[c->nfiles++] = a;
    } else {
      return bad(err, errlen, "one CURRENT and one BASELINE file, got a third: %s", a);
    }
  }
  c->mode = ab ? PD_CCLI_AB : PD_CCLI_COMPARE;
  if (!ab && ab_only != NULL) return bad(err, errlen, "%s is an A/B option (--base ... --head ...)", ab_only);
  if (ab && c->nfiles > 0)
    return bad(err, errlen, "with --base/--head every file follows one of them; '%s' does not", c->files[0]);
  if (ab && (c->nbase < 2 || c->nbase != c->nhead))
    return bad(err, errlen, "--base and --head take one run per round each, the same number, at least 2; got %zu and %zu",
               c->nbase, c->nhead);
  if (!ab && c->nfiles != 2)
    return bad(err, errlen, "need CURRENT.json and BASELINE.json (or --base RUN.json... --head RUN.json...)");
  /* An output must not overwrite an input: the comparison would destroy its own evidence. */
  for (int o = 0; o < 2; o++) {
    const char *outp = o == 0 ? c->json_out : c->md_out;
    if (outp == NULL) continue;
    const char *const *lists[3] = {c->files, c->base, c->head};
    const size_t counts[3] = {c->nfiles, c->nbase, c->nhead};
    for (int l = 0; l < 3; l++)
      for (size_t k = 0; k < counts[l]; k++)
        if (strcmp(lists[l][k], outp) == 0)
          return bad(err, errlen, "%s %s is also an input; choose another file", o == 0 ? "--json" : "--markdown", outp);
  }
  if (c->json_out != NULL && c->md_out != NULL && strcmp(c->json_out, c->md_out) == 0)
    return bad(err, errlen, "--json and --markdown name the same file %s", c->json_out);
  return 0;
}

int pd_compare_cli_parse(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  c->alpha = 0.01;
  if (errlen > 0) err[0] = '\0';
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    c->mode = PD_CCLI_HELP;
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
    c->mode = PD_CCLI_VERSION;
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "--slug") == 0) return parse_slug(argc, argv, c, err, errlen);
  /* each list holds at most every argument */
  const size_t n = argc > 0 ? (size_t)argc : 1;
  c->base = calloc(n, sizeof *c->base);
  c->head = calloc(n, sizeof *c->head);
  c->runs = calloc(n, sizeof *c->runs);
  if (c->base == NULL || c->head == NULL || c->runs == NULL) {
    snprintf(err, errlen, "out of memory");
    return PD_ENOMEM;
  }
  if (argc >= 2 && strcmp(argv[1], "--promote") == 0) return parse_promote(argc, argv, c, err, errlen);
  return parse_compare(argc, argv, c, err, errlen);
}

void pd_compare_cli_free(pd_compare_cli_t *c) {
  if (c == NULL) return;
  free(c->base);
  free(c->head);
  free(c->runs);
  c->base = c->head = c->runs = NULL;
}
