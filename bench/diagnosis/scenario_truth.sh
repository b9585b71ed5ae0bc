#!/usr/bin/env bash
# scenario_truth.sh: what each planted problem costs, measured, next to what the verdict
# attributes to it. Needs a GPU.
#
# For every scenario: one profiled run with the acceptance flags (its verdict, the share
# and cost the attribution gives each cause), then RUNS unprofiled runs (--no_profile) of
# the scenario and of the same scenario with its fix knob, alternated; the difference of
# the median host-timed steps is what removing the problem saves. Prints a Markdown table
# (docs/diagnosis.md keeps one, with host, commit and date).
#
# usage: bench/diagnosis/scenario_truth.sh BUILD_DIR OUT_DIR [RUNS=3]
set -euo pipefail
build=${1:?usage: scenario_truth.sh BUILD_DIR OUT_DIR [RUNS]}
out=${2:?usage: scenario_truth.sh BUILD_DIR OUT_DIR [RUNS]}
runs=${3:-3}
cd "$(dirname "$0")/../.."
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "scenario_truth: no $demo" >&2; exit 2; }
mkdir -p "$out"
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
args=() scenarios=()
pd_args_read baselines/acceptance.args args
pd_scenario_names "$demo" scenarios
fix_of() {
  case "$1" in
    dataloader) echo "--num_workers 8" ;;
    sync) echo "--no_sync" ;;
    tiny_ops) echo "--tiny_ops_mode graph" ;;
    memory_churn) echo "--allocator pool" ;;
    *) echo "" ;;
  esac
}
# median of avg_step_time_s + avg_dataloader_wait_s over the runs of one configuration
wall_ms() { python3 -c '
import json, statistics, sys
v = []
for p in sys.argv[1:]:
    m = json.load(open(p))["metrics"]
    v.append((m["avg_step_time_s"] + (m["avg_dataloader_wait_s"] or 0)) * 1e3)
print("%.3f" % statistics.median(v))' "$@"; }

echo "| scenario | verdict | share | planted cause (profiled) | step, unprofiled | with the fix | fix saves |"
echo "|---|---|---|---|---|---|---|"
for s in "${scenarios[@]}"; do
  if ! "$demo" "${args[@]}" --scenario "$s" --trace_dir "$out/$s" --output_json "$out/$s.json" --quiet > "$out/$s.log" 2>&1; then
    echo "scenario_truth: profiler_demo --scenario $s failed:" >&2
    tail -5 "$out/$s.log" >&2
    exit 1
  fi
  fix=$(fix_of "$s")
  a=() b=()
  for r in $(seq 1 "$runs"); do
    "$demo" "${args[@]}" --scenario "$s" --no_profile --output_json "$out/$s.np$r.json" --quiet > /dev/null 2>&1
    a+=("$out/$s.np$r.json")
    if [ -n "$fix" ]; then
      # shellcheck disable=SC2086
      "$demo" "${args[@]}" --scenario "$s" $fix --no_profile --output_json "$out/$s.fix$r.json" --quiet > /dev/null 2>&1
      b+=("$out/$s.fix$r.json")
    fi
  done
  python3 - "$out/$s.json" "$s" "$(wall_ms "${a[@]}")" "$( [ -n "$fix" ] && wall_ms "${b[@]}" || echo nan)" "$fix" <<'PY'
import json, sys
doc, s, plant, fixed, fix = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
d = json.load(open(doc)); v = d["verdict"]; m = d["metrics"]
cause = {"dataloader": "data_wait", "sync": "sync", "tiny_ops": "launch_bound", "memory_churn": "allocation"}.get(s)
pc = "-"
if cause:
    c = m["cost_%s_us_per_step" % cause]
    pc = "%s %.0f us (%.0f%%)" % (cause, c, 100 * c / m["step_wall_us"])
save = "-" if fixed != fixed else "%.0f%% (%s)" % (100 * (plant - fixed) / plant, fix)
fx = "-" if fixed != fixed else "%.3f ms" % fixed
print("| %s | `%s` | %.0f%% | %s | %.3f ms | %s | %s |" % (s, v["bottleneck"], 100 * v["share_of_step"], pc, plant, fx, save))
PY
done
