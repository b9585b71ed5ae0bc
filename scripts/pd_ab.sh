#!/usr/bin/env bash
# pd_ab.sh: an A/B of two commands under pd_run, interleaved on one machine: a user's own
# program gated the way scripts/gpu_ab.sh gates the lab's scenarios.
#
#   scripts/pd_ab.sh [--rounds N] [--max_rounds M] [--out DIR] [--pd_run PATH] [--alpha A]
#                    --name NAME --base 'COMMAND' --head 'COMMAND' [-- PD_RUN_OPTIONS...]
#
# Each round runs the base command and the head command once each under pd_run (which of
# the two goes first alternates from round to round), every run a fresh process, with
# --name NAME (the metrics JSONs' scenario: both sides must share it) and the
# PD_RUN_OPTIONS given after "--" (the steps: --step_range or --step_kernel, a schedule).
# A command is a program and its arguments in one string, split into words as the shell
# splits them (quotes kept; no pipes, ';' or '&&': put those in a script), and run as
# pd_run's direct child, so its outputs are the ones named here. E.g.
#   scripts/pd_ab.sh --name train --base 'python3 train.py' --head 'python3 train.py --new' \
#       -- --step_range train_step --skip_first 10 --warmup 1 --active 30
# Then profile_compare compares them as gpu_ab.sh does (--base ... --head ...: the mean of
# every run's value, host times adjusted for each run's calibration, a two-sample
# permutation test, one gating host metric chosen by --primary auto: the 10th percentile of
# the steps pd_run timed untraced (warmup_step_times_s: the schedule's steps outside its
# cycles, where CUPTI records nothing), or of the profiled steps where a run has none (a
# pd_run before them); the report says which; where a run carries no calibration: the
# better half, paired by round, saying so).
# Rounds are sequential, as gpu_ab.sh's: the first look at N rounds (--rounds, default 8),
# then 8 more rounds at a time while the gating row is undecided (worse by more than half
# its tolerance, or beyond it and not significant), up to M (--max_rounds, default 3 x N,
# at most 64; M = N gives one look); --alpha (default 0.01) is spent across the looks
# (0.4 of it at the first, the rest split evenly over the later ones), so looking again
# does not raise the false-alarm rate. A program's processes can differ by 8-9% (the
# PyTorch step on an H200, docs/gate.md): 8 rounds see only changes of about 20%. With
# --step_range among the options, every run also gets pd_run --probe (where this pd_run has
# it; PD_AB_PROBE=0: never): the thread's speed after each untraced step, which the
# comparison then takes as the untraced rows' covariate, as gpu_ab.sh does with
# profiler_demo --warmup_probe (profile_compare --primary auto: the untraced p50).
# OUT (default: a temporary folder, removed) keeps the runs'
# metrics JSONs, logs, traces, the report (ab.json, ab.md, ab.txt) and summary.md, which is
# appended to $GITHUB_STEP_SUMMARY when set. One warm-up run of each command comes first.
# pd_run comes from --pd_run, else $PD_RUN, else build/src/cli/pd_run/pd_run; profile_compare
# from the same build. Exit: 0 within policy; 1 regressed, or a run failed (its log is
# printed); 2 bad usage or a missing program, before anything runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: scripts/pd_ab.sh [--rounds N] [--max_rounds M] [--out DIR] [--pd_run PATH] [--alpha A] --name NAME --base 'COMMAND' --head 'COMMAND' [-- PD_RUN_OPTIONS...]"
die() { echo "pd_ab: $*" >&2; exit 2; }
# shellcheck source=scripts/lib_args.sh
. "$root/scripts/lib_args.sh"
step=8 # rounds added at each later look, as gpu_ab.sh adds them
rounds=8 max_rounds="" out="" pd_run=${PD_RUN:-$root/build/src/cli/pd_run/pd_run} alpha=0.01 name="" base="" head=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds | --max_rounds | --out | --pd_run | --alpha | --name | --base | --head)
      [ $# -ge 2 ] || die "$1 needs a value ($usage)"
      case "$1" in
        --rounds) rounds=$2 ;; --max_rounds) max_rounds=$2 ;; --out) out=$2 ;; --pd_run) pd_run=$2 ;; --alpha) alpha=$2 ;;
        --name) name=$2 ;; --base) base=$2 ;; --head) head=$2 ;;
      esac
      shift 2 ;;
    --) shift; break ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) die "unknown option '$1' ($usage)" ;;
  esac
