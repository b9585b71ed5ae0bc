/* fuzz_demo_options.c: profiler_demo's option parser and validator. The input is split at
 * NUL bytes into argv[1..]; parse, validate, and the help and usage texts must hold up to
 * any of it. (profile_analyze's and profile_compare's parsers have their own targets,
 * analyze_options and compare_options.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"
#include "fuzz_util.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_null == NULL) g_null = fopen("/dev/null", "w");
  char *buf = NULL, *argv[FUZZ_ARGV_MAX + 2];
  const int argc = fuzz_argv(data, size, "profiler_demo", &buf, argv);
  if (argc == 0) return 0;
  pd_demo_config_t cfg;
  char err[1024] = "";
  int rc = pd_demo_config_parse(argc, argv, &cfg, err, sizeof err);
  if (rc != 0 && (err[0] == 0 || strchr(err, '\n') != NULL)) abort(); /* one line, never empty */
  if (rc == 0) (void)pd_demo_config_validate(&cfg, err, sizeof err);
  fputs(err, g_null);
  free(buf);
  return 0;
}
