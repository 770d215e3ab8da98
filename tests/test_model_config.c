/* test_model_config.c - dfg_model_dir_settings (runtime/formats/model_config.c): a Hugging Face model
 * directory's config.json as pipeline settings. The real config.json files of Qwen2.5-0.5B,
 * Llama-3.2-1B (without and with its rope_scaling), Qwen3-1.7B and GPT-2 must give exactly the
 * expected setting strings; settings already on the program (the user's --set) are kept; every
 * refused file (another model, a setting dfg computes differently, a wrong type, a missing,
 * unreadable, malformed, truncated or non-object file) gives its status and exactly one line
 * naming the file and the key, and leaves the program's settings as they were. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dfg.h"
#include "runtime/formats/model_config.h"
#include "testutil.h"

/* ---------------------------------------------------------------- real configs (Hugging Face hub) */
static const char qwen25_05b[] =
    "{\n  \"architectures\": [\n    \"Qwen2ForCausalLM\"\n  ],\n  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151643,\n  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 896,\n  \"initializer_range\": 0.02,\n  \"intermediate_size\": 4864,\n"
    "  \"max_position_embeddings\": 32768,\n  \"max_window_layers\": 24,\n  \"model_type\": \"qwen2\",\n"
    "  \"num_attention_heads\": 14,\n  \"num_hidden_layers\": 24,\n  \"num_key_value_heads\": 2,\n"
    "  \"rms_norm_eps\": 1e-06,\n  \"rope_theta\": 1000000.0,\n  \"sliding_window\": 32768,\n"
    "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.40.1\",\n"
    "  \"use_cache\": true,\n  \"use_sliding_window\": false,\n  \"vocab_size\": 151936\n}\n";

/* Llama-3.2-1B; ROPE_SCALING is its rope_scaling entry, or nothing */
#define LLAMA32_1B(ROPE_SCALING)                                                                                     \
    "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n  \"attention_bias\": false,\n"                    \
    "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 128000,\n  \"eos_token_id\": 128001,\n  \"head_dim\": 64,\n" \
    "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"                       \
    "  \"intermediate_size\": 8192,\n  \"max_position_embeddings\": 131072,\n  \"mlp_bias\": false,\n"              \
    "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 16,\n"                  \
    "  \"num_key_value_heads\": 8,\n  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n" ROPE_SCALING             \
    "  \"rope_theta\": 500000.0,\n  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n"             \
    "  \"transformers_version\": \"4.45.0.dev0\",\n  \"use_cache\": true,\n  \"vocab_size\": 128256\n}\n"
#define LLAMA3_ROPE_SCALING                                                                                \
    "  \"rope_scaling\": {\n    \"factor\": 32.0,\n    \"high_freq_factor\": 4.0,\n    \"low_freq_factor\": 1.0,\n" \
    "    \"original_max_position_embeddings\": 8192,\n    \"rope_type\": \"llama3\"\n  },\n"
static const char llama32_1b[] = LLAMA32_1B("");
static const char llama32_1b_scaled[] = LLAMA32_1B(LLAMA3_ROPE_SCALING);

/* Qwen3-1.7B: rope_theta is written as an integer there */
static const char qwen3_17b[] =
    "{\n  \"architectures\": [\n    \"Qwen3ForCausalLM\"\n  ],\n  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151645,\n  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 6144,\n  \"max_position_embeddings\": 40960,\n  \"max_window_layers\": 28,\n"
    "  \"model_type\": \"qwen3\",\n  \"num_attention_heads\": 16,\n  \"num_hidden_layers\": 28,\n"
    "  \"num_key_value_heads\": 8,\n  \"rms_norm_eps\": 1e-06,\n  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000,\n  \"sliding_window\": null,\n  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.51.0\",\n  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n  \"vocab_size\": 151936\n}\n";

