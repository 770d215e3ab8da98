/* digits_plugin.c - a reward plugin (dfg run --reward-lib, runtime/host/dfg_reward.h) for the digit tasks:
 * the three parts of the built-in "mixed" reward (examples/tasks/dfg_tasks.h) as separate reward
 * functions, so that reward_weights=0.6,0.3,0.1 gives the built-in reward's values exactly.
 *
 *   cc -shared -fPIC -O2 -I runtime/host -I graph examples/rewards/digits_plugin.c -o digits_plugin.so
 *   dfg compile examples/grpo/grpo.c --set reward=external --set reward_funcs=exact,partial,format \
 *       --set reward_weights=0.6,0.3,0.1 -o p.dfg
 *   dfg run p.dfg --reward-lib ./digits_plugin.so --steps 100
 *
 * The answer comes from the row's field "answer" (a string of the vocabulary's characters: a
 * built-in task sends it, and so does a dataset made by examples/tasks/digits/make_dataset.py).
 * Vocabulary: 0 PAD, 1 EOS, 2..11 the digits, 12 '+', 13 '-', 14 '='. Self-contained: it links
 * nothing of dfg. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dfg_reward.h"

enum { EOS = 1, MINUS = 13, MAX_ANSWER = 256 };

static int char_id(char c) {
    static const char vocab[] = "_$0123456789+-=";
    const char *hit = c ? strchr(vocab, c) : NULL;
    return hit ? (int)(hit - vocab) : -1;
}

/* The field "answer" of a JSON object text, as ids; -1 when absent or not in the vocabulary. */
static int answer_ids(const char *fields, int32_t *ids) {
    const char *a = fields ? strstr(fields, "\"answer\":\"") : NULL;
    if (!a) return -1;
    a += strlen("\"answer\":\"");
    int n = 0;
    for (; *a && *a != '"'; a++) {
        int id = char_id(*a);
        if (id < 0 || n == MAX_ANSWER) return -1;
        ids[n++] = id;
    }
    return *a == '"' ? n : -1;
}

/* The tokens before the first EOS; *eos: whether there is one. */
static int64_t answer_part(const int32_t *c, int64_t n, int *eos) {
    for (int64_t i = 0; i < n; i++)
        if (c[i] == EOS) return *eos = 1, i;
    return *eos = 0, n;
}

static float exact(const int32_t *c, int64_t n, const int32_t *a, int L) {
    int eos;
    int64_t m = answer_part(c, n, &eos);
    if (!eos || m != L) return 0.0f;
    return memcmp(c, a, sizeof(int32_t) * (size_t)L) ? 0.0f : 1.0f;
}

static float partial(const int32_t *c, int64_t n, const int32_t *a, int L) {
    int eos;
    int64_t m = answer_part(c, n, &eos), k = eos ? m + 1 : m, target = L + 1, hits = 0;
    for (int64_t i = 0; i < k && i < target; i++) hits += c[i] == (i < L ? a[i] : EOS);
    return (float)hits / (float)(k > target ? k : target);
}

static float format(const int32_t *c, int64_t n) {
    int eos;
    int64_t m = answer_part(c, n, &eos), first = m > 0 && c[0] == MINUS;
    if (!eos || m - first < 1) return 0.0f;
    for (int64_t i = first; i < m; i++)
        if (c[i] < 2 || c[i] > 11) return 0.0f;
    return 1.0f;
}

int dfg_reward_funcs(const char **names, int max) {
    static const char *const mine[] = {"exact", "partial", "format"};
    if (max < 3) return -1;
    for (int i = 0; i < 3; i++) names[i] = mine[i];
    return 3;
}

int dfg_reward_score(const dfg_reward_row *rows, int n, int64_t step, float *out, char *err, size_t err_len) {
    (void)step;
    int32_t a[MAX_ANSWER];
    for (int i = 0; i < n; i++) {
        const dfg_reward_row *r = &rows[i];
        int L = answer_ids(r->fields, a);
        if (L < 0) {
            snprintf(err, err_len, "row %d has no field \"answer\" in the digit vocabulary (fields %.80s)", i, r->fields);
            return 1;
        }
        out[3 * i] = exact(r->completion_ids, r->n_completion, a, L);
        out[3 * i + 1] = partial(r->completion_ids, r->n_completion, a, L);
        out[3 * i + 2] = format(r->completion_ids, r->n_completion);
    }
    return 0;
}
