/* analyze_options.c: profile_analyze's option parser (analyze_cli.h). */
#include "analyze_cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pd/pd_out.h"

/* Writes one line into err; returns PD_ACLI_BAD. */
static pd_analyze_cli_status_t bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static pd_analyze_cli_status_t bad(char *err, size_t errlen, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pd_term_escape_line(err, errlen, line); /* a value with a newline keeps it one line */
  return PD_ACLI_BAD;
}

static bool parse_int(const char *s, long lo, long hi, int *out) {
  if (s == NULL || *s == 0) return false;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *end != 0 || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_seconds(const char *s, double *out) {
  if (s == NULL || *s == 0) return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || *end != 0 || !isfinite(v) || v < 0 || v > 1e6) return false;
  *out = v;
  return true;
}

static bool same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (strcmp(a, b) == 0) return true;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

pd_analyze_cli_status_t pd_analyze_cli_parse(int argc, char *const argv[], pd_analyze_cli_t *o, char *err,
                                             size_t errlen) {
  memset(o, 0, sizeof(*o));
  o->top = 10;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return PD_ACLI_HELP;
    if (strcmp(arg, "--version") == 0) return PD_ACLI_VERSION;
    if (arg[0] != '-' || strcmp(arg, "-") == 0) {
      if (o->trace != NULL) return bad(err, errlen, "more than one TRACE given ('%s' and '%s')", o->trace, arg);
      o->trace = arg;
      continue;
    }
    if (strcmp(arg, "--breakdown") == 0) {
      o->breakdown = true;
      continue;
    }
    /* The rest take a value: "--flag VALUE" or "--flag=VALUE". */
    char flag[64];
    const char *value = NULL;
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    if (eq != NULL) {
      snprintf(flag, sizeof flag, "%.*s", (int)(eq - arg), arg);
      value = eq + 1;
    } else {
      snprintf(flag, sizeof flag, "%s", arg);
    }
    static const char *const valued[] = {"-t",     "--top",  "--aggregate-by", "--order-by",         "--min-time",
                                         "--type", "--html", "--diff",         "--json",             "--group_by_stack_n",
                                         "--export_stacks", "--stacks_metric"};
    bool known = false;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= strcmp(flag, valued[k]) == 0;
    if (!known) return bad(err, errlen, "unknown option '%s'", arg);
    if (value == NULL) {
      if (i + 1 >= argc) return bad(err, errlen, "%s needs a value", flag);
      value = argv[++i];
    }
    if (strcmp(flag, "-t") == 0 || strcmp(flag, "--top") == 0) {
      if (!parse_int(value, 1, INT_MAX, &o->top))
        return bad(err, errlen, "bad %s value '%s' (allowed: an integer >= 1)", flag, value);
    } else if (strcmp(flag, "--aggregate-by") == 0) {
      if (strcmp(value, "name") == 0) o->opts.aggregate = PD_AGG_NAME;
      else if (strcmp(value, "type") == 0) o->opts.aggregate = PD_AGG_TYPE;
      else return bad(err, errlen, "bad --aggregate-by value '%s' (allowed: name, type)", value);
    } else if (strcmp(flag, "--order-by") == 0) {
      if (strcmp(value, "time") == 0) o->opts.order = PD_ORDER_TIME;
      else if (strcmp(value, "memory") == 0) o->opts.order = PD_ORDER_MEMORY;
      else if (strcmp(value, "calls") == 0) o->opts.order = PD_ORDER_CALLS;
      else return bad(err, errlen, "bad --order-by value '%s' (allowed: time, memory, calls)", value);
    } else if (strcmp(flag, "--min-time") == 0) {
      double s;
      if (!parse_seconds(value, &s))
        return bad(err, errlen, "bad --min-time value '%s' (allowed: seconds, 0 <= S <= 1e6)", value);
      o->opts.min_time_ns = (int64_t)llround(s * 1e9);
    } else if (strcmp(flag, "--group_by_stack_n") == 0) {
      if (!parse_int(value, 1, 100, &o->group_by_stack_n))
        return bad(err, errlen, "bad --group_by_stack_n value '%s' (allowed: an integer from 1 to 100)", value);
    } else if (strcmp(flag, "--stacks_metric") == 0) {
      if (strcmp(value, "self_cuda_time_total") == 0) o->stacks_metric = PD_SORT_SELF_CUDA_TIME_TOTAL;
      else if (strcmp(value, "self_cpu_time_total") == 0) o->stacks_metric = PD_SORT_SELF_CPU_TIME_TOTAL;
      else return bad(err, errlen, "bad --stacks_metric value '%s' (allowed: self_cuda_time_total, self_cpu_time_total)", value);
      o->stacks_metric_set = true;
    } else if (strcmp(flag, "--type") == 0) {
      if (*value == 0) return bad(err, errlen, "--type needs a non-empty NAME");
      o->opts.type = value;
    } else {
      if (*value == 0) return bad(err, errlen, "%s needs a file name", flag);
      if (strcmp(flag, "--html") == 0) o->html = value;
      else if (strcmp(flag, "--diff") == 0) o->diff = value;
      else if (strcmp(flag, "--export_stacks") == 0) o->export_stacks = value;
      else o->json = value;
    }
  }
  if (o->trace == NULL) return bad(err, errlen, "no TRACE given");
  if (o->stacks_metric_set && o->export_stacks == NULL) return bad(err, errlen, "--stacks_metric needs --export_stacks");
  if (!o->stacks_metric_set) o->stacks_metric = PD_SORT_SELF_CUDA_TIME_TOTAL;
  const char *inputs[] = {o->trace, o->diff};
  const char *outputs[] = {o->html, o->json, o->export_stacks};
  for (size_t i = 0; i < 2; i++) {
    for (size_t j = 0; j < 3; j++) {
      if (inputs[i] != NULL && outputs[j] != NULL && same_file(inputs[i], outputs[j]))
        return bad(err, errlen, "output '%s' would overwrite the input trace", outputs[j]);
    }
  }
  for (size_t i = 0; i < 3; i++)
    for (size_t j = i + 1; j < 3; j++)
      if (outputs[i] != NULL && outputs[j] != NULL && same_file(outputs[i], outputs[j]))
        return bad(err, errlen, "two outputs name the same file '%s'", outputs[i]);
  return PD_ACLI_RUN;
}

