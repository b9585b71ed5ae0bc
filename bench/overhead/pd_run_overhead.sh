#!/usr/bin/env bash
# pd_run_overhead.sh BUILD_DIR OUT_DIR [ROUNDS] [MODES]: where pd_run's added time on a PyTorch step
# goes, measured two ways, side by side with torch.profiler. GPU host with torch; about
# 40 s per round.
#
# One program (tests/torch/train_step.py, plain_b64: AMP, the same steps), fresh processes,
# the modes in a rotating order each round:
#   off     unprofiled
#   kernel  pd_run --step_kernel amp_update_scale (CUPTI's launch callback held all run)
#   range   pd_run --step_range train_step (program opens an NVTX range per step; CUPTI
#           attached only for the profiled window)
#   konly   as range, kernels only (PD_CUPTI_OPTIONS=kernels_only: no API records)
#   cbapi   as range, the API records from CUPTI's callbacks on the recorded calls only
#           (PD_CUPTI_OPTIONS=callback_api) instead of its RUNTIME and DRIVER activity kinds
#   tdef    torch.profiler, defaults
#   tfull   torch.profiler, record_shapes + profile_memory
#   tcuda   torch.profiler, activities=[CUDA] only: kineto's CUPTI capture without its op
#           recording, the like-for-like comparison with ours
# Every process times its profiled steps (W+1..W+N-1) and its unprofiled steps 2..W-1, each
# between two synchronizes. Added time per step, two ways:
#   across  mean profiled step minus the same round's unprofiled process (median over rounds)
#   within  mean profiled step minus the same process's unprofiled steps (median over rounds)
# "within" cancels the 15-25% between processes (docs/gate.md); under --step_kernel its
# unprofiled steps already carry CUPTI's attached cost, so "within" misses that part there.
# MODES (comma-separated, default all eight) runs only those; "off" is always run, since
# "across" is measured against it.
# A second table splits the within-process added time by where it goes (train_step.py's
# phases of each step: the host's part, the wait for the GPU, the main thread's and the
# process's CPU time), which says whether a record's cost is the launching thread's work,
# a wait, or the GPU's.
# Also printed: pd_run's profiler_cost estimate (est_added_us_per_step, its source), the added
# time it measured in its own process (measured_added_us_per_step: median recorded step
# against median untraced step before the window, as its library timed them) and records
# per step, and the estimate's error against the added time measured each way. Exit 0; 2
# bad setup.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
# shellcheck source=bench/overhead/pd_run_bench.sh
. bench/overhead/pd_run_bench.sh
pdb_args pd_run_overhead "usage: bench/overhead/pd_run_overhead.sh BUILD_DIR OUT_DIR [ROUNDS] [MODES]" 4 "$@"
all_modes=(off kernel range konly cbapi tdef tfull tcuda)
modes=(off)
if [ -n "${4:-}" ]; then
  IFS=, read -r -a want <<<"$4"
  for w in "${want[@]}"; do
    case " ${all_modes[*]} " in *" $w "*) ;; *) echo "pd_run_overhead: unknown mode '$w' (one of: ${all_modes[*]})" >&2; exit 2 ;; esac
    [ "$w" = off ] || modes+=("$w")
  done
else
  modes=("${all_modes[@]}")
fi
pdb_ready pd_run_overhead
mkdir -p "$out/json" "$out/logs" "$out/traces" || exit 2
sched=(--skip_first "$W" --wait 0 --warmup 1 --active "$N")
# the calibration's cold launches (off by default) for the hot/cold table below
export PD_PROF_CALIBRATE_COLD=1
for r in $(seq 1 "$rounds"); do
  order=()
  for i in "${!modes[@]}"; do order+=("${modes[$(((i + r - 1) % ${#modes[@]}))]}"); done
  for m in "${order[@]}"; do
    t=$out/json/timing_${m}_$r.json
    j=$out/json/pd_${m}_$r.json
    args=(python3 "$step" --warmup "$W" --active "$N" --timing_json "$t")
    pd=("$pd_run" --trace_dir "$out/traces" --output_json "$j" "${sched[@]}")
    case $m in
      off) "${args[@]}" ;;
      kernel) "${pd[@]}" --step_kernel amp_update_scale -- "${args[@]}" ;;
      range) "${pd[@]}" --step_range train_step -- "${args[@]}" --nvtx ;;
      konly) PD_CUPTI_OPTIONS=kernels_only "${pd[@]}" --step_range train_step -- "${args[@]}" --nvtx ;;
      cbapi) PD_CUPTI_OPTIONS=callback_api "${pd[@]}" --step_range train_step -- "${args[@]}" --nvtx ;;
      tdef) "${args[@]}" --torch_profiler default ;;
      tfull) "${args[@]}" --torch_profiler full ;;
      tcuda) "${args[@]}" --torch_profiler cuda ;;
    esac >"$out/logs/${m}_$r.log" 2>&1 || echo "pd_run_overhead: $m round $r failed (log $out/logs/${m}_$r.log)"
  done
