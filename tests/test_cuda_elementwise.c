/* test_cuda_elementwise.c - the CUDA pointwise kernels (ops/cuda/elementwise.cu: binary with
 * broadcasting, unary, gelu_bwd, silu_bwd, where, cast, fill; ops/cuda/bias_gelu.cu) against the CPU
 * kernels.
 *
 * Through the harness (tests/cuda_harness.h): every op in f32 and bf16 (f16 too, as the "bf16"
 * run of cases whose builder maps bf16 to f16), on odd sizes (tails of the 16-byte vectors,
 * single elements, over a block) and on every broadcast pattern the launcher tells apart (same
 * shape, a row (C) over (rows, C) either way round, a column (rows, 1), a scalar, an outer
 * product, middle and many-dim broadcasts), with ties and integer edge values where the op has
 * rules for them. Directly (what the harness cannot arrange): outputs in an input's buffer (the
 * planner's in-place placement), operands one element off their alignment (the unvectorized
 * paths), grid-stride walks over many rows (a one-SM grid), and special values (NaN, inf, -0,
 * subnormals, rounding ties, saturation) compared with the CPU bit for bit (GELU and affine within
 * their rounding: see check_values; SiLU within its exp's: see kSiluRtol), and SiLU on |x| up to
 * 1e4 and 3e38. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/dtype.h"
#include "ops/cuda/cuda.h"

/* ---------------------------------------------------------------- cases */
typedef struct {
    dfg_op op;
    dfg_shape a, b, c; /* operand shapes (c: where's third) */
    dfg_dtype vt, ct;  /* value dtype when not the run's float dtype (DFG_DTYPE_COUNT: the run's); cond dtype */
    bool f16;          /* the bf16 run builds f16 instead */
    float p0, p1;      /* affine alpha/beta, clamp lo/hi, fill value */
    int fill;          /* which generator (below) */
} ew_case;

enum { FILL_DEFAULT, FILL_TIES, FILL_POS, FILL_WIDE, FILL_INT_EDGES, FILL_COND, FILL_CAST, FILL_HUGE };

static dfg_dtype run_dtype(const ew_case *c, dfg_dtype dt) {
    if (c->vt != DFG_DTYPE_COUNT) return c->vt;
    return dt == DFG_BF16 && c->f16 ? DFG_F16 : dt;
}

static dfg_tensor *binary_of(dfg_graph *g, dfg_op op, dfg_tensor *a, dfg_tensor *b) {
    switch (op) {
    case DFG_OP_ADD: return dfg_add(g, a, b);
    case DFG_OP_SUB: return dfg_sub(g, a, b);
    case DFG_OP_MUL: return dfg_mul(g, a, b);
    case DFG_OP_DIV: return dfg_div(g, a, b);
    case DFG_OP_MINIMUM: return dfg_minimum(g, a, b);
    case DFG_OP_MAXIMUM: return dfg_maximum(g, a, b);
    default: return dfg_equal(g, a, b);
    }
}

