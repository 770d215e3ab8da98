/* test_ops_nf4.c - NF4 (ops/nf4.c): the host quantisers and the op nf4_dequant on the CPU runtime.
 *   - sizes: dfg_nf4_packed_bytes, dfg_nf4_blocks, dfg_nf4_dq_blocks at their edges;
 *   - the tables: the 16 codes as bitsandbytes lists them (written here again), the thresholds at
 *     the f32 midpoints of neighbouring codes, the dynamic map sorted, symmetric, 0 at 127, 1 at 255;
 *   - exact codes on hand-made blocks (absmax 1, so the normalised value is x itself): every code
 *     value maps to its own code; a value exactly at a threshold takes the lower code, the next
 *     float up the higher one; and the normalisation is bitsandbytes' x * (1/absmax), not x /
 *     absmax (a pair where the two land on either side of a threshold, found by search);
 *   - a block of zeros (absmax 0): codes 0b0000 (bitsandbytes' NaN path), dequantised to zeros;
 *   - partial last blocks and odd numel: the last block's absmax is its own elements' only, the
 *     last byte's low nibble is the code of the padding 0.0 (0b0111), or 0b0000 in a zero block;
 *   - round trips on random normal and heavy-tailed (Student-t, 2 degrees of freedom) data:
 *     every code is the nearest one to x * (1/absmax), the error at most half the widest gap
 *     between codes times the block's absmax; the RMS error on normal data bounded;
 *   - double quantisation: offset the mean, every absmax_q the nearest map entry, the rebuilt
 *     absmax within half the map's widest gap times its absmax2; one block (absmax2 0) rebuilt
 *     exactly; a partial second-level block;
 *   - the op on the CPU runtime: both forms, f32, bf16 and f16 outputs, against the formula bit
 *     for bit, with packed shaped (rows, cols/2);
 *   - the builder's errors: wrong dtypes and element counts of each input, a bad output dtype or
 *     shape, each naming the op and the tensor; the op's table facts (gradient ZERO, cost). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "graph/ir.h"
#include "ops/dtype.h"
#include "ops/nf4.h"
#include "ops/op.h"
#include "testutil.h"

/* bitsandbytes' NF4 values (csrc/kernels.cu, nf4_dequantization_lut), written out again */
static const double BNB_NF4[16] = {-1.0,
                                   -0.6961928009986877,
                                   -0.5250730514526367,
                                   -0.39491748809814453,
                                   -0.28444138169288635,
                                   -0.18477343022823334,
                                   -0.09105003625154495,
                                   0.0,
                                   0.07958029955625534,
                                   0.16093020141124725,
                                   0.24611230194568634,
                                   0.33791524171829224,
                                   0.44070982933044434,
                                   0.5626170039176941,
                                   0.7229568362236023,
                                   1.0};
static const float thresholds[15] = {DFG_NF4_THRESHOLD_VALUES};
static const float code_values[16] = {DFG_NF4_CODE_VALUES};
static const float dyn_map[256] = {DFG_NF4_DYNAMIC_MAP_VALUES};

static unsigned nibble(const uint8_t *packed, int64_t i) { return i % 2 ? packed[i / 2] & 15u : packed[i / 2] >> 4u; }
static bool contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static void test_sizes(void) {
    CHECK(dfg_nf4_packed_bytes(1) == 1 && dfg_nf4_packed_bytes(2) == 1 && dfg_nf4_packed_bytes(3) == 2 &&
              dfg_nf4_packed_bytes(129) == 65 && dfg_nf4_packed_bytes(0) == 0,
          "dfg_nf4_packed_bytes");
    CHECK(dfg_nf4_blocks(1) == 1 && dfg_nf4_blocks(64) == 1 && dfg_nf4_blocks(65) == 2 && dfg_nf4_blocks(0) == 0,
          "dfg_nf4_blocks");
    CHECK(dfg_nf4_dq_blocks(1) == 1 && dfg_nf4_dq_blocks(64 * 256) == 1 && dfg_nf4_dq_blocks(64 * 256 + 1) == 2 &&
              dfg_nf4_dq_blocks(64 * 512) == 2,
          "dfg_nf4_dq_blocks");
}

