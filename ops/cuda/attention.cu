// attention.cu - causal attention on the GPU where cuDNN's fused SDPA is not used: the forward
// and backward over a fused qkv (B, T, 3C) laid out [q | k | v] (head h at columns h*D .. h*D+D
// of each part).
//
// The forward and backward are flash-attention-style tiled kernels on CUDA cores (f32 FMAs on
// f32 or bf16 storage): a block holds a tile of rows in shared memory and streams the other side
// through it, with the (T x T) scores never leaving the block. The head dim is padded with zeros
// to DP = 32, 64 or 128, so any D <= 128 (odd ones too) runs the same code; a thread owns a 4 x 4
// or 4 x 8 register tile of the scores and of the output, reading shared memory as float4 (tiles
// that are read along their rows are stored transposed, padded to keep float4 alignment).
//   forward   block = (b, h, 64 queries); key/value tiles of 64; online softmax; y and lse.
//   backward  a prep kernel computes delta = rowsum(dy * y) (scratch); one kernel per 64-key tile
//             accumulates dK and dV over the queries that see it; another per 64-query tile
//             accumulates dQ over the keys it sees. No atomics: each block owns its outputs, and
//             every sum runs in a fixed order, so results are bit-identical run to run.
// The same kernels serve attention_prefix (attention_prefix.cu includes this file with
// DFG_ATTENTION_ENGINE_ONLY): a sequence's keys are its prefix's Tp rows, then its own; a query
// at position i sees keys 0 .. Tp + i. Plain attention is the case Tp = 0.
//
// Left padding (a start input: sequence b's first real column s of its extended sequence, one
// value a sequence or, with a prefix, a prefix): a query at column c >= s sees keys s .. c, one at
// c < s (a pad) keys 0 .. c. The bound is the key loops' first key: a tile of real queries
// streams keys from s on (not from a tile boundary), so its only mask is the causal one; a tile of
// pads or one that straddles s starts at 0 and masks with one unsigned compare (j - lo <= c - lo)
// where the causal compare was. In the dK/dV kernel, a key tile wholly of pads walks only the pad
// queries. The online softmax of a straddling tile's real row can meet a tile where it sees
// nothing (its keys start at s): its running max stays -inf and that tile adds 0.
//
// attention_cached (decoding against KV caches) is attention_decode.cu's.
#include "attention_common.cuh"
#include "invariant.cuh"

