/* test_fit_knobs.c - dfg_declare_fit_knob (graph/declare.c), what a pipeline tells dfg fit: the
 * values are kept as declared, in order, with keeps_math; a knob that is no setting, an empty or
 * oversized list, a value listed twice, a knob declared twice and too many knobs are refused
 * with a message naming the setting, and a refusal adds nothing. */
#include <string.h>

#include "dfg.h"
#include "testutil.h"

static bool contains(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

/* A fresh program with the integer settings "a".."j" read, as a pipeline reads its settings. */
static dfg_program *program_with_settings(void) {
    dfg_program *p = dfg_program_new("knobs");
    for (char k[2] = "a"; k[0] <= 'j'; k[0]++) dfg_setting_int(p, k, 1);
    return p;
}

static void test_declared(void) {
    dfg_program *p = program_with_settings();
    const int64_t ga[] = {1, 2, 4, 8}, prompts[] = {16, 8, 4};
    CHECK(dfg_declare_fit_knob(p, "a", ga, 4, true) == DFG_OK, "declare a: %s", dfg_program_error(p));
    CHECK(dfg_declare_fit_knob(p, "b", prompts, 3, false) == DFG_OK, "declare b: %s", dfg_program_error(p));
    CHECK(dfg_program_fit_knob_count(p) == 2, "two knobs, got %d", dfg_program_fit_knob_count(p));
    const dfg_fit_knob *k0 = dfg_program_fit_knob(p, 0), *k1 = dfg_program_fit_knob(p, 1);
    CHECK(k0 && !strcmp(k0->setting, "a") && k0->keeps_math && k0->n_values == 4 && k0->values[3] == 8,
          "knob a as declared");
    CHECK(k1 && !strcmp(k1->setting, "b") && !k1->keeps_math && k1->n_values == 3 && k1->values[0] == 16 &&
              k1->values[2] == 4,
          "knob b as declared, in its order");
    CHECK(!dfg_program_fit_knob(p, 2) && !dfg_program_fit_knob(p, -1) && !dfg_program_fit_knob(NULL, 0) &&
              dfg_program_fit_knob_count(NULL) == 0,
          "out of range: NULL");
    dfg_program_free(p);
}

/* Each refusal on a fresh program: the status, the message, and no knob added. */
static void expect_refused(int64_t n_values, const char *setting, const int64_t *values, const char *needle) {
    dfg_program *p = program_with_settings();
    dfg_status st = dfg_declare_fit_knob(p, setting, values, (int)n_values, true);
    CHECK(st == DFG_ERR_ARG && contains(dfg_program_error(p), needle), "'%s': status %s, message: %s", needle,
          dfg_status_name(st), dfg_program_error(p));
    CHECK(dfg_program_fit_knob_count(p) == 0, "'%s': a refused knob was added", needle);
    dfg_program_free(p);
}

static void test_refused(void) {
    const int64_t v[DFG_MAX_FIT_VALUES + 1] = {1, 2, 3}, twice[] = {1, 2, 1};
    expect_refused(2, "nope", v, "'nope' is not a setting of this program");
    expect_refused(2, NULL, v, "(null)");
    expect_refused(0, "a", v, "needs 1 to 32 values, got 0");
    expect_refused(DFG_MAX_FIT_VALUES + 1, "a", v, "got 33");
    expect_refused(2, "a", NULL, "needs 1 to 32 values");
    expect_refused(3, "a", twice, "the value 1 is listed twice");
    dfg_program *p = program_with_settings();
    CHECK(dfg_declare_fit_knob(p, "a", v, 2, true) == DFG_OK, "first declaration");
    CHECK(dfg_declare_fit_knob(p, "a", v, 2, false) == DFG_ERR_ARG && contains(dfg_program_error(p), "'a' is declared twice"),
          "twice: %s", dfg_program_error(p));
    dfg_program_free(p);
    p = program_with_settings();
    for (char k[2] = "a"; k[0] < 'a' + DFG_MAX_FIT_KNOBS; k[0]++) dfg_declare_fit_knob(p, k, v, 1, true);
    CHECK(dfg_program_fit_knob_count(p) == DFG_MAX_FIT_KNOBS && !dfg_program_status(p), "the most knobs: %s",
          dfg_program_error(p));
    CHECK(dfg_declare_fit_knob(p, "j", v, 1, true) == DFG_ERR_ARG && contains(dfg_program_error(p), "more than 8 knobs"),
          "one too many: %s", dfg_program_error(p));
    dfg_program_free(p);
    CHECK(dfg_declare_fit_knob(NULL, "a", v, 1, true) == DFG_ERR_ARG, "a NULL program");
}

int main(void) {
    dfg_test_init("test_fit_knobs");
    test_declared();
    test_refused();
    return dfg_test_finish();
}
