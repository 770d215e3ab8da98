/* planfile_build.c - rebuilds a program from a plan file's records (planfile_read.c) through the
 * public construction calls, so that the shape rules, name rules and write-order rules of the
 * DSL check the file exactly as they checked the pipeline that wrote it.
 *
 * Tensor ids are replayed in order: a persistent tensor is made by its constructor, and a
 * temporary is the first output of the next node of its graph, which dfg_node_add creates with
 * its outputs on the following ids. Any difference between what the construction gives and what
 * the file says (ids, dtypes, shapes, names) refuses the file. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/op.h"
#include "planfile_internal.h"


typedef struct {
    dfg_plan_reader *r;
    dfg_program *p;
    dfg_graph **graphs;
    uint32_t *next_node;         /* [graph] index of the next node to add */
    dfg_plan_node_rec **first_of; /* [tensor id] the node whose first output has this id */
    dfg_tensor **in;             /* scratch: one node's inputs */
} builder;

/* ---------------------------------------------------------------- helpers */
static void *bcalloc(builder *b, size_t n, size_t elem) {
    void *a = calloc(n ? n : 1, elem);
    if (!a) dfg_reader_err(b->r, DFG_ERR_NOMEM, "out of memory");
    return a;
}

/* After a construction call: turns the program's sticky error into the reader's. */
static bool construction_ok(builder *b, const char *what) {
    if (b->r->status) return false;
    if (!dfg_program_status(b->p)) return true;
    dfg_reader_err(b->r, DFG_ERR_FORMAT, "invalid plan: %s: %s", what, dfg_program_error(b->p));
    return false;
}

static void build_settings(builder *b) {
    dfg_plan_reader *r = b->r;
    for (uint32_t i = 0; i < r->n_settings && !r->status; i++) {
        const dfg_plan_setting_rec *s = &r->settings[i];
        if (dfg_program_setting(b->p, s->key)) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: setting '%s' appears twice", s->key);
            return;
        }
        dfg_program_set(b->p, s->key, s->value);
        if (!construction_ok(b, "settings")) return;
        b->p->settings[b->p->n_settings - 1].used = s->used;
    }
}

static void build_graphs(builder *b) {
    dfg_plan_reader *r = b->r;
    b->graphs = bcalloc(b, r->n_graphs, sizeof(*b->graphs));
    b->next_node = bcalloc(b, r->n_graphs, sizeof(*b->next_node));
    b->first_of = bcalloc(b, r->n_tensors, sizeof(*b->first_of));
    for (uint32_t gi = 0; gi < r->n_graphs && !r->status; gi++) {
        b->graphs[gi] = dfg_graph_new(b->p, r->graphs[gi].name);
        if (!construction_ok(b, "graphs")) return;
        for (uint32_t i = 0; i < r->graphs[gi].n_nodes; i++) {
            dfg_plan_node_rec *n = &r->graphs[gi].nodes[i];
            if (n->n_out < 1 || n->first_out >= r->n_tensors || n->n_out > r->n_tensors - n->first_out) {
                dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: node %u of graph '%s' has %u outputs from tensor %u (of %u)",
                               i, r->graphs[gi].name, n->n_out, n->first_out, r->n_tensors);
                return;
            }
            if (b->first_of[n->first_out]) {
                dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: two nodes produce tensor %u", n->first_out);
                return;
            }
            b->first_of[n->first_out] = n;
        }
    }
}

/* ---------------------------------------------------------------- tensors */
static dfg_tensor *make_persistent(builder *b, const dfg_plan_tensor_rec *t) {
    dfg_dtype dt = (dfg_dtype)t->dtype;
    switch ((dfg_kind)t->kind) {
    case DFG_PARAM: return dfg_param(b->p, t->name, dt, t->shape, t->init);
    case DFG_STATE: return dfg_state(b->p, t->name, dt, t->shape, (dfg_role)t->role, t->init);
    case DFG_CONST: return dfg_const(b->p, t->name, dt, t->shape, t->data);
    case DFG_INPUT: {
        /* the IR does not keep which graph declared an input (any graph may read it) */
        if (b->r->n_graphs == 0) return NULL;
        dfg_tensor *x = dfg_input(b->graphs[0], t->name, dt, t->shape);
        return x && !(x->flags & DFG_TF_POISON) ? x : NULL;
    }
    default: return NULL;
    }
}

