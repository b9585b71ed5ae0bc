/* trace_links.h: the External id links the trace writer adds (internal to pd_model).
 *
 * torch-tb-profiler and Holistic Trace Analysis tie an op to the CUDA calls it made and
 * to the GPU work those calls launched through Kineto's "External id": every host op
 * gets one, a runtime/driver call carries the id of the innermost op open on its thread,
 * and the GPU activity (and synchronization record) carries the id of its launching call
 * (same correlation id). Kineto also draws each annotated host range once more on the GPU
 * row of every stream it launched work on: a "gpu_user_annotation" span from the start of
 * its first GPU activity to the end of its last (and a nanosecond or a few beyond: below).
 *
 * The links are computed in one pass over events in start order (the order of a sorted
 * pd_trace_t, which is also the order the writer streams them in): host ranges form a
 * stack per thread (a range is closed once an event starts at or after its end), calls
 * look up the top of their thread's stack, GPU activity looks up its call by correlation
 * id and widens the spans of that call's range and of every range enclosing it.
 */
#ifndef PD_TRACE_LINKS_H
#define PD_TRACE_LINKS_H

#include <stdbool.h>
#include <stdint.h>

#include "pd/pd_event.h"

typedef struct pd_links pd_links_t;

/* One gpu_user_annotation span: a host range's GPU work on one stream. */
typedef struct {
  const char *name; /* the range's name, owned by the links */
  uint64_t ext_id;  /* the range's External id */
  uint32_t device;
  uint32_t stream;
  int64_t start_ns;
  int64_t end_ns;
} pd_gpu_span_t;

/* Returns new empty links, or NULL when out of memory. Free with pd_links_destroy(). */
pd_links_t *pd_links_create(void);
/* Frees the links and every string they hold. NULL: no-op. */
void pd_links_destroy(pd_links_t *l);

/* Host range or op (RANGE, CPU_OP): gives it the next External id (1, 2, ...) and opens
 * it on its thread. ProfilerStep#N ranges and data-wait ranges take part in the stack
 * but get no GPU span (Kineto draws none for them). Returns the id, or 0 when out of
 * memory. */
uint64_t pd_links_range(pd_links_t *l, const pd_event_t *ev);
/* RUNTIME/DRIVER call: returns the External id of the innermost range open on its thread
 * (0: none) and remembers it for the call's correlation id. */
uint64_t pd_links_call(pd_links_t *l, const pd_event_t *ev);
/* KERNEL, MEMCPY, MEMSET or SYNC: returns the External id of its launching call's range
 * (0: unknown). GPU activity (not SYNC) widens the GPU spans of that range and its
 * enclosing ranges on the activity's device and stream. */
uint64_t pd_links_activity(pd_links_t *l, const pd_event_t *ev);
/* How many GPU spans hold GPU activity ev (KERNEL, MEMCPY, MEMSET) and not next, the
 * activity after it on its stream (NULL or not yet linked: all that hold ev): the spans
 * of its launching call's range and the enclosing ranges that get spans, which end 1, 2,
 * ... ns past it, before next. The trace writer ends ev that much before next where the
 * gap is smaller, so that the pads fit (docs/formats.md). 0 for a SYNC or unknown ev. */
int pd_links_span_depth(const pd_links_t *l, const pd_event_t *ev, const pd_event_t *next);
/* Where a forward range began: the start of a fwdbwd flow. */
typedef struct {
  uint64_t ext_id; /* the forward range's External id: the flow's id */
  uint32_t pid, tid;
  int64_t start_ns;
} pd_fwd_range_t;

/* Forward/backward pairs, torch's fwdbwd flows: a host RANGE named "<m>.forward" is
 * remembered as <m>'s forward in its process (call after pd_links_range() gave it its
 * id); a later RANGE named "<m>.backward" in the same process takes the latest forward
 * of <m> not yet taken. Returns true and fills *fwd for a backward range that found its
 * forward, else false. */
bool pd_links_fwdbwd(pd_links_t *l, const pd_event_t *ev, uint64_t ext_id, pd_fwd_range_t *fwd);
/* First error (PD_ENOMEM) met so far, else 0. */
int pd_links_error(const pd_links_t *l);

/* The GPU spans, nested per (device, stream) row. A span ends at the earliest of its
 * padded end and the start of the first activity of another range that follows its own
 * work on the row (so sibling ranges' spans never overlap), but never before the end of
 * its own work. Where two spans of ranges that do not
 * enclose each other overlap in part (GPU work of two ops running at once), the later
 * one starts where the earlier ends, so viewers that stack a row never see a partial
 * overlap. Sorted by row, then start. *out points into the links (valid until the next
 * call or destroy). Returns the count, or PD_ENOMEM. */
int64_t pd_links_gpu_spans(pd_links_t *l, const pd_gpu_span_t **out);

/* ---- nesting on a row ---------------------------------------------------------------------- */

/* Events that end on the very nanosecond of the event they lie in, on one (pid, tid) row:
 * readers compute an end as ts + dur from three-decimal microseconds in float64, and two
 * such sums of one true end can come out in either order, so a viewer sees the child
 * outlive its parent (speedscope's "Tried to end ..."; HTA's ceil/floor then differ by a
 * whole microsecond). The guard keeps each row's open events (in start order) and tells
 * the writer to end such a child 1 ns before the end written for its parent, 2 ns for a
 * grandchild on the same nanosecond, and so on: below any host clock's resolution, and
 * far beyond float64's error on trace microseconds. Events that overlap in part (real GPU
 * concurrency) are left as they are. Per-row state only: memory grows with rows and
 * depth, not with events. */
typedef struct pd_nest pd_nest_t;

/* Returns a new empty guard, or NULL when out of memory. Free with pd_nest_destroy(). */
pd_nest_t *pd_nest_create(void);
/* Frees the guard. NULL: no-op. */
void pd_nest_destroy(pd_nest_t *n);
/* The end to write for an event [start_ns, end_ns] on row (pid, tid), events coming in
 * start order per row: end_ns, or less where the event would end on or past the written
 * end of the event it lies in; never below start_ns. Sets *err to PD_ENOMEM (and returns
 * end_ns) when out of memory. */
int64_t pd_nest_end(pd_nest_t *n, uint32_t pid, uint32_t tid, int64_t start_ns, int64_t end_ns, int *err);
/* True when [start_ns, end_ns] would overlap in part the innermost event still open on
 * row (pid, tid): it starts inside it and ends after it. Same start-order rule. */
bool pd_nest_overlaps(pd_nest_t *n, uint32_t pid, uint32_t tid, int64_t start_ns, int64_t end_ns);

#endif /* PD_TRACE_LINKS_H */
