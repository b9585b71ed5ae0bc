"""python_ops_probe.py: where the time goes when python_ops_b64's tokenizer (pure Python on the
main thread between forward and backward) is removed, unprofiled and profiled, in one process
(docs/diagnosis.md, "Python between ops and a pageable copy: what the host does around them").
Run from the repository root on a GPU host (torch with CUDA):

    python3 bench/diagnosis/python_ops_probe.py [--rounds 8] [--steps 100] [--out probe.json] [--pin CPU]
                                                [--where gap|end]

(about 1-2 minutes per run; run it once plain and once with --pin 2, say)

Same SimpleCNN AMP step as tests/torch/record_torch_traces.py (imported from there), BatchSet loader
(num_workers=0, pin_memory=False: no loader threads), in ABBA-interleaved rounds (fresh model per
round, warmup 10, mean wall per step over --steps steps, no per-step sync, as wall_ms()).
The gap between the loss and backward() is filled by one of:
    fixed     nothing (the fix)
    tok       the planted tokenizer
    sleep     time.sleep for the tokenizer's isolated median: core idle, GIL released
    spin      a Python busy-wait of the same length: core busy, GIL held, tiny footprint
    pollute   C-level memory traffic of about the same length (bytearray allocs): caches evicted,
              no interpreter loop
and  tok_st / fixed_st: tok and fixed with torch.autograd multithreading off (backward() runs on the
main thread, no hand-off to pt_autograd_0).
Per step it times, with perf_counter only (no profiler), the phases: fwd (step start -> loss), gap
(the filler itself), bwd (backward() call), opt (scaler.step + update), rest.  Then tok/fixed are
repeated under torch.profiler (CPU+CUDA, record_shapes, profile_memory, as record()) to put the
profiled and unprofiled savings side by side in one process.
Per round it also records /proc/stat steal time and each thread's CPU and context switches.

Decision (cost = mean(variant) - mean(fixed): what removing the filler saves; extra = cost minus
the filler's own in-step time (phase gap); X = tok's in-step gap, unprofiled):
  * tok's own phase 'gap' ~ cost (~2x the traced 0.5-0.6 ms), extra ~ 0: the tokenizer itself is slower
    unprofiled than in the trace -> replay's X is not the unprofiled X (host-speed state).
  * gap ~ traced X, extra ~ X (tok's bwd/fwd/opt phases longer than fixed's): knock-on slowdown;
      - sleep shows it too          -> the delay itself (idle core / power state / GPU idle);
      - spin shows it, sleep not    -> the main core being busy (SMT/frequency), not the work;
      - pollute/tok show it only    -> cache/branch-predictor eviction by the Python work;
      - tok_st's extra ~ 0          -> it lives in the hand-off to / the core of pt_autograd_0.
  * profiled extra ~ 0 while unprofiled extra ~ X in the same process: the profiler hides it.

--where end asks the same of tiny_ops_b64's EMA (300 small in-place ops after the optimizer,
whose removal saved 0.5-1.3 ms more than their own time on two H200s, docs/diagnosis.md): the
fillers go after the optimizer, X is the EMA loop's isolated time, and beside fixed, sleep,
spin and pollute it runs ema (the planted loop) and cpu_ops (the same ops on a CPU tensor:
torch's dispatch without kernel launches); the filler's own phase is then 'rest'. An extra
that ema shows and cpu_ops does not lives in the launches (driver, GPU); one that sleep or
spin also shows is the pause itself; one that only ema and cpu_ops show is torch's dispatch
path (caches).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import profile

from phase_probe import load_rtt  # the one loader of record_torch_traces.py as a module

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=8)
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--warmup", type=int, default=10)
ap.add_argument("--rtt", default="tests/torch/record_torch_traces.py")
ap.add_argument("--out", default="python_ops_probe.json")
ap.add_argument("--where", choices=("gap", "end"), default="gap",
                help="gap: the filler between the loss and backward (python_ops_b64's tokenizer); "
                     "end: after the optimizer (tiny_ops_b64's EMA ops), the reference being the "
                     "planted EMA loop, with fillers ema and cpu_ops beside sleep, spin, pollute")
ap.add_argument("--pin", type=int, default=-1,
                help="pin the process to this one CPU before any thread starts (pt_autograd_0 "
                     "inherits it): main and autograd thread share one core")
a = ap.parse_args()
if a.pin >= 0:
    os.sched_setaffinity(0, {a.pin})

rtt = load_rtt(a.rtt, "cnn")  # defines SimpleCNN, BatchSet; main() is not run

tokenize = rtt.tokenize  # the planted tokenizer itself
EMA_OPS = rtt.config("tiny_ops_b64")["tiny"]  # tiny_ops_b64's planted EMA: ops per step
EMA_T = torch.zeros(1024, device="cuda")
CPU_T = torch.zeros(1024)


def ema_loop():
    """tiny_ops_b64's planted EMA updates: one small kernel per op."""
    rtt.ema_updates(EMA_T, EMA_OPS)


