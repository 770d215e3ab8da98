/* test_cuda_sample.c - the CUDA sampler (ops/cuda/sample.cu) draws exactly the CPU's tokens
 * (tests/cuda_harness.h compares integer outputs exactly) and advances the RNG state as the CPU:
 * many rows and random RNG states (key and counter, the counter's carry into its high word);
 * greedy (temperature 0 and < 0); temperatures hot, cold and tiny (most weights underflow);
 * top-k of 1, a few, V - 1, V and beyond; vocabularies of 1, odd sizes, one block (256) and one
 * past it, not a multiple of 32 and larger than a block (5003, 50257), a multiple of the
 * 16-byte vector (the vectorized lane loads); logits with many ties (top-k's threshold shared
 * by several tokens, the first maximum), masked (-inf) entries, all -inf rows; f32 and bf16;
 * the 3-input form (dfg_sample_rows: row0, the batch index of the first row, read from device
 * memory; random, and near INT32_MAX so row0 + r passes 2^31; or one index per row, the rows
 * of a batch gathered in any order). Beyond the harness: logits
 * starting one element past an aligned address (the scalar loads), a NaN row sets the device
 * flag, and the emulated kernel on rows [row0, row0 + n) of a batch with row0 draws the CPU's
 * whole-batch tokens for those rows. rng_advance (a decode loop's skipped draws) moves the
 * counter as the CPU: by 0, 1, a few, past the low word's carry and by more than 2^32. TRL's
 * settings (dfg_sample_with): top_p alone (hot and cold, near 1, on ties: whole tie groups kept),
 * min_p alone, both with top_k, the repetition penalty above and below 1 (random histories with
 * ids outside the vocabulary and the skipped id, history_len below 0, inside and past H), greedy
 * with the penalty, and each with the sampling log-probs (the CPU's within 1e-5). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"

typedef enum { LOGITS_UNIFORM, LOGITS_TIES, LOGITS_MASKED, LOGITS_WIDE } logits_kind;

typedef struct {
    int64_t rows, v;
    float temperature;
    int top_k;
    logits_kind kind;
    bool rank3; /* logits (2, rows / 2, V) */
    int row0;   /* the 3-input form, dfg_sample_rows: 1 an i32 scalar row0 (input 2), 2 one row index a row */
    /* dfg_sample_with: TRL's settings (0: off); penalty != 0 adds a history (HIST ids a row; its
     * length one for every row, or with row0 2 one a row) */
    float top_p, min_p, penalty;
    bool logp; /* the third output, the sampling log-probs */
} sample_case;

enum { HIST = 24, HIST_SKIP = 3 }; /* the penalty's history: ids a row, and the id never counted */

static dfg_node *build_sample(dfg_graph *g, dfg_dtype dt, void *user) {
    const sample_case *k = user;
    dfg_shape s = k->rank3 ? DFG_SHAPE(2, k->rows / 2, k->v) : DFG_SHAPE(k->rows, k->v);
    dfg_tensor *rng = dfg_state(g->program, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros());
    dfg_tensor *row0 = k->row0 ? dfg_input(g, "row0", DFG_I32, k->row0 == 2 ? DFG_SHAPE(k->rows) : DFG_SCALAR) : NULL;
    dfg_tensor *lp, *tok;
    dfg_sample_io io = {.row0 = row0, .history_skip = HIST_SKIP, .logp = k->logp ? &lp : NULL};
    if (k->penalty != 0.0f)
        io.history = dfg_input(g, "history", DFG_I32, DFG_SHAPE(k->rows, HIST)),
        io.history_len = dfg_input(g, "history_len", DFG_I32, k->row0 == 2 ? DFG_SHAPE(k->rows) : DFG_SCALAR);
    const dfg_sampling set = {k->temperature, k->top_k, k->top_p, k->min_p, k->penalty};
    tok = dfg_sample_with(g, dfg_input(g, "logits", dt, s), rng, &set, &io);
    return dfg_graph_status(g) ? NULL : tok->producer;
}