/* openai-community/gpt2 */
static const char gpt2[] =
    "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
    "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n"
    "  \"initializer_range\": 0.02,\n  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n"
    "  \"n_ctx\": 1024,\n  \"n_embd\": 768,\n  \"n_head\": 12,\n  \"n_layer\": 12,\n  \"n_positions\": 1024,\n"
    "  \"resid_pdrop\": 0.1,\n  \"summary_activation\": null,\n  \"summary_first_dropout\": 0.1,\n"
    "  \"summary_proj_to_labels\": true,\n  \"summary_type\": \"cls_index\",\n  \"summary_use_proj\": true,\n"
    "  \"task_specific_params\": {\n    \"text-generation\": {\n      \"do_sample\": true,\n      \"max_length\": 50\n"
    "    }\n  },\n  \"vocab_size\": 50257\n}\n";

/* ---------------------------------------------------------------- the model directory */
static char model_dir[300], config_path[320];

static void write_config(const char *json) { dfg_test_write_file(config_path, json, strlen(json)); }

/* A program as `dfg compile` hands it over: the --set values given as "k=v" pairs. */
static dfg_program *program_with(const char *const *sets) {
    dfg_program *p = dfg_program_new("mc");
    char key[64];
    for (int i = 0; sets && sets[i]; i++) {
        const char *eq = strchr(sets[i], '=');
        snprintf(key, sizeof(key), "%.*s", (int)(eq - sets[i]), sets[i]);
        dfg_program_set(p, key, eq + 1);
    }
    return p;
}

/* The program holds exactly these "k=v" settings, in any order. */
static void expect_settings(const char *what, const dfg_program *p, const char *const *want) {
    int n = 0;
    char key[64];
    for (; want[n]; n++) {
        const char *eq = strchr(want[n], '=');
        snprintf(key, sizeof(key), "%.*s", (int)(eq - want[n]), want[n]);
        const char *got = dfg_program_setting(p, key);
        CHECK(got && !strcmp(got, eq + 1), "%s: setting '%s' is '%s', want '%s'", what, key, got ? got : "(absent)", eq + 1);
    }
    CHECK(dfg_program_setting_count(p) == n, "%s: %d settings, want %d", what, dfg_program_setting_count(p), n);
    for (int i = 0; i < dfg_program_setting_count(p); i++) {
        const char *k = dfg_program_setting_key(p, i);
        bool listed = false;
        for (int j = 0; j < n; j++)
            listed |= !strncmp(want[j], k, strlen(k)) && want[j][strlen(k)] == '=';
        CHECK(listed, "%s: unexpected setting %s=%s", what, k, dfg_program_setting(p, k));
    }
}

/* config.json -> settings on a program with `sets` already applied; must succeed. */
static void expect_accepted(const char *what, const char *json, const char *const *sets, const char *const *want) {
    write_config(json);
    dfg_program *p = program_with(sets);
    char err[512] = "untouched";
    dfg_status s = dfg_model_dir_settings(p, model_dir, err, sizeof(err));
    CHECK(s == DFG_OK, "%s: status %s: %s", what, dfg_status_name(s), err);
    CHECK(err[0] == '\0', "%s: err not cleared on success: '%s'", what, err);
    if (!s) expect_settings(what, p, want);
    CHECK(!dfg_program_status(p), "%s: program error %s", what, dfg_program_error(p));
    dfg_program_free(p);
}

/* A refusal: the status, one line starting with `label: ` and holding every needle, and the
 * program's settings as they were. */
static void check_refusal(const char *what, dfg_status s, dfg_status want, const char *err, const char *label,
                          const char *const *needles, const dfg_program *p, int n_before) {
    CHECK(s == want, "%s: status %s, want %s (%s)", what, dfg_status_name(s), dfg_status_name(want), err);
    CHECK(!strchr(err, '\n'), "%s: message is not one line: '%s'", what, err);
    size_t l = strlen(label);
    CHECK(!strncmp(err, label, l) && !strncmp(err + l, ": ", 2), "%s: message does not start with '%s: ': '%s'", what, label, err);
    for (int i = 0; needles && needles[i]; i++)
        CHECK(strstr(err, needles[i]), "%s: message lacks '%s': '%s'", what, needles[i], err);
    CHECK(dfg_program_setting_count(p) == n_before, "%s: %d settings after a refusal, had %d", what,
          dfg_program_setting_count(p), n_before);
}

