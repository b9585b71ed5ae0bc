#!/usr/bin/env bash
# pin_check.sh BUILD_DIR OUT_DIR [ROUNDS]: does pinning the launching thread to the fastest
# CPU (profiler_demo --pin_cpu, pd_host_pin_fastest) remove the slow state between
# processes? On a GPU host: ROUNDS (default 12) rounds of clean and tiny_ops, each round one
# fresh process without the pin and one with it (order alternating), the flags of
# baselines/acceptance.args. Prints, per scenario and mode, the spread of the runs' p10 step
# (min, median, max, coefficient of variation) and how many runs sit over 1.15x the fastest
# run of the scenario (the slow state), and for pinned runs the per-CPU loop times the pin
# saw (fastest/median/slowest). Raw metrics JSONs stay in OUT_DIR. About 5 s a round.
# Exit 0; 1 a run failed; 2 bad usage; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: bench/gate/pin_check.sh BUILD_DIR OUT_DIR [ROUNDS]"
build=${1:?$usage}
out=${2:?$usage}
rounds=${3:-12}
case "$rounds" in '' | *[!0-9]*) echo "pin_check: ROUNDS must be a whole number, got '$rounds'" >&2; exit 2 ;; esac
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "pin_check: no program at $demo (build first)" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "pin_check: no GPU visible" >&2; exit 3; }
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
read -r -a args <<<"$(grep -v '^[[:space:]]*#' baselines/acceptance.args | tr '\n' ' ')"
mkdir -p "$out" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for ((r = 1; r <= rounds; r++)); do
  for s in clean tiny_ops; do
    modes=(free pinned)
    [ $((r % 2)) -eq 0 ] && modes=(pinned free)
    for m in "${modes[@]}"; do
      flag=()
      [ "$m" = pinned ] && flag=(--pin_cpu)
      "$demo" --scenario "$s" "${args[@]}" "${flag[@]}" --quiet --trace_dir "$tmp/t" \
        --output_json "$out/${s}_${m}_$r.json" >"$tmp/log" 2>&1 || { echo "pin_check: $s $m round $r failed"; tail -3 "$tmp/log"; failed=1; }
      rm -rf "$tmp/t"
    done
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics as st, sys
d, rounds = sys.argv[1], int(sys.argv[2])
for s in ("clean", "tiny_ops"):
    rows = {}
    for m in ("free", "pinned"):
        p10, spread = [], []
        for r in range(1, rounds + 1):
            try:
                j = json.load(open(f"{d}/{s}_{m}_{r}.json"))
            except Exception:
                continue
            t = sorted(j.get("step_times_s") or [])
            if not t:
                continue
            p10.append(t[len(t) // 10] * 1e6)
            hc = j.get("host_calibration") or {}
            if hc.get("pinned_cpu") is not None:
                spread.append((hc["pin_fastest_ns"] / 1e3, hc["pin_median_ns"] / 1e3, hc["pin_slowest_ns"] / 1e3))
        rows[m] = (p10, spread)
    fastest = min(min(v[0]) for v in rows.values() if v[0])
    for m, (p10, spread) in rows.items():
        if not p10:
            print(f"{s:8s} {m:6s} no runs"); continue
        q = sorted(p10)
        cv = st.pstdev(q) / st.fmean(q)
        slow = sum(1 for x in q if x > 1.15 * fastest)
        line = (f"{s:8s} {m:6s} runs {len(q):2d}  p10 min {q[0]:7.1f} median {st.median(q):7.1f} max {q[-1]:7.1f} us"
                f"  cv {100 * cv:4.1f}%  slow (>1.15x fastest) {slow}/{len(q)}")
        if spread:
            f = st.median(x[0] for x in spread); md = st.median(x[1] for x in spread); sl = st.median(x[2] for x in spread)
            line += f"  pin loop us: fastest {f:.1f} median {md:.1f} slowest {sl:.1f}"
        print(line)
PY
exit "$failed"
