/* test_ops_sample.c - categorical sampling on the CPU runtime: greedy and top_k=1 equal argmax,
 * the RNG state (not the call) decides the tokens, the counter advances by exactly one per call
 * (with a carry into the high word), top-k never picks outside the k largest and picks each of
 * them as often as their renormalised probability says, the empirical distribution of 20000
 * draws matches softmax(logits / T), NaN logits fail with DFG_ERR_NUMERIC, and a sub-batch of
 * rows [row0, row0 + n) sampled with dfg_sample_rows draws exactly the whole batch's tokens for
 * those rows (from the same RNG state). dfg_rng_advance(n) leaves the stream where n calls
 * would: the next call draws what the (n+1)-th would (64-bit carry too). TRL's top_p, min_p and
 * repetition_penalty (dfg_sample_with): over 20000 draws each, alone and together with top_k, the
 * tokens' frequencies match the distribution transformers' generate draws from (chi-square; never a
 * token it removed), and each draw's sampling log-prob is that distribution's; the penalty counts
 * the history's first history_len ids but not history_skip, also when greedy; neutral settings
 * draw dfg_sample's tokens, with log_softmax(logits / T)'s log-probs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "testutil.h"

static dfg_tensor *rng_state(dfg_fx *f, const char *name) {
    return dfg_state(f->p, name, DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros());
}

static int argmax_row(const float *x, int v) {
    int best = 0;
    for (int j = 1; j < v; j++)
        if (x[j] > x[best]) best = j;
    return best;
}

/* ---------------------------------------------------------------- greedy, top_k = 1 */
static void test_greedy(void) {
    enum { R = 64, V = 50 };
    float *x = malloc(sizeof(float) * R * V);
    dfg_test_fill_normal(x, R * V, 3);
    dfg_fx f;
    dfg_fx_begin(&f, "greedy");
    dfg_tensor *lg = dfg_const(f.p, "logits", DFG_F32, DFG_SHAPE(4, 16, V), x);
    dfg_tensor *rng = rng_state(&f, "rng");
    dfg_tensor *t0 = dfg_output(f.g, dfg_sample(f.g, lg, rng, 0.0f, 0), "t0");
    dfg_output(f.g, dfg_sample(f.g, lg, rng, -1.0f, 5), "tneg");
    dfg_output(f.g, dfg_sample(f.g, lg, rng, 1.0f, 1), "top1");
    dfg_output(f.g, dfg_argmax(f.g, lg), "am");
    dfg_shape s = dfg_tensor_shape(t0);
    CHECK(dfg_tensor_dtype(t0) == DFG_I32 && s.rank == 2 && s.d[0] == 4 && s.d[1] == 16, "tokens: i32 (4,16)");
    if (dfg_fx_create(&f, 1) && dfg_fx_step(&f)) {
        int32_t a[R], b[R], c[R], am[R];
        dfg_fx_read(&f, "t0", a, sizeof(a));
        dfg_fx_read(&f, "tneg", b, sizeof(b));
        dfg_fx_read(&f, "top1", c, sizeof(c));
        dfg_fx_read(&f, "am", am, sizeof(am));
        int bad = 0;
        for (int r = 0; r < R; r++) {
            int want = argmax_row(x + r * V, V);
            bad += a[r] != want || b[r] != want || c[r] != want || am[r] != want;
        }
        CHECK(bad == 0, "temperature 0, temperature < 0 and top_k = 1 all equal argmax: %d rows differ", bad);
    }
    dfg_fx_end(&f);
    free(x);
}

