/* test_cuda_layout.c - the CUDA layout kernels (ops/cuda/layout.cu: reshape, permute, slice,
 * concat, expand) against the CPU kernels.
 *
 * Through the harness (tests/cuda_harness.h), in f32 and bf16 and with i32 and u8 elements: permutes
 * that keep the innermost dim (row copies of 16-byte chunks or narrower), that move it (the
 * shared-memory transpose, with partial tiles and batch dims), that are the identity once dims of
 * size 1 are dropped; slices along every axis with starts that break the alignment, and with the
 * start read at run time; concats of uneven parts along every axis; expands of leading, middle and
 * innermost dims. Directly: reshape into a buffer of its own (the copy a view needs when the
 * planner separates them), operands off their alignment (the narrow chunks), and a run-time start
 * out of range (the flag the CPU kernel's error becomes on the GPU). slice_at with one start a row
 * (start (B) along axis 1): each output row is the input row's own range (checked against the
 * CPU, and directly against the row's bytes), and a row out of range is flagged and clamped alone. */
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"

typedef struct {
    dfg_op op;
    dfg_dtype dt;      /* DFG_DTYPE_COUNT: the run's float dtype */
    dfg_shape x[4];    /* inputs (concat: up to 4) */
    int n_in;
    int perm[DFG_MAX_RANK];
    int axis;
    int64_t start, len; /* slice */
    bool dynamic;       /* slice_at: start from an i32 input */
    bool rows;          /* slice_at: one start a row (x's dim 0), drawn in range */
    dfg_shape to;       /* expand, reshape */
} lay_case;

static dfg_node *build_lay(dfg_graph *g, dfg_dtype dt, void *user) {
    const lay_case *c = user;
    dfg_dtype t = c->dt == DFG_DTYPE_COUNT ? dt : c->dt;
    dfg_tensor *x = dfg_input(g, "x", t, c->x[0]), *y = NULL;
    switch (c->op) {
    case DFG_OP_PERMUTE: y = dfg_permute(g, x, c->perm); break;
    case DFG_OP_SLICE:
        y = c->dynamic ? dfg_slice_at(g, x, c->axis,
                                      dfg_input(g, "start", DFG_I32, DFG_SHAPE(c->rows ? c->x[0].d[0] : 1)), c->len)
                       : dfg_slice(g, x, c->axis, c->start, c->len);
        break;
    case DFG_OP_CONCAT: {
        dfg_tensor *xs[4] = {x};
        const char *names[4] = {"x0", "x1", "x2", "x3"};
        for (int i = 1; i < c->n_in; i++) xs[i] = dfg_input(g, names[i], t, c->x[i]);
        y = dfg_concat(g, xs, c->n_in, c->axis);
        break;
    }
    case DFG_OP_EXPAND: y = dfg_expand(g, x, c->to); break;
    case DFG_OP_DETACH: y = dfg_detach(g, x); break;
    default: y = dfg_reshape(g, x, c->to); break;
    }
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* distinct values (a misplaced element cannot match by chance); a run-time start in range */
static void fill_lay(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const lay_case *c = user;
    if (c->op == DFG_OP_SLICE && slot == 1) {
        for (int64_t i = 0; i < n; i++) ((int32_t *)data)[i] = dfg_test_int(0, (int)(c->x[0].d[c->axis] - c->len));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == DFG_I32) ((int32_t *)data)[i] = (int32_t)(uint32_t)dfg_test_u64();
        else if (t->dtype == DFG_U8) ((uint8_t *)data)[i] = (uint8_t)dfg_test_u64();
        else ((float *)data)[i] = dfg_test_uniform(-2.0f, 2.0f);
    }
}

