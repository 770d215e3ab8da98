/* cli_pipeline.c - what dfg compile and dfg fit share: building a pipeline (PIPELINE.c) into a
 * shared object with the C compiler dfg was built with, loading it (its calls into libdfg resolve
 * to the libdfg this executable runs with), calling its dfg_pipeline entry point on a fresh
 * program carrying the --set values (and, with --set model=DIR, the settings DIR/config.json
 * implies), and saving the program as a plan file, with the shared object inside when the
 * program has host stages. To show the user the memory plan, the plan's bytes are read back and
 * compiled exactly as dfg run will (planning needs only shapes, so a cuda plan is made on any
 * machine) BEFORE the file is written: a program that does not compile, e.g. under a memory
 * budget remat cannot meet, leaves no plan to run. */
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../graph/ir.h"
#include "cli.h"
#include "cli_config.h"

extern char **environ;

#if !defined(DFG_INCLUDE_DIR) || !defined(DFG_TASKS_LIB) || !defined(DFG_GRPO_LIB)
#error "the build passes DFG_INCLUDE_DIR (the headers pipelines see) and the DFG_TASKS_LIB and DFG_GRPO_LIB archives"
#endif
#ifndef DFG_C_COMPILER
#define DFG_C_COMPILER "cc"
#endif

/* What a pipeline compiles against: an installed dfg's own (<prefix>/include/dfg and the archives
 * in <prefix>/lib/dfg, beside <prefix>/bin/dfg), else the build tree's. */
typedef struct {
    char include[4200], grpo[4200], tasks[4200];
} pipeline_env;

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void find_pipeline_env(pipeline_env *e) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0'; /* <prefix>/bin */
    snprintf(e->include, sizeof(e->include), "%s/../include/dfg", exe);
    snprintf(e->grpo, sizeof(e->grpo), "%s/../lib/dfg/libdfg_grpo.a", exe);
    snprintf(e->tasks, sizeof(e->tasks), "%s/../lib/dfg/libdfg_tasks.a", exe);
    char header[4300];
    snprintf(header, sizeof(header), "%s/dfg.h", e->include);
    if (n > 0 && is_file(header) && is_file(e->grpo) && is_file(e->tasks)) return; /* installed */
    snprintf(e->include, sizeof(e->include), "%s", DFG_INCLUDE_DIR);
    snprintf(e->grpo, sizeof(e->grpo), "%s", DFG_GRPO_LIB);
    snprintf(e->tasks, sizeof(e->tasks), "%s", DFG_TASKS_LIB);
}

