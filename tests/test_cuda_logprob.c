/* test_cuda_logprob.c - the CUDA logprob family (ops/cuda/logprob.cu) against the CPU kernels
 * (tests/cuda_harness.h): logprob and logprob_bwd with a warp per row and a block per row, odd
 * vocabularies (the 16-byte loads' scalar head and tail), rank-3 logits, temperatures, masked
 * rows (dy = 0); linear_logprob (its 4 outputs: log-probs, lse, workspace, entropy) and
 * linear_logprob_bwd with the weight (V, C) and (C, V), row chunks that do and do not divide the
 * rows, vocabulary chunks that are the whole vocabulary or blocks of 256 with a tail, the
 * accumulating form (6 inputs) and the entropy's gradient (7 inputs, 8 with the accumulator).
 * Beyond the harness: the linear ops give bit-identical results for different v_chunk values
 * (what the CPU promises), the entropy output against the textbook -sum p log p in double, dz
 * and z misaligned against each other take the scalar path, and a target outside the vocabulary
 * sets the device flag. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/dtype.h"
#include "ops/cuda/cuda.h"

/* ---------------------------------------------------------------- cases */
typedef struct {
    int rank;        /* rank of the targets: 1 or 2 */
    int64_t d0, d1;  /* targets' shape (d0) or (d0, d1) */
    int64_t v, c;    /* vocabulary; hidden width (linear) */
    float inv_temp;
    bool tb;                 /* linear: W (V, C) */
    int64_t rc, vc;          /* linear: chunks */
    bool acc;                /* linear_logprob_bwd: the accumulator (6 inputs, or 8) */
    bool ent;                /* linear_logprob_bwd: dentropy, entropy (7 inputs, or 8) */
    bool nodw;               /* linear_logprob_bwd: no_dweight (a frozen weight: dh only) */
} lp_case;

static dfg_shape rows_shape(const lp_case *k) { return k->rank == 1 ? DFG_SHAPE(k->d0) : DFG_SHAPE(k->d0, k->d1); }
static dfg_shape with_last(const lp_case *k, int64_t last) {
    return k->rank == 1 ? DFG_SHAPE(k->d0, last) : DFG_SHAPE(k->d0, k->d1, last);
}
static dfg_attrs attrs_of(const lp_case *k) {
    return (dfg_attrs){.logprob = {k->inv_temp, k->tb, k->rc, k->vc, k->nodw}};
}

static dfg_node *build_logprob(dfg_graph *g, dfg_dtype dt, void *user) {
    const lp_case *k = user;
    dfg_attrs a = attrs_of(k);
    dfg_tensor *in[2] = {dfg_input(g, "z", dt, with_last(k, k->v)), dfg_input(g, "t", DFG_I32, rows_shape(k))};
    return dfg_node_add(g, DFG_OP_LOGPROB, in, 2, &a, 2);
}

static dfg_node *build_logprob_bwd(dfg_graph *g, dfg_dtype dt, void *user) {
    const lp_case *k = user;
    dfg_attrs a = attrs_of(k);
    dfg_tensor *in[4] = {dfg_input(g, "dy", DFG_F32, rows_shape(k)), dfg_input(g, "z", dt, with_last(k, k->v)),
                         dfg_input(g, "t", DFG_I32, rows_shape(k)), dfg_input(g, "lse", DFG_F32, rows_shape(k))};
    return dfg_node_add(g, DFG_OP_LOGPROB_BWD, in, 4, &a, 1);
}

static dfg_shape w_shape(const lp_case *k) { return k->tb ? DFG_SHAPE(k->v, k->c) : DFG_SHAPE(k->c, k->v); }

