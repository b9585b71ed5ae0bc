/* demangle.c: readable kernel names from Itanium C++ mangled names (pd_demangle()).
 *
 * CUPTI reports our own kernels (and CUTLASS/cuBLASLt ones) by their mangled names
 * ("_ZN47_GLOBAL__N__..._62a9d67813k_im2col_nhwcI6__halfLb0EEEvPKT_..."), which all look
 * alike in a table or a viewer; Kineto demangles them. The trace writer writes the readable
 * name and keeps the mangled one in args; the analyzer demangles torch traces it reads. This is a small demangler for the part a table
 * needs: the qualified name with its template arguments, as c++filt prints it, without
 * the return type and the parameter list ("(anonymous namespace)::k_im2col_nhwc<__half,
 * false>"). It covers nested names, anonymous namespaces, template arguments that are
 * builtin types, class names, pointers/references/const, nested templates and integer or
 * bool literals. Anything else (substitutions, template parameters, operators, ctors,
 * local names, ...) makes it give up. Then, where the process has the C++ runtime's
 * demangler (__cxa_demangle, found at run time in the global scope or in an already loaded
 * libstdc++.so.6: a PyTorch or any C++ CUDA program under pd_run has it; nothing here
 * links or loads it), that one gives the name as Kineto writes
 * it, with its return type and parameters ("void at::native::vectorized_elementwise_kernel<
 * 8, ...>(int, ...)"); else the caller keeps the mangled name: never a wrong name, at worst
 * the raw one.
 */
#define _GNU_SOURCE
#include "pd/pd_event.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *p;
  char *out;
  size_t cap, n;
  bool fail;
  int depth; /* recursion guard against hostile input */
} dm_t;

static void put(dm_t *d, const char *s, size_t n) {
  if (d->fail) return;
  if (d->n + n + 1 > d->cap) {
    d->fail = true;
    return;
  }
  memcpy(d->out + d->n, s, n);
  d->n += n;
  d->out[d->n] = 0;
}

static void puts_(dm_t *d, const char *s) {
  put(d, s, strlen(s));
}

/* <source-name> ::= <length> <identifier>; anonymous namespaces print as c++filt does. */
static void source_name(dm_t *d) {
  size_t len = 0;
  if (*d->p < '0' || *d->p > '9') {
    d->fail = true;
    return;
  }
  while (*d->p >= '0' && *d->p <= '9') {
    len = len * 10 + (size_t)(*d->p++ - '0');
    if (len > 4096) {
      d->fail = true;
      return;
    }
  }
  if (strnlen(d->p, len) < len) {
    d->fail = true;
    return;
  }
  if (len >= 10 && strncmp(d->p, "_GLOBAL__N", 10) == 0) puts_(d, "(anonymous namespace)");
  else put(d, d->p, len);
  d->p += len;
}

static const struct {
  char code;
  const char *name;
  const char *literal_suffix; /* NULL: no integer literal of this type */
} builtins[] = {
    {'v', "void", NULL},
    {'b', "bool", NULL},
    {'c', "char", NULL},
    {'a', "signed char", NULL},
    {'h', "unsigned char", NULL},
    {'s', "short", NULL},
    {'t', "unsigned short", NULL},
    {'i', "int", ""},
    {'j', "unsigned int", "u"},
    {'l', "long", "l"},
    {'m', "unsigned long", "ul"},
    {'x', "long long", "ll"},
    {'y', "unsigned long long", "ull"},
    {'f', "float", NULL},
    {'d', "double", NULL},
    {'e', "long double", NULL},
    {'w', "wchar_t", NULL},
};

static void type(dm_t *d);
static void nested_name(dm_t *d);

