/* test_check.c - the checking mode (runtime/check.c) catches planner bugs by name.
 *
 * A small graph compiled with keep_order, so that plan step k is build node k:
 *   step 0  a = gelu(x)         (16, 16), read at step 3
 *   step 1  b = scale(x, 2)     (16, 16), live at steps 1-2: a neighbour of a
 *   step 2  s = sum(b, 0)       output "s"
 *   step 3  y = clamp(a, 0, 0)  output "y": 0 whatever a holds
 * (dfg_output names the producing node after the output: a's reader is the node 'y').
 * Moving b's offset onto a's (the runtime's copy of the plan, or the plan itself) is the
 * planner bug "two live tensors share bytes". The outputs do not depend on a's values, so the
 * plain run cannot notice it by value; the checked run must fail with DFG_ERR_STATE naming a,
 * its reader, its writer and b. Further cases: a lifetime the plan ended too early (poison), a
 * view placed apart from its storage, a STATE clobbered after its last read (found at the end
 * of the step), poison really written into dead bytes, DFG_CHECK=1 from the environment, and
 * no false alarm when the host rewrites inputs and parameters between steps or a repeated
 * stage reuses its temporaries. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/plan.h"
#include "runtime/runtime_internal.h"
#include "testutil.h"

enum { N = 16 };

typedef struct {
    dfg_program *p;
    dfg_tensor *a, *b, *s, *y, *v; /* v: a view of a (only with_view) */
    float x[N * N];
} prog;

static void build(prog *P, bool with_view) {
    P->p = dfg_program_new("chk");
    dfg_graph *g = dfg_graph_new(P->p, "train");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(N, N));
    P->a = dfg_gelu(g, x);
    P->b = dfg_scale(g, x, 2.0f);
    P->s = dfg_output(g, dfg_sum(g, P->b, 0), "s");
    P->y = dfg_output(g, dfg_clamp(g, P->a, 0.0f, 0.0f), "y");
    P->v = with_view ? dfg_reshape(g, P->a, DFG_SHAPE(N * N)) : NULL;
    if (with_view) dfg_output(g, dfg_neg(g, P->v), "z"); /* step 5 reads a through the view */
    dfg_stage_graph(P->p, g, 1);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.keep_order = true;
    CHECK(dfg_compile(P->p, &o) == DFG_OK, "compile: %s", dfg_program_error(P->p));
    for (int i = 0; i < N * N; i++) P->x[i] = dfg_test_uniform(-1.0f, 1.0f);
}

static dfg_status create(prog *P, bool check, dfg_runtime **rt) {
    dfg_run_options o = dfg_run_options_default();
    o.n_threads = 1;
    o.check = check;
    dfg_status st = dfg_runtime_create(P->p, &o, rt);
    if (!st) dfg_runtime_write(*rt, "x", P->x, sizeof(P->x));
    return st;
}

static bool has(const char *msg, const char *part) {
    bool ok = strstr(msg, part) != NULL;
    if (!ok) fprintf(stderr, "  message lacks \"%s\": %s\n", part, msg);
    return ok;
}

/* The reference results: s = column sums of 2x, y = 0. */
static void expect_results(dfg_runtime *rt, const prog *P, const char *what) {
    float s[N], y[N * N];
    dfg_runtime_read(rt, "s", s, sizeof(s));
    dfg_runtime_read(rt, "y", y, sizeof(y));
    double err = 0;
    for (int j = 0; j < N; j++) {
        double want = 0;
        for (int i = 0; i < N; i++) want += 2.0 * P->x[i * N + j];
        err = fabs(s[j] - want) > err ? fabs(s[j] - want) : err;
    }
    bool zero = true;
    for (int i = 0; i < N * N; i++) zero &= y[i] == 0.0f;
    CHECK(err < 1e-4 && zero, "%s: s off by %g, y all zero: %d", what, err, zero);
}

/* The program (without the view), its plan changed by corrupt (NULL: none), then body(P, rt, check)
 * on a plain runtime made from it (check false) and on a checked one. */
