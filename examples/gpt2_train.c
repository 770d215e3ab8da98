/* gpt2_train.c - trains a small GPT-2 on a verifiable synthetic task.
 *
 *   dfg compile examples/gpt2_train.c -o gpt2.dfg [--set n_layer=4 --set task=copy ...]
 *   dfg run gpt2.dfg --steps 200
 *
 * Task. Each row is a random prompt of H = seq/2 tokens (ids 1 .. vocab-1), a separator (id 0),
 * then the prompt reversed (task=reverse) or repeated (task=copy). The model reads the row and
 * predicts every next token; the loss and the accuracy count only the answer tokens, which
 * the prompt determines exactly, so a model that learned the task reaches loss ~0 and accuracy
 * 1, while guessing gives loss ln(vocab - 1) (4.14 for vocab 64).
 *
 * Stages per step: the host stage "data" (gpt2_make_batch, below) writes tokens, targets and
 * mask for this step (deterministic in the run's seed and the step number), then the graph
 * "train" runs forward, backward, gradient clipping and one AdamW step, and reports loss, acc
 * and grad_norm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"

typedef struct {
    dfg_model_config model;
    int64_t batch, seq;
    dfg_adamw_config adamw;
    float max_grad_norm;
} train_config;

/* Reads every setting (recording its default in the plan) and checks the ranges. */
static dfg_status read_config(dfg_program *p, train_config *c) {
    c->seq = dfg_setting_int(p, "seq", 32);
    /* batch 16 and lr 3e-3 make the task click within ~100 steps (a few seconds on one core);
     * with batch 8 or lr 1e-3 the loss only starts to fall after 100-200 steps */
    c->batch = dfg_setting_int(p, "batch", 16);
    dfg_model_config small = dfg_gpt2_config_default();
    small.n_layer = 2, small.n_head = 4, small.n_embd = 64, small.vocab_size = 64;
    small.block_size = c->seq > 0 && c->seq < (1 << 20) ? (int)c->seq : 1;
    dfg_status st = dfg_model_config_from_settings(p, small, &c->model);
    dfg_adamw_config adamw = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
    if (st || (st = dfg_adamw_config_from_settings(p, adamw, &c->adamw))) return st;
    c->max_grad_norm = (float)dfg_setting_float(p, "max_grad_norm", 1.0);
    const char *task = dfg_setting_str(p, "task", "reverse");
    if (dfg_program_status(p)) return dfg_program_status(p);
    if (c->seq > c->model.block_size)
        return dfg_program_fail(p, DFG_ERR_ARG, "seq %lld exceeds block_size %d", (long long)c->seq, c->model.block_size);
    if (c->seq < 4 || c->seq > (1 << 20) || c->batch < 1 || c->batch > (1 << 20))
        return dfg_program_fail(p, DFG_ERR_ARG, "seq must be >= 4 and batch >= 1 (got seq %lld, batch %lld)",
                                (long long)c->seq, (long long)c->batch);
    if (strcmp(task, "reverse") && strcmp(task, "copy"))
        return dfg_program_fail(p, DFG_ERR_ARG, "task must be 'reverse' or 'copy', got '%s'", task);
    if (!(c->max_grad_norm > 0))
        return dfg_program_fail(p, DFG_ERR_ARG, "max_grad_norm must be > 0, got %g", c->max_grad_norm);
    return DFG_OK;
}

/* Mean of x over the positions where mask is 1: sum(x * mask) / sum(mask), a scalar. */
static dfg_tensor *masked_mean(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask) {
    dfg_tensor *total = dfg_sum(g, dfg_masked_sum(g, x, mask, 1), 0); /* (B, T) -> (B) -> () */
    dfg_tensor *count = dfg_sum(g, dfg_sum(g, mask, 1), 0);
    return dfg_div(g, total, count);
}

