/* manager.c - the pass pipeline: runs each pass in order, verify between passes when asked,
 * and seals the program with its plan. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan.h"

typedef struct {
    const char *name;
    dfg_status (*run)(dfg_program *p, const dfg_options *o);
} pass_entry;

/* The order is the design's: verify -> dce -> (fuse -> remat) -> schedule -> plan_memory ->
 * (capture_plan) -> verify plan. */
static const pass_entry pipeline[] = {
    {"verify", dfg_pass_verify},
    {"dce", dfg_pass_dce},
    {"fuse", dfg_pass_fuse},
    {"remat", dfg_pass_remat},
    {"schedule", dfg_pass_schedule},
    {"plan_memory", dfg_pass_plan_memory},
    {"verify_plan", dfg_pass_verify_plan},
};

const char *dfg_target_name(dfg_target t) {
    static const char *const names[DFG_TARGET_COUNT] = {[DFG_TARGET_CPU] = "cpu", [DFG_TARGET_CUDA] = "cuda"};
    return (unsigned)t < DFG_TARGET_COUNT ? names[t] : "?";
}

dfg_options dfg_options_default(dfg_target target) {
    dfg_options o = {.target = target};
#ifndef NDEBUG
    o.verify_each = true;
#endif
    const char *env = getenv("DFG_VERIFY");
    if (env && *env && strcmp(env, "0")) o.verify_each = true;
    return o;
}

double dfg_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dfg_plan_time(dfg_plan *plan, const char *name, double seconds) {
    dfg_pass_times *t = &plan->report.times;
    int i = 0;
    while (i < t->n && strcmp(t->t[i].name, name)) i++;
    if (i == DFG_PASS_TIMES_MAX) return; /* a full table drops new names: timings are for reading */
    if (i == t->n) t->t[t->n++] = (dfg_pass_time){name, 0.0, 0};
    t->t[i].seconds += seconds;
    t->t[i].calls++;
}

void *dfg_plan_alloc(dfg_plan *plan, size_t bytes) { return dfg_arena_alloc(plan->arena, bytes ? bytes : 1); }

dfg_status dfg_compile(dfg_program *p, const dfg_options *opt) {
    if (!p) return DFG_ERR_ARG;
    if (p->status) return p->status;
    if (p->plan) return dfg_program_err(p, DFG_ERR_STATE, "compile: program '%s' is already compiled", p->name);
    dfg_status st = dfg_program_status(p);
    if (st) return st; /* a graph's error: dfg_program_error names it */
    dfg_options o = opt ? *opt : dfg_options_default(DFG_TARGET_CPU);
    if ((unsigned)o.target >= DFG_TARGET_COUNT)
        return dfg_program_err(p, DFG_ERR_ARG, "compile: unknown target %d", (int)o.target);
    if (!o.align) o.align = o.target == DFG_TARGET_CUDA ? 256 : 64;
    if (o.align & (o.align - 1)) return dfg_program_err(p, DFG_ERR_ARG, "compile: alignment %zu is not a power of two", o.align);
    dfg_plan *plan = dfg_arena_alloc(&p->arena, sizeof(*plan));
    if (!plan) return dfg_program_err(p, DFG_ERR_NOMEM, "compile: out of memory");
    plan->opt = o;
    plan->arena = &p->arena;
    p->plan = plan; /* from here on the program is sealed */
    for (size_t i = 0; i < sizeof(pipeline) / sizeof(pipeline[0]); i++) {
        double t0 = dfg_seconds();
        st = pipeline[i].run(p, &o);
        double t1 = dfg_seconds();
        dfg_plan_time(plan, pipeline[i].name, t1 - t0);
        if (st) return st;
        if (o.verify_each && pipeline[i].run != dfg_pass_verify) {
            st = dfg_pass_verify(p, &o);
            dfg_plan_time(plan, "verify (after each pass)", dfg_seconds() - t1);
            if (st) return st;
        }
    }
    if (o.remat_replay && plan->remat.ran) { /* a replay's result is the plan it gave */
        plan->remat.arena_bytes = (int64_t)plan->report.arena_bytes;
        plan->remat.persistent_bytes = (int64_t)plan->report.persistent_bytes;
        memcpy(plan->remat.peak, plan->report.peak, sizeof(plan->remat.peak));
    }
    if (!o.memory_min && !o.no_remat && o.memory_budget > 0 && (int64_t)plan->report.arena_bytes > o.memory_budget)
        return dfg_program_err(p, DFG_ERR_ARG, "compile: the plan needs %zu bytes, over the memory budget of %lld",
                                 plan->report.arena_bytes, (long long)o.memory_budget);
    return DFG_OK;
}

