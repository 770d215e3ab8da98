// invariant.cu - batch-invariant CUDA kernels: in a plan declared batch-invariant (the GRPO
// pipeline's batch_invariant setting; ctx->invariant) the forward matmuls, attention's four forms
// and the fused log-prob's logits run here instead of through cuBLASLt, cuDNN and the tiled
// attention kernels. Each output element is computed in one order that depends on its own row and
// column alone, never on how many rows the call holds, where the row sits among them, the tile it
// falls in, the grid or the device: no split-K, no split over keys, no reduction whose shape
// follows the batch. So a token's log-prob computed while decoding (one new row against the KV
// cache) and in the training forward (the whole sequence) is the same float, bit for bit.
//
// The orders are ops/cpu/invariant.c's, operation for operation:
//   NT element (B given as (N, K)): 8 lanes, lane i accumulating k = i, i+8, ... by fused
//     multiply-adds, then ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)), times alpha. Here the 8 lanes are
//     8 threads (k = lane mod 8 of each 32-wide K step), the sum their xor butterfly 4, 2, 1.
//   NN element (B given as (K, N)): one accumulator over k = 0 .. K-1, times alpha.
//   Attention, one query against its keys in order (the prefix's, then its own, as the KV cache
//     holds them; with a shared-prompt cache the group's prompt part, then the row's own part: the
//     same keys in the same order as the copied cache's one run): scores scale * (the NT element of q and k); their max; p = exp(s - max) by
//     fastmath.h's polynomial (ported below), summed in 8 lanes as above; y = sum_j (p_j / sum)
//     v_j one key at a time; lse = max + log(sum).
// Every product and sum is an explicit __fmaf_rn / __fmul_rn / __fadd_rn, which nvcc never
// contracts or splits, and the emulated build (no contraction) rounds the same: the emulator, a
// GPU and the CPU's invariant kernels give the same bits (log and exp of the lse outputs aside:
// libm's and CUDA's). The fused log-prob's log-sum-exp is logprob.cu's: fixed 256-entry vocabulary
// blocks folded in vocabulary order, for decode's logprob as for training's linear_logprob.
//
// Cost: these are CUDA-core f32 kernels. Against cuBLASLt's tensor-core GEMMs (bf16) and cuDNN's
// fused attention they are slower, the GEMMs by up to an order of magnitude where a GEMM is
// compute-bound; decoding, bound by reading the weights and the cache, loses less. A query's
// scores are kept in shared memory: up to 40960 keys. Decoding with grouped-query heads, one block
// serves the G query heads of a KV head (while their G score rows fit), so the cache's key and
// value rows are read once a KV head, not once a query head. A block still serves one query row:
// the shared-prompt cache's prompt part is stored once but read by each row of the group.
#include "attention_common.cuh"
#include "invariant.cuh"

