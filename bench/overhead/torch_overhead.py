"""torch_overhead.py: what torch.profiler costs the PyTorch version of the training step,
measured the way profiler_overhead.sh measures profiler_demo, for the side-by-side table.

The step is the one tests/torch/record_torch_traces.py records (SimpleCNN, AdamW,
GradScaler, AMP, batch 64, pre-made batches): variant plain_b64 for the `clean` scenario
and tiny_ops_b64 (300 small EMA ops per step) for `tiny_ops`. The step definition is
imported from that script, not copied.

One measurement is one fresh Python process (`--one VARIANT on|off|on_default`): 20
warmup steps, then 52 steps each timed whole (wall clock between two device
synchronizations, as profiler_demo times its steps), under torch.profiler with
schedule(wait=1, warmup=1, active=50) when profiled. A fresh process per run because
torch.profiler leaves CUPTI attached after its first cycle, which would charge later
unprofiled steps in the same process. The p50 and mean of the 50 active steps' times are
printed. `on` profiles with the options profiler_demo records by default (CPU and CUDA
activities, record_shapes, profile_memory); `on_default` with torch.profiler's defaults
(no shapes, no memory).

The driver mode (`--runs N`) runs N pairs per variant in ABBA order (odd pairs start with
the profiled run) and prints, per scenario, one tab-separated line:
  scenario runs p50_on_ms p50_off_ms overhead_pct min_pct max_pct overhead_default_pct
overhead: median over pairs of p50(profiled) / p50(unprofiled) - 1, in percent.

usage: python3 bench/overhead/torch_overhead.py --runs 3 [--scenarios clean,tiny_ops]
       python3 bench/overhead/torch_overhead.py --one plain_b64 on
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO_VARIANT = {"clean": "plain_b64", "tiny_ops": "tiny_ops_b64"}


def one(variant, mode):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
    from record_torch_traces import make_step  # the one definition of the PyTorch step
    from torch.profiler import ProfilerActivity, profile, schedule

    step, _ = make_step(variant)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    times = []

    def timed():
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)

    if mode == "off":
        for _ in range(52):
            timed()
    else:
        full = mode == "on"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=1, warmup=1, active=50, repeat=1),
                     on_trace_ready=lambda p: None,
                     record_shapes=full, profile_memory=full) as prof:
            for _ in range(52):
                timed()
                prof.step()
    active = times[2:]
    print("%.9f\t%.9f" % (statistics.median(active), statistics.mean(active)))


def run_fresh(script, args, who):
    """The stdout of `python3 SCRIPT --one ARGS...` run in a fresh process (also
    torch_event_cost.py's); exits with the tail of its stderr when it fails."""
    r = subprocess.run([sys.executable, os.path.abspath(script), "--one", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("%s: %s failed (exit %d): %s" % (who, " ".join(args), r.returncode, r.stderr.strip()[-2000:]))
    return r.stdout


def measure(variant, mode):
    p50, _ = run_fresh(__file__, [variant, mode], "torch_overhead").strip().split("\t")
    return float(p50)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, metavar=("VARIANT", "MODE"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenarios", default="clean,tiny_ops")
    a = ap.parse_args()
    if a.one:
        variant, mode = a.one
        if mode not in ("on", "off", "on_default"):
            sys.exit("torch_overhead: MODE must be on, off or on_default, got '%s'" % mode)
        one(variant, mode)
        return
    if not 1 <= a.runs <= 100:
        sys.exit("torch_overhead: --runs must be 1 to 100, got %d" % a.runs)
    for scen in a.scenarios.split(","):
        if scen not in SCENARIO_VARIANT:
            sys.exit("torch_overhead: unknown scenario '%s' (known: %s)" %
                     (scen, ", ".join(SCENARIO_VARIANT)))
        v = SCENARIO_VARIANT[scen]
        on, off, ratios, ratios_default = [], [], [], []
        for i in range(1, a.runs + 1):
            order = ["on", "off", "on_default"] if i % 2 else ["off", "on_default", "on"]
            got = {m: measure(v, m) for m in order}
            on.append(got["on"])
            off.append(got["off"])
            ratios.append((got["on"] / got["off"] - 1) * 100)
            ratios_default.append((got["on_default"] / got["off"] - 1) * 100)
            print("torch_overhead: %s pair %d/%d: p50 %.3f ms profiled, %.3f ms unprofiled (%+.2f%%)"
                  % (scen, i, a.runs, got["on"] * 1e3, got["off"] * 1e3, ratios[-1]), file=sys.stderr)
        print("\t".join([scen, str(a.runs), "%.4f" % (statistics.median(on) * 1e3),
                         "%.4f" % (statistics.median(off) * 1e3), "%.3f" % statistics.median(ratios),
                         "%.3f" % min(ratios), "%.3f" % max(ratios),
                         "%.3f" % statistics.median(ratios_default)]))


if __name__ == "__main__":
    main()
