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
# ROUNDS: 2..64 (default 8, the fewest that can reach alpha 0.01: 2^-8 = 0.004).
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
if ldd "${demo[base]}" "${demo[head]}" "$compare" 2>/dev/null | grep -q 'not found'; then
  root=$PWD
  build=$(cd "$2" && pwd) || exit 2
  libdir_override=$build/.host_missing_libs_ab # not the acceptance tests' own folder
  # shellcheck source=scripts/gpu_libpath.sh
  . scripts/gpu_libpath.sh
  missing=$(ldd "${demo[base]}" "${demo[head]}" "$compare" 2>/dev/null | grep 'not found' | sort -u | tr -s ' \t' ' ')
  [ -z "$missing" ] || { echo "gpu_ab: libraries not found (build here, or carry .gpu_bundle from scripts/gpu_prepare.sh):$missing" >&2; exit 2; }
fi
[ -n "$(command -v nvidia-smi)" ] && nvidia-smi -L >/dev/null 2>&1 || { echo "gpu_ab: no GPU visible (nvidia-smi -L)" >&2; exit 3; }
keep=1
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/pd_ab.XXXXXX")
  keep=0
fi
mkdir -p "$out" || { echo "gpu_ab: cannot create $out" >&2; exit 2; }
[ "$keep" -eq 1 ] || trap 'rm -rf "$out"' EXIT
read -r -a scenarios <<<"${PD_SCENARIOS:-clean dataloader sync tiny_ops memory_churn}"
read -r -a args <<<"$(grep -v '^[[:space:]]*#' baselines/acceptance.args | tr '\n' ' ')"

# run SIDE SCENARIO FILE: one profiler_demo run; exits the script on a failure.
run() {
  local log=$out/run.log
  "${demo[$1]}" --scenario "$2" "${args[@]}" --quiet --trace_dir "$out/traces" --output_json "$3" >"$log" 2>&1
  local rc=$?
  rm -rf "$out/traces"
  if [ "$rc" -eq 3 ]; then echo "gpu_ab: no CUDA device (profiler_demo exit 3)" >&2; exit 3; fi
  if [ "$rc" -ne 0 ]; then
    echo "gpu_ab: the $1 build's profiler_demo --scenario $2 exited $rc:" >&2
    tail -n 5 "$log" >&2
    exit 1
  fi
}

t0=$SECONDS
for side in base head; do
  for _ in 1 2 3; do run "$side" clean "$out/warm.json"; done
done
for ((r = 1; r <= rounds; r++)); do
  order=(base head)
  [ $((r % 2)) -eq 0 ] && order=(head base)
  for s in "${scenarios[@]}"; do
    mkdir -p "$out/$s"
    for side in "${order[@]}"; do run "$side" "$s" "$out/$s/$side.$r.json"; done
  done
done
echo "gpu_ab: $rounds rounds of ${#scenarios[@]} scenarios, both builds interleaved, in $((SECONDS - t0)) s"

status=0
summary=$out/summary.md
{
  echo "## profile_compare A/B: $rounds interleaved rounds on $(hostname)"
  echo
} >"$summary"
for s in "${scenarios[@]}"; do
  base_runs=() head_runs=()
  for ((r = 1; r <= rounds; r++)); do
    base_runs+=("$out/$s/base.$r.json")
    head_runs+=("$out/$s/head.$r.json")
  done
  rc=0
  "$compare" --base "${base_runs[@]}" --head "${head_runs[@]}" --json "$out/$s.ab.json" \
    --markdown "$out/$s.ab.md" >"$out/$s.ab.txt" 2>&1 || rc=$?
  case "$rc" in
    0) echo "gpu_ab: $s: within policy" ;;
    1) echo "gpu_ab: $s: REGRESSED"; sed -n '/^metric/,$p' "$out/$s.ab.txt" | grep -E 'regressed|missing|what changed|^  |result' ;;
    *) echo "gpu_ab: $s: profile_compare exited $rc:"; cat "$out/$s.ab.txt" ;;
  esac
  [ "$rc" -eq 0 ] || status=1
  [ -f "$out/$s.ab.md" ] && { cat "$out/$s.ab.md"; echo; } >>"$summary"
done
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$summary" >>"$GITHUB_STEP_SUMMARY"; fi
exit "$status"
