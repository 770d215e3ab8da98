/* test_dot.c - the Graphviz exporter (tools/dot/dfg_dot.h): the .dot files of a small program and of
 * the GPT-2 training example parse with Graphviz's own reader (agread) and lay out and render
 * with its libraries (dot for the dataflow view, neato -n2 for the timeline), and they draw every
 * tensor of the plan; the lifetime view has one box per scheduled op and marks the peak; the
 * timeline's boxes sit exactly where the plan puts the buffers (positions parsed back) and, like
 * the plan, never overlap while they are live together; errors are reported, not crashed on.
 * The compiler's own nodes are marked: under a memory budget that makes remat recompute, every
 * fused node of the GPT-2 plan has a double border and a [fused] tag, every recomputed copy a
 * dashed border and a [recomputed] tag, the title counts both, and the timeline tints exactly
 * the buffers recomputed copies write; a plan without a budget shows no recompute marks.
 *
 * The GPT-2 program comes from the gpt2_train_pipeline module next to this executable, as in
 * test_planfile. */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include "graph/ir.h"
#include "tools/dot/dfg_dot.h"
#include "passes/plan.h"
#include "testutil.h"

/* Leaks inside Graphviz 2.42 that LeakSanitizer would otherwise report in sanitizer builds: dot
 * keeps the virtual nodes and edges of cluster skeletons, neato -n keeps a mode string, and the
 * context with pango (this test's own, see gvc below) keeps font tables. Graphviz is built
 * without frame pointers, so the fast unwinder sees only its allocator: the suppressions name
 * its libraries (libcgraph, where the graphs dfg builds live, stays checked). The hook is read
 * by LeakSanitizer; other builds never call it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:libgvc.so\nleak:libgvplugin_\nleak:libfontconfig.so\nleak:libpango\n";
}

/* ---------------------------------------------------------------- programs */
/* A host stage, a scoped input, a matmul, a pointwise op that may run in place, a view, a
 * state written in place, a metric, gradients and outputs: every kind of edge the view draws. */
static dfg_program *small_program(void) {
    dfg_program *p = dfg_program_new("small");
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(8, 8), dfg_init_normal(0, 0.1f));
    dfg_tensor *acc = dfg_state(p, "acc", DFG_F32, DFG_SHAPE(4, 8), DFG_ROLE_GRAD, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "main");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(4, 8));
    dfg_set_scope(p, x, "data", "main");
    dfg_tensor *h = dfg_name(dfg_matmul(g, x, w, false, false), "h");          /* (4, 8) */
    dfg_tensor *a = dfg_name(dfg_gelu(g, h), "a");                            /* (4, 8) */
    dfg_tensor *s = dfg_sum(g, dfg_reshape(g, a, DFG_SHAPE(32)), 0);           /* () */
    dfg_accumulate(g, acc, a);
    dfg_metric(g, "total", s);
    dfg_tensor *gw;
    dfg_backward(g, s, &w, 1, &gw);
    dfg_output(g, gw, "grad_w");
    dfg_stage_host(p, "data", "fill_x");
    dfg_stage_graph(p, g, 1);
    CHECK(!dfg_program_status(p), "small program: %s", dfg_program_error(p));
    return p;
}

/* More steps than the lifetime view draws: a chain of n additions that starts from `keep` and
 * ends reading it again, so it crosses any window, with a big temporary halfway: the peak. */
static dfg_program *long_program(int n) {
    dfg_program *p = dfg_program_new("long");
    dfg_graph *g = dfg_graph_new(p, "chain");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(16));
    dfg_tensor *keep = dfg_name(dfg_scale(g, x, 2.0f), "keep");
    dfg_tensor *y = dfg_add(g, x, keep);
    for (int i = 0; i < n; i++) {
        y = dfg_add_scalar(g, y, 1.0f);
        if (i == n / 2) y = dfg_sum(g, dfg_expand(g, dfg_reshape(g, y, DFG_SHAPE(1, 16)), DFG_SHAPE(256, 16)), 0);
    }
    dfg_output(g, dfg_add(g, y, keep), "out");
    dfg_stage_graph(p, g, 1);
    CHECK(!dfg_program_status(p), "long program: %s", dfg_program_error(p));
    return p;
}

