#!/usr/bin/env bash
# test_lib_args.sh DEMO: scripts/lib_args.sh against its rule (baselines/README.md):
# comment lines (first non-blank character '#', with leading spaces or tabs), blank
# lines, CRLF endings, a last line without a newline, several flags per line, a missing
# file; and the scenario names of DEMO --list_scenarios --names against the headings of
# the full --list_scenarios; and the A/B runners' warmup flags (pd_ab_warmup_args), the
# alpha of each look (pd_ab_look_alpha), the undecided count (pd_ab_undecided), one
# profiler_demo run of the GPU scripts (pd_demo_run, with a fake profiler_demo) and the
# probe check (pd_ab_probe_check) with a --help longer than a pipe holds.
# Prints each failure; exits 1 on any.
set -uo pipefail
demo=${1:?usage: test_lib_args.sh PROFILER_DEMO}
src=${PD_SOURCE_DIR:?PD_SOURCE_DIR is not set (run through ctest)}
# shellcheck source=scripts/lib_args.sh
. "$src/scripts/lib_args.sh"
fails=0
got=() names=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect() { # expect WHAT GOT WANT
  if [ "$2" != "$3" ]; then
    echo "FAIL $1: got [$2], want [$3]"
    fails=$((fails + 1))
  fi
}

printf '# a comment\n\n   # indented comment\n\t# tab comment\n--amp  --pin_memory\r\n\n\t--warmup_steps\t10 \n--seed 1' >"$tmp/a.args"
pd_args_read "$tmp/a.args" got
expect "rc" "$?" 0
expect "words" "$(printf '<%s>' "${got[@]}")" "<--amp><--pin_memory><--warmup_steps><10><--seed><1>"

printf '# only comments\n\n' >"$tmp/b.args"
pd_args_read "$tmp/b.args" got
expect "comments only: rc" "$?" 0
expect "comments only: count" "${#got[@]}" 0

# '#' inside a line is a word, not a comment (the rule has no trailing comments)
printf -- '--seed 1 #2\n' >"$tmp/c.args"
pd_args_read "$tmp/c.args" got
expect "inner #" "$(printf '<%s>' "${got[@]}")" "<--seed><1><#2>"

err=$(pd_args_read "$tmp/missing.args" got 2>&1)
expect "missing: rc" "$?" 2
expect "missing: one line" "$(printf '%s\n' "$err" | wc -l)" 1

# the committed file: the same words as its non-comment lines split at blanks
pd_args_read "$src/baselines/acceptance.args" got
want=$(grep -v '^[[:space:]]*#' "$src/baselines/acceptance.args" | tr -s ' \t\r\n' '\n' | grep -v '^$' | tr '\n' ' ')
expect "acceptance.args" "${got[*]} " "$want"

pd_scenario_names "$demo" names
expect "names: rc" "$?" 0
heads=$("$demo" --list_scenarios | grep -v '^[[:space:]]' | grep -v '^$' | tr '\n' ' ')
expect "names" "${names[*]} " "$heads"
[ "${#names[@]}" -ge 2 ] || { echo "FAIL names: ${#names[@]} scenario(s)"; fails=$((fails + 1)); }
err=$(pd_scenario_names /bin/false names 2>&1)
expect "failing demo: rc" "$?" 2
expect "failing demo: one line" "$(printf '%s\n' "$err" | wc -l)" 1

# PD_SCENARIOS overrides the list where the scripts allow it; empty does not
chosen=()
PD_SCENARIOS="sync  clean" pd_scenarios_chosen "$demo" chosen
expect "chosen: override" "${chosen[*]}" "sync clean"
PD_SCENARIOS="" pd_scenarios_chosen "$demo" chosen
expect "chosen: empty" "${chosen[*]}" "${names[*]}"

# the whole-number check the GPU scripts share: digits only, one line naming the value
pd_whole_number N 40
expect "whole: 40" "$?" 0
err=$(pd_whole_number ROUNDS 4x 2>&1)
expect "whole: 4x rc" "$?" 2
expect "whole: 4x says" "$err" "test_lib_args: ROUNDS must be a whole number, got '4x'"

# the A/B runners' warmup flags: 48 by default, PD_AB_WARMUP's count, none for dataloader,
# and a bad count refused with one line (nothing filled)
warm=(stale)
pd_ab_warmup_args clean warm
expect "warmup: rc" "$?" 0
expect "warmup: default" "${warm[*]}" "--warmup_steps 48"
PD_AB_WARMUP=12 pd_ab_warmup_args tiny_ops warm
expect "warmup: PD_AB_WARMUP" "${warm[*]}" "--warmup_steps 12"
PD_AB_WARMUP=12 pd_ab_warmup_args dataloader warm
expect "warmup: dataloader keeps the args file's" "${#warm[@]}" 0
for bad in x -1 1.5 "4 8"; do
  warm=(stale)
  err=$(PD_AB_WARMUP=$bad pd_ab_warmup_args clean warm 2>&1)
  expect "warmup '$bad': rc" "$?" 2
  expect "warmup '$bad': one line" "$(printf '%s\n' "$err" | wc -l)" 1
  expect "warmup '$bad': says why" "$(printf '%s' "$err" | grep -c 'PD_AB_WARMUP must be a whole number')" 1
done

