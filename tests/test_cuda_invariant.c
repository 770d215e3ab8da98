/* test_cuda_invariant.c - the batch-invariant CUDA kernels (ops/cuda/invariant.cu) under the SIMT
 * emulator, in a context that says the plan is batch-invariant (ctx.invariant), on fresh random
 * inputs every run:
 *   - matmul, NT (B as (N, K)) and NN (B as (K, N)), f32 and bf16, K and N not multiples of the
 *     tiles or the 8 lanes: every row of a 37-row call has the bits of that row computed alone
 *     (decode's one row against prefill's many), and equals the CPU's invariant GEMM
 *     (invariant.c's reference order) bit for bit, rounded to bf16 for bf16;
 *   - attention: each query of the causal form over a whole sequence (training's forward, left
 *     padded) has the bits of the KV-cache form asked for that query alone (decode), and of the
 *     CPU's dfg_cpu_attend_invariant; the prefix form (the prompt's keys, then the row's own)
 *     against the cache form over a cache that holds the prompt then the row;
 *   - decode over the shared-prompt cache (attention_shared_cached: each group's prompt once, each
 *     row's own part) has the bits of decode over the copied cache, per-row positions and padding;
 *   - decode with grouped-query heads (a block a KV head) has the bits of the same caches with each
 *     KV head repeated per query head (a block a head);
 *   - the fused log-prob: linear_logprob's log-probs and log-sum-exps, for two vocabulary chunk
 *     sizes, equal logprob's over the invariant matmul's logits (decode's path), row by row;
 *   - every schedule seed of the emulator gives the bits of in-order execution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/dtype.h"
#include "runtime/cuda/emu/simt/dfg_simt_ctl.h"

#ifndef DFG_NO_CUDA_EMU
/* n's emulated kernel in a batch-invariant context (cuda_run_emulated's, with ctx.invariant) */
static bool run_inv(const char *label, const dfg_node *n, void *const *in, void *const *out, uint64_t seed) {
    char err[1024] = "";
    int flags = 0;
    dfg_cuda_ctx ctx = {.flags = &flags, .gemm = dfg_cuda_gemm_interpret, .sm_count = 132, .err = err,
                        .err_len = sizeof(err), .invariant = true};
    ctx.scratch_bytes = dfg_emu_scratch_bytes(n);
    ctx.scratch = ctx.scratch_bytes ? malloc(ctx.scratch_bytes) : NULL;
    if (ctx.scratch) dfg_test_poison(ctx.scratch, ctx.scratch_bytes);
    dfg_simt_set_seed(seed);
    dfg_status st = dfg_emu_kernels[n->op](n, in, out, &ctx);
    dfg_simt_set_seed(0);
    free(ctx.scratch);
    CHECK(st == DFG_OK && flags == 0, "%s: the kernel failed (%s) or flagged %d", label, err, flags);
    return st == DFG_OK && flags == 0;
}

/* n elements of dtype dt, uniform in [lo, hi) (bf16: rounded) */
static void *rand_buf(dfg_dtype dt, int64_t n, float lo, float hi) {
    void *p = malloc((size_t)n * dfg_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) dfg_store(p, dt, i, dfg_test_uniform(lo, hi));
    return p;
}
static float *widen(const void *p, dfg_dtype dt, int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = (float)dfg_load(p, dt, i);
    return f;
}
static bool same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* ---------------------------------------------------------------- matmul */
typedef struct {
    int64_t M, N, K;
    bool tb;
} mm_case;

static dfg_node *build_mm(dfg_graph *g, dfg_dtype dt, void *user) {
    const mm_case *c = user;
    dfg_tensor *a = dfg_input(g, "a", dt, DFG_SHAPE(c->M, c->K));
    dfg_tensor *b = dfg_input(g, "b", dt, c->tb ? DFG_SHAPE(c->N, c->K) : DFG_SHAPE(c->K, c->N));
    dfg_tensor *y = dfg_matmul(g, a, b, false, c->tb);
    return dfg_graph_status(g) ? NULL : y->producer;
}

