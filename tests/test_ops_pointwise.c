/* test_ops_pointwise.c - forward values of the pointwise, layout and reduction ops on the CPU
 * runtime, each against a naive reference written here: binary ops with broadcasting (f32 and
 * wrapping i32), equal, where, cast rounding, fill, reshape, permute, slice, concat, expand,
 * sum/mean/masked_sum, argmax, GELU (plain and fused with a bias) against the formula in
 * double precision, and SiLU with its gradient (through dfg_backward) against double precision
 * on |x| up to 1e4 and float's largest. Other gradients are checked elsewhere (test_gradcheck*.c). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "ops/cpu/fastmath.h"
#include "testutil.h"

static float *rnd(int64_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * (size_t)n);
    dfg_test_fill_uniform(x, n, lo, hi);
    return x;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof(a)) == 0; }

/* Flat index into a tensor of shape `in` that numpy broadcasting reads for output element i. */
static int64_t bcast_index(dfg_shape out, dfg_shape in, int64_t i) {
    int64_t idx = 0, stride = 1;
    for (int d = out.rank - 1; d >= 0; d--) {
        int64_t c = i % out.d[d];
        i /= out.d[d];
        int id = in.rank - out.rank + d;
        if (id < 0) continue;
        if (in.d[id] != 1) idx += c * stride;
        stride *= in.d[id];
    }
    return idx;
}

static bool shape_is(dfg_shape s, dfg_shape want) {
    if (s.rank != want.rank) return false;
    for (int i = 0; i < s.rank; i++)
        if (s.d[i] != want.d[i]) return false;
    return true;
}

/* ---------------------------------------------------------------- binary f32 with broadcasting */
static float ref_f32(int op, float a, float b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return a < b ? a : b;
    case 5: return a > b ? a : b;
    default: return a == b ? 1.0f : 0.0f;
    }
}

static void test_binary_f32(void) {
    static const char *names[7] = {"add", "sub", "mul", "div", "minimum", "maximum", "equal"};
    dfg_shape pairs[4][3] = {
        {DFG_SHAPE(2, 3, 4), DFG_SHAPE(4), DFG_SHAPE(2, 3, 4)},
        {DFG_SHAPE(2, 1, 4), DFG_SHAPE(3, 1), DFG_SHAPE(2, 3, 4)},
        {DFG_SHAPE(1), DFG_SHAPE(2, 3), DFG_SHAPE(2, 3)},
        {DFG_SCALAR, DFG_SHAPE(5, 1), DFG_SHAPE(5, 1)},
    };
    for (int pi = 0; pi < 4; pi++) {
        dfg_shape sa = pairs[pi][0], sb = pairs[pi][1], so = pairs[pi][2];
        int64_t na = dfg_shape_numel(sa), nb = dfg_shape_numel(sb), no = dfg_shape_numel(so);
        float *a = malloc(sizeof(float) * (size_t)na), *b = malloc(sizeof(float) * (size_t)nb);
        /* small integers collide often, so equal/minimum/maximum see ties; b is never 0 */
        for (int64_t i = 0; i < na; i++) a[i] = (float)dfg_test_int(-3, 3) * 0.5f;
        for (int64_t i = 0; i < nb; i++) b[i] = (float)(dfg_test_int(1, 3) * (dfg_test_int(0, 1) ? 1 : -1)) * 0.5f;
        dfg_fx f;
        dfg_fx_begin(&f, "binary_f32");
        dfg_tensor *ta = dfg_fx_const_f32(&f, "a", sa, a), *tb = dfg_fx_const_f32(&f, "b", sb, b);
        dfg_tensor *(*fn[7])(dfg_graph *, dfg_tensor *, dfg_tensor *) = {dfg_add,     dfg_sub,     dfg_mul, dfg_div,
                                                                          dfg_minimum, dfg_maximum, dfg_equal};
        for (int op = 0; op < 7; op++) {
            dfg_tensor *y = dfg_output(f.g, fn[op](f.g, ta, tb), names[op]);
            CHECK(shape_is(dfg_tensor_shape(y), so), "%s: broadcast shape of pair %d", names[op], pi);
            CHECK(dfg_tensor_dtype(y) == DFG_F32, "%s: dtype", names[op]);
        }
        if (dfg_fx_run(&f)) {
            float *y = malloc(sizeof(float) * (size_t)no);
            for (int op = 0; op < 7; op++) {
                dfg_fx_read(&f, names[op], y, sizeof(float) * (size_t)no);
                int bad = 0;
                for (int64_t i = 0; i < no; i++) {
                    float want = ref_f32(op, a[bcast_index(so, sa, i)], b[bcast_index(so, sb, i)]);
                    if (!same_bits(y[i], want)) bad++;
                }
                CHECK(bad == 0, "%s pair %d: %d of %lld elements differ from a single IEEE op", names[op], pi, bad,
                      (long long)no);
            }
            free(y);
        }
        dfg_fx_end(&f);
        free(a), free(b);
    }
}

/* ---------------------------------------------------------------- binary i32: wraps, x/0 == 0 */
static int32_t wrap(uint32_t u) { return (int32_t)u; }

static int32_t ref_i32(int op, int32_t a, int32_t b) {
    switch (op) {
    case 0: return wrap((uint32_t)a + (uint32_t)b);
    case 1: return wrap((uint32_t)a - (uint32_t)b);
    case 2: return wrap((uint32_t)a * (uint32_t)b);
    case 3: return b == 0 ? 0 : (a == INT32_MIN && b == -1) ? INT32_MIN : a / b;
    case 4: return a < b ? a : b;
    default: return a > b ? a : b;
    }
}

