/* test_kv_decode.c - generation with a KV cache computes what the full forward computes: a
 * prefill over the first Tp tokens then one decode step per later position (fed the true next
 * token, read with a run-time slice) gives the same logits, position by position, as
 * dfg_model_logits over the whole sequence. The N = P*G sequences come in groups of G that share
 * their first Tp tokens (GRPO's completions of one prompt): the prefill computes each prompt once
 * and fills its G rows of the caches, and dfg_model_hidden_grouped (the prompt once, the
 * completions over it) must give the full forward's logits at the positions that predict the
 * completion tokens. G = 1 is the ungrouped case. Every architecture is checked: GPT-2 and the
 * Llama family with random grouped-query heads, head_dim and rope_theta (its caches hold the
 * key/value heads only). In a batch-invariant plan (dfg_declare_batch_invariant) the three
 * forms must give the same logits bit for bit: what makes decode's sampling log-probs equal to
 * training's.
 *
 * One column a row (pos (N), what a multi-turn rollout's rows need): decoding with pos (N) all
 * equal gives the scalar pos's logits bit for bit; and rows whose prompts end at different columns
 * (prefilled together, the columns past a row's prompt holding other tokens that its decode steps
 * must overwrite before reading), each decoding from its own column, give each row the logits of
 * that row decoded alone (its own caches, its prompt prefilled at its length, a scalar pos), with
 * and without left padding (kv->start). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"
#include "testutil.h"

/* the largest relative error, or 0 only when every float is the same bits */
static double compare(const float *a, const float *b, int64_t n, bool invariant) {
    if (invariant) return memcmp(a, b, sizeof(float) * (size_t)n) ? dfg_test_max_rel_err(a, b, n, 1e-3) + 1e-30 : 0.0;
    return dfg_test_max_rel_err(a, b, n, 1e-3);
}

