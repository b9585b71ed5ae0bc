/* compare_cli.h: profile_compare's command line (its four forms: compare, A/B, promote,
 * slug) parsed and checked without I/O, so the program, its unit tests and the fuzz
 * target (tests/fuzz/compare_options) share one parser. */
#ifndef PD_COMPARE_CLI_H
#define PD_COMPARE_CLI_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
  PD_CCLI_COMPARE = 0, /* CURRENT.json BASELINE.json */
  PD_CCLI_AB,          /* --base RUN... --head RUN... */
  PD_CCLI_PROMOTE,     /* --promote RUN... -o BASELINE.json */
  PD_CCLI_SLUG,        /* --slug METRICS.json */
  PD_CCLI_HELP,
  PD_CCLI_VERSION
} pd_compare_cli_mode_t;

/* Every string points into argv; the lists are allocated (pd_compare_cli_free). */
typedef struct {
  pd_compare_cli_mode_t mode;
  const char *files[2];     /* compare: CURRENT, BASELINE; slug: files[0] */
  size_t nfiles;
  const char **base, **head; /* A/B: the runs of each side, round i at index i */
  size_t nbase, nhead;
  const char *json_out, *md_out;
  double alpha;             /* 0 < alpha <= 0.5, default 0.01 */
  bool quiet;
  double keep;              /* A/B --keep: share of runs the statistic keeps; 0: default */
  bool normalize;           /* A/B --normalize: host times by each run's host_calibration */
  bool adjust;              /* A/B --adjust: host times adjusted for each run's traced-call cost */
  bool unpaired;            /* A/B --unpaired: the two-sample permutation test */
  const char *primary;      /* A/B --primary METRIC; NULL: every host row gates */
  const char **runs;        /* promote: the runs */
  size_t nruns;
  const char *out;          /* promote: -o / --output */
  const char *commit, *command, *date; /* promote: --commit, --command, --date; NULL: none */
} pd_compare_cli_t;

/* Parses argv and checks it: the files each form needs, --alpha's range, no output that
 * names an input, --json and --markdown apart. Returns 0; PD_EINVAL with one line in err
 * (without the program's name); or PD_ENOMEM. *c is to be freed in every case. */
int pd_compare_cli_parse(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen);
void pd_compare_cli_free(pd_compare_cli_t *c);

#endif
