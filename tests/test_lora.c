/* test_lora.c - the LoRA model builder (ops/nn/nn_lora.c, ops/nn/nn_model.c) and the backward of
 * 4-bit linears (ops/nn/autodiff.c), on built graphs:
 *   - PEFT's target rule: exact paths, "." + name suffixes (GPT-2's c_proj is two linears), a
 *     partial name that is no suffix, all-linear, each architecture's defaults; a name that
 *     matches nothing is refused naming it;
 *   - the tensors: the base as STATEs of role base_model under Hugging Face's names, two adapters
 *     per targeted linear as the model's params with PEFT's shapes (A (r, in), B (out, r)) and
 *     initialisation (A within 1/sqrt(in), drawn from more than one value; B zeros), scale
 *     alpha / r and alpha / sqrt(r) with rslora; dfg_model_adapter_off leaves no adapter;
 *   - the settings: ranges, lora_dropout, bnb_4bit_quant_type and load_in_4bit without a rank
 *     are refused naming the setting;
 *   - QLoRA: every linear of the blocks is NF4 (no dense weight of that name), the forward reads
 *     each dequantised weight once, and the backward dequantises its own copies after the
 *     gradient that needs them: no forward dequantisation is read by a backward node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "graph/ir.h"
#include "ops/op.h"
#include "testutil.h"

static dfg_model_config small(dfg_arch arch) {
    dfg_model_config c = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 17, .block_size = 16, .ln_eps = 1e-5f,
                          .dtype = DFG_F32, .arch = arch, .n_kv_head = 2, .head_dim = 8, .n_inner = 48,
                          .rope_theta = 10000.0f};
    return dfg_model_config_resolve(c);
}

static dfg_lora_config lora(int r, float alpha, const char *targets) {
    dfg_lora_config l = {.r = r, .alpha = alpha};
    snprintf(l.targets, sizeof(l.targets), "%s", targets);
    return l;
}

/* The adapted linears' paths of a model built with cfg, in a program of its own. */
static int adapted(dfg_model_config cfg, char names[][96], int most, dfg_status *st) {
    dfg_program *p = dfg_program_new("lora");
    dfg_model *m = calloc(1, sizeof(*m));
    *st = dfg_model_params(p, "", cfg, m);
    int n = 0;
    for (int i = 0; !*st && i < m->n_params && n < most; i += 2) {
        const char *a = dfg_tensor_name(m->params[i]);
        snprintf(names[n++], 96, "%.*s", (int)(strstr(a, ".lora_A.weight") - a), a);
    }
    free(m);
    dfg_program_free(p);
    return n;
}

static bool listed(char names[][96], int n, const char *want) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return true;
    return false;
}

