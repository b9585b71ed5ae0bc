#!/usr/bin/env bash
# bench_analyze.sh: profile_analyze against a Python baseline on large traces, side by side
# on this host in one run.
#
# Builds traces of the given sizes from a fixture (make_trace.py: its steps repeated with
# shifted timestamps), plain and gzipped, then times `profile_analyze TRACE -t 3` and
# py_baseline.py (python3 json.load + per-name aggregation of durations) on each, with
# /usr/bin/time for wall time and peak RSS. Prints a Markdown table: seconds, MB/s of JSON
# text, peak RSS and its ratio to the JSON size, and Python's time over profile_analyze's.
# Each figure is the best (lowest time, with its RSS) of --reps runs.
#
# usage: bench/analyze/bench_analyze.sh [--analyzer PATH] [--sizes "100 1000"] [--reps N]
#                                       [--dir DIR] [--fixture TRACE] [--no-python]
# defaults: build-rel/src/cli/profile_analyze/profile_analyze, sizes 100 and 1000 (MB of
# JSON), 3 reps (1 for traces of 1000 MB and more), /tmp/pd_bench_analyze, the
# torch_memory_churn fixture. Traces already in DIR are reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

analyzer=$root/build-rel/src/cli/profile_analyze/profile_analyze
sizes="100 1000"
reps=3
dir=/tmp/pd_bench_analyze
fixture=$root/tests/fixtures/torch/torch_memory_churn.pt.trace.json.gz
python=1
while [ $# -gt 0 ]; do
  case "$1" in
    --analyzer) analyzer=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --fixture) fixture=$2; shift 2 ;;
    --no-python) python=0; shift ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_analyze.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
case "$reps" in '' | *[!0-9]* | 0) echo "bench_analyze.sh: --reps must be a positive integer" >&2; exit 2 ;; esac
for s in $sizes; do
  case "$s" in '' | *[!0-9]* | 0) echo "bench_analyze.sh: size '$s' is not a positive number of MB" >&2; exit 2 ;; esac
done
[ -x "$analyzer" ] || { echo "bench_analyze.sh: no analyzer at $analyzer (build it or pass --analyzer)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_analyze.sh: needs /usr/bin/time (Debian package 'time')" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench_analyze.sh: needs python3" >&2; exit 2; }
mkdir -p "$dir"

# measure CMD...: runs it with /usr/bin/time; prints "seconds peak_kib" (or fails).
measure() {
  local out=$dir/time.txt
  if ! /usr/bin/time -f '%e %M' -o "$out" "$@" >/dev/null 2>"$dir/stderr.txt"; then
    echo "bench_analyze.sh: failed: $* ($(tail -1 "$dir/stderr.txt"))" >&2
    return 1
  fi
  tail -1 "$out"
}

# best CMD...: the fastest of $reps runs (for 1 GB and more, one run).
best() {
  local n=$reps best_s="" best_k="" s k
  if [ "$cur_mb" -ge 1000 ]; then n=1; fi
  for _ in $(seq "$n"); do
    read -r s k < <(measure "$@")
    if [ -z "$best_s" ] || awk -v a="$s" -v b="$best_s" 'BEGIN { exit !(a < b) }'; then best_s=$s best_k=$k; fi
  done
  echo "$best_s $best_k"
}

host=$(hostname)
cpus=$(nproc)
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "host $host: $cpus CPUs ($model), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo); commit $commit"
echo "analyzer $analyzer; python $(python3 -c 'import sys; print(sys.version.split()[0])'); best of $reps (1 for >= 1000 MB)"
echo
echo "| trace | JSON MB | file MB | tool | seconds | MB/s | peak RSS MB | RSS / JSON | Python / C |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|"
for cur_mb in $sizes; do
  plain=$dir/trace_${cur_mb}mb.json
  if [ ! -s "$plain" ] || [ ! -s "$plain.gz" ]; then
    python3 "$here/make_trace.py" "$fixture" --mb "$cur_mb" -o "$plain" --gzip "$plain.gz" 2>/dev/null
  fi
  json_bytes=$(stat -c %s "$plain")
  for f in "$plain" "$plain.gz"; do
    file_bytes=$(stat -c %s "$f")
    read -r cs ck < <(best "$analyzer" "$f" -t 3)
    py="" ps="" pk=""
    if [ "$python" -eq 1 ]; then read -r ps pk < <(best python3 "$here/py_baseline.py" "$f"); py=1; fi
    for tool in C ${py:+Python}; do
      if [ "$tool" = C ]; then s=$cs k=$ck name=profile_analyze; else s=$ps k=$pk name="python3 json.load"; fi
      awk -v t="$(basename "$f")" -v jb="$json_bytes" -v fb="$file_bytes" -v name="$name" -v s="$s" -v k="$k" \
        -v cs="$cs" -v ps="$ps" -v tool="$tool" 'BEGIN {
          ratio = (tool == "C" && ps != "") ? sprintf("%.1fx", ps / (cs > 0 ? cs : 0.01)) : "";
          printf "| %s | %.1f | %.1f | %s | %.2f | %.0f | %.0f | %.2f | %s |\n", t, jb / 1e6, fb / 1e6, name, s,
                 jb / 1e6 / (s > 0 ? s : 0.01), k / 1024, k * 1024 / jb, ratio }'
    done
  done
done