static dfg_node *build_linear(dfg_graph *g, dfg_dtype dt, void *user) {
    const lp_case *k = user;
    dfg_attrs a = attrs_of(k);
    dfg_tensor *in[3] = {dfg_input(g, "h", dt, with_last(k, k->c)), dfg_input(g, "w", dt, w_shape(k)),
                         dfg_input(g, "t", DFG_I32, rows_shape(k))};
    return dfg_node_add(g, DFG_OP_LINEAR_LOGPROB, in, 3, &a, 4);
}

static dfg_node *build_linear_bwd(dfg_graph *g, dfg_dtype dt, void *user) {
    const lp_case *k = user;
    dfg_attrs a = attrs_of(k);
    dfg_tensor *in[8] = {dfg_input(g, "dy", DFG_F32, rows_shape(k)), dfg_input(g, "h", dt, with_last(k, k->c)),
                         dfg_input(g, "w", dt, w_shape(k)), dfg_input(g, "t", DFG_I32, rows_shape(k)),
                         dfg_input(g, "lse", DFG_F32, rows_shape(k))};
    int n_in = 5;
    if (k->ent) {
        in[n_in++] = dfg_input(g, "dent", DFG_F32, rows_shape(k));
        in[n_in++] = dfg_input(g, "ent", DFG_F32, rows_shape(k));
    }
    if (k->acc) in[n_in++] = dfg_state(g->program, "dw_acc", dt, w_shape(k), DFG_ROLE_GRAD, dfg_init_zeros());
    return dfg_node_add(g, DFG_OP_LINEAR_LOGPROB_BWD, in, n_in, &a, 3);
}

/* Inputs by meaning: targets in [0, V); dy and dent with about a quarter of the rows masked (0);
 * logits in [-3, 3); hidden states and weights in [-1, 1) (logits of a few units); lse and the
 * entropy within 0.3 of the log-sum-exp and the entropy of the case's own logits (the inputs are
 * filled in slot order, so z, h and W are there when they are drawn): a random lse would make
 * exp(x - lse) sum far from 1, and dz's rounding to bf16 then dominates dh's cancellation. */
static const float *filled_z, *filled_h, *filled_w;

/* row r's logit j times inv_temp, in double */
static double scaled_logit(const lp_case *k, const float *z, const float *h, const float *w, int64_t r, int64_t j) {
    double x = 0.0;
    if (k->c == 0) x = z[r * k->v + j];
    else
        for (int64_t i = 0; i < k->c; i++) x += (double)h[r * k->c + i] * w[k->tb ? j * k->c + i : i * k->v + j];
    return x * k->inv_temp;
}

/* the textbook log-sum-exp (ent false) or entropy -sum p log p (ent true) of row r, in double */
static double row_stat(const lp_case *k, const float *z, const float *h, const float *w, int64_t r, bool ent) {
    double m = -INFINITY, l = 0.0, hsum = 0.0;
    for (int64_t j = 0; j < k->v; j++) m = fmax(m, scaled_logit(k, z, h, w, r, j));
    for (int64_t j = 0; j < k->v; j++) l += exp(scaled_logit(k, z, h, w, r, j) - m);
    double lse = m + log(l);
    if (!ent) return lse;
    for (int64_t j = 0; j < k->v; j++) {
        double lp = scaled_logit(k, z, h, w, r, j) - lse;
        hsum -= exp(lp) * lp;
    }
    return hsum;
}

static void fill_stat(const lp_case *k, float *f, int64_t rows, bool ent) {
    for (int64_t r = 0; r < rows; r++)
        f[r] = (float)row_stat(k, filled_z, filled_h, filled_w, r, ent) + dfg_test_uniform(-0.3f, 0.3f);
}