/* logits by kind (values exact in bf16 where ties matter); the RNG state: random key and
 * counter, sometimes a low word about to carry; row0: random, sometimes near INT32_MAX (row0 + r
 * is a 64-bit row index on both sides, never an i32 that wraps) */
static void fill_sample(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const sample_case *k = user;
    if (slot == 3) { /* ids of the vocabulary, some outside it, some the skipped one */
        int32_t *id = data;
        for (int64_t i = 0; i < n; i++) id[i] = dfg_test_int(0, 7) == 0 ? HIST_SKIP : dfg_test_int(-2, (int)k->v + 1);
        return;
    }
    if (slot == 4) { /* history_len (one, or one a row): below 0, 0 .. HIST, past it */
        for (int64_t i = 0; i < n; i++) ((int32_t *)data)[i] = dfg_test_int(-1, HIST + 3);
        return;
    }
    if (slot == 2) {
        int32_t *r0 = data; /* per row: any indices, in any order, repeats allowed */
        for (int64_t i = 0; i < n; i++)
            r0[i] = dfg_test_int(0, 3) == 0 ? INT32_MAX - dfg_test_int(0, 2) : dfg_test_int(1, 100000);
        return;
    }
    if (slot == 1) {
        int32_t *s = data;
        for (int i = 0; i < 4; i++) s[i] = (int32_t)(uint32_t)dfg_test_u64();
        if (dfg_test_int(0, 3) == 0) s[2] = -1; /* 0x...FFFFFFFF: the next counter carries */
        return;
    }
    float *x = data;
    (void)t;
    for (int64_t i = 0; i < n; i++) {
        switch (k->kind) {
        case LOGITS_UNIFORM: x[i] = dfg_test_uniform(-2.0f, 2.0f); break;
        case LOGITS_TIES: x[i] = 0.5f * (float)dfg_test_int(-4, 4); break;
        case LOGITS_MASKED: x[i] = dfg_test_int(0, 2) ? dfg_test_uniform(-3.0f, 3.0f) : -INFINITY; break;
        case LOGITS_WIDE: x[i] = dfg_test_uniform(-40.0f, 40.0f); break;
        }
    }
    if (k->kind == LOGITS_MASKED && n >= 2 * k->v) /* row 1 all masked: its first token */
        for (int64_t j = 0; j < k->v; j++) x[k->v + j] = -INFINITY;
}

static void check_sample(const sample_case *k, int repeats) {
    static const char *kinds[] = {"uniform", "ties", "masked", "wide"};
    char label[160];
    snprintf(label, sizeof(label), "sample rows %lld V %lld T %g top_k %d top_p %g min_p %g penalty %g %s%s%s%s",
             (long long)k->rows, (long long)k->v, (double)k->temperature, k->top_k, (double)k->top_p, (double)k->min_p,
             (double)k->penalty, kinds[k->kind], k->rank3 ? " rank 3" : "",
             k->row0 == 2 ? " row per row" : k->row0 ? " row0" : "", k->logp ? " logp" : "");
    for (int i = 0; i < repeats; i++) { /* fresh logits and RNG state each time */
        cuda_case c = {.label = label, .build = build_sample, .user = (void *)k, .fill = fill_sample, .bf16 = true,
                       .seeds = 1};
        cuda_check(&c);
    }
}

/* ---------------------------------------------------------------- direct runs */
/* The emulated kernel on logits at `shift` elements past an aligned address (f32), against the
 * CPU on the same values; a NaN at (nan_row, 3) when nan_row >= 0: the flag must be set and the
 * other rows' tokens still the CPU's. */
