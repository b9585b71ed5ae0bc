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
Where a run has a <run>.watch.tsv (long_run.sh with PD_WATCH=1: bench/gate/cpu_watch
alongside), each window is also placed in time (the warmup ends about 0.3 s before the last
thread sample: the profiled steps, the analysis and the exit come after it) and set against
the watched speed of the launching thread's CPU and of the other CPUs in that window (the
chunk's time over that CPU's p10 over the run): the correlation of the logs, pooled over
runs. Where the runs carry profiler_demo --warmup_probe's series (the launching thread's
launch and compute speed after each step, in the process), the same correlations with the
probe's window medians, and per process the spread left in the window levels after the
probe's launch time (a covariate within the process); and what an A/B run of L warmup
steps (48 to 800) drawn at random from these processes would leave after its own probes.

    bench/gate/long_run_eval.py --watch FILE.tsv[.gz]    (cpu_watch's output on its own)

prints per CPU: the compute and memory chunks' p10 (us), the share of bins more than 15%
over it, the longest such episode (ms), and the correlation of the compute and memory
series; and the mean correlation of the compute series between CPUs, with the most
correlated pairs.
Prints Markdown; exit 0; 2 on bad usage or a recording without runs.
"""
import argparse
import csv
import gzip
import json
import math
import os
import random
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


TAIL_MS = 300.0  # from the last warmup step to the process's exit (profiled steps, analysis)


def read_watch(path):
    """(t0_ns, bin_ns, {cpu: {bin: (compute_ns, memory_ns)}}) of a cpu_watch output."""
    t0 = bin_ns = None
    data = {}
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for line in f:
            if line.startswith("#"):
                p = line.split()
                try:
                    t0, bin_ns = int(p[2]), int(p[4])
                except (IndexError, ValueError):
                    die(f"{path}: a bad first line {line.strip()!r}")
                continue
            p = line.rstrip("\n").split("\t")
            if len(p) != 5 or not p[0].isdigit():
                continue
            c, b, cn, mn = int(p[0]), int(p[1]), float(p[2]), float(p[3])
            if 0 < cn < 1e9 and 0 < mn < 1e9:
                data.setdefault(c, {})[b] = (cn, mn)
    if t0 is None or not data:
        die(f"{path}: not cpu_watch output (no '# t0_monotonic_ns' line or no rows)")
    return t0, bin_ns, data


def p10(values):
    v = sorted(values)
    return v[len(v) // 10]


def ratios(series, k):
    """{bin: value / p10 over the bins} of one CPU's compute (k 0) or memory (k 1) times."""
    base = p10(x[k] for x in series.values())
    return {b: x[k] / base for b, x in series.items()}


def slope(xs, ys):
    """The least-squares slope of ys on xs (0 where xs do not vary)."""
    mx, my = st.fmean(xs), st.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0


def corr(x, y):
    if len(x) < 3 or st.pstdev(x) == 0 or st.pstdev(y) == 0:
        return float("nan")
    mx, my = st.fmean(x), st.fmean(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / (len(x) * st.pstdev(x) * st.pstdev(y))


def watch_table(path):
    _, bin_ns, data = read_watch(path)
    rows, comp = [], {}
    for c in sorted(data):
        ser = data[c]
        rc, rm = ratios(ser, 0), ratios(ser, 1)
        comp[c] = rc
        bins = sorted(ser)
        longest = run = 0
        for b in bins:
            run = run + 1 if rc[b] > 1.15 else 0
            longest = max(longest, run)
        rows.append(f"| {c} | {len(bins)} | {p10(x[0] for x in ser.values()) / 1e3:.1f} | "
                    f"{100 * sum(rc[b] > 1.15 for b in bins) / len(bins):.0f}% | "
                    f"{p10(x[1] for x in ser.values()) / 1e3:.1f} | {100 * sum(rm[b] > 1.15 for b in bins) / len(bins):.0f}% | "
                    f"{longest * bin_ns / 1e6:.0f} | {corr([math.log(rc[b]) for b in bins], [math.log(rm[b]) for b in bins]):+.2f} |")
    pairs = []
    cpus = sorted(comp)
    for i, a in enumerate(cpus):
        for b in cpus[i + 1:]:
            common = sorted(set(comp[a]) & set(comp[b]))
            pairs.append((corr([math.log(comp[a][k]) for k in common], [math.log(comp[b][k]) for k in common]), a, b))
    print(f"#### cpu_watch: each CPU's speed over time ({os.path.basename(path)}; bins of {bin_ns / 1e6:.0f} ms)\n")
    print("| CPU | bins | compute p10 (us) | bins over 1.15x | memory p10 (us) | bins over 1.15x | longest compute episode (ms) "
          "| compute~memory |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    good = [p for p in pairs if not math.isnan(p[0])]
    if good:
        good.sort(reverse=True)
        print(f"\nCompute series between CPUs: mean correlation {st.fmean(p[0] for p in good):+.2f} over {len(good)} pairs; "
              "most correlated: " + ", ".join(f"{a}~{b} {r:+.2f}" for r, a, b in good[:5]))
    return 0


def watch_windows(rec, name, w, size, th):
    """[(log window step over the run's p10 of windows, log watched compute ratio on the
    launching thread's CPU, the same over the other CPUs)] for a run with a .watch.tsv."""
    path = os.path.join(rec, name + ".watch.tsv")
    if not os.path.isfile(path) or not th:
        return []
    t0, bin_ns, data = read_watch(path)
    main = min(th)
    end_ms = max(t for s in th.values() for t, _, _, _ in s) - TAIL_MS
    start_ms = end_ms - 1e3 * sum(w)
    rc = {c: ratios(ser, 0) for c, ser in data.items()}
    wins, at = [], start_ms
    for i in range(0, len(w) - size + 1, size):
        a, b = at, at + 1e3 * sum(w[i:i + size])
        at = b
        cpus = [c for t, _, _, c in th[main] if a <= t <= b]
        if not cpus:
            continue
        cpu = max(set(cpus), key=cpus.count)
        lo, hi = int((a * 1e6 - t0) // bin_ns), int((b * 1e6 - t0) // bin_ns)
        own = [rc[cpu][k] for k in range(lo, hi + 1) if cpu in rc and k in rc[cpu]]
        others = [rc[c][k] for c in rc if c != cpu for k in range(lo, hi + 1) if k in rc[c]]
        if own and others:
            wins.append((st.median(w[i:i + size]), math.log(st.median(own)), math.log(st.median(others))))
    if not wins:
        return []
    base = p10(x[0] for x in wins)
    return [(math.log(s / base), o, r) for s, o, r in wins]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recording", nargs="?")
    ap.add_argument("--watch", metavar="FILE", help="cpu_watch output on its own")
    a = ap.parse_args()
    if a.watch:
        if a.recording:
            die("give a recording or --watch FILE, not both")
        return watch_table(a.watch)
    if not a.recording:
        die("give a recording (a long_run.sh folder or .tar.gz) or --watch FILE")
    rec = unpack_recording(a.recording, die, "long_run_eval.")
    if not os.path.isdir(rec):
        die(f"{a.recording}: not a recording folder or .tar.gz")
    rows, summary, watched, series = [], [], [], {}
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
            pl, pc = doc.get("warmup_probe_launch_ns"), doc.get("warmup_probe_compute_ns")
            if isinstance(pl, list) and isinstance(pc, list) and len(pl) == len(w) == len(pc) and all(
                    isinstance(x, (int, float)) and 0 < x < 1e9 for x in pl + pc):
                series.setdefault(scen, []).append((w, pl, pc, size))
            th = threads_of(os.path.join(rec, f[:-5] + ".threads.tsv"))
            cpus, moves, shared = main_thread_stats(th)
            watched.extend(watch_windows(rec, f[:-5], w, size, th))
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
    for scen in ("tiny_ops", "clean"):
        # within each process: the window levels (logs) against the probe's windows, centred per run
        wins = []
        for w, pl, pc, size in series.get(scen, []):
            v = [(math.log(st.median(w[i:i + size])), math.log(st.median(pl[i:i + size])),
                  math.log(st.median(pc[i:i + size]))) for i in range(0, len(w) - size + 1, size)]
            if len(v) >= 3:
                wins.append(v)
        if not wins:
            continue
        y, xl, xc = [], [], []
        for v in wins:
            my, ml, mc = (st.fmean(x[k] for x in v) for k in range(3))
            y += [x[0] - my for x in v]
            xl += [x[1] - ml for x in v]
            xc += [x[2] - mc for x in v]
        b = slope(xl, y)
        left = [a - b * x for a, x in zip(y, xl)]
        print(f"\nWith --warmup_probe, {scen} ({len(wins)} runs, {len(y)} windows, centred per run): correlation of a "
              f"window's step level with the probe's launch time {corr(y, xl):+.2f}, with its compute time "
              f"{corr(y, xc):+.2f}; the window levels' spread {100 * st.pstdev(y):.2f}% -> {100 * st.pstdev(left):.2f}% "
              f"after the launch time (slope {b:.2f})")
    for scen, runs in series.items():
        if len(runs) < 3:
            continue
        # an A/B run of L warmup steps, drawn from these processes: its p50 adjusted along
        # its own probes (one pooled slope), the spread left between draws
        rnd = random.Random(3)
        cells = []
        for L in (48, 100, 200, 400, 800):
            ys, xs = [], []
            for w, pl, _, _ in runs:
                for _ in range(100):
                    a = rnd.randrange(100, len(w) - L) if len(w) - L > 100 else 0
                    ys.append(math.log(st.median(w[a:a + L])))
                    xs.append(math.log(st.median(pl[a:a + L])))
            b = slope(xs, ys)
            cells.append(f"{L}: {100 * st.pstdev([y - b * x for x, y in zip(xs, ys)]):.2f}%")
        print(f"\nWith --warmup_probe, {scen}: a run of L warmup steps drawn from these processes (100 draws each), "
              f"its p50 adjusted along its probes, spread left: " + ", ".join(cells))
    if len(watched) >= 3:
        y = [x[0] for x in watched]
        print(f"\nWith cpu_watch alongside ({len(watched)} windows of 0.25 s): correlation of a window's step level with "
              f"the watched compute speed of the launching thread's CPU {corr(y, [x[1] for x in watched]):+.2f}, "
              f"of the other CPUs {corr(y, [x[2] for x in watched]):+.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
