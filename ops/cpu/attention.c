/* attention.c - CPU causal attention over a fused QKV tensor (B, T, 3C) laid out [q | k | v],
 * head h at columns h*D .. h*D+D of each part; and its KV-cache form for decoding.
 *
 * Each (batch, head) pair is one job of an OpenMP loop, and inside a job the work is OpenBLAS
 * GEMMs reading Q, K and V in place by their row stride (3C in the fused tensor, C in a cache):
 * scores S = scale Q K^T (T x T, in the thread's scratch), a masked row softmax, Y = P V. The
 * forward saves each row's log-sum-exp; the backward recomputes P from it. OpenBLAS runs
 * single-threaded inside the parallel loop, so jobs do not oversubscribe the cores. The upper
 * triangle of S is computed and thrown away: at these sizes one GEMM beats a blocked triangle.
 *
 * Left padding (start s of a row): a query at column i >= s sees keys s .. i, one at i < s keys
 * 0 .. i. So the row is two independent causal attentions, over columns 0 .. s-1 (the pads) and
 * s .. T-1 (the real tokens), and forward and backward run the plain code on each block.
 *
 * In a batch-invariant plan the forwards go one query at a time through invariant.c's order
 * instead, so a query's output is the same float in the full form and in the KV-cache form. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cpu.h"
#include "fastmath.h"

float dfg_cpu_softmax_row(float *s, int64_t nk, int64_t n) {
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j < nk; j++) m = s[j] > m ? s[j] : m;
#pragma omp simd reduction(+ : l)
    for (int64_t j = 0; j < nk; j++) {
        s[j] = dfg_exp_f32(s[j] - m);
        l += s[j];
    }
    float inv = 1.0f / l;
#pragma omp simd
    for (int64_t j = 0; j < nk; j++) s[j] *= inv;
    for (int64_t j = nk; j < n; j++) s[j] = 0.0f;
    return m + logf(l);
}

float *dfg_cpu_thread_scratch(dfg_cpu_ctx *ctx) {
    return (float *)((char *)ctx->scratch + (size_t)omp_get_thread_num() * ctx->scratch_per_thread);
}

size_t dfg_cpu_scratch_attention(const dfg_node *n) {
    if (n->op == DFG_OP_ATTENTION_CACHED) return sizeof(float) * (size_t)n->in[1]->shape.d[1]; /* Tmax */
    int64_t T = n->op == DFG_OP_ATTENTION ? n->in[0]->shape.d[1] : n->in[1]->shape.d[1];
    return sizeof(float) * (size_t)(T * T) * (n->op == DFG_OP_ATTENTION_BWD ? 2u : 1u);
}

const int32_t *dfg_cpu_attention_start(const dfg_node *n, void *const *in, int plain, int64_t limit, dfg_cpu_ctx *ctx,
                                       dfg_status *st) {
    *st = DFG_OK;
    if (n->n_in == plain) return NULL;
    const int32_t *start = in[plain];
    int64_t rows = n->in[plain]->shape.d[0];
    for (int64_t b = 0; b < rows; b++)
        if (start[b] < 0 || start[b] >= limit) {
            *st = dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "start[%lld] = %d is outside the row's columns 0 .. %lld",
                               (long long)b, (int)start[b], (long long)(limit - 1));
            return NULL;
        }
    return start;
}

/* Causal attention of `len` rows among themselves: q, k, v of stride 3C, y of stride C, lse (len);
 * S: (len, len) scratch. invariant: one query at a time in invariant.c's order. */
static void causal_block(const float *q, const float *k, const float *v, float *y, float *lse, int64_t len, int64_t C,
                         int64_t D, float scale, float *S, bool invariant) {
    if (len < 1) return;
    if (invariant) {
        for (int64_t t = 0; t < len; t++) {
            dfg_cpu_kv_run keys = {k, v, t + 1, 3 * C};
            lse[t] = dfg_cpu_attend_invariant(q + t * 3 * C, &keys, 1, D, scale, S, y + t * C);
        }
        return;
    }
    int n = (int)len, ld3 = (int)(3 * C);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, (int)D, scale, q, ld3, k, ld3, 0.0f, S, n);
    for (int64_t t = 0; t < len; t++) lse[t] = dfg_cpu_softmax_row(S + t * len, t + 1, len);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, (int)D, n, 1.0f, S, n, v, ld3, 0.0f, y, (int)C);
}

