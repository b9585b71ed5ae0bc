#!/usr/bin/env python3
"""pd_ab_spread.py RUNS...: how much one program's processes differ under pd_run, and which
of pd_run's own figures follows that difference (a covariate for scripts/pd_ab.sh).

RUNS: pd_run metrics JSONs, or folders holding them (scripts/pd_ab.sh's OUT/runs: every
*.json but its warm-up runs, warm.*.json). Give only runs of one unchanged program: the
spread is read as noise. E.g., from the kept H200 run of pd_ab.sh (docs/gate.md,
"Measured (2026-11-29, evening)"):

    tar -xzf bench/gate/data/pd_ab/h200-682a107b.tar.gz -C /tmp
    bench/gate/pd_ab_spread.py /tmp/ab_same/runs /tmp/ab_spin/runs/base.*.json

Per run: the p10 and p50 of its untraced steps (warmup_step_times_s, the steps pd_run's
schedule left untraced, what pd_ab.sh judges). Prints the runs' count, the coefficient of
variation of both (population standard deviation over the mean), then, for the profiled p50
step, the medians of pd_run --probe's series where the runs carry them, and each number in
profiler_cost.calibration, its Pearson correlation with the runs' untraced p10 and p50 and
its range. Exit 2 with one line on bad input: no runs, a file that
is not a metrics JSON with at least 10 untraced steps, a value out of range.
"""
import glob
import json
import math
import os
import statistics as st
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from covariate_eval import p10  # noqa: E402  (the one p10 of the bench scripts)

MIN_STEPS = 10
MAX_STEP_S = 3600.0


def die(msg):
    print(f"pd_ab_spread: {msg}", file=sys.stderr)
    sys.exit(2)


def files(args):
    out = []
    for a in args:
        if os.path.isdir(a):
            found = sorted(f for f in glob.glob(os.path.join(a, "*.json"))
                           if not os.path.basename(f).startswith("warm."))
            if not found:
                die(f"{a}: no metrics JSON in it")
            out += found
        elif os.path.isfile(a):
            out.append(a)
        else:
            die(f"{a}: no such file or folder")
    return out


def finite(x, lo, hi):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi


def load(path):
    try:
        with open(path) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: cannot read a JSON: {e}")
    if not isinstance(m, dict):
        die(f"{path}: not a metrics JSON (not an object)")
    u = m.get("warmup_step_times_s")
    if not isinstance(u, list) or len(u) < MIN_STEPS:
        die(f"{path}: fewer than {MIN_STEPS} untraced steps (warmup_step_times_s): not a pd_run run with an "
            "untraced part of its schedule")
    if not all(finite(x, 1e-9, MAX_STEP_S) for x in u):
        die(f"{path}: warmup_step_times_s holds a value that is not a step time (0 < s <= {MAX_STEP_S:g})")
    row = {"untraced_p10": p10(u), "untraced_p50": st.median(u)}
    prof = (m.get("metrics") or {}).get("p50_step_time_s")
    if prof is not None:
        if not finite(prof, 1e-9, MAX_STEP_S):
            die(f"{path}: metrics.p50_step_time_s out of range: {prof!r}")
        row["profiled p50_step_time_s"] = prof
    # pd_run --probe's series (one value per untraced step): its medians, as profile_compare
    # takes the covariate
    for key in ("warmup_probe_launch_ns", "warmup_probe_compute_ns"):
        v = m.get(key)
        if v is None:
            continue
        if not isinstance(v, list) or len(v) != len(u) or not all(finite(x, 0.0, 1e12) for x in v):
            die(f"{path}: {key} is not one number per untraced step")
        row[f"median {key}"] = st.median(v)
    cal = ((m.get("profiler_cost") or {}).get("calibration")) or {}
    if not isinstance(cal, dict):
        die(f"{path}: profiler_cost.calibration is not an object")
    for k, v in cal.items():
        if v is None:
            continue
        if not finite(v, 0.0, 1e12):
            die(f"{path}: profiler_cost.calibration.{k} out of range: {v!r}")
        row[k] = float(v)
    return row


def corr(xs, ys):
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return float("nan")
    return st.correlation(xs, ys)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[0] if len(argv) < 2 else __doc__)
        return 2 if len(argv) < 2 else 0
    rows = [load(f) for f in files(argv[1:])]
    if len(rows) < 3:
        die(f"{len(rows)} runs: at least 3 are needed for a spread and a correlation")
    y10 = [r["untraced_p10"] for r in rows]
    y50 = [r["untraced_p50"] for r in rows]
    print(f"runs: {len(rows)}")
    for name, y in (("untraced p10", y10), ("untraced p50", y50)):
        print(f"{name}: mean {st.fmean(y) * 1e6:.1f} us, range {min(y) * 1e6:.1f}..{max(y) * 1e6:.1f} us, "
              f"coefficient of variation {st.pstdev(y) / st.fmean(y):.3f}")
    keys = sorted({k for r in rows for k in r} - {"untraced_p10", "untraced_p50"})
    print("\n| figure | runs | r with untraced p10 | r with untraced p50 | range |")
    print("|---|---:|---:|---:|---|")
    for k in keys:
        have = [r for r in rows if k in r]
        if len(have) < 3:
            continue
        x = [r[k] for r in have]
        a = corr(x, [r["untraced_p10"] for r in have])
        b = corr(x, [r["untraced_p50"] for r in have])
        scale, unit = (1e6, " us") if k.endswith("_s") else (1.0, "")
        print(f"| {k} | {len(have)} | {a:+.2f} | {b:+.2f} | {min(x) * scale:.0f}..{max(x) * scale:.0f}{unit} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
