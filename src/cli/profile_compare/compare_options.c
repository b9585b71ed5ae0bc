/* compare_options.c: profile_compare's option parser (compare_cli.h): its forms and options as
 * tables over the shared parser (src/cli/common/cli_args.h). */
#include "compare_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "pd/pd_common.h"

/* Writes one line into err; returns PD_EINVAL. */
#define bad(err, errlen, ...) (pd_cli_errorf((err), (errlen), __VA_ARGS__), PD_EINVAL)

/* The option tables (cli_args.h). "--flag VALUE" only (no "="), any next argument is the
 * value; "-" is a file. The form is chosen by the first argument alone. */
static const struct {
  const char *name;
  pd_compare_cli_mode_t mode;
} k_forms[] = {{"--help", PD_CCLI_HELP}, {"-h", PD_CCLI_HELP}, {"--version", PD_CCLI_VERSION},
               {"--slug", PD_CCLI_SLUG}, {"--promote", PD_CCLI_PROMOTE}};

enum { P_OUT, P_COMMIT, P_COMMAND, P_DATE };
static const pd_cli_opt_t k_promote_opts[] = {
    {"-o", PD_CLI_VALUE, P_OUT},           {"--output", PD_CLI_VALUE, P_OUT}, {"--commit", PD_CLI_VALUE, P_COMMIT},
    {"--command", PD_CLI_VALUE, P_COMMAND}, {"--date", PD_CLI_VALUE, P_DATE},
};
static const pd_cli_spec_t k_promote_spec = PD_CLI_SPEC(k_promote_opts, PD_CLI_DASH_POSITIONAL);

enum { C_JSON, C_MARKDOWN, C_ALPHA, C_BASE, C_HEAD, C_QUIET, C_KEEP, C_PRIMARY, C_NORMALIZE, C_ADJUST, C_UNPAIRED };
static const pd_cli_opt_t k_compare_opts[] = {
    {"--json", PD_CLI_VALUE, C_JSON},  {"--markdown", PD_CLI_VALUE, C_MARKDOWN}, {"--alpha", PD_CLI_VALUE, C_ALPHA},
    {"--base", PD_CLI_SWITCH, C_BASE}, {"--head", PD_CLI_SWITCH, C_HEAD},         {"--quiet", PD_CLI_SWITCH, C_QUIET},
    {"--keep", PD_CLI_VALUE, C_KEEP},  {"--primary", PD_CLI_VALUE, C_PRIMARY},   {"--normalize", PD_CLI_SWITCH, C_NORMALIZE},
    {"--adjust", PD_CLI_SWITCH, C_ADJUST},     {"--unpaired", PD_CLI_SWITCH, C_UNPAIRED},
};
static const pd_cli_spec_t k_compare_spec = PD_CLI_SPEC(k_compare_opts, PD_CLI_DASH_POSITIONAL);

static int parse_slug(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  c->mode = PD_CCLI_SLUG;
  if (argc != 3) return bad(err, errlen, "--slug takes exactly one metrics JSON");
  c->files[0] = argv[2];
  c->nfiles = 1;
  return 0;
}

static int parse_promote(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  c->mode = PD_CCLI_PROMOTE;
  const char **dst[] = {[P_OUT] = &c->out, [P_COMMIT] = &c->commit, [P_COMMAND] = &c->command, [P_DATE] = &c->date};
  pd_cli_iter_t iter;
  pd_cli_item_t it;
  pd_cli_iter_init(&iter, &k_promote_spec, argc, argv, 2);
  while (pd_cli_next(&iter, &it) != PD_CLI_END) {
    if (it.kind == PD_CLI_OPTION) *dst[it.id] = it.value;
    else if (it.kind == PD_CLI_POSITIONAL) c->runs[c->nruns++] = it.arg;
    else if (it.kind == PD_CLI_NO_VALUE) return bad(err, errlen, "%s needs a value", it.arg);
    else return bad(err, errlen, "unknown option for --promote: %s", it.arg);
  }
  if (c->nruns == 0 || c->out == NULL)
    return bad(err, errlen, "--promote needs at least one metrics JSON and -o BASELINE.json");
  return 0;
}