/* The sizes of an attention node whose qkv (B, T, 3C) is input q, and its start (B) or NULL (input
 * `plain` when the node has one more), checked against T, as is the thread scratch. */
typedef struct {
    int64_t B, T, C, H, D;
    float scale; /* 1 / sqrt(D) */
    const int32_t *start;
} att_dims;

static dfg_status att_dims_of(const dfg_node *n, void *const *in, int q, int plain, dfg_cpu_ctx *ctx, att_dims *a) {
    const dfg_shape s = n->in[q]->shape;
    a->B = s.d[0], a->T = s.d[1], a->C = s.d[2] / 3, a->H = n->attr->attention.n_head, a->D = a->C / a->H;
    a->scale = 1.0f / sqrtf((float)a->D);
    dfg_status st;
    a->start = dfg_cpu_attention_start(n, in, plain, a->T, ctx, &st);
    if (!st && ctx->scratch_per_thread < dfg_cpu_scratch_attention(n))
        st = dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    return st;
}

/* inputs qkv (B,T,3C) [, start (B)] -> y (B,T,C), lse (B,H,T) */
dfg_status dfg_cpu_attention(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    att_dims a;
    dfg_status st = att_dims_of(n, in, 0, 1, ctx, &a);
    if (st) return st;
    const int64_t B = a.B, T = a.T, C = a.C, H = a.H, D = a.D;
    const float *qkv = in[0];         /* (B, T, 3C) */
    float *y = out[0], *lse = out[1]; /* (B, T, C), (B, H, T) */
    const float scale = a.scale;
    const int32_t *start = a.start; /* (B) or NULL */
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H, s0 = start ? start[b] : 0;
        const float *q = qkv + b * T * 3 * C + h * D; /* rows of stride 3C: q, then k at +C, v at +2C */
        float *yb = y + b * T * C + h * D, *S = dfg_cpu_thread_scratch(ctx);
        causal_block(q, q + C, q + 2 * C, yb, lse + bh * T, s0, C, D, scale, S, ctx->invariant); /* the pads */
        const float *qr = q + s0 * 3 * C;
        causal_block(qr, qr + C, qr + 2 * C, yb + s0 * C, lse + bh * T + s0, T - s0, C, D, scale, S, ctx->invariant);
    }
    return DFG_OK;
}

/* The backward of causal_block: dy, y of stride C, lse (len) -> dq, dk, dv of stride 3C.
 *   P = exp(S - lse), dP = dY V^T, dS = P (dP - rowsum(dY * Y)) scale,
 *   dQ = dS K, dK = dS^T Q, dV = P^T dY.  P, dS: (len, len) scratch each. */
static void causal_block_bwd(const float *q, const float *k, const float *v, const float *dyb, const float *yb,
                             const float *lse, float *dq, float *dk, float *dv, int64_t len, int64_t C, int64_t D,
                             float scale, float *P, float *dS) {
    if (len < 1) return;
    int n = (int)len, ld3 = (int)(3 * C), ldc = (int)C;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, (int)D, scale, q, ld3, k, ld3, 0.0f, P, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, (int)D, 1.0f, dyb, ldc, v, ld3, 0.0f, dS, n);
    for (int64_t t = 0; t < len; t++) {
        float *pr = P + t * len, *dr = dS + t * len, l = lse[t], dot = 0.0f;
        const float *dyt = dyb + t * C, *yt = yb + t * C;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < D; d++) dot += dyt[d] * yt[d];
#pragma omp simd
        for (int64_t j = 0; j <= t; j++) {
            pr[j] = dfg_exp_f32(pr[j] - l);
            dr[j] = pr[j] * (dr[j] - dot) * scale;
        }
        for (int64_t j = t + 1; j < len; j++) pr[j] = dr[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, (int)D, n, 1.0f, dS, n, k, ld3, 0.0f, dq, ld3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, (int)D, n, 1.0f, dS, n, q, ld3, 0.0f, dk, ld3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, (int)D, n, 1.0f, P, n, dyb, ldc, 0.0f, dv, ld3);
}

/* inputs dy (B,T,C), qkv (B,T,3C), y (B,T,C), lse (B,H,T) [, start (B)] -> dqkv (B,T,3C). Each
 * (b, h) owns its head's columns of dq, dk and dv, so the jobs write without races. */
