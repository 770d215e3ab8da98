// bug_kernels.cu - kernels with planted bugs (and their correct twins) that the SIMT emulator must
// report, naming kernel, block and thread; plus launch-limit probes.
//
// They are real CUDA too (nvcc builds them): on a GPU most of these bugs would hang or give
// undefined results rather than an error, which is why they are caught here.
#include "dfg_simt.h"

#include "simt_test.h"

// thread `who` of block 2 returns before the barrier the others wait at
__global__ void dfg_simt_test_early_return_kernel(float *out /* (gridDim.x, blockDim.x) */, int who) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == 2 && (int)threadIdx.x == who) return;
    out[i] = 1.0f;
    __syncthreads();
    out[i] += 1.0f;
}

cudaError_t dfg_simt_test_early_return(float *out /* (3, 64) */, int who) {
    return DFG_LAUNCH(dfg_simt_test_early_return_kernel, 3, 64, 0, 0, out, who);
}

// 40 threads: the second warp has lanes 0..7, but the mask names all 32
__global__ void dfg_simt_test_missing_lane_kernel(float *out /* (blockDim.x) */) {
    float v = (float)threadIdx.x;
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

cudaError_t dfg_simt_test_missing_lane(float *out /* (40) */) {
    return DFG_LAUNCH(dfg_simt_test_missing_lane_kernel, 1, 40, 0, 0, out);
}

// the same exchange with each warp's mask limited to its existing lanes
__global__ void dfg_simt_test_partial_warp_ok_kernel(float *out /* (blockDim.x) */) {
    const int warp = threadIdx.x >> 5;
    const int in_warp = min(32, (int)blockDim.x - warp * 32);
    const unsigned mask = in_warp == 32 ? 0xffffffffu : (1u << in_warp) - 1;
    float v = (float)threadIdx.x;
    v += __shfl_xor_sync(mask, v, 1);
    out[threadIdx.x] = v;
}

cudaError_t dfg_simt_test_partial_warp_ok(float *out /* (40) */) {
    return DFG_LAUNCH(dfg_simt_test_partial_warp_ok_kernel, 1, 40, 0, 0, out);
}

// a warp sum whose mask drops lane 31, which still takes part
__global__ void dfg_simt_test_dropped_lane_kernel(float *out /* (32) */) {
    float v = (float)threadIdx.x;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0x7fffffffu, v, o);
    out[threadIdx.x] = v;
}

cudaError_t dfg_simt_test_dropped_lane(float *out /* (32) */) {
    return DFG_LAUNCH(dfg_simt_test_dropped_lane_kernel, 1, 32, 0, 0, out);
}

// both branches have "a" barrier, but not the same one
__global__ void dfg_simt_test_divergent_barriers_kernel(float *out /* (blockDim.x) */) {
    if (threadIdx.x < 16) {
        out[threadIdx.x] = 1.0f;
        __syncthreads();
    } else {
        out[threadIdx.x] = 2.0f;
        __syncthreads();
    }
}

cudaError_t dfg_simt_test_divergent_barriers(float *out /* (64) */) {
    return DFG_LAUNCH(dfg_simt_test_divergent_barriers_kernel, 1, 64, 0, 0, out);
}

// lanes 0..30 shuffle with lane 31, which waits at a block barrier instead
__global__ void dfg_simt_test_warp_vs_barrier_kernel(float *out /* (32) */) {
    float v = (float)threadIdx.x;
    if (threadIdx.x == 31)
        __syncthreads();
    else
        v = __shfl_sync(0xffffffffu, v, 0);
    out[threadIdx.x] = v;
}

cudaError_t dfg_simt_test_warp_vs_barrier(float *out /* (32) */) {
    return DFG_LAUNCH(dfg_simt_test_warp_vs_barrier_kernel, 1, 32, 0, 0, out);
}

// lane 31 returns while the others __syncwarp() with the full mask
__global__ void dfg_simt_test_exit_in_warp_kernel(float *out /* (32) */) {
    if (threadIdx.x == 31) return;
    out[threadIdx.x] = 1.0f;
    __syncwarp();
}