namespace {

// Blocks of a tiled kernel that fit an H100 SM's 227 KB of shared memory (1 KB of it reserved per
// block), at most 4: the minimum __launch_bounds__ asks for, so that ptxas spends registers
// (up to 65536 / (128 * blocks)) where occupancy is bounded by shared memory anyway, and spills none.
__host__ __device__ constexpr int att_min_blocks(int smem_floats) {
    int blocks = 227 * 1024 / (smem_floats * 4 + 1024);
    return blocks > 4 ? 4 : blocks < 1 ? 1 : blocks;
}

// The shape of one attention node as the kernels see it.
struct att_geom {
    int Tc;      // query rows (and own keys) per sequence
    int Tp;      // prefix keys before them (0: plain attention)
    int G;       // sequences per prefix
    int n;       // sequences
    int H, D;    // heads, head dim
    long long C; // model width: rows of qkv have 3C elements, rows of y / dy have C
    float scale; // 1 / sqrt(D)
    int vec;     // 1: rows may move 4 elements at a time (D % 4 == 0, pointers aligned)
    const int32_t *start; // left padding: (n) without a prefix, (P) with one; NULL: none
    int *flags;           // device flag set when a start is outside its sequence
};

// The first real column of sequence b's extended sequence (0 without padding). A start outside
// 0 .. (Tp or Tc) - 1 sets the flag (the CPU kernel's range error) and is clamped.
static __device__ __forceinline__ int att_start(const att_geom &g, int b, bool report) {
    if (!g.start) return 0;
    int s = g.start[b / g.G], last = (g.Tp ? g.Tp : g.Tc) - 1;
    if (s < 0 || s > last) {
        if (report && g.flags) *g.flags = 1;
        s = s < 0 ? 0 : last;
    }
    return s;
}

// The first key column c sees: s when c is a real column, 0 when c is a pad.
static __device__ __forceinline__ int att_lo(int c, int s) { return c >= s ? s : 0; }
// Key j is visible to the query at column c (lo = att_lo(c, s)): lo <= j <= c, in one compare.
static __device__ __forceinline__ bool att_sees(int j, int c, int lo) { return (unsigned)(j - lo) <= (unsigned)(c - lo); }

// ---------------------------------------------------------------- 4-element row access
// Elements d .. d+3 of a row of D (zeros past D, or for a NULL row: padding of tiles and heads).
template <class T>
static __device__ __forceinline__ float4 ld4(const T *row, int d, int D, bool vec) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (!row || d >= D) return v;
    if (vec) return dfg_ld4(row + d); // D % 4 == 0: the 4 are all inside
    v.x = dfg_ld(row, d);
    if (d + 1 < D) v.y = dfg_ld(row, d + 1);
    if (d + 2 < D) v.z = dfg_ld(row, d + 2);
    if (d + 3 < D) v.w = dfg_ld(row, d + 3);
    return v;
}
template <class T>
static __device__ __forceinline__ void st4(T *row, int d, int D, bool vec, float4 v) {
    if (d >= D) return;
    if (vec) return dfg_st4(row + d, v);
    dfg_st(row, d, v.x);
    if (d + 1 < D) dfg_st(row, d + 1, v.y);
    if (d + 2 < D) dfg_st(row, d + 2, v.z);
    if (d + 3 < D) dfg_st(row, d + 3, v.w);
}
static __device__ __forceinline__ float4 lds4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
static __device__ __forceinline__ float get4(const float4 &v, int e) { // e: a constant once unrolled
    return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

// This thread's part of a row of an output tile: columns tx*4 + 32k + {0..3} from o[4k ..].
template <int DP, class T>
static __device__ __forceinline__ void st_row(T *row, const float (&o)[DP / 8], int tx, int D, bool vec) {
#pragma unroll
    for (int k = 0; k < DP / 32; k++)
        st4(row, k * 32 + tx * 4, D, vec, make_float4(o[k * 4], o[k * 4 + 1], o[k * 4 + 2], o[k * 4 + 3]));
}

// s += A^T B and dp += C^T E over the DP rows of four tiles in shared memory: this thread's 4 x 4
// of each product (rows ty*4 .. ty*4+3: A and C (DP, la) at ty*4; columns tx*4 ..: B and E (DP, lb)).
template <int DP>
static __device__ __forceinline__ void two_products(float (&s)[4][4], float (&dp)[4][4], const float *A, const float *C,
                                                    int la, const float *B, const float *E, int lb, int ty, int tx) {
#pragma unroll 2
    for (int d = 0; d < DP; d++) {
        float4 a4 = lds4(A + d * la + ty * 4), c4 = lds4(C + d * la + ty * 4);
        float4 b4 = lds4(B + d * lb + tx * 4), e4 = lds4(E + d * lb + tx * 4);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[a][e] = fmaf(get4(a4, a), get4(b4, e), s[a][e]);
                dp[a][e] = fmaf(get4(c4, a), get4(e4, e), dp[a][e]);
            }
    }
}

// acc += X^T Y over R rows in shared memory: this thread's rows ty*4 .. ty*4+3 (X (R, 68) at
// ty*4) and columns tx*4 + 32k + {0..3} (Y (R, DP)).
template <int DP, int R>
static __device__ __forceinline__ void acc_product(float (&acc)[4][DP / 8], const float *X, const float *Y, int ty,
                                                   int tx) {
#pragma unroll 2
    for (int c = 0; c < R; c++) {
        float4 p = lds4(X + c * 68 + ty * 4);
#pragma unroll
        for (int k = 0; k < DP / 32; k++) {
            float4 v = lds4(Y + c * DP + k * 32 + tx * 4);
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[a][k * 4 + e] = fmaf(get4(p, a), get4(v, e), acc[a][k * 4 + e]);
        }
    }
}

// lse and delta of query rows i0 .. i0 + R - 1 of sequence b, head h, into shared memory (0 past Tc)
template <int R>
static __device__ __forceinline__ void load_row_stats(float *lse_s, float *dl_s, const float *lse, const float *delta,
                                                      const att_geom &g, int b, int h, int i0) {
    const int tid = threadIdx.x;
    if (tid < R) {
        long long at = ((long long)b * g.H + h) * g.Tc + i0 + tid;
        lse_s[tid] = i0 + tid < g.Tc ? lse[at] : 0.0f;
        dl_s[tid] = i0 + tid < g.Tc ? delta[at] : 0.0f;
    }
}

// The backward's P = exp(S scale - lse) of a visible key (else 0), left in s, and dS = P (dP - delta) scale
static __device__ __forceinline__ float p_and_ds(float &s, float dp, bool see, float lse, float delta, float scale) {
    const float p = see ? expf(s * scale - lse) : 0.0f;
    s = p;
    return p * (dp - delta) * scale;
}

// The transpose of this thread's 4 x 4 tile t into X (ld 68): t[0..3][e] at row tx*4 + e, columns ty*4 ..
static __device__ __forceinline__ void st_tile_t(float *X, const float (&t)[4][4], int ty, int tx) {
#pragma unroll
    for (int e = 0; e < 4; e++)
        dfg_st4(X + (tx * 4 + e) * 68 + ty * 4, make_float4(t[0][e], t[1][e], t[2][e], t[3][e]));
}

