// softmax.cu - softmax and log-softmax over the last axis, and their backward ops, which take
// (dy, y); the entropy of softmax over the last axis and its backward, which takes (dH, z, H).
//
// A warp per row when the row has at most 1024 elements (8 rows per block, shuffles only), else a
// block of 256 per row. The forward reads a row once for an online max and sum of exponentials
// (each thread keeps (m, s) and rescales s when m grows; threads merge their pairs the same way),
// then once more to write. 16-byte loads and stores when the row length is a multiple of the
// vector and the pointers are aligned.
//
// In place (ops.def: y over x; dx over dy or y): every element is read by the thread that later
// writes it, and the row's reduction completes before any write, so aliasing is safe.
//
// Special values as the CPU: NaNs make the row NaN; a +inf makes it NaN (the CPU's exp(inf - inf));
// -inf elements weigh 0; a row of -inf alone is NaN. The backward sums accumulate in double (the
// CPU does; a dot product of dy and y cancels).
//
// entropy: the same row geometry, one read of the row: each thread keeps (m, l, a), the running
// max, l = sum exp(x - m) and a = sum exp(x - m) (x - m) (ops/cpu/cpu.h's dfg_row_stats), taking a
// 16-byte vector at a time (one rescale per vector when its max raises m), and the threads merge
// their triples by a fixed tree; H = log l - a / l. Its terms are both >= 0 (x - m <= 0), so f32
// sums lose nothing to cancellation. A row of -inf alone has H = 0 (the CPU's), NaNs make it NaN.
// entropy_bwd: a first read for the row's log-sum-exp (as softmax's), a second to write
// dz = -dH p (log p + H); 0 where p is 0 (a -inf logit, and every entry of a row of -inf).
#include "rows.cuh"

namespace {

// ---------------------------------------------------------------- row reductions
// the weight of a partial sum s taken at max m once the max is mn: 0 for m = -inf (exp(-inf + inf)
// would be NaN), so a NaN s still poisons the sum
__device__ __forceinline__ float rescale(float m, float mn) { return m == -INFINITY ? 0.0f : expf(m - mn); }

// adds VEC logits to a thread's online (max m, sum s of exp(x - m)): one exp per logit; -inf weighs
// nothing, a NaN makes s NaN, and +inf makes it NaN as the CPU's exp(inf - inf) does
template <int VEC>
__device__ __forceinline__ void lse_push(float &m, float &s, const float (&v)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        if (v[k] > m) s = s * expf(m - v[k]) + 1.0f, m = v[k];
        else if (v[k] != -INFINITY) s += expf(v[k] - m);
        if (v[k] == INFINITY) s = NAN;
    }
}

// a thread's, then the row's (max m, sum s of exp(x - m)); merged symmetrically (every lane of a
// butterfly the same bits)
struct Lse {
    float m, s;
};
struct LseMerge {
    __device__ __forceinline__ Lse operator()(Lse a, Lse b) const {
        const float mn = fmaxf(a.m, b.m);
        return {mn, a.s * rescale(a.m, mn) + b.s * rescale(b.m, mn)};
    }
};

// (m, s) of row xr (V): its max and sum of exp(x - m) in one read (lse_push), merged over the row's
// threads (sh: 32 pairs)
template <int VEC, bool WARP, class T>
__device__ __forceinline__ Lse row_lse(const T *xr, int64_t V, const RowWalk<VEC, WARP> &w, Lse *sh) {
    float v[VEC], m = -INFINITY, s = 0.0f;
    for (int64_t i = w.i0(); i < V; i += w.di) {
        dfg_ldn<VEC>(xr, i, v);
        lse_push<VEC>(m, s, v);
    }
    return row_reduce<WARP>(Lse{m, s}, sh, Lse{-INFINITY, 0.0f}, LseMerge());
}

// y (rows, V) = softmax(x) or log_softmax(x) per row
template <class T, int VEC, bool WARP, bool LOG>
__global__ __launch_bounds__(kThreads) void sm_fwd(const T *x /* (rows, V) */, T *y /* (rows, V) */, int64_t rows,
                                                   int64_t V) {
    __shared__ Lse sh[32];
    for (RowWalk<VEC, WARP> w(rows); w.more(); w.next()) {
        const int64_t r = w.row();
        if (w.past(r)) break;
        float v[VEC];
        const Lse t = row_lse(x + r * V, V, w, sh);
        const float m = t.m, s = t.s;
        const float inv = 1.0f / s, ls = logf(s);
        for (int64_t i = w.i0(); i < V; i += w.di) {
            dfg_ldn<VEC>(x + r * V, i, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) v[k] = LOG ? (v[k] - m) - ls : expf(v[k] - m) * inv;
            dfg_stn<VEC>(y + r * V, i, v);
        }
    }
}

