/* tasks.c - verifiable tasks for GRPO: the character vocabulary, the tasks, the rewards and the
 * host-stage helpers that write prompts and score completions (see dfg_tasks.h). Plain host
 * code: nothing here touches a kernel or allocates on the hot path beyond one scratch row. */
#include "dfg_tasks.h"
#include "task_tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- vocabulary */

/* Index = token id. PAD and EOS print as '_' and '$' so a decoded row shows where they are. */
/* '*' and '@' (the calculator's product and tool call) come last: the other tasks' vocabulary
 * stays the first 15 ids, and so do their models. */
static const char vocab_chars[] = "_$0123456789+-=*@";
#define VOCAB_SIZE ((int)sizeof(vocab_chars) - 1)
#define BASE_VOCAB_SIZE 15
enum { TOK_PLUS = 12, TOK_MINUS = 13, TOK_EQUALS = 14, TOK_TIMES = 15, TOK_CALL = 16 };

int dfg_vocab_size(void) { return BASE_VOCAB_SIZE; }

int32_t dfg_vocab_id(char c) {
    if (!c) return -1; /* strchr would find the terminator */
    const char *hit = strchr(vocab_chars, c);
    return hit ? (int32_t)(hit - vocab_chars) : -1;
}

char dfg_vocab_char(int32_t id) { return id >= 0 && id < VOCAB_SIZE ? vocab_chars[id] : '?'; }

void dfg_vocab_decode(const int32_t *ids, int n, char *out, size_t len) {
    if (!out || !len) return;
    size_t k = 0;
    for (int i = 0; ids && i < n && k + 1 < len; i++) out[k++] = dfg_vocab_char(ids[i]);
    out[k] = '\0';
}

int dfg_vocab_encode(const char *s, int32_t *ids, int max) {
    if (!s || (!ids && *s)) return -1;
    int n = 0;
    for (; s[n]; n++) {
        int32_t id = dfg_vocab_id(s[n]);
        if (id < 0 || n >= max) return -1;
        ids[n] = id;
    }
    return n;
}

static inline int32_t digit_tok(int v) { return DFG_VOCAB_DIGIT0 + v; }
static inline int tok_digit(int32_t id) { return id >= DFG_VOCAB_DIGIT0 && id < DFG_VOCAB_DIGIT0 + 10 ? id - DFG_VOCAB_DIGIT0 : -1; }

/* ---------------------------------------------------------------- tasks */

typedef enum { TASK_COPY, TASK_REVERSE, TASK_SORT, TASK_ADD, TASK_SUB, TASK_CALCULATOR, TASK_COUNT } task_kind;

typedef struct {
    const char *name;
    int max_digits;      /* add/sub: 18, so that a test can check answers in 64-bit integers */
    bool two_operands;   /* "a+b=" (prompt 2d + 2, answer up to d + 1) or "s=" (d + 1, d) */
} task_info;

static const task_info task_table[TASK_COUNT] = {
    [TASK_COPY] = {"copy", 64, false},
    [TASK_REVERSE] = {"reverse", 64, false},
    [TASK_SORT] = {"sort", 64, false},
    [TASK_ADD] = {"add", 18, true},
    [TASK_SUB] = {"sub", 18, true},
    [TASK_CALCULATOR] = {"calculator", 9, true}, /* products of 9-digit operands fit 64 bits */
};

