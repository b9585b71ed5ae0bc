#!/usr/bin/env bash
# gpu_prepare.sh [BUILD_DIR]: builds here (where nvcc, Criterion and cJSON are) for a
# GPU host that lacks them, and bundles the shared libraries the binaries need into
# .gpu_bundle/lib. Then, on the GPU host, from the repository root:
#   scripts/gpu_acceptance.sh BUILD_DIR        (default build-gpu)
# with BUILD_DIR and .gpu_bundle copied along (both git-ignored), or .gpu_carry.tar.gz, the
# two packed in one file, copied along and unpacked there first (tar -xzf .gpu_carry.tar.gz).
# PD_CUDA_ARCHS picks the GPU code built (default: sm_80 and sm_90 code, PTX for newer).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
archs=${PD_CUDA_ARCHS:-80-real;90-real;90-virtual}
case "${PD_PRUNE:-1}" in 0 | 1 | acceptance) ;; *) echo "gpu_prepare: PD_PRUNE must be 0, 1 or acceptance, got '$PD_PRUNE'" >&2; exit 2 ;; esac
# Release like a user's run; instrumentation off even if this directory had it before;
# debug information and frame pointers on (PD_STACK_INFO), so --with_stack names
# functions, files and lines and walks frame pointers.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$archs" \
  -DENABLE_COVERAGE=OFF -DENABLE_SANITIZERS=OFF -DPD_STACK_INFO=ON >/dev/null
cmake --build "$build" -j"$(nproc)"
scripts/gpu_bundle.sh "$build" .gpu_bundle
# The commit the build is of, for what runs it on a GPU host (the copy of the tree there
# may carry another HEAD): gpu_acceptance.sh prints it, scenario_truth.sh records it.
git describe --always --dirty --abbrev=7 >"$build/pd_build_commit" 2>/dev/null || echo unknown >"$build/pd_build_commit"
# What runs on the GPU host needs the programs, the test binaries and CTest's files, not
# the object files, static libraries or CMake's compiler probes (debug info for stacks
# makes them large). PD_PRUNE=0 keeps them (then the next build here is incremental).
# PD_PRUNE=acceptance also removes what scripts/gpu_acceptance.sh does not run: the unit
# test programs (ctest -L unit runs here, not there) and the bench programs bench_cnn,
# bench_prof and trace_rewrite (build without it to run those on the GPU host); and it
# strips the debug information of the acceptance test programs themselves, which no test
# reads (the stacks test_scenarios checks are profiler_demo's, which keeps its own). About
# 54 MB -> 10 MB, which with .gpu_bundle keeps the copy of the tree a GPU host gets small.
if [ "${PD_PRUNE:-1}" != 0 ]; then
  find "$build" \( -name '*.o' -o -name '*.a' \) -type f -delete
  rm -rf "$build"/CMakeFiles/[0-9]*/CompilerId*
fi
if [ "${PD_PRUNE:-1}" = acceptance ]; then
  [ -d "$build/tests/unit" ] && find "$build/tests/unit" -type f -perm -u+x -size +100k -delete
  rm -f "$build/bench/cnn/bench_cnn" "$build/bench/prof/bench_prof" "$build/bench/prof/trace_rewrite"
  find "$build" -path '*CMakeFiles*' -name '*.bin' -type f -delete
  # the per-target make and dependency files (CTest reads CTestTestfile.cmake, not these)
  find "$build" -mindepth 2 -type d -name CMakeFiles -prune -exec rm -rf {} +
  [ -d "$build/tests/acceptance" ] && find "$build/tests/acceptance" -type f -perm -u+x ! -name '*.sh' \
    -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -exec strip --strip-debug {} +
fi
# One compressed file of both folders, .gpu_carry.tar.gz (git-ignored): a remote runner that
# copies the working tree with a size limit takes it instead of the two folders (about 22 MB
# -> 8 MB); there, `tar -xzf .gpu_carry.tar.gz` puts them back before anything runs.
tar -czf .gpu_carry.tar.gz "$build" .gpu_bundle
echo "gpu_prepare: $build is $(du -sh "$build" | cut -f1), both folders packed in .gpu_carry.tar.gz ($(du -h .gpu_carry.tar.gz | cut -f1)); on the GPU host run: scripts/gpu_acceptance.sh $build"
# A remote runner's copy of the tree (tracked files, untracked ones git does not ignore, and
# the carried file) may be limited to 64 MiB. Say so here, not after a refused call: the
# recorded bench data grows with every measurement, and moving bench/diagnosis/data aside
# for the call (restored after) is the usual way under it.
tree=$(git ls-files -z --cached --others --exclude-standard 2>/dev/null | xargs -0 stat -c %s 2>/dev/null |
  awk '{ s += $1 } END { print s + 0 }')
carry=$(stat -c %s .gpu_carry.tar.gz)
if [ $((tree + carry)) -gt $((60 << 20)) ]; then
  echo "gpu_prepare: warning: the tree ($((tree >> 20)) MiB) and .gpu_carry.tar.gz ($((carry >> 20)) MiB) come to $(((tree + carry) >> 20)) MiB, near or over 64 MiB, a remote runner's limit on its copy (with what else the call carries): move the largest recorded data aside for the call (du -sh bench/*/data)" >&2
fi