static void test_binary_i32(void) {
    static const char *names[6] = {"add", "sub", "mul", "div", "minimum", "maximum"};
    dfg_tensor *(*fn[6])(dfg_graph *, dfg_tensor *, dfg_tensor *) = {dfg_add, dfg_sub, dfg_mul,
                                                                      dfg_div, dfg_minimum, dfg_maximum};
    /* a (4,1) against b (5): every a meets every b, including the overflow and /0 corners */
    const int32_t a[4] = {INT32_MAX, INT32_MIN, -7, dfg_test_int(-1000, 1000)};
    const int32_t b[5] = {1, -1, 0, 2, 65536};
    dfg_fx f;
    dfg_fx_begin(&f, "binary_i32");
    dfg_tensor *ta = dfg_const(f.p, "a", DFG_I32, DFG_SHAPE(4, 1), a);
    dfg_tensor *tb = dfg_const(f.p, "b", DFG_I32, DFG_SHAPE(5), b);
    for (int op = 0; op < 6; op++) {
        dfg_tensor *y = dfg_output(f.g, fn[op](f.g, ta, tb), names[op]);
        CHECK(dfg_tensor_dtype(y) == DFG_I32 && shape_is(dfg_tensor_shape(y), DFG_SHAPE(4, 5)), "%s: i32 (4,5)",
              names[op]);
    }
    dfg_tensor *eq = dfg_output(f.g, dfg_equal(f.g, ta, dfg_const(f.p, "c", DFG_I32, DFG_SHAPE(1), &a[2])), "eq");
    CHECK(dfg_tensor_dtype(eq) == DFG_F32, "equal of i32 gives f32");
    if (dfg_fx_run(&f)) {
        int32_t y[6][20];
        for (int op = 0; op < 6; op++) {
            dfg_fx_read(&f, names[op], y[op], sizeof(y[op]));
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 5; j++)
                    CHECK(y[op][i * 5 + j] == ref_i32(op, a[i], b[j]), "%s(%d, %d) = %d, want %d", names[op], a[i],
                          b[j], y[op][i * 5 + j], ref_i32(op, a[i], b[j]));
        }
        /* the corners spelled out, so a reference with the same mistake cannot hide them */
        CHECK(y[0][0] == INT32_MIN, "INT32_MAX + 1 wraps to INT32_MIN, got %d", y[0][0]);
        CHECK(y[1][5 + 0] == INT32_MAX, "INT32_MIN - 1 wraps to INT32_MAX, got %d", y[1][5]);
        CHECK(y[2][3] == -2, "INT32_MAX * 2 wraps to -2, got %d", y[2][3]);
        CHECK(y[2][5 + 4] == 0, "INT32_MIN * 65536 wraps to 0, got %d", y[2][9]);
        CHECK(y[3][2] == 0 && y[3][5 + 2] == 0 && y[3][10 + 2] == 0, "x / 0 gives 0");
        CHECK(y[3][5 + 1] == INT32_MIN, "INT32_MIN / -1 wraps to INT32_MIN, got %d", y[3][6]);
        CHECK(y[3][10 + 3] == -3, "-7 / 2 truncates toward zero to -3, got %d", y[3][13]);
        float e[4];
        dfg_fx_read(&f, "eq", e, sizeof(e));
        CHECK(e[0] == 0.0f && e[1] == 0.0f && e[2] == 1.0f, "i32 equal: %g %g %g", e[0], e[1], e[2]);
        CHECK(e[3] == (a[3] == -7 ? 1.0f : 0.0f), "i32 equal of a random value");
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- where with f32, i32 and u8 conditions */
static void test_where(void) {
    const float cf[4] = {0.0f, -0.0f, NAN, 0.5f}; /* -0 is false, NaN is != 0 and so true */
    const int32_t ci[4] = {0, -1, 7, 0};
    const uint8_t cu[4] = {0, 255, 1, 0};
    float a[12], b[4];
    dfg_test_fill_uniform(a, 12, -1, 1);
    dfg_test_fill_uniform(b, 4, 2, 3);
    const int32_t ai[4] = {INT32_MIN, 5, INT32_MAX, 11}, bi[3] = {-9, 0, 9};
    dfg_fx f;
    dfg_fx_begin(&f, "where");
    /* b (4,1) is stretched along columns, so a flat index modulo its size would read it wrong */
    dfg_tensor *ta = dfg_fx_const_f32(&f, "a", DFG_SHAPE(4, 3), a), *tb = dfg_fx_const_f32(&f, "b", DFG_SHAPE(4, 1), b);
    dfg_tensor *conds[3] = {dfg_fx_const_f32(&f, "cf", DFG_SHAPE(4, 1), cf), dfg_const(f.p, "ci", DFG_I32, DFG_SHAPE(4, 1), ci),
                            dfg_const(f.p, "cu", DFG_U8, DFG_SHAPE(4, 1), cu)};
    static const char *nm[3] = {"wf", "wi", "wu"};
    for (int k = 0; k < 3; k++) dfg_output(f.g, dfg_where(f.g, conds[k], ta, tb), nm[k]);
    /* i32 values: cond (4,1), a (1,4,1), b (3): the result is (1,4,3) */
    dfg_output(f.g,
               dfg_where(f.g, conds[1], dfg_const(f.p, "ai", DFG_I32, DFG_SHAPE(1, 4, 1), ai),
                         dfg_const(f.p, "bi", DFG_I32, DFG_SHAPE(3), bi)),
               "wii");
    if (dfg_fx_run(&f)) {
        const bool truth[3][4] = {{false, false, true, true}, {false, true, true, false}, {false, true, true, false}};
        for (int k = 0; k < 3; k++) {
            float y[12];
            dfg_fx_read(&f, nm[k], y, sizeof(y));
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 3; c++) {
                    float want = truth[k][r] ? a[r * 3 + c] : b[r];
                    CHECK(same_bits(y[r * 3 + c], want), "%s[%d,%d] = %g, want %g", nm[k], r, c, y[r * 3 + c], want);
                }
        }
        int32_t yi[12];
        dfg_fx_read(&f, "wii", yi, sizeof(yi));
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++)
                CHECK(yi[r * 3 + c] == (truth[1][r] ? ai[r] : bi[c]), "i32 where[%d,%d] = %d", r, c, yi[r * 3 + c]);
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- cast: round to nearest even */
static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* An independent f16 decoder: value = (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024. */
static float f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}

static void test_cast(void) {
    enum { N = 17 };
    const float x[N] = {
        1.0f,
        1.0f + 0x1p-8f,                /* bf16: exactly half an ulp, even neighbour below */
        1.0f + 3 * 0x1p-9f,            /* bf16: 3/4 ulp, rounds up */
        1.0f + 0x1p-7f + 0x1p-8f,      /* bf16: half an ulp above an odd mantissa, rounds up to even */
        1.0f + 0x1p-11f,               /* f16: half an ulp, even below */
        1.0f + 3 * 0x1p-11f,           /* f16: half an ulp above an odd mantissa, up */
        65504.0f,                      /* f16 max */
        65519.0f,                      /* f16: below the midpoint to infinity, stays 65504 */
        65520.0f,                      /* f16: the midpoint, rounds to infinity */
        1e-8f,                         /* f16: below half the smallest subnormal: 0 */
        1e-5f,                         /* f16 subnormal 167.77 * 2^-24 -> 168 */
        3 * 0x1p-25f,                  /* f16: 1.5 subnormal ulps, up to 2 */
        0x1p-25f,                      /* f16: half the smallest subnormal, ties to 0 */
        -0.0f,
        bits_f32(0x7f800001u),         /* a NaN whose payload sits only in the low bits */
        INFINITY,
        bits_f32(0x7f7fffffu),         /* FLT_MAX: above bf16's max midpoint, to infinity */
    };
    const uint16_t want_bf16[N] = {0x3f80, 0x3f80, 0x3f81, 0x3f82, 0x3f80, 0x3f80, 0x4780, 0x4780, 0x4780,
                                   0x322c, 0x3728, 0x33c0, 0x3300, 0x8000, 0,      0x7f80, 0x7f80};
    const uint16_t want_f16[N] = {0x3c00, 0x3c04, 0x3c06, 0x3c0c, 0x3c00, 0x3c02, 0x7bff, 0x7bff, 0x7c00,
                                  0x0000, 0x00a8, 0x0002, 0x0000, 0x8000, 0,      0x7c00, 0x7c00};
    dfg_fx f;
    dfg_fx_begin(&f, "cast");
    dfg_tensor *tx = dfg_fx_const_f32(&f, "x", DFG_SHAPE(N), x);
    dfg_tensor *bf = dfg_output(f.g, dfg_cast(f.g, tx, DFG_BF16), "bf");
    dfg_tensor *hf = dfg_output(f.g, dfg_cast(f.g, tx, DFG_F16), "hf");
    dfg_output(f.g, dfg_cast(f.g, bf, DFG_F32), "bf_back");
    dfg_output(f.g, dfg_cast(f.g, hf, DFG_F32), "hf_back");
    /* 2^31 is the first float above INT32_MAX; 2147483520 the last one below it */
    const float xi[10] = {2.7f, -2.7f, 0.5f, -0.5f, 1e10f, -1e10f, NAN, 2147483520.0f, -0.0f, 2147483648.0f};
    dfg_output(f.g, dfg_cast(f.g, dfg_fx_const_f32(&f, "xi", DFG_SHAPE(10), xi), DFG_I32), "to_i32");
    const int32_t ii[3] = {16777217, -3, INT32_MIN};
    dfg_output(f.g, dfg_cast(f.g, dfg_const(f.p, "ii", DFG_I32, DFG_SHAPE(3), ii), DFG_F32), "from_i32");
    const float xu[4] = {300.0f, -5.0f, 3.9f, 255.0f};
    dfg_output(f.g, dfg_cast(f.g, dfg_fx_const_f32(&f, "xu", DFG_SHAPE(4), xu), DFG_U8), "to_u8");
    if (dfg_fx_run(&f)) {
        uint16_t b[N], h[N];
        float bb[N], hb[N];
        dfg_fx_read(&f, "bf", b, sizeof(b));
        dfg_fx_read(&f, "hf", h, sizeof(h));
        dfg_fx_read(&f, "bf_back", bb, sizeof(bb));
        dfg_fx_read(&f, "hf_back", hb, sizeof(hb));
        for (int i = 0; i < N; i++) {
            if (isnan(x[i])) {
                CHECK((b[i] & 0x7f80) == 0x7f80 && (b[i] & 0x7f), "bf16 of NaN must stay NaN, got 0x%04x", b[i]);
                CHECK((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff), "f16 of NaN must stay NaN, got 0x%04x", h[i]);
                CHECK(isnan(bb[i]) && isnan(hb[i]), "NaN round trip through bf16/f16 gives %g / %g", bb[i], hb[i]);
                continue;
            }
            CHECK(b[i] == want_bf16[i], "bf16(%a) = 0x%04x, want 0x%04x", (double)x[i], b[i], want_bf16[i]);
            CHECK(h[i] == want_f16[i], "f16(%a) = 0x%04x, want 0x%04x", (double)x[i], h[i], want_f16[i]);
            CHECK(same_bits(bb[i], bits_f32((uint32_t)want_bf16[i] << 16)), "bf16 -> f32 of 0x%04x gave %a",
                  want_bf16[i], (double)bb[i]);
            CHECK(same_bits(hb[i], f16_value(want_f16[i])), "f16 -> f32 of 0x%04x gave %a, want %a", want_f16[i],
                  (double)hb[i], (double)f16_value(want_f16[i]));
        }
        int32_t yi[10];
        dfg_fx_read(&f, "to_i32", yi, sizeof(yi));
        const int32_t want_i[10] = {2, -2, 0, 0, INT32_MAX, INT32_MIN, 0, 2147483520, 0, INT32_MAX};
        for (int i = 0; i < 10; i++)
            CHECK(yi[i] == want_i[i], "i32(%g) = %d, want %d (truncate, saturate, NaN -> 0)", xi[i], yi[i],
                  want_i[i]);
        float fi[3];
        dfg_fx_read(&f, "from_i32", fi, sizeof(fi));
        CHECK(fi[0] == 16777216.0f && fi[1] == -3.0f && fi[2] == -2147483648.0f, "i32 -> f32: %.1f %.1f %.1f",
              fi[0], fi[1], fi[2]);
        uint8_t yu[4];
        dfg_fx_read(&f, "to_u8", yu, sizeof(yu));
        CHECK(yu[0] == 255 && yu[1] == 0 && yu[2] == 3 && yu[3] == 255, "u8: %d %d %d %d", yu[0], yu[1], yu[2], yu[3]);
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- fill */
static void test_fill(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "fill");
    float v = dfg_test_uniform(-10, 10);
    dfg_output(f.g, dfg_fill(f.g, DFG_F32, DFG_SHAPE(2, 3, 5), v), "f");
    dfg_output(f.g, dfg_fill(f.g, DFG_I32, DFG_SHAPE(4), -7.0f), "i");
    dfg_output(f.g, dfg_fill(f.g, DFG_BF16, DFG_SHAPE(3), 1.0f + 3 * 0x1p-9f), "b");
    dfg_output(f.g, dfg_fill(f.g, DFG_U8, DFG_SHAPE(2), 200.0f), "u");
    dfg_tensor *s = dfg_output(f.g, dfg_fill(f.g, DFG_F32, DFG_SCALAR, -0.25f), "s");
    CHECK(dfg_tensor_shape(s).rank == 0, "a scalar fill has rank 0");
    if (dfg_fx_run(&f)) {
        float y[30], sc;
        int32_t yi[4];
        uint16_t yb[3];
        uint8_t yu[2];
        dfg_fx_read(&f, "f", y, sizeof(y));
        dfg_fx_read(&f, "i", yi, sizeof(yi));
        dfg_fx_read(&f, "b", yb, sizeof(yb));
        dfg_fx_read(&f, "u", yu, sizeof(yu));
        dfg_fx_read(&f, "s", &sc, sizeof(sc));
        for (int i = 0; i < 30; i++) CHECK(same_bits(y[i], v), "fill f32[%d] = %g, want %g", i, y[i], v);
        for (int i = 0; i < 4; i++) CHECK(yi[i] == -7, "fill i32[%d] = %d", i, yi[i]);
        for (int i = 0; i < 3; i++) CHECK(yb[i] == 0x3f81, "fill bf16[%d] = 0x%04x, want 0x3f81 (rounded)", i, yb[i]);
        CHECK(yu[0] == 200 && yu[1] == 200, "fill u8 = %d %d", yu[0], yu[1]);
        CHECK(sc == -0.25f, "scalar fill = %g", sc);
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- reshape, permute, slice, concat, expand */
/* Row-major coordinates of flat index i in shape s. */
static void unravel(dfg_shape s, int64_t i, int64_t *c) {
    for (int d = s.rank - 1; d >= 0; d--) c[d] = i % s.d[d], i /= s.d[d];
}
static int64_t ravel(dfg_shape s, const int64_t *c) {
    int64_t i = 0;
    for (int d = 0; d < s.rank; d++) i = i * s.d[d] + c[d];
    return i;
}

static void test_reshape_permute(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "layout");
    dfg_shape s3 = DFG_SHAPE(2, 3, 4), s4 = DFG_SHAPE(2, 3, 4, 5);
    float *x3 = rnd(24, -1, 1), *x4 = rnd(120, -1, 1);
    uint8_t u4[120];
    for (int i = 0; i < 120; i++) u4[i] = (uint8_t)dfg_test_int(0, 255);
    dfg_tensor *t3 = dfg_fx_const_f32(&f, "x3", s3, x3), *t4 = dfg_fx_const_f32(&f, "x4", s4, x4);
    dfg_tensor *r1 = dfg_output(f.g, dfg_reshape(f.g, t3, DFG_SHAPE(-1, 4)), "r1");
    dfg_tensor *r2 = dfg_output(f.g, dfg_reshape(f.g, t3, DFG_SHAPE(4, -1, 2)), "r2");
    CHECK(shape_is(dfg_tensor_shape(r1), DFG_SHAPE(6, 4)), "reshape (-1, 4) of 24 elements is (6, 4)");
    CHECK(shape_is(dfg_tensor_shape(r2), DFG_SHAPE(4, 3, 2)), "reshape (4, -1, 2) of 24 elements is (4, 3, 2)");
    const int p3[3] = {2, 0, 1}, p4[4] = {3, 1, 0, 2};
    dfg_tensor *y3 = dfg_output(f.g, dfg_permute(f.g, t3, p3), "p3");
    dfg_output(f.g, dfg_permute(f.g, t4, p4), "p4");
    dfg_output(f.g, dfg_permute(f.g, dfg_const(f.p, "u4", DFG_U8, s4, u4), p4), "p4u");
    dfg_output(f.g, dfg_transpose(f.g, t4, 0, -1), "tr");
    CHECK(shape_is(dfg_tensor_shape(y3), DFG_SHAPE(4, 2, 3)), "permute (2,0,1) of (2,3,4) is (4,2,3)");
    if (dfg_fx_run(&f)) {
        float y[120];
        dfg_fx_read(&f, "r1", y, 24 * sizeof(float));
        CHECK(memcmp(y, x3, 24 * sizeof(float)) == 0, "reshape keeps row-major order");
        dfg_fx_read(&f, "r2", y, 24 * sizeof(float));
        CHECK(memcmp(y, x3, 24 * sizeof(float)) == 0, "reshape with -1 in the middle keeps row-major order");
        int64_t c[6], ci[6];
        int bad = 0;
        dfg_shape o3 = DFG_SHAPE(4, 2, 3), o4 = DFG_SHAPE(5, 3, 2, 4), ot = DFG_SHAPE(5, 3, 4, 2);
        dfg_fx_read(&f, "p3", y, 24 * sizeof(float));
        for (int64_t i = 0; i < 24; i++) { /* out[c] = in[c'] with c'[perm[k]] = c[k] */
            unravel(o3, i, c);
            for (int k = 0; k < 3; k++) ci[p3[k]] = c[k];
            bad += !same_bits(y[i], x3[ravel(s3, ci)]);
        }
        CHECK(bad == 0, "3-D permute: %d wrong elements", bad);
        bad = 0;
        dfg_fx_read(&f, "p4", y, 120 * sizeof(float));
        for (int64_t i = 0; i < 120; i++) {
            unravel(o4, i, c);
            for (int k = 0; k < 4; k++) ci[p4[k]] = c[k];
            bad += !same_bits(y[i], x4[ravel(s4, ci)]);
        }
        CHECK(bad == 0, "4-D permute: %d wrong elements", bad);
        uint8_t yu[120];
        bad = 0;
        dfg_fx_read(&f, "p4u", yu, sizeof(yu));
        for (int64_t i = 0; i < 120; i++) {
            unravel(o4, i, c);
            for (int k = 0; k < 4; k++) ci[p4[k]] = c[k];
            bad += yu[i] != u4[ravel(s4, ci)];
        }
        CHECK(bad == 0, "4-D permute of 1-byte elements: %d wrong", bad);
        bad = 0;
        dfg_fx_read(&f, "tr", y, 120 * sizeof(float));
        for (int64_t i = 0; i < 120; i++) {
            unravel(ot, i, c);
            ci[0] = c[3], ci[1] = c[1], ci[2] = c[2], ci[3] = c[0];
            bad += !same_bits(y[i], x4[ravel(s4, ci)]);
        }
        CHECK(bad == 0, "transpose(0, -1): %d wrong elements", bad);
    }
    dfg_fx_end(&f);
    free(x3), free(x4);
}

static void test_slice_concat_expand(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "slice");
    dfg_shape sx = DFG_SHAPE(3, 5, 4);
    float *x = rnd(60, -1, 1), *a = rnd(6, -1, 1), *b = rnd(24, -1, 1), *c = rnd(12, -1, 1), *e = rnd(3, -1, 1);
    dfg_tensor *tx = dfg_fx_const_f32(&f, "x", sx, x);
    dfg_output(f.g, dfg_slice(f.g, tx, 1, 1, 3), "s1");  /* (3,3,4) */
    dfg_output(f.g, dfg_slice(f.g, tx, -1, 2, 2), "s2"); /* (3,5,2) */
    dfg_output(f.g, dfg_slice(f.g, tx, 0, 2, 1), "s0");  /* (1,5,4) */
    dfg_tensor *parts[3] = {dfg_fx_const_f32(&f, "a", DFG_SHAPE(2, 1, 3), a), dfg_fx_const_f32(&f, "b", DFG_SHAPE(2, 4, 3), b),
                            dfg_fx_const_f32(&f, "c", DFG_SHAPE(2, 2, 3), c)};
    dfg_tensor *cc = dfg_output(f.g, dfg_concat(f.g, parts, 3, 1), "cat");
    CHECK(shape_is(dfg_tensor_shape(cc), DFG_SHAPE(2, 7, 3)), "concat along axis 1 sums the lengths");
    dfg_tensor *lastp[3] = {parts[1], dfg_slice(f.g, parts[1], 2, 0, 1), parts[1]};
    dfg_output(f.g, dfg_concat(f.g, lastp, 3, -1), "cat_last"); /* (2,4,7) */
    dfg_tensor *te = dfg_fx_const_f32(&f, "e", DFG_SHAPE(3, 1), e);
    dfg_output(f.g, dfg_expand(f.g, te, DFG_SHAPE(2, 3, 4)), "ex");
    dfg_output(f.g, dfg_expand(f.g, dfg_reshape(f.g, te, DFG_SHAPE(3)), DFG_SHAPE(4, 3)), "ex2");
    if (dfg_fx_run(&f)) {
        float y[64];
        int bad = 0;
        dfg_fx_read(&f, "s1", y, 36 * sizeof(float));
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++) bad += !same_bits(y[(i * 3 + j) * 4 + k], x[(i * 5 + j + 1) * 4 + k]);
        dfg_fx_read(&f, "s2", y, 30 * sizeof(float));
        for (int i = 0; i < 15; i++)
            for (int k = 0; k < 2; k++) bad += !same_bits(y[i * 2 + k], x[i * 4 + 2 + k]);
        dfg_fx_read(&f, "s0", y, 20 * sizeof(float));
        bad += memcmp(y, x + 40, 20 * sizeof(float)) != 0;
        CHECK(bad == 0, "slice: %d wrong", bad);
        bad = 0;
        dfg_fx_read(&f, "cat", y, 42 * sizeof(float));
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 7; j++)
                for (int k = 0; k < 3; k++) {
                    float want = j < 1 ? a[i * 3 + k] : j < 5 ? b[(i * 4 + j - 1) * 3 + k] : c[(i * 2 + j - 5) * 3 + k];
                    bad += !same_bits(y[(i * 7 + j) * 3 + k], want);
                }
        CHECK(bad == 0, "concat of 3 inputs along axis 1: %d wrong", bad);
        bad = 0;
        dfg_fx_read(&f, "cat_last", y, 56 * sizeof(float));
        for (int r = 0; r < 8; r++)
            for (int k = 0; k < 7; k++) {
                float want = k < 3 ? b[r * 3 + k] : k == 3 ? b[r * 3] : b[r * 3 + k - 4];
                bad += !same_bits(y[r * 7 + k], want);
            }
        CHECK(bad == 0, "concat along the last axis: %d wrong", bad);
        bad = 0;
        dfg_fx_read(&f, "ex", y, 24 * sizeof(float));
        for (int i = 0; i < 24; i++) bad += !same_bits(y[i], e[(i / 4) % 3]);
        dfg_fx_read(&f, "ex2", y, 12 * sizeof(float));
        for (int i = 0; i < 12; i++) bad += !same_bits(y[i], e[i % 3]);
        CHECK(bad == 0, "expand: %d wrong", bad);
    }
    dfg_fx_end(&f);
    free(x), free(a), free(b), free(c), free(e);
}

