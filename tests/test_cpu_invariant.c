/* test_cpu_invariant.c - the batch-invariant CPU kernels (ops/cpu/invariant.c) keep their
 * promise: a row's result does not depend on the rows beside it.
 *   - GEMM, both layouts (B as (K, N) and as (N, K)), random sizes with every tail of the tiles:
 *     each vector path this CPU has (AVX2, AVX-512) equals the plain-C definition bit for bit; any slice of rows (a decode
 *     step's one row, a chunk) computed alone equals the same rows of the whole call, at any
 *     thread count and any row offset; and the values are those of a float64 product (1e-5).
 *   - one query's attention: its keys in one run or split in two anywhere (a shared prefix, then
 *     its own) give the same bits, and the values are a float64 softmax attention's (1e-5). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "testutil.h"

static bool same_bits(const float *a, const float *b, int64_t n) { return !memcmp(a, b, sizeof(float) * (size_t)n); }

static void check_gemm(bool tb, int level) {
    int64_t M = dfg_test_int(1, 70), N = dfg_test_int(1, 90), K = dfg_test_int(1, 300);
    int64_t lda = K + dfg_test_int(0, 3), ldb = (tb ? K : N) + dfg_test_int(0, 3), ldc = N + dfg_test_int(0, 3);
    float alpha = dfg_test_int(0, 1) ? 1.0f : dfg_test_uniform(0.1f, 2.0f);
    float *A = malloc(sizeof(float) * (size_t)(M * lda)), *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc)), *R = malloc(sizeof(float) * (size_t)(M * ldc));
    float *S = malloc(sizeof(float) * (size_t)(M * ldc));
    dfg_test_fill_normal(A, M * lda, 1.0f);
    dfg_test_fill_normal(B, (tb ? N : K) * ldb, 1.0f);
    dfg_test_poison(C, sizeof(float) * (size_t)(M * ldc));
    memcpy(R, C, sizeof(float) * (size_t)(M * ldc));
    dfg_cpu_gemm_invariant(tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, dfg_test_int(1, 4));
    dfg_cpu_gemm_invariant_ref(tb, M, N, K, alpha, A, lda, B, ldb, R, ldc);
    CHECK(same_bits(C, R, M * ldc), "%s M=%lld N=%lld K=%lld: the path of level %d differs from the definition",
          tb ? "NT" : "NN", (long long)M, (long long)N, (long long)K, level);
    /* rows r0 .. r0+m-1 alone, written to another buffer at row 0 */
    for (int trial = 0; trial < 4; trial++) {
        int64_t r0 = dfg_test_int(0, (int)M - 1), m = dfg_test_int(1, (int)(M - r0));
        dfg_test_poison(S, sizeof(float) * (size_t)(M * ldc));
        dfg_cpu_gemm_invariant(tb, m, N, K, alpha, A + r0 * lda, lda, B, ldb, S, ldc, dfg_test_int(1, 4));
        for (int64_t r = 0; r < m; r++)
            CHECK(same_bits(S + r * ldc, C + (r0 + r) * ldc, N), "%s: row %lld alone (of %lld from %lld) differs from the "
                  "batch's", tb ? "NT" : "NN", (long long)(r0 + r), (long long)m, (long long)r0);
    }
    double err = 0.0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double t = (double)A[i * lda + k] * (tb ? B[j * ldb + k] : B[k * ldb + j]);
                ref += t, mag += fabs(t);
            }
            double e = fabs(C[i * ldc + j] - alpha * ref) / (fabs(alpha) * mag + 1e-6);
            err = e > err ? e : err;
        }
    CHECK(err < 1e-5, "%s: error %.3g against float64 (relative to the sum of |terms|)", tb ? "NT" : "NN", err);
    printf("%s level %d M=%lld N=%lld K=%lld: bits equal to the definition and row by row; error %.2g\n", tb ? "NT" : "NN",
           level, (long long)M, (long long)N, (long long)K, err);
    free(A), free(B), free(C), free(R), free(S);
}

static void check_attend(void) {
    int64_t nk = dfg_test_int(1, 80), D = dfg_test_int(1, 70), stride = D + dfg_test_int(0, 5);
    float scale = 1.0f / sqrtf((float)D);
    float *q = malloc(sizeof(float) * (size_t)D), *k = malloc(sizeof(float) * (size_t)(nk * stride));
    float *v = malloc(sizeof(float) * (size_t)(nk * stride)), *p = malloc(sizeof(float) * (size_t)nk);
    float *y1 = malloc(sizeof(float) * (size_t)D), *y2 = malloc(sizeof(float) * (size_t)D);
    dfg_test_fill_normal(q, D, 1.0f), dfg_test_fill_normal(k, nk * stride, 1.0f), dfg_test_fill_normal(v, nk * stride, 1.0f);
    dfg_test_poison(y1, sizeof(float) * (size_t)D);
    dfg_cpu_kv_run one = {k, v, nk, stride};
    float lse1 = dfg_cpu_attend_invariant(q, &one, 1, D, scale, p, y1);
    int64_t cut = dfg_test_int(0, (int)nk);
    dfg_cpu_kv_run two[2] = {{k, v, cut, stride}, {k + cut * stride, v + cut * stride, nk - cut, stride}};
    dfg_test_poison(y2, sizeof(float) * (size_t)D);
    float lse2 = dfg_cpu_attend_invariant(q, two, 2, D, scale, p, y2);
    CHECK(same_bits(y1, y2, D) && same_bits(&lse1, &lse2, 1), "attention: keys split at %lld of %lld differ",
          (long long)cut, (long long)nk);
    double *s = malloc(sizeof(double) * (size_t)nk), m = -INFINITY, l = 0.0, err = 0.0;
    for (int64_t j = 0; j < nk; j++) {
        s[j] = 0.0;
        for (int64_t d = 0; d < D; d++) s[j] += (double)q[d] * k[j * stride + d];
        s[j] *= scale;
        m = s[j] > m ? s[j] : m;
    }
    for (int64_t j = 0; j < nk; j++) l += exp(s[j] - m);
    for (int64_t d = 0; d < D; d++) {
        double y = 0.0, mag = 0.0; /* the error relative to the terms' size: y may cancel to near 0 */
        for (int64_t j = 0; j < nk; j++) y += exp(s[j] - m) / l * v[j * stride + d], mag += exp(s[j] - m) / l * fabs(v[j * stride + d]);
        double e = fabs(y1[d] - y) / (mag + 1e-6);
        err = e > err ? e : err;
    }
    double lse_err = fabs(lse1 - (m + log(l))) / (fabs(m + log(l)) + 1e-3);
    CHECK(err < 1e-5 && lse_err < 1e-6, "attention: error %.3g (lse %.3g) against float64", err, lse_err);
    printf("attention nk=%lld D=%lld: one run and two (cut at %lld) equal; error %.2g\n", (long long)nk, (long long)D,
           (long long)cut, err);
    free(q), free(k), free(v), free(p), free(y1), free(y2), free(s);
}

int main(void) {
    dfg_test_init("test_cpu_invariant");
    int best = dfg_cpu_invariant_isa(-1);
    printf("this CPU's invariant kernels: level %d (0 plain C, 1 AVX2, 2 AVX-512)\n", best);
    for (int level = best; level >= 0; level--) { /* each path this machine can run */
        CHECK(dfg_cpu_invariant_isa(level) == level, "level %d not taken", level);
        for (int i = 0; i < 6; i++) check_gemm(i % 2 == 1, level);
        for (int i = 0; i < 3; i++) check_attend();
    }
    dfg_cpu_invariant_isa(-1);
    return dfg_test_finish();
}