static dfg_node *build_ew(dfg_graph *g, dfg_dtype dt, void *user) {
    const ew_case *c = user;
    dfg_dtype t = run_dtype(c, dt);
    dfg_tensor *y = NULL;
    switch (c->op) {
    case DFG_OP_AFFINE: y = dfg_affine(g, dfg_input(g, "x", t, c->a), c->p0, c->p1); break;
    case DFG_OP_CLAMP: y = dfg_clamp(g, dfg_input(g, "x", t, c->a), c->p0, c->p1); break;
    case DFG_OP_EXP: y = dfg_exp(g, dfg_input(g, "x", t, c->a)); break;
    case DFG_OP_LOG: y = dfg_log(g, dfg_input(g, "x", t, c->a)); break;
    case DFG_OP_NEG: y = dfg_neg(g, dfg_input(g, "x", t, c->a)); break;
    case DFG_OP_SQRT: y = dfg_sqrt(g, dfg_input(g, "x", t, c->a)); break;
    case DFG_OP_GELU: y = dfg_gelu(g, dfg_input(g, "x", t, c->a)); break;
    case DFG_OP_SILU: y = dfg_silu(g, dfg_input(g, "x", t, c->a)); break;
    case DFG_OP_GELU_BWD:
    case DFG_OP_SILU_BWD:
    case DFG_OP_BIAS_GELU_BWD: {
        dfg_tensor *in[3] = {dfg_input(g, "dy", t, c->a), dfg_input(g, "x", t, c->a), dfg_input(g, "b", t, c->b)};
        y = dfg_op_out(g, c->op, in, c->op == DFG_OP_BIAS_GELU_BWD ? 3 : 2, NULL);
        break;
    }
    case DFG_OP_BIAS_GELU:
        y = dfg_op_out(g, c->op, (dfg_tensor *[]){dfg_input(g, "x", t, c->a), dfg_input(g, "b", t, c->b)}, 2, NULL);
        break;
    case DFG_OP_WHERE:
        y = dfg_where(g, dfg_input(g, "cond", c->ct, c->c), dfg_input(g, "a", t, c->a), dfg_input(g, "b", t, c->b));
        break;
    case DFG_OP_CAST: y = dfg_cast(g, dfg_input(g, "x", c->ct, c->a), t); break;
    case DFG_OP_FILL: y = dfg_fill(g, t, c->a, c->p0); break;
    default: y = binary_of(g, c->op, dfg_input(g, "a", t, c->a), dfg_input(g, "b", t, c->b)); break;
    }
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* Values in [-2, 2) mixed with a few that tie (min/max/equal must agree on ties), positive ones
 * for log and sqrt, wide ones for gelu's tails, integer edges (0, -1, INT_MIN: division and wrap
 * rules), where-conditions with 0, -0, NaN (true) and other truthy values, casts' ranges, and
 * magnitudes 1e-3 .. 1e4 of either sign for silu (its gradient's dy stays in [-2, 2)). */
static void fill_case(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const ew_case *c = user;
    int kind = c->fill;
    if (c->op == DFG_OP_WHERE && slot == 0) kind = FILL_COND;
    if (c->op == DFG_OP_SILU_BWD && slot == 0) kind = FILL_DEFAULT;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == DFG_U8) {
            ((uint8_t *)data)[i] = kind == FILL_CAST ? (uint8_t)dfg_test_int(0, 255) : (uint8_t)dfg_test_int(0, 1);
            continue;
        }
        if (t->dtype == DFG_I32) {
            static const int32_t edges[] = {0, 1, -1, 2, -2, 7, INT32_MAX, INT32_MIN, 255, 256, 16842753, -16842753};
            int32_t v = (int32_t)dfg_test_int(-5, 5);
            if (kind == FILL_INT_EDGES || kind == FILL_CAST) {
                int k = dfg_test_int(0, 15);
                v = k < 12 ? edges[k] : k == 12 ? (int32_t)(uint32_t)dfg_test_u64() : dfg_test_int(-300, 300);
                if (kind == FILL_CAST && c->vt == DFG_F16) v = dfg_test_int(-65504, 65504); /* no inf (as above) */
            } else if (kind == FILL_COND) {
                v = dfg_test_int(0, 2) == 0 ? 0 : dfg_test_int(-3, 3);
            }
            ((int32_t *)data)[i] = v;
            continue;
        }
        float v = dfg_test_uniform(-2.0f, 2.0f);
        if (c->op == DFG_OP_DIV && slot == 1 && kind == FILL_DEFAULT) /* no quotient past f16's range */
            v = (v < 0 ? -0.25f : 0.25f) + 0.875f * v;
        switch (kind) {
        case FILL_TIES: v = (float)dfg_test_int(-2, 2) * 0.5f; break; /* exact in bf16 and f16 */
        case FILL_POS: v = dfg_test_uniform(0.01f, 9.0f); break;
        case FILL_WIDE: v = dfg_test_uniform(-9.0f, 9.0f); break;
        case FILL_HUGE: v = (v < 0 ? -1.0f : 1.0f) * powf(10.0f, dfg_test_uniform(-3.0f, 4.0f)); break;
        case FILL_COND: {
            static const float conds[] = {0.0f, -0.0f, 1.0f, 0.5f, -2.0f, NAN};
            v = conds[dfg_test_int(0, 5)];
            break;
        }
        case FILL_CAST: {
            static const float scales[] = {1e-3f, 1.0f, 100.0f, 300.0f, 6e4f, 3e9f};
            /* f16 overflows to inf, which the harness cannot compare: the direct runs have it */
            v = dfg_test_uniform(-1.0f, 1.0f) * scales[dfg_test_int(0, c->vt == DFG_F16 ? 4 : 5)];
            break;
        }
        default: break;
        }
        ((float *)data)[i] = v;
    }
}

/* The tanh-approximated GELU and its derivative cancel for x below about -3 (1 + tanh(...) of
 * 1e-4 and less, from a tanh with a few ulp of 1.0 in error): there the CPU's own result is off
 * by up to 1e-6 (gelu) and 5.3e-6 (d gelu / dx, times dy) from the exact value of the formula, and
 * any other rounding of the same formula (FMA contraction on the GPU) differs by as much. Elsewhere
 * the f32 results agree to a few ulp. Measured over [-18, 18]: gelu needs atol 9.9e-7 beside rtol
 * 1e-5, the derivative 5.3e-6; with |dy| <= 9 that is 4.8e-5. */
static const double kGeluRtol = 1e-5, kGeluAtol = 5e-6, kGeluGradAtol = 1e-4;

/* SiLU: the CPU's e^-x is ops/cpu/fastmath.h's polynomial (under 1 ulp), the kernel's expf (2 ulp
 * on a GPU), and nvcc contracts x (1 - s) + 1 into an FMA: a few ulp apart, no cancellation but
 * at the zero of the derivative (x = -1.2785, where 1 + x (1 - s) cancels to about 1e-7 |dy|
 * absolute). Near x = -88.72, where e^-x overflows, one exp may give 2.6e-37 where the other
 * gives 0 (inside atol). */
static const double kSiluRtol = 1e-5, kSiluAtol = 1e-6, kSiluGradAtol = 1e-5;

