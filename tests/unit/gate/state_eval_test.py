#!/usr/bin/env python3
"""state_eval_test.py SOURCE_DIR: bench/gate/state_eval.py on a synthetic recording with a
known structure, without a GPU. 24 rounds of tiny_ops (a, b, h5, h10), each run a process
with its own constant (5%), part of which its launch calibration sees; one process in four
starts with 3 KiB less heap and runs 8% slower; within a run the warmup steps vary by 0.5%.
Checks: the halves correlate near 1, the a and b runs of a round do not, the low-heap share
and its slowdown are found and taking the flag in narrows the spread; the probe (which sees
the whole state) leaves almost no spread where the calibration leaves 3%; a recording without
runs is refused with exit 2 and one line. --modes on a synthetic env_check.sh recording (two
modes, one narrower and faster) finds both spreads and the change; an empty one is refused. Exit 77 (skipped) where no python3 has numpy."""
import json
import os
import random
import subprocess
import sys
import tempfile

src = sys.argv[1]
py = next((x for x in (sys.executable, "/usr/bin/python3")
           if subprocess.run([x, "-c", "import numpy"], capture_output=True).returncode == 0), None)
if py is None:
    print("state_eval_test: no python3 with numpy (scripts/setup.sh installs python3-numpy): skipped")
    sys.exit(77)
rng = random.Random(5)
tmp = tempfile.mkdtemp(prefix="state_eval_test.")
rec = os.path.join(tmp, "rec")
fails = []
for r in range(1, 25):
    for kind, f in (("a", 1.0), ("b", 1.0), ("h5", 1.05), ("h10", 1.10)):
        seen = rng.gauss(0.0, 0.05)    # the part of the process's state the calibration sees
        unseen = rng.gauss(0.0, 0.03)  # the part it does not
        low = rng.random() < 0.25
        lvl = 2.2e-3 * f * (2.718281828 ** (seen + unseen)) * (1.08 if low else 1.0)
        doc = {"warmup_step_times_s": [lvl * rng.gauss(1.0, 0.005) for _ in range(48)],
               "profiler_cost": {"calibration": {"ns_per_launch_untraced": 4000.0 * (2.718281828 ** seen)}},
               "host_memory": {"heap_start_kib": 248066 if low else 248069},
               # the in-process probe sees the whole state, the calibration only part of it
               "warmup_probe_launch_ns": [4000.0 * (2.718281828 ** (seen + unseen)) * (1.08 if low else 1.0)
                                          * rng.gauss(1.0, 0.003) for _ in range(48)]}
        os.makedirs(os.path.join(rec, "tiny_ops", str(r)), exist_ok=True)
        with open(os.path.join(rec, "tiny_ops", str(r), kind + ".json"), "w") as fp:
            json.dump(doc, fp)
tool = os.path.join(src, "bench/gate/state_eval.py")
p = subprocess.run([py, tool, rec], capture_output=True, text=True)
row = next((l for l in p.stdout.splitlines() if l.startswith("| rec |")), "")
cells = [c.strip() for c in row.strip("|").split("|")]
if p.returncode != 0 or len(cells) != 11:
    fails.append(f"exit {p.returncode}, row {row!r}: {p.stderr}")
else:
    try:
        base, resid, halves, ab = int(cells[1]), float(cells[2]), float(cells[3]), float(cells[4])
        share, slower = float(cells[6].rstrip("%")), float(cells[7].rstrip("%"))
        before, after = (float(x) for x in cells[8].split("->"))
        if base != 48:
            fails.append(f"base runs {base}, want 48")
        if not 2.0 < resid < 5.0:  # the unseen 3% and the low-heap flag's share of 8%
            fails.append(f"resid {resid}%, want about 3-4%")
        if halves < 0.9:
            fails.append(f"halves correlate {halves}, want near 1 (the noise is the process's)")
        if abs(ab) > 0.5:
            fails.append(f"a~b {ab}, want near 0 (independent processes)")
        if not 10 <= share <= 40 or not 4.0 < slower < 12.0 or not after < before:
            fails.append(f"low heap: share {share}%, slower by {slower}%, spread {before} -> {after}")
        probe = float(cells[9])
        c50, p50 = (float(x) for x in cells[10].split("->"))
        if not probe < 1.5 or not p50 < 1.5 < c50:
            fails.append(f"the probe sees the state: resid along it {probe}%, p50 {c50} -> {p50}, want under 1.5%")
    except ValueError as e:
        fails.append(f"row {row!r}: {e}")
