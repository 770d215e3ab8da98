/* test_weights_adapter.c - runtime/weights on LoRA plans: an adapter directory is what PEFT's
 * save_pretrained and a trainer's save_model leave (the adapter, its config, a README.md model
 * card and the base model's tokenizer files, none of its other files); every written file has the
 * one file mode (0644 less the umask); the base digest tells bases apart and a resume check on
 * another base is refused in one line naming both. (PEFT itself loads such a directory in
 * tests/golden/peft_golden.py.) */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "graph/ir.h"
#include "testutil.h"

static dfg_program *lora_program_rs(const char *model_dir, const char *rslora);
static dfg_program *lora_program(const char *model_dir) { return lora_program_rs(model_dir, NULL); }

/* rslora: the --set text of use_rslora, or NULL */
static dfg_program *lora_program_rs(const char *model_dir, const char *rslora) {
    dfg_model_config c = {.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 11, .block_size = 8, .ln_eps = 1e-5f,
                          .dtype = DFG_F32, .arch = DFG_ARCH_QWEN2, .n_kv_head = 1, .head_dim = 4, .n_inner = 12,
                          .rope_theta = 10000.0f};
    c.lora = (dfg_lora_config){.r = 2, .alpha = 4};
    snprintf(c.lora.targets, sizeof(c.lora.targets), "q_proj,v_proj");
    dfg_program *p = dfg_program_new("adapter");
    dfg_model *m = calloc(1, sizeof(*m));
    dfg_program_set(p, "model_type", "qwen2");
    dfg_program_set(p, "lora_r", "2");
    dfg_program_set(p, "lora_alpha", "4");
    if (model_dir) dfg_program_set(p, "model", model_dir);
    if (rslora) dfg_program_set(p, "use_rslora", rslora), c.lora.rslora = true;
    CHECK(!dfg_model_params(p, "", c, m), "build: %s", dfg_program_error(p));
    free(m);
    return p;
}

static dfg_runtime *runtime_of(dfg_program *p, uint64_t seed) {
    dfg_run_options o = dfg_run_options_default();
    o.seed = seed, o.n_threads = 1;
    dfg_runtime *rt = NULL;
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "runtime: %s", dfg_runtime_error(rt));
    return rt;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 16);
    size_t n = b ? fread(b, 1, (1 << 16) - 1, f) : 0;
    (void)n;
    fclose(f);
    return b;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void test_adapter_dir(void) {
    char model[512], out[512], path[1100];
    snprintf(model, sizeof(model), "%s", dfg_test_tmp_path("model"));
    snprintf(out, sizeof(out), "%s", dfg_test_tmp_path("adapter"));
    CHECK(mkdir(model, 0755) == 0, "mkdir %s", model);
    static const char *const base_files[] = {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                                             "generation_config.json", "config.json"};
    for (size_t i = 0; i < sizeof(base_files) / sizeof(base_files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", model, base_files[i]);
        dfg_test_write_file(path, base_files[i], strlen(base_files[i])); /* each file holds its own name */
    }
    dfg_program *p = lora_program(model);
    dfg_runtime *rt = runtime_of(p, 1);
    mode_t old = umask(027);
    dfg_status s = dfg_runtime_save_adapter(rt, out);
    umask(old);
    CHECK(s == DFG_OK, "save_adapter: %s", dfg_runtime_error(rt));
    static const char *const want[] = {"adapter_model.safetensors", "adapter_config.json", "README.md", "tokenizer.json",
                                       "tokenizer_config.json", "vocab.json", "merges.txt"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", out, want[i]);
        struct stat sb;
        CHECK(stat(path, &sb) == 0, "the adapter directory lacks %s", want[i]);
        CHECK(stat(path, &sb) != 0 || (sb.st_mode & 0777) == 0640, "%s has mode %o, want 0644 less the umask 027: 0640",
              want[i], (unsigned)(sb.st_mode & 0777));
    }
    snprintf(path, sizeof(path), "%s/tokenizer.json", out);
    char *text = slurp(path);
    CHECK(text && !strcmp(text, "tokenizer.json"), "tokenizer.json is the base's: '%s'", text ? text : "(none)");
    free(text);
    snprintf(path, sizeof(path), "%s/generation_config.json", out);
    CHECK(!exists(path), "an adapter directory holds no generation_config.json (a model directory's)");
    snprintf(path, sizeof(path), "%s/config.json", out);
    CHECK(!exists(path), "an adapter directory holds no config.json (PEFT would take it for a model)");
    snprintf(path, sizeof(path), "%s/README.md", out);
    text = slurp(path);
    char front[700];
    snprintf(front, sizeof(front), "---\nlibrary_name: peft\nbase_model: \"%s\"\n---\n", model);
    CHECK(text && !strncmp(text, front, strlen(front)), "README.md starts with PEFT's front matter:\n%s", text ? text : "");
    free(text);
    char list[256];
    dfg_weights_copied_files(p, true, list, sizeof(list));
    CHECK(!strcmp(list, "tokenizer.json, tokenizer_config.json, vocab.json, merges.txt"), "adapter copies: '%s'", list);
    dfg_weights_copied_files(p, false, list, sizeof(list));
    CHECK(!strcmp(list, "generation_config.json, tokenizer.json, tokenizer_config.json, vocab.json, merges.txt"),
          "model copies: '%s'", list);
    /* a second save into the directory of a program without a source: the tokenizer stays */
    dfg_runtime_free(rt);
    dfg_program_free(p);
    p = lora_program(NULL);
    rt = runtime_of(p, 2);
    CHECK(dfg_runtime_save_adapter(rt, out) == DFG_OK, "save without a source: %s", dfg_runtime_error(rt));
    snprintf(path, sizeof(path), "%s/README.md", out);
    text = slurp(path);
    CHECK(text && !strstr(text, "base_model:"), "no base_model without a source directory:\n%s", text ? text : "");
    free(text);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* use_rslora=1 (or yes, on) trains with alpha / sqrt(r): the adapter must say so, or PEFT loads it
 * at another scale; and the plan takes back the adapter it wrote. */
static void test_rslora_spellings(void) {
    static const char *const spellings[] = {"1", "yes", "on", "true"};
    for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
        char out[512], path[600];
        snprintf(out, sizeof(out), "%s", dfg_test_tmp_path("rs"));
        dfg_program *p = lora_program_rs(NULL, spellings[i]);
        dfg_runtime *rt = runtime_of(p, 3);
        CHECK(dfg_runtime_save_adapter(rt, out) == DFG_OK, "save: %s", dfg_runtime_error(rt));
        snprintf(path, sizeof(path), "%s/adapter_config.json", out);
        char *text = slurp(path);
        cJSON *o = text ? cJSON_Parse(text) : NULL;
        CHECK(o && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "use_rslora")),
              "use_rslora=%s: adapter_config.json says use_rslora %s", spellings[i],
              o && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "use_rslora")) ? "false" : "(not true)");
        int n = 0;
        CHECK(dfg_runtime_load_adapter(rt, out, &n) == DFG_OK && n == 4, "use_rslora=%s: the plan takes its adapter back: %s",
              spellings[i], dfg_runtime_error(rt));
        cJSON_Delete(o);
        free(text);
        dfg_runtime_free(rt);
        dfg_program_free(p);
    }
}

