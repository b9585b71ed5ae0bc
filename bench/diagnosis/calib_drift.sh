#!/usr/bin/env bash
# calib_drift.sh BUILD_DIR OUT_DIR [RUNS=6] [SCENARIO=sync]: does the profiler's calibration,
# taken once at start, tell what tracing costs the profiled window? GPU host; about 5 s a run.
#
# RUNS fresh profiled runs of one scenario (the acceptance flags). Per run it prints:
#   calib      profiler_cost.calibration.ns_per_cuda_call (traced - untraced launch, at start)
#   window     ns_per_cuda_call_window: calib moved by the window's traced launch records
#              against the calibration's own (pd_prof_cost_window_call_ns: recorded, not
#              used; "-" where not recorded)
#   end        ns_per_cuda_call_end: the same calibration run again right after the window
#              ("-" where not recorded)
#   launch     the median cudaLaunchKernel duration in the trace's steps (traced, in the window)
#   est        profiler_cost.est_added_us_per_step (calib for every call)
#   est_win    the same with window for every call
#   est_end    the same with end for every call and ns_per_host_range_end for every range
#   est_mid    the same with the mean of calib and end (call and range)
#   added      mean profiled iteration - mean of the same process's unprofiled iterations
#              (step_periods_s against warmup_periods_s, the first and last of each left out)
#   predicted  the replay's predicted unprofiled step against the same process's (error)
# and, over the runs, the correlation of calib, end, launch and each estimate with added, and
# the median |estimate - added|. A cost figure that tracks the window moves with added
# (docs/diagnosis.md).
# Runs and traces are kept in OUT_DIR. Exit: 0; 1 a run failed; 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: bench/diagnosis/calib_drift.sh BUILD_DIR OUT_DIR [RUNS=6] [SCENARIO=sync]"
[ "$#" -ge 2 ] || { echo "$usage" >&2; exit 2; }
build=$1
out=$2
runs=${3:-6}
scenario=${4:-sync}
case "$runs" in '' | *[!0-9]* | 0) echo "calib_drift: RUNS must be a positive whole number, got '$runs'" >&2; exit 2 ;; esac
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "calib_drift: no $demo: build the tree first" >&2; exit 2; }
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
args=()
pd_args_read baselines/acceptance.args args
mkdir -p "$out" || exit 2
for r in $(seq 1 "$runs"); do
  if ! "$demo" "${args[@]}" --scenario "$scenario" --trace_dir "$out/trace.$r" --output_json "$out/run.$r.json" \
    --quiet >"$out/run.$r.log" 2>&1; then
    echo "calib_drift: run $r failed:" >&2
    tail -5 "$out/run.$r.log" >&2
    exit 1
  fi
done
python3 - "$out" "$runs" <<'PY'
import glob, gzip, json, statistics as st, sys
out, runs = sys.argv[1], int(sys.argv[2])
def corr(x, y):
    pairs = [(a, b) for a, b in zip(x, y) if a == a and b == b]
    try:
        return st.correlation([p[0] for p in pairs], [p[1] for p in pairs]) if len(pairs) >= 3 else float("nan")
    except st.StatisticsError:  # one side constant
        return float("nan")
rows = []
nan = float("nan")
print(f"{'run':>3s} {'calib ns':>9s} {'window':>7s} {'end':>7s} {'launch us':>9s} {'est us':>7s} {'est_win':>8s} "
      f"{'est_end':>8s} {'est_mid':>8s} {'added us':>9s} {'pred/same':>10s}")
def fmt(v, w):
    return f"{'-':>{w}s}" if v != v else f"{v:{w}.1f}"
for r in range(1, runs + 1):
    d = json.load(open(f"{out}/run.{r}.json"))
    pc = d.get("profiler_cost") or {}
    cj = pc.get("calibration") or {}
    cal = cj.get("ns_per_cuda_call")
    cal = nan if cal is None else cal
    win = cj.get("ns_per_cuda_call_window")
    rng = cj.get("ns_per_host_range") or 0.0
    end = cj.get("ns_per_cuda_call_end")
    end = nan if end is None else end
    rng_end = cj.get("ns_per_host_range_end")
    rng_end = nan if rng_end is None else rng_end
    est = pc.get("est_added_us_per_step")
    steps = pc.get("steps") or 0
    calls, ranges = pc.get("api_calls") or 0, pc.get("host_ranges") or 0
    def est_with(call_ns, range_ns):
        return (calls * call_ns + ranges * range_ns) / steps / 1e3 if steps else nan
    est_win = est_with(win, rng) if win is not None else nan
    est_end = est_with(end, rng_end)
    est_mid = est_with((cal + end) / 2, (rng + rng_end) / 2)
    sp = [p for p in (d.get("step_periods_s") or [])[1:-1] if p]
    wp = [p for p in (d.get("warmup_periods_s") or [])[1:] if p]
    added = (st.fmean(sp) - st.fmean(wp)) * 1e6 if sp and wp else nan
    pred = ((d.get("verdict") or {}).get("replay") or {}).get("predicted_unprofiled_step_us")
    same = st.fmean(wp) * 1e6 if wp else nan
    tr = sorted(glob.glob(f"{out}/trace.{r}/*.json*"))
    launch = nan
    if tr:
        f = gzip.open(tr[-1]) if tr[-1].endswith(".gz") else open(tr[-1])
        ev = json.load(f)["traceEvents"]
        steps_ts = [(e["ts"], e["ts"] + e["dur"]) for e in ev
                    if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
        ls = [e["dur"] for e in ev if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaLaunchKernel"
              and any(a <= e["ts"] < b for a, b in steps_ts)]
        launch = st.median(ls) if ls else nan
    err = f"{100 * (pred / same - 1):+.1f}%" if pred and same == same else "-"
    est = nan if est is None else est
    rows.append((cal, launch, est, est_win, added, end, est_end, est_mid))
    print(f"{r:3d} {fmt(cal, 9)} {fmt(nan if win is None else win, 7)} {fmt(end, 7)} {launch:9.2f} {fmt(est, 7)} "
          f"{fmt(est_win, 8)} {fmt(est_end, 8)} {fmt(est_mid, 8)} {fmt(added, 9)} {err:>10s}")
col = list(zip(*rows)) if rows else [[]] * 8
a = col[4]
def mad(e):
    v = [abs(x - y) for x, y in zip(e, a) if x == x and y == y]
    return st.median(v) if v else nan
print(f"correlation with added: calib {corr(col[0], a):+.2f}, end {corr(col[5], a):+.2f}, in-window launch "
      f"{corr(col[1], a):+.2f}, est {corr(col[2], a):+.2f}, est_win {corr(col[3], a):+.2f}, est_end "
      f"{corr(col[6], a):+.2f}, est_mid {corr(col[7], a):+.2f} ({len(rows)} runs)")
print(f"median |estimate - added|: est {mad(col[2]):.1f} us, est_win {mad(col[3]):.1f} us, "
      f"est_end {mad(col[6]):.1f} us, est_mid {mad(col[7]):.1f} us")
PY
