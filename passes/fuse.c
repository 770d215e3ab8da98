/* fuse.c - pattern rewrites that save memory, from the unfused math a user writes:
 *
 *   take(log_softmax(z [* 1/T]), t)           -> logprob(z, t)             (no (.., V) log-softmax)
 *   take(log_softmax(h @ W^T [* 1/T]), t)     -> linear_logprob(h, W, t)   (no logits at all)
 *     with entropy(z) of the same logits z     -> its entropy output          (no logits either)
 *   gelu(bias_add(x, b))                      -> bias_gelu(x, b)
 *
 * A pattern fires only when its inner tensors are read by nothing but the pattern itself and
 * its gradient: a log-softmax used elsewhere keeps the unfused ops. In a training graph the
 * backward of the region (the nodes dfg_backward made from the region's gradient rules) is
 * replaced by the fused op's own gradient, fed by the gradient that entered the region, and the
 * readers of the old input gradients read the new ones. The old nodes are left to dce. */
#include <stdlib.h>

#include "plan.h"

#define MAX_REGION 6

typedef struct {
    dfg_program *p;
    dfg_graph *g;
    const dfg_options *o;
    dfg_consumers c;
} fuse_ctx;

typedef struct {
    const dfg_node *fwd[MAX_REGION]; /* the region's forward nodes; the last makes its output */
    int n;
    const dfg_node *entropy; /* linear_logprob: an entropy node of the region (fwd too), or NULL */
} region;

static bool in_region(const region *r, const dfg_node *n) {
    for (int i = 0; i < r->n; i++)
        if (r->fwd[i] == n) return true;
    return false;
}

/* A node of the region's backward: made by the gradient rule of a region node, or the sum
 * autodiff made of two such nodes' contributions (a logits tensor read by both the log-softmax
 * and the entropy gets its two gradients added). */
static bool region_bwd(const region *r, const dfg_node *n) {
    if (n->grad_of) return in_region(r, n->grad_of);
    if (n->op != DFG_OP_ADD || !(n->flags & DFG_NF_BACKWARD)) return false;
    for (int k = 0; k < 2; k++) {
        const dfg_node *up = n->in[k]->producer;
        if (!up || !region_bwd(r, up)) return false;
    }
    return true;
}

/* Is t read only by the region and by the region's gradient nodes? */
static bool only_region_reads(const fuse_ctx *f, const region *r, const dfg_tensor *t) {
    if (t->kind != DFG_TEMP || (t->flags & DFG_TF_OUTPUT)) return false;
    for (int k = f->c.start[t->id]; k < f->c.start[t->id + 1]; k++)
        if (!in_region(r, f->c.node[k]) && !region_bwd(r, f->c.node[k])) return false;
    return true;
}

static bool forward_op(const dfg_tensor *t, dfg_op op) {
    return t->kind == DFG_TEMP && t->producer && t->producer->op == op && !(t->producer->flags & DFG_NF_BACKWARD);
}

/* The region's backward: the gradient entering it, and for each fused input j the old
 * gradient tensors (read outside the region's backward) that the new din[j] replaces. */
typedef struct {
    dfg_tensor *entering, *entering_entropy; /* the gradients of the log-probs and of the entropy */
    dfg_tensor *old_grad[8];
    int old_input[8];
    int n_old;
    bool need[8];
    int first_pos; /* the first backward node of the region */
    int new_pos;   /* where the new ones go: there, or after the entering gradients are complete */
} region_grad;

/* The position of t's producer in g, or -1 (a persistent tensor, or made before the graph). */
static int producer_pos(const dfg_graph *g, const dfg_tensor *t) {
    for (int i = 0; t && t->producer && i < g->n_nodes; i++)
        if (g->nodes[i] == t->producer) return i;
    return -1;
}

static bool read_outside(const fuse_ctx *f, const region *r, const dfg_tensor *t) {
    if (t->flags & (DFG_TF_OUTPUT | DFG_TF_GRAD)) return true;
    for (int k = f->c.start[t->id]; k < f->c.start[t->id + 1]; k++)
        if (!region_bwd(r, f->c.node[k])) return true;
    return false;
}

/* The fused nodes read the region's inputs again where the region's last forward node and its
 * first backward node stand, while the unfused backward read temporaries. A persistent input
 * written in between (a STATE assigned after the forward read it) would give them the new value
 * (and make the order invalid: verify fails, keep_order computes with the new value), so such a
 * region stays unfused. The same rule as remat's copies (inputs_still_valid). */
