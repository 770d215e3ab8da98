/* grpo.c - GRPO (Group Relative Policy Optimization; DeepSeekMath, arXiv 2402.03300) on a
 * verifiable task, as one static program that the planner sees whole. The policy is a small GPT-2
 * by default, or any model dfg_model builds: GPT-2, Llama, Qwen2, Qwen3, from a Hugging Face
 * directory (--set model=DIR) or from settings (--set model_type=qwen3 ...).
 *
 *   dfg compile examples/grpo.c -o grpo.dfg [--set task=add --set num_generations=16 ...]
 *   dfg run grpo.dfg --steps 400 [--weights DIR]
 *
 * One step = one optimizer update on P prompts x G generations (N = P G sequences):
 *   data        host: P problems of the task, each repeated G times (examples/tasks/dfg_tasks.h)
 *   sft         (the first sft_steps steps only) a supervised step on the right answers
 *   prefill     the prompts into the KV cache, each prompt once for its G sequences
 *   decode      x max_completion_length: sample the next token of every sequence (Philox RNG,
 *               temperature, top-k), write it, and stop counting a sequence after its EOS
 *               through the completion mask: no host round trip, no logits kept
 *               (rollout_sub_batches R > 1: prefill.k and decode.k for k = 0 .. R-1, each on
 *               P/R whole groups, with a KV cache of N/R rows; every row draws the random
 *               numbers it would draw in one batch, so the tokens are the same)
 *   reward      host: the task's verifiable reward per sequence
 *   advantages  (r - group mean) / (group std + 1e-4) (scale_rewards), reward metrics
 *   ref         (beta != 0) the frozen reference model's per-token log-probs, per micro-batch
 *               (share_prompts, by default whenever a micro-batch holds whole groups: every
 *               forward pass computes a group's prompt positions once and its G completions
 *               over them, ops/nn/nn_shared.c; the same numbers as G separate passes)
 *   old         (num_iterations > 1) the policy's log-probs before this step's updates
 *   train.k     x gradient_accumulation_steps micro-batches: TRL's loss (loss_type grpo, bnpo,
 *               dr_grpo, dapo, cispo, sapo; token or sequence ratios; delta; the entropy mask and
 *               bonus; the KL penalty), log-probs and entropy from one fused head, gradients
 *               accumulated into persistent buffers
 *   update.k    global-norm clipping, AdamW; k = 0 .. num_iterations-1 passes over the rollouts
 * Settings carry Hugging Face config.json's and TRL GRPOConfig's names. With
 * `dfg run --rollouts R.safetensors` the stages data .. reward are skipped and the step trains
 * on the given tokens, completion_mask and rewards (see declare() below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"
#include "dfg_grpo_data.h"
#include "dfg_tasks.h"

typedef struct {
    dfg_model_config model;
    dfg_task task;
    dfg_dataset *ds;          /* --set dataset=PATH: prompts from a JSONL file instead of the task */
    int64_t *ds_rows;         /* (P) the dataset rows of the current batch, for the reward */
    int64_t all_null_steps;   /* steps with a row no reward function applied to (a run's warnings) */
    bool padded;              /* padded_prompts: left-padded prompts, each row's start in prompt_start */
    char rollouts_only[256];  /* why the task cannot make this plan's rollouts ("": it can) */
    bool shuffle, truncate_left, mask_truncated;
    int32_t eos[DFG_GRPO_MAX_EOS], pad_id;
    int n_eos;
    const char *reward;       /* a built-in reward's name, or "external" (--reward-cmd / --reward-lib) */
    int n_funcs;              /* external: the reward functions (reward_funcs) and their weights */
    char funcs[DFG_REWARD_MAX_FUNCS][68];
    float weights[DFG_REWARD_MAX_FUNCS];
    int64_t P, G, N, Lp, max_new, T, GA, n_micro, iterations, sft_steps;
    int64_t R, n_gen; /* rollout_sub_batches, and the sequences each generates (N / R) */
    int W;            /* world_size: data-parallel ranks, each with P of the W P prompts of a step */
    int64_t bucket_bytes; /* ddp_bucket_cap_mb: the gradient all-reduce's buckets */
    bool share_prompts; /* compute each group's prompt once (needs groups whole in a micro-batch) */
    bool share_forced;  /* share_prompts=1: every micro-batch must hold whole groups */
    float temperature, beta, max_grad_norm;
    int top_k;
    dfg_grpo_loss_config loss;
    dfg_grpo_scale scale;
    dfg_adamw_config adamw;
} grpo_config;

#define GRPO_MAX_SUB_BATCHES 16 /* prefill.k and decode.k for each: the stages dfg_declare_rollout takes (64) */

static int pick(dfg_program *p, const char *key, const char *value, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(value, names[i])) return i;
    char list[128] = "";
    for (int i = 0; i < n; i++) snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", names[i]);
    dfg_program_fail(p, DFG_ERR_ARG, "%s must be one of %s, got '%s'", key, list, value);
    return -1;
}

/* Where the prompts and rewards come from: dataset, shuffle_dataset, truncate_prompts, reward,
 * reward_funcs, reward_weights, eos_token_id, pad_token_id, mask_truncated_completions. */
static dfg_status read_data_config(dfg_program *p, grpo_config *c) {
    char err[1024];
    const char *dataset = dfg_setting_str(p, "dataset", "");
    c->shuffle = dfg_setting_bool(p, "shuffle_dataset", true);
    const char *trunc = dfg_setting_str(p, "truncate_prompts", "left");
    c->mask_truncated = dfg_setting_bool(p, "mask_truncated_completions", false);
    c->reward = dfg_setting_str(p, "reward", *dataset ? "external" : "mixed");
    const char *funcs = dfg_setting_str(p, "reward_funcs", "reward");
    const char *weights = dfg_setting_str(p, "reward_weights", "");
    char eos_default[16];
    snprintf(eos_default, sizeof(eos_default), "%d", DFG_VOCAB_EOS);
    const char *eos = dfg_setting_str(p, "eos_token_id", eos_default);
    int64_t pad = dfg_setting_int(p, "pad_token_id", DFG_VOCAB_PAD);
    if (dfg_program_status(p)) return dfg_program_status(p);
    if (strcmp(trunc, "left") && strcmp(trunc, "error"))
        return dfg_program_fail(p, DFG_ERR_ARG, "truncate_prompts must be left or error, got '%s'", trunc);
    c->truncate_left = !strcmp(trunc, "left");
    if ((c->n_eos = dfg_grpo_parse_ids(eos, c->eos, DFG_GRPO_MAX_EOS, err, sizeof(err))) < 0)
        return dfg_program_fail(p, DFG_ERR_ARG, "%s", err);
    if (!*dataset) /* a built-in task's rewards know its own EOS only, whatever a model's config says */
        c->eos[0] = DFG_VOCAB_EOS, c->n_eos = 1;
    if (pad < 0 || pad > INT32_MAX) return dfg_program_fail(p, DFG_ERR_ARG, "pad_token_id %lld is not a token id", (long long)pad);
    c->pad_id = (int32_t)pad;
    if (strcmp(c->reward, "external") && !dfg_reward_by_name(c->reward))
        return dfg_program_fail(p, DFG_ERR_ARG, "reward must be one of %s or external, got '%s'", dfg_reward_names(), c->reward);
    if (*dataset && strcmp(c->reward, "external"))
        return dfg_program_fail(p, DFG_ERR_ARG, "a dataset's prompts have no built-in answers: reward must be external "
                                "(--reward-cmd or --reward-lib at run time), got '%s'", c->reward);
    /* reward_funcs: the names the reward program declares, in its order */
    c->n_funcs = 0;
    const char *f = funcs;
    for (; *f && c->n_funcs < DFG_REWARD_MAX_FUNCS; c->n_funcs++) {
        size_t n = strcspn(f, ",");
        if (n < 1 || n > 64) break;
        snprintf(c->funcs[c->n_funcs], sizeof(c->funcs[0]), "%.*s", (int)n, f);
        f += n + (f[n] == ',');
    }
    if (*f || c->n_funcs < 1)
        return dfg_program_fail(p, DFG_ERR_ARG, "reward_funcs must be 1 .. %d names of 1 .. 64 characters separated by "
                                "',', got '%s'", DFG_REWARD_MAX_FUNCS, funcs);
    for (int i = 0; i < c->n_funcs; i++) c->weights[i] = 1.0f;
    if (*weights && !dfg_grpo_parse_floats(weights, c->weights, c->n_funcs, err, sizeof(err)))
        return dfg_program_fail(p, DFG_ERR_ARG, "%s", err);
    if (!strcmp(c->reward, "external")) /* the rule a run's reward program must meet, said where the names are fixed */
        dfg_program_note(p, "reward=external: the reward program (dfg run --reward-cmd) or plugin (--reward-lib) must "
                         "declare the functions reward_funcs=%s, in this order (tools/reward_server.py --list prints a "
                         "module's; docs/rewards.md)", funcs);
    if (*dataset && dfg_dataset_open(dataset, 0, &c->ds, err, sizeof(err))) return dfg_program_fail(p, DFG_ERR_ARG, "%s", err);
    return DFG_OK;
}

