/* bias_gelu.c - CPU gelu(x + bias) and its backward (tanh approximation, as GPT-2). */
#include <math.h>

#include "cpu.h"
#include "fastmath.h"

#define DFG_GELU_K 0.7978845608028654f /* sqrt(2/pi) */

dfg_status dfg_cpu_bias_gelu(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[0]->shape;
    int64_t c = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / c;
    const float *x = in[0], *b = in[1]; /* (rows, N), (N) */
    float *y = out[0];                  /* (rows, N) */
#pragma omp parallel for schedule(static) if (rows * c > 32768)
    for (int64_t r = 0; r < rows; r++)
#pragma omp simd
        for (int64_t j = 0; j < c; j++) {
            float u = x[r * c + j] + b[j];
            y[r * c + j] = 0.5f * u * (1.0f + dfg_tanh_f32(DFG_GELU_K * (u + 0.044715f * u * u * u)));
        }
    return DFG_OK;
}

dfg_status dfg_cpu_bias_gelu_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape xs = n->in[1]->shape;
    int64_t c = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / c;
    const float *dy = in[0], *x = in[1], *b = in[2];
    float *du = out[0];
#pragma omp parallel for schedule(static) if (rows * c > 32768)
    for (int64_t r = 0; r < rows; r++)
#pragma omp simd
        for (int64_t j = 0; j < c; j++) {
            float u = x[r * c + j] + b[j], t = dfg_tanh_f32(DFG_GELU_K * (u + 0.044715f * u * u * u));
            float dt = DFG_GELU_K * (1.0f + 3.0f * 0.044715f * u * u);
            du[r * c + j] = dy[r * c + j] * (0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * dt);
        }
    return DFG_OK;
}
