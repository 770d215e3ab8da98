// elementwise.cu - pointwise ops on the GPU: the broadcasting binaries (add .. equal), the unaries
// (affine .. gelu, silu), gelu_bwd, silu_bwd, where, cast, fill. Each matches ops/cpu/elementwise.c
// element for element: the same formulas in f32 (bf16 and f16 storage widened on load, rounded to
// nearest even on store), the same NaN behaviour of min/max/clamp/where, the same integer
// wrap-around and saturation.
//
// Broadcasting: the launcher collapses the output's dims into (rows, cols) plus up to 5 outer
// dims; adjacent dims merge when every input's strides continue across them, so same-shape
// operands become one row, `x (rows, C) op y (C)` and `x (rows, C) op y (rows, 1)` two dims. An
// input then reads element (r, c) at row_offset(r) + c * cs with cs 1 (it spans the columns) or 0
// (one value per row). Threads walk the (rows, cols / V) grid of V-element vectors in grid-stride
// order (coalesced along the row); the row offsets are recomputed only when a thread's row
// changes, and cost no division at all when there is one outer dim. V = 16 bytes of the input
// type (f32x4, bf16x8) when every spanning operand is aligned, else 1; a single row (flat
// operands) keeps its vectors and finishes its last cols % V elements in the first threads.
#include "common.cuh"
#include "gelu.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxIn = 3;                   // where: cond, a, b
constexpr int kMaxOuter = DFG_MAX_RANK - 1; // outer dims left after collapsing (cols is the last)

// ---------------------------------------------------------------- element types
template <bool C, class A, class B> struct pick { typedef A type; };
template <class A, class B> struct pick<false, A, B> { typedef B type; };
template <class A, class B> struct same { static constexpr bool value = false; };
template <class A> struct same<A, A> { static constexpr bool value = true; };

// V elements from column col of a row that spans the columns (cs 1), or its one value repeated
template <int V, class T> __device__ __forceinline__ DfgVec<T, V> ld_bcast(const T *row, int64_t cs, int64_t col) {
    if (cs) return dfg_ldv<V>(row + col);
    DfgVec<T, V> r;
    const T s = row[0];
#pragma unroll
    for (int j = 0; j < V; j++) r.v[j] = s;
    return r;
}

// ---------------------------------------------------------------- broadcast plan and walk
struct Bcast {
    int64_t rows, cols;            // the output as (rows, cols), row-major
    int nd;                        // outer dims, 1..kMaxOuter; rows is their product
    int narrow;                    // rows < 2^32: row indices split with 32-bit divisions
    int64_t dims[kMaxOuter];
    int64_t rs[kMaxIn][kMaxOuter]; // input k's element stride along outer dim d (0: broadcast)
    int64_t cs[kMaxIn];            // input k's stride along the columns: 1, or 0 (one value per row)
};

// Input K's element offset of row r (common.cuh: the plan stays in the kernel's parameter space)
template <int K> __device__ __forceinline__ int64_t row_offset(const Bcast &p, int64_t r) {
    return dfg_outer_offset(p.dims, p.rs[K], p.nd, p.narrow, r);
}

// ---------------------------------------------------------------- binary ops
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_MIN, B_MAX, B_EQ };

template <int OP> __device__ __forceinline__ float bin_f(float a, float b) {
    switch (OP) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_MIN: return a < b ? a : b; // NaN: b, as the CPU
    case B_MAX: return a > b ? a : b;
    default: return a == b ? 1.0f : 0.0f;
    }
}
// integers wrap on overflow and give 0 for division by zero (the CPU's rules)
template <int OP> __device__ __forceinline__ int32_t bin_i(int32_t a, int32_t b) {
    uint32_t ua = (uint32_t)a, ub = (uint32_t)b;
    switch (OP) {
    case B_ADD: return (int32_t)(ua + ub);
    case B_SUB: return (int32_t)(ua - ub);
    case B_MUL: return (int32_t)(ua * ub);
    case B_DIV: return b == 0 ? 0 : b == -1 ? (int32_t)(0u - ua) : a / b;
    case B_MIN: return a < b ? a : b;
    default: return a > b ? a : b;
    }
}
template <int OP, class T> struct Bin { // f32, bf16, f16: f32 arithmetic; equal gives f32
    typedef typename pick<OP == B_EQ, float, T>::type Out;
    static __device__ __forceinline__ Out apply(T a, T b) {
        return dfg_from_f<Out>(bin_f<OP>(dfg_to_f(a), dfg_to_f(b)));
    }
};
template <int OP> struct Bin<OP, int32_t> {
    typedef typename pick<OP == B_EQ, float, int32_t>::type Out;
    static __device__ __forceinline__ Out apply(int32_t a, int32_t b) {
        if (OP == B_EQ) return (Out)(a == b ? 1.0f : 0.0f);
        return (Out)bin_i<OP>(a, b);
    }
};

