/* cli_args.h: the option parser the three programs share (profiler_demo, profile_analyze,
 * profile_compare). A program describes its options in a table whose rows start with a
 * pd_cli_opt_t (name as typed, switch or value, the program's id) and walks argv with
 * pd_cli_next(), which looks each argument up in the table and hands back an option with
 * its value, a positional argument, or what is wrong with it; the program words its own
 * message. The styles the programs have always had are flags of the table:
 * profiler_demo's "--flag value" / "--flag=value" where a following "--x" is no value,
 * profile_analyze's hyphenated flags, "-t N" and "--flag=value", profile_compare's
 * "--flag value" only. The value parsers and the one-line error writer are here too.
 * Nothing here allocates or does I/O. */
#ifndef PD_CLI_ARGS_H
#define PD_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  PD_CLI_SWITCH = 0, /* takes no value */
  PD_CLI_VALUE = 1   /* takes one: the next argument, or "=VALUE" under PD_CLI_EQ */
} pd_cli_arity_t;

/* The first member of every row of an option table. */
typedef struct {
  const char *name; /* as typed: "--top", "-t", "--output_json" */
  pd_cli_arity_t arity;
  int id; /* the program's code for the option */
} pd_cli_opt_t;

enum {
  PD_CLI_EQ = 1u << 0,               /* "--name=VALUE" (names that start with "--") */
  PD_CLI_NO_DASHDASH_VALUE = 1u << 1, /* a next argument starting with "--" is no value */
  PD_CLI_DASH_POSITIONAL = 1u << 2    /* "-" alone is positional (standard input/output) */
};

/* An option table: count rows of stride bytes, each starting with a pd_cli_opt_t. */
typedef struct {
  const void *rows;
  size_t stride;
  size_t count;
  unsigned style; /* PD_CLI_* flags */
} pd_cli_spec_t;

/* A table of pd_cli_opt_t rows, or of rows that start with one. */
#define PD_CLI_SPEC(table, style) \
  { (table), sizeof((table)[0]), sizeof(table) / sizeof((table)[0]), (style) }

typedef enum {
  PD_CLI_END = 0,     /* no argument left */
  PD_CLI_OPTION,      /* a known option; value set when it takes one */
  PD_CLI_POSITIONAL,  /* not an option: "", text not starting with '-', "-" with DASH_POSITIONAL */
  PD_CLI_UNKNOWN,     /* starts with '-' and names no option of the table */
  PD_CLI_NO_VALUE,    /* an option that takes a value, with none after it */
  PD_CLI_SWITCH_VALUE /* a switch given "=VALUE" */
} pd_cli_kind_t;

typedef struct {
  pd_cli_kind_t kind;
  const void *row;   /* the table row (OPTION, NO_VALUE, SWITCH_VALUE), else NULL */
  int id;            /* the row's id, else -1 */
  const char *arg;   /* the argument as given (points into argv) */
  const char *value; /* OPTION that takes a value: its value (into argv) */
  size_t name_len;   /* bytes of arg that name the option (before '=' under PD_CLI_EQ) */
} pd_cli_item_t;

typedef struct {
  const pd_cli_spec_t *spec;
  int argc;
  char *const *argv;
  int next;
} pd_cli_iter_t;

/* Walks argv[first..argc) against spec (which must outlive it). */
void pd_cli_iter_init(pd_cli_iter_t *it, const pd_cli_spec_t *spec, int argc, char *const argv[], int first);
/* The next argument (an option with its value takes two), described in *item. */
pd_cli_kind_t pd_cli_next(pd_cli_iter_t *it, pd_cli_item_t *item);

/* The row named exactly name[0..len), or NULL. */
const void *pd_cli_find(const pd_cli_spec_t *spec, const char *name, size_t len);

/* A whole-string base-10 integer in [lo, hi] into *out. strict: the text starts with '-' or
 * a digit (no leading blank, no '+'); otherwise strtol's leading blanks and sign pass. */
bool pd_cli_int(const char *s, int64_t lo, int64_t hi, bool strict, int64_t *out);
/* A whole-string finite number into *out (strict: starts with '-', '.' or a digit). */
bool pd_cli_number(const char *s, bool strict, double *out);
/* The index of value in a NULL-terminated list, or -1. */
int pd_cli_choice(const char *value, const char *const *choices);

/* Writes one line (printf format) into err, every control character of it escaped
 * (pd_term_escape_line), so a value holding a newline keeps the message one line. */
void pd_cli_errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
