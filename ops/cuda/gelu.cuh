// gelu.cuh - GELU (GPT-2's tanh approximation) and its derivative for the CUDA kernels
// (elementwise.cu, bias_gelu.cu), rounded operation for operation as the CPU kernels round them
// (ops/cpu/fastmath.h's rational tanh, ops/cpu/elementwise.c, ops/cpu/bias_gelu.c). Every
// product and sum is an explicit __fmul_rn / __fadd_rn, which nvcc never contracts into an FMA:
// with contraction the H100 gave gelu_bwd 1.1e-4 where the CPU gives -0 (1 + tanh near -1 and
// 1 - t^2 near 0 cancel whatever rounding differs), past the tests' tolerance. The emulated
// build rounds the same way (it is compiled with contraction off).
#pragma once

namespace gelu_tanh {

constexpr float kK = 0.7978845608028654f; // sqrt(2/pi)

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
// p x2 + c, rounded twice as the CPU's Horner step
__device__ __forceinline__ float horner(float p, float x2, float c) { return add(mul(p, x2), c); }

// tanh as fastmath.h's dfg_tanh_f32
__device__ __forceinline__ float tanh_r(float x) {
    const float lim = 7.90531110763549805f;
    const float c = x > lim ? lim : (x < -lim ? -lim : x), x2 = mul(c, c);
    float p = -2.76076847742355e-16f;
    p = horner(p, x2, 2.00018790482477e-13f);
    p = horner(p, x2, -8.60467152213735e-11f);
    p = horner(p, x2, 5.12229709037114e-08f);
    p = horner(p, x2, 1.48572235717979e-05f);
    p = horner(p, x2, 6.37261928875436e-04f);
    p = horner(p, x2, 4.89352455891786e-03f);
    float q = 1.19825839466702e-06f;
    q = horner(q, x2, 1.18534705686654e-04f);
    q = horner(q, x2, 2.26843463243900e-03f);
    q = horner(q, x2, 4.89352518554385e-03f);
    const float small = x < 0.0f ? -x : x;
    return small < 4e-4f ? x : __fdiv_rn(mul(c, p), q);
}

// k (x + 0.044715 x^3), the CPU's order: k * (x + ((0.044715 x) x) x)
__device__ __forceinline__ float inner(float x) { return mul(kK, add(x, mul(mul(mul(0.044715f, x), x), x))); }

// 0.5 x (1 + tanh(inner(x)))
__device__ __forceinline__ float gelu(float x) { return mul(mul(0.5f, x), add(1.0f, tanh_r(inner(x)))); }

// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du, du = k (1 + 3 0.044715 x^2)
__device__ __forceinline__ float grad(float x) {
    const float t = tanh_r(inner(x));
    const float du = mul(kK, add(1.0f, mul(mul(3.0f * 0.044715f, x), x)));
    return add(mul(0.5f, add(1.0f, t)), mul(mul(mul(0.5f, x), add(1.0f, -mul(t, t))), du));
}

} // namespace gelu_tanh
