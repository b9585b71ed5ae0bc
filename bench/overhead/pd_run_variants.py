#!/usr/bin/env python3
"""pd_run_variants.py: the table of bench/overhead/pd_run_variants.sh's sweep.

For each variant (OUT/planted.json: its planted cause, as record_torch_traces.py defines it)
and mode (emit: under emit_nvtx, every op an NVTX range; plain: only the step ranges), from
pd_run's metrics JSON OUT/json/V_MODE.json: whether the planted cause is named (it is the
verdict, or the fix that models it, bench/diagnosis/truth_table.py's TORCH, saves at least
5% of the step: a finding), the verdict, and every fix saving 5% or more. A run with no
metrics JSON (or one without a verdict) reads "no metrics". Markdown on stdout; exit 2
with one line when OUT has no planted.json or no metrics.

usage: python3 bench/overhead/pd_run_variants.py OUT [--model cnn|lm]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "diagnosis"))
from truth_table import TORCH  # noqa: E402  the planted cause -> the fix's transformation

FINDING = 0.05  # a fix saving at least this share of the step is a finding


def fail(why):
    print("pd_run_variants: " + why, file=sys.stderr)
    sys.exit(2)


def cell(path, planted):
    """(named, text) of one run's metrics JSON."""
    try:
        v = json.load(open(path))["verdict"]
    except (OSError, ValueError, KeyError):
        return None, "no metrics"
    fixes = [(s["cause"], s["est_saving_fraction"]) for s in v.get("savings", [])
             if s.get("cause") != "combined" and isinstance(s.get("est_saving_fraction"), (int, float))
             and s["est_saving_fraction"] >= FINDING]
    fixes.sort(key=lambda f: -f[1])
    fix = TORCH.get(planted)
    named = v.get("bottleneck") == planted or any(c == fix for c, _ in fixes)
    text = "`%s`" % v.get("bottleneck")
    if fixes:
        text += "; " + ", ".join("%s %.1f%%" % (c, 100 * f) for c, f in fixes)
    return named, ("named: " if named else "**not named**: ") + text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--model", default="cnn")
    a = ap.parse_args()
    try:
        planted = json.load(open(os.path.join(a.out, "planted.json")))
    except (OSError, ValueError) as e:
        fail("no planted.json in %s: %s" % (a.out, e))
    if not isinstance(planted, dict):
        fail("%s/planted.json is not an object of variant: planted cause" % a.out)
    jdir = os.path.join(a.out, "json")
    variants = sorted({f.rsplit("_", 1)[0] for f in os.listdir(jdir) if f.endswith(".json")}) if os.path.isdir(jdir) else []
    if not variants:
        fail("no metrics in %s" % jdir)
    print("model `%s`\n" % a.model)
    print("| variant (planted cause) | with emit_nvtx: verdict; fixes saving 5% or more | without: verdict; fixes saving 5% or more |")
    print("|---|---|---|")
    count = {"emit": [0, 0], "plain": [0, 0]}
    for v in variants:
        p = planted.get(v, "none")
        cells = []
        for mode in ("emit", "plain"):
            named, text = cell(os.path.join(jdir, "%s_%s.json" % (v, mode)), p)
            if named is not None:
                count[mode][1] += 1
                count[mode][0] += named
            cells.append(text)
        print("| %s (`%s`) | %s | %s |" % (v, p, cells[0], cells[1]))
    print("\nNamed: with emit_nvtx %d of %d, without %d of %d." % (count["emit"][0], count["emit"][1],
                                                                    count["plain"][0], count["plain"][1]))


if __name__ == "__main__":
    main()
