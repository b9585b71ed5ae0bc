"""train_step.py: a PyTorch training loop that knows nothing of our profiler, for pd_run.

The step is the one tests/torch/record_torch_traces.py defines (SimpleCNN, AdamW, GradScaler,
AMP, batches pre-pinned in host memory and copied non_blocking; the variants plant its
bottlenecks: plain_b64, sync_b64, tiny_ops_b64, memory_churn_b64, dataloader_b64, ...),
imported, not copied. With AMP each step ends with GradScaler.update(), whose one kernel
(amp_update_scale_cuda_kernel) marks the step for `pd_run --step_kernel amp_update_scale`;
with --nvtx each step is also a torch.cuda.nvtx.range("train_step") for
`pd_run --step_range train_step`. --workers N adds a DataLoader with N worker processes
(forked; they never touch CUDA) whose batches are copied to the device each step.

Timing (for the overhead comparison, scripts/inject_check.sh): --warmup W unmeasured steps,
then the profiler's window: 1 warmup step and --active N recorded steps; the recorded steps
but the last are timed whole (a device synchronization at the end of each), since the last
one is where a profiler flushes and writes. --torch_profiler default|full|cuda profiles the same
window with torch.profiler (schedule(skip_first=W, wait=0, warmup=1, active=N); full adds
record_shapes and profile_memory; cuda records GPU activity only). pd_run must then be given --skip_first W --wait 0
--warmup 1 --active N. One line on stdout: "train_step: VARIANT steps=... timed=K
mean_ms=... p50_ms=... loss=...". --timing_json PATH writes the timed steps' times and, for
each, where its time went: host_ms (from the step's start until its last launch returns; the
rest is the wait for the GPU), host_cpu_ms (the main thread's CPU time in that part) and
proc_cpu_ms (the process's CPU time over the whole step); pre_* the same for the unprofiled
steps; threads / pre_threads each thread's scheduler figures per step over the timed /
unprofiled steps (time on a CPU, time waiting runnable for one, voluntary and involuntary
context switches, from /proc: which thread runs while the main thread is off its CPU).

--emit_nvtx runs the steps under torch.autograd.profiler.emit_nvtx(): every op is also an NVTX
range ("aten::mm, seq = 3, op_id = 7"), which pd_run records as an op named as torch.profiler
names it ("aten::mm"), so its trace has ops for the model's op rules and HTA's aten-op analysis.

--model lm trains record_torch_traces.py's TinyLM (a small decoder-only transformer, AMP)
instead of SimpleCNN, with the same variants: a second program for pd_run's verdicts.

--host_spin_us N plants a host-side slowdown (the main thread spins N us in each step, after
the step's launches): the head of an A/B that should fail (scripts/pd_ab.sh).

usage: pd_run --step_kernel amp_update_scale -- python3 tests/torch/train_step.py [--variant plain_b64]
       python3 tests/torch/train_step.py --steps 30 --nvtx --workers 2
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def thread_snapshot():
    """Per thread of this process: name, and from the scheduler (ns, /proc schedstat) the
    time it ran on a CPU, the time it waited runnable for one, and its voluntary and
    involuntary context switches: where a step's time goes when its main thread is not on a
    CPU (blocked, or waiting for a CPU), and which other thread ran then. {} where /proc
    has none of it."""
    out = {}
    base = "/proc/self/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{base}/{tid}/schedstat") as f:
                run_ns, wait_ns = (int(x) for x in f.read().split()[:2])
            with open(f"{base}/{tid}/comm") as f:
                name = f.read().strip()
            vol = invol = 0
            with open(f"{base}/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol = int(line.split()[1])
        except (OSError, ValueError):
            continue
        out[tid] = {"name": name, "run_ns": run_ns, "wait_ns": wait_ns, "vol": vol, "invol": invol}
    return out


def thread_delta(a, b, steps):
    """Per thread, per step: what it did between snapshots a and b (a thread born between
    them counts from zero); the main thread is marked."""
    main = str(threading.get_native_id())
    rows = []
    for tid, e in b.items():
        s = a.get(tid, {"run_ns": 0, "wait_ns": 0, "vol": 0, "invol": 0})
        rows.append({"tid": int(tid), "name": e["name"], "main": tid == main,
                     **{k: (e[k] - s[k]) / steps for k in ("run_ns", "wait_ns", "vol", "invol")}})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", default="plain_b64")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured steps first")
    ap.add_argument("--active", type=int, default=20, help="steps of the profiled window after its warmup step")
    ap.add_argument("--steps", type=int, default=0, help="total steps (0: warmup + 1 + active + 1)")
    ap.add_argument("--nvtx", action="store_true", help="each step in torch.cuda.nvtx.range('train_step')")
    ap.add_argument("--emit_nvtx", action="store_true",
                    help="every op an NVTX range too (torch.autograd.profiler.emit_nvtx), for pd_run")
    ap.add_argument("--workers", type=int, default=0, help="a DataLoader with this many worker processes")
    ap.add_argument("--torch_profiler", choices=["off", "default", "full", "cuda"], default="off")
    ap.add_argument("--trace_dir", default="", help="torch.profiler's traces (default: not exported)")
    ap.add_argument("--timing_json", default="")
    ap.add_argument("--model", choices=("cnn", "lm"), default="cnn",
                    help="SimpleCNN (cnn) or the TinyLM transformer (lm) of record_torch_traces.py")
    ap.add_argument("--host_spin_us", type=float, default=0.0,
                    help="a planted host-side slowdown: the main thread spins this long in each step, after its launches")
    a = ap.parse_args()
    if a.warmup < 0 or a.active < 2 or a.workers < 0 or a.steps < 0 or not 0.0 <= a.host_spin_us <= 1e6:
        ap.error("--warmup >= 0, --active >= 2, --workers >= 0, --steps >= 0, 0 <= --host_spin_us <= 1e6")
    if a.emit_nvtx and a.torch_profiler != "off":
        ap.error("--emit_nvtx and --torch_profiler are two profilers of torch's: one at a time")

    import torch
    sys.path.insert(0, HERE)
    import record_torch_traces
    from record_torch_traces import SlowSamples, make_step  # the one definition of the step
    record_torch_traces.MODEL = a.model  # read by make_step and SlowSamples

    step, _ = make_step(a.variant)
    total = a.steps or a.warmup + 1 + a.active + 1
    first_timed, last_timed = a.warmup + 1, a.warmup + a.active  # [first, last): the last active is not timed
    extra = None
    if a.workers > 0:
        loader = torch.utils.data.DataLoader(SlowSamples(work=2), batch_size=64, num_workers=a.workers,
                                             pin_memory=True, persistent_workers=True)
        extra = iter(loader)

    prof = contextlib.nullcontext()
    if a.torch_profiler != "off":
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
        full = a.torch_profiler == "full"
        # cuda: GPU activity only (kineto's CUPTI capture without the op recording)
        acts = [ProfilerActivity.CUDA] if a.torch_profiler == "cuda" else [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        prof = profile(activities=acts,
                       schedule=schedule(skip_first=a.warmup, wait=0, warmup=1, active=a.active, repeat=1),
                       on_trace_ready=tensorboard_trace_handler(a.trace_dir) if a.trace_dir else (lambda p: None),
                       record_shapes=full, profile_memory=full)

    times, pre, phases, pre_phases = [], [], [], []
    snaps = []  # thread snapshots: [pre start, pre end,] timed start, timed end
    loss = None
    ops = torch.autograd.profiler.emit_nvtx() if a.emit_nvtx else contextlib.nullcontext()
    with prof as p, ops:
        for i in range(total):
            timed = first_timed <= i < last_timed
            # Steps 2..warmup-1 run before any profiler records (the same process's
            # unprofiled steps): timed the same way, for an in-process comparison.
            pre_timed = 2 <= i < a.warmup
            if timed or pre_timed:
                torch.cuda.synchronize()
                if i in (2, first_timed):
                    snaps.append(thread_snapshot())
                t0, c0, pc0 = time.perf_counter(), time.thread_time(), time.process_time()
            rng = torch.cuda.nvtx.range("train_step") if a.nvtx else contextlib.nullcontext()
            with rng:
                if extra is not None:
                    xb, _ = next(extra)
                    xb.to("cuda", non_blocking=True)
                loss = step()
                if a.host_spin_us > 0:
                    t_spin = time.perf_counter() + a.host_spin_us * 1e-6
                    while time.perf_counter() < t_spin:
                        pass
            if timed or pre_timed:
                t1, c1 = time.perf_counter(), time.thread_time()
                torch.cuda.synchronize()
                (times if timed else pre).append(time.perf_counter() - t0)
                # where the step's time goes: the host's part (until the step's last launch
                # returns), the main thread's CPU time in it, and the process's CPU time
                # over the whole step (its other threads: CUPTI's, the loader's)
                (phases if timed else pre_phases).append((t1 - t0, c1 - c0, time.process_time() - pc0))
                if i in (a.warmup - 1, last_timed - 1):
                    snaps.append(thread_snapshot())
            if p is not None:
                p.step()
    torch.cuda.synchronize()
    lv = float(loss.item())
    ms = [t * 1e3 for t in times]
    mean = statistics.fmean(ms) if ms else float("nan")
    p50 = statistics.median(ms) if ms else float("nan")
    print(f"train_step: {a.variant} steps={total} timed={len(ms)} mean_ms={mean:.4f} p50_ms={p50:.4f} loss={lv:.4f}",
          flush=True)
    if a.timing_json:
        with open(a.timing_json, "w") as f:
            json.dump({"variant": a.variant, "torch_profiler": a.torch_profiler, "step_ms": ms,
                       "mean_ms": mean, "p50_ms": p50,
                       "pre_step_ms": [t * 1e3 for t in pre],
                       **{f"{pfx}{k}": [x[i] * 1e3 for x in ph]
                          for pfx, ph in (("", phases), ("pre_", pre_phases))
                          for i, k in enumerate(("host_ms", "host_cpu_ms", "proc_cpu_ms"))},
                       **({"pre_threads": thread_delta(snaps[0], snaps[1], len(pre)),
                           "threads": thread_delta(snaps[2], snaps[3], len(ms))}
                          if len(snaps) == 4 and pre and ms else {})}, f)


if __name__ == "__main__":
    main()
