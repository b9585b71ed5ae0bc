#!/usr/bin/env bash
# gpu_ab.sh BASE_BUILD HEAD_BUILD [ROUNDS] [OUT_DIR]: the regression gate's same-machine
# A/B. Runs every scenario with both builds interleaved on this GPU host, round after
# round (base then head in odd rounds, head then base in even ones, so neither build
# always runs first), with the flags of baselines/acceptance.args, then compares each
# scenario's head runs with its base runs (profile_compare --base ... --head ...: host
# and device times by a paired permutation test over the rounds, counts exactly, the
# regression explained by the kernels and ops that changed).
#
# Host-class times move by tens of percent from one host to the next (docs/gate.md), so
# they are judged here, where both builds share the machine's state; the stored baselines
# judge device time, counts and the verdict.
#
# Sequential rounds (as Chromium Pinpoint escalates undecided comparisons): after ROUNDS
# rounds each scenario is compared; one whose gating row is worse by more than half its
# tolerance but not significant ("undecided") gets PD_AB_STEP (default 8) more rounds, up
# to PD_AB_MAX_ROUNDS (default 40) for clean and tiny_ops, the two scenarios whose step is
# the host's launch work, where a host-side slowdown shows most; up to
# PD_AB_OTHER_MAX_ROUNDS (default 24) for sync and memory_churn (and any other); dataloader
# stops at its first look unless PD_AB_DATALOADER_MAX_ROUNDS says otherwise (its runs take
# three times as long, and its step waits on the loader by design, so a host-side slowdown
# hides behind the wait). With 40 rounds of every scenario but dataloader an A/B of all five
# took 414 s on a fresh H200 (docs/gate.md); the caps keep the longest under 6 minutes. A
# look compares the scenarios side by side (one profile_compare each, in parallel: the
# mde's simulations are CPU work, and no run is going on). alpha (0.01 in all)
# is spent across a scenario's looks: 0.004 at the first (2^-8 = 0.0039 is reachable with
# 8 rounds), the remaining 0.006 split evenly over the later ones, so looking more than
# once does not raise the false-alarm rate above 0.01; a scenario with one look gets
# 0.01. Still undecided at the cap: within policy, said so. PD_AB_MIN_ROUNDS (default 0):
# a scenario that passes before this many rounds gets more rounds anyway (its looks are
# made and their alpha spent as above; a failure at any look stands), for a smaller mde on
# a pass, or to time the longest A/B the cap allows (PD_AB_MIN_ROUNDS=40). One host metric gates,
# PD_AB_PRIMARY (default auto: profile_compare --primary auto chooses per scenario from the
# runs: where every run has the probe, the median of each run's untraced warmup steps,
# clean's 10th percentile; untraced steps without the probe, their 10th percentile; runs
# of a build before the untraced samples, step_time_p10_s; the report says which and why.
# The untraced steps are where the profiler's per-call state, 15-40% between processes,
# is not in the step. A named metric a base build's runs lack falls back to
# step_time_p10_s, said so; "all": every host row at alpha each). docs/gate.md ("Measured
# (2026-11-28, evening)") has why p10, 40 and half the tolerance with the one calibration
# as covariate, ("Measured (2026-11-29)" and "(2026-11-29, later)") why p50 with the probe,
# and p10 for clean. Every run but dataloader's gets --warmup_steps
# PD_AB_WARMUP (default 48) after the acceptance flags, so each has that many untraced
# steps, and --warmup_probe where both builds have it (PD_AB_PROBE=0: not). PD_AB_NORMALIZE=1 scales
# host times by each run's host calibration (both builds must write it); PD_AB_ADJUST=1
# (default) adjusts host times for each run's traced-call cost (profile_compare --adjust),
# averages every run (keep 1) and tests two samples (--unpaired); PD_AB_ADJUST=0 compares
# the better half unadjusted, paired by round;
# PD_AB_KEEP the statistic's share of runs. docs/gate.md has the evidence.
#
# ROUNDS: 2..64 (default 8, the fewest that can reach alpha 0.004: 2^-8 = 0.0039).
# OUT_DIR (default: a temporary folder, removed): runs, reports, summary.md; the Markdown
# tables are also appended to $GITHUB_STEP_SUMMARY when set. PD_SCENARIOS overrides the
# scenario list. Three unmeasured warm-up runs of each build come first.
# Exit: 0 every scenario within policy; 1 a regression or a failed run; 2 usage; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
usage="usage: gpu_ab.sh BASE_BUILD HEAD_BUILD [ROUNDS] [OUT_DIR]"
[ $# -ge 2 ] && [ $# -le 4 ] || { echo "gpu_ab: $usage" >&2; exit 2; }
rounds=${3:-8}
case "$rounds" in '' | *[!0-9]*) echo "gpu_ab: ROUNDS must be a whole number from 2 to 64, got '$rounds'" >&2; exit 2 ;; esac
if [ "$rounds" -lt 2 ] || [ "$rounds" -gt 64 ]; then
  echo "gpu_ab: ROUNDS must be from 2 to 64, got '$rounds'" >&2
  exit 2
