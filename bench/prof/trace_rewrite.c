/* trace_rewrite.c: re-writes recorded traces through the current trace writer and prints
 * the bytes per kernel event before and after.
 *
 * A trace written by an older writer (the committed fixtures, tests/fixtures/runs) is read
 * back into the event model (pd_trace_read_file_info) and written again with
 * pd_trace_write_file() as profiler_demo writes it (links on): the derived events (cpu_op
 * copies, gpu_user_annotation spans, flows, External ids) are made afresh, so the output
 * is what the current writer would have written for the same recording, and the peer
 * tools (../shared/peers/run_all.sh) can be run on it without a GPU. What the reader does
 * not keep (mangled kernel names, CUDA versions, the trace id) is not in the output.
 *
 * Bytes per kernel event: the text of each traceEvents object with "cat" "kernel", plus a
 * 2-byte separator (",\n"), averaged; its ac2g flow end is a separate entry and not
 * counted. Works on our one-line events and on torch's indented ones alike.
 *
 * Usage: trace_rewrite [--out DIR] TRACE...   (TRACE plain or .gz; DIR default /tmp)
 */
#define _GNU_SOURCE
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "pd/pd_analyze.h"
#include "pd/pd_writers.h"

/* The whole (inflated) text of path, NUL-terminated, in *out; returns its length or -1. */
static long slurp(const char *path, char **out) {
  gzFile gz = gzopen(path, "rb");
  if (gz == NULL) return -1;
  size_t cap = 1 << 20, len = 0;
  char *buf = malloc(cap + 1);
  int n = 0;
  while (buf != NULL && (n = gzread(gz, buf + len, (unsigned)(cap - len))) > 0) {
    len += (size_t)n;
    if (len == cap) {
      char *b = realloc(buf, cap * 2 + 1);
      if (b == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
  }
  gzclose(gz);
  if (buf == NULL || n < 0) {
    free(buf);
    return -1;
  }
  buf[len] = 0;
  *out = buf;
  return (long)len;
}

typedef struct {
  size_t kernels;
  size_t bytes; /* object text + 2 per kernel event */
} kbytes_t;

/* Scans JSON text for objects that are entries of an array (traceEvents' events) and sums
 * the size of those whose category is "kernel". */
static kbytes_t kernel_bytes(const char *text, size_t len) {
  kbytes_t r = {0, 0};
  char stack[64]; /* container kinds: '{' or '[' */
  size_t starts[64];
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (depth < 64) {
        stack[depth] = c;
        starts[depth] = i;
      }
      depth++;
    } else if (c == '}' || c == ']') {
      depth--;
      if (c == '}' && depth >= 1 && depth < 64 && stack[depth - 1] == '[') {
        size_t n = i + 1 - starts[depth];
        const char *o = text + starts[depth];
        if (memmem(o, n, "\"cat\":\"kernel\"", 14) != NULL || memmem(o, n, "\"cat\": \"kernel\"", 15) != NULL) {
          r.kernels++;
          r.bytes += n + 2;
        }
      }
      if (depth < 0) break;
    }
  }
  return r;
}

static int measure(const char *path, kbytes_t *out) {
  char *text = NULL;
  long len = slurp(path, &text);
  if (len < 0) return -1;
  *out = kernel_bytes(text, (size_t)len);
  free(text);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = "/tmp";
  int first = 1;
  if (argc > 2 && strcmp(argv[1], "--out") == 0) {
    dir = argv[2];
    first = 3;
  }
  if (first >= argc) {
    fprintf(stderr, "usage: trace_rewrite [--out DIR] TRACE...\n");
    return 2;
  }
  int rc = 0;
  printf("| trace | kernels | bytes per kernel event, as read | rewritten | output |\n|---|---:|---:|---:|---|\n");
  for (int i = first; i < argc; i++) {
    char err[512];
    pd_trace_info_t info;
    pd_trace_t *t = pd_trace_create();
    if (t == NULL || pd_trace_read_file_info(argv[i], t, &info, err, sizeof err) != 0) {
      fprintf(stderr, "trace_rewrite: %s\n", t ? err : "out of memory");
      pd_trace_destroy(t);
      rc = 1;
      continue;
    }
    /* The writer derives the GPU spans from the links again: keep the recorded events only. */
    pd_trace_t *rec = pd_trace_create();
    bool memory = false, shapes = false;
    uint32_t pid = 0;
    const pd_event_t *ev = pd_trace_events(t);
    for (size_t k = 0; rec != NULL && k < pd_trace_count(t); k++) {
      if (ev[k].kind == PD_EVENT_GPU_RANGE) continue;
      memory |= ev[k].kind == PD_EVENT_MEMORY;
      shapes |= (ev[k].kind == PD_EVENT_RANGE || ev[k].kind == PD_EVENT_CPU_OP) && ev[k].u.range.shape != NULL;
      if (pid == 0 && ev[k].kind == PD_EVENT_RANGE) pid = ev[k].pid;
      if (pd_trace_add(rec, &ev[k]) != 0) {
        pd_trace_destroy(rec);
        rec = NULL;
      }
    }
    for (size_t k = 0; rec != NULL && k < pd_trace_device_count(t); k++)
      (void)pd_trace_add_device(rec, &pd_trace_devices(t)[k]);
    char base[512], out[1024];
    snprintf(base, sizeof base, "%s", argv[i]);
    char *name = basename(base);
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, ".gz") == 0) name[n - 3] = 0;
    snprintf(out, sizeof out, "%s/%s", dir, name);
    pd_trace_meta_t meta = {.trace_name = out, .unix_offset_ns = info.base_time_ns, .pid = pid,
                            .profile_memory = memory, .process_name = "profiler_demo",
                            .record_shapes = shapes, .links = true};
    kbytes_t before, after;
    int wrc = rec == NULL ? PD_ENOMEM : pd_trace_write_file(out, rec, &meta);
    if (wrc != 0 || measure(argv[i], &before) != 0 || measure(out, &after) != 0) {
      fprintf(stderr, "trace_rewrite: %s: cannot rewrite to %s (%s)\n", argv[i], out, pd_strerror(wrc));
      rc = 1;
    } else {
      printf("| %s | %zu | %.1f | %.1f | %s |\n", argv[i], before.kernels,
             before.kernels ? (double)before.bytes / (double)before.kernels : 0.0,
             after.kernels ? (double)after.bytes / (double)after.kernels : 0.0, out);
      if (before.kernels != after.kernels) {
        fprintf(stderr, "trace_rewrite: %s: %zu kernels read, %zu written\n", argv[i], before.kernels, after.kernels);
        rc = 1;
      }
    }
    pd_trace_destroy(rec);
    pd_trace_destroy(t);
  }
  return rc;
}
