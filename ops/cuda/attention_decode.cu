// attention_decode.cu - attention_cached on the GPU: queries of B sequences at positions
// pos .. pos+Tq-1 against KV caches (B, Tmax, Hkv*D) (ops/attention.c); pos is one i32 for every
// row, or (B) one a row (rows of a multi-turn rollout stand at different columns).
//
// Memory-bound decoding (flash-decoding): a block per (b, query head, query, split of 256 cache
// positions) stages keys through shared memory, keeps a running max/sum and an unnormalised
// output; a combine kernel merges the splits in order. The position is read on the device. With
// grouped-query caches (Hkv < H KV heads) a block serves up to 8 query heads of one KV head, so
// each cache row is read once per group, not once per query head.
//
// Left padding (start (B): each row's first real column): a query at column c >= start sees
// cache rows start .. c, one at a pad column rows 0 .. c. The start is the lower end of the
// blocks' key range: the splits wholly before it return at once and the combine skips them.
#include "attention_common.cuh"
#include "invariant.cuh"

namespace {

// Query heads of one KV head that a decoding block serves at most (grouped-query attention: a
// block reads each cache row once for all of them). Llama 3 and Qwen2.5 have groups of 2 to 8.
constexpr int ATT_GROUP = 8;

struct att_dec {
    int Tq, Tmax, H, D;
    long long C;   // row width of q and y (H * D)
    long long Ckv; // row width of the caches (Hkv * D)
    int G;         // query heads per KV head (H / Hkv; 1: multi-head attention)
    int GB, NG;    // query heads a block serves (<= ATT_GROUP) and blocks per KV head (GB * NG >= G)
    int L;         // cache positions per split
    int nsplit;    // splits (ceil(Tmax / L)); 1: the split kernel writes y itself
    int KC, KS;    // keys per chunk staged in shared memory, and their row stride (odd: no bank conflicts)
    int NP;        // key subsets the output sum runs in (threads per output element)
    int vec;       // 1: rows move 4 elements at a time
    int pos_rows;  // 1: pos holds one position a row (B); 0: one for every row
    float scale;
};

// The position of batch row b's first query, read on the device; out of range (the CPU kernel's
// error) sets the flag and is clamped so that no access leaves the caches.
static __device__ __forceinline__ int att_pos(const int32_t *pos_in, int *flags, const att_dec &a, int b,
                                              bool report) {
    int pos = pos_in[a.pos_rows ? b : 0];
    if (pos < 0 || pos > a.Tmax - a.Tq) {
        if (report && flags) *flags = 1;
        pos = pos < 0 ? 0 : a.Tmax - a.Tq;
    }
    return pos;
}

// The first cache row the query at column c of batch row b sees: the row's start when c is a real
// column, else 0 (no start: 0). A start outside the cache sets the flag and is clamped.
static __device__ __forceinline__ int att_first_key(const int32_t *start, int *flags, const att_dec &a, int b, int c,
                                                    bool report) {
    if (!start) return 0;
    int s = start[b];
    if (s < 0 || s >= a.Tmax) {
        if (report && flags) *flags = 1;
        s = s < 0 ? 0 : a.Tmax - 1;
    }
    return c >= s ? s : 0;
}

// Block ((b*Hkv + kv)*NG + k, query i, split s) serves the nh <= GB query heads h0 .. h0+nh-1
// (h0 = kv*G + k*GB) that read KV head kv, over cache positions [max(s*L, lo), min((s+1)*L, pos+i+1))
// (lo: the query's first key, att_first_key):
// chunks of KC keys are staged in shared memory once for all of them (coalesced, 4 elements a
// thread), thread t scores key t of the chunk against each head's query; a block-wide online
// softmax per head; the weighted values summed by NP subsets of the keys (thread = (subset, output
// element or quad)), each value row read once from global memory and applied to every head. GM:
// the most heads a block serves (1: multi-head attention, whose code then folds to one head).
template <class T, int GM>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_split_kernel(float *part,        // (B*H*Tq, nsplit, D + 2): max, sum, unnormalised output
                     T *y,               // (B, Tq, C): written here when nsplit = 1
                     const T *q,         // (B, Tq, C)
                     const T *kc,        // (B, Tmax, Ckv)
                     const T *vc,        // (B, Tmax, Ckv)
                     const int32_t *pos_in,
                     const int32_t *start, // (B) or NULL
                     int *flags, att_dec a) {
    DFG_SHARED_DYNAMIC(float, sm);
    const int GB = GM == 1 ? 1 : a.GB;
    // qs (GB, D), Ks (KC, KS), ps (GB, KC), red (GB, 32), acc (GB, NP, D)
    float *qs = sm, *Ks = qs + GB * a.D, *ps = Ks + a.KC * a.KS, *red = ps + GB * a.KC, *acc = red + 32 * GB;
    const int tid = threadIdx.x, i = blockIdx.y, s = blockIdx.z, hkv = a.H / a.G;
    const int bkv = blockIdx.x / a.NG, b = bkv / hkv, kv = bkv % hkv, k0 = blockIdx.x % a.NG * GB;
    const int h0 = kv * a.G + k0, nh = GM == 1 ? 1 : min(GB, a.G - k0);
    // the first block of each batch row reports its position
    const int pos = att_pos(pos_in, flags, a, b, blockIdx.x % (hkv * a.NG) == 0 && i == 0 && s == 0 && tid == 0);
    const int lo = att_first_key(start, flags, a, b, pos + i, tid == 0);
    const int kbeg = max(s * a.L, lo), kend = min(s * a.L + a.L, pos + i + 1);
    if (kbeg >= kend) return; // the whole block: a split outside the query's keys (the combine skips it)
    const T *qr = q + ((long long)b * a.Tq + i) * a.C + (long long)h0 * a.D; // the nh heads, side by side
    const long long at = (long long)b * a.Tmax * a.Ckv + (long long)kv * a.D; // row 0 of this batch and KV head
    const T *kb = kc + at, *vb = vc + at;
    for (int d = tid; d < nh * a.D; d += ATT_THREADS) qs[d] = dfg_ld(qr, d);
    for (int d = tid; d < nh * a.NP * a.D; d += ATT_THREADS) acc[d] = 0.0f;
    const int W = a.vec ? a.D / 4 : a.D; // units of a row: quads or elements
    float m[GM], l[GM];
#pragma unroll
    for (int g = 0; g < GM; g++) m[g] = -INFINITY, l[g] = 0.0f;
    for (int c0 = kbeg; c0 < kend; c0 += a.KC) {
        const int nc = min(a.KC, kend - c0);
        // no barrier here: the previous chunk's keys were last read before its block max, and
        // its weights ps are rewritten only after the barrier below
        for (int it = tid; it < nc * W; it += ATT_THREADS) {
            int r = it / W, w = it % W;
            const T *row = kb + (long long)(c0 + r) * a.Ckv;
            if (a.vec) {
                float4 v = dfg_ld4(row + 4 * w);
                float *dst = Ks + r * a.KS + 4 * w;
                dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
            } else {
                Ks[r * a.KS + w] = dfg_ld(row, w);
            }
        }
        __syncthreads(); // the chunk's keys (and q, on the first pass) are stored
        float sc[GM], mx[GM], alpha[GM], p[GM];
#pragma unroll
        for (int g = 0; g < GM; g++) sc[g] = 0.0f;
        if (tid < nc)
            for (int d = 0; d < a.D; d++) {
                float kd = Ks[tid * a.KS + d];
#pragma unroll
                for (int g = 0; g < GM; g++)
                    if (g < nh) sc[g] = fmaf(qs[g * a.D + d], kd, sc[g]);
            }
#pragma unroll
        for (int g = 0; g < GM; g++) mx[g] = sc[g] = tid < nc ? sc[g] * a.scale : -INFINITY;
        dfg_block_reduce_each(mx, nh, red, -INFINITY, DfgMax()); // red: (GM, 32)
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float mn = fmaxf(m[g], mx[g]); // key kbeg is always seen: mn is finite
            alpha[g] = expf(m[g] - mn);
            p[g] = tid < nc ? expf(sc[g] - mn) : 0.0f;
            if (g < nh && tid < nc) ps[g * a.KC + tid] = p[g];
            m[g] = mn;
        }
        dfg_block_reduce_each(p, nh, red, 0.0f, DfgSum()); // its barriers also publish ps
#pragma unroll
        for (int g = 0; g < GM; g++) l[g] = l[g] * alpha[g] + p[g];
        for (int u = tid; u < a.NP * W; u += ATT_THREADS) {
            int sub = u / W, w = u % W;
            if (a.vec) {
                float4 t[GM] = {}; // only g < nh are used; zeroed so -O3's flow analysis sees no uninitialised read
#pragma unroll
                for (int g = 0; g < GM; g++)
                    if (g < nh) {
                        const float *o = acc + (g * a.NP + sub) * a.D + 4 * w;
                        t[g] = make_float4(o[0] * alpha[g], o[1] * alpha[g], o[2] * alpha[g], o[3] * alpha[g]);
                    }
#pragma unroll 4
                for (int j = sub; j < nc; j += a.NP) { // independent loads in flight: this is memory-bound
                    float4 v = dfg_ld4(vb + (long long)(c0 + j) * a.Ckv + 4 * w);
#pragma unroll
                    for (int g = 0; g < GM; g++)
                        if (g < nh) {
                            float pj = ps[g * a.KC + j];
                            t[g].x = fmaf(pj, v.x, t[g].x), t[g].y = fmaf(pj, v.y, t[g].y);
                            t[g].z = fmaf(pj, v.z, t[g].z), t[g].w = fmaf(pj, v.w, t[g].w);
                        }
                }
#pragma unroll
                for (int g = 0; g < GM; g++)
                    if (g < nh) {
                        float *o = acc + (g * a.NP + sub) * a.D + 4 * w;
                        o[0] = t[g].x, o[1] = t[g].y, o[2] = t[g].z, o[3] = t[g].w;
                    }
            } else {
                float t[GM] = {};
#pragma unroll
                for (int g = 0; g < GM; g++)
                    if (g < nh) t[g] = acc[(g * a.NP + sub) * a.D + w] * alpha[g];
#pragma unroll 4
                for (int j = sub; j < nc; j += a.NP) {
                    float v = dfg_ld(vb + (long long)(c0 + j) * a.Ckv, w);
#pragma unroll
                    for (int g = 0; g < GM; g++)
                        if (g < nh) t[g] = fmaf(ps[g * a.KC + j], v, t[g]);
                }
#pragma unroll
                for (int g = 0; g < GM; g++)
                    if (g < nh) acc[(g * a.NP + sub) * a.D + w] = t[g];
            }
        }
    }
    __syncthreads(); // every subset's sums are stored
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g >= nh) break;
        // b*H + h of this query head: one block a head (GB = 1) is blockIdx.x itself, which spares
        // registers that would keep b and h0 live through the loop above
        const long long bh = (GM == 1 ? (long long)blockIdx.x : (long long)b * a.H + h0) + g;
        float *pr = part + ((bh * a.Tq + i) * a.nsplit + s) * (a.D + 2); // this split's record
        T *yr = y + (bh / a.H * a.Tq + i) * a.C + bh % a.H * a.D;
        const float *ag = acc + g * a.NP * a.D;
        for (int d = tid; d < a.D; d += ATT_THREADS) {
            float o = 0.0f;
            for (int sub = 0; sub < a.NP; sub++) o += ag[sub * a.D + d];
            if (a.nsplit == 1)
                dfg_st(yr, d, o / l[g]);
            else
                pr[2 + d] = o;
        }
        if (a.nsplit > 1 && tid == 0) pr[0] = m[g], pr[1] = l[g];
    }
}

