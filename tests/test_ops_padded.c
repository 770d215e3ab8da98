/* test_ops_padded.c - left-padded rows in the attention ops (ops/attention.c, attention_prefix.c;
 * the CPU kernels ops/cpu/attention.c, attention_prefix.c): the optional last input start, one i32
 * a row (a prefix row for attention_prefix), the column of the row's first real token.
 *
 * Every kernel is called directly on fresh random inputs with its outputs poisoned first, and
 * compared with the same op WITHOUT start on the same tokens shifted left (each row's real
 * columns copied to a tensor of their own at columns 0 ..):
 *   - attention and attention_bwd: a row with start s is two plain causal attentions, its pads
 *     0 .. s-1 among themselves (what a pad query sees) and its real columns s .. T-1 among
 *     themselves; y, lse and dqkv of both blocks equal the plain op's on each block alone;
 *   - attention_prefix and attention_prefix_bwd: a group whose prefix starts at s equals the plain
 *     op over the prefix's rows s .. Tp-1 alone; the prefix's gradient rows 0 .. s-1 are zeros;
 *   - attention_cached (grouped-query caches too): a query at a real column c equals the plain op
 *     over cache rows s .. Tmax-1 at position c - s; one at a pad column (c < s) the plain op at c.
 *     Cache rows no query may read (below the start of a row whose queries are all real, past the
 *     last query) hold NaN.
 * Starts are drawn at random with 0 and the last column always among them. Then: a start outside
 * its row's columns is the kernel's range error, and the shape rules refuse a start of the wrong
 * dtype or shape in a message naming the op and the tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "graph/ir.h"
#include "ops/cpu/cpu.h"
#include "ops/op.h"
#include "testutil.h"

/* ---------------------------------------------------------------- one node, run directly */
typedef struct {
    dfg_program *p;
    dfg_graph *g;
    dfg_node *n;
    void *in[8], *out[4];
} one;

static void one_begin(one *o, const char *name) {
    memset(o, 0, sizeof(*o));
    o->p = dfg_program_new(name);
    o->g = dfg_graph_new(o->p, "g");
}

/* Allocates the node's buffers (inputs uninitialised-then-filled by the caller, outputs poisoned). */
static bool one_alloc(one *o, dfg_node *n) {
    CHECK(n != NULL && !dfg_program_status(o->p), "build: %s", dfg_program_error(o->p));
    if (!n || dfg_program_status(o->p)) return false;
    o->n = n;
    for (int j = 0; j < n->n_in; j++) o->in[j] = calloc(1, dfg_tensor_bytes(n->in[j]) + 4);
    for (int k = 0; k < n->n_out; k++) {
        o->out[k] = malloc(dfg_tensor_bytes(n->out[k]) + 4);
        dfg_test_poison(o->out[k], dfg_tensor_bytes(n->out[k]));
    }
    return true;
}

/* Runs the CPU kernel with 2 threads; returns its status (the message in err). */
static dfg_status one_run(one *o, char *err, size_t len) {
    dfg_cpu_ctx ctx = {.n_threads = 2, .err = err, .err_len = len};
    ctx.scratch_per_thread = dfg_cpu_scratch_bytes(o->n);
    ctx.scratch = ctx.scratch_per_thread ? malloc(ctx.scratch_per_thread * 2) : NULL;
    dfg_status st = dfg_cpu_kernels[o->n->op](o->n, o->in, o->out, &ctx);
    free(ctx.scratch);
    return st;
}

static bool one_ok(one *o, const char *what) {
    char err[512] = "";
    dfg_status st = one_run(o, err, sizeof(err));
    CHECK(st == DFG_OK, "%s: %s", what, err);
    return st == DFG_OK;
}

static void one_end(one *o) {
    if (o->n) {
        for (int j = 0; j < o->n->n_in; j++) free(o->in[j]);
        for (int k = 0; k < o->n->n_out; k++) free(o->out[k]);
    }
    dfg_program_free(o->p);
}