// y (rows, cols) = a op b, each input broadcast by the plan (inputs 0 and 1). y may be a or b
// (in place): every element is read before the same thread writes it.
template <int OP, class T, int V>
__global__ void __launch_bounds__(kThreads)
    binary_kernel(typename Bin<OP, T>::Out *y /* (rows, cols) */, const T *a /* plan input 0 */,
                  const T *b /* plan input 1 */, Bcast p, int64_t tail /* rows == 1: cols % V */) {
    typedef typename Bin<OP, T>::Out O;
    const int64_t nv = p.cols / V;
    if (nv > 0) {
        int64_t cur = -1, oa = 0, ob = 0;
        for (DfgWalk w(nv); w.r < p.rows; w.next()) {
            if (w.r != cur) cur = w.r, oa = row_offset<0>(p, cur), ob = row_offset<1>(p, cur);
            const int64_t col = w.c * V;
            DfgVec<T, V> va = ld_bcast<V>(a + oa, p.cs[0], col), vb = ld_bcast<V>(b + ob, p.cs[1], col);
            DfgVec<O, V> vy;
#pragma unroll
            for (int j = 0; j < V; j++) vy.v[j] = Bin<OP, T>::apply(va.v[j], vb.v[j]);
            dfg_stv<V>(y + cur * p.cols + col, vy);
        }
    }
    const int64_t t = dfg_thread_index();
    if (t < tail) { // row 0, whose row offsets are 0
        const int64_t col = nv * V + t;
        y[col] = Bin<OP, T>::apply(a[col * p.cs[0]], b[col * p.cs[1]]);
    }
}

// ---------------------------------------------------------------- unary ops, gelu_bwd, silu_bwd
enum { U_AFFINE, U_EXP, U_LOG, U_NEG, U_SQRT, U_CLAMP, U_GELU, U_SILU };

__device__ __forceinline__ float gelu_f(float x) { return gelu_tanh::gelu(x); }
__device__ __forceinline__ float gelu_grad(float x) { return gelu_tanh::grad(x); } // d gelu / dx
// SiLU and its derivative as ops/cpu/elementwise.c's (see there: finite for every finite x, torch's
// NaN at -inf; 1 - s as e^-x s for x >= 0); expf instead of the CPU's polynomial, a few ulp apart
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_grad(float x) {
    float e = expf(-x), s = 1.0f / (1.0f + e), sc = x >= 0.0f ? e * s : 1.0f - s;
    return s * (1.0f + x * sc);
}
template <int OP> __device__ __forceinline__ float act_grad(float x) {
    return OP == U_SILU ? silu_grad(x) : gelu_grad(x);
}

// p0, p1: (alpha, beta) for affine, (lo, hi) for clamp
template <int OP> __device__ __forceinline__ float un_f(float x, float p0, float p1) {
    switch (OP) {
    case U_AFFINE: return __fadd_rn(__fmul_rn(p0, x), p1); // unfused, as the CPU rounds it
    case U_EXP: return expf(x);
    case U_LOG: return logf(x);
    case U_NEG: return -x;
    case U_SQRT: return sqrtf(x);
    case U_CLAMP: return x < p0 ? p0 : x > p1 ? p1 : x; // NaN stays NaN
    case U_SILU: return silu_f(x);
    default: return gelu_f(x);
    }
}

// y (n) = op(x (n)); y may be x. Vectors of V, the last n % V elements by the first threads.
template <int OP, class T, int V>
__global__ void __launch_bounds__(kThreads) unary_kernel(T *y /* (n) */, const T *x /* (n) */, int64_t n, float p0,
                                                         float p1) {
    const int64_t nv = n / V;
    for (int64_t i = dfg_thread_index(); i < nv; i += dfg_grid_threads()) {
        DfgVec<T, V> v = dfg_ldv<V>(x + i * V);
#pragma unroll
        for (int j = 0; j < V; j++) v.v[j] = dfg_from_f<T>(un_f<OP>(dfg_to_f(v.v[j]), p0, p1));
        dfg_stv<V>(y + i * V, v);
    }
    const int64_t t = dfg_thread_index();
    if (t < n - nv * V) y[nv * V + t] = dfg_from_f<T>(un_f<OP>(dfg_to_f(x[nv * V + t]), p0, p1));
}

