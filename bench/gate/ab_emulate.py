#!/usr/bin/env python3
"""ab_emulate.py: a fast emulation of scripts/gpu_ab.sh's sequential A/B on recorded runs,
for choosing its design before the real evaluation (bench/gate/ab_eval.py, which runs
profile_compare itself and is the figure of record).

    bench/gate/ab_emulate.py RECORDING.tar.gz... [--draws N] [--seed S] [--slope S | --refit] [--even-alpha]
        [--covariate auto|probe|calib] DESIGN...

DESIGN: STAT:CAP:CONTINUE[:TOL], e.g. p10:40:0.015 (the default of gpu_ab.sh since the evening of
2026-11-28) or p50:24:0.03 (the one before): STAT the run's statistic of its untraced warmup
steps (p10, p50, p25, or tm10_50: the mean of the values between its 10th and 50th
percentile); CAP the most rounds (looks at 8, 16, ... CAP); CONTINUE: a look whose change is
worse than this fraction, but not significant, takes more rounds (0.015 is profile_compare's
half-tolerance rule, 0.03 the rule before it); TOL the tolerance band a change must exceed
to fail (default 0.03, the host class's A/B tolerance in gate_policy.c).

The emulation, per look: each run's value adjusted along its log untraced launch time (the
median of profiler_demo --warmup_probe's where every run has it, as profile_compare; else
the calibration's; --covariate picks) (analysis of covariance on log values, pooled within-side slope clamped to [0, 2], as
profile_compare --adjust), the mean of each side (--keep 1), the change against the 3%
tolerance, and a two-sample permutation p (4000 random splits) against the look's alpha
(0.004 at the first look, 0.006 split over the later ones; --refit: the slope fitted again
in every split, the test's exact form). Each A/B is drawn from one
recording: CAP of its rounds in random order (so A/Bs of one recording share runs: this
estimates power, it does not count independent A/Bs as ab_eval.py does), base a or b (the
unchanged runs), head h10, h5 or the other unchanged kind. Prints, per recording set and
scenario, the share of A/Bs that fail (10%, 5%, same build) and their mean rounds.
Exit 0; 2 on bad usage.
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_eval import SCENARIOS, look_alphas, probe_median, unpack_recording  # noqa: E402  (the one schedule of looks; the one reader of a recording's .tar.gz and of a run's probe)

STATS = {
    "p10": lambda w: np.quantile(w, 0.10),
    "p25": lambda w: np.quantile(w, 0.25),
    "p50": lambda w: np.quantile(w, 0.50),
    "tm10_50": lambda w: np.mean(np.sort(w)[int(len(w) * 0.1) : int(len(w) * 0.5) + 1]),
}
TOL = 0.03


def die(msg):
    print(f"ab_emulate: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    """{scenario: [ {kind: (warmup samples, ns_per_launch_untraced, median warmup_probe_launch_ns
    or None)} per complete round ]}"""
    top = unpack_recording(path, die, "ab_emulate.")
    out = {}
    for scen in SCENARIOS:
        rows = []
        dirs = sorted(glob.glob(os.path.join(top, scen, "*")), key=lambda d: int(os.path.basename(d)))
        for d in dirs:
            ent = {}
            for k in ("a", "b", "h5", "h10"):
                p = os.path.join(d, k + ".json")
                if not os.path.isfile(p):
                    break
                doc = json.load(open(p))
                w = doc.get("warmup_step_times_s")
                c = doc.get("profiler_cost", {}).get("calibration", {}).get("ns_per_launch_untraced")
                if not w or not isinstance(c, (int, float)) or not 0 < c < 1e7:
                    break
                ent[k] = (np.array(w, float), float(c), probe_median(doc))
            if len(ent) == 4:
                rows.append(ent)
        out[scen] = rows
    return out


def adjust(b, h, cb, ch, slope=None):
    """slope: None fits the pooled within-side slope (profile_compare --adjust); a number
    uses that slope instead (an experiment: --slope)."""
    lb, lh = np.log(b), np.log(h)
    ref = np.concatenate([cb, ch]).mean()
    if slope is not None:
        return b * np.exp(-slope * (cb - ref)), h * np.exp(-slope * (ch - ref))
    sxy = ((cb - cb.mean()) * (lb - lb.mean())).sum() + ((ch - ch.mean()) * (lh - lh.mean())).sum()
    sxx = ((cb - cb.mean()) ** 2).sum() + ((ch - ch.mean()) ** 2).sum()
    if sxx <= 0:
        return b, h
    s = min(2.0, max(0.0, sxy / sxx))
    return b * np.exp(-s * (cb - ref)), h * np.exp(-s * (ch - ref))


def look(b, h, alpha, cont, rng, tol=TOL, nperm=4000):
    """(failed, undecided)"""
    diff = h.mean() - b.mean()
    ch = diff / b.mean()
    if ch <= tol:
        return False, ch > cont
    pool = np.concatenate([b, h])
    n = len(b)
    perm = pool[np.argsort(rng.random((nperm, 2 * n)), axis=1)]
    d = perm[:, n:].mean(1) - perm[:, :n].mean(1)
    p = (np.sum(d >= diff) + 1) / (nperm + 1)
    return p < alpha, p >= alpha


def perm_slopes(pv, pc, n):
    """The pooled within-side slope of log value on log covariate for every row of pv, pc
    (rows: labellings, the first n columns the base side), clamped to [0, 2] as
    profile_compare's; 0 where the covariate does not vary within the sides."""
    sxy = sxx = 0.0
    for g in (slice(0, n), slice(n, pv.shape[1])):
        dc = pc[:, g] - pc[:, g].mean(1, keepdims=True)
        sxy = sxy + (dc * (pv[:, g] - pv[:, g].mean(1, keepdims=True))).sum(1)
        sxx = sxx + (dc * dc).sum(1)
    return np.where(sxx > 0, np.clip(sxy / np.where(sxx > 0, sxx, 1.0), 0.0, 2.0), 0.0)


