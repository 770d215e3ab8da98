/* cli_fit.c - `dfg fit PIPELINE.c --memory-budget B | --min [--target cpu|cuda] [--set k=v ...]
 * [--no-fuse] [-o P.dfg]`: will it fit, and how, before any GPU time.
 *
 * dfg plans every byte before it runs, so the question users answer by trial and error on a
 * GPU (which micro-batch, which sequence length, does remat help) is answered here by compiling.
 * The search varies only what keeps the math: the settings the pipeline declared with
 * dfg_declare_fit_knob(..., keeps_math = true) (GRPO: gradient_accumulation_steps, the training
 * micro-batch; rollout_sub_batches, the rollout generated a few groups at a time), the remat
 * pass (activations recomputed in the backward), and the fused head's vocabulary chunk, which
 * follows the budget (passes/fuse.c). A knob the user gave with --set is held at that value.
 *
 *   1. the program as given, compiled as dfg compile compiles it (no budget: its row shows the
 *      arena dfg compile prints). When the persistent tensors no setting can shrink (weights,
 *      gradients, optimizer state, a reference model) are alone over the budget, nothing fits:
 *      fit says so at once (exit 3). When it does not fit, the settings as given under the budget;
 *   2. for each value of the other knobs, the first value of the knob with the most values (the
 *      declared order saves memory step by step) that fits without recompute, by bisection;
 *   3. remat, one step before each of those frontiers (and at the last values where nothing
 *      fit), when its estimated time could beat the best plan of step 2 and the persistent
 *      tensors, which remat cannot shrink, are within the budget;
 * and writes the candidate that fits with the least estimated step time (cli_fit_cost.c), a
 * roomy budget included: the plan as given is one candidate among them. The chosen one is
 * recompiled as its plan file will be, so that its row is the plan written. Every candidate
 * compiled is printed.
 *
 * --min: the smallest arena with the math unchanged (every knob at its last value, remat until
 * nothing more helps, the narrowest chunk), and its plan. When nothing fits the budget, fit says
 * the least the pipeline needs, what fills it, and for the knobs that change the math
 * (keeps_math = false: batch size, lengths) the first value that would fit; it writes nothing
 * and exits with 3 (CLI_NO_FIT). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <dlfcn.h>

#include "../graph/ir.h"
#include "../ops/op.h"
#include "cli_device.h"
#include "cli_fit.h"

#define CMD "fit"
#define MAX_CANDIDATES 512
#define MAX_COMBOS 64     /* value combinations of the knobs other than the bisected one */
#define MAX_REMAT_TRIES 3 /* remat searches are slow on large programs: the most promising only */

typedef struct {
    cli_build_args b; /* the pipeline, --set, --target, --memory-budget (0 with --min), --no-fuse, -o */
    bool min;
    cli_device device; /* --device, or the target's default: what est. step is predicted on */
} fit_args;

typedef struct {
    char setting[128];
    int64_t values[DFG_MAX_FIT_VALUES];
    int n_values;
} fit_knob;

/* MODE_GIVEN: #1, compiled as dfg compile does (no budget); MODE_PROBE: under the budget
 * without recompute; MODE_REMAT: remat to the budget; MODE_MIN: remat to the least. */
typedef enum { MODE_GIVEN, MODE_PROBE, MODE_REMAT, MODE_MIN } fit_mode;

typedef struct {
    int idx[DFG_MAX_FIT_KNOBS]; /* value index per searched knob; -1: as the program has it */
    fit_mode mode;
    const char *math_key;       /* a hint's math-changing setting and value, or NULL */
    int64_t math_value;
    bool compiled, fits;
    int64_t arena, persistent;
    persistent_parts parts;
    int64_t workspace;          /* cuda: what a GPU run allocates after the arena (kernel scratch, GEMM library) */
    int64_t arena_budget;       /* remat's budget: the budget less the workspace of the same settings */
    double flops, extra_flops, est_s;
    int recomputed;
    char note[200];             /* why it did not compile */
} candidate;

typedef struct {
    const fit_args *a;
    cli_pipeline pl;
    void *lib;
    dfg_pipeline_fn fn;
    fit_knob knob[DFG_MAX_FIT_KNOBS]; /* searched: keeps the math, not set by the user */
    int n_knobs;
    fit_knob math[DFG_MAX_FIT_KNOBS]; /* change the math: named when nothing fits */
    int n_math;
    int given_idx[DFG_MAX_FIT_KNOBS]; /* each searched knob's value as given (-1: not among its values) */
    bool has_beta;                    /* the program reads a setting "beta" (GRPO's KL weight) */
    candidate cand[MAX_CANDIDATES];
    int n_cand;
} fit_ctx;

