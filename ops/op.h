/* op.h - the op registry: per op, its shape rule, gradient rule and cost (kernels: ops/cpu/cpu.h).
 *
 * The table is generated from ops/ops.def, so every op has every entry and the enum and the
 * tables cannot drift apart.
 */
#ifndef DFG_OP_H
#define DFG_OP_H

#include "../graph/ir.h"

typedef enum { DFG_GRAD_DIFF, DFG_GRAD_ZERO, DFG_GRAD_NONE } dfg_grad_kind;

/* What infer says about one output. alias >= 0 means the output shares the storage of input
 * `alias`: as a view (writes == false, e.g. reshape) or as the new version of a persistent
 * tensor written in place (writes == true, e.g. assign). */
typedef struct {
    dfg_dtype dtype;
    dfg_shape shape;
    int alias;
    bool writes;
} dfg_out_spec;

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
    dfg_grad_fn grad;
    dfg_cost_fn cost;
} dfg_op_info;

extern const dfg_op_info dfg_ops[DFG_OP_COUNT];

static inline const char *dfg_op_name(dfg_op op) { return (unsigned)op < DFG_OP_COUNT ? dfg_ops[op].name : "?"; }

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
dfg_status infer_unary(dfg_graph *g, const dfg_node *n, dfg_out_spec *out);
dfg_status infer_same2(dfg_graph *g, const dfg_node *n, dfg_out_spec *out); /* two float inputs of one shape */
bool dfg_is_float(dfg_dtype t);
dfg_cost dfg_cost_io(const dfg_node *n, double flops); /* bytes = all inputs read, all outputs written */
/* The shapes of one matmul node: op(a) is (M, K), op(b) is (K, N), repeated over `batch`;
 * an operand of rank 2 is shared by every batch entry. */
typedef struct {
    int64_t M, N, K, batch;
    dfg_shape batch_shape;
} dfg_mm_dims;
bool dfg_matmul_dims(const dfg_node *n, dfg_mm_dims *d, const char **why);
/* The input whose bytes output k may take when that input dies at this node, or -1 (see
 * ops/inplace.c for the contract kernels keep). */
int dfg_op_inplace_input(const dfg_node *n, int k);
/* Sums a broadcast gradient back to `shape` (undoes numpy broadcasting). */
dfg_tensor *dfg_sum_to_shape(dfg_graph *g, dfg_tensor *x, dfg_shape shape);

#define X(E, name, nin, nout, gk, infer, grad, cost, cpu)                               \
    dfg_status infer(dfg_graph *g, const dfg_node *n, dfg_out_spec *out);              \
    dfg_cost cost(const dfg_node *n);
#include "ops.def"
#undef X

/* gradient rules, declared one by one because NULL entries have none */
dfg_status grad_add(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_sub(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_mul(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_div(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_minmax(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_scale(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_exp(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_log(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_neg(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_sqrt(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_clamp(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_gelu(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_where(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_cast(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_reshape(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_permute(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_slice(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_concat(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_expand(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_sum(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_mean(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_masked_sum(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_matmul(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_bias_add(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_layernorm(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_softmax(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_log_softmax(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_attention(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_attention_prefix(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_embed(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_take(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_logprob(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_linear_logprob(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);
dfg_status grad_bias_gelu(dfg_graph *, const dfg_node *, dfg_tensor *const *, const bool *, dfg_tensor **);

/* linear_logprob keeps a running sum per row of a chunk on the stack */
#define DFG_LOGPROB_MAX_ROWS 4096
/* linear_logprob's vocabulary chunks are multiples of this (or the whole vocabulary); kernels
 * reduce over the vocabulary in blocks of it, so results do not depend on the chunk size */
#define DFG_LOGPROB_V_BLOCK 256

#endif
