/* logprob.c - CPU kernels of the fused log-probability ops (see ops/logprob.c). Per row they
 * keep a running max and sum (online log-sum-exp), so each logit is exponentiated once; the
 * linear form gets its logits chunk by chunk from an OpenBLAS GEMM into the planned workspace
 * (in a batch-invariant plan the forward's from invariant.c's GEMM: decode's lm_head order). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "cpu.h"

/* rows and vocabulary of a logprob node's logits (..., V) */
static void logits_dims(const dfg_tensor *z, int64_t *rows, int64_t *v) {
    *v = z->shape.d[z->shape.rank - 1];
    *rows = dfg_shape_numel(z->shape) / *v;
}

static dfg_status bad_target(dfg_cpu_ctx *ctx, const dfg_node *n, const int32_t *t, int64_t rows, int64_t v) {
    for (int64_t r = 0; r < rows; r++)
        if (t[r] < 0 || t[r] >= v)
            return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "target %d at row %lld is outside [0, %lld)", t[r], (long long)r,
                                (long long)v);
    return DFG_OK;
}

dfg_status dfg_cpu_logprob(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    int64_t rows, v;
    logits_dims(n->in[0], &rows, &v);
    const float *z = in[0];         /* (rows, V) */
    const int32_t *t = in[1];       /* (rows) */
    float *logp = out[0], *lse = out[1]; /* (rows), (rows) */
    float s = n->attr->logprob.inv_temp;
    if (bad_target(ctx, n, t, rows, v)) return DFG_ERR_RANGE;
#pragma omp parallel for schedule(static) if (rows * v > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *zr = z + r * v;
        float m = -INFINITY;
        double l = 0.0;
        for (int64_t j = 0; j < v; j++) { /* online: rescale the sum when the max grows */
            float x = zr[j] * s;
            if (x == -INFINITY) continue; /* weighs nothing; exp(-inf - -inf) would be NaN */
            if (x > m) {
                l = l * exp((double)m - x) + 1.0;
                m = x;
            } else l += exp((double)x - m);
        }
        lse[r] = (float)(m + log(l));
        logp[r] = zr[t[r]] * s - lse[r];
    }
    return DFG_OK;
}

/* dz = g * inv_temp * (onehot(t) - softmax(z * inv_temp)); rows with g == 0 (masked) are 0 */
dfg_status dfg_cpu_logprob_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    int64_t rows, v;
    logits_dims(n->in[1], &rows, &v);
    const float *dy = in[0], *z = in[1], *lse = in[3]; /* (rows), (rows, V), (rows) */
    const int32_t *t = in[2];
    float *dz = out[0]; /* (rows, V) */
    float s = n->attr->logprob.inv_temp;
    if (bad_target(ctx, n, t, rows, v)) return DFG_ERR_RANGE;
#pragma omp parallel for schedule(static) if (rows * v > 16384)
    for (int64_t r = 0; r < rows; r++) {
        float g = dy[r] * s, *d = dz + r * v;
        const float *zr = z + r * v;
        if (g == 0.0f) {
            memset(d, 0, sizeof(float) * (size_t)v);
            continue;
        }
        for (int64_t j = 0; j < v; j++) d[j] = -g * expf(zr[j] * s - lse[r]);
        d[t[r]] += g;
    }
    return DFG_OK;
}

/* The shapes of a linear_logprob node: rows of hidden (rows, C), vocabulary V. */
typedef struct {
    int64_t rows, c, v, rc, vc;
    bool tb;
    float s;
} lin_dims;

static lin_dims lin_of(const dfg_node *n, const dfg_tensor *h, const dfg_tensor *w) {
    lin_dims d;
    d.c = h->shape.d[h->shape.rank - 1];
    d.rows = dfg_shape_numel(h->shape) / d.c;
    d.tb = n->attr->logprob.trans_b;
    d.v = d.tb ? w->shape.d[0] : w->shape.d[1];
    d.rc = n->attr->logprob.rows_chunk;
    d.vc = n->attr->logprob.v_chunk;
    d.s = n->attr->logprob.inv_temp;
    return d;
}

