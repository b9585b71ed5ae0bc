#!/usr/bin/env python3
"""long_run_eval.py: a process's slow state over time, from bench/gate/long_run.sh output.

    bench/gate/long_run_eval.py RECORDING   (the folder or its .tar.gz)

Per run (one process, thousands of untraced warmup steps), the steps cut into windows of
about 0.25 s; printed per run: the steps, the median step, the window medians' range
against the run's median (lowest, highest), how many times the level moved by more than
8% between neighbouring windows, and from the thread samples the CPUs the launching thread
(tid = pid) was seen on, its moves, and the share of samples in which another thread of the
process was running (state R) on its CPU. Per scenario: the spread of the run medians
between processes against the spread of window medians within a process (both standard
deviations of the log, %): a within-process spread far below the between-process one
means the state is set once per process; a comparable one, a moment of the machine.
Prints Markdown; exit 0; 2 on bad usage or a recording without runs.
"""
import argparse
import csv
import json
import math
import os
import statistics as st
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_eval import unpack_recording  # noqa: E402


def die(msg):
    print(f"long_run_eval: {msg}", file=sys.stderr)
    sys.exit(2)


def threads_of(path):
    """{tid: [(t_ms, name, state, cpu)]} from a .threads.tsv; None where it is missing."""
    if not os.path.isfile(path):
        return None
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            try:
                out.setdefault(int(row["tid"]), []).append(
                    (float(row["t_ms"]), row["name"], row["state"], int(row["cpu"])))
            except (KeyError, ValueError, TypeError):
                continue
    return out


def main_thread_stats(th):
    """(CPUs seen, moves, share of samples another thread ran on its CPU) of the launching
    thread: the thread sampled first with the lowest tid (tid = pid)."""
    if not th:
        return "-", "-", "-"
    main = min(th)
    seq = th[main]
    cpus = [c for _, _, _, c in seq]
    moves = sum(1 for a, b in zip(cpus, cpus[1:]) if a != b)
    # samples of other threads, by time stamp: running on the main thread's CPU
    by_t = {}
    for tid, s in th.items():
        if tid == main:
            continue
        for t, _, state, c in s:
            if state == "R":
                by_t.setdefault(t, set()).add(c)
    shared = sum(1 for t, _, _, c in seq if c in by_t.get(t, ()))
    return str(len(set(cpus))), str(moves), f"{100 * shared / len(seq):.0f}%" if seq else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recording")
    a = ap.parse_args()
    rec = unpack_recording(a.recording, die, "long_run_eval.")
    if not os.path.isdir(rec):
        die(f"{a.recording}: not a recording folder or .tar.gz")
    rows, summary = [], []
    for scen in ("tiny_ops", "clean"):
        names = sorted((f for f in os.listdir(rec) if f.startswith(scen + "_") and f.endswith(".json")),
                       key=lambda f: int(f[len(scen) + 1:-5]) if f[len(scen) + 1:-5].isdigit() else 0)
        meds, within = [], []
        for f in names:
            with open(os.path.join(rec, f)) as fp:
                doc = json.load(fp)
            w = doc.get("warmup_step_times_s")
            if not isinstance(w, list) or len(w) < 200 or not all(isinstance(x, (int, float)) and 0 < x < 10 for x in w):
                continue
            med = st.median(w)
            size = max(20, int(round(0.25 / med)))
            wins = [st.median(w[i:i + size]) for i in range(0, len(w) - size + 1, size)]
            moved = sum(1 for x, y in zip(wins, wins[1:]) if abs(math.log(y / x)) > math.log(1.08))
            meds.append(med)
            within.extend(math.log(x / med) for x in wins)
            cpus, moves, shared = main_thread_stats(threads_of(os.path.join(rec, f[:-5] + ".threads.tsv")))
            rows.append(f"| {scen} | {f[:-5]} | {len(w)} | {1e6 * med:.1f} | {100 * (min(wins) / med - 1):+.1f}% / "
                        f"{100 * (max(wins) / med - 1):+.1f}% | {moved} of {len(wins) - 1} | {cpus} | {moves} | {shared} |")
        if len(meds) >= 2:
            lm = [math.log(x) for x in meds]
            summary.append(f"| {scen} | {len(meds)} | {100 * st.pstdev(lm):.2f} | {100 * st.pstdev(within):.2f} | "
                           f"{1e6 * min(meds):.1f} .. {1e6 * max(meds):.1f} |")
    if not rows:
        die(f"{a.recording}: no run with 200 or more warmup step times")
    print("#### Long runs: the level of each process over time (bench/gate/long_run_eval.py)\n")
    print("| scenario | run | steps | median step (us) | windows of 0.25 s: lowest / highest against the median "
          "| level moves over 8% | launching thread: CPUs | moves | samples with another thread running on its CPU |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    print("\n| scenario | runs | between processes: spread of the medians % | within a process: spread of the "
          "window medians % | medians (us) |")
    print("|---|---:|---:|---:|---|")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
