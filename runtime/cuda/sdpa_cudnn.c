/* sdpa_cudnn.c - attention on the GPU through cuDNN's fused flash attention, from C through
 * cuDNN's backend (graph) API: the GPU device's ctx->sdpa (device_cuda.c).
 *
 * A call's descriptor (ops/cuda/sdpa.h) becomes the operation graph cuDNN's runtime fusion
 * engines recognise as fused flash attention -- the one cudnn-frontend's SDPA node builds -- with
 * Q, K^T and V read in place from dfg's fused qkv by their strides:
 *   forward   S = Q K^T; S *= scale; causal mask (GEN_INDEX row >= col, BINARY_SELECT -inf);
 *             M = rowmax S; E = exp(S - M); Z = rowsum E; stats = M + log Z; P = E / Z
 *             (in the I/O type); O = P V
 *   backward  sums = rowsum(dO * O) (f32, in the workspace); S = scale Q K^T - stats; causal
 *             mask; P = exp S; dV = P^T dO; dS = scale P (dO V^T - sums); dK = dS^T Q; dQ = dS K
 * The backward is the deterministic form (dQ written by its matmul, not accumulated atomically
 * in f32; engines noted nondeterministic are skipped): dfg's runs stay bit-reproducible and CUDA
 * Graph replays equal eager launches. Its price is workspace for dP (b h s_q s_kv in 16 bits).
 *
 * A plan (graph, engine heuristics, execution plan) is built the first time a descriptor is seen
 * -- inside the first step's capture, with the thread's capture mode relaxed for the build -- and
 * cached; later calls bind the pointers in a variant pack and execute. Workspace: the node's
 * scratch, which the device's scratch rule sizes with dfg_sdpa_cudnn_workspace (the f32 row sums,
 * then the plan's own). Every cuDNN status is checked: a failure while executing is the node's
 * error with cuDNN's message. cuDNN refusing to build a plan (no engine for the graph, none within
 * the planned workspace) is said once on stderr, and every call of that descriptor then returns
 * DFG_ERR_UNSUPPORTED, so the launchers run dfg's own kernels -- unless DFG_CUDNN_SDPA=require.
 *   DFG_CUDNN_SDPA=0        never use cuDNN for attention (dfg's kernels; no workspace planned)
 *   DFG_CUDNN_SDPA=require  cuDNN refusing a call dfg_sdpa_cudnn_supports takes is an error
 *
 * It has run on one GPU (an H100, 2026-11-24: tools/gpu-check.sh's GRPO runs in bf16 used it;
 * README, "GPU status"), where racecheck reported hazards inside cuDNN's backward kernel in bf16. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

#define SDPA_CACHE 64    /* distinct descriptors (a model has two: its forward and its backward) */
#define SDPA_DESCS 192   /* backend descriptors of one plan: tensors, ops, configs */
#define SDPA_OPS 32      /* operations of one graph */
#define SDPA_CONFIGS 16  /* engine configurations tried, best first */
#define SDPA_PLAN_ALLOWANCE ((size_t)16 << 20) /* the plan's own workspace beyond dP */
#define ALIGN256(x) (((x) + 255) & ~(size_t)255)

/* the unique ids of the graph's non-virtual tensors: what the variant pack binds */
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SCALE, UID_NEG_INF, UID_ONE, UID_SUMS, UID_N,
    UID_VIRTUAL = 100 /* intermediates from here */
};

typedef struct {
    dfg_sdpa_desc d;
    bool backward;
    dfg_sdpa_cudnn_report r;   /* r.planned: a plan exists; else cuDNN refused (r.why), dfg's kernels run it */
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t descs[SDPA_DESCS]; /* every descriptor of the plan, kept while it lives */
    int n_descs;
    size_t sums_bytes;         /* the backward's f32 row sums at the start of the workspace */
    int64_t plan_workspace;    /* the plan's own bytes, after them */
    float scale, neg_inf, one; /* by-value operands: the variant pack points here */
} sdpa_plan;

struct dfg_sdpa_cudnn {
    cudnnHandle_t handle;      /* NULL: deviceless, plans for the GPU devprop describes, never run */
    cudnnBackendDescriptor_t devprop;
    size_t version;            /* cudnnGetVersion() of the library loaded */
    bool require;              /* DFG_CUDNN_SDPA=require */
    bool noted_version;        /* said once that the library is too old */
    sdpa_plan *plans[SDPA_CACHE];
    int n_plans;
};

