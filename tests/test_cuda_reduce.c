/* test_cuda_reduce.c - the CUDA sum, mean, masked sum and argmax (ops/cuda/reduce.cu) against the
 * CPU kernels (tests/cuda_harness.h): every axis position (rows, columns, a middle axis), short
 * rows (a warp each) and long ones (a block each, split over several blocks with partial sums in
 * the scratch when there are few rows), 16-byte vectorized and generic paths, broadcast masks,
 * argmax ties and NaNs. The masked quantile (ops/cuda/quantile.cu) bit for bit: masks with no,
 * one, half and every entry set and with values other than 0/1 (NaN selects), ties, negative
 * values, -0.0 beside +0.0, infinities and NaNs, q at 0, 1, 0.5 and random, random sizes; outside
 * the harness its bits against the CPU's and a sort's, aligned and not, and torch.quantile's
 * values on a hand-made case. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/dfg_ops.h"
#include "ops/quantile.h"

typedef struct {
    dfg_shape x, mask; /* mask: masked_sum only; rank 0 = x's shape */
    int axis;
    int kind; /* 0 sum, 1 sum keepdim, 2 mean, 3 masked_sum, 4 argmax */
    int values; /* argmax: 0 uniform, 1 few distinct values (ties), 2 ties and NaNs */
} red_case;

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const red_case *c = user;
    dfg_tensor *x = dfg_input(g, "x", dt, c->x), *y = NULL;
    switch (c->kind) {
    case 0: y = dfg_sum(g, x, c->axis); break;
    case 1: y = dfg_sum_keepdim(g, x, c->axis); break;
    case 2: y = dfg_mean(g, x, c->axis); break;
    case 3: y = dfg_masked_sum(g, x, dfg_input(g, "m", dt, c->mask.rank ? c->mask : c->x), c->axis); break;
    default: y = dfg_argmax(g, x); break;
    }
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* the mask (slot 1 of masked_sum) is 0/1; argmax's values may repeat and hold NaNs */
static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const red_case *c = user;
    float *f = data;
    if (c->kind == 3 && slot == 1) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)dfg_test_int(0, 1);
        return;
    }
    if (c->kind == 4 && c->values > 0) {
        for (int64_t i = 0; i < n; i++) {
            f[i] = (float)dfg_test_int(-2, 1) * 0.5f;
            if (c->values == 2 && dfg_test_int(0, 3) == 0) f[i] = NAN;
        }
        return;
    }
    (void)t;
    dfg_test_fill_uniform(f, n, -2.0f, 2.0f);
}

static void run(red_case c) {
    static const char *kinds[] = {"sum", "sum_keepdim", "mean", "masked_sum", "argmax"};
    char label[160], sx[64], sm[64] = "";
    dfg_shape_str(c.x, sx, sizeof(sx));
    if (c.kind == 3 && c.mask.rank) dfg_shape_str(c.mask, sm, sizeof(sm));
    snprintf(label, sizeof(label), "%s x%s%s%s axis %d values %d", kinds[c.kind], sx, sm[0] ? " mask" : "", sm,
             c.axis, c.values);
    cuda_case k = {.label = label, .build = build, .user = &c, .fill = fill, .bf16 = true};
    cuda_check(&k);
}

/* ---------------------------------------------------------------- quantile */
enum { M_NONE, M_ONE, M_HALF, M_ALL, M_ODD, N_MASKS };        /* M_ODD: 0, 0.5, -1 and NaN entries */
enum { X_UNIFORM, X_TIES, X_NEGATIVE, X_SPECIAL, N_XVALUES }; /* X_SPECIAL: +-0, +-inf, NaN, ties */
static const char *const mask_names[] = {"none", "one", "half", "all", "odd"};
static const char *const xvalue_names[] = {"uniform", "ties", "negative", "special"};

typedef struct {
    dfg_shape x;
    float q;
    int mask, values;
} q_case;

