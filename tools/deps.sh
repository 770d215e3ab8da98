#!/usr/bin/env bash
# deps.sh - installs the Debian packages dfg needs that are missing (nothing else).
#   tools/deps.sh          build dependencies
#   tools/deps.sh --test   build and test dependencies (PyTorch for the golden tests; clang with
#                          its libFuzzer and OpenMP runtimes for the fuzz runs), Hugging Face
#                          transformers 4.40.2 from PyPI into .deps/hf-4.40.2 (tests/golden/hf_golden.py),
#                          and PEFT 0.11.1 with accelerate 0.30.1 into .deps/peft-0.11.1
#                          (tests/golden/peft_golden.py)
# Runs apt-get non-interactively (through sudo when not root). Prints what it installs.
set -euo pipefail

# OpenBLAS's OpenMP build shares one thread pool with dfg's kernels (see CMakeLists.txt); OpenMPI
# for data-parallel runs (mpirun -n W dfg run: libopenmpi-dev to build, openmpi-bin to launch)
build_pkgs=(cmake make gcc pkg-config libgraphviz-dev uthash-dev libcjson-dev libopenblas-openmp-dev libopenmpi-dev
            openmpi-bin)
# libFuzzer ships in libclang-rt-dev (compiler-rt of Debian's default clang), which clang only
# recommends; a clang build of the library needs clang's OpenMP (libomp-dev)
# python3-pip installs transformers below (Debian has no transformers package); python3-jinja2
# renders chat templates (tools/prepare_prompts.py, tests/golden/chat_template_golden.py)
test_pkgs=(python3 python3-numpy python3-torch python3-pip python3-jinja2 clang libclang-rt-dev libomp-dev)

want=("${build_pkgs[@]}")
if [ "${1:-}" = "--test" ]; then want+=("${test_pkgs[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all present (${want[*]})"
else
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
fi

# pip_site WHAT DIR CHECK PACKAGE...: installs the packages (PyPI, --no-deps) into DIR unless the
# Python code CHECK, run with DIR and $hf_dir as its arguments, passes already; it must pass after.
pip_site() {
  local what=$1 dir=$2 check=$3
  shift 3
  if /usr/bin/python3 -c "$check" "$dir" "$hf_dir" >/dev/null 2>&1; then
    echo "deps: $what present in $dir"
    return
  fi
  echo "deps: installing $what (PyPI, --no-deps) into $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  PIP_DISABLE_PIP_VERSION_CHECK=1 /usr/bin/python3 -m pip install --quiet --root-user-action=ignore --no-deps --no-warn-script-location \
    --target "$dir" "$@"
  /usr/bin/python3 -c "$check" "$dir" "$hf_dir"
  echo "deps: $what installed in $dir"
}

# Hugging Face transformers for tests/golden/hf_golden.py (ctest golden_hf): 4.40.2 is the newest
# release that imports with Debian's torch 1.13. --no-deps keeps pip away from Debian's torch and
# numpy; the packages it needs are named instead (tokenizers 0.19 is the one binary wheel; requests
# and yaml come with python3-torch). Installed into a directory of this checkout (gitignored), not
# into the system. DFG_HF_SITE names another directory (ctest golden_hf reads the same variable).
if [ "${1:-}" = "--test" ]; then
  hf_dir="${DFG_HF_SITE:-$(cd "$(dirname "$0")/.." && pwd)/.deps/hf-4.40.2}"
  pip_site "transformers 4.40.2" "$hf_dir" \
    "import sys; sys.path.insert(0, sys.argv[1]); import transformers, torch; assert transformers.__version__ == '4.40.2', transformers.__version__" \
    transformers==4.40.2 tokenizers==0.19.1 huggingface_hub==0.23.4 safetensors tqdm filelock packaging regex fsspec \
    typing_extensions
fi

# PEFT 0.11.1 and accelerate 0.30.1 for tests/golden/peft_golden.py (ctest golden_peft): pure Python,
# a pair that imports with transformers 4.40.2 and Debian's torch 1.13. --no-deps as above: what
# they import besides transformers' packages (psutil, yaml, numpy, torch) is Debian's, pulled in
# by python3-torch. A directory of their own next to transformers' (DFG_PEFT_SITE names another;
# ctest golden_peft reads the same variable), so that either can be reinstalled alone.
if [ "${1:-}" = "--test" ]; then
  peft_dir="${DFG_PEFT_SITE:-$(cd "$(dirname "$0")/.." && pwd)/.deps/peft-0.11.1}"
  pip_site "peft 0.11.1 and accelerate 0.30.1" "$peft_dir" \
    "import sys; sys.path[:0] = sys.argv[1:3]; import peft, accelerate, transformers, torch; assert (peft.__version__, accelerate.__version__) == ('0.11.1', '0.30.1'), (peft.__version__, accelerate.__version__)" \
    peft==0.11.1 accelerate==0.30.1
fi
