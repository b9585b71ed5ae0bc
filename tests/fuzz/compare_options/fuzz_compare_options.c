/* fuzz_compare_options.c: profile_compare's option parser (pd_compare_cli_parse), every
 * form. The input is split at NUL bytes into argv[1..]; the parser must hold up to any
 * of it, fill a consistent result or write one line of error, and free what it took. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare_cli.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_null == NULL) g_null = fopen("/dev/null", "w");
  if (size > 4096) return 0;
  char *buf = malloc(size + 1);
  if (buf == NULL) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[66] = {"profile_compare"};
  int argc = 1;
  for (size_t i = 0; i <= size && argc < 65;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
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
