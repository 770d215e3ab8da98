/* attention.c - CPU causal attention over a fused QKV tensor (B, T, 3C) laid out [q | k | v],
 * head h at columns h*D .. h*D+D of each part; and its KV-cache form for decoding.
 *
 * Each (batch, head) pair is one job of an OpenMP loop, and inside a job the work is OpenBLAS
 * GEMMs reading Q, K and V in place by their row stride (3C in the fused tensor, C in a cache):
 * scores S = scale Q K^T (T x T, in the thread's scratch), a masked row softmax, Y = P V. The
 * forward saves each row's log-sum-exp; the backward recomputes P from it. OpenBLAS runs
 * single-threaded inside the parallel loop, so jobs do not oversubscribe the cores. The upper
 * triangle of S is computed and thrown away: at these sizes one GEMM beats a blocked triangle. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
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

dfg_status dfg_cpu_attention(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape s = n->in[0]->shape;
    int64_t B = s.d[0], T = s.d[1], C = s.d[2] / 3, H = n->attr->attention.n_head, D = C / H;
    const float *qkv = in[0];         /* (B, T, 3C) */
    float *y = out[0], *lse = out[1]; /* (B, T, C), (B, H, T) */
    float scale = 1.0f / sqrtf((float)D);
    if (ctx->scratch_per_thread < dfg_cpu_scratch_attention(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *q = qkv + b * T * 3 * C + h * D, *k = q + C, *v = q + 2 * C; /* rows of stride 3C */
        float *S = dfg_cpu_thread_scratch(ctx);                                          /* (T, T) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)D, scale, q, (int)(3 * C), k,
                    (int)(3 * C), 0.0f, S, (int)T);
        for (int64_t t = 0; t < T; t++) lse[bh * T + t] = dfg_cpu_softmax_row(S + t * T, t + 1, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, S, (int)T, v, (int)(3 * C),
                    0.0f, y + b * T * C + h * D, (int)C);
    }
    return DFG_OK;
}

/* inputs dy (B,T,C), qkv (B,T,3C), y (B,T,C), lse (B,H,T) -> dqkv (B,T,3C). Each (b, h) owns
 * its head's columns of dq, dk and dv, so the jobs write without races:
 *   P = exp(S - lse), dP = dY V^T, dS = P (dP - rowsum(dY * Y)) scale,
 *   dQ = dS K, dK = dS^T Q, dV = P^T dY. */
dfg_status dfg_cpu_attention_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape s = n->in[1]->shape;
    int64_t B = s.d[0], T = s.d[1], C = s.d[2] / 3, H = n->attr->attention.n_head, D = C / H;
    const float *dy = in[0], *qkv = in[1], *y = in[2], *lse = in[3];
    float *dqkv = out[0];
    float scale = 1.0f / sqrtf((float)D);
    if (ctx->scratch_per_thread < dfg_cpu_scratch_attention(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *q = qkv + b * T * 3 * C + h * D, *k = q + C, *v = q + 2 * C;
        const float *dyb = dy + b * T * C + h * D, *yb = y + b * T * C + h * D; /* rows of stride C */
        float *dq = dqkv + b * T * 3 * C + h * D, *dk = dq + C, *dv = dq + 2 * C;
        float *P = dfg_cpu_thread_scratch(ctx), *dS = P + T * T; /* (T, T) each */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)D, scale, q, (int)(3 * C), k,
                    (int)(3 * C), 0.0f, P, (int)T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)T, (int)D, 1.0f, dyb, (int)C, v,
                    (int)(3 * C), 0.0f, dS, (int)T);
        for (int64_t t = 0; t < T; t++) {
            float *pr = P + t * T, *dr = dS + t * T, l = lse[bh * T + t], dot = 0.0f;
            const float *dyt = dyb + t * C, *yt = yb + t * C;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < D; d++) dot += dyt[d] * yt[d];
#pragma omp simd
            for (int64_t j = 0; j <= t; j++) {
                pr[j] = dfg_exp_f32(pr[j] - l);
                dr[j] = pr[j] * (dr[j] - dot) * scale;
            }
            for (int64_t j = t + 1; j < T; j++) pr[j] = dr[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, dS, (int)T, k,
                    (int)(3 * C), 0.0f, dq, (int)(3 * C));
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, dS, (int)T, q, (int)(3 * C),
                    0.0f, dk, (int)(3 * C));
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, P, (int)T, dyb, (int)C, 0.0f,
                    dv, (int)(3 * C));
    }
    return DFG_OK;
}

/* q (B,Tq,C) at positions pos .. pos+Tq-1 against caches (B,Tmax,Ckv) rows 0 .. pos+i: per query
 * row, scores = K q (a GEMV over the cached rows), softmax, y = V^T p. The caches hold
 * Hkv = Ckv / D heads; query head h reads KV head h / (H / Hkv) (Hkv = H: head h). */
dfg_status dfg_cpu_attention_cached(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape qs = n->in[0]->shape;
    int64_t B = qs.d[0], Tq = qs.d[1], C = qs.d[2], Tmax = n->in[1]->shape.d[1], H = n->attr->attention.n_head,
            D = C / H, Ckv = n->in[1]->shape.d[2], group = H / (Ckv / D); /* query heads per KV head */
    const float *q = in[0], *kc = in[1], *vc = in[2];
    int64_t pos = *(const int32_t *)in[3];
    float *y = out[0];
    if (pos < 0 || pos + Tq > Tmax)
        return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "position %lld + %lld queries exceeds the cache length %lld",
                            (long long)pos, (long long)Tq, (long long)Tmax);
    if (ctx->scratch_per_thread < dfg_cpu_scratch_attention(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static) num_threads(ctx->n_threads)
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < Tq; i++) {
            int64_t b = bh / H, h = bh % H, nk = pos + i + 1, at = b * Tmax * Ckv + h / group * D;
            const float *k = kc + at, *v = vc + at; /* rows of stride Ckv */
            float *p = dfg_cpu_thread_scratch(ctx); /* (nk) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nk, (int)D, scale, k, (int)Ckv, q + (b * Tq + i) * C + h * D,
                        1, 0.0f, p, 1);
            dfg_cpu_softmax_row(p, nk, nk);
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)nk, (int)D, 1.0f, v, (int)Ckv, p, 1, 0.0f,
                        y + (b * Tq + i) * C + h * D, 1);
        }
    return DFG_OK;
}
