/* test_ops_gqa.c - grouped-query attention in the decoding op attention_cached (ops/attention.c,
 * ops/cpu/attention.c): caches of Hkv = Ckv / D KV heads read by n_head = H query heads, query
 * head h reading KV head h / (H / Hkv) (Llama's and Qwen's num_key_value_heads).
 *   - the CPU kernel, called directly on poisoned outputs with one and with two threads, against
 *     a reference written here: the KV heads repeated as transformers' repeat_kv does (expand each
 *     KV head to its G = H / Hkv query heads, then flatten), then ordinary causal attention in
 *     double. (H, Hkv) pairs with Hkv = 1 (multi-query), 1 < Hkv < H and Hkv = H; head dims odd
 *     and even down to 1; Tq = 1 and Tq > 1; pos at 0, near 0, inside and at Tmax - Tq; then
 *     shapes drawn at random. The same queries against the repeated caches (the multi-head form
 *     of the op) give the same values.
 *   - a decode loop on the CPU runtime: caches of Hkv heads as KV_CACHE state, one row written
 *     per stage run with dfg_slice_assign_at, equals the reference row by row.
 *   - the shape rule refuses caches whose width is no multiple of head_dim, whose KV heads do
 *     not divide n_head (more KV heads than query heads too), and k/v caches of two shapes, in a
 *     message naming the op and the tensors; it accepts every divisor.
 *   - the cost counts the caches' bytes at their own width and the flops per query head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "graph/ir.h"
#include "ops/cpu/cpu.h"
#include "ops/op.h"
#include "testutil.h"

static bool contains(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }
static bool is_poison(const dfg_tensor *t) { return t && !strcmp(dfg_tensor_name(t), "<poison>"); }

typedef struct {
    int B, Tq, Tmax, pos, H, Hkv, D;
} gqa_case;

static float *rnd(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    dfg_test_fill_uniform(x, n, -2.0f, 2.0f);
    return x;
}

/* max |y - ref| / max(max |ref|, 1); NaN when y holds a NaN (a poisoned element left unwritten) */
static double rel_err(const float *y, const double *ref, int64_t n) { return dfg_test_max_rel_err_ref(y, ref, n, 1.0); }

/* ---------------------------------------------------------------- the reference */
/* transformers' repeat_kv on a cache (B, Tmax, Hkv*D): (B, Hkv, T, D) expanded to
 * (B, Hkv, G, T, D) and flattened to (B, Hkv*G, T, D), here in the (B, T, heads*D) layout. */
static float *repeat_kv(const float *c, int B, int T, int Hkv, int G, int D) {
    float *r = malloc(sizeof(float) * (size_t)B * T * Hkv * G * D);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int kv = 0; kv < Hkv; kv++)
                for (int rep = 0; rep < G; rep++)
                    memcpy(r + (((int64_t)b * T + t) * Hkv * G + kv * G + rep) * D,
                           c + (((int64_t)b * T + t) * Hkv + kv) * D, sizeof(float) * (size_t)D);
    return r;
}

/* Ordinary causal attention in double: query i of q (B, Tq, H*D) sits at position pos + i and
 * attends to rows 0 .. pos + i of k, v (B, Tmax, H*D) -> y (B, Tq, H*D). */
static void ref_attend(const gqa_case *c, const float *q, const float *k, const float *v, double *y) {
    int64_t C = (int64_t)c->H * c->D;
    double scale = 1.0 / sqrt((double)c->D), *s = malloc(sizeof(double) * (size_t)c->Tmax);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Tq; i++) {
                const float *qr = q + ((int64_t)b * c->Tq + i) * C + h * c->D;
                int nk = c->pos + i + 1;
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j < nk; j++) {
                    const float *kr = k + ((int64_t)b * c->Tmax + j) * C + h * c->D;
                    double dot = 0.0;
                    for (int d = 0; d < c->D; d++) dot += (double)qr[d] * kr[d];
                    s[j] = dot * scale;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < nk; j++) sum += exp(s[j] - m);
                for (int d = 0; d < c->D; d++) {
                    double acc = 0.0;
                    for (int j = 0; j < nk; j++)
                        acc += exp(s[j] - m) / sum * v[((int64_t)b * c->Tmax + j) * C + h * c->D + d];
                    y[((int64_t)b * c->Tq + i) * C + h * c->D + d] = acc;
                }
            }
    free(s);
}

/* ---------------------------------------------------------------- the CPU kernel, called directly */
/* Builds attention_cached of q (B, Tq, H*D) against caches (B, Tmax, kv_heads*D) and runs its CPU
 * kernel with `threads` threads into y, poisoned first. */
