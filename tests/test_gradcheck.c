/* test_gradcheck.c - a finite-difference check of the gradient rule of every differentiable op.
 *
 * Each case builds one op on PARAM inputs with fresh random values and shapes, reduces its
 * output to loss = sum(out * w) with a random CONST w, and asks dfg_backward for d loss / d x.
 * The numeric gradient perturbs one input element at a time by +-h, reruns the step and takes
 * the central difference of sum(out * w), summed on the host in double: the loss seen by the
 * finite difference then carries only the rounding of the op's own fp32 outputs, not that of
 * an fp32 reduction over them.
 *
 * The cases form tables: a builder callback plus input specs whose dims name per-case random
 * dimension variables. Every case runs GC_DRAWS times with fresh shapes, attributes and values
 * and prints one line (its worst run). Inputs stay clear of the points where an op is not
 * smooth (clamp bounds, min/max ties, log/sqrt/div near 0, near-constant layernorm rows),
 * since a central difference across a kink measures nothing.
 *
 * The cases are checked against the op table (ops/ops.def), not a hand list: every op whose
 * gradient rule a case exercised (in the compiled program, so the fused ops the fuse pass makes
 * count, with their rebuilt backward) is recorded, and every DIFF op of the table must be among
 * them -- a new differentiable op without a case fails this test, naming the op.
 *
 * Last, dfg_backward_accumulate is checked: accumulating over repeat = 3 runs of a stage gives
 * exactly 3x the gradient of one run.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dfg.h"
#include "graph/ir.h"
#include "ops/op.h"
#include "runtime/dfg_runtime.h"
#include "testutil.h"

/* [op] a case differentiated through this op's gradient rule (a forward node of the compiled
 * program, with a gradient flowing) */
static bool gc_covered[DFG_OP_COUNT];

/* ---------------------------------------------------------------- the harness */
enum { GC_MAX_IN = 4, GC_NV = 6 };
#define GC_MAX_NUMEL 150 /* per input: keeps 2 runs per element cheap */
#define GC_H 1e-2        /* finite-difference step; inputs are O(1) */
#define GC_TOL_NORM 1e-2 /* ||analytic - numeric|| / ||numeric|| */
#define GC_TOL_ELEM 3e-2 /* |analytic - numeric| <= GC_TOL_ELEM * max|numeric| + GC_TOL_ABS */
#define GC_TOL_ABS 1e-3

/* A negative dim in a spec names a dimension variable drawn afresh for every run of the case. */
#define DA (-1)
#define DB (-2)
#define DC (-3)
#define DD (-4)
#define DE (-5)
#define DF (-6)

typedef enum {
    G_NORMAL,    /* N(0, 1) */
    G_POS,       /* U[0.5, 2): log, sqrt */
    G_DENOM,     /* +-U[0.5, 2): divisors kept away from 0 */
    G_GRID,      /* 0.1 k + U(-0.01, 0.01): with G_GRID_HALF, min/max operands are never within */
    G_GRID_HALF, /* 0.1 k + 0.05 + U(-0.01, 0.01)   0.03 of each other, so +-h never crosses a tie */
    G_KINK,      /* N(0, 1) at least 0.05 from c->fa[0] and c->fa[1] (clamp bounds) */
    G_BIT,       /* 0 or 1: a float mask */
    G_SPREAD,    /* N(0, 1) rows (along the last dim) with std >= 0.5: layernorm's gradient and its
                    curvature grow as 1/std and 1/std^3, so a near-constant row (likely among
                    many rows of 3) puts x +- h out of reach of a central difference */
    G_COND,      /* a CONST condition of dtype .dt: 0 or nonzero */
    G_IDX,       /* a CONST i32 index in [0, .bound) */
} gc_gen;

typedef struct {
    dfg_shape shape;
    gc_gen gen;
    dfg_dtype dt;  /* G_COND only */
    int64_t bound; /* G_IDX: exclusive upper bound, a dim or a dimension variable */
} gc_in;

/* A brace-initialised shape, so that the case tables can be static. */
#define GC_NARG(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SH(...) {.rank = GC_NARG(__VA_ARGS__), .d = {__VA_ARGS__}}
#define IN(gen, ...) {SH(__VA_ARGS__), gen, DFG_F32, 0}
#define IN0(gen) {{.rank = 0}, gen, DFG_F32, 0}
#define COND(dt, ...) {SH(__VA_ARGS__), G_COND, dt, 0}
#define IDX(bound, ...) {SH(__VA_ARGS__), G_IDX, DFG_I32, bound}

typedef struct gc gc;
typedef struct {
    const char *name;
    dfg_tensor *(*build)(gc *c, dfg_tensor *const *x);
    int n_in;
    gc_in in[GC_MAX_IN];
    int lo, hi;       /* range of the dimension variables (0, 0: 2..5) */
    int iarg[4];      /* builder arguments fixed by the case (trans flags, heads, ...) */
    void (*setup)(gc *c); /* optional: random attributes, shapes the variables cannot express */
    dfg_tensor *(*bin)(dfg_graph *, dfg_tensor *, dfg_tensor *);
    dfg_tensor *(*un)(dfg_graph *, dfg_tensor *);
} gc_case;

struct gc {
    const gc_case *k;
    dfg_graph *g;
    int64_t dim[GC_NV];
    dfg_shape shape[GC_MAX_IN];
    int64_t bound[GC_MAX_IN];
    float fa[2];  /* random float attributes chosen by setup */
    int ia[4];    /* random int attributes chosen by setup */
    char note[96]; /* the random attributes, printed with the case */
};

static int64_t gc_resolve(const gc *c, int64_t d) { return d < 0 ? c->dim[-d - 1] : d; }

static bool gc_is_param(gc_gen gen) { return gen != G_COND && gen != G_IDX; }

/* Draws dimension variables (and whatever setup draws) until every input fits GC_MAX_NUMEL. */
static void gc_draw_shapes(gc *c) {
    const gc_case *k = c->k;
    int lo = k->lo || k->hi ? k->lo : 2, hi = k->lo || k->hi ? k->hi : 5;
    for (int tries = 0;; tries++) {
        for (int v = 0; v < GC_NV; v++) c->dim[v] = dfg_test_int(lo, hi);
        for (int i = 0; i < k->n_in; i++) {
            c->shape[i] = k->in[i].shape;
            for (int d = 0; d < c->shape[i].rank; d++) c->shape[i].d[d] = gc_resolve(c, c->shape[i].d[d]);
            c->bound[i] = gc_resolve(c, k->in[i].bound);
        }
        c->note[0] = '\0';
        if (k->setup) k->setup(c);
        bool fits = true;
        for (int i = 0; i < k->n_in; i++) fits &= dfg_shape_numel(c->shape[i]) <= GC_MAX_NUMEL;
        if (fits || tries > 1000) return;
    }
}

