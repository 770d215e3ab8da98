/* test_cuda_entropy.c - the CUDA entropy and entropy_bwd (ops/cuda/softmax.cu) against the CPU
 * kernels (tests/cuda_harness.h): rows a warp takes (V <= 1024) and rows a block takes, lengths
 * that are and are not multiples of the 16-byte vector, rank 1 to 3, random sizes; logits uniform,
 * peaked (H near 0), wide, tied (H = log V exactly in a row of equal logits), and with -inf entries
 * (masked vocabulary; a row of -inf alone has H = 0 and a zero gradient). Outside the harness: the
 * CPU and CUDA kernels both against the textbook -sum p log p and -dH p (log p + H) computed here
 * in double (so a formula both kernels share cannot be wrong unseen), and the CUDA kernels with
 * pointers off 16-byte alignment (the scalar path on vector-friendly sizes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/dfg_ops.h"

enum { UNIFORM, PEAKED, MASKED, TIES, WIDE, N_VALUES };
static const char *const value_names[] = {"uniform", "peaked", "masked", "ties", "wide"};

typedef struct {
    dfg_shape z; /* logits (..., V) */
    bool bwd;    /* entropy_bwd (dH, z, H) -> dz; else entropy z -> H */
    int values;  /* UNIFORM ... WIDE */
} ent_case;

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const ent_case *c = user;
    dfg_tensor *z = dfg_input(g, "z", dt, c->z), *y;
    if (!c->bwd) {
        y = dfg_entropy(g, z);
    } else {
        dfg_tensor *in[3] = {dfg_input(g, "dH", DFG_F32, cuda_rows_shape(c->z)), z,
                             dfg_input(g, "H", DFG_F32, cuda_rows_shape(c->z))};
        y = dfg_op_out(g, DFG_OP_ENTROPY_BWD, in, 3, NULL);
    }
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* ---------------------------------------------------------------- inputs */
static void fill_logits(int values, float *f, int64_t n, int64_t v) {
    int64_t rows = n / v;
    switch (values) {
    case PEAKED: /* half the rows: one logit 25 above the rest (H of order 1e-9 V) */
        dfg_test_fill_uniform(f, n, -2.0f, 2.0f);
        for (int64_t r = 0; r < rows; r++)
            if (dfg_test_int(0, 1)) f[r * v + dfg_test_int(0, (int)v - 1)] += 25.0f;
        break;
    case MASKED: /* a quarter of the logits -inf; row 0 all -inf, row 1 one finite logit (H = 0) */
        dfg_test_fill_uniform(f, n, -2.0f, 2.0f);
        for (int64_t i = 0; i < n; i++)
            if (dfg_test_int(0, 3) == 0) f[i] = -INFINITY;
        if (rows > 1)
            for (int64_t j = 0; j < v; j++) f[j] = -INFINITY;
        if (rows > 2)
            for (int64_t j = 0; j < v; j++) f[v + j] = j == v / 2 ? 1.5f : -INFINITY;
        break;
    case TIES: /* three values; row 0 all equal (uniform p: H = log V) */
        for (int64_t i = 0; i < n; i++) f[i] = (float)dfg_test_int(-1, 1);
        for (int64_t j = 0; j < v && rows > 1; j++) f[j] = 0.75f;
        break;
    case WIDE: dfg_test_fill_uniform(f, n, -40.0f, 40.0f); break;
    default: dfg_test_fill_uniform(f, n, -2.0f, 2.0f);
    }
}

/* H of each row by the textbook: p = exp(z - lse), -sum p log p over p > 0 (0 for a row of -inf) */
static double textbook_lse(const float *z, int64_t v) {
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < v; j++) m = z[j] > m ? z[j] : m;
    if (m == -INFINITY) return -INFINITY;
    for (int64_t j = 0; j < v; j++) s += exp((double)z[j] - m);
    return m + log(s);
}
static double textbook_entropy(const float *z, int64_t v) {
    double lse = textbook_lse(z, v), h = 0.0;
    if (lse == -INFINITY) return 0.0;
    for (int64_t j = 0; j < v; j++) {
        double lp = (double)z[j] - lse, p = exp(lp);
        if (p > 0.0) h -= p * lp;
    }
    return h;
}

/* slots: entropy (z); entropy_bwd (dH, z, H), filled in slot order: H is the true entropy of the
 * case's own z, moved by up to 0.3 (a saved H is the forward's; far off it, log p + H would not
 * look like any gradient a run sees), and dH 0 in about a quarter of the rows (masked tokens) */
