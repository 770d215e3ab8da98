/* nf4.c - bitsandbytes-compatible NF4 (QLoRA's 4-bit NormalFloat, blocksize 64): the host
 * quantisers a weights loader calls, and the op nf4_dequant (builders, shape rule, cost). Kernels:
 * ops/cpu/nf4.c, ops/cuda/nf4.cu; the tables and where they come from: ops/nf4.h.
 *
 * What bitsandbytes computes, read from its source (github.com/bitsandbytes-foundation/
 * bitsandbytes, commit 95f9af30; the CUDA path, which is the one QLoRA runs):
 *   quantize_4bit(A, blocksize=64, quant_type="nf4") (bitsandbytes/functional.py) launches
 *   kQuantizeBlockwiseSmall<T, 64, NF4> (csrc/ops.cu, csrc/kernels.cu). Per block of 64 consecutive
 *   elements (the last one partial, its missing elements loaded as 0.0):
 *     absmax    = max |x| over the block (fmaxf from -FLT_MAX: a NaN is passed over);
 *     inv       = 1.0f / absmax                       (an f32 reciprocal, then a product, not x / absmax)
 *     code(x)   = dQuantizeNF4(x * inv)               (the threshold tree of ops/nf4.h)
 *     byte j    = code(x[2j]) << 4 | code(x[2j+1])    (the even element in the HIGH nibble)
 *   For an odd numel the last byte's low nibble is the code of the padding 0.0: 0b0111 (the code of
 *   0.0) when the block's absmax > 0. A block of zeros has absmax 0, inv = inf and 0 * inf = NaN,
 *   which fails every test of the tree: code 0b0000 (-1.0) for each element, dequantised to
 *   -1.0 * 0 = -0.0 (bitsandbytes' pure-PyTorch "default" backend clamps absmax to 1e-38 and gives
 *   0b0111 there instead; both dequantise to zero, dfg follows the CUDA kernel).
 *   dequantize_4bit (kDequantizeBlockwise<T, ..., NF4>): out[i] = nf4_code[q_i] * absmax[i / 64], one
 *   f32 product, rounded once to the output dtype.
 *   Double quantisation (compress_statistics=True, bnb_4bit_use_double_quant):
 *     offset  = absmax.mean()                          (f32; dfg sums in double and rounds once)
 *     d[b]    = absmax[b] - offset                     (f32)
 *     absmax_q, absmax2 = quantize_blockwise(d, code=create_dynamic_map(), blocksize=256): per block
 *       of 256, absmax2 = max |d|, and absmax_q[b] = dQuantize<0>(map, d[b] * (1.0f / absmax2)), the
 *       binary search over the sorted map of csrc/kernels.cu (dynamic_code below, transcribed);
 *   and dequantize_4bit first rebuilds absmax[b] = map[absmax_q[b]] * absmax2[b / 256] + offset
 *   (dequantize_blockwise, then `absmax += offset`: two f32 roundings, never fused). */
#include <float.h>
#include <math.h>

#include "nf4.h"
#include "op.h"

static const float nf4_codes[16] = {DFG_NF4_CODE_VALUES};
static const float nf4_threshold[15] = {DFG_NF4_THRESHOLD_VALUES};
static const float dynamic_map[256] = {DFG_NF4_DYNAMIC_MAP_VALUES};

int64_t dfg_nf4_packed_bytes(int64_t numel) { return numel > 0 ? (numel + 1) / 2 : 0; }
int64_t dfg_nf4_blocks(int64_t numel) { return numel > 0 ? (numel + DFG_NF4_BLOCK - 1) / DFG_NF4_BLOCK : 0; }
int64_t dfg_nf4_dq_blocks(int64_t numel) {
    const int64_t nb = dfg_nf4_blocks(numel);
    return (nb + DFG_NF4_DQ_BLOCK - 1) / DFG_NF4_DQ_BLOCK;
}

/* ---------------------------------------------------------------- the quantisers */
/* dQuantizeNF4: the code of a normalised value, the tree's four `x > t` tests (its root t[7],
 * then t[3] or t[11], ...): the number of thresholds below x; 0 for a NaN. */
static unsigned nf4_code(float x) {
    unsigned k = x > nf4_threshold[7] ? 8u : 0u;
    k += x > nf4_threshold[k + 3] ? 4u : 0u;
    k += x > nf4_threshold[k + 1] ? 2u : 0u;
    k += x > nf4_threshold[k] ? 1u : 0u;
    return k;
}

