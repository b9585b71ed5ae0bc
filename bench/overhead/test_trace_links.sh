#!/usr/bin/env bash
# test_trace_links.sh PYTHON: trace_links.py reads a committed trace (every GPU activity
# linked), sees an unlinked one, and refuses bad input with one line and exit 2, printing
# nothing. The capture variants it compares need a GPU and are never a test.
set -uo pipefail
py=${1:?usage: test_trace_links.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
script="$here/trace_links.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; } # NAME STATUS
fixture="$root/tests/fixtures/runs/clean.pt.trace.json.gz"
"$py" "$script" "$fixture" >"$tmp/out" 2>"$tmp/err"
check "the clean fixture: exit 0" $?
awk 'NR == 2 && $1 > 0 && $2 == "1.000" && $3 > 0 {ok = 1} END {exit !ok}' "$tmp/out"
check "the clean fixture: every GPU activity linked ($(sed -n 2p "$tmp/out" | cut -c1-60))" $?
# the same trace with one kernel's launching call taken out
"$py" - "$fixture" "$tmp/cut.json" <<'PY'
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1], "rt"))
k = next(e for e in d["traceEvents"] if e.get("cat") == "kernel")
c = k["args"]["correlation"]
d["traceEvents"] = [e for e in d["traceEvents"]
                    if not (e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("args", {}).get("correlation") == c)]
json.dump(d, open(sys.argv[2], "w"))
PY
"$py" "$script" "$tmp/cut.json" >"$tmp/out" 2>"$tmp/err"
awk 'NR == 2 && $2 < 1.0 && $2 > 0.9 {ok = 1} END {exit !ok}' "$tmp/out"
check "a kernel without its launching call: linked under 1 ($(sed -n 2p "$tmp/out" | cut -c1-60))" $?
printf '{"traceEvents": ' >"$tmp/truncated.json"
printf '{"traceEvents": 3}' >"$tmp/notlist.json"
printf 'not json' | gzip >"$tmp/bad.json.gz"
for a in "" "$tmp/missing.json" "$tmp/truncated.json" "$tmp/notlist.json" "$tmp/bad.json.gz" "$fixture $tmp/missing.json"; do
  # shellcheck disable=SC2086
  "$py" "$script" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ]
  check "trace_links.py ${a:-(no trace)}: exit 2, one line, nothing printed ($(head -c 100 "$tmp/err"))" $?
done
exit $fail