/* ---------------------------------------------------------------- the RNG state decides */
static void test_rng_state(void) {
    enum { R = 64, V = 50, CALLS = 2, REPEAT = 3 };
    float *x = malloc(sizeof(float) * R * V);
    dfg_test_fill_normal(x, R * V, 0.5f); /* flat logits: nearly every token is likely */
    dfg_fx f;
    dfg_fx_begin(&f, "rng");
    dfg_tensor *lg = dfg_const(f.p, "logits", DFG_F32, DFG_SHAPE(R, V), x);
    dfg_tensor *rng = rng_state(&f, "rng");
    /* two calls in one graph: the second must read the counter the first advanced */
    dfg_tensor *tok1 = dfg_sample(f.g, lg, rng, 1.0f, 0);
    dfg_tensor *tok2 = dfg_sample(f.g, lg, rng, 1.0f, 0);
    dfg_tensor *keep[2] = {dfg_state(f.p, "keep1", DFG_I32, DFG_SHAPE(R), DFG_ROLE_ROLLOUT, dfg_init_zeros()),
                           dfg_state(f.p, "keep2", DFG_I32, DFG_SHAPE(R), DFG_ROLE_ROLLOUT, dfg_init_zeros())};
    dfg_assign(f.g, keep[0], tok1);
    dfg_assign(f.g, keep[1], tok2);
    if (dfg_fx_create(&f, REPEAT)) {
        int32_t s0[4], s1[4], s2[4], a1[R], a2[R], b1[R], b2[R];
        dfg_fx_read(&f, "rng", s0, sizeof(s0));
        CHECK(s0[2] == 0 && s0[3] == 0, "a fresh RNG state counts from 0: %d %d", s0[2], s0[3]);
        CHECK(s0[0] != 0 || s0[1] != 0, "the runtime keys the RNG from the seed");
        dfg_fx_step(&f);
        dfg_fx_read(&f, "rng", s1, sizeof(s1));
        dfg_fx_read(&f, "keep1", a1, sizeof(a1));
        dfg_fx_read(&f, "keep2", a2, sizeof(a2));
        CHECK(s1[0] == s0[0] && s1[1] == s0[1], "sampling never changes the key");
        CHECK(s1[2] == CALLS * REPEAT && s1[3] == 0, "counter after %d calls = %d (hi %d)", CALLS * REPEAT, s1[2], s1[3]);
        dfg_fx_step(&f);
        dfg_fx_read(&f, "rng", s2, sizeof(s2));
        CHECK(s2[2] == 2 * CALLS * REPEAT, "counter after two steps = %d", s2[2]);
        int same = 0;
        for (int r = 0; r < R; r++) same += a1[r] == a2[r];
        CHECK(same < R / 2, "two calls with consecutive counters drew the same token in %d of %d rows", same, R);
        /* from any starting counter, one step advances it by exactly CALLS * REPEAT */
        int32_t start[4] = {s0[0], s0[1], 1000, 0}, again[4];
        dfg_fx_write(&f, "rng", start, sizeof(start));
        dfg_fx_step(&f);
        dfg_fx_read(&f, "rng", again, sizeof(again));
        CHECK(again[2] == 1000 + CALLS * REPEAT, "counter after a step from 1000 = %d", again[2]);
        /* rewinding to the state step 1 started from replays step 1's tokens */
        dfg_fx_write(&f, "rng", s0, sizeof(s0));
        dfg_fx_step(&f);
        dfg_fx_read(&f, "keep1", b1, sizeof(b1));
        dfg_fx_read(&f, "keep2", b2, sizeof(b2));
        CHECK(memcmp(a1, b1, sizeof(a1)) == 0 && memcmp(a2, b2, sizeof(a2)) == 0,
              "the same RNG state gives the same tokens");
        /* the counter is 64 bits: a low word of 0xFFFFFFFF carries into the high word */
        int32_t edge[4] = {s0[0], s0[1], -1, 7};
        dfg_fx_write(&f, "rng", edge, sizeof(edge));
        dfg_fx_step(&f);
        int32_t after[4];
        dfg_fx_read(&f, "rng", after, sizeof(after));
        CHECK(after[2] == CALLS * REPEAT - 1 && after[3] == 8, "counter 0x7_FFFFFFFF + %d = hi %d lo %d",
              CALLS * REPEAT, after[3], after[2]);
    }
    dfg_fx_end(&f);
    /* another runtime with the same seed draws the same tokens; another seed does not */
    uint64_t seed = dfg_test_u64();
    int32_t toks[3][R];
    for (int run = 0; run < 3; run++) {
        dfg_fx_begin(&f, "rng_seed");
        dfg_tensor *lg2 = dfg_const(f.p, "logits", DFG_F32, DFG_SHAPE(R, V), x);
        dfg_output(f.g, dfg_sample(f.g, lg2, rng_state(&f, "rng"), 1.0f, 0), "tok");
        if (dfg_fx_create_seeded(&f, 1, run < 2 ? seed : seed + 1) && dfg_fx_step(&f)) dfg_fx_read(&f, "tok", toks[run], sizeof(toks[run]));
        dfg_fx_end(&f);
    }
    CHECK(memcmp(toks[0], toks[1], sizeof(toks[0])) == 0, "one seed, one token sequence");
    CHECK(memcmp(toks[0], toks[2], sizeof(toks[0])) != 0, "a different seed gives different tokens");
    free(x);
}