static bool inputs_unwritten(const fuse_ctx *f, const region *r, dfg_tensor *const *in, int n_in, int until) {
    int from = f->g->n_nodes;
    for (int i = 0; i < r->n; i++) from = r->fwd[i]->id < from ? r->fwd[i]->id : from;
    for (int j = 0; j < n_in; j++) {
        const dfg_tensor *v = in[j];
        while (v->view_of) v = v->view_of;
        if (v->kind == DFG_TEMP && !v->version_of) continue;
        const dfg_tensor *root = v->version_of ? v->version_of : v;
        for (int i = from + 1; i < until; i++)
            for (int k = 0; k < f->g->nodes[i]->n_out; k++)
                if (f->g->nodes[i]->out[k]->version_of == root) return false;
    }
    return true;
}

/* Which fused input o is the gradient of, or n_in. o->grad_wrt names the last tensor autodiff
 * gave o to: a gradient rule that passes its output's gradient on unchanged (bias_add's for its
 * input, add's) hands o further up, so grad_wrt then names an input of in[j]'s producer (logits
 * with a vocabulary bias: the gradient of the logits is also the matmul's). */
static int grad_input(dfg_tensor *const *in, int n_in, const dfg_tensor *o) {
    for (int j = 0; j < n_in; j++)
        if (in[j] == o->grad_wrt) return j;
    for (int j = 0; j < n_in; j++) {
        const dfg_node *up = in[j]->producer;
        if (in[j]->kind != DFG_TEMP || !up || (up->flags & DFG_NF_BACKWARD) || !o->grad_wrt) continue;
        for (int k = 0; k < up->n_in; k++)
            if (up->in[k] == o->grad_wrt && dfg_shape_equal(o->grad_wrt->shape, in[j]->shape) &&
                o->grad_wrt->dtype == in[j]->dtype)
                return j;
    }
    return n_in;
}

/* Finds the region's backward; false when it does not have the shape fusion can replace. */
static bool find_region_grad(const fuse_ctx *f, const region *r, dfg_tensor *const *in, int n_in, region_grad *rg) {
    *rg = (region_grad){.first_pos = -1};
    const dfg_node *last = r->fwd[r->n - 1];
    for (int i = 0; i < f->g->n_nodes; i++) {
        const dfg_node *b = f->g->nodes[i];
        if (!region_bwd(r, b)) continue;
        if (rg->first_pos < 0) rg->first_pos = i;
        if (b->grad_of == last && !rg->entering) rg->entering = b->in[0];
        if (r->entropy && b->grad_of == r->entropy && !rg->entering_entropy) rg->entering_entropy = b->in[0];
        for (int k = 0; k < b->n_out; k++) {
            dfg_tensor *o = b->out[k];
            if (!read_outside(f, r, o)) continue;
            int j = grad_input(in, n_in, o);
            if (j == n_in || rg->n_old == 8) return false; /* a gradient the fused op cannot make */
            rg->old_grad[rg->n_old] = o;
            rg->old_input[rg->n_old++] = j;
            rg->need[j] = true;
        }
    }
    /* a gradient entering the region may be completed after the region's backward began (the
     * log-probs read once more between the log-softmax and the entropy): the fused gradient goes
     * after it, still before any reader of the gradients it replaces (they need both) */
    rg->new_pos = rg->first_pos;
    int e1 = producer_pos(f->g, rg->entering), e2 = producer_pos(f->g, rg->entering_entropy);
    if (rg->first_pos >= 0 && e1 >= rg->new_pos) rg->new_pos = e1 + 1;
    if (rg->first_pos >= 0 && e2 >= rg->new_pos) rg->new_pos = e2 + 1;
    return (rg->first_pos < 0 || rg->entering != NULL || rg->entering_entropy != NULL) &&
           inputs_unwritten(f, r, in, n_in, rg->first_pos >= 0 ? rg->new_pos : last->id);
}

/* Builds the fused node (before the region's last forward node), its gradient (before the
 * region's first backward node) and redirects every reader. */
