#!/usr/bin/env bash
# gpu_ab_script.sh SOURCE_DIR PROFILE_COMPARE: scripts/gpu_ab.sh's sequential rounds,
# without a GPU. Two fake builds whose profiler_demo writes the clean fixture's metrics
# JSON with its step times scaled (the head's by a pattern given per case) and a fake
# nvidia-smi; the real profile_compare judges. Checks: no change passes after the first
# look; a clear slowdown fails at the first look; a head slower in 7 of 8 rounds is
# undecided at 8 rounds (one fast round: p about 0.016) and fails after 16; PD_AB_MAX_ROUNDS stops
# an undecided one at the cap, within policy and said so; dataloader stops at its first look
# unless PD_AB_DATALOADER_MAX_ROUNDS; a head worse by more than half the tolerance but within
# it is undecided (more rounds) and passes at the cap; PD_AB_MIN_ROUNDS makes a pass go on
# to it, and a failure before it stands; sync stops at PD_AB_OTHER_MAX_ROUNDS; both sides'
# runs get --warmup_probe (not dataloader's) and the untraced rows follow it, unless a build
# lacks it or PD_AB_PROBE=0; profile_compare --primary auto chooses the gating row and says
# why, and a named primary a base build lacks falls back to step_time_p10_s.
set -uo pipefail
src=${1:?usage: gpu_ab_script.sh SOURCE_DIR PROFILE_COMPARE}
pc=${2:?usage: gpu_ab_script.sh SOURCE_DIR PROFILE_COMPARE}
command -v python3 >/dev/null || { echo "SKIPPED: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "gpu_ab_script: FAIL: $*" >&2; exit 1; }
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "GPU 0: fake"\n' >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
for side in base head; do
  mkdir -p "$tmp/$side/src/cli/profiler_demo" "$tmp/$side/src/cli/profile_compare"
  cat >"$tmp/$side/src/cli/profiler_demo/profiler_demo" <<FAKE
#!/usr/bin/env bash
# fake profiler_demo ($side): the fixture run, step times x the next factor of FAKE_${side^^}
# (--help names --warmup_probe unless FAKE_PROBE_${side^^}=0: a build from before it)
if [ "\$1" = --help ]; then [ "\${FAKE_PROBE_${side^^}:-1}" = 0 ] || echo "  --warmup_probe"; exit 0; fi
echo "\$*" >>"$tmp/$side.args"
out="" scen="" probe=0
while [ \$# -gt 0 ]; do
  case "\$1" in --output_json) out=\$2; shift ;; --scenario) scen=\$2; shift ;; --warmup_probe) probe=1 ;; esac
  shift
done
n=\$(cat "$tmp/$side.count" 2>/dev/null || echo 0)
echo \$((n + 1)) >"$tmp/$side.count"
exec python3 - "$src/tests/fixtures/runs/clean.metrics.json" "\$out" "\$n" "\${FAKE_${side^^}:-1}" "\${FAKE_OLD_${side^^}:-0}" "\$probe" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n, pattern = int(sys.argv[3]), [float(x) for x in sys.argv[4].split(",")]
f = pattern[n % len(pattern)] * (1.0 + 0.002 * ((n * 7) % 5))  # a little noise of its own
# the untraced warmup steps (what the A/B judges by default): 0.8 of the traced ones, as
# the same build's are; a build before them (FAKE_OLD_<SIDE>=1) writes none
warm = [0.8 * t for t in d["step_times_s"]] * 3
d.pop("warmup_step_times_s", None)
if sys.argv[5] != "1":
    d["warmup_step_times_s"] = [t * f for t in warm]
d["step_times_s"] = [t * f for t in d["step_times_s"]]
if sys.argv[6] == "1" and "warmup_step_times_s" in d:
    d["warmup_probe_launch_ns"] = [4000.0 + (i % 3) for i in range(len(d["warmup_step_times_s"]))]
json.dump(d, open(sys.argv[2], "w"))
PY
FAKE
  chmod +x "$tmp/$side/src/cli/profiler_demo/profiler_demo"
done
ln -s "$(cd "$(dirname "$pc")" && pwd)/$(basename "$pc")" "$tmp/head/src/cli/profile_compare/profile_compare"

