// reduce.cu - sum and mean over one axis, masked sum, argmax over the last axis.
//
// A reduced axis splits the input into (outer, len, inner). Each output is the sum over len
// elements; the CPU accumulates in double, and so do these kernels: on sm_80/sm_90 FP64 adds run
// at half the FP32 rate, far above what a memory-bound reduction needs, and a float accumulator
// over thousands of elements whose sum nearly cancels would miss the reference's 1e-5.
//
// Determinism: the partition of len into splits and the reduction tree depend on the shape only
// (never on the grid size or the device), and partial sums of split rows go to the scratch
// (DFG_CUDA_SCRATCH(reduce), (masked_sum)) and are added in split order by a second kernel.
//   inner == 1, len <= 512:   a warp per row, 8 rows per block
//   inner == 1, longer rows:  a block per (row, split); splits only when there are few rows
//   inner > 1:                a (32 x 8) block per 32 consecutive outputs; the 8 thread rows walk
//                             the reduced axis (coalesced over the outputs), splits when few tiles
// argmax uses the same row geometry with (value, index) pairs; its combine is exact, so any tree
// gives the CPU's answer (the first index of the largest non-NaN value; 0 when all are NaN).
#include "common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kWarpRowMax = 512;     // rows up to this length: a warp each
constexpr int64_t kTargetUnits = 512;    // split reductions until the grid has this many blocks
constexpr int64_t kMinRowChunk = 4096;   // elements per split of a row (a block of 256 threads)
constexpr int64_t kMinColChunk = 64;     // reduced-axis steps per split of a column tile
constexpr int64_t kMaxSplits = 1024;

// ---------------------------------------------------------------- what is summed
// x[f] (and x[f] * m[f] with a mask of x's shape), VEC elements at a time from f.
template <class T, bool MASK>
struct DenseLd {
    const T *x; // (outer, len, inner)
    const T *m; // x's shape, or unused
    static constexpr bool kVec = true;
    template <int VEC>
    __device__ __forceinline__ double sum(int64_t f) const {
        if constexpr (VEC == 1) {
            double v = (double)dfg_ld(x, f);
            return MASK ? v * (double)dfg_ld(m, f) : v;
        } else {
            float a[VEC];
            dfg_ld16(x + f, a);
            double s = 0.0;
            if constexpr (MASK) {
                float b[VEC];
                dfg_ld16(m + f, b);
#pragma unroll
                for (int k = 0; k < VEC; k++) s += (double)a[k] * (double)b[k];
            } else {
#pragma unroll
                for (int k = 0; k < VEC; k++) s += (double)a[k];
            }
            return s;
        }
    }
};

// x[f] * m[offset of f broadcast into the mask]
struct MaskIndex {
    int rank;
    int64_t d[DFG_MAX_RANK]; // x's dims
    int64_t s[DFG_MAX_RANK]; // the mask's strides over x's dims, 0 where it broadcasts
    __device__ __forceinline__ int64_t operator()(int64_t f) const {
        int64_t off = 0;
#pragma unroll
        for (int k = DFG_MAX_RANK - 1; k >= 0; k--) // unrolled: the dims stay in the parameter bank
            if (k < rank) {
                off += f % d[k] * s[k];
                f /= d[k];
            }
        return off;
    }
};
template <class T>
struct BcastLd {
    const T *x; // (outer, len, inner)
    const T *m; // broadcasts to x
    MaskIndex mi;
    static constexpr bool kVec = false;
    template <int VEC>
    __device__ __forceinline__ double sum(int64_t f) const {
        static_assert(VEC == 1, "a broadcast mask is read one element at a time");
        return (double)dfg_ld(x, f) * (double)dfg_ld(m, mi(f));
    }
};

// ---------------------------------------------------------------- the plan (shape only)
enum Mode { WARP_ROWS, BLOCK_ROWS, COLUMNS };
struct Plan {
    Mode mode;
    int64_t outer, len, inner;
    int64_t outs;   // outer * inner
    int64_t units;  // blocks of work per split: row groups, rows or column tiles
    int64_t splits; // of the reduced axis
    int64_t chunk;  // reduced-axis elements per split
};


