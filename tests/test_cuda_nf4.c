/* test_cuda_nf4.c - the CUDA NF4 dequantisation (ops/cuda/nf4.cu) against the CPU kernel
 * (ops/cpu/nf4.c), both forms (absmax stored; absmax double-quantised), on fresh random packed
 * bytes, absmax values (zeros among them) and double-quantisation scales:
 *   - through the harness (tests/cuda_harness.h): f32 and bf16 outputs, several schedule seeds,
 *     every output poisoned first. Dequantisation is one f32 product (and, double-quantised, the
 *     absmax rebuilt with two unfused roundings), so f32 is held to equality (tolerances of
 *     1e-300) and bf16 to the one rounding of the CPU's f32 value (2^-8 relative);
 *   - directly, bit for bit, in f32, bf16 and f16: the emulated kernel, the CPU kernel and a
 *     reference written here from the formula (so that an element neither kernel wrote cannot
 *     pass as equal poison), with the grid cut to one SM (8 blocks of 256 threads, 16384 outputs a
 *     pass) so that the larger sizes walk the grid-stride loop several times, and with the packed
 *     bytes 1 byte and the output one element off their alignment (the scalar path).
 * Sizes: 1, 7 (< 8: no vector item), odd ones (the last byte's low nibble unused), partial last
 * blocks (65, 127, 129, 105 as (3, 5, 7)), exact blocks (64, 960 with packed as (24, 20)), and
 * double-quantised weights over more than 256 blocks (40000: 625 blocks, 3 second-level scales;
 * 70001, odd). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/dfg_ops.h"
#include "ops/dtype.h"
#include "ops/nf4.h"

typedef struct {
    dfg_shape shape;        /* the weight's */
    bool dq;                /* double-quantised absmax */
    int64_t packed_rows;    /* > 0: packed as (packed_rows, bytes / packed_rows), as a loader may keep it */
} nf4_case;

static const float code_values[16] = {DFG_NF4_CODE_VALUES};
static const float map_values[256] = {DFG_NF4_DYNAMIC_MAP_VALUES};

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const nf4_case *c = user;
    const int64_t numel = dfg_shape_numel(c->shape), bytes = dfg_nf4_packed_bytes(numel), nb = dfg_nf4_blocks(numel);
    dfg_shape ps = c->packed_rows > 0 ? DFG_SHAPE(c->packed_rows, bytes / c->packed_rows) : DFG_SHAPE(bytes);
    dfg_tensor *packed = dfg_input(g, "packed", DFG_U8, ps), *y;
    if (!c->dq) {
        y = dfg_nf4_dequant(g, packed, dfg_input(g, "absmax", DFG_F32, DFG_SHAPE(nb)), c->shape, dt);
    } else {
        dfg_tensor *q = dfg_input(g, "absmax_q", DFG_U8, DFG_SHAPE(nb));
        dfg_tensor *a2 = dfg_input(g, "absmax2", DFG_F32, DFG_SHAPE(dfg_nf4_dq_blocks(numel)));
        y = dfg_nf4_dequant_dq(g, packed, q, a2, dfg_input(g, "offset", DFG_F32, DFG_SCALAR), c->shape, dt);
    }
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* Input `slot` of the node: packed and absmax_q every byte value; absmax in [0, 3) with one in 8
 * exactly 0 (a block of zeros); absmax2 in [0, 0.5); offset in [0, 1). */
static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const nf4_case *c = user;
    if (t->dtype == DFG_U8) {
        for (int64_t i = 0; i < n; i++) ((uint8_t *)data)[i] = (uint8_t)dfg_test_int(0, 255);
        return;
    }
    float *v = data;
    const float hi = slot == 1 ? 3.0f : slot == 2 ? 0.5f : 1.0f;
    dfg_test_fill_uniform(v, n, 0.0f, hi);
    if (slot == 1 && !c->dq)
        for (int64_t i = 0; i < n; i++)
            if (dfg_test_int(0, 7) == 0) v[i] = 0.0f;
}

static void label_of(const nf4_case *c, char *buf, size_t len) {
    char s[64];
    snprintf(buf, len, "nf4_dequant%s %s%s", c->dq ? " (double quant)" : "", dfg_shape_str(c->shape, s, sizeof(s)),
             c->packed_rows > 0 ? " packed 2-D" : "");
}

static void run_harness(const nf4_case *c) {
    char label[128];
    label_of(c, label, sizeof(label));
    cuda_case k = {.label = label, .build = build, .user = (void *)c, .fill = fill, .bf16 = true, .rtol = 1e-300,
                   .atol = 1e-300, .rtol_bf16 = 1.0 / 256.0, .atol_bf16 = 1e-300};
    cuda_check(&k);
}

