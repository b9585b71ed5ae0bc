"""torch_event_cost.py: what torch.profiler costs the host per recorded event, by kind of
event, measured on this host: the figure the replay takes out of a torch.profiler trace to
predict the unprofiled step (src/model/replay_internal.h, docs/diagnosis.md, "The
profiler's own cost").

A torch.profiler trace has three kinds of host record: ops (`cpu_op`, `user_annotation`: a
RecordFunction each, with its shapes), traced CUDA calls (`cuda_runtime`, `cuda_driver`: a
CUPTI callback and activity record each) and, with profile_memory, memory records
(`cpu_instant_event`). Their costs are found apart by workloads with different mixes:

  cpu    K in-place adds on a 16-element CPU tensor per step (5 ops and 4 memory records
         each in torch 2.11: the scalar becomes a tensor), no CUDA call;
  gpu    K in-place adds on a 256-element CUDA tensor: one op, one cudaLaunchKernel and
         two memory records each;
  alloc  K 256-float CUDA tensors made and dropped: one op (aten::empty) and two memory
         records each, no CUDA call (the allocator's cache);
  cat    K torch.cat of 64 four-float CPU tensors: one op of 64 tensor inputs and two
         memory records each, for the cost of an op that grows with its inputs (torch 2.11
         writes a tensor list's shapes as `[]`, so the table gives the cat op's whole cost);
  step   the PyTorch training step (tests/torch/record_torch_traces.py, variant plain_b64:
         SimpleCNN, AMP, AdamW, pre-made batches): the check of the costs on a real step.

One measurement is one fresh Python process (`--one KIND ORDER`). It times steps (wall clock
between two device synchronizations): an unprofiled block first (`off0`, before CUPTI is
attached), then ROUNDS rounds of a torch.profiler session `full` (CPU and CUDA activities,
record_shapes, profile_memory: as tests/torch traces are recorded) and one `default` (its
defaults), each followed by an unprofiled block (`off`: torch.profiler leaves CUPTI attached
once it has run, so these carry CUPTI's callbacks but record nothing); ORDER and the round
alternate which session comes first. For cpu, gpu and alloc, steps of K=16 and K=256 ops
alternate, so the per-step costs that do not scale with K (the step marker, the final
synchronization) cancel in the slope between them. Events are counted per step in each
session's first trace (exported after its last timed step, outside the timing). The process
prints one JSON object: each block's median step per K, and the event counts.

The driver (`--runs N`) runs N processes of each kind in rotating order and prints:
- recording cost per op, traced call and memory record: least squares over the three
  workloads' slopes (profiled block against the same process's `off` blocks), median and
  10th..90th percentile over every combination of one process per workload;
- the cost of CUPTI attached, per CUDA call (gpu's `off` against `off0`);
- the check: on the training step, the added time per step measured against `off0` and
  predicted from those costs and the step's own event counts, per session.
`--json FILE` keeps every process's object (written after each process); `--summarize FILE`
prints the table again from it.

usage: python3 bench/overhead/torch_event_cost.py --runs 5 [--json OUT.json]
       python3 bench/overhead/torch_event_cost.py --summarize OUT.json
       python3 bench/overhead/torch_event_cost.py --one gpu full_first
"""
import argparse
import bisect
import gzip
import json
import os
import statistics
import sys
import tempfile
import time

from torch_overhead import run_fresh  # the one fresh-process runner of bench/overhead

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("cpu", "gpu", "alloc", "cat", "step")
CAT_INPUTS = 64
KS = (16, 256)
BLOCK = 20  # steps of each K per block
ROUNDS = 3  # rounds of (full, unprofiled, default, unprofiled) blocks
OP_CATS = ("cpu_op", "user_annotation")
CALL_CATS = ("cuda_runtime", "cuda_driver")
MEM_CATS = ("cpu_instant_event",)


def make_work(kind):
    import torch
    if kind == "step":
        sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
        from record_torch_traces import make_step  # the one definition of the PyTorch step
        step, _ = make_step("plain_b64")
        return [(0, step)]
    if kind == "cat":
        parts = [torch.zeros(4) for _ in range(CAT_INPUTS)]

        def cats(k):
            def run():
                for _ in range(k):
                    torch.cat(parts)
            return run
        return [(k, cats(k)) for k in KS]
    dev = torch.device("cpu" if kind == "cpu" else "cuda")
    t = torch.zeros(16 if kind == "cpu" else 256, device=dev)

    def ops(k):
        def run():
            if kind == "alloc":
                for _ in range(k):
                    torch.empty(256, device=dev)
            else:
                for _ in range(k):
                    t.add_(1.0)
        return run
    return [(k, ops(k)) for k in KS]