static void build_persistent(builder *b, uint32_t id) {
    const dfg_plan_tensor_rec *t = &b->r->tensors[id];
    char what[64];
    snprintf(what, sizeof(what), "tensor %u", id);
    dfg_tensor *x = make_persistent(b, t);
    if (!construction_ok(b, what)) return;
    if (!x) {
        dfg_reader_err(b->r, DFG_ERR_FORMAT, "invalid plan: %s '%s' (%s) cannot be created", what, t->name,
                       dfg_kind_name((dfg_kind)t->kind));
        return;
    }
    if (x->role != (dfg_role)t->role) dfg_set_role(x, (dfg_role)t->role);
    if (t->flags & DFG_PLAN_TF_NULLABLE) x->flags |= DFG_TF_NULLABLE; /* dfg_metric_nullable */
    if (t->scope_first) {
        dfg_set_scope(b->p, x, t->scope_first, t->scope_last);
        if (!construction_ok(b, what)) return;
    }
    if ((uint32_t)x->id != id)
        dfg_reader_err(b->r, DFG_ERR_FORMAT, "invalid plan: tensor '%s' was rebuilt as id %d, the file says %u", t->name,
                       x->id, id);
}

/* Names the outputs of a rebuilt node as the file does (dfg_output or dfg_name) and restores
 * the gradient tag, which dfg_backward set and replaying single nodes cannot. */
static void name_outputs(builder *b, dfg_graph *g, dfg_node *n) {
    for (int k = 0; k < n->n_out && !b->r->status; k++) {
        dfg_tensor *t = n->out[k];
        const dfg_plan_tensor_rec *rec = &b->r->tensors[t->id];
        if (rec->flags & DFG_PLAN_TF_GRAD) t->flags |= DFG_TF_GRAD;
        if (rec->flags & DFG_PLAN_TF_OUTPUT) {
            dfg_output(g, t, rec->name);
            if (g->status)
                dfg_reader_err(b->r, DFG_ERR_FORMAT, "invalid plan: output '%s': %s", rec->name, dfg_graph_error(g));
        } else if (strcmp(t->name, rec->name)) {
            dfg_name(t, rec->name);
        }
    }
}

/* Checks that node n, just rebuilt from record nr at tensor id `id`, matches the file. */
static void check_node(builder *b, const dfg_plan_node_rec *nr, const dfg_node *n, uint32_t id, const char *where) {
    dfg_plan_reader *r = b->r;
    for (uint32_t j = 0; j < nr->n_in; j++)
        if ((uint32_t)n->in[j]->id != nr->in[j]) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s: input #%u resolves to tensor %d, the file says %u", where,
                           j, n->in[j]->id, nr->in[j]);
            return;
        }
    for (int k = 0; k < n->n_out; k++) {
        const dfg_tensor *t = n->out[k];
        const dfg_plan_tensor_rec *rec = t->id >= 0 && (uint32_t)t->id < r->n_tensors ? &r->tensors[t->id] : NULL;
        char s1[96], s2[96];
        if ((uint32_t)t->id != id + (uint32_t)k || !rec || rec->kind != DFG_TEMP) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s: output #%d became tensor %d, the file says %u", where, k,
                           t->id, id + (uint32_t)k);
            return;
        }
        if (t->dtype != (dfg_dtype)rec->dtype || !dfg_shape_equal(t->shape, rec->shape)) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s: output #%d is %s %s, the file says %s %s", where, k,
                           dfg_dtype_name(t->dtype), dfg_shape_str(t->shape, s1, sizeof(s1)),
                           dfg_dtype_name((dfg_dtype)rec->dtype), dfg_shape_str(rec->shape, s2, sizeof(s2)));
            return;
        }
    }
}

