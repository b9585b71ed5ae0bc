/* inject.h: the injection library's parts (libpd_inject.so, src/inject), internal.
 *
 * libpd_inject.so runs the profiler inside any CUDA program. The CUDA driver loads it
 * through CUDA_INJECTION64_PATH and calls InitializeInjection() inside cuInit
 * (inject_entry.c, the only GPU-only file here); NVTX loads it through
 * NVTX_INJECTION64_PATH and calls InitializeInjectionNvtx2() (inject_nvtx.c). Everything
 * else runs without a GPU and is unit-tested:
 *   - the config, read from the PD_INJECT_* environment variables and written back into
 *     them by pd_run (inject_config.c): one struct, one validate, both directions;
 *   - the session (inject_session.c): when the profiler starts, where steps end (a
 *     kernel-name match at a launch, or an NVTX range), the cycle's trace, the analysis
 *     and the metrics JSON at exit. It takes its record source, device query and device
 *     synchronization from its caller, so the tests drive it with a scripted source.
 */
#ifndef PD_INJECT_H
#define PD_INJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pd/pd_schedule.h"
#include "pd/pd_source.h"
#include "pd/pd_writers.h"

#define PD_INJECT_PATH_MAX 1024
#define PD_INJECT_NAME_MAX 256

/* Visibility: the library is built with hidden symbols; these are its entry points. */
#define PD_INJECT_EXPORT __attribute__((visibility("default")))

/* --profile_level / PD_INJECT_PROFILE_LEVEL: what CUPTI records (profiler_demo's meaning). */
typedef enum { PD_INJECT_LEVEL_LEAN = 0, PD_INJECT_LEVEL_FULL = 1 } pd_inject_level_t;

/* How steps are found. */
typedef enum {
  PD_INJECT_STEPS_WHOLE_RUN = 0, /* neither: the whole run is one step */
  PD_INJECT_STEPS_KERNEL,        /* each launch of a matching kernel ends a step */
  PD_INJECT_STEPS_RANGE          /* each NVTX range of this name begins a step */
} pd_inject_steps_t;

/* The one config struct of the library and of pd_run. */
typedef struct {
  char trace_dir[PD_INJECT_PATH_MAX];
  char output_json[PD_INJECT_PATH_MAX];
  pd_schedule_t schedule;
  bool schedule_set;                       /* a schedule variable was given */
  char step_kernel[PD_INJECT_NAME_MAX];    /* POSIX extended regex; "" none */
  char step_range[PD_INJECT_NAME_MAX];     /* NVTX range name; "" none */
  char name[PD_INJECT_NAME_MAX];           /* config.name of the metrics JSON */
  bool with_stack;
  bool trace_gzip;
  bool probe;                              /* --probe: the thread's speed after each untraced step */
  int profile_level;                       /* pd_inject_level_t */
  int top_n;                               /* rows of top_ops in the JSON; 0: all */
  long root_pid;                           /* PD_INJECT_ROOT_PID; 0: not set */
} pd_inject_config_t;

/* One table for the environment variables: X(NAME, what). docs/inject.md lists them. */
#define PD_INJECT_ENV_MAP(X)                                                             \
  X(TRACE_DIR, "directory of the Chrome traces")                                         \
  X(OUTPUT_JSON, "path of the metrics JSON")                                             \
  X(SKIP_FIRST, "schedule: steps ignored before the first cycle")                        \
  X(WAIT, "schedule: steps off at the start of each cycle")                              \
  X(WARMUP, "schedule: steps traced and discarded")                                      \
  X(ACTIVE, "schedule: steps recorded per cycle")                                        \
  X(REPEAT, "schedule: cycles (0: until the program ends)")                              \
  X(STEP_KERNEL, "regex: each launch of a kernel whose name matches ends a step")        \
  X(STEP_RANGE, "NVTX range name: each such range begins a step")                        \
  X(NAME, "the program's name in the metrics JSON (the key of its baselines)")           \
  X(WITH_STACK, "0 or 1: host ranges record their call stack")                           \
  X(TRACE_GZIP, "0 or 1: traces written gzipped")                                        \
  X(PROBE, "0 or 1: time a fixed probe after each untraced step (needs STEP_RANGE)")     \
  X(PROFILE_LEVEL, "lean or full: full records every CUDA driver call")                  \
  X(TOP_N, "rows of top_ops in the metrics JSON (0: all)")                               \
  X(ROOT_PID, "set by pd_run: the process whose outputs keep the given names")

/* A POSIX extended regex's size once compiled by glibc, estimated from its text (pieces
 * copied or given empty paths by '+', '*', '?' and intervals, multiplied through nesting);
 * *stacked: a piece carries more than one repetition operator; *nested: a repeated group
 * repeats inside (either may be NULL). The validator refuses a --step_kernel above 1000,
 * stacked or nested. Saturates just above 1000. */
double pd_inject_regex_size(const char *re, bool *stacked, bool *nested);
/* Fills cfg with the defaults (docs/inject.md). */
void pd_inject_config_init(pd_inject_config_t *cfg);
/* Checks the values and the cross rules (schedule counts, one step source, a regex that
 * compiles, paths that fit). Returns 0 or PD_EINVAL with one line in err naming the option
 * by its pd_run flag. */
int pd_inject_config_validate(const pd_inject_config_t *cfg, char *err, size_t errlen);
/* Reads the PD_INJECT_* variables over the defaults, then validates. Returns 0 or
 * PD_EINVAL with one line in err naming the variable. */
int pd_inject_config_from_env(pd_inject_config_t *cfg, char *err, size_t errlen);
/* Sets the PD_INJECT_* variables from cfg in this process's environment (pd_run's child,
 * before exec); root_pid is not set here. Returns 0 or PD_ENOMEM. */