/* "" (use, fall back), "0" (off) or "require" */
static int sdpa_mode(void) {
    const char *e = getenv("DFG_CUDNN_SDPA");
    return !e ? 1 : !strcmp(e, "0") ? 0 : !strcmp(e, "require") ? 2 : 1;
}

static int64_t ceil128(int64_t x) { return (x + 127) / 128 * 128; }

/* The workspace of a call: the backward's row sums, then the plan's own -- the deterministic
 * backward's dP (b, h, s_q, s_kv), 16 bits an element, its sequences padded to 128 (cuDNN 9.19's
 * sm_90 engines ask for b h ceil128(s_q) ceil128(s_kv) 2 + 256 bytes; cudnn-frontend pads to 64),
 * plus an allowance; the plan's actual need is checked when it is built. */
static size_t workspace_of(const dfg_sdpa_desc *d, bool backward, size_t *sums_bytes) {
    size_t rows = (size_t)(d->batch * d->heads * d->seq_q);
    size_t sums = backward ? ALIGN256(rows * sizeof(float)) : 0;
    size_t dp = backward ? (size_t)(d->batch * d->heads * ceil128(d->seq_q) * ceil128(d->seq_kv)) * 2 : 0;
    if (sums_bytes) *sums_bytes = sums;
    return sums + ALIGN256(dp) + SDPA_PLAN_ALLOWANCE;
}

size_t dfg_sdpa_cudnn_workspace(const dfg_node *n) {
    dfg_sdpa_desc d;
    const char *why;
    bool backward = n->op == DFG_OP_ATTENTION_BWD;
    if (!sdpa_mode() || (n->op != DFG_OP_ATTENTION && !backward)) return 0;
    if (!(backward ? dfg_sdpa_backward_desc(n, &d, &why) : dfg_sdpa_forward_desc(n, &d, &why)) ||
        !dfg_sdpa_cudnn_supports(&d, backward, NULL, &why))
        return 0;
    return workspace_of(&d, backward, NULL);
}

/* ---------------------------------------------------------------- building a graph */
/* A graph under construction. Every call through it checks its status; the first failure sticks
 * (later calls do nothing), naming the step. */
typedef struct {
    sdpa_plan *p;
    cudnnStatus_t st;
    const char *what;
    cudnnBackendDescriptor_t ops[SDPA_OPS];
    int n_ops;
    int64_t next_uid;
} gb;

static bool failed(gb *g, cudnnStatus_t s, const char *what) {
    if (g->st == CUDNN_STATUS_SUCCESS && s != CUDNN_STATUS_SUCCESS) g->st = s, g->what = what;
    return g->st != CUDNN_STATUS_SUCCESS;
}

static cudnnBackendDescriptor_t make(gb *g, cudnnBackendDescriptorType_t type, const char *what) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->st) return NULL;
    if (g->p->n_descs == SDPA_DESCS) return failed(g, CUDNN_STATUS_INTERNAL_ERROR, "too many descriptors"), NULL;
    if (failed(g, cudnnBackendCreateDescriptor(type, &d), what)) return NULL;
    g->p->descs[g->p->n_descs++] = d;
    return d;
}

static void set(gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                int64_t count, const void *value, const char *what) {
    if (!g->st) failed(g, cudnnBackendSetAttribute(d, name, type, count, value), what);
}

static void finalize(gb *g, cudnnBackendDescriptor_t d, const char *what) {
    if (!g->st) failed(g, cudnnBackendFinalize(d), what);
}

static void add_op(gb *g, cudnnBackendDescriptor_t op, const char *what) {
    finalize(g, op, what);
    if (g->st) return;
    if (g->n_ops == SDPA_OPS)
        failed(g, CUDNN_STATUS_INTERNAL_ERROR, "too many operations");
    else
        g->ops[g->n_ops++] = op;
}

static cudnnBackendDescriptor_t tensor(gb *g, int64_t uid, cudnnDataType_t type, const int64_t dim[4],
                                       const int64_t stride[4], bool is_virtual, bool by_value, const char *what) {
    cudnnBackendDescriptor_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    int64_t align = 16;
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, what);
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, what);
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    if (by_value) set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    finalize(g, t, what);
    return t;
}

