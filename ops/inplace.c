/* inplace.c - which input's bytes an output may take, from the op's inplace rule in ops.def.
 * The planner uses it to place an output in the buffer of an input that dies at that node.
 * Every kernel of these ops (CPU and CUDA) reads each element of that input before it writes the
 * same element of the output, so out == in gives the same result. The input must have the
 * output's shape and byte size (a broadcast input never qualifies). */
#include "op.h"

static bool same_layout(const dfg_tensor *x, const dfg_tensor *y) {
    return dfg_shape_equal(x->shape, y->shape) && dfg_dtype_size(x->dtype) == dfg_dtype_size(y->dtype);
}

/* The first of the inputs listed that can share output k's bytes, or -1. */
static int first_fit(const dfg_node *n, int k, int a, int b) {
    if (a >= 0 && a < n->n_in && same_layout(n->in[a], n->out[k])) return a;
    if (b >= 0 && b < n->n_in && same_layout(n->in[b], n->out[k])) return b;
    return -1;
}

int dfg_op_inplace_input(const dfg_node *n, int k) {
    if (k < 0 || k >= n->n_out) return -1;
    switch (dfg_ops[n->op].inplace) {
    case DFG_INPLACE_IN0: return k == 0 ? first_fit(n, 0, 0, -1) : -1;
    case DFG_INPLACE_IN01: return k == 0 ? first_fit(n, 0, 0, 1) : -1;
    case DFG_INPLACE_IN12: return k == 0 ? first_fit(n, 0, 1, 2) : -1;
    case DFG_INPLACE_EACH: return k >= 1 ? first_fit(n, k, k - 1, -1) : -1; /* every input is read first */
    case DFG_INPLACE_NONE: return -1;
    }
    return -1;
}
