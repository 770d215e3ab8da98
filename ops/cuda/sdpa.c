/* sdpa.c - SDPA descriptors from attention nodes (pure), the rule of what cuDNN's fused flash
 * attention takes, and the emulated SDPA: a plain f32 implementation of the semantics of sdpa.h
 * that reads and writes every operand through the descriptor's offsets and strides only, so a
 * wrong stride in a descriptor gives a wrong answer under emulation as it would on the GPU.
 * Plain C, linked with both builds of the kernels (nvcc and emulated). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dtype.h"
#include "cuda.h"
#include "simt/dfg_simt_ctl.h"

/* ---------------------------------------------------------------- descriptors */
static dfg_sdpa_layout layout(int64_t offset, int64_t sb, int64_t sh, int64_t ss, int64_t sd) {
    return (dfg_sdpa_layout){offset, {sb, sh, ss, sd}};
}

/* The dims shared by both directions, from qkv (B, T, 3C) and the head count; false when the
 * shapes are not an attention's. */
static bool common(const dfg_node *n, const dfg_tensor *qkv, dfg_sdpa_desc *d, const char **why) {
    memset(d, 0, sizeof(*d)); /* padding too: descriptors are compared with memcmp */
    int64_t H = n->attr->attention.n_head;
    if (qkv->shape.rank != 3 || qkv->shape.d[2] % 3 || H <= 0 || (qkv->shape.d[2] / 3) % H ||
        qkv->shape.d[2] == 0) {
        *why = "needs qkv of shape (B, T, 3C) with C a multiple of the heads";
        return false;
    }
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3, D = C / H;
    d->batch = B, d->heads = H, d->seq_q = T, d->seq_kv = T, d->head_dim = D;
    d->scale = 1.0f / sqrtf((float)D); /* the CPU kernel's expression, so both round alike */
    d->causal = true;
    d->stats = true;
    d->dtype = qkv->dtype;
    /* Q, K, V in place in qkv: token rows of 3C, heads D apart, the parts C apart */
    for (int p = 0; p < 3; p++) d->t[DFG_SDPA_Q + p] = layout(p * C, T * 3 * C, D, 3 * C, 1);
    d->t[DFG_SDPA_O] = layout(0, T * C, D, C, 1);      /* y (B, T, C) */
    d->t[DFG_SDPA_STATS] = layout(0, H * T, T, 1, 1);  /* lse (B, H, T) */
    return true;
}

static bool same_shape(const dfg_tensor *t, dfg_dtype dt, int rank, int64_t a, int64_t b, int64_t c) {
    return t->dtype == dt && t->shape.rank == rank && t->shape.d[0] == a && t->shape.d[1] == b &&
           (rank < 3 || t->shape.d[2] == c);
}

bool dfg_sdpa_forward_desc(const dfg_node *n, dfg_sdpa_desc *d, const char **why) {
    if (n->op == DFG_OP_ATTENTION && n->n_in == 2) {
        *why = "left-padded rows (a start input): SDPA has no left-padding mask; dfg's own attention kernel runs";
        return false;
    }
    if (n->op != DFG_OP_ATTENTION || n->n_in != 1 || n->n_out != 2) {
        *why = "not an attention node";
        return false;
    }
    if (!common(n, n->in[0], d, why)) return false;
    if (!same_shape(n->out[0], d->dtype, 3, d->batch, d->seq_q, d->heads * d->head_dim) ||
        !same_shape(n->out[1], DFG_F32, 3, d->batch, d->heads, d->seq_q)) {
        *why = "outputs are not y (B, T, C) and an f32 lse (B, H, T)";
        return false;
    }
    return true;
}

bool dfg_sdpa_backward_desc(const dfg_node *n, dfg_sdpa_desc *d, const char **why) {
    if (n->op == DFG_OP_ATTENTION_BWD && n->n_in == 5) {
        *why = "left-padded rows (a start input): SDPA has no left-padding mask; dfg's own attention kernel runs";
        return false;
    }
    if (n->op != DFG_OP_ATTENTION_BWD || n->n_in != 4 || n->n_out != 1) {
        *why = "not an attention_bwd node";
        return false;
    }
    if (!common(n, n->in[1], d, why)) return false;
    int64_t B = d->batch, T = d->seq_q, C = d->heads * d->head_dim;
    if (!same_shape(n->in[0], d->dtype, 3, B, T, C) || !same_shape(n->in[2], d->dtype, 3, B, T, C) ||
        !same_shape(n->in[3], DFG_F32, 3, B, d->heads, T) || !same_shape(n->out[0], d->dtype, 3, B, T, 3 * C)) {
        *why = "inputs are not dy, y (B, T, C), lse (B, H, T) and the output not dqkv (B, T, 3C)";
        return false;
    }
    d->t[DFG_SDPA_DO] = d->t[DFG_SDPA_O]; /* dy as y */
    for (int p = 0; p < 3; p++) d->t[DFG_SDPA_DQ + p] = d->t[DFG_SDPA_Q + p]; /* dqkv as qkv */
    return true;
}