/* ---------------------------------------------------------------- top-k */
static void test_top_k(void) {
    enum { R = 4000, V = 20, K = 3 };
    const float T = 2.0f; /* hot: without the cut every token would be drawn often */
    float *x = malloc(sizeof(float) * R * V);
    dfg_test_fill_normal(x, R * V, 1);
    dfg_fx f;
    dfg_fx_begin(&f, "top_k");
    dfg_output(f.g, dfg_sample(f.g, dfg_const(f.p, "logits", DFG_F32, DFG_SHAPE(R, V), x), rng_state(&f, "rng"), T, K),
               "tok");
    if (dfg_fx_create(&f, 1) && dfg_fx_step(&f)) {
        int32_t *tok = malloc(sizeof(int32_t) * R);
        dfg_fx_read(&f, "tok", tok, sizeof(int32_t) * R);
        int outside = 0;
        double expect[K] = {0}, var[K] = {0};
        int count[K] = {0};
        for (int r = 0; r < R; r++) {
            const float *xr = x + r * V;
            int top[K]; /* indices of the K largest, largest first */
            bool used[V] = {false};
            for (int k = 0; k < K; k++) {
                int best = -1;
                for (int j = 0; j < V; j++)
                    if (!used[j] && (best < 0 || xr[j] > xr[best])) best = j;
                used[best] = true;
                top[k] = best;
            }
            double z = 0, p[K];
            for (int k = 0; k < K; k++) z += p[k] = exp(((double)xr[top[k]] - xr[top[0]]) / T);
            int rank = -1;
            for (int k = 0; k < K; k++) {
                p[k] /= z;
                expect[k] += p[k];
                var[k] += p[k] * (1 - p[k]);
                if (tok[r] == top[k]) rank = k;
            }
            if (rank < 0) outside++;
            else count[rank]++;
        }
        CHECK(outside == 0, "top_k=%d drew outside the %d largest logits in %d of %d rows", K, K, outside, R);
        for (int k = 0; k < K; k++)
            CHECK(fabs(count[k] - expect[k]) < 5 * sqrt(var[k]) + 1,
                  "rank %d drawn %d times, expected %.1f +- %.1f (renormalised over the top %d)", k + 1, count[k],
                  expect[k], sqrt(var[k]), K);
        free(tok);
    }
    dfg_fx_end(&f);
    free(x);
}

/* ---------------------------------------------------------------- the empirical distribution */
/* Pearson's chi-square of counts against probabilities, over n draws. */
static double chi_square(const int *count, const double *p, int v, int n) {
    double c2 = 0;
    for (int j = 0; j < v; j++) {
        double e = p[j] * n;
        c2 += (count[j] - e) * (count[j] - e) / e;
    }
    return c2;
}

static void test_distribution(void) {
    enum { R = 20000, V = 6 };
    const float logits[V] = {1.0f, 0.0f, -0.5f, 2.0f, 0.3f, -1.5f};
    const float T = 0.8f;
    float *x = malloc(sizeof(float) * R * V);
    for (int r = 0; r < R; r++) memcpy(x + r * V, logits, sizeof(logits));
    dfg_fx f;
    dfg_fx_begin(&f, "distribution");
    dfg_tensor *lg = dfg_const(f.p, "logits", DFG_F32, DFG_SHAPE(R, V), x);
    dfg_tensor *rng = rng_state(&f, "rng");
    dfg_output(f.g, dfg_sample(f.g, lg, rng, T, 0), "tok");
    dfg_output(f.g, dfg_sample(f.g, lg, rng, T, 3), "tok3");
    if (dfg_fx_create(&f, 1) && dfg_fx_step(&f)) {
        int32_t *tok = malloc(sizeof(int32_t) * R);
        int count[V] = {0}, count3[V] = {0};
        dfg_fx_read(&f, "tok", tok, sizeof(int32_t) * R);
        for (int r = 0; r < R; r++)
            if (tok[r] >= 0 && tok[r] < V) count[tok[r]]++;
        dfg_fx_read(&f, "tok3", tok, sizeof(int32_t) * R);
        for (int r = 0; r < R; r++)
            if (tok[r] >= 0 && tok[r] < V) count3[tok[r]]++;
        double p[V], z = 0, p3[3], z3 = 0;
        for (int j = 0; j < V; j++) z += p[j] = exp(logits[j] / T);
        for (int j = 0; j < V; j++) p[j] /= z;
        /* the three largest are tokens 3, 0, 4 */
        const int top3[3] = {3, 0, 4};
        for (int k = 0; k < 3; k++) z3 += p3[k] = exp(logits[top3[k]] / T);
        int c3[3], others = 0;
        for (int k = 0; k < 3; k++) p3[k] /= z3, c3[k] = count3[top3[k]];
        others = R - c3[0] - c3[1] - c3[2];
        /* 5 and 2 degrees of freedom; the bounds are exceeded with probability about 1e-6 */
        double c2 = chi_square(count, p, V, R), c2k = chi_square(c3, p3, 3, R);
        CHECK(c2 < 36.0, "chi-square of %d draws vs softmax(logits/T) = %.2f (df 5); counts %d %d %d %d %d %d", R, c2,
              count[0], count[1], count[2], count[3], count[4], count[5]);
        CHECK(c2k < 28.0 && others == 0, "top-3 chi-square %.2f (df 2), %d draws outside the top 3", c2k, others);
        int32_t st[4];
        dfg_fx_read(&f, "rng", st, sizeof(st));
        CHECK(st[2] == 2 && st[3] == 0, "two calls of %d rows each advance the counter by 2, not per row: %d", R, st[2]);
        free(tok);
    }
    dfg_fx_end(&f);
    free(x);
}

