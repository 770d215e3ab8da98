/* elementwise.c - CPU kernels for pointwise ops (f32, and i32 where the op allows it).
 * Broadcasting walks the output row by row (last dim innermost) with per-input strides that
 * are 0 along broadcast dims. */
#include <math.h>

#include "cpu.h"
#include "fastmath.h"
#include "../dtype.h"

#define DFG_OMP_MIN 32768 /* below this many elements a parallel region costs more than it saves */

static inline float bin_f32(dfg_op op, float a, float b) {
    switch (op) {
    case DFG_OP_ADD: return a + b;
    case DFG_OP_SUB: return a - b;
    case DFG_OP_MUL: return a * b;
    case DFG_OP_DIV: return a / b;
    case DFG_OP_MINIMUM: return a < b ? a : b;
    case DFG_OP_MAXIMUM: return a > b ? a : b;
    case DFG_OP_EQUAL: return a == b ? 1.0f : 0.0f;
    default: return 0.0f;
    }
}

/* Integer ops wrap on overflow and give 0 for division by zero, instead of trapping. */
static inline int32_t bin_i32(dfg_op op, int32_t a, int32_t b) {
    uint32_t ua = (uint32_t)a, ub = (uint32_t)b;
    switch (op) {
    case DFG_OP_ADD: return (int32_t)(ua + ub);
    case DFG_OP_SUB: return (int32_t)(ua - ub);
    case DFG_OP_MUL: return (int32_t)(ua * ub);
    case DFG_OP_DIV: return b == 0 ? 0 : b == -1 ? (int32_t)(0u - ua) : a / b;
    case DFG_OP_MINIMUM: return a < b ? a : b;
    case DFG_OP_MAXIMUM: return a > b ? a : b;
    default: return 0;
    }
}

/* One output row of a broadcast binary op: n elements, input strides sa/sb (0 or 1). */
static void binary_row(dfg_op op, dfg_dtype dt, const void *a, const void *b, void *o, int64_t n, int64_t sa,
                       int64_t sb) {
    if (dt == DFG_F32) {
        const float *x = a, *y = b;
        float *z = o;
        for (int64_t i = 0; i < n; i++) z[i] = bin_f32(op, x[i * sa], y[i * sb]);
    } else if (op == DFG_OP_EQUAL) {
        const int32_t *x = a, *y = b;
        float *z = o;
        for (int64_t i = 0; i < n; i++) z[i] = x[i * sa] == y[i * sb] ? 1.0f : 0.0f;
    } else {
        const int32_t *x = a, *y = b;
        int32_t *z = o;
        for (int64_t i = 0; i < n; i++) z[i] = bin_i32(op, x[i * sa], y[i * sb]);
    }
}

dfg_status dfg_cpu_binary(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape os = n->out[0]->shape;
    dfg_dtype dt = n->in[0]->dtype;
    size_t isz = dfg_dtype_size(dt), osz = dfg_dtype_size(n->out[0]->dtype);
    int64_t sa[DFG_MAX_RANK], sb[DFG_MAX_RANK];
    dfg_bcast_strides(os, n->in[0]->shape, sa);
    dfg_bcast_strides(os, n->in[1]->shape, sb);
    int64_t last = os.rank ? os.d[os.rank - 1] : 1, rows = dfg_shape_numel(os) / last;
    int64_t la = os.rank ? sa[os.rank - 1] : 1, lb = os.rank ? sb[os.rank - 1] : 1;
    const char *A = in[0], *B = in[1];
    char *O = out[0];
    dfg_shape outer = os;
    outer.d[outer.rank ? outer.rank - 1 : 0] = 1;
#pragma omp parallel for schedule(static) if (rows * last > DFG_OMP_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t oa = dfg_bcast_offset(&outer, sa, r), ob = dfg_bcast_offset(&outer, sb, r);
        binary_row(n->op, dt, A + (size_t)oa * isz, B + (size_t)ob * isz, O + (size_t)(r * last) * osz, last, la, lb);
    }
    return DFG_OK;
}

static inline float gelu_f(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + dfg_tanh_f32(k * (x + 0.044715f * x * x * x)));
}

/* SiLU x sigmoid(x) as torch computes it, x / (1 + e^-x): no cancellation anywhere, and finite
 * for every finite x (e^-x overflows to inf below x = -88.72, where the result is -0 and the
 * true value under 3e-37 in magnitude; for large x, e^-x is 0 and the result x). As torch:
 * silu(+inf) = +inf, silu(-inf) = NaN (-inf / inf), NaN stays NaN. */
static inline float silu_f(float x) { return x / (1.0f + dfg_exp_f32(-x)); }

/* d silu / dx = s (1 + x (1 - s)), s = sigmoid(x). 1 - s is sigmoid(-x): e^-x s for x >= 0
 * (where s rounds to 1 and 1 - s would cancel), 1 - s for x < 0 (s <= 1/2: exact enough), so
 * the result keeps float precision over the whole range; finite for every finite x (0 below
 * x = -88.72, 1 for large x). +-inf give NaN, as torch's silu_backward. */
static inline float silu_grad_f(float x) {
    float e = dfg_exp_f32(-x), s = 1.0f / (1.0f + e), sc = x >= 0.0f ? e * s : 1.0f - s;
    return s * (1.0f + x * sc);
}

