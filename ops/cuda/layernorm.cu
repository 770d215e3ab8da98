// layernorm.cu - layer normalisation over the last axis: forward (y, mean, rstd) and backward
// (dx per row; dw, db reduced over rows).
//
// Rows are short in the models dfg trains (C = 768 .. 4096), so a warp takes a row when C <= 1024
// (8 rows per block, shuffles only, no barrier) and a block of 256 takes it otherwise. A row is
// read from global memory once per pass (sum, centred sum of squares, output); the later passes
// hit L1/L2. 16-byte loads and stores when C is a multiple of the vector and the pointers aligned.
//
// Precision, as the CPU reference: the forward's statistics are float (two passes, so the
// variance does not cancel) and y = (x - mean) * rstd * w + b in float. The backward's row sums
// and dx are computed in double, as the CPU does: dx = rstd * (dn - mean(dn) - norm * mean(dn *
// norm)) cancels when dx is small, and float there misses the 1e-5 tolerance; FP64 at half the
// FP32 rate (sm_80, sm_90) is still far above this memory-bound kernel's needs.
//
// dw and db are sums over rows in a fixed partition (the shape's only): partial sums of row splits
// go to DFG_CUDA_SCRATCH(layernorm_bwd) and are added in split order. The kernels are
// norm_rows.cuh's, shared with rmsnorm.cu (LN = true here: the centring and the bias).
#include "norm_rows.cuh"

// inputs x (..., C), w (C), b (C) -> y (..., C), mean (...) f32, rstd (...) f32
DFG_CUDA_LAUNCHER(layernorm) {
    const dfg_tensor *x = n->in[0];
    if (n->in[1]->dtype != x->dtype || n->in[2]->dtype != x->dtype || n->out[1]->dtype != DFG_F32 ||
        n->out[2]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "w and b must have x's dtype; mean and rstd must be f32");
    return norm_forward<true>(n, ctx, in[0], in[1], in[2], out[0], (float *)out[1], (float *)out[2]);
}

DFG_CUDA_SCRATCH(layernorm_bwd) { return norm_bwd_scratch<true>(n->in[1]); }

// inputs dy, x, w, mean, rstd -> dx, dw, db
DFG_CUDA_LAUNCHER(layernorm_bwd) {
    const dfg_tensor *x = n->in[1];
    if (n->in[0]->dtype != x->dtype || n->in[2]->dtype != x->dtype || n->in[3]->dtype != DFG_F32 ||
        n->in[4]->dtype != DFG_F32)
        return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "dy and w must have x's dtype; mean and rstd must be f32");
    return norm_backward<true>(n, ctx, x, in[0], in[1], in[2], (const float *)in[3], (const float *)in[4], out[0],
                               out[1], out[2]);
}
