#!/usr/bin/env bash
# long_run.sh BUILD_DIR OUT_DIR [RUNS]: is the slow state (docs/gate.md, issue 23) a constant
# of the process, set when it starts, or a moment of the machine that a process of about a
# second happens to fall in? On a GPU host, RUNS (default 6) fresh processes each of tiny_ops
# with 3000 untraced warmup steps (about 7 s) and clean with 20000 (about 5 s), the other
# flags of baselines/acceptance.args; while each runs, a sampler reads every 20 ms the CPU
# each of its threads is on and its user and system time (/proc/PID/task/*/stat). Writes
# OUT_DIR/<scenario>_<n>.json (metrics; warmup_step_times_s is the series) and
# <scenario>_<n>.threads.tsv (t_ms on CLOCK_MONOTONIC, tid, name, state, cpu, utime and stime ticks), host.txt, and
# OUT_DIR.tar.gz. With PD_WATCH=1, bench/gate/cpu_watch (built with the project) watches
# every CPU's speed at 10% duty alongside each tiny_ops run: <scenario>_<n>.watch.tsv (it
# shares the launching thread's CPU, which then moves: a perturbed run). PD_LONG_ARGS: more
# profiler_demo flags for every run (e.g. --warmup_probe, the speed measured in the process).
# `bench/gate/long_run_eval.py OUT_DIR.tar.gz` reads them. Exit 0; 1 a run
# failed; 2 bad usage; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: bench/gate/long_run.sh BUILD_DIR OUT_DIR [RUNS]"
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "long_run: $usage" >&2; exit 2; }
build=$1
out=$2
runs=${3:-6}
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
pd_whole_number RUNS "$runs" || exit 2
[ "$runs" -ge 1 ] || { echo "long_run: RUNS must be at least 1" >&2; exit 2; }
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "long_run: no program at $demo (build first)" >&2; exit 2; }
watch=${PD_WATCH:-0}
case "$watch" in 0 | 1) ;; *) echo "long_run: PD_WATCH must be 0 or 1, got '$watch'" >&2; exit 2 ;; esac
[ "$watch" = 0 ] || [ -x "$build/bench/gate/cpu_watch" ] || { echo "long_run: PD_WATCH=1 needs $build/bench/gate/cpu_watch (build it)" >&2; exit 2; }
command -v python3 >/dev/null 2>&1 || { echo "long_run: needs python3 (the thread sampler)" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "long_run: no GPU visible (nvidia-smi -L)" >&2; exit 3; }
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
args=()
pd_args_read baselines/acceptance.args args || exit 2
read -r -a extra <<<"${PD_LONG_ARGS:-}"
args+=("${extra[@]}")
mkdir -p "$out" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  pd_machine_lines
  echo "clk_tck $(getconf CLK_TCK)"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "runs $runs"
  echo "args ${args[*]} (then --warmup_steps 3000 tiny_ops, 20000 clean)"
} >"$out/host.txt"

# The sampler: PID's threads every 20 ms until it exits; one line per thread and sample.
sampler='
import os, sys, time
pid, path = sys.argv[1], sys.argv[2]
with open(path, "w") as out:
    out.write("t_ms\ttid\tname\tstate\tcpu\tutime\tstime\n")
    while os.path.exists(f"/proc/{pid}"):
        t = time.monotonic() * 1e3  # CLOCK_MONOTONIC, as the t0 of cpu_watch
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            break
        for tid in tids:
            try:
                s = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = s[s.index("(") + 1:s.rindex(")")].replace("\t", " ")
            f = s[s.rindex(")") + 2:].split()
            out.write(f"{t:.1f}\t{tid}\t{name}\t{f[0]}\t{f[36]}\t{f[11]}\t{f[12]}\n")
        time.sleep(0.02)
'
failed=0
for ((i = 1; i <= runs; i++)); do
  for s in tiny_ops clean; do
    n=3000
    [ "$s" = clean ] && n=20000
    "$demo" --scenario "$s" "${args[@]}" --warmup_steps "$n" --quiet --trace_dir "$tmp/t" \
      --output_json "$out/${s}_$i.json" >"$tmp/log" 2>&1 &
    pid=$!
    python3 -c "$sampler" "$pid" "$out/${s}_$i.threads.tsv" &
    spid=$!
    wpid=
    if [ "$watch" = 1 ] && [ "$s" = tiny_ops ]; then
      "$build/bench/gate/cpu_watch" 9 10 >"$out/${s}_$i.watch.tsv" 2>"$tmp/watch.log" &
      wpid=$!
    fi
    wait "$pid"
    rc=$?
    wait "$spid"
    [ -z "$wpid" ] || wait "$wpid" || { echo "long_run: cpu_watch failed:" >&2; cat "$tmp/watch.log" >&2; failed=1; }
    rm -rf "$tmp/t"
    if [ "$rc" -eq 3 ]; then echo "long_run: no CUDA device" >&2; exit 3; fi
    if [ "$rc" -ne 0 ]; then
      echo "long_run: $s run $i exited $rc:" >&2
      tail -n 5 "$tmp/log" >&2
      failed=1
    fi
  done
  echo "long_run: run $i of $runs done"
done
tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")" || { echo "long_run: cannot write $out.tar.gz" >&2; exit 1; }
echo "long_run: $runs runs each of tiny_ops and clean into $out and $out.tar.gz"
exit "$failed"
