/* invariant.c - batch-invariant CPU kernels: the matmul, the linear log-prob's logits and the
 * attention forms compute every output element in one fixed order that depends on its own row
 * and column alone, never on how many rows the call holds, where the row sits in them, the
 * thread count or the alignment. A plan declared batch-invariant (dfg_declare_batch_invariant:
 * the GRPO pipeline's batch_invariant setting) runs these in place of OpenBLAS's forward GEMMs,
 * so a token's log-prob computed while decoding (one new row against the KV cache) and in the
 * training forward (the whole sequence at once) are the same float, bit for bit. OpenBLAS picks
 * kernels and blocking by the matrix shapes it is given, so its sums over K differ between the
 * two. (Thinking Machines' "Defeating nondeterminism in LLM inference" makes the same point.)
 *
 * The orders, which the AVX2 and AVX-512 paths below and the plain-C reference paths follow
 * operation for operation (fused multiply-adds throughout; the reference calls fmaf, which rounds
 * once as the FMA instruction does, so all give the same bits and a CPU without AVX2 computes the
 * same; AVX-512 holds two columns' 8 lanes in one register, or 16 columns' accumulators):
 *   NT element (B given as (N, K): nn.Linear weights, the tied lm_head, attention scores):
 *     8 lanes, lane i accumulating k = i, i+8, ... over the first K - K%8 terms, the remaining
 *     K%8 terms into lanes 0 .. K%8-1, then the lanes summed as ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
 *   NN element (B given as (K, N): GPT-2's Conv1D weights): one accumulator over k = 0 .. K-1.
 *   Both times alpha. Attention (one query, its keys in order): scores by the NT element times
 *   the scale, the softmax's sum over 8 lanes as above, y = sum_j p_j v_j one key at a time. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu.h"
#include "fastmath.h"

#pragma STDC FP_CONTRACT OFF

/* The instruction set the kernels use: 0 the plain-C definition, 1 AVX2 + FMA, 2 AVX-512. A fact
 * of the machine (the same answer from every thread), unless a test forces a level. */
static int detected = -1, forced = -1;

static int isa(void) {
    if (detected < 0) {
        __builtin_cpu_init();
        bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
        detected = avx2 ? (avx512 ? 2 : 1) : 0;
    }
    return forced >= 0 && forced < detected ? forced : detected;
}

int dfg_cpu_invariant_isa(int level) {
    forced = level;
    return isa();
}

static bool use_avx2(void) { return isa() >= 1; }

/* ---------------------------------------------------------------- the reference orders */
static float lanes_sum(const float l[8]) {
    float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
    return (t0 + t2) + (t1 + t3);
}

static float dot_ref(const float *a, const float *b, int64_t K) {
    float l[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        for (int i = 0; i < 8; i++) l[i] = fmaf(a[k + i], b[k + i], l[i]);
    for (int i = 0; k + i < K; i++) l[i] = fmaf(a[k + i], b[k + i], l[i]);
    return lanes_sum(l);
}

/* C[m, n] for m in [m0, m1), n in [n0, n1) */
static void gemm_ref(bool tb, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t m = m0; m < m1; m++)
        for (int64_t n = n0; n < n1; n++) {
            float acc = 0.0f;
            if (tb) acc = dot_ref(A + m * lda, B + n * ldb, K);
            else
                for (int64_t k = 0; k < K; k++) acc = fmaf(A[m * lda + k], B[k * ldb + n], acc);
            C[m * ldc + n] = alpha * acc;
        }
}

/* ---------------------------------------------------------------- AVX2 */
#define AVX2 __attribute__((target("avx2,fma")))
#define INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma")))

/* lanes 0 .. n-1 on (n clamped to 0 .. 8) */
INLINE_AVX2 __m256i lane_mask(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE_AVX2 float hsum(__m256 v) { /* lanes_sum's tree */
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* l[i] + l[i+4] */
    __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));                                /* t0+t2, t1+t3 */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

/* C tile (mr <= 4 rows, nr <= 2 columns) of the NT order: rows of A and B along K */
INLINE_AVX2 void nt_tile(const int mr, const int nr, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                         int64_t ldc, int64_t K, float alpha) {
    __m256 acc[4][2];
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 b[2];
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) b[j] = _mm256_loadu_ps(B + j * ldb + k);
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m256 a = _mm256_loadu_ps(A + i * lda + k);
            #pragma GCC unroll 4
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(a, b[j], acc[i][j]);
        }
    }
    if (k < K) { /* the tail into lanes 0 .. K-k-1; the others get 0 * 0 added, which leaves them as they are */
        __m256i m = lane_mask(K - k);
        __m256 b[2];
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) b[j] = _mm256_maskload_ps(B + j * ldb + k, m);
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m256 a = _mm256_maskload_ps(A + i * lda + k, m);
            #pragma GCC unroll 4
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(a, b[j], acc[i][j]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) C[i * ldc + j] = alpha * hsum(acc[i][j]);
}

