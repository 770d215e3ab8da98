/* registry.c - the op table, generated from ops.def (see op.h). */
#include "op.h"

const dfg_op_info dfg_ops[DFG_OP_COUNT] = {
#define X(E, nm, nin, nout, gk, infer, grad, cost, cpu) \
    [DFG_OP_##E] = {nm, nin, nout, DFG_GRAD_##gk, infer, grad, cost},
#include "ops.def"
#undef X
};