static bool gelu_family(dfg_op op) {
    return op == DFG_OP_GELU || op == DFG_OP_GELU_BWD || op == DFG_OP_BIAS_GELU || op == DFG_OP_BIAS_GELU_BWD;
}

static void check(const char *what, ew_case c, bool bf16) {
    char label[200], sa[64], sb[64], sc[64];
    snprintf(label, sizeof(label), "%s %s %s %s%s", what, dfg_shape_str(c.a, sa, sizeof(sa)),
             dfg_shape_str(c.b, sb, sizeof(sb)), dfg_shape_str(c.c, sc, sizeof(sc)), c.f16 ? " (f16 run)" : "");
    cuda_case k = {.label = label, .build = build_ew, .user = &c, .fill = fill_case, .bf16 = bf16, .seeds = 2};
    if (c.op == DFG_OP_CAST || c.op == DFG_OP_FILL || c.op == DFG_OP_WHERE) k.rtol = 1e-30, k.atol = 1e-30; /* exact */
    if (gelu_family(c.op)) /* see kGeluAtol */
        k.rtol = kGeluRtol, k.atol = c.op == DFG_OP_GELU || c.op == DFG_OP_BIAS_GELU ? kGeluAtol : kGeluGradAtol;
    if (c.op == DFG_OP_SILU || c.op == DFG_OP_SILU_BWD)
        k.rtol = kSiluRtol, k.atol = c.op == DFG_OP_SILU ? kSiluAtol : kSiluGradAtol;
    cuda_check(&k);
}

#define S DFG_SHAPE
#define NONE ((dfg_shape){.rank = 0})

/* ---------------------------------------------------------------- direct runs */
typedef struct {
    dfg_program *p;
    dfg_node *n;
    void *mem[10];   /* allocations: inputs, then outputs */
    void *in[8], *out[2];
} direct;

static bool direct_make(direct *d, const ew_case *c, dfg_dtype dt, size_t misalign_elems) {
    memset(d, 0, sizeof(*d));
    d->n = cuda_node_alone(build_ew, (void *)c, dt, "direct", &d->p);
    if (!d->n) return false;
    for (int j = 0; j < d->n->n_in + d->n->n_out; j++) {
        const dfg_tensor *t = j < d->n->n_in ? d->n->in[j] : d->n->out[j - d->n->n_in];
        size_t off = misalign_elems * dfg_dtype_size(t->dtype);
        d->mem[j] = malloc(dfg_tensor_bytes(t) + off + 1);
        dfg_test_poison(d->mem[j], dfg_tensor_bytes(t) + off + 1);
        if (j < d->n->n_in) d->in[j] = (char *)d->mem[j] + off;
        else d->out[j - d->n->n_in] = (char *)d->mem[j] + off;
    }
    return true;
}

static void direct_free(direct *d) {
    for (int j = 0; j < 10; j++) free(d->mem[j]);
    dfg_program_free(d->p);
}

/* Fills every input from the case's generator, converted to the tensor's dtype. */
static void direct_fill(direct *d, const ew_case *c) {
    for (int j = 0; j < d->n->n_in; j++) {
        const dfg_tensor *t = d->n->in[j];
        int64_t n = dfg_tensor_numel(t);
        if (!dfg_is_float(t->dtype)) {
            fill_case(j, t, d->in[j], n, (void *)c);
            continue;
        }
        dfg_tensor f = *t;
        f.dtype = DFG_F32;
        float *tmp = malloc(sizeof(float) * (size_t)n);
        fill_case(j, &f, tmp, n, (void *)c);
        for (int64_t e = 0; e < n; e++) dfg_store(d->in[j], t->dtype, e, tmp[e]);
        free(tmp);
    }
}

/* one SM: 8 blocks of 256 threads, so the grid-stride walks wrap rows many times */
static bool emu_run(const dfg_node *n, void **in, void **out) {
    int flags = cuda_run_emulated(dfg_op_name(n->op), n, in, out, 1, 0);
    CHECK(flags <= 0, "%s: the emulated kernel flagged a bad value (%d)", dfg_op_name(n->op), flags);
    return flags == 0;
}

/* Elements of t that differ in their bits (NaN equals NaN, whatever the payload), or by more than
 * atol + rtol |a| where a tolerance is given. */
static int64_t diffs(const char *label, const dfg_tensor *t, const void *a, const void *b, double rtol, double atol) {
    int64_t bad = 0, n = dfg_tensor_numel(t);
    size_t es = dfg_dtype_size(t->dtype);
    for (int64_t e = 0; e < n; e++) {
        if (!memcmp((const char *)a + e * es, (const char *)b + e * es, es)) continue;
        double x = dfg_load(a, t->dtype, e), y = dfg_load(b, t->dtype, e);
        if (dfg_is_float(t->dtype) && isnan(x) && isnan(y)) continue;
        if ((rtol > 0 || atol > 0) && fabs(x - y) <= atol + rtol * fabs(x)) continue;
        if (!bad++)
            fprintf(stderr, "%s: element %lld: %.9g vs %.9g\n", label, (long long)e, dfg_load(a, t->dtype, e),
                    dfg_load(b, t->dtype, e));
    }
    return bad;
}