static inline float unary_f32(const dfg_node *n, float x) {
    switch (n->op) {
    case DFG_OP_AFFINE: return n->attr->affine.alpha * x + n->attr->affine.beta;
    case DFG_OP_EXP: return expf(x);
    case DFG_OP_LOG: return logf(x);
    case DFG_OP_NEG: return -x;
    case DFG_OP_SQRT: return sqrtf(x);
    case DFG_OP_CLAMP: return x < n->attr->clamp.lo ? n->attr->clamp.lo : x > n->attr->clamp.hi ? n->attr->clamp.hi : x;
    case DFG_OP_GELU: return gelu_f(x);
    case DFG_OP_SILU: return silu_f(x);
    default: return 0.0f;
    }
}

dfg_status dfg_cpu_unary(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    int64_t cnt = dfg_shape_numel(n->out[0]->shape);
    if (n->in[0]->dtype == DFG_I32) { /* scale, neg, clamp of counters: computed exactly in double */
        const int32_t *x = in[0];
        int32_t *y = out[0];
        for (int64_t i = 0; i < cnt; i++) {
            double v = x[i];
            if (n->op == DFG_OP_AFFINE) v = (double)n->attr->affine.alpha * v + (double)n->attr->affine.beta;
            else if (n->op == DFG_OP_NEG) v = -v;
            else v = v < n->attr->clamp.lo ? n->attr->clamp.lo : v > n->attr->clamp.hi ? n->attr->clamp.hi : v;
            dfg_store(y, DFG_I32, i, nearbyint(v));
        }
        return DFG_OK;
    }
    const float *x = in[0];
    float *y = out[0];
#pragma omp parallel for schedule(static) if (cnt > DFG_OMP_MIN)
    for (int64_t i = 0; i < cnt; i++) y[i] = unary_f32(n, x[i]);
    return DFG_OK;
}

/* d/dx of the tanh-approximated GELU: 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx */
dfg_status dfg_cpu_gelu_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const float *dy = in[0], *x = in[1];
    float *dx = out[0];
    const float k = 0.7978845608028654f;
    int64_t cnt = dfg_shape_numel(n->out[0]->shape);
#pragma omp parallel for schedule(static) if (cnt > DFG_OMP_MIN)
    for (int64_t i = 0; i < cnt; i++) {
        float v = x[i], u = k * (v + 0.044715f * v * v * v), t = dfg_tanh_f32(u);
        float du = k * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
    return DFG_OK;
}

dfg_status dfg_cpu_silu_bwd(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const float *dy = in[0], *x = in[1];
    float *dx = out[0];
    int64_t cnt = dfg_shape_numel(n->out[0]->shape);
#pragma omp parallel for schedule(static) if (cnt > DFG_OMP_MIN)
    for (int64_t i = 0; i < cnt; i++) dx[i] = dy[i] * silu_grad_f(x[i]);
    return DFG_OK;
}

dfg_status dfg_cpu_where(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape os = n->out[0]->shape;
    int64_t sc[DFG_MAX_RANK], sa[DFG_MAX_RANK], sb[DFG_MAX_RANK];
    dfg_bcast_strides(os, n->in[0]->shape, sc);
    dfg_bcast_strides(os, n->in[1]->shape, sa);
    dfg_bcast_strides(os, n->in[2]->shape, sb);
    dfg_dtype ct = n->in[0]->dtype, vt = n->out[0]->dtype;
    int64_t cnt = dfg_shape_numel(os);
#pragma omp parallel for schedule(static) if (cnt > DFG_OMP_MIN)
    for (int64_t i = 0; i < cnt; i++) {
        bool c = dfg_load(in[0], ct, dfg_bcast_offset(&os, sc, i)) != 0.0;
        int64_t src = dfg_bcast_offset(&os, c ? sa : sb, i);
        if (vt == DFG_F32) ((float *)out[0])[i] = ((const float *)in[c ? 1 : 2])[src];
        else dfg_store(out[0], vt, i, dfg_load(in[c ? 1 : 2], vt, src));
    }
    return DFG_OK;
}

dfg_status dfg_cpu_cast(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    dfg_dtype from = n->in[0]->dtype, to = n->out[0]->dtype;
    int64_t cnt = dfg_shape_numel(n->out[0]->shape);
    if (from == to) {
        if (out[0] != in[0]) memcpy(out[0], in[0], (size_t)cnt * dfg_dtype_size(to));
        return DFG_OK;
    }
    for (int64_t i = 0; i < cnt; i++) dfg_store(out[0], to, i, dfg_load(in[0], from, i));
    return DFG_OK;
}

dfg_status dfg_cpu_fill(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx, (void)in;
    dfg_dtype dt = n->out[0]->dtype;
    int64_t cnt = dfg_shape_numel(n->out[0]->shape);
    float v = n->attr->fill.value;
    if (dt == DFG_F32) {
        float *y = out[0];
        for (int64_t i = 0; i < cnt; i++) y[i] = v;
    } else {
        for (int64_t i = 0; i < cnt; i++) dfg_store(out[0], dt, i, v);
    }
    return DFG_OK;
}
