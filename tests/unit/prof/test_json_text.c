/* test_json_text.c: JSON string escaping (control characters, quotes, UTF-8 kept or
 * replaced) and locale-proof shortest round-trip numbers. Every output is also parsed
 * back with cJSON. */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_writers.h"

static char *string_json(const char *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  pd_json_write_string(f, s);
  fclose(f);
  return buf;
}

static char *double_json(double v) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  pd_json_write_double(f, v);
  fclose(f);
  return buf;
}

static void expect_string(const char *in, const char *want_json, const char *want_parsed) {
  char *out = string_json(in);
  cr_expect_str_eq(out, want_json, "escaped: got %s, want %s", out, want_json);
  cJSON *j = cJSON_Parse(out);
  cr_assert_not_null(j, "cJSON cannot parse %s", out);
  cr_expect(cJSON_IsString(j));
  cr_expect_str_eq(j->valuestring, want_parsed, "parsed back: got %s, want %s", j->valuestring, want_parsed);
  cJSON_Delete(j);
  free(out);
}

Test(json_string, plain_and_escapes) {
  expect_string("volta_sgemm_128x64_nn", "\"volta_sgemm_128x64_nn\"", "volta_sgemm_128x64_nn");
  expect_string("", "\"\"", "");
  expect_string("say \"hi\"", "\"say \\\"hi\\\"\"", "say \"hi\"");
  expect_string("C:\\path", "\"C:\\\\path\"", "C:\\path");
  expect_string("a\nb\tc\rd\be\ff", "\"a\\nb\\tc\\rd\\be\\ff\"", "a\nb\tc\rd\be\ff");
  expect_string("\x01\x1f", "\"\\u0001\\u001f\"", "\x01\x1f");
  expect_string("del\x7f", "\"del\x7f\"", "del\x7f");
}

Test(json_string, utf8_valid_passes_through) {
  /* 2, 3 and 4 byte sequences: é, 中, U+10348 */
  expect_string("caf\xc3\xa9 \xe4\xb8\xad \xf0\x90\x8d\x88", "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x90\x8d\x88\"",
                "caf\xc3\xa9 \xe4\xb8\xad \xf0\x90\x8d\x88");
  /* highest code point U+10FFFF and U+FFFD itself */
  expect_string("\xf4\x8f\xbf\xbf\xef\xbf\xbd", "\"\xf4\x8f\xbf\xbf\xef\xbf\xbd\"", "\xf4\x8f\xbf\xbf\xef\xbf\xbd");
}

Test(json_string, utf8_invalid_replaced) {
  /* lone continuation byte, overlong C0 80, truncated 3-byte at the end, surrogate ED A0 80,
   * F5 (beyond Unicode), a 4-byte lead cut by an ASCII byte */
  expect_string("a\x80z", "\"a\\ufffdz\"", "a\xef\xbf\xbdz");
  expect_string("\xc0\x80", "\"\\ufffd\\ufffd\"", "\xef\xbf\xbd\xef\xbf\xbd");
  expect_string("x\xe4\xb8", "\"x\\ufffd\"", "x\xef\xbf\xbd");
  expect_string("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  expect_string("\xf5!", "\"\\ufffd!\"", "\xef\xbf\xbd!");
  expect_string("\xf0\x90q", "\"\\ufffdq\"", "\xef\xbf\xbdq");
  expect_string("\xe0\x80\x80", "\"\\ufffd\\ufffd\\ufffd\"", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  expect_string("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"",
                "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

Test(json_string, null_and_kernel_name) {
  char *out = string_json(NULL);
  cr_expect_str_eq(out, "null");
  free(out);
  /* a templated kernel name with everything at once */
  expect_string("void k<\"q\\\">(\n\xff)", "\"void k<\\\"q\\\\\\\">(\\n\\ufffd)\"", "void k<\"q\\\">(\n\xef\xbf\xbd)");
  pd_json_write_string(NULL, "x"); /* no crash */
}

static void expect_double(double v, const char *want) {
  char *out = double_json(v);
  cr_expect_str_eq(out, want, "%.17g: got %s, want %s", v, out, want);
  if (strcmp(want, "null") != 0) {
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "cJSON cannot parse %s", out);
    cr_expect(cJSON_IsNumber(j));
    cr_expect(j->valuedouble == v || (v == 0 && j->valuedouble == 0), "round trip of %s: %.17g", out,
              j->valuedouble);
    cJSON_Delete(j);
  }
  free(out);
}

Test(json_number, shortest_round_trip) {
  expect_double(0.0, "0");
  expect_double(-0.0, "0");
  expect_double(1.0, "1");
  expect_double(-3.0, "-3");
  expect_double(0.1, "0.1"); /* %.15g already reads back */
  expect_double(0.1 + 0.2, "0.30000000000000004"); /* needs %.17g */
  expect_double(1.0 / 3.0, "0.3333333333333333"); /* %.16g */
  expect_double(1e21, "1e+21");
  expect_double(123456789012.0, "123456789012");
  expect_double(2.5e-7, "2.5e-07");
  expect_double(150109880320.0, "150109880320");
  expect_double(NAN, "null");
  expect_double(INFINITY, "null");
  expect_double(-INFINITY, "null");
}

Test(json_number, every_output_reads_back_exactly) {
  /* values spread over magnitudes and digits: each must read back to the same double */
  unsigned x = 12345;
  for (int i = 0; i < 20000; i++) {
    x = x * 1103515245u + 12345u;
    double v = ((double)x / 4294967296.0 - 0.5) * pow(10.0, (int)(x % 40) - 20);
    char buf[64];
    size_t n = pd_json_format_double(buf, sizeof buf, v);
    cr_assert_eq(n, strlen(buf));
    cr_assert_eq(strtod(buf, NULL), v, "%s does not read back as %.17g", buf, v);
    cr_assert(strlen(buf) <= 24, "%s too long", buf);
  }
}

Test(json_number, format_buffer_handling) {
  char small[4];
  size_t n = pd_json_format_double(small, sizeof small, 123456.5);
  cr_expect_eq(n, 8, "full length reported: %zu", n);
  cr_expect_str_eq(small, "123", "cut and terminated: %s", small);
  cr_expect_eq(pd_json_format_double(NULL, 0, 2.5), 3);
  pd_json_write_double(NULL, 1.0); /* no crash */
}

/* Under a locale with a decimal comma, printf writes "0,5": the JSON must still say 0.5.
 * Needs a comma locale installed (de_DE.UTF-8, fr_FR.UTF-8, ...); skipped otherwise. */
Test(json_number, decimal_point_under_comma_locale) {
  static const char *const locales[] = {"de_DE.UTF-8", "de_DE.utf8", "de_DE", "fr_FR.UTF-8", "fr_FR.utf8",
                                        "nl_NL.UTF-8", "ru_RU.UTF-8"};
  const char *got = NULL;
  for (size_t i = 0; i < sizeof locales / sizeof locales[0] && got == NULL; i++)
    got = setlocale(LC_NUMERIC, locales[i]);
  if (got == NULL) cr_skip_test("no decimal-comma locale installed");
  char probe[16];
  snprintf(probe, sizeof probe, "%.1f", 0.5);
  cr_assert_str_eq(probe, "0,5", "locale %s does not use a decimal comma", got);
  expect_double(0.5, "0.5");
  expect_double(-1234.0625, "-1234.0625");
  expect_double(6.02214076e23, "6.02214076e+23");
  char buf[64];
  pd_json_format_double(buf, sizeof buf, 3.25);
  cr_expect_str_eq(buf, "3.25");
  setlocale(LC_NUMERIC, "C");
}
