/* test_stages.c - when stages run: dfg_stage_steps ranges (a warm-up before other stages),
 * dfg_runtime_skip_stage (training on rollouts the host supplies) and dfg_runtime_set_steps_done
 * (a resumed run continues inside the right ranges). Each stage adds its own constant into one
 * i32 counter, so the counter tells exactly which stages ran, and reports it as a metric named
 * after the stage, which dfg_runtime_metric_updated must call fresh exactly when that stage ran. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static dfg_status build(dfg_program *p) {
    dfg_tensor *count = dfg_state(p, "count", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    const char *names[3] = {"warmup", "always", "late"};
    const float add[3] = {1, 10, 100};
    for (int i = 0; i < 3; i++) {
        dfg_graph *g = dfg_graph_new(p, names[i]);
        dfg_assign(g, count, dfg_add_scalar(g, count, add[i]));
        dfg_metric(g, names[i], dfg_cast(g, count, DFG_F32));
        dfg_stage_graph(p, g, 1);
    }
    dfg_stage_steps(p, "warmup", 0, 1); /* steps 0 and 1 */
    dfg_stage_steps(p, "late", 3, -1);  /* from step 3 on */
    return dfg_program_status(p);
}

/* Checks which metrics the last step updated: ran[i] for stage i of build(). */
static void check_updated(dfg_runtime *rt, const char *when, bool w, bool a, bool l) {
    const bool want[3] = {w, a, l};
    CHECK(dfg_runtime_metric_count(rt) == 3, "three metrics, got %d", dfg_runtime_metric_count(rt));
    for (int i = 0; i < 3 && i < dfg_runtime_metric_count(rt); i++)
        CHECK(dfg_runtime_metric_updated(rt, i) == want[i], "%s: metric '%s' updated=%d, want %d", when,
              dfg_runtime_metric_name(rt, i), dfg_runtime_metric_updated(rt, i), want[i]);
}

static int32_t counter(dfg_runtime *rt) {
    int32_t v = -1;
    CHECK(dfg_runtime_read(rt, "count", &v, sizeof(v)) == DFG_OK, "read: %s", dfg_runtime_error(rt));
    return v;
}

int main(void) {
    dfg_test_init("test_stages");
    dfg_program *p = dfg_program_new("stages");
    CHECK(build(p) == DFG_OK, "build: %s", dfg_program_error(p));
    CHECK(dfg_stage_steps(p, "nope", 0, 1) == DFG_ERR_ARG, "an unknown stage name is refused");
    dfg_program_free(p);

    p = dfg_program_new("stages");
    build(p);
    CHECK(dfg_stage_steps(p, "always", 5, 2) == DFG_ERR_ARG && strstr(dfg_program_error(p), "not a range"),
          "a reversed range is refused: %s", dfg_program_error(p));
    dfg_program_free(p);

    p = dfg_program_new("stages");
    build(p);
    dfg_runtime *rt = NULL;
    CHECK(dfg_runtime_create(p, NULL, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    /* steps 0, 1: warmup + always; 2: always; 3, 4: always + late */
    const int32_t want[5] = {11, 22, 32, 142, 252};
    check_updated(rt, "before the first step", false, false, false);
    for (int s = 0; s < 5; s++) {
        CHECK(dfg_runtime_step(rt) == DFG_OK, "step %d: %s", s, dfg_runtime_error(rt));
        int32_t v = counter(rt);
        CHECK(v == want[s], "after step %d the counter is %d, want %d", s, v, want[s]);
        char when[32];
        snprintf(when, sizeof(when), "step %d", s);
        check_updated(rt, when, s <= 1, true, s >= 3);
    }
    CHECK(dfg_runtime_metric_value(rt, 0) == 12.0f, "the warm-up's metric keeps its step-1 value (11 + 1): %g",
          dfg_runtime_metric_value(rt, 0));
    CHECK(dfg_runtime_skip_stage(rt, "always", true) == DFG_OK, "skip always");
    dfg_runtime_step(rt);
    CHECK(counter(rt) == 352, "with 'always' skipped only 'late' adds: %d", counter(rt));
    check_updated(rt, "'always' skipped", false, false, true);
    CHECK(dfg_runtime_skip_stage(rt, "missing", true) == DFG_ERR_ARG && strstr(dfg_runtime_error(rt), "missing"),
          "skipping an unknown stage names it: %s", dfg_runtime_error(rt));
    dfg_runtime_skip_stage(rt, "always", false);
    /* back to step 1: warmup runs again; the step counter drives the ranges */
    CHECK(dfg_runtime_set_steps_done(rt, 1) == DFG_OK, "set steps");
    dfg_runtime_step(rt);
    CHECK(counter(rt) == 363 && dfg_runtime_steps_done(rt) == 2, "step 1 again: %d, steps %lld", counter(rt),
          (long long)dfg_runtime_steps_done(rt));
    dfg_runtime_free(rt);
    dfg_program_free(p);
    return dfg_test_finish();
}
