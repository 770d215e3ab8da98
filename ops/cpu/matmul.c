/* matmul.c - CPU matmul through OpenBLAS sgemm (row-major), or the invariant GEMM (invariant.c)
 * for A not transposed in a batch-invariant plan (what a forward layer computes; gradient products
 * keep OpenBLAS) and for a few rows against a weight; and bias add. */
#include <cblas.h>

#include "cpu.h"

/* A few rows (decode's one token per sequence, a short prefill) go to the invariant kernels:
 * OpenBLAS packs the whole weight on every call, which at a few rows costs more than the product,
 * while the invariant kernels read the weight in place. Measured on this repository's 2-core
 * AVX-512 machine (OpenBLAS 0.3.21, 2 threads) at Qwen2.5-0.5B's shapes: NT (a weight given as
 * (N, K): nn.Linear, the lm_head) 2-5x faster up to 24 rows, 1.1-1.7x at 32, slower from 48; NN
 * (GPT-2's Conv1D (K, N)) 1.4-6x up to 8 rows, slower from 16. Thin operands (a LoRA adapter's
 * rank as K or N) stay with OpenBLAS: too little work either way. */
enum { FEW_ROWS_NT = 32, FEW_ROWS_NN = 8, FEW_ROWS_MIN_DIM = 64 };

static bool few_rows(bool tb, int64_t M, int64_t N, int64_t K) {
    return K >= FEW_ROWS_MIN_DIM && N >= FEW_ROWS_MIN_DIM && M <= (tb ? FEW_ROWS_NT : FEW_ROWS_NN);
}

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
    int64_t M = a_batched && !b_batched ? d.M * d.batch : d.M, batches = a_batched && !b_batched ? 1 : d.batch;
    if (!ta && (ctx->invariant || few_rows(tb, M, d.N, d.K))) {
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