static dfg_program *gpt2_program(void *lib) {
    dfg_status st;
    dfg_program *p = dfg_test_gpt2_program(lib, NULL, &st);
    CHECK(st == DFG_OK && !dfg_program_status(p), "pipeline: %s", dfg_program_error(p));
    return p;
}

static bool compile(dfg_program *p) {
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    dfg_status st = dfg_compile(p, &o);
    CHECK(st == DFG_OK, "compile '%s': %s", dfg_program_name(p), dfg_program_error(p));
    return st == DFG_OK;
}

/* ---------------------------------------------------------------- reading the files back */
static Agraph_t *read_graph(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f, "%s: cannot open", path);
    if (!f) return NULL;
    Agraph_t *g = agread(f, NULL);
    fclose(f);
    CHECK(g, "%s: Graphviz cannot parse it", path);
    return g;
}

static const char *attr(void *obj, const char *name) {
    const char *v = agget(obj, (char *)name);
    return v ? v : "";
}

/* One Graphviz context, with its full plugin configuration as `dot` has, for the whole test:
 * Graphviz 2.42's pango plugin reads freed memory when a second context lays out after the
 * first was freed (tools/dot/dot.c avoids that plugin; this test uses it on purpose). */
static GVC_t *gvc;

/* Lays the graph out with the engine and renders SVG in memory: what `dot -Tsvg` does. */
static void check_renders(Agraph_t *g, const char *engine, const char *what) {
    int rc = gvLayout(gvc, g, engine);
    CHECK(rc == 0, "%s: layout with %s failed", what, engine);
    if (rc == 0) {
        char *svg = NULL;
        unsigned int n = 0;
        CHECK(gvRenderData(gvc, g, "svg", &svg, &n) == 0 && svg && strstr(svg, "<svg"), "%s: no SVG rendered", what);
        gvFreeRenderData(svg);
        gvFreeLayout(gvc, g);
    }
}

/* The names a view shows, one per drawn tensor: the first line of edge labels and cylinder
 * labels (lifetime), the tooltip's "name:" and its in-place list (timeline). */
typedef struct {
    char **s;
    int n, cap;
} names;

static void add_name(names *ns, const char *s, size_t len) {
    if (ns->n == ns->cap) {
        ns->cap = ns->cap ? 2 * ns->cap : 256;
        ns->s = realloc(ns->s, sizeof(char *) * (size_t)ns->cap);
    }
    ns->s[ns->n] = strndup(s, len);
    ns->n++;
}

static void add_first_line(names *ns, const char *label) {
    const char *nl = strstr(label, "\\n");
    add_name(ns, label, nl ? (size_t)(nl - label) : strlen(label));
}

static bool has_name(const names *ns, const char *s) {
    for (int i = 0; i < ns->n; i++)
        if (!strcmp(ns->s[i], s)) return true;
    return false;
}

static void free_names(names *ns) {
    for (int i = 0; i < ns->n; i++) free(ns->s[i]);
    free(ns->s);
}

/* Every buffer owner (persistent or not, merged in place or not) and every other tensor with a
 * lifetime is named somewhere in the view. New values of persistent tensors that nothing reads
 * afterwards are the exception: they have no bytes of their own, and their op's box names the
 * tensor it writes. */
