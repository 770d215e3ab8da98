# shellcheck shell=bash disable=SC2034
# tools/gpu/common.sh - what tools/gpu-check.sh and tools/gpu-check-quick.sh share (sourced, bash):
# the verdict lines, finding the GPU (step a), the build (step b) and the copy-bandwidth probe.
# The caller sets ROOT, BUILD, REUSE, LOGS (a directory) and DETAILS (a file) before using them;
# ROWS_TSV, when set, also gets each verdict as 'step<TAB>verdict<TAB>text<TAB>took<TAB>estimate'
# (STEP_T0: the step's start in seconds, STEP_EST: its estimate).
ROWS=()
n_fail=0 n_skip=0

# verdict STEP PASS|FAIL|SKIP TEXT [LOG]: prints the line, records it, and for a FAIL the log's tail
verdict() {
  local step=$1 v=$2 text=$3 log=${4:-} took=""
  printf '%-4s  %s: %s\n' "$v" "$step" "$text"
  ROWS+=("| $step | **$v** | ${text//|/\\|} |")
  case $v in FAIL) n_fail=$((n_fail + 1)) ;; SKIP) n_skip=$((n_skip + 1)) ;; esac
  if [ -n "${ROWS_TSV:-}" ]; then
    [ -n "${STEP_T0:-}" ] && took=$(( $(date +%s) - STEP_T0 ))
    printf '%s\t%s\t%s\t%s\t%s\n' "$step" "$v" "${text//$'\t'/ }" "$took" "${STEP_EST:-}" >>"$ROWS_TSV"
  fi
  if [ "$v" = FAIL ] && [ -n "$log" ] && [ -s "$log" ]; then
    echo "      (log: $log; its last lines:)"
    tail -15 "$log" | sed 's/^/      | /'
    { echo "### $step: FAIL, the last 60 lines of $(basename "$log")"; echo; echo '```'; tail -60 "$log"; echo '```'; echo; } >>"$DETAILS"
  fi
}
detail() { printf '%s\n' "$@" >>"$DETAILS"; }
# sub_fail WHAT TEXT LOG: one failed part of a step (the step's own verdict counts it)
sub_fail() {
  echo "FAIL    $1: $2"
  echo "      (log: $3; its last lines:)"
  tail -15 "$3" | sed 's/^/      | /'
  { echo "### $1: FAIL, the last 60 lines of $(basename "$3")"; echo; echo '```'; tail -60 "$3"; echo '```'; echo; } >>"$DETAILS"
}
header() { echo; echo "==> $1"; }

# gpu_detect: step a. Sets GPU_NAME DRIVER GPU_MIB GPU_CAP CUDA_DRIVER n_gpus ARCH_NOTE; prints why
# and returns 2 when there is no usable GPU (nothing is recorded then).
gpu_detect() {
  local smi rc
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: REFUSED: nvidia-smi is not installed, so this machine has no NVIDIA driver and no usable GPU." >&2
    echo "gpu-check: it checks dfg on real hardware; without a GPU use tools/test.sh and 'dfg run P.dfg --emulate-gpu'" \
         "(tools/gpu-check.sh --quick --rehearse rehearses the quick check). Nothing was run." >&2
    return 2
  fi
  smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader,nounits 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q , <<<"$smi"; then # older drivers know no compute_cap
    smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits 2>&1)
    rc=$?
  fi
  if [ $rc -ne 0 ] || ! grep -q , <<<"$smi"; then
    echo "gpu-check: REFUSED: nvidia-smi lists no GPU (exit $rc): $(head -1 <<<"$smi")" >&2
    echo "gpu-check: it checks dfg on real hardware; nothing was run." >&2
    return 2
  fi
  n_gpus=$(grep -c , <<<"$smi")
  # (not CC: that is the C compiler CMake reads from the environment)
  IFS=, read -r GPU_NAME DRIVER GPU_MIB GPU_CAP <<<"$(head -1 <<<"$smi")"
  GPU_NAME=$(xargs <<<"$GPU_NAME") DRIVER=$(xargs <<<"$DRIVER") GPU_MIB=$(xargs <<<"$GPU_MIB") GPU_CAP=$(xargs <<<"${GPU_CAP:-}")
  CUDA_DRIVER=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
  if [[ $GPU_CAP =~ ^([0-9]+)\.([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -lt 8 ]; then
    echo "gpu-check: REFUSED: $GPU_NAME has compute capability $GPU_CAP; dfg's kernels need 8.0 or newer (bf16, built for sm_80 and sm_90). Nothing was run." >&2
    return 2
  fi
  case $GPU_CAP in
    8.*) ARCH_NOTE="runs the sm_80 kernels" ;;
    9.0) ARCH_NOTE="runs the sm_90 kernels" ;;
    "" | "[N/A]") ARCH_NOTE="compute capability not reported by this driver" ;;
    *) ARCH_NOTE="has no SASS in the build (sm_80, sm_90): the driver JIT-compiles the compute_90 PTX" ;;
  esac
  return 0
}

