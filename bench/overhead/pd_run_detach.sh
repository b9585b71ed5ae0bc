#!/usr/bin/env bash
# pd_run_detach.sh BUILD_DIR OUT_DIR [ROUNDS]: what pd_run --step_kernel costs the steps
# after its schedule. GPU host with torch; about 30 s per round.
#
# --step_kernel sees steps through CUPTI's launch callback, which every launch pays. Once
# the schedule's last cycle is written and 16 untraced steps after it are timed, the
# library writes its outputs and detaches CUPTI (docs/inject.md). One program
# (tests/torch/train_step.py, plain_b64: AMP), fresh processes, rotating order each round:
#   off       unprofiled
#   held      pd_run --step_kernel amp_update_scale --skip_first 1000: the schedule never
#             comes, so every step pays the callback (what all steps paid before the detach)
#   detached  pd_run --step_kernel amp_update_scale --wait 0 --warmup 1 --active 3: cycle
#             at steps 1..3, untraced tail to step 19, CUPTI let go of at step 19's end
# Each process times steps 25..53 (after the detach), each between two synchronizes.
# Printed: per mode the median over rounds of the timed steps' mean, the added time against
# the same round's unprofiled process, and each round's figure. Exit 0; 2 bad setup.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
# shellcheck source=bench/overhead/pd_run_bench.sh
. bench/overhead/pd_run_bench.sh
pdb_args pd_run_detach "usage: bench/overhead/pd_run_detach.sh BUILD_DIR OUT_DIR [ROUNDS]" 4 "$@"
pdb_ready pd_run_detach
W=24
N=30
mkdir -p "$out/json" "$out/logs" "$out/traces" || exit 2
modes=(off held detached)
for r in $(seq 1 "$rounds"); do
  order=()
  for i in "${!modes[@]}"; do order+=("${modes[$(((i + r - 1) % ${#modes[@]}))]}"); done
  for m in "${order[@]}"; do
    args=(python3 "$step" --warmup "$W" --active "$N" --timing_json "$out/json/timing_${m}_$r.json")
    pd=("$pd_run" --trace_dir "$out/traces" --output_json "$out/json/pd_${m}_$r.json" --step_kernel amp_update_scale)
    case $m in
      off) "${args[@]}" ;;
      held) "${pd[@]}" --skip_first 1000 -- "${args[@]}" ;;
      detached) "${pd[@]}" --wait 0 --warmup 1 --active 3 -- "${args[@]}" ;;
    esac >"$out/logs/${m}_$r.log" 2>&1 || echo "pd_run_detach: $m round $r failed (log $out/logs/${m}_$r.log)"
  done
  grep -q "letting go of CUPTI" "$out/logs/detached_$r.log" ||
    echo "pd_run_detach: round $r: the detached run did not let go of CUPTI (log $out/logs/detached_$r.log)"
done
python3 - "$out/json" "$rounds" <<'PY'
import json, statistics as st, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def mean_us(m, r):
    try:
        x = json.load(open(f"{d}/timing_{m}_{r}.json"))
        return st.fmean(x["step_ms"]) * 1e3 if x.get("step_ms") else None
    except Exception:
        return None
med = lambda v: st.median(v) if v else float("nan")
off = med([x for x in (mean_us("off", r) for r in range(1, rounds + 1)) if x is not None])
print(f"{'mode':9s} {'step us':>9s} {'added us':>9s} {'added %':>8s}  rounds (added us)")
for m in ("off", "held", "detached"):
    step, added = [], []
    for r in range(1, rounds + 1):
        s, o = mean_us(m, r), mean_us("off", r)
        if s is None:
            continue
        step.append(s)
        if o is not None:
            added.append(s - o)
    print(f"{m:9s} {med(step):9.1f} {med(added):9.1f} {100 * med(added) / off:7.1f}%  {' '.join(f'{a:.0f}' for a in added)}")
PY