def cpu_ops():
    """The same ops on a CPU tensor: torch's dispatch without a kernel launch."""
    rtt.ema_updates(CPU_T, EMA_OPS)


def alone(fn, n=300):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()  # an empty GPU queue: the filler's own host time
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[n // 6:])


REF = tokenize if a.where == "gap" else ema_loop  # the planted filler the others match


X0 = alone(REF)  # the planted filler's isolated time, s (no training step around it)


def spin():
    end = time.perf_counter() + X0
    while time.perf_counter() < end:
        pass


SLEEP_S = X0  # time.sleep overshoots by the timer slack (~50-60 us); the measured gap says how much


def do_sleep():
    time.sleep(SLEEP_S)


POLLUTE_N = 1 << 20


def pollute():
    for _ in range(POLLUTE_K):
        bytearray(POLLUTE_N)  # 1 MiB memset + free: C-level, evicts L1/L2, no interpreter loop


def _cal_pollute():
    t0 = time.perf_counter()
    for _ in range(50):
        bytearray(POLLUTE_N)
    per = (time.perf_counter() - t0) / 50
    return max(1, round(X0 / per))


POLLUTE_K = _cal_pollute()

FILL = {"fixed": None, "tok": tokenize, "sleep": do_sleep, "spin": spin, "pollute": pollute,
        "tok_st": tokenize, "fixed_st": None, "ema": ema_loop, "cpu_ops": cpu_ops}


def make_step(fill):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = rtt.SimpleCNN().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    scaler = torch.amp.GradScaler("cuda")
    it = iter(torch.utils.data.DataLoader(rtt.BatchSet(64), batch_size=None, num_workers=0,
                                          pin_memory=False))
    ph = {k: 0.0 for k in ("fwd", "gap", "bwd", "opt", "rest")}
    pc = time.perf_counter

    def step():
        t0 = pc()
        x, y = next(it)
        x = x.to(dev, non_blocking=True)
        y = y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loss = F.cross_entropy(out.flatten(0, -2), y.flatten())
        t1 = pc()
        if fill is not None and a.where == "gap":
            fill()
        t2 = pc()
        scaler.scale(loss).backward()
        t3 = pc()
        scaler.step(opt)
        scaler.update()
        t4 = pc()
        model.stats.clear()
        if fill is not None and a.where == "end":
            fill()
        t5 = pc()
        ph["fwd"] += t1 - t0; ph["gap"] += t2 - t1; ph["bwd"] += t3 - t2
        ph["opt"] += t4 - t3; ph["rest"] += t5 - t4

    return step, ph


def proc_snapshot():
    """steal jiffies (all CPUs) and, per thread, (name, last CPU, voluntary, involuntary switches)."""
    with open("/proc/stat") as f:
        steal = int(f.readline().split()[8])
    th = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                s = f.read()
            with open(f"/proc/self/task/{tid}/status") as f:
                st = dict(l.split(":", 1) for l in f if ":" in l)
            name = s[s.index("(") + 1:s.rindex(")")]
            cpu = int(s[s.rindex(")") + 2:].split()[36])
            th[tid] = (name, cpu, int(st["voluntary_ctxt_switches"]),
                       int(st["nonvoluntary_ctxt_switches"]))
        except (OSError, ValueError, KeyError):
            pass
    return steal, th


def run_round(v, prof=False):
    base = v[:-3] if v.endswith("_st") else v
    step, ph = make_step(FILL[v])
    ctx = torch.autograd.set_multithreading_enabled(not v.endswith("_st"))
    with ctx:
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        for k in ph:
            ph[k] = 0.0
        s0, th0 = proc_snapshot()
        p = None
        if prof:
            p = profile(**rtt.trace_settings())  # as record() traces
            p.__enter__()
            for _ in range(3):  # the profiler's own start-up out of the timing
                step()
            torch.cuda.synchronize()
            for k in ph:
                ph[k] = 0.0
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / a.steps
        if p is not None:
            p.__exit__(None, None, None)
        s1, th1 = proc_snapshot()
    thr = {}
    for tid, (name, cpu, vol, inv) in th1.items():
        o = th0.get(tid, (name, cpu, vol, inv))
        thr[f"{name}:{tid}"] = {"cpu": cpu, "vol": vol - o[2], "invol": inv - o[3]}
    return {"wall_ms": wall * 1e3, **{k: ph[k] / a.steps * 1e3 for k in ph},
            "steal_jiffies": s1 - s0, "threads": thr}


def abba(variants, rounds, prof=False):
    res = {v: [] for v in variants}
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            res[v].append(run_round(v, prof))
    return res


def summary(res, ref="fixed"):
    m = lambda v, k: statistics.mean(x[k] for x in res[v])
    out = {}
    for v in res:
        d = {k: round(m(v, k), 4) for k in ("wall_ms", "fwd", "gap", "bwd", "opt", "rest")}
        r = ref + "_st" if v.endswith("_st") else ref
        if r in res:  # cost: what removing the filler saves; extra: the part beyond the filler itself
            d["cost_ms"] = round(m(v, "wall_ms") - m(r, "wall_ms"), 4)
            fp = "gap" if a.where == "gap" else "rest"  # the filler's own phase
            d["extra_ms"] = round(d["cost_ms"] - (d[fp] - m(r, fp)), 4)
        d["rounds_wall_ms"] = [round(x["wall_ms"], 3) for x in res[v]]
        d["steal_jiffies"] = sum(x["steal_jiffies"] for x in res[v])
        out[v] = d
    return out


info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "python": platform.python_version(), "nproc": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)), "where": a.where, "alone_ms": X0 * 1e3,
        "pollute_k": POLLUTE_K}
