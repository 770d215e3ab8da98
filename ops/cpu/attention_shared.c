/* attention_shared.c - CPU attention_shared_cached (ops/attention_shared.c): decoding queries
 * against a KV cache whose prompts' part (P, Tp, Ckv) is stored once per group of rows and whose
 * rows' own part (N, Tc, Ckv) continues each row's columns from Tp on.
 *
 * One job per (group, query head): the queries of the group's rows (G rows of Tq each, neighbours
 * in q, so one matrix of stride C) meet the prompt's keys in one GEMM, which reads the prompt once
 * for the group; each query's own keys are a GEMV. A query's softmax then runs over its window of
 * the one score row [prompt keys | own keys] (the window is contiguous: a query that sees fewer
 * than all the prompt's keys sits inside the prompt and has no own keys), and its output is the
 * prompt's GEMM over the weights plus its own GEMV added. One softmax over both parts needs no
 * merge of partial ones: the CUDA kernel merges by log-sum-exp, the CPU has the scores at hand.
 * With prompt_of (rows of one prompt that are not neighbours: decode_tail's gathered rows) a job
 * is one row.
 *
 * In a batch-invariant plan each query goes through invariant.c's order with two runs of keys,
 * the prompt's then its own: the same operations in the same order as attention_cached on the
 * copied cache (one run over the same keys) and as attention_prefix in training, so decode's
 * log-probs stay the training forward's bit for bit. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu.h"

typedef struct {
    int64_t N, Tq, C, H, D, Ckv, per_kv; /* per_kv: query heads per KV head */
    int64_t P, Tp, Tc, rows;             /* rows: a job's rows (N / P, or 1 with prompt_of) */
    int64_t pos_step;                    /* 1: pos holds one column a row */
    const int32_t *pos, *start, *prompt_of;
    float scale;
} shared_dims;

/* Query i of row b: its prompt keys [plo, phi) and own keys [olo, ohi) (own index: column - Tp),
 * the columns lo .. col of its virtual row (lo: its start when col is a real column, else 0). */
typedef struct {
    int64_t plo, phi, olo, ohi;
} query_keys;

static query_keys keys_of(const shared_dims *d, int64_t b, int64_t i) {
    int64_t col = d->pos[b * d->pos_step] + i, s0 = d->start ? d->start[b] : 0, lo = col >= s0 ? s0 : 0;
    query_keys k;
    k.plo = lo < d->Tp ? lo : d->Tp;
    k.phi = col + 1 < d->Tp ? col + 1 : d->Tp;
    k.olo = lo > d->Tp ? lo - d->Tp : 0;
    k.ohi = col + 1 > d->Tp ? col + 1 - d->Tp : 0;
    return k;
}

static shared_dims dims_of(const dfg_node *n, void *const *in) {
    const dfg_attrs_attention_shared *a = &n->attr->attention_shared;
    shared_dims d = {.N = n->in[0]->shape.d[0], .Tq = n->in[0]->shape.d[1], .C = n->in[0]->shape.d[2], .H = a->n_head};
    d.D = d.C / d.H, d.Ckv = n->in[1]->shape.d[2], d.per_kv = d.H / (d.Ckv / d.D);
    d.P = n->in[1]->shape.d[0], d.Tp = n->in[1]->shape.d[1], d.Tc = n->in[3]->shape.d[1];
    d.rows = a->prompt_of ? 1 : d.N / d.P;
    d.pos = in[5];
    d.pos_step = dfg_shape_numel(n->in[5]->shape) == 1 ? 0 : 1;
    d.start = a->start ? in[6] : NULL;
    d.prompt_of = a->prompt_of ? in[n->n_in - 1] : NULL;
    d.scale = 1.0f / sqrtf((float)d.D);
    return d;
}

size_t dfg_cpu_scratch_attention_shared_cached(const dfg_node *n) {
    int64_t N = n->in[0]->shape.d[0], Tq = n->in[0]->shape.d[1], P = n->in[1]->shape.d[0];
    int64_t rows = n->attr->attention_shared.prompt_of ? 1 : N / P;
    return sizeof(float) * (size_t)(rows * Tq) * (size_t)(n->in[1]->shape.d[1] + n->in[3]->shape.d[1]);
}

/* Every row's column, start and prompt checked before anything is computed: one out of range
 * fails the step, naming it. */