static void fill_lp(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const lp_case *k = user;
    const char *name = t->name;
    float *f = data;
    if (t->dtype == DFG_I32) {
        for (int64_t i = 0; i < n; i++) ((int32_t *)data)[i] = dfg_test_int(0, (int)k->v - 1);
    } else if (!strcmp(name, "dy") || !strcmp(name, "dent")) {
        for (int64_t i = 0; i < n; i++) f[i] = dfg_test_int(0, 3) ? dfg_test_uniform(-1.0f, 1.0f) : 0.0f;
    } else if (!strcmp(name, "lse") || !strcmp(name, "ent")) {
        fill_stat(k, f, n, name[0] == 'e');
    } else if (!strcmp(name, "z")) {
        dfg_test_fill_uniform(f, n, -3.0f, 3.0f);
        filled_z = f;
    } else {
        dfg_test_fill_uniform(f, n, -1.0f, 1.0f);
        if (!strcmp(name, "h")) filled_h = f;
        if (!strcmp(name, "w")) filled_w = f;
    }
    (void)slot;
}

static void label_of(char *buf, size_t len, const char *op, const lp_case *k) {
    char rs[48];
    if (k->rank == 1) snprintf(rs, sizeof(rs), "(%lld)", (long long)k->d0);
    else snprintf(rs, sizeof(rs), "(%lld,%lld)", (long long)k->d0, (long long)k->d1);
    snprintf(buf, len, "%s rows%s V%lld C%lld s%g%s rc%lld vc%lld%s%s", op, rs, (long long)k->v, (long long)k->c,
             (double)k->inv_temp, k->tb ? " W(V,C)" : " W(C,V)", (long long)k->rc, (long long)k->vc,
             k->acc ? " acc" : "", k->ent ? " +entropy" : "");
    if (k->nodw) snprintf(buf + strlen(buf), len - strlen(buf), " no_dweight");
}

static void check_case(dfg_node *(*build)(dfg_graph *, dfg_dtype, void *), const char *op, const lp_case *k,
                       unsigned skip) {
    char label[200];
    label_of(label, sizeof(label), op, k);
    cuda_case c = {.label = label, .build = build, .user = (void *)k, .fill = fill_lp, .bf16 = true, .seeds = 2,
                   .skip_outputs = skip};
    cuda_check(&c);
}

/* ---------------------------------------------------------------- direct runs (beyond the harness) */
typedef struct {
    dfg_program *p;
    dfg_node *n;
    void *in[8], *out[8];
    void *blk_in[8], *blk_out[8]; /* the allocations (in/out may point one element in) */
} direct;

/* Builds the node (f32 or bf16) with the case's attributes; inputs filled from `src` (the f32
 * values, rounded for bf16), outputs poisoned; out_shift/in_shift: elements the data pointers
 * of the float outputs/inputs sit past their allocations' starts; alias_acc: the accumulator's
 * output is its input's buffer (as in a plan), else a buffer of its own. */
static bool direct_make(direct *d, dfg_node *(*build)(dfg_graph *, dfg_dtype, void *), const lp_case *k, dfg_dtype dt,
                        float *const *src, int in_shift, int out_shift, bool alias_acc) {
    memset(d, 0, sizeof(*d));
    d->n = cuda_node_alone(build, (void *)k, dt, "direct", &d->p);
    if (!d->n) return false;
    for (int j = 0; j < d->n->n_in; j++) {
        const dfg_tensor *t = d->n->in[j];
        int sh = dfg_is_float(t->dtype) ? in_shift : 0;
        size_t es = dfg_dtype_size(t->dtype);
        d->blk_in[j] = malloc(dfg_tensor_bytes(t) + (size_t)sh * es + 1);
        d->in[j] = (char *)d->blk_in[j] + sh * es;
        for (int64_t e = 0; e < dfg_tensor_numel(t); e++) {
            if (t->dtype == DFG_I32) ((int32_t *)d->in[j])[e] = ((const int32_t *)src[j])[e];
            else dfg_store(d->in[j], t->dtype, e, t->dtype == DFG_BF16 ? dfg_bf16_to_f32(dfg_f32_to_bf16(src[j][e])) : src[j][e]);
        }
    }
    for (int o = 0; o < d->n->n_out; o++) {
        const dfg_tensor *t = d->n->out[o];
        const int last = d->n->n_in - 1;
        if (alias_acc && d->n->op == DFG_OP_LINEAR_LOGPROB_BWD && (last == 5 || last == 7) &&
            t->storage == d->n->in[last]->storage) { /* the accumulator (the last input), in place */
            d->out[o] = d->in[last];
            continue;
        }
        int sh = dfg_is_float(t->dtype) ? out_shift : 0;
        size_t es = dfg_dtype_size(t->dtype);
        d->blk_out[o] = malloc(dfg_tensor_bytes(t) + (size_t)sh * es + 1);
        d->out[o] = (char *)d->blk_out[o] + sh * es;
        dfg_test_poison(d->out[o], dfg_tensor_bytes(t));
    }
    return true;
}