static void plain_then_checked(void (*corrupt)(prog *P), void (*body)(prog *P, dfg_runtime *rt, bool check)) {
    prog P;
    build(&P, false);
    if (corrupt) corrupt(&P);
    for (int check = 0; check < 2; check++) {
        dfg_runtime *rt = NULL;
        CHECK(create(&P, check, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
        if (rt) body(&P, rt, check);
        dfg_runtime_free(rt);
    }
    dfg_program_free(P.p);
}

/* The uncorrupted plan passes under check mode, and gives the right numbers. */
static void test_clean_run_passes(void) {
    prog P;
    build(&P, false);
    dfg_runtime *rt = NULL;
    CHECK(create(&P, true, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    CHECK(rt && rt->check, "check mode is on");
    for (int k = 0; k < 3 && rt; k++) CHECK(dfg_runtime_step(rt) == DFG_OK, "step %d: %s", k, dfg_runtime_error(rt));
    if (rt) expect_results(rt, &P, "clean checked run");
    dfg_runtime_free(rt);
    dfg_program_free(P.p);
}

/* b moved onto a in the runtime's copy of the plan, after creation (the create-time overlap
 * check cannot see it): the plain run gives exactly the uncorrupted numbers, the checked one
 * stops at a's read naming a, its reader, its writer and b. */
static void moved_offset_at_read(prog *P, dfg_runtime *rt, bool check) {
    CHECK(rt->plan.offset[P->b->id] != rt->plan.offset[P->a->id], "a and b start apart");
    rt->plan.offset[P->b->id] = rt->plan.offset[P->a->id];
    dfg_status st = dfg_runtime_step(rt);
    if (!check) {
        CHECK(st == DFG_OK, "plain run: %s", dfg_runtime_error(rt));
        expect_results(rt, P, "plain run over a corrupted plan (the corruption does not show in the values)");
    } else {
        const char *msg = dfg_runtime_error(rt);
        printf("check mode reports: %s\n", msg);
        CHECK(st == DFG_ERR_STATE, "checked run: %s", dfg_status_name(st));
        CHECK(has(msg, "DFG_CHECK: step 1, graph 'train': input 'gelu#0' of 'y' (plan step 3) changed since plan step 0 (written by 'gelu#0')") &&
                  has(msg, "are shared with 'affine#1' (plan steps 1-2)"),
              "message");
        CHECK(dfg_runtime_step(rt) == DFG_ERR_STATE, "the failure is sticky");
    }
}

static void test_moved_offset_caught_at_read(void) { plain_then_checked(NULL, moved_offset_at_read); }

/* The same bug in the program's plan: with check mode the runtime refuses to start, naming
 * both tensors; through DFG_CHECK=1 as well; a plain runtime starts. */
static void test_moved_offset_caught_at_create(void) {
    prog P;
    build(&P, false);
    P.p->plan->mem.offset[P.b->id] = P.p->plan->mem.offset[P.a->id];
    for (int mode = 0; mode < 3; mode++) { /* plain, opt.check, DFG_CHECK=1 */
        if (mode == 2) setenv("DFG_CHECK", "1", 1);
        dfg_runtime *rt = NULL;
        dfg_status st = create(&P, mode == 1, &rt);
        if (mode == 0) CHECK(st == DFG_OK, "plain create: %s", dfg_runtime_error(rt));
        else {
            const char *msg = dfg_runtime_error(rt);
            CHECK(st == DFG_ERR_STATE && has(msg, "DFG_CHECK: the plan puts 'gelu#0'") && has(msg, "and 'affine#1'") &&
                      has(msg, "in the same bytes while both are live"),
                  "mode %d: %s", mode, msg);
        }
        dfg_runtime_free(rt);
        unsetenv("DFG_CHECK");
    }
    setenv("DFG_CHECK", "0", 1); /* "0" means off */
    dfg_runtime *rt = NULL;
    CHECK(create(&P, false, &rt) == DFG_OK, "DFG_CHECK=0 is off: %s", dfg_runtime_error(rt));
    dfg_runtime_free(rt);
    unsetenv("DFG_CHECK");
    dfg_program_free(P.p);
}

/* A liveness bug: the plan ends a's buffer at its producer's step. Nothing overlaps it, so the
 * plain run is right; check mode poisons a after step 0 and fails at its read at step 3. */
static void short_lifetime(prog *P, dfg_runtime *rt, bool check) {
    dfg_status st = dfg_runtime_step(rt);
    if (!check) {
        CHECK(st == DFG_OK, "plain: %s", dfg_runtime_error(rt));
        expect_results(rt, P, "plain run, short lifetime");
    } else
        CHECK(st == DFG_ERR_STATE && has(dfg_runtime_error(rt), "input 'gelu#0' of 'y' (plan step 3) is read after its "
                                                               "buffer's lifetime (plan steps 0-0) ended; its bytes were poisoned after plan step 0"),
              "checked: %s", dfg_runtime_error(rt));
}

static void end_a_at_its_producer(prog *P) {
    dfg_plan *plan = P->p->plan;
    int b = plan->buf_of[P->a->id];
    while (plan->bufs[b].merged_into >= 0) b = plan->bufs[b].merged_into;
    plan->bufs[b].life.last = 0;
}

static void test_short_lifetime_caught(void) { plain_then_checked(end_a_at_its_producer, short_lifetime); }

/* A view placed apart from its storage reads other bytes, even when those happen to hold the
 * same sum: the checker compares places too. */
static void test_view_apart_caught(void) {
    prog P;
    build(&P, true);
    dfg_runtime *rt = NULL;
    CHECK(create(&P, true, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    if (rt) {
        CHECK(rt->plan.offset[P.v->id] == rt->plan.offset[P.a->id], "a view shares its storage's offset");
        rt->plan.offset[P.v->id] = rt->plan.offset[P.b->id];
        CHECK(dfg_runtime_step(rt) == DFG_ERR_STATE && has(dfg_runtime_error(rt), "input 'reshape#4' of 'z' (plan step 5) is at bytes") &&
                  has(dfg_runtime_error(rt), "but 'gelu#0' wrote its storage at"),
              "view apart: %s", dfg_runtime_error(rt));
    }
    dfg_runtime_free(rt);
    dfg_program_free(P.p);
}

/* Dead bytes hold the poison after a checked step (b died at step 2), not in a plain run. */
static void poison_written(prog *P, dfg_runtime *rt, bool check) {
    CHECK(dfg_runtime_step(rt) == DFG_OK, "step: %s", dfg_runtime_error(rt));
    const uint32_t *w = (const uint32_t *)(const void *)(rt->arena + rt->plan.offset[P->b->id]);
    int poisoned = 0;
    for (int i = 0; i < N * N; i++) poisoned += w[i] == DFG_CHECK_POISON;
    CHECK(poisoned == (check ? N * N : 0), "check %d: %d of %d words of the dead 'affine#1' hold the poison", check,
          poisoned, N * N);
}

static void test_poison_written(void) { plain_then_checked(NULL, poison_written); }

/* A STATE written at step 0 and read by nobody after is clobbered by a later temporary: no
 * kernel reads it again, so the check at the end of the step reports it. */
static void test_state_clobbered_caught_at_step_end(void) {
    dfg_program *p = dfg_program_new("chk_state");
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(N, N));
    dfg_tensor *st = dfg_state(p, "st", DFG_F32, DFG_SHAPE(N, N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_assign(g, st, dfg_gelu(g, x));                        /* steps 0, 1 */
    dfg_tensor *late = dfg_scale(g, x, 3.0f);                 /* step 2 */
    dfg_output(g, dfg_sum(g, late, 0), "late_sum");           /* step 3 */
    dfg_stage_graph(p, g, 1);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.keep_order = true;
    CHECK(dfg_compile(p, &o) == DFG_OK, "compile: %s", dfg_program_error(p));
    dfg_run_options ro = dfg_run_options_default();
    ro.check = true;
    ro.n_threads = 1;
    dfg_runtime *rt = NULL;
    CHECK(dfg_runtime_create(p, &ro, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
    if (rt) {
        float xv[N * N];
        for (int i = 0; i < N * N; i++) xv[i] = 0.5f + (float)i / (N * N); /* gelu(x) != 3x everywhere */
        dfg_runtime_write(rt, "x", xv, sizeof(xv));
        rt->plan.offset[late->id] = rt->plan.offset[st->id];
        CHECK(dfg_runtime_step(rt) == DFG_ERR_STATE &&
                  has(dfg_runtime_error(rt), "DFG_CHECK: step 1, at the end of the step: 'st' changed since plan step 1 (written by 'assign#1')") &&
                  has(dfg_runtime_error(rt), "shared with 'affine#2' (plan steps 2-3)"),
              "state clobbered: %s", dfg_runtime_error(rt));
    }
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* No false alarm: the host rewrites an INPUT and a PARAM between steps, a repeated stage kills
 * and reuses its temporaries in every run while a STATE accumulates across runs, and a scoped
 * STATE lives in one stage. The checked run equals the plain one bit for bit. */
static void test_no_false_alarms(void) {
    float out[2][N + 2];
    for (int check = 0; check < 2; check++) {
        dfg_program *p = dfg_program_new("chk_ok");
        dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(N, N), dfg_init_normal(0.0f, 0.3f));
        dfg_tensor *acc = dfg_state(p, "acc", DFG_F32, DFG_SHAPE(N), DFG_ROLE_NONE, dfg_init_zeros());
        dfg_tensor *tmp = dfg_state(p, "tmp", DFG_F32, DFG_SHAPE(N, N), DFG_ROLE_NONE, dfg_init_zeros());
        dfg_graph *g1 = dfg_graph_new(p, "inner");
        dfg_tensor *x = dfg_input(g1, "x", DFG_F32, DFG_SHAPE(N, N));
        dfg_assign(g1, tmp, dfg_gelu(g1, dfg_matmul(g1, x, w, false, false)));
        dfg_accumulate(g1, acc, dfg_sum(g1, dfg_softmax(g1, dfg_add(g1, tmp, x)), 0));
        dfg_graph *g2 = dfg_graph_new(p, "outer");
        dfg_tensor *r = dfg_sum(g2, dfg_sum(g2, dfg_mul(g2, w, w), 0), 0);
        dfg_metric(g2, "wsq", r);
        dfg_output(g2, dfg_scale(g2, acc, 0.5f), "half");
        dfg_stage_graph(p, g1, 3);
        dfg_stage_graph(p, g2, 1);
        dfg_set_scope(p, tmp, "inner", "inner");
        dfg_run_options ro = dfg_run_options_default();
        ro.check = check;
        ro.n_threads = 1;
        ro.seed = 7;
        dfg_runtime *rt = NULL;
        CHECK(dfg_runtime_create(p, &ro, &rt) == DFG_OK, "create: %s", dfg_runtime_error(rt));
        float xv[N * N], wv[N * N];
        for (int step = 0; rt && step < 3; step++) {
            for (int i = 0; i < N * N; i++) xv[i] = (float)((i * 7 + step * 3) % 11) / 11.0f, wv[i] = (float)(i % 5) / 10.0f;
            dfg_runtime_write(rt, "x", xv, sizeof(xv));
            if (step == 1) dfg_runtime_write(rt, "w", wv, sizeof(wv));
            CHECK(dfg_runtime_step(rt) == DFG_OK, "check %d, step %d: %s", check, step, dfg_runtime_error(rt));
        }
        if (rt) {
            dfg_runtime_read(rt, "half", out[check], sizeof(float) * N);
            out[check][N] = dfg_runtime_metric_value(rt, 0);
            out[check][N + 1] = 0;
        }
        dfg_runtime_free(rt);
        dfg_program_free(p);
    }
    CHECK(!memcmp(out[0], out[1], sizeof(out[0])), "the checked run differs from the plain one");
}

int main(void) {
    dfg_test_init("test_check");
    unsetenv("DFG_CHECK");
    test_clean_run_passes();
    test_moved_offset_caught_at_read();
    test_moved_offset_caught_at_create();
    test_short_lifetime_caught();
    test_view_apart_caught();
    test_poison_written();
    test_state_clobbered_caught_at_step_end();
    test_no_false_alarms();
    return dfg_test_finish();
}