// i32 affine / neg / clamp (counters): computed in double and rounded to nearest even, saturated
template <int OP>
__global__ void __launch_bounds__(kThreads) unary_i32_kernel(int32_t *y /* (n) */, const int32_t *x /* (n) */,
                                                             int64_t n, float p0, float p1) {
    for (int64_t i = dfg_thread_index(); i < n; i += dfg_grid_threads()) {
        double v = (double)x[i];
        if (OP == U_AFFINE) v = __dadd_rn(__dmul_rn((double)p0, v), (double)p1); // unfused, as the CPU
        else if (OP == U_NEG) v = -v;
        else v = v < p0 ? (double)p0 : v > p1 ? (double)p1 : v;
        v = rint(v);
        y[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
    }
}

// dx (n) = dy (n) * act'(x (n)), act gelu (OP U_GELU) or silu (U_SILU); dx may be dy or x
template <int OP, class T, int V>
__global__ void __launch_bounds__(kThreads) act_bwd_kernel(T *dx /* (n) */, const T *dy /* (n) */,
                                                           const T *x /* (n) */, int64_t n) {
    const int64_t nv = n / V;
    for (int64_t i = dfg_thread_index(); i < nv; i += dfg_grid_threads()) {
        DfgVec<T, V> g = dfg_ldv<V>(dy + i * V), v = dfg_ldv<V>(x + i * V);
#pragma unroll
        for (int j = 0; j < V; j++)
            g.v[j] = dfg_from_f<T>(dfg_to_f(g.v[j]) * act_grad<OP>(dfg_to_f(v.v[j])));
        dfg_stv<V>(dx + i * V, g);
    }
    const int64_t t = dfg_thread_index(), e = nv * V + t;
    if (t < n - nv * V) dx[e] = dfg_from_f<T>(dfg_to_f(dy[e]) * act_grad<OP>(dfg_to_f(x[e])));
}

// ---------------------------------------------------------------- where
__device__ __forceinline__ bool truthy(float c) { return c != 0.0f; } // NaN: true, -0: false (as the CPU)
__device__ __forceinline__ bool truthy(int32_t c) { return c != 0; }
__device__ __forceinline__ bool truthy(uint8_t c) { return c != 0; }

// y (rows, cols) = cond ? a : b, broadcast by the plan (inputs cond 0, a 1, b 2). Values are
// moved as bits of their size (any dtype); y may be a or b.
template <class TC, class TV, int V>
__global__ void __launch_bounds__(kThreads)
    where_kernel(TV *y /* (rows, cols) */, const TC *c /* plan input 0 */, const TV *a /* plan input 1 */,
                 const TV *b /* plan input 2 */, Bcast p, int64_t tail /* rows == 1: cols % V */) {
    const int64_t nv = p.cols / V;
    if (nv > 0) {
        int64_t cur = -1, oc = 0, oa = 0, ob = 0;
        for (DfgWalk w(nv); w.r < p.rows; w.next()) {
            if (w.r != cur)
                cur = w.r, oc = row_offset<0>(p, cur), oa = row_offset<1>(p, cur), ob = row_offset<2>(p, cur);
            const int64_t col = w.c * V;
            DfgVec<TC, V> vc = ld_bcast<V>(c + oc, p.cs[0], col);
            DfgVec<TV, V> va = ld_bcast<V>(a + oa, p.cs[1], col), vb = ld_bcast<V>(b + ob, p.cs[2], col);
#pragma unroll
            for (int j = 0; j < V; j++) va.v[j] = truthy(vc.v[j]) ? va.v[j] : vb.v[j];
            dfg_stv<V>(y + cur * p.cols + col, va);
        }
    }
    const int64_t t = dfg_thread_index();
    if (t < tail) {
        const int64_t col = nv * V + t;
        y[col] = truthy(c[col * p.cs[0]]) ? a[col * p.cs[1]] : b[col * p.cs[2]];
    }
}

// ---------------------------------------------------------------- cast and fill
// Conversions as ops/dtype.h's dfg_store(dfg_load(x)): float to float rounds to nearest even
// (bf16/f16 overflow to inf); to integers truncates toward zero and saturates, NaN -> 0; i32 to
// a 16-bit float goes through f32 (rounded twice, as the CPU's double -> float -> bf16).
template <class TO> struct Cvt {
    static __device__ __forceinline__ TO from_float(float f) { return dfg_from_f<TO>(f); }
    static __device__ __forceinline__ TO from_int(int32_t v) { return dfg_from_f<TO>(__int2float_rn(v)); }
};
template <> struct Cvt<int32_t> {
    static __device__ __forceinline__ int32_t from_float(float f) { return __float2int_rz(f); } // saturates, NaN 0
    static __device__ __forceinline__ int32_t from_int(int32_t v) { return v; }
};
template <> struct Cvt<uint8_t> {
    static __device__ __forceinline__ uint8_t from_float(float f) {
        return f != f ? 0 : f >= 255.0f ? 255 : f <= 0.0f ? 0 : (uint8_t)(int32_t)f;
    }
    static __device__ __forceinline__ uint8_t from_int(int32_t v) { return v >= 255 ? 255 : v <= 0 ? 0 : (uint8_t)v; }
};
template <class TO, class TI> __device__ __forceinline__ TO cvt(TI x) { return Cvt<TO>::from_float(dfg_to_f(x)); }
template <class TO> __device__ __forceinline__ TO cvt(int32_t x) { return Cvt<TO>::from_int(x); }
template <class TO> __device__ __forceinline__ TO cvt(uint8_t x) { return Cvt<TO>::from_int((int32_t)x); }

// y (n) = x (n) converted; V so that the wider side moves 16 bytes
template <class TI, class TO, int V>
__global__ void __launch_bounds__(kThreads) cast_kernel(TO *y /* (n) */, const TI *x /* (n) */, int64_t n) {
    const int64_t nv = n / V;
    for (int64_t i = dfg_thread_index(); i < nv; i += dfg_grid_threads()) {
        DfgVec<TI, V> v = dfg_ldv<V>(x + i * V);
        DfgVec<TO, V> o;
#pragma unroll
        for (int j = 0; j < V; j++) o.v[j] = cvt<TO>(v.v[j]);
        dfg_stv<V>(y + i * V, o);
    }
    const int64_t t = dfg_thread_index();
    if (t < n - nv * V) y[nv * V + t] = cvt<TO>(x[nv * V + t]);
}

// y (n) = value converted to TO (as cast converts a float)
template <class TO, int V>
__global__ void __launch_bounds__(kThreads) fill_kernel(TO *y /* (n) */, int64_t n, float value) {
    const TO v = Cvt<TO>::from_float(value);
    DfgVec<TO, V> o;
#pragma unroll
    for (int j = 0; j < V; j++) o.v[j] = v;
    const int64_t nv = n / V;
    for (int64_t i = dfg_thread_index(); i < nv; i += dfg_grid_threads()) dfg_stv<V>(y + i * V, o);
    const int64_t t = dfg_thread_index();
    if (t < n - nv * V) y[nv * V + t] = v;
}

// ================================================================ host side
inline cudaStream_t stream_of(const dfg_cuda_ctx *ctx) { return (cudaStream_t)ctx->stream; }

// The plan reading `nin` inputs broadcast to the output shape os (see the file comment).
void plan_bcast(dfg_shape os, const dfg_tensor *const *ins, int nin, Bcast *p) {
    int64_t st[kMaxIn][DFG_MAX_RANK], d[DFG_MAX_RANK], s[kMaxIn][DFG_MAX_RANK];
    for (int k = 0; k < nin; k++) { // contiguous strides of input k along the output's dims, 0 where broadcast
        int64_t acc = 1;
        const dfg_shape is = ins[k]->shape;
        for (int i = os.rank - 1; i >= 0; i--) {
            int id = is.rank - os.rank + i;
            int64_t dim = id >= 0 ? is.d[id] : 1;
            st[k][i] = dim == 1 ? 0 : acc;
            acc *= dim;
        }
    }
    int m = 0;
    for (int i = 0; i < os.rank; i++) {
        if (os.d[i] == 1) continue;
        bool merge = m > 0;
        for (int k = 0; k < nin && merge; k++) merge = s[k][m - 1] == st[k][i] * os.d[i];
        if (merge) {
            d[m - 1] *= os.d[i];
            for (int k = 0; k < nin; k++) s[k][m - 1] = st[k][i];
        } else {
            d[m] = os.d[i];
            for (int k = 0; k < nin; k++) s[k][m] = st[k][i];
            m++;
        }
    }
    *p = Bcast{};
    p->nd = 1, p->dims[0] = 1, p->rows = 1, p->cols = m ? d[m - 1] : 1;
    for (int k = 0; k < nin; k++) p->cs[k] = m ? s[k][m - 1] : 0;
    if (m >= 2) {
        p->nd = m - 1;
        for (int i = 0; i < m - 1; i++) {
            p->dims[i] = d[i], p->rows *= d[i];
            for (int k = 0; k < nin; k++) p->rs[k][i] = s[k][i];
        }
    }
    p->narrow = p->rows <= (int64_t)UINT32_MAX;
}

// Vectors of V when the shape allows them (one row, or whole vectors per row) and every operand
// read as a vector is aligned to one.
bool bcast_vec_ok(const Bcast &p, int v, const void *y, size_t ysz, const void *const *ins, const size_t *isz,
                  int nin) {
    if (p.rows > 1 && p.cols % v) return false;
    if (!dfg_aligned(y, v * ysz)) return false;
    for (int k = 0; k < nin; k++)
        if (p.cs[k] && !dfg_aligned(ins[k], v * isz[k])) return false;
    return true;
}

template <int OP, class T>
dfg_status launch_binary(const dfg_node *n, void *y, const void *a, const void *b, const Bcast &p, dfg_cuda_ctx *ctx) {
    typedef typename Bin<OP, T>::Out O;
    constexpr int V = 16 / sizeof(T);
    const void *ins[2] = {a, b};
    const size_t isz[2] = {sizeof(T), sizeof(T)};
    cudaError_t e;
    if (bcast_vec_ok(p, V, y, sizeof(O), ins, isz, 2)) {
        const int64_t tail = p.rows == 1 ? p.cols % V : 0;
        e = DFG_LAUNCH((binary_kernel<OP, T, V>), dfg_grid_for(p.rows * (p.cols / V), kThreads, ctx), kThreads, 0,
                       stream_of(ctx), (O *)y, (const T *)a, (const T *)b, p, tail);
    } else {
        e = DFG_LAUNCH((binary_kernel<OP, T, 1>), dfg_grid_for(p.rows * p.cols, kThreads, ctx), kThreads, 0,
                       stream_of(ctx), (O *)y, (const T *)a, (const T *)b, p, (int64_t)0);
    }
    return dfg_cuda_launched(ctx, n, e, "binary_kernel");
}

template <class T>
dfg_status binary_of(const dfg_node *n, void *y, const void *a, const void *b, const Bcast &p, dfg_cuda_ctx *ctx) {
    switch (n->op) {
    case DFG_OP_ADD: return launch_binary<B_ADD, T>(n, y, a, b, p, ctx);
    case DFG_OP_SUB: return launch_binary<B_SUB, T>(n, y, a, b, p, ctx);
    case DFG_OP_MUL: return launch_binary<B_MUL, T>(n, y, a, b, p, ctx);
    case DFG_OP_DIV: return launch_binary<B_DIV, T>(n, y, a, b, p, ctx);
    case DFG_OP_MINIMUM: return launch_binary<B_MIN, T>(n, y, a, b, p, ctx);
    case DFG_OP_MAXIMUM: return launch_binary<B_MAX, T>(n, y, a, b, p, ctx);
    case DFG_OP_EQUAL: return launch_binary<B_EQ, T>(n, y, a, b, p, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "not a binary op");
    }
}

template <int OP, class T>
dfg_status launch_unary(const dfg_node *n, void *y, const void *x, int64_t cnt, float p0, float p1,
                        dfg_cuda_ctx *ctx) {
    constexpr int V = 16 / sizeof(T);
    cudaError_t e;
    if (dfg_aligned(x, 16) && dfg_aligned(y, 16))
        e = DFG_LAUNCH((unary_kernel<OP, T, V>), dfg_grid_for(cnt / V, kThreads, ctx), kThreads, 0, stream_of(ctx),
                       (T *)y, (const T *)x, cnt, p0, p1);
    else
        e = DFG_LAUNCH((unary_kernel<OP, T, 1>), dfg_grid_for(cnt, kThreads, ctx), kThreads, 0, stream_of(ctx),
                       (T *)y, (const T *)x, cnt, p0, p1);
    return dfg_cuda_launched(ctx, n, e, "unary_kernel");
}

template <class T>
dfg_status unary_of(const dfg_node *n, void *y, const void *x, int64_t cnt, float p0, float p1, dfg_cuda_ctx *ctx) {
    switch (n->op) {
    case DFG_OP_AFFINE: return launch_unary<U_AFFINE, T>(n, y, x, cnt, p0, p1, ctx);
    case DFG_OP_EXP: return launch_unary<U_EXP, T>(n, y, x, cnt, p0, p1, ctx);
    case DFG_OP_LOG: return launch_unary<U_LOG, T>(n, y, x, cnt, p0, p1, ctx);
    case DFG_OP_NEG: return launch_unary<U_NEG, T>(n, y, x, cnt, p0, p1, ctx);
    case DFG_OP_SQRT: return launch_unary<U_SQRT, T>(n, y, x, cnt, p0, p1, ctx);
    case DFG_OP_CLAMP: return launch_unary<U_CLAMP, T>(n, y, x, cnt, p0, p1, ctx);
    case DFG_OP_GELU: return launch_unary<U_GELU, T>(n, y, x, cnt, p0, p1, ctx);
    case DFG_OP_SILU: return launch_unary<U_SILU, T>(n, y, x, cnt, p0, p1, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "not a unary op");
    }
}

dfg_status unary_i32(const dfg_node *n, void *y, const void *x, int64_t cnt, float p0, float p1, dfg_cuda_ctx *ctx) {
    cudaError_t e;
    unsigned grid = dfg_grid_for(cnt, kThreads, ctx);
    switch (n->op) {
    case DFG_OP_AFFINE:
        e = DFG_LAUNCH(unary_i32_kernel<U_AFFINE>, grid, kThreads, 0, stream_of(ctx), (int32_t *)y, (const int32_t *)x,
                       cnt, p0, p1);
        break;
    case DFG_OP_NEG:
        e = DFG_LAUNCH(unary_i32_kernel<U_NEG>, grid, kThreads, 0, stream_of(ctx), (int32_t *)y, (const int32_t *)x,
                       cnt, p0, p1);
        break;
    case DFG_OP_CLAMP:
        e = DFG_LAUNCH(unary_i32_kernel<U_CLAMP>, grid, kThreads, 0, stream_of(ctx), (int32_t *)y, (const int32_t *)x,
                       cnt, p0, p1);
        break;
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "i32 input: only affine, neg and clamp take one");
    }
    return dfg_cuda_launched(ctx, n, e, "unary_i32_kernel");
}

