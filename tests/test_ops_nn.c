/* test_ops_nn.c - forward values of the nn ops on the CPU runtime against naive references
 * written here in double: matmul (every transpose flag and batch mode), bias_add, layernorm, rmsnorm,
 * softmax / log_softmax, causal attention, attention over a shared prefix, KV-cache attention
 * filled one token per stage run, embed and take, and the run-time range errors of attention_cached, embed and take. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "graph/ir.h"
#include "testutil.h"

static float *rndn(int64_t n, float std) {
    float *x = malloc(sizeof(float) * (size_t)n);
    dfg_test_fill_normal(x, n, std);
    return x;
}

static bool contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* ---------------------------------------------------------------- matmul */
enum { MM = 5, MK = 7, MN = 6 };

typedef struct {
    const char *name;
    dfg_shape ba, bb, bo; /* batch dims of a, b and the result */
} mm_mode;

static dfg_shape with2(dfg_shape batch, int64_t r, int64_t c) {
    batch.d[batch.rank++] = r;
    batch.d[batch.rank++] = c;
    return batch;
}

/* C[bi] = op(A[bi]) op(B[bi]); an operand without batch dims is shared */
static void ref_matmul(const float *A, const float *B, double *Cr, int64_t batch, bool a_b, bool b_b, bool ta, bool tb) {
    for (int64_t bi = 0; bi < batch; bi++) {
        const float *Ai = A + (a_b ? bi * MM * MK : 0), *Bi = B + (b_b ? bi * MK * MN : 0);
        for (int m = 0; m < MM; m++)
            for (int n = 0; n < MN; n++) {
                double s = 0;
                for (int k = 0; k < MK; k++)
                    s += (double)(ta ? Ai[k * MM + m] : Ai[m * MK + k]) * (tb ? Bi[n * MK + k] : Bi[k * MN + n]);
                Cr[(bi * MM + m) * MN + n] = s;
            }
    }
}

static void test_matmul(void) {
    const mm_mode modes[4] = {
        {"2d", DFG_SCALAR, DFG_SCALAR, DFG_SCALAR},
        {"both batched", DFG_SHAPE(2, 3), DFG_SHAPE(2, 3), DFG_SHAPE(2, 3)},
        {"b shared", DFG_SHAPE(4), DFG_SCALAR, DFG_SHAPE(4)},
        {"a shared", DFG_SCALAR, DFG_SHAPE(4), DFG_SHAPE(4)},
    };
    for (int mi = 0; mi < 4; mi++) {
        const mm_mode *md = &modes[mi];
        int64_t batch = dfg_shape_numel(md->bo), na = dfg_shape_numel(md->ba) * MM * MK,
                nb = dfg_shape_numel(md->bb) * MK * MN;
        float *a = rndn(na, 1), *b = rndn(nb, 1);
        dfg_fx f;
        dfg_fx_begin(&f, "matmul");
        char nm[4][8];
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            /* the same bytes read as (M,K) or (K,M): the reference indexes them the same way */
            dfg_tensor *A = dfg_fx_const_f32(&f, t ? (t == 1 ? "a1" : t == 2 ? "a2" : "a3") : "a0",
                                 ta ? with2(md->ba, MK, MM) : with2(md->ba, MM, MK), a);
            dfg_tensor *B = dfg_fx_const_f32(&f, t ? (t == 1 ? "b1" : t == 2 ? "b2" : "b3") : "b0",
                                 tb ? with2(md->bb, MN, MK) : with2(md->bb, MK, MN), b);
            snprintf(nm[t], sizeof(nm[t]), "c%d", t);
            dfg_tensor *c = dfg_output(f.g, dfg_matmul(f.g, A, B, ta, tb), nm[t]);
            dfg_shape want = with2(md->bo, MM, MN), got = dfg_tensor_shape(c);
            bool same = got.rank == want.rank;
            for (int d = 0; same && d < got.rank; d++) same = got.d[d] == want.d[d];
            CHECK(same, "matmul %s ta=%d tb=%d: result shape", md->name, ta, tb);
        }
        if (dfg_fx_run(&f)) {
            float *c = malloc(sizeof(float) * (size_t)(batch * MM * MN));
            double *r = malloc(sizeof(double) * (size_t)(batch * MM * MN));
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t & 2;
                ref_matmul(a, b, r, batch, md->ba.rank > 0, md->bb.rank > 0, ta, tb);
                dfg_fx_read(&f, nm[t], c, sizeof(float) * (size_t)(batch * MM * MN));
                double e = dfg_test_max_rel_err_ref(c, r, batch * MM * MN, 1.0);
                CHECK(e < 1e-5, "matmul %s ta=%d tb=%d: rel err %g", md->name, ta, tb, e);
            }
            free(c), free(r);
        }
        dfg_fx_end(&f);
        free(a), free(b);
    }
}