static void check(const char *what, lay_case c) {
    char label[200], sb[64];
    snprintf(label, sizeof(label), "%s %s %s", what, dfg_shape_str(c.x[0], sb, sizeof(sb)),
             c.dt == DFG_DTYPE_COUNT ? "" : dfg_dtype_name(c.dt));
    /* moves are exact */
    cuda_case k = {.label = label, .build = build_lay, .user = &c, .fill = fill_lay, .bf16 = c.dt == DFG_DTYPE_COUNT,
                   .rtol = 1e-30, .atol = 1e-30, .rtol_bf16 = 1e-30, .atol_bf16 = 1e-30, .seeds = 2};
    cuda_check(&k);
}

#define S DFG_SHAPE
#define ANYF DFG_DTYPE_COUNT

/* ---------------------------------------------------------------- direct runs */
typedef struct {
    dfg_program *p;
    dfg_node *n;
    void *mem[6];
    void *in[4], *out[1];
} direct;

/* Builds the case with every buffer its own, `misalign` bytes past a 16-byte boundary, and fills
 * the inputs. */
static bool direct_make(direct *d, const lay_case *c, size_t misalign) {
    memset(d, 0, sizeof(*d));
    d->n = cuda_node_alone(build_lay, (void *)c, DFG_F32, "direct", &d->p);
    if (!d->n) return false;
    for (int j = 0; j < d->n->n_in + 1; j++) {
        const dfg_tensor *t = j < d->n->n_in ? d->n->in[j] : d->n->out[0];
        d->mem[j] = malloc(dfg_tensor_bytes(t) + misalign + 1);
        dfg_test_poison(d->mem[j], dfg_tensor_bytes(t) + misalign + 1);
        void *at = (char *)d->mem[j] + misalign;
        if (j < d->n->n_in) d->in[j] = at, fill_lay(j, t, at, dfg_tensor_numel(t), (void *)c);
        else d->out[0] = at;
    }
    return true;
}

static void direct_free(direct *d) {
    for (int j = 0; j < 6; j++) free(d->mem[j]);
    dfg_program_free(d->p);
}

/* one SM: 8 blocks, so the grid-stride walks wrap rows and the transpose loops over tiles; *flags:
 * the device flags the kernel raised */
static bool emu_run(const dfg_node *n, void **in, void **out, int *flags) {
    *flags = cuda_run_emulated(dfg_op_name(n->op), n, in, out, 1, 0);
    return *flags >= 0;
}

/* The emulated kernel, with every operand `misalign` bytes off, into an output buffer of its own,
 * gives the CPU kernel's bytes (the inputs are copied so the CPU reads the same values). */
static void check_direct(const char *what, lay_case c, size_t misalign) {
    direct d;
    if (!direct_make(&d, &c, misalign)) return;
    size_t bytes = dfg_tensor_bytes(d.n->out[0]);
    void *ref = malloc(bytes + 1), *ref_out[1] = {ref};
    int flags = 0;
    if (cuda_run_cpu(dfg_op_name(d.n->op), d.n, d.in, ref_out) && emu_run(d.n, d.in, d.out, &flags)) {
        CHECK(flags == 0, "%s: flagged a bad value in valid inputs", what);
        CHECK(memcmp(ref, d.out[0], bytes) == 0, "%s (operands %zu bytes off alignment, %zu bytes): CUDA differs from "
              "the CPU", what, misalign, bytes);
    }
    free(ref);
    direct_free(&d);
}

