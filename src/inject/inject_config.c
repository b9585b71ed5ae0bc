/* inject_config.c: the injection's config, from and to the PD_INJECT_* environment.
 *
 * pd_run parses its options into pd_inject_config_t, validates it and writes it into the
 * child's environment (pd_inject_config_to_env); the library reads it back inside the
 * program (pd_inject_config_from_env) and validates it again, so a user who sets the
 * variables by hand gets the same checks. Errors name the pd_run flag (from pd_run) or the
 * variable (from the environment).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inject.h"
#include "pd/pd_common.h"
#include "pd/pd_out.h"

#define ENV_NAME_GEN(name, text) "PD_INJECT_" #name,
#define ENV_TEXT_GEN(name, text) text,
static const char *const k_env_names[] = {PD_INJECT_ENV_MAP(ENV_NAME_GEN)};
static const char *const k_env_texts[] = {PD_INJECT_ENV_MAP(ENV_TEXT_GEN)};
#define K_NENV (sizeof(k_env_names) / sizeof(k_env_names[0]))

const char *const *pd_inject_env_names(size_t *count) {
  if (count != NULL) *count = K_NENV;
  return k_env_names;
}

const char *const *pd_inject_env_texts(size_t *count) {
  if (count != NULL) *count = K_NENV;
  return k_env_texts;
}

/* Most steps any schedule count may name: far beyond a job, small enough for int. */
#define COUNT_MAX 1000000

void pd_inject_config_init(pd_inject_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  snprintf(cfg->trace_dir, sizeof(cfg->trace_dir), "%s", "results/traces/pd_run");
  snprintf(cfg->output_json, sizeof(cfg->output_json), "%s", "results/metrics_pd_run.json");
  cfg->schedule = (pd_schedule_t){.skip_first = 0, .wait = 1, .warmup = 1, .active = 5, .repeat = 1};
  cfg->profile_level = PD_INJECT_LEVEL_LEAN;
  cfg->top_n = 15;
}

pd_inject_steps_t pd_inject_config_steps(const pd_inject_config_t *cfg) {
  if (cfg->step_kernel[0] != '\0') return PD_INJECT_STEPS_KERNEL;
  if (cfg->step_range[0] != '\0') return PD_INJECT_STEPS_RANGE;
  return PD_INJECT_STEPS_WHOLE_RUN;
}

/* ---- a step regex's size once compiled ---------------------------------------------------
 *
 * glibc's regcomp copies a subexpression for each '+' (x+ as x x*) and for each bound of an
 * interval (x{m,n}: up to max(m, n) + 1 copies), so stacked or nested repetitions grow
 * exponentially: a short "a++...+" needs gigabytes (tests/fuzz/pd_run_options found it),
 * inside pd_run and again inside the program. Estimated from the text before regcomp sees
 * it: an atom (a character, an escape, a bracket expression) counts 1, a group the sum of its
 * alternatives, an alternative the sum of its pieces; a repetition after a piece multiplies
 * it: '+', '*' and '?' by 2 (the last two copy nothing, but each adds an empty path, and
 * stacked or nested ones make regcomp's closure computation explode in time: "a++??++++??"
 * and four more characters took 2 s), an interval by its largest bound + 1. Saturates above
 * PD_INJECT_REGEX_MAX_SIZE. Stacked operators on one piece ("a??{0,30}*" ran for minutes in
 * regcomp; "a+++??++++++++??" 0.8 s; POSIX leaves them undefined) and a repeated group that
 * repeats inside ("(((a|b?)*)?){40}", estimated at 492, ran for minutes) are refused
 * outright. Under the three rules, 6,000 random patterns of these operators compiled in at
 * most 3 ms each (docs/reliability.md, tests/fuzz/pd_run_options). Malformed text is
 * counted as it comes; regcomp says what is wrong with it. */
#define PD_INJECT_REGEX_MAX_SIZE 1000.0

static double ere_cap(double x) { return x > PD_INJECT_REGEX_MAX_SIZE ? PD_INJECT_REGEX_MAX_SIZE + 1.0 : x; }

/* After '[': past the bracket expression's closing ']' (a ']' first is a member; "[:", "[."
 * and "[=" open a class, a collating element or an equivalence class that ends at ":]",
 * ".]" or "=]"). */
