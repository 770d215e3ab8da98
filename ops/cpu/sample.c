/* sample.c - CPU categorical sampling with temperature and top-k, from the Philox stream.
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
 * taken (u rounded up to the total). */
#include <math.h>
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

/* A row being sampled: logits z (v), the kept threshold thr, the max m, 1 / temperature. */
typedef struct {
    const float *z;
    int64_t v;
    float thr, m;
    double inv_t;
} row_ctx;

/* token j's weight: exp((z - m) / T) when kept (z >= thr), else 0; (z - m) * (1 / T), the
 * reciprocal divided once (the GPU kernel's slow division path would spill) */
static double weight(const row_ctx *c, int64_t j) {
    if (!(c->z[j] >= c->thr)) return 0.0;
    return sample_exp(((double)c->z[j] - (double)c->m) * c->inv_t);
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

/* the last kept token in [j0, j1) (there is one: its range has a positive weight sum) */
static int64_t last_kept(const row_ctx *c, int64_t j0, int64_t j1) {
    int64_t last = j0;
    for (int64_t j = j0; j < j1 && j < c->v; j++)
        if (c->z[j] >= c->thr) last = j;
    return last;
}

/* The k-th largest of x[0..v) (k in 1..v), by quickselect on the scratch copy s. */
static float kth_largest(const float *x, float *s, int64_t v, int64_t k) {
    memcpy(s, x, sizeof(float) * (size_t)v);
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

/* Returns the sampled token, or -1 when the row holds a NaN. scratch: v floats (top-k), then
 * the running sums after each block (ceil(v / 256) doubles). */
static int32_t sample_row(const float *z, int64_t v, float temp, int top_k, float u, float *scratch) {
    int64_t best = 0;
    for (int64_t j = 0; j < v; j++) {
        if (z[j] != z[j]) return -1;
        if (z[j] > z[best]) best = j;
    }
    if (!(temp > 0.0f) || isinf(z[best])) return (int32_t)best; /* greedy; all -inf; an +inf max */
    row_ctx c = {z, v, -INFINITY, z[best], 1.0 / (double)temp};
    if (top_k > 0 && top_k < v) c.thr = kth_largest(z, scratch, v, top_k);
    int64_t nb = (v + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK;
    double *run = (double *)(scratch + (v + 1) / 2 * 2); /* 8-byte aligned after v floats */
    double total = 0.0;
    for (int64_t b = 0; b < nb; b++) run[b] = total = total + block_sum(&c, b);
    double target = (double)u * total; /* < total, and total >= 1 (the max's weight) */
    int64_t b = 0;
    while (b < nb - 1 && !(run[b] > target)) b++;
    double p = b ? run[b - 1] : 0.0;
    for (int l = 0; l < SAMPLE_LANES; l++) {
        double next = p + lane_sum(&c, b, l);
        if (next > target) { /* lane l: its tokens in order from p */
            int64_t j0 = b * SAMPLE_BLOCK + l * SAMPLE_PER_LANE;
            for (int i = 0; i < SAMPLE_PER_LANE && j0 + i < v; i++) {
                p = p + weight(&c, j0 + i);
                if (p > target) return (int32_t)(j0 + i);
            }
            return (int32_t)last_kept(&c, j0, j0 + SAMPLE_PER_LANE);
        }
        p = next;
    }
    return (int32_t)last_kept(&c, b * SAMPLE_BLOCK, (b + 1) * SAMPLE_BLOCK);
}

/* The row's logits for top-k selection, and the running sums over its blocks. */
size_t dfg_cpu_scratch_sample(const dfg_node *n) {
    const dfg_shape xs = n->in[0]->shape;
    int64_t v = xs.d[xs.rank - 1];
    return sizeof(float) * (size_t)((v + 1) / 2 * 2) + sizeof(double) * (size_t)((v + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK);
}

dfg_status dfg_cpu_sample(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape xs = n->in[0]->shape;
    int64_t v = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / v;
    const float *logits = in[0];           /* (rows, V) */
    const int32_t *rng = in[1];            /* (4): key lo, key hi, counter lo, counter hi */
    const int32_t *row0 = n->n_in > 2 ? in[2] : NULL; /* () the batch index of row 0, or (rows) each row's */
    const bool per_row = row0 && rows > 1 && dfg_shape_numel(n->in[2]->shape) == rows;
    int32_t *tok = out[0], *rng_out = out[1];
    uint32_t k0 = (uint32_t)rng[0], k1 = (uint32_t)rng[1];
    uint64_t ctr = (uint64_t)(uint32_t)rng[2] | ((uint64_t)(uint32_t)rng[3] << 32);
    if (ctx->scratch_per_thread < dfg_cpu_scratch_sample(n))
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    for (int64_t r = 0; r < rows; r++) {
        int64_t row = per_row ? row0[r] : (row0 ? row0[0] : 0) + r;
        dfg_philox_ctr c = dfg_philox4x32(dfg_philox_row_ctr(ctr, (uint64_t)row), k0, k1);
        tok[r] = sample_row(logits + r * v, v, n->attr->sample.temperature, n->attr->sample.top_k,
                            dfg_philox_uniform(c.v[0]), ctx->scratch);
        if (tok[r] < 0) return dfg_cpu_fail(ctx, n, DFG_ERR_NUMERIC, "row %lld of the logits holds a NaN", (long long)r);
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
