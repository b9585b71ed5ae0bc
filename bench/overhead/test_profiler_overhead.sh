#!/usr/bin/env bash
# test_profiler_overhead.sh SCRIPT C_READER [PROFILER_DEMO]: profiler_overhead.sh's logic
# without a GPU. A fake build directory holds a fake profiler_demo that writes metrics
# JSONs with known step times (and can be told to fail or lie), so the test checks the
# argument handling, every JSON reader, the table's arithmetic (median of per-pair
# ratios, min..max, met?), the checks on what a --no_profile run wrote, and the
# messages of failed runs. With the real PROFILER_DEMO on a machine without a GPU it
# also checks that the benchmark stops with exit 3 and says why.
# Exit 0 when all checks pass, 1 otherwise.
set -uo pipefail

script=${1:?usage: test_profiler_overhead.sh SCRIPT C_READER [PROFILER_DEMO]}
c_reader=${2:?usage: test_profiler_overhead.sh SCRIPT C_READER [PROFILER_DEMO]}
real_demo=${3:-}

failures=0
checks=0
check() { # check DESCRIPTION CONDITION-RESULT(0/1)
  checks=$((checks + 1))
  if [ "$2" -ne 0 ]; then
    failures=$((failures + 1))
    echo "FAIL: $1" >&2
  fi
}
# expect_has DESCRIPTION FILE TEXT: FILE contains TEXT (fixed string).
expect_has() {
  grep -qF -- "$3" "$2"
  local rc=$?
  check "$1: '$3' not in $(basename "$2")" "$rc"
  if [ "$rc" -ne 0 ]; then sed 's/^/    | /' "$2" >&2; fi
}

work=$(mktemp -d "${TMPDIR:-/tmp}/pd_overhead_test.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
out=$work/out
err=$work/err

# run_script ARGS...: runs the benchmark script, sets $rc.
run_script() {
  bash "$script" "$@" >"$out" 2>"$err"
  rc=$?
}

# ---- the fake build directory ----------------------------------------------------------
fake=$work/build
mkdir -p "$fake/src/cli/profiler_demo" "$fake/bench/overhead"
cp "$c_reader" "$fake/bench/overhead/overhead_json_get"
# The fake's profiled p50 step times for clean cycle through 1.02, 1.05, 1.01 ms against an
# unprofiled 1.00 ms: per-pair overhead +2, +5, +1 %, median +2 % (a ratio of the medians
# would say the same here only by chance: 1.02 / 1.00). avg: 1.10 vs 1.00 ms: +10 %.
# tiny_ops: 12.5 vs 10.0 ms: +25 %. FAKE_MODE=lie writes a trace into --no_profile runs;
# FAKE_MODE=nodev exits 3 as profiler_demo does without a GPU; FAKE_MODE=crash exits 1.
cat >"$fake/src/cli/profiler_demo/profiler_demo" <<'FAKE'
#!/usr/bin/env bash
set -u
scen=dataloader json= nop=false
while [ $# -gt 0 ]; do
  case $1 in
    --scenario) scen=$2; shift ;;
    --output_json) json=$2; shift ;;
    --trace_dir | --profile_steps | --warmup_steps) shift ;;
    --no_profile) nop=true ;;
  esac
  shift
done
state=$(dirname "$0")/state.$scen.$nop
n=$(( $(cat "$state" 2>/dev/null || echo 0) + 1 ))
echo "$n" >"$state"
echo "$scen.$nop" >>"$(dirname "$0")/order.log"
case ${FAKE_MODE:-ok} in
  nodev) echo "profiler_demo: no CUDA device available (fake); this demo profiles GPU work" >&2; exit 3 ;;
  crash) echo "profiler_demo: training step 3: the training step failed: fake" >&2; exit 1 ;;