static void test_bias_add(void) {
    float *x = rndn(24, 1), *b = rndn(4, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "bias");
    dfg_output(f.g, dfg_bias_add(f.g, dfg_fx_const_f32(&f, "x", DFG_SHAPE(2, 3, 4), x), dfg_fx_const_f32(&f, "b", DFG_SHAPE(4), b)), "y");
    if (dfg_fx_run(&f)) {
        float y[24];
        dfg_fx_read(&f, "y", y, sizeof(y));
        int bad = 0;
        for (int i = 0; i < 24; i++) bad += y[i] != x[i] + b[i % 4];
        CHECK(bad == 0, "bias_add: %d wrong elements", bad);
    }
    dfg_fx_end(&f);
    free(x), free(b);
}

/* ---------------------------------------------------------------- layernorm */
static void test_layernorm(void) {
    enum { R = 12, C = 32 };
    float *x = rndn(R * C, 2), *w = rndn(C, 1), *b = rndn(C, 1);
    for (int i = 0; i < R * C; i++) x[i] += 3.0f; /* an offset the normalisation must remove */
    for (int i = 0; i < C; i++) x[5 * C + i] = 7.0f; /* a constant row: variance 0, y = b */
    const float eps = 1e-5f;
    dfg_fx f;
    dfg_fx_begin(&f, "layernorm");
    dfg_output(f.g,
               dfg_layernorm(f.g, dfg_fx_const_f32(&f, "x", DFG_SHAPE(3, 4, C), x), dfg_fx_const_f32(&f, "w", DFG_SHAPE(C), w),
                             dfg_fx_const_f32(&f, "b", DFG_SHAPE(C), b), eps),
               "y");
    if (dfg_fx_run(&f)) {
        float y[R * C];
        double r[R * C];
        for (int row = 0; row < R; row++) {
            double m = 0, v = 0;
            for (int i = 0; i < C; i++) m += x[row * C + i];
            m /= C;
            for (int i = 0; i < C; i++) v += (x[row * C + i] - m) * (x[row * C + i] - m);
            v /= C;
            for (int i = 0; i < C; i++) r[row * C + i] = (x[row * C + i] - m) / sqrt(v + eps) * w[i] + b[i];
        }
        dfg_fx_read(&f, "y", y, sizeof(y));
        double e = dfg_test_max_rel_err_ref(y, r, R * C, 1.0);
        CHECK(e < 2e-6, "layernorm vs double reference: rel err %g", e);
        double e5 = 0;
        for (int i = 0; i < C; i++) e5 = fmax(e5, fabs(y[5 * C + i] - b[i]));
        CHECK(e5 < 1e-6, "a constant row normalises to the bias, err %g", e5);
    }
    dfg_fx_end(&f);
    free(x), free(w), free(b);
}