/* An operand of the call: its (b, h, s, d) dims and strides; `transposed` swaps the last two
 * (K^T and V^T as the matmuls want them, read from the same memory). */
static cudnnBackendDescriptor_t operand(gb *g, int64_t uid, int k, int64_t rows, bool transposed, const char *what) {
    const dfg_sdpa_desc *d = &g->p->d;
    const dfg_sdpa_layout *l = &d->t[k];
    bool stats = k == DFG_SDPA_STATS;
    int64_t cols = stats ? 1 : d->head_dim;
    int64_t dim[4] = {d->batch, d->heads, transposed ? cols : rows, transposed ? rows : cols};
    int64_t stride[4] = {l->stride[0], l->stride[1], transposed ? l->stride[3] : l->stride[2],
                         transposed ? l->stride[2] : l->stride[3]};
    cudnnDataType_t type = stats ? CUDNN_DATA_FLOAT : d->dtype == DFG_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    return tensor(g, uid, type, dim, stride, false, false, what);
}

/* a scalar passed by value (the variant pack points at the plan's copy) */
static cudnnBackendDescriptor_t scalar(gb *g, int64_t uid, const char *what) {
    static const int64_t one[4] = {1, 1, 1, 1};
    return tensor(g, uid, CUDNN_DATA_FLOAT, one, one, false, true, what);
}

/* an intermediate of dims (b, h, r, c): packed rows, or with `transposed` the packed (b, h, c, r)
 * seen as (b, h, r, c) -- the P^T and dS^T views the backward's matmuls read */
static cudnnBackendDescriptor_t virt(gb *g, cudnnDataType_t type, int64_t r, int64_t c, bool transposed) {
    const dfg_sdpa_desc *d = &g->p->d;
    int64_t dim[4] = {d->batch, d->heads, r, c};
    int64_t stride[4] = {d->heads * r * c, r * c, transposed ? 1 : c, transposed ? r : 1};
    return tensor(g, g->next_uid++, type, dim, stride, true, false, "an intermediate tensor");
}

/* The pointwise operation y = pw(x[, b[, t]]) of a finalized pointwise descriptor. */
static cudnnBackendDescriptor_t pointwise_op(gb *g, cudnnBackendDescriptor_t pw, cudnnBackendDescriptor_t x,
                                             cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                             cudnnBackendDescriptor_t y, const char *what) {
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    if (b) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    if (t) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    add_op(g, op, what);
    return y;
}

/* A pointwise descriptor of `mode` computed in `prec`, not yet finalized. */
static cudnnBackendDescriptor_t pointwise_desc(gb *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, const char *what) {
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    return pw;
}

/* y = mode(x[, b[, t]]) elementwise, computed in `prec` */
static cudnnBackendDescriptor_t pointwise(gb *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                          cudnnBackendDescriptor_t y, const char *what) {
    cudnnBackendDescriptor_t pw = pointwise_desc(g, mode, prec, what);
    finalize(g, pw, what);
    return pointwise_op(g, pw, x, b, t, y, what);
}

/* y (int32) = the index of each element of x along `axis` */
static cudnnBackendDescriptor_t gen_index(gb *g, cudnnBackendDescriptor_t x, int64_t axis, cudnnBackendDescriptor_t y,
                                          const char *what) {
    cudnnBackendDescriptor_t pw = pointwise_desc(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, what);
    set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    finalize(g, pw, what);
    return pointwise_op(g, pw, x, NULL, NULL, y, what);
}

/* c = a b, batched over (b, h), f32 accumulation */
static void matmul(gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
                   const char *what) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    finalize(g, mm, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, what);
    add_op(g, op, what);
}

/* y (b, h, r, 1) = reduce(x (b, h, r, c)) along the last dim, in f32 */
static void reduction(gb *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                      const char *what) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, what);
    set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    finalize(g, rd, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, what);
    add_op(g, op, what);
}

/* y: the same elements as x under other dims and strides (a transposed view) */
static void reshape(gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, const char *what) {
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    add_op(g, op, what);
}

