/* test_cli_parsers.c: profile_analyze's and profile_compare's option parsers in process
 * (pd_analyze_cli_parse, pd_compare_cli_parse): every form and flag, and each bad input
 * giving one line that names it. The programs' messages and exit codes around them are
 * tested by running the programs (tests/unit/analyze/test_cli.c, gate/test_gate_cli.c). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "analyze_cli.h"
#include "compare_cli.h"
#include "pd/pd_common.h"

#define ARGV(prog, ...) ((char *const *)(const char *const[]){prog, __VA_ARGS__, NULL})
#define ARGC(prog, ...) ((int)(sizeof((const char *const[]){prog, __VA_ARGS__}) / sizeof(char *)))
#define APARSE(o, err, ...) \
  pd_analyze_cli_parse(ARGC("profile_analyze", __VA_ARGS__), ARGV("profile_analyze", __VA_ARGS__), (o), (err), sizeof(err))
#define CPARSE(c, err, ...) \
  pd_compare_cli_parse(ARGC("profile_compare", __VA_ARGS__), ARGV("profile_compare", __VA_ARGS__), (c), (err), sizeof(err))

Test(analyze_cli, every_flag_in_both_syntaxes) {
  pd_analyze_cli_t o;
  char err[512] = "";
  int rc = APARSE(&o, err, "t.json", "-t", "3", "--aggregate-by=type", "--order-by", "calls", "--min-time", "0.5",
                  "--type=gemm", "--breakdown", "--html", "r.html", "--diff=o.json", "--json", "r.json",
                  "--group_by_stack_n", "100", "--export_stacks", "s.txt", "--stacks_metric=self_cpu_time_total");
  cr_assert_eq(rc, PD_ACLI_RUN, "%s", err);
  cr_expect_str_eq(o.trace, "t.json");
  cr_expect_eq(o.top, 3);
  cr_expect_eq(o.opts.aggregate, PD_AGG_TYPE);
  cr_expect_eq(o.opts.order, PD_ORDER_CALLS);
  cr_expect_eq(o.opts.min_time_ns, 500000000);
  cr_expect_str_eq(o.opts.type, "gemm");
  cr_expect(o.breakdown);
  cr_expect_str_eq(o.html, "r.html");
  cr_expect_str_eq(o.diff, "o.json");
  cr_expect_str_eq(o.json, "r.json");
  cr_expect_eq(o.group_by_stack_n, 100);
  cr_expect_str_eq(o.export_stacks, "s.txt");
  cr_expect_eq(o.stacks_metric, PD_SORT_SELF_CPU_TIME_TOTAL);
  cr_assert_eq(APARSE(&o, err, "t.json"), PD_ACLI_RUN, "%s", err);
  cr_expect_eq(o.top, 10, "default rows");
  cr_expect_eq(o.stacks_metric, PD_SORT_SELF_CUDA_TIME_TOTAL);
  cr_expect_eq(APARSE(&o, err, "t.json", "--help"), PD_ACLI_HELP);
  cr_expect_eq(APARSE(&o, err, "-h"), PD_ACLI_HELP);
  cr_expect_eq(APARSE(&o, err, "--version"), PD_ACLI_VERSION);
}

static const struct {
  const char *args[5];
  const char *message;
} analyze_bad[] = {
    {{NULL}, "no TRACE given"},
    {{"a.json", "b.json"}, "more than one TRACE given ('a.json' and 'b.json')"},
    {{"t.json", "-t", "0"}, "bad -t value '0' (allowed: an integer >= 1)"},
    {{"t.json", "--top=x"}, "bad --top value 'x' (allowed: an integer >= 1)"},
    {{"t.json", "-t", "99999999999999999999"}, "bad -t value '99999999999999999999' (allowed: an integer >= 1)"},
    {{"t.json", "--min-time", "1e400"}, "bad --min-time value '1e400' (allowed: seconds, 0 <= S <= 1e6)"},
    {{"t.json", "--min-time", "-1"}, "bad --min-time value '-1' (allowed: seconds, 0 <= S <= 1e6)"},
    {{"t.json", "--min-time", "nan"}, "bad --min-time value 'nan' (allowed: seconds, 0 <= S <= 1e6)"},
    {{"t.json", "--group_by_stack_n", "101"},
     "bad --group_by_stack_n value '101' (allowed: an integer from 1 to 100)"},
    {{"t.json", "--aggregate-by", "op"}, "bad --aggregate-by value 'op' (allowed: name, type)"},
    {{"t.json", "--order-by", "size"}, "bad --order-by value 'size' (allowed: time, memory, calls)"},
    {{"t.json", "--type="}, "--type needs a non-empty NAME"},
    {{"t.json", "--json="}, "--json needs a file name"},
    {{"t.json", "--json"}, "--json needs a value"},
    {{"t.json", "--nope"}, "unknown option '--nope'"},
    {{"t.json", "--stacks_metric", "count"},
     "bad --stacks_metric value 'count' (allowed: self_cuda_time_total, self_cpu_time_total)"},
    {{"t.json", "--stacks_metric", "self_cpu_time_total"}, "--stacks_metric needs --export_stacks"},
    {{"t.json", "--json", "t.json"}, "output 't.json' would overwrite the input trace"},
    {{"t.json", "--diff", "d.json", "--html=d.json"}, "output 'd.json' would overwrite the input trace"},
    {{"t.json", "--json", "r", "--html=r"}, "two outputs name the same file 'r'"},
    /* fuzz finding (tests/fuzz/analyze_options/findings): a value with a newline made the
     * message two lines; control characters are shown as \xNN */
    {{"a.json", "b\nc"}, "more than one TRACE given ('a.json' and 'b\\x0ac')"},
    {{"t.json", "-t", "\x1b[2J"}, "bad -t value '\\x1b[2J' (allowed: an integer >= 1)"},
};

