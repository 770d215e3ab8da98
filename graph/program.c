/* program.c - programs: the tensor table, persistent tensors, stages and the sticky error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

dfg_program *dfg_program_new(const char *name) {
    dfg_program *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->name = dfg_program_strdup(p, name ? name : "program");
    if (!p->name) {
        free(p);
        return NULL;
    }
    return p;
}

void dfg_program_free(dfg_program *p) {
    if (!p) return;
    HASH_CLEAR(hh, p->by_name);
    for (int i = 0; i < p->n_graphs; i++) free(p->graphs[i]->latest), free(p->graphs[i]->nodes);
    free(p->tensors);
    free(p->graphs);
    free(p->stages);
    free(p->settings);
    free(p->decl.dumps);
    dfg_arena_free_all(&p->arena);
    free(p);
}

const char *dfg_program_name(const dfg_program *p) { return p ? p->name : ""; }

dfg_status dfg_program_status(const dfg_program *p) {
    if (!p) return DFG_ERR_ARG;
    if (p->status) return p->status;
    for (int i = 0; i < p->n_graphs; i++)
        if (p->graphs[i]->status) return p->graphs[i]->status;
    return DFG_OK;
}

const char *dfg_program_error(const dfg_program *p) {
    if (!p) return "program is NULL";
    if (p->status) return p->error;
    for (int i = 0; i < p->n_graphs; i++)
        if (p->graphs[i]->status) return p->graphs[i]->error;
    return "";
}

dfg_status dfg_program_err(dfg_program *p, dfg_status s, const char *fmt, ...) {
    if (p->status) return p->status; /* the first error sticks */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof(p->error), fmt, ap);
    va_end(ap);
    p->status = s;
    return s;
}

char *dfg_program_strdup(dfg_program *p, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = dfg_arena_alloc(&p->arena, n);
    if (d) memcpy(d, s, n);
    return d;
}

bool dfg_is_persistent(const dfg_tensor *t) { return t->kind != DFG_TEMP; }

static bool grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *na = realloc(*arr, (size_t)nc * elem);
    if (!na) return false;
    memset((char *)na + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = na;
    *cap = nc;
    return true;
}

static bool shape_valid(dfg_shape s) {
    if (s.rank < 0 || s.rank > DFG_MAX_RANK) return false;
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++) {
        /* 1 Ti elements: no real tensor is larger; checked before multiplying, which could overflow */
        if (s.d[i] <= 0 || s.d[i] > ((int64_t)1 << 40) || n > ((int64_t)1 << 40) / s.d[i]) return false;
        n *= s.d[i];
    }
    return true;
}

dfg_tensor *dfg_tensor_new(dfg_program *p, dfg_kind kind, dfg_dtype dt, dfg_shape shape, const char *name) {
    if (!grow((void **)&p->tensors, &p->cap_tensors, p->n_tensors + 1, sizeof(*p->tensors))) {
        dfg_program_err(p, DFG_ERR_NOMEM, "out of memory growing the tensor table");
        return NULL;
    }
    dfg_tensor *t = dfg_arena_alloc(&p->arena, sizeof(*t));
    char *nm = t ? dfg_program_strdup(p, name) : NULL;
    if (!t || !nm) {
        dfg_program_err(p, DFG_ERR_NOMEM, "out of memory creating tensor '%s'", name);
        return NULL;
    }
    t->id = p->n_tensors;
    t->kind = kind;
    t->dtype = dt;
    t->shape = shape;
    t->name = nm;
    t->storage = t;
    p->tensors[p->n_tensors++] = t;
    return t;
}

dfg_tensor *dfg_find(const dfg_program *p, const char *name) {
    if (!p || !name) return NULL;
    dfg_tensor *t = NULL;
    HASH_FIND_STR(p->by_name, name, t);
    return t;
}

/* Adds t to the by-name index; names of persistent and output tensors are unique. */
static bool index_name(dfg_program *p, dfg_tensor *t) {
    if (dfg_find(p, t->name)) return false;
    HASH_ADD_KEYPTR(hh, p->by_name, t->name, strlen(t->name), t);
    return true;
}

/* Validates the arguments shared by every persistent-tensor constructor and creates it. */
/* After dfg_compile the program is sealed: its plan describes exactly these tensors and nodes. */
bool dfg_program_sealed(dfg_program *p, const char *what) {
    if (!p->plan) return false;
    dfg_program_err(p, DFG_ERR_STATE, "%s: program '%s' is compiled; build everything before dfg_compile", what,
                      p->name);
    return true;
}

