/* test_ops_entropy.c - the entropy and quantile ops, and linear_logprob's entropy output, against
 * float64 references computed here from the same float32 inputs:
 *
 *   entropy        dfg_entropy(z) = -sum p log p of softmax over the last axis, to 1e-6 of the
 *                  float64 value relative to max(H, 1);
 *   fused entropy  log-probs and entropy of softmax(h W^T / T) through the fuse pass: the program
 *                  must hold one linear_logprob and no entropy op (no logits), and its entropy
 *                  equal the float64 entropy of the full logits to 1e-6, for vocabularies over
 *                  several chunks (a memory budget makes the chunks small) and temperatures;
 *   quantile       dfg_quantile(x, mask, q) equal (bit for bit) to torch.quantile's definition
 *                  computed by sorting the selected values (dfg_test_quantile, tests/testutil.c): linear interpolation
 *                  at rank q (n - 1); +inf when nothing is selected. Values with ties, negative
 *                  values, masks with none / one / all entries, q = 0, 1 and random; and
 *                  torch.quantile's own value where the rank must be computed in float32;
 *   fused gradient d/dh and d/dW of a loss on log-probs and entropy through the 7-input fused
 *                  backward, against the unfused program's (1e-5 relative), and the 8-input form
 *                  that adds the weight's gradient into its buffer (structure).
 * Inputs are fresh random values each run (DFG_TEST_SEED replays); outputs are poisoned first by
 * the runtime's arena (a value never written is not the reference's). The gradients of both entropy
 * forms are checked by test_gradcheck. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "graph/ir.h"
#include "ops/op.h"
#include "runtime/dfg_runtime.h"
#include "testutil.h"

/* relative to max(H, 1): the float32 inputs' logits themselves carry float32 rounding */
#define ENT_TOL 1e-6

/* entropy of softmax(s * row) in double */
static double entropy_ref(const double *row, int64_t v, double s) {
    double m = -INFINITY, l = 0.0, a = 0.0;
    for (int64_t j = 0; j < v; j++) m = fmax(m, s * row[j]);
    for (int64_t j = 0; j < v; j++) l += exp(s * row[j] - m);
    for (int64_t j = 0; j < v; j++) {
        double lp = s * row[j] - m - log(l);
        a -= exp(lp) * lp;
    }
    return a;
}

static void check_entropy_op(void) {
    int64_t rows = dfg_test_int(1, 9), v = dfg_test_int(2, 700);
    float *z = malloc(sizeof(float) * (size_t)(rows * v)), *h = malloc(sizeof(float) * (size_t)rows);
    double *zd = malloc(sizeof(double) * (size_t)v);
    dfg_test_fill_normal(z, rows * v, 3.0f);
    dfg_fx f;
    dfg_fx_begin(&f, "entropy");
    dfg_output(f.g, dfg_entropy(f.g, dfg_fx_const_f32(&f, "z", DFG_SHAPE(rows, v), z)), "h");
    double worst = 0.0;
    if (dfg_fx_run(&f)) {
        dfg_fx_read(&f, "h", h, sizeof(float) * (size_t)rows);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < v; j++) zd[j] = z[r * v + j];
            double e = entropy_ref(zd, v, 1.0);
            worst = fmax(worst, fabs(h[r] - e) / fmax(e, 1.0));
        }
    }
    CHECK(worst <= ENT_TOL, "entropy (%lld, %lld): worst |dfg - float64| / max(H, 1) %.3g > %g", (long long)rows, (long long)v, worst,
          ENT_TOL);
    printf("  entropy op (%lld, %lld): worst %.2e\n", (long long)rows, (long long)v, worst);
    dfg_fx_end(&f);
    free(z), free(h), free(zd);
}

