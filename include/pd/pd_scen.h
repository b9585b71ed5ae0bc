/* pd_scen.h: the scenario table and the mapping from (scenario, fix knobs) to the
 * configuration of the training step (pd_cnn.h) and of the data pipeline (pd_data.h).
 *
 * The five scenarios live in ONE table (PD_SCENARIO_MAP) that also feeds
 * `profiler_demo --list_scenarios`, `--help` and the README. Each row says what is
 * planted, the signature the profiler must show, the verdict expected from the
 * diagnosis and the flag that fixes it. The fix knobs work on every scenario, so a
 * user can A/B them (e.g. `--scenario clean --tiny_ops_mode chain`).
 */
#ifndef PD_SCEN_H
#define PD_SCEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pd/pd_cnn.h"
#include "pd/pd_common.h"
#include "pd/pd_data.h"
#include "pd/pd_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-sample data pressure (PRD 4.2): the dataloader scenario, and every other one. */
#define PD_SCEN_DATALOADER_CPU_WORK 4000
#define PD_SCEN_DATALOADER_IO_SLEEP_MS 2
#define PD_SCEN_DEFAULT_CPU_WORK 200
#define PD_SCEN_DEFAULT_IO_SLEEP_MS 0
/* Loader threads when --num_workers is not given. The control group gets more: its step
 * (0.3-0.5 ms, by the host's state) must be fed with twice the margin, and a loader that
 * falls behind makes its verdict read `dataloader` (issue 23: a fresh H100 did). One
 * worker makes a batch at cpu_work 200 in about 0.9 ms on the H100 hosts (4 workers:
 * 4424-4604 batches/s, headroom 2.1-2.3 at 0.45 ms steps, 1.4 at the 0.3 ms steps of a
 * fast process), so 8. The data pipeline writes the margin it had into the metrics JSON
 * ("data_loader"). */
#define PD_SCEN_DEFAULT_WORKERS 2
#define PD_SCEN_CLEAN_WORKERS 8
/* Dataset length; large enough that a default run (10 + 2 + 8 steps of 64) stays in
 * one epoch. */
#define PD_SCEN_SAMPLES_PER_EPOCH 4096

/* One table for scenarios:
 * X(ID, name, description, planted problem, signature, fix flag, fix hint, verdict). */
#define PD_SCENARIO_MAP(X)                                                                   \
  X(CLEAN, "clean", "the control group: the same training step with nothing planted",        \
    "nothing (pooled allocator, no host reads in the step, no tiny ops, cpu_work 200, "      \
    "no I/O sleep, 8 loader workers)",                                                                         \
    "no planted cause named; the verdict says where the host/GPU balance lies (compute, "  \
    "or host_bound on a host that launches slowly)", "",                                     \
    "nothing to fix", PD_BOTTLENECK_COMPUTE)                                                 \
  X(DATALOADER, "dataloader", "a slow input pipeline that starves the GPU",                  \
    "per sample, in the worker threads: cpu_work 4000 sin/cos iterations + io_sleep_ms 2",   \
    "data wait per step far above the step time; GPU idle between steps", "--num_workers",  \
    "raise --num_workers: the wait per step falls about in proportion to the workers",      \
    PD_BOTTLENECK_DATALOADER)                                                                \
  X(SYNC, "sync", "hidden host-device synchronization inside every step",                    \
    "blocking device->host reads inside every step: the loss (loss.item()), a statistic "  \
    "after every layer, the found-inf flag",                                                 \
    "synchronizing calls every step; GPU idle while the host waits", "--no_sync",            \
    "keep the loss on the device and read it once at the end (--no_sync)",                   \
    PD_BOTTLENECK_SYNC)                                                                      \
  X(TINY_OPS, "tiny_ops", "kernel launch overhead from a chain of tiny elementwise ops",     \
    "TinyOpsBlock: --tiny_ops_depth (256) tiny elementwise kernels, forward and backward",   \
    "kernels per step in the thousands, average kernel a few us, GPU mostly idle between "   \
    "them",                                                                                  \
    "--tiny_ops_mode",                                                                       \
    "--tiny_ops_mode fused (one kernel each way) or graph (the chain replayed as a CUDA "    \
    "graph)",                                                                                \
    PD_BOTTLENECK_LAUNCH_OVERHEAD)                                                           \
  X(MEMORY_CHURN, "memory_churn", "allocator churn: temporaries through the raw allocator",  \
    "the step's temporary device buffers cudaMalloc'd and cudaFree'd every step",            \
    "allocation calls per step, time in them, sawtooth memory timeline", "--allocator",      \
    "--allocator pool (a stream-ordered cudaMallocAsync pool)", PD_BOTTLENECK_ALLOCATOR_CHURN)

typedef enum {
#define PD_SCEN_GEN(id, ...) PD_SCEN_##id,
  PD_SCENARIO_MAP(PD_SCEN_GEN)
#undef PD_SCEN_GEN
  PD_SCEN_COUNT
} pd_scenario_t;