fi
declare -A demo=([base]=$1/src/cli/profiler_demo/profiler_demo [head]=$2/src/cli/profiler_demo/profiler_demo)
for side in base head; do
  [ -x "${demo[$side]}" ] || { echo "gpu_ab: no profiler_demo in the $side build (${demo[$side]}); build it first" >&2; exit 2; }
done
compare=$(dirname "${demo[head]}")/../profile_compare/profile_compare
[ -x "$compare" ] || { echo "gpu_ab: no profile_compare next to the head build's profiler_demo" >&2; exit 2; }
out=${4:-}
# A build carried to this host (scripts/gpu_prepare.sh, with .gpu_bundle/) needs the
# library path gpu_acceptance.sh sets: the one helper, unless the programs already load
# (inside gpu_acceptance.sh, which set it before ctest started this script).
# shellcheck disable=SC2034  # root, build, libdir_override and libpath_probe are read by gpu_libpath.sh
root=$PWD
build=$(cd "$2" && pwd) || exit 2
# shellcheck disable=SC2034
libdir_override=$build/.host_missing_libs_ab # not the acceptance tests' own folder
# shellcheck disable=SC2034
libpath_probe=("${demo[base]}" "${demo[head]}" "$compare")
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
missing=$(ldd "${demo[base]}" "${demo[head]}" "$compare" 2>/dev/null | grep 'not found' | sort -u | tr -s ' \t' ' ')
[ -z "$missing" ] || { echo "gpu_ab: libraries not found (build here, or carry .gpu_bundle from scripts/gpu_prepare.sh):$missing" >&2; exit 2; }
[ -n "$(command -v nvidia-smi)" ] && nvidia-smi -L >/dev/null 2>&1 || { echo "gpu_ab: no GPU visible (nvidia-smi -L)" >&2; exit 3; }
keep=1
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/pd_ab.XXXXXX")
  keep=0
fi
mkdir -p "$out" || { echo "gpu_ab: cannot create $out" >&2; exit 2; }
[ "$keep" -eq 1 ] || trap 'rm -rf "$out"' EXIT
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
scenarios=()
pd_scenarios_chosen "${demo[head]}" scenarios || exit 2
args=()
pd_args_read baselines/acceptance.args args || exit 2
# --warmup_probe where both builds have it (PD_AB_PROBE=0: never): the untraced rows'
# covariate then follows the host's slow episodes during the judged steps (docs/gate.md)
pd_ab_probe_check "${demo[base]}" "${demo[head]}" || exit 2
w=()
pd_ab_warmup_args clean w || exit 2 # PD_AB_WARMUP checked before the first run

# run SIDE SCENARIO FILE: one profiler_demo run; exits the script on a failure.
run() {
  local w=()
  pd_ab_warmup_args "$2" w || exit 2
  pd_demo_run "the $1 build's profiler_demo --scenario $2" "$3" "$out/run" \
    "${demo[$1]}" --scenario "$2" "${args[@]}" "${w[@]}" || exit $?
}

max_rounds=${PD_AB_MAX_ROUNDS:-40} step=${PD_AB_STEP:-8} loader_max=${PD_AB_DATALOADER_MAX_ROUNDS:-$rounds}
other_max=${PD_AB_OTHER_MAX_ROUNDS:-24} min_rounds=${PD_AB_MIN_ROUNDS:-0}
pd_whole_number PD_AB_MAX_ROUNDS "$max_rounds" && pd_whole_number PD_AB_STEP "$step" &&
  pd_whole_number PD_AB_DATALOADER_MAX_ROUNDS "$loader_max" && pd_whole_number PD_AB_OTHER_MAX_ROUNDS "$other_max" &&
  pd_whole_number PD_AB_MIN_ROUNDS "$min_rounds" || exit 2
