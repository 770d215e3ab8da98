// attention_shared.cu - attention_shared_cached on the GPU (ops/attention_shared.c): decoding
// queries of N rows against a KV cache that holds each group's prompt once, (P, Tp, Ckv), and each
// row's own columns from Tp on, (N, Tc, Ckv). Cascade (shared-prefix) attention, as FlashInfer and
// Hydragen run it for inference:
//
//   1. a partial kernel over the prompts: a block per (group, KV head, block of queries, split of
//      L prompt columns) stages the split's keys and values through shared memory once for all the
//      queries it serves (the group's G rows times the query heads of the KV head), each warp
//      keeping a query's running max, sum and unnormalised output (online softmax);
//   2. the same kernel over the rows' own columns, a block per (row, KV head, split);
//   3. a combine kernel merging, per query, the partial softmaxes of both parts by log-sum-exp:
//      y = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s, in split order (prompt, then own).
//
// Each record holds (m, l, o[D]); a split holding none of a query's keys writes m = -inf, l = 0 and
// the combine skips it. A query's keys are the columns lo .. col of its virtual row (the prompt's
// part, then its own): lo its start when col is a real column, else 0 (attention_cached's rule).
// With prompt_of (decode_tail's gathered rows, whose groups are not neighbours) a block of the
// prompt kernel serves one row.
#include "attention_common.cuh"
#include "invariant.cuh"