static void check_all_tensors_named(const dfg_program *p, const names *ns, bool buffers_only, const char *what) {
    const dfg_plan *plan = p->plan;
    int missing = 0;
    for (int b = 0; b < plan->n_bufs; b++) {
        const char *name = p->tensors[plan->bufs[b].owner]->name;
        if (!has_name(ns, name) && missing++ < 5) CHECK(false, "%s: buffer owner '%s' is not drawn", what, name);
    }
    for (int i = 0; i < p->n_tensors && !buffers_only; i++)
        if (plan->life[i].first >= 0 && !p->tensors[i]->version_of && !has_name(ns, p->tensors[i]->name) &&
            missing++ < 5)
            CHECK(false, "%s: tensor '%s' (steps %d-%d) is not drawn", what, p->tensors[i]->name, plan->life[i].first,
                  plan->life[i].last);
    CHECK(missing == 0, "%s: %d tensors missing", what, missing);
}

/* ---------------------------------------------------------------- the lifetime view */
static void check_lifetime(const dfg_program *p, const char *path, const char *what) {
    Agraph_t *g = read_graph(path);
    if (!g) return;
    names ns = {0};
    int ops = 0, peaks = 0, bold = 0;
    for (Agnode_t *n = agfstnode(g); n; n = agnxtnode(g, n)) {
        const char *label = attr(n, "label");
        if (!strncmp(agnameof(n), "op", 2)) ops++;
        if (strstr(label, "PEAK")) peaks++;
        if (!strcmp(attr(n, "shape"), "cylinder")) add_first_line(&ns, label);
        for (Agedge_t *e = agfstout(g, n); e; e = agnxtout(g, e)) {
            if (*attr(e, "xlabel")) add_first_line(&ns, attr(e, "xlabel"));
            bold += !strcmp(attr(e, "penwidth"), "3");
        }
    }
    int scheduled = 0;
    for (int s = 0; s < p->n_stages; s++)
        if (p->stages[s].kind == DFG_STAGE_GRAPH) scheduled += p->stages[s].graph->n_nodes;
    CHECK(ops == scheduled, "%s: %d op boxes for %d scheduled nodes", what, ops, scheduled);
    CHECK(peaks == 1, "%s: %d nodes marked as the peak", what, peaks);
    CHECK(bold > 0, "%s: no edge marked live at the peak", what);
    CHECK(strstr(attr(g, "label"), "lower bound") != NULL, "%s: the title lacks the memory report", what);
    check_all_tensors_named(p, &ns, false, what);
    free_names(&ns);
    check_renders(g, "dot", what);
    agclose(g);
}

/* ---------------------------------------------------------------- the timeline view */
typedef struct {
    double left, right, bottom, top;
    int64_t offset, size;
    int first, last;
} drawn_box;

/* Parses one buffer box back and checks it against the plan's buffer. */
static bool check_box(Agnode_t *n, const dfg_buf *b, const double scale[4], drawn_box *d, const char *what) {
    double x, y, w, h;
    if (sscanf(attr(n, "pos"), "%lf,%lf", &x, &y) != 2 || sscanf(attr(n, "width"), "%lf", &w) != 1 ||
        sscanf(attr(n, "height"), "%lf", &h) != 1) {
        CHECK(false, "%s: %s has no position", what, agnameof(n));
        return false;
    }
    w *= 72, h *= 72;
    *d = (drawn_box){x - w / 2, x + w / 2, y - h / 2, y + h / 2, b->offset, b->size, b->life.first, b->life.last};
    double x0 = scale[0], y0 = scale[1], step_pt = scale[2], byte_pt = scale[3], eps = 0.01;
    bool ok = strtoll(attr(n, "dfg_offset"), NULL, 10) == b->offset && strtoll(attr(n, "dfg_size"), NULL, 10) == b->size &&
              atoi(attr(n, "dfg_first")) == b->life.first && atoi(attr(n, "dfg_last")) == b->life.last;
    ok = ok && fabs(d->left - (x0 + b->life.first * step_pt)) < eps && fabs(d->right - (x0 + (b->life.last + 1) * step_pt)) < eps;
    ok = ok && fabs(d->bottom - (y0 + (double)b->offset * byte_pt)) < eps && h >= (double)b->size * byte_pt - eps;
    if ((double)b->size * byte_pt > 1) ok = ok && fabs(h - (double)b->size * byte_pt) < eps;
    CHECK(ok, "%s: %s is drawn at [%.2f, %.2f] x [%.2f, %.2f], the plan says steps %d-%d, offset %lld, %lld bytes", what,
          agnameof(n), d->left, d->right, d->bottom, d->top, b->life.first, b->life.last, (long long)b->offset,
          (long long)b->size);
    return ok;
}

