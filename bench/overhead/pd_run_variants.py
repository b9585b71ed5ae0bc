#!/usr/bin/env python3
"""pd_run_variants.py: the table of bench/overhead/pd_run_variants.sh's sweep.

For each variant (OUT/planted.json: its planted cause, as record_torch_traces.py defines it)
and mode (emit: under emit_nvtx, every op an NVTX range; plain: only the step ranges), from
pd_run's metrics JSON OUT/json/V_MODE.json: whether the planted cause is named (it is the
verdict, or the fix that models it, bench/diagnosis/truth_table.py's TORCH, saves at least
5% of the step: a finding), the verdict, and every fix saving 5% or more. A run with no
metrics JSON (or one without a verdict) reads "no metrics". Markdown on stdout; exit 2
with one line when OUT has no planted.json or no metrics.

With --truth TRUTH (a truth.json of tests/torch/record_torch_traces.py, best recorded on
the same machine), a second table sets each variant's measured unprofiled saving of its fix
(with its 95% interval) beside the saving pd_run's replay predicts for that fix, with and
without emit_nvtx, and the error in points; "within" as in docs/diagnosis.md (5 points, or
inside the interval). A truth.json that is not an object of variants, or whose saving is
not a number between -1 and 1, is refused (exit 2, one line).

usage: python3 bench/overhead/pd_run_variants.py OUT [--model cnn|lm] [--truth TRUTH]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "diagnosis"))
from truth_table import SYNCED_MARK, TORCH, row, synced_steps  # noqa: E402 (TORCH: planted cause -> its fix)
from truth_table import predicted as saving_of  # noqa: E402 (a metrics JSON's saving of one fix)

FINDING = 0.05  # a fix saving at least this share of the step is a finding


def fail(why):
    print("pd_run_variants: " + why, file=sys.stderr)
    sys.exit(2)


def metrics_doc(path):
    """One run's metrics JSON, or None where it is missing, cut or has no verdict."""
    try:
        doc = json.load(open(path))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("verdict"), dict) else None


def cell(path, planted):
    """(named, text) of one run's metrics JSON."""
    doc = metrics_doc(path)
    if doc is None:
        return None, "no metrics"
    v = doc["verdict"]
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


def predicted(path, fix):
    """The replay's predicted saving of transformation fix in one run's metrics JSON
    (truth_table.py's reading), or None where absent or not a share between -1 and 1."""
    doc = metrics_doc(path)
    f = saving_of(doc, fix) if doc is not None else None
    return f if isinstance(f, (int, float)) and not isinstance(f, bool) and -1.0 <= f <= 1.0 else None


def share(entry, key):
    """A saving share of a truth.json entry, range-checked; None where absent."""
    x = entry.get(key)
    if x is None:
        return None
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not -1.0 <= x <= 1.0:
        fail("truth: %s is %r, not a share between -1 and 1" % (key, x))
    return float(x)


def load_truth(path):
    """A truth.json of record_torch_traces.py, every saving share range-checked before
    anything is printed."""
    try:
        truth = json.load(open(path))
    except (OSError, ValueError) as e:
        fail("cannot read the truth %s: %s" % (path, e))
    variants = truth.get("variants") if isinstance(truth, dict) else None
    if not isinstance(variants, dict) or not all(isinstance(e, dict) for e in variants.values()):
        fail("%s has no object of variants" % path)
    for e in variants.values():
        for key in ("saved_share", "saved_lo", "saved_hi"):
            share(e, key)
    return truth


def truth_table(jdir, planted, truth, path):
    variants = truth["variants"]
    print("\nAgainst the measured unprofiled saving (%s, %s, boot %s):\n" % (
        os.path.basename(path), truth.get("device", "?"), truth.get("boot_id", "?")))
    print("| variant | transformation | measured saving (95% interval) | predicted with emit_nvtx (error, within) "
          "| predicted without (error, within) |")
    print("|---|---|---|---|---|")
    for v in sorted(variants):
        e = variants[v]
        fix = TORCH.get(planted.get(v, e.get("planted")))
        if fix is None or not (os.path.exists(os.path.join(jdir, v + "_emit.json")) or
                               os.path.exists(os.path.join(jdir, v + "_plain.json"))):
            continue
        meas, lo, hi = share(e, "saved_share"), share(e, "saved_lo"), share(e, "saved_hi")
        if meas is None:
            continue
        if lo is None or hi is None:
            lo = hi = None  # an interval needs both ends
        iv = "" if lo is None else " (%.1f%% .. %.1f%%)" % (100 * lo, 100 * hi)
        if synced_steps(e):
            iv += SYNCED_MARK
        cells = []
        for mode in ("emit", "plain"):
            p = predicted(os.path.join(jdir, "%s_%s.json" % (v, mode)), fix)
            if p is None:
                cells.append("-")
                continue
            r = row(v, fix, meas, lo, hi, p, None, None)  # truth_table's error and "within"
            cells.append("%.1f%% (%+.1f, %s)" % (100 * p, 100 * r["error"], "yes" if r["within"] else "no"))
        print("| %s | %s | %.1f%%%s | %s | %s |" % (v, fix, 100 * meas, iv, cells[0], cells[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--truth", default="", help="a truth.json of record_torch_traces.py to set beside the predictions")
    a = ap.parse_args()
    truth = load_truth(a.truth) if a.truth else None
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
    if truth is not None:
        truth_table(jdir, planted, truth, a.truth)


if __name__ == "__main__":
    main()
