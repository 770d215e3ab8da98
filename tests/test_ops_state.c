/* test_ops_state.c - ops that write persistent tensors, run on the CPU runtime and read back
 * after the step: AdamW over several steps against torch.optim.AdamW's formula in double, its
 * step-counter check, clip_grad_norm (the norm, the scale, in-place STATE grads versus new TEMP
 * grads), and assign / accumulate / assign_fill / slice_assign (static and run-time start; one
 * start a row along axis 1, for slice_assign_at and its reading side slice_at). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "testutil.h"

static dfg_tensor *state_f32(dfg_fx *f, const char *name, dfg_shape s, dfg_init init) {
    return dfg_state(f->p, name, DFG_F32, s, DFG_ROLE_NONE, init);
}

/* ---------------------------------------------------------------- AdamW */
/* torch.optim.AdamW, one step at 1-based step t, in double:
 *   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
static void ref_adamw(double *p, double *m, double *v, const float *g, int n, int t, dfg_adamw_config c) {
    double bc1 = 1 - pow(c.beta1, t), bc2 = 1 - pow(c.beta2, t);
    for (int i = 0; i < n; i++) {
        p[i] *= 1 - (double)c.lr * c.weight_decay;
        m[i] = c.beta1 * m[i] + (1 - (double)c.beta1) * g[i];
        v[i] = c.beta2 * v[i] + (1 - (double)c.beta2) * g[i] * (double)g[i];
        p[i] -= c.lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + c.eps);
    }
}

/* max |a - b| / max(1, |b|): float rounding of values up to a few units, absolute below 1 */
static double max_abs_diff(const float *a, const double *b, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        if (isnan(d)) return NAN;
        e = fmax(e, d);
    }
    return e;
}

/* with_lr: the rate comes from an f32 scalar input, a different one each step (a schedule's),
 * and the attribute's (set far off) must not be used */