/* ---------------------------------------------------------------- rmsnorm */
/* Hugging Face's LlamaRMSNorm: y = w * x / sqrt(mean(x^2) + eps), rstd per row */
static void test_rmsnorm(void) {
    enum { R = 12, C = 33 };
    float *x = rndn(R * C, 2), *w = rndn(C, 1);
    for (int i = 0; i < R * C; i++) x[i] += 1.5f; /* a mean RMSNorm must not remove */
    for (int i = 0; i < C; i++) x[7 * C + i] *= 1e-3f; /* a small row, where eps matters */
    const float eps = 1e-5f;
    dfg_fx f;
    dfg_fx_begin(&f, "rmsnorm");
    dfg_tensor *xt = dfg_fx_const_f32(&f, "x", DFG_SHAPE(3, 4, C), x);
    dfg_tensor *y = dfg_rmsnorm(f.g, xt, dfg_fx_const_f32(&f, "w", DFG_SHAPE(C), w), eps);
    dfg_output(f.g, y, "y");
    dfg_output(f.g, y->producer ? y->producer->out[1] : y, "rstd"); /* the node's second output */
    if (dfg_fx_run(&f)) {
        float yv[R * C], rv[R];
        double ry[R * C], rr[R];
        for (int row = 0; row < R; row++) {
            double ss = 0;
            for (int i = 0; i < C; i++) ss += (double)x[row * C + i] * x[row * C + i];
            rr[row] = 1.0 / sqrt(ss / C + eps);
            for (int i = 0; i < C; i++) ry[row * C + i] = w[i] * (x[row * C + i] * rr[row]);
        }
        dfg_fx_read(&f, "y", yv, sizeof(yv));
        dfg_fx_read(&f, "rstd", rv, sizeof(rv));
        double e = dfg_test_max_rel_err_ref(yv, ry, R * C, 1.0), er = dfg_test_max_rel_err_ref(rv, rr, R, 1.0);
        printf("rmsnorm vs double reference: y rel err %.3g, rstd rel err %.3g\n", e, er);
        CHECK(e < 2e-6, "rmsnorm vs double reference: rel err %g", e);
        CHECK(er < 2e-6, "rmsnorm rstd vs double reference: rel err %g", er);
    }
    dfg_fx_end(&f);
    free(x), free(w);

    /* bad input: a shape error naming the op and the tensors, never a crash */
    dfg_program *p = dfg_program_new("rmsnorm_errors");
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_rmsnorm(g, dfg_input(g, "a", DFG_F32, DFG_SHAPE(2, 3)), dfg_input(g, "w4", DFG_F32, DFG_SHAPE(4)), 1e-5f);
    CHECK(dfg_graph_status(g) == DFG_ERR_SHAPE && contains(dfg_graph_error(g), "rmsnorm") &&
              contains(dfg_graph_error(g), "weight must be (3)") && contains(dfg_graph_error(g), "'w4'"),
          "rmsnorm with a (4) weight on rows of 3: %s", dfg_graph_error(g));
    dfg_program_free(p);
    p = dfg_program_new("rmsnorm_errors");
    g = dfg_graph_new(p, "g");
    dfg_rmsnorm(g, dfg_input(g, "ids", DFG_I32, DFG_SHAPE(2, 3)), dfg_input(g, "wi", DFG_I32, DFG_SHAPE(3)), 1e-5f);
    CHECK(dfg_graph_status(g) == DFG_ERR_SHAPE && contains(dfg_graph_error(g), "rmsnorm") &&
              contains(dfg_graph_error(g), "float"),
          "rmsnorm of an i32 input: %s", dfg_graph_error(g));
    dfg_program_free(p);
    p = dfg_program_new("rmsnorm_errors");
    g = dfg_graph_new(p, "g");
    dfg_rmsnorm(g, dfg_input(g, "a", DFG_F32, DFG_SHAPE(2, 3)), dfg_input(g, "wb", DFG_BF16, DFG_SHAPE(3)), 1e-5f);
    CHECK(dfg_graph_status(g) == DFG_ERR_SHAPE && contains(dfg_graph_error(g), "rmsnorm"),
          "rmsnorm with a bf16 weight on f32 rows: %s", dfg_graph_error(g));
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- softmax, log_softmax */
static void test_softmax(void) {
    enum { R = 6, V = 17 };
    float *x = rndn(R * V, 4);
    for (int j = 0; j < V; j++) x[4 * V + j] = 1000.0f + 0.5f * (float)j; /* overflows exp() unless shifted */
    for (int j = 0; j < V; j += 3) x[5 * V + j] = -INFINITY;                 /* masked entries */
    dfg_fx f;
    dfg_fx_begin(&f, "softmax");
    dfg_tensor *tx = dfg_fx_const_f32(&f, "x", DFG_SHAPE(2, 3, V), x);
    dfg_output(f.g, dfg_softmax(f.g, tx), "sm");
    dfg_output(f.g, dfg_log_softmax(f.g, tx), "lsm");
    if (dfg_fx_run(&f)) {
        float sm[R * V], lsm[R * V];
        dfg_fx_read(&f, "sm", sm, sizeof(sm));
        dfg_fx_read(&f, "lsm", lsm, sizeof(lsm));
        double es = 0, el = 0, esum = 0, else_ = 0;
        for (int r = 0; r < R; r++) {
            const float *xr = x + r * V;
            double m = -INFINITY, s = 0, rowsum = 0, esum_l = 0;
            for (int j = 0; j < V; j++) m = fmax(m, xr[j]);
            for (int j = 0; j < V; j++) s += exp(xr[j] - m);
            double lse = m + log(s);
            for (int j = 0; j < V; j++) {
                double p = exp(xr[j] - lse);
                es = fmax(es, fabs(sm[r * V + j] - p));
                rowsum += sm[r * V + j];
                esum_l += exp((double)lsm[r * V + j]);
                if (isinf(xr[j])) {
                    CHECK(sm[r * V + j] == 0.0f && lsm[r * V + j] == -INFINITY, "masked entry: %g %g", sm[r * V + j],
                          lsm[r * V + j]);
                    continue;
                }
                el = fmax(el, fabs(lsm[r * V + j] - (xr[j] - lse)));
            }
            esum = fmax(esum, fabs(rowsum - 1));
            else_ = fmax(else_, fabs(esum_l - 1));
        }
        CHECK(es < 1e-6, "softmax vs reference: %g", es);
        CHECK(esum < 1e-5, "softmax rows sum to 1 within %g", esum);
        CHECK(el < 1e-4, "log_softmax = x - logsumexp(x) within %g (the 1000s row included)", el);
        CHECK(else_ < 1e-5, "exp(log_softmax) rows sum to 1 within %g", else_);
    }
    dfg_fx_end(&f);
    free(x);
}

/* ---------------------------------------------------------------- attention */
/* Naive causal attention on separate q, k, v (B, T, C): scores, mask, softmax, weighted sum. */
static void ref_attention(const float *q, const float *k, const float *v, int B, int T, int C, int H, double *y) {
    int D = C / H;
    double *s = malloc(sizeof(double) * (size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float *qt = q + (b * T + t) * C + h * D;
                double m = -INFINITY, z = 0;
                for (int j = 0; j < T; j++) {
                    double d = 0;
                    for (int i = 0; i < D; i++) d += (double)qt[i] * k[(b * T + j) * C + h * D + i];
                    s[j] = j > t ? -INFINITY : d / sqrt((double)D);
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < T; j++) z += (s[j] = exp(s[j] - m));
                for (int i = 0; i < D; i++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++) acc += s[j] / z * v[(b * T + j) * C + h * D + i];
                    y[(b * T + t) * C + h * D + i] = acc;
                }
            }
    free(s);
}

static void test_attention(void) {
    enum { B = 2, T = 6, C = 12, H = 3 };
    float *q = rndn(B * T * C, 1.5f), *k = rndn(B * T * C, 1.5f), *v = rndn(B * T * C, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "attention");
    dfg_tensor *parts[3] = {dfg_fx_const_f32(&f, "q", DFG_SHAPE(B, T, C), q), dfg_fx_const_f32(&f, "k", DFG_SHAPE(B, T, C), k),
                            dfg_fx_const_f32(&f, "v", DFG_SHAPE(B, T, C), v)};
    dfg_output(f.g, dfg_attention(f.g, dfg_concat(f.g, parts, 3, 2), H), "y");
    if (dfg_fx_run(&f)) {
        float y[B * T * C];
        double r[B * T * C];
        ref_attention(q, k, v, B, T, C, H, r);
        dfg_fx_read(&f, "y", y, sizeof(y));
        double e = dfg_test_max_rel_err_ref(y, r, B * T * C, 1.0);
        CHECK(e < 1e-5, "attention vs naive causal attention: rel err %g", e);
        /* row 0 attends only to itself: y equals v exactly up to rounding */
        double e0 = 0;
        for (int i = 0; i < C; i++) e0 = fmax(e0, fabs(y[i] - v[i]));
        CHECK(e0 < 1e-6, "the first position returns its own value, err %g", e0);
    }
    dfg_fx_end(&f);
    free(q), free(k), free(v);
}

/* attention_prefix over G rows per prefix equals causal attention of the whole sequences (each
 * row's prefix copied in front of it), at the rows' own positions. */
static void test_attention_prefix(void) {
    enum { P = 2, G = 3, N = P * G, TP = 4, TC = 3, T = TP + TC, C = 12, H = 3 };
    float *pq = rndn(P * TP * C, 1.5f), *pk = rndn(P * TP * C, 1.5f), *pv = rndn(P * TP * C, 1);
    float *cq = rndn(N * TC * C, 1.5f), *ck = rndn(N * TC * C, 1.5f), *cv = rndn(N * TC * C, 1);
    float *fq = malloc(sizeof(float) * N * T * C), *fk = malloc(sizeof(float) * N * T * C), *fv = malloc(sizeof(float) * N * T * C);
    for (int b = 0; b < N; b++) /* whole sequence b: prefix b / G, then its own rows */
        for (int t = 0; t < T; t++) {
            size_t dst = ((size_t)b * T + t) * C, src = t < TP ? ((size_t)(b / G) * TP + t) * C : ((size_t)b * TC + t - TP) * C;
            memcpy(fq + dst, (t < TP ? pq : cq) + src, sizeof(float) * C);
            memcpy(fk + dst, (t < TP ? pk : ck) + src, sizeof(float) * C);
            memcpy(fv + dst, (t < TP ? pv : cv) + src, sizeof(float) * C);
        }
    dfg_fx f;
    dfg_fx_begin(&f, "attention_prefix");
    dfg_tensor *own[3] = {dfg_fx_const_f32(&f, "cq", DFG_SHAPE(N, TC, C), cq), dfg_fx_const_f32(&f, "ck", DFG_SHAPE(N, TC, C), ck),
                          dfg_fx_const_f32(&f, "cv", DFG_SHAPE(N, TC, C), cv)};
    dfg_tensor *pre[3] = {dfg_fx_const_f32(&f, "pq", DFG_SHAPE(P, TP, C), pq), dfg_fx_const_f32(&f, "pk", DFG_SHAPE(P, TP, C), pk),
                          dfg_fx_const_f32(&f, "pv", DFG_SHAPE(P, TP, C), pv)};
    dfg_output(f.g, dfg_attention_prefix(f.g, dfg_concat(f.g, own, 3, 2), dfg_concat(f.g, pre, 3, 2), H), "y");
    if (dfg_fx_run(&f)) {
        float y[N * TC * C];
        double *r = malloc(sizeof(double) * N * T * C), want[N * TC * C];
        ref_attention(fq, fk, fv, N, T, C, H, r);
        for (int b = 0; b < N; b++) memcpy(want + b * TC * C, r + ((size_t)b * T + TP) * C, sizeof(double) * TC * C);
        dfg_fx_read(&f, "y", y, sizeof(y));
        double e = dfg_test_max_rel_err_ref(y, want, N * TC * C, 1.0);
        CHECK(e < 1e-5, "attention_prefix vs naive attention of the whole sequences: rel err %g", e);
        free(r);
    }
    dfg_fx_end(&f);
    free(pq), free(pk), free(pv), free(cq), free(ck), free(cv), free(fq), free(fk), free(fv);
}

/* The KV cache is filled one token per run of a stage repeated T times: each run writes row pos
 * of the caches with dfg_slice_assign_at, attends with dfg_attention_cached, stores the output
 * row and advances pos. The rows must equal full causal attention over the same q, k, v. Cache
 * rows not yet written hold 50, which would swamp any score that read them. */
static void test_attention_cached(void) {
    enum { B = 2, T = 5, C = 8, H = 2, TMAX = T + 2 };
    float *q = rndn(B * T * C, 1), *k = rndn(B * T * C, 1), *v = rndn(B * T * C, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "attention_cached");
    dfg_program *p = f.p;
    dfg_graph *g = f.g;
    const dfg_test_kv kv = dfg_test_kv_state(p, B, T, TMAX, C, C);
    dfg_tensor *pos = kv.pos, *kc = kv.kc, *vc = kv.vc;
    dfg_tensor *tq = dfg_fx_const_f32(&f, "q", DFG_SHAPE(B, T, C), q), *tk = dfg_fx_const_f32(&f, "k", DFG_SHAPE(B, T, C), k),
               *tv = dfg_fx_const_f32(&f, "v", DFG_SHAPE(B, T, C), v);
    const int32_t base[B] = {0, T}; /* row b*T + pos of the (B*T, C) tables */
    dfg_tensor *ids = dfg_add(g, dfg_const(p, "base", DFG_I32, DFG_SHAPE(B, 1), base), pos); /* (B,1) */
    dfg_tensor *rows[3];
    dfg_tensor *tabs[3] = {tq, tk, tv};
    for (int i = 0; i < 3; i++) rows[i] = dfg_embed(g, dfg_reshape(g, tabs[i], DFG_SHAPE(B * T, C)), ids); /* (B,1,C) */
    dfg_slice_assign_at(g, kc, rows[1], 1, pos);
    dfg_slice_assign_at(g, vc, rows[2], 1, pos);
    dfg_test_kv_store(g, &kv, dfg_attention_cached(g, rows[0], kc, vc, pos, H)); /* (B,1,C) */
    dfg_stage_graph(p, g, T);
    /* a second stage: full causal attention on the same tensors */
    dfg_graph *g2 = dfg_graph_new(p, "full");
    dfg_output(g2, dfg_attention(g2, dfg_concat(g2, tabs, 3, 2), H), "full");
    dfg_stage_graph(p, g2, 1);
    /* a third: a chunk of two queries at positions 3 and 4 against the caches filled above */
    dfg_graph *g3 = dfg_graph_new(p, "chunk");
    dfg_tensor *three = dfg_const(p, "three", DFG_I32, DFG_SCALAR, &(int32_t){3});
    dfg_output(g3, dfg_attention_cached(g3, dfg_slice(g3, tq, 1, 3, 2), kc, vc, three, H), "chunk");
    dfg_stage_graph(p, g3, 1);
    if (dfg_fx_create(&f, 0) && dfg_fx_step(&f)) {
        float yo[B * T * C], yf[B * T * C], yc[B * 2 * C];
        double r[B * T * C], rc[B * 2 * C];
        int32_t pv;
        ref_attention(q, k, v, B, T, C, H, r);
        dfg_fx_read(&f, "out", yo, sizeof(yo));
        dfg_fx_read(&f, "full", yf, sizeof(yf));
        dfg_fx_read(&f, "chunk", yc, sizeof(yc));
        dfg_fx_read(&f, "pos", &pv, sizeof(pv));
        CHECK(pv == T, "pos advanced once per run: %d, want %d", pv, T);
        double e = dfg_test_max_rel_err_ref(yo, r, B * T * C, 1.0);
        double ef = dfg_test_max_rel_err_ref(yf, r, B * T * C, 1.0);
        CHECK(e < 1e-5, "cached attention, one token per run, vs naive causal attention: rel err %g", e);
        CHECK(ef < 1e-5, "full attention vs naive: rel err %g", ef);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 2 * C; i++) rc[b * 2 * C + i] = r[(b * T + 3) * C + i];
        double ec = dfg_test_max_rel_err_ref(yc, rc, B * 2 * C, 1.0);
        CHECK(ec < 1e-5, "a 2-query chunk at pos 3 sees rows 0..3 and 0..4: rel err %g", ec);
        float kv[B * TMAX * C];
        dfg_fx_read(&f, "kc", kv, sizeof(kv));
        CHECK(kv[(0 * TMAX + 2) * C + 1] == k[(0 * T + 2) * C + 1] && kv[(1 * TMAX + 4) * C] == k[(1 * T + 4) * C],
              "cache rows hold the written keys");
        CHECK(kv[(1 * TMAX + T) * C] == 50.0f, "rows past the last write keep their value");
    }
    dfg_fx_end(&f);
    free(q), free(k), free(v);
}

