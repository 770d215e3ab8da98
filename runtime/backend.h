/* backend.h - what the executor needs from a device: arena memory, copies, running one node, and
 * (on the CUDA backend) capturing a stage's nodes as a graph and replaying it. The CPU backend
 * is runtime/cpu/backend.c; the CUDA backend is runtime/cuda/backend.c, over a device layer
 * (runtime/cuda/device.h) that is either a GPU or the SIMT emulator. */
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
    bool host_memory; /* the arena is host memory the executor and host stages may read directly */
    /* Staging for host stages on a device backend (NULL on the CPU): pinned host memory. */
    void *(*alloc_host)(void *state, size_t bytes);
    void (*free_host)(void *state, void *ptr);
    /* Stage graphs (NULL on backends without them): the nodes exec'ed between capture_begin and
     * capture_end become graph `stage` (nothing runs); replay runs it. Slots 0 .. 2 n_stages - 1:
     * a stage's graph, and the last chunk of a stage that ends early (runtime/step.c). */
    dfg_status (*capture_begin)(void *state, int stage, char *err, size_t len);
    dfg_status (*capture_end)(void *state, int stage, char *err, size_t len);
    dfg_status (*replay)(void *state, int stage, char *err, size_t len);
    /* After a stage: DFG_OK, or the bad value a kernel found on the device (its flag), in err. */
    dfg_status (*check_flags)(void *state, char *err, size_t len);
    /* One line about the device for the run's header ("NVIDIA H100 80GB HBM3, 132 SMs"). */
    const char *(*describe)(void *state);
    /* Device memory the backend holds (the arena and its workspace), as its device layer counts
     * it, and how much of it is workspace beside the planned arena. */
    size_t (*device_bytes)(void *state);
    size_t (*workspace_bytes)(void *state);
    /* The workspace_bytes a run of p will have, without a device (NULL on the CPU). */
    dfg_status (*workspace_of)(const dfg_program *p, dfg_device_workspace *w);
    /* Whether the device is here: DFG_OK with one line about it in msg, or why not in msg (NULL:
     * always, the CPU). Opens and closes the device; runs nothing. */
    dfg_status (*probe)(char *msg, size_t len);
} dfg_backend;

extern const dfg_backend dfg_backend_cpu;
/* The CUDA backend (runtime/cuda/backend.c) on the emulated device (libdfg-cuda-emu.so, built
 * when the CUDA headers are here) and on a GPU (libdfg-cuda.so, built with nvcc and the CUDA
 * libraries): modules the runtime opens for a plan that needs one (module.h). */
extern const dfg_backend dfg_backend_cuda_emulated;
extern const dfg_backend dfg_backend_cuda;

#endif
