#!/usr/bin/env bash
# gpu_resources.sh OUT.json: writes a CTest resource spec file listing the GPUs this
# process may use (one slot each), and prints how many it listed, so that
#   ctest -L acceptance --resource-spec-file OUT.json -j N
# runs each acceptance test (RESOURCE_GROUPS gpus:1) on a GPU of its own. CTest hands the
# test CTEST_RESOURCE_GROUP_0_GPUS="id:K,slots:1" and tests/acceptance/accept_main.c sets
# CUDA_VISIBLE_DEVICES=K, so each id must be a GPU index as CUDA counts them.
# gpu_resources.sh --count: prints only the number of GPUs on this machine.
#
# The GPUs are those nvidia-smi lists (or, without nvidia-smi, the /dev/nvidiaN device
# nodes), narrowed to CUDA_VISIBLE_DEVICES when that lists indexes. When
# CUDA_VISIBLE_DEVICES names GPUs by UUID (or MIG instance) the ids cannot be written as
# CTest ids (lowercase, digits, underscore); the spec then lists none and prints 0, and the
# caller runs the tests one at a time under the inherited CUDA_VISIBLE_DEVICES.
set -euo pipefail
out=${1:?usage: gpu_resources.sh OUT.json | --count}

gpu_count() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
  else
    find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l
  fi
}
n=$(gpu_count)
if [ "$out" = --count ]; then
  echo "$n"
  exit 0
fi

ids=()
if [ -z "${CUDA_VISIBLE_DEVICES+set}" ]; then
  for ((i = 0; i < n; i++)); do ids+=("$i"); done
elif [[ "$CUDA_VISIBLE_DEVICES" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  IFS=, read -r -a listed <<<"$CUDA_VISIBLE_DEVICES"
  for i in "${listed[@]}"; do
    # CUDA stops at the first index that does not exist; so do we.
    [ "$i" -lt "$n" ] || break
    ids+=("$i")
  done
fi
{
  printf '{"version":{"major":1,"minor":0},"local":[{"gpus":['
  sep=
  for i in "${ids[@]}"; do
    printf '%s{"id":"%s","slots":1}' "$sep" "$i"
    sep=,
  done
  printf ']}]}\n'
} >"$out"
echo "${#ids[@]}"