/* ws (rc, vc) = h[r0 : r0+rc] @ W[v0 : v0+vc]^T, the chunk's logits before temperature. The
 * GEMMs always cover DFG_LOGPROB_V_BLOCK vocabulary entries (OpenBLAS's results depend on the
 * matrix shapes it is given), so every logit is the same whatever chunk size was planned. */
static void chunk_logits(const lin_dims *d, const float *h, const float *w, int64_t r0, int64_t rc, int64_t v0,
                         int64_t vc, float *ws, const dfg_cpu_ctx *ctx) {
    if (ctx) { /* batch-invariant: each logit is decode's lm_head's, whatever the row chunk */
        dfg_cpu_gemm_invariant(d->tb, rc, vc, d->c, 1.0f, h + r0 * d->c, d->c, d->tb ? w + v0 * d->c : w + v0,
                               d->tb ? d->c : d->v, ws, vc, ctx->n_threads);
        return;
    }
    for (int64_t j0 = 0; j0 < vc; j0 += DFG_LOGPROB_V_BLOCK) {
        int64_t k = vc - j0 < DFG_LOGPROB_V_BLOCK ? vc - j0 : DFG_LOGPROB_V_BLOCK;
        if (d->tb) /* W (V, C): rows v0+j0 .. */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rc, (int)k, (int)d->c, 1.0f, h + r0 * d->c,
                        (int)d->c, w + (v0 + j0) * d->c, (int)d->c, 0.0f, ws + j0, (int)vc);
        else /* W (C, V): columns v0+j0 .. */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rc, (int)k, (int)d->c, 1.0f, h + r0 * d->c,
                        (int)d->c, w + v0 + j0, (int)d->v, 0.0f, ws + j0, (int)vc);
    }
}

dfg_status dfg_cpu_linear_logprob(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    lin_dims d = lin_of(n, n->in[0], n->in[1]);
    const float *h = in[0], *w = in[1]; /* (rows, C), (V, C) or (C, V) */
    const int32_t *t = in[2];           /* (rows) */
    float *logp = out[0], *lse = out[1], *ws = out[2], *ent = out[3]; /* (rows), (rows), (rc, vc), (rows) */
    if (bad_target(ctx, n, t, d.rows, d.v)) return DFG_ERR_RANGE;
    /* per row of a row chunk while the vocabulary is walked: its online statistics (max, sum,
     * entropy sum), and the target's logit in logp[] */
    dfg_row_stats st[DFG_LOGPROB_MAX_ROWS];
    for (int64_t r0 = 0; r0 < d.rows; r0 += d.rc) {
        int64_t rc = d.rows - r0 < d.rc ? d.rows - r0 : d.rc;
        for (int64_t r = 0; r < rc; r++) st[r] = (dfg_row_stats){-INFINITY, 0.0, 0.0};
        for (int64_t v0 = 0; v0 < d.v; v0 += d.vc) {
            int64_t vc = d.v - v0 < d.vc ? d.v - v0 : d.vc;
            chunk_logits(&d, h, w, r0, rc, v0, vc, ws, ctx->invariant ? ctx : NULL);
#pragma omp parallel for schedule(static) if (rc * vc > 16384)
            for (int64_t r = 0; r < rc; r++) {
                const float *row = ws + r * vc;
                dfg_row_stats s = st[r];
                /* element by element: the same sums for any chunking */
                for (int64_t j = 0; j < vc; j++) dfg_row_stats_push(&s, row[j] * d.s);
                st[r] = s;
                int64_t tj = t[r0 + r] - v0;
                if (tj >= 0 && tj < vc) logp[r0 + r] = row[tj] * d.s;
            }
        }
        for (int64_t r = 0; r < rc; r++) {
            lse[r0 + r] = (float)(st[r].m + log(st[r].l));
            logp[r0 + r] -= lse[r0 + r];
            ent[r0 + r] = (float)dfg_row_stats_entropy(&st[r]);
        }
    }
    return DFG_OK;
}