template <int OP, class T>
dfg_status launch_act_bwd(const dfg_node *n, void *dx, const void *dy, const void *x, int64_t cnt,
                          dfg_cuda_ctx *ctx) {
    constexpr int V = 16 / sizeof(T);
    cudaError_t e;
    if (dfg_aligned(dx, 16) && dfg_aligned(dy, 16) && dfg_aligned(x, 16))
        e = DFG_LAUNCH((act_bwd_kernel<OP, T, V>), dfg_grid_for(cnt / V, kThreads, ctx), kThreads, 0, stream_of(ctx),
                       (T *)dx, (const T *)dy, (const T *)x, cnt);
    else
        e = DFG_LAUNCH((act_bwd_kernel<OP, T, 1>), dfg_grid_for(cnt, kThreads, ctx), kThreads, 0, stream_of(ctx),
                       (T *)dx, (const T *)dy, (const T *)x, cnt);
    return dfg_cuda_launched(ctx, n, e, OP == U_SILU ? "silu_bwd_kernel" : "gelu_bwd_kernel");
}

// inputs dy, x of one shape -> dx (gelu_bwd, silu_bwd)
template <int OP> dfg_status act_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx) {
    const int64_t cnt = dfg_shape_numel(n->out[0]->shape);
    if (cnt == 0) return DFG_OK;
    switch (n->in[1]->dtype) {
    case DFG_F32: return launch_act_bwd<OP, float>(n, out[0], in[0], in[1], cnt, ctx);
    case DFG_BF16: return launch_act_bwd<OP, __nv_bfloat16>(n, out[0], in[0], in[1], cnt, ctx);
    case DFG_F16: return launch_act_bwd<OP, __half>(n, out[0], in[0], in[1], cnt, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "input of %s", dfg_dtype_name(n->in[1]->dtype));
    }
}