static dfg_tensor *in_f32(one *o, const char *name, int64_t a, int64_t b, int64_t c) {
    return dfg_input(o->g, name, DFG_F32, DFG_SHAPE(a, b, c));
}
static dfg_tensor *in_start(one *o, int64_t rows) { return dfg_input(o->g, "start", DFG_I32, DFG_SHAPE(rows)); }

/* The backward bw's inputs from its forward f: dy uniform in [-2, 2), then f's inputs but its last
 * (the start), f's outputs (y, lse) and f's start. */
static void bwd_inputs(one *bw, const one *f) {
    dfg_test_fill_uniform(bw->in[0], dfg_tensor_numel(bw->n->in[0]), -2.0f, 2.0f);
    int j = 1;
    for (int i = 0; i + 1 < f->n->n_in; i++, j++) memcpy(bw->in[j], f->in[i], dfg_tensor_bytes(f->n->in[i]));
    for (int k = 0; k < f->n->n_out; k++, j++) memcpy(bw->in[j], f->out[k], dfg_tensor_bytes(f->n->out[k]));
    memcpy(bw->in[j], f->in[f->n->n_in - 1], dfg_tensor_bytes(f->n->in[f->n->n_in - 1]));
}

/* Starts for `rows` rows of `cols` columns (malloc'd): row 0 starts at 0, row 1 at the last column,
 * the rest anywhere (shuffled into place, so no row index is special). */
static int32_t *draw_starts(int rows, int cols) {
    int32_t *s = malloc(sizeof(int32_t) * (size_t)rows);
    for (int b = 0; b < rows; b++) s[b] = b == 0 ? 0 : b == 1 ? cols - 1 : dfg_test_int(0, cols - 1);
    for (int b = rows - 1; b > 0; b--) {
        int k = dfg_test_int(0, b);
        int32_t t = s[b];
        s[b] = s[k], s[k] = t;
    }
    return s;
}

/* The worst |got - want| / (1 + |want|) over n elements of stride-1 rows; NaN counts as infinite. */
static double worst_rows(const float *got, int64_t gs, const float *want, int64_t ws, int64_t rows, int64_t w,
                         double worst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < w; e++) {
            double a = got[r * gs + e], b = want[r * ws + e], d = fabs(a - b) / (1.0 + fabs(b));
            worst = isnan(d) ? INFINITY : fmax(worst, d);
        }
    return worst;
}

static const double TOL = 2e-6;

