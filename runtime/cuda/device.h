/* device.h - the narrow device layer the CUDA backend is written against (runtime/cuda/backend.c).
 *
 * Two implementations: the CUDA runtime (device_cuda.c: cudaMalloc, streams, CUDA Graphs,
 * cuBLASLt, the nvcc-built kernels) and an emulated device (device_emu.c: host memory, the same
 * .cu kernels run by the SIMT emulator, captures recorded and replayed, the GEMM interpreter).
 * The backend's orchestration is the same on both, so `dfg run --emulate-gpu` and CI run the
 * CUDA backend's own code on a machine without a GPU.
 *
 * Every call returns a dfg_status and writes the library's message to err on failure; nothing
 * aborts. Copies are synchronous with respect to the device's one stream. */
#ifndef DFG_DEVICE_H
#define DFG_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

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
} dfg_device;

extern const dfg_device dfg_device_emulated; /* device_emu.c */
#ifdef DFG_HAVE_CUDA
extern const dfg_device dfg_device_cuda; /* device_cuda.c */
#endif

#endif