// softmax_bwd: dx = y * (dy - sum(dy * y)); log_softmax_bwd: dx = dy - exp(y) * sum(dy)
template <class T, int VEC, bool WARP, bool LOG>
__global__ __launch_bounds__(kThreads) void sm_bwd(const T *dy /* (rows, V) */, const T *y /* (rows, V) */,
                                                   T *dx /* (rows, V) */, int64_t rows, int64_t V) {
    __shared__ double sh[32];
    for (RowWalk<VEC, WARP> w(rows); w.more(); w.next()) {
        const int64_t r = w.row();
        if (w.past(r)) break;
        float a[VEC], b[VEC];
        double acc = 0.0;
        for (int64_t i = w.i0(); i < V; i += w.di) {
            dfg_ldn<VEC>(dy + r * V, i, a);
            if constexpr (!LOG) dfg_ldn<VEC>(y + r * V, i, b);
#pragma unroll
            for (int k = 0; k < VEC; k++) acc += LOG ? (double)a[k] : (double)a[k] * b[k];
        }
        const float s = (float)row_sum<WARP>(acc, sh);
        for (int64_t i = w.i0(); i < V; i += w.di) {
            dfg_ldn<VEC>(dy + r * V, i, a);
            dfg_ldn<VEC>(y + r * V, i, b);
#pragma unroll
            for (int k = 0; k < VEC; k++) a[k] = LOG ? a[k] - expf(b[k]) * s : b[k] * (a[k] - s);
            dfg_stn<VEC>(dx + r * V, i, a);
        }
    }
}

// ---------------------------------------------------------------- entropy
// Adds VEC values to a thread's (m, l, a). A vector whose max exceeds m rescales (l, a) once; -inf
// values add nothing; a NaN makes l and a NaN (it passes the != -inf test; fmaxf ignores it for m).
template <int VEC>
__device__ __forceinline__ void ent_push(float &m, float &l, float &a, const float (&v)[VEC]) {
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < VEC; k++) vm = fmaxf(vm, v[k]);
    if (vm > m) {
        if (m != -INFINITY) { // (l, a) were taken at m: a' = sum e^(x - vm) (x - vm) = sc (a + l d)
            const float d = m - vm, sc = expf(d);
            a = sc * (a + l * d);
            l = sc * l;
        }
        m = vm;
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        if (v[k] == -INFINITY) continue;
        const float d = v[k] - m, e = expf(d);
        l += e;
        a += e * d;
    }
}

// One side of a merge into the max mn: (e l, e (a + l (m - mn))), e = exp(m - mn). A side with
// m = -inf has seen no finite value: its l and a are 0, or NaN from NaN inputs, kept as they are.
__device__ __forceinline__ void ent_side(float m, float l, float a, float mn, float &lo, float &ao) {
    if (m == -INFINITY) {
        lo = l, ao = a;
        return;
    }
    const float d = m - mn, e = expf(d);
    lo = e * l;
    ao = e * (a + l * d);
}
// a thread's, then the row's (m, l, a). Merged symmetrically (each side computed alone, then one
// commutative add), so every lane of a butterfly holds the same bits.
struct Ent {
    float m, l, a;
};
struct EntMerge {
    __device__ __forceinline__ Ent operator()(Ent x, Ent y) const {
        const float mn = fmaxf(x.m, y.m);
        float l1, a1, l2, a2;
        ent_side(x.m, x.l, x.a, mn, l1, a1);
        ent_side(y.m, y.l, y.a, mn, l2, a2);
        return {mn, l1 + l2, a1 + a2};
    }
};

// h (rows) = -sum_j p_j log p_j, p = softmax(z) per row
template <class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void ent_fwd(const T *z /* (rows, V) */, float *h /* (rows) */, int64_t rows,
                                                    int64_t V) {
    __shared__ Ent sh[32];
    for (RowWalk<VEC, WARP> w(rows); w.more(); w.next()) {
        const int64_t r = w.row();
        if (w.past(r)) break;
        const T *zr = z + r * V;
        float v[VEC], m = -INFINITY, l = 0.0f, a = 0.0f;
        for (int64_t i = w.i0(); i < V; i += w.di) {
            dfg_ldn<VEC>(zr, i, v);
            ent_push<VEC>(m, l, a, v);
        }
        const Ent e = row_reduce<WARP>(Ent{m, l, a}, sh, Ent{-INFINITY, 0.0f, 0.0f}, EntMerge());
        if (w.t == 0) h[r] = e.l == 0.0f ? 0.0f : logf(e.l) - e.a / e.l; // l = 0: a row of -inf (NaN stays NaN)
    }
}