static const float *filled_z;
static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const ent_case *c = user;
    const int64_t v = c->z.d[c->z.rank - 1];
    float *f = data;
    (void)slot;
    if (!strcmp(t->name, "z")) {
        fill_logits(c->values, f, n, v);
        filled_z = f;
    } else if (!strcmp(t->name, "dH")) {
        for (int64_t i = 0; i < n; i++) f[i] = dfg_test_int(0, 3) ? dfg_test_uniform(-1.0f, 1.0f) : 0.0f;
    } else { /* H */
        for (int64_t r = 0; r < n; r++) f[r] = (float)textbook_entropy(filled_z + r * v, v) + dfg_test_uniform(-0.3f, 0.3f);
    }
}

static void run(ent_case c) {
    char label[160], sz[64];
    snprintf(label, sizeof(label), "%s z%s %s", c.bwd ? "entropy_bwd" : "entropy", dfg_shape_str(c.z, sz, sizeof(sz)),
             value_names[c.values]);
    /* the forward's output is f32 whatever the logits' dtype: the CPU on the same rounded logits
     * gives the same H to f32 accuracy, so bf16 keeps the f32 tolerances */
    cuda_case k = {.label = label, .build = build, .user = &c, .fill = fill, .bf16 = true};
    if (!c.bwd) k.rtol_bf16 = 1e-5, k.atol_bf16 = 1e-6;
    cuda_check(&k);
}

/* ---------------------------------------------------------------- direct runs */
typedef struct {
    dfg_program *p;
    dfg_node *n;
    void *in[3], *out[1];       /* CUDA side, each `shift` bytes past a 16-byte boundary */
    void *cin[3], *cout[1];     /* CPU side */
    void *blocks[4];
    int nb;
} direct;

static bool direct_make(direct *d, const ent_case *c, size_t shift) {
    memset(d, 0, sizeof(*d));
    d->n = cuda_node_alone(build, (void *)c, DFG_F32, "direct", &d->p);
    if (!d->n) return false;
    for (int j = 0; j < d->n->n_in; j++) {
        size_t bytes = dfg_tensor_bytes(d->n->in[j]);
        d->cin[j] = malloc(bytes);
        fill(j, d->n->in[j], d->cin[j], dfg_tensor_numel(d->n->in[j]), (void *)c);
        d->blocks[d->nb] = aligned_alloc(16, (bytes + shift + 15) / 16 * 16);
        d->in[j] = (char *)d->blocks[d->nb++] + shift;
        memcpy(d->in[j], d->cin[j], bytes);
    }
    size_t bytes = dfg_tensor_bytes(d->n->out[0]);
    d->cout[0] = malloc(bytes);
    dfg_test_poison(d->cout[0], bytes);
    d->blocks[d->nb] = aligned_alloc(16, (bytes + shift + 15) / 16 * 16);
    d->out[0] = (char *)d->blocks[d->nb++] + shift;
    dfg_test_poison(d->out[0], bytes);
    return true;
}

static void direct_free(direct *d) {
    for (int j = 0; d->n && j < d->n->n_in; j++) free(d->cin[j]);
    free(d->cout[0]);
    for (int b = 0; b < d->nb; b++) free(d->blocks[b]);
    dfg_program_free(d->p);
}

/* runs the CPU kernel on cin/cout and the emulated CUDA kernel on in/out */
static bool direct_run(direct *d, const char *label) {
    const bool cpu = cuda_run_cpu(label, d->n, d->cin, d->cout);
    const int flags = cuda_run_emulated(label, d->n, d->in, d->out, 132, 0);
    CHECK(flags <= 0, "%s: CUDA flagged a bad value (%d)", label, flags);
    return cpu && flags == 0;
}

static bool close_to(double ref, double got, double rtol, double atol) {
    return fabs(ref - got) <= atol + rtol * fabs(ref) || (isnan(ref) && isnan(got));
}