/* C tile (mr <= 4 rows, nc <= 16 columns) of the NN order: one accumulator per element over k */
INLINE_AVX2 void nn_tile(const int mr, int64_t nc, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                         int64_t ldc, int64_t K, float alpha) {
    __m256 acc[4][2];
    __m256i m0 = lane_mask(nc), m1 = lane_mask(nc - 8);
    bool full = nc == 16;
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        __m256 b0 = full ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, m0);
        __m256 b1 = full ? _mm256_loadu_ps(b + 8) : _mm256_maskload_ps(b + 8, m1);
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m256 a = _mm256_broadcast_ss(A + i * lda + k);
            acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    __m256 s = _mm256_set1_ps(alpha);
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        __m256 c0 = _mm256_mul_ps(s, acc[i][0]), c1 = _mm256_mul_ps(s, acc[i][1]);
        if (full) {
            _mm256_storeu_ps(C + i * ldc, c0);
            _mm256_storeu_ps(C + i * ldc + 8, c1);
        } else {
            _mm256_maskstore_ps(C + i * ldc, m0, c0);
            _mm256_maskstore_ps(C + i * ldc + 8, m1, c1);
        }
    }
}

enum { BLOCK_M = 64, BLOCK_N = 64 }; /* a block of A rows and of B columns (NT) stays in cache */

AVX2 static void nt_block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t n = n0; n < n1; n += 2) { /* two B rows stay in L1 while the block's rows pass */
        int nr = n1 - n >= 2 ? 2 : 1;
        for (int64_t m = m0; m < m1; m += 4) {
            const float *a = A + m * lda, *b = B + n * ldb;
            float *c = C + m * ldc + n;
            int64_t mr = m1 - m >= 4 ? 4 : m1 - m;
            if (nr == 2) {
                if (mr == 4) nt_tile(4, 2, a, lda, b, ldb, c, ldc, K, alpha);
                else if (mr == 3) nt_tile(3, 2, a, lda, b, ldb, c, ldc, K, alpha);
                else if (mr == 2) nt_tile(2, 2, a, lda, b, ldb, c, ldc, K, alpha);
                else nt_tile(1, 2, a, lda, b, ldb, c, ldc, K, alpha);
            } else {
                if (mr == 4) nt_tile(4, 1, a, lda, b, ldb, c, ldc, K, alpha);
                else if (mr == 3) nt_tile(3, 1, a, lda, b, ldb, c, ldc, K, alpha);
                else if (mr == 2) nt_tile(2, 1, a, lda, b, ldb, c, ldc, K, alpha);
                else nt_tile(1, 1, a, lda, b, ldb, c, ldc, K, alpha);
            }
        }
    }
}

AVX2 static void nn_block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t n = n0; n < n1; n += 16) { /* a (K, 16) panel of B stays in cache while the rows pass */
        int64_t nc = n1 - n >= 16 ? 16 : n1 - n;
        for (int64_t m = m0; m < m1; m += 4) {
            const float *a = A + m * lda, *b = B + n;
            float *c = C + m * ldc + n;
            int64_t mr = m1 - m >= 4 ? 4 : m1 - m;
            if (mr == 4) nn_tile(4, nc, a, lda, b, ldb, c, ldc, K, alpha);
            else if (mr == 3) nn_tile(3, nc, a, lda, b, ldb, c, ldc, K, alpha);
            else if (mr == 2) nn_tile(2, nc, a, lda, b, ldb, c, ldc, K, alpha);
            else nn_tile(1, nc, a, lda, b, ldb, c, ldc, K, alpha);
        }
    }
}

AVX2 static float dot_avx2(const float *a, const float *b, int64_t K) {
    float c;
    nt_tile(1, 1, a, 0, b, 0, &c, 0, K, 1.0f);
    return c;
}

/* ---------------------------------------------------------------- AVX-512: the same orders */
#define AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
#define INLINE_AVX512 static inline __attribute__((always_inline, target("avx512f,avx512dq,avx512vl,avx2,fma")))

