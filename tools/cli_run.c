/* cli_run.c - `dfg run P.dfg [--steps N] [--weights W.safetensors] [--save OUT.safetensors]
 * [--seed S] [--threads N] [--every K]`.
 *
 * Loads a plan and compiles it with the options it records (so the run uses the memory plan
 * that dfg compile and dfg inspect reported), loads the pipeline's embedded shared object for
 * its host stages, creates the runtime, optionally loads weights, runs N steps printing one
 * line of metrics per step, and optionally saves the parameters. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../graph/ir.h"
#include "cli.h"

#define CMD "run"

typedef struct {
    const char *plan, *weights, *save;
    int64_t steps, seed, threads, every;
} run_args;

static void usage(FILE *f) {
    fprintf(f, "usage: dfg run P.dfg [--steps N] [--weights W.safetensors] [--save OUT.safetensors]\n"
               "                     [--seed S] [--threads N] [--every K]\n"
               "\n"
               "Runs a plan made by dfg compile: N steps (default 1), each running every stage once,\n"
               "and prints the program's metrics after each step.\n"
               "\n"
               "  --steps N      steps to run (0 only initialises, loads and saves)\n"
               "  --weights W    load parameters from a safetensors file (every parameter must be there)\n"
               "  --save OUT     write the parameters to a safetensors file after the last step\n"
               "  --seed S       seed of parameter initialisation, RNG streams and host stages (default 1234)\n"
               "  --threads N    CPU threads (default: all cores)\n"
               "  --every K      print every K-th step (and the last); default 1\n");
}

static int parse_args(int argc, char **argv, run_args *r) {
    static const cli_option opts[] = {{"--steps", true},   {"--weights", true}, {"--save", true},
                                      {"--seed", true},    {"--threads", true}, {"--every", true},
                                      {"--help", false},   {"-h", false},       {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val;
    *r = (run_args){.steps = 1, .seed = (int64_t)dfg_run_options_default().seed, .every = 1};
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        bool ok = true;
        if (k == CLI_ARG_POSITIONAL) {
            if (r->plan) return cli_error(CMD, CLI_USAGE, "one plan file at a time (got '%s' and '%s')", r->plan, val);
            r->plan = val;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(opt, "--steps")) ok = cli_parse_i64(CMD, "--steps", val, 0, INT64_MAX / 2, &r->steps);
        else if (!strcmp(opt, "--seed")) ok = cli_parse_i64(CMD, "--seed", val, 0, INT64_MAX, &r->seed);
        else if (!strcmp(opt, "--threads")) ok = cli_parse_i64(CMD, "--threads", val, 1, 4096, &r->threads);
        else if (!strcmp(opt, "--every")) ok = cli_parse_i64(CMD, "--every", val, 1, INT64_MAX, &r->every);
        else if (!strcmp(opt, "--weights")) r->weights = val;
        else r->save = val;
        if (!ok) return CLI_USAGE;
    }
    if (!r->plan) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the plan file (P.dfg, made by dfg compile)");
    }
    return CLI_OK;
}

/* dlopen needs a file: the embedded shared object goes to a private temp file that is removed
 * at once (the mapping stays valid). */
static int open_host_lib(const run_args *r, const dfg_plan_info *info, void **lib) {
    *lib = NULL;
    if (!info->host_lib) return CLI_OK;
    char dir[4096], so[4200];
    if (!cli_make_tempdir(CMD, dir, sizeof(dir))) return CLI_FAILED;
    snprintf(so, sizeof(so), "%s/pipeline.so", dir);
    int rc = CLI_OK;
    if (!cli_write_file(CMD, so, info->host_lib, info->host_lib_size)) rc = CLI_FAILED;
    else if (!(*lib = dlopen(so, RTLD_NOW | RTLD_LOCAL)))
        rc = cli_error(CMD, CLI_USAGE, "%s: cannot load the pipeline's embedded code: %s", r->plan, dlerror());
    cli_remove_temp(dir, "pipeline.so");
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_header(const run_args *r, const dfg_program *p, dfg_runtime *rt, int threads) {
    char sb[32];
    int64_t n_params = 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->kind == DFG_PARAM) n_params += dfg_shape_numel(p->tensors[i]->shape);
    printf("%s: program '%s', %d stage%s, %.3g M parameters, arena %s, seed %lld", r->plan, p->name, p->n_stages,
           p->n_stages == 1 ? "" : "s", (double)n_params / 1e6,
           dfg_bytes_str((double)dfg_runtime_arena_bytes(rt), sb, sizeof(sb)), (long long)r->seed);
    if (threads) printf(", %d thread%s", threads, threads == 1 ? "" : "s");
    printf("\n");
}

