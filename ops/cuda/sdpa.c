/* sdpa.c - SDPA descriptors from attention nodes (pure) and the rule of what cuDNN's fused
 * flash attention takes. Plain C, linked with both builds of the kernels (nvcc and emulated);
 * the emulated SDPA is sdpa_emu.c, in the emulated device's module only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dtype.h"
#include "cuda.h"

/* ---------------------------------------------------------------- descriptors */
static dfg_sdpa_layout layout(int64_t offset, int64_t sb, int64_t sh, int64_t ss, int64_t sd) {
    return (dfg_sdpa_layout){offset, {sb, sh, ss, sd}};
}

/* The dims shared by both directions, from qkv (B, T, 3C) and the head count; false when the
 * shapes are not an attention's. */
static bool common(const dfg_node *n, const dfg_tensor *qkv, dfg_sdpa_desc *d, const char **why) {
    memset(d, 0, sizeof(*d)); /* padding too: descriptors are compared with memcmp */
    int64_t H = n->attr->attention.n_head;
    if (qkv->shape.rank != 3 || qkv->shape.d[2] % 3 || H <= 0 || (qkv->shape.d[2] / 3) % H ||
        qkv->shape.d[2] == 0) {
        *why = "needs qkv of shape (B, T, 3C) with C a multiple of the heads";
        return false;
    }
    int64_t B = qkv->shape.d[0], T = qkv->shape.d[1], C = qkv->shape.d[2] / 3, D = C / H;
    d->batch = B, d->heads = H, d->seq_q = T, d->seq_kv = T, d->head_dim = D;
    d->scale = 1.0f / sqrtf((float)D); /* the CPU kernel's expression, so both round alike */
    d->causal = true;
    d->stats = true;
    d->dtype = qkv->dtype;
    /* Q, K, V in place in qkv: token rows of 3C, heads D apart, the parts C apart */
    for (int p = 0; p < 3; p++) d->t[DFG_SDPA_Q + p] = layout(p * C, T * 3 * C, D, 3 * C, 1);
    d->t[DFG_SDPA_O] = layout(0, T * C, D, C, 1);      /* y (B, T, C) */
    d->t[DFG_SDPA_STATS] = layout(0, H * T, T, 1, 1);  /* lse (B, H, T) */
    return true;
}

static bool same_shape(const dfg_tensor *t, dfg_dtype dt, int rank, int64_t a, int64_t b, int64_t c) {
    return t->dtype == dt && t->shape.rank == rank && t->shape.d[0] == a && t->shape.d[1] == b &&
           (rank < 3 || t->shape.d[2] == c);
}

/* n is an op node of n_in inputs and n_out outputs (not one with the extra start input: left
 * padding, which SDPA has no mask for); else *why says which it is not */
static bool node_is(const dfg_node *n, dfg_op op, int n_in, int n_out, const char *not_it, const char **why) {
    if (n->op == op && n->n_in == n_in + 1) {
        *why = "left-padded rows (a start input): SDPA has no left-padding mask; dfg's own attention kernel runs";
        return false;
    }
    if (n->op != op || n->n_in != n_in || n->n_out != n_out) {
        *why = not_it;
        return false;
    }
    return true;
}

bool dfg_sdpa_forward_desc(const dfg_node *n, dfg_sdpa_desc *d, const char **why) {
    if (!node_is(n, DFG_OP_ATTENTION, 1, 2, "not an attention node", why)) return false;
    if (!common(n, n->in[0], d, why)) return false;
    if (!same_shape(n->out[0], d->dtype, 3, d->batch, d->seq_q, d->heads * d->head_dim) ||
        !same_shape(n->out[1], DFG_F32, 3, d->batch, d->heads, d->seq_q)) {
        *why = "outputs are not y (B, T, C) and an f32 lse (B, H, T)";
        return false;
    }
    return true;
}

bool dfg_sdpa_backward_desc(const dfg_node *n, dfg_sdpa_desc *d, const char **why) {
    if (!node_is(n, DFG_OP_ATTENTION_BWD, 4, 1, "not an attention_bwd node", why)) return false;
    if (!common(n, n->in[1], d, why)) return false;
    int64_t B = d->batch, T = d->seq_q, C = d->heads * d->head_dim;
    if (!same_shape(n->in[0], d->dtype, 3, B, T, C) || !same_shape(n->in[2], d->dtype, 3, B, T, C) ||
        !same_shape(n->in[3], DFG_F32, 3, B, d->heads, T) || !same_shape(n->out[0], d->dtype, 3, B, T, 3 * C)) {
        *why = "inputs are not dy, y (B, T, C), lse (B, H, T) and the output not dqkv (B, T, 3C)";
        return false;
    }
    d->t[DFG_SDPA_DO] = d->t[DFG_SDPA_O]; /* dy as y */
    for (int p = 0; p < 3; p++) d->t[DFG_SDPA_DQ + p] = d->t[DFG_SDPA_Q + p]; /* dqkv as qkv */
    return true;
}