// Block (b*H + h) * Tq + i: y = sum_s w_s o_s / sum_s w_s l_s, w_s = exp(m_s - max m), over the
// splits that hold keys of this query (s0 .. ns-1: from its first key's split), in split order.
template <class T>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_combine_kernel(T *y,                // (B, Tq, C)
                       const float *part,   // (B*H*Tq, nsplit, D + 2)
                       const int32_t *pos_in,
                       const int32_t *start, // (B) or NULL
                       att_dec a) {
    DFG_SHARED_DYNAMIC(float, w); // (nsplit)
    const long long row = blockIdx.x;
    const int bh = (int)(row / a.Tq), i = (int)(row % a.Tq), b = bh / a.H, h = bh % a.H;
    const int c = att_pos(pos_in, nullptr, a, b, false) + i; // the query's column
    const int s0 = att_first_key(start, nullptr, a, b, c, false) / a.L, ns = (c + 1 + a.L - 1) / a.L;
    const float *pr = part + row * a.nsplit * (a.D + 2);
    float mx = -INFINITY;
    for (int s = s0; s < ns; s++) mx = fmaxf(mx, pr[s * (a.D + 2)]);
    for (int s = s0 + threadIdx.x; s < ns; s += ATT_THREADS) w[s] = expf(pr[s * (a.D + 2)] - mx);
    __syncthreads();
    float tot = 0.0f;
    for (int s = s0; s < ns; s++) tot = fmaf(w[s], pr[s * (a.D + 2) + 1], tot);
    T *yr = y + ((long long)b * a.Tq + i) * a.C + (long long)h * a.D;
    for (int d = threadIdx.x; d < a.D; d += ATT_THREADS) {
        float o = 0.0f;
        for (int s = s0; s < ns; s++) o = fmaf(w[s], pr[s * (a.D + 2) + 2 + d], o);
        dfg_st(yr, d, o / tot);
    }
}

