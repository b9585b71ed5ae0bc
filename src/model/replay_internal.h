/* replay_internal.h: the graph pd_replay_build() makes and pd_replay_run() replays
 * (internal to pd_prof; pd_replay.h is the interface). */
#ifndef PD_REPLAY_INTERNAL_H
#define PD_REPLAY_INTERNAL_H

#include <stdint.h>

#include "pd/pd_replay.h"

/* The profiler's cost per traced event where the trace carries no calibration
 * (docs/diagnosis.md, "The profiler's own cost", says where they come from). */
#define RP_OURS_NS_PER_CALL 3000.0  /* bench_prof --launch-only: +2.5..+3.8 us per traced launch */
#define RP_OURS_NS_PER_RANGE 500.0  /* a host range: clock reads, a record, NVTX push/pop */
#define RP_TORCH_NS_PER_EVENT 2700.0 /* torch.profiler, per op or traced call (H100): now the
                                        blocking calls' and the launch latency's share only */
/* torch.profiler (CPU and CUDA, shapes and memory): the host's work in ops and calls runs
 * this many times as long, the median over 50 phases of 8 processes measured in-process by
 * bench/diagnosis/phase_probe.py (H200 f4488643; quartiles 1.28..1.66) */
#define RP_TORCH_HOST_SLOWDOWN 1.42
#define RP_STR_(x) #x
#define RP_STR(x) RP_STR_(x) /* a macro's value as text, for the cost model's name */
/* One kernel of a CUDA graph: host and front-end cost per node (docs/diagnosis.md). */
#define RP_GRAPH_NODE_NS 300
/* Host-to-device bandwidth of pinned copies when the trace has no large pinned copy to
 * measure it from and its GPU is not in the replay's table of measured kinds (PCIe Gen5
 * x16, as H100/H200 hosts reach with cudaMemcpyAsync). */
#define RP_PINNED_GBPS_DOCUMENTED 50.0
/* A pinned copy of at least this size measures the bandwidth (smaller ones are
 * dominated by their fixed cost). */
#define RP_BW_MIN_BYTES (1u << 20)
/* ... and one faster than this (10 TB/s in MB/s, above any host link and HBM) is no
 * measurement: a size or duration read from a file that cannot be. */
#define RP_BW_MAX_MBPS 1e7
/* Tiny-op chains: at least this many consecutive launches of one thread, each of a kernel
 * that runs shorter than the host takes to issue the next (the GPU starves). */
#define RP_TINY_CHAIN_MIN 32
/* ... and each kernel a few microseconds at most (DESIGN.md: tiny_ops' kernels average
 * 1.5 us; torch's elementwise ops on small tensors 1-3 us). */
#define RP_TINY_KERNEL_NS 5000
/* Distinct op names a fused chain keeps one op of; a chain of more kinds removes the rest
 * (no fusion keeps more apart). */
#define RP_TINY_KINDS_MAX 64
/* A read as the CUDA calls alone show it (a trace without ops): a device-to-host copy of at
 * most this many bytes that blocks. .item() copies 1-8 bytes, a small .tolist() or
 * .cpu() of a metric a few KiB; a larger blocking copy is the step's output, not a value
 * read for logging. */
#define RP_CALL_READ_MAX_BYTES 65536u

#define RP_NOT_DONE INT64_MIN
/* A data wait waited for its batch when it took over twice the trace's median wait and
 * this much more (a ready batch's next() costs tens of microseconds in torch's iterator,
 * under a microsecond in profiler_demo's). */
#define RP_WAIT_BLOCKED_MIN_NS 20000

/* Host-task bits: why a fix removes or shortens it. */
enum {
  RP_B_DATA = 1u << 0,     /* inside a data-loading range */
  RP_B_READ = 1u << 1,     /* a blocking read or the host work that only feeds it */
  RP_B_ALLOC = 1u << 2,    /* inside cudaMalloc/cudaFree */
  RP_B_HOSTCODE = 1u << 3, /* outside every op (or only inside the step range) */
  RP_B_TINY = 1u << 4,     /* a chain of tiny ops */
  /* 1u << 5: free (was a kernel launch call's, before PD_FIX_LAUNCH took the whole step) */
  RP_B_PAGEABLE = 1u << 6, /* inside the call of a pageable copy */
  RP_B_PGOP = 1u << 7,     /* (build only) inside an op that issues a pageable copy: torch's
                              copy_ of a blocking .to() syncs its stream after the copy, a
                              wait the pinned, non-blocking copy does not have */
  RP_B_IDLE = 1u << 8      /* a long stretch outside every op of a thread other than the
                              step's: the thread waiting for work, which the profiler does not
                              slow and no fix removes */
};