Plan plan_for(dfg_shape s, int axis) {
    Plan p;
    p.outer = 1, p.inner = 1, p.len = s.d[axis];
    for (int i = 0; i < axis; i++) p.outer *= s.d[i];
    for (int i = axis + 1; i < s.rank; i++) p.inner *= s.d[i];
    p.outs = p.outer * p.inner;
    int64_t min_chunk;
    if (p.inner == 1 && p.len <= kWarpRowMax) {
        p.mode = WARP_ROWS, p.units = dfg_cdiv(p.outer, kWarps), p.splits = 1, p.chunk = p.len;
        return p;
    }
    if (p.inner == 1) p.mode = BLOCK_ROWS, p.units = p.outer, min_chunk = kMinRowChunk;
    else p.mode = COLUMNS, p.units = dfg_cdiv(p.outs, 32), min_chunk = kMinColChunk;
    int64_t splits = 1;
    if (p.units < kTargetUnits) {
        splits = dfg_cdiv(kTargetUnits, p.units);
        int64_t most = p.len / min_chunk;
        splits = splits < most ? splits : most;
        splits = splits < kMaxSplits ? splits : kMaxSplits;
        splits = splits > 1 ? splits : 1;
    }
    p.chunk = dfg_cdiv(p.len, splits);
    if (p.mode == BLOCK_ROWS) p.chunk = dfg_cdiv(p.chunk, 8) * 8; // split starts stay 16-byte aligned
    p.splits = p.len ? dfg_cdiv(p.len, p.chunk) : 1;                // no empty split
    return p;
}

size_t plan_scratch(const Plan &p, size_t per_output) {
    return p.splits > 1 ? (size_t)(p.outs * p.splits) * per_output : 0;
}

// ---------------------------------------------------------------- sum kernels
// y (rows) = scale * sum over each row of ld's (rows, len): a warp per row, 8 rows per block
template <class T, class Ld, int VEC>
__global__ __launch_bounds__(kThreads, 4) void sum_warp_rows(Ld ld, T *y /* (rows) */, int64_t rows, int64_t len,
                                                          int64_t groups, double scale) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        const int64_t r = g * kWarps + warp;
        if (r >= rows) break; // the whole warp leaves; this kernel has no block barrier
        double acc = 0.0;
        for (int64_t k = (int64_t)lane * VEC; k < len; k += 32 * VEC) acc += ld.template sum<VEC>(r * len + k);
        acc = dfg_warp_sum(acc);
        if (lane == 0) dfg_st(y, r, (float)(acc * scale));
    }
}

// One block per (row, split): the split's chunk of the row summed by the block. With one split
// the block writes y; otherwise its partial goes to part[split * rows + row].
template <class T, class Ld, int VEC>
__global__ __launch_bounds__(kThreads) void sum_block_rows(Ld ld, T *y /* (rows) */, double *part /* (splits, rows) */,
                                                           int64_t rows, int64_t len, int64_t chunk, int64_t splits,
                                                           double scale) {
    __shared__ double sh[32];
    for (int64_t u = blockIdx.x; u < rows * splits; u += gridDim.x) { // uniform per block: barriers are safe
        const int64_t r = u / splits, s = u % splits;
        const int64_t k0 = s * chunk, k1 = k0 + chunk < len ? k0 + chunk : len;
        double acc = 0.0;
        for (int64_t k = k0 + (int64_t)threadIdx.x * VEC; k < k1; k += kThreads * VEC)
            acc += ld.template sum<VEC>(r * len + k);
        acc = dfg_block_sum(acc, sh);
        if (threadIdx.x == 0) {
            if (splits == 1) dfg_st(y, r, (float)(acc * scale));
            else part[s * rows + r] = acc;
        }
    }
}

