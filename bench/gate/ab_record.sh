#!/usr/bin/env bash
# ab_record.sh BUILD_DIR OUT_DIR [ROUNDS] [COMMIT]: records on this GPU host the runs the
# A/B's power and false alarms are evaluated from offline (bench/gate/ab_eval.py), into
# OUT_DIR/<scenario>/<round>/<kind>.json for the scenarios PD_AB_SCENARIOS names (of
# clean, tiny_ops, sync and memory_churn, space- or comma-separated; default clean and
# tiny_ops), with the flags of
# baselines/acceptance.args and --warmup_steps PD_AB_WARMUP (default 48, as gpu_ab.sh). Each round runs, per scenario, four kinds in an order that
# rotates from round to round (no kind always first):
#   a, b  the unchanged build (two, so that an A/B of the build against itself exists)
#   h5    --inject_slowdown 0.05
#   h10   --inject_slowdown 0.10
# ab_eval.py builds A/Bs from disjoint runs: blocks of rounds of one recording, each run in
# at most one A/B. Also written: times.tsv (scenario, kind, round, seconds per run: the
# A/B's wall time is estimated from it; two runs each of dataloader, sync and memory_churn
# are timed at the end, kind t, not kept) and host.txt (boot id, GPU, CPU, the commit given).
# Three unmeasured warm-up runs come first (as scripts/gpu_acceptance.sh); traces are
# deleted. A round is 8 runs (about 10 s on an H100); the default 40 rounds take about
# 6.5 minutes, the timing runs about 15 s more. Progress goes to stdout every round.
# OUT_DIR.tar.gz is written last: the file to commit under bench/gate/data/.
# Exit 0 when every run succeeded, 1 a run failed, 2 bad usage, 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: ab_record.sh BUILD_DIR OUT_DIR [ROUNDS] [COMMIT]"
[ $# -ge 2 ] && [ $# -le 4 ] || { echo "ab_record: $usage" >&2; exit 2; }
build=$1
out=$2
rounds=${3:-40}
commit=${4:-unknown}
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
pd_whole_number ROUNDS "$rounds" || exit 2
[ "$rounds" -ge 1 ] || { echo "ab_record: ROUNDS must be at least 1" >&2; exit 2; }
scenarios=()
pd_ab_record_scenarios scenarios || exit 2
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "ab_record: no program at $demo (build first)" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "ab_record: no GPU visible (nvidia-smi -L)" >&2; exit 3; }
# A build carried here (scripts/gpu_prepare.sh with .gpu_bundle/): its library path.
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
args=()
pd_args_read baselines/acceptance.args args || exit 2
# The untraced warmup steps the A/B judges host time on: as many as scripts/gpu_ab.sh gives.
pd_ab_probe_check "$demo" || exit 2
w=()
pd_ab_warmup_args clean w || exit 2
warm=${w[1]}
# PD_AB_ARGS: more profiler_demo flags for every run (e.g. --pin_cpu), kept in host.txt's args.
read -r -a extra <<<"${PD_AB_ARGS:-}"
args+=("${extra[@]}")
kinds=(a h5 b h10)
mkdir -p "$out" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  pd_machine_lines
  echo "commit $commit"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "rounds $rounds"
  echo "scenarios ${scenarios[*]}"
  echo "args ${args[*]} --warmup_steps $warm$([ "${pd_ab_probe:-0}" = 1 ] && echo " --warmup_probe") (dataloader: without it)"
} >"$out/host.txt"
printf 'scenario\tkind\tround\tseconds\n' >"$out/times.tsv"

# run FILE --scenario NAME ARGS...: one profiler_demo run writing FILE; prints its wall seconds.
run() {
  local file=$1
  shift
  mkdir -p "$(dirname "$file")"
  local t0 t1
  t0=$(date +%s.%N)
  local w=()
  pd_ab_warmup_args "$2" w || exit 2 # every call passes --scenario NAME first
  pd_demo_run "profiler_demo $*" "$file" "$tmp" "$demo" "$@" "${args[@]}" "${w[@]}" || exit $?
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

t0=$SECONDS
for _ in 1 2 3; do run "$tmp/warm.json" --scenario clean >/dev/null; done
for ((r = 1; r <= rounds; r++)); do
  for s in "${scenarios[@]}"; do
    for ((k = 0; k < 4; k++)); do
      kind=${kinds[$(((k + r) % 4))]}
      extra=()
      case "$kind" in h5) extra=(--inject_slowdown 0.05) ;; h10) extra=(--inject_slowdown 0.10) ;; esac
      sec=$(run "$out/$s/$r/$kind.json" --scenario "$s" "${extra[@]}") || exit $?
      printf '%s\t%s\t%d\t%s\n' "$s" "$kind" "$r" "$sec" >>"$out/times.tsv"
    done
  done
  el=$((SECONDS - t0))
  echo "ab_record: round $r of $rounds done, ${el} s (about $((el * rounds / r - el)) s left)"
done
# The other three scenarios' run times (two runs each), for the estimate of a whole A/B's
# wall time; their runs are not kept.
for s in dataloader sync memory_churn; do
  for i in 1 2; do
    sec=$(run "$tmp/timing.json" --scenario "$s") || exit $?
    printf '%s\t%s\t%d\t%s\n' "$s" t "$i" "$sec" >>"$out/times.tsv"
  done
done
# One compressed file to keep (bench/gate/data/; ab_eval.py reads it as it is).
tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")" || { echo "ab_record: cannot write $out.tar.gz" >&2; exit 1; }
echo "ab_record: $rounds rounds of ${#scenarios[@]} scenarios x ${#kinds[@]} kinds, and timing runs, in $((SECONDS - t0)) s into $out and $out.tar.gz ($(du -h "$out.tar.gz" | cut -f1))"