namespace {

constexpr int SH_KC = 32;     // keys staged a chunk: one a lane when a warp scores them
constexpr int SH_L = 256;     // columns a split of a part covers
constexpr int SH_WARPS = ATT_THREADS / 32;

struct sh_geom {
    int N, Tq, H, D, per_kv, Hkv; // per_kv: query heads per KV head
    int P, Tp, Tc, rows;          // rows: a group's rows (N / P; 1 with prompt_of)
    long long C, Ckv;
    int nsp, nso, NS;             // splits of the prompt part, of the own part, both
    int QB;                       // queries a partial block serves at most
    int KS;                       // a staged key row's stride (odd: lanes read different banks)
    int pos_rows;                 // 1: pos holds one column a row
    float scale;
};

// The window [lo, hi) of query i of row b within a part (own: columns from Tp, as own indices),
// clipped to split s; empty: lo >= hi. Out-of-range inputs set the flag and are clamped.
static __device__ void sh_window(const sh_geom &a, const int32_t *pos_in, const int32_t *start, int *flags, int b,
                                 int i, bool own, int s, int &lo, int &hi) {
    int pos = pos_in[a.pos_rows ? b : 0], T = a.Tp + a.Tc;
    if (pos < 0 || pos > T - a.Tq) {
        if (flags) *flags = 1;
        pos = pos < 0 ? 0 : T - a.Tq;
    }
    int col = pos + i, s0 = start ? start[b] : 0;
    if (s0 < 0 || s0 >= T) {
        if (flags) *flags = 1;
        s0 = s0 < 0 ? 0 : T - 1;
    }
    int first = col >= s0 ? s0 : 0;
    if (own) lo = max(first - a.Tp, 0), hi = max(col + 1 - a.Tp, 0);
    else lo = min(first, a.Tp), hi = min(col + 1, a.Tp);
    lo = max(lo, s * SH_L), hi = min(hi, s * SH_L + SH_L);
}

// Dynamic shared memory of a partial block, in floats: qs, os (QB, D); ms, ls, wlo, whi (QB);
// Ks (KC, KS); Vs (KC, D); ps (warps, KC).
static size_t sh_floats(const sh_geom &a) {
    return 2 * (size_t)a.QB * a.D + 4 * (size_t)a.QB + (size_t)SH_KC * a.KS + (size_t)SH_KC * a.D + SH_WARPS * SH_KC;
}

// Block ((u * Hkv + kv) * nqb + qb, split s): queries qb*QB .. of unit u (the prompt part: group u,
// its rows u*rows ..; the own part: row u) and KV head kv, in the order (row, head, query); their
// records at slot `slot0 + s`.
template <class T>
static __global__ void __launch_bounds__(ATT_THREADS)
    sh_partial_kernel(float *rec,              // (N*H*Tq, NS, D + 2)
                      const T *q,              // (N, Tq, C)
                      const T *kpart,          // the part's keys: (P, Tp, Ckv) or (N, Tc, Ckv)
                      const T *vpart,          // its values
                      const int32_t *pos_in,   // one, or (N)
                      const int32_t *start,    // (N) or NULL
                      const int32_t *prompt_of, // (N) or NULL
                      int *flags, sh_geom a, int own) {
    DFG_SHARED_DYNAMIC(float, sm);
    float *qs = sm, *os = qs + a.QB * a.D, *ms = os + a.QB * a.D, *ls = ms + a.QB;
    int *wlo = reinterpret_cast<int *>(ls + a.QB), *whi = wlo + a.QB;
    float *Ks = reinterpret_cast<float *>(whi + a.QB), *Vs = Ks + SH_KC * a.KS, *ps = Vs + SH_KC * a.D;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, s = blockIdx.y;
    const int rows_u = own ? 1 : a.rows, Qn = rows_u * a.per_kv * a.Tq, nqb = (Qn + a.QB - 1) / a.QB;
    const int u = blockIdx.x / (a.Hkv * nqb), kv = blockIdx.x / nqb % a.Hkv, q0 = blockIdx.x % nqb * a.QB;
    const int nq = min(a.QB, Qn - q0), Tsrc = own ? a.Tc : a.Tp;
    int src = u; // the part's row these queries read: the row itself, its group, or prompt_of's
    if (!own && prompt_of) {
        src = prompt_of[u];
        if (src < 0 || src >= a.P) {
            if (tid == 0 && flags) *flags = 1;
            src = src < 0 ? 0 : a.P - 1;
        }
    }
    const long long base = (long long)src * Tsrc * a.Ckv + (long long)kv * a.D;
    for (int t = tid; t < nq; t += ATT_THREADS) {
        int g = q0 + t, r = g / (a.per_kv * a.Tq), b = u * rows_u + r, i = g % a.Tq;
        sh_window(a, pos_in, start, flags, b, i, own != 0, s, wlo[t], whi[t]);
        ms[t] = -INFINITY, ls[t] = 0.0f;
    }
    for (int e = tid; e < nq * a.D; e += ATT_THREADS) {
        int t = e / a.D, d = e % a.D, g = q0 + t;
        int r = g / (a.per_kv * a.Tq), hh = g / a.Tq % a.per_kv, i = g % a.Tq, b = u * rows_u + r;
        qs[e] = dfg_ld(q, ((long long)b * a.Tq + i) * a.C + (long long)(kv * a.per_kv + hh) * a.D + d);
        os[e] = 0.0f;
    }
    __syncthreads(); // windows, queries and accumulators are stored
    int klo = Tsrc, khi = 0; // the keys any of the block's queries sees
    for (int t = 0; t < nq; t++)
        if (wlo[t] < whi[t]) klo = min(klo, wlo[t]), khi = max(khi, whi[t]);
    for (int c0 = klo; c0 < khi; c0 += SH_KC) {
        const int nc = min(SH_KC, khi - c0);
        for (int e = tid; e < nc * a.D; e += ATT_THREADS) {
            int r = e / a.D, d = e % a.D;
            long long at = base + (long long)(c0 + r) * a.Ckv + d;
            Ks[r * a.KS + d] = dfg_ld(kpart, at);
            Vs[r * a.D + d] = dfg_ld(vpart, at);
        }
        __syncthreads(); // the chunk is staged
        for (int t = warp; t < nq; t += SH_WARPS) {
            const int key = c0 + lane;
            const bool seen = lane < nc && key >= wlo[t] && key < whi[t];
            float sc = -INFINITY;
            if (seen) {
                float acc = 0.0f;
                for (int d = 0; d < a.D; d++) acc = fmaf(qs[t * a.D + d], Ks[lane * a.KS + d], acc);
                sc = acc * a.scale;
            }
            const float mx = dfg_warp_max(sc);
            if (mx == -INFINITY) continue; // no key of this chunk for this query (the whole warp)
            const float m_old = ms[t], l_old = ls[t], m_new = fmaxf(m_old, mx), alpha = expf(m_old - m_new);
            const float p = seen ? expf(sc - m_new) : 0.0f;
            ps[warp * SH_KC + lane] = p;
            const float sum = dfg_warp_sum(p);
            __syncwarp(); // the weights are stored; every lane has read ms[t] and ls[t]
            for (int d = lane; d < a.D; d += 32) {
                float o = os[t * a.D + d] * alpha;
                for (int j = 0; j < nc; j++) o = fmaf(ps[warp * SH_KC + j], Vs[j * a.D + d], o);
                os[t * a.D + d] = o;
            }
            if (lane == 0) ms[t] = m_new, ls[t] = fmaf(l_old, alpha, sum);
            __syncwarp(); // ps is free for the warp's next query
        }
        __syncthreads(); // every warp is done with the chunk
    }
    const int slot = (own ? a.nsp : 0) + s;
    for (int e = tid; e < nq * (a.D + 2); e += ATT_THREADS) {
        int t = e / (a.D + 2), k = e % (a.D + 2), g = q0 + t;
        int r = g / (a.per_kv * a.Tq), hh = g / a.Tq % a.per_kv, i = g % a.Tq, b = u * rows_u + r;
        long long row = ((long long)b * a.H + kv * a.per_kv + hh) * a.Tq + i;
        rec[(row * a.NS + slot) * (a.D + 2) + k] = k == 0 ? ms[t] : k == 1 ? ls[t] : os[t * a.D + k - 2];
    }
}

// Block (b*H + h) * Tq + i: the query's records merged by log-sum-exp, in slot order.
template <class T>
static __global__ void __launch_bounds__(ATT_THREADS)
    sh_combine_kernel(T *y,             // (N, Tq, C)
                      const float *rec, // (N*H*Tq, NS, D + 2)
                      sh_geom a) {
    DFG_SHARED_DYNAMIC(float, w); // (NS)
    const long long row = blockIdx.x;
    const int i = (int)(row % a.Tq), h = (int)(row / a.Tq % a.H), b = (int)(row / a.Tq / a.H);
    const float *r = rec + row * a.NS * (a.D + 2);
    float mx = -INFINITY;
    for (int s = 0; s < a.NS; s++) mx = fmaxf(mx, r[s * (a.D + 2)]);
    for (int s = threadIdx.x; s < a.NS; s += ATT_THREADS) {
        float m = r[s * (a.D + 2)];
        w[s] = m == -INFINITY ? 0.0f : expf(m - mx);
    }
    __syncthreads();
    float tot = 0.0f;
    for (int s = 0; s < a.NS; s++) tot = fmaf(w[s], r[s * (a.D + 2) + 1], tot);
    T *yr = y + ((long long)b * a.Tq + i) * a.C + (long long)h * a.D;
    for (int d = threadIdx.x; d < a.D; d += ATT_THREADS) {
        float o = 0.0f;
        for (int s = 0; s < a.NS; s++)
            if (w[s] != 0.0f) o = fmaf(w[s], r[s * (a.D + 2) + 2 + d], o);
        dfg_st(yr, d, o / tot);
    }
}

// The plan of a node, from its shapes only (the scratch rule agrees with the launcher).
static sh_geom sh_geometry(const dfg_node *n) {
    sh_geom a;
    const dfg_shape qs = n->in[0]->shape;
    a.N = (int)qs.d[0], a.Tq = (int)qs.d[1], a.C = qs.d[2];
    a.H = n->attr->attention_shared.n_head, a.D = (int)(a.C / a.H);
    a.Ckv = n->in[1]->shape.d[2], a.Hkv = (int)(a.Ckv / a.D), a.per_kv = a.H / a.Hkv;
    a.P = (int)n->in[1]->shape.d[0], a.Tp = (int)n->in[1]->shape.d[1], a.Tc = (int)n->in[3]->shape.d[1];
    a.rows = n->attr->attention_shared.prompt_of ? 1 : a.N / a.P;
    a.nsp = (a.Tp + SH_L - 1) / SH_L, a.nso = (a.Tc + SH_L - 1) / SH_L, a.NS = a.nsp + a.nso;
    a.KS = a.D | 1;
    a.pos_rows = dfg_shape_numel(n->in[5]->shape) == 1 ? 0 : 1;
    a.scale = 1.0f / sqrtf((float)a.D);
    // as many of a group's queries as fit 96 KB of shared memory, at most 64
    const int Qn = a.rows * a.per_kv * a.Tq;
    a.QB = Qn < 64 ? Qn : 64;
    while (a.QB > 1 && sh_floats(a) * sizeof(float) > 96 * 1024) a.QB--;
    return a;
}

template <class T>
static dfg_status sh_run(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx, const sh_geom &a) {
    const dfg_attrs_attention_shared *at = &n->attr->attention_shared;
    const int32_t *pos = (const int32_t *)in[5], *start = at->start ? (const int32_t *)in[6] : nullptr;
    const int32_t *prompt_of = at->prompt_of ? (const int32_t *)in[n->n_in - 1] : nullptr;
    float *rec = (float *)ctx->scratch;
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    for (int own = 0; own < 2; own++) {
        const int splits = own ? a.nso : a.nsp, units = own ? a.N : a.N / a.rows;
        const int Qn = (own ? 1 : a.rows) * a.per_kv * a.Tq, nqb = (Qn + a.QB - 1) / a.QB;
        if (!splits) continue;
        dim3 grid((unsigned)((long long)units * a.Hkv * nqb), (unsigned)splits);
        ATT_LAUNCH((sh_partial_kernel<T>), grid, sh_floats(a), rec, (const T *)in[0], (const T *)in[1 + 2 * own],
                   (const T *)in[2 + 2 * own], pos, start, prompt_of, ctx->flags, a, own);
    }
    ATT_LAUNCH((sh_combine_kernel<T>), (unsigned)((long long)a.N * a.H * a.Tq), a.NS, (T *)out[0], rec, a);
    return DFG_OK;
}

} // namespace

