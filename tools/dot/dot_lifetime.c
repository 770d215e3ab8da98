/* dot_lifetime.c - the dataflow view of a plan (dfg_dot.h): ops in schedule order clustered by
 * stage, persistent tensors as cylinders, one edge per tensor read labelled with its size, offset
 * and lifetime and colored by arena region, the peak highlighted, and the compiler's own nodes
 * marked: fused ops with a double border, remat's recomputed copies dashed. A program of more
 * than MAX_STEPS steps is drawn in a window of steps around its peak. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot_internal.h"

/* Edge colors by arena offset band: dark enough to read as lines on white, distinct in pairs. */
static const char *const band_colors[] = {"#1f78b4", "#33a02c", "#e31a1c", "#ff7f00", "#6a3d9a", "#b15928",
                                          "#17becf", "#7f7f00", "#d6278a", "#525252", "#8c564b", "#2ca02c"};
#define N_BANDS (int)(sizeof(band_colors) / sizeof(band_colors[0]))

/* Nodes within this fraction of the peak's live bytes are tinted: where the pressure is. */
#define NEAR_PEAK 0.90

/* The most steps drawn. Beyond a few hundred ops a drawing is no longer read at a glance, and
 * dot's layout time grows much faster than the graph (GPT-2 124M's 1469 steps: many minutes;
 * 158 steps: half a second), so a larger program is drawn around its peak. */
#define MAX_STEPS 240

typedef struct {
    dfg_dot_ctx *c;
    Agnode_t ***op;     /* [graph id][node index]: the op's node, NULL when its graph is not staged */
    Agnode_t *host_out; /* "read by the host after the step", made on first use */
    Agnode_t *unread;   /* outputs no one reads, made on first use */
    Agnode_t **writes;  /* [stage]: "persistent tensors written", made on first use */
    Agraph_t **cluster; /* [stage]; NULL for a stage outside the window */
    int w0, w1;         /* the window of steps drawn */
    Agnode_t *before, *after; /* where tensors made before the window come from, and go after it */
    bool *shown;        /* [tensor id]: a persistent tensor drawn (one that ops in the window use) */
    int64_t band_base, band_bytes; /* transient region split into N_BANDS bands */
} lifetime;

static void declare_defaults(Agraph_t *g) {
    dfg_dot_default(g, AGRAPH, "fontname", "Helvetica");
    dfg_dot_default(g, AGRAPH, "fontsize", "14");
    dfg_dot_default(g, AGRAPH, "rankdir", "TB");
    dfg_dot_default(g, AGRAPH, "newrank", "true");
    dfg_dot_default(g, AGRAPH, "nodesep", "0.25");
    dfg_dot_default(g, AGRAPH, "ranksep", "0.3");
    /* Edge labels as xlabels, placed after the layout: as real labels they become nodes of the
     * layout, and dot took 30 s instead of 2 on the GPT-2 example. forcelabels keeps every one. */
    dfg_dot_default(g, AGRAPH, "forcelabels", "true");
    /* The schedule chain fixes the ranks; unlimited network-simplex passes over the x positions
     * of the many long lifetime edges took 13 s on the GPT-2 example, 4 passes take 0.5 s and
     * look the same. */
    dfg_dot_default(g, AGRAPH, "nslimit", "4");
    dfg_dot_default(g, AGNODE, "shape", "box");
    dfg_dot_default(g, AGNODE, "style", "filled");
    dfg_dot_default(g, AGNODE, "fillcolor", "white");
    dfg_dot_default(g, AGNODE, "fontname", "Helvetica");
    dfg_dot_default(g, AGNODE, "fontsize", "10");
    dfg_dot_default(g, AGNODE, "penwidth", "1");
    dfg_dot_default(g, AGEDGE, "fontname", "Helvetica");
    dfg_dot_default(g, AGEDGE, "fontsize", "8");
    dfg_dot_default(g, AGEDGE, "arrowsize", "0.6");
    dfg_dot_default(g, AGEDGE, "penwidth", "1");
}