static void test_adamw(bool with_lr) {
    enum { N0 = 12, N1 = 5, STEPS = 5 };
    const int n[2] = {N0, N1};
    const dfg_adamw_config cfg = {.lr = with_lr ? 7.0f : 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                                  .weight_decay = 0.1f};
    static const char *pn[2] = {"w", "b"}, *gn[2] = {"gw", "gb"}, *mn[2] = {"mw", "mb"}, *vn[2] = {"vw", "vb"};
    dfg_fx f;
    dfg_fx_begin(&f, "adamw");
    dfg_tensor *params[2], *grads[2], *m[2], *v[2];
    dfg_shape shapes[2] = {DFG_SHAPE(3, 4), DFG_SHAPE(N1)};
    for (int i = 0; i < 2; i++) {
        params[i] = dfg_param(f.p, pn[i], DFG_F32, shapes[i], dfg_init_normal(0, 1));
        grads[i] = dfg_input(f.g, gn[i], DFG_F32, shapes[i]);
        m[i] = dfg_state(f.p, mn[i], DFG_F32, shapes[i], DFG_ROLE_OPTIM, dfg_init_zeros());
        v[i] = dfg_state(f.p, vn[i], DFG_F32, shapes[i], DFG_ROLE_OPTIM, dfg_init_zeros());
    }
    dfg_tensor *step = dfg_state(f.p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, dfg_init_zeros());
    dfg_assign(f.g, step, dfg_add(f.g, step, dfg_fill(f.g, DFG_I32, DFG_SCALAR, 1)));
    dfg_tensor *lr = with_lr ? dfg_input(f.g, "lr", DFG_F32, DFG_SCALAR) : NULL;
    dfg_status built = with_lr ? dfg_adamw_lr(f.g, params, grads, m, v, 2, step, lr, cfg)
                               : dfg_adamw(f.g, params, grads, m, v, 2, step, cfg);
    CHECK(built == DFG_OK, "adamw: %s", dfg_graph_error(f.g));
    if (dfg_fx_create(&f, 1)) {
        double rp[2][N0], rm[2][N0] = {{0}}, rv[2][N0] = {{0}};
        float buf[N0];
        for (int i = 0; i < 2; i++) { /* start from the runtime's initial values */
            dfg_fx_read(&f, pn[i], buf, sizeof(float) * (size_t)n[i]);
            for (int j = 0; j < n[i]; j++) rp[i][j] = buf[j];
        }
        for (int t = 1; t <= STEPS; t++) {
            dfg_adamw_config ct = cfg;
            if (with_lr) { /* a linear decay with a warm-up step, as a schedule's rates go */
                ct.lr = t == 1 ? 0.025f : 0.05f * (float)(STEPS + 1 - t) / STEPS;
                dfg_fx_write(&f, "lr", &ct.lr, sizeof(float));
            }
            for (int i = 0; i < 2; i++) {
                float g[N0];
                dfg_test_fill_normal(g, n[i], t == 3 ? 10.0f : 1.0f); /* one large step, so v matters */
                if (t == 4) g[0] = 0.0f;                                /* a zero gradient still decays */
                dfg_fx_write(&f, gn[i], g, sizeof(float) * (size_t)n[i]);
                ref_adamw(rp[i], rm[i], rv[i], g, n[i], t, ct);
            }
            if (!dfg_fx_step(&f)) break;
            for (int i = 0; i < 2; i++) {
                float pv[N0], mv[N0], vv[N0];
                dfg_fx_read(&f, pn[i], pv, sizeof(float) * (size_t)n[i]);
                dfg_fx_read(&f, mn[i], mv, sizeof(float) * (size_t)n[i]);
                dfg_fx_read(&f, vn[i], vv, sizeof(float) * (size_t)n[i]);
                double ep = max_abs_diff(pv, rp[i], n[i]), em = max_abs_diff(mv, rm[i], n[i]),
                       ev = max_abs_diff(vv, rv[i], n[i]);
                CHECK(ep < 1e-5 && em < 1e-5 && ev < 1e-5, "adamw%s step %d '%s': err p %g m %g v %g",
                      with_lr ? " (lr input)" : "", t, pn[i], ep, em, ev);
            }
        }
        int32_t s;
        dfg_fx_read(&f, "step", &s, sizeof(s));
        CHECK(s == STEPS, "step counter = %d, want %d", s, STEPS);
    }
    dfg_fx_end(&f);
}

/* The step counter counts from 1 (bias correction divides by 1 - beta^t): 0 is a range error,
 * and the parameters stay untouched. */
static void test_adamw_step0(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "adamw0");
    dfg_tensor *p = dfg_param(f.p, "w", DFG_F32, DFG_SHAPE(4), dfg_init_constant(0.5f));
    dfg_tensor *g = dfg_fill(f.g, DFG_F32, DFG_SHAPE(4), 1.0f);
    dfg_tensor *m = state_f32(&f, "m", DFG_SHAPE(4), dfg_init_zeros());
    dfg_tensor *v = state_f32(&f, "v", DFG_SHAPE(4), dfg_init_zeros());
    dfg_tensor *step = dfg_state(f.p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, dfg_init_zeros());
    const dfg_adamw_config cfg = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    dfg_adamw(f.g, &p, &g, &m, &v, 1, step, cfg);
    if (dfg_fx_create(&f, 1)) {
        dfg_status st = dfg_runtime_step(f.rt);
        CHECK(st == DFG_ERR_RANGE, "adamw with step 0: %s", dfg_status_name(st));
        CHECK(strstr(dfg_runtime_error(f.rt), "adamw") && strstr(dfg_runtime_error(f.rt), "step is 0"),
              "message: %s", dfg_runtime_error(f.rt));
        float w[4];
        dfg_fx_read(&f, "w", w, sizeof(w));
        CHECK(w[0] == 0.5f && w[3] == 0.5f, "a refused step leaves the parameters: %g", w[0]);
    }
    dfg_fx_end(&f);
}

/* An lr input equal to the attribute updates bit for bit as the op without it: the input only
 * replaces where the rate comes from. */
