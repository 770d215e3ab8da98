/* test_kv_extend.c - dfg_model_extend (ops/nn/nn_extend.c) puts several known tokens a row into
 * the KV cache in one pass, as decode steps fed those tokens one at a time would. N rows share
 * a prefill of Tp-1 columns and stand at column Tp-1; row b then gets k[b] tokens (0 .. K; 0: a
 * row with nothing to add, as a row without a tool answer in a multi-turn rollout), in a window
 * of E columns (E >= K) that starts at min(Tp-1, T-E): a wide window near the caches' end starts
 * before the row's column, over columns the caches already hold. Against a reference that
 * decodes the K tokens one a run:
 *   - the caches' columns before the row's column are the same bits after extend (kept, not
 *     recomputed), whatever the window;
 *   - columns Tp-1 .. Tp-2+k[b] hold the reference's keys and values (to rounding; the same bits
 *     in a batch-invariant plan);
 *   - a decode step after extend, at column Tp-1+k[b], gives the reference's logits for it: the
 *     window's junk past the row's tokens (random ids) leaves nothing a later read sees.
 * GPT-2 and the Llama family, with and without left padding (kv->start). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"
#include "testutil.h"

enum { NMAX = 4 };

/* the largest relative error, or 0 only when every float is the same bits */
static double compare(const float *a, const float *b, int64_t n, bool exact) {
    if (exact) return memcmp(a, b, sizeof(float) * (size_t)n) ? dfg_test_max_rel_err(a, b, n, 1e-3) + 1e-30 : 0.0;
    return dfg_test_max_rel_err(a, b, n, 1e-3);
}

typedef struct {
    int N, Tp, K, E, T, V, k[NMAX];
    bool padded;
    int32_t start[NMAX];
} extend_case;

static extend_case draw_case(bool padded) {
    extend_case e = {.N = dfg_test_int(2, NMAX), .Tp = dfg_test_int(3, 6), .K = dfg_test_int(1, 4), .V = dfg_test_int(7, 40),
                     .padded = padded};
    e.T = e.Tp + e.K;
    e.E = e.K + dfg_test_int(0, 2); /* wider than K: the window starts before the row's column */
    for (int b = 0; b < e.N; b++) e.k[b] = dfg_test_int(0, e.K), e.start[b] = padded ? dfg_test_int(0, e.Tp - 2) : 0;
    e.k[0] = 0, e.k[1] = e.K; /* a row with nothing to add, and one with the most */
    return e;
}

/* The program: prefill of both caches; "reference" decodes columns Tp-1 .. Tp-1+K one a run;
 * "extend" writes each row's k[b] tokens; "after" decodes one column, Tp-1+k[b]. */