static const char *ere_bracket_end(const char *p) {
  if (*p == '^') p++;
  if (*p == ']') p++;
  while (*p != '\0' && *p != ']') {
    if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
      const char kind = p[1];
      p += 2;
      while (*p != '\0' && !(p[0] == kind && p[1] == ']')) p++;
      if (*p != '\0') p += 2;
      continue;
    }
    p++;
  }
  return *p == ']' ? p + 1 : p;
}

/* After '{': the interval's largest bound, *p past its '}'; -1 (and *p unmoved) when it is
 * not an interval. */
static long ere_interval(const char **p) {
  const char *q = *p;
  long m = 0, n = -1;
  if (*q < '0' || *q > '9') return -1;
  while (*q >= '0' && *q <= '9' && m <= 100000) m = m * 10 + (*q++ - '0');
  if (*q == ',') {
    q++;
    if (*q >= '0' && *q <= '9') {
      n = 0;
      while (*q >= '0' && *q <= '9' && n <= 100000) n = n * 10 + (*q++ - '0');
    }
  }
  if (*q != '}') return -1;
  *p = q + 1;
  return n > m ? n : m;
}

/* What the estimate found beside the size. */
typedef struct {
  bool stacked; /* a piece carries more than one repetition operator ("a*?", "a++") */
  bool nested;  /* a repeated group repeats inside ("(a+)*", "((a|b?)*)?") */
} ere_shape_t;

/* The size of the alternatives from *p to the ')' closing the group (depth > 0) or the end;
 * *p is left on that ')' or the end. *repeats: whether anything in them is repeated. */
static double ere_size(const char **p, int depth, ere_shape_t *shape, bool *repeats) {
  double total = 0.0, alt = 0.0;
  while (**p != '\0') {
    const char c = **p;
    if (c == ')' && depth > 0) break;
    if (c == '|') {
      total = ere_cap(total + alt);
      alt = 0.0;
      (*p)++;
      continue;
    }
    double piece = 1.0;
    bool inner = false; /* a group whose content repeats */
    if (c == '(') {
      (*p)++;
      piece = depth < 1000 ? ere_size(p, depth + 1, shape, &inner) : PD_INJECT_REGEX_MAX_SIZE + 1.0;
      if (**p == ')') (*p)++;
      if (piece < 1.0) piece = 1.0;
    } else if (c == '[') {
      *p = ere_bracket_end(*p + 1);
    } else if (c == '\\' && (*p)[1] != '\0') {
      *p += 2;
    } else {
      (*p)++;
    }
    int ops = 0; /* the repetitions applied to this piece */
    for (;;) {
      const char r = **p;
      double times = 0.0;
      if (r == '*' || r == '?' || r == '+') {
        times = 2.0;
        (*p)++;
      } else if (r == '{') {
        const char *q = *p + 1;
        const long bound = ere_interval(&q);
        if (bound < 0) break; /* a literal '{' */
        times = (double)bound + 1.0;
        *p = q;
      } else {
        break;
      }
      if (++ops > 1) shape->stacked = true;
      piece = ere_cap(piece * times);
    }
    if (ops > 0 && inner) shape->nested = true;
    if (ops > 0 || inner) *repeats = true;
    alt = ere_cap(alt + piece);
  }
  return ere_cap(total + alt);
}

double pd_inject_regex_size(const char *re, bool *stacked, bool *nested) {
  const char *p = re != NULL ? re : "";
  double n = 0.0;
  ere_shape_t shape = {false, false};
  bool repeats = false;
  /* a stray ')' at the top level ends nothing: count it and go on */
  for (;;) {
    n = ere_cap(n + ere_size(&p, 0, &shape, &repeats));
    if (*p == '\0') break;
    p++;
  }
  if (stacked != NULL) *stacked = shape.stacked;
  if (nested != NULL) *nested = shape.nested;
  return n;
}

