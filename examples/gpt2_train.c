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
 * and grad_norm.
 *
 * gradient_accumulation_steps GA > 1 (must divide batch): the same step in GA micro-batches of
 * batch/GA rows, so the activations are planned for batch/GA rows. "data" still writes the
 * whole batch (into persistent tensors), "train" runs GA times, each time on the next batch/GA
 * rows, adding its gradients into persistent buffers, and "update" clips, runs AdamW once and
 * zeroes the buffers. The loss, the gradients and the metrics are those of GA = 1 up to float
 * rounding; `dfg fit` picks GA (declare_fit_knobs below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"

typedef struct {
    dfg_model_config model;
    int64_t batch, seq;
    int64_t GA; /* gradient_accumulation_steps */
    dfg_adamw_config adamw;
    float max_grad_norm;
} train_config;

/* Reads every setting (recording its default in the plan) and checks the ranges. */
static dfg_status read_config(dfg_program *p, train_config *c) {
    c->seq = dfg_setting_int(p, "seq", 32);
    /* batch 16 and lr 3e-3 make the task click within ~100 steps (a few seconds on one core);
     * with batch 8 or lr 1e-3 the loss only starts to fall after 100-200 steps */
    c->batch = dfg_setting_int(p, "batch", 16);
    c->GA = dfg_setting_int(p, "gradient_accumulation_steps", 1);
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
    if (c->GA < 1 || c->batch % c->GA)
        return dfg_program_fail(p, DFG_ERR_ARG, "gradient_accumulation_steps %lld must divide batch %lld",
                                (long long)c->GA, (long long)c->batch);
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

/* ---------------------------------------------------------------- gradient accumulation (GA > 1) */
typedef struct {
    dfg_tensor *tokens, *targets, *mask; /* (B, T) the whole batch, written by "data" */
    dfg_tensor *micro;                   /* i32 (): the micro-batch the next "train" run takes */
    dfg_tensor *acc_loss, *acc_acc;      /* f32 (): the step's loss and accuracy, summed over micro-batches */
    dfg_tensor **grads;                  /* per parameter, persistent: the step's summed gradients */
} accum_state;

static dfg_tensor *batch_state(dfg_program *p, const char *name, dfg_dtype dt, const train_config *c) {
    return dfg_state(p, name, dt, DFG_SHAPE(c->batch, c->seq), DFG_ROLE_NONE, dfg_init_zeros());
}

static dfg_status make_accum_state(dfg_program *p, const train_config *c, const dfg_model *model, accum_state *s) {
    /* the host stage finds these by name, as it finds the GA = 1 graph's inputs */
    s->tokens = batch_state(p, "tokens", DFG_I32, c);
    s->targets = batch_state(p, "targets", DFG_I32, c);
    s->mask = batch_state(p, "mask", DFG_F32, c);
    s->micro = dfg_state(p, "train.micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    s->acc_loss = dfg_state(p, "train.loss", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    s->acc_acc = dfg_state(p, "train.acc", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    return dfg_nn_grad_buffers(p, model->params, model->n_params, "", s->grads);
}

/* One micro-batch: rows [micro n, micro n + n) of the batch, n = batch / GA.
 * Why the micro-batch's token mean divided by GA is the batch's token mean: every row of this
 * task has the same number of answer tokens (H = seq/2, gpt2_make_batch checks it), so each
 * micro-batch holds batch_count / GA of them and sum_k mean_k / GA = sum(x mask) / batch_count.
 * A task with uneven answers would need the batch's count here instead. */
static dfg_status build_micro_graph(dfg_program *p, const train_config *c, const dfg_model *model, accum_state *s) {
    int64_t n = c->batch / c->GA;
    float inv_ga = 1.0f / (float)c->GA;
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *row0 = dfg_scale(g, s->micro, (float)n);          /* i32 (): this micro-batch's first row */
    dfg_tensor *tokens = dfg_slice_at(g, s->tokens, 0, row0, n);   /* (n, T) */
    dfg_tensor *targets = dfg_slice_at(g, s->targets, 0, row0, n); /* (n, T) */
    dfg_tensor *mask = dfg_slice_at(g, s->mask, 0, row0, n);       /* (n, T) */

    dfg_tensor *logits = dfg_model_logits(g, model, tokens); /* (n, T, V) */
    if (c->model.dtype != DFG_F32) logits = dfg_cast(g, logits, DFG_F32);
    dfg_tensor *logp = dfg_take(g, dfg_log_softmax(g, logits), targets); /* (n, T) */
    dfg_tensor *loss = dfg_scale(g, dfg_neg(g, masked_mean(g, logp, mask)), inv_ga);
    dfg_status st = dfg_backward_accumulate(g, loss, model->params, model->n_params, s->grads);
    if (st) return st;
    dfg_accumulate(g, s->acc_loss, loss);
    dfg_tensor *hit = dfg_equal(g, dfg_argmax(g, logits), targets); /* (n, T) f32 */
    dfg_accumulate(g, s->acc_acc, dfg_scale(g, masked_mean(g, hit, mask), inv_ga));
    dfg_assign(g, s->micro, dfg_add_scalar(g, s->micro, 1.0f));
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)c->GA);
}

/* After the GA micro-batches: clip the summed gradients, one AdamW step, report the step's
 * metrics (in GA = 1's order) and reset the buffers and the loop for the next step. */
static dfg_status build_update_graph(dfg_program *p, const train_config *c, const dfg_model *model, accum_state *s) {
    int n = model->n_params;
    dfg_graph *g = dfg_graph_new(p, "update");
    dfg_tensor **grads = calloc((size_t)n, sizeof(*grads)); /* clipping may replace the pointers it is given */
    if (!grads) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    memcpy(grads, s->grads, sizeof(*grads) * (size_t)n);
    dfg_tensor *grad_norm = dfg_clip_grad_norm(g, grads, n, c->max_grad_norm); /* in place on the buffers */
    dfg_status st = dfg_nn_adamw_step(p, g, model->params, grads, n, c->adamw, "");
    free(grads);
    if (st) return st;
    for (int i = 0; i < n; i++) dfg_assign_fill(g, s->grads[i], 0.0f);
    dfg_metric(g, "loss", s->acc_loss);
    dfg_metric(g, "acc", s->acc_acc);
    dfg_metric(g, "grad_norm", grad_norm);
    dfg_tensor *reset[3] = {s->micro, s->acc_loss, s->acc_acc};
    for (int i = 0; i < 3; i++) dfg_assign_fill(g, reset[i], 0.0f);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

static dfg_status build_accumulating(dfg_program *p, const train_config *c, const dfg_model *model) {
    accum_state s = {0};
    if (!(s.grads = calloc((size_t)model->n_params, sizeof(*s.grads)))) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    dfg_status st = make_accum_state(p, c, model, &s);
    if (!st) st = dfg_stage_host(p, "data", "gpt2_make_batch");
    if (!st) st = build_micro_graph(p, c, model, &s);
    if (!st) st = build_update_graph(p, c, model, &s);
    free(s.grads);
    return st;
}

/* `dfg fit`: gradient_accumulation_steps keeps the math (the same step in smaller micro-batches;
 * the divisors of batch, ascending: each saves activations and costs launches); batch and seq
 * change what is trained, named only when nothing fits (halvings, the nearest first; seq >= 4,
 * the task's least). */
static void declare_fit_knobs(dfg_program *p, const train_config *c) {
    int64_t v[DFG_MAX_FIT_VALUES];
    int n = 0;
    for (int64_t d = 1; d <= c->batch && n < DFG_MAX_FIT_VALUES; d++)
        if (c->batch % d == 0) v[n++] = d;
    dfg_declare_fit_knob(p, "gradient_accumulation_steps", v, n, true);
    n = 0;
    for (int64_t b = c->batch / 2; b >= 1 && n < DFG_MAX_FIT_VALUES; b /= 2) v[n++] = b;
    if (n) dfg_declare_fit_knob(p, "batch", v, n, false);
    n = 0;
    for (int64_t t = c->seq / 2; t >= 4 && n < DFG_MAX_FIT_VALUES; t /= 2) v[n++] = t;
    if (n) dfg_declare_fit_knob(p, "seq", v, n, false);
}

dfg_status dfg_pipeline(dfg_program *p) {
    train_config c;
    dfg_status st = read_config(p, &c);
    if (st) return st;
    dfg_model *model = calloc(1, sizeof(*model)); /* ~7 KB of tensor pointers: keep it off the stack */
    if (!model) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    st = dfg_model_params(p, "", c.model, model);
    if (c.GA == 1) { /* the program as it was before gradient accumulation, op for op */
        if (!st) st = dfg_stage_host(p, "data", "gpt2_make_batch");
        if (!st) st = build_train_graph(p, &c, model);
    } else if (!st) {
        st = build_accumulating(p, &c, model);
    }
    free(model);
    if (!st) declare_fit_knobs(p, &c);
    return st ? st : dfg_program_status(p);
}

/* ---------------------------------------------------------------- the host stage: the task's data */

/* An int setting the pipeline read at compile time (so the plan records it, checked). */
static bool setting_int(dfg_host_ctx *ctx, const char *key, int64_t *out) {
    const dfg_program *p = dfg_host_program(ctx);
    *out = dfg_program_int(p, key);
    return dfg_program_has(p, key);
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
    bool reverse = strcmp(dfg_program_str(dfg_host_program(ctx), "task"), "copy") != 0;
    if (tok.shape.rank != 2 || tok.dtype != DFG_I32 || tgt.dtype != DFG_I32 || mask.dtype != DFG_F32)
        return dfg_host_fail(ctx, "tokens/targets must be i32 (B, T) and mask f32 (B, T)");
    int64_t B = tok.shape.d[0], T = tok.shape.d[1];
    int32_t *row = malloc(sizeof(int32_t) * (size_t)(T + 1));
    if (!row) return dfg_host_fail(ctx, "out of memory");
    /* one stream per (seed, step): the same run gives the same batches on every machine */
    uint64_t rng = dfg_host_seed(ctx) ^ ((uint64_t)dfg_host_step(ctx) * 0xD1B54A32D192ED03ull);
    int64_t uneven = -1; /* a row whose answer count differs from row 0's */
    float count0 = 0.0f;
    for (int64_t b = 0; b < B; b++) {
        float *m = (float *)mask.data + b * T, count = 0.0f;
        make_row(&rng, T, vocab, reverse, (int32_t *)tok.data + b * T, (int32_t *)tgt.data + b * T, m, row);
        for (int64_t t = 0; t < T; t++) count += m[t];
        if (b == 0) count0 = count;
        else if (count != count0 && uneven < 0) uneven = b;
    }
    free(row);
    /* the micro-batch loss (build_micro_graph) is the batch's only when every row has as many
     * answer tokens: say so rather than train another loss */
    if (uneven >= 0) return dfg_host_fail(ctx, "row %lld has a different number of answer tokens than row 0", (long long)uneven);
    return DFG_OK;
}
