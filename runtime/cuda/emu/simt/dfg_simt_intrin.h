/* dfg_simt_intrin.h - the device intrinsics a kernel uses that glibc and the host half of the CUDA
 * headers do not give the host compiler: fast math, conversions, bit tricks, cache-hinted
 * loads, atomics, min/max, and bf16 math. Included by dfg_simt.h under emulation only.
 *
 * The fast-math forms (__fdividef, __expf, rsqrtf...) are computed exactly here, so a kernel that
 * depends on their reduced precision is not exercised by the emulator; comparisons against the
 * CPU kernels use tolerances that cover the device's error bounds. (glibc already declares
 * __expf, __logf, __sinf, __cosf, __tanf, __powf, __exp10f, __log2f, __log10f, __sincosf.) */
#ifndef DFG_SIMT_INTRIN_H
#define DFG_SIMT_INTRIN_H

/* ---- float math */
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmaf_rz(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __drcp_rn(double x) { return 1.0 / x; }
inline double __dsqrt_rn(double x) { return sqrt(x); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
/* NaN saturates to 0, as on the device */
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }
inline float sinpif(float x) { return sinf(3.14159265358979323846f * x); }
inline float cospif(float x) { return cosf(3.14159265358979323846f * x); }
inline void sincospif(float x, float *s, float *c) {
    *s = sinpif(x);
    *c = cospif(x);
}
inline float rhypotf(float x, float y) { return 1.0f / hypotf(x, y); }
inline float norm3df(float a, float b, float c) { return sqrtf(a * a + b * b + c * c); }
inline float rnorm3df(float a, float b, float c) { return 1.0f / sqrtf(a * a + b * b + c * c); }

/* ---- min / max: CUDA's overloads, including its mixed signed/unsigned ones */
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

/* ---- bit casts and conversions (the float->int ones saturate and map NaN to 0, as cvt does) */
inline int __float_as_int(float x) { return dfg_simt_from_bits<int>(dfg_simt_to_bits(x)); }
inline unsigned __float_as_uint(float x) { return dfg_simt_from_bits<unsigned>(dfg_simt_to_bits(x)); }
inline float __int_as_float(int x) { return dfg_simt_from_bits<float>(dfg_simt_to_bits(x)); }
inline float __uint_as_float(unsigned x) { return dfg_simt_from_bits<float>(dfg_simt_to_bits(x)); }
inline long long __double_as_longlong(double x) { return dfg_simt_from_bits<long long>(dfg_simt_to_bits(x)); }
inline double __longlong_as_double(long long x) { return dfg_simt_from_bits<double>(dfg_simt_to_bits(x)); }
inline int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
inline int __double2loint(double x) { return (int)__double_as_longlong(x); }
inline double __hiloint2double(int hi, int lo) {
    return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo));
}
template <class I>
inline I dfg_simt_cvt(double r) {
    if (r != r) return 0;
    if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)r;
}
inline int __float2int_rn(float x) { return dfg_simt_cvt<int>(nearbyint((double)x)); }
inline int __float2int_rz(float x) { return dfg_simt_cvt<int>(trunc((double)x)); }
inline int __float2int_ru(float x) { return dfg_simt_cvt<int>(ceil((double)x)); }
inline int __float2int_rd(float x) { return dfg_simt_cvt<int>(floor((double)x)); }
inline unsigned __float2uint_rn(float x) { return dfg_simt_cvt<unsigned>(nearbyint((double)x)); }
inline unsigned __float2uint_rz(float x) { return dfg_simt_cvt<unsigned>(trunc((double)x)); }
inline unsigned __float2uint_ru(float x) { return dfg_simt_cvt<unsigned>(ceil((double)x)); }
inline unsigned __float2uint_rd(float x) { return dfg_simt_cvt<unsigned>(floor((double)x)); }
inline long long __float2ll_rn(float x) { return dfg_simt_cvt<long long>(nearbyint((double)x)); }
inline long long __float2ll_rz(float x) { return dfg_simt_cvt<long long>(trunc((double)x)); }
inline int __double2int_rn(double x) { return dfg_simt_cvt<int>(nearbyint(x)); }
inline int __double2int_rz(double x) { return dfg_simt_cvt<int>(trunc(x)); }
inline float __double2float_rn(double x) { return (float)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline double __int2double_rn(int x) { return (double)x; }

/* ---- integer intrinsics */
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32 | lo) << (s & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
    return s >= 32 ? lo : (unsigned)((((unsigned long long)hi << 32 | lo) << s) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (s & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
    return s >= 32 ? hi : (unsigned)(((unsigned long long)hi << 32 | lo) >> s);
}
inline int __mul24(int a, int b) { return (int)(((long long)(a << 8) >> 8) * ((long long)(b << 8) >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
inline unsigned __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
inline unsigned __sad(int a, int b, unsigned c) { return (a > b ? (unsigned)a - (unsigned)b : (unsigned)b - (unsigned)a) + c; }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }

/* ---- cache-hinted loads and stores: plain accesses on the host */
template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldca(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline T __ldlu(const T *p) { return *p; }
template <class T> inline T __ldcv(const T *p) { return *p; }
template <class T> inline void __stwb(T *p, T v) { *p = v; }
template <class T> inline void __stcg(T *p, T v) { *p = v; }
template <class T> inline void __stcs(T *p, T v) { *p = v; }
template <class T> inline void __stwt(T *p, T v) { *p = v; }

/* ---- atomics. The fibers of a launch share one OS thread, so a plain read-modify-write is
 * atomic; under fuzzing each atomic may hand over to another thread first. */
#define DFG_SIMT_ATOMIC_RMW_(name, T, expr)                          \
    inline T name(T *addr, T val) {                                  \
        if (dfg_simt_fuzzing) dfg_simt_atomic_point();               \
        const T old = *addr;                                         \
        *addr = (expr);                                              \
        return old;                                                  \
    }                                                                \
    inline T name##_block(T *addr, T val) { return name(addr, val); } \
    inline T name##_system(T *addr, T val) { return name(addr, val); }
DFG_SIMT_ATOMIC_RMW_(atomicAdd, int, old + val)
DFG_SIMT_ATOMIC_RMW_(atomicAdd, unsigned, old + val)
DFG_SIMT_ATOMIC_RMW_(atomicAdd, unsigned long long, old + val)
DFG_SIMT_ATOMIC_RMW_(atomicAdd, float, old + val)
DFG_SIMT_ATOMIC_RMW_(atomicAdd, double, old + val)
DFG_SIMT_ATOMIC_RMW_(atomicAdd, __nv_bfloat16, __float2bfloat16(__bfloat162float(old) + __bfloat162float(val)))
DFG_SIMT_ATOMIC_RMW_(atomicAdd, __half, __float2half(__half2float(old) + __half2float(val)))
DFG_SIMT_ATOMIC_RMW_(atomicSub, int, old - val)
DFG_SIMT_ATOMIC_RMW_(atomicSub, unsigned, old - val)
DFG_SIMT_ATOMIC_RMW_(atomicExch, int, val)
DFG_SIMT_ATOMIC_RMW_(atomicExch, unsigned, val)
DFG_SIMT_ATOMIC_RMW_(atomicExch, unsigned long long, val)
DFG_SIMT_ATOMIC_RMW_(atomicExch, float, val)
DFG_SIMT_ATOMIC_RMW_(atomicMax, int, old > val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicMax, unsigned, old > val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicMax, long long, old > val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicMax, unsigned long long, old > val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicMin, int, old < val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicMin, unsigned, old < val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicMin, long long, old < val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicMin, unsigned long long, old < val ? old : val)
DFG_SIMT_ATOMIC_RMW_(atomicAnd, int, old & val)
DFG_SIMT_ATOMIC_RMW_(atomicAnd, unsigned, old & val)
DFG_SIMT_ATOMIC_RMW_(atomicAnd, unsigned long long, old & val)
DFG_SIMT_ATOMIC_RMW_(atomicOr, int, old | val)
DFG_SIMT_ATOMIC_RMW_(atomicOr, unsigned, old | val)
DFG_SIMT_ATOMIC_RMW_(atomicOr, unsigned long long, old | val)
DFG_SIMT_ATOMIC_RMW_(atomicXor, int, old ^ val)
DFG_SIMT_ATOMIC_RMW_(atomicXor, unsigned, old ^ val)
DFG_SIMT_ATOMIC_RMW_(atomicXor, unsigned long long, old ^ val)
/* ((old >= val) ? 0 : old + 1) and ((old == 0 || old > val) ? val : old - 1), as CUDA defines */
DFG_SIMT_ATOMIC_RMW_(atomicInc, unsigned, old >= val ? 0u : old + 1u)
DFG_SIMT_ATOMIC_RMW_(atomicDec, unsigned, (old == 0u || old > val) ? val : old - 1u)
#undef DFG_SIMT_ATOMIC_RMW_
#define DFG_SIMT_ATOMIC_CAS_(T)                                        \
    inline T atomicCAS(T *addr, T compare, T val) {                    \
        if (dfg_simt_fuzzing) dfg_simt_atomic_point();                 \
        const T old = *addr;                                           \
        if (old == compare) *addr = val;                               \
        return old;                                                    \
    }                                                                  \
    inline T atomicCAS_block(T *addr, T compare, T val) { return atomicCAS(addr, compare, val); }
DFG_SIMT_ATOMIC_CAS_(int)
DFG_SIMT_ATOMIC_CAS_(unsigned)
DFG_SIMT_ATOMIC_CAS_(unsigned long long)
DFG_SIMT_ATOMIC_CAS_(unsigned short)
#undef DFG_SIMT_ATOMIC_CAS_
inline __nv_bfloat162 atomicAdd(__nv_bfloat162 *addr, __nv_bfloat162 val) {
    if (dfg_simt_fuzzing) dfg_simt_atomic_point();
    const __nv_bfloat162 old = *addr;
    *addr = __floats2bfloat162_rn(__low2float(old) + __low2float(val), __high2float(old) + __high2float(val));
    return old;
}

/* ---- bf16 math the host half of cuda_bf16.h leaves out (computed in float, rounded once) */
#define DFG_SIMT_BF16_1_(name, f)                                                                \
    inline __nv_bfloat16 name(const __nv_bfloat16 a) { return __float2bfloat16(f(__bfloat162float(a))); } \
    inline __nv_bfloat162 h2##name(const __nv_bfloat162 a) {                                        \
        return __floats2bfloat162_rn(f(__low2float(a)), f(__high2float(a)));                      \
    }
inline float dfg_simt_rcpf(float x) { return 1.0f / x; }
inline float dfg_simt_rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float dfg_simt_exp10f(float x) { return powf(10.0f, x); }
DFG_SIMT_BF16_1_(hexp, expf)
DFG_SIMT_BF16_1_(hexp2, exp2f)
DFG_SIMT_BF16_1_(hexp10, dfg_simt_exp10f)
DFG_SIMT_BF16_1_(hlog, logf)
DFG_SIMT_BF16_1_(hlog2, log2f)
DFG_SIMT_BF16_1_(hlog10, log10f)
DFG_SIMT_BF16_1_(hsqrt, sqrtf)
DFG_SIMT_BF16_1_(hrsqrt, dfg_simt_rsqrtf)
DFG_SIMT_BF16_1_(hrcp, dfg_simt_rcpf)
DFG_SIMT_BF16_1_(hsin, sinf)
DFG_SIMT_BF16_1_(hcos, cosf)
DFG_SIMT_BF16_1_(htanh, tanhf)
DFG_SIMT_BF16_1_(hfloor, floorf)
DFG_SIMT_BF16_1_(hceil, ceilf)
DFG_SIMT_BF16_1_(htrunc, truncf)
DFG_SIMT_BF16_1_(hrint, rintf)
#undef DFG_SIMT_BF16_1_
/* a*b is exact in float for bf16 a, b; the sum is rounded to float, then to bf16: in a rare tie
 * that double rounding differs from the device's single rounding by one bf16 ulp */
inline __nv_bfloat16 __hfma(const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c) {
    return __float2bfloat16(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
inline __nv_bfloat162 __hfma2(const __nv_bfloat162 a, const __nv_bfloat162 b, const __nv_bfloat162 c) {
    return __halves2bfloat162(__hfma(__low2bfloat16(a), __low2bfloat16(b), __low2bfloat16(c)),
                              __hfma(__high2bfloat16(a), __high2bfloat16(b), __high2bfloat16(c)));
}
inline __nv_bfloat16 __hfma_relu(const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c) {
    const float r = fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c));
    return __float2bfloat16(r < 0.0f ? 0.0f : r);
}

#endif /* DFG_SIMT_INTRIN_H */
