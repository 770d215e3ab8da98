// warp_kernels.cu - warp shuffles, votes, __syncwarp, barrier variants and atomics, for the SIMT
// emulator's semantics tests (the host side computes what CUDA's documentation says).
#include "dfg_simt.h"

#include "simt_test.h"

// every thread: the four shuffles of its value with one argument and width; full warps
template <class T>
__global__ void dfg_simt_test_shfl_kernel(const T *__restrict__ in /* (n) */, T *__restrict__ out /* (4, n) */,
                                          int n, int arg, int width) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const T v = in[i];
    out[i] = __shfl_sync(0xffffffffu, v, arg, width);
    out[n + i] = __shfl_up_sync(0xffffffffu, v, (unsigned)arg, width);
    out[2 * n + i] = __shfl_down_sync(0xffffffffu, v, (unsigned)arg, width);
    out[3 * n + i] = __shfl_xor_sync(0xffffffffu, v, arg, width);
}

#define DFG_SIMT_TEST_SHFL_DEF(T, suffix)                                                                   \
    DFG_SIMT_TEST_SHFL_DECL(T, suffix) {                                                                    \
        return DFG_LAUNCH(dfg_simt_test_shfl_kernel<T>, n / 64, 64, 0, 0, in, out, n, arg, width);          \
    }
DFG_SIMT_TEST_SHFL_DEF(int, i32)
DFG_SIMT_TEST_SHFL_DEF(unsigned, u32)
DFG_SIMT_TEST_SHFL_DEF(long long, i64)
DFG_SIMT_TEST_SHFL_DEF(unsigned long long, u64)
DFG_SIMT_TEST_SHFL_DEF(float, f32)
DFG_SIMT_TEST_SHFL_DEF(double, f64)
DFG_SIMT_TEST_SHFL_DEF(__nv_bfloat16, bf16)
DFG_SIMT_TEST_SHFL_DEF(__nv_bfloat162, bf16x2)

// votes, match, reduce and a half-warp exchange, over each warp's existing lanes
__global__ void dfg_simt_test_votes_kernel(const int *__restrict__ pred /* (n) */,
                                           unsigned *__restrict__ out /* (8, n) */, int n) {
    __shared__ int xchg[1024];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int in_warp = min(32, (int)blockDim.x - warp * 32);
    const unsigned mask = in_warp == 32 ? 0xffffffffu : (1u << in_warp) - 1;
    const int p = pred[i];
    out[i] = __ballot_sync(mask, p);
    out[n + i] = (unsigned)__any_sync(mask, p);
    out[2 * n + i] = (unsigned)__all_sync(mask, p);
    out[3 * n + i] = __match_any_sync(mask, p % 3);
    out[4 * n + i] = __reduce_add_sync(mask, (unsigned)p);
    out[5 * n + i] = (unsigned)__reduce_min_sync(mask, p);
    // each half warp exchanges through shared memory, synchronised on its own lanes only
    const unsigned half = mask & (lane < 16 ? 0x0000ffffu : 0xffff0000u);
    xchg[threadIdx.x] = p * 7 + lane;
    __syncwarp(half);
    const int partner = lane ^ 1;
    out[6 * n + i] = partner < in_warp ? (unsigned)xchg[warp * 32 + partner] : 0xdeadbeefu;
    out[7 * n + i] = (unsigned)__shfl_sync(mask, p, 0);
}

cudaError_t dfg_simt_test_votes(const int *pred /* (n) */, unsigned *out /* (8, n) */, int n, int threads) {
    return DFG_LAUNCH(dfg_simt_test_votes_kernel, n / threads, threads, 0, 0, pred, out, n);
}

// every thread writes what each barrier variant returned to it
__global__ void dfg_simt_test_syncthreads_ops_kernel(const int *__restrict__ pred /* (n) */,
                                                     int *__restrict__ out /* (3, n) */, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int p = pred[i];
    const int c = __syncthreads_count(p);
    const int a = __syncthreads_and(p);
    const int o = __syncthreads_or(p);
    out[i] = c;
    out[n + i] = a;
    out[2 * n + i] = o;
}