/* Every prompt id (and the EOS and pad ids) must be a row of the model's embedding. */
static dfg_status check_dataset_vocab(dfg_program *p, const grpo_config *c) {
    int64_t V = c->model.vocab_size;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] >= V) return dfg_program_fail(p, DFG_ERR_ARG, "eos_token_id %d is outside the vocabulary (0 .. %lld)", c->eos[i], (long long)(V - 1));
    if (c->pad_id >= V) return dfg_program_fail(p, DFG_ERR_ARG, "pad_token_id %d is outside the vocabulary (0 .. %lld)", c->pad_id, (long long)(V - 1));
    for (int64_t r = 0; r < dfg_dataset_rows(c->ds); r++) {
        int64_t len = 0;
        const int32_t *ids = dfg_dataset_prompt(c->ds, r, &len);
        for (int64_t i = 0; i < len; i++)
            if (ids[i] >= V)
                return dfg_program_fail(p, DFG_ERR_ARG, "%s:%lld: prompt_ids[%lld] is %d, outside the model's vocabulary (0 .. %lld)",
                                        dfg_program_setting(p, "dataset"), (long long)dfg_dataset_line(c->ds, r), (long long)i,
                                        ids[i], (long long)(V - 1));
    }
    return DFG_OK;
}

/* The built-in task (task, digits): read only without a dataset, whose plan has none. */
static dfg_status read_task(dfg_program *p, grpo_config *c) {
    char err[256];
    if (c->ds) {
        const char *given = dfg_program_setting(p, "task") ? "task" : dfg_program_setting(p, "digits") ? "digits" : NULL;
        if (given)
            return dfg_program_fail(p, DFG_ERR_ARG, "%s picks a built-in task, but the prompts come from the dataset "
                                    "(drop --set %s, or drop dataset)", given, given);
        return DFG_OK;
    }
    const char *task = dfg_setting_str(p, "task", "reverse");
    int digits = (int)dfg_setting_int(p, "digits", 3);
    if (dfg_program_status(p)) return dfg_program_status(p);
    if (dfg_task_init(&c->task, task, digits, err, sizeof(err))) return dfg_program_fail(p, DFG_ERR_ARG, "%s", err);
    return DFG_OK;
}

/* padded_prompts (auto: with a dataset, or a task whose prompts are shorter than
 * max_prompt_length), and when the task cannot make this plan's rollouts: the plan then trains
 * only on rollout files (a file of left-padded rows, e.g. TRL's, needs padded_prompts=true). */
static dfg_status read_padding(dfg_program *p, grpo_config *c, const char *padded) {
    bool is_auto = !strcmp(padded, "auto"), yes = !strcmp(padded, "true") || !strcmp(padded, "1");
    if (!is_auto && !yes && strcmp(padded, "false") && strcmp(padded, "0"))
        return dfg_program_fail(p, DFG_ERR_ARG, "padded_prompts must be auto, true or false, got '%s'", padded);
    int64_t task_len = c->ds ? 0 : c->task.prompt_len;
    c->padded = is_auto ? c->ds || c->Lp > task_len : yes;
    if (c->ds && !c->padded)
        return dfg_program_fail(p, DFG_ERR_ARG, "a dataset's prompts differ in length: they are left-padded "
                                "(padded_prompts=false is for a built-in task)");
    c->rollouts_only[0] = '\0';
    if (!c->ds && (c->Lp < task_len || (c->Lp > task_len && !c->padded)))
        snprintf(c->rollouts_only, sizeof(c->rollouts_only), "task '%s' (digits %d) has prompts of %lld tokens, %s "
                 "max_prompt_length %lld%s", c->task.name, c->task.digits, (long long)task_len,
                 c->Lp < task_len ? "more than" : "fewer than", (long long)c->Lp,
                 c->Lp < task_len ? "" : ", and padded_prompts=false leaves no room for left padding");
    return DFG_OK;
}