static void usage(FILE *f) {
    fprintf(f,
            "usage: dfg fit PIPELINE.c (--memory-budget BYTES | --min) [--target cpu|cuda] [--set key=value ...]\n"
            "               [--config FILE] [--no-fuse] [-o P.dfg]\n"
            "\n"
            "Finds the plan of a pipeline that fits a memory budget with the math unchanged, writes it\n"
            "(like dfg compile) and prints every candidate it compiled. It varies the settings the\n"
            "pipeline declares as keeping the math (GRPO: gradient_accumulation_steps, rollout_sub_batches),\n"
            "recomputation in the backward (remat) and the fused head's vocabulary chunk; a setting given\n"
            "with --set is held at that value. Settings that change what is trained (prompts_per_step,\n"
            "num_generations, max_completion_length) are never changed: when nothing fits, fit names the\n"
            "values that would.\n"
            "\n"
            "  --memory-budget B the most bytes the plan may take, e.g. 24GiB, 512MiB, 1.5GB: for cuda the arena\n"
            "                    and the kernel and GEMM workspace after it, what a GPU run allocates (not the\n"
            "                    CUDA context); for cpu the arena\n"
            "  --min             the smallest arena reachable with the math unchanged, and its plan\n"
            "  --target T        cpu (default) or cuda; planning needs no GPU\n"
            "  --set key=value   a pipeline setting (repeatable), as for dfg compile\n"
            "  --config FILE     a TRL GRPOConfig (JSON or YAML) as settings, as for dfg compile\n"
            "  --no-fuse         plan the ops as written (no fused log-prob head)\n"
            "  -o, --output P    where to write the plan (default: PIPELINE.dfg here)\n"
            "  --device D        rank on D: h100, h200, a100, l40s or cpu (default: h100 for cuda, cpu for cpu;\n"
            "                    cpu is this machine, measured once and cached: dfg inspect --help says how)\n"
            "\n"
            "Candidates are ranked by their predicted step time on the device (dfg inspect --device: each\n"
            "kernel run's roofline of the op cost table and a per-kernel time, in the worst case the plan is\n"
            "sized for), shown in ms and relative to #1: a prediction, not a measurement. Exit status: 0 a plan was written; 3 nothing fits the budget (the message says\n"
            "the least the pipeline needs and what would fit); 2 bad input; 1 another failure.\n\n");
    cli_pipeline_usage_note(f);
}

static int parse_args(int argc, char **argv, fit_args *a) {
    static const cli_option opts[] = {{"--set", true},  {"--config", true}, {"--target", true}, {"-o", true}, {"--output", true},
                                      {"--min", false}, {"--memory-budget", true}, {"--no-fuse", false}, {"--device", true},
                                      {"--help", false}, {"-h", false},            {NULL, false}};
    cli_args c = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val, *device = NULL;
    *a = (fit_args){0};
    cli_build_args_init(&a->b);
    for (cli_arg_kind k; (k = cli_next(&c, &opt, &val)) != CLI_ARG_END;) {
        bool taken;
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        int rc = cli_build_option(CMD, k, opt, val, &a->b, &taken);
        if (rc || taken) {
            if (rc) return rc;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(opt, "--min")) {
            a->min = true;
        } else if (!strcmp(opt, "--device")) {
            device = val;
        }
    }
    if (!a->b.pipeline) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the pipeline file (PIPELINE.c)");
    }
    if (a->min == (a->b.memory_budget > 0))
        return cli_error(CMD, CLI_USAGE, "give either --memory-budget BYTES (the plan that fits it) or --min (the smallest plan)");
    if (!cli_device_named(CMD, device ? device : cli_device_default(a->b.target), &a->device)) return CLI_USAGE;
    return CLI_OK;
}

/* ---------------------------------------------------------------- candidates */
/* "key=value" for each searched knob (and a hint's math setting); returns their count. */
static int extra_sets(const fit_ctx *f, const candidate *c, char buf[][160], const char **out) {
    int n = 0;
    for (int i = 0; i < f->n_knobs; i++)
        if (c->idx[i] >= 0) {
            snprintf(buf[n], 160, "%s=%lld", f->knob[i].setting, (long long)f->knob[i].values[c->idx[i]]);
            out[n] = buf[n], n++;
        }
    if (c->math_key) {
        snprintf(buf[n], 160, "%s=%lld", c->math_key, (long long)c->math_value);
        out[n] = buf[n], n++;
    }
    return n;
}

/* Builds the program the candidate's settings make. */
static int build(const fit_ctx *f, const candidate *c, dfg_program **p) {
    char buf[DFG_MAX_FIT_KNOBS + 1][160];
    const char *ex[DFG_MAX_FIT_KNOBS + 1];
    cli_pipeline pl = f->pl;
    pl.extra = ex;
    pl.n_extra = extra_sets(f, c, buf, ex);
    bool host;
    return cli_pipeline_build(&pl, f->lib, f->fn, p, &host);
}

/* The budget the candidate is compiled (and its plan recorded) with: none for the program as
 * given (as dfg compile), remat's share for a remat candidate, else the user's. */
