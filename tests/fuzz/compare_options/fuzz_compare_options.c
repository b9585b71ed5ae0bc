/* fuzz_compare_options.c: profile_compare's option parser (pd_compare_cli_parse), every
 * form. The input is split at NUL bytes into argv[1..]; the parser must hold up to any
 * of it, fill a consistent result or write one line of error, and free what it took. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare_cli.h"
#include "fuzz_util.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_null == NULL) g_null = fopen("/dev/null", "w");
  char *buf = NULL, *argv[FUZZ_ARGV_MAX + 2];
  const int argc = fuzz_argv(data, size, "profile_compare", &buf, argv);
  if (argc == 0) return 0;
  pd_compare_cli_t c;
  char err[1024] = "";
  int rc = pd_compare_cli_parse(argc, argv, &c, err, sizeof err);
  if (rc != 0 && (err[0] == 0 || strchr(err, '\n') != NULL)) abort(); /* one line, never empty */
  if (rc == 0) {
    if (c.mode == PD_CCLI_COMPARE && c.nfiles != 2) abort();
    if (c.mode == PD_CCLI_AB && (c.nbase < 2 || c.nbase != c.nhead)) abort();
    if (c.mode == PD_CCLI_PROMOTE && (c.nruns == 0 || c.out == NULL)) abort();
    if (!(c.alpha > 0.0 && c.alpha <= 0.5)) abort();
  }
  fputs(err, g_null);
  pd_compare_cli_free(&c);
  free(buf);
  return 0;
}
