#!/usr/bin/env python3
"""perm_calibration.py: whether the A/B's permutation test keeps its alpha when the
covariate's slope is fitted on the same runs, from recorded unchanged runs.

    bench/gate/perm_calibration.py RECORDING.tar.gz... [--stat STAT] [--draws N] [--perms P] [--seed S]

profile_compare --adjust fits one pooled within-side slope of log value on log covariate,
moves every run along it, and then relabels the moved values (a two-sample permutation
test): the slope is fitted once, on the observed labels, and not again for each
relabelling, so the test does not pay for the fitted slope. This draws null A/Bs from each
recording (8 rounds at random, base the a runs, head the b runs: the same build; every
other draw swaps the sides), and computes each A/B's one-sided p two ways: the slope as
profile_compare fits it (fixed), and the slope fitted again inside every relabelling
(refit, the exact form of the same test). Under "no change" a valid test gives p < x in a
share x of the A/Bs. The value is STAT of each run's untraced warmup steps (ab_emulate's
statistics: p10, p25, p50, tm10_50; default p50); the covariate is the median probe where
every run of the recording has it, else the untraced launch calibration (as
profile_compare chooses). A/Bs drawn from one recording share runs: the shares estimate the
test's calibration, they do not count independent A/Bs.

Prints one row per recording and scenario and one per covariate kind and scenario, pooled:
the share of p below 0.10, 0.05 and 0.01, fixed / refit. Needs numpy; no GPU.
Exit 0; 2 on bad usage.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_emulate import STATS, load, perm_slopes  # noqa: E402  (the one reader of a recording's runs, the statistics, the slope)
from ab_eval import SCENARIOS  # noqa: E402

ROUNDS = 8
LEVELS = (0.10, 0.05, 0.01)


def die(msg):
    print(f"perm_calibration: {msg}", file=sys.stderr)
    sys.exit(2)


def slope(v, c, lab):
    """The pooled within-side slope of v on c for the labelling lab (0 base, 1 head)."""
    order = np.argsort(lab, kind="stable")
    return float(perm_slopes(v[order][None, :], c[order][None, :], int(np.sum(lab == 0)))[0])


def change(v, c, lab, s):
    adj = np.exp(v - s * (c - c.mean()))
    return adj[lab == 1].mean() / adj[lab == 0].mean() - 1.0


def p_values(v, c, lab, perms, rng):
    """(fixed, refit) one-sided p of the head (label 1) being slower."""
    s0 = slope(v, c, lab)
    obs = change(v, c, lab, s0)
    fixed = refit = 0
    for _ in range(perms):
        pl = rng.permutation(lab)
        fixed += change(v, c, pl, s0) >= obs
        refit += change(v, c, pl, slope(v, c, pl)) >= obs
    return (fixed + 1) / (perms + 1), (refit + 1) / (perms + 1)


def shares(ps):
    ps = np.asarray(ps)
    return " | ".join(f"{np.mean(ps[:, 0] < x):.3f} / {np.mean(ps[:, 1] < x):.3f}" for x in LEVELS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recordings", nargs="+")
    ap.add_argument("--stat", default="p50", choices=tuple(STATS))
    ap.add_argument("--draws", type=int, default=60)
    ap.add_argument("--perms", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=5)
    a = ap.parse_args()
    if not 1 <= a.draws <= 10000 or not 100 <= a.perms <= 100000:
        die("--draws must be from 1 to 10000 and --perms from 100 to 100000")
    for r in a.recordings:
        if not r.endswith(".tar.gz") or not os.path.isfile(r):
            die(f"{r}: not a recording (.tar.gz)")
    rng = np.random.default_rng(a.seed)
    head = "| p < 0.10: fixed / refit | p < 0.05 | p < 0.01 |"
    print(f"### Null A/Bs of {ROUNDS} rounds, statistic {a.stat}: the share of p below each level (bench/gate/perm_calibration.py)\n")
    print(f"| recording | scenario | covariate | A/Bs {head}")
    print("|---|---|---|---:|---:|---:|---:|")
    pooled = {}
    for path in a.recordings:
        data = load(path)
        name = os.path.basename(path).replace(".tar.gz", "")
        for scen in SCENARIOS:
            rows = data.get(scen) or []
            if len(rows) < ROUNDS:
                continue
            probed = all(e[k][2] is not None for e in rows for k in ("a", "b"))
            ci = 2 if probed else 1
            val = {k: np.log([STATS[a.stat](e[k][0]) for e in rows]) for k in ("a", "b")}
            cov = {k: np.log([e[k][ci] for e in rows]) for k in ("a", "b")}
            ps = []
            for i in range(a.draws):
                idx = rng.permutation(len(rows))[:ROUNDS]
                v = np.concatenate([val["a"][idx], val["b"][idx]])
                c = np.concatenate([cov["a"][idx], cov["b"][idx]])
                lab = np.repeat([0, 1], ROUNDS) if i % 2 == 0 else np.repeat([1, 0], ROUNDS)
                ps.append(p_values(v, c, lab, a.perms, rng))
            kind = "probe" if probed else "calibration"
            pooled.setdefault((kind, scen), []).extend(ps)
            print(f"| {name} | {scen} | {kind} | {len(ps)} | {shares(ps)} |")
    if not pooled:
        die(f"no recording has {ROUNDS} complete rounds of a and b runs with untraced samples")
    print()
    print(f"| pooled | scenario | covariate | A/Bs {head}")
    print("|---|---|---|---:|---:|---:|---:|")
    for (kind, scen), ps in sorted(pooled.items()):
        print(f"| all | {scen} | {kind} | {len(ps)} | {shares(ps)} |")


if __name__ == "__main__":
    main()
