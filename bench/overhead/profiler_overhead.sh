#!/usr/bin/env bash
# profiler_overhead.sh BUILD_DIR [RUNS]: what the profiler costs the training step.
#
# For each scenario (clean, tiny_ops) it runs profiler_demo RUNS times (default 5) with
# the profiler and RUNS times with --no_profile, alternating, each with the same flags
# (--amp --pin_memory --profile_steps 50 --warmup_steps 20), and reads the avg and p50
# step time of every run's metrics JSON. The pairs alternate which half runs first
# (ABBA), so a drift in clocks or temperature over the benchmark does not land on one
# side. The table (Markdown) gives per scenario: the median over runs of each run's p50
# step time with and without the profiler, the overhead as the median of the per-pair
# ratios p50(profiled) / p50(unprofiled) - 1, their min..max, the same from the avg step
# times, the issue's target and whether the median meets it.
#
# The steps timed are the same in both runs (warmup, then 1 + 1 + profile_steps, step
# time between two device synchronizations); the profiled run pays CUPTI's activity
# records and callbacks and the host-range recording inside the step. Writing the trace
# happens after the last timed step and is not in the figures.
#
# Next to it, the profiler's own estimate of the time it added per step (the metrics
# JSON's profiler_cost.est_added_us_per_step, from its calibration on this host) and the
# measured added time (median over pairs of p50(profiled) - p50(unprofiled)).
#
# Then, in the same invocation on the same host, when python3 imports a CUDA build of
# torch (PD_OVERHEAD_TORCH=0 skips it): torch.profiler on the PyTorch version of the step
# (bench/overhead/torch_overhead.py, RUNS pairs each), and the ratios ours / torch of the
# overhead percentages and of the added time per step (target <= 0.25).
#
# Works on a GPU host from a carried build: profiler_demo is BUILD_DIR/src/cli/
# profiler_demo/profiler_demo, run with LD_LIBRARY_PATH as given. JSON reader: python3,
# else jq, else BUILD_DIR/bench/overhead/overhead_json_get (PD_OVERHEAD_READER=python3|
# jq|c picks one). PD_OVERHEAD_KEEP=DIR keeps every run's metrics JSON and log there.
#
# Exit: 0 after printing the table (whether or not a target is met); 2 on bad arguments;
# 3 when profiler_demo finds no CUDA device; 1 when a run or its JSON fails otherwise.
set -uo pipefail

prog=profiler_overhead.sh
scenarios=(clean tiny_ops)
flags=(--amp --pin_memory --profile_steps 50 --warmup_steps 20)

usage() {
  echo "usage: bench/overhead/profiler_overhead.sh BUILD_DIR [RUNS]"
  echo "  BUILD_DIR  a build of this repository (profiler_demo at BUILD_DIR/src/cli/profiler_demo/)"
  echo "  RUNS       profiled / unprofiled pairs per scenario, 1 to 100 (default 5)"
}

die_usage() {
  echo "$prog: $1" >&2
  usage >&2
  exit 2
}