esac
if [ "$scen" = clean ]; then
  if [ "$nop" = true ]; then p50=0.001 avg=0.001; else
    case $(( (n - 1) % 3 )) in 0) p50=0.00102 ;; 1) p50=0.00105 ;; *) p50=0.00101 ;; esac
    avg=0.0011
  fi
else
  if [ "$nop" = true ]; then p50=0.01 avg=0.01; else p50=0.0125 avg=0.0125; fi
fi
if [ "$nop" = true ]; then
  kps=null cfg=', "no_profile": true' traces='[]'
  [ "${FAKE_MODE:-ok}" = lie ] && traces='["x.pt.trace.json"]'
else
  kps=1234 cfg='' traces='["x.pt.trace.json"]'
fi
cost=null
if [ "$nop" = false ]; then
  if [ "$scen" = clean ]; then cost='{"est_added_us_per_step": 18.5}'; else cost='{"est_added_us_per_step": 2400}'; fi
fi
cat >"$json" <<EOF
{"schema_version": 1, "config": {"scenario": "$scen"$cfg},
 "device": {"name": "Fake GPU 80GB", "cupti": 0},
 "metrics": {"avg_step_time_s": $avg, "p50_step_time_s": $p50, "kernels_per_step": $kps},
 "step_times_s": [], "dataloader_wait_s": [], "verdict": null, "top_ops": [], "trace_files": $traces,
 "profiler_cost": $cost}
EOF
echo "Metrics: $json"
FAKE
chmod +x "$fake/src/cli/profiler_demo/profiler_demo"
reset_fake() { rm -f "$fake"/src/cli/profiler_demo/state.* "$fake/src/cli/profiler_demo/order.log"; }

# ---- arguments ---------------------------------------------------------------------------
run_script
check "no arguments: exit 2 (got $rc)" $(( rc != 2 ))
expect_has "no arguments" "$err" "expected BUILD_DIR [RUNS], got 0 arguments"
expect_has "no arguments" "$err" "usage: bench/overhead/profiler_overhead.sh BUILD_DIR [RUNS]"

run_script --help
check "--help: exit 0 (got $rc)" $(( rc != 0 ))
expect_has "--help" "$out" "usage: bench/overhead/profiler_overhead.sh BUILD_DIR [RUNS]"

for bad in 0 abc 101 -1 1.5 ""; do
  run_script "$fake" "$bad"
  check "RUNS '$bad': exit 2 (got $rc)" $(( rc != 2 ))
  expect_has "RUNS '$bad'" "$err" "RUNS must be an integer from 1 to 100, got '$bad'"
done

run_script "$fake" 2 extra
check "three arguments: exit 2 (got $rc)" $(( rc != 2 ))

run_script "$work/nonexistent"
check "missing BUILD_DIR: exit 2 (got $rc)" $(( rc != 2 ))
expect_has "missing BUILD_DIR" "$err" "BUILD_DIR '$work/nonexistent' is not a directory"

mkdir -p "$work/empty_build"
run_script "$work/empty_build"
check "BUILD_DIR without profiler_demo: exit 2 (got $rc)" $(( rc != 2 ))
expect_has "BUILD_DIR without profiler_demo" "$err" "no profiler_demo binary at '$work/empty_build/src/cli/profiler_demo/profiler_demo'"

PD_OVERHEAD_READER=perl run_script "$fake" 1
check "unknown reader: exit 2 (got $rc)" $(( rc != 2 ))
expect_has "unknown reader" "$err" "PD_OVERHEAD_READER must be one of python3, jq, c, got 'perl'"

