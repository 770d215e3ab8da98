/* test_planner_examples.c - the planner's properties on every example pipeline.
 *
 * Every .c file in examples/ is compiled into a shared object and loaded, as `dfg compile` does:
 *   - small (a CPU-sized model): built four times and compiled normally, with no_reuse and with
 *     keep_order; tests/planner_props.h's properties hold for each plan; two training steps on
 *     the CPU give bit-identical PARAMs, STATEs and metrics across the plans, and the normal
 *     plan gives the same bits with and without check mode (which must not fire);
 *   - GPT-2 124M-sized (L=12, H=12, C=768, V=50257; the example's own batch and sequence
 *     settings, 1024 tokens for gpt2_train) planned for DFG_TARGET_CUDA, not run: the same
 *     properties, and arena / lower bound <= 1.02.
 * A pipeline that fails to compile or build is a failure, not a skip. */
#include <dirent.h>

#include "pipeline_module.h"
#include "planner_props.h"

/* Settings for a model small enough to train two steps quickly; a pipeline ignores the keys it
 * does not read. */
static const char *const small_settings[][2] = {
    {"target", "cpu"}, {"n_layer", "1"},         {"n_head", "2"},          {"n_embd", "32"},   {"vocab_size", "61"},
    {"seq", "16"},     {"batch", "4"},           {"n_positions", "32"},     {"prompt_len", "6"}, {"completion_len", "10"},
    {"prompts", "1"},  {"group", "4"},
};
static const char *const big_settings[][2] = {
    {"target", "cuda"}, {"n_layer", "12"}, {"n_head", "12"}, {"n_embd", "768"}, {"vocab_size", "50257"},
    {"seq", "1024"},    {"batch", "4"},
};

static dfg_program *build(void *lib, const char *name, const char *const (*set)[2], int n_set) {
    dfg_pipeline_fn fn;
    *(void **)&fn = dlsym(lib, DFG_PIPELINE_SYMBOL);
    CHECK(fn, "%s: no %s symbol", name, DFG_PIPELINE_SYMBOL);
    if (!fn) return NULL;
    dfg_program *p = dfg_program_new(name);
    for (int i = 0; i < n_set; i++) dfg_program_set(p, set[i][0], set[i][1]);
    dfg_status st = fn(p);
    CHECK(st == DFG_OK && !dfg_program_status(p), "%s: pipeline: %s", name, dfg_program_error(p));
    if (st || dfg_program_status(p)) {
        dfg_program_free(p);
        return NULL;
    }
    return p;
}

typedef struct {
    unsigned char *bytes;
    size_t n;
} snapshot;

/* Variant 0 normal + check mode, 1 no_reuse, 2 keep_order + check mode, 3 normal plain. */
static bool run_small(void *lib, const char *name, int variant, snapshot *snap) {
    static const char *const vname[] = {"normal+check", "no_reuse", "keep_order+check", "normal"};
    char label[400];
    snprintf(label, sizeof(label), "%s small (%s)", name, vname[variant]);
    dfg_program *p = build(lib, label, small_settings, (int)(sizeof(small_settings) / sizeof(small_settings[0])));
    if (!p) return false;
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.no_reuse = variant == 1;
    o.keep_order = variant == 2;
    CHECK(dfg_compile(p, &o) == DFG_OK, "%s: compile: %s", label, dfg_program_error(p));
    pp_result r = {0};
    pp_check(p, label, &r);
    if (variant == 0)
        printf("%s: %d steps, %d groups, %d in place, arena %zu, lower bound %zu, naive %zu\n", label, r.n_steps, r.n_groups,
               r.n_inplace, r.arena, r.lower_bound, r.naive);
    dfg_run_options ro = dfg_run_options_default();
    ro.n_threads = 1;
    ro.seed = 99;
    ro.host_lib = lib;
    ro.check = variant == 0 || variant == 2;
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_runtime_create(p, &ro, &rt);
    CHECK(st == DFG_OK, "%s: create: %s", label, dfg_runtime_error(rt));
    for (int k = 0; k < 2 && !st; k++) {
        st = dfg_runtime_step(rt);
        CHECK(st == DFG_OK, "%s: step %d: %s", label, k, dfg_runtime_error(rt));
    }
    int n_compared = 0;
    for (int i = 0; !st && i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if ((t->kind != DFG_PARAM && t->kind != DFG_STATE) || t->scope_first) continue;
        dfg_buffer b;
        dfg_runtime_buffer(rt, t->name, &b);
        snap->bytes = realloc(snap->bytes, snap->n + b.bytes);
        memcpy(snap->bytes + snap->n, b.data, b.bytes);
        snap->n += b.bytes;
        n_compared++;
    }
    CHECK(st || n_compared > 0, "%s: nothing to compare", label);
    dfg_runtime_free(rt);
    dfg_program_free(p);
    return !st;
}

