/* dfg_dot.h - Graphviz views of a compiled program's memory plan (built with libcgraph, laid
 * out and rendered to SVG with libgvc). Both views answer "what occupies the peak?" at a glance.
 *
 * DFG_DOT_LIFETIME, the dataflow view (lay out with `dot`):
 *   - one box per scheduled op, labelled "op / node name / step" and the persistent tensors it
 *     reads and writes, in a cluster per stage (a host stage is one node of its own cluster);
 *     invisible edges chain the ops in schedule order, so op k sits on row k and an edge's
 *     length is its tensor's lifetime; nodes added by dfg_backward are tinted blue; nodes the
 *     fuse pass made (DFG_NF_FUSED) have a double border (peripheries=2) and a "[fused]" line,
 *     copies remat added (DFG_NF_RECOMPUTED) a dashed purple border, a lavender fill and a
 *     "[recomputed]" line; the title counts both (and the fuse pass's rewrites by kind);
 *   - persistent tensors (PARAM, STATE, INPUT, CONST) as cylinders in their own cluster, with
 *     shape, bytes, offset and category, filled by category; one with a scope is dashed;
 *   - one edge per tensor read, producer -> consumer, colored by arena offset band (tensors drawn
 *     in one color share bytes at different times); a tensor's first edge is labelled "name /
 *     bytes @ offset / steps first-last" (and "view of", "in place of", "writes"), later ones
 *     with its name; dfg_outputs go to a "read by the host" note, unread outputs to an "unread"
 *     note, final writes of persistent tensors to a note per stage (dashed);
 *   - the peak step's node in red, nodes within 10% of the peak's bytes in pink, the edges of
 *     tensors live at the peak drawn bold (they cross the peak's row); the title holds the
 *     memory report and the biggest buffers live at the peak;
 *   - a program of more than 240 steps is drawn in a window of 240 steps around its peak (more
 *     does not read at a glance, and dot takes minutes on thousands of ops): notes stand for the
 *     steps before and after it, tensors crossing the whole window run from one to the other,
 *     and only the persistent tensors those steps use are drawn; the title says so.
 *
 * DFG_DOT_TIMELINE, the arena over time (lay out with `neato -n2`: positions are pinned, in
 * points):
 *   - one filled box per buffer: x = its lifetime (steps), y = its arena offset, height = its
 *     size, fill = its category, labelled with the owner's name where it fits (every box has a
 *     tooltip with name, shape, bytes, offset and steps, shown on hover in the SVG); a buffer
 *     holding a value made by a recomputed copy shades from its category into lavender with a
 *     dashed border and carries dfg_recomputed=1; the title and legend count them;
 *   - a red line at the peak step, a dashed line at the lower bound, stage boundaries and names,
 *     step and byte axes, and a legend of categories with their bytes at the peak.
 *   The mapping from plan to points is in the graph's attributes dfg_x0, dfg_y0 (the origin),
 *   dfg_step_pt (points per step) and dfg_byte_pt (points per byte): a buffer living from step
 *   a to step b at offset o spans x in [x0 + a*step_pt, x0 + (b+1)*step_pt] and its bottom edge
 *   is at y0 + o*byte_pt. Each buffer node also carries dfg_offset, dfg_size, dfg_first and
 *   dfg_last.
 */
#ifndef DFG_DOT_H
#define DFG_DOT_H

#include <stddef.h>

#include "dfg_passes.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DFG_DOT_LIFETIME, DFG_DOT_TIMELINE, DFG_DOT_MODE_COUNT } dfg_dot_mode;

/* Writes the view of a compiled program as a .dot file ("-": stdout). On failure err holds one
 * line (DFG_ERR_STATE: not compiled; DFG_ERR_IO: the file cannot be written). */
dfg_status dfg_write_dot(const dfg_program *p, const char *path, dfg_dot_mode mode, char *err, size_t len);
/* The same view laid out (dot, or neato -n2 for the timeline) and rendered as SVG to path. */
dfg_status dfg_write_svg(const dfg_program *p, const char *path, dfg_dot_mode mode, char *err, size_t len);
/* Lays out a libcgraph graph with a Graphviz engine ("dot", or "nop2" for positions given in
 * points, as `neato -n2`) and writes it as SVG to path; the same linked-in plugins as above
 * (dfg plot draws its curves with it). */
struct Agraph_s;
/* Sets an attribute of a graph, node or edge (libcgraph takes char * for what it only copies;
 * these keep the callers const-correct). */
void dfg_dot_set(void *obj, const char *attr, const char *value);
void dfg_dot_setf(void *obj, const char *attr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
dfg_status dfg_dot_render_svg(struct Agraph_s *g, const char *engine, const char *path, char *err, size_t len);

/* dfg plot's drawing (dot_plot.c): one panel per series, stacked, against the step; a series'
 * points are means of `per` consecutive steps (1: every step), which its title says. */
typedef struct {
    const char *name;
    const double *step, *value; /* (n) */
    int n, per;
} dfg_plot_series;
dfg_status dfg_plot_svg(const char *title, const dfg_plot_series *s, int n, const char *path, char *err, size_t len);

/* The Graphviz module (libdfg-dot.so, runtime/module.h): what the CLI's dot and plot commands
 * call, so that no other command maps Graphviz. */
typedef struct {
    dfg_status (*write_dot)(const dfg_program *p, const char *path, dfg_dot_mode mode, char *err, size_t len);
    dfg_status (*write_svg)(const dfg_program *p, const char *path, dfg_dot_mode mode, char *err, size_t len);
    dfg_status (*plot_svg)(const char *title, const dfg_plot_series *s, int n, const char *path, char *err, size_t len);
} dfg_dot_api;
#define DFG_MODULE_DOT "libdfg-dot.so"
#define DFG_DOT_MODULE_SYMBOL "dfg_dot_module"
#define DFG_DOT_ABI 1
typedef const dfg_dot_api *(*dfg_dot_module_fn)(int abi); /* NULL for another DFG_DOT_ABI */

#ifdef __cplusplus
}
#endif
#endif
