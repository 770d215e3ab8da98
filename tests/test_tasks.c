/* test_tasks.c - the GRPO tasks (examples/tasks/dfg_tasks.h): vocabulary round trips, every task's
 * prompts and answers (checked against independent computations: 64-bit arithmetic for add/sub,
 * qsort for sort), determinism, every reward on hand-made completions and on random ones, and
 * the host-stage helpers through real programs and runtimes. The helpers are called from host
 * functions in a small module compiled at test time (tests/pipeline_module.h), as a pipeline's
 * shared object would call them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg_tasks.h"
#include "pipeline_module.h"

/* ---------------------------------------------------------------- helpers */

/* Encodes a literal the test trusts to be in the vocabulary; returns its length. */
static int enc(const char *s, int32_t *ids, int max) {
    int n = dfg_vocab_encode(s, ids, max);
    CHECK(n >= 0, "cannot encode '%s'", s);
    return n < 0 ? 0 : n;
}

static const char *dec(const int32_t *ids, int n) {
    static char buf[4][256];
    static int k;
    char *b = buf[k++ & 3];
    dfg_vocab_decode(ids, n, b, sizeof(buf[0]));
    return b;
}

static int cmp_char(const void *a, const void *b) { return *(const char *)a - *(const char *)b; }

/* ---------------------------------------------------------------- vocabulary */
static void test_vocab(void) {
    CHECK(dfg_vocab_size() == 15, "vocab size %d", dfg_vocab_size());
    for (int32_t id = 0; id < dfg_vocab_size(); id++)
        CHECK(dfg_vocab_id(dfg_vocab_char(id)) == id, "id %d -> '%c' -> %d", id, dfg_vocab_char(id),
              dfg_vocab_id(dfg_vocab_char(id)));
    CHECK(dfg_vocab_id('_') == DFG_VOCAB_PAD && dfg_vocab_id('$') == DFG_VOCAB_EOS, "PAD/EOS characters");
    CHECK(DFG_VOCAB_PAD == 0 && DFG_VOCAB_EOS == 1, "PAD 0, EOS 1");
    const char *chars = "0123456789+-=";
    for (int i = 0; chars[i]; i++) CHECK(dfg_vocab_id(chars[i]) == 2 + i, "'%c' has id %d", chars[i], dfg_vocab_id(chars[i]));
    const char bad[] = {'a', ' ', '|', '\0', '#', (char)0xff}; /* '*' and '@' are the calculator's (test_calculator) */
    for (size_t i = 0; i < sizeof(bad); i++) CHECK(dfg_vocab_id(bad[i]) == -1, "char %d is not in the vocabulary", bad[i]);
    CHECK(dfg_vocab_char(-1) == '?' && dfg_vocab_char(17) == '?' && dfg_vocab_char(1 << 30) == '?', "invalid ids print '?'");

    int32_t ids[32] = {0, 1, 2, 11, 12, 13, 14, 99, -5};
    char out[32];
    dfg_vocab_decode(ids, 9, out, sizeof(out));
    CHECK(!strcmp(out, "_$09+-=??"), "decode: '%s'", out);
    dfg_vocab_decode(ids, 9, out, 4);
    CHECK(!strcmp(out, "_$0"), "decode cut to len - 1: '%s'", out);
    dfg_vocab_decode(ids, 0, out, sizeof(out));
    CHECK(!strcmp(out, ""), "decode of nothing: '%s'", out);
    dfg_vocab_decode(ids, 3, out, 1);
    CHECK(!strcmp(out, ""), "decode into 1 byte: '%s'", out);

    const char *s = "042+317=359$_";
    int n = dfg_vocab_encode(s, ids, 32);
    CHECK(n == (int)strlen(s), "encode length %d", n);
    CHECK(!strcmp(dec(ids, n), s), "round trip: '%s'", dec(ids, n));
    CHECK(ids[0] == 2 && ids[3] == 12 && ids[7] == 14 && ids[11] == 1 && ids[12] == 0, "encoded ids");
    CHECK(dfg_vocab_encode("12a", ids, 32) == -1, "an unknown character fails");
    CHECK(dfg_vocab_encode("12345", ids, 4) == -1, "too long fails");
    CHECK(dfg_vocab_encode("", ids, 0) == 0 && dfg_vocab_encode(NULL, ids, 4) == -1, "empty / NULL");
}

/* ---------------------------------------------------------------- tasks */

/* Checks one drawn problem against an independent computation from the decoded prompt. */
static void check_problem(const dfg_task *t, const int32_t *prompt, const int32_t *answer, int L) {
    char p[128], a[128], want[128];
    snprintf(p, sizeof(p), "%s", dec(prompt, t->prompt_len));
    snprintf(a, sizeof(a), "%s", L >= 0 ? dec(answer, L) : "");
    int d = t->digits;
    CHECK(L >= 1 && L <= t->max_answer_len, "%s: answer length %d outside 1 .. %d", t->name, L, t->max_answer_len);
    CHECK((int)strlen(p) == t->prompt_len && p[t->prompt_len - 1] == '=', "%s: prompt '%s'", t->name, p);
    bool two = !strcmp(t->name, "add") || !strcmp(t->name, "sub");
    for (int i = 0; i < t->prompt_len - 1; i++) {
        bool op = two && i == d;
        CHECK(op ? p[i] == (t->name[0] == 'a' ? '+' : '-') : (p[i] >= '0' && p[i] <= '9'), "%s: prompt '%s' char %d", t->name,
              p, i);
    }
    if (!strcmp(t->name, "copy")) snprintf(want, sizeof(want), "%.*s", d, p);
    else if (!strcmp(t->name, "reverse")) {
        for (int i = 0; i < d; i++) want[i] = p[d - 1 - i];
        want[d] = '\0';
    } else if (!strcmp(t->name, "sort")) {
        snprintf(want, sizeof(want), "%.*s", d, p);
        qsort(want, (size_t)d, 1, cmp_char);
    } else {
        char x[32], y[32];
        snprintf(x, sizeof(x), "%.*s", d, p);
        snprintf(y, sizeof(y), "%.*s", d, p + d + 1);
        unsigned long long u = strtoull(x, NULL, 10), v = strtoull(y, NULL, 10);
        if (t->name[0] == 'a') snprintf(want, sizeof(want), "%llu", u + v);
        else snprintf(want, sizeof(want), "%lld", (long long)u - (long long)v);
    }
    CHECK(!strcmp(a, want), "%s: prompt '%s' answer '%s', expected '%s'", t->name, p, a, want);
}