static void check_direct(sample_case k, int shift, int64_t nan_row) {
    dfg_program *p;
    dfg_node *n = cuda_node_alone(build_sample, &k, DFG_F32, "direct sample", &p);
    if (!n) return;
    int64_t cnt = k.rows * k.v;
    float *src = malloc(sizeof(float) * (size_t)cnt), *blk = malloc(sizeof(float) * (size_t)(cnt + shift + 4));
    float *x = blk + shift;
    int32_t rng[4], rng_cpu[4], rng_gpu[4];
    fill_sample(0, n->in[0], src, cnt, &k);
    fill_sample(1, n->in[1], rng, 4, &k);
    memcpy(x, src, sizeof(float) * (size_t)cnt);
    int32_t *tok_cpu = malloc(sizeof(int32_t) * (size_t)k.rows), *tok_gpu = malloc(sizeof(int32_t) * (size_t)k.rows);
    /* the CPU, row by row where a NaN would stop it: rows alone then give its tokens */
    memcpy(rng_cpu, rng, sizeof(rng));
    cuda_run_cpu("CPU sample", n, (void *[]){src, rng_cpu}, (void *[]){tok_cpu, rng_cpu});
    if (nan_row >= 0) x[nan_row * k.v + 3] = NAN;
    memcpy(rng_gpu, rng, sizeof(rng));
    dfg_test_poison(tok_gpu, sizeof(int32_t) * (size_t)k.rows);
    const int flags =
        cuda_run_emulated("emulated sample", n, (void *[]){x, rng_gpu}, (void *[]){tok_gpu, rng_gpu}, 132, 5);
    int differ = 0;
    for (int64_t r = 0; r < k.rows; r++) differ += r != nan_row && tok_cpu[r] != tok_gpu[r];
    CHECK(differ == 0, "sample V %lld shifted %d: %d of %lld rows drew another token than the CPU", (long long)k.v, shift,
          differ, (long long)k.rows);
    CHECK(memcmp(rng_cpu, rng_gpu, sizeof(rng)) == 0, "the RNG state advanced differently");
    CHECK(nan_row < 0 ? flags == 0 : flags != 0, "a NaN in row %lld: device flag %d", (long long)nan_row, flags);
    if (nan_row >= 0) CHECK(tok_gpu[nan_row] == 0, "the NaN row's token: %d", tok_gpu[nan_row]);
    free(src), free(blk), free(tok_cpu), free(tok_gpu);
    dfg_program_free(p);
}

/* The emulated 3-input kernel on rows [row0, row0 + n) of a batch of `rows` (f32), against the
 * CPU's 2-input kernel on the whole batch: the same tokens for those rows, the same RNG state. */
static void check_rows(sample_case k, int64_t row0, int64_t n) {
    sample_case ks = k;
    ks.rows = n, ks.row0 = 1;
    dfg_program *p = dfg_program_new("whole"), *q = dfg_program_new("part"); /* each has its "rng" */
    dfg_node *whole = build_sample(dfg_graph_new(p, "g"), DFG_F32, &k);
    dfg_node *part = build_sample(dfg_graph_new(q, "g"), DFG_F32, &ks);
    CHECK(whole && part && part->n_in == 3, "sample nodes: %s / %s", dfg_program_error(p), dfg_program_error(q));
    if (!whole || !part) {
        dfg_program_free(p), dfg_program_free(q);
        return;
    }
    int64_t cnt = k.rows * k.v;
    float *x = malloc(sizeof(float) * (size_t)cnt);
    int32_t rng[4], rng_cpu[4], rng_gpu[4], r0 = (int32_t)row0;
    fill_sample(0, whole->in[0], x, cnt, &k);
    fill_sample(1, whole->in[1], rng, 4, &k);
    int32_t *tok_cpu = malloc(sizeof(int32_t) * (size_t)k.rows), *tok_gpu = malloc(sizeof(int32_t) * (size_t)n);
    memcpy(rng_cpu, rng, sizeof(rng));
    cuda_run_cpu("CPU sample", whole, (void *[]){x, rng_cpu}, (void *[]){tok_cpu, rng_cpu});
    memcpy(rng_gpu, rng, sizeof(rng));
    dfg_test_poison(tok_gpu, sizeof(int32_t) * (size_t)n);
    const int flags = cuda_run_emulated("emulated sample", part, (void *[]){x + row0 * k.v, rng_gpu, &r0},
                                        (void *[]){tok_gpu, rng_gpu}, 132, 0);
    CHECK(flags == 0, "emulated sample: flags %d", flags);
    int differ = 0;
    for (int64_t r = 0; r < n; r++) differ += tok_gpu[r] != tok_cpu[row0 + r];
    CHECK(differ == 0, "sample rows [%lld, %lld) of %lld, V %lld: %d rows drew another token than the whole batch's",
          (long long)row0, (long long)(row0 + n), (long long)k.rows, (long long)k.v, differ);
    CHECK(memcmp(rng_cpu, rng_gpu, sizeof(rng)) == 0, "the RNG state advanced differently");
    free(x), free(tok_cpu), free(tok_gpu);
    dfg_program_free(p), dfg_program_free(q);
}

