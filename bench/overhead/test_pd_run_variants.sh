#!/usr/bin/env bash
# test_pd_run_variants.sh PYTHON: pd_run_variants.sh refuses bad usage with one line and
# exit 2 before running anything, writing nothing; pd_run_variants.py refuses an OUT without
# planted.json or metrics the same way, and tables a small sweep: a planted cause that is
# the verdict or a fix saving 5% counts as named, one saving less does not, a missing
# metrics file reads "no metrics". The sweep's figures need a GPU and torch: never a test.
set -uo pipefail
py=${1:?usage: test_pd_run_variants.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; } # NAME STATUS
mkdir -p "$tmp/build"
for a in "" "$tmp/build" "$tmp/nobuild $tmp/o" "$tmp/build $tmp/o --model vit" "$tmp/build $tmp/o --bogus" \
  "$tmp/build $tmp/o --only" "$tmp/build $tmp/o"; do
  # shellcheck disable=SC2086
  bash "$here/pd_run_variants.sh" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ] && [ ! -e "$tmp/o" ]
  check "pd_run_variants.sh $a: exit 2, one line, nothing written ($(head -c 100 "$tmp/err"))" $?
done
mkdir -p "$tmp/s/json"
"$py" "$here/pd_run_variants.py" "$tmp/s" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ]
check "pd_run_variants.py without planted.json: exit 2, one line" $?
printf '{"sync_b64": "sync", "tiny_ops_b64": "launch_overhead", "pageable_input_b64": "pageable_copy"}' >"$tmp/s/planted.json"
"$py" "$here/pd_run_variants.py" "$tmp/s" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ]
check "pd_run_variants.py without metrics: exit 2, one line" $?
v() { printf '{"verdict": {"bottleneck": "%s", "savings": [%s]}}' "$1" "$2"; }
v host_bound '{"cause": "blocking_reads", "est_saving_fraction": 0.061}, {"cause": "combined", "est_saving_fraction": 0.3}' >"$tmp/s/json/sync_b64_emit.json"
v host_code '{"cause": "host_code", "est_saving_fraction": 0.11}, {"cause": "blocking_reads", "est_saving_fraction": 0.049}' >"$tmp/s/json/sync_b64_plain.json"
v launch_overhead '{"cause": "tiny_ops", "est_saving_fraction": 0.4}' >"$tmp/s/json/tiny_ops_b64_emit.json"
printf '{"verdict": ' >"$tmp/s/json/tiny_ops_b64_plain.json"
"$py" "$here/pd_run_variants.py" "$tmp/s" --model lm >"$tmp/out" 2>"$tmp/err"
check "pd_run_variants.py on a small sweep: exit 0" $?
grep -qF '| sync_b64 (`sync`) | named: `host_bound`; blocking_reads 6.1% | **not named**: `host_code`; host_code 11.0% |' "$tmp/out"
check "a fix saving 6.1% is named, one saving 4.9% is not, combined left out" $?
grep -qF '| tiny_ops_b64 (`launch_overhead`) | named: `launch_overhead`; tiny_ops 40.0% | no metrics |' "$tmp/out"
check "the verdict names it; a cut metrics file reads no metrics" $?
grep -qF 'Named: with emit_nvtx 2 of 2, without 0 of 1.' "$tmp/out"
check "the counts leave the run without metrics out" $?
grep -qF 'model `lm`' "$tmp/out"
check "the table says the model" $?
# --truth: refused before anything is printed when unreadable or out of range; else the
# predicted saving of the planted fix beside the measured one, with its error and "within"
printf '{"variants": {"sync_b64": {"planted": "sync", "saved_share": 5.0}}}' >"$tmp/bad_truth.json"
for t in "$tmp/missing.json" "$tmp/bad_truth.json"; do
  "$py" "$here/pd_run_variants.py" "$tmp/s" --truth "$t" >"$tmp/out2" 2>"$tmp/err"
  [ $? -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out2" ]
  check "pd_run_variants.py --truth $(basename "$t"): exit 2, one line, nothing printed ($(head -c 100 "$tmp/err"))" $?
done
printf '{"device": "test GPU", "variants": {"sync_b64": {"planted": "sync", "saved_share": 0.05, "saved_lo": 0.01, "saved_hi": 0.09, "measure": "interleaved rounds, mean wall per step"}, "plain_b64": {"planted": "none"}}}' >"$tmp/truth.json"
"$py" "$here/pd_run_variants.py" "$tmp/s" --truth "$tmp/truth.json" >"$tmp/out2" 2>"$tmp/err"
check "pd_run_variants.py --truth: exit 0" $?
grep -qF '| sync_b64 | blocking_reads | 5.0% (1.0% .. 9.0%) | 6.1% (+1.1, yes) | 4.9% (-0.1, yes) |' "$tmp/out2"
check "the truth row sets the predicted saving of each mode beside the measured one" $?
[ "$(grep -c '^| plain_b64' "$tmp/out2")" -eq 0 ]
check "a variant with nothing planted has no truth row" $?
[ $fail -eq 0 ] || cat "$tmp/out" "$tmp/out2" "$tmp/err"
exit $fail
