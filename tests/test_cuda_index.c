/* test_cuda_index.c - the CUDA embed, embed_bwd, take and take_bwd (ops/cuda/index.cu) against
 * the CPU kernels (tests/cuda_harness.h): tables whose rows are and are not multiples of 16 bytes,
 * embed_bwd with repeated ids over several blocks of vocabulary rows and of columns, with and
 * without the accumulator input. Then, outside the harness (f32, exact): embed_bwd bit-identical
 * to the CPU's sums in position order, pointers off 16-byte alignment, and ids out of range, which
 * the CPU refuses and the CUDA kernels must flag while writing zeros (embed, take, take_bwd) or
 * skipping them (embed_bwd). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/dfg_ops.h"

typedef struct {
    int op;
    int64_t V, C;   /* table (V, C); take: x (..., V) */
    dfg_shape ids;  /* the indices' shape */
    bool acc;       /* embed_bwd: with the accumulator input */
    int bad_every;  /* raw: every bad_every-th id out of range (0: none) */
} ix_case;

static dfg_shape with_dim(dfg_shape s, int64_t d) {
    s.d[s.rank++] = d;
    return s;
}

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const ix_case *c = user;
    dfg_tensor *ids = dfg_input(g, "ids", DFG_I32, c->ids), *y = NULL;
    switch (c->op) {
    case DFG_OP_EMBED: y = dfg_embed(g, dfg_input(g, "w", dt, DFG_SHAPE(c->V, c->C)), ids); break;
    case DFG_OP_TAKE: y = dfg_take(g, dfg_input(g, "x", dt, with_dim(c->ids, c->V)), ids); break;
    case DFG_OP_TAKE_BWD: {
        dfg_attrs a = {.scatter = {c->V}};
        y = dfg_op_out(g, DFG_OP_TAKE_BWD, (dfg_tensor *[]){dfg_input(g, "dy", dt, c->ids), ids}, 2, &a);
        break;
    }
    default: {
        dfg_attrs a = {.scatter = {c->V}};
        dfg_tensor *in[3] = {dfg_input(g, "dy", dt, with_dim(c->ids, c->C)), ids, NULL};
        if (c->acc)
            in[2] = dfg_state(dfg_graph_program(g), "acc", dt, DFG_SHAPE(c->V, c->C), DFG_ROLE_GRAD, dfg_init_zeros());
        dfg_node *n = dfg_node_add(g, DFG_OP_EMBED_BWD, in, c->acc ? 3 : 2, &a, 1);
        return dfg_graph_status(g) ? NULL : n;
    }
    }
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* ids in [0, V) (some out of range in raw cases); floats uniform */
static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const ix_case *c = user;
    (void)slot;
    if (cuda_fill_floats(t, data, n)) return;
    int32_t *ids = data;
    for (int64_t i = 0; i < n; i++) {
        ids[i] = dfg_test_int(0, (int)c->V - 1);
        if (c->bad_every && i % c->bad_every == 1) ids[i] = i % 2 ? (int32_t)c->V + dfg_test_int(0, 3) : -1 - dfg_test_int(0, 3);
    }
}

static void run(ix_case c) {
    char label[160], s1[64];
    snprintf(label, sizeof(label), "%s V %lld C %lld ids%s%s", dfg_op_name(c.op), (long long)c.V, (long long)c.C,
             dfg_shape_str(c.ids, s1, sizeof(s1)), c.acc ? " +acc" : "");
    cuda_case k = {.label = label, .build = build, .user = &c, .fill = fill, .bf16 = true};
    cuda_check(&k);
}

/* ---------------------------------------------------------------- raw, f32, exact */
/* The f32 node of c with every pointer `shift` bytes past a 16-byte boundary. With bad ids the
 * expected output is computed here (the CPU refuses them): what the CPU writes for the good ids,
 * zeros for the bad ones (embed, take, take_bwd), nothing for them (embed_bwd); the flag must be up
 * exactly when an id is bad. Outputs must equal the expectation bit for bit. */