/* ---------------------------------------------------------------- reductions */
static void test_reduce(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "reduce");
    enum { A = 3, B = 4, C = 5 };
    dfg_shape sx = DFG_SHAPE(A, B, C);
    float *x = rnd(A * B * C, -2, 2), m1[B * C], m2[A * B];
    for (int i = 0; i < B * C; i++) m1[i] = (float)dfg_test_int(0, 2) * 0.5f; /* 0, 0.5, 1 */
    for (int i = 0; i < A * B; i++) m2[i] = (float)dfg_test_int(0, 1);
    dfg_tensor *tx = dfg_fx_const_f32(&f, "x", sx, x);
    dfg_output(f.g, dfg_sum(f.g, tx, 0), "sum0");  /* (B,C) */
    dfg_output(f.g, dfg_sum(f.g, tx, 1), "sum1");  /* (A,C) */
    dfg_output(f.g, dfg_sum(f.g, tx, -1), "sum2"); /* (A,B) */
    dfg_tensor *k = dfg_output(f.g, dfg_sum_keepdim(f.g, tx, 1), "sumk");
    CHECK(shape_is(dfg_tensor_shape(k), DFG_SHAPE(A, 1, C)), "sum_keepdim keeps a 1");
    dfg_output(f.g, dfg_mean(f.g, tx, 1), "mean1");
    dfg_output(f.g, dfg_mean(f.g, tx, -3), "mean0");
    dfg_output(f.g, dfg_masked_sum(f.g, tx, dfg_fx_const_f32(&f, "m1", DFG_SHAPE(B, C), m1), 1), "ms1");      /* (A,C) */
    dfg_output(f.g, dfg_masked_sum(f.g, tx, dfg_fx_const_f32(&f, "m2", DFG_SHAPE(A, B, 1), m2), -1), "ms2");  /* (A,B) */
    if (dfg_fx_run(&f)) {
        /* r[0]: sum over axis 0 (B,C); r[1]: over axis 1 (A,C); r[2]: masked over axis 1 (A,C) */
        double r[3][B * C] = {{0}}, rs[A * B] = {0}, rm[A * B] = {0};
        for (int i = 0; i < A; i++)
            for (int j = 0; j < B; j++)
                for (int l = 0; l < C; l++) {
                    double v = x[(i * B + j) * C + l];
                    r[0][j * C + l] += v;
                    r[1][i * C + l] += v;
                    rs[i * B + j] += v;
                    r[2][i * C + l] += v * m1[j * C + l];
                    rm[i * B + j] += v * m2[i * B + j];
                }
        float y[64];
        double err = 0;
        dfg_fx_read(&f, "sum0", y, B * C * sizeof(float));
        for (int i = 0; i < B * C; i++) err = fmax(err, fabs(y[i] - r[0][i]));
        dfg_fx_read(&f, "sum1", y, A * C * sizeof(float));
        for (int i = 0; i < A * C; i++) err = fmax(err, fabs(y[i] - r[1][i]));
        dfg_fx_read(&f, "sumk", y, A * C * sizeof(float));
        for (int i = 0; i < A * C; i++) err = fmax(err, fabs(y[i] - r[1][i]));
        dfg_fx_read(&f, "sum2", y, A * B * sizeof(float));
        for (int i = 0; i < A * B; i++) err = fmax(err, fabs(y[i] - rs[i]));
        dfg_fx_read(&f, "mean1", y, A * C * sizeof(float));
        for (int i = 0; i < A * C; i++) err = fmax(err, fabs(y[i] - r[1][i] / B));
        dfg_fx_read(&f, "mean0", y, B * C * sizeof(float));
        for (int i = 0; i < B * C; i++) err = fmax(err, fabs(y[i] - r[0][i] / A));
        dfg_fx_read(&f, "ms1", y, A * C * sizeof(float));
        for (int i = 0; i < A * C; i++) err = fmax(err, fabs(y[i] - r[2][i]));
        dfg_fx_read(&f, "ms2", y, A * B * sizeof(float));
        for (int i = 0; i < A * B; i++) err = fmax(err, fabs(y[i] - rm[i]));
        CHECK(err < 1e-5, "sum/mean/masked_sum max error %g (or NaN)", err);
    }
    dfg_fx_end(&f);
    free(x);
}