/* The causal mask of scores s (b, h, s_q, s_kv): -inf where the key's index passes the query's. */
static cudnnBackendDescriptor_t causal(gb *g, cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t neg_inf) {
    const dfg_sdpa_desc *d = &g->p->d;
    int64_t q = d->seq_q, k = d->seq_kv;
    cudnnBackendDescriptor_t row = gen_index(g, s, 2, virt(g, CUDNN_DATA_INT32, q, k, false), "causal mask: row index");
    cudnnBackendDescriptor_t col = gen_index(g, s, 3, virt(g, CUDNN_DATA_INT32, q, k, false), "causal mask: column index");
    cudnnBackendDescriptor_t keep = pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL,
                                              virt(g, CUDNN_DATA_BOOLEAN, q, k, false), "causal mask: row >= column");
    return pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neg_inf, keep,
                     virt(g, CUDNN_DATA_FLOAT, q, k, false), "causal mask: select");
}

static cudnnDataType_t io_type(const dfg_sdpa_desc *d) { return d->dtype == DFG_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

static void forward_graph(gb *g) {
    const dfg_sdpa_desc *d = &g->p->d;
    int64_t q = d->seq_q, k = d->seq_kv;
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t Q = operand(g, UID_Q, DFG_SDPA_Q, q, false, "Q");
    cudnnBackendDescriptor_t KT = operand(g, UID_K, DFG_SDPA_K, k, true, "K^T");
    cudnnBackendDescriptor_t V = operand(g, UID_V, DFG_SDPA_V, k, false, "V");
    cudnnBackendDescriptor_t O = operand(g, UID_O, DFG_SDPA_O, q, false, "O");
    cudnnBackendDescriptor_t stats = operand(g, UID_STATS, DFG_SDPA_STATS, q, false, "stats");
    cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE, "scale"), neg_inf = scalar(g, UID_NEG_INF, "-inf");
    cudnnBackendDescriptor_t s = virt(g, F, q, k, false);
    matmul(g, Q, KT, s, "S = Q K^T");
    s = pointwise(g, CUDNN_POINTWISE_MUL, F, s, scale, NULL, virt(g, F, q, k, false), "S * scale");
    if (d->causal) s = causal(g, s, neg_inf);
    cudnnBackendDescriptor_t m = virt(g, F, q, 1, false), z = virt(g, F, q, 1, false);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, m, "M = rowmax S");
    cudnnBackendDescriptor_t e = pointwise(g, CUDNN_POINTWISE_SUB, F, s, m, NULL, virt(g, F, q, k, false), "S - M");
    e = pointwise(g, CUDNN_POINTWISE_EXP, F, e, NULL, NULL, virt(g, F, q, k, false), "exp(S - M)");
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, z, "Z = rowsum");
    cudnnBackendDescriptor_t logz = pointwise(g, CUDNN_POINTWISE_LOG, F, z, NULL, NULL, virt(g, F, q, 1, false), "log Z");
    pointwise(g, CUDNN_POINTWISE_ADD, F, m, logz, NULL, stats, "stats = M + log Z");
    cudnnBackendDescriptor_t p = pointwise(g, CUDNN_POINTWISE_DIV, F, e, z, NULL, virt(g, io_type(d), q, k, false), "P = E / Z");
    matmul(g, p, V, O, "O = P V");
}