static void test_tables(void) {
    for (int k = 0; k < 16; k++) CHECK(code_values[k] == (float)BNB_NF4[k], "code %d: %.9g", k, (double)code_values[k]);
    /* each threshold is a float nearest the midpoint (the midpoint is exact in double: the codes
     * are floats); at the 4 exact ties bitsandbytes' literal is the neighbour its decimal picks */
    int not_even = 0;
    for (int k = 0; k < 15; k++) {
        const double mid = (BNB_NF4[k] + BNB_NF4[k + 1]) / 2, rounded = (float)mid;
        CHECK(fabs((double)thresholds[k] - mid) <= fabs(rounded - mid), "threshold %d (%a) is not a float nearest the "
              "midpoint %a", k, (double)thresholds[k], mid);
        not_even += thresholds[k] != (float)rounded;
    }
    CHECK(not_even == 4, "%d thresholds differ from (float)midpoint (bitsandbytes' literals: 4, at ties)", not_even);
    bool sorted = true, symmetric = true;
    for (int i = 1; i < 256; i++) sorted &= dyn_map[i - 1] < dyn_map[i];
    for (int i = 0; i < 127; i++) symmetric &= dyn_map[i] == -dyn_map[254 - i];
    CHECK(sorted && symmetric && dyn_map[127] == 0.0f && dyn_map[255] == 1.0f,
          "the dynamic map: sorted %d, symmetric %d, [127] %g, [255] %g", sorted, symmetric, (double)dyn_map[127],
          (double)dyn_map[255]);
}

/* ---------------------------------------------------------------- exact codes */
/* codes of x (n) quantised alone, and its absmax values */
static void quantize(const float *x, int64_t n, uint8_t *packed, float *absmax) {
    dfg_test_poison(packed, (size_t)dfg_nf4_packed_bytes(n));
    dfg_nf4_quantize(x, n, packed, absmax);
}

static void test_exact_codes(void) {
    /* one block: x[0] = 1 (absmax 1: the normalised value is x itself), then each code value, each
     * threshold, the float above it and the float below it */
    float x[64];
    int want[64], n = 0;
    x[n] = 1.0f, want[n++] = 15;
    for (int k = 0; k < 16; k++) x[n] = code_values[k], want[n++] = k;
    for (int k = 0; k < 15; k++) {
        x[n] = thresholds[k], want[n++] = k;
        x[n] = nextafterf(thresholds[k], 2.0f), want[n++] = k + 1;
        x[n] = nextafterf(thresholds[k], -2.0f), want[n++] = k;
    }
    while (n < 64) x[n] = -0.0f, want[n++] = 7;
    uint8_t packed[32];
    float absmax[1];
    quantize(x, 64, packed, absmax);
    CHECK(absmax[0] == 1.0f, "absmax %g", (double)absmax[0]);
    int bad = 0;
    for (int i = 0; i < 64; i++) {
        if ((int)nibble(packed, i) != want[i] && bad++ < 5)
            CHECK(false, "x %.9g (element %d) got code %u, bitsandbytes' tree gives %d", (double)x[i], i, nibble(packed, i),
                  want[i]);
    }
    printf("exact codes: 16 code values, 15 thresholds and their neighbours: %d wrong\n", bad);

    /* x * (1/absmax) decides, not x / absmax: a block whose absmax a and element v land on either
     * side of a threshold the two ways */
    bool found = false;
    for (int tries = 0; tries < 200000 && !found; tries++) {
        const int k = dfg_test_int(0, 14);
        const float a = dfg_test_uniform(0.5f, 4.0f), v0 = thresholds[k] * a;
        for (int u = -2; u <= 2 && !found; u++) {
            float v = v0;
            for (int s = 0; s < abs(u); s++) v = nextafterf(v, u > 0 ? 10.0f : -10.0f);
            const float inv = 1.0f / a, by_product = v * inv, by_division = v / a;
            if ((by_product > thresholds[k]) == (by_division > thresholds[k])) continue;
            found = true;
            float blk[2] = {a, v};
            uint8_t pk[1];
            float am[1];
            quantize(blk, 2, pk, am);
            CHECK(nibble(pk, 1) == (unsigned)(k + (by_product > thresholds[k])),
                  "absmax %.9g, x %.9g: code %u; x * (1/absmax) = %.9g gives %d", (double)a, (double)v, nibble(pk, 1),
                  (double)by_product, k + (by_product > thresholds[k]));
        }
    }
    CHECK(found, "no value found where x * (1/absmax) and x / absmax fall on either side of a threshold");
}

