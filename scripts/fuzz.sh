#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets of tests/fuzz/<target>/ with Debian's clang
# (AddressSanitizer + UndefinedBehaviorSanitizer + libFuzzer) and runs each for a fixed
# time on its committed seed corpus.
#
# Targets: trace_analyze (trace reader, every analysis, HTML/JSON/console reports),
# gate_docs (metrics/baseline loading, comparison, promote, A/B, report writers),
# demo_options, analyze_options, compare_options (the option parsers of profiler_demo,
# profile_analyze and profile_compare), pd_run_options (pd_run's parser, and the injection's
# config through the PD_INJECT_* environment and back), nvtx_op_name (the injection's reader
# of PyTorch's emit_nvtx op ranges, on any text a program hands its NVTX tool). New inputs the fuzzer finds go to
# $PD_FUZZ_BUILD_DIR/work/<target>/corpus (the committed corpus is only read); a crash,
# leak, sanitizer report or timeout stops the target, is saved there as crash-*/leak-*/
# timeout-*, and fails the script. Each target's executions are printed (libFuzzer's
# final stats) for docs/reliability.md.
#
# usage: scripts/fuzz.sh [--time SECONDS] [--build-only] [TARGET...]
#   --time S       seconds per target (default 30: the CI stage)
#   --build-only   build, run nothing
# environment: PD_FUZZ_BUILD_DIR (default build-fuzz), CC (default clang), CUDA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD

secs=30 build_only=0 targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time)
      secs=${2:-}
      shift 2 || { echo "fuzz.sh: --time needs a value" >&2; exit 2; }
      ;;
    --build-only) build_only=1; shift ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (allowed: --time S, --build-only, --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$secs" in '' | *[!0-9]* | 0) echo "fuzz.sh: --time must be a positive integer of seconds, got '$secs'" >&2; exit 2 ;; esac
all=(trace_analyze gate_docs demo_options analyze_options compare_options pd_run_options nvtx_op_name)
[ "${#targets[@]}" -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [ -d "tests/fuzz/$t" ] || { echo "fuzz.sh: no target '$t' (allowed: ${all[*]})" >&2; exit 2; }
done

cc=${CC:-clang}
command -v "$cc" >/dev/null || { echo "fuzz.sh: $cc not found (scripts/setup.sh installs clang)" >&2; exit 2; }
cuda=${CUDA_HOME:-/usr/local/cuda}
out=${PD_FUZZ_BUILD_DIR:-build-fuzz}
case "$out" in /*) ;; *) out=$root/$out ;; esac
mkdir -p "$out/obj" "$out/work"

# The libraries' sources into one archive: the linker takes only what a target needs (no
# CUDA or CUPTI code is reached from these entry points; the headers are still needed).
san=("-fsanitize=address,undefined" "-fno-sanitize-recover=undefined" -fno-omit-frame-pointer)
read -r -a cjson_cflags <<<"$(pkg-config --cflags libcjson)"
read -r -a cjson_libs <<<"$(pkg-config --libs libcjson)"
cflags=(-std=gnu11 -g -O1 -fsanitize=fuzzer-no-link "${san[@]}" -Iinclude -Isrc/model -Isrc/analyze -Isrc/gate
  -Isrc/cli/common -Isrc/cli/profiler_demo -Isrc/cli/profile_analyze -Isrc/cli/profile_compare -Isrc/cli/pd_run -Isrc/inject
  -Itests/fuzz "-I$cuda/include" "-I$cuda/extras/CUPTI/include"
  "-DPD_FUZZ_SOURCE_DIR=\"$root\"" "${cjson_cflags[@]}")
objs=()
for src in src/model/*.c src/analyze/*.c src/gate/*.c src/scen/scenarios.c src/cli/common/*.c src/cli/profiler_demo/demo_options.c \
  src/cli/profile_analyze/analyze_options.c src/cli/profile_compare/compare_options.c src/cli/pd_run/run_options.c \
  src/inject/inject_config.c src/inject/inject_nvtx_name.c; do
  o=$out/obj/$(echo "$src" | tr / _).o
  if [ ! -f "$o" ] || [ "$src" -nt "$o" ] || [ -n "$(find include src -name '*.h' -newer "$o" -print -quit)" ]; then
    "$cc" "${cflags[@]}" -c "$src" -o "$o"
  fi
  objs+=("$o")
done
rm -f "$out/libpd_fuzz.a"
ar rcs "$out/libpd_fuzz.a" "${objs[@]}"
for t in "${targets[@]}"; do
  "$cc" "${cflags[@]}" -fsanitize=fuzzer "tests/fuzz/$t/fuzz_$t.c" "$out/libpd_fuzz.a" \
    "${cjson_libs[@]}" -lz -lm -lpthread -o "$out/fuzz_$t"
done
echo "fuzz.sh: built ${targets[*]} in $out"
[ "$build_only" -eq 0 ] || exit 0

failed=()
for t in "${targets[@]}"; do
  work=$out/work/$t
  mkdir -p "$work/corpus"
  log=$work/run.log
  echo "fuzz.sh: $t for ${secs}s (seed corpus tests/fuzz/$t/corpus: $(find "tests/fuzz/$t/corpus" -type f | wc -l) files)"
  # -rss_limit_mb: a reader must never need GBs for a small input; -timeout: no hangs;
  # -max_len: traces of the corpus are a few KiB, room to grow.
  set +e
  (cd "$work" && "$out/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$work/" corpus "$root/tests/fuzz/$t/corpus") >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  rate=$(grep -m1 'stat::average_exec_per_sec' "$log" | awk '{print $2}')
  cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'cov: [0-9]*' || true)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz.sh: $t ok: ${execs:-?} executions, ${rate:-?}/s, ${cov:-cov: ?}"
  else
    echo "fuzz.sh: $t FAILED (exit $rc): see $log and $work/crash-* leak-* timeout-*" >&2
    grep -m3 -E 'ERROR|SUMMARY|runtime error' "$log" >&2 || tail -20 "$log" >&2
    failed+=("$t")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: no findings"
