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


/* ---------------------------------------------------------------- the settings table */

/* Every row is well formed: unique keys, a doc, a known owner, and a default that is a value of
 * its own row (a default the table would refuse could never be recorded). */
static void test_table_rows(void) {
    int n = dfg_setting_spec_count();
    CHECK(n > 60, "the table has %d rows", n);
    for (int i = 0; i < n; i++) {
        const dfg_setting_spec *s = dfg_setting_spec_at(i);
        CHECK(s && s->key && s->doc && s->doc[0], "row %d has a key and a doc", i);
        CHECK(dfg_setting_spec_find(s->key) == s, "'%s' is found as itself (keys are unique)", s->key);
        CHECK((unsigned)s->type < DFG_SETTING_TYPE_COUNT && (unsigned)s->owner < DFG_SETTING_OWNER_COUNT, "'%s' type/owner", s->key);
        CHECK(s->min <= s->max, "'%s': min <= max", s->key);
        CHECK((s->type >= DFG_SETTING_INTS) == (s->max_items > 0), "'%s': max_items only for lists", s->key);
        CHECK(s->type != DFG_SETTING_ENUM || s->values[0], "'%s': an enum lists its values", s->key);
        if (!s->def) continue;
        dfg_program *p = dfg_program_new("s");
        CHECK(dfg_program_set(p, s->key, s->def) == DFG_OK, "'%s': its default '%s' is refused: %s", s->key, s->def,
              dfg_program_error(p));
        CHECK(!strcmp(dfg_program_setting(p, s->key), s->def), "'%s': the default '%s' is canonical (recorded as '%s')",
              s->key, s->def, dfg_program_setting(p, s->key));
        dfg_program_free(p);
    }
    CHECK(dfg_setting_spec_find("no_such_key") == NULL && dfg_setting_spec_at(n) == NULL, "unknown keys and rows");
}

/* A table key's value is checked when it is set, in one line naming the key and what it accepts,
 * and the program keeps the first error. */
static void expect_refused(const char *key, const char *value, const char *want) {
    dfg_program *p = dfg_program_new("s");
    CHECK(dfg_program_set(p, key, value) != DFG_OK, "'%s=%s' is accepted", key, value);
    CHECK(strstr(dfg_program_error(p), want) != NULL, "'%s=%s': error '%s' lacks '%s'", key, value, dfg_program_error(p), want);
    CHECK(strchr(dfg_program_error(p), '\n') == NULL, "one line");
    CHECK(dfg_program_setting(p, key) == NULL, "'%s': a refused value is not recorded", key);
    dfg_program_free(p);
}

static void test_table_values_checked_when_set(void) {
    expect_refused("use_rslora", "maybe", "setting 'use_rslora': 'maybe' is not a boolean (true/false, 1/0, yes/no, on/off)");
    expect_refused("loss_type", "ppo", "setting 'loss_type': 'ppo' is not one of the values (grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo)");
    expect_refused("num_generations", "1", "setting 'num_generations': '1' is out of range (2 .. 1048576)");
    expect_refused("lora_r", "eight", "setting 'lora_r': 'eight' is not an integer (0 .. 65536)");
    expect_refused("learning_rate", "fast", "'fast' is not a number");
    expect_refused("length_buckets", "9", "'9' is out of range (auto or 1 .. 8)");
    expect_refused("length_buckets", "automatic", "is not an integer (auto or 1 .. 8)");
    expect_refused("eos_token_id", "1,,2", "has an empty item");
    expect_refused("eos_token_id", "1,2,3,4,5,6,7,8,9", "has too many items (up to 8 integers");
    expect_refused("eos_token_id", "-1", "'-1' is out of range");
    expect_refused("reward_weights", "1,x", "'x' is not a number");
    expect_refused("torch_dtype", "float16", "(bfloat16/bf16, float32/f32)");
    expect_refused("share_prompts", "sometimes", "(auto, true/1/yes/on, false/0/no/off)");
}

/* One parse, one recorded text: use_rslora=1 and =yes are the same setting as =true (the
 * adapter config once read "1" as false), and every reader sees the parsed value. */
