// rmsnorm.cu - RMSNorm over the last axis (Llama, Qwen): forward (y, rstd) and backward (dx per
// row; dw reduced over rows). The same layout as layernorm.cu, less the centring and the bias.
//
// A warp takes a row when C <= 1024 (8 rows per block, shuffles only, no barrier) and a block of
// 256 takes it otherwise. A row is read from global memory once per pass (sum of squares, output);
// the second pass hits L1/L2. 16-byte loads and stores when C is a multiple of the vector and the
// pointers are aligned.
//
// Precision, as Hugging Face's LlamaRMSNorm and the CPU reference: the sum of squares and
// rstd = 1 / sqrt(mean(x^2) + eps) are float, y = w * (x * rstd) is float, rounded once to the
// output dtype (bf16: one rounding, where HF rounds x * rstd to bf16 before the weight; the CPU
// reference, which the tests hold this to, computes in f32). The backward's row sum and dx are
// double, as the CPU's and layernorm.cu's: dx = rstd * (dn - norm * mean(dn * norm)) cancels
// when dx is small.
//
// dw is a sum over rows in a fixed partition (the shape's only): partial sums of row splits go to
// DFG_CUDA_SCRATCH(rmsnorm_bwd) and are added in split order. The kernels are norm_rows.cuh's,
// shared with layernorm.cu (LN = false here: no centring, no bias).
#include "norm_rows.cuh"

// inputs x (..., C), w (C) -> y (..., C), rstd (...) f32
DFG_CUDA_LAUNCHER(rmsnorm) {
    const dfg_tensor *x = n->in[0];
    if (n->in[1]->dtype != x->dtype || n->out[0]->dtype != x->dtype || n->out[1]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "w and y must have x's dtype; rstd must be f32");
    return norm_forward<false>(n, ctx, in[0], in[1], nullptr, out[0], nullptr, (float *)out[1]);
}

DFG_CUDA_SCRATCH(rmsnorm_bwd) { return norm_bwd_scratch<false>(n->in[1]); }

// inputs dy, x (..., C), w (C), rstd (...) f32 -> dx (..., C), dw (C)
DFG_CUDA_LAUNCHER(rmsnorm_bwd) {
    const dfg_tensor *x = n->in[1];
    if (n->in[0]->dtype != x->dtype || n->in[2]->dtype != x->dtype || n->in[3]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "dy and w must have x's dtype; rstd must be f32");
    return norm_backward<false>(n, ctx, x, in[0], in[1], in[2], nullptr, (const float *)in[3], out[0], out[1],
                                nullptr);
}