Test(analyze_cli, bad_input_is_one_line_naming_it) {
  for (size_t i = 0; i < sizeof analyze_bad / sizeof analyze_bad[0]; i++) {
    char *argv[7] = {"profile_analyze"};
    int argc = 1;
    for (int k = 0; k < 5 && analyze_bad[i].args[k] != NULL; k++) argv[argc++] = (char *)analyze_bad[i].args[k];
    argv[argc] = NULL;
    pd_analyze_cli_t o;
    char err[512] = "";
    cr_expect_eq(pd_analyze_cli_parse(argc, argv, &o, err, sizeof err), PD_ACLI_BAD, "case %zu", i);
    cr_expect_str_eq(err, analyze_bad[i].message, "case %zu", i);
    cr_expect_null(strchr(err, '\n'), "case %zu", i);
  }
}

Test(compare_cli, every_form) {
  pd_compare_cli_t c;
  char err[512] = "";
  cr_assert_eq(CPARSE(&c, err, "cur.json", "base.json", "--json", "r.json", "--markdown", "r.md", "--alpha", "0.05",
                      "--quiet"),
               0, "%s", err);
  cr_expect_eq(c.mode, PD_CCLI_COMPARE);
  cr_expect_eq(c.nfiles, 2u);
  cr_expect_str_eq(c.files[0], "cur.json");
  cr_expect_str_eq(c.files[1], "base.json");
  cr_expect_str_eq(c.json_out, "r.json");
  cr_expect_str_eq(c.md_out, "r.md");
  cr_expect_float_eq(c.alpha, 0.05, 1e-15);
  cr_expect(c.quiet);
  pd_compare_cli_free(&c);
  cr_assert_eq(CPARSE(&c, err, "--base", "b1", "b2", "--head", "h1", "h2"), 0, "%s", err);
  cr_expect_eq(c.mode, PD_CCLI_AB);
  cr_expect_eq(c.nbase, 2u);
  cr_expect_eq(c.nhead, 2u);
  cr_expect_str_eq(c.base[1], "b2");
  cr_expect_str_eq(c.head[0], "h1");
  cr_expect_float_eq(c.alpha, 0.01, 1e-15, "default alpha");
  pd_compare_cli_free(&c);
  cr_assert_eq(CPARSE(&c, err, "--promote", "r1.json", "r2.json", "-o", "b.json", "--commit", "abc", "--command", "x y",
                      "--date", "2026-11-23"),
               0, "%s", err);
  cr_expect_eq(c.mode, PD_CCLI_PROMOTE);
  cr_expect_eq(c.nruns, 2u);
  cr_expect_str_eq(c.out, "b.json");
  cr_expect_str_eq(c.commit, "abc");
  cr_expect_str_eq(c.command, "x y");
  cr_expect_str_eq(c.date, "2026-11-23");
  pd_compare_cli_free(&c);
  cr_assert_eq(CPARSE(&c, err, "--slug", "m.json"), 0, "%s", err);
  cr_expect_eq(c.mode, PD_CCLI_SLUG);
  cr_expect_str_eq(c.files[0], "m.json");
  pd_compare_cli_free(&c);
  cr_assert_eq(CPARSE(&c, err, "--help"), 0);
  cr_expect_eq(c.mode, PD_CCLI_HELP);
  pd_compare_cli_free(&c);
  cr_assert_eq(CPARSE(&c, err, "--version"), 0);
  cr_expect_eq(c.mode, PD_CCLI_VERSION);
  pd_compare_cli_free(&c);
  pd_compare_cli_free(NULL);
}

