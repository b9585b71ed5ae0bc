#!/usr/bin/env bash
# gate_data.sh BUILD_DIR OUT_DIR [BASE_RUNS] [AB_ROUNDS] [GPU_RUNS]: records on this GPU
# host the metrics JSONs the regression gate's policies and power figures are made from,
# so they can be recomputed anywhere (profile_compare reads JSON only):
#  - base/<scenario>/<i>.json: BASE_RUNS (default 5) runs of every scenario, round after
#    round, with baselines/acceptance.args: this host's contribution to a pooled baseline;
#  - ab/<round>/{a,b,h3,h5}.json: AB_ROUNDS (default 20) rounds of clean runs in a rotating
#    order: two unchanged runs (a, b: an A/B with no change), --inject_slowdown 0.03 (h3)
#    and 0.05 (h5);
#  - gpu/<level>/<i>.json: GPU_RUNS (default 0) clean runs with --inject_gpu_slowdown
#    0.03 and 0.10.
# Three unmeasured warm-up runs first (as scripts/gpu_acceptance.sh). Traces are deleted.
# Exit 0 when every run succeeded, 1 a run failed, 2 bad usage, 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${1:?usage: gate_data.sh BUILD_DIR OUT_DIR [BASE_RUNS] [AB_ROUNDS] [GPU_RUNS]}
out=${2:?usage: gate_data.sh BUILD_DIR OUT_DIR [BASE_RUNS] [AB_ROUNDS] [GPU_RUNS]}
base_runs=${3:-5} ab_rounds=${4:-20} gpu_runs=${5:-0}
for v in "$base_runs" "$ab_rounds" "$gpu_runs"; do
  case "$v" in '' | *[!0-9]*) echo "gate_data: run counts must be whole numbers, got '$v'" >&2; exit 2 ;; esac
done
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "gate_data: no program at $demo (build first)" >&2; exit 2; }
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
args=() scenarios=()
pd_args_read baselines/acceptance.args args || exit 2
pd_scenario_names "$demo" scenarios || exit 2
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run FILE ARGS...: one profiler_demo run writing FILE.
run() {
  local file=$1
  shift
  pd_demo_run "profiler_demo $*" "$file" "$tmp" "$demo" "$@" "${args[@]}" || exit $?
}

t0=$SECONDS
for i in 1 2 3; do run "$tmp/warm.json" --scenario clean; done
for ((i = 1; i <= base_runs; i++)); do
  for s in "${scenarios[@]}"; do run "$out/base/$s/$i.json" --scenario "$s"; done
done
echo "gate_data: $base_runs baseline runs of ${#scenarios[@]} scenarios in $((SECONDS - t0)) s"
t0=$SECONDS
kinds=(a b h3 h5)
for ((r = 1; r <= ab_rounds; r++)); do
  for ((k = 0; k < 4; k++)); do
    kind=${kinds[$(((k + r) % 4))]}
    case "$kind" in
      a | b) run "$out/ab/$r/$kind.json" --scenario clean ;;
      h3) run "$out/ab/$r/$kind.json" --scenario clean --inject_slowdown 0.03 ;;
      h5) run "$out/ab/$r/$kind.json" --scenario clean --inject_slowdown 0.05 ;;
    esac
  done
done
echo "gate_data: $ab_rounds A/B rounds in $((SECONDS - t0)) s"
t0=$SECONDS
for level in 0.03 0.10; do
  for ((i = 1; i <= gpu_runs; i++)); do
    run "$out/gpu/$level/$i.json" --scenario clean --inject_gpu_slowdown "$level"
  done
done
[ "$gpu_runs" -eq 0 ] || echo "gate_data: $gpu_runs GPU-slowdown runs per level in $((SECONDS - t0)) s"