static const char *band_color(const lifetime *lt, const dfg_buf *b) {
    if (b->persistent) return dfg_dot_category_color(b->cat);
    int64_t band = lt->band_bytes ? (b->offset - lt->band_base) / lt->band_bytes : 0;
    if (band < 0) band = 0;
    if (band >= N_BANDS) band = N_BANDS - 1;
    return band_colors[band];
}

static bool live_at(dfg_span s, int step) { return s.first >= 0 && s.first <= step && step <= s.last; }

/* Scheduled nodes carrying a flag: in the whole program and in the window drawn. */
static void count_flagged(const lifetime *lt, uint32_t flag, int *all, int *drawn) {
    const dfg_program *p = lt->c->p;
    *all = *drawn = 0;
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_graph *g = p->stages[s].kind == DFG_STAGE_GRAPH ? p->stages[s].graph : NULL;
        if (!g || lt->c->plan->graph_stage[g->id] != s) continue; /* a graph staged twice counts once */
        for (int i = 0; i < g->n_nodes; i++) {
            if (!(g->nodes[i]->flags & flag)) continue;
            int step = lt->c->plan->stage_step[s] + i;
            ++*all;
            *drawn += step >= lt->w0 && step <= lt->w1;
        }
    }
}

/* The legend of the compiler's marks: what the fuse pass and remat added, and how to spot it. */
static void compiler_marks(const lifetime *lt, char *buf, size_t len, size_t *at) {
    const dfg_report *r = lt->c->r;
    bool window = lt->w0 > 0 || lt->w1 < lt->c->plan->n_steps - 1;
    int fused, fused_drawn, recomputed, recomputed_drawn;
    count_flagged(lt, DFG_NF_FUSED, &fused, &fused_drawn);
    count_flagged(lt, DFG_NF_RECOMPUTED, &recomputed, &recomputed_drawn);
    static const char *const kinds[3] = {"logprob", "linear_logprob", "bias_gelu"}; /* dfg_report.fused */
    dfg_dot_append(buf, len, at, "double border, tag [fused]: %d node%s made by the fuse pass", fused, fused == 1 ? "" : "s");
    if (window) dfg_dot_append(buf, len, at, ", %d drawn", fused_drawn);
    for (int k = 0, n = 0; k < 3; k++)
        if (r->fused[k]) dfg_dot_append(buf, len, at, "%s%d %s", n++ ? ", " : "; rewrites: ", r->fused[k], kinds[k]);
    if (!fused) dfg_dot_append(buf, len, at, "%s", lt->c->plan->opt.no_fuse ? " (fusion off)" : "");
    dfg_dot_append(buf, len, at, "\\ldashed border, lavender, tag [recomputed]: %d cop%s remat added to recompute "
                   "activations in the backward", recomputed, recomputed == 1 ? "y" : "ies");
    if (window) dfg_dot_append(buf, len, at, ", %d drawn", recomputed_drawn);
    if (recomputed && r->flops > 0)
        dfg_dot_append(buf, len, at, "; +%.1f%% flops", 100.0 * r->extra_flops / r->flops);
    int64_t budget = lt->c->plan->opt.memory_budget;
    if (budget > 0) {
        char bb[32];
        dfg_dot_append(buf, len, at, "; memory budget %s", dfg_bytes_str((double)budget, bb, sizeof(bb)));
    }
    dfg_dot_append(buf, len, at, "\\l");
}