/* Boxes of buffers live at a common step never overlap in y (the plan's own guarantee, seen in
 * the drawing); tiny boxes are drawn a little taller than their bytes, so compare offsets. */
static void check_no_overlap(const drawn_box *d, int n, const char *what) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            bool together = d[i].first <= d[j].last && d[j].first <= d[i].last;
            bool share = d[i].offset < d[j].offset + d[j].size && d[j].offset < d[i].offset + d[i].size;
            bad += together && share;
        }
    CHECK(bad == 0, "%s: %d pairs of boxes live together overlap", what, bad);
}

static void check_timeline(const dfg_program *p, const char *path, const char *what) {
    Agraph_t *g = read_graph(path);
    if (!g) return;
    const dfg_plan *plan = p->plan;
    double scale[4];
    const char *keys[4] = {"dfg_x0", "dfg_y0", "dfg_step_pt", "dfg_byte_pt"};
    for (int k = 0; k < 4; k++) scale[k] = atof(attr(g, keys[k]));
    CHECK(scale[2] > 0 && scale[3] > 0, "%s: no scale attributes", what);
    drawn_box *d = calloc((size_t)plan->n_bufs + 1, sizeof(*d));
    names ns = {0};
    int n_boxes = 0, roots = 0;
    for (int b = 0; b < plan->n_bufs; b++) roots += plan->bufs[b].merged_into < 0;
    for (Agnode_t *n = agfstnode(g); n; n = agnxtnode(g, n)) {
        int b;
        if (sscanf(agnameof(n), "buf%d", &b) != 1) continue;
        CHECK(b >= 0 && b < plan->n_bufs && plan->bufs[b].merged_into < 0, "%s: box %s is no root buffer", what, agnameof(n));
        if (b < 0 || b >= plan->n_bufs) continue;
        if (check_box(n, &plan->bufs[b], scale, &d[n_boxes], what)) n_boxes++;
        const char *tip = attr(n, "tooltip"), *colon = strchr(tip, ':'), *merged = strstr(tip, "in place: ");
        add_name(&ns, tip, colon ? (size_t)(colon - tip) : strlen(tip));
        for (const char *s = merged ? merged + 10 : NULL; s && *s;) {
            size_t k = strcspn(s, ",");
            add_name(&ns, s, k);
            s += k;
            s += strspn(s, ", ");
        }
    }
    CHECK(n_boxes == roots, "%s: %d boxes drawn where they belong, %d buffers", what, n_boxes, roots);
    check_no_overlap(d, n_boxes, what);
    check_all_tensors_named(p, &ns, true, what);
    free_names(&ns);
    free(d);
    check_renders(g, "nop2", what);
    agclose(g);
}

/* ---------------------------------------------------------------- marks of fused and recomputed nodes */
/* Scheduled nodes with a flag. */
static int flagged_nodes(const dfg_program *p, uint32_t flag) {
    int n = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int i = 0; p->stages[s].kind == DFG_STAGE_GRAPH && i < p->stages[s].graph->n_nodes; i++)
            n += (p->stages[s].graph->nodes[i]->flags & flag) != 0;
    return n;
}

/* Root buffers holding a value made by a recomputed copy (the boxes the timeline tints). */
static int recomputed_buffers(const dfg_program *p) {
    const dfg_plan *plan = p->plan;
    int n = 0;
    for (int b = 0; b < plan->n_bufs; b++) {
        if (plan->bufs[b].merged_into >= 0 || plan->bufs[b].life.first < 0) continue;
        bool any = false;
        for (int x = 0; x < plan->n_bufs && !any; x++) {
            const dfg_tensor *t = p->tensors[plan->bufs[x].owner];
            int root = x;
            while (plan->bufs[root].merged_into >= 0) root = plan->bufs[root].merged_into;
            any = root == b && t->producer && (t->producer->flags & DFG_NF_RECOMPUTED);
        }
        n += any;
    }
    return n;
}