cudaError_t dfg_simt_test_syncthreads_ops(const int *pred /* (blocks, threads) */, int *out /* (3, blocks, threads) */,
                                          int blocks, int threads) {
    return DFG_LAUNCH(dfg_simt_test_syncthreads_ops_kernel, blocks, threads, 0, 0, pred, out, blocks * threads);
}

// Thread t of T: see test_simt.cpp's atomics test for the totals each line must produce
__global__ void dfg_simt_test_atomics_kernel(dfg_simt_test_atomics *c /* (1) */) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int v = (t * 7919) % 1000 - 500;
    atomicAdd(&c->add_i, 1);
    atomicSub(&c->sub_i, 2);
    atomicMax(&c->max_i, v);
    atomicMin(&c->min_i, v);
    atomicOr(&c->or_i, 1 << (t % 31));
    atomicAnd(&c->and_i, ~(1 << (t % 29)));
    // an increment by 3 through compare-and-swap, retried when another thread got in between
    int old = c->cas_i, assumed;
    do {
        assumed = old;
        old = atomicCAS(&c->cas_i, assumed, assumed + 3);
    } while (old != assumed);
    atomicAdd(&c->add_u, (unsigned)t);
    atomicMax(&c->max_u, (unsigned)t * 3u);
    atomicMin(&c->min_u, (unsigned)t + 5u);
    atomicInc(&c->inc_u, 9u);
    atomicExch(&c->exch_u, (unsigned)t + 1u);
    atomicAdd(&c->add_ull, 1ull << 40);
    atomicAdd(&c->add_f, 0.25f);
    atomicAdd(&c->add_d, 0.5);
    if (t < 100) atomicAdd(&c->add_bf16, __float2bfloat16(1.0f));
}

cudaError_t dfg_simt_test_atomics_run(dfg_simt_test_atomics *c /* (1) */, int blocks, int threads) {
    return DFG_LAUNCH(dfg_simt_test_atomics_kernel, blocks, threads, 0, 0, c);
}

// lanes 0..15 of each warp read lanes 16..31, which are not in the mask (and do not call):
// undefined in CUDA, the emulator's poison (all ones)
__global__ void dfg_simt_test_shfl_outside_mask_kernel(int *out /* (blockDim.x) */) {
    const int lane = threadIdx.x & 31;
    out[threadIdx.x] = lane < 16 ? __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 16) : 7;
}

cudaError_t dfg_simt_test_shfl_outside_mask(int *out /* (64) */) {
    return DFG_LAUNCH(dfg_simt_test_shfl_outside_mask_kernel, 1, 64, 0, 0, out);
}

// 3-D blocks: warps are 32 consecutive linear thread ids (x fastest); out (4, blocks, threads):
// threadIdx.x, .y, .z and the linear id of the warp's lane 0, got by a shuffle
__global__ void dfg_simt_test_block3d_kernel(int *out /* (4, gridDim.x, blockDim.x * blockDim.y * blockDim.z) */) {
    const int threads = blockDim.x * blockDim.y * blockDim.z, n = gridDim.x * threads;
    const int lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int in_warp = min(32, threads - (lin & ~31));
    const unsigned mask = in_warp == 32 ? 0xffffffffu : (1u << in_warp) - 1;
    const int i = blockIdx.x * threads + lin;
    out[i] = threadIdx.x;
    out[n + i] = threadIdx.y;
    out[2 * n + i] = threadIdx.z;
    out[3 * n + i] = __shfl_sync(mask, lin, 0);
}

cudaError_t dfg_simt_test_block3d(int *out /* (4, blocks, block.x * block.y * block.z) */, int blocks, dim3 block) {
    return DFG_LAUNCH(dfg_simt_test_block3d_kernel, blocks, block, 0, 0, out);
}
