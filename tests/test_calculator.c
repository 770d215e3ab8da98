/* test_calculator.c - the calculator task (examples/tasks/calculator.c): its problems against
 * 64-bit products computed here, its built-in multiply tool turn by turn (calls, plain text,
 * malformed calls, a refused operand, a budget too small), where its last turn starts, and that
 * the other tasks keep their 15-id vocabulary and have no tool. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "../examples/tasks/dfg_tasks.h"

static int encode(const char *s, int32_t *ids) { return dfg_vocab_encode(s, ids, 64); }

static void decode(const int32_t *ids, int n, char *out) { dfg_vocab_decode(ids, n, out, 96); }

/* The value of digit tokens ids[0 .. n-1] */
static int64_t value(const int32_t *ids, int n) {
    int64_t v = 0;
    for (int i = 0; i < n; i++) v = 10 * v + (ids[i] - DFG_VOCAB_DIGIT0);
    return v;
}

static void test_problems(void) {
    for (int d = 1; d <= 9; d++) {
        dfg_task t;
        char err[256];
        CHECK(!dfg_task_init(&t, "calculator", d, err, sizeof(err)), "init %d: %s", d, err);
        CHECK(t.prompt_len == 2 * d + 2 && t.max_answer_len == 2 * d && t.vocab_size == 17, "calculator %d: lengths %d %d, "
              "vocabulary %d", d, t.prompt_len, t.max_answer_len, t.vocab_size);
        CHECK(t.max_completion_len == (2 * d + 3) + (2 * d + 2) + (2 * d + 1), "calculator %d: episode %d", d,
              t.max_completion_len);
        uint64_t rng = dfg_test_u64();
        for (int it = 0; it < 200; it++) {
            int32_t prompt[DFG_TASK_MAX_PROMPT_LEN], answer[DFG_TASK_MAX_ANSWER_LEN];
            int L = dfg_task_sample(&t, &rng, prompt, answer);
            char ps[96], as[96], want[32];
            decode(prompt, t.prompt_len, ps), decode(answer, L, as);
            CHECK(L >= 1 && L <= 2 * d && prompt[d] == dfg_vocab_id('*') && prompt[2 * d + 1] == dfg_vocab_id('='),
                  "calculator %d: problem '%s' -> '%s'", d, ps, as);
            snprintf(want, sizeof(want), "%lld", (long long)(value(prompt, d) * value(prompt + d + 1, d)));
            CHECK(!strcmp(as, want), "calculator %d: '%s' answers '%s', want %s", d, ps, as, want);
        }
    }
    dfg_task t;
    char err[256];
    CHECK(dfg_task_init(&t, "calculator", 10, err, sizeof(err)) == DFG_ERR_ARG && strstr(err, "1 .. 9"), "10 digits: %s", err);
    CHECK(dfg_vocab_size() == 15 && dfg_vocab_char(15) == '*' && dfg_vocab_char(16) == '@' && dfg_vocab_char(17) == '?',
          "the base vocabulary stays 15 ids; '*' and '@' follow");
    CHECK(!dfg_task_init(&t, "add", 3, NULL, 0) && t.vocab_size == 15 && t.max_completion_len == t.max_answer_len + 1,
          "add keeps its vocabulary and completion");
}

/* The tool's answer to a turn written as text ("" when the episode ends), its counts, its return. */
static int turn(const dfg_task *t, const char *text, int max, char *out, int *calls, int *failures) {
    int32_t ids[64], suffix[64];
    int n = encode(text, ids);
    CHECK(n >= 0, "'%s' encodes", text);
    for (int i = 0; i < 64; i++) suffix[i] = -5;
    int k = dfg_task_tool_turn(t, ids, n, suffix, max, calls, failures);
    out[0] = '\0';
    if (k > 0 && k <= max) decode(suffix, k, out);
    for (int i = k > 0 && k <= max ? k : 0; i < 64; i++) CHECK(suffix[i] == -5, "'%s': wrote past its answer", text);
    return k;
}

static void test_tool(void) {
    dfg_task t, add;
    CHECK(!dfg_task_init(&t, "calculator", 3, NULL, 0) && !dfg_task_init(&add, "add", 3, NULL, 0), "init");
    char out[96];
    int calls = 0, failures = 0;
    CHECK(turn(&t, "@12*34$", 20, out, &calls, &failures) == 5 && !strcmp(out, "=408=") && calls == 1 && !failures,
          "a call answers its product: '%s'", out);
    CHECK(turn(&t, "@000*7$", 20, out, &calls, &failures) == 3 && !strcmp(out, "=0=") && calls == 2, "zero: '%s'", out);
    CHECK(turn(&t, "@999999999*999999999$", 40, out, &calls, &failures) == 20 && !strcmp(out, "=999999998000000001=") &&
              calls == 3,
          "the largest operands: '%s'", out);
    const char *plain[] = {"408$", "$", "@12*34", "@12**34$", "@*34$", "@12*$", "@1+2$", "12@3*4$", "@12*34$$"};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) /* the answer, no EOS yet, or malformed: plain text */
        CHECK(turn(&t, plain[i], 20, out, &calls, &failures) == 0 && calls == 3 && !failures,
              "'%s' is no call: the episode ends", plain[i]);
    CHECK(turn(&t, "@1234567890*2$", 20, out, &calls, &failures) == 2 && !strcmp(out, "==") && calls == 4 && failures == 1,
          "an operand the tool refuses answers the error '%s' and counts a failure", out);
    CHECK(turn(&t, "@12*34$", 4, out, &calls, &failures) == 5, "an answer past the room returns room + 1");
    CHECK(turn(&add, "@12*34$", 20, out, &calls, &failures) == 0 && calls == 5, "add has no tool");
    int32_t ids[64];
    int n = encode("@12*34$=408=408$", ids);
    CHECK(dfg_task_last_turn(&t, ids, n) == 12, "the last turn starts after the last '=': %d", dfg_task_last_turn(&t, ids, n));
    n = encode("408$", ids);
    CHECK(dfg_task_last_turn(&t, ids, n) == 0 && dfg_task_last_turn(&add, ids, n) == 0, "no call: the whole completion");
    n = encode("12=3$", ids);
    CHECK(dfg_task_last_turn(&add, ids, n) == 0, "other tasks score the whole completion");
}

int main(void) {
    dfg_test_init("test_calculator");
    test_problems();
    test_tool();
    return dfg_test_finish();
}
