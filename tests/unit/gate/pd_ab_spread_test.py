#!/usr/bin/env python3
"""pd_ab_spread_test.py SOURCE_DIR: bench/gate/pd_ab_spread.py on synthetic pd_run runs with a
known structure, without a GPU. 12 runs, each a process with its own level (8% between
processes); one calibration figure follows the level exactly, another is noise. Checks: the
count, the spread of the untraced p10 read back, the follower's correlation near +1 and the
noise's near 0; a warm-up run in the folder is left out. Bad input, each refused with exit 2,
one line on stderr and nothing on stdout: no argument, a missing path, a folder without JSON,
a file that is not JSON, too few untraced steps, a negative step time, a probe series that
does not pair with the untraced steps, a calibration value that is not a number, fewer than
3 runs. The probe's median (pd_run --probe), following the level, correlates near +1."""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

src = sys.argv[1]
tool = os.path.join(src, "bench", "gate", "pd_ab_spread.py")
rng = random.Random(11)
tmp = tempfile.mkdtemp(prefix="pd_ab_spread_test.")
runs = os.path.join(tmp, "runs")
os.makedirs(runs)
fails = []


def run_doc(level, follower, noise, steps=None):
    u = steps if steps is not None else [level * rng.gauss(1.0, 0.002) for _ in range(36)]
    return {"metrics": {"p50_step_time_s": level * 1.1},
            "warmup_step_times_s": u,
            # pd_run --probe: one value per untraced step, following the process's level
            "warmup_probe_launch_ns": [1e6 * level * rng.gauss(1.0, 0.001) for _ in u],
            "profiler_cost": {"calibration": {"ns_per_follow": follower, "ns_per_noise": noise}}}


levels = []
for i in range(12):
    lvl = 3.6e-3 * (1.0 + rng.gauss(0.0, 0.08))
    levels.append(lvl)
    side = "base" if i % 2 == 0 else "head"
    with open(os.path.join(runs, f"{side}.{i // 2 + 1}.json"), "w") as f:
        json.dump(run_doc(lvl, 1e6 * lvl, rng.uniform(100.0, 200.0)), f)
with open(os.path.join(runs, "warm.base.json"), "w") as f:  # a warm-up run: must be left out
    json.dump(run_doc(1.0, 1.0, 1.0), f)

p = subprocess.run([sys.executable, tool, runs], capture_output=True, text=True)
if p.returncode != 0:
    fails.append(f"good runs: exit {p.returncode}: {p.stderr.strip()}")
out = p.stdout
if "runs: 12" not in out:
    fails.append(f"want 12 runs (the warm-up left out):\n{out}")
m = re.search(r"untraced p10: .*coefficient of variation ([0-9.]+)", out)
if not m or not 0.04 <= float(m.group(1)) <= 0.14:
    fails.append(f"the untraced p10's spread, want about 0.08:\n{out}")
m = re.search(r"\| ns_per_follow \| 12 \| ([+-][0-9.]+) \| ([+-][0-9.]+) \|", out)
if not m or float(m.group(1)) < 0.98 or float(m.group(2)) < 0.98:
    fails.append(f"the figure that follows the level, want r near +1:\n{out}")
m = re.search(r"\| median warmup_probe_launch_ns \| 12 \| ([+-][0-9.]+) \|", out)
if not m or float(m.group(1)) < 0.98:
    fails.append(f"the probe's median, want r near +1:\n{out}")
m = re.search(r"\| ns_per_noise \| 12 \| ([+-][0-9.]+) \|", out)
if not m or abs(float(m.group(1))) > 0.7:
    fails.append(f"the noise figure, want r near 0:\n{out}")


def bad(name, args, want):
    q = subprocess.run([sys.executable, tool] + args, capture_output=True, text=True)
    lines = q.stderr.strip().splitlines()
    if q.returncode != 2 or q.stdout.strip() or len(lines) != 1 or want not in lines[0]:
        fails.append(f"{name}: want exit 2, one line with '{want}', no stdout; got {q.returncode}, "
                     f"stdout {q.stdout!r}, stderr {q.stderr!r}")


def write(name, doc_or_text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    return path


q = subprocess.run([sys.executable, tool], capture_output=True, text=True)
if q.returncode != 2:
    fails.append(f"no argument: want exit 2, got {q.returncode}")
bad("missing path", [os.path.join(tmp, "nope")], "no such file or folder")
os.makedirs(os.path.join(tmp, "empty"))
bad("folder without JSON", [os.path.join(tmp, "empty")], "no metrics JSON")
bad("not JSON", [write("x.json", "{not json")], "cannot read a JSON")
bad("few steps", [write("few.json", run_doc(3e-3, 1.0, 1.0, steps=[3e-3] * 4))], "fewer than 10 untraced steps")
bad("negative step", [write("neg.json", run_doc(3e-3, 1.0, 1.0, steps=[3e-3] * 20 + [-1.0]))], "not a step time")
d = run_doc(3e-3, 1.0, 1.0)
d["warmup_probe_launch_ns"] = d["warmup_probe_launch_ns"][:-1]
bad("probe series unpaired", [write("probe.json", d)], "warmup_probe_launch_ns is not one number per untraced step")
d = run_doc(3e-3, 1.0, 1.0)
d["profiler_cost"]["calibration"]["ns_per_noise"] = "fast"
bad("calibration not a number", [write("cal.json", d)], "calibration.ns_per_noise out of range")
two = sorted(os.path.join(runs, f) for f in os.listdir(runs) if f.startswith("base."))[:2]
bad("two runs", two, "at least 3 are needed")

for f in fails:
    print("FAIL " + f)
if not fails:
    print("pd_ab_spread_test: all passed")
sys.exit(1 if fails else 0)