template <class TC, class TV>
dfg_status launch_where(const dfg_node *n, void *y, void *const *in, const Bcast &p, dfg_cuda_ctx *ctx) {
    constexpr int V = 16 / sizeof(TV);
    const void *ins[3] = {in[0], in[1], in[2]};
    const size_t isz[3] = {sizeof(TC), sizeof(TV), sizeof(TV)};
    cudaError_t e;
    if (bcast_vec_ok(p, V, y, sizeof(TV), ins, isz, 3)) {
        const int64_t tail = p.rows == 1 ? p.cols % V : 0;
        e = DFG_LAUNCH((where_kernel<TC, TV, V>), dfg_grid_for(p.rows * (p.cols / V), kThreads, ctx), kThreads, 0,
                       stream_of(ctx), (TV *)y, (const TC *)in[0], (const TV *)in[1], (const TV *)in[2], p, tail);
    } else {
        e = DFG_LAUNCH((where_kernel<TC, TV, 1>), dfg_grid_for(p.rows * p.cols, kThreads, ctx), kThreads, 0,
                       stream_of(ctx), (TV *)y, (const TC *)in[0], (const TV *)in[1], (const TV *)in[2], p, (int64_t)0);
    }
    return dfg_cuda_launched(ctx, n, e, "where_kernel");
}

