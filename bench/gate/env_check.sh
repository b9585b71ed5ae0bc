#!/usr/bin/env bash
# env_check.sh BUILD_DIR OUT_DIR [ROUNDS]: does a change to the process's surroundings remove
# the slow state between processes (docs/gate.md, issue 23's item 2)? On a GPU host, ROUNDS
# (default 16) rounds; each round runs, for each scenario of PD_AB_SCENARIOS (clean,
# tiny_ops; default both), one fresh profiler_demo process per mode of PD_ENV_MODES, in an
# order that rotates from round to round, with the flags an A/B run gets (the flags of
# baselines/acceptance.args and scripts/gpu_ab.sh's --warmup_steps). The modes:
#   free     as the A/B runs it
#   pinned   --pin_cpu (the launching thread on the CPU that ran a fixed loop fastest)
#   thp      GLIBC_TUNABLES=glibc.malloc.hugetlb=1: malloc's heap in transparent huge pages
#            (glibc 2.35 or later; with THP "madvise" or "always"), so that where the hot
#            heap data sits in the caches no longer depends on which 4 KiB pages it got
#   arena1   GLIBC_TUNABLES=glibc.malloc.arena_max=1: every thread allocates from one heap
#   eager    CUDA_MODULE_LOADING=EAGER: every kernel loaded when the context is made
#   noaslr   setarch -R: no address randomisation
# Default PD_ENV_MODES "free thp arena1 eager noaslr". Writes OUT_DIR/<scenario>/<round>/
# <mode>.json (traces deleted), host.txt (boot id, GPU, CPU, glibc, THP settings) and
# OUT_DIR.tar.gz; `bench/gate/state_eval.py --modes OUT_DIR.tar.gz` compares the modes. Three
# unmeasured warm-up runs first. About 1.3 s a run on an H200 (tiny_ops and clean alike).
# Exit 0; 1 a run failed; 2 bad usage; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: bench/gate/env_check.sh BUILD_DIR OUT_DIR [ROUNDS]"
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "env_check: $usage" >&2; exit 2; }
build=$1
out=$2
rounds=${3:-16}
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
pd_whole_number ROUNDS "$rounds" || exit 2
[ "$rounds" -ge 1 ] || { echo "env_check: ROUNDS must be at least 1" >&2; exit 2; }
scenarios=()
pd_ab_record_scenarios scenarios || exit 2
read -r -a modes <<<"$(printf '%s' "${PD_ENV_MODES:-free thp arena1 eager noaslr}" | tr ',' ' ')"
[ "${#modes[@]}" -ge 1 ] || { echo "env_check: PD_ENV_MODES names no mode" >&2; exit 2; }
seen=" "
for m in "${modes[@]}"; do
  case "$m" in free | pinned | thp | arena1 | eager | noaslr) ;; *)
    echo "env_check: PD_ENV_MODES: '$m' is not a mode (free, pinned, thp, arena1, eager, noaslr)" >&2
    exit 2
    ;;
  esac
  case "$seen" in *" $m "*) echo "env_check: PD_ENV_MODES names '$m' twice" >&2; exit 2 ;; esac
  seen+="$m "
done
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "env_check: no program at $demo (build first)" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "env_check: no GPU visible (nvidia-smi -L)" >&2; exit 3; }
case " ${modes[*]} " in *" noaslr "*)
  command -v setarch >/dev/null 2>&1 || { echo "env_check: mode noaslr needs setarch (util-linux)" >&2; exit 2; } ;;
esac
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
args=()
pd_args_read baselines/acceptance.args args || exit 2
pd_ab_probe_check "$demo" || exit 2
mkdir -p "$out" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  pd_machine_lines
  echo "glibc $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
  echo "thp_enabled $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
  echo "thp_defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null || echo unknown)"
  echo "kernel $(uname -r)"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "rounds $rounds"
  echo "scenarios ${scenarios[*]}"
  echo "modes ${modes[*]}"
  echo "args ${args[*]} (and gpu_ab.sh's --warmup_steps)"
} >"$out/host.txt"

# run FILE MODE SCENARIO: one profiler_demo run in MODE writing FILE.
run() {
  local file=$1 mode=$2 s=$3 w=() pre=() flag=()
  pd_ab_warmup_args "$s" w || exit 2
  case "$mode" in
    pinned) flag=(--pin_cpu) ;;
    thp) pre=(env GLIBC_TUNABLES=glibc.malloc.hugetlb=1) ;;
    arena1) pre=(env GLIBC_TUNABLES=glibc.malloc.arena_max=1) ;;
    eager) pre=(env CUDA_MODULE_LOADING=EAGER) ;;
    noaslr) pre=(setarch "$(uname -m)" -R) ;;
  esac
  pd_demo_run "$s in mode $mode" "$file" "$tmp" "${pre[@]}" "$demo" --scenario "$s" "${args[@]}" "${w[@]}" "${flag[@]}" ||
    exit $?
}

t0=$SECONDS
for _ in 1 2 3; do run "$tmp/warm.json" free clean; done
n=${#modes[@]}
for ((r = 1; r <= rounds; r++)); do
  for s in "${scenarios[@]}"; do
    for ((k = 0; k < n; k++)); do
      m=${modes[$(((k + r) % n))]}
      run "$out/$s/$r/$m.json" "$m" "$s"
    done
  done
  el=$((SECONDS - t0))
  echo "env_check: round $r of $rounds done, ${el} s (about $((el * rounds / r - el)) s left)"
done
tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")" || { echo "env_check: cannot write $out.tar.gz" >&2; exit 1; }
echo "env_check: $rounds rounds of ${#scenarios[@]} scenarios x $n modes in $((SECONDS - t0)) s into $out and $out.tar.gz"
