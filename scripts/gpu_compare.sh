#!/usr/bin/env bash
# gpu_compare.sh BUILD_DIR OUT_DIR: the regression gate's comparison step on a GPU host
# (.github/workflows/gpu.yml). For each scenario it runs profiler_demo with the flags in
# baselines/acceptance.args (those every baseline was recorded with), then compares the
# metrics JSON with baselines/<gpu slug>/<scenario>.json through profile_compare, and
# writes a Markdown table (OUT_DIR/summary.md, also appended to $GITHUB_STEP_SUMMARY when
# set). Traces, metrics and the per-scenario reports stay in OUT_DIR for upload.
#
# A GPU model with no baseline folder is reported as such and not compared (baselines
# belong to one GPU model). PD_SCENARIOS overrides the scenario list; PD_DEMO_ARGS, when
# set, replaces the flags of acceptance.args.
# Exit: 0 all compared scenarios within policy; 1 a regression or a failed run; 2 usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:?usage: gpu_compare.sh BUILD_DIR OUT_DIR}
out=${2:?usage: gpu_compare.sh BUILD_DIR OUT_DIR}
demo=$build/src/cli/profiler_demo/profiler_demo
compare=$build/src/cli/profile_compare/profile_compare
for exe in "$demo" "$compare"; do
  [ -x "$exe" ] || { echo "gpu_compare: $exe is not built" >&2; exit 2; }
done
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
scenarios=()
pd_scenarios_chosen "$demo" scenarios || exit 2
read -r -a extra <<<"${PD_DEMO_ARGS:-}"
# Unless PD_DEMO_ARGS is given: the flags the baselines were recorded with
# (baselines/acceptance.args, read by scripts/update_baselines.sh too), since only runs made
# with the same settings compare fairly.
if [ -z "${PD_DEMO_ARGS+set}" ] && [ -f baselines/acceptance.args ]; then
  pd_args_read baselines/acceptance.args extra || exit 2
fi
mkdir -p "$out"
summary=$out/summary.md
{
  echo "### Regression gate: metrics vs baselines"
  echo
  echo "| scenario | GPU | baseline | result |"
  echo "|---|---|---|---|"
} >"$summary"

status=0
for s in "${scenarios[@]}"; do
  metrics=$out/$s.metrics.json
  log=$out/$s.run.log
  echo "gpu_compare: running $s"
  "$demo" --scenario "$s" --trace_dir "$out/traces/$s" --output_json "$metrics" "${extra[@]}" >"$log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "gpu_compare: profiler_demo --scenario $s exited $rc; last lines:" >&2
    tail -n 20 "$log" >&2
    echo "| $s | ? | — | run failed (exit $rc) |" >>"$summary"
    status=1
    continue
  fi
  slug=$("$compare" --slug "$metrics") || {
    echo "| $s | ? | — | metrics JSON unreadable |" >>"$summary"
    status=1
    continue
  }
  base=baselines/$slug/$s.json
  if [ ! -f "$base" ]; then
    echo "gpu_compare: no baseline $base for this GPU; not compared (scripts/update_baselines.sh records one)"
    echo "| $s | $slug | none for this GPU | not compared |" >>"$summary"
    continue
  fi
  "$compare" "$metrics" "$base" --markdown "$out/$s.compare.md" --json "$out/$s.compare.json" | tee "$out/$s.compare.txt"
  rc=${PIPESTATUS[0]}
  case "$rc" in
    0) result="within policy" ;;
    1) result="**REGRESSION**" status=1 ;;
    *) result="bad input (exit $rc)" status=1 ;;
  esac
  echo "| $s | $slug | \`$base\` | $result |" >>"$summary"
done

# The per-scenario tables follow the overview.
for s in "${scenarios[@]}"; do
  if [ -f "$out/$s.compare.md" ]; then
    { echo; echo "#### $s"; echo; cat "$out/$s.compare.md"; } >>"$summary"
  fi
done
cat "$summary"
[ -z "${GITHUB_STEP_SUMMARY:-}" ] || cat "$summary" >>"$GITHUB_STEP_SUMMARY"
exit "$status"