static void test_adamw_lr_same(void) {
    float w[2][6];
    for (int k = 0; k < 2; k++) {
        dfg_fx f;
        dfg_fx_begin(&f, k ? "adamw_lr_same" : "adamw_attr");
        dfg_tensor *p = dfg_param(f.p, "w", DFG_F32, DFG_SHAPE(2, 3), dfg_init_constant(0.5f));
        dfg_tensor *g = dfg_affine(f.g, dfg_cast(f.g, dfg_fill(f.g, DFG_I32, DFG_SHAPE(2, 3), 3), DFG_F32), 0.37f, -0.2f);
        dfg_tensor *m = state_f32(&f, "m", DFG_SHAPE(2, 3), dfg_init_zeros());
        dfg_tensor *v = state_f32(&f, "v", DFG_SHAPE(2, 3), dfg_init_zeros());
        dfg_tensor *step = dfg_state(f.p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, dfg_init_zeros());
        dfg_assign(f.g, step, dfg_add(f.g, step, dfg_fill(f.g, DFG_I32, DFG_SCALAR, 1)));
        const dfg_adamw_config cfg = {3e-3f, 0.9f, 0.999f, 1e-8f, 0.1f};
        if (k) dfg_adamw_lr(f.g, &p, &g, &m, &v, 1, step, dfg_fill(f.g, DFG_F32, DFG_SCALAR, cfg.lr), cfg);
        else dfg_adamw(f.g, &p, &g, &m, &v, 1, step, cfg);
        if (dfg_fx_create(&f, 1)) {
            for (int t = 0; t < 3; t++) dfg_fx_step(&f);
            dfg_fx_read(&f, "w", w[k], sizeof(w[k]));
        }
        dfg_fx_end(&f);
    }
    CHECK(!memcmp(w[0], w[1], sizeof(w[0])), "lr input equal to the attribute: %.9g vs %.9g", w[1][0], w[0][0]);
    CHECK(w[0][0] != 0.5f, "the update moved nothing");
}

