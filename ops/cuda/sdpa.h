/* sdpa.h - one fused attention call as cuDNN's scaled-dot-product attention (SDPA) sees it: a
 * pure description made from an attention or attention_bwd node, executed by cuDNN on a GPU
 * (runtime/cuda/sdpa_cudnn.c) and by an interpreter of the same semantics under emulation
 * (runtime/cuda/emu/sdpa_emu.c), so the mapping of dfg's fused qkv onto cuDNN's 4-d tensors is tested without a GPU.
 *
 * Every operand is a 4-d tensor over (b, h, s, d) -- batch, head, sequence position, head
 * channel -- addressed by element offset + b*stride[0] + h*stride[1] + s*stride[2] +
 * d*stride[3] from its buffer. dfg's qkv (B, T, 3C) holds Q, K and V interleaved per token, so
 * all three are read in place: offsets 0, C and 2C, strides (T*3C, D, 3C, 1). y and dy (B, T, C)
 * have strides (T*C, D, C, 1); the stats (dfg's lse, (B, H, T) f32) are (b, h, s, 1) with
 * strides (H*T, T, 1, 1).
 *
 * Semantics (cuDNN's, as its fused flash-attention graphs define them), per (b, h):
 *   S    = scale * Q K^T                              (seq_q, seq_kv), f32
 *   S_ij = -inf where causal and j > i                (top-left aligned diagonal)
 *   stats_i = max_j S_ij + log(sum_j exp(S_ij - max_j S_ij))       natural log, f32
 *   O    = softmax(S) V
 * and the backward, from dO, O and the forward's stats:
 *   P    = exp(S - stats),  delta_i = sum_d dO_id O_id,  dS = P * (dO V^T - delta)
 *   dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO.
 * Operands are f32, bf16 or f16 (one dtype for all but the stats); arithmetic is f32. */
#ifndef DFG_SDPA_H
#define DFG_SDPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../graph/dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The operands, indexing the descriptor's layouts and the buffer pointers of a call. The
 * forward uses Q .. STATS; the backward all of them. */
typedef enum {
    DFG_SDPA_Q,
    DFG_SDPA_K,
    DFG_SDPA_V,
    DFG_SDPA_O,
    DFG_SDPA_STATS,
    DFG_SDPA_DO,
    DFG_SDPA_DQ,
    DFG_SDPA_DK,
    DFG_SDPA_DV,
    DFG_SDPA_N_OPERANDS
} dfg_sdpa_operand;

typedef struct {
    int64_t offset;    /* elements from the operand's buffer to its element (0, 0, 0, 0) */
    int64_t stride[4]; /* elements between neighbours along b, h, s, d */
} dfg_sdpa_layout;

typedef struct {
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    float scale;       /* applied to Q K^T before the mask */
    bool causal;       /* query i sees keys 0 .. i */
    bool stats;        /* the forward writes the per-row log-sum-exp; the backward reads it */
    dfg_dtype dtype;   /* Q, K, V, O, dO, dQ, dK, dV; the stats are f32 */
    dfg_sdpa_layout t[DFG_SDPA_N_OPERANDS];
} dfg_sdpa_desc;

struct dfg_node;
/* The forward of an attention node (qkv (B, T, 3C) -> y (B, T, C), lse (B, H, T)), and the
 * backward of an attention_bwd node (dy, qkv, y, lse -> dqkv (B, T, 3C), dq dk dv interleaved like
 * q k v). A call's buffers are the node's: forward {qkv, qkv, qkv, y, lse}, backward {qkv, qkv,
 * qkv, y, lse, dy, dqkv, dqkv, dqkv} (dfg_sdpa_buffers). False with why set for another op or a
 * shape the node's shape rule would refuse. The descriptor's padding bytes are zero, so two
 * descriptors of the same call compare equal with memcmp. */
bool dfg_sdpa_forward_desc(const struct dfg_node *n, dfg_sdpa_desc *d, const char **why);
bool dfg_sdpa_backward_desc(const struct dfg_node *n, dfg_sdpa_desc *d, const char **why);
/* The buffer of each operand of the node's call, from a launcher's in and out. */
void dfg_sdpa_buffers(const struct dfg_node *n, void *const *in, void *const *out, void **ptrs);

/* Whether cuDNN's fused flash attention takes the descriptor, on the device pointers of a call
 * (ptrs: each operand's buffer; NULL: the layout alone): bf16 or f16, head dims a multiple of 8
 * up to 128, unit head-channel strides, the stats produced (forward) or given (backward), packed
 * stats rows, the other operands' strides and every operand's start a multiple of 16 bytes (cuDNN's
 * tensor alignment). The GPU's
 * call site refuses the rest with DFG_ERR_UNSUPPORTED, and the launchers run dfg's own kernels
 * instead (f32 attention on the GPU always does). */
bool dfg_sdpa_cudnn_supports(const dfg_sdpa_desc *d, bool backward, void *const *ptrs, const char **why);
/* "B=.. H=.. Sq=.. Skv=.. D=.. ... Q@off/strides ..." for messages. */
char *dfg_sdpa_str(const dfg_sdpa_desc *d, char *buf, size_t len);
/* The operands a call reads and writes: Q K V O stats, and dO dQ dK dV for the backward. */
int dfg_sdpa_n_operands(bool backward);

#ifdef __cplusplus
}
#endif
#endif