// Dynamic shared memory of a split block, in floats: qs, Ks, ps, red, acc (att_split_kernel).
static size_t att_dec_floats(const att_dec &a) {
    return (size_t)a.GB * a.D + (size_t)a.KC * a.KS + (size_t)a.GB * a.KC + 32 * (size_t)a.GB +
           (size_t)a.GB * a.NP * a.D;
}

// The decoding plan of a node (from its shapes only, so the scratch rule agrees with the launcher
// and the splits do not depend on the device).
static att_dec att_decoding(const dfg_node *n) {
    att_dec a;
    const dfg_shape qs = n->in[0]->shape;
    a.Tq = (int)qs.d[1];
    a.Tmax = (int)n->in[1]->shape.d[1];
    a.H = n->attr->attention.n_head;
    a.C = qs.d[2];
    a.D = (int)(a.C / a.H);
    a.Ckv = n->in[1]->shape.d[2];
    a.G = a.H / (int)(a.Ckv / a.D);
    a.KS = a.D | 1;
    a.KC = 10240 / a.KS; // 40 KB of keys a chunk
    a.KC = a.KC >= ATT_THREADS ? ATT_THREADS : a.KC >= 32 ? a.KC / 32 * 32 : (a.KC > 0 ? a.KC : 1);
    a.L = (256 + a.KC - 1) / a.KC * a.KC;
    a.nsplit = (a.Tmax + a.L - 1) / a.L;
    if (a.nsplit < 1) a.nsplit = 1;
    a.vec = 0;
    int W = a.D % 4 ? a.D : a.D / 4;
    a.NP = W >= ATT_THREADS ? 1 : ATT_THREADS / W;
    a.pos_rows = dfg_shape_numel(n->in[3]->shape) == 1 ? 0 : 1;
    a.scale = 1.0f / sqrtf((float)a.D);
    // a group's heads in as few blocks as hold at most ATT_GROUP of them and fit 160 KB of shared
    // memory (very wide heads), the blocks' shares as even as possible
    a.GB = a.G < ATT_GROUP ? a.G : ATT_GROUP;
    while (a.GB > 1 && att_dec_floats(a) * sizeof(float) > 160 * 1024) a.GB--;
    a.NG = (a.G + a.GB - 1) / a.GB;
    a.GB = (a.G + a.NG - 1) / a.NG;
    return a;
}

} // namespace