/* ---------------------------------------------------------------- the tests */
static void test_permute(void) {
    struct { dfg_shape s; int perm[DFG_MAX_RANK]; } p[] = {
        {S(5, 7), {1, 0}},                    /* one partial tile */
        {S(33, 65), {1, 0}},                  /* partial tiles both ways */
        {S(64, 96), {1, 0}},                  /* whole tiles */
        {S(2, 3, 4, 5), {0, 2, 1, 3}},        /* innermost kept: rows of 5 */
        {S(2, 40, 3, 64), {0, 2, 1, 3}},      /* (B, T, H, D) -> (B, H, T, D): 16-byte chunks */
        {S(3, 4, 5), {2, 0, 1}},              /* transpose with a batch dim */
        {S(3, 4, 5), {1, 2, 0}},
        {S(70, 3, 40), {2, 1, 0}},            /* a batch dim between the tiled ones */
        {S(3, 100, 70), {0, 2, 1}},           /* 36 tiles: several per block in the direct run */
        {S(2, 1, 3, 1, 4, 5), {5, 3, 0, 2, 1, 4}}, /* size-1 dims dropped */
        {S(4, 6), {0, 1}},                    /* identity: a copy */
        {S(1, 1, 7), {2, 0, 1}},              /* the identity once size-1 dims are dropped */
        {S(2, 3, 4, 5, 6, 7), {5, 4, 3, 2, 1, 0}}, /* full reverse: four batch dims */
        {S(8, 8, 2), {1, 0, 2}},              /* rows of 2 elements */
        {S(2, 3, 4, 5, 6), {0, 3, 4, 1, 2}},  /* merged groups */
        {S(1), {0}},
    };
    const dfg_dtype dts[] = {ANYF, DFG_I32, DFG_U8};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
        for (int t = 0; t < 3; t++) {
            if (t > 0 && i % 2) continue;
            lay_case c = {.op = DFG_OP_PERMUTE, .dt = dts[t], .x = {p[i].s}, .n_in = 1};
            memcpy(c.perm, p[i].perm, sizeof(c.perm));
            char what[64];
            snprintf(what, sizeof(what), "permute (%d,%d,%d,%d,%d,%d)", c.perm[0], c.perm[1], c.perm[2], c.perm[3],
                     c.perm[4], c.perm[5]);
            check(what, c);
            if (t == 0) check_direct(what, c, 4); /* f32 elements off the 16-byte alignment */
        }
}

static void test_slice(void) {
    struct { dfg_shape s; int axis; int64_t start, len; } sl[] = {
        {S(10, 7), 0, 3, 4},   {S(10, 7), 1, 2, 5},   {S(4, 6, 8), 1, 1, 3}, {S(4, 6, 8), 2, 5, 3},
        {S(1025), 0, 1, 1000}, {S(2, 64), 1, 16, 32}, {S(3, 5), 0, 0, 3},    {S(1), 0, 0, 1},
        {S(7, 4099), 1, 4098, 1},
    };
    const dfg_dtype dts[] = {ANYF, DFG_I32, DFG_U8};
    for (size_t i = 0; i < sizeof(sl) / sizeof(sl[0]); i++)
        for (int t = 0; t < 3; t++)
            for (int dyn = 0; dyn < 2; dyn++) {
                if (t > 0 && (i + (size_t)dyn) % 2) continue;
                lay_case c = {.op = DFG_OP_SLICE, .dt = dts[t], .x = {sl[i].s}, .n_in = 1, .axis = sl[i].axis,
                              .start = sl[i].start, .len = sl[i].len, .dynamic = dyn};
                char what[64];
                snprintf(what, sizeof(what), "slice%s axis %d [%lld, +%lld)", dyn ? "_at" : "", c.axis,
                         (long long)c.start, (long long)c.len);
                check(what, c);
                if (t == 0 && !dyn) check_direct(what, c, 4);
            }
    /* a run-time start out of range: the CPU fails; the GPU flags it and copies a clamped range */
    lay_case c = {.op = DFG_OP_SLICE, .dt = DFG_F32, .x = {S(4, 9)}, .n_in = 1, .axis = 1, .len = 4, .dynamic = true};
    const int32_t bad[] = {6, -1, 9, 1 << 30};
    for (int b = 0; b < 4; b++) {
        direct d;
        if (!direct_make(&d, &c, 0)) return;
        *(int32_t *)d.in[1] = bad[b];
        int flags = 0;
        if (emu_run(d.n, d.in, d.out, &flags)) {
            CHECK(flags != 0, "slice_at start %d of 9 (len 4): not flagged", bad[b]);
            int32_t clamped = bad[b] < 0 ? 0 : 5;
            for (int r = 0; r < 4; r++)
                CHECK(memcmp((float *)d.out[0] + 4 * r, (float *)d.in[0] + 9 * r + clamped, 16) == 0,
                      "slice_at start %d: row %d is not the clamped range", bad[b], r);
        }
        void *ref[1] = {malloc(64)};
        char err[256] = "";
        dfg_cpu_ctx ctx = {.n_threads = 1, .err = err, .err_len = sizeof(err)};
        CHECK(dfg_cpu_kernels[DFG_OP_SLICE](d.n, d.in, ref, &ctx) != DFG_OK, "the CPU kernel took start %d", bad[b]);
        free(ref[0]);
        direct_free(&d);
    }
}

