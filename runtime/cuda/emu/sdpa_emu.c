/* sdpa_emu.c - the emulated SDPA: a plain f32 implementation of the semantics of sdpa.h that
 * reads and writes every operand through the descriptor's offsets and strides only, so a wrong
 * stride in a descriptor gives a wrong answer under emulation as it would on the GPU; a node of
 * the emulator's stream while a stage is captured. Linked into the emulated device's module (and
 * the kernel tests) only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../ops/cuda/cuda.h"
#include "../../../ops/dtype.h"
#include "simt/dfg_simt_ctl.h"

/* The element index of operand k at (b, h, s, e) */
static int64_t at(const dfg_sdpa_desc *d, int k, int64_t b, int64_t h, int64_t s, int64_t e) {
    const dfg_sdpa_layout *l = &d->t[k];
    return l->offset + b * l->stride[0] + h * l->stride[1] + s * l->stride[2] + e * l->stride[3];
}

/* rows x D of operand k for head (b, h), widened to f32 into x (row-major, rows of D) */
static void gather(const dfg_sdpa_desc *d, void *const *ptrs, int k, int64_t b, int64_t h, int64_t rows, float *x) {
    for (int64_t s = 0; s < rows; s++)
        for (int64_t e = 0; e < d->head_dim; e++)
            x[s * d->head_dim + e] = (float)dfg_load(ptrs[k], d->dtype, at(d, k, b, h, s, e));
}

static void scatter(const dfg_sdpa_desc *d, void *const *ptrs, int k, int64_t b, int64_t h, int64_t rows,
                    const float *x) {
    for (int64_t s = 0; s < rows; s++)
        for (int64_t e = 0; e < d->head_dim; e++) dfg_store(ptrs[k], d->dtype, at(d, k, b, h, s, e), x[s * d->head_dim + e]);
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* keys query i sees */
static int64_t keys_of(const dfg_sdpa_desc *d, int64_t i) {
    return d->causal && i + 1 < d->seq_kv ? i + 1 : d->seq_kv;
}

/* Per-head f32 copies of the operands: q, o, do, dq (seq_q x D); k, v, dk, dv (seq_kv x D). */
typedef struct {
    float *q, *k, *v, *o, *dO, *dq, *dk, *dv, *s;
} head_bufs;

static void forward_head(const dfg_sdpa_desc *d, void *const *ptrs, int64_t b, int64_t h, head_bufs *w) {
    int64_t D = d->head_dim;
    gather(d, ptrs, DFG_SDPA_Q, b, h, d->seq_q, w->q);
    gather(d, ptrs, DFG_SDPA_K, b, h, d->seq_kv, w->k);
    gather(d, ptrs, DFG_SDPA_V, b, h, d->seq_kv, w->v);
    for (int64_t i = 0; i < d->seq_q; i++) {
        int64_t nk = keys_of(d, i);
        float m = -INFINITY, l = 0.0f, *o = w->o + i * D;
        for (int64_t j = 0; j < nk; j++) {
            w->s[j] = d->scale * dot(w->q + i * D, w->k + j * D, D);
            m = w->s[j] > m ? w->s[j] : m;
        }
        for (int64_t j = 0; j < nk; j++) {
            w->s[j] = expf(w->s[j] - m);
            l += w->s[j];
        }
        for (int64_t e = 0; e < D; e++) o[e] = 0.0f;
        for (int64_t j = 0; j < nk; j++)
            for (int64_t e = 0; e < D; e++) o[e] += w->s[j] / l * w->v[j * D + e];
        if (d->stats) dfg_store(ptrs[DFG_SDPA_STATS], DFG_F32, at(d, DFG_SDPA_STATS, b, h, i, 0), m + logf(l));
    }
    scatter(d, ptrs, DFG_SDPA_O, b, h, d->seq_q, w->o);
}

static void backward_head(const dfg_sdpa_desc *d, void *const *ptrs, int64_t b, int64_t h, head_bufs *w) {
    int64_t D = d->head_dim;
    gather(d, ptrs, DFG_SDPA_Q, b, h, d->seq_q, w->q);
    gather(d, ptrs, DFG_SDPA_K, b, h, d->seq_kv, w->k);
    gather(d, ptrs, DFG_SDPA_V, b, h, d->seq_kv, w->v);
    gather(d, ptrs, DFG_SDPA_O, b, h, d->seq_q, w->o);
    gather(d, ptrs, DFG_SDPA_DO, b, h, d->seq_q, w->dO);
    memset(w->dq, 0, sizeof(float) * (size_t)(d->seq_q * D));
    memset(w->dk, 0, sizeof(float) * (size_t)(d->seq_kv * D));
    memset(w->dv, 0, sizeof(float) * (size_t)(d->seq_kv * D));
    for (int64_t i = 0; i < d->seq_q; i++) {
        const float *q = w->q + i * D, *dO = w->dO + i * D;
        float lse = (float)dfg_load(ptrs[DFG_SDPA_STATS], DFG_F32, at(d, DFG_SDPA_STATS, b, h, i, 0));
        float delta = dot(dO, w->o + i * D, D), *dq = w->dq + i * D;
        for (int64_t j = 0, nk = keys_of(d, i); j < nk; j++) {
            const float *k = w->k + j * D;
            float p = expf(d->scale * dot(q, k, D) - lse);
            float ds = p * (dot(dO, w->v + j * D, D) - delta);
            float *dk = w->dk + j * D, *dv = w->dv + j * D;
            for (int64_t e = 0; e < D; e++) {
                dq[e] += d->scale * ds * k[e];
                dk[e] += d->scale * ds * q[e];
                dv[e] += p * dO[e];
            }
        }
    }
    scatter(d, ptrs, DFG_SDPA_DQ, b, h, d->seq_q, w->dq);
    scatter(d, ptrs, DFG_SDPA_DK, b, h, d->seq_kv, w->dk);
    scatter(d, ptrs, DFG_SDPA_DV, b, h, d->seq_kv, w->dv);
}

static dfg_status sdpa_all(const dfg_sdpa_desc *d, bool backward, void *const *ptrs) {
    size_t rq = (size_t)(d->seq_q * d->head_dim), rk = (size_t)(d->seq_kv * d->head_dim);
    float *mem = malloc(sizeof(float) * (4 * rq + 4 * rk + (size_t)d->seq_kv));
    if (!mem) return DFG_ERR_NOMEM;
    head_bufs w = {.q = mem, .o = mem + rq, .dO = mem + 2 * rq, .dq = mem + 3 * rq, .k = mem + 4 * rq};
    w.v = w.k + rk, w.dk = w.k + 2 * rk, w.dv = w.k + 3 * rk, w.s = w.k + 4 * rk;
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t h = 0; h < d->heads; h++)
            if (backward)
                backward_head(d, ptrs, b, h, &w);
            else
                forward_head(d, ptrs, b, h, &w);
    free(mem);
    return DFG_OK;
}

