// graph.cpp - stream capture for the emulator: what CUDA Graphs are to the GPU. While a capture is
// open, launches and host tasks are kept (in order) instead of run; the graph replays them. A
// call a real capture cannot hold -- the device layer reports copies, allocations and
// synchronisations with dfg_simt_capture_abort -- fails the capture, naming the call, as the CUDA
// runtime would invalidate it. One capture at a time (one stream).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dfg_simt.h"

void dfg_simt_report(int status, const char *msg); // simt.cpp

namespace {

struct node {
    bool host;
    // a kernel launch
    dfg_simt_kernel_desc k;
    dim3 grid, block;
    size_t smem;
    void (*free_args)(const void *);
    // a host task
    void (*fn)(void *);
    void *arg;
};

struct graph {
    std::vector<node> nodes;
};

graph *open_capture;        // the capture in progress, or null
char abort_call[160];       // the first call that broke it, or ""

void free_nodes(graph *g) {
    for (node &n : g->nodes) {
        if (n.host) free(n.arg);
        else n.free_args(n.k.args);
    }
    g->nodes.clear();
}

} // namespace

int dfg_simt_record_launch(const dfg_simt_kernel_desc *k, dim3 grid, dim3 block, size_t smem,
                           void (*free_args)(const void *)) {
    if (!open_capture) { // cannot happen through DFG_LAUNCH; free the copy all the same
        free_args(k->args);
        dfg_simt_report(DFG_SIMT_ERR_CAPTURE, "a launch was recorded with no capture open");
        return DFG_SIMT_ERR_CAPTURE;
    }
    node n{};
    n.k = *k, n.grid = grid, n.block = block, n.smem = smem, n.free_args = free_args;
    open_capture->nodes.push_back(n);
    return DFG_SIMT_OK;
}

extern "C" {

int dfg_simt_capturing(void) { return open_capture != nullptr; }

int dfg_simt_capture_begin(void) {
    if (open_capture) {
        dfg_simt_report(DFG_SIMT_ERR_CAPTURE, "a capture began inside another capture");
        return DFG_SIMT_ERR_CAPTURE;
    }
    open_capture = new graph;
    abort_call[0] = '\0';
    return DFG_SIMT_OK;
}

void dfg_simt_capture_abort(const char *call) {
    if (open_capture && !abort_call[0]) snprintf(abort_call, sizeof abort_call, "%s", call ? call : "a call");
}

int dfg_simt_capture_end(void **out) {
    *out = nullptr;
    graph *g = open_capture;
    open_capture = nullptr;
    if (!g) {
        dfg_simt_report(DFG_SIMT_ERR_CAPTURE, "a capture ended that never began");
        return DFG_SIMT_ERR_CAPTURE;
    }
    if (abort_call[0]) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s was made inside the capture (a stage graph cannot hold it)", abort_call);
        dfg_simt_report(DFG_SIMT_ERR_CAPTURE, msg);
        free_nodes(g);
        delete g;
        return DFG_SIMT_ERR_CAPTURE;
    }
    *out = g;
    return DFG_SIMT_OK;
}

int dfg_simt_graph_launch(void *p) {
    graph *g = static_cast<graph *>(p);
    if (open_capture) {
        dfg_simt_capture_abort("a graph launch");
        return DFG_SIMT_OK;
    }
    for (node &n : g->nodes) {
        if (n.host) {
            n.fn(n.arg);
            continue;
        }
        int st = dfg_simt_run(&n.k, n.grid, n.block, n.smem);
        if (st) return st;
    }
    return DFG_SIMT_OK;
}

void dfg_simt_graph_destroy(void *p) {
    graph *g = static_cast<graph *>(p);
    if (!g) return;
    free_nodes(g);
    delete g;
}

int dfg_simt_host_task(void (*fn)(void *), const void *arg, size_t bytes) {
    if (!open_capture) {
        fn(const_cast<void *>(arg));
        return DFG_SIMT_OK;
    }
    node n{};
    n.host = true;
    n.fn = fn;
    n.arg = malloc(bytes ? bytes : 1);
    if (!n.arg) {
        dfg_simt_report(DFG_SIMT_ERR_RESOURCES, "out of memory recording a host task");
        return DFG_SIMT_ERR_RESOURCES;
    }
    memcpy(n.arg, arg, bytes);
    open_capture->nodes.push_back(n);
    return DFG_SIMT_OK;
}

} // extern "C"