/* The output written over input `alias` (same shape and element size) equals the output in its
 * own buffer. */
static void check_inplace(const char *what, ew_case c, dfg_dtype dt, int alias) {
    direct d;
    if (!direct_make(&d, &c, dt, 0)) return;
    direct_fill(&d, &c);
    const dfg_tensor *x = d.n->in[alias], *y = d.n->out[0];
    CHECK(dfg_shape_equal(x->shape, y->shape) && dfg_dtype_size(x->dtype) == dfg_dtype_size(y->dtype),
          "%s: input %d cannot hold the output", what, alias);
    size_t bytes = dfg_tensor_bytes(y);
    void *shared = malloc(bytes), *in2[8], *out2[2] = {shared};
    memcpy(shared, d.in[alias], bytes);
    for (int j = 0; j < d.n->n_in; j++) in2[j] = j == alias ? shared : d.in[j];
    if (emu_run(d.n, d.in, d.out) && emu_run(d.n, in2, out2)) {
        char label[160];
        snprintf(label, sizeof(label), "%s (%s) in place over input %d", what, dfg_dtype_name(dt), alias);
        CHECK(diffs(label, y, d.out[0], shared, 0, 0) == 0, "%s differs from its run into a buffer of its own", label);
    }
    free(shared);
    direct_free(&d);
}

/* Operands one element off their 16-byte alignment (the scalar kernels) give the vectorized
 * kernels' bits. */
static void check_misaligned(const char *what, ew_case c, dfg_dtype dt) {
    direct a, m;
    if (!direct_make(&a, &c, dt, 0)) return;
    if (!direct_make(&m, &c, dt, 1)) {
        direct_free(&a);
        return;
    }
    direct_fill(&a, &c);
    for (int j = 0; j < a.n->n_in; j++) memcpy(m.in[j], a.in[j], dfg_tensor_bytes(a.n->in[j]));
    if (emu_run(a.n, a.in, a.out) && emu_run(m.n, m.in, m.out)) {
        char label[160];
        snprintf(label, sizeof(label), "%s (%s) misaligned", what, dfg_dtype_name(dt));
        CHECK(diffs(label, a.n->out[0], a.out[0], m.out[0], 0, 0) == 0, "%s differs from the aligned run", label);
    }
    direct_free(&a), direct_free(&m);
}

/* CPU and emulated kernel on the given values (stored as the input's dtype), or on the case's
 * random ones (vals NULL): bit for bit, or within rtol/atol where the kernel may round otherwise
 * (FMA contraction: nvcc contracts by default, and so does g++ for the emulated kernels with
 * -mfma, while the C reference does not). */
static void check_values(const char *what, ew_case c, const double *vals, int nv, double rtol, double atol) {
    direct d;
    if (!direct_make(&d, &c, DFG_F32, 0)) return;
    if (!vals) direct_fill(&d, &c);
    for (int j = 0; j < d.n->n_in && vals; j++) { /* input j: the values from offset 7 j on, cyclically */
        const dfg_tensor *t = d.n->in[j];
        for (int64_t e = 0; e < dfg_tensor_numel(t); e++) dfg_store(d.in[j], t->dtype, e, vals[(e + 7 * j) % nv]);
    }
    void *ref = malloc(dfg_tensor_bytes(d.n->out[0]) + 1), *cpu_out[2] = {ref};
    if (cuda_run_cpu(dfg_op_name(d.n->op), d.n, d.in, cpu_out) && emu_run(d.n, d.in, d.out)) {
        char label[160];
        snprintf(label, sizeof(label), "%s: %s -> %s", what, d.n->n_in ? dfg_dtype_name(d.n->in[0]->dtype) : "-",
                 dfg_dtype_name(d.n->out[0]->dtype));
        CHECK(diffs(label, d.n->out[0], ref, d.out[0], rtol, atol) == 0, "%s: CUDA differs from the CPU", label);
    }
    free(ref);
    direct_free(&d);
}

/* ---------------------------------------------------------------- the tests */
static const dfg_op binary_ops[] = {DFG_OP_ADD,     DFG_OP_SUB,     DFG_OP_MUL,  DFG_OP_DIV,
                                    DFG_OP_MINIMUM, DFG_OP_MAXIMUM, DFG_OP_EQUAL};

