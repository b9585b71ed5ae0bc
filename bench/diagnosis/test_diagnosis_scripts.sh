#!/usr/bin/env bash
# test_diagnosis_scripts.sh PROFILE_ANALYZE: the offline logic of bench/diagnosis (no GPU).
#  - truth_table.py --analyzer recomputes a scenario's prediction from its kept trace: on a
#    recording made of the committed sync fixture (its metrics JSON, its trace, four runs
#    each side), the table's predicted saving is the one profile_analyze --json gives for
#    that trace, not the one in the run's own metrics JSON (changed here to tell them apart);
#  - calib_drift.sh refuses bad usage with one line and exit 2, creating nothing;
#  - compare_tables.py sums up one or two tables.sh outputs, and refuses bad input;
#  - fixed_traces.py splits a row's error with the fixed program's own trace, and refuses
#    bad input.
set -uo pipefail
analyzer=${1:?usage: test_diagnosis_scripts.sh PROFILE_ANALYZE}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if [ "$2" -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; } # NAME STATUS

# A recording of one scenario, sync.
rec=$tmp/rec
mkdir -p "$rec/sync/trace"
cp "$root/tests/fixtures/runs/sync.pt.trace.json.gz" "$rec/sync/trace/"
echo '{"device": "test GPU", "boot_id": "00000000", "commit": "test", "runs": 4}' >"$rec/meta.json"
python3 - "$root/tests/fixtures/runs/sync.metrics.json" "$rec/sync" <<'PY'
import json, sys
src, d = sys.argv[1:]
doc = json.load(open(src))
# the run's own JSON claims another saving: the table must not read it with --analyzer
for s in doc.get("verdict", {}).get("savings", []):
    s["est_saving_fraction"] = 0.999
json.dump(doc, open(d + "/profiled.json", "w"))
for r, (off, on) in enumerate([(600e-6, 400e-6), (610e-6, 410e-6), (590e-6, 395e-6), (605e-6, 405e-6)], 1):
    json.dump({"step_periods_s": [off] * 8}, open(f"{d}/off.{r}.json", "w"))
    json.dump({"step_periods_s": [on] * 8}, open(f"{d}/on.{r}.json", "w"))
