/* test_ops_rope.c - rotary position embeddings (ops/rope.c) on the CPU runtime:
 *   - against a naive reference written here from transformers' apply_rotary_pos_emb with
 *     rotate_half: the angles rounded as transformers rounds them in f32 (inv_freq = 1.0f /
 *     theta^e with e = (float)(2i) / (float)D, angle = (float)pos * inv_freq), then cos, sin and
 *     the rotation in double -- so the kernel may differ only by cosf/sinf and its f32 rotation;
 *   - against the exact math in double (inv_freq, angle and all), within the error the f32 angle
 *     itself carries (a few ulp of the angle: 5e-4 rad at position 4000);
 *   - inverse(rope(x)) == x to rounding, and rope(x) at position 0 == x exactly;
 *   - the shape errors name the op and the tensors (odd head_dim, a last dim that is not a
 *     multiple of it, pos not i32, pos not x's leading dims, theta <= 0).
 * Head dims 2, 8, 64, 128; theta 1e4 (Llama 2) and 1e6 (Qwen2); positions 0, 1, 4000 and random
 * ones up to 8191. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "graph/ir.h"
#include "ops/op.h"
#include "testutil.h"

enum { B = 2, T = 5, H = 3 };

static bool contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* inv_freq as transformers computes it in f32 (the power rounded once) */
static float hf_inv_freq(int i, int D, float theta) {
    float e = (float)(2 * i) / (float)D;
    return 1.0f / (float)pow((double)theta, (double)e);
}

/* y (B*T, H, D) of x: with hf_angles, the f32 angles; else every step in double */
static void ref_rope(const float *x, const int32_t *pos, double *y, int D, float theta, bool hf_angles) {
    const int half = D / 2;
    for (int t = 0; t < B * T; t++)
        for (int i = 0; i < half; i++) {
            double a = hf_angles ? (double)((float)pos[t] * hf_inv_freq(i, D, theta))
                                 : (double)pos[t] * pow((double)theta, -2.0 * i / D);
            double c = cos(a), s = sin(a);
            for (int h = 0; h < H; h++) {
                const float *xr = x + (t * H + h) * D;
                double *yr = y + (t * H + h) * D;
                yr[i] = xr[i] * c - xr[i + half] * s;         /* x * cos + rotate_half(x) * sin, first half */
                yr[i + half] = xr[i + half] * c + xr[i] * s; /* second half */
            }
        }
}

/* rope of x (B, T, H*D) at pos, and the inverse rotation of that, on the CPU runtime */
static bool run_rope(const float *x, const int32_t *pos, int D, float theta, float *y, float *back) {
    dfg_fx f;
    dfg_fx_begin(&f, "rope");
    dfg_tensor *xt = dfg_fx_const_f32(&f, "x", DFG_SHAPE(B, T, H * D), x);
    dfg_tensor *pt = dfg_input(f.g, "pos", DFG_I32, DFG_SHAPE(B, T));
    dfg_tensor *yt = dfg_rope(f.g, xt, pt, D, theta);
    dfg_attrs inv = {.rope = {.head_dim = D, .theta = theta, .inverse = true}};
    dfg_output(f.g, yt, "y");
    dfg_output(f.g, dfg_op_out(f.g, DFG_OP_ROPE, (dfg_tensor *[]){yt, pt}, 2, &inv), "back");
    bool ok = dfg_fx_create(&f, 1);
    if (ok) {
        dfg_fx_write(&f, "pos", pos, sizeof(int32_t) * B * T);
        ok = dfg_fx_step(&f);
    }
    if (ok) {
        dfg_fx_read(&f, "y", y, sizeof(float) * (size_t)(B * T * H * D));
        dfg_fx_read(&f, "back", back, sizeof(float) * (size_t)(B * T * H * D));
    }
    dfg_fx_end(&f);
    return ok;
}