int pd_inject_config_validate(const pd_inject_config_t *cfg, char *err, size_t errlen) {
  const pd_schedule_t *s = &cfg->schedule;
  const struct {
    const char *flag;
    int v, min;
  } counts[] = {{"--skip_first", s->skip_first, 0}, {"--wait", s->wait, 0},     {"--warmup", s->warmup, 0},
                {"--active", s->active, 1},         {"--repeat", s->repeat, 0}};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
    if (counts[i].v < counts[i].min || counts[i].v > COUNT_MAX) {
      snprintf(err, errlen, "%s must be an integer in [%d, %d], got %d", counts[i].flag, counts[i].min, COUNT_MAX,
               counts[i].v);
      return PD_EINVAL;
    }
  if (cfg->step_kernel[0] != '\0' && cfg->step_range[0] != '\0') {
    snprintf(err, errlen, "--step_kernel and --step_range exclude each other; give one");
    return PD_EINVAL;
  }
  if (cfg->schedule_set && pd_inject_config_steps(cfg) == PD_INJECT_STEPS_WHOLE_RUN) {
    snprintf(err, errlen,
             "a schedule (--skip_first --wait --warmup --active --repeat) needs steps: give --step_kernel or "
             "--step_range");
    return PD_EINVAL;
  }
  bool stacked = false, nested = false;
  if (cfg->step_kernel[0] != '\0' &&
      (pd_inject_regex_size(cfg->step_kernel, &stacked, &nested) > PD_INJECT_REGEX_MAX_SIZE || stacked || nested)) {
    char shown[96];
    pd_term_escape_line(shown, sizeof shown, cfg->step_kernel);
    if (stacked)
      snprintf(err, errlen,
               "--step_kernel '%s' stacks repetition operators (such as '*?' or '++'): undefined in a POSIX extended "
               "regex, and slow to compile; write one per piece",
               shown);
    else if (nested)
      snprintf(err, errlen,
               "--step_kernel '%s' repeats a group that repeats inside (such as '(a+)*'): glibc's regcomp can take "
               "minutes on those; repeat at one level only",
               shown);
    else
      snprintf(err, errlen,
               "--step_kernel '%s' repeats too much: compiled, it would copy its pieces more than %.0f times (each "
               "'+', '*' or '?' doubles what it follows, {m,n} multiplies it); nest fewer repetitions",
               shown, PD_INJECT_REGEX_MAX_SIZE);
    return PD_EINVAL;
  }
  if (cfg->step_kernel[0] != '\0') {
    regex_t re;
    int rc = regcomp(&re, cfg->step_kernel, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char why[128], shown[96];
      regerror(rc, &re, why, sizeof why);
      snprintf(err, errlen, "--step_kernel '%s' is not a regular expression: %s",
               pd_term_escape_line(shown, sizeof shown, cfg->step_kernel), why);
      return PD_EINVAL;
    }
    regfree(&re);
  }
  if (cfg->trace_dir[0] == '\0' || cfg->output_json[0] == '\0') {
    snprintf(err, errlen, "--%s must not be empty", cfg->trace_dir[0] == '\0' ? "trace_dir" : "output_json");
    return PD_EINVAL;
  }
  if (strcmp(cfg->trace_dir, cfg->output_json) == 0) {
    snprintf(err, errlen, "--output_json must differ from --trace_dir");
    return PD_EINVAL;
  }
  if (strchr(cfg->name, '\n') != NULL || strchr(cfg->name, '/') != NULL) {
    snprintf(err, errlen, "--name must not contain '/' or a newline");
    return PD_EINVAL;
  }
  if (cfg->top_n < 0 || cfg->top_n > COUNT_MAX) {
    snprintf(err, errlen, "--top_n must be an integer in [0, %d], got %d", COUNT_MAX, cfg->top_n);
    return PD_EINVAL;
  }
  if (cfg->probe && pd_inject_config_steps(cfg) != PD_INJECT_STEPS_RANGE) {
    /* kernel-name steps end inside CUPTI's launch callback, where the probe would launch
     * from within the program's own launch call; the whole-run step has no untraced steps */
    snprintf(err, errlen, "--probe needs --step_range (it runs between untraced steps, at a step range's start)");
    return PD_EINVAL;
  }
  if (cfg->profile_level != PD_INJECT_LEVEL_LEAN && cfg->profile_level != PD_INJECT_LEVEL_FULL) {
    snprintf(err, errlen, "--profile_level must be lean or full");
    return PD_EINVAL;
  }
  return 0;
}

/* ---- from the environment ------------------------------------------------------------ */

static void env_bad(char *err, size_t errlen, const char *var, const char *value, const char *allowed) {
  char shown[96];
  snprintf(err, errlen, "environment %s='%s' is not allowed (%s)", var, pd_term_escape_line(shown, sizeof shown, value),
           allowed);
}

