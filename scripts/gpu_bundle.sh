#!/usr/bin/env bash
# gpu_bundle.sh BUILD_DIR [BUNDLE_DIR]
#
# Copies the shared libraries that the executables under BUILD_DIR need (their ldd
# closure) into BUNDLE_DIR/lib, leaving out what every GPU host has anyway: the C
# library family and the CUDA libraries (driver, runtime, cuBLAS, CUPTI), which must come
# from the host's own CUDA install. Point LD_LIBRARY_PATH at BUNDLE_DIR/lib on a host
# that has the NVIDIA driver and CUDA runtime but not Criterion or cJSON.
set -euo pipefail
build=${1:?usage: gpu_bundle.sh BUILD_DIR [BUNDLE_DIR]}
bundle=${2:-.gpu_bundle}
[ -d "$build" ] || { echo "gpu_bundle: no build directory '$build'" >&2; exit 2; }
mkdir -p "$bundle/lib"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libgcc_s\.so|libstdc\+\+\.so|libresolv\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libcupti\.so|libnvidia|libnvToolsExt)'
added=0
while IFS= read -r exe; do
  while read -r name _ path _; do
    [ -n "${path:-}" ] && [ -f "$path" ] || continue
    if [[ "$name" =~ $skip ]]; then continue; fi
    if [ ! -e "$bundle/lib/$name" ]; then
      cp -L "$path" "$bundle/lib/$name"
      added=$((added + 1))
    fi
  done < <(ldd "$exe" 2>/dev/null | grep '=>' || true)
done < <(find "$build" -type f -perm -u+x ! -name '*.so*' ! -name '*.sh' -size +1k \
           -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
# the bundle as it now stands (a rebuild copies only what it lacks: "0 libraries" misread it)
count=$(find "$bundle/lib" -maxdepth 1 -type f | wc -l)
echo "gpu_bundle: $count libraries in $bundle/lib, $added of them new ($(du -sh "$bundle/lib" | cut -f1))"
