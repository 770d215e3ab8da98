/* gemm_emu.c - the emulated GEMM: executes a GEMM descriptor (gemm.h) with OpenBLAS's
 * column-major sgemm, as cuBLASLt would on a GPU; a node of the emulator's stream while a stage is
 * captured. Linked into the emulated device's module (and the kernel tests) only. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../ops/cuda/cuda.h"
#include "../../../ops/dtype.h"
#include "simt/dfg_simt_ctl.h"

/* An f32 copy of a column-major matrix of `rows` x `cols` (leading dimension ld) in dtype t. */
static float *widen(const void *x, dfg_dtype t, int64_t rows, int64_t cols, int64_t ld) {
    int64_t count = rows * cols;
    float *w = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    if (!w) return NULL;
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++) w[c * rows + r] = dfg_load(x, t, c * ld + r);
    return w;
}

static float gelu_tanh(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static dfg_status gemm_one(const dfg_gemm_desc *d, const void *a, const void *b, void *c, const void *bias) {
    int64_t ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k; /* A as stored */
    int64_t br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
    float *A = widen(a, d->a_type, ar, ac, d->lda), *B = widen(b, d->b_type, br, bc, d->ldb);
    float *C = widen(c, d->c_type, d->m, d->n, d->ldc);
    dfg_status st = A && B && C ? DFG_OK : DFG_ERR_NOMEM;
    if (!st) {
        if (d->beta == 0.0f) memset(C, 0, sizeof(float) * (size_t)(d->m * d->n)); /* cuBLAS: C is not read */
        cblas_sgemm(CblasColMajor, d->trans_a ? CblasTrans : CblasNoTrans, d->trans_b ? CblasTrans : CblasNoTrans,
                    (int)d->m, (int)d->n, (int)d->k, d->alpha, A, (int)(ar ? ar : 1), B, (int)(br ? br : 1), d->beta,
                    C, (int)(d->m ? d->m : 1));
        for (int64_t j = 0; j < d->n; j++)
            for (int64_t i = 0; i < d->m; i++) {
                float v = C[j * d->m + i];
                if (d->epilogue != DFG_GEMM_EPI_NONE) v += dfg_load(bias, d->bias_type, i);
                if (d->epilogue == DFG_GEMM_EPI_GELU_BIAS) v = gelu_tanh(v);
                dfg_store(c, d->c_type, j * d->ldc + i, v);
            }
    }
    free(A), free(B), free(C);
    return st;
}

/* One recorded GEMM: what the emulator's stream holds until the graph replays it. */
typedef struct {
    dfg_gemm_desc d;
    const void *a, *b, *bias;
    void *c;
} gemm_task;

static dfg_status gemm_all(const dfg_gemm_desc *d, const void *a, const void *b, void *c, const void *bias) {
    size_t ea = dfg_dtype_size(d->a_type), eb = dfg_dtype_size(d->b_type), ec = dfg_dtype_size(d->c_type);
    for (int64_t i = 0; i < d->batch; i++) {
        dfg_status st = gemm_one(d, (const char *)a + (size_t)(i * d->stride_a) * ea,
                                 (const char *)b + (size_t)(i * d->stride_b) * eb, (char *)c + (size_t)(i * d->stride_c) * ec,
                                 bias);
        if (st) return st;
    }
    return DFG_OK;
}

/* A replayed GEMM has no caller to report to: out of memory there leaves the poison in C (the
 * emulated device's allocations start as NaN), which the step's results then show. */
static void gemm_replay(void *arg) {
    const gemm_task *t = arg;
    (void)gemm_all(&t->d, t->a, t->b, t->c, t->bias);
}

dfg_status dfg_cuda_gemm_interpret(dfg_cuda_ctx *ctx, const dfg_gemm_desc *d, const void *a, const void *b, void *c,
                                   const void *bias) {
    char why[256];
    if (d->m < 0 || d->n < 0 || d->k < 0 || d->batch < 1 || d->ldc < (d->m > 1 ? d->m : 1) ||
        d->lda < ((d->trans_a ? d->k : d->m) > 1 ? (d->trans_a ? d->k : d->m) : 1) ||
        d->ldb < ((d->trans_b ? d->n : d->k) > 1 ? (d->trans_b ? d->n : d->k) : 1) ||
        (d->epilogue != DFG_GEMM_EPI_NONE && !bias)) {
        /* what cuBLAS would refuse with CUBLAS_STATUS_INVALID_VALUE */
        if (ctx->err) snprintf(ctx->err, ctx->err_len, "gemm: invalid descriptor %s", dfg_gemm_str(d, why, sizeof(why)));
        return DFG_ERR_ARG;
    }
    if (dfg_simt_capturing()) { /* a stream being captured: the GEMM is a node of the graph */
        gemm_task t = {*d, a, b, bias, c};
        if (dfg_simt_host_task(gemm_replay, &t, sizeof(t))) {
            if (ctx->err) snprintf(ctx->err, ctx->err_len, "gemm: %s", dfg_simt_last_message());
            return DFG_ERR_NOMEM;
        }
        return DFG_OK;
    }
    dfg_status st = gemm_all(d, a, b, c, bias);
    if (st && ctx->err) snprintf(ctx->err, ctx->err_len, "gemm: out of memory");
    return st;
}
