// logprob.cu - the fused log-probability ops (ops/logprob.c; reference kernels ops/cpu/logprob.c).
//
//   logprob, logprob_bwd         a row of logits (rows, V) per warp (V <= 2048: 8 rows a block) or per
//                                block of 256 threads; one pass over the row (online log-sum-exp: one
//                                exp per logit), 16-byte loads after a scalar head up to the first
//                                16-byte boundary, so odd vocabularies (GPT-2's 50257) still vectorize.
//   linear_logprob(_bwd)         the lm_head fused in: the vocabulary is walked in chunks of
//                                (rows_chunk, v_chunk) through the planned workspace out[2]; per chunk
//                                the logits come from ctx->gemm, then ONE kernel does the online
//                                log-sum-exp, the entropy's sum and the gather of the target (forward)
//                                or the softmax gradient, with the entropy's when the node has 7 or 8
//                                inputs, in place (backward), then GEMMs add into dh and dW.
//
// Results do not depend on v_chunk (the CPU kernel's promise, kept here): every reduction over
// the vocabulary is split at fixed blocks of DFG_LOGPROB_V_BLOCK (256) entries, which every chunk
// boundary respects. The logits and dW GEMMs run per 256-entry block (one batched GEMM for a
// chunk's full blocks, one for its tail); a row's log-sum-exp takes each block's (max, sum) by a
// fixed warp tree, then folds the blocks into the row's running (max, sum) strictly in vocabulary
// order, one thread per row; dh sums the blocks one GEMM at a time (beta 1) in that order. The
// running max lives in the lse output, the running sum in this node's scratch, between chunks.
// The entropy H = log l - a / l rides along: a = sum exp(x - m)(x - m) is taken per block with its
// (max, sum) and folded with the same rescaling (ops/cpu/cpu.h's dfg_row_stats), its running value
// in the scratch beside the sum.
//
// In a batch-invariant plan (ctx->invariant) the chunks' logits come from invariant.cu's GEMM
// (decode's lm_head order, rounded as the lm_head's output), and logprob runs the same chunk
// kernel over its whole row of logits: decode's sampled log-probs and training's are the same
// float. The block statistics and folds round every product and sum explicitly (no contraction),
// so that kernel's two instantiations (f32 and bf16 logits) round alike.
#include "common.cuh"
#include "invariant.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kVBlock = DFG_LOGPROB_V_BLOCK; // one warp's reduction block: 32 lanes x 8 entries
static_assert(kVBlock == 256, "vblock_stats gives each of 32 lanes 8 entries of a vocabulary block");
constexpr int kWarpRowMax = 2048; // logprob(_bwd): a warp per row up to this vocabulary, a block above

// ---------------------------------------------------------------- online log-sum-exp
// (m, l): a running max and the sum of exp(x - m). -inf entries add nothing (a masked logit); NaN
// entries make l NaN.
static __device__ __forceinline__ void lse_push(float &m, float &l, float x) {
    if (x > m) {
        l = l * expf(m - x) + 1.0f;
        m = x;
    } else if (x != -INFINITY) {
        l += expf(x - m);
    }
}
// a running (max m, sum l of exp(x - m)); merged symmetrically (the larger max first), so every
// lane of a butterfly holds the same bits
struct Lse {
    float m, l;
};
struct LseMerge {
    __device__ __forceinline__ Lse operator()(Lse a, Lse b) const {
        if (b.m > a.m) {
            const Lse t = a;
            a = b, b = t;
        }
        return {a.m, a.l + (b.m == -INFINITY ? b.l * 0.0f : b.l * expf(b.m - a.m))};
    }
};

static __device__ __forceinline__ void flag(int *flags) { atomicOr(flags, 1); }

// A row's end: its log-sum-exp L = m + log l to *lse_out and logp = xt(tr) - L, xt(tr) the target's
// scaled logit; NaN (and the flag) for a target outside [0, v).
template <class F>
static __device__ __forceinline__ void row_logp(float m, float l, const int32_t *tr_at, int64_t v, float *lse_out,
                                                float *logp, int *flags, F xt) {
    const float L = m + logf(l);
    const int32_t tr = *tr_at;
    *lse_out = L;
    if (tr < 0 || tr >= v) {
        flag(flags);
        *logp = NAN;
    } else {
        *logp = xt(tr) - L;
    }
}

