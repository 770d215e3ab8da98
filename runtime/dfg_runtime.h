/* dfg_runtime.h - running a program: runtime objects, tensor access by name, host stages,
 * data-parallel runs (weights and checkpoints in and out: runtime/weights/dfg_weights.h). A runtime is an opaque handle; every call returns a dfg_status and leaves a
 * message in dfg_runtime_error() when it fails. */
#ifndef DFG_RUNTIME_H
#define DFG_RUNTIME_H

#include "dfg_passes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A data-parallel run's membership (dfg_dist_open, below). */
typedef struct dfg_dist dfg_dist;

/* The run's output folder, a NUL-terminated path (dfg run: --checkpoint-dir, else the current
 * folder), as the service of this name: where a pipeline's host stages write their logs. */
#define DFG_OUTPUT_DIR_SERVICE "output_dir"

/* An object a run hands to its host stages by name (dfg_run_options.services). */
typedef struct {
    const char *name;
    void *ptr;
} dfg_service;

typedef struct {
    dfg_target target;
    int n_threads;   /* 0: the OpenMP default (all cores) */
    uint64_t seed;   /* parameter initialisation and RNG keys */
    void *host_lib;  /* dlopen handle that host-stage symbols are looked up in; NULL: the process */
    /* Checking mode (also on when the environment has DFG_CHECK=1): poisons the bytes of every
     * buffer whose lifetime ended and checksums what each kernel reads against what its writer
     * left, so a planner bug fails the step (DFG_ERR_STATE, naming the tensors that share the
     * bytes) instead of giving wrong numbers. Several times slower; for debugging. */
    bool check;
    /* A cuda plan on the CPU: the CUDA backend's own code over the emulated device (the .cu
     * kernels under the SIMT emulator, GEMMs by the interpreter of cuBLAS's semantics). Slow and
     * exact: for checking a GPU plan without a GPU. */
    bool emulate_gpu;
    /* Run every node as it comes instead of capturing each stage once as a CUDA Graph and
     * replaying it (the cuda backend; graph replay and eager launches give identical bits). */
    bool eager;
    /* Objects the application made for the pipeline's host stages, which they reach by name
     * (dfg_host_service): the run's reward source, say (runtime/host/dfg_reward.h). The runtime
     * only hands them over; they outlive it. */
    const dfg_service *services;
    int n_services;
    /* The data-parallel run this process is a rank of (dfg_dist_open); NULL: one process. A plan
     * whose collectives were built for W ranks runs only in a run of W processes. */
    dfg_dist *dist;
} dfg_run_options;

DFG_API dfg_run_options dfg_run_options_default(void);

typedef struct dfg_runtime dfg_runtime;

/* Creates a runtime: compiles the program if it is not compiled yet (dfg_compile with the
 * defaults for opt->target), allocates the one arena of the planned size, resolves host stages
 * and initialises every PARAM and STATE from its init spec and the seed. On failure *out may
 * still hold a runtime whose dfg_runtime_error() says why; free it with dfg_runtime_free. */
DFG_API dfg_status dfg_runtime_create(dfg_program *p, const dfg_run_options *opt, dfg_runtime **out);
DFG_API void dfg_runtime_free(dfg_runtime *rt);
DFG_API const char *dfg_runtime_error(const dfg_runtime *rt);
DFG_API const dfg_program *dfg_runtime_program(const dfg_runtime *rt);

/* Runs every stage once (one training step); a stage outside its dfg_stage_steps range or
 * switched off with dfg_runtime_skip_stage does not run. Error messages number the step that
 * failed from 1 (dfg_runtime_steps_done() + 1), as dfg run prints steps. A kernel's failure is
 * sticky; DFG_ERR_NUMERIC from clip_grad_norm (gradients not finite) comes before any optimizer
 * update of that step. */
DFG_API dfg_status dfg_runtime_step(dfg_runtime *rt);
DFG_API int64_t dfg_runtime_steps_done(const dfg_runtime *rt);
/* Sets the step counter (resuming a run: host stages and stage ranges read it). */
DFG_API dfg_status dfg_runtime_set_steps_done(dfg_runtime *rt, int64_t steps);
/* Switches a stage off (or on again) for the following steps: e.g. training on fixed rollouts
 * written by the host instead of generating them. */
DFG_API dfg_status dfg_runtime_skip_stage(dfg_runtime *rt, const char *name, bool skip);
/* Re-runs parameter/state initialisation (called by create). */
DFG_API dfg_status dfg_runtime_init_state(dfg_runtime *rt);

/* Host view of a tensor's bytes (persistent tensors and dfg_output tensors). */
typedef struct {
    void *data;
    dfg_dtype dtype;
    dfg_shape shape;
    size_t bytes;
    const char *name;
} dfg_buffer;

DFG_API dfg_status dfg_runtime_buffer(dfg_runtime *rt, const char *name, dfg_buffer *out);
/* Copies exactly the tensor's bytes in or out; a size mismatch is an error. */
DFG_API dfg_status dfg_runtime_write(dfg_runtime *rt, const char *name, const void *data, size_t bytes);
DFG_API dfg_status dfg_runtime_read(dfg_runtime *rt, const char *name, void *data, size_t bytes);
/* Sets a tensor that starts as a converted copy of another (dfg_init_from) from that tensor's
 * present value: after a load set the source, its copies follow (runtime/weights). */