/* logp and entropy of softmax(h W^T / temp), h (rows, C), W (V, C), through the fuse pass */
static void check_fused_entropy(int64_t rows, int64_t c, int64_t v, float temp, int64_t budget) {
    float *h = malloc(sizeof(float) * (size_t)(rows * c)), *w = malloc(sizeof(float) * (size_t)(v * c));
    float *ent = malloc(sizeof(float) * (size_t)rows);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)rows);
    double *logits = malloc(sizeof(double) * (size_t)v);
    dfg_test_fill_normal(h, rows * c, 1.0f);
    dfg_test_fill_normal(w, v * c, 1.0f / sqrtf((float)c)); /* logits O(1): a trained head's range */
    for (int64_t r = 0; r < rows; r++) t[r] = (int32_t)dfg_test_int(0, (int)v - 1);
    dfg_fx f;
    dfg_fx_begin(&f, "fused_entropy");
    dfg_tensor *H = dfg_fx_const_f32(&f, "h", DFG_SHAPE(rows, c), h), *W = dfg_fx_const_f32(&f, "w", DFG_SHAPE(v, c), w);
    dfg_tensor *T = dfg_const(f.p, "t", DFG_I32, DFG_SHAPE(rows), t);
    dfg_tensor *z = dfg_scale(f.g, dfg_matmul(f.g, H, W, false, true), 1.0f / temp);
    dfg_output(f.g, dfg_take(f.g, dfg_log_softmax(f.g, z), T), "lp");
    dfg_output(f.g, dfg_entropy(f.g, z), "ent");
    CHECK(dfg_program_status(f.p) == DFG_OK, "build: %s", dfg_program_error(f.p));
    dfg_stage_graph(f.p, f.g, 1);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.memory_budget = budget;
    dfg_status st = dfg_compile(f.p, &o);
    CHECK(st == DFG_OK, "fused entropy: compile: %s", dfg_program_error(f.p));
    double worst = 0.0;
    int n_lin = 0, n_ent = 0, n_logits = 0;
    if (!st && dfg_fx_create(&f, 0) && dfg_fx_step(&f)) {
        const dfg_program *p = f.p;
        for (int gi = 0; gi < p->n_graphs; gi++)
            for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
                const dfg_node *n = p->graphs[gi]->nodes[i];
                n_lin += n->op == DFG_OP_LINEAR_LOGPROB;
                n_ent += n->op == DFG_OP_ENTROPY;
                n_logits += n->op == DFG_OP_MATMUL;
            }
        dfg_fx_read(&f, "ent", ent, sizeof(float) * (size_t)rows);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < v; j++) {
                double acc = 0.0;
                for (int64_t k = 0; k < c; k++) acc += (double)h[r * c + k] * (double)w[j * c + k];
                logits[j] = acc;
            }
            double e = entropy_ref(logits, v, 1.0 / (double)temp);
            worst = fmax(worst, fabs(ent[r] - e) / fmax(e, 1.0));
        }
    }
    CHECK(n_lin == 1 && n_ent == 0 && n_logits == 0,
          "fused entropy V=%lld: expected one linear_logprob and no entropy or matmul, got %d, %d, %d", (long long)v, n_lin,
          n_ent, n_logits);
    CHECK(worst <= ENT_TOL, "fused entropy rows %lld C %lld V %lld T %g: worst |dfg - float64| / max(H, 1) %.3g > %g", (long long)rows,
          (long long)c, (long long)v, (double)temp, worst, ENT_TOL);
    printf("  fused entropy rows %lld C %lld V %lld T %.2f budget %lld: worst %.2e\n", (long long)rows, (long long)c,
           (long long)v, (double)temp, (long long)budget, worst);
    dfg_fx_end(&f);
    free(h), free(w), free(ent), free(t), free(logits);
}

/* Training through the fused head with the entropy in the loss: the weight's gradient is added into
 * its buffer by the 8-input linear_logprob_bwd (log-probs' and entropy's gradients, accumulator),
 * so no vocabulary-sized dW is stored on its own, and no entropy or matmul node is left. */
