#!/usr/bin/env bash
# baselines_present.sh PROFILE_COMPARE SOURCE_DIR: says at CTest level whether this GPU
# model has baselines. test_scenarios skips its baseline comparisons inside Criterion when
# there are none (it prints so, but the binary still passes); this entry then exits 77,
# which CTest reports as "Not Run", so a missing baseline shows in the CTest summary.
# Exit 0 when baselines/<gpu slug>/ holds every scenario's file; 77 with no GPU or no
# baseline; 1 on error.
set -uo pipefail
cmp=${1:?usage: baselines_present.sh PROFILE_COMPARE SOURCE_DIR}
src=${2:?usage: baselines_present.sh PROFILE_COMPARE SOURCE_DIR}
gpu=0
# CTest hands a GPU through a resource group ("id:N,slots:1"): describe that one.
if [[ "${CTEST_RESOURCE_GROUP_0_GPUS:-}" =~ id:([0-9]+) ]]; then gpu=${BASH_REMATCH[1]}; fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "SKIPPED: no nvidia-smi (no GPU): baselines are per GPU model"
  exit 77
fi
name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$gpu" 2>/dev/null | head -n 1)
if [ -z "$name" ]; then
  echo "SKIPPED: no GPU $gpu visible: baselines are per GPU model"
  exit 77
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
printf '{"schema_version":1,"device":{"name":"%s"},"metrics":{}}\n' "$name" >"$tmp"
slug=$("$cmp" --slug "$tmp") || { echo "baselines_present: profile_compare --slug failed" >&2; exit 1; }
missing=()
for s in clean dataloader sync tiny_ops memory_churn; do
  [ -f "$src/baselines/$slug/$s.json" ] || missing+=("$s")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "SKIPPED: no baseline for this GPU ($name): baselines/$slug/ lacks ${missing[*]};" \
    "test_scenarios compared nothing for them. Record them with scripts/update_baselines.sh."
  exit 77
fi
echo "baselines present for $name in baselines/$slug/"