static dfg_status rewrite(fuse_ctx *f, const region *r, dfg_op op, dfg_tensor *const *in, int n_in,
                          const dfg_attrs *attr, int n_out, const region_grad *rg) {
    dfg_graph *g = f->g;
    const dfg_node *last = r->fwd[r->n - 1];
    int first = g->n_nodes;
    /* before the last forward node of the region still in the graph (dce removed a take whose
     * value nothing reads: its gradient reads only the log-softmax) */
    int at = -1;
    for (int i = 0; i < r->n; i++)
        if (r->fwd[i]->id < g->n_nodes && g->nodes[r->fwd[i]->id] == r->fwd[i] && r->fwd[i]->id > at) at = r->fwd[i]->id;
    dfg_node *fused = dfg_rw_add(g, op, in, n_in, attr, n_out);
    if (!fused) return g->status;
    fused->flags |= DFG_NF_FUSED;
    if (op == DFG_OP_LINEAR_LOGPROB) fused->out[2]->flags |= DFG_TF_WORKSPACE;
    dfg_rw_move_tail(g, first, at);
    if (rg->first_pos >= 0) {
        dfg_tensor *dout[4] = {rg->entering, NULL, NULL, rg->entering_entropy}, *din[8] = {0};
        first = g->n_nodes;
        g->rewriting = true;
        dfg_status st = dfg_ops[op].grad(g, fused, dout, rg->need, din);
        g->rewriting = false;
        if (st) return st;
        for (int i = first; i < g->n_nodes; i++) {
            dfg_node *b = g->nodes[i];
            b->grad_of = fused;
            b->flags |= DFG_NF_BACKWARD | DFG_NF_FUSED;
            if (b->op == DFG_OP_LINEAR_LOGPROB_BWD) b->out[2]->flags |= DFG_TF_WORKSPACE;
        }
        /* the backward nodes moved one place when the fused forward node went in */
        dfg_rw_move_tail(g, first, rg->new_pos + 1);
        for (int k = 0; k < rg->n_old; k++) {
            dfg_tensor *d = din[rg->old_input[k]];
            if (!d) return dfg_program_err(f->p, DFG_ERR_STATE, "fuse: %s made no gradient for input %d", dfg_op_name(op),
                                             rg->old_input[k]);
            d->grad_wrt = in[rg->old_input[k]];
            dfg_rw_replace_uses(f->p, g, rg->old_grad[k], d);
        }
    }
    dfg_rw_replace_uses(f->p, g, last->out[0], fused->out[0]);
    if (r->entropy) dfg_rw_replace_uses(f->p, g, r->entropy->out[0], fused->out[3]);
    return DFG_OK;
}

/* Vocabulary chunks for linear_logprob: the workspace (rows_chunk x v_chunk floats) stays near
 * 32 MiB, or 1/256 of a memory budget when that is smaller; the narrowest chunk under memory_min. */
static void choose_chunks(const dfg_options *o, int64_t rows, int64_t v, dfg_attrs *a) {
    int64_t target = (int64_t)32 << 20;
    if (o->memory_budget > 0 && o->memory_budget / 256 < target) target = o->memory_budget / 256;
    if (o->memory_min) target = 0;
    int64_t rc = rows < 1024 ? rows : 1024;
    int64_t vc = target / (rc * 4);
    if (vc >= v) vc = v;
    else vc = vc >= DFG_LOGPROB_V_BLOCK ? vc / DFG_LOGPROB_V_BLOCK * DFG_LOGPROB_V_BLOCK : DFG_LOGPROB_V_BLOCK;
    if (vc > v) vc = v;
    a->logprob.rows_chunk = rc;
    a->logprob.v_chunk = vc;
}

/* A training graph that never reads the loss's value (only its gradient) loses take to dce:
 * take's backward reads the targets, the log-softmax's reads only its output. The take is still
 * the region's forward node; it is found through the gradient dfg_backward made of it. */
static const dfg_node *removed_take(const fuse_ctx *f, const dfg_node *ls_node) {
    const dfg_tensor *ls = ls_node->out[0];
    for (int k = f->c.start[ls->id]; k < f->c.start[ls->id + 1]; k++) {
        const dfg_node *b = f->c.node[k], *tb = f->c.node[k]->in[0]->producer;
        if (b->op != DFG_OP_LOG_SOFTMAX_BWD || b->grad_of != ls_node || !tb || tb->op != DFG_OP_TAKE_BWD) continue;
        if (tb->grad_of && tb->grad_of->op == DFG_OP_TAKE && tb->grad_of->in[0] == ls) return tb->grad_of;
    }
    return NULL;
}

/* The forward entropy node that reads z, the log-softmax's logits, or NULL. */
static const dfg_node *entropy_reader(const fuse_ctx *f, const dfg_tensor *z) {
    for (int k = f->c.start[z->id]; k < f->c.start[z->id + 1]; k++) {
        const dfg_node *n = f->c.node[k];
        if (n->op == DFG_OP_ENTROPY && !(n->flags & DFG_NF_BACKWARD) && n->in[0] == z)
            return n;
    }
    return NULL;
}

/* with_entropy: an entropy of the same logits joins the region (linear_logprob gives it); the
 * plain logprob has no entropy output, so without the lm_head the region is tried again without it */
