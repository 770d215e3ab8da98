/* registry.c - the op table, generated from ops.def (see op.h), with the checks the compiler can
 * make of each row: a DIFF op names its gradient rule and no other op does. */
#include "op.h"

#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, cpu, scratch, cuda, cuda_scratch) \
    _Static_assert((DFG_GRAD_##gk == DFG_GRAD_DIFF) == !DFG_IS_NONE(grad),                                \
                   "ops.def: op " #E " must name a gradient rule exactly when it is DIFF");
#include "ops.def"
#undef X

const dfg_op_info dfg_ops[DFG_OP_COUNT] = {
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, cpu, scratch, cuda, cuda_scratch) \
    [DFG_OP_##E] = {name,                                                                                  \
                    nin,                                                                                   \
                    nout,                                                                                  \
                    DFG_GRAD_##gk,                                                                         \
                    dfg_infer_##infer,                                                                     \
                    DFG_FN_OR_NULL(dfg_grad_, grad),                                                       \
                    dfg_cost_##cost,                                                                       \
                    &dfg_attr_layout_##attrs,                                                              \
                    DFG_INPLACE_##inplace,                                                                 \
                    DFG_DTYPES_##dtypes,                                                                   \
                    DFG_RANDOM_##random,                                                                   \
                    DFG_MEM_##mem,                                                                         \
                    !DFG_IS_NONE(cuda)},
#define DFG_RANDOM_PURE false
#define DFG_RANDOM_RANDOM true
#include "ops.def"
#undef X
};
