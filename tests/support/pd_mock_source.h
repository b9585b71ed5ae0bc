/* pd_mock_source.h: a scripted record source for unit tests (test-support library
 * pd_mock_source; links the model layer only, builds and runs without a GPU).
 *
 * It implements the profiler's record-source interface (pd_source.h) the way the CUPTI
 * source behaves, so a test passes it in pd_prof_config_t.source and drives the real
 * state machine (schedule, cycles, on_trace_ready) end to end:
 *  - records are taken only while the source is enabled (a traced phase), as CUPTI takes
 *    them; records scripted while it is disabled are counted as ignored;
 *  - flush hands the taken records over ("a completed buffer": one per flush that
 *    carries records) and adds the scripted drops and callback errors to the counts;
 *  - collect adds the handed-over records starting at or after the window to the cycle,
 *    collect(NULL) discards them (warmup);
 *  - any operation can be scripted to fail from its Nth call on (a source that fails in
 *    the middle of a run).
 * Host-side API records span real time on the calling thread (the source busy-waits
 * through the call), so they nest inside the host ranges around them; GPU work is placed
 * on a per-stream timeline after its launching call, as a GPU would run it.
 *
 * One thread: the test's (the profiler's thread).
 */
#ifndef PD_MOCK_SOURCE_H
#define PD_MOCK_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pd/pd_event.h"
#include "pd/pd_source.h"

typedef struct pd_mock_source pd_mock_source_t;

/* The operations a script can count or make fail. */
typedef enum {
  PD_MOCK_ENABLE = 0,
  PD_MOCK_DISABLE,
  PD_MOCK_FLUSH,
  PD_MOCK_COLLECT,
  PD_MOCK_DETACH,
  PD_MOCK_CENSUS,
  PD_MOCK_OP_COUNT
} pd_mock_op_t;

/* Makes a source describing one device ("Mock GPU", 132 SMs, 80 GiB). Returns NULL when
 * out of memory. Free with pd_mock_source_destroy() after the profiler using it. */
pd_mock_source_t *pd_mock_source_create(void);
void pd_mock_source_destroy(pd_mock_source_t *m);
/* The interface to put in pd_prof_config_t.source; owned by m. */
pd_record_source_t *pd_mock_source_base(pd_mock_source_t *m);
/* Replaces the device the cycles describe; NULL: none. */
void pd_mock_source_set_device(pd_mock_source_t *m, const pd_device_props_t *dev);

/* ---- records ----------------------------------------------------------------------------------- */

/* Takes one record as given (strings are copied). Returns 1 taken, 0 ignored (source
 * disabled), or PD_ENOMEM. */
int pd_mock_source_record(pd_mock_source_t *m, const pd_event_t *ev);
/* A CUDA API call on the calling thread lasting about call_ns (busy-waited), with a
 * fresh correlation id: a DRIVER record for names starting "cu" but not "cuda", else
 * RUNTIME. Returns the correlation id (also when ignored), to give to the call's GPU
 * work below. */
uint64_t pd_mock_source_call(pd_mock_source_t *m, const char *api, int64_t call_ns);
/* A CUDA API call the source sees and does not record (as CUPTI instruments cudaGetDevice
 * in the default capture): counted only by a running census (pd_source.h), while enabled. */
void pd_mock_source_unrecorded_call(pd_mock_source_t *m, bool driver);
/* GPU work of call `corr` on `stream`: it starts when both the call has ended and the
 * stream is free, and lasts gpu_ns. Each returns what pd_mock_source_record() does. */
int pd_mock_source_kernel(pd_mock_source_t *m, uint64_t corr, uint32_t stream, const char *name, int64_t gpu_ns);
int pd_mock_source_memcpy(pd_mock_source_t *m, uint64_t corr, uint32_t stream, pd_memcpy_kind_t kind,
                          uint64_t bytes, int64_t gpu_ns);
int pd_mock_source_memset(pd_mock_source_t *m, uint64_t corr, uint32_t stream, uint64_t bytes, int64_t gpu_ns);
/* The host's wait inside call `corr` (a SYNC record spanning the call, as CUPTI's
 * synchronization records do). */
int pd_mock_source_sync(pd_mock_source_t *m, uint64_t corr, pd_sync_kind_t kind);
/* A device allocation (bytes > 0) or release (bytes < 0) of `address` made by call corr. */
int pd_mock_source_memory(pd_mock_source_t *m, uint64_t corr, uint64_t address, int64_t bytes);

/* ---- faults -------------------------------------------------------------------------------------- */

/* Records lost: added to the dropped count at the next flush, as CUPTI reports a full
 * buffer's drops when the buffer completes. */
void pd_mock_source_drop(pd_mock_source_t *m, uint64_t records);
/* Buffer calls that failed where no error could be returned, counted at the next flush. */
void pd_mock_source_error(pd_mock_source_t *m, uint64_t count);
/* Makes op fail with rc (a negative PD_E* code) from its first_call-th call on (1 = the
 * first); err then reads "mock source: <op> failed (scripted)". rc = 0 clears it. */
void pd_mock_source_fail(pd_mock_source_t *m, pd_mock_op_t op, int first_call, int rc);

/* ---- what happened ------------------------------------------------------------------------------- */

/* Calls of op so far. */
int pd_mock_source_calls(const pd_mock_source_t *m, pd_mock_op_t op);
/* Records taken, ignored (disabled), collected into a cycle, discarded (collect(NULL)
 * or before the window). */
uint64_t pd_mock_source_taken(const pd_mock_source_t *m);
uint64_t pd_mock_source_ignored(const pd_mock_source_t *m);
uint64_t pd_mock_source_collected(const pd_mock_source_t *m);
uint64_t pd_mock_source_discarded(const pd_mock_source_t *m);
/* Whether records are being taken now. */
bool pd_mock_source_enabled(const pd_mock_source_t *m);

#endif /* PD_MOCK_SOURCE_H */
