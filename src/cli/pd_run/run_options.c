/* run_options.c: pd_run's options, output directories, library lookup and the child's
 * environment. The options fill the injection's own config struct (inject.h), whose one
 * validate function the library runs again on the PD_INJECT_* variables.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd/pd_common.h"
#include "pd/pd_out.h"
#include "run.h"

#ifndef PD_INJECT_BUILD_PATH
#define PD_INJECT_BUILD_PATH ""
#endif

/* One table of the value options: X(flag, what, kind). Kinds: C count, T text, L level. */
typedef enum { OPT_COUNT, OPT_TEXT, OPT_LEVEL, OPT_SWITCH } opt_kind_t;

typedef struct {
  const char *flag;
  opt_kind_t kind;
  size_t off;   /* into pd_inject_config_t */
  size_t size;  /* of a text field */
  int min;      /* of a count */
  bool schedule;
  const char *help;
} opt_t;

#define CFG_OFF(f) offsetof(pd_inject_config_t, f)
#define CFG_SIZE(f) sizeof(((pd_inject_config_t *)0)->f)

static const opt_t k_opts[] = {
    {"skip_first", OPT_COUNT, CFG_OFF(schedule.skip_first), 0, 0, true, "steps ignored before the first cycle (default 0)"},
    {"wait", OPT_COUNT, CFG_OFF(schedule.wait), 0, 0, true, "steps off at the start of each cycle (default 1)"},
    {"warmup", OPT_COUNT, CFG_OFF(schedule.warmup), 0, 0, true, "steps traced and discarded (default 1)"},
    {"active", OPT_COUNT, CFG_OFF(schedule.active), 0, 1, true, "steps recorded per cycle (default 5)"},
    {"repeat", OPT_COUNT, CFG_OFF(schedule.repeat), 0, 0, true, "cycles; 0 = until the program ends (default 1)"},
    {"step_kernel", OPT_TEXT, CFG_OFF(step_kernel), CFG_SIZE(step_kernel), 0, false,
     "REGEX: each launch of a kernel whose name matches ends a step"},
    {"step_range", OPT_TEXT, CFG_OFF(step_range), CFG_SIZE(step_range), 0, false,
     "NAME: each NVTX range of this name begins a step"},
    {"trace_dir", OPT_TEXT, CFG_OFF(trace_dir), CFG_SIZE(trace_dir), 0, false,
     "directory of the Chrome traces (default results/traces/pd_run)"},
    {"output_json", OPT_TEXT, CFG_OFF(output_json), CFG_SIZE(output_json), 0, false,
     "metrics JSON (default results/metrics_pd_run.json)"},
    {"name", OPT_TEXT, CFG_OFF(name), CFG_SIZE(name), 0, false,
     "the program's name in the metrics JSON, the key of its baselines (default: the program's or script's name)"},
    {"top_n", OPT_COUNT, CFG_OFF(top_n), 0, 0, false, "rows of the top-ops table (default 15; 0: all)"},
    {"profile_level", OPT_LEVEL, CFG_OFF(profile_level), 0, 0, false,
     "lean (default) or full: full also records every CUDA driver call"},
    {"with_stack", OPT_SWITCH, CFG_OFF(with_stack), 0, 0, false, "host ranges record their call stack"},
    {"trace_gzip", OPT_SWITCH, CFG_OFF(trace_gzip), 0, 0, false, "write the traces gzipped (.pt.trace.json.gz)"},
    {"probe", OPT_SWITCH, CFG_OFF(probe), 0, 0, false,
     "after each untraced step, time empty launches on a stream of its own (about 30 us, outside the steps): "
     "the covariate of scripts/pd_ab.sh; needs --step_range"},
};
#define K_NOPTS (sizeof(k_opts) / sizeof(k_opts[0]))

void pd_run_print_version(FILE *out) { fprintf(out, "%s %s\n", PD_RUN_PROG, PD_VERSION_STRING); }

void pd_run_print_help(FILE *out) {
  fprintf(out,
          "usage: %s [options] -- PROGRAM [ARGS...]\n\n"
          "Runs PROGRAM with the profiler injected (libpd_inject.so through CUDA_INJECTION64_PATH and\n"
          "NVTX_INJECTION64_PATH): a Chrome trace per recorded cycle, a metrics JSON with the verdict\n"
          "and the profiler's cost, and on stderr the quick stats, top ops and verdict. The program's\n"
          "stdout, stdin and exit status are its own.\n\n"
          "Options (schedule as torch.profiler.schedule; a schedule needs --step_kernel or --step_range,\n"
          "without either the whole run is one step):\n",
          PD_RUN_PROG);
  for (size_t i = 0; i < K_NOPTS; i++) {
    const char *arg = k_opts[i].kind == OPT_COUNT ? " N" : k_opts[i].kind == OPT_SWITCH ? "" : " VALUE";
    char left[40];
    snprintf(left, sizeof left, "--%s%s", k_opts[i].flag, arg);
    fprintf(out, "  %-22s %s\n", left, k_opts[i].help);
  }
  fprintf(out,
          "  %-22s %s\n  %-22s %s\n\n"
          "Exit status: the program's; 126 not executable, 127 not found, 128+N killed by signal N;\n"
          "2 for a bad option, an unwritable output or a missing libpd_inject.so (PD_INJECT_LIBRARY\n"
          "names it). Signals sent to pd_run alone (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are forwarded.\n"
          "The PD_INJECT_* variables (docs/inject.md) configure the library without pd_run.\n",
          "--help", "this text", "--version", "the version");
}

