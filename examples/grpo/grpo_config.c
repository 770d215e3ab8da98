/* grpo_config.c - the GRPO pipeline's typed settings (dfg_grpo_config.h): read, defaulted,
 * checked. Plain C over the public settings API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_grpo_config.h"
#include "dfg_grpo_async.h"
#include "dfg_grpo_eval.h"
#include "dfg_runtime.h"



/* Where the prompts and rewards come from: dataset, shuffle_dataset, truncate_prompts, reward,
 * reward_funcs, reward_weights, eos_token_id, pad_token_id, mask_truncated_completions. */
static dfg_status read_data_config(dfg_program *p, dfg_grpo_config *c) {
    char err[1024];
    const char *dataset = dfg_setting_str(p, "dataset", "");
    c->shuffle = dfg_setting_bool(p, "shuffle_dataset", true);
    c->truncate_left = dfg_setting_enum(p, "truncate_prompts", "left") == 0;
    c->mask_truncated = dfg_setting_bool(p, "mask_truncated_completions", false);
    c->reward = dfg_setting_str(p, "reward", *dataset ? "external" : "mixed");
    c->n_funcs = dfg_setting_list(p, "reward_funcs", "reward");
    int n_weights = dfg_setting_list(p, "reward_weights", "");
    char eos_default[16];
    snprintf(eos_default, sizeof(eos_default), "%d", DFG_VOCAB_EOS);
    c->n_eos = dfg_setting_list(p, "eos_token_id", eos_default);
    int64_t pad = dfg_setting_int(p, "pad_token_id", DFG_VOCAB_PAD);
    if (dfg_program_status(p)) return dfg_program_status(p);
    if (c->n_eos < 1 || c->n_eos > DFG_GRPO_MAX_EOS)
        return dfg_program_fail(p, DFG_ERR_ARG, "eos_token_id must be 1 .. %d token ids separated by ','", DFG_GRPO_MAX_EOS);
    for (int i = 0; i < c->n_eos; i++) c->eos[i] = (int32_t)dfg_program_list_number(p, "eos_token_id", i);
    if (!*dataset) /* a built-in task's rewards know its own EOS only, whatever a model's config says */
        c->eos[0] = DFG_VOCAB_EOS, c->n_eos = 1;
    c->pad_id = (int32_t)pad;
    if (strcmp(c->reward, "external") && !dfg_reward_by_name(c->reward))
        return dfg_program_fail(p, DFG_ERR_ARG, "reward must be one of %s or external, got '%s'", dfg_reward_names(), c->reward);
    if (*dataset && strcmp(c->reward, "external"))
        return dfg_program_fail(p, DFG_ERR_ARG, "a dataset's prompts have no built-in answers: reward must be external "
                                "(--reward-cmd or --reward-lib at run time), got '%s'", c->reward);
    /* reward_funcs: the names the reward program declares, in its order */
    if (c->n_funcs < 1 || c->n_funcs > DFG_REWARD_MAX_FUNCS)
        return dfg_program_fail(p, DFG_ERR_ARG, "reward_funcs must be 1 .. %d names separated by ','", DFG_REWARD_MAX_FUNCS);
    for (int i = 0; i < c->n_funcs; i++) {
        snprintf(c->funcs[i], sizeof(c->funcs[0]), "%s", dfg_program_list_item(p, "reward_funcs", i));
        c->weights[i] = n_weights ? (float)dfg_program_list_number(p, "reward_weights", i) : 1.0f;
    }
    if (n_weights && n_weights != c->n_funcs)
        return dfg_program_fail(p, DFG_ERR_ARG, "reward_weights has %d numbers, reward_funcs %d names: one weight per "
                                "reward function", n_weights, c->n_funcs);
    if (!strcmp(c->reward, "external")) /* the rule a run's reward program must meet, said where the names are fixed */
        dfg_program_note(p, "reward=external: the reward program (dfg run --reward-cmd) or plugin (--reward-lib) must "
                         "declare the functions reward_funcs=%s, in this order (tools/reward_server.py --list prints a "
                         "module's; docs/rewards.md)", dfg_program_str(p, "reward_funcs"));
    if (*dataset && dfg_dataset_open(dataset, 0, &c->ds, err, sizeof(err))) return dfg_program_fail(p, DFG_ERR_ARG, "%s", err);
    return DFG_OK;
}

