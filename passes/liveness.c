/* liveness.c - the timeline, every tensor's lifetime, and the buffers that get bytes.
 *
 * Steps: one per scheduled node, one per host stage, stage after stage (a repeated stage's body
 * once: each run reuses the same bytes). A TEMP lives from its producer to its last reader; a
 * dfg_output lives to the end of the step (the host reads it afterwards). Persistent tensors
 * live for the whole timeline, or from the start of their scope's first stage to the end of its
 * last. Views and versions share their storage's buffer and stretch its lifetime. An output
 * takes the buffer of an input that dies at its node when the op allows it (ops/inplace.c). */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static int stage_by_name(const dfg_program *p, const char *name) {
    for (int s = 0; s < p->n_stages; s++)
        if (!strcmp(p->stages[s].name, name)) return s;
    return -1;
}

static void extend(dfg_span *s, int step) {
    if (s->first < 0 || step < s->first) s->first = step;
    if (step > s->last) s->last = step;
}

static dfg_status build_timeline(dfg_program *p, dfg_plan *plan) {
    plan->stage_step = dfg_plan_alloc(plan, sizeof(int) * (size_t)(p->n_stages + 1));
    plan->graph_stage = dfg_plan_alloc(plan, sizeof(int) * (size_t)(p->n_graphs + 1));
    if (!plan->stage_step || !plan->graph_stage) return DFG_ERR_NOMEM;
    for (int gi = 0; gi < p->n_graphs; gi++) plan->graph_stage[gi] = -1;
    int step = 0;
    for (int s = 0; s < p->n_stages; s++) {
        plan->stage_step[s] = step;
        const dfg_stage *st = &p->stages[s];
        int len = 1;
        if (st->kind == DFG_STAGE_GRAPH) {
            plan->graph_stage[st->graph->id] = s;
            len = st->graph->n_nodes > 0 ? st->graph->n_nodes : 1;
        }
        step += len;
    }
    plan->stage_step[p->n_stages] = step;
    plan->n_steps = step > 0 ? step : 1;
    return DFG_OK;
}

/* Lifetimes of the tensors themselves (not yet of their buffers). */
static void tensor_lifetimes(dfg_program *p, dfg_plan *plan) {
    int end = plan->n_steps - 1;
    for (int i = 0; i < p->n_tensors; i++) plan->life[i] = (dfg_span){-1, -1};
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->kind == DFG_TEMP) continue;
        if (t->scope_first) {
            int a = stage_by_name(p, t->scope_first), b = stage_by_name(p, t->scope_last);
            plan->life[i] = (dfg_span){plan->stage_step[a], plan->stage_step[b + 1] - 1};
        } else plan->life[i] = (dfg_span){0, end};
    }
    for (int gi = 0; gi < p->n_graphs; gi++) {
        const dfg_graph *g = p->graphs[gi];
        int s = plan->graph_stage[gi];
        if (s < 0) continue;
        for (int n = 0; n < g->n_nodes; n++) {
            const dfg_node *node = g->nodes[n];
            int step = plan->stage_step[s] + n;
            for (int k = 0; k < node->n_out; k++) {
                const dfg_tensor *o = node->out[k];
                extend(&plan->life[o->id], step);
                if (o->flags & DFG_TF_OUTPUT) extend(&plan->life[o->id], end);
            }
            for (int j = 0; j < node->n_in; j++) extend(&plan->life[node->in[j]->id], step);
        }
    }
}

/* What the bytes of buffer owner t are for, in the memory report's terms. */
static dfg_category category_of(const dfg_tensor *t, const bool *logits) {
    if (t->kind != DFG_TEMP) {
        switch (t->role) {
        case DFG_ROLE_PARAM: return DFG_CAT_PARAMS;
        case DFG_ROLE_GRAD: return DFG_CAT_GRADS;
        case DFG_ROLE_OPTIM: return DFG_CAT_OPTIMIZER;
        case DFG_ROLE_REF_MODEL: return DFG_CAT_REF_MODEL;
        case DFG_ROLE_BASE_MODEL: return DFG_CAT_BASE_MODEL;
        case DFG_ROLE_KV_CACHE: return DFG_CAT_KV_CACHE;
        default: return t->kind == DFG_PARAM ? DFG_CAT_PARAMS : DFG_CAT_OTHER;
        }
    }
    if (t->flags & DFG_TF_GRAD) return DFG_CAT_GRADS;
    if (t->flags & DFG_TF_WORKSPACE) return DFG_CAT_WORKSPACE;
    return logits[t->id] ? DFG_CAT_LOGITS : DFG_CAT_ACTIVATIONS;
}

