/* runtime.c - the executor: creates the arena from a memory plan, resolves host stages, and
 * walks the stages of a step, node by node, through the backend. */
#include <dlfcn.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../passes/plan.h"
#include "dist.h"
#include "module.h"
#include "runtime_internal.h"


dfg_run_options dfg_run_options_default(void) {
    return (dfg_run_options){.target = DFG_TARGET_CPU, .n_threads = 0, .seed = 1234, .host_lib = NULL, .check = false};
}

dfg_status dfg_runtime_fail(dfg_runtime *rt, dfg_status s, bool sticky, const char *fmt, ...) {
    if (!rt) return s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->error, sizeof(rt->error), fmt, ap);
    va_end(ap);
    if (sticky) rt->status = s;
    return s;
}

const char *dfg_runtime_error(const dfg_runtime *rt) { return rt ? rt->error : "runtime is NULL"; }
const dfg_program *dfg_runtime_program(const dfg_runtime *rt) { return rt ? rt->p : NULL; }
int64_t dfg_runtime_steps_done(const dfg_runtime *rt) { return rt ? rt->step : 0; }
int dfg_runtime_threads(const dfg_runtime *rt) { return rt ? rt->opt.n_threads : 0; }

size_t dfg_runtime_arena_bytes(const dfg_runtime *rt) { return rt ? rt->plan.arena_bytes : 0; }

/* The last graph stage that writes metric m (a node whose output is a version of it); -1 when
 * none does. */
static int metric_writer(const dfg_program *p, const dfg_tensor *m) {
    int writer = -1;
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_graph *g = p->stages[s].kind == DFG_STAGE_GRAPH ? p->stages[s].graph : NULL;
        for (int i = 0; g && i < g->n_nodes; i++)
            for (int o = 0; o < g->nodes[i]->n_out; o++)
                if (g->nodes[i]->out[o]->version_of == m) writer = s;
    }
    return writer;
}

/* Whether a stage writes a PARAM or an optimizer state (a node whose output is a version of one). */
static bool stage_updates(const dfg_stage *st) {
    const dfg_graph *g = st->kind == DFG_STAGE_GRAPH ? st->graph : NULL;
    for (int i = 0; g && i < g->n_nodes; i++)
        for (int o = 0; o < g->nodes[i]->n_out; o++) {
            const dfg_tensor *w = g->nodes[i]->out[o]->version_of;
            if (w && (w->kind == DFG_PARAM || w->role == DFG_ROLE_OPTIM)) return true;
        }
    return false;
}

/* Sizes the per-node pointer arrays and lists the metrics. */
static dfg_status scan_program(dfg_runtime *rt) {
    const dfg_program *p = rt->p;
    int max_in = 1, max_out = 1;
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
            const dfg_node *n = p->graphs[gi]->nodes[i];
            max_in = n->n_in > max_in ? n->n_in : max_in;
            max_out = n->n_out > max_out ? n->n_out : max_out;
        }
    rt->in_ptrs = calloc((size_t)max_in, sizeof(void *));
    rt->out_ptrs = calloc((size_t)max_out, sizeof(void *));
    rt->metrics = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), sizeof(*rt->metrics));
    if (!rt->in_ptrs || !rt->out_ptrs || !rt->metrics) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "out of memory");
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->role == DFG_ROLE_METRIC && p->tensors[i]->kind == DFG_STATE)
            rt->metrics[rt->n_metrics++] = p->tensors[i];
    rt->metric_stage = malloc(sizeof(int) * (size_t)(rt->n_metrics ? rt->n_metrics : 1));
    rt->stage_runs = calloc((size_t)(p->n_stages ? p->n_stages : 1), sizeof(int));
    rt->stage_updates = calloc((size_t)(p->n_stages ? p->n_stages : 1), sizeof(bool));
    rt->stage_ms = calloc((size_t)(p->n_stages ? p->n_stages : 1), sizeof(double));
    if (!rt->metric_stage || !rt->stage_runs || !rt->stage_updates || !rt->stage_ms)
        return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "out of memory");
    for (int m = 0; m < rt->n_metrics; m++) rt->metric_stage[m] = metric_writer(p, rt->metrics[m]);
    for (int s = 0; s < p->n_stages; s++) rt->stage_updates[s] = stage_updates(&p->stages[s]);
    return DFG_OK;
}