static dfg_status try_logprob(fuse_ctx *f, const dfg_node *ls_node, bool with_entropy, bool *fired) {
    region r = {.n = 0};
    const dfg_tensor *ls = ls_node->out[0];
    const dfg_node *take = NULL;
    for (int k = f->c.start[ls->id]; k < f->c.start[ls->id + 1]; k++) {
        const dfg_node *n = f->c.node[k];
        if (n->grad_of == ls_node) continue;
        if (n->op != DFG_OP_TAKE || n->in[0] != ls || take) return DFG_OK; /* log-softmax used elsewhere */
        take = n;
    }
    if (!take) take = removed_take(f, ls_node);
    /* the fused ops make f32 log-probs: a log-softmax taken in bf16 keeps its own dtype unfused */
    if (!take || (ls->flags & DFG_TF_OUTPUT) || take->out[0]->dtype != DFG_F32) return DFG_OK;
    dfg_tensor *z = ls_node->in[0];
    float inv_temp = 1.0f;
    const dfg_node *mm = NULL;
    r.fwd[r.n++] = ls_node;
    if (with_entropy && (r.entropy = entropy_reader(f, z))) r.fwd[r.n++] = r.entropy;
    /* up the chain through temperature scales and a cast to f32 (what a mixed-precision loss
     * writes: log_softmax(cast(lm_head(h), f32) / T)), while only the pattern reads each value */
    for (int hops = 0; hops < 2; hops++) {
        const dfg_node *up = z->producer;
        bool scale = forward_op(z, DFG_OP_AFFINE) && up->attr->affine.beta == 0.0f && up->attr->affine.alpha > 0.0f;
        bool cast = forward_op(z, DFG_OP_CAST) && z->dtype == DFG_F32 && dfg_is_float(up->in[0]->dtype);
        if (!scale && !cast) break;
        r.fwd[r.n++] = up;
        if (!only_region_reads(f, &r, z)) {
            r.n--;
            break;
        }
        if (scale) inv_temp *= up->attr->affine.alpha;
        z = up->in[0];
    }
    if (forward_op(z, DFG_OP_MATMUL) && !z->producer->attr->matmul.trans_a && z->producer->in[1]->shape.rank == 2 &&
        z->producer->in[0]->shape.rank >= 2) {
        mm = z->producer;
        r.fwd[r.n++] = mm;
        if (!only_region_reads(f, &r, z)) r.n--, mm = NULL;
    }
    if (r.entropy && !mm) return try_logprob(f, ls_node, false, fired);
    r.fwd[r.n++] = take;
    dfg_attrs a = {.logprob = {inv_temp, mm ? mm->attr->matmul.trans_b : false, 0, 0}};
    dfg_tensor *in[3];
    int n_in;
    if (mm) {
        in[0] = mm->in[0], in[1] = mm->in[1], in[2] = take->in[1], n_in = 3;
        const dfg_tensor *w = mm->in[1];
        choose_chunks(f->o, dfg_shape_numel(take->in[1]->shape), a.logprob.trans_b ? w->shape.d[0] : w->shape.d[1], &a);
    } else {
        in[0] = z, in[1] = take->in[1], n_in = 2;
    }
    region_grad rg;
    if (!find_region_grad(f, &r, in, n_in, &rg)) return DFG_OK;
    *fired = true;
    f->p->plan->report.fused[mm ? 1 : 0]++;
    return rewrite(f, &r, mm ? DFG_OP_LINEAR_LOGPROB : DFG_OP_LOGPROB, in, n_in, &a, mm ? 4 : 2, &rg);
}

static dfg_status try_bias_gelu(fuse_ctx *f, const dfg_node *gelu, bool *fired) {
    dfg_tensor *u = gelu->in[0];
    if (!forward_op(u, DFG_OP_BIAS_ADD)) return DFG_OK;
    region r = {.fwd = {u->producer, gelu}, .n = 2};
    if (!only_region_reads(f, &r, u)) return DFG_OK;
    dfg_tensor *in[2] = {u->producer->in[0], u->producer->in[1]};
    region_grad rg;
    if (!find_region_grad(f, &r, in, 2, &rg)) return DFG_OK;
    *fired = true;
    f->p->plan->report.fused[2]++;
    return rewrite(f, &r, DFG_OP_BIAS_GELU, in, 2, NULL, 1, &rg);
}

/* A gradient op whose weight gradient only feeds "buffer += dW" becomes the form that adds into
 * the buffer itself (an extra input it writes in place): the parameter-sized dW is never stored
 * on its own. linear_logprob_bwd (dW is output 1; with or without the entropy's gradient) and
 * embed_bwd (output 0) have that form. The
 * buffer's value it reads must not be read by anything after it but the accumulation. */