static void test_targets(void) {
    char names[64][96];
    dfg_status st;
    dfg_model_config c = small(DFG_ARCH_QWEN2);
    c.lora = lora(4, 8, "");
    c.lora.targets[0] = 0;
    snprintf(c.lora.targets, sizeof(c.lora.targets), "q_proj,v_proj");
    int n = adapted(c, names, 64, &st);
    CHECK(!st && n == 4 && listed(names, n, "model.layers.0.self_attn.q_proj") && listed(names, n, "model.layers.1.self_attn.v_proj"),
          "q_proj,v_proj: %d adapters (status %d)", n, (int)st);
    c.lora = lora(4, 8, "all-linear");
    n = adapted(c, names, 64, &st);
    CHECK(!st && n == 14 && listed(names, n, "model.layers.1.mlp.down_proj"), "all-linear on the Llama family: %d", n);
    c.lora = lora(4, 8, " self_attn.o_proj , layers.1.mlp.up_proj");
    n = adapted(c, names, 64, &st);
    CHECK(!st && n == 3 && listed(names, n, "model.layers.1.mlp.up_proj") && !listed(names, n, "model.layers.0.mlp.up_proj"),
          "suffixes with dots and spaces: %d", n);
    c.lora = lora(4, 8, "proj");
    n = adapted(c, names, 64, &st);
    CHECK(st == DFG_ERR_ARG, "'proj' is part of names but no '.'-suffix: refused (status %d, %d adapters)", (int)st, n);
    c = small(DFG_ARCH_GPT2);
    c.lora = lora(4, 8, "c_proj");
    n = adapted(c, names, 64, &st);
    CHECK(!st && n == 4 && listed(names, n, "h.0.attn.c_proj") && listed(names, n, "h.1.mlp.c_proj"),
          "GPT-2's c_proj: the attention's and the MLP's (%d)", n);
    c.lora = lora(4, 8, "all-linear");
    n = adapted(c, names, 64, &st);
    CHECK(!st && n == 8, "all-linear on GPT-2: c_attn, c_proj, c_fc, c_proj per layer (%d)", n);

    /* the refusal names the architecture's linears, as its table (ops/nn/arch.def) has them */
    static const struct {
        dfg_arch arch;
        const char *names;
    } linears[] = {{DFG_ARCH_QWEN2, "(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or all-linear)"},
                   {DFG_ARCH_GPT2, "(c_proj, c_attn, c_fc, or all-linear)"}};
    for (int i = 0; i < 2; i++) {
        dfg_program *q = dfg_program_new("misspelt");
        dfg_model *m = calloc(1, sizeof(*m));
        c = small(linears[i].arch);
        c.lora = lora(4, 8, "qproj");
        st = dfg_model_params(q, "", c, m);
        const char *msg = dfg_program_error(q);
        CHECK(st == DFG_ERR_ARG && msg && strstr(msg, "'qproj'") && strstr(msg, linears[i].names),
              "%s: a name that matches nothing is refused naming the linears: %s", dfg_arch_name(linears[i].arch), msg);
        free(m);
        dfg_program_free(q);
    }

    dfg_program *p = dfg_program_new("defaults");
    dfg_lora_config got;
    dfg_program_set(p, "lora_r", "8");
    CHECK(!dfg_lora_config_from_settings(p, DFG_ARCH_LLAMA, &got) && !strcmp(got.targets, "q_proj,v_proj") && got.alpha == 8,
          "the Llama family's default targets and alpha: '%s' %g", got.targets, (double)got.alpha);
    CHECK(!dfg_lora_config_from_settings(p, DFG_ARCH_GPT2, &got) && !strcmp(got.targets, "c_attn"), "GPT-2's: '%s'", got.targets);
    dfg_program_free(p);
}

static void test_settings_refused(void) {
    static const char *const bad[][3] = {{"lora_r", "-1", "lora_r"},
                                         {"lora_alpha", "0", "lora_alpha"},
                                         {"lora_dropout", "0.05", "lora_dropout"},
                                         {"bnb_4bit_quant_type", "fp4", "bnb_4bit_quant_type"},
                                         {"load_in_4bit", "true", "load_in_4bit needs lora_r > 0"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        dfg_program *p = dfg_program_new("bad");
        dfg_program_set(p, bad[i][0], bad[i][1]);
        if (strcmp(bad[i][0], "load_in_4bit") && strcmp(bad[i][0], "lora_r")) dfg_program_set(p, "lora_r", "4");
        dfg_lora_config got;
        dfg_status st = dfg_lora_config_from_settings(p, DFG_ARCH_QWEN3, &got);
        const char *msg = dfg_program_error(p);
        CHECK(st && msg && strstr(msg, bad[i][2]), "%s=%s: status %d, message '%s'", bad[i][0], bad[i][1], (int)st,
              msg ? msg : "");
        dfg_program_free(p);
    }
}

static void test_tensors(void) {
    for (int rs = 0; rs < 2; rs++) {
        dfg_model_config c = small(DFG_ARCH_LLAMA);
        c.lora = lora(4, 16, "all-linear");
        c.lora.rslora = rs;
        dfg_program *p = dfg_program_new("tensors");
        dfg_model *m = calloc(1, sizeof(*m)), *off = calloc(1, sizeof(*off));
        CHECK(!dfg_model_params(p, "", c, m), "build: %s", dfg_program_error(p));
        const dfg_tensor *w = dfg_find(p, "model.layers.0.mlp.gate_proj.weight");
        CHECK(w && w->kind == DFG_STATE && w->role == DFG_ROLE_BASE_MODEL, "the base is frozen state of role base_model");
        CHECK(m->n_params == 2 * 7 * 2, "%d params: two adapters per linear", m->n_params);
        bool all_params = true;
        for (int i = 0; i < m->n_params; i++) all_params &= m->params[i]->kind == DFG_PARAM;
        CHECK(all_params, "the adapters are the params");
        const dfg_lora_adapter *ad = &m->h[1].lora[DFG_LIN_DOWN];
        CHECK(ad->a && ad->b && dfg_shape_equal(ad->a->shape, DFG_SHAPE(4, 48)) && dfg_shape_equal(ad->b->shape, DFG_SHAPE(32, 4)),
              "down_proj's A (r, in) = (4, 48) and B (out, r) = (32, 4)");
        float want = rs ? 16.0f / 2.0f : 16.0f / 4.0f;
        CHECK(ad->scale == want, "scale %g, want %g (rslora %d)", (double)ad->scale, (double)want, rs);
        CHECK(ad->a->init.kind == DFG_INIT_UNIFORM && fabsf(ad->a->init.b - 1.0f / sqrtf(48.0f)) < 1e-7f &&
                  ad->a->init.a == -ad->a->init.b && ad->b->init.kind == DFG_INIT_ZEROS,
              "PEFT's init: A uniform within 1/sqrt(in), B zeros");
        dfg_model_adapter_off(m, off);
        bool none = off->n_params == 0;
        for (int l = 0; l < c.n_layer; l++)
            for (int k = 0; k < DFG_LIN_COUNT; k++) none &= off->h[l].lora[k].a == NULL;
        CHECK(none && off->h[0].gate_w == m->h[0].gate_w, "adapter off: the same base, no adapter");
        free(m), free(off);
        dfg_program_free(p);
    }
}

/* Is t (a forward dequantisation's output) read by a backward node? */
static bool read_in_backward(const dfg_graph *g, const dfg_tensor *t) {
    for (int i = 0; i < g->n_nodes; i++) {
        const dfg_node *n = g->nodes[i];
        if (!(n->flags & DFG_NF_BACKWARD)) continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == t) return true;
    }
    return false;
}