static dfg_status build_train_graph(dfg_program *p, const train_config *c, const dfg_model *model) {
    int64_t B = c->batch, T = c->seq;
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *tokens = dfg_input(g, "tokens", DFG_I32, DFG_SHAPE(B, T));   /* (B, T) */
    dfg_tensor *targets = dfg_input(g, "targets", DFG_I32, DFG_SHAPE(B, T)); /* (B, T) next tokens */
    dfg_tensor *mask = dfg_input(g, "mask", DFG_F32, DFG_SHAPE(B, T));       /* (B, T) 1 on answer tokens */

    dfg_tensor *logits = dfg_model_logits(g, model, tokens); /* (B, T, V) */
    if (c->model.dtype != DFG_F32) logits = dfg_cast(g, logits, DFG_F32);
    dfg_tensor *logp = dfg_take(g, dfg_log_softmax(g, logits), targets); /* (B, T) */
    dfg_tensor *loss = dfg_name(dfg_neg(g, masked_mean(g, logp, mask)), "loss");

    dfg_tensor **grads = calloc((size_t)model->n_params, sizeof(*grads));
    if (!grads) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    dfg_backward(g, loss, model->params, model->n_params, grads);
    dfg_tensor *grad_norm = dfg_clip_grad_norm(g, grads, model->n_params, c->max_grad_norm);
    /* AdamW with f32 moments; on cuda the bf16 weights are updated through f32 master copies */
    dfg_status st = dfg_nn_adamw_step(p, g, model->params, grads, model->n_params, c->adamw, "");
    free(grads);
    if (st) return st;

    /* token accuracy on the answer positions, from the logits before this step's update */
    dfg_tensor *hit = dfg_equal(g, dfg_argmax(g, logits), targets); /* (B, T) f32 */
    dfg_metric(g, "loss", loss);
    dfg_metric(g, "acc", masked_mean(g, hit, mask));
    dfg_metric(g, "grad_norm", grad_norm);
    if (dfg_graph_status(g)) return dfg_graph_status(g);
    return dfg_stage_graph(p, g, 1);
}

dfg_status dfg_pipeline(dfg_program *p) {
    train_config c;
    dfg_status st = read_config(p, &c);
    if (st) return st;
    dfg_model *model = calloc(1, sizeof(*model)); /* ~7 KB of tensor pointers: keep it off the stack */
    if (!model) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    st = dfg_model_params(p, "", c.model, model);
    if (!st) st = dfg_stage_host(p, "data", "gpt2_make_batch");
    if (!st) st = build_train_graph(p, &c, model);
    free(model);
    return st ? st : dfg_program_status(p);
}

/* ---------------------------------------------------------------- the host stage: the task's data */

static bool setting_int(dfg_host_ctx *ctx, const char *key, int64_t *out) {
    const char *v = dfg_host_setting(ctx, key);
    char *end = NULL;
    *out = v ? strtoll(v, &end, 10) : 0;
    return v && end != v && !*end;
}

/* Fills one row: prompt s[0 .. H-1], separator, answer; tokens = s[0 .. T-1], targets = s[1 .. T]. */
static void make_row(uint64_t *rng, int64_t T, int64_t vocab, bool reverse, int32_t *tok, int32_t *tgt, float *mask,
                     int32_t *s /* T + 1 */) {
    int64_t H = T / 2;
    for (int64_t i = 0; i <= T; i++) s[i] = 0;
    for (int64_t i = 0; i < H; i++) s[i] = 1 + (int32_t)(dfg_host_rand(rng) % (uint64_t)(vocab - 1));
    for (int64_t j = 0; j < H && H + 1 + j <= T; j++) s[H + 1 + j] = reverse ? s[H - 1 - j] : s[j];
    for (int64_t t = 0; t < T; t++) {
        tok[t] = s[t];
        tgt[t] = s[t + 1];
        mask[t] = (t >= H && t + 1 <= 2 * H) ? 1.0f : 0.0f; /* targets s[H+1 .. 2H]: the answer */
    }
}

dfg_status gpt2_make_batch(dfg_host_ctx *ctx) {
    dfg_buffer tok, tgt, mask;
    if (dfg_host_buffer(ctx, "tokens", &tok) || dfg_host_buffer(ctx, "targets", &tgt) ||
        dfg_host_buffer(ctx, "mask", &mask))
        return dfg_host_fail(ctx, "the program has no tokens/targets/mask inputs");
    int64_t vocab;
    if (!setting_int(ctx, "vocab_size", &vocab) || vocab < 3) return dfg_host_fail(ctx, "setting 'vocab_size' (>= 3) is required");
    const char *task = dfg_host_setting(ctx, "task");
    bool reverse = !task || strcmp(task, "copy");
    if (tok.shape.rank != 2 || tok.dtype != DFG_I32 || tgt.dtype != DFG_I32 || mask.dtype != DFG_F32)
        return dfg_host_fail(ctx, "tokens/targets must be i32 (B, T) and mask f32 (B, T)");
    int64_t B = tok.shape.d[0], T = tok.shape.d[1];
    int32_t *row = malloc(sizeof(int32_t) * (size_t)(T + 1));
    if (!row) return dfg_host_fail(ctx, "out of memory");
    /* one stream per (seed, step): the same run gives the same batches on every machine */
    uint64_t rng = dfg_host_seed(ctx) ^ ((uint64_t)dfg_host_step(ctx) * 0xD1B54A32D192ED03ull);
    for (int64_t b = 0; b < B; b++)
        make_row(&rng, T, vocab, reverse, (int32_t *)tok.data + b * T, (int32_t *)tgt.data + b * T,
                 (float *)mask.data + b * T, row);
    free(row);
    return DFG_OK;
}
