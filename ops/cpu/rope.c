/* rope.c - CPU rotary position embeddings (the formula: ops/rope.c), rounded step by step as
 * Hugging Face transformers computes them in f32:
 *   inv_freq[i] = 1.0f / theta^e   with e = (float)(2i) / (float)D, the power rounded to f32
 *   angle       = (float)pos * inv_freq[i]
 *   cos, sin    = cosf(angle), sinf(angle)
 * The power is taken in double and rounded once, so that this kernel and the CUDA one
 * (ops/cuda/rope.cu) agree on every inv_freq bit (powf's error differs between libraries, and
 * at position 4000 one ulp of inv_freq moves the angle by 5e-4). inverse rotates by -angle. */
#include <math.h>

#include "cpu.h"

/* 1 / theta^(2i/D) as transformers' f32 arithmetic gives it (the power correctly rounded) */
static float inv_freq(int64_t i, int64_t D, float theta) {
    float e = (float)(2 * i) / (float)D;
    return 1.0f / (float)pow((double)theta, (double)e);
}

/* inputs: x (..., H*D) f32, pos (...) i32 -> y (..., H*D) */
dfg_status dfg_cpu_rope(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_attrs_rope *a = &n->attr->rope;
    const dfg_shape xs = n->in[0]->shape;
    const int64_t C = xs.d[xs.rank - 1], D = a->head_dim, half = D / 2, H = C / D;
    const int64_t tokens = C ? dfg_shape_numel(xs) / C : 0;
    const float *x = in[0];       /* (tokens, H, D) */
    const int32_t *pos = in[1];   /* (tokens) */
    float *y = out[0];            /* (tokens, H, D) */
    const float sign = a->inverse ? -1.0f : 1.0f;
    const float theta = a->theta;
#pragma omp parallel for schedule(static) if (tokens * C > 32768)
    for (int64_t t = 0; t < tokens; t++) {
        const float p = (float)pos[t];
        const float *xt = x + t * C; /* (H, D) */
        float *yt = y + t * C;       /* (H, D) */
        for (int64_t i = 0; i < half; i++) {
            const float ang = p * inv_freq(i, D, theta);
            const float c = cosf(ang), s = sign * sinf(ang);
            for (int64_t h = 0; h < H; h++) {
                const float x1 = xt[h * D + i], x2 = xt[h * D + i + half];
                yt[h * D + i] = x1 * c - x2 * s;
                yt[h * D + i + half] = x2 * c + x1 * s;
            }
        }
    }
    return DFG_OK;
}