static void test_base_digest(void) {
    dfg_program *p = lora_program(NULL);
    dfg_runtime *a = runtime_of(p, 7), *b = runtime_of(p, 7);
    char da[32], db[32];
    CHECK(dfg_weights_base_digest(a, da, sizeof(da)) == DFG_OK && !strncmp(da, "xxh64:", 6) && strlen(da) == 22,
          "digest '%s'", da);
    CHECK(dfg_weights_base_digest(b, db, sizeof(db)) == DFG_OK && !strcmp(da, db), "the same base, the same digest");
    CHECK(dfg_weights_check_base(b, da, "A", "ckpt", "B") == DFG_OK, "the same base resumes: %s", dfg_runtime_error(b));
    float v[8 * 8] = {0};
    v[3] = 1.0f; /* one value of one base weight */
    const dfg_tensor *w = dfg_find(p, "model.layers.0.self_attn.q_proj.weight");
    CHECK(w && dfg_tensor_bytes(w) <= sizeof(v), "q_proj");
    CHECK(w && dfg_runtime_write(b, w->name, v, dfg_tensor_bytes(w)) == DFG_OK, "write: %s", dfg_runtime_error(b));
    CHECK(dfg_weights_base_digest(b, db, sizeof(db)) == DFG_OK && strcmp(da, db), "another base, another digest");
    CHECK(dfg_weights_check_base(b, da, "MODEL_A", "D/checkpoint.safetensors", "MODEL_B") == DFG_ERR_ARG,
          "another base is refused");
    char want[256];
    snprintf(want, sizeof(want), "D/checkpoint.safetensors was trained on base %s (MODEL_A), --weights MODEL_B is %s: "
             "resume with the same base", da, db);
    CHECK(!strcmp(dfg_runtime_error(b), want), "message:\n  %s\nwant\n  %s", dfg_runtime_error(b), want);
    CHECK(dfg_weights_check_base(b, "", NULL, "D", "MODEL_B") == DFG_OK, "nothing recorded: accepted");
    dfg_runtime_free(a);
    dfg_runtime_free(b);
    dfg_program_free(p);
    /* a plan without a frozen base has no digest */
    dfg_program *q = dfg_program_new("full");
    dfg_param(q, "w", DFG_F32, DFG_SHAPE(2), dfg_init_zeros());
    dfg_runtime *r = runtime_of(q, 1);
    CHECK(dfg_weights_base_digest(r, da, sizeof(da)) == DFG_OK && da[0] == '\0', "no base: '%s'", da);
    dfg_runtime_free(r);
    dfg_program_free(q);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    dfg_test_init("test_weights_adapter");
    if (!dfg_test_tmpdir_create("dfg_weights_adapter")) return 1;
    test_adapter_dir();
    test_rslora_spellings();
    test_base_digest();
    nftw(dfg_test_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return dfg_test_finish();
}
