/* nf4.c - CPU NF4 dequantisation (the op, and bitsandbytes' algorithm it follows: ops/nf4.c):
 *   y[i] = nf4_code[q_i] * absmax[i / 64], q_i the high nibble of packed[i / 2] for even i, the low
 *   one for odd i; one f32 product, rounded once to y's dtype (f32, bf16, f16).
 * With double quantisation each block's absmax is rebuilt first as bitsandbytes does,
 *   absmax[b] = dynamic_map[absmax_q[b]] * absmax2[b / 256] + offset,
 * the product and the sum each rounded to f32. The CUDA kernel (ops/cuda/nf4.cu) takes the same
 * steps, so the two agree bit for bit (tests/test_cuda_nf4.c). */
#include "../dtype.h"
#include "../nf4.h"
#include "cpu.h"

static const float nf4_code[16] = {DFG_NF4_CODE_VALUES};
static const float dynamic_map[256] = {DFG_NF4_DYNAMIC_MAP_VALUES};

/* The absmax of block b: stored (in[1]), or rebuilt from absmax_q (in[1]), absmax2 (in[2]) and
 * offset (in[3]). Two statements, so that no compiler contracts them into one FMA rounding. */
static float block_absmax(const dfg_node *n, void *const *in, int64_t b) {
    if (n->n_in == 2) return ((const float *)in[1])[b];
    const uint8_t *absmax_q = in[1]; /* (nb) */
    const float *absmax2 = in[2];    /* (ceil(nb / 256)) */
    const float *offset = in[3];     /* () */
    const float scaled = dynamic_map[absmax_q[b]] * absmax2[b / DFG_NF4_DQ_BLOCK];
    return scaled + offset[0];
}

/* inputs packed u8 (ceil(numel/2)), absmax f32 (nb) | absmax_q u8 (nb), absmax2 f32
 * (ceil(nb/256)), offset f32 () -> y (shape) f32, bf16 or f16; nb = ceil(numel/64) */
dfg_status dfg_cpu_nf4_dequant(const dfg_node *n, void *const *in, void *const *out, dfg_cpu_ctx *ctx) {
    const int64_t numel = dfg_shape_numel(n->attr->nf4.shape), nb = dfg_nf4_blocks(numel);
    const uint8_t *packed = in[0]; /* (ceil(numel / 2)) */
    void *y = out[0];              /* (numel) */
    const dfg_dtype dt = n->out[0]->dtype;
    if (dt != DFG_F32 && dt != DFG_BF16 && dt != DFG_F16)
        return dfg_cpu_fail(ctx, n, DFG_ERR_UNSUPPORTED, "output '%s' is %s; the kernel writes f32, bf16 or f16",
                            n->out[0]->name, dfg_dtype_name(dt));
#pragma omp parallel for schedule(static) if (numel > 65536)
    for (int64_t b = 0; b < nb; b++) {
        const float s = block_absmax(n, in, b);
        const int64_t e0 = b * DFG_NF4_BLOCK, len = numel - e0 < DFG_NF4_BLOCK ? numel - e0 : DFG_NF4_BLOCK;
        float v[DFG_NF4_BLOCK]; /* the block's values in f32 */
        for (int64_t i = 0; i < len; i++) {
            const uint8_t byte = packed[(e0 + i) >> 1];
            v[i] = nf4_code[(i & 1) ? byte & 15u : byte >> 4] * s; /* e0 is even: i's parity is the element's */
        }
        switch (dt) {
        case DFG_F32:
            for (int64_t i = 0; i < len; i++) ((float *)y)[e0 + i] = v[i];
            break;
        case DFG_BF16:
            for (int64_t i = 0; i < len; i++) ((uint16_t *)y)[e0 + i] = dfg_f32_to_bf16(v[i]);
            break;
        default: /* f16 */
            for (int64_t i = 0; i < len; i++) ((uint16_t *)y)[e0 + i] = dfg_f32_to_f16(v[i]);
            break;
        }
    }
    return DFG_OK;
}