static bool run_kernel(const gqa_case *c, int kv_heads, const float *q, const float *kc, const float *vc, float *y,
                       int threads) {
    dfg_program *p = dfg_program_new("gqa");
    dfg_graph *g = dfg_graph_new(p, "g");
    int64_t C = (int64_t)c->H * c->D, Ckv = (int64_t)kv_heads * c->D;
    dfg_tensor *out = dfg_attention_cached(g, dfg_input(g, "q", DFG_F32, DFG_SHAPE(c->B, c->Tq, C)),
                                           dfg_input(g, "k_cache", DFG_F32, DFG_SHAPE(c->B, c->Tmax, Ckv)),
                                           dfg_input(g, "v_cache", DFG_F32, DFG_SHAPE(c->B, c->Tmax, Ckv)),
                                           dfg_input(g, "pos", DFG_I32, DFG_SCALAR), c->H);
    bool ok = dfg_graph_status(g) == DFG_OK;
    CHECK(ok, "build: %s", dfg_graph_error(g));
    if (ok) {
        const dfg_node *n = out->producer;
        char err[512] = "";
        int32_t pos = c->pos;
        dfg_cpu_ctx ctx = {.n_threads = threads, .err = err, .err_len = sizeof(err)};
        ctx.scratch_per_thread = dfg_cpu_scratch_bytes(n);
        ctx.scratch = malloc(ctx.scratch_per_thread * (size_t)threads + 1);
        dfg_test_poison(ctx.scratch, ctx.scratch_per_thread * (size_t)threads);
        dfg_test_poison(y, sizeof(float) * (size_t)c->B * c->Tq * C);
        dfg_status st = dfg_cpu_kernels[n->op](n, (void *const[]){(void *)q, (void *)kc, (void *)vc, &pos},
                                               (void *const[]){y}, &ctx);
        free(ctx.scratch);
        ok = st == DFG_OK;
        CHECK(ok, "the CPU kernel: %s", err);
    }
    dfg_program_free(p);
    return ok;
}

static void check_case(gqa_case c) {
    int G = c.H / c.Hkv;
    int64_t C = (int64_t)c.H * c.D, Ckv = (int64_t)c.Hkv * c.D, ny = (int64_t)c.B * c.Tq * C;
    float *q = rnd(ny), *kc = rnd((int64_t)c.B * c.Tmax * Ckv), *vc = rnd((int64_t)c.B * c.Tmax * Ckv);
    float *kr = repeat_kv(kc, c.B, c.Tmax, c.Hkv, G, c.D), *vr = repeat_kv(vc, c.B, c.Tmax, c.Hkv, G, c.D);
    float *y = malloc(sizeof(float) * (size_t)ny), *ym = malloc(sizeof(float) * (size_t)ny);
    double *ref = malloc(sizeof(double) * (size_t)ny);
    ref_attend(&c, q, kr, vr, ref);
    char label[128];
    snprintf(label, sizeof(label), "B%d Tq%d Tmax%d pos%d H%d Hkv%d D%d", c.B, c.Tq, c.Tmax, c.pos, c.H, c.Hkv, c.D);
    for (int threads = 1; threads <= 2; threads++)
        if (run_kernel(&c, c.Hkv, q, kc, vc, y, threads)) {
            double e = rel_err(y, ref, ny);
            CHECK(e < 1e-5, "%s, %d thread(s): GQA caches vs repeat_kv + attention: rel err %g", label, threads, e);
        }
    /* the multi-head form of the op on the repeated caches */
    if (run_kernel(&c, c.H, q, kr, vr, ym, 1) && run_kernel(&c, c.Hkv, q, kc, vc, y, 1)) {
        double e = 0.0;
        for (int64_t i = 0; i < ny; i++) e = fmax(e, fabs((double)y[i] - ym[i]));
        CHECK(e < 1e-6, "%s: GQA caches vs the repeated caches through the op: max diff %g", label, e);
    }
    free(q), free(kc), free(vc), free(kr), free(vr), free(y), free(ym), free(ref);
}

static void test_kernel(void) {
    /* B, Tq, Tmax, pos, H, Hkv, D */
    static const gqa_case fixed[] = {
        {2, 1, 9, 0, 4, 2, 8},    /* pos 0: one key */
        {1, 3, 17, 14, 6, 3, 5},  /* odd head dim, the queries end at the cache's last row */
        {2, 2, 33, 1, 8, 1, 16},  /* multi-query, near the start */
        {1, 4, 40, 36, 12, 4, 7}, /* groups of 3 */
        {2, 1, 12, 11, 4, 4, 6},  /* Hkv = H: plain multi-head */
        {1, 5, 64, 30, 9, 3, 3},  /* Tq > 1 inside */
        {3, 2, 20, 18, 2, 1, 32}, /* two heads on one */
        {1, 1, 1, 0, 4, 1, 1},    /* the smallest: head dim 1, one cache row */
        {1, 2, 50, 48, 14, 2, 4}, /* groups of 7 (Qwen2.5-0.5B's 14 / 2) */
        {1, 1, 30, 29, 32, 8, 2}, /* Llama 3's 32 / 8 */
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) check_case(fixed[i]);
    /* shapes at random: H up to 12, Hkv one of its divisors, D up to 24 */
    for (int r = 0; r < 12; r++) {
        gqa_case c = {.B = dfg_test_int(1, 3), .H = dfg_test_int(1, 12), .D = dfg_test_int(1, 24),
                      .Tmax = dfg_test_int(1, 80)};
        do c.Hkv = dfg_test_int(1, c.H);
        while (c.H % c.Hkv);
        c.Tq = dfg_test_int(1, c.Tmax < 6 ? c.Tmax : 6);
        c.pos = dfg_test_int(0, c.Tmax - c.Tq);
        check_case(c);
    }
}