static void test_qlora_backward(void) {
    for (int dq = 0; dq < 2; dq++) {
        dfg_model_config c = small(DFG_ARCH_QWEN3);
        c.lora = lora(4, 8, "q_proj,v_proj");
        c.lora.load_in_4bit = true, c.lora.double_quant = dq;
        dfg_program *p = dfg_program_new("qlora");
        dfg_model *m = calloc(1, sizeof(*m));
        CHECK(!dfg_model_params(p, "", c, m), "build: %s", dfg_program_error(p));
        CHECK(!dfg_find(p, "model.layers.0.mlp.up_proj.weight") && dfg_find(p, "model.layers.0.mlp.up_proj.weight.nf4") &&
                  dfg_find(p, dq ? "model.layers.0.mlp.up_proj.weight.absmax_q" : "model.layers.0.mlp.up_proj.weight.absmax"),
              "every linear of the blocks is NF4, adapted or not (double quant %d)", dq);
        dfg_graph *g = dfg_graph_new(p, "train");
        dfg_tensor *tok = dfg_input(g, "tokens", DFG_I32, DFG_SHAPE(2, 5));
        dfg_tensor *h = dfg_model_hidden(g, m, tok);
        dfg_tensor *loss = dfg_sum(g, dfg_reshape(g, dfg_mul(g, h, h), DFG_SHAPE(-1)), 0);
        dfg_tensor *grads[64];
        CHECK(!dfg_backward(g, loss, m->params, m->n_params, grads), "backward: %s", dfg_graph_error(g));
        int fwd = 0, bwd = 0, leaked = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const dfg_node *n = g->nodes[i];
            if (n->op != DFG_OP_NF4_DEQUANT) continue;
            if (n->flags & DFG_NF_BACKWARD) {
                bwd++;
                CHECK(n->after && (n->after->flags & DFG_NF_BACKWARD), "a remade weight waits for its gradient");
            } else {
                fwd++;
                leaked += read_in_backward(g, n->out[0]);
            }
        }
        CHECK(fwd == 2 * 7, "forward: one dequantisation per linear (%d)", fwd);
        /* every linear the gradient crosses to reach an adapter, which is all of them but the
         * first layer's q, k and v: their input is the embedding, which no adapter feeds */
        CHECK(bwd == 2 * 7 - 3, "backward: its own per linear the gradient crosses (%d)", bwd);
        CHECK(leaked == 0, "%d forward dequantisations are read by the backward", leaked);
        free(m);
        dfg_program_free(p);
    }
}

int main(void) {
    dfg_test_init("test_lora");
    test_targets();
    test_settings_refused();
    test_tensors();
    test_qlora_backward();
    return dfg_test_finish();
}
