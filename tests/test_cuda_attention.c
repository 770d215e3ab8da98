/* test_cuda_attention.c - the CUDA attention family (ops/cuda/attention.cu, attention_prefix.cu,
 * attention_decode.cu) against the CPU kernels (tests/cuda_harness.h): attention, attention_bwd,
 * attention_prefix, attention_prefix_bwd and attention_cached in f32 and bf16, over odd and even
 * head dims (the vectorized and the generic paths), T = 1, T longer than a tile, prefixes shorter
 * and longer than a tile, cached queries at the first, a middle and the last position of caches
 * spanning several splits, and cached queries against grouped-query caches (Hkv < H KV heads:
 * groups of 2 to 7 query heads in one block, 8, and groups split over blocks, evenly and not;
 * multi-query; odd head dims; wide heads that fit fewer heads a block). Left-padded rows (the
 * ops' start input) for each op: random starts with 0 and the last column among them, starts
 * inside a tile, on a tile boundary, in tiles of pads only and tiles that straddle the start,
 * prefix starts, cached starts past the query (pad queries) and in a later split than the first.
 * Then, run directly on the emulated kernel table:
 *   - decoding: attention_cached position by position on caches filled with the same keys and
 *     values (rows not yet written hold NaN) equals full causal attention's rows, unpadded and
 *     left-padded;
 *   - misaligned pointers (the generic path) give the same bits as aligned ones (the vector path);
 *   - a position past the cache sets the device flag instead of reading out of bounds;
 *   - one position a row (pos (B)): row b's output is, bit for bit, the scalar-pos op's on row b
 *     alone at pos[b], on the CPU and on the emulated GPU; one row out of range sets the flag. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/dtype.h"
#include "ops/cuda/cuda.h"

typedef struct {
    int n, P, Tc, Tp, H, D;  /* P = 0: plain attention over n sequences of Tc */
    int Tq, Tmax, pos;       /* attention_cached: n batches */
    int Hkv;                 /* attention_cached: the caches' KV heads (0: H) */
    const int32_t *start;    /* left padding: one start a row (n; P with a prefix); NULL: none */
    const int32_t *pos_rows; /* attention_cached: one position a row (n); NULL: pos, one for all */
    const float *qkv, *pre;  /* inputs drawn so far (the backward's fill) */
    float *lse;              /* the reference forward's lse, for the backward's input */
} att_case;

/* n sequences of Tc after P prefixes of Tp (P = 0: none), H heads of D */
#define SEQ(n_, P_, Tc_, Tp_, H_, D_) {.n = n_, .P = P_, .Tc = Tc_, .Tp = Tp_, .H = H_, .D = D_}

/* ---------------------------------------------------------------- builders */
static dfg_tensor *in_qkv(dfg_graph *g, dfg_dtype dt, const att_case *c) {
    return dfg_input(g, "qkv", dt, DFG_SHAPE(c->n, c->Tc, 3 * c->H * c->D));
}
static dfg_tensor *in_pre(dfg_graph *g, dfg_dtype dt, const att_case *c) {
    return dfg_input(g, "prefix", dt, DFG_SHAPE(c->P, c->Tp, 3 * c->H * c->D));
}

/* the case's start input (rows: n, or P with a prefix), or NULL */
static dfg_tensor *in_start(dfg_graph *g, const att_case *c) {
    return c->start ? dfg_input(g, "start", DFG_I32, DFG_SHAPE(c->P ? c->P : c->n)) : NULL;
}

