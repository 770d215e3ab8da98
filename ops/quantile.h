/* quantile.h - what the quantile kernels of every backend share (ops/reduce.c has the op): the
 * order-preserving map of an f32 onto a u32 key (a binary search over keys is then a search
 * over values), and torch.quantile's rank and interpolation. Plain C, usable from CUDA. */
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

/* torch.quantile over n sorted values: the value at rank q (n - 1), linearly interpolated between
 * the ranks lo and lo + 1 with weight w (w = 0: lo alone). */
DFG_QHD void dfg_quantile_rank(int64_t n, float q, int64_t *lo, double *w) {
    double pos = (double)q * (double)(n - 1);
    double f = floor(pos);
    *lo = (int64_t)f;
    *w = pos - f;
    if (*lo >= n - 1) *lo = n - 1, *w = 0.0;
}

/* lerp as torch computes it in double: exact at both ends */
DFG_QHD float dfg_quantile_lerp(float a, float b, double w) {
    return w < 0.5 ? (float)((double)a + w * ((double)b - (double)a)) : (float)((double)b - ((double)b - (double)a) * (1.0 - w));
}

#endif
