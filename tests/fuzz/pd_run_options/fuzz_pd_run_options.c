/* fuzz_pd_run_options.c: pd_run's option parser and the injection's config round trip. The
 * input is split at NUL bytes into argv[1..]. A refused command line says why in one line,
 * never empty; an accepted one, written into the PD_INJECT_* environment as pd_run writes it
 * for the program (pd_inject_config_to_env) and read back as the library reads it inside the
 * program (pd_inject_config_from_env), must come back valid and unchanged: what pd_run
 * accepts, the library must run with. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inject.h"
#include "run.h"
#include "fuzz_util.h"

static void env_clear(void) {
  size_t n = 0;
  const char *const *names = pd_inject_env_names(&n);
  for (size_t i = 0; i < n; i++) unsetenv(names[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = NULL, *argv[FUZZ_ARGV_MAX + 2];
  const int argc = fuzz_argv(data, size, "pd_run", &buf, argv);
  if (argc == 0) return 0;
  pd_run_config_t cfg;
  char err[1024] = "";
  int rc = pd_run_config_parse(argc, argv, &cfg, err, sizeof err);
  if (rc != 0 && (err[0] == 0 || strchr(err, '\n') != NULL)) abort(); /* one line, never empty */
  if (rc == 0 && cfg.action == PD_RUN_RUN) {
    env_clear();
    if (pd_inject_config_to_env(&cfg.inject) != 0) abort();
    pd_inject_config_t back;
    char why[1024] = "";
    if (pd_inject_config_from_env(&back, why, sizeof why) != 0) {
      fprintf(stderr, "accepted by pd_run, refused by the library: %s\n", why);
      abort();
    }
    if (memcmp(&back, &cfg.inject, sizeof back) != 0) abort(); /* changed on the way */
  }
  free(buf);
  return 0;
}
