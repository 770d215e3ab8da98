/* test_planner.c - property tests of the compiler core on thousands of random programs.
 *
 * Each program (a fresh seed per run; DFG_TEST_SEED replays) has 1-3 graph stages, one of them
 * often repeated, often a host stage that rewrites an INPUT and a STATE, sometimes an empty
 * stage (every node dead) and an unstaged graph, and tens of nodes: elementwise unary and
 * binary ops (same shape and broadcast), reshape views, matmul, sum/mean, softmax/log_softmax,
 * layernorm, concat/slice, transpose, where, casts, assign/accumulate/fill/slice_assign into
 * STATEs (reading the new version afterwards), STATEs scoped to a range of stages
 * (dfg_set_scope), dfg_outputs, metrics and nodes nothing needs.
 *
 * For each program, built from its seed and compiled normally, with no_reuse, with keep_order
 * and with a memory budget of 85-98% of the normal arena (remat recomputes to fit, or refuses):
 *   - tests/planner_props.h's properties hold (recomputed here from the final node order: no two
 *     live tensors share a byte but for in-place reuse, lower bound = the report's and <= arena
 *     <= naive, alignment, views/versions at their storage's offset);
 *   - run two steps on the CPU with the same inputs and seed: every dfg_output, PARAM,
 *     unscoped STATE and metric is bit-identical across the plans. All but the no_reuse run
 *     use check mode (DFG_CHECK), so a planner bug that happens not to change a value is caught
 *     as well, and check mode must never fire on a correct plan.
 * A quarter of the graphs end in a training tail: dfg_backward (or backward_accumulate into
 * STATEs) with respect to every parameter, clip_grad_norm in place on the gradients, then AdamW
 * with its moments and step count, or accumulation.
 * Plus a regression test for what the random programs found in the fuse pass (below).
 * DFG_PLANNER_PROGRAMS overrides the number of programs (default 3000); DFG_PLANNER_PROGRAM=<seed>
 * replays the one program a failure names. */
#include <math.h>

#include "pipeline_module.h"
#include "planner_props.h"

/* ---------------------------------------------------------------- the host stage's function
 * rp_feed fills INPUT "host_in" from the seed and step and moves STATE "host_state" in place,
 * so the checker must accept host writes of persistent tensors inside a step. */
static const char host_src[] =
    "#include \"dfg_runtime.h\"\n"
    "dfg_status rp_feed(dfg_host_ctx *ctx) {\n"
    "    dfg_buffer b;\n"
    "    if (dfg_host_buffer(ctx, \"host_in\", &b)) return dfg_host_fail(ctx, \"no host_in\");\n"
    "    unsigned long long s = dfg_host_seed(ctx) * 0x9E3779B97F4A7C15ull + (unsigned long long)dfg_host_step(ctx);\n"
    "    float *x = b.data;\n"
    "    for (size_t i = 0; i < b.bytes / 4; i++) {\n"
    "        s = s * 6364136223846793005ull + 1442695040888963407ull;\n"
    "        x[i] = (float)((s >> 40) & 0xFFFF) / 32768.0f - 1.0f;\n"
    "    }\n"
    "    if (!dfg_host_buffer(ctx, \"host_state\", &b)) {\n"
    "        float *y = b.data;\n"
    "        for (size_t i = 0; i < b.bytes / 4; i++) y[i] = 0.5f * y[i] + 0.25f;\n"
    "    }\n"
    "    return DFG_OK;\n"
    "}\n";

/* ---------------------------------------------------------------- a deterministic generator */
typedef struct {
    uint64_t s;
} prng;

