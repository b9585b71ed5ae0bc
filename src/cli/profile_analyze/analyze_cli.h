/* analyze_cli.h: profile_analyze's command line, parsed and checked without I/O (but the
 * stat() that tells whether an output names an input), so the program, its unit tests and
 * the fuzz target (tests/fuzz/analyze_options) share one parser. */
#ifndef PD_ANALYZE_CLI_H
#define PD_ANALYZE_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "pd/pd_analyze.h"
#include "pd/pd_stats.h"

typedef struct {
  const char *trace;  /* points into argv */
  int top;
  pd_top_opts_t opts;
  bool breakdown;
  const char *html;
  const char *diff;
  const char *json;
  int group_by_stack_n;  /* 0: off */
  const char *export_stacks;
  pd_sort_key_t stacks_metric;
  bool stacks_metric_set;
} pd_analyze_cli_t;

typedef enum {
  PD_ACLI_RUN = 0,     /* *o is filled: go on */
  PD_ACLI_HELP = 1,    /* -h / --help was given */
  PD_ACLI_VERSION = 2, /* --version was given */
  PD_ACLI_BAD = -1     /* bad input: one line in err, without the program's name */
} pd_analyze_cli_status_t;

/* Parses argv ("--flag VALUE" and "--flag=VALUE"), checks every value and that no output
 * names an input or another output. Allocates nothing. */
pd_analyze_cli_status_t pd_analyze_cli_parse(int argc, char *const argv[], pd_analyze_cli_t *o, char *err,
                                             size_t errlen);

#endif
