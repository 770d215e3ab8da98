/* test_attention_shared.c - attention_shared_cached's CPU kernel (ops/cpu/attention_shared.c)
 * against attention_cached on the equivalent copied cache: row b of the copied caches is its
 * prompt's part followed by its own part. Fresh random inputs, poisoned outputs; cases over
 * groups, grouped-query heads, one position for every row or one a row, left padding (a start per
 * group, and starts that differ inside a group), queries inside the prompt (Tq > 1 from a column
 * before Tp), prompt_of (rows whose prompts are not their neighbours'), one thread and two.
 *   - the default kernels: within 1e-6 (the prompt's scores are one GEMM for the group, the copied
 *     cache's a GEMV a row: the sums' orders differ);
 *   - a batch-invariant context: bit for bit (both go through invariant.c's one order);
 *   - a position, start or prompt_of out of range fails the step naming it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "ops/cpu/cpu.h"
#include "ops/op.h"
#include "testutil.h"

typedef struct {
    int P, G, Tp, Tc, Tq, H, Hkv, D;
    int pos;          /* every row's column, or the first row's with rows_pos */
    bool rows_pos;    /* one column a row: pos + (b % 3) */
    int pad;          /* 0: no start; 1: a start a group; 2: starts that differ inside a group */
    bool prompt_of;   /* rows' prompts permuted (the tail's gathered rows) */
} sh_case;

typedef struct {
    dfg_program *p;
    const dfg_node *shared, *copied;
} sh_nodes;

static int64_t N_of(const sh_case *c) { return (int64_t)c->P * c->G; }

static bool build(const sh_case *c, sh_nodes *o) {
    o->p = dfg_program_new("shared");
    dfg_graph *g = dfg_graph_new(o->p, "g");
    int64_t N = N_of(c), C = (int64_t)c->H * c->D, W = (int64_t)c->Hkv * c->D, T = c->Tp + c->Tc;
    dfg_tensor *q = dfg_input(g, "q", DFG_F32, DFG_SHAPE(N, c->Tq, C));
    dfg_tensor *pos = dfg_input(g, "pos", DFG_I32, c->rows_pos ? DFG_SHAPE(N) : DFG_SCALAR);
    dfg_tensor *start = c->pad ? dfg_input(g, "start", DFG_I32, DFG_SHAPE(N)) : NULL;
    dfg_tensor *of = c->prompt_of ? dfg_input(g, "prompt_of", DFG_I32, DFG_SHAPE(N)) : NULL;
    dfg_tensor *y = dfg_attention_shared_cached(
        g, q, dfg_input(g, "kp", DFG_F32, DFG_SHAPE(c->P, c->Tp, W)), dfg_input(g, "vp", DFG_F32, DFG_SHAPE(c->P, c->Tp, W)),
        dfg_input(g, "k", DFG_F32, DFG_SHAPE(N, c->Tc, W)), dfg_input(g, "v", DFG_F32, DFG_SHAPE(N, c->Tc, W)), pos, start,
        of, c->H);
    dfg_tensor *yc = dfg_attention_cached_padded(g, q, dfg_input(g, "kc", DFG_F32, DFG_SHAPE(N, T, W)),
                                                 dfg_input(g, "vc", DFG_F32, DFG_SHAPE(N, T, W)), pos, start, c->H);
    bool ok = dfg_graph_status(g) == DFG_OK;
    CHECK(ok, "build: %s", dfg_graph_error(g));
    if (ok) o->shared = y->producer, o->copied = yc->producer;
    return ok;
}

static dfg_status run(const dfg_node *n, void *const *in, float *y, int threads, bool invariant, char *err, size_t len) {
    dfg_cpu_ctx ctx = {.n_threads = threads, .err = err, .err_len = len, .invariant = invariant};
    ctx.scratch_per_thread = dfg_cpu_scratch_bytes(n);
    ctx.scratch = malloc(ctx.scratch_per_thread * (size_t)threads + 1);
    dfg_test_poison(ctx.scratch, ctx.scratch_per_thread * (size_t)threads);
    dfg_test_poison(y, dfg_tensor_bytes(n->out[0]));
    dfg_status st = dfg_cpu_kernels[n->op](n, in, (void *const[]){y}, &ctx);
    free(ctx.scratch);
    return st;
}

static float *rnd(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = dfg_test_uniform(-2.0f, 2.0f);
    return x;
}

typedef struct {
    float *q, *kp, *vp, *k, *v, *kc, *vc;
    int32_t pos[64], start[64], of[64];
} sh_data;

