#!/usr/bin/env bash
# fresh_session.sh BUILD_DIR OUT_DIR [SECONDS] [COMMIT]: what a freshly started GPU machine
# is used for, in one command (the device tool's calls are at most 10 minutes, and a machine
# left idle goes back within a minute):
#   1. scripts/gpu_acceptance.sh BUILD_DIR, first (the definition of done's first pass on a
#      fresh machine), its output in OUT_DIR/acceptance.log;
#   2. bench/gate/inject_accuracy.sh BUILD_DIR (the injection measured in one process), in
#      OUT_DIR/inject.log; with PD_FRESH_AB=1, then scripts/gpu_ab.sh BUILD_DIR BUILD_DIR:
#      an A/B of all five scenarios, the build against itself, timed (its log in
#      OUT_DIR/ab.log, its summary in OUT_DIR/ab/summary.md);
#   3. bench/gate/ab_record.sh with as many rounds as fit in what is left of SECONDS
#      (default 585; about 9 s a round of clean and tiny_ops, 5 s a round of one scenario,
#      4.5 s a round per scenario of several (PD_AB_SCENARIOS, read by ab_record.sh: clean,
#      tiny_ops, sync, memory_churn), and 40 s for the rest; at most
#      PD_MAX_ROUNDS, default 40), kept as OUT_DIR/<gpu>-<boot id prefix>.tar.gz (the folder itself is removed: a
#      device call brings back a limited number of files). COMMIT goes into its host.txt
#      (default: BUILD_DIR/pd_build_commit, which gpu_prepare.sh writes).
# Prints the machine (uptime, boot id, GPU, driver), then each part's exit status and the
# lines of its summary. Exit: the acceptance suite's status; 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: fresh_session.sh BUILD_DIR OUT_DIR [SECONDS] [COMMIT]"
[ $# -ge 2 ] && [ $# -le 4 ] || { echo "fresh_session: $usage" >&2; exit 2; }
build=$1
out=$2
budget=${3:-585}
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
pd_whole_number SECONDS "$budget" || exit 2
maxr=${PD_MAX_ROUNDS:-40}
pd_whole_number PD_MAX_ROUNDS "$maxr" || exit 2
scen=()
pd_ab_record_scenarios scen || exit 2
[ -d "$build" ] || { echo "fresh_session: no build at $build (scripts/gpu_prepare.sh first)" >&2; exit 2; }
commit=${4:-$(cat "$build/pd_build_commit" 2>/dev/null || echo unknown)}
mkdir -p "$out" || { echo "fresh_session: cannot create $out" >&2; exit 2; }
t0=$SECONDS
echo "fresh_session: uptime $(cut -d' ' -f1 /proc/uptime) s, boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)," \
  "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"

scripts/gpu_acceptance.sh "$build" >"$out/acceptance.log" 2>&1
acc=$?
echo "fresh_session: acceptance exit $acc after $((SECONDS - t0)) s:"
grep -E 'Test +#|tests passed|Total Test time|confirmation rerun|clean loader|build of' "$out/acceptance.log"

bench/gate/inject_accuracy.sh "$build" >"$out/inject.log" 2>&1
echo "fresh_session: inject_accuracy exit $? after $((SECONDS - t0)) s:"
grep -E 'ratio|Synthesis|last busy time' "$out/inject.log"

if [ "${PD_FRESH_AB:-0}" = 1 ]; then
  ta=$SECONDS
  scripts/gpu_ab.sh "$build" "$build" 8 "$out/ab" >"$out/ab.log" 2>&1
  echo "fresh_session: gpu_ab (the build against itself, all scenarios) exit $? in $((SECONDS - ta)) s:"
  grep -E '^gpu_ab: [a-z_]+: |scenarios, both builds' "$out/ab.log"
  rm -rf "$out/ab/"*/ # the runs' JSONs: the summary and reports stay
fi

# the machine again at the end: a caller that keeps only the output's tail still has it
trap 'echo "fresh_session: done on boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null), acceptance exit $acc"' EXIT
left=$((budget - (SECONDS - t0)))
# seconds a round: 4 runs of about 1 s per scenario, and their start-up
per_round=$((${#scen[@]} == 1 ? 5 : (9 * ${#scen[@]} + 1) / 2))
rounds=$(((left - 40) / per_round))
[ "$rounds" -gt "$maxr" ] && rounds=$maxr
if [ "$rounds" -lt 8 ]; then
  echo "fresh_session: $left s left: too little for an A/B recording of 8 rounds; none made"
  exit "$acc"
fi
kind=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | grep -q H200 && echo h200 || echo h100)
name=$kind-$(cut -c1-8 /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
echo "fresh_session: recording $rounds rounds into $out/$name.tar.gz ($left s left)"
timeout $((left - 5)) bench/gate/ab_record.sh "$build" "$out/$name" "$rounds" "$commit" >"$out/record.log" 2>&1
echo "fresh_session: ab_record exit $? after $((SECONDS - t0)) s"
tail -n 1 "$out/record.log"
# a recording cut short by the time limit still holds its whole rounds (ab_eval.py reads those)
[ -f "$out/$name.tar.gz" ] || tar -C "$out" -czf "$out/$name.tar.gz" "$name"
rm -rf "${out:?}/$name"
exit "$acc"
