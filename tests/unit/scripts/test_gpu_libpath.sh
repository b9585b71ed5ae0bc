#!/usr/bin/env bash
# test_gpu_libpath.sh: scripts/gpu_libpath.sh's probe ($libpath_probe: nothing done when the
# programs find all their libraries), under `set -o pipefail` as the GPU scripts source it,
# with a fake ldd on PATH:
#   - a program with a missing library, reported first and followed by a long listing (what
#     makes an early-exiting reader kill ldd with SIGPIPE): the path is set up, and a
#     missing bundled library is linked;
#   - an array of programs, the missing one last;
#   - nothing missing: nothing is done (LD_LIBRARY_PATH unchanged);
#   - the sourcing script's own variables keep their values (pd_ab.sh's $name, once
#     overwritten by the helper's loop over the bundle: every run's metrics JSON was named
#     after the last bundled library).
# Prints each failure; exits 1 on any.
set -uo pipefail
src=${PD_SOURCE_DIR:?PD_SOURCE_DIR is not set (run through ctest)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

mkdir -p "$tmp/bin" "$tmp/repo/.gpu_bundle/lib" "$tmp/build"
cp "$src/scripts/gpu_libpath.sh" "$tmp/repo/"
: >"$tmp/repo/.gpu_bundle/lib/libpd_fake_missing.so.1"
# fake ldd: a program named *missing* lacks libpd_fake_missing.so.1 (said first), then
# 20000 lines of listing; any other program finds everything
cat >"$tmp/bin/ldd" <<'FAKE'
#!/usr/bin/env bash
for p in "$@"; do
  echo "$p:"
  case "$p" in
    *missing*) echo "	libpd_fake_missing.so.1 => not found" ;;
  esac
  for i in $(seq 1 20000); do echo "	libfiller$i.so => /lib/libfiller$i.so (0x0)"; done
done
FAKE
chmod +x "$tmp/bin/ldd"
printf '#!/bin/sh\n' >"$tmp/bin/ldconfig" # no library of the host: every bundled one is missing
chmod +x "$tmp/bin/ldconfig"

# probe PROGRAMS...: sources gpu_libpath.sh in a subshell as the scripts do; prints the
# LD_LIBRARY_PATH it leaves
# shellcheck disable=SC2034  # the helper reads them; the test's own, through ${!v}
probe() {
  (
    set -o pipefail
    cd "$tmp/repo" || exit 1
    PATH="$tmp/bin:$PATH"
    LD_LIBRARY_PATH=/before
    root=$tmp/repo build=$tmp/build
    libpath_probe=("$@")
    name=mine lib=mine d=mine nmiss=mine host_libs=mine missing_dir=mine libpath=mine
    # shellcheck source=scripts/gpu_libpath.sh
    . ./gpu_libpath.sh >/dev/null
    for v in name lib d nmiss host_libs missing_dir libpath; do
      [ "${!v}" = mine ] || echo "CLOBBERED $v=${!v}"
    done
    echo "$LD_LIBRARY_PATH"
  )
}

got=$(probe /x/prog_missing)
case "$got" in "$tmp/build/.host_missing_libs"*:/before) ;; *) fail "one program with a missing library: LD_LIBRARY_PATH [$got]" ;; esac
[ -L "$tmp/build/.host_missing_libs/libpd_fake_missing.so.1" ] || fail "the missing bundled library was not linked"
got=$(probe /x/prog_a /x/prog_b /x/prog_missing)
case "$got" in "$tmp/build/.host_missing_libs"*:/before) ;; *) fail "three programs, the last missing one: LD_LIBRARY_PATH [$got]" ;; esac
got=$(probe /x/prog_a /x/prog_b)
[ "$got" = /before ] || fail "nothing missing: LD_LIBRARY_PATH changed to [$got]"
got=$(probe /x/prog_missing)
case "$got" in *CLOBBERED*) fail "the sourcing script's variables changed: $(grep CLOBBERED <<<"$got" | tr '\n' ' ')" ;; esac

[ "$fails" -eq 0 ] && echo "test_gpu_libpath: all passed"
[ "$fails" -eq 0 ]