/* Random parts, and the copied caches row b = [prompt(b)'s part | b's own part] */
static void fill(const sh_case *c, sh_data *d) {
    int64_t N = N_of(c), C = (int64_t)c->H * c->D, W = (int64_t)c->Hkv * c->D, T = c->Tp + c->Tc;
    d->q = rnd(N * c->Tq * C), d->kp = rnd((int64_t)c->P * c->Tp * W), d->vp = rnd((int64_t)c->P * c->Tp * W);
    d->k = rnd(N * c->Tc * W), d->v = rnd(N * c->Tc * W);
    d->kc = malloc(sizeof(float) * (size_t)(N * T * W)), d->vc = malloc(sizeof(float) * (size_t)(N * T * W));
    for (int64_t b = 0; b < N; b++) {
        d->of[b] = c->prompt_of ? (int32_t)((b * 5 + 3) % c->P) : (int32_t)(b / c->G);
        int64_t pr = d->of[b];
        memcpy(d->kc + b * T * W, d->kp + pr * c->Tp * W, sizeof(float) * (size_t)(c->Tp * W));
        memcpy(d->vc + b * T * W, d->vp + pr * c->Tp * W, sizeof(float) * (size_t)(c->Tp * W));
        memcpy(d->kc + (b * T + c->Tp) * W, d->k + b * c->Tc * W, sizeof(float) * (size_t)(c->Tc * W));
        memcpy(d->vc + (b * T + c->Tp) * W, d->v + b * c->Tc * W, sizeof(float) * (size_t)(c->Tc * W));
        d->pos[b] = c->pos + (c->rows_pos ? (int32_t)(b % 3) : 0);
        int32_t s = (int32_t)(pr % (c->Tp > 2 ? 3 : 1)); /* a group's start: 0 .. 2 */
        d->start[b] = c->pad == 2 ? (int32_t)((b + pr) % (c->Tp > 3 ? 4 : 1)) : s;
    }
}

static void free_data(sh_data *d) { free(d->q), free(d->kp), free(d->vp), free(d->k), free(d->v), free(d->kc), free(d->vc); }

static double max_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        m = e > m || isnan(e) ? (isnan(e) ? INFINITY : e) : m;
    }
    return m;
}

static void check_case(sh_case c) {
    sh_nodes o;
    if (!build(&c, &o)) {
        dfg_program_free(o.p);
        return;
    }
    sh_data d;
    fill(&c, &d);
    int64_t ny = N_of(&c) * c.Tq * c.H * c.D;
    float *ys = malloc(sizeof(float) * (size_t)ny), *yc = malloc(sizeof(float) * (size_t)ny);
    void *ins[8] = {d.q, d.kp, d.vp, d.k, d.v, d.pos}, *inc[5] = {d.q, d.kc, d.vc, d.pos, c.pad ? d.start : NULL};
    int n_in = 6;
    if (c.pad) ins[n_in++] = d.start;
    if (c.prompt_of) ins[n_in++] = d.of;
    char label[160], err[512] = "";
    snprintf(label, sizeof(label), "P%d G%d Tp%d Tc%d Tq%d pos%d%s H%d Hkv%d D%d%s%s", c.P, c.G, c.Tp, c.Tc, c.Tq, c.pos,
             c.rows_pos ? " (a row)" : "", c.H, c.Hkv, c.D, c.pad == 1 ? " padded" : c.pad == 2 ? " padded per row" : "",
             c.prompt_of ? " prompt_of" : "");
    double worst = 0.0;
    for (int threads = 1; threads <= 2; threads++)
        for (int inv = 0; inv < 2; inv++) {
            dfg_status a = run(o.shared, ins, ys, threads, inv, err, sizeof(err));
            CHECK(a == DFG_OK, "%s: the shared kernel failed: %s", label, err);
            dfg_status b = run(o.copied, inc, yc, threads, inv, err, sizeof(err));
            CHECK(b == DFG_OK, "%s: attention_cached failed: %s", label, err);
            if (a || b) continue;
            if (inv) {
                CHECK(!memcmp(ys, yc, sizeof(float) * (size_t)ny), "%s, batch-invariant, %d threads: not bit for bit "
                      "attention_cached's (worst %.3g)", label, threads, max_diff(ys, yc, ny));
            } else {
                double e = max_diff(ys, yc, ny);
                worst = e > worst ? e : worst;
                CHECK(e <= 1e-6, "%s, %d threads: %.3g from attention_cached on the copied cache", label, threads, e);
            }
        }
    printf("%s: attention_cached's within %.2g, bit for bit batch-invariant\n", label, worst);
    free(ys), free(yc), free_data(&d);
    dfg_program_free(o.p);
}

