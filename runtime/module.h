/* module.h - the parts of dfg that live in shared objects of their own, opened only when a plan or
 * a command needs them, as ggml's backend registry opens its backends:
 *   libdfg-cuda.so      the CUDA backend on a GPU: cuBLASLt, cuDNN's SDPA, NCCL, the nvcc kernels
 *   libdfg-cuda-emu.so  the CUDA backend on the SIMT emulator (dfg run --emulate-gpu)
 *   libdfg-mpi.so       the MPI communicator of a data-parallel run (started by mpirun)
 *   libdfg-dot.so       the Graphviz drawings (dfg dot, dfg plot; tools/dot)
 * A cpu run maps none of them, nor the libraries they link, so a dfg built with the CUDA toolkit
 * runs cpu plans on a machine without it, and its memory is its own.
 *
 * A module is built from the layers below the runtime (graph, ops, ops/cuda) and its own files,
 * and linked with --no-undefined: what it needs of the runtime comes through dfg_module_host,
 * given when it is opened. Modules are found in $DFG_MODULE_DIR when it is set, else beside the
 * object that holds this code (the dfg executable or libdfg.so) or in the build tree they were
 * built in. */
#ifndef DFG_MODULE_H
#define DFG_MODULE_H

#include <stddef.h>

#include "backend.h"
#include "dist.h"

#define DFG_MODULE_ABI 2 /* changes whenever dfg_module_host, a module's export or dfg_backend changes */

/* The runtime's functions a module calls (data parallel: the host communicator under NCCL's). */
typedef struct {
    int abi; /* DFG_MODULE_ABI */
    dfg_comm *(*dist_comm)(dfg_dist *d);
    double (*dist_timeout)(const dfg_dist *d);
    dfg_status (*dist_diagnose)(dfg_dist *d, const char *what, char *err, size_t len);
} dfg_module_host;

/* A backend module's export: its backend, or NULL for a host of another ABI. */
typedef const dfg_backend *(*dfg_backend_module_fn)(const dfg_module_host *host);
#define DFG_BACKEND_MODULE_SYMBOL "dfg_backend_module"
#define DFG_MODULE_CUDA "libdfg-cuda.so"
#define DFG_MODULE_CUDA_EMU "libdfg-cuda-emu.so"

/* Opens module `file` (one of the names above) and returns the address of its export `symbol`
 * in *fn. A module is opened once per process and never unloaded (the CUDA libraries do not
 * support it). Fails with one line in err: the module is not there (this dfg was built
 * without it), or it is and cannot load (a library it links is missing: dlopen's reason). */
dfg_status dfg_module_open(const char *file, const char *symbol, void **fn, char *err, size_t len);
/* The backend in backend module `file`, given this runtime's host functions. */
dfg_status dfg_backend_open(const char *file, const dfg_backend **be, char *err, size_t len);
/* The registry's backend for a target (runtime/backends.c), its module opened; its name in *name. */
dfg_status dfg_backend_for(dfg_target target, bool emulated, const dfg_backend **be, const char **name, char *err,
                           size_t len);

#endif
