/* cli_compile.c - `dfg compile PIPELINE.c [--config TRL.yaml] [--set k=v ...] [--target cpu|cuda]
 * [--memory-budget 6GiB] [--no-fuse] [-o P.dfg]`: builds the pipeline and saves its plan
 * (tools/cli_pipeline.c does the building; the file holds the program as built plus the compile
 * options). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_config.h"

#define CMD "compile"

typedef struct {
    cli_build_args b;           /* the pipeline, --set, --target, --memory-budget, --no-fuse, -o */
    int64_t align;              /* 0: the target's */
    bool no_reuse, keep_order, time_passes;
} compile_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: dfg compile PIPELINE.c [--config FILE] [--set key=value ...] [--target cpu|cuda] [-o P.dfg]\n"
            "                   [--memory-budget BYTES] [--no-fuse] [--align N] [--no-reuse] [--keep-order]\n"
            "                   [--time-passes]\n"
            "\n"
            "Compiles a pipeline written in the dfg C DSL, runs its entry point\n"
            "    dfg_status dfg_pipeline(dfg_program *p);\n"
            "saves the program it builds as a plan file (default: PIPELINE.dfg in the current\n"
            "directory), and prints its memory plan (dfg inspect P.dfg shows the details).\n"
            "\n"
            "  --set key=value   a pipeline setting (repeatable); the pipeline reads it with\n"
            "                    dfg_setting_int/float/str/bool. A key it never reads is an error.\n"
            "                    --set model=DIR: a Hugging Face model directory; its config.json\n"
            "                    (GPT-2, Llama, Qwen2, Qwen3) gives the model's settings (model_type,\n"
            "                    n_layer, hidden_size, ...), which other --set values override.\n"
            "  --config FILE     a TRL GRPOConfig as JSON or YAML (trl grpo --config's file): each field\n"
            "                    becomes dfg's setting, is converted, or is refused by name when dfg\n"
            "                    does not support it (docs/cli.md); a --set after it overrides it\n"
            "  --config-fields   print the table of TRL's fields and what each becomes, and exit\n"
            "  --target T        cpu (default) or cuda; the pipeline sees it as the setting 'target'.\n"
            "                    Planning needs no GPU: a cuda plan is made and inspected anywhere.\n"
            "  -o, --output P    where to write the plan\n"
            "  --memory-budget B the most bytes the arena may take, e.g. 6GiB, 512MiB, 1.5GB, 4096\n"
            "                    (GiB/MiB/KiB binary, GB/MB/KB decimal). Activations are recomputed in\n"
            "                    the backward (remat) until the plan fits; when nothing fits, compile\n"
            "                    fails with the smallest budget it found and writes no plan.\n"
            "  --no-fuse         keep the ops as written (no logprob, linear_logprob or bias_gelu\n"
            "                    fusion): to compare fused with unfused plans\n"
            "  --align N         byte alignment of every tensor (a power of two; default 64 on cpu,\n"
            "                    256 on cuda)\n"
            "  --no-reuse        give every tensor its own bytes (the baseline planning is measured by)\n"
            "  --keep-order      run nodes in the order the pipeline built them, not a schedule that\n"
            "                    keeps fewer bytes live\n"
            "  --time-passes     print how long each compiler pass took (remat's trial plans apart)\n"
            "\n");
    cli_pipeline_usage_note(f);
}

static int parse_args(int argc, char **argv, compile_args *c) {
    static const cli_option opts[] = {{"--set", true},       {"--config", true},    {"--config-fields", false},
                                      {"--target", true},    {"-o", true},
                                      {"--output", true},    {"--align", true},     {"--no-reuse", false},
                                      {"--keep-order", false}, {"--memory-budget", true}, {"--no-fuse", false},
                                      {"--time-passes", false}, {"--help", false},     {"-h", false},         {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val;
    *c = (compile_args){0};
    cli_build_args_init(&c->b);
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        bool taken;
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        int rc = cli_build_option(CMD, k, opt, val, &c->b, &taken);
        if (rc || taken) {
            if (rc) return rc;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(opt, "--config-fields")) {
            cli_config_print_fields(stdout);
            return -1;
        } else if (!strcmp(opt, "--align")) {
            if (!cli_parse_i64(CMD, "--align", val, 1, 1 << 20, &c->align)) return CLI_USAGE;
            if (c->align & (c->align - 1)) return cli_error(CMD, CLI_USAGE, "--align must be a power of two, got %s", val);
        } else if (!strcmp(opt, "--no-reuse")) {
            c->no_reuse = true;
        } else if (!strcmp(opt, "--keep-order")) {
            c->keep_order = true;
        } else if (!strcmp(opt, "--time-passes")) {
            c->time_passes = true;
        }
    }
    if (!c->b.pipeline) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the pipeline file (PIPELINE.c)");
    }
    return CLI_OK;
}

/* "time in passes: verify 0.01 s, ..." one pass a line, remat's parts indented under it. */
static void print_times(const dfg_pass_times *t) {
    double total = 0;
    for (int i = 0; i < t->n; i++)
        if (!strchr(t->t[i].name, ':')) total += t->t[i].seconds;
    printf("time in passes: %.2f s (the compile of the plan's program; wall clock)\n", total);
    for (int i = 0; i < t->n; i++) {
        bool part = strchr(t->t[i].name, ':') != NULL;
        printf("  %s%-28s %9.3f s", part ? "  " : "", t->t[i].name, t->t[i].seconds);
        if (t->t[i].calls > 1) printf("  %d calls", t->t[i].calls);
        printf("\n");
    }
}

int cli_compile(int argc, char **argv) {
    compile_args c;
    int rc = parse_args(argc, argv, &c);
    if (rc) return rc < 0 ? CLI_OK : rc;
    struct stat st;
    if (stat(c.b.pipeline, &st) != 0) return cli_error(CMD, CLI_USAGE, "cannot read %s: %s", c.b.pipeline, strerror(errno));
    if (!S_ISREG(st.st_mode)) return cli_error(CMD, CLI_USAGE, "%s is not a regular file", c.b.pipeline);
    char out[4096], dir[4096], so[4200];
    cli_build_output(&c.b, out, sizeof(out));
    if (!cli_make_tempdir(CMD, dir, sizeof(dir))) return CLI_FAILED;
    snprintf(so, sizeof(so), "%s/pipeline.so", dir);
    cli_pipeline pl = {.cmd = CMD, .pipeline = c.b.pipeline, .target_name = c.b.target_name, .sets = c.b.sets, .n_sets = c.b.n_sets};
    rc = cli_pipeline_compile_so(&pl, so);
    void *lib = NULL;
    dfg_pipeline_fn fn;
    if (!rc) rc = cli_pipeline_load(&pl, so, &lib, &fn);
    dfg_program *p = NULL;
    bool host = false;
    if (!rc) rc = cli_pipeline_build(&pl, lib, fn, &p, &host);
    dfg_plan_info info = {.target = c.b.target, .align = (size_t)c.align, .no_reuse = c.no_reuse, .keep_order = c.keep_order,
                          .no_fuse = c.b.no_fuse, .memory_budget = c.b.memory_budget};
    dfg_pass_times times = {0};
    if (c.time_passes) info.times = &times;
    if (!rc) rc = cli_pipeline_save(&pl, p, host ? so : NULL, &info, out);
    if (c.time_passes && times.n) print_times(&times);
    dfg_program_free(p);
    if (lib) dlclose(lib);
    cli_remove_temp(dir, "pipeline.so");
    return rc;
}
