/* dfg_ops.h - the op builders of dfg's public DSL: one call per op, each appending a node to a
 * graph after checking its inputs' shapes and dtypes (see dfg_graph.h for the error model). The
 * fused ops (logprob, linear_logprob, bias_gelu) have no builders: only the fuse pass makes them
 * from the unfused math written here. */
#ifndef DFG_OPS_H
#define DFG_OPS_H

#include "dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- elementwise
 * Binary ops broadcast numpy-style (trailing dims aligned; a dim of 1 stretches). */
DFG_API dfg_tensor *dfg_add(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
DFG_API dfg_tensor *dfg_sub(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
DFG_API dfg_tensor *dfg_mul(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
DFG_API dfg_tensor *dfg_div(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
DFG_API dfg_tensor *dfg_minimum(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
DFG_API dfg_tensor *dfg_maximum(dfg_graph *g, dfg_tensor *a, dfg_tensor *b);
DFG_API dfg_tensor *dfg_equal(dfg_graph *g, dfg_tensor *a, dfg_tensor *b); /* 1.0 where a == b, else 0.0 (f32) */
DFG_API dfg_tensor *dfg_scale(dfg_graph *g, dfg_tensor *x, float alpha);        /* alpha * x */
DFG_API dfg_tensor *dfg_add_scalar(dfg_graph *g, dfg_tensor *x, float beta);    /* x + beta */
DFG_API dfg_tensor *dfg_affine(dfg_graph *g, dfg_tensor *x, float alpha, float beta); /* alpha * x + beta */
DFG_API dfg_tensor *dfg_exp(dfg_graph *g, dfg_tensor *x);
DFG_API dfg_tensor *dfg_log(dfg_graph *g, dfg_tensor *x);
DFG_API dfg_tensor *dfg_neg(dfg_graph *g, dfg_tensor *x);
DFG_API dfg_tensor *dfg_sqrt(dfg_graph *g, dfg_tensor *x);
DFG_API dfg_tensor *dfg_clamp(dfg_graph *g, dfg_tensor *x, float lo, float hi);
/* cond != 0 ? a : b, all three broadcast together; cond may be f32, i32 or u8. */
DFG_API dfg_tensor *dfg_where(dfg_graph *g, dfg_tensor *cond, dfg_tensor *a, dfg_tensor *b);
DFG_API dfg_tensor *dfg_cast(dfg_graph *g, dfg_tensor *x, dfg_dtype to);
DFG_API dfg_tensor *dfg_fill(dfg_graph *g, dfg_dtype dt, dfg_shape shape, float value);
DFG_API dfg_tensor *dfg_gelu(dfg_graph *g, dfg_tensor *x); /* tanh approximation, as GPT-2 */
/* x * sigmoid(x) (torch.nn.functional.silu: Llama, Qwen MLPs), in f32 (bf16, f16 round once at the
 * end); finite for every finite x (below about -88.7 it is -0, the true value being under 3e-37) */
DFG_API dfg_tensor *dfg_silu(dfg_graph *g, dfg_tensor *x);

/* ---------------------------------------------------------------- shape ops */
DFG_API dfg_tensor *dfg_reshape(dfg_graph *g, dfg_tensor *x, dfg_shape shape); /* a view; one dim may be -1 */
DFG_API dfg_tensor *dfg_permute(dfg_graph *g, dfg_tensor *x, const int *perm); /* perm has rank(x) entries */
DFG_API dfg_tensor *dfg_transpose(dfg_graph *g, dfg_tensor *x, int axis_a, int axis_b);
DFG_API dfg_tensor *dfg_slice(dfg_graph *g, dfg_tensor *x, int axis, int64_t start, int64_t len);
/* As dfg_slice, with the start read at run time from an i32 scalar (a micro-batch's rows);
 * an out-of-range start fails the step. Along axis 1 of x (B, T, ...) the start may instead be
 * (B) i32, one a row: row b of the (B, len, ...) result is x[b, start[b] .. start[b]+len-1] (rows
 * of a multi-turn rollout stand at different columns); any row out of range fails the step. */
DFG_API dfg_tensor *dfg_slice_at(dfg_graph *g, dfg_tensor *x, int axis, dfg_tensor *start, int64_t len);
DFG_API dfg_tensor *dfg_concat(dfg_graph *g, dfg_tensor *const *xs, int n, int axis);
/* x's value with no gradient flowing back through it (a view, no copy): GRPO's "detached" terms. */
DFG_API dfg_tensor *dfg_detach(dfg_graph *g, dfg_tensor *x);
DFG_API dfg_tensor *dfg_expand(dfg_graph *g, dfg_tensor *x, dfg_shape shape); /* broadcast to shape */

/* ---------------------------------------------------------------- reductions (axis < 0 counts from the end) */
DFG_API dfg_tensor *dfg_sum(dfg_graph *g, dfg_tensor *x, int axis);
DFG_API dfg_tensor *dfg_sum_keepdim(dfg_graph *g, dfg_tensor *x, int axis);
DFG_API dfg_tensor *dfg_mean(dfg_graph *g, dfg_tensor *x, int axis);
DFG_API dfg_tensor *dfg_masked_sum(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask, int axis); /* sum(x*mask) */
DFG_API dfg_tensor *dfg_argmax(dfg_graph *g, dfg_tensor *x); /* over the last axis, i32 */
/* torch.quantile(x[mask != 0], q) (linear interpolation) as a scalar; +inf when the mask is all 0.
 * x, mask: f32 of one shape. Not differentiated (a threshold, not a value the loss follows). */
DFG_API dfg_tensor *dfg_quantile(dfg_graph *g, dfg_tensor *x, dfg_tensor *mask, float q);

/* ---------------------------------------------------------------- linear algebra and nn */
/* op(a) @ op(b) with op = transpose of the last two dims when the flag is set. Leading (batch)
 * dims must match, or one operand is 2-D and is shared across the other's batch. */
DFG_API dfg_tensor *dfg_matmul(dfg_graph *g, dfg_tensor *a, dfg_tensor *b, bool trans_a, bool trans_b);
DFG_API dfg_tensor *dfg_bias_add(dfg_graph *g, dfg_tensor *x, dfg_tensor *bias); /* x (..., N) + bias (N) */
DFG_API dfg_tensor *dfg_layernorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, float eps);
/* Llama's RMSNorm over the last axis: x (..., C), w (C) -> w * x / sqrt(mean(x^2) + eps) */
DFG_API dfg_tensor *dfg_rmsnorm(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, float eps);
DFG_API dfg_tensor *dfg_softmax(dfg_graph *g, dfg_tensor *x);     /* over the last axis */
DFG_API dfg_tensor *dfg_log_softmax(dfg_graph *g, dfg_tensor *x); /* over the last axis */
/* (..., V) -> (...) f32: the entropy -sum p log p of softmax over the last axis, differentiable */
DFG_API dfg_tensor *dfg_entropy(dfg_graph *g, dfg_tensor *z);
/* Causal self-attention: qkv (B, T, 3C) laid out [q | k | v] as GPT-2's c_attn -> (B, T, C). */
DFG_API dfg_tensor *dfg_attention(dfg_graph *g, dfg_tensor *qkv, int n_head);
/* Causal attention of rows that continue a shared prefix: qkv (n, Tc, 3C) of n = P*G rows
 * whose rows p*G .. p*G+G-1 all follow prefix p of prefix (P, Tp, 3C) (fused [q | k | v]; only
 * its keys and values are read) -> (n, Tc, C). The query at position i of a row attends to the
 * Tp prefix positions and to its row's positions 0 .. i: dfg_attention of the whole sequences,
 * without computing the prefix G times. The prefix's gradient sums over its group. */
DFG_API dfg_tensor *dfg_attention_prefix(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *prefix, int n_head);
/* Decoding form: q (B, Tq, C) of n_head heads of D = C / n_head; caches (B, Tmax, Hkv * D), both
 * of one shape; pos an i32 scalar, or (B) i32 one position a row (rows at different columns: row b
 * is then exactly the scalar form run on row b alone at pos[b]). Query i of row b sits at position
 * pos[b] + i and attends to cache rows 0 .. pos[b] + i (write them first with dfg_slice_assign_at);
 * pos[b] + Tq > Tmax or pos[b] < 0 for any row fails the step. Hkv, taken from the caches' shape,
 * may be fewer than n_head (grouped-query attention, n_head % Hkv == 0; Hkv = 1 is multi-query):
 * query head h reads KV head h / (n_head / Hkv), as transformers' repeat_kv. Hkv = n_head is
 * ordinary multi-head attention. */
DFG_API dfg_tensor *dfg_attention_cached(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_cache, dfg_tensor *v_cache,
                                 dfg_tensor *pos, int n_head);
/* Left-padded rows: start (B) i32, the column of each row's first real token (B: the rows of the
 * op's batch; dfg_attention_prefix_padded's start is per prefix row, (P)). NULL: no padding, the
 * plain op. A query at column i >= start[b] sees keys start[b] .. i (the prefix form: prefix keys
 * start[p] .. Tp-1, then its own row's causally; the cached form: cache rows start[b] .. its
 * column), so a padded row scores as the same row unpadded when its positions count from
 * start[b]. A query at a pad column i < start[b] sees keys 0 .. i (plain causal: finite values
 * nothing real reads). cuDNN's SDPA has no such mask: with start the hand-written kernels run. */
DFG_API dfg_tensor *dfg_attention_padded(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *start, int n_head);
DFG_API dfg_tensor *dfg_attention_prefix_padded(dfg_graph *g, dfg_tensor *qkv, dfg_tensor *prefix, dfg_tensor *start /* (P) */,
                                                int n_head);
DFG_API dfg_tensor *dfg_attention_cached_padded(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_cache, dfg_tensor *v_cache,
                                                dfg_tensor *pos, dfg_tensor *start, int n_head);
/* Decoding against a KV cache that holds each group's prompt once: the prompts' keys and values
 * k_prompt, v_prompt (P, Tp, Hkv * D) hold columns 0 .. Tp-1 of every row of their prompt, the
 * rows' own k_rows, v_rows (N, Tc, Hkv * D) columns Tp .. Tp+Tc-1. Row b's prompt is b / (N / P),
 * or prompt_of[b] ((N) i32; NULL: the groups of N / P neighbouring rows). Otherwise exactly
 * dfg_attention_cached_padded on caches (N, Tp+Tc) holding row b's prompt then its own columns
 * (pos, start (N) and the result the same; a column pos .. pos+Tq-1 >= Tp is written at pos - Tp
 * of k_rows): the prompt's keys are stored once, and read once for all the rows of a group. */
DFG_API dfg_tensor *dfg_attention_shared_cached(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_prompt, dfg_tensor *v_prompt,
                                                dfg_tensor *k_rows, dfg_tensor *v_rows, dfg_tensor *pos,
                                                dfg_tensor *start, dfg_tensor *prompt_of, int n_head);
DFG_API dfg_tensor *dfg_embed(dfg_graph *g, dfg_tensor *table, dfg_tensor *ids); /* (V, C), i32 (...) -> (..., C) */
DFG_API dfg_tensor *dfg_take(dfg_graph *g, dfg_tensor *x, dfg_tensor *idx);     /* x (..., V), i32 (...) -> (...) */
/* Rotary position embeddings as Llama and Qwen2 apply them (transformers' rotate_half form):
 * x (..., H*head_dim) holds a token's heads side by side, pos (...) i32 each token's position;
 * each head is rotated pairwise (i, i + head_dim/2) by pos / theta^(2i/head_dim) -> x's shape
 * and dtype. head_dim even; theta > 0 (rope_theta: 10000 for Llama 2, 1e6 for Qwen2). */
DFG_API dfg_tensor *dfg_rope(dfg_graph *g, dfg_tensor *x, dfg_tensor *pos, int head_dim, float theta);

/* ---------------------------------------------------------------- NF4 weights (QLoRA, ops/nf4.c)
 * bitsandbytes' 4-bit NormalFloat, quant_type nf4: what load_in_4bit stores a frozen weight as. */
#define DFG_NF4_BLOCK 64      /* values per absmax (bitsandbytes blocksize 64) */
#define DFG_NF4_DQ_BLOCK 256  /* absmax values per second-level scale (double quantisation) */
/* NF4 dequantisation: packed (ceil(numel/2)) u8, two codes per byte, element 2j in the HIGH
 * nibble and 2j+1 in the low one (bitsandbytes' packing); absmax (ceil(numel/64)) f32, one per
 * block of 64 consecutive elements -> a tensor of `shape` and dtype dt (f32, bf16 or f16):
 * element i = nf4_code[q_i] * absmax[i / 64]. */
DFG_API dfg_tensor *dfg_nf4_dequant(dfg_graph *g, dfg_tensor *packed, dfg_tensor *absmax, dfg_shape shape, dfg_dtype dt);
/* The same with double-quantised absmax (bnb_4bit_use_double_quant): absmax_q (ceil(numel/64))
 * u8 codes of bitsandbytes' signed dynamic 8-bit map, absmax2 (ceil(nblocks/256)) f32, offset ()
 * f32: absmax[b] = dynamic_map[absmax_q[b]] * absmax2[b / 256] + offset. */
DFG_API dfg_tensor *dfg_nf4_dequant_dq(dfg_graph *g, dfg_tensor *packed, dfg_tensor *absmax_q, dfg_tensor *absmax2,
                                       dfg_tensor *offset, dfg_shape shape, dfg_dtype dt);
/* Host quantisers (what a weights loader calls on each f32 weight; bitsandbytes' quantize_4bit
 * with quant_type nf4, blocksize 64): */
DFG_API int64_t dfg_nf4_packed_bytes(int64_t numel); /* ceil(numel / 2) */
DFG_API int64_t dfg_nf4_blocks(int64_t numel);       /* ceil(numel / 64) */
DFG_API int64_t dfg_nf4_dq_blocks(int64_t numel);    /* ceil(dfg_nf4_blocks(numel) / 256) */
DFG_API void dfg_nf4_quantize(const float *x /* (n) */, int64_t n, uint8_t *packed /* (ceil(n/2)) */, float *absmax /* (ceil(n/64)) */);
DFG_API void dfg_nf4_double_quantize(const float *absmax /* (nb) */, int64_t nb, uint8_t *absmax_q /* (nb) */,
                                     float *absmax2 /* (ceil(nb/256)) */, float *offset /* () */);
/* The host's dequantisation, the op's arithmetic (bit for bit its f32 output): absmax (nb), or
 * with absmax NULL the double-quantised absmax_q (nb), absmax2 (ceil(nb/256)) and offset. */
DFG_API void dfg_nf4_dequantize(const uint8_t *packed /* (ceil(n/2)) */, const float *absmax, const uint8_t *absmax_q,
                                const float *absmax2, float offset, int64_t n, float *out /* (n) */);

/* ---------------------------------------------------------------- random sampling
 * rng: an i32 STATE of shape (4): {key_lo, key_hi, counter_lo, counter_hi}, Philox4x32-10.
 * Each call draws one uniform per row from counter and advances the counter by one, in place.
 * temperature <= 0 is greedy (argmax); top_k <= 0 keeps the whole vocabulary. */
DFG_API dfg_tensor *dfg_sample(dfg_graph *g, dfg_tensor *logits, dfg_tensor *rng, float temperature, int top_k);
/* dfg_sample for a sub-batch: row0 is an i32 scalar (rank 0 or one element), the batch index of
 * the logits' first row, so row r draws what row row0 + r of the whole batch would draw from the
 * same rng state (generating in sub-batches then reproduces the whole batch's tokens, when the
 * caller restores the rng state between sub-batches); NULL = 0, exactly dfg_sample. row0 may
 * instead hold one i32 per row: each row's batch index (rows gathered from the batch, e.g. the
 * rows still generating, draw what they would in the whole batch). */
DFG_API dfg_tensor *dfg_sample_rows(dfg_graph *g, dfg_tensor *logits, dfg_tensor *rng, dfg_tensor *row0,
                                    float temperature, int top_k);
/* TRL's (transformers' generate) sampling settings, applied in generate's order: the
 * repetition penalty on the raw logits, then temperature, top_k, top_p, min_p; the token is drawn
 * from what is left, renormalised. Zero-initialised fields other than temperature are neutral. */
typedef struct {
    float temperature;        /* <= 0: greedy (argmax of the penalised logits) */
    int top_k;                /* keep the k likeliest (ties of the k-th too); <= 0: every token */
    float top_p;              /* in (0, 1): keep the likeliest tokens whose mass before them is < top_p; else every token */
    float min_p;              /* in (0, 1]: keep tokens of probability >= min_p x the likeliest's; <= 0: every token */
    float repetition_penalty; /* > 0, != 1: a counted token's logit z becomes z / p (z > 0) or z * p (z < 0) */
} dfg_sampling;
/* dfg_sample's optional inputs and outputs (all NULL / -1: dfg_sample). */
typedef struct {
    dfg_tensor *row0; /* as dfg_sample_rows' */
    /* repetition_penalty's counted tokens: row r's ids history[r, 0 .. len - 1] (history (rows, H)
     * i32; history_len read at run time, an i32 scalar or (rows) one a row, clamped to 0 .. H), but
     * history_skip (an id, the pad) and ids outside the vocabulary. NULL: the penalty is not applied. */
    dfg_tensor *history, *history_len;
    int32_t history_skip;
    /* out, or NULL: (rows) f32, each drawn token's log-prob under the distribution it was drawn
     * from (penalised, tempered, truncated and renormalised; 0 when greedy) */
    dfg_tensor **logp;
} dfg_sample_io;
DFG_API dfg_tensor *dfg_sample_with(dfg_graph *g, dfg_tensor *logits, dfg_tensor *rng, const dfg_sampling *s,
                                    const dfg_sample_io *io);
/* Advances rng's counter by n in place, as n dfg_sample calls would: a decode loop that ends
 * early leaves the stream where the whole loop would have. */
DFG_API dfg_tensor *dfg_rng_advance(dfg_graph *g, dfg_tensor *rng, int64_t n);

/* ---------------------------------------------------------------- writes to persistent tensors */
/* dst = src; a float src of another float dtype is converted (round to nearest even) */
DFG_API dfg_tensor *dfg_assign(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src);
DFG_API dfg_tensor *dfg_accumulate(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src); /* dst += src */
DFG_API dfg_tensor *dfg_assign_fill(dfg_graph *g, dfg_tensor *dst, float value);     /* dst[:] = value */
DFG_API dfg_tensor *dfg_slice_assign(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int axis, int64_t start);
/* As dfg_slice_assign, with the start read at run time from an i32 scalar (a KV-cache position).
 * Along axis 1 of dst (B, T, ...) pos may instead be (B) i32, one a row: row b of src (B, k, ...)
 * goes to dst[b, pos[b] .. pos[b]+k-1]. Any row out of range fails the step, nothing written. */
DFG_API dfg_tensor *dfg_slice_assign_at(dfg_graph *g, dfg_tensor *dst, dfg_tensor *src, int axis, dfg_tensor *pos);

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} dfg_adamw_config;
/* One AdamW step (decoupled weight decay) over n parameters, in place on params and moments.
 * step: i32 scalar holding the 1-based step number used for bias correction. */
DFG_API dfg_status dfg_adamw(dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, dfg_tensor *const *m,
                     dfg_tensor *const *v, int n, dfg_tensor *step, dfg_adamw_config cfg);
/* As dfg_adamw, with the learning rate read at run time from lr, an f32 scalar (a schedule's
 * rate this step), in place of cfg.lr; a rate below 0 or NaN fails the step, nothing written. */
DFG_API dfg_status dfg_adamw_lr(dfg_graph *g, dfg_tensor *const *params, dfg_tensor *const *grads, dfg_tensor *const *m,
                        dfg_tensor *const *v, int n, dfg_tensor *step, dfg_tensor *lr, dfg_adamw_config cfg);
/* Scales the n gradients so that their global L2 norm is at most max_norm (as
 * torch.nn.utils.clip_grad_norm_) and replaces grads[i] with the result: persistent gradient
 * accumulators are scaled in place, TEMP gradients give new TEMPs. Returns the norm before
 * clipping (f32 scalar). */
DFG_API dfg_tensor *dfg_clip_grad_norm(dfg_graph *g, dfg_tensor **grads, int n, float max_norm);

/* ---------------------------------------------------------------- collectives (data parallel)
 * Across the `world` ranks of a data-parallel run (`mpirun -n world dfg run P.dfg`): every rank
 * runs the same plan, so every rank reaches the same collectives in the same order. The world a
 * graph was built for is an attribute of its collectives (the plan records it; the runtime refuses
 * a run with another number of processes). With world = 1 they are copies. */
typedef enum { DFG_COLL_SUM, DFG_COLL_MEAN, DFG_COLL_MIN, DFG_COLL_MAX } dfg_coll_op;
/* Reduces each of xs[0 .. n-1] over the ranks: a persistent tensor (a gradient buffer) is written
 * in place and xs[i] becomes its new version; a temporary gives a new tensor. The n tensors are
 * one node: they travel together (a bucket; NCCL groups them into one launch). */
DFG_API dfg_status dfg_allreduce_n(dfg_graph *g, dfg_tensor **xs, int n, dfg_coll_op op, int world);
DFG_API dfg_tensor *dfg_allreduce(dfg_graph *g, dfg_tensor *x, dfg_coll_op op, int world);
/* As dfg_allreduce_n on persistent tensors only, run on the last repeat of its stage alone (the
 * earlier repeats leave xs as they are): gradient buffers accumulated over the micro-batches of a
 * repeated stage are reduced once, during the last micro-batch's backward. The scheduler issues
 * such a bucket as soon as its gradients are final, so that on a GPU its communication overlaps
 * the backward of the earlier layers. */
DFG_API dfg_status dfg_allreduce_last(dfg_graph *g, dfg_tensor **xs, int n, dfg_coll_op op, int world);
/* (world * d0, d1, ...): every rank's x (d0, d1, ...) stacked along axis 0 in rank order */
DFG_API dfg_tensor *dfg_all_gather(dfg_graph *g, dfg_tensor *x, int world);
/* i32 scalar: this process's rank, 0 .. world-1 */
DFG_API dfg_tensor *dfg_rank(dfg_graph *g, int world);

#ifdef __cplusplus
}
#endif
#endif