PY
"$analyzer" "$rec/sync/trace/sync.pt.trace.json.gz" --json "$tmp/direct.json" >/dev/null 2>&1
want=$(python3 -c "
import json
for s in json.load(open('$tmp/direct.json'))['verdict']['savings']:
    if s['cause'] == 'blocking_reads': print('%.1f%%' % (100 * s['est_saving_fraction']))")
python3 "$root/bench/diagnosis/truth_table.py" "$rec" --analyzer "$analyzer" >"$tmp/table.md" 2>"$tmp/table.err"
trc=$?
[ $trc -eq 0 ] && grep -q "^| sync (--no_sync) | blocking_reads |" "$tmp/table.md"
check "truth_table.py --analyzer runs and prints the sync row" $?
got=$(awk -F'|' '/^\| sync/ {gsub(/ /, "", $5); print $5}' "$tmp/table.md")
[ -n "$want" ] && [ "$got" = "$want" ]
check "the prediction is recomputed from the trace ($got, profile_analyze says $want)" $?
python3 "$root/bench/diagnosis/truth_table.py" "$rec" >"$tmp/own.md" 2>/dev/null
own=$(awk -F'|' '/^\| sync/ {gsub(/ /, "", $5); print $5}' "$tmp/own.md")
[ "$own" = "99.9%" ]
check "without --analyzer the run's own JSON is read ($own)" $?

# truth_table.py --torch: a recording of record_torch_traces.py names its rows by the model
# it trained (truth.json "model"; SimpleCNN's rows are plain "torch").
for model in cnn lm; do
  mkdir -p "$tmp/tt_$model"
  cp "$root/tests/fixtures/torch/torch_sync_b64.pt.trace.json.gz" "$tmp/tt_$model/"
  python3 - "$tmp/tt_$model/truth.json" "$model" <<'PY'
import json, sys
path, model = sys.argv[1:]
t = {"device": "test GPU", "boot_id": "00000000", "variants": {"sync_b64": {
    "trace": "torch_sync_b64.pt.trace.json.gz", "planted": "sync", "saved_share": 0.05,
    "saved_lo": 0.01, "saved_hi": 0.09, "step_ms": 2.7}}}
if model != "cnn":
    t["model"] = model
    t["variants"]["sync_b64"]["measure"] = "interleaved rounds, mean wall per step"
json.dump(t, open(path, "w"))
PY
  python3 "$root/bench/diagnosis/truth_table.py" --torch "$analyzer" --torch-truth "$tmp/tt_$model/truth.json" >"$tmp/tt_$model.md" 2>/dev/null
  want="| torch sync_b64 | blocking_reads |"
  [ "$model" = cnn ] || want="| torch $model sync_b64 | blocking_reads |"
  grep -qF "$want" "$tmp/tt_$model.md"
  check "truth_table.py --torch names a $model recording's row '$want'" $?
  # a saving timed with a sync after every step (no "measure", or "median step") is marked
  n=$(grep -c '\[sync each step\]' "$tmp/tt_$model.md")
  [ "$model" = cnn ] && [ "$n" -eq 1 ] || { [ "$model" = lm ] && [ "$n" -eq 0 ]; }
  check "truth_table.py --torch marks a $model row timed with a sync per step only where it was ($n)" $?
done

# phase_probe.py, on a stand-in torch (no GPU here) and a stand-in step whose phases take
# known times on a stand-in clock (time.perf_counter advances only as the step says, so
# nothing here depends on this machine's speed): each mark's time lands in its phase, the
# planted-only phase is the fix's saving, and bad input is refused with one line before
# anything is written.
stub=$tmp/stub
mkdir -p "$stub/torch/profiler"
cat >"$stub/torch/__init__.py" <<'PY'
__version__ = "stand-in"
class cuda:
    synchronize = staticmethod(lambda: None)
    is_available = staticmethod(lambda: True)
    get_device_name = staticmethod(lambda: "stand-in")
PY
cat >"$stub/torch/profiler/__init__.py" <<'PY'
class ProfilerActivity:
    CPU, CUDA = 1, 2
class _Ev:
    def __init__(self, name, dev):
        self.name, self.device_type = name, dev
class profile:
    def __init__(self, **kw): pass
    def __enter__(self): return self
    def __exit__(self, *a): return False
    def events(self):
        return [_Ev("aten::mul_", "DeviceType.CPU")] * 12 + [_Ev("[memory]", "DeviceType.CPU")] * 6 + \
            [_Ev("kernel", "DeviceType.CUDA")] * 4
PY
cat >"$stub/rtt.py" <<'PY'
import time
PLANTED = {"tiny_ops_b64": "launch_overhead"}
MODEL = "cnn"
_now = [0.0]
time.perf_counter = lambda: _now[0]  # the probe's clock: it moves only in spend()
def spend(ms):
    _now[0] += ms / 1e3
def trace_settings():
    return {}
def make_step(variant, mark=None):
    def step():
        spend(1); mark("load"); spend(2); mark("fwd")
        if not variant.endswith(":fixed"):
            spend(4); mark("ema")
    return step, {}
PY
PYTHONPATH=$stub python3 "$here/phase_probe.py" "$tmp/pp.json" --rtt "$stub/rtt.py" --variants tiny_ops_b64 \
  --rounds 2 --steps 3 >"$tmp/pp.out" 2>&1
check "phase_probe.py runs on a stand-in step" $?
python3 - "$tmp/pp.json" <<'PY'
import json, statistics, sys
res = json.load(open(sys.argv[1]))["variants"]["tiny_ops_b64"]
def med(side, key):
    return statistics.median(b[key] for b in res["blocks"] if b["side"] == side and b["mode"] == "off")
assert len(res["blocks"]) == 3 * 2 * 2, len(res["blocks"])  # modes x rounds x sides
near = lambda x, want: abs(x - want) < 1e-6
assert near(med("planted", "ema"), 4) and med("fixed", "ema") == 0, (med("planted", "ema"), med("fixed", "ema"))
assert near(med("fixed", "load"), 1) and near(med("fixed", "fwd"), 2) and near(med("planted", "rest"), 0)
assert near(med("planted", "wall") - med("fixed", "wall"), 4)
assert res["events"]["planted"] == {"events": 12 / 5, "memory_records": 6 / 5}, res["events"]
PY
check "phase_probe.py puts each mark's time in its phase and counts host events only" $?
# --summarize reads kept results again, without torch: the tables and the op-phase ratios
python3 "$here/phase_probe.py" --summarize "$tmp/pp.json" >"$tmp/pp_sum.out" 2>&1 &&
  grep -q "^tiny_ops_b64 " "$tmp/pp_sum.out" && grep -q "op-phase ratios, median" "$tmp/pp_sum.out"
check "phase_probe.py --summarize prints a kept result's table and its op-phase ratios" $?
echo '{"variants": {"tiny_ops_b64": {}}}' >"$tmp/not_probe.json"
for f in "$tmp/not_probe.json" "$tmp/missing.json"; do
  python3 "$here/phase_probe.py" --summarize "$f" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]
  check "phase_probe.py --summarize $(basename "$f"): refused with one line" $?