template <class TC>
dfg_status where_of(const dfg_node *n, void *y, void *const *in, const Bcast &p, dfg_cuda_ctx *ctx) {
    switch (dfg_dtype_size(n->out[0]->dtype)) { // values only move: by size
    case 4: return launch_where<TC, uint32_t>(n, y, in, p, ctx);
    case 2: return launch_where<TC, uint16_t>(n, y, in, p, ctx);
    case 1: return launch_where<TC, uint8_t>(n, y, in, p, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "values of %s", dfg_dtype_name(n->out[0]->dtype));
    }
}

template <class TI, class TO>
dfg_status launch_cast(const dfg_node *n, void *y, const void *x, int64_t cnt, dfg_cuda_ctx *ctx) {
    constexpr int V = 16 / (sizeof(TI) > sizeof(TO) ? sizeof(TI) : sizeof(TO));
    if constexpr (same<TI, TO>::value) { // the launcher copies instead
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "cast to the same dtype");
    } else {
        cudaError_t e;
        if (dfg_aligned(x, V * sizeof(TI)) && dfg_aligned(y, V * sizeof(TO)))
            e = DFG_LAUNCH((cast_kernel<TI, TO, V>), dfg_grid_for(cnt / V, kThreads, ctx), kThreads, 0,
                           stream_of(ctx), (TO *)y, (const TI *)x, cnt);
        else
            e = DFG_LAUNCH((cast_kernel<TI, TO, 1>), dfg_grid_for(cnt, kThreads, ctx), kThreads, 0, stream_of(ctx),
                           (TO *)y, (const TI *)x, cnt);
        return dfg_cuda_launched(ctx, n, e, "cast_kernel");
    }
}