static float gc_value(const gc *c, gc_gen gen) {
    switch (gen) {
    case G_POS: return dfg_test_uniform(0.5f, 2.0f);
    case G_DENOM: return (dfg_test_int(0, 1) ? 1.0f : -1.0f) * dfg_test_uniform(0.5f, 2.0f);
    case G_GRID: return 0.1f * (float)dfg_test_int(-15, 15) + dfg_test_uniform(-0.01f, 0.01f);
    case G_GRID_HALF: return 0.1f * (float)dfg_test_int(-15, 15) + 0.05f + dfg_test_uniform(-0.01f, 0.01f);
    case G_BIT: return (float)dfg_test_int(0, 1);
    case G_KINK:
        for (;;) {
            float v = dfg_test_normal();
            if (fabsf(v - c->fa[0]) >= 0.05f && fabsf(v - c->fa[1]) >= 0.05f) return v;
        }
    default: return dfg_test_normal();
    }
}

/* Redraws every row whose standard deviation is below 0.5 (G_SPREAD). */
static void gc_spread_rows(float *v, int64_t n, dfg_shape s) {
    int64_t c = s.rank ? s.d[s.rank - 1] : 1;
    for (int64_t r = 0; r < n / c && c > 1; r++)
        for (;;) {
            double m = 0.0, var = 0.0;
            for (int64_t i = 0; i < c; i++) m += v[r * c + i] / (double)c;
            for (int64_t i = 0; i < c; i++) var += (v[r * c + i] - m) * (v[r * c + i] - m) / (double)c;
            if (var >= 0.25) break;
            dfg_test_fill_normal(v + r * c, c, 1.0f);
        }
}

/* The CONST for a G_COND or G_IDX input. */
static dfg_tensor *gc_const_input(gc *c, dfg_program *p, int i) {
    const gc_in *s = &c->k->in[i];
    int64_t n = dfg_shape_numel(c->shape[i]);
    char name[16];
    snprintf(name, sizeof(name), "c%d", i);
    int32_t *iv = calloc((size_t)n, sizeof(int32_t));
    float *fv = calloc((size_t)n, sizeof(float));
    uint8_t *bv = calloc((size_t)n, 1);
    for (int64_t e = 0; e < n; e++) {
        /* a condition is "nonzero", not "1": 2 and 1.0 must both select the first value */
        iv[e] = s->gen == G_IDX ? dfg_test_int(0, (int)c->bound[i] - 1) : dfg_test_int(0, 1) * dfg_test_int(1, 2);
        fv[e] = (float)iv[e], bv[e] = (uint8_t)iv[e];
    }
    /* a repeated index, so that scatter-add backward has rows to sum */
    if (s->gen == G_IDX && n >= 2) iv[1] = iv[0];
    const void *data = s->dt == DFG_F32 ? (const void *)fv : s->dt == DFG_U8 ? (const void *)bv : (const void *)iv;
    dfg_tensor *t = dfg_const(p, name, s->dt, c->shape[i], data);
    free(iv), free(fv), free(bv);
    return t;
}

static double gc_dot(const float *out, const float *w, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)out[i] * (double)w[i];
    return s;
}

/* Compares one input's analytic gradient with the numeric one; returns the max error relative
 * to max|numeric| (NaN when anything is not finite) and sets *ok. */
static double gc_compare(const float *an, const double *nu, int64_t n, bool *ok) {
    double maxn = 0.0, nn = 0.0, nd = 0.0, maxd = 0.0;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)an[i] - nu[i]);
        finite &= isfinite(an[i]) && isfinite(nu[i]);
        maxn = fmax(maxn, fabs(nu[i]));
        maxd = fmax(maxd, d);
        nn += nu[i] * nu[i];
        nd += d * d;
    }
    *ok = finite && sqrt(nd) <= GC_TOL_NORM * fmax(sqrt(nn), GC_TOL_ABS);
    for (int64_t i = 0; i < n && *ok; i++) *ok = fabs((double)an[i] - nu[i]) <= GC_TOL_ELEM * maxn + GC_TOL_ABS;
    return finite ? maxd / fmax(maxn, GC_TOL_ABS) : NAN;
}

/* One run of one case. */
typedef struct {
    gc c;
    dfg_program *p;
    dfg_runtime *rt;
    int n_wrt, wrt_in[GC_MAX_IN]; /* the PARAM inputs, and their positions among the inputs */
    dfg_tensor *wrt[GC_MAX_IN];
    float *val[GC_MAX_IN]; /* host values of the inputs (PARAM inputs only) */
    float *an[GC_MAX_IN];  /* analytic gradients, per PARAM input */
    float *w, *y;          /* loss weights and the op's output, n_out each */
    int64_t n_out;
    char desc[200];         /* name, input shapes, random attributes */
} gc_run_state;

static void gc_name(char *buf, size_t len, const char *prefix, int i) { snprintf(buf, len, "%s%d", prefix, i); }