static void expect_refused(const char *what, const char *json, dfg_status want, const char *const *needles) {
    write_config(json);
    const char *const sets[] = {"model=dir", NULL};
    dfg_program *p = program_with(sets);
    char err[512] = "";
    dfg_status s = dfg_model_dir_settings(p, model_dir, err, sizeof(err));
    check_refusal(what, s, want, err, config_path, needles, p, 1);
    CHECK(!dfg_program_status(p), "%s: a refusal left the program failed: %s", what, dfg_program_error(p));
    dfg_program_free(p);
}

/* The whole message, for the cases whose wording the brief fixes. */
static void expect_message(const char *what, const char *json, const char *tail) {
    write_config(json);
    dfg_program *p = dfg_program_new("mc");
    char err[512] = "", want[700];
    dfg_model_dir_settings(p, model_dir, err, sizeof(err));
    snprintf(want, sizeof(want), "%s: %s", config_path, tail);
    CHECK(!strcmp(err, want), "%s: message\n  '%s', want\n  '%s'", what, err, want);
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- accepted */
static void test_real_configs(void) {
    const char *const qwen25[] = {"model_type=qwen2", "hidden_size=896", "num_hidden_layers=24", "num_attention_heads=14",
                                  "num_key_value_heads=2", "intermediate_size=4864", "vocab_size=151936",
                                  "max_position_embeddings=32768", "rms_norm_eps=1e-06", "rope_theta=1000000",
                                  "tie_word_embeddings=true", "eos_token_id=151643", NULL};
    expect_accepted("Qwen2.5-0.5B", qwen25_05b, NULL, qwen25);
    const char *const llama[] = {"model_type=llama", "hidden_size=2048", "num_hidden_layers=16", "num_attention_heads=32",
                                 "num_key_value_heads=8", "intermediate_size=8192", "head_dim=64", "vocab_size=128256",
                                 "max_position_embeddings=131072", "rms_norm_eps=1e-05", "rope_theta=500000",
                                 "tie_word_embeddings=true", "attention_bias=false", "eos_token_id=128001", NULL};
    expect_accepted("Llama-3.2-1B without rope_scaling", llama32_1b, NULL, llama);
    const char *const qwen3[] = {"model_type=qwen3", "hidden_size=2048", "num_hidden_layers=28", "num_attention_heads=16",
                                 "num_key_value_heads=8", "intermediate_size=6144", "head_dim=128", "vocab_size=151936",
                                 "max_position_embeddings=40960", "rms_norm_eps=1e-06", "rope_theta=1000000",
                                 "tie_word_embeddings=true", "eos_token_id=151645", NULL};
    expect_accepted("Qwen3-1.7B", qwen3_17b, NULL, qwen3);
    const char *const g2[] = {"model_type=gpt2", "n_layer=12", "n_head=12", "n_embd=768", "vocab_size=50257",
                              "n_positions=1024", "layer_norm_epsilon=1e-05", "eos_token_id=50256", NULL};
    expect_accepted("GPT-2", gpt2, NULL, g2);
}

/* What a pipeline reads back with the typed accessors is the file's value. */
static void test_typed_read_back(void) {
    write_config(qwen25_05b);
    dfg_program *p = dfg_program_new("mc");
    CHECK(dfg_model_dir_settings(p, model_dir, NULL, 0) == DFG_OK, "Qwen2.5 with err NULL");
    CHECK(dfg_setting_int(p, "num_key_value_heads", 0) == 2, "num_key_value_heads");
    CHECK(dfg_setting_float(p, "rms_norm_eps", 0) == 1e-6, "rms_norm_eps reads back as the file's double");
    CHECK(dfg_setting_float(p, "rope_theta", 0) == 1e6, "rope_theta");
    CHECK(dfg_setting_bool(p, "tie_word_embeddings", false), "tie_word_embeddings");
    CHECK(!strcmp(dfg_setting_str(p, "model_type", ""), "qwen2"), "model_type");
    CHECK(!dfg_program_status(p), "typed reads: %s", dfg_program_error(p));
    dfg_program_free(p);
}

static void test_user_settings_win(void) {
    /* the user's values stay, even where the file's would be refused as a wrong type (the
     * settings table checked the user's when they were set) */
    const char *const sets[] = {"model=m", "hidden_size=64", "num_hidden_layers=2", "model_type=llama",
                                "vocab_size=1000", NULL};
    const char *const want[] = {"model=m", "hidden_size=64", "num_hidden_layers=2", "model_type=llama",
                                "vocab_size=1000", "num_attention_heads=14", "num_key_value_heads=2",
                                "intermediate_size=4864", "max_position_embeddings=32768", "rms_norm_eps=1e-06",
                                "rope_theta=1000000", "tie_word_embeddings=true", "eos_token_id=151643", NULL};
    char bad_vocab[sizeof(qwen25_05b) + 8];
    snprintf(bad_vocab, sizeof(bad_vocab), "%.*s\"x\"\n}\n", (int)(strstr(qwen25_05b, "151936\n}") - qwen25_05b), qwen25_05b);
    expect_accepted("--set values win", bad_vocab, sets, want);

    /* absent num_key_value_heads: as many as the attention heads the pipeline will see */
    const char *const kv_file[] = {"model_type=llama", "num_attention_heads=6", "num_key_value_heads=6",
                                   "tie_word_embeddings=false", "attention_bias=false", NULL};
    expect_accepted("num_key_value_heads from the file's heads", "{\"architectures\": [\"LlamaForCausalLM\"], "
                    "\"num_attention_heads\": 6}", NULL, kv_file);
    const char *const user_heads[] = {"num_attention_heads=4", NULL};
    const char *const kv_user[] = {"model_type=llama", "num_attention_heads=4", "num_key_value_heads=4",
                                   "tie_word_embeddings=false", "attention_bias=false", NULL};
    expect_accepted("num_key_value_heads from the user's heads", "{\"architectures\": [\"LlamaForCausalLM\"], "
                    "\"num_attention_heads\": 6, \"num_key_value_heads\": null}", user_heads, kv_user);
    /* the user's true is kept: the config's default does not replace it */
    const char *const user_tie[] = {"tie_word_embeddings=true", NULL};
    const char *const tie[] = {"model_type=qwen2", "tie_word_embeddings=true", NULL};
    expect_accepted("a user bool over the default", "{\"model_type\": \"qwen2\"}", user_tie, tie);
}

/* eos_token_id: one id or a list (Llama 3 instruct names three); pad_token_id: one id */
static void test_token_ids(void) {
    const char *const list[] = {"model_type=llama", "tie_word_embeddings=false", "attention_bias=false",
                                "eos_token_id=128001,128008,128009", "pad_token_id=0", NULL};
    expect_accepted("eos_token_id list", "{\"architectures\": [\"LlamaForCausalLM\"], \"eos_token_id\": [128001, 128008, "
                    "128009], \"pad_token_id\": [0, 5]}", NULL, list);
    const char *const user[] = {"eos_token_id=7", NULL};
    const char *const kept[] = {"model_type=qwen2", "tie_word_embeddings=false", "eos_token_id=7", NULL};
    expect_accepted("the user's eos_token_id wins", "{\"model_type\": \"qwen2\", \"eos_token_id\": 151645, "
                    "\"pad_token_id\": null}", user, kept);
    write_config("{\"model_type\": \"qwen2\", \"eos_token_id\": [1, \"x\"]}");
    dfg_program *p = dfg_program_new("mc");
    char err[512];
    CHECK(dfg_model_dir_settings(p, model_dir, err, sizeof(err)) == DFG_ERR_FORMAT && strstr(err, "'eos_token_id' must be a token id"),
          "a bad eos_token_id: %s", err);
    dfg_program_free(p);
}

static void test_defaults_and_optional_keys(void) {
    const char *const minimal[] = {"model_type=llama", "hidden_size=64", "tie_word_embeddings=false",
                                   "attention_bias=false", NULL};
    expect_accepted("a minimal llama config", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64}", NULL,
                    minimal);
    const char *const by_type[] = {"model_type=qwen3", "hidden_size=8", "tie_word_embeddings=false", NULL};
    expect_accepted("model_type without architectures", "{\"model_type\": \"qwen3\", \"hidden_size\": 8, "
                    "\"architectures\": null, \"head_dim\": null}", NULL, by_type);
    const char *const inner[] = {"model_type=gpt2", "n_inner=3072", "layer_norm_epsilon=0.30000000000000004", NULL};
    expect_accepted("n_inner and a float needing 17 digits", "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_inner\": "
                    "3072, \"layer_norm_epsilon\": 0.30000000000000004, \"activation_function\": \"gelu_pytorch_tanh\", "
                    "\"tie_word_embeddings\": true}", NULL, inner);
    const char *const no_inner[] = {"model_type=gpt2", "n_embd=64", NULL};
    expect_accepted("n_inner null", "{\"model_type\": \"gpt2\", \"n_inner\": null, \"n_embd\": 64.0}", NULL, no_inner);
    /* nothing dfg reads: the model type alone; white space after the object is fine */
    const char *const qwen2[] = {"model_type=qwen2", "tie_word_embeddings=false", NULL};
    expect_accepted("Qwen2 with an unknown model_type string", " {\"architectures\": [\"Qwen2ForCausalLM\", \"X\"], "
                    "\"model_type\": \"qwen2_custom\", \"num_hidden_layers \": 3} \r\n\t", NULL, qwen2);
    /* a trailing slash is not doubled in messages */
    char dir_slash[320];
    snprintf(dir_slash, sizeof(dir_slash), "%s/", model_dir);
    write_config("{\"model_type\": \"mistral\"}");
    dfg_program *p = dfg_program_new("mc");
    char err[512];
    dfg_model_dir_settings(p, dir_slash, err, sizeof(err));
    CHECK(!strncmp(err, config_path, strlen(config_path)) && err[strlen(config_path)] == ':', "slash: '%s'", err);
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- refused */
static void test_unsupported_models(void) {
    expect_message("another architecture", "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\"}",
                   "architecture 'MistralForCausalLM' is not supported (dfg runs GPT2LMHeadModel, LlamaForCausalLM, "
                   "Qwen2ForCausalLM, Qwen3ForCausalLM)");
    expect_message("another model_type", "{\"model_type\": \"mistral\"}",
                   "architecture 'mistral' is not supported (dfg runs GPT2LMHeadModel, LlamaForCausalLM, "
                   "Qwen2ForCausalLM, Qwen3ForCausalLM)");
    const char *const n_neither[] = {"'architectures'", "'model_type'", NULL};
    expect_refused("no model named", "{\"hidden_size\": 8}", DFG_ERR_FORMAT, n_neither);
    const char *const n_mismatch[] = {"LlamaForCausalLM", "\"qwen2\"", NULL};
    expect_refused("architectures and model_type disagree", "{\"architectures\": [\"LlamaForCausalLM\"], "
                   "\"model_type\": \"qwen2\"}", DFG_ERR_FORMAT, n_mismatch);
    const char *const n_archs[] = {"'architectures'", NULL};
    expect_refused("architectures empty", "{\"architectures\": []}", DFG_ERR_FORMAT, n_archs);
    expect_refused("architectures a string", "{\"architectures\": \"GPT2LMHeadModel\"}", DFG_ERR_FORMAT, n_archs);
    const char *const n_ctrl[] = {"'Bad?Name'", NULL};
    expect_refused("control bytes are not echoed", "{\"architectures\": [\"Bad\\nName\"]}", DFG_ERR_UNSUPPORTED, n_ctrl);
    /* a number config.json's rules accept but the settings table's range does not: refused before
     * any key is set (the table would refuse it part way, leaving the program failed) */
    const char *const n_range[] = {"'rope_theta' is 1e+35", "outside what dfg accepts", NULL};
    expect_refused("rope_theta past the table's range", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8, "
                   "\"rope_theta\": 1e35}", DFG_ERR_FORMAT, n_range);
}

static void test_unsupported_settings(void) {
    const char *const n_rope[] = {"'rope_scaling'", "llama3", NULL};
    expect_refused("Llama-3.2-1B's rope_scaling", llama32_1b_scaled, DFG_ERR_UNSUPPORTED, n_rope);
    expect_message("rope_scaling message", llama32_1b_scaled,
                   "'rope_scaling' is set (type \"llama3\"): not supported (dfg runs plain RoPE with rope_theta, no "
                   "scaled RoPE)");
    const char *const n_linear[] = {"'rope_scaling'", "\"linear\"", NULL};
    expect_refused("an older rope_scaling", "{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"linear\", "
                   "\"factor\": 2.0}}", DFG_ERR_UNSUPPORTED, n_linear);
    const char *const n_act[] = {"'hidden_act'", "\"gelu\"", NULL};
    expect_refused("hidden_act gelu", "{\"model_type\": \"qwen2\", \"hidden_act\": \"gelu\"}", DFG_ERR_UNSUPPORTED, n_act);
    const char *const n_gpt_act[] = {"'activation_function'", "\"relu\"", NULL};
    expect_refused("GPT-2 relu", "{\"model_type\": \"gpt2\", \"activation_function\": \"relu\"}", DFG_ERR_UNSUPPORTED,
                   n_gpt_act);
    const char *const n_prefix[] = {"'activation_function'", "\"gelu\"", NULL};
    expect_refused("a prefix of an allowed name", "{\"model_type\": \"gpt2\", \"activation_function\": \"gelu\"}",
                   DFG_ERR_UNSUPPORTED, n_prefix);
    const char *const n_untied[] = {"'tie_word_embeddings'", "false", NULL};
    expect_refused("an untied GPT-2", "{\"model_type\": \"gpt2\", \"tie_word_embeddings\": false}", DFG_ERR_UNSUPPORTED,
                   n_untied);
    const char *const n_mlp[] = {"'mlp_bias'", "true", NULL};
    expect_refused("mlp_bias", "{\"model_type\": \"llama\", \"mlp_bias\": true}", DFG_ERR_UNSUPPORTED, n_mlp);
    const char *const n_sw[] = {"'use_sliding_window'", "true", NULL};
    expect_refused("a sliding window", "{\"model_type\": \"qwen2\", \"use_sliding_window\": true}", DFG_ERR_UNSUPPORTED,
                   n_sw);
    const char *const n_drop[] = {"'attention_dropout'", "0.1", NULL};
    expect_refused("attention dropout", "{\"model_type\": \"qwen3\", \"attention_dropout\": 0.1}", DFG_ERR_UNSUPPORTED,
                   n_drop);
    const char *const n_bias[] = {"'attention_bias'", "true", NULL};
    expect_refused("Qwen3 attention biases", "{\"model_type\": \"qwen3\", \"attention_bias\": true}", DFG_ERR_UNSUPPORTED,
                   n_bias);
    /* Llama's attention_bias true is a setting, not a refusal */
    const char *const llama_bias[] = {"model_type=llama", "attention_bias=true", "tie_word_embeddings=false", NULL};
    expect_accepted("Llama attention biases", "{\"model_type\": \"llama\", \"attention_bias\": true}", NULL, llama_bias);
}

static void test_wrong_types(void) {
    expect_message("a fractional head count", "{\"model_type\": \"qwen2\", \"num_key_value_heads\": 2.5}",
                   "'num_key_value_heads' must be a positive integer, got 2.5");
    static const struct {
        const char *json, *key, *got;
    } cases[] = {
        {"{\"model_type\": \"qwen2\", \"hidden_size\": \"896\"}", "'hidden_size'", "got \"896\""},
        {"{\"model_type\": \"llama\", \"num_hidden_layers\": 0}", "'num_hidden_layers'", "got 0"},
        {"{\"model_type\": \"llama\", \"intermediate_size\": -8}", "'intermediate_size'", "got -8"},
        {"{\"model_type\": \"llama\", \"vocab_size\": 3000000000}", "'vocab_size'", "got 3000000000"},
        {"{\"model_type\": \"qwen3\", \"head_dim\": [128]}", "'head_dim'", "got a list"},
        {"{\"model_type\": \"qwen3\", \"rms_norm_eps\": -1e-6}", "'rms_norm_eps'", "got -1e-06"},
        {"{\"model_type\": \"qwen3\", \"rope_theta\": \"1e6\"}", "'rope_theta'", "got \"1e6\""},
        {"{\"model_type\": \"qwen3\", \"rope_theta\": 1e999}", "'rope_theta'", "got inf"},
        {"{\"model_type\": \"qwen2\", \"tie_word_embeddings\": 1}", "'tie_word_embeddings'", "got 1"},
        {"{\"model_type\": \"gpt2\", \"layer_norm_epsilon\": null}", "'layer_norm_epsilon'", "got null"},
        {"{\"model_type\": \"gpt2\", \"n_inner\": 1.5}", "'n_inner'", "got 1.5"},
        {"{\"model_type\": \"gpt2\", \"n_head\": {\"a\": 1}}", "'n_head'", "got an object"},
        {"{\"model_type\": \"gpt2\", \"activation_function\": 3}", "'activation_function'", "got 3"},
        {"{\"model_type\": \"llama\", \"mlp_bias\": \"no\"}", "'mlp_bias'", "got \"no\""},
        {"{\"model_type\": \"llama\", \"attention_dropout\": false}", "'attention_dropout'", "got false"},
        {"{\"model_type\": 2}", "'model_type'", "got 2"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"hidden_size\": 128}", "'hidden_size'", "2 times"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *const needles[] = {cases[i].key, cases[i].got, NULL};
        expect_refused(cases[i].json, cases[i].json, DFG_ERR_FORMAT, needles);
    }
}

static void test_malformed_files(void) {
    const char *const n_json[] = {"not valid JSON", NULL};
    expect_refused("malformed JSON", "{\"model_type\": }", DFG_ERR_FORMAT, n_json);
    expect_refused("empty file", "", DFG_ERR_FORMAT, n_json);
    expect_refused("text after the object", "{\"model_type\": \"gpt2\"} {}", DFG_ERR_FORMAT, n_json);
    /* truncated in the middle of the real file */
    char half[sizeof(qwen25_05b)];
    snprintf(half, sizeof(half), "%.*s", (int)(sizeof(qwen25_05b) / 2), qwen25_05b);
    expect_refused("truncated", half, DFG_ERR_FORMAT, n_json);
    const char *const n_obj[] = {"not a JSON object", NULL};
    expect_refused("a list", "[{\"model_type\": \"gpt2\"}]", DFG_ERR_FORMAT, n_obj);
    expect_refused("a string", "\"gpt2\"", DFG_ERR_FORMAT, n_obj);
    /* cJSON would end the key at the NUL and read it as num_hidden_layers */
    const char *const n_u0000[] = {"\\u0000", NULL};
    expect_refused("an escaped NUL", "{\"model_type\": \"llama\", \"num_hidden_layers\\u0000\": 3}", DFG_ERR_FORMAT,
                   n_u0000);
    const char *const n_nul[] = {"NUL byte", NULL};
    dfg_test_write_file(config_path, "{\"a\": \0}", 8);
    dfg_program *p = dfg_program_new("mc");
    char err[512];
    dfg_status s = dfg_model_dir_settings(p, model_dir, err, sizeof(err));
    check_refusal("NUL byte", s, DFG_ERR_FORMAT, err, config_path, n_nul, p, 0);
    dfg_program_free(p);

    /* a buffer over the size limit, and a deeply nested one, through the text entry point */
    size_t big = DFG_MC_MAX_BYTES + 1;
    char *b = malloc(big);
    memset(b, ' ', big);
    b[0] = '{', b[big - 1] = '}';
    p = dfg_program_new("mc");
    const char *const n_big[] = {"byte limit", NULL};
    s = dfg_mc_settings_from_text(p, b, big, "buf", err, sizeof(err));
    check_refusal("over the limit", s, DFG_ERR_FORMAT, err, "buf", n_big, p, 0);
    size_t deep = 300000;
    memset(b, '[', deep);
    const char *const n_many[] = {"JSON values", NULL};
    s = dfg_mc_settings_from_text(p, b, deep, "buf", err, sizeof(err));
    check_refusal("too many values", s, DFG_ERR_FORMAT, err, "buf", n_many, p, 0);
    s = dfg_mc_settings_from_text(p, b, 2000, "buf", err, sizeof(err));
    check_refusal("nested past cJSON's limit", s, DFG_ERR_FORMAT, err, "buf", n_json, p, 0);
    free(b);
    dfg_program_free(p);
}

static void test_missing_and_unreadable(void) {
    dfg_program *p = dfg_program_new("mc");
    char err[512], path[400];
    /* no directory */
    snprintf(path, sizeof(path), "%s/nowhere", dfg_test_tmpdir());
    const char *const n_nodir[] = {"No such file or directory", NULL};
    check_refusal("no directory", dfg_model_dir_settings(p, path, err, sizeof(err)), DFG_ERR_IO, err, path, n_nodir, p, 0);
    /* a file, not a directory */
    const char *const n_notdir[] = {"not a directory", NULL};
    write_config("{}");
    check_refusal("a file", dfg_model_dir_settings(p, config_path, err, sizeof(err)), DFG_ERR_IO, err, config_path,
                  n_notdir, p, 0);
    /* a directory without config.json */
    unlink(config_path);
    const char *const n_missing[] = {"missing", NULL};
    check_refusal("no config.json", dfg_model_dir_settings(p, model_dir, err, sizeof(err)), DFG_ERR_IO, err, config_path,
                  n_missing, p, 0);
    /* config.json that is not a file */
    CHECK(mkdir(config_path, 0700) == 0, "mkdir %s", config_path);
    const char *const n_reg[] = {"not a regular file", NULL};
    check_refusal("config.json a directory", dfg_model_dir_settings(p, model_dir, err, sizeof(err)), DFG_ERR_IO, err,
                  config_path, n_reg, p, 0);
    rmdir(config_path);
    /* unreadable (root reads anything: not testable there) */
    write_config(gpt2);
    chmod(config_path, 0);
    if (geteuid() != 0) {
        const char *const n_perm[] = {"cannot open", "Permission denied", NULL};
        check_refusal("unreadable", dfg_model_dir_settings(p, model_dir, err, sizeof(err)), DFG_ERR_IO, err, config_path,
                      n_perm, p, 0);
    }
    chmod(config_path, 0600);
    /* arguments */
    const char *const n_empty[] = {"empty", NULL};
    check_refusal("empty path", dfg_model_dir_settings(p, "", err, sizeof(err)), DFG_ERR_ARG, err, "model directory",
                  n_empty, p, 0);
    CHECK(dfg_model_dir_settings(NULL, model_dir, err, sizeof(err)) == DFG_ERR_ARG, "NULL program");
    CHECK(dfg_model_dir_settings(p, NULL, NULL, 0) == DFG_ERR_ARG, "NULL dir, NULL err");
    dfg_program_free(p);
    /* a program that already failed is not touched */
    p = dfg_program_new("mc");
    dfg_program_fail(p, DFG_ERR_ARG, "earlier");
    const char *const n_state[] = {"earlier", NULL};
    check_refusal("failed program", dfg_model_dir_settings(p, model_dir, err, sizeof(err)), DFG_ERR_STATE, err,
                  config_path, n_state, p, 0);
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_model_config");
    if (!dfg_test_tmpdir_create("dfg_model_config")) return 1;
    snprintf(model_dir, sizeof(model_dir), "%s/model", dfg_test_tmpdir());
    snprintf(config_path, sizeof(config_path), "%s/" DFG_MC_FILE, model_dir);
    CHECK(mkdir(model_dir, 0700) == 0, "mkdir %s: %s", model_dir, strerror(errno));
    test_real_configs();
    test_typed_read_back();
    test_user_settings_win();
    test_defaults_and_optional_keys();
    test_token_ids();
    test_unsupported_models();
    test_unsupported_settings();
    test_wrong_types();
    test_malformed_files();
    test_missing_and_unreadable();
    unlink(config_path);
    rmdir(model_dir);
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