static void backward_graph(gb *g) {
    const dfg_sdpa_desc *d = &g->p->d;
    int64_t q = d->seq_q, k = d->seq_kv, D = d->head_dim;
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, IO = io_type(d);
    cudnnBackendDescriptor_t Q = operand(g, UID_Q, DFG_SDPA_Q, q, false, "Q");
    cudnnBackendDescriptor_t KT = operand(g, UID_K, DFG_SDPA_K, k, true, "K^T");
    cudnnBackendDescriptor_t VT = operand(g, UID_V, DFG_SDPA_V, k, true, "V^T");
    cudnnBackendDescriptor_t O = operand(g, UID_O, DFG_SDPA_O, q, false, "O");
    cudnnBackendDescriptor_t dO = operand(g, UID_DO, DFG_SDPA_DO, q, false, "dO");
    cudnnBackendDescriptor_t stats = operand(g, UID_STATS, DFG_SDPA_STATS, q, false, "stats");
    cudnnBackendDescriptor_t dQ = operand(g, UID_DQ, DFG_SDPA_DQ, q, false, "dQ");
    cudnnBackendDescriptor_t dK = operand(g, UID_DK, DFG_SDPA_DK, k, false, "dK");
    cudnnBackendDescriptor_t dV = operand(g, UID_DV, DFG_SDPA_DV, k, false, "dV");
    cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE, "scale"), neg_inf = scalar(g, UID_NEG_INF, "-inf");
    cudnnBackendDescriptor_t one = scalar(g, UID_ONE, "1");
    /* the row sums of dO * O: f32 (b, h, s_q, 1), packed, in the workspace */
    int64_t sums_dim[4] = {d->batch, d->heads, q, 1}, sums_stride[4] = {d->heads * q, q, 1, 1};
    cudnnBackendDescriptor_t sums = tensor(g, UID_SUMS, F, sums_dim, sums_stride, false, false, "row sums");
    cudnnBackendDescriptor_t t = pointwise(g, CUDNN_POINTWISE_MUL, F, dO, O, NULL, virt(g, F, q, D, false), "dO * O");
    cudnnBackendDescriptor_t r = virt(g, F, q, 1, false);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, t, r, "rowsum(dO * O)");
    pointwise(g, CUDNN_POINTWISE_MUL, F, r, one, NULL, sums, "row sums");
    /* P = exp(scale Q K^T - stats), masked */
    cudnnBackendDescriptor_t s = virt(g, F, q, k, false);
    matmul(g, Q, KT, s, "S = Q K^T");
    s = pointwise(g, CUDNN_POINTWISE_MUL, F, s, scale, NULL, virt(g, F, q, k, false), "S * scale");
    s = pointwise(g, CUDNN_POINTWISE_SUB, F, s, stats, NULL, virt(g, F, q, k, false), "S - stats");
    if (d->causal) s = causal(g, s, neg_inf);
    cudnnBackendDescriptor_t p = pointwise(g, CUDNN_POINTWISE_EXP, F, s, NULL, NULL, virt(g, F, q, k, false), "P = exp");
    /* dV = P^T dO */
    cudnnBackendDescriptor_t pt = virt(g, IO, k, q, true);
    reshape(g, p, pt, "P^T");
    matmul(g, pt, dO, dV, "dV = P^T dO");
    /* dS = scale P (dO V^T - sums) */
    cudnnBackendDescriptor_t dp = virt(g, F, q, k, false);
    matmul(g, dO, VT, dp, "dP = dO V^T");
    cudnnBackendDescriptor_t ds = pointwise(g, CUDNN_POINTWISE_SUB, F, dp, sums, NULL, virt(g, F, q, k, false), "dP - sums");
    ds = pointwise(g, CUDNN_POINTWISE_MUL, F, ds, p, NULL, virt(g, F, q, k, false), "P (dP - sums)");
    ds = pointwise(g, CUDNN_POINTWISE_MUL, F, ds, scale, NULL, virt(g, F, q, k, false), "dS * scale");
    /* dK = dS^T Q; dQ = dS K (K: a view of K^T back in its own layout) */
    cudnnBackendDescriptor_t dst = virt(g, IO, k, q, true);
    reshape(g, ds, dst, "dS^T");
    matmul(g, dst, Q, dK, "dK = dS^T Q");
    const dfg_sdpa_layout *kl = &d->t[DFG_SDPA_K];
    int64_t k_dim[4] = {d->batch, d->heads, k, D};
    cudnnBackendDescriptor_t K = tensor(g, g->next_uid++, IO, k_dim, kl->stride, true, false, "K");
    reshape(g, KT, K, "K");
    matmul(g, ds, K, dQ, "dQ = dS K");
}

/* ---------------------------------------------------------------- plans */
static void plan_free(sdpa_plan *p) {
    if (!p) return;
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->n_descs - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->descs[i]);
    free(p);
}

/* "<what>: <cuDNN's status string> (<its last message>)" */
static void cudnn_message(char *buf, size_t len, const char *what, cudnnStatus_t s) {
    char last[256] = "";
    cudnnGetLastErrorString(last, sizeof(last));
    snprintf(buf, len, "%s: %s%s%s%s", what, cudnnGetErrorString(s), last[0] ? " (" : "", last, last[0] ? ")" : "");
}

