/* test_settings.c - program settings (graph/settings.c): the typed accessors return --set values
 * parsed strictly, record defaults so the plan lists every setting used, mark keys used, and
 * turn a malformed value into the program's sticky error naming key and value. */
#include <math.h>
#include <string.h>

#include "dfg.h"
#include "testutil.h"

static void test_defaults_are_recorded(void) {
    dfg_program *p = dfg_program_new("s");
    CHECK(dfg_setting_int(p, "n", 7) == 7, "int default");
    CHECK(dfg_setting_float(p, "lr", 1e-3) == 1e-3, "float default");
    CHECK(!strcmp(dfg_setting_str(p, "task", "copy"), "copy"), "str default");
    CHECK(dfg_setting_bool(p, "flag", true) == true, "bool default");
    CHECK(!strcmp(dfg_setting_str(p, "empty", NULL), ""), "NULL str default reads as empty");
    /* recorded as text that reads back exactly */
    CHECK(!strcmp(dfg_program_setting(p, "n"), "7"), "n recorded as '%s'", dfg_program_setting(p, "n"));
    CHECK(!strcmp(dfg_program_setting(p, "lr"), "0.001"), "lr recorded as '%s'", dfg_program_setting(p, "lr"));
    CHECK(!strcmp(dfg_program_setting(p, "flag"), "true"), "flag recorded as '%s'", dfg_program_setting(p, "flag"));
    double third = 1.0 / 3.0;
    dfg_setting_float(p, "third", third);
    CHECK(dfg_setting_float(p, "third", 0.0) == third, "a recorded double reads back bit for bit");
    CHECK(dfg_program_setting_count(p) == 6, "6 settings, got %d", dfg_program_setting_count(p));
    for (int i = 0; i < dfg_program_setting_count(p); i++)
        CHECK(dfg_program_setting_used(p, dfg_program_setting_key(p, i)), "'%s' marked used", dfg_program_setting_key(p, i));
    CHECK(!dfg_program_status(p), "no error: %s", dfg_program_error(p));
    dfg_program_free(p);
}

static void test_set_values_win(void) {
    dfg_program *p = dfg_program_new("s");
    dfg_program_set(p, "n", "-12");
    dfg_program_set(p, "lr", "3e-4");
    dfg_program_set(p, "flag", "off");
    dfg_program_set(p, "task", "reverse");
    dfg_program_set(p, "typo", "1");
    CHECK(!dfg_program_setting_used(p, "n"), "a set key starts unused");
    CHECK(dfg_setting_int(p, "n", 7) == -12, "int from the set value");
    CHECK(dfg_setting_float(p, "lr", 1e-3) == 3e-4, "float from the set value");
    CHECK(dfg_setting_bool(p, "flag", true) == false, "bool from the set value");
    CHECK(!strcmp(dfg_setting_str(p, "task", "copy"), "reverse"), "str from the set value");
    CHECK(dfg_program_setting_used(p, "n") && dfg_program_setting_used(p, "task"), "read keys are used");
    CHECK(!dfg_program_setting_used(p, "typo") && !dfg_program_setting_used(p, "absent"), "unread keys are not");
    CHECK(!strcmp(dfg_program_setting(p, "n"), "-12"), "the set value is kept");
    dfg_program_free(p);
}

/* A malformed value: sticky program error naming key and value, and the default returned. */
static void expect_bad(const char *key, const char *value, int kind, const char *want) {
    dfg_program *p = dfg_program_new("s");
    dfg_program_set(p, key, value);
    bool got_default = false;
    switch (kind) {
    case 0: got_default = dfg_setting_int(p, key, 5) == 5; break;
    case 1: got_default = dfg_setting_float(p, key, 0.5) == 0.5; break;
    default: got_default = dfg_setting_bool(p, key, true) == true; break;
    }
    CHECK(got_default, "'%s=%s' returns the default", key, value);
    CHECK(dfg_program_status(p) != DFG_OK, "'%s=%s' is accepted", key, value);
    CHECK(strstr(dfg_program_error(p), want) != NULL, "'%s=%s': error '%s' lacks '%s'", key, value,
          dfg_program_error(p), want);
    /* the error is sticky: later accessors return defaults and do not record anything */
    CHECK(dfg_setting_int(p, "later", 9) == 9 && dfg_program_setting(p, "later") == NULL, "sticky error");
    dfg_program_free(p);
}

static void test_strict_parsing(void) {
    expect_bad("n", "12abc", 0, "setting 'n': '12abc' is not an integer");
    expect_bad("n", " 12", 0, "is not an integer");
    expect_bad("n", "", 0, "is not an integer");
    expect_bad("n", "1.5", 0, "is not an integer");
    expect_bad("n", "99999999999999999999", 0, "out of the 64-bit integer range");
    expect_bad("lr", "fast", 1, "setting 'lr': 'fast' is not a number");
    expect_bad("lr", "1e-3x", 1, "is not a number");
    expect_bad("lr", "inf", 1, "is not a finite number");
    expect_bad("lr", "nan", 1, "is not a finite number");
    expect_bad("lr", "1e999", 1, "is not a finite number");
    expect_bad("flag", "maybe", 2, "setting 'flag': 'maybe' is not a boolean");
    const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
    for (int i = 0; i < 4; i++) {
        dfg_program *p = dfg_program_new("s");
        dfg_program_set(p, "a", yes[i]);
        dfg_program_set(p, "b", no[i]);
        CHECK(dfg_setting_bool(p, "a", false) && !dfg_setting_bool(p, "b", true), "'%s'/'%s'", yes[i], no[i]);
        dfg_program_free(p);
    }
}

static void test_program_fail(void) {
    dfg_program *p = dfg_program_new("s");
    CHECK(dfg_program_fail(p, DFG_ERR_ARG, "n_head %d does not divide %d", 5, 64) == DFG_ERR_ARG, "returns s");
    dfg_program_fail(p, DFG_ERR_SHAPE, "second");
    CHECK(dfg_program_status(p) == DFG_ERR_ARG && !strcmp(dfg_program_error(p), "n_head 5 does not divide 64"),
          "the first error sticks: '%s'", dfg_program_error(p));
    dfg_program_free(p);
    CHECK(dfg_program_fail(NULL, DFG_ERR_ARG, "x") == DFG_ERR_ARG, "NULL program");
    CHECK(dfg_setting_int(NULL, "k", 3) == 3 && !strcmp(dfg_setting_str(NULL, "k", "d"), "d"), "NULL program defaults");
}

int main(void) {
    dfg_test_init("test_settings");
    test_defaults_are_recorded();
    test_set_values_win();
    test_strict_parsing();
    test_program_fail();
    return dfg_test_finish();
}