static void test_zero_and_partial_blocks(void) {
    /* blocks: normal, all zeros (with -0.0), then a partial one of 37 whose values are all below
     * the first block's largest */
    enum { N = 64 + 64 + 37 };
    float x[N];
    dfg_test_fill_uniform(x, 64, -1.0f, 1.0f);
    x[5] = 9.0f;
    for (int i = 64; i < 128; i++) x[i] = i % 2 ? -0.0f : 0.0f;
    dfg_test_fill_uniform(x + 128, 37, -0.5f, 0.5f);
    uint8_t packed[(N + 1) / 2];
    float absmax[3];
    quantize(x, N, packed, absmax);
    float m = 0;
    for (int i = 128; i < N; i++) m = fmaxf(m, fabsf(x[i]));
    CHECK(absmax[0] == 9.0f && absmax[1] == 0.0f && absmax[2] == m, "absmax %g %g %g (want 9, 0, %g)", (double)absmax[0],
          (double)absmax[1], (double)absmax[2], (double)m);
    int nonzero = 0;
    for (int i = 64; i < 128; i++) nonzero += nibble(packed, i) != 0;
    CHECK(nonzero == 0, "a block of zeros: %d codes are not 0b0000 (bitsandbytes: 0 * (1/0) is NaN, code 0)", nonzero);
    CHECK(nibble(packed, N) == 7, "odd numel: the padding nibble is %u, not 0b0111 (the code of 0.0)", nibble(packed, N));
    /* a last block of one element, and of one zero: the padding takes the block's normalisation */
    float one[65], zero[65];
    dfg_test_fill_uniform(one, 65, -1.0f, 1.0f);
    memcpy(zero, one, sizeof(one));
    one[64] = -0.25f, zero[64] = 0.0f;
    uint8_t p1[33], p0[33];
    float a1[2], a0[2];
    quantize(one, 65, p1, a1);
    quantize(zero, 65, p0, a0);
    CHECK(a1[1] == 0.25f && p1[32] == 0x07, "last block (-0.25): absmax %g, byte 0x%02x (want 0x07)", (double)a1[1], p1[32]);
    CHECK(a0[1] == 0.0f && p0[32] == 0x00, "last block (0.0): absmax %g, byte 0x%02x (want 0x00)", (double)a0[1], p0[32]);
}

/* ---------------------------------------------------------------- round trips */
/* heavy-tailed: Student-t with 2 degrees of freedom (normal / sqrt(chi2_2 / 2)) */
static void fill_heavy(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double z = dfg_test_normal(), u = dfg_test_uniform(1e-7f, 1.0f);
        x[i] = (float)(z / sqrt(-log(u))); /* chi2 with 2 dof / 2 is Exp(1) = -log U */
    }
}

static void test_round_trip(int64_t n, bool heavy) {
    float *x = malloc(sizeof(float) * (size_t)n), *absmax = malloc(sizeof(float) * (size_t)dfg_nf4_blocks(n));
    uint8_t *packed = malloc((size_t)dfg_nf4_packed_bytes(n));
    if (heavy) fill_heavy(x, n);
    else dfg_test_fill_normal(x, n, 0.02f);
    quantize(x, n, packed, absmax);
    double gap = 0, sq = 0, sx = 0, worst = 0;
    for (int k = 0; k < 15; k++) gap = fmax(gap, (BNB_NF4[k + 1] - BNB_NF4[k]) / 2);
    int not_nearest = 0, too_far = 0;
    for (int64_t i = 0; i < n; i++) {
        const float am = absmax[i / 64], xn = x[i] * (1.0f / am);
        const unsigned q = nibble(packed, i);
        double best = INFINITY;
        for (int k = 0; k < 16; k++) best = fmin(best, fabs((double)xn - BNB_NF4[k]));
        /* the thresholds are the midpoints rounded to f32: a value between the two is nearest-ish */
        not_nearest += fabs((double)xn - BNB_NF4[q]) > best + 2.4e-7 * fabs((double)xn) + 1e-12;
        const double err = fabs((double)code_values[q] * am - x[i]);
        too_far += err > gap * am * (1 + 1e-6);
        worst = fmax(worst, err / am);
        sq += err * err, sx += (double)x[i] * x[i];
    }
    const double rms = sqrt(sq / sx);
    printf("round trip, %lld %s values: max error %.4f of the block's absmax (bound %.4f), RMS error %.4f of the RMS\n",
           (long long)n, heavy ? "Student-t(2)" : "normal", worst, gap, rms);
    CHECK(not_nearest == 0, "%d of %lld codes are not the nearest one", not_nearest, (long long)n);
    CHECK(too_far == 0, "%d of %lld values are off by more than half the widest gap times absmax", too_far, (long long)n);
    if (!heavy) CHECK(rms < 0.12, "RMS error %.4f of the values' RMS on normal data", rms);
    free(x), free(absmax), free(packed);
}