namespace {

// ---------------------------------------------------------------- values
template <class TR> static __device__ __forceinline__ float round_through(float x) {
    if constexpr (sizeof(TR) == 2) return dfg_to_f(dfg_from_f<TR>(x));
    else return x;
}

// e^x as ops/cpu/fastmath.h's dfg_exp_f32, rounded step for step
static __device__ __forceinline__ float inv_exp(float x) {
    const float hi = 88.72283935546875f, lo = -87.33654022216797f;
    float c = x > hi ? hi : (x < lo ? lo : x);
    c = c == c ? c : 0.0f;
    const float t = __fmul_rn(c, 1.44269504088896341f);
    const int n = (int)__fadd_rn(t, t >= 0.0f ? 0.5f : -0.5f);
    const float fn = (float)n;
    const float r = __fadd_rn(__fadd_rn(c, -__fmul_rn(fn, 0.693359375f)), __fmul_rn(fn, 2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
    const int h = n >> 1;
    const float y = __fmul_rn(__fmul_rn(p, __uint_as_float((unsigned)(h + 127) << 23)),
                              __uint_as_float((unsigned)(n - h + 127) << 23));
    const float z = x > hi ? INFINITY : (x < lo ? 0.0f : y);
    return x == x ? z : x;
}

// ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)) of the 8 lanes of an aligned group of 8 threads, in each
static __device__ __forceinline__ float lanes8_sum(float v) {
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
}

// ---------------------------------------------------------------- GEMM, NT order
// Block: a (32, 32) tile of C, 256 threads = 32 groups of 8 lanes. Group g owns rows rq + 8i
// (rq = g % 8) and columns cq + 4j (cq = g / 8); its lane l adds the k = l mod 8 terms of all 32.
// Tiles of A and B (32 rows x 32 k) are staged in shared memory, rows 40 floats apart: a warp's 4
// groups read 4 consecutive rows at 8 consecutive k, 32 banks.
constexpr int NT_TILE = 32, NT_BK = 32, NT_PITCH = NT_BK + 8, GEMM_THREADS = 256;

template <class T, class TC, class TR>
static __global__ void __launch_bounds__(GEMM_THREADS)
    inv_nt_kernel(TC *C, const T *A, const T *B, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                  int64_t ldc, int64_t sa, int64_t sb, int64_t sc, float alpha, int64_t n_tiles) {
    __shared__ float As[NT_TILE * NT_PITCH], Bs[NT_TILE * NT_PITCH];
    const int tid = threadIdx.x, g = tid >> 3, lane = tid & 7, rq = g % 8, cq = g / 8;
    const int64_t m0 = (int64_t)(blockIdx.x / n_tiles) * NT_TILE, n0 = (int64_t)(blockIdx.x % n_tiles) * NT_TILE;
    A += blockIdx.y * sa, B += blockIdx.y * sb, C += blockIdx.y * sc;
    float acc[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += NT_BK) {
        for (int e = tid; e < NT_TILE * NT_BK; e += GEMM_THREADS) {
            const int r = e / NT_BK, kk = e % NT_BK;
            const int64_t k = k0 + kk;
            As[r * NT_PITCH + kk] = m0 + r < M && k < K ? dfg_ld(A, (m0 + r) * lda + k) : 0.0f;
            Bs[r * NT_PITCH + kk] = n0 + r < N && k < K ? dfg_ld(B, (n0 + r) * ldb + k) : 0.0f;
        }
        __syncthreads();
        const int kn = K - k0 < NT_BK ? (int)(K - k0) : NT_BK;
        for (int kk = lane; kk < kn; kk += 8) { // only the terms that exist: a lane past K adds nothing
            float a[4], b[8];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[(rq + 8 * i) * NT_PITCH + kk];
#pragma unroll
            for (int j = 0; j < 8; j++) b[j] = Bs[(cq + 4 * j) * NT_PITCH + kk];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float v = __fmul_rn(alpha, lanes8_sum(acc[i][j]));
            const int64_t m = m0 + rq + 8 * i, nn = n0 + cq + 4 * j;
            if (lane == j && m < M && nn < N) dfg_st(C, m * ldc + nn, round_through<TR>(v));
        }
}

// ---------------------------------------------------------------- GEMM, NN order
// Block: a (64, 64) tile of C, 256 threads as (16, 16); thread (ty, tx) owns rows ty + 16i and
// columns tx + 16j, each one accumulator over k in order. Tiles of 16 k: A's transposed.
constexpr int NN_TILE = 64, NN_BK = 16, NN_PITCH = NN_TILE + 4;

template <class T, class TC, class TR>
static __global__ void __launch_bounds__(GEMM_THREADS)
    inv_nn_kernel(TC *C, const T *A, const T *B, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                  int64_t ldc, int64_t sa, int64_t sb, int64_t sc, float alpha, int64_t n_tiles) {
    __shared__ float As[NN_BK * NN_PITCH], Bs[NN_BK * NN_PITCH];
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int64_t m0 = (int64_t)(blockIdx.x / n_tiles) * NN_TILE, n0 = (int64_t)(blockIdx.x % n_tiles) * NN_TILE;
    A += blockIdx.y * sa, B += blockIdx.y * sb, C += blockIdx.y * sc;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += NN_BK) {
        for (int e = tid; e < NN_TILE * NN_BK; e += GEMM_THREADS) {
            const int r = e / NN_BK, kk = e % NN_BK; // A: row r, k kk (along its row)
            As[kk * NN_PITCH + r] = m0 + r < M && k0 + kk < K ? dfg_ld(A, (m0 + r) * lda + k0 + kk) : 0.0f;
            const int kb = e / NN_TILE, c = e % NN_TILE; // B: k kb, column c (along its row)
            Bs[kb * NN_PITCH + c] = n0 + c < N && k0 + kb < K ? dfg_ld(B, (k0 + kb) * ldb + n0 + c) : 0.0f;
        }
        __syncthreads();
        const int kn = K - k0 < NN_BK ? (int)(K - k0) : NN_BK;
        for (int kk = 0; kk < kn; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk * NN_PITCH + ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk * NN_PITCH + tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t m = m0 + ty + 16 * i, nn = n0 + tx + 16 * j;
            if (m < M && nn < N) dfg_st(C, m * ldc + nn, round_through<TR>(__fmul_rn(alpha, acc[i][j])));
        }
}

// Row-major C (M, N) = alpha A (M, K) op(B), `batch` times (A, B, C sa, sb, sc elements further
// each time; 0: shared); C's values rounded through TR before they are stored as TC.
struct inv_gemm_args {
    bool tb;
    int64_t M, N, K, lda, ldb, ldc, sa, sb, sc, batch;
    float alpha;
};

template <class T, class TC, class TR>
static cudaError_t inv_gemm(cudaStream_t stream, const inv_gemm_args &g, const T *A, const T *B, TC *C) {
    if (g.M < 1 || g.N < 1 || g.batch < 1) return cudaSuccess;
    const int tile = g.tb ? NT_TILE : NN_TILE;
    const int64_t n_tiles = dfg_cdiv(g.N, tile), tiles = dfg_cdiv(g.M, tile) * n_tiles;
    const dim3 grid((unsigned)tiles, (unsigned)g.batch);
    if (g.tb)
        return DFG_LAUNCH((inv_nt_kernel<T, TC, TR>), grid, GEMM_THREADS, 0, stream, C, A, B, g.M, g.N, g.K, g.lda,
                          g.ldb, g.ldc, g.sa, g.sb, g.sc, g.alpha, n_tiles);
    return DFG_LAUNCH((inv_nn_kernel<T, TC, TR>), grid, GEMM_THREADS, 0, stream, C, A, B, g.M, g.N, g.K, g.lda, g.ldb,
                      g.ldc, g.sa, g.sb, g.sc, g.alpha, n_tiles);
}

// ---------------------------------------------------------------- attention, one query a block
enum { INV_PLAIN, INV_PREFIX, INV_CACHED, INV_SHARED };

struct inv_att {
    int kind;
    int H, D, G;     // heads, head dim, query heads per KV head (cached, shared)
    int HB;          // heads a block: G or 1 (inv_att_kernel)
    int Tc, Tp, Gp;  // plain / prefix: rows a sequence, prefix rows, sequences per prefix;
                     // shared: each row's own columns, the prompt part's, rows per prompt
    int Tq, Tmax;    // cached, shared: queries a row; cached: cache rows
    int P;           // shared: prompts
    int pos_rows;    // cached, shared: one position a row
    long long C, Ckv; // q / y row width; the caches' (cached, shared)
    float scale;
};

// An attention node's inputs: the queries (or qkv), then the key sources of its form.
template <class T> struct inv_src {
    const T *src, *pre;      // q or qkv; the prefix's qkv (prefix)
    const T *kc, *vc;        // the cache (cached); the prompt part (shared)
    const T *kr, *vr;        // the rows' own part (shared)
    const int32_t *pos, *start, *prompt_of;
};

// A query's keys: run 0 (the prefix's, or the cache's, or the sequence's own), then run 1.
template <class T> struct inv_keys {
    const T *k[2], *v[2];
    int n[2];
    long long stride;
};

// A clamped, range-checked index (a start or a position outside its range sets the flag, as the
// tiled kernels do; the CPU kernels refuse the step)
static __device__ __forceinline__ int inv_clamp(int x, int hi, int *flags, bool report) {
    if (x < 0 || x > hi) {
        if (report && flags) *flags = 1;
        x = x < 0 ? 0 : hi;
    }
    return x;
}

// Block (query row r, head h) of `a`: its query, keys, output row and lse slot (-1: none).
// Shared: row b's prompt keys from its first (start, or 0 for a pad column) to its column, then
// its own part's: the copied cache's run lo .. col in two pieces, the same keys in the same order.
template <class T>
static __device__ __forceinline__ void inv_shared_keys(const inv_att &a, const inv_src<T> &in, int *flags, long long r,
                                                       int h, inv_keys<T> &keys, bool report) {
    const long long b = r / a.Tq, i = r % a.Tq, hk = (long long)(h / a.G) * a.D;
    const int cols = a.Tp + a.Tc;
    const int col = inv_clamp(in.pos[a.pos_rows ? b : 0], cols - a.Tq, flags, report) + (int)i;
    const int s = in.start ? inv_clamp(in.start[b], cols - 1, flags, report) : 0, lo = col >= s ? s : 0;
    const long long p = in.prompt_of ? inv_clamp(in.prompt_of[b], a.P - 1, flags, report) : b / a.Gp;
    const int plo = min(lo, a.Tp), phi = min(col + 1, a.Tp), olo = max(lo - a.Tp, 0), ohi = max(col + 1 - a.Tp, 0);
    const long long at_p = (p * a.Tp + plo) * a.Ckv + hk, at_o = (b * a.Tc + olo) * a.Ckv + hk;
    keys.k[0] = in.kc + at_p, keys.v[0] = in.vc + at_p, keys.n[0] = phi - plo;
    keys.k[1] = in.kr + at_o, keys.v[1] = in.vr + at_o, keys.n[1] = ohi - olo;
    keys.stride = a.Ckv;
}

template <class T>
static __device__ __forceinline__ void inv_query(const inv_att &a, const inv_src<T> &in, int *flags, long long r, int h,
                                                 const T **q, inv_keys<T> &keys, long long *yoff, long long *lse_at) {
    const bool report = threadIdx.x == 0;
    const T *src = in.src, *pre = in.pre, *kc = in.kc, *vc = in.vc;
    const int32_t *pos = in.pos, *start = in.start;
    keys.n[1] = 0, keys.k[1] = keys.v[1] = nullptr;
    if (a.kind == INV_SHARED) {
        *q = src + r * a.C + (long long)h * a.D, *yoff = r * a.C + (long long)h * a.D, *lse_at = -1;
        inv_shared_keys(a, in, flags, r, h, keys, report);
        return;
    }
    if (a.kind == INV_CACHED) {
        const long long b = r / a.Tq, i = r % a.Tq;
        const int col = inv_clamp(pos[a.pos_rows ? b : 0], a.Tmax - a.Tq, flags, report) + (int)i;
        const int s = start ? inv_clamp(start[b], a.Tmax - 1, flags, report) : 0, lo = col >= s ? s : 0;
        const long long at = (b * a.Tmax + lo) * a.Ckv + (long long)(h / a.G) * a.D;
        *q = src + r * a.C + (long long)h * a.D, *yoff = r * a.C + (long long)h * a.D, *lse_at = -1;
        keys.k[0] = kc + at, keys.v[0] = vc + at, keys.n[0] = col - lo + 1, keys.stride = a.Ckv;
        return;
    }
    const long long b = r / a.Tc, i = r % a.Tc, C3 = 3 * a.C, hd = (long long)h * a.D;
    *q = src + r * C3 + hd, *yoff = r * a.C + hd, *lse_at = (b * a.H + h) * a.Tc + i;
    keys.stride = C3;
    const T *own = src + b * a.Tc * C3 + a.C + hd; // the sequence's key row 0 (values at + C)
    if (a.kind == INV_PREFIX) { // the prefix's keys from its start, then the sequence's 0 .. i
        const long long p = b / a.Gp;
        const int s = start ? inv_clamp(start[p], a.Tp - 1, flags, report) : 0;
        const T *kp = pre + (p * a.Tp + s) * C3 + a.C + hd;
        keys.k[0] = kp, keys.v[0] = kp + a.C, keys.n[0] = a.Tp - s;
        keys.k[1] = own, keys.v[1] = own + a.C, keys.n[1] = (int)i + 1;
        return;
    }
    // plain: a real column i >= s sees keys s .. i, a pad keys 0 .. i
    const int s = start ? inv_clamp(start[b], a.Tc - 1, flags, report) : 0, lo = i >= s ? s : 0;
    keys.k[0] = own + lo * C3, keys.v[0] = own + a.C + lo * C3, keys.n[0] = (int)i + 1 - lo;
}

// the NT element of q (shared, D) and a key row: 8 lanes in one thread
template <class T> static __device__ __forceinline__ float inv_dot8(const float *q, const T *k, int D) {
    float l[8];
#pragma unroll
    for (int i = 0; i < 8; i++) l[i] = 0.0f;
    int d = 0;
    for (; d + 8 <= D; d += 8)
#pragma unroll
        for (int i = 0; i < 8; i++) l[i] = __fmaf_rn(q[d + i], dfg_ld(k, d + i), l[i]);
    for (int i = 0; d + i < D; i++) l[i] = __fmaf_rn(q[d + i], dfg_ld(k, d + i), l[i]);
    return __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[4]), __fadd_rn(l[2], l[6])),
                     __fadd_rn(__fadd_rn(l[1], l[5]), __fadd_rn(l[3], l[7])));
}

// Block (query row, heads h0 .. h0+HB-1): HB > 1 only where the heads share one KV head (the
// cached forms with grouped-query heads), so the block reads each key and value row once for all
// of them; each head's arithmetic is the one-head block's, in the same order. Shared memory: the
// queries (HB, D), the 8 lanes' sums (HB, 8), each head's max and sum (HB, 2), then its scores /
// weights (HB, nk).
constexpr int INV_HB_MAX = 8; // heads a thread accumulates outputs for at once

template <class T>
static __global__ void __launch_bounds__(ATT_THREADS)
    inv_att_kernel(T *y, float *lse, inv_src<T> in, int *flags, inv_att a) {
    DFG_SHARED_DYNAMIC(float, sm);
    __shared__ float red[32];
    const int tid = threadIdx.x, HB = a.HB, D = a.D;
    const T *q;
    inv_keys<T> keys;
    long long yoff, lse_at;
    inv_query(a, in, flags, (long long)blockIdx.x, (int)blockIdx.y * HB, &q, keys, &yoff, &lse_at);
    const int nk = keys.n[0] + keys.n[1];
    float *qs = sm, *lanes = qs + HB * D, *ms = lanes + 8 * HB, *sums = ms + HB, *p = sums + HB;
    for (int e = tid; e < HB * D; e += ATT_THREADS) qs[e] = dfg_ld(q, e); // head h0 + t's query at t * D
    __syncthreads();
    for (int j = tid; j < nk; j += ATT_THREADS) {
        const int run = j < keys.n[0] ? 0 : 1, jr = run ? j - keys.n[0] : j;
        const T *k = keys.k[run] + jr * keys.stride;
        for (int t = 0; t < HB; t++) p[t * nk + j] = __fmul_rn(a.scale, inv_dot8(qs + t * D, k, D));
    }
    for (int t = 0; t < HB; t++) { // a thread reads back only the scores it wrote
        float *pt = p + t * nk, mx = -INFINITY;
        for (int j = tid; j < nk; j += ATT_THREADS) mx = pt[j] > mx ? pt[j] : mx;
        const float m = dfg_block_reduce<ATT_THREADS / 32>(mx, red, -INFINITY, DfgMax());
        for (int j = tid; j < nk; j += ATT_THREADS) pt[j] = inv_exp(__fadd_rn(pt[j], -m));
        if (tid == 0) ms[t] = m;
    }
    __syncthreads();
    for (int e = tid; e < 8 * HB; e += ATT_THREADS) { // head e / 8, lane e % 8: keys lane, lane+8, ... in order
        const float *pt = p + (e / 8) * nk;
        float l = 0.0f;
        for (int j = e % 8; j < nk; j += 8) l = __fadd_rn(l, pt[j]);
        lanes[e] = l;
    }
    __syncthreads();
    for (int t = tid; t < HB; t += ATT_THREADS) {
        const float *l = lanes + 8 * t;
        sums[t] = __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[4]), __fadd_rn(l[2], l[6])),
                            __fadd_rn(__fadd_rn(l[1], l[5]), __fadd_rn(l[3], l[7])));
    }
    __syncthreads();
    for (int d = tid; d < D; d += ATT_THREADS)
        for (int t0 = 0; t0 < HB; t0 += INV_HB_MAX) { // each value read once for up to 8 heads
            const int w = min(INV_HB_MAX, HB - t0);
            float o[INV_HB_MAX], inv[INV_HB_MAX];
#pragma unroll
            for (int u = 0; u < INV_HB_MAX; u++) o[u] = 0.0f, inv[u] = u < w ? __fdiv_rn(1.0f, sums[t0 + u]) : 0.0f;
            for (int run = 0; run < 2; run++) {
                const T *v = keys.v[run] + d;
                const int j0 = run ? keys.n[0] : 0;
                for (int j = 0; j < keys.n[run]; j++) {
                    const float x = dfg_ld(v, j * keys.stride);
#pragma unroll
                    for (int u = 0; u < INV_HB_MAX; u++)
                        if (u < w) o[u] = __fmaf_rn(__fmul_rn(p[(t0 + u) * nk + j0 + j], inv[u]), x, o[u]);
                }
            }
#pragma unroll
            for (int u = 0; u < INV_HB_MAX; u++)
                if (u < w) dfg_st(y, yoff + (long long)(t0 + u) * D + d, o[u]);
        }
    if (lse && tid == 0) lse[lse_at] = __fadd_rn(ms[0], logf(sums[0])); // one head a block (plain, prefix)
}