static int env_count(const char *var, int min, int max, int *out, char *err, size_t errlen) {
  const char *v = getenv(var);
  if (v == NULL) return 0;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (v[0] == '\0' || *end != '\0' || errno != 0 || x < min || x > max) {
    char allowed[64];
    snprintf(allowed, sizeof allowed, "an integer in [%d, %d]", min, max);
    env_bad(err, errlen, var, v, allowed);
    return PD_EINVAL;
  }
  *out = (int)x;
  return 1;
}

static int env_switch(const char *var, bool *out, char *err, size_t errlen) {
  const char *v = getenv(var);
  if (v == NULL) return 0;
  if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
    env_bad(err, errlen, var, v, "0 or 1");
    return PD_EINVAL;
  }
  *out = v[0] == '1';
  return 0;
}

static int env_text(const char *var, char *out, size_t outlen, char *err, size_t errlen) {
  const char *v = getenv(var);
  if (v == NULL) return 0;
  if (strlen(v) >= outlen) {
    char allowed[64];
    snprintf(allowed, sizeof allowed, "at most %zu bytes", outlen - 1);
    env_bad(err, errlen, var, v, allowed);
    return PD_EINVAL;
  }
  /* the whole field cleared first (the default's tail would stay behind the terminator):
   * the library's reading is the same bytes as the config pd_run wrote it from */
  memset(out, 0, outlen);
  memcpy(out, v, strlen(v) + 1);
  return 0;
}

int pd_inject_config_from_env(pd_inject_config_t *cfg, char *err, size_t errlen) {
  pd_inject_config_init(cfg);
  int rc = 0;
  if (rc == 0) rc = env_text("PD_INJECT_TRACE_DIR", cfg->trace_dir, sizeof cfg->trace_dir, err, errlen);
  if (rc == 0) rc = env_text("PD_INJECT_OUTPUT_JSON", cfg->output_json, sizeof cfg->output_json, err, errlen);
  if (rc == 0) rc = env_text("PD_INJECT_STEP_KERNEL", cfg->step_kernel, sizeof cfg->step_kernel, err, errlen);
  if (rc == 0) rc = env_text("PD_INJECT_STEP_RANGE", cfg->step_range, sizeof cfg->step_range, err, errlen);
  if (rc == 0) rc = env_text("PD_INJECT_NAME", cfg->name, sizeof cfg->name, err, errlen);
  const struct {
    const char *var;
    int *field, min;
  } counts[] = {{"PD_INJECT_SKIP_FIRST", &cfg->schedule.skip_first, 0},
                {"PD_INJECT_WAIT", &cfg->schedule.wait, 0},
                {"PD_INJECT_WARMUP", &cfg->schedule.warmup, 0},
                {"PD_INJECT_ACTIVE", &cfg->schedule.active, 1},
                {"PD_INJECT_REPEAT", &cfg->schedule.repeat, 0}};
  for (size_t i = 0; rc == 0 && i < sizeof(counts) / sizeof(counts[0]); i++) {
    int got = env_count(counts[i].var, counts[i].min, COUNT_MAX, counts[i].field, err, errlen);
    if (got > 0) cfg->schedule_set = true;
    rc = got < 0 ? got : 0;
  }
  if (rc == 0) {
    int got = env_count("PD_INJECT_TOP_N", 0, COUNT_MAX, &cfg->top_n, err, errlen);
    rc = got < 0 ? got : 0;
  }
  if (rc == 0) rc = env_switch("PD_INJECT_WITH_STACK", &cfg->with_stack, err, errlen);
  if (rc == 0) rc = env_switch("PD_INJECT_TRACE_GZIP", &cfg->trace_gzip, err, errlen);
  if (rc == 0) rc = env_switch("PD_INJECT_PROBE", &cfg->probe, err, errlen);
  const char *lvl = getenv("PD_INJECT_PROFILE_LEVEL");
  if (rc == 0 && lvl != NULL) {
    if (strcmp(lvl, "lean") == 0) cfg->profile_level = PD_INJECT_LEVEL_LEAN;
    else if (strcmp(lvl, "full") == 0) cfg->profile_level = PD_INJECT_LEVEL_FULL;
    else {
      env_bad(err, errlen, "PD_INJECT_PROFILE_LEVEL", lvl, "lean or full");
      rc = PD_EINVAL;
    }
  }
  const char *root = getenv("PD_INJECT_ROOT_PID");
  if (rc == 0 && root != NULL) {
    char *end = NULL;
    errno = 0;
    long pid = strtol(root, &end, 10);
    if (root[0] == '\0' || *end != '\0' || errno != 0 || pid <= 0 || pid > INT_MAX) {
      env_bad(err, errlen, "PD_INJECT_ROOT_PID", root, "a process id");
      rc = PD_EINVAL;
    } else {
      cfg->root_pid = pid;
    }
  }
  if (rc != 0) return rc;
  char why[512];
  rc = pd_inject_config_validate(cfg, why, sizeof why);
  if (rc != 0) snprintf(err, errlen, "PD_INJECT_* environment: %s", why);
  return rc;
}