/* pos + Tq beyond the cache, or pos < 0, fails the step with DFG_ERR_RANGE and says why. */
static void test_attention_cached_range(void) {
    enum { C = 4, TMAX = 4 };
    dfg_fx f;
    dfg_fx_begin(&f, "attention_cached_range");
    dfg_tensor *q = dfg_input(f.g, "q", DFG_F32, DFG_SHAPE(1, 2, C));
    dfg_tensor *pos = dfg_input(f.g, "pos", DFG_I32, DFG_SCALAR);
    dfg_tensor *kc = dfg_state(f.p, "kc", DFG_F32, DFG_SHAPE(1, TMAX, C), DFG_ROLE_KV_CACHE, dfg_init_ones());
    dfg_tensor *vc = dfg_state(f.p, "vc", DFG_F32, DFG_SHAPE(1, TMAX, C), DFG_ROLE_KV_CACHE, dfg_init_ones());
    dfg_output(f.g, dfg_name(dfg_attention_cached(f.g, q, kc, vc, pos, 2), "decode_attn"), "y");
    if (dfg_fx_create(&f, 1)) {
        const int32_t ok = TMAX - 2, over = TMAX - 1, neg = -1;
        dfg_fx_write(&f, "pos", &ok, sizeof(ok));
        dfg_fx_step(&f); /* the last two rows: fits exactly */
        float y[2 * C];
        dfg_fx_read(&f, "y", y, sizeof(y));
        CHECK(y[0] == 1.0f && y[2 * C - 1] == 1.0f, "all-ones values give ones: %g %g", y[0], y[2 * C - 1]);
        dfg_fx_write(&f, "pos", &over, sizeof(over));
        dfg_status st = dfg_runtime_step(f.rt);
        const char *msg = dfg_runtime_error(f.rt);
        CHECK(st == DFG_ERR_RANGE, "pos %d with 2 queries and %d rows: status %s", over, TMAX, dfg_status_name(st));
        CHECK(contains(msg, "attention_cached") && contains(msg, "position 3") && contains(msg, "cache length 4"),
              "message names the op, the position and the cache length: %s", msg);
        CHECK(dfg_runtime_step(f.rt) == DFG_ERR_RANGE, "a failed runtime stays failed");
        CHECK(dfg_runtime_init_state(f.rt) == DFG_OK, "re-initialising clears the failure");
        dfg_fx_write(&f, "pos", &neg, sizeof(neg));
        st = dfg_runtime_step(f.rt);
        CHECK(st == DFG_ERR_RANGE && contains(dfg_runtime_error(f.rt), "position -1"), "pos -1: %s / %s",
              dfg_status_name(st), dfg_runtime_error(f.rt));
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- embed and take */
static void test_embed_take(void) {
    enum { V = 7, C = 5, R = 6 };
    float *w = rndn(V * C, 1), *x = rndn(R * V, 1);
    int32_t ids[R], idx[R];
    for (int i = 0; i < R; i++) ids[i] = dfg_test_int(0, V - 1), idx[i] = dfg_test_int(0, V - 1);
    ids[0] = 0, ids[1] = V - 1, idx[2] = V - 1; /* both ends of the range */
    dfg_fx f;
    dfg_fx_begin(&f, "embed");
    dfg_tensor *tids = dfg_input(f.g, "ids", DFG_I32, DFG_SHAPE(2, 3));
    dfg_tensor *tidx = dfg_input(f.g, "idx", DFG_I32, DFG_SHAPE(2, 3));
    dfg_tensor *e = dfg_output(f.g, dfg_embed(f.g, dfg_fx_const_f32(&f, "w", DFG_SHAPE(V, C), w), tids), "e");
    dfg_output(f.g, dfg_take(f.g, dfg_fx_const_f32(&f, "x", DFG_SHAPE(2, 3, V), x), tidx), "t");
    dfg_shape es = dfg_tensor_shape(e);
    CHECK(es.rank == 3 && es.d[0] == 2 && es.d[1] == 3 && es.d[2] == C, "embed (V,C) by (2,3) ids is (2,3,C)");
    if (dfg_fx_create(&f, 1)) {
        dfg_fx_write(&f, "ids", ids, sizeof(ids));
        dfg_fx_write(&f, "idx", idx, sizeof(idx));
        if (dfg_fx_step(&f)) {
            float ye[R * C], yt[R];
            dfg_fx_read(&f, "e", ye, sizeof(ye));
            dfg_fx_read(&f, "t", yt, sizeof(yt));
            int bad = 0;
            for (int i = 0; i < R; i++) {
                bad += memcmp(ye + i * C, w + ids[i] * C, sizeof(float) * C) != 0;
                bad += yt[i] != x[i * V + idx[i]];
            }
            CHECK(bad == 0, "embed/take: %d wrong rows", bad);
        }
        /* an id out of range fails the step and names the id tensor and the bad index */
        const int32_t bad_ids[R] = {0, 1, 2, 3, V, 1};
        dfg_fx_write(&f, "ids", bad_ids, sizeof(bad_ids));
        dfg_status st = dfg_runtime_step(f.rt);
        const char *msg = dfg_runtime_error(f.rt);
        CHECK(st == DFG_ERR_RANGE, "embed id %d of %d rows: %s", V, V, dfg_status_name(st));
        CHECK(contains(msg, "embed") && contains(msg, "'ids'") && contains(msg, "index 7") && contains(msg, "position 4"),
              "embed message names the op, the tensor, the id and where: %s", msg);
        dfg_runtime_init_state(f.rt);
        const int32_t neg_idx[R] = {0, 0, 0, 0, 0, -1};
        dfg_fx_write(&f, "ids", ids, sizeof(ids));
        dfg_fx_write(&f, "idx", neg_idx, sizeof(neg_idx));
        st = dfg_runtime_step(f.rt);
        msg = dfg_runtime_error(f.rt);
        CHECK(st == DFG_ERR_RANGE, "take index -1: %s", dfg_status_name(st));
        CHECK(contains(msg, "take") && contains(msg, "'idx'") && contains(msg, "index -1"),
              "take message names the op, the tensor and the index: %s", msg);
    }
    dfg_fx_end(&f);
    free(w), free(x);
}

int main(void) {
    dfg_test_init("test_ops_nn");
    test_matmul();
    test_bias_add();
    test_layernorm();
    test_rmsnorm();
    test_softmax();
    test_attention();
    test_attention_prefix();
    test_attention_cached();
    test_attention_cached_range();
    test_embed_take();
    return dfg_test_finish();
}