constexpr int INV_MAX_KEYS = 40960;     // the scores in shared memory: 160 KiB
constexpr size_t INV_SMEM_FLOATS = 41472; // a block's shared memory, 162 KiB: under A100's 163

// inv_att_kernel's shared memory, in floats, for blocks of hb heads over `keys` keys
static size_t inv_floats(const inv_att &a, int hb, int keys) { return (size_t)hb * ((size_t)a.D + 10 + (size_t)keys); }

// The geometry of an attention node of any of the four forms.
static inv_att inv_geometry(const dfg_node *n) {
    inv_att a = {};
    const dfg_shape s0 = n->in[0]->shape;
    if (n->op == DFG_OP_ATTENTION_SHARED_CACHED) {
        a.kind = INV_SHARED, a.H = n->attr->attention_shared.n_head;
        a.Tq = (int)s0.d[1], a.C = s0.d[2], a.D = (int)(a.C / a.H);
        a.P = (int)n->in[1]->shape.d[0], a.Tp = (int)n->in[1]->shape.d[1], a.Ckv = n->in[1]->shape.d[2];
        a.Tc = (int)n->in[3]->shape.d[1], a.Gp = (int)(s0.d[0] / a.P), a.G = a.H / (int)(a.Ckv / a.D);
        a.pos_rows = dfg_shape_numel(n->in[5]->shape) == 1 ? 0 : 1;
        a.scale = 1.0f / sqrtf((float)a.D);
        return a;
    }
    a.H = n->attr->attention.n_head;
    if (n->op == DFG_OP_ATTENTION_CACHED) {
        a.kind = INV_CACHED;
        a.Tq = (int)s0.d[1], a.C = s0.d[2], a.D = (int)(a.C / a.H);
        a.Tmax = (int)n->in[1]->shape.d[1], a.Ckv = n->in[1]->shape.d[2];
        a.G = a.H / (int)(a.Ckv / a.D);
        a.pos_rows = dfg_shape_numel(n->in[3]->shape) == 1 ? 0 : 1;
    } else {
        a.kind = n->op == DFG_OP_ATTENTION_PREFIX ? INV_PREFIX : INV_PLAIN;
        a.Tc = (int)s0.d[1], a.C = s0.d[2] / 3, a.D = (int)(a.C / a.H), a.G = 1;
        if (a.kind == INV_PREFIX) a.Tp = (int)n->in[1]->shape.d[1], a.Gp = (int)(s0.d[0] / n->in[1]->shape.d[0]);
    }
    a.scale = 1.0f / sqrtf((float)a.D);
    return a;
}