/* snprintf at buf + *len that never runs past cap (a long description is cut, not overrun) */
static void gc_append(char *buf, size_t cap, int *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void gc_append(char *buf, size_t cap, int *len, const char *fmt, ...) {
    if (*len < 0 || (size_t)*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    *len += vsnprintf(buf + *len, cap - (size_t)*len, fmt, ap);
    va_end(ap);
}

/* Creates the inputs, builds the op, loss = sum(out * w) and its backward. */
static dfg_status gc_build(gc_run_state *r) {
    const gc_case *k = r->c.k;
    dfg_program *p = r->p = dfg_program_new(k->name);
    dfg_graph *g = r->c.g = dfg_graph_new(p, "gradcheck");
    dfg_tensor *x[GC_MAX_IN] = {0}, *grads[GC_MAX_IN] = {0};
    char name[16], sb[64];
    int len = 0;
    gc_append(r->desc, sizeof(r->desc), &len, "%-24s", k->name);
    for (int i = 0; i < k->n_in; i++) {
        gc_append(r->desc, sizeof(r->desc), &len, " %s", dfg_shape_str(r->c.shape[i], sb, sizeof(sb)));
        if (!gc_is_param(k->in[i].gen)) {
            x[i] = gc_const_input(&r->c, p, i);
            continue;
        }
        gc_name(name, sizeof(name), "x", i);
        x[i] = dfg_param(p, name, DFG_F32, r->c.shape[i], dfg_init_zeros());
        int64_t n = dfg_shape_numel(r->c.shape[i]);
        r->val[i] = malloc(sizeof(float) * (size_t)n);
        for (int64_t e = 0; e < n; e++) r->val[i][e] = gc_value(&r->c, k->in[i].gen);
        if (k->in[i].gen == G_SPREAD) gc_spread_rows(r->val[i], n, r->c.shape[i]);
        r->wrt_in[r->n_wrt] = i;
        r->wrt[r->n_wrt++] = x[i];
    }
    dfg_tensor *out = k->build(&r->c, x);
    if (r->c.note[0]) gc_append(r->desc, sizeof(r->desc), &len, " [%s]", r->c.note);
    if (dfg_graph_status(g)) return dfg_graph_status(g);
    r->n_out = dfg_tensor_numel(out);
    r->w = malloc(sizeof(float) * (size_t)r->n_out);
    r->y = malloc(sizeof(float) * (size_t)r->n_out);
    dfg_test_fill_normal(r->w, r->n_out, 1.0f);
    dfg_tensor *wt = dfg_const(p, "w", DFG_F32, dfg_tensor_shape(out), r->w);
    dfg_tensor *loss = dfg_sum(g, dfg_reshape(g, dfg_mul(g, out, wt), (dfg_shape){.rank = 1, .d = {-1}}), 0);
    dfg_output(g, out, "out");
    dfg_output(g, loss, "loss");
    dfg_backward(g, loss, r->wrt, r->n_wrt, grads);
    for (int j = 0; j < r->n_wrt && !dfg_graph_status(g); j++) {
        /* a reshape view, because two inputs may share one gradient tensor (add of equal shapes) */
        gc_name(name, sizeof(name), "grad.x", r->wrt_in[j]);
        dfg_output(g, dfg_reshape(g, grads[j], dfg_tensor_shape(r->wrt[j])), name);
    }
    dfg_stage_graph(p, g, 1);
    return dfg_program_status(p);
}

/* Writes the inputs, runs one step, checks the forward loss and reads the analytic gradients. */
static dfg_status gc_forward(gc_run_state *r) {
    dfg_status st = dfg_runtime_create(r->p, NULL, &r->rt);
    char name[16];
    for (int j = 0; j < r->n_wrt && !st; j++) {
        gc_name(name, sizeof(name), "x", r->wrt_in[j]);
        st = dfg_runtime_write(r->rt, name, r->val[r->wrt_in[j]], dfg_tensor_bytes(r->wrt[j]));
    }
    float loss = NAN;
    if (!st) st = dfg_runtime_step(r->rt);
    /* the compiled graph's forward nodes that the backward differentiates (fused ones included) */
    for (int i = 0; !st && i < r->c.g->n_nodes; i++) {
        const dfg_node *n = r->c.g->nodes[i];
        if (!(n->flags & DFG_NF_BACKWARD) && dfg_ops[n->op].grad_kind == DFG_GRAD_DIFF) gc_covered[n->op] = true;
    }
    if (!st) st = dfg_runtime_read(r->rt, "out", r->y, sizeof(float) * (size_t)r->n_out);
    if (!st) st = dfg_runtime_read(r->rt, "loss", &loss, sizeof(float));
    /* all analytic gradients are read now: the finite-difference runs overwrite them */
    for (int j = 0; j < r->n_wrt && !st; j++) {
        gc_name(name, sizeof(name), "grad.x", r->wrt_in[j]);
        r->an[j] = malloc(dfg_tensor_bytes(r->wrt[j]));
        st = dfg_runtime_read(r->rt, name, r->an[j], dfg_tensor_bytes(r->wrt[j]));
    }
    if (st) return st;
    double l0 = gc_dot(r->y, r->w, r->n_out), mag = 0.0;
    for (int64_t e = 0; e < r->n_out; e++) {
        mag += fabs((double)r->y[e] * r->w[e]);
        CHECK(isfinite(r->y[e]), "%s: out[%lld] = %g", r->desc, (long long)e, r->y[e]);
    }
    /* the forward value must be right too, else the gradient of the wrong function is checked */
    CHECK(fabs(loss - l0) <= 1e-5 * mag + 1e-6, "%s: graph loss %.9g, host loss %.9g", r->desc, loss, l0);
    return DFG_OK;
}

/* sum(out * w) with element e of input i set to v (left there: the caller restores it). */
static dfg_status gc_loss_at(gc_run_state *r, int i, int64_t e, float v, double *l) {
    char name[16];
    gc_name(name, sizeof(name), "x", i);
    r->val[i][e] = v;
    dfg_status st = dfg_runtime_write(r->rt, name, r->val[i], sizeof(float) * (size_t)dfg_shape_numel(r->c.shape[i]));
    if (!st) st = dfg_runtime_step(r->rt);
    /* the compiled graph's forward nodes that the backward differentiates (fused ones included) */
    for (int i = 0; !st && i < r->c.g->n_nodes; i++) {
        const dfg_node *n = r->c.g->nodes[i];
        if (!(n->flags & DFG_NF_BACKWARD) && dfg_ops[n->op].grad_kind == DFG_GRAD_DIFF) gc_covered[n->op] = true;
    }
    if (!st) st = dfg_runtime_read(r->rt, "out", r->y, sizeof(float) * (size_t)r->n_out);
    *l = gc_dot(r->y, r->w, r->n_out);
    return st;
}

/* Prints the elements of input j where the two gradients differ most, largest first. */
static void gc_print_worst(const gc_run_state *r, int j, const double *nu, double err) {
    int i = r->wrt_in[j];
    int64_t n = dfg_shape_numel(r->c.shape[i]);
    bool *shown = calloc((size_t)n, sizeof(bool));
    fprintf(stderr, "%s: gradient of x%d is wrong (max err %.3g); worst elements:\n", r->desc, i, err);
    for (int k = 0; k < 8 && k < n; k++) {
        int64_t worst = -1;
        for (int64_t e = 0; e < n; e++)
            if (!shown[e] && (worst < 0 || !(fabs(r->an[j][e] - nu[e]) <= fabs(r->an[j][worst] - nu[worst]))))
                worst = e;
        shown[worst] = true;
        fprintf(stderr, "  [%lld] x %+.6f analytic %+.6f numeric %+.6f\n", (long long)worst, r->val[i][worst],
                r->an[j][worst], nu[worst]);
    }
    free(shown);
}

/* The central-difference gradient of PARAM input j, compared with the analytic one. */
static dfg_status gc_check_input(gc_run_state *r, int j, double *err) {
    int i = r->wrt_in[j];
    int64_t n = dfg_shape_numel(r->c.shape[i]);
    double *nu = malloc(sizeof(double) * (size_t)n);
    dfg_status st = DFG_OK;
    for (int64_t e = 0; e < n && !st; e++) {
        float x0 = r->val[i][e], xp = (float)(x0 + GC_H), xm = (float)(x0 - GC_H);
        double lp = 0.0, lm = 0.0;
        st = gc_loss_at(r, i, e, xp, &lp);
        if (!st) st = gc_loss_at(r, i, e, xm, &lm);
        r->val[i][e] = x0; /* the next write carries it back */
        /* divide by the step actually taken, which fp32 rounding makes differ from 2h */
        nu[e] = (lp - lm) / ((double)xp - (double)xm);
    }
    char name[16];
    gc_name(name, sizeof(name), "x", i);
    if (!st) st = dfg_runtime_write(r->rt, name, r->val[i], sizeof(float) * (size_t)n);
    if (!st) {
        bool ok;
        *err = gc_compare(r->an[j], nu, n, &ok);
        if (!ok) gc_print_worst(r, j, nu, *err);
        CHECK(ok, "%s: d loss / d x%d (max err %.3g)", r->desc, i, *err);
    }
    free(nu);
    return st;
}

static void gc_free(gc_run_state *r) {
    dfg_runtime_free(r->rt);
    dfg_program_free(r->p);
    for (int i = 0; i < GC_MAX_IN; i++) free(r->val[i]), free(r->an[i]);
    free(r->w), free(r->y);
}

/* One run of case k on fresh shapes and values: returns the max error over its inputs (NaN
 * when it could not run) and describes the run in line. */
static double gc_run(const gc_case *k, char *line, size_t cap) {
    gc_run_state r = {.c = {.k = k}};
    gc_draw_shapes(&r.c);
    dfg_status st = gc_build(&r);
    CHECK(st == DFG_OK, "%s: building failed: %s", r.desc, dfg_program_error(r.p));
    if (!st) {
        st = gc_forward(&r);
        CHECK(st == DFG_OK, "%s: run: %s", r.desc, dfg_runtime_error(r.rt));
    }
    double err_max = 0.0;
    char errs[96] = "";
    int elen = 0;
    for (int j = 0; j < r.n_wrt && !st; j++) {
        double err = NAN;
        st = gc_check_input(&r, j, &err);
        CHECK(st == DFG_OK, "%s: finite differences: %s", r.desc, dfg_runtime_error(r.rt));
        err_max = isnan(err) || isnan(err_max) ? NAN : fmax(err_max, err);
        gc_append(errs, sizeof(errs), &elen, " x%d %.1e", r.wrt_in[j], err);
    }
    if (st) err_max = NAN;
    snprintf(line, cap, "%-64s max err %.2e (%s)", r.desc, err_max, errs + (elen > 0));
    gc_free(&r);
    return err_max;
}

#define GC_DRAWS 3 /* runs per case, each with fresh shapes, attributes and values */
static int gc_n_runs = 0;

/* Runs every case GC_DRAWS times and prints one line per case: its worst run. */
static void gc_run_table(const char *title, const gc_case *cases, int n) {
    printf("%s\n", title);
    for (int i = 0; i < n; i++) {
        char line[256], worst[256] = "";
        double worst_err = -1.0;
        int failures = dfg_test_failures;
        for (int d = 0; d < GC_DRAWS; d++, gc_n_runs++) {
            double err = gc_run(&cases[i], line, sizeof(line));
            if (isnan(err) || err > worst_err) worst_err = err, memcpy(worst, line, sizeof(line));
            if (isnan(err)) break;
        }
        printf("  %s%s\n", worst, dfg_test_failures > failures ? "  FAILED" : "");
    }
}

static double gc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- elementwise */
static dfg_tensor *b_bin(gc *c, dfg_tensor *const *x) { return c->k->bin(c->g, x[0], x[1]); }
static dfg_tensor *b_un(gc *c, dfg_tensor *const *x) { return c->k->un(c->g, x[0]); }
/* the same tensor on both sides: autodiff must sum the two contributions */
static dfg_tensor *b_square(gc *c, dfg_tensor *const *x) { return dfg_mul(c->g, x[0], x[0]); }
static dfg_tensor *b_chain(gc *c, dfg_tensor *const *x) {
    return dfg_sub(c->g, dfg_exp(c->g, dfg_neg(c->g, x[0])), dfg_mul(c->g, x[0], dfg_sqrt(c->g, x[1])));
}

/* silu over +-12 (x scaled by 4): its tails, where s or 1 - s is small */
static dfg_tensor *b_silu_wide(gc *c, dfg_tensor *const *x) { return dfg_silu(c->g, dfg_scale(c->g, x[0], 4.0f)); }

static void s_affine(gc *c) {
    c->fa[0] = (dfg_test_int(0, 1) ? 1.0f : -1.0f) * dfg_test_uniform(0.5f, 2.0f);
    c->fa[1] = dfg_test_uniform(-1.0f, 1.0f);
    snprintf(c->note, sizeof(c->note), "alpha %.3f beta %.3f", c->fa[0], c->fa[1]);
}
static dfg_tensor *b_affine(gc *c, dfg_tensor *const *x) { return dfg_affine(c->g, x[0], c->fa[0], c->fa[1]); }

static void s_clamp(gc *c) {
    c->fa[0] = dfg_test_uniform(-1.0f, -0.2f);
    c->fa[1] = dfg_test_uniform(0.2f, 1.0f);
    snprintf(c->note, sizeof(c->note), "lo %.3f hi %.3f", c->fa[0], c->fa[1]);
}
static dfg_tensor *b_clamp(gc *c, dfg_tensor *const *x) { return dfg_clamp(c->g, x[0], c->fa[0], c->fa[1]); }
static dfg_tensor *b_cast(gc *c, dfg_tensor *const *x) { return dfg_cast(c->g, x[0], DFG_F32); }
static dfg_tensor *b_where(gc *c, dfg_tensor *const *x) { return dfg_where(c->g, x[0], x[1], x[2]); }

/* ---------------------------------------------------------------- layout */
static dfg_tensor *b_reshape(gc *c, dfg_tensor *const *x) {
    dfg_shape s = dfg_tensor_shape(x[0]);
    return dfg_reshape(c->g, x[0], (dfg_shape){.rank = 2, .d = {s.d[1], -1}});
}

static dfg_tensor *b_permute(gc *c, dfg_tensor *const *x) {
    int r = dfg_tensor_shape(x[0]).rank, perm[DFG_MAX_RANK];
    for (int i = 0; i < r; i++) perm[i] = i;
    for (int i = r - 1; i > 0; i--) { /* Fisher-Yates */
        int j = dfg_test_int(0, i), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int len = 0;
    gc_append(c->note, sizeof(c->note), &len, "perm");
    for (int i = 0; i < r; i++) gc_append(c->note, sizeof(c->note), &len, " %d", perm[i]);
    return dfg_permute(c->g, x[0], perm);
}

static dfg_tensor *b_transpose(gc *c, dfg_tensor *const *x) {
    int r = dfg_tensor_shape(x[0]).rank, a = dfg_test_int(0, r - 1), b = (a + dfg_test_int(1, r - 1)) % r;
    snprintf(c->note, sizeof(c->note), "axes %d %d", a, b - r); /* a negative axis as well */
    return dfg_transpose(c->g, x[0], a, b - r);
}

static dfg_tensor *b_slice(gc *c, dfg_tensor *const *x) {
    dfg_shape s = dfg_tensor_shape(x[0]);
    int ax = dfg_test_int(0, s.rank - 1);
    int64_t len = dfg_test_int(1, (int)s.d[ax]), start = dfg_test_int(0, (int)(s.d[ax] - len));
    snprintf(c->note, sizeof(c->note), "axis %d start %lld len %lld", ax, (long long)start, (long long)len);
    return dfg_slice(c->g, x[0], ax, start, len);
}

/* three inputs that differ only along a random axis */
static void s_concat(gc *c) {
    c->ia[0] = dfg_test_int(0, 2);
    for (int i = 0; i < 3; i++) {
        c->shape[i] = (dfg_shape){.rank = 3, .d = {c->dim[0], c->dim[1], c->dim[2]}};
        c->shape[i].d[c->ia[0]] = dfg_test_int(1, 4);
    }
    snprintf(c->note, sizeof(c->note), "axis %d", c->ia[0]);
}
static dfg_tensor *b_concat(gc *c, dfg_tensor *const *x) { return dfg_concat(c->g, x, 3, c->ia[0]); }

/* to (D, A, B, C) from any shape that broadcasts to (A, B, C) */
static dfg_tensor *b_expand(gc *c, dfg_tensor *const *x) {
    return dfg_expand(c->g, x[0], (dfg_shape){.rank = 4, .d = {c->dim[3], c->dim[0], c->dim[1], c->dim[2]}});
}

/* ---------------------------------------------------------------- reductions */
static int pick_axis(gc *c, dfg_tensor *x) {
    int r = dfg_tensor_shape(x).rank, ax = dfg_test_int(0, r - 1);
    bool neg = dfg_test_int(0, 1); /* negative axes count from the end */
    snprintf(c->note, sizeof(c->note), "axis %d", neg ? ax - r : ax);
    return neg ? ax - r : ax;
}
static dfg_tensor *b_sum(gc *c, dfg_tensor *const *x) { return dfg_sum(c->g, x[0], pick_axis(c, x[0])); }
static dfg_tensor *b_sum_keep(gc *c, dfg_tensor *const *x) { return dfg_sum_keepdim(c->g, x[0], pick_axis(c, x[0])); }
static dfg_tensor *b_mean(gc *c, dfg_tensor *const *x) { return dfg_mean(c->g, x[0], pick_axis(c, x[0])); }
static dfg_tensor *b_masked_sum(gc *c, dfg_tensor *const *x) {
    return dfg_masked_sum(c->g, x[0], x[1], pick_axis(c, x[0]));
}

/* designated initializers: a case names only the fields it sets */
#define CASE(nm, fn, n, ...) .name = nm, .build = fn, .n_in = n, .in = {__VA_ARGS__}
#define BIN(nm, fn, ga, gb) {CASE(nm, b_bin, 2, ga, gb), .bin = fn}
#define UN(nm, fn, gen) {CASE(nm, b_un, 1, IN(gen, DA, DB, DC)), .un = fn}
#define N3 IN(G_NORMAL, DA, DB, DC)

static const gc_case elementwise_cases[] = {
    BIN("add", dfg_add, N3, N3),
    BIN("add bcast (C)", dfg_add, N3, IN(G_NORMAL, DC)),
    BIN("add bcast (B,1)", dfg_add, N3, IN(G_NORMAL, DB, 1)),
    BIN("add bcast (1,C)", dfg_add, N3, IN(G_NORMAL, 1, DC)),
    BIN("add bcast scalar", dfg_add, N3, IN0(G_NORMAL)),
    BIN("add bcast both", dfg_add, IN(G_NORMAL, DA, 1, DC), IN(G_NORMAL, DB, 1)),
    BIN("sub", dfg_sub, N3, N3),
    BIN("sub bcast (C)", dfg_sub, N3, IN(G_NORMAL, DC)),
    BIN("sub bcast (B,1)", dfg_sub, N3, IN(G_NORMAL, DB, 1)),
    BIN("sub scalar - x", dfg_sub, IN0(G_NORMAL), N3),
    BIN("sub bcast both", dfg_sub, IN(G_NORMAL, DB, 1), IN(G_NORMAL, 1, DC)),
    BIN("mul", dfg_mul, N3, N3),
    BIN("mul bcast (C)", dfg_mul, N3, IN(G_NORMAL, DC)),
    BIN("mul bcast (B,1)", dfg_mul, N3, IN(G_NORMAL, DB, 1)),
    BIN("mul bcast (1,C)", dfg_mul, IN(G_NORMAL, 1, DC), N3),
    BIN("mul bcast scalar", dfg_mul, IN0(G_NORMAL), N3),
    BIN("mul bcast both", dfg_mul, IN(G_NORMAL, DA, 1, DC), IN(G_NORMAL, 1, DB, 1)),
    {CASE("mul x*x", b_square, 1, N3)},
    BIN("div", dfg_div, N3, IN(G_DENOM, DA, DB, DC)),
    BIN("div bcast (C)", dfg_div, N3, IN(G_DENOM, DC)),
    BIN("div bcast (B,1)", dfg_div, N3, IN(G_DENOM, DB, 1)),
    BIN("div bcast scalar", dfg_div, N3, IN0(G_DENOM)),
    BIN("div scalar / x", dfg_div, IN0(G_NORMAL), IN(G_DENOM, DA, DB, DC)),
    BIN("minimum", dfg_minimum, IN(G_GRID, DA, DB, DC), IN(G_GRID_HALF, DA, DB, DC)),
    BIN("minimum bcast (C)", dfg_minimum, IN(G_GRID_HALF, DA, DB, DC), IN(G_GRID, DC)),
    BIN("minimum bcast (B,1)", dfg_minimum, IN(G_GRID, DA, DB, DC), IN(G_GRID_HALF, DB, 1)),
    BIN("minimum bcast scalar", dfg_minimum, IN0(G_GRID_HALF), IN(G_GRID, DA, DB, DC)),
    BIN("maximum", dfg_maximum, IN(G_GRID, DA, DB, DC), IN(G_GRID_HALF, DA, DB, DC)),
    BIN("maximum bcast (C)", dfg_maximum, IN(G_GRID, DA, DB, DC), IN(G_GRID_HALF, DC)),
    BIN("maximum bcast (1,C)", dfg_maximum, IN(G_GRID_HALF, DA, DB, DC), IN(G_GRID, 1, DC)),
    BIN("maximum bcast scalar", dfg_maximum, IN(G_GRID, DA, DB, DC), IN0(G_GRID_HALF)),
    {CASE("affine", b_affine, 1, N3), .setup = s_affine},
    UN("exp", dfg_exp, G_NORMAL),
    UN("log", dfg_log, G_POS),
    UN("neg", dfg_neg, G_NORMAL),
    UN("sqrt", dfg_sqrt, G_POS),
    UN("gelu", dfg_gelu, G_NORMAL),
    UN("silu", dfg_silu, G_NORMAL),
    {CASE("silu(4 x)", b_silu_wide, 1, N3)},
    {CASE("clamp", b_clamp, 1, IN(G_KINK, DA, DB, DC)), .setup = s_clamp},
    {CASE("cast f32->f32", b_cast, 1, N3)},
    {CASE("where f32 cond", b_where, 3, COND(DFG_F32, DA, DB, DC), N3, N3)},
    {CASE("where i32 cond bcast", b_where, 3, COND(DFG_I32, DB, 1), N3, IN(G_NORMAL, DC))},
    {CASE("where u8 cond bcast", b_where, 3, COND(DFG_U8, DA, DB, DC), IN(G_NORMAL, 1, DC), IN0(G_NORMAL))},
    {CASE("exp(-x) - x*sqrt(y)", b_chain, 2, N3, IN(G_POS, DA, DB, DC))},
};

static const gc_case layout_cases[] = {
    {CASE("reshape", b_reshape, 1, N3)},
    {CASE("permute", b_permute, 1, IN(G_NORMAL, DA, DB, DC, DD)), .lo = 2, .hi = 3},
    {CASE("transpose", b_transpose, 1, N3)},
    {CASE("slice", b_slice, 1, N3)},
    {CASE("concat", b_concat, 3, N3, N3, N3), .setup = s_concat},
    {CASE("expand (A,1,C)", b_expand, 1, IN(G_NORMAL, DA, 1, DC)), .lo = 2, .hi = 4},
    {CASE("expand (C)", b_expand, 1, IN(G_NORMAL, DC)), .lo = 2, .hi = 4},
    {CASE("expand scalar", b_expand, 1, IN0(G_NORMAL)), .lo = 2, .hi = 4},
};

static const gc_case reduce_cases[] = {
    {CASE("sum", b_sum, 1, N3)},
    {CASE("sum rank 1", b_sum, 1, IN(G_NORMAL, DA))},
    {CASE("sum_keepdim", b_sum_keep, 1, N3)},
    {CASE("mean", b_mean, 1, N3)},
    {CASE("mean rank 2", b_mean, 1, IN(G_NORMAL, DA, DB))},
    {CASE("masked_sum", b_masked_sum, 2, N3, IN(G_BIT, DA, DB, DC))},
    {CASE("masked_sum bcast mask", b_masked_sum, 2, N3, IN(G_BIT, DB, DC))},
    {CASE("masked_sum mask (A,1,C)", b_masked_sum, 2, N3, IN(G_NORMAL, DA, 1, DC))},
};

/* ---------------------------------------------------------------- linear algebra and nn */
static dfg_tensor *b_matmul(gc *c, dfg_tensor *const *x) {
    return dfg_matmul(c->g, x[0], x[1], c->k->iarg[0], c->k->iarg[1]);
}
static dfg_tensor *b_bias_add(gc *c, dfg_tensor *const *x) { return dfg_bias_add(c->g, x[0], x[1]); }
static dfg_tensor *b_layernorm(gc *c, dfg_tensor *const *x) { return dfg_layernorm(c->g, x[0], x[1], x[2], 1e-5f); }
static dfg_tensor *b_rmsnorm(gc *c, dfg_tensor *const *x) { return dfg_rmsnorm(c->g, x[0], x[1], 1e-5f); }
/* GPT-2's per-token log-probability: log_softmax then take */
static dfg_tensor *b_logprob(gc *c, dfg_tensor *const *x) { return dfg_take(c->g, dfg_log_softmax(c->g, x[0]), x[1]); }
static dfg_tensor *b_attention(gc *c, dfg_tensor *const *x) { return dfg_attention(c->g, x[0], c->k->iarg[0]); }
static dfg_tensor *b_attention_prefix(gc *c, dfg_tensor *const *x) {
    return dfg_attention_prefix(c->g, x[0], x[1], c->k->iarg[0]);
}
/* left-padded rows: x[last] is the rows' start (a CONST drawn in [0, T) by s_*_padded) */
static dfg_tensor *b_attention_padded(gc *c, dfg_tensor *const *x) {
    return dfg_attention_padded(c->g, x[0], x[1], c->k->iarg[0]);
}
static dfg_tensor *b_attention_prefix_padded(gc *c, dfg_tensor *const *x) {
    return dfg_attention_prefix_padded(c->g, x[0], x[1], x[2], c->k->iarg[0]);
}
/* the fused ops: the fuse pass makes them from the unfused math, with the backward rebuilt from
 * their own gradient rules */
static dfg_tensor *b_bias_gelu(gc *c, dfg_tensor *const *x) { return dfg_gelu(c->g, dfg_bias_add(c->g, x[0], x[1])); }
/* the lm_head form: log_softmax(h @ W^T) gathered at the targets */
static dfg_tensor *b_linear_logprob(gc *c, dfg_tensor *const *x) {
    return dfg_take(c->g, dfg_log_softmax(c->g, dfg_matmul(c->g, x[0], x[1], false, true)), x[2]);
}
/* ... and the entropy of the same logits at temperature 0.7: one linear_logprob gives both, and
 * its backward takes both gradients */
static dfg_tensor *b_linear_logprob_entropy(gc *c, dfg_tensor *const *x) {
    dfg_tensor *z = dfg_scale(c->g, dfg_matmul(c->g, x[0], x[1], false, true), 1.0f / 0.7f);
    return dfg_add(c->g, dfg_take(c->g, dfg_log_softmax(c->g, z), x[2]), dfg_entropy(c->g, z));
}
static dfg_tensor *b_embed(gc *c, dfg_tensor *const *x) { return dfg_embed(c->g, x[0], x[1]); }
static dfg_tensor *b_take(gc *c, dfg_tensor *const *x) { return dfg_take(c->g, x[0], x[1]); }
/* rotary embeddings of x (..., H*D) at positions x[1]; head_dim and theta drawn by s_rope */
static dfg_tensor *b_rope(gc *c, dfg_tensor *const *x) { return dfg_rope(c->g, x[0], x[1], c->ia[0], c->fa[0]); }

/* qkv (B, T, 3 H Dh) for iarg[0] = H heads */
static void s_attention(gc *c) {
    int64_t B = dfg_test_int(1, 2), T = dfg_test_int(1, 5), Dh = dfg_test_int(1, 4);
    c->shape[0] = (dfg_shape){.rank = 3, .d = {B, T, 3 * c->k->iarg[0] * Dh}};
    snprintf(c->note, sizeof(c->note), "%d heads", c->k->iarg[0]);
}

/* qkv (P*G, Tc, 3 H Dh) after prefixes (P, Tp, 3 H Dh) for iarg[0] = H heads; G >= 2 so that a
 * prefix's gradient sums over rows */
static void s_attention_prefix(gc *c) {
    int64_t P = dfg_test_int(1, 2), G = dfg_test_int(2, 3), Tc = dfg_test_int(1, 3), Tp = dfg_test_int(1, 3);
    int64_t W = 3 * c->k->iarg[0] * dfg_test_int(1, 2);
    c->shape[0] = (dfg_shape){.rank = 3, .d = {P * G, Tc, W}};
    c->shape[1] = (dfg_shape){.rank = 3, .d = {P, Tp, W}};
    snprintf(c->note, sizeof(c->note), "%d heads, groups of %lld", c->k->iarg[0], (long long)G);
}

/* s_attention, with a start (B) in [0, T) for each row (T up to 6, so that every start is likely) */
static void s_attention_padded(gc *c) {
    int64_t B = dfg_test_int(1, 3), T = dfg_test_int(1, 6), Dh = dfg_test_int(1, 3);
    c->shape[0] = (dfg_shape){.rank = 3, .d = {B, T, 3 * c->k->iarg[0] * Dh}};
    c->shape[1] = (dfg_shape){.rank = 1, .d = {B}};
    c->bound[1] = T;
    snprintf(c->note, sizeof(c->note), "%d heads, left-padded", c->k->iarg[0]);
}

/* s_attention_prefix, with a start (P) in [0, Tp) for each prefix */
static void s_attention_prefix_padded(gc *c) {
    s_attention_prefix(c);
    int64_t P = c->shape[1].d[0], Tp = dfg_test_int(1, 4);
    c->shape[1].d[1] = Tp;
    c->shape[2] = (dfg_shape){.rank = 1, .d = {P}};
    c->bound[2] = Tp;
    snprintf(c->note, sizeof(c->note), "%d heads, groups of %lld, left-padded", c->k->iarg[0],
             (long long)(c->shape[0].d[0] / P));
}

/* x (T, H*D) or (B, T, H*D) and positions (T) or (B, T) in [0, 5000): D even, theta random */
static void s_rope(gc *c) {
    static const float thetas[] = {10000.0f, 1000000.0f, 100.0f};
    int64_t B = dfg_test_int(1, 2), T = dfg_test_int(1, 3), H = dfg_test_int(1, 3), D = 2 * dfg_test_int(1, 4);
    bool rank3 = dfg_test_int(0, 1);
    c->ia[0] = (int)D, c->fa[0] = thetas[dfg_test_int(0, 2)];
    c->shape[0] = rank3 ? (dfg_shape){.rank = 3, .d = {B, T, H * D}} : (dfg_shape){.rank = 2, .d = {T, H * D}};
    c->shape[1] = rank3 ? (dfg_shape){.rank = 2, .d = {B, T}} : (dfg_shape){.rank = 1, .d = {T}};
    c->bound[1] = 5000;
    snprintf(c->note, sizeof(c->note), "%lld heads of %lld, theta %g", (long long)H, (long long)D, (double)c->fa[0]);
}

/* M = A, K = B, N = C, batch dims D and E; dims from 1 so that vectors are covered too */
#define MM(nm, ta, tb, a, b) {CASE(nm, b_matmul, 2, a, b), .lo = 1, .hi = 4, .iarg = {ta, tb}}
#define NN(...) IN(G_NORMAL, __VA_ARGS__)

static const gc_case nn_cases[] = {
    MM("matmul nn", 0, 0, NN(DA, DB), NN(DB, DC)),
    MM("matmul nt", 0, 1, NN(DA, DB), NN(DC, DB)),
    MM("matmul tn", 1, 0, NN(DB, DA), NN(DB, DC)),
    MM("matmul tt", 1, 1, NN(DB, DA), NN(DC, DB)),
    MM("matmul batched nn", 0, 0, NN(DD, DA, DB), NN(DD, DB, DC)),
    MM("matmul batched nt", 0, 1, NN(DD, DA, DB), NN(DD, DC, DB)),
    MM("matmul batched tn", 1, 0, NN(DD, DB, DA), NN(DD, DB, DC)),
    MM("matmul batched tt", 1, 1, NN(DD, DB, DA), NN(DD, DC, DB)),
    MM("matmul batched 4-D", 0, 0, NN(DE, DD, DA, DB), NN(DE, DD, DB, DC)),
    MM("matmul shared B nn", 0, 0, NN(DD, DA, DB), NN(DB, DC)),
    MM("matmul shared B nt", 0, 1, NN(DD, DA, DB), NN(DC, DB)),
    MM("matmul shared B tn", 1, 0, NN(DD, DB, DA), NN(DB, DC)),
    MM("matmul shared B tt", 1, 1, NN(DD, DB, DA), NN(DC, DB)),
    MM("matmul shared B 4-D nt", 0, 1, NN(DE, DD, DA, DB), NN(DC, DB)),
    MM("matmul shared A nn", 0, 0, NN(DA, DB), NN(DD, DB, DC)),
    MM("matmul shared A nt", 0, 1, NN(DA, DB), NN(DD, DC, DB)),
    MM("matmul shared A tn", 1, 0, NN(DB, DA), NN(DD, DB, DC)),
    MM("matmul shared A tt", 1, 1, NN(DB, DA), NN(DD, DC, DB)),
    MM("matmul shared A 4-D tn", 1, 0, NN(DB, DA), NN(DE, DD, DB, DC)),
    {CASE("bias_add", b_bias_add, 2, N3, NN(DC))},
    {CASE("bias_add rank 1", b_bias_add, 2, NN(DC), NN(DC))},
    {CASE("layernorm", b_layernorm, 3, IN(G_SPREAD, DA, DB, DC), NN(DC), NN(DC)), .lo = 3, .hi = 6},
    {CASE("layernorm rank 2", b_layernorm, 3, IN(G_SPREAD, DA, DC), NN(DC), NN(DC)), .lo = 3, .hi = 8},
    {CASE("layernorm rank 1", b_layernorm, 3, IN(G_SPREAD, DC), NN(DC), NN(DC)), .lo = 3, .hi = 8},
    /* G_SPREAD rows: std >= 0.5 keeps the rms >= 0.5, clear of rmsnorm's 1/rms^3 curvature */
    {CASE("rmsnorm", b_rmsnorm, 2, IN(G_SPREAD, DA, DB, DC), NN(DC)), .lo = 3, .hi = 6},
    {CASE("rmsnorm rank 2", b_rmsnorm, 2, IN(G_SPREAD, DA, DC), NN(DC)), .lo = 3, .hi = 8},
    {CASE("rmsnorm rank 1", b_rmsnorm, 2, IN(G_SPREAD, DC), NN(DC)), .lo = 3, .hi = 8},
    {CASE("softmax", b_un, 1, N3), .un = dfg_softmax},
    {CASE("softmax rank 1", b_un, 1, NN(DC)), .un = dfg_softmax, .lo = 1, .hi = 8},
    {CASE("log_softmax", b_un, 1, N3), .un = dfg_log_softmax},
    {CASE("log_softmax rank 2", b_un, 1, NN(DA, DC)), .un = dfg_log_softmax, .lo = 1, .hi = 8},
    {CASE("entropy", b_un, 1, N3), .un = dfg_entropy},
    {CASE("entropy rank 1", b_un, 1, NN(DC)), .un = dfg_entropy, .lo = 1, .hi = 8},
    {CASE("attention", b_attention, 1, NN(1)), .iarg = {1}, .setup = s_attention},
    {CASE("attention", b_attention, 1, NN(1)), .iarg = {2}, .setup = s_attention},
    {CASE("attention", b_attention, 1, NN(1)), .iarg = {4}, .setup = s_attention},
    {CASE("attention_prefix", b_attention_prefix, 2, NN(1), NN(1)), .iarg = {1}, .setup = s_attention_prefix},
    {CASE("attention_prefix", b_attention_prefix, 2, NN(1), NN(1)), .iarg = {2}, .setup = s_attention_prefix},
    {CASE("attention padded", b_attention_padded, 2, NN(1), IDX(1, 1)), .iarg = {1}, .setup = s_attention_padded},
    {CASE("attention padded", b_attention_padded, 2, NN(1), IDX(1, 1)), .iarg = {2}, .setup = s_attention_padded},
    {CASE("attention_prefix padded", b_attention_prefix_padded, 3, NN(1), NN(1), IDX(1, 1)), .iarg = {1},
     .setup = s_attention_prefix_padded},
    {CASE("attention_prefix padded", b_attention_prefix_padded, 3, NN(1), NN(1), IDX(1, 1)), .iarg = {2},
     .setup = s_attention_prefix_padded},
    {CASE("embed", b_embed, 2, NN(DA, DB), IDX(DA, DC, DD))},
    {CASE("embed ids rank 1", b_embed, 2, NN(DA, DB), IDX(DA, DC)), .lo = 1, .hi = 6},
    {CASE("take", b_take, 2, NN(DA, DB, DC), IDX(DC, DA, DB))},
    {CASE("take rank 1", b_take, 2, NN(DC), IDX(DC)), .lo = 1, .hi = 6},
    {CASE("log_softmax + take", b_logprob, 2, NN(DA, DB, DC), IDX(DC, DA, DB))},
    {CASE("bias_add + gelu", b_bias_gelu, 2, N3, NN(DC))},
    {CASE("linear + log_softmax + take", b_linear_logprob, 3, NN(DA, DB), NN(DC, DB), IDX(DC, DA))},
    {CASE("linear + log_softmax + take + entropy", b_linear_logprob_entropy, 3, NN(DA, DB), NN(DC, DB), IDX(DC, DA))},
    {CASE("rope", b_rope, 2, NN(1), IDX(1, 1)), .setup = s_rope},
};

/* Every DIFF op of the table must have had a case. */
static void check_table_coverage(void) {
    int missing = 0;
    for (int op = 0; op < DFG_OP_COUNT; op++) {
        if (dfg_ops[op].grad_kind != DFG_GRAD_DIFF || gc_covered[op]) continue;
        CHECK(false, "op '%s' is differentiable (ops.def) but no gradcheck case exercised its gradient rule",
              dfg_ops[op].name);
        missing++;
    }
    int diff = 0;
    for (int op = 0; op < DFG_OP_COUNT; op++) diff += dfg_ops[op].grad_kind == DFG_GRAD_DIFF;
    printf("table coverage: %d of %d differentiable ops of ops.def checked\n", diff - missing, diff);
}

/* ---------------------------------------------------------------- dfg_backward_accumulate */
/* loss = sum(gelu(x @ W) * wl), with its gradient either accumulated into STATEs acc.x and
 * acc.W over `repeat` runs of the stage, or output once as grad.x and grad.W. */
static dfg_program *acc_program(bool accumulate, dfg_shape xs, dfg_shape ws, const float *wl) {
    dfg_program *p = dfg_program_new(accumulate ? "accumulate" : "once");
    dfg_tensor *wrt[2] = {dfg_param(p, "x", DFG_F32, xs, dfg_init_zeros()),
                          dfg_param(p, "W", DFG_F32, ws, dfg_init_zeros())};
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *h = dfg_gelu(g, dfg_matmul(g, wrt[0], wrt[1], false, false)); /* (M, N) */
    dfg_tensor *wt = dfg_const(p, "wl", DFG_F32, (dfg_shape){.rank = 2, .d = {xs.d[0], ws.d[1]}}, wl);
    dfg_tensor *loss = dfg_sum(g, dfg_reshape(g, dfg_mul(g, h, wt), (dfg_shape){.rank = 1, .d = {-1}}), 0);
    if (accumulate) {
        dfg_tensor *acc[2] = {dfg_state(p, "acc.x", DFG_F32, xs, DFG_ROLE_GRAD, dfg_init_zeros()),
                              dfg_state(p, "acc.W", DFG_F32, ws, DFG_ROLE_GRAD, dfg_init_zeros())};
        dfg_backward_accumulate(g, loss, wrt, 2, acc);
    } else {
        dfg_tensor *gr[2] = {0};
        if (!dfg_backward(g, loss, wrt, 2, gr)) dfg_output(g, gr[0], "grad.x"), dfg_output(g, gr[1], "grad.W");
    }
    dfg_stage_graph(p, g, accumulate ? 3 : 1);
    return p;
}

/* Runs p once with x and W written; reads the two gradient tensors named n0 and n1. */
static dfg_status acc_run(dfg_program *p, dfg_runtime **rt, const float *x, size_t xb, const float *W, size_t wb,
                          const char *n0, float *g0, const char *n1, float *g1) {
    dfg_status st = dfg_program_status(p);
    CHECK(st == DFG_OK, "building '%s': %s", dfg_program_name(p), dfg_program_error(p));
    if (!st) st = dfg_runtime_create(p, NULL, rt);
    if (!st) st = dfg_runtime_write(*rt, "x", x, xb);
    if (!st) st = dfg_runtime_write(*rt, "W", W, wb);
    if (!st) st = dfg_runtime_step(*rt);
    if (!st) st = dfg_runtime_read(*rt, n0, g0, xb);
    if (!st) st = dfg_runtime_read(*rt, n1, g1, wb);
    if (*rt) CHECK(st == DFG_OK, "running '%s': %s", dfg_program_name(p), dfg_runtime_error(*rt));
    return st;
}

/* Accumulating over repeat = 3 runs gives exactly 3x one run's gradient: g + g is exact and
 * 2g + g rounds once, as 3 * g does. A second step keeps accumulating (6x, up to rounding). */
static void check_backward_accumulate(void) {
    int64_t M = dfg_test_int(2, 5), K = dfg_test_int(2, 5), N = dfg_test_int(2, 5);
    dfg_shape xs = {.rank = 2, .d = {M, K}}, ws = {.rank = 2, .d = {K, N}};
    float x[25], W[25], wl[25], gx[25], gW[25], ax[25], aW[25];
    dfg_test_fill_normal(x, M * K, 1.0f);
    dfg_test_fill_normal(W, K * N, 1.0f);
    dfg_test_fill_normal(wl, M * N, 1.0f);
    size_t xb = sizeof(float) * (size_t)(M * K), wb = sizeof(float) * (size_t)(K * N);
    dfg_program *once = acc_program(false, xs, ws, wl), *acc = acc_program(true, xs, ws, wl);
    dfg_runtime *rt1 = NULL, *rt3 = NULL;
    dfg_status st = acc_run(once, &rt1, x, xb, W, wb, "grad.x", gx, "grad.W", gW);
    if (!st) st = acc_run(acc, &rt3, x, xb, W, wb, "acc.x", ax, "acc.W", aW);
    int bad = 0;
    double gmax = 0.0, rel6 = 0.0;
    for (int64_t i = 0; i < M * K + K * N && !st; i++) {
        float g = i < M * K ? gx[i] : gW[i - M * K], a = i < M * K ? ax[i] : aW[i - M * K];
        gmax = fmax(gmax, fabs(g));
        if (a != 3.0f * g && bad++ < 5) fprintf(stderr, "  accumulated[%lld] %.9g != 3 * %.9g\n", (long long)i, a, g);
    }
    if (!st) {
        CHECK(bad == 0 && gmax > 0.0, "backward_accumulate: %d of %lld elements differ from 3x one run (max |g| %g)", bad,
              (long long)(M * K + K * N), gmax);
        st = dfg_runtime_step(rt3);
        if (!st) st = dfg_runtime_read(rt3, "acc.x", ax, xb);
        CHECK(st == DFG_OK, "second step: %s", dfg_runtime_error(rt3));
        for (int64_t i = 0; i < M * K && !st; i++) rel6 = fmax(rel6, fabs(ax[i] - 6.0 * gx[i]) / fmax(gmax, 1e-6));
        CHECK(!st && rel6 <= 1e-6, "backward_accumulate: after two steps acc.x is off 6x by %g", rel6);
    }
    printf("backward_accumulate: x (%lld,%lld) W (%lld,%lld), repeat 3: %s 3x one run; second step 6x within %.1e\n",
           (long long)M, (long long)K, (long long)K, (long long)N, bad || st ? "NOT" : "exactly", rel6);
    dfg_runtime_free(rt1), dfg_runtime_free(rt3);
    dfg_program_free(once), dfg_program_free(acc);
}

#define GC_RUN(t) gc_run_table(#t, t, (int)(sizeof(t) / sizeof(t[0])))

int main(void) {
    dfg_test_init("test_gradcheck");
    double t0 = gc_now();
    GC_RUN(elementwise_cases);
    GC_RUN(layout_cases);
    GC_RUN(reduce_cases);
    GC_RUN(nn_cases);
    check_table_coverage();
    check_backward_accumulate();
    printf("test_gradcheck: %d runs in %.2f s\n", gc_n_runs, gc_now() - t0);
    return dfg_test_finish();
}