static const struct {
  const char *args[6];
  const char *message;
} compare_bad[] = {
    {{NULL}, "need CURRENT.json and BASELINE.json (or --base RUN.json... --head RUN.json...)"},
    {{"a.json"}, "need CURRENT.json and BASELINE.json (or --base RUN.json... --head RUN.json...)"},
    {{"a", "b", "c"}, "one CURRENT and one BASELINE file, got a third: c"},
    {{"a", "b", "--alpha", "0"}, "--alpha must be a number with 0 < alpha <= 0.5, got '0'"},
    {{"a", "b", "--alpha", "0.6"}, "--alpha must be a number with 0 < alpha <= 0.5, got '0.6'"},
    {{"a", "b", "--alpha", "nan"}, "--alpha must be a number with 0 < alpha <= 0.5, got 'nan'"},
    {{"a", "b", "--alpha", "1e-400x"}, "--alpha must be a number with 0 < alpha <= 0.5, got '1e-400x'"},
    {{"a", "b", "--alpha"}, "--alpha needs a value"},
    {{"a", "b", "--json", "a"}, "--json a is also an input; choose another file"},
    {{"a", "b", "--markdown", "b"}, "--markdown b is also an input; choose another file"},
    {{"a", "b", "--json", "r", "--markdown"}, "--markdown needs a value"},
    {{"a", "b", "--bogus"}, "unknown option: --bogus"},
    {{"--base", "b1", "--head", "h1"},
     "--base and --head take one run per round each, the same number, at least 2; got 1 and 1"},
    {{"--base", "b1", "b2", "--head", "h1"},
     "--base and --head take one run per round each, the same number, at least 2; got 2 and 1"},
    {{"x", "--base", "b1", "b2", "--head"}, "with --base/--head every file follows one of them; 'x' does not"},
    {{"--promote", "r.json"}, "--promote needs at least one metrics JSON and -o BASELINE.json"},
    {{"--promote", "-o", "b.json"}, "--promote needs at least one metrics JSON and -o BASELINE.json"},
    {{"--promote", "r.json", "-o"}, "-o needs a value"},
    {{"--promote", "r.json", "-x"}, "unknown option for --promote: -x"},
    {{"--slug"}, "--slug takes exactly one metrics JSON"},
    {{"--slug", "a", "b"}, "--slug takes exactly one metrics JSON"},
    /* fuzz finding (tests/fuzz/compare_options/findings): one line whatever a value holds */
    {{"a", "b", "c\nd"}, "one CURRENT and one BASELINE file, got a third: c\\x0ad"},
    {{"a", "b", "--\x01so"}, "unknown option: --\\x01so"},
};

Test(compare_cli, bad_input_is_one_line_naming_it) {
  for (size_t i = 0; i < sizeof compare_bad / sizeof compare_bad[0]; i++) {
    char *argv[8] = {"profile_compare"};
    int argc = 1;
    for (int k = 0; k < 6 && compare_bad[i].args[k] != NULL; k++) argv[argc++] = (char *)compare_bad[i].args[k];
    argv[argc] = NULL;
    pd_compare_cli_t c;
    char err[512] = "";
    cr_expect_eq(pd_compare_cli_parse(argc, argv, &c, err, sizeof err), PD_EINVAL, "case %zu", i);
    cr_expect_str_eq(err, compare_bad[i].message, "case %zu", i);
    cr_expect_null(strchr(err, '\n'), "case %zu", i);
    pd_compare_cli_free(&c);
  }
}
