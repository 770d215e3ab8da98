/* cli_dot.c - `dfg dot P.dfg [-o OUT.dot] [--timeline] [--svg]`: the Graphviz views of a plan's
 * memory (tools/dot/dfg_dot.h, in the Graphviz module libdfg-dot.so, which only dfg dot and dfg
 * plot open). The plan is compiled as dfg run compiles it, so the drawing shows the bytes the run
 * will use. */
#include <stdio.h>
#include <string.h>

#include "../runtime/module.h"
#include "dot/dfg_dot.h"
#include "cli.h"

#define CMD "dot"

/* Leaks inside Graphviz 2.42, once per drawing, that LeakSanitizer would report in sanitizer
 * builds: dot keeps the virtual nodes and edges of cluster skeletons, neato -n a mode string.
 * Graphviz has no frame pointers, so the fast unwinder sees only its allocator in libgvc: the
 * suppressions name its libraries (libcgraph, where dfg's graphs live, stays checked). The hook
 * is read by LeakSanitizer; other builds never call it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libgvc.so\nleak:libgvplugin_\n"; }

typedef struct {
    const char *plan, *output;
    bool timeline, svg;
} dot_args;

static void usage(FILE *f) {
    fprintf(f, "usage: dfg dot P.dfg [-o OUT.dot] [--timeline] [--svg]\n"
               "\n"
               "Draws a plan's memory with Graphviz.\n"
               "\n"
               "  (default)     the dataflow: one box per op in schedule order, a cluster per stage,\n"
               "                persistent tensors as cylinders, tensor edges labelled name / bytes @\n"
               "                arena offset / steps and colored by arena region; the peak step in red;\n"
               "                fused ops with a double border and [fused], recomputed copies (under a\n"
               "                memory budget) dashed and lavender with [recomputed].\n"
               "                A program of more than 240 steps is drawn in 240 steps around its peak.\n"
               "                Lay out with: dot -Tsvg OUT.dot -o OUT.svg\n"
               "  --timeline    the arena over time: a box per buffer at x = its steps, y = its offset,\n"
               "                height = its bytes, filled by category, with the peak and the lower\n"
               "                bound marked; buffers written by recomputed copies shade into lavender,\n"
               "                dashed. Positions are pinned: neato -n2 -Tsvg OUT.dot -o OUT.svg\n"
               "  -o OUT.dot    where to write (default: P.dot or P.timeline.dot beside the plan;\n"
               "                '-' writes to stdout)\n"
               "  --svg         also render OUT.svg with Graphviz's libraries (no dot binary needed);\n"
               "                with -o X.svg the picture is X.svg and the .dot X.dot\n");
}

static int parse_args(int argc, char **argv, dot_args *d) {
    static const cli_option opts[] = {{"-o", true},     {"--output", true}, {"--timeline", false}, {"--svg", false},
                                      {"--help", false}, {"-h", false},     {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val;
    *d = (dot_args){0};
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        if (k == CLI_ARG_POSITIONAL) {
            if (d->plan) return cli_error(CMD, CLI_USAGE, "one plan file at a time (got '%s' and '%s')", d->plan, val);
            d->plan = val;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(opt, "--timeline")) d->timeline = true;
        else if (!strcmp(opt, "--svg")) d->svg = true;
        else d->output = val;
    }
    if (!d->plan) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the plan file (P.dfg, made by dfg compile)");
    }
    if (d->output && !*d->output) return cli_error(CMD, CLI_USAGE, "-o needs a file name");
    if (d->svg && d->output && !strcmp(d->output, "-"))
        return cli_error(CMD, CLI_USAGE, "--svg needs a file name for -o (the SVG is written beside it)");
    return CLI_OK;
}

/* "dir/P.dfg" -> "dir/P<suffix>"; "OUT.dot" -> "OUT<suffix>" (the extension replaced). */
static void replace_ext(const char *path, const char *ext, const char *suffix, char *out, size_t len) {
    size_t n = strlen(path), e = strlen(ext);
    const char *slash = strrchr(path, '/');
    if (n > e && !strcmp(path + n - e, ext) && (!slash || path + n - e > slash + 1)) n -= e;
    snprintf(out, len, "%.*s%s", (int)n, path, suffix);
}

const dfg_dot_api *cli_dot_module(const char *cmd) {
    dfg_dot_module_fn entry = NULL;
    char err[1200];
    if (dfg_module_open(DFG_MODULE_DOT, DFG_DOT_MODULE_SYMBOL, (void **)&entry, err, sizeof(err)))
        return cli_error(cmd, CLI_FAILED, "no Graphviz drawings: %s", err), NULL;
    const dfg_dot_api *api = entry(DFG_DOT_ABI);
    if (!api) cli_error(cmd, CLI_FAILED, "%s was built for another dfg: rebuild dfg", DFG_MODULE_DOT);
    return api;
}

int cli_dot(int argc, char **argv) {
    dot_args d;
    int rc = parse_args(argc, argv, &d);
    if (rc) return rc < 0 ? CLI_OK : rc;
    char dot_path[4096], svg_path[4096], err[1024];
    size_t out_len = d.output ? strlen(d.output) : 0;
    if (d.svg && out_len > 4 && !strcmp(d.output + out_len - 4, ".svg")) {
        /* -o X.svg --svg: the picture goes where it was asked for, the .dot beside it */
        snprintf(svg_path, sizeof(svg_path), "%s", d.output);
        replace_ext(svg_path, ".svg", ".dot", dot_path, sizeof(dot_path));
    } else {
        if (d.output) snprintf(dot_path, sizeof(dot_path), "%s", d.output);
        else replace_ext(d.plan, ".dfg", d.timeline ? ".timeline.dot" : ".dot", dot_path, sizeof(dot_path));
        replace_ext(dot_path, ".dot", ".svg", svg_path, sizeof(svg_path));
    }
    dfg_program *p = NULL;
    dfg_plan_info info;
    if ((rc = cli_load_plan(CMD, d.plan, &p, &info))) return rc;
    dfg_dot_mode mode = d.timeline ? DFG_DOT_TIMELINE : DFG_DOT_LIFETIME;
    const char *view = d.timeline ? "arena timeline" : "dataflow and lifetimes";
    bool to_stdout = !strcmp(dot_path, "-");
    const dfg_dot_api *dot = cli_dot_module(CMD);
    if (!dot) rc = CLI_FAILED;
    else if (dot->write_dot(p, dot_path, mode, err, sizeof(err))) rc = cli_error(CMD, CLI_FAILED, "%s", err);
    else if (!to_stdout) printf("wrote %s (%s of '%s'; lay it out with %s)\n", dot_path, view, dfg_program_name(p),
                                d.timeline ? "neato -n2" : "dot");
    if (!rc && d.svg) {
        if (dot->write_svg(p, svg_path, mode, err, sizeof(err))) rc = cli_error(CMD, CLI_FAILED, "%s", err);
        else printf("wrote %s\n", svg_path);
    }
    dfg_program_free(p);
    dfg_plan_info_free(&info);
    return rc;
}
