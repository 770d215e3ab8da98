/* calculator.c - the calculator task's tool and its turns (dfg_tasks.h): multiply(a, b) as a
 * built-in tool environment, so that a multi-turn GRPO run needs no program beside dfg. The
 * grammar is the task vocabulary's: a call is '@', digits, '*', digits and the turn's EOS; the
 * tool's answer is '=', the product's digits, '=' (the '=' after it stands where a chat template
 * puts the next assistant header). */
#include "dfg_tasks.h"

#include <stdint.h>
#include <string.h>

enum { TOK_EQUALS = 14, TOK_TIMES = 15, TOK_CALL = 16, MAX_OPERAND = 9 };

static int digit_of(int32_t id) { return id >= DFG_VOCAB_DIGIT0 && id < DFG_VOCAB_DIGIT0 + 10 ? id - DFG_VOCAB_DIGIT0 : -1; }

/* The value of n digit tokens, or -1 when one is no digit or there are none or too many. */
static int64_t number(const int32_t *ids, int n) {
    if (n < 1 || n > MAX_OPERAND) return -1;
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        int d = digit_of(ids[i]);
        if (d < 0) return -1;
        v = 10 * v + d;
    }
    return v;
}

int dfg_calculator_product(const int32_t *a, int na, const int32_t *b, int nb, int32_t *out) {
    int64_t x = number(a, na), y = number(b, nb);
    if (x < 0 || y < 0 || !out) return -1;
    uint64_t p = (uint64_t)x * (uint64_t)y; /* < 10^18 */
    int32_t rev[20];
    int n = 0;
    do rev[n++] = DFG_VOCAB_DIGIT0 + (int32_t)(p % 10u), p /= 10u;
    while (p);
    for (int i = 0; i < n; i++) out[i] = rev[n - 1 - i];
    return n;
}

/* Is turn[0 .. n-1] a call "@a*b" (its EOS cut off)? *star gets the '*' position. */
static bool is_call(const int32_t *turn, int n, int *star) {
    if (n < 4 || turn[0] != TOK_CALL) return false;
    *star = -1;
    for (int i = 1; i < n; i++) {
        if (turn[i] == TOK_TIMES) {
            if (*star >= 0) return false;
            *star = i;
        } else if (digit_of(turn[i]) < 0) return false;
    }
    return *star > 1 && *star < n - 1;
}

int dfg_task_tool_turn(const dfg_task *t, const int32_t *turn, int n, int32_t *suffix, int max, int *calls,
                       int *failures) {
    if (!t || !turn || !suffix || !t->name || strcmp(t->name, "calculator")) return 0; /* the others have no tool */
    int len = n, star = -1;
    if (len > 0 && turn[len - 1] == DFG_VOCAB_EOS) len--; /* a turn ends with its EOS */
    else return 0;                                         /* cut by the budget: no turn to answer */
    if (!is_call(turn, len, &star)) return 0;              /* the answer, or plain text: the episode ends */
    if (calls) (*calls)++;
    int32_t product[20];
    int k = dfg_calculator_product(turn + 1, star - 1, turn + star + 1, len - star - 1, product + 1);
    if (k < 0) { /* an operand the tool refuses (past 9 digits): TRL's {"error": ...} */
        if (failures) (*failures)++;
        k = 0;
    }
    product[0] = TOK_EQUALS, product[k + 1] = TOK_EQUALS;
    if (k + 2 > max) return max + 1;
    for (int i = 0; i < k + 2; i++) suffix[i] = product[i];
    return k + 2;
}

int dfg_task_last_turn(const dfg_task *t, const int32_t *completion, int n) {
    if (!t || !t->name || strcmp(t->name, "calculator") || !completion) return 0;
    int last = 0;
    for (int i = 0; i < n; i++)
        if (completion[i] == TOK_EQUALS) last = i + 1;
    return last;
}
