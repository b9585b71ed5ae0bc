/* pd_reader.h: the one trace reader (model layer, src/model/trace_reader.c).
 *
 * A Chrome trace JSON (ours, *.pt.trace.json, and torch.profiler / Kineto's, plain or
 * gzipped) back into the neutral event model of pd_event.h, so the model's aggregation,
 * metrics and diagnosis run on it unchanged. Needs no GPU.
 */
#ifndef PD_READER_H
#define PD_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pd/pd_event.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- trace reader ---------------------------------------------------------------------- */

/* What the reader saw besides the events. */
typedef struct {
  int64_t base_time_ns;   /* baseTimeNanoseconds (0 when absent): event times count from it */
  int schema_version;     /* schemaVersion, -1 when absent */
  bool gzipped;           /* the file was gzip-compressed */
  bool torch;             /* written by torch.profiler (a trace_id key, or ops with an External id) */
  int trace_format;       /* profiler_demo's traceFormatVersion (1 when its trace has none); 0: another writer */
  char trace_name[512];   /* traceName, "" when absent */
  size_t text_bytes;      /* JSON text size (after decompression) */
  size_t json_events;     /* entries in traceEvents */
  size_t skipped;         /* entries not turned into events: metadata, flows, other categories */
  size_t kind_counts[PD_EVENT_KIND_COUNT]; /* events read, by kind */
  double load_s;          /* seconds spent reading (and inflating) the file */
  double parse_s;         /* seconds spent parsing the JSON text into events */
  double convert_s;       /* seconds spent sorting the events and rebuilding range depth */
} pd_trace_info_t;

/* The one trace-microseconds -> nanoseconds conversion: rounds us * 1000 to the nearest
 * integer (NaN gives 0, out of range saturates). Trace ts values are microseconds with
 * three decimals after baseTimeNanoseconds; read as a double, a ts converts exactly below
 * 2^41 us and within 1 ns up to 2^42 us. */
int64_t pd_trace_us_to_ns(double us);

/* Reads the Chrome trace at path (gzip detected by content) into out, which is reset
 * first and left empty on failure. Events come sorted by start time, with start_ns =
 * ts in ns after baseTimeNanoseconds. Returns 0; PD_EINVAL (NULL arguments); PD_EIO
 * (cannot open or read, not a regular file); PD_EPARSE (not JSON, corrupt gzip, no
 * traceEvents array, nesting deeper than 64 levels, a string over 4 MiB, a number the
 * reader uses out of range: |ts|, dur >= 4.6e15 us or an integer beyond int64); PD_ENOMEM. On failure err (when not NULL) holds one line naming the file and the
 * problem. info may be NULL. */
int pd_trace_read_file_info(const char *path, pd_trace_t *out, pd_trace_info_t *info, char *err,
                            size_t errlen);
/* Same, without the info. */
int pd_trace_read_file(const char *path, pd_trace_t *out, char *err, size_t errlen);

/* How far a file read has got; see pd_trace_read_file_progress(). */
typedef struct {
  uint64_t file_bytes; /* size of the file on disk */
  uint64_t file_read;  /* bytes of the file read so far (compressed bytes for a .gz) */
  uint64_t text_bytes; /* JSON text read so far (after decompression) */
  size_t events;       /* events made so far */
  double elapsed_s;    /* since the read began */
  bool done;           /* the last call: the whole file is read and checked */
} pd_trace_progress_t;
/* Called by the reader; it must not touch the trace being read. */
typedef void (*pd_trace_progress_cb)(const pd_trace_progress_t *progress, void *user);

/* pd_trace_read_file_info() that calls progress (when not NULL) after every chunk of
 * about 1 MiB of text and once with done set at the end of a successful read. The file
 * is streamed: memory grows with the events kept, not with the size of the JSON. */
int pd_trace_read_file_progress(const char *path, pd_trace_t *out, pd_trace_info_t *info,
                                pd_trace_progress_cb progress, void *user, char *err, size_t errlen);
/* Same, from JSON text in memory (len bytes, need not be terminated). */
int pd_trace_read_buffer(const char *text, size_t len, pd_trace_t *out, pd_trace_info_t *info,
                         char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PD_READER_H */