static void test_argmax(void) {
    enum { R = 6, V = 7 };
    float x[R * V];
    dfg_test_fill_uniform(x, R * V, -1, 1);
    /* ties: the first maximum wins, wherever the tied values sit */
    const float t0[V] = {1, 3, 3, 2, 0, 3, -1}, t1[V] = {5, 5, 5, 5, 5, 5, 5};
    const float t2[V] = {-INFINITY, -INFINITY, -2, -INFINITY, -2, -3, -2};
    memcpy(x, t0, sizeof(t0)), memcpy(x + V, t1, sizeof(t1)), memcpy(x + 2 * V, t2, sizeof(t2));
    x[3 * V + V - 1] = 9.0f; /* a maximum in the last column */
    dfg_fx f;
    dfg_fx_begin(&f, "argmax");
    dfg_tensor *y = dfg_output(f.g, dfg_argmax(f.g, dfg_fx_const_f32(&f, "x", DFG_SHAPE(2, 3, V), x)), "am");
    CHECK(dfg_tensor_dtype(y) == DFG_I32 && shape_is(dfg_tensor_shape(y), DFG_SHAPE(2, 3)), "argmax: i32 (2,3)");
    if (dfg_fx_run(&f)) {
        int32_t am[R];
        dfg_fx_read(&f, "am", am, sizeof(am));
        for (int r = 0; r < R; r++) {
            int best = 0;
            for (int j = 1; j < V; j++)
                if (x[r * V + j] > x[r * V + best]) best = j;
            CHECK(am[r] == best, "argmax row %d = %d, want %d", r, am[r], best);
        }
        CHECK(am[0] == 1 && am[1] == 0 && am[2] == 2 && am[3] == V - 1, "tie rows: %d %d %d %d", am[0], am[1], am[2],
              am[3]);
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- GELU against double precision */
static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* The CPU kernels use a rational tanh (ops/cpu/fastmath.h), not libm's: over the whole range,
 * saturated tails and tiny inputs included, the error must stay within a float rounding of the
 * result plus what an error of 4e-7 in tanh (about 3 ulp near 1) gives: 0.5 |x| 4e-7. (On the
 * negative side 1 + tanh cancels, so no float tanh, libm's included, is accurate relative to
 * the result there.) Returns the worst error as a multiple of that bound. */
static double gelu_error(double x, float y) {
    double want = gelu_ref(x), bound = 0.5 * fabs(x) * 4e-7 + 4.0 * FLT_EPSILON * fabs(want) + 1e-37;
    return fabs((double)y - want) / bound;
}

static void test_gelu(void) {
    enum { R = 64, C = 48 };
    static const float special[] = {0.0f, 1e-6f, -1e-6f, 3.9e-4f, -4.1e-4f, 0.5f, -0.5f, 3.0f, -3.0f,
                                    7.9f, -7.9f, 8.5f, -8.5f, 30.0f, -30.0f, 1e-30f};
    float *x = rnd(R * C, -12.0f, 12.0f), *b = rnd(C, -1.0f, 1.0f);
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) x[i * 7] = special[i];
    dfg_fx f;
    dfg_fx_begin(&f, "gelu");
    dfg_tensor *tx = dfg_fx_const_f32(&f, "x", DFG_SHAPE(R, C), x), *tb = dfg_fx_const_f32(&f, "b", DFG_SHAPE(C), b);
    dfg_output(f.g, dfg_gelu(f.g, tx), "gelu");
    dfg_output(f.g, dfg_gelu(f.g, dfg_bias_add(f.g, tx, tb)), "bias_gelu"); /* fused by the fuse pass */
    if (dfg_fx_run(&f)) {
        float y[R * C], z[R * C];
        dfg_fx_read(&f, "gelu", y, sizeof(y));
        dfg_fx_read(&f, "bias_gelu", z, sizeof(z));
        double worst_y = 0, worst_z = 0;
        for (int i = 0; i < R * C; i++) {
            worst_y = fmax(worst_y, gelu_error(x[i], y[i]));
            worst_z = fmax(worst_z, gelu_error((double)(x[i] + b[i % C]), z[i])); /* the kernel adds in float */
        }
        CHECK(worst_y <= 1.0, "gelu: error %.3g x the bound against double precision", worst_y);
        CHECK(worst_z <= 1.0, "bias_gelu: error %.3g x the bound against double precision", worst_z);
    }
    dfg_fx_end(&f);
    free(x), free(b);
}

/* ---------------------------------------------------------------- SiLU against double precision */
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }
static double silu_grad_ref(double x) {
    double s = 1.0 / (1.0 + exp(-x)), sc = 1.0 / (1.0 + exp(x)); /* sigmoid(x), sigmoid(-x) = 1 - s */
    return s * (1.0 + x * sc);
}