/* A rate below 0 (a schedule gone wrong) fails the step, naming it, and writes nothing. */
static void test_adamw_lr_negative(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "adamw_lr_neg");
    dfg_tensor *p = dfg_param(f.p, "w", DFG_F32, DFG_SHAPE(4), dfg_init_constant(0.5f));
    dfg_tensor *g = dfg_fill(f.g, DFG_F32, DFG_SHAPE(4), 1.0f);
    dfg_tensor *m = state_f32(&f, "m", DFG_SHAPE(4), dfg_init_zeros());
    dfg_tensor *v = state_f32(&f, "v", DFG_SHAPE(4), dfg_init_zeros());
    dfg_tensor *step = dfg_state(f.p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, dfg_init_constant(1));
    const dfg_adamw_config cfg = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    dfg_adamw_lr(f.g, &p, &g, &m, &v, 1, step, dfg_fill(f.g, DFG_F32, DFG_SCALAR, -1e-3f), cfg);
    if (dfg_fx_create(&f, 1)) {
        dfg_status st = dfg_runtime_step(f.rt);
        CHECK(st == DFG_ERR_RANGE, "adamw with lr -1e-3: %s", dfg_status_name(st));
        CHECK(strstr(dfg_runtime_error(f.rt), "lr is -0.001"), "message: %s", dfg_runtime_error(f.rt));
        float w[4];
        dfg_fx_read(&f, "w", w, sizeof(w));
        CHECK(w[0] == 0.5f, "a refused step leaves the parameters: %g", w[0]);
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- clip_grad_norm */
/* Two STATE gradients (scaled in place) and one TEMP gradient (replaced by a new TEMP) with
 * max_norm below the norm (they are scaled by max_norm / (norm + 1e-6)) or above it (kept).
 * `mag` scales the gradients: at 1e-7 the norm is about 1e-6 and the 1e-6 in the formula
 * halves the scale, so only torch's exact formula passes. */
static void run_clip(double ratio, float mag) {
    enum { A = 12, B = 5, C = 6 };
    float ga[A], gb0[B], extra[B], gb[B], gc[C];
    dfg_test_fill_normal(ga, A, mag), dfg_test_fill_normal(gb0, B, 2 * mag), dfg_test_fill_normal(gc, C, 0.5f * mag);
    dfg_test_fill_normal(extra, B, mag);
    for (int i = 0; i < B; i++) gb[i] = gb0[i] + extra[i]; /* gb is accumulated into in the graph first */
    double ss = 0;
    for (int i = 0; i < A; i++) ss += (double)ga[i] * ga[i];
    for (int i = 0; i < B; i++) ss += (double)gb[i] * gb[i];
    for (int i = 0; i < C; i++) ss += (double)gc[i] * gc[i];
    double norm = sqrt(ss);
    float max_norm = (float)(ratio * norm);
    dfg_fx f;
    dfg_fx_begin(&f, "clip");
    dfg_tensor *sa = state_f32(&f, "ga", DFG_SHAPE(3, 4), dfg_init_zeros());
    dfg_tensor *sb = state_f32(&f, "gb", DFG_SHAPE(B), dfg_init_zeros());
    dfg_tensor *tc = dfg_output(f.g, dfg_scale(f.g, dfg_const(f.p, "gc_src", DFG_F32, DFG_SHAPE(C), gc), 1.0f), "gc");
    dfg_accumulate(f.g, sb, dfg_const(f.p, "extra", DFG_F32, DFG_SHAPE(B), extra)); /* sb is now a new version */
    dfg_tensor *grads[3] = {sa, tc, sb};
    dfg_tensor *nrm = dfg_output(f.g, dfg_clip_grad_norm(f.g, grads, 3, max_norm), "norm");
    CHECK(dfg_tensor_shape(nrm).rank == 0 && dfg_tensor_dtype(nrm) == DFG_F32, "the norm is an f32 scalar");
    CHECK(grads[0] != sa && grads[1] != tc && grads[2] != sb, "clip_grad_norm replaces every grads[i]");
    dfg_output(f.g, grads[1], "gc_clipped");
    if (dfg_fx_create(&f, 1)) {
        dfg_fx_write(&f, "ga", ga, sizeof(ga));
        dfg_fx_write(&f, "gb", gb0, sizeof(gb0));
        if (dfg_fx_step(&f)) {
            float n, ya[A], yb[B], yc[C], yc0[C];
            dfg_fx_read(&f, "norm", &n, sizeof(n));
            dfg_fx_read(&f, "ga", ya, sizeof(ya));
            dfg_fx_read(&f, "gb", yb, sizeof(yb));
            dfg_fx_read(&f, "gc_clipped", yc, sizeof(yc));
            dfg_fx_read(&f, "gc", yc0, sizeof(yc0));
            CHECK(fabs(n - norm) < 1e-6 * norm, "norm %.9g, want sqrt(sum of squares) %.9g", n, norm);
            double s = fmin(1.0, max_norm / (norm + 1e-6)), e = 0;
            for (int i = 0; i < A; i++) e = fmax(e, fabs(ya[i] - ga[i] * s));
            for (int i = 0; i < B; i++) e = fmax(e, fabs(yb[i] - gb[i] * s));
            for (int i = 0; i < C; i++) e = fmax(e, fabs(yc[i] - gc[i] * s));
            CHECK(e < 1e-6 * mag, "ratio %g, magnitude %g: gradients scaled by min(1, max_norm/(norm+1e-6)) = %g, err %g",
                  ratio, mag, s, e);
            CHECK(memcmp(yc0, gc, sizeof(gc)) == 0, "the TEMP gradient itself is left unscaled");
            if (ratio > 1) CHECK(memcmp(ya, ga, sizeof(ga)) == 0, "no clipping below max_norm: STATE grads unchanged");
            else CHECK(fabs(ya[0]) < fabs(ga[0]) || ga[0] == 0, "the STATE gradient was scaled in place");
        }
    }
    dfg_fx_end(&f);
}

static void test_clip(void) {
    run_clip(0.25, 1.0f);
    run_clip(4.0, 1.0f);
    run_clip(0.25, 1e-7f);
}

/* ---------------------------------------------------------------- assign family */
static void test_assign(void) {
    enum { R = 4, C = 5 };
    float a[6], src[2 * C], src3[2 * 2 * 3];
    dfg_test_fill_normal(a, 6, 1), dfg_test_fill_normal(src, 2 * C, 1), dfg_test_fill_normal(src3, 12, 1);
    const int32_t di[4] = {1, -2, 3, 100};
    dfg_fx f;
    dfg_fx_begin(&f, "assign");
    dfg_tensor *ca = dfg_const(f.p, "a", DFG_F32, DFG_SHAPE(2, 3), a);
    dfg_tensor *s1 = state_f32(&f, "s1", DFG_SHAPE(2, 3), dfg_init_ones());
    dfg_tensor *s2 = state_f32(&f, "s2", DFG_SHAPE(2, 3), dfg_init_constant(2.0f));
    dfg_tensor *s3 = dfg_state(f.p, "s3", DFG_I32, DFG_SHAPE(4), DFG_ROLE_NONE, dfg_init_constant(5.0f));
    dfg_tensor *s4 = state_f32(&f, "s4", DFG_SHAPE(3, 2), dfg_init_normal(0, 1));
    dfg_tensor *s4u = dfg_state(f.p, "s4u", DFG_U8, DFG_SHAPE(3), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *s5 = state_f32(&f, "s5", DFG_SHAPE(R, C), dfg_init_zeros());
    dfg_tensor *s6 = state_f32(&f, "s6", DFG_SHAPE(2, 5, 3), dfg_init_constant(-1.0f));
    dfg_tensor *s7 = state_f32(&f, "s7", DFG_SHAPE(2, 5, 3), dfg_init_constant(-1.0f));
    dfg_assign(f.g, s1, ca);
    /* a copy that converts: f32 into a bf16 state rounds to nearest even, as dfg_cast would */
    dfg_tensor *sb = dfg_state(f.p, "sb", DFG_BF16, DFG_SHAPE(2, 3), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_assign(f.g, sb, ca);
    dfg_output(f.g, dfg_cast(f.g, ca, DFG_BF16), "ca_bf16");
    dfg_accumulate(f.g, s2, ca);
    dfg_accumulate(f.g, s2, ca); /* twice in one run: the second adds to the first's result */
    dfg_accumulate(f.g, s3, dfg_const(f.p, "di", DFG_I32, DFG_SHAPE(4), di));
    dfg_assign_fill(f.g, s4, 7.25f);
    dfg_assign_fill(f.g, s4u, 3.0f);
    dfg_slice_assign(f.g, s5, dfg_const(f.p, "src", DFG_F32, DFG_SHAPE(2, C), src), 0, 1);  /* rows 1, 2 */
    dfg_tensor *c3 = dfg_const(f.p, "src3", DFG_F32, DFG_SHAPE(2, 2, 3), src3);
    dfg_slice_assign(f.g, s6, c3, 1, 3);  /* [:, 3:5, :] */
    dfg_slice_assign(f.g, s7, c3, -2, 0); /* [:, 0:2, :] through a negative axis */
    if (dfg_fx_create(&f, 1) && dfg_fx_step(&f) && dfg_fx_step(&f)) { /* two steps: writes persist between them */
        float y1[6], y2[6], y4[6], y5[R * C], y6[30], y7[30];
        int32_t y3[4];
        uint8_t yu[3];
        const struct {
            const char *name;
            void *to;
            size_t bytes;
        } reads[] = {{"s1", y1, sizeof(y1)}, {"s2", y2, sizeof(y2)}, {"s3", y3, sizeof(y3)}, {"s4", y4, sizeof(y4)},
                     {"s4u", yu, sizeof(yu)}, {"s5", y5, sizeof(y5)}, {"s6", y6, sizeof(y6)}, {"s7", y7, sizeof(y7)}};
        for (size_t k = 0; k < sizeof(reads) / sizeof(reads[0]); k++) dfg_fx_read(&f, reads[k].name, reads[k].to, reads[k].bytes);
        int bad = 0;
        for (int i = 0; i < 6; i++) {
            bad += y1[i] != a[i];
            bad += fabsf(y2[i] - (2.0f + 4.0f * a[i])) > 1e-5f;
            bad += y4[i] != 7.25f;
        }
        CHECK(bad == 0, "assign / accumulate (2 per step, 2 steps) / assign_fill: %d wrong", bad);
        uint16_t yb[6], yc[6];
        dfg_fx_read(&f, "sb", yb, sizeof(yb));
        dfg_fx_read(&f, "ca_bf16", yc, sizeof(yc));
        CHECK(!memcmp(yb, yc, sizeof(yb)) && yb[0] != 0, "f32 -> bf16 assign differs from the cast (%04x vs %04x)", yb[0],
              yc[0]);
        CHECK(y3[0] == 7 && y3[1] == 1 && y3[2] == 11 && y3[3] == 205, "i32 accumulate: %d %d %d %d", y3[0], y3[1],
              y3[2], y3[3]);
        CHECK(yu[0] == 3 && yu[2] == 3, "u8 assign_fill: %d %d", yu[0], yu[2]);
        bad = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) bad += y5[r * C + c] != (r == 1 || r == 2 ? src[(r - 1) * C + c] : 0.0f);
        CHECK(bad == 0, "slice_assign rows 1..2 of a (4,5) state: %d wrong", bad);
        bad = 0;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 5; j++)
                for (int k = 0; k < 3; k++) {
                    float w6 = j >= 3 ? src3[(i * 2 + j - 3) * 3 + k] : -1.0f;
                    float w7 = j < 2 ? src3[(i * 2 + j) * 3 + k] : -1.0f;
                    bad += y6[(i * 5 + j) * 3 + k] != w6;
                    bad += y7[(i * 5 + j) * 3 + k] != w7;
                }
        CHECK(bad == 0, "slice_assign along the middle axis leaves the other rows: %d wrong", bad);
    }
    dfg_fx_end(&f);
}

/* dfg_slice_assign_at checks its run-time start against the destination. */
static void test_slice_assign_at_range(void) {
    dfg_fx f;
    dfg_fx_begin(&f, "slice_assign_at");
    dfg_tensor *kv = state_f32(&f, "kv", DFG_SHAPE(1, 4, 2), dfg_init_zeros());
    dfg_tensor *pos = dfg_input(f.g, "pos", DFG_I32, DFG_SCALAR);
    dfg_slice_assign_at(f.g, kv, dfg_fill(f.g, DFG_F32, DFG_SHAPE(1, 2, 2), 3.0f), 1, pos);
    if (dfg_fx_create(&f, 1)) {
        const int32_t ok = 2, over = 3;
        dfg_fx_write(&f, "pos", &ok, sizeof(ok));
        dfg_fx_step(&f);
        float y[8];
        dfg_fx_read(&f, "kv", y, sizeof(y));
        CHECK(y[3] == 0.0f && y[4] == 3.0f && y[7] == 3.0f, "rows 2..3 written at run-time pos 2: %g %g %g", y[3],
              y[4], y[7]);
        dfg_fx_write(&f, "pos", &over, sizeof(over));
        dfg_status st = dfg_runtime_step(f.rt);
        CHECK(st == DFG_ERR_RANGE && strstr(dfg_runtime_error(f.rt), "'kv'"),
              "rows [3, 5) of 4 fail with DFG_ERR_RANGE naming the state: %s / %s", dfg_status_name(st),
              dfg_runtime_error(f.rt));
    }
    dfg_fx_end(&f);
}

/* One start a row (pos (B) along axis 1): slice_assign_at writes src row b at dst[b, pos[b] ..],
 * slice_at reads x[b, pos[b] ..]; a row out of range fails the step naming the row, nothing
 * written; a per-row pos along another axis, or of another length, does not build. */
static void test_slice_rows(void) {
    enum { B = 3, T = 6, K = 2, C = 2 };
    float src[B * K * C], x[B * T * C];
    for (int i = 0; i < B * K * C; i++) src[i] = (float)(i + 1);
    for (int i = 0; i < B * T * C; i++) x[i] = (float)(100 + i);
    dfg_fx f;
    dfg_fx_begin(&f, "slice_rows");
    dfg_tensor *kv = state_f32(&f, "kv", DFG_SHAPE(B, T, C), dfg_init_zeros());
    dfg_tensor *pos = dfg_input(f.g, "pos", DFG_I32, DFG_SHAPE(B));
    dfg_slice_assign_at(f.g, kv, dfg_fx_const_f32(&f, "src", DFG_SHAPE(B, K, C), src), 1, pos);
    dfg_output(f.g, dfg_slice_at(f.g, dfg_fx_const_f32(&f, "x", DFG_SHAPE(B, T, C), x), 1, pos, K), "y");
    if (dfg_fx_create(&f, 1)) {
        const int32_t at[B] = {0, 4, 2}, bad[B] = {1, 1, 5};
        dfg_fx_write(&f, "pos", at, sizeof(at));
        dfg_fx_step(&f);
        float got[B * T * C], y[B * K * C];
        dfg_fx_read(&f, "kv", got, sizeof(got));
        dfg_fx_read(&f, "y", y, sizeof(y));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    int k = t - at[b];
                    float want = k >= 0 && k < K ? src[(b * K + k) * C + c] : 0.0f;
                    CHECK(got[(b * T + t) * C + c] == want, "slice_assign_at row %d column %d: %g, want %g", b, t,
                          got[(b * T + t) * C + c], want);
                }
        for (int b = 0; b < B; b++)
            for (int i = 0; i < K * C; i++)
                CHECK(y[b * K * C + i] == x[(b * T + at[b]) * C + i], "slice_at row %d element %d: %g, want %g", b, i,
                      y[b * K * C + i], x[(b * T + at[b]) * C + i]);
        dfg_fx_write(&f, "pos", bad, sizeof(bad));
        dfg_status st = dfg_runtime_step(f.rt);
        CHECK(st == DFG_ERR_RANGE && strstr(dfg_runtime_error(f.rt), "(row 2)"),
              "row 2's rows [5, 7) of 6 fail with DFG_ERR_RANGE naming the row: %s / %s", dfg_status_name(st),
              dfg_runtime_error(f.rt));
        float after[B * T * C];
        dfg_fx_read(&f, "kv", after, sizeof(after));
        CHECK(!memcmp(after, got, sizeof(got)), "a row out of range: nothing written");
    }
    dfg_fx_end(&f);
    /* a start a row along axis 0, or of another length than the rows: shape errors naming pos */
    dfg_program *p = dfg_program_new("slice_rows_bad");
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_tensor *dst = dfg_state(p, "dst", DFG_F32, DFG_SHAPE(B, T), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_slice_assign_at(g, dst, dfg_input(g, "s", DFG_F32, DFG_SHAPE(1, T)), 0, dfg_input(g, "p3", DFG_I32, DFG_SHAPE(B)));
    CHECK(dfg_program_status(p) == DFG_ERR_SHAPE && strstr(dfg_program_error(p), "'p3'"),
          "a per-row pos along axis 0 is refused naming it: %s", dfg_program_error(p));
    dfg_program_free(p);
    p = dfg_program_new("slice_rows_bad2");
    g = dfg_graph_new(p, "g");
    dfg_slice_at(g, dfg_input(g, "x", DFG_F32, DFG_SHAPE(B, T)), 1, dfg_input(g, "p2", DFG_I32, DFG_SHAPE(B - 1)), 2);
    CHECK(dfg_program_status(p) == DFG_ERR_SHAPE && strstr(dfg_program_error(p), "'p2'"),
          "a pos of another length than the rows is refused naming it: %s", dfg_program_error(p));
    dfg_program_free(p);
}

int main(void) {
    dfg_test_init("test_ops_state");
    test_adamw(false);
    test_adamw(true);
    test_adamw_lr_same();
    test_adamw_lr_negative();
    test_adamw_step0();
    test_clip();
    test_assign();
    test_slice_assign_at_range();
    test_slice_rows();
    return dfg_test_finish();
}
