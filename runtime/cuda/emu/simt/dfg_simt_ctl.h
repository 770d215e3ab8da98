/* dfg_simt_ctl.h - control of the SIMT emulator from the launcher's side (callable from C).
 *
 * The emulator keeps one device context: the launch status, the schedule seed, the fiber stacks.
 * Launches run on the calling OS thread, one at a time; nothing here is thread-safe. */
#ifndef DFG_SIMT_CTL_H
#define DFG_SIMT_CTL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* what a launch can report; DFG_LAUNCH maps them to cudaError_t (dfg_simt_cuda_error) */
typedef enum dfg_simt_status {
    DFG_SIMT_OK = 0,
    DFG_SIMT_ERR_CONFIG = 1,   /* grid/block beyond the device limits or zero (cudaErrorInvalidConfiguration) */
    DFG_SIMT_ERR_SMEM = 2,     /* dynamic shared memory over 48 KB / the opt-in (cudaErrorInvalidValue) */
    DFG_SIMT_ERR_BARRIER = 3,  /* a __syncthreads not reached by every thread of the block */
    DFG_SIMT_ERR_WARP = 4,     /* a warp operation's mask names absent/exited lanes, or lanes disagree */
    DFG_SIMT_ERR_DEADLOCK = 5, /* no thread can run and some still wait */
    DFG_SIMT_ERR_TRAP = 6,     /* __trap(), a launch from a kernel, or a device call outside a kernel */
    DFG_SIMT_ERR_RESOURCES = 7, /* a fiber stack could not be mapped (cudaErrorLaunchOutOfResources) */
    DFG_SIMT_ERR_CAPTURE = 8,  /* a call a stream capture cannot hold was made inside one, or capture misuse */
} dfg_simt_status;

/* The status of the last failed launch, then reset to DFG_SIMT_OK (as cudaGetLastError). */
int dfg_simt_get_last_status(void);
/* The same without resetting it. */
int dfg_simt_peek_last_status(void);
/* The last failure's message, naming the kernel, the launch site, the block (x,y,z) and the
 * thread (x,y,z); "" if no launch has failed. Kept until the next failure. */
const char *dfg_simt_last_message(void);
/* Prints each failure's message to stderr as it happens (default: off; DFG_SIMT_VERBOSE=1). */
void dfg_simt_set_verbose(int on);

/* Schedule seed: 0 runs ready threads in order; any other value draws the order of ready
 * threads from the seed (per block, so a failing block replays alone). Default: DFG_SIMT_SEED
 * from the environment, else 0. */
void dfg_simt_set_seed(uint64_t seed);
uint64_t dfg_simt_get_seed(void);

/* The opt-in to more dynamic shared memory than 48 KB for one kernel (what
 * cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) does); over
 * the device's limit is DFG_SIMT_ERR_SMEM. Use DFG_SET_MAX_DYNAMIC_SMEM rather than this. */
int dfg_simt_set_max_dynamic_smem(const void *kernel, size_t bytes);
/* The device's opt-in limit: 227 KB (sm_90, the default); 163 KB is sm_80's. */
void dfg_simt_set_smem_optin_limit(size_t bytes);

/* Counters since the process started, for benchmarks. */
typedef struct dfg_simt_stats {
    uint64_t launches, blocks, threads;
    uint64_t switches; /* fiber context switches */
    uint64_t fibers;   /* fiber stacks allocated (reused across blocks and launches) */
} dfg_simt_stats;
void dfg_simt_get_stats(dfg_simt_stats *out);

/* Stream capture (graph.cpp), as cudaStreamBeginCapture .. cudaStreamEndCapture and a graph's
 * launch: while capturing, DFG_LAUNCH and host tasks are recorded, not run; a graph replays them
 * in order. A call that a real capture cannot hold (a copy, an allocation, a synchronisation:
 * the device layer reports them with dfg_simt_capture_abort) fails the capture, and
 * dfg_simt_capture_end then returns DFG_SIMT_ERR_CAPTURE with a message naming the call. */
int dfg_simt_capturing(void);
int dfg_simt_capture_begin(void);
void dfg_simt_capture_abort(const char *call);
int dfg_simt_capture_end(void **graph);
int dfg_simt_graph_launch(void *graph); /* the first failure stops it (the launch's status) */
void dfg_simt_graph_destroy(void *graph);
/* A host function as a node of the stream (cudaLaunchHostFunc): runs now, or, while capturing,
 * is recorded with a copy of its `bytes` of argument. */
int dfg_simt_host_task(void (*fn)(void *arg), const void *arg, size_t bytes);

/* Frees the fiber stacks (they are otherwise kept for the next launch). */
void dfg_simt_release(void);

#ifdef __cplusplus
}
#endif
#endif /* DFG_SIMT_CTL_H */