static void print_step(dfg_runtime *rt, int64_t step, int64_t steps, double ms) {
    int width = snprintf(NULL, 0, "%lld", (long long)steps);
    printf("step %*lld", width, (long long)step);
    for (int i = 0; i < dfg_runtime_metric_count(rt); i++)
        printf("  %s %.5g", dfg_runtime_metric_name(rt, i), (double)dfg_runtime_metric_value(rt, i));
    printf("  %.1f ms\n", ms);
    fflush(stdout);
}

static int run_steps(const run_args *r, dfg_runtime *rt) {
    double start = now_s();
    for (int64_t s = 1; s <= r->steps; s++) {
        double t0 = now_s();
        if (dfg_runtime_step(rt)) return cli_error(CMD, CLI_FAILED, "%s: %s", r->plan, dfg_runtime_error(rt));
        if (s % r->every == 0 || s == r->steps) print_step(rt, s, r->steps, 1e3 * (now_s() - t0));
    }
    double total = now_s() - start;
    if (r->steps > 0)
        printf("%lld step%s in %.3f s (%.2f ms/step)\n", (long long)r->steps, r->steps == 1 ? "" : "s", total,
               1e3 * total / (double)r->steps);
    return CLI_OK;
}

/* Creates the runtime, loads weights, runs, saves. */
static int execute(const run_args *r, dfg_program *p, void *lib) {
    dfg_run_options opt = dfg_run_options_default();
    opt.target = DFG_TARGET_CPU;
    opt.seed = (uint64_t)r->seed;
    opt.n_threads = (int)r->threads;
    opt.host_lib = lib;
    dfg_runtime *rt = NULL;
    int rc = CLI_OK;
    if (dfg_runtime_create(p, &opt, &rt)) {
        rc = cli_error(CMD, CLI_FAILED, "%s: %s", r->plan, rt ? dfg_runtime_error(rt) : "out of memory");
        dfg_runtime_free(rt);
        return rc;
    }
    print_header(r, p, rt, (int)r->threads);
    int n_loaded = 0;
    if (r->weights) {
        if (dfg_runtime_load_safetensors(rt, r->weights, true, &n_loaded))
            rc = cli_error(CMD, CLI_USAGE, "%s", dfg_runtime_error(rt));
        else printf("loaded %d tensors from %s\n", n_loaded, r->weights);
    }
    if (!rc) rc = run_steps(r, rt);
    if (!rc && r->save) {
        if (dfg_runtime_save_safetensors(rt, r->save, false))
            rc = cli_error(CMD, CLI_FAILED, "%s", dfg_runtime_error(rt));
        else printf("saved the parameters to %s\n", r->save);
    }
    dfg_runtime_free(rt);
    return rc;
}

int cli_run(int argc, char **argv) {
    run_args r;
    int rc = parse_args(argc, argv, &r);
    if (rc) return rc < 0 ? CLI_OK : rc;
    dfg_program *p = NULL;
    dfg_plan_info info;
    if ((rc = cli_load_plan(CMD, r.plan, &p, &info))) return rc;
    void *lib = NULL;
    if (info.target != DFG_TARGET_CPU)
        rc = cli_error(CMD, CLI_USAGE, "%s: plan targets %s; this build's runtime supports cpu (recompile with --target cpu)",
                       r.plan, dfg_target_name(info.target));
    if (!rc) rc = open_host_lib(&r, &info, &lib);
    if (!rc) rc = execute(&r, p, lib);
    dfg_program_free(p);
    dfg_plan_info_free(&info);
    if (lib) dlclose(lib);
    return rc;
}
