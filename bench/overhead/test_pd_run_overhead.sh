#!/usr/bin/env bash
# test_pd_run_overhead.sh: pd_run_overhead.sh, pd_run_census.sh and pd_run_detach.sh refuse bad usage (no
# OUT, a ROUNDS that is no positive whole number, a MODE it does not know, a build without
# pd_run) with one line and exit 2, creating nothing. Their figures need a GPU and torch
# and are never a test.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; } # NAME STATUS
cd "$tmp" || exit 1
mkdir -p build/src/cli/pd_run
printf '#!/bin/sh\nexit 0\n' >build/src/cli/pd_run/pd_run
chmod +x build/src/cli/pd_run/pd_run
for a in "" "$tmp/build" "$tmp/build $tmp/o1 x" "$tmp/build $tmp/o1 0" "$tmp/build $tmp/o2 2 range,bogus" "$tmp/build $tmp/o3 2 ,"\
  "$tmp/nobuild $tmp/o4 2 range"; do
  # shellcheck disable=SC2086
  bash "$here/pd_run_overhead.sh" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -e "$tmp/o1" ] && [ ! -e "$tmp/o2" ] &&
    [ ! -e "$tmp/o3" ] && [ ! -e "$tmp/o4" ]
  check "pd_run_overhead.sh '$a': exit 2, one line, nothing made ($(head -c 120 "$tmp/err"))" $?
done
# the two scripts without MODES take the same usage
for script in pd_run_census.sh pd_run_detach.sh; do
  for a in "" "$tmp/build" "$tmp/build $tmp/o1 x" "$tmp/build $tmp/o1 0" "$tmp/nobuild $tmp/o4 2"; do
    # shellcheck disable=SC2086
    bash "$here/$script" $a >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -e "$tmp/o1" ] && [ ! -e "$tmp/o4" ]
    check "$script '$a': exit 2, one line, nothing made ($(head -c 120 "$tmp/err"))" $?
  done
done
grep -q "unknown mode 'bogus'" <(bash "$here/pd_run_overhead.sh" "$tmp/build" "$tmp/o2" 2 range,bogus 2>&1)
check "the unknown mode is named" $?
exit $fail