// ---------------------------------------------------------------- rows of the fused tensors
// Query row i of sequence b, head h (NULL past the end: a zero row).
template <class T>
static __device__ __forceinline__ const T *q_row(const T *qkv, const att_geom &g, int b, int h, int i) {
    return i < g.Tc ? qkv + ((long long)b * g.Tc + i) * 3 * g.C + (long long)h * g.D : nullptr;
}
// Key (part 1) or value (part 2) j of sequence b's extended sequence: its prefix's rows, then
// its own (NULL past the end).
template <class T>
static __device__ __forceinline__ const T *kv_row(const T *qkv, const T *pre, const att_geom &g, int b, int h, int j,
                                                  int part) {
    long long col = part * g.C + (long long)h * g.D;
    if (j < g.Tp) return pre + ((long long)(b / g.G) * g.Tp + j) * 3 * g.C + col;
    j -= g.Tp;
    return j < g.Tc ? qkv + ((long long)b * g.Tc + j) * 3 * g.C + col : nullptr;
}
// Row i of a (n, Tc, C) tensor (y, dy) at head h.
template <class T>
static __device__ __forceinline__ const T *c_row(const T *x, const att_geom &g, int b, int h, int i) {
    return i < g.Tc ? x + ((long long)b * g.Tc + i) * g.C + (long long)h * g.D : nullptr;
}

// Copies the R rows of a tile (row r from row(r); DP columns, zero-padded) into shared memory:
// transposed into tt (DP, R + 4) and/or row-major into rm (R, DP). A warp reads 8 rows x 4 chunks
// of 4 elements (64 contiguous bytes of each row in f32), so the transposed stores hit 2-way
// bank conflicts at most.
template <class T, int DP, int R, class RowFn>
static __device__ __forceinline__ void load_tile(float *tt, float *rm, RowFn row, int D, bool vec) {
    constexpr int NC = DP / 4;
    for (int item = threadIdx.x; item < R * NC; item += ATT_THREADS) {
        int r = (item & 7) + 8 * (item / (8 * NC)), c = (item >> 3) % NC;
        float4 v = ld4(row(r), c * 4, D, vec);
        if (tt) {
            tt[(c * 4 + 0) * (R + 4) + r] = v.x;
            tt[(c * 4 + 1) * (R + 4) + r] = v.y;
            tt[(c * 4 + 2) * (R + 4) + r] = v.z;
            tt[(c * 4 + 3) * (R + 4) + r] = v.w;
        }
        if (rm) *reinterpret_cast<float4 *>(rm + r * DP + c * 4) = v;
    }
}

// The max and sum over the 8 lanes that share a row of a register tile (lanes 8k .. 8k+7 of a
// warp), offsets 1, 2, 4
static __device__ __forceinline__ float row8_max(float v) { return dfg_warp_reduce<8, true>(v, DfgMax()); }
static __device__ __forceinline__ float row8_sum(float v) { return dfg_warp_reduce<8, true>(v, DfgSum()); }

// ---------------------------------------------------------------- forward
// Shared memory: Qt (DP, 68) | K^T (DP, 68), reused as P^T (64, 68) | V (64, DP).
template <int DP>
__host__ __device__ constexpr int fwd_smem_floats() {
    return DP * 68 + (DP > 64 ? DP : 64) * 68 + 64 * DP;
}