/* ---------------------------------------------------------------- title */
static void title(lifetime *lt) {
    dfg_dot_ctx *c = lt->c;
    char buf[4096], bb[32], pb[32];
    size_t at = 0;
    dfg_dot_summary(c, buf, sizeof(buf), &at);
    dfg_dot_append(buf, sizeof(buf), &at,
                   "edges: tensor / bytes @ arena offset / steps; color = arena band of %s above the %s of persistent "
                   "tensors (one color: bytes shared at different times); bold = live at the peak\\l"
                   "red node: the peak step; pink: within %.0f%% of it; blue tint: added by backward\\l",
                   dfg_bytes_str((double)lt->band_bytes, bb, sizeof(bb)),
                   dfg_bytes_str((double)c->r->persistent_bytes, pb, sizeof(pb)), 100.0 * (1.0 - NEAR_PEAK));
    compiler_marks(lt, buf, sizeof(buf), &at);
    if (lt->w0 > 0 || lt->w1 < c->plan->n_steps - 1)
        dfg_dot_append(buf, sizeof(buf), &at,
                       "showing steps %d-%d of %d, around the peak: more would not read at a glance (the timeline view "
                       "shows every step)\\l", lt->w0, lt->w1, c->plan->n_steps);
    dfg_dot_set(c->g, "label", buf);
    dfg_dot_set(c->g, "labelloc", "t");
    dfg_dot_set(c->g, "labeljust", "l");
}

/* ---------------------------------------------------------------- persistent tensors */
/* Cylinders in their own cluster, in a grid of a few columns (a single row of every parameter
 * would make the drawing as wide as the model is deep). */
static dfg_status persistent_nodes(lifetime *lt) {
    dfg_dot_ctx *c = lt->c;
    const dfg_program *p = c->p;
    char sb[32], ob[32], shape[96], buf[1024];
    Agraph_t *sg = agsubg(c->g, "cluster_persistent", 1);
    if (!sg) return DFG_ERR_NOMEM;
    int hidden = 0;
    for (int i = 0; i < p->n_tensors; i++) hidden += p->tensors[i]->kind != DFG_TEMP && !lt->shown[i];
    dfg_dot_setf(sg, "label", "persistent tensors: %s at the bottom of the arena%s", dfg_bytes_str((double)c->r->persistent_bytes, sb, sizeof(sb)),
                 hidden ? " (those the steps drawn use)" : "");
    dfg_dot_set(sg, "style", "rounded");
    enum { COLUMNS = 3 };
    Agnode_t *column_prev[COLUMNS] = {NULL};
    int k = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        int b = t->kind == DFG_TEMP || !lt->shown[i] ? -1 : dfg_dot_root(c->plan, i);
        if (b < 0) continue;
        const dfg_buf *buf_ = &c->plan->bufs[b];
        snprintf(buf, sizeof(buf), "t%d", i);
        Agnode_t *n = agnode(sg, buf, 1);
        if (!n) return DFG_ERR_NOMEM;
        size_t at = 0;
        dfg_dot_append(buf, sizeof(buf), &at, "%s\\n%s %s %s\\n@ %s, %s", t->name, dfg_dtype_name(t->dtype),
                       dfg_shape_str(t->shape, shape, sizeof(shape)), dfg_bytes_str((double)buf_->bytes, sb, sizeof(sb)),
                       dfg_bytes_str((double)buf_->offset, ob, sizeof(ob)), dfg_category_name(buf_->cat));
        if (t->scope_first)
            dfg_dot_append(buf, sizeof(buf), &at, "\\nscope %s..%s (steps %d-%d)", t->scope_first, t->scope_last,
                           buf_->life.first, buf_->life.last);
        dfg_dot_set(n, "label", buf);
        dfg_dot_set(n, "shape", "cylinder");
        dfg_dot_set(n, "fillcolor", dfg_dot_category_color(buf_->cat));
        if (t->scope_first) dfg_dot_set(n, "style", "filled,dashed");
        Agnode_t **above = &column_prev[k++ % COLUMNS];
        if (*above) {
            Agedge_t *e = agedge(sg, *above, n, NULL, 1);
            if (!e) return DFG_ERR_NOMEM;
            dfg_dot_set(e, "style", "invis");
        }
        *above = n;
    }
    return DFG_OK;
}

/* ---------------------------------------------------------------- stages and ops */
/* The schedule as a column: an invisible, heavy edge from each step's node to the next one's puts
 * node k on rank k, so a tensor's edge spans exactly its lifetime and the edges that cross the
 * peak's rank are the tensors live there. */