/* Both kernels against the textbook formulas in double (f32 tolerances: rtol 1e-5, atol 1e-6). */
static void check_textbook(ent_case c) {
    char label[160], sz[64];
    snprintf(label, sizeof(label), "%s z%s %s vs the textbook", c.bwd ? "entropy_bwd" : "entropy",
             dfg_shape_str(c.z, sz, sizeof(sz)), value_names[c.values]);
    direct d;
    if (!direct_make(&d, &c, 0)) {
        direct_free(&d);
        return;
    }
    if (direct_run(&d, label)) {
        const int64_t v = c.z.d[c.z.rank - 1], rows = dfg_shape_numel(c.z) / v;
        const float *z = d.cin[c.bwd ? 1 : 0], *cpu = d.cout[0], *gpu = d.out[0];
        int64_t bad_cpu = 0, bad_gpu = 0, first = -1;
        double worst = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            if (!c.bwd) {
                double ref = textbook_entropy(z + r * v, v);
                bool okc = close_to(ref, cpu[r], 1e-5, 1e-6), okg = close_to(ref, gpu[r], 1e-5, 1e-6);
                bad_cpu += !okc, bad_gpu += !okg;
                if ((!okc || !okg) && first < 0) first = r;
                worst = fmax(worst, fabs(ref - gpu[r]));
                continue;
            }
            const float *dh = d.cin[0], *hv = d.cin[2];
            double lse = textbook_lse(z + r * v, v);
            for (int64_t j = 0; j < v; j++) {
                double lp = (double)z[r * v + j] - lse, p = lse == -INFINITY ? 0.0 : exp(lp);
                double ref = p > 0.0 ? -(double)dh[r] * p * (lp + hv[r]) : 0.0;
                bool okc = close_to(ref, cpu[r * v + j], 1e-5, 1e-6), okg = close_to(ref, gpu[r * v + j], 1e-5, 1e-6);
                bad_cpu += !okc, bad_gpu += !okg;
                if ((!okc || !okg) && first < 0) first = r * v + j;
                worst = fmax(worst, fabs(ref - gpu[r * v + j]));
            }
        }
        CHECK(bad_cpu == 0 && bad_gpu == 0, "%s: %lld CPU and %lld CUDA elements off the textbook (first %lld: CPU %.9g, CUDA %.9g)",
              label, (long long)bad_cpu, (long long)bad_gpu, (long long)first, first < 0 ? 0.0 : cpu[first],
              first < 0 ? 0.0 : gpu[first]);
        printf("%s: worst |CUDA - textbook| %.3g\n", label, worst);
    }
    direct_free(&d);
}

/* The CUDA kernel with every pointer `shift` bytes past a 16-byte boundary against the CPU. */
static void check_shifted(ent_case c, size_t shift) {
    char label[160], sz[64];
    snprintf(label, sizeof(label), "%s z%s (pointers +%zu bytes)", c.bwd ? "entropy_bwd" : "entropy",
             dfg_shape_str(c.z, sz, sizeof(sz)), shift);
    direct d;
    if (direct_make(&d, &c, shift) && direct_run(&d, label)) {
        const float *r = d.cout[0], *g = d.out[0];
        int64_t cnt = dfg_tensor_numel(d.n->out[0]), bad = -1;
        for (int64_t i = 0; i < cnt && bad < 0; i++)
            if (!close_to(r[i], g[i], 1e-5, 1e-6)) bad = i;
        CHECK(bad < 0, "%s: element %lld: CPU %.9g, CUDA %.9g", label, (long long)bad, bad < 0 ? 0.0 : r[bad],
              bad < 0 ? 0.0 : g[bad]);
    }
    direct_free(&d);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_entropy")) return DFG_TEST_SKIP;
    /* a warp per row up to 1024, a block beyond; vector-friendly and odd lengths; V = 1 (H = 0) */
    const dfg_shape shapes[] = {DFG_SHAPE(1),       DFG_SHAPE(1, 1),     DFG_SHAPE(3, 7),    DFG_SHAPE(5, 32),
                                DFG_SHAPE(9, 64),   DFG_SHAPE(17, 100),  DFG_SHAPE(3, 768),  DFG_SHAPE(4, 1024),
                                DFG_SHAPE(3, 1025), DFG_SHAPE(2, 2048),  DFG_SHAPE(4, 4099), DFG_SHAPE(2, 3, 40),
                                DFG_SHAPE(7),       DFG_SHAPE(2, 50257)};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int values = 0; values < N_VALUES; values++)
            for (int bwd = 0; bwd < 2; bwd++) run((ent_case){shapes[i], bwd, values});
    /* random sizes (fresh each run: the seed is printed) */
    for (int i = 0; i < 8; i++) {
        dfg_shape s = dfg_test_int(0, 1) ? DFG_SHAPE(dfg_test_int(1, 40), dfg_test_int(1, 3000))
                                         : DFG_SHAPE(dfg_test_int(1, 4), dfg_test_int(1, 5), dfg_test_int(1, 1500));
        int values = dfg_test_int(0, N_VALUES - 1);
        run((ent_case){s, false, values});
        run((ent_case){s, true, values});
    }
    /* the textbook, in double */
    const dfg_shape tb[] = {DFG_SHAPE(6, 5), DFG_SHAPE(9, 333), DFG_SHAPE(3, 1500), DFG_SHAPE(2, 8, 64)};
    for (size_t i = 0; i < sizeof(tb) / sizeof(tb[0]); i++)
        for (int values = 0; values < N_VALUES; values++)
            for (int bwd = 0; bwd < 2; bwd++) check_textbook((ent_case){tb[i], bwd, values});
    /* off 16-byte alignment on vector-friendly sizes */
    const dfg_shape raw[] = {DFG_SHAPE(5, 64), DFG_SHAPE(3, 2048)};
    for (size_t i = 0; i < 2; i++)
        for (int bwd = 0; bwd < 2; bwd++) {
            check_shifted((ent_case){raw[i], bwd, UNIFORM}, 4);
            check_shifted((ent_case){raw[i], bwd, MASKED}, 8);
        }
    return cuda_test_end();
}