static dfg_node *build_attention(dfg_graph *g, dfg_dtype dt, void *user) {
    const att_case *c = user;
    dfg_tensor *y = dfg_attention_padded(g, in_qkv(g, dt, c), in_start(g, c), c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* attention_bwd, or attention_prefix_bwd (prefix): inputs dy, qkv, [prefix,] y, lse[, start] */
static dfg_node *build_bwd(dfg_graph *g, dfg_dtype dt, const att_case *c, bool prefix) {
    int64_t C = (int64_t)c->H * c->D;
    dfg_tensor *in[6] = {dfg_input(g, "dy", dt, DFG_SHAPE(c->n, c->Tc, C)), in_qkv(g, dt, c)};
    int k = 2;
    if (prefix) in[k++] = in_pre(g, dt, c);
    in[k++] = dfg_input(g, "y", dt, DFG_SHAPE(c->n, c->Tc, C));
    in[k++] = dfg_input(g, "lse", DFG_F32, DFG_SHAPE(c->n, c->H, c->Tc));
    if (c->start) in[k++] = in_start(g, c);
    dfg_attrs a = {.attention = {c->H}};
    return dfg_node_add(g, prefix ? DFG_OP_ATTENTION_PREFIX_BWD : DFG_OP_ATTENTION_BWD, in, k, &a, prefix ? 2 : 1);
}

static dfg_node *build_attention_bwd(dfg_graph *g, dfg_dtype dt, void *user) { return build_bwd(g, dt, user, false); }

static dfg_node *build_prefix(dfg_graph *g, dfg_dtype dt, void *user) {
    const att_case *c = user;
    dfg_tensor *y = dfg_attention_prefix_padded(g, in_qkv(g, dt, c), in_pre(g, dt, c), in_start(g, c), c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}

static dfg_node *build_prefix_bwd(dfg_graph *g, dfg_dtype dt, void *user) { return build_bwd(g, dt, user, true); }

static dfg_node *build_cached(dfg_graph *g, dfg_dtype dt, void *user) {
    const att_case *c = user;
    int64_t C = (int64_t)c->H * c->D, Ckv = (int64_t)(c->Hkv ? c->Hkv : c->H) * c->D;
    dfg_tensor *y = dfg_attention_cached_padded(g, dfg_input(g, "q", dt, DFG_SHAPE(c->n, c->Tq, C)),
                                                dfg_input(g, "k_cache", dt, DFG_SHAPE(c->n, c->Tmax, Ckv)),
                                                dfg_input(g, "v_cache", dt, DFG_SHAPE(c->n, c->Tmax, Ckv)),
                                                dfg_input(g, "pos", DFG_I32, c->pos_rows ? DFG_SHAPE(c->n) : DFG_SCALAR),
                                                in_start(g, c), c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* ---------------------------------------------------------------- inputs */
/* Row j of sequence b's extended sequence (its prefix's rows, then its own), of stride 3C. */
static const float *kv_ref(const att_case *c, const float *qkv, const float *pre, int b, int j) {
    int64_t C3 = 3 * (int64_t)c->H * c->D;
    int Tp = c->P ? c->Tp : 0;
    return j < Tp ? pre + ((int64_t)(b / (c->n / c->P)) * Tp + j) * C3 : qkv + ((int64_t)b * c->Tc + j - Tp) * C3;
}

/* The forward in double: y (n, Tc, C) and lse (n, H, Tc) of qkv after an optional prefix. The
 * query at column c = Tp + i of its extended sequence sees keys lo .. c: lo = the start when c is
 * a real column (c >= start), else 0. */
static void ref_forward(const att_case *c, const float *qkv, const float *pre, float *y, float *lse) {
    int64_t C = (int64_t)c->H * c->D;
    int Tp = c->P ? c->Tp : 0;
    double scale = 1.0 / sqrt((double)c->D), *s = malloc(sizeof(double) * (size_t)(Tp + c->Tc));
    for (int b = 0; b < c->n; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Tc; i++) {
                const float *q = qkv + ((int64_t)b * c->Tc + i) * 3 * C + h * c->D;
                int nk = Tp + i + 1, st = c->start ? c->start[c->P ? b / (c->n / c->P) : b] : 0;
                int lo = Tp + i >= st ? st : 0;
                double m = -INFINITY, sum = 0.0;
                for (int j = lo; j < nk; j++) {
                    const float *k = kv_ref(c, qkv, pre, b, j) + C + h * c->D;
                    double dot = 0.0;
                    for (int d = 0; d < c->D; d++) dot += (double)q[d] * k[d];
                    s[j] = dot * scale;
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = lo; j < nk; j++) sum += exp(s[j] - m);
                lse[((int64_t)b * c->H + h) * c->Tc + i] = (float)(m + log(sum));
                for (int d = 0; d < c->D; d++) {
                    double acc = 0.0;
                    for (int j = lo; j < nk; j++) {
                        const float *v = kv_ref(c, qkv, pre, b, j) + 2 * C + h * c->D;
                        acc += exp(s[j] - m) / sum * v[d];
                    }
                    y[((int64_t)b * c->Tc + i) * C + h * c->D + d] = (float)acc;
                }
            }
    free(s);
}

/* The forward: floats uniform, the start input the case's. */
static void fill_fwd(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const att_case *c = user;
    if (t->dtype == DFG_I32)
        memcpy(data, c->start, sizeof(int32_t) * (size_t)n);
    else
        dfg_test_fill_uniform(data, n, -2.0f, 2.0f);
    (void)slot;
}

/* The backward's y and lse are the forward's of the drawn qkv (and prefix), so the probabilities
 * it recomputes are the real ones. Slots: dy, qkv, [prefix,] y, lse[, start]. */
static void fill_bwd(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    att_case *c = user;
    int y_slot = c->P ? 3 : 2;
    if (t->dtype == DFG_I32) {
        memcpy(data, c->start, sizeof(int32_t) * (size_t)n);
    } else if (slot < y_slot) {
        dfg_test_fill_uniform(data, n, -2.0f, 2.0f);
        if (slot == 1) c->qkv = data;
        if (slot == 2) c->pre = data;
    } else if (slot == y_slot) {
        free(c->lse);
        c->lse = malloc(sizeof(float) * (size_t)c->n * (size_t)c->H * (size_t)c->Tc + 1);
        ref_forward(c, c->qkv, c->pre, data, c->lse);
    } else {
        memcpy(data, c->lse, sizeof(float) * (size_t)n);
    }
    (void)t;
}

/* attention_cached: floats uniform, the position and start inputs the case's */
static void fill_cached(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const att_case *c = user;
    if (slot == 3 && c->pos_rows)
        memcpy(data, c->pos_rows, sizeof(int32_t) * (size_t)n);
    else if (slot == 3)
        *(int32_t *)data = c->pos;
    else if (slot == 4)
        memcpy(data, c->start, sizeof(int32_t) * (size_t)n);
    else
        dfg_test_fill_uniform(data, n, -2.0f, 2.0f);
    (void)t;
}

/* ---------------------------------------------------------------- harness cases */
/* f32: the kernels sum up to a few hundred products in another order than OpenBLAS. The
 * backward's dq of early rows is P (dP - delta) with P near 1 and dP ~ delta: a difference of
 * nearly equal O(1) terms, whose rounding noise is ~1e-6 absolute in either implementation. */
static const double RTOL = 2e-5, ATOL = 2e-6, ATOL_BWD = 1e-5;

/* " start a b c" for a padded case's label */
static const char *starts_str(const att_case *c, char *buf, size_t len) {
    int rows = c->P ? c->P : c->n, k = 0;
    buf[0] = '\0';
    for (int r = 0; c->start && r < rows && k >= 0 && (size_t)k < len; r++)
        k += snprintf(buf + k, len - (size_t)k, "%s%d", r ? "," : " start ", c->start[r]);
    return buf;
}

static void check_attention(att_case c) {
    char label[200], sb[64];
    starts_str(&c, sb, sizeof(sb));
    snprintf(label, sizeof(label), "attention n%d T%d H%d D%d%s", c.n, c.Tc, c.H, c.D, sb);
    cuda_case k = {.label = label, .build = build_attention, .user = &c, .fill = fill_fwd, .bf16 = true, .rtol = RTOL,
                   .atol = ATOL, .seeds = 2};
    cuda_check(&k);
    snprintf(label, sizeof(label), "attention_bwd n%d T%d H%d D%d%s", c.n, c.Tc, c.H, c.D, sb);
    cuda_case kb = {.label = label, .build = build_attention_bwd, .user = &c, .fill = fill_bwd, .bf16 = true,
                    .rtol = RTOL, .atol = ATOL_BWD, .seeds = 2};
    cuda_check(&kb);
    free(c.lse);
}

static void check_prefix(att_case c) {
    char label[200], sb[64];
    starts_str(&c, sb, sizeof(sb));
    snprintf(label, sizeof(label), "attention_prefix n%d P%d Tc%d Tp%d H%d D%d%s", c.n, c.P, c.Tc, c.Tp, c.H, c.D, sb);
    cuda_case k = {.label = label, .build = build_prefix, .user = &c, .fill = fill_fwd, .bf16 = true, .rtol = RTOL,
                   .atol = ATOL, .seeds = 2};
    cuda_check(&k);
    snprintf(label, sizeof(label), "attention_prefix_bwd n%d P%d Tc%d Tp%d H%d D%d%s", c.n, c.P, c.Tc, c.Tp, c.H, c.D,
             sb);
    cuda_case kb = {.label = label, .build = build_prefix_bwd, .user = &c, .fill = fill_bwd, .bf16 = true, .rtol = RTOL,
                    .atol = ATOL_BWD, .seeds = 2};
    cuda_check(&kb);
    free(c.lse);
}

static void check_cached(att_case c) {
    char label[200], sb[64];
    starts_str(&c, sb, sizeof(sb));
    snprintf(label, sizeof(label), "attention_cached B%d Tq%d Tmax%d pos%d%s H%d Hkv%d D%d%s", c.n, c.Tq, c.Tmax, c.pos,
             c.pos_rows ? " (a row's)" : "", c.H, c.Hkv ? c.Hkv : c.H, c.D, sb);
    /* a score is a sequential sum of D products in the kernel: at D = 2048 the outputs carry ~3e-6
     * of absolute rounding, at 8192 ~7e-6 (one head a block too), OpenBLAS's ~1e-6 (both measured
     * against double) */
    cuda_case k = {.label = label, .build = build_cached, .user = &c, .fill = fill_cached, .bf16 = true, .rtol = RTOL,
                   .atol = c.D > 1024 ? 2e-5 : ATOL, .seeds = 2};
    cuda_check(&k);
}

/* ---------------------------------------------------------------- direct runs on the emulated table */
typedef struct {
    dfg_program *p;
    dfg_node *n;
} one_node;

static bool node_of(one_node *o, dfg_node *(*build)(dfg_graph *, dfg_dtype, void *), dfg_dtype dt, att_case *c) {
    o->n = cuda_node_alone(build, c, dt, "direct node", &o->p);
    return o->n != NULL;
}

/* Runs the emulated kernel of o's node; returns the device flag (-1: the launcher failed). */
static int run_emu(const one_node *o, void *const *in, void *const *out) {
    return cuda_run_emulated(dfg_op_name(o->n->op), o->n, in, out, 132, 0);
}

static void *alloc_t(const dfg_tensor *t) { return calloc(1, dfg_tensor_bytes(t) + 64); }

/* attention_cached position by position against full causal attention of the same q, k, v. */
static void check_decode(dfg_dtype dt, int B, int T, int H, int D, const int32_t *start) {
    att_case full = {.n = B, .Tc = T, .H = H, .D = D, .start = start},
             dec = {.n = B, .Tq = 1, .Tmax = T + 5, .H = H, .D = D, .start = start};
    one_node f, s;
    if (!node_of(&f, build_attention, dt, &full) || !node_of(&s, build_cached, dt, &dec)) return;
    int64_t C = (int64_t)H * D;
    void *qkv = alloc_t(f.n->in[0]), *yf = alloc_t(f.n->out[0]), *lse = alloc_t(f.n->out[1]);
    void *q = alloc_t(s.n->in[0]), *kc = alloc_t(s.n->in[1]), *vc = alloc_t(s.n->in[2]), *y = alloc_t(s.n->out[0]);
    int32_t pos = 0;
    for (int64_t e = 0; e < dfg_tensor_numel(f.n->in[0]); e++) dfg_store(qkv, dt, e, dfg_test_uniform(-2.0f, 2.0f));
    dfg_test_poison(kc, dfg_tensor_bytes(s.n->in[1])); /* rows not yet written: NaN */
    dfg_test_poison(vc, dfg_tensor_bytes(s.n->in[2]));
    CHECK(run_emu(&f, (void *[]){qkv, (void *)start}, (void *[]){yf, lse}) == 0, "full attention");
    double tol = dt == DFG_BF16 ? 1e-2 : 1e-5, worst = 0.0;
    bool ok = true;
    for (int t = 0; t < T && ok; t++) {
        for (int b = 0; b < B; b++)
            for (int64_t d = 0; d < C; d++) {
                int64_t at = ((int64_t)b * T + t) * 3 * C + d, row = ((int64_t)b * dec.Tmax + t) * C + d;
                dfg_store(q, dt, b * C + d, dfg_load(qkv, dt, at));
                dfg_store(kc, dt, row, dfg_load(qkv, dt, at + C));
                dfg_store(vc, dt, row, dfg_load(qkv, dt, at + 2 * C));
            }
        pos = t;
        ok = run_emu(&s, (void *[]){q, kc, vc, &pos, (void *)start}, (void *[]){y}) == 0;
        for (int b = 0; b < B && ok; b++)
            for (int64_t d = 0; d < C && ok; d++) {
                double a = dfg_load(yf, dt, ((int64_t)b * T + t) * C + d), g = dfg_load(y, dt, b * C + d);
                double err = fabs(a - g) / (tol * (1.0 + fabs(a)));
                worst = err > worst ? err : worst;
                ok = fabs(a - g) <= tol * (1.0 + fabs(a));
                CHECK(ok, "decode %s B%d T%d H%d D%d: position %d batch %d element %lld: full %.9g, cached %.9g",
                      dfg_dtype_name(dt), B, T, H, D, t, b, (long long)d, a, g);
            }
    }
    printf("decode %s B%d T%d H%d D%d%s: attention_cached = attention row by row (worst error %.2g of the tolerance)\n",
           dfg_dtype_name(dt), B, T, H, D, start ? " left-padded" : "", worst);
    /* a position whose queries pass the cache's end: the flag, no access out of bounds */
    pos = dec.Tmax;
    CHECK(run_emu(&s, (void *[]){q, kc, vc, &pos, (void *)start}, (void *[]){y}) == 1, "pos past the cache sets the flag");
    pos = -3;
    CHECK(run_emu(&s, (void *[]){q, kc, vc, &pos, (void *)start}, (void *[]){y}) == 1, "a negative pos sets the flag");
    if (start) { /* a start outside its row: the flag, in the decoding and the tiled kernels */
        int32_t *bad = malloc(sizeof(int32_t) * (size_t)B);
        memcpy(bad, start, sizeof(int32_t) * (size_t)B);
        bad[B - 1] = dec.Tmax;
        pos = 0;
        CHECK(run_emu(&s, (void *[]){q, kc, vc, &pos, bad}, (void *[]){y}) == 1, "a start past the cache sets the flag");
        bad[B - 1] = -1;
        CHECK(run_emu(&f, (void *[]){qkv, bad}, (void *[]){yf, lse}) == 1, "a negative start sets the flag");
        bad[B - 1] = T;
        CHECK(run_emu(&f, (void *[]){qkv, bad}, (void *[]){yf, lse}) == 1, "a start past the row sets the flag");
        free(bad);
    }
    free(qkv), free(yf), free(lse), free(q), free(kc), free(vc), free(y);
    dfg_program_free(f.p), dfg_program_free(s.p);
}

/* One position a row: row b of attention_cached with pos (B) is, bit for bit, the scalar-pos op
 * run on row b alone (its q, caches and start) at pos[b], on the emulated GPU and (f32, the CPU
 * kernel's dtype) on the CPU.
 * Then one row's position past the cache sets the flag while the others are in range. */
static void check_rows(dfg_dtype dt, att_case c) {
    att_case one = c;
    one.n = 1, one.pos_rows = NULL;
    one_node r, s;
    if (!node_of(&r, build_cached, dt, &c)) return;
    int32_t st1 = 0;
    one.start = c.start ? &st1 : NULL;
    if (!node_of(&s, build_cached, dt, &one)) {
        dfg_program_free(r.p);
        return;
    }
    void *q = alloc_t(r.n->in[0]), *kc = alloc_t(r.n->in[1]), *vc = alloc_t(r.n->in[2]);
    void *y_cpu = alloc_t(r.n->out[0]), *y_emu = alloc_t(r.n->out[0]);
    void *q1 = alloc_t(s.n->in[0]), *k1 = alloc_t(s.n->in[1]), *v1 = alloc_t(s.n->in[2]);
    void *y1_cpu = alloc_t(s.n->out[0]), *y1_emu = alloc_t(s.n->out[0]);
    void *bufs[3] = {q, kc, vc};
    for (int j = 0; j < 3; j++)
        for (int64_t e = 0; e < dfg_tensor_numel(r.n->in[j]); e++) dfg_store(bufs[j], dt, e, dfg_test_uniform(-2.0f, 2.0f));
    dfg_test_poison(y_cpu, dfg_tensor_bytes(r.n->out[0]));
    dfg_test_poison(y_emu, dfg_tensor_bytes(r.n->out[0]));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)c.n);
    memcpy(pos, c.pos_rows, sizeof(int32_t) * (size_t)c.n);
    void *in[5] = {q, kc, vc, pos, (void *)c.start};
    bool cpu = dt == DFG_F32; /* the CPU kernel computes in f32 only */
    bool ok = (!cpu || cuda_run_cpu("attention_cached, a position a row", r.n, in, (void *[]){y_cpu})) &&
              run_emu(&r, in, (void *[]){y_emu}) == 0;
    size_t qrow = dfg_tensor_bytes(s.n->in[0]), crow = dfg_tensor_bytes(s.n->in[1]), yrow = dfg_tensor_bytes(s.n->out[0]);
    for (int b = 0; b < c.n && ok; b++) {
        memcpy(q1, (char *)q + b * qrow, qrow);
        memcpy(k1, (char *)kc + b * crow, crow);
        memcpy(v1, (char *)vc + b * crow, crow);
        st1 = c.start ? c.start[b] : 0;
        int32_t p1 = c.pos_rows[b];
        dfg_test_poison(y1_cpu, yrow), dfg_test_poison(y1_emu, yrow);
        void *in1[5] = {q1, k1, v1, &p1, c.start ? &st1 : NULL};
        ok = (!cpu || cuda_run_cpu("attention_cached, one row", s.n, in1, (void *[]){y1_cpu})) &&
             run_emu(&s, in1, (void *[]){y1_emu}) == 0;
        CHECK(ok && (!cpu || !memcmp(y1_cpu, (char *)y_cpu + b * yrow, yrow)),
              "attention_cached %s: CPU row %d at pos %d differs from the scalar op on the row alone",
              dfg_dtype_name(dt), b, p1);
        CHECK(ok && !memcmp(y1_emu, (char *)y_emu + b * yrow, yrow),
              "attention_cached %s: emulated row %d at pos %d differs from the scalar op on the row alone",
              dfg_dtype_name(dt), b, p1);
    }
    /* the last row past the cache, the others in range: the flag */
    pos[c.n - 1] = c.Tmax - c.Tq + 1;
    CHECK(run_emu(&r, in, (void *[]){y_emu}) == 1, "a row's position past the cache sets the flag");
    pos[c.n - 1] = -1;
    CHECK(run_emu(&r, in, (void *[]){y_emu}) == 1, "a row's negative position sets the flag");
    printf("attention_cached %s B%d Tq%d Tmax%d H%d Hkv%d D%d%s: a position a row = the scalar op row by row\n",
           dfg_dtype_name(dt), c.n, c.Tq, c.Tmax, c.H, c.Hkv ? c.Hkv : c.H, c.D, c.start ? " left-padded" : "");
    free(pos), free(q), free(kc), free(vc), free(y_cpu), free(y_emu), free(q1), free(k1), free(v1), free(y1_cpu),
        free(y1_emu);
    dfg_program_free(r.p), dfg_program_free(s.p);
}

/* Every input and output of a node moved off 16-byte alignment (by one element) must give the
 * same bits as the aligned run: the generic path agrees with the vector one. */
static void check_misaligned(dfg_node *(*build)(dfg_graph *, dfg_dtype, void *), att_case *c, dfg_dtype dt,
                             const char *what) {
    one_node o;
    if (!node_of(&o, build, dt, c)) return;
    const dfg_node *n = o.n;
    size_t es = dfg_dtype_size(dt);
    void *ia[8], *im[8], *oa[4], *om[4], *ib[8], *ob[4];
    for (int j = 0; j < n->n_in; j++) {
        const dfg_tensor *t = n->in[j];
        ib[j] = alloc_t(t);
        ia[j] = ib[j];
        im[j] = (char *)malloc(dfg_tensor_bytes(t) + 64) + (t->dtype == dt ? es : 0);
        int64_t ne = dfg_tensor_numel(t);
        if (t->dtype == DFG_I32)
            for (int64_t e = 0; e < ne; e++) ((int32_t *)ia[j])[e] = c->pos;
        else
            for (int64_t e = 0; e < ne; e++) dfg_store(ia[j], t->dtype, e, dfg_test_uniform(-1.0f, 1.0f));
        memcpy(im[j], ia[j], dfg_tensor_bytes(t));
    }
    for (int k = 0; k < n->n_out; k++) {
        const dfg_tensor *t = n->out[k];
        ob[k] = alloc_t(t);
        oa[k] = ob[k];
        om[k] = (char *)malloc(dfg_tensor_bytes(t) + 64) + (t->dtype == dt ? es : 0);
    }
    CHECK(run_emu(&o, ia, oa) == 0 && run_emu(&o, im, om) == 0, "%s: runs", what);
    for (int k = 0; k < n->n_out; k++)
        CHECK(!memcmp(oa[k], om[k], dfg_tensor_bytes(n->out[k])),
              "%s (%s): output %d differs between aligned and misaligned", what, dfg_dtype_name(dt), k);
    for (int j = 0; j < n->n_in; j++) free(ib[j]), free((char *)im[j] - (n->in[j]->dtype == dt ? es : 0));
    for (int k = 0; k < n->n_out; k++) free(ob[k]), free((char *)om[k] - (n->out[k]->dtype == dt ? es : 0));
    dfg_program_free(o.p);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_attention")) return DFG_TEST_SKIP;
    /* n, P, Tc, Tp, H, D: T = 1, short, longer than a tile (64) and than two; head dims odd (the
     * generic path), 1, and each padded size 32 / 64 / 128 with and without padding */
    const att_case plain[] = {
        SEQ(1, 0, 1, 0, 2, 4),    SEQ(2, 0, 5, 0, 3, 4),   SEQ(1, 0, 70, 0, 3, 17), SEQ(1, 0, 129, 0, 2, 64),
        SEQ(2, 0, 33, 0, 2, 7),   SEQ(1, 0, 65, 0, 1, 128), SEQ(1, 0, 130, 0, 4, 16), SEQ(2, 0, 64, 0, 2, 32),
        SEQ(1, 0, 100, 0, 1, 96), SEQ(1, 0, 3, 0, 5, 1),   SEQ(1, 0, 200, 0, 1, 45),
    };
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) check_attention(plain[i]);
    /* prefixes: shorter and longer than a tile, a group of one, one query row (a prefix has at
     * least one position: shapes have no zero dims) */
    const att_case prefix[] = {
        SEQ(2, 1, 5, 3, 2, 4),    SEQ(4, 2, 70, 33, 3, 17), SEQ(3, 1, 1, 1, 1, 8), SEQ(4, 2, 40, 70, 2, 64),
        SEQ(2, 2, 65, 64, 1, 128), SEQ(3, 3, 9, 130, 2, 7),
    };
    for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++) check_prefix(prefix[i]);
    /* caches: B, Tq, Tmax, pos; one split (Tmax <= 256) and several, pos at 0, inside, at the end */
    const att_case cached[] = {
        {.n = 1, .Tq = 1, .Tmax = 1, .pos = 0, .H = 1, .D = 4},
        {.n = 2, .Tq = 1, .Tmax = 9, .pos = 4, .H = 2, .D = 8},
        {.n = 2, .Tq = 3, .Tmax = 300, .pos = 297, .H = 2, .D = 17},
        {.n = 1, .Tq = 1, .Tmax = 1000, .pos = 999, .H = 3, .D = 64},
        {.n = 2, .Tq = 2, .Tmax = 600, .pos = 300, .H = 2, .D = 64},
        {.n = 1, .Tq = 1, .Tmax = 513, .pos = 200, .H = 1, .D = 128},
        {.n = 1, .Tq = 4, .Tmax = 70, .pos = 5, .H = 2, .D = 7},
        {.n = 1, .Tq = 1, .Tmax = 700, .pos = 0, .H = 2, .D = 16},
        {.n = 1, .Tq = 2, .Tmax = 520, .pos = 511, .H = 1, .D = 256},
        {.n = 1, .Tq = 1, .Tmax = 40, .pos = 39, .H = 1, .D = 300},
        {.n = 2, .Tq = 2, .Tmax = 290, .pos = 280, .H = 1, .D = 257}, /* a thread sums several elements */
    };
    for (size_t i = 0; i < sizeof(cached) / sizeof(cached[0]); i++) check_cached(cached[i]);
    /* grouped-query caches: a block serves up to 8 query heads of one KV head (more are split over
     * blocks as evenly as possible: 9 -> 5 + 4, 12 -> 6 + 6, 16 -> 8 + 8) */
    const att_case grouped[] = {
        {.n = 2, .Tq = 1, .Tmax = 9, .pos = 4, .H = 4, .Hkv = 2, .D = 8},
        {.n = 1, .Tq = 3, .Tmax = 300, .pos = 297, .H = 6, .Hkv = 2, .D = 17},  /* odd D: the generic path */
        {.n = 2, .Tq = 2, .Tmax = 600, .pos = 300, .H = 8, .Hkv = 1, .D = 64},  /* multi-query, 8 a block */
        {.n = 1, .Tq = 1, .Tmax = 513, .pos = 512, .H = 14, .Hkv = 2, .D = 64}, /* Qwen2.5-0.5B: groups of 7 */
        {.n = 1, .Tq = 2, .Tmax = 300, .pos = 0, .H = 9, .Hkv = 1, .D = 16},    /* 9: blocks of 5 and 4 */
        {.n = 1, .Tq = 1, .Tmax = 270, .pos = 260, .H = 12, .Hkv = 1, .D = 128},
        {.n = 2, .Tq = 4, .Tmax = 70, .pos = 5, .H = 6, .Hkv = 3, .D = 7},
        {.n = 1, .Tq = 1, .Tmax = 40, .pos = 39, .H = 16, .Hkv = 1, .D = 4},    /* 8 + 8 */
        {.n = 2, .Tq = 1, .Tmax = 300, .pos = 280, .H = 18, .Hkv = 2, .D = 8},  /* 5 + 4 for each KV head */
        {.n = 1, .Tq = 1, .Tmax = 20, .pos = 10, .H = 3, .Hkv = 1, .D = 257},   /* wide heads, several sums a thread */
        {.n = 1, .Tq = 2, .Tmax = 12, .pos = 9, .H = 8, .Hkv = 1, .D = 2048},   /* 8 of 2048 do not fit: 4 + 4 */
        {.n = 1, .Tq = 1, .Tmax = 5, .pos = 3, .H = 2, .Hkv = 1, .D = 8192},    /* 2 do not fit: one a block */
    };
    for (size_t i = 0; i < sizeof(grouped) / sizeof(grouped[0]); i++) check_cached(grouped[i]);

    /* left padding. Tiles: queries of 64 (forward, dQ), keys of 64 (dK/dV) and 32 (dQ): starts at
     * 0, at the last column, inside the first tile, on a tile boundary (64), in the second tile
     * with the first tile all pads and the second straddling (70), in a later tile (130) */
    att_case padded[] = {
        SEQ(2, 0, 5, 0, 3, 4),    SEQ(3, 0, 70, 0, 3, 17), SEQ(2, 0, 130, 0, 2, 64), SEQ(1, 0, 200, 0, 1, 45),
        SEQ(2, 0, 65, 0, 1, 128), SEQ(2, 0, 33, 0, 2, 7),  SEQ(2, 0, 1, 0, 2, 4),
    };
    const int32_t *pstart[] = {
        (const int32_t[]){0, 4}, (const int32_t[]){69, 5, 64}, (const int32_t[]){70, 0}, (const int32_t[]){130},
        (const int32_t[]){64, 1}, (const int32_t[]){32, 17},   (const int32_t[]){0, 0},
    };
    for (size_t i = 0; i < sizeof(padded) / sizeof(padded[0]); i++) padded[i].start = pstart[i], check_attention(padded[i]);
    /* prefixes' starts: inside, at the last prefix row, on and past a tile boundary */
    att_case padded_p[] = {
        SEQ(2, 1, 5, 3, 2, 4), SEQ(4, 2, 70, 33, 3, 17), SEQ(4, 2, 40, 70, 2, 64), SEQ(3, 3, 9, 130, 2, 7),
        SEQ(3, 1, 1, 1, 1, 8),
    };
    const int32_t *pstart_p[] = {
        (const int32_t[]){2}, (const int32_t[]){32, 0}, (const int32_t[]){69, 64}, (const int32_t[]){100, 0, 129},
        (const int32_t[]){0},
    };
    for (size_t i = 0; i < sizeof(padded_p) / sizeof(padded_p[0]); i++)
        padded_p[i].start = pstart_p[i], check_prefix(padded_p[i]);
    /* random shapes and starts, 0 and the last column among them */
    for (int r = 0; r < 3; r++) {
        int T = dfg_test_int(2, 150), Tp = dfg_test_int(2, 100);
        int32_t st[3] = {0, T - 1, dfg_test_int(0, T - 1)}, sp[2] = {Tp - 1, dfg_test_int(0, Tp - 1)};
        att_case c = SEQ(3, 0, T, 0, dfg_test_int(1, 3), dfg_test_int(1, 70));
        c.start = st;
        check_attention(c);
        att_case cp = SEQ(4, 2, dfg_test_int(1, 80), Tp, dfg_test_int(1, 3), dfg_test_int(1, 70));
        cp.start = sp;
        check_prefix(cp);
    }
    /* cached: starts before, at and after the query's column (a pad query sees rows 0 .. column),
     * in a split after the first (the splits before it return at once; the combine skips them),
     * grouped-query caches */
    att_case padded_c[] = {
        {.n = 3, .Tq = 1, .Tmax = 9, .pos = 4, .H = 2, .D = 8},
        {.n = 2, .Tq = 2, .Tmax = 600, .pos = 300, .H = 2, .D = 64},
        {.n = 2, .Tq = 3, .Tmax = 300, .pos = 297, .H = 6, .Hkv = 2, .D = 17},
        {.n = 1, .Tq = 1, .Tmax = 1000, .pos = 999, .H = 3, .D = 64},
        {.n = 2, .Tq = 2, .Tmax = 600, .pos = 300, .H = 8, .Hkv = 1, .D = 64},
        {.n = 2, .Tq = 1, .Tmax = 300, .pos = 280, .H = 18, .Hkv = 2, .D = 8},
        {.n = 2, .Tq = 4, .Tmax = 70, .pos = 5, .H = 6, .Hkv = 3, .D = 7},
    };
    const int32_t *pstart_c[] = {
        (const int32_t[]){0, 4, 8}, (const int32_t[]){290, 301},  (const int32_t[]){260, 298}, (const int32_t[]){513},
        (const int32_t[]){0, 280},  (const int32_t[]){257, 299}, (const int32_t[]){3, 69},
    };
    for (size_t i = 0; i < sizeof(padded_c) / sizeof(padded_c[0]); i++)
        padded_c[i].start = pstart_c[i], check_cached(padded_c[i]);

    /* one position a row: rows at different columns, in different splits, grouped-query caches,
     * left-padded rows (a start past a row's column: a pad query) */
    att_case rows_c[] = {
        {.n = 3, .Tq = 1, .Tmax = 9, .H = 2, .D = 8},
        {.n = 4, .Tq = 2, .Tmax = 600, .H = 2, .D = 64},
        {.n = 3, .Tq = 1, .Tmax = 300, .H = 6, .Hkv = 2, .D = 17},
        {.n = 2, .Tq = 3, .Tmax = 70, .H = 8, .Hkv = 1, .D = 16},
        {.n = 3, .Tq = 1, .Tmax = 520, .H = 4, .Hkv = 2, .D = 32},
    };
    const int32_t *rpos[] = {
        (const int32_t[]){0, 4, 8}, (const int32_t[]){0, 598, 255, 300}, (const int32_t[]){299, 3, 256},
        (const int32_t[]){67, 0}, (const int32_t[]){519, 260, 10},
    };
    const int32_t *rstart[] = {
        NULL, NULL, (const int32_t[]){280, 0, 100}, (const int32_t[]){3, 2}, (const int32_t[]){300, 259, 11},
    };
    for (size_t i = 0; i < sizeof(rows_c) / sizeof(rows_c[0]); i++) {
        rows_c[i].pos_rows = rpos[i], rows_c[i].start = rstart[i];
        check_cached(rows_c[i]);
        check_rows(DFG_F32, rows_c[i]);
        check_rows(DFG_BF16, rows_c[i]);
    }

    check_decode(DFG_F32, 2, 70, 2, 16, NULL);
    check_decode(DFG_BF16, 1, 40, 3, 8, NULL);
    check_decode(DFG_F32, 1, 300, 1, 64, NULL); /* across the 256-position splits */
    check_decode(DFG_F32, 3, 70, 2, 16, (const int32_t[]){0, 69, 33});
    check_decode(DFG_BF16, 2, 40, 3, 8, (const int32_t[]){7, 0});
    check_decode(DFG_F32, 1, 300, 1, 64, (const int32_t[]){260}); /* the first split holds only pads */

    att_case mis = {.n = 2, .Tc = 70, .H = 2, .D = 8}, mis_p = {.n = 2, .P = 1, .Tc = 9, .Tp = 66, .H = 1, .D = 32},
             mis_c = {.n = 1, .Tq = 2, .Tmax = 300, .pos = 290, .H = 2, .D = 8},
             mis_g = {.n = 2, .Tq = 2, .Tmax = 280, .pos = 270, .H = 6, .Hkv = 2, .D = 8};
    /* left-padded: every i32 input is the case's pos (check_misaligned), so the start too */
    const int32_t any[2] = {0, 0};
    att_case mis_s = mis, mis_ps = mis_p, mis_cs = mis_c;
    mis_s.start = mis_ps.start = mis_cs.start = any, mis_s.pos = 33, mis_ps.pos = 40, mis_cs.pos = 270;
    for (int k = 0; k < 2; k++) {
        dfg_dtype dt = k ? DFG_BF16 : DFG_F32;
        check_misaligned(build_attention, &mis, dt, "attention");
        check_misaligned(build_attention_bwd, &mis, dt, "attention_bwd");
        check_misaligned(build_prefix, &mis_p, dt, "attention_prefix");
        check_misaligned(build_prefix_bwd, &mis_p, dt, "attention_prefix_bwd");
        check_misaligned(build_cached, &mis_c, dt, "attention_cached");
        check_misaligned(build_cached, &mis_g, dt, "attention_cached (grouped-query)");
        check_misaligned(build_attention, &mis_s, dt, "attention (left-padded)");
        check_misaligned(build_attention_bwd, &mis_s, dt, "attention_bwd (left-padded)");
        check_misaligned(build_prefix, &mis_ps, dt, "attention_prefix (left-padded)");
        check_misaligned(build_prefix_bwd, &mis_ps, dt, "attention_prefix_bwd (left-padded)");
        check_misaligned(build_cached, &mis_cs, dt, "attention_cached (left-padded)");
    }
    return cuda_test_end();
}
