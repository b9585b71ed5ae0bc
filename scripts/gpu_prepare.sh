#!/usr/bin/env bash
# gpu_prepare.sh [BUILD_DIR]: builds here (where nvcc, Criterion and cJSON are) for a
# GPU host that lacks them, and bundles the shared libraries the binaries need.
# Then, on the GPU host, from the repository root:
#   scripts/gpu_acceptance.sh build-gpu
# (with build-gpu and .gpu_bundle copied along).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
archs=${PD_CUDA_ARCHS:-80-real;90-real;90-virtual}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$archs" >/dev/null
cmake --build "$build" -j"$(nproc)"
scripts/gpu_bundle.sh "$build" .gpu_bundle