static void test_binary(void) {
    /* broadcast patterns: same shape (flat, vector tails), row either way round, column, scalar,
     * outer product, middle broadcasts (several outer dims), rank 6 */
    const dfg_shape pairs[][2] = {
        {S(1), S(1)},          {S(7), S(7)},           {S(64), S(64)},           {S(4099), S(4099)},
        {S(3, 5, 7), S(3, 5, 7)}, {S(5, 64), S(64)},   {S(7, 33), S(33)},        {S(33), S(7, 33)},
        {S(3, 1025), S(1025)}, {S(9, 40), S(9, 1)},    {S(9, 37), S(9, 1)},      {S(9, 1), S(9, 40)},
        {S(13, 7), NONE},      {NONE, S(1030)},        {NONE, NONE},             {S(6, 1), S(1, 40)},
        {S(4, 3, 16), S(4, 1, 16)}, {S(2, 3, 5, 8), S(3, 1, 8)}, {S(2, 1, 3), S(1, 4, 1)},
        {S(2, 1, 3, 1, 2, 5), S(1, 3, 1, 4, 1, 5)}, {S(1, 1, 300), S(2, 1, 1)},
    };
    const int np = (int)(sizeof(pairs) / sizeof(pairs[0]));
    for (size_t o = 0; o < sizeof(binary_ops) / sizeof(binary_ops[0]); o++) {
        dfg_op op = binary_ops[o];
        bool ties = op == DFG_OP_MINIMUM || op == DFG_OP_MAXIMUM || op == DFG_OP_EQUAL;
        for (int i = 0; i < np; i++) {
            ew_case c = {op, pairs[i][0], pairs[i][1], NONE, DFG_DTYPE_COUNT, DFG_F32, i % 3 == 2, 0, 0,
                         ties ? FILL_TIES : FILL_DEFAULT};
            check(dfg_op_name(op), c, true);
        }
        /* i32: wrap-around, division by 0 and -1 */
        const dfg_shape ip[][2] = {{S(4099), S(4099)}, {S(7, 33), S(33)}, {S(9, 8), S(9, 1)}, {S(2, 3, 5), S(3, 1)}};
        for (int i = 0; i < 4; i++) {
            ew_case c = {op, ip[i][0], ip[i][1], NONE, DFG_I32, DFG_F32, false, 0, 0, FILL_INT_EDGES};
            check(dfg_op_name(op), c, false);
        }
        ew_case same = {op, S(37), S(37), NONE, DFG_DTYPE_COUNT, DFG_F32, false, 0, 0, FILL_DEFAULT};
        check_inplace(dfg_op_name(op), same, DFG_F32, 0);
        check_inplace(dfg_op_name(op), same, op == DFG_OP_EQUAL ? DFG_F32 : DFG_BF16, 1); /* bf16 == is f32 */
        ew_case row = {op, S(5, 64), S(64), NONE, DFG_DTYPE_COUNT, DFG_F32, false, 0, 0, FILL_DEFAULT};
        check_inplace(dfg_op_name(op), row, DFG_F32, 0);
        check_misaligned(dfg_op_name(op), same, DFG_F32);
        check_misaligned(dfg_op_name(op), row, DFG_BF16);
    }
    /* grid-stride walks over many rows (8 blocks): every row length against the vector width */
    const dfg_shape walks[][2] = {{S(97, 37), S(37)}, {S(61, 1), S(61, 67)}, {S(5, 7, 61), S(7, 1)},
                                  {S(300, 8), S(8)},  {S(3, 2049), S(3, 1)},  {S(4, 1, 9, 11), S(5, 9, 1)}};
    for (int i = 0; i < 6; i++)
        for (int o = 0; o < 7; o++) {
            ew_case c = {binary_ops[o], walks[i][0], walks[i][1], NONE, DFG_F32, DFG_F32, false, 0, 0, FILL_DEFAULT};
            check_values("long walk", c, NULL, 0, 0, 0);
        }
    /* NaN: min/max take b when a comparison is false, equal is 0 */
    const double nan_vals[] = {NAN, 1.0, -1.0, NAN, 0.0, -0.0, INFINITY, NAN, 2.0, -INFINITY, 3.0};
    for (int o = 4; o < 7; o++) {
        ew_case c = {binary_ops[o], S(11, 13), S(13), NONE, DFG_F32, DFG_F32, false, 0, 0, FILL_DEFAULT};
        check_values("NaN operands", c, nan_vals, 11, 0, 0);
    }
}

