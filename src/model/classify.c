/* classify.c: the model's classifiers, one definition each (pd_classify.h): which API
 * calls synchronize or allocate, which kernels are GEMMs, which ranges wait for data. The
 * metrics, the attribution, the writers, the capture layer and the analyzer all ask here.
 */
#include "pd/pd_classify.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

/* ---- data-wait ranges ------------------------------------------------------------------ */

static const char *const data_wait_names[] = {
#define PD_DATA_WAIT_GEN(name) name,
    PD_RANGE_DATA_WAIT_MAP(PD_DATA_WAIT_GEN)
#undef PD_DATA_WAIT_GEN
};

bool pd_range_is_data_wait(const char *name) {
  if (name == NULL) return false;
  for (size_t i = 0; i < sizeof data_wait_names / sizeof data_wait_names[0]; i++)
    if (strcmp(name, data_wait_names[i]) == 0) return true;
  return strncmp(name, "enumerate(DataLoader)#", 22) == 0 || strncmp(name, "enumerate(DataPipe)#", 20) == 0;
}

bool pd_event_is_data_wait(const pd_event_t *ev) {
  return ev != NULL && (ev->kind == PD_EVENT_RANGE || ev->kind == PD_EVENT_CPU_OP) && ev->u.range.step < 0 &&
         pd_range_is_data_wait(ev->name);
}

/* ---- API calls: synchronizing, allocating -------------------------------------------- */

/* Calls that block the host until the device (or a stream, or an event) catches up.
 * Not here: cudaStreamWaitEvent (the wait happens on the device, the host goes on),
 * the *Async copies, and cudaFree (it may synchronize, but it is the allocator rule's). */
static const char *const sync_api_names[] = {
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cudaThreadSynchronize", "cudaMemcpy",            "cudaMemcpy2D",
    "cudaMemcpy3D",          "cudaMemcpyFromSymbol",  "cudaMemcpyPeer",
    "cuCtxSynchronize",      "cuStreamSynchronize",   "cuEventSynchronize",
    "cuMemcpy",              "cuMemcpyDtoH",          "cuMemcpyHtoD",
};

/* Plain device allocations and releases. Not here: cudaMallocAsync/cudaFreeAsync (the
 * stream-ordered pool is the fix for churn), host allocations (cudaMallocHost,
 * cudaHostAlloc, cudaFreeHost) and managed memory. */
static const char *const alloc_api_names[] = {
    "cudaMalloc",   "cudaFree",      "cudaMallocPitch", "cudaMalloc3D",   "cudaMallocArray",
    "cudaFreeArray", "cudaMalloc3DArray", "cuMemAlloc", "cuMemFree",      "cuMemAllocPitch",
};

/* Length of name without a CUPTI/driver version suffix ("_v3020", "_v2") and without a
 * per-thread-default-stream suffix ("_ptds", "_ptsz"), which both name the same call. */
static size_t api_base_len(const char *name) {
  size_t len = strlen(name);
  for (int pass = 0; pass < 2; pass++) {
    if (len > 5 && (strncmp(name + len - 5, "_ptds", 5) == 0 || strncmp(name + len - 5, "_ptsz", 5) == 0))
      len -= 5;
    size_t d = len;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') d--;
    if (d < len && d >= 2 && name[d - 1] == 'v' && name[d - 2] == '_') len = d - 2;
  }
  return len;
}

static bool api_in(const char *name, const char *const *table, size_t n) {
  if (name == NULL) return false;
  size_t len = api_base_len(name);
  for (size_t i = 0; i < n; i++)
    if (strlen(table[i]) == len && strncmp(name, table[i], len) == 0) return true;
  return false;
}

bool pd_api_is_sync(const char *name) {
  return api_in(name, sync_api_names, sizeof sync_api_names / sizeof sync_api_names[0]);
}

bool pd_api_is_device_alloc(const char *name) {
  return api_in(name, alloc_api_names, sizeof alloc_api_names / sizeof alloc_api_names[0]);
}

