#!/usr/bin/env bash
# gate_power.sh BUILD_DIR [RUNS] [LEVELS]: measures the regression gate on this GPU.
#
# Against this GPU's committed clean baseline (baselines/<slug>/clean.json), with the flags
# every baseline run uses (baselines/acceptance.args):
#  - false alarms: RUNS unchanged clean runs, each compared with profile_compare;
#  - power: RUNS runs at each injected slowdown in LEVELS (default "0.03 0.05 0.10";
#    profiler_demo --inject_slowdown adds that fraction of the warmup step time to every
#    profiled step).
# A run that regresses is rerun once, as the acceptance suite does; a regression counts as
# confirmed when the rerun regresses too. Prints a Markdown table; exit 0 when it ran,
# 2 on bad usage or missing programs or baseline, 3 with no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${1:?usage: gate_power.sh BUILD_DIR [RUNS] [LEVELS]}
runs=${2:-20}
levels=${3:-0.03 0.05 0.10}
demo=$build/src/cli/profiler_demo/profiler_demo
cmp=$build/src/cli/profile_compare/profile_compare
for p in "$demo" "$cmp"; do
  [ -x "$p" ] || { echo "gate_power: no program at $p (build first)" >&2; exit 2; }
done
case "$runs" in '' | *[!0-9]*) echo "gate_power: RUNS must be a whole number" >&2; exit 2 ;; esac
read -r -a args <<<"$(grep -v '^[[:space:]]*#' baselines/acceptance.args | tr '\n' ' ')"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

n=0
json=$work/run.json
# run_once LEVEL: one clean run (with --inject_slowdown LEVEL unless 0) into $json.
run_once() {
  n=$((n + 1))
  local inject=()
  [ "$1" = 0 ] || inject=(--inject_slowdown "$1")
  "$demo" --scenario clean "${args[@]}" "${inject[@]}" --quiet --trace_dir "$work/t$n" \
    --output_json "$json" >"$work/run$n.log" 2>&1
  local rc=$?
  rm -rf "$work/t$n"
  if [ "$rc" -eq 3 ]; then
    echo "gate_power: no CUDA device: $(tail -n 1 "$work/run$n.log")" >&2
    exit 3
  fi
  [ "$rc" -eq 0 ] || { echo "gate_power: run $n failed (exit $rc):" >&2; tail -n 5 "$work/run$n.log" >&2; exit 1; }
  rm -f "$work/run$n.log"
}

run_once 0
slug=$("$cmp" --slug "$json") || { echo "gate_power: cannot name this GPU" >&2; exit 2; }
base=baselines/$slug/clean.json
[ -f "$base" ] || { echo "gate_power: no baseline $base for this GPU" >&2; exit 2; }

echo "| runs | injected slowdown | one run judged alone | confirmed by a rerun |"
echo "|---|---:|---:|---:|"
for level in 0 $levels; do
  single=0 confirmed=0
  for ((i = 0; i < runs; i++)); do
    run_once "$level"
    "$cmp" "$json" "$base" >/dev/null 2>&1
    rc=$?
    [ "$rc" -le 1 ] || { echo "gate_power: profile_compare exit $rc on $json" >&2; exit 1; }
    [ "$rc" -eq 1 ] || continue
    single=$((single + 1))
    run_once "$level"
    "$cmp" "$json" "$base" >/dev/null 2>&1
    [ $? -eq 1 ] && confirmed=$((confirmed + 1))
  done
  label=$([ "$level" = 0 ] && echo "clean, unchanged" || echo "clean + slowdown")
  echo "| $label | $level | $single of $runs | $confirmed of $runs |"
done
echo
echo "Baseline: $base; flags: ${args[*]}; $n profiler_demo runs in all."