template <class TI>
dfg_status cast_from(const dfg_node *n, void *y, const void *x, int64_t cnt, dfg_cuda_ctx *ctx) {
    switch (n->out[0]->dtype) {
    case DFG_F32: return launch_cast<TI, float>(n, y, x, cnt, ctx);
    case DFG_BF16: return launch_cast<TI, __nv_bfloat16>(n, y, x, cnt, ctx);
    case DFG_F16: return launch_cast<TI, __half>(n, y, x, cnt, ctx);
    case DFG_I32: return launch_cast<TI, int32_t>(n, y, x, cnt, ctx);
    case DFG_U8: return launch_cast<TI, uint8_t>(n, y, x, cnt, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "cast to %s", dfg_dtype_name(n->out[0]->dtype));
    }
}

template <class TO>
dfg_status launch_fill(const dfg_node *n, void *y, int64_t cnt, float value, dfg_cuda_ctx *ctx) {
    constexpr int V = 16 / sizeof(TO);
    cudaError_t e;
    if (dfg_aligned(y, 16))
        e = DFG_LAUNCH((fill_kernel<TO, V>), dfg_grid_for(cnt / V, kThreads, ctx), kThreads, 0, stream_of(ctx), (TO *)y,
                       cnt, value);
    else
        e = DFG_LAUNCH((fill_kernel<TO, 1>), dfg_grid_for(cnt, kThreads, ctx), kThreads, 0, stream_of(ctx), (TO *)y,
                       cnt, value);
    return dfg_cuda_launched(ctx, n, e, "fill_kernel");
}

} // namespace

// ================================================================ launchers
// add, sub, mul, div, minimum, maximum, equal: f32, bf16, f16 or i32 operands of one dtype,
// numpy broadcasting; equal's output is f32
DFG_CUDA_LAUNCHER(binary) {
    const dfg_dtype dt = n->in[0]->dtype;
    if (n->in[1]->dtype != dt) return dfg_cuda_fail(ctx, n, DFG_ERR_SHAPE, "operand dtypes differ");
    if (dfg_shape_numel(n->out[0]->shape) == 0) return DFG_OK;
    Bcast p;
    plan_bcast(n->out[0]->shape, n->in, 2, &p);
    switch (dt) {
    case DFG_F32: return binary_of<float>(n, out[0], in[0], in[1], p, ctx);
    case DFG_BF16: return binary_of<__nv_bfloat16>(n, out[0], in[0], in[1], p, ctx);
    case DFG_F16: return binary_of<__half>(n, out[0], in[0], in[1], p, ctx);
    case DFG_I32: return binary_of<int32_t>(n, out[0], in[0], in[1], p, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "operands of %s", dfg_dtype_name(dt));
    }
}

