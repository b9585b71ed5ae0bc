#!/usr/bin/env bash
# valgrind_unit.sh: every unit test program under valgrind memcheck (children followed, so
# Criterion's test workers and the programs the CLI tests start are checked too). An
# invalid read or write, a use of uninitialised memory, an invalid free or a definite leak
# fails the program (--error-exitcode); "possibly lost" blocks inside Criterion's own
# messaging library (nanomsg) are not errors, and scripts/valgrind.supp silences one
# over-read inside glibc's dynamic loader. Prints one line per program with its time.
#
# usage: scripts/valgrind_unit.sh [BUILD_DIR] [REGEX]   (default build, all unit tests)
# A Debug build without sanitizers is needed (valgrind and ASan do not mix).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
build=${1:-build}
regex=${2:-.}
command -v valgrind >/dev/null || { echo "valgrind_unit.sh: valgrind not found (scripts/setup.sh installs it)" >&2; exit 2; }
[ -f "$build/CTestTestfile.cmake" ] || { echo "valgrind_unit.sh: no CMake build in '$build'" >&2; exit 2; }
logdir=$build/valgrind
mkdir -p "$logdir"
mapfile -t progs < <(cd "$build" && ctest -L unit -R "$regex" --show-only=json-v1 | python3 -c '
import json, sys
for t in json.load(sys.stdin)["tests"]:
    print("\t".join([t["name"]] + t["command"]))')
failed=() total=0
for line in "${progs[@]}"; do
  IFS=$'\t' read -r -a cmd <<<"$line"
  name=${cmd[0]}
  cmd=("${cmd[@]:1}")
  # Criterion programs get --ascii (plain output); a test run through a shell script
  # keeps its arguments (valgrind follows the shell into the programs it starts)
  case "${cmd[0]}" in */bash | */sh) ;; *) cmd+=(--ascii) ;; esac
  t0=$SECONDS
  (cd "$build" && PD_SOURCE_DIR=$root PD_BINARY_DIR=$root/$build valgrind --tool=memcheck --trace-children=yes \
    --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
    --track-origins=yes "--suppressions=$root/scripts/valgrind.supp" -q "${cmd[@]}") >"$logdir/$name.log" 2>&1
  rc=$?
  total=$((total + 1))
  if [ "$rc" -eq 0 ]; then
    echo "valgrind: $name clean ($((SECONDS - t0)) s)"
  else
    echo "valgrind: $name FAILED (exit $rc, $((SECONDS - t0)) s): $logdir/$name.log"
    failed+=("$name")
  fi
done
echo "valgrind: $((total - ${#failed[@]})) of $total unit test programs clean"
[ "${#failed[@]}" -eq 0 ]
