#!/usr/bin/env bash
# inject_check.sh BUILD_DIR OUT_DIR: validates pd_run + libpd_inject.so on a GPU host and
# prints a compact summary (about 3-5 minutes). Runs from a carried build, with the library
# path set as gpu_acceptance.sh sets it (scripts/gpu_libpath.sh).
#
#   1. the C example (examples/inject_steps) under --step_kernel, --step_range (NVTX), and
#      with a planted blocking read (--sync) and pageable copies (--pageable): exit status,
#      steps, kernels per step, verdict, the profiler's estimated cost;
#   2. the PyTorch step (tests/torch/train_step.py; skipped where torch+CUDA is missing)
#      under --step_kernel amp_update_scale with 2 DataLoader workers, under --step_range,
#      and its planted-cause variants (sync_b64, tiny_ops_b64, memory_churn_b64,
#      dataloader_b64): the verdict and findings of each; then sync_b64 and logging_reads_b64
#      under --step_range with torch's emit_nvtx op ranges (--emit_nvtx), whose reads pd_run
#      should find through the ops it then records (reads/step in the summary);
#   3. overhead, ABBA over PD_INJECT_PAIRS (default 5) rounds of fresh processes on the same
#      PyTorch step and steps: unprofiled, pd_run, torch.profiler with its defaults, and with
#      record_shapes + profile_memory; the added time per step (median over rounds of the
#      paired difference to the unprofiled run of the same round), ours/torch's ratios, and
#      our profiler_cost estimate against our measured added time.
# Everything is kept under OUT_DIR (metrics JSONs, traces, logs): run ../shared/peers on a
# pd_run trace from OUT_DIR/traces afterwards. Exit: 0 all runs behaved, 1 a check failed,
# 2 bad setup.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
[ "$#" -eq 2 ] || { echo "usage: scripts/inject_check.sh BUILD_DIR OUT_DIR" >&2; exit 2; }
build=$1
out=$2
case "$build" in /*) ;; *) build=$root/$build ;; esac
case "$out" in /*) ;; *) out=$root/$out ;; esac
pd_run=$build/src/cli/pd_run/pd_run
example=$build/examples/inject_steps/inject_steps
for f in "$pd_run" "$example" "$build/lib/libpd_inject.so"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "inject_check: $f missing: build the tree first" >&2; exit 2; }
done
command -v python3 >/dev/null 2>&1 || { echo "inject_check: python3 is needed for the summary" >&2; exit 2; }
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
mkdir -p "$out/traces" "$out/logs" "$out/json" || exit 2
pairs=${PD_INJECT_PAIRS:-5}
failed=0
W=10 # unmeasured steps, then 1 warmup and N active steps in the profiled window
N=30

# summary JSON -> one line: steps, kernels/step, verdict (+findings), estimated cost
summarize() {
  python3 - "$1" <<'PY'
import json, math, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no metrics ({e.__class__.__name__})"); sys.exit(0)
m, v = j.get("metrics") or {}, j.get("verdict") or {}
c = j.get("profiler_cost") or {}
f = ",".join(x.get("cause", "?") for x in v.get("findings", []))
def num(x, fmt):
    return fmt.format(x) if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"
print(f"steps={len(j.get('step_times_s', []))} kernels/step={num(m.get('kernels_per_step'), '{:.0f}')} "
      f"step={num((m.get('avg_step_time_s') or float('nan')) * 1e3, '{:.3f}')}ms "
      f"verdict={v.get('bottleneck', '?')}{' findings=' + f if f else ''} "
      f"reads/step={num(m.get('replay_reads_per_step'), '{:.1f}')} "
      f"est_cost={num(c.get('est_added_us_per_step'), '{:.1f}')}us/step")
PY
}

# run NAME EXPECTED_STATUS PD_RUN_OPTIONS... -- PROGRAM...: one pd_run, its summary line
run() {
  local name=$1 want=$2
  shift 2
  local json=$out/json/$name.json
  rm -f "$json"
  "$pd_run" --trace_dir "$out/traces" --output_json "$json" "$@" >"$out/logs/$name.out" 2>"$out/logs/$name.err"
  local rc=$?
  local mark=ok
  if [ "$rc" -ne "$want" ] || [ ! -f "$json" ]; then
    mark=FAIL
    failed=1
  fi
  printf '%-28s %-4s exit=%-3s %s\n' "$name" "$mark" "$rc" "$(summarize "$json")"
  [ "$mark" = ok ] || tail -5 "$out/logs/$name.err" | sed 's/^/    | /'
}

echo "== inject_check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
echo "== 1. the C example"
run c_step_kernel 0 --step_kernel ex_optimizer_step --wait 1 --warmup 1 --active 5 -- "$example" --steps 12
run c_step_range 0 --step_range train_step --wait 1 --warmup 1 --active 5 -- "$example" --steps 12 --nvtx
run c_sync 0 --step_kernel ex_optimizer_step --wait 1 --warmup 1 --active 5 -- "$example" --steps 12 --sync
run c_pageable 0 --step_kernel ex_optimizer_step --wait 1 --warmup 1 --active 5 -- "$example" --steps 12 --pageable --n 4194304
run c_whole_run 0 -- "$example" --steps 3

step=$root/tests/torch/train_step.py
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "== 2-3. skipped: python3 cannot import torch with CUDA here"
  exit "$failed"
fi
echo "== 2. the PyTorch step ($(python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'))"
sched=(--skip_first "$W" --wait 0 --warmup 1 --active "$N")
run torch_step_kernel 0 --step_kernel amp_update_scale "${sched[@]}" -- python3 "$step" --warmup "$W" --active "$N" --workers 2
ls "$out"/json/torch_step_kernel.pid*.json >/dev/null 2>&1 && { echo "    FAIL: a DataLoader worker wrote metrics"; failed=1; }
run torch_step_range 0 --step_range train_step "${sched[@]}" -- python3 "$step" --warmup "$W" --active "$N" --nvtx
for v in sync_b64 tiny_ops_b64 memory_churn_b64 dataloader_b64; do
  run "torch_$v" 0 --step_kernel amp_update_scale --skip_first 3 --wait 0 --warmup 1 --active 5 -- python3 "$step" --variant "$v" --warmup 3 --active 5
done
for v in sync_b64 logging_reads_b64; do
  run "torch_${v}_emit_nvtx" 0 --step_range train_step --skip_first 3 --wait 0 --warmup 1 --active 5 -- \
    python3 "$step" --variant "$v" --warmup 3 --active 5 --nvtx --emit_nvtx
done

echo "== 3. overhead: ABBA over $pairs rounds of fresh processes (plain_b64, timed steps $((W + 1))..$((W + N - 1)))"
modes=(off ours tdef tfull)
for r in $(seq 1 "$pairs"); do
  order=("${modes[@]}")
  [ $((r % 2)) -eq 0 ] && order=(tfull tdef ours off)
  for m in "${order[@]}"; do
    t=$out/json/timing_${m}_$r.json
    args=(python3 "$step" --warmup "$W" --active "$N" --timing_json "$t")
    case $m in
      off) "${args[@]}" >"$out/logs/oh_${m}_$r.log" 2>&1 ;;
      ours) "$pd_run" --trace_dir "$out/traces" --output_json "$out/json/oh_ours_$r.json" --step_kernel amp_update_scale \
              "${sched[@]}" -- "${args[@]}" >"$out/logs/oh_${m}_$r.log" 2>&1 ;;
      tdef) "${args[@]}" --torch_profiler default >"$out/logs/oh_${m}_$r.log" 2>&1 ;;
      tfull) "${args[@]}" --torch_profiler full >"$out/logs/oh_${m}_$r.log" 2>&1 ;;
    esac || { echo "    FAIL: overhead run $m round $r (log $out/logs/oh_${m}_$r.log)"; failed=1; }
  done
done
python3 - "$out/json" "$pairs" <<'PY' || failed=1
import json, statistics, sys
d, pairs = sys.argv[1], int(sys.argv[2])
def mean_ms(m, r):
    return json.load(open(f"{d}/timing_{m}_{r}.json"))["mean_ms"]
rows = []
for r in range(1, pairs + 1):
    off = mean_ms("off", r)
    est = json.load(open(f"{d}/oh_ours_{r}.json"))["profiler_cost"]["est_added_us_per_step"]
    rows.append({**{m: (mean_ms(m, r) - off) * 1e3 for m in ("ours", "tdef", "tfull")}, "off": off * 1e3, "est": est})
med = {k: statistics.median(x[k] for x in rows) for k in rows[0] if all(x[k] is not None for x in rows)}
print(f"  unprofiled step       {med['off']:9.1f} us (median of {pairs} rounds)")
for k, label in (("ours", "pd_run"), ("tdef", "torch.profiler default"), ("tfull", "torch.profiler shapes+mem")):
    per = " ".join(f"{x[k]:.1f}" for x in rows)
    print(f"  added, {label:26s} {med[k]:9.1f} us/step ({100 * med[k] / med['off']:.1f}%)   rounds: {per}")
ok = True
for k, label in (("tdef", "default"), ("tfull", "shapes+mem")):
    ratio = med["ours"] / med[k] if med[k] > 0 else float("inf")
    good = ratio <= 1 / 3
    ok &= good
    print(f"  ours / torch {label:11s} {ratio:6.3f}  ({'<=' if good else '>'} 1/3)")
if "est" in med:
    err = (med["est"] - med["ours"]) / med["ours"] if med["ours"] > 0 else float("inf")
    good = abs(err) <= 0.25
    ok &= good
    print(f"  profiler_cost estimate {med['est']:.1f} us/step vs measured {med['ours']:.1f} ({100 * err:+.0f}%, {'within' if good else 'outside'} 25%)")
else:
    print("  profiler_cost estimate: none (no calibration)")
print("  overhead targets:", "met" if ok else "NOT met")
PY
echo "== traces for ../shared/peers/run_all.sh: $(find "$out/traces" -name '*.pt.trace.json' | head -3 | tr '\n' ' ')"
echo "== inject_check: $([ "$failed" -eq 0 ] && echo ok || echo 'FAILED (logs in '"$out"'/logs)')"
exit "$failed"