/* ---------------------------------------------------------------- rng_advance */
static dfg_node *build_advance(dfg_graph *g, dfg_dtype dt, void *user) {
    (void)dt;
    dfg_tensor *rng = dfg_state(g->program, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros());
    dfg_tensor *out = dfg_rng_advance(g, rng, *(const int64_t *)user);
    return dfg_graph_status(g) ? NULL : out->producer;
}

/* a random key and counter, the low word sometimes about to carry */
static void fill_advance(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    (void)slot, (void)t, (void)n, (void)user;
    int32_t *s = data;
    for (int i = 0; i < 4; i++) s[i] = (int32_t)(uint32_t)dfg_test_u64();
    if (dfg_test_int(0, 1)) s[2] = -1 - dfg_test_int(0, 3);
}

static void check_advance(void) {
    static const int64_t by[] = {0, 1, 7, 256, 4294967295LL, 4294967296LL + 5};
    for (size_t i = 0; i < sizeof(by) / sizeof(by[0]); i++) {
        char label[64];
        snprintf(label, sizeof(label), "rng_advance by %lld", (long long)by[i]);
        cuda_case c = {.label = label, .build = build_advance, .user = (void *)&by[i], .fill = fill_advance, .seeds = 1};
        cuda_check(&c);
    }
}