/* Adds the node whose first output is tensor `id`; returns how many ids it used (0: error). */
static uint32_t build_node(builder *b, uint32_t id) {
    dfg_plan_reader *r = b->r;
    dfg_plan_node_rec *nr = b->first_of[id];
    if (!nr) {
        dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: temporary tensor %u '%s' is produced by no node", id,
                       r->tensors[id].name);
        return 0;
    }
    const dfg_plan_graph_rec *gr = &r->graphs[nr->graph];
    dfg_graph *g = b->graphs[nr->graph];
    char where[160];
    snprintf(where, sizeof(where), "graph '%.60s', node %u", gr->name, nr->index);
    if (b->next_node[nr->graph] != nr->index) {
        dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s comes before node %u of its graph", where,
                       b->next_node[nr->graph]);
        return 0;
    }
    if (nr->op >= DFG_OP_COUNT || strcmp(nr->op_name, dfg_op_name((dfg_op)nr->op))) {
        dfg_reader_err(r, DFG_ERR_FORMAT, "%s is op %u '%s', which this dfg does not have (it has '%s'); recompile the pipeline",
                       where, nr->op, nr->op_name, dfg_op_name((dfg_op)nr->op));
        return 0;
    }
    /* the shape rules check the attributes against the inputs; decoding checks what they would
     * trip over first (flags that are not 0 or 1, enums and dims out of range) */
    dfg_attrs attr;
    char why[160];
    if (!dfg_attrs_decode(dfg_op_attrs(nr->op), nr->attr, nr->attr_len, &attr, why, sizeof(why))) {
        dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s (%s): attributes: %s", where, nr->op_name, why);
        return 0;
    }
    for (uint32_t j = 0; j < nr->n_in; j++) {
        if (nr->in[j] >= id) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s reads tensor %u, which does not exist yet", where, nr->in[j]);
            return 0;
        }
        b->in[j] = b->p->tensors[nr->in[j]];
    }
    dfg_node *n = dfg_node_add(g, (dfg_op)nr->op, b->in, (int)nr->n_in, &attr, (int)nr->n_out);
    if (!n) {
        dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s: %s", where,
                       g->status ? dfg_graph_error(g) : dfg_program_error(b->p));
        return 0;
    }
    b->next_node[nr->graph]++;
    if (nr->flags & DFG_PLAN_NF_BACKWARD) n->flags |= DFG_NF_BACKWARD;
    if (nr->grad_of > nr->index) {
        dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s differentiates node %u, which is not before it", where,
                       nr->grad_of - 1);
        return 0;
    }
    if (nr->grad_of) n->grad_of = g->nodes[nr->grad_of - 1];
    check_node(b, nr, n, id, where);
    name_outputs(b, g, n);
    if (!r->status && strcmp(n->name, nr->name))
        dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: %s is named '%s' after rebuilding, the file says '%s'", where,
                       n->name, nr->name);
    return r->status ? 0 : nr->n_out;
}

/* Every tensor as the file describes it, after all names were applied. */
static void verify_tensors(builder *b) {
    dfg_plan_reader *r = b->r;
    for (uint32_t i = 0; i < r->n_tensors && !r->status; i++) {
        const dfg_tensor *t = b->p->tensors[i];
        const dfg_plan_tensor_rec *rec = &r->tensors[i];
        if (t->kind != (dfg_kind)rec->kind || t->dtype != (dfg_dtype)rec->dtype || t->role != (dfg_role)rec->role ||
            !dfg_shape_equal(t->shape, rec->shape) || strcmp(t->name, rec->name) ||
            ((t->flags & DFG_TF_OUTPUT) != 0) != ((rec->flags & DFG_PLAN_TF_OUTPUT) != 0) ||
            ((t->flags & DFG_TF_NULLABLE) != 0) != ((rec->flags & DFG_PLAN_TF_NULLABLE) != 0))
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: tensor %u was rebuilt as '%s' (%s), the file says '%s' (%s)", i,
                           t->name, dfg_kind_name(t->kind), rec->name, dfg_kind_name((dfg_kind)rec->kind));
    }
}

