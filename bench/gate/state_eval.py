#!/usr/bin/env python3
"""state_eval.py: what the per-process noise left after the A/B's covariate looks like, in
recorded runs (bench/gate/ab_record.sh recordings, folders or .tar.gz).

    bench/gate/state_eval.py RECORDING... [--scenario tiny_ops|clean|sync|memory_churn]

Per recording, over its runs of the scenario (the base runs a and b, and for the heap
marker all four kinds with a term for each), the log of each run's untraced p10
(warmup_step_times_s) regressed on the log untraced launch time
(profiler_cost.calibration.ns_per_launch_untraced), as profile_compare --adjust does:
  - resid: the spread left (standard deviation of the residuals, %);
  - halves: the correlation of the residuals of the p10 of a run's odd and of its even
    warmup steps (near 1: the noise is a constant of the process, not sampling);
  - a~b: the correlation of the residuals of the a and b runs of one round (pairing);
  - roll16 / white: the spread of the mean over 16 consecutive runs, against what
    independent runs of that spread give (resid / 4): drift shows as a larger first figure;
  - low heap: the share of runs whose host_memory.heap_start_kib is 3 KiB or more below the
    recording's highest value, and how much slower they are with that flag in the
    regression (%), and the spread left with it;
  - where every base run carries profiler_demo --warmup_probe's series: the spread left
    with the median probe launch time as the covariate instead, and for the untraced p50
    the spread left along the calibration and along the probe.
Prints a Markdown table; docs/gate.md ("Measured (2026-11-28, night 2)") cites it.

    bench/gate/state_eval.py --modes RECORDING...

compares instead the modes of bench/gate/env_check.sh recordings (one process per mode and
round): per scenario and mode, the median untraced p50 and its change against mode free (or
the first mode found), the spread between processes of the log untraced p50 (the gate's row) raw and
after the untraced-launch covariate fitted within the mode, the launch time and its spread,
the traced p10's spread, the runs over 1.15x the scenario's fastest, and the runs 3 KiB or
more below the highest heap_start_kib of the mode's runs.
Needs numpy. Exit 0; 2 on bad usage or a recording without the samples.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_eval import SCENARIOS, probe_median, unpack_recording  # noqa: E402  (the one reader of a recording's .tar.gz and of a run's probe)


def die(msg):
    print(f"state_eval: {msg}", file=sys.stderr)
    sys.exit(2)


def unpack(path):
    rec = unpack_recording(path, die, "state_eval.")
    if not os.path.isdir(rec):
        die(f"{path}: not a recording folder or .tar.gz")
    return rec


def kinds_in(rec, scen):
    """The run names (kinds or modes) of a recording's scenario, in first-seen order."""
    d = os.path.join(rec, scen)
    seen = []
    for r in sorted((x for x in os.listdir(d) if x.isdigit()), key=int) if os.path.isdir(d) else []:
        for f in sorted(os.listdir(os.path.join(d, r))):
            if f.endswith(".json") and f[:-5] not in seen:
                seen.append(f[:-5])
    return seen


def runs_of(rec, scen, kinds=("a", "b", "h5", "h10")):
    """[(kind, round, warmup samples, launch ns, heap kib or None, traced step samples or
    None, median warmup_probe_launch_ns or None)] of the complete runs."""
    out = []
    d = os.path.join(rec, scen)
    for r in sorted((x for x in os.listdir(d) if x.isdigit()), key=int) if os.path.isdir(d) else []:
        for k in kinds:
            p = os.path.join(d, r, k + ".json")
            if not os.path.isfile(p):
                continue
            with open(p) as f:
                doc = json.load(f)
            w = doc.get("warmup_step_times_s")
            c = ((doc.get("profiler_cost") or {}).get("calibration") or {}).get("ns_per_launch_untraced")
            h = (doc.get("host_memory") or {}).get("heap_start_kib")
            if not isinstance(w, list) or len(w) < 8 or not all(isinstance(x, (int, float)) and 0 < x < 10 for x in w):
                continue
            if not isinstance(c, (int, float)) or not 0 < c < 1e7:
                continue
            pr = probe_median(doc)
            t = doc.get("step_times_s")
            t = np.array(t, float) if isinstance(t, list) and len(t) >= 8 and all(
                isinstance(x, (int, float)) and 0 < x < 10 for x in t) else None
            out.append((k, int(r), np.array(w, float), float(c), h if isinstance(h, (int, float)) and h > 0 else None, t, pr))
    return out


def fit(y, cols):
    x = np.column_stack([np.ones_like(y)] + cols)
    b, *_ = np.linalg.lstsq(x, y, rcond=None)
    return y - x @ b, b