dfg_status dfg_task_init(dfg_task *t, const char *name, int digits, char *err, size_t len) {
    if (err && len) err[0] = '\0';
    if (!t) return DFG_ERR_ARG;
    memset(t, 0, sizeof(*t));
    for (int k = 0; k < TASK_COUNT; k++) {
        const task_info *ti = &task_table[k];
        if (!name || strcmp(name, ti->name)) continue;
        if (digits < 1 || digits > ti->max_digits) {
            if (err && len) snprintf(err, len, "task '%s': digits must be in 1 .. %d, got %d", ti->name, ti->max_digits, digits);
            return DFG_ERR_ARG;
        }
        t->name = ti->name;
        t->digits = digits;
        t->prompt_len = ti->two_operands ? 2 * digits + 2 : digits + 1;
        t->max_answer_len = k == TASK_CALCULATOR ? 2 * digits : ti->two_operands ? digits + 1 : digits;
        /* the calculator's episode: "@a*b$" (the call), "=P=" (the tool's answer), "P$" */
        t->max_completion_len = k == TASK_CALCULATOR ? (2 * digits + 3) + (t->max_answer_len + 2) + (t->max_answer_len + 1)
                                                     : t->max_answer_len + 1;
        t->vocab_size = k == TASK_CALCULATOR ? VOCAB_SIZE : BASE_VOCAB_SIZE;
        t->kind = k;
        return DFG_OK;
    }
    if (err && len)
        snprintf(err, len, "unknown task '%s' (valid: copy, reverse, sort, add, sub, calculator)", name ? name : "(null)");
    return DFG_ERR_ARG;
}

/* Writes the digits of the d-digit number r[0 .. d-1] (most significant first) without its
 * leading zeros ("0" when it is zero) after an optional sign; returns the answer's length. */
static int write_number(const int *r, int d, bool negative, int32_t *answer) {
    int first = 0, len = 0;
    while (first < d - 1 && r[first] == 0) first++;
    if (negative) answer[len++] = TOK_MINUS;
    for (int i = first; i < d; i++) answer[len++] = digit_tok(r[i]);
    return len;
}

/* a + b or a - b on d-digit operands (most significant first), schoolbook. The test checks
 * the results in 64-bit integers instead, so the two cannot share a mistake. */
static int arith_answer(const int *a, const int *b, int d, bool subtract, int32_t *answer) {
    int r[DFG_TASK_MAX_ANSWER_LEN + 1];
    if (!subtract) {
        int carry = 0;
        for (int i = d - 1; i >= 0; i--) {
            int s = a[i] + b[i] + carry;
            r[i + 1] = s % 10;
            carry = s / 10;
        }
        r[0] = carry;
        return write_number(r, d + 1, false, answer);
    }
    int cmp = 0;
    for (int i = 0; i < d; i++) /* equal-width operands: the first differing digit decides */
        if (a[i] != b[i]) {
            cmp = a[i] > b[i] ? 1 : -1;
            break;
        }
    const int *hi = cmp < 0 ? b : a, *lo = cmp < 0 ? a : b;
    int borrow = 0;
    for (int i = d - 1; i >= 0; i--) {
        int s = hi[i] - lo[i] - borrow;
        borrow = s < 0;
        r[i] = s < 0 ? s + 10 : s;
    }
    return write_number(r, d, cmp < 0, answer);
}

int dfg_task_sample(const dfg_task *t, uint64_t *rng, int32_t *prompt, int32_t *answer) {
    if (!t || !rng || !prompt || !answer || t->kind < 0 || t->kind >= TASK_COUNT || t->digits < 1 ||
        t->digits > task_table[t->kind].max_digits)
        return -1;
    int d = t->digits;
    int a[DFG_TASK_MAX_ANSWER_LEN], b[DFG_TASK_MAX_ANSWER_LEN];
    /* % 10 of a 64-bit value: a bias of under 1e-18, far below anything a model can learn */
    for (int i = 0; i < d; i++) a[i] = (int)(dfg_host_rand(rng) % 10u);
    for (int i = 0; i < d; i++) prompt[i] = digit_tok(a[i]);
    if (task_table[t->kind].two_operands) {
        for (int i = 0; i < d; i++) b[i] = (int)(dfg_host_rand(rng) % 10u);
        prompt[d] = t->kind == TASK_ADD ? TOK_PLUS : t->kind == TASK_SUB ? TOK_MINUS : TOK_TIMES;
        for (int i = 0; i < d; i++) prompt[d + 1 + i] = digit_tok(b[i]);
        prompt[2 * d + 1] = TOK_EQUALS;
        if (t->kind == TASK_CALCULATOR) return dfg_calculator_product(prompt, d, prompt + d + 1, d, answer);
        return arith_answer(a, b, d, t->kind == TASK_SUB, answer);
    }
    prompt[d] = TOK_EQUALS;
    if (t->kind == TASK_SORT) {
        int count[10] = {0}, k = 0;
        for (int i = 0; i < d; i++) count[a[i]]++;
        for (int v = 0; v < 10; v++)
            for (int c = 0; c < count[v]; c++) answer[k++] = digit_tok(v);
    } else {
        for (int i = 0; i < d; i++) answer[i] = digit_tok(t->kind == TASK_REVERSE ? a[d - 1 - i] : a[i]);
    }
    return d;
}

