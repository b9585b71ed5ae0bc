#!/usr/bin/env bash
# pd_run_census.sh BUILD_DIR OUT_DIR [ROUNDS=2]: which CUDA API calls a PyTorch step makes,
# and what recording them costs. GPU host with torch; about 15 s a process.
#
# One program (tests/torch/train_step.py, plain_b64: AMP, pinned batches), ROUNDS rounds
# of two fresh processes under pd_run --step_range train_step: --profile_level lean (the
# default: launches and the calls that touch the GPU recorded, query calls and the other
# driver calls not) and full (every runtime and driver call recorded). Prints, per process,
# the API calls recorded per step, pd_run's estimate of its added time, the added time it
# measured in its own process and the program's own (its profiled steps against its steps
# 2..13), the warmup's API census (calls per step recorded, and instrumented without being
# recorded, runtime and driver) and the calibration per kind of call; then, from the first
# round's traces, the API calls per step by name in each mode. The difference between the two lists is what CUPTI handles without recording in
# lean (docs/performance.md, "The census"). Runs, traces and JSON are kept in OUT_DIR.
# Exit: 0; 1 a process failed; 2 bad usage or setup.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
# shellcheck source=bench/overhead/pd_run_bench.sh
. bench/overhead/pd_run_bench.sh
pdb_args pd_run_census "usage: bench/overhead/pd_run_census.sh BUILD_DIR OUT_DIR [ROUNDS=2]" 2 "$@"
pdb_ready pd_run_census
mkdir -p "$out" || exit 2
rc=0
for r in $(seq 1 "$rounds"); do
  for lvl in lean full; do
    if ! "$pd_run" --trace_dir "$out/trace_${lvl}_$r" --output_json "$out/pd_${lvl}_$r.json" --skip_first "$W" \
      --wait 0 --warmup 1 --active "$N" --step_range train_step --profile_level "$lvl" -- \
      python3 "$step" --warmup "$W" --active "$N" --nvtx \
      --timing_json "$out/timing_${lvl}_$r.json" >"$out/log_${lvl}_$r.txt" 2>&1; then
      echo "pd_run_census: $lvl round $r failed (log $out/log_${lvl}_$r.txt)" >&2
      rc=1
    fi
  done
done
python3 - "$out" "$rounds" <<'PY'
import collections, glob, gzip, json, statistics as st, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
print(f"{'process':10s} {'api/step':>9s} {'est us':>8s} {'measured us':>12s} {'program us':>11s}"
      f" {'census rec':>10s} {'rt unrec':>9s} {'drv unrec':>9s} {'drv intern':>10s} {'ns launch':>9s} {'ns rec':>7s} {'ns rt':>6s} {'ns drv':>6s}")
for r in range(1, rounds + 1):
    for lvl in ("lean", "full"):
        pd, t = load(f"{out}/pd_{lvl}_{r}.json"), load(f"{out}/timing_{lvl}_{r}.json")
        if not pd or not t:
            print(f"{lvl}_{r:<5d} (missing)")
            continue
        c = pd.get("profiler_cost") or {}
        steps = c.get("steps") or 0
        api = c.get("api_calls", 0) / steps if steps else float("nan")
        est, meas = c.get("est_added_us_per_step"), c.get("measured_added_us_per_step")
        prog = (st.fmean(t["step_ms"]) - st.fmean(t["pre_step_ms"])) * 1e3 if t.get("step_ms") and t.get("pre_step_ms") else float("nan")
        f = lambda v: f"{v:.1f}" if isinstance(v, (int, float)) else "-"
        ce, cal = c.get("api_census") or {}, c.get("calibration") or {}
        print(f"{lvl + '_' + str(r):10s} {api:9.1f} {f(est):>8s} {f(meas):>12s} {prog:11.1f}"
              f" {f(ce.get('recorded_per_step')):>10s} {f(ce.get('runtime_unrecorded_per_step')):>9s}"
              f" {f(ce.get('driver_unrecorded_per_step')):>9s} {f(ce.get('driver_internal_per_step')):>10s}"
              f" {f(cal.get('ns_per_cuda_call')):>9s}"
              f" {f(cal.get('ns_per_recorded_call')):>7s} {f(cal.get('ns_per_unrecorded_runtime_call')):>6s}"
              f" {f(cal.get('ns_per_unrecorded_driver_call')):>6s}")
for lvl in ("lean", "full"):
    tr = sorted(glob.glob(f"{out}/trace_{lvl}_1/*.json*"))
    if not tr:
        continue
    ev = json.load(gzip.open(tr[-1]) if tr[-1].endswith(".gz") else open(tr[-1]))["traceEvents"]
    nsteps = sum(1 for e in ev if str(e.get("name", "")).startswith("ProfilerStep#"))
    n = collections.Counter(e["name"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    print(f"\n{lvl}: {nsteps} steps, {sum(n.values()) / max(1, nsteps):.1f} API calls per step")
    for k, v in n.most_common(25):
        print(f"  {k:52s} {v / max(1, nsteps):7.1f}")
PY
exit $rc
