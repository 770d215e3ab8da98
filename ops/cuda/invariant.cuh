// invariant.cuh - the batch-invariant kernels' entry points (invariant.cu), for the launchers that
// hand over to them when the plan is batch-invariant (ctx->invariant): matmul.cu, attention.cu,
// attention_prefix.cu, attention_decode.cu, attention_shared.cu and logprob.cu's chunk logits.
#ifndef DFG_CUDA_INVARIANT_CUH
#define DFG_CUDA_INVARIANT_CUH

#include "common.cuh"

// A matmul node with A not transposed: every element in invariant.cu's order.
extern "C" dfg_status DFG_CUDA_FN(inv_matmul)(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx);
// attention, attention_prefix, attention_cached or attention_shared_cached (forward): one query at a
// time, its keys in order.
extern "C" dfg_status DFG_CUDA_FN(inv_attention)(const dfg_node *n, void *const *in, void *const *out,
                                                 dfg_cuda_ctx *ctx);
// ws (rc, vc) f32 = h[r0 .. r0+rc) @ W[v0 .. v0+vc)^T (W (V, C), tb) or h @ W[:, v0 ..] (W (C, V)): the
// matmul's element order, rounded through dt (h's and W's dtype) as a matmul's output would be.
extern "C" dfg_status DFG_CUDA_FN(inv_chunk_logits)(dfg_cuda_ctx *ctx, const dfg_node *n, const void *h, const void *w,
                                                    dfg_dtype dt, bool tb, int64_t c, int64_t v, int64_t r0, int64_t rc,
                                                    int64_t v0, int64_t vc, float *ws);

#endif