done
for a in "--variants nope" "--rounds 0" "--steps 0"; do
  rm -f "$tmp/pp2.json"
  # shellcheck disable=SC2086
  PYTHONPATH=$stub python3 "$here/phase_probe.py" "$tmp/pp2.json" --rtt "$stub/rtt.py" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -e "$tmp/pp2.json" ]
  check "phase_probe.py '$a': refused with one line, nothing written" $?
done

# compare_tables.py: two hand-made tables.sh outputs, three torch rows and one repeated
# (the fixtures table repeats recordings: counted once). Before: errors -8, +2, -6 (median
# |error| 6.0), the 12% tiny_ops row not named; after: -3, +1, -2 (2.0), all named; the
# predicted steps 20% and 5% over the measured ones; one row with its own process's step.
hdr='| case | transformation | measured saving (95% interval) | predicted saving | error (points) | within | verdict | unprofiled step measured / same process / predicted | device |'
# shellcheck disable=SC2016  # the backticks are the table's own (a verdict's markup)
{
  echo "$hdr"
  echo '| torch tiny_ops_b64 | tiny_ops | 12.0% (10.0% .. 14.0%) | 4.0% | -8.0 | no | `host_bound` | 4.000 / 3.000 / 4.800 ms | H (boot a) |'
  echo '| torch sync_b64 | blocking_reads | 3.0% (1.0% .. 5.0%) | 5.0% | +2.0 | yes | `host_bound` | 4.000 / - / 4.800 ms | H (boot a) |'
  echo '| torch lm sync_b64 | blocking_reads | 20.0% (15.0% .. 25.0%) | 14.0% | -6.0 | no | `sync` | 10.000 / - / 12.000 ms | H (boot a) |'
  echo '| torch lm sync_b64 | blocking_reads | 20.0% (15.0% .. 25.0%) | 14.0% | -6.0 | no | `sync` | 10.000 / - / 12.000 ms | H (boot a) |'
} >"$tmp/before.md"
# shellcheck disable=SC2016
{
  echo "$hdr"
  echo '| torch tiny_ops_b64 | tiny_ops | 12.0% (10.0% .. 14.0%) | 9.0% | -3.0 | yes | `launch_overhead` | 4.000 / 3.000 / 4.200 ms | H (boot a) |'
  echo '| torch sync_b64 | blocking_reads | 3.0% (1.0% .. 5.0%) | 4.0% | +1.0 | yes | `host_bound` | 4.000 / - / 4.200 ms | H (boot a) |'
  echo '| torch lm sync_b64 | blocking_reads | 20.0% (15.0% .. 25.0%) | 18.0% | -2.0 | yes | `sync` | 10.000 / - / 10.500 ms | H (boot a) |'
} >"$tmp/after.md"
python3 "$here/compare_tables.py" "$tmp/before.md" "$tmp/after.md" >"$tmp/cmp.out" 2>"$tmp/cmp.err"
rc=$?
[ $rc -eq 0 ] && grep -q "^3 torch rows$" "$tmp/cmp.out" &&
  grep -q "^| median abs error (points) | 6.0 | 2.0 |$" "$tmp/cmp.out" &&
  grep -q "^| rows outside 5 points and their interval | 2 | 0 |$" "$tmp/cmp.out" &&
  grep -q "^| predicted unprofiled step / measured - 1 (median) | +20.0% | +5.0% |$" "$tmp/cmp.out" &&
  grep -q "over 1 rows | +60.0% | +40.0% |$" "$tmp/cmp.out" &&
  grep -q "^| planted cause saving 10% or more, not the bottleneck | 1 | 0 |$" "$tmp/cmp.out" &&
  grep -q "^| TinyLM sync_b64 | 1 | 6.0 -> 2.0 | -6.0 -> -2.0 |$" "$tmp/cmp.out"
check "compare_tables.py: before and after over the shared rows, each recording once" $?
python3 "$here/compare_tables.py" "$tmp/after.md" >"$tmp/cmp1.out" 2>&1 &&
  grep -q "^| median abs error (points) | 2.0 |$" "$tmp/cmp1.out"
check "compare_tables.py: one table" $?
echo "no table here" >"$tmp/none.md"
for a in "" "$tmp/none.md" "$tmp/missing.md" "$tmp/after.md $tmp/none.md"; do
  # shellcheck disable=SC2086
  python3 "$here/compare_tables.py" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ]
  check "compare_tables.py '$a': exit 2, one line, nothing printed" $?
