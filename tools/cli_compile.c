/* cli_compile.c - `dfg compile PIPELINE.c [--set k=v ...] [--target cpu|cuda]
 * [--memory-budget 6GiB] [--no-fuse] [-o P.dfg]`.
 *
 * Builds the pipeline into a shared object with the C compiler dfg was built with, loads it
 * (its calls into libdfg resolve to the libdfg this executable runs with), calls its
 * dfg_pipeline entry point on a fresh program carrying the --set values (and, with --set
 * model=DIR, the settings DIR/config.json implies), and saves the program
 * as a plan file, with the shared object inside when the program has host stages. The file
 * holds the program as built plus the compile options; to show the user the memory plan, the
 * plan's bytes are read back and compiled exactly as dfg run will (planning needs only shapes,
 * so a cuda plan is made on any machine) BEFORE the file is written: a program that does not
 * compile, e.g. under a memory budget remat cannot meet, leaves no plan to run. */
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../graph/ir.h"
#include "cli.h"

extern char **environ;

#ifndef DFG_SOURCE_DIR
#error "DFG_SOURCE_DIR must be defined (the build passes the source tree's path)"
#endif
#ifndef DFG_C_COMPILER
#define DFG_C_COMPILER "cc"
#endif
#ifndef DFG_TASKS_LIB
#error "DFG_TASKS_LIB must be defined (the build passes the examples' tasks archive)"
#endif

#define CMD "compile"
#define MAX_SETS 256

typedef struct {
    const char *pipeline, *output, *target_name;
    dfg_target target;
    const char *sets[MAX_SETS]; /* "key=value" as given */
    int n_sets;
    int64_t align;              /* 0: the target's */
    bool no_reuse, keep_order, no_fuse;
    int64_t memory_budget;      /* 0: none */
} compile_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: dfg compile PIPELINE.c [--set key=value ...] [--target cpu|cuda] [-o P.dfg]\n"
            "                   [--memory-budget BYTES] [--no-fuse] [--align N] [--no-reuse] [--keep-order]\n"
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
            "\n"
            "The compiler is %s (override with $DFG_CC); headers come from %s.\n",
            DFG_C_COMPILER, DFG_SOURCE_DIR);
}

static int parse_args(int argc, char **argv, compile_args *c) {
    static const cli_option opts[] = {{"--set", true},       {"--target", true},    {"-o", true},
                                      {"--output", true},    {"--align", true},     {"--no-reuse", false},
                                      {"--keep-order", false}, {"--memory-budget", true}, {"--no-fuse", false},
                                      {"--help", false},     {"-h", false},         {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val;
    *c = (compile_args){.target_name = "cpu", .target = DFG_TARGET_CPU};
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        if (k == CLI_ARG_POSITIONAL) {
            if (c->pipeline) return cli_error(CMD, CLI_USAGE, "one pipeline file at a time (got '%s' and '%s')", c->pipeline, val);
            c->pipeline = val;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(opt, "--set")) {
            const char *eq = strchr(val, '=');
            if (!eq || eq == val) return cli_error(CMD, CLI_USAGE, "--set needs key=value, got '%s'", val);
            if (!strncmp(val, "target=", 7)) return cli_error(CMD, CLI_USAGE, "use --target to choose the target, not --set target=");
            if (c->n_sets == MAX_SETS) return cli_error(CMD, CLI_USAGE, "more than %d --set options", MAX_SETS);
            c->sets[c->n_sets++] = val;
        } else if (!strcmp(opt, "--target")) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda"))
                return cli_error(CMD, CLI_USAGE, "unknown target '%s' (valid: cpu, cuda)", val);
            c->target_name = val;
            c->target = strcmp(val, "cpu") ? DFG_TARGET_CUDA : DFG_TARGET_CPU;
        } else if (!strcmp(opt, "--align")) {
            if (!cli_parse_i64(CMD, "--align", val, 1, 1 << 20, &c->align)) return CLI_USAGE;
            if (c->align & (c->align - 1)) return cli_error(CMD, CLI_USAGE, "--align must be a power of two, got %s", val);
        } else if (!strcmp(opt, "--no-reuse")) {
            c->no_reuse = true;
        } else if (!strcmp(opt, "--keep-order")) {
            c->keep_order = true;
        } else if (!strcmp(opt, "--memory-budget")) {
            if (!dfg_parse_bytes(val, &c->memory_budget))
                return cli_error(CMD, CLI_USAGE,
                                 "--memory-budget must be a positive size such as 6GiB, 512MiB, 64KiB, 1.5GB, 300MB or "
                                 "4096 (bytes), got '%s'",
                                 val);
        } else if (!strcmp(opt, "--no-fuse")) {
            c->no_fuse = true;
        } else {
            c->output = val;
        }
    }
    if (!c->pipeline) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the pipeline file (PIPELINE.c)");
    }
    return CLI_OK;
}