static dfg_status resolve_host_stages(dfg_runtime *rt) {
    const dfg_program *p = rt->p;
    rt->host = calloc((size_t)(p->n_stages ? p->n_stages : 1), sizeof(*rt->host));
    rt->skip = calloc((size_t)(p->n_stages ? p->n_stages : 1), sizeof(*rt->skip));
    if (!rt->host || !rt->skip) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "out of memory");
    for (int s = 0; s < p->n_stages; s++) {
        if (p->stages[s].kind != DFG_STAGE_HOST) continue;
        void *sym = dlsym(rt->opt.host_lib ? rt->opt.host_lib : RTLD_DEFAULT, p->stages[s].symbol);
        if (!sym)
            return dfg_rt_fail(rt, DFG_ERR_ARG, true, "host stage '%s': function '%s' not found (is it exported by the pipeline?)",
                               p->stages[s].name, p->stages[s].symbol);
        *(void **)&rt->host[s] = sym;
    }
    return DFG_OK;
}

/* The pipeline's host state (dfg_host_state): its init runs once, here, on the runtime's
 * program, and reads the settings its host stages need, typed and validated. */
static dfg_status start_host_state(dfg_runtime *rt, dfg_program *p) {
    const dfg_declarations *d = &p->decl;
    if (!d->host_init) return DFG_OK;
    void *lib = rt->opt.host_lib ? rt->opt.host_lib : RTLD_DEFAULT;
    dfg_status (*init)(dfg_program *, void **);
    *(void **)&init = dlsym(lib, d->host_init);
    if (!init)
        return dfg_rt_fail(rt, DFG_ERR_ARG, true, "host state: function '%s' not found (is it exported by the pipeline?)",
                           d->host_init);
    if (d->host_release) {
        *(void **)&rt->host_release = dlsym(lib, d->host_release);
        if (!rt->host_release)
            return dfg_rt_fail(rt, DFG_ERR_ARG, true, "host state: function '%s' not found (is it exported by the pipeline?)",
                               d->host_release);
    }
    dfg_status st = init(p, &rt->host_user);
    if (st || dfg_program_status(p))
        return dfg_rt_fail(rt, st ? st : dfg_program_status(p), true, "host state '%s' failed: %s", d->host_init,
                           dfg_program_status(p) ? dfg_program_error(p) : dfg_status_name(st));
    return DFG_OK;
}

/* The runtime's copy of the plan's offsets (the plan itself lives in the program's arena). */
static dfg_status adopt_plan(dfg_runtime *rt, dfg_program *p) {
    if (!p->plan) {
        dfg_options co = dfg_options_default(rt->opt.target);
        if (dfg_compile(p, &co)) return dfg_rt_fail(rt, DFG_ERR_STATE, true, "compile: %s", dfg_program_error(p));
    }
    if (!dfg_is_compiled(p)) return dfg_rt_fail(rt, DFG_ERR_STATE, true, "program has an error: %s", dfg_program_error(p));
    const dfg_memplan *m = &p->plan->mem;
    if (p->plan->opt.target != rt->opt.target)
        return dfg_rt_fail(rt, DFG_ERR_ARG, true, "program '%s' was compiled for %s; this runtime runs %s", p->name,
                           dfg_target_name(p->plan->opt.target), dfg_target_name(rt->opt.target));
    rt->plan = *m;
    rt->plan.offset = malloc(sizeof(int64_t) * (size_t)(m->n_tensors ? m->n_tensors : 1));
    if (!rt->plan.offset) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "out of memory");
    memcpy(rt->plan.offset, m->offset, sizeof(int64_t) * (size_t)m->n_tensors);
    return DFG_OK;
}

/* cpu plans run on the CPU backend, built in; cuda plans on a GPU, or with emulate_gpu on the
 * emulated device through the same CUDA backend: modules opened now, so that a cpu run maps no
 * CUDA library (module.h). */