template <class T>
static dfg_status inv_attention_t(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx) {
    inv_att a = inv_geometry(n);
    const bool decode = a.kind == INV_CACHED || a.kind == INV_SHARED;
    const long long rows = n->in[0]->shape.d[0] * (long long)(decode ? a.Tq : a.Tc);
    const int keys = a.kind == INV_CACHED ? a.Tmax : a.Tp + a.Tc;
    if (keys > INV_MAX_KEYS)
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "%d keys: the batch-invariant attention takes up to %d", keys,
                             INV_MAX_KEYS);
    if (rows < 1) return DFG_OK;
    // the heads of one KV head in one block when their scores fit: the same bits either way
    a.HB = decode && a.G > 1 && inv_floats(a, a.G, keys) <= INV_SMEM_FLOATS ? a.G : 1;
    if (inv_floats(a, a.HB, keys) > INV_SMEM_FLOATS)
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "head dim %d and %d keys: over the batch-invariant "
                             "attention's shared memory", a.D, keys);
    inv_src<T> s = {};
    s.src = (const T *)in[0];
    float *lse = nullptr;
    if (a.kind == INV_SHARED) { // q, k_prompt, v_prompt, k_rows, v_rows, pos [, start] [, prompt_of]
        const dfg_attrs_attention_shared *at = &n->attr->attention_shared;
        s.kc = (const T *)in[1], s.vc = (const T *)in[2], s.kr = (const T *)in[3], s.vr = (const T *)in[4];
        s.pos = (const int32_t *)in[5], s.start = at->start ? (const int32_t *)in[6] : nullptr;
        s.prompt_of = at->prompt_of ? (const int32_t *)in[n->n_in - 1] : nullptr;
    } else if (a.kind == INV_CACHED) {
        s.kc = (const T *)in[1], s.vc = (const T *)in[2], s.pos = (const int32_t *)in[3];
        s.start = n->n_in > 4 ? (const int32_t *)in[4] : nullptr;
    } else {
        const int plain = a.kind == INV_PREFIX ? 2 : 1; // the start's input
        if (a.kind == INV_PREFIX) s.pre = (const T *)in[1];
        s.start = n->n_in > plain ? (const int32_t *)in[plain] : nullptr;
        lse = (float *)out[1];
    }
    const cudaStream_t stream = (cudaStream_t)ctx->stream;
    ATT_LAUNCH((inv_att_kernel<T>), dim3((unsigned)rows, (unsigned)(a.H / a.HB)), inv_floats(a, a.HB, keys), (T *)out[0],
               lse, s, ctx->flags, a);
    return DFG_OK;
}

} // namespace

