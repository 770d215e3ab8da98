/* attention.c - CPU causal attention over a fused QKV tensor (B, T, 3C) laid out [q | k | v],
 * head h at columns h*D .. h*D+D of each part. The forward keeps a running max and sum
 * (online softmax), accumulating straight into the output row, and saves the row's
 * log-sum-exp; backward recomputes each probability from it. */
#include <math.h>
#include <string.h>

#include "cpu.h"

static inline float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One query row against keys/values k[j*ks], v[j*ks] for j < nk; y (D) receives the output. */
static float attend_row(const float *q, const float *k, const float *v, int64_t ks, int64_t nk, int64_t D,
                        float scale, float *y) {
    float m = -INFINITY, l = 0.0f;
    memset(y, 0, sizeof(float) * (size_t)D);
    for (int64_t j = 0; j < nk; j++) {
        float s = dot(q, k + j * ks, D) * scale;
        if (s > m) {
            float corr = expf(m - s);
            l *= corr;
            for (int64_t d = 0; d < D; d++) y[d] *= corr;
            m = s;
        }
        float p = expf(s - m);
        l += p;
        const float *vj = v + j * ks;
        for (int64_t d = 0; d < D; d++) y[d] += p * vj[d];
    }
    for (int64_t d = 0; d < D; d++) y[d] /= l;
    return m + logf(l);
}

dfg_status cpu_attention(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape s = n->in[0]->shape;
    int64_t B = s.d[0], T = s.d[1], C = s.d[2] / 3, H = n->attr.attention.n_head, D = C / H;
    const float *qkv = in[0];       /* (B, T, 3C) */
    float *y = out[0], *lse = out[1]; /* (B, T, C), (B, H, T) */
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(dynamic, 4)
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t t = 0; t < T; t++) {
            int64_t b = bh / H, h = bh % H;
            const float *base = qkv + b * T * 3 * C;
            lse[bh * T + t] = attend_row(base + t * 3 * C + h * D, base + C + h * D, base + 2 * C + h * D, 3 * C,
                                         t + 1, D, scale, y + (b * T + t) * C + h * D);
        }
    return DFG_OK;
}

/* inputs dy (B,T,C), qkv (B,T,3C), y (B,T,C), lse (B,H,T) -> dqkv (B,T,3C). Each (b, h) owns
 * its head's columns of dq, dk and dv, so the (b, h) jobs run in parallel without races. */
dfg_status cpu_attention_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape s = n->in[1]->shape;
    int64_t B = s.d[0], T = s.d[1], C = s.d[2] / 3, H = n->attr.attention.n_head, D = C / H;
    const float *dy = in[0], *qkv = in[1], *y = in[2], *lse = in[3];
    float *dqkv = out[0];
    float scale = 1.0f / sqrtf((float)D);
    memset(dqkv, 0, dfg_tensor_bytes(n->out[0]));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H;
        const float *base = qkv + b * T * 3 * C;
        float *dbase = dqkv + b * T * 3 * C;
        for (int64_t t = 0; t < T; t++) {
            const float *q = base + t * 3 * C + h * D, *dyt = dy + (b * T + t) * C + h * D;
            float Dt = dot(dyt, y + (b * T + t) * C + h * D, D), l = lse[bh * T + t];
            float *dq = dbase + t * 3 * C + h * D;
            for (int64_t j = 0; j <= t; j++) {
                const float *k = base + j * 3 * C + C + h * D, *v = base + j * 3 * C + 2 * C + h * D;
                float *dk = dbase + j * 3 * C + C + h * D, *dv = dbase + j * 3 * C + 2 * C + h * D;
                float p = expf(dot(q, k, D) * scale - l);
                float ds = p * (dot(dyt, v, D) - Dt) * scale;
                for (int64_t d = 0; d < D; d++) {
                    dq[d] += ds * k[d];
                    dk[d] += ds * q[d];
                    dv[d] += p * dyt[d];
                }
            }
        }
    }
    return DFG_OK;
}

/* q (B,Tq,C) at positions pos .. pos+Tq-1 against caches (B,Tmax,C) rows 0 .. pos+i */
dfg_status cpu_attention_cached(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape qs = n->in[0]->shape;
    int64_t B = qs.d[0], Tq = qs.d[1], C = qs.d[2], Tmax = n->in[1]->shape.d[1], H = n->attr.attention.n_head,
            D = C / H;
    const float *q = in[0], *kc = in[1], *vc = in[2];
    int64_t pos = *(const int32_t *)in[3];
    float *y = out[0];
    if (pos < 0 || pos + Tq > Tmax)
        return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "position %lld + %lld queries exceeds the cache length %lld",
                            (long long)pos, (long long)Tq, (long long)Tmax);
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < Tq; i++) {
            int64_t b = bh / H, h = bh % H;
            attend_row(q + (b * Tq + i) * C + h * D, kc + b * Tmax * C + h * D, vc + b * Tmax * C + h * D, C,
                       pos + i + 1, D, scale, y + (b * Tq + i) * C + h * D);
        }
    return DFG_OK;
}