static dfg_tensor *persistent_new(dfg_program *p, const char *what, const char *name, dfg_kind kind, dfg_dtype dt,
                                  dfg_shape shape) {
    if (!p) return NULL;
    if (p->status || dfg_program_sealed(p, what)) return NULL;
    char sb[96];
    if (!name || !*name) {
        dfg_program_err(p, DFG_ERR_ARG, "%s: a name is required", what);
        return NULL;
    }
    if ((unsigned)dt >= DFG_DTYPE_COUNT) {
        dfg_program_err(p, DFG_ERR_ARG, "%s '%s': unknown dtype %d", what, name, (int)dt);
        return NULL;
    }
    if (!shape_valid(shape)) {
        dfg_program_err(p, DFG_ERR_SHAPE, "%s '%s': invalid shape %s (rank <= %d, dims >= 1)", what, name,
                          dfg_shape_str(shape, sb, sizeof(sb)), DFG_MAX_RANK);
        return NULL;
    }
    if (dfg_find(p, name)) {
        dfg_program_err(p, DFG_ERR_ARG, "%s '%s': a tensor with this name already exists", what, name);
        return NULL;
    }
    dfg_tensor *t = dfg_tensor_new(p, kind, dt, shape, name);
    if (t) index_name(p, t);
    return t;
}

dfg_tensor *dfg_param(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_init init) {
    dfg_tensor *t = persistent_new(p, "param", name, DFG_PARAM, dt, shape);
    if (!t) return NULL;
    if ((unsigned)init.kind >= DFG_INIT_COUNT) {
        dfg_program_err(p, DFG_ERR_ARG, "param '%s': unknown init kind %d", name, (int)init.kind);
        return NULL;
    }
    t->role = DFG_ROLE_PARAM;
    t->init = init;
    return t;
}

dfg_tensor *dfg_state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_role role,
                      dfg_init init) {
    dfg_tensor *t = persistent_new(p, "state", name, DFG_STATE, dt, shape);
    if (!t) return NULL;
    if ((unsigned)role >= DFG_ROLE_COUNT || (unsigned)init.kind >= DFG_INIT_COUNT) {
        dfg_program_err(p, DFG_ERR_ARG, "state '%s': unknown role %d or init kind %d", name, (int)role,
                          (int)init.kind);
        return NULL;
    }
    t->role = role;
    t->init = init;
    return t;
}

dfg_tensor *dfg_const(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, const void *data) {
    if (p && !p->status && !data) {
        dfg_program_err(p, DFG_ERR_ARG, "const '%s': data is NULL", name ? name : "?");
        return NULL;
    }
    dfg_tensor *t = persistent_new(p, "const", name, DFG_CONST, dt, shape);
    if (!t) return NULL;
    size_t bytes = (size_t)dfg_shape_numel(shape) * dfg_dtype_size(dt);
    t->data = dfg_arena_alloc(&p->arena, bytes);
    if (!t->data) {
        dfg_program_err(p, DFG_ERR_NOMEM, "const '%s': out of memory for %zu bytes", name, bytes);
        return NULL;
    }
    memcpy(t->data, data, bytes);
    return t;
}

dfg_status dfg_set_scope(dfg_program *p, dfg_tensor *t, const char *first_stage, const char *last_stage) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "scope")) return p->status;
    if (!t || t->id < 0 || t->id >= p->n_tensors || p->tensors[t->id] != t || (t->kind != DFG_STATE && t->kind != DFG_INPUT))
        return dfg_program_err(p, DFG_ERR_ARG, "scope: needs a STATE or INPUT of program '%s'", p->name);
    if (!first_stage || !*first_stage || !last_stage || !*last_stage)
        return dfg_program_err(p, DFG_ERR_ARG, "scope of '%s': needs the first and last stage names", t->name);
    t->scope_first = dfg_program_strdup(p, first_stage);
    t->scope_last = dfg_program_strdup(p, last_stage);
    if (!t->scope_first || !t->scope_last) return dfg_program_err(p, DFG_ERR_NOMEM, "scope: out of memory");
    return DFG_OK;
}

static bool owned_persistent(const dfg_program *p, const dfg_tensor *t) {
    return t && t->id >= 0 && t->id < p->n_tensors && p->tensors[t->id] == t && (t->kind == DFG_PARAM || t->kind == DFG_STATE);
}