enum { RP_HSTART = 0, RP_GPU = 1, RP_HEND = 2 };

typedef struct {
  int64_t t;   /* measured time, made monotone per thread/stream: the processing order */
  int64_t t0;  /* measured time as recorded */
  int64_t seg; /* host: measured duration of the task ending here */
  int64_t cut; /* host: the profiler's cost inside that task */
  int64_t anchor; /* host, the end of a data wait that waited for the loader: the batch's
                     ready time, set by the loader, not by the host (RP_NOT_DONE: none) */
  int32_t ev;
  int32_t prev; /* host: previous node of the thread; GPU: previous task of the stream */
  int32_t aux;  /* HEND: blocking call (blk) or -1; GPU: its task (gt) */
  int32_t fork; /* host start outside every op on a thread without step markers: the node of
                   the step thread it follows (that thread's last node at or before it); on
                   the step thread, a node ending an idle stretch that held another thread's
                   whole op: that op's end (the step thread waited for it, as the main thread
                   waits in backward() for torch's autograd thread); else -1 */
  uint16_t bits; /* host: RP_B_* of the task ending here */
  uint8_t type;
} rp_node_t;

typedef struct {
  int64_t dur, pinned_dur;
  int64_t gap;    /* measured start - previous task's end on the stream (>= 0) */
  int32_t launch; /* start node of the launching call, or -1 (edge not honoured) */
  int32_t dep_off, dep_n; /* record -> wait sources (GPU nodes) in deps */
  uint16_t bits;
  int8_t qkey; /* RP_QKEY(previous task's class, this task's class) on its stream, or -1 */
} rp_gtask_t;

/* GPU task classes for the queue gap: the time a stream takes to start a task that was
 * already queued when the previous one ended (a copy after a kernel waits longer than a
 * kernel after a kernel). */
enum { RP_Q_KERNEL = 0, RP_Q_COPY = 1, RP_Q_OTHER = 2, RP_Q_CLASSES = 3 };
#define RP_QKEY(prev, cur) ((int8_t)((prev) * RP_Q_CLASSES + (cur)))

typedef struct {
  int64_t base_left; /* the call's unblocked duration left for its last task */
  int64_t post;      /* work the call does after its wait (cudaFree releasing memory): its
                        measured end - targets' end - the trace's wake-up latency */
  int32_t dep_off, dep_n; /* targets (GPU nodes) in deps */
  uint16_t bits;
} rp_block_t;

struct pd_replay {
  pd_replay_info_t info;
  rp_node_t *nodes;
  size_t nnodes;
  int32_t *order; /* nodes in processing order */
  rp_gtask_t *gt;
  size_t ngt;
  rp_block_t *blk;
  size_t nblk;
  int32_t *deps;
  size_t ndeps;
  int32_t *step_node; /* per step: start node, end node (-1 unknown) */
  int64_t graph_node_ns, async_copy_ns;
  int64_t call_cost_ns; /* the profiler's cost per traced CUDA call (the cost model's) */
  int64_t qgap_ns[RP_Q_CLASSES * RP_Q_CLASSES]; /* median queue gap per class pair (0: none seen) */
  int64_t wait_d0_ns;  /* a data wait's own cost when its batch is ready (the median wait) */
  int64_t anchor0_ns;  /* the first step's start: LOADER_2X's loader starts there */
  int32_t loader_sync; /* the data wait right before the first anchored one, the last batch
                          the loader had ready when asked: its ready times are known
                          relative to the step from there on (-1: none before it) */
  int64_t *rt, *rend; /* replayed start (every node) and end (GPU nodes) */
};

#endif /* PD_REPLAY_INTERNAL_H */
