/* test_kv_decode.c - generation with a KV cache computes what the full forward computes: a
 * prefill over the first Tp tokens then one decode step per later position (fed the true next
 * token, read with a run-time slice) gives the same logits, position by position, as
 * dfg_gpt2_logits over the whole sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"
#include "testutil.h"

int main(void) {
    dfg_test_init("test_kv_decode");
    int N = dfg_test_int(1, 3), Tp = dfg_test_int(1, 5), T = Tp + dfg_test_int(2, 6), V = dfg_test_int(7, 40);
    dfg_gpt2_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = V, .block_size = T + 3,
                           .ln_eps = 1e-5f, .dtype = DFG_F32};
    dfg_program *p = dfg_program_new("kv");
    dfg_gpt2 *m = calloc(1, sizeof(*m));
    dfg_gpt2_kv kv;
    dfg_gpt2_params(p, "", cfg, m);
    dfg_gpt2_kv_cache(p, "", m, N, T, &kv);
    dfg_tensor *tok = dfg_state(p, "tok", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_tensor *pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *out = dfg_state(p, "cached", DFG_F32, DFG_SHAPE(N, T, V), DFG_ROLE_NONE, dfg_init_zeros());

    dfg_graph *pre = dfg_graph_new(p, "prefill"); /* logits of positions 0 .. Tp-1, caches rows 0 .. Tp-1 */
    dfg_tensor *h = dfg_gpt2_prefill(pre, m, &kv, dfg_slice(pre, tok, 1, 0, Tp));
    dfg_slice_assign(pre, out, dfg_gpt2_lm_head(pre, m, h), 1, 0);
    dfg_assign_fill(pre, pos, (float)Tp);
    dfg_stage_graph(p, pre, 1);

    dfg_graph *dec = dfg_graph_new(p, "decode"); /* one position per run: Tp .. T-1 */
    dfg_tensor *t1 = dfg_slice_at(dec, tok, 1, pos, 1); /* (N, 1) */
    dfg_tensor *logit = dfg_gpt2_lm_head(dec, m, dfg_gpt2_decode(dec, m, &kv, t1, pos)); /* (N, 1, V) */
    dfg_slice_assign_at(dec, out, logit, 1, pos);
    dfg_assign(dec, pos, dfg_add_scalar(dec, pos, 1.0f));
    dfg_stage_graph(p, dec, T - Tp);

    dfg_graph *full = dfg_graph_new(p, "full");
    dfg_output(full, dfg_gpt2_logits(full, m, tok), "full");
    dfg_stage_graph(p, full, 1);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));

    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    o.check = true; /* the caches are written and read across runs of a stage: a good place to look */
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(N * T));
    float *a = malloc(sizeof(float) * (size_t)(N * T * V)), *b = malloc(sizeof(float) * (size_t)(N * T * V));
    for (int i = 0; i < N * T; i++) ids[i] = dfg_test_int(0, V - 1);
    dfg_runtime_write(rt, "tok", ids, sizeof(int32_t) * (size_t)(N * T));
    CHECK(dfg_runtime_step(rt) == DFG_OK, "step: %s", dfg_runtime_error(rt));
    dfg_runtime_read(rt, "cached", a, sizeof(float) * (size_t)(N * T * V));
    dfg_runtime_read(rt, "full", b, sizeof(float) * (size_t)(N * T * V));
    double err = dfg_test_max_rel_err(a, b, N * T * V, 1e-3);
    printf("N=%d Tp=%d T=%d V=%d: max rel. error of cached vs full logits %.3g\n", N, Tp, T, V, err);
    CHECK(err < 1e-5, "cached decoding differs from the full forward: %.3g", err);
    int32_t end = -1;
    dfg_runtime_read(rt, "pos", &end, sizeof(end));
    CHECK(end == T, "the position counter ends at %d, want %d", end, T);
    free(ids), free(a), free(b), free(m);
    dfg_runtime_free(rt);
    dfg_program_free(p);
    return dfg_test_finish();
}