// ---------------------------------------------------------------- entry points
extern "C" dfg_status DFG_CUDA_FN(inv_matmul)(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx) {
    dfg_mm_dims mm;
    const char *why = "";
    if (!dfg_matmul_dims(n, &mm, &why)) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "%s", why);
    const bool tb = n->attr->matmul.trans_b;
    const bool a_batched = n->in[0]->shape.rank > 2, b_batched = n->in[1]->shape.rank > 2;
    inv_gemm_args g = {tb, mm.M, mm.N, mm.K, mm.K, tb ? mm.K : mm.N, mm.N, mm.M * mm.K, b_batched ? mm.K * mm.N : 0,
                       mm.M * mm.N, mm.batch, 1.0f};
    if (a_batched && !b_batched) g.M *= mm.batch, g.batch = 1; // a shared B: the batch folds into M
    if (!a_batched) g.sa = 0;
    if (g.batch > 65535) return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "a batch of %lld: over the grid's limit", (long long)g.batch);
    if (n->in[1]->dtype != n->in[0]->dtype || (n->out[0]->dtype != n->in[0]->dtype && n->out[0]->dtype != DFG_F32))
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "the batch-invariant matmul takes operands of one dtype and "
                             "an output of theirs or f32");
    const cudaStream_t stream = (cudaStream_t)ctx->stream;
    cudaError_t e = cudaSuccess;
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T, {
        if (n->out[0]->dtype == n->in[0]->dtype)
            e = inv_gemm<T, T, T>(stream, g, (const T *)in[0], (const T *)in[1], (T *)out[0]);
        else
            e = inv_gemm<T, float, float>(stream, g, (const T *)in[0], (const T *)in[1], (float *)out[0]);
    });
    return dfg_cuda_launched(ctx, n, e, "inv_gemm");
}

