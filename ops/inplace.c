/* inplace.c - which ops may write their output over an input's bytes. The planner uses it to
 * place an output in the buffer of an input that dies at that node. Every kernel of these ops
 * (CPU here, CUDA later) reads each element of that input before it writes the same element of
 * the output, so out == in gives the same result. The input must have the output's shape and
 * byte size (a broadcast input never qualifies). */
#include "op.h"

static bool same_layout(const dfg_tensor *x, const dfg_tensor *y) {
    return dfg_shape_equal(x->shape, y->shape) && dfg_dtype_size(x->dtype) == dfg_dtype_size(y->dtype);
}

/* The first of the inputs listed that can share output 0's bytes, or -1. */
static int first_fit(const dfg_node *n, int a, int b) {
    if (a >= 0 && a < n->n_in && same_layout(n->in[a], n->out[0])) return a;
    if (b >= 0 && b < n->n_in && same_layout(n->in[b], n->out[0])) return b;
    return -1;
}

int dfg_op_inplace_input(const dfg_node *n, int k) {
    if (n->op == DFG_OP_CLIP_GRAD_NORM) /* output 1+i is input i scaled: every input is read (for the
                                         * norm) before any output is written */
        return k >= 1 && k - 1 < n->n_in && same_layout(n->in[k - 1], n->out[k]) ? k - 1 : -1;
    if (k != 0) return -1;
    switch (n->op) {
    case DFG_OP_ADD: case DFG_OP_SUB: case DFG_OP_MUL: case DFG_OP_DIV: case DFG_OP_MINIMUM:
    case DFG_OP_MAXIMUM: case DFG_OP_EQUAL:
        return first_fit(n, 0, 1);
    case DFG_OP_SCALE: case DFG_OP_EXP: case DFG_OP_LOG: case DFG_OP_NEG: case DFG_OP_SQRT: case DFG_OP_CLAMP:
    case DFG_OP_GELU: case DFG_OP_SOFTMAX: case DFG_OP_LOG_SOFTMAX: case DFG_OP_BIAS_ADD:
        return first_fit(n, 0, -1);
    case DFG_OP_GELU_BWD: case DFG_OP_SOFTMAX_BWD: case DFG_OP_LOG_SOFTMAX_BWD:
        return first_fit(n, 0, 1);
    case DFG_OP_WHERE:
        return first_fit(n, 1, 2);
    default:
        return -1;
    }
}
