/* cli_args.c: the programs' shared option parser (cli_args.h). */
#include "cli_args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_out.h"

void pd_cli_iter_init(pd_cli_iter_t *it, const pd_cli_spec_t *spec, int argc, char *const argv[], int first) {
  it->spec = spec;
  it->argc = argc;
  it->argv = argv;
  it->next = first;
}

const void *pd_cli_find(const pd_cli_spec_t *spec, const char *name, size_t len) {
  const char *row = spec->rows;
  for (size_t i = 0; i < spec->count; i++, row += spec->stride) {
    const pd_cli_opt_t *o = (const pd_cli_opt_t *)(const void *)row;
    if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return row;
  }
  return NULL;
}

pd_cli_kind_t pd_cli_next(pd_cli_iter_t *it, pd_cli_item_t *item) {
  const unsigned style = it->spec->style;
  memset(item, 0, sizeof(*item));
  item->id = -1;
  if (it->next >= it->argc) return item->kind = PD_CLI_END;
  const char *arg = it->argv[it->next++];
  item->arg = arg;
  item->name_len = strlen(arg);
  if (arg[0] != '-' || ((style & PD_CLI_DASH_POSITIONAL) && arg[1] == '\0')) return item->kind = PD_CLI_POSITIONAL;
  const char *eq = (style & PD_CLI_EQ) && strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
  if (eq != NULL) item->name_len = (size_t)(eq - arg);
  item->row = pd_cli_find(it->spec, arg, item->name_len);
  if (item->row == NULL) return item->kind = PD_CLI_UNKNOWN;
  const pd_cli_opt_t *o = item->row;
  item->id = o->id;
  if (o->arity == PD_CLI_SWITCH) return item->kind = eq != NULL ? PD_CLI_SWITCH_VALUE : PD_CLI_OPTION;
  if (eq != NULL) {
    item->value = eq + 1;
  } else if (it->next < it->argc &&
             !((style & PD_CLI_NO_DASHDASH_VALUE) && strncmp(it->argv[it->next], "--", 2) == 0)) {
    item->value = it->argv[it->next++];
  } else {
    return item->kind = PD_CLI_NO_VALUE;
  }
  return item->kind = PD_CLI_OPTION;
}

bool pd_cli_int(const char *s, int64_t lo, int64_t hi, bool strict, int64_t *out) {
  if (s == NULL || *s == '\0') return false;
  if (strict && !(*s == '-' || (*s >= '0' && *s <= '9'))) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = (int64_t)v;
  return true;
}

bool pd_cli_number(const char *s, bool strict, double *out) {
  if (s == NULL || *s == '\0') return false;
  if (strict && !(*s == '-' || *s == '.' || (*s >= '0' && *s <= '9'))) return false;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) return false;
  *out = v;
  return true;
}

int pd_cli_choice(const char *value, const char *const *choices) {
  for (int i = 0; choices[i] != NULL; i++)
    if (strcmp(value, choices[i]) == 0) return i;
  return -1;
}

void pd_cli_errorf(char *err, size_t errlen, const char *fmt, ...) {
  char line[1024]; /* a longer message is cut here, before escaping */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pd_term_escape_line(err, errlen, line);
}