// ---------------------------------------------------------------- logprob
// logp = z[t] * s - lse, lse = log sum exp(z * s) per row. G threads a row (32: 8 rows a block).
template <class T, int G>
static __global__ void __launch_bounds__(kThreads)
    logprob_kernel(const T *z,        // (rows, V)
                   const int32_t *t,  // (rows)
                   float *logp,       // (rows)
                   float *lse,        // (rows)
                   int64_t rows, int64_t v, float s,
                   int *flags) {      // (1) set on a target outside [0, V)
    constexpr int RPB = kThreads / G;
    const int64_t r = (int64_t)blockIdx.x * RPB + threadIdx.x / G;
    const int g = threadIdx.x % G;
    float m = -INFINITY, l = 0.0f;
    if (r < rows) dfg_row_visit<T, G, true>(z + r * v, v, g, [&](int64_t, float x) { lse_push(m, l, x * s); });
    Lse a = {m, l};
    if constexpr (G > 32) { // the block's warps
        __shared__ Lse sh[32];
        a = dfg_block_reduce<G / 32>(a, sh, Lse{-INFINITY, 0.0f}, LseMerge());
    } else {
        a = dfg_warp_reduce(a, LseMerge());
    }
    if (r < rows && g == 0)
        row_logp(a.m, a.l, t + r, v, lse + r, logp + r, flags, [&](int32_t tr) { return dfg_ld(z + r * v, tr) * s; });
}

// dz = g s (onehot(t) - softmax(z s)), g = dy; rows with g s == 0 are 0 (as the CPU writes them).
template <class T, int G, bool VEC>
static __global__ void __launch_bounds__(kThreads)
    logprob_bwd_kernel(const float *dy,    // (rows)
                       const T *z,         // (rows, V)
                       const int32_t *t,   // (rows)
                       const float *lse,   // (rows)
                       T *dz,              // (rows, V)
                       int64_t rows, int64_t v, float s,
                       int *flags) {       // (1) set on a target outside [0, V)
    constexpr int RPB = kThreads / G;
    const int64_t r = (int64_t)blockIdx.x * RPB + threadIdx.x / G;
    const int g = threadIdx.x % G;
    if (r >= rows) return; // no barrier below
    const float gs = dy[r] * s, L = lse[r];
    const int32_t tr = t[r];
    if (g == 0 && (tr < 0 || tr >= v)) flag(flags);
    dfg_row_map<T, G, VEC>(z + r * v, dz + r * v, v, g, [&](int64_t j, float x) {
        if (gs == 0.0f) return 0.0f;
        float d = -gs * expf(x * s - L);
        if (j == tr) d += gs;
        return d;
    });
}

// ---------------------------------------------------------------- linear_logprob: per chunk
// One vocabulary block (256 entries from j0, fewer at the end of the chunk) of a chunk row: its max
// mb of x = logit * s, lb = sum exp(x - mb) and ab = sum exp(x - mb) (x - mb), by one warp. Lane l
// owns entries 8l .. 8l+7 (two 16-byte loads when the row is aligned; the same values either way),
// reduced by fixed butterflies: the same bits whatever chunk the block came in. An all -inf block
// gives (-inf, 0, 0).
template <class L>
static __device__ __forceinline__ void vblock_stats(const L *row, // (vc) one chunk row's logits
                                                    int64_t j0, int64_t vc, bool vec, float s, float &mb,
                                                    float &lb, float &ab) {
    const int64_t j = j0 + (int64_t)(threadIdx.x & 31) * 8;
    float x[8];
    if (vec && j + 8 <= vc) {
        dfg_ld16(row + j, x); // 4 f32 or 8 bf16
        if constexpr (sizeof(L) == 4) dfg_ld16(row + j + 4, x + 4);
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = __fmul_rn(x[i], s);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = j + i < vc ? __fmul_rn(dfg_ld(row, j + i), s) : -INFINITY;
    }
    float m = x[0];
#pragma unroll
    for (int i = 1; i < 8; i++) m = fmaxf(m, x[i]);
    m = dfg_warp_max(m);
    float l = 0.0f, a = 0.0f;
    if (m != -INFINITY) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float d = __fadd_rn(x[i], -m), e = expf(d);
            l = __fadd_rn(l, e);
            if (x[i] != -INFINITY) a = __fadd_rn(a, __fmul_rn(e, d)); // a -inf entry: 0 * -inf would be NaN
        }
    }
    mb = m;
    lb = dfg_warp_sum(l);
    ab = dfg_warp_sum(a);
}