static const opt_t *opt_find(const char *name, size_t len) {
  for (size_t i = 0; i < K_NOPTS; i++)
    if (strlen(k_opts[i].flag) == len && strncmp(k_opts[i].flag, name, len) == 0) return &k_opts[i];
  return NULL;
}

static int opt_set(const opt_t *o, const char *v, pd_run_config_t *cfg, char *err, size_t errlen) {
  char *base = (char *)&cfg->inject;
  char shown[96];
  switch (o->kind) {
    case OPT_COUNT: {
      char *end = NULL;
      errno = 0;
      long x = strtol(v, &end, 10);
      if (v[0] == '\0' || *end != '\0' || errno != 0 || x < o->min || x > 1000000) {
        snprintf(err, errlen, "--%s must be an integer in [%d, 1000000], got '%s'", o->flag, o->min,
                 pd_term_escape_line(shown, sizeof shown, v));
        return PD_RUN_EXIT_USAGE;
      }
      *(int *)(base + o->off) = (int)x;
      if (o->schedule) cfg->inject.schedule_set = true;
      return 0;
    }
    case OPT_LEVEL:
      if (strcmp(v, "lean") != 0 && strcmp(v, "full") != 0) {
        snprintf(err, errlen, "--profile_level must be lean or full, got '%s'", pd_term_escape_line(shown, sizeof shown, v));
        return PD_RUN_EXIT_USAGE;
      }
      *(int *)(base + o->off) = strcmp(v, "full") == 0 ? PD_INJECT_LEVEL_FULL : PD_INJECT_LEVEL_LEAN;
      return 0;
    case OPT_TEXT:
      if (v[0] == '\0' || strlen(v) >= o->size) {
        snprintf(err, errlen, "--%s must be a non-empty value of at most %zu bytes", o->flag, o->size - 1);
        return PD_RUN_EXIT_USAGE;
      }
      /* the whole field cleared first: a repeated option leaves nothing of the earlier value
       * behind its terminator, so the config is the same bytes as the library's reading of
       * the environment pd_run writes from it */
      memset(base + o->off, 0, o->size);
      memcpy(base + o->off, v, strlen(v) + 1);
      return 0;
    case OPT_SWITCH:
      *(bool *)(base + o->off) = true;
      return 0;
  }
  return PD_RUN_EXIT_USAGE;
}

void pd_run_default_name(char *const argv[], char *buf, size_t buflen) {
  const char *prog = argv[0];
  const char *b = strrchr(prog, '/');
  b = b != NULL ? b + 1 : prog;
  bool python = strncmp(b, "python", 6) == 0 && strspn(b + 6, "0123456789.") == strlen(b + 6);
  if (python && argv[1] != NULL) {
    if (strcmp(argv[1], "-m") == 0 && argv[2] != NULL) {
      snprintf(buf, buflen, "%s", argv[2]);
      return;
    }
    if (argv[1][0] != '-') {
      const char *s = strrchr(argv[1], '/');
      s = s != NULL ? s + 1 : argv[1];
      size_t n = strlen(s);
      if (n > 3 && strcmp(s + n - 3, ".py") == 0) n -= 3;
      snprintf(buf, buflen, "%.*s", (int)n, s);
      return;
    }
  }
  snprintf(buf, buflen, "%s", b);
}

int pd_run_config_parse(int argc, char *const argv[], pd_run_config_t *cfg, char *err, size_t errlen) {
  memset(cfg, 0, sizeof(*cfg));
  pd_inject_config_init(&cfg->inject);
  char shown[96];
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strncmp(a, "--", 2) != 0) break; /* PROGRAM */
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      cfg->action = PD_RUN_HELP;
      return 0;
    }
    if (strcmp(a, "--version") == 0) {
      cfg->action = PD_RUN_VERSION;
      return 0;
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    const opt_t *o = opt_find(name, eq != NULL ? (size_t)(eq - name) : strlen(name));
    if (o == NULL) {
      snprintf(err, errlen, "unknown option '%s' (see %s --help)", pd_term_escape_line(shown, sizeof shown, a),
               PD_RUN_PROG);
      return PD_RUN_EXIT_USAGE;
    }
    const char *v = NULL;
    if (o->kind == OPT_SWITCH) {
      if (eq != NULL) {
        snprintf(err, errlen, "--%s takes no value", o->flag);
        return PD_RUN_EXIT_USAGE;
      }
      v = "";
    } else if (eq != NULL) {
      v = eq + 1;
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      snprintf(err, errlen, "--%s needs a value", o->flag);
      return PD_RUN_EXIT_USAGE;
    }
    int rc = opt_set(o, v, cfg, err, errlen);
    if (rc != 0) return rc;
  }
  if (i >= argc) {
    snprintf(err, errlen, "no program to run: %s [options] -- PROGRAM [ARGS...]", PD_RUN_PROG);
    return PD_RUN_EXIT_USAGE;
  }
  cfg->argv = argv + i;
  cfg->argc = argc - i;
  if (cfg->inject.name[0] == '\0') pd_run_default_name(cfg->argv, cfg->inject.name, sizeof cfg->inject.name);
  for (char *c = cfg->inject.name; *c != '\0'; c++)
    if (*c == '/' || *c == '\n') *c = '_'; /* a derived name never fails the run */
  if (pd_inject_config_validate(&cfg->inject, err, errlen) != 0) return PD_RUN_EXIT_USAGE;
  cfg->action = PD_RUN_RUN;
  return 0;
}

