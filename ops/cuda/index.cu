// index.cu - embedding lookup (embed), gather along the last axis (take) and their scatter-add
// backward ops (embed_bwd, take_bwd).
//
// Indices come from data, so every one is checked on the device: an id outside [0, V) raises
// *ctx->flags (the CPU kernel fails the node) and reads as nothing: embed writes a row of zeros,
// take a zero, take_bwd a row of zeros, embed_bwd adds nothing for it.
//
// embed_bwd is deterministic without float atomics and bit-identical to the CPU: a block owns R
// vocabulary rows x CB columns of the table gradient, accumulated in f32 in shared memory (from
// zero, or from the accumulator input), and walks all ids in tiles of 256: a stable compaction
// (warp ballots, then the 8 warps in order) lists the tile's positions whose id falls in its rows,
// in increasing position, and each thread adds those dy rows into the columns it owns. So every
// (row, column) sums its dy values in position order, as the CPU's loop does. Every block reads
// all ids (V * C * 4 / 44 KB blocks: 3,500 reads of the ids for GPT-2's 50257 x 768 table, from
// L2), which costs far less than the V x C gradient it writes.
#include "common.cuh"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void raise_flag(int *flags) {
    if (flags) *flags = 1; // every writer stores the same value: no atomic needed
}

// the widest word (16 bytes, else the element) dividing a row and both addresses
bool rows_of_16(int64_t row_bytes, const void *a, const void *b) {
    return ((uintptr_t)row_bytes | (uintptr_t)a | (uintptr_t)b) % 16 == 0;
}

// ---------------------------------------------------------------- embed
// y[i, :] = w[ids[i], :], copied as words W (16 bytes or one element); blockDim (32, 8): a row per
// thread row, the 32 x-threads along it.
template <class W>
__global__ __launch_bounds__(kThreads) void embed_k(const W *w /* (V, cw) */, const int32_t *ids /* (cnt) */,
                                                    W *y /* (cnt, cw) */, int64_t cnt, int64_t V, int64_t cw,
                                                    int *flags) {
    for (int64_t g = blockIdx.x; g < dfg_cdiv(cnt, 8); g += gridDim.x) {
        const int64_t i = g * 8 + threadIdx.y;
        if (i >= cnt) break;
        const int32_t id = ids[i];
        const bool ok = id >= 0 && id < V;
        if (!ok && threadIdx.x == 0) raise_flag(flags);
        for (int64_t c = threadIdx.x; c < cw; c += 32) y[i * cw + c] = ok ? w[(int64_t)id * cw + c] : W{};
    }
}

// ---------------------------------------------------------------- take
// y[r] = x[r, idx[r]], E: an element's bits
template <class E>
__global__ __launch_bounds__(kThreads) void take_k(const E *x /* (rows, V) */, const int32_t *idx /* (rows) */,
                                                   E *y /* (rows) */, int64_t rows, int64_t V, int *flags) {
    for (int64_t r = dfg_thread_index(); r < rows; r += dfg_grid_threads()) {
        const int32_t id = idx[r];
        if (id >= 0 && id < V) {
            y[r] = x[r * V + id];
        } else {
            y[r] = 0;
            raise_flag(flags);
        }
    }
}

// ---------------------------------------------------------------- take_bwd
// dx[r, :] = 0 except dx[r, idx[r]] = dy[r]; E: an element's bits. VEC16: 16-byte words of
// 16 / sizeof(E) elements. blockDim (32, 8): a row per thread row.
template <class E, bool VEC16>
__global__ __launch_bounds__(kThreads) void take_bwd_k(const E *dy /* (rows) */, const int32_t *idx /* (rows) */,
                                                       E *dx /* (rows, V) */, int64_t rows, int64_t V, int *flags) {
    constexpr int N = VEC16 ? 16 / (int)sizeof(E) : 1;
    for (int64_t g = blockIdx.x; g < dfg_cdiv(rows, 8); g += gridDim.x) {
        const int64_t r = g * 8 + threadIdx.y;
        if (r >= rows) break;
        int64_t id = idx[r];
        if (id < 0 || id >= V) {
            if (threadIdx.x == 0) raise_flag(flags);
            id = -1; // matches no column: a row of zeros
        }
        const E d = dy[r];
        for (int64_t c = threadIdx.x; c < V / N; c += 32) {
            if constexpr (!VEC16) {
                dx[r * V + c] = c == id ? d : E(0);
            } else {
                uint32_t lane[4] = {0, 0, 0, 0};
#pragma unroll
                for (int k = 0; k < N; k++) {
                    const uint32_t e = c * N + k == id ? (uint32_t)d : 0u;
                    lane[k * (int)sizeof(E) / 4] |= e << (8 * (k * (int)sizeof(E) % 4));
                }
                reinterpret_cast<uint4 *>(dx + r * V)[c] = make_uint4(lane[0], lane[1], lane[2], lane[3]);
            }
        }
    }
}

