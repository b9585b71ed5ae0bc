/* pd_cnn.h: the SimpleCNN training step on the GPU (CUDA Toolkit only).
 *
 * SimpleCNN: conv3x3(3->32,pad 1)-ReLU-conv3x3(32->64,pad 1)-ReLU-maxpool2
 *            -conv3x3(64->128,pad 1)-ReLU-global average pool-linear(128->10),
 * cross entropy, AdamW (lr 1e-3), optional AMP (fp16 compute, fp32 master weights,
 * dynamic loss scaling with GradScaler semantics: init 65536, growth x2 every 2000
 * clean steps, backoff x0.5 and skip the step on inf/nan; the skip is decided on the
 * device, so AMP adds no host synchronization).
 *
 * The planted problems of the scenarios are knobs of the step, so a user can A/B them:
 * the TinyOpsBlock (a chain of tiny elementwise kernels, fused, or replayed as a CUDA
 * graph), temporary buffers through plain cudaMalloc/cudaFree or a stream-ordered pool,
 * and host reads of the loss inside the step.
 *
 * Every launch runs inside a named host range (pd_range_push) so the profiler
 * attributes kernels to layers. Calls return 0 or a PD_E* code.
 */
#ifndef PD_CNN_H
#define PD_CNN_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "pd/pd_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PD_CNN_IMAGE_C 3
#define PD_CNN_IMAGE_H 32
#define PD_CNN_IMAGE_W 32
#define PD_CNN_CLASSES 10

typedef enum {
  PD_TINY_OFF = 0,  /* no TinyOpsBlock */
  PD_TINY_CHAIN,    /* planted: `tiny_ops_depth` separate elementwise kernels fwd + bwd */
  PD_TINY_FUSED,    /* fix: the same math in one kernel fwd and one bwd */
  PD_TINY_GRAPH     /* fix: the chain captured once as a CUDA graph and replayed */
} pd_tiny_mode_t;

/* The step's temporaries are its per-step buffers (im2col workspaces, layer outputs,
 * activation gradients, the gradient buffer: 15 in this model). Each is taken from the
 * allocator just before the layer that writes it and given back after the last layer
 * that reads it, every step, as a framework's caching allocator would see them. */
typedef enum {
  PD_ALLOC_POOL = 0, /* temporaries from the model's stream-ordered pool
                        (cudaMallocFromPoolAsync/cudaFreeAsync; release threshold
                        UINT64_MAX, so steady state makes no OS allocation, no sync) */
  PD_ALLOC_CHURN     /* planted: every temporary through cudaMalloc/cudaFree each step
                        (cudaFree waits for the device) */
} pd_alloc_mode_t;

typedef enum {
  PD_SYNC_NONE = 0, /* loss stays on the device; read once at the end */
  PD_SYNC_FORCED    /* planted: loss.item() and other blocking reads inside every step */
} pd_sync_mode_t;

typedef struct {
  int batch;           /* >= 1 */
  bool amp;            /* fp16 compute with dynamic loss scaling */
  uint64_t seed;       /* weight initialization */
  float lr;            /* AdamW learning rate, default 1e-3 */
  float weight_decay;  /* AdamW weight decay, default 1e-2 */
  pd_tiny_mode_t tiny_mode;
  int tiny_ops_depth;  /* elementwise ops in the TinyOpsBlock chain, default 256 */
  pd_alloc_mode_t alloc_mode;
  int churn_buffers;   /* per-step buffers that are temporaries (in either alloc_mode),
                          default 64; capped at the model's 15; 0 keeps every buffer in
                          workspaces allocated once at create (no allocator call per step) */
  pd_sync_mode_t sync_mode;
} pd_cnn_config_t;

typedef struct pd_cnn pd_cnn_t;

/* Fills cfg with the defaults above (batch 64, no AMP, no planted problem). */
void pd_cnn_config_init(pd_cnn_config_t *cfg);

/* Creates the model, optimizer state and workspaces on the current device, launching
 * on `stream` (any stream, the legacy default stream too). On success *out owns it; free
 * with pd_cnn_destroy(). PD_EINVAL for a config outside the ranges above (batch
 * 1..65536, lr > 0, weight_decay >= 0, tiny_ops_depth 1..100000 when the block is on,
 * churn_buffers >= 0, known enum values), PD_EDEVOOM when the GPU is out of memory
 * (nothing is leaked). */
int pd_cnn_create(const pd_cnn_config_t *cfg, cudaStream_t stream, pd_cnn_t **out);
void pd_cnn_destroy(pd_cnn_t *cnn);

/* Enqueues one training step (forward, loss, backward, unscale, AdamW, scaler update;
 * no zero_grad is needed: every gradient is overwritten) on the model's stream. `images` is batch x 3 x 32 x 32 float32 NCHW
 * on the device, `labels` batch int32 on the device. Does not synchronize unless the
 * config's sync_mode says so. */
int pd_cnn_train_step(pd_cnn_t *cnn, const float *images, const int32_t *labels);

/* Waits for the stream and returns the loss of the last step (the unscaled mean cross
 * entropy). PD_ESTATE before the first step. */
int pd_cnn_last_loss(pd_cnn_t *cnn, float *loss);

/* AMP bookkeeping (waits for the stream): current loss scale (1 without AMP) and number
 * of skipped steps (inf/nan). Either pointer may be NULL. */
int pd_cnn_amp_state(pd_cnn_t *cnn, float *scale, int64_t *skipped_steps);

/* Injected device time, the regression gate's GPU-side self-test: every later step's
 * optimizer kernel runs ns nanoseconds longer (its last block busy-waits on the GPU's
 * timer), so the step's kernel count and launches stay as they were. 0 turns it off.
 * Returns 0 or PD_EINVAL (NULL model, ns < 0). */
int pd_cnn_set_gpu_slowdown(pd_cnn_t *cnn, int64_t ns);

/* Enqueues on the model's stream one GPU thread that holds it for ns nanoseconds, so
 * the host can enqueue a whole step before the GPU starts on it (used to measure a
 * step's GPU time without host gaps). Returns 0, PD_EINVAL or PD_ECUDA. */
int pd_cnn_gpu_delay(pd_cnn_t *cnn, int64_t ns);

/* The model's stream. */
cudaStream_t pd_cnn_stream(const pd_cnn_t *cnn);

/* Bytes of device memory the model holds (weights, optimizer state, workspaces, and
 * what its temporaries' pool keeps reserved). */
size_t pd_cnn_device_bytes(const pd_cnn_t *cnn);

/* Number of temporaries per step: each costs one allocation and one free per step
 * (cudaMalloc/cudaFree in CHURN mode, pool calls in POOL mode). */
int pd_cnn_temporaries(const pd_cnn_t *cnn);

/* Detail of the calling thread's last failure in this module ("cnn.c:120:
 * cudaMalloc(...): out of memory"); static storage, "" when none. */
const char *pd_cnn_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* PD_CNN_H */
