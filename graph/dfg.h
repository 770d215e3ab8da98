/* dfg.h - the public C DSL of dfg: programs, graphs, tensors and the op builders.
 *
 * Nothing runs while a graph is built: builder calls check shapes and append nodes.
 * Errors are sticky (cairo/sqlite style): the first error on a graph is kept, later builder
 * calls on that graph return a poison tensor and do nothing, and dfg_graph_error() names the
 * op, its inputs' shapes and the tensors' names. The library never aborts on bad input.
 *
 * State is imperative: an op that writes a persistent tensor (assign, slice_assign, adamw,
 * sample's RNG, clip_grad_norm) makes later builder calls in the same graph read the new value,
 * exactly as C statements would. Holding on to an older value after it was overwritten is an
 * error, so the builder's order is always a valid schedule.
 */
#ifndef DFG_H
#define DFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DFG_VERSION_STRING "0.1.0"
#define DFG_MAX_RANK 6

typedef enum {
    DFG_OK = 0,
    DFG_ERR_ARG,         /* a bad argument (NULL, out-of-range axis, unknown name) */
    DFG_ERR_SHAPE,       /* shapes or dtypes do not fit the op */
    DFG_ERR_STATE,       /* the object is already in an error state, or used out of order */
    DFG_ERR_NOMEM,       /* an allocation failed */
    DFG_ERR_IO,          /* a file could not be read or written */
    DFG_ERR_FORMAT,      /* a file's contents are malformed */
    DFG_ERR_RANGE,       /* a value read at run time is out of range (token id, position) */
    DFG_ERR_UNSUPPORTED, /* valid, but not implemented for this backend or dtype */
    DFG_ERR_NUMERIC,     /* NaN or Inf where a finite value is required */
    DFG_ERR_RUNTIME,     /* a backend or host function failed */
    DFG_STATUS_COUNT
} dfg_status;

typedef enum { DFG_F32, DFG_BF16, DFG_F16, DFG_I32, DFG_U8, DFG_DTYPE_COUNT } dfg_dtype;

/* PARAM: trainable, persistent. STATE: persistent, written by the program. INPUT: written by the
 * host before a stage. CONST: data fixed at build time. TEMP: produced by exactly one node. */
typedef enum { DFG_PARAM, DFG_STATE, DFG_INPUT, DFG_CONST, DFG_TEMP, DFG_KIND_COUNT } dfg_kind;

/* What a persistent tensor is for: the memory report groups bytes by role. */
typedef enum {
    DFG_ROLE_NONE,
    DFG_ROLE_PARAM,     /* trainable weights */
    DFG_ROLE_GRAD,      /* gradient accumulators */
    DFG_ROLE_OPTIM,     /* optimizer moments and counters */
    DFG_ROLE_REF_MODEL, /* frozen reference-model weights */
    DFG_ROLE_KV_CACHE,  /* attention key/value caches */
    DFG_ROLE_ROLLOUT,   /* generated tokens, masks, rewards, advantages */
    DFG_ROLE_RNG,       /* random-number-generator counters */
    DFG_ROLE_METRIC,    /* scalars the runtime reports after each step */
    DFG_ROLE_COUNT
} dfg_role;

typedef struct {
    int rank;
    int64_t d[DFG_MAX_RANK];
} dfg_shape;

/* DFG_SHAPE(4, 19, 48): a shape literal; more than DFG_MAX_RANK dims does not compile. */
#define DFG_SHAPE(...) \
    ((dfg_shape){.rank = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .d = {__VA_ARGS__}})
#define DFG_SCALAR ((dfg_shape){.rank = 0})

typedef enum { DFG_INIT_ZEROS, DFG_INIT_ONES, DFG_INIT_CONSTANT, DFG_INIT_NORMAL, DFG_INIT_UNIFORM, DFG_INIT_COUNT } dfg_init_kind;

/* How the runtime fills a PARAM or STATE before the first step (from the run's seed). */
typedef struct {
    dfg_init_kind kind;
    float a; /* CONSTANT: value; NORMAL: mean; UNIFORM: low */
    float b; /* NORMAL: std; UNIFORM: high */
} dfg_init;

