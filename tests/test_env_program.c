/* test_env_program.c - the environment program's C client (runtime/host/env_program.c,
 * docs/agents.md) against scripted fake programs (small sh scripts): the requests it writes, byte
 * for byte; the answers it takes (new prompts, suffixes, calls and failures, messages, rewards);
 * and each way a program can fail: a malformed hello, a malformed, short or inconsistent answer,
 * an "error" answer, a program that dies, one that hangs past its timeout. Each failure is a
 * status and one line naming what went wrong, never a crash. The only deadline that passes is
 * the hang's (the fake sleeps far longer than it); every other deadline is one no answer nears. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/host/dfg_env.h"
#include "testutil.h"

#define SLOW 30.0  /* a deadline no healthy answer nears */
#define HELLO "echo '{\"tools\":[\"multiply\",\"add\"],\"reward\":\"Guess\"}'; "

static char err[1024];

/* Opens `script` (a sh command); NULL after a failed CHECK when it must open. */
static dfg_env_source *open_env(const char *script, double turn_timeout, dfg_status want) {
    dfg_env_source *s = NULL;
    err[0] = '\0';
    dfg_status st = dfg_env_program_open(script, SLOW, turn_timeout, &s, err, sizeof(err));
    CHECK(st == want, "open '%s': status %d, expected %d (%s)", script, (int)st, (int)want, err);
    CHECK((s != NULL) == (st == DFG_OK), "a handle only on success");
    if (st) CHECK(err[0] && !strchr(err, '\n'), "a failure is one line: '%s'", err);
    return s;
}