/* ---------------------------------------------------------------- double quantisation */
static void test_double_quant(int64_t nb) {
    float *absmax = malloc(sizeof(float) * (size_t)nb), *a2 = malloc(sizeof(float) * (size_t)((nb + 255) / 256));
    uint8_t *q = malloc((size_t)nb);
    for (int64_t b = 0; b < nb; b++) absmax[b] = 0.05f + 0.01f * fabsf(dfg_test_normal()); /* blocks' maxima */
    float offset = -1.0f;
    dfg_nf4_double_quantize(absmax, nb, q, a2, &offset);
    double mean = 0;
    for (int64_t b = 0; b < nb; b++) mean += absmax[b];
    mean /= (double)nb;
    CHECK(offset == (float)mean, "offset %.9g, the mean %.9g", (double)offset, mean);
    double half_gap = 0, worst = 0;
    for (int i = 1; i < 256; i++) half_gap = fmax(half_gap, ((double)dyn_map[i] - dyn_map[i - 1]) / 2);
    int not_nearest = 0, too_far = 0;
    for (int64_t b = 0; b < nb; b++) {
        const float d = absmax[b] - offset, s = a2[b / 256], xn = d * (1.0f / s);
        double best = INFINITY;
        for (int k = 0; k < 256; k++) best = fmin(best, fabs((double)xn - dyn_map[k]));
        /* bitsandbytes' midpoints are f32 sums halved: half an ulp off the true ones */
        if (s > 0) not_nearest += fabs((double)xn - dyn_map[q[b]]) > best + 2.4e-7 * fabs((double)xn) + 1e-30;
        const float scaled = dyn_map[q[b]] * s, rebuilt = scaled + offset;
        const double err = fabs((double)rebuilt - absmax[b]);
        too_far += err > half_gap * s + 1e-6 * absmax[b];
        worst = fmax(worst, s > 0 ? err / s : err);
    }
    printf("double quant, %lld blocks: offset %.6f, max rebuild error %.5f of absmax2 (bound %.5f)\n", (long long)nb,
           (double)offset, worst, half_gap);
    CHECK(not_nearest == 0, "%d of %lld absmax codes are not the nearest map entry", not_nearest, (long long)nb);
    CHECK(too_far == 0, "%d of %lld rebuilt absmax values beyond the bound", too_far, (long long)nb);
    if (nb == 1)
        CHECK(offset == absmax[0] && a2[0] == 0.0f && q[0] == 0, "one block: offset %g absmax2 %g code %d", (double)offset,
              (double)a2[0], q[0]);
    free(absmax), free(a2), free(q);
}

/* ---------------------------------------------------------------- the op on the CPU runtime */
static void test_op(dfg_shape shape, bool dq, dfg_dtype dt) {
    const int64_t n = dfg_shape_numel(shape), nb = dfg_nf4_blocks(n), bytes = dfg_nf4_packed_bytes(n);
    float *x = malloc(sizeof(float) * (size_t)n), *absmax = malloc(sizeof(float) * (size_t)nb), a2[64], offset = 0;
    uint8_t *packed = malloc((size_t)bytes), *q = malloc((size_t)nb);
    dfg_test_fill_normal(x, n, 1.0f);
    dfg_nf4_quantize(x, n, packed, absmax);
    if (dq) dfg_nf4_double_quantize(absmax, nb, q, a2, &offset);
    const size_t out_bytes = (size_t)n * dfg_dtype_size(dt);
    unsigned char *got = malloc(out_bytes), *want = malloc(out_bytes);
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = i / 64;
        float s = absmax[b];
        if (dq) {
            const float scaled = dyn_map[q[b]] * a2[b / 256];
            s = scaled + offset;
        }
        dfg_store(want, dt, i, code_values[nibble(packed, i)] * s);
    }
    dfg_fx f;
    dfg_fx_begin(&f, "nf4");
    /* packed as (rows, bytes / rows) when it divides: a loader's (out, in/2) */
    const int64_t rows = shape.rank == 2 && bytes % shape.d[0] == 0 ? shape.d[0] : 1;
    dfg_tensor *pk = dfg_const(f.p, "w.nf4", DFG_U8, DFG_SHAPE(rows, bytes / rows), packed), *y;
    if (!dq) {
        y = dfg_nf4_dequant(f.g, pk, dfg_const(f.p, "w.absmax", DFG_F32, DFG_SHAPE(nb), absmax), shape, dt);
    } else {
        dfg_tensor *tq = dfg_const(f.p, "w.absmax_q", DFG_U8, DFG_SHAPE(nb), q);
        dfg_tensor *t2 = dfg_const(f.p, "w.absmax2", DFG_F32, DFG_SHAPE(dfg_nf4_dq_blocks(n)), a2);
        y = dfg_nf4_dequant_dq(f.g, pk, tq, t2, dfg_const(f.p, "w.absmax_offset", DFG_F32, DFG_SCALAR, &offset), shape, dt);
    }
    dfg_output(f.g, y, "w");
    char s[64];
    dfg_test_poison(got, out_bytes);
    if (dfg_fx_run(&f)) {
        dfg_fx_read(&f, "w", got, out_bytes);
        CHECK(!memcmp(got, want, out_bytes), "nf4_dequant%s %s %s: the CPU runtime's values differ from the formula",
              dq ? "_dq" : "", dfg_shape_str(shape, s, sizeof(s)), dfg_dtype_name(dt));
    }
    dfg_fx_end(&f);
    free(x), free(absmax), free(packed), free(q), free(got), free(want);
}