/* Every prompt id (and the EOS and pad ids) must be a row of the model's embedding. */
static dfg_status check_dataset_vocab(dfg_program *p, const dfg_grpo_config *c) {
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
                                        dfg_program_str(p, "dataset"), (long long)dfg_dataset_line(c->ds, r), (long long)i,
                                        ids[i], (long long)(V - 1));
    }
    return DFG_OK;
}

/* Prompts longer than max_prompt_length, counted at compile time: truncate_prompts=left cuts them
 * (said in a note, since a cut prompt may lose the question), =error refuses the plan here rather
 * than at the first step that draws one. */
static dfg_status check_prompt_lengths(dfg_program *p, const dfg_grpo_config *c) {
    int64_t rows = dfg_dataset_rows(c->ds), n_long = 0, longest = 0, first = -1, first_len = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = 0;
        dfg_dataset_prompt(c->ds, r, &len);
        if (len <= c->Lp) continue;
        if (first < 0) first = r, first_len = len;
        n_long++;
        longest = len > longest ? len : longest;
    }
    if (!n_long) return DFG_OK;
    const char *path = dfg_program_str(p, "dataset");
    if (!c->truncate_left)
        return dfg_program_fail(p, DFG_ERR_ARG, "truncate_prompts=error: %lld of the %lld prompts of %s are longer than "
                                "max_prompt_length %lld (the first at line %lld, %lld tokens; the longest %lld): raise "
                                "max_prompt_length or set truncate_prompts=left", (long long)n_long, (long long)rows, path,
                                (long long)c->Lp, (long long)dfg_dataset_line(c->ds, first), (long long)first_len,
                                (long long)longest);
    dfg_program_note(p, "%s%lld of the %lld prompts of %s are longer than max_prompt_length %lld (the longest %lld "
                     "tokens): they are cut from the left, keeping their last %lld tokens (truncate_prompts=left; metric "
                     "prompts_truncated)", n_long == rows ? "every prompt: " : "", (long long)n_long, (long long)rows, path,
                     (long long)c->Lp, (long long)longest, (long long)c->Lp);
    return DFG_OK;
}