// Folds a block's (mb, lb, ab) into a row's running (m, l, a); the order of the folds is the
// vocabulary's. Merging (m1, l1, a1) and (m2, l2, a2) at m = max: l = e1 l1 + e2 l2 and
// a = e1 (a1 + l1 (m1 - m)) + e2 (a2 + l2 (m2 - m)), e_i = exp(m_i - m).
static __device__ __forceinline__ void lse_fold(float &m, float &l, float &a, float mb, float lb, float ab) {
    if (mb == -INFINITY) return;
    if (mb > m) {
        if (m == -INFINITY) { // nothing yet (l = a = 0): l * (m - mb) would be 0 * -inf
            a = ab;
        } else {
            const float d = __fadd_rn(m, -mb);
            a = __fadd_rn(__fmul_rn(expf(d), __fadd_rn(a, __fmul_rn(l, d))), ab);
        }
        l = __fadd_rn(__fmul_rn(l, expf(__fadd_rn(m, -mb))), lb);
        m = mb;
    } else {
        const float d = __fadd_rn(mb, -m), e = expf(d);
        a = __fadd_rn(a, __fmul_rn(e, __fadd_rn(ab, __fmul_rn(lb, d))));
        l = __fadd_rn(l, __fmul_rn(lb, e));
    }
}

// A chunk (rc, vc) of logits at vocabulary offset v0: a block per row. Warps take the row's
// vocabulary blocks round by round (kRound at a time), thread 0 folds them in order into the running
// (m, l, a) (the first chunk starts from (-inf, 0, 0)); thread 0 also gathers the target's logit * s
// into logp and, at the last chunk, writes lse = m + log l, logp -= lse and the entropy
// log l - a / l (0 for a row of -inf logits, whose l is 0). The rounds alternate between
// two buffers, so one barrier a round suffices: a warp writing round k+2's buffer has passed round
// k+1's barrier, which thread 0 reaches only after folding round k.
constexpr int kRound = 256;
template <class L>
static __global__ void __launch_bounds__(kThreads)
    lse_chunk_kernel(const L *ws,          // (rc, vc) the chunk's logits, rows vc apart
                     int64_t vc, bool vec, // vec: rows 16-byte aligned
                     const int32_t *t,     // (rc) the chunk rows' targets
                     int64_t v0, int64_t v, float s,
                     float *run_m,         // (rc) running max; at the end the log-sum-exp (lse output)
                     float *run_l,         // (rc) running sum (scratch)
                     float *run_a,         // (rc) running entropy sum a (scratch)
                     float *logp,          // (rc)
                     float *ent,           // (rc) the entropy output, written at the last chunk (or NULL)
                     bool first, bool last,
                     int *flags) {         // (1) set on a target outside [0, V)
    __shared__ float bm[2][kRound], bl[2][kRound], ba[2][kRound];
    const int64_t r = blockIdx.x;
    const L *row = ws + r * vc;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = kThreads / 32;
    float m = -INFINITY, l = 0.0f, a = 0.0f; // thread 0's running state
    if (threadIdx.x == 0) {
        if (!first) m = run_m[r], l = run_l[r], a = run_a[r];
        const int64_t tj = (int64_t)t[r] - v0;
        if (tj >= 0 && tj < vc) logp[r] = __fmul_rn(dfg_ld(row, tj), s);
    }
    const int64_t nb = (vc + kVBlock - 1) / kVBlock;
    for (int64_t b0 = 0, k = 0; b0 < nb; b0 += kRound, k ^= 1) {
        const int nr = (int)(nb - b0 < kRound ? nb - b0 : kRound);
        for (int i = warp; i < nr; i += warps) { // warp-uniform loop: the butterflies see 32 lanes
            float mb, lb, ab;
            vblock_stats(row, (b0 + i) * kVBlock, vc, vec, s, mb, lb, ab);
            if (lane == 0) bm[k][i] = mb, bl[k][i] = lb, ba[k][i] = ab;
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < nr; i++) lse_fold(m, l, a, bm[k][i], bl[k][i], ba[k][i]);
    }
    if (threadIdx.x == 0) {
        if (!last) {
            run_m[r] = m, run_l[r] = l, run_a[r] = a;
            return;
        }
        if (ent) ent[r] = l == 0.0f ? 0.0f : logf(l) - a / l;
        row_logp(m, l, t + r, v, run_m + r, logp + r, flags, [&](int32_t) { return logp[r]; });
    }
}

