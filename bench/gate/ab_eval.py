#!/usr/bin/env python3
"""ab_eval.py: the A/B's power and false alarms, offline, from recorded runs.

    bench/gate/ab_eval.py PROFILE_COMPARE RECORDING... [--rounds R] [--max-rounds M] [--jobs J] [--gate-only]

RECORDING: a folder bench/gate/ab_record.sh wrote on one GPU host (host.txt, times.tsv,
<scenario>/<round>/{a,b,h5,h10}.json), or its .tar.gz (what bench/gate/data/ keeps). Every A/B is made of the runs of one recording
(both sides share that machine, as in scripts/gpu_ab.sh) and no run is in two A/Bs: each
recording's rounds are cut into blocks of R consecutive rounds (default 8, the acceptance
suite's), and the blocks take turns, within each recording, starting with the kind its name
picks (a checksum of the recording's folder name: a recording's A/Bs stay the same when
other recordings are added or left out):
  - a detection block gives two A/Bs: base a against head h10 (--inject_slowdown 0.10)
    and base b against head h5 (0.05): different runs on each side;
  - a null block gives one: a against b, the same build against itself.
An A/B "catches" when profile_compare exits 1 (any row failing: that is what fails a pull
request); a false alarm is a null A/B that exits 1.

Each statistic (a set of profile_compare options) is evaluated on the same A/Bs; with
--max-rounds M > R the sequential form is also evaluated, as scripts/gpu_ab.sh runs it
(looks at R, R+8, ... M rounds while undecided, default M 40; alpha 0.004 at the first
look, 0.006 split over the later ones). Its A/Bs take the rounds as they need them, as a pull
request's A/B would: a block starts where the last one ended, wherever at least R rounds
are left, and ends at the last look any of its A/Bs needed (a detection block runs its two
A/Bs side by side, so it spans the longer), so no run is in two A/Bs. An A/B still
undecided when its recording has no more rounds (marked * in the rounds list) is counted
against the gate: a detection as missed, and a same-vs-same A/B is not counted at all
(it might have failed later), said so. The last row is the sequential form with no such
truncation: a block starts only where the recording still holds M rounds, so every A/B
can run to its cap (long recordings: PD_AB_SCENARIOS=tiny_ops and PD_MAX_ROUNDS above 40
in bench/gate/fresh_session.sh); a recording shorter than M gives it nothing.

gpu_ab.sh's own rows judge what profile_compare --primary auto chooses: untraced_step_p50_s
where the recordings' runs carry profiler_demo --warmup_probe's series (the probe is then
the covariate), clean's untraced_step_p10_s; else untraced_step_p10_s; a mix of the two
kinds of recording is refused.

Also printed: the measured change of the judged step (the primary row's change), the
minimum detectable effect the A/Bs stated, and the wall time of an A/B of all five
scenarios, estimated from times.tsv (clean and tiny_ops from their recorded runs, the
other three from ab_record.sh's timing runs).

Needs no GPU: the figures can be recomputed after a change of the gate. Prints Markdown.
Exit 0; 2 on bad usage or a recording that is not one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

# the scenarios bench/gate/ab_record.sh can record (scripts/lib_args.sh, pd_ab_record_scenarios)
SCENARIOS = ("clean", "tiny_ops", "sync", "memory_churn")
ALL_SCENARIOS = ("clean", "dataloader", "sync", "tiny_ops", "memory_churn")
# (name, profile_compare options): the statistics under evaluation
VARIANTS = (
    ("p10, better half (gpu_ab.sh with PD_AB_ADJUST=0)", ["--primary", "step_time_p10_s"]),
    ("p10, better half, normalised by host calibration", ["--primary", "step_time_p10_s", "--normalize"]),
    ("p10, better half, adjusted for the traced-call cost", ["--primary", "step_time_p10_s", "--adjust"]),
    ("p10, mean of all runs, adjusted for the traced-call cost, paired",
     ["--primary", "step_time_p10_s", "--keep", "1", "--adjust"]),
    ("p10, all runs, adjusted, two-sample test (gpu_ab.sh's default before the untraced steps)",
     ["--primary", "step_time_p10_s", "--keep", "1", "--adjust", "--unpaired"]),
    ("untraced p50, all runs, adjusted for the untraced launch, two-sample test (gpu_ab.sh's default)",
     ["--primary", "untraced_step_p50_s", "--keep", "1", "--adjust", "--unpaired"]),
    ("untraced p50, all runs, two-sample test, not adjusted",
     ["--primary", "untraced_step_p50_s", "--keep", "1", "--unpaired"]),
    ("untraced p10, all runs, adjusted for the untraced launch, two-sample test",
     ["--primary", "untraced_step_p10_s", "--keep", "1", "--adjust", "--unpaired"]),
    ("untraced p50, better half, paired", ["--primary", "untraced_step_p50_s"]),
    ("p50, better half", ["--primary", "p50_step_time_s"]),
    ("p10, better quarter", ["--primary", "step_time_p10_s", "--keep", "0.25"]),
    ("p10, mean of all runs", ["--primary", "step_time_p10_s", "--keep", "1"]),
    ("every host row at alpha (no primary)", []),
)
STEP = 8  # gpu_ab.sh's PD_AB_STEP


def die(msg):
    print(f"ab_eval: {msg}", file=sys.stderr)
    sys.exit(2)


def unpack_recording(path, fail, prefix="ab_eval_rec."):
    """A recording's folder: PATH itself, or, for a .tar.gz (what bench/gate/data/ keeps),
    the one folder inside it, unpacked into a new temporary folder. A member outside that
    folder or a link, or anything but one folder at the top, calls fail(message) (each
    tool's own one-line exit 2). ab_eval.py, ab_emulate.py and state_eval.py all read
    recordings through it."""
    if not (path.endswith((".tar.gz", ".tgz")) and os.path.isfile(path)):
        return path
    dest = tempfile.mkdtemp(prefix=prefix)
    with tarfile.open(path) as tf:
        if any(m.name.startswith("/") or ".." in m.name.split("/") or not (m.isfile() or m.isdir()) for m in tf):
            fail(f"{path}: holds paths outside its folder or links; not a recording")
        tf.extractall(dest)
    tops = [os.path.join(dest, x) for x in os.listdir(dest)]
    if len(tops) != 1 or not os.path.isdir(tops[0]):
        fail(f"{path}: expected one folder inside")
    return tops[0]


PROBE_MIN = 4  # samples a run's probe needs, as profile_compare (gate_ab.c, AB_PROBE_MIN)


def probe_median(doc):
    """The median of a run's warmup_probe_launch_ns (profiler_demo --warmup_probe), or None
    where the run has fewer than PROBE_MIN samples or one outside (0, 1e7) ns: the figure
    profile_compare --adjust takes as the untraced rows' covariate. ab_eval.py, ab_emulate.py
    and state_eval.py read it through here."""
    pr = doc.get("warmup_probe_launch_ns")
    if not isinstance(pr, list) or len(pr) < PROBE_MIN or not all(
            isinstance(x, (int, float)) and 0 < x < 1e7 for x in pr):
        return None
    return statistics.median(pr)


def rounds_of(rec, scen):
    """Round numbers of a recording's scenario whose four runs are all there, in order."""
    d = os.path.join(rec, scen)
    if not os.path.isdir(d):
        return []
    out = []
    for name in os.listdir(d):
        if name.isdigit() and all(os.path.isfile(os.path.join(d, name, k + ".json")) for k in ("a", "b", "h5", "h10")):
            out.append(int(name))
    return sorted(out)


class Compare:
    """profile_compare calls; safe to use from several threads at once (each call writes
    its own report file)."""

    def __init__(self, exe):
        self.exe = exe
        self.tmp = tempfile.mkdtemp(prefix="ab_eval.")
        self.calls = 0
        self.lock = threading.Lock()

    def ab(self, base, head, opts, alpha=0.01):
        """Runs one A/B; returns (exit status, report dict or None, stderr text)."""
        with self.lock:
            self.calls += 1
            out = os.path.join(self.tmp, f"r{self.calls}.json")
        cmd = [self.exe, "--base", *base, "--head", *head, "--alpha", str(alpha), "--quiet", "--json", out, *opts]
        p = subprocess.run(cmd, capture_output=True, text=True)
        rep = None
        if os.path.exists(out):
            with open(out) as f:
                rep = json.load(f)
            os.unlink(out)
        return p.returncode, rep, p.stderr.strip()


def row(rep, metric):
    for r in (rep or {}).get("rows", []):
        if r.get("metric") == metric:
            return r
    return None


def primary_of(opts):
    return opts[opts.index("--primary") + 1] if "--primary" in opts else "step_time_p10_s"


def failing_rows(rep):
    return [r["metric"] for r in (rep or {}).get("rows", []) if r.get("verdict") in ("regressed", "missing")]


def look_alphas(first, cap):
    looks = 1 + (cap - first + STEP - 1) // STEP
    if looks == 1:
        return [(first, 0.01)]
    rounds = [min(first + i * STEP, cap) for i in range(looks)]
    return [(rounds[0], 0.004)] + [(n, 0.006 / (looks - 1)) for n in rounds[1:]]


def sequential(cmp, base, head, opts, first, cap):
    """gpu_ab.sh's looks on one block (alpha as for cap, whatever the block's length);
    returns (exit status, report, rounds used, stderr, ran out): ran out when still
    undecided at the block's last round before the cap."""
    rc, rep, used = 0, None, first
    for n, alpha in look_alphas(first, cap):
        if n > len(base):
            return rc, rep, used, "", True
        rc, rep, err = cmp.ab(base[:n], head[:n], opts, alpha)
        used = n
        if rc not in (0, 1):
            return rc, rep, n, err, False
        if rc == 1 or not rep or rep.get("undecided", 0) == 0:
            return rc, rep, n, "", False
    return rc, rep, used, "", False


def fmt_pct(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    if not xs:
        return "-"
    return f"{statistics.median(xs):+.1f}% ({min(xs):+.1f}..{max(xs):+.1f})"


def fmt_mde(xs):
    vals = [x for x in xs if isinstance(x, (int, float))]
    inf = sum(1 for x in xs if x == "+inf")
    if not vals and not inf:
        return "-"
    s = f"{100 * statistics.median(vals):.1f}% ({100 * min(vals):.1f}..{100 * max(vals):.1f})" if vals else ""
    return s + (f"; >100% in {inf}" if inf else "")


def first_turn(rec):
    """0 (a detection block first) or 1 (a same-build block first), from the recording's
    folder name alone: which kind a block is never depends on the other recordings."""
    return zlib.crc32(os.path.basename(os.path.normpath(rec)).encode()) % 2


def evaluate(cmp, recs, scen, size, opts, seq_cap=None, whole=False):
    """Returns dict kind -> list of (caught, change_pct, mde, note) over the disjoint A/Bs.
    whole: a sequential block starts only where the recording still holds seq_cap rounds,
    so no A/B runs out of recorded rounds."""
    res = {"h10": [], "h5": [], "same": [], "ran_out": []}
    prim = primary_of(opts)
    need = seq_cap if (whole and seq_cap) else size
    for rec in recs:
        turn = first_turn(rec)
        path = os.path.join(rec, scen)
        rounds = rounds_of(rec, scen)
        start = 0
        while len(rounds) - start >= need:
            blk = rounds[start : start + (seq_cap or size)]

            def runs(kind):
                return [os.path.join(path, str(r), kind + ".json") for r in blk]

            pairs = [("h10", "a", "h10"), ("h5", "b", "h5")] if turn % 2 == 0 else [("same", "a", "b")]
            turn += 1
            used = size if seq_cap else len(blk)
            for kind, b, h in pairs:
                out = False
                if seq_cap:
                    rc, rep, n, err, out = sequential(cmp, runs(b), runs(h), opts, size, seq_cap)
                else:
                    rc, rep, err = cmp.ab(runs(b), runs(h), opts)
                    n = len(blk)
                if rc == 2 and f"primary metric '{prim}'" in err:
                    return None  # the recording's runs do not carry this statistic's samples
                if rc not in (0, 1):
                    die(f"profile_compare exited {rc} on {rec} {scen} {kind}: {err}")
                used = max(used, n)
                if out and kind == "same":
                    res["ran_out"].append(n)  # might have failed later: not counted
                    continue
                # the row that gated: the one --primary auto chose, as the report says
                r = row(rep, ((rep or {}).get("statistic") or {}).get("primary") or prim) or {}
                note = f"{n} rounds" + (": " + ",".join(failing_rows(rep)) if rc == 1 else "")
                res[kind].append((rc == 1, r.get("change_pct"), r.get("mde_fraction"), note, f"{n}{'*' if out else ''}"))
            start += used
    return res


def host_args(rec):
    hp = os.path.join(rec, "host.txt")
    if not os.path.isfile(hp):
        return ""
    with open(hp) as f:
        for line in f:
            if line.startswith("args "):
                return line[5:].strip()
    return ""


def dataloader_as_now(recs):
    """The recordings whose dataloader runs had no extra warmup steps, as gpu_ab.sh runs it
    now (host.txt args "(dataloader: without it)"); older ones ran its 80 ms steps 48 times
    more."""
    return [r for r in recs if "(dataloader: without it)" in host_args(r)]


def times(recs):
    """Mean seconds per run of each scenario over the recordings' times.tsv; dataloader's
    only from dataloader_as_now(recs) where any recording is one."""
    per = {}
    current = dataloader_as_now(recs)
    for rec in recs:
        with open(os.path.join(rec, "times.tsv")) as f:
            next(f, None)
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 4:
                    if parts[0] == "dataloader" and current and rec not in current:
                        continue
                    try:
                        per.setdefault(parts[0], []).append(float(parts[3]))
                    except ValueError:
                        pass
    return {s: statistics.mean(v) for s, v in per.items() if v}


def recording_probed(rec):
    """Whether the first run of the recording carries profiler_demo --warmup_probe's series
    (ab_record.sh gives every non-dataloader run the flag where the build has it)."""
    for scen in SCENARIOS:
        for r in rounds_of(rec, scen):
            p = os.path.join(rec, scen, str(r), "a.json")
            if os.path.isfile(p):
                with open(p) as f:
                    return probe_median(json.load(f)) is not None
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile_compare")
    ap.add_argument("recordings", nargs="+")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=40)
    ap.add_argument("--other-max-rounds", type=int, default=24,
                    help="gpu_ab.sh's PD_AB_OTHER_MAX_ROUNDS: the cap of sync and memory_churn (for the wall time)")
    ap.add_argument("--gate-only", action="store_true",
                    help="only gpu_ab.sh's own sequential rows (both forms), not the other statistics (92 s instead of 14 minutes over fifteen recordings on 2 CPUs)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="profile_compare calls at once (default: the CPUs)")
    a = ap.parse_args()
    if not os.access(a.profile_compare, os.X_OK):
        die(f"{a.profile_compare} is not an executable profile_compare")
    if not 2 <= a.rounds <= 64 or not a.rounds <= a.max_rounds <= 64:
        die("--rounds must be from 2 to 64 and --max-rounds from --rounds to 64")
    if not a.rounds <= a.other_max_rounds <= 64:
        die("--other-max-rounds must be from --rounds to 64")
    if not 1 <= a.jobs <= 256:
        die("--jobs must be from 1 to 256")
    a.recordings = [unpack_recording(rec, die) for rec in a.recordings]
    for rec in a.recordings:
        if not (os.path.isfile(os.path.join(rec, "times.tsv")) and any(rounds_of(rec, s) for s in SCENARIOS)):
            die(f"{rec} is not an ab_record.sh folder (times.tsv and <scenario>/<round>/{{a,b,h5,h10}}.json)")
    cmp = Compare(a.profile_compare)

    print("### A/B power and false alarms from recorded runs (bench/gate/ab_eval.py)\n")
    print("| recording | host |")
    print("|---|---|")
    for rec in a.recordings:
        host = ""
        hp = os.path.join(rec, "host.txt")
        if os.path.isfile(hp):
            with open(hp) as f:
                kv = dict(line.rstrip("\n").split(" ", 1) for line in f if " " in line)
            host = f"{kv.get('gpu', '?')}, boot {kv.get('boot_id', '?')[:8]}, commit {kv.get('commit', '?')}, {kv.get('date', '')}"
        print(f"| `{rec}` | {host} |")
    print()
    if a.gate_only and a.max_rounds <= a.rounds:
        die("--gate-only needs --max-rounds above --rounds (the sequential rows)")
    variants = [] if a.gate_only else [(n, o, None, False) for n, o in VARIANTS]
    if a.max_rounds > a.rounds:
        # gpu_ab.sh's primary, profile_compare --primary auto: where every run probes
        # (warmup_probe_launch_ns) the untraced p50, clean's p10; else the untraced p10
        probed = [recording_probed(rec) for rec in a.recordings]
        if any(probed) and not all(probed):
            die("some recordings carry warmup_probe_launch_ns and some do not: gpu_ab.sh judges the two on "
                "different rows; evaluate them apart")
        gname = "untraced p50 along the probe (clean: p10; --primary auto)" if all(probed) else \
            "untraced p10 (--primary auto)"
        gate = ["--primary", "auto", "--keep", "1", "--adjust", "--unpaired"]
        if not a.gate_only:
            variants.append((f"sequential {a.rounds}..{a.max_rounds} rounds, untraced p50, all runs adjusted, two-sample (the statistic before 2026-11-28 evening; its cap was 24)",
                             ["--primary", "untraced_step_p50_s", "--keep", "1", "--adjust", "--unpaired"], a.max_rounds, False))
        variants.append((f"sequential {a.rounds}..{a.max_rounds} rounds, {gname}, all runs adjusted, two-sample (gpu_ab.sh)",
                         gate, a.max_rounds, False))
        variants.append((f"the same (gpu_ab.sh), each A/B started only where its recording holds {a.max_rounds} more rounds: none runs out",
                         gate, a.max_rounds, True))
    # every (scenario, statistic) is independent of the others: evaluated side by side,
    # printed in order
    recorded = [s for s in SCENARIOS if any(rounds_of(rec, s) for rec in a.recordings)]
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {(scen, name): pool.submit(evaluate, cmp, a.recordings, scen, a.rounds, opts, cap, whole)
                   for scen in recorded for name, opts, cap, whole in variants}
        results = {k: f.result() for k, f in futures.items()}
    for scen in recorded:
        print(f"#### {scen}: A/Bs of {a.rounds} rounds from disjoint runs\n")
        print("| statistic | 10% caught | 5% caught | same vs same: false alarms | change at 10% | change at 5% | change, same | stated mde (same) |")
        print("|---|---:|---:|---:|---|---|---|---|")
        for name, opts, cap, _ in variants:
            res = results[(scen, name)]
            if res is None:
                print(f"| {name} | not in these recordings (no {primary_of(opts)} samples) | | | | | | |")
                continue
            cells = []
            for kind in ("h10", "h5", "same"):
                got = res[kind]
                cells.append(f"{sum(1 for c in got if c[0])} of {len(got)}")
            ch = [fmt_pct([c[1] for c in res[k]]) for k in ("h10", "h5", "same")]
            notes = "; ".join(c[3] for c in res["same"] if c[0])
            fa = cells[2] + (f" ({notes})" if notes else "")
            if cap:  # how many rounds the sequential A/Bs took
                for k in range(3):
                    got = res[("h10", "h5", "same")[k]]
                    if got:
                        cells[k] += " (" + "/".join(str(c[4]) for c in got) + " rounds)"
                fa = cells[2] + (f" ({notes})" if notes else "")
                if res["ran_out"]:
                    fa += f"; {len(res['ran_out'])} more ran out of recorded rounds undecided (at " + \
                        "/".join(map(str, res["ran_out"])) + "): not counted"
            print(f"| {name} | {cells[0]} | {cells[1]} | {fa} | {ch[0]} | {ch[1]} | {ch[2]} | {fmt_mde([c[2] for c in res['same']])} |")
        print()
    t = times(a.recordings)
    print("#### Wall time of an A/B of all five scenarios (from times.tsv)\n")
    known = {s: t[s] for s in ALL_SCENARIOS if s in t}
    missing = [s for s in ALL_SCENARIOS if s not in t]
    if known:
        fill = statistics.mean(known.values())
        per_round = 2 * sum(known.get(s, fill) for s in ALL_SCENARIOS)
        warm = 6 * known.get("clean", fill)
        print("| scenario | seconds per run |")
        print("|---|---:|")
        for s in ALL_SCENARIOS:
            print(f"| {s} | {known[s]:.2f} |" if s in known else f"| {s} | ({fill:.2f}, not recorded: the mean of the others) |")
        print()
        for n in sorted({a.rounds, a.max_rounds}):
            total = warm + n * per_round
            print(f"- {n} rounds of every scenario: {total:.0f} s ({total / 60:.1f} min)")
        # gpu_ab.sh's worst case: clean and tiny_ops undecided up to its cap, sync and
        # memory_churn up to theirs (rounded down to a look, as gpu_ab.sh does), dataloader
        # at its one look (PD_AB_DATALOADER_MAX_ROUNDS defaults to ROUNDS). Run times only:
        # the looks' profile_compare calls and a slower host add to it (docs/gate.md).
        other = min(a.rounds + (a.other_max_rounds - a.rounds) // STEP * STEP, a.max_rounds)
        run_of = lambda s: 2 * known.get(s, fill)
        worst = warm + a.rounds * run_of("dataloader") + \
            a.max_rounds * (run_of("clean") + run_of("tiny_ops")) + other * (run_of("sync") + run_of("memory_churn"))
        print(f"- gpu_ab.sh's longest: {a.max_rounds} rounds of clean and tiny_ops, {other} of sync and memory_churn, "
              f"{a.rounds} of dataloader: {worst:.0f} s ({worst / 60:.1f} min) of runs, without the looks' compare "
              f"time (target: at most 6 min)")
        if missing:
            print(f"- not recorded, estimated: {', '.join(missing)}")
        cur = dataloader_as_now(a.recordings)
        if cur and len(cur) < len(a.recordings):
            print(f"- dataloader's seconds from the {len(cur)} recordings that ran it as gpu_ab.sh does now (no extra warmup steps)")
    print(f"\n({cmp.calls} profile_compare calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
