/* op.h - the op registry: per op, every fact of its ops.def row (shape rule, gradient rule, cost,
 * attribute layout, in-place rule, dtypes, randomness, memory hint, class flags, whether CUDA has a
 * kernel);
 * the kernels' tables are ops/cpu/cpu.h and ops/cuda/. The enum, the declarations and the table
 * are generated from ops/ops.def, so they cannot drift apart. */
#ifndef DFG_OP_H
#define DFG_OP_H

#include "../graph/ir.h"
#include "attrs.h"
#include "dfg_ops.h"
#include "opdef.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- op ids */
typedef enum {
#define X(E, ...) DFG_OP_##E,
#include "ops.def"
#undef X
    DFG_OP_COUNT
} dfg_op;

/* ---------------------------------------------------------------- per-op facts (the columns of ops.def) */
typedef enum { DFG_GRAD_DIFF, DFG_GRAD_ZERO, DFG_GRAD_NONE } dfg_grad_kind;
typedef enum { DFG_INPLACE_NONE, DFG_INPLACE_IN0, DFG_INPLACE_IN01, DFG_INPLACE_IN12, DFG_INPLACE_EACH } dfg_inplace_rule;
typedef enum { DFG_DTYPES_F32, DFG_DTYPES_ANY } dfg_dtype_rule;
typedef enum { DFG_MEM_KEEPS, DFG_MEM_NEW_AXIS, DFG_MEM_LOGITS, DFG_MEM_LM_HEAD, DFG_MEM_TABLE } dfg_mem_hint;
/* The flags column: the classes of op that passes and tools ask about (ops.def says what each means). */
typedef enum {
    DFG_OPF_GEMM = 1u << 0,       /* its FLOPs are matrix products (tensor-core work on cuda) */
    DFG_OPF_COLLECTIVE = 1u << 1, /* its kernel calls the communicator; its attributes are `collective` */
    DFG_OPF_REMAKE = 1u << 2,     /* cheap to make again from persistent inputs: the backward remakes it */
} dfg_op_flags;

typedef struct {
    double flops;
    double bytes_read;
    double bytes_written;
} dfg_cost;

/* Checks the node's inputs and attributes and fills out[0 .. n->n_out-1]. On a mismatch it
 * returns dfg_node_fail(...), which names the op, the node and every input. */
typedef dfg_status (*dfg_infer_fn)(dfg_graph *g, const dfg_node *n, dfg_out_spec *out);
/* Given dout[i] (the gradient of each output, NULL when none flows), appends nodes computing
 * din[j] for each input j with need[j] (din[j] stays NULL where no gradient flows). */
typedef dfg_status (*dfg_grad_fn)(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, const bool *need,
                                  dfg_tensor **din);
typedef dfg_cost (*dfg_cost_fn)(const dfg_node *n);

typedef struct {
    const char *name;
    int n_in, n_out; /* -1: decided by the builder */
    dfg_grad_kind grad_kind;
    dfg_infer_fn infer;
    dfg_grad_fn grad; /* NULL unless DIFF */
    dfg_cost_fn cost;
    const dfg_attr_layout *attrs;
    dfg_inplace_rule inplace;
    dfg_dtype_rule dtypes;
    bool random;        /* draws from an RNG state: never recomputed */
    dfg_mem_hint mem;
    unsigned flags;     /* dfg_op_flags */
    bool has_cuda;      /* ops/cuda has its kernel */
} dfg_op_info;

extern const dfg_op_info dfg_ops[DFG_OP_COUNT];

static inline const char *dfg_op_name(dfg_op op) { return (unsigned)op < DFG_OP_COUNT ? dfg_ops[op].name : "?"; }
/* Whether op has every flag of `flags` (dfg_op_flags); false for an id that is no op. */
static inline bool dfg_op_flag(unsigned op, unsigned flags) {
    return op < DFG_OP_COUNT && (dfg_ops[op].flags & flags) == flags;
}
/* The op's attribute layout; none for an id that is no op (a damaged program is still written). */
static inline const dfg_attr_layout *dfg_op_attrs(unsigned op) {
    return op < DFG_OP_COUNT ? dfg_ops[op].attrs : &dfg_attr_layout_none;
}

/* ---------------------------------------------------------------- node construction (for builders)
 * dfg_node_add resolves persistent inputs to their current version, runs the op's shape rule
 * and creates the outputs. It returns NULL (with the graph's sticky error set) on failure. */
