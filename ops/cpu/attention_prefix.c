/* attention_prefix.c - CPU causal attention of n = P*G rows over their group's shared prefix
 * (ops/attention_prefix.c). Fused [q | k | v] tensors, head h at columns h*D .. h*D+D of each
 * part, rows of stride 3C.
 *
 * A row's scores are one (Tc, Tp + Tc) matrix in the thread's scratch: the prefix's columns
 * from one GEMM against the prefix keys, the row's own from another; the softmax runs over both
 * (query i allows Tp + i + 1 keys), and Y = P_prefix V_prefix + P_own V_own. Backward runs one
 * job per (prefix, head) and walks the group's G rows in order, so the prefix's key and value
 * gradients are summed without races or a second buffer.
 *
 * Left-padded prefixes (start s of prefix p): its rows' queries see prefix keys s .. Tp-1, which
 * is this same computation over the prefix rows s .. Tp-1 (a prefix of Tp - s keys starting s
 * rows in); the prefix's key and value gradients of rows 0 .. s-1 are zeros.
 *
 * In a batch-invariant plan the forward goes one query at a time through invariant.c's order:
 * the prefix's keys then the row's own, the order the KV cache holds them in while decoding. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "fastmath.h"

typedef struct {
    int64_t n, G, Tc, Tp, C, H, D, ld; /* ld = Tp + Tc: a score row */
    float scale;
} prefix_dims;

static prefix_dims dims_of(const dfg_shape qkv, const dfg_shape pre, int n_head) {
    prefix_dims d = {.n = qkv.d[0], .Tc = qkv.d[1], .Tp = pre.d[1], .C = qkv.d[2] / 3, .H = n_head};
    d.G = d.n / pre.d[0];
    d.D = d.C / d.H;
    d.ld = d.Tp + d.Tc;
    d.scale = 1.0f / sqrtf((float)d.D);
    return d;
}

/* The dims of a row whose prefix starts s0 rows in: Tp - s0 prefix keys (score rows get shorter) */
static prefix_dims skip_pads(const prefix_dims *d, int64_t s0) {
    prefix_dims r = *d;
    r.Tp -= s0;
    r.ld = r.Tp + r.Tc;
    return r;
}

size_t dfg_cpu_scratch_attention_prefix(const dfg_node *n) {
    bool bwd = n->op == DFG_OP_ATTENTION_PREFIX_BWD;
    const dfg_tensor *qkv = n->in[bwd ? 1 : 0], *pre = n->in[bwd ? 2 : 1];
    size_t rows = (size_t)qkv->shape.d[1], cols = (size_t)(qkv->shape.d[1] + pre->shape.d[1]);
    return sizeof(float) * rows * cols * (bwd ? 2u : 1u);
}

/* S (Tc, ld) = scale [Q Kp^T | Q K^T] for one row and head: q and k of the row, kp of its prefix */
static void scores(const prefix_dims *d, const float *q, const float *k, const float *kp, float *S) {
    int ld3 = (int)(3 * d->C);
    if (d->Tp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d->Tc, (int)d->Tp, (int)d->D, d->scale, q, ld3, kp, ld3,
                    0.0f, S, (int)d->ld);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d->Tc, (int)d->Tc, (int)d->D, d->scale, q, ld3, k, ld3,
                0.0f, S + d->Tp, (int)d->ld);
}

dfg_status dfg_cpu_attention_prefix(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const prefix_dims d0 = dims_of(n->in[0]->shape, n->in[1]->shape, n->attr->attention.n_head);
    const float *qkv = in[0], *pre = in[1]; /* (n, Tc, 3C), (P, Tp, 3C) */
    float *y = out[0], *lse = out[1];       /* (n, Tc, C), (n, H, Tc) */
    dfg_status st;
    const int32_t *start = dfg_cpu_attention_start(n, in, 2, d0.Tp, ctx, &st); /* (P) or NULL */
    if (st) return st;
    if (ctx->scratch_per_thread < dfg_cpu_scratch_attention_prefix(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    int ld3 = (int)(3 * d0.C);
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
    for (int64_t bh = 0; bh < d0.n * d0.H; bh++) {
        int64_t b = bh / d0.H, h = bh % d0.H, s0 = start ? start[b / d0.G] : 0;
        const prefix_dims d = skip_pads(&d0, s0);
        const float *q = qkv + b * d.Tc * 3 * d.C + h * d.D, *k = q + d.C, *v = q + 2 * d.C;
        const float *kp = pre + ((b / d.G) * d0.Tp + s0) * 3 * d.C + d.C + h * d.D, *vp = kp + d.C;
        float *S = dfg_cpu_thread_scratch(ctx), *yb = y + b * d.Tc * d.C + h * d.D; /* (Tc, ld); rows of stride C */
        if (ctx->invariant) { /* query i: the prefix's keys, then its own 0 .. i, as the KV cache holds them */
            for (int64_t i = 0; i < d.Tc; i++) {
                dfg_cpu_kv_run keys[2] = {{kp, vp, d.Tp, 3 * d.C}, {k, v, i + 1, 3 * d.C}};
                lse[bh * d.Tc + i] = dfg_cpu_attend_invariant(q + i * 3 * d.C, keys, 2, d.D, d.scale, S, yb + i * d.C);
            }
            continue;
        }
        scores(&d, q, k, kp, S);
        for (int64_t i = 0; i < d.Tc; i++) lse[bh * d.Tc + i] = dfg_cpu_softmax_row(S + i * d.ld, d.Tp + i + 1, d.ld);
        if (d.Tp)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d.Tc, (int)d.D, (int)d.Tp, 1.0f, S, (int)d.ld, vp,
                        ld3, 0.0f, yb, (int)d.C);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d.Tc, (int)d.D, (int)d.Tc, 1.0f, S + d.Tp, (int)d.ld,
                    v, ld3, d.Tp ? 1.0f : 0.0f, yb, (int)d.C);
    }
    return DFG_OK;
}

