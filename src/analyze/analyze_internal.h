/* analyze_internal.h: helpers shared by the analyzer's files (src/analyze/analyze_*.c),
 * not public: the breakdown and the top table over one shared trace index, the core's
 * classifiers and demangler under the analyzer's names, event display names, time, byte
 * and column formatting, a top table's options and a diff's totals. Names start with an_
 * to keep them apart from the public pd_ API.
 */
#ifndef PD_ANALYZE_INTERNAL_H
#define PD_ANALYZE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_analyze.h"

/* The breakdown and the top table from an index built once for the whole analysis
 * (pd_breakdown_compute() and pd_top_build() build their own). */
int an_breakdown_compute(const pd_trace_t *trace, const pd_trace_index_t *ix, int64_t kernel_wait_ns,
                         pd_breakdown_t *out);
int an_top_build(const pd_trace_t *trace, const pd_trace_index_t *ix, const pd_top_opts_t *opts, pd_top_t **out);

/* The model's definitions (pd_stats.h) under the analyzer's names. */
static inline bool an_is_gpu_activity(pd_event_kind_t k) { return pd_event_is_gpu_activity(k); }

static inline int64_t an_dur(const pd_event_t *e) { return pd_event_dur_ns(e); }

/* to - from, saturated: a trace's times may lie anywhere in the reader's range, so a span
 * between two of them can pass int64's; every span the analyzer prints is taken here. */
static inline int64_t an_span_ns(int64_t from, int64_t to) { return pd_sub_sat_i64(to, from); }

/* Name to show for an event: pd_event_display_name(), and Kineto's names for
 * synchronization records without one. Result is ev->name, buf or a static string. */
const char *an_event_name(const pd_event_t *ev, char *buf, size_t len);

/* The model's demangler (pd_demangle(), src/model/demangle.c) under the analyzer's name. */
static inline bool an_demangle(const char *mangled, char *buf, size_t len) {
  return pd_demangle(mangled, buf, len);
}

/* "12.345 ms" style: ns, us, ms or s with three decimals. */
void an_fmt_time(char *buf, size_t len, int64_t ns);
/* Same for a fractional count of ns (per-step averages). */
void an_fmt_time_d(char *buf, size_t len, double ns);
/* "786.4 KiB" style (B, KiB, MiB, GiB). */
void an_fmt_bytes(char *buf, size_t len, double bytes);
/* Writes s cut to width columns ("..." at the end when cut) into buf. */
void an_fit(char *buf, size_t len, const char *s, int width);

/* The options a top table was built with (type is NULL there). */
const pd_top_opts_t *an_top_opts(const pd_top_t *top);
/* Device total per step of each side of a diff. */
void an_diff_totals(const pd_diff_t *diff, double *a_ns, double *b_ns);

#endif /* PD_ANALYZE_INTERNAL_H */
