/* memplan.h - where every tensor lives in the one arena: what the runtime takes from the
 * planner (passes/plan_memory.c). dfg_options.no_reuse makes the planner give every tensor its
 * own bytes, the baseline planning is measured against. */
#ifndef DFG_MEMPLAN_H
#define DFG_MEMPLAN_H

#include "../graph/ir.h"

typedef struct {
    size_t arena_bytes;
    size_t align;
    int n_tensors;
    int64_t *offset; /* [tensor id] byte offset in the arena; views and versions share their storage's */
} dfg_memplan;

void dfg_memplan_free(dfg_memplan *m);

#endif