// Block (b*H + h, query tile): 64 query rows against key/value tiles of 64. Thread (ty, tx) =
// (tid / 8, tid % 8) owns query rows ty*4 .. ty*4+3, score columns tx*4 + {0..3, 32..35} and
// output columns tx*4 + 32k + {0..3}. Tiles run from the last (longest) query rows to the first,
// so the heavy blocks start first.
template <class T, int DP>
static __global__ void __launch_bounds__(ATT_THREADS, att_min_blocks(fwd_smem_floats<DP>()))
    att_fwd_kernel(T *y,          // (n, Tc, C)
                   float *lse,    // (n, H, Tc)
                   const T *qkv,  // (n, Tc, 3C)
                   const T *pre,  // (P, Tp, 3C); NULL when Tp = 0
                   att_geom g) {
    DFG_SHARED_DYNAMIC(float, sm);
    float *Qt = sm, *KP = sm + DP * 68, *Vs = KP + (DP > 64 ? DP : 64) * 68;
    const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const int b = blockIdx.x / g.H, h = blockIdx.x % g.H, q0 = (gridDim.y - 1 - blockIdx.y) * 64;
    const bool vec = g.vec != 0;
    const int st = att_start(g, b, tid == 0);
    load_tile<T, DP, 64>(Qt, nullptr, [&](int r) { return q_row(qkv, g, b, h, q0 + r); }, g.D, vec);

    float o[4][DP / 8] = {}, m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l[4] = {};
    const int kbeg = att_lo(g.Tp + q0, st);     // real rows only: their first key; else 0
    const int kend = g.Tp + min(q0 + 64, g.Tc); // keys the tile's last row sees
    for (int k0 = kbeg; k0 < kend; k0 += 64) {
        __syncthreads(); // the previous tile's P^T and V are read
        load_tile<T, DP, 64>(KP, nullptr, [&](int r) { return kv_row(qkv, pre, g, b, h, k0 + r, 1); }, g.D, vec);
        load_tile<T, DP, 64>(nullptr, Vs, [&](int r) { return kv_row(qkv, pre, g, b, h, k0 + r, 2); }, g.D, vec);
        __syncthreads();
        float s[4][8] = {};
#pragma unroll 2
        for (int d = 0; d < DP; d++) {
            float4 qa = lds4(Qt + d * 68 + ty * 4), k0v = lds4(KP + d * 68 + tx * 4);
            float4 k1v = lds4(KP + d * 68 + 32 + tx * 4);
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[a][e] = fmaf(get4(qa, a), get4(k0v, e), s[a][e]);
                    s[a][4 + e] = fmaf(get4(qa, a), get4(k1v, e), s[a][4 + e]);
                }
        }
        // online softmax: key j is visible to the row at column c = Tp + i when lo <= j <= c. The
        // first tile holds a visible key of every row, except the real rows of a tile that
        // straddles the start: until their start's tile their max stays -inf (mr: 0, so alpha
        // and the weights are exp(-inf) = 0, not NaN); a fully masked row of a later tile adds 0
#pragma unroll
        for (int a = 0; a < 4; a++) {
            int c = g.Tp + q0 + ty * 4 + a, lo = att_lo(c, st); // the row's first key (recomputed: registers)
            float mx = -INFINITY;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                int j = k0 + tx * 4 + (e & 3) + 32 * (e >> 2);
                s[a][e] = att_sees(j, c, lo) ? s[a][e] * g.scale : -INFINITY;
                mx = fmaxf(mx, s[a][e]);
            }
            float mn = fmaxf(m[a], row8_max(mx)), mr = mn == -INFINITY ? 0.0f : mn, alpha = expf(m[a] - mr);
            m[a] = mn;
            l[a] *= alpha;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                s[a][e] = expf(s[a][e] - mr);
                l[a] += s[a][e]; // this thread's columns; the row's 8 lanes are summed at the end
            }
#pragma unroll
            for (int x = 0; x < DP / 8; x++) o[a][x] *= alpha;
        }
        __syncthreads(); // every K^T read: P^T takes its place
#pragma unroll
        for (int e = 0; e < 8; e++)
            dfg_st4(KP + (tx * 4 + (e & 3) + 32 * (e >> 2)) * 68 + ty * 4,
                    make_float4(s[0][e], s[1][e], s[2][e], s[3][e]));
        __syncthreads();
        acc_product<DP, 64>(o, KP, Vs, ty, tx); // O += P V
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        float lt = row8_sum(l[a]), inv = 1.0f / lt;
        int i = q0 + ty * 4 + a;
        if (i >= g.Tc) continue;
#pragma unroll
        for (int x = 0; x < DP / 8; x++) o[a][x] *= inv;
        st_row<DP>(y + ((long long)b * g.Tc + i) * g.C + (long long)h * g.D, o[a], tx, g.D, vec);
        if (tx == 0) lse[((long long)b * g.H + h) * g.Tc + i] = m[a] + logf(lt);
    }
}

// ---------------------------------------------------------------- backward
// delta (n, H, Tc) = rowsum(dy * y) per head: a warp per (row, head).
template <class T>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_delta_kernel(float *delta,  // (n, H, Tc)
                     const T *dy,   // (n, Tc, C)
                     const T *y,    // (n, Tc, C)
                     long long rows, att_geom g) {
    const int lane = threadIdx.x & 31;
    for (long long w = ((long long)blockIdx.x * ATT_THREADS + threadIdx.x) >> 5; w < rows * g.H;
         w += (long long)gridDim.x * (ATT_THREADS / 32)) { // uniform per warp: the shuffles see 32 lanes
        long long r = w / g.H;
        int h = (int)(w % g.H);
        const T *a = dy + r * g.C + (long long)h * g.D, *b = y + r * g.C + (long long)h * g.D;
        float s = 0.0f;
        for (int d = lane; d < g.D; d += 32) s = fmaf(dfg_ld(a, d), dfg_ld(b, d), s);
        s = dfg_warp_sum(s);
        long long bb = r / g.Tc, i = r % g.Tc;
        if (lane == 0) delta[(bb * g.H + h) * g.Tc + i] = s;
    }
}