static void direct_free(direct *d) {
    for (int j = 0; j < 8; j++) free(d->blk_in[j]), free(d->blk_out[j]);
    dfg_program_free(d->p);
}

/* Runs the emulated launcher; returns the device flag (-1: the launch failed). */
static int direct_emu(direct *d, uint64_t seed) {
    return cuda_run_emulated(dfg_op_name(d->n->op), d->n, d->in, d->out, 132, seed);
}

static bool direct_cpu(direct *d) { return cuda_run_cpu(dfg_op_name(d->n->op), d->n, d->in, d->out); }

/* f32 sources for every input of a case (indexed by slot), from fill_lp */
static void sources(dfg_node *(*build)(dfg_graph *, dfg_dtype, void *), const lp_case *k, float **src) {
    dfg_program *p = dfg_program_new("src");
    dfg_node *n = build(dfg_graph_new(p, "g"), DFG_F32, (void *)k);
    for (int j = 0; j < 8; j++) src[j] = NULL;
    for (int j = 0; n && j < n->n_in; j++) {
        int64_t cnt = dfg_tensor_numel(n->in[j]);
        src[j] = malloc(sizeof(float) * (size_t)(cnt ? cnt : 1));
        fill_lp(j, n->in[j], src[j], cnt, (void *)k);
    }
    dfg_program_free(p);
}

static bool same_output(const direct *a, const direct *b, int o, const char *what) {
    size_t bytes = dfg_tensor_bytes(a->n->out[o]);
    bool same = memcmp(a->out[o], b->out[o], bytes) == 0;
    CHECK(same, "%s: output %d '%s' differs bit for bit", what, o, a->n->out[o]->name);
    return same;
}

/* linear_logprob(_bwd) with two chunkings of the vocabulary (and of the rows: the same rc) on
 * the same inputs: identical bits, in f32 and bf16. */
static void check_chunk_independence(lp_case k, int64_t vc_a, int64_t vc_b) {
    for (int dti = 0; dti < 2; dti++) {
        dfg_dtype dt = dti ? DFG_BF16 : DFG_F32;
        for (int bwd = 0; bwd < 2; bwd++) {
            dfg_node *(*build)(dfg_graph *, dfg_dtype, void *) = bwd ? build_linear_bwd : build_linear;
            float *src[8];
            lp_case ka = k, kb = k;
            ka.vc = vc_a, kb.vc = vc_b;
            sources(build, &ka, src);
            direct a, b;
            char what[240];
            label_of(what, sizeof(what), bwd ? "linear_logprob_bwd" : "linear_logprob", &ka);
            snprintf(what + strlen(what), sizeof(what) - strlen(what), " vs vc%lld (%s)", (long long)vc_b,
                     dfg_dtype_name(dt));
            if (direct_make(&a, build, &ka, dt, src, 0, 0, true) && direct_make(&b, build, &kb, dt, src, 0, 0, true)) {
                if (direct_emu(&a, 0) == 0 && direct_emu(&b, 7) == 0)
                    for (int o = 0; o < a.n->n_out; o++)
                        if (o != 2) same_output(&a, &b, o, what); /* all but the workspace */
                direct_free(&b);
            }
            direct_free(&a);
            for (int j = 0; j < 8; j++) free(src[j]);
        }
    }
}

