#!/usr/bin/env python3
"""without_ops.py ANALYZER CAUSE TRACE...: what the verdict sees in a trace without ops.

For each torch.profiler TRACE (plain or gzipped), writes a copy with every op and
annotation taken out but the step markers (cpu_op, python_function, fwdbwd, instant
events, user_annotation other than ProfilerStep#N): the trace pd_run records of a program
that opens no op ranges. Runs ANALYZER (profile_analyze) on both and prints, per trace, the
predicted saving of CAUSE (a verdict.savings cause, e.g. blocking_reads) and the verdict,
with ops and without. The copies go to a temporary folder, removed after. Exit 0; 2 on bad
usage or a trace that does not read.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

DROP = {"cpu_op", "python_function", "fwdbwd", "cpu_instant_event"}


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def strip(trace):
    keep = []
    for e in trace.get("traceEvents", []):
        cat = e.get("cat")
        if cat in DROP:
            continue
        if cat == "user_annotation" and not str(e.get("name", "")).startswith("ProfilerStep#"):
            continue
        keep.append(e)
    trace["traceEvents"] = keep
    return trace


def analyze(analyzer, path, out, cause):
    r = subprocess.run([analyzer, path, "--json", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"without_ops: {analyzer} failed on {path}: {r.stderr.strip().splitlines()[-1:]}")
    v = load(out)["verdict"]
    frac = next((s.get("est_saving_fraction") for s in v.get("savings", []) if s.get("cause") == cause), None)
    return (f"{100 * frac:.1f}%" if isinstance(frac, (int, float)) else "-"), v.get("bottleneck", "?")


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: without_ops.py ANALYZER CAUSE TRACE...")
    analyzer, cause, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
    print(f"| trace | {cause} with ops | verdict | without ops | verdict |")
    print("|---|---:|---|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(traces):
            try:
                t = strip(load(path))
            except (OSError, ValueError) as e:
                print(f"without_ops: {path}: {e}", file=sys.stderr)
                sys.exit(2)
            bare = os.path.join(tmp, f"{i}.json")
            with open(bare, "w") as f:
                json.dump(t, f)
            w, wv = analyze(analyzer, path, os.path.join(tmp, f"{i}.with.json"), cause)
            n, nv = analyze(analyzer, bare, os.path.join(tmp, f"{i}.without.json"), cause)
            print(f"| {path} | {w} | `{wv}` | {n} | `{nv}` |")


if __name__ == "__main__":
    main()
