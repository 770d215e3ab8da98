/* sample.c - CPU categorical sampling with TRL's (transformers') settings, from the Philox stream.
 * Row r of a call draws u = uniform(philox(key, {counter, row0 + r})) and picks the first token
 * whose running sum of kept weights exp((z - max) / T) passes u * total; the call then advances
 * the counter by one. row0 (the optional third input, else 0) is the batch index of the call's
 * first row: a sub-batch then draws exactly the numbers the whole batch draws for its rows; with
 * one element per row it is each row's batch index instead (rows gathered from the batch).
 *
 * The CUDA kernel (ops/cuda/sample.cu) must pick the same tokens, so every floating-point step
 * here is one a GPU does bit for bit: the weights come from sample_exp (IEEE-exact +, -, *, /
 * and rint only, no libm exp, whose last bit differs between glibc and CUDA), and the sums run
 * in a fixed blocked order the kernel reproduces with warps: the vocabulary in blocks of 256,
 * each block as 32 lanes of 8 consecutive tokens (a lane's 8 summed in order, the 32 lane sums
 * by a halving tree: a warp's xor butterfly), the blocks summed in vocabulary order. The walk
 * finds the first block whose running sum passes the target, then in it the first lane (lane
 * sums added in order from the sum before the block), then in that lane the first token. Where
 * rounding leaves a level without a crossing, the last kept token of that block or lane is
 * taken (u rounded up to the total).
 *
 * The settings, in transformers' generate order: the repetition penalty rewrites the logits of
 * the row's counted tokens (z / p above 0, z * p below, in f32), then the weights exp((z' -
 * max) / T); top_k keeps z' at or above the k-th largest; top_p keeps the tokens whose order key
 * (the float's bits in ascending order) is at least a, the smallest key whose strictly larger
 * tokens' blocked weight sum S(a) is below top_p times the top-k total; min_p keeps weights of at
 * least min_p (the max's weight is exactly 1). S is the same blocked sum as the draw's, and it
 * never decreases as tokens join it (correctly rounded sums of non-negative terms are monotone),
 * so "S(key) < P" splits the keys once: the CPU finds a by bisection over the 32-bit keys, the
 * GPU by 4-bit digits, and both keep the same tokens. The draw is unchanged: one uniform a row,
 * so neutral settings pick exactly the tokens they always did. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../philox.h"
#include "cpu.h"

/* The sums must not be contracted into fused multiply-adds (the GPU kernel spells out its
 * roundings with __dmul_rn/__dadd_rn): the build compiles C in ISO mode, whose default is
 * -ffp-contract=off; this says it for compilers that honour the pragma. */
#pragma STDC FP_CONTRACT OFF

enum { SAMPLE_BLOCK = 256, SAMPLE_LANES = 32, SAMPLE_PER_LANE = SAMPLE_BLOCK / SAMPLE_LANES };

/* exp(x) for x <= 0 (0 below -708, for -inf and NaN too), from correctly rounded operations
 * only, so the CPU and the GPU get the same bits: x = k ln2 + r (|r| <= ln2/2, ln2 split in a
 * high part with trailing zeros and a low part), exp(r) by its Taylor polynomial of degree 12 in
 * Horner form (relative error below 2e-16), times 2^k built from the exponent bits. The same
 * function, operation for operation, is sample_exp in ops/cuda/sample.cu. */
