#!/usr/bin/env bash
# run_cost.sh BUILD_DIR [RUNS]: where an A/B run's wall time goes, on a GPU host. The A/B's
# power for a small host slowdown is bounded by how many processes a side gets in its time
# (docs/gate.md: what is left after the covariate is a constant of each process), so this
# times, RUNS times each (default 5, interleaved), one process of:
#   ab        a tiny_ops run as scripts/gpu_ab.sh makes it (baselines/acceptance.args,
#             --warmup_steps 48, --quiet, a trace and a metrics JSON written);
#   noprof    the same with --no_profile (no CUPTI, no calibration, no trace, no analysis);
#   cuda      examples/inject_steps --steps 1 (a CUDA context, one step of tiny kernels:
#             what any CUDA process pays to start);
# and prints a table of the median wall seconds, and from the ab run's metrics JSON the
# profiler's own phases (profiler_cost: enable, flush, parse, calibrate) and the steps'
# time. Exit 0; 2 bad usage or no build; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: run_cost.sh BUILD_DIR [RUNS]"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "run_cost: $usage" >&2; exit 2; }
build=$1
runs=${2:-5}
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
pd_whole_number RUNS "$runs" || exit 2
[ "$runs" -ge 1 ] || { echo "run_cost: RUNS must be at least 1" >&2; exit 2; }
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
example=$build/examples/inject_steps/inject_steps
[ -x "$demo" ] && [ -x "$example" ] || { echo "run_cost: no $demo or $example (build first)" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "run_cost: no GPU visible (nvidia-smi -L)" >&2; exit 3; }
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=("$demo" "$example")
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
args=()
pd_args_read baselines/acceptance.args args || exit 2
w=()
pd_ab_probe_check "$demo" || exit 2
pd_ab_warmup_args tiny_ops w || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# timed KIND CMD...: runs CMD, appends "KIND seconds" to $tmp/times
timed() {
  local kind=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$@" >"$tmp/log" 2>&1 || { echo "run_cost: $kind exited $?:" >&2; tail -n 5 "$tmp/log" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v k="$kind" -v a="$t0" -v b="$t1" 'BEGIN { printf "%s %.4f\n", k, b - a }' >>"$tmp/times"
}
for ((i = 1; i <= runs; i++)); do
  timed ab "$demo" --scenario tiny_ops "${args[@]}" "${w[@]}" --quiet --trace_dir "$tmp/t" --output_json "$tmp/ab$i.json"
  timed noprof "$demo" --scenario tiny_ops "${args[@]}" "${w[@]}" --quiet --no_profile --trace_dir "$tmp/t" --output_json "$tmp/np$i.json"
  timed cuda "$example" --steps 1
done
echo "run_cost: $runs runs of each, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), boot $(cut -c1-8 /proc/sys/kernel/random/boot_id)"
echo "| process | median wall s | min | max |"
echo "|---|---:|---:|---:|"
for k in ab noprof cuda; do
  awk -v k="$k" '$1 == k { print $2 }' "$tmp/times" | sort -g |
    awk -v k="$k" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "| %s | %.3f | %.3f | %.3f |\n", k, m, v[1], v[NR] }'
done
# the ab runs' own phases, from their metrics JSONs (medians over the runs)
python3 - "$tmp" "$runs" <<'PY'
import json, statistics, sys
tmp, n = sys.argv[1], int(sys.argv[2])
rows = {}
for i in range(1, n + 1):
    d = json.load(open(f"{tmp}/ab{i}.json"))
    pc = d.get("profiler_cost") or {}
    for k in ("enable_ms", "flush_ms", "parse_ms", "calibrate_ms"):
        if isinstance(pc.get(k), (int, float)):
            rows.setdefault(k, []).append(pc[k])
    rows.setdefault("warmup steps ms", []).append(1e3 * sum(d.get("warmup_step_times_s") or []))
    rows.setdefault("profiled steps ms", []).append(1e3 * sum(d.get("step_times_s") or []))
print("| ab run's phase | median ms |")
print("|---|---:|")
for k, v in rows.items():
    print(f"| {k} | {statistics.median(v):.1f} |")
PY