static dfg_status chain(Agraph_t *g, Agnode_t *from, Agnode_t *to) {
    Agedge_t *e = agedge(g, from, to, NULL, 1);
    if (!e) return DFG_ERR_NOMEM;
    dfg_dot_set(e, "style", "invis");
    dfg_dot_set(e, "weight", "20");
    return DFG_OK;
}

/* Fill by memory pressure first (the peak, near it), then by origin; the compiler's nodes are
 * marked by their border, which survives the pressure fills: fused ops double, recomputed
 * copies dashed (and lavender where no pressure fill hides it). */
static void op_style(lifetime *lt, Agnode_t *n, int step, uint32_t flags) {
    const dfg_dot_ctx *c = lt->c;
    int64_t peak = c->live[c->r->peak_step];
    if (step == c->r->peak_step) {
        dfg_dot_set(n, "fillcolor", "#ff6961");
        dfg_dot_set(n, "penwidth", "3");
    } else if (peak > 0 && (double)c->live[step] >= NEAR_PEAK * (double)peak) {
        dfg_dot_set(n, "fillcolor", "#ffd1cc");
    } else if (flags & DFG_NF_RECOMPUTED) {
        dfg_dot_set(n, "fillcolor", "#ece3f7");
    } else if (flags & DFG_NF_BACKWARD) {
        dfg_dot_set(n, "fillcolor", "#e8f0fb");
    }
    if (flags & DFG_NF_FUSED) dfg_dot_set(n, "peripheries", "2");
    if (flags & DFG_NF_RECOMPUTED) {
        dfg_dot_set(n, "style", "filled,dashed");
        dfg_dot_set(n, "color", "#6a3d9a");
    }
}

static Agraph_t *stage_cluster(lifetime *lt, int s) {
    const dfg_program *p = lt->c->p;
    const dfg_stage *st = &p->stages[s];
    const dfg_plan *plan = lt->c->plan;
    char name[32];
    snprintf(name, sizeof(name), "cluster_stage%d", s);
    Agraph_t *sg = agsubg(lt->c->g, name, 1);
    if (!sg) return NULL;
    int first = plan->stage_step[s], last = plan->stage_step[s + 1] - 1;
    if (st->kind == DFG_STAGE_HOST) {
        dfg_dot_setf(sg, "label", "stage %d '%s': host, step %d", s + 1, st->name, first);
    } else {
        double flops = 0;
        for (int i = 0; i < st->graph->n_nodes; i++) flops += dfg_ops[st->graph->nodes[i]->op].cost(st->graph->nodes[i]).flops;
        dfg_dot_setf(sg, "label", "stage %d '%s': graph '%s', %d nodes, steps %d-%d, %.3g MFLOP x %d run%s", s + 1,
                     st->name, st->graph->name, st->graph->n_nodes, first, last, flops * 1e-6, st->repeat,
                     st->repeat == 1 ? "" : "s");
    }
    dfg_dot_set(sg, "style", "rounded,filled");
    dfg_dot_set(sg, "fillcolor", "#f4f4f4");
    dfg_dot_set(sg, "labeljust", "l");
    return sg;
}

/* "reads wte +3" and "writes h.0.w +2": the persistent tensors an op reads and writes, named in
 * its box rather than drawn as edges to and from their cylinders (those crossed the drawing). */
static void persistent_io(const dfg_node *node, char *buf, size_t len, size_t *at) {
    int shown = 0, more = 0;
    for (int j = 0; j < node->n_in; j++) {
        const dfg_tensor *t = node->in[j];
        bool again = false;
        for (int i = 0; i < j && !again; i++) again = node->in[i] == t;
        if (t->kind == DFG_TEMP || again) continue;
        if (!shown++) dfg_dot_append(buf, len, at, "\\nreads %s", t->name);
        else more++;
    }
    if (more) dfg_dot_append(buf, len, at, " +%d", more);
    shown = more = 0;
    for (int k = 0; k < node->n_out; k++) {
        const dfg_tensor *t = node->out[k]->version_of;
        if (!t) continue;
        if (!shown++) dfg_dot_append(buf, len, at, "\\nwrites %s", t->name);
        else more++;
    }
    if (more) dfg_dot_append(buf, len, at, " +%d", more);
}