/* The built-in task (task, digits): read only without a dataset, whose plan has none. */
static dfg_status read_task(dfg_program *p, dfg_grpo_config *c) {
    char err[256];
    if (c->ds) {
        const char *given = dfg_program_has(p, "task") ? "task" : dfg_program_has(p, "digits") ? "digits" : NULL;
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
static dfg_status read_padding(dfg_program *p, dfg_grpo_config *c, int padded) {
    bool is_auto = padded == DFG_GRPO_AUTO, yes = padded == DFG_GRPO_YES;
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
    else if (!c->ds && c->max_new < c->task.max_completion_len) /* its batches hold its longest completion */
        snprintf(c->rollouts_only, sizeof(c->rollouts_only), "task '%s' (digits %d) has completions of up to %d "
                 "tokens, more than max_completion_length %lld", c->task.name, c->task.digits,
                 c->task.max_completion_len, (long long)c->max_new);
    return DFG_OK;
}

/* Multi-turn episodes with tools: the calculator task's built-in tool, or the tools an environment
 * program serves (tools=a,b; dfg run --env-cmd). Decode then keeps one column a row, and the
 * decode and tools stages loop until every episode is over. */
static dfg_status read_tools(dfg_program *p, dfg_grpo_config *c) {
    int named = dfg_setting_list(p, "tools", "");
    c->tools = named > 0 || (!c->ds && c->task.name && !strcmp(c->task.name, "calculator"));
    c->n_tools = named;
    /* TRL's None: no limit but the budget; each round adds a token at least, so max_new bounds it */
    c->max_tool_rounds = dfg_setting_int(p, "max_tool_calling_iterations", c->max_new);
    if (c->max_tool_rounds > c->max_new) c->max_tool_rounds = c->max_new;
    if (!c->tools) return dfg_program_status(p);
    if (c->R > 1)
        return dfg_program_fail(p, DFG_ERR_ARG, "a multi-turn rollout (tools) needs rollout_sub_batches=1, got %lld",
                                (long long)c->R);
    return dfg_program_status(p);
}

/* decode_tail: auto (N / 8 rows, for N >= 16) or a row count below N; 0 (or a plan whose decode
 * runs every step, or in sub-batches) has none */
static dfg_status read_tail(dfg_program *p, dfg_grpo_config *c, int64_t tail) {
    bool automatic = tail == DFG_SETTING_AUTO;
    long n = automatic ? (c->N >= 16 ? (long)(c->N / 8) : 0) : (long)tail;
    if (!automatic && n >= c->N)
        return dfg_program_fail(p, DFG_ERR_ARG, "decode_tail must be auto or 0 .. %lld (below the %lld rows a rank "
                                "decodes), got %ld", (long long)(c->N - 1), (long long)c->N, n);
    if (n > 0 && (!c->early_exit || c->R > 1)) {
        if (!automatic)
            return dfg_program_fail(p, DFG_ERR_ARG, "decode_tail=%ld needs decode_early_exit=true and "
                                    "rollout_sub_batches=1", n);
        n = 0;
    }
    c->tail = n;
    return DFG_OK;
}

/* length_buckets: how many completion widths the scoring and training stages are built for,
 * halving from max_completion_length (auto: down to 8 tokens, at most 6 widths; 1: the full
 * width only, as before). Memory is planned for the widest; a step runs the narrowest that holds
 * its batch (TRL pads to the batch's longest completion; this pads to at most twice it). */
/* Up to n halvings of top (rounded up), none below floor after the first, distinct, into out
 * narrowest first; returns how many. */
static int halvings(int64_t top, long n, int64_t floor, int64_t *out) {
    int64_t w[DFG_GRPO_MAX_WIDTHS];
    int k = 0;
    for (int64_t x = top; k < n && k < DFG_GRPO_MAX_WIDTHS && x >= 1 && (k == 0 || x >= floor); x = (x + 1) / 2) {
        if (k && x == w[k - 1]) break;
        w[k++] = x;
    }
    for (int i = 0; i < k; i++) out[i] = w[k - 1 - i];
    return k;
}

static void read_widths(dfg_grpo_config *c, int64_t buckets) {
    bool automatic = buckets == DFG_SETTING_AUTO; /* the table bounds a count to 1 .. DFG_GRPO_MAX_WIDTHS */
    c->n_widths = halvings(c->max_new, automatic ? 6 : (long)buckets, automatic ? 8 : 1, c->widths);
}

/* prompt_buckets (auto, or a count; 1: off): the prompt widths, halvings of max_prompt_length
 * (auto: down to 16, at most 2, for left-padded prompts in one rollout batch; else 1). Each
 * width is one more copy of every scoring and training stage per completion width: a plan
 * compiles and loads in time that grows faster than the copies (Qwen2.5-0.5B shape with 6
 * completion widths: 4.8 s with one prompt width, 9.3 s with 2, 26 s with 3). */
static dfg_status read_pwidths(dfg_program *p, dfg_grpo_config *c, int64_t buckets) {
    bool automatic = buckets == DFG_SETTING_AUTO; /* the table bounds a count to 1 .. DFG_GRPO_MAX_PWIDTHS */
    long n = automatic ? (c->padded && c->R == 1 ? 2 : 1) : (long)buckets;
    if (n > 1 && (!c->padded || c->R > 1))
        return dfg_program_fail(p, DFG_ERR_ARG, "prompt_buckets=%ld needs left-padded prompts (a dataset, or "
                                "padded_prompts) and rollout_sub_batches=1", n);
    /* floor 2: a prompt token for prefill, one for decode */
    c->n_pwidths = halvings(c->Lp, n, automatic ? 16 : 2, c->pwidths);
    return DFG_OK;
}

dfg_sampling dfg_grpo_sample_settings(const dfg_grpo_config *c) {
    return (dfg_sampling){c->temperature, c->top_k, c->top_p, c->min_p, c->repetition_penalty};
}

bool dfg_grpo_split_free(const dfg_grpo_config *c) {
    const dfg_grpo_loss_config *l = &c->loss;
    bool per_active = l->loss_type == DFG_GRPO_LOSS_DAPO || l->loss_type == DFG_GRPO_LOSS_CISPO ||
                      l->loss_type == DFG_GRPO_LOSS_VESPO;
    return l->loss_type != DFG_GRPO_LOSS_BNPO && l->top_entropy_quantile >= 1.0f && (per_active || l->entropy_coef == 0.0f);
}

/* length_chunks (auto, or a count; 1: off): how many chunks of whole groups the scoring and
 * training passes take a batch in when there are several widths, so that a few long completions
 * cost their chunk's rows at full width and not the whole batch's. Where the loss does not
 * depend on the split (dfg_grpo_split_free) the groups are sorted by length and auto takes the
 * fewest chunks >= 8 (or one group each) of at most a micro-batch's rows each; where it does,
 * the chunks are the micro-batches (length_chunks = gradient_accumulation_steps, whole groups,
 * one process) run narrowest first. */
static dfg_status read_chunks(dfg_program *p, dfg_grpo_config *c, int64_t chunks) {
    bool automatic = chunks == DFG_SETTING_AUTO;
    long k = automatic ? 0 : (long)chunks;
    if (!automatic && k > c->P)
        return dfg_program_fail(p, DFG_ERR_ARG, "length_chunks must be auto or 1 .. prompts_per_step (per rank) %lld, "
                                "got %ld", (long long)c->P, k);
    c->chunks = 0, c->chunk_groups = 0, c->regroup = dfg_grpo_split_free(c);
    bool whole = c->n_micro % c->G == 0;
    if (c->n_widths < 2 || k == 1) return DFG_OK;
    if (c->regroup) {
        if (automatic) /* the fewest >= min(8, P) dividing P whose chunks fit in a micro-batch */
            for (int64_t d = c->P < 8 ? c->P : 8; d <= c->P && !k; d++)
                if (c->P % d == 0 && d >= c->GA && (c->P / d) * c->G <= c->n_micro && c->P / d <= DFG_GRPO_MAX_CHUNK_GROUPS)
                    k = d;
        if (!automatic && (c->P % k || k < c->GA || c->P / k > DFG_GRPO_MAX_CHUNK_GROUPS))
            return dfg_program_fail(p, DFG_ERR_ARG, "length_chunks %ld must divide prompts_per_step (per rank) %lld and "
                                    "be at least gradient_accumulation_steps %lld (a chunk holds whole groups, no more "
                                    "rows than a micro-batch, at most %d groups)", k, (long long)c->P, (long long)c->GA, DFG_GRPO_MAX_CHUNK_GROUPS);
    } else {
        bool can = c->GA > 1 && whole && c->W == 1; /* micro-batches of whole groups, no collective inside */
        if (!automatic && (k != c->GA || !can))
            return dfg_program_fail(p, DFG_ERR_ARG, "length_chunks %ld: with this loss (%s) a step's math depends on "
                                    "its micro-batches, so the chunks can only be them: length_chunks = "
                                    "gradient_accumulation_steps (%lld), of whole groups, world_size 1; or 1", k,
                                    "bnpo, top_entropy_quantile < 1 or a per-micro-batch entropy bonus", (long long)c->GA);
        k = can ? c->GA : 0;
    }
    if (k > 1) c->chunks = k, c->chunk_groups = c->P / k;
    return DFG_OK;
}

/* TRL 1.10's loss settings: the importance-sampling correction of the sampler's log-probs, the
 * off-policy sequence mask, vespo's weights, the bias-corrected KL. TRL's None: an infinite bound
 * (clip_max 0, clip_min unset) and an unset threshold. */
static void read_sampling_config(dfg_program *p, dfg_grpo_loss_config *l) {
    l->sampling_correction = dfg_setting_bool(p, "vllm_importance_sampling_correction", true);
    int mode = dfg_setting_enum(p, "vllm_importance_sampling_mode", "sequence_mask"); /* the enum's order */
    l->sampling_mode = mode < 0 ? DFG_GRPO_SAMPLING_SEQUENCE_MASK : (dfg_grpo_sampling_mode)mode;
    double hi = dfg_setting_float(p, "vllm_importance_sampling_clip_max", 3.0);
    l->sampling_clip_max = hi > 0 ? (float)hi : INFINITY;
    l->sampling_clip_min = dfg_program_has(p, "vllm_importance_sampling_clip_min")
                               ? (float)dfg_setting_float(p, "vllm_importance_sampling_clip_min", 0.0) : -INFINITY;
    l->off_policy_mask = dfg_program_has(p, "off_policy_mask_threshold");
    if (l->off_policy_mask) l->off_policy_threshold = (float)dfg_setting_float(p, "off_policy_mask_threshold", 0.0);
    l->bias_correction_kl = dfg_setting_bool(p, "use_bias_correction_kl", false);
    l->vespo_k_pos = (float)dfg_setting_float(p, "vespo_k_pos", 2.0);
    l->vespo_lambda_pos = (float)dfg_setting_float(p, "vespo_lambda_pos", 3.0);
    l->vespo_k_neg = (float)dfg_setting_float(p, "vespo_k_neg", 3.0);
    l->vespo_lambda_neg = (float)dfg_setting_float(p, "vespo_lambda_neg", 2.0);
}

/* TRL's GRPOConfig checks of the same settings, and its trainer's refusal of vespo with a
 * sequence-level correction (dfg always has a sampler: its own decode). */
static dfg_status check_sampling_config(dfg_program *p, const dfg_grpo_loss_config *l) {
    if (!l->sampling_correction) return DFG_OK;
    bool truncate = l->sampling_mode == DFG_GRPO_SAMPLING_TOKEN_TRUNCATE || l->sampling_mode == DFG_GRPO_SAMPLING_SEQUENCE_TRUNCATE;
    if (isfinite(l->sampling_clip_min) && isfinite(l->sampling_clip_max) && !(l->sampling_clip_min < l->sampling_clip_max))
        return dfg_program_fail(p, DFG_ERR_ARG, "vllm_importance_sampling_clip_min %g must be less than "
                                "vllm_importance_sampling_clip_max %g", (double)l->sampling_clip_min, (double)l->sampling_clip_max);
    if (truncate && !isfinite(l->sampling_clip_min) && !isfinite(l->sampling_clip_max))
        return dfg_program_fail(p, DFG_ERR_ARG, "vllm_importance_sampling_mode=%s needs a bound: set "
                                "vllm_importance_sampling_clip_min or a vllm_importance_sampling_clip_max > 0",
                                dfg_program_str(p, "vllm_importance_sampling_mode"));
    if (l->loss_type == DFG_GRPO_LOSS_VESPO && !(l->sampling_mode == DFG_GRPO_SAMPLING_TOKEN_TRUNCATE ||
                                                 l->sampling_mode == DFG_GRPO_SAMPLING_TOKEN_MASK))
        return dfg_program_fail(p, DFG_ERR_ARG, "loss_type=vespo needs vllm_importance_sampling_mode token_truncate or "
                                "token_mask (got %s), or vllm_importance_sampling_correction=false, as TRL's",
                                dfg_program_str(p, "vllm_importance_sampling_mode"));
    return DFG_OK;
}

/* max_steps and the learning-rate schedule. A dfg step is a rollout batch and its num_iterations
 * updates, each an optimizer step (TRL's global step), so the schedule spans (max_steps -
 * sft_steps) x num_iterations of them; the sft warm-up's steps, counted in max_steps, run at
 * learning_rate before it. */
static dfg_status read_schedule(dfg_program *p, dfg_grpo_config *c, double lr) {
    c->max_steps = dfg_setting_int(p, "max_steps", -1);
    if (dfg_program_status(p)) return dfg_program_status(p);
    if (c->max_steps == 0)
        return dfg_program_fail(p, DFG_ERR_ARG, "max_steps must be >= 1, or -1 (not set)");
    if (c->max_steps > 0 && c->max_steps <= c->sft_steps)
        return dfg_program_fail(p, DFG_ERR_ARG, "max_steps %lld must exceed sft_steps %lld (the warm-up's steps "
                                "count in it)", (long long)c->max_steps, (long long)c->sft_steps);
    int64_t total = c->max_steps > 0 ? (c->max_steps - c->sft_steps) * c->iterations : 0;
    return dfg_lr_schedule_from_settings(p, lr, total, c->sft_steps, &c->lr_schedule);
}

/* Reads every setting (recording its default in the plan) and checks the ranges. */
dfg_status dfg_grpo_read_config(dfg_program *p, dfg_grpo_config *c) {
    dfg_status st = read_data_config(p, c);
    if (!st) st = read_task(p, c);
    if (st) return st;
    c->P = dfg_setting_int(p, "prompts_per_step", 8);
    c->G = dfg_setting_int(p, "num_generations", 8);
    c->Lp = dfg_setting_int(p, "max_prompt_length", c->ds ? dfg_dataset_max_prompt_len(c->ds) : c->task.prompt_len);
    c->max_new = dfg_setting_int(p, "max_completion_length", c->ds ? 256 : c->task.max_completion_len + 1);
    c->GA = dfg_setting_int(p, "gradient_accumulation_steps", 1);
    c->R = dfg_setting_int(p, "rollout_sub_batches", 1);
    int64_t world = dfg_setting_int(p, "world_size", 1);
    double bucket_mb = dfg_setting_float(p, "ddp_bucket_cap_mb", 25.0); /* PyTorch DDP's default */
    c->iterations = dfg_setting_int(p, "num_iterations", 1);
    c->sft_steps = dfg_setting_int(p, "sft_steps", 0);
    int64_t buckets = dfg_setting_int_auto(p, "length_buckets", DFG_SETTING_AUTO);
    /* the prompt's columns likewise: left-padded prompts run at the narrowest width that holds
     * the batch's longest (auto: max_prompt_length and its half when that is 16 or more) */
    int64_t pbuckets = dfg_setting_int_auto(p, "prompt_buckets", DFG_SETTING_AUTO);
    int64_t chunks = dfg_setting_int_auto(p, "length_chunks", DFG_SETTING_AUTO);
    /* the decode loop ends once every row has its EOS, as generate() does (false: always
     * max_completion_length steps, the fixed-shape loop; the tokens are the same) */
    c->early_exit = dfg_setting_bool(p, "decode_early_exit", true);
    /* the decode loop's tail: when at most this many rows still generate, the rest of the loop
     * runs on them alone (auto: an eighth of the batch, from 16 rows; 0: never) */
    int64_t tail = dfg_setting_int_auto(p, "decode_tail", DFG_SETTING_AUTO);
    /* batch-invariant kernels: a token's log-prob is the same float when decode samples it and
     * when training scores it, so num_iterations > 1 takes the old log-probs from the sampler */
    c->invariant = dfg_setting_bool(p, "batch_invariant", false);
    int share = dfg_setting_enum(p, "share_prompts", "auto"); /* auto: when groups fit micro-batches */
    int padded = dfg_setting_enum(p, "padded_prompts", "auto");
    c->temperature = (float)dfg_setting_float(p, "temperature", 1.0);
    c->top_k = (int)dfg_setting_int(p, "top_k", 0);
    c->top_p = (float)dfg_setting_float(p, "top_p", 1.0);
    c->min_p = (float)dfg_setting_float(p, "min_p", 0.0); /* TRL's None */
    c->repetition_penalty = (float)dfg_setting_float(p, "repetition_penalty", 1.0);
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
    read_sampling_config(p, &c->loss);
    int lt = dfg_setting_enum(p, "loss_type", "dapo"); /* the table's values are the enums' order */
    int lv = dfg_setting_enum(p, "importance_sampling_level", "token");
    int sc = dfg_setting_enum(p, "scale_rewards", "group");
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
    read_widths(c, buckets);
    if ((st = read_pwidths(p, c, pbuckets))) return st;
    if ((st = read_tools(p, c)) || (st = read_tail(p, c, tail))) return st;
    c->log_completions = dfg_setting_bool(p, "log_completions", false);
    c->logging_steps = dfg_setting_int(p, "logging_steps", 10);
    c->n_print = dfg_setting_int(p, "num_completions_to_print", c->N); /* TRL's None: every row */

    dfg_model_config small = dfg_gpt2_config_default();
    small.n_layer = 2, small.n_head = 4, small.n_embd = 64, small.vocab_size = c->ds ? dfg_vocab_size() : c->task.vocab_size;
    small.block_size = c->T > 0 && c->T < (1 << 20) ? (int)c->T : 1;
    st = dfg_model_config_from_settings(p, small, &c->model);
    if (!st) st = dfg_lora_config_from_settings(p, c->model.arch, &c->model.lora); /* PEFT's LoRA, QLoRA */
    if (st) return st;
    /* dfg's 1e-3 trains the tasks' small models from scratch; a pretrained model (model=DIR) is
     * fine-tuned, and TRL's 1e-6 is the default that does not wreck it */
    bool pretrained = *dfg_program_str(p, "model"), lr_given = dfg_program_has(p, "learning_rate");
    dfg_adamw_config adamw = {.lr = pretrained ? 1e-6f : 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
    if ((st = dfg_adamw_config_from_settings(p, adamw, &c->adamw))) return st;
    if (pretrained && !lr_given)
        dfg_program_note(p, "learning_rate is 1e-06 (TRL's default for fine-tuning a pretrained model; the built-in "
                         "tasks' small models from scratch use 1e-3): --set learning_rate=... to change it");

    if (c->ds && ((st = check_dataset_vocab(p, c)) || (st = check_prompt_lengths(p, c)))) return st;
    if (!c->ds && c->model.vocab_size < c->task.vocab_size)
        return dfg_program_fail(p, DFG_ERR_ARG, "vocab_size %d is smaller than the task's vocabulary (%d)",
                                c->model.vocab_size, c->task.vocab_size);
    if (c->P < 1 || c->G < 2 || c->N > (1 << 20))
        return dfg_program_fail(p, DFG_ERR_ARG, "need prompts_per_step >= 1 and num_generations >= 2 (a group to "
                                "compare), got %lld x %lld", (long long)c->P, (long long)c->G);
    if (c->GA < 1 || c->N % c->GA)
        return dfg_program_fail(p, DFG_ERR_ARG, "gradient_accumulation_steps %lld must divide the %lld sequences",
                                (long long)c->GA, (long long)c->N);
    if (c->R < 1 || c->R > DFG_GRPO_MAX_SUB_BATCHES || c->P % c->R)
        return dfg_program_fail(p, DFG_ERR_ARG, "rollout_sub_batches %lld must divide prompts_per_step %lld (whole "
                                "groups per sub-batch) and be at most %d", (long long)c->R, (long long)c->P,
                                DFG_GRPO_MAX_SUB_BATCHES);
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
    if ((st = check_sampling_config(p, l))) return st;
    double lr = lr_given ? dfg_program_float(p, "learning_rate") : pretrained ? 1e-6 : 1e-3;
    if ((st = read_schedule(p, c, lr))) return st;
    c->n_micro = c->N / c->GA;
    bool whole_groups = c->n_micro % c->G == 0;
    if (share == DFG_GRPO_YES && !whole_groups)
        return dfg_program_fail(p, DFG_ERR_ARG, "share_prompts=1 computes each prompt once for its group, so a "
                                "micro-batch (%lld sequences) must hold whole groups of num_generations %lld: change "
                                "gradient_accumulation_steps or set share_prompts=0", (long long)c->n_micro, (long long)c->G);
    c->share_prompts = whole_groups && share != DFG_GRPO_NO;
    c->share_forced = share == DFG_GRPO_YES;
    c->loss.beta = c->beta;
    c->loss.n_total = c->N;
    c->loss.max_completion_length = c->max_new;
    c->loss.micro_batches = (int)c->GA;
    c->loss.world = c->W;
    dfg_status st2 = read_chunks(p, c, chunks);
    if (!st2 && c->chunks) c->loss.micro_batches = (int)c->chunks; /* a chunk is a micro-batch of the loss */
    c->async_rollouts = dfg_setting_int(p, "async_rollouts", 0); /* one-step-off rollouts (grpo_async.c) */
    c->max_staleness = dfg_setting_int(p, "max_staleness", 1);
    if (!st2) st2 = dfg_program_status(p) ? dfg_program_status(p) : dfg_grpo_async_check(p, c);
    if (!st2) st2 = dfg_grpo_read_eval(p, c); /* multi_objective_aggregation, eval_dataset (grpo_eval.c) */
    return st2;
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
void dfg_grpo_declare_fit_knobs(dfg_program *p, const dfg_grpo_config *c) {
    int64_t v[DFG_MAX_FIT_VALUES];
    int n;
    if (dfg_grpo_split_free(c)) /* micro-batches of whole groups only, when share_prompts=1 asks for it */
        dfg_declare_fit_knob(p, "gradient_accumulation_steps", v, divisors(c->N, c->N, c->share_forced ? c->G : 1, v), true);
    if (!c->tools) /* a multi-turn rollout decodes every row at once (read_tools) */
        dfg_declare_fit_knob(p, "rollout_sub_batches", v, divisors(c->P, DFG_GRPO_MAX_SUB_BATCHES, 1, v), true);
    static const char *const math[] = {"prompts_per_step", "num_generations", "max_completion_length"};
    /* c->P is one rank's: prompts_per_step stays a multiple of world_size */
    const int64_t now[] = {c->P, c->G, c->max_new}, least[] = {1, 2, 1}, unit[] = {c->W, 1, 1};
    for (int i = 0; i < 3; i++) {
        n = 0;
        for (int64_t x = now[i] / 2; x >= least[i] && n < DFG_MAX_FIT_VALUES; x /= 2) v[n++] = x * unit[i];
        if (n) dfg_declare_fit_knob(p, math[i], v, n, false);
    }
    /* the model's own state: adapters on a frozen base (TRL's usual LoRA rank 16), then that
     * base in 4 bits */
    if (c->model.lora.r == 0) dfg_declare_fit_knob(p, "lora_r", (int64_t[]){16}, 1, false);
    else if (!c->model.lora.load_in_4bit) dfg_declare_fit_knob(p, "load_in_4bit", (int64_t[]){1}, 1, false);
}