INLINE_AVX512 __mmask16 mask16(int64_t n) { return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1u); }
INLINE_AVX512 __mmask8 mask8(int64_t n) { return n <= 0 ? 0 : n >= 8 ? 0xff : (__mmask8)((1u << n) - 1u); }

/* C tile (mr <= 4 rows, nc <= 32 columns) of the NN order: one accumulator per element over k */
INLINE_AVX512 void nn_tile512(const int mr, int64_t nc, const float *A, int64_t lda, const float *B, int64_t ldb,
                              float *C, int64_t ldc, int64_t K, float alpha) {
    __m512 acc[4][2];
    __mmask16 m0 = mask16(nc), m1 = mask16(nc - 16);
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_set1_ps(A[i * lda + k]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    __m512 s = _mm512_set1_ps(alpha);
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        _mm512_mask_storeu_ps(C + i * ldc, m0, _mm512_mul_ps(s, acc[i][0]));
        _mm512_mask_storeu_ps(C + i * ldc + 16, m1, _mm512_mul_ps(s, acc[i][1]));
    }
}

/* 8 floats of row j at k (the lanes below `have` only; the rest 0): one half of a zmm */
INLINE_AVX512 __m256 half8(const float *row, int64_t k, int64_t have) {
    return have >= 8 ? _mm256_loadu_ps(row + k) : _mm256_maskz_loadu_ps(mask8(have), row + k);
}

/* C tile (mr <= 4 rows, nr <= 4 columns) of the NT order: each zmm holds two columns' 8 lanes */
INLINE_AVX512 void nt_tile512(const int mr, const int nr, const float *A, int64_t lda, const float *B, int64_t ldb,
                              float *C, int64_t ldc, int64_t K, float alpha) {
    __m512 acc[4][2];
    const int np = (nr + 1) / 2; /* column pairs; a missing second column reads zeros */
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int p = 0; p < np; p++) acc[i][p] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 8) {
        int64_t have = K - k; /* >= 8 but at the tail: the tail's lanes as the reference adds them */
        __m512 b[2];
        #pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            __m256 lo = half8(B + 2 * p * ldb, k, have);
            __m256 hi = 2 * p + 1 < nr ? half8(B + (2 * p + 1) * ldb, k, have) : _mm256_setzero_ps();
            b[p] = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
        }
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_broadcast_f32x8(half8(A + i * lda, k, have));
            #pragma GCC unroll 4
            for (int p = 0; p < np; p++) acc[i][p] = _mm512_fmadd_ps(a, b[p], acc[i][p]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            __m512 v = acc[i][j / 2];
            __m256 h = j % 2 ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v);
            C[i * ldc + j] = alpha * hsum(h);
        }
}

AVX512 static void nt_block512(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A,
                               int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t n = n0; n < n1; n += 4) {
        int nr = n1 - n >= 4 ? 4 : (int)(n1 - n);
        for (int64_t m = m0; m < m1; m += 4) {
            const float *a = A + m * lda, *b = B + n * ldb;
            float *c = C + m * ldc + n;
            int mr = m1 - m >= 4 ? 4 : (int)(m1 - m);
#define NT512(R) /* the tile's shape as constants, so the loops unroll */                                        \
    (nr == 4 ? nt_tile512(R, 4, a, lda, b, ldb, c, ldc, K, alpha) : nr == 3 ? nt_tile512(R, 3, a, lda, b, ldb, c, ldc, K, alpha) \
     : nr == 2 ? nt_tile512(R, 2, a, lda, b, ldb, c, ldc, K, alpha) : nt_tile512(R, 1, a, lda, b, ldb, c, ldc, K, alpha))
            if (mr == 4) NT512(4);
            else if (mr == 3) NT512(3);
            else if (mr == 2) NT512(2);
            else NT512(1);
#undef NT512
        }
    }
}

AVX512 static void nn_block512(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float alpha, const float *A,
                               int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
    for (int64_t n = n0; n < n1; n += 32) {
        int64_t nc = n1 - n >= 32 ? 32 : n1 - n;
        for (int64_t m = m0; m < m1; m += 4) {
            const float *a = A + m * lda, *b = B + n;
            float *c = C + m * ldc + n;
            int64_t mr = m1 - m >= 4 ? 4 : m1 - m;
            if (mr == 4) nn_tile512(4, nc, a, lda, b, ldb, c, ldc, K, alpha);
            else if (mr == 3) nn_tile512(3, nc, a, lda, b, ldb, c, ldc, K, alpha);
            else if (mr == 2) nn_tile512(2, nc, a, lda, b, ldb, c, ldc, K, alpha);
            else nn_tile512(1, nc, a, lda, b, ldb, c, ldc, K, alpha);
        }
    }
}

