/* dot_timeline.c - the arena over time (dfg_dot.h): one box per buffer, x = its steps, y = its
 * offset, height = its size, filled by category (tinted lavender and dashed when remat's
 * recomputed copies write it), with the peak, the lower bound, stage boundaries, axes and a
 * legend. Every position is pinned in points for `neato -n2`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot_internal.h"

/* The plot area in points; margins hold the axes' labels, the legend sits to the right. */
#define PLOT_W 1400.0
#define PLOT_H 900.0
#define X0 110.0
#define Y0 60.0
#define MIN_BOX_PT 0.75 /* thinner boxes vanish in a renderer; offsets stay exact at the bottom edge */
#define LABEL_PT 8.0    /* font size of the names inside boxes */
#define RECOMPUTED_TINT "#c9b3ea" /* lavender, as the recomputed copies in the lifetime view */

typedef struct {
    dfg_dot_ctx *c;
    double step_pt, byte_pt;
    int n_extra; /* counter for the names of decoration nodes */
    int n_recomputed; /* buffers written by recomputed copies */
    bool oom;    /* an allocation failed: the view is incomplete */
} timeline;

/* A filled box from (x, y) to (x + w, y + h), in points; pos is its center, size in inches. */
static Agnode_t *box(timeline *tl, const char *name, double x, double y, double w, double h, const char *fill) {
    char auto_name[32];
    if (!name) snprintf(auto_name, sizeof(auto_name), "deco%d", tl->n_extra++), name = auto_name;
    Agnode_t *n = agnode(tl->c->g, (char *)name, 1);
    if (!n) {
        tl->oom = true;
        return NULL;
    }
    dfg_dot_setf(n, "pos", "%.3f,%.3f", x + w / 2, y + h / 2);
    dfg_dot_setf(n, "width", "%.5f", w / 72.0);
    dfg_dot_setf(n, "height", "%.5f", h / 72.0);
    dfg_dot_set(n, "fillcolor", fill);
    return n;
}

/* Width of a line of Helvetica at a font size, roughly (0.55 em per character on average). */
static double text_width(const char *s, int size) { return 0.55 * size * (double)strlen(s); }

/* Text centered at (x, y), in points. */
static Agnode_t *text(timeline *tl, double x, double y, const char *label, const char *color, int size) {
    Agnode_t *n = box(tl, NULL, x - 1, y - 1, 2, 2, "none");
    if (!n) return NULL;
    dfg_dot_set(n, "shape", "plaintext");
    dfg_dot_set(n, "fixedsize", "false");
    dfg_dot_set(n, "label", label);
    dfg_dot_set(n, "fontcolor", color);
    dfg_dot_setf(n, "fontsize", "%d", size);
    return n;
}

static Agnode_t *line(timeline *tl, double x, double y, double w, double h, const char *color) {
    Agnode_t *n = box(tl, NULL, x, y, w, h, color);
    if (n) {
        dfg_dot_set(n, "color", color);
        dfg_dot_set(n, "penwidth", "0");
    }
    return n;
}

static void declare_defaults(Agraph_t *g) {
    dfg_dot_default(g, AGRAPH, "fontname", "Helvetica");
    dfg_dot_default(g, AGRAPH, "fontsize", "14");
    dfg_dot_default(g, AGRAPH, "bgcolor", "white");
    dfg_dot_default(g, AGNODE, "shape", "box");
    dfg_dot_default(g, AGNODE, "style", "filled");
    dfg_dot_default(g, AGNODE, "fixedsize", "shape"); /* no warnings for labels wider than a box */
    dfg_dot_default(g, AGNODE, "fontname", "Helvetica");
    dfg_dot_default(g, AGNODE, "fontsize", "8");
    dfg_dot_default(g, AGNODE, "penwidth", "0.4");
    dfg_dot_default(g, AGNODE, "color", "#333333");
    dfg_dot_default(g, AGNODE, "margin", "0");
    /* blank, not empty: an empty default is not written out, and readers would then label every
     * box with its node name */
    dfg_dot_default(g, AGNODE, "label", " ");
}