/* ---------------------------------------------------------------- top_p, min_p, repetition_penalty */
/* The distribution generate draws from, in double: the penalty on the counted ids (in f32, as the
 * kernel and torch), temperature, top_k (ties of the k-th kept), top_p (the likeliest tokens while
 * the mass before them is below top_p; the test's logits have no ties), min_p; renormalised. */
static void reference_probs(const float *z, int v, const dfg_sampling *s, const bool *counted, double *q) {
    float zp[16];
    double w[16], total = 0, wmax = 0;
    for (int j = 0; j < v; j++) {
        zp[j] = z[j];
        if (counted && counted[j]) zp[j] = zp[j] < 0 ? zp[j] * s->repetition_penalty : zp[j] / s->repetition_penalty;
    }
    for (int j = 0; j < v; j++) w[j] = exp((double)zp[j] / s->temperature);
    for (int j = 0; j < v; j++) {
        int above = 0;
        for (int i = 0; i < v; i++) above += zp[i] > zp[j];
        if (s->top_k > 0 && above >= s->top_k) w[j] = 0;
    }
    for (int j = 0; j < v; j++) total += w[j], wmax = w[j] > wmax ? w[j] : wmax;
    double kept[16];
    for (int j = 0; j < v; j++) {
        double before = 0;
        for (int i = 0; i < v; i++) before += zp[i] > zp[j] ? w[i] : 0;
        bool cut = (s->top_p > 0 && s->top_p < 1 && before / total >= s->top_p) || w[j] / wmax < s->min_p;
        kept[j] = cut ? 0 : w[j];
    }
    double z2 = 0;
    for (int j = 0; j < v; j++) z2 += kept[j];
    for (int j = 0; j < v; j++) q[j] = kept[j] / z2;
}

/* the chi-square bound exceeded with probability 1e-6 at df = 1 .. 8 */
static double chi_bound(int df) {
    static const double b[8] = {23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52, 42.70};
    return df >= 1 && df <= 8 ? b[df - 1] : 1e9;
}

/* tok (R) and lp (R) against q: no draw of a removed token, the counts' chi-square, each log-prob */
static void check_draws(const char *what, const int32_t *tok, const float *lp, int R, int v, const double *q) {
    int count[16] = {0}, removed = 0, df = -1, worst = -1;
    double lp_err = 0;
    for (int r = 0; r < R; r++) {
        if (tok[r] < 0 || tok[r] >= v || q[tok[r]] == 0) {
            removed++;
            continue;
        }
        count[tok[r]]++;
        double e = fabs(lp[r] - log(q[tok[r]]));
        if (e > lp_err) lp_err = e, worst = r;
    }
    int kc[16];
    double kq[16];
    for (int j = 0; j < v; j++)
        if (q[j] > 0) kc[++df] = count[j], kq[df] = q[j];
    double c2 = chi_square(kc, kq, df + 1, R);
    CHECK(removed == 0, "%s: %d of %d draws are tokens the settings remove", what, removed, R);
    CHECK(df >= 1 && c2 < chi_bound(df), "%s: chi-square %.2f over %d kept tokens (bound %.2f)", what, c2, df + 1,
          chi_bound(df));
    CHECK(lp_err < 2e-6, "%s: sampling log-prob off by %.3g (row %d: %g vs log q %g)", what, lp_err, worst,
          worst >= 0 ? lp[worst] : 0.0, worst >= 0 ? log(q[tok[worst]]) : 0.0);
}