bool dfg_is_compiled(const dfg_program *p) { return p && p->plan && !p->status; }

const dfg_report *dfg_program_report(const dfg_program *p) {
    return dfg_is_compiled(p) ? &p->plan->report : NULL;
}

const dfg_remat_result *dfg_program_remat(const dfg_program *p) { return p && p->plan ? &p->plan->remat : NULL; }

const char *dfg_category_name(dfg_category c) {
    static const char *const names[DFG_CAT_COUNT] = {
        [DFG_CAT_PARAMS] = "params",         [DFG_CAT_BASE_MODEL] = "base_model",         [DFG_CAT_GRADS] = "grads",   [DFG_CAT_OPTIMIZER] = "optimizer",
        [DFG_CAT_REF_MODEL] = "ref_model",   [DFG_CAT_KV_CACHE] = "kv_cache", [DFG_CAT_ACTIVATIONS] = "activations",
        [DFG_CAT_LOGITS] = "logits",         [DFG_CAT_WORKSPACE] = "workspace", [DFG_CAT_OTHER] = "other"};
    return (unsigned)c < DFG_CAT_COUNT ? names[c] : "?";
}

int dfg_graph_stage_index(const dfg_program *p, const dfg_graph *g) {
    for (int s = 0; s < p->n_stages; s++)
        if (p->stages[s].kind == DFG_STAGE_GRAPH && p->stages[s].graph == g) return s;
    return -1;
}

dfg_status dfg_consumers_build(const dfg_program *p, const dfg_graph *g, dfg_consumers *c) {
    int nt = p->n_tensors;
    c->start = calloc((size_t)nt + 1, sizeof(*c->start));
    int total = 0;
    for (int i = 0; i < g->n_nodes; i++) total += g->nodes[i]->n_in;
    c->node = malloc(sizeof(*c->node) * (size_t)(total ? total : 1));
    int *fill = calloc((size_t)nt + 1, sizeof(*fill));
    if (!c->start || !c->node || !fill) {
        free(fill);
        dfg_consumers_free(c);
        return DFG_ERR_NOMEM;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) c->start[g->nodes[i]->in[j]->id + 1]++;
    for (int t = 0; t < nt; t++) c->start[t + 1] += c->start[t];
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            int t = g->nodes[i]->in[j]->id;
            c->node[c->start[t] + fill[t]++] = g->nodes[i];
        }
    free(fill);
    return DFG_OK;
}

void dfg_consumers_free(dfg_consumers *c) {
    free(c->start);
    free(c->node);
    c->start = NULL;
    c->node = NULL;
}

bool dfg_parse_bytes(const char *text, int64_t *bytes) {
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"", 1}, {"b", 1}, {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3}, {"m", 1048576.0}, {"mib", 1048576.0},
                 {"mb", 1e6}, {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9}, {"t", 1099511627776.0},
                 {"tib", 1099511627776.0}, {"tb", 1e12}};
    if (!text || !bytes) return false;
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || !(v > 0) || !isfinite(v)) return false;
    while (*end == ' ') end++;
    char unit[8] = "";
    size_t k = 0;
    for (; end[k] && k < sizeof(unit) - 1; k++) unit[k] = (char)tolower((unsigned char)end[k]);
    if (end[k]) return false;
    unit[k] = '\0';
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++)
        if (!strcmp(unit, units[u].suffix)) {
            double b = v * units[u].scale;
            if (b >= 9.0e18 || b < 1.0) return false;
            *bytes = (int64_t)b;
            return true;
        }
    return false;
}