static void test_small(void *lib, const char *name) {
    snapshot s[4] = {{0}};
    bool ok = true;
    for (int v = 0; v < 4; v++) ok &= run_small(lib, name, v, &s[v]);
    for (int v = 1; v < 4 && ok; v++)
        CHECK(s[v].n == s[0].n && s[0].n && !memcmp(s[v].bytes, s[0].bytes, s[0].n),
              "%s: PARAMs/STATEs after two steps differ between the checked normal plan and variant %d", name, v);
    for (int v = 0; v < 4; v++) free(s[v].bytes);
}

static void test_big(void *lib, const char *name) {
    char label[400];
    snprintf(label, sizeof(label), "%s 124M cuda", name);
    dfg_program *p = build(lib, label, big_settings, (int)(sizeof(big_settings) / sizeof(big_settings[0])));
    if (!p) return;
    dfg_options o = dfg_options_default(DFG_TARGET_CUDA);
    CHECK(dfg_compile(p, &o) == DFG_OK, "%s: compile: %s", label, dfg_program_error(p));
    pp_result r = {0};
    if (!pp_check(p, label, &r)) {
        double ratio = (double)r.arena / (double)r.lower_bound;
        printf("%s: %d steps, %d groups, %d in place, arena %.1f MiB, lower bound %.1f MiB (x%.4f), naive %.1f MiB\n", label,
               r.n_steps, r.n_groups, r.n_inplace, r.arena / 1048576.0, r.lower_bound / 1048576.0, ratio, r.naive / 1048576.0);
        CHECK(ratio <= 1.02, "%s: arena / lower bound = %.4f > 1.02", label, ratio);
    }
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_planner_examples");
    if (!dfg_test_tmpdir_create("dfg_examples")) return 1;
    int n = 0;
    /* the pipelines: each examples/<name>.c, and examples/grpo/grpo.c (not its grpo_ helpers) */
    static const char *const folders[] = {"examples", "examples/grpo"};
    for (size_t f = 0; f < sizeof(folders) / sizeof(folders[0]); f++) {
        char dir[1100];
        snprintf(dir, sizeof(dir), "%s/%s", pm_source_dir(), folders[f]);
        DIR *d = opendir(dir);
        CHECK(d, "cannot open %s", dir);
        for (struct dirent *e; d && (e = readdir(d));) {
            size_t len = strlen(e->d_name);
            if (len < 3 || strcmp(e->d_name + len - 2, ".c") || !strncmp(e->d_name, "grpo_", 5)) continue;
            char src[1400], name[128];
            snprintf(src, sizeof(src), "%s/%s", dir, e->d_name);
            snprintf(name, sizeof(name), "%.*s", (int)(len - 2 < 100 ? len - 2 : 100), e->d_name);
            void *lib = pm_build(src, name);
            if (!lib) continue;
            test_small(lib, name);
            test_big(lib, name);
            n++;
        }
        if (d) closedir(d);
    }
    CHECK(n >= 3, "%d example pipelines were tested (gpt2_train, gpt2_124m and grpo are there)", n);
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
