/* pd_writers.h: the profiler core's outputs.
 *
 *  - the Kineto-compatible Chrome trace (Perfetto, chrome://tracing, torch-tb-profiler,
 *    Holistic Trace Analysis), streamed event by event to a temporary file and renamed;
 *  - the metrics JSON, schema v1 (docs/formats.md), written atomically;
 *  - JSON text helpers: locale-independent numbers, NaN/Inf as null, escaped strings.
 */
#ifndef PD_WRITERS_H
#define PD_WRITERS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_event.h"
#include "pd/pd_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Chrome trace ------------------------------------------------------------------- */

typedef struct {
  const char *trace_name;     /* "traceName"; may be NULL (then the file path) */
  int64_t unix_offset_ns;     /* pd_clock_unix_offset_ns(): added to event times */
  uint32_t pid;               /* host process id for host events */
  bool profile_memory;        /* write [memory] instant events */
} pd_trace_meta_t;

typedef struct pd_trace_writer pd_trace_writer_t;

/* Opens "<path>.tmp.<pid>" and writes the header (schemaVersion, deviceProperties, ...).
 * On success *out owns the writer; finish with pd_trace_writer_close() or _abort(). */
int pd_trace_writer_open(const char *path, const pd_trace_meta_t *meta,
                         const pd_device_props_t *devices, size_t ndevices,
                         pd_trace_writer_t **out);
/* Appends one event (and its ac2g flow end when it has a correlation id). */
int pd_trace_writer_event(pd_trace_writer_t *w, const pd_event_t *ev);
/* Writes the footer, flushes, renames the temporary file to its final path, frees w.
 * On failure the temporary file is removed and nothing is left at the final path. */
int pd_trace_writer_close(pd_trace_writer_t *w);
/* Removes the temporary file and frees w. NULL is a no-op. */
void pd_trace_writer_abort(pd_trace_writer_t *w);
/* Convenience: writes a whole trace to path (open, every event, close). */
int pd_trace_write_file(const char *path, const pd_trace_t *trace, const pd_trace_meta_t *meta);

/* ---- metrics JSON --------------------------------------------------------------------- */

#define PD_METRICS_SCHEMA_VERSION 1

typedef struct {
  char name[256];
  int compute_major;
  int compute_minor;
  int sm_count;
  uint64_t total_global_mem;
  int driver_version;  /* cudaDriverGetVersion */
  int runtime_version; /* cudaRuntimeGetVersion */
  int cupti_version;   /* cuptiGetVersion; 0 when unknown */
} pd_device_info_t;

/* Config entries are generic key/value pairs so the core knows nothing of scenarios. */
typedef enum { PD_CFG_STRING, PD_CFG_INT, PD_CFG_BOOL, PD_CFG_DOUBLE } pd_cfg_type_t;
typedef struct {
  const char *key;
  pd_cfg_type_t type;
  const char *s;
  int64_t i;
  bool b;
  double d;
} pd_cfg_entry_t;

typedef struct {
  const pd_cfg_entry_t *config;
  size_t nconfig;
  const pd_device_info_t *device;
  const pd_metrics_t *metrics;
  const double *step_times_s; /* per profiled step */
  const double *dataloader_wait_s;
  size_t nsteps;
  const pd_verdict_t *verdict;
  const pd_op_table_t *top_ops; /* sorted as it should appear; may be NULL */
  int top_ops_limit;            /* rows to write; <= 0: all */
  const char *const *trace_files;
  size_t ntrace_files;
} pd_run_report_t;

/* Writes the metrics JSON to "<path>.tmp.<pid>" and renames it to path. Returns 0, or
 * PD_EIO with nothing left at path. */
int pd_metrics_json_write(const char *path, const pd_run_report_t *report);

/* ---- JSON text helpers ------------------------------------------------------------------ */

/* Writes s as a JSON string literal (quotes included): escapes quotes, backslashes and
 * control characters; replaces invalid UTF-8 bytes with U+FFFD. NULL writes null. */
void pd_json_write_string(FILE *out, const char *s);
/* Writes a number with '.' as decimal point whatever the locale, shortest form that
 * round-trips a double; NaN and Inf as null. */
void pd_json_write_double(FILE *out, double v);

#ifdef __cplusplus
}
#endif
#endif /* PD_WRITERS_H */