/* The lifetime view of a program drawn whole: op boxes tagged [fused] have a double border and
 * are the fused nodes; boxes tagged [recomputed] are dashed and are remat's copies; the title
 * counts both. */
static void check_lifetime_marks(const dfg_program *p, const char *path, const char *what) {
    Agraph_t *g = read_graph(path);
    if (!g) return;
    int fused = 0, recomputed = 0, bad = 0;
    for (Agnode_t *n = agfstnode(g); n; n = agnxtnode(g, n)) {
        if (strncmp(agnameof(n), "op", 2)) continue;
        const char *label = attr(n, "label");
        bool f = strstr(label, "[fused") != NULL, r = strstr(label, "recomputed]") != NULL;
        fused += f, recomputed += r;
        bad += f != !strcmp(attr(n, "peripheries"), "2");
        bad += r != (strstr(attr(n, "style"), "dashed") != NULL);
    }
    int want_fused = flagged_nodes(p, DFG_NF_FUSED), want_rec = flagged_nodes(p, DFG_NF_RECOMPUTED);
    const dfg_report *r = dfg_program_report(p);
    CHECK(fused == want_fused && recomputed == want_rec && want_rec == r->recomputed_nodes,
          "%s: %d boxes tagged fused (%d fused nodes), %d tagged recomputed (%d copies, report %d)", what, fused, want_fused,
          recomputed, want_rec, r->recomputed_nodes);
    CHECK(bad == 0, "%s: %d op boxes whose border disagrees with their tag", what, bad);
    char want[160];
    snprintf(want, sizeof(want), "tag [fused]: %d node", want_fused);
    CHECK(strstr(attr(g, "label"), want) != NULL, "%s: the title lacks '%s'", what, want);
    snprintf(want, sizeof(want), "tag [recomputed]: %d cop", want_rec);
    CHECK(strstr(attr(g, "label"), want) != NULL, "%s: the title lacks '%s'", what, want);
    agclose(g);
}

/* The timeline tints (gradient fill, dashed border, dfg_recomputed) exactly the buffers written
 * by recomputed copies, and its title and legend say how many. */
static void check_timeline_marks(const dfg_program *p, const char *path, const char *what) {
    Agraph_t *g = read_graph(path);
    if (!g) return;
    int tinted = 0, bad = 0, want = recomputed_buffers(p);
    for (Agnode_t *n = agfstnode(g); n; n = agnxtnode(g, n)) {
        if (strncmp(agnameof(n), "buf", 3)) continue;
        bool mark = !strcmp(attr(n, "dfg_recomputed"), "1");
        tinted += mark;
        bad += mark != (strstr(attr(n, "style"), "dashed") && strchr(attr(n, "fillcolor"), ':') &&
                        strstr(attr(n, "tooltip"), "recomputed copy"));
    }
    CHECK(tinted == want, "%s: %d boxes tinted as recomputed, %d buffers hold recomputed values", what, tinted, want);
    CHECK(bad == 0, "%s: %d boxes whose tint disagrees with their mark", what, bad);
    if (want) {
        char text[96];
        snprintf(text, sizeof(text), "%d buffer%s written by copies remat", want, want == 1 ? "" : "s");
        CHECK(strstr(attr(g, "label"), text) != NULL, "%s: the title lacks '%s'", what, text);
        bool legend = false;
        for (Agnode_t *n = agfstnode(g); n && !legend; n = agnxtnode(g, n)) legend = strstr(attr(n, "label"), "recomputed (remat)");
        CHECK(legend, "%s: the legend lacks the recomputed entry", what);
    }
    agclose(g);
}