/* The links dfg_backward and dfg_init_from made between tensors, once every tensor exists: a
 * gradient has the shape and dtype of what it is the gradient of (as autodiff checks), and
 * dfg_init_from checks its own pair. */
static void link_tensors(builder *b) {
    dfg_plan_reader *r = b->r;
    for (uint32_t i = 0; i < r->n_tensors && !r->status; i++) {
        const dfg_plan_tensor_rec *rec = &r->tensors[i];
        dfg_tensor *t = b->p->tensors[i];
        if (rec->grad_wrt) {
            dfg_tensor *x = rec->grad_wrt <= r->n_tensors ? b->p->tensors[rec->grad_wrt - 1] : NULL;
            if (!x || x == t || x->dtype != t->dtype || !dfg_shape_equal(x->shape, t->shape)) {
                dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: tensor %u '%s' is the gradient of tensor %u, which does "
                               "not match it", i, t->name, rec->grad_wrt - 1);
                return;
            }
            t->grad_wrt = x;
        }
        if (rec->init_from) {
            if (rec->init_from > r->n_tensors) {
                dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: tensor %u '%s' starts as a copy of tensor %u (of %u)", i,
                               t->name, rec->init_from - 1, r->n_tensors);
                return;
            }
            dfg_init_from(b->p, t, b->p->tensors[rec->init_from - 1]);
            construction_ok(b, "init_from");
        }
    }
}

static void build_tensors_and_nodes(builder *b) {
    dfg_plan_reader *r = b->r;
    uint32_t max_in = 1;
    for (uint32_t gi = 0; gi < r->n_graphs; gi++)
        for (uint32_t i = 0; i < r->graphs[gi].n_nodes; i++)
            if (r->graphs[gi].nodes[i].n_in > max_in) max_in = r->graphs[gi].nodes[i].n_in;
    b->in = bcalloc(b, max_in, sizeof(*b->in));
    for (uint32_t id = 0; id < r->n_tensors && !r->status;) {
        const dfg_plan_tensor_rec *t = &r->tensors[id];
        if (t->kind == DFG_TEMP) {
            id += build_node(b, id);
            continue;
        }
        if ((t->flags & ~(unsigned)DFG_PLAN_TF_NULLABLE) ||
            ((t->flags & DFG_PLAN_TF_NULLABLE) && (t->kind != DFG_STATE || t->role != DFG_ROLE_METRIC))) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: persistent tensor %u '%s' is flagged as an output, a "
                           "gradient or a nullable metric", id, t->name);
            return;
        }
        build_persistent(b, id++);
    }
    for (uint32_t gi = 0; gi < r->n_graphs && !r->status; gi++)
        if (b->next_node[gi] != r->graphs[gi].n_nodes)
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: graph '%s' lists %u nodes, but only %u produce tensors",
                           r->graphs[gi].name, r->graphs[gi].n_nodes, b->next_node[gi]);
    verify_tensors(b);
    link_tensors(b);
}

/* A declaration's tensor ref: a tensor of the rebuilt program, or NULL (with the reader's error
 * set) for a ref out of range; 0 is no tensor. */
static dfg_tensor *decl_tensor(builder *b, uint32_t ref, const char *what) {
    if (ref == 0) return NULL;
    if (ref > (uint32_t)b->p->n_tensors) {
        dfg_reader_err(b->r, DFG_ERR_FORMAT, "invalid plan: %s names tensor %u of %d", what, ref - 1, b->p->n_tensors);
        return NULL;
    }
    return b->p->tensors[ref - 1];
}