dfg_status dfg_cpu_attention_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    att_dims a;
    dfg_status st = att_dims_of(n, in, 1, 4, ctx, &a);
    if (st) return st;
    const int64_t B = a.B, T = a.T, C = a.C, H = a.H, D = a.D;
    const float *dy = in[0], *qkv = in[1], *y = in[2], *lse = in[3];
    float *dqkv = out[0];
    const float scale = a.scale;
    const int32_t *start = a.start;
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H, s0 = start ? start[b] : 0;
        float *P = dfg_cpu_thread_scratch(ctx), *dS = P + T * T; /* (T, T) each */
        for (int blk = 0; blk < 2; blk++) { /* the pads 0 .. s0-1, then the real columns s0 .. T-1 */
            int64_t r0 = blk ? s0 : 0, len = blk ? T - s0 : s0;
            const float *q = qkv + (b * T + r0) * 3 * C + h * D;
            const float *dyb = dy + (b * T + r0) * C + h * D, *yb = y + (b * T + r0) * C + h * D;
            float *dq = dqkv + (b * T + r0) * 3 * C + h * D;
            causal_block_bwd(q, q + C, q + 2 * C, dyb, yb, lse + bh * T + r0, dq, dq + C, dq + 2 * C, len, C, D, scale,
                             P, dS);
        }
    }
    return DFG_OK;
}

/* q (B,Tq,C) of row b at positions p .. p+Tq-1 (p = pos[b] for a per-row pos (B), else the one
 * pos) against caches (B,Tmax,Ckv) rows lo .. p+i (lo: the row's start when p+i is a real
 * column, else 0): per query row, scores = K q (a GEMV over the cached rows), softmax, y = V^T p.
 * The caches hold Hkv = Ckv / D heads; query head h reads KV head h / (H / Hkv) (Hkv = H: head h).
 * Every row's position is checked before any is computed: one out of range fails the step. */
dfg_status dfg_cpu_attention_cached(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape qs = n->in[0]->shape;
    int64_t B = qs.d[0], Tq = qs.d[1], C = qs.d[2], Tmax = n->in[1]->shape.d[1], H = n->attr->attention.n_head,
            D = C / H, Ckv = n->in[1]->shape.d[2], group = H / (Ckv / D); /* query heads per KV head */
    const float *q = in[0], *kc = in[1], *vc = in[2];
    const int32_t *pos = in[3];
    int64_t pos_step = dfg_shape_numel(n->in[3]->shape) == 1 ? 0 : 1; /* 1: one position a row */
    float *y = out[0];
    for (int64_t b = 0; b < (pos_step ? B : 1); b++)
        if (pos[b] < 0 || (int64_t)pos[b] + Tq > Tmax) {
            char row[40] = "";
            if (pos_step) snprintf(row, sizeof(row), " (row %lld)", (long long)b);
            return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "position %lld%s + %lld queries exceeds the cache length %lld",
                                (long long)pos[b], row, (long long)Tq, (long long)Tmax);
        }
    dfg_status st;
    const int32_t *start = dfg_cpu_attention_start(n, in, 4, Tmax, ctx, &st); /* (B) or NULL */
    if (st) return st;
    if (ctx->scratch_per_thread < dfg_cpu_scratch_attention(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static) num_threads(ctx->n_threads)
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < Tq; i++) {
            int64_t b = bh / H, h = bh % H, col = pos[b * pos_step] + i, s0 = start ? start[b] : 0;
            int64_t lo = col >= s0 ? s0 : 0;
            int64_t nk = col + 1 - lo, at = (b * Tmax + lo) * Ckv + h / group * D;
            const float *k = kc + at, *v = vc + at; /* rows lo .. col, of stride Ckv */
            float *p = dfg_cpu_thread_scratch(ctx); /* (nk) */
            if (ctx->invariant) {
                dfg_cpu_kv_run keys = {k, v, nk, Ckv};
                dfg_cpu_attend_invariant(q + (b * Tq + i) * C + h * D, &keys, 1, D, scale, p, y + (b * Tq + i) * C + h * D);
                continue;
            }
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nk, (int)D, scale, k, (int)Ckv, q + (b * Tq + i) * C + h * D,
                        1, 0.0f, p, 1);
            dfg_cpu_softmax_row(p, nk, nk);
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)nk, (int)D, 1.0f, v, (int)Ckv, p, 1, 0.0f,
                        y + (b * Tq + i) * C + h * D, 1);
        }
    return DFG_OK;
}
