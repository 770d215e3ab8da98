/* nf4_dump.c - the dfg side of the NF4 golden test (tests/golden/nf4_golden.py).
 *
 *   nf4_dump IN OUT      quantise the f32 values of IN (raw little-endian, numel = its size / 4)
 *   nf4_dump --map OUT   dfg's dynamic map (256 f32), read back through the op
 *
 * For IN, writes raw little-endian files OUT.<name>, each through dfg's public calls:
 *   packed (ceil(n/2)) u8, absmax (nb) f32          dfg_nf4_quantize
 *   absmax_q (nb) u8, absmax2 (ceil(nb/256)) f32,   dfg_nf4_double_quantize of absmax
 *   offset (1) f32
 *   deq (n) f32                                      dfg_nf4_dequant(packed, absmax) on the CPU runtime
 *   deq_dq (n) f32                                   dfg_nf4_dequant_dq(packed, absmax_q, absmax2, offset)
 * --map runs dfg_nf4_dequant_dq on 256 blocks whose codes are all 15 (the value 1.0), absmax_q[b] =
 * b, absmax2 1 and offset 0, so element 64 b is map[b] * 1 + 0 = map[b]: the map dfg dequantises
 * with, whatever table it keeps, for the test to compare with bitsandbytes' create_dynamic_map.
 * Any failure prints one line and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"

#define GOLDEN_DRIVER "nf4_dump"
#include "golden_dump.h"

static bool write_file(const char *out, const char *name, const void *data, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof(path), "%s.%s", out, name);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(data, 1, bytes, f) == bytes;
    if (f) ok = fclose(f) == 0 && ok;
    if (!ok) fail("cannot write %s", path);
    return ok;
}

/* Both dequantisations of an n-element weight, f32, into deq and deq_dq (either may be NULL) on
 * the CPU runtime. */
static bool dequantize(int64_t n, const uint8_t *packed, const float *absmax, const uint8_t *absmax_q,
                       const float *absmax2, float offset, float *deq, float *deq_dq) {
    const int64_t nb = dfg_nf4_blocks(n);
    dfg_program *p = dfg_program_new("nf4_dump");
    dfg_graph *g = dfg_graph_new(p, "dequant");
    dfg_tensor *pk = dfg_const(p, "w.nf4", DFG_U8, DFG_SHAPE(dfg_nf4_packed_bytes(n)), packed);
    if (deq) dfg_output(g, dfg_nf4_dequant(g, pk, dfg_const(p, "w.absmax", DFG_F32, DFG_SHAPE(nb), absmax),
                                           DFG_SHAPE(n), DFG_F32), "deq");
    if (deq_dq) {
        dfg_tensor *q = dfg_const(p, "w.absmax_q", DFG_U8, DFG_SHAPE(nb), absmax_q);
        dfg_tensor *a2 = dfg_const(p, "w.absmax2", DFG_F32, DFG_SHAPE(dfg_nf4_dq_blocks(n)), absmax2);
        dfg_tensor *off = dfg_const(p, "w.absmax_offset", DFG_F32, DFG_SCALAR, &offset);
        dfg_output(g, dfg_nf4_dequant_dq(g, pk, q, a2, off, DFG_SHAPE(n), DFG_F32), "deq_dq");
    }
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_program_status(p);
    if (st) fail("building: %s", dfg_program_error(p));
    if (!st) st = dfg_stage_graph(p, g, 1);
    dfg_run_options o = dfg_run_options_default();
    if (!st && (st = dfg_runtime_create(p, &o, &rt))) fail("runtime: %s", dfg_runtime_error(rt));
    if (!st && (st = dfg_runtime_step(rt))) fail("step: %s", dfg_runtime_error(rt));
    if (!st && deq && (st = dfg_runtime_read(rt, "deq", deq, sizeof(float) * (size_t)n))) fail("read deq");
    if (!st && deq_dq && (st = dfg_runtime_read(rt, "deq_dq", deq_dq, sizeof(float) * (size_t)n))) fail("read deq_dq");
    dfg_runtime_free(rt);
    dfg_program_free(p);
    return st == DFG_OK;
}

static int dump_map(const char *out) {
    enum { NB = 256, N = NB * DFG_NF4_BLOCK };
    static uint8_t packed[N / 2], q[NB];
    static float deq[N];
    memset(packed, 0xff, sizeof(packed));
    for (int b = 0; b < NB; b++) q[b] = (uint8_t)b;
    const float one = 1.0f;
    if (!dequantize(N, packed, NULL, q, &one, 0.0f, NULL, deq)) return 1;
    float map[NB];
    for (int b = 0; b < NB; b++) map[b] = deq[b * DFG_NF4_BLOCK];
    return write_file(out, "map", map, sizeof(map)) ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--map")) return dump_map(argv[2]);
    if (argc != 3) return fail("usage: nf4_dump IN OUT | nf4_dump --map OUT");
    FILE *f = fopen(argv[1], "rb");
    if (!f) return fail("cannot open %s", argv[1]);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    const int64_t n = size / 4;
    if (n <= 0 || size % 4) {
        fclose(f);
        return fail("%s: %ld bytes is no f32 array", argv[1], size);
    }
    const int64_t nb = dfg_nf4_blocks(n), nb2 = dfg_nf4_dq_blocks(n), bytes = dfg_nf4_packed_bytes(n);
    float *x = malloc(sizeof(float) * (size_t)n), *absmax = malloc(sizeof(float) * (size_t)nb);
    float *absmax2 = malloc(sizeof(float) * (size_t)nb2), *deq = malloc(sizeof(float) * (size_t)n);
    float *deq_dq = malloc(sizeof(float) * (size_t)n), offset = 0.0f;
    uint8_t *packed = malloc((size_t)bytes), *q = malloc((size_t)nb);
    int rc = 1;
    if (fread(x, sizeof(float), (size_t)n, f) != (size_t)n) {
        fail("cannot read %s", argv[1]);
    } else {
        dfg_nf4_quantize(x, n, packed, absmax);
        dfg_nf4_double_quantize(absmax, nb, q, absmax2, &offset);
        const char *out = argv[2];
        if (dequantize(n, packed, absmax, q, absmax2, offset, deq, deq_dq) && write_file(out, "packed", packed, (size_t)bytes) &&
            write_file(out, "absmax", absmax, sizeof(float) * (size_t)nb) && write_file(out, "absmax_q", q, (size_t)nb) &&
            write_file(out, "absmax2", absmax2, sizeof(float) * (size_t)nb2) &&
            write_file(out, "offset", &offset, sizeof(float)) && write_file(out, "deq", deq, sizeof(float) * (size_t)n) &&
            write_file(out, "deq_dq", deq_dq, sizeof(float) * (size_t)n))
            rc = 0;
    }
    fclose(f);
    free(x), free(absmax), free(absmax2), free(deq), free(deq_dq), free(packed), free(q);
    return rc;
}
