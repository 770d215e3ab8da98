/* layout.c - CPU kernels that move bytes: reshape (a view: nothing to do), permute, slice,
 * concat, expand. They are dtype-agnostic: elements are copied by size. */
#include <stdio.h>
#include <string.h>

#include "cpu.h"

/* Copies element i of src to element j of dst, for 1-, 2- or 4-byte elements. */
static inline void copy_elem(char *dst, int64_t j, const char *src, int64_t i, size_t esz) {
    switch (esz) {
    case 4: ((uint32_t *)(void *)dst)[j] = ((const uint32_t *)(const void *)src)[i]; break;
    case 2: ((uint16_t *)(void *)dst)[j] = ((const uint16_t *)(const void *)src)[i]; break;
    default: dst[j] = src[i]; break;
    }
}

dfg_status dfg_cpu_reshape(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    if (out[0] != in[0]) memcpy(out[0], in[0], dfg_tensor_bytes(n->out[0]));
    return DFG_OK;
}

dfg_status dfg_cpu_permute(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape is = n->in[0]->shape, os = n->out[0]->shape;
    size_t esz = dfg_dtype_size(n->in[0]->dtype);
    int64_t istride[DFG_MAX_RANK], pstride[DFG_MAX_RANK]; /* pstride[k]: input stride of output dim k */
    int64_t s = 1;
    for (int d = is.rank - 1; d >= 0; d--) istride[d] = s, s *= is.d[d];
    for (int k = 0; k < os.rank; k++) pstride[k] = istride[n->attr->permute.perm[k]];
    int64_t last = os.rank ? os.d[os.rank - 1] : 1, rows = dfg_shape_numel(os) / last;
    int64_t ls = os.rank ? pstride[os.rank - 1] : 1;
    dfg_shape outer = os;
    if (outer.rank) outer.d[outer.rank - 1] = 1;
#pragma omp parallel for schedule(static) if (rows * last > 65536)
    for (int64_t r = 0; r < rows; r++) {
        int64_t src = dfg_bcast_offset(&outer, pstride, r);
        for (int64_t i = 0; i < last; i++) copy_elem(out[0], r * last + i, in[0], src + i * ls, esz);
    }
    return DFG_OK;
}

dfg_status dfg_cpu_slice(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    int64_t outer, len, inner, start = n->attr->slice.start;
    dfg_split_axis(n->in[0]->shape, n->attr->slice.axis, &outer, &len, &inner);
    /* a run-time start: pos[o * step] for outer index o (step 1: one a row, along axis 1) */
    const int32_t *pos = n->n_in == 2 ? in[1] : NULL;
    int64_t step = pos && dfg_shape_numel(n->in[1]->shape) > 1 ? 1 : 0;
    for (int64_t o = 0; o < (step ? outer : 1); o++) {
        int64_t s = pos ? pos[o * step] : start;
        if (s < 0 || s + n->attr->slice.len > len) {
            char row[40] = "";
            if (step) snprintf(row, sizeof(row), " (row %lld)", (long long)o);
            return dfg_cpu_fail(ctx, n, DFG_ERR_RANGE, "rows [%lld, %lld)%s of '%s' are outside its %lld rows",
                                (long long)s, (long long)(s + n->attr->slice.len), row, n->in[0]->name, (long long)len);
        }
    }
    size_t esz = dfg_dtype_size(n->in[0]->dtype);
    size_t row = (size_t)(n->attr->slice.len * inner) * esz;
    for (int64_t o = 0; o < outer; o++) {
        int64_t s = pos ? pos[o * step] : start;
        memcpy((char *)out[0] + (size_t)o * row, (const char *)in[0] + (size_t)((o * len + s) * inner) * esz, row);
    }
    return DFG_OK;
}

dfg_status dfg_cpu_concat(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    int ax = n->attr->concat.axis;
    int64_t outer, total, inner;
    dfg_split_axis(n->out[0]->shape, ax, &outer, &total, &inner);
    size_t esz = dfg_dtype_size(n->out[0]->dtype);
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t len = n->in[i]->shape.d[ax];
        size_t row = (size_t)(len * inner) * esz;
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)out[0] + (size_t)((o * total + off) * inner) * esz, (const char *)in[i] + (size_t)o * row, row);
        off += len;
    }
    return DFG_OK;
}

/* Broadcasting copies whole runs: the trailing dims where the input is not broadcast are one
 * contiguous block of it (a prompt's keys and values copied to each of G rows is one memcpy per
 * row); only a broadcast in the last dim falls back to element copies. */
dfg_status dfg_cpu_expand(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    (void)ctx;
    const dfg_shape os = n->out[0]->shape, is = n->in[0]->shape;
    size_t esz = dfg_dtype_size(n->in[0]->dtype);
    int64_t st[DFG_MAX_RANK];
    dfg_bcast_strides(os, is, st);
    int64_t cnt = dfg_shape_numel(os), run = 1;
    for (int d = os.rank - 1, k = is.rank - 1; d >= 0 && k >= 0 && is.d[k] == os.d[d]; d--, k--) run *= os.d[d];
    if (run > 1 && cnt > 0) {
        int64_t runs = cnt / run;
        size_t bytes = (size_t)run * esz;
#pragma omp parallel for schedule(static) if (cnt > 65536)
        for (int64_t r = 0; r < runs; r++)
            memcpy((char *)out[0] + (size_t)r * bytes, (const char *)in[0] + (size_t)dfg_bcast_offset(&os, st, r * run) * esz,
                   bytes);
        return DFG_OK;
    }
#pragma omp parallel for schedule(static) if (cnt > 65536)
    for (int64_t i = 0; i < cnt; i++) copy_elem(out[0], i, in[0], dfg_bcast_offset(&os, st, i), esz);
    return DFG_OK;
}