static int64_t budget_of(const fit_ctx *f, const candidate *c) {
    return c->mode == MODE_GIVEN || c->mode == MODE_MIN ? 0 : c->mode == MODE_REMAT ? c->arena_budget : f->a->b.memory_budget;
}

static dfg_options options_of(const fit_ctx *f, const candidate *c) {
    dfg_options o = dfg_options_default(f->a->b.target);
    o.no_fuse = f->a->b.no_fuse;
    o.memory_min = c->mode == MODE_MIN;
    o.memory_budget = budget_of(f, c);
    o.no_remat = c->mode == MODE_PROBE;
    return o;
}
/* What the compiled program p of candidate c needs and costs. */
static void record(const fit_ctx *f, candidate *c, const dfg_program *p) {
    const dfg_report *r = dfg_program_report(p);
    c->compiled = true;
    c->arena = (int64_t)r->arena_bytes;
    c->persistent = (int64_t)r->persistent_bytes;
    c->parts = cli_fit_persistent_of(p);
    c->workspace = cli_fit_workspace_of(p, f->a->b.target);
    c->fits = c->mode == MODE_MIN || c->arena + c->workspace <= f->a->b.memory_budget;
    cli_step_cost sc = cli_fit_step_cost_on(p, &f->a->device);
    c->flops = sc.flops;
    c->extra_flops = sc.extra_flops;
    c->recomputed = r->recomputed_nodes;
    c->est_s = sc.seconds;
}

/* Compiles the candidate and records what its plan needs. A program the compiler refuses (a
 * budget remat cannot meet: its result says the least it reached) is a candidate that does not
 * fit, with the reason. */
static int evaluate(fit_ctx *f, candidate *c) {
    dfg_program *p = NULL;
    int rc = build(f, c, &p);
    if (!rc) {
        dfg_options o = options_of(f, c);
        if (dfg_compile(p, &o)) {
            const dfg_remat_result *rm = dfg_program_remat(p);
            if (rm && rm->ran && !rm->fits) cli_fit_remat_note(rm, c->note, sizeof(c->note));
            else snprintf(c->note, sizeof(c->note), "%s", dfg_program_error(p));
            if (dfg_program_status(p) == DFG_ERR_NOMEM) rc = cli_error(CMD, CLI_FAILED, "out of memory compiling a candidate");
        } else {
            record(f, c, p);
        }
    }
    dfg_program_free(p);
    return rc;
}

/* The plan file's record of the candidate: what write_plan writes and dfg run compiles. */
static dfg_plan_info info_of(const fit_ctx *f, const candidate *c) {
    return (dfg_plan_info){.target = f->a->b.target, .no_fuse = f->a->b.no_fuse, .memory_min = c->mode == MODE_MIN,
                           .memory_budget = budget_of(f, c)};
}

/* Compiles the candidate as its plan file will be (serialised, read back, compiled with the
 * options it records: what dfg compile checks and dfg run loads) and records that, so that its
 * row is the plan written, to the byte and the node; the search compiles the program as built. */
static int recompile_as_written(fit_ctx *f, candidate *c) {
    dfg_program *p = NULL, *q = NULL;
    dfg_plan_info info = info_of(f, c), back;
    void *bytes = NULL;
    size_t n = 0;
    char err[1024];
    int rc = build(f, c, &p);
    if (!rc && dfg_plan_serialize(p, &info, &bytes, &n, err, sizeof(err)))
        rc = cli_error(CMD, CLI_FAILED, "%s: %s", f->a->b.pipeline, err);
    dfg_program_free(p);
    if (!rc && dfg_plan_parse(bytes, n, f->a->b.pipeline, &q, &back, err, sizeof(err)))
        rc = cli_error(CMD, CLI_FAILED, "%s", err);
    free(bytes);
    if (!rc) {
        rc = cli_compile_plan(CMD, f->a->b.pipeline, &q, &back); /* frees both on a failure */
        if (!rc) {
            record(f, c, q);
            dfg_plan_info_free(&back);
        }
    }
    dfg_program_free(q);
    return rc;
}

static bool same(const fit_ctx *f, const candidate *a, const candidate *b) {
    if (a->mode != b->mode || a->math_key != b->math_key || a->math_value != b->math_value) return false;
    for (int i = 0; i < f->n_knobs; i++)
        if (a->idx[i] != b->idx[i]) return false;
    return true;
}

/* The candidate's result, compiling it the first time it is asked for; NULL on a failure that
 * ends the search (its message printed), with *rc set. */
static candidate *try_candidate(fit_ctx *f, const candidate *want, int *rc) {
    for (int i = 0; i < f->n_cand; i++)
        if (same(f, &f->cand[i], want)) return &f->cand[i];
    if (f->n_cand == MAX_CANDIDATES) {
        *rc = cli_error(CMD, CLI_FAILED, "more than %d candidates", MAX_CANDIDATES);
        return NULL;
    }
    candidate *c = &f->cand[f->n_cand++];
    *c = *want;
    if ((*rc = evaluate(f, c))) return NULL;
    return c;
}

