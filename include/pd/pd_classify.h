/* pd_classify.h: classifiers of the event model (model layer): which names are what.
 *
 * One definition per question ("is this a data-wait range"), read by the capture layer,
 * the model's metrics and writers, and the analyzer alike.
 */
#ifndef PD_CLASSIFY_H
#define PD_CLASSIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "pd/pd_event.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns true when an API name (CUPTI's "cudaMemcpy_v3020", "cuMemAlloc_v2" and
 * "_ptds" forms included) is a host-blocking synchronizing call (cudaDeviceSynchronize,
 * cudaStreamSynchronize, cudaEventSynchronize, cudaMemcpy, ...; not
 * cudaStreamWaitEvent, not the *Async copies). One table in classify.c. */
bool pd_api_is_sync(const char *name);
/* Returns true for plain device allocation calls (cudaMalloc, cudaFree, cudaMallocPitch,
 * cudaMalloc3D, cuMemAlloc, cuMemFree, ...; not cudaMallocAsync/cudaFreeAsync, not host
 * or managed allocations). One table in classify.c. */
bool pd_api_is_device_alloc(const char *name);
/* What a host-blocking call waits for, by its name: the whole device (cudaDeviceSynchronize,
 * cuCtxSynchronize, and cudaFree/cuMemFree, which synchronize the device), one stream
 * (cudaStreamSynchronize), one event (cudaEventSynchronize), or its own copy (cudaMemcpy and
 * the other synchronous copies); NONE for every other call. The replay's sync edges read it. */
typedef enum {
  PD_SYNC_SCOPE_NONE = 0,
  PD_SYNC_SCOPE_DEVICE,
  PD_SYNC_SCOPE_STREAM,
  PD_SYNC_SCOPE_EVENT,
  PD_SYNC_SCOPE_COPY
} pd_sync_scope_t;
pd_sync_scope_t pd_api_sync_scope(const char *name);
/* A synchronous copy call (cudaMemcpy, cudaMemcpy2D, cuMemcpyHtoD, ...; not *Async). */
bool pd_api_is_sync_memcpy(const char *name);
/* cudaMemset, cudaMemset2D/3D, cuMemsetD8/16/32 and 2D forms, not the Async ones. */
bool pd_api_is_sync_memset(const char *name);
/* Returns true for a kernel name that looks like a GEMM or convolution (cuBLAS, cuDNN,
 * CUTLASS and the project's own), and sets *tensor_core when the name says it runs on
 * Tensor Cores (half/bf16/tf32/int8 MMA variants). One table in classify.c. */
bool pd_kernel_is_matmul(const char *name, bool *tensor_core);

/* Data-wait range names, one table: X(name). The data pipeline names the range in which
 * a step waits for its batch as torch's DataLoader iterators do (worker threads: the
 * multi-process iterator; num_workers=0: the single-process one), so torch-tb-profiler's
 * DataLoader category and HTA see it. "DataLoader.wait" is the name traces written
 * before used; it is still recognized. */
#define PD_RANGE_DATA_WAIT_MAP(X)                                  \
  X("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__") \
  X("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")   \
  X("DataLoader.wait")

/* The data-wait range with worker threads, and without (loading on the main thread). */
#define PD_RANGE_DATA_WAIT "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
#define PD_RANGE_DATA_WAIT_MAIN "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"

/* Returns true for a data-wait range: every name of PD_RANGE_DATA_WAIT_MAP, and any other
 * torch DataLoader/DataPipe iterator range ("enumerate(DataLoader)#...", as
 * torch-tb-profiler matches them). NULL: false. */
bool pd_range_is_data_wait(const char *name);
/* Returns true for a host range or op (not a ProfilerStep#N range) named as a data wait. */
bool pd_event_is_data_wait(const pd_event_t *ev);

#ifdef __cplusplus
}
#endif
#endif /* PD_CLASSIFY_H */