int pd_inject_config_to_env(const pd_inject_config_t *cfg);
/* How steps are found under cfg. */
pd_inject_steps_t pd_inject_config_steps(const pd_inject_config_t *cfg);
/* The metrics JSON path of process pid (rank: the RANK variable's text, or NULL): the
 * configured one for the root process (or when no root is known), otherwise
 * "<stem>.pid<PID>[.rank<R>].json" beside it. Returns 0 or PD_EINVAL (too long). */
int pd_inject_output_json_for(const pd_inject_config_t *cfg, long pid, const char *rank, char *buf, size_t buflen);
/* The names of the variables ("PD_INJECT_TRACE_DIR", ...) and their text, in table order;
 * *count receives the number. Static storage. */
const char *const *pd_inject_env_names(size_t *count);
const char *const *pd_inject_env_texts(size_t *count);

/* ---- the session -------------------------------------------------------------------- */

typedef struct pd_inject_session pd_inject_session_t;

/* What the session takes from the process it runs in (inject_entry.c gives the CUDA ones;
 * the unit tests give scripted ones). Every pointer may be NULL. */
typedef struct {
  pd_record_source_t *source;         /* NULL: the CUPTI source (pd_prof_create makes it) */
  void (*device_sync)(void);          /* before a cycle closes: the GPU's records complete */
  /* --probe: the calling thread's speed now (pd_speed_probe on the session's own stream:
   * ns per empty launch, ns of the fixed workload); 0 or < 0, the program unaffected */
  int (*speed_probe)(double *launch_ns, double *compute_ns);
  int (*device_info)(pd_device_info_t *out); /* the metrics JSON's device; 0 or < 0 */
  /* whether the program has PyTorch loaded (libtorch_cuda.so): then, where it opened no
   * op range (emit_nvtx), the line at exit says how to give the verdict its ops */
  bool (*is_pytorch)(void);
  FILE *log;                          /* warnings and the one line at exit; NULL: stderr */
} pd_inject_env_t;

/* Makes a session for a validated config: nothing starts until the first launch (or the
 * first step range). On success *out owns it (pd_inject_session_destroy). Returns 0 or
 * PD_ENOMEM / PD_EINVAL (the step regex). */
int pd_inject_session_create(const pd_inject_config_t *cfg, const pd_inject_env_t *env, pd_inject_session_t **out);
/* Frees the session (stops a running profiler without writing anything). NULL: no-op. */
void pd_inject_session_destroy(pd_inject_session_t *s);

/* A kernel launch call, at its entry and its exit (CUPTI's launch hook). Runtime launches
 * make a driver launch inside: only the outermost launch call of a thread counts. The first
 * launch starts the profiler (kernel-name steps and whole-run); in kernel-name steps, the
 * exit of a matching launch ends the step. Thread-safe. */
void pd_inject_on_launch(pd_inject_session_t *s, const char *kernel, bool is_runtime, bool is_exit);
/* NVTX ranges (inject_nvtx.c): push/pop nest per thread; start/end may cross threads and
 * return/take an id. A range named like step_range begins a step (the first one starts the
 * profiler). name may be NULL (an unnamed range). Thread-safe. */
void pd_inject_on_range_push(pd_inject_session_t *s, const char *name);
void pd_inject_on_range_pop(pd_inject_session_t *s);
uint64_t pd_inject_on_range_start(pd_inject_session_t *s, const char *name);
void pd_inject_on_range_end(pd_inject_session_t *s, uint64_t id);
/* PyTorch's op ranges under torch.autograd.profiler.emit_nvtx() carry their details after
 * the op's name: "aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], [3, 4]], input_op_ids =
 * [(5,0)]" (each part optional, in that order; torch/csrc/profiler/util.cpp getNvtxStr).
 * When text is exactly that form, writes the op's name ("aten::mm") into name and returns
 * its length; otherwise (any other text, or a name that does not fit in namelen) returns 0
 * and the range keeps its whole text. So a pd_run trace of such a program has ops named as
 * torch.profiler names them, which the model's op rules (reads, host code) and HTA's
 * aten-op analysis read. */
size_t pd_inject_nvtx_op_name(const char *text, char *name, size_t namelen);
/* While true on the calling thread, launches and ranges are the session's own work
 * (calibration, device queries) and are not seen. */
bool pd_inject_thread_busy(void);

/* At exit (or, for kernel-name steps, once the schedule is over and the untraced steps
 * after it are timed): stops the profiler, writes the open cycle, the metrics JSON, and
 * says in one line on the log what was written (or why nothing was). Returns 0 (written,
 * or nothing to write: the program never launched a kernel), or a negative PD_E* code
 * after a warning line. Once only; later calls return 0. */
int pd_inject_session_finish(pd_inject_session_t *s);
/* True once, after kernel-name steps finished early: the schedule's last cycle and the
 * untraced steps timed after it are written, and the launch hook may let go of CUPTI (the
 * entry point does, at the exit of the launch that ended the step). */
bool pd_inject_session_take_let_go(pd_inject_session_t *s);
/* Whether the profiler was started (the program launched a kernel or opened a step range). */
bool pd_inject_session_started(const pd_inject_session_t *s);
/* Steps seen so far (ProfilerStep#N numbers taken). */
int64_t pd_inject_session_steps(const pd_inject_session_t *s);

/* ---- the NVTX tool (inject_nvtx.c) ---------------------------------------------------- */

/* The session NVTX's handlers report to; NULL: they do nothing (a process that never
 * initialized CUDA, or a forked child). */
void pd_inject_nvtx_set_session(pd_inject_session_t *s);

#endif /* PD_INJECT_H */
