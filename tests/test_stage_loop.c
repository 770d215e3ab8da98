/* test_stage_loop.c - dfg_stage_loop: a step goes back over stages while a flag reads 0 (the
 * multi-turn rollout's decode <-> tools loop). Checked: how many passes run (the flag, the most
 * returns), the runs each stage reports over all passes, that a loop stage's rules (until) hold
 * on every pass, that memory is planned for the loop (a tensor that lives in the loop's first
 * stage only keeps its bytes while the other stage's temporary is live: without the loop's
 * lifetimes they share bytes and the count comes out wrong; and the checking mode keeps those
 * bytes alive until the loop ends), that a step skipping the loop's last
 * stage does not loop, that a saved plan loops the same, and the refusals. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "../runtime/formats/planfile.h"

/* A host stage in the loop: counts its calls in a persistent i32. */
DFG_API dfg_status loop_test_host(dfg_host_ctx *ctx);
dfg_status loop_test_host(dfg_host_ctx *ctx) {
    dfg_buffer b;
    if (dfg_host_buffer(ctx, "host_calls", &b)) return dfg_host_fail(ctx, "no host_calls");
    ((int32_t *)b.data)[0] += 1;
    return DFG_OK;
}

#define N 4096 /* large enough that the planner places the temporary below over a freed buffer */

static dfg_tensor *last_flag, *last_kept; /* the last build's, for the refusals */

/* init: kept = 0, passes = 0. Loop "a" .. "host" .. "b":
 *   a     (repeat 5, until a_done): kept += 1 (a tensor scoped to 'a' alone), a_runs += 1,
 *         a_done = 1 on its second run of each pass
 *   host  host_calls += 1
 *   b     a temporary of kept's size filled with 100 and summed into junk; passes += 1;
 *         flag = passes >= 3 */