/* linear_logprob_bwd with an accumulator (6 or 8 inputs) whose output 1 does not arrive in place
 * (the launcher copies the accumulator first): the same bits as in place. */
static void check_acc_not_in_place(lp_case k) {
    for (int dti = 0; dti < 2; dti++) {
        dfg_dtype dt = dti ? DFG_BF16 : DFG_F32;
        float *src[8];
        sources(build_linear_bwd, &k, src);
        direct a, b;
        if (direct_make(&a, build_linear_bwd, &k, dt, src, 0, 0, true) &&
            direct_make(&b, build_linear_bwd, &k, dt, src, 0, 0, false)) {
            CHECK(b.out[1] != b.in[b.n->n_in - 1], "the accumulator's output has a buffer of its own");
            if (direct_emu(&a, 0) == 0 && direct_emu(&b, 0) == 0)
                for (int o = 0; o < 2; o++) same_output(&a, &b, o, "linear_logprob_bwd, accumulator not in place");
            direct_free(&b);
        }
        direct_free(&a);
        for (int j = 0; j < 8; j++) free(src[j]);
    }
}

/* The emulated kernel with float inputs or outputs one element past an aligned address against
 * the CPU on aligned buffers (f32: tolerance 1e-5; bf16: 1e-2). */
static void check_shifted(dfg_node *(*build)(dfg_graph *, dfg_dtype, void *), const char *op, lp_case k, int in_shift,
                          int out_shift) {
    for (int dti = 0; dti < 2; dti++) {
        dfg_dtype dt = dti ? DFG_BF16 : DFG_F32;
        float *src[8];
        sources(build, &k, src);
        direct ref, got;
        if (dt == DFG_BF16) { /* the reference: the CPU on the inputs as the bf16 build holds them */
            dfg_program *p = dfg_program_new("round");
            dfg_node *n = build(dfg_graph_new(p, "g"), DFG_BF16, &k);
            for (int j = 0; n && j < n->n_in; j++)
                if (n->in[j]->dtype == DFG_BF16)
                    for (int64_t e = 0; e < dfg_tensor_numel(n->in[j]); e++)
                        src[j][e] = dfg_bf16_to_f32(dfg_f32_to_bf16(src[j][e]));
            dfg_program_free(p);
        }
        if (direct_make(&ref, build, &k, DFG_F32, src, 0, 0, true) &&
            direct_make(&got, build, &k, dt, src, in_shift, out_shift, true)) {
            if (direct_cpu(&ref) && direct_emu(&got, 3) == 0) {
                double rtol = dt == DFG_BF16 ? 1e-2 : 1e-5, atol = dt == DFG_BF16 ? 1e-2 : 1e-6;
                const dfg_tensor *t = ref.n->out[0];
                int bad = 0;
                for (int64_t e = 0; e < dfg_tensor_numel(t); e++) {
                    double a = dfg_load(ref.out[0], DFG_F32, e), b = dfg_load(got.out[0], got.n->out[0]->dtype, e);
                    bad += !(fabs(a - b) <= atol + rtol * fabs(a));
                }
                CHECK(bad == 0, "%s V%lld (%s) shifted in %d / out %d: %d elements differ from the CPU", op,
                      (long long)k.v, dfg_dtype_name(dt), in_shift, out_shift, bad);
            }
            direct_free(&got);
        }
        direct_free(&ref);
        for (int j = 0; j < 8; j++) free(src[j]);
    }
}

/* linear_logprob's entropy output (CUDA, f32) against the textbook -sum p log p of the logits
 * h @ W^T * inv_temp, in double: a formula the CPU shared with the kernel would not hide here. */
