/* fuzz_util.h: what the fuzz targets share: a scratch directory on tmpfs (the one output
 * writer fsyncs; on tmpfs that costs nothing), reading the committed fixtures, and the
 * option targets' argv made from an input. */
#ifndef PD_FUZZ_UTIL_H
#define PD_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_fuzz_dir[128];

/* Removes the scratch directory and what the targets leave in it (atexit). */
static inline void fuzz_dir_remove(void) {
  static const char *const names[] = {"r.html", "r.json", "in.json"};
  char p[256];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", g_fuzz_dir, names[i]);
    unlink(p);
  }
  rmdir(g_fuzz_dir);
}

/* A directory of this process for outputs, made once ("/dev/shm/pd_fuzz.<pid>.XXXXXX",
 * or under /tmp) and removed at exit. */
static inline const char *fuzz_dir(void) {
  if (g_fuzz_dir[0] == 0) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_fuzz_dir, sizeof g_fuzz_dir, "%s/pd_fuzz.%ld.XXXXXX", base, (long)getpid());
    if (mkdtemp(g_fuzz_dir) == NULL) abort();
    atexit(fuzz_dir_remove);
  }
  return g_fuzz_dir;
}

/* "<fuzz_dir>/<name>" in one of four rotating buffers. */
static inline const char *fuzz_path(const char *name) {
  static char bufs[4][256];
  static int k;
  char *p = bufs[k++ % 4];
  snprintf(p, 256, "%s/%s", fuzz_dir(), name);
  return p;
}

/* Writes data to path with plain stdio (the input under test, not an output). */
static inline void fuzz_write_input(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) abort();
  if (size > 0 && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
}

/* The option targets' command line: the input (at most FUZZ_ARGV_MAX_BYTES) copied into a
 * NUL-terminated buffer (*buf, malloc'd: free it) and split at NUL bytes into argv[1..],
 * argv[0] = prog, at most FUZZ_ARGV_MAX arguments, NULL-terminated. Returns argc, or 0 when
 * the input is too long or there is no memory (the target then skips it). */
#define FUZZ_ARGV_MAX_BYTES 4096
#define FUZZ_ARGV_MAX 64
static inline int fuzz_argv(const uint8_t *data, size_t size, const char *prog, char **buf,
                            char *argv[FUZZ_ARGV_MAX + 2]) {
  *buf = NULL;
  if (size > FUZZ_ARGV_MAX_BYTES) return 0;
  char *b = malloc(size + 1);
  if (b == NULL) return 0;
  memcpy(b, data, size);
  b[size] = 0;
  argv[0] = (char *)prog;
  int argc = 1;
  for (size_t i = 0; i <= size && argc < FUZZ_ARGV_MAX + 1;) {
    argv[argc++] = b + i;
    i += strlen(b + i) + 1;
  }
  argv[argc] = NULL;
  *buf = b;
  return argc;
}

#endif /* PD_FUZZ_UTIL_H */
