/* entry.c - the export of the CUDA backend's modules (runtime/module.h): libdfg-cuda.so (the GPU,
 * built with DFG_BACKEND_GPU) and libdfg-cuda-emu.so (the SIMT emulator, DFG_BACKEND_EMU), and
 * the runtime functions the backend calls, which reach the runtime that opened the module
 * through its host table. */
#include "../module.h"

/* Set once, when the runtime opens the module: the process's one runtime library, which the
 * module's calls below go back to. */
static const dfg_module_host *host;

dfg_comm *dfg_dist_comm(dfg_dist *d) { return host->dist_comm(d); }
double dfg_dist_timeout(const dfg_dist *d) { return host->dist_timeout(d); }
dfg_status dfg_dist_diagnose(dfg_dist *d, const char *what, char *err, size_t len) {
    return host->dist_diagnose(d, what, err, len);
}

__attribute__((visibility("default"))) const dfg_backend *dfg_backend_module(const dfg_module_host *h);
const dfg_backend *dfg_backend_module(const dfg_module_host *h) {
    if (!h || h->abi != DFG_MODULE_ABI) return NULL;
    host = h;
#if defined(DFG_BACKEND_GPU)
    return &dfg_backend_cuda;
#else
    return &dfg_backend_cuda_emulated;
#endif
}