def look_refit(bv, hv, bc, hc, alpha, cont, rng, tol=TOL, nperm=4000):
    """look() with the covariate's slope fitted again inside every relabelling (--refit: the
    exact form of the adjusted permutation test; bench/gate/perm_calibration.py measures
    how far the fitted-once form strays from it). bv, hv: raw values; bc, hc: log covariates."""
    b, h = adjust(bv, hv, bc, hc)
    diff = h.mean() - b.mean()
    ch = diff / b.mean()
    if ch <= tol:
        return False, ch > cont
    n = len(bv)
    lv = np.log(np.concatenate([bv, hv]))
    lc = np.concatenate([bc, hc])
    ref = lc.mean()
    idx = np.argsort(rng.random((nperm, 2 * n)), axis=1)
    pv, pc = lv[idx], lc[idx]
    adj = np.exp(pv - perm_slopes(pv, pc, n)[:, None] * (pc - ref))
    d = adj[:, n:].mean(1) - adj[:, :n].mean(1)
    p = (np.sum(d >= diff) + 1) / (nperm + 1)
    return p < alpha, p >= alpha


def even_alphas(first, cap):
    """The same looks as look_alphas, the total 0.01 spread evenly over them (--even-alpha)."""
    looks = look_alphas(first, cap)
    return [(n, 0.01 / len(looks)) for n, _ in looks]