void dfg_sdpa_buffers(const dfg_node *n, void *const *in, void *const *out, void **ptrs) {
    for (int k = 0; k < DFG_SDPA_N_OPERANDS; k++) ptrs[k] = NULL;
    if (n->op == DFG_OP_ATTENTION) {
        ptrs[DFG_SDPA_Q] = ptrs[DFG_SDPA_K] = ptrs[DFG_SDPA_V] = in[0];
        ptrs[DFG_SDPA_O] = out[0], ptrs[DFG_SDPA_STATS] = out[1];
    } else if (n->op == DFG_OP_ATTENTION_BWD) {
        ptrs[DFG_SDPA_Q] = ptrs[DFG_SDPA_K] = ptrs[DFG_SDPA_V] = in[1];
        ptrs[DFG_SDPA_O] = in[2], ptrs[DFG_SDPA_STATS] = in[3], ptrs[DFG_SDPA_DO] = in[0];
        ptrs[DFG_SDPA_DQ] = ptrs[DFG_SDPA_DK] = ptrs[DFG_SDPA_DV] = out[0];
    }
}

/* ---------------------------------------------------------------- what cuDNN takes */
int dfg_sdpa_n_operands(bool backward) { return backward ? DFG_SDPA_N_OPERANDS : DFG_SDPA_STATS + 1; }

bool dfg_sdpa_cudnn_supports(const dfg_sdpa_desc *d, bool backward, void *const *ptrs, const char **why) {
    if (d->dtype != DFG_BF16 && d->dtype != DFG_F16) return *why = "cuDNN's fused attention is bf16 or f16 only", false;
    if (d->head_dim % 8 || d->head_dim > 128) return *why = "head dim not a multiple of 8 up to 128", false;
    if (!d->stats) return *why = "the stats (log-sum-exp) are not kept", false;
    for (int k = 0; k < dfg_sdpa_n_operands(backward); k++) {
        const dfg_sdpa_layout *l = &d->t[k];
        size_t es = k == DFG_SDPA_STATS ? sizeof(float) : dfg_dtype_size(d->dtype);
        /* a stats row is one f32: its last dim has extent 1, its rows must be packed, and only its
         * start needs cuDNN's alignment (T floats per head are any number of bytes) */
        if (k == DFG_SDPA_STATS ? l->stride[2] != 1 : l->stride[3] != 1)
            return *why = "an operand's innermost stride is not 1", false;
        for (int a = 0; a < 3 && k != DFG_SDPA_STATS; a++) /* every row of Q, K, V, O... starts aligned */
            if ((size_t)l->stride[a] * es % 16) return *why = "a stride is not a multiple of 16 bytes", false;
        if (ptrs && ((uintptr_t)ptrs[k] + (size_t)l->offset * es) % 16)
            return *why = "an operand does not start on 16 bytes", false;
    }
    return true;
}

char *dfg_sdpa_str(const dfg_sdpa_desc *d, char *buf, size_t len) {
    static const char *names[DFG_SDPA_N_OPERANDS] = {"Q", "K", "V", "O", "stats", "dO", "dQ", "dK", "dV"};
    int k = snprintf(buf, len, "B=%lld H=%lld Sq=%lld Skv=%lld D=%lld scale=%g%s %s",
                     (long long)d->batch, (long long)d->heads, (long long)d->seq_q, (long long)d->seq_kv,
                     (long long)d->head_dim, (double)d->scale, d->causal ? " causal" : "", dfg_dtype_name(d->dtype));
    for (int o = 0; o < DFG_SDPA_N_OPERANDS && k >= 0 && (size_t)k < len; o++) {
        const dfg_sdpa_layout *l = &d->t[o];
        if (!l->stride[0] && !l->stride[1] && !l->stride[2] && !l->stride[3]) continue; /* unused */
        k += snprintf(buf + k, len - (size_t)k, " %s@%lld[%lld,%lld,%lld,%lld]", names[o], (long long)l->offset,
                      (long long)l->stride[0], (long long)l->stride[1], (long long)l->stride[2],
                      (long long)l->stride[3]);
    }
    return buf;
}