/* ---------------------------------------------------------------- a decode loop on the runtime */
/* Caches of HKV heads (KV_CACHE state, rows not yet written hold 50, which would swamp any score
 * that read them) filled one row per stage run; the outputs stored row by row equal the
 * reference of all T queries against the T written rows. */
static void test_decode_loop(void) {
    enum { B = 2, T = 5, H = 6, HKV = 2, D = 4, C = H * D, CKV = HKV * D, TMAX = T + 2 };
    float *q = rnd(B * T * C), *k = rnd(B * T * CKV), *v = rnd(B * T * CKV);
    dfg_fx f;
    dfg_fx_begin(&f, "gqa_decode");
    dfg_program *p = f.p;
    dfg_graph *g = f.g;
    const dfg_test_kv kv = dfg_test_kv_state(p, B, T, TMAX, C, CKV);
    const int32_t base[B] = {0, T}; /* row b*T + pos of the (B*T, width) tables */
    dfg_tensor *ids = dfg_add(g, dfg_const(p, "base", DFG_I32, DFG_SHAPE(B, 1), base), kv.pos); /* (B,1) */
    dfg_tensor *tq = dfg_fx_const_f32(&f, "q", DFG_SHAPE(B * T, C), q);
    dfg_tensor *tk = dfg_fx_const_f32(&f, "k", DFG_SHAPE(B * T, CKV), k);
    dfg_tensor *tv = dfg_fx_const_f32(&f, "v", DFG_SHAPE(B * T, CKV), v);
    dfg_slice_assign_at(g, kv.kc, dfg_embed(g, tk, ids), 1, kv.pos); /* (B,1,CKV) into row pos */
    dfg_slice_assign_at(g, kv.vc, dfg_embed(g, tv, ids), 1, kv.pos);
    dfg_tensor *y = dfg_attention_cached(g, dfg_embed(g, tq, ids), kv.kc, kv.vc, kv.pos, H); /* (B,1,C) */
    dfg_test_kv_store(g, &kv, y);
    if (dfg_fx_create(&f, T) && dfg_fx_step(&f)) {
        float yo[B * T * C], cache[B * TMAX * CKV];
        double r[B * T * C];
        gqa_case c = {.B = B, .Tq = T, .Tmax = T, .pos = 0, .H = H, .Hkv = HKV, .D = D};
        float *kr = repeat_kv(k, B, T, HKV, H / HKV, D), *vr = repeat_kv(v, B, T, HKV, H / HKV, D);
        ref_attend(&c, q, kr, vr, r);
        dfg_fx_read(&f, "out", yo, sizeof(yo));
        double e = rel_err(yo, r, B * T * C);
        CHECK(e < 1e-5, "decode loop on caches of %d KV heads for %d query heads vs the reference: rel err %g", HKV,
              H, e);
        dfg_fx_read(&f, "kc", cache, sizeof(cache));
        CHECK(cache[(1 * TMAX + 3) * CKV + 5] == k[(1 * T + 3) * CKV + 5] && cache[(1 * TMAX + T) * CKV] == 50.0f,
              "the caches hold the written rows at their own width, and 50 past them");
        free(kr), free(vr);
    }
    dfg_fx_end(&f);
    free(q), free(k), free(v);
}

/* ---------------------------------------------------------------- the shape rule */
typedef struct {
    int H;
    int64_t C, Ck, Cv;
    const char *why;
} refusal;

