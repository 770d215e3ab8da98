/* report.c - the memory report of a plan: arena, lower bound, naive bytes, what is live at the
 * peak by category, the largest temporary, and the step's FLOPs. */
#include <stdlib.h>

#include "plan.h"

/* A collective's bytes per step, and a ring implementation's traffic for them. */
static void count_collective(dfg_report *r, const dfg_node *n, int repeat) {
    if (!dfg_op_flag(n->op, DFG_OPF_COLLECTIVE)) return;
    int W = n->attr->collective.world;
    r->world = W;
    if (n->op == DFG_OP_RANK) return; /* reads its rank from the communicator: sends nothing */
    double bytes = 0;
    for (int i = 0; i < n->n_out; i++) bytes += (double)dfg_tensor_bytes(n->out[i]);
    if (dfg_node_is_late_allreduce(n)) repeat = 1; /* on the stage's last repeat only */
    r->n_collectives += repeat;
    r->comm_bytes += repeat * bytes;
    r->comm_ring_bytes += repeat * bytes * (n->op == DFG_OP_ALLREDUCE ? 2.0 : 1.0) * (W - 1) / W;
}

void dfg_plan_report(dfg_program *p, dfg_plan *plan) {
    dfg_report *r = &plan->report;
    r->world = 1;
    r->target = plan->opt.target;
    r->align = plan->opt.align;
    r->n_steps = plan->n_steps;
    int64_t *live = calloc((size_t)plan->n_steps + 1, sizeof(int64_t));
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *buf = &plan->bufs[b];
        const dfg_tensor *owner = p->tensors[buf->owner];
        r->naive_bytes += (size_t)buf->size;
        if (buf->persistent) r->persistent_bytes += (size_t)buf->size;
        if (owner->kind == DFG_TEMP && (size_t)buf->bytes > r->largest_temp_bytes)
            r->largest_temp = owner, r->largest_temp_bytes = (size_t)buf->bytes;
        if (buf->merged_into >= 0 || !live) continue;
        live[buf->life.first] += buf->size;
        live[buf->life.last + 1] -= buf->size;
    }
    int64_t run = 0, best = -1;
    for (int s = 0; live && s < plan->n_steps; s++) {
        run += live[s];
        if (run > best) best = run, r->peak_step = s;
    }
    r->lower_bound_bytes = best > 0 ? (size_t)best : 0;
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *buf = &plan->bufs[b];
        if (buf->merged_into < 0 && buf->life.first <= r->peak_step && r->peak_step <= buf->life.last)
            r->peak[buf->cat] += (size_t)buf->size;
    }
    free(live);
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        if (st->kind != DFG_STAGE_GRAPH) continue;
        r->n_nodes += st->graph->n_nodes;
        for (int n = 0; n < st->graph->n_nodes; n++) {
            const dfg_node *node = st->graph->nodes[n];
            double f = (double)st->repeat * dfg_ops[node->op].cost(node).flops;
            count_collective(r, node, st->repeat);
            if (node->flags & DFG_NF_RECOMPUTED) r->recomputed_nodes++, r->extra_flops += f;
            else r->flops += f; /* flops stay the work without recompute; extra_flops is remat's */
        }
    }
}

/* A frozen tensor stored in NF4 holds packed bytes and quantisation state, not parameters: the
 * parameters are the elements its nf4_dequant gives (read as input 0); its state tensors (the
 * dequant's other inputs) count nothing. Every other frozen base tensor counts its elements. */
int64_t dfg_base_params(const dfg_program *p) {
    enum { PLAIN, PACKED_COUNTED, STATE };
    unsigned char *seen = calloc((size_t)p->n_tensors + 1, 1);
    if (!seen) return -1;
    int64_t n = 0;
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
            const dfg_node *m = p->graphs[gi]->nodes[i];
            if (m->op != DFG_OP_NF4_DEQUANT) continue;
            for (int j = 0; j < m->n_in; j++) {
                int id = m->in[j]->id;
                if (j == 0 && seen[id] != PACKED_COUNTED) n += dfg_shape_numel(m->out[0]->shape);
                seen[id] = j == 0 ? PACKED_COUNTED : STATE;
            }
        }
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->role == DFG_ROLE_BASE_MODEL && p->tensors[i]->kind != DFG_TEMP && seen[i] == PLAIN)
            n += dfg_shape_numel(p->tensors[i]->shape);
    free(seen);
    return n;
}