/* ---------------------------------------------------------------- buffers */
/* The names of the buffers merged into root b (outputs placed in place), for its tooltip. */
static void merged_names(const dfg_dot_ctx *c, int b, char *buf, size_t len, size_t *at) {
    int n = 0;
    for (int x = 0; x < c->plan->n_bufs; x++) {
        if (x == b || dfg_dot_root(c->plan, c->plan->bufs[x].owner) != b) continue;
        dfg_dot_append(buf, len, at, "%s%s", n++ ? ", " : "; in place: ", c->p->tensors[c->plan->bufs[x].owner]->name);
    }
}

/* Is a value in root buffer b made by a copy remat added? Those bytes are what recompute costs
 * in memory: they live only from the copy to the backward reads, not across the peak. */
static bool recomputed_buffer(const dfg_dot_ctx *c, int b) {
    for (int x = 0; x < c->plan->n_bufs; x++) {
        const dfg_tensor *t = c->p->tensors[c->plan->bufs[x].owner];
        if ((x == b || dfg_dot_root(c->plan, t->id) == b) && t->producer && (t->producer->flags & DFG_NF_RECOMPUTED))
            return true;
    }
    return false;
}

/* Category fill shading into lavender (a gradient keeps the category readable) and a dashed
 * border: a box written by a recomputed copy. */
static void tint_recomputed(Agnode_t *n, dfg_category cat) {
    dfg_dot_setf(n, "fillcolor", "%s:%s", dfg_dot_category_color(cat), RECOMPUTED_TINT);
    dfg_dot_set(n, "gradientangle", "90");
    dfg_dot_set(n, "style", "filled,dashed");
    dfg_dot_set(n, "color", "#6a3d9a");
}

static dfg_status buffer_box(timeline *tl, int b) {
    const dfg_dot_ctx *c = tl->c;
    const dfg_buf *x = &c->plan->bufs[b];
    const dfg_tensor *t = c->p->tensors[x->owner];
    double left = X0 + x->life.first * tl->step_pt, w = (x->life.last - x->life.first + 1) * tl->step_pt;
    double bottom = Y0 + (double)x->offset * tl->byte_pt, h = (double)x->size * tl->byte_pt;
    if (h < MIN_BOX_PT) h = MIN_BOX_PT;
    char name[32], tip[2048], sb[32], ob[32], shape[96];
    snprintf(name, sizeof(name), "buf%d", b);
    Agnode_t *n = box(tl, name, left, bottom, w, h, dfg_dot_category_color(x->cat));
    if (!n) return DFG_ERR_NOMEM;
    size_t at = 0;
    dfg_dot_append(tip, sizeof(tip), &at, "%s: %s %s, %s at offset %s, steps %d-%d, %s", t->name, dfg_dtype_name(t->dtype),
                   dfg_shape_str(t->shape, shape, sizeof(shape)), dfg_bytes_str((double)x->size, sb, sizeof(sb)),
                   dfg_bytes_str((double)x->offset, ob, sizeof(ob)), x->life.first, x->life.last, dfg_category_name(x->cat));
    if (recomputed_buffer(c, b)) {
        tl->n_recomputed++;
        tint_recomputed(n, x->cat);
        dfg_dot_set(n, "dfg_recomputed", "1");
        dfg_dot_append(tip, sizeof(tip), &at, ", written by a recomputed copy (remat)");
    }
    merged_names(c, b, tip, sizeof(tip), &at); /* last: readers split its list at commas */
    dfg_dot_set(n, "tooltip", tip);
    /* the name inside when it fits */
    if (h >= LABEL_PT + 2 && w >= text_width(t->name, (int)LABEL_PT) + 4) dfg_dot_set(n, "label", t->name);
    dfg_dot_setf(n, "dfg_offset", "%lld", (long long)x->offset);
    dfg_dot_setf(n, "dfg_size", "%lld", (long long)x->size);
    dfg_dot_setf(n, "dfg_first", "%d", x->life.first);
    dfg_dot_setf(n, "dfg_last", "%d", x->life.last);
    return DFG_OK;
}