static void expect_err(dfg_status st, dfg_status want, const char *needle, const char *what) {
    CHECK(st == want, "%s: status %d, expected %d (%s)", what, (int)st, (int)want, err);
    CHECK(strstr(err, needle) != NULL, "%s: '%s' does not say '%s'", what, err, needle);
    CHECK(!strchr(err, '\n'), "%s: one line: '%s'", what, err);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* A whole episode with a well-behaved fake: the requests it got and the answers dfg took. */
static void test_episode(void) {
    char script[2048], *log = dfg_test_tmp_path("requests.log");
    snprintf(script, sizeof(script), HELLO "read -r a; echo \"$a\" >> '%s'; echo '{\"prompts\":[null,[5,6,7]]}'; "
             "read -r b; echo \"$b\" >> '%s'; "
             "echo '{\"turns\":[{\"done\":false,\"suffix_ids\":[9,8],\"calls\":2,\"failures\":1},"
             "{\"done\":true,\"calls\":0,\"failures\":0}]}'; "
             "read -r c; echo \"$c\" >> '%s'; "
             "echo '{\"messages\":[[{\"role\":\"assistant\",\"content\":\"x\"}],[]],\"rewards\":[0.5,null]}'; "
             "read -r d", log, log, log);
    dfg_env_source *s = open_env(script, SLOW, DFG_OK);
    if (!s) return;
    CHECK(dfg_env_source_n_tools(s) == 2, "two tools");
    CHECK(!strcmp(dfg_env_source_tool(s, 0), "multiply") && !strcmp(dfg_env_source_tool(s, 1), "add"), "in order");
    CHECK(dfg_env_source_tool(s, 2) == NULL, "no third");
    CHECK(dfg_env_source_has_reward(s) && !strcmp(dfg_env_source_reward_name(s), "Guess"), "the class's reward");
    CHECK(strstr(dfg_env_source_desc(s), "environment program '") != NULL, "desc: %s", dfg_env_source_desc(s));

    dfg_program *p = dfg_program_new("p");
    CHECK(dfg_env_source_check(s, p, err, sizeof(err)) == DFG_ERR_ARG && strstr(err, "compiled without tools") &&
          strstr(err, "--set tools=multiply,add"), "a plan without tools: '%s'", err);
    CHECK(dfg_program_set(p, "tools", "add") == DFG_OK, "set tools");
    CHECK(dfg_env_source_check(s, p, err, sizeof(err)) == DFG_ERR_ARG &&
          strstr(err, "serves the tools multiply,add, but the plan was compiled with tools=add"), "both lists: '%s'", err);
    CHECK(dfg_program_set(p, "tools", "multiply, add") == DFG_OK, "set tools");
    CHECK(dfg_env_source_check(s, p, err, sizeof(err)) == DFG_OK, "the same tools: '%s'", err);
    dfg_program_free(p);

    int32_t p0[] = {1, 2}, p1[] = {3};
    dfg_env_row rows[2] = {{p0, 2, 7, "{\"q\":1}"}, {p1, 1, -1, NULL}};
    dfg_env_prompt prompts[2];
    CHECK(dfg_env_reset(s, rows, 2, 4, prompts, err, sizeof(err)) == DFG_OK, "reset: %s", err);
    CHECK(prompts[0].prompt_ids == NULL && prompts[0].n_prompt == 0, "row 0's prompt stays");
    CHECK(prompts[1].n_prompt == 3 && prompts[1].prompt_ids && prompts[1].prompt_ids[0] == 5 &&
          prompts[1].prompt_ids[2] == 7, "row 1's new prompt");

    int32_t t0[] = {11, 12, 2}, t1[] = {13};
    dfg_env_turn turns[2] = {{.row = 0, .turn_ids = t0, .n_turn = 3, .room = 5}, {.row = 1, .turn_ids = t1, .n_turn = 1, .room = 0, .last = 1}};
    dfg_env_answer ans[2];
    CHECK(dfg_env_turns(s, turns, 2, 4, ans, err, sizeof(err)) == DFG_OK, "turns: %s", err);
    CHECK(!ans[0].done && ans[0].n_suffix == 2 && ans[0].suffix_ids[0] == 9 && ans[0].suffix_ids[1] == 8,
          "row 0's suffix");
    CHECK(ans[0].calls == 2 && ans[0].failures == 1, "a tool that raised is counted, not a failure of the program");
    CHECK(ans[1].done && ans[1].n_suffix == 0 && ans[1].suffix_ids == NULL, "row 1 is done");

    float r[2] = {0};
    const char *msgs[2] = {0};
    CHECK(dfg_env_finish(s, 2, 4, r, msgs, err, sizeof(err)) == DFG_OK, "finish: %s", err);
    CHECK(r[0] == 0.5f && isnan(r[1]), "rewards 0.5 and none");
    CHECK(msgs[0] && !strcmp(msgs[0], "[{\"role\":\"assistant\",\"content\":\"x\"}]"), "row 0's messages: %s", msgs[0]);
    CHECK(msgs[1] && !strcmp(msgs[1], "[]"), "row 1's messages: %s", msgs[1]);
    dfg_env_source_free(s);

    const char *want = "{\"type\":\"reset\",\"step\":4,\"rows\":[{\"index\":7,\"prompt_ids\":[1,2],\"fields\":{\"q\":1}},"
                       "{\"index\":-1,\"prompt_ids\":[3],\"fields\":{}}]}\n"
                       "{\"type\":\"turns\",\"step\":4,\"turns\":[{\"row\":0,\"ids\":[11,12,2],\"room\":5,\"last\":false},"
                       "{\"row\":1,\"ids\":[13],\"room\":0,\"last\":true}]}\n"
                       "{\"type\":\"finish\",\"step\":4,\"n\":2}\n";
    const char *got = slurp(log);
    CHECK(got && !strcmp(got, want), "the requests, byte for byte:\n%s\nexpected\n%s", got ? got : "(none)", want);
    remove(log);
}

/* Hellos that are not the protocol's. */
static void test_hellos(void) {
    open_env("echo not-json; sleep 1000", SLOW, DFG_ERR_FORMAT);
    CHECK(strstr(err, "its first line must be {\"tools\": [names]") && strstr(err, "got 'not-json'"), "%s", err);
    open_env("echo '{\"tools\":[\"a b\"]}'; sleep 1000", SLOW, DFG_ERR_FORMAT);
    CHECK(strstr(err, "tool 0 has no usable name"), "%s", err);
    open_env("echo '{\"tools\":[\"a\",\"a\"]}'", SLOW, DFG_ERR_FORMAT);
    CHECK(strstr(err, "tool 'a' is declared twice"), "%s", err);
    open_env("echo '{\"tools\":[]}'", SLOW, DFG_ERR_FORMAT);
    CHECK(strstr(err, "0 tools declared"), "%s", err);
    open_env("echo '{\"tools\":[\"a\"],\"reward\":3}'", SLOW, DFG_ERR_FORMAT);
    open_env("exit 3", SLOW, DFG_ERR_IO);
    CHECK(strstr(err, "exited with status 3"), "%s", err);
    dfg_env_source *s = open_env("echo '{\"tools\":[\"a\"]}'; read -r z", SLOW, DFG_OK);
    CHECK(s && !dfg_env_source_has_reward(s) && !dfg_env_source_reward_name(s), "no reward without one");
    dfg_env_source_free(s);
}

/* One turn request answered by `answer` (a sh command after the hello and reading the request). */
static void bad_turn(const char *answer, dfg_status want, const char *needle, double timeout, int64_t room, int last) {
    char script[1024];
    snprintf(script, sizeof(script), HELLO "read -r a; %s", answer);
    dfg_env_source *s = open_env(script, timeout, DFG_OK);
    if (!s) return;
    int32_t ids[] = {4, 2};
    dfg_env_turn turns[2] = {{.row = 3, .turn_ids = ids, .n_turn = 2, .room = room, .last = last},
                             {.row = 5, .turn_ids = ids, .n_turn = 1, .room = room}};
    dfg_env_answer ans[2];
    err[0] = '\0';
    expect_err(dfg_env_turns(s, turns, 2, 9, ans, err, sizeof(err)), want, needle, answer);
    CHECK(strstr(err, "step 9") != NULL, "names the step: %s", err);
    if (want == DFG_ERR_IO) /* the program is gone: every later call says so */
        expect_err(dfg_env_turns(s, turns, 1, 10, ans, err, sizeof(err)), DFG_ERR_IO, "no longer running", "after it");
    dfg_env_source_free(s);
}

#define OK1 "{\"done\":true,\"calls\":0,\"failures\":0}"
static void test_turn_failures(void) {
    bad_turn("echo garbage; read -r z", DFG_ERR_FORMAT, "the answer is not a JSON object: 'garbage'", SLOW, 5, 0);
    bad_turn("echo '{\"turns\":[" OK1 "]}'; read -r z", DFG_ERR_FORMAT, "has 1 items, expected 2", SLOW, 5, 0);
    bad_turn("echo '{\"error\":\"boom\"}'; read -r z", DFG_ERR_FORMAT, "the program reported an error: boom", SLOW, 5, 0);
    bad_turn("echo '{\"turns\":[{\"done\":false,\"suffix_ids\":[1,2,3],\"calls\":1,\"failures\":0}," OK1 "]}'; read -r z",
             DFG_ERR_FORMAT, "row 3: the program answered 3 suffix ids for a row with room for 2", SLOW, 2, 0);
    bad_turn("echo '{\"turns\":[{\"done\":false,\"suffix_ids\":[1.5],\"calls\":1,\"failures\":0}," OK1 "]}'; read -r z",
             DFG_ERR_FORMAT, "row 3: \"suffix_ids\"[0] is not a token id", SLOW, 5, 0);
    bad_turn("echo '{\"turns\":[{\"done\":false,\"suffix_ids\":[],\"calls\":1,\"failures\":0}," OK1 "]}'; read -r z",
             DFG_ERR_FORMAT, "row 3: \"suffix_ids\" is not a non-empty array", SLOW, 5, 0);
    bad_turn("echo '{\"turns\":[{\"done\":true,\"calls\":1,\"failures\":2}," OK1 "]}'; read -r z",
             DFG_ERR_FORMAT, "row 3: \"failures\" is not an integer 0 .. 1", SLOW, 5, 0);
    bad_turn("echo '{\"turns\":[{\"done\":\"yes\"}," OK1 "]}'; read -r z",
             DFG_ERR_FORMAT, "row 3: the turn's answer is not an object with \"done\"", SLOW, 5, 0);
    bad_turn("echo '{\"turns\":[{\"done\":false,\"suffix_ids\":[1],\"calls\":1,\"failures\":0}," OK1 "]}'; read -r z",
             DFG_ERR_FORMAT, "row 3: the program continued the episode after its last turn", SLOW, 5, 1);
    bad_turn("exit 3", DFG_ERR_IO, "exited with status 3", SLOW, 5, 0);
    bad_turn("kill -9 $$", DFG_ERR_IO, "killed by signal 9", SLOW, 5, 0);
    bad_turn("sleep 1000", DFG_ERR_IO, "no answer within 0.2 s (--env-timeout): killed it", 0.2, 5, 0);
}

static void test_reset_and_finish_failures(void) {
    int32_t ids[] = {1};
    dfg_env_row rows[1] = {{ids, 1, 0, "{}"}};
    dfg_env_prompt pr[1];
    dfg_env_source *s = open_env(HELLO "read -r a; echo '{\"prompts\":[[1,-2]]}'; read -r z", SLOW, DFG_OK);
    if (s) expect_err(dfg_env_reset(s, rows, 1, 2, pr, err, sizeof(err)), DFG_ERR_FORMAT,
                      "step 2, environment program", "a negative id");
    CHECK(strstr(err, "row 0: its new prompt[1] is not a token id"), "%s", err);
    dfg_env_source_free(s);
    s = open_env(HELLO "read -r a; echo '{\"error\":\"reset: ValueError: no such game\"}'; read -r z", SLOW, DFG_OK);
    if (s) expect_err(dfg_env_reset(s, rows, 1, 2, pr, err, sizeof(err)), DFG_ERR_FORMAT,
                      "reported an error: reset: ValueError: no such game", "reset raised");
    dfg_env_source_free(s);
    float r[1];
    const char *m[1];
    s = open_env(HELLO "read -r a; echo '{\"messages\":[[]],\"rewards\":[NaN]}'; read -r z", SLOW, DFG_OK);
    if (s) expect_err(dfg_env_finish(s, 1, 3, r, m, err, sizeof(err)), DFG_ERR_FORMAT, "NaN or Infinity", "a NaN reward");
    dfg_env_source_free(s);
    s = open_env(HELLO "read -r a; echo '{\"messages\":[[]]}'; read -r z", SLOW, DFG_OK);
    if (s) expect_err(dfg_env_finish(s, 1, 3, r, m, err, sizeof(err)), DFG_ERR_FORMAT,
                      "\"rewards\" is not an array of 1 values (the program declared the reward 'Guess')", "no rewards");
    dfg_env_source_free(s);
    s = open_env(HELLO "read -r a; echo '{\"messages\":[{}],\"rewards\":[1]}'; read -r z", SLOW, DFG_OK);
    if (s) expect_err(dfg_env_finish(s, 1, 3, r, m, err, sizeof(err)), DFG_ERR_FORMAT,
                      "row 0: the row's messages are not an array", "messages not a list");
    dfg_env_source_free(s);
}

int main(void) {
    dfg_test_init("test_env_program");
    if (!dfg_test_tmpdir_create("test_env_program")) return 1;
    test_episode();
    test_hellos();
    test_turn_failures();
    test_reset_and_finish_failures();
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
