/* backends.c - the backends a plan can run on, found by name (ggml's backend registry is the
 * model): the CPU backend built in, the CUDA backend in modules opened only when a plan or a probe
 * needs one (module.h). Each can say why it cannot run here: `dfg info` lists them so. */
#include <stdio.h>
#include <string.h>

#include "module.h"

typedef struct {
    const char *name;
    dfg_target target;
    bool emulated;      /* runs a cuda plan on the CPU (dfg run --emulate-gpu) */
    const char *module; /* NULL: built in */
    const char *about;
} backend_row;

static const backend_row rows[] = {
    {"cpu", DFG_TARGET_CPU, false, NULL, "the CPU: float32 kernels, OpenBLAS GEMMs, OpenMP threads"},
    {"cuda", DFG_TARGET_CUDA, false, DFG_MODULE_CUDA, "one NVIDIA GPU: CUDA Graphs, cuBLASLt, cuDNN's SDPA, NCCL"},
    {"cuda-emu", DFG_TARGET_CUDA, true, DFG_MODULE_CUDA_EMU,
     "the CUDA backend on the SIMT emulator, on the CPU (dfg run --emulate-gpu)"},
};
#define N_ROWS (int)(sizeof(rows) / sizeof(rows[0]))

int dfg_backend_count(void) { return N_ROWS; }
const char *dfg_backend_name(int i) { return i >= 0 && i < N_ROWS ? rows[i].name : NULL; }
const char *dfg_backend_about(int i) { return i >= 0 && i < N_ROWS ? rows[i].about : NULL; }

static dfg_status backend_of(const backend_row *r, const dfg_backend **be, char *err, size_t len) {
    if (!r->module) {
        *be = &dfg_backend_cpu;
        return DFG_OK;
    }
    return dfg_backend_open(r->module, be, err, len);
}

dfg_status dfg_backend_probe(int i, char *msg, size_t len) {
    if (i < 0 || i >= N_ROWS) return snprintf(msg, len, "no backend %d", i), DFG_ERR_ARG;
    const dfg_backend *be = NULL;
    dfg_status st = backend_of(&rows[i], &be, msg, len);
    if (st) return st;
    if (!be->probe) return snprintf(msg, len, "built in"), DFG_OK;
    return be->probe(msg, len);
}

dfg_status dfg_backend_for(dfg_target target, bool emulated, const dfg_backend **be, const char **name, char *err, size_t len) {
    for (int i = 0; i < N_ROWS; i++)
        if (rows[i].target == target && rows[i].emulated == emulated) {
            if (name) *name = rows[i].name;
            return backend_of(&rows[i], be, err, len);
        }
    snprintf(err, len, "no %sbackend runs %s plans", emulated ? "emulated " : "", dfg_target_name(target));
    return DFG_ERR_UNSUPPORTED;
}