static candidate at(const fit_ctx *f, const int *idx, fit_mode mode) {
    candidate c = {.mode = mode};
    for (int i = 0; i < f->n_knobs; i++) c.idx[i] = idx ? idx[i] : -1;
    return c;
}

/* ---------------------------------------------------------------- the search */
/* The best fitting candidate so far (least estimated time, then least arena), or NULL. */
static const candidate *best(const fit_ctx *f) {
    const candidate *b = NULL;
    for (int i = 0; i < f->n_cand; i++) {
        const candidate *c = &f->cand[i];
        if (!c->compiled || !c->fits || c->math_key || c->mode == MODE_MIN) continue;
        if (!b || c->est_s < b->est_s || (c->est_s == b->est_s && c->arena < b->arena)) b = c;
    }
    return b;
}

/* The i-th combination of the values of every knob but `primary` (mixed radix), into idx. */
static void combination(const fit_ctx *f, int primary, int i, int *idx) {
    for (int k = f->n_knobs - 1; k >= 0; k--) {
        if (k == primary) continue;
        idx[k] = i % f->knob[k].n_values;
        i /= f->knob[k].n_values;
    }
}

/* Step 2 and 3 of the header. front[i]: the first fitting value index of the primary knob for
 * combination i, or -1 when none fits without recompute. */
static int search(fit_ctx *f) {
    int rc = 0, primary = 0, combos = 1;
    if (f->n_knobs == 0) { /* nothing to vary but remat */
        candidate want = at(f, NULL, MODE_REMAT);
        want.arena_budget = f->a->b.memory_budget - f->cand[0].workspace;
        return try_candidate(f, &want, &rc) ? CLI_OK : rc;
    }
    for (int k = 1; k < f->n_knobs; k++)
        if (f->knob[k].n_values > f->knob[primary].n_values) primary = k;
    for (int k = 0; k < f->n_knobs; k++)
        if (k != primary) combos *= f->knob[k].n_values;
    if (combos > MAX_COMBOS) combos = MAX_COMBOS;
    int front[MAX_COMBOS], last = f->knob[primary].n_values - 1, hi = last;
    candidate *c;
    for (int i = 0; i < combos; i++) {
        int idx[DFG_MAX_FIT_KNOBS];
        combination(f, primary, i, idx);
        idx[primary] = last;
        candidate want = at(f, idx, MODE_PROBE);
        if (!(c = try_candidate(f, &want, &rc))) return rc;
        front[i] = -1;
        if (!c->fits) continue;
        /* later combinations save more memory elsewhere: their frontier is at or below this one's */
        int lo = 0, top = hi;
        if (top < last) {
            idx[primary] = top;
            want = at(f, idx, MODE_PROBE);
            if (!(c = try_candidate(f, &want, &rc))) return rc;
            if (!c->fits) lo = top + 1, top = last; /* it is not: search above */
        }
        while (lo < top) {
            int mid = (lo + top) / 2;
            idx[primary] = mid;
            want = at(f, idx, MODE_PROBE);
            if (!(c = try_candidate(f, &want, &rc))) return rc;
            if (c->fits) top = mid;
            else lo = mid + 1;
        }
        front[i] = hi = top;
    }
    /* remat one step before each frontier, or at the last values where nothing fit: the
     * candidates whose time without recompute beats the best plan so far, the fastest first */
    candidate tries[MAX_COMBOS];
    int n_tries = 0;
    for (int i = 0; i < combos; i++) {
        int idx[DFG_MAX_FIT_KNOBS];
        combination(f, primary, i, idx);
        if (front[i] == 0) continue;
        idx[primary] = front[i] < 0 ? last : front[i] - 1;
        candidate probe = at(f, idx, MODE_PROBE);
        if (!(c = try_candidate(f, &probe, &rc))) return rc;
        const candidate *b = best(f);
        if (!c->compiled || (b && c->est_s >= b->est_s)) continue;
        /* remat recomputes activations: it cannot shrink the persistent tensors (weights, gradients,
         * optimizer state, a reference model), so with those alone over the budget a remat search,
         * minutes on a large model, cannot fit (Qwen3-8B at 78 GiB, docs/scale.md: 27 CPU-minutes
         * with three such searches, 8.8 without, the same answer) */
        if (c->persistent > f->a->b.memory_budget) continue;
        tries[n_tries] = at(f, idx, MODE_REMAT);
        tries[n_tries].arena_budget = f->a->b.memory_budget - c->workspace;
        tries[n_tries++].est_s = c->est_s;
    }
    for (int i = 1; i < n_tries; i++) /* insertion sort by the time without recompute */
        for (int j = i; j > 0 && tries[j].est_s < tries[j - 1].est_s; j--) {
            candidate t = tries[j];
            tries[j] = tries[j - 1], tries[j - 1] = t;
        }
    for (int i = 0; i < n_tries && i < MAX_REMAT_TRIES; i++) {
        const candidate *b = best(f);
        if (b && tries[i].est_s >= b->est_s) break;
        tries[i].est_s = 0;
        if (!try_candidate(f, &tries[i], &rc)) return rc;
    }
    return CLI_OK;
}