DFG_API dfg_status dfg_runtime_follow_init(dfg_runtime *rt, const char *name);
/* Records a one-line message for dfg_runtime_error() and returns s; with sticky, later steps
 * refuse to run (the state is half-updated: a load that failed after writing some tensors).
 * For the layers that work on a runtime through its public calls (runtime/weights). */
DFG_API dfg_status dfg_runtime_fail(dfg_runtime *rt, dfg_status s, bool sticky, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Metrics (dfg_metric) in creation order, read after a step. */
DFG_API int dfg_runtime_metric_count(const dfg_runtime *rt);
DFG_API const char *dfg_runtime_metric_name(const dfg_runtime *rt, int i);
DFG_API float dfg_runtime_metric_value(dfg_runtime *rt, int i);
/* Whether the last step ran the stage that writes metric i (a stage outside its dfg_stage_steps
 * range, or skipped, leaves its metrics at older values); false before the first step. */
DFG_API bool dfg_runtime_metric_updated(const dfg_runtime *rt, int i);
/* Whether metric i may have no value in a step (dfg_metric_nullable): its NaN means "none", not
 * a numeric failure. */
DFG_API bool dfg_runtime_metric_nullable(const dfg_runtime *rt, int i);

/* The backend running the program ("cpu", "cuda", "cuda (emulated)") and its device, in words. */
DFG_API const char *dfg_runtime_backend(const dfg_runtime *rt);
DFG_API const char *dfg_runtime_device(const dfg_runtime *rt);
/* A device backend: the milliseconds of the last step the host spent on its own work (launching
 * graphs and kernels, host stages, staging), that is the step's time minus the time it waited on
 * the device; -1 on the CPU backend, where all of a step is host time. Under --emulate-gpu the
 * kernels themselves run on the host inside the launches, so only a GPU run separates the two. */
DFG_API double dfg_runtime_host_ms(const dfg_runtime *rt);
/* A device backend: the device memory it holds as its device layer counts it (the arena and,
 * after it, the kernels' and GEMM's workspace), and the workspace part; 0 on the CPU. */
DFG_API size_t dfg_runtime_device_bytes(const dfg_runtime *rt);
DFG_API size_t dfg_runtime_workspace_bytes(const dfg_runtime *rt);
/* The device workspace a cuda plan's run allocates after its arena, in the same allocation, known
 * before the run (dfg inspect prints it): the largest scratch any node's launcher asks for (dfg's
 * kernels; on a GPU also cuDNN's attention, where this build has cuDNN), the GEMM library's
 * workspace (cuBLASLt on a GPU; none emulated) and the flag word kernels report bad values in,
 * each rounded up to 256 bytes. total_bytes is what dfg_runtime_workspace_bytes will say. */
typedef struct {
    size_t total_bytes;
    size_t kernel_bytes;                /* the largest node scratch */
    size_t library_bytes;               /* the GEMM library's */
    const char *largest_node;           /* the node asking for kernel_bytes; NULL when none asks */
    const char *largest_op, *largest_graph;
} dfg_device_workspace;
/* For a program compiled for cuda: on this build's GPU device (emulated = false; DFG_ERR_UNSUPPORTED
 * in a build without CUDA) or the emulated one (--emulate-gpu; DFG_ERR_UNSUPPORTED without the
 * emulator). DFG_ERR_ARG for a cpu program or one not compiled; DFG_ERR_UNSUPPORTED also when an
 * op has no CUDA kernel. The names point into the program. */
DFG_API dfg_status dfg_runtime_device_workspace(const dfg_program *p, bool emulated, dfg_device_workspace *w);
/* After a step failed: true when none of its stages that write a PARAM or an optimizer state ran
 * (a host stage such as the reward failed first), so the trained state is the last good step's
 * apart from counters the step advanced (RNG and data positions, which the caller may restore). */
DFG_API bool dfg_runtime_params_intact(const dfg_runtime *rt);
/* The plan's stages (i in 0 .. count-1) and how many times stage i ran in the last step: 0 when
 * it did not (its step range, or a dfg_stage_when condition left it out), its repeat, or fewer
 * for a stage that ended early (dfg_stage_until; with graph replay, whole chunks of runs). */
DFG_API int dfg_runtime_stage_count(const dfg_runtime *rt);
DFG_API const char *dfg_runtime_stage_name(const dfg_runtime *rt, int i);
DFG_API int dfg_runtime_stage_runs(const dfg_runtime *rt, int i);
/* Milliseconds the last step spent in stage `name` (host stages included); -1 when it did not run. */
DFG_API double dfg_runtime_stage_ms(const dfg_runtime *rt, const char *name);
/* Bytes of the arena the runtime allocated (one allocation for every tensor). */
DFG_API size_t dfg_runtime_arena_bytes(const dfg_runtime *rt);
/* The CPU threads the runtime runs with (the OpenMP default when the options said 0). Results
 * are bit-reproducible for a given seed and thread count; OpenBLAS partitions its GEMMs by the
 * thread count, so other counts agree only to float rounding. */
DFG_API int dfg_runtime_threads(const dfg_runtime *rt);

/* ---------------------------------------------------------------- host stages
 * A host stage is `dfg_status fn(dfg_host_ctx *ctx)`, exported by the pipeline's shared object. */
/* ---------------------------------------------------------------- backends
 * What a plan can run on, by name (dfg info lists them): "cpu" (built in), "cuda" (one GPU; the
 * module libdfg-cuda.so) and "cuda-emu" (the CUDA backend on the SIMT emulator, for dfg run
 * --emulate-gpu; libdfg-cuda-emu.so). A module is opened only when a plan or a probe needs it. */
DFG_API int dfg_backend_count(void);
DFG_API const char *dfg_backend_name(int i);  /* NULL past the end */
DFG_API const char *dfg_backend_about(int i); /* what it runs on, one line */
/* Whether backend i can run a plan here: DFG_OK with a line about its device in msg, or why not
 * (this dfg was built without it, a library it links is not on this machine, there is no GPU). */
DFG_API dfg_status dfg_backend_probe(int i, char *msg, size_t len);

typedef struct dfg_host_ctx dfg_host_ctx;
typedef dfg_status (*dfg_host_fn)(dfg_host_ctx *ctx);

DFG_API dfg_status dfg_host_buffer(dfg_host_ctx *ctx, const char *name, dfg_buffer *out);
DFG_API int64_t dfg_host_step(const dfg_host_ctx *ctx); /* 0 for the first step */
/* A data-parallel run's rank of this process and its number of processes (0 and 1 alone): a
 * host stage that makes data takes rank's share of the batch (dfg_dist_open). */
DFG_API int dfg_host_rank(const dfg_host_ctx *ctx);
DFG_API int dfg_host_world_size(const dfg_host_ctx *ctx);
DFG_API uint64_t dfg_host_seed(const dfg_host_ctx *ctx);
/* The program the stage runs in: its settings through the typed reads of dfg_graph.h
 * (dfg_program_has, dfg_program_int, dfg_program_str, ...), parsed once, never as text. */
DFG_API const dfg_program *dfg_host_program(const dfg_host_ctx *ctx);
/* The service the run was given under `name` (dfg_run_options.services); NULL when none. */
DFG_API void *dfg_host_service(dfg_host_ctx *ctx, const char *name);
/* What the pipeline's host-state init stored (dfg_host_state, dfg_graph.h): its typed settings,
 * read and validated once when the runtime was created; NULL when the program declares none. */
DFG_API void *dfg_host_user(const dfg_host_ctx *ctx);
DFG_API dfg_status dfg_host_fail(dfg_host_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A small deterministic generator for host stages (splitmix64): returns the next value of the
 * stream and advances *state. Seed it from dfg_host_seed and dfg_host_step so that a run gives
 * the same data on every machine. */
static inline uint64_t dfg_host_rand(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---------------------------------------------------------------- data-parallel runs
 * `mpirun -n W dfg run P.dfg`: one process per device, each a rank of the run, all running the
 * same plan (built for W ranks: its collectives, ops.def's allreduce and all_gather, say so). */
/* Joins the run this process was started in: MPI when a launcher's environment says so
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), else a world of one process. A collective waits
 * at most timeout_s (<= 0: 600) for the other ranks, then names the ranks that did not arrive.
 * DFG_ERR_UNSUPPORTED, with a message, when a launcher started this process and dfg was built
 * without MPI. */
DFG_API dfg_status dfg_dist_open(dfg_dist **out, double timeout_s, char *err, size_t len);
DFG_API int dfg_dist_rank(const dfg_dist *d); /* 0 for NULL */
DFG_API int dfg_dist_size(const dfg_dist *d); /* 1 for NULL */
/* After a failure: whether this rank prints it. A collective that timed out is reported by the
 * lowest rank that was alive; every other failure by the rank it happened on. */
DFG_API bool dfg_dist_reports(const dfg_dist *d);
/* v[0 .. n-1] = their sums over the ranks (host values, for what a caller reports or agrees on;
 * the plan's own collectives are ops). A no-op in a world of one. Fails, naming the rank, as a
 * collective does. */
DFG_API dfg_status dfg_dist_sum(dfg_dist *d, double *v, int n, char *err, size_t len);
/* Every persistent tensor of the runtime = rank 0's (after loading weights or a checkpoint: the
 * ranks start from one state, as DDP's first broadcast does). A no-op in a world of one. */
DFG_API dfg_status dfg_runtime_broadcast_state(dfg_runtime *rt);
/* Leaves the run and frees d: MPI_Finalize after success (exit_code 0); after a failure every
 * rank is stopped with exit_code (MPI_Abort), since the others would wait in a collective. */
DFG_API void dfg_dist_close(dfg_dist *d, int exit_code);

#ifdef __cplusplus
}
#endif
#endif
