#!/usr/bin/env python3
"""long_run_eval_test.py SOURCE_DIR CPU_WATCH: bench/gate/long_run_eval.py and cpu_watch
without a GPU. A synthetic long_run.sh recording: three tiny_ops processes whose steps
switch between two levels 27% apart in episodes, with --warmup_probe's launch series
following the level and its compute series not, and thread samples of a launching thread
that moves once. Checks: the level moves are counted, the launching thread's CPUs and move
are read, the probe's correlation is near 1 and the spread after it small; a real cpu_watch
output (one second, light duty) reads as a table with a row per CPU; an empty folder, a
file that is not cpu_watch's, and bad cpu_watch arguments are refused with one line and
exit 2. Exit 77 (skipped) where python3 is missing."""
import json
import os
import random
import subprocess
import sys
import tempfile

src, watch = sys.argv[1], sys.argv[2]
py = sys.executable
tool = os.path.join(src, "bench/gate/long_run_eval.py")
rng = random.Random(7)
tmp = tempfile.mkdtemp(prefix="long_run_eval_test.")
rec = os.path.join(tmp, "rec")
os.makedirs(rec)
fails = []
for i in range(1, 4):
    w, pl, pc, state = [], [], [], 1.0
    for k in range(3000):
        if k % 700 == 350:
            state = 1.27 if state == 1.0 else 1.0
        w.append(2e-3 * state * rng.gauss(1, 0.01))
        pl.append(2500 * state ** 0.8 * rng.gauss(1, 0.02))
        pc.append(13000 * rng.gauss(1, 0.02))
    with open(os.path.join(rec, f"tiny_ops_{i}.json"), "w") as f:
        json.dump({"warmup_step_times_s": w, "warmup_probe_launch_ns": pl, "warmup_probe_compute_ns": pc}, f)
    with open(os.path.join(rec, f"tiny_ops_{i}.threads.tsv"), "w") as f:
        f.write("t_ms\ttid\tname\tstate\tcpu\tutime\tstime\n")
        for k in range(300):
            f.write(f"{1000 + 25 * k}.0\t100\tprofiler_demo\tR\t{1 if k < 150 else 5}\t{k}\t0\n")
            f.write(f"{1000 + 25 * k}.0\t101\tpd_loader0\tS\t7\t1\t0\n")
p = subprocess.run([py, tool, rec], capture_output=True, text=True)
rows = [l for l in p.stdout.splitlines() if l.startswith("| tiny_ops | tiny_ops_")]
if p.returncode != 0 or len(rows) != 3:
    fails.append(f"exit {p.returncode}, {len(rows)} run rows: {p.stderr}")
else:
    c = [x.strip() for x in rows[0].strip("|").split("|")]
    if c[2] != "3000" or c[6] != "2" or c[7] != "1" or c[8] != "0%":
        fails.append(f"run row {rows[0]!r}: want 3000 steps, 2 CPUs, 1 move, 0% shared")
    if int(c[5].split(" of ")[0]) < 3:
        fails.append(f"run row {rows[0]!r}: the level's moves were not counted")
probe = next((l for l in p.stdout.splitlines() if l.startswith("With --warmup_probe, tiny_ops")), "")
try:
    corr = float(probe.split("launch time ")[1].split(",")[0])
    after = float(probe.split("-> ")[1].split("%")[0])
    if corr < 0.9 or after > 2.0:
        fails.append(f"probe line {probe!r}: want a correlation near 1 and little spread after it")
except (IndexError, ValueError):
    fails.append(f"no probe line: {p.stdout[-400:]!r}")
# cpu_watch itself, briefly, then its table
out = os.path.join(tmp, "watch.tsv")
with open(out, "w") as f:
    pw = subprocess.run([watch, "1", "5"], stdout=f, stderr=subprocess.PIPE, text=True)
pt = subprocess.run([py, tool, "--watch", out], capture_output=True, text=True)
cpus = len(os.sched_getaffinity(0))
wrows = [l for l in pt.stdout.splitlines() if l.startswith("| ") and l.split("|")[1].strip().isdigit()]
if pw.returncode != 0 or pt.returncode != 0 or len(wrows) != cpus:
    fails.append(f"cpu_watch exit {pw.returncode} ({pw.stderr.strip()}), table exit {pt.returncode}, "
                 f"{len(wrows)} CPU rows for {cpus} CPUs: {pt.stderr}")
for args, want in ((["0.5"], "SECONDS must be a number from 1 to 600"), (["2", "0"], "DUTY_PERCENT must be"),
                   (["1", "2", "3"], "usage: cpu_watch")):
    b = subprocess.run([watch] + args, capture_output=True, text=True)
    if b.returncode != 2 or want not in b.stderr or b.stdout or len(b.stderr.strip().splitlines()) != 1:
        fails.append(f"cpu_watch {args}: exit {b.returncode}, {b.stderr!r}")
empty = os.path.join(tmp, "empty")
os.makedirs(empty)
for args, want in (([empty], "no run with 200 or more warmup step times"),
                   (["--watch", os.path.join(rec, "tiny_ops_1.json")], "not cpu_watch output"),
                   ([], "give a recording")):
    b = subprocess.run([py, tool] + args, capture_output=True, text=True)
    if b.returncode != 2 or want not in b.stderr or b.stdout or len(b.stderr.strip().splitlines()) != 1:
        fails.append(f"long_run_eval {args}: exit {b.returncode}, {b.stderr!r}")
subprocess.run(["rm", "-rf", tmp])
if fails:
    print(p.stdout)
    print("long_run_eval_test: FAIL:\n  " + "\n  ".join(fails), file=sys.stderr)
    sys.exit(1)
print("long_run_eval_test: passed")