// Shared memory of the dK/dV kernel: K^T, V^T (DP, 68) | Q^T, dO^T (DP, 36), reused as P, dS
// (32, 68) | Q, dO (32, DP) | lse, delta (32).
template <int DP>
__host__ __device__ constexpr int dkv_region() {
    return DP * 36 > 32 * 68 ? DP * 36 : 32 * 68;
}
template <int DP>
__host__ __device__ constexpr int dkv_smem_floats() {
    return 2 * DP * 68 + 2 * dkv_region<DP>() + 2 * 32 * DP + 64;
}

// Block (sequence or prefix, head, tile of 64 keys) accumulates dK = dS^T Q and dV = P^T dO over
// the query tiles (32 rows) that see its keys: a sequence's own keys k0.. are seen by its rows
// k0.. ; a prefix's keys by every row of the G sequences of its group, walked in order, so the
// group's sum needs no atomics. One launch holds both kinds: the first npre blocks are the
// prefixes' (the longest walks), then the sequences' by key tile (tile 0, the longest, first).
// With left padding, a tile wholly of pad keys (below the start) is seen by the pad queries only,
// and its walk stops where they do (a prefix's pads: by no query at all).
// Thread (ty, tx) owns keys ty*4 .. ty*4+3, the score columns (queries) tx*4 .. tx*4+3 and
// output columns tx*4 + 32k + {0..3}.
template <class T, int DP>
static __global__ void __launch_bounds__(ATT_THREADS, att_min_blocks(dkv_smem_floats<DP>()))
    att_dkv_kernel(T *dqkv,            // (n, Tc, 3C): its key and value columns
                   T *dpre,            // (P, Tp, 3C) or NULL (npre = 0)
                   const T *dy,        // (n, Tc, C)
                   const T *qkv,       // (n, Tc, 3C)
                   const T *pre,       // (P, Tp, 3C) or NULL
                   const float *lse,   // (n, H, Tc)
                   const float *delta, // (n, H, Tc)
                   att_geom g, int npre) {
    DFG_SHARED_DYNAMIC(float, sm);
    float *Kt = sm, *Vt = Kt + DP * 68, *Qt = Vt + DP * 68, *Ot = Qt + dkv_region<DP>();
    float *Ps = Qt, *dSs = Ot; // after the scores, P and dS replace Q^T and dO^T
    float *Qs = Ot + dkv_region<DP>(), *Os = Qs + 32 * DP, *lse_s = Os + 32 * DP, *dl_s = lse_s + 32;
    const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const bool prefix = (int)blockIdx.x < npre, vec = g.vec != 0;
    const int units = (prefix ? g.n / g.G : g.n) * g.H, blk = prefix ? (int)blockIdx.x : (int)blockIdx.x - npre;
    const int u = blk % units / g.H, h = blk % units % g.H, k0 = blk / units * 64; // u: prefix, or sequence
    T *const dst = prefix ? dpre : dqkv;
    const int key0 = prefix ? k0 : g.Tp + k0;       // the tile's first key in the extended sequence
    const int nkeys = prefix ? g.Tp : g.Tp + g.Tc;  // keys of its kind end here
    const int b_begin = prefix ? u * g.G : u, b_end = prefix ? (u + 1) * g.G : u + 1;
    const int kb = prefix ? u * g.G : u; // a sequence whose extended keys hold this tile
    const int st = att_start(g, kb, tid == 0);  // the same for the group's sequences (a prefix's)
    // queries that see the tile: own keys k0.. from row k0 on; pad keys only up to the last pad
    const int iend = key0 + 64 <= st ? min(g.Tc, st - g.Tp) : g.Tc;
    auto kv = [&](int r, int part) { return key0 + r < nkeys ? kv_row(qkv, pre, g, kb, h, key0 + r, part) : nullptr; };
    load_tile<T, DP, 64>(Kt, nullptr, [&](int r) { return kv(r, 1); }, g.D, vec);
    load_tile<T, DP, 64>(Vt, nullptr, [&](int r) { return kv(r, 2); }, g.D, vec);

    float dk[4][DP / 8] = {}, dv[4][DP / 8] = {};
    for (int b = b_begin; b < b_end; b++) {
        for (int i0 = prefix ? 0 : k0; i0 < iend; i0 += 32) {
            __syncthreads(); // the previous tile's P, dS, Q and dO are read
            load_tile<T, DP, 32>(Qt, Qs, [&](int r) { return q_row(qkv, g, b, h, i0 + r); }, g.D, vec);
            load_tile<T, DP, 32>(Ot, Os, [&](int r) { return c_row(dy, g, b, h, i0 + r); }, g.D, vec);
            load_row_stats<32>(lse_s, dl_s, lse, delta, g, b, h, i0);
            __syncthreads();
            float s[4][4] = {}, dp[4][4] = {};
            two_products<DP>(s, dp, Kt, Vt, 68, Qt, Ot, 36, ty, tx); // S^T = K Q^T, dP^T = V dO^T
            // P = exp(S - lse) where key j is visible to row i (lo <= j <= Tp + i); dS = P (dP - delta) scale
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = key0 + ty * 4 + a, i = i0 + tx * 4 + e, r = tx * 4 + e, c = g.Tp + i;
                    bool see = i < g.Tc && j < nkeys && att_sees(j, c, att_lo(c, st));
                    dp[a][e] = p_and_ds(s[a][e], dp[a][e], see, lse_s[r], dl_s[r], g.scale);
                }
            __syncthreads(); // Q^T and dO^T are read: P and dS replace them
            st_tile_t(Ps, s, ty, tx);
            st_tile_t(dSs, dp, ty, tx);
            __syncthreads();
#pragma unroll 2
            for (int r = 0; r < 32; r++) {
                float4 pa = lds4(Ps + r * 68 + ty * 4), da = lds4(dSs + r * 68 + ty * 4);
#pragma unroll
                for (int k = 0; k < DP / 32; k++) {
                    float4 ov = lds4(Os + r * DP + k * 32 + tx * 4), qv = lds4(Qs + r * DP + k * 32 + tx * 4);
#pragma unroll
                    for (int a = 0; a < 4; a++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            dv[a][k * 4 + e] = fmaf(get4(pa, a), get4(ov, e), dv[a][k * 4 + e]);
                            dk[a][k * 4 + e] = fmaf(get4(da, a), get4(qv, e), dk[a][k * 4 + e]);
                        }
                }
            }
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int j = k0 + ty * 4 + a; // row of dst
        if (key0 + ty * 4 + a >= nkeys) continue;
        T *row = dst + ((long long)u * (prefix ? g.Tp : g.Tc) + j) * 3 * g.C + (long long)h * g.D;
        if (prefix) // a prefix's queries get nothing
#pragma unroll
            for (int k = 0; k < DP / 32; k++) st4(row, k * 32 + tx * 4, g.D, vec, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        st_row<DP>(row + g.C, dk[a], tx, g.D, vec);
        st_row<DP>(row + 2 * g.C, dv[a], tx, g.D, vec);
    }
}

// Shared memory of the dQ kernel: Q^T, dO^T (DP, 68) | K^T (DP, 36) | V^T (DP, 36), reused as
// dS^T (32, 68) | K (32, DP) | lse, delta (64).
template <int DP>
__host__ __device__ constexpr int dq_smem_floats() {
    return 2 * DP * 68 + DP * 36 + dkv_region<DP>() + 32 * DP + 128;
}

// Block (b*H + h, tile of 64 queries) accumulates dQ = dS K over the key tiles (32 keys) its rows
// see, prefix keys first. Thread (ty, tx) owns query rows ty*4 .. ty*4+3, score columns (keys)
// tx*4 .. tx*4+3 and output columns tx*4 + 32k + {0..3}.
template <class T, int DP>
static __global__ void __launch_bounds__(ATT_THREADS, att_min_blocks(dq_smem_floats<DP>()))
    att_dq_kernel(T *dqkv,            // (n, Tc, 3C): its query columns
                  const T *dy,        // (n, Tc, C)
                  const T *qkv,       // (n, Tc, 3C)
                  const T *pre,       // (P, Tp, 3C) or NULL
                  const float *lse,   // (n, H, Tc)
                  const float *delta, // (n, H, Tc)
                  att_geom g) {
    DFG_SHARED_DYNAMIC(float, sm);
    float *Qt = sm, *Ot = Qt + DP * 68, *Kt = Ot + DP * 68, *Vt = Kt + DP * 36, *dSt = Vt;
    float *Ks = Vt + dkv_region<DP>(), *lse_s = Ks + 32 * DP, *dl_s = lse_s + 64;
    const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const int b = blockIdx.x / g.H, h = blockIdx.x % g.H, q0 = (gridDim.y - 1 - blockIdx.y) * 64;
    const bool vec = g.vec != 0;
    const int st = att_start(g, b, tid == 0);
    load_tile<T, DP, 64>(Qt, nullptr, [&](int r) { return q_row(qkv, g, b, h, q0 + r); }, g.D, vec);
    load_tile<T, DP, 64>(Ot, nullptr, [&](int r) { return c_row(dy, g, b, h, q0 + r); }, g.D, vec);
    load_row_stats<64>(lse_s, dl_s, lse, delta, g, b, h, q0);
    float dq[4][DP / 8] = {};
    const int kbeg = att_lo(g.Tp + q0, st), kend = g.Tp + min(q0 + 64, g.Tc);
    for (int k0 = kbeg; k0 < kend; k0 += 32) {
        __syncthreads(); // the previous tile's dS^T and K are read
        load_tile<T, DP, 32>(Kt, Ks, [&](int r) { return kv_row(qkv, pre, g, b, h, k0 + r, 1); }, g.D, vec);
        load_tile<T, DP, 32>(Vt, nullptr, [&](int r) { return kv_row(qkv, pre, g, b, h, k0 + r, 2); }, g.D, vec);
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};
        two_products<DP>(s, dp, Qt, Ot, 68, Kt, Vt, 36, ty, tx); // S = Q K^T, dP = dO V^T
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = ty * 4 + a, i = q0 + r, j = k0 + tx * 4 + e;
                bool see = i < g.Tc && att_sees(j, g.Tp + i, att_lo(g.Tp + i, st));
                dp[a][e] = p_and_ds(s[a][e], dp[a][e], see, lse_s[r], dl_s[r], g.scale);
            }
        __syncthreads(); // V^T is read: dS^T replaces it
        st_tile_t(dSt, dp, ty, tx);
        __syncthreads();
        acc_product<DP, 32>(dq, dSt, Ks, ty, tx); // dQ += dS K
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int i = q0 + ty * 4 + a;
        if (i >= g.Tc) continue;
        st_row<DP>(dqkv + ((long long)b * g.Tc + i) * 3 * g.C + (long long)h * g.D, dq[a], tx, g.D, vec);
    }
}

