/* plan.h - the compiled plan (internal): timeline, lifetimes, buffers and their offsets.
 *
 * The timeline has one step per scheduled node and one per host stage, stage after stage; a
 * stage that repeats (decode steps, micro-batches) appears once, because every run of its body
 * reuses the same bytes. A buffer is what gets bytes in the arena: a tensor that owns storage
 * together with the views and versions that share it, and with the outputs placed in it in place.
 */
#ifndef DFG_PLAN_H
#define DFG_PLAN_H

#include "../graph/ir.h"
#include "../ops/op.h"
#include "memplan.h"
#include "dfg_passes.h"

typedef struct {
    int32_t first, last; /* inclusive steps; first < 0: never live */
} dfg_span;

typedef struct {
    int64_t bytes;     /* the owner's bytes */
    int64_t size;      /* bytes rounded up to the alignment: what placement reserves */
    int64_t offset;
    dfg_span life;
    int owner;         /* tensor id of the storage owner */
    int merged_into;   /* -1, or the buffer this one was placed in (in-place reuse) */
    dfg_category cat;
    bool persistent;   /* lives for the whole timeline: placed below every transient buffer */
    bool pinned;       /* holds a dfg_output: read after the step, so never overwritten in place */
} dfg_buf;

/* What remat decided, enough to make the same copies again without searching (a plan file
 * records it; dfg_options.remat_replay applies it). A node is named by the id of its first
 * output, which the same program gives the same node. */
typedef struct {
    uint32_t graph;  /* the graph's id */
    uint32_t src;    /* the node copied */
    uint32_t after;  /* the node the copy must follow (dfg_node.after), + 1; 0: none */
    uint32_t n_in;
    uint32_t *in;    /* tensor ids the copy reads */
} dfg_remat_copy;

typedef struct {
    uint32_t reader, slot, tensor; /* node reader's input slot reads tensor (a copy's output) */
} dfg_remat_redirect;

typedef struct dfg_remat_log {
    uint32_t n_copies, n_redirects, n_graphs;
    dfg_remat_copy *copies;     /* in the order they were made: their outputs get the next ids */
    dfg_remat_redirect *redirects;
    uint32_t *n_order;          /* [graph] */
    uint32_t **order;           /* [graph][position]: each graph's node order as remat left it */
    int32_t rounds, batched_rounds;
} dfg_remat_log;

struct dfg_plan {
    dfg_options opt;
    dfg_arena *arena; /* where the plan's arrays live: the program's, or a trial's scratch */
    dfg_report report;
    dfg_remat_result remat; /* the remat pass's (dfg_program_remat): kept when the compile fails */
    dfg_remat_log *remat_log; /* its decisions, in the plan's arena; NULL when remat did not run */
    int n_steps;
    int *stage_step;  /* [n_stages + 1]: first step of each stage; [n_stages] = n_steps */
    int *graph_stage; /* [graph id]: the stage that runs it, or -1 */
    dfg_span *life;   /* [tensor id]: the steps where the tensor itself is written or read */
    int *buf_of;      /* [tensor id]: its buffer after merging, or -1 */
    dfg_buf *bufs;
    int n_bufs;
    dfg_memplan mem;  /* [tensor id] offsets and the arena size: what the runtime uses */
};

typedef struct dfg_plan dfg_plan;

/* The buffer tensor i's bytes are in: its own, or the one an in-place merge put it in; -1 when
 * it has none. */
static inline int dfg_plan_buf_root(const dfg_plan *plan, int i) {
    int b = plan->buf_of[i];
    while (b >= 0 && plan->bufs[b].merged_into >= 0) b = plan->bufs[b].merged_into;
    return b;
}

/* The passes, in pipeline order (passes/<name>.c). Errors go to the program's sticky error. */
dfg_status dfg_pass_verify(dfg_program *p, const dfg_options *o);
dfg_status dfg_pass_dce(dfg_program *p, const dfg_options *o);
dfg_status dfg_pass_fuse(dfg_program *p, const dfg_options *o);
dfg_status dfg_pass_remat(dfg_program *p, const dfg_options *o);
dfg_status dfg_pass_schedule(dfg_program *p, const dfg_options *o);
dfg_status dfg_pass_plan_memory(dfg_program *p, const dfg_options *o);
dfg_status dfg_pass_verify_plan(dfg_program *p, const dfg_options *o);

/* remat_log.c: recording remat's copies (in the order made, with what each copies) once the
 * search ends, and making them again from a record instead of searching. */
dfg_status dfg_remat_log_record(dfg_program *p, dfg_node *const *copies, const dfg_node *const *orig,
                                const uint32_t *const *made_with, int n_copies, int rounds, int batched_rounds);
dfg_status dfg_remat_replay(dfg_program *p, const dfg_remat_log *log);

/* The schedule pass on one staged graph (remat reschedules only the graphs a trial changed). */
dfg_status dfg_schedule_graph(dfg_program *p, dfg_graph *g);

/* plan_memory's parts: lifetimes and buffers (liveness.c), offsets (placement.c), the report
 * (report.c). */
dfg_status dfg_plan_liveness(dfg_program *p, dfg_plan *plan);
dfg_status dfg_plan_place(dfg_program *p, dfg_plan *plan);
void dfg_plan_report(dfg_program *p, dfg_plan *plan);

/* Monotonic wall-clock seconds, and adding a span to the plan's pass times under name (a string
 * literal; an entry per name, calls counted). */
double dfg_seconds(void);
void dfg_plan_time(dfg_plan *plan, const char *name, double seconds);

/* The frozen base model's parameters as the model has them: NF4 weights count the elements
 * they dequantise to, their packed bytes and quantisation state nothing (-1: out of memory). */
int64_t dfg_base_params(const dfg_program *p);

/* The graph's stage index, or -1 when the graph is not staged. */
int dfg_graph_stage_index(const dfg_program *p, const dfg_graph *g);
/* Zeroed memory from plan->arena: the program's arena for the real plan (it lives as long as the
 * program), a scratch arena for the trial plans remat makes. */
void *dfg_plan_alloc(dfg_plan *plan, size_t bytes);
/* The consumers of every tensor of a graph, as a CSR list over tensor ids (cons_start has
 * n_tensors + 1 entries); a node that reads a tensor twice is listed once per read. */
typedef struct {
    int *start;
    const dfg_node **node;
} dfg_consumers;
dfg_status dfg_consumers_build(const dfg_program *p, const dfg_graph *g, dfg_consumers *c);
void dfg_consumers_free(dfg_consumers *c);

/* Graph surgery for passes (rewrite.c). dfg_rw_add builds a node with the op's shape rule and
 * appends it; dfg_rw_move_tail moves the nodes from first_new to the end so they run before the
 * node now at pos; dfg_rw_replace_uses makes every reader of old read repl (names of outputs,
 * gradient tags and views follow). */
dfg_node *dfg_rw_add(dfg_graph *g, dfg_op op, dfg_tensor *const *in, int n_in, const dfg_attrs *attr, int n_out);
void dfg_rw_move_tail(dfg_graph *g, int first_new, int pos);
void dfg_rw_renumber(dfg_graph *g);
void dfg_rw_replace_uses(dfg_program *p, dfg_graph *g, dfg_tensor *old, dfg_tensor *repl);
void dfg_rw_refresh_views(dfg_graph *g);
/* Takes node n out of its graph; its outputs are marked dead (nothing may read them). */
void dfg_rw_remove(dfg_graph *g, dfg_node *n);

#endif
