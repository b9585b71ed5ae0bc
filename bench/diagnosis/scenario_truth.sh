#!/usr/bin/env bash
# scenario_truth.sh: what fixing each planted problem saves, measured without the profiler,
# next to what the replay predicts it saves. Needs a GPU; about 5 minutes on an H100.
#
# For every scenario: one profiled run with the acceptance flags (its metrics JSON holds
# the replay's predicted savings and the predicted unprofiled step), then RUNS pairs of
# unprofiled runs (--no_profile) of the scenario without and with its fix knob, the order
# inside each pair alternating (ABBA), so drift lands on both sides. Every run's metrics
# JSON is kept under OUT_DIR/<scenario>/ with OUT_DIR/meta.json (device, driver, boot id,
# commit, date), so the table regenerates offline:
#
#   python3 bench/diagnosis/truth_table.py OUT_DIR [--torch ANALYZER]
#
# prints case, transformation, measured saving with its 95% interval, predicted saving,
# error and device (docs/diagnosis.md keeps the table); --torch adds the torch.profiler
# fixtures (tests/fixtures/torch/truth.json) analyzed by ANALYZER (profile_analyze).
#
# usage: bench/diagnosis/scenario_truth.sh BUILD_DIR OUT_DIR [RUNS=5]
set -euo pipefail
build=${1:?usage: scenario_truth.sh BUILD_DIR OUT_DIR [RUNS]}
out=${2:?usage: scenario_truth.sh BUILD_DIR OUT_DIR [RUNS]}
runs=${3:-5}
case "$runs" in '' | *[!0-9]* | 0) echo "scenario_truth: RUNS must be a positive integer" >&2; exit 2 ;; esac
cd "$(dirname "$0")/../.."
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "scenario_truth: no $demo" >&2; exit 2; }
command -v python3 > /dev/null || { echo "scenario_truth: needs python3" >&2; exit 2; }
# A build carried here (scripts/gpu_prepare.sh with .gpu_bundle/): its library path.
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
mkdir -p "$out"
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
args=() scenarios=()
pd_args_read baselines/acceptance.args args
pd_scenario_names "$demo" scenarios
fix_of() {
  case "$1" in
    dataloader) echo "--num_workers 4" ;; # twice the scenario's 2 workers: loader_2x
    sync) echo "--no_sync" ;;
    tiny_ops) echo "--tiny_ops_mode graph" ;;
    memory_churn) echo "--allocator pool" ;;
    *) echo "" ;;
  esac
}

smi() { nvidia-smi --query-gpu="$1" --format=csv,noheader 2> /dev/null | head -1 || true; }
python3 - "$out/meta.json" "$(smi name)" "$(smi driver_version)" \
  "$(cut -c1-8 /proc/sys/kernel/random/boot_id 2> /dev/null || true)" \
  "$(head -c 64 "$build/pd_build_commit" 2> /dev/null || git rev-parse --short HEAD 2> /dev/null || echo unknown)" "$runs" <<'PY'
import json, sys, time
path, name, driver, boot, commit, runs = sys.argv[1:]
json.dump({"device": name, "driver": driver, "boot_id": boot, "commit": commit, "runs": int(runs),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, open(path, "w"), indent=1)
PY

run() { # run LOG ARGS...: one profiler_demo run; its log kept, the script stops on failure
  local log=$1
  shift
  if ! "$demo" "$@" --quiet > "$log" 2>&1; then
    echo "scenario_truth: profiler_demo $* failed:" >&2
    tail -5 "$log" >&2
    exit 1
  fi
}

for s in "${scenarios[@]}"; do
  d=$out/$s
  mkdir -p "$d"
  run "$d/profiled.log" "${args[@]}" --scenario "$s" --trace_dir "$d/trace" --output_json "$d/profiled.json"
  fix=$(fix_of "$s")
  for r in $(seq 1 "$runs"); do
    off=(run "$d/off.$r.log" "${args[@]}" --scenario "$s" --no_profile --output_json "$d/off.$r.json")
    if [ -z "$fix" ]; then
      "${off[@]}"
      continue
    fi
    # shellcheck disable=SC2206
    on=(run "$d/on.$r.log" "${args[@]}" --scenario "$s" $fix --no_profile --output_json "$d/on.$r.json")
    if [ $((r % 2)) -eq 1 ]; then "${off[@]}"; "${on[@]}"; else "${on[@]}"; "${off[@]}"; fi
  done
  echo "scenario_truth: $s done" >&2
done
python3 bench/diagnosis/truth_table.py "$out"
