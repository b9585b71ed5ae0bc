# pd_run_bench.sh: what pd_run_overhead.sh and pd_run_census.sh share, sourced by both
# from the repository root (root set). One program and its steps, and the checks before
# any process starts; each refusal is one line on stderr and exit 2, with nothing made.
#
#   pdb_args NAME USAGE DEFAULT_ROUNDS "$@"   sets build, out (absolute) and rounds (>= 1)
#   pdb_ready NAME                            pd_run built, torch with CUDA, library path set
#
# The program: tests/torch/train_step.py, W unmeasured steps, then the profiled window of
# N steps after its warmup step.
# shellcheck shell=bash disable=SC2034,SC2154  # root is set by the caller; build, out, rounds, pd_run, W, N, step are read by it
W=14
N=30
step=$root/tests/torch/train_step.py

pdb_args() {
  local name=$1 usage=$2 dflt=$3
  shift 3
  [ "$#" -ge 2 ] || { echo "$usage" >&2; exit 2; }
  build=$1
  out=$2
  rounds=${3:-$dflt}
  case "$rounds" in '' | *[!0-9]* | 0) echo "$name: ROUNDS must be a positive whole number, got '$rounds'" >&2; exit 2 ;; esac
  case "$build" in /*) ;; *) build=$root/$build ;; esac
  case "$out" in /*) ;; *) out=$root/$out ;; esac
}

pdb_ready() {
  local name=$1
  pd_run=$build/src/cli/pd_run/pd_run
  [ -x "$pd_run" ] || { echo "$name: $pd_run missing: build the tree first" >&2; exit 2; }
  python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 ||
    { echo "$name: python3 cannot import torch with CUDA here" >&2; exit 2; }
  # shellcheck source=scripts/gpu_libpath.sh
  . scripts/gpu_libpath.sh
}
