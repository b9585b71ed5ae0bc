#!/usr/bin/env bash
# tsan.sh: the thread-shared host code under ThreadSanitizer (tests/tsan/tsan_threads.c):
# host ranges recorded on many threads while the profiler collects them (src/capture/ranges.c),
# the data pipeline's bounded queues and worker threads (src/scen/data_queue.c), and the
# output writer's table of live temporaries and input registry (src/model/out_file.c).
# A plain program: Criterion cannot start under ThreadSanitizer (Snaipe/Criterion#274).
# Any ThreadSanitizer report fails it.
#
# usage: scripts/tsan.sh        environment: PD_TSAN_DIR (default build-tsan), PD_JOBS
set -euo pipefail
cd "$(dirname "$0")/.." || exit 2
dir=${PD_TSAN_DIR:-build-tsan}
jobs=${PD_JOBS:-$(nproc)}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DENABLE_TSAN=ON -DPD_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${PD_TEST_CUDA_ARCHS:-90-real}" >/dev/null
cmake --build "$dir" -j"$jobs" --target tsan_threads
# second_deadlock_stack: both stacks of a lock-order report; halt_on_error: a report fails the program too.
export TSAN_OPTIONS=second_deadlock_stack=1:halt_on_error=1
(cd "$dir" && ctest -L tsan --output-on-failure)
