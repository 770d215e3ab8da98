/* backend.h - what the executor needs from a device: arena memory, copies, and running one node.
 * The CPU backend is runtime/cpu/backend.c; the CUDA backend goes beside it. */
#ifndef DFG_BACKEND_H
#define DFG_BACKEND_H

#include "../graph/ir.h"
#include "dfg_runtime.h"

typedef struct {
    const char *name;
    /* Prepares per-program state (kernel scratch, library handles); writes why it failed to err. */
    dfg_status (*create)(const dfg_program *p, const dfg_run_options *o, void **state, char *err, size_t len);
    void (*destroy)(void *state);
    void *(*alloc)(void *state, size_t bytes); /* the arena; NULL when out of memory */
    void (*free)(void *state, void *ptr);
    dfg_status (*upload)(void *state, void *dst, const void *src, size_t bytes);   /* host -> arena */
    dfg_status (*download)(void *state, void *dst, const void *src, size_t bytes); /* arena -> host */
    /* Runs node n with one pointer per input and output; aliased outputs share their input's
     * pointer. On failure writes "<op> '<node>': why" to err. */
    dfg_status (*exec)(void *state, const dfg_node *n, void *const *in, void *const *out, char *err, size_t len);
    dfg_status (*sync)(void *state);
} dfg_backend;

extern const dfg_backend dfg_backend_cpu;

#endif
