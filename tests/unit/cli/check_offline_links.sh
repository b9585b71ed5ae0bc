#!/bin/sh
# check_offline_links.sh CAPTURE_ARCHIVE PROGRAM...: the offline programs (profile_analyze,
# profile_compare) link the model layer only: no libcupti, libdw, CUDA runtime or driver,
# NVTX or cuBLAS among their shared libraries, and none of the capture layer's symbols
# (those libpd_capture.a defines), CUDA's, CUPTI's or libdw's in them. Exits 1 naming what
# a program carries (the CMake test on profiler_demo, which must carry them, proves the
# check can fail).
set -eu
[ $# -ge 2 ] || { echo "usage: check_offline_links.sh CAPTURE_ARCHIVE PROGRAM..." >&2; exit 2; }
capture=$1
shift
syms=$(mktemp)
trap 'rm -f "$syms"' EXIT
nm -g --defined-only "$capture" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$syms"
[ -s "$syms" ] || { echo "no symbols read from $capture" >&2; exit 2; }
fail=0
for prog in "$@"; do
  name=$(basename "$prog")
  libs=$(ldd "$prog") || { echo "$name: ldd failed" >&2; exit 2; }
  for lib in libcupti libdw libelf libcudart libcuda.so libnvToolsExt libcublas; do
    if printf '%s\n' "$libs" | grep -q "$lib"; then
      echo "$name: needs $lib"
      fail=1
    fi
  done
  found=$(nm "$prog" | awk 'NF == 3 && $2 ~ /^[TDBR]$/ { print $3 }' | sort -u | comm -12 - "$syms")
  if [ -n "$found" ]; then
    echo "$name: carries capture-layer symbols: $(echo "$found" | head -5 | tr '\n' ' ')"
    fail=1
  fi
  if nm "$prog" | awk '{ print $NF }' | grep -Eq '^(cuda[A-Z]|cupti[A-Z]|dwfl_|dwarf_)'; then
    echo "$name: carries CUDA, CUPTI or libdw symbols"
    fail=1
  fi
done
[ "$fail" -ne 0 ] || echo "model layer only: $*"
exit "$fail"
