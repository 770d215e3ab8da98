/* collective.c - the CPU kernels of the collectives (allreduce, all_gather, rank) over the
 * communicator in the context (MPI between processes, ops/comm.h). Without one (a single process)
 * the plan must have been built for world 1, and every collective is a copy. */
#include <string.h>

#include "../comm.h"
#include "cpu.h"

/* The communicator the node's world needs: NULL for world 1; a node built for W ranks in a run
 * of another size is refused (the runtime checks this before the first step too). */
static dfg_status comm_for(const dfg_node *n, dfg_cpu_ctx *ctx, dfg_comm **out) {
    int world = n->attr->collective.world, size = ctx->comm ? ctx->comm->size : 1;
    *out = world > 1 ? ctx->comm : NULL;
    if (world != size)
        return dfg_cpu_fail(ctx, n, DFG_ERR_STATE, "built for %d rank%s, running in %d process%s", world, world == 1 ? "" : "s", size,
                            size == 1 ? "" : "es");
    return DFG_OK;
}

static dfg_status failed(const dfg_node *n, dfg_cpu_ctx *ctx, dfg_status st, const char *why) {
    char what[160];
    dfg_coll_describe(n, what, sizeof(what));
    return dfg_cpu_fail(ctx, n, st, "%s: %s", what, why);
}

dfg_status dfg_cpu_allreduce(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    dfg_comm *c;
    dfg_status st = comm_for(n, ctx, &c);
    int op = n->attr->collective.op;
    for (int i = 0; !st && i < n->n_in; i++) {
        int64_t cnt = dfg_shape_numel(n->in[i]->shape); /* (any) f32: the CPU's dtype */
        if (out[i] != in[i]) memcpy(out[i], in[i], sizeof(float) * (size_t)cnt);
        if (!c) continue;
        char why[512] = "";
        st = c->allreduce(c, out[i], cnt, DFG_F32, op == DFG_COLL_MEAN ? DFG_COLL_SUM : op, NULL, why, sizeof(why));
        if (st) return failed(n, ctx, st, why);
        if (op == DFG_COLL_MEAN) {
            float *y = out[i], inv = 1.0f / (float)c->size;
            for (int64_t j = 0; j < cnt; j++) y[j] *= inv;
        }
    }
    return st;
}

dfg_status dfg_cpu_all_gather(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    dfg_comm *c;
    dfg_status st = comm_for(n, ctx, &c);
    if (st) return st;
    size_t bytes = dfg_tensor_bytes(n->in[0]);
    if (!c) {
        memcpy(out[0], in[0], bytes);
        return DFG_OK;
    }
    char why[512] = "";
    st = c->all_gather(c, in[0], out[0], bytes, NULL, why, sizeof(why));
    return st ? failed(n, ctx, st, why) : DFG_OK;
}

dfg_status dfg_cpu_rank(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)in;
    dfg_comm *c;
    dfg_status st = comm_for(n, ctx, &c);
    if (!st) *(int32_t *)out[0] = c ? c->rank : 0;
    return st;
}
