#!/usr/bin/env bash
# gpu_sanitize.sh [BUILD_DIR]: every scenario under NVIDIA compute-sanitizer on a GPU host.
#
# Runs profiler_demo --no_profile (CUPTI and the sanitizer cannot both attach to one
# process) for a few small steps of each configuration: the five scenarios, clean with
# --amp, tiny_ops fused and graph. Tools (PD_SANITIZE_TOOLS, default "memcheck
# racecheck"; initcheck and synccheck work too):
#   memcheck  --leak-check full: any error fails;
#   racecheck (shared-memory hazards): a hazard in one of the project's kernels (k_*,
#             pd_*) fails; hazards inside cuBLAS's own kernels are counted and listed, not
#             failed (the project cannot change them);
#   others    any error fails.
# Prints a table: configuration, tool, exit, errors, hazards (ours / library), seconds.
# Logs go to $PD_SANITIZE_OUT (default BUILD_DIR/sanitize). PD_SANITIZE_TIMEOUT (default
# 600) bounds each run in seconds; COMPUTE_SANITIZER names the binary (default
# compute-sanitizer on PATH, then /usr/local/cuda/bin).
# Exit: 0 clean; 1 a failure above; 2 bad setup.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
build=${1:-build-gpu}
case "$build" in /*) ;; *) build=$root/$build ;; esac
demo=$build/src/cli/profiler_demo/profiler_demo
[ -x "$demo" ] || { echo "gpu_sanitize.sh: no built profiler_demo in '$build'" >&2; exit 2; }
san=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$san" ] || { echo "gpu_sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
. scripts/gpu_libpath.sh
read -r -a tools <<<"${PD_SANITIZE_TOOLS:-memcheck racecheck}"
limit=${PD_SANITIZE_TIMEOUT:-600}
out=${PD_SANITIZE_OUT:-$build/sanitize}
mkdir -p "$out" || exit 2
configs=(
  "clean|--scenario clean"
  "clean_amp|--scenario clean --amp"
  "dataloader|--scenario dataloader"
  "sync|--scenario sync"
  "tiny_ops|--scenario tiny_ops"
  "tiny_fused|--scenario tiny_ops --tiny_ops_mode fused"
  "tiny_graph|--scenario tiny_ops --tiny_ops_mode graph"
  "memory_churn|--scenario memory_churn"
)
small=(--no_profile --quiet --batch_size 16 --warmup_steps 1 --profile_steps 2)
"$san" --version | head -2 | tail -1
fail=0
printf '%-13s %-10s %5s %7s %13s %6s\n' config tool exit errors "hazards o/lib" secs
for c in "${configs[@]}"; do
  name=${c%%|*}
  read -r -a flags <<<"${c#*|}"
  for tool in "${tools[@]}"; do
    log=$out/$name.$tool.log
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    t0=$SECONDS
    timeout "$limit" "$san" --tool "$tool" "${extra[@]}" --error-exitcode 9 --print-limit 100 \
      "$demo" "${flags[@]}" "${small[@]}" --trace_dir "$out/t" --output_json "$out/$name.json" >"$log" 2>&1
    rc=$?
    secs=$((SECONDS - t0))
    # "ERROR SUMMARY: N errors" (memcheck, initcheck, synccheck) or "RACECHECK SUMMARY: N
    # hazards displayed (E errors, W warnings)"
    errors=$(grep -Eo '(ERROR SUMMARY: [0-9]+|\(([0-9]+) errors)' "$log" | grep -Eo '[0-9]+' | tail -1)
    errors=${errors:-?}
    ours=0 lib=0
    if [ "$tool" = racecheck ]; then
      # each hazard report names the kernel it happened in
      # ("at k_adamw(float *, ...)+0x1a0", "at void k_im2col_nchw<float>(...)+0x..")
      ours=$(grep -E 'Race reported|Hazard' -A3 "$log" | grep -cE '(^|[^A-Za-z0-9_])(k|pd)_[a-z0-9_]+[<(+]' || true)
      lib=$(grep -cE 'Race reported|Hazard' "$log" || true)
      lib=$((lib > ours ? lib - ours : 0))
    fi
    status=ok
    if [ "$rc" -eq 124 ]; then
      status="timed out after $limit s"; fail=1
    elif [ "$tool" = racecheck ]; then
      [ "$ours" -eq 0 ] || { status="hazard in the project's kernels"; fail=1; }
      # exit 9 with hazards only in library kernels is expected; anything else is not
      { [ "$rc" -eq 0 ] || [ "$rc" -eq 9 ]; } || { status="exit $rc"; fail=1; }
    elif [ "$rc" -ne 0 ]; then
      status="exit $rc"; fail=1
    fi
    printf '%-13s %-10s %5s %7s %6s/%-6s %6s %s\n' "$name" "$tool" "$rc" "$errors" "$ours" "$lib" "$secs" "$status"
    [ "$status" = ok ] || tail -20 "$log" | sed 's/^/    /'
    if [ "$tool" = racecheck ] && [ "$lib" -gt 0 ]; then
      grep -oE 'Race reported between [A-Za-z]+ access at [^+ ]+' "$log" | awk '{print $NF}' | sort | uniq -c |
        sed 's/^/    library kernel with hazards: /'
    fi
  done
done
if [ "$fail" -eq 0 ]; then echo "gpu_sanitize.sh: clean (logs in $out)"; else echo "gpu_sanitize.sh: FAILED (logs in $out)"; fi
exit "$fail"