/* slice_at with one start a row: shapes with rows of one element, of 16-byte chunks, one row;
 * each output row is its own input row's range; one row's start out of range is flagged and
 * clamped alone (the CPU fails) */
static void test_slice_rows(void) {
    struct { dfg_shape s; int64_t len; } sr[] = {
        {S(5, 9), 4}, {S(3, 10, 8), 3}, {S(4, 20, 2, 64), 1}, {S(1, 7, 3), 7}, {S(300, 12, 4), 2},
    };
    const dfg_dtype dts[] = {ANYF, DFG_I32, DFG_U8};
    for (size_t i = 0; i < sizeof(sr) / sizeof(sr[0]); i++)
        for (int t = 0; t < 3; t++) {
            lay_case c = {.op = DFG_OP_SLICE, .dt = dts[t], .x = {sr[i].s}, .n_in = 1, .axis = 1, .len = sr[i].len,
                          .dynamic = true, .rows = true};
            char what[64];
            snprintf(what, sizeof(what), "slice_at axis 1, a start a row, +%lld", (long long)c.len);
            check(what, c);
            if (t == 0) check_direct(what, c, 4);
        }
    lay_case c = {.op = DFG_OP_SLICE, .dt = DFG_F32, .x = {S(3, 9, 2)}, .n_in = 1, .axis = 1, .len = 4,
                  .dynamic = true, .rows = true};
    direct d;
    if (!direct_make(&d, &c, 0)) return;
    int32_t *start = d.in[1];
    bool ran = cuda_run_cpu("slice_at", d.n, d.in, d.out);
    for (int r = 0; r < 3 && ran; r++) /* by hand: output row r is input row r's elements start[r] .. +len */
        CHECK(!memcmp((float *)d.out[0] + 8 * r, (float *)d.in[0] + 18 * r + 2 * start[r], 32),
              "slice_at, a start a row: row %d is not its range from %d", r, start[r]);
    const int32_t bad[] = {6, -1};
    for (int b = 0; b < 2; b++) {
        start[1] = bad[b];
        int flags = 0;
        if (emu_run(d.n, d.in, d.out, &flags)) {
            CHECK(flags != 0, "slice_at row 1's start %d of 9 (len 4): not flagged", bad[b]);
            for (int r = 0; r < 3; r++) {
                int32_t s = r == 1 ? (bad[b] < 0 ? 0 : 5) : start[r];
                CHECK(memcmp((float *)d.out[0] + 8 * r, (float *)d.in[0] + 18 * r + 2 * s, 32) == 0,
                      "slice_at row 1's start %d: row %d is not its (clamped) range", bad[b], r);
            }
        }
        void *ref[1] = {malloc(128)};
        char err[256] = "";
        dfg_cpu_ctx ctx = {.n_threads = 1, .err = err, .err_len = sizeof(err)};
        CHECK(dfg_cpu_kernels[DFG_OP_SLICE](d.n, d.in, ref, &ctx) != DFG_OK, "the CPU kernel took row 1's start %d",
              bad[b]);
        free(ref[0]);
    }
    direct_free(&d);
}

