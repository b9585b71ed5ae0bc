/* analyze_options.c: profile_analyze's option parser (analyze_cli.h): a table of its options
 * over the shared parser (src/cli/common/cli_args.h). */
#include "analyze_cli.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_args.h"

/* Writes one line into err; returns PD_ACLI_BAD. */
#define bad(err, errlen, ...) (pd_cli_errorf((err), (errlen), __VA_ARGS__), PD_ACLI_BAD)

/* The options, one row each (cli_args.h): what each takes; the switch below what it means. */
enum { A_HELP, A_VERSION, A_BREAKDOWN, A_TOP, A_AGGREGATE, A_ORDER, A_MIN_TIME, A_TYPE, A_HTML, A_DIFF, A_JSON,
       A_GROUP_BY_STACK_N, A_EXPORT_STACKS, A_STACKS_METRIC };
static const pd_cli_opt_t k_opts[] = {
    {"-h", PD_CLI_SWITCH, A_HELP},
    {"--help", PD_CLI_SWITCH, A_HELP},
    {"--version", PD_CLI_SWITCH, A_VERSION},
    {"--breakdown", PD_CLI_SWITCH, A_BREAKDOWN},
    {"-t", PD_CLI_VALUE, A_TOP},
    {"--top", PD_CLI_VALUE, A_TOP},
    {"--aggregate-by", PD_CLI_VALUE, A_AGGREGATE},
    {"--order-by", PD_CLI_VALUE, A_ORDER},
    {"--min-time", PD_CLI_VALUE, A_MIN_TIME},
    {"--type", PD_CLI_VALUE, A_TYPE},
    {"--html", PD_CLI_VALUE, A_HTML},
    {"--diff", PD_CLI_VALUE, A_DIFF},
    {"--json", PD_CLI_VALUE, A_JSON},
    {"--group_by_stack_n", PD_CLI_VALUE, A_GROUP_BY_STACK_N},
    {"--export_stacks", PD_CLI_VALUE, A_EXPORT_STACKS},
    {"--stacks_metric", PD_CLI_VALUE, A_STACKS_METRIC},
};
/* "--flag VALUE" or "--flag=VALUE" (any next argument is a value); "-" is a TRACE */
static const pd_cli_spec_t k_spec = PD_CLI_SPEC(k_opts, PD_CLI_EQ | PD_CLI_DASH_POSITIONAL);

static const char *const k_aggregate[] = {"name", "type", NULL};
static const pd_aggregate_t k_aggregate_v[] = {PD_AGG_NAME, PD_AGG_TYPE};
static const char *const k_order[] = {"time", "memory", "calls", NULL};
static const pd_order_t k_order_v[] = {PD_ORDER_TIME, PD_ORDER_MEMORY, PD_ORDER_CALLS};
static const char *const k_metric[] = {"self_cuda_time_total", "self_cpu_time_total", NULL};
static const pd_sort_key_t k_metric_v[] = {PD_SORT_SELF_CUDA_TIME_TOTAL, PD_SORT_SELF_CPU_TIME_TOTAL};

static bool same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (strcmp(a, b) == 0) return true;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Applies one option with its value; returns PD_ACLI_RUN to go on, or the status to
 * return (help, version, bad input). */
static pd_analyze_cli_status_t apply(pd_analyze_cli_t *o, const pd_cli_item_t *it, char *err, size_t errlen) {
  const char *flag = ((const pd_cli_opt_t *)it->row)->name, *value = it->value;
  int64_t n = 0;
  int k = -1;
  double s = 0;
  switch (it->id) {
  case A_HELP:
    return PD_ACLI_HELP;
  case A_VERSION:
    return PD_ACLI_VERSION;
  case A_BREAKDOWN:
    o->breakdown = true;
    break;
  case A_TOP:
    if (!pd_cli_int(value, 1, INT_MAX, false, &n))
      return bad(err, errlen, "bad %s value '%s' (allowed: an integer >= 1)", flag, value);
    o->top = (int)n;
    break;
  case A_AGGREGATE:
    if ((k = pd_cli_choice(value, k_aggregate)) < 0)
      return bad(err, errlen, "bad --aggregate-by value '%s' (allowed: name, type)", value);
    o->opts.aggregate = k_aggregate_v[k];
    break;
  case A_ORDER:
    if ((k = pd_cli_choice(value, k_order)) < 0)
      return bad(err, errlen, "bad --order-by value '%s' (allowed: time, memory, calls)", value);
    o->opts.order = k_order_v[k];
    break;
  case A_MIN_TIME:
    if (!pd_cli_number(value, false, &s) || s < 0 || s > 1e6)
      return bad(err, errlen, "bad --min-time value '%s' (allowed: seconds, 0 <= S <= 1e6)", value);
    o->opts.min_time_ns = (int64_t)llround(s * 1e9);
    break;
  case A_GROUP_BY_STACK_N:
    if (!pd_cli_int(value, 1, 100, false, &n))
      return bad(err, errlen, "bad --group_by_stack_n value '%s' (allowed: an integer from 1 to 100)", value);
    o->group_by_stack_n = (int)n;
    break;
  case A_STACKS_METRIC:
    if ((k = pd_cli_choice(value, k_metric)) < 0)
      return bad(err, errlen, "bad --stacks_metric value '%s' (allowed: self_cuda_time_total, self_cpu_time_total)",
                 value);
    o->stacks_metric = k_metric_v[k];
    o->stacks_metric_set = true;
    break;
  case A_TYPE:
    if (*value == 0) return bad(err, errlen, "--type needs a non-empty NAME");
    o->opts.type = value;
    break;
  default: /* the four file names */
    if (*value == 0) return bad(err, errlen, "%s needs a file name", flag);
    if (it->id == A_HTML) o->html = value;
    else if (it->id == A_DIFF) o->diff = value;
    else if (it->id == A_EXPORT_STACKS) o->export_stacks = value;
    else o->json = value;
    break;
  }
  return PD_ACLI_RUN;
}

pd_analyze_cli_status_t pd_analyze_cli_parse(int argc, char *const argv[], pd_analyze_cli_t *o, char *err,
                                             size_t errlen) {
  memset(o, 0, sizeof(*o));
  o->top = 10;
  pd_cli_iter_t iter;
  pd_cli_item_t it;
  pd_cli_iter_init(&iter, &k_spec, argc, argv, 1);
  while (pd_cli_next(&iter, &it) != PD_CLI_END) {
    switch (it.kind) {
    case PD_CLI_POSITIONAL:
      if (o->trace != NULL) return bad(err, errlen, "more than one TRACE given ('%s' and '%s')", o->trace, it.arg);
      o->trace = it.arg;
      break;
    case PD_CLI_OPTION: {
      pd_analyze_cli_status_t st = apply(o, &it, err, errlen);
      if (st != PD_ACLI_RUN) return st;
      break;
    }
    case PD_CLI_NO_VALUE:
      return bad(err, errlen, "%s needs a value", it.arg);
    default: /* unknown, or a switch given "=VALUE" */
      return bad(err, errlen, "unknown option '%s'", it.arg);
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

