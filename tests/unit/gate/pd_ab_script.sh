#!/usr/bin/env bash
# pd_ab_script.sh SOURCE_DIR PROFILE_COMPARE: scripts/pd_ab.sh without a GPU. A fake pd_run
# runs the command it is given (which prints a factor) and writes the clean fixture's
# metrics JSON under the given --name with its step times scaled by that factor; the real
# profile_compare judges. Checks: the same command passes at the first look, judged on the
# untraced steps (--primary auto, said so); a 2% slower head (undecided) gets more rounds up
# to --max_rounds, with alpha spent across the looks, and one look where the cap is the first;
# a 30% slower head fails on them, and on the profiled steps'
# p10 where the runs have no untraced steps; a
# failing command stops the A/B with its log; runs without the profiler's calibration are
# compared unadjusted, saying so; bad usage exits 2 with one line and creates nothing, and so
# does a pd_run whose libraries cannot be found.
set -uo pipefail
src=${1:?usage: pd_ab_script.sh SOURCE_DIR PROFILE_COMPARE}
pc=${2:?usage: pd_ab_script.sh SOURCE_DIR PROFILE_COMPARE}
command -v python3 >/dev/null || { echo "SKIPPED: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "pd_ab_script: FAIL: $*" >&2; exit 1; }
b=$tmp/build/src/cli
mkdir -p "$b/pd_run" "$b/profile_compare"
ln -s "$(cd "$(dirname "$pc")" && pwd)/$(basename "$pc")" "$b/profile_compare/profile_compare"
cat >"$b/pd_run/pd_run" <<FAKE
#!/usr/bin/env bash
# fake pd_run: runs the program, whose last output line is the factor of its step times
out="" name="" probe=0
while [ \$# -gt 0 ]; do
  case "\$1" in
    --output_json) out=\$2; shift ;; --name) name=\$2; shift ;; --probe) probe=1 ;; --) shift; break ;;
    --help) [ "\${FAKE_PROBE_HELP:-0}" = 1 ] && echo "  --probe  after each untraced step ..."; exit 0 ;;
  esac
  shift
done
f=\$("\$@") || exit \$?  # the program's exit status, as pd_run returns it
f=\$(printf '%s\\n' "\$f" | tail -n 1)
n=\$(cat "$tmp/count" 2>/dev/null || echo 0)
echo \$((n + 1)) >"$tmp/count"
exec python3 - "$src/tests/fixtures/runs/clean.metrics.json" "\$out" "\$name" "\$n" "\$f" "\${FAKE_NO_CALIB:-0}" "\${FAKE_OLD:-0}" "\$probe" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n, f = int(sys.argv[4]), float(sys.argv[5])
d["config"]["scenario"] = sys.argv[3]
f *= 1.0 + 0.002 * ((n * 7) % 5)  # a little noise of its own
# the untraced steps pd_run times (a pd_run before them, FAKE_OLD=1, writes none)
if sys.argv[7] != "1":
    d["warmup_step_times_s"] = d["warmup_periods_s"] = [0.8 * t * f for t in d["step_times_s"]] * 4
d["step_times_s"] = [t * f for t in d["step_times_s"]]
if sys.argv[6] == "1":
    d.get("profiler_cost", {}).pop("calibration", None)
# --probe: the host's speed after each untraced step, which the program's change leaves alone
if sys.argv[8] == "1" and "warmup_step_times_s" in d:
    k = len(d["warmup_step_times_s"])
    d["warmup_probe_launch_ns"] = [4000.0 * (1.0 + 0.002 * ((n * 3) % 5)) for _ in range(k)]
    d["warmup_probe_compute_ns"] = [30000.0] * k
json.dump(d, open(sys.argv[2], "w"))
PY
FAKE
chmod +x "$b/pd_run/pd_run"
ab() { "$src/scripts/pd_ab.sh" --pd_run "$b/pd_run/pd_run" "$@"; }

ab --name train --base 'echo 1' --head 'echo 1' --out "$tmp/same" -- --step_range train_step >"$tmp/log.same" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q 'pd_ab: train: within policy (8 rounds, look 1 of at most 3, alpha 0.004; host times adjusted' "$tmp/log.same" ||
  { cat "$tmp/log.same"; fail "same: exit $rc"; }