// The chunk's softmax gradient from its logits: dz = g s (onehot(t) - exp(x s - lse)), g = dy, a
// block per row; ENT adds the entropy's, -gh s p (log p + H) with gh = dentropy and log p = x s - lse,
// as dz = -p (g s + gh s (x s - lse + H)) + g s onehot(t), and 0 where p is 0 (ops/cpu/logprob.c's
// form, term for term). O = float writes it over the logits in place (dz == ws); O = bf16 writes
// the bf16 copy the GEMMs of a bf16 node take. VEC: 4 at a time (vc % 4 == 0, rows aligned).
template <class O, bool VEC, bool ENT>
static __global__ void __launch_bounds__(kThreads)
    grad_chunk_kernel(const float *ws,    // (rc, vc) the chunk's logits
                      O *dz,              // (rc, vc) may be ws
                      int64_t vc,
                      const float *dy,    // (rc)
                      const float *lse,   // (rc)
                      const float *dent,  // (rc) the entropy's gradient (ENT), else unused
                      const float *hent,  // (rc) the entropy (ENT), else unused
                      const int32_t *t,   // (rc)
                      int64_t v0, int64_t v, float s,
                      int *flags) {       // (1) set on a target outside [0, V) (first chunk)
    const int64_t r = blockIdx.x;
    const float g = dy[r] * s, L = lse[r];
    const float gh = ENT ? dent[r] * s : 0.0f, hl = ENT ? hent[r] - L : 0.0f; // log p + H = x s + hl
    const auto grad = [&](float logit) {
        if constexpr (ENT) {
            const float xs = logit * s, p = expf(xs - L);
            return p == 0.0f ? 0.0f : -p * (g + gh * (xs + hl));
        } else {
            return -g * expf(logit * s - L);
        }
    };
    const int32_t tr = t[r];
    const int64_t tj = (int64_t)tr - v0;
    if (v0 == 0 && threadIdx.x == 0 && (tr < 0 || tr >= v)) flag(flags);
    const float *x = ws + r * vc;
    O *d = dz + r * vc;
    if (VEC) {
        for (int64_t q = threadIdx.x; q < vc / 4; q += kThreads) {
            float a[4];
            dfg_ld16(x + 4 * q, a); // read before write: d may be x
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = grad(a[i]);
                if (4 * q + i == tj) a[i] += g;
            }
            dfg_st4(d + 4 * q, make_float4(a[0], a[1], a[2], a[3]));
        }
    } else {
        for (int64_t j = threadIdx.x; j < vc; j += kThreads) {
            float a = grad(x[j]);
            if (j == tj) a += g;
            dfg_st(d, j, a);
        }
    }
}

// y = x (f32 -> T), grid-stride; 4 at a time when count and pointers allow.
template <class T, bool VEC>
static __global__ void __launch_bounds__(kThreads) store_f32_kernel(T *y,          // (count)
                                                                    const float *x, // (count)
                                                                    int64_t count) {
    if (VEC) {
        for (int64_t q = dfg_thread_index(); q < count / 4; q += dfg_grid_threads())
            dfg_st4(y + 4 * q, dfg_ld4(x + 4 * q));
    } else {
        for (int64_t i = dfg_thread_index(); i < count; i += dfg_grid_threads()) dfg_st(y, i, x[i]);
    }
}

// ---------------------------------------------------------------- host: shapes, GEMMs
const void *at(const void *p, int64_t elems, size_t esz) { return (const char *)p + (size_t)elems * esz; }
void *at(void *p, int64_t elems, size_t esz) { return (char *)p + (size_t)elems * esz; }
size_t round256(size_t b) { return (b + 255) / 256 * 256; }

// rows and vocabulary of logits (..., V)
// logprob(_bwd)'s rows of logits z (rows, v): G threads a row, G = 32 (8 rows a block) when warp
struct lp_rows {
    int64_t rows, v;
    float s; // the inverse temperature
    bool warp;
    unsigned grid;
};
lp_rows lp_rows_of(const dfg_node *n, const dfg_tensor *z) {
    lp_rows p;
    p.v = z->shape.d[z->shape.rank - 1];
    p.rows = dfg_shape_numel(z->shape) / p.v;
    p.s = n->attr->logprob.inv_temp;
    p.warp = p.v <= kWarpRowMax;
    const int64_t rpb = p.warp ? kThreads / 32 : 1;
    p.grid = (unsigned)((p.rows + rpb - 1) / rpb);
    return p;
}

dfg_status check_float(dfg_cuda_ctx *ctx, const dfg_node *n, const dfg_tensor *t) {
    if (t->dtype == DFG_F32 || t->dtype == DFG_BF16) return DFG_OK;
    return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "'%s' is %s; the CUDA kernels take f32 and bf16", t->name,
                         dfg_dtype_name(t->dtype));
}