static void test_tasks(void) {
    const char *names[] = {"copy", "reverse", "sort", "add", "sub"};
    const int max_digits[] = {64, 64, 64, 18, 18};
    for (int k = 0; k < 5; k++) {
        int sizes[] = {1, 2, 3, 7, max_digits[k]};
        for (int s = 0; s < 5; s++) {
            int d = sizes[s];
            dfg_task t;
            char err[256];
            dfg_status st = dfg_task_init(&t, names[k], d, err, sizeof(err));
            CHECK(st == DFG_OK, "init %s %d: %s", names[k], d, err);
            if (st) continue;
            bool two = k >= 3;
            CHECK(!strcmp(t.name, names[k]) && t.digits == d, "%s: name/digits", names[k]);
            CHECK(t.prompt_len == (two ? 2 * d + 2 : d + 1) && t.max_answer_len == (two ? d + 1 : d), "%s %d: lengths %d %d",
                  names[k], d, t.prompt_len, t.max_answer_len);
            CHECK(t.prompt_len <= DFG_TASK_MAX_PROMPT_LEN && t.max_answer_len <= DFG_TASK_MAX_ANSWER_LEN, "%s: bounds", names[k]);
            uint64_t rng = dfg_test_u64();
            bool seen_short = false, seen_neg = false, seen_pos = false, seen_full = false;
            int64_t digit_count[10] = {0}, n_digits = 0;
            for (int it = 0; it < 300; it++) {
                /* sentinels past the declared lengths: nothing may be written there */
                int32_t prompt[DFG_TASK_MAX_PROMPT_LEN + 1], answer[DFG_TASK_MAX_ANSWER_LEN + 1];
                prompt[t.prompt_len] = answer[t.max_answer_len] = -77;
                int L = dfg_task_sample(&t, &rng, prompt, answer);
                CHECK(prompt[t.prompt_len] == -77 && answer[t.max_answer_len] == -77, "%s: wrote past the buffers", names[k]);
                check_problem(&t, prompt, answer, L);
                for (int i = 0; i < t.prompt_len; i++)
                    if (prompt[i] >= DFG_VOCAB_DIGIT0 && prompt[i] < DFG_VOCAB_DIGIT0 + 10) digit_count[prompt[i] - DFG_VOCAB_DIGIT0]++, n_digits++;
                seen_short |= L < t.max_answer_len;
                seen_full |= L == t.max_answer_len;
                seen_neg |= answer[0] == dfg_vocab_id('-');
                seen_pos |= answer[0] != dfg_vocab_id('-');
            }
            CHECK(seen_full, "%s %d: never a full-length answer", names[k], d);
            /* uniform digits: >= 2100 draws here, each digit expected 10%; half of that is ~15 sigma */
            for (int v = 0; d >= 7 && v < 10; v++)
                CHECK(digit_count[v] * 20 >= n_digits, "%s %d: digit %d drawn %lld times of %lld", names[k], d, v,
                      (long long)digit_count[v], (long long)n_digits);
            if (k == 3 && d >= 2) CHECK(seen_short, "add %d: answers never vary in length", d);
            if (k == 4) CHECK(seen_neg && seen_pos, "sub %d: signs seen %d %d", d, seen_neg, seen_pos);
        }
    }
    /* edge cases the random draws rarely reach: carries through every digit, zero results */
    dfg_task add, sub;
    CHECK(!dfg_task_init(&add, "add", 3, NULL, 0) && !dfg_task_init(&sub, "sub", 3, NULL, 0), "init add/sub 3");
    int32_t prompt[16], answer[16];
    uint64_t rng = dfg_test_u64();
    int found_zero = 0;
    for (int it = 0; it < 20000 && found_zero < 1; it++) { /* a == b happens 1 in 1000 */
        int L = dfg_task_sample(&sub, &rng, prompt, answer);
        if (L == 1 && answer[0] == dfg_vocab_id('0')) found_zero++, check_problem(&sub, prompt, answer, L);
    }
    CHECK(found_zero, "sub never drew a == b in 20000 draws");
}