cudaError_t dfg_simt_test_exit_in_warp(float *out /* (32) */) {
    return DFG_LAUNCH(dfg_simt_test_exit_in_warp_kernel, 1, 32, 0, 0, out);
}

__global__ void dfg_simt_test_trap_kernel(float *out /* (gridDim.x, blockDim.x) */) {
    if (blockIdx.x == 1 && threadIdx.x == 7) __trap();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}

cudaError_t dfg_simt_test_trap(float *out /* (64) */) {
    return DFG_LAUNCH(dfg_simt_test_trap_kernel, 2, 32, 0, 0, out);
}

// touches the last byte of the dynamic shared memory it was given; out[1] is its first byte
// before any write (undefined on a GPU; the emulator's poison)
__global__ void dfg_simt_test_smem_kernel(int *out /* (2) */, int smem_bytes) {
    DFG_SHARED_DYNAMIC(unsigned char, bytes);
    if (threadIdx.x == 0) {
        out[1] = bytes[0];
        bytes[smem_bytes - 1] = (unsigned char)(smem_bytes - 1);
        out[0] = bytes[smem_bytes - 1];
    }
}

cudaError_t dfg_simt_test_smem(int *out /* (2) */, int threads, int smem_bytes) {
    return DFG_LAUNCH(dfg_simt_test_smem_kernel, 1, threads, smem_bytes, 0, out, smem_bytes);
}

cudaError_t dfg_simt_test_smem_optin(int smem_bytes) {
    return DFG_SET_MAX_DYNAMIC_SMEM(dfg_simt_test_smem_kernel, smem_bytes);
}

__global__ void dfg_simt_test_config_kernel(int *out /* (1) */) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = 1;
}

cudaError_t dfg_simt_test_config(int *out /* (1) */, dim3 grid, dim3 block) {
    return DFG_LAUNCH(dfg_simt_test_config_kernel, grid, block, 0, 0, out);
}

// a grid-stride copy whose tail bound is off by one when off_by_one is set
__global__ void dfg_simt_test_tail_copy_kernel(const float *__restrict__ x /* (n) */, float *__restrict__ y /* (n) */,
                                               int n, int off_by_one) {
    const int bound = off_by_one ? n + 1 : n;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < bound; i += gridDim.x * blockDim.x) y[i] = x[i];
}

cudaError_t dfg_simt_test_tail_copy(const float *x /* (n) */, float *y /* (n) */, int n, int off_by_one) {
    return DFG_LAUNCH(dfg_simt_test_tail_copy_kernel, 3, 128, 0, 0, x, y, n, off_by_one);
}

// each thread reads its left neighbour's slot with the barrier between write and read missing:
// in order (seed 0) every neighbour has written first, so only a fuzzed order shows the race
__global__ void dfg_simt_test_neighbour_race_kernel(const float *__restrict__ x /* (n) */,
                                                    float *__restrict__ y /* (n) */) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    s[t] = x[blockIdx.x * blockDim.x + t];
    y[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : 0.0f; // a __syncthreads() belongs before this
}

cudaError_t dfg_simt_test_neighbour_race(const float *x /* (n) */, float *y /* (n) */, int n) {
    return DFG_LAUNCH(dfg_simt_test_neighbour_race_kernel, n / 256, 256, 0, 0, x, y);
}

// order[0, i], order[1, i]: the tickets thread i of its block drew with two atomics in a row
__global__ void dfg_simt_test_order_kernel(int *order /* (2, gridDim.x, blockDim.x) */, int *counter /* (gridDim.x) */) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, n = gridDim.x * blockDim.x;
    order[i] = atomicAdd(&counter[blockIdx.x], 1);
    order[n + i] = atomicAdd(&counter[blockIdx.x], 1);
}

cudaError_t dfg_simt_test_order(int *order /* (2, blocks, threads) */, int *counter /* (blocks) */, int blocks,
                                int threads) {
    return DFG_LAUNCH(dfg_simt_test_order_kernel, blocks, threads, 0, 0, order, counter);
}