// ---------------------------------------------------------------- embed_bwd
constexpr int64_t kColsPerBlock = 1024;            // CB
// the f32 accumulators' dynamic shared memory: with the static lists (2 KB) under the 48 KB a
// block may have without the opt-in
constexpr int64_t kAccBytes = 44 * 1024;
constexpr int kWarps = kThreads / 32;

int64_t rows_per_block(int64_t cb) {
    const int64_t r = kAccBytes / (cb * (int64_t)sizeof(float));
    return r < 32 ? r : 32;
}

// dw (V, C) = acc (or 0) + sum over positions i of dy[i, :] into row ids[i], in position order.
// Block (x, y): vocabulary rows [x R, x R + R), columns [y CB, y CB + CB); sh: R x CB floats.
template <class T>
__global__ __launch_bounds__(kThreads) void embed_bwd_k(const T *dy /* (cnt, C) */, const int32_t *ids /* (cnt) */,
                                                        const T *acc /* (V, C) or NULL */, T *dw /* (V, C) */,
                                                        int64_t cnt, int64_t V, int64_t C, int64_t R, int64_t CB,
                                                        int *flags) {
    DFG_SHARED_DYNAMIC(float, sh);
    __shared__ int list_pos[kThreads], list_row[kThreads], warp_n[kWarps];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int64_t v0 = (int64_t)blockIdx.x * R, c0 = (int64_t)blockIdx.y * CB;
    const int64_t nr = V - v0 < R ? V - v0 : R, nc = C - c0 < CB ? C - c0 : CB;
    // each thread owns columns t, t + 256, ... of every row: no barrier between init, adds, write
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = t; c < nc; c += kThreads) sh[r * CB + c] = acc ? dfg_ld(acc, (v0 + r) * C + c0 + c) : 0.0f;
    const bool checker = blockIdx.x == 0 && blockIdx.y == 0;
    for (int64_t base = 0; base < cnt; base += kThreads) {
        const int64_t p = base + t;
        const int32_t id = p < cnt ? ids[p] : -1;
        if (checker && p < cnt && (id < 0 || id >= V)) raise_flag(flags);
        const bool match = p < cnt && id >= v0 && id < v0 + nr;
        const unsigned ballot = __ballot_sync(0xffffffffu, match);
        if (lane == 0) warp_n[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, total = 0;
#pragma unroll
        for (int w = 0; w < kWarps; w++) {
            before += w < warp ? warp_n[w] : 0;
            total += warp_n[w];
        }
        if (match) {
            const int at = before + __popc(ballot & ((1u << lane) - 1u));
            list_pos[at] = (int)(p - base);
            list_row[at] = (int)(id - v0);
        }
        __syncthreads();
        for (int j = 0; j < total; j++) {
            const int64_t src = (base + list_pos[j]) * C + c0;
            float *row = sh + (int64_t)list_row[j] * CB;
            for (int64_t c = t; c < nc; c += kThreads) row[c] += dfg_ld(dy, src + c);
        }
        __syncthreads(); // the list and warp_n are rewritten by the next tile
    }
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = t; c < nc; c += kThreads) dfg_st(dw, (v0 + r) * C + c0 + c, sh[r * CB + c]);
}

} // namespace

// ---------------------------------------------------------------- launchers
DFG_CUDA_LAUNCHER(embed) {
    const dfg_tensor *w = n->in[0];
    const int64_t V = w->shape.d[0], C = w->shape.d[1], cnt = dfg_shape_numel(n->in[1]->shape);
    if (n->in[1]->dtype != DFG_I32 || n->out[0]->dtype != w->dtype || (w->dtype != DFG_F32 && w->dtype != DFG_BF16))
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "needs an f32 or bf16 table, i32 ids and the table's dtype out");
    if (cnt == 0 || C == 0) return DFG_OK;
    const int64_t rb = C * (int64_t)dfg_dtype_size(w->dtype);
    const unsigned g = dfg_grid_units(dfg_cdiv(cnt, 8), ctx);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e;
    if (rows_of_16(rb, in[0], out[0]))
        e = DFG_LAUNCH((embed_k<uint4>), g, dim3(32, 8), 0, st, (const uint4 *)in[0], (const int32_t *)in[1],
                       (uint4 *)out[0], cnt, V, rb / 16, ctx->flags);
    else if (w->dtype == DFG_F32)
        e = DFG_LAUNCH((embed_k<uint32_t>), g, dim3(32, 8), 0, st, (const uint32_t *)in[0], (const int32_t *)in[1],
                       (uint32_t *)out[0], cnt, V, C, ctx->flags);
    else
        e = DFG_LAUNCH((embed_k<uint16_t>), g, dim3(32, 8), 0, st, (const uint16_t *)in[0], (const int32_t *)in[1],
                       (uint16_t *)out[0], cnt, V, C, ctx->flags);
    return dfg_cuda_launched(ctx, n, e, "embed");
}

