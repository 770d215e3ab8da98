// rope.cu - rotary position embeddings on the GPU, as ops/cpu/rope.c computes them (the formula:
// ops/rope.c): per head of D = head_dim and i < D/2,
//     y[i] = x[i] cos a - x[i + D/2] sin a,   y[i + D/2] = x[i + D/2] cos a + x[i] sin a,
// a = (float)pos * inv_freq[i], inv_freq[i] = 1.0f / (float)theta^((float)(2i) / (float)D).
// The angle and the rotation are f32 on f32 or bf16 storage: a bf16 output is rounded once, at
// the end. The power is taken in double and rounded to f32 as the CPU kernel does, so both agree
// on every bit of inv_freq (at position 4000 one ulp of inv_freq moves the angle by 5e-4).
//
// One thread per (token, head, i < D/2) pair, walked in grid-stride order: consecutive threads
// take consecutive i of one head, so the reads of x[i] and x[i + D/2] and the writes are
// coalesced. Each thread computes its own angle (the heads of a token share it; recomputing is
// cheaper than a round trip through shared memory for a kernel bound by memory). A pair's two
// outputs depend on both of its inputs; ops.def's in-place column says NONE, so y never takes
// x's bytes (both kernels read a whole pair before writing it, so IN0 would be safe too).
#include "common.cuh"

namespace {

constexpr int kThreads = 256;

// 1 / theta^(2i/D) with the power correctly rounded to f32 (ops/cpu/rope.c)
__device__ __forceinline__ float inv_freq(int64_t i, int64_t D, float theta) {
    const float e = (float)(2 * i) / (float)D;
    return 1.0f / (float)pow((double)theta, (double)e);
}

// y (tokens, H, D) = the rotation of x (tokens, H, D) by each token's angles; sign -1: inverse
template <class T>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(T *y /* (tokens, H, D) */, const T *x /* (tokens, H, D) */, const int32_t *pos /* (tokens) */,
                int64_t pairs /* tokens * H * D/2 */, int64_t H, int64_t half /* D/2 */, float theta, float sign) {
    const int64_t D = 2 * half;
    for (int64_t k = dfg_thread_index(); k < pairs; k += dfg_grid_threads()) {
        const int64_t i = k % half, row = k / half, t = row / H; // row: (token, head)
        const float ang = (float)pos[t] * inv_freq(i, D, theta);
        const float c = cosf(ang), s = sign * sinf(ang);
        const int64_t at = row * D + i;
        const float x1 = dfg_ld(x, at), x2 = dfg_ld(x, at + half);
        dfg_st(y, at, x1 * c - x2 * s);
        dfg_st(y, at + half, x2 * c + x1 * s);
    }
}

} // namespace

// inputs x (..., H*D), pos (...) i32 -> y (..., H*D) of x's dtype
DFG_CUDA_LAUNCHER(rope) {
    const dfg_tensor *x = n->in[0];
    const dfg_attrs_rope *a = &n->attr->rope;
    const int64_t C = x->shape.d[x->shape.rank - 1], D = a->head_dim, half = D / 2;
    if (n->in[1]->dtype != DFG_I32 || n->out[0]->dtype != x->dtype)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "needs i32 positions and x's dtype out");
    if (D < 2 || D % 2 || C % D)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "head_dim %lld does not split x", (long long)D);
    const int64_t tokens = C ? dfg_shape_numel(x->shape) / C : 0, H = C / D, pairs = tokens * H * half;
    if (pairs == 0) return DFG_OK;
    cudaError_t e = cudaSuccess;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T,
                            e = DFG_LAUNCH((rope_kernel<T>), dfg_grid_for(pairs, kThreads, ctx), kThreads, 0,
                                           (cudaStream_t)ctx->stream, (T *)out[0], (const T *)in[0],
                                           (const int32_t *)in[1], pairs, H, half, a->theta,
                                           a->inverse ? -1.0f : 1.0f));
    return dfg_cuda_launched(ctx, n, e, "rope_kernel");
}