/* ---------------------------------------------------------------- rewards */

/* The number of tokens before the first EOS (n when there is none). */
static int answer_part(const int32_t *c, int n, bool *has_eos) {
    for (int i = 0; c && i < n; i++)
        if (c[i] == DFG_VOCAB_EOS) {
            *has_eos = true;
            return i;
        }
    *has_eos = false;
    return c && n > 0 ? n : 0;
}

float dfg_reward_exact(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user) {
    (void)user;
    bool eos;
    int m = answer_part(completion, n, &eos);
    if (!eos || m != answer_len || (m > 0 && !answer)) return 0.0f;
    for (int i = 0; i < m; i++)
        if (completion[i] != answer[i]) return 0.0f;
    return 1.0f;
}

float dfg_reward_partial(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user) {
    (void)user;
    if (answer_len < 0 || (answer_len > 0 && !answer)) return 0.0f;
    bool eos;
    int m = answer_part(completion, n, &eos);
    int k = eos ? m + 1 : m;       /* s = completion[0 .. k-1]: the answer part and its EOS */
    int target_len = answer_len + 1; /* the answer, then EOS */
    int hits = 0;
    for (int i = 0; i < k && i < target_len; i++)
        hits += completion[i] == (i < answer_len ? answer[i] : DFG_VOCAB_EOS);
    return (float)hits / (float)(k > target_len ? k : target_len);
}

float dfg_reward_format(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user) {
    (void)answer, (void)answer_len, (void)user;
    bool eos;
    int m = answer_part(completion, n, &eos);
    int first = m > 0 && completion[0] == TOK_MINUS ? 1 : 0;
    if (!eos || m - first < 1) return 0.0f; /* no EOS, empty, or a lone '-' */
    for (int i = first; i < m; i++)
        if (tok_digit(completion[i]) < 0) return 0.0f;
    return 1.0f;
}

float dfg_reward_mixed(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user) {
    /* exact implies partial = format = 1: return 1 itself rather than 0.6f + 0.3f + 0.1f, which
     * need not round to 1 */
    if (dfg_reward_exact(completion, n, answer, answer_len, user) == 1.0f) return 1.0f;
    return 0.3f * dfg_reward_partial(completion, n, answer, answer_len, user) +
           0.1f * dfg_reward_format(completion, n, answer, answer_len, user);
}

static const struct {
    const char *name;
    dfg_reward_fn fn;
} reward_table[] = {
    {"exact", dfg_reward_exact},
    {"partial", dfg_reward_partial},
    {"format", dfg_reward_format},
    {"mixed", dfg_reward_mixed},
};

dfg_reward_fn dfg_reward_by_name(const char *kind) {
    for (size_t i = 0; kind && i < sizeof(reward_table) / sizeof(reward_table[0]); i++)
        if (!strcmp(kind, reward_table[i].name)) return reward_table[i].fn;
    return NULL;
}

const char *dfg_reward_names(void) { return "exact, partial, format, mixed"; }

/* ---------------------------------------------------------------- host-stage helpers */

/* "i32 (8, T)": the expected form of a tensor, a dimension < 0 written as its letter. */
static void want_str(char *buf, size_t len, dfg_dtype dt, int rank, const int64_t *d, const char *letters) {
    int k = snprintf(buf, len, "%s (", dfg_dtype_name(dt));
    for (int i = 0; i < rank && k > 0 && (size_t)k < len; i++) {
        if (d[i] >= 0) k += snprintf(buf + k, len - (size_t)k, "%s%lld", i ? "," : "", (long long)d[i]);
        else k += snprintf(buf + k, len - (size_t)k, "%s%c", i ? "," : "", letters[i]);
    }
    if (k > 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, ")");
}

