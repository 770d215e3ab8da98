/* test_autodiff.c - the structure of gradients, checked by value on the CPU runtime (the
 * finite-difference checks of each op's rule live in test_gradcheck*.c): contributions of a
 * tensor used twice add up; a parameter the loss ignores gets exact zeros; gradients pass
 * through reshape views of parameters and through reads of a STATE after an assign; micro-batch
 * accumulation over a stage repeated 4 times gives 4x; argmax, sample and equal stop the
 * gradient without an error; minimum and maximum split a tie's gradient in half; and the
 * imperative-state semantics of the builder: a call after dfg_assign reads the new value, and a
 * KV cache written in a graph is read back by attention_cached in the same graph. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "testutil.h"

/* The sum of every element: a scalar loss. */
static dfg_tensor *total(dfg_graph *g, dfg_tensor *x) { return dfg_sum(g, dfg_reshape(g, x, DFG_SHAPE(-1)), 0); }

static double max_err(const float *y, const float *want, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)y[i] - want[i]);
        if (isnan(d)) return NAN;
        e = fmax(e, d);
    }
    return e;
}

/* ---------------------------------------------------------------- fan-out, unused params, views */
static void test_structure(void) {
    enum { N = 6 };
    float pv[N], c[12], pw[12];
    dfg_test_fill_normal(pv, N, 1), dfg_test_fill_normal(c, 12, 1), dfg_test_fill_normal(pw, 12, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "structure");
    dfg_graph *g = f.g;
    dfg_tensor *p = dfg_param(f.p, "p", DFG_F32, DFG_SHAPE(2, 3), dfg_init_zeros());
    dfg_tensor *q = dfg_param(f.p, "q", DFG_F32, DFG_SHAPE(4, 1), dfg_init_normal(0, 1)); /* unused */
    dfg_tensor *w = dfg_param(f.p, "w", DFG_F32, DFG_SHAPE(2, 6), dfg_init_zeros());
    dfg_tensor *cc = dfg_const(f.p, "c", DFG_F32, DFG_SHAPE(3, 4), c);
    /* y = 3p is used three times: twice in y*y and once alone, so dL/dp = 3 (2y + 1) = 18p + 3 */
    dfg_tensor *y = dfg_scale(g, p, 3.0f);
    dfg_tensor *l1 = dfg_add(g, total(g, dfg_mul(g, y, y)), total(g, y));
    /* w enters only through reshape views (one of a view): dL/dw = c laid out as w */
    dfg_tensor *wv = dfg_reshape(g, dfg_reshape(g, w, DFG_SHAPE(12)), DFG_SHAPE(3, 4));
    dfg_tensor *loss = dfg_add(g, l1, total(g, dfg_mul(g, wv, cc)));
    dfg_tensor *wrt[3] = {p, q, w}, *grads[3] = {NULL, NULL, NULL};
    CHECK(dfg_backward(g, loss, wrt, 3, grads) == DFG_OK, "backward: %s", dfg_graph_error(g));
    for (int i = 0; i < 3 && grads[i]; i++) {
        dfg_shape gs = dfg_tensor_shape(grads[i]), ws = dfg_tensor_shape(wrt[i]);
        bool same = gs.rank == ws.rank;
        for (int d = 0; same && d < gs.rank; d++) same = gs.d[d] == ws.d[d];
        CHECK(same && dfg_tensor_dtype(grads[i]) == DFG_F32, "grads[%d] has the shape of wrt[%d]", i, i);
    }
    dfg_output(g, grads[0], "dp");
    dfg_output(g, grads[1], "dq");
    dfg_output(g, grads[2], "dw");
    if (dfg_fx_create(&f, 1)) {
        dfg_fx_write(&f, "p", pv, sizeof(pv));
        dfg_fx_write(&f, "w", pw, sizeof(pw));
        if (dfg_fx_step(&f)) {
            float dp[N], dq[4], dw[12], want[N];
            dfg_fx_read(&f, "dp", dp, sizeof(dp));
            dfg_fx_read(&f, "dq", dq, sizeof(dq));
            dfg_fx_read(&f, "dw", dw, sizeof(dw));
            for (int i = 0; i < N; i++) want[i] = 18.0f * pv[i] + 3.0f;
            double e = max_err(dp, want, N);
            CHECK(e < 1e-5, "a tensor used three times gets the sum of its contributions: err %g", e);
            CHECK(dq[0] == 0.0f && dq[1] == 0.0f && dq[2] == 0.0f && dq[3] == 0.0f, "an unused param gets zeros: %g",
                  dq[0]);
            CHECK(memcmp(dw, c, sizeof(c)) == 0, "through two reshape views dL/dw is c, element for element");
        }
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- states read after an assign */
static void test_state_reads(void) {
    enum { N = 5 };
    float x[N], wv[N];
    dfg_test_fill_normal(x, N, 1), dfg_test_fill_normal(wv, N, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "state_reads");
    dfg_graph *g = f.g;
    dfg_tensor *w = dfg_param(f.p, "w", DFG_F32, DFG_SHAPE(N), dfg_init_zeros());
    dfg_tensor *s = dfg_state(f.p, "s", DFG_F32, DFG_SHAPE(N), DFG_ROLE_NONE, dfg_init_ones());
    dfg_tensor *side = dfg_state(f.p, "side", DFG_F32, DFG_SHAPE(N), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *xin = dfg_input(g, "x", DFG_F32, DFG_SHAPE(N));
    dfg_assign(g, s, xin);
    /* an assign that depends on w but is not between w and the loss is not an error */
    dfg_assign(g, side, dfg_scale(g, w, 2.0f));
    /* L = sum(w * s) + sum(w * w * s'), with s' a view of s after the write: dL/dw = s + 2 w s */
    dfg_tensor *sv = dfg_reshape(g, dfg_reshape(g, s, DFG_SHAPE(1, N)), DFG_SHAPE(N));
    dfg_tensor *loss = dfg_add(g, total(g, dfg_mul(g, w, s)), total(g, dfg_mul(g, dfg_mul(g, w, w), sv)));
    dfg_tensor *dw = NULL;
    CHECK(dfg_backward(g, loss, &w, 1, &dw) == DFG_OK, "backward with a state read after its assign: %s",
          dfg_graph_error(g));
    dfg_output(g, dw, "dw");
    if (dfg_fx_create(&f, 1)) {
        dfg_fx_write(&f, "w", wv, sizeof(wv));
        dfg_fx_write(&f, "x", x, sizeof(x));
        if (dfg_fx_step(&f)) {
            float d[N], want[N], sd[N];
            dfg_fx_read(&f, "dw", d, sizeof(d));
            dfg_fx_read(&f, "side", sd, sizeof(sd));
            for (int i = 0; i < N; i++) want[i] = x[i] + 2.0f * wv[i] * x[i];
            double e = max_err(d, want, N);
            CHECK(e < 1e-5, "the gradient uses the state's new value (x), not its old one (1): err %g", e);
            CHECK(sd[0] == 2.0f * wv[0] && sd[N - 1] == 2.0f * wv[N - 1], "the side assign ran");
        }
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- micro-batch accumulation */
static void test_accumulate(void) {
    enum { N = 5, REPEAT = 4 };
    float x[N], pv[N], bv[3];
    dfg_test_fill_normal(x, N, 1), dfg_test_fill_normal(pv, N, 1), dfg_test_fill_normal(bv, 3, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "accumulate");
    dfg_graph *g = f.g;
    dfg_tensor *p = dfg_param(f.p, "p", DFG_F32, DFG_SHAPE(N), dfg_init_zeros());
    dfg_tensor *b = dfg_param(f.p, "b", DFG_F32, DFG_SHAPE(3), dfg_init_zeros());
    dfg_tensor *acc[2] = {dfg_state(f.p, "grad.p", DFG_F32, DFG_SHAPE(N), DFG_ROLE_GRAD, dfg_init_zeros()),
                          dfg_state(f.p, "grad.b", DFG_F32, DFG_SHAPE(3), DFG_ROLE_GRAD, dfg_init_zeros())};
    dfg_tensor *cx = dfg_const(f.p, "x", DFG_F32, DFG_SHAPE(N), x);
    /* L = sum(p^2 x) + sum(b^3): dL/dp = 2 p x, dL/db = 3 b^2 */
    dfg_tensor *loss = dfg_add(g, total(g, dfg_mul(g, dfg_mul(g, p, p), cx)), total(g, dfg_mul(g, dfg_mul(g, b, b), b)));
    dfg_tensor *wrt[2] = {p, b};
    CHECK(dfg_backward_accumulate(g, loss, wrt, 2, acc) == DFG_OK, "backward_accumulate: %s", dfg_graph_error(g));
    if (dfg_fx_create(&f, REPEAT)) {
        dfg_fx_write(&f, "p", pv, sizeof(pv));
        dfg_fx_write(&f, "b", bv, sizeof(bv));
        for (int step = 1; step <= 2; step++) {
            if (!dfg_fx_step(&f)) break;
            float gp[N], gb[3], wp[N], wb[3];
            dfg_fx_read(&f, "grad.p", gp, sizeof(gp));
            dfg_fx_read(&f, "grad.b", gb, sizeof(gb));
            for (int i = 0; i < N; i++) wp[i] = (float)(step * REPEAT) * 2.0f * pv[i] * x[i];
            for (int i = 0; i < 3; i++) wb[i] = (float)(step * REPEAT) * 3.0f * bv[i] * bv[i];
            double e = fmax(max_err(gp, wp, N), max_err(gb, wb, 3));
            CHECK(e < 1e-4, "after %d step(s) of %d runs the accumulators hold %dx the gradient: err %g", step, REPEAT,
                  step * REPEAT, e);
        }
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- gradients stop at argmax, sample, equal */
static void test_stops(void) {
    enum { R = 4, V = 6 };
    float lv[R * V], pv[R * V], cv[R * V];
    dfg_test_fill_normal(lv, R * V, 1), dfg_test_fill_normal(pv, R * V, 1);
    for (int i = 0; i < R * V; i++) cv[i] = i % 3 ? pv[i] : pv[i] + 1.0f; /* equal in 2 of 3 places */
    dfg_fx f;
    dfg_fx_begin(&f, "stops");
    dfg_graph *g = f.g;
    dfg_tensor *L = dfg_param(f.p, "L", DFG_F32, DFG_SHAPE(R, V), dfg_init_zeros());
    dfg_tensor *P = dfg_param(f.p, "P", DFG_F32, DFG_SHAPE(R, V), dfg_init_zeros());
    dfg_tensor *rng = dfg_state(f.p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros());
    dfg_tensor *lsm = dfg_log_softmax(g, L);
    dfg_tensor *am = dfg_output(g, dfg_argmax(g, L), "am");
    dfg_tensor *tok = dfg_output(g, dfg_sample(g, L, rng, 1.0f, 0), "tok");
    /* L1 = sum of log p(argmax) + log p(sampled): each term's gradient is onehot - softmax */
    dfg_tensor *l1 = dfg_add(g, total(g, dfg_take(g, lsm, am)), total(g, dfg_take(g, lsm, tok)));
    /* L2 = sum(P * [P == c]): the mask is a constant, so dL2/dP = [P == c] */
    dfg_tensor *mask = dfg_equal(g, P, dfg_const(f.p, "c", DFG_F32, DFG_SHAPE(R, V), cv));
    dfg_tensor *l2 = total(g, dfg_mul(g, P, mask));
    dfg_tensor *wrt[2] = {L, P}, *grads[2] = {NULL, NULL};
    CHECK(dfg_backward(g, dfg_add(g, l1, l2), wrt, 2, grads) == DFG_OK, "argmax/sample/equal stop gradients: %s",
          dfg_graph_error(g));
    dfg_output(g, grads[0], "dL");
    dfg_output(g, grads[1], "dP");
    if (dfg_fx_create(&f, 1)) {
        dfg_fx_write(&f, "L", lv, sizeof(lv));
        dfg_fx_write(&f, "P", pv, sizeof(pv));
        if (dfg_fx_step(&f)) {
            float dL[R * V], dP[R * V], want[R * V];
            int32_t a[R], t[R];
            dfg_fx_read(&f, "dL", dL, sizeof(dL));
            dfg_fx_read(&f, "dP", dP, sizeof(dP));
            dfg_fx_read(&f, "am", a, sizeof(a));
            dfg_fx_read(&f, "tok", t, sizeof(t));
            for (int r = 0; r < R; r++) {
                double m = -INFINITY, z = 0;
                for (int j = 0; j < V; j++) m = fmax(m, lv[r * V + j]);
                for (int j = 0; j < V; j++) z += exp(lv[r * V + j] - m);
                for (int j = 0; j < V; j++)
                    want[r * V + j] = (float)((j == a[r]) + (j == t[r]) - 2.0 * exp(lv[r * V + j] - m) / z);
            }
            double e = max_err(dL, want, R * V);
            CHECK(e < 1e-5, "d/dL of log p(argmax) + log p(sample) = onehots - 2 softmax: err %g", e);
            for (int i = 0; i < R * V; i++) want[i] = i % 3 ? 1.0f : 0.0f;
            CHECK(memcmp(dP, want, sizeof(want)) == 0, "d/dP of sum(P * [P == c]) is exactly the mask");
        }
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- imperative state */
static void test_imperative(void) {
    enum { N = 3 };
    const float x[N] = {1.5f, -2.0f, 4.0f};
    dfg_fx f;
    dfg_fx_begin(&f, "imperative");
    dfg_graph *g = f.g;
    dfg_tensor *s = dfg_state(f.p, "s", DFG_F32, DFG_SHAPE(N), DFG_ROLE_NONE, dfg_init_constant(5.0f));
    dfg_tensor *cx = dfg_const(f.p, "x", DFG_F32, DFG_SHAPE(N), x);
    dfg_output(g, dfg_add_scalar(g, s, 1.0f), "before");      /* s as the step found it */
    dfg_assign(g, s, cx);                                      /* s = x */
    dfg_output(g, dfg_add_scalar(g, s, 1.0f), "after");       /* x + 1 */
    dfg_accumulate(g, s, cx);                                  /* s = 2x */
    dfg_output(g, dfg_reshape(g, s, DFG_SHAPE(N, 1)), "view"); /* a view of the latest value: 2x */
    dfg_output(g, dfg_scale(g, s, 1.0f), "after2");            /* 2x */
    if (dfg_fx_create(&f, 1)) {
        for (int step = 1; step <= 2; step++) {
            if (!dfg_fx_step(&f)) break;
            float b[N], a[N], v[N], a2[N], sv[N];
            dfg_fx_read(&f, "before", b, sizeof(b));
            dfg_fx_read(&f, "after", a, sizeof(a));
            dfg_fx_read(&f, "view", v, sizeof(v));
            dfg_fx_read(&f, "after2", a2, sizeof(a2));
            dfg_fx_read(&f, "s", sv, sizeof(sv));
            int bad = 0;
            for (int i = 0; i < N; i++) {
                float old = step == 1 ? 5.0f : 2.0f * x[i]; /* the previous step left 2x behind */
                bad += b[i] != old + 1.0f;
                bad += a[i] != x[i] + 1.0f;
                bad += v[i] != 2.0f * x[i] || a2[i] != 2.0f * x[i] || sv[i] != 2.0f * x[i];
            }
            CHECK(bad == 0, "step %d: reads see the value of the latest write before them (%d wrong)", step, bad);
        }
    }
    dfg_fx_end(&f);
}

/* A KV cache written in a graph and read by attention_cached in the same graph: two chunks, each
 * written with slice_assign and then attended, must equal full causal attention. Unwritten
 * rows hold 50, which would dominate any score that read them. */
static void test_kv_cache_sequence(void) {
    enum { B = 2, T = 5, C = 8, H = 2, TMAX = 8, T0 = 3 };
    float q[B * T * C], k[B * T * C], v[B * T * C];
    dfg_test_fill_normal(q, B * T * C, 1), dfg_test_fill_normal(k, B * T * C, 1), dfg_test_fill_normal(v, B * T * C, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "kv_sequence");
    dfg_graph *g = f.g;
    dfg_tensor *tq = dfg_const(f.p, "q", DFG_F32, DFG_SHAPE(B, T, C), q);
    dfg_tensor *tk = dfg_const(f.p, "k", DFG_F32, DFG_SHAPE(B, T, C), k);
    dfg_tensor *tv = dfg_const(f.p, "v", DFG_F32, DFG_SHAPE(B, T, C), v);
    dfg_tensor *kc = dfg_state(f.p, "kc", DFG_F32, DFG_SHAPE(B, TMAX, C), DFG_ROLE_KV_CACHE, dfg_init_constant(50));
    dfg_tensor *vc = dfg_state(f.p, "vc", DFG_F32, DFG_SHAPE(B, TMAX, C), DFG_ROLE_KV_CACHE, dfg_init_constant(50));
    dfg_tensor *pos0 = dfg_const(f.p, "pos0", DFG_I32, DFG_SCALAR, &(int32_t){0});
    dfg_tensor *pos1 = dfg_const(f.p, "pos1", DFG_I32, DFG_SCALAR, &(int32_t){T0});
    dfg_slice_assign(g, kc, dfg_slice(g, tk, 1, 0, T0), 1, 0);
    dfg_slice_assign(g, vc, dfg_slice(g, tv, 1, 0, T0), 1, 0);
    dfg_tensor *y0 = dfg_attention_cached(g, dfg_slice(g, tq, 1, 0, T0), kc, vc, pos0, H);
    dfg_slice_assign(g, kc, dfg_slice(g, tk, 1, T0, T - T0), 1, T0);
    dfg_slice_assign(g, vc, dfg_slice(g, tv, 1, T0, T - T0), 1, T0);
    dfg_tensor *y1 = dfg_attention_cached(g, dfg_slice(g, tq, 1, T0, T - T0), kc, vc, pos1, H);
    dfg_output(g, dfg_concat(g, (dfg_tensor *[]){y0, y1}, 2, 1), "cached");
    dfg_output(g, dfg_attention(g, dfg_concat(g, (dfg_tensor *[]){tq, tk, tv}, 3, 2), H), "full");
    if (dfg_fx_create(&f, 1) && dfg_fx_step(&f)) {
        float yc[B * T * C], yf[B * T * C];
        dfg_fx_read(&f, "cached", yc, sizeof(yc));
        dfg_fx_read(&f, "full", yf, sizeof(yf));
        double e = max_err(yc, yf, B * T * C);
        CHECK(e < 1e-5, "attention over the rows written earlier in the graph equals full attention: err %g", e);
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- ties of minimum and maximum */
/* L = sum(w1 * min(P, c)) + sum(w2 * max(P, Q)) with c and Q equal to P in some places: the
 * gradient goes to the chosen input, and a tie splits it in half between both (torch's rule;
 * GRPO's min(rho A, clamp(rho) A) ties at every first pass, where the whole gradient to both
 * sides would double it). */
static void test_minmax_ties(void) {
    enum { R = 3, V = 8, NV = R * V };
    float pv[NV], qv[NV], cv[NV], w1[NV], w2[NV];
    dfg_test_fill_normal(pv, NV, 1), dfg_test_fill_normal(w1, NV, 1), dfg_test_fill_normal(w2, NV, 1);
    for (int i = 0; i < NV; i++) {
        cv[i] = pv[i] + (float)(i % 3 - 1); /* below, equal, above */
        qv[i] = pv[i] + (float)((i / 3) % 3 - 1);
    }
    dfg_fx f;
    dfg_fx_begin(&f, "minmax_ties");
    dfg_graph *g = f.g;
    dfg_tensor *P = dfg_param(f.p, "P", DFG_F32, DFG_SHAPE(R, V), dfg_init_zeros());
    dfg_tensor *Q = dfg_param(f.p, "Q", DFG_F32, DFG_SHAPE(R, V), dfg_init_zeros());
    dfg_tensor *mn = dfg_minimum(g, P, dfg_const(f.p, "c", DFG_F32, DFG_SHAPE(R, V), cv));
    dfg_tensor *mx = dfg_maximum(g, P, Q);
    dfg_tensor *l = dfg_add(g, total(g, dfg_mul(g, mn, dfg_const(f.p, "w1", DFG_F32, DFG_SHAPE(R, V), w1))),
                            total(g, dfg_mul(g, mx, dfg_const(f.p, "w2", DFG_F32, DFG_SHAPE(R, V), w2))));
    dfg_tensor *wrt[2] = {P, Q}, *grads[2] = {NULL, NULL};
    CHECK(dfg_backward(g, l, wrt, 2, grads) == DFG_OK, "min/max backward: %s", dfg_graph_error(g));
    dfg_output(g, grads[0], "dP");
    dfg_output(g, grads[1], "dQ");
    if (dfg_fx_create(&f, 1)) {
        dfg_fx_write(&f, "P", pv, sizeof(pv));
        dfg_fx_write(&f, "Q", qv, sizeof(qv));
        if (dfg_fx_step(&f)) {
            float dP[NV], dQ[NV], wantP[NV], wantQ[NV];
            dfg_fx_read(&f, "dP", dP, sizeof(dP));
            dfg_fx_read(&f, "dQ", dQ, sizeof(dQ));
            for (int i = 0; i < NV; i++) {
                float share_min = cv[i] > pv[i] ? 1.0f : cv[i] == pv[i] ? 0.5f : 0.0f; /* P's share of min */
                float share_max = qv[i] < pv[i] ? 1.0f : qv[i] == pv[i] ? 0.5f : 0.0f; /* P's share of max */
                wantP[i] = share_min * w1[i] + share_max * w2[i];
                wantQ[i] = (1.0f - share_max) * w2[i];
            }
            CHECK(max_err(dP, wantP, NV) < 1e-6, "d/dP: ties split in half: err %g", max_err(dP, wantP, NV));
            CHECK(max_err(dQ, wantQ, NV) < 1e-6, "d/dQ: ties split in half: err %g", max_err(dQ, wantQ, NV));
        }
    }
    dfg_fx_end(&f);
}

int main(void) {
    dfg_test_init("test_autodiff");
    test_structure();
    test_state_reads();
    test_accumulate();
    test_stops();
    test_minmax_ties();
    test_imperative();
    test_kv_cache_sequence();
    return dfg_test_finish();
}
