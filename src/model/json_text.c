/* json_text.c: JSON text helpers shared by the trace writer and the metrics JSON, and the
 * cJSON builder of the metrics JSON and profile_analyze --json.
 *
 *  - strings: quotes, backslashes and control characters escaped (\n, \t, ... or
 *    \u00XX), valid multi-byte UTF-8 passed through untouched, each maximal invalid
 *    UTF-8 subsequence replaced by \ufffd, so the output is always valid JSON even
 *    when a kernel name or a user's range name carries junk bytes;
 *  - numbers: the shortest %.15g..%.17g text that reads back to the same double, with
 *    '.' as decimal point whatever LC_NUMERIC says (printf follows the locale, JSON
 *    does not); NaN and +-Inf, which JSON cannot express, become null.
 */
#define _GNU_SOURCE /* fwrite_unlocked, putc_unlocked: the trace writer calls these hot */
#include "pd/pd_writers.h"
#include "model_internal.h"

#include <cJSON.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings ------------------------------------------------------------------------ */

size_t pd_utf8_seq(const unsigned char *s, size_t avail, size_t *valid_prefix) {
  unsigned char c = s[0];
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  *valid_prefix = 1;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;      /* no overlong forms */
    else if (c == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;      /* no overlong forms */
    else if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else {
    return 0; /* stray continuation byte, C0/C1 or F5..FF */
  }
  if (avail < 2) return SIZE_MAX;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < need; i++) {
    if (i >= avail) {
      *valid_prefix = i;
      return SIZE_MAX;
    }
    if (s[i] < 0x80 || s[i] > 0xBF) {
      *valid_prefix = i;
      return 0;
    }
  }
  return need;
}

void pd_json_write_string(FILE *out, const char *s) {
  if (out == NULL) return;
  if (s == NULL) {
    fwrite("null", 1, 4, out);
    return;
  }
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  /* One lock for the whole string, then the unlocked calls: the string stays in one
   * piece if other threads write to the same FILE, at the cost of one lock. */
  flockfile(out);
  putc_unlocked('"', out);
  /* Write runs of bytes that need no escaping with one fwrite: most names are plain
   * ASCII, and this keeps the trace writer's hot path to a scan and a copy. */
  const unsigned char *run = p;
  while (*p != 0) {
    unsigned char c = *p;
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      p++;
      continue;
    }
    if (c >= 0x80) {
      size_t prefix = 0;
      size_t len = pd_utf8_seq(p, 4, &prefix); /* NUL ends a sequence early */
      if (len != 0) {
        p += len; /* valid multi-byte character: part of the run */
        continue;
      }
      if (p > run) fwrite_unlocked(run, 1, (size_t)(p - run), out);
      fwrite_unlocked("\\ufffd", 1, 6, out);
      p += prefix;
      run = p;
      continue;
    }
    if (p > run) fwrite_unlocked(run, 1, (size_t)(p - run), out);
    switch (c) {
    case '"': fwrite_unlocked("\\\"", 1, 2, out); break;
    case '\\': fwrite_unlocked("\\\\", 1, 2, out); break;
    case '\n': fwrite_unlocked("\\n", 1, 2, out); break;
    case '\r': fwrite_unlocked("\\r", 1, 2, out); break;
    case '\t': fwrite_unlocked("\\t", 1, 2, out); break;
    case '\b': fwrite_unlocked("\\b", 1, 2, out); break;
    case '\f': fwrite_unlocked("\\f", 1, 2, out); break;
    default: {
      char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      fwrite_unlocked(esc, 1, sizeof esc, out);
    }
    }
    p++;
    run = p;
  }
  if (p > run) fwrite_unlocked(run, 1, (size_t)(p - run), out);
  putc_unlocked('"', out);
  funlockfile(out);
}

/* ---- numbers --------------------------------------------------------------------------- */

/* Replaces the locale's decimal point (possibly several bytes) in buf by '.'. */
static size_t fix_decimal_point(char *buf, size_t len) {
  const char *dp = localeconv()->decimal_point;
  if (dp == NULL || dp[0] == 0 || (dp[0] == '.' && dp[1] == 0)) return len;
  size_t dplen = strlen(dp);
  char *at = strstr(buf, dp);
  if (at == NULL) return len;
  *at = '.';
  memmove(at + 1, at + dplen, len - (size_t)(at - buf) - dplen + 1);
  return len - dplen + 1;
}

size_t pd_json_format_double(char *buf, size_t buflen, double v) {
  char tmp[64];
  int n;
  if (!isfinite(v)) {
    n = snprintf(tmp, sizeof tmp, "null");
  } else if (v == 0.0) {
    n = snprintf(tmp, sizeof tmp, "0"); /* also -0.0: JSON readers agree on plain 0 */
  } else {
    /* Shortest of %.15g, %.16g, %.17g that reads back exactly; %.17g always does. The
     * check runs in the current locale on both sides, so it is consistent. */
    n = 0;
    for (int prec = 15; prec <= 17; prec++) {
      n = snprintf(tmp, sizeof tmp, "%.*g", prec, v);
      if (prec == 17 || strtod(tmp, NULL) == v) break;
    }
    n = (int)fix_decimal_point(tmp, (size_t)n);
  }
  if (buf == NULL || buflen == 0) return (size_t)n;
  size_t copy = (size_t)n < buflen ? (size_t)n : buflen - 1;
  memcpy(buf, tmp, copy);
  buf[copy] = 0;
  return (size_t)n;
}

void pd_json_write_double(FILE *out, double v) {
  if (out == NULL) return;
  char buf[64];
  size_t n = pd_json_format_double(buf, sizeof buf, v);
  fwrite(buf, 1, n, out);
}

/* ---- building a cJSON document ------------------------------------------------------ */

cJSON *pd_json_check(pd_json_build_t *b, cJSON *item) {
  if (item == NULL) b->failed = true;
  return item;
}

cJSON *pd_json_append_object(pd_json_build_t *b, cJSON *arr) {
  if (arr == NULL) return NULL;
  cJSON *o = pd_json_check(b, cJSON_CreateObject());
  if (o != NULL && !cJSON_AddItemToArray(arr, o)) {
    cJSON_Delete(o);
    b->failed = true;
    return NULL;
  }
  return o;
}

void pd_json_add_string(pd_json_build_t *b, cJSON *obj, const char *key, const char *s) {
  if (obj == NULL) return;
  if (s == NULL)
    pd_json_check(b, cJSON_AddNullToObject(obj, key));
  else
    pd_json_check(b, cJSON_AddStringToObject(obj, key, s));
}