# find_nvcc: sets NVCC (empty when none) and NVCC_VERSION
find_nvcc() {
  local c
  NVCC=""
  for c in "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc "${CUDA_HOME:-/nonexistent}/bin/nvcc"; do
    if [ -n "$c" ] && [ -x "$c" ]; then NVCC=$c; break; fi
  done
  NVCC_VERSION=$([ -n "$NVCC" ] && "$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
}

# gpu_build [TARGET...]: step b's build in $BUILD (removed first) with CUDA, of the targets named
# (none: everything); --reuse-build (REUSE=1) takes $BUILD as it is. Sets BUILD_OK=1 and ARCHS.
gpu_build() {
  local cmver cmaj cmin cfg_rc warnings what=${*:-everything} targets=()
  local t; for t in "$@"; do targets+=(--target "$t"); done
  find_nvcc
  ARCHS="" BUILD_OK=0
  if [ "$REUSE" = 1 ]; then
    if [ -x "$BUILD/dfg" ] && [ -d "$BUILD/CMakeFiles/dfg_cuda_kernels.dir" ]; then
      verdict "b. build" SKIP "--reuse-build: $BUILD as it is (not rebuilt, deps not checked)"
      BUILD_OK=1
    else
      verdict "b. build" FAIL "--reuse-build, but $BUILD has no dfg built with CUDA (no $BUILD/dfg or CMakeFiles/dfg_cuda_kernels.dir)"
    fi
    return
  fi
  if [ -z "$NVCC" ]; then
    verdict "b. build" FAIL "no nvcc (PATH, /usr/local/cuda/bin, \$CUDA_HOME/bin): install the CUDA toolkit (nvcc, cudart, cuBLASLt; https://developer.nvidia.com/cuda-downloads); without it dfg builds with no GPU backend"
    return
  fi
  if [ -e "$BUILD" ] && [ ! -f "$BUILD/CMakeCache.txt" ]; then
    verdict "b. build" FAIL "$BUILD exists and is not a CMake build directory: not removing it (pass --build-dir)"
    return
  fi
  rm -rf "$BUILD"
  cmver=$(cmake --version | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  read -r cmaj cmin <<<"$cmver"
  if [ "${cmaj:-0}" -gt 3 ] || { [ "${cmaj:-0}" -eq 3 ] && [ "${cmin:-0}" -ge 24 ]; }; then ARCHS=native; else ARCHS="80;90"; fi
  _gpu_configure() {
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_COMPILER="$NVCC" \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DCMAKE_CUDA_FLAGS=-lineinfo -DDFG_WERROR=OFF >"$LOGS/configure.log" 2>&1
  }
  if ! _gpu_configure && [ "$ARCHS" = native ]; then
    cp "$LOGS/configure.log" "$LOGS/configure-native.log"
    echo "      CMAKE_CUDA_ARCHITECTURES=native failed (see configure-native.log); trying 80;90"
    rm -rf "$BUILD"
    ARCHS="80;90"
    _gpu_configure
  fi
  cfg_rc=$?
  if [ $cfg_rc -ne 0 ]; then
    verdict "b. build" FAIL "cmake configure failed" "$LOGS/configure.log"
  elif ! grep -qE "dfg: CUDA [0-9.]+ found; the CUDA kernels build" "$LOGS/configure.log"; then
    verdict "b. build" FAIL "CMake did not enable CUDA with $NVCC: this build would have no GPU backend" "$LOGS/configure.log"
  elif ! cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}" >"$LOGS/build.log" 2>&1; then
    verdict "b. build" FAIL "the build ($what) failed" "$LOGS/build.log"
  elif [ ! -x "$BUILD/dfg" ]; then
    verdict "b. build" FAIL "the build has no $BUILD/dfg" "$LOGS/build.log"
  else
    warnings=$(grep -c "warning" "$LOGS/build.log")
    verdict "b. build" PASS "$what: nvcc $NVCC_VERSION, CMAKE_CUDA_ARCHITECTURES=$ARCHS (the kernels: sm_80 and sm_90 + PTX; this GPU $ARCH_NOTE), $warnings line(s) with 'warning' in the build log"
    BUILD_OK=1
    if [ "$warnings" -gt 0 ]; then
      { echo "### b. build warnings (the first 40)"; echo; echo '```'; grep -m 40 "warning" "$LOGS/build.log"; echo '```'; echo; } >>"$DETAILS"
    fi
  fi
}

# gpu_copy_bandwidth: prints the device-to-device copy bandwidth in GB/s (read + write, a cudaMemcpy
# of 1 GiB, best of 10), built here with nvcc ($NVCC or PATH); returns 1 when it cannot
gpu_copy_bandwidth() {
  cat >"$LOGS/bw.cu" <<'CU'
#include <cstdio>
#include <cuda_runtime.h>
int main() { /* device-to-device copy bandwidth (read + write) of 1 GiB, best of 10 */
    size_t n = (size_t)1 << 30; void *a, *b; cudaEvent_t s, e; float ms, best = 1e30f;
    if (cudaMalloc(&a, n) || cudaMalloc(&b, n)) return 1;
    cudaEventCreate(&s); cudaEventCreate(&e);
    for (int i = 0; i < 11; i++) {
        cudaEventRecord(s); cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice); cudaEventRecord(e); cudaEventSynchronize(e);
        cudaEventElapsedTime(&ms, s, e); if (i && ms < best) best = ms;
    }
    printf("%.1f\n", 2.0 * n / (best * 1e-3) * 1e-9); return 0;
}
CU
  "${NVCC:-nvcc}" -O2 -o "$LOGS/bw" "$LOGS/bw.cu" >"$LOGS/bw.log" 2>&1 && "$LOGS/bw" 2>>"$LOGS/bw.log"
}