dfg_node *dfg_node_add(dfg_graph *g, dfg_op op, dfg_tensor *const *in, int n_in, const dfg_attrs *attr, int n_out);
/* A single-output builder: the node's first output, or the graph's poison tensor. */
dfg_tensor *dfg_op_out(dfg_graph *g, dfg_op op, dfg_tensor *const *in, int n_in, const dfg_attrs *attr);
/* Sets the graph's error as "<op> '<node>': <reason>; inputs: a 'x' f32 (2,3), ..." */
dfg_status dfg_node_fail(dfg_graph *g, const dfg_node *n, dfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------- shared rules, used by several ops */
dfg_status dfg_infer_unary(dfg_graph *g, const dfg_node *n, dfg_out_spec *out);
dfg_status dfg_infer_same2(dfg_graph *g, const dfg_node *n, dfg_out_spec *out); /* two float inputs of one shape */
dfg_cost dfg_cost_io(const dfg_node *n, double flops); /* bytes = all inputs read, all outputs written */
/* The attention ops' optional last input, start (ops/attention.c): the node has `plain` inputs, or
 * plain + 1 with start; start is i32 of shape (rows). */
dfg_status dfg_check_attention_arity(dfg_graph *g, const dfg_node *n, int plain);
dfg_status dfg_check_attention_start(dfg_graph *g, const dfg_node *n, int plain, int64_t rows);
/* A run-time start along axis `ax` of x (B, ...) (slice_at, slice_assign_at): one i32 for every
 * row, or on axis 1 (B) i32, one a row (the rows of a multi-turn rollout stand at different
 * columns); else a shape error naming `what` ("pos", "the start"). */
dfg_status dfg_check_run_time_start(dfg_graph *g, const dfg_node *n, const dfg_tensor *x, const dfg_tensor *start, int ax,
                                    const char *what);
/* The shapes of one matmul node: op(a) is (M, K), op(b) is (K, N), repeated over `batch`;
 * an operand of rank 2 is shared by every batch entry. */
typedef struct {
    int64_t M, N, K, batch;
    dfg_shape batch_shape;
} dfg_mm_dims;
bool dfg_matmul_dims(const dfg_node *n, dfg_mm_dims *d, const char **why);
/* The input whose bytes output k may take when that input dies at this node, or -1: the op's
 * inplace rule (ops.def) applied to the node, for inputs of the output's shape and byte size. */
int dfg_op_inplace_input(const dfg_node *n, int k);
/* Sums a broadcast gradient back to `shape` (undoes numpy broadcasting). */
dfg_tensor *dfg_sum_to_shape(dfg_graph *g, dfg_tensor *x, dfg_shape shape);

/* Every rule ops.def names, declared from the table (an op's rules may be shared by several
 * rows: repeating a declaration is harmless). */
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) \
    dfg_status dfg_infer_##infer(dfg_graph *g, const dfg_node *n, dfg_out_spec *out);            \
    dfg_cost dfg_cost_##cost(const dfg_node *n);                                                 \
    DFG_UNLESS_NONE(grad)(dfg_status dfg_grad_##grad(dfg_graph *g, const dfg_node *n, dfg_tensor *const *dout, \
                                                     const bool *need, dfg_tensor **din);)
#include "ops.def"

#undef X

/* An all-reduce of persistent tensors on its stage's last repeat (dfg_allreduce_last): it reads
 * and writes no temporary, so the scheduler may issue it as soon as its tensors are final. */
static inline bool dfg_node_is_late_allreduce(const dfg_node *n) {
    return n->op == DFG_OP_ALLREDUCE && n->attr->collective.last_repeat;
}
/* Does node n run on repeat r (0-based) of its stage's `repeat`? Every node does, but such an
 * all-reduce, which runs on the last one only. */
static inline bool dfg_node_runs_on(const dfg_node *n, int r, int repeat) {
    return !dfg_node_is_late_allreduce(n) || r == repeat - 1;
}

/* linear_logprob keeps a running sum per row of a chunk on the stack */
#define DFG_LOGPROB_MAX_ROWS 4096
/* linear_logprob's vocabulary chunks are multiples of this (or the whole vocabulary); kernels
 * reduce over the vocabulary in blocks of it, so results do not depend on the chunk size */
#define DFG_LOGPROB_V_BLOCK 256

#ifdef __cplusplus
}
#endif
#endif