dfg_status dfg_cpu_linear_logprob_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    lin_dims d = lin_of(n, n->in[1], n->in[2]);
    const float *dy = in[0], *h = in[1], *w = in[2], *lse = in[4]; /* (rows), (rows, C), W, (rows) */
    const int32_t *t = in[3];
    bool ent = n->n_in >= 7;
    const float *dent = ent ? in[5] : NULL, *hent = ent ? in[6] : NULL; /* (rows) the entropy's gradient and value */
    float *dh = out[0], *dw = out[1], *ws = out[2]; /* (rows, C), W's shape (the accumulator's bytes when
                                                      * there are 6 or 8 inputs), (rc, vc) */
    if (bad_target(ctx, n, t, d.rows, d.v)) return DFG_ERR_RANGE;
    const bool want_dw = !n->attr->logprob.no_dweight; /* else dw is a one-float stand-in */
    memset(dh, 0, sizeof(float) * (size_t)(d.rows * d.c));
    if (want_dw && (n->n_in == 5 || n->n_in == 7))
        memset(dw, 0, sizeof(float) * (size_t)(d.v * d.c)); /* else dw is the accumulator */
    for (int64_t r0 = 0; r0 < d.rows; r0 += d.rc) {
        int64_t rc = d.rows - r0 < d.rc ? d.rows - r0 : d.rc;
        for (int64_t v0 = 0; v0 < d.v; v0 += d.vc) {
            int64_t vc = d.v - v0 < d.vc ? d.v - v0 : d.vc;
            chunk_logits(&d, h, w, r0, rc, v0, vc, ws, NULL); /* the gradient: OpenBLAS's speed */
            /* ws becomes d logits: s * (g (onehot - p) - gh p (log p + H)) */
#pragma omp parallel for schedule(static) if (rc * vc > 16384)
            for (int64_t r = 0; r < rc; r++) {
                float g = dy[r0 + r] * d.s, *row = ws + r * vc;
                if (ent) {
                    float gh = dent[r0 + r] * d.s, hl = hent[r0 + r] - lse[r0 + r]; /* log p + H = x - lse + H */
                    for (int64_t j = 0; j < vc; j++) {
                        float x = row[j] * d.s, p = expf(x - lse[r0 + r]);
                        row[j] = p == 0.0f ? 0.0f : -p * (g + gh * (x + hl));
                    }
                } else {
                    for (int64_t j = 0; j < vc; j++) row[j] = -g * expf(row[j] * d.s - lse[r0 + r]);
                }
                int64_t tj = t[r0 + r] - v0;
                if (tj >= 0 && tj < vc) row[tj] += g;
            }
            /* dh += dz @ W_c^T sums over the vocabulary: in fixed blocks of DFG_LOGPROB_V_BLOCK so that
             * the sums are the same whatever v_chunk the planner chose (a multiple of the block) */
            for (int64_t j0 = 0; j0 < vc; j0 += DFG_LOGPROB_V_BLOCK) {
                int64_t k = vc - j0 < DFG_LOGPROB_V_BLOCK ? vc - j0 : DFG_LOGPROB_V_BLOCK;
                if (d.tb) /* W rows v0+j0 .. (k, C) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rc, (int)d.c, (int)k, 1.0f, ws + j0,
                                (int)vc, w + (v0 + j0) * d.c, (int)d.c, 1.0f, dh + r0 * d.c, (int)d.c);
                else /* W columns v0+j0 .. (C, k) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rc, (int)d.c, (int)k, 1.0f, ws + j0,
                                (int)vc, w + v0 + j0, (int)d.v, 1.0f, dh + r0 * d.c, (int)d.c);
            }
            for (int64_t j0 = 0; want_dw && j0 < vc; j0 += DFG_LOGPROB_V_BLOCK) { /* the same block shapes as above */
                int64_t k = vc - j0 < DFG_LOGPROB_V_BLOCK ? vc - j0 : DFG_LOGPROB_V_BLOCK;
                if (d.tb) /* dW rows v0+j0 .. (k, C) += dz^T @ h_c */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)d.c, (int)rc, 1.0f, ws + j0,
                                (int)vc, h + r0 * d.c, (int)d.c, 1.0f, dw + (v0 + j0) * d.c, (int)d.c);
                else /* dW columns v0+j0 .. (C, k) += h_c^T @ dz */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d.c, (int)k, (int)rc, 1.0f, h + r0 * d.c,
                                (int)d.c, ws + j0, (int)vc, 1.0f, dw + v0 + j0, (int)d.v);
            }
        }
    }
    return DFG_OK;
}