// ---------------------------------------------------------------- launchers
DFG_CUDA_SCRATCH(attention_cached) {
    att_dec a = att_decoding(n);
    size_t records = (size_t)n->in[0]->shape.d[0] * (size_t)a.H * (size_t)a.Tq * (size_t)a.nsplit;
    return a.nsplit == 1 ? 0 : sizeof(float) * records * (size_t)(a.D + 2);
}

// inputs q (B, Tq, C), k_cache, v_cache (B, Tmax, Ckv), pos (i32: one, or (B)) [, start (B)] -> y (B, Tq, C)
DFG_CUDA_LAUNCHER(attention_cached) {
    if (ctx->invariant) return DFG_CUDA_FN(inv_attention)(n, in, out, ctx); // the training forward's order (invariant.cu)
    att_dec a = att_decoding(n);
    const int32_t *start = n->n_in == 5 ? (const int32_t *)in[4] : nullptr;
    long long B = n->in[0]->shape.d[0];
    size_t need = DFG_CUDA_FN(scratch_attention_cached)(n);
    if (need && (!ctx->scratch || ctx->scratch_bytes < need))
        return dfg_cuda_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small (%zu needed)",
                             ctx->scratch_bytes, need);
    if (a.Tq > 65535 || a.nsplit > 65535)
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "%d queries, %d splits: over the grid's limits",
                             a.Tq, a.nsplit);
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    dim3 grid((unsigned)(B * (a.H / a.G) * a.NG), (unsigned)a.Tq, (unsigned)a.nsplit);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T, {
        a.vec = att_vec(a.D, sizeof(T), in[0], in[1], in[2]);
        if (a.GB == 1)
            ATT_LAUNCH((att_split_kernel<T, 1>), grid, att_dec_floats(a), (float *)ctx->scratch, (T *)out[0],
                       (const T *)in[0], (const T *)in[1], (const T *)in[2], (const int32_t *)in[3], start, ctx->flags,
                       a);
        else
            ATT_LAUNCH((att_split_kernel<T, ATT_GROUP>), grid, att_dec_floats(a), (float *)ctx->scratch,
                       (T *)out[0], (const T *)in[0], (const T *)in[1], (const T *)in[2], (const int32_t *)in[3],
                       start, ctx->flags, a);
        if (a.nsplit > 1)
            ATT_LAUNCH((att_combine_kernel<T>), (unsigned)(B * a.H * a.Tq), a.nsplit, (T *)out[0],
                       (const float *)ctx->scratch, (const int32_t *)in[3], start, a);
    });
    return DFG_OK;
}
