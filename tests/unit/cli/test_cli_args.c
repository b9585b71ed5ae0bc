/* test_cli_args.c: the option parser the three programs share (src/cli/common/cli_args.h):
 * each style flag of a table (the "=" form, a following "--x" that is no value, "-" as a
 * positional argument), what it says about unknown names, missing and unwanted values,
 * the value parsers' strict and lenient forms, choices, and the one-line error writer. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli_args.h"

enum { O_HELP, O_TOP, O_QUIET };
static const pd_cli_opt_t k_opts[] = {
    {"-t", PD_CLI_VALUE, O_TOP}, {"--top", PD_CLI_VALUE, O_TOP}, {"--quiet", PD_CLI_SWITCH, O_QUIET},
    {"-h", PD_CLI_SWITCH, O_HELP}};

/* Walks argv (NULL-terminated, argv[0] included) and writes one letter per item into out:
 * O option (and =value), P positional, U unknown, N no value, S switch given a value. */
static void walk(unsigned style, const char *const *argv, char *out, size_t len) {
  const pd_cli_spec_t spec = PD_CLI_SPEC(k_opts, style);
  int argc = 0;
  while (argv[argc] != NULL) argc++;
  pd_cli_iter_t it;
  pd_cli_item_t item;
  pd_cli_iter_init(&it, &spec, argc, (char *const *)argv, 1);
  size_t used = 0;
  out[0] = 0;
  static const char letters[] = "EOPUNS";
  while (pd_cli_next(&it, &item) != PD_CLI_END && used + 40 < len) {
    used += (size_t)snprintf(out + used, len - used, "%c", letters[item.kind]);
    if (item.kind == PD_CLI_OPTION) {
      cr_assert_not_null(item.row);
      used += (size_t)snprintf(out + used, len - used, "%d", item.id);
      if (item.value != NULL) used += (size_t)snprintf(out + used, len - used, "=%s", item.value);
    }
    if (item.kind == PD_CLI_UNKNOWN) used += (size_t)snprintf(out + used, len - used, "(%zu)", item.name_len);
    used += (size_t)snprintf(out + used, len - used, " ");
  }
}

#define WALK(style, ...)                                                  \
  do {                                                                    \
    const char *argv_[] = {"prog", __VA_ARGS__, NULL};                    \
    walk((style), argv_, got, sizeof got);                                \
  } while (0)

Test(cli_args, plain_style_takes_any_next_argument) {
  char got[512];
  WALK(0, "-t", "5", "--top", "--quiet", "file", "-", "", "--top=3", "--nope");
  cr_expect_str_eq(got, "O1=5 O1=--quiet P U(1) P U(7) U(6) ");
  WALK(0, "--quiet", "-t");
  cr_expect_str_eq(got, "O2 N ");
}

Test(cli_args, eq_style_splits_long_names_only) {
  char got[512];
  WALK(PD_CLI_EQ, "--top=3", "--top=", "-t=3", "--quiet=1", "--nope=1", "--=x", "-h");
  cr_expect_str_eq(got, "O1=3 O1= U(4) S U(6) U(2) O0 ");
}

Test(cli_args, no_dashdash_value_and_dash_positional) {
  char got[512];
  WALK(PD_CLI_NO_DASHDASH_VALUE, "--top", "--quiet", "--top", "-1", "--top", "-");
  cr_expect_str_eq(got, "N O2 O1=-1 O1=- ");
  WALK(PD_CLI_DASH_POSITIONAL, "-", "--top", "-", "--");
  cr_expect_str_eq(got, "P O1=- U(2) ");
}

Test(cli_args, find_is_exact) {
  const pd_cli_spec_t spec = PD_CLI_SPEC(k_opts, 0);
  cr_expect_eq(pd_cli_find(&spec, "--topx", 5), &k_opts[1]);
  cr_expect_null(pd_cli_find(&spec, "--to", 4));
  cr_expect_null(pd_cli_find(&spec, "", 0));
}

