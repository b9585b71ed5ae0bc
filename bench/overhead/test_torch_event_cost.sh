#!/usr/bin/env bash
# test_torch_event_cost.sh PYTHON: torch_event_cost.py refuses bad usage and bad kept files
# with one line and exit 2, writing nothing, and prints its table from the kept H200 run
# (data/tec). The figures themselves need a GPU and torch and are never a test.
set -uo pipefail
py=${1:?usage: test_torch_event_cost.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
script="$here/torch_event_cost.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; } # NAME STATUS
printf '[{"kind": "gpu", "off0": {"16": -1, "256": 0.002}}]' >"$tmp/negative.json"
printf '[]' >"$tmp/empty.json"
printf '{"kind": ' >"$tmp/cut.json"
for a in "--runs 0" "--runs 101" "--runs 1 --kinds cpu,bogus" "--runs 1 --json $tmp/nodir/o.json" "--one bogus full_first" "--one gpu sideways" \
  "--summarize $tmp/missing.json" "--summarize $tmp/negative.json" "--summarize $tmp/empty.json" \
  "--summarize $tmp/cut.json"; do
  # shellcheck disable=SC2086
  "$py" "$script" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ] && [ ! -e "$tmp/nodir" ]
  check "torch_event_cost.py $a: exit 2, one line, nothing written ($(head -c 120 "$tmp/err"))" $?
done
kept=$(ls "$here"/data/tec/tec-*.json | head -1)
"$py" "$script" --summarize "$kept" >"$tmp/table" 2>"$tmp/err"
check "--summarize $(basename "$kept"): exit 0" $?
for row in "full      op " "full      traced CUDA call" "full      memory record" "default   traced CUDA call" \
  "attached  CUDA call" "attached  cpu op"; do
  grep -q "^$row" "$tmp/table"
  check "the table has '$row'" $?
done
# the step check: the three sessions, each with a finite measured and predicted figure
n=$(grep -cE '^(full|default|attached) +[0-9.]+ +-?[0-9.]+ +-?[0-9.]+ +[0-9.]+ ' "$tmp/table")
[ "$n" -eq 3 ]
check "the step check has three rows of numbers (got $n)" $?
exit $fail
