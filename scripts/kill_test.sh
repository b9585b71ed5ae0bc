#!/usr/bin/env bash
# kill_test.sh: profile_analyze --json --html on a large trace, killed by a signal at a
# random moment (0-2.2 s; tune to the machine so about half the runs are cut), N times.
# Before each run r.json and r.html hold an "old" pair; afterwards each must be the old or
# a complete new file, both of one kind (all or none), and no temporary may be left
# (SIGKILL cannot clean: its leftovers are counted, not failed). docs/reliability.md.
#
# usage: scripts/kill_test.sh SIGNAL N   (run in a directory holding big.pt.trace.json;
#        PA names the profile_analyze binary)
set -u
sig=${1:?signal (KILL, TERM, INT)} n=${2:?number of tries}
PA=${PA:-$(dirname "$0")/../build/src/cli/profile_analyze/profile_analyze}
partial=0 mixed=0 temps=0 old=0 new=0 completed=0
for i in $(seq 1 "$n"); do
  rm -f r.json r.html r.*.tmp.*
  echo '{"old": true}' > r.json; echo '<html>old</html>' > r.html
  $PA big.pt.trace.json --json r.json --html r.html >/dev/null 2>&1 &
  pid=$!
  ms=$((RANDOM % 2200)); sleep "$(printf "%d.%03d" $((ms / 1000)) $((ms % 1000)))"
  kill -"$sig" $pid 2>/dev/null; wait $pid; rc=$?
  [ "$rc" -eq 0 ] && completed=$((completed+1))
  jo=$(python3 -c 'import json,sys
try: d=json.load(open("r.json")); print("old" if d.get("old") else "new")
except Exception: print("partial")')
  if grep -q '<html>old</html>' r.html; then ho=old; elif tail -c 200 r.html | grep -q '</html>'; then ho=new; else ho=partial; fi
  if [ "$jo" = partial ] || [ "$ho" = partial ]; then
    partial=$((partial + 1))
    echo "try $i rc=$rc json=$jo html=$ho"
  fi
  [ "$jo" != "$ho" ] && echo "try $i rc=$rc mixed json=$jo html=$ho"
  [ "$jo" != "$ho" ] && mixed=$((mixed+1))
  [ "$jo" = old ] && [ "$ho" = old ] && old=$((old+1))
  [ "$jo" = new ] && [ "$ho" = new ] && new=$((new+1))
  t=$(ls r.*.tmp.* 2>/dev/null | wc -l); [ "$t" -gt 0 ] && temps=$((temps+1))
done
echo "SIG$sig tries=$n finished_before_kill=$completed both_old=$old both_new=$new mixed=$mixed partial=$partial tries_with_temps_left=$temps"