extern "C" dfg_status DFG_CUDA_FN(inv_attention)(const dfg_node *n, void *const *in, void *const *out,
                                                 dfg_cuda_ctx *ctx) {
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T, return inv_attention_t<T>(n, in, out, ctx));
}

extern "C" dfg_status DFG_CUDA_FN(inv_chunk_logits)(dfg_cuda_ctx *ctx, const dfg_node *n, const void *h, const void *w,
                                                    dfg_dtype dt, bool tb, int64_t c, int64_t v, int64_t r0, int64_t rc,
                                                    int64_t v0, int64_t vc, float *ws) {
    const inv_gemm_args g = {tb, rc, vc, c, c, tb ? c : v, vc, 0, 0, 0, 1, 1.0f};
    const cudaStream_t stream = (cudaStream_t)ctx->stream;
    cudaError_t e;
    if (dt == DFG_BF16) {
        const __nv_bfloat16 *hb = (const __nv_bfloat16 *)h + r0 * c, *wb = (const __nv_bfloat16 *)w + (tb ? v0 * c : v0);
        e = inv_gemm<__nv_bfloat16, float, __nv_bfloat16>(stream, g, hb, wb, ws);
    } else if (dt == DFG_F32) {
        const float *hf = (const float *)h + r0 * c, *wf = (const float *)w + (tb ? v0 * c : v0);
        e = inv_gemm<float, float, float>(stream, g, hf, wf, ws);
    } else {
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "the hidden states are %s; the CUDA kernels take f32 and bf16",
                             dfg_dtype_name(dt));
    }
    return dfg_cuda_launched(ctx, n, e, "inv_gemm");
}
