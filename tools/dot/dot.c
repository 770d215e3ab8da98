/* dot.c - the Graphviz exporter's driver: checks the program is compiled, gathers what both
 * views draw (bytes live per step, the buffers live at the peak), builds the view with
 * libcgraph and writes it as .dot, or lays it out and renders SVG with libgvc (see dfg_dot.h).
 * Graphviz is only linked here: the passes themselves never depend on it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <graphviz/gvc.h>
#include <graphviz/gvplugin.h>

#include "dot_internal.h"

/* Graphviz's layout engines and SVG renderer, linked in (CMakeLists.txt) instead of found
 * through its plugin configuration. That configuration also loads the pango text-layout plugin,
 * which caches a pointer to a font name owned by the context that used it last: in Graphviz 2.42
 * a layout in a second context, after the first was freed, reads freed memory (AddressSanitizer
 * caught it in test_dot). Without pango, Graphviz measures text with its own Helvetica metrics,
 * which also makes the SVG independent of the fonts a machine has. */
extern gvplugin_library_t gvplugin_core_LTX_library, gvplugin_dot_layout_LTX_library, gvplugin_neato_layout_LTX_library;

static GVC_t *graphviz_context(void) {
    static const lt_symlist_t builtins[] = {{"gvplugin_core_LTX_library", &gvplugin_core_LTX_library},
                                            {"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
                                            {"gvplugin_neato_layout_LTX_library", &gvplugin_neato_layout_LTX_library},
                                            {NULL, NULL}};
    return gvContextPlugins(builtins, 0); /* 0: no demand loading, so no other plugin */
}

/* ---------------------------------------------------------------- helpers for the views */
void dfg_dot_set(void *obj, const char *attr, const char *value) {
    agsafeset(obj, (char *)attr, (char *)value, "");
}

void dfg_dot_setf(void *obj, const char *attr, const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    dfg_dot_set(obj, attr, buf);
}

void dfg_dot_default(Agraph_t *g, int kind, const char *attr, const char *value) {
    agattr(g, kind, (char *)attr, (char *)value);
}

void dfg_dot_append(char *buf, size_t len, size_t *at, const char *fmt, ...) {
    if (*at >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    if (k > 0) *at = *at + (size_t)k < len ? *at + (size_t)k : len;
}

int dfg_dot_root(const dfg_plan *plan, int tensor_id) {
    int b = plan->buf_of[tensor_id];
    while (b >= 0 && plan->bufs[b].merged_into >= 0) b = plan->bufs[b].merged_into;
    return b;
}

const char *dfg_dot_category_color(dfg_category c) {
    /* Tableau 10, lightened where black text must stay readable on the fill */
    static const char *const colors[DFG_CAT_COUNT] = {
        [DFG_CAT_PARAMS] = "#8fb3d9",      [DFG_CAT_BASE_MODEL] = "#4e79a7",      [DFG_CAT_GRADS] = "#f7b267",  [DFG_CAT_OPTIMIZER] = "#c9a3c0",
        [DFG_CAT_REF_MODEL] = "#8cc084",   [DFG_CAT_KV_CACHE] = "#edc948", [DFG_CAT_ACTIVATIONS] = "#ff9da7",
        [DFG_CAT_LOGITS] = "#e15759",      [DFG_CAT_WORKSPACE] = "#bab0ac", [DFG_CAT_OTHER] = "#76b7b2"};
    return (unsigned)c < DFG_CAT_COUNT ? colors[c] : "#ffffff";
}

int dfg_dot_step_where(const dfg_program *p, const dfg_plan *plan, int step, const dfg_node **node) {
    *node = NULL;
    for (int s = 0; s < p->n_stages; s++) {
        if (step < plan->stage_step[s] || step >= plan->stage_step[s + 1]) continue;
        const dfg_stage *st = &p->stages[s];
        int i = step - plan->stage_step[s];
        if (st->kind == DFG_STAGE_GRAPH && i < st->graph->n_nodes) *node = st->graph->nodes[i];
        return s;
    }
    return -1;
}

/* Categories live at the peak, largest first, as "activations 8.0 MiB (66%), ...". */
static void peak_categories(const dfg_report *r, char *buf, size_t len, size_t *at) {
    bool done[DFG_CAT_COUNT] = {false};
    for (int k = 0; k < DFG_CAT_COUNT; k++) {
        int best = -1;
        for (int c = 0; c < DFG_CAT_COUNT; c++)
            if (!done[c] && r->peak[c] && (best < 0 || r->peak[c] > r->peak[best])) best = c;
        if (best < 0) break;
        done[best] = true;
        char b[32];
        dfg_dot_append(buf, len, at, "%s%s %s (%.0f%%)", k ? ", " : "", dfg_category_name((dfg_category)best),
                       dfg_bytes_str((double)r->peak[best], b, sizeof(b)),
                       r->lower_bound_bytes ? 100.0 * (double)r->peak[best] / (double)r->lower_bound_bytes : 0.0);
    }
}

void dfg_dot_summary(const dfg_dot_ctx *c, char *buf, size_t len, size_t *at) {
    const dfg_report *r = c->r;
    char a[32], pb[32], tb[32], lb[32], nb[32];
    double ratio = r->lower_bound_bytes ? (double)r->arena_bytes / (double)r->lower_bound_bytes : 1.0;
    double saved = r->naive_bytes ? 100.0 * (1.0 - (double)r->arena_bytes / (double)r->naive_bytes) : 0.0;
    dfg_dot_append(buf, len, at, "program '%s', target %s: arena %s = %s persistent + %s transient (alignment %zu)\\l",
                   c->p->name, dfg_target_name(r->target), dfg_bytes_str((double)r->arena_bytes, a, sizeof(a)),
                   dfg_bytes_str((double)r->persistent_bytes, pb, sizeof(pb)),
                   dfg_bytes_str((double)(r->arena_bytes - r->persistent_bytes), tb, sizeof(tb)), r->align);
    dfg_dot_append(buf, len, at, "lower bound %s (arena / lower bound = %.2f), naive %s (planning saves %.0f%%), "
                   "placement ordering '%s'\\l", dfg_bytes_str((double)r->lower_bound_bytes, lb, sizeof(lb)), ratio,
                   dfg_bytes_str((double)r->naive_bytes, nb, sizeof(nb)), saved, r->placement ? r->placement : "?");
    const dfg_node *node;
    int s = dfg_dot_step_where(c->p, c->plan, r->peak_step, &node);
    dfg_dot_append(buf, len, at, "peak at step %d of %d (stage '%s'%s%s%s): ", r->peak_step, r->n_steps,
                   s >= 0 ? c->p->stages[s].name : "?", node ? ", node '" : "", node ? node->name : "", node ? "'" : "");
    peak_categories(r, buf, len, at);
    dfg_dot_append(buf, len, at, "\\lbiggest at the peak:");
    for (int i = 0; i < c->n_near_peak && i < 5; i++) {
        const dfg_buf *b = &c->plan->bufs[c->near_peak[i]];
        dfg_dot_append(buf, len, at, "%s '%s' %s", i ? "," : "", c->p->tensors[b->owner]->name,
                       dfg_bytes_str((double)b->size, a, sizeof(a)));
    }
    dfg_dot_append(buf, len, at, "\\l");
}

/* ---------------------------------------------------------------- what both views draw */
static int by_size_desc(const void *x, const void *y, void *ctx) {
    const dfg_buf *bufs = ctx, *a = &bufs[*(const int *)x], *b = &bufs[*(const int *)y];
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    return a->owner - b->owner;
}

static dfg_status gather(dfg_dot_ctx *c) {
    const dfg_plan *plan = c->plan;
    int n = plan->n_steps;
    c->live = calloc((size_t)n + 1, sizeof(int64_t));
    c->near_peak = malloc(sizeof(int) * (size_t)(plan->n_bufs ? plan->n_bufs : 1));
    if (!c->live || !c->near_peak) return DFG_ERR_NOMEM;
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *x = &plan->bufs[b];
        if (x->merged_into >= 0 || x->life.first < 0) continue;
        c->live[x->life.first] += x->size; /* a difference array, summed below */
        c->live[x->life.last + 1] -= x->size;
        if (x->life.first <= c->r->peak_step && c->r->peak_step <= x->life.last) c->near_peak[c->n_near_peak++] = b;
    }
    for (int s = 1; s < n; s++) c->live[s] += c->live[s - 1];
    qsort_r(c->near_peak, (size_t)c->n_near_peak, sizeof(int), by_size_desc, plan->bufs);
    return DFG_OK;
}

static void fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static void ctx_free(dfg_dot_ctx *c) {
    if (c->g) agclose(c->g);
    free(c->live);
    free(c->near_peak);
}

static dfg_status build(const dfg_program *p, dfg_dot_mode mode, dfg_dot_ctx *c, char *err, size_t len) {
    *c = (dfg_dot_ctx){.p = p};
    if (!p || (unsigned)mode >= DFG_DOT_MODE_COUNT) return fail(err, len, "dot: NULL program or unknown view"), DFG_ERR_ARG;
    if (!dfg_is_compiled(p))
        return fail(err, len, "dot: program '%s' is not compiled (dfg_compile it first)", p->name), DFG_ERR_STATE;
    c->plan = p->plan;
    c->r = &p->plan->report;
    dfg_status st = gather(c);
    if (!st) {
        c->g = agopen(p->name, Agdirected, NULL);
        if (!c->g) st = DFG_ERR_NOMEM;
    }
    if (!st) st = mode == DFG_DOT_LIFETIME ? dfg_dot_build_lifetime(c) : dfg_dot_build_timeline(c);
    if (st) fail(err, len, "dot: out of memory drawing program '%s'", p->name);
    return st;
}

/* ---------------------------------------------------------------- output */
static FILE *open_out(const char *path, char *err, size_t len) {
    if (!path || !*path) return fail(err, len, "dot: no output path"), NULL;
    if (!strcmp(path, "-")) return stdout;
    FILE *f = fopen(path, "w");
    if (!f) fail(err, len, "%s: cannot write: %s", path, strerror(errno));
    return f;
}

static dfg_status close_out(FILE *f, const char *path, bool ok, char *err, size_t len) {
    ok = !ferror(f) && ok;
    if (f == stdout) ok = fflush(f) == 0 && ok;
    else ok = fclose(f) == 0 && ok;
    if (ok) return DFG_OK;
    fail(err, len, "%s: write failed: %s", path, errno ? strerror(errno) : "Graphviz could not write the graph");
    return DFG_ERR_IO;
}

dfg_status dfg_write_dot(const dfg_program *p, const char *path, dfg_dot_mode mode, char *err, size_t len) {
    dfg_dot_ctx c;
    dfg_status st = build(p, mode, &c, err, len);
    FILE *f = st ? NULL : open_out(path, err, len);
    if (!st && !f) st = DFG_ERR_IO;
    if (!st) {
        errno = 0;
        st = close_out(f, path, agwrite(c.g, f) != EOF, err, len);
    }
    ctx_free(&c);
    return st;
}

dfg_status dfg_dot_render_svg(Agraph_t *g, const char *engine, const char *path, char *err, size_t len) {
    FILE *f = open_out(path, err, len);
    if (!f) return DFG_ERR_IO;
    GVC_t *gvc = graphviz_context();
    dfg_status st = DFG_OK;
    if (!gvc) st = DFG_ERR_NOMEM, fail(err, len, "dot: cannot start Graphviz (out of memory)");
    if (!st && gvLayout(gvc, g, engine) != 0) {
        st = DFG_ERR_RUNTIME;
        fail(err, len, "%s: Graphviz could not lay out the graph with '%s'", path, engine);
    } else if (!st) {
        errno = 0;
        bool ok = gvRender(gvc, g, "svg", f) == 0;
        gvFreeLayout(gvc, g);
        st = close_out(f, path, ok, err, len);
        f = NULL;
    }
    if (f && f != stdout) fclose(f);
    if (gvc) gvFreeContext(gvc);
    return st;
}

dfg_status dfg_write_svg(const dfg_program *p, const char *path, dfg_dot_mode mode, char *err, size_t len) {
    dfg_dot_ctx c;
    dfg_status st = build(p, mode, &c, err, len);
    /* nop2 is `neato -n2`: positions as given, in points */
    if (!st) st = dfg_dot_render_svg(c.g, mode == DFG_DOT_LIFETIME ? "dot" : "nop2", path, err, len);
    ctx_free(&c);
    return st;
}
