/* json_pull.h: a pull tokenizer for JSON text that arrives in chunks (internal to the
 * analyzer; the trace reader is its one user).
 *
 * The reader asks for the next value, key or array element and gets typed tokens back,
 * so it can turn each trace event into the event model as soon as its object closes and
 * never holds more of the text than one read chunk. The caller walks the document with
 * an_json_value() / an_json_key() / an_json_elem(), and an_json_skip() passes over a
 * value it does not need without converting its numbers or copying its strings.
 *
 * Limits that keep hostile input bounded: nesting deeper than AN_JSON_MAX_DEPTH, a
 * string the caller asks for that is longer than AN_JSON_MAX_STRING bytes, or a number
 * longer than AN_JSON_MAX_NUMBER characters are errors, not allocations. Numbers come
 * back as the double strtod() gives (bit for bit) and, for integers that fit, as an exact
 * int64. The text after the document may only be white space.
 */
#ifndef PD_JSON_PULL_H
#define PD_JSON_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AN_JSON_MAX_DEPTH 64
#define AN_JSON_MAX_STRING ((size_t)4 << 20) /* 4 MiB: names and shapes are far shorter */
#define AN_JSON_MAX_NUMBER 255
#define AN_JSON_CHUNK ((size_t)1 << 20)

/* One table for token types: X(NAME, text). */
#define AN_JSON_TYPE_MAP(X) \
  X(OBJECT, "object") X(ARRAY, "array") X(STRING, "string") X(NUMBER, "number") \
  X(TRUE, "true") X(FALSE, "false") X(NULL, "null")
typedef enum {
  AN_JSON_ERROR = -1,
#define AN_JSON_TYPE_GEN(name, text) AN_JSON_##name,
  AN_JSON_TYPE_MAP(AN_JSON_TYPE_GEN)
#undef AN_JSON_TYPE_GEN
} an_json_type_t;

/* Fills buf with up to cap bytes of text; returns the count, 0 at the end, or -1 on a
 * read error (then it writes the reason into err). */
typedef long (*an_json_read_cb)(void *user, char *buf, size_t cap, char *err, size_t errlen);

typedef struct {
  /* input */
  const char *cur, *end; /* unread text of the current chunk */
  char *chunk;           /* owned chunk buffer (NULL for text in memory) */
  an_json_read_cb read;
  void *user;
  bool at_eof;
  uint64_t consumed;     /* bytes of text before cur's chunk */
  const char *chunk_start;
  /* nesting: one byte per open container, '{' or '[', and whether it has members yet */
  char stack[AN_JSON_MAX_DEPTH];
  bool has_member[AN_JSON_MAX_DEPTH];
  int depth;
  /* the last string or key (NUL-terminated, len bytes), number, and its text */
  char *str;
  size_t len, cap;
  double num;
  int64_t num_i64;
  bool num_is_int;       /* num_i64 is exact: an integer literal within int64 */
  char num_text[AN_JSON_MAX_NUMBER + 1];
  /* the first error; an_json_* return AN_JSON_ERROR / -1 once it is set */
  bool failed;
  bool read_failed;      /* the source failed (I/O or gzip), not the text */
  bool out_of_memory;    /* an allocation failed, not the text */
  bool over_limit;       /* valid text beyond a limit (string, number, nesting) */
  char err[256];
} an_json_t;

/* Starts a parser over text in memory (len bytes, need not be terminated). */
void an_json_init_buffer(an_json_t *p, const char *text, size_t len);
/* Starts a parser that pulls chunks from read(user, ...). Returns 0 or PD_ENOMEM. */
int an_json_init_reader(an_json_t *p, an_json_read_cb read, void *user);
/* Frees what the parser holds; the struct may then be reused with an init. */
void an_json_free(an_json_t *p);

/* Reads the next value's first token: a scalar whole (a string into p->str, a number into
 * p->num / p->num_i64), an object or array only its opening bracket (walk it with
 * an_json_key / an_json_elem). Returns its type or AN_JSON_ERROR. */
an_json_type_t an_json_value(an_json_t *p);
/* Inside an object: returns 1 with the next key in p->str (its ':' read), 0 when the
 * object closed, -1 on error. */
int an_json_key(an_json_t *p);
/* Inside an array: returns 1 when another element follows (read it next), 0 when the
 * array closed, -1 on error. */
int an_json_elem(an_json_t *p);
/* Passes over the next value (all of it), checking its syntax. Returns 0 or -1. */
int an_json_skip(an_json_t *p);
/* Passes over the rest of a value whose opening bracket was returned by an_json_value(). */
int an_json_skip_rest(an_json_t *p, an_json_type_t opened);
/* After the top-level value: returns 0 when only white space follows, -1 otherwise. */
int an_json_finish(an_json_t *p);
/* Bytes of text read so far (the offset errors are reported at). */
uint64_t an_json_offset(const an_json_t *p);

#endif /* PD_JSON_PULL_H */
