/* memplan.h - where every tensor lives in the one arena. The runtime only reads this struct;
 * the planner (passes/) fills it with reuse, and dfg_memplan_naive gives every tensor its own
 * bytes (no reuse), which is always correct and is the baseline the planner is measured by. */
#ifndef DFG_MEMPLAN_H
#define DFG_MEMPLAN_H

#include "../graph/ir.h"

typedef struct {
    size_t arena_bytes;
    size_t align;
    int n_tensors;
    int64_t *offset; /* [tensor id] byte offset in the arena; views and versions share their storage's */
} dfg_memplan;

dfg_status dfg_memplan_naive(const dfg_program *p, size_t align, dfg_memplan *out);
void dfg_memplan_free(dfg_memplan *m);

#endif