/* One row of the table. All strings are static. */
typedef struct {
  pd_scenario_t id;
  const char *name;        /* "memory_churn": the --scenario value */
  const char *description; /* one line */
  const char *planted;     /* what the scenario plants */
  const char *signature;   /* what the profiler must show */
  const char *fix_flag;    /* the knob that fixes it ("--allocator"); "" for clean */
  const char *fix_hint;    /* how to use the knob, in words */
  pd_bottleneck_t expected_verdict; /* what pd_diagnose() should name */
} pd_scenario_info_t;

/* Returns the whole table (static storage) and sets *count to PD_SCEN_COUNT. */
const pd_scenario_info_t *pd_scenario_table(size_t *count);
/* Returns the row for a scenario, or NULL when s is out of range (static storage). */
const pd_scenario_info_t *pd_scenario_info(pd_scenario_t s);
/* Returns 0 and sets *s for a name ("tiny_ops"), PD_EINVAL when unknown or NULL. */
int pd_scenario_parse(const char *name, pd_scenario_t *s);
/* Returns the scenario's name ("tiny_ops"); "unknown" when out of range. Static. */
const char *pd_scenario_name(pd_scenario_t s);

/* A knob left at PD_KNOB_SCENARIO keeps the scenario's own setting. */
#define PD_KNOB_SCENARIO (-1)

/* What the user chose: the run's common settings and the fix knobs. */
typedef struct {
  int batch_size;          /* >= 1 */
  bool amp;
  uint64_t seed;           /* weights and data */
  int num_workers;         /* >= 0, or PD_KNOB_SCENARIO (PD_SCEN_CLEAN_WORKERS for clean,
                              PD_SCEN_DEFAULT_WORKERS otherwise) */
  int prefetch_factor;     /* >= 1 */
  bool persistent_workers;
  bool pin_memory;
  int tiny_mode;           /* a pd_tiny_mode_t, or PD_KNOB_SCENARIO */
  int tiny_ops_depth;      /* >= 1, or PD_KNOB_SCENARIO (the model's default) */
  int alloc_mode;          /* a pd_alloc_mode_t, or PD_KNOB_SCENARIO */
  int churn_buffers;       /* >= 0, or PD_KNOB_SCENARIO (the model's default) */
  bool no_sync;            /* drop the planted host reads (any scenario) */
} pd_scen_options_t;

/* Fills o with the defaults of profiler_demo (batch 64, the scenario's workers, prefetch 2, seed 0,
 * every knob at PD_KNOB_SCENARIO). */
void pd_scen_options_init(pd_scen_options_t *o);

/* Fills *cnn and *data (both fully initialized here, from pd_cnn_config_init and
 * pd_data_config_init) for scenario s with options o: the scenario plants its problem,
 * then the knobs override. Returns 0, or PD_EINVAL for an unknown scenario or an out of
 * range option (nothing is promised about *cnn and *data then). */
int pd_scenario_configure(pd_scenario_t s, const pd_scen_options_t *o, pd_cnn_config_t *cnn,
                          pd_data_config_t *data);

/* ---- --inject_slowdown: host work the step waits for (the gate's self-test) ------------ */

/* How many recent steps the injected time is sized from. */
#define PD_SCEN_INJECT_WINDOW 64

/* Sizes the busy time inserted before a step's launches so that the step gets `fraction`
 * longer (inject.c says why it is a feedback loop). Two windows of recent steps: the
 * plain steps' times, and the injected steps' times minus the busy time inserted in them
 * (their "rest"). The target is fraction x P, P the plain median (the rest's median while
 * no plain step was recorded; base_ns before any step). When both windows have steps
 * (--inject_alternate), the rest's median minus P is the extra an injected step costs
 * beyond its busy time, and it is taken off the busy time: the busy time is
 * clamp(target - extra, 0, 2 x target). Plain data, no allocation. */
typedef struct {
  double fraction;
  int64_t base_ns;
  int64_t plain_ns[PD_SCEN_INJECT_WINDOW]; /* plain steps */
  size_t n, next;
  int64_t rest_ns[PD_SCEN_INJECT_WINDOW]; /* injected steps minus their busy time */
  size_t n_rest, next_rest;
} pd_scen_inject_t;

/* fraction <= 0: nothing is ever injected. base_ns: the first steps' estimate (e.g. the
 * mean warmup step). */
void pd_scen_inject_init(pd_scen_inject_t *inj, double fraction, int64_t base_ns);
/* Returns the busy time (ns) to insert before the next step's launches; 0 when off. */
int64_t pd_scen_inject_next_ns(const pd_scen_inject_t *inj);
/* The extra (ns) an injected step measured beyond its busy time, over the plain steps'
 * median; 0 until both kinds of step were recorded. May be negative. */
int64_t pd_scen_inject_extra_ns(const pd_scen_inject_t *inj);
/* Records a finished step: its time and the busy time inserted in it (0 for a plain step). */
void pd_scen_inject_record(pd_scen_inject_t *inj, int64_t step_ns, int64_t spun_ns);
/* Busy-waits ns nanoseconds on the calling thread. */
void pd_scen_spin_ns(int64_t ns);

#ifdef __cplusplus
}
#endif
#endif /* PD_SCEN_H */
