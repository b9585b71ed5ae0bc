/* test_docs_versions.c: README.md and the pages in docs/ against the one constant of each version
 * they name: PD_VERSION_STRING (what --version and --help print), PD_METRICS_SCHEMA_VERSION
 * (the metrics JSON and baselines) and PD_ANALYSIS_SCHEMA_VERSION (profile_analyze --json).
 * Each rule is a pattern whose first group is the number the text gives; every match in the
 * rule's files must give the constant, and each rule must match at least once (a rule that
 * finds nothing would check nothing). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_analyze.h"
#include "pd/pd_common.h"
#include "pd/pd_writers.h"
#include "pd_test_util.h"

typedef struct {
  const char *file;    /* under the source tree; "docs/" means README.md and every page in docs/ */
  const char *pattern; /* POSIX extended; group 1 is the version the text names */
  const char *want;
} rule_t;

static const rule_t k_rules[] = {
    /* "profiler_demo 0.1.0 (CUDA ...)", the --version line a page shows */
    {"docs/", "(profiler_demo|profile_analyze|profile_compare) ([0-9]+\\.[0-9]+\\.[0-9]+)", PD_VERSION_STRING},
    /* the metrics JSON: "schema v2", "schema_version 2", "schema 2", formats.md's table row */
    {"docs/", "schema v([0-9]+)", PD_STRINGIFY(PD_METRICS_SCHEMA_VERSION)},
    {"README.md", "schema_version ([0-9]+)", PD_STRINGIFY(PD_METRICS_SCHEMA_VERSION)},
    {"baselines/README.md", "metrics JSON of schema ([0-9]+)", PD_STRINGIFY(PD_METRICS_SCHEMA_VERSION)},
    {"docs/formats.md", "\\| `schema_version` \\| int \\| `([0-9]+)`", PD_STRINGIFY(PD_METRICS_SCHEMA_VERSION)},
    /* the analysis JSON */
    {"docs/analyzer.md", "\"schema_version\": ([0-9]+)", PD_STRINGIFY(PD_ANALYSIS_SCHEMA_VERSION)},
};

/* Checks one file against a rule; returns the number of matches. */
static int check_file(const char *path, const rule_t *r) {
  char *text = pd_test_slurp(path);
  cr_assert_not_null(text, "cannot read %s", path);
  regex_t re;
  cr_assert_eq(regcomp(&re, r->pattern, REG_EXTENDED), 0, "bad pattern %s", r->pattern);
  size_t ngroups = re.re_nsub;
  regmatch_t m[3];
  int hits = 0;
  for (const char *p = text; regexec(&re, p, 3, m, p == text ? 0 : REG_NOTBOL) == 0; p += m[0].rm_eo) {
    const regmatch_t *g = &m[ngroups]; /* the last group is the number */
    char got[32];
    snprintf(got, sizeof got, "%.*s", (int)(g->rm_eo - g->rm_so), p + g->rm_so);
    int line = 1;
    for (const char *q = text; q < p + m[0].rm_so; q++) line += *q == '\n';
    cr_expect_str_eq(got, r->want, "%s:%d: '%.*s' names %s, the code has %s", path, line,
                     (int)(m[0].rm_eo - m[0].rm_so), p + m[0].rm_so, got, r->want);
    hits++;
    if (m[0].rm_eo == 0) break;
  }
  regfree(&re);
  free(text);
  return hits;
}

/* README.md and every page in docs/, or one file. */
static int check_rule(const char *src, const rule_t *r) {
  char path[2048];
  if (strcmp(r->file, "docs/") != 0) {
    snprintf(path, sizeof path, "%s/%s", src, r->file);
    return check_file(path, r);
  }
  snprintf(path, sizeof path, "%s/README.md", src);
  int hits = check_file(path, r);
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/docs", src);
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "cannot list %s", dir);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 4 || strcmp(e->d_name + n - 3, ".md") != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    hits += check_file(path, r);
  }
  closedir(d);
  return hits;
}

Test(docs, name_the_versions_the_code_has) {
  const char *src = getenv("PD_SOURCE_DIR");
  cr_assert_not_null(src, "PD_SOURCE_DIR is not set (run through ctest)");
  for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++)
    cr_expect_gt(check_rule(src, &k_rules[i]), 0, "rule '%s' found nothing in %s: it checks nothing", k_rules[i].pattern,
                 k_rules[i].file);
}