// A linear_logprob node's sizes (as ops/cpu/logprob.c's lin_of): hidden (rows, C), vocabulary V.
struct lin_dims {
    int64_t rows, c, v, rc, vc;
    bool tb;
    float s;
    dfg_dtype ht; // hidden's and the weight's dtype
};

lin_dims lin_of(const dfg_node *n, const dfg_tensor *h, const dfg_tensor *w) {
    lin_dims d;
    d.c = h->shape.d[h->shape.rank - 1];
    d.rows = dfg_shape_numel(h->shape) / d.c;
    d.tb = n->attr->logprob.trans_b;
    d.v = d.tb ? w->shape.d[0] : w->shape.d[1];
    d.rc = n->attr->logprob.rows_chunk;
    d.vc = n->attr->logprob.v_chunk;
    d.s = n->attr->logprob.inv_temp;
    d.ht = h->dtype;
    return d;
}

dfg_status check_lin(dfg_cuda_ctx *ctx, const dfg_node *n, const lin_dims &d, const dfg_tensor *w, size_t scratch) {
    dfg_status st = check_float(ctx, n, n->in[n->op == DFG_OP_LINEAR_LOGPROB ? 0 : 1]);
    if (st) return st;
    if (w->dtype != d.ht) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "the weight's dtype differs from the hidden states'");
    if (d.rc < 1 || d.rc > d.rows || d.rc > DFG_LOGPROB_MAX_ROWS || d.vc < 1 || d.vc > d.v ||
        (d.vc != d.v && d.vc % kVBlock != 0))
        return dfg_cuda_fail(ctx, n, DFG_ERR_ARG, "chunks (%lld, %lld) outside (rows %lld, V %lld) or not blocks of %d",
                             (long long)d.rc, (long long)d.vc, (long long)d.rows, (long long)d.v, kVBlock);
    if (!ctx->gemm) return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "no GEMM implementation in this context");
    if (ctx->scratch_bytes < scratch || (scratch && !ctx->scratch))
        return dfg_cuda_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes, %zu needed", ctx->scratch_bytes, scratch);
    return DFG_OK;
}

// Row-major C (M, N) = op(A) (M, K) op(B) (K, N) + beta C, `batch` times with A, B, C sa, sb, sc
// elements further each time (0: shared), through the context's GEMM.
struct rm_operand {
    const void *p;
    int64_t ld, stride;
};
dfg_status rm_gemm(dfg_cuda_ctx *ctx, const dfg_node *n, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                   rm_operand A, rm_operand B, void *C, int64_t ldc, int64_t sc, int64_t batch, dfg_dtype ab,
                   dfg_dtype ct, float beta) {
    dfg_gemm_desc d = dfg_gemm_row_major(M, N, K, ta, tb, A.ld, B.ld, ldc, ab, ct, 1.0f, beta);
    d.batch = batch;
    d.stride_a = B.stride; // the descriptor's A is the row-major B (gemm.h)
    d.stride_b = A.stride;
    d.stride_c = sc;
    dfg_status st = ctx->gemm(ctx, &d, B.p, A.p, C, NULL);
    if (!st) return DFG_OK;
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", ctx->err ? ctx->err : "");
    return dfg_cuda_fail(ctx, n, st, "%s", msg);
}

// ws (rc, vc) = h[r0 .. r0+rc) @ W[v0 .. v0+vc)^T, the chunk's logits (f32) before temperature: one
// batched GEMM over the chunk's full 256-entry blocks, one more for its tail (as the CPU's GEMMs).
dfg_status chunk_logits(dfg_cuda_ctx *ctx, const dfg_node *n, const lin_dims &d, const void *h, const void *w,
                        int64_t r0, int64_t rc, int64_t v0, int64_t vc, float *ws) {
    if (ctx->invariant) // decode's lm_head order (invariant.cu), the forward's and the backward's
        return DFG_CUDA_FN(inv_chunk_logits)(ctx, n, h, w, d.ht, d.tb, d.c, d.v, r0, rc, v0, vc, ws);
    const size_t e = dfg_dtype_size(d.ht);
    const int64_t full = vc / kVBlock, tail = vc % kVBlock;
    const rm_operand hA = {at(h, r0 * d.c, e), d.c, 0};
    for (int part = 0; part < 2; part++) {
        const int64_t j0 = part ? full * kVBlock : 0, kb = part ? tail : kVBlock, batch = part ? 1 : full;
        if (!kb || !batch) continue;
        // W (V, C): rows v0+j0 .., transposed; W (C, V): columns v0+j0 ..
        const rm_operand wB = d.tb ? rm_operand{at(w, (v0 + j0) * d.c, e), d.c, kVBlock * d.c}
                                   : rm_operand{at(w, v0 + j0, e), d.v, kVBlock};
        dfg_status st = rm_gemm(ctx, n, rc, kb, d.c, false, d.tb, hA, wB, ws + j0, vc, kVBlock, batch, d.ht, DFG_F32, 0.0f);
        if (st) return st;
    }
    return DFG_OK;
}

} // namespace

