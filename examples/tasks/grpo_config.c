/* grpo_config.c - the GRPO pipeline's typed settings (dfg_grpo_config.h): read, defaulted,
 * checked. Plain C over the public settings API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_grpo_config.h"
#include "dfg_runtime.h"



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
static dfg_status read_data_config(dfg_program *p, dfg_grpo_config *c) {
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
                                        dfg_program_setting(p, "dataset"), (long long)dfg_dataset_line(c->ds, r), (long long)i,
                                        ids[i], (long long)(V - 1));
    }
    return DFG_OK;
}

/* The built-in task (task, digits): read only without a dataset, whose plan has none. */
static dfg_status read_task(dfg_program *p, dfg_grpo_config *c) {
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
static dfg_status read_padding(dfg_program *p, dfg_grpo_config *c, const char *padded) {
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

/* decode_tail: auto (N / 8 rows, for N >= 16) or a row count below N; 0 (or a plan whose decode
 * runs every step, or in sub-batches) has none */
static dfg_status read_tail(dfg_program *p, dfg_grpo_config *c, const char *tail) {
    char *end = NULL;
    bool automatic = !strcmp(tail, "auto");
    long n = automatic ? (c->N >= 16 ? (long)(c->N / 8) : 0) : strtol(tail, &end, 10);
    if (!automatic && (end == tail || *end || n < 0 || n >= c->N))
        return dfg_program_fail(p, DFG_ERR_ARG, "decode_tail must be auto or 0 .. %lld (below the %lld rows a rank "
                                "decodes), got '%s'", (long long)(c->N - 1), (long long)c->N, tail);
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

static dfg_status read_widths(dfg_program *p, dfg_grpo_config *c, const char *buckets) {
    char *end = NULL;
    long n = strcmp(buckets, "auto") ? strtol(buckets, &end, 10) : 6;
    if (strcmp(buckets, "auto") && (end == buckets || *end || n < 1 || n > DFG_GRPO_MAX_WIDTHS))
        return dfg_program_fail(p, DFG_ERR_ARG, "length_buckets must be auto or 1 .. %d, got '%s'", DFG_GRPO_MAX_WIDTHS,
                                buckets);
    c->n_widths = halvings(c->max_new, n, strcmp(buckets, "auto") ? 1 : 8, c->widths);
    return DFG_OK;
}

/* prompt_buckets (auto, or a count; 1: off): the prompt widths, halvings of max_prompt_length
 * (auto: down to 16, at most 2, for left-padded prompts in one rollout batch; else 1). Each
 * width is one more copy of every scoring and training stage per completion width: a plan
 * compiles and loads in time that grows faster than the copies (Qwen2.5-0.5B shape with 6
 * completion widths: 4.8 s with one prompt width, 9.3 s with 2, 26 s with 3). */
static dfg_status read_pwidths(dfg_program *p, dfg_grpo_config *c, const char *buckets) {
    char *end = NULL;
    bool automatic = !strcmp(buckets, "auto");
    long n = automatic ? (c->padded && c->R == 1 ? 2 : 1) : strtol(buckets, &end, 10);
    if (!automatic && (end == buckets || *end || n < 1 || n > DFG_GRPO_MAX_PWIDTHS))
        return dfg_program_fail(p, DFG_ERR_ARG, "prompt_buckets must be auto or 1 .. %d, got '%s'", DFG_GRPO_MAX_PWIDTHS,
                                buckets);
    if (n > 1 && (!c->padded || c->R > 1))
        return dfg_program_fail(p, DFG_ERR_ARG, "prompt_buckets=%ld needs left-padded prompts (a dataset, or "
                                "padded_prompts) and rollout_sub_batches=1", n);
    /* floor 2: a prompt token for prefill, one for decode */
    c->n_pwidths = halvings(c->Lp, n, automatic ? 16 : 2, c->pwidths);
    return DFG_OK;
}

bool dfg_grpo_split_free(const dfg_grpo_config *c) {
    const dfg_grpo_loss_config *l = &c->loss;
    bool per_active = l->loss_type == DFG_GRPO_LOSS_DAPO || l->loss_type == DFG_GRPO_LOSS_CISPO;
    return l->loss_type != DFG_GRPO_LOSS_BNPO && l->top_entropy_quantile >= 1.0f && (per_active || l->entropy_coef == 0.0f);
}

/* length_chunks (auto, or a count; 1: off): how many chunks of whole groups the scoring and
 * training passes take a batch in when there are several widths, so that a few long completions
 * cost their chunk's rows at full width and not the whole batch's. Where the loss does not
 * depend on the split (dfg_grpo_split_free) the groups are sorted by length and auto takes the
 * fewest chunks >= 8 (or one group each) of at most a micro-batch's rows each; where it does,
 * the chunks are the micro-batches (length_chunks = gradient_accumulation_steps, whole groups,
 * one process) run narrowest first. */
static dfg_status read_chunks(dfg_program *p, dfg_grpo_config *c, const char *chunks) {
    char *end = NULL;
    bool automatic = !strcmp(chunks, "auto");
    long k = automatic ? 0 : strtol(chunks, &end, 10);
    if (!automatic && (end == chunks || *end || k < 1 || k > c->P))
        return dfg_program_fail(p, DFG_ERR_ARG, "length_chunks must be auto or 1 .. prompts_per_step (per rank) %lld, "
                                "got '%s'", (long long)c->P, chunks);
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

/* Reads every setting (recording its default in the plan) and checks the ranges. */
dfg_status dfg_grpo_read_config(dfg_program *p, dfg_grpo_config *c) {
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
    const char *buckets = dfg_setting_str(p, "length_buckets", "auto");
    /* the prompt's columns likewise: left-padded prompts run at the narrowest width that holds
     * the batch's longest (auto: max_prompt_length and its half when that is 16 or more) */
    const char *pbuckets = dfg_setting_str(p, "prompt_buckets", "auto");
    const char *chunks = dfg_setting_str(p, "length_chunks", "auto");
    /* the decode loop ends once every row has its EOS, as generate() does (false: always
     * max_completion_length steps, the fixed-shape loop; the tokens are the same) */
    c->early_exit = dfg_setting_bool(p, "decode_early_exit", true);
    /* the decode loop's tail: when at most this many rows still generate, the rest of the loop
     * runs on them alone (auto: an eighth of the batch, from 16 rows; 0: never) */
    const char *tail = dfg_setting_str(p, "decode_tail", "auto");
    /* batch-invariant kernels: a token's log-prob is the same float when decode samples it and
     * when training scores it, so num_iterations > 1 takes the old log-probs from the sampler */
    c->invariant = dfg_setting_bool(p, "batch_invariant", false);
    bool cuda = !strcmp(dfg_setting_str(p, "target", "cpu"), "cuda");
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
    if (c->invariant && cuda)
        return dfg_program_fail(p, DFG_ERR_ARG, "batch_invariant=true needs --target cpu: the CPU kernels have the "
                                "batch-invariant forms; cuBLASLt and cuDNN pick kernels by the shapes they are given");
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
    if ((st = read_widths(p, c, buckets))) return st;
    if ((st = read_pwidths(p, c, pbuckets))) return st;
    if ((st = read_tail(p, c, tail))) return st;

    dfg_model_config small = dfg_gpt2_config_default();
    small.n_layer = 2, small.n_head = 4, small.n_embd = 64, small.vocab_size = dfg_vocab_size();
    small.block_size = c->T > 0 && c->T < (1 << 20) ? (int)c->T : 1;
    st = dfg_model_config_from_settings(p, small, &c->model);
    if (!st) st = dfg_lora_config_from_settings(p, c->model.arch, &c->model.lora); /* PEFT's LoRA, QLoRA */
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
    dfg_status st2 = read_chunks(p, c, chunks);
    if (!st2 && c->chunks) c->loss.micro_batches = (int)c->chunks; /* a chunk is a micro-batch of the loss */
    return st2;
}