def count_events(path, seq):
    """Per step of the exported trace: {K: {cat: median count per step}} over its steps."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        evs = json.load(f)["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e.get("dur", 0), int(e["name"].split("#")[1]))
                   for e in evs if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    starts = [s[0] for s in steps]
    per = [dict() for _ in steps]
    for e in evs:
        cat = e.get("cat")
        if e.get("ph") not in ("X", "i") or cat is None or str(e.get("name", "")).startswith("ProfilerStep#"):
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i < 0 or e["ts"] > steps[i][1]:
            continue
        per[i][cat] = per[i].get(cat, 0) + 1
    out = {}
    for (t0, t1, n), c in zip(steps, per):
        if n < len(seq):
            out.setdefault(seq[n], []).append(c)
    res = {}
    for k, lst in out.items():
        cats = set().union(*lst)
        res[str(k)] = {cat: statistics.median([c.get(cat, 0) for c in lst]) for cat in sorted(cats)}
    return res


def one(kind, order):
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    work = make_work(kind)
    reps = BLOCK if kind != "step" else 2 * BLOCK
    for _ in range(20):
        for _, fn in work:
            fn()
    torch.cuda.synchronize()

    def timed(fn):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def plain(times):
        for _ in range(reps):
            for k, fn in work:
                times[k].append(timed(fn))

    def session(sess, times, path):
        full = sess == "full"
        warm = len(work)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=warm, active=reps * len(work), repeat=1),
                     on_trace_ready=(lambda p: p.export_chrome_trace(path)) if path else (lambda p: None),
                     record_shapes=full, profile_memory=full) as prof:
            n = 0
            for _ in range(reps + 1):
                for k, fn in work:
                    dt = timed(fn)
                    if n >= warm:
                        times[k].append(dt)
                    n += 1
                    prof.step()

    blocks = {b: {k: [] for k, _ in work} for b in ("off0", "full", "default", "off")}
    plain(blocks["off0"])  # before torch.profiler first attaches CUPTI
    tmp = tempfile.mkdtemp(prefix="pd_tec_")
    seq = [k for k, _ in work] * (reps + 1)
    result = {"kind": kind, "order": order, "device": torch.cuda.get_device_name(0),
              "torch": torch.__version__, "rounds": ROUNDS, "steps_per_block": reps}
    for rnd in range(ROUNDS):
        sessions = ["full", "default"] if (order == "full_first") == (rnd % 2 == 0) else ["default", "full"]
        for sess in sessions:
            path = os.path.join(tmp, sess + ".json") if rnd == 0 else None
            session(sess, blocks[sess], path)
            if path:
                result[sess + "_events"] = count_events(path, seq)
                os.unlink(path)
            plain(blocks["off"])  # CUPTI attached, nothing recorded
    os.rmdir(tmp)
    for b, times in blocks.items():
        result[b] = {str(k): statistics.median(v) for k, v in times.items()}
    print(json.dumps(result))


def measure(kind, order):
    return json.loads(run_fresh(__file__, [kind, order], "torch_event_cost").strip().splitlines()[-1])


def events_of(ev, cats):
    return sum(ev.get(c, 0) for c in cats)


def counts(ev):
    return [events_of(ev, c) for c in (OP_CATS, CALL_CATS, MEM_CATS)]


def slope(res, block, base, sess_events):
    """(added ns, [ops, calls, memory records]) per step of block against base, K=256 less K=16."""
    lo, hi = str(KS[0]), str(KS[1])
    ev = res[sess_events + "_events"]
    d = [h - l for h, l in zip(counts(ev[hi]), counts(ev[lo]))]
    added = ((res[block][hi] - res[base][hi]) - (res[block][lo] - res[base][lo])) * 1e9
    return added, d


def solve(eqs, unknowns):
    """Least squares of added = sum(cost_i * count_i) over the first `unknowns` counts: the
    normal equations, by Gaussian elimination with partial pivoting (no numpy needed)."""
    rows = [(e[1][:unknowns], e[0]) for e in eqs]
    m = [[sum(a[i] * a[j] for a, _ in rows) for j in range(unknowns)] + [sum(a[i] * b for a, b in rows)]
         for i in range(unknowns)]
    for c in range(unknowns):
        p = max(range(c, unknowns), key=lambda r: abs(m[r][c]))
        if m[p][c] == 0:
            return [float("nan")] * unknowns
        m[c], m[p] = m[p], m[c]
        for r in range(unknowns):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][unknowns] / m[i][i] for i in range(unknowns)]


def spread(results, block, base, sess_events, unknowns):
    """The costs (op, call, memory record; the first `unknowns`) from every combination of one
    process per workload present (cpu, gpu, alloc): median, 10th, 90th percentile; None for a
    cost no workload present measures (a call's without gpu)."""
    import itertools
    per_kind = [[slope(r, block, base, sess_events) for r in results if r["kind"] == k] for k in ("cpu", "gpu", "alloc")]
    cols = [i for i in range(unknowns) if i != 1 or per_kind[1]]
    per_kind = [p for p in per_kind if p]
    if len(per_kind) < len(cols) or not per_kind:
        return None
    sols = []
    for c in itertools.product(*per_kind):
        eqs = [(a, [d[i] for i in cols]) for a, d in c]
        sols.append(solve(eqs, len(cols)))
    q = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]
    out = [None] * unknowns
    for j, i in enumerate(cols):
        xs = [sol[j] for sol in sols]
        out[i] = (statistics.median(xs), q(xs, 0.1), q(xs, 0.9))
    return out