/* ---------------------------------------------------------------- bit for bit, all three dtypes */
/* y (numel) of dtype dt from the formula, as bytes */
static void reference(const nf4_case *c, void *const *in, dfg_dtype dt, void *y) {
    const int64_t numel = dfg_shape_numel(c->shape);
    const uint8_t *packed = in[0];
    for (int64_t i = 0; i < numel; i++) {
        const int64_t b = i / 64;
        float s;
        if (c->dq) {
            const float scaled = map_values[((const uint8_t *)in[1])[b]] * ((const float *)in[2])[b / 256];
            s = scaled + ((const float *)in[3])[0];
        } else {
            s = ((const float *)in[1])[b];
        }
        const unsigned q = i % 2 ? packed[i / 2] & 15u : packed[i / 2] >> 4u;
        dfg_store(y, dt, i, code_values[q] * s);
    }
}

static void run_direct(const nf4_case *c, dfg_dtype dt, bool misalign) {
    char base[128], label[192];
    label_of(c, base, sizeof(base));
    snprintf(label, sizeof(label), "%s (%s%s, direct)", base, dfg_dtype_name(dt), misalign ? ", misaligned" : "");
    dfg_program *p = NULL;
    dfg_node *n = cuda_node_alone(build, (void *)c, dt, label, &p);
    if (!n) return;
    unsigned char *blocks[4] = {0};
    void *in[4];
    for (int j = 0; j < n->n_in; j++) {
        const int64_t cnt = dfg_tensor_numel(n->in[j]);
        blocks[j] = malloc(dfg_tensor_bytes(n->in[j]) + 16);
        in[j] = blocks[j] + (misalign && j == 0 ? 1 : 0); /* packed off its 4-byte alignment */
        fill(j, n->in[j], in[j], cnt, (void *)c);
    }
    const size_t bytes = dfg_tensor_bytes(n->out[0]), elem = dfg_dtype_size(dt);
    unsigned char *want = malloc(bytes), *cpu = malloc(bytes), *emu_block = malloc(bytes + 16);
    unsigned char *emu = emu_block + (misalign ? elem : 0); /* y off its 16-byte alignment */
    dfg_test_poison(cpu, bytes);
    dfg_test_poison(emu, bytes);
    reference(c, in, dt, want);
    void *cpu_out[1] = {cpu}, *emu_out[1] = {emu};
    const bool ran = cuda_run_cpu(label, n, in, cpu_out) && cuda_run_emulated(label, n, in, emu_out, 1, dfg_test_u64() | 1) == 0;
    if (ran) {
        CHECK(!memcmp(cpu, want, bytes), "%s: the CPU kernel differs from the formula", label);
        CHECK(!memcmp(emu, want, bytes), "%s: the emulated CUDA kernel differs from the formula", label);
        for (size_t i = 0; i < bytes / elem && memcmp(emu, want, bytes); i++)
            if (memcmp(emu + i * elem, want + i * elem, elem)) {
                CHECK(false, "%s: first difference at element %zu: CUDA %g, formula %g", label, i, dfg_load(emu, dt, (int64_t)i),
                      dfg_load(want, dt, (int64_t)i));
                break;
            }
    }
    free(want), free(cpu), free(emu_block);
    for (int j = 0; j < n->n_in; j++) free(blocks[j]);
    dfg_program_free(p);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_nf4")) return DFG_TEST_SKIP;
    const nf4_case cases[] = {
        {DFG_SHAPE(1), false, 0},         {DFG_SHAPE(7), false, 0},        {DFG_SHAPE(64), false, 0},
        {DFG_SHAPE(65), false, 0},        {DFG_SHAPE(127), false, 0},      {DFG_SHAPE(129), false, 0},
        {DFG_SHAPE(3, 5, 7), false, 0},   {DFG_SHAPE(24, 40), false, 24},  {DFG_SHAPE(40000), false, 0},
        {DFG_SHAPE(1), true, 0},          {DFG_SHAPE(63), true, 0},        {DFG_SHAPE(3, 67), true, 0},
        {DFG_SHAPE(40000), true, 0},      {DFG_SHAPE(70001), true, 0},     {DFG_SHAPE(100, 256), true, 100},
    };
    const int n_cases = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < n_cases; i++) run_harness(&cases[i]);
    const dfg_dtype dts[] = {DFG_F32, DFG_BF16, DFG_F16};
    for (int i = 0; i < n_cases; i++)
        for (int d = 0; d < 3; d++) {
            run_direct(&cases[i], dts[d], false);
            if (d == (i % 3)) run_direct(&cases[i], dts[d], true);
        }
    return cuda_test_end();
}