// affine, exp, log, neg, sqrt, clamp, gelu (tanh approximation), silu: same shape in and out; i32 for
// affine, neg and clamp
DFG_CUDA_LAUNCHER(unary) {
    const int64_t cnt = dfg_shape_numel(n->out[0]->shape);
    float p0 = 0.0f, p1 = 0.0f;
    if (n->op == DFG_OP_AFFINE) p0 = n->attr->affine.alpha, p1 = n->attr->affine.beta;
    if (n->op == DFG_OP_CLAMP) p0 = n->attr->clamp.lo, p1 = n->attr->clamp.hi;
    if (cnt == 0) return DFG_OK;
    switch (n->in[0]->dtype) {
    case DFG_F32: return unary_of<float>(n, out[0], in[0], cnt, p0, p1, ctx);
    case DFG_BF16: return unary_of<__nv_bfloat16>(n, out[0], in[0], cnt, p0, p1, ctx);
    case DFG_F16: return unary_of<__half>(n, out[0], in[0], cnt, p0, p1, ctx);
    case DFG_I32: return unary_i32(n, out[0], in[0], cnt, p0, p1, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "input of %s", dfg_dtype_name(n->in[0]->dtype));
    }
}

// inputs dy, x of one shape -> dx
DFG_CUDA_LAUNCHER(gelu_bwd) { return act_bwd<U_GELU>(n, in, out, ctx); }
DFG_CUDA_LAUNCHER(silu_bwd) { return act_bwd<U_SILU>(n, in, out, ctx); }

// inputs cond (f32, i32 or u8), a, b (one dtype, any): broadcast together
DFG_CUDA_LAUNCHER(where) {
    if (dfg_shape_numel(n->out[0]->shape) == 0) return DFG_OK;
    Bcast p;
    plan_bcast(n->out[0]->shape, n->in, 3, &p);
    switch (n->in[0]->dtype) {
    case DFG_F32: return where_of<float>(n, out[0], in, p, ctx);
    case DFG_I32: return where_of<int32_t>(n, out[0], in, p, ctx);
    case DFG_U8: return where_of<uint8_t>(n, out[0], in, p, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "condition of %s", dfg_dtype_name(n->in[0]->dtype));
    }
}

// any dtype to any dtype; the same dtype is a copy (nothing when the planner gave one buffer)
DFG_CUDA_LAUNCHER(cast) {
    const dfg_dtype from = n->in[0]->dtype, to = n->out[0]->dtype;
    const int64_t cnt = dfg_shape_numel(n->out[0]->shape);
    if (cnt == 0) return DFG_OK;
    if (from == to) {
        if (out[0] == in[0]) return DFG_OK;
        return dfg_cuda_launched(ctx, n, DFG_CUDA_FN(copy_bytes)(out[0], in[0], dfg_tensor_bytes(n->out[0]), ctx),
                                 "copy_bytes");
    }
    switch (from) {
    case DFG_F32: return cast_from<float>(n, out[0], in[0], cnt, ctx);
    case DFG_BF16: return cast_from<__nv_bfloat16>(n, out[0], in[0], cnt, ctx);
    case DFG_F16: return cast_from<__half>(n, out[0], in[0], cnt, ctx);
    case DFG_I32: return cast_from<int32_t>(n, out[0], in[0], cnt, ctx);
    case DFG_U8: return cast_from<uint8_t>(n, out[0], in[0], cnt, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "cast from %s", dfg_dtype_name(from));
    }
}

// a new tensor of the attribute's value, converted to its dtype as cast converts
DFG_CUDA_LAUNCHER(fill) {
    (void)in;
    const int64_t cnt = dfg_shape_numel(n->out[0]->shape);
    const float v = n->attr->fill.value;
    if (cnt == 0) return DFG_OK;
    switch (n->out[0]->dtype) {
    case DFG_F32: return launch_fill<float>(n, out[0], cnt, v, ctx);
    case DFG_BF16: return launch_fill<__nv_bfloat16>(n, out[0], cnt, v, ctx);
    case DFG_F16: return launch_fill<__half>(n, out[0], cnt, v, ctx);
    case DFG_I32: return launch_fill<int32_t>(n, out[0], cnt, v, ctx);
    case DFG_U8: return launch_fill<uint8_t>(n, out[0], cnt, v, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "fill of %s", dfg_dtype_name(n->out[0]->dtype));
    }
}