/* max |x| over x (n), as bitsandbytes' fmaxf from -FLT_MAX (for n > 0 and any non-NaN |x| >= 0) */
static float abs_max(const float *x, int64_t n) {
    float m = -FLT_MAX;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

void dfg_nf4_quantize(const float *x /* (n) */, int64_t n, uint8_t *packed /* (ceil(n/2)) */,
                      float *absmax /* (ceil(n/64)) */) {
    for (int64_t b0 = 0; b0 < n; b0 += DFG_NF4_BLOCK) {
        const int64_t len = n - b0 < DFG_NF4_BLOCK ? n - b0 : DFG_NF4_BLOCK; /* the last block may be partial */
        const float am = abs_max(x + b0, len), inv = 1.0f / am;
        absmax[b0 / DFG_NF4_BLOCK] = am;
        /* a block starts at an even element (64 is even): its pairs are whole bytes */
        for (int64_t i = 0; i < len; i += 2) {
            const float hi = x[b0 + i], lo = i + 1 < len ? x[b0 + i + 1] : 0.0f; /* 0.0: bitsandbytes' padding */
            packed[(b0 + i) / 2] = (uint8_t)(nf4_code(hi * inv) << 4 | nf4_code(lo * inv));
        }
    }
}

/* dQuantize<STOCHASTIC=0> of csrc/kernels.cu, transcribed: a binary search over the sorted 256
 * codes from pivot 127 in steps 64 .. 1, then the nearer of the final pivot and its neighbour on
 * x's side by the f32 midpoint. A tie goes to the final pivot, so which of two neighbours a
 * midpoint value takes depends on the search path (reproduced, not simplified). */
static uint8_t dynamic_code(float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f, val = dynamic_map[pivot];
    for (int i = 64; i > 0; i >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += i;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= i;
        }
        val = dynamic_map[pivot];
    }
    if (upper_pivot == 255) upper = dynamic_map[upper_pivot];
    if (lower_pivot == 0) lower = dynamic_map[lower_pivot];
    if (x > val) {
        const float mid = (upper + val) * 0.5f;
        return (uint8_t)(x > mid ? upper_pivot : pivot);
    }
    const float mid = (lower + val) * 0.5f;
    return (uint8_t)(x < mid ? lower_pivot : pivot);
}

void dfg_nf4_double_quantize(const float *absmax /* (nb) */, int64_t nb, uint8_t *absmax_q /* (nb) */,
                             float *absmax2 /* (ceil(nb/256)) */, float *offset /* () */) {
    /* torch's f32 mean reduces in an order of its own; a double sum rounded once is the mean
     * itself (to f32), which any order's result is within an ulp or so of */
    double sum = 0.0;
    for (int64_t b = 0; b < nb; b++) sum += absmax[b];
    const float off = nb > 0 ? (float)(sum / (double)nb) : 0.0f;
    *offset = off;
    for (int64_t c0 = 0; c0 < nb; c0 += DFG_NF4_DQ_BLOCK) {
        const int64_t len = nb - c0 < DFG_NF4_DQ_BLOCK ? nb - c0 : DFG_NF4_DQ_BLOCK;
        float d[DFG_NF4_DQ_BLOCK]; /* absmax - offset, rounded to f32 as torch subtracts */
        for (int64_t i = 0; i < len; i++) d[i] = absmax[c0 + i] - off;
        /* kQuantizeBlockwise reduces over the valid items only (a partial block's padding is not
         * in its max) */
        const float a2 = abs_max(d, len), inv = 1.0f / a2;
        absmax2[c0 / DFG_NF4_DQ_BLOCK] = a2;
        for (int64_t i = 0; i < len; i++) absmax_q[c0 + i] = dynamic_code(d[i] * inv);
    }
}

void dfg_nf4_dequantize(const uint8_t *packed, const float *absmax, const uint8_t *absmax_q, const float *absmax2,
                        float offset, int64_t n, float *out) {
    for (int64_t b = 0, nb = dfg_nf4_blocks(n); b < nb; b++) {
        float s;
        if (absmax) s = absmax[b];
        else { /* two statements, as the kernels round them: no FMA */
            const float scaled = dynamic_map[absmax_q[b]] * absmax2[b / DFG_NF4_DQ_BLOCK];
            s = scaled + offset;
        }
        for (int64_t i = b * DFG_NF4_BLOCK; i < n && i < (b + 1) * DFG_NF4_BLOCK; i++) {
            const uint8_t byte = packed[i >> 1];
            out[i] = nf4_codes[(i & 1) ? byte & 15u : byte >> 4] * s;
        }
    }
}

/* ---------------------------------------------------------------- the op */
/* inputs packed, absmax: the plain form; packed, absmax_q, absmax2, offset: double quantisation */
static bool is_dq(const dfg_node *n) { return n->n_in == 4; }

/* one product per element; the double-quantised form also rebuilds each block's absmax (a
 * product and a sum). Bytes: every input read once, the output written (dfg_cost_io). */