static void test_matmul(bool tb, dfg_dtype dt) {
    mm_case big = {37, 45, 77, tb}, one = {1, 45, 77, tb};
    char label[96];
    snprintf(label, sizeof(label), "matmul %s %s", tb ? "NT" : "NN", dfg_dtype_name(dt));
    dfg_program *pb, *p1;
    dfg_node *nb = cuda_node_alone(build_mm, &big, dt, label, &pb), *n1 = cuda_node_alone(build_mm, &one, dt, label, &p1);
    if (!nb || !n1) return;
    size_t e = dfg_dtype_size(dt);
    void *A = rand_buf(dt, big.M * big.K, -2, 2), *B = rand_buf(dt, big.N * big.K, -2, 2);
    void *C = malloc((size_t)(big.M * big.N) * e), *C1 = malloc((size_t)big.N * e), *C2 = malloc((size_t)(big.M * big.N) * e);
    void *in[2] = {A, B}, *out[1] = {C};
    bool ok = run_inv(label, nb, in, out, 0) && run_inv(label, nb, in, (void *[]){C2}, 7);
    CHECK(!ok || same_bits(C, C2, (size_t)(big.M * big.N) * e), "%s: schedule seed 7 changed the bits", label);
    /* decode-shaped: each row alone */
    int64_t diff_rows = 0;
    for (int64_t m = 0; ok && m < big.M; m++) {
        void *in1[2] = {(char *)A + (size_t)(m * big.K) * e, B}, *out1[1] = {C1};
        ok = run_inv(label, n1, in1, out1, 0);
        diff_rows += ok && !same_bits(C1, (char *)C + (size_t)(m * big.N) * e, (size_t)big.N * e);
    }
    CHECK(diff_rows == 0, "%s: %lld of %lld rows differ from the row computed alone", label, (long long)diff_rows,
          (long long)big.M);
    /* the CPU's invariant order, on the same (widened) values */
    float *Af = widen(A, dt, big.M * big.K), *Bf = widen(B, dt, big.N * big.K), *R = malloc(sizeof(float) * (size_t)(big.M * big.N));
    dfg_cpu_gemm_invariant_ref(tb, big.M, big.N, big.K, 1.0f, Af, big.K, Bf, tb ? big.K : big.N, R, big.N);
    int64_t diff = 0;
    for (int64_t i = 0; i < big.M * big.N; i++) {
        float want = dt == DFG_BF16 ? dfg_bf16_to_f32(dfg_f32_to_bf16(R[i])) : R[i];
        diff += dfg_f32_bits((float)dfg_load(C, dt, i)) != dfg_f32_bits(want);
    }
    CHECK(diff == 0, "%s: %lld of %lld elements differ from the CPU's invariant GEMM", label, (long long)diff,
          (long long)(big.M * big.N));
    if (ok && !diff && !diff_rows) printf("%s (%lldx%lldx%lld): rows alone = the whole call = the CPU's, bit for bit\n",
                                          label, (long long)big.M, (long long)big.N, (long long)big.K);
    free(A), free(B), free(C), free(C1), free(C2), free(Af), free(Bf), free(R);
    dfg_program_free(pb), dfg_program_free(p1);
}

/* ---------------------------------------------------------------- attention */
typedef struct {
    int64_t n, T, H, D, Tp, P; /* sequences, their rows, heads, head dim; prefix rows and prefixes */
    bool start;
} att_case;

