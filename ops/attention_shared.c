/* attention_shared.c - decoding attention against a KV cache that stores each group's prompt once
 * (cascade or shared-prefix attention, as FlashInfer and Hydragen do it for inference): the
 * builder, shape rule and cost of attention_shared_cached. Kernels: ops/cpu/attention_shared.c,
 * ops/cuda/attention_shared.cu.
 *
 * The cache is two parts: the prompts' (P, Tp, Ckv), columns 0 .. Tp-1, one for each group of
 * rows that share a prompt, and the rows' own (N, Tc, Ckv), columns Tp .. Tp+Tc-1 (a GRPO rollout:
 * the prompt's last token and the completion, which every row decodes itself). Row b's virtual
 * cache row is its prompt's part followed by its own; the op is attention_cached on that row,
 * positions and left padding included, so the two forms can be compared on a copied cache.
 *
 * Inputs: q (N, Tq, C), k_prompt, v_prompt (P, Tp, Ckv), k_rows, v_rows (N, Tc, Ckv), pos (i32:
 * one, or (N) one a row) [, start (N) i32] [, prompt_of (N) i32]; the attributes say which of the
 * two optional inputs are there. Without prompt_of row b's prompt is b / (N / P). */
#include "op.h"

enum { PLAIN_INPUTS = 6 };

static dfg_status check_row_index(dfg_graph *g, const dfg_node *n, const dfg_tensor *t, int64_t N, const char *what) {
    if (t->dtype == DFG_I32 && t->shape.rank == 1 && t->shape.d[0] == N) return DFG_OK;
    char buf[96];
    return dfg_node_fail(g, n, DFG_ERR_SHAPE, "%s '%s' must be i32 of shape (%lld), one a row; got %s %s", what, t->name,
                         (long long)N, dfg_dtype_name(t->dtype), dfg_shape_str(t->shape, buf, sizeof(buf)));
}

/* the caches: two of one shape each, one float dtype with q, one row width Ckv */
static dfg_status check_parts(dfg_graph *g, const dfg_node *n) {
    const dfg_tensor *q = n->in[0], *kp = n->in[1], *vp = n->in[2], *k = n->in[3], *v = n->in[4];
    if (q->shape.rank != 3 || kp->shape.rank != 3 || k->shape.rank != 3 || k->shape.d[0] != q->shape.d[0] ||
        kp->shape.d[2] != k->shape.d[2] || kp->shape.d[0] < 1)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "needs q (N, Tq, C), prompt parts (P, Tp, Ckv) and row parts (N, Tc, Ckv)");
    if (!dfg_shape_equal(kp->shape, vp->shape) || !dfg_shape_equal(k->shape, v->shape))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the keys and values of a part differ in shape");
    if (q->dtype != kp->dtype || q->dtype != vp->dtype || q->dtype != k->dtype || q->dtype != v->dtype ||
        !dfg_is_float(q->dtype))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "q and the caches need one float dtype");
    if (q->shape.d[1] > kp->shape.d[1] + k->shape.d[1])
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "%lld queries exceed the caches' %lld columns", (long long)q->shape.d[1],
                             (long long)(kp->shape.d[1] + k->shape.d[1]));
    return DFG_OK;
}

static dfg_status check_heads(dfg_graph *g, const dfg_node *n) {
    int h = n->attr->attention_shared.n_head;
    int64_t C = n->in[0]->shape.d[2], ckv = n->in[1]->shape.d[2];
    if (h < 1 || C % h) return dfg_node_fail(g, n, DFG_ERR_SHAPE, "C=%lld does not split into %d heads", (long long)C, h);
    int64_t D = C / h;
    if (ckv % D || h % (ckv / D))
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "the caches' width %lld is not a divisor's number of head_dim %lld heads "
                             "of n_head %d", (long long)ckv, (long long)D, h);
    return DFG_OK;
}

dfg_status dfg_infer_attention_shared_cached(dfg_graph *g, const dfg_node *n, dfg_out_spec *out) {
    const dfg_attrs_attention_shared *a = &n->attr->attention_shared;
    int want = PLAIN_INPUTS + a->start + a->prompt_of;
    if (n->n_in != want)
        return dfg_node_fail(g, n, DFG_ERR_ARG, "takes %d inputs (start %s, prompt_of %s); got %d", want,
                             a->start ? "given" : "none", a->prompt_of ? "given" : "none", n->n_in);
    if (check_parts(g, n) || check_heads(g, n)) return g->status;
    const dfg_tensor *q = n->in[0], *pos = n->in[5];
    int64_t N = q->shape.d[0], P = n->in[1]->shape.d[0];
    if (!a->prompt_of && N % P)
        return dfg_node_fail(g, n, DFG_ERR_SHAPE, "%lld rows do not split into groups of the %lld prompts", (long long)N,
                             (long long)P);
    if (pos->dtype != DFG_I32 || (dfg_shape_numel(pos->shape) != 1 && !(pos->shape.rank == 1 && pos->shape.d[0] == N)))
        return check_row_index(g, n, pos, N, "pos (or an i32 scalar)");
    if (a->start && check_row_index(g, n, n->in[PLAIN_INPUTS], N, "start")) return g->status;
    if (a->prompt_of && check_row_index(g, n, n->in[n->n_in - 1], N, "prompt_of")) return g->status;
    out[0] = (dfg_out_spec){q->dtype, q->shape, -1, false};
    return DFG_OK;
}

/* As attention_cached: every query head against every column of its virtual row (QK^T and PV, two
 * multiply-adds a key and channel); the bytes are what the parts hold, each prompt's once. */
dfg_cost dfg_cost_attention_shared_cached(const dfg_node *n) {
    double N = (double)n->in[0]->shape.d[0], Tq = (double)n->in[0]->shape.d[1], C = (double)n->in[0]->shape.d[2];
    double T = (double)(n->in[1]->shape.d[1] + n->in[3]->shape.d[1]);
    return dfg_cost_io(n, 4.0 * N * Tq * T * C);
}

dfg_tensor *dfg_attention_shared_cached(dfg_graph *g, dfg_tensor *q, dfg_tensor *k_prompt, dfg_tensor *v_prompt,
                                        dfg_tensor *k_rows, dfg_tensor *v_rows, dfg_tensor *pos, dfg_tensor *start,
                                        dfg_tensor *prompt_of, int n_head) {
    dfg_attrs a = {.attention_shared = {n_head, start != NULL, prompt_of != NULL}};
    dfg_tensor *in[8] = {q, k_prompt, v_prompt, k_rows, v_rows, pos};
    int n_in = PLAIN_INPUTS;
    if (start) in[n_in++] = start;
    if (prompt_of) in[n_in++] = prompt_of;
    return dfg_op_out(g, DFG_OP_ATTENTION_SHARED_CACHED, in, n_in, &a);
}
