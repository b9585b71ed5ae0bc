"""phase_probe.py: where torch.profiler's cost and a fix's saving fall inside the step, in one
process (docs/diagnosis.md, "The profiler's cost, phase by phase"). Run from the repository
root on a GPU host (torch with CUDA):

    python3 bench/diagnosis/phase_probe.py OUT.json [--model cnn|lm] [--variants tiny_ops_b64,...]
                                           [--rounds 4] [--steps 20]
    python3 bench/diagnosis/phase_probe.py --summarize OUT.json [MORE.json ...]   (no GPU, no torch)

For each variant of tests/torch/record_torch_traces.py (its step, imported: make_step with its
phase marks) the planted and the fixed step are built side by side in one process and run in
ABBA-interleaved blocks of --steps steps, back to back (one synchronization at the block's
end, as record_torch_traces' wall_ms), in three modes, in this order:

    off    unprofiled, before the profiler ever ran in the process;
    prof   inside a torch.profiler session as record() traces (CPU and CUDA activities,
           record_shapes, profile_memory), one session per block, two steps of it untimed;
    after  unprofiled again (torch.profiler leaves CUPTI attached once it has run).

Each step's phases are timed on the host's clock (perf_counter at make_step's marks, no
synchronization): load, fwd, gap, bwd, reads, opt, ema, churn (a variant has the ones it
plants), rest (the step's return after the last mark). A block gives the mean wall time per
step and each phase's mean; the JSON keeps every block, and the table prints per variant,
side and mode the median over its blocks, then:

    profiler's cost per phase   prof - off, per side: where the profiler's added time falls;
    the fix's saving per phase  planted - fixed, per mode: what the fix removes, and whether
                                the profiled run shows the same saving where it happens.

Each table ends with the op phases' profiled / off ratios (forward, backward, optimizer and the
EMA ops, each side, where the phase takes 0.3 ms or more unprofiled): the factor by which the
profiler slowed the host's work in ops, which the replay takes for a torch.profiler trace
(RP_TORCH_HOST_SLOWDOWN, src/model/replay_internal.h). --summarize prints the tables of kept
JSON files again and the median of those ratios over all of them.

The number of host events per step (ops, CUDA calls, memory records) is counted per side
from the first profiled block (the events the profiler kept, outside the timing), so the
added time per event of each phase can be read beside it.

Why: the replay takes the profiler's cost out per recorded event, at one figure per event;
the recordings say the cost is not spread evenly (tiny_ops_b64's 300 in-place EMA ops cost
the profiler little where the rest of the step's ops cost 6 us each, on H200 118fddfb), and
one process per program cannot separate that from the 15-25% between processes.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

try:
    import torch
    from torch.profiler import profile
except ImportError:  # --summarize needs neither
    torch = None

PHASES = ("load", "fwd", "gap", "bwd", "reads", "opt", "ema", "churn", "rest")
OP_PHASES = ("fwd", "bwd", "opt", "ema")  # the host's work in ops (not Python, not waits)


def load_rtt(path, model):
    spec = importlib.util.spec_from_file_location("rtt", path)
    rtt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rtt)  # defines the models and make_step; main() is not run
    rtt.MODEL = model
    return rtt


class Clock:
    """make_step's mark: adds the time since the previous mark to the phase that just ended."""

    def __init__(self):
        self.acc = {p: 0.0 for p in PHASES}
        self.last = 0.0

    def start(self):
        self.last = time.perf_counter()

    def __call__(self, phase):
        t = time.perf_counter()
        self.acc[phase] += t - self.last
        self.last = t

    def end(self):
        self("rest")


def block(step, clock, steps):
    """Mean wall ms per step of `steps` steps back to back, and each phase's mean ms."""
    clock.acc = {p: 0.0 for p in PHASES}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        clock.start()
        step()
        clock.end()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    return {"wall": wall, **{p: v * 1e3 / steps for p, v in clock.acc.items()}}


def count_events(prof, steps):
    """Host events per step the profiler kept: ops and CUDA calls, and memory records."""
    ops = mem = 0
    for e in prof.events():
        if "CUDA" in str(getattr(e, "device_type", "")):  # a kernel or copy, not a host record
            continue
        if e.name == "[memory]":
            mem += 1
        else:
            ops += 1
    return {"events": ops / steps, "memory_records": mem / steps}


def probe(rtt, variant, rounds, steps):
    clocks = {"planted": Clock(), "fixed": Clock()}
    sides = {"planted": rtt.make_step(variant, clocks["planted"])[0],
             "fixed": rtt.make_step(variant + ":fixed", clocks["fixed"])[0]}
    for side, step in sides.items():
        for _ in range(10):
            clocks[side].start()
            step()
    torch.cuda.synchronize()
    out = {"blocks": [], "events": {}}
    for mode in ("off", "prof", "after"):
        for r in range(rounds):
            order = ("planted", "fixed") if r % 2 == 0 else ("fixed", "planted")
            for side in order:
                step, clock = sides[side], clocks[side]
                if mode == "prof":
                    with profile(**rtt.trace_settings()) as prof:  # as record() traces
                        for _ in range(2):  # the session's first steps pay its start
                            clock.start()
                            step()
                        res = block(step, clock, steps)
                    if side not in out["events"]:
                        out["events"][side] = count_events(prof, steps + 2)
                else:
                    res = block(step, clock, steps)
                out["blocks"].append({"mode": mode, "round": r, "side": side, **res})
    return out