static void check_arch(dfg_arch arch, bool invariant) {
    int P = dfg_test_int(1, 3), G = dfg_test_int(1, 3), N = P * G, Tp = dfg_test_int(1, 5), T = Tp + dfg_test_int(2, 6),
        V = dfg_test_int(7, 40);
    dfg_model_config cfg = dfg_test_model_config(arch, V, T + 3);
    printf("%s%s: H=%d Hkv=%d D=%d: ", dfg_arch_name(arch), invariant ? " (batch-invariant)" : "", cfg.n_head, cfg.n_kv_head ? cfg.n_kv_head : cfg.n_head,
           cfg.head_dim ? cfg.head_dim : cfg.n_embd / cfg.n_head);
    dfg_program *p;
    dfg_model *m;
    dfg_model_kv kv;
    dfg_tensor *tok = dfg_test_model_program("kv", cfg, N, T, &p, &m, &kv);
    dfg_tensor *pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *out = dfg_state(p, "cached", DFG_F32, DFG_SHAPE(N, T, V), DFG_ROLE_NONE, dfg_init_zeros());

    dfg_tensor *grouped = dfg_state(p, "grouped", DFG_F32, DFG_SHAPE(N, T - Tp, V), DFG_ROLE_NONE, dfg_init_zeros());
    /* a second set of caches decoded with pos (N), every row at the scalar pos */
    dfg_model_kv kv_rows;
    dfg_model_kv_cache(p, "rows.", m, N, T, &kv_rows);
    dfg_tensor *out_rows = dfg_state(p, "cached_rows", DFG_F32, DFG_SHAPE(N, T, V), DFG_ROLE_NONE, dfg_init_zeros());

    /* logits of positions 0 .. Tp-1 (P, Tp, V), copied to each row of a group; caches rows 0 .. Tp-1 */
    dfg_graph *pre = dfg_graph_new(p, "prefill");
    dfg_tensor *prompts = dfg_reshape(pre, dfg_slice(pre, dfg_reshape(pre, tok, DFG_SHAPE(P, G, T)), 1, 0, 1), DFG_SHAPE(P, T));
    prompts = dfg_slice(pre, prompts, 1, 0, Tp); /* (P, Tp): the first row of each group */
    dfg_tensor *lp = dfg_model_lm_head(pre, m, dfg_model_prefill(pre, m, &kv, prompts));
    lp = dfg_reshape(pre, dfg_expand(pre, dfg_reshape(pre, lp, DFG_SHAPE(P, 1, Tp, V)), DFG_SHAPE(P, G, Tp, V)),
                     DFG_SHAPE(N, Tp, V));
    dfg_slice_assign(pre, out, lp, 1, 0);
    dfg_model_prefill(pre, m, &kv_rows, prompts); /* its caches only */
    dfg_assign_fill(pre, pos, (float)Tp);
    dfg_stage_graph(p, pre, 1);

    dfg_graph *dec = dfg_graph_new(p, "decode"); /* one position per run: Tp .. T-1 */
    dfg_tensor *t1 = dfg_slice_at(dec, tok, 1, pos, 1); /* (N, 1) */
    dfg_tensor *logit = dfg_model_lm_head(dec, m, dfg_model_decode(dec, m, &kv, t1, pos)); /* (N, 1, V) */
    dfg_slice_assign_at(dec, out, logit, 1, pos);
    dfg_tensor *pos_n = dfg_expand(dec, dfg_reshape(dec, pos, DFG_SHAPE(1)), DFG_SHAPE(N)); /* (N), all pos */
    dfg_slice_assign_at(dec, out_rows, dfg_model_lm_head(dec, m, dfg_model_decode(dec, m, &kv_rows, t1, pos_n)), 1, pos);
    dfg_assign(dec, pos, dfg_add_scalar(dec, pos, 1.0f));
    dfg_stage_graph(p, dec, T - Tp);

    dfg_graph *full = dfg_graph_new(p, "full");
    dfg_output(full, dfg_model_logits(full, m, tok), "full");
    dfg_tensor *pr = dfg_reshape(full, dfg_slice(full, dfg_reshape(full, tok, DFG_SHAPE(P, G, T)), 1, 0, 1), DFG_SHAPE(P, T));
    dfg_tensor *hg =
        dfg_model_hidden_grouped(full, m, dfg_slice(full, pr, 1, 0, Tp), dfg_slice(full, tok, 1, Tp, T - Tp), NULL);
    dfg_assign(full, grouped, dfg_model_lm_head(full, m, hg)); /* (N, T-Tp, V): positions Tp-1 .. T-2 */
    dfg_stage_graph(p, full, 1);
    if (invariant) dfg_declare_batch_invariant(p);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));

    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    o.check = true; /* the caches are written and read across runs of a stage: a good place to look */
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    dfg_test_write_random_params(rt, m->params, m->n_params);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(N * T));
    float *a = malloc(sizeof(float) * (size_t)(N * T * V)), *b = malloc(sizeof(float) * (size_t)(N * T * V));
    for (int i = 0; i < N * T; i++) /* a group's rows share their first Tp tokens */
        ids[i] = i / T % G && i % T < Tp ? ids[i - T] : dfg_test_int(0, V - 1);
    dfg_runtime_write(rt, "tok", ids, sizeof(int32_t) * (size_t)(N * T));
    CHECK(dfg_runtime_step(rt) == DFG_OK, "step: %s", dfg_runtime_error(rt));
    dfg_runtime_read(rt, "cached", a, sizeof(float) * (size_t)(N * T * V));
    dfg_runtime_read(rt, "full", b, sizeof(float) * (size_t)(N * T * V));
    double err = compare(a, b, N * T * V, invariant), tol = invariant ? 1e-300 : 1e-5; /* invariant: 0 */
    printf("P=%d G=%d Tp=%d T=%d V=%d: max rel. error of cached vs full logits %.3g\n", P, G, Tp, T, V, err);
    CHECK(err < tol, "cached decoding differs from the full forward: %.3g", err);
    float *rows = malloc(sizeof(float) * (size_t)(N * T * V));
    dfg_runtime_read(rt, "cached_rows", rows, sizeof(float) * (size_t)(N * T * V));
    int differ = -1;
    for (int r = 0; r < N && differ < 0; r++) /* positions Tp .. T-1: the decode steps' */
        if (memcmp(rows + ((int64_t)r * T + Tp) * V, a + ((int64_t)r * T + Tp) * V, sizeof(float) * (size_t)((T - Tp) * V)))
            differ = r;
    printf("pos (N) all equal: the scalar pos's logits bit for bit: %s\n", differ < 0 ? "yes" : "no");
    CHECK(differ < 0, "decoding with pos (N) all equal differs from the scalar pos in row %d", differ);
    free(rows);
    int64_t W = (int64_t)(T - Tp) * V; /* per row: the full logits at positions Tp-1 .. T-2 */
    float *c = malloc(sizeof(float) * (size_t)(N * W));
    dfg_runtime_read(rt, "grouped", c, sizeof(float) * (size_t)(N * W));
    double gerr = 0;
    for (int r = 0; r < N; r++) {
        double e = compare(c + r * W, b + ((int64_t)r * T + Tp - 1) * V, W, invariant);
        gerr = e > gerr ? e : gerr;
    }
    printf("max rel. error of the grouped forward vs full logits %.3g\n", gerr);
    CHECK(gerr < tol, "dfg_model_hidden_grouped differs from the full forward: %.3g", gerr);
    free(c);
    int32_t end = -1;
    dfg_runtime_read(rt, "pos", &end, sizeof(end));
    CHECK(end == T, "the position counter ends at %d, want %d", end, T);
    free(ids), free(a), free(b), free(m);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* Rows at different columns: N rows whose prompts end at columns Tp[b] (left-padded from start[b]
 * when padded) decode K steps each from its own column with pos (N), against each row decoded
 * alone with a scalar pos. The batch prefill covers every row to the longest prompt, from tokens
 * that differ from the row's own past its prompt: its decode steps overwrite those cache rows
 * before they read them. */
