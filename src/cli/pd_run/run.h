/* run.h: pd_run, the command that profiles any CUDA program through libpd_inject.so.
 *
 *   pd_run [options] -- PROGRAM ARGS...
 *
 * Order: parse + validate (exit 2, one line, before anything starts) -> output directories
 * made and proven writable (exit 2) -> the injection library found (exit 2) -> the child's
 * environment (CUDA_INJECTION64_PATH, NVTX_INJECTION64_PATH, PD_INJECT_*) -> fork + exec ->
 * signals forwarded while it runs -> its exit status mapped -> the report read back from the
 * metrics JSON the library wrote, printed on stderr (the program owns stdout).
 *
 * The logic lives in the static library pd_cli_run so unit tests drive it without a GPU.
 */
#ifndef PD_CLI_RUN_H
#define PD_CLI_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>

#include "inject.h"

#define PD_RUN_PROG "pd_run"

/* Exit codes of pd_run itself; otherwise it returns the program's status. */
enum {
  PD_RUN_EXIT_USAGE = 2,        /* bad option, unwritable output, library not found */
  PD_RUN_EXIT_NOT_EXEC = 126,   /* PROGRAM exists but cannot be executed */
  PD_RUN_EXIT_NOT_FOUND = 127,  /* PROGRAM not found */
  PD_RUN_EXIT_SIGNAL_BASE = 128 /* + N: PROGRAM killed by signal N */
};

typedef enum { PD_RUN_RUN = 0, PD_RUN_HELP, PD_RUN_VERSION } pd_run_action_t;

typedef struct {
  pd_run_action_t action;
  pd_inject_config_t inject; /* what the library will be told (PD_INJECT_*) */
  char *const *argv;         /* PROGRAM and its arguments, NULL-terminated; borrowed */
  int argc;
} pd_run_config_t;

/* Parses argv (`--flag value` and `--flag=value`; options end at `--` or at the first
 * argument that is not an option); fills defaults, the name (PROGRAM's, or a Python
 * script's or module's) and validates. Returns 0 or PD_RUN_EXIT_USAGE with one line in err. */
int pd_run_config_parse(int argc, char *const argv[], pd_run_config_t *cfg, char *err, size_t errlen);
/* The default name for a command line: the program's base name; for python the script's
 * base name without .py, or the module after -m. */
void pd_run_default_name(char *const argv[], char *buf, size_t buflen);
void pd_run_print_help(FILE *out);
void pd_run_print_version(FILE *out);

/* Makes trace_dir and the JSON's parent directory and proves both writable. Returns 0 or
 * PD_RUN_EXIT_USAGE with the reason in err. */
int pd_run_outputs_prepare(const pd_inject_config_t *cfg, char *err, size_t errlen);
/* Finds libpd_inject.so: $PD_INJECT_LIBRARY, next to the pd_run binary (self: its path),
 * in ../lib of it (an install), or the build tree's. Returns 0 or PD_RUN_EXIT_USAGE. */
int pd_run_find_library(const char *self, char *buf, size_t buflen, char *err, size_t errlen);
/* Sets the child's environment in this process: the two injection paths and PD_INJECT_*.
 * Returns 0 or -1 (out of memory). */
int pd_run_env_apply(const pd_run_config_t *cfg, const char *library);

/* The exit status pd_run returns for a wait status: the program's exit code, or 128+N. */
int pd_run_exit_status(int wait_status);
/* Runs argv with the current environment (plus PD_INJECT_ROOT_PID = the child's pid),
 * forwarding SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to pd_run alone (a terminal's signal
 * reaches the program directly). Returns the exit status as pd_run_exit_status() maps it;
 * PD_RUN_EXIT_NOT_FOUND / PD_RUN_EXIT_NOT_EXEC with pd_run's own line on err when the exec
 * fails (*signaled is then -1); *signaled = the signal that killed it, else 0. */
int pd_run_spawn(char *const argv[], FILE *err, int *signaled);

/* After the program: reads the metrics JSON (and per-process ones beside it) newer than
 * `since` and prints quick stats, top ops, the verdict and profiler_cost on out; or "nothing
 * to profile" when the program never used CUDA, or why nothing was written. Returns the
 * number of metrics files read. */
int pd_run_report(FILE *out, const pd_run_config_t *cfg, time_t since, int killed_by);
/* Prints one metrics JSON's summary (exposed for the tests). Returns 0 or -1 when the file
 * cannot be read or is not a metrics JSON (one line said). */
int pd_run_report_file(FILE *out, const char *path, int top_n);

/* main(): parse, help/version or run. Returns the process exit status. */
int pd_run_main(int argc, char *const argv[]);

#endif /* PD_CLI_RUN_H */