def modes_table(paths):
    """Per recording, scenario and mode (bench/gate/env_check.sh): how the runs of each mode
    spread between processes, on the gate's row (the untraced p50)."""
    out = []
    for path in paths:
        rec = unpack(path)
        name = os.path.basename(rec.rstrip("/"))
        any_rows = False
        for scen in SCENARIOS:
            modes = kinds_in(rec, scen)
            by = {m: runs_of(rec, scen, (m,)) for m in modes}
            by = {m: v for m, v in by.items() if len(v) >= 4}
            if not by:
                continue
            any_rows = True
            p50 = {m: np.array([np.median(r[2]) for r in v]) for m, v in by.items()}
            fastest = min(x.min() for x in p50.values())
            ref = np.median(p50["free"] if "free" in p50 else next(iter(p50.values())))
            for m, v in by.items():
                y = np.log(p50[m])
                cov = np.log([r[3] for r in v])
                res, _ = fit(y, [cov])
                tr = [np.quantile(r[5], 0.10) for r in v if r[5] is not None]
                heaps = [r[4] for r in v if r[4] is not None]  # against the mode's own highest: a mode moves it
                low = f"{sum(1 for h in heaps if h <= max(heaps) - 3)}/{len(heaps)}" if heaps else "-"
                out.append(f"| {name} | {scen} | {m} | {len(v)} | {1e6 * np.median(p50[m]):.1f}, "
                      f"{100 * (np.median(p50[m]) / ref - 1):+.1f}% | {100 * y.std():.2f} | {100 * res.std():.2f} | "
                      f"{np.median([r[3] for r in v]):.0f}, {100 * cov.std():.1f} | "
                      + (f"{100 * np.log(tr).std():.1f}" if len(tr) >= 4 else "-")
                      + f" | {int((p50[m] > 1.15 * fastest).sum())}/{len(v)} | {low} |")
        if not any_rows:
            die(f"{path}: no scenario with 4 or more runs of a mode carrying untraced samples and the launch calibration")
    print("#### The modes of bench/gate/env_check.sh recordings (bench/gate/state_eval.py --modes)\n")
    print("| recording | scenario | mode | runs | untraced p50 (us): median, vs free | spread between processes % "
          "| left after the launch covariate % | untraced launch (ns): median, spread % | traced p10 spread % "
          "| runs over 1.15x the scenario's fastest | low heap |")
    print("|---|---|---|---:|---|---:|---:|---|---:|---:|---:|")
    print("\n".join(out))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recordings", nargs="+")
    ap.add_argument("--scenario", default="tiny_ops", choices=SCENARIOS)
    ap.add_argument("--modes", action="store_true",
                    help="compare the modes of bench/gate/env_check.sh recordings instead")
    a = ap.parse_args()
    if a.modes:
        return modes_table(a.recordings)
    rows = []
    for path in a.recordings:
        rec = unpack(path)
        runs = runs_of(rec, a.scenario)
        base = [r for r in runs if r[0] in ("a", "b")]
        if len(base) < 8:
            die(f"{path}: fewer than 8 {a.scenario} base runs with untraced samples and the launch calibration")
        cov = np.log([r[3] for r in base])
        p10 = lambda w: np.log(np.quantile(w, 0.10))
        res, _ = fit(np.array([p10(r[2]) for r in base]), [cov])
        odd, _ = fit(np.array([p10(r[2][0::2]) for r in base]), [cov])
        even, _ = fit(np.array([p10(r[2][1::2]) for r in base]), [cov])
        by = {(r[0], r[1]): e for r, e in zip(base, res)}
        pairs = np.array([(by[("a", n)], by[("b", n)]) for (k, n) in by if k == "a" and ("b", n) in by])
        ab = np.corrcoef(pairs.T)[0, 1] if len(pairs) >= 3 else float("nan")
        order = np.argsort([r[1] for r in base], kind="stable")
        roll = np.convolve(res[order], np.ones(16) / 16, mode="valid") if len(base) >= 16 else np.array([])
        # the heap marker, over every kind (a term per kind)
        hr = [r for r in runs if r[4] is not None]
        heap = "-"
        if len(hr) >= 8:
            kinds = np.array([r[0] for r in hr])
            y = np.array([p10(r[2]) for r in hr])
            cols = [np.log([r[3] for r in hr])] + [(kinds == k).astype(float) for k in ("b", "h5", "h10")]
            top = max(r[4] for r in hr)
            low = np.array([1.0 if r[4] <= top - 3 else 0.0 for r in hr])
            r0, _ = fit(y, cols)
            if 0 < low.sum() < len(low):
                r1, b1 = fit(y, cols + [low])
                heap = f"{100 * low.mean():.0f}% | {100 * (np.exp(b1[-1]) - 1):+.1f}% | {100 * r0.std():.2f} -> {100 * r1.std():.2f}"
            else:
                heap = f"{100 * low.mean():.0f}% | - | {100 * r0.std():.2f}"
        if heap == "-":
            heap = "- | - | -"
        probe = "-"
        if all(r[6] is not None for r in base):
            pres, _ = fit(np.array([p10(r[2]) for r in base]), [np.log([r[6] for r in base])])
            p50r, _ = fit(np.array([np.log(np.median(r[2])) for r in base]), [np.log([r[6] for r in base])])
            c50r, _ = fit(np.array([np.log(np.median(r[2])) for r in base]), [cov])
            probe = f"{100 * pres.std():.2f} | {100 * c50r.std():.2f} -> {100 * p50r.std():.2f}"
        else:
            probe = "- | -"
        name = os.path.basename(rec.rstrip("/"))
        rows.append(f"| {name} | {len(base)} | {100 * res.std():.2f} | {np.corrcoef(odd, even)[0, 1]:.2f} | {ab:+.2f} | "
                    + (f"{100 * roll.std():.2f} / {100 * res.std() / 4:.2f}" if roll.size else "-") + f" | {heap} | {probe} |")
    print(f"#### {a.scenario}: the noise left after the untraced-launch covariate (bench/gate/state_eval.py)\n")
    print("| recording | base runs | resid % | halves | a~b | roll16 / white % | low heap: share | slower by | resid % without -> with "
          "| resid % along the probe | p50: resid % calibration -> probe |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---|---:|---|")
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
