# shellcheck shell=bash
# shellcheck disable=SC2154  # build and root come from the sourcing script
# gpu_libpath.sh: sourced (". scripts/gpu_libpath.sh") from the repository root with
# $build (the build directory, absolute) and $root set, by the scripts that run the
# project's programs on a GPU host: gpu_acceptance.sh, gpu_ab.sh, pd_ab.sh, long_run.sh,
# gpu_sanitize.sh.
# Puts CUDA's own libraries of the host on LD_LIBRARY_PATH, then those of .gpu_bundle/lib
# (scripts/gpu_prepare.sh) that this host lacks, and only those: a bundled copy of a
# library the host has could clash with the host's ctest or driver. The links go into
# $build/.host_missing_libs, or $libdir_override when set (gpu_ab.sh, which may run while
# the acceptance tests load from the former).
# With $libpath_probe set (a program of the build, or an array of several), nothing is
# done when they already find all their libraries: the scripts that may run on a GPU host
# or beside the toolchain (make_fixtures.sh, scenario_truth.sh, ab_record.sh, gpu_ab.sh,
# host_probe.sh) source it that way. The check reads ldd's whole output: `ldd | grep -q`
# under pipefail reads as "nothing missing" whenever grep's early exit kills ldd with
# SIGPIPE (gpu_ab.sh on a GPU host, three programs: exit 2 on a missing libdw).
if [ -n "${libpath_probe:-}" ] && [ -z "$(ldd "${libpath_probe[@]}" 2>/dev/null | grep 'not found')" ]; then
  return 0
fi
# Its working variables are the function's locals: a sourcing script's own (pd_ab.sh's
# $name, the program's name in every run's metrics JSON) stay as they were.
pd_libpath_setup() {
  local d lib lib_name host_libs ldconfig_bin missing_dir nmiss=0
  local -a dirs=()
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/extras/CUPTI/lib64; do
    [ -d "$d" ] && dirs+=("$d")
  done
  if [ -d .gpu_bundle/lib ]; then
    ldconfig_bin=$(command -v ldconfig || echo /sbin/ldconfig)
    host_libs=$("$ldconfig_bin" -p 2>/dev/null || true)
    missing_dir=${libdir_override:-$build/.host_missing_libs}
    rm -rf "$missing_dir" && mkdir -p "$missing_dir"
    for lib in .gpu_bundle/lib/*; do
      [ -f "$lib" ] || continue
      lib_name=$(basename "$lib")
      if [ -z "$host_libs" ] || ! grep -q "^[[:space:]]$lib_name " <<<"$host_libs"; then
        ln -s "$root/$lib" "$missing_dir/$lib_name"
        nmiss=$((nmiss + 1))
      fi
    done
    echo "$(basename "$0" .sh): $nmiss bundled libraries this host lacks: $(ls "$missing_dir" | tr '\n' ' ')"
    dirs=("$missing_dir" "${dirs[@]}")
  fi
  [ "${#dirs[@]}" -gt 0 ] || return 0
  LD_LIBRARY_PATH=$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
}
pd_libpath_setup
unset -f pd_libpath_setup
