/* quantile.h - what the quantile kernels of every backend share (ops/reduce.c has the op): the
 * order-preserving map of an f32 onto a u32 key (a binary search over keys is then a search
 * over values), and torch.quantile's rank and interpolation (in float32, as torch does for a
 * float32 tensor). Plain C, usable from CUDA. */
#ifndef DFG_QUANTILE_H
#define DFG_QUANTILE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DFG_QHD __host__ __device__ __forceinline__
#else
#define DFG_QHD static inline
#endif

/* Keys sort as the floats do: negative values flipped whole, non-negative ones above them. */
DFG_QHD uint32_t dfg_quantile_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

DFG_QHD float dfg_quantile_value(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* torch.quantile of a float32 tensor over n sorted values: the value at rank q (n - 1), linearly
 * interpolated between the ranks lo and lo + 1 with weight w (w = 0: lo alone). The rank is
 * computed in float32, as torch does for a float32 input (q becomes a float32 scalar): with
 * q = 0.8f and n = 21 it is 16 exactly, where the same product in double, 16.00000024, would
 * interpolate a hair past rank 16 and drop the value at the threshold from a ">= threshold" mask. */
DFG_QHD void dfg_quantile_rank(int64_t n, float q, int64_t *lo, float *w) {
    const float pos = q * (float)(n - 1);
    const float f = floorf(pos);
    *lo = (int64_t)f;
    *w = pos - f;
    if (*lo >= n - 1) *lo = n - 1, *w = 0.0f;
    if (*lo < 0) *lo = 0, *w = 0.0f;
}

/* lerp as torch computes it for float32: exact at both ends. Each operation rounded on its own:
 * the host C is compiled without contraction (ISO C11), and on a GPU the explicit _rn intrinsics
 * keep nvcc from fusing a + w (b - a) into one FMA, which would differ from the CPU in the last bit. */
#ifdef __CUDA_ARCH__
#define DFG_Q_ADD(x, y) __fadd_rn((x), (y))
#define DFG_Q_SUB(x, y) __fsub_rn((x), (y))
#define DFG_Q_MUL(x, y) __fmul_rn((x), (y))
#else
#define DFG_Q_ADD(x, y) ((x) + (y))
#define DFG_Q_SUB(x, y) ((x) - (y))
#define DFG_Q_MUL(x, y) ((x) * (y))
#endif
DFG_QHD float dfg_quantile_lerp(float a, float b, float w) {
    return w < 0.5f ? DFG_Q_ADD(a, DFG_Q_MUL(w, DFG_Q_SUB(b, a))) : DFG_Q_SUB(b, DFG_Q_MUL(DFG_Q_SUB(b, a), DFG_Q_SUB(1.0f, w)));
}
#undef DFG_Q_ADD
#undef DFG_Q_SUB
#undef DFG_Q_MUL

#endif