/* ---------------------------------------------------------------- errors and table facts */
typedef struct {
    const char *what;
    dfg_dtype packed_dt, absmax_dt, out_dt;
    int64_t packed_n, absmax_n, a2_n, offset_n; /* element counts; -1: the right one */
    bool dq;
    int64_t dim0;                               /* the weight's first dim (10 x 30 unless changed) */
    const char *names;                          /* a tensor the message must name ("" for none) */
} bad_case;

static void expect_error(bad_case c) {
    const int64_t n = 300, nb = dfg_nf4_blocks(n);
    dfg_program *p = dfg_program_new("nf4_errors");
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_tensor *pk = dfg_input(g, "w.nf4", c.packed_dt, DFG_SHAPE(c.packed_n >= 0 ? c.packed_n : dfg_nf4_packed_bytes(n)));
    dfg_tensor *am = dfg_input(g, c.dq ? "w.absmax_q" : "w.absmax", c.absmax_dt, DFG_SHAPE(c.absmax_n >= 0 ? c.absmax_n : nb));
    dfg_shape ws = DFG_SHAPE(c.dim0, 30);
    dfg_tensor *y;
    if (!c.dq) {
        y = dfg_nf4_dequant(g, pk, am, ws, c.out_dt);
    } else {
        dfg_tensor *a2 = dfg_input(g, "w.absmax2", DFG_F32, DFG_SHAPE(c.a2_n >= 0 ? c.a2_n : 1));
        dfg_tensor *off = dfg_input(g, "w.absmax_offset", DFG_F32, c.offset_n >= 0 ? DFG_SHAPE(c.offset_n) : DFG_SCALAR);
        y = dfg_nf4_dequant_dq(g, pk, am, a2, off, ws, c.out_dt);
    }
    const char *msg = dfg_graph_error(g);
    CHECK(dfg_graph_status(g) != DFG_OK, "%s: accepted", c.what);
    CHECK(contains(msg, "nf4_dequant") && contains(msg, c.names), "%s: message '%s' lacks nf4_dequant or '%s'", c.what,
          msg ? msg : "(none)", c.names);
    CHECK(y == g->poison, "%s: the builder did not return the poison tensor", c.what);
    if (c.dim0 == 10 && c.packed_dt == DFG_F32) printf("a builder error reads: %s\n", msg);
    dfg_program_free(p);
}