// Outputs j = o * inner + i (the reduced axis between o and i): blockDim (32, 8); the 32
// x-threads take 32 consecutive outputs, the 8 y-threads every 8th step of the split's chunk;
// the 8 partials are added in y order.
template <class T, class Ld>
__global__ __launch_bounds__(kThreads) void sum_columns(Ld ld, T *y /* (outs) */, double *part /* (splits, outs) */,
                                                        int64_t outs, int64_t len, int64_t inner, int64_t chunk,
                                                        int64_t splits, double scale) {
    __shared__ double sh[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t tiles = dfg_cdiv(outs, 32);
    for (int64_t u = blockIdx.x; u < tiles * splits; u += gridDim.x) {
        const int64_t tile = u % tiles, s = u / tiles, j = tile * 32 + tx;
        const int64_t k0 = s * chunk, k1 = k0 + chunk < len ? k0 + chunk : len;
        double acc = 0.0;
        if (j < outs) {
            const int64_t base = j / inner * len * inner + j % inner;
            for (int64_t k = k0 + ty; k < k1; k += 8) acc += ld.template sum<1>(base + k * inner);
        }
        const double t = dfg_column_fold<8>(acc, sh, 0.0, DfgSum());
        if (ty == 0 && j < outs) {
            if (splits == 1) dfg_st(y, j, (float)(t * scale));
            else part[s * outs + j] = t;
        }
    }
}

// y[j] = scale * the sum of part[s * outs + j] over splits s, in split order
template <class T>
__global__ __launch_bounds__(kThreads) void sum_partials(const double *part /* (splits, outs) */, T *y /* (outs) */,
                                                         int64_t outs, int64_t splits, double scale) {
    for (int64_t j = dfg_thread_index(); j < outs; j += dfg_grid_threads()) {
        double t = 0.0;
        for (int64_t s = 0; s < splits; s++) t += part[s * outs + j];
        dfg_st(y, j, (float)(t * scale));
    }
}

// Runs the plan for one loader; vec: 16-byte loads allowed (contiguous loader, aligned rows).
template <class T, class Ld>
dfg_status run_sum(const dfg_node *n, dfg_cuda_ctx *ctx, const Plan &p, const Ld &ld, bool vec, T *y,
                   double scale) {
    cudaStream_t st = (cudaStream_t)ctx->stream;
    double *part = (double *)ctx->scratch;
    if (p.splits > 1 && (!part || ctx->scratch_bytes < plan_scratch(p, sizeof(double))))
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs %zu bytes of scratch, has %zu", plan_scratch(p, sizeof(double)),
                             ctx->scratch_bytes);
    constexpr int V = Ld::kVec ? dfg_vec16<T>::n : 1;
    cudaError_t e;
    const char *k;
    if (p.mode == WARP_ROWS) {
        k = "sum_warp_rows";
        const unsigned g = dfg_grid_units(p.units, ctx);
        if (vec) e = DFG_LAUNCH((sum_warp_rows<T, Ld, V>), g, kThreads, 0, st, ld, y, p.outer, p.len, p.units, scale);
        else e = DFG_LAUNCH((sum_warp_rows<T, Ld, 1>), g, kThreads, 0, st, ld, y, p.outer, p.len, p.units, scale);
    } else if (p.mode == BLOCK_ROWS) {
        k = "sum_block_rows";
        const unsigned g = dfg_grid_units(p.units * p.splits, ctx);
        if (vec) e = DFG_LAUNCH((sum_block_rows<T, Ld, V>), g, kThreads, 0, st, ld, y, part, p.outer, p.len, p.chunk, p.splits, scale);
        else e = DFG_LAUNCH((sum_block_rows<T, Ld, 1>), g, kThreads, 0, st, ld, y, part, p.outer, p.len, p.chunk, p.splits, scale);
    } else {
        k = "sum_columns";
        e = DFG_LAUNCH((sum_columns<T, Ld>), dfg_grid_units(p.units * p.splits, ctx), dim3(32, 8), 0, st, ld, y, part,
                       p.outs, p.len, p.inner, p.chunk, p.splits, scale);
    }
    dfg_status s = dfg_cuda_launched(ctx, n, e, k);
    if (s || p.splits == 1) return s;
    e = DFG_LAUNCH((sum_partials<T>), dfg_grid_units(dfg_cdiv(p.outs, kThreads), ctx), kThreads, 0, st,
                   (const double *)part, y, p.outs, p.splits, scale);
    return dfg_cuda_launched(ctx, n, e, "sum_partials");
}

} // namespace

DFG_CUDA_SCRATCH(reduce) {
    return plan_scratch(plan_for(n->in[0]->shape, n->attr->reduce.axis), sizeof(double));
}

