/* json_pull.c: the pull tokenizer of json_pull.h.
 *
 * Text comes in chunks of AN_JSON_CHUNK bytes from a read callback (or from one buffer
 * in memory); a token may span chunks, so strings are copied piece by piece into the
 * parser's own buffer and numbers into num_text. Numbers convert with Clinger's fast
 * path (an integer mantissa below 2^53 times or over an exact power of ten is one
 * correctly rounded operation, the same double strtod() returns) and fall back to
 * strtod() for the rest; trace timestamps (13 digits and 3 decimals) all take the fast
 * path, which is most of the parse time saved against strtod.
 */
#include "json_pull.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/pd_common.h"

static void fail(an_json_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(an_json_t *p, const char *fmt, ...) {
  if (p->failed) return;
  p->failed = true;
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(p->err, sizeof p->err, "%s at byte %llu", what, (unsigned long long)an_json_offset(p));
}

uint64_t an_json_offset(const an_json_t *p) {
  return p->consumed + (uint64_t)(p->cur - p->chunk_start);
}

void an_json_init_buffer(an_json_t *p, const char *text, size_t len) {
  memset(p, 0, sizeof(*p));
  p->cur = p->chunk_start = text;
  p->end = text + len;
}

int an_json_init_reader(an_json_t *p, an_json_read_cb read, void *user) {
  memset(p, 0, sizeof(*p));
  p->chunk = malloc(AN_JSON_CHUNK);
  if (p->chunk == NULL) return PD_ENOMEM;
  p->cur = p->end = p->chunk_start = p->chunk;
  p->read = read;
  p->user = user;
  return 0;
}

void an_json_free(an_json_t *p) {
  free(p->chunk);
  free(p->str);
  p->chunk = p->str = NULL;
  p->cap = p->len = 0;
}

/* Makes cur < end true by reading the next chunk; false at the end or on error. */
static bool refill(an_json_t *p) {
  if (p->failed || p->at_eof || p->read == NULL) {
    p->at_eof = true;
    return false;
  }
  p->consumed += (uint64_t)(p->end - p->chunk_start);
  p->cur = p->end = p->chunk_start = p->chunk;
  long n = p->read(p->user, p->chunk, AN_JSON_CHUNK, p->err, sizeof p->err);
  if (n < 0) {
    p->failed = p->read_failed = true;
    return false;
  }
  p->end = p->chunk + n;
  if (n == 0) p->at_eof = true;
  return n > 0;
}

/* Next character, consumed; -1 at the end. */
static int take(an_json_t *p) {
  if (p->cur == p->end && !refill(p)) return -1;
  return (unsigned char)*p->cur++;
}

/* Next character that is not white space, not consumed; -1 at the end. */
static int peek(an_json_t *p) {
  for (;;) {
    while (p->cur < p->end) {
      char c = *p->cur;
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return (unsigned char)c;
      p->cur++;
    }
    if (!refill(p)) return -1;
  }
}

static bool str_put(an_json_t *p, const char *s, size_t n) {
  if (p->len + n + 1 > p->cap) {
    if (p->len + n > AN_JSON_MAX_STRING) {
      fail(p, "string longer than %zu MiB", AN_JSON_MAX_STRING >> 20);
      p->over_limit = true;
      return false;
    }
    size_t cap = p->cap ? p->cap : 256;
    while (cap < p->len + n + 1) cap *= 2;
    char *ns = realloc(p->str, cap);
    if (ns == NULL) {
      fail(p, "out of memory for a string of %zu bytes", cap);
      p->out_of_memory = true;
      return false;
    }
    p->str = ns;
    p->cap = cap;
  }
  memcpy(p->str + p->len, s, n);
  p->len += n;
  return true;
}

static int hex4(an_json_t *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int c = take(p), d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

/* One \uXXXX escape (the 'u' read), a surrogate pair whole, as UTF-8 into out; returns
 * its length or -1. */
static int unicode_escape(an_json_t *p, char out[4]) {
  int u = hex4(p);
  if (u < 0) return -1;
  unsigned cp = (unsigned)u;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    if (take(p) != '\\' || take(p) != 'u') return -1;
    int lo = hex4(p);
    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
    cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* The rest of a string (its opening quote read). keep: decode into p->str / p->len,
 * NUL-terminated; otherwise only check it. Returns 0 or -1. */
static int read_string(an_json_t *p, bool keep) {
  p->len = 0;
  for (;;) {
    const char *s = p->cur, *e = p->end;
    while (s < e && *s != '"' && *s != '\\') s++;
    if (keep && s > p->cur && !str_put(p, p->cur, (size_t)(s - p->cur))) return -1;
    p->cur = s;
    if (s == e) {
      if (!refill(p)) {
        fail(p, "unterminated string");
        return -1;
      }
      continue;
    }
    p->cur++;
    if (*s == '"') break;
    char out[4];
    int n = 1, c = take(p);
    switch (c) {
    case '"': case '\\': case '/': out[0] = (char)c; break;
    case 'b': out[0] = '\b'; break;
    case 'f': out[0] = '\f'; break;
    case 'n': out[0] = '\n'; break;
    case 'r': out[0] = '\r'; break;
    case 't': out[0] = '\t'; break;
    case 'u':
      n = unicode_escape(p, out);
      if (n < 0) {
        fail(p, "invalid \\u escape in a string");
        return -1;
      }
      break;
    default:
      fail(p, "invalid escape in a string");
      return -1;
    }
    if (keep && !str_put(p, out, (size_t)n)) return -1;
  }
  if (keep) {
    if (p->str == NULL && !str_put(p, "", 0)) return -1;
    p->str[p->len] = 0;
  }
  return 0;
}

static const double k_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                  1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static bool is_digit(int c) {
  return c >= '0' && c <= '9';
}

/* Checks num_text against JSON's number grammar and, when convert, fills num,
 * num_i64 and num_is_int. Returns 0 or -1. */
static int convert_number(an_json_t *p, size_t n, bool convert) {
  const char *q = p->num_text, *end = q + n;
  bool neg = *q == '-';
  if (neg) q++;
  uint64_t w = 0;     /* up to 19 significant digits */
  int sig = 0, exp10 = 0;
  bool dropped = false, is_int = true;
  if (q == end || !is_digit(*q)) goto bad;
  if (*q == '0') {
    q++;
  } else {
    for (; q < end && is_digit(*q); q++) {
      if (sig < 19) {
        w = w * 10 + (uint64_t)(*q - '0');
        sig++;
      } else {
        exp10++;
        dropped = true;
      }
    }
  }
  if (q < end && *q == '.') {
    q++;
    is_int = false;
    if (q == end || !is_digit(*q)) goto bad;
    for (; q < end && is_digit(*q); q++) {
      if (sig < 19) {
        w = w * 10 + (uint64_t)(*q - '0');
        if (w != 0) sig++;
        exp10--;
      } else {
        dropped = true;
      }
    }
  }
  if (q < end && (*q == 'e' || *q == 'E')) {
    q++;
    is_int = false;
    bool eneg = false;
    if (q < end && (*q == '+' || *q == '-')) eneg = *q++ == '-';
    if (q == end || !is_digit(*q)) goto bad;
    int e = 0;
    for (; q < end && is_digit(*q); q++)
      if (e < 100000) e = e * 10 + (*q - '0');
    exp10 += eneg ? -e : e;
  }
  if (q != end) goto bad;
  if (!convert) return 0;
  p->num_is_int = is_int && !dropped && (neg ? w <= (uint64_t)INT64_MAX + 1 : w <= (uint64_t)INT64_MAX);
  if (p->num_is_int) p->num_i64 = neg ? (int64_t)(0 - w) : (int64_t)w;
  if (!dropped && w <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
    double d = (double)w;
    d = exp10 < 0 ? d / k_pow10[-exp10] : d * k_pow10[exp10];
    p->num = neg ? -d : d;
  } else {
    /* JSON's grammar is a subset of strtod's in the C locale, which programs using this
     * never change */
    p->num = strtod(p->num_text, NULL);
  }
  return 0;
bad:
  fail(p, "invalid number '%s'", p->num_text);
  return -1;
}

static int read_number(an_json_t *p, bool convert) {
  size_t n = 0;
  for (;;) {
    while (p->cur < p->end) {
      char c = *p->cur;
      if (!is_digit(c) && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E') goto done;
      if (n == AN_JSON_MAX_NUMBER) {
        p->num_text[n] = 0;
        fail(p, "number longer than %d characters", AN_JSON_MAX_NUMBER);
        p->over_limit = true;
        return -1;
      }
      p->num_text[n++] = c;
      p->cur++;
    }
    if (!refill(p)) break;
  }
done:
  p->num_text[n] = 0;
  return convert_number(p, n, convert);
}

static int read_literal(an_json_t *p, const char *word) {
  for (const char *w = word; *w; w++) {
    if (take(p) != *w) {
      fail(p, "invalid literal (expected '%s')", word);
      return -1;
    }
  }
  return 0;
}

static int push(an_json_t *p, char c) {
  if (p->depth == AN_JSON_MAX_DEPTH) {
    fail(p, "nesting deeper than %d levels", AN_JSON_MAX_DEPTH);
    p->over_limit = true;
    return -1;
  }
  p->stack[p->depth] = c;
  p->has_member[p->depth] = false;
  p->depth++;
  p->cur++;
  return 0;
}

/* The next value's first token; keep: strings kept and numbers converted. */
static an_json_type_t value_start(an_json_t *p, bool keep) {
  if (p->failed) return AN_JSON_ERROR;
  int c = peek(p);
  switch (c) {
  case '{':
    return push(p, '{') == 0 ? AN_JSON_OBJECT : AN_JSON_ERROR;
  case '[':
    return push(p, '[') == 0 ? AN_JSON_ARRAY : AN_JSON_ERROR;
  case '"':
    p->cur++;
    return read_string(p, keep) == 0 ? AN_JSON_STRING : AN_JSON_ERROR;
  case 't':
    return read_literal(p, "true") == 0 ? AN_JSON_TRUE : AN_JSON_ERROR;
  case 'f':
    return read_literal(p, "false") == 0 ? AN_JSON_FALSE : AN_JSON_ERROR;
  case 'n':
    return read_literal(p, "null") == 0 ? AN_JSON_NULL : AN_JSON_ERROR;
  case -1:
    fail(p, "unexpected end of text");
    return AN_JSON_ERROR;
  default:
    if (c == '-' || is_digit(c)) return read_number(p, keep) == 0 ? AN_JSON_NUMBER : AN_JSON_ERROR;
    if (c >= 0x20 && c < 0x7f) fail(p, "unexpected character '%c'", c);
    else fail(p, "unexpected byte 0x%02x", (unsigned)c);
    return AN_JSON_ERROR;
  }
}

an_json_type_t an_json_value(an_json_t *p) {
  return value_start(p, true);
}

/* Closes the innermost container when c is its closing bracket (returns 0), else reads
 * the ',' between members (returns 1). -1 on error. */
static int next_member(an_json_t *p, char close) {
  if (p->failed) return -1;
  if (p->depth == 0 || p->stack[p->depth - 1] != (close == '}' ? '{' : '[')) {
    fail(p, "parser misuse: not inside %s", close == '}' ? "an object" : "an array");
    return -1;
  }
  int c = peek(p);
  if (c == close) {
    p->cur++;
    p->depth--;
    return 0;
  }
  if (p->has_member[p->depth - 1]) {
    if (c != ',') {
      if (c < 0) fail(p, "unexpected end of text (expected ',' or '%c')", close);
      else fail(p, "expected ',' or '%c'", close);
      return -1;
    }
    p->cur++;
  }
  p->has_member[p->depth - 1] = true;
  return 1;
}

static int next_key(an_json_t *p, bool keep) {
  int r = next_member(p, '}');
  if (r <= 0) return r;
  if (peek(p) != '"') {
    fail(p, "expected a key string");
    return -1;
  }
  p->cur++;
  if (read_string(p, keep) != 0) return -1;
  if (peek(p) != ':') {
    fail(p, "expected ':' after a key");
    return -1;
  }
  p->cur++;
  return 1;
}

int an_json_key(an_json_t *p) {
  return next_key(p, true);
}

int an_json_elem(an_json_t *p) {
  return next_member(p, ']');
}

int an_json_skip_rest(an_json_t *p, an_json_type_t opened) {
  if (opened != AN_JSON_OBJECT && opened != AN_JSON_ARRAY) return p->failed ? -1 : 0;
  int base = p->depth - 1;
  while (p->depth > base) {
    int r = p->stack[p->depth - 1] == '{' ? next_key(p, false) : an_json_elem(p);
    if (r < 0) return -1;
    if (r > 0 && value_start(p, false) == AN_JSON_ERROR) return -1;
  }
  return 0;
}

int an_json_skip(an_json_t *p) {
  an_json_type_t t = value_start(p, false);
  if (t == AN_JSON_ERROR) return -1;
  return an_json_skip_rest(p, t);
}

int an_json_finish(an_json_t *p) {
  if (p->failed) return -1;
  if (peek(p) != -1) {
    fail(p, "text after the end of the document");
    return -1;
  }
  return p->failed ? -1 : 0;
}
