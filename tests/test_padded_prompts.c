/* test_padded_prompts.c - prompts of different lengths, left-padded to one length, score exactly as
 * each prompt alone, unpadded (ops/nn: dfg_model_hidden_padded, dfg_model_hidden_grouped with a
 * start, the KV-cache forms with dfg_model_kv.start; positions from dfg_nn_positions_from).
 *
 * For every architecture (GPT-2; Llama, Qwen2 and Qwen3 with random grouped-query heads, head_dim,
 * rope_theta, biases, tied or untied heads), random weights, P prompts of random lengths 1 .. Lp
 * (one of them Lp long: start 0; one 1 long: start Lp-1) left-padded to Lp with random pad ids,
 * G completions of Tc tokens each (N = P*G rows): the per-token log-probs of the completion tokens
 * at temperature 0.7 must equal, within 1e-5, those of each row run alone (its real prompt tokens,
 * then its completion, at columns 0 ..) through dfg_grpo_token_logp without a start, when computed
 *   (a) by dfg_grpo_token_logp of the padded rows with start (N);
 *   (b) by dfg_grpo_completion_logp (each prompt once, its G completions over it) with start (P);
 *   (c) by a prefill of the padded prompts into KV caches with kv.start, then one decode step per
 *       completion position (fed the true token): the log-softmax of their logits.
 * Then the pads' ids are drawn again and everything runs again: (a), (b) and (c) must not change
 * by one bit (a real token never reads a pad). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_nn.h"
#include "golden/padded_stages.h"
#include "testutil.h"

static const float TEMP = 0.7f;

typedef struct {
    int P, G, N, Lp, Tc, T, V;
    int *len;       /* (P) real prompt lengths */
    int32_t *start; /* (N) the rows' first real columns: Lp - len of their prompt */
} shape;

/* log softmax(logits / TEMP)[id] in double */
static double logp_of(const float *logits, int V, int id) {
    double m = -INFINITY, s = 0.0;
    for (int v = 0; v < V; v++) m = fmax(m, logits[v] / TEMP);
    for (int v = 0; v < V; v++) s += exp(logits[v] / TEMP - m);
    return logits[id] / TEMP - m - log(s);
}