dfg_status dfg_init_from(dfg_program *p, dfg_tensor *dst, dfg_tensor *src) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "init_from")) return p->status;
    if (!owned_persistent(p, dst) || !owned_persistent(p, src) || dst == src)
        return dfg_program_err(p, DFG_ERR_ARG, "init_from: needs two different PARAM/STATE tensors of program '%s'",
                                 p->name);
    char a[96], b[96];
    if (!dfg_shape_equal(dst->shape, src->shape) || src->init_from)
        return dfg_program_err(p, DFG_ERR_ARG, "init_from: '%s' %s cannot start from '%s' %s (shapes differ, or the source is a copy itself)",
                                 dst->name, dfg_shape_str(dst->shape, a, sizeof(a)), src->name,
                                 dfg_shape_str(src->shape, b, sizeof(b)));
    dst->init_from = src;
    return DFG_OK;
}

dfg_status dfg_set_role(dfg_tensor *t, dfg_role role) {
    if (!t || t->kind == DFG_TEMP || (unsigned)role >= DFG_ROLE_COUNT) return DFG_ERR_ARG;
    t->role = role;
    return DFG_OK;
}

static dfg_stage *stage_new(dfg_program *p) {
    if (!grow((void **)&p->stages, &p->cap_stages, p->n_stages + 1, sizeof(*p->stages))) {
        dfg_program_err(p, DFG_ERR_NOMEM, "out of memory adding a stage");
        return NULL;
    }
    dfg_stage *s = &p->stages[p->n_stages++];
    *s = (dfg_stage){.first_step = 0, .last_step = -1, .loop_to = -1}; /* every step, every run, no loop */
    return s;
}

/* The stage named `name`, or NULL with the program's error set (`what` names the call). */
static dfg_stage *stage_named(dfg_program *p, const char *name, const char *what) {
    for (int i = 0; name && i < p->n_stages; i++)
        if (!strcmp(p->stages[i].name, name)) return &p->stages[i];
    dfg_program_err(p, DFG_ERR_ARG, "%s: no stage named '%s'", what, name ? name : "(null)");
    return NULL;
}

/* A scalar (one element) persistent STATE of dtype f32 or i32: what the runtime reads between runs. */
static bool scalar_state(const dfg_program *p, const dfg_tensor *t) {
    return t && t->id >= 0 && t->id < p->n_tensors && p->tensors[t->id] == t && t->kind == DFG_STATE &&
           dfg_shape_numel(t->shape) == 1 && (t->dtype == DFG_F32 || t->dtype == DFG_I32);
}

/* The stage a run rule (`what`: stage_until, _when, _runs) goes on, once `t` (its `role`: flag,
 * value, count) is checked; NULL with the program's error set. Until and runs repeat a graph. */
static dfg_stage *rule_stage(dfg_program *p, const char *stage, const dfg_tensor *t, const char *what,
                             const char *role, bool repeats) {
    if (p->status || dfg_program_sealed(p, what)) return NULL;
    dfg_stage *s = stage_named(p, stage, what);
    if (!s) return NULL;
    if (repeats && s->kind != DFG_STAGE_GRAPH) {
        dfg_program_err(p, DFG_ERR_ARG, "%s '%s': a host stage runs once a step", what, stage);
        return NULL;
    }
    if (!scalar_state(p, t)) {
        dfg_program_err(p, DFG_ERR_ARG, "%s '%s': the %s must be a scalar f32 or i32 STATE of this program", what, stage,
                        role);
        return NULL;
    }
    return s;
}

dfg_status dfg_stage_until(dfg_program *p, const char *stage, dfg_tensor *flag) {
    if (!p) return DFG_ERR_ARG;
    dfg_stage *s = rule_stage(p, stage, flag, "stage_until", "flag", true);
    if (s) s->until = flag;
    return p->status;
}

dfg_status dfg_stage_when(dfg_program *p, const char *stage, dfg_tensor *value, double lo, double hi) {
    if (!p) return DFG_ERR_ARG;
    dfg_stage *s = rule_stage(p, stage, value, "stage_when", "value", false);
    if (!s) return p->status;
    if (!(lo < hi) || isnan(lo) || isnan(hi))
        return dfg_program_err(p, DFG_ERR_ARG, "stage_when '%s': (%g, %g] is not a range", stage, lo, hi);
    s->when = value, s->when_lo = lo, s->when_hi = hi;
    return DFG_OK;
}

dfg_status dfg_stage_runs(dfg_program *p, const char *stage, dfg_tensor *count) {
    if (!p) return DFG_ERR_ARG;
    dfg_stage *s = rule_stage(p, stage, count, "stage_runs", "count", true);
    if (s) s->runs = count;
    return p->status;
}