/* ---------------------------------------------------------------- attention, attention_bwd */
static void check_attention(int B, int T, int H, int D) {
    int64_t C = (int64_t)H * D, C3 = 3 * C;
    int32_t *start = draw_starts(B, T);
    dfg_attrs a = {.attention = {H}};
    one f, bw;
    one_begin(&f, "padded");
    if (!one_alloc(&f, dfg_attention_padded(f.g, in_f32(&f, "qkv", B, T, C3), in_start(&f, B), H)->producer)) return;
    dfg_test_fill_uniform(f.in[0], B * T * C3, -2.0f, 2.0f);
    memcpy(f.in[1], start, sizeof(int32_t) * (size_t)B);
    bool ok = one_ok(&f, "attention with start");
    one_begin(&bw, "padded bwd");
    dfg_tensor *bin[5] = {in_f32(&bw, "dy", B, T, C), in_f32(&bw, "qkv", B, T, C3), in_f32(&bw, "y", B, T, C),
                          dfg_input(bw.g, "lse", DFG_F32, DFG_SHAPE(B, H, T)), in_start(&bw, B)};
    ok = ok && one_alloc(&bw, dfg_node_add(bw.g, DFG_OP_ATTENTION_BWD, bin, 5, &a, 1));
    if (ok) {
        bwd_inputs(&bw, &f);
        ok = one_ok(&bw, "attention_bwd with start");
    }
    double wy = 0.0, wl = 0.0, wd = 0.0;
    for (int b = 0; b < B && ok; b++)
        for (int blk = 0; blk < 2 && ok; blk++) { /* the pads 0 .. s-1, the real columns s .. T-1 */
            int r0 = blk ? start[b] : 0, len = blk ? T - start[b] : start[b];
            if (len == 0) continue;
            one rf, rb;
            one_begin(&rf, "plain");
            one_begin(&rb, "plain bwd");
            dfg_tensor *rin[4] = {in_f32(&rb, "dy", 1, len, C), in_f32(&rb, "qkv", 1, len, C3),
                                  in_f32(&rb, "y", 1, len, C), dfg_input(rb.g, "lse", DFG_F32, DFG_SHAPE(1, H, len))};
            ok = one_alloc(&rf, dfg_attention(rf.g, in_f32(&rf, "qkv", 1, len, C3), H)->producer) &&
                 one_alloc(&rb, dfg_node_add(rb.g, DFG_OP_ATTENTION_BWD, rin, 4, &a, 1));
            if (ok) {
                const float *q = (const float *)f.in[0] + ((int64_t)b * T + r0) * C3;
                memcpy(rf.in[0], q, sizeof(float) * (size_t)(len * C3));
                ok = one_ok(&rf, "plain attention");
            }
            if (ok) {
                memcpy(rb.in[0], (const float *)bw.in[0] + ((int64_t)b * T + r0) * C, sizeof(float) * (size_t)(len * C));
                memcpy(rb.in[1], rf.in[0], sizeof(float) * (size_t)(len * C3));
                memcpy(rb.in[2], rf.out[0], sizeof(float) * (size_t)(len * C));
                memcpy(rb.in[3], rf.out[1], sizeof(float) * (size_t)(H * len));
                ok = one_ok(&rb, "plain attention_bwd");
            }
            if (ok) {
                wy = worst_rows((const float *)f.out[0] + ((int64_t)b * T + r0) * C, C, rf.out[0], C, len, C, wy);
                for (int h = 0; h < H; h++)
                    wl = worst_rows((const float *)f.out[1] + ((int64_t)b * H + h) * T + r0, 1,
                                    (const float *)rf.out[1] + (int64_t)h * len, 1, len, 1, wl);
                wd = worst_rows((const float *)bw.out[0] + ((int64_t)b * T + r0) * C3, C3, rb.out[0], C3, len, C3, wd);
            }
            one_end(&rf), one_end(&rb);
        }
    CHECK(ok && wy <= TOL && wl <= TOL && wd <= TOL,
          "attention B%d T%d H%d D%d: padded vs plain: y %.3g, lse %.3g, dqkv %.3g", B, T, H, D, wy, wl, wd);
    printf("attention B%d T%d H%d D%d starts", B, T, H, D);
    for (int b = 0; b < B; b++) printf(" %d", start[b]);
    printf(": padded = plain on each block (worst y %.2g, lse %.2g, dqkv %.2g)\n", wy, wl, wd);
    one_end(&f), one_end(&bw);
    free(start);
}