/* ---------------------------------------------------------------- what the user sees */
static void settings_str(const fit_ctx *f, const candidate *c, char *buf, size_t len) {
    char kv[DFG_MAX_FIT_KNOBS + 1][160];
    const char *ex[DFG_MAX_FIT_KNOBS + 1];
    int n = extra_sets(f, c, kv, ex);
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%s", i ? " " : "", ex[i]);
    if (!n) snprintf(buf, len, c->mode == MODE_GIVEN ? "as given" : "as given, under the budget");
}

static void print_table(const fit_ctx *f, const candidate *chosen) {
    const candidate *base = &f->cand[0];
    bool cuda = f->a->b.target == DFG_TARGET_CUDA;
    printf("  #  %-10s %s%-4s %-26s %-10s %-9s %-9s settings\n", "arena", cuda ? "+ workspace " : "", "fits",
           "recomputed (extra FLOPs)", "step ms", "FLOPs", "est. step");
    for (int i = 0; i < f->n_cand; i++) {
        const candidate *c = &f->cand[i];
        if (c->math_key) continue;
        char arena[32], rem[64], set[600], fl[32], est[32], ms[32];
        settings_str(f, c, set, sizeof(set));
        if (!c->compiled) {
            printf("%c%2d  %-10s %s%-4s %s; %s\n", c == chosen ? '*' : ' ', i + 1, "-", cuda ? "            " : "", "no", set,
                   c->note);
            continue;
        }
        char ws[32] = "";
        dfg_bytes_str((double)c->arena, arena, sizeof(arena));
        if (cuda) dfg_bytes_str((double)c->workspace, ws, sizeof(ws));
        if (c->mode == MODE_PROBE || c->mode == MODE_GIVEN) snprintf(rem, sizeof(rem), "-");
        else snprintf(rem, sizeof(rem), "%d nodes (+%.1f%%)", c->recomputed, base->flops > 0 ? 100.0 * c->extra_flops / base->flops : 0.0);
        double more = base->flops > 0 ? 100.0 * (c->flops + c->extra_flops - base->flops) / base->flops : 0.0;
        snprintf(fl, sizeof(fl), "%+.1f%%", fabs(more) < 0.05 ? 0.0 : more); /* no "-0.0%" */
        snprintf(est, sizeof(est), "x%.2f", base->est_s > 0 ? c->est_s / base->est_s : 1.0);
        snprintf(ms, sizeof(ms), "%.4g", c->est_s * 1e3);
        char plus[40] = "";
        if (cuda) snprintf(plus, sizeof(plus), "+ %-9s ", ws);
        printf("%c%2d  %-10s %s%-4s %-26s %-10s %-9s %-9s %s%s\n", c == chosen ? '*' : ' ', i + 1, arena, plus,
               c->mode == MODE_MIN ? "min" : f->a->min ? "-" : c->fits ? "yes" : "no", rem, ms, fl, est, set,
               c->mode == MODE_REMAT ? " + remat" : c->mode == MODE_MIN ? " + remat to the least" : "");
    }
    printf("(arena: the plan's, as dfg compile and dfg inspect print it; #1 is the plan dfg compile makes%s; FLOPs and est. "
           "step relative to #1; step ms: predicted on %s, %s, in the worst case the plan is sized for (dfg inspect "
           "--device), a prediction, not a measurement%s)\n", f->a->min ? "" : ", the others are compiled under the budget",
           f->a->device.name, f->a->device.label, cuda ? "; fits: the arena and the device workspace after it within the budget" : "");
}

/* The last value of every searched knob, and remat to the least: the smallest arena with the
 * math unchanged. */
static candidate *least(fit_ctx *f, int *rc) {
    int idx[DFG_MAX_FIT_KNOBS];
    for (int i = 0; i < f->n_knobs; i++) idx[i] = f->knob[i].n_values - 1;
    candidate want = at(f, idx, MODE_MIN);
    return try_candidate(f, &want, rc);
}

/* A knob that changes the math: its first value that fits (every searched knob at its last
 * value, no recompute), or -1. The program with that value declares its own knob values. */
