/* ir.h - the IR's plain-data structs, shared by the graph layer, ops, passes and the runtime.
 * Users of the DSL include dfg.h only; this header is for the library's own modules. The graph
 * layer knows nothing of particular ops: a node holds an op id (ops/ops.def) and a pointer to
 * its attributes, and the op layer (ops/node.c) builds every node through the calls at the end.
 */
#ifndef DFG_IR_H
#define DFG_IR_H

#include <stdarg.h>

#include "arena.h"
#include "dfg_graph.h"

#include <uthash.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest dim and element count a tensor may have (checked by every constructor). */
#define DFG_MAX_DIM ((int64_t)1 << 40)

/* The attributes of a node: a plain struct per op family, defined by the op layer
 * (ops/attrs.h); the graph layer only stores a pointer to them. */
typedef union dfg_attrs dfg_attrs;

/* ---------------------------------------------------------------- tensors */
enum {
    DFG_TF_POISON = 1u << 0, /* the stand-in returned after an error */
    DFG_TF_OUTPUT = 1u << 1, /* readable by name after the step (dfg_output) */
    DFG_TF_GRAD = 1u << 2,   /* a parameter's gradient as returned by dfg_backward (memory report) */
    DFG_TF_DEAD = 1u << 3,   /* its producer was removed by dce: no bytes, never read */
    DFG_TF_WORKSPACE = 1u << 4, /* a kernel's scratch, planned like any tensor (memory report) */
    DFG_TF_NULLABLE = 1u << 5,  /* a metric that may have no value in a step (NaN): dfg_metric_nullable */
};

struct dfg_tensor {
    int id;            /* index in the program's tensor table */
    dfg_kind kind;
    dfg_dtype dtype;
    dfg_role role;
    dfg_shape shape;
    char *name;
    uint32_t flags;
    dfg_graph *graph;   /* the graph of a TEMP or INPUT; NULL for program-wide tensors */
    dfg_node *producer; /* the node that makes a TEMP */
    int producer_slot;  /* which of the producer's outputs */
    /* Storage: a tensor either owns its bytes (storage == itself) or shares another's:
     * a reshape view shares its source's, and a new version of a persistent tensor (the
     * output of an in-place write) shares the persistent tensor's. */
    dfg_tensor *storage;
    dfg_tensor *version_of; /* for versions: the persistent tensor written; else NULL */
    dfg_tensor *view_of;    /* for views: the tensor viewed; else NULL */
    dfg_init init;          /* PARAM/STATE */
    void *data;             /* CONST: numel * dtype_size bytes */
    /* dfg_set_scope: the stages (by name) between which a STATE or INPUT holds its value; outside
     * them its bytes belong to other tensors. NULL: the whole step. */
    char *scope_first, *scope_last;
    /* A gradient contribution made by dfg_backward: the tensor it is the gradient of (the fuse
     * and remat passes use it to re-differentiate a region they rewrite). */
    dfg_tensor *grad_wrt;
    dfg_tensor *init_from; /* dfg_init_from: starts as (a converted copy of) this tensor */
    UT_hash_handle hh;      /* program's by-name index (persistent and output tensors) */
};

/* ---------------------------------------------------------------- nodes and graphs */
enum {
    DFG_NF_BACKWARD = 1u << 0,   /* appended by dfg_backward */
    DFG_NF_FUSED = 1u << 1,      /* made by the fuse pass from several user ops */
    DFG_NF_RECOMPUTED = 1u << 2, /* a copy the remat pass added to recompute an activation */
};

struct dfg_node {
    int id; /* index in its graph: build order until the schedule pass reorders the nodes */
    unsigned op; /* a dfg_op of ops/ops.def */
    uint32_t flags;
    const dfg_node *grad_of; /* nodes made by a gradient rule: the forward node it differentiates */
    const dfg_node *after;   /* scheduling: must run after this node of its graph (remat copies) */
    char *name;
    int n_in, n_out;
    dfg_tensor **in;
    dfg_tensor **out;
    const dfg_attrs *attr; /* never NULL once built (zeros for an op without attributes) */
    dfg_graph *graph;
};

struct dfg_graph {
    int id;
    char *name;
    dfg_program *program;
    dfg_node **nodes;
    int n_nodes, cap_nodes;
    /* latest[t->id] is the current version of persistent tensor t in this graph (NULL: t itself) */
    dfg_tensor **latest;
    int cap_latest;
    dfg_tensor *poison;
    /* Set by compiler passes while they append nodes to a compiled program: inputs are taken as
     * given (no version resolution, the pass knows which value it reads) and nothing is sealed. */
    bool rewriting;
    dfg_status status;
    char error[1024];
};

typedef enum { DFG_STAGE_GRAPH, DFG_STAGE_HOST } dfg_stage_kind;

typedef struct {
    dfg_stage_kind kind;
    char *name;
    dfg_graph *graph; /* GRAPH */
    int repeat;       /* GRAPH: runs per step */
    char *symbol;     /* HOST: function name */
    int64_t first_step, last_step; /* dfg_stage_steps: runs in steps first..last (last < 0: no end) */
    dfg_tensor *until;              /* dfg_stage_until: a nonzero scalar after a run ends the runs; or NULL */
    dfg_tensor *when;               /* dfg_stage_when: the stage runs when when_lo < value <= when_hi; or NULL */
    double when_lo, when_hi;
    dfg_tensor *runs;               /* dfg_stage_runs: this step's run count (at most repeat); or NULL */
    /* dfg_stage_loop, on the loop's last stage: after it, while loop_until reads 0 and fewer than
     * loop_max returns were made this step, the step goes back to stage loop_to; else -1 */
    int loop_to, loop_max;
    dfg_tensor *loop_until;
} dfg_stage;