// ---------------------------------------------------------------- host side of the tiled kernels

// The geometry of a node: qkv (n, Tc, 3C) is input q, after the prefix (P, Tp, 3C) input p (-1:
// none); its start is input `plain` when the node has plain + 1 inputs, reporting to ctx's flags.
static att_geom att_geometry(const dfg_node *n, void *const *in, int q, int p, int plain, dfg_cuda_ctx *ctx) {
    const dfg_tensor *qkv = n->in[q], *pre = p >= 0 ? n->in[p] : nullptr;
    const int n_head = n->attr->attention.n_head;
    att_geom g;
    g.n = (int)qkv->shape.d[0];
    g.Tc = (int)qkv->shape.d[1];
    g.Tp = pre ? (int)pre->shape.d[1] : 0;
    g.G = pre ? (int)(qkv->shape.d[0] / pre->shape.d[0]) : 1;
    g.H = n_head;
    g.C = qkv->shape.d[2] / 3;
    g.D = (int)(g.C / n_head);
    g.scale = 1.0f / sqrtf((float)g.D);
    g.vec = 0;
    g.start = n->n_in > plain ? (const int32_t *)in[plain] : nullptr;
    g.flags = ctx->flags;
    return g;
}

// The padded head dim of the tiled kernels (0: D is over 128).
static int att_dp(int D) { return D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 0; }
#define ATT_TOO_WIDE "head dim %d: the CUDA attention kernels take head dims up to 128"