/* Writes both views of p to `file` in the temporary directory and checks them with lifetime and
 * timeline, labelled "<what> lifetime<suffix>" and "<what> timeline<suffix>". */
typedef void (*view_check)(const dfg_program *p, const char *path, const char *what);
static void check_both(const dfg_program *p, const char *what, const char *file, const char *suffix,
                       view_check lifetime, view_check timeline) {
    char err[512], label[128];
    const char *dot = dfg_test_tmp_path(file);
    snprintf(label, sizeof(label), "%s lifetime%s", what, suffix);
    CHECK(dfg_write_dot(p, dot, DFG_DOT_LIFETIME, err, sizeof(err)) == DFG_OK, "%s: %s", label, err);
    lifetime(p, dot, label);
    snprintf(label, sizeof(label), "%s timeline%s", what, suffix);
    CHECK(dfg_write_dot(p, dot, DFG_DOT_TIMELINE, err, sizeof(err)) == DFG_OK, "%s: %s", label, err);
    timeline(p, dot, label);
    unlink(dot);
}

static void check_marks(const dfg_program *p, const char *what) {
    check_both(p, what, "marks.dot", " marks", check_lifetime_marks, check_timeline_marks);
}

/* ---------------------------------------------------------------- both views of a program */
static void check_views(const dfg_program *p, const char *what) {
    check_both(p, what, "view.dot", "", check_lifetime, check_timeline);
    char err[512];
    const char *svg = dfg_test_tmp_path("view.svg");
    for (int mode = 0; mode < DFG_DOT_MODE_COUNT; mode++) {
        CHECK(dfg_write_svg(p, svg, (dfg_dot_mode)mode, err, sizeof(err)) == DFG_OK, "%s svg %d: %s", what, mode, err);
        FILE *f = fopen(svg, "r");
        char head[512] = "";
        size_t k = f ? fread(head, 1, sizeof(head) - 1, f) : 0;
        head[k] = '\0';
        if (f) fclose(f);
        CHECK(strstr(head, "<svg") != NULL, "%s svg %d: the file does not start an SVG", what, mode);
        unlink(svg);
    }
}

/* A long program is drawn in a window of steps around the peak, and says so. */
static void test_window(void) {
    dfg_program *p = long_program(400);
    char err[512];
    const char *dot = dfg_test_tmp_path("long.dot");
    if (!compile(p) || dfg_write_dot(p, dot, DFG_DOT_LIFETIME, err, sizeof(err))) {
        CHECK(false, "long program: %s", err);
        dfg_program_free(p);
        return;
    }
    Agraph_t *g = read_graph(dot);
    int ops = 0, crossing = 0;
    for (Agnode_t *n = g ? agfstnode(g) : NULL; n; n = agnxtnode(g, n)) {
        ops += !strncmp(agnameof(n), "op", 2);
        for (Agedge_t *e = agfstout(g, n); e; e = agnxtout(g, e))
            crossing += !strcmp(agnameof(n), "before") && !strcmp(agnameof(aghead(e)), "after") &&
                        !strncmp(attr(e, "xlabel"), "keep\\n", 6);
    }
    CHECK(ops == 240, "long program: %d op boxes drawn, expected the 240-step window", ops);
    CHECK(crossing == 1, "long program: 'keep' does not cross the window (%d edges)", crossing);
    CHECK(g && strstr(attr(g, "label"), "showing steps"), "long program: the title does not say it shows a window");
    if (g) check_renders(g, "dot", "long program");
    if (g) agclose(g);
    unlink(dot);
    dfg_program_free(p);
}

