/* host_info.c: which machine a run was made on (pd_writers.h). The regression gate pools
 * baseline runs by host, so each run records its host name, its boot id (new on every
 * freshly started machine, also where all machines share one host name) and its CPU. */
#include "pd/pd_writers.h"

#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include "pd/pd_common.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Copies the first line of path into out (without its newline); "" when unreadable. */
static void host_read_line(const char *path, const char *prefix, char *out, size_t outlen) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  char line[512];
  size_t plen = prefix != NULL ? strlen(prefix) : 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (prefix != NULL && strncmp(line, prefix, plen) != 0) continue;
    const char *v = line + plen;
    if (prefix != NULL) {
      const char *colon = strchr(v, ':');
      if (colon == NULL) continue;
      v = colon + 1;
      while (*v == ' ' || *v == '\t') v++;
    }
    snprintf(out, outlen, "%s", v);
    out[strcspn(out, "\r\n")] = '\0';
    break;
  }
  fclose(f);
}

void pd_host_info_read(pd_host_info_t *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof(*out));
  if (gethostname(out->name, sizeof(out->name) - 1) != 0) out->name[0] = '\0';
  host_read_line("/proc/sys/kernel/random/boot_id", NULL, out->boot_id, sizeof(out->boot_id));
  host_read_line("/proc/cpuinfo", "model name", out->cpu, sizeof(out->cpu));
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  out->cpus = n > 0 && n < 1 << 20 ? (int)n : 0;
}

int pd_host_rss_kib(int64_t *rss_kib, int64_t *peak_kib) {
  int64_t rss = -1, peak = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (f != NULL) {
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
      int64_t *dst = strncmp(line, "VmRSS:", 6) == 0 ? &rss : strncmp(line, "VmHWM:", 6) == 0 ? &peak : NULL;
      if (dst == NULL) continue;
      char *end;
      long long v = strtoll(line + 6, &end, 10);
      if (end != line + 6 && v >= 0 && v < (1LL << 50)) *dst = v; /* "   1234 kB" */
    }
    fclose(f);
  }
  if (rss_kib != NULL) *rss_kib = rss;
  if (peak_kib != NULL) *peak_kib = peak;
  return rss >= 0 && peak >= 0 ? 0 : PD_EIO;
}

int64_t pd_host_heap_in_use_kib(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  /* Another allocator in place (AddressSanitizer's, a preloaded one) leaves glibc's
   * arena untouched: its figures would read as 0, which is not the answer. */
  if (mi.arena == 0 && mi.hblkhd == 0) return -1;
  return (int64_t)((mi.uordblks + mi.hblkhd) >> 10);
#else
  return -1;
#endif
}