template <class T, int DP>
static dfg_status att_forward_dp(const dfg_node *n, dfg_cuda_ctx *ctx, T *y, float *lse, const T *qkv, const T *pre,
                                 att_geom g) {
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    dim3 grid((unsigned)(g.n * g.H), (unsigned)((g.Tc + 63) / 64));
    ATT_LAUNCH((att_fwd_kernel<T, DP>), grid, fwd_smem_floats<DP>(), y, lse, qkv, pre, g);
    return DFG_OK;
}

// y (n, Tc, C) and lse (n, H, Tc) of the sequences of qkv (after their prefixes when pre is set).
template <class T>
static dfg_status att_forward(const dfg_node *n, dfg_cuda_ctx *ctx, T *y, float *lse, const T *qkv, const T *pre,
                              att_geom g) {
    g.vec = att_vec(g.D, sizeof(T), y, qkv, pre);
    switch (att_dp(g.D)) {
    case 32: return att_forward_dp<T, 32>(n, ctx, y, lse, qkv, pre, g);
    case 64: return att_forward_dp<T, 64>(n, ctx, y, lse, qkv, pre, g);
    case 128: return att_forward_dp<T, 128>(n, ctx, y, lse, qkv, pre, g);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, ATT_TOO_WIDE, g.D);
    }
}

template <class T, int DP>
static dfg_status att_backward_dp(const dfg_node *n, dfg_cuda_ctx *ctx, T *dqkv, T *dpre, const T *dy, const T *qkv,
                                  const T *pre, const float *lse, const float *delta, att_geom g) {
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    ATT_LAUNCH((att_dq_kernel<T, DP>), dim3((unsigned)(g.n * g.H), (unsigned)((g.Tc + 63) / 64)),
               dq_smem_floats<DP>(), dqkv, dy, qkv, pre, lse, delta, g);
    // the prefixes' key tiles, then the sequences' (see att_dkv_kernel)
    long long npre = dpre ? (long long)(g.n / g.G) * g.H * ((g.Tp + 63) / 64) : 0;
    long long blocks = npre + (long long)g.n * g.H * ((g.Tc + 63) / 64);
    ATT_LAUNCH((att_dkv_kernel<T, DP>), (unsigned)blocks, dkv_smem_floats<DP>(), dqkv, dpre, dy, qkv, pre, lse, delta,
               g, (int)npre);
    return DFG_OK;
}