// ---------------------------------------------------------------- launchers
DFG_CUDA_SCRATCH(logprob) {
    (void)n;
    return 0;
}
DFG_CUDA_SCRATCH(logprob_bwd) {
    (void)n;
    return 0;
}

DFG_CUDA_LAUNCHER(logprob) {
    const lp_rows p = lp_rows_of(n, n->in[0]);
    cudaError_t e = cudaSuccess;
    if (p.rows == 0) return DFG_OK;
    if (ctx->invariant) { // linear_logprob's chunk kernel over the whole row: training's sums, in its order
        DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T, {
            const bool vec = (p.v * (int64_t)sizeof(T)) % 16 == 0 && dfg_aligned16(in[0]);
            e = DFG_LAUNCH(lse_chunk_kernel<T>, (unsigned)p.rows, kThreads, 0, (cudaStream_t)ctx->stream,
                           (const T *)in[0], p.v, vec, (const int32_t *)in[1], (int64_t)0, p.v, p.s, (float *)out[1],
                           (float *)nullptr, (float *)nullptr, (float *)out[0], (float *)nullptr, true, true,
                           ctx->flags);
        });
        return dfg_cuda_launched(ctx, n, e, "lse_chunk_kernel");
    }
#define DFG_LP_FWD(G)                                                                                              \
    e = DFG_LAUNCH((logprob_kernel<T, G>), p.grid, kThreads, 0, (cudaStream_t)ctx->stream, (const T *)in[0],       \
                   (const int32_t *)in[1], (float *)out[0], (float *)out[1], p.rows, p.v, p.s, ctx->flags)
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T, {
        if (p.warp) DFG_LP_FWD(32);
        else DFG_LP_FWD(kThreads);
    });
#undef DFG_LP_FWD
    return dfg_cuda_launched(ctx, n, e, "logprob_kernel");
}

DFG_CUDA_LAUNCHER(logprob_bwd) {
    const lp_rows p = lp_rows_of(n, n->in[1]);
    // rows of z and dz start equally far from a 16-byte boundary when their bases do
    const bool vec = ((uintptr_t)in[1] - (uintptr_t)out[0]) % 16 == 0;
    cudaError_t e = cudaSuccess;
    if (n->out[0]->dtype != n->in[1]->dtype)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "dlogits must have the logits' dtype");
    if (p.rows == 0) return DFG_OK;
#define DFG_LP_BWD(G, VEC)                                                                                        \
    e = DFG_LAUNCH((logprob_bwd_kernel<T, G, VEC>), p.grid, kThreads, 0, (cudaStream_t)ctx->stream,               \
                   (const float *)in[0], (const T *)in[1], (const int32_t *)in[2], (const float *)in[3], (T *)out[0], \
                   p.rows, p.v, p.s, ctx->flags)
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[1], T, {
        if (p.warp && vec) DFG_LP_BWD(32, true);
        else if (p.warp) DFG_LP_BWD(32, false);
        else if (vec) DFG_LP_BWD(kThreads, true);
        else DFG_LP_BWD(kThreads, false);
    });
#undef DFG_LP_BWD
    return dfg_cuda_launched(ctx, n, e, "logprob_bwd_kernel");
}

// the running sums l and a of a row chunk
DFG_CUDA_SCRATCH(linear_logprob) { return 2 * sizeof(float) * (size_t)n->attr->logprob.rows_chunk; }