/* Reads every setting (recording its default in the plan) and checks the ranges. */
static dfg_status read_config(dfg_program *p, grpo_config *c) {
    static const char *const loss_types[] = {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"};
    static const char *const levels[] = {"token", "sequence"};
    static const char *const scales[] = {"group", "batch", "none"};
    dfg_status st = read_data_config(p, c);
    if (!st) st = read_task(p, c);
    if (st) return st;
    c->P = dfg_setting_int(p, "prompts_per_step", 8);
    c->G = dfg_setting_int(p, "num_generations", 8);
    c->Lp = dfg_setting_int(p, "max_prompt_length", c->ds ? dfg_dataset_max_prompt_len(c->ds) : c->task.prompt_len);
    c->max_new = dfg_setting_int(p, "max_completion_length", c->ds ? 256 : c->task.max_answer_len + 2);
    c->GA = dfg_setting_int(p, "gradient_accumulation_steps", 1);
    c->R = dfg_setting_int(p, "rollout_sub_batches", 1);
    int64_t world = dfg_setting_int(p, "world_size", 1);
    double bucket_mb = dfg_setting_float(p, "ddp_bucket_cap_mb", 25.0); /* PyTorch DDP's default */
    c->iterations = dfg_setting_int(p, "num_iterations", 1);
    c->sft_steps = dfg_setting_int(p, "sft_steps", 0);
    const char *share = dfg_setting_str(p, "share_prompts", "auto"); /* auto: when groups fit micro-batches */
    const char *padded = dfg_setting_str(p, "padded_prompts", "auto");
    c->temperature = (float)dfg_setting_float(p, "temperature", 1.0);
    c->top_k = (int)dfg_setting_int(p, "top_k", 0);
    /* the loss: TRL GRPOConfig's names and defaults (TRL 1.9 / main of 2026-07: dapo, beta 0) */
    c->beta = (float)dfg_setting_float(p, "beta", 0.0);
    double eps = dfg_setting_float(p, "epsilon", 0.2);
    c->loss.epsilon_low = (float)eps;
    c->loss.epsilon_high = (float)dfg_setting_float(p, "epsilon_high", eps);
    c->loss.delta = (float)dfg_setting_float(p, "delta", 0.0); /* TRL's None */
    c->loss.sapo_temperature_pos = (float)dfg_setting_float(p, "sapo_temperature_pos", 1.0);
    c->loss.sapo_temperature_neg = (float)dfg_setting_float(p, "sapo_temperature_neg", 1.05);
    c->loss.top_entropy_quantile = (float)dfg_setting_float(p, "top_entropy_quantile", 1.0);
    c->loss.entropy_coef = (float)dfg_setting_float(p, "entropy_coef", 0.0);
    c->max_grad_norm = (float)dfg_setting_float(p, "max_grad_norm", 1.0);
    int lt = pick(p, "loss_type", dfg_setting_str(p, "loss_type", "dapo"), loss_types, 6);
    int lv = pick(p, "importance_sampling_level", dfg_setting_str(p, "importance_sampling_level", "token"), levels, 2);
    int sc = pick(p, "scale_rewards", dfg_setting_str(p, "scale_rewards", "group"), scales, 3);
    dfg_setting_int(p, "seed", 1234); /* dfg run's default --seed */
    if (dfg_program_status(p)) return dfg_program_status(p);
    if ((st = read_padding(p, c, padded))) return st;
    c->loss.loss_type = (dfg_grpo_loss_type)lt;
    c->loss.is_level = (dfg_grpo_is_level)lv;
    c->scale = (dfg_grpo_scale)sc;
    if (world < 1 || world > 4096 || c->P % world)
        return dfg_program_fail(p, DFG_ERR_ARG, "world_size %lld must divide prompts_per_step %lld (whole groups per "
                                "rank) and be at most 4096", (long long)world, (long long)c->P);
    if (!(bucket_mb > 0 && bucket_mb <= 1e6))
        return dfg_program_fail(p, DFG_ERR_ARG, "ddp_bucket_cap_mb %g must be > 0 and at most 1e6", bucket_mb);
    c->bucket_bytes = (int64_t)(bucket_mb * 1048576.0);
    c->W = (int)world;
    c->P /= world; /* from here on every size is one rank's */
    c->N = c->P * c->G;
    c->T = c->Lp + c->max_new;

    dfg_model_config small = dfg_gpt2_config_default();
    small.n_layer = 2, small.n_head = 4, small.n_embd = 64, small.vocab_size = dfg_vocab_size();
    small.block_size = c->T > 0 && c->T < (1 << 20) ? (int)c->T : 1;
    st = dfg_model_config_from_settings(p, small, &c->model);
    if (st) return st;
    /* dfg's 1e-3 trains the tasks' small models from scratch; a pretrained model (model=DIR) is
     * fine-tuned, and TRL's 1e-6 is the default that does not wreck it */
    const char *dir = dfg_program_setting(p, "model");
    bool pretrained = dir && *dir, lr_given = dfg_program_setting(p, "learning_rate") != NULL;
    dfg_adamw_config adamw = {.lr = pretrained ? 1e-6f : 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
    if ((st = dfg_adamw_config_from_settings(p, adamw, &c->adamw))) return st;
    if (pretrained && !lr_given)
        dfg_program_note(p, "learning_rate is 1e-06 (TRL's default for fine-tuning a pretrained model; the built-in "
                         "tasks' small models from scratch use 1e-3): --set learning_rate=... to change it");

    if (c->ds && (st = check_dataset_vocab(p, c))) return st;
    if (!c->ds && c->model.vocab_size < dfg_vocab_size())
        return dfg_program_fail(p, DFG_ERR_ARG, "vocab_size %d is smaller than the tasks' vocabulary (%d)",
                                c->model.vocab_size, dfg_vocab_size());
    if (c->P < 1 || c->G < 2 || c->N > (1 << 20))
        return dfg_program_fail(p, DFG_ERR_ARG, "need prompts_per_step >= 1 and num_generations >= 2 (a group to "
                                "compare), got %lld x %lld", (long long)c->P, (long long)c->G);
    if (c->GA < 1 || c->N % c->GA)
        return dfg_program_fail(p, DFG_ERR_ARG, "gradient_accumulation_steps %lld must divide the %lld sequences",
                                (long long)c->GA, (long long)c->N);
    if (c->R < 1 || c->R > GRPO_MAX_SUB_BATCHES || c->P % c->R)
        return dfg_program_fail(p, DFG_ERR_ARG, "rollout_sub_batches %lld must divide prompts_per_step %lld (whole "
                                "groups per sub-batch) and be at most %d", (long long)c->R, (long long)c->P,
                                GRPO_MAX_SUB_BATCHES);
    c->n_gen = c->N / c->R;
    if (c->Lp < (c->ds ? 1 : 2) || c->max_new < 1 || c->T > c->model.block_size)
        return dfg_program_fail(p, DFG_ERR_ARG, "need max_prompt_length >= 2, max_completion_length >= 1 and their "
                                "sum <= n_positions %d", c->model.block_size);
    if (c->iterations < 1 || c->sft_steps < 0 || !(c->temperature > 0) || c->top_k < 0 || !(c->beta >= 0) ||
        !(c->loss.epsilon_low >= 0) || !(c->loss.epsilon_high >= 0) || !(c->max_grad_norm > 0))
        return dfg_program_fail(p, DFG_ERR_ARG, "out of range: num_iterations >= 1, sft_steps >= 0, temperature > 0, "
                                "top_k >= 0, beta >= 0, epsilon(_high) >= 0 and max_grad_norm > 0 are required");
    const dfg_grpo_loss_config *l = &c->loss;
    if (!(l->delta >= 0) || !(l->sapo_temperature_pos > 0) || !(l->sapo_temperature_neg > 0) ||
        !(l->top_entropy_quantile >= 0 && l->top_entropy_quantile <= 1) || !isfinite(l->entropy_coef))
        return dfg_program_fail(p, DFG_ERR_ARG, "out of range: delta >= 0 (0: none), sapo_temperature_pos and _neg > 0, "
                                "0 <= top_entropy_quantile <= 1 and a finite entropy_coef are required");
    c->n_micro = c->N / c->GA;
    bool whole_groups = c->n_micro % c->G == 0;
    if (strcmp(share, "auto") && strcmp(share, "1") && strcmp(share, "0"))
        return dfg_program_fail(p, DFG_ERR_ARG, "share_prompts must be auto, 1 or 0, got '%s'", share);
    if (!strcmp(share, "1") && !whole_groups)
        return dfg_program_fail(p, DFG_ERR_ARG, "share_prompts=1 computes each prompt once for its group, so a "
                                "micro-batch (%lld sequences) must hold whole groups of num_generations %lld: change "
                                "gradient_accumulation_steps or set share_prompts=0", (long long)c->n_micro, (long long)c->G);
    c->share_prompts = whole_groups && strcmp(share, "0");
    c->share_forced = !strcmp(share, "1");
    c->loss.beta = c->beta;
    c->loss.n_total = c->N;
    c->loss.max_completion_length = c->max_new;
    c->loss.micro_batches = (int)c->GA;
    c->loss.world = c->W;
    return DFG_OK;
}

/* The loss's per-micro-batch metrics (dfg_grpo_terms), summed in train.stats over the step's
 * micro-batches and passes and logged as their mean: TRL's _compute_loss logs one value per
 * micro-batch and its log() averages them. */
#define GRPO_STATS 7
static const char *const grpo_stats[GRPO_STATS] = {"entropy",         "clip_ratio/low_mean",    "clip_ratio/low_min",
                                                   "clip_ratio/high_mean", "clip_ratio/high_max", "clip_ratio/region_mean",
                                                   "cispo_clip_ratio"};

/* The program's persistent tensors, by their roles in the step. */
typedef struct {
    dfg_model *policy, *ref;
    dfg_model_kv kv;
    dfg_tensor *tokens, *mask, *rewards, *advantages, *active; /* the rollout */
    dfg_tensor *start;        /* (N) i32 each row's first prompt column (a dataset's left-padded prompts); else NULL */
    dfg_tensor *reward_values; /* (N, F) each row's value per reward function, NaN for None (external rewards) */
    dfg_tensor *truncated_prompts;
    dfg_tensor *logp, *ref_logp, *old_logp;                    /* (N, T) per-token log-probs */
    dfg_tensor *sft_tokens, *sft_mask;                         /* the warm-up's data */
    dfg_tensor *cur_tok, *pos, *done, *rng;                    /* generation */
    dfg_tensor *rng0;      /* (4) the RNG state where the rollout starts: every sub-batch starts there */
    dfg_tensor *ref_micro, *old_micro; /* the ref and old stages' micro-batch loops */
    dfg_tensor *micro, *acc_loss, *acc_kl, *acc_tokens; /* micro-batch loop */
    dfg_tensor *acc_stats; /* (GRPO_STATS) per micro-batch metrics, summed over the step's micro-batches */
    dfg_tensor *grads[4 + DFG_MODEL_PARAMS_PER_BLOCK * DFG_MODEL_MAX_LAYERS];
} grpo_state;

/* The rollout's stage names: "prefill" and "decode", or "prefill.k" and "decode.k" for sub-batch k. */
static void rollout_stage(char *buf, size_t len, const char *base, const grpo_config *c, int k) {
    if (c->R == 1) snprintf(buf, len, "%s", base);
    else snprintf(buf, len, "%s.%d", base, k);
}

static dfg_tensor *state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape s, dfg_role role) {
    return dfg_state(p, name, dt, s, role, dfg_init_zeros());
}

static dfg_status make_state(dfg_program *p, const grpo_config *c, grpo_state *s) {
    int64_t N = c->N, T = c->T;
    dfg_status st = dfg_model_params(p, "", c->model, s->policy);
    if (!st && c->beta != 0.0f && !(st = dfg_model_frozen(p, "ref.", c->model, s->ref)))
        st = dfg_nn_init_copy(p, s->ref->params, s->policy->params, s->ref->n_params); /* ref starts as the policy */
    if (!st) st = dfg_model_kv_cache(p, "", s->policy, c->n_gen, T, &s->kv);
    if (!st) st = dfg_nn_grad_buffers(p, s->policy->params, s->policy->n_params, "", s->grads);
    if (st) return st;
    s->tokens = state(p, "tokens", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    s->mask = state(p, "completion_mask", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    s->rewards = state(p, "rewards", DFG_F32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
    s->advantages = state(p, "advantages", DFG_F32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
    s->active = state(p, "active_tokens", DFG_F32, DFG_SCALAR, DFG_ROLE_ROLLOUT);
    if (c->padded) { /* each row's first prompt column: left padding is never attended */
        s->start = state(p, "prompt_start", DFG_I32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
        s->kv.start = s->start;
    }
    if (c->ds) {
        /* [epoch, rows drawn in it]: a stream position like the RNG's, kept in checkpoints */
        state(p, "dataset.position", DFG_I32, DFG_SHAPE(2), DFG_ROLE_RNG);
        state(p, "dataset.hash", DFG_I32, DFG_SHAPE(2), DFG_ROLE_RNG); /* to notice an edited file on resume */
        s->truncated_prompts = state(p, "prompts_truncated", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    } else {
        state(p, "answers", DFG_I32, DFG_SHAPE(N, c->task.max_answer_len), DFG_ROLE_ROLLOUT);
        state(p, "answer_len", DFG_I32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT);
    }
    if (!strcmp(c->reward, "external"))
        s->reward_values = state(p, "reward_values", DFG_F32, DFG_SHAPE(c->N, c->n_funcs), DFG_ROLE_NONE);
    s->logp = state(p, "logp", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    s->ref_logp = state(p, "ref_logp", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    if (c->iterations > 1) s->old_logp = state(p, "old_logp", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    if (c->sft_steps > 0) {
        s->sft_tokens = state(p, "sft_tokens", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
        s->sft_mask = state(p, "sft_mask", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT);
    }
    s->cur_tok = state(p, "gen.token", DFG_I32, DFG_SHAPE(c->n_gen, 1), DFG_ROLE_ROLLOUT);
    s->pos = state(p, "gen.pos", DFG_I32, DFG_SCALAR, DFG_ROLE_ROLLOUT);
    s->done = state(p, "gen.done", DFG_F32, DFG_SHAPE(c->n_gen), DFG_ROLE_ROLLOUT);
    s->rng = state(p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG);
    if (c->R > 1) s->rng0 = state(p, "gen.rng0", DFG_I32, DFG_SHAPE(4), DFG_ROLE_NONE);
    if (c->GA > 1 && c->beta != 0.0f) s->ref_micro = state(p, "ref.micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE);
    if (c->GA > 1 && c->iterations > 1) s->old_micro = state(p, "old.micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE);
    s->micro = state(p, "train.micro", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE);
    s->acc_loss = state(p, "train.loss", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    s->acc_kl = state(p, "train.kl", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    s->acc_stats = state(p, "train.stats", DFG_F32, DFG_SHAPE(GRPO_STATS), DFG_ROLE_NONE);
    s->acc_tokens = state(p, "train.tokens", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE);
    /* the KV cache and the decode loop's own state live only while the rollout is made: their
     * bytes go to the training activations afterwards */
    char first[32], last[32];
    rollout_stage(first, sizeof(first), "prefill", c, 0);
    rollout_stage(last, sizeof(last), "decode", c, (int)c->R - 1);
    for (int l = 0; l < c->model.n_layer && !dfg_program_status(p); l++) {
        dfg_set_scope(p, s->kv.k[l], first, last);
        dfg_set_scope(p, s->kv.v[l], first, last);
    }
    dfg_tensor *gen[4] = {s->cur_tok, s->pos, s->done, s->rng0};
    for (int i = 0; i < 4; i++)
        if (gen[i]) dfg_set_scope(p, gen[i], first, last);
    return dfg_program_status(p);
}

/* ---------------------------------------------------------------- the rollout */
/* The first len tokens of the first row of every group of G rows: tokens (n, T) -> (n/G, len). */
static dfg_tensor *group_prompts(dfg_graph *g, dfg_tensor *tokens, int64_t G, int64_t len) {
    dfg_shape s = dfg_tensor_shape(tokens);
    dfg_tensor *groups = dfg_reshape(g, tokens, DFG_SHAPE(s.d[0] / G, G, s.d[1]));
    return dfg_reshape(g, dfg_slice(g, dfg_slice(g, groups, 1, 0, 1), 2, 0, len), DFG_SHAPE(s.d[0] / G, len));
}

/* Sub-batch k's rows of x (rows k n_gen .. k n_gen + n_gen - 1), or x itself in one batch. */
static dfg_tensor *gen_rows(dfg_graph *g, const grpo_config *c, dfg_tensor *x, int k) {
    return c->R == 1 || !x ? x : dfg_slice(g, x, 0, (int64_t)k * c->n_gen, c->n_gen);
}

/* The KV cache as sub-batch k's graphs see it: its rows' prompt starts (left padding). */
static dfg_model_kv sub_batch_kv(dfg_graph *g, const grpo_config *c, const grpo_state *s, int k) {
    dfg_model_kv kv = s->kv;
    kv.start = gen_rows(g, c, s->start, k);
    return kv;
}

static dfg_status build_prefill(dfg_program *p, const grpo_config *c, grpo_state *s, int k) {
    char name[32];
    rollout_stage(name, sizeof(name), "prefill", c, k);
    dfg_graph *g = dfg_graph_new(p, name);
    dfg_tensor *tokens = gen_rows(g, c, s->tokens, k); /* (n_gen, T) */
    dfg_model_kv kv = sub_batch_kv(g, c, s, k);
    /* every prompt token but the last goes into the cache; the last one starts the decoding */
    dfg_tensor *prompts = c->share_prompts ? group_prompts(g, tokens, c->G, c->Lp - 1) /* (n_gen/G, Lp-1) */
                                           : dfg_slice(g, tokens, 1, 0, c->Lp - 1);   /* (n_gen, Lp-1) */
    dfg_model_prefill(g, s->policy, &kv, prompts);
    dfg_assign(g, s->cur_tok, dfg_slice(g, tokens, 1, c->Lp - 1, 1));
    dfg_assign_fill(g, s->pos, (float)(c->Lp - 1));
    dfg_assign_fill(g, s->done, 0.0f);
    if (k == 0) dfg_assign_fill(g, s->mask, 0.0f);
    /* every sub-batch draws from where the rollout starts: the row index tells the rows apart */
    if (s->rng0) dfg_assign(g, k == 0 ? s->rng0 : s->rng, k == 0 ? s->rng : s->rng0);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

static dfg_status build_decode(dfg_program *p, const grpo_config *c, grpo_state *s, int k) {
    char name[32];
    rollout_stage(name, sizeof(name), "decode", c, k);
    dfg_graph *g = dfg_graph_new(p, name);
    dfg_model_kv kv = sub_batch_kv(g, c, s, k);
    dfg_tensor *h = dfg_model_decode(g, s->policy, &kv, s->cur_tok, s->pos); /* (n_gen, 1, C) */
    dfg_tensor *logits = dfg_model_lm_head(g, s->policy, h);                  /* (n_gen, 1, V) */
    if (dfg_tensor_dtype(logits) != DFG_F32) logits = dfg_cast(g, logits, DFG_F32);
    dfg_grpo_rollout r = {s->tokens, s->mask, s->done, s->cur_tok, s->pos, s->rng, (int64_t)k * c->n_gen,
                          dfg_grpo_rank_row0(g, c->W, c->N)};
    dfg_grpo_sample_step(g, &r, logits, c->temperature, c->top_k, c->eos, c->n_eos);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)c->max_new);
}

/* ---------------------------------------------------------------- scoring */
/* (N) 1 for a row whose completion has no EOS by max_completion_length: it filled every column
 * (the mask counts tokens up to and including the first EOS) and its last token is no EOS. */
static dfg_tensor *truncated_rows(dfg_graph *g, const grpo_config *c, const grpo_state *s, dfg_tensor *len) {
    dfg_tensor *last = dfg_reshape(g, dfg_slice(g, s->tokens, 1, c->T - 1, 1), DFG_SHAPE(c->N)), *is_eos = NULL;
    for (int i = 0; i < c->n_eos; i++) {
        dfg_tensor *hit = dfg_equal(g, last, dfg_fill(g, DFG_I32, DFG_SCALAR, (float)c->eos[i]));
        is_eos = is_eos ? dfg_maximum(g, is_eos, hit) : hit;
    }
    dfg_tensor *full = dfg_equal(g, len, dfg_fill(g, DFG_F32, DFG_SCALAR, (float)c->max_new));
    return dfg_mul(g, full, dfg_affine(g, is_eos, -1.0f, 1.0f));
}

static dfg_status build_advantages(dfg_program *p, const grpo_config *c, grpo_state *s) {
    dfg_graph *g = dfg_graph_new(p, "advantages");
    /* data parallel: every rank sees the whole batch's rewards and lengths (TRL gathers them too),
     * so batch-scaled advantages and the metrics are the whole batch's; each keeps its rows */
    dfg_tensor *rewards = dfg_grpo_world_rows(g, s->rewards, c->W); /* (W N) */
    dfg_tensor *row0 = dfg_grpo_rank_row0(g, c->W, c->N);
    dfg_tensor *adv = dfg_grpo_advantages(g, rewards, c->G, c->scale);
    dfg_assign(g, s->advantages, row0 ? dfg_slice_at(g, adv, 0, row0, c->N) : adv);
    if (s->ref_micro) dfg_assign_fill(g, s->ref_micro, 0.0f); /* the micro-batch loops that follow */
    if (s->old_micro) dfg_assign_fill(g, s->old_micro, 0.0f);
    dfg_tensor *scored = dfg_slice(g, s->mask, 1, c->Lp, c->max_new); /* the prompt's columns never count */
    dfg_tensor *len = dfg_sum(g, scored, 1);                           /* (N) */
    dfg_tensor *truncated = truncated_rows(g, c, s, len);
    dfg_tensor *generated = dfg_sum(g, len, 0);
    dfg_tensor *active = generated;
    if (c->mask_truncated) { /* TRL's mask_truncated_completions: such a row leaves the loss */
        dfg_tensor *keep = dfg_reshape(g, dfg_affine(g, truncated, -1.0f, 1.0f), DFG_SHAPE(c->N, 1));
        dfg_assign(g, s->mask, dfg_mul(g, s->mask, keep));
        active = dfg_sum(g, dfg_mul(g, len, dfg_reshape(g, keep, DFG_SHAPE(c->N))), 0);
    }
    /* dapo and cispo divide by the whole batch's active tokens; each rank's loss is its share of
     * the mean the gradient all-reduce takes, so it divides by their mean over the ranks */
    dfg_assign(g, s->active, c->W > 1 ? dfg_allreduce(g, active, DFG_COLL_MEAN, c->W) : active);
    dfg_tensor *r = dfg_reshape(g, rewards, DFG_SHAPE(1, -1));
    dfg_tensor *dev = dfg_sub(g, r, dfg_mean(g, r, 1));
    dfg_metric(g, "reward", dfg_mean(g, rewards, 0));
    dfg_metric(g, "reward_std", dfg_sqrt(g, dfg_scale(g, dfg_sum(g, dfg_reshape(g, dfg_mul(g, dev, dev), DFG_SHAPE(-1)), 0),
                                                  1.0f / (float)(c->W * c->N - 1))));
    if (s->reward_values) /* TRL's rewards/<name>/mean and /std, over the whole batch */
        dfg_grpo_function_metrics(g, dfg_grpo_world_rows(g, s->reward_values, c->W), c->n_funcs, c->funcs);
    dfg_metric(g, "frac_reward_zero_std", dfg_grpo_frac_zero_std(g, rewards, c->G));
    dfg_grpo_completion_metrics(g, dfg_grpo_world_rows(g, len, c->W), dfg_grpo_world_rows(g, truncated, c->W), c->max_new);
    if (s->truncated_prompts)
        dfg_metric(g, "prompts_truncated",
                   c->W > 1 ? dfg_allreduce(g, s->truncated_prompts, DFG_COLL_SUM, c->W) : s->truncated_prompts);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* Log-probs of the completion tokens of tok (n, T) under model m, as (n, max_new): entry j scores
 * position Lp + j. With share_prompts the prompt positions are computed once per group. start:
 * the rows' first prompt columns (n) for left-padded prompts, or NULL. */
static dfg_tensor *completion_logp(dfg_graph *g, const grpo_config *c, const dfg_model *m, dfg_tensor *tok,
                                   dfg_tensor *start, dfg_tensor **entropy) {
    if (c->share_prompts) {
        dfg_tensor *group_start = NULL; /* (n/G) the first row's of each group: the group shares its prompt */
        if (start) {
            int64_t n = dfg_tensor_shape(start).d[0];
            group_start = dfg_reshape(g, dfg_slice(g, dfg_reshape(g, start, DFG_SHAPE(n / c->G, c->G)), 1, 0, 1),
                                      DFG_SHAPE(n / c->G));
        }
        return dfg_grpo_completion_logp_entropy(g, m, group_prompts(g, tok, c->G, c->Lp),
                                                dfg_slice(g, tok, 1, c->Lp, c->max_new), c->temperature, group_start, entropy);
    }
    dfg_tensor *lp = dfg_grpo_token_logp_entropy(g, m, tok, c->temperature, start, entropy);
    if (entropy) *entropy = dfg_slice(g, *entropy, 1, c->Lp - 1, c->max_new);
    return dfg_slice(g, lp, 1, c->Lp - 1, c->max_new);
}

/* (n, T) from the completions' log-probs (n, max_new) and mask: each scored token at its own
 * position, 0 on the prompt and wherever the mask is 0, as the dump and the old/ref copies keep them. */
static dfg_tensor *padded(dfg_graph *g, const grpo_config *c, dfg_tensor *lp, dfg_tensor *mask) {
    int64_t n = dfg_tensor_shape(lp).d[0];
    return dfg_concat(g, (dfg_tensor *[]){dfg_fill(g, DFG_F32, DFG_SHAPE(n, c->Lp), 0.0f), dfg_mul(g, lp, mask)}, 2, 1);
}

/* rows [row0, row0 + n) of x along axis 0, then the completion's columns Lp .. T-1 when scored */
static dfg_tensor *rows(dfg_graph *g, const grpo_config *c, dfg_tensor *x, dfg_tensor *row0, int64_t n, bool scored) {
    dfg_tensor *r = dfg_slice_at(g, x, 0, row0, n);
    return scored ? dfg_slice(g, r, 1, c->Lp, c->max_new) : r;
}

/* A no-grad pass over every sequence: the reference model's or the policy's log-probs, one
 * training micro-batch per run (gradient_accumulation_steps runs; micro counts them). */
static dfg_status build_logp_stage(dfg_program *p, const grpo_config *c, grpo_state *s, const char *name,
                                   const dfg_model *m, dfg_tensor *dst, dfg_tensor *micro) {
    dfg_graph *g = dfg_graph_new(p, name);
    if (c->GA == 1) {
        dfg_tensor *mask = dfg_slice(g, s->mask, 1, c->Lp, c->max_new);
        dfg_assign(g, dst, padded(g, c, completion_logp(g, c, m, s->tokens, s->start, NULL), mask));
        return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
    }
    int64_t n = c->n_micro;
    dfg_tensor *row0 = dfg_scale(g, micro, (float)n); /* i32: this micro-batch's first row */
    dfg_tensor *tok = rows(g, c, s->tokens, row0, n, false), *mask = rows(g, c, s->mask, row0, n, true);
    dfg_tensor *start = s->start ? rows(g, c, s->start, row0, n, false) : NULL;
    dfg_slice_assign_at(g, dst, padded(g, c, completion_logp(g, c, m, tok, start, NULL), mask), 0, row0);
    dfg_assign(g, micro, dfg_add_scalar(g, micro, 1.0f));
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)c->GA);
}

/* ---------------------------------------------------------------- training */
static dfg_status build_train(dfg_program *p, const grpo_config *c, grpo_state *s, int k) {
    char name[32];
    snprintf(name, sizeof(name), "train.%d", k);
    dfg_graph *g = dfg_graph_new(p, name);
    int64_t n = c->n_micro;
    dfg_tensor *row0 = dfg_scale(g, s->micro, (float)n); /* i32: this micro-batch's first row */
    dfg_tensor *tok = rows(g, c, s->tokens, row0, n, false), *mask = rows(g, c, s->mask, row0, n, true);
    dfg_tensor *start = s->start ? rows(g, c, s->start, row0, n, false) : NULL; /* (n) */
    dfg_tensor *entropy = NULL;                                                /* (n, max_new) */
    dfg_tensor *logp = completion_logp(g, c, s->policy, tok, start, &entropy); /* (n, max_new) */
    dfg_grpo_inputs in = {
        .logp = logp,
        .old_logp = s->old_logp ? rows(g, c, s->old_logp, row0, n, true) : NULL,
        .ref_logp = c->beta != 0.0f ? rows(g, c, s->ref_logp, row0, n, true) : NULL,
        .advantages = rows(g, c, s->advantages, row0, n, false),
        .mask = mask,
        .active_tokens = s->active,
        .entropy = entropy,
    };
    dfg_grpo_terms t;
    dfg_status st = dfg_grpo_loss(g, &in, c->loss, &t);
    if (!st) st = dfg_backward_accumulate(g, t.loss, s->policy->params, s->policy->n_params, s->grads);
    if (st) return st;
    /* data parallel: the whole batch's gradient, a bucket reduced during the last micro-batch's
     * backward as soon as its layers' gradients are final */
    dfg_tensor *grads[4 + DFG_MODEL_PARAMS_PER_BLOCK * DFG_MODEL_MAX_LAYERS];
    memcpy(grads, s->grads, sizeof(*grads) * (size_t)s->policy->n_params);
    dfg_nn_allreduce_grads(g, grads, s->policy->n_params, c->W, c->bucket_bytes);
    dfg_accumulate(g, s->acc_loss, t.loss);
    dfg_accumulate(g, s->acc_kl, t.kl_sum);
    dfg_tensor *stats[GRPO_STATS] = {t.entropy,        t.clip_low_mean,    t.clip_low_min,    t.clip_high_mean,
                                     t.clip_high_max,  t.clip_region_mean, t.cispo_clip_ratio};
    for (int i = 0; i < GRPO_STATS; i++) /* (1) each; 0 where the loss type has no such metric */
        stats[i] = stats[i] ? dfg_reshape(g, stats[i], DFG_SHAPE(1)) : dfg_fill(g, DFG_F32, DFG_SHAPE(1), 0.0f);
    dfg_accumulate(g, s->acc_stats, dfg_concat(g, stats, GRPO_STATS, 0));
    dfg_accumulate(g, s->acc_tokens, t.tokens);
    if (k == 0) { /* the policy's log-probs before this step's update, for `dfg run --dump` */
        dfg_slice_assign_at(g, s->logp, padded(g, c, dfg_detach(g, logp), mask), 0, row0);
    }
    dfg_assign(g, s->micro, dfg_add_scalar(g, s->micro, 1.0f));
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, (int)c->GA);
}

static dfg_tensor *per_token(dfg_graph *g, dfg_tensor *sum, dfg_tensor *tokens) {
    return dfg_div(g, sum, dfg_maximum(g, tokens, dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f)));
}

/* Does the loss type log grpo_stats[i]? */
static bool logs_stat(const grpo_config *c, int i) {
    dfg_grpo_loss_type lt = c->loss.loss_type;
    if (i == 0) return true;                        /* entropy */
    if (i == GRPO_STATS - 1) return lt == DFG_GRPO_LOSS_CISPO;
    return lt != DFG_GRPO_LOSS_CISPO && lt != DFG_GRPO_LOSS_SAPO; /* the clip ratios: the grpo family */
}

/* Clipping, AdamW, and the reset of the micro-batch loop. The first pass's values are the
 * step's loss, kl and gradient norm (before any update of this step); the per-micro-batch
 * metrics (entropy, clip ratios) average over every pass (the first pass never clips: its ratio
 * is 1), so their accumulator runs on until the last pass. */
static dfg_status build_update(dfg_program *p, const grpo_config *c, grpo_state *s, int k) {
    char name[32];
    snprintf(name, sizeof(name), "update.%d", k);
    dfg_graph *g = dfg_graph_new(p, name);
    int n = s->policy->n_params;
    bool last = k == c->iterations - 1;
    dfg_tensor *grads[4 + DFG_MODEL_PARAMS_PER_BLOCK * DFG_MODEL_MAX_LAYERS];
    memcpy(grads, s->grads, sizeof(*grads) * (size_t)n); /* averaged over the ranks in train.k already */
    dfg_tensor *norm = dfg_clip_grad_norm(g, grads, n, c->max_grad_norm); /* in place on the buffers */
    dfg_status st = dfg_nn_adamw_step(p, g, s->policy->params, grads, n, c->adamw, "");
    if (st) return st;
    for (int i = 0; i < n; i++) dfg_assign_fill(g, s->grads[i], 0.0f);
    if (k == 0) { /* over the ranks: the loss their mean (each is its share), kl per token of the batch */
        dfg_metric(g, "loss", dfg_grpo_world_reduce(g, s->acc_loss, DFG_COLL_MEAN, c->W));
        if (c->beta != 0.0f) /* TRL logs it with beta */
            dfg_metric(g, "kl", per_token(g, dfg_grpo_world_reduce(g, s->acc_kl, DFG_COLL_SUM, c->W),
                                          dfg_grpo_world_reduce(g, s->acc_tokens, DFG_COLL_SUM, c->W)));
    }
    /* the loss's statistics, averaged over micro-batches and passes, then over the ranks as TRL's
     * gather does: the mean of the means, the least of the minima, the largest of the maxima */
    dfg_tensor *avg = last ? dfg_scale(g, s->acc_stats, 1.0f / (float)(c->GA * c->iterations)) : NULL;
    dfg_tensor *by[3] = {dfg_grpo_world_reduce(g, avg, DFG_COLL_MEAN, c->W), NULL, NULL};
    if (last && c->W > 1) by[1] = dfg_allreduce(g, avg, DFG_COLL_MIN, c->W), by[2] = dfg_allreduce(g, avg, DFG_COLL_MAX, c->W);
    for (int i = 0; last && i < GRPO_STATS; i++) {
        dfg_tensor *v = i == 2 && by[1] ? by[1] : i == 4 && by[2] ? by[2] : by[0]; /* clip low_min, high_max */
        if (logs_stat(c, i)) dfg_metric(g, grpo_stats[i], dfg_reshape(g, dfg_slice(g, v, 0, i, 1), DFG_SCALAR));
    }
    if (k == 0) dfg_metric(g, "grad_norm", norm);
    dfg_tensor *acc[5] = {s->micro, s->acc_loss, s->acc_kl, s->acc_tokens, s->acc_stats};
    for (int i = 0; i < (last ? 5 : 3); i++) dfg_assign_fill(g, acc[i], 0.0f);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* The supervised warm-up: one step on the right answers (teacher forcing). */
static dfg_status build_sft(dfg_program *p, const grpo_config *c, grpo_state *s) {
    dfg_graph *g = dfg_graph_new(p, "sft");
    dfg_tensor *mask = dfg_slice(g, s->sft_mask, 1, 1, c->T - 1);
    dfg_tensor *logp = dfg_grpo_token_logp(g, s->policy, s->sft_tokens, 1.0f, s->start); /* the task's rows' padding */
    dfg_tensor *tokens = dfg_sum(g, dfg_reshape(g, mask, DFG_SHAPE(-1)), 0);
    dfg_tensor *loss = dfg_neg(g, per_token(g, dfg_sum(g, dfg_masked_sum(g, logp, mask, 1), 0), tokens));
    dfg_status st = dfg_backward_accumulate(g, loss, s->policy->params, s->policy->n_params, s->grads);
    if (st) return st;
    int n = s->policy->n_params;
    dfg_tensor *grads[4 + DFG_MODEL_PARAMS_PER_BLOCK * DFG_MODEL_MAX_LAYERS];
    memcpy(grads, s->grads, sizeof(*grads) * (size_t)n);
    dfg_nn_allreduce_grads(g, grads, n, c->W, c->bucket_bytes);
    dfg_clip_grad_norm(g, grads, n, c->max_grad_norm);
    if ((st = dfg_nn_adamw_step(p, g, s->policy->params, grads, n, c->adamw, ""))) return st;
    for (int i = 0; i < n; i++) dfg_assign_fill(g, s->grads[i], 0.0f);
    dfg_metric(g, "sft_loss", dfg_grpo_world_reduce(g, loss, DFG_COLL_MEAN, c->W));
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* ---------------------------------------------------------------- the program */
static dfg_status declare(dfg_program *p, const grpo_config *c, const grpo_state *s);

static dfg_status build(dfg_program *p, const grpo_config *c, grpo_state *s) {
    dfg_status st = make_state(p, c, s);
    if (!st) st = dfg_stage_host(p, "data", "grpo_data");
    if (!st && c->sft_steps > 0) st = build_sft(p, c, s);
    for (int k = 0; k < c->R && !st; k++)
        if (!(st = build_prefill(p, c, s, k))) st = build_decode(p, c, s, k);
    if (!st) st = dfg_stage_host(p, "reward", "grpo_reward");
    if (!st) st = build_advantages(p, c, s);
    if (!st && c->beta != 0.0f) st = build_logp_stage(p, c, s, "ref", s->ref, s->ref_logp, s->ref_micro);
    if (!st && c->iterations > 1) st = build_logp_stage(p, c, s, "old", s->policy, s->old_logp, s->old_micro);
    for (int k = 0; k < c->iterations && !st; k++)
        if (!(st = build_train(p, c, s, k))) st = build_update(p, c, s, k);
    if (st) return st;
    if (c->sft_steps > 0) { /* the warm-up's steps, then GRPO's */
        static const char *const grpo_stages[] = {"reward", "advantages", "ref", "old"};
        dfg_stage_steps(p, "sft", 0, c->sft_steps - 1);
        for (int k = 0; k < c->R; k++) {
            char name[32];
            rollout_stage(name, sizeof(name), "prefill", c, k);
            dfg_stage_steps(p, name, c->sft_steps, -1);
            rollout_stage(name, sizeof(name), "decode", c, k);
            dfg_stage_steps(p, name, c->sft_steps, -1);
        }
        for (size_t i = 0; i < sizeof(grpo_stages) / sizeof(grpo_stages[0]); i++)
            if (strcmp(grpo_stages[i], "ref") || c->beta != 0.0f)
                if (strcmp(grpo_stages[i], "old") || c->iterations > 1) dfg_stage_steps(p, grpo_stages[i], c->sft_steps, -1);
        for (int k = 0; k < c->iterations; k++) {
            char name[32];
            snprintf(name, sizeof(name), "train.%d", k);
            dfg_stage_steps(p, name, c->sft_steps, -1);
            snprintf(name, sizeof(name), "update.%d", k);
            dfg_stage_steps(p, name, c->sft_steps, -1);
        }
    }
    return declare(p, c, s);
}

/* Does every gradient_accumulation_steps train the same step? Not with bnpo (a token mean per
 * micro-batch), the entropy mask (a quantile per micro-batch), or an entropy bonus normalised
 * per micro-batch (all but dapo and cispo): TRL computes those per micro-batch too. */
static bool ga_keeps_math(const grpo_config *c) {
    const dfg_grpo_loss_config *l = &c->loss;
    bool per_active = l->loss_type == DFG_GRPO_LOSS_DAPO || l->loss_type == DFG_GRPO_LOSS_CISPO;
    return l->loss_type != DFG_GRPO_LOSS_BNPO && l->top_entropy_quantile >= 1.0f && (per_active || l->entropy_coef == 0.0f);
}

/* The divisors d of n in ascending order, up to `most`, whose n / d is a multiple of `unit`; at
 * most DFG_MAX_FIT_VALUES of them. */
static int divisors(int64_t n, int64_t most, int64_t unit, int64_t *out) {
    int k = 0;
    for (int64_t d = 1; d <= n && d <= most && k < DFG_MAX_FIT_VALUES; d++)
        if (n % d == 0 && (n / d) % unit == 0) out[k++] = d;
    return k;
}

/* `dfg fit`: the settings that change only how the step is computed, and those that change what
 * is trained (named when nothing else fits: halvings, the nearest first). */
static void declare_fit_knobs(dfg_program *p, const grpo_config *c) {
    int64_t v[DFG_MAX_FIT_VALUES];
    int n;
    if (ga_keeps_math(c)) /* micro-batches of whole groups only, when share_prompts=1 asks for it */
        dfg_declare_fit_knob(p, "gradient_accumulation_steps", v, divisors(c->N, c->N, c->share_forced ? c->G : 1, v), true);
    dfg_declare_fit_knob(p, "rollout_sub_batches", v, divisors(c->P, GRPO_MAX_SUB_BATCHES, 1, v), true);
    static const char *const math[] = {"prompts_per_step", "num_generations", "max_completion_length"};
    /* c->P is one rank's: prompts_per_step stays a multiple of world_size */
    const int64_t now[] = {c->P, c->G, c->max_new}, least[] = {1, 2, 1}, unit[] = {c->W, 1, 1};
    for (int i = 0; i < 3; i++) {
        n = 0;
        for (int64_t x = now[i] / 2; x >= least[i] && n < DFG_MAX_FIT_VALUES; x /= 2) v[n++] = x * unit[i];
        if (n) dfg_declare_fit_knob(p, math[i], v, n, false);
    }
}

/* What `dfg run --rollouts R --dump OUT` needs to know about this program, and the host state
 * its host stages read (the typed config, validated once per run). */
static dfg_status declare(dfg_program *p, const grpo_config *c, const grpo_state *s) {
    const char *stages[3 + 2 * GRPO_MAX_SUB_BATCHES];
    char names[2 * GRPO_MAX_SUB_BATCHES][32];
    int n = 0;
    stages[n++] = "data";
    if (c->sft_steps > 0) stages[n++] = "sft"; /* the warm-up trains on made data: no rollout to replace */
    for (int k = 0; k < c->R; k++) {
        rollout_stage(names[2 * k], sizeof(names[0]), "prefill", c, k);
        rollout_stage(names[2 * k + 1], sizeof(names[0]), "decode", c, k);
        stages[n++] = names[2 * k], stages[n++] = names[2 * k + 1];
    }
    stages[n++] = "reward";
    /* left-padded prompts (padded_prompts): a rollout says where each row's prompt starts
     * (prompt_start, or an attention_mask the CLI turns into it; neither: no padding) */
    dfg_declare_rollout(p, stages, n, (dfg_tensor *[]){s->tokens, s->mask, s->rewards, s->start}, s->start ? 4 : 3);
    if (c->rollouts_only[0]) dfg_declare_rollouts_only(p, c->rollouts_only);
    if (c->share_prompts) dfg_declare_shared_prompts(p, s->tokens, c->Lp, c->G); /* rollouts must keep a group's prompt */
    static const char *const dumps[][2] = {{"logp", "logp"},           {"ref_logp", "ref_logp"},
                                           {"advantages", "advantages"}, {"loss", "metric.loss"},
                                           {"grad_norm", "metric.grad_norm"}, {"kl", "metric.kl"}};
    for (size_t i = 0; i < sizeof(dumps) / sizeof(dumps[0]); i++)
        if (dfg_find(p, dumps[i][1])) dfg_declare_dump(p, dumps[i][0], dfg_find(p, dumps[i][1]));
    static const char *const lengths[] = {"mean_length", "min_length", "max_length", "clipped_ratio",
                                          "mean_terminated_length", "min_terminated_length", "max_terminated_length"};
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) { /* completions/..., as TRL logs them */
        char name[64];
        snprintf(name, sizeof(name), "metric.completions/%s", lengths[i]);
        dfg_declare_dump(p, name + 7, dfg_find(p, name));
    }
    for (int i = 0; i < GRPO_STATS; i++) /* the loss's metrics under their TRL names */
        if (logs_stat(c, i)) {
            char name[64];
            snprintf(name, sizeof(name), "metric.%s", grpo_stats[i]);
            dfg_declare_dump(p, grpo_stats[i], dfg_find(p, name));
        }
    dfg_host_state(p, "grpo_host_init", "grpo_host_release");
    declare_fit_knobs(p, c);
    return dfg_program_status(p);
}

dfg_status dfg_pipeline(dfg_program *p) {
    grpo_config c = {0};
    dfg_status st = read_config(p, &c);
    if (st) {
        dfg_dataset_free(c.ds);
        return st;
    }
    grpo_state s = {0};
    s.policy = calloc(1, sizeof(*s.policy));
    s.ref = calloc(1, sizeof(*s.ref));
    st = s.policy && s.ref ? build(p, &c, &s) : dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    free(s.policy);
    free(s.ref);
    dfg_dataset_free(c.ds); /* compiling only checks it; the run reads it again */
    return st ? st : dfg_program_status(p);
}

/* ---------------------------------------------------------------- host stages
 * The host stages read the same typed config the pipeline built the program from: read_config
 * runs once per run, on the runtime's program (dfg_host_state), not once per step. */
void grpo_host_release(void *user);

dfg_status grpo_host_init(dfg_program *p, void **user) {
    grpo_config *c = calloc(1, sizeof(*c));
    if (!c) return dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    dfg_status st = read_config(p, c); /* nothing about the task: with --rollouts it never runs */
    if (!st && c->ds && !(c->ds_rows = calloc((size_t)c->P, sizeof(int64_t))))
        st = dfg_program_fail(p, DFG_ERR_NOMEM, "out of memory");
    if (st) {
        grpo_host_release(c);
        return st;
    }
    *user = c;
    return DFG_OK;
}

void grpo_host_release(void *user) {
    grpo_config *c = user;
    if (!c) return;
    dfg_dataset_free(c->ds);
    free(c->ds_rows);
    free(c);
}

dfg_status grpo_data(dfg_host_ctx *ctx) {
    grpo_config *c = dfg_host_user(ctx);
    if (c->rollouts_only[0]) /* dfg run refuses such a plan without --rollouts; another caller may not */
        return dfg_host_fail(ctx, "this plan trains only on fixed rollouts: %s", c->rollouts_only);
    if (!c->ds) return dfg_grpo_make_batch_padded(ctx, &c->task, (int)c->P, (int)c->G, (int)c->Lp);
    dfg_grpo_data_opts o = {.prompts = c->P, .group = c->G, .prompt_len = c->Lp, .pad_id = c->pad_id,
                            .shuffle = c->shuffle, .truncate_left = c->truncate_left};
    return dfg_grpo_dataset_batch(ctx, c->ds, &o, c->ds_rows);
}

dfg_status grpo_reward(dfg_host_ctx *ctx) {
    grpo_config *c = dfg_host_user(ctx);
    if (strcmp(c->reward, "external")) return dfg_grpo_rewards_kind(ctx, (int)c->Lp, c->reward);
    dfg_grpo_reward_opts o = {.group = c->G, .prompt_len = c->Lp, .weights = c->weights, .eos = c->eos,
                              .n_eos = c->n_eos, .ds = c->ds, .rows = c->ds_rows, .all_null_steps = &c->all_null_steps};
    return dfg_grpo_rewards_external(ctx, dfg_host_reward_source(ctx), &o);
}