static void test_canonical_and_typed_reads(void) {
    const char *spellings[] = {"true", "1", "yes", "on"};
    for (int i = 0; i < 4; i++) {
        dfg_program *p = dfg_program_new("s");
        CHECK(dfg_program_set(p, "use_rslora", spellings[i]) == DFG_OK, "use_rslora=%s", spellings[i]);
        CHECK(!strcmp(dfg_program_setting(p, "use_rslora"), "true"), "use_rslora=%s recorded as '%s'", spellings[i],
              dfg_program_setting(p, "use_rslora"));
        CHECK(dfg_program_bool(p, "use_rslora") && dfg_setting_bool(p, "use_rslora", false), "use_rslora=%s reads true", spellings[i]);
        dfg_program_free(p);
    }
    dfg_program *p = dfg_program_new("s");
    dfg_program_set(p, "torch_dtype", "bf16");
    dfg_program_set(p, "learning_rate", "3e-4");
    dfg_program_set(p, "lora_r", "+16");
    dfg_program_set(p, "length_chunks", "auto");
    dfg_program_set(p, "reward_funcs", " exact , format");
    dfg_program_set(p, "reward_weights", "0.5, 1e-1");
    dfg_program_set(p, "eos_token_id", "151645,151643");
    CHECK(!dfg_program_status(p), "accepted: %s", dfg_program_error(p));
    CHECK(!strcmp(dfg_program_setting(p, "torch_dtype"), "bfloat16"), "an enum's other spelling is recorded as its first");
    CHECK(dfg_program_float(p, "learning_rate") == 3e-4 && !strcmp(dfg_program_setting(p, "learning_rate"), "0.0003"),
          "float: %s", dfg_program_setting(p, "learning_rate"));
    CHECK(dfg_program_int(p, "lora_r") == 16 && !strcmp(dfg_program_setting(p, "lora_r"), "16"), "int canonical");
    CHECK(dfg_program_int(p, "length_chunks") == DFG_SETTING_AUTO, "auto");
    CHECK(!strcmp(dfg_program_setting(p, "reward_funcs"), "exact,format") && dfg_program_list_count(p, "reward_funcs") == 2 &&
              !strcmp(dfg_program_list_item(p, "reward_funcs", 1), "format"),
          "names: '%s'", dfg_program_setting(p, "reward_funcs"));
    CHECK(dfg_program_list_number(p, "reward_weights", 1) == 0.1 && !strcmp(dfg_program_setting(p, "reward_weights"), "0.5,0.1"),
          "floats: '%s'", dfg_program_setting(p, "reward_weights"));
    CHECK(dfg_program_list_count(p, "eos_token_id") == 2 && dfg_program_list_number(p, "eos_token_id", 0) == 151645, "ints");
    /* unset keys read as the table's defaults, never as a reader's own */
    CHECK(dfg_program_float(p, "lora_alpha") == 8.0 && !dfg_program_bool(p, "use_rslora") && dfg_program_int(p, "seed") == 1234,
          "table defaults");
    CHECK(!strcmp(dfg_program_str(p, "loss_type"), "dapo") && !strcmp(dfg_program_str(p, "not_a_key"), ""), "str defaults");
    /* the pipeline's reads of the same keys */
    CHECK(dfg_setting_enum(p, "torch_dtype", "float32") == 0 && dfg_setting_int_auto(p, "length_chunks", 1) == DFG_SETTING_AUTO &&
              dfg_setting_list(p, "reward_funcs", "reward") == 2,
          "typed pipeline reads: %s", dfg_program_error(p));
    CHECK(!dfg_program_status(p), "no error: %s", dfg_program_error(p));
    dfg_program_free(p);
}

/* A table key read with the wrong accessor is the pipeline's bug, named as such. */
static void expect_read_refused(const char *key, const char *value, bool as_str, const char *want) {
    dfg_program *p = dfg_program_new("s");
    dfg_program_set(p, key, value);
    if (as_str) dfg_setting_str(p, key, "x");
    else dfg_setting_int(p, key, 1);
    CHECK(strstr(dfg_program_error(p), want) != NULL, "%s=%s read as %s: '%s'", key, value, as_str ? "str" : "int",
          dfg_program_error(p));
    dfg_program_free(p);
}

static void test_accessor_must_match_type(void) {
    expect_read_refused("use_rslora", "1", true, "setting 'use_rslora' is of type bool in the settings table");
    expect_read_refused("length_buckets", "auto", false, "auto is a value here");
    expect_read_refused("learning_rate", "0.1", false, "setting 'learning_rate' is of type float in the settings table");
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
    test_table_rows();
    test_table_values_checked_when_set();
    test_canonical_and_typed_reads();
    test_accessor_must_match_type();
    return dfg_test_finish();
}
