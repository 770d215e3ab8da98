/* nn_dp.c - data parallel with the DSL's collectives: the gradient all-reduce in buckets, each
 * on the last repeat of its stage (the last micro-batch), issued as soon as its gradients are
 * final (dfg_allreduce_last). */
#include "dfg_nn.h"

dfg_status dfg_nn_allreduce_grads(dfg_graph *g, dfg_tensor **grads, int n, int world, int64_t bucket_bytes) {
    if (!g || !grads || n < 0) return DFG_ERR_ARG;
    if (world <= 1) return dfg_graph_status(g);
    if (bucket_bytes <= 0) bucket_bytes = DFG_NN_BUCKET_BYTES;
    /* from the last parameter back: each bucket is one node holding [first, end) */
    for (int end = n; end > 0 && !dfg_graph_status(g);) {
        int first = end - 1;
        int64_t bytes = (int64_t)dfg_tensor_bytes(grads[first]);
        while (first > 0 && bytes + (int64_t)dfg_tensor_bytes(grads[first - 1]) <= bucket_bytes)
            bytes += (int64_t)dfg_tensor_bytes(grads[--first]);
        dfg_allreduce_last(g, grads + first, end - first, DFG_COLL_MEAN, world);
        end = first;
    }
    return dfg_graph_status(g);
}
