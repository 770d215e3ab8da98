/* registry.c - the op table, generated from ops.def (see op.h), with the checks the compiler can
 * make of each row: a DIFF op names its gradient rule and no other op does; the flags column is 0
 * or an | of its words; the cuda column is yes or none. */
#include "op.h"

/* the flags column's words, only while this file reads ops.def */
#if defined(GEMM) || defined(COLLECTIVE) || defined(REMAKE)
#error "a macro is named like a word of ops.def's flags column"
#endif
#define GEMM DFG_OPF_GEMM
#define COLLECTIVE DFG_OPF_COLLECTIVE
#define REMAKE DFG_OPF_REMAKE
#define DFG_OPF_ALL (DFG_OPF_GEMM | DFG_OPF_COLLECTIVE | DFG_OPF_REMAKE)
#define DFG_RANDOM_PURE false
#define DFG_RANDOM_RANDOM true
#define DFG_CUDA_yes true
#define DFG_CUDA_none false

#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) \
    _Static_assert((DFG_GRAD_##gk == DFG_GRAD_DIFF) == !DFG_IS_NONE(grad),                                \
                   "ops.def: op " #E " must name a gradient rule exactly when it is DIFF");               \
    _Static_assert(((flags) & ~DFG_OPF_ALL) == 0, "ops.def: op " #E ": unknown flags");
#include "ops.def"
#undef X

const dfg_op_info dfg_ops[DFG_OP_COUNT] = {
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) \
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
                    (flags),                                                                               \
                    DFG_CUDA_##cuda /* yes or none: another word does not compile */},
#include "ops.def"
#undef X
};

#undef GEMM
#undef COLLECTIVE
#undef REMAKE
