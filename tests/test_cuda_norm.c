/* test_cuda_norm.c - the CUDA layernorm and softmax families (ops/cuda/layernorm.cu, softmax.cu)
 * against the CPU kernels (tests/cuda_harness.h): rows a warp takes (<= 1024) and rows a block
 * takes, lengths that are and are not multiples of the 16-byte vector, layernorm_bwd's dw/db and
 * rmsnorm_bwd's dw (ops/cuda/rmsnorm.cu) over many rows (split, partials in the scratch) and few;
 * then, outside the harness, the softmax ops
 * with the output taking an input's bytes (in place, as ops.def allows) and with pointers off
 * 16-byte alignment (the generic path on vector-friendly sizes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/dfg_ops.h"

typedef struct {
    dfg_shape x;
    int op; /* a dfg_op */
    float eps;
} norm_case;

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const norm_case *c = user;
    const int64_t C = c->x.d[c->x.rank - 1];
    dfg_tensor *x = dfg_input(g, "x", dt, c->x);
    dfg_node *n = NULL;
    switch (c->op) {
    case DFG_OP_LAYERNORM: {
        dfg_tensor *y = dfg_layernorm(g, x, dfg_input(g, "w", dt, DFG_SHAPE(C)), dfg_input(g, "b", dt, DFG_SHAPE(C)),
                                      c->eps);
        n = dfg_graph_status(g) ? NULL : y->producer;
        break;
    }
    case DFG_OP_LAYERNORM_BWD: {
        dfg_attrs a = {.layernorm = {c->eps}};
        dfg_tensor *in[5] = {dfg_input(g, "dy", dt, c->x), x, dfg_input(g, "w", dt, DFG_SHAPE(C)),
                             dfg_input(g, "mean", DFG_F32, cuda_rows_shape(c->x)),
                             dfg_input(g, "rstd", DFG_F32, cuda_rows_shape(c->x))};
        n = dfg_node_add(g, DFG_OP_LAYERNORM_BWD, in, 5, &a, 3);
        break;
    }
    case DFG_OP_RMSNORM: {
        dfg_tensor *y = dfg_rmsnorm(g, x, dfg_input(g, "w", dt, DFG_SHAPE(C)), c->eps);
        n = dfg_graph_status(g) ? NULL : y->producer;
        break;
    }
    case DFG_OP_RMSNORM_BWD: {
        dfg_tensor *in[4] = {dfg_input(g, "dy", dt, c->x), x, dfg_input(g, "w", dt, DFG_SHAPE(C)),
                             dfg_input(g, "rstd", DFG_F32, cuda_rows_shape(c->x))};
        n = dfg_node_add(g, DFG_OP_RMSNORM_BWD, in, 4, NULL, 2);
        break;
    }
    case DFG_OP_SOFTMAX: n = dfg_softmax(g, x)->producer; break;
    case DFG_OP_LOG_SOFTMAX: n = dfg_log_softmax(g, x)->producer; break;
    default: { /* the bwd ops take (dy, y) */
        dfg_tensor *y = dfg_op_out(g, (dfg_op)c->op, (dfg_tensor *[]){dfg_input(g, "dy", dt, c->x), x}, 2, NULL);
        n = dfg_graph_status(g) ? NULL : y->producer;
    }
    }
    return dfg_graph_status(g) ? NULL : n;
}

/* layernorm_bwd's saved statistics look like real ones: mean small, rstd positive */
static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const norm_case *c = user;
    (void)t;
    if (c->op == DFG_OP_LAYERNORM_BWD && slot == 3) dfg_test_fill_uniform(data, n, -0.5f, 0.5f);
    else if (c->op == DFG_OP_LAYERNORM_BWD && slot == 4) dfg_test_fill_uniform(data, n, 0.25f, 2.0f);
    else if (c->op == DFG_OP_RMSNORM_BWD && slot == 3) dfg_test_fill_uniform(data, n, 0.25f, 2.0f);
    else dfg_test_fill_uniform(data, n, -2.0f, 2.0f);
}