/* Whether an engine configuration's engine is noted nondeterministic (cuDNN's numerical notes). */
static bool nondeterministic(cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t engine = NULL;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0, got = 0;
    bool nondet = true; /* unknown counts as nondeterministic */
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return true;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS) {
        nondet = false;
        for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
            if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) nondet = true;
    }
    cudnnBackendDestroyDescriptor(engine);
    return nondet;
}

/* Appends what a configuration met to the list (", "-separated) the refusal message shows. */
static void tried(char *list, size_t len, const char *what) {
    size_t k = strlen(list);
    if (k + 3 < len) snprintf(list + k, len - k, "%s%s", k ? ", " : "", what);
}

static void tried_workspace(char *list, size_t len, int64_t ws, size_t room) {
    char what[96];
    snprintf(what, sizeof(what), "workspace %lld > %zu bytes planned", (long long)ws, room);
    tried(list, len, what);
}

/* The graph, heuristics' engine configurations best first, and the first that is deterministic
 * and finalizes as an execution plan within `workspace` bytes (after the row sums); p->r says
 * what it met, and why not when no plan came of it. */
static void build(dfg_sdpa_cudnn *s, sdpa_plan *p, size_t workspace) {
    gb g = {.p = p, .next_uid = UID_VIRTUAL};
    dfg_sdpa_cudnn_report *r = &p->r;
    char list[192] = "";
    r->workspace = -1;
    p->scale = p->d.scale;
    p->one = 1.0f;
    p->neg_inf = s->version < 91000 ? -3.402823466e38f : -INFINITY; /* older cuDNN wants the lowest float */
    workspace_of(&p->d, p->backward, &p->sums_bytes);
    size_t room = workspace > p->sums_bytes ? workspace - p->sums_bytes : 0; /* for the plan's own */
    if (p->backward)
        backward_graph(&g);
    else
        forward_graph(&g);
    cudnnBackendDescriptor_t graph = make(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set(&g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.n_ops, g.ops, "operation graph");
    if (s->handle) set(&g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle, "operation graph");
    finalize(&g, graph, "operation graph (the fused attention pattern)");
    cudnnBackendDescriptor_t cfgs[SDPA_CONFIGS] = {0};
    cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    /* deviceless, one configuration compiled is all that can be known (done, unplanned) */
#define DONE (g.st || p->plan || (!s->handle && r->no_driver))
    for (int m = 0; m < 2 && !DONE; m++) {
        cudnnBackendDescriptor_t heur = make(&g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
        set(&g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "engine heuristics");
        set(&g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m], "engine heuristics");
        if (s->devprop)
            set(&g, heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &s->devprop, "engine heuristics");
        finalize(&g, heur, "engine heuristics");
        int64_t count = 0, n_cfg = 0;
        if (!g.st) failed(&g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                       0, &count, NULL), "engine heuristics' results");
        if (count > SDPA_CONFIGS) count = SDPA_CONFIGS;
        for (int64_t i = 0; i < count; i++) cfgs[i] = make(&g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        if (!g.st && count > 0)
            failed(&g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                &n_cfg, cfgs), "engine heuristics' results");
        for (int64_t i = 0; i < n_cfg && !DONE; i++) {
            r->configs++;
            if (nondeterministic(cfgs[i])) {
                r->nondeterministic++;
                tried(list, sizeof(list), "nondeterministic");
                continue;
            }
            /* the configuration's workspace, known before its (costly) plan is built */
            int64_t ws = 0, got = 0;
            if (cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws) ==
                CUDNN_STATUS_SUCCESS) {
                if (r->workspace < 0 || ws < r->workspace) r->workspace = ws;
                if ((size_t)ws > room) {
                    r->over_workspace++;
                    tried_workspace(list, sizeof(list), ws, room);
                    continue;
                }
            }
            cudnnBackendDescriptor_t plan = NULL;
            cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            if (st) {
                failed(&g, st, "execution plan");
                break;
            }
            st = s->handle ? cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle)
                           : cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &s->devprop);
            if (!st)
                st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                              &cfgs[i]);
            if (!st) st = cudnnBackendFinalize(plan); /* an engine refusing this graph: try the next */
            if (!st) st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws);
            if (!st && (size_t)ws <= room) {
                p->plan = plan, p->plan_workspace = ws;
                break;
            }
            if (!st) {
                r->over_workspace++;
                tried_workspace(list, sizeof(list), ws, room);
            } else {
                if (st == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
                    r->no_driver++; /* kernels compiled but not loadable: no GPU driver */
                else
                    r->refused++;
                tried(list, sizeof(list), cudnnGetErrorString(st));
            }
            cudnnBackendDestroyDescriptor(plan);
        }
    }
