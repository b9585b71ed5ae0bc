#!/usr/bin/env bash
# run_profiler.sh [--all] [profiler_demo flags...]
#
# Runs the PRD's default demo from the repository root:
#   profiler_demo --scenario dataloader --pin_memory --amp
# with the default output paths (results/traces/profiler_demo, results/metrics_demo.json),
# building first when the binary is missing (cmake -S . -B build && cmake --build build).
# Extra arguments go to profiler_demo and win over the defaults (the last flag wins).
#
# --all runs every scenario (profiler_demo --list_scenarios) into results/<scenario>/:
# traces in results/<scenario>/traces, metrics in results/<scenario>/metrics.json. It
# goes on after a failing scenario and exits non-zero if any failed.
#
# Environment: BUILD_DIR (default build), PD_DEMO (a profiler_demo binary to use as is).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
demo=${PD_DEMO:-$build/src/cli/profiler_demo/profiler_demo}

all=0
if [ "${1:-}" = "--all" ]; then
  all=1
  shift
fi

if [ ! -x "$demo" ]; then
  if [ -n "${PD_DEMO:-}" ]; then
    echo "run_profiler: PD_DEMO='$PD_DEMO' is not an executable" >&2
    exit 2
  fi
  echo "run_profiler: building $demo" >&2
  cmake -S . -B "$build" >/dev/null
  cmake --build "$build" -j"$(nproc)" --target profiler_demo
fi

if [ "$all" -eq 0 ]; then
  exec "$demo" --scenario dataloader --pin_memory --amp \
    --trace_dir results/traces/profiler_demo --output_json results/metrics_demo.json "$@"
fi

failed=()
for scenario in $("$demo" --list_scenarios | grep -E '^[a-z_]+$'); do
  echo "==== $scenario ===="
  if ! "$demo" --scenario "$scenario" --pin_memory --amp \
      --trace_dir "results/$scenario/traces" --output_json "results/$scenario/metrics.json" "$@"; then
    failed+=("$scenario")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "run_profiler: failed: ${failed[*]}" >&2
  exit 1
fi
echo "run_profiler: all scenarios done; results in results/<scenario>/"