done
python3 - "$out/json" "$rounds" "${all_modes[@]}" <<'PY'
import json, os, statistics as st, sys
d, rounds = sys.argv[1], int(sys.argv[2])
modes = sys.argv[3:]  # all_modes above: a mode not run reads as nan
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
t = {(m, r): load(f"{d}/timing_{m}_{r}.json") for m in modes for r in range(1, rounds + 1)}
pdj = {(m, r): load(f"{d}/pd_{m}_{r}.json") for m in modes for r in range(1, rounds + 1)}  # pd_run's metrics
def not_run_or_na(m, what, width):
    """A mode's line where none of its rounds gave the table's figures."""
    ran = any(t[(m, r)] for r in range(1, rounds + 1))
    print(f"{m:7s} {f'n/a (no {what} in its timing JSONs)' if ran else 'not run':>{width}s}")
def mean_us(x):
    return st.fmean(x) * 1e3
print(f"{'mode':7s} {'step us':>9s} {'pre us':>9s} {'across us':>10s} {'within us':>10s} {'est us':>8s} {'meas us':>8s} {'est from':>12s} {'rec/step':>9s}  rounds (within)")
res = {}
for m in modes:
    step, pre, across, within, est, meas, src, rps = [], [], [], [], [], [], [], []
    for r in range(1, rounds + 1):
        x, off = t[(m, r)], t[("off", r)]
        if not x or not x.get("step_ms") or len(x.get("pre_step_ms", [])) < 3:
            continue
        step.append(mean_us(x["step_ms"]))
        pre.append(mean_us(x["pre_step_ms"]))
        within.append(step[-1] - pre[-1])
        if off and off.get("step_ms"):
            across.append(step[-1] - mean_us(off["step_ms"]))
        j = pdj[(m, r)]
        c = (j or {}).get("profiler_cost") or {}
        if isinstance(c.get("est_added_us_per_step"), (int, float)):
            est.append(c["est_added_us_per_step"])
            src.append(str(c.get("est_source", "calibration")))
        if isinstance(c.get("measured_added_us_per_step"), (int, float)):
            meas.append(c["measured_added_us_per_step"])
        if isinstance(c.get("records_per_step"), (int, float)):
            rps.append(c["records_per_step"])
    med = lambda v: st.median(v) if v else float("nan")
    res[m] = {"across": med(across), "within": med(within), "est": med(est), "meas": med(meas)}
    print(f"{m:7s} {med(step):9.1f} {med(pre):9.1f} {med(across):10.1f} {med(within):10.1f} {med(est):8.1f} {med(meas):8.1f} "
          f"{(src[0] if src else '-'):>12s} {med(rps):9.0f}  {' '.join(f'{w:.0f}' for w in within)}")
for ours in ("kernel", "range", "cbapi", "tcuda"):
    for how in ("across", "within"):
        a = res[ours][how]
        print(f"{ours:6s} / torch ({how:6s}): default {a / res['tdef'][how]:.3f}  shapes+mem {a / res['tfull'][how]:.3f}"
              if res["tdef"][how] > 0 and res["tfull"][how] > 0 else f"{ours} {how}: n/a")
# Where the within-process added time goes (train_step.py's phases of each step): the
# host's part (until the step's last launch returns), the wait for the GPU after it, the
# main thread's CPU time in the host's part, the process's CPU time over the step (CUPTI's
# threads too). Profiled minus unprofiled steps of the same process, median over rounds;
# off's row is the drift between a process's early and late steps.
print()
print("where the added time goes (within, us per step):")
print(f"{'mode':7s} {'step':>8s} {'host':>8s} {'gpu wait':>9s} {'host cpu':>9s} {'proc cpu':>9s}  rounds")
keys = ("step_ms", "host_ms", "host_cpu_ms", "proc_cpu_ms")
for m in modes:
    rows = []
    for r in range(1, rounds + 1):
        x = t[(m, r)]
        if not x or any(not x.get(k) or len(x.get("pre_" + k, [])) < 3 for k in keys):
            continue
        dl = {k: mean_us(x[k]) - mean_us(x["pre_" + k]) for k in keys}
        rows.append((dl["step_ms"], dl["host_ms"], dl["step_ms"] - dl["host_ms"], dl["host_cpu_ms"], dl["proc_cpu_ms"]))
    if not rows:
        not_run_or_na(m, "phases", 44)
        continue
    col = lambda i: st.median(r[i] for r in rows)
    print(f"{m:7s} {col(0):8.1f} {col(1):8.1f} {col(2):9.1f} {col(3):9.1f} {col(4):9.1f}  {len(rows)}")