static void test_refusals(void) {
    static const refusal bad[] = {
        {4, 64, 40, 40, "k_cache 'kc' last dim 40 is not a multiple of head_dim 16"},
        {6, 96, 64, 64, "n_head 6 is not a multiple of the caches' 4 kv heads"},
        {2, 32, 64, 64, "n_head 2 is not a multiple of the caches' 4 kv heads"}, /* more KV heads than heads */
        {4, 64, 8, 8, "k_cache 'kc' last dim 8 is not a multiple of head_dim 16"}, /* narrower than a head */
        {4, 64, 32, 64, "k_cache 'kc' and v_cache 'vc' differ in shape"},
        {5, 64, 64, 64, "C=64 does not split into 5 heads"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const refusal *r = &bad[i];
        dfg_program *p = dfg_program_new("gqa_errors");
        dfg_graph *g = dfg_graph_new(p, "decode");
        dfg_tensor *q = dfg_input(g, "q", DFG_F32, DFG_SHAPE(1, 2, r->C));
        dfg_tensor *kc = dfg_input(g, "kc", DFG_F32, DFG_SHAPE(1, 8, r->Ck));
        dfg_tensor *vc = dfg_input(g, "vc", DFG_F32, DFG_SHAPE(1, 8, r->Cv));
        dfg_tensor *pos = dfg_input(g, "pos", DFG_I32, DFG_SCALAR);
        int nodes = g->n_nodes;
        dfg_tensor *y = dfg_attention_cached(g, q, kc, vc, pos, r->H);
        const char *msg = dfg_graph_error(g);
        char kdesc[64];
        snprintf(kdesc, sizeof(kdesc), "#1 'kc' f32 (1,8,%lld)", (long long)r->Ck);
        CHECK(is_poison(y) && dfg_graph_status(g) == DFG_ERR_SHAPE && g->n_nodes == nodes,
              "H %d, C %lld, caches %lld / %lld: refused (%s)", r->H, (long long)r->C, (long long)r->Ck,
              (long long)r->Cv, dfg_status_name(dfg_graph_status(g)));
        CHECK(contains(msg, "attention_cached 'attention_cached#") && contains(msg, r->why) &&
                  contains(msg, "#0 'q' f32 (1,2,") && contains(msg, kdesc),
              "the message names the op, the reason and the tensors: %s", msg);
        dfg_program_free(p);
    }
    /* every divisor of n_head is accepted, and the output is q's shape */
    for (int hkv = 1; hkv <= 12; hkv++) {
        dfg_program *p = dfg_program_new("gqa_ok");
        dfg_graph *g = dfg_graph_new(p, "decode");
        dfg_tensor *y = dfg_attention_cached(g, dfg_input(g, "q", DFG_F32, DFG_SHAPE(2, 3, 12 * 5)),
                                             dfg_input(g, "kc", DFG_F32, DFG_SHAPE(2, 9, hkv * 5)),
                                             dfg_input(g, "vc", DFG_F32, DFG_SHAPE(2, 9, hkv * 5)),
                                             dfg_input(g, "pos", DFG_I32, DFG_SCALAR), 12);
        bool divides = 12 % hkv == 0;
        CHECK((dfg_graph_status(g) == DFG_OK) == divides, "12 heads, %d KV heads: %s", hkv,
              divides ? dfg_graph_error(g) : "accepted");
        if (divides)
            CHECK(dfg_shape_equal(y->shape, DFG_SHAPE(2, 3, 60)), "the output has q's shape (2,3,60)");
        dfg_program_free(p);
    }
}

/* ---------------------------------------------------------------- cost */
static void test_cost(void) {
    enum { B = 2, TQ = 3, TMAX = 40, H = 8, HKV = 2, D = 16 };
    dfg_program *p = dfg_program_new("gqa_cost");
    dfg_graph *g = dfg_graph_new(p, "decode");
    dfg_tensor *y = dfg_attention_cached(g, dfg_input(g, "q", DFG_BF16, DFG_SHAPE(B, TQ, H * D)),
                                         dfg_input(g, "kc", DFG_BF16, DFG_SHAPE(B, TMAX, HKV * D)),
                                         dfg_input(g, "vc", DFG_BF16, DFG_SHAPE(B, TMAX, HKV * D)),
                                         dfg_input(g, "pos", DFG_I32, DFG_SCALAR), H);
    CHECK(dfg_graph_status(g) == DFG_OK, "build: %s", dfg_graph_error(g));
    if (dfg_graph_status(g) == DFG_OK) {
        dfg_cost c = dfg_ops[DFG_OP_ATTENTION_CACHED].cost(y->producer);
        double read = 2.0 * (B * TQ * H * D + 2 * B * TMAX * HKV * D) + 4.0, written = 2.0 * B * TQ * H * D,
               flops = 4.0 * B * TQ * TMAX * H * D;
        CHECK(c.bytes_read == read && c.bytes_written == written && c.flops == flops,
              "cost: read %.0f (want %.0f: the caches at %d KV heads), written %.0f (%.0f), flops %.0f (%.0f)",
              c.bytes_read, read, HKV, c.bytes_written, written, c.flops, flops);
    }
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_ops_gqa");
    test_kernel();
    test_decode_loop();
    test_refusals();
    test_cost();
    return dfg_test_finish();
}