print(json.dumps(info), flush=True)
planted = "tok" if a.where == "gap" else "ema"
variants = (["fixed", "tok", "sleep", "spin", "pollute", "tok_st", "fixed_st"] if a.where == "gap"
            else ["fixed", "ema", "cpu_ops", "sleep", "spin", "pollute"])
un = abba(variants, a.rounds)
pr = abba(["fixed", planted], a.rounds, prof=True)
info["alone_after_ms"] = alone(REF) * 1e3
result = {"info": info, "unprofiled": summary(un), "profiled": summary(pr),
          "raw": {"unprofiled": un, "profiled": pr}}
with open(a.out, "w") as f:
    json.dump(result, f, indent=1)
print(f"{planted} alone: {X0*1e3:.3f} ms before, {info['alone_after_ms']:.3f} ms after")
for kind in ("unprofiled", "profiled"):
    print(kind)
    print(f"  {'variant':9s} {'wall':>7s} {'cost':>7s} {'fwd':>6s} {'gap':>6s} {'bwd':>6s} "
          f"{'opt':>6s} {'rest':>6s} {'extra':>7s}  (ms per step; cost, extra vs fixed / fixed_st)")
    for v, d in result[kind].items():
        print(f"  {v:9s} {d['wall_ms']:7.3f} {d.get('cost_ms', 0):7.3f} {d['fwd']:6.3f} "
              f"{d['gap']:6.3f} {d['bwd']:6.3f} {d['opt']:6.3f} {d['rest']:6.3f} "
              f"{d.get('extra_ms', 0):7.3f}  steal {d['steal_jiffies']}")