done
pd_opts=("$@")
[ -n "$name" ] || die "--name is required: the program's name in both sides' metrics JSONs ($usage)"
[ -n "$base" ] && [ -n "$head" ] || die "--base and --head each need a command ($usage)"
case "$rounds" in '' | *[!0-9]*) die "--rounds must be a whole number, got '$rounds'" ;; esac
{ [ "$rounds" -ge 2 ] && [ "$rounds" -le 64 ]; } || die "--rounds must be 2..64, got $rounds"
[ -n "$max_rounds" ] || max_rounds=$((rounds * 3 > 64 ? 64 : rounds * 3))
case "$max_rounds" in '' | *[!0-9]*) die "--max_rounds must be a whole number, got '$max_rounds'" ;; esac
{ [ "$max_rounds" -ge "$rounds" ] && [ "$max_rounds" -le 64 ]; } ||
  die "--max_rounds must be from --rounds ($rounds) to 64, got $max_rounds"
awk -v a="$alpha" 'BEGIN { exit !(a + 0 > 0 && a + 0 <= 0.5 && a ~ /^[0-9.eE+-]+$/) }' ||
  die "--alpha must be a number with 0 < alpha <= 0.5, got '$alpha'"
case "${PD_AB_PROBE:-1}" in 0 | 1) ;; *) die "PD_AB_PROBE must be 0 or 1, got '$PD_AB_PROBE'" ;; esac
case "$name" in *[!A-Za-z0-9._-]*) die "--name may hold letters, digits, '.', '_' and '-' only, got '$name'" ;; esac
has_range=0 has_probe=0
for o in "${pd_opts[@]}"; do
  case "$o" in
    --output_json | --output_json=* | --name | --name=* | --trace_dir | --trace_dir=*)
      die "pd_ab sets $o itself; leave it out of the pd_run options" ;;
    --step_range | --step_range=*) has_range=1 ;;
    --probe) has_probe=1 ;;
  esac
done
# The commands as words, as the shell would read them typed (quotes and expansions: the
# string is the user's own command line).
words() { eval "set -- $1" 2>/dev/null && printf '%s\0' "$@"; }
mapfile -d '' base_argv < <(words "$base") && [ "${#base_argv[@]}" -gt 0 ] || die "--base: cannot split '$base' into words"
mapfile -d '' head_argv < <(words "$head") && [ "${#head_argv[@]}" -gt 0 ] || die "--head: cannot split '$head' into words"

[ -x "$pd_run" ] || die "no pd_run at '$pd_run' (build first, or give --pd_run PATH)"
compare=$(dirname "$pd_run")/../profile_compare/profile_compare
[ -x "$compare" ] || die "no profile_compare next to pd_run ('$compare')"
# A build carried to a GPU host (scripts/gpu_prepare.sh, with .gpu_bundle/) needs the
# library path gpu_acceptance.sh sets: the one helper, doing nothing where pd_run and
# profile_compare already load. Before OUT is made: a missing library creates nothing.
libtmp=$(mktemp -d) || die "cannot create a temporary folder"
trap 'rm -rf "$libtmp"' EXIT
# shellcheck disable=SC2034  # libdir_override and libpath_probe are read by gpu_libpath.sh
libdir_override=$libtmp/libs
# shellcheck disable=SC2034
libpath_probe=("$pd_run" "$compare")
pushd "$root" >/dev/null || die "cannot enter '$root'"
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
popd >/dev/null || die "cannot return to the working folder"
missing=$(ldd "$pd_run" "$compare" 2>/dev/null | grep 'not found' | sort -u | tr -s ' \t' ' ')
[ -z "$missing" ] || die "libraries not found (build here, or carry .gpu_bundle from scripts/gpu_prepare.sh):$missing"
# pd_run --probe (the thread's speed after each untraced step, the untraced rows' covariate,
# as gpu_ab.sh gives profiler_demo --warmup_probe) where the steps are NVTX ranges, this
# pd_run knows the flag and it is not given already; PD_AB_PROBE=0: never
probe_note="no probe"
if [ "$has_probe" = 1 ]; then
  probe_note="--probe given"
elif [ "${PD_AB_PROBE:-1}" = 1 ] && [ "$has_range" = 1 ] && pd_help_names "$pd_run" --probe; then
  pd_opts+=(--probe)
  probe_note="--probe added"
fi
if [ -n "$out" ]; then
  mkdir -p "$out" || die "cannot create '$out'"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out" "$libtmp"' EXIT
fi
mkdir -p "$out/runs" "$out/logs" "$out/traces" || die "cannot write under '$out'"