static void check_fused_entropy_accumulates(void) {
    int64_t rows = 6, c = 8, v = 500;
    dfg_program *p = dfg_program_new("entropy_accumulate");
    dfg_tensor *W = dfg_param(p, "w", DFG_F32, DFG_SHAPE(v, c), dfg_init_normal(0, 0.3f));
    dfg_tensor *buf = dfg_state(p, "w.grad", DFG_F32, DFG_SHAPE(v, c), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *h = dfg_input(g, "h", DFG_F32, DFG_SHAPE(rows, c)), *t = dfg_input(g, "t", DFG_I32, DFG_SHAPE(rows));
    dfg_tensor *z = dfg_scale(g, dfg_matmul(g, h, W, false, true), 1.0f / 0.9f);
    dfg_tensor *lp = dfg_take(g, dfg_log_softmax(g, z), t), *ent = dfg_entropy(g, z);
    dfg_tensor *loss = dfg_sum(g, dfg_sub(g, lp, dfg_scale(g, ent, 0.1f)), 0);
    dfg_backward_accumulate(g, loss, &W, 1, &buf);
    dfg_stage_graph(p, g, 1);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    dfg_status st = dfg_compile(p, &o);
    CHECK(st == DFG_OK, "entropy accumulate: compile: %s", dfg_program_error(p));
    int bwd[9] = {0}, other = 0;
    for (int gi = 0; !st && gi < p->n_graphs; gi++)
        for (int i = 0; i < p->graphs[gi]->n_nodes; i++) {
            const dfg_node *n = p->graphs[gi]->nodes[i];
            if (n->op == DFG_OP_LINEAR_LOGPROB_BWD) bwd[n->n_in]++;
            other += n->op == DFG_OP_ENTROPY || n->op == DFG_OP_ENTROPY_BWD || n->op == DFG_OP_MATMUL;
        }
    CHECK(bwd[8] == 1 && bwd[5] + bwd[6] + bwd[7] == 0 && other == 0,
          "entropy accumulate: expected one 8-input linear_logprob_bwd and no entropy or matmul node; got bwd by inputs "
          "5:%d 6:%d 7:%d 8:%d, %d others", bwd[5], bwd[6], bwd[7], bwd[8], other);
    dfg_program_free(p);
}

/* The fused gradient against the unfused one: loss = sum(w1 logp - w2 H) over rows, d/dh and d/dW
 * through dfg_backward (the 7-input linear_logprob_bwd) against the same program with --no-fuse,
 * to 1e-5 relative; the fused program must hold the 7-input form and no entropy node. */
static void check_fused_entropy_gradient(void) {
    int64_t rows = dfg_test_int(2, 12), c = dfg_test_int(2, 16), v = dfg_test_int(2, 900);
    float *h = malloc(sizeof(float) * (size_t)(rows * c)), *w = malloc(sizeof(float) * (size_t)(v * c));
    float *wl = malloc(sizeof(float) * (size_t)rows), *wh = malloc(sizeof(float) * (size_t)rows);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)rows);
    float *grads[2][2];
    dfg_test_fill_normal(h, rows * c, 1.0f);
    dfg_test_fill_normal(w, v * c, 1.0f / sqrtf((float)c));
    dfg_test_fill_normal(wl, rows, 1.0f);
    dfg_test_fill_normal(wh, rows, 1.0f);
    for (int64_t r = 0; r < rows; r++) t[r] = (int32_t)dfg_test_int(0, (int)v - 1);
    int bwd7 = 0, ent = 0;
    for (int fused = 0; fused < 2; fused++) {
        dfg_fx f;
        dfg_fx_begin(&f, fused ? "fused" : "unfused");
        dfg_tensor *H = dfg_fx_const_f32(&f, "h", DFG_SHAPE(rows, c), h), *W = dfg_fx_const_f32(&f, "w", DFG_SHAPE(v, c), w);
        dfg_tensor *T = dfg_const(f.p, "t", DFG_I32, DFG_SHAPE(rows), t);
        dfg_tensor *z = dfg_scale(f.g, dfg_matmul(f.g, H, W, false, true), 1.0f / 0.8f);
        dfg_tensor *lp = dfg_take(f.g, dfg_log_softmax(f.g, z), T), *e = dfg_entropy(f.g, z);
        dfg_tensor *loss = dfg_sum(f.g, dfg_sub(f.g, dfg_mul(f.g, lp, dfg_fx_const_f32(&f, "wl", DFG_SHAPE(rows), wl)),
                                                dfg_mul(f.g, e, dfg_fx_const_f32(&f, "wh", DFG_SHAPE(rows), wh))), 0);
        dfg_tensor *d[2];
        dfg_backward(f.g, loss, (dfg_tensor *[]){H, W}, 2, d);
        dfg_output(f.g, d[0], "dh");
        dfg_output(f.g, d[1], "dw");
        dfg_stage_graph(f.p, f.g, 1);
        dfg_options o = dfg_options_default(DFG_TARGET_CPU);
        o.no_fuse = !fused;
        dfg_status st = dfg_compile(f.p, &o);
        CHECK(st == DFG_OK, "fused entropy gradient: compile: %s", dfg_program_error(f.p));
        grads[fused][0] = calloc((size_t)(rows * c), sizeof(float));
        grads[fused][1] = calloc((size_t)(v * c), sizeof(float));
        if (!st && dfg_fx_create(&f, 0) && dfg_fx_step(&f)) {
            dfg_fx_read(&f, "dh", grads[fused][0], sizeof(float) * (size_t)(rows * c));
            dfg_fx_read(&f, "dw", grads[fused][1], sizeof(float) * (size_t)(v * c));
        }
        for (int i = 0; fused && !st && i < f.p->graphs[0]->n_nodes; i++) {
            const dfg_node *n = f.p->graphs[0]->nodes[i];
            bwd7 += n->op == DFG_OP_LINEAR_LOGPROB_BWD && n->n_in == 7;
            ent += n->op == DFG_OP_ENTROPY || n->op == DFG_OP_ENTROPY_BWD;
        }
        dfg_fx_end(&f);
    }
    double eh = dfg_test_max_rel_err(grads[1][0], grads[0][0], rows * c, 1e-6);
    double ew = dfg_test_max_rel_err(grads[1][1], grads[0][1], v * c, 1e-6);
    CHECK(bwd7 == 1 && ent == 0, "fused entropy gradient: %d 7-input linear_logprob_bwd, %d entropy nodes", bwd7, ent);
    CHECK(eh <= 1e-5 && ew <= 1e-5, "fused entropy gradient rows %lld C %lld V %lld: dh %.3g, dW %.3g from the unfused",
          (long long)rows, (long long)c, (long long)v, eh, ew);
    printf("  fused entropy gradient rows %lld C %lld V %lld: dh %.2e, dW %.2e from the unfused\n", (long long)rows,
           (long long)c, (long long)v, eh, ew);
    for (int k = 0; k < 2; k++) free(grads[k][0]), free(grads[k][1]);
    free(h), free(w), free(wl), free(wh), free(t);
}