dfg_status dfg_stage_loop(dfg_program *p, const char *first, const char *last, dfg_tensor *until, int max_loops) {
    if (!p) return DFG_ERR_ARG;
    dfg_stage *b = rule_stage(p, last, until, "stage_loop", "flag", false), *a = b ? stage_named(p, first, "stage_loop") : NULL;
    if (!a) return p->status;
    int ia = (int)(a - p->stages), ib = (int)(b - p->stages);
    if (ia > ib) return dfg_program_err(p, DFG_ERR_ARG, "stage_loop: '%s' comes after '%s'", first, last);
    if (max_loops < 1) return dfg_program_err(p, DFG_ERR_ARG, "stage_loop '%s'..'%s': max_loops must be >= 1, got %d",
                                              first, last, max_loops);
    for (int i = 0; i < p->n_stages; i++) /* loops neither nest nor overlap: each stage is in one at most */
        if (p->stages[i].loop_to >= 0 && p->stages[i].loop_to <= ib && i >= ia)
            return dfg_program_err(p, DFG_ERR_ARG, "stage_loop '%s'..'%s' overlaps the loop '%s'..'%s'", first, last,
                                   p->stages[p->stages[i].loop_to].name, p->stages[i].name);
    b->loop_to = ia, b->loop_until = until, b->loop_max = max_loops;
    return DFG_OK;
}

dfg_status dfg_stage_steps(dfg_program *p, const char *stage, int64_t first, int64_t last) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "stage_steps")) return p->status;
    if (first < 0 || (last >= 0 && last < first))
        return dfg_program_err(p, DFG_ERR_ARG, "stage_steps '%s': steps %lld..%lld are not a range", stage ? stage : "?",
                                 (long long)first, (long long)last);
    for (int i = 0; stage && i < p->n_stages; i++)
        if (!strcmp(p->stages[i].name, stage)) {
            p->stages[i].first_step = first, p->stages[i].last_step = last < 0 ? -1 : last;
            return DFG_OK;
        }
    return dfg_program_err(p, DFG_ERR_ARG, "stage_steps: no stage named '%s'", stage ? stage : "(null)");
}

dfg_status dfg_stage_graph(dfg_program *p, dfg_graph *g, int repeat) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "stage")) return p->status;
    if (!g || g->program != p)
        return dfg_program_err(p, DFG_ERR_ARG, "stage: the graph is NULL or belongs to another program");
    if (repeat < 1)
        return dfg_program_err(p, DFG_ERR_ARG, "stage '%s': repeat must be >= 1, got %d", g->name, repeat);
    dfg_stage *s = stage_new(p);
    if (!s) return p->status;
    s->kind = DFG_STAGE_GRAPH;
    s->name = g->name;
    s->graph = g;
    s->repeat = repeat;
    return DFG_OK;
}

dfg_status dfg_stage_host(dfg_program *p, const char *name, const char *symbol) {
    if (!p) return DFG_ERR_ARG;
    if (p->status || dfg_program_sealed(p, "stage")) return p->status;
    if (!name || !*name || !symbol || !*symbol)
        return dfg_program_err(p, DFG_ERR_ARG, "host stage: a stage name and a function symbol are required");
    dfg_stage *s = stage_new(p);
    if (!s) return p->status;
    s->kind = DFG_STAGE_HOST;
    s->name = dfg_program_strdup(p, name);
    s->symbol = dfg_program_strdup(p, symbol);
    s->repeat = 1;
    if (!s->name || !s->symbol) return dfg_program_err(p, DFG_ERR_NOMEM, "out of memory adding stage '%s'", name);
    return DFG_OK;
}

/* ---------------------------------------------------------------- graphs */
dfg_graph *dfg_graph_new(dfg_program *p, const char *name) {
    if (!p || p->status) return NULL;
    if (!grow((void **)&p->graphs, &p->cap_graphs, p->n_graphs + 1, sizeof(*p->graphs))) {
        dfg_program_err(p, DFG_ERR_NOMEM, "out of memory adding a graph");
        return NULL;
    }
    dfg_graph *g = dfg_arena_alloc(&p->arena, sizeof(*g));
    if (!g || !(g->name = dfg_program_strdup(p, name ? name : "graph"))) {
        dfg_program_err(p, DFG_ERR_NOMEM, "out of memory creating a graph");
        return NULL;
    }
    g->program = p;
    g->id = p->n_graphs;
    /* The poison tensor stands in for results after an error; it is never in the tensor table. */
    g->poison = dfg_arena_alloc(&p->arena, sizeof(*g->poison));
    if (!g->poison) {
        dfg_program_err(p, DFG_ERR_NOMEM, "out of memory creating a graph");
        return NULL;
    }
    g->poison->id = -1;
    g->poison->kind = DFG_TEMP;
    g->poison->name = "<poison>";
    g->poison->flags = DFG_TF_POISON;
    g->poison->graph = g;
    g->poison->storage = g->poison;
    p->graphs[p->n_graphs++] = g;
    return g;
}