[ "$step" -ge 1 ] || step=1
# clamp_cap N: a cap from ROUNDS to 64
clamp_cap() {
  local c=$1
  [ "$c" -ge "$rounds" ] || c=$rounds
  [ "$c" -le 64 ] || c=64
  echo "$c"
}
max_rounds=$(clamp_cap "$max_rounds")
# on_look N: N rounded down to a look (ROUNDS + k x PD_AB_STEP): the scenarios advance
# together, so a cap between looks would be passed at the next one
on_look() { echo $((rounds + ($1 - rounds) / step * step)); }
loader_max=$(on_look "$(clamp_cap "$loader_max")")
other_max=$(on_look "$(clamp_cap "$other_max")")
[ "$loader_max" -le "$max_rounds" ] || loader_max=$max_rounds # never more than clean's
[ "$other_max" -le "$max_rounds" ] || other_max=$max_rounds
# cap_of SCENARIO: the most rounds it may get
cap_of() {
  case "$1" in
    clean | tiny_ops) echo "$max_rounds" ;;
    dataloader) echo "$loader_max" ;;
    *) echo "$other_max" ;;
  esac
}
# looks_of SCENARIO: how many looks its cap allows
looks_of() { local c; c=$(cap_of "$1"); echo $((1 + (c - rounds + step - 1) / step)); }
# look_alpha K SCENARIO: alpha at look K of the scenario's looks (see the header)
look_alpha() { pd_ab_look_alpha "$1" "$(looks_of "$2")" 0.01; }
cmp_args=()
# profile_compare chooses per scenario from the runs (--primary auto: untraced steps, the
# probe, the scenario) and says which and why
primary=${PD_AB_PRIMARY:-auto}
[ "$primary" = all ] || cmp_args+=(--primary "$primary")
[ "${PD_AB_NORMALIZE:-0}" = 1 ] && cmp_args+=(--normalize)
# The default statistic: the primary's value of every run, host times adjusted for each
# run's covariate (the untraced rows along the probe or the untraced launch, the traced
# ones along the traced-call cost), a two-sample permutation test (profile_compare --adjust --unpaired; docs/gate.md:
# together they halve the stated mde on the recordings). PD_AB_ADJUST=0 turns both off
# (then the better half and the paired test, as before); PD_AB_KEEP overrides keep.
adj_args=()
if [ "${PD_AB_ADJUST:-1}" = 1 ]; then
  adj_args=(--adjust --unpaired)
  [ -n "${PD_AB_KEEP:-}" ] || adj_args+=(--keep 1)
fi
[ -n "${PD_AB_KEEP:-}" ] && cmp_args+=(--keep "$PD_AB_KEEP")

