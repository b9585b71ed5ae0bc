#!/usr/bin/env bash
# pd_run on the planted PyTorch variants of tests/torch (record_torch_traces.py's step, run
# by train_step.py), each with and without torch.autograd.profiler.emit_nvtx(): does pd_run's
# own verdict name the planted cause? Run on a GPU host with torch, from a carried build.
#
#   bench/overhead/pd_run_variants.sh BUILD OUT [--model cnn|lm] [--only v1,v2,...]
#
# Per variant and mode (emit: every op an NVTX range; plain: only the step ranges), pd_run
# records --step_range train_step, 6 active steps after 3 unprofiled ones (the bursty loader
# 48 after 40, so that its bursts fall in the window). Writes OUT/json/V_MODE.json (pd_run's
# metrics), OUT/log/V_MODE.log, OUT/t/V_MODE/ (its gzipped trace), OUT/planted.json (each
# variant's planted cause, from record_torch_traces.py) and OUT/table.md
# (bench/overhead/pd_run_variants.py: named or not, the verdict and the fixes saving 5% or
# more). Exits 1 if a run failed (its row says so), 2 on bad usage.
set -u
usage() { echo "usage: $0 BUILD OUT [--model cnn|lm] [--only v1,v2,...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
build=$(cd "$1" 2>/dev/null && pwd) || { echo "pd_run_variants: no build directory $1" >&2; exit 2; }
out=$2
shift 2
model=cnn
only=sync_b64,sync_b512,logging_reads_b64,python_ops_b64,pageable_input_b64,tiny_ops_b64,nonforeach_adamw_b64,memory_churn_b64,dataloader_b64,bursty_loader_b64
while [ $# -gt 0 ]; do
  case $1 in
    --model) [ $# -ge 2 ] || usage; model=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
    *) usage ;;
  esac
done
case $model in cnn | lm) ;; *) echo "pd_run_variants: --model is cnn or lm, not '$model'" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
pd_run=$build/src/cli/pd_run/pd_run
[ -x "$pd_run" ] || { echo "pd_run_variants: no pd_run in $build" >&2; exit 2; }
# shellcheck source=/dev/null
. "$root/scripts/gpu_libpath.sh"
export LD_LIBRARY_PATH
mkdir -p "$out/json" "$out/log" "$out/t" || exit 2
python3 -c "import json, sys; sys.path.insert(0, '$root/tests/torch'); import record_torch_traces as r; \
print(json.dumps(r.PLANTED))" >"$out/planted.json" || { echo "pd_run_variants: torch missing here" >&2; exit 2; }
rc=0
IFS=, read -r -a variants <<<"$only"
for v in "${variants[@]}"; do
  w=3 n=6
  case $v in bursty*) w=40 n=48 ;; esac
  for mode in emit plain; do
    flag=()
    [ "$mode" = emit ] && flag=(--emit_nvtx)
    key=${v}_$mode
    "$pd_run" --trace_dir "$out/t/$key" --trace_gzip --output_json "$out/json/$key.json" \
      --step_range train_step --skip_first "$w" --wait 0 --warmup 1 --active "$n" -- \
      python3 "$root/tests/torch/train_step.py" --model "$model" --variant "$v" --warmup "$w" \
      --active "$n" --nvtx "${flag[@]}" >"$out/log/$key.log" 2>&1 || {
      echo "pd_run_variants: $key exited $? (log $out/log/$key.log)" >&2
      rc=1
    }
  done
done
python3 "$root/bench/overhead/pd_run_variants.py" "$out" --model "$model" >"$out/table.md" || rc=1
cat "$out/table.md"
exit $rc