static void raw_check(ix_case c, size_t shift) {
    char label[160], s1[64];
    snprintf(label, sizeof(label), "%s V %lld C %lld ids%s%s (raw, +%zu bytes, bad every %d)", dfg_op_name(c.op),
             (long long)c.V, (long long)c.C, dfg_shape_str(c.ids, s1, sizeof(s1)), c.acc ? " +acc" : "", shift,
             c.bad_every);
    dfg_program *p;
    dfg_node *n = cuda_node_alone(build, &c, DFG_F32, label, &p);
    if (!n) return;
    void *cin[3] = {0}, *ein[3] = {0}, *blocks[4];
    const int64_t cnt = dfg_shape_numel(c.ids);
    for (int j = 0; j < n->n_in; j++) {
        size_t bytes = dfg_tensor_bytes(n->in[j]);
        cin[j] = malloc(bytes);
        fill(j, n->in[j], cin[j], dfg_tensor_numel(n->in[j]), &c);
        blocks[j] = aligned_alloc(16, (bytes + shift + 16) / 16 * 16);
        ein[j] = (char *)blocks[j] + shift;
        memcpy(ein[j], cin[j], bytes);
    }
    const size_t ob = dfg_tensor_bytes(n->out[0]);
    float *want = malloc(ob), *got;
    if (c.acc) {
        got = ein[2]; /* in place over the accumulator */
        blocks[3] = NULL;
    } else {
        blocks[3] = aligned_alloc(16, (ob + shift + 16) / 16 * 16);
        got = (float *)((char *)blocks[3] + shift);
        dfg_test_poison(got, ob);
    }
    /* the expectation: the CPU's kernel on the ids made good, then the bad ids' effect replaced */
    int32_t *ids = cin[1], *good = malloc(sizeof(int32_t) * (size_t)(cnt ? cnt : 1));
    bool any_bad = false;
    for (int64_t i = 0; i < cnt; i++) {
        bool bad = ids[i] < 0 || ids[i] >= c.V;
        any_bad = any_bad || bad;
        good[i] = bad ? 0 : ids[i];
    }
    float *dy = cin[0];
    if (c.op == DFG_OP_EMBED_BWD) /* a bad id adds nothing: its dy row as +0s, added to row 0 */
        for (int64_t i = 0; i < cnt; i++)
            if (good[i] != ids[i]) memset(dy + i * c.C, 0, sizeof(float) * (size_t)c.C);
    void *cin2[3] = {cin[0], good, c.acc ? want : NULL}, *cout[1] = {want};
    if (c.acc) memcpy(want, cin[2], ob);
    cuda_run_cpu(label, n, cin2, cout);
    for (int64_t i = 0; i < cnt; i++) {
        if (good[i] == ids[i]) continue;
        if (c.op == DFG_OP_EMBED) memset(want + i * c.C, 0, sizeof(float) * (size_t)c.C);
        if (c.op == DFG_OP_TAKE) want[i] = 0.0f;
        if (c.op == DFG_OP_TAKE_BWD) memset(want + i * c.V, 0, sizeof(float) * (size_t)c.V);
    }
    void *eout[1] = {got};
    const int flags = cuda_run_emulated(label, n, ein, eout, 132, dfg_test_u64() | 1);
    CHECK((flags != 0) == any_bad, "%s: flag %d with%s bad ids", label, flags, any_bad ? "" : " no");
    int64_t total = (int64_t)(ob / sizeof(float)), bad = -1;
    for (int64_t i = 0; i < total && bad < 0; i++)
        if (memcmp(&want[i], &got[i], sizeof(float))) bad = i;
    CHECK(bad < 0, "%s: element %lld: want %.9g, CUDA %.9g", label, (long long)bad, bad < 0 ? 0.0 : want[bad],
          bad < 0 ? 0.0 : got[bad]);
    for (int j = 0; j < n->n_in; j++) free(cin[j]), free(blocks[j]);
    free(blocks[3]), free(want), free(good);
    dfg_program_free(p);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_index")) return DFG_TEST_SKIP;
    /* tables: one element, odd rows (element copies), 16-byte rows, long rows */
    const struct {
        int64_t V, C;
        dfg_shape ids;
    } tb[] = {{1, 1, DFG_SHAPE(1)},       {5, 3, DFG_SHAPE(3, 17)},  {50, 64, DFG_SHAPE(2, 3, 5)},
              {7, 1030, DFG_SHAPE(9)},    {300, 8, DFG_SHAPE(40)},   {3, 2048, DFG_SHAPE(2, 2)}};
    for (size_t i = 0; i < sizeof(tb) / sizeof(tb[0]); i++) {
        run((ix_case){DFG_OP_EMBED, tb[i].V, tb[i].C, tb[i].ids, false, 0});
        run((ix_case){DFG_OP_EMBED_BWD, tb[i].V, tb[i].C, tb[i].ids, false, 0});
        run((ix_case){DFG_OP_EMBED_BWD, tb[i].V, tb[i].C, tb[i].ids, true, 0});
    }
    /* embed_bwd: many repeats of few ids; more rows than one block's (12 to 32), more columns
     * (1024), more ids than one tile (256) */
    const struct {
        int64_t V, C;
        dfg_shape ids;
    } eb[] = {{3, 5, DFG_SHAPE(600)}, {40, 1500, DFG_SHAPE(3, 100)}, {100, 33, DFG_SHAPE(1000)},
              {70, 100, DFG_SHAPE(257)}};
    for (size_t i = 0; i < sizeof(eb) / sizeof(eb[0]); i++)
        for (int acc = 0; acc < 2; acc++) run((ix_case){DFG_OP_EMBED_BWD, eb[i].V, eb[i].C, eb[i].ids, acc, 0});
    /* take and take_bwd: vocabularies with 16-byte rows (8: both dtypes) and without */
    const struct {
        int64_t V;
        dfg_shape rows;
    } tk[] = {{1, DFG_SHAPE(1)}, {7, DFG_SHAPE(3, 5)}, {8, DFG_SHAPE(33)}, {64, DFG_SHAPE(2, 9)}, {1027, DFG_SHAPE(4)},
              {4096, DFG_SHAPE(3)}};
    for (size_t i = 0; i < sizeof(tk) / sizeof(tk[0]); i++) {
        run((ix_case){DFG_OP_TAKE, tk[i].V, 0, tk[i].rows, false, 0});
        run((ix_case){DFG_OP_TAKE_BWD, tk[i].V, 0, tk[i].rows, false, 0});
    }
    /* raw: exact, misaligned, bad ids */
    for (int bad = 0; bad <= 3; bad += 3)
        for (size_t shift = 0; shift <= 4; shift += 4) {
            raw_check((ix_case){DFG_OP_EMBED, 50, 64, DFG_SHAPE(2, 30), false, bad}, shift);
            raw_check((ix_case){DFG_OP_EMBED, 5, 3, DFG_SHAPE(20), false, bad}, shift);
            raw_check((ix_case){DFG_OP_EMBED_BWD, 40, 1500, DFG_SHAPE(300), false, bad}, shift);
            raw_check((ix_case){DFG_OP_EMBED_BWD, 6, 33, DFG_SHAPE(700), true, bad}, shift);
            raw_check((ix_case){DFG_OP_TAKE, 64, 0, DFG_SHAPE(9), false, bad}, shift);
            raw_check((ix_case){DFG_OP_TAKE_BWD, 64, 0, DFG_SHAPE(9), false, bad}, shift);
            raw_check((ix_case){DFG_OP_TAKE_BWD, 7, 0, DFG_SHAPE(10), false, bad}, shift);
        }
    return cuda_test_end();
}