done

# fixed_traces.py: a recording whose tiny_ops_b64 kept its fixed program's trace (the
# committed plain_b64 stands in for it): the fixed step from the planted trace is its
# replayed unprofiled step less the tiny_ops saving, the one from its own trace is the fixed
# trace's replayed unprofiled step, each as profile_analyze --json gives it; bad input is
# refused with one line.
ft=$tmp/ft/tt
mkdir -p "$ft"
cp "$root/tests/fixtures/torch/torch_tiny_ops_b64.pt.trace.json.gz" "$root/tests/fixtures/torch/torch_plain_b64.pt.trace.json.gz" "$ft/"
cat >"$ft/truth.json" <<'JSON'
{"device": "test GPU", "variants": {"tiny_ops_b64": {"trace": "torch_tiny_ops_b64.pt.trace.json.gz",
 "fixed_trace": "torch_plain_b64.pt.trace.json.gz", "planted": "launch_overhead", "saved_share": 0.5,
 "step_ms": 8.0, "fixed_step_ms": 4.0}, "sync_b64": {"trace": "torch_tiny_ops_b64.pt.trace.json.gz",
 "planted": "sync", "saved_share": 0.1, "step_ms": 4.0}}}
JSON
"$analyzer" "$ft/torch_tiny_ops_b64.pt.trace.json.gz" --json "$tmp/ft_p.json" >/dev/null 2>&1
"$analyzer" "$ft/torch_plain_b64.pt.trace.json.gz" --json "$tmp/ft_f.json" >/dev/null 2>&1
want=$(python3 - "$tmp/ft_p.json" "$tmp/ft_f.json" <<'PY'
import json, sys
p, f = (json.load(open(x))["verdict"] for x in sys.argv[1:])
s = [x["est_saving_fraction"] for x in p["savings"] if x["cause"] == "tiny_ops"][0]
ph, fo = p["replay"]["predicted_unprofiled_step_us"] / 1e3, f["replay"]["predicted_unprofiled_step_us"] / 1e3
print("| SimpleCNN tiny_ops_b64 | tiny_ops | 50.0%% | %.1f%% | 4.000 / %.3f / %.3f | %.2f | %.2f |" % (
    100 * s, ph * (1 - s), fo, ph * (1 - s) / fo, fo / 4.0))
PY
)
# each row of a recording: "| NAME | " and then $want
python3 "$here/fixed_traces.py" "$analyzer" "$ft" >"$tmp/ft.out" 2>"$tmp/ft.err"
rc=$?
[ $rc -eq 0 ] && [ -n "$want" ] && [ "$(grep -c '^| tt |' "$tmp/ft.out")" -eq 1 ] && grep -qxF "| tt $want" "$tmp/ft.out"
check "fixed_traces.py: the fixed step from the planted trace and from its own, as profile_analyze gives them (the row without a fixed trace left out)" $?
tar -czf "$tmp/h200-0000.tar.gz" -C "$tmp/ft" tt
python3 "$here/fixed_traces.py" "$analyzer" "$tmp/h200-0000.tar.gz" >"$tmp/ft2.out" 2>/dev/null &&
  grep -qxF "| h200-0000 $want" "$tmp/ft2.out"
check "fixed_traces.py reads a recording's tar.gz, named by its file" $?
mkdir -p "$tmp/ft_bad" "$tmp/ft_none/tt"
echo "not json" >"$tmp/ft_bad/truth.json"
echo '{"variants": {"plain_b64": {"trace": "x.pt.trace.json.gz", "saved_share": 0, "step_ms": 1}}}' >"$tmp/ft_none/tt/truth.json"
for a in "" "$analyzer" "$tmp/nothing $tmp/ft" "$analyzer $tmp/ft_bad" "$analyzer $tmp/missing" "$analyzer $tmp/ft_none/tt"; do
  # shellcheck disable=SC2086
  python3 "$here/fixed_traces.py" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ]
  check "fixed_traces.py '$a': refused with one line, nothing printed" $?
done

# calib_drift.sh: bad usage.
cd "$tmp" || exit 1
for a in "" "build" "build $tmp/o1 x" "build $tmp/o2 0" "$tmp/nobuild $tmp/o3 2"; do
  # shellcheck disable=SC2086
  bash "$here/calib_drift.sh" $a >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -e "$tmp/o1" ] && [ ! -e "$tmp/o2" ] && [ ! -e "$tmp/o3" ]
  check "calib_drift.sh '$a': exit 2, one line, nothing made" $?
done
exit $fail