/* ---------------------------------------------------------------- attention_prefix(_bwd) */
static void check_prefix(int P, int G, int Tc, int Tp, int H, int D) {
    int n = P * G;
    int64_t C = (int64_t)H * D, C3 = 3 * C;
    int32_t *start = draw_starts(P, Tp);
    dfg_attrs a = {.attention = {H}};
    one f, bw;
    one_begin(&f, "padded prefix");
    dfg_tensor *y = dfg_attention_prefix_padded(f.g, in_f32(&f, "qkv", n, Tc, C3), in_f32(&f, "prefix", P, Tp, C3),
                                                in_start(&f, P), H);
    if (!one_alloc(&f, y->producer)) return;
    dfg_test_fill_uniform(f.in[0], n * Tc * C3, -2.0f, 2.0f);
    dfg_test_fill_uniform(f.in[1], P * Tp * C3, -2.0f, 2.0f);
    memcpy(f.in[2], start, sizeof(int32_t) * (size_t)P);
    bool ok = one_ok(&f, "attention_prefix with start");
    one_begin(&bw, "padded prefix bwd");
    dfg_tensor *bin[6] = {in_f32(&bw, "dy", n, Tc, C),      in_f32(&bw, "qkv", n, Tc, C3),
                          in_f32(&bw, "prefix", P, Tp, C3), in_f32(&bw, "y", n, Tc, C),
                          dfg_input(bw.g, "lse", DFG_F32, DFG_SHAPE(n, H, Tc)), in_start(&bw, P)};
    ok = ok && one_alloc(&bw, dfg_node_add(bw.g, DFG_OP_ATTENTION_PREFIX_BWD, bin, 6, &a, 2));
    if (ok) {
        bwd_inputs(&bw, &f);
        ok = one_ok(&bw, "attention_prefix_bwd with start");
    }
    double wy = 0.0, wl = 0.0, wd = 0.0, wp = 0.0, pads = 0.0;
    for (int p = 0; p < P && ok; p++) {
        int s = start[p], len = Tp - s;
        one rf, rb;
        one_begin(&rf, "plain prefix");
        one_begin(&rb, "plain prefix bwd");
        dfg_tensor *rin[5] = {in_f32(&rb, "dy", G, Tc, C), in_f32(&rb, "qkv", G, Tc, C3), in_f32(&rb, "prefix", 1, len, C3),
                              in_f32(&rb, "y", G, Tc, C), dfg_input(rb.g, "lse", DFG_F32, DFG_SHAPE(G, H, Tc))};
        ok = one_alloc(&rf, dfg_attention_prefix(rf.g, in_f32(&rf, "qkv", G, Tc, C3), in_f32(&rf, "prefix", 1, len, C3), H)
                                ->producer) &&
             one_alloc(&rb, dfg_node_add(rb.g, DFG_OP_ATTENTION_PREFIX_BWD, rin, 5, &a, 2));
        int64_t rows = (int64_t)G * Tc; /* the group's rows, p*G .. p*G+G-1 */
        const float *qkv_g = (const float *)f.in[0] + (int64_t)p * rows * C3;
        const float *pre_s = (const float *)f.in[1] + ((int64_t)p * Tp + s) * C3;
        if (ok) {
            memcpy(rf.in[0], qkv_g, sizeof(float) * (size_t)(rows * C3));
            memcpy(rf.in[1], pre_s, sizeof(float) * (size_t)(len * C3));
            ok = one_ok(&rf, "plain attention_prefix");
        }
        if (ok) {
            memcpy(rb.in[0], (const float *)bw.in[0] + (int64_t)p * rows * C, sizeof(float) * (size_t)(rows * C));
            memcpy(rb.in[1], rf.in[0], sizeof(float) * (size_t)(rows * C3));
            memcpy(rb.in[2], rf.in[1], sizeof(float) * (size_t)(len * C3));
            memcpy(rb.in[3], rf.out[0], sizeof(float) * (size_t)(rows * C));
            memcpy(rb.in[4], rf.out[1], sizeof(float) * (size_t)(G * H * Tc));
            ok = one_ok(&rb, "plain attention_prefix_bwd");
        }
        if (ok) {
            wy = worst_rows((const float *)f.out[0] + (int64_t)p * rows * C, C, rf.out[0], C, rows, C, wy);
            wl = worst_rows((const float *)f.out[1] + (int64_t)p * G * H * Tc, 1, rf.out[1], 1, (int64_t)G * H * Tc, 1, wl);
            wd = worst_rows((const float *)bw.out[0] + (int64_t)p * rows * C3, C3, rb.out[0], C3, rows, C3, wd);
            const float *dpre = (const float *)bw.out[1] + (int64_t)p * Tp * C3;
            wp = worst_rows(dpre + (int64_t)s * C3, C3, rb.out[1], C3, len, C3, wp);
            for (int64_t e = 0; e < (int64_t)s * C3; e++) pads = isnan(dpre[e]) ? INFINITY : fmax(pads, fabs(dpre[e]));
        }
        one_end(&rf), one_end(&rb);
    }
    CHECK(ok && wy <= TOL && wl <= TOL && wd <= TOL && wp <= TOL && pads == 0.0,
          "attention_prefix P%d G%d Tc%d Tp%d H%d D%d: padded vs plain: y %.3g, lse %.3g, dqkv %.3g, dprefix %.3g, "
          "dprefix of the pads %.3g (must be 0)",
          P, G, Tc, Tp, H, D, wy, wl, wd, wp, pads);
    printf("attention_prefix P%d G%d Tc%d Tp%d H%d D%d starts", P, G, Tc, Tp, H, D);
    for (int p = 0; p < P; p++) printf(" %d", start[p]);
    printf(": padded = plain over the prefix's real rows (worst y %.2g, lse %.2g, dqkv %.2g, dprefix %.2g; pad rows 0)\n",
           wy, wl, wd, wp);
    one_end(&f), one_end(&bw);
    free(start);
}