DFG_CUDA_LAUNCHER(reduce) {
    const dfg_tensor *x = n->in[0];
    const Plan p = plan_for(x->shape, n->attr->reduce.axis);
    const double scale = n->op == DFG_OP_MEAN ? 1.0 / (double)p.len : 1.0;
    const bool vec = p.mode != COLUMNS && dfg_aligned16(in[0]);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        const DenseLd<T, false> ld{(const T *)in[0], nullptr};
        return run_sum<T>(n, ctx, p, ld, vec && p.len % dfg_vec16<T>::n == 0, (T *)out[0], scale);
    });
    return DFG_OK;
}

DFG_CUDA_SCRATCH(masked_sum) {
    return plan_scratch(plan_for(n->in[0]->shape, n->attr->reduce.axis), sizeof(double));
}

DFG_CUDA_LAUNCHER(masked_sum) {
    const dfg_tensor *x = n->in[0], *m = n->in[1];
    const Plan p = plan_for(x->shape, n->attr->reduce.axis);
    if (m->dtype != x->dtype) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "the mask's dtype differs from the values'");
    const bool vec = p.mode != COLUMNS && dfg_aligned16(in[0]) && dfg_aligned16(in[1]);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        if (dfg_shape_equal(m->shape, x->shape)) {
            const DenseLd<T, true> ld{(const T *)in[0], (const T *)in[1]};
            return run_sum<T>(n, ctx, p, ld, vec && p.len % dfg_vec16<T>::n == 0, (T *)out[0], 1.0);
        }
        // the mask's strides over x's dims (numpy broadcasting: aligned at the last dim)
        MaskIndex mi{};
        mi.rank = x->shape.rank;
        int64_t stride = 1;
        for (int d = x->shape.rank - 1; d >= 0; d--) {
            const int md = m->shape.rank - x->shape.rank + d;
            const int64_t dim = md >= 0 ? m->shape.d[md] : 1;
            mi.d[d] = x->shape.d[d];
            mi.s[d] = dim == 1 ? 0 : stride;
            stride *= dim;
        }
        const BcastLd<T> ld{(const T *)in[0], (const T *)in[1], mi};
        return run_sum<T>(n, ctx, p, ld, false, (T *)out[0], 1.0);
    });
    return DFG_OK;
}

// ---------------------------------------------------------------- argmax
namespace {

// (value, index) candidates: a beats b when it is not NaN and b is, when both are numbers and a is
// larger, or when they tie (equal, or both NaN) and a comes first. Associative and commutative, so
// every tree picks the CPU's answer.
__device__ __forceinline__ bool beats(float av, int ai, float bv, int bi) {
    const bool an = av != av, bn = bv != bv;
    if (an != bn) return bn;
    if (!an && av != bv) return av > bv;
    return ai < bi;
}
// the no-candidate: a NaN at an index past every row
constexpr int kNoIndex = 0x7fffffff;

struct Cand {
    float v;
    int i;
};
struct Best {
    __device__ __forceinline__ Cand operator()(Cand a, Cand b) const { return beats(b.v, b.i, a.v, a.i) ? b : a; }
};

// the best of x[k0, k1) of one row, this thread's share (VEC elements at a time from k0 + t*VEC)
template <class T, int VEC>
__device__ __forceinline__ void thread_best(const T *row, int64_t k0, int64_t k1, int t, int stride, float &v, int &i) {
    for (int64_t k = k0 + (int64_t)t * VEC; k < k1; k += (int64_t)stride * VEC) {
        if constexpr (VEC == 1) {
            const float a = dfg_ld(row, k);
            if (beats(a, (int)k, v, i)) v = a, i = (int)k;
        } else {
            float a[VEC];
            dfg_ld16(row + k, a);
#pragma unroll
            for (int q = 0; q < VEC; q++)
                if (beats(a[q], (int)k + q, v, i)) v = a[q], i = (int)k + q;
        }
    }
}

template <class T, int VEC>
__global__ __launch_bounds__(kThreads) void argmax_warp_rows(const T *x /* (rows, V) */, int32_t *y /* (rows) */,
                                                             int64_t rows, int64_t V, int64_t groups) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        const int64_t r = g * kWarps + warp;
        if (r >= rows) break;
        float v = NAN;
        int i = kNoIndex;
        thread_best<T, VEC>(x + r * V, 0, V, lane, 32, v, i);
        i = dfg_warp_reduce(Cand{v, i}, Best()).i;
        if (lane == 0) y[r] = i == kNoIndex ? 0 : i;
    }
}