static void check_rows(dfg_arch arch, bool invariant, bool padded) {
    enum { NMAX = 4 };
    int N = dfg_test_int(2, NMAX), K = dfg_test_int(2, 4), V = dfg_test_int(7, 40), Tp[NMAX], Tpmax = 0;
    int32_t st[NMAX], at[NMAX];
    for (int b = 0; b < N; b++) {
        Tp[b] = dfg_test_int(1, 6), Tpmax = Tp[b] > Tpmax ? Tp[b] : Tpmax;
        st[b] = padded ? dfg_test_int(0, Tp[b] - 1) : 0, at[b] = Tp[b];
    }
    if (Tp[0] == Tp[1]) /* at least two columns differ */
        Tp[1] = Tp[0] == 6 ? 5 : Tp[0] + 1, at[1] = Tp[1], st[1] = st[1] < Tp[1] ? st[1] : Tp[1] - 1,
        Tpmax = Tp[1] > Tpmax ? Tp[1] : Tpmax;
    int T = Tpmax + K;
    dfg_model_config cfg = dfg_test_model_config(arch, V, T + 3);
    printf("%s%s%s: rows at columns", dfg_arch_name(arch), invariant ? " (batch-invariant)" : "",
           padded ? " (left-padded)" : "");
    for (int b = 0; b < N; b++) printf(" %d", Tp[b]);
    dfg_program *p;
    dfg_model *m;
    dfg_model_kv kv;
    dfg_tensor *tok = dfg_test_model_program("kv_rows", cfg, N, T, &p, &m, &kv);
    dfg_tensor *pre_tok = dfg_state(p, "pre_tok", DFG_I32, DFG_SHAPE(N, Tpmax), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *start = dfg_state(p, "start", DFG_I32, DFG_SHAPE(N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *pos = dfg_state(p, "pos", DFG_I32, DFG_SHAPE(N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *step = dfg_state(p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *out = dfg_state(p, "rows", DFG_F32, DFG_SHAPE(N, K, V), DFG_ROLE_NONE, dfg_init_zeros());
    if (padded) kv.start = start;

    dfg_graph *pre = dfg_graph_new(p, "prefill");
    dfg_model_prefill(pre, m, &kv, pre_tok);
    dfg_stage_graph(p, pre, 1);
    dfg_graph *dec = dfg_graph_new(p, "decode"); /* K runs: row b at columns Tp[b] .. Tp[b]+K-1 */
    dfg_tensor *t1 = dfg_slice_at(dec, tok, 1, pos, 1); /* (N, 1): each row's token at its column */
    dfg_slice_assign_at(dec, out, dfg_model_lm_head(dec, m, dfg_model_decode(dec, m, &kv, t1, pos)), 1, step);
    dfg_assign(dec, pos, dfg_add_scalar(dec, pos, 1.0f));
    dfg_assign(dec, step, dfg_add_scalar(dec, step, 1.0f));
    dfg_stage_graph(p, dec, K);

    for (int b = 0; b < N; b++) { /* row b alone: its caches, its prompt prefilled at its length */
        char name[64];
        dfg_model_kv kb;
        snprintf(name, sizeof(name), "alone%d.", b);
        dfg_model_kv_cache(p, name, m, 1, T, &kb);
        snprintf(name, sizeof(name), "alone%d.start", b);
        dfg_tensor *sb = dfg_state(p, name, DFG_I32, DFG_SHAPE(1), DFG_ROLE_NONE, dfg_init_constant((float)st[b]));
        snprintf(name, sizeof(name), "alone%d.pos", b);
        dfg_tensor *pb = dfg_state(p, name, DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_constant((float)Tp[b]));
        snprintf(name, sizeof(name), "alone%d.step", b);
        dfg_tensor *kb_step = dfg_state(p, name, DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
        snprintf(name, sizeof(name), "alone%d.rows", b);
        dfg_tensor *ob = dfg_state(p, name, DFG_F32, DFG_SHAPE(1, K, V), DFG_ROLE_NONE, dfg_init_zeros());
        if (padded) kb.start = sb;
        snprintf(name, sizeof(name), "prefill alone %d", b);
        dfg_graph *pg = dfg_graph_new(p, name);
        dfg_tensor *row = dfg_slice(pg, tok, 0, b, 1); /* (1, T) */
        dfg_model_prefill(pg, m, &kb, dfg_slice(pg, row, 1, 0, Tp[b]));
        dfg_stage_graph(p, pg, 1);
        snprintf(name, sizeof(name), "decode alone %d", b);
        dfg_graph *dg = dfg_graph_new(p, name);
        dfg_tensor *tb = dfg_slice_at(dg, dfg_slice(dg, tok, 0, b, 1), 1, pb, 1);
        dfg_slice_assign_at(dg, ob, dfg_model_lm_head(dg, m, dfg_model_decode(dg, m, &kb, tb, pb)), 1, kb_step);
        dfg_assign(dg, pb, dfg_add_scalar(dg, pb, 1.0f));
        dfg_assign(dg, kb_step, dfg_add_scalar(dg, kb_step, 1.0f));
        dfg_stage_graph(p, dg, K);
    }
    if (invariant) dfg_declare_batch_invariant(p);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));

    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    o.check = true;
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    dfg_test_write_random_params(rt, m->params, m->n_params);
    int32_t ids[NMAX * 16], pre_ids[NMAX * 16];
    for (int i = 0; i < N * T; i++) ids[i] = dfg_test_int(0, V - 1);
    for (int b = 0; b < N; b++) /* past a row's prompt: other tokens than its own */
        for (int t = 0; t < Tpmax; t++)
            pre_ids[b * Tpmax + t] = t < Tp[b] ? ids[b * T + t] : (ids[b * T + t] + 1 + dfg_test_int(0, V - 2)) % V;
    dfg_runtime_write(rt, "tok", ids, sizeof(int32_t) * (size_t)(N * T));
    dfg_runtime_write(rt, "pre_tok", pre_ids, sizeof(int32_t) * (size_t)(N * Tpmax));
    dfg_runtime_write(rt, "start", st, sizeof(int32_t) * (size_t)N);
    dfg_runtime_write(rt, "pos", at, sizeof(int32_t) * (size_t)N);
    CHECK(dfg_runtime_step(rt) == DFG_OK, "step: %s", dfg_runtime_error(rt));
    float *a = malloc(sizeof(float) * (size_t)(N * K * V)), *alone = malloc(sizeof(float) * (size_t)(K * V));
    dfg_runtime_read(rt, "rows", a, sizeof(float) * (size_t)(N * K * V));
    double worst = 0;
    for (int b = 0; b < N; b++) {
        char name[64];
        snprintf(name, sizeof(name), "alone%d.rows", b);
        dfg_runtime_read(rt, name, alone, sizeof(float) * (size_t)(K * V));
        double e = compare(a + (int64_t)b * K * V, alone, (int64_t)K * V, invariant);
        worst = e > worst ? e : worst;
    }
    printf(", %d steps: max rel. error against each row decoded alone %.3g\n", K, worst);
    CHECK(worst < (invariant ? 1e-300 : 1e-5), "a row decoded at its own column differs from the row alone: %.3g",
          worst);
    int32_t end[NMAX];
    dfg_runtime_read(rt, "pos", end, sizeof(int32_t) * (size_t)N);
    for (int b = 0; b < N; b++) CHECK(end[b] == Tp[b] + K, "row %d's column ends at %d, want %d", b, end[b], Tp[b] + K);
    free(a), free(alone), free(m);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_kv_decode");
    for (int a = 0; a < DFG_ARCH_COUNT; a++) check_arch((dfg_arch)a, false);
    for (int a = 0; a < DFG_ARCH_COUNT; a++) check_arch((dfg_arch)a, true);
    for (int a = 0; a < DFG_ARCH_COUNT; a++)
        for (int k = 0; k < 4; k++) check_rows((dfg_arch)a, k & 1, k & 2);
    return dfg_test_finish();
}
