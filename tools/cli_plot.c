/* cli_plot.c - `dfg plot METRICS.jsonl [-o OUT.svg] [--y reward,kl]`: curves of a run's metrics.
 *
 * Reads the JSON lines `dfg run --metrics` writes (one object per step: "step" and each metric;
 * null where a step did not update it) and draws one panel per metric, stacked, against the
 * step: a polyline through the values, the value range and the step range on the axes. Long
 * runs are averaged into at most PLOT_POINTS buckets of consecutive steps (the panel's title says
 * how many steps a point is), so a curve shows the trend rather than sampling noise. Drawn by the
 * Graphviz module (tools/dot/dot_plot.c, opened only by dfg dot and dfg plot), like dfg dot --svg. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dot/dfg_dot.h"
#include "cli.h"

#define CMD "plot"
#define PLOT_MAX_SERIES 8
#define PLOT_POINTS 400

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

/* Averages each series into at most PLOT_POINTS points and draws them with the Graphviz module. */
static int draw(const char *in, const char *out, series *s, int n_series) {
    const dfg_dot_api *dot = cli_dot_module(CMD);
    if (!dot) return CLI_FAILED;
    dfg_plot_series ps[PLOT_MAX_SERIES];
    double x_lo = INFINITY, x_hi = -INFINITY;
    for (int k = 0; k < n_series; k++) {
        x_lo = fmin(x_lo, s[k].step[0]), x_hi = fmax(x_hi, s[k].step[s[k].n - 1]);
        int per = (s[k].n + PLOT_POINTS - 1) / PLOT_POINTS;
        s[k].n = bucket_means(&s[k], per);
        ps[k] = (dfg_plot_series){.name = s[k].name, .step = s[k].step, .value = s[k].value, .n = s[k].n, .per = per};
    }
    char err[1024];
    if (dot->plot_svg(in, ps, n_series, out, err, sizeof(err))) return cli_error(CMD, CLI_FAILED, "%s", err);
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
