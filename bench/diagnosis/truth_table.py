#!/usr/bin/env python3
"""truth_table.py: the truth table of docs/diagnosis.md, from the raw runs that
scenario_truth.sh keeps (and, with --torch, the torch.profiler fixtures).

For each scenario of OUT_DIR: the measured saving of its fix knob is 1 - wall(fix on) /
wall(fix off), where wall is a run's mean iteration (step_periods_s: from one step's data
wait to the next's, as the replay's step markers cut it; runs that predate it give the mean
step time + data wait), and each side is the median over its runs; the 95% interval comes from a bootstrap over runs (2000
resamples of the runs of each side, seeded, so the table is reproducible). The predicted
saving is the replay's saving of the fix's transformation over its predicted unprofiled
step, from the profiled run's trace as --analyzer reads it (without --analyzer: from the
run's own metrics JSON, the model it was recorded with). The error is predicted - measured in points;
"within" says whether it is within 5 points or inside the interval. The unprofiled step
is given three ways: measured (the median over the unprofiled runs), the same process (the
profiled run's own unprofiled warmup iterations: free of the 15-25% that separates one
process from another on these hosts) and predicted (the replay without the profiler).

With --torch ANALYZER, each variant of tests/fixtures/torch/truth.json with a planted
problem is analyzed by ANALYZER (profile_analyze --json) and compared with its measured
unprofiled saving, with the 95% interval over its interleaved rounds where truth.json has
one (record_torch_traces.py; recordings made before every planted variant was measured in
rounds have one measurement of 40 steps each way for the classic variants: no interval).
A measured saving marked "[sync each step]" was timed with a sync after every step (the
classic variants, before 2026-11-29 late evening), where the profiled program runs its
steps back to back.

usage: python3 bench/diagnosis/truth_table.py OUT_DIR [--analyzer ANALYZER] [--torch ANALYZER] [--json PATH]
"""
import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

# scenario -> (fix knob, the replay's transformation that models it)
SCENARIOS = {
    "dataloader": ("--num_workers 4", "loader_2x"),  # twice the 2 workers of the scenario
    "sync": ("--no_sync", "blocking_reads"),
    "tiny_ops": ("--tiny_ops_mode graph", "tiny_ops"),
    "memory_churn": ("--allocator pool", "allocation"),
}
# torch variant's planted cause -> transformation
TORCH = {"dataloader": "data_wait", "sync": "blocking_reads", "launch_overhead": "tiny_ops",
         "allocator_churn": "allocation", "host_code": "host_code", "pageable_copy": "pageable_copy",
         "cuda_graph": "launch_overhead"}  # graphed_b64: the step captured in a CUDA graph


def wall_s(path):
    d = json.load(open(path))
    # The whole iteration (what the replay's ProfilerStep markers cut): written since the
    # runs record it; older runs give step + data wait, which leaves out the work between
    # steps (the batch's prefetch, the profiler's step).
    periods = [p for p in (d.get("step_periods_s") or []) if p is not None]
    if periods:
        return statistics.mean(periods)
    steps = d.get("step_times_s") or []
    waits = d.get("dataloader_wait_s") or []
    if steps:
        w = [s + (waits[i] if i < len(waits) and waits[i] is not None else 0.0) for i, s in enumerate(steps)]
        return sum(w) / len(w)
    m = d["metrics"]
    return m["avg_step_time_s"] + (m.get("avg_dataloader_wait_s") or 0.0)


def warmup_ms(doc):
    """The profiled process's own unprofiled iteration: the mean of its warmup periods
    (written since the runs record them), in ms; None before."""
    w = [p for p in (doc.get("warmup_periods_s") or []) if p is not None]
    return statistics.mean(w) * 1e3 if w else None


def saving(off, on):
    return 1.0 - statistics.median(on) / statistics.median(off)


def interval(off, on, n=2000, seed=1):
    rng = random.Random(seed)
    xs = sorted(saving([rng.choice(off) for _ in off], [rng.choice(on) for _ in on]) for _ in range(n))
    return xs[int(0.025 * n)], xs[int(0.975 * n) - 1]