/* ---- outputs, library, environment -------------------------------------------------------- */

/* mkdir -p of dir, then a probe file created and removed. */
static int dir_writable(const char *flag, const char *dir, char *err, size_t errlen) {
  char p[PD_INJECT_PATH_MAX + 64];
  snprintf(p, sizeof p, "%s", dir);
  size_t n = strlen(p);
  for (size_t k = 1; k <= n; k++) {
    if (p[k] != '/' && p[k] != '\0') continue;
    char c = p[k];
    p[k] = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      snprintf(err, errlen, "%s: cannot create '%s': %s", flag, p, strerror(errno));
      return PD_RUN_EXIT_USAGE;
    }
    p[k] = c;
  }
  snprintf(p, sizeof p, "%s/.pd_run_probe.%d", dir, (int)getpid());
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "%s: '%s' is not writable: %s", flag, dir, strerror(errno));
    return PD_RUN_EXIT_USAGE;
  }
  close(fd);
  unlink(p);
  return 0;
}

int pd_run_outputs_prepare(const pd_inject_config_t *cfg, char *err, size_t errlen) {
  int rc = dir_writable("--trace_dir", cfg->trace_dir, err, errlen);
  if (rc != 0) return rc;
  char parent[PD_INJECT_PATH_MAX];
  const char *slash = strrchr(cfg->output_json, '/');
  if (slash == NULL) snprintf(parent, sizeof parent, ".");
  else if (slash == cfg->output_json) snprintf(parent, sizeof parent, "/");
  else snprintf(parent, sizeof parent, "%.*s", (int)(slash - cfg->output_json), cfg->output_json);
  struct stat st;
  if (stat(cfg->output_json, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "--output_json: '%s' is a directory", cfg->output_json);
    return PD_RUN_EXIT_USAGE;
  }
  return dir_writable("--output_json", parent, err, errlen);
}

static bool readable_file(const char *p) {
  struct stat st;
  return p[0] != '\0' && stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

int pd_run_find_library(const char *self, char *buf, size_t buflen, char *err, size_t errlen) {
  const char *env = getenv("PD_INJECT_LIBRARY");
  if (env != NULL) {
    if (readable_file(env) && realpath(env, buf) != NULL) return 0;
    snprintf(err, errlen, "PD_INJECT_LIBRARY='%s' is not a readable file", env);
    return PD_RUN_EXIT_USAGE;
  }
  char dir[PATH_MAX] = "";
  if (self != NULL && realpath(self, dir) != NULL) {
    char *slash = strrchr(dir, '/');
    if (slash != NULL) *slash = '\0';
  }
  const char *cands[] = {"/libpd_inject.so", "/../lib/libpd_inject.so"};
  char p[PATH_MAX + 32];
  for (size_t k = 0; dir[0] != '\0' && k < sizeof(cands) / sizeof(cands[0]); k++) {
    snprintf(p, sizeof p, "%s%s", dir, cands[k]);
    if (readable_file(p) && realpath(p, buf) != NULL) return 0;
  }
  if (readable_file(PD_INJECT_BUILD_PATH) && strlen(PD_INJECT_BUILD_PATH) < buflen) {
    snprintf(buf, buflen, "%s", PD_INJECT_BUILD_PATH);
    return 0;
  }
  snprintf(err, errlen, "libpd_inject.so not found next to %s, in ../lib, or at '%s'; set PD_INJECT_LIBRARY",
           PD_RUN_PROG, PD_INJECT_BUILD_PATH);
  return PD_RUN_EXIT_USAGE;
}

int pd_run_env_apply(const pd_run_config_t *cfg, const char *library) {
  if (setenv("CUDA_INJECTION64_PATH", library, 1) != 0 || setenv("NVTX_INJECTION64_PATH", library, 1) != 0)
    return -1;
  if (unsetenv("PD_INJECT_ROOT_PID") != 0) return -1; /* the child sets its own */
  return pd_inject_config_to_env(&cfg->inject) == 0 ? 0 : -1;
}
