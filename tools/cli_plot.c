/* cli_plot.c - `dfg plot METRICS.jsonl [-o OUT.svg] [--y reward,kl]`: curves of a run's metrics.
 *
 * Reads the JSON lines `dfg run --metrics` writes (one object per step: "step" and each metric;
 * null where a step did not update it) and draws one panel per metric, stacked, against the
 * step: a polyline through the values, the value range and the step range on the axes. Long
 * runs are averaged into at most PLOT_POINTS buckets of consecutive steps (the panel's title says
 * how many steps a point is), so a curve shows the trend rather than sampling noise. Drawn with
 * libcgraph (invisible point nodes at pinned positions, edges between them) and rendered to SVG
 * by Graphviz's libraries, like dfg dot --svg. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <graphviz/cgraph.h>

#include "dot/dfg_dot.h"
#include "cli.h"

#define CMD "plot"
#define PLOT_MAX_SERIES 8
#define PLOT_POINTS 400
#define PLOT_W 640.0 /* points */
#define PLOT_H 180.0
#define PLOT_GAP 70.0
#define PLOT_LEFT 70.0

typedef struct {
    char name[128];
    double *step, *value; /* the steps that have the metric */
    int n, cap;
} series;

static void usage(FILE *f) {
    fprintf(f, "usage: dfg plot METRICS.jsonl [-o OUT.svg] [--y NAME[,NAME...]]\n"
               "\n"
               "Draws the curves of a run's metrics (the JSON lines of dfg run --metrics) as an SVG,\n"
               "one panel per metric against the step. Runs longer than %d steps are shown as means\n"
               "of consecutive steps (each panel's title says how many).\n"
               "\n"
               "  -o OUT.svg     where to write (default: METRICS.svg beside the input)\n"
               "  --y NAMES      the metrics, comma-separated (default: reward and kl when the file\n"
               "                 has them, else its first two metrics)\n",
            PLOT_POINTS);
}

static bool add_point(series *s, double step, double v) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *a = realloc(s->step, sizeof(double) * (size_t)cap), *b = a ? realloc(s->value, sizeof(double) * (size_t)cap) : NULL;
        if (a) s->step = a;
        if (!a || !b) return false;
        s->value = b, s->cap = cap;
    }
    s->step[s->n] = step, s->value[s->n++] = v;
    return true;
}

/* Not a metric: the keys dfg run adds to every line. */
static bool is_bookkeeping(const char *k) {
    return !strcmp(k, "step") || !strcmp(k, "ms") || !strcmp(k, "tokens_per_s") || !strcmp(k, "arena_bytes");
}

/* The default metrics: reward and kl when present, else the first two metrics of line one. */
static int default_names(const cJSON *first, char names[][128]) {
    int n = 0;
    if (cJSON_GetObjectItemCaseSensitive(first, "reward")) snprintf(names[n++], 128, "reward");
    if (cJSON_GetObjectItemCaseSensitive(first, "kl")) snprintf(names[n++], 128, "kl");
    if (n) return n;
    for (const cJSON *it = first ? first->child : NULL; it && n < 2; it = it->next)
        if (it->string && !is_bookkeeping(it->string)) snprintf(names[n++], 128, "%s", it->string);
    return n;
}

/* Reads the file into one series per name; names empty: the defaults from the first line. */
static int read_series(const char *path, const char *wanted, series *s, int *n_series) {
    void *data = NULL;
    size_t size = 0;
    if (!cli_read_file(CMD, path, &data, &size)) return CLI_USAGE;
    char *text = data, names[PLOT_MAX_SERIES][128];
    int n_names = 0, rc = CLI_OK, line_no = 0;
    if (wanted)
        for (const char *p = wanted; *p && n_names < PLOT_MAX_SERIES;) {
            size_t k = strcspn(p, ",");
            if (k == 0 || k >= 128) return free(data), cli_error(CMD, CLI_USAGE, "--y: bad metric list '%s'", wanted);
            snprintf(names[n_names++], 128, "%.*s", (int)k, p);
            p += k + (p[k] == ',');
        }
    for (char *line = text, *next; rc == CLI_OK && line && line < text + size; line = next) {
        next = memchr(line, '\n', (size_t)(text + size - line));
        if (next) *next++ = '\0';
        line_no++;
        if (!line[strspn(line, " \t\r")]) continue;
        cJSON *o = cJSON_Parse(line);
        const cJSON *st = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        if (!cJSON_IsObject(o) || !cJSON_IsNumber(st))
            rc = cli_error(CMD, CLI_USAGE, "%s:%d: not a line of dfg run --metrics (a JSON object with \"step\")", path,
                           line_no);
        if (!rc && n_names == 0 && (n_names = default_names(o, names)) == 0)
            rc = cli_error(CMD, CLI_USAGE, "%s: no metrics in its first line", path);
        for (int i = 0; !rc && i < n_names; i++) {
            if (*n_series <= i) snprintf(s[(*n_series)++].name, 128, "%.127s", names[i]);
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, names[i]);
            if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && !add_point(&s[i], st->valuedouble, v->valuedouble))
                rc = cli_error(CMD, CLI_FAILED, "out of memory");
        }
        cJSON_Delete(o);
    }
    free(data);
    for (int i = 0; !rc && i < *n_series; i++)
        if (s[i].n == 0) rc = cli_error(CMD, CLI_USAGE, "%s: no values of '%s' (metrics there: see its lines)", path, s[i].name);
    if (!rc && *n_series == 0) rc = cli_error(CMD, CLI_USAGE, "%s: empty", path);
    return rc;
}