void dfg_sdpa_buffers(const dfg_node *n, void *const *in, void *const *out, void **ptrs) {
    for (int k = 0; k < DFG_SDPA_N_OPERANDS; k++) ptrs[k] = NULL;
    if (n->op == DFG_OP_ATTENTION) {
        ptrs[DFG_SDPA_Q] = ptrs[DFG_SDPA_K] = ptrs[DFG_SDPA_V] = in[0];
        ptrs[DFG_SDPA_O] = out[0], ptrs[DFG_SDPA_STATS] = out[1];
    } else if (n->op == DFG_OP_ATTENTION_BWD) {
        ptrs[DFG_SDPA_Q] = ptrs[DFG_SDPA_K] = ptrs[DFG_SDPA_V] = in[1];
        ptrs[DFG_SDPA_O] = in[2], ptrs[DFG_SDPA_STATS] = in[3], ptrs[DFG_SDPA_DO] = in[0];
        ptrs[DFG_SDPA_DQ] = ptrs[DFG_SDPA_DK] = ptrs[DFG_SDPA_DV] = out[0];
    }
}

/* ---------------------------------------------------------------- what cuDNN takes */
static int n_operands(bool backward) { return backward ? DFG_SDPA_N_OPERANDS : DFG_SDPA_STATS + 1; }

bool dfg_sdpa_cudnn_supports(const dfg_sdpa_desc *d, bool backward, void *const *ptrs, const char **why) {
    if (d->dtype != DFG_BF16 && d->dtype != DFG_F16) return *why = "cuDNN's fused attention is bf16 or f16 only", false;
    if (d->head_dim % 8 || d->head_dim > 128) return *why = "head dim not a multiple of 8 up to 128", false;
    if (!d->stats) return *why = "the stats (log-sum-exp) are not kept", false;
    for (int k = 0; k < n_operands(backward); k++) {
        const dfg_sdpa_layout *l = &d->t[k];
        size_t es = k == DFG_SDPA_STATS ? sizeof(float) : dfg_dtype_size(d->dtype);
        /* a stats row is one f32: its last dim has extent 1, its rows must be packed, and only its
         * start needs cuDNN's alignment (T floats per head are any number of bytes) */
        if (k == DFG_SDPA_STATS ? l->stride[2] != 1 : l->stride[3] != 1)
            return *why = "an operand's innermost stride is not 1", false;
        for (int a = 0; a < 3 && k != DFG_SDPA_STATS; a++) /* every row of Q, K, V, O... starts aligned */
            if ((size_t)l->stride[a] * es % 16) return *why = "a stride is not a multiple of 16 bytes", false;
        if (ptrs && ((uintptr_t)ptrs[k] + (size_t)l->offset * es) % 16)
            return *why = "an operand does not start on 16 bytes", false;
    }
    return true;
}

char *dfg_sdpa_str(const dfg_sdpa_desc *d, char *buf, size_t len) {
    static const char *names[DFG_SDPA_N_OPERANDS] = {"Q", "K", "V", "O", "stats", "dO", "dQ", "dK", "dV"};
    int k = snprintf(buf, len, "B=%lld H=%lld Sq=%lld Skv=%lld D=%lld scale=%g%s %s",
                     (long long)d->batch, (long long)d->heads, (long long)d->seq_q, (long long)d->seq_kv,
                     (long long)d->head_dim, (double)d->scale, d->causal ? " causal" : "", dfg_dtype_name(d->dtype));
    for (int o = 0; o < DFG_SDPA_N_OPERANDS && k >= 0 && (size_t)k < len; o++) {
        const dfg_sdpa_layout *l = &d->t[o];
        if (!l->stride[0] && !l->stride[1] && !l->stride[2] && !l->stride[3]) continue; /* unused */
        k += snprintf(buf + k, len - (size_t)k, " %s@%lld[%lld,%lld,%lld,%lld]", names[o], (long long)l->offset,
                      (long long)l->stride[0], (long long)l->stride[1], (long long)l->stride[2],
                      (long long)l->stride[3]);
    }
    return buf;
}

/* ---------------------------------------------------------------- the emulated SDPA */
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
    for (int k = 0; k < n_operands(backward) && !bad; k++)
        if (!ptrs[k] && (k != DFG_SDPA_STATS || d->stats)) bad = "an operand's pointer is NULL";
    if (bad) { /* what cuDNN would refuse as a bad parameter */
        if (ctx->err) snprintf(ctx->err, ctx->err_len, "sdpa: invalid descriptor (%s): %s", bad, dfg_sdpa_str(d, buf, sizeof(buf)));
        return DFG_ERR_ARG;
    }
    sdpa_task t = {.d = *d, .backward = backward};
    for (int k = 0; k < DFG_SDPA_N_OPERANDS; k++) t.ptrs[k] = k < n_operands(backward) ? ptrs[k] : NULL;
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
