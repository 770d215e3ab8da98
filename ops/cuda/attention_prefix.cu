// attention_prefix.cu - causal attention of n = P*G sequences that continue a shared prefix
// (ops/attention_prefix.c): the G sequences of group p all see prefix p's Tp keys and values,
// then their own; a query at position i sees keys 0 .. Tp + i of that extended sequence.
//
// The kernels are attention.cu's tiled ones (included below, without attention.cu's launchers):
// their key rows come from the prefix tensor for j < Tp and from the sequence's own fused qkv
// after it. The backward's dK/dV kernel runs twice: over each sequence's own key tiles, and over
// each (prefix, head, key tile) walking the group's G sequences in order, so the prefix's key and
// value gradients are summed over the group deterministically with no atomics and no scratch
// beyond the backward's delta rows. The prefix's query columns get zeros. With left-padded prefixes
// (start (P)) a sequence's queries see its prefix's keys from start on (attention.cu's padding).
#define DFG_ATTENTION_ENGINE_ONLY
#include "attention.cu"

// inputs qkv (n, Tc, 3C), prefix (P, Tp, 3C) [, start (P)] -> y (n, Tc, C), lse (n, H, Tc)
DFG_CUDA_LAUNCHER(attention_prefix) {
    if (ctx->invariant) return DFG_CUDA_FN(inv_attention)(n, in, out, ctx); // one query at a time (invariant.cu)
    const att_geom g = att_geometry(n, in, 0, 1, 2, ctx);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T,
                            return att_forward<T>(n, ctx, (T *)out[0], (float *)out[1], (const T *)in[0],
                                                  (const T *)in[1], g));
}

DFG_CUDA_SCRATCH(attention_prefix_bwd) { return att_backward_scratch(n->in[1], n->attr->attention.n_head); }

// inputs dy (n, Tc, C), qkv (n, Tc, 3C), prefix (P, Tp, 3C), y (n, Tc, C), lse (n, H, Tc)
//   [, start (P)] -> dqkv (n, Tc, 3C), dprefix (P, Tp, 3C)
DFG_CUDA_LAUNCHER(attention_prefix_bwd) {
    const att_geom g = att_geometry(n, in, 1, 2, 5, ctx);
    DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[1], T,
                            return att_backward<T>(n, ctx, (T *)out[0], (T *)out[1], (const T *)in[0], (const T *)in[1],
                                                   (const T *)in[2], (const T *)in[3], (const float *)in[4], g));
}
