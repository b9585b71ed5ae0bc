#!/usr/bin/env python3
"""compare_tables.py: the torch rows of bench/diagnosis/tables.sh's output, summed up, or two
such outputs (the same recordings read by two builds of profile_analyze) side by side.

  compare_tables.py TABLES.md             one model
  compare_tables.py BEFORE.md AFTER.md    two models, over the rows both hold

Prints, for each model: the rows, the median and mean |error| in points, the rows outside 5
points and their interval ("within" = no); the predicted unprofiled step against the
measured one (median of predicted / measured - 1) and against the traced process's own
unprofiled steps where the row has them; the naming check of issue 22 (a planted cause
that saved at least 10% must be the bottleneck, one under 5% must not be); then one row per
class (model and variant) with its median |error| and mean error. Rows are matched by case
and device. A fix that is no cause (launch_overhead: a CUDA graph of the step, which never
names the bottleneck) is left out of the naming check.

Bad input (a file missing or holding no torch row) is refused with one line on stderr and
exit status 2, before anything is printed.
"""
import re
import statistics
import sys

from truth_table import TORCH  # a torch variant's planted cause -> the transformation of its fix

# transformation -> the verdict that names its cause; launch_overhead (a CUDA graph of the
# step, graphed_b64's "cuda_graph") names none (docs/diagnosis.md, "The verdict from savings")
NAMES = {fix: cause for cause, fix in TORCH.items() if fix != "launch_overhead"}
STEP = re.compile(r"([\d.]+) / ([\d.]+|-) / ([\d.]+) ms")


def die(msg):
    print("compare_tables.py: " + msg, file=sys.stderr)
    sys.exit(2)


def pct(cell):
    m = re.match(r"\s*(-?[\d.]+)%", cell)
    return float(m.group(1)) if m else None


def read(path):
    """The torch rows of a tables.sh output: {(case, device): row}."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    rows = {}
    for line in text.splitlines():
        if not line.startswith("| torch"):
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) < 9:
            continue
        try:
            err = float(c[4])
        except ValueError:
            continue
        meas = pct(c[2])
        step = STEP.match(c[7])
        if meas is None or step is None:
            continue
        name = c[0][len("torch "):]
        cls = ("TinyLM " + name[3:]) if name.startswith("lm ") else ("SimpleCNN " + name)
        rows[(c[0], c[8])] = dict(cls=cls, fix=c[1], measured=meas, error=err, within=c[5] == "yes",
                                  verdict=c[6].strip("`"), step=float(step.group(1)),
                                  same=None if step.group(2) == "-" else float(step.group(2)),
                                  predicted=float(step.group(3)))
    if not rows:
        die("%s: no torch row (is it the output of bench/diagnosis/tables.sh?)" % path)
    return rows


def summary(rows):
    errs = [abs(r["error"]) for r in rows]
    step = [r["predicted"] / r["step"] - 1 for r in rows if r["step"] > 0]
    same = [r["predicted"] / r["same"] - 1 for r in rows if r["same"]]
    named = [r for r in rows if r["fix"] in NAMES]
    missed = [r for r in named if r["measured"] >= 10 and r["verdict"] != NAMES[r["fix"]]]
    false = [r for r in named if r["measured"] < 5 and r["verdict"] == NAMES[r["fix"]]]
    return dict(n=len(rows), median=statistics.median(errs), mean=statistics.mean(errs),
                outside=sum(1 for r in rows if not r["within"]),
                step=statistics.median(step) if step else float("nan"),
                same=statistics.median(same) if same else float("nan"), nsame=len(same),
                missed=len(missed), false=len(false))


def classes(rows):
    out = {}
    for r in rows:
        out.setdefault(r["cls"], []).append(r["error"])
    return out


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1] in ("-h", "--help"):
        die("usage: compare_tables.py TABLES.md [AFTER.md]")
    tables = [read(p) for p in sys.argv[1:]]
    keys = [k for k in tables[0] if all(k in t for t in tables)]
    if not keys:
        die("the two tables share no row (case and device)")
    sets = [[t[k] for k in keys] for t in tables]
    sums = [summary(s) for s in sets]
    cols = ["before", "after"] if len(sets) == 2 else ["value"]
    print("%d torch rows%s" % (len(keys), "" if len(sets) == 1 or len(keys) == len(tables[0]) == len(tables[1])
                                 else " (those both tables hold)"))
    print()
    print("| measure | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    lines = [("median abs error (points)", "%.1f", "median"), ("mean abs error (points)", "%.2f", "mean"),
             ("rows outside 5 points and their interval", "%d", "outside"),
             ("predicted unprofiled step / measured - 1 (median)", "%+.1f%%", "step"),
             ("the same against the traced process's own steps (median)", "%+.1f%%", "same"),
             ("planted cause saving 10% or more, not the bottleneck", "%d", "missed"),
             ("planted cause saving under 5%, named", "%d", "false")]
    for label, fmt, key in lines:
        vals = [fmt % (100 * s[key] if fmt.endswith("%%") else s[key]) for s in sums]
        if key == "same":
            label += " over %d rows" % sums[0]["nsame"]
        print("| %s | %s |" % (label, " | ".join(vals)))
    print()
    per = [classes(s) for s in sets]
    print("| class | rows | median abs error | mean error |")
    print("|---|---:|---|---|")
    for cls in sorted(per[0]):
        med = " -> ".join("%.1f" % statistics.median(abs(x) for x in p[cls]) for p in per)
        mean = " -> ".join("%+.1f" % statistics.mean(p[cls]) for p in per)
        print("| %s | %d | %s | %s |" % (cls, len(per[0][cls]), med, mean))


if __name__ == "__main__":
    main()
