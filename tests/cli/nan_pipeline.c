/* nan_pipeline.c - a small training program whose data turns NaN at a chosen step, for the
 * CLI's non-finite handling (nan_cli checks in grpo_cli_test.sh).
 *
 *   dfg compile tests/cli/nan_pipeline.c --set nan_step=5 [--set nan_in=data|loss] -o nan.dfg
 *
 * A linear model w (16) x (8,16) -> (8), loss = mean((x w - y)^2), AdamW through persistent
 * gradient buffers, clipping at 1. The host stage "feed" writes fresh x and y every step; at
 * step nan_step (counted from 1) it puts a NaN into x (nan_in=data: the loss and gradients are
 * NaN) or sets the input "spike" to Inf (nan_in=loss: only the reported metric "spike" is not
 * finite, the gradients are). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"

#define B 8
#define D 16

dfg_status dfg_pipeline(dfg_program *p) {
    dfg_setting_int(p, "nan_step", 5);
    dfg_setting_str(p, "nan_in", "data");
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(D, 1), dfg_init_normal(0.0f, 0.1f));
    dfg_tensor *grad = NULL;
    dfg_status st = dfg_nn_grad_buffers(p, &w, 1, "", &grad);
    if (st) return st;
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(B, D));     /* (B, D) */
    dfg_tensor *y = dfg_input(g, "y", DFG_F32, DFG_SHAPE(B, 1));     /* (B, 1) */
    dfg_tensor *spike = dfg_input(g, "spike", DFG_F32, DFG_SCALAR); /* 0, or Inf at nan_step */
    dfg_tensor *err = dfg_sub(g, dfg_matmul(g, x, w, false, false), y);
    dfg_tensor *loss = dfg_mean(g, dfg_reshape(g, dfg_mul(g, err, err), DFG_SHAPE(-1)), 0);
    if ((st = dfg_backward_accumulate(g, loss, &w, 1, &grad))) return st;
    dfg_tensor *grads[1] = {grad};
    dfg_tensor *norm = dfg_clip_grad_norm(g, grads, 1, 1.0f);
    dfg_adamw_config c = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
    if ((st = dfg_nn_adamw_step(p, g, &w, grads, 1, c, ""))) return st;
    dfg_assign_fill(g, grad, 0.0f);
    dfg_metric(g, "loss", loss);
    dfg_metric(g, "grad_norm", norm);
    dfg_metric(g, "spike", spike);
    if ((st = dfg_stage_host(p, "feed", "nan_feed"))) return st;
    if ((st = dfg_graph_status(g))) return st;
    return dfg_stage_graph(p, g, 1);
}

dfg_status nan_feed(dfg_host_ctx *ctx) {
    dfg_buffer x, y, spike;
    if (dfg_host_buffer(ctx, "x", &x) || dfg_host_buffer(ctx, "y", &y) || dfg_host_buffer(ctx, "spike", &spike))
        return DFG_ERR_ARG;
    uint64_t rng = dfg_host_seed(ctx) ^ ((uint64_t)dfg_host_step(ctx) * 0x9E3779B97F4A7C15ull);
    float *xv = x.data, *yv = y.data;
    for (int i = 0; i < B * D; i++) xv[i] = (float)((dfg_host_rand(&rng) >> 40) * 0x1p-24) - 0.5f;
    for (int i = 0; i < B; i++) yv[i] = xv[i * D] - 2.0f * xv[i * D + 1];
    *(float *)spike.data = 0.0f;
    const dfg_program *p = dfg_host_program(ctx);
    if (dfg_program_has(p, "nan_step") && dfg_host_step(ctx) + 1 == dfg_program_int(p, "nan_step")) {
        if (!strcmp(dfg_program_str(p, "nan_in"), "loss")) *(float *)spike.data = INFINITY;
        else xv[3] = NAN;
    }
    return DFG_OK;
}