static int64_t math_value_that_fits(fit_ctx *f, const fit_knob *m, int *rc) {
    for (int v = 0; v < m->n_values && !*rc; v++) {
        candidate probe = {.mode = MODE_PROBE, .math_key = m->setting, .math_value = m->values[v]};
        for (int i = 0; i < f->n_knobs; i++) probe.idx[i] = -1;
        dfg_program *p = NULL;
        if ((*rc = build(f, &probe, &p))) return -1;
        for (int i = 0; i < f->n_knobs; i++) { /* the last value this program allows */
            for (int k = 0; k < dfg_program_fit_knob_count(p); k++) {
                const dfg_fit_knob *d = dfg_program_fit_knob(p, k);
                if (strcmp(d->setting, f->knob[i].setting)) continue;
                for (int j = 0; j < f->knob[i].n_values; j++)
                    if (f->knob[i].values[j] == d->values[d->n_values - 1]) probe.idx[i] = j;
            }
        }
        dfg_program_free(p);
        candidate *c = try_candidate(f, &probe, rc);
        if (c && c->fits) return m->values[v];
    }
    return -1;
}

/* The math knobs that shrink the model's state itself (a pipeline declares them: examples/grpo/grpo.c
 * offers lora_r=16 to a fully trained policy, load_in_4bit to a LoRA one): each tried on its own,
 * and the first value that fits named. CLI_NO_FIT, or an error's exit code. */
static bool is_state_knob(const char *setting) { return !strcmp(setting, "lora_r") || !strcmp(setting, "load_in_4bit"); }

static int state_knobs_that_fit(fit_ctx *f) {
    int rc = 0;
    for (int i = 0; i < f->n_math && !rc; i++) {
        if (!is_state_knob(f->math[i].setting)) continue;
        int64_t v = math_value_that_fits(f, &f->math[i], &rc);
        if (v >= 0)
            fprintf(stderr, "dfg fit: with %s=%lld this would fit (%s; it changes what is trained: compile with --set "
                            "%s=%lld to choose it)\n", f->math[i].setting, (long long)v,
                    !strcmp(f->math[i].setting, "lora_r") ? "LoRA adapters on a frozen base instead of every weight"
                                                          : "the frozen base in 4-bit NF4",
                    f->math[i].setting, (long long)v);
    }
    return rc ? rc : CLI_NO_FIT;
}

/* What would shrink the model's state, of what this program has: the reference model (GRPO:
 * beta=0, no KL term) when there is one, and fewer parameters. Nothing else dfg has does:
 * micro-batches, rollout sub-batches, remat, the batch and the lengths change activations,
 * caches and rollout buffers, and torch_dtype keeps 16 bytes a parameter (bf16 weights and
 * gradients with f32 masters, or f32 weights and gradients; AdamW's two f32 moments: measured
 * on Qwen2.5-0.5B for cpu, and for cuda in both dtypes). */
static void print_shrinkers(const fit_ctx *f, const persistent_parts *s) {
    int64_t budget = f->a->b.memory_budget, state = cli_fit_model_state(s);
    char b[32], c[32], line[600] = "";
    size_t at = 0;
    if (s->ref > 0) {
        int64_t left = state - s->ref;
        at += (size_t)snprintf(line + at, sizeof(line) - at, "%s (drops the reference model's %s: the model's state would "
                                                              "be %s, %s the budget), or ",
                               f->has_beta ? "beta=0, no KL term" : "no reference model",
                               dfg_bytes_str((double)s->ref, b, sizeof(b)),
                               dfg_bytes_str((double)left, c, sizeof(c)), left > budget ? "still over" : "under");
    }
    if (s->n_params > 0 && at < sizeof(line)) {
        double per = (double)state / (double)s->n_params, most = (double)budget / per;
        snprintf(line + at, sizeof(line) - at, "a model with fewer parameters (%.3g %s here, %.1f bytes of state each: %s "
                                               "holds the state of %.3g %s at most, with nothing left for activations)",
                 (double)s->n_params / (s->n_params >= 1000000000 ? 1e9 : 1e6), s->n_params >= 1000000000 ? "B" : "M", per,
                 dfg_bytes_str((double)budget, c, sizeof(c)), most / (most >= 1e9 ? 1e9 : 1e6), most >= 1e9 ? "B" : "M");
    } else if (at < sizeof(line)) {
        snprintf(line + at, sizeof(line) - at, "a smaller model");
    }
    fprintf(stderr, "dfg fit: what would shrink it: %s\n", line);
}

/* The persistent tensors no setting shrinks are over the budget on their own: nothing can fit,
 * whatever the search would try, so fit says so after compiling the program as given alone. */
static int persistent_over(fit_ctx *f, const candidate *c) {
    char b[32], per[32], st[32], parts[400], knobs[2 * DFG_MAX_FIT_KNOBS * 130 + 1] = ""; /* every name fits */
    size_t at = 0;
    for (int i = 0; i < f->n_knobs; i++) at += (size_t)snprintf(knobs + at, sizeof(knobs) - at, "%s, ", f->knob[i].setting);
    for (int i = 0; i < f->n_math; i++)
        if (!is_state_knob(f->math[i].setting)) at += (size_t)snprintf(knobs + at, sizeof(knobs) - at, "%s, ", f->math[i].setting);
    print_table(f, NULL);
    fflush(stdout); /* the table, then the message */
    cli_fit_parts_str(&c->parts, parts, sizeof(parts));
    dfg_bytes_str((double)f->a->b.memory_budget, b, sizeof(b));
    dfg_bytes_str((double)c->parts.total, per, sizeof(per));
    dfg_bytes_str((double)cli_fit_model_state(&c->parts), st, sizeof(st));
    fprintf(stderr, "dfg fit: nothing fits %s: the persistent tensors alone are over the budget: %s live all step (%s)\n"
                    "dfg fit: the model's state, %s of them, is the same under every setting fit varies or names (%sremat), "
                    "so nothing was searched\n",
            b, per, parts, st, knobs);
    print_shrinkers(f, &c->parts);
    return state_knobs_that_fit(f);
}

