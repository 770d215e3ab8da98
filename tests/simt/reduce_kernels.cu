// reduce_kernels.cu - block reductions for the SIMT emulator's tests: a bf16 row sum with warp
// shuffles and barriers, and the classic shared-memory tree reduction.
//
// DFG_TEST_PLANT_MISSING_SYNC (set by the build for test_simt_planted) removes the barrier inside
// the tree reduction's loop: the race the schedule fuzzing must expose.
#include "dfg_simt.h"

#include "simt_test.h"

#ifdef DFG_TEST_PLANT_MISSING_SYNC
#define DFG_TEST_TREE_SYNC() ((void)0)
#else
#define DFG_TEST_TREE_SYNC() __syncthreads()
#endif

// The sum of v over the block, returned to every thread. Warps reduce with shuffles, warp 0
// reduces the warps' sums; the second barrier keeps warp_sums from being overwritten by a
// next call before every thread has read the total.
static __device__ float dfg_simt_test_block_sum(float v) {
    __shared__ float warp_sums[32];
    __shared__ float total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    // the last warp may be partial: only its existing lanes take part
    const int in_warp = min(32, (int)blockDim.x - warp * 32);
    const unsigned mask = in_warp == 32 ? 0xffffffffu : (1u << in_warp) - 1;
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_down_sync(mask, v, o);
        if (lane + o < in_warp) v += other;
    }
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < nwarps ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            const float other = __shfl_down_sync(mask, s, o);
            if (lane + o < in_warp) s += other;
        }
        if (lane == 0) total = s;
    }
    __syncthreads();
    const float t = total;
    __syncthreads();
    return t;
}

// a block per row; each thread sums a strided slice of the row in fp32
__global__ void dfg_simt_test_rowsum_bf16_kernel(const __nv_bfloat16 *__restrict__ x /* (rows, cols) */,
                                                 float *__restrict__ out /* (rows) */, int cols) {
    const __nv_bfloat16 *row = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += __bfloat162float(row[c]);
    const float s = dfg_simt_test_block_sum(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

cudaError_t dfg_simt_test_rowsum_bf16(const __nv_bfloat16 *x /* (rows, cols) */, float *out /* (rows) */,
                                      int rows, int cols, int threads) {
    return DFG_LAUNCH(dfg_simt_test_rowsum_bf16_kernel, rows, threads, 0, 0, x, out, cols);
}

// partial[b] = sum of x over block b's 256 elements (zeros past n)
__global__ void dfg_simt_test_tree_reduce_kernel(const float *__restrict__ x /* (n) */,
                                                 float *__restrict__ partial /* (gridDim.x) */, int n) {
    __shared__ float sdata[256];
    const unsigned tid = threadIdx.x;
    const unsigned i = blockIdx.x * 256 + tid;
    sdata[tid] = i < (unsigned)n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned s = 128; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        DFG_TEST_TREE_SYNC();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}

cudaError_t dfg_simt_test_tree_reduce(const float *x /* (n) */, float *partial /* (ceil(n / 256)) */, int n) {
    return DFG_LAUNCH(dfg_simt_test_tree_reduce_kernel, (n + 255) / 256, 256, 0, 0, x, partial, n);
}

// the same over dynamic shared memory (blockDim.x floats), blockDim.x a power of two
__global__ void dfg_simt_test_tree_reduce_dyn_kernel(const float *__restrict__ x /* (n) */,
                                                     float *__restrict__ partial /* (gridDim.x) */, int n) {
    DFG_SHARED_DYNAMIC(float, sdata);
    const unsigned tid = threadIdx.x;
    const unsigned i = blockIdx.x * blockDim.x + tid;
    sdata[tid] = i < (unsigned)n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        DFG_TEST_TREE_SYNC();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}

cudaError_t dfg_simt_test_tree_reduce_dyn(const float *x /* (n) */, float *partial /* (ceil(n / threads)) */, int n,
                                          int threads) {
    return DFG_LAUNCH(dfg_simt_test_tree_reduce_dyn_kernel, (n + threads - 1) / threads, threads,
                      threads * sizeof(float), 0, x, partial, n);
}