// dz (rows, V) = -dH p (log p + H), p = softmax(z) recomputed (log p = z - lse)
template <class T, int VEC, bool WARP>
__global__ __launch_bounds__(kThreads) void ent_bwd(const float *dh /* (rows) */, const T *z /* (rows, V) */,
                                                    const float *hv /* (rows) */, T *dz /* (rows, V) */,
                                                    int64_t rows, int64_t V) {
    __shared__ Lse sh[32];
    for (RowWalk<VEC, WARP> w(rows); w.more(); w.next()) {
        const int64_t r = w.row();
        if (w.past(r)) break;
        float v[VEC];
        // as sm_fwd: the row's (max, sum); every lane takes lane 0's: nvcc may contract the merge
        // into FMAs that make the butterfly's lanes differ in the last bit, and each lane writes
        // its own part of the row
        const Lse t = dfg_shfl(row_lse(z + r * V, V, w, sh), 0);
        const float m = t.m, s = t.s;
        // log p = (x - m) - log s, not x - (m + log s): m + log s would round at the scale of m (a
        // logit of 40: 2e-6), and log p + H cancels where p is large; log s is small exactly there
        const float ls = logf(s), gd = -dh[r], H = hv[r];
        for (int64_t i = w.i0(); i < V; i += w.di) {
            dfg_ldn<VEC>(z + r * V, i, v);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                const float lp = (v[k] - m) - ls, p = expf(lp);
                // m = -inf only in a row of -inf (all p = 0, but x - m is NaN there)
                v[k] = m == -INFINITY || p == 0.0f ? 0.0f : gd * p * (lp + H);
            }
            dfg_stn<VEC>(dz + r * V, i, v);
        }
    }
}

// ---------------------------------------------------------------- host side
template <bool LOG>
dfg_status forward(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx, const char *name) {
    int64_t rows, V;
    rows_of(n->out[0]->shape, &rows, &V);
    if (rows == 0) return DFG_OK;
    if (n->in[0]->dtype != n->out[0]->dtype) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "x and y differ in dtype");
    const bool aligned = dfg_aligned16(in[0]) && dfg_aligned16(out[0]);
    return row_launch(n, ctx, n->in[0], rows, V, aligned, name, [&](auto c, unsigned grid) {
        typedef typename decltype(c)::type T;
        return DFG_LAUNCH((sm_fwd<T, decltype(c)::vec, decltype(c)::warp, LOG>), grid, kThreads, 0,
                          (cudaStream_t)ctx->stream, (const T *)in[0], (T *)out[0], rows, V);
    });
}

template <bool LOG>
dfg_status backward(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx, const char *name) {
    int64_t rows, V;
    rows_of(n->out[0]->shape, &rows, &V);
    if (rows == 0) return DFG_OK;
    if (n->in[0]->dtype != n->in[1]->dtype || n->in[0]->dtype != n->out[0]->dtype)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "dy, y and dx differ in dtype");
    const bool aligned = dfg_aligned16(in[0]) && dfg_aligned16(in[1]) && dfg_aligned16(out[0]);
    return row_launch(n, ctx, n->in[0], rows, V, aligned, name, [&](auto c, unsigned grid) {
        typedef typename decltype(c)::type T;
        return DFG_LAUNCH((sm_bwd<T, decltype(c)::vec, decltype(c)::warp, LOG>), grid, kThreads, 0,
                          (cudaStream_t)ctx->stream, (const T *)in[0], (const T *)in[1], (T *)out[0], rows, V);
    });
}

} // namespace

DFG_CUDA_LAUNCHER(softmax) { return forward<false>(n, in, out, ctx, "softmax"); }
DFG_CUDA_LAUNCHER(log_softmax) { return forward<true>(n, in, out, ctx, "log_softmax"); }
DFG_CUDA_LAUNCHER(softmax_bwd) { return backward<false>(n, in, out, ctx, "softmax_bwd"); }
DFG_CUDA_LAUNCHER(log_softmax_bwd) { return backward<true>(n, in, out, ctx, "log_softmax_bwd"); }

// z (..., V) -> H (...) f32
DFG_CUDA_LAUNCHER(entropy) {
    int64_t rows, V;
    rows_of(n->in[0]->shape, &rows, &V);
    if (rows == 0) return DFG_OK;
    if (n->out[0]->dtype != DFG_F32) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "H must be f32");
    return row_launch(n, ctx, n->in[0], rows, V, dfg_aligned16(in[0]), "entropy", [&](auto c, unsigned grid) {
        typedef typename decltype(c)::type T;
        return DFG_LAUNCH((ent_fwd<T, decltype(c)::vec, decltype(c)::warp>), grid, kThreads, 0,
                          (cudaStream_t)ctx->stream, (const T *)in[0], (float *)out[0], rows, V);
    });
}

// (dH (...) f32, z (..., V), H (...) f32) -> dz (..., V) of z's dtype
DFG_CUDA_LAUNCHER(entropy_bwd) {
    int64_t rows, V;
    rows_of(n->in[1]->shape, &rows, &V);
    if (rows == 0) return DFG_OK;
    if (n->in[0]->dtype != DFG_F32 || n->in[2]->dtype != DFG_F32 || n->out[0]->dtype != n->in[1]->dtype)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "dH and H must be f32, dz of the logits' dtype");
    const bool aligned = dfg_aligned16(in[1]) && dfg_aligned16(out[0]);
    return row_launch(n, ctx, n->in[1], rows, V, aligned, "entropy_bwd", [&](auto c, unsigned grid) {
        typedef typename decltype(c)::type T;
        return DFG_LAUNCH((ent_bwd<T, decltype(c)::vec, decltype(c)::warp>), grid, kThreads, 0,
                          (cudaStream_t)ctx->stream, (const float *)in[0], (const T *)in[1], (const float *)in[2],
                          (T *)out[0], rows, V);
    });
}
