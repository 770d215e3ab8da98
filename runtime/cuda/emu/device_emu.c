/* device_emu.c - the emulated device: device memory is host memory (one allocation per call, so
 * AddressSanitizer sees every buffer), launches run the .cu kernels under the SIMT emulator
 * (runtime/cuda/emu/simt), GEMMs run the column-major interpreter (fused attention the SDPA one, with
 * DFG_EMU_SDPA=1), and stream capture records launches, GEMMs and SDPA calls into a graph that
 * replays them (the emulator's capture: nothing runs while a stage is captured, and a copy,
 * allocation or synchronisation inside the capture fails it, naming the call -- as on a GPU,
 * where they would break or invalidate the capture). Device memory is
 * poisoned when allocated, as a GPU's is never zeroed for you. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../device.h"
#include "simt/dfg_simt_ctl.h"

typedef struct {
    size_t allocated; /* device bytes handed out and not released: what the run measures */
} emu_dev;

/* Each allocation carries its size in a 256-byte header, so release can count it back. */
#define EMU_HEADER 256

/* Fails a call the device layer must not make inside a capture. */
static dfg_status refuse_in_capture(const char *call, char *err, size_t len) {
    if (!dfg_simt_capturing()) return DFG_OK;
    dfg_simt_capture_abort(call);
    if (err && len) snprintf(err, len, "%s inside a captured stage (a GPU cannot capture it)", call);
    return DFG_ERR_STATE;
}

static dfg_status emu_open(void **dev, int *sm_count, char *desc, size_t desc_len, char *err, size_t len) {
    (void)err, (void)len;
    emu_dev *d = calloc(1, sizeof(*d));
    if (!d) return DFG_ERR_NOMEM;
    *dev = d;
    *sm_count = 132; /* grid sizes as on an H100 SXM */
    snprintf(desc, desc_len, "emulated CUDA device (SIMT emulator on the CPU, grids sized for 132 SMs)");
    return DFG_OK;
}

static void emu_close(void *dev) { free(dev); }

static void *emu_alloc(void *dev, size_t bytes) {
    emu_dev *d = dev;
    char err[128];
    if (refuse_in_capture("an allocation", err, sizeof(err))) return NULL;
    char *p = aligned_alloc(256, EMU_HEADER + (bytes + 255) / 256 * 256);
    if (!p) return NULL;
    memcpy(p, &bytes, sizeof(bytes));
    memset(p + EMU_HEADER, 0xFF, bytes); /* NaN as f32 and bf16, -1 as i32 */
    d->allocated += bytes;
    return p + EMU_HEADER;
}

static void emu_release(void *dev, void *p) {
    emu_dev *d = dev;
    if (!p) return;
    size_t bytes;
    memcpy(&bytes, (char *)p - EMU_HEADER, sizeof(bytes));
    d->allocated -= bytes;
    free((char *)p - EMU_HEADER);
}

static size_t emu_allocated(void *dev) { return ((emu_dev *)dev)->allocated; }

static dfg_status emu_to_device(void *dev, void *dst, const void *src, size_t bytes, char *err, size_t len) {
    (void)dev;
    dfg_status st = refuse_in_capture("a copy to the device", err, len);
    if (!st && dst != src) memmove(dst, src, bytes);
    return st;
}

static dfg_status emu_to_host(void *dev, void *dst, const void *src, size_t bytes, char *err, size_t len) {
    (void)dev;
    dfg_status st = refuse_in_capture("a copy to the host", err, len);
    if (!st && dst != src) memmove(dst, src, bytes);
    return st;
}

static dfg_status emu_fill(void *dev, void *dst, int byte, size_t bytes, char *err, size_t len) {
    (void)dev;
    dfg_status st = refuse_in_capture("a memset", err, len);
    if (!st) memset(dst, byte, bytes);
    return st;
}

static dfg_status emu_sync(void *dev, char *err, size_t len) {
    (void)dev;
    return refuse_in_capture("a synchronisation", err, len);
}

static dfg_status emu_capture_begin(void *dev, char *err, size_t len) {
    (void)dev;
    if (dfg_simt_capture_begin()) return snprintf(err, len, "capture: %s", dfg_simt_last_message()), DFG_ERR_STATE;
    return DFG_OK;
}

static dfg_status emu_capture_end(void *dev, void **graph, char *err, size_t len) {
    (void)dev;
    if (dfg_simt_capture_end(graph)) return snprintf(err, len, "capture: %s", dfg_simt_last_message()), DFG_ERR_STATE;
    return DFG_OK;
}

static dfg_status emu_graph_launch(void *dev, void *graph, char *err, size_t len) {
    (void)dev;
    if (dfg_simt_graph_launch(graph)) return snprintf(err, len, "%s", dfg_simt_last_message()), DFG_ERR_RUNTIME;
    return DFG_OK;
}

static void emu_graph_destroy(void *dev, void *graph) {
    (void)dev;
    dfg_simt_graph_destroy(graph);
}

static void *emu_stream(void *dev) {
    (void)dev;
    return NULL;
}

static void *emu_gemm_state(void *dev) {
    (void)dev;
    return NULL;
}

/* The SDPA interpreter only when DFG_EMU_SDPA=1: by default attention runs the hand-written .cu
 * kernels under the emulator (what a GPU without cuDNN, or with f32 attention, runs); with it, the
 * SDPA descriptors that cuDNN executes on a GPU are executed by their interpreter (sdpa.c). */
static dfg_cuda_sdpa_fn emu_sdpa(void *dev, void **state) {
    (void)dev;
    const char *e = getenv("DFG_EMU_SDPA");
    *state = NULL;
    return e && !strcmp(e, "1") ? dfg_cuda_sdpa_interpret : NULL;
}

static void *emu_alloc_host(void *dev, size_t bytes) {
    (void)dev;
    return malloc(bytes ? bytes : 1);
}

static void emu_release_host(void *dev, void *p) {
    (void)dev;
    free(p);
}

const dfg_device dfg_device_emulated = {
    .name = "emulated",
    .open = emu_open,
    .close = emu_close,
    .alloc = emu_alloc,
    .allocated = emu_allocated,
    .release = emu_release,
    .alloc_host = emu_alloc_host,
    .release_host = emu_release_host,
    .to_device = emu_to_device,
    .to_host = emu_to_host,
    .fill = emu_fill,
    .sync = emu_sync,
    .capture_begin = emu_capture_begin,
    .capture_end = emu_capture_end,
    .graph_launch = emu_graph_launch,
    .graph_destroy = emu_graph_destroy,
    .stream = emu_stream,
    .kernels = dfg_emu_kernels,
    .scratch_bytes = dfg_emu_scratch_bytes,
    .gemm = dfg_cuda_gemm_interpret,
    .gemm_state = emu_gemm_state,
    .gemm_workspace = 0,
    .sdpa = emu_sdpa,
    .comm_open = dfg_comm_emu_open,
    .comm_close = dfg_comm_emu_close,
    .comm_wait = dfg_comm_emu_wait,
};
