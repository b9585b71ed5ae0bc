/* demo_main.c: profiler_demo's main logic: parse and validate (exit 2 on bad input, with
 * one line naming the flag and the usage), then --help / --version / --list_scenarios
 * (no GPU needed) or the run. */
#include <stdio.h>

#include "demo.h"

int pd_demo_main(int argc, char *const argv[]) {
  pd_demo_config_t cfg;
  char err[512];
  if (pd_demo_config_parse(argc, argv, &cfg, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s: %s\n", PD_DEMO_PROG, err);
    pd_demo_print_usage(stderr);
    return PD_DEMO_EXIT_USAGE;
  }
  switch (cfg.action) {
    case PD_DEMO_HELP:
      pd_demo_print_help(stdout);
      return PD_DEMO_EXIT_OK;
    case PD_DEMO_VERSION:
      pd_demo_print_version(stdout);
      return PD_DEMO_EXIT_OK;
    case PD_DEMO_LIST:
      pd_demo_print_scenarios(stdout);
      return PD_DEMO_EXIT_OK;
    case PD_DEMO_RUN:
      break;
  }
  return pd_demo_run(&cfg);
}