static void test_task_errors_and_determinism(void) {
    dfg_task t;
    char err[256];
    CHECK(dfg_task_init(&t, "divide", 3, err, sizeof(err)) == DFG_ERR_ARG, "unknown task");
    CHECK(strstr(err, "'divide'") && strstr(err, "copy, reverse, sort, add, sub"), "message lists the tasks: %s", err);
    CHECK(dfg_task_init(&t, NULL, 3, err, sizeof(err)) == DFG_ERR_ARG && strstr(err, "valid"), "NULL name: %s", err);
    CHECK(dfg_task_init(&t, "reverse", 0, err, sizeof(err)) == DFG_ERR_ARG && strstr(err, "1 .. 64") && strstr(err, "got 0"),
          "digits 0: %s", err);
    CHECK(dfg_task_init(&t, "reverse", 65, err, sizeof(err)) == DFG_ERR_ARG, "digits 65");
    CHECK(dfg_task_init(&t, "add", 19, err, sizeof(err)) == DFG_ERR_ARG && strstr(err, "1 .. 18"), "add 19: %s", err);
    CHECK(dfg_task_init(&t, "add", 19, NULL, 0) == DFG_ERR_ARG, "no err buffer");
    CHECK(dfg_task_init(NULL, "add", 3, err, sizeof(err)) == DFG_ERR_ARG, "NULL task");
    char small[8];
    CHECK(dfg_task_init(&t, "nonsense", 3, small, sizeof(small)) == DFG_ERR_ARG && strlen(small) == 7, "cut message");

    int32_t p1[DFG_TASK_MAX_PROMPT_LEN], a1[DFG_TASK_MAX_ANSWER_LEN], p2[DFG_TASK_MAX_PROMPT_LEN], a2[DFG_TASK_MAX_ANSWER_LEN];
    CHECK(dfg_task_sample(NULL, &(uint64_t){1}, p1, a1) == -1 && dfg_task_sample(&t, NULL, p1, a1) == -1, "NULL args");
    const char *names[] = {"reverse", "add", "sort"};
    for (int k = 0; k < 3; k++) {
        CHECK(!dfg_task_init(&t, names[k], 12, err, sizeof(err)), "init: %s", err);
        uint64_t s0 = dfg_test_u64(), r1 = s0, r2 = s0;
        for (int it = 0; it < 5; it++) {
            int l1 = dfg_task_sample(&t, &r1, p1, a1), l2 = dfg_task_sample(&t, &r2, p2, a2);
            CHECK(l1 == l2 && r1 == r2 && !memcmp(p1, p2, sizeof(int32_t) * (size_t)t.prompt_len) &&
                      !memcmp(a1, a2, sizeof(int32_t) * (size_t)l1),
                  "%s: the same rng state gives the same problem", names[k]);
        }
        CHECK(r1 != s0, "%s: sampling advances the rng", names[k]);
        uint64_t r3 = s0 ^ 1;
        r1 = s0;
        dfg_task_sample(&t, &r1, p1, a1);
        dfg_task_sample(&t, &r3, p2, a2);
        CHECK(memcmp(p1, p2, sizeof(int32_t) * (size_t)t.prompt_len), "%s: another rng state gives another prompt", names[k]);
    }
}

/* ---------------------------------------------------------------- rewards */

typedef struct {
    const char *completion; /* '$' is EOS */
    float exact, partial, format;
} reward_case;