/* I <template-arg>+ E */
static void template_args(dm_t *d) {
  if (++d->depth > 32) {
    d->fail = true;
    return;
  }
  d->p++; /* 'I' */
  puts_(d, "<");
  bool first = true;
  while (!d->fail && *d->p != 'E') {
    if (*d->p == 0) {
      d->fail = true;
      break;
    }
    if (!first) puts_(d, ", ");
    first = false;
    if (*d->p == 'L') { /* L <type> <value number> E */
      d->p++;
      char code = *d->p++;
      bool neg = *d->p == 'n';
      if (neg) d->p++;
      const char *digits = d->p;
      while (*d->p >= '0' && *d->p <= '9') d->p++;
      if (d->p == digits || *d->p != 'E') {
        d->fail = true;
        break;
      }
      size_t nd = (size_t)(d->p - digits);
      d->p++; /* 'E' */
      if (code == 'b') {
        puts_(d, (nd == 1 && digits[0] == '0') ? "false" : "true");
        continue;
      }
      const char *suffix = NULL;
      for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (builtins[i].code == code) suffix = builtins[i].literal_suffix;
      if (suffix == NULL) {
        d->fail = true;
        break;
      }
      if (neg) puts_(d, "-");
      put(d, digits, nd);
      puts_(d, suffix);
    } else {
      type(d);
    }
  }
  if (*d->p == 'E') d->p++;
  /* c++filt separates a closing bracket from an inner one */
  if (d->n > 0 && d->out[d->n - 1] == '>') puts_(d, " ");
  puts_(d, ">");
  d->depth--;
}

static void type(dm_t *d) {
  if (++d->depth > 32) {
    d->fail = true;
    return;
  }
  char c = *d->p;
  if (c == 'P' || c == 'R' || c == 'O' || c == 'K') {
    d->p++;
    type(d);
    puts_(d, c == 'P' ? "*" : c == 'R' ? "&" : c == 'O' ? "&&" : " const");
  } else if (c == 'N') {
    nested_name(d);
  } else if (c >= '0' && c <= '9') {
    source_name(d);
    if (*d->p == 'I') template_args(d);
  } else {
    bool found = false;
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
      if (builtins[i].code == c) {
        d->p++;
        puts_(d, builtins[i].name);
        found = true;
        break;
      }
    }
    if (!found) d->fail = true;
  }
  d->depth--;
}

/* N [<CV-qualifiers>] <prefix components> E */
static void nested_name(dm_t *d) {
  d->p++; /* 'N' */
  while (*d->p == 'K' || *d->p == 'V' || *d->p == 'r') d->p++; /* a member function's cv */
  bool first = true;
  while (!d->fail && *d->p != 'E') {
    if (*d->p == 'I' && !first) {
      template_args(d);
    } else if (*d->p >= '0' && *d->p <= '9') {
      if (!first) puts_(d, "::");
      source_name(d);
    } else {
      d->fail = true; /* substitutions, operators, ctors, template parameters */
    }
    first = false;
  }
  if (*d->p != 'E') d->fail = true;
  else d->p++;
}

/* The C++ runtime's demangler, when the process has one loaded (looked up once). */
typedef char *(*cxa_demangle_fn)(const char *mangled, char *out, size_t *len, int *status);
static cxa_demangle_fn g_cxa;
static pthread_once_t g_cxa_once = PTHREAD_ONCE_INIT;
static void cxa_find(void) {
  void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
  if (f == NULL) {
    /* Loaded but not global: Python loads PyTorch's libraries (and libstdc++ with them)
     * RTLD_LOCAL. RTLD_NOLOAD finds it there without loading anything new. */
    void *h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL) f = dlsym(h, "__cxa_demangle"); /* the handle stays: the library is in use */
  }
  *(void **)&g_cxa = f;
}

bool pd_demangle_cxx_runtime(const char *mangled, char *buf, size_t len) {
  if (mangled == NULL || buf == NULL || len == 0) return false;
  (void)pthread_once(&g_cxa_once, cxa_find);
  if (g_cxa == NULL) return false;
  int status = -1;
  char *s = g_cxa(mangled, NULL, NULL, &status);
  bool ok = status == 0 && s != NULL && s[0] != 0;
  if (ok) {
    size_t n = strlen(s);
    if (n >= len) n = len - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
  }
  free(s);
  return ok;
}

bool pd_demangle(const char *mangled, char *buf, size_t len) {
  if (mangled == NULL || buf == NULL || len == 0 || strncmp(mangled, "_Z", 2) != 0) return false;
  dm_t d = {.p = mangled + 2, .out = buf, .cap = len};
  buf[0] = 0;
  if (*d.p == 'N') {
    nested_name(&d);
  } else if (*d.p >= '0' && *d.p <= '9') {
    source_name(&d);
    if (*d.p == 'I') template_args(&d);
  } else {
    d.fail = true;
  }
  if (!d.fail && d.n > 0) return true;
  buf[0] = 0;
  return pd_demangle_cxx_runtime(mangled, buf, len);
}