/* y = silu(x) and dx = dy silu'(x) from the graph's loss sum(silu(x) dy) (autodiff's silu_bwd),
 * over magnitudes 1e-6 .. 1e4 of both signs and edges (e^-x overflowing at x = -88.72, float's
 * largest, the zero of the derivative at -1.2785): within a few float roundings of the result,
 * plus 3e-37 (times |dy| for the gradient) where e^-x overflows and the result (under 2.6e-37)
 * flushes to -0; every output of a finite input finite. Infinities as torch: silu(inf) = inf,
 * silu(-inf) = NaN, NaN gradients. Prints the worst relative errors where the result is normal. */
static void test_silu(void) {
    enum { N = 4096 };
    static const float special[] = {0.0f,   -0.0f,  1e-30f,  -1e-30f, 1e4f,    -1e4f,    3e38f,     -3e38f,
                                    88.7f,  -88.7f, 88.73f,  -88.73f, -87.3f,  -100.0f,  100.0f,    17.0f,
                                    -17.0f, 30.0f,  -30.0f,  -1.2785f, 1.0f,   -1.0f,    1e-6f,     -1e-6f};
    const int ns = (int)(sizeof(special) / sizeof(special[0]));
    float *x = malloc(sizeof(float) * N), *dy = rnd(N, -2.0f, 2.0f);
    for (int i = 0; i < N; i++)
        x[i] = (dfg_test_int(0, 1) ? 1.0f : -1.0f) * powf(10.0f, dfg_test_uniform(-6.0f, 4.0f));
    for (int i = 0; i < ns; i++) x[i * 11] = special[i];
    x[N - 2] = INFINITY, x[N - 1] = -INFINITY;
    dfg_fx f;
    dfg_fx_begin(&f, "silu");
    dfg_tensor *tx = dfg_param(f.p, "x", DFG_F32, DFG_SHAPE(N), dfg_init_zeros());
    dfg_tensor *tdy = dfg_fx_const_f32(&f, "dy", DFG_SHAPE(N), dy), *dx = NULL;
    dfg_tensor *y = dfg_silu(f.g, tx);
    CHECK(dfg_backward(f.g, dfg_sum(f.g, dfg_mul(f.g, y, tdy), 0), &tx, 1, &dx) == DFG_OK, "silu backward: %s",
          dfg_graph_error(f.g));
    dfg_output(f.g, y, "y");
    dfg_output(f.g, dx, "dx");
    if (dfg_fx_create(&f, 1)) {
        dfg_fx_write(&f, "x", x, sizeof(float) * N);
        float *yv = malloc(sizeof(float) * N), *dxv = malloc(sizeof(float) * N);
        if (dfg_fx_step(&f)) {
            dfg_fx_read(&f, "y", yv, sizeof(float) * N);
            dfg_fx_read(&f, "dx", dxv, sizeof(float) * N);
            double worst_y = 0, worst_dx = 0;
            float at_y = 0, at_dx = 0;
            double rel_y = 0, rel_dx = 0; /* in units of FLT_EPSILON, where |result| > 1e-30 */
            float at_rel_y = 0, at_rel_dx = 0;
            int nonfinite = 0;
            for (int i = 0; i < N - 2; i++) {
                double v = x[i], want = silu_ref(v), g = silu_grad_ref(v), gwant = (double)dy[i] * g;
                double sc = 1.0 / (1.0 + exp(v)), s = 1.0 / (1.0 + exp(-v));
                /* y: its roundings (exp's, 1 +, the division); dx: those of s, 1 - s, x (1 - s), 1 +
                 * and the two products, relative to the terms before 1 + x (1 - s) cancels */
                double by = 4.0 * FLT_EPSILON * fabs(want) + 3e-37;
                double bdx = fabs((double)dy[i]) * (8.0 * FLT_EPSILON * s * (1.0 + fabs(v) * sc) + 3e-37);
                double ey = fabs((double)yv[i] - want) / by, edx = fabs((double)dxv[i] - gwant) / bdx;
                nonfinite += !isfinite(yv[i]) || !isfinite(dxv[i]);
                double ry = fabs(want) > 1e-30 ? fabs((double)yv[i] - want) / fabs(want) / FLT_EPSILON : 0;
                double rdx = fabs(gwant) > 1e-30 && fabs(v + 1.2785) > 0.25 /* away from the derivative's zero */
                                 ? fabs((double)dxv[i] - gwant) / fabs(gwant) / FLT_EPSILON
                                 : 0;
                if (ry > rel_y) rel_y = ry, at_rel_y = x[i];
                if (rdx > rel_dx) rel_dx = rdx, at_rel_dx = x[i];
                if (!(ey <= worst_y)) worst_y = ey, at_y = x[i];
                if (!(edx <= worst_dx)) worst_dx = edx, at_dx = x[i];
            }
            printf("silu: worst error %.3g x the bound (at x = %g), gradient %.3g x (at x = %g); relative: %.3g "
                   "FLT_EPSILON (at x = %g) and %.3g (at x = %g)\n",
                   worst_y, at_y, worst_dx, at_dx, rel_y, at_rel_y, rel_dx, at_rel_dx);
            CHECK(nonfinite == 0, "silu: %d non-finite outputs of finite inputs", nonfinite);
            CHECK(worst_y <= 1.0, "silu: error %.3g x the bound against double precision at x = %g", worst_y, at_y);
            CHECK(worst_dx <= 1.0, "silu gradient: error %.3g x the bound against double precision at x = %g",
                  worst_dx, at_dx);
            CHECK(isinf(yv[N - 2]) && yv[N - 2] > 0 && isnan(yv[N - 1]) && isnan(dxv[N - 2]) && isnan(dxv[N - 1]),
                  "silu at +-inf (torch: inf, nan; gradients nan): %g %g, %g %g", yv[N - 2], yv[N - 1], dxv[N - 2],
                  dxv[N - 1]);
        }
        free(yv), free(dxv);
    }
    dfg_fx_end(&f);
    free(x), free(dy);
}

