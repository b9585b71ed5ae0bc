#!/usr/bin/env bash
# gate_eval.sh BUILD_DIR DATA_DIR [SUBSET_ROUNDS]: the regression gate's false alarms and
# power, computed from the metrics JSONs bench/gate/gate_data.sh recorded on one GPU host
# (DATA_DIR), with this build's profile_compare and the committed baselines. Needs no GPU,
# so the figures can be recomputed after a policy change.
#  - stored, unchanged: every unchanged run (base/*/*.json, ab/*/{a,b}.json) against
#    baselines/<slug>/<scenario>.json, one run judged alone (the acceptance suite reruns a
#    regressing run once; that is not modelled here);
#  - stored, GPU side: gpu/<level>/*.json (--inject_gpu_slowdown) against the clean
#    baseline: caught when gpu_kernel_time_per_step_us regresses; with the measured change;
#  - A/B: all recorded rounds, then 20 seeded subsets of SUBSET_ROUNDS rounds (default 8, the
#    acceptance suite's), with head = b (no change), h3 and h5 (--inject_slowdown 0.03, 0.05)
#    against base = a. Subsets of one recording are not independent A/Bs: say so when quoting.
# Prints Markdown tables. Exit 0, 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${1:?usage: gate_eval.sh BUILD_DIR DATA_DIR [SUBSET_ROUNDS]}
data=${2:?usage: gate_eval.sh BUILD_DIR DATA_DIR [SUBSET_ROUNDS]}
sub=${3:-8}
pc=$build/src/cli/profile_compare/profile_compare
[ -x "$pc" ] || { echo "gate_eval: no profile_compare at $pc" >&2; exit 2; }
[ -d "$data/base" ] || { echo "gate_eval: $data has no base/ (not a gate_data.sh folder)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# field FILE METRIC KEY: a row's field from a --json report, via python3.
field() {
  python3 -c "import json,sys;r=json.load(open(sys.argv[1]));print(next((x[sys.argv[3]] for x in r['rows'] if x['metric']==sys.argv[2]),'-'))" "$@"
}
slug=$("$pc" --slug "$data/base/clean/1.json") || exit 2
echo "### $data on $slug"
echo
echo "| comparison | runs | failed | note |"
echo "|---|---:|---:|---|"
n=0 f=0 why=""
for run in "$data"/base/*/*.json "$data"/ab/*/a.json "$data"/ab/*/b.json; do
  [ -f "$run" ] || continue
  s=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['config']['scenario'])" "$run")
  n=$((n + 1))
  if ! "$pc" "$run" "baselines/$slug/$s.json" --quiet --json "$tmp/r.json"; then
    f=$((f + 1))
    why="$why $(python3 -c "import json;r=json.load(open('$tmp/r.json'));print(','.join(x['metric'] for x in r['rows'] if x['verdict'] in ('regressed','missing')))")"
  fi
done
echo "| stored baseline, unchanged runs, one run alone | $n | $f |${why:- } |"
for level in "$data"/gpu/*; do
  [ -d "$level" ] || continue
  n=0 c=0 ch=""
  for run in "$level"/*.json; do
    n=$((n + 1))
    "$pc" "$run" "baselines/$slug/clean.json" --quiet --json "$tmp/r.json"
    [ "$(field "$tmp/r.json" gpu_kernel_time_per_step_us verdict)" = regressed ] && c=$((c + 1))
    ch="$ch $(printf '%.1f' "$(field "$tmp/r.json" gpu_kernel_time_per_step_us change_pct)")"
  done
  echo "| stored baseline, --inject_gpu_slowdown $(basename "$level") | $n | $c caught | kernel time change %:$ch |"
done
rounds=$(find "$data/ab" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
for head in b h3 h5; do
  [ "$rounds" -ge 2 ] || break
  base_runs=() head_runs=()
  for ((r = 1; r <= rounds; r++)); do base_runs+=("$data/ab/$r/a.json"); head_runs+=("$data/ab/$r/$head.json"); done
  "$pc" --base "${base_runs[@]}" --head "${head_runs[@]}" --quiet --json "$tmp/r.json"
  all="p10 $(printf '%+.1f%%' "$(field "$tmp/r.json" step_time_p10_s change_pct)") $(field "$tmp/r.json" step_time_p10_s verdict)"
  caught=0 failed=0
  for seed in $(seq 1 20); do
    mapfile -t pick < <(python3 -c "import random;random.seed($seed);print('\n'.join(map(str,sorted(random.sample(range(1,$rounds+1),$sub)))))")
    base_runs=() head_runs=()
    for r in "${pick[@]}"; do base_runs+=("$data/ab/$r/a.json"); head_runs+=("$data/ab/$r/$head.json"); done
    "$pc" --base "${base_runs[@]}" --head "${head_runs[@]}" --quiet --json "$tmp/r.json" || failed=$((failed + 1))
    [ "$(field "$tmp/r.json" step_time_p10_s verdict)" = regressed ] && caught=$((caught + 1))
  done
  echo "| A/B head=$head: all $rounds rounds: $all; 20 subsets of $sub rounds | 20 | $failed | step_time_p10_s regressed in $caught |"
done