/* One setting. A key of the settings table (graph/settings.def) is parsed and checked when it is
 * set: `value` is then its canonical text (what the plan records) and the fields below hold the
 * parsed value, which every typed read returns. A key of the pipeline's own is parsed by the
 * pipeline's typed read, with the same parser (graph/settings_table.c). */
typedef struct {
    char *key, *value;
    bool used; /* read by the pipeline through a dfg_setting_* accessor (graph/settings.c) */
    const dfg_setting_spec *spec; /* its row of the table, or NULL */
    int64_t i;      /* BOOL: 0/1; INT (DFG_SETTING_AUTO for auto); ENUM: the value's index */
    double f;       /* FLOAT */
    int n_items;    /* lists: the items, split */
    char **items;
    double *nums;   /* INTS and FLOATS: the items' values */
} dfg_setting;

/* What a pipeline declares about its program for the tools that run it (graph/declare.c). */
typedef struct {
    char *name;
    dfg_tensor *t;
} dfg_dump_decl;

typedef struct {
    char *host_init, *host_release;  /* dfg_host_state: the pipeline's symbols, or NULL */
    char **rollout_stages;           /* dfg_declare_rollout */
    int n_rollout_stages;
    dfg_tensor **rollout_tensors;
    int n_rollout_tensors;
    dfg_tensor *shared_tokens;       /* dfg_declare_shared_prompts, or NULL */
    int64_t shared_len, shared_group;
    dfg_dump_decl *dumps;            /* dfg_declare_dump */
    int n_dumps, cap_dumps;
    char *rollouts_only;             /* dfg_declare_rollouts_only: why, or NULL */
    bool batch_invariant;            /* dfg_declare_batch_invariant */
    dfg_tensor *prompt_tokens;       /* dfg_declare_rollout_prompt, or NULL */
    int64_t prompt_len;
    dfg_fit_knob knobs[DFG_MAX_FIT_KNOBS]; /* dfg_declare_fit_knob (not stored in plans: dfg fit reads
                                              them from the program the pipeline builds) */
    int n_knobs;
} dfg_declarations;

struct dfg_program {
    char *name;
    dfg_setting *settings;
    int n_settings, cap_settings;
    dfg_arena arena;
    dfg_tensor **tensors;
    int n_tensors, cap_tensors;
    dfg_tensor *by_name; /* uthash head */
    dfg_graph **graphs;
    int n_graphs, cap_graphs;
    dfg_stage *stages;
    int n_stages, cap_stages;
    dfg_declarations decl;
    struct dfg_plan *plan; /* set by dfg_compile (passes/); the program is then sealed */
    dfg_status status;
    char error[1024];
    char notes[2048]; /* dfg_program_note: lines for the person compiling (not stored in plans) */
};

/* ---------------------------------------------------------------- helpers for the library */
bool dfg_is_persistent(const dfg_tensor *t); /* PARAM, STATE, INPUT or CONST, not a version */
dfg_tensor *dfg_tensor_new(dfg_program *p, dfg_kind kind, dfg_dtype dt, dfg_shape shape, const char *name);
char *dfg_program_strdup(dfg_program *p, const char *s);
/* After dfg_compile the program is sealed: false, or true with the program's error set. */
bool dfg_program_sealed(dfg_program *p, const char *what);
dfg_status dfg_program_err(dfg_program *p, dfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
dfg_status dfg_graph_err(dfg_graph *g, dfg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "x 'h.0.qkv' f32 (4,19,144)" */
char *dfg_tensor_desc(const dfg_tensor *t, char *buf, size_t len);
int dfg_norm_axis(int axis, int rank); /* -1 -> rank-1; returns -1 when out of range */
/* numpy broadcasting; false when the shapes do not broadcast */
bool dfg_shape_broadcast(dfg_shape a, dfg_shape b, dfg_shape *out);
/* Value of a DFG_SHAPE literal with rank and dims given as an array. */
dfg_shape dfg_shape_of(int rank, const int64_t *dims);
bool dfg_is_float(dfg_dtype t); /* f32, bf16, f16 */

/* ---------------------------------------------------------------- node construction (ops/node.c)
 * What an op's shape rule says about one output. alias >= 0 means the output shares the storage
 * of input `alias`: as a view (writes == false, e.g. reshape) or as the new version of a
 * persistent tensor written in place (writes == true, e.g. assign). */
typedef struct {
    dfg_dtype dtype;
    dfg_shape shape;
    int alias;
    bool writes;
} dfg_out_spec;

/* A new node of op id `op` with room for its inputs and outputs, not yet in the graph; NULL (the
 * graph's error set) when the graph has an error or its program is compiled. */
dfg_node *dfg_graph_node_new(dfg_graph *g, unsigned op, const char *op_name, int n_in, int n_out);
/* Sets n->in from in[]: a persistent tensor stands for its current version in g; a temporary
 * must be g's own and not overwritten since. false (the graph's error set) on a bad input. */
bool dfg_graph_node_inputs(dfg_graph *g, dfg_node *n, const char *op_name, dfg_tensor *const *in);
/* Checks the shape rule's output specs (dims, aliases, in-place writes of PARAM/STATE only, one
 * write per tensor), makes the outputs, appends n to g and records the new versions. */
dfg_status dfg_graph_node_finish(dfg_graph *g, dfg_node *n, const char *op_name, const dfg_out_spec *spec);
/* Sets the graph's error as "<op> '<node>' in graph '<g>': <reason>; inputs: #0 ..." */
dfg_status dfg_graph_node_failv(dfg_graph *g, const dfg_node *n, const char *op_name, dfg_status s, const char *fmt,
                                va_list ap);

#ifdef __cplusplus
}
#endif
#endif