/* One recorded SDPA call: what the emulator's stream holds until the graph replays it. */
typedef struct {
    dfg_sdpa_desc d;
    bool backward;
    void *ptrs[DFG_SDPA_N_OPERANDS];
} sdpa_task;

/* As a replayed GEMM (gemm.c): out of memory leaves the outputs' NaN poison for the step to show. */
static void sdpa_replay(void *arg) {
    const sdpa_task *t = arg;
    (void)sdpa_all(&t->d, t->backward, t->ptrs);
}

dfg_status dfg_cuda_sdpa_interpret(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs) {
    char buf[512];
    const char *bad = NULL;
    if (d->batch < 1 || d->heads < 1 || d->seq_q < 1 || d->seq_kv < 1 || d->head_dim < 1)
        bad = "a dimension below 1";
    else if (d->dtype != DFG_F32 && d->dtype != DFG_BF16 && d->dtype != DFG_F16)
        bad = "not a float dtype";
    else if (backward && !d->stats)
        bad = "the backward needs the forward's stats";
    for (int k = 0; k < dfg_sdpa_n_operands(backward) && !bad; k++)
        if (!ptrs[k] && (k != DFG_SDPA_STATS || d->stats)) bad = "an operand's pointer is NULL";
    if (bad) { /* what cuDNN would refuse as a bad parameter */
        if (ctx->err) snprintf(ctx->err, ctx->err_len, "sdpa: invalid descriptor (%s): %s", bad, dfg_sdpa_str(d, buf, sizeof(buf)));
        return DFG_ERR_ARG;
    }
    sdpa_task t = {.d = *d, .backward = backward};
    for (int k = 0; k < DFG_SDPA_N_OPERANDS; k++) t.ptrs[k] = k < dfg_sdpa_n_operands(backward) ? ptrs[k] : NULL;
    if (dfg_simt_capturing()) { /* a stream being captured: the call is a node of the graph */
        if (dfg_simt_host_task(sdpa_replay, &t, sizeof(t))) {
            if (ctx->err) snprintf(ctx->err, ctx->err_len, "sdpa: %s", dfg_simt_last_message());
            return DFG_ERR_NOMEM;
        }
        return DFG_OK;
    }
    dfg_status st = sdpa_all(&t.d, backward, t.ptrs);
    if (st && ctx->err) snprintf(ctx->err, ctx->err_len, "sdpa: out of memory");
    return st;
}