static inline dfg_init dfg_init_zeros(void) { return (dfg_init){DFG_INIT_ZEROS, 0.0f, 0.0f}; }
static inline dfg_init dfg_init_ones(void) { return (dfg_init){DFG_INIT_ONES, 1.0f, 0.0f}; }
static inline dfg_init dfg_init_constant(float v) { return (dfg_init){DFG_INIT_CONSTANT, v, 0.0f}; }
static inline dfg_init dfg_init_normal(float mean, float std) { return (dfg_init){DFG_INIT_NORMAL, mean, std}; }
static inline dfg_init dfg_init_uniform(float lo, float hi) { return (dfg_init){DFG_INIT_UNIFORM, lo, hi}; }

typedef struct dfg_program dfg_program;
typedef struct dfg_graph dfg_graph;
typedef struct dfg_tensor dfg_tensor;
typedef struct dfg_node dfg_node;

/* ---------------------------------------------------------------- names and enums */
const char *dfg_status_name(dfg_status s);
const char *dfg_dtype_name(dfg_dtype t);
const char *dfg_kind_name(dfg_kind k);
const char *dfg_role_name(dfg_role r);
size_t dfg_dtype_size(dfg_dtype t);
int64_t dfg_shape_numel(dfg_shape s);
bool dfg_shape_equal(dfg_shape a, dfg_shape b);
/* Writes "(4,19,48)" into buf; returns buf. */
char *dfg_shape_str(dfg_shape s, char *buf, size_t len);
/* Writes a byte count for people ("512 B", "4.00 KiB", "2.51 GiB") into buf; returns buf. */
char *dfg_bytes_str(double bytes, char *buf, size_t len);

/* ---------------------------------------------------------------- programs */
dfg_program *dfg_program_new(const char *name); /* NULL only when out of memory */
void dfg_program_free(dfg_program *p);
const char *dfg_program_name(const dfg_program *p);
/* The first error of the program or of any of its graphs; DFG_OK and "" when there is none. */
dfg_status dfg_program_status(const dfg_program *p);
const char *dfg_program_error(const dfg_program *p);

/* Persistent tensors. Names are unique within a program (checkpoints use them). */
dfg_tensor *dfg_param(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_init init);
dfg_tensor *dfg_state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_role role,
                      dfg_init init);
/* data holds numel * dtype_size bytes and is copied. */
dfg_tensor *dfg_const(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, const void *data);
dfg_tensor *dfg_find(const dfg_program *p, const char *name); /* persistent and output tensors */
/* Declares that a STATE or INPUT only needs its value from the start of stage `first_stage` to
 * the end of `last_stage` (stage names; the stages may be added later). Outside that range the
 * planner gives its bytes to other tensors, so its contents are undefined when the range begins
 * each step: e.g. a KV cache written by the rollout is dead during training. */
dfg_status dfg_set_scope(dfg_program *p, dfg_tensor *t, const char *first_stage, const char *last_stage);
/* dst (a PARAM or STATE) starts as a copy of src (a PARAM or STATE of the same shape),
 * converted to dst's dtype: when the runtime is created, and again whenever a checkpoint load
 * sets src but not dst. For f32 master weights of bf16 parameters and for a frozen reference
 * copy of the policy: no graph work at all, and loaded weights reach the copies. */
dfg_status dfg_init_from(dfg_program *p, dfg_tensor *dst, dfg_tensor *src);
/* Sets a persistent tensor's role (e.g. a PARAM copy that is the frozen reference model). */
dfg_status dfg_set_role(dfg_tensor *t, dfg_role role);

/* Settings: string key/value pairs saved with the program (the pipeline's --set values, task
 * options) that host stages read at run time. Setting a key again replaces its value. */
dfg_status dfg_program_set(dfg_program *p, const char *key, const char *value);
const char *dfg_program_setting(const dfg_program *p, const char *key); /* NULL when absent */
int dfg_program_setting_count(const dfg_program *p);
const char *dfg_program_setting_key(const dfg_program *p, int i);
/* Whether a dfg_setting_* accessor read the key (the CLI rejects --set keys nobody read). */
bool dfg_program_setting_used(const dfg_program *p, const char *key);

/* Typed settings for pipelines. Each returns the key's value when it is set (by `dfg compile
 * --set key=value`), parsed strictly: a value that is not entirely a number of the right kind
 * sets the program's sticky error naming the key and the value, and the default is returned.
 * When the key is absent, the default is recorded as its value, so the saved plan lists every
 * setting the pipeline used. Either way the key is marked used.
 *   int:   decimal, optional sign ("12", "-3")
 *   float: a finite C floating-point literal ("1e-3", "0.5")
 *   bool:  true/false, 1/0, yes/no, on/off
 *   str:   any text; the returned string lives as long as the program (def NULL means "") */
