/* state.c - CPU kernels that write persistent tensors in place: assign, accumulate, assign_fill,
 * slice_assign, the AdamW step (as torch.optim.AdamW) and global-norm clipping (as
 * torch.nn.utils.clip_grad_norm_). Outputs arrive aliased to the tensors they write. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu.h"
#include "../dtype.h"

#define STATE_OMP_MIN 32768 /* below this many elements a parallel region costs more than it saves */

dfg_status dfg_cpu_assign(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_tensor *dst = n->in[0];
    int64_t cnt = dfg_shape_numel(dst->shape);
    switch ((dfg_op)n->op) {
    case DFG_OP_ASSIGN:
        if (n->in[1]->dtype != dst->dtype) /* float to float, round to nearest even */
            for (int64_t i = 0; i < cnt; i++) dfg_store(out[0], dst->dtype, i, dfg_load(in[1], n->in[1]->dtype, i));
        else if (out[0] != in[1]) memmove(out[0], in[1], dfg_tensor_bytes(dst));
        break;
    case DFG_OP_ACCUMULATE:
        if (dst->dtype == DFG_F32) {
            float *y = out[0];
            const float *x = in[1];
#pragma omp parallel for schedule(static) if (cnt > STATE_OMP_MIN)
            for (int64_t i = 0; i < cnt; i++) y[i] += x[i];
        } else {
            for (int64_t i = 0; i < cnt; i++)
                dfg_store(out[0], dst->dtype, i, dfg_load(out[0], dst->dtype, i) + dfg_load(in[1], dst->dtype, i));
        }
        break;
    case DFG_OP_ASSIGN_FILL: {
        /* zeroing every gradient buffer after the update is a parameter-sized write per step (0.5B
         * parameters: ~2 GB): all threads, and plain memset for zero */
        float v = n->attr->assign_fill.value;
        if (v == 0.0f && !signbit(v)) {
            size_t bytes = dfg_tensor_bytes(dst);
            int64_t chunks = (int64_t)(bytes >> 20) + 1; /* 1 MiB pieces */
#pragma omp parallel for schedule(static) if (chunks > 1)
            for (int64_t c = 0; c < chunks; c++) {
                size_t lo = bytes * (size_t)c / (size_t)chunks, hi = bytes * (size_t)(c + 1) / (size_t)chunks;
                memset((char *)out[0] + lo, 0, hi - lo);
            }
            break;
        }
#pragma omp parallel for schedule(static) if (cnt > STATE_OMP_MIN)
        for (int64_t i = 0; i < cnt; i++) dfg_store(out[0], dst->dtype, i, v);
        break;
    }
    default:
        return dfg_cpu_fail(ctx, n, DFG_ERR_ARG, "not an assign op");
    }
    return DFG_OK;
}

dfg_status dfg_cpu_slice_assign(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_tensor *dst = n->in[0], *src = n->in[1];
    int ax = n->attr->slice_assign.axis;
    int64_t start = n->attr->slice_assign.start;
    /* a dynamic start: pos[o * step] for outer index o (step 1: a per-row pos along axis 1, whose
     * outer index is the row) */
    const int32_t *pos = n->attr->slice_assign.dynamic ? in[2] : NULL;
    int64_t step = pos && dfg_shape_numel(n->in[2]->shape) > 1 ? 1 : 0;
    int64_t outer, len, inner, slen = src->shape.d[ax];
    dfg_split_axis(dst->shape, ax, &outer, &len, &inner);
    for (int64_t o = 0; o < (step ? outer : 1); o++) { /* every row checked before any is written */
        int64_t s = pos ? pos[o * step] : start;
        if (s < 0 || s + slen > len) {
            char row[40] = "";
            if (step) snprintf(row, sizeof(row), " (row %lld)", (long long)o);
            return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "rows [%lld, %lld)%s of '%s' are outside its %lld rows",
                                (long long)s, (long long)(s + slen), row, dst->name, (long long)len);
        }
    }
    size_t esz = dfg_dtype_size(dst->dtype), row = (size_t)(slen * inner) * esz;
    for (int64_t o = 0; o < outer; o++) {
        int64_t s = pos ? pos[o * step] : start;
        memcpy((char *)out[0] + (size_t)((o * len + s) * inner) * esz, (const char *)in[1] + (size_t)o * row, row);
    }
    return DFG_OK;
}