#undef DONE
    r->planned = p->plan != NULL;
    if (g.st)
        cudnn_message(r->why, sizeof(r->why), g.what, g.st);
    else if (!r->planned)
        snprintf(r->why, sizeof(r->why), "no engine takes it (%s)", list[0] ? list : "the heuristics offer none");
}

/* The cached plan of a descriptor, built the first time (NULL: out of memory). */
static sdpa_plan *plan_of(dfg_sdpa_cudnn *s, const dfg_sdpa_desc *d, bool backward, size_t workspace, bool quiet) {
    for (int i = 0; i < s->n_plans; i++)
        if (s->plans[i]->backward == backward && !memcmp(&s->plans[i]->d, d, sizeof(*d))) return s->plans[i];
    sdpa_plan *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->d = *d, p->backward = backward;
    /* The first call comes while the first step's stage is captured. Building a plan is host work
     * (heuristics, kernel selection, maybe compilation and allocations of cuDNN's own) that the
     * capture's thread-local mode could reject as unsafe: relaxed for the build, as libraries
     * called inside captures are, then restored. */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    bool exchanged = s->handle && cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
    build(s, p, workspace);
    if (exchanged) cudaThreadExchangeStreamCaptureMode(&mode);
    if (s->n_plans == SDPA_CACHE) { /* more distinct attentions than any model has: drop the oldest */
        plan_free(s->plans[0]);
        memmove(s->plans, s->plans + 1, sizeof(s->plans[0]) * (SDPA_CACHE - 1));
        s->n_plans--;
    }
    s->plans[s->n_plans++] = p;
    if (!p->r.planned && !s->require && !quiet) {
        char buf[512];
        fprintf(stderr, "dfg: cuDNN does not run this attention %s (%s): %s; dfg's own kernels do\n",
                backward ? "backward" : "forward", dfg_sdpa_str(d, buf, sizeof(buf)), p->r.why);
    }
    return p;
}

const dfg_sdpa_cudnn_report *dfg_sdpa_cudnn_plan(dfg_sdpa_cudnn *s, const dfg_sdpa_desc *d, bool backward,
                                                 size_t workspace) {
    sdpa_plan *p = plan_of(s, d, backward, workspace, true);
    return p ? &p->r : NULL;
}

/* ---------------------------------------------------------------- the call */
#define TRY(call, what)                                                                                      \
    do {                                                                                                     \
        cudnnStatus_t s_ = (call);                                                                           \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                                    \
            if (ctx->err) cudnn_message(ctx->err, ctx->err_len, what, s_);                                   \
            st = DFG_ERR_RUNTIME;                                                                            \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)

