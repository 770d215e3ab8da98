/* dfg_passes.h - compiling a program: the pass pipeline and the memory report it produces.
 *
 *   verify -> dce -> schedule -> plan_memory -> verify plan
 *
 * dfg_compile runs the passes once and seals the program: its plan (the schedule of every
 * stage and every tensor's place in one arena) describes exactly these nodes and tensors.
 * Planning only looks at shapes and dtypes, so a cuda plan is made on a machine without a GPU.
 */
#ifndef DFG_PASSES_H
#define DFG_PASSES_H

#include "dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a plan is made for: the planner needs no device, so a cuda plan is made on any machine. */
typedef enum { DFG_TARGET_CPU, DFG_TARGET_CUDA, DFG_TARGET_COUNT } dfg_target;
DFG_API const char *dfg_target_name(dfg_target t); /* "cpu", "cuda"; "?" when out of range */

typedef struct {
    dfg_target target;     /* alignment and, later, kernels: 256-byte on cuda, 64 on cpu */
    size_t align;          /* 0: from the target */
    bool verify_each;      /* run verify after every pass (default on in debug builds) */
    bool no_reuse;         /* give every tensor its own bytes (the baseline planning is measured by) */
    bool keep_order;       /* schedule: keep the build order instead of minimising the live set */
    bool no_fuse;          /* skip the fuse pass (to compare fused with unfused results) */
    int64_t memory_budget; /* bytes the arena may take (0: no limit); remat recomputes to fit */
    bool memory_min;       /* the smallest arena instead (dfg fit --min): remat recomputes while that
                              shrinks the plan, the fused head takes its narrowest vocabulary chunk;
                              memory_budget is then ignored */
    bool no_remat;         /* dfg fit's quick look: the budget sets the fused head's chunk, but nothing
                              is recomputed and an arena over it is no error (fit compares) */
    /* remat's decisions as a plan file recorded them (passes/plan.h): when set, remat makes
       exactly these copies instead of searching (a loaded plan is not planned again) */
    const struct dfg_remat_log *remat_replay;
} dfg_options;

/* Parses "6GiB", "512MiB", "1.5GB", "4096" into bytes (GiB/MiB/KiB binary, GB/MB/KB decimal);
 * false when the text is not a positive size. */
DFG_API bool dfg_parse_bytes(const char *text, int64_t *bytes);

DFG_API dfg_options dfg_options_default(dfg_target target);

/* Runs the passes; on failure the program's error says which pass and why. */
DFG_API dfg_status dfg_compile(dfg_program *p, const dfg_options *opt);
DFG_API bool dfg_is_compiled(const dfg_program *p);

/* What the bytes live at the peak are for. */
typedef enum {
    DFG_CAT_PARAMS,     /* trained weights (a LoRA policy's: its adapters) */
    DFG_CAT_BASE_MODEL, /* frozen base weights (LoRA) */
    DFG_CAT_GRADS,
    DFG_CAT_OPTIMIZER,
    DFG_CAT_REF_MODEL,
    DFG_CAT_KV_CACHE,
    DFG_CAT_ACTIVATIONS,
    DFG_CAT_LOGITS,     /* tensors whose last dim is the vocabulary */
    DFG_CAT_WORKSPACE,  /* library and kernel workspaces */
    DFG_CAT_OTHER,      /* inputs, rollout buffers, RNG and metric state */
    DFG_CAT_COUNT
} dfg_category;

DFG_API const char *dfg_category_name(dfg_category c);

/* Where a compile's time went (dfg compile --time-passes): each pass, and the parts of a pass
 * that can take long (remat's trial plans), in the order first timed. Wall-clock seconds: for
 * reading, never for deciding anything. */
#define DFG_PASS_TIMES_MAX 24
typedef struct {
    const char *name; /* "remat", "remat.measure", ...: a string literal */
    double seconds;
    int calls;
} dfg_pass_time;
typedef struct {
    int n;
    dfg_pass_time t[DFG_PASS_TIMES_MAX];
} dfg_pass_times;

typedef struct {
    dfg_target target;
    size_t align;
    size_t arena_bytes;        /* what the run allocates */
    size_t lower_bound_bytes;  /* max over time of the live bytes: the best any placement can do */
    size_t naive_bytes;        /* every tensor its own bytes */
    size_t persistent_bytes;   /* PARAM/STATE/INPUT/CONST that live for the whole step */
    int n_steps;               /* length of the timeline (one step per node or host stage) */
    int peak_step;             /* where the live bytes reach the lower bound */
    size_t peak[DFG_CAT_COUNT];/* live bytes at peak_step by category */
    const dfg_tensor *largest_temp;
    size_t largest_temp_bytes;
    double flops;              /* one step: every node's flops x its stage's repeat */
    int n_nodes, n_nodes_removed; /* after dce; removed by dce */
    int n_inplace;             /* outputs placed in the bytes of an input that dies there */
    int fused[3];              /* rewrites by the fuse pass: logprob, linear_logprob, bias_gelu */
    int recomputed_nodes;      /* copies remat added to recompute activations in backward */
    double extra_flops;        /* their flops (not included in flops) */
    const char *placement;     /* which placement ordering won */
    /* Data parallel: the ranks the collectives were built for (1: none), and per rank and step
     * the payload bytes of its collectives (each x its stage's repeat) and what a ring
     * implementation sends (and receives) for them: 2 (W-1)/W of an all-reduce's bytes,
     * (W-1)/W of an all-gather's output. */
    int world;
    int n_collectives;
    double comm_bytes, comm_ring_bytes;
    dfg_pass_times times;      /* how long each pass took */
} dfg_report;

/* The report of a compiled program, or NULL. */
DFG_API const dfg_report *dfg_program_report(const dfg_program *p);

/* What the remat pass found under a memory budget: whether the plan fits, and when it does not,
 * the least arena it could reach (the smallest budget it would have met) and what fills it. It
 * is kept when dfg_compile fails, so a caller reads it instead of parsing the error message
 * ("remat: the memory budget of B does not fit; the smallest plan found needs ...", which is made
 * from these fields). */
typedef struct {
    bool ran;                    /* a budget or memory_min was given (and not no_remat): remat searched */
    bool fits;                   /* arena_bytes is within the budget (always under memory_min) */
    int64_t budget;              /* the budget it searched for (0 under memory_min) */
    int64_t arena_bytes;         /* the arena of the plan it stopped at: the first within the budget,
                                    else the least it could reach, the smallest budget that fits */
    int64_t persistent_bytes;    /* of which persistent tensors, which no recompute shrinks */
    int recomputed;              /* activations it recomputed to reach arena_bytes */
    int rounds, batched_rounds;  /* planning rounds it took; of those, the ones that kept several cheap
                                    copies at once (a program with more candidates than one round tries) */
    size_t peak[DFG_CAT_COUNT];  /* that plan's live bytes at its peak, by category */
} dfg_remat_result;

/* What remat found when p was compiled, whether dfg_compile succeeded or not; NULL before
 * dfg_compile. ran is false when there was no budget, or the compile stopped before remat. */
DFG_API const dfg_remat_result *dfg_program_remat(const dfg_program *p);

#ifdef __cplusplus
}
#endif
#endif