// ---------------------------------------------------------------- launchers
DFG_CUDA_SCRATCH(attention_shared_cached) {
    sh_geom a = sh_geometry(n);
    return sizeof(float) * (size_t)a.N * (size_t)a.H * (size_t)a.Tq * (size_t)a.NS * (size_t)(a.D + 2);
}

// inputs q (N, Tq, C), k_prompt, v_prompt (P, Tp, Ckv), k_rows, v_rows (N, Tc, Ckv), pos (i32: one,
// or (N)) [, start (N)] [, prompt_of (N)] -> y (N, Tq, C)
DFG_CUDA_LAUNCHER(attention_shared_cached) {
    // a batch-invariant plan: one query a block, the prompt part's keys then its own, the copied
    // cache's order (invariant.cu), so decode's bits are the training forward's
    if (ctx->invariant) return DFG_CUDA_FN(inv_attention)(n, in, out, ctx);
    const sh_geom a = sh_geometry(n);
    size_t need = DFG_CUDA_FN(scratch_attention_shared_cached)(n);
    if (!ctx->scratch || ctx->scratch_bytes < need)
        return dfg_cuda_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small (%zu needed)", ctx->scratch_bytes,
                             need);
    if (a.nsp > 65535 || a.nso > 65535)
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "%d and %d splits: over the grid's limits", a.nsp, a.nso);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T, return sh_run<T>(n, in, out, ctx, a));
}
