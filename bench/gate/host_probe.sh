#!/usr/bin/env bash
# host_probe.sh BUILD_DIR OUT_DIR [RUNS]: where does a process's slow state come from?
# Run on a freshly started GPU machine (issue 23 item 2); prints a compact summary on
# stdout and keeps the raw data in OUT_DIR. About 40 s. Tests, in this order:
#  1. the machine: CPU model, CPUs, NUMA nodes, boot id, kernel, transparent huge pages
#     (enabled, defrag), HugePages in /proc/meminfo, steal time over the probe (/proc/stat);
#  2. the GPU's clocks and state before any run (nvidia-smi: SM and memory clocks, their
#     maxima, P-state, temperature, power, persistence mode);
#  3. per-CPU speed: a fixed awk loop (3e5 iterations) pinned to each CPU (taskset), three
#     times, in turn: a CPU slower than the rest, or slower at some times, shows here;
#  4. clock frequency of every CPU (cpu MHz of /proc/cpuinfo, scaling_cur_freq and the
#     governor where cpufreq exists), sampled three times;
#  5. RUNS (default 10) profiler_demo clean runs with baselines/acceptance.args, one after
#     another, as the gate's A/B makes them: each run's p10 and p50 step, its host
#     calibration at start and end (the launching thread's time for a fixed CPU workload,
#     src/prof/host_calib.c) and the CPUs it ran on; the GPU clocks when each starts. A
#     slow state that the calibration tracks (its time rises with the step's) can be
#     normalised away (profile_compare --normalize); one it does not track is not the CPU;
#  6. one longer run (--profile_steps 200) sampled every 50 ms: which CPU the launching
#     thread (tid = pid), the loader threads (pd_loader*) and the others (CUDA driver,
#     CUPTI) are on, how often the launching thread shares a CPU with another thread of
#     the process, its migrations; the process's AnonHugePages and its GPU clocks.
# Needs: bash, awk, taskset (util-linux), nvidia-smi, ps; no Python.
# Exit 0; 2 bad usage; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: host_probe.sh BUILD_DIR OUT_DIR [RUNS]"
build=${1:?$usage}
out=${2:?$usage}
runs=${3:-10}
case "$runs" in '' | *[!0-9]*) echo "host_probe: RUNS must be a whole number, got '$runs'" >&2; exit 2 ;; esac
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "host_probe: no program at $demo (build first)" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "host_probe: no GPU visible (nvidia-smi -L)" >&2; exit 3; }
# shellcheck disable=SC2034  # root and libpath_probe are read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh >/dev/null
mkdir -p "$out" || exit 2
read -r -a args <<<"$(grep -v '^[[:space:]]*#' baselines/acceptance.args | tr '\n' ' ')"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gpu_q=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,temperature.gpu,power.draw,persistence_mode
stat_cpu() { awk '/^cpu / { print $9 + 0, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }

# 1. the machine
read -r steal0 total0 <<<"$(stat_cpu)"
ncpu=$(nproc)
{
  echo "boot_id $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
  echo "kernel $(uname -r)"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "cpus $ncpu"
  echo "numa_nodes $(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)"
  echo "thp_enabled $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
  echo "thp_defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null)"
  grep -E '^(HugePages_Total|HugePages_Free|Hugepagesize|AnonHugePages|MemTotal|MemAvailable):' /proc/meminfo
} >"$out/machine.txt"
lscpu >"$out/lscpu.txt" 2>&1 || true
echo "== host_probe: $(sed -n 's/^cpu //p' "$out/machine.txt") x $ncpu CPUs, $(sed -n 's/^numa_nodes //p' "$out/machine.txt") NUMA node(s), boot $(sed -n 's/^boot_id //p' "$out/machine.txt" | cut -c1-8)"
echo "   THP: $(sed -n 's/^thp_enabled //p' "$out/machine.txt") (defrag $(sed -n 's/^thp_defrag //p' "$out/machine.txt")); $(grep -E '^HugePages_Total' "$out/machine.txt" | tr -s ' ')"

# 2. the GPU before any run
nvidia-smi --query-gpu=name,$gpu_q --format=csv >"$out/gpu_before.csv" 2>&1
echo "   GPU before any run: $(tail -n 1 "$out/gpu_before.csv")"

# 3. per-CPU speed
cpus=$(taskset -pc $$ 2>/dev/null | sed 's/.*: //' | tr ',' '\n' | awk -F- 'NF == 2 { for (i = $1; i <= $2; i++) print i; next } { print }')
[ -n "$cpus" ] || cpus=$(seq 0 $((ncpu - 1)))
loop() { awk 'BEGIN { s = 0; for (i = 0; i < 300000; i++) s += (i * 7) % 13; print s }' >/dev/null; }
printf 'cpu\tpass\tms\n' >"$out/cpu_speed.tsv"
for pass in 1 2 3; do
  for c in $cpus; do
    t0=$(date +%s%N)
    taskset -c "$c" awk 'BEGIN { s = 0; for (i = 0; i < 300000; i++) s += (i * 7) % 13; print s }' >/dev/null 2>&1 || loop
    t1=$(date +%s%N)
    printf '%s\t%s\t%s\n' "$c" "$pass" "$(((t1 - t0) / 1000))e-3" >>"$out/cpu_speed.tsv"
  done
done
awk -F'\t' 'NR > 1 { ms = $3 + 0; n++; sum += ms; if (min == "" || ms < min) min = ms; if (ms > max) max = ms
                     per[$1] += ms; cnt[$1]++ }
  END { for (c in per) { m = per[c] / cnt[c]; if (fast == "" || m < fast) { fast = m; fc = c } if (m > slow) { slow = m; sc = c } }
        printf "   per-CPU loop (3e5 awk iterations, 3 passes): %.1f ms mean, %.1f..%.1f; fastest CPU %s %.1f ms, slowest CPU %s %.1f ms (%+.0f%%)\n",
               sum / n, min, max, fc, fast, sc, slow, (slow / fast - 1) * 100 }' "$out/cpu_speed.tsv"