static void test_values(int D, float theta) {
    const int64_t n = (int64_t)B * T * H * D;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *back = malloc(sizeof(float) * (size_t)n);
    double *hf = malloc(sizeof(double) * (size_t)n), *exact = malloc(sizeof(double) * (size_t)n);
    int32_t pos[B * T];
    dfg_test_fill_normal(x, n, 1.0f);
    for (int t = 0; t < B * T; t++) pos[t] = dfg_test_int(0, 8191);
    pos[0] = 0, pos[1] = 1, pos[2] = 4000, pos[T] = 4000; /* row 0 of batch 1 is mid-decode */
    if (run_rope(x, pos, D, theta, y, back)) {
        ref_rope(x, pos, hf, D, theta, true);
        ref_rope(x, pos, exact, D, theta, false);
        double xmax = 0, e_hf = 0, e_back = 0, worst_exact = 0;
        int bad_exact = 0, bad_zero = 0;
        for (int64_t k = 0; k < n; k++) xmax = fmax(xmax, fabs(x[k]));
        for (int64_t k = 0; k < n; k++) {
            const int64_t t = k / (H * D), i = k % D % (D / 2), mate = k % D < D / 2 ? k + D / 2 : k - D / 2;
            e_hf = fmax(e_hf, fabs(y[k] - hf[k]));
            e_back = fmax(e_back, fabs(back[k] - x[k]));
            /* the f32 angle is off the exact one by a few ulp of itself: the roundings of the
             * exponent (times ln theta through the power), the power, the reciprocal, the product */
            double e = 2.0 * (double)i / D, a = (double)pos[t] * pow((double)theta, -e);
            double ulps = 4.0 + e * log((double)theta);
            double allow = (fabs(x[k]) + fabs(x[mate])) * (ulps * a * 0x1p-24 + 1e-6) + 1e-6;
            double d = fabs(y[k] - exact[k]);
            worst_exact = fmax(worst_exact, d / allow);
            bad_exact += !(d <= allow);
            if (pos[t] == 0) bad_zero += y[k] != x[k];
        }
        printf("rope head_dim %3d theta %-7g: vs HF's f32 angles max err %.2e, vs exact math %.2f of the f32-angle "
               "bound, inverse(rope(x)) - x max %.2e (|x| <= %.2f)\n",
               D, (double)theta, e_hf, worst_exact, e_back, xmax);
        CHECK(e_hf <= 1e-6 * fmax(xmax, 1.0), "rope D %d theta %g: max err %g vs the reference with HF's f32 angles", D,
              (double)theta, e_hf);
        CHECK(bad_exact == 0, "rope D %d theta %g: %d elements beyond the f32-angle error bound of the exact math", D,
              (double)theta, bad_exact);
        CHECK(e_back <= 2e-6 * fmax(xmax, 1.0), "rope D %d theta %g: inverse(rope(x)) is off x by %g", D,
              (double)theta, e_back);
        CHECK(bad_zero == 0, "rope D %d: %d elements at position 0 are not x itself", D, bad_zero);
    }
    free(x), free(y), free(back), free(hf), free(exact);
}

/* The shape rule refuses bad inputs with a message naming the op and the tensors. */
static void expect_error(const char *what, dfg_shape xs, dfg_dtype pdt, dfg_shape ps, int D, float theta,
                         const char *s1, const char *s2) {
    dfg_program *p = dfg_program_new("rope_errors");
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_rope(g, dfg_input(g, "q", DFG_F32, xs), dfg_input(g, "positions", pdt, ps), D, theta);
    const char *msg = dfg_graph_error(g);
    CHECK(dfg_graph_status(g) != DFG_OK && contains(msg, "rope") && contains(msg, s1) && contains(msg, s2),
          "rope with %s: %s", what, msg ? msg : "(no error)");
    printf("rope with %s: %s\n", what, msg ? msg : "(no error)");
    dfg_program_free(p);
}

static void test_errors(void) {
    expect_error("an odd head_dim", DFG_SHAPE(2, 3, 12), DFG_I32, DFG_SHAPE(2, 3), 3, 1e4f, "head_dim 3", "even");
    expect_error("a last dim not a multiple of head_dim", DFG_SHAPE(2, 3, 12), DFG_I32, DFG_SHAPE(2, 3), 8, 1e4f,
                 "'q'", "not a multiple of head_dim 8");
    expect_error("f32 positions", DFG_SHAPE(2, 3, 16), DFG_F32, DFG_SHAPE(2, 3), 8, 1e4f, "'positions'", "i32");
    expect_error("positions of another shape", DFG_SHAPE(2, 3, 16), DFG_I32, DFG_SHAPE(2, 4), 8, 1e4f, "'positions'",
                 "leading dims of x 'q'");
    expect_error("theta 0", DFG_SHAPE(2, 3, 16), DFG_I32, DFG_SHAPE(2, 3), 8, 0.0f, "theta", "> 0");
}

int main(void) {
    dfg_test_init("test_ops_rope");
    const int dims[] = {2, 8, 64, 128};
    for (int d = 0; d < 4; d++) {
        test_values(dims[d], 10000.0f);
        test_values(dims[d], 1000000.0f);
    }
    test_errors();
    return dfg_test_finish();
}