static void check_quantile(int which) {
    int64_t n = dfg_test_int(1, 300);
    float *x = malloc(sizeof(float) * (size_t)n), *m = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        x[i] = dfg_test_int(0, 3) == 0 ? (float)dfg_test_int(-3, 3) : dfg_test_normal() * 2.0f; /* ties and negatives */
        m[i] = which == 0 ? 0.0f : which == 1 ? 1.0f : (float)(dfg_test_int(0, 2) != 0);
    }
    if (which == 3) { /* exactly one selected */
        memset(m, 0, sizeof(float) * (size_t)n);
        m[dfg_test_int(0, (int)n - 1)] = 1.0f;
    }
    float qs[3] = {0.0f, 1.0f, dfg_test_uniform(0.0f, 1.0f)};
    for (int k = 0; k < 3; k++) {
        dfg_fx f;
        dfg_fx_begin(&f, "quantile");
        dfg_output(f.g,
                   dfg_quantile(f.g, dfg_fx_const_f32(&f, "x", DFG_SHAPE(n), x), dfg_fx_const_f32(&f, "m", DFG_SHAPE(n), m), qs[k]),
                   "q");
        float got = NAN, want = dfg_test_quantile(x, m, n, qs[k]);
        if (dfg_fx_run(&f)) dfg_fx_read(&f, "q", &got, sizeof(got));
        CHECK(got == want || (isinf(got) && isinf(want)), "quantile n %lld mask kind %d q %g: dfg %.9g, reference %.9g",
              (long long)n, which, (double)qs[k], (double)got, (double)want);
        dfg_fx_end(&f);
    }
    free(x), free(m);
}

/* torch computes a float32 tensor's quantile rank in float32: 0.8f * 20 is 16 exactly, so
 * torch.quantile(torch.tensor([0, 1/8, ..., 2, 1000, 1001, 1002, 1003]), 1 - 0.2) = 2 exactly, and a
 * mask "entropy >= threshold" keeps the token at the threshold (the product in double, 16.00000024,
 * gave 2.000238 and dropped it: golden_grpo's dapo_entropy_top at seed 4172111169). */
static void check_quantile_float32_rank(void) {
    float x[21], m[21], got = NAN;
    for (int i = 0; i < 21; i++) x[i] = i < 17 ? (float)i / 8.0f : 983.0f + (float)i, m[i] = 1.0f;
    dfg_fx f;
    dfg_fx_begin(&f, "quantile_rank");
    dfg_output(f.g, dfg_quantile(f.g, dfg_fx_const_f32(&f, "x", DFG_SHAPE(21), x), dfg_fx_const_f32(&f, "m", DFG_SHAPE(21), m), 1.0f - 0.2f),
               "q");
    if (dfg_fx_run(&f)) dfg_fx_read(&f, "q", &got, sizeof(got));
    CHECK(got == 2.0f, "quantile of 21 values at 0.8: dfg %.9g, torch.quantile 2", (double)got);
    dfg_fx_end(&f);
}

int main(void) {
    dfg_test_init("test_ops_entropy");
    check_quantile_float32_rank();
    for (int i = 0; i < 6; i++) check_entropy_op();
    check_fused_entropy(5, 8, 300, 1.0f, 0);
    check_fused_entropy(7, 12, 2000, 0.7f, 1 << 20);  /* chunks of the vocabulary under a 1 MiB budget */
    check_fused_entropy(33, 16, 50257, 1.3f, 16 << 20); /* GPT-2's vocabulary */
    check_fused_entropy_accumulates();
    for (int i = 0; i < 4; i++) check_fused_entropy_gradient();
    for (int i = 0; i < 40; i++) check_quantile(i % 4);
    return dfg_test_finish();
}