dfg_status dfg_cpu_adamw(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const dfg_attrs_adamw c = n->attr->adamw;
    int32_t t = *(const int32_t *)in[0];
    int np = (n->n_in - 1) / 4;
    /* a scheduled rate, the input after the last moment, replaces the attribute's */
    float lr = n->n_in > 1 + 4 * np ? *(const float *)in[n->n_in - 1] : c.lr;
    if (t < 1) return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "step is %d; it counts from 1", t);
    if (!(lr >= 0)) return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "lr is %g; it must be >= 0", lr);
    double bc1 = 1.0 - pow(c.beta1, t), bc2 = 1.0 - pow(c.beta2, t);
    float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2), decay = 1.0f - lr * c.weight_decay;
    for (int i = 0; i < np; i++) {
        float *p = out[3 * i], *m = out[3 * i + 1], *v = out[3 * i + 2];
        const float *g = in[2 + 4 * i];
        int64_t cnt = dfg_shape_numel(n->in[1 + 4 * i]->shape);
#pragma omp parallel for schedule(static) if (cnt > 65536)
        for (int64_t j = 0; j < cnt; j++) {
            float gj = g[j];
            m[j] = c.beta1 * m[j] + (1.0f - c.beta1) * gj;
            v[j] = c.beta2 * v[j] + (1.0f - c.beta2) * gj * gj;
            p[j] = p[j] * decay - step_size * m[j] / (sqrtf(v[j]) / bc2_sqrt + c.eps);
        }
    }
    return DFG_OK;
}

/* The gradients that hold a NaN or an Inf, named in a message for a norm that is not finite. */
static dfg_status clip_nonfinite(const dfg_node *n, void *const *in, double norm, dfg_cpu_ctx *ctx) {
    int bad = 0, first = -1;
    for (int i = 0; i < n->n_in; i++) {
        const float *g = in[i];
        int64_t cnt = dfg_shape_numel(n->in[i]->shape), j = 0;
        while (j < cnt && isfinite(g[j])) j++;
        if (j < cnt && bad++ == 0) first = i;
    }
    if (first < 0) /* finite values whose squares overflow the double sum cannot happen for f32 */
        return dfg_cpu_fail(ctx, n, DFG_ERR_NUMERIC, "the global gradient norm is %g", norm);
    return dfg_cpu_fail(ctx, n, DFG_ERR_NUMERIC,
                        "the global gradient norm is %g: gradient '%s' holds NaN or Inf (%d of %d gradients do); "
                        "nothing was updated", norm,
                        n->in[first]->version_of ? n->in[first]->version_of->name : n->in[first]->name, bad, n->n_in);
}

/* out[0] = the global norm; out[1+i] = in[i] * min(1, max_norm / (norm + 1e-6)). A norm that is
 * not finite fails the step here, before any optimizer update reads the clipped gradients: the
 * parameters and moments stay those of the last good step. */
dfg_status dfg_cpu_clip_grad_norm(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    double ss = 0.0;
    for (int i = 0; i < n->n_in; i++) {
        const float *g = in[i];
        int64_t cnt = dfg_shape_numel(n->in[i]->shape);
        double part = 0.0;
#pragma omp parallel for reduction(+ : part) schedule(static) if (cnt > 65536)
        for (int64_t j = 0; j < cnt; j++) part += (double)g[j] * g[j];
        ss += part;
    }
    double norm = sqrt(ss), coef = (double)n->attr->clip.max_norm / (norm + 1e-6);
    if (!isfinite(norm)) return clip_nonfinite(n, in, norm, ctx);
    float scale = (float)(coef < 1.0 ? coef : 1.0);
    *(float *)out[0] = (float)norm;
    for (int i = 0; i < n->n_in; i++) {
        const float *g = in[i];
        float *y = out[1 + i];
        int64_t cnt = dfg_shape_numel(n->in[i]->shape);
        for (int64_t j = 0; j < cnt; j++) y[j] = g[j] * scale;
    }
    return DFG_OK;
}
