/* nf4_load.c - a Hugging Face weight loaded into a load_in_4bit plan: quantised to NF4 as it
 * loads (bitsandbytes' quantize_4bit, blocksize 64: ops/nf4.c), as transformers quantises a
 * checkpoint with BitsAndBytesConfig(load_in_4bit=True) while loading it.
 *
 * The plan holds the weight "W" as STATEs of role base_model (ops/nn/nn_model.c): "W.nf4" u8
 * (d0, d1/2) (flat for an odd d1), and "W.absmax" f32, or with double quantisation "W.absmax_q"
 * u8, "W.absmax2" f32 and "W.absmax_offset" f32. A file tensor "W" names the packed tensor; its
 * companions are set with it and never come from a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/dfg_ops.h"
#include "../../ops/dtype.h"
#include "../../ops/op.h"
#include "weights_internal.h"

#define NF4_PACKED ".nf4"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

bool dfg_wt_nf4_packed(const dfg_tensor *t) {
    return t && t->role == DFG_ROLE_BASE_MODEL && t->dtype == DFG_U8 && ends_with(t->name, NF4_PACKED);
}

bool dfg_wt_nf4_part(const dfg_tensor *t) {
    static const char *const parts[] = {".absmax", ".absmax_q", ".absmax2", ".absmax_offset"};
    if (!t || t->role != DFG_ROLE_BASE_MODEL) return false;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        if (ends_with(t->name, parts[i])) return true;
    return false;
}

bool dfg_wt_nf4_shape(const dfg_program *p, const dfg_tensor *packed, dfg_shape *shape) {
    for (int g = 0; g < p->n_graphs; g++) /* the dequantisations that read it record the weight's shape */
        for (int i = 0; i < p->graphs[g]->n_nodes; i++) {
            const dfg_node *n = p->graphs[g]->nodes[i];
            if (n->op == DFG_OP_NF4_DEQUANT && n->in[0] == packed) return *shape = n->attr->nf4.shape, true;
        }
    return false;
}

const dfg_tensor *dfg_wt_nf4_for(const dfg_program *p, const char *name) {
    char full[512];
    if (snprintf(full, sizeof(full), "%s" NF4_PACKED, name) >= (int)sizeof(full)) return NULL;
    const dfg_tensor *t = dfg_find(p, full);
    return dfg_wt_nf4_packed(t) ? t : NULL;
}

/* The companion "<weight>.<part>" of packed "<weight>.nf4", or NULL. */
static const dfg_tensor *part_of(const dfg_program *p, const dfg_tensor *packed, const char *part) {
    char name[512];
    size_t stem = strlen(packed->name) - strlen(NF4_PACKED);
    if (stem + strlen(part) + 2 > sizeof(name)) return NULL;
    memcpy(name, packed->name, stem);
    snprintf(name + stem, sizeof(name) - stem, ".%s", part);
    return dfg_find(p, name);
}

dfg_status dfg_wt_nf4_check(dfg_runtime *rt, const char *path, const dfg_st_tensor *f, const dfg_tensor *packed) {
    char fs[96], ps[96];
    int64_t n = dfg_shape_numel(f->shape);
    bool float_file = f->dtype == DFG_F32 || f->dtype == DFG_BF16 || f->dtype == DFG_F16;
    dfg_shape w;
    bool shape_ok = dfg_shape_numel(packed->shape) == dfg_nf4_packed_bytes(n) &&
                    (!dfg_wt_nf4_shape(dfg_runtime_program(rt), packed, &w) || dfg_shape_equal(w, f->shape));
    if (!float_file || !shape_ok)
        return dfg_wt_fail(rt, DFG_ERR_SHAPE, false, "%s: tensor '%s' is %s %s in the file; the plan keeps it in 4 bits as "
                           "'%s' u8 %s (load_in_4bit), which needs a float weight of that many values", path, f->name,
                           f->dtype_name, dfg_shape_str(f->shape, fs, sizeof(fs)), packed->name,
                           dfg_shape_str(packed->shape, ps, sizeof(ps)));
    const dfg_tensor *absmax = part_of(dfg_runtime_program(rt), packed, "absmax"), *q = part_of(dfg_runtime_program(rt), packed, "absmax_q");
    bool dq = q && part_of(dfg_runtime_program(rt), packed, "absmax2") && part_of(dfg_runtime_program(rt), packed, "absmax_offset");
    if (!absmax && !dq) return dfg_wt_fail(rt, DFG_ERR_STATE, false, "%s: the plan's '%s' has no absmax tensors", path, packed->name);
    const dfg_tensor *blocks = dq ? q : absmax;
    if (dfg_shape_numel(blocks->shape) != dfg_nf4_blocks(n))
        return dfg_wt_fail(rt, DFG_ERR_SHAPE, false, "%s: tensor '%s' has %lld values; the plan's '%s' blocks are for %lld",
                           path, f->name, (long long)n, blocks->name, (long long)dfg_shape_numel(blocks->shape) * DFG_NF4_BLOCK);
    return DFG_OK;
}

static dfg_status upload(dfg_runtime *rt, const char *path, const dfg_tensor *t, const void *host) {
    dfg_status s = t ? dfg_runtime_write(rt, t->name, host, dfg_tensor_bytes(t)) : DFG_ERR_STATE;
    if (s) dfg_wt_fail(rt, s, true, "%s: uploading '%s' failed; the runtime's state is now partly loaded", path,
                       t ? t->name : "?");
    return s;
}

dfg_status dfg_wt_nf4_load(dfg_runtime *rt, const char *path, const dfg_st_tensor *f, const dfg_tensor *packed) {
    int64_t n = dfg_shape_numel(f->shape), nb = dfg_nf4_blocks(n);
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1)), *absmax = malloc(sizeof(float) * (size_t)(nb ? nb : 1));
    float *absmax2 = malloc(sizeof(float) * (size_t)(dfg_nf4_dq_blocks(n) + 1)), offset = 0;
    uint8_t *codes = malloc((size_t)dfg_nf4_packed_bytes(n) + 1), *absmax_q = malloc((size_t)nb + 1);
    dfg_status s = DFG_OK;
    if (!x || !absmax || !absmax2 || !codes || !absmax_q)
        s = dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "%s: out of memory quantising '%s'", path, f->name);
    if (!s) {
        size_t es = dfg_dtype_size(f->dtype);
        for (int64_t i = 0; i < n; i++) { /* file data has no alignment guarantee */
            union {
                float f;
                uint16_t h;
            } u;
            memcpy(&u, f->data + (size_t)i * es, es);
            x[i] = (float)dfg_load(&u, f->dtype, 0);
        }
        dfg_nf4_quantize(x, n, codes, absmax);
        s = upload(rt, path, packed, codes);
    }
    const dfg_tensor *q = s ? NULL : part_of(dfg_runtime_program(rt), packed, "absmax_q");
    if (!s && q) {
        dfg_nf4_double_quantize(absmax, nb, absmax_q, absmax2, &offset);
        s = upload(rt, path, q, absmax_q);
        if (!s) s = upload(rt, path, part_of(dfg_runtime_program(rt), packed, "absmax2"), absmax2);
        if (!s) s = upload(rt, path, part_of(dfg_runtime_program(rt), packed, "absmax_offset"), &offset);
    } else if (!s) {
        s = upload(rt, path, part_of(dfg_runtime_program(rt), packed, "absmax"), absmax);
    }
    free(x), free(absmax), free(absmax2), free(codes), free(absmax_q);
    return s;
}
