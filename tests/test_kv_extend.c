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

/* The caches that hold each group's prompt once are refused when the graph is built, one line. */
static void check_shared_refused(void) {
    dfg_program *p;
    dfg_model *m = NULL;
    dfg_model_kv shared;
    dfg_test_model_program("kv_extend_shared", dfg_test_model_config(DFG_ARCH_GPT2, 9, 12), 4, 8, &p, &m, &shared);
    dfg_model_kv_cache_shared(p, "shared.", m, 4, 2, 3, 5, &shared);
    dfg_tensor *w = dfg_state(p, "window", DFG_I32, DFG_SHAPE(4, 2), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *col = dfg_state(p, "col", DFG_I32, DFG_SHAPE(4), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "extend");
    dfg_model_extend(g, m, &shared, w, col, col);
    const char *err = dfg_program_error(p);
    printf("a shared-prompt cache: %s\n", err ? err : "(accepted)");
    CHECK(dfg_program_status(p) && err && strstr(err, "dfg_model_kv_cache_shared") && !strchr(err, '\n'),
          "extend over a shared-prompt cache was not refused in one line");
    free(m);
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_kv_extend");
    for (int a = 0; a < DFG_ARCH_COUNT; a++)
        for (int k = 0; k < 4; k++)
            for (int rep = 0; rep < 2; rep++) check_extend((dfg_arch)a, k & 1, k & 2);
    check_out_of_range();
    check_shared_refused();
    return dfg_test_finish();
}