/* (task_tensor.h) */
dfg_status dfg_task_tensor(dfg_host_ctx *ctx, const char *name, dfg_dtype dt, int rank, const int64_t *d,
                          const char *letters, bool optional, dfg_buffer *out) {
    char want[96], have[96];
    want_str(want, sizeof(want), dt, rank, d, letters);
    memset(out, 0, sizeof(*out));
    if (dfg_host_buffer(ctx, name, out) != DFG_OK) {
        memset(out, 0, sizeof(*out));
        return optional ? DFG_OK : dfg_host_fail(ctx, "the program has no tensor '%s' (expected %s)", name, want);
    }
    bool ok = out->dtype == dt && out->shape.rank == rank && out->data;
    for (int i = 0; ok && i < rank; i++) ok = d[i] < 0 ? out->shape.d[i] > 0 : out->shape.d[i] == d[i];
    if (!ok) {
        char dims[64];
        snprintf(have, sizeof(have), "%s %s", dfg_dtype_name(out->dtype), dfg_shape_str(out->shape, dims, sizeof(dims)));
        return dfg_host_fail(ctx, "tensor '%s' must be %s, got %s", name, want, have);
    }
    return DFG_OK;
}

/* The completion a right episode writes, and which of its tokens the policy writes (1) rather
 * than a tool (0): the answer and EOS; the calculator's call "@a*b$", the tool's "=P=", "P$".
 * Returns its length (at most t->max_completion_len). */
static int right_episode(const dfg_task *t, const int32_t *prompt, const int32_t *answer, int L, int32_t *ep, float *m) {
    int n = 0;
    if (t->kind == TASK_CALCULATOR) {
        ep[n] = TOK_CALL, m[n++] = 1.0f;
        for (int i = 0; i < t->prompt_len - 1; i++) ep[n] = prompt[i], m[n++] = 1.0f; /* "a*b" */
        ep[n] = DFG_VOCAB_EOS, m[n++] = 1.0f;
        ep[n] = TOK_EQUALS, m[n++] = 0.0f;
        for (int i = 0; i < L; i++) ep[n] = answer[i], m[n++] = 0.0f;
        ep[n] = TOK_EQUALS, m[n++] = 0.0f;
    }
    for (int i = 0; i < L; i++) ep[n] = answer[i], m[n++] = 1.0f;
    ep[n] = DFG_VOCAB_EOS, m[n++] = 1.0f;
    return n;
}

dfg_status dfg_grpo_make_batch(dfg_host_ctx *ctx, const dfg_task *t, int prompts, int group) {
    return dfg_grpo_make_batch_padded(ctx, t, prompts, group, t ? t->prompt_len : 0);
}