/* ---------------------------------------------------------------- decorations */
/* A round tick spacing: 1, 2 or 5 times a power of ten, giving about `want` ticks. */
static double tick_step(double range, int want) {
    double raw = range / want, p = 1;
    while (p * 10 <= raw) p *= 10;
    while (p > raw && p > 1) p /= 10;
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

static void axes(timeline *tl) {
    const dfg_dot_ctx *c = tl->c;
    char buf[64];
    int n_steps = c->plan->n_steps;
    line(tl, X0, Y0 - 1, PLOT_W, 1, "#333333");
    line(tl, X0 - 1, Y0, 1, PLOT_H, "#333333");
    double sx = tick_step(n_steps, 14);
    for (double s = 0; s <= n_steps; s += sx) {
        line(tl, X0 + s * tl->step_pt, Y0 - 5, 1, 4, "#333333");
        snprintf(buf, sizeof(buf), "%.0f", s);
        text(tl, X0 + s * tl->step_pt, Y0 - 14, buf, "#333333", 10);
    }
    text(tl, X0 + PLOT_W / 2, Y0 - 34, "step (one per scheduled op or host stage)", "#333333", 12);
    /* byte ticks on a binary scale so the labels come out round */
    double arena = (double)c->r->arena_bytes, unit = 1;
    while (unit * 1024 <= arena / 2) unit *= 1024;
    double sy = tick_step(arena / unit, 10) * unit;
    for (double y = 0; y <= arena; y += sy) {
        line(tl, X0 - 5, Y0 + y * tl->byte_pt, 4, 1, "#333333");
        text(tl, X0 - 40, Y0 + y * tl->byte_pt, dfg_bytes_str(y, buf, sizeof(buf)), "#333333", 10);
    }
    text(tl, X0 - 50, Y0 + PLOT_H + 32, "arena offset", "#333333", 12);
}

static void stages(timeline *tl) {
    const dfg_dot_ctx *c = tl->c;
    const dfg_program *p = c->p;
    for (int s = 0; s < p->n_stages; s++) {
        double a = X0 + c->plan->stage_step[s] * tl->step_pt, b = X0 + c->plan->stage_step[s + 1] * tl->step_pt;
        if (s > 0) line(tl, a - 0.5, Y0, 1, PLOT_H, "#9e9e9e");
        char label[300];
        snprintf(label, sizeof(label), "%s%s", p->stages[s].name, p->stages[s].kind == DFG_STAGE_HOST ? " (host)" : "");
        text(tl, (a + b) / 2, Y0 + PLOT_H + 14, label, "#555555", 10);
    }
}

static void peak_and_bound(timeline *tl) {
    const dfg_dot_ctx *c = tl->c;
    const dfg_report *r = c->r;
    char label[512], lb[32], pb[32];
    double x = X0 + (r->peak_step + 0.5) * tl->step_pt;
    line(tl, x - 1, Y0, 2, PLOT_H, "#d62728");
    const dfg_node *node;
    int s = dfg_dot_step_where(c->p, c->plan, r->peak_step, &node);
    snprintf(label, sizeof(label), "peak: step %d, %s live (stage '%s'%s%s%s)", r->peak_step,
             dfg_bytes_str((double)r->lower_bound_bytes, lb, sizeof(lb)), s >= 0 ? c->p->stages[s].name : "?",
             node ? ", node '" : "", node ? node->name : "", node ? "'" : "");
    text(tl, x, Y0 + PLOT_H + 32, label, "#d62728", 12);
    double y = Y0 + (double)r->lower_bound_bytes * tl->byte_pt;
    Agnode_t *n = line(tl, X0, y - 0.5, PLOT_W, 1, "#555555");
    if (n) dfg_dot_set(n, "style", "filled,dashed");
    snprintf(label, sizeof(label), "lower bound %s", lb);
    text(tl, X0 + PLOT_W + 60, y, label, "#555555", 10);
    y = Y0 + (double)r->persistent_bytes * tl->byte_pt;
    line(tl, X0, y - 0.5, PLOT_W, 1, "#000000");
    snprintf(label, sizeof(label), "persistent %s", dfg_bytes_str((double)r->persistent_bytes, pb, sizeof(pb)));
    text(tl, X0 + PLOT_W + 60, y, label, "#000000", 10);
}

static void legend(timeline *tl) {
    const dfg_report *r = tl->c->r;
    bool present[DFG_CAT_COUNT] = {false};
    for (int b = 0; b < tl->c->plan->n_bufs; b++) present[tl->c->plan->bufs[b].cat] = true;
    double x = X0 + PLOT_W + 140, y = Y0 + PLOT_H - 20;
    const char *head = "category: bytes at the peak";
    text(tl, x + text_width(head, 12) / 2, y + 24, head, "#000000", 12);
    char label[128], sb[32];
    for (int cat = 0; cat < DFG_CAT_COUNT; cat++) {
        if (!present[cat]) continue;
        box(tl, NULL, x, y - 6, 14, 12, dfg_dot_category_color((dfg_category)cat));
        snprintf(label, sizeof(label), "%s: %s", dfg_category_name((dfg_category)cat),
                 dfg_bytes_str((double)r->peak[cat], sb, sizeof(sb)));
        text(tl, x + 20 + text_width(label, 11) / 2, y, label, "#000000", 11);
        y -= 20;
    }
    if (tl->n_recomputed) {
        Agnode_t *n = box(tl, NULL, x, y - 6, 14, 12, "white");
        if (n) tint_recomputed(n, DFG_CAT_ACTIVATIONS);
        snprintf(label, sizeof(label), "recomputed (remat): %d buffer%s", tl->n_recomputed, tl->n_recomputed == 1 ? "" : "s");
        text(tl, x + 20 + text_width(label, 11) / 2, y, label, "#000000", 11);
    }
}

static void title(timeline *tl) {
    char buf[4096];
    size_t at = 0;
    dfg_dot_append(buf, sizeof(buf), &at, "arena timeline: x = step, y = offset in the arena, box = one buffer "
                   "(height = its bytes, fill = its category; hover for details)\\l");
    dfg_dot_summary(tl->c, buf, sizeof(buf), &at);
    if (tl->n_recomputed)
        dfg_dot_append(buf, sizeof(buf), &at, "dashed boxes shading into lavender: %d buffer%s written by copies remat "
                       "added to recompute activations in the backward (%d node%s, +%.1f%% flops)\\l", tl->n_recomputed,
                       tl->n_recomputed == 1 ? "" : "s", tl->c->r->recomputed_nodes, tl->c->r->recomputed_nodes == 1 ? "" : "s",
                       tl->c->r->flops > 0 ? 100.0 * tl->c->r->extra_flops / tl->c->r->flops : 0.0);
    dfg_dot_set(tl->c->g, "label", buf);
    dfg_dot_set(tl->c->g, "labelloc", "t");
    dfg_dot_set(tl->c->g, "labeljust", "l");
}

dfg_status dfg_dot_build_timeline(dfg_dot_ctx *c) {
    timeline tl = {.c = c};
    int n_steps = c->plan->n_steps > 0 ? c->plan->n_steps : 1;
    tl.step_pt = PLOT_W / n_steps;
    tl.byte_pt = c->r->arena_bytes ? PLOT_H / (double)c->r->arena_bytes : 1.0;
    declare_defaults(c->g);
    dfg_dot_set(c->g, "comment", "render with: neato -n2 -Tsvg THIS.dot -o THIS.svg (positions are pinned, in points)");
    dfg_dot_setf(c->g, "dfg_x0", "%.3f", X0);
    dfg_dot_setf(c->g, "dfg_y0", "%.3f", Y0);
    dfg_dot_setf(c->g, "dfg_step_pt", "%.9g", tl.step_pt);
    dfg_dot_setf(c->g, "dfg_byte_pt", "%.9g", tl.byte_pt);
    for (int b = 0; b < c->plan->n_bufs; b++) {
        const dfg_buf *x = &c->plan->bufs[b];
        if (x->merged_into >= 0 || x->life.first < 0) continue;
        if (buffer_box(&tl, b)) return DFG_ERR_NOMEM;
    }
    title(&tl); /* after the buffers: it counts the recomputed ones */
    /* drawn after the buffers so that they lie on top */
    stages(&tl);
    peak_and_bound(&tl);
    axes(&tl);
    legend(&tl);
    return tl.oom ? DFG_ERR_NOMEM : DFG_OK;
}