static void test_trl_settings(void) {
    enum { R = 20000, V = 8, H = 6, CASES = 5 };
    const float logits[V] = {2.0f, 1.2f, 0.9f, 0.1f, -0.3f, -1.0f, 1.5f, -2.2f};
    /* counted: 0, 6, 3 (twice: once is what counts); 7 is the skipped id, 5 lies past history_len */
    const int32_t hist_row[H] = {0, 6, 6, 3, 7, 5};
    const bool counted[V] = {true, false, false, true, false, false, true, false};
    const dfg_sampling cases[CASES] = {
        {.temperature = 0.9f, .top_p = 0.75f},
        {.temperature = 0.9f, .min_p = 0.15f},
        {.temperature = 0.9f, .repetition_penalty = 1.3f},
        {.temperature = 0.9f, .top_k = 6, .top_p = 0.9f, .min_p = 0.05f, .repetition_penalty = 1.3f},
        {.temperature = 0.9f, .top_p = 1.0f, .repetition_penalty = 1.0f}, /* neutral */
    };
    float *x = malloc(sizeof(float) * R * V);
    int32_t *hist = malloc(sizeof(int32_t) * R * H);
    for (int r = 0; r < R; r++) memcpy(x + r * V, logits, sizeof(logits)), memcpy(hist + r * H, hist_row, sizeof(hist_row));
    dfg_fx f;
    dfg_fx_begin(&f, "trl_settings");
    dfg_tensor *lg = dfg_const(f.p, "logits", DFG_F32, DFG_SHAPE(R, V), x);
    dfg_sample_io io = {.history = dfg_const(f.p, "history", DFG_I32, DFG_SHAPE(R, H), hist),
                        .history_len = dfg_fill(f.g, DFG_I32, DFG_SCALAR, 5.0f), .history_skip = 7};
    char name[16];
    for (int c = 0; c < CASES; c++) {
        dfg_tensor *lp;
        io.logp = &lp;
        snprintf(name, sizeof(name), "rng%d", c);
        dfg_tensor *rng = rng_state(&f, name);
        snprintf(name, sizeof(name), "tok%d", c);
        dfg_output(f.g, dfg_sample_with(f.g, lg, rng, &cases[c], &io), name);
        snprintf(name, sizeof(name), "lp%d", c);
        dfg_output(f.g, lp, name);
    }
    /* neutral settings draw dfg_sample's tokens from the same state */
    dfg_output(f.g, dfg_sample(f.g, lg, rng_state(&f, "rng_plain"), 0.9f, 0), "tok_plain");
    /* greedy: the penalised argmax (2.0 / 3 < 1.5 / 3 < 1.2); without history, the plain one */
    io.logp = NULL;
    dfg_output(f.g, dfg_sample_with(f.g, lg, rng_state(&f, "rng_g"), &(dfg_sampling){.repetition_penalty = 3.0f}, &io),
               "tok_greedy");
    const int32_t start[4] = {0x1234567, 0x7654321, 42, 0}; /* the neutral case's state and the plain one's */
    bool made = dfg_fx_create(&f, 1);
    if (made) dfg_fx_write(&f, "rng4", start, sizeof(start)), dfg_fx_write(&f, "rng_plain", start, sizeof(start));
    if (made && dfg_fx_step(&f)) {
        int32_t *tok = malloc(sizeof(int32_t) * R), *plain = malloc(sizeof(int32_t) * R);
        float *lp = malloc(sizeof(float) * R);
        static const char *const what[CASES] = {"top_p 0.75", "min_p 0.15", "repetition_penalty 1.3",
                                                "top_k 6, top_p 0.9, min_p 0.05, penalty 1.3", "neutral"};
        for (int c = 0; c < CASES; c++) {
            double q[V];
            reference_probs(logits, V, &cases[c], cases[c].repetition_penalty != 0 ? counted : NULL, q);
            snprintf(name, sizeof(name), "tok%d", c);
            dfg_fx_read(&f, name, tok, sizeof(int32_t) * R);
            snprintf(name, sizeof(name), "lp%d", c);
            dfg_fx_read(&f, name, lp, sizeof(float) * R);
            check_draws(what[c], tok, lp, R, V, q);
        }
        dfg_fx_read(&f, "tok_plain", plain, sizeof(int32_t) * R);
        CHECK(memcmp(tok, plain, sizeof(int32_t) * R) == 0, "neutral settings draw dfg_sample's tokens");
        dfg_fx_read(&f, "tok_greedy", tok, sizeof(int32_t) * R);
        int bad = 0;
        for (int r = 0; r < R; r++) bad += tok[r] != 1;
        CHECK(bad == 0, "greedy with penalty 3 picks token 1 (the penalised argmax) in every row: %d others", bad);
        free(tok), free(plain), free(lp);
    }
    dfg_fx_end(&f);
    free(x), free(hist);
}