static dfg_program *build(const extend_case *e, dfg_arch arch, bool invariant, dfg_model **m) {
    dfg_program *p;
    dfg_model_kv ref, ext;
    dfg_model_config cfg = dfg_test_model_config(arch, e->V, e->T + 3);
    dfg_tensor *tok = dfg_test_model_program("kv_extend", cfg, e->N, e->T, &p, m, &ref);
    dfg_model_kv_cache(p, "ext.", *m, e->N, e->T, &ext);
    dfg_tensor *window = dfg_state(p, "window", DFG_I32, DFG_SHAPE(e->N, e->E), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *start = dfg_state(p, "start", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *col = dfg_state(p, "col", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *from = dfg_state(p, "from", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *at = dfg_state(p, "at", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *ref_out = dfg_state(p, "ref_logits", DFG_F32, DFG_SHAPE(e->N, e->T, e->V), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *ext_out = dfg_state(p, "ext_logits", DFG_F32, DFG_SHAPE(e->N, 1, e->V), DFG_ROLE_NONE, dfg_init_zeros());
    if (e->padded) ref.start = ext.start = start;

    dfg_graph *g = dfg_graph_new(p, "prefill");
    dfg_tensor *prompts = dfg_slice(g, tok, 1, 0, e->Tp - 1);
    dfg_model_prefill(g, *m, &ref, prompts);
    dfg_model_prefill(g, *m, &ext, prompts);
    dfg_assign_fill(g, pos, (float)(e->Tp - 1));
    dfg_stage_graph(p, g, 1);

    g = dfg_graph_new(p, "reference"); /* every row one column a run, fed its true token */
    dfg_tensor *t1 = dfg_slice_at(g, tok, 1, pos, 1);
    dfg_slice_assign_at(g, ref_out, dfg_model_lm_head(g, *m, dfg_model_decode(g, *m, &ref, t1, pos)), 1, pos);
    dfg_assign(g, pos, dfg_add_scalar(g, pos, 1.0f));
    dfg_stage_graph(p, g, e->K + 1);

    g = dfg_graph_new(p, "extend");
    dfg_model_extend(g, *m, &ext, window, col, from);
    dfg_stage_graph(p, g, 1);

    g = dfg_graph_new(p, "after");
    dfg_tensor *ta = dfg_slice_at(g, tok, 1, at, 1);
    dfg_assign(g, ext_out, dfg_model_lm_head(g, *m, dfg_model_decode(g, *m, &ext, ta, at)));
    dfg_stage_graph(p, g, 1);
    if (invariant) dfg_declare_batch_invariant(p);
    return p;
}

/* Row b's window: its k[b] tokens at columns Tp-1 .. Tp-2+k[b], what the row holds before them,
 * random ids after; col, from and the column decode reads after */
static void write_inputs(dfg_runtime *rt, const extend_case *e, const int32_t *ids) {
    int32_t window[NMAX * 16], col[NMAX], from[NMAX], at[NMAX];
    for (int b = 0; b < e->N; b++) {
        from[b] = e->Tp - 1, col[b] = from[b] < e->T - e->E ? from[b] : e->T - e->E, at[b] = from[b] + e->k[b];
        for (int i = 0; i < e->E; i++) {
            int c = col[b] + i;
            window[b * e->E + i] = c < from[b] + e->k[b] ? ids[b * e->T + c] : dfg_test_int(0, e->V - 1);
        }
    }
    dfg_runtime_write(rt, "window", window, sizeof(int32_t) * (size_t)(e->N * e->E));
    dfg_runtime_write(rt, "col", col, sizeof(col[0]) * (size_t)e->N);
    dfg_runtime_write(rt, "from", from, sizeof(from[0]) * (size_t)e->N);
    dfg_runtime_write(rt, "at", at, sizeof(at[0]) * (size_t)e->N);
    dfg_runtime_write(rt, "start", e->start, sizeof(e->start[0]) * (size_t)e->N);
}

/* Compares layer l's key or value caches, row by row: the columns before Tp-1 bit for bit, the
 * row's new columns within tol. Returns the largest error of the new columns. */
static double compare_caches(dfg_runtime *rt, const extend_case *e, int l, char kv, bool exact, int64_t W) {
    char a_name[32], b_name[32];
    snprintf(a_name, sizeof(a_name), "kv.%d.%c", l, kv);
    snprintf(b_name, sizeof(b_name), "ext.kv.%d.%c", l, kv);
    int64_t n = (int64_t)e->N * e->T * W;
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    dfg_runtime_read(rt, a_name, a, sizeof(float) * (size_t)n);
    dfg_runtime_read(rt, b_name, b, sizeof(float) * (size_t)n);
    double worst = 0;
    for (int r = 0; r < e->N; r++) {
        const float *ra = a + (int64_t)r * e->T * W, *rb = b + (int64_t)r * e->T * W;
        CHECK(!memcmp(ra, rb, sizeof(float) * (size_t)((e->Tp - 1) * W)),
              "%s row %d: a column before the row's changed (window from %d)", b_name, r,
              e->Tp - 1 < e->T - e->E ? e->Tp - 1 : e->T - e->E);
        double err = compare(ra + (e->Tp - 1) * W, rb + (e->Tp - 1) * W, (int64_t)e->k[r] * W, exact);
        worst = err > worst ? err : worst;
    }
    free(a), free(b);
    return worst;
}

static void check_extend(dfg_arch arch, bool invariant, bool padded) {
    extend_case e = draw_case(padded);
    printf("%s%s%s: N=%d Tp=%d K=%d E=%d, tokens a row", dfg_arch_name(arch), invariant ? " (batch-invariant)" : "",
           padded ? " (left-padded)" : "", e.N, e.Tp, e.K, e.E);
    for (int b = 0; b < e.N; b++) printf(" %d", e.k[b]);
    dfg_model *m = NULL;
    dfg_program *p = build(&e, arch, invariant, &m);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));
    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    o.check = true;
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    dfg_test_write_random_params(rt, m->params, m->n_params);
    int32_t ids[NMAX * 16];
    for (int i = 0; i < e.N * e.T; i++) ids[i] = dfg_test_int(0, e.V - 1);
    dfg_runtime_write(rt, "tok", ids, sizeof(int32_t) * (size_t)(e.N * e.T));
    write_inputs(rt, &e, ids);
    CHECK(dfg_runtime_step(rt) == DFG_OK, "step: %s", dfg_runtime_error(rt));

    int64_t W = (int64_t)(m->cfg.n_kv_head ? m->cfg.n_kv_head : m->cfg.n_head) *
                (m->cfg.head_dim ? m->cfg.head_dim : m->cfg.n_embd / m->cfg.n_head);
    double cache_err = 0, tol = invariant ? 1e-300 : 1e-5;
    for (int l = 0; l < m->cfg.n_layer; l++)
        for (int kv = 0; kv < 2; kv++) {
            double err = compare_caches(rt, &e, l, kv ? 'v' : 'k', invariant, W);
            cache_err = err > cache_err ? err : cache_err;
        }
    float *ref = malloc(sizeof(float) * (size_t)(e.N * e.T * e.V)), *ext = malloc(sizeof(float) * (size_t)(e.N * e.V));
    dfg_runtime_read(rt, "ref_logits", ref, sizeof(float) * (size_t)(e.N * e.T * e.V));
    dfg_runtime_read(rt, "ext_logits", ext, sizeof(float) * (size_t)(e.N * e.V));
    double logit_err = 0;
    for (int b = 0; b < e.N; b++) {
        double err = compare(ext + (int64_t)b * e.V, ref + ((int64_t)b * e.T + e.Tp - 1 + e.k[b]) * e.V, e.V, invariant);
        logit_err = err > logit_err ? err : logit_err;
    }
    printf(": new keys/values %.3g, next logits %.3g against decoding them\n", cache_err, logit_err);
    CHECK(cache_err < tol, "extend's keys and values differ from decode's: %.3g", cache_err);
    CHECK(logit_err < tol, "the decode step after extend differs from decoding every token: %.3g", logit_err);
    free(ref), free(ext), free(m);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* A window that does not fit the caches fails the step with one line naming it. */
static void check_out_of_range(void) {
    extend_case e = draw_case(false);
    dfg_model *m = NULL;
    dfg_program *p = build(&e, DFG_ARCH_GPT2, false, &m);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));
    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    int32_t ids[NMAX * 16] = {0}, col[NMAX];
    dfg_runtime_write(rt, "tok", ids, sizeof(int32_t) * (size_t)(e.N * e.T));
    write_inputs(rt, &e, ids);
    for (int b = 0; b < e.N; b++) col[b] = e.T - e.E + (b == 1); /* row 1's window runs past the end */
    dfg_runtime_write(rt, "col", col, sizeof(col[0]) * (size_t)e.N);
    CHECK(dfg_runtime_step(rt) != DFG_OK, "a window past the caches' end ran");
    printf("a window past the caches' end: %s\n", dfg_runtime_error(rt));
    free(m);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* The shared form (each group's prompt once, each row's own part from column Tp-1 on) against
 * the copied one: G rows a prompt, the same prefill, a decode step at column Tp-1, then row b's
 * k[b] tokens from column Tp-1+u[b] (u 0 or 1: a row that overwrites the decoded column, or
 * keeps it), and a decode step after; both must leave the same keys and values and give the same
 * logits (within 1e-5, the same bits in a batch-invariant plan). The window lies in the own part
 * (E <= its K + 2 columns) and may start before the row's tokens. */
typedef struct {
    extend_case e;
    int P, G, u[NMAX];
} shared_case;

static shared_case draw_shared_case(bool padded) {
    shared_case s = {.e = draw_case(padded), .G = dfg_test_int(2, NMAX)};
    s.P = s.G == 2 ? dfg_test_int(1, NMAX / 2) : 1;
    extend_case *e = &s.e;
    e->N = s.P * s.G, e->T = e->Tp + e->K + 1, e->E = e->K + dfg_test_int(0, 2);
    for (int b = 0; b < e->N; b++)
        e->k[b] = dfg_test_int(0, e->K), e->start[b] = e->start[b - b % s.G], s.u[b] = dfg_test_int(0, 1);
    e->k[0] = 0, e->k[1] = e->K, s.u[1] = 1;
    return s;
}

static dfg_program *build_shared(const shared_case *s, dfg_arch arch, bool invariant, dfg_model **m) {
    const extend_case *e = &s->e;
    dfg_program *p;
    dfg_model_kv copied, shared;
    dfg_model_config cfg = dfg_test_model_config(arch, e->V, e->T + 3);
    dfg_test_model_program("kv_extend_shared", cfg, e->N, e->T, &p, m, &copied);
    dfg_model_kv_cache_shared(p, "sh.", *m, e->N, s->G, e->Tp - 1, e->T - (e->Tp - 1), &shared);
    dfg_tensor *prompts = dfg_state(p, "prompts", DFG_I32, DFG_SHAPE(s->P, e->Tp - 1), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *window = dfg_state(p, "window", DFG_I32, DFG_SHAPE(e->N, e->E), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *next = dfg_state(p, "next", DFG_I32, DFG_SHAPE(e->N, 1), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *start = dfg_state(p, "start", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *col = dfg_state(p, "col", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *from = dfg_state(p, "from", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *at = dfg_state(p, "at", DFG_I32, DFG_SHAPE(e->N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *out[2];
    for (int i = 0; i < 2; i++)
        out[i] = dfg_state(p, i ? "shared_logits" : "copied_logits", DFG_F32, DFG_SHAPE(e->N, 1, e->V), DFG_ROLE_NONE,
                           dfg_init_zeros());
    if (e->padded) copied.start = shared.start = start;
    const char *stages[4] = {"prefill", "decode", "extend", "after"};
    for (int st = 0; st < 4; st++) {
        dfg_graph *g = dfg_graph_new(p, stages[st]);
        if (st == 0) dfg_assign_fill(g, pos, (float)(e->Tp - 1));
        for (int i = 0; i < 2; i++) {
            const dfg_model_kv *kv = i ? &shared : &copied;
            if (st == 0) dfg_model_prefill(g, *m, kv, prompts);
            if (st == 1) dfg_model_decode(g, *m, kv, next, pos); /* column Tp-1, which some windows keep */
            if (st == 2) dfg_model_extend(g, *m, kv, window, col, from);
            if (st == 3) dfg_assign(g, out[i], dfg_model_lm_head(g, *m, dfg_model_decode(g, *m, kv, next, at)));
        }
        dfg_stage_graph(p, g, 1);
    }
    if (invariant) dfg_declare_batch_invariant(p);
    return p;
}

/* Layer l's keys or values: every row of the copied cache against its group's prompt part and
 * its own part. Returns the largest error (0: the same bits). */
static double compare_shared_caches(dfg_runtime *rt, const shared_case *s, int l, char kv, bool exact, int64_t W) {
    const extend_case *e = &s->e;
    int64_t Tp = e->Tp - 1, Tc = e->T - Tp;
    char name[32];
    float *a = malloc(sizeof(float) * (size_t)(e->N * e->T * W)), *pp = malloc(sizeof(float) * (size_t)(s->P * Tp * W)),
          *own = malloc(sizeof(float) * (size_t)(e->N * Tc * W));
    snprintf(name, sizeof(name), "kv.%d.%c", l, kv);
    dfg_runtime_read(rt, name, a, sizeof(float) * (size_t)(e->N * e->T * W));
    snprintf(name, sizeof(name), "sh.kv.%d.%c_prompt", l, kv);
    dfg_runtime_read(rt, name, pp, sizeof(float) * (size_t)(s->P * Tp * W));
    snprintf(name, sizeof(name), "sh.kv.%d.%c", l, kv);
    dfg_runtime_read(rt, name, own, sizeof(float) * (size_t)(e->N * Tc * W));
    double worst = 0;
    for (int r = 0; r < e->N; r++) {
        const float *row = a + (int64_t)r * e->T * W;
        double ep = compare(row, pp + (int64_t)(r / s->G) * Tp * W, Tp * W, exact);
        double eo = compare(row + Tp * W, own + (int64_t)r * Tc * W, Tc * W, exact);
        worst = ep > worst ? ep : worst, worst = eo > worst ? eo : worst;
    }
    free(a), free(pp), free(own);
    return worst;
}

/* The prompts, the decoded token, and each row's window (random ids: both caches take the same)
 * from column Tp-1+u[b] */
static void write_shared_inputs(dfg_runtime *rt, const shared_case *s) {
    const extend_case *e = &s->e;
    int32_t prompts[NMAX * 16], next[NMAX], window[NMAX * 16], col[NMAX], from[NMAX], at[NMAX];
    for (int i = 0; i < s->P * (e->Tp - 1); i++) prompts[i] = dfg_test_int(0, e->V - 1);
    for (int i = 0; i < e->N * e->E; i++) window[i] = dfg_test_int(0, e->V - 1);
    for (int b = 0; b < e->N; b++) {
        next[b] = dfg_test_int(0, e->V - 1), from[b] = e->Tp - 1 + s->u[b], at[b] = from[b] + e->k[b];
        col[b] = from[b] < e->T - e->E ? from[b] : e->T - e->E;
    }
    dfg_runtime_write(rt, "prompts", prompts, sizeof(int32_t) * (size_t)(s->P * (e->Tp - 1)));
    dfg_runtime_write(rt, "next", next, sizeof(int32_t) * (size_t)e->N);
    dfg_runtime_write(rt, "window", window, sizeof(int32_t) * (size_t)(e->N * e->E));
    dfg_runtime_write(rt, "col", col, sizeof(col[0]) * (size_t)e->N);
    dfg_runtime_write(rt, "from", from, sizeof(from[0]) * (size_t)e->N);
    dfg_runtime_write(rt, "at", at, sizeof(at[0]) * (size_t)e->N);
    dfg_runtime_write(rt, "start", e->start, sizeof(e->start[0]) * (size_t)e->N);
}

static void check_shared_extend(dfg_arch arch, bool invariant, bool padded) {
    shared_case s = draw_shared_case(padded);
    extend_case *e = &s.e;
    printf("%s%s%s shared: P=%d G=%d Tp=%d K=%d E=%d, tokens a row (from)", dfg_arch_name(arch),
           invariant ? " (batch-invariant)" : "", padded ? " (left-padded)" : "", s.P, s.G, e->Tp, e->K, e->E);
    for (int b = 0; b < e->N; b++) printf(" %d(%d)", e->k[b], e->Tp - 1 + s.u[b]);
    dfg_model *m = NULL;
    dfg_program *p = build_shared(&s, arch, invariant, &m);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));
    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    o.check = true;
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    dfg_test_write_random_params(rt, m->params, m->n_params);
    write_shared_inputs(rt, &s);
    CHECK(dfg_runtime_step(rt) == DFG_OK, "step: %s", dfg_runtime_error(rt));

    int64_t W = (int64_t)(m->cfg.n_kv_head ? m->cfg.n_kv_head : m->cfg.n_head) *
                (m->cfg.head_dim ? m->cfg.head_dim : m->cfg.n_embd / m->cfg.n_head);
    /* 1e-5 as for extend against decode above: the merge of the prompt's and the row's softmax
     * parts rounds differently from one softmax; 957 draws measured up to 1.3e-6, one 1.9e-6 */
    double cache_err = 0, tol = invariant ? 1e-300 : 1e-5;
    for (int l = 0; l < m->cfg.n_layer; l++)
        for (int kv = 0; kv < 2; kv++) {
            double err = compare_shared_caches(rt, &s, l, kv ? 'v' : 'k', invariant, W);
            cache_err = err > cache_err ? err : cache_err;
        }
    float *a = malloc(sizeof(float) * (size_t)(e->N * e->V)), *b = malloc(sizeof(float) * (size_t)(e->N * e->V));
    dfg_runtime_read(rt, "copied_logits", a, sizeof(float) * (size_t)(e->N * e->V));
    dfg_runtime_read(rt, "shared_logits", b, sizeof(float) * (size_t)(e->N * e->V));
    double logit_err = compare(a, b, (int64_t)e->N * e->V, invariant);
    printf(": caches %.3g, next logits %.3g against the copied cache\n", cache_err, logit_err);
    CHECK(cache_err < tol, "extend on the shared cache left other keys and values: %.3g", cache_err);
    CHECK(logit_err < tol, "the decode step after extend differs with the shared cache: %.3g", logit_err);
    free(a), free(b), free(m);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* A window wider than the shared cache's own part would write the prompt's columns: refused when
 * the graph is built, one line. */
static void check_shared_too_wide(void) {
    dfg_program *p;
    dfg_model *m = NULL;
    dfg_model_kv shared;
    dfg_test_model_program("kv_extend_shared", dfg_test_model_config(DFG_ARCH_GPT2, 9, 12), 4, 8, &p, &m, &shared);
    dfg_model_kv_cache_shared(p, "shared.", m, 4, 2, 3, 5, &shared);
    dfg_tensor *w = dfg_state(p, "window", DFG_I32, DFG_SHAPE(4, 6), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *col = dfg_state(p, "col", DFG_I32, DFG_SHAPE(4), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "extend");
    dfg_model_extend(g, m, &shared, w, col, col);
    const char *err = dfg_program_error(p);
    printf("a window of 6 over a shared cache's 5 own columns: %s\n", err ? err : "(accepted)");
    CHECK(dfg_program_status(p) && err && strstr(err, "own part") && !strchr(err, '\n'),
          "a window wider than the shared cache's own part was not refused in one line");
    free(m);
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_kv_extend");
    for (int a = 0; a < DFG_ARCH_COUNT; a++)
        for (int k = 0; k < 4; k++)
            for (int rep = 0; rep < 2; rep++) check_extend((dfg_arch)a, k & 1, k & 2);
    for (int a = 0; a < DFG_ARCH_COUNT; a++)
        for (int k = 0; k < 4; k++)
            for (int rep = 0; rep < 2; rep++) check_shared_extend((dfg_arch)a, k & 1, k & 2);
    check_out_of_range();
    check_shared_too_wide();
    return dfg_test_finish();
}