# 4. clock frequency
for pass in 1 2 3; do
  {
    echo "# pass $pass"
    grep 'cpu MHz' /proc/cpuinfo
    for f in /sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq; do
      [ -f "$f" ] && echo "$f $(cat "$f")"
    done
  } >>"$out/cpu_freq.txt"
  sleep 0.2
done
gov=$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo "none (no cpufreq)")
awk '/cpu MHz/ { v = $4 + 0; n++; s += v; if (min == "" || v < min) min = v; if (v > max) max = v }
  END { if (n) printf "   cpu MHz (/proc/cpuinfo, %d readings): %.0f mean, %.0f..%.0f;", n, s / n, min, max; else printf "   cpu MHz: not reported;" }' "$out/cpu_freq.txt"
echo " governor: $gov"

# 5. RUNS unchanged runs, as the A/B makes them
printf 'run\tp10_us\tp50_us\tcalib_start_us\tcalib_end_us\tcalib_cpu_start\tcalib_cpu_end\tgpu_at_start\n' >"$out/runs.tsv"
for ((i = 1; i <= runs; i++)); do
  "$demo" --scenario clean "${args[@]}" --quiet --trace_dir "$tmp/t" --output_json "$out/run.$i.json" >"$tmp/log" 2>&1 &
  pid=$!
  g=$(nvidia-smi --query-gpu=clocks.sm,clocks.mem,pstate --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
  wait "$pid" || { echo "host_probe: profiler_demo run $i failed:" >&2; tail -n 5 "$tmp/log" >&2; continue; }
  rm -rf "$tmp/t"
  # p10 and p50 of step_times_s, and the host calibration, without a JSON parser: the
  # file's layout is cJSON's (one key of an object per line, an array on one line).
  awk -v run="$i" -v gpu="$g" '
    /"step_times_s":/ { s = $0; sub(/.*\[/, "", s); sub(/\].*/, "", s); n = split(s, v, ","); for (a = 1; a <= n; a++) st[a - 1] = v[a] + 0 }
    /"host_calibration":/ { inc = 1 }
    inc && /"start_ns":/ { gsub(/[^0-9.e+-]/, "", $2); cs = $2 }
    inc && /"end_ns":/ { gsub(/[^0-9.e+-]/, "", $2); ce = $2 }
    inc && /"start_cpu":/ { gsub(/[^0-9-]/, "", $2); c0 = $2 }
    inc && /"end_cpu":/ { gsub(/[^0-9-]/, "", $2); c1 = $2; inc = 0 }
    END {
      for (a = 0; a < n; a++) for (b = a + 1; b < n; b++) if (st[b] < st[a]) { t = st[a]; st[a] = st[b]; st[b] = t }
      p10 = n ? st[int(0.1 * (n - 1))] : 0; p50 = n ? st[int(0.5 * (n - 1))] : 0
      printf "%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\n", run, p10 * 1e6, p50 * 1e6, cs / 1e3, ce / 1e3, c0, c1, gpu
    }' "$out/run.$i.json" >>"$out/runs.tsv"
done
echo "   $runs clean runs, one after another (p10 step | host calibration start/end | its CPUs | GPU sm,mem clock and P-state at start):"
awk -F'\t' 'NR > 1 { printf "     run %2d: p10 %7.1f us  p50 %7.1f us | calib %6.1f / %6.1f us | CPU %s -> %s | %s\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$out/runs.tsv"
# Does the calibration follow the step? Pearson correlation of p10 with the calibration's mean.
awk -F'\t' 'NR > 1 && $2 > 0 && $4 > 0 { x = $2; y = ($4 + $5) / 2; n++; sx += x; sy += y; sxx += x * x; syy += y * y; sxy += x * y }
  END { if (n > 2) { vx = sxx - sx * sx / n; vy = syy - sy * sy / n
          r = (vx > 0 && vy > 0) ? (sxy - sx * sy / n) / sqrt(vx * vy) : 0
          printf "   p10 step vs host calibration over %d runs: correlation %.2f (near 1: the slow state is the CPU, and --normalize removes it)\n", n, r } }' "$out/runs.tsv"

# 6. thread placement in one longer run
"$demo" --scenario clean "${args[@]}" --profile_steps 200 --quiet --trace_dir "$tmp/t" \
  --output_json "$tmp/long.json" >"$tmp/log" 2>&1 &
pid=$!
nvidia-smi --query-gpu=$gpu_q --format=csv,noheader >"$out/gpu_at_start.csv" 2>&1
printf 'sample\ttid\tcpu\tname\n' >"$out/threads.tsv"
k=0
while kill -0 "$pid" 2>/dev/null; do
  k=$((k + 1))
  ps -L -o tid=,psr=,comm= -p "$pid" 2>/dev/null | awk -v k="$k" '{ printf "%d\t%s\t%s\t%s\n", k, $1, $2, $3 }' >>"$out/threads.tsv"
  [ "$k" -eq 20 ] && grep -E 'AnonHugePages' "/proc/$pid/smaps_rollup" >"$out/anon_huge.txt" 2>/dev/null
  [ "$k" -eq 20 ] && nvidia-smi --query-gpu=$gpu_q --format=csv,noheader >"$out/gpu_during.csv" 2>&1
  sleep 0.05
done
wait "$pid" || echo "host_probe: the long run failed (see $out/threads.tsv for what was sampled)"
rm -rf "$tmp/t"
awk -F'\t' -v pid="$pid" 'NR > 1 {
    kind = ($2 == pid) ? "launch" : ($4 ~ /^pd_loader/) ? "loader" : "other"
    if (kind == "launch") { mcpu[$1] = $3; if (last != "" && last != $3) mig++; last = $3; used[$3] = 1; ms++ }
    else cpus[$1, $3] = cpus[$1, $3] " " kind
    if (kind == "loader") lcpu[$3] = 1
    if (kind == "other") ocpu[$3] = 1
  }
  END {
    for (s in mcpu) if (cpus[s, mcpu[s]] != "") shared++
    nu = 0; for (c in used) { nu++; ul = ul " " c }
    nl = 0; for (c in lcpu) nl++
    no = 0; for (c in ocpu) no++
    printf "   launching thread over %d samples: on CPU(s)%s, %d migrations; shared its CPU with another thread of the process in %d samples; loader threads used %d CPU(s), the others (driver, CUPTI) %d\n",
           ms, ul, mig, shared + 0, nl, no
  }' "$out/threads.tsv"
huge='?'
[ -f "$out/anon_huge.txt" ] && huge=$(tr -s ' ' <"$out/anon_huge.txt" | cut -d: -f2)
echo "   AnonHugePages of the process:$huge; GPU at the long run's start: $(cat "$out/gpu_at_start.csv")"

read -r steal1 total1 <<<"$(stat_cpu)"
awk -v s0="$steal0" -v t0="$total0" -v s1="$steal1" -v t1="$total1" \
  'BEGIN { d = t1 - t0; printf "   steal time over the probe: %.2f%% of CPU time\n", (d > 0 ? 100 * (s1 - s0) / d : 0) }'
echo "== host_probe: raw data in $out (machine.txt, lscpu.txt, gpu_*.csv, cpu_speed.tsv, cpu_freq.txt, runs.tsv, run.N.json, threads.tsv)"