DFG_CUDA_LAUNCHER(linear_logprob) {
    const lin_dims d = lin_of(n, n->in[0], n->in[1]);
    dfg_status st = check_lin(ctx, n, d, n->in[1], DFG_CUDA_FN(scratch_linear_logprob)(n));
    if (st) return st;
    const int32_t *t = (const int32_t *)in[2];              // (rows)
    float *logp = (float *)out[0], *lse = (float *)out[1]; // (rows), (rows)
    float *ws = (float *)out[2], *ent = (float *)out[3];   // (rc, vc), (rows)
    float *run_l = (float *)ctx->scratch, *run_a = run_l + d.rc; // (rc), (rc)
    for (int64_t r0 = 0; r0 < d.rows; r0 += d.rc) {
        const int64_t rc = d.rows - r0 < d.rc ? d.rows - r0 : d.rc;
        for (int64_t v0 = 0; v0 < d.v; v0 += d.vc) {
            const int64_t vc = d.v - v0 < d.vc ? d.v - v0 : d.vc;
            if ((st = chunk_logits(ctx, n, d, in[0], in[1], r0, rc, v0, vc, ws))) return st;
            cudaError_t e = DFG_LAUNCH(lse_chunk_kernel<float>, (unsigned)rc, kThreads, 0, (cudaStream_t)ctx->stream, ws, vc,
                                       vc % 4 == 0 && dfg_aligned16(ws), t + r0, v0, d.v, d.s, lse + r0, run_l, run_a,
                                       logp + r0, ent + r0, v0 == 0, v0 + vc >= d.v, ctx->flags);
            if ((st = dfg_cuda_launched(ctx, n, e, "lse_chunk_kernel"))) return st;
        }
    }
    return DFG_OK;
}

// bf16 nodes: dh summed in f32 (rc, C) before its one rounding, and the chunk's dz as bf16 (rc, vc)
// for the bf16 GEMMs (cuBLASLt takes A and B of one type); f32 nodes need nothing.
DFG_CUDA_SCRATCH(linear_logprob_bwd) {
    const dfg_tensor *h = n->in[1];
    if (h->dtype == DFG_F32) return 0;
    const int64_t c = h->shape.d[h->shape.rank - 1], rc = n->attr->logprob.rows_chunk, vc = n->attr->logprob.v_chunk;
    return round256(sizeof(float) * (size_t)(rc * c)) + sizeof(__nv_bfloat16) * (size_t)(rc * vc);
}