/* The op nodes of one stage (or its host node); first and last receive its first and last nodes. */
static dfg_status stage_nodes(lifetime *lt, int s, Agnode_t **first, Agnode_t **last) {
    dfg_dot_ctx *c = lt->c;
    const dfg_stage *st = &c->p->stages[s];
    int step0 = c->plan->stage_step[s];
    *first = *last = NULL;
    if (c->plan->stage_step[s + 1] - 1 < lt->w0 || step0 > lt->w1) return DFG_OK; /* outside the window */
    Agraph_t *sg = lt->cluster[s] = stage_cluster(lt, s);
    char name[64], label[1024];
    if (!sg) return DFG_ERR_NOMEM;
    if (st->kind == DFG_STAGE_HOST) {
        snprintf(name, sizeof(name), "host%d", s);
        Agnode_t *n = agnode(sg, name, 1);
        if (!n) return DFG_ERR_NOMEM;
        dfg_dot_setf(n, "label", "host function %s\\nstep %d", st->symbol, step0);
        dfg_dot_set(n, "shape", "component");
        op_style(lt, n, step0, 0);
        *first = *last = n;
        return DFG_OK;
    }
    const dfg_graph *g = st->graph;
    bool owner = c->plan->graph_stage[g->id] == s; /* a graph staged twice is drawn where it is planned */
    for (int i = 0; i < g->n_nodes; i++) {
        const dfg_node *node = g->nodes[i];
        if (step0 + i < lt->w0 || step0 + i > lt->w1) continue;
        snprintf(name, sizeof(name), "op%d_%d", s, i);
        Agnode_t *n = agnode(sg, name, 1);
        if (!n) return DFG_ERR_NOMEM;
        size_t at = 0;
        dfg_dot_append(label, sizeof(label), &at, "%s%s\\n%s\\nstep %d", step0 + i == c->r->peak_step ? "PEAK: " : "",
                       dfg_op_name(node->op), node->name, step0 + i);
        if (node->flags & (DFG_NF_FUSED | DFG_NF_RECOMPUTED))
            dfg_dot_append(label, sizeof(label), &at, "\\n[%s%s%s]", node->flags & DFG_NF_FUSED ? "fused" : "",
                           (node->flags & DFG_NF_FUSED) && (node->flags & DFG_NF_RECOMPUTED) ? ", " : "",
                           node->flags & DFG_NF_RECOMPUTED ? "recomputed" : "");
        persistent_io(node, label, sizeof(label), &at);
        dfg_dot_set(n, "label", label);
        op_style(lt, n, step0 + i, node->flags);
        if (owner) lt->op[g->id][i] = n;
        if (*last && chain(c->g, *last, n)) return DFG_ERR_NOMEM;
        if (!*first) *first = n;
        *last = n;
    }
    return DFG_OK;
}

/* ---------------------------------------------------------------- edges */
/* "name / 12.0 KiB @ 1.2 MiB / steps 4-17", plus how the tensor shares its bytes. */
static void tensor_label(const lifetime *lt, const dfg_tensor *t, char *buf, size_t len) {
    const dfg_plan *plan = lt->c->plan;
    int b = dfg_dot_root(plan, t->id);
    char sb[32], ob[32];
    size_t at = 0;
    dfg_dot_append(buf, len, &at, "%s\\n%s @ %s\\nsteps %d-%d", t->name, dfg_bytes_str((double)dfg_tensor_bytes(t), sb, sizeof(sb)),
                   b >= 0 ? dfg_bytes_str((double)plan->bufs[b].offset, ob, sizeof(ob)) : "?", plan->life[t->id].first,
                   plan->life[t->id].last);
    const dfg_tensor *owner = b >= 0 ? lt->c->p->tensors[plan->bufs[b].owner] : t;
    if (t->version_of) dfg_dot_append(buf, len, &at, "\\n(writes %s)", t->version_of->name);
    else if (t->view_of) dfg_dot_append(buf, len, &at, "\\n(view of %s)", t->view_of->name);
    else if (owner != t) dfg_dot_append(buf, len, &at, "\\n(in place of %s)", owner->name);
}