# run SIDE FILE: one run of that side's command under pd_run; exits 1 on a failure.
run() {
  local side=$1 file=$2 cmd
  local -a argv
  if [ "$side" = base ]; then cmd=$base argv=("${base_argv[@]}"); else cmd=$head argv=("${head_argv[@]}"); fi
  local log
  log=$out/logs/$(basename "$file" .json).log
  "$pd_run" --name "$name" --output_json "$file" --trace_dir "$out/traces" "${pd_opts[@]}" -- "${argv[@]}" \
    >"$log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ] || [ ! -s "$file" ]; then
    echo "pd_ab: the $side command failed (exit $rc$([ -s "$file" ] || echo ', no metrics JSON')): $cmd" >&2
    tail -n 8 "$log" | sed 's/^/  | /' >&2
    exit 1
  fi
}

# judge N ALPHA: profile_compare of the first N rounds (unadjusted, said so in $how, where a
# run carries no calibration); its exit status in $rc
judge() {
  local n=$1 a=$2 r
  local -a base_runs=() head_runs=() cmp=(--primary auto --alpha "$a" --json "$out/ab.json" --markdown "$out/ab.md")
  for ((r = 1; r <= n; r++)); do
    base_runs+=("$out/runs/base.$r.json")
    head_runs+=("$out/runs/head.$r.json")
  done
  rc=0
  how="host times adjusted for each run's traced-call cost"
  "$compare" --base "${base_runs[@]}" --head "${head_runs[@]}" "${cmp[@]}" --adjust --keep 1 --unpaired >"$out/ab.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 2 ] && grep -q ns_per_cuda_call "$out/ab.txt"; then
    how="not adjusted: a run carries no profiler calibration (better half of the runs)"
    rc=0
    "$compare" --base "${base_runs[@]}" --head "${head_runs[@]}" "${cmp[@]}" >"$out/ab.txt" 2>&1 || rc=$?
  fi
}

t0=$SECONDS
run base "$out/runs/warm.base.json"
run head "$out/runs/warm.head.json"
# Sequential rounds, as gpu_ab.sh runs them: look at N rounds, then every 8 more while the
# gating row is undecided, up to M; alpha spent across the looks (pd_ab_look_alpha)
looks=$((1 + (max_rounds - rounds + step - 1) / step))
look=0 target=$rounds done_rounds=0
while :; do
  look=$((look + 1))
  for ((r = done_rounds + 1; r <= target; r++)); do
    order=(base head)
    [ $((r % 2)) -eq 0 ] && order=(head base)
    for side in "${order[@]}"; do run "$side" "$out/runs/$side.$r.json"; done
    echo "pd_ab: round $r of at most $max_rounds done ($((SECONDS - t0)) s)"
  done
  done_rounds=$target
  look_alpha=$(pd_ab_look_alpha "$look" "$looks" "$alpha")
  judge "$target" "$look_alpha"
  undecided=$(pd_ab_undecided "$out/ab.json")
  if [ "$rc" -eq 0 ] && [ "$undecided" -gt 0 ] && [ "$target" -lt "$max_rounds" ]; then
    echo "pd_ab: undecided after $target rounds (alpha $look_alpha): more rounds"
    target=$((target + step > max_rounds ? max_rounds : target + step))
    continue
  fi
  break
done
rounds_note="$target rounds, look $look of at most $looks, alpha $look_alpha"
[ "$rc" -eq 0 ] && [ "$undecided" -gt 0 ] && rounds_note+="; still undecided at the cap of $max_rounds rounds"
cat "$out/ab.txt"
{
  echo "## pd_ab: $name, interleaved rounds on $(hostname) ($rounds_note; $how; $probe_note)"
  echo
  echo "- base: \`$base\`"
  echo "- head: \`$head\`"
  echo
  [ -f "$out/ab.md" ] && cat "$out/ab.md"
} >"$out/summary.md"
[ -n "${GITHUB_STEP_SUMMARY:-}" ] && cat "$out/summary.md" >>"$GITHUB_STEP_SUMMARY"
case "$rc" in
  0) echo "pd_ab: $name: within policy ($rounds_note; $how; $probe_note) in $((SECONDS - t0)) s" ;;
  1) echo "pd_ab: $name: REGRESSED ($rounds_note; $how; $probe_note) in $((SECONDS - t0)) s" ;;
  *) echo "pd_ab: profile_compare exited $rc (its output above)"; rc=1 ;;
esac
exit "$rc"
