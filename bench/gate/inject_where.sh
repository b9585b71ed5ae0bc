#!/usr/bin/env bash
# inject_where.sh BUILD_DIR OUT_DIR [PROCESSES]: where the injected busy time should sit, on
# a GPU host. For clean at 0.10 (200 steps of each kind) and tiny_ops at 0.05 (64), runs
# PROCESSES (default 3) fresh profiler_demo processes each way, alternating injected and
# plain steps (--inject_alternate): with the busy time before the step's launches (the
# default) and spread over its op ranges (--inject_spread). Prints, per process and phase
# (the untraced warmup steps the A/B judges, the profiled ones), p50(injected) /
# p50(plain), which should read 1 + F, and the surplus loop's last busy time and measured
# surplus (an injected step's rest minus the plain step: below 0 when the busy time makes
# the rest of the step faster). Runs in rotating order. Exit: 0; 1 a run failed; 2 usage.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage="usage: inject_where.sh BUILD_DIR OUT_DIR [PROCESSES]"
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "inject_where: $usage" >&2; exit 2; }
build=$1 out=$2 procs=${3:-3}
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
pd_whole_number PROCESSES "$procs" || exit 2
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "inject_where: no $demo (build first)" >&2; exit 2; }
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
# shellcheck disable=SC2034  # read by gpu_libpath.sh
root=$PWD libpath_probe=$build/src/cli/profiler_demo/profiler_demo
# shellcheck source=scripts/gpu_libpath.sh
. scripts/gpu_libpath.sh
command -v python3 >/dev/null || { echo "inject_where: needs python3" >&2; exit 2; }
mkdir -p "$out" || { echo "inject_where: cannot create $out" >&2; exit 2; }
args=()
pd_args_read baselines/acceptance.args args || exit 2

for ((p = 1; p <= procs; p++)); do
  for k in 0 1 2 3; do
    case $(((k + p) % 4)) in
      0) scen=clean f=0.10 n=200 mode=front ;;
      1) scen=clean f=0.10 n=200 mode=spread ;;
      2) scen=tiny_ops f=0.05 n=64 mode=front ;;
      3) scen=tiny_ops f=0.05 n=64 mode=spread ;;
    esac
    extra=()
    [ "$mode" = spread ] && extra=(--inject_spread)
    base=$out/$scen.$mode.$p
    "$demo" --scenario "$scen" "${args[@]}" --inject_slowdown "$f" --inject_alternate "${extra[@]}" \
      --profile_steps "$n" --warmup_steps "$n" --trace_dir "$out/traces" --output_json "$base.json" >"$base.log" 2>&1 ||
      { echo "inject_where: $scen $mode run $p failed:" >&2; tail -n 5 "$base.log" >&2; exit 1; }
    rm -rf "$out/traces"
  done
done

python3 - "$out" "$procs" <<'PY'
import json, re, statistics, sys
out, procs = sys.argv[1], int(sys.argv[2])
def ratio(v):
    inj, plain = v[1::2], v[0::2]
    return statistics.median(inj) / statistics.median(plain), statistics.median(plain) * 1e6
print("| scenario, F | where | process | warmup: ratio (plain p50 us), busy / surplus us | profiled: ratio (plain p50 us), busy / surplus us |")
print("|---|---|---|---|---|")
for scen, f in (("clean", 0.10), ("tiny_ops", 0.05)):
    for mode in ("front", "spread"):
        for p in range(1, procs + 1):
            base = f"{out}/{scen}.{mode}.{p}"
            d = json.load(open(base + ".json"))
            log = open(base + ".log").read()
            lines = {}
            for m in re.finditer(r"inject_slowdown [0-9.]+( in the warmup)?: last busy time (-?[0-9.]+) us, "
                                 r"an injected step's surplus over it (-?[0-9.]+) us", log):
                lines["warm" if m.group(1) else "prof"] = f"{float(m.group(2)):.1f} / {float(m.group(3)):.1f}"
            wr, wp = ratio(d["warmup_step_times_s"])
            pr, pp = ratio(d["step_times_s"])
            print(f"| {scen} {f} | {mode} | {p} | {wr:.4f} ({wp:.1f}), {lines.get('warm', '-')} "
                  f"| {pr:.4f} ({pp:.1f}), {lines.get('prof', '-')} |")
PY