[ -f "$tmp/same/ab.json" ] && [ -f "$tmp/same/summary.md" ] && [ -f "$tmp/same/runs/head.8.json" ] || fail "same: outputs missing"
grep -q '"adjusted_for_call_cost":[[:space:]]*true' "$tmp/same/ab.json" || fail "same: not adjusted"
grep -q 'primary host metric untraced_step_p10_s (--primary auto: untraced steps without the probe in every run)' "$tmp/log.same" ||
  { cat "$tmp/log.same"; fail "same: not judged on the untraced steps, or not said why"; }

[ ! -e "$tmp/same/runs/head.9.json" ] || fail "same: decided at the first look, yet ran more rounds"
grep -q 'host times adjusted for .*; no probe)' "$tmp/log.same" || { cat "$tmp/log.same"; fail "same: the probe not said absent"; }

# a pd_run that has --probe, steps by NVTX range: every run gets --probe, the untraced rows are
# adjusted along it and judged on their p50 (--primary auto); a 30% slower head fails there
FAKE_PROBE_HELP=1 ab --name train --base 'echo 1' --head 'echo 1.3' --out "$tmp/probe" -- --step_range train_step \
  >"$tmp/log.probe" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q -- '--probe added)' "$tmp/log.probe" &&
  grep -q 'primary host metric untraced_step_p50_s' "$tmp/log.probe" &&
  grep -q '"untraced_covariate":[[:space:]]*"warmup_probe_launch_ns"' "$tmp/probe/ab.json" ||
  { cat "$tmp/log.probe"; fail "probe: exit $rc, or --probe not added, or not judged along it"; }
grep -q '"warmup_probe_launch_ns"' "$tmp/probe/runs/base.1.json" || fail "probe: the runs carry no probe series"
# PD_AB_PROBE=0: never added
FAKE_PROBE_HELP=1 PD_AB_PROBE=0 ab --name train --base 'echo 1' --head 'echo 1' --rounds 8 --max_rounds 8 \
  --out "$tmp/noprobe" -- --step_range train_step >"$tmp/log.noprobe" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q '; no probe)' "$tmp/log.noprobe" && ! grep -q '"warmup_probe_launch_ns"' "$tmp/noprobe/runs/base.1.json" ||
  { cat "$tmp/log.noprobe"; fail "PD_AB_PROBE=0: exit $rc, or a probe given"; }

# 2% slower: within the 3% tolerance but worse than half of it, so undecided at every look:
# more rounds up to --max_rounds, alpha spent across the looks, said so
ab --name train --base 'echo 1' --head 'echo 1.02' --max_rounds 16 --out "$tmp/lean" >"$tmp/log.lean" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q 'pd_ab: undecided after 8 rounds (alpha 0.004): more rounds' "$tmp/log.lean" &&
  grep -q 'within policy (16 rounds, look 2 of at most 2, alpha 0.006; still undecided at the cap of 16 rounds; host' "$tmp/log.lean" ||
  { cat "$tmp/log.lean"; fail "lean: exit $rc, or not looked at again up to the cap"; }
[ -f "$tmp/lean/runs/head.16.json" ] && [ ! -e "$tmp/lean/runs/head.17.json" ] || fail "lean: not 16 rounds"
# --max_rounds equal to --rounds: one look at the whole alpha
ab --name train --base 'echo 1' --head 'echo 1.02' --rounds 6 --max_rounds 6 --out "$tmp/one" >"$tmp/log.one" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q 'within policy (6 rounds, look 1 of at most 1, alpha 0.01; still undecided at the cap of 6 rounds' "$tmp/log.one" ||
  { cat "$tmp/log.one"; fail "one look: exit $rc"; }

ab --name train --base 'echo 1' --head 'echo 1.3' --out "$tmp/slow" >"$tmp/log.slow" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q 'pd_ab: train: REGRESSED' "$tmp/log.slow" || { cat "$tmp/log.slow"; fail "slow: exit $rc"; }
grep -q 'untraced_step_p10_s .*regressed' "$tmp/log.slow" || { cat "$tmp/log.slow"; fail "slow: the untraced row is not what regressed"; }
# a pd_run from before the untraced steps: the profiled steps' p10, said so
FAKE_OLD=1 ab --name train --base 'echo 1' --head 'echo 1.3' --out "$tmp/old" >"$tmp/log.old" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q 'primary host metric step_time_p10_s (--primary auto: some run has no untraced warmup steps)' "$tmp/log.old" ||
  { cat "$tmp/log.old"; fail "old: exit $rc, or not compared on step_time_p10_s"; }