/* ---------------------------------------------------------------- the entry points */
float dfg_cpu_dot_invariant(const float *a, const float *b, int64_t K) {
    return use_avx2() ? dot_avx2(a, b, K) : dot_ref(a, b, K);
}

void dfg_cpu_gemm_invariant(bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float *C, int64_t ldc, int n_threads) {
    if (M < 1 || N < 1) return;
    int level = isa();
    int64_t panel = level == 2 ? 32 : 16; /* NN: a panel is a tile's columns */
    int64_t bn = tb ? BLOCK_N : panel * ((N + panel - 1) / panel < 8 ? 1 : 4);
    int64_t mb = (M + BLOCK_M - 1) / BLOCK_M, nb = (N + bn - 1) / bn;
    /* blocks of whole output tiles: no sum is split, so the thread count changes nothing */
#pragma omp parallel for collapse(2) schedule(static) num_threads(n_threads) if (M * N * K > 65536)
    for (int64_t i = 0; i < mb; i++)
        for (int64_t j = 0; j < nb; j++) {
            int64_t m0 = i * BLOCK_M, m1 = m0 + BLOCK_M < M ? m0 + BLOCK_M : M;
            int64_t n0 = j * bn, n1 = n0 + bn < N ? n0 + bn : N;
            if (level == 0) gemm_ref(tb, m0, m1, n0, n1, K, alpha, A, lda, B, ldb, C, ldc);
            else if (level == 2 && tb) nt_block512(m0, m1, n0, n1, K, alpha, A, lda, B, ldb, C, ldc);
            else if (level == 2) nn_block512(m0, m1, n0, n1, K, alpha, A, lda, B, ldb, C, ldc);
            else if (tb) nt_block(m0, m1, n0, n1, K, alpha, A, lda, B, ldb, C, ldc);
            else nn_block(m0, m1, n0, n1, K, alpha, A, lda, B, ldb, C, ldc);
        }
}

void dfg_cpu_gemm_invariant_ref(bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                const float *B, int64_t ldb, float *C, int64_t ldc) {
    gemm_ref(tb, 0, M, 0, N, K, alpha, A, lda, B, ldb, C, ldc);
}

/* ---------------------------------------------------------------- attention, one query */
/* y (D) += w v (D), one fused multiply-add per element */
static void axpy_ref(float w, const float *v, float *y, int64_t D) {
    for (int64_t d = 0; d < D; d++) y[d] = fmaf(w, v[d], y[d]);
}

AVX2 static void axpy_avx2(float w, const float *v, float *y, int64_t D) {
    __m256 s = _mm256_set1_ps(w);
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(y + d, _mm256_fmadd_ps(s, _mm256_loadu_ps(v + d), _mm256_loadu_ps(y + d)));
    if (d < D) {
        __m256i m = lane_mask(D - d);
        _mm256_maskstore_ps(y + d, m, _mm256_fmadd_ps(s, _mm256_maskload_ps(v + d, m), _mm256_maskload_ps(y + d, m)));
    }
}

float dfg_cpu_attend_invariant(const float *q, const dfg_cpu_kv_run *runs, int n_runs, int64_t D, float scale, float *p,
                               float *y) {
    int64_t nk = 0;
    for (int r = 0; r < n_runs; r++)
        for (int64_t j = 0; j < runs[r].n; j++) p[nk++] = scale * dfg_cpu_dot_invariant(q, runs[r].k + j * runs[r].stride, D);
    float m = -INFINITY, l[8] = {0};
    for (int64_t j = 0; j < nk; j++) m = p[j] > m ? p[j] : m;
    int64_t j = 0;
    for (; j + 8 <= nk; j += 8)
        for (int i = 0; i < 8; i++) l[i] += p[j + i] = dfg_exp_f32(p[j + i] - m);
    for (int i = 0; j + i < nk; i++) l[i] += p[j + i] = dfg_exp_f32(p[j + i] - m);
    float sum = lanes_sum(l), inv = 1.0f / sum;
    memset(y, 0, sizeof(float) * (size_t)D);
    void (*axpy)(float, const float *, float *, int64_t) = use_avx2() ? axpy_avx2 : axpy_ref;
    nk = 0;
    for (int r = 0; r < n_runs; r++)
        for (int64_t k = 0; k < runs[r].n; k++) axpy(p[nk++] * inv, runs[r].v + k * runs[r].stride, y, D);
    return m + logf(sum);
}
