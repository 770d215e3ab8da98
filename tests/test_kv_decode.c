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
 * training's. */
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

    /* logits of positions 0 .. Tp-1 (P, Tp, V), copied to each row of a group; caches rows 0 .. Tp-1 */
    dfg_graph *pre = dfg_graph_new(p, "prefill");
    dfg_tensor *prompts = dfg_reshape(pre, dfg_slice(pre, dfg_reshape(pre, tok, DFG_SHAPE(P, G, T)), 1, 0, 1), DFG_SHAPE(P, T));
    prompts = dfg_slice(pre, prompts, 1, 0, Tp); /* (P, Tp): the first row of each group */
    dfg_tensor *lp = dfg_model_lm_head(pre, m, dfg_model_prefill(pre, m, &kv, prompts));
    lp = dfg_reshape(pre, dfg_expand(pre, dfg_reshape(pre, lp, DFG_SHAPE(P, 1, Tp, V)), DFG_SHAPE(P, G, Tp, V)),
                     DFG_SHAPE(N, Tp, V));
    dfg_slice_assign(pre, out, lp, 1, 0);
    dfg_assign_fill(pre, pos, (float)Tp);
    dfg_stage_graph(p, pre, 1);

    dfg_graph *dec = dfg_graph_new(p, "decode"); /* one position per run: Tp .. T-1 */
    dfg_tensor *t1 = dfg_slice_at(dec, tok, 1, pos, 1); /* (N, 1) */
    dfg_tensor *logit = dfg_model_lm_head(dec, m, dfg_model_decode(dec, m, &kv, t1, pos)); /* (N, 1, V) */
    dfg_slice_assign_at(dec, out, logit, 1, pos);
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

int main(void) {
    dfg_test_init("test_kv_decode");
    for (int a = 0; a < DFG_ARCH_COUNT; a++) check_arch((dfg_arch)a, false);
    for (int a = 0; a < DFG_ARCH_COUNT; a++) check_arch((dfg_arch)a, true);
    return dfg_test_finish();
}