static void check_arch(dfg_arch arch) {
    shape s = {.P = dfg_test_int(2, 4), .G = dfg_test_int(1, 3), .Lp = dfg_test_int(2, 9), .Tc = dfg_test_int(2, 5),
               .V = dfg_test_int(7, 40)};
    s.N = s.P * s.G, s.T = s.Lp + s.Tc;
    s.len = malloc(sizeof(int) * (size_t)s.P);
    s.start = malloc(sizeof(int32_t) * (size_t)s.N);
    for (int p = 0; p < s.P; p++) s.len[p] = p == 0 ? s.Lp : p == 1 ? 1 : dfg_test_int(1, s.Lp);
    for (int p = s.P - 1; p > 0; p--) { /* shuffled: no prompt index is special */
        int k = dfg_test_int(0, p), t = s.len[p];
        s.len[p] = s.len[k], s.len[k] = t;
    }
    for (int r = 0; r < s.N; r++) s.start[r] = s.Lp - s.len[r / s.G];
    int P = s.P, G = s.G, N = s.N, Lp = s.Lp, Tc = s.Tc, T = s.T, V = s.V;

    dfg_model_config cfg = dfg_test_model_config(arch, V, T + 3);
    printf("%s: H=%d Hkv=%d D=%d; P=%d G=%d, prompts of", dfg_arch_name(arch), cfg.n_head,
           cfg.n_kv_head ? cfg.n_kv_head : cfg.n_head, cfg.head_dim ? cfg.head_dim : cfg.n_embd / cfg.n_head, P, G);
    for (int p = 0; p < P; p++) printf(" %d", s.len[p]);
    printf(" left-padded to %d, %d completion tokens, V=%d\n", Lp, Tc, V);

    dfg_program *p;
    dfg_model *m;
    dfg_model_kv kv;
    dfg_tensor *tok = dfg_test_model_program("padded", cfg, N, T, &p, &m, &kv);
    dfg_tensor *start = dfg_state(p, "start", DFG_I32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_tensor *pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *j = dfg_state(p, "j", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *cached = dfg_state(p, "cached", DFG_F32, DFG_SHAPE(N, Tc, V), DFG_ROLE_NONE, dfg_init_zeros());
    kv.start = start;

    /* (a), (b) and the reference: each row's real tokens alone, unpadded */
    const padded_dims d = {.P = P, .G = G, .N = N, .T = T, .Lp = Lp, .Tc = Tc, .V = V};
    dfg_graph *g = dfg_graph_new(p, "score");
    padded_scores(g, m, tok, start, d, TEMP, "a", "b"); /* (N, Tc): column t predicts t+1 */
    dfg_tensor **ref = malloc(sizeof(*ref) * (size_t)N);
    for (int r = 0; r < N; r++) { /* columns start .. T-1 of row r: its prompt's len tokens, then its completion */
        int st = s.start[r], L = s.len[r / G];
        dfg_tensor *row = dfg_slice(g, dfg_slice(g, tok, 0, r, 1), 1, st, T - st); /* (1, L + Tc) */
        ref[r] = dfg_slice(g, dfg_grpo_token_logp(g, m, row, TEMP, NULL), 1, L - 1, Tc);
    }
    dfg_output(g, dfg_concat(g, ref, N, 0), "ref");
    dfg_stage_graph(p, g, 1);

    /* (c) prefill of the padded prompts (each into its G cache rows), then Tc - 1 decode steps */
    padded_prefill_decode(p, m, &kv, tok, cached, pos, j, d);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));

    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    o.check = true;
    o.n_threads = 2;
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    dfg_test_write_random_params(rt, m->params, m->n_params);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(N * T));
    for (int r = 0; r < N; r++)
        for (int t = 0; t < T; t++) /* a group's rows share their prompt; pads anything */
            ids[r * T + t] = r % G && t < Lp ? ids[(r - 1) * T + t] : dfg_test_int(0, V - 1);
    size_t nout = (size_t)N * Tc;
    float *out[2][3], *rf = malloc(sizeof(float) * nout), *cl = malloc(sizeof(float) * nout * V);
    double worst[3] = {0, 0, 0};
    bool ran = rt != NULL;
    for (int run = 0; run < 2 && ran; run++) {
        if (run) /* new pad ids: nothing may change */
            for (int r = 0; r < N; r++)
                for (int t = 0; t < s.start[r]; t++)
                    ids[r * T + t] = r % G ? ids[(r - 1) * T + t] : (ids[r * T + t] + dfg_test_int(1, V - 1)) % V;
        dfg_runtime_write(rt, "tok", ids, sizeof(int32_t) * (size_t)(N * T));
        dfg_runtime_write(rt, "start", s.start, sizeof(int32_t) * (size_t)N);
        ran = dfg_runtime_step(rt) == DFG_OK;
        CHECK(ran, "step: %s", dfg_runtime_error(rt));
        for (int k = 0; k < 3; k++) out[run][k] = malloc(sizeof(float) * nout);
        if (!ran) break;
        dfg_runtime_read(rt, "a", out[run][0], sizeof(float) * nout);
        dfg_runtime_read(rt, "b", out[run][1], sizeof(float) * nout);
        dfg_runtime_read(rt, "ref", rf, sizeof(float) * nout);
        dfg_runtime_read(rt, "cached", cl, sizeof(float) * nout * V);
        for (int r = 0; r < N; r++)
            for (int k = 0; k < Tc; k++)
                out[run][2][r * Tc + k] = (float)logp_of(cl + ((size_t)r * Tc + k) * V, V, ids[r * T + Lp + k]);
        for (int k = 0; k < 3; k++)
            for (size_t e = 0; e < nout; e++) {
                double d = fabs((double)out[run][k][e] - rf[e]) / (1.0 + fabs(rf[e]));
                worst[k] = isnan(d) ? INFINITY : fmax(worst[k], d);
            }
    }
    if (ran) {
        static const char *what[3] = {"dfg_grpo_token_logp with start", "dfg_grpo_completion_logp with start",
                                      "prefill + decode with kv.start"};
        int changed = 0;
        for (int k = 0; k < 3; k++) {
            CHECK(worst[k] <= 1e-5, "%s: %s vs each prompt alone, unpadded: %.3g", dfg_arch_name(arch), what[k],
                  worst[k]);
            int c = 0;
            for (size_t e = 0; e < nout; e++) c += out[0][k][e] != out[1][k][e];
            CHECK(c == 0, "%s: %s: %d of %zu log-probs changed with the pad ids", dfg_arch_name(arch), what[k], c, nout);
            changed += c;
        }
        printf("  worst vs each prompt alone: (a) token_logp %.2g, (b) completion_logp %.2g, (c) prefill+decode %.2g; "
               "other pad ids: %d of %zu log-probs changed\n",
               worst[0], worst[1], worst[2], changed, 3 * nout);
    }
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3 && ran; k++) free(out[run][k]);
    free(ids), free(rf), free(cl), free(ref), free(m), free(s.len), free(s.start);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* dfg_nn_positions_from: max(col0 + t - start[b], 0), and _at with a run-time column */
static void check_positions(void) {
    dfg_program *p = dfg_program_new("positions");
    dfg_graph *g = dfg_graph_new(p, "g");
    int32_t st[4] = {0, 3, 7, 5}, col = 6;
    dfg_tensor *start = dfg_const(p, "start", DFG_I32, DFG_SHAPE(4), st);
    dfg_output(g, dfg_nn_positions_from(g, start, 2, 5), "from");
    dfg_output(g, dfg_nn_positions_at(g, start, dfg_const(p, "col", DFG_I32, DFG_SCALAR, &col)), "at");
    dfg_stage_graph(p, g, 1);
    dfg_runtime *rt = NULL;
    int32_t from[20], at[4];
    bool ok = !dfg_program_status(p) && dfg_runtime_create(p, NULL, &rt) == DFG_OK && dfg_runtime_step(rt) == DFG_OK &&
              !dfg_runtime_read(rt, "from", from, sizeof(from)) && !dfg_runtime_read(rt, "at", at, sizeof(at));
    CHECK(ok, "positions: %s %s", dfg_program_error(p), rt ? dfg_runtime_error(rt) : "");
    int bad = 0;
    for (int b = 0; b < 4 && ok; b++) {
        for (int t = 0; t < 5; t++) bad += from[b * 5 + t] != (2 + t - st[b] > 0 ? 2 + t - st[b] : 0);
        bad += at[b] != (col - st[b] > 0 ? col - st[b] : 0);
    }
    CHECK(ok && bad == 0, "dfg_nn_positions_from / _at: %d wrong positions", bad);
    printf("positions from starts 0 3 7 5 at columns 2 .. 6: %s\n", ok && !bad ? "max(column - start, 0)" : "WRONG");
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_padded_prompts");
    check_positions();
    for (int a = 0; a < DFG_ARCH_COUNT; a++) check_arch((dfg_arch)a);
    return dfg_test_finish();
}