def predicted(doc, fix):
    for s in doc.get("verdict", {}).get("savings", []):
        if s.get("cause") == fix:
            return s.get("est_saving_fraction")
    return None


def row(case, transform, meas, lo, hi, pred, device, verdict):
    if pred is None or meas is None:
        return dict(case=case, transformation=transform, measured=meas, lo=lo, hi=hi, predicted=pred, error=None,
                    within=False, device=device, verdict=verdict)
    err = pred - meas
    inside = lo is not None and lo <= pred <= hi
    return dict(case=case, transformation=transform, measured=meas, lo=lo, hi=hi, predicted=pred, error=err,
                within=abs(err) <= 0.05 or inside, device=device, verdict=verdict)


def reanalyzed(analyzer, d, doc, tmp):
    """The profiled run's verdict recomputed by ANALYZER from its trace (the trace carries
    the run's calibration), so a model change shows in every row; the run's own metrics
    JSON where no analyzer is given or the run kept no trace."""
    traces = sorted(glob.glob(os.path.join(d, "trace", "*.json*")))
    if analyzer is None or not traces:
        return doc
    out = os.path.join(tmp, os.path.basename(d) + ".json")
    subprocess.run([analyzer, traces[-1], "--json", out], check=True, stdout=subprocess.DEVNULL)
    return json.load(open(out))


def ours(out, analyzer=None):
    with tempfile.TemporaryDirectory() as tmp:
        return ours_in(out, analyzer, tmp)


def ours_in(out, analyzer, tmp):
    meta = json.load(open(os.path.join(out, "meta.json")))
    dev = "%s (boot %s)" % (meta.get("device") or "?", meta.get("boot_id") or "?")
    rows = []
    for s, (knob, fix) in SCENARIOS.items():
        d = os.path.join(out, s)
        prof = os.path.join(d, "profiled.json")
        if not os.path.exists(prof):
            continue
        run = json.load(open(prof))
        doc = reanalyzed(analyzer, d, run, tmp)
        off = [wall_s(p) for p in sorted(glob.glob(os.path.join(d, "off.*.json")))]
        on = [wall_s(p) for p in sorted(glob.glob(os.path.join(d, "on.*.json")))]
        ons = sorted(glob.glob(os.path.join(d, "on.*.json")))
        if s == "dataloader" and ons:
            # recordings made before the knob was --num_workers 4 (2 -> 8 workers): no
            # transformation models that fix, so no prediction is set against it
            w = json.load(open(ons[0])).get("config", {}).get("num_workers")
            if w != 4:
                knob, fix = "--num_workers %s" % w, "(none models it)"
        meas = saving(off, on) if off and on else None
        lo, hi = interval(off, on) if len(off) > 1 and len(on) > 1 else (None, None)
        r = row("%s (%s)" % (s, knob), fix, meas, lo, hi, predicted(doc, fix), dev, doc["verdict"]["bottleneck"])
        rp = doc["verdict"].get("replay", {})
        r["predicted_unprofiled_ms"] = (rp.get("predicted_unprofiled_step_us") or 0) / 1e3
        r["measured_unprofiled_ms"] = statistics.median(off) * 1e3 if off else None
        r["same_process_unprofiled_ms"] = warmup_ms(run)
        rows.append(r)
    clean = os.path.join(out, "clean")
    if os.path.exists(os.path.join(clean, "profiled.json")):
        run = json.load(open(os.path.join(clean, "profiled.json")))
        doc = reanalyzed(analyzer, clean, run, tmp)
        off = [wall_s(p) for p in sorted(glob.glob(os.path.join(clean, "off.*.json")))]
        r = row("clean", "-", None, None, None, None, dev, doc["verdict"]["bottleneck"])
        r["predicted_unprofiled_ms"] = (doc["verdict"].get("replay", {}).get("predicted_unprofiled_step_us") or 0) / 1e3
        r["measured_unprofiled_ms"] = statistics.median(off) * 1e3 if off else None
        r["same_process_unprofiled_ms"] = warmup_ms(run)
        rows.append(r)
    return rows