/* The kernels' own exp and tanh (ops/cpu/fastmath.h) against double precision, densely over
 * their range, and at the edges: exp flushes below -87.34 to 0, overflows to inf, keeps NaN. */
static void test_fastmath(void) {
    double worst_exp = 0, worst_tanh = 0;
    float at_exp = 0, at_tanh = 0;
    for (float x = -87.3f; x <= 88.7f; x += 0.000917f) {
        double e = fabs(dfg_exp_f32(x) - exp((double)x)) / exp((double)x);
        if (e > worst_exp) worst_exp = e, at_exp = x;
    }
    for (float x = 1e-30f; x < 30.0f; x *= 1.00003f) {
        for (int sign = -1; sign <= 1; sign += 2) {
            double t = tanh((double)(sign * x)), e = fabs(dfg_tanh_f32(sign * x) - t) / fabs(t);
            if (e > worst_tanh) worst_tanh = e, at_tanh = sign * x;
        }
    }
    CHECK(worst_exp < 1.5e-7, "dfg_exp_f32: relative error %.3g at %g", worst_exp, at_exp);
    CHECK(worst_tanh < 5e-7, "dfg_tanh_f32: relative error %.3g at %g", worst_tanh, at_tanh);
    CHECK(dfg_exp_f32(-88.0f) == 0.0f && dfg_exp_f32(-INFINITY) == 0.0f && isinf(dfg_exp_f32(89.0f)) &&
              isnan(dfg_exp_f32(NAN)) && dfg_exp_f32(0.0f) == 1.0f,
          "dfg_exp_f32 edges: %g %g %g %g %g", dfg_exp_f32(-88.0f), dfg_exp_f32(-INFINITY), dfg_exp_f32(89.0f),
          dfg_exp_f32(NAN), dfg_exp_f32(0.0f));
    CHECK(dfg_tanh_f32(30.0f) <= 1.0f && dfg_tanh_f32(-30.0f) >= -1.0f && dfg_tanh_f32(0.0f) == 0.0f, "tanh edges");
}

int main(void) {
    dfg_test_init("test_ops_pointwise");
    test_gelu();
    test_silu();
    test_fastmath();
    test_binary_f32();
    test_binary_i32();
    test_where();
    test_cast();
    test_fill();
    test_reshape_permute();
    test_slice_concat_expand();
    test_reduce();
    test_argmax();
    return dfg_test_finish();
}
