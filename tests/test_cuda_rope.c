/* test_cuda_rope.c - the CUDA rotary embeddings (ops/cuda/rope.cu) against the CPU kernel
 * (tests/cuda_harness.h), in f32 and bf16: head dims 2, 8, 64 and 128 (and 6, 80: D/2 odd and
 * not a power of two), odd token and head counts, x of rank 1 to 4, theta of Llama 2 (1e4),
 * Llama 3 (5e5) and Qwen2 (1e6), forward and inverse (the gradient), positions drawn from every
 * range a run sees (a prompt's 0.., decoding offsets in the thousands, 4000 itself, long contexts
 * to 131071, where one ulp of the f32 angle is 0.008 rad), and a grid-stride walk over more
 * pairs than the grid has threads.
 *
 * Tolerances: in f32 the two kernels take the same rounding steps (inv_freq, the angle, cosf and
 * sinf, the rotation); a GPU's cosf/sinf (2 ulp) and FMA contraction differ from the CPU's by a
 * few 1e-7 of |x| <= 2, hence atol 2e-6 beside rtol 1e-5. In bf16 the kernel rounds once at the
 * end, so its output is within one bf16 ulp (2^-8 relative) of the CPU's f32 result on the same
 * bf16 inputs: rtol 2^-8 (the default 1e-2 would pass two roundings). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/dfg_ops.h"

typedef struct {
    dfg_shape x;     /* (..., H*D) */
    int head_dim;
    float theta;
    bool inverse;
    int32_t pos_hi;  /* positions drawn in [0, pos_hi), with edge values mixed in */
} rope_case;

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const rope_case *c = user;
    dfg_shape ps = c->x;
    ps.rank--;
    dfg_tensor *x = dfg_input(g, "x", dt, c->x), *pos = dfg_input(g, "pos", DFG_I32, ps), *y;
    if (!c->inverse) {
        y = dfg_rope(g, x, pos, c->head_dim, c->theta);
    } else {
        dfg_attrs a = {.rope = {.head_dim = c->head_dim, .theta = c->theta, .inverse = true}};
        y = dfg_op_out(g, DFG_OP_ROPE, (dfg_tensor *[]){x, pos}, 2, &a);
    }
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* x uniform in [-2, 2); positions uniform in [0, pos_hi) with 0, 1, 4000 and pos_hi - 1 mixed in */
static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const rope_case *c = user;
    (void)slot;
    if (cuda_fill_floats(t, data, n)) return;
    const int32_t edges[] = {0, 1, 4000, c->pos_hi - 1};
    for (int64_t i = 0; i < n; i++) {
        int k = dfg_test_int(0, 7);
        int32_t v = k < 4 ? edges[k] : dfg_test_int(0, c->pos_hi - 1);
        ((int32_t *)data)[i] = v < c->pos_hi ? v : c->pos_hi - 1;
    }
}

static void run(rope_case c) {
    char label[160], sx[64];
    snprintf(label, sizeof(label), "rope%s x%s head_dim %d theta %g positions < %d", c.inverse ? " inverse" : "",
             dfg_shape_str(c.x, sx, sizeof(sx)), c.head_dim, (double)c.theta, (int)c.pos_hi);
    cuda_case k = {.label = label, .build = build, .user = &c, .fill = fill, .bf16 = true, .atol = 2e-6,
                   .rtol_bf16 = 1.0 / 256.0, .atol_bf16 = 1e-5};
    cuda_check(&k);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_rope")) return DFG_TEST_SKIP;
    const int dims[] = {2, 8, 64, 128};
    const float thetas[] = {10000.0f, 500000.0f, 1000000.0f};
    const int32_t pos_his[] = {8, 4096, 131072};
    /* (B, T, H*D) with odd T and H, forward and inverse, every head dim, theta and position range */
    for (size_t d = 0; d < sizeof(dims) / sizeof(dims[0]); d++)
        for (int inv = 0; inv < 2; inv++) {
            const int64_t D = dims[d];
            run((rope_case){DFG_SHAPE(2, 7, 3 * D), dims[d], thetas[d % 3], inv, pos_his[(d + inv) % 3]});
            run((rope_case){DFG_SHAPE(1, 5, 5 * D), dims[d], thetas[(d + 1) % 3], inv, 4096});
            run((rope_case){DFG_SHAPE(3, 1, 1 * D), dims[d], thetas[(d + 2) % 3], inv, 131072});
        }
    /* D/2 odd and not a power of two; x of rank 1 (one token), 2 and 4 */
    run((rope_case){DFG_SHAPE(3, 9, 7 * 6), 6, 10000.0f, false, 4096});
    run((rope_case){DFG_SHAPE(5, 3 * 80), 80, 1000000.0f, true, 4096});
    run((rope_case){DFG_SHAPE(9 * 64), 64, 10000.0f, false, 4096});
    run((rope_case){DFG_SHAPE(2, 3, 5, 3 * 8), 8, 10000.0f, true, 131072});
    /* more (token, head, pair)s than the grid's 132 * 8 blocks of 256 threads: the grid-stride walk */
    run((rope_case){DFG_SHAPE(3, 101, 15 * 128), 128, 1000000.0f, false, 4096});
    return cuda_test_end();
}