# --modes: an env_check.sh recording, 12 rounds of tiny_ops in modes free and thp; free's
# processes spread 8% between them, thp's 1% and 5% faster.
mrec = os.path.join(tmp, "modes")
for r in range(1, 13):
    for mode, spread, lvl in (("free", 0.08, 2.2e-3), ("thp", 0.01, 2.09e-3)):
        c = rng.gauss(0.0, spread)
        doc = {"warmup_step_times_s": [lvl * (2.718281828 ** c) * rng.gauss(1.0, 0.002) for _ in range(48)],
               "step_times_s": [2.0 * lvl * (2.718281828 ** c) for _ in range(20)],
               "profiler_cost": {"calibration": {"ns_per_launch_untraced": 4000.0 * (2.718281828 ** rng.gauss(0, 0.01))}},
               "host_memory": {"heap_start_kib": 248069}}
        os.makedirs(os.path.join(mrec, "tiny_ops", str(r)), exist_ok=True)
        with open(os.path.join(mrec, "tiny_ops", str(r), mode + ".json"), "w") as fp:
            json.dump(doc, fp)
pm = subprocess.run([py, tool, "--modes", mrec], capture_output=True, text=True)
mrows = {c[2]: c for c in ([x.strip() for x in l.strip("|").split("|")] for l in pm.stdout.splitlines()
                           if l.startswith("| modes |"))}
if pm.returncode != 0 or set(mrows) != {"free", "thp"} or any(len(c) != 11 for c in mrows.values()):
    fails.append(f"--modes: exit {pm.returncode}, rows {mrows}: {pm.stderr}")
else:
    try:
        fr, th = mrows["free"], mrows["thp"]
        if int(fr[3]) != 12 or int(th[3]) != 12:
            fails.append(f"--modes: runs {fr[3]} and {th[3]}, want 12 each")
        change = float(th[4].split(",")[1].strip().rstrip("%"))
        if not -8.0 < change < -2.0 or not fr[4].endswith("+0.0%"):
            fails.append(f"--modes: thp against free {th[4]!r} (free {fr[4]!r}), want about -5% and +0.0%")
        if not 4.0 < float(fr[5]) < 14.0 or not float(th[5]) < 2.5 or not float(th[8]) < 2.5:
            fails.append(f"--modes: spreads free {fr[5]} thp {th[5]} (traced {th[8]}), want about 8 and 1")
    except (ValueError, IndexError) as e:
        fails.append(f"--modes rows {mrows}: {e}")
empty = os.path.join(tmp, "empty")
os.makedirs(empty)
pb = subprocess.run([py, tool, empty], capture_output=True, text=True)
if pb.returncode != 2 or "fewer than 8 tiny_ops base runs" not in pb.stderr or len(pb.stderr.strip().splitlines()) != 1 or pb.stdout:
    fails.append(f"an empty folder: exit {pb.returncode}: {pb.stderr!r}")
pe = subprocess.run([py, tool, "--modes", empty], capture_output=True, text=True)
if pe.returncode != 2 or "no scenario with 4 or more runs" not in pe.stderr or len(pe.stderr.strip().splitlines()) != 1:
    fails.append(f"--modes on an empty folder: exit {pe.returncode}: {pe.stderr!r}")
subprocess.run(["rm", "-rf", tmp])
if fails:
    print(p.stdout)
    print("state_eval_test: FAIL:\n  " + "\n  ".join(fails), file=sys.stderr)
    sys.exit(1)
print("state_eval_test: passed")