static void test_rewards_hand_made(void) {
    int32_t ans[8], c[32];
    int L = enc("359", ans, 8);
    const reward_case cases[] = {
        {"359$", 1, 1, 1},
        {"359$77+=", 1, 1, 1},          /* junk after EOS is ignored */
        {"359$$", 1, 1, 1},
        {"358$", 0, 0.75f, 1},           /* wrong digit: 3 of 4 positions (3, 5, EOS) */
        {"953$", 0, 0.5f, 1},            /* 5 and EOS */
        {"359", 0, 0.75f, 0},            /* no EOS: that position's credit is lost */
        {"3591$", 0, 0.6f, 1},           /* one extra character: 3 of max(5, 4) */
        {"359123$", 0, 3.0f / 7.0f, 1},  /* three extra */
        {"359999999", 0, 3.0f / 9.0f, 0}, /* no EOS, long */
        {"35$", 0, 0.5f, 1},             /* short: 3, 5; EOS early */
        {"$", 0, 0, 0},                  /* empty answer: no credit, not well formed */
        {"", 0, 0, 0},                   /* empty completion */
        {"-359$", 0, 0, 1},              /* shifted: no positions match, but a number */
        {"-$", 0, 0, 0},                 /* a lone sign */
        {"3-9$", 0, 0.75f, 0},           /* '-' inside */
        {"3+9$", 0, 0.75f, 0},
        {"35_$", 0, 0.75f, 0},           /* PAD inside */
        {"=$", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const reward_case *rc = &cases[i];
        int n = enc(rc->completion, c, 32);
        float e = dfg_reward_exact(c, n, ans, L, NULL), p = dfg_reward_partial(c, n, ans, L, NULL),
              f = dfg_reward_format(c, n, ans, L, NULL), m = dfg_reward_mixed(c, n, ans, L, NULL);
        CHECK(e == rc->exact, "'%s': exact %g, expected %g", rc->completion, e, rc->exact);
        CHECK(fabsf(p - rc->partial) < 1e-6f, "'%s': partial %g, expected %g", rc->completion, p, rc->partial);
        CHECK(f == rc->format, "'%s': format %g, expected %g", rc->completion, f, rc->format);
        float want_m = rc->exact == 1 ? 1.0f : 0.3f * rc->partial + 0.1f * rc->format;
        CHECK(fabsf(m - want_m) < 1e-6f, "'%s': mixed %g, expected %g", rc->completion, m, want_m);
        CHECK(rc->exact == 1 ? m == 1.0f : m < 0.4f, "'%s': mixed %g: 1 only for the right answer", rc->completion, m);
    }
    int n;
    /* NULL pointers and negative lengths score 0, never crash */
    CHECK(dfg_reward_exact(NULL, 3, ans, L, NULL) == 0 && dfg_reward_partial(NULL, 3, ans, L, NULL) == 0 &&
              dfg_reward_format(NULL, 3, ans, L, NULL) == 0 && dfg_reward_mixed(c, -2, ans, L, NULL) == 0,
          "NULL / negative n");
    CHECK(dfg_reward_partial(c, 1, NULL, 3, NULL) == 0 && dfg_reward_exact(c, 1, NULL, 3, NULL) == 0, "NULL answer");
    /* the empty answer: EOS alone is right (and an EOS at position 0 is found) */
    n = enc("$", c, 32);
    CHECK(dfg_reward_exact(c, n, ans, 0, NULL) == 1 && dfg_reward_partial(c, n, ans, 0, NULL) == 1 &&
              dfg_reward_partial(c, 0, ans, 0, NULL) == 0 && dfg_reward_exact(c, 0, ans, 0, NULL) == 0,
          "empty answer");
    /* a negative answer */
    L = enc("-42", ans, 8);
    n = enc("-42$", c, 32);
    CHECK(dfg_reward_exact(c, n, ans, L, NULL) == 1 && dfg_reward_format(c, n, ans, L, NULL) == 1 &&
              dfg_reward_mixed(c, n, ans, L, NULL) == 1.0f,
          "'-42' is exact and well formed");
    n = enc("42$", c, 32);
    CHECK(dfg_reward_exact(c, n, ans, L, NULL) == 0 && dfg_reward_partial(c, n, ans, L, NULL) == 0.0f, "'42' for '-42'");

    CHECK(dfg_reward_by_name("exact") == dfg_reward_exact && dfg_reward_by_name("partial") == dfg_reward_partial &&
              dfg_reward_by_name("format") == dfg_reward_format && dfg_reward_by_name("mixed") == dfg_reward_mixed,
          "reward names");
    CHECK(!dfg_reward_by_name("bogus") && !dfg_reward_by_name(NULL) && !dfg_reward_by_name("Exact"), "unknown reward names");
    CHECK(!strcmp(dfg_reward_names(), "exact, partial, format, mixed"), "names: %s", dfg_reward_names());
}

/* Random completions (random tokens, or the answer with random damage, or the answer then
 * junk): every reward stays in [0, 1], and 1 only when the completion is right. */
static void test_rewards_random(void) {
    dfg_task t;
    CHECK(!dfg_task_init(&t, "add", 4, NULL, 0), "init");
    uint64_t rng = dfg_test_u64();
    int hits = 0;
    for (int it = 0; it < 5000; it++) {
        int32_t prompt[16], ans[8], c[16];
        int L = dfg_task_sample(&t, &rng, prompt, ans);
        int n = dfg_test_int(0, 12), mode = dfg_test_int(0, 2);
        for (int i = 0; i < n; i++) c[i] = dfg_test_int(0, dfg_vocab_size() - 1);
        if (mode >= 1 && n > L) {
            for (int i = 0; i < L; i++) c[i] = ans[i];
            c[L] = DFG_VOCAB_EOS;
            if (mode == 1 && dfg_test_int(0, 1)) c[dfg_test_int(0, L)] = dfg_test_int(0, dfg_vocab_size() - 1);
        }
        bool eos = false;
        int m = 0;
        while (m < n && c[m] != DFG_VOCAB_EOS) m++;
        eos = m < n;
        bool right = eos && m == L && !memcmp(c, ans, sizeof(int32_t) * (size_t)L);
        hits += right;
        float r[4] = {dfg_reward_exact(c, n, ans, L, NULL), dfg_reward_partial(c, n, ans, L, NULL),
                      dfg_reward_format(c, n, ans, L, NULL), dfg_reward_mixed(c, n, ans, L, NULL)};
        for (int k = 0; k < 4; k++) CHECK(r[k] >= 0 && r[k] <= 1, "reward %d = %g outside [0, 1]", k, r[k]);
        CHECK((r[0] == 1) == right && (r[1] == 1) == right && (r[3] == 1) == right, "'%s' for '%s': rewards %g %g %g, right %d",
              dec(c, n), dec(ans, L), r[0], r[1], r[3], right);
        if (right) CHECK(r[2] == 1, "a right answer is well formed");
    }
    CHECK(hits > 100, "only %d right completions drawn", hits);
}

/* ---------------------------------------------------------------- host-stage helpers */

/* The module's host functions read their arguments from program settings, as a pipeline
 * would. tk_probe's reward encodes what it was given (the gathered completion, n, the answer)
 * in one exactly representable float, so the test can check the gathering. */
static const char host_src[] =
    "#include <stdlib.h>\n"
    "#include \"dfg_runtime.h\"\n"
    "#include \"dfg_tasks.h\"\n"
    "static int geti(dfg_host_ctx *c, const char *k) {\n"
    "    return dfg_program_has(dfg_host_program(c), k) ? (int)dfg_program_int(dfg_host_program(c), k) : -1;\n"
    "}\n"
    "static const char *gets_(dfg_host_ctx *c, const char *k) { return dfg_program_str(dfg_host_program(c), k); }\n"
    "dfg_status tk_make(dfg_host_ctx *ctx) {\n"
    "    dfg_task t; char err[256];\n"
    "    if (dfg_task_init(&t, gets_(ctx, \"task\"), geti(ctx, \"digits\"), err, sizeof(err)))\n"
    "        return dfg_host_fail(ctx, \"%s\", err);\n"
    "    return dfg_grpo_make_batch(ctx, &t, geti(ctx, \"prompts\"), geti(ctx, \"group\"));\n"
    "}\n"
    "dfg_status tk_rewards(dfg_host_ctx *ctx) {\n"
    "    return dfg_grpo_rewards_kind(ctx, geti(ctx, \"prompt_len\"), gets_(ctx, \"reward\"));\n"
    "}\n"
    "static float probe(const int32_t *c, int n, const int32_t *a, int L, void *user) {\n"
    "    float v = *(const float *)user + 1000.0f * n + 10000.0f * L + 100000.0f * (L ? a[0] : 0);\n"
    "    for (int i = 0; i < n; i++) v += (float)(c[i] * (i + 1));\n"
    "    return v;\n"
    "}\n"
    "static float nan_reward(const int32_t *c, int n, const int32_t *a, int L, void *user) {\n"
    "    (void)c, (void)n, (void)a, (void)L, (void)user; return 0.0f / 0.0f;\n"
    "}\n"
    "static const float half = 0.5f;\n"
    "dfg_status tk_probe(dfg_host_ctx *ctx) { return dfg_grpo_rewards(ctx, geti(ctx, \"prompt_len\"), probe, (void *)&half); }\n"
    "dfg_status tk_nan(dfg_host_ctx *ctx) { return dfg_grpo_rewards(ctx, geti(ctx, \"prompt_len\"), nan_reward, NULL); }\n";

static void *host_lib;

typedef struct {
    int64_t N, T, A;
    bool sft;                     /* sft_tokens / sft_mask */
    dfg_dtype answer_len_dtype;   /* to make a wrong one */
    dfg_dtype mask_dtype;
    int64_t sft_mask_T;           /* T unless testing a wrong shape */
    bool no_answers, no_rewards;
} tk_layout;

static tk_layout layout(int64_t N, int64_t T, int64_t A, bool sft) {
    return (tk_layout){N, T, A, sft, DFG_I32, DFG_F32, T, false, false};
}

/* A program with the contract's STATE tensors and the given host stages; settings are
 * key=value pairs, NULL-terminated. */
static dfg_program *tk_program(const tk_layout *l, const char *const *stages /* name, symbol, ..., NULL */,
                               const char *const *settings) {
    dfg_program *p = dfg_program_new("tasks");
    dfg_init z = dfg_init_zeros();
    dfg_state(p, "tokens", DFG_I32, DFG_SHAPE(l->N, l->T), DFG_ROLE_ROLLOUT, z);
    if (!l->no_answers) dfg_state(p, "answers", DFG_I32, DFG_SHAPE(l->N, l->A), DFG_ROLE_ROLLOUT, z);
    dfg_state(p, "answer_len", l->answer_len_dtype, DFG_SHAPE(l->N), DFG_ROLE_ROLLOUT, z);
    dfg_state(p, "completion_mask", l->mask_dtype, DFG_SHAPE(l->N, l->T), DFG_ROLE_ROLLOUT, z);
    if (!l->no_rewards) dfg_state(p, "rewards", DFG_F32, DFG_SHAPE(l->N), DFG_ROLE_ROLLOUT, z);
    if (l->sft) {
        dfg_state(p, "sft_tokens", DFG_I32, DFG_SHAPE(l->N, l->T), DFG_ROLE_ROLLOUT, z);
        dfg_state(p, "sft_mask", DFG_F32, DFG_SHAPE(l->N, l->sft_mask_T), DFG_ROLE_ROLLOUT, z);
    }
    for (int i = 0; stages[i]; i += 2) dfg_stage_host(p, stages[i], stages[i + 1]);
    for (int i = 0; settings && settings[i]; i += 2) dfg_program_set(p, settings[i], settings[i + 1]);
    CHECK(!dfg_program_status(p), "program: %s", dfg_program_error(p));
    return p;
}

static dfg_runtime *tk_runtime(dfg_program *p, uint64_t seed) {
    dfg_run_options o = dfg_run_options_default();
    o.seed = seed;
    o.n_threads = 1;
    o.host_lib = host_lib;
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_runtime_create(p, &o, &rt);
    CHECK(st == DFG_OK, "create: %s", rt ? dfg_runtime_error(rt) : "no runtime");
    if (st) {
        dfg_runtime_free(rt);
        return NULL;
    }
    return rt;
}

/* Runs one step that must fail and checks the message names every needle. */
static void expect_step_failure(dfg_program *p, const char *what, const char *const *needles) {
    dfg_runtime *rt = tk_runtime(p, 7);
    if (!rt) return;
    dfg_status st = dfg_runtime_step(rt);
    const char *msg = dfg_runtime_error(rt);
    CHECK(st != DFG_OK, "%s: the step should fail", what);
    for (int i = 0; needles[i]; i++) CHECK(strstr(msg, needles[i]), "%s: message lacks \"%s\": %s", what, needles[i], msg);
    dfg_runtime_free(rt);
}

typedef struct {
    int32_t tokens[64 * 32], answers[64 * 8], answer_len[64], sft_tokens[64 * 32];
    float sft_mask[64 * 32];
} batch;

static void read_batch(dfg_runtime *rt, const tk_layout *l, batch *b) {
    size_t nt = (size_t)(l->N * l->T);
    CHECK(!dfg_runtime_read(rt, "tokens", b->tokens, nt * 4), "read tokens: %s", dfg_runtime_error(rt));
    CHECK(!dfg_runtime_read(rt, "answers", b->answers, (size_t)(l->N * l->A) * 4), "read answers: %s", dfg_runtime_error(rt));
    CHECK(!dfg_runtime_read(rt, "answer_len", b->answer_len, (size_t)l->N * 4), "read answer_len");
    if (l->sft) {
        CHECK(!dfg_runtime_read(rt, "sft_tokens", b->sft_tokens, nt * 4), "read sft_tokens");
        CHECK(!dfg_runtime_read(rt, "sft_mask", b->sft_mask, nt * 4), "read sft_mask");
    }
}

/* Every row: the prompt then PAD, a correct answer (check_problem), the group structure and
 * the supervised row and mask. */
static void check_batch(const dfg_task *t, const tk_layout *l, const batch *b, int group) {
    int64_t T = l->T, A = l->A, P = t->prompt_len;
    for (int64_t r = 0; r < l->N; r++) {
        const int32_t *row = b->tokens + r * T, *ans = b->answers + r * A;
        int L = b->answer_len[r];
        check_problem(t, row, ans, L);
        for (int64_t i = P; i < T; i++) CHECK(row[i] == DFG_VOCAB_PAD, "row %lld: token %lld after the prompt is not PAD", (long long)r, (long long)i);
        for (int64_t i = L; i < A; i++) CHECK(ans[i] == DFG_VOCAB_PAD, "row %lld: answers[%lld] after the answer is not PAD", (long long)r, (long long)i);
        int64_t first = r - r % group; /* the group's first row */
        CHECK(!memcmp(row, b->tokens + first * T, sizeof(int32_t) * (size_t)T) &&
                  !memcmp(ans, b->answers + first * A, sizeof(int32_t) * (size_t)A) && L == b->answer_len[first],
              "row %lld differs from its group's first row %lld", (long long)r, (long long)first);
        if (!l->sft) continue;
        const int32_t *s = b->sft_tokens + r * T;
        const float *m = b->sft_mask + r * T;
        for (int64_t i = 0; i < T; i++) {
            int32_t want = i < P ? row[i] : i < P + L ? ans[i - P] : i == P + L ? DFG_VOCAB_EOS : DFG_VOCAB_PAD;
            CHECK(s[i] == want, "row %lld: sft_tokens[%lld] = %d, expected %d ('%s')", (long long)r, (long long)i, s[i], want,
                  dec(s, (int)T));
            bool answer_pos = i >= P && i <= P + L; /* the answer's tokens and its EOS */
            CHECK(m[i] == (answer_pos ? 1.0f : 0.0f), "row %lld: sft_mask[%lld] = %g ('%s')", (long long)r, (long long)i, m[i],
                  dec(s, (int)T));
        }
    }
}

static void test_make_batch(void) {
    const char *stages[] = {"data", "tk_make", NULL};
    struct {
        const char *task, *digits;
        int64_t T;
        bool sft;
    } configs[] = {{"reverse", "6", 16, true}, {"add", "3", 13, true}, {"sub", "2", 10, false}, {"sort", "5", 12, true}};
    for (int c = 0; c < 4; c++) {
        dfg_task t;
        CHECK(!dfg_task_init(&t, configs[c].task, atoi(configs[c].digits), NULL, 0), "init %s", configs[c].task);
        int prompts = 3, group = 4;
        tk_layout l = layout(prompts * group, configs[c].T, t.max_answer_len, configs[c].sft);
        const char *settings[] = {"task", configs[c].task, "digits", configs[c].digits, "prompts", "3", "group", "4", NULL};
        dfg_program *p = tk_program(&l, stages, settings);
        uint64_t seed = dfg_test_u64();
        dfg_runtime *rt = tk_runtime(p, seed), *rt2 = tk_runtime(p, seed), *rt3 = tk_runtime(p, seed + 1);
        static batch b0, b1, b2, b3;
        dfg_status st = rt && rt2 && rt3 ? dfg_runtime_step(rt) : DFG_ERR_STATE;
        CHECK(!st, "%s step 0: %s", configs[c].task, rt ? dfg_runtime_error(rt) : "no runtime");
        if (!st) {
            read_batch(rt, &l, &b0);
            check_batch(&t, &l, &b0, group);
            /* groups differ: three equal prompts of >= 5 random digits would be a broken generator */
            int64_t T = l.T;
            CHECK(memcmp(b0.tokens, b0.tokens + 4 * T, 4 * (size_t)T) || memcmp(b0.tokens, b0.tokens + 8 * T, 4 * (size_t)T),
                  "%s: every group has the same prompt", configs[c].task);
            CHECK(!dfg_runtime_step(rt2) && !dfg_runtime_step(rt3), "steps: %s", dfg_runtime_error(rt2));
            read_batch(rt2, &l, &b1);
            read_batch(rt3, &l, &b2);
            CHECK(!memcmp(b0.tokens, b1.tokens, sizeof(int32_t) * (size_t)(l.N * T)) &&
                      !memcmp(b0.sft_tokens, b1.sft_tokens, sizeof(int32_t) * (size_t)(l.N * T)) &&
                      !memcmp(b0.sft_mask, b1.sft_mask, sizeof(float) * (size_t)(l.N * T)) &&
                      !memcmp(b0.answers, b1.answers, sizeof(int32_t) * (size_t)(l.N * l.A)),
                  "%s: the same seed and step give the same batch", configs[c].task);
            CHECK(memcmp(b0.tokens, b2.tokens, sizeof(int32_t) * (size_t)(l.N * T)), "%s: another seed, another batch",
                  configs[c].task);
            CHECK(!dfg_runtime_step(rt), "%s step 1: %s", configs[c].task, dfg_runtime_error(rt));
            read_batch(rt, &l, &b3);
            check_batch(&t, &l, &b3, group);
            CHECK(memcmp(b0.tokens, b3.tokens, sizeof(int32_t) * (size_t)(l.N * T)), "%s: step 1 draws another batch",
                  configs[c].task);
        }
        dfg_runtime_free(rt);
        dfg_runtime_free(rt2);
        dfg_runtime_free(rt3);
        dfg_program_free(p);
    }
}

static void test_make_batch_errors(void) {
    const char *stages[] = {"data", "tk_make", NULL};
    const char *settings[] = {"task", "reverse", "digits", "6", "prompts", "3", "group", "4", NULL};
    struct {
        const char *what;
        tk_layout l;
        const char *needles[4];
    } cases[] = {
        {"answers too narrow", {12, 16, 5, true, DFG_I32, DFG_F32, 16, false, false}, {"'answers'", "i32 (12,6)", "(12,5)", NULL}},
        {"rows != prompts * group", {10, 16, 6, true, DFG_I32, DFG_F32, 16, false, false}, {"'tokens'", "i32 (12,T)", NULL}},
        {"T too small", {12, 13, 6, true, DFG_I32, DFG_F32, 13, false, false}, {"'tokens'", "T >= ", "= 14", NULL}},
        {"answer_len dtype", {12, 16, 6, true, DFG_F32, DFG_F32, 16, false, false}, {"'answer_len'", "i32 (12)", "f32", NULL}},
        {"sft_mask shape", {12, 16, 6, true, DFG_I32, DFG_F32, 15, false, false}, {"'sft_mask'", "f32 (12,16)", NULL}},
        {"no answers", {12, 16, 6, true, DFG_I32, DFG_F32, 16, true, false}, {"no tensor 'answers'", "i32 (12,6)", NULL}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        dfg_program *p = tk_program(&cases[i].l, stages, settings);
        expect_step_failure(p, cases[i].what, cases[i].needles);
        dfg_program_free(p);
    }
    tk_layout l = layout(12, 16, 6, false);
    /* an unknown task never reaches the stage: the settings table refuses it when it is set */
    dfg_program *p = dfg_program_new("tasks");
    CHECK(dfg_program_set(p, "task", "divide") && strstr(dfg_program_error(p), "'divide' is not one of the values (copy, reverse"),
          "unknown task: %s", dfg_program_error(p));
    dfg_program_free(p);
    const char *bad_group[] = {"task", "reverse", "digits", "6", "prompts", "3", "group", "0", NULL};
    p = tk_program(&l, stages, bad_group);
    expect_step_failure(p, "group 0", (const char *[]){"group (0)", NULL});
    dfg_program_free(p);
}

/* Hand-made rollouts: prompt_len 4, completions in columns 4 .. 9. */
static void write_rollout(dfg_runtime *rt) {
    const char *rows[4] = {"12+3359$12", "1234358$__", "1234359999", "12343759$_"};
    const float masks[4][10] = {
        {0, 0, 0, 0, 1, 1, 1, 1, 0, 0},
        {0, 0, 0, 0, 1, 1, 1, 1, 0, 0},
        {0, 0, 0, 0, 1, 1, 1, 1, 1, 1},
        {1, 1, 1, 1, 1, 0, 1, 1, 1, 0}, /* a gap (the 7 is skipped); mask on the prompt ignored */
    };
    int32_t tokens[40], answers[16] = {0}, answer_len[4] = {3, 3, 3, 3};
    for (int r = 0; r < 4; r++) {
        enc(rows[r], tokens + 10 * r, 10);
        enc("359", answers + 4 * r, 4);
    }
    CHECK(!dfg_runtime_write(rt, "tokens", tokens, sizeof(tokens)) && !dfg_runtime_write(rt, "completion_mask", masks, sizeof(masks)) &&
              !dfg_runtime_write(rt, "answers", answers, sizeof(answers)) &&
              !dfg_runtime_write(rt, "answer_len", answer_len, sizeof(answer_len)),
          "write the rollout: %s", dfg_runtime_error(rt));
}

static void test_rewards_stage(void) {
    tk_layout l = layout(4, 10, 4, false);
    const char *completions[4] = {"359$", "358$", "359999", "359$"}; /* what each row's mask selects */
    const char *kinds[] = {"exact", "partial", "format", "mixed"};
    for (int k = 0; k < 4; k++) {
        const char *settings[] = {"prompt_len", "4", "reward", kinds[k], NULL};
        dfg_program *p = tk_program(&l, (const char *[]){"reward", "tk_rewards", NULL}, settings);
        dfg_runtime *rt = tk_runtime(p, 3);
        float rewards[4] = {-1, -1, -1, -1};
        if (rt) {
            write_rollout(rt);
            CHECK(!dfg_runtime_step(rt), "%s: step: %s", kinds[k], dfg_runtime_error(rt));
            CHECK(!dfg_runtime_read(rt, "rewards", rewards, sizeof(rewards)), "read rewards");
        }
        int32_t ans[4], c[10];
        int L = enc("359", ans, 4);
        for (int r = 0; r < 4; r++) {
            int n = enc(completions[r], c, 10);
            float want = dfg_reward_by_name(kinds[k])(c, n, ans, L, NULL);
            CHECK(rewards[r] == want, "%s: row %d reward %g, expected %g", kinds[k], r, rewards[r], want);
        }
        if (k == 3)
            CHECK(rewards[0] == 1.0f && fabsf(rewards[1] - 0.325f) < 1e-6f && fabsf(rewards[2] - 0.15f) < 1e-6f &&
                      rewards[3] == 1.0f,
                  "mixed: %g %g %g %g", rewards[0], rewards[1], rewards[2], rewards[3]);
        dfg_runtime_free(rt);
        dfg_program_free(p);
    }

    /* the callback form: what the probe saw */
    const char *settings[] = {"prompt_len", "4", NULL};
    dfg_program *p = tk_program(&l, (const char *[]){"reward", "tk_probe", NULL}, settings);
    dfg_runtime *rt = tk_runtime(p, 3);
    if (rt) {
        write_rollout(rt);
        float rewards[4];
        CHECK(!dfg_runtime_step(rt), "probe: step: %s", dfg_runtime_error(rt));
        CHECK(!dfg_runtime_read(rt, "rewards", rewards, sizeof(rewards)), "read rewards");
        for (int r = 0; r < 4; r++) {
            int32_t c[10];
            int n = enc(completions[r], c, 10);
            float want = 0.5f + 1000.0f * n + 10000.0f * 3 + 100000.0f * dfg_vocab_id('3');
            for (int i = 0; i < n; i++) want += (float)(c[i] * (i + 1));
            CHECK(rewards[r] == want, "probe: row %d got %.1f, expected %.1f (completion '%s')", r, rewards[r], want, completions[r]);
        }
    }
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

static void test_rewards_stage_errors(void) {
    const char *mixed[] = {"prompt_len", "4", "reward", "mixed", NULL};
    const char *stage[] = {"reward", "tk_rewards", NULL};
    tk_layout ok = layout(4, 10, 4, false);

    /* an unknown reward never reaches the stage: the settings table refuses it when it is set */
    dfg_program *p = dfg_program_new("tasks");
    CHECK(dfg_program_set(p, "reward", "bogus") && strstr(dfg_program_error(p), "(exact, partial, format, mixed, external)"),
          "unknown reward: %s", dfg_program_error(p));
    dfg_program_free(p);

    const char *far[] = {"prompt_len", "10", "reward", "mixed", NULL};
    p = tk_program(&ok, stage, far);
    expect_step_failure(p, "prompt_len >= T", (const char *[]){"prompt_len 10", "'tokens'", NULL});
    dfg_program_free(p);

    tk_layout l = ok;
    l.mask_dtype = DFG_I32;
    p = tk_program(&l, stage, mixed);
    expect_step_failure(p, "mask dtype", (const char *[]){"'completion_mask'", "f32 (4,10)", "i32", NULL});
    dfg_program_free(p);

    l = ok;
    l.no_rewards = true;
    p = tk_program(&l, stage, mixed);
    expect_step_failure(p, "no rewards", (const char *[]){"no tensor 'rewards'", "f32 (4)", NULL});
    dfg_program_free(p);

    /* answer_len beyond the answers' width, and a reward that is not a number */
    const char *probe[] = {"prompt_len", "4", NULL};
    for (int k = 0; k < 2; k++) {
        p = tk_program(&ok, k == 0 ? stage : (const char *[]){"reward", "tk_nan", NULL}, k == 0 ? mixed : probe);
        dfg_runtime *rt = tk_runtime(p, 3);
        if (rt) {
            write_rollout(rt);
            if (k == 0) dfg_runtime_write(rt, "answer_len", (int32_t[]){3, 5, 3, 3}, 16);
            CHECK(dfg_runtime_step(rt) != DFG_OK, "case %d: the step should fail", k);
            const char *msg = dfg_runtime_error(rt);
            CHECK(k == 0 ? strstr(msg, "answer_len[1] = 5") != NULL : strstr(msg, "row 0") && strstr(msg, "not a finite number"),
                  "case %d: %s", k, msg);
        }
        dfg_runtime_free(rt);
        dfg_program_free(p);
    }
}

/* The two helpers end to end: make a batch, play a rollout that writes the supervised rows
 * (the right answers) as completions with sft_mask as the completion mask, damage one row,
 * score with "exact": 1 everywhere but the damaged row. */
static void test_round_trip(void) {
    dfg_task t;
    CHECK(!dfg_task_init(&t, "add", 4, NULL, 0), "init");
    tk_layout l = layout(8, 16, t.max_answer_len, true);
    char pl[8];
    snprintf(pl, sizeof(pl), "%d", t.prompt_len);
    const char *settings[] = {"task", "add", "digits", "4", "prompts", "2", "group", "4", "prompt_len", pl, "reward", "exact", NULL};
    dfg_program *p = tk_program(&l, (const char *[]){"data", "tk_make", "reward", "tk_rewards", NULL}, settings);
    dfg_runtime *rt = tk_runtime(p, dfg_test_u64());
    if (rt) {
        static batch b;
        CHECK(!dfg_runtime_skip_stage(rt, "reward", true) && !dfg_runtime_step(rt), "data step: %s", dfg_runtime_error(rt));
        read_batch(rt, &l, &b);
        check_batch(&t, &l, &b, 4);
        int64_t damaged = 5, pos = t.prompt_len; /* the answer's first digit */
        b.sft_tokens[damaged * l.T + pos] = DFG_VOCAB_DIGIT0 + (b.sft_tokens[damaged * l.T + pos] - DFG_VOCAB_DIGIT0 + 1) % 10;
        CHECK(!dfg_runtime_write(rt, "tokens", b.sft_tokens, sizeof(int32_t) * (size_t)(l.N * l.T)) &&
                  !dfg_runtime_write(rt, "completion_mask", b.sft_mask, sizeof(float) * (size_t)(l.N * l.T)),
              "write: %s", dfg_runtime_error(rt));
        CHECK(!dfg_runtime_skip_stage(rt, "data", true) && !dfg_runtime_skip_stage(rt, "reward", false) && !dfg_runtime_step(rt),
              "reward step: %s", dfg_runtime_error(rt));
        float rewards[8];
        CHECK(!dfg_runtime_read(rt, "rewards", rewards, sizeof(rewards)), "read rewards");
        for (int r = 0; r < 8; r++)
            CHECK(rewards[r] == (r == damaged ? 0.0f : 1.0f), "row %d: reward %g ('%s')", r, rewards[r], dec(b.sft_tokens + r * l.T, (int)l.T));
    }
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_tasks");
    test_vocab();
    test_tasks();
    test_task_errors_and_determinism();
    test_rewards_hand_made();
    test_rewards_random();
    if (!dfg_test_tmpdir_create("dfg_tasks")) return 1;
    host_lib = pm_build_text(host_src, "tk_host");
    if (host_lib) {
        test_make_batch();
        test_make_batch_errors();
        test_rewards_stage();
        test_rewards_stage_errors();
        test_round_trip();
    }
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