DFG_CUDA_LAUNCHER(take) {
    const dfg_shape xs = n->in[0]->shape;
    const int64_t V = xs.d[xs.rank - 1], rows = V ? dfg_shape_numel(xs) / V : 0;
    const dfg_dtype dt = n->in[0]->dtype;
    if (n->in[1]->dtype != DFG_I32 || n->out[0]->dtype != dt || (dt != DFG_F32 && dt != DFG_BF16))
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "needs f32 or bf16 values, i32 indices and their dtype out");
    if (rows == 0) return DFG_OK;
    const unsigned g = dfg_grid_units(dfg_cdiv(rows, kThreads), ctx);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e = dt == DFG_F32
                        ? DFG_LAUNCH((take_k<uint32_t>), g, kThreads, 0, st, (const uint32_t *)in[0],
                                     (const int32_t *)in[1], (uint32_t *)out[0], rows, V, ctx->flags)
                        : DFG_LAUNCH((take_k<uint16_t>), g, kThreads, 0, st, (const uint16_t *)in[0],
                                     (const int32_t *)in[1], (uint16_t *)out[0], rows, V, ctx->flags);
    return dfg_cuda_launched(ctx, n, e, "take");
}

DFG_CUDA_LAUNCHER(take_bwd) {
    const int64_t V = n->attr->scatter.vocab, rows = dfg_shape_numel(n->in[1]->shape);
    const dfg_dtype dt = n->in[0]->dtype;
    if (n->in[1]->dtype != DFG_I32 || n->out[0]->dtype != dt || (dt != DFG_F32 && dt != DFG_BF16))
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "needs f32 or bf16 dy, i32 indices and dy's dtype out");
    if (rows == 0 || V == 0) return DFG_OK;
    const unsigned g = dfg_grid_units(dfg_cdiv(rows, 8), ctx);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    const bool vec = rows_of_16(V * (int64_t)dfg_dtype_size(dt), out[0], out[0]);
    cudaError_t e;
    const int32_t *idx = (const int32_t *)in[1];
    if (dt == DFG_F32)
        e = vec ? DFG_LAUNCH((take_bwd_k<uint32_t, true>), g, dim3(32, 8), 0, st, (const uint32_t *)in[0], idx,
                             (uint32_t *)out[0], rows, V, ctx->flags)
                : DFG_LAUNCH((take_bwd_k<uint32_t, false>), g, dim3(32, 8), 0, st, (const uint32_t *)in[0], idx,
                             (uint32_t *)out[0], rows, V, ctx->flags);
    else
        e = vec ? DFG_LAUNCH((take_bwd_k<uint16_t, true>), g, dim3(32, 8), 0, st, (const uint16_t *)in[0], idx,
                             (uint16_t *)out[0], rows, V, ctx->flags)
                : DFG_LAUNCH((take_bwd_k<uint16_t, false>), g, dim3(32, 8), 0, st, (const uint16_t *)in[0], idx,
                             (uint16_t *)out[0], rows, V, ctx->flags);
    return dfg_cuda_launched(ctx, n, e, "take_bwd");
}

// inputs dy (..., C), ids (...) [, acc (V, C), which the output takes in place]
DFG_CUDA_LAUNCHER(embed_bwd) {
    const int64_t V = n->attr->scatter.vocab, C = n->out[0]->shape.d[1], cnt = dfg_shape_numel(n->in[1]->shape);
    const dfg_dtype dt = n->in[0]->dtype;
    if (n->in[1]->dtype != DFG_I32 || n->out[0]->dtype != dt || (n->n_in == 3 && n->in[2]->dtype != dt))
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "needs i32 ids and dy's dtype for the accumulator and the output");
    if (cnt > 0x7fffffff) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "more than 2^31 ids");
    if (V == 0 || C == 0) return DFG_OK;
    const int64_t CB = C < kColsPerBlock ? C : kColsPerBlock, R = rows_per_block(CB);
    const int64_t gx = dfg_cdiv(V, R), gy = dfg_cdiv(C, CB);
    if (gx > 0x7fffffff || gy > 65535) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "table too large for the grid");
    const dim3 grid((unsigned)gx, (unsigned)gy);
    const size_t smem = (size_t)(R * CB) * sizeof(float);
    cudaStream_t st = (cudaStream_t)ctx->stream;
    cudaError_t e = cudaSuccess;
    const void *acc = n->n_in == 3 ? in[2] : NULL;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T,
                            e = DFG_LAUNCH((embed_bwd_k<T>), grid, kThreads, smem, st, (const T *)in[0],
                                           (const int32_t *)in[1], (const T *)acc, (T *)out[0], cnt, V, C, R, CB,
                                           ctx->flags));
    return dfg_cuda_launched(ctx, n, e, "embed_bwd");
}