print()
# The scheduler's view (train_step.py's per-thread figures from /proc, per step, profiled
# minus unprofiled steps of the same process, median over rounds): the main thread's time
# on a CPU, its time waiting runnable for one, its voluntary (it blocked) and involuntary
# (preempted) switches, and the other threads' time on a CPU, the three busiest by name.
print("the scheduler's view (within, per step; us, switches):")
print(f"{'mode':7s} {'main run':>9s} {'main wait':>10s} {'main vol':>9s} {'main inv':>9s} {'others run':>11s}  busiest others (name: us)")
def agg(th):
    """One window's threads: the main thread's run and wait (us) and switches, the others' run by name."""
    main = [e for e in th if e.get("main")]
    mm = main[0] if main else {}
    others = {}
    for e in th:
        if not e.get("main"):
            others[e["name"]] = others.get(e["name"], 0.0) + e["run_ns"] / 1e3
    return (mm.get("run_ns", 0) / 1e3, mm.get("wait_ns", 0) / 1e3, mm.get("vol", 0), mm.get("invol", 0), others)
for m in modes:
    rows, names = [], {}
    for r in range(1, rounds + 1):
        x = t[(m, r)]
        if not x or not x.get("threads") or not x.get("pre_threads"):
            continue
        a, b = agg(x["pre_threads"]), agg(x["threads"])
        rows.append([b[i] - a[i] for i in range(4)] + [sum(b[4].values()) - sum(a[4].values())])
        for n in set(a[4]) | set(b[4]):
            names.setdefault(n, []).append(b[4].get(n, 0.0) - a[4].get(n, 0.0))
    if not rows:
        not_run_or_na(m, "thread figures", 50)
        continue
    col = lambda i: st.median(r[i] for r in rows)
    top = sorted(((st.median(v), n) for n, v in names.items()), reverse=True)[:3]
    print(f"{m:7s} {col(0):9.1f} {col(1):10.1f} {col(2):9.2f} {col(3):9.2f} {col(4):11.1f}  "
          + ", ".join(f"{n}: {v:.0f}" for v, n in top))
print()
# The calibration's launches, hot (the tight loop) and cold (each after a cache-evicting
# walk), untraced and traced, ns per launch; what each adds per launch times the GPU
# activities a step recorded, set beside the added time measured (within).
print("calibration: ns per empty-kernel launch, hot and cold; added x GPU activities per step (us):")
print(f"{'mode':7s} {'hot off':>8s} {'hot on':>8s} {'cold off':>9s} {'cold on':>8s} {'acts/step':>10s} {'hot x acts':>11s} {'cold x acts':>12s} {'within':>8s}")
for m in modes:
    v = {k: [] for k in ("ho", "hn", "co", "cn", "acts")}
    for r in range(1, rounds + 1):
        c = ((pdj[(m, r)] or {}).get("profiler_cost") or {})
        cal = c.get("calibration") or {}
        for k, key in (("ho", "ns_per_launch_untraced"), ("hn", "ns_per_launch_traced"),
                       ("co", "ns_per_launch_cold_untraced"), ("cn", "ns_per_launch_cold_traced")):
            if isinstance(cal.get(key), (int, float)):
                v[k].append(cal[key])
        if isinstance(c.get("gpu_activities"), (int, float)) and isinstance(c.get("steps"), (int, float)) and c["steps"] > 0:
            v["acts"].append(c["gpu_activities"] / c["steps"])
    if not v["hn"]:
        continue
    md = {k: (st.median(x) if x else float("nan")) for k, x in v.items()}
    print(f"{m:7s} {md['ho']:8.0f} {md['hn']:8.0f} {md['co']:9.0f} {md['cn']:8.0f} {md['acts']:10.1f} "
          f"{(md['hn'] - md['ho']) * md['acts'] / 1e3:11.1f} {(md['cn'] - md['co']) * md['acts'] / 1e3:12.1f} {res[m]['within']:8.1f}")
print()
# the estimate against the added time measured three ways (target: within 25%)
for ours in ("kernel", "range", "cbapi"):
    e = res[ours]["est"]
    errs = [f"{how} {(e / res[ours][how] - 1) * 100:+.0f}%" for how in ("across", "within", "meas")
            if res[ours][how] > 0 and e == e]
    print(f"{ours:6s} estimate {e:.1f} us against: " + (", ".join(errs) if errs else "n/a"))
PY