dfg_status dfg_grpo_make_batch_padded(dfg_host_ctx *ctx, const dfg_task *t, int prompts, int group, int prompt_cols) {
    if (!ctx) return DFG_ERR_ARG;
    if (!t || t->kind < 0 || t->kind >= TASK_COUNT || t->prompt_len < 1)
        return dfg_host_fail(ctx, "make_batch: no task (initialise it with dfg_task_init)");
    if (prompts < 1 || group < 1 || (int64_t)prompts * group > INT32_MAX)
        return dfg_host_fail(ctx, "make_batch: prompts (%d) and group (%d) must be >= 1", prompts, group);
    if (prompt_cols < t->prompt_len)
        return dfg_host_fail(ctx, "task '%s' (digits %d) has prompts of %d tokens, more than the %d prompt columns", t->name,
                             t->digits, t->prompt_len, prompt_cols);
    int64_t N = (int64_t)prompts * group, P = prompt_cols, pad = prompt_cols - t->prompt_len, A = t->max_answer_len;
    dfg_buffer tok, ans, alen, sft, smask, start;
    dfg_status st;
    if ((st = dfg_task_tensor(ctx, "tokens", DFG_I32, 2, (int64_t[]){N, -1}, "NT", false, &tok)) ||
        (st = dfg_task_tensor(ctx, "answers", DFG_I32, 2, (int64_t[]){N, A}, "NA", false, &ans)) ||
        (st = dfg_task_tensor(ctx, "answer_len", DFG_I32, 1, (int64_t[]){N}, "N", false, &alen)) ||
        (st = dfg_task_tensor(ctx, "prompt_start", DFG_I32, 1, (int64_t[]){N}, "N", pad == 0, &start)))
        return st;
    int64_t T = tok.shape.d[1], E = t->max_completion_len;
    if (T < P + E)
        return dfg_host_fail(ctx, "tensor 'tokens' has T = %lld columns; task '%s' (digits %d) needs T >= prompt columns "
                                  "%lld + its longest completion %lld = %lld",
                             (long long)T, t->name, t->digits, (long long)P, (long long)E, (long long)(P + E));
    if ((st = dfg_task_tensor(ctx, "sft_tokens", DFG_I32, 2, (int64_t[]){N, T}, "NT", true, &sft)) ||
        (st = dfg_task_tensor(ctx, "sft_mask", DFG_F32, 2, (int64_t[]){N, T}, "NT", true, &smask)))
        return st;
    for (int64_t r = 0; start.data && r < N; r++) ((int32_t *)start.data)[r] = (int32_t)pad;

    /* one stream per (seed, step); the salt keeps it apart from other host stages that seed
     * their generators from the same two numbers */
    uint64_t rng = dfg_host_seed(ctx) ^ 0x7461736b73ull /* "tasks" */;
    rng ^= (uint64_t)dfg_host_step(ctx) * 0xD1B54A32D192ED03ull;
    int32_t prompt[DFG_TASK_MAX_PROMPT_LEN], answer[DFG_TASK_MAX_ANSWER_LEN];
    /* a data-parallel rank draws the whole batch's problems and keeps its share of them */
    for (int skip = dfg_host_rank(ctx) * prompts; skip > 0; skip--) dfg_task_sample(t, &rng, prompt, answer);
    for (int g = 0; g < prompts; g++) {
        int L = dfg_task_sample(t, &rng, prompt, answer);
        if (L < 1 || L > A) return dfg_host_fail(ctx, "make_batch: task '%s' drew an answer of length %d", t->name, L);
        for (int r = g * group; r < (g + 1) * group; r++) {
            int32_t *row = (int32_t *)tok.data + r * T, *arow = (int32_t *)ans.data + r * A;
            for (int64_t i = 0; i < T; i++) row[i] = i >= pad && i < P ? prompt[i - pad] : DFG_VOCAB_PAD;
            for (int64_t i = 0; i < A; i++) arow[i] = i < L ? answer[i] : DFG_VOCAB_PAD;
            ((int32_t *)alen.data)[r] = L;
            if (sft.data || smask.data) {
                int32_t ep[3 * DFG_TASK_MAX_ANSWER_LEN + 8];
                float em[3 * DFG_TASK_MAX_ANSWER_LEN + 8];
                int n_ep = right_episode(t, prompt, answer, L, ep, em);
                for (int64_t i = 0; i < T; i++) {
                    int64_t j = i - P; /* the episode's column */
                    if (sft.data)
                        ((int32_t *)sft.data)[r * T + i] = i < pad ? DFG_VOCAB_PAD : i < P ? prompt[i - pad]
                                                         : j < n_ep ? ep[j] : DFG_VOCAB_PAD;
                    if (smask.data) ((float *)smask.data)[r * T + i] = j >= 0 && j < n_ep ? em[j] : 0.0f;
                }
            }
        }
    }
    return DFG_OK;
}