static int parse_compare(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  int list = 0; /* 0 positional, 1 after --base, 2 after --head */
  bool ab = false;
  const char *ab_only = NULL; /* an A/B-only option given */
  pd_cli_iter_t iter;
  pd_cli_item_t it;
  pd_cli_iter_init(&iter, &k_compare_spec, argc, argv, 1);
  while (pd_cli_next(&iter, &it) != PD_CLI_END) {
    if (it.kind == PD_CLI_NO_VALUE) return bad(err, errlen, "%s needs a value", it.arg);
    if (it.kind != PD_CLI_OPTION && it.kind != PD_CLI_POSITIONAL) return bad(err, errlen, "unknown option: %s", it.arg);
    if (it.kind == PD_CLI_POSITIONAL) {
      if (list == 1) {
        c->base[c->nbase++] = it.arg;
      } else if (list == 2) {
        c->head[c->nhead++] = it.arg;
      } else if (c->nfiles < 2) {
        c->files[c->nfiles++] = it.arg;
      } else {
        return bad(err, errlen, "one CURRENT and one BASELINE file, got a third: %s", it.arg);
      }
      continue;
    }
    list = 0;
    switch (it.id) {
    case C_JSON:
      c->json_out = it.value;
      break;
    case C_MARKDOWN:
      c->md_out = it.value;
      break;
    case C_ALPHA:
      if (!pd_cli_number(it.value, false, &c->alpha) || !(c->alpha > 0.0 && c->alpha <= 0.5))
        return bad(err, errlen, "--alpha must be a number with 0 < alpha <= 0.5, got '%s'", it.value);
      break;
    case C_KEEP:
      ab_only = it.arg;
      if (!pd_cli_number(it.value, false, &c->keep) || !(c->keep > 0.0 && c->keep <= 1.0))
        return bad(err, errlen, "--keep must be a share of the runs with 0 < keep <= 1, got '%s'", it.value);
      break;
    case C_PRIMARY:
      ab_only = it.arg;
      if (it.value[0] == '\0') return bad(err, errlen, "--primary needs a metric name");
      c->primary = it.value;
      break;
    case C_NORMALIZE:
      ab_only = it.arg;
      c->normalize = true;
      break;
    case C_ADJUST:
      ab_only = it.arg;
      c->adjust = true;
      break;
    case C_UNPAIRED:
      ab_only = it.arg;
      c->unpaired = true;
      break;
    case C_BASE:
    case C_HEAD:
      ab = true;
      list = it.id == C_BASE ? 1 : 2;
      break;
    default:
      c->quiet = true;
      break;
    }
  }
  c->mode = ab ? PD_CCLI_AB : PD_CCLI_COMPARE;
  if (!ab && ab_only != NULL) return bad(err, errlen, "%s is an A/B option (--base ... --head ...)", ab_only);
  if (ab && c->nfiles > 0)
    return bad(err, errlen, "with --base/--head every file follows one of them; '%s' does not", c->files[0]);
  if (ab && (c->nbase < 2 || c->nbase != c->nhead))
    return bad(err, errlen, "--base and --head take one run per round each, the same number, at least 2; got %zu and %zu",
               c->nbase, c->nhead);
  if (!ab && c->nfiles != 2)
    return bad(err, errlen, "need CURRENT.json and BASELINE.json (or --base RUN.json... --head RUN.json...)");
  /* An output must not overwrite an input: the comparison would destroy its own evidence. */
  for (int o = 0; o < 2; o++) {
    const char *outp = o == 0 ? c->json_out : c->md_out;
    if (outp == NULL) continue;
    const char *const *lists[3] = {c->files, c->base, c->head};
    const size_t counts[3] = {c->nfiles, c->nbase, c->nhead};
    for (int l = 0; l < 3; l++)
      for (size_t k = 0; k < counts[l]; k++)
        if (strcmp(lists[l][k], outp) == 0)
          return bad(err, errlen, "%s %s is also an input; choose another file", o == 0 ? "--json" : "--markdown", outp);
  }
  if (c->json_out != NULL && c->md_out != NULL && strcmp(c->json_out, c->md_out) == 0)
    return bad(err, errlen, "--json and --markdown name the same file %s", c->json_out);
  return 0;
}

int pd_compare_cli_parse(int argc, char *const argv[], pd_compare_cli_t *c, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  c->alpha = 0.01;
  if (errlen > 0) err[0] = '\0';
  int form = -1;
  for (size_t i = 0; argc >= 2 && i < sizeof k_forms / sizeof k_forms[0]; i++)
    if (strcmp(argv[1], k_forms[i].name) == 0) form = (int)k_forms[i].mode;
  if (form == PD_CCLI_HELP || form == PD_CCLI_VERSION) {
    c->mode = (pd_compare_cli_mode_t)form;
    return 0;
  }
  if (form == PD_CCLI_SLUG) return parse_slug(argc, argv, c, err, errlen);
  /* each list holds at most every argument */
  const size_t n = argc > 0 ? (size_t)argc : 1;
  c->base = calloc(n, sizeof *c->base);
  c->head = calloc(n, sizeof *c->head);
  c->runs = calloc(n, sizeof *c->runs);
  if (c->base == NULL || c->head == NULL || c->runs == NULL) {
    snprintf(err, errlen, "out of memory");
    return PD_ENOMEM;
  }
  if (form == PD_CCLI_PROMOTE) return parse_promote(argc, argv, c, err, errlen);
  return parse_compare(argc, argv, c, err, errlen);
}

void pd_compare_cli_free(pd_compare_cli_t *c) {
  if (c == NULL) return;
  free(c->base);
  free(c->head);
  free(c->runs);
  c->base = c->head = c->runs = NULL;
}
