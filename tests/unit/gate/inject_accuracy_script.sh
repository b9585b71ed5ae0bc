#!/usr/bin/env bash
# inject_accuracy_script.sh SOURCE_DIR: bench/gate/inject_accuracy.sh without a GPU. A fake
# build whose test_scenarios prints the two ratio lines of a run and a failing synthesis,
# keeps its runs (as the real one does under PD_KEEP_ACCEPT_DIR) with profiler_demo's
# feedback-loop lines in their logs. Checks: the ratios and the failure are printed, each
# run's last busy time and surplus too (named by run), the kept runs are removed, the test's
# exit status is the script's; no build: exit 2.
set -uo pipefail
src=${1:?usage: inject_accuracy_script.sh SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "inject_accuracy_script: FAIL: $*" >&2; exit 1; }
bin=$tmp/build/tests/acceptance/scenarios
mkdir -p "$bin"
cat >"$bin/test_scenarios" <<FAKE
#!/usr/bin/env bash
[ "\${PD_MEASURE_INJECTION:-}" = 1 ] && [ -n "\${PD_KEEP_ACCEPT_DIR:-}" ] || { echo "fake: environment not set" >&2; exit 9; }
keep=$tmp/kept
mkdir -p "\$keep/clean_inject_alt_10" "\$keep/tiny_ops_inject_alt_5"
printf 'profiler_demo: inject_slowdown 0.100 in the warmup: last busy time 25.0 us, an injected step%ss surplus over it 1.2 us (test only)\n' "'" >"\$keep/clean_inject_alt_10/log"
printf 'profiler_demo: inject_slowdown 0.050: last busy time 46.7 us, an injected step%ss surplus over it 150.3 us (test only)\n' "'" >"\$keep/tiny_ops_inject_alt_5/log"
echo "test_scenarios: tiny_ops --inject_slowdown 0.05, step_times_s: p50 injected 3785.7 us, plain 3739.6 us, ratio 1.0123 (want 1.05 +- 0.03)" >&2
echo "[FAIL] gate::injected_slowdown_lengthens_the_p50_step_by_its_fraction" >&2
echo "[====] Synthesis: Tested: 1 | Passing: 0 | Failing: 1 | Crashing: 0" >&2
echo "test_scenarios: runs kept in \$keep" >&2
exit 1
FAKE
chmod +x "$bin/test_scenarios"
"$src/bench/gate/inject_accuracy.sh" "$tmp/build" >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat "$tmp/out"; fail "exit $rc, expected the test's 1"; }
grep -q 'ratio 1.0123 (want 1.05' "$tmp/out" || { cat "$tmp/out"; fail "the ratio line is not printed"; }
grep -q 'Synthesis: Tested: 1 | Passing: 0 | Failing: 1' "$tmp/out" || { cat "$tmp/out"; fail "the synthesis is not printed"; }
grep -q '^inject_accuracy: tiny_ops_inject_alt_5: profiler_demo: inject_slowdown 0.050: last busy time 46.7 us.*surplus over it 150.3 us' "$tmp/out" ||
  { cat "$tmp/out"; fail "tiny_ops's loop state is not printed"; }
grep -q '^inject_accuracy: clean_inject_alt_10: profiler_demo: inject_slowdown 0.100 in the warmup' "$tmp/out" ||
  { cat "$tmp/out"; fail "clean's loop state is not printed"; }
[ ! -e "$tmp/kept" ] || fail "the kept runs were not removed"
"$src/bench/gate/inject_accuracy.sh" "$tmp/nothing" >"$tmp/out2" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q 'inject_accuracy: no .*test_scenarios (build first)' "$tmp/out2" || { cat "$tmp/out2"; fail "no build: exit $rc"; }
echo "inject_accuracy_script: ok"
