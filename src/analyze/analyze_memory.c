/* analyze_memory.c: the device memory timeline from [memory] events.
 *
 * torch's caching allocator and our profiler both log one instant per allocation and
 * release with its size ("Bytes", negative for a release) and, when known, the device
 * bytes live afterwards ("Total Allocated"). The timeline uses the totals when every
 * device event has one; otherwise it is the running sum of the sizes from 0 (memory
 * allocated before the trace began is then not counted, as pd_metrics_from_trace says
 * of its peak). Host (pinned/pageable) events are counted but not drawn.
 */
#include "analyze_internal.h"

#include <stdlib.h>
#include <string.h>

static bool on_device(const pd_event_t *e) {
  return e->u.memory.mem_kind != PD_MEM_PAGEABLE && e->u.memory.mem_kind != PD_MEM_PINNED;
}

void pd_memtl_free(pd_memtl_t *m) {
  if (m == NULL) return;
  free(m->points);
  memset(m, 0, sizeof(*m));
}

int pd_memtl_build(const pd_trace_t *trace, pd_memtl_t *out) {
  if (out != NULL) memset(out, 0, sizeof(*out));
  if (trace == NULL || out == NULL) return PD_EINVAL;
  const pd_event_t *ev = pd_trace_events(trace);
  size_t n = pd_trace_count(trace), k = 0;
  bool all_totals = true;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind != PD_EVENT_MEMORY) continue;
    if (!on_device(&ev[i])) {
      out->host_events++;
      continue;
    }
    k++;
    if (ev[i].u.memory.total_allocated < 0) all_totals = false;
  }
  if (k == 0) return 0;
  out->points = malloc(k * sizeof(*out->points));
  if (out->points == NULL) return PD_ENOMEM;
  out->totals_known = all_totals;
  int64_t live = 0;
  out->low = INT64_MAX;
  out->peak = INT64_MIN;
  /* events are sorted by start (the reader and the profiler both sort) */
  for (size_t i = 0; i < n; i++) {
    const pd_event_t *e = &ev[i];
    if (e->kind != PD_EVENT_MEMORY || !on_device(e)) continue;
    live = all_totals ? e->u.memory.total_allocated : live + e->u.memory.bytes;
    if (e->u.memory.bytes > 0) {
      out->allocs++;
      out->alloc_bytes += e->u.memory.bytes;
    } else if (e->u.memory.bytes < 0) {
      out->frees++;
    }
    out->points[out->npoints++] = (pd_mem_point_t){e->start_ns, live};
    if (live > out->peak) {
      out->peak = live;
      out->peak_t_ns = e->start_ns;
    }
    if (live < out->low) out->low = live;
  }
  out->final = live;
  return 0;
}

void pd_memtl_print(FILE *out, const pd_memtl_t *m, const pd_breakdown_t *b) {
  if (out == NULL || m == NULL) return;
  fprintf(out, "Device memory timeline\n");
  if (m->npoints == 0) {
    fprintf(out, "  no device [memory] events in the trace (profile_memory off?)");
    if (m->host_events > 0) fprintf(out, "; %lld host memory events", (long long)m->host_events);
    fputc('\n', out);
    return;
  }
  char peak[32], low[32], fin[32], bytes[32], at[32];
  an_fmt_bytes(peak, sizeof peak, (double)m->peak);
  an_fmt_bytes(low, sizeof low, (double)m->low);
  an_fmt_bytes(fin, sizeof fin, (double)m->final);
  an_fmt_bytes(bytes, sizeof bytes, (double)m->alloc_bytes);
  int64_t t0 = m->points[0].t_ns;
  an_fmt_time(at, sizeof at, an_span_ns(t0, m->peak_t_ns));
  fprintf(out, "  %zu events (%lld allocations, %lld releases, %s allocated), %s\n", m->npoints,
          (long long)m->allocs, (long long)m->frees, bytes,
          m->totals_known ? "live bytes from Total Allocated" : "live bytes summed from 0 (no totals in the trace)");
  fprintf(out, "  live: peak %s (%s after the first event), low %s, at the end %s\n", peak, at, low, fin);
  if (b == NULL || b->nsteps == 0 || b->whole_trace) return;
  fprintf(out, "%8s  %12s  %12s  %14s  %12s\n", "step", "allocations", "releases", "bytes allocated", "peak live");
  for (size_t s = 0; s < b->nsteps; s++) {
    const pd_step_breakdown_t *st = &b->steps[s];
    int64_t pk = INT64_MIN;
    for (size_t i = 0; i < m->npoints; i++)
      if (m->points[i].t_ns >= st->start_ns && m->points[i].t_ns < st->end_ns && m->points[i].allocated > pk)
        pk = m->points[i].allocated;
    char ab[32], pkb[32];
    an_fmt_bytes(ab, sizeof ab, (double)st->mem_alloc_bytes);
    if (pk == INT64_MIN) snprintf(pkb, sizeof pkb, "-");
    else an_fmt_bytes(pkb, sizeof pkb, (double)pk);
    fprintf(out, "%8lld  %12lld  %12lld  %14s  %12s\n", (long long)st->step, (long long)st->mem_allocs,
            (long long)st->mem_frees, ab, pkb);
  }
}