# judge SCENARIO ROUNDS ALPHA: profile_compare of the scenario's first ROUNDS rounds
# (falling back for older builds, said so in $out/SCENARIO.judge.log); its exit status in
# $out/SCENARIO.rc. Looks run it for every pending scenario at once.
judge() {
  local s=$1 n=$2 alpha=$3 r rc=0 a
  local base_runs=() head_runs=() fb_args=()
  for ((r = 1; r <= n; r++)); do
    base_runs+=("$out/$s/base.$r.json")
    head_runs+=("$out/$s/head.$r.json")
  done
  : >"$out/$s.judge.log"
  "$compare" --base "${base_runs[@]}" --head "${head_runs[@]}" --alpha "$alpha" "${cmp_args[@]}" "${adj_args[@]}" \
    --json "$out/$s.ab.json" --markdown "$out/$s.ab.md" >"$out/$s.ab.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 2 ] && [ "${#adj_args[@]}" -gt 0 ] && grep -q ns_per_cuda_call "$out/$s.ab.txt"; then
    # a build older than the profiler's calibration: no covariate, the better half, paired
    echo "gpu_ab: $s: a build's runs carry no profiler_cost.calibration.ns_per_cuda_call: compared without --adjust" >>"$out/$s.judge.log"
    rc=0
    "$compare" --base "${base_runs[@]}" --head "${head_runs[@]}" --alpha "$alpha" "${cmp_args[@]}" \
      --json "$out/$s.ab.json" --markdown "$out/$s.ab.md" >"$out/$s.ab.txt" 2>&1 || rc=$?
  fi
  if [ "$rc" -eq 2 ] && [ "$primary" != step_time_p10_s ] && grep -q "primary metric '$primary'" "$out/$s.ab.txt"; then
    # a build older than the untraced samples (warmup_step_times_s): the traced step's p10
    echo "gpu_ab: $s: the runs carry no $primary (a build before warmup_step_times_s): compared on step_time_p10_s" >>"$out/$s.judge.log"
    for a in "${cmp_args[@]}"; do [ "$a" = "$primary" ] && a=step_time_p10_s; fb_args+=("$a"); done
    rc=0
    "$compare" --base "${base_runs[@]}" --head "${head_runs[@]}" --alpha "$alpha" "${fb_args[@]}" "${adj_args[@]}" \
      --json "$out/$s.ab.json" --markdown "$out/$s.ab.md" >"$out/$s.ab.txt" 2>&1 || rc=$?
  fi
  echo "$rc" >"$out/$s.rc"
}

t0=$SECONDS
for side in base head; do
  for _ in 1 2 3; do run "$side" clean "$out/warm.json"; done
done
declare -A done_rounds=() result=() note=() alpha_of=()
pending=("${scenarios[@]}")
for s in "${scenarios[@]}"; do done_rounds[$s]=0; mkdir -p "$out/$s"; done
look=0 target=$rounds
while [ "${#pending[@]}" -gt 0 ]; do
  look=$((look + 1))
  first=$((${done_rounds[${pending[0]}]} + 1)) # pending scenarios advance together
  for ((r = first; r <= target; r++)); do
    order=(base head)
    [ $((r % 2)) -eq 0 ] && order=(head base)
    for s in "${pending[@]}"; do
      for side in "${order[@]}"; do run "$side" "$s" "$out/$s/$side.$r.json"; done
    done
    echo "gpu_ab: round $r of ${pending[*]} done ($((SECONDS - t0)) s)"
  done
  for s in "${pending[@]}"; do
    done_rounds[$s]=$target
    alpha_of[$s]=$(look_alpha "$look" "$s")
    judge "$s" "$target" "${alpha_of[$s]}" &
  done
  wait
  next=()
  for s in "${pending[@]}"; do
    alpha=${alpha_of[$s]} cap=$(cap_of "$s")
    cat "$out/$s.judge.log"
    rc=$(cat "$out/$s.rc" 2>/dev/null || echo 2)
    undecided=$(pd_ab_undecided "$out/$s.ab.json")
    if [ "$rc" -eq 0 ] && [ "${undecided:-0}" -gt 0 ] && [ "$target" -lt "$cap" ]; then
      echo "gpu_ab: $s: undecided after $target rounds (alpha $alpha): more rounds"
      next+=("$s")
      continue
    fi
    if [ "$rc" -eq 0 ] && [ "$target" -lt "$min_rounds" ] && [ "$target" -lt "$cap" ]; then
      echo "gpu_ab: $s: within policy after $target rounds (alpha $alpha): more rounds (PD_AB_MIN_ROUNDS $min_rounds)"
      next+=("$s")
      continue
    fi
    result[$s]=$rc
    note[$s]="$target rounds, look $look of at most $(looks_of "$s"), alpha $alpha"
    [ "$rc" -eq 0 ] && [ "${undecided:-0}" -gt 0 ] && note[$s]="${note[$s]}; still undecided at the cap of $cap rounds"
  done
  pending=("${next[@]}")
  target=$((target + step))
  [ "$target" -le "$max_rounds" ] || target=$max_rounds
done
echo "gpu_ab: ${#scenarios[@]} scenarios, both builds interleaved, in $((SECONDS - t0)) s"

status=0
summary=$out/summary.md
{
  echo "## profile_compare A/B on $(hostname): sequential rounds ($rounds, then +$step while undecided: up to $max_rounds for clean and tiny_ops, $other_max for the others, $loader_max for dataloader)"
  echo
} >"$summary"
for s in "${scenarios[@]}"; do
  rc=${result[$s]}
  case "$rc" in
    0) echo "gpu_ab: $s: within policy (${note[$s]})" ;;
    1) echo "gpu_ab: $s: REGRESSED (${note[$s]})"; sed -n '/^metric/,$p' "$out/$s.ab.txt" | grep -E 'regressed|missing|what changed|^  |result' ;;
    *) echo "gpu_ab: $s: profile_compare exited $rc:"; cat "$out/$s.ab.txt" ;;
  esac
  [ "$rc" -eq 0 ] || status=1
  [ -f "$out/$s.ab.md" ] && { echo "${note[$s]}"; echo; cat "$out/$s.ab.md"; echo; } >>"$summary"
done
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$summary" >>"$GITHUB_STEP_SUMMARY"; fi
exit "$status"
