/* matmul.c - CPU matmul through OpenBLAS sgemm (row-major), or in a batch-invariant plan the
 * invariant GEMM (invariant.c) for A not transposed (what a forward layer computes; gradient
 * products keep OpenBLAS); and bias add. */
#include <cblas.h>

#include "cpu.h"

dfg_status dfg_cpu_matmul(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    dfg_mm_dims d;
    const char *why;
    if (!dfg_matmul_dims(n, &d, &why)) return dfg_cpu_fail(ctx, n, DFG_ERR_SHAPE, "%s", why);
    bool ta = n->attr->matmul.trans_a, tb = n->attr->matmul.trans_b;
    bool a_batched = n->in[0]->shape.rank > 2, b_batched = n->in[1]->shape.rank > 2;
    const float *A = in[0], *B = in[1]; /* A (.., M, K) or (.., K, M); B (.., K, N) or (.., N, K) */
    float *C = out[0];                  /* (.., M, N) */
    int lda = (int)(ta ? d.M : d.K), ldb = (int)(tb ? d.K : d.N), ldc = (int)d.N;
    CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
    if (ctx->invariant && !ta) {
        int64_t M = a_batched && !b_batched ? d.M * d.batch : d.M, batches = a_batched && !b_batched ? 1 : d.batch;
        for (int64_t i = 0; i < batches; i++)
            dfg_cpu_gemm_invariant(tb, M, d.N, d.K, 1.0f, A + (a_batched ? i * d.M * d.K : 0), lda,
                                   B + (b_batched ? i * d.K * d.N : 0), ldb, C + i * d.M * d.N, ldc, ctx->n_threads);
        return DFG_OK;
    }
    if (a_batched && !b_batched && !ta) { /* a shared B: the batch folds into M, one GEMM */
        cblas_sgemm(CblasRowMajor, opa, opb, (int)(d.M * d.batch), (int)d.N, (int)d.K, 1.0f, A, lda, B, ldb, 0.0f, C,
                    ldc);
        return DFG_OK;
    }
    for (int64_t i = 0; i < d.batch; i++) {
        const float *Ai = A + (a_batched ? i * d.M * d.K : 0);
        const float *Bi = B + (b_batched ? i * d.K * d.N : 0);
        cblas_sgemm(CblasRowMajor, opa, opb, (int)d.M, (int)d.N, (int)d.K, 1.0f, Ai, lda, Bi, ldb, 0.0f,
                    C + i * d.M * d.N, ldc);
    }
    return DFG_OK;
}

dfg_status dfg_cpu_bias_add(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[0]->shape;
    int64_t c = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / c;
    const float *x = in[0], *b = in[1];
    float *y = out[0];
#pragma omp parallel for schedule(static) if (rows * c > 65536)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < c; j++) y[r * c + j] = x[r * c + j] + b[j];
    return DFG_OK;
}
