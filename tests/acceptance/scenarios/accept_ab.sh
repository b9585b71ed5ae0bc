#!/usr/bin/env bash
# accept_ab.sh SOURCE_DIR HEAD_BUILD: the acceptance suite's same-machine A/B. When
# PD_AB_BASE_BUILD names a base build (the merge base of a pull request, say), runs
# scripts/gpu_ab.sh BASE HEAD ${PD_AB_ROUNDS:-8}: every scenario, both builds
# interleaved on this GPU, judged as gpu_ab.sh judges (its header; docs/gate.md: host time
# on one row per scenario by a two-sample permutation test, more rounds while undecided). Exit: gpu_ab.sh's (0 within policy, 1 regression); 77 (CTest: not run) when no
# base build is named; scripts/gpu_acceptance.sh leaves this test out in that case.
set -uo pipefail
src=${1:?usage: accept_ab.sh SOURCE_DIR HEAD_BUILD}
head=${2:?usage: accept_ab.sh SOURCE_DIR HEAD_BUILD}
if [ -z "${PD_AB_BASE_BUILD:-}" ]; then
  echo "SKIPPED: no base build named (set PD_AB_BASE_BUILD to a build folder to run the A/B)"
  exit 77
fi
exec "$src/scripts/gpu_ab.sh" "$PD_AB_BASE_BUILD" "$head" "${PD_AB_ROUNDS:-8}" ${PD_AB_OUT:+"$PD_AB_OUT"}