ab --name train --base 'echo 1' --head "sh -c 'echo boom >&2; exit 3'" --out "$tmp/broken" >"$tmp/log.broken" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q 'pd_ab: the head command failed (exit 3' "$tmp/log.broken" && grep -q '| boom' "$tmp/log.broken" ||
  { cat "$tmp/log.broken"; fail "broken: exit $rc"; }

FAKE_NO_CALIB=1 ab --name train --base 'echo 1' --head 'echo 1' --out "$tmp/nocal" >"$tmp/log.nocal" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q 'not adjusted: a run carries no profiler calibration' "$tmp/log.nocal" ||
  { cat "$tmp/log.nocal"; fail "no calibration: exit $rc"; }

# bad usage: exit 2, one line naming the problem, nothing created
bad() {
  local want=$1
  shift
  ab --out "$tmp/bad" "$@" >"$tmp/log.bad" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] && grep -q -- "$want" "$tmp/log.bad" && [ "$(wc -l <"$tmp/log.bad")" -eq 1 ] ||
    { cat "$tmp/log.bad"; fail "bad usage '$*': exit $rc, expected 2 and '$want'"; }
  [ ! -e "$tmp/bad" ] || fail "bad usage '$*' created the output folder"
}
bad '--name is required' --base 'echo 1' --head 'echo 1'
bad '--base and --head each need a command' --name t --base 'echo 1'
bad '--rounds must be 2..64' --name t --base 'echo 1' --head 'echo 1' --rounds 1
bad '--rounds must be a whole number' --name t --base 'echo 1' --head 'echo 1' --rounds x
bad '--max_rounds must be from --rounds (8) to 64, got 6' --name t --base 'echo 1' --head 'echo 1' --max_rounds 6
bad '--max_rounds must be from --rounds (8) to 64, got 65' --name t --base 'echo 1' --head 'echo 1' --max_rounds 65
bad '--max_rounds must be a whole number' --name t --base 'echo 1' --head 'echo 1' --max_rounds 1e2
bad '--alpha must be a number' --name t --base 'echo 1' --head 'echo 1' --alpha 0.9
bad '--name may hold' --name 'a b' --base 'echo 1' --head 'echo 1'
PD_AB_PROBE=2 bad "PD_AB_PROBE must be 0 or 1, got '2'" --name t --base 'echo 1' --head 'echo 1'
bad 'pd_ab sets --output_json itself' --name t --base 'echo 1' --head 'echo 1' -- --output_json x.json
bad "unknown option '--bogus'" --name t --bogus
bad "--head: cannot split" --name t --base 'echo 1' --head "echo 'unclosed"
"$src/scripts/pd_ab.sh" --pd_run "$tmp/nope" --name t --base 'echo 1' --head 'echo 1' --out "$tmp/bad" >"$tmp/log.bad" 2>&1
[ $? -eq 2 ] && grep -q 'no pd_run at' "$tmp/log.bad" && [ ! -e "$tmp/bad" ] || { cat "$tmp/log.bad"; fail "missing pd_run"; }
# a pd_run that cannot load its libraries (a fake ldd says so): exit 2 naming them, nothing created
mkdir -p "$tmp/fakeldd"
printf '#!/bin/sh\nfor p in "$@"; do echo "$p:"; echo "\tlibpd_gone.so.1 => not found"; done\n' >"$tmp/fakeldd/ldd"
chmod +x "$tmp/fakeldd/ldd"
PATH="$tmp/fakeldd:$PATH" ab --name t --base 'echo 1' --head 'echo 1' --out "$tmp/bad" >"$tmp/log.bad" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q 'libraries not found .*libpd_gone.so.1' "$tmp/log.bad" && [ ! -e "$tmp/bad" ] ||
  { cat "$tmp/log.bad"; fail "missing libraries: exit $rc, or not said, or the output folder created"; }
echo "pd_ab_script: passed"
