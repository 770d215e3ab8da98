/* test_cuda_reduce.c - the CUDA sum, mean, masked sum and argmax (ops/cuda/reduce.cu) against the
 * CPU kernels (tests/cuda_harness.h): every axis position (rows, columns, a middle axis), short
 * rows (a warp each) and long ones (a block each, split over several blocks with partial sums in
 * the scratch when there are few rows), 16-byte vectorized and generic paths, broadcast masks,
 * argmax ties and NaNs. */
#include <math.h>

#include "cuda_harness.h"
#include "ops/dfg_ops.h"

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

int main(void) {
    dfg_test_init("test_cuda_reduce");
    if (!cuda_emulator_built()) {
        cuda_report("test_cuda_reduce");
        return DFG_TEST_SKIP;
    }
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
    cuda_report("test_cuda_reduce");
    return dfg_test_finish();
}