static dfg_node *build_causal(dfg_graph *g, dfg_dtype dt, void *user) {
    const att_case *c = user;
    dfg_tensor *qkv = dfg_input(g, "qkv", dt, DFG_SHAPE(c->n, c->T, 3 * c->H * c->D));
    dfg_tensor *start = c->start ? dfg_input(g, "start", DFG_I32, DFG_SHAPE(c->P ? c->P : c->n)) : NULL;
    dfg_tensor *y = c->P ? dfg_attention_prefix_padded(g, qkv, dfg_input(g, "prefix", dt, DFG_SHAPE(c->P, c->Tp, 3 * c->H * c->D)),
                                                       start, (int)c->H)
                         : dfg_attention_padded(g, qkv, start, (int)c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}
/* one query (1, 1, C) against caches (1, Tmax, C) at a position, with a start */
static dfg_node *build_one_query(dfg_graph *g, dfg_dtype dt, void *user) {
    const att_case *c = user;
    int64_t C = c->H * c->D, Tmax = c->Tp + c->T;
    dfg_tensor *y = dfg_attention_cached_padded(g, dfg_input(g, "q", dt, DFG_SHAPE(1, 1, C)),
                                                dfg_input(g, "k_cache", dt, DFG_SHAPE(1, Tmax, C)),
                                                dfg_input(g, "v_cache", dt, DFG_SHAPE(1, Tmax, C)),
                                                dfg_input(g, "pos", DFG_I32, DFG_SCALAR),
                                                dfg_input(g, "start", DFG_I32, DFG_SHAPE(1)), (int)c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* Every query of sequence b as decode asks for it: a cache holding the prefix rows (if any) then
 * the sequence's rows, the query alone at its column; its y against the whole call's, and (f32,
 * no prefix) against the CPU's dfg_cpu_attend_invariant. Returns the rows that differ. */
static int64_t decode_each(const att_case *c, dfg_dtype dt, const dfg_node *one, const void *qkv, const void *pre,
                           const int32_t *start, const void *y, bool cpu, int64_t *cpu_diff) {
    const int64_t C = c->H * c->D, Tmax = c->Tp + c->T;
    const size_t e = dfg_dtype_size(dt);
    char *kc = calloc((size_t)(Tmax * C), e), *vc = calloc((size_t)(Tmax * C), e), *q = malloc((size_t)C * e),
         *y1 = malloc((size_t)C * e);
    int64_t bad = 0;
    for (int64_t b = 0; b < c->n; b++) {
        int64_t p = c->P ? b / (c->n / c->P) : 0;
        for (int64_t j = 0; j < Tmax; j++) { /* cache row j: prefix row j, then own row j - Tp */
            const char *row = j < c->Tp ? (const char *)pre + (size_t)((p * c->Tp + j) * 3 * C) * e
                                        : (const char *)qkv + (size_t)((b * c->T + j - c->Tp) * 3 * C) * e;
            memcpy(kc + (size_t)(j * C) * e, row + (size_t)C * e, (size_t)C * e);
            memcpy(vc + (size_t)(j * C) * e, row + (size_t)(2 * C) * e, (size_t)C * e);
        }
        int32_t s = start ? start[c->P ? p : b] : 0;
        for (int64_t i = 0; i < c->T; i++) {
            int32_t pos = (int32_t)(c->Tp + i);
            memcpy(q, (const char *)qkv + (size_t)((b * c->T + i) * 3 * C) * e, (size_t)C * e);
            void *in[5] = {q, kc, vc, &pos, &s}, *out[1] = {y1};
            if (!run_inv("attention_cached, one query", one, in, out, 0)) return -1;
            const char *want = (const char *)y + (size_t)((b * c->T + i) * C) * e;
            bad += !same_bits(y1, want, (size_t)C * e);
            for (int64_t h = 0; cpu && h < c->H; h++) { /* the CPU's order over the same keys */
                int64_t lo = pos >= s ? s : 0;
                const float *qf = (const float *)q + h * c->D;
                dfg_cpu_kv_run run = {(const float *)kc + lo * C + h * c->D, (const float *)vc + lo * C + h * c->D,
                                      pos + 1 - lo, C};
                float *pbuf = malloc(sizeof(float) * (size_t)Tmax), yc[256];
                dfg_cpu_attend_invariant(qf, &run, 1, c->D, 1.0f / sqrtf((float)c->D), pbuf, yc);
                *cpu_diff += !same_bits(yc, (const float *)y1 + h * c->D, sizeof(float) * (size_t)c->D);
                free(pbuf);
            }
        }
    }
    free(kc), free(vc), free(q), free(y1);
    return bad;
}

static void test_attention(att_case c, dfg_dtype dt, const char *label) {
    dfg_program *pa, *p1;
    dfg_node *na = cuda_node_alone(build_causal, &c, dt, label, &pa), *n1 = cuda_node_alone(build_one_query, &c, dt, label, &p1);
    if (!na || !n1) return;
    const int64_t C = c.H * c.D;
    const size_t e = dfg_dtype_size(dt);
    void *qkv = rand_buf(dt, c.n * c.T * 3 * C, -2, 2), *pre = c.P ? rand_buf(dt, c.P * c.Tp * 3 * C, -2, 2) : NULL;
    int64_t ns = c.P ? c.P : c.n, limit = c.P ? c.Tp : c.T;
    int32_t *start = malloc(sizeof(int32_t) * (size_t)ns);
    for (int64_t b = 0; b < ns; b++) start[b] = c.start ? (int32_t)dfg_test_int(0, (int)limit - 1) : 0;
    void *y = malloc((size_t)(c.n * c.T * C) * e), *y2 = malloc((size_t)(c.n * c.T * C) * e);
    float *lse = malloc(sizeof(float) * (size_t)(c.n * c.H * c.T)), *lse2 = malloc(sizeof(float) * (size_t)(c.n * c.H * c.T));
    void *in[3], *out[2] = {y, lse};
    int k = 0;
    in[k++] = qkv;
    if (c.P) in[k++] = pre;
    if (c.start) in[k++] = start;
    bool ok = run_inv(label, na, in, out, 0) && run_inv(label, na, in, (void *[]){y2, lse2}, 11);
    CHECK(!ok || (same_bits(y, y2, (size_t)(c.n * c.T * C) * e) && same_bits(lse, lse2, sizeof(float) * (size_t)(c.n * c.H * c.T))),
          "%s: schedule seed 11 changed the bits", label);
    int64_t cpu_diff = 0;
    int64_t bad = ok ? decode_each(&c, dt, n1, qkv, pre, c.start ? start : NULL, y, dt == DFG_F32, &cpu_diff) : -1;
    CHECK(bad == 0, "%s: %lld of %lld queries differ between the whole sequence and decode's one query", label,
          (long long)bad, (long long)(c.n * c.T));
    CHECK(cpu_diff == 0, "%s: %lld (query, head) outputs differ from the CPU's dfg_cpu_attend_invariant", label,
          (long long)cpu_diff);
    if (bad == 0 && cpu_diff == 0)
        printf("%s: every query of the sequence = decode's one query%s, bit for bit\n", label,
               dt == DFG_F32 ? " = the CPU's" : "");
    free(qkv), free(pre), free(start), free(y), free(y2), free(lse), free(lse2);
    dfg_program_free(pa), dfg_program_free(p1);
}

/* ---------------------------------------------------------------- the shared-prompt cache */
typedef struct {
    int64_t P, G, Tp, Tc, Tq, H, Hkv, D; /* prompts, rows a prompt, the parts' columns, queries, heads */
    bool prompt_of;                      /* rows' prompts permuted (decode_tail's gathered rows) */
} sh_case;

static int64_t sh_prompt(const sh_case *c, int64_t b) { return c->prompt_of ? (b * 5 + 3) % c->P : b / c->G; }

static dfg_node *build_shared(dfg_graph *g, dfg_dtype dt, void *user) {
    const sh_case *c = user;
    int64_t N = c->P * c->G, C = c->H * c->D, W = c->Hkv * c->D;
    dfg_tensor *y = dfg_attention_shared_cached(
        g, dfg_input(g, "q", dt, DFG_SHAPE(N, c->Tq, C)), dfg_input(g, "kp", dt, DFG_SHAPE(c->P, c->Tp, W)),
        dfg_input(g, "vp", dt, DFG_SHAPE(c->P, c->Tp, W)), dfg_input(g, "k", dt, DFG_SHAPE(N, c->Tc, W)),
        dfg_input(g, "v", dt, DFG_SHAPE(N, c->Tc, W)), dfg_input(g, "pos", DFG_I32, DFG_SHAPE(N)),
        dfg_input(g, "start", DFG_I32, DFG_SHAPE(N)), c->prompt_of ? dfg_input(g, "prompt_of", DFG_I32, DFG_SHAPE(N)) : NULL,
        (int)c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}
/* the copied cache (N, Tp + Tc, W): each row its prompt's columns, then its own */
static dfg_node *build_copied(dfg_graph *g, dfg_dtype dt, void *user) {
    const sh_case *c = user;
    int64_t N = c->P * c->G, C = c->H * c->D, W = c->Hkv * c->D, T = c->Tp + c->Tc;
    dfg_tensor *y = dfg_attention_cached_padded(g, dfg_input(g, "q", dt, DFG_SHAPE(N, c->Tq, C)),
                                                dfg_input(g, "k_cache", dt, DFG_SHAPE(N, T, W)),
                                                dfg_input(g, "v_cache", dt, DFG_SHAPE(N, T, W)),
                                                dfg_input(g, "pos", DFG_I32, DFG_SHAPE(N)),
                                                dfg_input(g, "start", DFG_I32, DFG_SHAPE(N)), (int)c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* Decode over the shared-prompt cache against decode over the copied cache, both batch-invariant:
 * every row's y the same bits, with per-row positions (some inside the prompt) and per-row left
 * padding (some queries at pad columns). */
static void test_shared(sh_case c, dfg_dtype dt) {
    char label[128];
    snprintf(label, sizeof(label), "attention_shared_cached P%lld G%lld Tp%lld Tc%lld Tq%lld H%lld Hkv%lld%s %s",
             (long long)c.P, (long long)c.G, (long long)c.Tp, (long long)c.Tc, (long long)c.Tq, (long long)c.H,
             (long long)c.Hkv, c.prompt_of ? " prompt_of" : "", dfg_dtype_name(dt));
    dfg_program *ps, *pc;
    dfg_node *ns = cuda_node_alone(build_shared, &c, dt, label, &ps), *nc = cuda_node_alone(build_copied, &c, dt, label, &pc);
    if (!ns || !nc) return;
    const int64_t N = c.P * c.G, C = c.H * c.D, W = c.Hkv * c.D, T = c.Tp + c.Tc;
    const size_t e = dfg_dtype_size(dt), ybytes = (size_t)(N * c.Tq * C) * e;
    void *q = rand_buf(dt, N * c.Tq * C, -2, 2), *kp = rand_buf(dt, c.P * c.Tp * W, -2, 2),
         *vp = rand_buf(dt, c.P * c.Tp * W, -2, 2), *kr = rand_buf(dt, N * c.Tc * W, -2, 2),
         *vr = rand_buf(dt, N * c.Tc * W, -2, 2);
    char *kc = malloc((size_t)(N * T * W) * e), *vc = malloc((size_t)(N * T * W) * e);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)N), *start = malloc(sizeof(int32_t) * (size_t)N),
            *of = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t b = 0; b < N; b++) {
        of[b] = (int32_t)sh_prompt(&c, b);
        pos[b] = (int32_t)dfg_test_int((int)c.Tp - 2, (int)(T - c.Tq));
        start[b] = (int32_t)dfg_test_int(0, (int)c.Tp - 1);
        for (int64_t j = 0; j < T; j++) {
            size_t to = (size_t)((b * T + j) * W) * e, row = (size_t)W * e;
            size_t from = (size_t)((j < c.Tp ? of[b] * c.Tp + j : b * c.Tc + j - c.Tp) * W) * e;
            memcpy(kc + to, (const char *)(j < c.Tp ? kp : kr) + from, row);
            memcpy(vc + to, (const char *)(j < c.Tp ? vp : vr) + from, row);
        }
    }
    void *ys = malloc(ybytes), *ys2 = malloc(ybytes), *yc = malloc(ybytes);
    void *in_s[8] = {q, kp, vp, kr, vr, pos, start, of}, *in_c[5] = {q, kc, vc, pos, start};
    bool ok = run_inv(label, ns, in_s, (void *[]){ys}, 0) && run_inv(label, ns, in_s, (void *[]){ys2}, 5) &&
              run_inv(label, nc, in_c, (void *[]){yc}, 0);
    CHECK(!ok || same_bits(ys, ys2, ybytes), "%s: schedule seed 5 changed the bits", label);
    int64_t bad = 0;
    for (int64_t r = 0; ok && r < N * c.Tq; r++)
        bad += !same_bits((char *)ys + (size_t)(r * C) * e, (char *)yc + (size_t)(r * C) * e, (size_t)C * e);
    CHECK(bad == 0, "%s: %lld of %lld queries differ from the copied cache's", label, (long long)bad,
          (long long)(N * c.Tq));
    if (ok && bad == 0) printf("%s: = attention_cached on the copied cache, bit for bit\n", label);
    free(q), free(kp), free(vp), free(kr), free(vr), free(kc), free(vc), free(pos), free(start), free(of);
    free(ys), free(ys2), free(yc);
    dfg_program_free(ps), dfg_program_free(pc);
}

/* ---------------------------------------------------------------- grouped-query heads */
typedef struct {
    int64_t N, Tmax, H, Hkv, D;
} gqa_case;

static dfg_node *build_gqa(dfg_graph *g, dfg_dtype dt, void *user) { /* W = 0: caches of H heads */
    const gqa_case *c = user;
    int64_t W = c->Hkv * c->D;
    dfg_tensor *y = dfg_attention_cached_padded(g, dfg_input(g, "q", dt, DFG_SHAPE(c->N, 1, c->H * c->D)),
                                                dfg_input(g, "k_cache", dt, DFG_SHAPE(c->N, c->Tmax, W)),
                                                dfg_input(g, "v_cache", dt, DFG_SHAPE(c->N, c->Tmax, W)),
                                                dfg_input(g, "pos", DFG_I32, DFG_SHAPE(c->N)),
                                                dfg_input(g, "start", DFG_I32, DFG_SHAPE(c->N)), (int)c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}

/* Decode with grouped-query heads (a block a KV head, its query heads together; past the shared
 * memory's room a block a head) against the same caches with each KV head repeated for its query
 * heads (no groups: a block a head): the same bits. */
static void test_gqa(gqa_case c, dfg_dtype dt) {
    char label[96];
    snprintf(label, sizeof(label), "attention_cached GQA H%lld Hkv%lld, %lld keys %s", (long long)c.H, (long long)c.Hkv,
             (long long)c.Tmax, dfg_dtype_name(dt));
    gqa_case wide = c;
    wide.Hkv = c.H;
    dfg_program *pg, *pw;
    dfg_node *ng = cuda_node_alone(build_gqa, &c, dt, label, &pg), *nw = cuda_node_alone(build_gqa, &wide, dt, label, &pw);
    if (!ng || !nw) return;
    const int64_t C = c.H * c.D, W = c.Hkv * c.D, G = c.H / c.Hkv;
    const size_t e = dfg_dtype_size(dt), ybytes = (size_t)(c.N * C) * e;
    void *q = rand_buf(dt, c.N * C, -2, 2), *k = rand_buf(dt, c.N * c.Tmax * W, -2, 2), *v = rand_buf(dt, c.N * c.Tmax * W, -2, 2);
    char *kw = malloc((size_t)(c.N * c.Tmax * C) * e), *vw = malloc((size_t)(c.N * c.Tmax * C) * e);
    for (int64_t r = 0; r < c.N * c.Tmax; r++) /* cache row r, head h: KV head h / G */
        for (int64_t h = 0; h < c.H; h++) {
            size_t to = (size_t)(r * C + h * c.D) * e, from = (size_t)(r * W + h / G * c.D) * e;
            memcpy(kw + to, (char *)k + from, (size_t)c.D * e), memcpy(vw + to, (char *)v + from, (size_t)c.D * e);
        }
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)c.N), *start = malloc(sizeof(int32_t) * (size_t)c.N);
    for (int64_t b = 0; b < c.N; b++)
        pos[b] = (int32_t)dfg_test_int(0, (int)c.Tmax - 1), start[b] = (int32_t)dfg_test_int(0, (int)c.Tmax / 2);
    void *yg = malloc(ybytes), *yw = malloc(ybytes);
    bool ok = run_inv(label, ng, (void *[]){q, k, v, pos, start}, (void *[]){yg}, 0) &&
              run_inv(label, nw, (void *[]){q, kw, vw, pos, start}, (void *[]){yw}, 0);
    CHECK(!ok || same_bits(yg, yw, ybytes), "%s: grouped heads differ from the same keys repeated per head", label);
    if (ok && same_bits(yg, yw, ybytes)) printf("%s: = the KV heads repeated per query head, bit for bit\n", label);
    free(q), free(k), free(v), free(kw), free(vw), free(pos), free(start), free(yg), free(yw);
    dfg_program_free(pg), dfg_program_free(pw);
}

/* ---------------------------------------------------------------- log-probs */
typedef struct {
    int64_t rows, c, v, rc, vc;
} lp_case;

static dfg_node *build_linear(dfg_graph *g, dfg_dtype dt, void *user) {
    const lp_case *k = user;
    dfg_attrs a = {.logprob = {1.0f, true, k->rc, k->vc, false}};
    dfg_tensor *in[3] = {dfg_input(g, "h", dt, DFG_SHAPE(k->rows, k->c)), dfg_input(g, "w", dt, DFG_SHAPE(k->v, k->c)),
                         dfg_input(g, "t", DFG_I32, DFG_SHAPE(k->rows))};
    return dfg_node_add(g, DFG_OP_LINEAR_LOGPROB, in, 3, &a, 4);
}
static dfg_node *build_logprob(dfg_graph *g, dfg_dtype dt, void *user) {
    const lp_case *k = user;
    dfg_attrs a = {.logprob = {1.0f, false, 0, 0, false}};
    dfg_tensor *in[2] = {dfg_input(g, "z", dt, DFG_SHAPE(1, k->v)), dfg_input(g, "t", DFG_I32, DFG_SHAPE(1))};
    return dfg_node_add(g, DFG_OP_LOGPROB, in, 2, &a, 2);
}
static dfg_node *build_head(dfg_graph *g, dfg_dtype dt, void *user) { /* decode's lm_head, one row */
    const lp_case *k = user;
    dfg_tensor *y = dfg_matmul(g, dfg_input(g, "h", dt, DFG_SHAPE(1, k->c)), dfg_input(g, "w", dt, DFG_SHAPE(k->v, k->c)),
                               false, true);
    return dfg_graph_status(g) ? NULL : y->producer;
}

static void test_logprob(dfg_dtype dt) {
    lp_case k = {13, 40, 600, 5, 256};
    char label[64];
    snprintf(label, sizeof(label), "linear_logprob vs decode's logprob %s", dfg_dtype_name(dt));
    const size_t e = dfg_dtype_size(dt);
    void *h = rand_buf(dt, k.rows * k.c, -1, 1), *w = rand_buf(dt, k.v * k.c, -1, 1);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)k.rows);
    for (int64_t r = 0; r < k.rows; r++) t[r] = (int32_t)dfg_test_int(0, (int)k.v - 1);
    dfg_program *ph, *pl;
    dfg_node *head = cuda_node_alone(build_head, &k, dt, label, &ph), *lp = cuda_node_alone(build_logprob, &k, dt, label, &pl);
    float dec_logp[64], dec_lse[64];
    void *z = malloc((size_t)k.v * e);
    bool ok = head && lp;
    for (int64_t r = 0; ok && r < k.rows; r++) { /* decode: one row's logits, then its log-prob */
        ok = run_inv(label, head, (void *[]){(char *)h + (size_t)(r * k.c) * e, w}, (void *[]){z}, 0) &&
             run_inv(label, lp, (void *[]){z, t + r}, (void *[]){dec_logp + r, dec_lse + r}, 0);
    }
    for (int pass = 0; ok && pass < 2; pass++) { /* training: every row at once, v_chunk 256 and the whole V */
        k.vc = pass ? k.v : 256;
        dfg_program *pn;
        dfg_node *lin = cuda_node_alone(build_linear, &k, dt, label, &pn);
        if (!lin) return;
        float logp[64], lse[64], ent[64], *ws = malloc(sizeof(float) * (size_t)(k.rc * k.vc));
        ok = run_inv(label, lin, (void *[]){h, w, t}, (void *[]){logp, lse, ws, ent}, pass ? 3 : 0);
        bool same = ok && same_bits(logp, dec_logp, sizeof(float) * (size_t)k.rows) &&
                    same_bits(lse, dec_lse, sizeof(float) * (size_t)k.rows);
        CHECK(!ok || same, "%s, v_chunk %lld: the training log-probs differ from decode's", label, (long long)k.vc);
        ok = ok && same;
        free(ws);
        dfg_program_free(pn);
    }
    if (ok) printf("%s: %lld rows, v_chunk 256 and %lld: training's log-probs = decode's, bit for bit\n", label,
                   (long long)k.rows, (long long)k.v);
    free(h), free(w), free(t), free(z);
    if (head) dfg_program_free(ph);
    if (lp) dfg_program_free(pl);
}
#endif