// a block per (row, split); one split writes y, several write part[split * rows + row]
template <class T, int VEC>
__global__ __launch_bounds__(kThreads) void argmax_block_rows(const T *x /* (rows, V) */, int32_t *y /* (rows) */,
                                                              Cand *part /* (splits, rows) */, int64_t rows, int64_t V,
                                                              int64_t chunk, int64_t splits) {
    __shared__ Cand sh[32];
    for (int64_t u = blockIdx.x; u < rows * splits; u += gridDim.x) {
        const int64_t r = u / splits, s = u % splits;
        const int64_t k0 = s * chunk, k1 = k0 + chunk < V ? k0 + chunk : V;
        float v = NAN;
        int i = kNoIndex;
        thread_best<T, VEC>(x + r * V, k0, k1, threadIdx.x, kThreads, v, i);
        const Cand b = dfg_block_reduce<kWarps>(Cand{v, i}, sh, Cand{NAN, kNoIndex}, Best());
        if (threadIdx.x == 0) {
            if (splits == 1) y[r] = b.i == kNoIndex ? 0 : b.i;
            else part[s * rows + r] = b;
        }
    }
}

__global__ __launch_bounds__(kThreads) void argmax_partials(const Cand *part /* (splits, rows) */, int32_t *y /* (rows) */,
                                                            int64_t rows, int64_t splits) {
    for (int64_t r = dfg_thread_index(); r < rows; r += dfg_grid_threads()) {
        Cand b = part[r];
        for (int64_t s = 1; s < splits; s++) {
            const Cand c = part[s * rows + r];
            if (beats(c.v, c.i, b.v, b.i)) b = c;
        }
        y[r] = b.i == kNoIndex ? 0 : b.i;
    }
}

Plan argmax_plan(dfg_shape s) { return plan_for(s, s.rank - 1); }

} // namespace

DFG_CUDA_SCRATCH(argmax) { return plan_scratch(argmax_plan(n->in[0]->shape), sizeof(Cand)); }

DFG_CUDA_LAUNCHER(argmax) {
    const dfg_tensor *x = n->in[0];
    const Plan p = argmax_plan(x->shape);
    if (p.len > 0x7fffffff) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "rows longer than an i32 index");
    cudaStream_t st = (cudaStream_t)ctx->stream;
    Cand *part = (Cand *)ctx->scratch;
    if (p.splits > 1 && (!part || ctx->scratch_bytes < plan_scratch(p, sizeof(Cand))))
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "needs %zu bytes of scratch, has %zu", plan_scratch(p, sizeof(Cand)),
                             ctx->scratch_bytes);
    int32_t *y = (int32_t *)out[0];
    cudaError_t e = cudaSuccess;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, x, T, {
        constexpr int V = dfg_vec16<T>::n;
        const T *xp = (const T *)in[0];
        const bool vec = dfg_aligned16(in[0]) && p.len % V == 0;
        if (p.mode == WARP_ROWS) {
            const unsigned g = dfg_grid_units(p.units, ctx);
            if (vec) e = DFG_LAUNCH((argmax_warp_rows<T, V>), g, kThreads, 0, st, xp, y, p.outer, p.len, p.units);
            else e = DFG_LAUNCH((argmax_warp_rows<T, 1>), g, kThreads, 0, st, xp, y, p.outer, p.len, p.units);
        } else {
            const unsigned g = dfg_grid_units(p.units * p.splits, ctx);
            if (vec) e = DFG_LAUNCH((argmax_block_rows<T, V>), g, kThreads, 0, st, xp, y, part, p.outer, p.len, p.chunk, p.splits);
            else e = DFG_LAUNCH((argmax_block_rows<T, 1>), g, kThreads, 0, st, xp, y, part, p.outer, p.len, p.chunk, p.splits);
        }
    });
    dfg_status s = dfg_cuda_launched(ctx, n, e, "argmax");
    if (s || p.splits == 1) return s;
    e = DFG_LAUNCH(argmax_partials, dfg_grid_units(dfg_cdiv(p.outer, kThreads), ctx), kThreads, 0, st,
                   (const Cand *)part, y, p.outer, p.splits);
    return dfg_cuda_launched(ctx, n, e, "argmax_partials");
}
