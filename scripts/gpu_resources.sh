#!/usr/bin/env bash
# gpu_resources.sh OUT.json: writes a CTest resource spec file listing the visible GPUs
# (one slot each), so `ctest --resource-spec-file OUT.json -L acceptance -j N` runs each
# acceptance test on a GPU of its own.
set -euo pipefail
out=${1:?usage: gpu_resources.sh OUT.json}
n=0
if command -v nvidia-smi >/dev/null 2>&1; then
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
{
  printf '{"version":{"major":1,"minor":0},"local":[{"gpus":['
  for ((i = 0; i < n; i++)); do
    [ "$i" -gt 0 ] && printf ','
    printf '{"id":"%d","slots":1}' "$i"
  done
  printf ']}]}\n'
} >"$out"
echo "$n"