/* An edge carrying tensor t; the first edge of a tensor has the full label, the others only
 * its name (the same four lines on every read were noise). */
static Agedge_t *tensor_edge(lifetime *lt, Agnode_t *from, Agnode_t *to, const dfg_tensor *t, bool first) {
    Agedge_t *e = agedge(lt->c->g, from, to, NULL, 1);
    if (!e) return NULL;
    int b = dfg_dot_root(lt->c->plan, t->id);
    char label[1024];
    if (first) tensor_label(lt, t, label, sizeof(label));
    dfg_dot_set(e, "xlabel", first ? label : t->name);
    const dfg_buf *buf = b >= 0 ? &lt->c->plan->bufs[b] : NULL;
    if (buf) dfg_dot_set(e, "color", band_color(lt, buf));
    /* new values of persistent tensors live in bytes that are there anyway: drawn thin, never as
     * what occupies the peak */
    if (buf && buf->persistent) dfg_dot_set(e, "penwidth", "0.7");
    else if (live_at(lt->c->plan->life[t->id], lt->c->r->peak_step)) dfg_dot_set(e, "penwidth", "3");
    return e;
}

static Agnode_t *sink(lifetime *lt, Agnode_t **slot, const char *name, const char *label) {
    if (!*slot && (*slot = agnode(lt->c->g, (char *)name, 1))) {
        dfg_dot_set(*slot, "label", label);
        dfg_dot_set(*slot, "shape", "note");
        dfg_dot_set(*slot, "fillcolor", "#fffbe6");
    }
    return *slot;
}

/* Where the final writes of persistent tensors go (edges into the cylinders would cross the
 * whole drawing): one note per stage, at its bottom. */
static Agnode_t *writes_sink(lifetime *lt, int s) {
    if (s < 0) return NULL;
    if (!lt->writes[s]) {
        char name[32];
        snprintf(name, sizeof(name), "writes%d", s);
        if (!(lt->writes[s] = agnode(lt->cluster[s], name, 1))) return NULL;
        dfg_dot_set(lt->writes[s], "label", "new values of persistent tensors\\n(written in place, in their own bytes)");
        dfg_dot_set(lt->writes[s], "shape", "note");
        dfg_dot_set(lt->writes[s], "fillcolor", "#eef6ee");
    }
    return lt->writes[s];
}

/* The edges of tensor o to its consumers in the window (from the "before" note when its producer
 * is not drawn, to the "after" note when its consumer is not); *n_edges counts them. A tensor made
 * before the window and read after it crosses the whole window: one edge, before -> after. */
static dfg_status consumer_edges(lifetime *lt, const dfg_graph *g, const dfg_tensor *o, int step, Agnode_t *from,
                                 const dfg_consumers *cons, int *n_edges) {
    int step0 = lt->c->plan->stage_step[lt->c->plan->graph_stage[g->id]];
    bool crossed = false;
    for (int q = cons->start[o->id]; q < cons->start[o->id + 1]; q++) {
        const dfg_node *m = cons->node[q];
        if (q > cons->start[o->id] && cons->node[q - 1] == m) continue; /* read twice: one edge */
        Agnode_t *to = m->id < g->n_nodes && g->nodes[m->id] == m ? lt->op[g->id][m->id] : NULL;
        bool across = !from && !to && step < lt->w0 && step0 + m->id > lt->w1;
        if ((!from && !to && (!across || crossed)) || (!from && !lt->before) || (!to && !lt->after)) continue;
        crossed |= across;
        if (!tensor_edge(lt, from ? from : lt->before, to ? to : lt->after, o, *n_edges == 0)) return DFG_ERR_NOMEM;
        ++*n_edges;
    }
    /* a dfg_output made before the window is read by the host after the step: it crosses it too */
    if (!from && !crossed && (o->flags & DFG_TF_OUTPUT) && step < lt->w0 && lt->before && lt->after &&
        !tensor_edge(lt, lt->before, lt->after, o, *n_edges == 0))
        return DFG_ERR_NOMEM;
    return DFG_OK;
}