def summarize(results):
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    dev = results[0]["device"] if results else "?"
    n = {k: sum(1 for r in results if r["kind"] == k) for k in KINDS}
    print("torch.profiler cost per event on %s (torch %s), ns; processes per kind: %s" %
          (dev, results[0]["torch"] if results else "?", ", ".join("%s %d" % kv for kv in n.items())))
    print("recording: a profiled block against the unprofiled blocks of the same process after it (CUPTI")
    print("attached in both); attached: those unprofiled blocks against the ones before the first session")
    print("%-9s %-18s %9s %9s %9s" % ("session", "event", "median", "p10", "p90"))
    cost = {}
    for sess, unknowns in (("full", 3), ("default", 2)):
        sp = spread(results, sess, "off", sess, unknowns)
        if sp is None:
            continue
        cost[sess] = [x[0] if x else 0.0 for x in sp] + [0.0] * (3 - unknowns)
        for name, x in zip(("op", "traced CUDA call", "memory record"), sp):
            if x is None:
                print("%-9s %-18s %9s   (no gpu workload)" % (sess, name, "n/a"))
            else:
                print("%-9s %-18s %9.0f %9.0f %9.0f" % (sess, name, *x))
    att = [slope(r, "off", "off0", "default") for r in results if r["kind"] == "gpu"]
    att_call = [a / d[1] for a, d in att if d[1] > 0]
    if att_call:
        print("%-9s %-18s %9.0f %9.0f %9.0f   (min, max)" % ("attached", "CUDA call", med(att_call), min(att_call),
                                                                  max(att_call)))
    for k in ("cpu", "alloc"):
        xs = [a / d[0] for a, d in (slope(r, "off", "off0", "default") for r in results if r["kind"] == k) if d[0] > 0]
        if xs:
            print("%-9s %-18s %9.0f %9.0f %9.0f   (min, max; no CUDA call: should be near 0)" % ("attached", k + " op", med(xs),
                                                                                     min(xs), max(xs)))
    per_cat_op = []  # an op of CAT_INPUTS tensor inputs, whole: the trace does not show its inputs
    for r in (x for x in results if x["kind"] == "cat"):
        d, (d_ops, _, d_mem) = slope(r, "full", "off", "full")
        if d_ops > 0 and "full" in cost:
            per_cat_op.append((d - cost["full"][2] * d_mem) / d_ops)
    if per_cat_op:
        print("%-9s %-18s %9.0f %9.0f %9.0f   (min, max; an op of %d tensor inputs, its memory records out)" % (
            "full", "cat op", med(per_cat_op), min(per_cat_op), max(per_cat_op), CAT_INPUTS))
    steps = [r for r in results if r["kind"] == "step"]
    if steps and cost:
        c_att = med(att_call) if att_call else 0.0
        print("\nthe training step (plain_b64), us per step: added against the unprofiled blocks before the first")
        print("session, measured (median over processes) and predicted from the costs above and the step's events")
        print("%-9s %9s %9s %9s %7s %6s %6s %6s" % ("session", "off0", "measured", "predicted", "ratio", "ops", "calls",
                                                   "mem"))
        for sess in ("full", "default", "off"):
            ev_sess = sess if sess != "off" else "default"
            meas, pred, cnt = [], [], []
            for r in steps:
                c = counts(r[ev_sess + "_events"]["0"])
                meas.append((r[sess]["0"] - r["off0"]["0"]) * 1e6)
                rec = sum(x * y for x, y in zip(cost.get(sess, [0.0, 0.0, 0.0]), c)) if sess != "off" else 0.0
                pred.append((rec + c_att * c[1]) / 1e3)
                cnt.append(c)
            m, p = med(meas), med(pred)
            print("%-9s %9.1f %9.1f %9.1f %7.2f %6.0f %6.0f %6.0f" % (
                sess if sess != "off" else "attached", med([r["off0"]["0"] * 1e6 for r in steps]), m, p,
                m / p if p else float("nan"), *[med([c[i] for c in cnt]) for i in range(3)]))
            print("          per process measured: %s" % ", ".join("%.0f" % x for x in meas))
    return cost