if [ $# -ge 1 ] && { [ "$1" = "-h" ] || [ "$1" = "--help" ]; }; then
  usage
  exit 0
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then die_usage "expected BUILD_DIR [RUNS], got $# arguments"; fi
build=$1
runs=5
if [ $# -eq 2 ]; then runs=$2; fi
if ! [[ $runs =~ ^[0-9]{1,3}$ ]] || [ $((10#$runs)) -lt 1 ] || [ $((10#$runs)) -gt 100 ]; then
  die_usage "RUNS must be an integer from 1 to 100, got '$runs'"
fi
runs=$((10#$runs))
[ -d "$build" ] || die_usage "BUILD_DIR '$build' is not a directory"
demo=$build/src/cli/profiler_demo/profiler_demo
if ! [ -f "$demo" ] || ! [ -x "$demo" ]; then
  die_usage "no profiler_demo binary at '$demo' (build it: cmake --build $build --target profiler_demo)"
fi
c_reader=$build/bench/overhead/overhead_json_get

# ---- the JSON reader: one tab-separated line per file --------------------------------
# avg_step_time_s  p50_step_time_s  trace_files  kernels_per_step  no_profile  est_added_us  device

read_python3() {
  python3 - "$1" <<'PY'
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        d = json.load(f)
    m = d["metrics"]
    if not isinstance(m, dict):
        raise KeyError("metrics")
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit("python3 reader: '%s' is not a readable metrics JSON (%s)" % (sys.argv[1], e))
def num(k):
    v = m.get(k)
    return "null" if v is None else repr(float(v))
cfg = d.get("config") or {}
dev = d.get("device") or {}
cost = d.get("profiler_cost") or {}
est = cost.get("est_added_us_per_step") if isinstance(cost, dict) else None
print("\t".join([num("avg_step_time_s"), num("p50_step_time_s"), str(len(d.get("trace_files") or [])),
                 num("kernels_per_step"), "true" if cfg.get("no_profile") is True else "false",
                 "null" if not isinstance(est, (int, float)) else repr(float(est)),
                 str(dev.get("name") or "unknown")]))
PY
}

read_jq() {
  jq -r '(.metrics | if type == "object" then . else error("no metrics object") end) as $m
         | [($m.avg_step_time_s // "null"), ($m.p50_step_time_s // "null"), ((.trace_files // []) | length),
            ($m.kernels_per_step // "null"), (if .config.no_profile == true then "true" else "false" end),
            ((.profiler_cost | if type == "object" then .est_added_us_per_step else null end) // "null"),
            (.device.name // "unknown")] | @tsv' "$1"
}

read_c() { "$c_reader" "$1"; }

# read_json FILE: the chosen reader's line.
read_json() {
  case $reader in
    python3) read_python3 "$1" ;;
    jq) read_jq "$1" ;;
    c) read_c "$1" ;;
  esac
}

reader=${PD_OVERHEAD_READER:-}
if [ -z "$reader" ]; then
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import json' >/dev/null 2>&1; then
    reader=python3
  elif command -v jq >/dev/null 2>&1; then
    reader=jq
  elif [ -x "$c_reader" ]; then
    reader=c
  else
    echo "$prog: no JSON reader: install python3 or jq, or build $c_reader" >&2
    exit 2
  fi
fi
case $reader in
  python3 | jq) command -v "$reader" >/dev/null 2>&1 || die_usage "PD_OVERHEAD_READER=$reader but $reader is not installed" ;;
  c) [ -x "$c_reader" ] || die_usage "PD_OVERHEAD_READER=c but '$c_reader' is not built" ;;
  *) die_usage "PD_OVERHEAD_READER must be one of python3, jq, c, got '$reader'" ;;
esac

keep=${PD_OVERHEAD_KEEP:-}
if [ -n "$keep" ]; then
  mkdir -p "$keep" || die_usage "PD_OVERHEAD_KEEP: cannot create '$keep'"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd_overhead.XXXXXX") || {
  echo "$prog: cannot make a temporary directory" >&2
  exit 1
}
trap 'rm -rf "$tmp"' EXIT

# ---- one run -------------------------------------------------------------------------
# run_one SCENARIO on|off PAIR: runs profiler_demo, checks its JSON is what the mode
# promises, sets $result to the reader's line. Exits on any failure.
result=
device=unknown
run_one() {
  local scen=$1 mode=$2 pair=$3
  local name="$scen.${mode}.$pair"
  local json=$tmp/$name.json log=$tmp/$name.log what
  local args=(--scenario "$scen" "${flags[@]}" --quiet --output_json "$json" --trace_dir "$tmp/traces")
  if [ "$mode" = on ]; then what="profiled run $pair"; else what="unprofiled run $pair"; fi
  [ "$mode" = off ] && args+=(--no_profile)
  "$demo" "${args[@]}" >"$log" 2>&1
  local rc=$?
  [ -n "$keep" ] && cp "$log" "$keep/"
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 3 ]; then
      echo "$prog: $scen $what failed (exit 3: no CUDA device; this benchmark needs a GPU). profiler_demo said:" >&2
    else
      echo "$prog: $scen $what failed (exit $rc). profiler_demo said:" >&2
    fi
    tail -n 20 "$log" | sed 's/^/  /' >&2
    echo "  command: $demo ${args[*]}" >&2
    [ "$rc" -eq 3 ] && exit 3
    exit 1
  fi
  [ -n "$keep" ] && cp "$json" "$keep/"
  if ! result=$(read_json "$json"); then
    echo "$prog: $scen $what: cannot read its metrics JSON '$json' with $reader" >&2
    exit 1
  fi
  rm -rf "$tmp/traces" # a tiny_ops trace is tens of MB; only the JSON is needed
  local avg p50 ntraces kps nop est
  IFS=$'\t' read -r avg p50 ntraces kps nop est device <<<"$result"
  local bad=
  if [ "$avg" = null ] || [ "$p50" = null ]; then bad="no avg or p50 step time"; fi
  if [ "$mode" = on ] && { [ "$ntraces" -lt 1 ] || [ "$kps" = null ] || [ "$nop" = true ]; }; then
    bad="a profiled run must have a trace, kernels_per_step and no no_profile key (traces $ntraces, kernels_per_step $kps, no_profile $nop)"
  fi
  if [ "$mode" = off ] && { [ "$ntraces" -ne 0 ] || [ "$kps" != null ] || [ "$nop" != true ]; }; then
    bad="a --no_profile run must have no trace, kernels_per_step null and no_profile true (traces $ntraces, kernels_per_step $kps, no_profile $nop)"
  fi
  if [ -n "$bad" ]; then
    echo "$prog: $scen $what: its metrics JSON is wrong: $bad" >&2
    exit 1
  fi
}

# ---- statistics (awk, C locale) ------------------------------------------------------

median() { printf '%s\n' "$@" | LC_ALL=C sort -g | LC_ALL=C awk '{ a[NR] = $1 }
  END { if (NR % 2) printf "%.17g\n", a[(NR + 1) / 2]; else printf "%.17g\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
minimum() { printf '%s\n' "$@" | LC_ALL=C sort -g | head -n 1; }
maximum() { printf '%s\n' "$@" | LC_ALL=C sort -g | tail -n 1; }
# pct_ratio A B: (A / B - 1) x 100
pct_ratio() { LC_ALL=C awk -v a="$1" -v b="$2" 'BEGIN { printf "%.17g\n", (a / b - 1) * 100 }'; }
fmt() { LC_ALL=C awk -v x="$1" -v f="$2" 'BEGIN { printf f, x }'; }
ms() { LC_ALL=C awk -v x="$1" 'BEGIN { printf "%.3f", x * 1000 }'; }

target_of() {
  case $1 in
    clean) echo 5 ;;
    tiny_ops) echo 20 ;;
  esac
}
# us_diff A B: (A - B) x 1e6 (seconds to us)
us_diff() { LC_ALL=C awk -v a="$1" -v b="$2" 'BEGIN { printf "%.17g\n", (a - b) * 1e6 }'; }

# ---- the runs ------------------------------------------------------------------------

rows=()
declare -A ours_pct ours_added
for scen in "${scenarios[@]}"; do
  p50_on=() p50_off=() r_p50=() r_avg=() added=() ests=()
  for ((i = 1; i <= runs; i++)); do
    # ABBA: odd pairs start with the profiled run, even pairs with the unprofiled one.
    if ((i % 2)); then order=(on off); else order=(off on); fi
    for mode in "${order[@]}"; do
      run_one "$scen" "$mode" "$i"
      IFS=$'\t' read -r avg p50 _ _ _ est _ <<<"$result"
      if [ "$mode" = on ]; then avg_on=$avg pp_on=$p50 est_on=$est; else avg_off=$avg pp_off=$p50; fi
    done
    p50_on+=("$pp_on")
    p50_off+=("$pp_off")
    added+=("$(us_diff "$pp_on" "$pp_off")")
    [ "$est_on" != null ] && ests+=("$est_on")
    r_p50+=("$(pct_ratio "$pp_on" "$pp_off")")
    r_avg+=("$(pct_ratio "$avg_on" "$avg_off")")
    echo "$prog: $scen pair $i/$runs: p50 step $(ms "$pp_on") ms profiled, $(ms "$pp_off") ms unprofiled" \
      "($(fmt "${r_p50[-1]}" '%+.2f')%)" >&2
  done
  over=$(median "${r_p50[@]}")
  target=$(target_of "$scen")
  met=$(LC_ALL=C awk -v o="$over" -v t="$target" 'BEGIN { print (o <= t) ? "yes" : "no" }')
  est_txt="-"
  [ ${#ests[@]} -gt 0 ] && est_txt=$(fmt "$(median "${ests[@]}")" '%.1f')
  ours_pct[$scen]=$over
  ours_added[$scen]=$(median "${added[@]}")
  rows+=("| $scen | $runs | $(ms "$(median "${p50_on[@]}")") | $(ms "$(median "${p50_off[@]}")") | $(fmt "$over" '%+.2f') | $(fmt "$(minimum "${r_p50[@]}")" '%+.2f')..$(fmt "$(maximum "${r_p50[@]}")" '%+.2f') | $(fmt "$(median "${r_avg[@]}")" '%+.2f') | $(fmt "${ours_added[$scen]}" '%.1f') | $est_txt | <= $target% | $met |")
done

echo
echo "Profiler overhead on $device: $runs profiled / unprofiled pairs per scenario (ABBA order),"
echo "profiler_demo ${flags[*]}; JSON reader $reader."
echo
echo "| scenario | runs | p50 step profiled (ms) | p50 step unprofiled (ms) | overhead % (p50) | min..max % | overhead % (avg) | added us/step | profiler's estimate us/step | target | met? |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "p50 step: median over runs of each run's p50 step time. overhead: median over pairs of"
echo "p50(profiled) / p50(unprofiled) - 1; min..max over pairs; (avg): the same from avg step times."
echo "added us/step: median over pairs of p50(profiled) - p50(unprofiled). profiler's estimate:"
echo "median over the profiled runs of profiler_cost.est_added_us_per_step in their metrics JSON."

# ---- torch.profiler on the PyTorch version of the step, same host, same invocation ------
# PD_OVERHEAD_TORCH=0 skips it; otherwise it runs when python3 imports a CUDA build of torch.
torch_mode=${PD_OVERHEAD_TORCH:-auto}
if [ "$torch_mode" = 0 ]; then
  echo
  echo "torch.profiler: not measured (PD_OVERHEAD_TORCH=0)."
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1 ||
  ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo
  echo "torch.profiler: not measured (python3 cannot import a CUDA build of torch here)."
  exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
torch_out=$tmp/torch.tsv
scen_list=$(IFS=,; echo "${scenarios[*]}")
if ! python3 "$here/torch_overhead.py" --runs "$runs" --scenarios "$scen_list" >"$torch_out"; then
  echo "$prog: the torch.profiler measurement failed (bench/overhead/torch_overhead.py)" >&2
  exit 1
fi
echo
echo "Side by side on this host: torch.profiler on the PyTorch version of the step"
echo "(bench/overhead/torch_overhead.py: $runs pairs, ABBA, a fresh process per run)."
echo
echo "| scenario | torch p50 step profiled (ms) | unprofiled (ms) | torch.profiler overhead % (shapes+memory, as ours) | torch.profiler overhead % (its defaults) | ours % | ratio ours/torch (%) | torch added us/step | ours added us/step | ratio ours/torch (added time) | target ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
while IFS=$'\t' read -r scen _ t_on t_off t_pct _ _ t_def; do
  [ -n "$scen" ] || continue
  t_added=$(LC_ALL=C awk -v a="$t_on" -v b="$t_off" 'BEGIN { printf "%.17g", (a - b) * 1000 }')
  r_pct=$(LC_ALL=C awk -v o="${ours_pct[$scen]}" -v t="$t_pct" 'BEGIN { if (t > 0) printf "%.2f", o / t; else print "-" }')
  r_add=$(LC_ALL=C awk -v o="${ours_added[$scen]}" -v t="$t_added" 'BEGIN { if (t > 0) printf "%.2f", o / t; else print "-" }')
  echo "| $scen | $(fmt "$t_on" '%.3f') | $(fmt "$t_off" '%.3f') | $(fmt "$t_pct" '%+.2f') | $(fmt "$t_def" '%+.2f') | $(fmt "${ours_pct[$scen]}" '%+.2f') | $r_pct | $(fmt "$t_added" '%.1f') | $(fmt "${ours_added[$scen]}" '%.1f') | $r_add | <= 0.25 |"
done <"$torch_out"
echo
echo "The PyTorch step is SimpleCNN with AdamW and GradScaler under AMP at batch 64 (clean:"
echo "plain_b64; tiny_ops: tiny_ops_b64, 300 small EMA ops) from tests/torch/record_torch_traces.py;"
echo "it is not the same program as profiler_demo's step, so the ratio of added time per step"
echo "and the ratio of overhead percentages are both shown."
exit 0