static dfg_status choose_backend(dfg_runtime *rt) {
    if (rt->opt.target == DFG_TARGET_CPU && rt->opt.emulate_gpu)
        return dfg_rt_fail(rt, DFG_ERR_ARG, true, "the GPU emulator runs plans compiled for cuda; this one is for cpu");
    char err[1200];
    /* a module that is missing, or whose libraries are not here, is said in err; a missing GPU
     * is said by the backend's create */
    if (!dfg_backend_for(rt->opt.target, rt->opt.emulate_gpu, &rt->be, NULL, err, sizeof(err))) return DFG_OK;
    if (rt->opt.emulate_gpu)
        return dfg_rt_fail(rt, DFG_ERR_UNSUPPORTED, true, "no GPU emulator: %s (it needs the CUDA headers at build time)",
                           err);
    return dfg_rt_fail(rt, DFG_ERR_UNSUPPORTED, true, "cannot run a cuda plan on a GPU: %s (the CUDA runtime, cuBLASLt, "
                       "cuDNN and NCCL it links come with the CUDA toolkit); --emulate-gpu runs it on the CPU through "
                       "the CUDA backend's own code", err);
}

dfg_status dfg_runtime_device_workspace(const dfg_program *p, bool emulated, dfg_device_workspace *w) {
    if (!p || !w || !p->plan || p->plan->opt.target != DFG_TARGET_CUDA) return DFG_ERR_ARG;
    const dfg_backend *be = NULL;
    char err[1200];
    if (dfg_backend_for(DFG_TARGET_CUDA, emulated, &be, NULL, err, sizeof(err)))
        return DFG_ERR_UNSUPPORTED; /* no such device in this build, or its libraries are not on this machine */
    return be->workspace_of(p, w);
}

/* A plan built for W ranks runs in a run of W processes, and only there. */
static dfg_status check_world(dfg_runtime *rt) {
    int world = rt->p->plan->report.world > 0 ? rt->p->plan->report.world : 1, size = dfg_dist_size(rt->opt.dist);
    if (world == size) return DFG_OK;
    if (world == 1)
        return dfg_rt_fail(rt, DFG_ERR_ARG, true, "this plan has no collectives (it was compiled for one process), but "
                           "this is rank %d of %d: every rank would train on the same batch (compile it with --set "
                           "world_size=%d, or run it without mpirun)", dfg_dist_rank(rt->opt.dist), size, size);
    return dfg_rt_fail(rt, DFG_ERR_ARG, true, "this plan was compiled for %d ranks (world_size), but %s: run it with "
                       "mpirun -n %d, or compile it again with --set world_size=%d", world,
                       size == 1 ? "this process was not started by mpirun" : "the run has another number of processes",
                       world, size);
}

dfg_status dfg_runtime_create(dfg_program *p, const dfg_run_options *opt, dfg_runtime **out) {
    if (!out) return DFG_ERR_ARG;
    *out = NULL;
    dfg_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt) return DFG_ERR_NOMEM;
    *out = rt;
    rt->p = p;
    rt->opt = opt ? *opt : dfg_run_options_default();
    if (!p) return dfg_rt_fail(rt, DFG_ERR_ARG, true, "program is NULL");
    if (dfg_program_status(p)) return dfg_rt_fail(rt, DFG_ERR_STATE, true, "program has an error: %s", dfg_program_error(p));
    if ((unsigned)rt->opt.target >= DFG_TARGET_COUNT) return dfg_rt_fail(rt, DFG_ERR_ARG, true, "unknown target");
    dfg_status st = choose_backend(rt);
    if (!st) st = adopt_plan(rt, p);
    if (!st) st = check_world(rt);
    if (st) return st;
    if (rt->opt.n_threads <= 0) rt->opt.n_threads = omp_get_max_threads(); /* what "all cores" means here */
    st = rt->be->create(p, &rt->opt, &rt->be_state, rt->error, sizeof(rt->error));
    if (st) return rt->status = st;
    /* a graph per stage, and a second for a stage that ends early (its last, shorter chunk) */
    rt->captured = calloc((size_t)(p->n_stages ? 2 * p->n_stages : 1), sizeof(*rt->captured));
    if (!rt->captured) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "out of memory");
    if ((st = scan_program(rt)) || (st = resolve_host_stages(rt)) || (st = start_host_state(rt, p)) ||
        (st = dfg_rt_staging_create(rt)))
        return st;
    rt->arena = rt->be->alloc(rt->be_state, rt->plan.arena_bytes);
    if (!rt->arena)
        return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "cannot allocate the %zu-byte arena", rt->plan.arena_bytes);
    if ((st = dfg_runtime_init_state(rt))) return st;
    return dfg_check_wanted(&rt->opt) ? dfg_check_create(rt) : DFG_OK;
}