dfg_cost dfg_cost_nf4_dequant(const dfg_node *n) {
    const int64_t numel = dfg_shape_numel(n->attr->nf4.shape);
    const double rebuild = is_dq(n) ? 2.0 * (double)dfg_nf4_blocks(numel) : 0.0;
    return dfg_cost_io(n, (double)numel + rebuild);
}

/* Input i of dtype dt with `want` elements (`rule`), else the graph's error naming it, what it
 * holds and what the weight's shape asks for. */
static dfg_status check_input(dfg_graph *g, const dfg_node *n, int i, const char *role, dfg_dtype dt, int64_t want,
                              const char *rule) {
    const dfg_tensor *t = n->in[i];
    const int64_t have = dfg_shape_numel(t->shape);
    if (t->dtype == dt && have == want) return DFG_OK;
    char s[96], w[96];
    return dfg_node_fail(g, n, DFG_ERR_SHAPE, "%s '%s' is %s %s, %lld elements; a weight of %s needs %s with %lld elements (%s)",
                         role, t->name, dfg_dtype_name(t->dtype), dfg_shape_str(t->shape, s, sizeof(s)),
                         (long long)have, dfg_shape_str(n->attr->nf4.shape, w, sizeof(w)), dfg_dtype_name(dt),
                         (long long)want, rule);
}

/* inputs packed u8 (ceil(numel/2)), absmax f32 (ceil(numel/64)); or packed, absmax_q u8
 * (ceil(numel/64)), absmax2 f32 (ceil(numel/64/256)), offset f32 (one element). Any shapes with
 * those element counts (a loader may keep packed as (out, in/2)). -> (shape) of dtype dt. */
dfg_status dfg_infer_nf4_dequant(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_attrs_nf4 *a = &n->attr->nf4;
    char s[96];
    if (n->n_in != 2 && n->n_in != 4)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "takes 2 inputs (packed, absmax) or 4 (packed, absmax_q, absmax2, "
                                                "offset), not %d", n->n_in);
    if (a->dtype != DFG_F32 && a->dtype != DFG_BF16 && a->dtype != DFG_F16)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "output dtype %s: must be f32, bf16 or f16", dfg_dtype_name(a->dtype));
    bool dims_ok = a->shape.rank >= 0 && a->shape.rank <= DFG_MAX_RANK;
    for (int d = 0; dims_ok && d < a->shape.rank; d++) dims_ok = a->shape.d[d] >= 1 && a->shape.d[d] <= DFG_MAX_DIM;
    if (!dims_ok)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "output shape %s: every dim must be >= 1",
                             dfg_shape_str(a->shape, s, sizeof(s)));
    const int64_t numel = dfg_shape_numel(a->shape), nb = dfg_nf4_blocks(numel);
    dfg_status st = check_input(g, n, 0, "packed", DFG_U8, dfg_nf4_packed_bytes(numel), "ceil(numel / 2)");
    if (!st && !is_dq(n)) st = check_input(g, n, 1, "absmax", DFG_F32, nb, "ceil(numel / 64)");
    if (!st && is_dq(n)) st = check_input(g, n, 1, "absmax_q", DFG_U8, nb, "ceil(numel / 64)");
    if (!st && is_dq(n)) st = check_input(g, n, 2, "absmax2", DFG_F32, dfg_nf4_dq_blocks(numel), "ceil(numel / 64 / 256)");
    if (!st && is_dq(n)) st = check_input(g, n, 3, "offset", DFG_F32, 1, "one value");
    if (st) return st;
    out[0] = (dfg_out_spec){a->dtype, a->shape, -1, false};
    return DFG_OK;
}

static dfg_tensor *nf4_node(dfg_graph *g, dfg_tensor *const *in, int n_in, dfg_shape shape, dfg_dtype dt) {
    dfg_attrs a = {.nf4 = {.dtype = dt, .shape = shape}};
    return dfg_op_out(g, DFG_OP_NF4_DEQUANT, in, n_in, &a);
}

dfg_tensor *dfg_nf4_dequant(dfg_graph *g, dfg_tensor *packed, dfg_tensor *absmax, dfg_shape shape, dfg_dtype dt) {
    return nf4_node(g, (dfg_tensor *[]){packed, absmax}, 2, shape, dt);
}

dfg_tensor *dfg_nf4_dequant_dq(dfg_graph *g, dfg_tensor *packed, dfg_tensor *absmax_q, dfg_tensor *absmax2,
                               dfg_tensor *offset, dfg_shape shape, dfg_dtype dt) {
    return nf4_node(g, (dfg_tensor *[]){packed, absmax_q, absmax2, offset}, 4, shape, dt);
}