static void build_stages(builder *b) {
    dfg_plan_reader *r = b->r;
    for (uint32_t i = 0; i < r->n_stages && !r->status; i++) {
        const dfg_plan_stage_rec *s = &r->stages[i];
        if (s->kind == 1) {
            dfg_stage_host(b->p, s->name, s->symbol);
        } else if (s->graph >= r->n_graphs || s->repeat < 1 || s->repeat > (uint32_t)INT32_MAX ||
                   strcmp(s->name, r->graphs[s->graph].name)) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: stage %u '%s' names graph %u (of %u) with repeat %u", i,
                           s->name, s->graph, r->n_graphs, s->repeat);
            return;
        } else {
            dfg_stage_graph(b->p, b->graphs[s->graph], (int)s->repeat);
        }
        if (s->first_step != 0 || s->last_step != -1) dfg_stage_steps(b->p, s->name, s->first_step, s->last_step);
        if (s->until && !r->status) dfg_stage_until(b->p, s->name, decl_tensor(b, s->until, "a stage's end flag"));
        if (s->when && !r->status)
            dfg_stage_when(b->p, s->name, decl_tensor(b, s->when, "a stage's condition"), s->when_lo, s->when_hi);
        if (s->runs && !r->status) dfg_stage_runs(b->p, s->name, decl_tensor(b, s->runs, "a stage's run count"));
        construction_ok(b, "stages");
    }
    for (uint32_t i = 0; i < r->n_stages && !r->status; i++) { /* loops name earlier stages: all of them exist now */
        const dfg_plan_stage_rec *s = &r->stages[i];
        if (!s->loop_to) continue;
        if (s->loop_to > i + 1 || s->loop_max < 1 || s->loop_max > (uint32_t)INT32_MAX) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "invalid plan: stage %u '%s' loops back to stage %u with %u returns", i,
                           s->name, s->loop_to - 1, s->loop_max);
            return;
        }
        dfg_stage_loop(b->p, r->stages[s->loop_to - 1].name, s->name, decl_tensor(b, s->loop_until, "a loop's end flag"),
                       (int)s->loop_max);
        construction_ok(b, "stages");
    }
}

/* The pipeline's declarations, made again through dfg_host_state and dfg_declare_*: they check
 * the file's values as they checked the pipeline's. */
static void build_declarations(builder *b) {
    const dfg_plan_decl_rec *d = &b->r->decl;
    dfg_program *p = b->p;
    if (d->host_init[0]) dfg_host_state(p, d->host_init, d->host_release[0] ? d->host_release : NULL);
    if (d->n_stages || d->n_tensors) {
        dfg_tensor **ts = bcalloc(b, d->n_tensors, sizeof(*ts));
        for (uint32_t i = 0; ts && i < d->n_tensors && !b->r->status; i++)
            ts[i] = decl_tensor(b, d->tensors[i], "a rollout tensor");
        if (ts && !b->r->status) dfg_declare_rollout(p, d->stages, (int)d->n_stages, ts, (int)d->n_tensors);
        free(ts);
    }
    dfg_tensor *shared = decl_tensor(b, d->shared, "the shared-prompt rule");
    if (shared && !b->r->status) dfg_declare_shared_prompts(p, shared, d->shared_len, d->shared_group);
    for (uint32_t i = 0; i < d->n_dumps && !b->r->status; i++) {
        dfg_tensor *t = decl_tensor(b, d->dumps[i], "a dump entry");
        if (!b->r->status) dfg_declare_dump(p, d->dump_names[i], t);
    }
    if (d->rollouts_only && d->rollouts_only[0] && !b->r->status) dfg_declare_rollouts_only(p, d->rollouts_only);
    if (d->batch_invariant && !b->r->status) dfg_declare_batch_invariant(p);
    dfg_tensor *prompt = decl_tensor(b, d->prompt_tokens, "the rollout prompt's tokens");
    if (prompt && !b->r->status) dfg_declare_rollout_prompt(p, prompt, d->prompt_len);
    construction_ok(b, "declarations");
}

dfg_program *dfg_plan_build(dfg_plan_reader *r) {
    builder b = {.r = r, .p = dfg_program_new(r->name)};
    if (!b.p) {
        dfg_reader_err(r, DFG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    build_settings(&b);
    if (!r->status) build_graphs(&b);
    if (!r->status) build_tensors_and_nodes(&b);
    if (!r->status) build_stages(&b);
    if (!r->status) build_declarations(&b);
    if (!r->status) construction_ok(&b, "program");
    free(b.graphs);
    free(b.next_node);
    free(b.first_of);
    free(b.in);
    if (r->status) {
        dfg_program_free(b.p);
        return NULL;
    }
    return b.p;
}