dfg_status dfg_graph_status(const dfg_graph *g) { return g ? g->status : DFG_ERR_ARG; }
const char *dfg_graph_error(const dfg_graph *g) { return g ? g->error : "graph is NULL"; }
dfg_program *dfg_graph_program(const dfg_graph *g) { return g ? g->program : NULL; }

dfg_status dfg_graph_err(dfg_graph *g, dfg_status s, const char *fmt, ...) {
    if (g->status) return g->status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof(g->error), fmt, ap);
    va_end(ap);
    g->status = s;
    return s;
}

dfg_tensor *dfg_input(dfg_graph *g, const char *name, dfg_dtype dt, dfg_shape shape) {
    if (!g) return NULL;
    if (g->status) return g->poison;
    dfg_tensor *t = persistent_new(g->program, "input", name, DFG_INPUT, dt, shape);
    if (!t) {
        dfg_graph_err(g, g->program->status, "%s", g->program->error);
        return g->poison;
    }
    return t;
}

dfg_tensor *dfg_output(dfg_graph *g, dfg_tensor *t, const char *name) {
    if (!g) return t;
    if (g->status) return g->poison;
    if (!t || (t->flags & DFG_TF_POISON) || t->kind != DFG_TEMP || t->graph != g || !name || !*name) {
        dfg_graph_err(g, DFG_ERR_ARG, "output '%s': needs a tensor computed by graph '%s' and a name",
                        name ? name : "?", g->name);
        return g->poison;
    }
    if (t->flags & DFG_TF_OUTPUT) {
        dfg_graph_err(g, DFG_ERR_ARG, "output '%s': tensor is already the output '%s'", name, t->name);
        return g->poison;
    }
    char *nm = dfg_program_strdup(g->program, name);
    if (!nm) {
        dfg_graph_err(g, DFG_ERR_NOMEM, "out of memory");
        return g->poison;
    }
    if (dfg_find(g->program, name)) {
        dfg_graph_err(g, DFG_ERR_ARG, "output '%s': a tensor with this name already exists", name);
        return g->poison;
    }
    t->name = nm;
    if (t->producer && t->producer_slot == 0) t->producer->name = nm;
    index_name(g->program, t);
    t->flags |= DFG_TF_OUTPUT;
    return t;
}

dfg_tensor *dfg_name(dfg_tensor *t, const char *name) {
    if (!t || (t->flags & DFG_TF_POISON) || !name || t->kind != DFG_TEMP || (t->flags & DFG_TF_OUTPUT)) return t;
    dfg_program *p = t->graph->program;
    char *nm = dfg_program_strdup(p, name);
    if (!nm) return t;
    t->name = nm;
    if (t->producer && t->producer_slot == 0) t->producer->name = nm;
    return t;
}

const char *dfg_tensor_name(const dfg_tensor *t) { return t ? t->name : ""; }
dfg_shape dfg_tensor_shape(const dfg_tensor *t) { return t ? t->shape : DFG_SCALAR; }
dfg_dtype dfg_tensor_dtype(const dfg_tensor *t) { return t ? t->dtype : DFG_F32; }
dfg_kind dfg_tensor_kind(const dfg_tensor *t) { return t ? t->kind : DFG_TEMP; }
int64_t dfg_tensor_numel(const dfg_tensor *t) { return t ? dfg_shape_numel(t->shape) : 0; }
size_t dfg_tensor_bytes(const dfg_tensor *t) { return t ? (size_t)dfg_tensor_numel(t) * dfg_dtype_size(t->dtype) : 0; }

char *dfg_tensor_desc(const dfg_tensor *t, char *buf, size_t len) {
    char sb[96];
    if (!t) {
        snprintf(buf, len, "NULL");
        return buf;
    }
    snprintf(buf, len, "'%s' %s %s", t->name, dfg_dtype_name(t->dtype), dfg_shape_str(t->shape, sb, sizeof(sb)));
    return buf;
}

/* Grows g->latest to hold tensor id `id`. */
bool dfg_graph_latest_reserve(dfg_graph *g, int id) {
    return grow((void **)&g->latest, &g->cap_latest, id + 1, sizeof(*g->latest));
}