static int nothing_fits(fit_ctx *f, candidate *c) {
    int rc = 0;
    char b[32], m[32], per[32], line[1024];
    if (!c->compiled) return cli_error(CMD, CLI_USAGE, "%s: nothing fits, and the least plan does not compile: %s",
                                       f->a->b.pipeline, c->note);
    size_t at = 0;
    line[0] = '\0';
    for (int i = 0; i < f->n_math && !rc; i++) {
        int64_t v = math_value_that_fits(f, &f->math[i], &rc);
        if (v >= 0) at += (size_t)snprintf(line + at, at < sizeof(line) ? sizeof(line) - at : 0, "%s%s=%lld", at ? ", " : "",
                                          f->math[i].setting, (long long)v);
    }
    if (rc) return rc;
    print_table(f, NULL);
    fflush(stdout); /* the table, then the message */
    dfg_bytes_str((double)f->a->b.memory_budget, b, sizeof(b));
    dfg_bytes_str((double)(c->arena + c->workspace), m, sizeof(m));
    dfg_bytes_str((double)c->persistent, per, sizeof(per));
    char set[600], ws[80] = "";
    settings_str(f, c, set, sizeof(set));
    if (c->workspace) {
        char w[32];
        snprintf(ws, sizeof(ws), ", the device workspace's %s included", dfg_bytes_str((double)c->workspace, w, sizeof(w)));
    }
    char parts[400];
    cli_fit_parts_str(&c->parts, parts, sizeof(parts));
    fprintf(stderr, "dfg fit: nothing fits %s: with the math unchanged this pipeline needs at least %s (%s, remat to the "
                    "least%s), of which %s are persistent, what lives all step (%s)\n",
            b, m, set, ws, per, parts);
    if (at) fprintf(stderr, "dfg fit: changing what is trained would fit (one at a time, the rest as given): %s\n", line);
    else if (c->persistent > f->a->b.memory_budget) {
        fprintf(stderr, "dfg fit: the persistent tensors alone are over the budget: no batch or length setting fits\n");
        print_shrinkers(f, &c->parts);
    } else fprintf(stderr, "dfg fit: none of the settings that change the math (halving the batch or the lengths) fits either\n");
    return CLI_NO_FIT;
}

/* ---------------------------------------------------------------- the command */
static bool user_set(const fit_args *a, const char *key) {
    size_t n = strlen(key);
    for (int i = 0; i < a->b.n_sets; i++)
        if (!strncmp(a->b.sets[i], key, n) && a->b.sets[i][n] == '=') return true;
    return false;
}

/* The knobs the program as given declares: searched ones (not held by --set) and hints. */
static int read_knobs(fit_ctx *f) {
    dfg_program *p = NULL;
    candidate given = {.mode = MODE_GIVEN};
    int rc = build(f, &given, &p);
    for (int k = 0; !rc && k < dfg_program_fit_knob_count(p); k++) {
        const dfg_fit_knob *d = dfg_program_fit_knob(p, k);
        if (d->keeps_math && user_set(f->a, d->setting)) continue;
        if (d->keeps_math) f->given_idx[f->n_knobs] = -1;
        fit_knob *dst = d->keeps_math ? &f->knob[f->n_knobs++] : &f->math[f->n_math++];
        snprintf(dst->setting, sizeof(dst->setting), "%s", d->setting);
        memcpy(dst->values, d->values, sizeof(d->values));
        dst->n_values = d->n_values;
        bool v = dfg_program_has(p, d->setting); /* a knob is an int setting, parsed when set */
        int64_t x = v ? dfg_program_int(p, d->setting) : 0;
        for (int j = 0; d->keeps_math && v && j < d->n_values; j++)
            if (d->values[j] == x) f->given_idx[f->n_knobs - 1] = j;
    }
    if (!rc) f->has_beta = dfg_program_has(p, "beta") && dfg_program_setting_used(p, "beta");
    dfg_program_free(p);
    return rc;
}