int main(void) {
    if (!cuda_test_begin("test_cuda_invariant")) return DFG_TEST_SKIP;
#ifndef DFG_NO_CUDA_EMU
    for (int d = 0; d < 2; d++) {
        dfg_dtype dt = d ? DFG_BF16 : DFG_F32;
        test_matmul(true, dt);
        test_matmul(false, dt);
        /* head dims 16 and 20 (the 8 lanes' tail), 70 keys (more than a block's threads) */
        test_attention((att_case){.n = 2, .T = 9, .H = 2, .D = 20, .start = true}, dt,
                       d ? "attention (left padded) bf16" : "attention (left padded) f32");
        test_attention((att_case){.n = 1, .T = 70, .H = 1, .D = 16}, dt, d ? "attention, 70 keys bf16" : "attention, 70 keys f32");
        test_attention((att_case){.n = 4, .T = 5, .H = 2, .D = 16, .Tp = 6, .P = 2, .start = true}, dt,
                       d ? "attention_prefix (padded prompts) bf16" : "attention_prefix (padded prompts) f32");
        /* grouped-query heads, positions inside the prompt, 140 keys; decode_tail's permuted prompts */
        test_shared((sh_case){.P = 2, .G = 3, .Tp = 7, .Tc = 6, .Tq = 1, .H = 4, .Hkv = 2, .D = 20}, dt);
        test_shared((sh_case){.P = 3, .G = 2, .Tp = 90, .Tc = 50, .Tq = 2, .H = 2, .Hkv = 1, .D = 16, .prompt_of = true}, dt);
        /* a block a KV head: 2 and 10 query heads (more than a thread's 8 accumulators); 4500 keys
         * of 10 heads are past the shared memory's room: a block a head */
        test_gqa((gqa_case){.N = 3, .Tmax = 40, .H = 4, .Hkv = 2, .D = 20}, dt);
        test_gqa((gqa_case){.N = 2, .Tmax = 150, .H = 20, .Hkv = 2, .D = 16}, dt);
        test_gqa((gqa_case){.N = 1, .Tmax = 4500, .H = 10, .Hkv = 1, .D = 8}, dt);
        test_logprob(dt);
    }
#endif
    return cuda_test_end();
}