dfg_status dfg_sdpa_cudnn_run(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs) {
    dfg_sdpa_cudnn *s = ctx->sdpa_state;
    const char *why = NULL;
    if (!s || !dfg_sdpa_cudnn_supports(d, backward, ptrs, &why)) return DFG_ERR_UNSUPPORTED;
    if (s->version < 90000) {
        why = "the cuDNN library loaded is older than 9.0";
        if (!s->noted_version && !s->require)
            fprintf(stderr, "dfg: %s (%zu); attention runs on dfg's own kernels\n", why, s->version);
        s->noted_version = true;
    }
    sdpa_plan *p = why ? NULL : plan_of(s, d, backward, ctx->scratch_bytes, false);
    if (!why && !p) why = "out of memory";
    if (!why && !p->r.planned) why = p->r.why;
    if (why) { /* cuDNN refuses a call it should take: the launchers fall back, or it is an error */
        if (!s->require) return DFG_ERR_UNSUPPORTED;
        if (ctx->err) snprintf(ctx->err, ctx->err_len, "cuDNN SDPA (DFG_CUDNN_SDPA=require): %s", why);
        return DFG_ERR_RUNTIME;
    }
    size_t need = p->sums_bytes + (size_t)p->plan_workspace;
    if (need && (!ctx->scratch || ctx->scratch_bytes < need)) {
        if (ctx->err) snprintf(ctx->err, ctx->err_len, "cuDNN SDPA: workspace of %zu bytes, %zu needed", ctx->scratch_bytes, need);
        return DFG_ERR_RUNTIME;
    }
    /* the variant pack: every non-virtual tensor's address (operands at their offsets) */
    int64_t uids[UID_N];
    void *addr[UID_N];
    int n = 0;
    static const int uid_of[DFG_SDPA_N_OPERANDS] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV};
    for (int k = 0; k < (backward ? DFG_SDPA_N_OPERANDS : DFG_SDPA_STATS + 1); k++) {
        size_t es = k == DFG_SDPA_STATS ? sizeof(float) : dfg_dtype_size(d->dtype);
        uids[n] = uid_of[k];
        addr[n++] = (char *)ptrs[k] + (size_t)d->t[k].offset * es;
    }
    uids[n] = UID_SCALE, addr[n++] = &p->scale;
    uids[n] = UID_NEG_INF, addr[n++] = &p->neg_inf;
    if (backward) {
        uids[n] = UID_ONE, addr[n++] = &p->one;
        uids[n] = UID_SUMS, addr[n++] = ctx->scratch;
    }
    void *workspace = (char *)ctx->scratch + p->sums_bytes;
    dfg_status st = DFG_OK;
    cudnnBackendDescriptor_t pack = NULL;
    TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), "cuDNN SDPA variant pack");
    TRY(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids),
        "cuDNN SDPA variant pack ids");
    TRY(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, addr),
        "cuDNN SDPA variant pack pointers");
    TRY(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace),
        "cuDNN SDPA variant pack workspace");
    TRY(cudnnBackendFinalize(pack), "cuDNN SDPA variant pack");
    TRY(cudnnSetStream(s->handle, (cudaStream_t)ctx->stream), "cudnnSetStream");
    TRY(cudnnBackendExecute(s->handle, p->plan, pack), backward ? "cuDNN SDPA backward" : "cuDNN SDPA forward");
done:
    if (pack) cudnnBackendDestroyDescriptor(pack);
    return st;
}

/* ---------------------------------------------------------------- the state */
dfg_status dfg_sdpa_cudnn_open(dfg_sdpa_cudnn **out, char *err, size_t len) {
    *out = NULL;
    int mode = sdpa_mode();
    if (!mode) return DFG_OK;
    dfg_sdpa_cudnn *s = calloc(1, sizeof(*s));
    if (!s) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    cudnnStatus_t st = cudnnCreate(&s->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        cudnn_message(err, len, "cudnnCreate", st);
        free(s);
        return DFG_ERR_RUNTIME;
    }
    s->version = cudnnGetVersion();
    s->require = mode == 2;
    *out = s;
    return DFG_OK;
}

/* Plans for a GPU that is not here, described by the JSON of its cuDNN device properties (cuDNN's
 * deviceless ahead-of-time compilation, 9.8 and later): heuristics and plan building run, nothing
 * executes. How tests check the graphs cuDNN is given without a GPU. */
dfg_status dfg_sdpa_cudnn_open_deviceless(dfg_sdpa_cudnn **out, const char *device_json, char *err, size_t len) {
    *out = NULL;
    dfg_sdpa_cudnn *s = calloc(1, sizeof(*s));
    if (!s) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    s->version = cudnnGetVersion();
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &s->devprop);
    if (!st)
        st = cudnnBackendSetAttribute(s->devprop, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                      (int64_t)strlen(device_json), device_json);
    if (!st) st = cudnnBackendFinalize(s->devprop);
    if (st) {
        cudnn_message(err, len, "cuDNN device properties", st);
        dfg_sdpa_cudnn_close(s);
        return DFG_ERR_UNSUPPORTED;
    }
    *out = s;
    return DFG_OK;
}

void dfg_sdpa_cudnn_close(dfg_sdpa_cudnn *s) {
    if (!s) return;
    for (int i = 0; i < s->n_plans; i++) plan_free(s->plans[i]);
    if (s->handle) cudnnDestroy(s->handle);
    if (s->devprop) cudnnBackendDestroyDescriptor(s->devprop);
    free(s);
}
