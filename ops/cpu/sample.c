/* sample.c - CPU categorical sampling with temperature and top-k, from the Philox stream.
 * Row r of a call draws u = uniform(philox(key, {counter, r})) and walks the row's
 * probabilities in vocabulary order until their running sum passes u; the call then advances
 * the counter by one. The CUDA kernel makes the same draws, so both pick the same tokens. */
#include <math.h>
#include <string.h>

#include "../philox.h"
#include "cpu.h"

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

/* Returns the sampled token, or -1 when the row holds a NaN. */
static int32_t sample_row(const float *z, int64_t v, float temp, int top_k, float u, float *scratch) {
    int64_t best = 0;
    for (int64_t j = 0; j < v; j++) {
        if (z[j] != z[j]) return -1;
        if (z[j] > z[best]) best = j;
    }
    if (!(temp > 0.0f) || z[best] == -INFINITY) return (int32_t)best;
    float thr = -INFINITY;
    if (top_k > 0 && top_k < v) thr = kth_largest(z, scratch, v, top_k);
    double m = z[best], total = 0.0;
    for (int64_t j = 0; j < v; j++)
        if (z[j] >= thr) total += exp(((double)z[j] - m) / temp);
    double target = (double)u * total, run = 0.0;
    int64_t last = best;
    for (int64_t j = 0; j < v; j++) {
        if (z[j] < thr) continue;
        run += exp(((double)z[j] - m) / temp);
        last = j;
        if (run > target) return (int32_t)j;
    }
    return (int32_t)last; /* u rounded up to the total: the last kept token */
}

/* The row's scaled logits, for top-k selection. */
size_t dfg_cpu_scratch_sample(const dfg_node *n) {
    const dfg_shape xs = n->in[0]->shape;
    return sizeof(float) * (size_t)xs.d[xs.rank - 1];
}

dfg_status dfg_cpu_sample(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_shape xs = n->in[0]->shape;
    int64_t v = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / v;
    const float *logits = in[0];           /* (rows, V) */
    const int32_t *rng = in[1];            /* (4): key lo, key hi, counter lo, counter hi */
    int32_t *tok = out[0], *rng_out = out[1];
    uint32_t k0 = (uint32_t)rng[0], k1 = (uint32_t)rng[1];
    uint64_t ctr = (uint64_t)(uint32_t)rng[2] | ((uint64_t)(uint32_t)rng[3] << 32);
    if (ctx->scratch_per_thread < sizeof(float) * (size_t)v)
        return dfg_cpu_fail(ctx, n, DFG_ERR_RUNTIME, "scratch of %zu bytes is too small", ctx->scratch_per_thread);
    for (int64_t r = 0; r < rows; r++) {
        dfg_philox_ctr c = dfg_philox4x32(dfg_philox_row_ctr(ctr, (uint64_t)r), k0, k1);
        tok[r] = sample_row(logits + r * v, v, n->attr->sample.temperature, n->attr->sample.top_k,
                            dfg_philox_uniform(c.v[0]), ctx->scratch);
        if (tok[r] < 0) return dfg_cpu_fail(ctx, n, DFG_ERR_NUMERIC, "row %lld of the logits holds a NaN", (long long)r);
    }
    ctr++;
    rng_out[0] = (int32_t)k0, rng_out[1] = (int32_t)k1;
    rng_out[2] = (int32_t)(uint32_t)ctr, rng_out[3] = (int32_t)(uint32_t)(ctr >> 32);
    return DFG_OK;
}