static dfg_status try_accumulate_into(fuse_ctx *f, dfg_node *b, int slot, bool *fired) {
    dfg_tensor *dw = b->out[slot];
    /* linear_logprob_bwd: 5 inputs, or 7 with the entropy's gradient; the accumulator goes last */
    int plain_in = b->op == DFG_OP_EMBED_BWD ? 2 : b->n_in == 7 ? 7 : 5;
    if (b->n_in != plain_in || (dw->flags & DFG_TF_OUTPUT) || f->c.start[dw->id + 1] - f->c.start[dw->id] != 1)
        return DFG_OK;
    dfg_node *acc = (dfg_node *)f->c.node[f->c.start[dw->id]];
    if (acc->op != DFG_OP_ACCUMULATE || acc->in[1] != dw || acc->in[0] == dw)
        return DFG_OK;
    dfg_tensor *v = acc->in[0];
    for (int k = f->c.start[v->id]; k < f->c.start[v->id + 1]; k++)
        if (f->c.node[k] != acc && f->c.node[k]->id > b->id) return DFG_OK;
    dfg_graph *g = f->g;
    dfg_tensor *in[8];
    for (int j = 0; j < plain_in; j++) in[j] = b->in[j];
    in[plain_in] = v;
    int first = g->n_nodes;
    dfg_node *n = dfg_rw_add(g, b->op, in, plain_in + 1, b->attr, b->n_out);
    if (!n) return g->status;
    n->flags = b->flags;
    n->grad_of = b->grad_of;
    for (int k = 0; k < b->n_out; k++) {
        n->out[k]->flags |= b->out[k]->flags & DFG_TF_WORKSPACE;
        if (k != slot) n->out[k]->grad_wrt = b->out[k]->grad_wrt;
    }
    dfg_rw_move_tail(g, first, b->id);
    for (int k = 0; k < b->n_out; k++)
        if (k != slot) dfg_rw_replace_uses(f->p, g, b->out[k], n->out[k]);
    dfg_rw_replace_uses(f->p, g, acc->out[0], n->out[slot]);
    dfg_rw_remove(g, acc);
    dfg_rw_remove(g, b);
    *fired = true;
    return DFG_OK;
}

/* Fuses one pattern at a time, rebuilding the consumer lists after every rewrite. */
static dfg_status fuse_graph(dfg_program *p, dfg_graph *g, const dfg_options *o, bool *any) {
    /* every rewrite removes at least one node of the pattern it matched, so this many rounds is
     * more than enough; reaching it means a rewrite did not take (a bug, reported, not a hang) */
    for (int round = 0, limit = g->n_nodes + 1;; round++) {
        if (round > limit)
            return dfg_program_err(p, DFG_ERR_STATE, "fuse: graph '%s' still matches after %d rewrites", g->name, limit);
        fuse_ctx f = {p, g, o, {0}};
        if (dfg_consumers_build(p, g, &f.c)) return dfg_program_err(p, DFG_ERR_NOMEM, "fuse: out of memory");
        bool fired = false;
        dfg_status st = DFG_OK;
        for (int i = 0; i < g->n_nodes && !fired && !st; i++) {
            const dfg_node *n = g->nodes[i];
            if (n->op == DFG_OP_LINEAR_LOGPROB_BWD) st = try_accumulate_into(&f, g->nodes[i], 1, &fired);
            if (n->op == DFG_OP_EMBED_BWD) st = try_accumulate_into(&f, g->nodes[i], 0, &fired);
            if (n->flags & DFG_NF_BACKWARD) continue;
            if (n->op == DFG_OP_LOG_SOFTMAX) st = try_logprob(&f, n, true, &fired);
            else if (n->op == DFG_OP_GELU) st = try_bias_gelu(&f, n, &fired);
        }
        dfg_consumers_free(&f.c);
        if (st || !fired) return st;
        *any = true;
        if ((st = dfg_pass_dce(p, o))) return st; /* drop the replaced nodes before matching again */
    }
}

dfg_status dfg_pass_fuse(dfg_program *p, const dfg_options *o) {
    if (o->no_fuse) return DFG_OK;
    bool any = false;
    for (int gi = 0; gi < p->n_graphs; gi++)
        if (dfg_graph_stage_index(p, p->graphs[gi]) >= 0) {
            dfg_status st = fuse_graph(p, p->graphs[gi], o, &any);
            if (st) return st;
        }
    return DFG_OK;
}