/* Averages runs of `per` consecutive points in place; returns the new count. */
static int bucket_means(series *s, int per) {
    int m = 0;
    for (int i = 0; i < s->n; i += per, m++) {
        int k = s->n - i < per ? s->n - i : per;
        double st = 0, v = 0;
        for (int j = 0; j < k; j++) st += s->step[i + j], v += s->value[i + j];
        s->step[m] = st / k, s->value[m] = v / k;
    }
    return m;
}

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

/* One panel: frame, axis labels, title, the curve. y0 is the panel's bottom. */
static void draw_panel(Agraph_t *g, int k, series *s, int per, double y0, double x_lo, double x_hi) {
    static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
    double lo = s->value[0], hi = s->value[0];
    for (int i = 1; i < s->n; i++) lo = fmin(lo, s->value[i]), hi = fmax(hi, s->value[i]);
    if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
    char id[64], label[256];
    snprintf(id, sizeof(id), "frame%d", k);
    Agnode_t *frame = pinned(g, id, PLOT_LEFT + PLOT_W / 2, y0 + PLOT_H / 2);
    dfg_dot_set(frame, "shape", "box");
    dfg_dot_set(frame, "label", "");
    dfg_dot_set(frame, "color", "#999999");
    dfg_dot_setf(frame, "width", "%.3f", PLOT_W / 72.0);
    dfg_dot_setf(frame, "height", "%.3f", PLOT_H / 72.0);
    dfg_dot_set(frame, "fixedsize", "true");
    snprintf(label, sizeof(label), "%.127s%s", s->name, per > 1 ? "" : " (every step)");
    if (per > 1) snprintf(label + strlen(label), sizeof(label) - strlen(label), " (means of %d steps)", per);
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
    Agnode_t *prev = NULL;
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

static int draw(const char *in, const char *out, series *s, int n_series) {
    Agraph_t *g = agopen("metrics", Agdirected, NULL);
    if (!g) return cli_error(CMD, CLI_FAILED, "out of memory");
    dfg_dot_set(g, "splines", "line");
    dfg_dot_set(g, "outputorder", "edgesfirst");
    dfg_dot_setf(g, "label", "%s", in);
    dfg_dot_set(g, "labelloc", "t");
    double x_lo = INFINITY, x_hi = -INFINITY;
    for (int k = 0; k < n_series; k++) x_lo = fmin(x_lo, s[k].step[0]), x_hi = fmax(x_hi, s[k].step[s[k].n - 1]);
    for (int k = 0; k < n_series; k++) {
        int per = (s[k].n + PLOT_POINTS - 1) / PLOT_POINTS;
        s[k].n = bucket_means(&s[k], per);
        draw_panel(g, k, &s[k], per, (n_series - 1 - k) * (PLOT_H + PLOT_GAP) + 30, x_lo, x_hi);
    }
    char err[1024];
    dfg_status st = dfg_dot_render_svg(g, "nop2", out, err, sizeof(err));
    agclose(g);
    if (st) return cli_error(CMD, CLI_FAILED, "%s", err);
    cli_say("wrote %s (", out);
    for (int k = 0; k < n_series; k++) cli_say("%s%s", k ? ", " : "", s[k].name);
    cli_say(" over steps %.0f-%.0f)\n", x_lo, x_hi);
    return CLI_OK;
}

int cli_plot(int argc, char **argv) {
    static const cli_option opts[] = {{"-o", true}, {"--output", true}, {"--y", true}, {"--help", false}, {"-h", false},
                                      {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val, *in = NULL, *out = NULL, *wanted = NULL;
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        if (k == CLI_ARG_POSITIONAL) {
            if (in) return cli_error(CMD, CLI_USAGE, "one metrics file at a time (got '%s' and '%s')", in, val);
            in = val;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return CLI_OK;
        } else if (!strcmp(opt, "--y")) wanted = val;
        else out = val;
    }
    if (!in) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the metrics file (dfg run --metrics FILE.jsonl)");
    }
    char out_buf[4096];
    if (!out) {
        size_t n = strlen(in);
        if (n > 6 && !strcmp(in + n - 6, ".jsonl")) n -= 6;
        snprintf(out_buf, sizeof(out_buf), "%.*s.svg", (int)n, in);
        out = out_buf;
    }
    series s[PLOT_MAX_SERIES] = {0};
    int n_series = 0;
    int rc = read_series(in, wanted, s, &n_series);
    if (!rc) rc = draw(in, out, s, n_series);
    for (int k = 0; k < PLOT_MAX_SERIES; k++) free(s[k].step), free(s[k].value);
    return rc;
}
