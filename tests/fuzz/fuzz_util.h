/* fuzz_util.h: what the fuzz targets share: a scratch directory on tmpfs (the one output
 * writer fsyncs; on tmpfs that costs nothing), and reading the committed fixtures. */
#ifndef PD_FUZZ_UTIL_H
#define PD_FUZZ_UTIL_H

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

#endif /* PD_FUZZ_UTIL_H */
