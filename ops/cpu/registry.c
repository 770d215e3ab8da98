/* registry.c - the CPU kernel table, generated from ops.def, and shared kernel helpers. */
#include <stdio.h>

#include "cpu.h"

const dfg_cpu_fn dfg_cpu_kernels[DFG_OP_COUNT] = {
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) [DFG_OP_##E] = dfg_cpu_##kernel,
#include "../ops.def"
#undef X
};

static size_t (*const scratch_fns[DFG_OP_COUNT])(const dfg_node *n) = {
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) [DFG_OP_##E] = DFG_FN_OR_NULL(dfg_cpu_scratch_, scratch),
#include "../ops.def"
#undef X
};

size_t dfg_cpu_scratch_bytes(const dfg_node *n) { return scratch_fns[n->op] ? scratch_fns[n->op](n) : 0; }

dfg_status dfg_cpu_fail(dfg_cpu_ctx *ctx, const dfg_node *n, dfg_status s, const char *fmt, ...) {
    if (ctx->err && ctx->err_len) {
        int k = snprintf(ctx->err, ctx->err_len, "%s '%s': ", dfg_op_name(n->op), n->name);
        if (k >= 0 && (size_t)k < ctx->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ctx->err + k, ctx->err_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return s;
}

void dfg_bcast_strides(dfg_shape out, dfg_shape in, int64_t *strides) {
    int64_t s = 1;
    for (int d = out.rank - 1; d >= 0; d--) {
        int id = in.rank - out.rank + d;
        int64_t dim = id >= 0 ? in.d[id] : 1;
        strides[d] = dim == 1 ? 0 : s;
        s *= dim;
    }
}

void dfg_split_axis(dfg_shape s, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = 1, *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s.d[i];
    *len = s.d[axis];
    for (int i = axis + 1; i < s.rank; i++) *inner *= s.d[i];
}