/* Edges of one node's outputs: to every consumer (labelled once per consumer), to the stage's
 * note of persistent writes (dashed) for the last new value of a persistent tensor, to the host
 * for dfg_outputs. from is NULL for a node outside the window. */
static dfg_status output_edges(lifetime *lt, const dfg_graph *g, const dfg_node *node, Agnode_t *from,
                               const dfg_consumers *cons) {
    bool wrote = false; /* one dashed edge per node: its box names what it writes */
    int step = lt->c->plan->stage_step[lt->c->plan->graph_stage[g->id]] + node->id;
    for (int k = 0; k < node->n_out; k++) {
        const dfg_tensor *o = node->out[k];
        int n_edges = 0;
        if (consumer_edges(lt, g, o, step, from, cons, &n_edges)) return DFG_ERR_NOMEM;
        if (!from) continue;
        if (o->version_of && !n_edges) { /* the last value written: it stays in the persistent bytes */
            n_edges++;
            if (wrote) continue;
            wrote = true;
            Agnode_t *w = writes_sink(lt, lt->c->plan->graph_stage[g->id]);
            Agedge_t *e = w ? agedge(lt->c->g, from, w, NULL, 1) : NULL;
            if (!e) return DFG_ERR_NOMEM;
            dfg_dot_set(e, "style", "dashed");
            dfg_dot_set(e, "color", "#7f7f7f");
        }
        Agnode_t *to = NULL;
        if (o->flags & DFG_TF_OUTPUT) to = sink(lt, &lt->host_out, "host_out", "read by the host\\nafter the step");
        else if (!n_edges) to = sink(lt, &lt->unread, "unread", "outputs nothing reads\\n(bytes free after their step)");
        if ((o->flags & DFG_TF_OUTPUT) || !n_edges) {
            if (!to || !tensor_edge(lt, from, to, o, n_edges == 0)) return DFG_ERR_NOMEM;
        }
    }
    return DFG_OK;
}

static dfg_status graph_edges(lifetime *lt, const dfg_graph *g) {
    dfg_consumers cons;
    if (dfg_consumers_build(lt->c->p, g, &cons)) return DFG_ERR_NOMEM;
    dfg_status st = DFG_OK;
    for (int i = 0; i < g->n_nodes && !st; i++) st = output_edges(lt, g, g->nodes[i], lt->op[g->id][i], &cons);
    dfg_consumers_free(&cons);
    return st;
}

/* ---------------------------------------------------------------- the view */
/* The steps drawn: all of them, or MAX_STEPS around the peak; and the persistent tensors that
 * ops in those steps read or write. */
static void choose_window(lifetime *lt) {
    const dfg_dot_ctx *c = lt->c;
    const dfg_program *p = c->p;
    int n = c->plan->n_steps;
    lt->w0 = 0, lt->w1 = n - 1;
    if (n > MAX_STEPS) {
        lt->w0 = c->r->peak_step - MAX_STEPS / 2;
        if (lt->w0 + MAX_STEPS > n) lt->w0 = n - MAX_STEPS;
        if (lt->w0 < 0) lt->w0 = 0;
        lt->w1 = lt->w0 + MAX_STEPS - 1;
    }
    for (int i = 0; i < p->n_tensors; i++) lt->shown[i] = n <= MAX_STEPS && p->tensors[i]->kind != DFG_TEMP;
    for (int s = 0; s < p->n_stages && n > MAX_STEPS; s++) {
        const dfg_graph *g = p->stages[s].kind == DFG_STAGE_GRAPH ? p->stages[s].graph : NULL;
        for (int i = 0; g && i < g->n_nodes; i++) {
            int step = c->plan->stage_step[s] + i;
            if (step < lt->w0 || step > lt->w1) continue;
            for (int j = 0; j < g->nodes[i]->n_in; j++)
                if (g->nodes[i]->in[j]->kind != DFG_TEMP) lt->shown[g->nodes[i]->in[j]->id] = true;
            for (int k = 0; k < g->nodes[i]->n_out; k++)
                if (g->nodes[i]->out[k]->version_of) lt->shown[g->nodes[i]->out[k]->storage->id] = true;
        }
    }
}

