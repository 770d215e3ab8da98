/* cpu.h - the fp32 reference kernels: one function per op family, dispatched by op id.
 *
 * A kernel gets the node (shapes and attributes), one data pointer per input and output, and a
 * context with per-thread scratch and an error buffer. Outputs that alias an input (reshape
 * views, in-place writes) arrive with the same pointer as that input. Kernels never allocate;
 * bad values found at run time (a token id out of range) are reported, not trusted.
 */
#ifndef DFG_CPU_H
#define DFG_CPU_H

#include <math.h>

#include "../op.h"

typedef struct {
    int n_threads;
    void *scratch;        /* n_threads * scratch_per_thread bytes, see dfg_cpu_scratch_bytes */
    size_t scratch_per_thread;
    char *err;            /* where a kernel writes why it failed */
    size_t err_len;
    struct dfg_comm *comm; /* the data-parallel run's communicator (ops/comm.h); NULL: one process */
    bool invariant;        /* the plan is batch-invariant: forward GEMMs and attention in invariant.c's orders */
} dfg_cpu_ctx;

typedef dfg_status (*dfg_cpu_fn)(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx);

extern const dfg_cpu_fn dfg_cpu_kernels[DFG_OP_COUNT];

/* Per-thread scratch a node's kernel needs (0 for most). */
size_t dfg_cpu_scratch_bytes(const dfg_node *n);
size_t dfg_cpu_attention_scratch(const dfg_node *n); /* the attention family's (attention.c) */
size_t dfg_cpu_attention_prefix_scratch(const dfg_node *n); /* attention_prefix.c */
/* This thread's scratch (ctx->scratch_per_thread bytes). */
float *dfg_cpu_thread_scratch(dfg_cpu_ctx *ctx);
/* A row s of n scores whose first nk are allowed (causal masking): softmax in place, zeros past
 * nk; returns the log-sum-exp of the allowed scores (attention.c). */
float dfg_cpu_softmax_row(float *s, int64_t nk, int64_t n);
/* The attention ops' optional start input (input `plain`, i32 (rows)): NULL when the node has
 * none; every value must lie in [0, limit), else *st is the node's range error (attention.c). */
const int32_t *dfg_cpu_attention_start(const dfg_node *n, void *const *in, int plain, int64_t limit, dfg_cpu_ctx *ctx,
                                       dfg_status *st);
/* Batch-invariant forms (invariant.c): each output element in one order fixed by its own row and
 * column, whatever the call's row count, threads or alignment. C (M, N) = alpha A (M, K) op(B),
 * op(B) = B (K, N), or B^T for B (N, K) when tb; row strides lda, ldb, ldc. */
void dfg_cpu_gemm_invariant(bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float *C, int64_t ldc, int n_threads);
/* The same orders element by element in plain C (fmaf): what a CPU without AVX2 and FMA runs, and
 * the definition the tests hold the vector paths to. */
void dfg_cpu_gemm_invariant_ref(bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                const float *B, int64_t ldb, float *C, int64_t ldc);
float dfg_cpu_dot_invariant(const float *a, const float *b, int64_t K); /* the NT element */
/* The instruction set they use (0 plain C, 1 AVX2, 2 AVX-512; what the machine has by default):
 * `level` caps it (tests compare every path with the definition), < 0 restores the default;
 * returns the level now in use. */
int dfg_cpu_invariant_isa(int level);
/* A run of n keys and values, rows of `stride` floats: a query's keys come in one or two runs
 * (a shared prefix, then its own), in order. */
typedef struct {
    const float *k, *v;
    int64_t n, stride;
} dfg_cpu_kv_run;
/* One query q (D) against its keys in order: y (D) = softmax(scale q K^T) V, p: scratch of the
 * keys' count; returns the scores' log-sum-exp. */
float dfg_cpu_attend_invariant(const float *q, const dfg_cpu_kv_run *runs, int n_runs, int64_t D, float scale, float *p,
                               float *y);
/* Formats "<op> '<node>': <reason>" into ctx->err and returns s. */
dfg_status dfg_cpu_fail(dfg_cpu_ctx *ctx, const dfg_node *n, dfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Every kernel and scratch rule ops.def names (shared ones are declared once per row). */
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) \
    dfg_status dfg_cpu_##kernel(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx); \
    DFG_UNLESS_NONE(scratch)(size_t dfg_cpu_scratch_##scratch(const dfg_node *n);)
#include "../ops.def"
#undef X

/* ---------------------------------------------------------------- shared helpers */
/* Strides (in elements) that read `in` broadcast to `out`: 0 along broadcast dims. */
void dfg_bcast_strides(dfg_shape out, dfg_shape in, int64_t *strides);
/* Element offset into an input with `strides` for the output's flat index `idx`. */
static inline int64_t dfg_bcast_offset(const dfg_shape *out, const int64_t *strides, int64_t idx) {
    int64_t off = 0;
    for (int d = out->rank - 1; d >= 0; d--) {
        int64_t i = idx % out->d[d];
        idx /= out->d[d];
        off += i * strides[d];
    }
    return off;
}
/* (outer, axis, inner) split of a shape around `axis` */
void dfg_split_axis(dfg_shape s, int axis, int64_t *outer, int64_t *len, int64_t *inner);

/* A row's online softmax statistics, one logit at a time: the running max m, l = sum exp(x - m)
 * and a = sum exp(x - m) (x - m), rescaled when m grows, so that lse = m + log l and the entropy
 * H = log l - a / l come out of one pass with one exp per logit (the entropy and linear_logprob
 * kernels). -inf logits weigh nothing. */
typedef struct {
    float m;
    double l, a;
} dfg_row_stats;

static inline void dfg_row_stats_push(dfg_row_stats *s, float x) {
    if (x == -INFINITY) return;
    if (x > s->m) {
        if (s->m == -INFINITY) {
            s->l = 1.0, s->a = 0.0;
        } else {
            double d = (double)s->m - x, sc = exp(d);
            s->a = sc * (s->a + s->l * d);
            s->l = s->l * sc + 1.0;
        }
        s->m = x;
    } else {
        double d = (double)x - s->m, e = exp(d);
        s->l += e;
        s->a += e * d;
    }
}

/* l = 0: a row of -inf alone, H = 0; a NaN logit made l NaN, and H stays NaN (as lse does) */
static inline double dfg_row_stats_entropy(const dfg_row_stats *s) { return s->l == 0.0 ? 0.0 : log(s->l) - s->a / s->l; }

#endif
