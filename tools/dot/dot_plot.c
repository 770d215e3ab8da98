/* dot_plot.c - dfg plot's drawing (dfg_dot.h): one panel per metric series, stacked, each a
 * polyline through pinned points with its value range and step range on the axes, built with
 * libcgraph (invisible point nodes at pinned positions, edges between them) and rendered to SVG
 * like dfg dot --svg. tools/cli_plot.c reads the metrics and averages them into the series. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <graphviz/cgraph.h>

#include "dfg_dot.h"

#define PLOT_W 640.0 /* points */
#define PLOT_H 180.0
#define PLOT_GAP 70.0
#define PLOT_LEFT 70.0

static Agnode_t *pinned(Agraph_t *g, const char *name, double x, double y) {
    Agnode_t *n = agnode(g, (char *)name, 1);
    dfg_dot_setf(n, "pos", "%.2f,%.2f!", x, y);
    return n;
}

static void text(Agraph_t *g, const char *id, double x, double y, const char *label, const char *fontsize) {
    Agnode_t *n = pinned(g, id, x, y);
    dfg_dot_set(n, "shape", "plaintext");
    dfg_dot_set(n, "label", label);
    dfg_dot_set(n, "fontsize", fontsize);
}

/* The frame, title and axis labels of panel k, whose values run lo .. hi; y0 is its bottom. */
static void draw_frame(Agraph_t *g, int k, const dfg_plot_series *s, double y0, double lo, double hi, double x_lo,
                       double x_hi) {
    char id[64], label[256];
    snprintf(id, sizeof(id), "frame%d", k);
    Agnode_t *frame = pinned(g, id, PLOT_LEFT + PLOT_W / 2, y0 + PLOT_H / 2);
    dfg_dot_set(frame, "shape", "box");
    dfg_dot_set(frame, "label", "");
    dfg_dot_set(frame, "color", "#999999");
    dfg_dot_setf(frame, "width", "%.3f", PLOT_W / 72.0);
    dfg_dot_setf(frame, "height", "%.3f", PLOT_H / 72.0);
    dfg_dot_set(frame, "fixedsize", "true");
    snprintf(label, sizeof(label), "%.127s%s", s->name, s->per > 1 ? "" : " (every step)");
    if (s->per > 1) snprintf(label + strlen(label), sizeof(label) - strlen(label), " (means of %d steps)", s->per);
    snprintf(id, sizeof(id), "title%d", k);
    text(g, id, PLOT_LEFT + PLOT_W / 2, y0 + PLOT_H + 14, label, "14");
    const double ys[3] = {lo, (lo + hi) / 2, hi};
    for (int t = 0; t < 3; t++) {
        snprintf(id, sizeof(id), "y%d_%d", k, t);
        snprintf(label, sizeof(label), "%.4g", ys[t]);
        text(g, id, PLOT_LEFT - 30, y0 + PLOT_H * t / 2.0, label, "11");
    }
    snprintf(id, sizeof(id), "x%d_lo", k);
    snprintf(label, sizeof(label), "step %.0f", x_lo);
    text(g, id, PLOT_LEFT, y0 - 12, label, "11");
    snprintf(id, sizeof(id), "x%d_hi", k);
    snprintf(label, sizeof(label), "step %.0f", x_hi);
    text(g, id, PLOT_LEFT + PLOT_W, y0 - 12, label, "11");
}

/* One panel: its frame, then the curve. */
static void draw_panel(Agraph_t *g, int k, const dfg_plot_series *s, double y0, double x_lo, double x_hi) {
    static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
    double lo = s->value[0], hi = s->value[0];
    for (int i = 1; i < s->n; i++) lo = fmin(lo, s->value[i]), hi = fmax(hi, s->value[i]);
    if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
    draw_frame(g, k, s, y0, lo, hi, x_lo, x_hi);
    Agnode_t *prev = NULL;
    char id[64];
    for (int i = 0; i < s->n; i++) {
        snprintf(id, sizeof(id), "p%d_%d", k, i);
        double x = PLOT_LEFT + (x_hi > x_lo ? (s->step[i] - x_lo) / (x_hi - x_lo) : 0.5) * PLOT_W;
        Agnode_t *n = pinned(g, id, x, y0 + (s->value[i] - lo) / (hi - lo) * PLOT_H);
        dfg_dot_set(n, "shape", "point");
        dfg_dot_set(n, "width", "0.02");
        dfg_dot_set(n, "color", colors[k % 4]);
        if (prev) {
            Agedge_t *e = agedge(g, prev, n, NULL, 1);
            dfg_dot_set(e, "color", colors[k % 4]);
            dfg_dot_set(e, "penwidth", "1.5");
            dfg_dot_set(e, "dir", "none");
        }
        prev = n;
    }
}

dfg_status dfg_plot_svg(const char *title, const dfg_plot_series *s, int n, const char *path, char *err, size_t len) {
    if (!s || n < 1 || !path) return snprintf(err, len, "plot: no series"), DFG_ERR_ARG;
    for (int k = 0; k < n; k++)
        if (s[k].n < 1) return snprintf(err, len, "plot: series '%s' has no points", s[k].name), DFG_ERR_ARG;
    Agraph_t *g = agopen("metrics", Agdirected, NULL);
    if (!g) return snprintf(err, len, "plot: out of memory"), DFG_ERR_NOMEM;
    dfg_dot_set(g, "splines", "line");
    dfg_dot_set(g, "outputorder", "edgesfirst");
    dfg_dot_setf(g, "label", "%s", title ? title : "");
    dfg_dot_set(g, "labelloc", "t");
    double x_lo = INFINITY, x_hi = -INFINITY;
    for (int k = 0; k < n; k++) x_lo = fmin(x_lo, s[k].step[0]), x_hi = fmax(x_hi, s[k].step[s[k].n - 1]);
    for (int k = 0; k < n; k++) draw_panel(g, k, &s[k], (n - 1 - k) * (PLOT_H + PLOT_GAP) + 30, x_lo, x_hi);
    dfg_status st = dfg_dot_render_svg(g, "nop2", path, err, len);
    agclose(g);
    return st;
}