static uint64_t pr_u64(prng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int pr_int(prng *r, int lo, int hi) { return lo + (int)(pr_u64(r) % (uint64_t)(hi - lo + 1)); }
static bool pr_pct(prng *r, int pct) { return pr_int(r, 0, 99) < pct; }

enum { MAX_POOL = 24, MAX_STATES = 12, MAX_PARAMS = 16, MAX_NAMES = 64, MAX_STAGES = 6 };

typedef struct {
    dfg_tensor *t;
    int scope_a, scope_b; /* stage indices; -1: unscoped */
} gen_state;

typedef struct {
    dfg_program *p;
    prng r;
    int64_t dim[3];
    /* the stage list, decided first: graph stages have graph >= 0 */
    int n_stages, host_stage, stage_graph[MAX_STAGES], stage_repeat[MAX_STAGES];
    int host_in_last; /* last stage that may read host_in (its scope's end), or n_stages - 1 */
    dfg_tensor *host_in, *host_state;
    gen_state st[MAX_STATES];
    int n_st;
    dfg_tensor *param[MAX_PARAMS];
    int n_param;
    /* the graph being built */
    dfg_graph *g;
    int stage;
    dfg_tensor *pool[MAX_POOL];
    int n_pool;
    /* names the test reads after the run, and INPUTs it writes before each step */
    char names[MAX_NAMES][24];
    int n_names;
    char inputs[16][24];
    int input_range[16]; /* i32 ids in [0, range); 0: f32 values */
    int n_inputs;
    int n_counter; /* for unique names */
} gen;

/* Stage names: "feed" for the host stage, the graph's name "g<k>" for graph stages. */
static const char *stage_name(const gen *G, int si, char buf[16]) {
    if (si == G->host_stage) snprintf(buf, 16, "feed");
    else snprintf(buf, 16, "g%d", G->stage_graph[si]);
    return buf;
}

static void pool_add(gen *G, dfg_tensor *t) {
    if (!t || dfg_graph_status(G->g)) return;
    if (G->n_pool == MAX_POOL) { /* the oldest but one falls out (and may end up dead) */
        int k = pr_int(&G->r, 0, MAX_POOL / 2);
        memmove(G->pool + k, G->pool + k + 1, sizeof(*G->pool) * (size_t)(MAX_POOL - 1 - k));
        G->n_pool--;
    }
    G->pool[G->n_pool++] = t;
}

/* Mostly one of the newest tensors, so that chains grow deep and most nodes stay live. */
static dfg_tensor *pick(gen *G) {
    int lo = pr_pct(&G->r, 60) && G->n_pool > 4 ? G->n_pool - 4 : 0;
    return G->pool[pr_int(&G->r, lo, G->n_pool - 1)];
}
static int64_t rdim(gen *G) { return G->dim[pr_int(&G->r, 0, 2)]; }

static dfg_tensor *param_of(gen *G, dfg_shape s) {
    for (int i = 0; i < G->n_param; i++)
        if (dfg_shape_equal(dfg_tensor_shape(G->param[i]), s) && pr_pct(&G->r, 70)) return G->param[i];
    if (G->n_param == MAX_PARAMS) return NULL;
    char nm[24];
    snprintf(nm, sizeof(nm), "w%d", G->n_param);
    return G->param[G->n_param++] = dfg_param(G->p, nm, DFG_F32, s, dfg_init_normal(0.0f, 0.5f));
}

/* A pool tensor of shape s, else a parameter of that shape. */
static dfg_tensor *partner(gen *G, dfg_shape s) {
    int start = pr_int(&G->r, 0, G->n_pool - 1);
    for (int k = 0; k < G->n_pool; k++) {
        dfg_tensor *t = G->pool[(start + k) % G->n_pool];
        if (dfg_shape_equal(dfg_tensor_shape(t), s) && pr_pct(&G->r, 80)) return t;
    }
    return param_of(G, s);
}

static dfg_tensor *op_unary(gen *G, dfg_tensor *x) {
    dfg_graph *g = G->g;
    int rank = dfg_tensor_shape(x).rank;
    switch (pr_int(&G->r, 0, 9)) {
    case 0: return dfg_neg(g, x);
    case 1: return dfg_scale(g, x, 0.5f + (float)pr_int(&G->r, 0, 10) / 10.0f);
    case 2: return dfg_affine(g, x, -0.75f, 0.25f);
    case 3: return dfg_clamp(g, x, -1.5f, 1.5f);
    case 4: { /* bias + gelu: the fuse pass's bias_gelu */
        dfg_tensor *b = rank && pr_pct(&G->r, 40) ? param_of(G, DFG_SHAPE(dfg_tensor_shape(x).d[rank - 1])) : NULL;
        return dfg_gelu(g, b ? dfg_bias_add(g, x, b) : x);
    }
    case 5: return dfg_exp(g, dfg_clamp(g, x, -3.0f, 2.0f));
    case 6: return dfg_sqrt(g, dfg_add_scalar(g, dfg_mul(g, x, x), 1.0f));
    case 7: return rank ? dfg_softmax(g, x) : dfg_neg(g, x);
    case 8: return rank ? dfg_log_softmax(g, x) : dfg_gelu(g, x);
    default: /* clamped first: a float outside i32's range has no defined conversion */
        return dfg_cast(g, dfg_cast(g, dfg_scale(g, dfg_clamp(g, x, -100.0f, 100.0f), 4.0f), DFG_I32), DFG_F32);
    }
}

static dfg_tensor *op_binary(gen *G, dfg_tensor *x) {
    dfg_graph *g = G->g;
    dfg_shape s = dfg_tensor_shape(x);
    dfg_tensor *y = NULL;
    switch (pr_int(&G->r, 0, 4)) {
    case 0: y = s.rank ? dfg_sum_keepdim(g, x, -1) : x; break;             /* (..., 1) */
    case 1: y = s.rank >= 2 ? dfg_mean(g, x, 0) : s.rank ? dfg_sum(g, x, 0) : x; break; /* trailing dims, or a scalar */
    case 2: y = s.rank ? param_of(G, DFG_SHAPE(s.d[s.rank - 1])) : NULL; break;
    default: y = partner(G, s);
    }
    if (!y) return NULL;
    if (s.rank && dfg_tensor_shape(y).rank == 1 && dfg_tensor_shape(y).d[0] == s.d[s.rank - 1] && pr_pct(&G->r, 30))
        return dfg_bias_add(g, x, y);
    bool swap = pr_pct(&G->r, 30);
    dfg_tensor *a = swap ? y : x, *b = swap ? x : y;
    switch (pr_int(&G->r, 0, 6)) {
    case 0: return dfg_add(g, a, b);
    case 1: return dfg_sub(g, a, b);
    case 2: return dfg_mul(g, a, b);
    case 3: return dfg_maximum(g, a, b);
    case 4: return dfg_minimum(g, a, b);
    case 5: return dfg_div(g, a, dfg_add_scalar(g, dfg_mul(g, b, b), 1.0f));
    default: /* i32 inputs, f32 output of the same size: in place across dtypes */
        return dfg_equal(g, dfg_cast(g, dfg_scale(g, dfg_clamp(g, a, -9.0f, 9.0f), 2.0f), DFG_I32),
                         dfg_cast(g, dfg_scale(g, dfg_clamp(g, b, -9.0f, 9.0f), 2.0f), DFG_I32));
    }
}

static dfg_tensor *op_view(gen *G, dfg_tensor *x) {
    dfg_shape s = dfg_tensor_shape(x);
    if (x->kind == DFG_STATE || x->version_of) return NULL; /* a view of a STATE goes stale at its next write */
    int64_t n = dfg_shape_numel(s);
    switch (s.rank) {
    case 0: return dfg_reshape(G->g, x, DFG_SHAPE(1));
    case 1: return pr_pct(&G->r, 50) ? dfg_reshape(G->g, x, DFG_SHAPE(1, n)) : dfg_reshape(G->g, x, DFG_SHAPE(-1, 1));
    case 2: return pr_pct(&G->r, 50) ? dfg_reshape(G->g, x, DFG_SHAPE(s.d[1], s.d[0])) : dfg_reshape(G->g, x, DFG_SHAPE(n));
    default: return dfg_reshape(G->g, x, DFG_SHAPE(s.d[0], -1));
    }
}

static dfg_tensor *op_matmul(gen *G, dfg_tensor *x) {
    dfg_shape s = dfg_tensor_shape(x);
    if (s.rank < 2 || s.rank > 3) return NULL;
    int64_t m = s.d[s.rank - 2], n = s.d[s.rank - 1], k = rdim(G);
    int form = s.rank == 2 ? pr_int(&G->r, 0, 3) : pr_int(&G->r, 0, 1);
    dfg_shape ws[4] = {DFG_SHAPE(n, k), DFG_SHAPE(k, n), DFG_SHAPE(m, k), DFG_SHAPE(k, m)};
    dfg_tensor *w = partner(G, ws[form]);
    if (!w) return NULL;
    switch (form) {
    case 0: return dfg_matmul(G->g, x, w, false, false);
    case 1: return dfg_matmul(G->g, x, w, false, true);
    case 2: return dfg_matmul(G->g, x, w, true, false);
    default: return dfg_matmul(G->g, w, x, false, false);
    }
}

static dfg_tensor *op_reduce_norm(gen *G, dfg_tensor *x) {
    dfg_shape s = dfg_tensor_shape(x);
    if (!s.rank) return NULL;
    int axis = pr_int(&G->r, 0, s.rank - 1);
    switch (pr_int(&G->r, 0, 3)) {
    case 0: return dfg_sum(G->g, x, axis);
    case 1: return dfg_mean(G->g, x, axis);
    case 2: return dfg_expand(G->g, dfg_sum_keepdim(G->g, x, -1), s);
    default: {
        int64_t L = s.d[s.rank - 1];
        dfg_tensor *w = param_of(G, DFG_SHAPE(L)), *b = param_of(G, DFG_SHAPE(L));
        return w && b ? dfg_layernorm(G->g, x, w, b, 1e-5f) : NULL;
    }
    }
}

static dfg_tensor *op_layout(gen *G, dfg_tensor *x) {
    dfg_shape s = dfg_tensor_shape(x);
    if (!s.rank) return NULL;
    int axis = pr_int(&G->r, 0, s.rank - 1);
    int64_t len = s.d[axis];
    switch (pr_int(&G->r, 0, 2)) {
    case 0: {
        dfg_tensor *y = partner(G, s);
        if (!y) return NULL;
        dfg_tensor *cat = dfg_concat(G->g, (dfg_tensor *[]){x, y}, 2, axis);
        return pr_pct(&G->r, 60) ? dfg_slice(G->g, cat, axis, pr_int(&G->r, 0, (int)len), len) : cat;
    }
    case 1: {
        int64_t l = pr_int(&G->r, 1, (int)len);
        return dfg_slice(G->g, x, axis, pr_int(&G->r, 0, (int)(len - l)), l);
    }
    default:
        if (s.rank < 2) return NULL;
        return dfg_transpose(G->g, x, 0, s.rank - 1);
    }
}

/* An i32 INPUT of `rows` ids in [0, range), written by the test before each step. */
static dfg_tensor *ids_input(gen *G, int64_t rows, int64_t range) {
    if (G->n_inputs == 16) return NULL;
    char nm[24];
    snprintf(nm, sizeof(nm), "ids%d", G->n_counter++);
    G->input_range[G->n_inputs] = (int)range;
    snprintf(G->inputs[G->n_inputs++], sizeof(G->inputs[0]), "%s", nm);
    return dfg_input(G->g, nm, DFG_I32, DFG_SHAPE(rows));
}

/* Indexing over a "vocabulary" last dim, in the shapes the fuse pass rewrites:
 * take(log_softmax(x [* 1/T]), ids) -> logprob, with x = h @ W^T -> linear_logprob, and an
 * embedding lookup. */
static dfg_tensor *op_index(gen *G, dfg_tensor *x) {
    dfg_shape s = dfg_tensor_shape(x);
    if (s.rank != 2) return NULL;
    int64_t m = s.d[0], V = s.d[1];
    switch (pr_int(&G->r, 0, 3)) {
    case 0: { /* x @ W^T against a (V', C) table: the lm_head shape */
        int64_t Vp = rdim(G) + 2;
        dfg_tensor *w = param_of(G, DFG_SHAPE(Vp, V)), *ids = ids_input(G, m, Vp);
        if (!w || !ids) return NULL;
        return dfg_take(G->g, dfg_log_softmax(G->g, dfg_matmul(G->g, x, w, false, true)), ids);
    }
    case 1: {
        dfg_tensor *ids = ids_input(G, m, V);
        if (!ids) return NULL;
        dfg_tensor *z = pr_pct(&G->r, 50) ? dfg_scale(G->g, x, 1.0f / 0.7f) : x;
        return dfg_take(G->g, dfg_log_softmax(G->g, z), ids);
    }
    case 2: { /* a log-softmax read elsewhere too: stays unfused */
        dfg_tensor *ids = ids_input(G, m, V);
        if (!ids) return NULL;
        dfg_tensor *ls = dfg_log_softmax(G->g, x);
        pool_add(G, ls);
        return dfg_take(G->g, ls, ids);
    }
    default: {
        int64_t Vt = rdim(G) + 1;
        dfg_tensor *table = param_of(G, DFG_SHAPE(Vt, V)), *ids = ids_input(G, m, Vt);
        return table && ids ? dfg_embed(G->g, table, ids) : NULL;
    }
    }
}

static dfg_tensor *op_where(gen *G, dfg_tensor *x) {
    dfg_tensor *y = partner(G, dfg_tensor_shape(x));
    if (!y) return NULL;
    dfg_tensor *cond = dfg_maximum(G->g, x, dfg_fill(G->g, DFG_F32, dfg_tensor_shape(x), 0.0f));
    return dfg_where(G->g, cond, x, y);
}

static dfg_tensor *op_output(gen *G, dfg_tensor *x);

/* Writes a STATE of x's shape (assign, accumulate, fill or a slice) and returns the STATE, whose
 * later reads see the new value. A new STATE may be scoped to this stage and some later ones:
 * then this write comes before any read of it in the step. */
static dfg_tensor *op_write(gen *G, dfg_tensor *x) {
    dfg_shape s = dfg_tensor_shape(x);
    gen_state *st = NULL;
    for (int i = 0; i < G->n_st && !st; i++)
        if (dfg_shape_equal(dfg_tensor_shape(G->st[i].t), s) && G->st[i].scope_a <= G->stage &&
            (G->st[i].scope_a < 0 || (G->st[i].scope_a < G->stage && G->stage <= G->st[i].scope_b)) && pr_pct(&G->r, 70))
            st = &G->st[i];
    bool fresh = false;
    if (!st) {
        if (G->n_st == MAX_STATES) return NULL;
        st = &G->st[G->n_st];
        char nm[24];
        snprintf(nm, sizeof(nm), "s%d", G->n_st++);
        st->t = dfg_state(G->p, nm, DFG_F32, s, DFG_ROLE_NONE, dfg_init_normal(0.0f, 1.0f));
        st->scope_a = st->scope_b = -1;
        fresh = true;
        if (pr_pct(&G->r, 40)) { /* scoped: from this stage to a later one (host stages included) */
            st->scope_a = G->stage;
            st->scope_b = pr_int(&G->r, G->stage, G->n_stages - 1);
            char a[16], b[16];
            dfg_set_scope(G->p, st->t, stage_name(G, G->stage, a), stage_name(G, st->scope_b, b));
        }
    }
    if (!st->t) return NULL;
    bool scoped_first = fresh && st->scope_a >= 0; /* must be written whole before it is read */
    switch (scoped_first ? pr_int(&G->r, 0, 1) * 3 : pr_int(&G->r, 0, 4)) {
    case 0: dfg_assign(G->g, st->t, x); break;
    case 1: dfg_accumulate(G->g, st->t, x); break;
    case 2:
        if (s.rank && s.d[0] > 1) {
            int64_t l = pr_int(&G->r, 1, (int)s.d[0] - 1);
            dfg_slice_assign(G->g, st->t, dfg_slice(G->g, x, 0, 0, l), 0, pr_int(&G->r, 0, (int)(s.d[0] - l)));
        } else dfg_accumulate(G->g, st->t, x);
        break;
    case 3: dfg_assign_fill(G->g, st->t, (float)pr_int(&G->r, -2, 2)); break;
    default: dfg_accumulate(G->g, st->t, dfg_scale(G->g, x, 0.25f)); break;
    }
    /* the new version itself as an output: its bytes are the STATE's (scoped: to the step's end) */
    if (pr_pct(&G->r, 10) && !dfg_graph_status(G->g)) op_output(G, G->g->latest[st->t->id]);
    return st->t;
}

static void add_name(gen *G, const char *name) {
    if (G->n_names < MAX_NAMES) snprintf(G->names[G->n_names++], sizeof(G->names[0]), "%s", name);
}

static dfg_tensor *op_output(gen *G, dfg_tensor *x) {
    if (x->kind != DFG_TEMP || (x->flags & DFG_TF_OUTPUT) || G->n_names == MAX_NAMES) return NULL;
    char nm[24];
    snprintf(nm, sizeof(nm), "o%d", G->n_counter++);
    add_name(G, nm);
    return dfg_output(G->g, x, nm);
}

static void op_metric(gen *G, dfg_tensor *x) {
    while (dfg_tensor_shape(x).rank && !dfg_graph_status(G->g)) x = dfg_sum(G->g, x, 0);
    char nm[24];
    snprintf(nm, sizeof(nm), "m%d", G->n_counter++);
    dfg_metric(G->g, nm, x);
}

/* Whether dfg_backward can go from t to the parameters: no op without a gradient rule (the
 * writes to STATEs) lies in t's cone. */
static bool differentiable(const dfg_graph *g, const dfg_tensor *t) {
    bool *seen = calloc((size_t)g->n_nodes + 1, sizeof(bool));
    const dfg_node **stack = malloc(sizeof(*stack) * ((size_t)g->n_nodes + 1));
    int top = 0;
    bool ok = true;
    if (t->kind == DFG_TEMP) stack[top++] = t->producer, seen[t->producer->id] = true;
    while (top && ok) {
        const dfg_node *n = stack[--top];
        ok = dfg_ops[n->op].grad_kind != DFG_GRAD_NONE;
        for (int j = 0; j < n->n_in; j++) {
            const dfg_node *q = n->in[j]->kind == DFG_TEMP ? n->in[j]->producer : NULL;
            if (q && !seen[q->id]) seen[q->id] = true, stack[top++] = q;
        }
    }
    free(seen), free(stack);
    return ok;
}

/* A persistent tensor of the program by name, made on first use. */
static dfg_tensor *named_state(gen *G, const char *prefix, int i, dfg_dtype dt, dfg_shape s) {
    char nm[24];
    snprintf(nm, sizeof(nm), "%s%d", prefix, i);
    dfg_tensor *t = dfg_find(G->p, nm);
    return t ? t : dfg_state(G->p, nm, dt, s, DFG_ROLE_OPTIM, dfg_init_zeros());
}

/* A training tail: the gradient of a scalar of some tensor with respect to every parameter,
 * then global-norm clipping (in place on TEMP or STATE gradients) and AdamW or accumulation. */
static void op_train(gen *G) {
    dfg_graph *g = G->g;
    dfg_tensor *x = NULL;
    for (int k = 0; k < 6 && !x; k++) {
        dfg_tensor *c = G->pool[pr_int(&G->r, 0, G->n_pool - 1)];
        if (c->kind == DFG_TEMP && dfg_tensor_dtype(c) == DFG_F32 && differentiable(g, c)) x = c;
    }
    int n = G->n_param;
    if (!x || !n) return;
    while (dfg_tensor_shape(x).rank) x = dfg_sum(g, x, 0);
    dfg_tensor *grads[MAX_PARAMS], *acc[MAX_PARAMS], *m[MAX_PARAMS], *v[MAX_PARAMS];
    int mode = pr_int(&G->r, 0, 2);
    if (mode == 1) { /* accumulate into STATEs, clip those in place */
        for (int i = 0; i < n; i++) acc[i] = named_state(G, "gacc", i, DFG_F32, dfg_tensor_shape(G->param[i]));
        dfg_backward_accumulate(g, x, G->param, n, acc);
        op_output(G, dfg_clip_grad_norm(g, acc, n, 0.5f));
        return;
    }
    dfg_backward(g, x, G->param, n, grads);
    dfg_tensor *norm = dfg_clip_grad_norm(g, grads, n, 0.5f);
    if (pr_pct(&G->r, 50)) op_output(G, norm);
    if (mode == 0) {
        for (int i = 0; i < n; i++) dfg_accumulate(g, named_state(G, "gsum", i, DFG_F32, dfg_tensor_shape(G->param[i])), grads[i]);
        return;
    }
    for (int i = 0; i < n; i++) {
        m[i] = named_state(G, "adam_m", i, DFG_F32, dfg_tensor_shape(G->param[i]));
        v[i] = named_state(G, "adam_v", i, DFG_F32, dfg_tensor_shape(G->param[i]));
    }
    dfg_tensor *step = named_state(G, "adam_step", 0, DFG_I32, DFG_SCALAR);
    dfg_assign(g, step, dfg_add(g, step, dfg_fill(g, DFG_I32, DFG_SCALAR, 1.0f)));
    dfg_adamw(g, G->param, grads, m, v, n, step, (dfg_adamw_config){1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f});
}

/* One graph: a few inputs, then n_ops random ops over the pool. An empty stage builds only
 * nodes that nothing needs. */
static void build_graph(gen *G, int si, bool empty) {
    char nm[24];
    snprintf(nm, sizeof(nm), "g%d", G->stage_graph[si]);
    G->g = dfg_graph_new(G->p, nm);
    G->stage = si;
    G->n_pool = 0;
    int n_in = pr_int(&G->r, 1, 2);
    for (int k = 0; k < n_in && G->n_inputs < 16; k++) {
        snprintf(nm, sizeof(nm), "in%d_%d", si, k);
        dfg_shape s = pr_pct(&G->r, 70) ? DFG_SHAPE(G->dim[0], G->dim[1]) : DFG_SHAPE(rdim(G), rdim(G), rdim(G));
        pool_add(G, dfg_input(G->g, nm, DFG_F32, s));
        G->input_range[G->n_inputs] = 0;
        snprintf(G->inputs[G->n_inputs++], sizeof(G->inputs[0]), "%s", nm);
    }
    if (G->host_in && si <= G->host_in_last) pool_add(G, G->host_in); /* made at the host stage: si is after it */
    if (G->host_state && pr_pct(&G->r, 60)) pool_add(G, G->host_state);
    for (int i = 0; i < G->n_st; i++) /* unscoped states, and scoped ones already written in their scope */
        if ((G->st[i].scope_a < 0 || (G->st[i].scope_a < si && si <= G->st[i].scope_b)) && pr_pct(&G->r, 50))
            pool_add(G, G->st[i].t);
    int n_ops = empty ? 3 : pr_int(&G->r, 8, 30);
    for (int k = 0; k < n_ops && !dfg_graph_status(G->g); k++) {
        dfg_tensor *x = pick(G), *y = NULL;
        int kind = empty ? 0 : pr_int(&G->r, 0, 99);
        if (kind < 18) y = op_unary(G, x);
        else if (kind < 38) y = op_binary(G, x);
        else if (kind < 46) y = op_view(G, x);
        else if (kind < 56) y = op_matmul(G, x);
        else if (kind < 66) y = op_reduce_norm(G, x);
        else if (kind < 71) y = op_layout(G, x);
        else if (kind < 74) y = op_where(G, x);
        else if (kind < 78) y = op_index(G, x);
        else if (kind < 88) y = op_write(G, x);
        else if (kind < 96) y = op_output(G, x);
        else op_metric(G, x);
        if (y && dfg_tensor_numel(y) <= 4096) pool_add(G, y);
    }
    for (int k = pr_int(&G->r, 1, 3); k > 0 && !empty && !dfg_graph_status(G->g); k--) { /* what the stage is for */
        dfg_tensor *x = G->pool[pr_int(&G->r, 0, G->n_pool - 1)];
        if (!op_output(G, x)) op_write(G, x);
    }
    if (!empty && pr_pct(&G->r, 25) && !dfg_graph_status(G->g)) op_train(G);
}

/* Builds the program of `seed`; gen G keeps the names to write and read. */
static dfg_program *build_program(uint64_t seed, gen *G) {
    memset(G, 0, sizeof(*G));
    G->r.s = seed;
    G->p = dfg_program_new("random");
    for (int i = 0; i < 3; i++) G->dim[i] = pr_int(&G->r, 1, 6);
    int n_graphs = pr_int(&G->r, 1, 3), rep = pr_pct(&G->r, 50) ? pr_int(&G->r, 0, n_graphs - 1) : -1;
    G->host_stage = pr_pct(&G->r, 60) ? pr_int(&G->r, 0, n_graphs) : -1;
    for (int gi = 0; gi <= n_graphs; gi++) {
        if (gi == G->host_stage) G->stage_graph[G->n_stages] = -1, G->stage_repeat[G->n_stages++] = 1;
        if (gi < n_graphs) G->stage_graph[G->n_stages] = gi, G->stage_repeat[G->n_stages++] = gi == rep ? pr_int(&G->r, 2, 3) : 1;
    }
    G->host_in_last = G->n_stages - 1;
    int empty = pr_pct(&G->r, 8) ? pr_int(&G->r, 0, n_graphs - 1) : -1;
    for (int si = 0; si < G->n_stages; si++) {
        if (si == G->host_stage) {
            /* host_in (maybe scoped from the host stage on) and host_state belong to the first
             * graph built; any graph may read persistent tensors */
            if (!G->host_in) {
                dfg_graph *g0 = dfg_graph_new(G->p, "host_owner");
                G->host_in = dfg_input(g0, "host_in", DFG_F32, DFG_SHAPE(G->dim[0], G->dim[1]));
            }
            G->host_state = dfg_state(G->p, "host_state", DFG_F32, DFG_SHAPE(G->dim[0], G->dim[1]), DFG_ROLE_NONE,
                                      dfg_init_uniform(-1.0f, 1.0f));
            if (pr_pct(&G->r, 50)) {
                G->host_in_last = pr_int(&G->r, si, G->n_stages - 1);
                char b[16];
                dfg_set_scope(G->p, G->host_in, "feed", stage_name(G, G->host_in_last, b));
            }
            dfg_stage_host(G->p, "feed", "rp_feed");
            continue;
        }
        build_graph(G, si, G->stage_graph[si] == empty);
        dfg_stage_graph(G->p, G->g, G->stage_repeat[si]);
    }
    if (pr_pct(&G->r, 10)) { /* a graph that is never staged: its nodes never run, its INPUT has bytes */
        dfg_graph *u = dfg_graph_new(G->p, "unstaged");
        dfg_tensor *x = dfg_input(u, "in_unstaged", DFG_F32, DFG_SHAPE(G->dim[0]));
        dfg_output(u, dfg_gelu(u, x), "o_unstaged");
    }
    return G->p;
}

/* ---------------------------------------------------------------- running and comparing */
typedef struct {
    unsigned char *bytes;
    size_t n;
} snapshot;

static void snap_add(snapshot *s, const void *data, size_t n) {
    s->bytes = realloc(s->bytes, s->n + n);
    memcpy(s->bytes + s->n, data, n);
    s->n += n;
}

typedef struct {
    int programs, nodes, removed, inplace, repeated, host, scoped, empty, unstaged, runs, clip, adamw, fused;
    int remat_fit, remat_over, remat_chunked, recomputed;
    int numeric_stops; /* programs whose values overflowed (the runtime's guard stopped a step) */
    double max_ratio;
    size_t max_arena;
} stats;

enum { V_NORMAL, V_NO_REUSE, V_KEEP_ORDER, V_BUDGET, N_VARIANTS };

static void count_features(const dfg_program *p, const gen *G, const pp_result *pr, stats *stt) {
    const dfg_report *r = dfg_program_report(p);
    double ratio = pr->lower_bound ? (double)pr->arena / (double)pr->lower_bound : 1.0;
    stt->max_ratio = ratio > stt->max_ratio ? ratio : stt->max_ratio;
    stt->max_arena = pr->arena > stt->max_arena ? pr->arena : stt->max_arena;
    stt->nodes += r->n_nodes, stt->removed += r->n_nodes_removed, stt->inplace += r->n_inplace;
    stt->fused += r->fused[0] + r->fused[1] + r->fused[2];
    for (int s = 0; s < p->n_stages; s++) {
        for (int n = 0; p->stages[s].kind == DFG_STAGE_GRAPH && n < p->stages[s].graph->n_nodes; n++) {
            dfg_op op = p->stages[s].graph->nodes[n]->op;
            stt->clip += op == DFG_OP_CLIP_GRAD_NORM, stt->adamw += op == DFG_OP_ADAMW;
        }
        stt->repeated += p->stages[s].repeat > 1;
        stt->empty += p->stages[s].kind == DFG_STAGE_GRAPH && p->stages[s].graph->n_nodes == 0;
    }
    stt->host += G->host_stage >= 0;
    stt->unstaged += dfg_find(p, "o_unstaged") != NULL;
    for (int i = 0; i < p->n_tensors; i++) stt->scoped += p->tensors[i]->scope_first != NULL;
}

/* Writes every INPUT the test owns: f32 values, or ids in their range. */
static void write_inputs(dfg_runtime *rt, const gen *G, prng *r) {
    for (int k = 0; k < G->n_inputs; k++) {
        dfg_buffer b;
        if (dfg_runtime_buffer(rt, G->inputs[k], &b)) continue;
        float *x = malloc(b.bytes);
        for (size_t i = 0; i < b.bytes / 4; i++) {
            if (G->input_range[k]) ((int32_t *)(void *)x)[i] = pr_int(r, 0, G->input_range[k] - 1);
            else x[i] = (float)pr_int(r, -1000, 1000) / 500.0f;
        }
        dfg_runtime_write(rt, G->inputs[k], x, b.bytes);
        free(x);
    }
}

/* Builds, compiles as `variant` says, checks the plan, runs two steps and snapshots the
 * results. Returns 1 when the results are to be compared, 2 when they ran but are not
 * comparable bit for bit, 0 when the variant does not apply (a budget nothing fits), -1 when
 * something failed (already reported). *arena gets the plan's arena. */
static int run_variant(uint64_t seed, int variant, void *host_lib, int64_t budget, snapshot *snap, stats *stt,
                       int64_t *arena) {
    static const char *const vname[] = {"normal", "no_reuse", "keep_order", "memory budget"};
    char label[96];
    snprintf(label, sizeof(label), "program %llu (%s)", (unsigned long long)seed, vname[variant]);
    gen *G = calloc(1, sizeof(*G));
    dfg_program *p = build_program(seed, G);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.no_reuse = variant == V_NO_REUSE;
    o.keep_order = variant == V_KEEP_ORDER;
    o.memory_budget = variant == V_BUDGET ? budget : 0;
    dfg_status st = dfg_compile(p, &o);
    if (variant == V_BUDGET && st == DFG_ERR_ARG && strstr(dfg_program_error(p), "remat:") &&
        strstr(dfg_program_error(p), "does not fit")) { /* remat found no plan that small: a clear refusal */
        stt->remat_over++;
        dfg_program_free(p);
        free(G);
        return 0;
    }
    CHECK(st == DFG_OK, "%s: compile: %s", label, dfg_program_error(p));
    int ok = st == DFG_OK ? 1 : -1;
    pp_result pr;
    /* a plan that fails a property still runs: check mode and the comparison then show what the
     * bug does at run time */
    bool props_ok = ok > 0 && pp_check(p, label, &pr) == 0;
    if (props_ok) *arena = (int64_t)pr.arena;
    if (props_ok && variant == V_NORMAL) count_features(p, G, &pr, stt);
    if (props_ok && variant == V_BUDGET) {
        CHECK((int64_t)pr.arena <= budget, "%s: arena %zu over the budget %lld", label, pr.arena, (long long)budget);
        stt->remat_fit++, stt->recomputed += dfg_program_report(p)->recomputed_nodes;
        /* under a budget, fuse walks linear_logprob's vocabulary in smaller chunks (passes/fuse.c
         * choose_chunks): the sums run in another order, so those plans are checked but not
         * compared bit for bit */
        for (int gi = 0; gi < p->n_graphs && ok == 1; gi++)
            for (int n = 0; n < p->graphs[gi]->n_nodes; n++)
                if (p->graphs[gi]->nodes[n]->op == DFG_OP_LINEAR_LOGPROB) ok = 2;
        stt->remat_chunked += ok == 2;
    }
    dfg_runtime *rt = NULL;
    if (ok > 0) {
        dfg_run_options ro = dfg_run_options_default();
        ro.n_threads = 1;
        ro.seed = seed;
        ro.host_lib = host_lib;
        ro.check = variant != V_NO_REUSE;
        st = dfg_runtime_create(p, &ro, &rt);
        CHECK(st == DFG_OK, "%s: create: %s", label, dfg_runtime_error(rt));
        ok = st == DFG_OK ? ok : -1;
    }
    prng in_rng = {seed ^ 0xA5A5A5A5ull};
    bool stopped = false; /* by the guard: the outputs of the failed step are not results */
    for (int step = 0; step < 2 && ok > 0; step++) {
        write_inputs(rt, G, &in_rng);
        st = dfg_runtime_step(rt);
        if (st == DFG_ERR_NUMERIC) { /* a random program can overflow: the guard's stop (at which
                                        step, nothing updated: the state compared below) is a
                                        result every plan must reproduce */
            snap_add(snap, &step, sizeof(step));
            stt->numeric_stops += variant == V_NORMAL;
            stopped = true;
            break;
        }
        CHECK(st == DFG_OK, "%s: step %d: %s", label, step, dfg_runtime_error(rt));
        ok = st == DFG_OK ? ok : -1;
        stt->runs += ok > 0;
    }
    for (int k = 0; k < G->n_names && ok > 0 && !stopped; k++) { /* dfg_outputs */
        dfg_buffer b;
        if (dfg_runtime_buffer(rt, G->names[k], &b) == DFG_OK) snap_add(snap, b.data, b.bytes);
    }
    for (int i = 0; ok > 0 && i < p->n_tensors; i++) { /* PARAMs, metrics, unscoped STATEs */
        const dfg_tensor *t = p->tensors[i];
        if ((t->kind == DFG_PARAM || t->kind == DFG_STATE) && !t->scope_first) {
            dfg_buffer b;
            CHECK(dfg_runtime_buffer(rt, t->name, &b) == DFG_OK, "%s: read %s", label, t->name);
            snap_add(snap, t->name, strlen(t->name) + 1);
            snap_add(snap, b.data, b.bytes);
        }
    }
    dfg_runtime_free(rt);
    dfg_program_free(p);
    free(G);
    return ok;
}

static void test_random_programs(void *host_lib, int n_programs) {
    stats stt = {0};
    int compared = 0;
    const char *only = getenv("DFG_PLANNER_PROGRAM"); /* replays one program by the seed a failure names */
    for (int k = 0; k < (only ? 1 : n_programs); k++) {
        uint64_t seed = only ? strtoull(only, NULL, 0) : dfg_test_u64();
        snapshot s[N_VARIANTS] = {{0}};
        int done[N_VARIANTS] = {0};
        int64_t arena = 0, unused;
        bool ok = true;
        for (int v = 0; v < N_VARIANTS && ok; v++) {
            /* the budget: 85-98% of the normal plan's arena, which remat may or may not reach */
            done[v] = run_variant(seed, v, host_lib, arena * (int64_t)(85 + seed % 14) / 100, &s[v], &stt,
                                  v == V_NORMAL ? &arena : &unused);
            ok = done[v] >= 0;
        }
        if (ok) {
            for (int v = 1; v < N_VARIANTS; v++)
                if (done[v] == 1)
                    CHECK(s[v].n == s[0].n && (!s[0].n || !memcmp(s[v].bytes, s[0].bytes, s[0].n)),
                          "program %llu: results differ between the normal plan and the %s plan (%zu vs %zu bytes)",
                          (unsigned long long)seed, v == V_NO_REUSE ? "no_reuse" : v == V_KEEP_ORDER ? "keep_order" : "budget",
                          s[0].n, s[v].n);
            compared++;
        }
        for (int v = 0; v < N_VARIANTS; v++) free(s[v].bytes);
        stt.programs++;
        if (dfg_test_failures > 20) break; /* enough to debug from */
    }
    printf("random programs: %d built, %d compared bit for bit over 3-4 plans (%d runs of 2 steps)\n", stt.programs, compared,
           stt.runs);
    printf("  %d nodes after dce (%d removed), %d in-place reuses, %d fused, %d repeated stages, %d host stages, "
           "%d empty stages, %d unstaged graphs, %d scoped tensors, %d clip_grad_norm, %d adamw\n",
           stt.nodes, stt.removed, stt.inplace, stt.fused, stt.repeated, stt.host, stt.empty, stt.unstaged, stt.scoped,
           stt.clip, stt.adamw);
    printf("  memory budget at 85-98%% of the arena: %d plans fit (%d nodes recomputed; %d with budget-sized "
           "linear_logprob chunks, not compared), %d refused\n",
           stt.remat_fit, stt.recomputed, stt.remat_chunked, stt.remat_over);
    printf("  max arena / lower bound %.4f, largest arena %zu bytes; %d programs overflowed (the same stop in every plan)\n",
           stt.max_ratio, stt.max_arena, stt.numeric_stops);
    /* the generator must reach every feature it is meant to test */
    CHECK(compared == stt.programs, "%d of %d programs were not compared", stt.programs - compared, stt.programs);
    if (n_programs >= 500 && !only)
        CHECK(stt.removed > 0 && stt.inplace > 0 && stt.repeated > 0 && stt.host > 0 && stt.empty > 0 && stt.unstaged > 0 &&
                  stt.scoped > 0 && stt.clip > 0 && stt.adamw > 0 && stt.fused > 0 && stt.recomputed > 0,
              "the generator missed a feature (see the counts above)");
}

/* Regression (found by the random programs): fuse rewrote gelu(bias_add(S, w)) into bias_gelu
 * whose fused gradient reads S again where the backward starts, after the graph assigned S a
 * new value. The program failed verify (debug builds), and with keep_order the gradient used
 * the new S. Such a region must stay unfused: every plan compiles with verify after each pass
 * and gives the gradient at the old S, gelu'(1) = 1.0830, bit for bit. */
static void test_fuse_reads_overwritten_state(void) {
    float grad[4][4];
    for (int v = 0; v < 4; v++) { /* normal, keep_order, no_fuse, keep_order + no_fuse */
        dfg_program *p = dfg_program_new("fuse_state");
        dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(4), dfg_init_zeros());
        dfg_tensor *S = dfg_state(p, "S", DFG_F32, DFG_SHAPE(2, 4), DFG_ROLE_NONE, dfg_init_ones());
        dfg_tensor *acc = dfg_state(p, "acc", DFG_F32, DFG_SHAPE(4), DFG_ROLE_NONE, dfg_init_zeros());
        dfg_graph *g = dfg_graph_new(p, "g");
        dfg_tensor *y = dfg_sum(g, dfg_sum(g, dfg_gelu(g, dfg_bias_add(g, S, w)), 0), 0);
        dfg_output(g, y, "y");
        dfg_assign_fill(g, S, 5.0f); /* after the forward read S, before the backward */
        dfg_backward_accumulate(g, y, &w, 1, &acc);
        dfg_stage_graph(p, g, 1);
        dfg_options o = dfg_options_default(DFG_TARGET_CPU);
        o.verify_each = true;
        o.keep_order = v == 1 || v == 3;
        o.no_fuse = v >= 2;
        dfg_status st = dfg_compile(p, &o);
        CHECK(st == DFG_OK, "fuse/state variant %d: compile: %s", v, dfg_program_error(p));
        dfg_runtime *rt = NULL;
        dfg_run_options ro = dfg_run_options_default();
        ro.n_threads = 1;
        ro.check = true;
        if (!st) st = dfg_runtime_create(p, &ro, &rt);
        if (!st) st = dfg_runtime_step(rt);
        CHECK(st == DFG_OK, "fuse/state variant %d: run: %s", v, dfg_runtime_error(rt));
        if (!st) dfg_runtime_read(rt, "acc", grad[v], sizeof(grad[v]));
        else memset(grad[v], 0, sizeof(grad[v]));
        dfg_runtime_free(rt);
        dfg_program_free(p);
    }
    CHECK(fabsf(grad[0][0] / 2.0f - 1.0830f) < 1e-3f, "the gradient is %g per row, not gelu'(1) = 1.0830", grad[0][0] / 2.0f);
    for (int v = 1; v < 4; v++) CHECK(!memcmp(grad[v], grad[0], sizeof(grad[0])), "fuse/state: variant %d differs", v);
}

int main(void) {
    dfg_test_init("test_planner");
    if (!dfg_test_tmpdir_create("dfg_planner")) return 1;
    void *host_lib = pm_build_text(host_src, "rp_host");
    const char *env = getenv("DFG_PLANNER_PROGRAMS");
    int n = env && *env ? atoi(env) : 3000;
    test_fuse_reads_overwritten_state();
    if (host_lib) test_random_programs(host_lib, n);
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
