/* test_reward_source.c - a reward source's requests in flight (runtime/host/reward_source.c,
 * dfg_reward.h's dfg_reward_source_submit/collect; async_rollouts keeps two): up to
 * DFG_REWARD_MAX_PENDING wait, collected oldest first, for a reward program (a scripted sh fake)
 * and a plugin (a source made with the internal header around a C function); a third submit, a
 * collect with none pending and a collect of the wrong row count are refused with one line; and a
 * program that writes a long answer to request 1 before it reads request 2 while dfg writes a
 * long request 2 does not deadlock (dfg reads while it sends). No deadline passes: SLOW is one no
 * healthy answer nears. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/host/reward_internal.h"
#include "testutil.h"

#define SLOW 30.0
#define HELLO "echo '{\"reward_funcs\":[\"f\"]}'; "

static char err[1024];
static int32_t ids[4] = {3, 4, 5, 6};

static void rows_of(dfg_reward_row *rows, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        rows[i] = (dfg_reward_row){.prompt_ids = ids, .n_prompt = 2, .completion_ids = ids + 2, .n_completion = 2,
                                   .index = i, .fields = "{}"};
}

static void expect_refused(dfg_status st, const char *needle, const char *what) {
    CHECK(st == DFG_ERR_ARG, "%s: status %d, expected DFG_ERR_ARG (%s)", what, (int)st, err);
    CHECK(strstr(err, needle) != NULL, "%s: '%s' does not say '%s'", what, err, needle);
    CHECK(!strchr(err, '\n'), "%s: one line: '%s'", what, err);
}

/* Two requests out, a third refused, the answers taken in order; then none left. */
static void check_fifo(dfg_reward_source *s, const float *first, const float *second, const char *what) {
    dfg_reward_row rows[3];
    float out[3] = {0};
    rows_of(rows, 3);
    CHECK(dfg_reward_source_pending(s) == 0, "%s: nothing pending at first", what);
    CHECK(!dfg_reward_source_submit(s, rows, 2, 1, err, sizeof(err)), "%s: submit step 1: %s", what, err);
    CHECK(!dfg_reward_source_submit(s, rows, 3, 2, err, sizeof(err)), "%s: submit step 2 before step 1's answer: %s", what, err);
    CHECK(dfg_reward_source_pending(s) == 2, "%s: two pending", what);
    expect_refused(dfg_reward_source_submit(s, rows, 1, 3, err, sizeof(err)), "steps 1 and 2", "a third submit");
    expect_refused(dfg_reward_source_collect(s, 3, out, err, sizeof(err)), "2 rows were submitted, not 3",
                   "collecting step 1 with step 2's row count");
    CHECK(dfg_reward_source_pending(s) == 2, "%s: a refused collect takes nothing", what);
    CHECK(!dfg_reward_source_collect(s, 2, out, err, sizeof(err)), "%s: collect step 1: %s", what, err);
    CHECK(out[0] == first[0] && out[1] == first[1], "%s: step 1's answer first: %g %g", what, out[0], out[1]);
    CHECK(dfg_reward_source_pending(s) == 1, "%s: one pending", what);
    CHECK(!dfg_reward_source_submit(s, rows, 1, 3, err, sizeof(err)), "%s: a third request once step 1's is in: %s", what, err);
    CHECK(!dfg_reward_source_collect(s, 3, out, err, sizeof(err)), "%s: collect step 2: %s", what, err);
    CHECK(out[0] == second[0] && out[1] == second[1] && out[2] == second[2], "%s: step 2's answer next: %g %g %g", what,
          out[0], out[1], out[2]);
    CHECK(!dfg_reward_source_collect(s, 1, out, err, sizeof(err)), "%s: collect step 3: %s", what, err);
    expect_refused(dfg_reward_source_collect(s, 1, out, err, sizeof(err)), "no request to collect", "a collect with none pending");
}