# case NAME EXPECTED_EXIT HEAD_PATTERN [ENV...]: one gpu_ab.sh run; prints its output on failure.
case_run() {
  local name=$1 want=$2 pattern=$3
  shift 3
  rm -f "$tmp"/*.count "$tmp"/*.args
  # warm-up runs (3 of clean per build) come first: 6 runs, then base/head alternate
  env PATH="$tmp/bin:$PATH" PD_SCENARIOS=clean FAKE_BASE=1 FAKE_HEAD="$pattern" "$@" \
    "$src/scripts/gpu_ab.sh" "$tmp/base" "$tmp/head" 8 "$tmp/out.$name" >"$tmp/log.$name" 2>&1
  local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$tmp/log.$name"; fail "$name: exit $rc, expected $want"; }
}
# The head's factor per run: the 3 warm-up runs use the first entries; pattern index n
# counts every run of the head build, warm-ups included.
case_run same 0 1
grep -q 'within policy (8 rounds, look 1' "$tmp/log.same" || { cat "$tmp/log.same"; fail "same: not decided at the first look"; }
grep -q 'untraced_step_p10_s' "$tmp/out.same/clean.ab.txt" || fail "same: no untraced_step_p10_s row"
grep -q -- '--warmup_steps 10 .*--warmup_steps 48 --warmup_probe' "$tmp/head.args" || fail "same: the runs did not get --warmup_steps 48 --warmup_probe after the acceptance flags"
grep -q -- '--warmup_probe' "$tmp/base.args" || fail "same: the base runs got no --warmup_probe"
grep -q 'untraced rows along warmup_probe_launch_ns' "$tmp/out.same/clean.ab.txt" || { cat "$tmp/out.same/clean.ab.txt"; fail "same: the untraced rows were not adjusted along the probe"; }
# a base build from before --warmup_probe: neither side gets it; PD_AB_PROBE=0 likewise
case_run old_probe 0 1 FAKE_PROBE_BASE=0
if grep -q -- '--warmup_probe' "$tmp/head.args" "$tmp/base.args"; then fail "old_probe: a run got --warmup_probe"; fi
if grep -q 'along warmup_probe_launch_ns' "$tmp/out.old_probe/clean.ab.txt"; then fail "old_probe: adjusted along a probe no run has"; fi
case_run no_probe 1 1.3 PD_AB_PROBE=0
if grep -q -- '--warmup_probe' "$tmp/head.args" "$tmp/base.args"; then fail "no_probe: a run got --warmup_probe"; fi
grep -q 'untraced_step_p10_s' "$tmp/log.no_probe" || { cat "$tmp/log.no_probe"; fail "no_probe: the primary is not the untraced p10"; }
case_run bad_probe 2 1 PD_AB_PROBE=yes
grep -qx "gpu_ab: PD_AB_PROBE must be 0 or 1, got 'yes'" "$tmp/log.bad_probe" || { cat "$tmp/log.bad_probe"; fail "bad_probe: no message"; }
# dataloader keeps the acceptance flags' warmup (its steps wait on the loader by design)
case_run loader 0 1 PD_SCENARIOS=dataloader
grep -q -- '--scenario dataloader' "$tmp/head.args" || fail "loader: no dataloader run"
if grep -q -- '--scenario dataloader.*--warmup_steps 48' "$tmp/head.args"; then fail "loader: dataloader got --warmup_steps 48"; fi
if grep -q -- '--scenario dataloader.*--warmup_probe' "$tmp/head.args"; then fail "loader: dataloader got --warmup_probe"; fi
case_run slow 1 1.3
grep -q 'REGRESSED (8 rounds, look 1' "$tmp/log.slow" || { cat "$tmp/log.slow"; fail "slow: not caught at the first look"; }
grep -q 'untraced_step_p10_s' "$tmp/log.slow" || { cat "$tmp/log.slow"; fail "slow: the primary untraced row (clean with the probe: p10) is not what regressed"; }
grep -q 'primary host metric untraced_step_p10_s (--primary auto: untraced steps and the probe, clean)' "$tmp/out.slow/clean.ab.txt" ||
  { cat "$tmp/out.slow/clean.ab.txt"; fail "slow: the report does not say the primary was chosen and why"; }
# A base build from before the untraced samples: --primary auto takes the traced p10, said so.
case_run old_base 1 1.3 FAKE_OLD_BASE=1
grep -q 'primary host metric step_time_p10_s (--primary auto: some run has no untraced warmup steps)' "$tmp/out.old_base/clean.ab.txt" ||
  { cat "$tmp/out.old_base/clean.ab.txt"; fail "old_base: not compared on step_time_p10_s, or not said why"; }
grep -q 'REGRESSED (8 rounds, look 1' "$tmp/log.old_base" || { cat "$tmp/log.old_base"; fail "old_base: not caught"; }
# A named primary such a base build lacks: compared on the traced p10, said so.
case_run old_named 1 1.3 FAKE_OLD_BASE=1 PD_AB_PRIMARY=untraced_step_p50_s
grep -q 'carry no untraced_step_p50_s.*compared on step_time_p10_s' "$tmp/log.old_named" ||
  { cat "$tmp/log.old_named"; fail "old_named: no fallback to step_time_p10_s"; }
grep -q 'REGRESSED (8 rounds, look 1' "$tmp/log.old_named" || { cat "$tmp/log.old_named"; fail "old_named: not caught"; }
case_run bad_warm 2 1 PD_AB_WARMUP=x
grep -q 'PD_AB_WARMUP must be a whole number' "$tmp/log.bad_warm" || { cat "$tmp/log.bad_warm"; fail "bad_warm: no message"; }
# The head's run n (3 warm-ups first) uses entry n: round 8 (n = 10) is the one fast round.
# With gpu_ab.sh's default (every run, adjusted, two-sample; the fixture's calibration is
# the same in every run, so nothing moves) at 8 rounds the head is +7.5% but about 205 of
# the 12870 splits of the 16 runs reach it (p about 0.016); at 16 rounds p is far below
# 0.0015, the second look's alpha with the default cap of 40 (five looks).
pat=$(python3 -c 'print(",".join("0.9" if i == 10 else "1.1" for i in range(40)))')
case_run undecided 1 "$pat"
grep -q 'clean: undecided after 8 rounds' "$tmp/log.undecided" || { cat "$tmp/log.undecided"; fail "undecided: no second look"; }
grep -q 'REGRESSED (16 rounds, look 2' "$tmp/log.undecided" || { cat "$tmp/log.undecided"; fail "undecided: not caught after 16 rounds"; }
case_run capped 0 "$pat" PD_AB_MAX_ROUNDS=8
grep -q 'still undecided at the cap of 8 rounds' "$tmp/log.capped" || { cat "$tmp/log.capped"; fail "capped: not said"; }
[ -f "$tmp/out.capped/summary.md" ] || fail "no summary.md"
# dataloader stops at its first look (alpha 0.01, its only one) where clean would go on
case_run loader_once 0 "$pat" PD_SCENARIOS=dataloader
grep -q 'dataloader: within policy (8 rounds, look 1 of at most 1, alpha 0.01; still undecided at the cap of 8 rounds' \
  "$tmp/log.loader_once" || { cat "$tmp/log.loader_once"; fail "loader_once: dataloader did not stop at its one look"; }
case_run loader_more 1 "$pat" PD_SCENARIOS=dataloader PD_AB_DATALOADER_MAX_ROUNDS=16
grep -q 'REGRESSED (16 rounds, look 2 of at most 2' "$tmp/log.loader_more" ||
  { cat "$tmp/log.loader_more"; fail "loader_more: PD_AB_DATALOADER_MAX_ROUNDS not followed"; }
case_run bad_loader 2 1 PD_AB_DATALOADER_MAX_ROUNDS=8x
grep -qx "gpu_ab: PD_AB_DATALOADER_MAX_ROUNDS must be a whole number, got '8x'" "$tmp/log.bad_loader" ||
  { cat "$tmp/log.bad_loader"; fail "bad_loader: no message"; }
# +2%: within the 3% tolerance but worse than half of it: undecided at every look, more
# rounds each time, within policy at the cap, said so
case_run leaning 0 1.02 PD_AB_MAX_ROUNDS=16
grep -q 'clean: undecided after 8 rounds' "$tmp/log.leaning" || { cat "$tmp/log.leaning"; fail "leaning: +2% got no second look"; }
grep -q 'within policy (16 rounds, look 2 of at most 2, alpha 0.006; still undecided at the cap of 16 rounds' \
  "$tmp/log.leaning" || { cat "$tmp/log.leaning"; fail "leaning: not within policy at the cap"; }
# PD_AB_MIN_ROUNDS: a pass before it gets more rounds (looks made, alpha spent); a failure
# at any look stands
case_run min_same 0 1 PD_AB_MIN_ROUNDS=16
grep -q 'clean: within policy after 8 rounds (alpha 0.004): more rounds (PD_AB_MIN_ROUNDS 16)' "$tmp/log.min_same" ||
  { cat "$tmp/log.min_same"; fail "min_same: stopped before PD_AB_MIN_ROUNDS"; }
grep -q 'within policy (16 rounds, look 2 of at most 5, alpha 0.0015)' "$tmp/log.min_same" ||
  { cat "$tmp/log.min_same"; fail "min_same: did not stop at PD_AB_MIN_ROUNDS"; }
case_run min_slow 1 1.3 PD_AB_MIN_ROUNDS=16
grep -q 'REGRESSED (8 rounds, look 1' "$tmp/log.min_slow" || { cat "$tmp/log.min_slow"; fail "min_slow: a failure at the first look did not stand"; }
case_run bad_min 2 1 PD_AB_MIN_ROUNDS=-1
grep -qx "gpu_ab: PD_AB_MIN_ROUNDS must be a whole number, got '-1'" "$tmp/log.bad_min" ||
  { cat "$tmp/log.bad_min"; fail "bad_min: no message"; }
# sync's cap is PD_AB_OTHER_MAX_ROUNDS (12 rounded down to a look: 8), clean's
# PD_AB_MAX_ROUNDS; both judged at each look, side by side
case_run others 0 1.02 "PD_SCENARIOS=clean sync" PD_AB_MAX_ROUNDS=16 PD_AB_OTHER_MAX_ROUNDS=12
grep -q 'sync: within policy (8 rounds, look 1 of at most 1, alpha 0.01; still undecided at the cap of 8 rounds' \
  "$tmp/log.others" || { cat "$tmp/log.others"; fail "others: sync not capped at PD_AB_OTHER_MAX_ROUNDS"; }
grep -q 'clean: within policy (16 rounds, look 2 of at most 2, alpha 0.006; still undecided at the cap of 16 rounds' \
  "$tmp/log.others" || { cat "$tmp/log.others"; fail "others: clean not taken to PD_AB_MAX_ROUNDS"; }
[ -s "$tmp/out.others/sync.ab.md" ] && [ -s "$tmp/out.others/clean.ab.md" ] || fail "others: a report is missing"
echo "gpu_ab_script: 18 cases passed"