static void test_concat(void) {
    struct { dfg_shape x[4]; int n, axis; } cc[] = {
        {{S(3, 5), S(3, 7)}, 2, 1},
        {{S(3, 5), S(4, 5), S(1, 5)}, 3, 0},
        {{S(2, 4, 8), S(2, 4, 8), S(2, 4, 1)}, 3, 2},
        {{S(5), S(1), S(1024)}, 3, 0},
        {{S(2, 16, 64), S(2, 3, 64)}, 2, 1}, /* 16-byte rows */
        {{S(2, 3, 4), S(2, 1, 4), S(2, 2, 4), S(2, 5, 4)}, 4, 1},
        {{S(7, 9)}, 1, 0},
    };
    const dfg_dtype dts[] = {ANYF, DFG_I32, DFG_U8};
    for (size_t i = 0; i < sizeof(cc) / sizeof(cc[0]); i++)
        for (int t = 0; t < 3; t++) {
            if (t > 0 && i % 2) continue;
            lay_case c = {.op = DFG_OP_CONCAT, .dt = dts[t], .n_in = cc[i].n, .axis = cc[i].axis};
            memcpy(c.x, cc[i].x, sizeof(c.x));
            char what[64];
            snprintf(what, sizeof(what), "concat of %d axis %d", c.n_in, c.axis);
            check(what, c);
            if (t == 0) check_direct(what, c, 4);
        }
}

static void test_expand(void) {
    struct { dfg_shape x, to; } ex[] = {
        {S(3, 1), S(3, 40)},       /* the innermost dim broadcast: repeated elements */
        {S(1, 40), S(5, 40)},      /* rows */
        {S(40), S(2, 3, 40)},      /* leading dims */
        {S(2, 1, 8), S(2, 5, 8)},  /* a middle dim */
        {DFG_SCALAR, S(4, 5)},
        {S(1), S(1)},
        {S(3, 1, 1), S(3, 4, 5)},
        {S(1, 3, 1, 5), S(2, 3, 4, 5)},
        {S(2, 1, 33), S(2, 7, 33)},
        {S(6), S(6)},
    };
    const dfg_dtype dts[] = {ANYF, DFG_I32, DFG_U8};
    for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++)
        for (int t = 0; t < 3; t++) {
            if (t > 0 && i % 2) continue;
            lay_case c = {.op = DFG_OP_EXPAND, .dt = dts[t], .x = {ex[i].x}, .n_in = 1, .to = ex[i].to};
            char what[64], sb[64];
            snprintf(what, sizeof(what), "expand to %s", dfg_shape_str(c.to, sb, sizeof(sb)));
            check(what, c);
            if (t == 0) check_direct(what, c, 4);
        }
}

static void test_reshape(void) {
    /* a view: through the harness the output is the input's buffer */
    lay_case v = {.op = DFG_OP_RESHAPE, .dt = ANYF, .x = {S(6, 7)}, .n_in = 1, .to = S(42)};
    check("reshape (view)", v);
    /* into a buffer of its own: every chunk width */
    struct { dfg_shape x, to; dfg_dtype dt; size_t off; } r[] = {
        {S(4099), S(1, 4099), DFG_F32, 0}, {S(4099), S(4099, 1), DFG_F32, 4}, {S(8, 8), S(64), DFG_I32, 8},
        {S(7), S(7, 1), DFG_U8, 0},        {S(3, 5), S(15), DFG_U8, 1},       {S(18), S(2, 9), DFG_U8, 2},
        {S(1), S(1), DFG_U8, 3},
    };
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
        lay_case c = {.op = DFG_OP_RESHAPE, .dt = r[i].dt, .x = {r[i].x}, .n_in = 1, .to = r[i].to};
        check_direct("reshape (copy)", c, r[i].off);
    }
}

int main(void) {
    if (!cuda_test_begin("test_cuda_layout")) return DFG_TEST_SKIP;
    test_permute();
    test_slice();
    test_slice_rows();
    test_concat();
    test_expand();
    test_reshape();
    /* detach: a view, like reshape; its launcher copies only when the planner gave it bytes */
    check("detach", (lay_case){.op = DFG_OP_DETACH, .dt = ANYF, .x = {S(3, 1025)}, .n_in = 1});
    check("detach", (lay_case){.op = DFG_OP_DETACH, .dt = DFG_I32, .x = {S(7)}, .n_in = 1});
    return cuda_test_end();
}