static void test_errors(void) {
    char err[512] = "";
    dfg_program *p = small_program();
    dfg_status st = dfg_write_dot(p, dfg_test_tmp_path("x.dot"), DFG_DOT_LIFETIME, err, sizeof(err));
    CHECK(st == DFG_ERR_STATE && strstr(err, "is not compiled"), "uncompiled program: %d '%s'", st, err);
    if (compile(p)) {
        st = dfg_write_dot(p, "/nonexistent-dir/x.dot", DFG_DOT_TIMELINE, err, sizeof(err));
        CHECK(st == DFG_ERR_IO && strstr(err, "/nonexistent-dir/x.dot: cannot write"), "bad path: %d '%s'", st, err);
        st = dfg_write_svg(p, "/nonexistent-dir/x.svg", DFG_DOT_LIFETIME, err, sizeof(err));
        CHECK(st == DFG_ERR_IO && strstr(err, "cannot write"), "bad svg path: %d '%s'", st, err);
        st = dfg_write_dot(p, dfg_test_tmp_path("x.dot"), (dfg_dot_mode)7, err, sizeof(err));
        CHECK(st == DFG_ERR_ARG, "unknown view: %d '%s'", st, err);
        CHECK(dfg_write_dot(NULL, "x.dot", DFG_DOT_LIFETIME, err, sizeof(err)) == DFG_ERR_ARG, "NULL program");
    }
    dfg_program_free(p);
}

/* The GPT-2 plan under a budget between its persistent bytes and its arena: remat recomputes
 * (the tightest of a few budgets that compiles), and both views draw and mark it. */
static void test_budget_marks(void *lib, const dfg_report *r0) {
    static const double fractions[] = {0.7, 0.8, 0.9};
    for (size_t k = 0; k < sizeof(fractions) / sizeof(fractions[0]); k++) {
        int64_t budget = (int64_t)r0->persistent_bytes +
                         (int64_t)(fractions[k] * (double)(r0->arena_bytes - r0->persistent_bytes));
        dfg_program *p = gpt2_program(lib);
        dfg_options o = dfg_options_default(DFG_TARGET_CPU);
        o.memory_budget = budget;
        if (dfg_compile(p, &o) != DFG_OK) { /* too tight for remat: the next budget */
            dfg_program_free(p);
            continue;
        }
        const dfg_report *r = dfg_program_report(p);
        printf("gpt2 under a budget of %lld bytes: arena %zu -> %zu, %d fused nodes, %d recomputed\n", (long long)budget,
               r0->arena_bytes, r->arena_bytes, flagged_nodes(p, DFG_NF_FUSED), r->recomputed_nodes);
        CHECK(r->recomputed_nodes > 0 && flagged_nodes(p, DFG_NF_FUSED) > 0 && recomputed_buffers(p) > 0,
              "gpt2 budget: %d recomputed, %d fused, %d recomputed buffers", r->recomputed_nodes,
              flagged_nodes(p, DFG_NF_FUSED), recomputed_buffers(p));
        check_views(p, "gpt2 budget");
        check_marks(p, "gpt2 budget");
        dfg_program_free(p);
        return;
    }
    CHECK(false, "gpt2: no budget between persistent %zu and arena %zu compiles", r0->persistent_bytes, r0->arena_bytes);
}

int main(void) {
    dfg_test_init("test_dot");
    if (!dfg_test_tmpdir_create("dfg_test_dot")) return 1;
    gvc = gvContext();
    test_errors();
    test_window();
    dfg_program *p = small_program();
    if (compile(p)) check_views(p, "small");
    dfg_program_free(p);
    void *lib = dfg_test_gpt2_pipeline();
    if (lib) {
        p = gpt2_program(lib);
        if (compile(p)) {
            const dfg_report *r = dfg_program_report(p);
            CHECK(flagged_nodes(p, DFG_NF_FUSED) > 0 && r->recomputed_nodes == 0, "gpt2: %d fused nodes, %d recomputed",
                  flagged_nodes(p, DFG_NF_FUSED), r->recomputed_nodes);
            check_views(p, "gpt2");
            check_marks(p, "gpt2");
            test_budget_marks(lib, r);
        }
        dfg_program_free(p);
        dlclose(lib);
    }
    dfg_test_tmpdir_remove();
    gvFreeContext(gvc);
    return dfg_test_finish();
}