DFG_CUDA_LAUNCHER(linear_logprob_bwd) {
    const lin_dims d = lin_of(n, n->in[1], n->in[2]);
    dfg_status st = check_lin(ctx, n, d, n->in[2], DFG_CUDA_FN(scratch_linear_logprob_bwd)(n));
    if (st) return st;
    // 5 inputs; 6: + the accumulator; 7: + dentropy, entropy; 8: both (the accumulator last)
    const bool f32 = d.ht == DFG_F32, acc = n->n_in == 6 || n->n_in == 8, ent = n->n_in >= 7;
    const bool want_dw = !n->attr->logprob.no_dweight; // else dw is a one-float stand-in (a frozen lm_head)
    const void *acc_in = acc ? in[n->n_in - 1] : NULL;                  // W's shape
    const size_t e = dfg_dtype_size(d.ht);
    const float *dy = (const float *)in[0], *lse = (const float *)in[4]; // (rows), (rows)
    const float *dent = ent ? (const float *)in[5] : NULL;               // (rows) the entropy's gradient
    const float *hent = ent ? (const float *)in[6] : NULL;               // (rows) the entropy
    const void *h = in[1], *w = in[2];                                  // (rows, C), (V, C) or (C, V)
    const int32_t *t = (const int32_t *)in[3];                           // (rows)
    void *dh = out[0], *dw = out[1];                                     // (rows, C), W's shape
    float *ws = (float *)out[2];                                         // (rc, vc)
    float *dh_acc = f32 ? NULL : (float *)ctx->scratch;                  // (rc, C) bf16 nodes
    __nv_bfloat16 *dz16 = f32 ? NULL                                     // (rc, vc) bf16 nodes
                              : (__nv_bfloat16 *)at(ctx->scratch, (int64_t)round256(sizeof(float) * (size_t)(d.rc * d.c)), 1);
    const cudaStream_t stream = (cudaStream_t)ctx->stream;
    cudaError_t ce;
    if (want_dw && acc && out[1] != acc_in) { // the accumulator's value first (a plan always passes it in place)
        ce = DFG_CUDA_FN(copy_bytes)(dw, acc_in, (size_t)(d.v * d.c) * e, ctx);
        if ((st = dfg_cuda_launched(ctx, n, ce, "copy_bytes"))) return st;
    }
    for (int64_t r0 = 0; r0 < d.rows; r0 += d.rc) {
        const int64_t rc = d.rows - r0 < d.rc ? d.rows - r0 : d.rc;
        void *dh_c = f32 ? at(dh, r0 * d.c, e) : (void *)dh_acc; // this row chunk's dh sums (f32)
        for (int64_t v0 = 0; v0 < d.v; v0 += d.vc) {
            const int64_t vc = d.v - v0 < d.vc ? d.v - v0 : d.vc;
            if ((st = chunk_logits(ctx, n, d, h, w, r0, rc, v0, vc, ws))) return st;
            // ws becomes dz (f32 in place), or dz16 (bf16)
            const bool vec = vc % 4 == 0 && dfg_aligned16(ws) && (f32 || dfg_aligned16(dz16));
#define DFG_LP_GRAD(O, VEC, DZ)                                                                                   \
    ce = ent ? DFG_LAUNCH((grad_chunk_kernel<O, VEC, true>), (unsigned)rc, kThreads, 0, stream, (const float *)ws, DZ,  \
                          vc, dy + r0, lse + r0, dent + r0, hent + r0, t + r0, v0, d.v, d.s, ctx->flags)                \
             : DFG_LAUNCH((grad_chunk_kernel<O, VEC, false>), (unsigned)rc, kThreads, 0, stream, (const float *)ws, DZ, \
                          vc, dy + r0, lse + r0, dent, hent, t + r0, v0, d.v, d.s, ctx->flags)
            if (f32 && vec) DFG_LP_GRAD(float, true, ws);
            else if (f32) DFG_LP_GRAD(float, false, ws);
            else if (vec) DFG_LP_GRAD(__nv_bfloat16, true, dz16);
            else DFG_LP_GRAD(__nv_bfloat16, false, dz16);
#undef DFG_LP_GRAD
            if ((st = dfg_cuda_launched(ctx, n, ce, "grad_chunk_kernel"))) return st;
            const void *dz = f32 ? (const void *)ws : (const void *)dz16;
            // dh (rc, C) += dz @ W_c^T: one GEMM per 256-entry block, in vocabulary order, so the sums
            // do not depend on v_chunk (the first block of the row chunk starts them: beta 0)
            for (int64_t j0 = 0; j0 < vc; j0 += kVBlock) {
                const int64_t kb = vc - j0 < kVBlock ? vc - j0 : kVBlock;
                const rm_operand dzA = {at(dz, j0, e), vc, 0};
                const rm_operand wB = d.tb ? rm_operand{at(w, (v0 + j0) * d.c, e), d.c, 0}
                                           : rm_operand{at(w, v0 + j0, e), d.v, 0};
                const float beta = v0 == 0 && j0 == 0 ? 0.0f : 1.0f;
                if ((st = rm_gemm(ctx, n, rc, d.c, kb, false, !d.tb, dzA, wB, dh_c, d.c, 0, 1, d.ht, DFG_F32, beta)))
                    return st;
            }
            // dW[v0 ..] += dz^T h_c (W (V, C)) or h_c^T dz (W (C, V)): batched over the full blocks, then
            // the tail; the first row chunk starts dW unless it accumulates into the buffer
            const float beta = r0 == 0 && !acc ? 0.0f : 1.0f;
            const int64_t full = vc / kVBlock, tail = vc % kVBlock;
            for (int part = 0; want_dw && part < 2; part++) {
                const int64_t j0 = part ? full * kVBlock : 0, kb = part ? tail : kVBlock, batch = part ? 1 : full;
                if (!kb || !batch) continue;
                const rm_operand dzb = {at(dz, j0, e), vc, kVBlock}, hc = {at(h, r0 * d.c, e), d.c, 0};
                if (d.tb)
                    st = rm_gemm(ctx, n, kb, d.c, rc, true, false, dzb, hc, at(dw, (v0 + j0) * d.c, e), d.c,
                                 kVBlock * d.c, batch, d.ht, d.ht, beta);
                else
                    st = rm_gemm(ctx, n, d.c, kb, rc, true, false, hc, dzb, at(dw, v0 + j0, e), d.v, kVBlock, batch,
                                 d.ht, d.ht, beta);
                if (st) return st;
            }
        }
        if (!f32) { // the row chunk's dh, rounded once
            const int64_t count = rc * d.c;
            __nv_bfloat16 *y = (__nv_bfloat16 *)at(dh, r0 * d.c, e);
            const bool vec = count % 4 == 0 && (uintptr_t)y % 8 == 0 && dfg_aligned16(dh_acc);
            if (vec)
                ce = DFG_LAUNCH((store_f32_kernel<__nv_bfloat16, true>), dfg_grid_for(count / 4, kThreads, ctx),
                                kThreads, 0, stream, y, (const float *)dh_acc, count);
            else
                ce = DFG_LAUNCH((store_f32_kernel<__nv_bfloat16, false>), dfg_grid_for(count, kThreads, ctx), kThreads,
                                0, stream, y, (const float *)dh_acc, count);
            if ((st = dfg_cuda_launched(ctx, n, ce, "store_f32_kernel"))) return st;
        }
    }
    return DFG_OK;
}