/* What a blocking call waits for. cudaFree and cuMemFree synchronize the device before
 * they release memory (CUDA programming guide, "Implicit synchronization"); the copies
 * in sync_api_names wait for their own copy. */
static const char *const device_sync_names[] = {"cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize",
                                                "cudaFree", "cuMemFree"};
static const char *const stream_sync_names[] = {"cudaStreamSynchronize", "cuStreamSynchronize"};
static const char *const event_sync_names[] = {"cudaEventSynchronize", "cuEventSynchronize"};

pd_sync_scope_t pd_api_sync_scope(const char *name) {
#define IN(t) api_in(name, t, sizeof t / sizeof t[0])
  if (IN(device_sync_names)) return PD_SYNC_SCOPE_DEVICE;
  if (IN(stream_sync_names)) return PD_SYNC_SCOPE_STREAM;
  if (IN(event_sync_names)) return PD_SYNC_SCOPE_EVENT;
#undef IN
  if (pd_api_is_sync(name)) return PD_SYNC_SCOPE_COPY;
  return PD_SYNC_SCOPE_NONE;
}

/* ---- API names ---------------------------------------------------------------------------- */

static bool name_starts(const char *name, const char *prefix) {
  return name != NULL && strncmp(name, prefix, strlen(prefix)) == 0;
}

bool pd_api_is_sync_memcpy(const char *name) {
  return pd_api_is_sync(name) && (name_starts(name, "cudaMemcpy") || name_starts(name, "cuMemcpy"));
}

bool pd_api_is_sync_memset(const char *name) {
  if (!name_starts(name, "cudaMemset") && !name_starts(name, "cuMemset")) return false;
  return strstr(name, "Async") == NULL;
}

/* ---- kernel names ------------------------------------------------------------------------ */

static bool contains_ci(const char *s, const char *pat) {
  size_t m = strlen(pat);
  for (; *s != '\0'; s++) {
    size_t k = 0;
    while (k < m && s[k] != '\0' && tolower((unsigned char)s[k]) == pat[k]) k++;
    if (k == m) return true;
  }
  return false;
}

/* GEMM and convolution kernels of cuBLAS (incl. cuBLASLt's nvjet), cuDNN, CUTLASS and
 * the like, by name; and the markers of their Tensor Core variants. */
static const char *const matmul_marks[] = {"gemm", "conv", "xmma", "nvjet", "cutlass", "wgrad",
                                           "dgrad", "fprop", "matmul"};
static const char *const tensor_core_marks[] = {"tensorop", "hmma", "imma", "wgmma", "tf32", "f16", "bf16",
                                                "fp16", "half", "h884", "h1688", "h16816", "s1688",
                                                "i8816", "e4m3", "e5m2", "fp8"};

bool pd_kernel_is_matmul(const char *name, bool *tensor_core) {
  if (tensor_core != NULL) *tensor_core = false;
  if (name == NULL) return false;
  bool mm = false;
  for (size_t i = 0; i < sizeof matmul_marks / sizeof matmul_marks[0] && !mm; i++)
    mm = contains_ci(name, matmul_marks[i]);
  if (!mm) return false;
  bool tc = false;
  for (size_t i = 0; i < sizeof tensor_core_marks / sizeof tensor_core_marks[0] && !tc; i++)
    tc = contains_ci(name, tensor_core_marks[i]);
  /* nvjet_sm90_<in><compute><out>_...: h(alf), b(f16), t(f32), e (fp8), i(nt8) inputs
   * run on Tensor Cores; s(ingle) and d(ouble) inputs do not. */
  const char *nv = strstr(name, "nvjet_sm");
  if (!tc && nv != NULL) {
    const char *u = strchr(nv + 8, '_');
    if (u != NULL && strchr("hbtei", u[1]) != NULL && u[1] != '\0') tc = true;
  }
  if (tensor_core != NULL) *tensor_core = tc;
  return true;
}