def sequential(bv, bc, hv, hc, cap, cont, rng, tol=TOL, slope=None, alphas=look_alphas, refit=False):
    """gpu_ab.sh's looks (ab_eval.look_alphas: 8, 16, ... and the cap itself)."""
    n = 8
    for n, a in alphas(8, cap):
        if refit:
            failed, undecided = look_refit(bv[:n], hv[:n], bc[:n], hc[:n], a, cont, rng, tol)
        else:
            b, h = adjust(bv[:n], hv[:n], bc[:n], hc[:n], slope)
            failed, undecided = look(b, h, a, cont, rng, tol)
        if failed or not undecided:
            return failed, n
    return False, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("items", nargs="+", help="recordings (.tar.gz), then designs STAT:CAP:CONTINUE")
    ap.add_argument("--draws", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slope", type=float, default=None,
                    help="an experiment: this covariate slope instead of the one each A/B fits")
    ap.add_argument("--covariate", choices=("auto", "probe", "calib"), default="auto",
                    help="the untraced rows' covariate: auto as profile_compare (the median of "
                    "warmup_probe_launch_ns where every run of the recording has it, else "
                    "ns_per_launch_untraced), or one of the two")
    ap.add_argument("--refit", action="store_true",
                    help="an experiment: the covariate's slope fitted again in every relabelling of the test")
    ap.add_argument("--even-alpha", action="store_true",
                    help="an experiment: alpha 0.01 spread evenly over the looks instead of 0.004 then the rest")
    a = ap.parse_args()
    if a.slope is not None and a.refit:
        die("--slope and --refit are two different experiments: give one")
    if a.slope is not None and not 0.0 <= a.slope <= 2.0:
        die("--slope must be from 0 to 2 (the fitted slope's clamp)")
    recs = [x for x in a.items if x.endswith(".tar.gz")]
    for r in recs:
        if not os.path.isfile(r):
            die(f"{r}: no such recording")
    designs = [x for x in a.items if not x.endswith(".tar.gz")]
    if not recs or not designs or not 1 <= a.draws <= 10000:
        die("give recordings (.tar.gz) and designs (STAT:CAP:CONTINUE[:TOL]); --draws 1..10000")
    parsed = []
    for d in designs:
        parts = d.split(":")
        try:
            stat, cap, cont = parts[0], int(parts[1]), float(parts[2])
            tol = float(parts[3]) if len(parts) > 3 else TOL
        except (IndexError, ValueError):
            die(f"design '{d}' is not STAT:CAP:CONTINUE[:TOL]")
        if stat not in STATS or not 8 <= cap <= 64 or not 0 < tol <= 0.2 or not 0 <= cont <= tol or len(parts) > 4:
            die(f"design '{d}': STAT one of {', '.join(STATS)}, CAP 8..64, TOL (0, 0.2], CONTINUE 0..TOL")
        parsed.append((d, stat, cap, cont, tol))
    data = {os.path.basename(r).replace(".tar.gz", ""): load(r) for r in recs}
    rng = np.random.default_rng(a.seed)
    print("| design | scenario | 10% fails | 5% fails | same build fails | mean rounds (10% / 5% / same) |")
    print("|---|---|---:|---:|---:|---|")
    for name, stat, cap, cont, tol in parsed:
        for scen in [s for s in SCENARIOS if any(d[s] for d in data.values())]:
            res = {"h10": [], "h5": [], "same": []}
            for rows in (d[scen] for d in data.values()):
                if len(rows) < cap:
                    continue
                vals = {k: np.array([STATS[stat](e[k][0]) for e in rows]) for k in ("a", "b", "h5", "h10")}
                # profile_compare's choice: the probe where every run has it, else the calibration
                probed = a.covariate != "calib" and all(e[k][2] is not None for e in rows for k in e)
                if a.covariate == "probe" and not probed:
                    die(f"--covariate probe: a {scen} run of a recording has no warmup_probe_launch_ns")
                ci = 2 if probed else 1
                cov = {k: np.log([e[k][ci] for e in rows]) for k in ("a", "b", "h5", "h10")}
                for i in range(a.draws):
                    order = rng.permutation(len(rows))[:cap]
                    for kind, bk, hk in (("h10", "ab"[i % 2], "h10"), ("h5", "ba"[i % 2], "h5"), ("same", "a", "b")):
                        res[kind].append(sequential(vals[bk][order], cov[bk][order], vals[hk][order], cov[hk][order],
                                                    cap, cont, rng, tol, a.slope,
                                                    even_alphas if a.even_alpha else look_alphas, a.refit))
            if not res["same"]:
                print(f"| {name} | {scen} | no recording has {cap} complete rounds with untraced samples | | | |")
                continue
            share = {k: np.mean([f for f, _ in v]) for k, v in res.items()}
            rounds = " / ".join(f"{np.mean([n for _, n in res[k]]):.1f}" for k in ("h10", "h5", "same"))
            print(f"| {name} | {scen} | {share['h10']:.2f} | {share['h5']:.2f} | {share['same']:.2f} | {rounds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