/* A row's column past the caches, a start outside the row, a prompt that is not one: each fails
 * the step naming it. */
static void check_errors(void) {
    sh_case c = {.P = 2, .G = 3, .Tp = 5, .Tc = 4, .Tq = 1, .H = 2, .Hkv = 2, .D = 4, .pos = 5, .rows_pos = true,
                 .pad = 1, .prompt_of = true};
    sh_nodes o;
    if (!build(&c, &o)) {
        dfg_program_free(o.p);
        return;
    }
    sh_data d;
    fill(&c, &d);
    float *y = malloc(dfg_tensor_bytes(o.shared->out[0]));
    void *in[8] = {d.q, d.kp, d.vp, d.k, d.v, d.pos, d.start, d.of};
    char err[512] = "";
    d.pos[4] = c.Tp + c.Tc;
    CHECK(run(o.shared, in, y, 1, false, err, sizeof(err)) == DFG_ERR_RANGE && strstr(err, "row 4"),
          "a column past the caches: %s", err);
    d.pos[4] = c.pos, d.start[2] = -1;
    CHECK(run(o.shared, in, y, 1, false, err, sizeof(err)) == DFG_ERR_RANGE && strstr(err, "start[2]"),
          "a negative start: %s", err);
    d.start[2] = 0, d.of[5] = c.P;
    CHECK(run(o.shared, in, y, 1, false, err, sizeof(err)) == DFG_ERR_RANGE && strstr(err, "prompt_of[5]"),
          "a prompt that is not one: %s", err);
    printf("errors: a column past the caches, a negative start, prompt_of outside the prompts each fail the step\n");
    free(y), free_data(&d);
    dfg_program_free(o.p);
}

/* The shape rule: rows that do not split into the prompts' groups, parts of other widths. */
static void check_shapes(void) {
    dfg_program *p = dfg_program_new("shapes");
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_tensor *q = dfg_input(g, "q", DFG_F32, DFG_SHAPE(5, 1, 8));
    dfg_tensor *kp = dfg_input(g, "kp", DFG_F32, DFG_SHAPE(2, 4, 8)), *k = dfg_input(g, "k", DFG_F32, DFG_SHAPE(5, 3, 8));
    dfg_attention_shared_cached(g, q, kp, kp, k, k, dfg_input(g, "pos", DFG_I32, DFG_SCALAR), NULL, NULL, 2);
    CHECK(dfg_graph_status(g) == DFG_ERR_SHAPE && strstr(dfg_graph_error(g), "do not split into groups"),
          "5 rows, 2 prompts: %s", dfg_graph_error(g));
    dfg_program_free(p);
    printf("shapes: rows that do not split into the prompts' groups are refused\n");
}

int main(void) {
    dfg_test_init("test_attention_shared");
    check_case((sh_case){.P = 2, .G = 4, .Tp = 7, .Tc = 5, .Tq = 1, .H = 2, .Hkv = 2, .D = 8, .pos = 7});
    check_case((sh_case){.P = 3, .G = 2, .Tp = 9, .Tc = 6, .Tq = 1, .H = 4, .Hkv = 2, .D = 5, .pos = 11, .rows_pos = true});
    check_case((sh_case){.P = 2, .G = 3, .Tp = 6, .Tc = 4, .Tq = 1, .H = 3, .Hkv = 1, .D = 6, .pos = 6, .pad = 1});
    check_case((sh_case){.P = 2, .G = 3, .Tp = 8, .Tc = 5, .Tq = 1, .H = 2, .Hkv = 2, .D = 4, .pos = 9, .rows_pos = true,
                         .pad = 2});
    check_case((sh_case){.P = 2, .G = 2, .Tp = 6, .Tc = 6, .Tq = 4, .H = 2, .Hkv = 2, .D = 8, .pos = 3, .pad = 1});
    check_case((sh_case){.P = 3, .G = 2, .Tp = 7, .Tc = 5, .Tq = 1, .H = 2, .Hkv = 1, .D = 8, .pos = 8, .rows_pos = true,
                         .pad = 1, .prompt_of = true});
    check_case((sh_case){.P = 1, .G = 8, .Tp = 47, .Tc = 17, .Tq = 1, .H = 4, .Hkv = 4, .D = 16, .pos = 60, .pad = 1});
    check_errors();
    check_shapes();
    return dfg_test_finish();
}
