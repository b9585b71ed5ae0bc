#!/usr/bin/env python3
"""fixed_traces.py: where a torch truth row's error lives, read from the fixed program's own
trace (record_torch_traces.py keeps it without --scratch: truth.json "fixed_trace").

A row's predicted saving is 1 - F_planted / P, where P is the replay's unprofiled step of
the planted trace and F_planted the same with the fix's transformation. The fixed program
was traced too, in its own process, and its replay gives its own unprofiled step F_own.
So the row's error splits in two:

  F_planted / F_own   the transformation: what the fix leaves of the planted step against
                      what the fixed program's trace shows it doing (1.00: the
                      transformation removes what the fix removes);
  F_own / F_measured  the profiler's cost model on the fixed program: its trace's
                      unprofiled replay against its measured unprofiled step.

Both traces come from separate processes, which on these hosts differ by 15-25% in host
speed, so one row says little; the medians over a class's recordings are the reading.

usage: python3 bench/diagnosis/fixed_traces.py ANALYZER RECORDING [RECORDING ...]
RECORDING: a record_torch_traces.py output folder (truth.json and traces), or a
bench/diagnosis/data/torch/*.tar.gz of one (top folder tt/).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "gate")]
# the planted cause of truth.json -> the transformation that models its fix, and a
# fix's predicted saving in an analysis
from truth_table import TORCH, predicted  # noqa: E402
# the one reader of a recording's .tar.gz (bench/gate/ab_eval.py)
from ab_eval import unpack_recording  # noqa: E402


def fail(msg, code=2):
    print("fixed_traces: " + msg, file=sys.stderr)
    sys.exit(code)


def analyze(analyzer, trace, tmp):
    out = os.path.join(tmp, "a.json")
    r = subprocess.run([analyzer, trace, "--json", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("%s failed on %s: %s" % (analyzer, trace, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode), 1)
    return json.load(open(out))


def unprofiled_ms(doc):
    v = doc.get("verdict", {}).get("replay", {}).get("predicted_unprofiled_step_us")
    return v / 1e3 if isinstance(v, (int, float)) and v > 0 else None


def saving(doc, fix):
    """The fix's predicted saving as truth_table.py reads it, None where out of range."""
    v = predicted(doc, fix)
    return v if isinstance(v, (int, float)) and -1 < v < 1 else None


def positive(v):
    return isinstance(v, (int, float)) and 0 < v < 1e6


def rows_of(analyzer, folder, name, tmp):
    path = os.path.join(folder, "truth.json")
    try:
        truth = json.load(open(path))
        variants = truth["variants"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail("%s: not a record_torch_traces.py truth.json (%s)" % (path, e))
    model = "TinyLM" if truth.get("model") == "lm" else "SimpleCNN"
    out = []
    for vname, v in sorted(variants.items()):
        fix = TORCH.get(v.get("planted"))
        ft = v.get("fixed_trace")
        if fix is None or not ft or not os.path.exists(os.path.join(folder, ft)):
            continue
        meas, pm = v.get("saved_share"), v.get("step_ms")
        if not (isinstance(meas, (int, float)) and -1 < meas < 1 and positive(pm)):
            fail("%s: %s: saved_share or step_ms out of range" % (path, vname))
        fm = v.get("fixed_step_ms")
        fm = fm if positive(fm) else pm * (1 - meas)
        p = analyze(analyzer, os.path.join(folder, v["trace"]), tmp)
        f = analyze(analyzer, os.path.join(folder, ft), tmp)
        s, ph, fown = saving(p, fix), unprofiled_ms(p), unprofiled_ms(f)
        if s is None or ph is None or fown is None:
            continue
        fpl = ph * (1 - s)
        out.append(dict(recording=name, cls="%s %s" % (model, vname), fix=fix, measured=meas, predicted=s,
                        f_measured=fm, f_planted=fpl, f_own=fown))
    return out


def main():
    if len(sys.argv) < 3:
        fail("usage: fixed_traces.py ANALYZER RECORDING [RECORDING ...]")
    analyzer = sys.argv[1]
    if not (os.path.isfile(analyzer) and os.access(analyzer, os.X_OK)):
        fail("no program at %s" % analyzer)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rec in sys.argv[2:]:
            name = os.path.basename(rec.rstrip("/"))
            if rec.endswith(".tar.gz") and os.path.isfile(rec):
                name = name[:-len(".tar.gz")]
                try:
                    folder = unpack_recording(rec, fail, "fixed_traces.")
                except (OSError, tarfile.TarError) as e:
                    fail("%s: cannot read (%s)" % (rec, e))
                try:
                    rows += rows_of(analyzer, folder, name, tmp)
                finally:
                    shutil.rmtree(os.path.dirname(folder), ignore_errors=True)
            elif os.path.isdir(rec):
                rows += rows_of(analyzer, rec, name, tmp)
            else:
                fail("%s: neither a folder nor a .tar.gz" % rec)
    if not rows:
        fail("no planted variant with its fixed program's trace in the recordings given", 1)
    print("| recording | case | transformation | measured saving | predicted | fixed step: measured / "
          "from the planted trace / from its own trace (ms) | planted / own | own / measured |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %.1f%% | %.1f%% | %.3f / %.3f / %.3f | %.2f | %.2f |" % (
            r["recording"], r["cls"], r["fix"], 100 * r["measured"], 100 * r["predicted"], r["f_measured"],
            r["f_planted"], r["f_own"], r["f_planted"] / r["f_own"], r["f_own"] / r["f_measured"]))
    print()
    print("| case | rows | error (points), median | planted / own, median | own / measured, median |")
    print("|---|---:|---|---|---|")
    for cls in sorted({r["cls"] for r in rows}):
        rs = [r for r in rows if r["cls"] == cls]
        print("| %s | %d | %+.1f | %.2f | %.2f |" % (
            cls, len(rs), statistics.median(100 * (r["predicted"] - r["measured"]) for r in rs),
            statistics.median(r["f_planted"] / r["f_own"] for r in rs),
            statistics.median(r["f_own"] / r["f_measured"] for r in rs)))


if __name__ == "__main__":
    main()