static void check_entropy_textbook(lp_case k) {
    float *src[8];
    sources(build_linear, &k, src);
    direct d;
    if (direct_make(&d, build_linear, &k, DFG_F32, src, 0, 0, true) && direct_emu(&d, 5) == 0) {
        const int64_t rows = dfg_tensor_numel(d.n->out[3]);
        const float *got = d.out[3];
        int64_t bad = -1;
        double worst = 0.0, ref_bad = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            double ref = row_stat(&k, NULL, src[0], src[1], r, true);
            worst = fmax(worst, fabs(ref - got[r]));
            if (bad < 0 && !(fabs(ref - got[r]) <= 1e-6 + 1e-5 * fabs(ref))) bad = r, ref_bad = ref;
        }
        char what[200];
        label_of(what, sizeof(what), "linear_logprob", &k);
        CHECK(bad < 0, "%s: entropy of row %lld: CUDA %.9g, textbook %.9g", what, (long long)bad,
              bad < 0 ? 0.0 : got[bad], ref_bad);
        printf("%s: entropy, worst |CUDA - textbook| %.3g\n", what, worst);
    }
    direct_free(&d);
    for (int j = 0; j < 8; j++) free(src[j]);
}

/* no_dweight (a frozen lm_head): on the same inputs, dh is bit for bit the full backward's, on
 * the emulated device and on the CPU, in f32 and bf16, and neither kernel writes the one-float
 * stand-in for dW (it stays poisoned; a dW written there would also run past its allocation). */
static void check_no_dweight(lp_case k) {
    k.acc = false;
    lp_case kn = k;
    kn.nodw = true;
    for (int dti = 0; dti < 2; dti++) {
        dfg_dtype dt = dti ? DFG_BF16 : DFG_F32;
        float *src[8];
        sources(build_linear_bwd, &k, src);
        direct full, nodw;
        char what[240];
        label_of(what, sizeof(what), "linear_logprob_bwd", &kn);
        snprintf(what + strlen(what), sizeof(what) - strlen(what), " (%s)", dfg_dtype_name(dt));
        if (direct_make(&full, build_linear_bwd, &k, dt, src, 0, 0, true)) {
            if (direct_make(&nodw, build_linear_bwd, &kn, dt, src, 0, 0, true)) {
                CHECK(dfg_tensor_numel(nodw.n->out[1]) == 1, "%s: dW's stand-in has %lld elements", what,
                      (long long)dfg_tensor_numel(nodw.n->out[1]));
                unsigned char poison[4];
                dfg_test_poison(poison, sizeof(poison));
                size_t sb = dfg_tensor_bytes(nodw.n->out[1]);
                const int devices = dt == DFG_F32 ? 2 : 1; /* the CPU kernels are f32 */
                for (int dev = 0; dev < devices; dev++) {
                    bool ok = dev ? direct_cpu(&full) && direct_cpu(&nodw)
                                  : direct_emu(&full, 0) == 0 && direct_emu(&nodw, 3) == 0;
                    CHECK(ok, "%s: a %s run failed", what, dev ? "CPU" : "emulated");
                    if (!ok) break;
                    char where[280];
                    snprintf(where, sizeof(where), "%s on the %s", what, dev ? "CPU" : "emulated device");
                    same_output(&full, &nodw, 0, where);
                    CHECK(memcmp(nodw.out[1], poison, sb < 4 ? sb : 4) == 0, "%s: dW's stand-in was written", where);
                }
                direct_free(&nodw);
            }
            direct_free(&full);
        }
        for (int j = 0; j < 8; j++) free(src[j]);
    }
}

