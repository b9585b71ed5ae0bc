/* inject_nvtx_name.c: the op's own name in PyTorch's emit_nvtx op ranges (inject.h,
 * pd_inject_nvtx_op_name). Apart from the session because it reads text any program hands
 * to its NVTX tool, inside that program: a pure function of its input, which the fuzz
 * target nvtx_op_name runs on arbitrary bytes (scripts/fuzz.sh). */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "inject.h"

/* ---- emit_nvtx's op ranges: "NAME[, seq = N][, op_id = N][, sizes = [[..]..]][, input_op_ids = [(a,b)..]]" */

/* Each reader takes its part at *p and moves past it, or returns false. */
static bool lit(const char **p, const char *s) {
  size_t n = strlen(s);
  if (strncmp(*p, s, n) != 0) return false;
  *p += n;
  return true;
}

static bool digits(const char **p) {
  const char *q = *p;
  if (*q == '-') q++;
  if (*q < '0' || *q > '9') return false;
  while (*q >= '0' && *q <= '9') q++;
  *p = q;
  return true;
}

/* "[[2, 3], [], [4]]" */
static bool sizes_list(const char **p) {
  if (!lit(p, "[")) return false;
  for (bool first = true; !lit(p, "]"); first = false) {
    if (!first && !lit(p, ", ")) return false;
    if (!lit(p, "[")) return false;
    for (bool f2 = true; !lit(p, "]"); f2 = false)
      if ((!f2 && !lit(p, ", ")) || !digits(p)) return false;
  }
  return true;
}

/* "[(5,0), (6,1)]" */
static bool op_id_list(const char **p) {
  if (!lit(p, "[")) return false;
  for (bool first = true; !lit(p, "]"); first = false)
    if ((!first && !lit(p, ", ")) || !lit(p, "(") || !digits(p) || !lit(p, ",") || !digits(p) || !lit(p, ")"))
      return false;
  return true;
}

/* emit_nvtx's parts, in the order they come, each its key and the reader of its value. */
static const struct {
  const char *key;
  bool (*value)(const char **p);
} k_parts[] = {{", seq = ", digits}, {", op_id = ", digits}, {", sizes = ", sizes_list}, {", input_op_ids = ", op_id_list}};
#define K_NPARTS (sizeof(k_parts) / sizeof(k_parts[0]))

/* Whether suffix (from its ", ") is one or more of emit_nvtx's parts, in order, and nothing else. */
static bool emit_nvtx_suffix(const char *p) {
  int parts = 0;
  for (size_t k = 0; k < K_NPARTS; k++) {
    if (!lit(&p, k_parts[k].key)) continue;
    if (!k_parts[k].value(&p)) return false;
    parts++;
  }
  return parts > 0 && *p == '\0';
}

size_t pd_inject_nvtx_op_name(const char *text, char *name, size_t namelen) {
  if (text == NULL || name == NULL || namelen == 0) return 0;
  for (const char *c = strstr(text, ", "); c != NULL; c = strstr(c + 1, ", ")) {
    bool key = false;
    for (size_t k = 0; !key && k < K_NPARTS; k++) key = strncmp(c, k_parts[k].key, strlen(k_parts[k].key)) == 0;
    if (!key) continue; /* a comma of the name itself */
    /* the first of the parts decides: the rest is the parts, or the text is no op range */
    const size_t n = (size_t)(c - text);
    if (n == 0 || n >= namelen || !emit_nvtx_suffix(c)) return 0;
    memcpy(name, text, n);
    name[n] = '\0';
    return n;
  }
  return 0;
}
