/* test_lr_schedule.c - the learning-rate schedules (ops/nn/nn_schedule.c): transformers' lambdas
 * at hand-worked points, the settings' rules (defaults, refusals without max_steps, warmup_steps
 * over warmup_ratio, constant without warm-up), and the rate the graph looks up each step,
 * including past the schedule's end. golden_lr_schedule compares with transformers itself. */
#include <math.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"
#include "testutil.h"

static void test_lambdas(void) {
    dfg_lr_schedule lin = {.type = DFG_LR_LINEAR, .total = 10, .warmup = 2};
    /* warm-up k / 2, then (10 - k) / 8, 0 from step 10 on */
    const double want_lin[][2] = {{0, 0}, {1, 0.5}, {2, 1}, {6, 0.5}, {9, 0.125}, {10, 0}, {12, 0}};
    for (size_t i = 0; i < sizeof(want_lin) / sizeof(want_lin[0]); i++) {
        double got = dfg_lr_lambda(&lin, (int64_t)want_lin[i][0]);
        CHECK(got == want_lin[i][1], "linear lambda(%g) = %.17g, want %g", want_lin[i][0], got, want_lin[i][1]);
    }
    dfg_lr_schedule cosine = {.type = DFG_LR_COSINE, .total = 12, .warmup = 4};
    /* progress (k - 4) / 8: 1 at 4, 1/2 at 8 (a quarter turn), 0 at 12 */
    CHECK(dfg_lr_lambda(&cosine, 2) == 0.5, "cosine warm-up");
    CHECK(dfg_lr_lambda(&cosine, 4) == 1.0, "cosine at the warm-up's end");
    CHECK(fabs(dfg_lr_lambda(&cosine, 8) - 0.5) < 1e-15, "cosine half way: %.17g", dfg_lr_lambda(&cosine, 8));
    CHECK(fabs(dfg_lr_lambda(&cosine, 10) - (1 + cos(0.75 * 3.14159265358979323846)) / 2) < 1e-15, "cosine at 3/4");
    CHECK(dfg_lr_lambda(&cosine, 12) < 1e-16, "cosine at the end: %g", dfg_lr_lambda(&cosine, 12));
    dfg_lr_schedule cw = {.type = DFG_LR_CONSTANT_WITH_WARMUP, .warmup = 4};
    CHECK(dfg_lr_lambda(&cw, 1) == 0.25 && dfg_lr_lambda(&cw, 4) == 1.0 && dfg_lr_lambda(&cw, 99) == 1.0,
          "constant_with_warmup");
    dfg_lr_schedule one = {.type = DFG_LR_LINEAR, .total = 1, .warmup = 1}; /* max(1, total - warmup) */
    CHECK(dfg_lr_lambda(&one, 0) == 0.0 && dfg_lr_lambda(&one, 1) == 0.0, "linear, all warm-up");
}

/* The schedule read from settings (name, value, ..., NULL) with `total` optimizer steps. */
static dfg_status read(const char *const *sets, int64_t total, dfg_lr_schedule *s, char *err, size_t len) {
    dfg_program *p = dfg_program_new("sched");
    for (int i = 0; sets[i]; i += 2) dfg_program_set(p, sets[i], sets[i + 1]);
    dfg_status st = dfg_lr_schedule_from_settings(p, 1e-3, total, 0, s);
    snprintf(err, len, "%s", dfg_program_error(p));
    dfg_program_free(p);
    return st;
}

static void test_settings(void) {
    dfg_lr_schedule s;
    char err[512];
    CHECK(!read((const char *[]){NULL}, 0, &s, err, sizeof(err)) && s.type == DFG_LR_CONSTANT && !s.on && !s.log,
          "no max_steps: constant, the op as it was, nothing logged (%s)", err);
    CHECK(!read((const char *[]){NULL}, 20, &s, err, sizeof(err)) && s.type == DFG_LR_LINEAR && s.on && s.log,
          "max_steps alone: TRL's linear (%s)", err);
    const char *const need[] = {"linear", "cosine"};
    for (int i = 0; i < 2; i++) {
        dfg_status st = read((const char *[]){"lr_scheduler_type", need[i], NULL}, 0, &s, err, sizeof(err));
        CHECK(st == DFG_ERR_ARG && strstr(err, need[i]) && strstr(err, "needs max_steps"), "%s without max_steps: %s",
              need[i], err);
    }
    dfg_status st = read((const char *[]){"lr_scheduler_type", "constant_with_warmup", "warmup_ratio", "0.1", NULL}, 0, &s,
                         err, sizeof(err));
    CHECK(st == DFG_ERR_ARG && strstr(err, "warmup_ratio needs max_steps"), "a ratio of nothing: %s", err);
    st = read((const char *[]){"lr_scheduler_type", "constant_with_warmup", "warmup_steps", "3", NULL}, 0, &s, err,
              sizeof(err));
    CHECK(!st && s.on && s.warmup == 3, "constant_with_warmup needs no max_steps: %s", err);
    st = read((const char *[]){"warmup_steps", "2", "warmup_ratio", "0.5", NULL}, 20, &s, err, sizeof(err));
    CHECK(!st && s.warmup == 2, "warmup_steps wins over warmup_ratio: %lld", (long long)s.warmup);
    st = read((const char *[]){"warmup_ratio", "0.11", NULL}, 20, &s, err, sizeof(err));
    CHECK(!st && s.warmup == 3, "ceil(0.11 x 20) = 3, got %lld", (long long)s.warmup);
    st = read((const char *[]){"lr_scheduler_type", "constant", "warmup_steps", "5", NULL}, 20, &s, err, sizeof(err));
    CHECK(!st && !s.on && s.log && s.warmup == 0, "constant takes no warm-up, logs its rate (on %d)", s.on);
}

/* The rate each step reads: linear over 3 steps after one step at the base rate (an offset), and
 * past its end the last entry, 0. */
static void test_rate_lookup(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "lr_lookup");
    dfg_lr_schedule s = {.type = DFG_LR_LINEAR, .total = 3, .offset = 1, .lr = 0.1, .on = true};
    dfg_tensor *step = dfg_state(f.p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, dfg_init_zeros());
    dfg_assign(f.g, step, dfg_add(f.g, step, dfg_fill(f.g, DFG_I32, DFG_SCALAR, 1)));
    dfg_output(f.g, dfg_nn_lr(f.p, f.g, &s, step, ""), "lr");
    const float want[] = {0.1f, 0.1f, (float)(0.1 * 2 / 3), (float)(0.1 / 3), 0.0f, 0.0f}; /* step 1: clamped to 0 */
    if (dfg_fx_create(&f, 1))
        for (int k = 0; k < 6 && dfg_fx_step(&f); k++) {
            float lr = -1;
            dfg_fx_read(&f, "lr", &lr, sizeof(lr));
            CHECK(lr == want[k], "step %d: lr %.9g, want %.9g", k + 1, lr, want[k]);
        }
    dfg_fx_end(&f);
}

int main(void) {
    dfg_test_init("test_lr_schedule");
    test_lambdas();
    test_settings();
    test_rate_lookup();
    return dfg_test_finish();
}
