/* demo_main.c: profiler_demo's main logic: parse and validate (exit 2 on bad input, with
 * one line naming the flag and the usage), then --help / --version / --list_scenarios
 * (no GPU needed) or the run. */
#include <stdbool.h>
#include <stdio.h>

#include "demo.h"
#include "pd/pd_out.h"

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
      if (cfg.list_names)
        pd_demo_print_scenario_names(stdout);
      else
        pd_demo_print_scenarios(stdout);
      return PD_DEMO_EXIT_OK;
    case PD_DEMO_RUN:
      break;
  }
  /* An output on "-" takes standard output: the report goes to stderr, and the output is
   * written only when the run succeeded (or was stopped by a signal, which keeps its
   * outputs). */
  bool dash = pd_out_is_stdout(cfg.output_json) || pd_out_is_stdout(cfg.export_stacks);
  if (dash && pd_out_stdout_begin() != 0) {
    fprintf(stderr, "%s: cannot move the report to stderr\n", PD_DEMO_PROG);
    return PD_DEMO_EXIT_RUNTIME;
  }
  int rc = pd_demo_run(&cfg);
  bool keep = rc == PD_DEMO_EXIT_OK || rc >= 128;
  if (dash && pd_out_stdout_end(keep) != 0 && keep) {
    fprintf(stderr, "%s: cannot write to standard output\n", PD_DEMO_PROG);
    if (rc == PD_DEMO_EXIT_OK) rc = PD_DEMO_EXIT_RUNTIME;
  }
  return rc;
}
