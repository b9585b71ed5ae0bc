/* fuzz_demo_options.c: profiler_demo's option parser and validator. The input is split at
 * NUL bytes into argv[1..]; parse, validate, and the help and usage texts must hold up to
 * any of it. (profile_analyze's and profile_compare's parsers have their own targets,
 * analyze_options and compare_options.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_null == NULL) g_null = fopen("/dev/null", "w");
  if (size > 4096) return 0;
  char *buf = malloc(size + 1);
  if (buf == NULL) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[66] = {"profiler_demo"};
  int argc = 1;
  for (size_t i = 0; i <= size && argc < 65;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  pd_demo_config_t cfg;
  char err[1024] = "";
  int rc = pd_demo_config_parse(argc, argv, &cfg, err, sizeof err);
  if (rc != 0 && (err[0] == 0 || strchr(err, '\n') != NULL)) abort(); /* one line, never empty */
  if (rc == 0) (void)pd_demo_config_validate(&cfg, err, sizeof err);
  fputs(err, g_null);
  free(buf);
  return 0;
}