int main(void) {
    if (!cuda_test_begin("test_cuda_sample")) return DFG_TEST_SKIP;
    check_advance();
    const sample_case cases[] = {
        /* greedy */
        {16, 50, 0.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},   {16, 33, -1.0f, 5, LOGITS_TIES, false, false, 0, 0, 0, false},
        {4, 5003, 0.0f, 0, LOGITS_TIES, false, false, 0, 0, 0, false},     {6, 1, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},
        /* full vocabulary, temperatures */
        {64, 7, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},    {64, 33, 0.7f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},
        {32, 256, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},  {32, 257, 2.5f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},
        {16, 1000, 1.0f, 0, LOGITS_WIDE, false, false, 0, 0, 0, false},    {16, 1000, 1e-3f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},
        {16, 4096, 1.0f, 0, LOGITS_UNIFORM, true, false, 0, 0, 0, false},  {12, 5003, 0.8f, 0, LOGITS_MASKED, false, false, 0, 0, 0, false},
        {8, 5003, 1.0f, 0, LOGITS_TIES, false, false, 0, 0, 0, false},     {4, 50257, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false},
        /* top-k */
        {32, 33, 1.0f, 1, LOGITS_UNIFORM, false, false, 0, 0, 0, false},   {32, 40, 1.5f, 5, LOGITS_TIES, false, false, 0, 0, 0, false},
        {32, 300, 1.0f, 299, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, {16, 300, 1.0f, 300, LOGITS_UNIFORM, false, false, 0, 0, 0, false},
        {16, 300, 1.0f, 1000, LOGITS_MASKED, false, false, 0, 0, 0, false}, {8, 4096, 0.9f, 50, LOGITS_UNIFORM, false, false, 0, 0, 0, false},
        {8, 5003, 1.0f, 40, LOGITS_TIES, false, false, 0, 0, 0, false},    {8, 5003, 2.0f, 7, LOGITS_MASKED, false, false, 0, 0, 0, false},
        {4, 50257, 0.7f, 50, LOGITS_WIDE, false, false, 0, 0, 0, false},
        /* the 3-input form: row0 */
        {32, 33, 1.0f, 0, LOGITS_UNIFORM, false, true, 0, 0, 0, false},    {16, 300, 0.8f, 0, LOGITS_UNIFORM, false, true, 0, 0, 0, false},
        {16, 1000, 1.0f, 20, LOGITS_TIES, false, true, 0, 0, 0, false},    {16, 4096, 1.0f, 0, LOGITS_UNIFORM, true, true, 0, 0, 0, false},
        {12, 5003, 0.8f, 0, LOGITS_MASKED, false, true, 0, 0, 0, false},   {8, 33, 0.0f, 0, LOGITS_UNIFORM, false, true, 0, 0, 0, false},
        /* row0 with one batch index per row (rows gathered from the batch) */
        {32, 33, 1.0f, 0, LOGITS_UNIFORM, false, 2, 0, 0, 0, false},       {16, 1000, 1.0f, 20, LOGITS_TIES, false, 2, 0, 0, 0, false},
        {16, 4096, 1.0f, 0, LOGITS_UNIFORM, true, 2, 0, 0, 0, false},      {12, 5003, 0.8f, 0, LOGITS_MASKED, false, 2, 0, 0, 0, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_sample(&cases[i], cases[i].v > 5003 ? 1 : 3);
    const sample_case trl[] = { /* rows, V, T, top_k, kind, rank3, row0, top_p, min_p, penalty, logp */
        {16, 50, 1.0f, 0, LOGITS_UNIFORM, false, 0, 0.8f, 0, 0, true},
        {16, 1000, 0.8f, 0, LOGITS_UNIFORM, false, 0, 0.5f, 0, 0, true},
        {8, 5003, 1.0f, 0, LOGITS_UNIFORM, false, 0, 0.999f, 0, 0, true},
        {8, 5003, 1.0f, 0, LOGITS_TIES, false, 0, 0.9f, 0, 0, true},
        {16, 300, 0.7f, 0, LOGITS_WIDE, false, 0, 0.95f, 0.001f, 0, false},
        {16, 300, 1.0f, 0, LOGITS_UNIFORM, false, 0, 0, 0.2f, 0, true},
        {8, 5003, 1.0f, 40, LOGITS_MASKED, false, 0, 0.7f, 0.05f, 0, true},
        {32, 257, 1.0f, 0, LOGITS_UNIFORM, false, 0, 1.0f, 0, 1.0f, true}, /* neutral, with log-probs */
        {16, 1000, 1.0f, 0, LOGITS_UNIFORM, false, 1, 0, 0, 1.5f, true},
        {8, 4096, 1.0f, 20, LOGITS_TIES, true, 1, 0.9f, 0.02f, 0.7f, true},
        {8, 33, 0.0f, 0, LOGITS_UNIFORM, false, 1, 0, 0, 2.0f, true},
        {16, 1000, 1.0f, 0, LOGITS_UNIFORM, false, 2, 0.8f, 0, 1.3f, true},
        {16, 300, 0.9f, 0, LOGITS_TIES, false, 0, 0, 0, 1.3f, true},
        {4, 50257, 1.0f, 50, LOGITS_UNIFORM, false, 1, 0.9f, 0.05f, 1.2f, true},
    };
    for (size_t i = 0; i < sizeof(trl) / sizeof(trl[0]); i++) check_sample(&trl[i], trl[i].v > 5003 ? 1 : 3);
    check_direct((sample_case){8, 4096, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, 1, -1);
    check_direct((sample_case){8, 4096, 1.0f, 9, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, 3, -1);
    check_direct((sample_case){6, 520, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, 0, 2);
    check_direct((sample_case){6, 520, 0.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, 2, 4);
    check_rows((sample_case){40, 300, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, 0, 40);
    check_rows((sample_case){40, 300, 1.0f, 0, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, 13, 9);
    check_rows((sample_case){40, 260, 0.8f, 7, LOGITS_UNIFORM, false, false, 0, 0, 0, false}, 32, 8);
    check_rows((sample_case){24, 4096, 1.3f, 0, LOGITS_MASKED, false, false, 0, 0, 0, false}, 5, 19);
    return cuda_test_end();
}