/* ---- to the environment ----------------------------------------------------------------- */

int pd_inject_config_to_env(const pd_inject_config_t *cfg) {
  char num[32];
  const pd_schedule_t *s = &cfg->schedule;
  const struct {
    const char *var;
    const char *value; /* NULL: the number n */
    int n;
    bool schedule; /* a schedule count: set only when the schedule was given */
  } texts[] = {
      {"PD_INJECT_TRACE_DIR", cfg->trace_dir, 0, false},
      {"PD_INJECT_OUTPUT_JSON", cfg->output_json, 0, false},
      {"PD_INJECT_STEP_KERNEL", cfg->step_kernel, 0, false},
      {"PD_INJECT_STEP_RANGE", cfg->step_range, 0, false},
      {"PD_INJECT_NAME", cfg->name, 0, false},
      {"PD_INJECT_WITH_STACK", cfg->with_stack ? "1" : "0", 0, false},
      {"PD_INJECT_TRACE_GZIP", cfg->trace_gzip ? "1" : "0", 0, false},
      {"PD_INJECT_PROBE", cfg->probe ? "1" : "0", 0, false},
      {"PD_INJECT_PROFILE_LEVEL", cfg->profile_level == PD_INJECT_LEVEL_FULL ? "full" : "lean", 0, false},
      {"PD_INJECT_TOP_N", NULL, cfg->top_n, false},
      {"PD_INJECT_SKIP_FIRST", NULL, s->skip_first, true},
      {"PD_INJECT_WAIT", NULL, s->wait, true},
      {"PD_INJECT_WARMUP", NULL, s->warmup, true},
      {"PD_INJECT_ACTIVE", NULL, s->active, true},
      {"PD_INJECT_REPEAT", NULL, s->repeat, true},
  };
  for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
    const char *v = texts[i].value;
    if (v != NULL && v[0] == '\0') {
      /* empty: unset, so that a value inherited from pd_run's own environment is gone */
      if (unsetenv(texts[i].var) != 0) return PD_ENOMEM;
      continue;
    }
    if (texts[i].schedule && !cfg->schedule_set) {
      if (unsetenv(texts[i].var) != 0) return PD_ENOMEM;
      continue;
    }
    if (v == NULL) {
      snprintf(num, sizeof num, "%d", texts[i].n);
      v = num;
    }
    if (setenv(texts[i].var, v, 1) != 0) return PD_ENOMEM;
  }
  return 0;
}

int pd_inject_output_json_for(const pd_inject_config_t *cfg, long pid, const char *rank, char *buf, size_t buflen) {
  const char *path = cfg->output_json;
  int n;
  if (cfg->root_pid == 0 || cfg->root_pid == pid) {
    n = snprintf(buf, buflen, "%s", path);
  } else {
    size_t len = strlen(path);
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t stem = dot != NULL && dot != base ? (size_t)(dot - path) : len;
    char tail[64] = "";
    if (rank != NULL && rank[0] != '\0' && strlen(rank) < 16 && strspn(rank, "0123456789") == strlen(rank))
      snprintf(tail, sizeof tail, ".rank%s", rank);
    n = snprintf(buf, buflen, "%.*s.pid%ld%s%s", (int)stem, path, pid, tail, stem < len ? path + stem : ".json");
  }
  if (n < 0 || (size_t)n >= buflen) {
    if (buflen > 0) buf[0] = '\0';
    return PD_EINVAL;
  }
  return 0;
}
