#!/usr/bin/env python3
"""covariate_eval.py RECORDING.tar.gz...: does the profiler's own per-call calibration explain
the slow state between processes, and would an A/B adjusted by it catch more?

Offline, on bench/gate/ab_record.sh recordings. For each scenario and block of 8 rounds of a
recording, three comparisons (a vs h10: 10% injected; b vs h5: 5%; a vs b: the same build),
each on log p10 step per run, one-sided two-sample permutation test at COVARIATE_ALPHA
(default 0.01; 4000 shuffles, seed 1): raw, and adjusted by the run's profiler_cost.calibration.ns_per_cuda_call (the traced
CUDA call's added cost measured in the same process at its start) with a pooled
within-group regression slope (analysis of covariance). The injection is CPU busy time, so
it does not move the covariate. The adjusted values are also tested as the gate tests
them, paired by round (sign flips of the 8 differences, exact). Prints, per scenario, the correlation of log p10 with the
covariate over all runs, and caught / false alarms raw and adjusted. Blocks share runs
between the three comparisons (a appears in two): indicative, not ab_eval.py's disjoint
design. A study, not the gate: profile_compare does not use the covariate.
"""
import glob
import io
import json
import math
import os
import random
import statistics as st
import sys
import tarfile

# COVARIATE_ALPHA: the tests' level (default 0.01; gpu_ab.sh's first look uses 0.004)
ALPHA = float(os.environ.get("COVARIATE_ALPHA", "0.01"))


def p10(steps):
    t = sorted(steps)
    return t[len(t) // 10]


def load(path):
    """{scenario: [round -> {kind: (log p10, log calib)}]} from a recording tarball."""
    out = {}
    with tarfile.open(path) as t:
        for m in t.getmembers():
            parts = m.name.split("/")
            if not m.isfile() or not m.name.endswith(".json") or len(parts) < 3:
                continue
            sc, rnd, kind = parts[-3], parts[-2], parts[-1][:-5]
            if sc not in ("clean", "tiny_ops") or not rnd.isdigit():
                continue
            j = json.load(io.TextIOWrapper(t.extractfile(m)))
            cal = ((j.get("profiler_cost") or {}).get("calibration") or {}).get("ns_per_cuda_call")
            steps = j.get("step_times_s") or []
            if not steps or not isinstance(cal, (int, float)) or not 0 < cal < 1e7:
                continue
            out.setdefault(sc, {}).setdefault(int(rnd), {})[kind] = (math.log(p10(steps)), math.log(cal))
    return {sc: [r[k] for k in sorted(r) if len(r[k]) == 4] for sc, r in out.items()}


def perm_p(x, y, rng, n=4000):
    obs = st.fmean(y) - st.fmean(x)
    z = list(x) + list(y)
    c = 0
    for _ in range(n):
        rng.shuffle(z)
        if st.fmean(z[len(x):]) - st.fmean(z[: len(x)]) >= obs:
            c += 1
    return (c + 1) / (n + 1)


def paired_p(x, y, rng, n=2000):
    """One-sided sign-flip test of the round-paired differences (the gate's form)."""
    d = [b - a for a, b in zip(x, y)]
    obs = st.fmean(d)
    if len(d) <= 12:  # exact
        c = total = 0
        for mask in range(1 << len(d)):
            total += 1
            if st.fmean(-v if mask >> i & 1 else v for i, v in enumerate(d)) >= obs - 1e-15:
                c += 1
        return c / total
    c = 0
    for _ in range(n):
        if st.fmean(v if rng.random() < 0.5 else -v for v in d) >= obs - 1e-15:
            c += 1
    return (c + 1) / (n + 1)


def adjust(xs, ys):
    def sums(ps):
        mc = st.fmean(c for _, c in ps)
        mv = st.fmean(v for v, _ in ps)
        return sum((c - mc) * (v - mv) for v, c in ps), sum((c - mc) ** 2 for _, c in ps)
    n1, d1 = sums(xs)
    n2, d2 = sums(ys)
    b = (n1 + n2) / (d1 + d2) if d1 + d2 > 0 else 0.0
    mc = st.fmean(c for _, c in xs + ys)
    return [v - b * (c - mc) for v, c in xs], [v - b * (c - mc) for v, c in ys]


def corr(x, y):
    try:
        return st.correlation(x, y)
    except st.StatisticsError:  # fewer than two points, or one side constant
        return float("nan")


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    rng = random.Random(1)
    res, pts = {}, {}
    for path in sys.argv[1:]:
        if not os.path.isfile(path):
            print(f"covariate_eval: no recording at {path}", file=sys.stderr)
            return 2
        for sc, rounds in load(path).items():
            pts.setdefault(sc, []).extend(r[k] for r in rounds for k in ("a", "b"))
            for i in range(0, len(rounds) - 7, 8):
                blk = rounds[i:i + 8]
                for name, (x, y) in (("10%", ("a", "h10")), ("5%", ("b", "h5")), ("same", ("a", "b"))):
                    xs, ys = [r[x] for r in blk], [r[y] for r in blk]
                    raw = perm_p([v for v, _ in xs], [v for v, _ in ys], rng) < ALPHA
                    xa, ya = adjust(xs, ys)
                    adj = perm_p(xa, ya, rng) < ALPHA
                    adj_paired = paired_p(xa, ya, rng) < ALPHA
                    res.setdefault((sc, name), []).append((raw, adj, adj_paired))
    for sc in sorted(pts):
        p = pts[sc]
        print(f"{sc}: correlation of log p10 with log ns_per_cuda_call over {len(p)} unchanged runs: "
              f"{corr([v for v, _ in p], [c for _, c in p]):.2f}")
    print("| scenario | comparison | blocks | caught raw | caught adjusted | adjusted, paired by round |")
    print("|---|---|---:|---:|---:|---:|")
    for (sc, name), v in sorted(res.items()):
        print(f"| {sc} | {name if name != 'same' else 'same vs same (false alarms)'} | {len(v)} | "
              f"{sum(a for a, _, _ in v)} | {sum(b for _, b, _ in v)} | {sum(c for _, _, c in v)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
