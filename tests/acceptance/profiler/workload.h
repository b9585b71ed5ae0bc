/* workload.h: a CUDA workload with known contents, for the profiler's acceptance test.
 *
 * pd_wl_setup() makes a stream, events, a pinned host buffer and device buffers; then each
 * pd_wl_run() issues, on that stream and in this order: `allocs` device allocations
 * (cudaMalloc of (i+1) MiB), `h2d` host-to-device and `d2h` device-to-host copies of 1 MiB
 * (pinned), `memsets` device memsets of 256 KiB, `kernels` busy kernels of `kernel_us`
 * microseconds each (bracketed by CUDA events), then frees the allocations and
 * synchronizes. Nothing else: so a trace of one run has exactly these GPU activities.
 * Every CUDA call is checked; errors come back as text.
 */
#ifndef PD_ACCEPT_WORKLOAD_H
#define PD_ACCEPT_WORKLOAD_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PD_WL_COPY_BYTES ((size_t)1 << 20)
#define PD_WL_MEMSET_BYTES ((size_t)256 << 10)
#define PD_WL_KERNEL_NAME "pd_wl_busy_kernel"
#define PD_WL_MAX_ALLOCS 16

typedef struct {
  int allocs;
  int h2d;
  int d2h;
  int memsets;
  int kernels;
  int kernel_us;
} pd_wl_spec_t;

typedef struct pd_wl pd_wl_t;

/* Returns a workload context, or NULL with a message in err. Free with pd_wl_teardown(). */
pd_wl_t *pd_wl_setup(char *err, size_t errlen);
void pd_wl_teardown(pd_wl_t *wl);
/* Runs the workload once; *kernels_event_ms gets the CUDA-event time from before the first
 * kernel to after the last. Returns 0, or -1 with "call at file:line: error" in err. */
int pd_wl_run(pd_wl_t *wl, const pd_wl_spec_t *spec, double *kernels_event_ms, char *err,
              size_t errlen);
/* Bytes of allocation i (0-based): (i + 1) MiB. */
size_t pd_wl_alloc_bytes(int i);

#ifdef __cplusplus
}
#endif
#endif