static void test_unary(void) {
    const dfg_shape shapes[] = {S(1), S(7), S(64), S(1025), S(4099), S(3, 37)};
    struct { dfg_op op; float p0, p1; int fill; } ops[] = {
        {DFG_OP_AFFINE, 2.5f, -1.0f, FILL_DEFAULT}, {DFG_OP_AFFINE, 1.0f, 0.0f, FILL_DEFAULT},
        {DFG_OP_AFFINE, -0.3f, 3.0f, FILL_DEFAULT}, {DFG_OP_EXP, 0, 0, FILL_WIDE},
        {DFG_OP_LOG, 0, 0, FILL_POS},               {DFG_OP_NEG, 0, 0, FILL_DEFAULT},
        {DFG_OP_SQRT, 0, 0, FILL_POS},              {DFG_OP_CLAMP, -0.5f, 0.75f, FILL_DEFAULT},
        {DFG_OP_CLAMP, 0.25f, 0.25f, FILL_DEFAULT}, {DFG_OP_CLAMP, -1e30f, 0.3f, FILL_DEFAULT},
        {DFG_OP_GELU, 0, 0, FILL_DEFAULT},          {DFG_OP_GELU, 0, 0, FILL_WIDE},
        {DFG_OP_SILU, 0, 0, FILL_DEFAULT},          {DFG_OP_SILU, 0, 0, FILL_WIDE},
        {DFG_OP_SILU, 0, 0, FILL_HUGE},
    };
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        char what[64];
        snprintf(what, sizeof(what), "%s(%g, %g)", dfg_op_name(ops[o].op), ops[o].p0, ops[o].p1);
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
            ew_case c = {ops[o].op, shapes[i], NONE, NONE, DFG_DTYPE_COUNT, DFG_F32, i % 2 == 1, ops[o].p0, ops[o].p1,
                         ops[o].fill};
            check(what, c, true);
        }
        ew_case c = {ops[o].op, S(41), NONE, NONE, DFG_DTYPE_COUNT, DFG_F32, false, ops[o].p0, ops[o].p1, ops[o].fill};
        check_inplace(what, c, DFG_BF16, 0);
        check_misaligned(what, c, DFG_F32);
        check_misaligned(what, c, DFG_BF16);
    }
    /* i32 counters: computed in double, rounded to nearest even, saturated (INT_MIN negated) */
    struct { dfg_op op; float p0, p1; } iops[] = {{DFG_OP_AFFINE, 3.0f, 2.0f}, {DFG_OP_AFFINE, 0.5f, 0.0f},
                                                  {DFG_OP_AFFINE, -1.5f, 0.25f}, {DFG_OP_NEG, 0, 0},
                                                  {DFG_OP_CLAMP, -2.5f, 4.5f}};
    for (size_t o = 0; o < sizeof(iops) / sizeof(iops[0]); o++) {
        ew_case c = {iops[o].op, S(2, 1031), NONE, NONE, DFG_I32, DFG_F32, false, iops[o].p0, iops[o].p1,
                     FILL_INT_EDGES};
        check(dfg_op_name(iops[o].op), c, false);
        check_inplace(dfg_op_name(iops[o].op), c, DFG_F32, 0);
    }
    /* NaN and infinities through clamp and the rest */
    const double vals[] = {NAN, -INFINITY, INFINITY, -0.0, 0.0, 0.3, -0.6, 1e-30, 5.0, -5.0};
    const dfg_op all[] = {DFG_OP_CLAMP, DFG_OP_NEG,  DFG_OP_AFFINE, DFG_OP_GELU,
                          DFG_OP_EXP,   DFG_OP_SQRT, DFG_OP_LOG,    DFG_OP_SILU};
    for (size_t o = 0; o < sizeof(all) / sizeof(all[0]); o++) {
        ew_case c = {all[o], S(10), NONE, NONE, DFG_F32, DFG_F32, false, -0.5f, 0.25f, 0};
        bool gelu = all[o] == DFG_OP_GELU, affine = all[o] == DFG_OP_AFFINE; /* see check_values; gelu: below */
        bool silu = all[o] == DFG_OP_SILU;
        check_values("special values", c, vals, 10, gelu ? kGeluRtol : silu ? kSiluRtol : affine ? 1e-6 : 0,
                     gelu ? kGeluAtol : silu ? kSiluAtol : 0);
    }
}

static void test_gelu_bwd_bias_gelu(void) {
    const dfg_shape shapes[] = {S(1), S(7), S(64), S(1025), S(4099), S(3, 37)};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        ew_case c = {DFG_OP_GELU_BWD, shapes[i], NONE, NONE, DFG_DTYPE_COUNT, DFG_F32, i % 2 == 1, 0, 0,
                     i == 4 ? FILL_WIDE : FILL_DEFAULT};
        check("gelu_bwd", c, true);
    }
    ew_case g = {DFG_OP_GELU_BWD, S(45), NONE, NONE, DFG_DTYPE_COUNT, DFG_F32, false, 0, 0, FILL_DEFAULT};
    check_inplace("gelu_bwd", g, DFG_F32, 0);
    check_inplace("gelu_bwd", g, DFG_BF16, 1);
    check_misaligned("gelu_bwd", g, DFG_BF16);
    /* bias_gelu (fwd, bwd): rows x N with N a multiple of the vectors or not, one row, rank 3 */
    const dfg_shape xs[][2] = {{S(1, 1), S(1)},     {S(3, 64), S(64)},   {S(5, 37), S(37)}, {S(2, 1025), S(1025)},
                               {S(1, 4099), S(4099)}, {S(4, 3, 40), S(40)}, {S(300, 8), S(8)}};
    for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
        for (int bwd = 0; bwd < 2; bwd++) { /* wide values: not in an f16 run (its CPU reference is unrounded) */
            ew_case c = {bwd ? DFG_OP_BIAS_GELU_BWD : DFG_OP_BIAS_GELU, xs[i][0], xs[i][1], NONE, DFG_DTYPE_COUNT,
                         DFG_F32, i % 2 == 1, 0, 0, i == 2 ? FILL_WIDE : FILL_DEFAULT};
            check(bwd ? "bias_gelu_bwd" : "bias_gelu", c, true);
            check_misaligned(bwd ? "bias_gelu_bwd" : "bias_gelu", c, DFG_F32);
        }
    }
    for (int bwd = 0; bwd < 2; bwd++) { /* grid-stride walks over many rows */
        ew_case c = {bwd ? DFG_OP_BIAS_GELU_BWD : DFG_OP_BIAS_GELU, S(97, 37), S(37), NONE, DFG_F32, DFG_F32, false, 0,
                     0, FILL_DEFAULT};
        double atol = bwd ? kGeluGradAtol : kGeluAtol;
        check_values("bias_gelu long walk", c, NULL, 0, kGeluRtol, atol);
        c.a = S(301, 24), c.b = S(24);
        check_values("bias_gelu long walk", c, NULL, 0, kGeluRtol, atol);
    }
}

