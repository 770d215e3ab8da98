/* gemm.c - GEMM descriptors from nodes (pure) and the launchers' shared error formatter. Plain
 * C, linked with both builds of the kernels (nvcc and emulated); the emulated GEMM that executes
 * a descriptor is gemm_emu.c, in the emulated device's module only. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dtype.h"
#include "cuda.h"

dfg_status dfg_cuda_fail(dfg_cuda_ctx *ctx, const dfg_node *n, dfg_status s, const char *fmt, ...) {
    if (ctx->err && ctx->err_len) {
        int k = snprintf(ctx->err, ctx->err_len, "%s '%s': ", dfg_op_name(n->op), n->name);
        if (k >= 0 && (size_t)k < ctx->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ctx->err + k, ctx->err_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return s;
}

dfg_gemm_desc dfg_gemm_row_major(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                                 int64_t ldc, dfg_dtype ab_type, dfg_dtype c_type, float alpha, float beta) {
    /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T: B comes first */
    return (dfg_gemm_desc){.m = N, .n = M, .k = K, .trans_a = trans_b, .trans_b = trans_a, .lda = ldb, .ldb = lda,
                           .ldc = ldc, .batch = 1, .a_type = ab_type, .b_type = ab_type, .c_type = c_type,
                           .bias_type = c_type, .alpha = alpha, .beta = beta, .epilogue = DFG_GEMM_EPI_NONE};
}

bool dfg_gemm_matmul(const dfg_node *n, dfg_gemm_desc *d, const char **why) {
    dfg_mm_dims mm;
    if (!dfg_matmul_dims(n, &mm, why)) return false;
    bool ta = n->attr->matmul.trans_a, tb = n->attr->matmul.trans_b;
    bool a_batched = n->in[0]->shape.rank > 2, b_batched = n->in[1]->shape.rank > 2;
    int64_t lda = ta ? mm.M : mm.K, ldb = tb ? mm.K : mm.N; /* row-major leading dims */
    *d = dfg_gemm_row_major(mm.M, mm.N, mm.K, ta, tb, lda, ldb, mm.N, n->in[0]->dtype, n->out[0]->dtype, 1.0f, 0.0f);
    if (a_batched && !b_batched && !ta) { /* a shared B: the batch folds into M, one GEMM */
        d->n = mm.M * mm.batch;
        return true;
    }
    d->batch = mm.batch;
    /* in the descriptor, A is dfg's b and B is dfg's a */
    d->stride_a = b_batched ? mm.K * mm.N : 0;
    d->stride_b = a_batched ? mm.M * mm.K : 0;
    d->stride_c = mm.M * mm.N;
    return true;
}

char *dfg_gemm_str(const dfg_gemm_desc *d, char *buf, size_t len) {
    snprintf(buf, len, "m=%lld n=%lld k=%lld op(A)=%c op(B)=%c lda=%lld ldb=%lld ldc=%lld batch=%lld strides=%lld/%lld/%lld",
             (long long)d->m, (long long)d->n, (long long)d->k, d->trans_a ? 'T' : 'N', d->trans_b ? 'T' : 'N',
             (long long)d->lda, (long long)d->ldb, (long long)d->ldc, (long long)d->batch, (long long)d->stride_a,
             (long long)d->stride_b, (long long)d->stride_c);
    return buf;
}
