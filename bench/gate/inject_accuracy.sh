#!/usr/bin/env bash
# inject_accuracy.sh [BUILD_DIR]: measures on a GPU host how closely --inject_slowdown F
# lengthens the p50 step by F, the profiled steps and the untraced warmup steps (which the
# A/B judges) each: runs the acceptance test
# gate::injected_slowdown_lengthens_the_p50_step_by_its_fraction (clean at 0.10 over 100
# injected and 100 plain steps of each kind in one process, tiny_ops at 0.05 over 32 each), which the
# acceptance suite skips because its result varies between fresh machines (docs/gate.md).
# Prints the measured ratios, and each run's feedback loop as it ended (its last busy time
# and measured surplus). Exit: the test's status (0 within 3 points); 2 no build.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${1:-build-gpu}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
test_bin=$build/tests/acceptance/scenarios/test_scenarios
[ -x "$test_bin" ] || { echo "inject_accuracy: no $test_bin (build first)" >&2; exit 2; }
# A build carried here (scripts/gpu_prepare.sh with .gpu_bundle/): its library path.
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$test_bin
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
# the environment ctest gives it (pd_add_acceptance_test in CMakeLists.txt); the runs kept
# (PD_KEEP_ACCEPT_DIR) so that the feedback loop's last state can be printed after them
out=$(mktemp) || exit 2
PD_SOURCE_DIR=$PWD PD_BINARY_DIR=$build PD_MEASURE_INJECTION=1 PD_KEEP_ACCEPT_DIR=1 "$test_bin" \
  --filter 'gate/injected_slowdown_lengthens_the_p50_step_by_its_fraction' >"$out" 2>&1
rc=$?
grep -E 'inject_slowdown|Synthesis|FAIL|SKIP|----' "$out"
# each run's loop, as profiler_demo printed it: the last busy time and the surplus an
# injected step measured over it, in the warmup and in the profiled steps (a busy time at a
# quarter of its target is the loop's floor: a surplus it could not take off)
kept=$(sed -n 's/^test_scenarios: runs kept in //p' "$out" | tail -n 1)
rm -f "$out"
if [ -n "$kept" ] && [ -d "$kept" ]; then
  for log in "$kept"/*/log; do
    [ -f "$log" ] || continue
    run=$(basename "$(dirname "$log")")
    grep -h 'last busy time' "$log" | sed "s|^|inject_accuracy: $run: |"
  done
  rm -rf "$kept"
fi
exit "$rc"