int64_t dfg_setting_int(dfg_program *p, const char *key, int64_t def);
double dfg_setting_float(dfg_program *p, const char *key, double def);
const char *dfg_setting_str(dfg_program *p, const char *key, const char *def);
bool dfg_setting_bool(dfg_program *p, const char *key, bool def);

/* Sets the program's sticky error (the first one is kept) and returns s: how a pipeline
 * reports a setting out of range ("n_head 5 does not divide n_embd 64"). */
dfg_status dfg_program_fail(dfg_program *p, dfg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Stages run in order, once per step. A graph stage runs its graph `repeat` times (decode
 * steps, micro-batches); a host stage calls a C function by symbol name: one exported by the
 * pipeline's shared object, or a built-in. Stages talk only through persistent tensors. */
dfg_status dfg_stage_graph(dfg_program *p, dfg_graph *g, int repeat);
dfg_status dfg_stage_host(dfg_program *p, const char *name, const char *symbol);
/* The stage runs only in steps first..last (counted from 0; last < 0: no end), e.g. a supervised
 * warm-up before the RL stages take over. Memory is planned as if every stage ran. */
dfg_status dfg_stage_steps(dfg_program *p, const char *stage, int64_t first, int64_t last);

/* ---------------------------------------------------------------- graphs */
dfg_graph *dfg_graph_new(dfg_program *p, const char *name);
dfg_status dfg_graph_status(const dfg_graph *g);
const char *dfg_graph_error(const dfg_graph *g);
dfg_program *dfg_graph_program(const dfg_graph *g);

/* Host-written input of a graph's stage (tokens, targets, masks). */
dfg_tensor *dfg_input(dfg_graph *g, const char *name, dfg_dtype dt, dfg_shape shape);
/* Keeps a tensor readable by name after the step (tests, debugging); returns t. */
dfg_tensor *dfg_output(dfg_graph *g, dfg_tensor *t, const char *name);
/* Copies a scalar into the persistent metric "name", reported after every step. */
dfg_status dfg_metric(dfg_graph *g, const char *name, dfg_tensor *scalar);
/* Sets the debug name used in errors, reports and dumps; returns t. */
dfg_tensor *dfg_name(dfg_tensor *t, const char *name);

/* ---------------------------------------------------------------- tensor queries */
const char *dfg_tensor_name(const dfg_tensor *t);
dfg_shape dfg_tensor_shape(const dfg_tensor *t);
dfg_dtype dfg_tensor_dtype(const dfg_tensor *t);
dfg_kind dfg_tensor_kind(const dfg_tensor *t);
int64_t dfg_tensor_numel(const dfg_tensor *t);
size_t dfg_tensor_bytes(const dfg_tensor *t);

/* ---------------------------------------------------------------- elementwise
 * Binary ops broadcast numpy-style (trailing dims aligned; a dim of 1 stretches). */
dfg_tensor *dfg_add(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
dfg_tensor *dfg_sub(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
dfg_tensor *dfg_mul(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
dfg_tensor *dfg_div(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
dfg_tensor *dfg_minimum(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
dfg_tensor *dfg_maximum(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
dfg_tensor *dfg_equal(dfg_graph *g, dfg_tensor *a, dfg_tensor *b); /* 1.0 where a == b, else 0.0 (f32) */
dfg_tensor *dfg_scale(dfg_graph *g, dfg_tensor *x, float alpha);        /* alpha * x */
dfg_tensor *dfg_add_scalar(dfg_graph *g, dfg_tensor *x, float beta);    /* x + beta */
dfg_tensor *dfg_affine(dfg_graph *g, dfg_tensor *x, float alpha, float beta); /* alpha * x + beta */
dfg_tensor *dfg_exp(dfg_graph *g, dfg_tensor *x);
dfg_tensor *dfg_log(dfg_graph *g, dfg_tensor *x);
dfg_tensor *dfg_neg(dfg_graph *g, dfg_tensor *x);
dfg_tensor *dfg_sqrt(dfg_graph *g, dfg_tensor *x);
dfg_tensor *dfg_clamp(dfg_graph *g, dfg_tensor *x, float lo, float hi);
/* cond != 0 ? a : b, all three broadcast together; cond may be f32, i32 or u8. */
dfg_tensor *dfg_where(dfg_graph *g, dfg_tensor *cond, dfg_tensor *a, dfg_tensor *b);
dfg_tensor *dfg_cast(dfg_graph *g, dfg_tensor *x, dfg_dtype to);
dfg_tensor *dfg_fill(dfg_graph *g, dfg_dtype dt, dfg_shape shape, float value);
dfg_tensor *dfg_gelu(dfg_graph *g, dfg_tensor *x); /* tanh approximation, as GPT-2 */

/* ---------------------------------------------------------------- shape ops */
dfg_tensor *dfg_reshape(dfg_graph *g, dfg_tensor *x, dfg_shape shape); /* a view; one dim may be -1 */
dfg_tensor *dfg_permute(dfg_graph *g, dfg_tensor *x, const int *perm); /* perm has rank(x) entries */
dfg_tensor *dfg_transpose(dfg_graph *g, dfg_tensor *x, int axis_a, int axis_b);
dfg_tensor *dfg_slice(dfg_graph *g, dfg_tensor *x, int axis, int64_t start, int64_t len);
/* As dfg_slice, with the start read at run time from an i32 scalar (a micro-batch's rows);
 * an out-of-range start fails the step. */
dfg_tensor *dfg_slice_at(dfg_graph *g, dfg_tensor *x, int axis, dfg_tensor *start, int64_t len);
dfg_tensor *dfg_concat(dfg_graph *g, dfg_tensor *const *xs, int n, int axis);
/* x's value with no gradient flowing back through it (a view, no copy): GRPO's "detached" terms. */
dfg_tensor *dfg_detach(dfg_graph *g, dfg_tensor *x);
dfg_tensor *dfg_expand(dfg_graph *g, dfg_tensor *x, dfg_shape shape); /* broadcast to shape */

/* ---------------------------------------------------------------- reductions (axis < 0 counts from the end) */
dfg_tensor *dfg_sum(dfg_graph *g, dfg_tensor *x, int axis);
dfg_tensor *dfg_sum_keepdim(dfg_graph *g, dfg_tensor *x, int axis);
dfg_tensor *dfg_mean(dfg_graph *g, dfg_tensor *x, int axis);
dfg_tensor *dfg_masked_sum(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask, int axis); /* sum(x*mask) */
dfg_tensor *dfg_argmax(dfg_graph *g, dfg_tensor *x); /* over the last axis, i32 */

/* ---------------------------------------------------------------- linear algebra and nn */
/* op(a) @ op(b) with op = transpose of the last two dims when the flag is set. Leading (batch)
 * dims must match, or one operand is 2-D and is shared across the other's batch. */
dfg_tensor *dfg_matmul(dfg_graph *g, dfg_tensor *a, dfg_tensor *b, bool trans_a, bool trans_b);
dfg_tensor *dfg_bias_add(dfg_graph *g, dfg_tensor *x, dfg_tensor *bias); /* x (..., N) + bias (N) */
dfg_tensor *dfg_layernorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, float eps);
dfg_tensor *dfg_softmax(dfg_graph *g, dfg_tensor *x);     /* over the last axis */
dfg_tensor *dfg_log_softmax(dfg_graph *g, dfg_tensor *x); /* over the last axis */
/* Causal self-attention: qkv (B, T, 3C) laid out [q | k | v] as GPT-2's c_attn -> (B, T, C). */
dfg_tensor *dfg_attention(dfg_graph *g, dfg_tensor *qkv, int n_head);
/* Causal attention of rows that continue a shared prefix: qkv (n, Tc, 3C) of n = P*G rows
 * whose rows p*G .. p*G+G-1 all follow prefix p of prefix (P, Tp, 3C) (fused [q | k | v]; only
 * its keys and values are read) -> (n, Tc, C). The query at position i of a row attends to the
 * Tp prefix positions and to its row's positions 0 .. i: dfg_attention of the whole sequences,
 * without computing the prefix G times. The prefix's gradient sums over its group. */
dfg_tensor *dfg_attention_prefix(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *prefix, int n_head);
/* Decoding form: q (B, Tq, C); caches (B, Tmax, C); pos an i32 scalar. Query i sits at position
 * pos + i and attends to cache rows 0 .. pos + i (write them first with dfg_slice_assign_at). */
dfg_tensor *dfg_attention_cached(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_cache, dfg_tensor *v_cache,
                                 dfg_tensor *pos, int n_head);
dfg_tensor *dfg_embed(dfg_graph *g, dfg_tensor *table, dfg_tensor *ids); /* (V, C), i32 (...) -> (..., C) */
dfg_tensor *dfg_take(dfg_graph *g, dfg_tensor *x, dfg_tensor *idx);     /* x (..., V), i32 (...) -> (...) */

/* ---------------------------------------------------------------- random sampling
 * rng: an i32 STATE of shape (4): {key_lo, key_hi, counter_lo, counter_hi}, Philox4x32-10.
 * Each call draws one uniform per row from counter and advances the counter by one, in place.
 * temperature <= 0 is greedy (argmax); top_k <= 0 keeps the whole vocabulary. */
dfg_tensor *dfg_sample(dfg_graph *g, dfg_tensor *logits, dfg_tensor *rng, float temperature, int top_k);

/* ---------------------------------------------------------------- writes to persistent tensors */
/* dst = src; a float src of another float dtype is converted (round to nearest even) */
dfg_tensor *dfg_assign(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src);
dfg_tensor *dfg_accumulate(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src); /* dst += src */
dfg_tensor *dfg_assign_fill(dfg_graph *g, dfg_tensor *dst, float value);     /* dst[:] = value */
dfg_tensor *dfg_slice_assign(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int axis, int64_t start);
/* As dfg_slice_assign, with the start read at run time from an i32 scalar (a KV-cache position). */
dfg_tensor *dfg_slice_assign_at(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int axis, dfg_tensor *pos);

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} dfg_adamw_config;
/* One AdamW step (decoupled weight decay) over n parameters, in place on params and moments.
 * step: i32 scalar holding the 1-based step number used for bias correction. */
dfg_status dfg_adamw(dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, dfg_tensor *const *m,
                     dfg_tensor *const *v, int n, dfg_tensor *step, dfg_adamw_config cfg);
/* Scales the n gradients so that their global L2 norm is at most max_norm (as
 * torch.nn.utils.clip_grad_norm_) and replaces grads[i] with the result: persistent gradient
 * accumulators are scaled in place, TEMP gradients give new TEMPs. Returns the norm before
 * clipping (f32 scalar). */
dfg_tensor *dfg_clip_grad_norm(dfg_graph *g, dfg_tensor **grads, int n, float max_norm);

/* ---------------------------------------------------------------- autodiff
 * Appends the gradient of the scalar `loss` with respect to each wrt[i] to the graph and
 * stores it in grads[i] (a TEMP of wrt[i]'s shape; zeros when loss does not depend on it). */
dfg_status dfg_backward(dfg_graph *g, dfg_tensor *loss, dfg_tensor *const *wrt, int n, dfg_tensor **grads);
/* As dfg_backward, then accumulates each gradient into the STATE accum[i] (micro-batching). */
dfg_status dfg_backward_accumulate(dfg_graph *g, dfg_tensor *loss, dfg_tensor *const *wrt, int n,
                                   dfg_tensor *const *accum);

/* ---------------------------------------------------------------- pipelines
 * A pipeline is a C file that `dfg compile PIPELINE.c` builds into a shared object and loads.
 * It defines the entry point
 *
 *     dfg_status dfg_pipeline(dfg_program *p);
 *
 * which reads its settings (dfg_setting_*; the setting "target" holds "cpu" or "cuda" before
 * the call), creates tensors, graphs and stages on p, and returns DFG_OK or an error (details
 * go to the program's sticky error, e.g. through dfg_program_fail). Host-stage functions
 * (`dfg_status fn(dfg_host_ctx *ctx)`, see dfg_runtime.h) are exported from the same file; the
 * plan embeds the shared object so that `dfg run` finds them. See examples/gpt2_train.c. */
dfg_status dfg_pipeline(dfg_program *p); /* declared so that a pipeline's definition is type-checked */
typedef dfg_status (*dfg_pipeline_fn)(dfg_program *p);
#define DFG_PIPELINE_SYMBOL "dfg_pipeline"

#ifdef __cplusplus
}
#endif
#endif