/* ---------------------------------------------------------------- NaN logits */
static void test_nan(void) {
    enum { R = 3, V = 5 };
    dfg_fx f;
    dfg_fx_begin(&f, "nan");
    dfg_tensor *lg = dfg_input(f.g, "logits", DFG_F32, DFG_SHAPE(R, V));
    dfg_output(f.g, dfg_sample(f.g, lg, rng_state(&f, "rng"), 1.0f, 0), "tok");
    if (dfg_fx_create(&f, 1)) {
        float x[R * V];
        dfg_test_fill_normal(x, R * V, 1);
        x[1 * V + 2] = NAN;
        dfg_fx_write(&f, "logits", x, sizeof(x));
        dfg_status st = dfg_runtime_step(f.rt);
        const char *msg = dfg_runtime_error(f.rt);
        CHECK(st == DFG_ERR_NUMERIC, "NaN logits: status %s", dfg_status_name(st));
        CHECK(strstr(msg, "sample 'tok'") && strstr(msg, "row 1"), "the message names the node and the row: %s", msg);
    }
    dfg_fx_end(&f);
    /* greedy sampling must not silently pick around a NaN either */
    dfg_fx_begin(&f, "nan_greedy");
    dfg_tensor *lg2 = dfg_input(f.g, "logits", DFG_F32, DFG_SHAPE(R, V));
    dfg_output(f.g, dfg_sample(f.g, lg2, rng_state(&f, "rng"), 0.0f, 0), "tok");
    if (dfg_fx_create(&f, 1)) {
        float x[R * V] = {0};
        x[2 * V] = NAN;
        dfg_fx_write(&f, "logits", x, sizeof(x));
        CHECK(dfg_runtime_step(f.rt) == DFG_ERR_NUMERIC, "NaN logits fail greedy sampling too");
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- sub-batches (row0) */
/* Each variant samples the whole batch (dfg_sample) and rows [row0, row0 + N) of it (dfg_slice_at
 * and dfg_sample_rows, row0 read at run time), each call from its own RNG state; every state is
 * set to one value before a step, so the sub-batch must draw the whole batch's tokens for its
 * rows. Flat logits (most tokens likely), so a sub-batch drawing with row indices 0 .. N-1
 * instead would pick other tokens in many rows. */
static void test_sub_batch(void) {
    enum { R = 24, V = 50, N = 6, NV = 5, TRIALS = 3 };
    const struct {
        float temperature;
        int top_k;
    } var[NV] = {{1.0f, 0}, {0.7f, 5}, {1.8f, 0}, {1.0f, 12}, {1.3f, 0}};
    const int row0s[] = {0, 1, 7, 11, R - N};
    const int n_row0 = (int)(sizeof(row0s) / sizeof(row0s[0]));
    dfg_fx f;
    dfg_fx_begin(&f, "sub_batch");
    dfg_tensor *lg = dfg_input(f.g, "logits", DFG_F32, DFG_SHAPE(R, V));
    dfg_tensor *row0 = dfg_input(f.g, "row0", DFG_I32, DFG_SCALAR);
    dfg_tensor *row0_1 = dfg_input(f.g, "row0_1", DFG_I32, DFG_SHAPE(1)); /* one element of rank 1: also a scalar */
    dfg_tensor *sub = dfg_slice_at(f.g, lg, 0, row0, N);
    dfg_tensor *ids = dfg_input(f.g, "ids", DFG_I32, DFG_SHAPE(N)); /* rows gathered in any order */
    dfg_tensor *picked = dfg_embed(f.g, lg, ids);                    /* (N, V) rows ids[r] */
    char name[32];
    for (int i = 0; i < NV; i++) {
        snprintf(name, sizeof(name), "rng_full%d", i);
        dfg_tensor *rf = rng_state(&f, name);
        snprintf(name, sizeof(name), "rng_sub%d", i);
        dfg_tensor *rs = rng_state(&f, name);
        snprintf(name, sizeof(name), "full%d", i);
        dfg_output(f.g, dfg_sample(f.g, lg, rf, var[i].temperature, var[i].top_k), name);
        snprintf(name, sizeof(name), "sub%d", i);
        /* the last variant reads row0 from the (1)-shaped copy */
        dfg_output(f.g, dfg_sample_rows(f.g, sub, rs, i == NV - 1 ? row0_1 : row0, var[i].temperature, var[i].top_k),
                   name);
        snprintf(name, sizeof(name), "rng_ids%d", i);
        dfg_tensor *ri = rng_state(&f, name);
        snprintf(name, sizeof(name), "ids%d", i);
        dfg_output(f.g, dfg_sample_rows(f.g, picked, ri, ids, var[i].temperature, var[i].top_k), name);
    }
    if (dfg_fx_create(&f, 1)) {
        float x[R * V];
        int32_t full[R], part[N], st_full[4], st_sub[4];
        int compared = 0, differ = 0, rng_differ = 0, id_differ = 0;
        int32_t id[N], part_ids[N];
        for (int t = 0; t < TRIALS; t++)
            for (int q = 0; q < n_row0; q++) {
                dfg_test_fill_normal(x, R * V, 0.7f); /* fresh logits each step */
                const int32_t r0 = row0s[q];
                /* a random key and counter, the counter sometimes about to carry into its high word */
                int32_t st[4] = {(int32_t)dfg_test_u64(), (int32_t)dfg_test_u64(), (int32_t)dfg_test_u64(),
                                 dfg_test_int(0, 3)};
                if (t == 1) st[2] = -1;
                dfg_fx_write(&f, "logits", x, sizeof(x));
                dfg_fx_write(&f, "row0", &r0, sizeof(r0));
                dfg_fx_write(&f, "row0_1", &r0, sizeof(r0));
                for (int r = 0; r < N; r++) id[r] = dfg_test_int(0, R - 1); /* any rows, repeats allowed */
                dfg_fx_write(&f, "ids", id, sizeof(id));
                for (int i = 0; i < NV; i++) {
                    snprintf(name, sizeof(name), "rng_full%d", i);
                    dfg_fx_write(&f, name, st, sizeof(st));
                    snprintf(name, sizeof(name), "rng_sub%d", i);
                    dfg_fx_write(&f, name, st, sizeof(st));
                    snprintf(name, sizeof(name), "rng_ids%d", i);
                    dfg_fx_write(&f, name, st, sizeof(st));
                }
                if (!dfg_fx_step(&f)) break;
                for (int i = 0; i < NV; i++) {
                    snprintf(name, sizeof(name), "full%d", i);
                    dfg_fx_read(&f, name, full, sizeof(full));
                    snprintf(name, sizeof(name), "sub%d", i);
                    dfg_fx_read(&f, name, part, sizeof(part));
                    for (int r = 0; r < N; r++, compared++) differ += part[r] != full[r0 + r];
                    snprintf(name, sizeof(name), "ids%d", i);
                    dfg_fx_read(&f, name, part_ids, sizeof(part_ids));
                    for (int r = 0; r < N; r++) id_differ += part_ids[r] != full[id[r]];
                    snprintf(name, sizeof(name), "rng_full%d", i);
                    dfg_fx_read(&f, name, st_full, sizeof(st_full));
                    snprintf(name, sizeof(name), "rng_sub%d", i);
                    dfg_fx_read(&f, name, st_sub, sizeof(st_sub));
                    rng_differ += memcmp(st_full, st_sub, sizeof(st_full)) != 0 ||
                                  st_sub[2] != (int32_t)((uint32_t)st[2] + 1u);
                }
            }
        printf("test_ops_sample: sub-batches: %d rows compared (%d variants, row0 in {0,1,7,11,%d}), %d differ from the "
               "whole batch's tokens\n", compared, NV, R - N, differ);
        CHECK(compared == TRIALS * n_row0 * NV * N, "compared %d rows", compared);
        CHECK(differ == 0, "%d of %d sub-batch rows drew another token than the whole batch's row row0 + r", differ,
              compared);
        CHECK(rng_differ == 0, "%d sub-batch calls left the RNG state other than the whole batch's call", rng_differ);
        CHECK(id_differ == 0, "%d of %d gathered rows (one row index each) drew another token than their whole-batch "
              "row", id_differ, compared);
    }
    dfg_fx_end(&f);
}

/* ---------------------------------------------------------------- rng_advance */
static void test_rng_advance(void) {
    enum { R = 16, V = 40, SKIP = 5 };
    float *x = malloc(sizeof(float) * R * V);
    dfg_test_fill_normal(x, R * V, 0.5f);
    dfg_fx f;
    dfg_fx_begin(&f, "rng_advance");
    dfg_tensor *lg = dfg_const(f.p, "logits", DFG_F32, DFG_SHAPE(R, V), x);
    dfg_tensor *a = rng_state(&f, "a"), *b = rng_state(&f, "b");
    for (int i = 0; i < SKIP; i++) dfg_sample(f.g, lg, a, 1.0f, 0); /* SKIP draws made and dropped */
    dfg_output(f.g, dfg_sample(f.g, lg, a, 1.0f, 0), "drawn");
    dfg_rng_advance(f.g, b, SKIP);                                  /* ... or skipped */
    dfg_output(f.g, dfg_sample(f.g, lg, b, 1.0f, 0), "skipped");
    if (dfg_fx_create(&f, 1)) {
        int32_t key[4], start[4];
        dfg_fx_read(&f, "a", key, sizeof(key));
        for (int trial = 0; trial < 2; trial++) { /* from a random counter, then one that carries */
            start[0] = key[0], start[1] = key[1];
            start[2] = trial ? -3 : dfg_test_int(0, 1 << 30), start[3] = trial ? 41 : dfg_test_int(0, 9);
            dfg_fx_write(&f, "a", start, sizeof(start));
            dfg_fx_write(&f, "b", start, sizeof(start));
            int32_t drawn[R], skipped[R], sa[4], sb[4];
            dfg_test_poison(drawn, sizeof(drawn));
            dfg_test_poison(skipped, sizeof(skipped));
            if (!dfg_fx_step(&f)) break;
            dfg_fx_read(&f, "drawn", drawn, sizeof(drawn));
            dfg_fx_read(&f, "skipped", skipped, sizeof(skipped));
            dfg_fx_read(&f, "a", sa, sizeof(sa));
            dfg_fx_read(&f, "b", sb, sizeof(sb));
            CHECK(memcmp(drawn, skipped, sizeof(drawn)) == 0, "trial %d: the draw after advancing by %d differs from the "
                  "draw after %d calls", trial, SKIP, SKIP);
            CHECK(memcmp(sa, sb, sizeof(sa)) == 0, "trial %d: rng after advance + call (%d %d) != after %d calls (%d %d)",
                  trial, sb[3], sb[2], SKIP + 1, sa[3], sa[2]);
            uint64_t c0 = (uint64_t)(uint32_t)start[2] | (uint64_t)(uint32_t)start[3] << 32;
            uint64_t c1 = (uint64_t)(uint32_t)sb[2] | (uint64_t)(uint32_t)sb[3] << 32;
            CHECK(c1 == c0 + SKIP + 1 && sb[0] == key[0] && sb[1] == key[1], "trial %d: counter %llu -> %llu", trial,
                  (unsigned long long)c0, (unsigned long long)c1);
        }
    }
    dfg_fx_end(&f);
    /* a state of another shape is refused, naming the op */
    dfg_fx_begin(&f, "rng_advance_bad");
    dfg_rng_advance(f.g, dfg_state(f.p, "r3", DFG_I32, DFG_SHAPE(3), DFG_ROLE_RNG, dfg_init_zeros()), 1);
    CHECK(dfg_graph_status(f.g) == DFG_ERR_SHAPE && strstr(dfg_graph_error(f.g), "rng_advance"), "bad rng: %s",
          dfg_graph_error(f.g));
    dfg_fx_end(&f);
    free(x);
}

int main(void) {
    dfg_test_init("test_ops_sample");
    test_greedy();
    test_rng_state();
    test_top_k();
    test_distribution();
    test_trl_settings();
    test_nan();
    test_sub_batch();
    test_rng_advance();
    return dfg_test_finish();
}