static dfg_node *build_q(dfg_graph *g, dfg_dtype dt, void *user) {
    const q_case *c = user;
    (void)dt; /* f32 only (the op's rule) */
    dfg_tensor *y = dfg_quantile(g, dfg_input(g, "x", DFG_F32, c->x), dfg_input(g, "m", DFG_F32, c->x), c->q);
    return dfg_graph_status(g) ? NULL : y->producer;
}

static void fill_q(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const q_case *c = user;
    float *f = data;
    (void)t;
    if (slot == 1) {
        int64_t one = dfg_test_int(0, (int)(n - 1));
        for (int64_t i = 0; i < n; i++) {
            switch (c->mask) {
            case M_NONE: f[i] = 0.0f; break;
            case M_ONE: f[i] = i == one ? 1.0f : 0.0f; break;
            case M_HALF: f[i] = (float)dfg_test_int(0, 1); break;
            case M_ALL: f[i] = 1.0f; break;
            default: {
                static const float odd[] = {0.0f, 0.5f, -1.0f, NAN};
                f[i] = odd[dfg_test_int(0, 3)];
            }
            }
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        switch (c->values) {
        case X_TIES: f[i] = (float)dfg_test_int(-2, 2) * 0.25f; break;
        case X_NEGATIVE: f[i] = dfg_test_uniform(-5.0f, -0.001f); break;
        case X_SPECIAL: {
            static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 3.5f};
            f[i] = dfg_test_int(0, 1) ? sp[dfg_test_int(0, 7)] : dfg_test_uniform(-4.0f, 4.0f);
            break;
        }
        default: f[i] = dfg_test_uniform(-3.0f, 3.0f);
        }
    }
}

static void label_q(char *buf, size_t len, const q_case *c) {
    char sx[64];
    snprintf(buf, len, "quantile x%s q %.9g mask %s values %s", dfg_shape_str(c->x, sx, sizeof(sx)), (double)c->q,
             mask_names[c->mask], xvalue_names[c->values]);
}

/* through the harness: tolerances of 1e-300, i.e. equal values (or NaN on both sides) */
static void run_q(q_case c) {
    char label[200];
    label_q(label, sizeof(label), &c);
    /* one fuzzed schedule (not 3): the cases are many, and each run has 34 x 3 synchronisations of
     * 1024 threads */
    cuda_case k = {.label = label, .build = build_q, .user = &c, .fill = fill_q, .rtol = 1e-300, .atol = 1e-300, .seeds = 1};
    cuda_check(&k);
}

/* The CPU and the emulated kernel on the same inputs, x and the mask `shift` floats past 16-byte
 * boundaries (1: the scalar path), against each other and the sort, bit for bit; `expect` (not
 * NULL) is torch.quantile's value. Returns the result. */
static float direct_q(const q_case *c, const float *x_in, const float *m_in, int shift, const float *expect) {
    char label[200];
    label_q(label, sizeof(label), c);
    dfg_program *p = dfg_program_new("q");
    dfg_node *n = build_q(dfg_graph_new(p, "g"), DFG_F32, (void *)c);
    CHECK(n != NULL, "%s: does not build", label);
    float y_gpu = NAN;
    if (n) {
        const int64_t cnt = dfg_shape_numel(c->x);
        /* aligned_alloc wants a size that is a multiple of the alignment: cnt + 8 floats rounded up */
        size_t bytes = (sizeof(float) * (size_t)(cnt + 8) + 15) / 16 * 16;
        float *xb = aligned_alloc(16, bytes), *mb = aligned_alloc(16, bytes);
        float *x = xb + shift, *m = mb + shift, y_cpu;
        if (x_in) memcpy(x, x_in, sizeof(float) * (size_t)cnt), memcpy(m, m_in, sizeof(float) * (size_t)cnt);
        else fill_q(0, n->in[0], x, cnt, (void *)c), fill_q(1, n->in[1], m, cnt, (void *)c);
        dfg_test_poison(&y_cpu, sizeof(y_cpu));
        dfg_test_poison(&y_gpu, sizeof(y_gpu));
        char err[512] = "";
        dfg_cpu_ctx cc = {.n_threads = 1, .err = err, .err_len = sizeof(err)};
        void *in[2] = {x, m}, *out_c[1] = {&y_cpu}, *out_g[1] = {&y_gpu};
        CHECK(dfg_cpu_kernels[n->op](n, in, out_c, &cc) == DFG_OK, "%s: CPU: %s", label, err);
        int flags = 0;
        dfg_cuda_ctx gc = {.flags = &flags, .sm_count = 132, .err = err, .err_len = sizeof(err)};
        CHECK(dfg_emu_kernels[n->op](n, in, out_g, &gc) == DFG_OK, "%s: CUDA: %s", label, err);
        float y_sort = dfg_test_quantile(x, m, cnt, c->q);
        CHECK(!memcmp(&y_cpu, &y_gpu, 4) && !memcmp(&y_cpu, &y_sort, 4),
              "%s (shift %d): CPU %.9g (0x%08x), CUDA %.9g (0x%08x), sort %.9g (0x%08x)", label, shift, (double)y_cpu,
              dfg_quantile_key(y_cpu), (double)y_gpu, dfg_quantile_key(y_gpu), (double)y_sort, dfg_quantile_key(y_sort));
        if (expect) CHECK(!memcmp(&y_gpu, expect, 4), "%s: %.9g, torch.quantile gives %.9g", label, (double)y_gpu, (double)*expect);
        free(xb), free(mb);
    }
    dfg_program_free(p);
    return y_gpu;
}