/* silu_bwd through the harness (odd sizes, wide and huge x), in place, misaligned; silu and silu_bwd
 * on magnitudes up to 1e4 and float's largest (finite, as the CPU's), the overflow edge of e^-x
 * (88.72), and both infinities (torch's inf and NaN, as the CPU's). */
static void test_silu(void) {
    const dfg_shape shapes[] = {S(1), S(7), S(64), S(1025), S(4099), S(3, 37)};
    const int fills[] = {FILL_DEFAULT, FILL_WIDE, FILL_HUGE};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int f = 0; f < 3; f++) {
            ew_case c = {DFG_OP_SILU_BWD, shapes[i], NONE, NONE, DFG_DTYPE_COUNT, DFG_F32, i % 2 == 1, 0, 0, fills[f]};
            check("silu_bwd", c, true);
        }
    ew_case g = {DFG_OP_SILU_BWD, S(45), NONE, NONE, DFG_DTYPE_COUNT, DFG_F32, false, 0, 0, FILL_HUGE};
    check_inplace("silu_bwd", g, DFG_F32, 0);
    check_inplace("silu_bwd", g, DFG_BF16, 1);
    check_misaligned("silu_bwd", g, DFG_F32);
    check_misaligned("silu_bwd", g, DFG_BF16);
    static const double big[] = {1e4,      -1e4,      3e38,   -3e38,    88.7,   -88.7,  88.73, -88.73, 87.0,
                                 -87.0,    100.0,     -100.0, 17.0,     -17.0,  30.0,   -30.0, 1e-38, -1e-38,
                                 -1.27846, 1.5,       -0.25,  INFINITY, -INFINITY, NAN, 0.0,   -0.0,  1e6};
    const int nb = (int)(sizeof(big) / sizeof(big[0]));
    ew_case f = {DFG_OP_SILU, S(2, nb), NONE, NONE, DFG_F32, DFG_F32, false, 0, 0, 0};
    check_values("silu large |x|", f, big, nb, kSiluRtol, kSiluAtol);
    /* silu_bwd: x from the list, dy in [-2, 2) (a huge dy at the derivative's zero would scale its
     * cancellation past any atol) */
    ew_case b = {DFG_OP_SILU_BWD, S(2, nb), NONE, NONE, DFG_F32, DFG_F32, false, 0, 0, FILL_DEFAULT};
    direct d;
    if (!direct_make(&d, &b, DFG_F32, 0)) return;
    direct_fill(&d, &b);
    for (int e = 0; e < 2 * nb; e++) ((float *)d.in[1])[e] = (float)big[e % nb];
    void *ref = malloc(dfg_tensor_bytes(d.n->out[0])), *cpu_out[2] = {ref};
    if (cuda_run_cpu(dfg_op_name(d.n->op), d.n, d.in, cpu_out) && emu_run(d.n, d.in, d.out)) {
        const float *r = ref, *x = d.in[1];
        int finite = 0;
        for (int e = 0; e < 2 * nb; e++) finite += isfinite(x[e]) ? isfinite(r[e]) : 1;
        CHECK(finite == 2 * nb, "silu_bwd large |x|: the CPU gives a non-finite gradient for a finite x");
        CHECK(diffs("silu_bwd large |x|", d.n->out[0], ref, d.out[0], kSiluRtol, kSiluGradAtol) == 0,
              "silu_bwd large |x|: CUDA differs from the CPU");
    }
    free(ref);
    direct_free(&d);
}