/* The embedding tables a program reads (a handful), found once: each trans_b matmul asks. */
typedef struct {
    const bool *table; /* [tensor id] */
    const dfg_tensor **list;
    int n;
} tables;

/* Is t a vocabulary-sized head: an embedding table itself (tied), or a PARAM of a table's shape
 * (an untied lm_head, (V, C) as the embedding)? */
static bool is_head(const tables *tb, const dfg_tensor *t) {
    if (tb->table[t->storage->id]) return true;
    if (t->storage->kind != DFG_PARAM || t->shape.rank != 2) return false;
    for (int i = 0; i < tb->n; i++)
        if (dfg_shape_equal(tb->list[i]->shape, t->shape)) return true;
    return false;
}

/* Logits-like tensors: the lm_head's output (a matmul against an embedding table, or against a
 * parameter of its shape: an untied head), the scatter to the vocabulary in take's backward, and
 * whatever keeps their shape through pointwise, softmax and cast ops. */
static dfg_status mark_logits(const dfg_program *p, bool *logits, bool *table) {
    tables tb = {table, NULL, 0};
    int cap = 0;
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int n = 0; n < p->graphs[gi]->n_nodes; n++) {
            const dfg_node *node = p->graphs[gi]->nodes[n];
            if (dfg_ops[node->op].mem != DFG_MEM_TABLE || table[node->in[0]->storage->id]) continue;
            const dfg_tensor *t = node->in[0]->storage;
            table[t->id] = true;
            if (tb.n == cap) {
                cap = cap ? 2 * cap : 4;
                const dfg_tensor **grown = realloc(tb.list, sizeof(*grown) * (size_t)cap);
                if (!grown) {
                    free(tb.list);
                    return DFG_ERR_NOMEM;
                }
                tb.list = grown;
            }
            tb.list[tb.n++] = t;
        }
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int n = 0; n < p->graphs[gi]->n_nodes; n++) {
            const dfg_node *node = p->graphs[gi]->nodes[n];
            const dfg_tensor *o = node->out[0];
            bool mark = false;
            switch (dfg_ops[node->op].mem) {
            case DFG_MEM_LOGITS: mark = true; break;
            case DFG_MEM_LM_HEAD: /* hidden @ table^T */
                mark = node->attr->matmul.trans_b && is_head(&tb, node->in[1]);
                break;
            case DFG_MEM_NEW_AXIS: case DFG_MEM_TABLE: break; /* these change what the last dim means */
            case DFG_MEM_KEEPS:
                for (int j = 0; j < node->n_in && !mark; j++)
                    mark = logits[node->in[j]->id] && o->shape.rank &&
                           o->shape.d[o->shape.rank - 1] == node->in[j]->shape.d[node->in[j]->shape.rank - 1];
                break;
            }
            if (mark) logits[o->id] = true;
        }
    free(tb.list);
    return DFG_OK;
}

/* One buffer per storage owner that is live; views and versions join their owner's. */
static dfg_status make_buffers(dfg_program *p, dfg_plan *plan, const bool *logits) {
    int nt = p->n_tensors;
    plan->buf_of = dfg_plan_alloc(plan, sizeof(int) * (size_t)(nt ? nt : 1));
    plan->bufs = dfg_plan_alloc(plan, sizeof(dfg_buf) * (size_t)(nt ? nt : 1));
    if (!plan->buf_of || !plan->bufs) return DFG_ERR_NOMEM;
    size_t align = plan->opt.align;
    for (int i = 0; i < nt; i++) {
        const dfg_tensor *t = p->tensors[i];
        plan->buf_of[i] = -1;
        bool live = plan->life[i].first >= 0 || t->kind != DFG_TEMP;
        if (t->storage != t || (t->flags & DFG_TF_DEAD) || !live) continue;
        dfg_buf *b = &plan->bufs[plan->n_bufs];
        b->bytes = (int64_t)dfg_tensor_bytes(t);
        b->size = (int64_t)((dfg_tensor_bytes(t) + align - 1) / align * align);
        b->life = plan->life[i];
        b->owner = i;
        b->merged_into = -1;
        b->cat = category_of(t, logits);
        b->persistent = t->kind != DFG_TEMP && !t->scope_first;
        b->pinned = (t->flags & DFG_TF_OUTPUT) != 0;
        plan->buf_of[i] = plan->n_bufs++;
    }
    for (int i = 0; i < nt; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->storage == t || plan->life[i].first < 0 || plan->buf_of[t->storage->id] < 0) continue;
        int b = plan->buf_of[t->storage->id];
        plan->buf_of[i] = b;
        if (t->flags & DFG_TF_OUTPUT) plan->bufs[b].pinned = true;
        extend(&plan->bufs[b].life, plan->life[i].first);
        extend(&plan->bufs[b].life, plan->life[i].last);
    }
    return DFG_OK;
}