static void quantile_cases(void) {
    /* every mask, value kind and q on small and middle sizes (n % 4 = 0 and not: the float4 loop's
     * tail); each case also once directly, aligned or one float off (the scalar path) */
    const dfg_shape shapes[] = {DFG_SHAPE(1), DFG_SHAPE(7), DFG_SHAPE(3, 5), DFG_SHAPE(64, 33), DFG_SHAPE(4099),
                                DFG_SHAPE(2, 2, 1000)};
    const float qs[] = {0.0f, 1.0f, 0.5f, -1.0f}; /* -1: random */
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int mask = 0; mask < N_MASKS; mask++)
            for (int values = 0; values < N_XVALUES; values++)
                for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
                    q_case c = {shapes[i], qs[k] < 0.0f ? dfg_test_uniform(0.0f, 1.0f) : qs[k], mask, values};
                    run_q(c);
                    direct_q(&c, NULL, NULL, (int)(k % 2), NULL);
                }
    /* a large input (the emulator runs 34 passes over it a run): a few masks and kinds, q random */
    for (int mask = M_ONE; mask < N_MASKS; mask++) {
        q_case c = {DFG_SHAPE(300, 701), dfg_test_uniform(0.0f, 1.0f), mask, mask % 2 ? X_SPECIAL : X_TIES};
        run_q(c);
    }
    /* random sizes, masks, values and q */
    for (int i = 0; i < 12; i++) {
        q_case c = {dfg_test_int(0, 1) ? DFG_SHAPE(dfg_test_int(1, 20000)) : DFG_SHAPE(dfg_test_int(1, 50), dfg_test_int(1, 300)),
                    dfg_test_uniform(0.0f, 1.0f), dfg_test_int(0, N_MASKS - 1), dfg_test_int(0, N_XVALUES - 1)};
        run_q(c);
        direct_q(&c, NULL, NULL, dfg_test_int(0, 3), NULL);
    }
    /* torch.quantile's own values: torch.quantile(torch.tensor([4., 1., 3., 2.]), q) = 1.75 at
     * 0.25, 2.5 at 0.5, 4 at 1 (the masked-out 100 is not there); +inf with nothing selected */
    const float x[5] = {4.0f, 100.0f, 1.0f, 3.0f, 2.0f}, m[5] = {1.0f, 0.0f, 1.0f, 1.0f, 1.0f}, none[5] = {0};
    const float expect[4] = {1.75f, 2.5f, 4.0f, 1.0f}, q[4] = {0.25f, 0.5f, 1.0f, 0.0f}, inf = INFINITY;
    for (int k = 0; k < 4; k++) direct_q(&(q_case){DFG_SHAPE(5), q[k], M_HALF, X_UNIFORM}, x, m, 0, &expect[k]);
    direct_q(&(q_case){DFG_SHAPE(5), 0.5f, M_NONE, X_UNIFORM}, x, none, 0, &inf);
    /* the rank in float32, as torch computes it for a float32 tensor: 0.8f * 20 is 16 exactly, so
     * torch.quantile(torch.tensor([0, 1/8, ..., 2, 1000, 1001, 1002, 1003]), 0.8) = 2 (the same
     * product in double, 16.00000024, gave 2.000238) */
    float x21[21], m21[21];
    for (int i = 0; i < 21; i++) x21[i] = i < 17 ? (float)i / 8.0f : 983.0f + (float)i, m21[i] = 1.0f;
    const float two = 2.0f;
    direct_q(&(q_case){DFG_SHAPE(21), 1.0f - 0.2f, M_ALL, X_UNIFORM}, x21, m21, 0, &two);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_reduce")) return DFG_TEST_SKIP;
    /* over the last axis: a warp per row (<= 512), a block per row, split rows (few and long);
     * lengths that are and are not multiples of the 16-byte vector */
    const dfg_shape rows[] = {DFG_SHAPE(1),        DFG_SHAPE(1, 1),    DFG_SHAPE(3, 7),     DFG_SHAPE(5, 33),
                              DFG_SHAPE(9, 64),    DFG_SHAPE(4, 512),  DFG_SHAPE(3, 513),   DFG_SHAPE(2, 1025),
                              DFG_SHAPE(2, 1024),  DFG_SHAPE(4099),    DFG_SHAPE(1, 20000), DFG_SHAPE(3, 9001),
                              DFG_SHAPE(2, 2, 8200), DFG_SHAPE(17, 3, 40)};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        for (int kind = 0; kind <= 4; kind++) run((red_case){.x = rows[i], .axis = rows[i].rank - 1, .kind = kind});
    /* other axes: columns (inner > 1), split when few output tiles and a long axis */
    const struct {
        dfg_shape s;
        int axis;
    } cols[] = {{DFG_SHAPE(7, 5), 0},      {DFG_SHAPE(1025, 3), 0},    {DFG_SHAPE(4099, 33), 0},
                {DFG_SHAPE(2, 3, 4), 1},   {DFG_SHAPE(3, 1), 0},       {DFG_SHAPE(5, 300, 7), 1},
                {DFG_SHAPE(6, 2, 70), 0},  {DFG_SHAPE(2, 3, 4, 5), 2}, {DFG_SHAPE(700, 1, 64), 0}};
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
        for (int kind = 0; kind <= 3; kind++) run((red_case){.x = cols[i].s, .axis = cols[i].axis, .kind = kind});
    /* masks that broadcast (numpy rules: aligned at the last dim) */
    const struct {
        dfg_shape x, m;
        int axis;
    } masks[] = {{DFG_SHAPE(4, 6, 5), DFG_SHAPE(6, 1), 1}, {DFG_SHAPE(4, 6, 5), DFG_SHAPE(5), 2},
                 {DFG_SHAPE(4, 6, 5), DFG_SHAPE(4, 1, 5), 0}, {DFG_SHAPE(3, 1100), DFG_SHAPE(1, 1100), 1},
                 {DFG_SHAPE(2, 9000), DFG_SHAPE(2, 1), 1}};
    for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++)
        run((red_case){.x = masks[i].x, .mask = masks[i].m, .axis = masks[i].axis, .kind = 3});
    /* argmax: ties (the first index wins) and NaNs (skipped; an all-NaN row gives 0) */
    const dfg_shape am[] = {DFG_SHAPE(40, 1), DFG_SHAPE(40, 2), DFG_SHAPE(9, 37), DFG_SHAPE(5, 1000),
                            DFG_SHAPE(2, 20000), DFG_SHAPE(3, 4099)};
    for (size_t i = 0; i < sizeof(am) / sizeof(am[0]); i++)
        for (int v = 1; v <= 2; v++) run((red_case){.x = am[i], .axis = am[i].rank - 1, .kind = 4, .values = v});
    quantile_cases();
    return cuda_test_end();
}