/* A target outside [0, V) sets the device flag (the CPU kernel refuses the node instead). */
static void check_bad_target(dfg_node *(*build)(dfg_graph *, dfg_dtype, void *), const char *op, lp_case k,
                             int target_slot, int32_t bad) {
    float *src[8];
    sources(build, &k, src);
    ((int32_t *)src[target_slot])[k.d0 / 2] = bad;
    direct d;
    if (direct_make(&d, build, &k, DFG_F32, src, 0, 0, true)) {
        int flags = direct_emu(&d, 0);
        CHECK(flags > 0, "%s: target %d in a vocabulary of %lld: the device flag is %d", op, bad, (long long)k.v, flags);
        direct_free(&d);
    }
    for (int j = 0; j < 8; j++) free(src[j]);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_logprob")) return DFG_TEST_SKIP;
    /* logprob, logprob_bwd: a warp per row (V <= 2048) and a block per row; V = 1 and odd
     * vocabularies (16-byte head and tail); rank-2 and rank-3 logits; temperatures */
    const lp_case rows[] = {
        {1, 1, 0, 1, 0, 1.0f, false, 0, 0, false, false, false},      {1, 3, 0, 5, 0, 1.0f, false, 0, 0, false, false, false},
        {1, 7, 0, 33, 0, 0.7f, false, 0, 0, false, false, false},     {2, 2, 3, 37, 0, 1.3f, false, 0, 0, false, false, false},
        {1, 17, 0, 64, 0, 1.0f, false, 0, 0, false, false, false},    {1, 5, 0, 1025, 0, 1.0f, false, 0, 0, false, false, false},
        {1, 9, 0, 2048, 0, 0.5f, false, 0, 0, false, false, false},   {1, 3, 0, 2049, 0, 1.0f, false, 0, 0, false, false, false},
        {1, 4, 0, 4099, 0, 2.0f, false, 0, 0, false, false, false},   {2, 2, 2, 4096, 0, 1.0f, false, 0, 0, false, false, false},
        {1, 2, 0, 50257, 0, 1.0f, false, 0, 0, false, false, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        check_case(build_logprob, "logprob", &rows[i], 0);
        check_case(build_logprob_bwd, "logprob_bwd", &rows[i], 0);
    }
    /* linear_logprob(_bwd): both weight layouts; row chunks that divide the rows or not (and 1);
     * v_chunk = V, blocks of 256 with and without a tail; C odd; the accumulating form */
    const lp_case lin[] = {
        {1, 1, 0, 1, 1, 1.0f, true, 1, 1, false, false, false},          {1, 5, 0, 300, 7, 1.0f, true, 5, 300, false, false, false},
        {1, 5, 0, 300, 7, 0.8f, false, 2, 256, false, false, false},     {2, 2, 3, 300, 9, 1.0f, true, 4, 256, true, false, false},
        {1, 9, 0, 1000, 16, 1.25f, false, 9, 512, true, false, false},   {1, 9, 0, 1000, 16, 1.0f, true, 3, 1000, false, false, false},
        {1, 6, 0, 777, 5, 1.0f, false, 6, 777, true, false, false},      {1, 7, 0, 1024, 12, 1.0f, true, 7, 256, false, false, false},
        {1, 3, 0, 5003, 8, 1.0f, true, 3, 1280, false, false, false},    {1, 1, 0, 257, 3, 1.0f, false, 1, 256, false, false, false},
        {1, 2, 0, 66000, 2, 1.0f, true, 2, 66000, false, false, false}, /* more blocks than a round of the fold */
    };
    for (size_t i = 0; i < sizeof(lin) / sizeof(lin[0]); i++) {
        check_case(build_linear, "linear_logprob", &lin[i], 1u << 2); /* the workspace is no result */
        check_case(build_linear_bwd, "linear_logprob_bwd", &lin[i], 1u << 2);
        lp_case e = lin[i]; /* with the entropy's gradient: 7 inputs, or 8 with the accumulator */
        e.ent = true;
        e.acc = i % 2 == 0;
        if (e.v < 10000) check_case(build_linear_bwd, "linear_logprob_bwd", &e, 1u << 2);
    }
    /* random sizes and chunks (fresh each run: the seed is printed), the backward with and without
     * the entropy and the accumulator */
    for (int i = 0; i < 4; i++) {
        lp_case r = {1, dfg_test_int(1, 12), 0, dfg_test_int(1, 1800), dfg_test_int(1, 20), dfg_test_uniform(0.5f, 1.5f),
                     dfg_test_int(0, 1), 0, 0, dfg_test_int(0, 1), dfg_test_int(0, 1), false};
        r.rc = dfg_test_int(1, (int)r.d0);
        r.vc = r.v <= 256 || dfg_test_int(0, 2) == 0 ? r.v : 256 * dfg_test_int(1, (int)(r.v / 256));
        check_case(build_linear, "linear_logprob", &r, 1u << 2);
        check_case(build_linear_bwd, "linear_logprob_bwd", &r, 1u << 2);
    }
    /* results independent of v_chunk: bit for bit, forward and backward */
    check_chunk_independence((lp_case){1, 6, 0, 1000, 8, 1.0f, true, 4, 0, false, false, false}, 256, 768);
    check_chunk_independence((lp_case){1, 6, 0, 1000, 8, 0.9f, false, 6, 0, true, false, false}, 512, 1000);
    check_chunk_independence((lp_case){1, 5, 0, 5003, 4, 1.0f, true, 5, 0, false, false, false}, 256, 5003);
    check_chunk_independence((lp_case){1, 6, 0, 1000, 8, 1.1f, true, 4, 0, false, true, false}, 256, 1000);
    check_chunk_independence((lp_case){1, 7, 0, 777, 6, 1.0f, false, 3, 0, true, true, false}, 256, 512);
    check_no_dweight(lin[1]);
    check_no_dweight(lin[4]); /* W (C, V), vc 512 of 1000: a tail block */
    check_no_dweight((lp_case){2, 2, 3, 300, 9, 1.0f, true, 4, 256, false, true, false}); /* with the entropy */
    for (size_t i = 0; i < sizeof(lin) / sizeof(lin[0]); i += 3) { /* and against the CPU, dW masked */
        lp_case e = lin[i];
        e.acc = false, e.nodw = true, e.ent = i % 2 == 1;
        check_case(build_linear_bwd, "linear_logprob_bwd", &e, 1u << 1 | 1u << 2);
    }
    check_acc_not_in_place(lin[3]);
    check_acc_not_in_place(lin[4]);
    check_acc_not_in_place((lp_case){2, 2, 3, 300, 9, 1.0f, true, 4, 256, true, true, false});
    /* the entropy output against the textbook */
    check_entropy_textbook(lin[1]);
    check_entropy_textbook(lin[4]);
    check_entropy_textbook(lin[8]);
    check_entropy_textbook((lp_case){1, 4, 0, 600, 10, 3.0f, false, 4, 256, false, false, false}); /* sharper: inv_temp 3 */
    /* z and dz misaligned against each other (the scalar path); logits starting mid-vector */
    check_shifted(build_logprob_bwd, "logprob_bwd", rows[5], 0, 1);
    check_shifted(build_logprob_bwd, "logprob_bwd", rows[8], 0, 1);
    check_shifted(build_logprob_bwd, "logprob_bwd", rows[9], 1, 0);
    check_shifted(build_logprob, "logprob", rows[9], 1, 0);
    check_shifted(build_logprob, "logprob", rows[6], 3, 0);
    /* targets outside the vocabulary: the device flag */
    check_bad_target(build_logprob, "logprob", rows[5], 1, (int32_t)rows[5].v);
    check_bad_target(build_logprob_bwd, "logprob_bwd", rows[8], 2, -1);
    check_bad_target(build_linear, "linear_logprob", lin[2], 2, -3);
    check_bad_target(build_linear_bwd, "linear_logprob_bwd", lin[2], 3, (int32_t)lin[2].v);
    check_bad_target(build_linear_bwd, "linear_logprob_bwd (+entropy)",
                     (lp_case){1, 5, 0, 300, 7, 0.8f, false, 2, 256, true, true, false}, 3, -2);
    return cuda_test_end();
}