/* A program's own rows that start with the shared part (profiler_demo's table). */
typedef struct {
  pd_cli_opt_t cli;
  const char *help;
} row_t;
static const row_t k_rows[] = {{{"--a", PD_CLI_SWITCH, 7}, "first"}, {{"--b", PD_CLI_VALUE, 8}, "second"}};

Test(cli_args, rows_with_more_members) {
  const pd_cli_spec_t spec = PD_CLI_SPEC(k_rows, PD_CLI_EQ);
  const char *argv[] = {"prog", "--b=x", "--a", NULL};
  pd_cli_iter_t it;
  pd_cli_item_t item;
  pd_cli_iter_init(&it, &spec, 3, (char *const *)argv, 1);
  cr_assert_eq(pd_cli_next(&it, &item), PD_CLI_OPTION);
  cr_expect_eq(item.row, &k_rows[1]);
  cr_expect_str_eq(((const row_t *)item.row)->help, "second");
  cr_expect_str_eq(item.value, "x");
  cr_assert_eq(pd_cli_next(&it, &item), PD_CLI_OPTION);
  cr_expect_eq(item.id, 7);
  cr_expect_eq(pd_cli_next(&it, &item), PD_CLI_END);
  cr_expect_eq(item.id, -1);
}

Test(cli_args, integers_strict_and_lenient) {
  int64_t v = 0;
  cr_expect(pd_cli_int("42", 0, 100, true, &v) && v == 42);
  cr_expect(pd_cli_int("-3", -5, 5, true, &v) && v == -3);
  cr_expect(!pd_cli_int("+5", 0, 9, true, &v));
  cr_expect(!pd_cli_int(" 5", 0, 9, true, &v));
  cr_expect(pd_cli_int("+5", 0, 9, false, &v) && v == 5);
  cr_expect(pd_cli_int(" 5", 0, 9, false, &v) && v == 5);
  cr_expect(!pd_cli_int("5 ", 0, 9, false, &v));
  cr_expect(!pd_cli_int("", 0, 9, false, &v));
  cr_expect(!pd_cli_int(NULL, 0, 9, false, &v));
  cr_expect(!pd_cli_int("10", 0, 9, true, &v));
  cr_expect(!pd_cli_int("1e3", 0, 10000, true, &v));
  cr_expect(!pd_cli_int("99999999999999999999", INT64_MIN, INT64_MAX, true, &v));
  cr_expect(pd_cli_int("9223372036854775807", 0, INT64_MAX, true, &v) && v == INT64_MAX);
}

Test(cli_args, numbers_strict_and_lenient) {
  double d = 0;
  cr_expect(pd_cli_number(".5", true, &d) && d == 0.5);
  cr_expect(pd_cli_number("-1e2", true, &d) && d == -100.0);
  cr_expect(!pd_cli_number("+1", true, &d));
  cr_expect(pd_cli_number("+1", false, &d) && d == 1.0);
  cr_expect(!pd_cli_number("inf", false, &d));
  cr_expect(!pd_cli_number("nan", false, &d));
  cr_expect(!pd_cli_number("1e400", false, &d));
  cr_expect(!pd_cli_number("1x", false, &d));
  cr_expect(!pd_cli_number(" ", false, &d));
  cr_expect(!pd_cli_number("", false, &d));
}

Test(cli_args, choices_and_error_lines) {
  static const char *const k[] = {"name", "type", NULL};
  cr_expect_eq(pd_cli_choice("type", k), 1);
  cr_expect_eq(pd_cli_choice("Type", k), -1);
  cr_expect_eq(pd_cli_choice("", k), -1);
  char err[64];
  pd_cli_errorf(err, sizeof err, "bad value '%s'", "a\nb\x1b");
  cr_expect_str_eq(err, "bad value 'a\\x0ab\\x1b'");
  pd_cli_errorf(err, 8, "%s", "0123456789");
  cr_expect_eq(strlen(err), 7);
}
