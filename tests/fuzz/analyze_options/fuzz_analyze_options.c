/* fuzz_analyze_options.c: profile_analyze's option parser (pd_analyze_cli_parse). The
 * input is split at NUL bytes into argv[1..]; the parser must hold up to any of it and
 * either fill the options or write one line of error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze_cli.h"
#include "fuzz_util.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_null == NULL) g_null = fopen("/dev/null", "w");
  char *buf = NULL, *argv[FUZZ_ARGV_MAX + 2];
  const int argc = fuzz_argv(data, size, "profile_analyze", &buf, argv);
  if (argc == 0) return 0;
  pd_analyze_cli_t o;
  char err[1024] = "";
  pd_analyze_cli_status_t st = pd_analyze_cli_parse(argc, argv, &o, err, sizeof err);
  if (st == PD_ACLI_BAD && (err[0] == 0 || strchr(err, '\n') != NULL)) abort(); /* one line, never empty */
  if (st == PD_ACLI_RUN && (o.trace == NULL || o.top < 1)) abort();
  fputs(err, g_null);
  free(buf);
  return 0;
}