/* P = exp(S - lse) on the allowed keys, dS = P (dP - rowsum(dY * Y)) scale; zeros elsewhere */
static void softmax_grad(const prefix_dims *d, float *P, float *dS, const float *lse, const float *dy, const float *y) {
    for (int64_t i = 0; i < d->Tc; i++) {
        float *pr = P + i * d->ld, *dr = dS + i * d->ld, l = lse[i], dot = 0.0f;
        const float *dyi = dy + i * d->C, *yi = y + i * d->C;
        int64_t nk = d->Tp + i + 1;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < d->D; c++) dot += dyi[c] * yi[c];
#pragma omp simd
        for (int64_t j = 0; j < nk; j++) {
            pr[j] = dfg_exp_f32(pr[j] - l);
            dr[j] = pr[j] * (dr[j] - dot) * d->scale;
        }
        for (int64_t j = nk; j < d->ld; j++) pr[j] = dr[j] = 0.0f;
    }
}

/* inputs dy (n,Tc,C), qkv (n,Tc,3C), prefix (P,Tp,3C), y (n,Tc,C), lse (n,H,Tc)
 * -> dqkv (n,Tc,3C), dprefix (P,Tp,3C). Per row: dP = dY [Vp | V]^T, dQ = dS_p Kp + dS_own K,
 * dK = dS_own^T Q, dV = P_own^T dY; and the prefix's dKp += dS_p^T Q, dVp += P_p^T dY. */
dfg_status dfg_cpu_attention_prefix_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const prefix_dims d0 = dims_of(n->in[1]->shape, n->in[2]->shape, n->attr->attention.n_head);
    const float *dy = in[0], *qkv = in[1], *pre = in[2], *y = in[3], *lse = in[4];
    float *dqkv = out[0], *dpre = out[1];
    dfg_status st;
    const int32_t *start = dfg_cpu_attention_start(n, in, 5, d0.Tp, ctx, &st); /* (P) or NULL */
    if (st) return st;
    if (ctx->scratch_per_thread < dfg_cpu_scratch_attention_prefix(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    int64_t P = d0.n / d0.G;
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
    for (int64_t ph = 0; ph < P * d0.H; ph++) {
        int64_t p = ph / d0.H, h = ph % d0.H, s0 = start ? start[p] : 0;
        const prefix_dims d = skip_pads(&d0, s0);
        int ld3 = (int)(3 * d.C), ldc = (int)d.C, Tc = (int)d.Tc, Tp = (int)d.Tp, D = (int)d.D, ld = (int)d.ld;
        float *dqp0 = dpre + p * d0.Tp * 3 * d.C + h * d.D;
        for (int64_t t = 0; t < d0.Tp; t++) /* the prefix's queries get nothing; its keys and values sum (pads: 0) */
            for (int part = 0; part < 3; part++) memset(dqp0 + t * 3 * d.C + part * d.C, 0, sizeof(float) * (size_t)d.D);
        const float *kp = pre + (p * d0.Tp + s0) * 3 * d.C + d.C + h * d.D, *vp = kp + d.C;
        float *dqp = dqp0 + s0 * 3 * d.C, *dkp = dqp + d.C, *dvp = dqp + 2 * d.C;
        float *Pm = dfg_cpu_thread_scratch(ctx), *dS = Pm + d.Tc * d.ld; /* (Tc, ld) each */
        for (int64_t b = p * d.G; b < (p + 1) * d.G; b++) {
            const float *q = qkv + b * d.Tc * 3 * d.C + h * d.D, *k = q + d.C, *v = q + 2 * d.C;
            const float *dyb = dy + b * d.Tc * d.C + h * d.D, *yb = y + b * d.Tc * d.C + h * d.D;
            float *dq = dqkv + b * d.Tc * 3 * d.C + h * d.D, *dk = dq + d.C, *dv = dq + 2 * d.C;
            scores(&d, q, k, kp, Pm);
            if (Tp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tc, Tp, D, 1.0f, dyb, ldc, vp, ld3, 0.0f, dS, ld);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tc, Tc, D, 1.0f, dyb, ldc, v, ld3, 0.0f, dS + Tp, ld);
            softmax_grad(&d, Pm, dS, lse + (b * d.H + h) * d.Tc, dyb, yb);
            if (Tp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tc, D, Tp, 1.0f, dS, ld, kp, ld3, 0.0f, dq, ld3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tc, D, Tc, 1.0f, dS + Tp, ld, k, ld3, Tp ? 1.0f : 0.0f,
                        dq, ld3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tc, D, Tc, 1.0f, dS + Tp, ld, q, ld3, 0.0f, dk, ld3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tc, D, Tc, 1.0f, Pm + Tp, ld, dyb, ldc, 0.0f, dv, ld3);
            if (Tp) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tp, D, Tc, 1.0f, dS, ld, q, ld3, 1.0f, dkp, ld3);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tp, D, Tc, 1.0f, Pm, ld, dyb, ldc, 1.0f, dvp, ld3);
            }
        }
    }
    return DFG_OK;
}