static void run(norm_case c) {
    char label[128], sx[64];
    snprintf(label, sizeof(label), "%s x%s eps %g", dfg_op_name(c.op), dfg_shape_str(c.x, sx, sizeof(sx)), c.eps);
    cuda_case k = {.label = label, .build = build, .user = &c, .fill = fill, .bf16 = true};
    cuda_check(&k);
}

/* ---------------------------------------------------------------- raw buffers: aliasing, alignment */
/* The f32 node of `c` on the CPU (each tensor its own buffer) and under the emulator with output 0
 * taking input `alias`'s bytes (-1: its own buffer) and every pointer `shift` bytes past a 16-byte
 * boundary; output 0 must agree within 1e-5. */
static void check_raw(norm_case c, int alias, size_t shift) {
    char label[160], sx[64];
    snprintf(label, sizeof(label), "%s x%s (raw: output over input %d, pointers +%zu bytes)", dfg_op_name(c.op),
             dfg_shape_str(c.x, sx, sizeof(sx)), alias, shift);
    dfg_program *p;
    dfg_node *n = cuda_node_alone(build, &c, DFG_F32, label, &p);
    if (!n) return;
    void *cin[8], *cout[8], *ein[8], *eout[8], *blocks[16];
    int nb = 0;
    for (int j = 0; j < n->n_in; j++) {
        size_t bytes = dfg_tensor_bytes(n->in[j]);
        cin[j] = malloc(bytes);
        fill(j, n->in[j], cin[j], dfg_tensor_numel(n->in[j]), &c);
        blocks[nb] = aligned_alloc(16, (bytes + shift + 15) / 16 * 16);
        ein[j] = (char *)blocks[nb++] + shift;
        memcpy(ein[j], cin[j], bytes);
    }
    for (int k = 0; k < n->n_out; k++) {
        size_t bytes = dfg_tensor_bytes(n->out[k]);
        cout[k] = malloc(bytes);
        dfg_test_poison(cout[k], bytes);
        if (k == 0 && alias >= 0) {
            eout[k] = ein[alias];
            continue;
        }
        blocks[nb] = aligned_alloc(16, (bytes + shift + 15) / 16 * 16);
        eout[k] = (char *)blocks[nb++] + shift;
        dfg_test_poison(eout[k], bytes);
    }
    cuda_run_cpu(label, n, cin, cout);
    const int flags = cuda_run_emulated(label, n, ein, eout, 132, 0);
    CHECK(flags == 0, "%s: CUDA failed or flagged a bad value (flags %d)", label, flags);
    const float *r = cout[0], *g = eout[0];
    int64_t cnt = dfg_tensor_numel(n->out[0]), bad = -1;
    for (int64_t i = 0; i < cnt && bad < 0; i++)
        if (!(fabsf(r[i] - g[i]) <= 1e-6f + 1e-5f * fabsf(r[i]))) bad = i;
    CHECK(bad < 0, "%s: element %lld: CPU %.9g, CUDA %.9g", label, (long long)bad, bad < 0 ? 0.0 : r[bad],
          bad < 0 ? 0.0 : g[bad]);
    for (int j = 0; j < n->n_in; j++) free(cin[j]);
    for (int k = 0; k < n->n_out; k++) free(cout[k]);
    for (int b = 0; b < nb; b++) free(blocks[b]);
    dfg_program_free(p);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_norm")) return DFG_TEST_SKIP;
    /* a warp per row up to 1024, a block beyond; vector-friendly and odd lengths */
    const dfg_shape shapes[] = {DFG_SHAPE(1),       DFG_SHAPE(1, 1),    DFG_SHAPE(3, 7),    DFG_SHAPE(5, 32),
                                DFG_SHAPE(9, 64),   DFG_SHAPE(17, 100), DFG_SHAPE(3, 768),  DFG_SHAPE(4, 1024),
                                DFG_SHAPE(3, 1025), DFG_SHAPE(2, 2048), DFG_SHAPE(2, 4099), DFG_SHAPE(2, 3, 40)};
    const int ops[] = {DFG_OP_LAYERNORM, DFG_OP_LAYERNORM_BWD, DFG_OP_SOFTMAX,
                       DFG_OP_LOG_SOFTMAX, DFG_OP_SOFTMAX_BWD, DFG_OP_LOG_SOFTMAX_BWD};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) run((norm_case){shapes[i], ops[o], 1e-5f});
    /* eps that matters; softmax over a long vocabulary row */
    run((norm_case){DFG_SHAPE(6, 48), DFG_OP_LAYERNORM, 0.5f});
    run((norm_case){DFG_SHAPE(5, 1030), DFG_OP_LAYERNORM, 3.0f});
    run((norm_case){DFG_SHAPE(2, 20000), DFG_OP_SOFTMAX, 0});
    run((norm_case){DFG_SHAPE(2, 20001), DFG_OP_LOG_SOFTMAX, 0});
    /* layernorm_bwd's dw, db: many rows over few column tiles (split, partials), and the reverse */
    const dfg_shape lb[] = {DFG_SHAPE(700, 33), DFG_SHAPE(64, 1025), DFG_SHAPE(300, 8), DFG_SHAPE(4, 3, 50, 12),
                            DFG_SHAPE(2000, 1)};
    for (size_t i = 0; i < sizeof(lb) / sizeof(lb[0]); i++) run((norm_case){lb[i], DFG_OP_LAYERNORM_BWD, 1e-5f});
    /* rmsnorm and rmsnorm_bwd: the shapes above; odd C (1, 7, 33, 770) over several row counts; a row
     * a block takes; dw over many rows (split, partials in the scratch) and few; eps that matters */
    const int rms_ops[] = {DFG_OP_RMSNORM, DFG_OP_RMSNORM_BWD};
    const dfg_shape rms[] = {DFG_SHAPE(7),         DFG_SHAPE(2000, 1),  DFG_SHAPE(1, 7),    DFG_SHAPE(300, 7),
                             DFG_SHAPE(33),        DFG_SHAPE(4, 33),    DFG_SHAPE(2, 9, 33), DFG_SHAPE(700, 33),
                             DFG_SHAPE(1, 770),    DFG_SHAPE(3, 770),   DFG_SHAPE(17, 770), DFG_SHAPE(64, 1025),
                             DFG_SHAPE(4, 3, 50, 12)};
    for (size_t o = 0; o < 2; o++) {
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) run((norm_case){shapes[i], rms_ops[o], 1e-5f});
        for (size_t i = 0; i < sizeof(rms) / sizeof(rms[0]); i++) run((norm_case){rms[i], rms_ops[o], 1e-6f});
    }
    run((norm_case){DFG_SHAPE(6, 48), DFG_OP_RMSNORM, 0.5f});
    run((norm_case){DFG_SHAPE(5, 1030), DFG_OP_RMSNORM, 3.0f});
    /* in place and misaligned (raw buffers) */
    const dfg_shape raw[] = {DFG_SHAPE(5, 64), DFG_SHAPE(3, 2048)};
    for (size_t i = 0; i < 2; i++) {
        check_raw((norm_case){raw[i], DFG_OP_SOFTMAX, 0}, 0, 0);
        check_raw((norm_case){raw[i], DFG_OP_LOG_SOFTMAX, 0}, 0, 0);
        check_raw((norm_case){raw[i], DFG_OP_SOFTMAX_BWD, 0}, 0, 0);
        check_raw((norm_case){raw[i], DFG_OP_SOFTMAX_BWD, 0}, 1, 0);
        check_raw((norm_case){raw[i], DFG_OP_LOG_SOFTMAX_BWD, 0}, 0, 0);
        check_raw((norm_case){raw[i], DFG_OP_LOG_SOFTMAX_BWD, 0}, 1, 0);
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) check_raw((norm_case){raw[i], ops[o], 1e-5f}, -1, 4);
        for (size_t o = 0; o < 2; o++) check_raw((norm_case){raw[i], rms_ops[o], 1e-5f}, -1, 4);
    }
    return cuda_test_end();
}