/* "examples/gpt2_train.c" -> "gpt2_train" */
static void stem_of(const char *path, char *out, size_t len) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    snprintf(out, len, "%.*s", (int)n, base);
}

/* Runs the C compiler; its diagnostics (file:line: error: ...) go straight to our stderr. The
 * pipeline sees dfg's public headers and the examples' tasks (examples/tasks/dfg_tasks.h); the
 * tasks archive is linked in, so the shared object (embedded in the plan) carries what it uses
 * of them, and its calls into dfg resolve to the dfg that loads it. */
static int compile_shared_object(const char *pipeline, const char *so_path) {
    const char *cc = getenv("DFG_CC");
    if (!cc || !*cc) cc = DFG_C_COMPILER;
    static const char *const dirs[] = {"graph", "ops", "ops/nn", "passes", "runtime", "examples/tasks"};
    enum { N_DIRS = sizeof(dirs) / sizeof(dirs[0]) };
    char inc[N_DIRS][4200];
    const char *argv[N_DIRS + 12];
    int k = 0;
    argv[k++] = cc;
    argv[k++] = "-std=c11";
    argv[k++] = "-O2";
    argv[k++] = "-fPIC";
    argv[k++] = "-shared";
    for (int i = 0; i < N_DIRS; i++) {
        snprintf(inc[i], sizeof(inc[i]), "-I%s/%s", DFG_SOURCE_DIR, dirs[i]);
        argv[k++] = inc[i];
    }
    argv[k++] = "-o";
    argv[k++] = so_path;
    argv[k++] = pipeline;
    argv[k++] = DFG_TASKS_LIB;
    argv[k++] = NULL;
    pid_t pid;
    int rc = posix_spawnp(&pid, cc, NULL, NULL, (char *const *)argv, environ);
    if (rc) return cli_error(CMD, CLI_USAGE, "cannot run the C compiler '%s': %s", cc, strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return cli_error(CMD, CLI_FAILED, "waiting for the C compiler: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return CLI_OK;
    if (WIFEXITED(status))
        return cli_error(CMD, CLI_USAGE, "%s does not compile (%s exited with status %d; its messages are above)", pipeline,
                         cc, WEXITSTATUS(status));
    return cli_error(CMD, CLI_USAGE, "the C compiler was killed by signal %d while compiling %s", WTERMSIG(status), pipeline);
}

/* Applies the --set values; they stay unused until the pipeline reads them. */
static int apply_sets(dfg_program *p, const compile_args *c) {
    char key[512];
    dfg_program_set(p, "target", c->target_name);
    for (int i = 0; i < c->n_sets; i++) {
        const char *eq = strchr(c->sets[i], '=');
        snprintf(key, sizeof(key), "%.*s", (int)(eq - c->sets[i]), c->sets[i]);
        dfg_program_set(p, key, eq + 1);
    }
    if (dfg_program_status(p)) return cli_error(CMD, CLI_FAILED, "%s", dfg_program_error(p));
    return CLI_OK;
}

/* --set model=DIR: the model's config.json becomes settings (dfg_model_dir_settings), under the
 * --set values already applied, which win. Only the --set keys are checked for use afterwards:
 * a pipeline need not read every key a config holds. */
static int apply_model_dir(dfg_program *p) {
    const char *dir = dfg_program_setting(p, "model");
    if (!dir || !*dir) return CLI_OK;
    char err[1024], *abs = realpath(dir, NULL);
    /* the plan records where the model came from as an absolute path: `dfg run --save DIR/`
     * copies its config.json, from whatever directory the run starts in */
    if (abs) dfg_program_set(p, "model", abs), free(abs), dir = dfg_program_setting(p, "model");
    dfg_status st = dfg_model_dir_settings(p, dir, err, sizeof(err));
    if (st) return cli_error(CMD, st == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s", err);
    return CLI_OK;
}

/* --set dataset=PATH is recorded as an absolute path: the run reads it from wherever it starts. A
 * path that does not resolve stays as given, for the pipeline to refuse with the reader's message. */
static void absolute_dataset(dfg_program *p) {
    const char *path = dfg_program_setting(p, "dataset");
    char *abs = path && *path ? realpath(path, NULL) : NULL;
    if (abs) dfg_program_set(p, "dataset", abs);
    free(abs);
}

/* Edit distance of two short strings (longer ones count as far apart). */
static int distance(const char *a, const char *b) {
    enum { MAX = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAX || lb >= MAX) return MAX;
    int row[MAX + 1];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* The used key closest to `key` when it is plausibly a typo of it, else NULL. */
static const char *closest_key(const dfg_program *p, const char *key) {
    const char *best = NULL;
    int best_d = 3; /* up to two edits */
    for (int k = 0; k < dfg_program_setting_count(p); k++) {
        const char *name = dfg_program_setting_key(p, k);
        int d = dfg_program_setting_used(p, name) ? distance(key, name) : best_d;
        if (d < best_d) best = name, best_d = d;
    }
    return best;
}

/* A --set key the pipeline never read is almost always a typo: refuse it, listing the keys. */
static int check_unused(const dfg_program *p, const compile_args *c) {
    char key[512], valid[4096], hint[600] = "";
    for (int i = 0; i < c->n_sets; i++) {
        const char *eq = strchr(c->sets[i], '=');
        snprintf(key, sizeof(key), "%.*s", (int)(eq - c->sets[i]), c->sets[i]);
        if (dfg_program_setting_used(p, key)) continue;
        size_t used = 0;
        valid[0] = '\0';
        for (int k = 0; k < dfg_program_setting_count(p) && used < sizeof(valid); k++) {
            const char *name = dfg_program_setting_key(p, k);
            if (dfg_program_setting_used(p, name) && strcmp(name, "target"))
                used += (size_t)snprintf(valid + used, sizeof(valid) - used, "%s%s", used ? ", " : "", name);
        }
        const char *near = closest_key(p, key);
        if (near) snprintf(hint, sizeof(hint), "did you mean '%s'? ", near);
        return cli_error(CMD, CLI_USAGE, "%s does not use the setting '%s' (%sits settings: %s)", c->pipeline, key, hint,
                         used ? valid : "none");
    }
    return CLI_OK;
}

/* Every host stage's function must be exported by the pipeline (or be in the process). */
static int check_host_stages(const dfg_program *p, void *lib, const char *pipeline, bool *any) {
    *any = false;
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        if (st->kind != DFG_STAGE_HOST) continue;
        *any = true;
        if (!dlsym(lib, st->symbol) && !dlsym(RTLD_DEFAULT, st->symbol))
            return cli_error(CMD, CLI_USAGE,
                             "host stage '%s' calls '%s', which %s does not export (define it there without 'static')",
                             st->name, st->symbol, pipeline);
    }
    return CLI_OK;
}

static int run_pipeline(const compile_args *c, dfg_pipeline_fn fn, dfg_program **out) {
    char name[256];
    stem_of(c->pipeline, name, sizeof(name));
    dfg_program *p = *out = dfg_program_new(name);
    if (!p) return cli_error(CMD, CLI_FAILED, "out of memory");
    int rc = apply_sets(p, c);
    if (!rc) rc = apply_model_dir(p);
    if (!rc) absolute_dataset(p);
    if (rc) return rc;
    dfg_status st = fn(p);
    if (dfg_program_status(p))
        return cli_error(CMD, CLI_USAGE, "%s: the pipeline failed: %s", c->pipeline, dfg_program_error(p));
    if (st)
        return cli_error(CMD, CLI_USAGE, "%s: dfg_pipeline returned '%s' without recording an error", c->pipeline,
                         dfg_status_name(st));
    if (p->n_stages == 0) return cli_error(CMD, CLI_USAGE, "%s: the pipeline added no stages, so it would do nothing", c->pipeline);
    return CLI_OK;
}

/* "compiled gpt2.dfg: ..." and the settings, so the log of a compile says what was built. */
static void print_summary(const dfg_program *p, const char *out, size_t plan_bytes, const char *target) {
    int64_t n_params = 0, nodes = 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->kind == DFG_PARAM) n_params += dfg_shape_numel(p->tensors[i]->shape);
    for (int g = 0; g < p->n_graphs; g++) nodes += p->graphs[g]->n_nodes;
    char sb[32];
    printf("wrote %s (%s): program '%s' for %s, %d stage%s, %lld nodes, %.3g M parameters\n", out,
           dfg_bytes_str((double)plan_bytes, sb, sizeof(sb)), p->name, target, p->n_stages, p->n_stages == 1 ? "" : "s",
           (long long)nodes, (double)n_params / 1e6);
    printf("settings:");
    for (int i = 0; i < p->n_settings; i++) printf(" %s=%s", p->settings[i].key, p->settings[i].value);
    printf("\n");
}

/* The plan as dfg run will compile it, in a few lines: memory, fusion and recompute. */
static void print_plan(const dfg_program *q, const dfg_plan_info *info) {
    const dfg_report *r = dfg_program_report(q);
    char line[512], a[32], b[32];
    printf("plan for %s: %s; peak at step %d of %d\n", dfg_target_name(info->target),
           cli_memory_summary(r, line, sizeof(line)), r->peak_step, r->n_steps);
    printf("fused: %s", info->no_fuse ? "off (--no-fuse)" : cli_fused_str(r, line, sizeof(line)));
    if (info->memory_budget > 0)
        printf("; memory budget %s, arena %s under it; recomputed: %s",
               dfg_bytes_str((double)info->memory_budget, a, sizeof(a)),
               dfg_bytes_str((double)(info->memory_budget - (int64_t)r->arena_bytes), b, sizeof(b)),
               cli_remat_str(r, info->memory_budget, line, sizeof(line)));
    printf("\n");
}

/* Serialises the program, reads the bytes back and compiles them as dfg run will load and
 * compile the file (the recompiled plan must equal the recorded one): the plan is checked
 * before anything is written. */
static int compile_as_run(const compile_args *c, const dfg_program *p, const dfg_plan_info *info, dfg_program **q,
                          dfg_plan_info *back) {
    void *bytes = NULL;
    size_t n = 0;
    char err[1024];
    /* serialising compiles a copy to record its plan: a program that does not compile (a budget
     * remat cannot meet) fails here, as bad input */
    dfg_status st = dfg_plan_serialize(p, info, &bytes, &n, err, sizeof(err));
    if (st) return cli_error(CMD, st == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s: %s", c->pipeline, err);
    st = dfg_plan_parse(bytes, n, c->pipeline, q, back, err, sizeof(err));
    free(bytes);
    if (st) return cli_error(CMD, st == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s", err);
    return cli_compile_plan(CMD, c->pipeline, q, back);
}

static int save(const compile_args *c, const dfg_program *p, const char *so, const char *out) {
    dfg_plan_info info = {.target = c->target, .align = (size_t)c->align,
                          .no_reuse = c->no_reuse, .keep_order = c->keep_order, .no_fuse = c->no_fuse,
                          .memory_budget = c->memory_budget};
    snprintf(info.source, sizeof(info.source), "%s", c->pipeline);
    if (so && !cli_read_file(CMD, so, &info.host_lib, &info.host_lib_size)) return CLI_FAILED;
    dfg_program *q = NULL;
    dfg_plan_info back;
    int rc = compile_as_run(c, p, &info, &q, &back);
    char err[1024];
    if (!rc && dfg_plan_save(p, &info, out, err, sizeof(err))) rc = cli_error(CMD, CLI_FAILED, "%s", err);
    free(info.host_lib);
    if (!rc) {
        struct stat sb;
        print_summary(p, out, stat(out, &sb) == 0 ? (size_t)sb.st_size : 0, c->target_name);
        print_plan(q, &back);
    }
    if (q) {
        dfg_program_free(q);
        dfg_plan_info_free(&back);
    }
    return rc;
}

/* Loads the compiled pipeline, builds the program, checks it and saves the plan. */
static int build_and_save(const compile_args *c, const char *so, const char *out) {
    void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return cli_error(CMD, CLI_USAGE, "cannot load the compiled %s: %s", c->pipeline, dlerror());
    dfg_pipeline_fn fn;
    *(void **)&fn = dlsym(lib, DFG_PIPELINE_SYMBOL);
    dfg_program *p = NULL;
    bool host = false;
    int rc = fn ? run_pipeline(c, fn, &p)
                : cli_error(CMD, CLI_USAGE, "%s does not define the entry point 'dfg_status %s(dfg_program *p)'",
                            c->pipeline, DFG_PIPELINE_SYMBOL);
    if (!rc) rc = check_unused(p, c);
    if (!rc) rc = check_host_stages(p, lib, c->pipeline, &host);
    if (!rc) rc = save(c, p, host ? so : NULL, out);
    dfg_program_free(p);
    dlclose(lib);
    return rc;
}

int cli_compile(int argc, char **argv) {
    compile_args c;
    int rc = parse_args(argc, argv, &c);
    if (rc) return rc < 0 ? CLI_OK : rc;
    struct stat st;
    if (stat(c.pipeline, &st) != 0) return cli_error(CMD, CLI_USAGE, "cannot read %s: %s", c.pipeline, strerror(errno));
    if (!S_ISREG(st.st_mode)) return cli_error(CMD, CLI_USAGE, "%s is not a regular file", c.pipeline);
    char out[4096], dir[4096], so[4200];
    if (c.output) {
        snprintf(out, sizeof(out), "%s", c.output);
    } else {
        stem_of(c.pipeline, out, sizeof(out) - 4);
        strcat(out, ".dfg");
    }
    if (!cli_make_tempdir(CMD, dir, sizeof(dir))) return CLI_FAILED;
    snprintf(so, sizeof(so), "%s/pipeline.so", dir);
    rc = compile_shared_object(c.pipeline, so);
    if (!rc) rc = build_and_save(&c, so, out);
    cli_remove_temp(dir, "pipeline.so");
    return rc;
}