void dfg_runtime_free(dfg_runtime *rt) {
    if (!rt) return;
    if (rt->host_release && rt->host_user) rt->host_release(rt->host_user);
    if (rt->be && rt->be_state) dfg_rt_staging_free(rt);
    free(rt->captured);
    if (rt->arena) rt->be->free(rt->be_state, rt->arena);
    if (rt->be && rt->be_state) rt->be->destroy(rt->be_state);
    dfg_memplan_free(&rt->plan);
    dfg_check_free(rt->check);
    free(rt->in_ptrs);
    free(rt->out_ptrs);
    free(rt->host);
    free(rt->skip);
    free(rt->metrics);
    free(rt->metric_stage);
    free(rt->stage_runs);
    free(rt->stage_updates);
    free(rt->stage_ms);
    free(rt);
}

/* ---------------------------------------------------------------- tensor access */
const dfg_tensor *dfg_rt_lookup(dfg_runtime *rt, const char *name) {
    const dfg_tensor *t = dfg_find(rt->p, name ? name : "");
    if (!t) dfg_rt_fail(rt, DFG_ERR_ARG, false, "no tensor named '%s'", name ? name : "(null)");
    return t;
}

dfg_status dfg_runtime_buffer(dfg_runtime *rt, const char *name, dfg_buffer *out) {
    if (!rt || !out) return DFG_ERR_ARG;
    const dfg_tensor *t = dfg_rt_lookup(rt, name);
    if (!t) return DFG_ERR_ARG;
    void *data = dfg_rt_ptr(rt, t);
    if (!rt->be->host_memory) { /* device memory: host stages see a staged copy */
        dfg_status st = dfg_rt_staging_buffer(rt, t, &data);
        if (st) return st;
    }
    *out = (dfg_buffer){data, t->dtype, t->shape, dfg_tensor_bytes(t), t->name};
    return DFG_OK;
}

static dfg_status check_size(dfg_runtime *rt, const dfg_tensor *t, size_t bytes) {
    if (bytes != dfg_tensor_bytes(t))
        return dfg_rt_fail(rt, DFG_ERR_ARG, false, "'%s' holds %zu bytes, not %zu", t->name, dfg_tensor_bytes(t), bytes);
    return DFG_OK;
}

dfg_status dfg_runtime_write(dfg_runtime *rt, const char *name, const void *data, size_t bytes) {
    if (!rt || !data) return DFG_ERR_ARG;
    const dfg_tensor *t = dfg_rt_lookup(rt, name);
    if (!t) return DFG_ERR_ARG;
    if (check_size(rt, t, bytes)) return DFG_ERR_ARG;
    return rt->be->upload(rt->be_state, dfg_rt_ptr(rt, t), data, bytes);
}

dfg_status dfg_runtime_read(dfg_runtime *rt, const char *name, void *data, size_t bytes) {
    if (!rt || !data) return DFG_ERR_ARG;
    const dfg_tensor *t = dfg_rt_lookup(rt, name);
    if (!t) return DFG_ERR_ARG;
    if (check_size(rt, t, bytes)) return DFG_ERR_ARG;
    return rt->be->download(rt->be_state, data, dfg_rt_ptr(rt, t), bytes);
}

const char *dfg_runtime_backend(const dfg_runtime *rt) { return rt && rt->be ? rt->be->name : "?"; }
const char *dfg_runtime_device(const dfg_runtime *rt) {
    if (!rt || !rt->be) return "?";
    return rt->be->describe && rt->be_state ? rt->be->describe(rt->be_state) : "the CPU";
}

double dfg_runtime_host_ms(const dfg_runtime *rt) {
    if (!rt || !rt->be || rt->be->host_memory) return -1.0;
    return rt->last_step_ms - rt->last_wait_ms;
}

size_t dfg_runtime_device_bytes(const dfg_runtime *rt) {
    return rt && rt->be && rt->be->device_bytes && rt->be_state ? rt->be->device_bytes(rt->be_state) : 0;
}
size_t dfg_runtime_workspace_bytes(const dfg_runtime *rt) {
    return rt && rt->be && rt->be->workspace_bytes && rt->be_state ? rt->be->workspace_bytes(rt->be_state) : 0;
}

int dfg_runtime_metric_count(const dfg_runtime *rt) { return rt ? rt->n_metrics : 0; }

const char *dfg_runtime_metric_name(const dfg_runtime *rt, int i) {
    if (!rt || i < 0 || i >= rt->n_metrics) return NULL;
    return rt->metrics[i]->name + strlen("metric.");
}