# ---- the table, with every reader this host has ----------------------------------------
readers=(c)
command -v python3 >/dev/null 2>&1 && readers+=(python3)
command -v jq >/dev/null 2>&1 && readers+=(jq)
for r in "${readers[@]}"; do
  reset_fake
  PD_OVERHEAD_TORCH=0 PD_OVERHEAD_READER=$r PD_OVERHEAD_KEEP=$work/keep.$r run_script "$fake" 3
  check "reader $r: exit 0 (got $rc; stderr: $(head -c 400 "$err"))" $(( rc != 0 ))
  expect_has "reader $r" "$out" "Profiler overhead on Fake GPU 80GB: 3 profiled / unprofiled pairs"
  expect_has "reader $r" "$out" "JSON reader $r."
  expect_has "reader $r" "$out" "| clean | 3 | 1.020 | 1.000 | +2.00 | +1.00..+5.00 | +10.00 | 20.0 | 18.5 | <= 5% | yes |"
  expect_has "reader $r" "$out" "| tiny_ops | 3 | 12.500 | 10.000 | +25.00 | +25.00..+25.00 | +25.00 | 2500.0 | 2400.0 | <= 20% | no |"
  expect_has "reader $r" "$err" "clean pair 2/3: p50 step 1.050 ms profiled, 1.000 ms unprofiled (+5.00%)"
  expect_has "reader $r" "$out" "torch.profiler: not measured (PD_OVERHEAD_TORCH=0)."
  kept=$(find "$work/keep.$r" -name '*.json' | wc -l)
  check "reader $r: PD_OVERHEAD_KEEP holds the 12 JSONs (got $kept)" $(( kept != 12 ))
  # ABBA: odd pairs run the profiled half first, even pairs the unprofiled one.
  order=$(paste -sd' ' "$fake/src/cli/profiler_demo/order.log")
  want="clean.false clean.true clean.true clean.false clean.false clean.true"
  want+=" tiny_ops.false tiny_ops.true tiny_ops.true tiny_ops.false tiny_ops.false tiny_ops.true"
  check "reader $r: runs in ABBA order (got: $order)" "$([ "$order" = "$want" ]; echo $?)"
done

# ---- failures ------------------------------------------------------------------------------
reset_fake
FAKE_MODE=lie run_script "$fake" 1
check "a --no_profile run with a trace: exit 1 (got $rc)" $(( rc != 1 ))
expect_has "a --no_profile run with a trace" "$err" \
  "clean unprofiled run 1: its metrics JSON is wrong: a --no_profile run must have no trace"

reset_fake
FAKE_MODE=nodev run_script "$fake" 2
check "no device: exit 3 (got $rc)" $(( rc != 3 ))
expect_has "no device" "$err" "clean profiled run 1 failed (exit 3: no CUDA device; this benchmark needs a GPU)"
expect_has "no device" "$err" "  profiler_demo: no CUDA device available (fake)"
check "no device: no table on stdout" $(( $(wc -c <"$out") != 0 ))

reset_fake
FAKE_MODE=crash run_script "$fake" 2
check "failed run: exit 1 (got $rc)" $(( rc != 1 ))
expect_has "failed run" "$err" "clean profiled run 1 failed (exit 1). profiler_demo said:"
expect_has "failed run" "$err" "command: $fake/src/cli/profiler_demo/profiler_demo --scenario clean --amp --pin_memory --profile_steps 50 --warmup_steps 20"

# ---- the real profiler_demo, where there is no GPU -------------------------------------------
if [ -n "$real_demo" ]; then
  if [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ]; then
    echo "test_profiler_overhead: a GPU device node exists; the real no-device path is not checked here"
  else
    real=$work/real_build
    mkdir -p "$real/src/cli/profiler_demo"
    ln -s "$(realpath "$real_demo")" "$real/src/cli/profiler_demo/profiler_demo"
    run_script "$real" 1
    check "real profiler_demo without a GPU: exit 3 (got $rc)" $(( rc != 3 ))
    expect_has "real profiler_demo without a GPU" "$err" "clean profiled run 1 failed (exit 3: no CUDA device"
    expect_has "real profiler_demo without a GPU" "$err" "profiler_demo: no CUDA device available ("
  fi
fi

echo "test_profiler_overhead: $((checks - failures)) of $checks checks passed"
[ "$failures" -eq 0 ]