static double sample_exp(double x) {
    if (!(x > -708.0)) return 0.0;
    double k = rint(x * 1.4426950408889634);
    double r = x - k * 6.93147180369123816490e-01;
    r = r - k * 1.90821492927058770002e-10;
    /* 1/12!, 1/11!, ..., 1/1!, 1/0!: literals (correctly rounded), not divisions a compiler folds */
    static const double c[13] = {2.08767569878681e-09, 2.505210838544172e-08, 2.755731922398589e-07,
                                 2.7557319223985893e-06, 2.48015873015873e-05, 0.0001984126984126984,
                                 0.001388888888888889,  0.008333333333333333,  0.041666666666666664,
                                 0.16666666666666666,   0.5,                   1.0,
                                 1.0};
    double p = c[0];
    for (int i = 1; i < 13; i++) {
        p = p * r;
        p = p + c[i];
    }
    uint64_t bits = (uint64_t)((int64_t)k + 1023) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

/* A row being sampled: logits z (v), the tokens to penalise (a bitmap, or NULL), and the filters
 * a token must pass to keep its weight: top-k's threshold thr, top-p's smallest order key, min-p's
 * smallest weight; the max m of the penalised logits, 1 / temperature; wk: each token's weight
 * under top-k alone once known (top-p's search re-reads it), else NULL. */
typedef struct {
    const float *z;
    int64_t v;
    const uint32_t *seen;
    float penalty, thr, m;
    uint32_t key_min;
    double w_min, inv_t;
    const double *wk;
} row_ctx;

/* Ascending uint order of floats (no NaN): ops/cuda/sample.cu's order_key */
static uint32_t order_key(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    return b & 0x80000000u ? ~b : b | 0x80000000u;
}

/* token j's logit after the repetition penalty (transformers': z < 0 ? z * p : z / p) */
static float logit(const row_ctx *c, int64_t j) {
    float x = c->z[j];
    if (c->seen && (c->seen[j >> 5] >> (j & 31) & 1u)) x = x < 0.0f ? x * c->penalty : x / c->penalty;
    return x;
}

/* token j's weight under top-k alone: exp((z' - m) / T) when z' >= thr, else 0; (z' - m) * (1 / T),
 * the reciprocal divided once (the GPU kernel's slow division path would spill) */
static double weight_k(const row_ctx *c, int64_t j, float x) {
    if (!(x >= c->thr)) return 0.0;
    return c->wk ? c->wk[j] : sample_exp(((double)x - (double)c->m) * c->inv_t);
}

/* whether token j passes every filter (its weight may still be 0: exp underflows) */
static bool kept(const row_ctx *c, int64_t j) {
    float x = logit(c, j);
    return x >= c->thr && order_key(x) >= c->key_min && (c->w_min == 0.0 || weight_k(c, j, x) >= c->w_min);
}

/* token j's weight: 0 unless it passes every filter */
static double weight(const row_ctx *c, int64_t j) {
    float x = logit(c, j);
    if (order_key(x) < c->key_min) return 0.0;
    double w = weight_k(c, j, x);
    return w >= c->w_min ? w : 0.0;
}

/* lane l of block b: its (up to) 8 tokens' weights summed in order */
static double lane_sum(const row_ctx *c, int64_t b, int l) {
    double s = 0.0;
    for (int i = 0; i < SAMPLE_PER_LANE; i++) {
        int64_t j = b * SAMPLE_BLOCK + l * SAMPLE_PER_LANE + i;
        if (j < c->v) s = s + weight(c, j);
    }
    return s;
}

/* block b: its 32 lane sums by a halving tree (lane i + lane i+h): a warp's xor butterfly */
static double block_sum(const row_ctx *c, int64_t b) {
    double s[SAMPLE_LANES];
    for (int l = 0; l < SAMPLE_LANES; l++) s[l] = lane_sum(c, b, l);
    for (int h = SAMPLE_LANES / 2; h > 0; h >>= 1)
        for (int i = 0; i < h; i++) s[i] = s[i] + s[i + h];
    return s[0];
}

/* the blocks' sums in vocabulary order; run (or NULL) gets the running sum after each */
static double row_total(const row_ctx *c, double *run) {
    double total = 0.0;
    for (int64_t b = 0, nb = (c->v + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK; b < nb; b++) {
        total = total + block_sum(c, b);
        if (run) run[b] = total;
    }
    return total;
}

/* the last kept token in [j0, j1) (there is one: its range has a positive weight sum) */
static int64_t last_kept(const row_ctx *c, int64_t j0, int64_t j1) {
    int64_t last = j0;
    for (int64_t j = j0; j < j1 && j < c->v; j++)
        if (kept(c, j)) last = j;
    return last;
}

/* The k-th largest of the penalised logits (k in 1..v), by quickselect on the scratch copy s. */
static float kth_largest(const row_ctx *c, float *s, int64_t k) {
    int64_t v = c->v;
    for (int64_t j = 0; j < v; j++) s[j] = logit(c, j);
    int64_t lo = 0, hi = v - 1, want = k - 1;
    while (lo < hi) {
        float pivot = s[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (s[i] > pivot) i++;
            while (s[j] < pivot) j--;
            if (i <= j) {
                float t = s[i];
                s[i] = s[j], s[j] = t;
                i++, j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return s[want];
}

/* top-p's smallest kept order key: the least key a with S(a) < top_p * (the top-k total), S(a) the
 * blocked sum of the tokens whose key exceeds a (every token's top-k weight cached in wk first) */
static uint32_t top_p_key(row_ctx *c, double *wk, float top_p) {
    for (int64_t j = 0; j < c->v; j++) wk[j] = weight_k(c, j, logit(c, j));
    c->wk = wk;
    c->key_min = 0;
    const double bound = (double)top_p * row_total(c, NULL);
    uint32_t lo = 0, hi = UINT32_MAX; /* S(UINT32_MAX) = 0 < bound: the answer is in [lo, hi] */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        c->key_min = mid + 1; /* S(mid): the keys above mid */
        if (row_total(c, NULL) < bound) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* The bitmap of the row's counted tokens: ids hist[0 .. len-1] in the vocabulary, but skip. */
static void mark_seen(uint32_t *seen, int64_t v, const int32_t *hist, int64_t len, int32_t skip) {
    memset(seen, 0, sizeof(uint32_t) * (size_t)((v + 31) / 32));
    for (int64_t t = 0; t < len; t++)
        if (hist[t] != skip && hist[t] >= 0 && hist[t] < v) seen[hist[t] >> 5] |= 1u << (hist[t] & 31);
}

/* Per-thread scratch, each part 8-byte aligned: the running sums (ceil(v / 256) doubles); top-k's
 * copy of the row (v floats); top-p's cached weights (v doubles); the penalty's bitmap (v bits). */
typedef struct {
    double *run, *wk;
    float *copy;
    uint32_t *seen;
} sample_scratch;

static size_t scratch_layout(const dfg_attrs_sample *a, int64_t v, bool penalise, void *base, sample_scratch *s) {
    size_t nb = (size_t)((v + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK), at = 0;
    char *p = base;
    if (s) s->run = (double *)(p + at);
    at += sizeof(double) * nb;
    if (s) s->copy = a->top_k > 0 ? (float *)(p + at) : NULL;
    if (a->top_k > 0) at += sizeof(float) * (size_t)((v + 1) / 2 * 2);
    if (s) s->wk = a->top_p > 0.0f && a->top_p < 1.0f ? (double *)(p + at) : NULL;
    if (a->top_p > 0.0f && a->top_p < 1.0f) at += sizeof(double) * (size_t)v;
    if (s) s->seen = penalise ? (uint32_t *)(p + at) : NULL;
    if (penalise) at += sizeof(uint32_t) * (size_t)((v + 63) / 64 * 2);
    return at;
}

/* Samples one row: its token, or -1 when the row holds a NaN; *logp the token's log-prob under
 * the distribution drawn from (log w - log total, in double; 0 when greedy). */
static int32_t sample_row(row_ctx *c, const dfg_attrs_sample *a, float u, const sample_scratch *s, double *logp) {
    const float *z = c->z;
    int64_t v = c->v, best = 0;
    *logp = 0.0;
    for (int64_t j = 0; j < v; j++)
        if (z[j] != z[j]) return -1;
    for (int64_t j = 1; j < v; j++)
        if (logit(c, j) > logit(c, best)) best = j;
    c->m = logit(c, best);
    if (!(a->temperature > 0.0f) || isinf(c->m)) return (int32_t)best; /* greedy; all -inf; an +inf max */
    c->inv_t = 1.0 / (double)a->temperature;
    if (a->top_k > 0 && a->top_k < v) c->thr = kth_largest(c, s->copy, a->top_k);
    if (s->wk) c->key_min = top_p_key(c, s->wk, a->top_p);
    if (a->min_p > 0.0f) c->w_min = (double)a->min_p;
    int64_t nb = (v + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK;
    double *run = s->run;
    double total = row_total(c, run);
    double target = (double)u * total; /* < total, and total >= 1 (the max's weight) */
    int64_t b = 0, pick = -1;
    while (b < nb - 1 && !(run[b] > target)) b++;
    double p = b ? run[b - 1] : 0.0;
    for (int l = 0; l < SAMPLE_LANES && pick < 0; l++) {
        double next = p + lane_sum(c, b, l);
        if (next > target) { /* lane l: its tokens in order from p */
            int64_t j0 = b * SAMPLE_BLOCK + l * SAMPLE_PER_LANE;
            for (int i = 0; i < SAMPLE_PER_LANE && j0 + i < v && pick < 0; i++)
                if ((p = p + weight(c, j0 + i)) > target) pick = j0 + i;
            if (pick < 0) pick = last_kept(c, j0, j0 + SAMPLE_PER_LANE);
        }
        p = next;
    }
    if (pick < 0) pick = last_kept(c, b * SAMPLE_BLOCK, (b + 1) * SAMPLE_BLOCK);
    *logp = ((double)logit(c, pick) - (double)c->m) * c->inv_t - log(total);
    return (int32_t)pick;
}

static bool penalises(const dfg_node *n) {
    float p = n->attr->sample.repetition_penalty;
    return n->n_in == 5 && p > 0.0f && p != 1.0f;
}

size_t dfg_cpu_scratch_sample(const dfg_node *n) {
    const dfg_shape xs = n->in[0]->shape;
    return scratch_layout(&n->attr->sample, xs.d[xs.rank - 1], penalises(n), NULL, NULL);
}

dfg_status dfg_cpu_sample(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape xs = n->in[0]->shape;
    const dfg_attrs_sample *a = &n->attr->sample;
    int64_t v = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / v;
    const float *logits = in[0];           /* (rows, V) */
    const int32_t *rng = in[1];            /* (4): key lo, key hi, counter lo, counter hi */
    const int32_t *row0 = n->n_in > 2 ? in[2] : NULL; /* () the batch index of row 0, or (rows) each row's */
    const bool per_row = row0 && rows > 1 && dfg_shape_numel(n->in[2]->shape) == rows;
    const bool penalise = penalises(n);
    const int32_t *hist = penalise ? in[3] : NULL; /* (rows, H) */
    const int64_t H = penalise ? n->in[3]->shape.d[1] : 0;
    const int32_t *len = penalise ? in[4] : NULL; /* () or (rows) */
    const bool len_per_row = penalise && dfg_shape_numel(n->in[4]->shape) == rows && rows > 1;
    int32_t *tok = out[0], *rng_out = out[1];
    float *logp = n->n_out > 2 ? out[2] : NULL; /* (rows) */
    uint32_t k0 = (uint32_t)rng[0], k1 = (uint32_t)rng[1];
    uint64_t ctr = (uint64_t)(uint32_t)rng[2] | ((uint64_t)(uint32_t)rng[3] << 32);
    if (ctx->scratch_per_thread < dfg_cpu_scratch_sample(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    sample_scratch s;
    scratch_layout(a, v, penalise, ctx->scratch, &s);
    for (int64_t r = 0; r < rows; r++) {
        int64_t row = per_row ? row0[r] : (row0 ? row0[0] : 0) + r;
        dfg_philox_ctr c = dfg_philox4x32(dfg_philox_row_ctr(ctr, (uint64_t)row), k0, k1);
        if (penalise) {
            int64_t l = len[len_per_row ? r : 0];
            mark_seen(s.seen, v, hist + r * H, l < 0 ? 0 : l > H ? H : l, a->history_skip);
        }
        row_ctx rc = {.z = logits + r * v, .v = v, .seen = s.seen, .penalty = a->repetition_penalty, .thr = -INFINITY};
        double lp;
        tok[r] = sample_row(&rc, a, dfg_philox_uniform(c.v[0]), &s, &lp);
        if (tok[r] < 0) return dfg_cpu_fail(ctx, n, DFG_ERR_NUMERIC, "row %lld of the logits holds a NaN", (long long)r);
        if (logp) logp[r] = (float)lp;
    }
    ctr++;
    rng_out[0] = (int32_t)k0, rng_out[1] = (int32_t)k1;
    rng_out[2] = (int32_t)(uint32_t)ctr, rng_out[3] = (int32_t)(uint32_t)(ctr >> 32);
    return DFG_OK;
}

dfg_status dfg_cpu_rng_advance(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const int32_t *rng = in[0]; /* (4): key lo, key hi, counter lo, counter hi */
    int32_t *rng_out = out[0];  /* (4), the same bytes */
    uint64_t ctr = ((uint64_t)(uint32_t)rng[2] | ((uint64_t)(uint32_t)rng[3] << 32)) + (uint64_t)n->attr->rng_advance.n;
    rng_out[0] = rng[0], rng_out[1] = rng[1];
    rng_out[2] = (int32_t)(uint32_t)ctr, rng_out[3] = (int32_t)(uint32_t)(ctr >> 32);
    return DFG_OK;
}
