#!/usr/bin/env bash
# gpu_acceptance.sh [BUILD_DIR]: runs `ctest -L acceptance` on a GPU host.
#
# With the toolchain present (cmake, nvcc, Criterion, cJSON) it builds first. On a host
# with only the NVIDIA driver and CUDA runtime, it uses a build made elsewhere by
# scripts/gpu_prepare.sh and the libraries bundled in .gpu_bundle/lib.
# Extra arguments after BUILD_DIR go to ctest (e.g. -R scenarios).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build-gpu}
shift || true
if [ ! -d "$build" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release && cmake --build "$build" -j"$(nproc)" || exit 1
fi
# A build made elsewhere records its source and build paths; make them resolve here.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
if [ -n "$src" ] && [ "$src" != "$root" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
fi
cudalib=/usr/local/cuda/lib64
[ -d "$cudalib" ] || cudalib=/usr/local/cuda/lib
export LD_LIBRARY_PATH="$root/.gpu_bundle/lib:$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
spec="$build/gpu_resources.json"
ngpu=$(scripts/gpu_resources.sh "$spec")
echo "gpu_acceptance: $ngpu GPU(s) visible"
jobs=$(( ngpu > 0 ? ngpu : 1 ))
cd "$build" && ctest -L acceptance --output-on-failure --resource-spec-file "$spec" -j "$jobs" "$@"
