#!/usr/bin/env bash
# make_fixtures.sh [--build DIR] OUT_DIR: records one small real run per scenario on this
# GPU as test fixtures: OUT_DIR/<scenario>.metrics.json and OUT_DIR/<scenario>.pt.trace.json.gz
# (sync with --with_stack).
# Copy them into tests/fixtures/runs/ and commit them after review; the unit tests in
# tests/unit/fixtures read them (no GPU needed there), and test.sh's browser stage loads
# every fixture that carries the writer's torch-compatible keys into speedscope. Before
# committing, check them in the peer tools too: bash ../shared/peers/run_all.sh OUT_DIR/*.gz
# (docs/formats.md, "Checking with the tools").
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ "${1:-}" = "--build" ]; then
  [ $# -ge 2 ] || { echo "make_fixtures: --build needs a directory" >&2; exit 2; }
  build=$2
  shift 2
fi
out=${1:?usage: make_fixtures.sh [--build DIR] OUT_DIR}
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "make_fixtures: no profiler_demo at $demo (build first)" >&2; exit 2; }
# A build carried here (scripts/gpu_prepare.sh with .gpu_bundle/): its library path.
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
scenarios=()
pd_scenario_names "$demo" scenarios
for s in "${scenarios[@]}"; do
  # One recording carries call stacks (every cpu_op with its stack, the stack table in the
  # metrics JSON), so the readers and the peer tools are checked on that form too.
  extra=()
  [ "$s" = sync ] && extra=(--with_stack)
  "$demo" --scenario "$s" --amp --pin_memory --warmup_steps 5 --profile_steps 4 --seed 1 \
    "${extra[@]}" --quiet --trace_dir "$work/$s" --output_json "$work/$s.json"
  trace=$(find "$work/$s" -name '*.pt.trace.json' | head -n 1)
  [ -n "$trace" ] || { echo "make_fixtures: $s wrote no trace" >&2; exit 1; }
  gzip -9 -c "$trace" >"$out/$s.pt.trace.json.gz"
  cp "$work/$s.json" "$out/$s.metrics.json"
  echo "make_fixtures: $s -> $out/$s.metrics.json ($(du -h "$out/$s.pt.trace.json.gz" | cut -f1) trace)"
done