static dfg_status check_rows(const dfg_node *n, const shared_dims *d, dfg_cpu_ctx *ctx) {
    int64_t T = d->Tp + d->Tc;
    for (int64_t b = 0; b < (d->pos_step ? d->N : 1); b++)
        if (d->pos[b] < 0 || (int64_t)d->pos[b] + d->Tq > T)
            return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "position %lld (row %lld) + %lld queries exceeds the cache's %lld "
                                "columns", (long long)d->pos[b], (long long)b, (long long)d->Tq, (long long)T);
    for (int64_t b = 0; d->start && b < d->N; b++)
        if (d->start[b] < 0 || d->start[b] >= T)
            return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "start[%lld] = %d is outside the row's columns 0 .. %lld",
                                (long long)b, (int)d->start[b], (long long)(T - 1));
    for (int64_t b = 0; d->prompt_of && b < d->N; b++)
        if (d->prompt_of[b] < 0 || d->prompt_of[b] >= d->P)
            return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "prompt_of[%lld] = %d is not one of the %lld prompts", (long long)b,
                                (int)d->prompt_of[b], (long long)d->P);
    if (ctx->scratch_per_thread < dfg_cpu_scratch_attention_shared_cached(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    return DFG_OK;
}

/* The parts a job reads: its prompt's keys and values from column 0, and row b's own. */
typedef struct {
    const float *kp, *vp;
} prompt_part;

/* Query i of row b, head h, in invariant.c's order: its prompt's keys then its own, one run each. */
static void attend_invariant(const shared_dims *d, prompt_part pp, const float *kc, const float *vc, const float *q,
                             float *y, int64_t b, int64_t i, int64_t h, float *p) {
    query_keys k = keys_of(d, b, i);
    int64_t at = (b * d->Tc) * d->Ckv + h / d->per_kv * d->D;
    dfg_cpu_kv_run runs[2] = {{pp.kp + k.plo * d->Ckv, pp.vp + k.plo * d->Ckv, k.phi - k.plo, d->Ckv},
                              {kc + at + k.olo * d->Ckv, vc + at + k.olo * d->Ckv, k.ohi - k.olo, d->Ckv}};
    int64_t qi = (b * d->Tq + i) * d->C + h * d->D;
    dfg_cpu_attend_invariant(q + qi, runs, 2, d->D, d->scale, p, y + qi);
}

/* The job's Qn = rows * Tq queries (row b0 on) against its prompt: S (Qn, ld) holds, per query,
 * the scores of prompt keys lo .. lo+np-1 then of its own keys; softmax over each query's window. */
static void attend_group(const shared_dims *d, prompt_part pp, const float *kc, const float *vc, const float *q,
                         float *y, int64_t b0, int64_t h, float *S) {
    int64_t Qn = d->rows * d->Tq, lo = d->Tp, hi = 0, D = d->D, C = d->C, Ckv = d->Ckv;
    for (int64_t r = 0; r < Qn; r++) {
        query_keys k = keys_of(d, b0 + r / d->Tq, r % d->Tq);
        if (k.phi > k.plo) lo = k.plo < lo ? k.plo : lo, hi = k.phi > hi ? k.phi : hi;
    }
    int64_t np = hi > lo ? hi - lo : 0, ld = np + d->Tc;
    const float *qg = q + b0 * d->Tq * C + h * D; /* (Qn, D) of stride C */
    float *yg = y + b0 * d->Tq * C + h * D;
    if (np)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Qn, (int)np, (int)D, d->scale, qg, (int)C,
                    pp.kp + lo * Ckv, (int)Ckv, 0.0f, S, (int)ld);
    int64_t kv_col = h / d->per_kv * D;
    for (int64_t r = 0; r < Qn; r++) {
        int64_t b = b0 + r / d->Tq;
        query_keys k = keys_of(d, b, r % d->Tq);
        int64_t nown = k.ohi - k.olo, wlo = k.phi > k.plo ? k.plo - lo : np, wlen = k.phi - k.plo + nown;
        float *s = S + r * ld;
        const float *own = kc + (b * d->Tc + k.olo) * Ckv + kv_col;
        if (nown)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nown, (int)D, d->scale, own, (int)Ckv, qg + r * C, 1, 0.0f,
                        s + np, 1);
        dfg_cpu_softmax_row(s + wlo, wlen, wlen);
        for (int64_t j = 0; j < wlo; j++) s[j] = 0.0f;                    /* prompt keys before its window */
        for (int64_t j = wlo + (k.phi - k.plo); j < np; j++) s[j] = 0.0f; /* after it: a query inside the prompt */
    }
    if (np)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Qn, (int)D, (int)np, 1.0f, S, (int)ld,
                    pp.vp + lo * Ckv, (int)Ckv, 0.0f, yg, (int)C);
    for (int64_t r = 0; r < Qn; r++) {
        int64_t b = b0 + r / d->Tq;
        query_keys k = keys_of(d, b, r % d->Tq);
        int64_t nown = k.ohi - k.olo;
        if (!np) memset(yg + r * C, 0, sizeof(float) * (size_t)D);
        if (nown)
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)nown, (int)D, 1.0f, vc + (b * d->Tc + k.olo) * Ckv + kv_col,
                        (int)Ckv, S + r * ld + np, 1, 1.0f, yg + r * C, 1);
    }
}

/* inputs q (N,Tq,C), k_prompt, v_prompt (P,Tp,Ckv), k_rows, v_rows (N,Tc,Ckv), pos [, start (N)]
 * [, prompt_of (N)] -> y (N,Tq,C) */
dfg_status dfg_cpu_attention_shared_cached(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const shared_dims d = dims_of(n, in);
    dfg_status st = check_rows(n, &d, ctx);
    if (st) return st;
    const float *q = in[0], *kp = in[1], *vp = in[2], *kc = in[3], *vc = in[4];
    float *y = out[0];
    int64_t units = d.N / d.rows;
#pragma omp parallel for schedule(static) num_threads(ctx->n_threads)
    for (int64_t uh = 0; uh < units * d.H; uh++) {
        int64_t u = uh / d.H, h = uh % d.H, b0 = u * d.rows;
        int64_t prompt = d.prompt_of ? d.prompt_of[b0] : u, at = prompt * d.Tp * d.Ckv + h / d.per_kv * d.D;
        prompt_part pp = {kp + at, vp + at};
        float *S = dfg_cpu_thread_scratch(ctx);
        if (!ctx->invariant) {
            attend_group(&d, pp, kc, vc, q, y, b0, h, S);
            continue;
        }
        for (int64_t b = b0; b < b0 + d.rows; b++)
            for (int64_t i = 0; i < d.Tq; i++) attend_invariant(&d, pp, kc, vc, q, y, b, i, h, S);
    }
    return DFG_OK;
}