bool dfg_runtime_metric_updated(const dfg_runtime *rt, int i) {
    if (!rt || i < 0 || i >= rt->n_metrics || rt->step == 0) return false;
    return rt->metric_stage[i] < 0 || rt->stage_runs[rt->metric_stage[i]] > 0;
}

bool dfg_runtime_metric_nullable(const dfg_runtime *rt, int i) {
    return rt && i >= 0 && i < rt->n_metrics && (rt->metrics[i]->flags & DFG_TF_NULLABLE);
}

float dfg_runtime_metric_value(dfg_runtime *rt, int i) {
    float v = 0.0f;
    if (!rt || i < 0 || i >= rt->n_metrics) return v;
    rt->be->download(rt->be_state, &v, dfg_rt_ptr(rt, rt->metrics[i]), sizeof(v));
    return v;
}

/* ---------------------------------------------------------------- host-stage context */
dfg_status dfg_host_buffer(dfg_host_ctx *ctx, const char *name, dfg_buffer *out) {
    return ctx ? dfg_runtime_buffer(ctx->rt, name, out) : DFG_ERR_ARG;
}
void *dfg_host_service(dfg_host_ctx *ctx, const char *name) {
    if (!ctx || !name) return NULL;
    for (int i = 0; i < ctx->rt->opt.n_services; i++)
        if (ctx->rt->opt.services[i].name && !strcmp(ctx->rt->opt.services[i].name, name)) return ctx->rt->opt.services[i].ptr;
    return NULL;
}
bool dfg_runtime_params_intact(const dfg_runtime *rt) { return rt && !rt->updated; }
int dfg_runtime_stage_count(const dfg_runtime *rt) { return rt ? rt->p->n_stages : 0; }

const char *dfg_runtime_stage_name(const dfg_runtime *rt, int i) {
    return rt && i >= 0 && i < rt->p->n_stages ? rt->p->stages[i].name : NULL;
}

int dfg_runtime_stage_runs(const dfg_runtime *rt, int i) {
    return rt && i >= 0 && i < rt->p->n_stages ? rt->stage_runs[i] : 0;
}

double dfg_runtime_stage_ms(const dfg_runtime *rt, const char *name) {
    for (int s = 0; rt && name && s < rt->p->n_stages; s++)
        if (!strcmp(rt->p->stages[s].name, name)) return rt->stage_ms[s];
    return -1.0;
}
int64_t dfg_host_step(const dfg_host_ctx *ctx) { return ctx ? ctx->rt->step : 0; }
int dfg_host_rank(const dfg_host_ctx *ctx) { return ctx ? dfg_dist_rank(ctx->rt->opt.dist) : 0; }
int dfg_host_world_size(const dfg_host_ctx *ctx) { return ctx ? dfg_dist_size(ctx->rt->opt.dist) : 1; }
uint64_t dfg_host_seed(const dfg_host_ctx *ctx) { return ctx ? ctx->rt->opt.seed : 0; }
void *dfg_host_user(const dfg_host_ctx *ctx) { return ctx ? ctx->rt->host_user : NULL; }
const dfg_program *dfg_host_program(const dfg_host_ctx *ctx) { return ctx ? ctx->rt->p : NULL; }

dfg_status dfg_host_fail(dfg_host_ctx *ctx, const char *fmt, ...) {
    if (!ctx) return DFG_ERR_ARG;
    dfg_runtime *rt = ctx->rt;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return dfg_rt_fail(rt, DFG_ERR_RUNTIME, true, "step %lld, host stage '%s': %s", (long long)rt->step + 1,
                       rt->p->stages[ctx->stage].name, msg);
}

dfg_status dfg_runtime_skip_stage(dfg_runtime *rt, const char *name, bool skip) {
    if (!rt) return DFG_ERR_ARG;
    for (int s = 0; name && s < rt->p->n_stages; s++)
        if (!strcmp(rt->p->stages[s].name, name)) {
            rt->skip[s] = skip;
            return DFG_OK;
        }
    return dfg_rt_fail(rt, DFG_ERR_ARG, false, "no stage named '%s'", name ? name : "(null)");
}

dfg_status dfg_runtime_set_steps_done(dfg_runtime *rt, int64_t steps) {
    if (!rt || steps < 0) return DFG_ERR_ARG;
    rt->step = steps;
    return DFG_OK;
}
