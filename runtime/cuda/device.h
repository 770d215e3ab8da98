/* device.h - the narrow device layer the CUDA backend is written against (runtime/cuda/backend.c).
 *
 * Two implementations: the CUDA runtime (device_cuda.c: cudaMalloc, streams, CUDA Graphs,
 * cuBLASLt, cuDNN, the nvcc-built kernels) and an emulated device (emu/device_emu.c: host memory, the
 * same .cu kernels run by the SIMT emulator, captures recorded and replayed, the GEMM interpreter,
 * the SDPA interpreter when DFG_EMU_SDPA=1).
 * The backend's orchestration is the same on both, so `dfg run --emulate-gpu` and CI run the
 * CUDA backend's own code on a machine without a GPU.
 *
 * Every call returns a dfg_status and writes the library's message to err on failure; nothing
 * aborts. Copies are synchronous with respect to the device's one stream. */
#ifndef DFG_DEVICE_H
#define DFG_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "../../ops/comm.h"
#include "../../ops/cuda/cuda.h"

typedef struct {
    const char *name; /* "cuda" or "emulated" */
    /* Opens the device (the first GPU, or the emulator); fills *sm_count and a one-line
     * description (name, memory). DFG_ERR_UNSUPPORTED with a message when there is no device. */
    dfg_status (*open)(void **dev, int *sm_count, char *desc, size_t desc_len, char *err, size_t len);
    void (*close)(void *dev);
    void *(*alloc)(void *dev, size_t bytes);      /* device memory; NULL when out of memory */
    size_t (*allocated)(void *dev);               /* device bytes allocated and not released */
    void (*release)(void *dev, void *p);
    void *(*alloc_host)(void *dev, size_t bytes); /* pinned host memory for staging */
    void (*release_host)(void *dev, void *p);
    dfg_status (*to_device)(void *dev, void *dst, const void *src, size_t bytes, char *err, size_t len);
    dfg_status (*to_host)(void *dev, void *dst, const void *src, size_t bytes, char *err, size_t len);
    dfg_status (*fill)(void *dev, void *dst, int byte, size_t bytes, char *err, size_t len);
    dfg_status (*sync)(void *dev, char *err, size_t len);
    /* Stream capture: the launches between begin and end become a graph (nothing runs); a graph
     * replays them. Inside a capture, allocation, copies and synchronisation fail the capture
     * with a message naming the call. */
    dfg_status (*capture_begin)(void *dev, char *err, size_t len);
    dfg_status (*capture_end)(void *dev, void **graph, char *err, size_t len);
    dfg_status (*graph_launch)(void *dev, void *graph, char *err, size_t len);
    void (*graph_destroy)(void *dev, void *graph);
    void *(*stream)(void *dev);                   /* cudaStream_t, or NULL */
    /* The kernels: launcher table, their workspace rule, the GEMM (its state from gemm_state). */
    const dfg_cuda_fn *kernels;
    size_t (*scratch_bytes)(const dfg_node *n);
    dfg_cuda_gemm_fn gemm;
    void *(*gemm_state)(void *dev);
    size_t gemm_workspace; /* device bytes the GEMM implementation needs (planned beside the arena) */
    /* Fused attention for ctx->sdpa, its state put in *state; NULL (or a NULL function): the
     * attention launchers run dfg's own kernels. Its workspace is the node's scratch, so a device
     * whose SDPA needs one says so in its scratch rule. */
    dfg_cuda_sdpa_fn (*sdpa)(void *dev, void **state);
    /* Data parallel: a communicator on device memory over the run's host one (ops/comm.h), its
     * calls ordered on the device's stream and held by a stage's capture: NCCL on a GPU
     * (comm_nccl.c), the host communicator as a node of the emulator's stream (emu/comm_emu.c).
     * comm_wait after a stage's launches: waits for the stream with the run's timeout and returns
     * DFG_OK or what a collective met (a rank that did not arrive, named). NULL comm_open: none. */
    dfg_status (*comm_open)(void *dev, dfg_comm *host, dfg_comm **out, char *err, size_t len);
    void (*comm_close)(dfg_comm *c);
    dfg_status (*comm_wait)(dfg_comm *c, char *err, size_t len);
} dfg_device;

extern const dfg_device dfg_device_emulated; /* emu/device_emu.c */
/* emu/comm_emu.c: the emulated device's communicator (the host one, run in stream order). */
dfg_status dfg_comm_emu_open(void *dev, dfg_comm *host, dfg_comm **out, char *err, size_t len);
void dfg_comm_emu_close(dfg_comm *c);
dfg_status dfg_comm_emu_wait(dfg_comm *c, char *err, size_t len);
#ifdef DFG_HAVE_NCCL
/* comm_nccl.c: NCCL over the GPU's stream, its unique id broadcast by the host communicator. */
dfg_status dfg_comm_nccl_open(void *stream, dfg_comm *host, dfg_comm **out, char *err, size_t len);
void dfg_comm_nccl_close(dfg_comm *c);
dfg_status dfg_comm_nccl_wait(dfg_comm *c, char *err, size_t len);
#endif
#ifdef DFG_HAVE_CUDA
extern const dfg_device dfg_device_cuda; /* device_cuda.c */
#endif

/* sdpa_cudnn.c, where cuDNN is (DFG_HAVE_CUDNN): attention through cuDNN's fused flash attention,
 * the GPU device's SDPA. open gives *s = NULL (no cuDNN, no error) when DFG_CUDNN_SDPA=0; the
 * workspace rule is the bytes a node's call may use (0 for nodes cuDNN will not run), for the
 * device's scratch rule. */
typedef struct dfg_sdpa_cudnn dfg_sdpa_cudnn;
dfg_status dfg_sdpa_cudnn_open(dfg_sdpa_cudnn **s, char *err, size_t len);
void dfg_sdpa_cudnn_close(dfg_sdpa_cudnn *s);
dfg_status dfg_sdpa_cudnn_run(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs);
size_t dfg_sdpa_cudnn_workspace(const dfg_node *n);
/* What building cuDNN's plan for a descriptor met. */
typedef struct {
    int configs;          /* engine configurations the heuristics offered */
    int nondeterministic; /* skipped: noted nondeterministic */
    int over_workspace;   /* skipped: more workspace than planned */
    int no_driver;        /* plans whose kernels compiled but could not load: no GPU driver (deviceless) */
    int refused;          /* plans that failed otherwise: the engine refused the graph */
    long long workspace;  /* the least workspace a configuration asked for (-1: none said) */
    bool planned;         /* an execution plan finalized */
    char why[384];        /* why not, when not */
} dfg_sdpa_cudnn_report;
/* Builds (once) and reports the plan of a descriptor with `workspace` bytes, as a call would. */
const dfg_sdpa_cudnn_report *dfg_sdpa_cudnn_plan(dfg_sdpa_cudnn *s, const dfg_sdpa_desc *d, bool backward,
                                                 size_t workspace);
/* A state that plans for the GPU the JSON of its cuDNN device properties describes, without one
 * (cuDNN's deviceless ahead-of-time compilation): for checking the graphs without a GPU. */
dfg_status dfg_sdpa_cudnn_open_deviceless(dfg_sdpa_cudnn **s, const char *device_json, char *err, size_t len);

#endif
