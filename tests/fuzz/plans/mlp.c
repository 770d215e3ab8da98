/* mlp.c - a seed pipeline for the plan-file fuzzer (tests/fuzz/make_plan_corpus.sh): a two-layer
 * MLP classifier trained with AdamW, and an evaluation graph without gradients. Small on
 * purpose: the plan is a few KB, so the fuzzer runs it thousands of times a second.
 *
 * Uses: settings of each kind, PARAMs with every init kind, a CONST (class weights), an INPUT
 * with a scope, backward + gradient clipping + AdamW (moments, step counter), metrics, named
 * outputs, a graph stage with a step range. */
#include "dfg.h"
#include "dfg_nn.h"

dfg_status dfg_pipeline(dfg_program *p) {
    int64_t B = dfg_setting_int(p, "batch", 4), D = 4, H = dfg_setting_int(p, "hidden", 8), K = 3;
    float lr = (float)dfg_setting_float(p, "learning_rate", 0.01);
    bool eval = dfg_setting_bool(p, "eval", true);
    dfg_setting_str(p, "note", "seed \"mlp\"");
    if (dfg_program_status(p)) return dfg_program_status(p);

    dfg_tensor *w1 = dfg_param(p, "w1", DFG_F32, DFG_SHAPE(D, H), dfg_init_normal(0.0f, 0.5f));   /* (D, H) */
    dfg_tensor *b1 = dfg_param(p, "b1", DFG_F32, DFG_SHAPE(H), dfg_init_zeros());                 /* (H) */
    dfg_tensor *w2 = dfg_param(p, "w2", DFG_F32, DFG_SHAPE(H, K), dfg_init_uniform(-0.3f, 0.3f)); /* (H, K) */
    dfg_tensor *b2 = dfg_param(p, "b2", DFG_F32, DFG_SHAPE(K), dfg_init_constant(0.1f));          /* (K) */
    static const float class_w[3] = {1.0f, 0.5f, 2.0f};
    dfg_tensor *cw = dfg_const(p, "class_weights", DFG_F32, DFG_SHAPE(K), class_w);               /* (K) */

    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(B, D));   /* (B, D) */
    dfg_tensor *y = dfg_input(g, "y", DFG_I32, DFG_SHAPE(B));      /* (B) class ids */
    dfg_tensor *h = dfg_gelu(g, dfg_bias_add(g, dfg_matmul(g, x, w1, false, false), b1)); /* (B, H) */
    dfg_tensor *logits = dfg_nn_linear(g, h, w2, b2);                                    /* (B, K) */
    dfg_tensor *logp = dfg_take(g, dfg_log_softmax(g, logits), y);                       /* (B) */
    dfg_tensor *wy = dfg_take(g, dfg_expand(g, cw, DFG_SHAPE(B, K)), y);                 /* (B) */
    dfg_tensor *loss = dfg_name(dfg_neg(g, dfg_mean(g, dfg_mul(g, logp, wy), 0)), "loss");
    dfg_tensor *params[4] = {w1, b1, w2, b2}, *grads[4];
    dfg_backward(g, loss, params, 4, grads);
    dfg_tensor *norm = dfg_clip_grad_norm(g, grads, 4, 1.0f);
    dfg_adamw_config cfg = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.01f};
    dfg_nn_adamw_step(p, g, params, grads, 4, cfg, "");
    dfg_metric(g, "loss", loss);
    dfg_metric(g, "grad_norm", norm);
    dfg_output(g, logits, "train_logits");
    dfg_stage_graph(p, g, 1);

    if (eval) { /* no gradients: only the forward, every 10th step from step 5 on */
        dfg_graph *e = dfg_graph_new(p, "eval");
        dfg_tensor *xe = dfg_input(e, "x_eval", DFG_F32, DFG_SHAPE(2, D)); /* (2, D) */
        dfg_set_scope(p, xe, "eval", "eval");
        dfg_tensor *he = dfg_gelu(e, dfg_nn_linear(e, xe, w1, b1));                  /* (2, H) */
        dfg_tensor *pe = dfg_softmax(e, dfg_nn_linear(e, he, w2, b2));               /* (2, K) */
        dfg_output(e, dfg_argmax(e, pe), "eval_class");                              /* (2) i32 */
        dfg_metric(e, "eval_top_prob", dfg_mean(e, dfg_sum(e, dfg_mul(e, pe, pe), 1), 0));
        dfg_stage_graph(p, e, 1);
        dfg_stage_steps(p, "eval", 5, -1);
    }
    return dfg_program_status(p);
}