/* The notes that stand for the steps before and after the window, when it has any. */
static dfg_status window_ends(lifetime *lt) {
    if (lt->w0 > 0) {
        if (!(lt->before = agnode(lt->c->g, "before", 1))) return DFG_ERR_NOMEM;
        dfg_dot_setf(lt->before, "label", "steps 0-%d, not drawn\\n(tensors made there)", lt->w0 - 1);
        dfg_dot_set(lt->before, "shape", "note");
        dfg_dot_set(lt->before, "fillcolor", "#eeeeee");
    }
    if (lt->w1 < lt->c->plan->n_steps - 1) {
        if (!(lt->after = agnode(lt->c->g, "after", 1))) return DFG_ERR_NOMEM;
        dfg_dot_setf(lt->after, "label", "steps %d-%d, not drawn\\n(tensors read there)", lt->w1 + 1,
                     lt->c->plan->n_steps - 1);
        dfg_dot_set(lt->after, "shape", "note");
        dfg_dot_set(lt->after, "fillcolor", "#eeeeee");
    }
    return DFG_OK;
}

static dfg_status draw(lifetime *lt) {
    dfg_dot_ctx *c = lt->c;
    const dfg_program *p = c->p;
    declare_defaults(c->g);
    choose_window(lt);
    title(lt);
    dfg_status st = persistent_nodes(lt);
    if (!st) st = window_ends(lt);
    Agnode_t *prev_last = lt->before;
    for (int s = 0; s < p->n_stages && !st; s++) {
        Agnode_t *first, *last;
        st = stage_nodes(lt, s, &first, &last);
        if (!st && prev_last && first) st = chain(c->g, prev_last, first);
        if (last) prev_last = last;
    }
    if (!st && prev_last && lt->after) st = chain(c->g, prev_last, lt->after);
    for (int gi = 0; gi < p->n_graphs && !st; gi++)
        if (c->plan->graph_stage[gi] >= 0) st = graph_edges(lt, p->graphs[gi]);
    return st;
}

dfg_status dfg_dot_build_lifetime(dfg_dot_ctx *c) {
    const dfg_program *p = c->p;
    lifetime lt = {.c = c, .band_base = (int64_t)c->r->persistent_bytes};
    int64_t transient = (int64_t)c->r->arena_bytes - lt.band_base;
    lt.band_bytes = transient > 0 ? (transient + N_BANDS - 1) / N_BANDS : 0;
    lt.op = calloc((size_t)(p->n_graphs ? p->n_graphs : 1), sizeof(*lt.op));
    lt.shown = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), sizeof(*lt.shown));
    lt.writes = calloc((size_t)(p->n_stages ? p->n_stages : 1), sizeof(*lt.writes));
    lt.cluster = calloc((size_t)(p->n_stages ? p->n_stages : 1), sizeof(*lt.cluster));
    dfg_status st = lt.op && lt.shown && lt.writes && lt.cluster ? DFG_OK : DFG_ERR_NOMEM;
    for (int gi = 0; gi < p->n_graphs && !st; gi++) {
        lt.op[gi] = calloc((size_t)(p->graphs[gi]->n_nodes ? p->graphs[gi]->n_nodes : 1), sizeof(**lt.op));
        if (!lt.op[gi]) st = DFG_ERR_NOMEM;
    }
    if (!st) st = draw(&lt);
    for (int gi = 0; lt.op && gi < p->n_graphs; gi++) free(lt.op[gi]);
    free(lt.op);
    free(lt.shown);
    free(lt.writes);
    free(lt.cluster);
    return st;
}