def med(blocks, mode, side, key):
    xs = [b[key] for b in blocks if b["mode"] == mode and b["side"] == side]
    return statistics.median(xs) if xs else float("nan")


def op_ratios(res):
    """profiled / off of each op phase of each side that takes 0.3 ms or more unprofiled."""
    out = []
    for side in ("planted", "fixed"):
        for ph in OP_PHASES:
            off = med(res["blocks"], "off", side, ph)
            if off >= 0.3:
                out.append(med(res["blocks"], "prof", side, ph) / off)
    return out


def table(variant, res):
    bl = res["blocks"]
    used = [p for p in PHASES if any(b[p] > 0.0005 for b in bl)]
    keys = ["wall"] + used
    lines = [f"{variant}  (ms per step, median over blocks; events per step: " +
             ", ".join(f"{s} {e['events']:.0f} + {e['memory_records']:.0f} memory"
                       for s, e in res["events"].items()) + ")",
             "  side     mode  " + "".join(f"{k:>8s}" for k in keys)]
    for side in ("planted", "fixed"):
        for mode in ("off", "prof", "after"):
            lines.append(f"  {side:8s} {mode:5s}" + "".join(f"{med(bl, mode, side, k):8.3f}" for k in keys))
    for side in ("planted", "fixed"):
        lines.append(f"  profiler's cost, {side:7s} " +
                     "".join(f"{med(bl, 'prof', side, k) - med(bl, 'off', side, k):+8.3f}" for k in keys))
    for mode in ("off", "prof"):
        lines.append(f"  fix's saving, {mode:4s}      " +
                     "".join(f"{med(bl, mode, 'planted', k) - med(bl, mode, 'fixed', k):+8.3f}" for k in keys))
    r = op_ratios(res)
    if r:
        lines.append("  op phases, profiled / off: " + " ".join(f"{x:.2f}" for x in r) +
                     f" (median {statistics.median(r):.2f})")
    return "\n".join(lines)


def summarize(paths):
    """The tables of kept JSON files and the median op-phase ratio over all of them."""
    allr = []
    for path in paths:
        texts, ratios = [], []
        try:  # everything read from the file, before anything is printed for it
            with open(path) as f:
                doc = json.load(f)
            head = f"[{path}: {doc.get('model', '?')} on {doc.get('device', '?')}, boot {doc.get('boot', '?')}]"
            for v, res in doc["variants"].items():
                texts.append(head + "\n" + table(v, res))
                ratios += op_ratios(res)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, statistics.StatisticsError,
                ZeroDivisionError) as e:
            sys.exit(f"phase_probe: {path}: not a phase_probe result ({type(e).__name__}: {e})")
        print("\n".join(texts))
        if ratios:
            print(f"{path}: {len(ratios)} op-phase ratios, median {statistics.median(ratios):.2f}")
        allr += ratios
    if len(allr) >= 4:
        q = statistics.quantiles(allr, n=4)
        print(f"all: {len(allr)} op-phase ratios, median {statistics.median(allr):.2f} "
              f"(quartiles {q[0]:.2f} .. {q[2]:.2f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", help="JSON file for every block's figures")
    ap.add_argument("--summarize", nargs="+", metavar="JSON",
                    help="print the tables of kept result files and the pooled op-phase ratio")
    ap.add_argument("--model", choices=("cnn", "lm"), default="cnn")
    ap.add_argument("--variants", default="tiny_ops_b64,memory_churn_b64,logging_reads_b64")
    ap.add_argument("--rounds", type=int, default=4, help="ABBA rounds per mode")
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--rtt", default="tests/torch/record_torch_traces.py")
    a = ap.parse_args()
    if a.summarize:
        summarize(a.summarize)
        return
    if not a.out:
        sys.exit("phase_probe: give OUT.json (or --summarize JSON ...)")
    if torch is None:
        sys.exit("phase_probe: torch is not installed (only --summarize runs without it)")
    if a.rounds < 1 or a.steps < 1:
        sys.exit("phase_probe: --rounds and --steps must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("phase_probe: no CUDA device")
    rtt = load_rtt(a.rtt, a.model)
    unknown = [v for v in a.variants.split(",") if v not in rtt.PLANTED]
    if unknown:
        sys.exit(f"phase_probe: not a planted variant of {a.rtt}: {','.join(unknown)}")
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "model": a.model,
           "boot": open("/proc/sys/kernel/random/boot_id").read()[:8], "rounds": a.rounds,
           "steps": a.steps, "variants": {}}
    for v in a.variants.split(","):
        t0 = time.time()
        doc["variants"][v] = probe(rtt, v, a.rounds, a.steps)
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:  # kept whole if a later variant fails
            json.dump(doc, f, indent=1)
        os.replace(tmp, a.out)
        print(table(v, doc["variants"][v]), f"\n  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