# alpha spent across a sequential A/B's looks: the whole of it with one look; 0.4 of it at
# the first, the rest split evenly over the later ones; what gpu_ab.sh printed before the
# helper (0.01, 0.004, 0.006 / (n - 1))
expect "look alpha: one look" "$(pd_ab_look_alpha 1 1)" 0.01
expect "look alpha: first of 5" "$(pd_ab_look_alpha 1 5)" 0.004
expect "look alpha: third of 5" "$(pd_ab_look_alpha 3 5)" 0.0015
expect "look alpha: second of 2, alpha 0.05" "$(pd_ab_look_alpha 2 2 0.05)" 0.03
total=$(for k in 1 2 3 4 5; do pd_ab_look_alpha "$k" 5 0.02; done | awk '{ t += $1 } END { printf "%.6g", t }')
expect "look alpha: the looks spend alpha exactly" "$total" 0.02
# a report's undecided rows: read from profile_compare's JSON, 0 without one
printf '{\n  "result": "PASS",\n  "undecided": 2,\n  "rows": []\n}\n' >"$tmp/ab.json"
expect "undecided: read" "$(pd_ab_undecided "$tmp/ab.json")" 2
expect "undecided: no file" "$(pd_ab_undecided "$tmp/none.json")" 0
printf '{"result": "PASS"}\n' >"$tmp/ab0.json"
expect "undecided: no key" "$(pd_ab_undecided "$tmp/ab0.json")" 0

# one profiler_demo run (pd_demo_run): the flags it adds, the traces removed, and a failure
# said in one way by every GPU script (no device: 3; else 1 with the log's tail)
cat >"$tmp/fake_demo" <<'FAKE'
#!/usr/bin/env bash
# fake profiler_demo: FAKE_RC as its exit status; writes --output_json and a trace file
out="" dir=""
while [ $# -gt 0 ]; do
  case "$1" in --output_json) out=$2; shift ;; --trace_dir) dir=$2; shift ;; esac
  shift
done
mkdir -p "$dir" && echo trace >"$dir/x.pt.trace.json"
for i in 1 2 3 4 5 6 7; do echo "line $i"; done
[ "${FAKE_RC:-0}" -eq 0 ] && echo '{}' >"$out"
exit "${FAKE_RC:-0}"
FAKE
chmod +x "$tmp/fake_demo"
pd_demo_run "the run" "$tmp/runs/a/x.json" "$tmp/scratch" "$tmp/fake_demo" --scenario clean 2>"$tmp/err"
expect "demo run: rc" "$?" 0
expect "demo run: output written" "$(cat "$tmp/runs/a/x.json" 2>/dev/null)" "{}"
expect "demo run: traces removed" "$(ls "$tmp/scratch/t" 2>/dev/null | wc -l)" 0
expect "demo run: nothing said" "$(wc -c <"$tmp/err")" 0
FAKE_RC=3 pd_demo_run "the run" "$tmp/y.json" "$tmp/scratch" "$tmp/fake_demo" 2>"$tmp/err"
expect "demo run, no GPU: rc" "$?" 3
expect "demo run, no GPU: says" "$(cat "$tmp/err")" "test_lib_args: no CUDA device (profiler_demo exit 3)"
FAKE_RC=5 pd_demo_run "clean in mode thp" "$tmp/y.json" "$tmp/scratch" env FOO=1 "$tmp/fake_demo" 2>"$tmp/err"
expect "demo run, failed: rc" "$?" 1
expect "demo run, failed: says" "$(head -n 1 "$tmp/err")" "test_lib_args: clean in mode thp exited 5:"
expect "demo run, failed: the log's last 5 lines" "$(tail -n +2 "$tmp/err" | tr '\n' ,)" "line 3,line 4,line 5,line 6,line 7,"
expect "demo run, failed: traces removed" "$(ls "$tmp/scratch/t" 2>/dev/null | wc -l)" 0
# inside $(...) it returns the status to the caller (ab_record.sh: sec=$(run ...) || exit $?)
got_rc=0
_x=$(FAKE_RC=3 pd_demo_run "r" "$tmp/y.json" "$tmp/scratch" "$tmp/fake_demo" 2>/dev/null) || got_rc=$?
expect "demo run in a subshell: rc" "$got_rc" 3

# whether every build's profiler_demo has --warmup_probe (pd_ab_probe_check), under pipefail
# as the A/B runners source it, with a --help longer than a pipe holds (the flag named first:
# a reader that stops at it must not turn the answer into "no")
printf '#!/bin/sh\necho "  --warmup_probe  the speed probe"\nhead -c 200000 /dev/zero | tr "\\0" x\necho\n' >"$tmp/demo_probe"
printf '#!/bin/sh\necho "  --scenario NAME"\n' >"$tmp/demo_old"
chmod +x "$tmp/demo_probe" "$tmp/demo_old"
# shellcheck disable=SC2154  # pd_ab_probe is set by pd_ab_probe_check
(
  set -o pipefail
  pd_ab_probe_check "$tmp/demo_probe" "$tmp/demo_probe"
  echo "rc=$? probe=$pd_ab_probe"
) >"$tmp/probe.out" 2>&1
expect "probe check: both builds have it" "$(cat "$tmp/probe.out")" "rc=0 probe=1"
pd_ab_probe_check "$tmp/demo_probe" "$tmp/demo_old"
expect "probe check: a base build without it" "$?:$pd_ab_probe" "0:0"
PD_AB_PROBE=0 pd_ab_probe_check "$tmp/demo_probe"
expect "probe check: PD_AB_PROBE=0" "$pd_ab_probe" 0
err=$(PD_AB_PROBE=x pd_ab_probe_check "$tmp/demo_probe" 2>&1)
expect "probe check: PD_AB_PROBE=x rc" "$?" 2
expect "probe check: PD_AB_PROBE=x says" "$err" "test_lib_args: PD_AB_PROBE must be 0 or 1, got 'x'"

if [ "$fails" -gt 0 ]; then
  echo "test_lib_args: $fails failure(s)"
  exit 1
fi
echo "test_lib_args: all passed"
