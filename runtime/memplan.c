/* memplan.c - the no-reuse memory plan (see memplan.h). */
#include <stdlib.h>

#include "memplan.h"

dfg_status dfg_memplan_naive(const dfg_program *p, size_t align, dfg_memplan *out) {
    *out = (dfg_memplan){.align = align, .n_tensors = p->n_tensors};
    out->offset = malloc(sizeof(*out->offset) * (size_t)(p->n_tensors ? p->n_tensors : 1));
    if (!out->offset) return DFG_ERR_NOMEM;
    size_t off = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->storage != t) continue;
        out->offset[i] = (int64_t)off;
        off += (dfg_tensor_bytes(t) + align - 1) / align * align;
    }
    /* storage owners always precede the views and versions made from them */
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->storage != t) out->offset[i] = out->offset[t->storage->id];
    }
    out->arena_bytes = off ? off : align;
    return DFG_OK;
}

void dfg_memplan_free(dfg_memplan *m) {
    free(m->offset);
    m->offset = NULL;
}