static void test_program(void) {
    char script[2048], *log = dfg_test_tmp_path("requests.log");
    snprintf(script, sizeof(script), HELLO "read -r a; echo \"$a\" >> '%s'; echo '{\"rewards\":[1,2]}'; "
             "read -r b; echo \"$b\" >> '%s'; echo '{\"rewards\":[3,4,5]}'; "
             "read -r c; echo \"$c\" >> '%s'; echo '{\"rewards\":[6]}'; read -r d", log, log, log);
    dfg_reward_source *s = NULL;
    CHECK(!dfg_reward_program_open(script, SLOW, &s, err, sizeof(err)), "open the fake: %s", err);
    if (!s) return;
    check_fifo(s, (const float[]){1, 2}, (const float[]){3, 4, 5}, "program");
    dfg_reward_source_free(s);
    FILE *f = fopen(log, "r");
    char line[3][4096] = {{0}};
    for (int i = 0; f && i < 3; i++)
        if (!fgets(line[i], sizeof(line[i]), f)) line[i][0] = '\0';
    if (f) fclose(f);
    CHECK(!strncmp(line[0], "{\"step\":1,", 10) && !strncmp(line[1], "{\"step\":2,", 10) && !strncmp(line[2], "{\"step\":3,", 10),
          "the program got steps 1, 2, 3 in order: '%.20s' '%.20s' '%.20s'", line[0], line[1], line[2]);
    remove(log);
}

/* Request 1 is answered with a line longer than a socket's buffer before the program reads
 * request 2, which is as long: dfg must read answer 1 while it writes request 2. */
static void test_program_no_deadlock(void) {
    enum { N = 60000 };
    char script[1024];
    snprintf(script, sizeof(script), HELLO "read -r a; awk 'BEGIN { printf \"{\\\"rewards\\\":[\"; "
             "for (i = 0; i < %d; i++) printf(i ? \",0.5\" : \"0.5\"); print \"]}\" }'; "
             "read -r b; echo '{\"rewards\":[7]}'; read -r c", N);
    dfg_reward_source *s = NULL;
    CHECK(!dfg_reward_program_open(script, SLOW, &s, err, sizeof(err)), "open the fake: %s", err);
    if (!s) return;
    dfg_reward_row *rows = calloc(N, sizeof(*rows));
    float *out = calloc(N, sizeof(float));
    if (!rows || !out) {
        CHECK(0, "out of memory");
    } else {
        rows_of(rows, N);
        CHECK(!dfg_reward_source_submit(s, rows, N, 1, err, sizeof(err)), "submit a long request 1: %s", err);
        CHECK(!dfg_reward_source_submit(s, rows, N, 2, err, sizeof(err)), "submit a long request 2 meanwhile: %s", err);
        CHECK(!dfg_reward_source_collect(s, N, out, err, sizeof(err)), "collect the long answer 1: %s", err);
        CHECK(out[0] == 0.5f && out[N - 1] == 0.5f, "answer 1's values: %g .. %g", out[0], out[N - 1]);
        expect_refused(dfg_reward_source_collect(s, 1, out, err, sizeof(err)), "60000 rows were submitted, not 1",
                       "request 2's rows");
    }
    free(rows);
    free(out);
    dfg_reward_source_free(s);
}

/* A plugin scores at the submit: row i of step s gets 10 s + i. */
static int fake_score(const dfg_reward_row *rows, int n, int64_t step, float *out, char *e, size_t len) {
    (void)rows, (void)e, (void)len;
    for (int i = 0; i < n; i++) out[i] = (float)(10 * step + i);
    return 0;
}

static void test_plugin(void) {
    dfg_reward_source *s = calloc(1, sizeof(*s));
    if (!s) return;
    s->kind = DFG_REWARD_PLUGIN;
    s->score = fake_score;
    s->n_funcs = 1;
    s->names[0] = malloc(2);
    if (s->names[0]) strcpy(s->names[0], "f");
    snprintf(s->desc, sizeof(s->desc), "plugin 'fake'");
    check_fifo(s, (const float[]){10, 11}, (const float[]){20, 21, 22}, "plugin");
    dfg_reward_source_free(s);
}

int main(void) {
    test_program();
    test_program_no_deadlock();
    test_plugin();
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