def synced_steps(entry):
    """Whether a truth.json entry's saving was timed with a sync after every step (the
    classic variants of recordings before 2026-11-29, late evening: "median step", or no
    "measure" at all), not the back-to-back steps the trace shows."""
    return not entry.get("measure", "").endswith("mean wall per step")


SYNCED_MARK = " [sync each step]"


def torch_rows(analyzer, root, truth_path=None):
    truth_path = truth_path or os.path.join(root, "tests/fixtures/torch/truth.json")
    truth = json.load(open(truth_path))
    tdir = os.path.dirname(os.path.abspath(truth_path))
    dev = "%s (boot %s)" % (truth.get("device", "?"), truth.get("boot_id", "?"))
    # the program trained (record_torch_traces.py --model): SimpleCNN unless it says
    prefix = "torch " if truth.get("model", "cnn") == "cnn" else "torch %s " % truth["model"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, v in truth["variants"].items():
            fix = TORCH.get(v.get("planted"))
            if fix is None:
                continue
            out = os.path.join(tmp, name + ".json")
            subprocess.run([analyzer, os.path.join(tdir, v["trace"]), "--json", out],
                           check=True, stdout=subprocess.DEVNULL)
            doc = json.load(open(out))
            vdev = "%s (boot %s)" % (v["device"], v.get("boot_id", "?")) if "device" in v else dev
            r = row(prefix + name, fix, v["saved_share"], v.get("saved_lo"), v.get("saved_hi"),
                    predicted(doc, fix), vdev, doc["verdict"]["bottleneck"])
            r["predicted_unprofiled_ms"] = (doc["verdict"].get("replay", {}).get("predicted_unprofiled_step_us") or 0) / 1e3
            r["measured_unprofiled_ms"] = v["step_ms"]
            # the traced process's own unprofiled warmup steps (recordings since 2026-11-29, night)
            r["same_process_unprofiled_ms"] = v.get("same_process_unprofiled_ms")
            r["synced_steps"] = synced_steps(v)
            rows.append(r)
    return rows


def pct(x):
    return "-" if x is None else "%.1f%%" % (100 * x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", help="scenario_truth.sh's OUT_DIR")
    ap.add_argument("--torch", metavar="ANALYZER", help="profile_analyze, to add the torch fixtures")
    ap.add_argument("--analyzer", metavar="ANALYZER",
                    help="profile_analyze: recompute OUT_DIR's verdicts from its traces (default: the "
                         "runs' own metrics JSON, the model they were recorded with)")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--torch-truth", metavar="TRUTH_JSON",
                    help="with --torch: a truth.json of record_torch_traces.py with its traces beside it "
                         "(default: tests/fixtures/torch/truth.json)")
    a = ap.parse_args()
    if a.out is None and a.torch is None:
        ap.error("give OUT_DIR, --torch ANALYZER, or both")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rows = (ours(a.out, a.analyzer) if a.out else []) + (torch_rows(a.torch, root, a.torch_truth) if a.torch else [])
    print("| case | transformation | measured saving (95% interval) | predicted saving | error (points) | within | "
          "verdict | unprofiled step measured / same process / predicted | device |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        iv = "" if r["lo"] is None else " (%s .. %s)" % (pct(r["lo"]), pct(r["hi"]))
        if r.get("synced_steps"):
            iv += SYNCED_MARK
        err = "-" if r["error"] is None else "%+.1f" % (100 * r["error"])
        st = "-"
        if r.get("measured_unprofiled_ms"):
            sp = r.get("same_process_unprofiled_ms")
            st = "%.3f / %s / %.3f ms" % (r["measured_unprofiled_ms"], "-" if sp is None else "%.3f" % sp,
                                          r.get("predicted_unprofiled_ms") or 0)
        print("| %s | %s | %s%s | %s | %s | %s | `%s` | %s | %s |" % (
            r["case"], r["transformation"], pct(r["measured"]), iv, pct(r["predicted"]), err,
            "-" if r["error"] is None else ("yes" if r["within"] else "no"), r["verdict"], st, r["device"]))
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
