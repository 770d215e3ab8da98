#!/usr/bin/env bash
# deps.sh - installs the Debian packages dfg needs that are missing (nothing else).
#   tools/deps.sh          build dependencies
#   tools/deps.sh --test   build and test dependencies (PyTorch for the golden tests; clang with
#                          its libFuzzer and OpenMP runtimes for the fuzz runs)
# Runs apt-get non-interactively (through sudo when not root). Prints what it installs.
set -euo pipefail

# OpenBLAS's OpenMP build shares one thread pool with dfg's kernels (see CMakeLists.txt)
build_pkgs=(cmake make gcc pkg-config libgraphviz-dev uthash-dev libcjson-dev libopenblas-openmp-dev)
# libFuzzer ships in libclang-rt-dev (compiler-rt of Debian's default clang), which clang only
# recommends; a clang build of the library needs clang's OpenMP (libomp-dev)
test_pkgs=(python3 python3-numpy python3-torch clang libclang-rt-dev libomp-dev)

want=("${build_pkgs[@]}")
if [ "${1:-}" = "--test" ]; then want+=("${test_pkgs[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all present (${want[*]})"
  exit 0
fi

if ! command -v apt-get >/dev/null; then
  echo "deps: missing ${missing[*]}, and apt-get is not available: install them with your package manager" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "deps: missing ${missing[*]}; run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