static dfg_program *build(int max_loops, bool loop) {
    dfg_program *p = dfg_program_new("loop");
    dfg_tensor *kept = dfg_state(p, "kept", DFG_F32, DFG_SHAPE(N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *kept_sum = dfg_state(p, "kept_sum", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *a_runs = dfg_state(p, "a_runs", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *a_done = dfg_state(p, "a_done", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *a_pass = dfg_state(p, "a_pass", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *passes = dfg_state(p, "passes", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *flag = dfg_state(p, "flag", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *junk = dfg_state(p, "junk", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_state(p, "host_calls", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());

    dfg_graph *g = dfg_graph_new(p, "init");
    dfg_assign_fill(g, passes, 0.0f), dfg_assign_fill(g, flag, 0.0f); /* kept starts at 0: one step a runtime */
    dfg_stage_graph(p, g, 1);

    g = dfg_graph_new(p, "a");
    dfg_tensor *first_run = dfg_equal(g, a_pass, dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f)); /* 1 on a pass's first run */
    dfg_assign(g, kept, dfg_add_scalar(g, kept, 1.0f));
    dfg_assign(g, kept_sum, dfg_sum(g, kept, 0));
    dfg_assign(g, a_runs, dfg_add_scalar(g, a_runs, 1.0f));
    dfg_assign(g, a_done, dfg_affine(g, first_run, -1.0f, 1.0f)); /* 0 after the first run, 1 after the second */
    dfg_assign(g, a_pass, dfg_mul(g, first_run, dfg_fill(g, DFG_F32, DFG_SCALAR, 1.0f)));
    dfg_stage_graph(p, g, 5);
    dfg_stage_until(p, "a", a_done);
    dfg_set_scope(p, kept, "a", "a");

    dfg_stage_host(p, "host", "loop_test_host");

    g = dfg_graph_new(p, "b");
    dfg_tensor *tmp = dfg_fill(g, DFG_F32, DFG_SHAPE(N), 100.0f);
    dfg_assign(g, junk, dfg_sum(g, dfg_add_scalar(g, tmp, 1.0f), 0));
    dfg_tensor *np = dfg_add_scalar(g, passes, 1.0f);
    dfg_assign(g, passes, np);
    dfg_assign(g, a_pass, dfg_fill(g, DFG_F32, DFG_SCALAR, 0.0f));
    dfg_assign(g, flag, dfg_equal(g, dfg_maximum(g, np, dfg_fill(g, DFG_F32, DFG_SCALAR, 3.0f)), np));
    dfg_stage_graph(p, g, 1);
    if (loop) dfg_stage_loop(p, "a", "b", flag, max_loops);
    last_flag = flag, last_kept = kept;
    return p;
}

/* build(), then a stage "c" after the loop: the loop's lifetimes end before the step's last stage */
static dfg_program *build_then_c(int max_loops) {
    dfg_program *p = build(max_loops, true);
    dfg_tensor *after = dfg_state(p, "after", DFG_F32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "c");
    dfg_assign(g, after, dfg_add_scalar(g, after, 1.0f));
    dfg_stage_graph(p, g, 1);
    return p;
}

static float read_f32(dfg_runtime *rt, const char *name) {
    float v = -1;
    CHECK(dfg_runtime_read(rt, name, &v, sizeof(v)) == DFG_OK, "read %s: %s", name, dfg_runtime_error(rt));
    return v;
}

static int stage_index(const dfg_runtime *rt, const char *name) {
    for (int s = 0; dfg_runtime_stage_name(rt, s); s++)
        if (!strcmp(dfg_runtime_stage_name(rt, s), name)) return s;
    return -1;
}

/* One step of p; the passes, a's runs and the kept tensor's sum as the loop left them. check:
 * under DFG_CHECK's checking mode (dfg_run_options.check), which poisons each buffer when its
 * planned lifetime ends: `kept`, planned over the whole loop, must not die after a pass's last
 * stage while the step goes back to read it. */
static void run_step_with(dfg_program *p, const char *what, float want_passes, bool check) {
    dfg_runtime *rt = NULL;
    dfg_run_options o = dfg_run_options_default();
    o.check = check;
    dfg_status st = dfg_runtime_create(p, &o, &rt);
    CHECK(st == DFG_OK, "%s: create: %s", what, dfg_runtime_error(rt));
    if (st == DFG_OK) st = dfg_runtime_step(rt);
    CHECK(st == DFG_OK, "%s: step: %s", what, dfg_runtime_error(rt));
    if (st) {
        dfg_runtime_free(rt);
        return;
    }
    float passes = read_f32(rt, "passes"), runs = read_f32(rt, "a_runs"), sum = read_f32(rt, "kept_sum");
    int32_t calls = -1;
    dfg_runtime_read(rt, "host_calls", &calls, sizeof(calls));
    CHECK(passes == want_passes, "%s: %g passes, want %g", what, passes, want_passes);
    CHECK(runs == 2 * want_passes, "%s: stage a ran %g times, want 2 a pass (its until holds on every pass)", what, runs);
    CHECK(calls == (int32_t)want_passes, "%s: the host stage ran %d times, want %g", what, calls, want_passes);
    /* kept gains 1 per run of a: 2 per pass, every element, when its bytes are kept between passes */
    CHECK(sum == 2.0f * want_passes * N, "%s: kept sums to %g, want %g (its bytes kept across the loop)", what, sum,
          2.0f * want_passes * N);
    int a = stage_index(rt, "a");
    CHECK(a >= 0 && dfg_runtime_stage_runs(rt, a) == (int)(2 * want_passes), "%s: stage a reports %d runs, want %g", what,
          a >= 0 ? dfg_runtime_stage_runs(rt, a) : -1, 2 * want_passes);
    dfg_runtime_free(rt);
}

static void run_step(dfg_program *p, const char *what, float want_passes) { run_step_with(p, what, want_passes, false); }

int main(void) {
    dfg_test_init("test_stage_loop");

    dfg_program *p = build(10, true);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));
    run_step(p, "loop until the flag", 3.0f);
    dfg_program_free(p);
    p = build(10, true); /* the loop ends the step: the pass's temporaries die before it goes back */
    run_step_with(p, "loop until the flag, checked", 3.0f, true);
    dfg_program_free(p);
    p = build_then_c(10); /* a stage after the loop: kept's bytes held until the loop ends */
    run_step_with(p, "loop until the flag, a stage after it, checked", 3.0f, true);
    dfg_program_free(p);

    p = build(1, true); /* one return: two passes, the flag still 0 */
    run_step(p, "loop with one return", 2.0f);
    dfg_program_free(p);

    p = build(10, false);
    run_step(p, "no loop", 1.0f);
    dfg_program_free(p);

    /* a step that skips the loop's last stage does not loop: one pass of a and the host stage */
    p = build(10, true);
    dfg_stage_steps(p, "b", 5, -1);
    dfg_runtime *rt = NULL;
    CHECK(dfg_runtime_create(p, NULL, &rt) == DFG_OK && dfg_runtime_step(rt) == DFG_OK, "skipped last stage: %s",
          dfg_runtime_error(rt));
    int32_t calls = -1;
    dfg_runtime_read(rt, "host_calls", &calls, sizeof(calls));
    CHECK(read_f32(rt, "passes") == 0.0f && read_f32(rt, "a_runs") == 2.0f && calls == 1,
          "with 'b' skipped: %g passes, a ran %g times, the host stage %d (want 0, 2, 1)", read_f32(rt, "passes"),
          read_f32(rt, "a_runs"), calls);
    dfg_runtime_free(rt);
    dfg_program_free(p);

    /* a saved plan loops the same */
    p = build(10, true);
    char err[512] = "";
    CHECK(dfg_test_tmpdir_create("dfg_stage_loop"), "a temporary directory");
    const char *path = dfg_test_tmp_path("loop.dfg");
    dfg_plan_info info = {.target = DFG_TARGET_CPU}, back;
    CHECK(dfg_plan_save(p, &info, path, err, sizeof(err)) == DFG_OK, "save: %s", err);
    dfg_program_free(p);
    dfg_program *q = NULL;
    CHECK(dfg_plan_load(path, &q, &back, err, sizeof(err)) == DFG_OK, "load: %s", err);
    if (q) run_step(q, "loaded plan", 3.0f), dfg_program_free(q), dfg_plan_info_free(&back);
    remove(path);
    dfg_test_tmpdir_remove();

    /* refusals */
    p = build(10, false);
    CHECK(dfg_stage_loop(p, "b", "a", last_flag, 3) == DFG_ERR_ARG && strstr(dfg_program_error(p), "comes after"),
          "a loop backwards is refused: %s", dfg_program_error(p));
    dfg_program_free(p);
    p = build(10, false);
    CHECK(dfg_stage_loop(p, "a", "b", last_flag, 0) == DFG_ERR_ARG, "max_loops 0 is refused");
    dfg_program_free(p);
    p = build(10, false);
    CHECK(dfg_stage_loop(p, "a", "b", last_kept, 3) == DFG_ERR_ARG, "a flag of 4096 values is refused");
    dfg_program_free(p);
    p = build(10, true);
    CHECK(dfg_stage_loop(p, "host", "b", last_flag, 3) == DFG_ERR_ARG &&
              strstr(dfg_program_error(p), "overlaps"),
          "overlapping loops are refused: %s", dfg_program_error(p));
    dfg_program_free(p);
    return dfg_test_finish();
}