/* A loop of stages (dfg_stage_loop) runs its stages again: a persistent tensor live in any of
 * them keeps its bytes from the loop's first step to its last, or a later pass would read what
 * another tensor wrote over it. Temporaries live inside one run of one stage: nothing to do. */
static void span_loops(const dfg_program *p, dfg_plan *plan) {
    for (int s = 0; s < p->n_stages; s++) {
        if (p->stages[s].loop_to < 0) continue;
        int first = plan->stage_step[p->stages[s].loop_to], last = plan->stage_step[s + 1] - 1;
        for (int b = 0; b < plan->n_bufs; b++) {
            dfg_buf *buf = &plan->bufs[b];
            if (p->tensors[buf->owner]->kind == DFG_TEMP || buf->life.first < 0) continue;
            if (buf->life.last < first || buf->life.first > last) continue;
            extend(&buf->life, first);
            extend(&buf->life, last);
        }
    }
}

/* Places output k of a node in the buffer of input j when j dies at that node. */
static void try_merge(dfg_program *p, dfg_plan *plan, const dfg_node *node, int k, int step) {
    int j = dfg_op_inplace_input(node, k);
    const dfg_tensor *o = node->out[k];
    if (j < 0 || o->storage != o) return;
    int bx = dfg_plan_buf_root(plan, node->in[j]->id), bo = dfg_plan_buf_root(plan, o->id);
    if (bx < 0 || bo < 0) return;
    dfg_buf *x = &plan->bufs[bx], *y = &plan->bufs[bo];
    if (bx == bo || x->persistent || x->pinned || p->tensors[x->owner]->kind != DFG_TEMP || x->life.last != step ||
        x->bytes != y->bytes || y->merged_into >= 0)
        return;
    x->life.last = y->life.last;
    x->pinned = y->pinned;
    y->merged_into = bx; /* buf_of is pointed at bx once every merge is made (merge_inplace) */
    plan->report.n_inplace++;
}

/* Places node outputs in the buffer of an input that dies at the node, in step order. */
static void merge_inplace(dfg_program *p, dfg_plan *plan) {
    for (int gi = 0; gi < p->n_graphs; gi++) {
        const dfg_graph *g = p->graphs[gi];
        int s = plan->graph_stage[gi];
        for (int n = 0; s >= 0 && n < g->n_nodes; n++)
            for (int k = 0; k < g->nodes[n]->n_out; k++) try_merge(p, plan, g->nodes[n], k, plan->stage_step[s] + n);
    }
    /* every tensor at the buffer its bytes ended in (rewriting buf_of at each merge instead walked
     * every tensor per merge: quadratic in a program of tens of thousands of nodes) */
    for (int i = 0; i < p->n_tensors; i++) plan->buf_of[i] = dfg_plan_buf_root(plan, i);
}

dfg_status dfg_plan_liveness(dfg_program *p, dfg_plan *plan) {
    int nt = p->n_tensors;
    dfg_status st = build_timeline(p, plan);
    plan->life = dfg_plan_alloc(plan, sizeof(dfg_span) * (size_t)(nt ? nt : 1));
    bool *logits = calloc((size_t)(nt ? nt : 1), sizeof(bool)), *table = calloc((size_t)(nt ? nt : 1), sizeof(bool));
    if (st || !plan->life || !logits || !table) {
        free(logits), free(table);
        return DFG_ERR_NOMEM;
    }
    tensor_lifetimes(p, plan);
    st = mark_logits(p, logits, table);
    if (!st) st = make_buffers(p, plan, logits);
    if (!st) span_loops(p, plan);
    if (!st && !plan->opt.no_reuse) merge_inplace(p, plan);
    free(logits), free(table);
    return st;
}