/* Writes the chosen candidate's plan, compiled as dfg run will. */
static int write_plan(fit_ctx *f, const candidate *c, const char *so, const char *out) {
    dfg_program *p = NULL;
    char buf[DFG_MAX_FIT_KNOBS + 1][160];
    const char *ex[DFG_MAX_FIT_KNOBS + 1];
    cli_pipeline pl = f->pl;
    pl.extra = ex;
    pl.n_extra = extra_sets(f, c, buf, ex);
    bool host = false;
    int rc = cli_pipeline_build(&pl, f->lib, f->fn, &p, &host);
    dfg_plan_info info = info_of(f, c);
    if (!rc) rc = cli_pipeline_save(&pl, p, host ? so : NULL, &info, out);
    dfg_program_free(p);
    return rc;
}

/* The chosen row recompiled as it will be written; should that plan no longer fit (it planned
 * otherwise than the search's compile), the next best is taken, recompiled the same way. */
static int confirm(fit_ctx *f, const candidate **chosen) {
    for (int n = 0; n < 8; n++) {
        candidate *c = &f->cand[*chosen - f->cand];
        int rc = recompile_as_written(f, c);
        if (rc) return rc;
        if (c->fits) return CLI_OK;
        const candidate *next = best(f);
        if (!next) break;
        *chosen = next;
    }
    return cli_error(CMD, CLI_FAILED, "%s: the plans chosen do not fit once written (their compile read back from the "
                     "plan file needs more than the search's); try a smaller budget's plan", f->a->b.pipeline);
}

static int fit(fit_ctx *f, const char *so, const char *out) {
    int rc = read_knobs(f);
    candidate *given = NULL;
    if (!rc) {
        candidate want = at(f, NULL, MODE_GIVEN); /* #1 is always the program as given, as dfg compile plans it */
        given = try_candidate(f, &want, &rc);
    }
    if (rc) return rc;
    if (!given->compiled) return cli_error(CMD, CLI_USAGE, "%s: %s", f->a->b.pipeline, given->note);
    const candidate *chosen = NULL;
    candidate *c;
    if (f->a->min) {
        if (!(chosen = least(f, &rc))) return rc;
    } else if (given->fits) {
        /* a roomy budget still compares: another micro-batching may be faster than the one given
         * (the search's bisection then stops at each knob's first value, and best() ranks) */
        if (f->n_knobs > 0 && (rc = search(f))) return rc;
    } else if (cli_fit_model_state(&given->parts) > f->a->b.memory_budget) {
        return persistent_over(f, given); /* no knob, math-changing ones included, shrinks these */
    } else {
        candidate want = at(f, f->given_idx, MODE_PROBE); /* the settings as given, the head's chunk for the budget */
        if (!(c = try_candidate(f, &want, &rc))) return rc;
        if (c->fits) chosen = c;
        else if ((rc = search(f))) return rc;
    }
    if (!chosen && !f->a->min) {
        if (!(chosen = best(f))) { /* the search's remat tries are few: the least may still fit */
            c = least(f, &rc);
            if (!c) return rc;
            if (!c->compiled || c->arena + c->workspace > f->a->b.memory_budget) return nothing_fits(f, c);
            chosen = c;
        }
    }
    if (!chosen->compiled) return cli_error(CMD, CLI_USAGE, "%s: %s", f->a->b.pipeline, chosen->note);
    if ((rc = confirm(f, &chosen))) return rc;
    print_table(f, chosen);
    char set[600];
    settings_str(f, chosen, set, sizeof(set));
    printf("chose #%d: %s%s\n", (int)(chosen - f->cand) + 1, set,
           chosen->mode == MODE_REMAT ? ", remat" : chosen->mode == MODE_MIN ? ", remat to the least" : "");
    return write_plan(f, chosen, so, out);
}

int cli_fit(int argc, char **argv) {
    fit_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? CLI_OK : rc;
    struct stat st;
    if (stat(a.b.pipeline, &st) != 0) return cli_error(CMD, CLI_USAGE, "cannot read %s: %s", a.b.pipeline, strerror(errno));
    if (!S_ISREG(st.st_mode)) return cli_error(CMD, CLI_USAGE, "%s is not a regular file", a.b.pipeline);
    char out[4096], dir[4096], so[4200];
    cli_build_output(&a.b, out, sizeof(out));
    fit_ctx *f = calloc(1, sizeof(*f));
    if (!f) return cli_error(CMD, CLI_FAILED, "out of memory");
    f->a = &a;
    f->pl = (cli_pipeline){.cmd = CMD, .pipeline = a.b.pipeline, .target_name = a.b.target_name, .sets = a.b.sets,
                           .n_sets = a.b.n_sets};
    if (!cli_make_tempdir(CMD, dir, sizeof(dir))) {
        free(f);
        return CLI_FAILED;
    }
    snprintf(so, sizeof(so), "%s/pipeline.so", dir);
    rc = cli_pipeline_compile_so(&f->pl, so);
    if (!rc) rc = cli_pipeline_load(&f->pl, so, &f->lib, &f->fn);
    if (!rc) rc = fit(f, so, out);
    if (f->lib) dlclose(f->lib);
    cli_remove_temp(dir, "pipeline.so");
    free(f);
    return rc;
}