static void test_where(void) {
    /* cond, a, b */
    const dfg_shape sh[][3] = {
        {S(37), S(37), S(37)},         {S(4099), S(4099), S(4099)}, {S(9, 1), S(9, 40), NONE},
        {S(40), S(9, 1), S(9, 40)},    {S(3, 1, 5), S(1, 4, 5), S(3, 4, 1)}, {NONE, S(7, 9), S(9)},
        {S(2, 3, 1, 33), S(3, 4, 33), S(1)},
    };
    const dfg_dtype conds[] = {DFG_F32, DFG_I32, DFG_U8};
    /* values: f32 and bf16, f16 (as the bf16 run), i32, u8 */
    const dfg_dtype vals[] = {DFG_DTYPE_COUNT, DFG_DTYPE_COUNT, DFG_I32, DFG_U8};
    const char *vnames[] = {"f32/bf16", "f16", "i32", "u8"};
    for (size_t i = 0; i < sizeof(sh) / sizeof(sh[0]); i++)
        for (int c = 0; c < 3; c++)
            for (int v = 0; v < 4; v++) {
                if (v > 1 && (i + (size_t)c) % 2) continue; /* i32, u8 values with each cond, not on every shape */
                ew_case k = {DFG_OP_WHERE, sh[i][1], sh[i][2], sh[i][0], vals[v], conds[c], v == 1, 0, 0,
                             vals[v] == DFG_I32 ? FILL_INT_EDGES : FILL_DEFAULT};
                char what[64];
                snprintf(what, sizeof(what), "where cond %s values %s", dfg_dtype_name(conds[c]), vnames[v]);
                check(what, k, v < 2);
            }
    ew_case k = {DFG_OP_WHERE, S(45), S(45), S(45), DFG_DTYPE_COUNT, DFG_U8, false, 0, 0, FILL_DEFAULT};
    check_inplace("where", k, DFG_F32, 1);
    check_inplace("where", k, DFG_BF16, 2);
    const dfg_shape walks[][3] = {{S(97, 1), S(97, 37), S(37)}, {S(40, 6, 1), S(6, 33), S(40, 1, 33)}};
    for (int i = 0; i < 2; i++) {
        ew_case c = {DFG_OP_WHERE, walks[i][1], walks[i][2], walks[i][0], DFG_F32, DFG_F32, false, 0, 0, FILL_DEFAULT};
        check_values("where long walk", c, NULL, 0, 0, 0);
    }
    ew_case m = {DFG_OP_WHERE, S(3, 48), S(48), S(3, 48), DFG_DTYPE_COUNT, DFG_F32, false, 0, 0, FILL_DEFAULT};
    check_misaligned("where", m, DFG_F32);
    check_misaligned("where", m, DFG_BF16);
}

static void test_cast_fill(void) {
    const dfg_dtype all[] = {DFG_F32, DFG_BF16, DFG_F16, DFG_I32, DFG_U8};
    /* through the harness: sources it can generate (f32, i32, u8), to every dtype, odd sizes */
    const dfg_shape shapes[] = {S(1), S(67), S(3, 1031)};
    for (int f = 0; f < 5; f++)
        for (int t = 0; t < 5; t++) {
            if (all[f] == DFG_BF16 || all[f] == DFG_F16) continue;
            for (int s = 0; s < 3; s++) {
                ew_case c = {DFG_OP_CAST, shapes[s], NONE, NONE, all[t], all[f], false, 0, 0, FILL_CAST};
                char what[64];
                snprintf(what, sizeof(what), "cast %s -> %s", dfg_dtype_name(all[f]), dfg_dtype_name(all[t]));
                check(what, c, false);
            }
        }
    /* every pair bit for bit on special values: NaN, inf, -0, subnormals (f32, f16), rounding ties
     * of bf16 and f16, saturation at 255 / 2^31 / 65520, i32 -> bf16 rounded twice through f32 */
    const double specials[] = {0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 255.0, 255.5, 256.0, -0.7, 1e-40,
                               6e-8, 3e-8, 65504.0, 65519.0, 65520.0, 1e10, -1e10, 2147483520.0, 2147483648.0,
                               -2147483648.0, -3e9, INFINITY, -INFINITY, NAN, 1.00390625, 1.01171875,
                               1.0009765625, 16777217.0, 16842753.0, -16842753.0, 33554435.0, 0.1, 3.14159};
    const int ns = (int)(sizeof(specials) / sizeof(specials[0]));
    for (int f = 0; f < 5; f++)
        for (int t = 0; t < 5; t++) {
            ew_case c = {DFG_OP_CAST, S(3, ns), NONE, NONE, all[t], all[f], false, 0, 0, 0};
            check_values("cast", c, specials, ns, 0, 0);
            if (f != t) check_misaligned("cast", c, DFG_F32);
        }
    /* fill: every dtype, values that round, saturate, overflow f16 */
    const float values[] = {0.0f, 1.5f, -3.7f, 300.25f, 1e10f, -1e10f, 65519.0f, 2.5f};
    for (int t = 0; t < 5; t++)
        for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
            if (all[t] == DFG_F16 && fabsf(values[v]) > 65504.0f) continue; /* inf: below, bit for bit */
            ew_case c = {DFG_OP_FILL, v % 2 ? S(1031) : S(3, 8), NONE, NONE, all[t], DFG_F32, false, values[v], 0, 0};
            char what[64];
            snprintf(what, sizeof(what), "fill %s %g", dfg_dtype_name(all[t]), values[v]);
            check(what, c, false);
        }
    const float odd[] = {NAN, INFINITY, -INFINITY, 65520.0f, -0.0f, 1e-30f, 255.5f};
    for (int t = 0; t < 5; t++)
        for (size_t v = 0; v < sizeof(odd) / sizeof(odd[0]); v++) {
            ew_case c = {DFG_OP_FILL, S(21), NONE, NONE, all[t], DFG_F32, false, odd[v], 0, 0};
            check_values("fill", c, NULL, 1, 0, 0);
        }
}

int main(void) {
    if (!cuda_test_begin("test_cuda_elementwise")) return DFG_TEST_SKIP;
    test_binary();
    test_unary();
    test_gelu_bwd_bias_gelu();
    test_silu();
    test_where();
    test_cast_fill();
    return cuda_test_end();
}
