#!/usr/bin/env bash
# test_gpu_script_usage.sh: the GPU-host scripts refuse bad input here, before they build or
# run anything: exit 2, one line on stderr saying why, nothing written.
#   scripts/gpu_prepare.sh with a bad PD_PRUNE;
#   bench/gate/fresh_session.sh with a bad SECONDS, a bad PD_MAX_ROUNDS, no build folder, no
#   arguments, a PD_AB_SCENARIOS it does not record; bench/gate/ab_record.sh with too few
#   arguments, a bad ROUNDS, or a PD_AB_SCENARIOS naming another scenario, one twice or none;
#   bench/gate/run_cost.sh with a bad RUNS or no build.
# Prints each failure; exits 1 on any.
set -uo pipefail
src=${PD_SOURCE_DIR:?PD_SOURCE_DIR is not set (run through ctest)}
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build"

# refused NAME WANT_TEXT CREATED_PATH -- COMMAND...: exit 2, one line containing WANT_TEXT,
# CREATED_PATH not made
refused() {
  local name=$1 want=$2 made=$3
  shift 4
  local err rc
  err=$(cd "$tmp" && "$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq 2 ] || { echo "FAIL $name: exit $rc, want 2"; fails=$((fails + 1)); }
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || { echo "FAIL $name: want one line, got: $err"; fails=$((fails + 1)); }
  case "$err" in *"$want"*) ;; *) echo "FAIL $name: [$err] does not say '$want'"; fails=$((fails + 1)) ;; esac
  [ ! -e "$made" ] || { echo "FAIL $name: $made was made"; fails=$((fails + 1)); }
}

refused "gpu_prepare PD_PRUNE" "PD_PRUNE must be 0, 1 or acceptance" "$tmp/b2" -- env PD_PRUNE=some "$src/scripts/gpu_prepare.sh" "$tmp/b2"
refused "fresh_session SECONDS" "SECONDS must be a whole number" "$tmp/o1" -- "$src/bench/gate/fresh_session.sh" "$tmp/build" "$tmp/o1" 5m
refused "fresh_session PD_MAX_ROUNDS" "PD_MAX_ROUNDS must be a whole number" "$tmp/o2" -- env PD_MAX_ROUNDS=-3 "$src/bench/gate/fresh_session.sh" "$tmp/build" "$tmp/o2"
refused "fresh_session no build" "no build at" "$tmp/o3" -- "$src/bench/gate/fresh_session.sh" "$tmp/none" "$tmp/o3"
refused "fresh_session usage" "usage: fresh_session.sh" "$tmp/o4" -- "$src/bench/gate/fresh_session.sh"
refused "ab_record usage" "usage: ab_record.sh" "$tmp/o5" -- "$src/bench/gate/ab_record.sh" "$tmp/build"
refused "ab_record ROUNDS" "ROUNDS must be a whole number" "$tmp/o6" -- "$src/bench/gate/ab_record.sh" "$tmp/build" "$tmp/o6" 4x
refused "ab_record PD_AB_SCENARIOS" "'dataloader' is not one ab_record.sh records" "$tmp/o7" -- env PD_AB_SCENARIOS=tiny_ops,dataloader "$src/bench/gate/ab_record.sh" "$tmp/build" "$tmp/o7" 4
refused "ab_record PD_AB_SCENARIOS empty" "PD_AB_SCENARIOS names no scenario" "$tmp/o8" -- env PD_AB_SCENARIOS=, "$src/bench/gate/ab_record.sh" "$tmp/build" "$tmp/o8" 4
refused "ab_record PD_AB_SCENARIOS twice" "names 'tiny_ops' twice" "$tmp/o12" -- env PD_AB_SCENARIOS="tiny_ops clean tiny_ops" "$src/bench/gate/ab_record.sh" "$tmp/build" "$tmp/o12" 4
refused "fresh_session PD_AB_SCENARIOS" "'dataloader' is not one ab_record.sh records" "$tmp/o9" -- env PD_AB_SCENARIOS=dataloader "$src/bench/gate/fresh_session.sh" "$tmp/build" "$tmp/o9"
refused "run_cost RUNS" "RUNS must be a whole number" "$tmp/o10" -- "$src/bench/gate/run_cost.sh" "$tmp/build" 2x
refused "run_cost no build" "build first" "$tmp/o11" -- "$src/bench/gate/run_cost.sh" "$tmp/none"

if [ "$fails" -gt 0 ]; then
  echo "test_gpu_script_usage: $fails failure(s)"
  exit 1
fi
echo "test_gpu_script_usage: all passed"