static void test_errors(void) {
    const dfg_dtype U8 = DFG_U8, F32 = DFG_F32;
    expect_error((bad_case){"packed f32", F32, F32, F32, -1, -1, -1, -1, false, 10, "w.nf4"});
    expect_error((bad_case){"packed one byte short", U8, F32, F32, 149, -1, -1, -1, false, 10, "w.nf4"});
    expect_error((bad_case){"absmax bf16", U8, DFG_BF16, F32, -1, -1, -1, -1, false, 10, "w.absmax"});
    expect_error((bad_case){"absmax one block short", U8, F32, F32, -1, 4, -1, -1, false, 10, "w.absmax"});
    expect_error((bad_case){"absmax_q f32", U8, F32, F32, -1, -1, -1, -1, true, 10, "w.absmax_q"});
    expect_error((bad_case){"absmax2 two values", U8, U8, F32, -1, -1, 2, -1, true, 10, "w.absmax2"});
    expect_error((bad_case){"offset two values", U8, U8, F32, -1, -1, -1, 2, true, 10, "w.absmax_offset"});
    expect_error((bad_case){"output i32", U8, F32, DFG_I32, -1, -1, -1, -1, false, 10, "i32"});
    expect_error((bad_case){"a weight dim of 0", U8, F32, F32, -1, -1, -1, -1, false, 0, "dim"});
    /* a graph that failed stays failed: a later correct call returns the poison tensor */
    dfg_program *p = dfg_program_new("nf4_sticky");
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_nf4_dequant(g, dfg_input(g, "a", DFG_F32, DFG_SHAPE(2)), dfg_input(g, "b", DFG_F32, DFG_SHAPE(1)), DFG_SHAPE(4), F32);
    dfg_tensor *ok = dfg_nf4_dequant(g, dfg_input(g, "c", U8, DFG_SHAPE(2)), dfg_input(g, "d", F32, DFG_SHAPE(1)),
                                     DFG_SHAPE(4), F32);
    CHECK(dfg_graph_status(g) != DFG_OK && ok == g->poison, "the error is not sticky");
    dfg_program_free(p);
}

static void test_table_facts(void) {
    const dfg_op_info *o = &dfg_ops[DFG_OP_NF4_DEQUANT];
    CHECK(o->grad_kind == DFG_GRAD_ZERO && o->dtypes == DFG_DTYPES_ANY && o->has_cuda, "nf4_dequant's row");
    for (int dq = 0; dq < 2; dq++) {
        dfg_program *p = dfg_program_new("nf4_cost");
        dfg_graph *g = dfg_graph_new(p, "g");
        const int64_t n = 1000 * 64 + 3, nb = dfg_nf4_blocks(n), bytes = dfg_nf4_packed_bytes(n);
        dfg_tensor *pk = dfg_input(g, "p", DFG_U8, DFG_SHAPE(bytes)), *y;
        if (!dq) {
            y = dfg_nf4_dequant(g, pk, dfg_input(g, "a", DFG_F32, DFG_SHAPE(nb)), DFG_SHAPE(n), DFG_BF16);
        } else {
            y = dfg_nf4_dequant_dq(g, pk, dfg_input(g, "q", DFG_U8, DFG_SHAPE(nb)),
                                   dfg_input(g, "a2", DFG_F32, DFG_SHAPE(dfg_nf4_dq_blocks(n))),
                                   dfg_input(g, "o", DFG_F32, DFG_SCALAR), DFG_SHAPE(n), DFG_BF16);
        }
        if (dfg_graph_status(g) == DFG_OK) {
            const dfg_cost c = o->cost(y->producer);
            const double read = dq ? (double)(bytes + nb + 4 * dfg_nf4_dq_blocks(n) + 4) : (double)(bytes + 4 * nb);
            const double flops = (double)n + (dq ? 2.0 * (double)nb : 0.0);
            CHECK(c.flops == flops && c.bytes_read == read && c.bytes_written == 2.0 * (double)n,
                  "cost%s: flops %g read %g written %g (want %g, %g, %g)", dq ? " (double quant)" : "", c.flops,
                  c.bytes_read, c.bytes_written, flops, read, 2.0 * (double)n);
        } else {
            CHECK(false, "cost case does not build: %s", dfg_graph_error(g));
        }
        dfg_program_free(p);
    }
}

int main(void) {
    dfg_test_init("test_ops_nf4");
    test_sizes();
    test_tables();
    test_exact_codes();
    test_zero_and_partial_blocks();
    test_round_trip(64 * 300 + 37, false);
    test_round_trip(64 * 300 + 37, true);
    test_round_trip(5, false);
    test_double_quant(1);
    test_double_quant(300);
    test_double_quant(1024);
    const dfg_dtype dts[] = {DFG_F32, DFG_BF16, DFG_F16};
    for (int d = 0; d < 3; d++) {
        test_op(DFG_SHAPE(37, 64), false, dts[d]);
        test_op(DFG_SHAPE(3, 5, 7), false, dts[d]);
        test_op(DFG_SHAPE(300, 64), true, dts[d]);
        test_op(DFG_SHAPE(1), true, dts[d]);
    }
    test_errors();
    test_table_facts();
    return dfg_test_finish();
}
