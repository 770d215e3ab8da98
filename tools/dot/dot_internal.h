/* dot_internal.h - what the two Graphviz views (dot_lifetime.c, dot_timeline.c) share with
 * their driver (dot.c): the plan facts they draw and small attribute helpers over libcgraph. */
#ifndef DFG_DOT_INTERNAL_H
#define DFG_DOT_INTERNAL_H

#include <graphviz/cgraph.h>

#include "dfg_dot.h"
#include "../../passes/plan.h"

typedef struct {
    const dfg_program *p;
    const dfg_plan *plan;
    const dfg_report *r;
    int64_t *live;   /* [n_steps] bytes live at each step (the lower bound is their maximum) */
    int *near_peak;  /* [top] root buffers live at the peak step, largest first */
    int n_near_peak;
    Agraph_t *g;
} dfg_dot_ctx;

/* dfg_dot_set, dfg_dot_setf: dfg_dot.h */
/* Declares an attribute with its default for every object of a kind (AGRAPH, AGNODE, AGEDGE). */
void dfg_dot_default(Agraph_t *g, int kind, const char *attr, const char *value);

/* The buffer that holds the tensor's bytes after in-place merging, or -1. */
int dfg_dot_root(const dfg_plan *plan, int tensor_id);
/* Fill color of a memory category (the same in both views and their legends). */
const char *dfg_dot_category_color(dfg_category c);
/* The stage that runs a step; *node is the node at that step (NULL for a host stage). */
int dfg_dot_step_where(const dfg_program *p, const dfg_plan *plan, int step, const dfg_node **node);
/* Appends to buf (used so far: *at) the report lines both titles share, each ending in "\l". */
void dfg_dot_summary(const dfg_dot_ctx *c, char *buf, size_t len, size_t *at);
/* Appends printf output to buf at *at, never past len. */
void dfg_dot_append(char *buf, size_t len, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Build the view in c->g; DFG_ERR_NOMEM when an allocation fails. */
dfg_status dfg_dot_build_lifetime(dfg_dot_ctx *c);
dfg_status dfg_dot_build_timeline(dfg_dot_ctx *c);

#endif