/* "examples/gpt2_train.c" -> "gpt2_train" */
void cli_stem_of(const char *path, char *out, size_t len) {
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
void cli_pipeline_usage_note(FILE *f) {
    pipeline_env e;
    find_pipeline_env(&e);
    fprintf(f, "The compiler is %s (override with $DFG_CC); headers come from %s.\n", DFG_C_COMPILER, e.include);
}

void cli_build_args_init(cli_build_args *b) { *b = (cli_build_args){.target_name = "cpu", .target = DFG_TARGET_CPU}; }

int cli_build_option(const char *cmd, cli_arg_kind k, const char *opt, const char *val, cli_build_args *b, bool *taken) {
    *taken = true;
    if (k == CLI_ARG_POSITIONAL) {
        if (b->pipeline) return cli_error(cmd, CLI_USAGE, "one pipeline file at a time (got '%s' and '%s')", b->pipeline, val);
        b->pipeline = val;
    } else if (!strcmp(opt, "--set")) {
        const char *eq = strchr(val, '=');
        if (!eq || eq == val) return cli_error(cmd, CLI_USAGE, "--set needs key=value, got '%s'", val);
        if (!strncmp(val, "target=", 7)) return cli_error(cmd, CLI_USAGE, "use --target to choose the target, not --set target=");
        if (b->n_sets == CLI_MAX_SETS) return cli_error(cmd, CLI_USAGE, "more than %d --set options", CLI_MAX_SETS);
        b->sets[b->n_sets++] = val;
    } else if (!strcmp(opt, "--config")) { /* a TRL GRPOConfig file: its fields as --set values, here */
        return cli_config_apply(cmd, val, b->sets, &b->n_sets, CLI_MAX_SETS);
    } else if (!strcmp(opt, "--target")) {
        if (strcmp(val, "cpu") && strcmp(val, "cuda")) return cli_error(cmd, CLI_USAGE, "unknown target '%s' (valid: cpu, cuda)", val);
        b->target_name = val;
        b->target = strcmp(val, "cpu") ? DFG_TARGET_CUDA : DFG_TARGET_CPU;
    } else if (!strcmp(opt, "--memory-budget")) {
        if (!dfg_parse_bytes(val, &b->memory_budget))
            return cli_error(cmd, CLI_USAGE,
                             "--memory-budget must be a positive size such as 6GiB, 512MiB, 64KiB, 1.5GB, 300MB or 4096 "
                             "(bytes), got '%s'", val);
    } else if (!strcmp(opt, "--no-fuse")) {
        b->no_fuse = true;
    } else if (!strcmp(opt, "-o") || !strcmp(opt, "--output")) {
        b->output = val;
    } else {
        *taken = false;
    }
    return CLI_OK;
}

void cli_build_output(const cli_build_args *b, char *out, size_t len) {
    if (b->output) {
        snprintf(out, len, "%s", b->output);
        return;
    }
    cli_stem_of(b->pipeline, out, len > 4 ? len - 4 : len);
    snprintf(out + strlen(out), len - strlen(out), ".dfg");
}

int cli_pipeline_compile_so(const cli_pipeline *c, const char *so_path) {
    const char *pipeline = c->pipeline;
    const char *cc = getenv("DFG_CC");
    if (!cc || !*cc) cc = DFG_C_COMPILER;
    pipeline_env e;
    find_pipeline_env(&e);
    char inc[4300];
    snprintf(inc, sizeof(inc), "-I%s", e.include); /* every public header and the examples', one folder */
    const char *argv[] = {cc, "-std=c11", "-O2", "-fPIC", "-shared", inc, "-o", so_path, pipeline, e.grpo, e.tasks, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, cc, NULL, NULL, (char *const *)argv, environ);
    if (rc) return cli_error(c->cmd, CLI_USAGE, "cannot run the C compiler '%s': %s", cc, strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return cli_error(c->cmd, CLI_FAILED, "waiting for the C compiler: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return CLI_OK;
    if (WIFEXITED(status))
        return cli_error(c->cmd, CLI_USAGE, "%s does not compile (%s exited with status %d; its messages are above)", pipeline,
                         cc, WEXITSTATUS(status));
    return cli_error(c->cmd, CLI_USAGE, "the C compiler was killed by signal %d while compiling %s", WTERMSIG(status), pipeline);
}

/* Applies the --set values; they stay unused until the pipeline reads them. */
static int apply_sets(dfg_program *p, const cli_pipeline *c) {
    char key[512];
    dfg_program_set(p, "target", c->target_name);
    for (int i = 0; i < c->n_sets + c->n_extra; i++) {
        const char *kv = i < c->n_sets ? c->sets[i] : c->extra[i - c->n_sets];
        const char *eq = strchr(kv, '=');
        snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
        dfg_program_set(p, key, eq + 1);
    }
    /* a value the settings table refuses is the user's to fix: a usage error, like an unknown key */
    if (dfg_program_status(p))
        return cli_error(c->cmd, dfg_program_status(p) == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s", dfg_program_error(p));
    return CLI_OK;
}

/* --set model=DIR: the model's config.json becomes settings (dfg_model_dir_settings), under the
 * --set values already applied, which win. Only the --set keys are checked for use afterwards:
 * a pipeline need not read every key a config holds. */
static int apply_model_dir(dfg_program *p, const char *cmd) {
    const char *dir = dfg_program_str(p, "model");
    if (!*dir) return CLI_OK;
    char err[1024], *abs = realpath(dir, NULL);
    /* the plan records where the model came from as an absolute path: `dfg run --save DIR/`
     * copies its config.json, from whatever directory the run starts in */
    if (abs) dfg_program_set(p, "model", abs), free(abs), dir = dfg_program_str(p, "model");
    dfg_status st = dfg_model_dir_settings(p, dir, err, sizeof(err));
    if (st) return cli_error(cmd, st == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s", err);
    return CLI_OK;
}

/* --set dataset=PATH (and eval_dataset) is recorded as an absolute path: the run reads it from wherever it starts. A
 * path that does not resolve stays as given, for the pipeline to refuse with the reader's message. */
static void absolute_dataset(dfg_program *p) {
    for (int i = 0; i < 2; i++) { /* the training and the evaluation files */
        const char *key = i ? "eval_dataset" : "dataset", *path = dfg_program_str(p, key);
        char *abs = *path ? realpath(path, NULL) : NULL;
        if (abs) dfg_program_set(p, key, abs);
        free(abs);
    }
}

/* Edit distance of two short strings (longer ones count as far apart). */
int cli_edit_distance(const char *a, const char *b) {
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
        int d = dfg_program_setting_used(p, name) ? cli_edit_distance(key, name) : best_d;
        if (d < best_d) best = name, best_d = d;
    }
    return best;
}

/* A --set key the pipeline never read is almost always a typo: refuse it, listing the keys. */
static int check_unused(const dfg_program *p, const cli_pipeline *c) {
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
        return cli_error(c->cmd, CLI_USAGE, "%s does not use the setting '%s' (%sits settings: %s)", c->pipeline, key, hint,
                         used ? valid : "none");
    }
    return CLI_OK;
}

/* Every host stage's function must be exported by the pipeline (or be in the process). */
static int check_host_stages(const dfg_program *p, void *lib, const char *cmd, const char *pipeline, bool *any) {
    *any = false;
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        if (st->kind != DFG_STAGE_HOST) continue;
        *any = true;
        if (!dlsym(lib, st->symbol) && !dlsym(RTLD_DEFAULT, st->symbol))
            return cli_error(cmd, CLI_USAGE,
                             "host stage '%s' calls '%s', which %s does not export (define it there without 'static')",
                             st->name, st->symbol, pipeline);
    }
    return CLI_OK;
}

static int run_pipeline(const cli_pipeline *c, dfg_pipeline_fn fn, dfg_program **out) {
    char name[256];
    cli_stem_of(c->pipeline, name, sizeof(name));
    dfg_program *p = *out = dfg_program_new(name);
    if (!p) return cli_error(c->cmd, CLI_FAILED, "out of memory");
    int rc = apply_sets(p, c);
    if (!rc) rc = apply_model_dir(p, c->cmd);
    if (!rc) absolute_dataset(p);
    if (rc) return rc;
    dfg_status st = fn(p);
    if (dfg_program_status(p))
        return cli_error(c->cmd, CLI_USAGE, "%s: the pipeline failed: %s", c->pipeline, dfg_program_error(p));
    if (st)
        return cli_error(c->cmd, CLI_USAGE, "%s: dfg_pipeline returned '%s' without recording an error", c->pipeline,
                         dfg_status_name(st));
    if (p->n_stages == 0) return cli_error(c->cmd, CLI_USAGE, "%s: the pipeline added no stages, so it would do nothing", c->pipeline);
    return CLI_OK;
}

void cli_print_notes(const dfg_program *p) {
    const char *n = dfg_program_notes(p), *why = dfg_program_rollouts_only(p);
    for (const char *end; n && *n; n = end + 1) {
        end = strchr(n, '\n');
        if (!end) break;
        printf("note: %.*s\n", (int)(end - n), n);
    }
    if (why) printf("note: this plan trains only on fixed rollouts (dfg run --rollouts FILE): %s\n", why);
}

/* "compiled gpt2.dfg: ..." and the settings, so the log of a compile says what was built. */
static void print_summary(const dfg_program *p, const char *out, size_t plan_bytes, const char *target) {
    int64_t nodes = 0;
    for (int g = 0; g < p->n_graphs; g++) nodes += p->graphs[g]->n_nodes;
    char sb[32], pb[96];
    printf("wrote %s (%s): program '%s' for %s, %d stage%s, %lld nodes, %s\n", out,
           dfg_bytes_str((double)plan_bytes, sb, sizeof(sb)), p->name, target, p->n_stages, p->n_stages == 1 ? "" : "s",
           (long long)nodes, cli_params_str(p, pb, sizeof(pb)));
    printf("settings:");
    for (int i = 0; i < p->n_settings; i++) printf(" %s=%s", p->settings[i].key, p->settings[i].value);
    printf("\n");
    cli_print_notes(p);
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
static int compile_as_run(const cli_pipeline *c, const dfg_program *p, const dfg_plan_info *info, dfg_program **q,
                          dfg_plan_info *back) {
    void *bytes = NULL;
    size_t n = 0;
    char err[1024];
    /* serialising compiles a copy to record its plan: a program that does not compile (a budget
     * remat cannot meet) fails here, as bad input */
    dfg_status st = dfg_plan_serialize(p, info, &bytes, &n, err, sizeof(err));
    if (st) return cli_error(c->cmd, st == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s: %s", c->pipeline, err);
    st = dfg_plan_parse(bytes, n, c->pipeline, q, back, err, sizeof(err));
    free(bytes);
    if (st) return cli_error(c->cmd, st == DFG_ERR_NOMEM ? CLI_FAILED : CLI_USAGE, "%s", err);
    return cli_compile_plan(c->cmd, c->pipeline, q, back);
}

int cli_pipeline_save(const cli_pipeline *c, const dfg_program *p, const char *so, const dfg_plan_info *opts,
                      const char *out) {
    dfg_plan_info info = *opts;
    info.host_lib = NULL, info.host_lib_size = 0;
    snprintf(info.source, sizeof(info.source), "%s", c->pipeline);
    if (so && !cli_read_file(c->cmd, so, &info.host_lib, &info.host_lib_size)) return CLI_FAILED;
    dfg_program *q = NULL;
    dfg_plan_info back;
    int rc = compile_as_run(c, p, &info, &q, &back);
    char err[1024];
    /* the file gets the plan the round trip recorded and reproduced: saving compiles (searches
     * remat's copies) no second time */
    info.plan = rc ? NULL : back.plan;
    if (!rc && dfg_plan_save(p, &info, out, err, sizeof(err))) rc = cli_error(c->cmd, CLI_FAILED, "%s", err);
    info.plan = NULL;
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

int cli_pipeline_load(const cli_pipeline *c, const char *so, void **lib, dfg_pipeline_fn *fn) {
    *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!*lib) return cli_error(c->cmd, CLI_USAGE, "cannot load the compiled %s: %s", c->pipeline, dlerror());
    *(void **)fn = dlsym(*lib, DFG_PIPELINE_SYMBOL);
    if (*fn) return CLI_OK;
    dlclose(*lib);
    *lib = NULL;
    return cli_error(c->cmd, CLI_USAGE, "%s does not define the entry point 'dfg_status %s(dfg_program *p)'", c->pipeline,
                     DFG_PIPELINE_SYMBOL);
}

int cli_pipeline_build(const cli_pipeline *c, void *lib, dfg_pipeline_fn fn, dfg_program **out, bool *host) {
    int rc = run_pipeline(c, fn, out);
    if (!rc) rc = check_unused(*out, c);
    if (!rc) rc = check_host_stages(*out, lib, c->cmd, c->pipeline, host);
    return rc;
}