/* ---------------------------------------------------------------- attention_cached */
static void check_cached(int B, int Tq, int Tmax, int pos, int H, int Hkv, int D) {
    int64_t C = (int64_t)H * D, Ckv = (int64_t)Hkv * D;
    int32_t *start = draw_starts(B, Tmax);
    one f;
    one_begin(&f, "padded cached");
    dfg_tensor *y = dfg_attention_cached_padded(f.g, in_f32(&f, "q", B, Tq, C), in_f32(&f, "k", B, Tmax, Ckv),
                                                in_f32(&f, "v", B, Tmax, Ckv),
                                                dfg_input(f.g, "pos", DFG_I32, DFG_SCALAR), in_start(&f, B), H);
    if (!one_alloc(&f, y->producer)) return;
    float *q = f.in[0], *kc = f.in[1], *vc = f.in[2];
    dfg_test_fill_uniform(q, B * Tq * C, -2.0f, 2.0f);
    dfg_test_fill_uniform(kc, B * Tmax * Ckv, -2.0f, 2.0f);
    dfg_test_fill_uniform(vc, B * Tmax * Ckv, -2.0f, 2.0f);
    *(int32_t *)f.in[3] = pos;
    memcpy(f.in[4], start, sizeof(int32_t) * (size_t)B);
    /* rows no query reads: NaN (a read would show) */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tmax; t++)
            if (t > pos + Tq - 1 || (pos >= start[b] && t < start[b])) {
                dfg_test_poison(kc + ((int64_t)b * Tmax + t) * Ckv, sizeof(float) * (size_t)Ckv);
                dfg_test_poison(vc + ((int64_t)b * Tmax + t) * Ckv, sizeof(float) * (size_t)Ckv);
            }
    bool ok = one_ok(&f, "attention_cached with start");
    double worst = 0.0;
    int real = 0, pad = 0;
    for (int b = 0; b < B && ok; b++)
        for (int i = 0; i < Tq && ok; i++) {
            int col = pos + i, lo = col >= start[b] ? start[b] : 0; /* plain op over rows lo .. at col - lo */
            one r;
            one_begin(&r, "plain cached");
            dfg_tensor *ry = dfg_attention_cached(r.g, in_f32(&r, "q", 1, 1, C), in_f32(&r, "k", 1, Tmax - lo, Ckv),
                                                  in_f32(&r, "v", 1, Tmax - lo, Ckv),
                                                  dfg_input(r.g, "pos", DFG_I32, DFG_SCALAR), H);
            ok = one_alloc(&r, ry->producer);
            if (ok) {
                memcpy(r.in[0], q + ((int64_t)b * Tq + i) * C, sizeof(float) * (size_t)C);
                memcpy(r.in[1], kc + ((int64_t)b * Tmax + lo) * Ckv, sizeof(float) * (size_t)((Tmax - lo) * Ckv));
                memcpy(r.in[2], vc + ((int64_t)b * Tmax + lo) * Ckv, sizeof(float) * (size_t)((Tmax - lo) * Ckv));
                *(int32_t *)r.in[3] = col - lo;
                ok = one_ok(&r, "plain attention_cached");
            }
            if (ok) worst = worst_rows((const float *)f.out[0] + ((int64_t)b * Tq + i) * C, C, r.out[0], C, 1, C, worst);
            col >= start[b] ? real++ : pad++;
            one_end(&r);
        }
    CHECK(ok && worst <= TOL, "attention_cached B%d Tq%d Tmax%d pos%d H%d Hkv%d D%d: padded vs plain %.3g", B, Tq, Tmax,
          pos, H, Hkv, D, worst);
    printf("attention_cached B%d Tq%d Tmax%d pos%d H%d Hkv%d D%d: %d real and %d pad queries = plain (worst %.2g)\n", B,
           Tq, Tmax, pos, H, Hkv, D, real, pad, worst);
    one_end(&f);
    free(start);
}