dfg_status dfg_grpo_rewards(dfg_host_ctx *ctx, int prompt_len, dfg_reward_fn fn, void *user) {
    if (!ctx) return DFG_ERR_ARG;
    if (!fn) return dfg_host_fail(ctx, "rewards: no reward function");
    dfg_buffer tok, mask, ans, alen, rew;
    dfg_status st;
    if ((st = dfg_task_tensor(ctx, "tokens", DFG_I32, 2, (int64_t[]){-1, -1}, "NT", false, &tok))) return st;
    int64_t N = tok.shape.d[0], T = tok.shape.d[1];
    if ((st = dfg_task_tensor(ctx, "completion_mask", DFG_F32, 2, (int64_t[]){N, T}, "NT", false, &mask)) ||
        (st = dfg_task_tensor(ctx, "answers", DFG_I32, 2, (int64_t[]){N, -1}, "NA", false, &ans)) ||
        (st = dfg_task_tensor(ctx, "answer_len", DFG_I32, 1, (int64_t[]){N}, "N", false, &alen)) ||
        (st = dfg_task_tensor(ctx, "rewards", DFG_F32, 1, (int64_t[]){N}, "N", false, &rew)))
        return st;
    if (prompt_len < 0 || prompt_len >= T)
        return dfg_host_fail(ctx, "rewards: prompt_len %d is outside 0 .. T-1 = %lld (tensor 'tokens' is (%lld, %lld))",
                             prompt_len, (long long)(T - 1), (long long)N, (long long)T);
    if (T > INT32_MAX || ans.shape.d[1] > INT32_MAX) return dfg_host_fail(ctx, "rewards: rows longer than 2^31 tokens");
    int64_t A = ans.shape.d[1];
    int32_t *completion = malloc(sizeof(int32_t) * (size_t)T);
    if (!completion) return dfg_host_fail(ctx, "rewards: out of memory");
    for (int64_t r = 0; r < N; r++) {
        const int32_t *row = (const int32_t *)tok.data + r * T;
        const float *m = (const float *)mask.data + r * T;
        int32_t L = ((const int32_t *)alen.data)[r];
        if (L < 0 || L > A) {
            free(completion);
            return dfg_host_fail(ctx, "rewards: answer_len[%lld] = %d is outside 0 .. %lld (the width of 'answers')",
                                 (long long)r, L, (long long)A);
        }
        int n = 0;
        for (int64_t i = prompt_len; i < T; i++)
            if (m[i] != 0.0f) completion[n++] = row[i];
        float v = fn(completion, n, (const int32_t *)ans.data + r * A, L, user);
        if (!isfinite(v)) {
            free(completion);
            return dfg_host_fail(ctx, "rewards: the reward of row %lld is %g, not a finite number", (long long)r, v);
        }
        ((float *)rew.data)[r] = v;
    }
    free(completion);
    return DFG_OK;
}

/* A task's reward on the completion's last turn: user is the task, with the reward to call. */
typedef struct {
    const dfg_task *t;
    dfg_reward_fn fn;
} last_turn_reward;

static float reward_last_turn(const int32_t *completion, int n, const int32_t *answer, int answer_len, void *user) {
    const last_turn_reward *r = user;
    int from = dfg_task_last_turn(r->t, completion, n);
    return r->fn(completion + from, n - from, answer, answer_len, NULL);
}

dfg_status dfg_grpo_rewards_task(dfg_host_ctx *ctx, const dfg_task *t, int prompt_len, const char *kind) {
    if (!ctx) return DFG_ERR_ARG;
    last_turn_reward r = {t, dfg_reward_by_name(kind)};
    if (!r.fn) return dfg_host_fail(ctx, "unknown reward '%s' (valid: %s)", kind ? kind : "(null)", dfg_reward_names());
    return dfg_grpo_rewards(ctx, prompt_len, reward_last_turn, &r);
}

dfg_status dfg_grpo_rewards_kind(dfg_host_ctx *ctx, int prompt_len, const char *kind) {
    if (!ctx) return DFG_ERR_ARG;
    dfg_reward_fn fn = dfg_reward_by_name(kind);
    if (!fn) return dfg_host_fail(ctx, "unknown reward '%s' (valid: %s)", kind ? kind : "(null)", dfg_reward_names());
    return dfg_grpo_rewards(ctx, prompt_len, fn, NULL);
}