// Scratch of the backward: delta (n, H, Tc) floats.
static size_t att_backward_scratch(const dfg_tensor *qkv, int n_head) {
    return sizeof(float) * (size_t)qkv->shape.d[0] * (size_t)qkv->shape.d[1] * (size_t)n_head;
}

// dqkv (n, Tc, 3C), and dprefix (P, Tp, 3C) when dpre is set, from dy, qkv, y and lse; delta
// (n, H, Tc) goes to ctx->scratch.
template <class T>
static dfg_status att_backward(const dfg_node *n, dfg_cuda_ctx *ctx, T *dqkv, T *dpre, const T *dy, const T *qkv,
                               const T *pre, const T *y, const float *lse, att_geom g) {
    size_t need = sizeof(float) * (size_t)g.n * (size_t)g.Tc * (size_t)g.H;
    if (!ctx->scratch || ctx->scratch_bytes < need)
        return dfg_cuda_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small (%zu needed)",
                             ctx->scratch_bytes, need);
    if (!att_dp(g.D)) return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, ATT_TOO_WIDE, g.D);
    g.vec = att_vec(g.D, sizeof(T), dqkv, dpre, dy, qkv, pre);
    float *delta = (float *)ctx->scratch;
    long long rows = (long long)g.n * g.Tc;
    cudaError_t e = DFG_LAUNCH((att_delta_kernel<T>), dfg_grid_for(rows * g.H * 32, ATT_THREADS, ctx), ATT_THREADS, 0,
                               (cudaStream_t)ctx->stream, delta, dy, y, rows, g);
    dfg_status st = dfg_cuda_launched(ctx, n, e, "att_delta_kernel");
    if (st) return st;
    switch (att_dp(g.D)) {
    case 32: return att_backward_dp<T, 32>(n, ctx, dqkv, dpre, dy, qkv, pre, lse, delta, g);
    case 64: return att_backward_dp<T, 64>(n, ctx, dqkv, dpre, dy, qkv, pre, lse, delta, g);
    default: return att_backward_dp<T, 128>(n, ctx, dqkv, dpre, dy, qkv, pre, lse, delta, g);
    }
}

} // namespace

#ifndef DFG_ATTENTION_ENGINE_ONLY
// ---------------------------------------------------------------- launchers
// cuDNN's fused SDPA first where the context has one (ctx->sdpa: the GPU's cuDNN call site, or
// the emulated device's interpreter under DFG_EMU_SDPA=1) and it takes the node: on a GPU bf16
// or f16, head dims a multiple of 8 up to 128, 16-byte aligned operands
// (dfg_sdpa_cudnn_supports); the interpreter takes any. A node with a start (left padding) is
// never SDPA's: its descriptor is refused (sdpa.c; no left-padding mask), the kernels below run. DFG_ERR_UNSUPPORTED from it (nothing
// enqueued) falls through to the hand-written kernels below; any other status is the node's.
static bool att_via_sdpa(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx, dfg_status *st) {
    dfg_sdpa_desc d;
    const char *why;
    bool backward = n->op == DFG_OP_ATTENTION_BWD;
    if (!ctx->sdpa || !(backward ? dfg_sdpa_backward_desc(n, &d, &why) : dfg_sdpa_forward_desc(n, &d, &why)))
        return false;
    void *ptrs[DFG_SDPA_N_OPERANDS];
    dfg_sdpa_buffers(n, in, out, ptrs);
    *st = ctx->sdpa(ctx, &d, backward, ptrs);
    return *st != DFG_ERR_UNSUPPORTED;
}

DFG_CUDA_LAUNCHER(attention) {
    if (ctx->invariant) return DFG_CUDA_FN(inv_attention)(n, in, out, ctx); // one query at a time (invariant.cu)
    dfg_status st;
    if (att_via_sdpa(n, in, out, ctx, &st)) return st;
    const att_geom g = att_geometry(n, in, 0, -1, 1, ctx);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T,
                            return att_forward<T>(n, ctx, (T *)out[0], (float *)out[1], (const T *)in[0], nullptr, g));
}

DFG_CUDA_SCRATCH(attention_bwd) { return att_backward_scratch(n->in[1], n->attr->attention.n_head); }

DFG_CUDA_LAUNCHER(attention_bwd) {
    dfg_status st;
    if (att_via_sdpa(n, in, out, ctx, &st)) return st;
    const att_geom g = att_geometry(n, in, 1, -1, 4, ctx);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[1], T,
                            return att_backward<T>(n, ctx, (T *)out[0], nullptr, (const T *)in[0], (const T *)in[1],
                                                   nullptr, (const T *)in[2], (const float *)in[3], g));
}

#endif // DFG_ATTENTION_ENGINE_ONLY