/* ---------------------------------------------------------------- refusals */
static bool contains(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

static void check_refusals(void) {
    /* a start outside the row: the kernel's range error, for each op */
    one f;
    one_begin(&f, "range");
    if (one_alloc(&f, dfg_attention_padded(f.g, in_f32(&f, "qkv", 2, 5, 6), in_start(&f, 2), 1)->producer)) {
        dfg_test_fill_uniform(f.in[0], 2 * 5 * 6, -1.0f, 1.0f);
        char err[512] = "";
        for (int k = 0; k < 2; k++) {
            int32_t bad[2] = {0, k ? 5 : -1};
            memcpy(f.in[1], bad, sizeof(bad));
            dfg_status st = one_run(&f, err, sizeof(err));
            CHECK(st == DFG_ERR_RANGE && contains(err, "start[1]"), "start %d of a row of 5: %d '%s'", bad[1], st, err);
        }
        printf("refused: %s\n", err);
    }
    one_end(&f);
    one_begin(&f, "range cached");
    dfg_tensor *y = dfg_attention_cached_padded(f.g, in_f32(&f, "q", 1, 1, 4), in_f32(&f, "k", 1, 6, 4),
                                                in_f32(&f, "v", 1, 6, 4), dfg_input(f.g, "pos", DFG_I32, DFG_SCALAR),
                                                in_start(&f, 1), 2);
    if (one_alloc(&f, y->producer)) {
        *(int32_t *)f.in[3] = 2;
        *(int32_t *)f.in[4] = 6;
        char err[512] = "";
        CHECK(one_run(&f, err, sizeof(err)) == DFG_ERR_RANGE, "cached start past the cache: '%s'", err);
    }
    one_end(&f);
    one_begin(&f, "range prefix");
    y = dfg_attention_prefix_padded(f.g, in_f32(&f, "qkv", 2, 3, 6), in_f32(&f, "prefix", 1, 4, 6), in_start(&f, 1), 1);
    if (one_alloc(&f, y->producer)) {
        *(int32_t *)f.in[2] = 4;
        char err[512] = "";
        CHECK(one_run(&f, err, sizeof(err)) == DFG_ERR_RANGE, "prefix start past the prefix: '%s'", err);
    }
    one_end(&f);
    /* the shape rules: a start of the wrong dtype or shape (a prefix's start is per prefix row) */
    struct {
        const char *what;
        int which; /* 0 attention, 1 prefix, 2 cached */
        dfg_dtype dt;
        dfg_shape s;
    } bad[] = {
        {"f32 start", 0, DFG_F32, DFG_SHAPE(2)},         {"start (3) for 2 rows", 0, DFG_I32, DFG_SHAPE(3)},
        {"start (2, 1)", 0, DFG_I32, DFG_SHAPE(2, 1)},   {"prefix start per completion row", 1, DFG_I32, DFG_SHAPE(4)},
        {"cached start scalar", 2, DFG_I32, DFG_SCALAR},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dfg_program *p = dfg_program_new("shape");
        dfg_graph *g = dfg_graph_new(p, "g");
        dfg_tensor *s = dfg_input(g, "start", bad[i].dt, bad[i].s), *r;
        if (bad[i].which == 0)
            r = dfg_attention_padded(g, dfg_input(g, "qkv", DFG_F32, DFG_SHAPE(2, 5, 6)), s, 1);
        else if (bad[i].which == 1)
            r = dfg_attention_prefix_padded(g, dfg_input(g, "qkv", DFG_F32, DFG_SHAPE(4, 3, 6)),
                                            dfg_input(g, "prefix", DFG_F32, DFG_SHAPE(2, 5, 6)), s, 1);
        else
            r = dfg_attention_cached_padded(g, dfg_input(g, "q", DFG_F32, DFG_SHAPE(2, 1, 4)),
                                            dfg_input(g, "k", DFG_F32, DFG_SHAPE(2, 6, 4)),
                                            dfg_input(g, "v", DFG_F32, DFG_SHAPE(2, 6, 4)),
                                            dfg_input(g, "pos", DFG_I32, DFG_SCALAR), s, 2);
        const char *msg = dfg_program_error(p);
        const char *op = bad[i].which == 0 ? "attention" : bad[i].which == 1 ? "attention_prefix" : "attention_cached";
        CHECK(dfg_graph_status(g) == DFG_ERR_SHAPE && contains(msg, op) && contains(msg, "start"),
              "%s: status %d, '%s'", bad[i].what, dfg_graph_status(g), msg);
        if (i == 1) printf("refused: %s\n", msg);
        (void)r;
        dfg_program_free(p);
    }
}

int main(void) {
    dfg_test_init("test_ops_padded");
    /* B, T, H, D: T = 1 (a row that is all start), short, longer than the CPU's blocks */
    check_attention(2, 1, 1, 4);
    check_attention(3, 7, 2, 3);
    check_attention(4, 40, 3, 8);
    for (int r = 0; r < 3; r++)
        check_attention(dfg_test_int(2, 5), dfg_test_int(2, 70), dfg_test_int(1, 4), dfg_test_int(1, 17));
    /* P, G, Tc, Tp, H, D */
    check_prefix(2, 2, 3, 1, 1, 4);
    check_prefix(3, 2, 5, 9, 2, 5);
    check_prefix(2, 3, 1, 30, 3, 8);
    for (int r = 0; r < 3; r++)
        check_prefix(dfg_test_int(2, 4), dfg_test_int(1, 3), dfg_test_int(1, 20), dfg_test_int(1, 40), dfg_test_int(1, 3),
                     dfg_test_int(1, 9));
    /* B, Tq, Tmax, pos, H, Hkv, D: pos 0 (every row but the first pads its query), inside, last */
    check_cached(3, 1, 9, 0, 2, 2, 4);
    check_cached(4, 1, 30, 17, 4, 2, 8);
    check_cached(3, 3, 50, 47, 6, 3, 5);
    check_cached(5, 4, 300, 200, 8, 1, 16);
    for (int r = 0; r < 3; r++) {
        int Tmax = dfg_test_int(2, 80), Tq = dfg_test_int(1, Tmax < 4 ? Tmax : 4), Hkv = dfg_test_int(1, 3);
        check_cached(dfg_test_int(2, 5), Tq, Tmax, dfg_test_int(0, Tmax - Tq), Hkv * dfg_test_int(1, 3), Hkv,
                     dfg_test_int(1, 12));
    }
    check_refusals();
    return dfg_test_finish();
}
