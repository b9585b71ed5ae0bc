#!/usr/bin/env bash
# options_replay.sh [--build DIR] REV [GENERATED]: the three programs' option parsers of
# commit REV against the working tree's, over the fuzz corpora and findings of
# tests/fuzz/{demo,analyze,compare}_options and GENERATED (default 30000) generated
# argument vectors per program (tests/fuzz/options_replay/options_replay.c). Every
# status, message and parsed field must be the same: a parser refactor changes none.
# Links the parsers against DIR's libraries (default build-dev; build it first). No GPU.
# Exit 0 identical, 1 different (the first differences are printed), 2 usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build="build-dev"
if [ "${1:-}" = "--build" ]; then
  build=${2:?--build needs a directory}
  shift 2
fi
rev=${1:?usage: options_replay.sh [--build DIR] REV [GENERATED]}
ngen=${2:-30000}
case "$ngen" in '' | *[!0-9]*) echo "options_replay: GENERATED must be a whole number, got '$ngen'" >&2; exit 2 ;; esac
git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "options_replay: no commit '$rev'" >&2; exit 2; }
libs=("$build/src/scen/libpd_scen.a" "$build/src/capture/libpd_capture.a" "$build/src/model/libpd_model.a")
for l in "${libs[@]}"; do [ -f "$l" ] || { echo "options_replay: $l is not built" >&2; exit 2; }; done
cuda=${CUDA_HOME:-/usr/local/cuda}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd_options_replay.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/old" "$tmp/cwd"
git archive "$rev" include src/cli | tar -x -C "$tmp/old"

# build TREE OUT: the replay tool over TREE's parser sources (and its shared parser, if any)
build_tool() {
  local tree=$1 srcs
  mapfile -t srcs < <(ls "$tree"/src/cli/profiler_demo/demo_options.c "$tree"/src/cli/profile_analyze/analyze_options.c \
    "$tree"/src/cli/profile_compare/compare_options.c "$tree"/src/cli/common/*.c 2>/dev/null)
  cc -std=gnu11 -O1 -w -I"$tree/include" -I"$tree/src/cli/common" -I"$tree/src/cli/profiler_demo" \
    -I"$tree/src/cli/profile_analyze" -I"$tree/src/cli/profile_compare" -I"$cuda/include" \
    tests/fuzz/options_replay/options_replay.c "${srcs[@]}" "${libs[@]}" -lz -lm -lpthread -o "$2"
}
build_tool "$tmp/old" "$tmp/replay_old" || { echo "options_replay: cannot build the parsers of $rev" >&2; exit 2; }
build_tool . "$tmp/replay_new" || { echo "options_replay: cannot build the working tree's parsers" >&2; exit 2; }

mapfile -t inputs < <(find "$PWD"/tests/fuzz/{demo,analyze,compare}_options -type f \( -path '*/corpus/*' -o -path '*/findings/*' \) | sort)
for side in old new; do
  (cd "$tmp/cwd" && "$tmp/replay_$side" "${inputs[@]}" && "$tmp/replay_$side" -g "$ngen") >"$tmp/$side.txt" ||
    { echo "options_replay: the $side replay failed" >&2; exit 1; }
done
lines=$(grep -c '^#' "$tmp/new.txt")
errs=$(grep -c " rc=[^0]" "$tmp/new.txt")
if cmp -s "$tmp/old.txt" "$tmp/new.txt"; then
  echo "options_replay: identical over $lines inputs x 3 programs (${#inputs[@]} corpus files, $ngen generated; $errs refusals) against $rev"
  exit 0
fi
echo "options_replay: DIFFERENT from $rev:" >&2
diff "$tmp/old.txt" "$tmp/new.txt" | head -n 40 >&2
exit 1