def refuse(msg):
    print("torch_event_cost: " + msg, file=sys.stderr)
    sys.exit(2)


def load_kept(path):
    """A --json file, checked before any arithmetic: a list of process objects, each with a
    known kind, every block's median a positive step time under 10 s per K, event counts
    from 0 to 10**7."""
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        refuse("cannot read %s: %s" % (path, e))
    ks = lambda kind: ["0"] if kind == "step" else [str(k) for k in KS]
    if not isinstance(res, list) or not res:
        refuse("%s holds no process objects" % path)
    for i, r in enumerate(res):
        ok = isinstance(r, dict) and r.get("kind") in KINDS
        for b in ("off0", "off", "full", "default") if ok else ():
            blk = r.get(b)
            ok = ok and isinstance(blk, dict) and all(
                isinstance(blk.get(k), (int, float)) and 0 < blk[k] < 10 for k in ks(r["kind"]))
        for sess in ("full", "default") if ok else ():
            ev = r.get(sess + "_events")
            ok = ok and isinstance(ev, dict) and all(
                isinstance(ev.get(k), dict) and all(isinstance(v, (int, float)) and 0 <= v <= 1e7
                                                    for v in ev[k].values()) for k in ks(r["kind"]))
        if not ok:
            refuse("%s: process %d is not a torch_event_cost result (kind, blocks of step seconds in "
                   "(0, 10), event counts in [0, 1e7])" % (path, i))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, metavar=("KIND", "ORDER"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated workloads (default: all)")
    ap.add_argument("--summarize", metavar="JSON", help="print the table from a kept --json file")
    a = ap.parse_args()
    if a.summarize:
        summarize(load_kept(a.summarize))
        return
    if a.one:
        kind, order = a.one
        if kind not in KINDS:
            refuse("KIND must be one of %s, got '%s'" % (", ".join(KINDS), kind))
        if order not in ("full_first", "default_first"):
            refuse("ORDER must be full_first or default_first, got '%s'" % order)
        one(kind, order)
        return
    if not 1 <= a.runs <= 100:
        refuse("--runs must be 1 to 100, got %d" % a.runs)
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        refuse("no directory for --json %s" % a.json)
    kinds_run = tuple(a.kinds.split(","))
    for k in kinds_run:
        if k not in KINDS:
            refuse("--kinds: unknown workload '%s' (known: %s)" % (k, ", ".join(KINDS)))
    results = []
    for i in range(a.runs):
        order = "full_first" if i % 2 == 0 else "default_first"
        kinds = kinds_run[i % len(kinds_run):] + kinds_run[:i % len(kinds_run)]
        for kind in kinds:
            results.append(measure(kind, order))
            print("torch_event_cost: run %d/%d %s done" % (i + 1, a.runs, kind), file=sys.stderr)
            if a.json:  # after every process, so a run cut short keeps what it measured
                with open(a.json, "w") as f:
                    json.dump(results, f, indent=1)
    summarize(results)


if __name__ == "__main__":
    main()
