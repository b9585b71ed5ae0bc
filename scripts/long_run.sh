#!/usr/bin/env bash
# long_run.sh [BUILD_DIR] [STEPS]: a long profiled run on a GPU host, to show that host
# memory stays flat and every trace of a repeat=0 schedule is complete.
#
# Runs profiler_demo --repeat 0 --steps STEPS (default 10000) twice:
#   sparse: --wait_steps 989 --profile_steps 10: a cycle (and a trace) per 1,000 steps;
#   dense:  --wait_steps 89 --profile_steps 10: a cycle per 100 steps;
# then checks, for each: the exit status; host_memory.growth_kib (RSS after the last step
# minus RSS after the first cycle) at most PD_LONG_MAX_GROWTH_KIB (default 16384: 16 MiB
# over 10,000 steps, where a per-step leak of one event record would show as more);
# the count of trace files against the count of cycles; dropped_records 0; that every
# trace reads with profile_analyze. Prints one table row per run.
# PD_LONG_SCENARIO (default clean) picks the scenario; PD_LONG_OUT (default a temporary
# directory, removed) keeps the outputs.
# Exit: 0 all checks held; 1 a check failed; 2 bad setup.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
build=${1:-build-gpu}
steps=${2:-10000}
case "$build" in /*) ;; *) build=$root/$build ;; esac
case "$steps" in '' | *[!0-9]*) echo "long_run.sh: STEPS must be a positive integer, got '$steps'" >&2; exit 2 ;; esac
[ "$steps" -ge 1000 ] || { echo "long_run.sh: STEPS must be at least 1000 (one sparse cycle), got $steps" >&2; exit 2; }
demo=$build/src/cli/profiler_demo/profiler_demo
analyze=$build/src/cli/profile_analyze/profile_analyze
[ -x "$demo" ] && [ -x "$analyze" ] || { echo "long_run.sh: no built profiler_demo/profile_analyze in '$build'" >&2; exit 2; }
command -v python3 >/dev/null || { echo "long_run.sh: python3 is needed to read the metrics JSON" >&2; exit 2; }
. scripts/gpu_libpath.sh
max_growth=${PD_LONG_MAX_GROWTH_KIB:-16384}
scenario=${PD_LONG_SCENARIO:-clean}
out=${PD_LONG_OUT:-}
keep=1
if [ -z "$out" ]; then out=$(mktemp -d); keep=0; fi
mkdir -p "$out" || exit 2

fail=0
printf '%-7s %7s %6s %6s %9s %9s %9s %9s %9s %8s %8s %s\n' run steps cycles traces rss_start rss_cyc1 rss_end \
  rss_peak growth dropped wall_s result
for mode in sparse dense; do
  wait=989
  [ "$mode" = dense ] && wait=89
  dir=$out/$mode
  mkdir -p "$dir"
  t0=$SECONDS
  "$demo" --scenario "$scenario" --repeat 0 --steps "$steps" --wait_steps "$wait" --profile_steps 10 --quiet \
    --trace_dir "$dir/traces" --output_json "$dir/metrics.json" >"$dir/console.txt" 2>&1
  rc=$?
  wall=$((SECONDS - t0))
  if [ "$rc" -ne 0 ]; then
    echo "long_run.sh: $mode: profiler_demo exited $rc:" >&2
    tail -5 "$dir/console.txt" >&2
    fail=1
    continue
  fi
  row=$(python3 - "$dir/metrics.json" "$steps" "$wait" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
steps, wait = int(sys.argv[2]), int(sys.argv[3])
h = m["host_memory"]
cycles = -(-steps // (wait + 11)) if steps % (wait + 11) > wait + 1 else steps // (wait + 11)
k = lambda v: "null" if v is None else "%d" % v
print(h["steps"], cycles, len(m["trace_files"]), k(h["rss_start_kib"]), k(h["rss_first_cycle_kib"]),
      k(h["rss_end_kib"]), k(h["rss_peak_kib"]), k(h["growth_kib"]), "%d" % (m["metrics"]["dropped_records"] or 0))
for t in m["trace_files"]:
    print("TRACE", t)
PY
  ) || { echo "long_run.sh: $mode: cannot read $dir/metrics.json" >&2; fail=1; continue; }
  read -r hsteps cycles ntraces rs r1 re rp growth dropped <<<"$(head -1 <<<"$row")"
  result=ok
  [ "$hsteps" = "$steps" ] || { result="steps $hsteps != $steps"; }
  [ "$ntraces" = "$cycles" ] || { result="$ntraces traces for $cycles cycles"; }
  [ "$growth" != null ] && [ "$growth" -le "$max_growth" ] || { result="growth $growth KiB > $max_growth"; }
  [ "$dropped" = 0 ] || { result="$dropped records dropped"; }
  bad_traces=0
  while read -r _ t; do
    "$analyze" "$t" -t 1 >/dev/null 2>"$dir/analyze.err" || { bad_traces=$((bad_traces + 1)); cat "$dir/analyze.err" >&2; }
  done < <(grep '^TRACE ' <<<"$row")
  [ "$bad_traces" -eq 0 ] || result="$bad_traces traces do not read"
  [ "$result" = ok ] || fail=1
  printf '%-7s %7s %6s %6s %9s %9s %9s %9s %9s %8s %8s %s\n' "$mode" "$hsteps" "$cycles" "$ntraces" "$rs" "$r1" "$re" \
    "$rp" "$growth" "$dropped" "$wall" "$result"
  grep -E '^Host memory:' "$dir/console.txt" | sed "s/^/  $mode: /"
done
echo "long_run.sh: scenario $scenario, RSS in KiB; growth = end - after the first cycle, limit $max_growth KiB"
[ "$keep" = 1 ] || rm -rf "$out"
exit "$fail"
