/* test_cuda_sdpa.c - attention through SDPA descriptors (ops/cuda/sdpa.h): the descriptor that
 * cuDNN executes on a GPU, executed here by its interpreter (dfg_cuda_sdpa_interpret), against
 * the CPU kernels.
 *   - attention and attention_bwd of odd shapes (T = 1, odd and tiny head dims, T past a tile),
 *     run through the emulated launchers with ctx->sdpa set (and no scratch, so a fall back to the
 *     hand-written kernels would fail), equal the CPU kernels: f32 within rtol 1e-5, bf16 1e-2;
 *   - a planted layout error is caught: K's token stride C instead of 3C (K read from the wrong
 *     tokens), then every stride and offset of every operand of both descriptors halved in turn
 *     (all in bounds): each changes the result beyond the tolerance, so the interpreter reads
 *     every operand only through its descriptor and the tests would see a wrong one;
 *   - a call made while the emulator captures a stream is recorded, not run, and the replay
 *     computes it;
 *   - an SDPA that refuses a call (DFG_ERR_UNSUPPORTED) leaves it to the hand-written kernels,
 *     and one that fails makes its status and message the node's;
 *   - the rule of what cuDNN takes (dtype, head dim, alignment) and the descriptors' refusals;
 *   - left-padded rows (a start input): SDPA has no left-padding mask, so the descriptors refuse
 *     the node saying so, and the launchers run the hand-written kernels without calling ctx->sdpa
 *     (= CPU, start included);
 *   - where cuDNN is (and no GPU), the graphs the GPU's call site builds, planned by cuDNN for an
 *     H100 without one: matched as fused flash attention, kernels compiled, workspace as planned. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "runtime/cuda/emu/simt/dfg_simt_ctl.h"
#include "ops/dtype.h"
#include "runtime/cuda/device.h"

/* the GPU's cuDNN call site: in the engine only where cuDNN is (DFG_HAVE_CUDNN) */
#pragma weak dfg_sdpa_cudnn_open_deviceless
#pragma weak dfg_sdpa_cudnn_plan
#pragma weak dfg_sdpa_cudnn_close
#pragma weak dfg_sdpa_cudnn_workspace

#ifndef DFG_NO_CUDA_EMU
typedef struct {
    int B, T, H, D;
} shape;

/* ---------------------------------------------------------------- nodes and buffers */
typedef struct {
    dfg_program *p;
    dfg_node *n;
    void *in[4], *out[2];
} node;

static dfg_node *build(dfg_graph *g, bool backward, dfg_dtype dt, shape s) {
    int64_t C = (int64_t)s.H * s.D;
    dfg_tensor *qkv = dfg_input(g, "qkv", dt, DFG_SHAPE(s.B, s.T, 3 * C));
    if (!backward) {
        dfg_tensor *y = dfg_attention(g, qkv, s.H);
        return dfg_graph_status(g) ? NULL : y->producer;
    }
    dfg_tensor *in[4] = {dfg_input(g, "dy", dt, DFG_SHAPE(s.B, s.T, C)), qkv, dfg_input(g, "y", dt, DFG_SHAPE(s.B, s.T, C)),
                         dfg_input(g, "lse", DFG_F32, DFG_SHAPE(s.B, s.H, s.T))};
    dfg_attrs a = {.attention = {s.H}};
    return dfg_node_add(g, DFG_OP_ATTENTION_BWD, in, 4, &a, 1);
}

static bool make(node *o, bool backward, dfg_dtype dt, shape s) {
    memset(o, 0, sizeof(*o));
    o->p = dfg_program_new("sdpa");
    o->n = build(dfg_graph_new(o->p, "g"), backward, dt, s);
    CHECK(o->n != NULL, "building the node: %s", dfg_program_error(o->p));
    if (!o->n) return false;
    for (int j = 0; j < o->n->n_in; j++) o->in[j] = calloc(1, dfg_tensor_bytes(o->n->in[j]));
    for (int k = 0; k < o->n->n_out; k++) o->out[k] = malloc(dfg_tensor_bytes(o->n->out[k]));
    return true;
}

static void unmake(node *o) {
    for (int j = 0; j < 4; j++) free(o->in[j]);
    for (int k = 0; k < 2; k++) free(o->out[k]);
    dfg_program_free(o->p);
}

static void poison_outputs(node *o) {
    for (int k = 0; k < o->n->n_out; k++) dfg_test_poison(o->out[k], dfg_tensor_bytes(o->n->out[k]));
}

/* v as a tensor of dtype dt holds it */
static float round_to(float v, dfg_dtype dt) {
    return dt == DFG_BF16 ? dfg_bf16_to_f32(dfg_f32_to_bf16(v)) : dt == DFG_F16 ? dfg_f16_to_f32(dfg_f32_to_f16(v)) : v;
}

/* x (f32 values) into a tensor of dtype dt: rounded to it */
static void put(void *dst, dfg_dtype dt, const float *x, int64_t n) {
    for (int64_t e = 0; e < n; e++) dfg_store(dst, dt, e, x[e]);
}

/* ---------------------------------------------------------------- running */
static int sdpa_calls; /* calls that reached the interpreter through a launcher */

static dfg_status counting_sdpa(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs) {
    sdpa_calls++;
    return dfg_cuda_sdpa_interpret(ctx, d, backward, ptrs);
}

static bool run_cpu(node *o) {
    char err[512] = "";
    dfg_cpu_ctx ctx = {.n_threads = 1, .err = err, .err_len = sizeof(err)};
    ctx.scratch_per_thread = dfg_cpu_scratch_bytes(o->n);
    ctx.scratch = malloc(ctx.scratch_per_thread + 1);
    dfg_status st = dfg_cpu_kernels[o->n->op](o->n, o->in, o->out, &ctx);
    free(ctx.scratch);
    CHECK(st == DFG_OK, "CPU %s: %s", dfg_op_name(o->n->op), err);
    return st == DFG_OK;
}

/* The emulated launcher with the interpreter as the context's SDPA and no scratch: it must take
 * the SDPA path (the hand-written backward needs scratch). */
static bool run_launcher(node *o) {
    char err[1024] = "";
    int flags = 0, before = sdpa_calls;
    dfg_cuda_ctx ctx = {.flags = &flags, .gemm = dfg_cuda_gemm_interpret, .sdpa = counting_sdpa, .sm_count = 132,
                        .err = err, .err_len = sizeof(err)};
    dfg_status st = dfg_emu_kernels[o->n->op](o->n, o->in, o->out, &ctx);
    CHECK(st == DFG_OK, "emulated %s through SDPA: %s", dfg_op_name(o->n->op), err);
    CHECK(sdpa_calls == before + 1, "the %s launcher did not call ctx->sdpa", dfg_op_name(o->n->op));
    return st == DFG_OK && sdpa_calls == before + 1;
}

/* The interpreter on a descriptor directly (buffers: the node's). */
static dfg_status run_desc(node *o, const dfg_sdpa_desc *d, char *err, size_t len) {
    dfg_cuda_ctx ctx = {.err = err, .err_len = len};
    void *ptrs[DFG_SDPA_N_OPERANDS];
    dfg_sdpa_buffers(o->n, o->in, o->out, ptrs);
    return dfg_cuda_sdpa_interpret(&ctx, d, o->n->op == DFG_OP_ATTENTION_BWD, ptrs);
}

/* The worst |got - ref| / (atol + rtol |ref|) over a node's outputs (NaN: a NaN where the other
 * has none, e.g. an element never written). */
static double worst_ratio(const node *ref, const node *got, double rtol, double atol) {
    double worst = 0.0;
    for (int k = 0; k < ref->n->n_out; k++) {
        const dfg_tensor *rt = ref->n->out[k], *gt = got->n->out[k];
        for (int64_t e = 0, n = dfg_tensor_numel(rt); e < n; e++) {
            double a = dfg_load(ref->out[k], rt->dtype, e), b = dfg_load(got->out[k], gt->dtype, e);
            if (isnan(a) != isnan(b)) return NAN;
            double r = fabs(a - b) / (atol + rtol * fabs(a));
            worst = r > worst ? r : worst;
        }
    }
    return worst;
}

/* ---------------------------------------------------------------- inputs */
/* Random inputs for a node of the f32 build: qkv, dy uniform in [-2, 2); the backward's y and lse
 * the CPU forward's of that qkv (real probabilities). Values are first rounded to dt, so the CPU
 * reference computes on exactly what the dt build holds. */
static bool draw(node *f32, bool backward, dfg_dtype dt, shape s) {
    int64_t C = (int64_t)s.H * s.D, nqkv = (int64_t)s.B * s.T * 3 * C, ny = (int64_t)s.B * s.T * C;
    float *x = malloc(sizeof(float) * (size_t)nqkv);
    dfg_test_fill_uniform(x, nqkv, -2.0f, 2.0f);
    for (int64_t e = 0; e < nqkv; e++) x[e] = round_to(x[e], dt);
    bool ok = true;
    if (!backward) {
        memcpy(f32->in[0], x, sizeof(float) * (size_t)nqkv);
    } else {
        node fwd;
        ok = make(&fwd, false, DFG_F32, s);
        if (ok) {
            memcpy(fwd.in[0], x, sizeof(float) * (size_t)nqkv);
            ok = run_cpu(&fwd);
            float *y = fwd.out[0], *dy = f32->in[0];
            for (int64_t e = 0; e < ny; e++) y[e] = round_to(y[e], dt);
            memcpy(f32->in[1], x, sizeof(float) * (size_t)nqkv);
            memcpy(f32->in[2], y, sizeof(float) * (size_t)ny);
            memcpy(f32->in[3], fwd.out[1], dfg_tensor_bytes(fwd.n->out[1]));
            dfg_test_fill_uniform(dy, ny, -2.0f, 2.0f);
            for (int64_t e = 0; e < ny; e++) dy[e] = round_to(dy[e], dt);
            unmake(&fwd);
        }
    }
    free(x);
    return ok;
}

/* the f32 build's inputs into the dt build */
static void copy_inputs(node *to, const node *f32) {
    for (int j = 0; j < f32->n->n_in; j++)
        put(to->in[j], to->n->in[j]->dtype, f32->in[j], dfg_tensor_numel(f32->n->in[j]));
}

/* ---------------------------------------------------------------- launchers through SDPA = CPU */
/* f32: the interpreter and OpenBLAS sum in other orders; the backward's dq of early rows is a
 * difference of nearly equal O(1) terms (test_cuda_attention.c), hence its absolute floor. */
static void check_case(shape s, bool backward, dfg_dtype dt) {
    node ref, got;
    if (!make(&ref, backward, DFG_F32, s)) return;
    if (!make(&got, backward, dt, s)) {
        unmake(&ref);
        return;
    }
    double rtol = dt == DFG_F32 ? 1e-5 : 1e-2, atol = dt == DFG_F32 ? (backward ? 1e-5 : 2e-6) : 1e-2;
    if (draw(&ref, backward, dt, s) && run_cpu(&ref)) {
        copy_inputs(&got, &ref);
        poison_outputs(&got);
        if (run_launcher(&got)) {
            double w = worst_ratio(&ref, &got, rtol, atol);
            CHECK(w <= 1.0, "%s %s B%d T%d H%d D%d through SDPA: worst error %.3g of the tolerance (rtol %g, atol %g)",
                  dfg_op_name(ref.n->op), dfg_dtype_name(dt), s.B, s.T, s.H, s.D, w, rtol, atol);
            printf("%-13s %-4s B%d T%-3d H%d D%-3d: SDPA interpreted = CPU, worst error %.3f of the tolerance\n",
                   dfg_op_name(ref.n->op), dfg_dtype_name(dt), s.B, s.T, s.H, s.D, w);
        }
    }
    unmake(&ref), unmake(&got);
}

/* ---------------------------------------------------------------- the launchers' protocol */
/* An SDPA that does not take the call (DFG_ERR_UNSUPPORTED, nothing enqueued): the launcher runs
 * the hand-written kernels, which then need their scratch. Any other status is the node's. */
static dfg_status refusing_sdpa(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs) {
    (void)ctx, (void)d, (void)backward, (void)ptrs;
    sdpa_calls++;
    return DFG_ERR_UNSUPPORTED;
}

static dfg_status failing_sdpa(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs) {
    (void)d, (void)backward, (void)ptrs;
    snprintf(ctx->err, ctx->err_len, "planted library failure");
    return DFG_ERR_RUNTIME;
}

static void check_fallback(shape s, bool backward) {
    node ref, got;
    if (!make(&ref, backward, DFG_F32, s)) return;
    if (!make(&got, backward, DFG_F32, s)) {
        unmake(&ref);
        return;
    }
    if (draw(&ref, backward, DFG_F32, s) && run_cpu(&ref)) {
        copy_inputs(&got, &ref);
        poison_outputs(&got);
        char err[1024] = "";
        int flags = 0, before = sdpa_calls;
        dfg_cuda_ctx ctx = {.flags = &flags, .gemm = dfg_cuda_gemm_interpret, .sdpa = refusing_sdpa, .sm_count = 132,
                            .err = err, .err_len = sizeof(err)};
        ctx.scratch_bytes = dfg_emu_scratch_bytes(got.n);
        ctx.scratch = ctx.scratch_bytes ? malloc(ctx.scratch_bytes) : NULL;
        dfg_status st = dfg_emu_kernels[got.n->op](got.n, got.in, got.out, &ctx);
        CHECK(st == DFG_OK && sdpa_calls == before + 1, "%s: a refusing SDPA, then the kernels: %s",
              dfg_op_name(got.n->op), err);
        double w = worst_ratio(&ref, &got, 2e-5, backward ? 1e-5 : 2e-6);
        CHECK(w <= 1.0, "%s: the hand-written kernels after a refusal: worst error %.3g of the tolerance",
              dfg_op_name(got.n->op), w);
        ctx.sdpa = failing_sdpa;
        st = dfg_emu_kernels[got.n->op](got.n, got.in, got.out, &ctx);
        CHECK(st == DFG_ERR_RUNTIME && strstr(err, "planted library failure"),
              "%s: a failing SDPA's status and message are the node's (got %s: %s)", dfg_op_name(got.n->op),
              dfg_status_name(st), err);
        free(ctx.scratch);
        printf("%s: an SDPA refusal runs the hand-written kernels (= CPU), a failure is the node's error\n",
               dfg_op_name(got.n->op));
    }
    unmake(&ref), unmake(&got);
}

/* ---------------------------------------------------------------- planted layout errors */
/* The case's reference (CPU) and a node whose outputs the interpreter recomputes per mutation. */
typedef struct {
    node ref, got;
    dfg_sdpa_desc d;
    bool backward;
} mutant_case;

static const char *operand_name(int k) {
    static const char *names[DFG_SDPA_N_OPERANDS] = {"Q", "K", "V", "O", "stats", "dO", "dQ", "dK", "dV"};
    return names[k];
}

/* The interpreter on descriptor m: the result's worst error against the CPU's (in tolerances). */
static double run_mutant(mutant_case *c, const dfg_sdpa_desc *m) {
    char err[512] = "";
    poison_outputs(&c->got);
    dfg_status st = run_desc(&c->got, m, err, sizeof(err));
    CHECK(st == DFG_OK, "interpreting a descriptor: %s", err);
    return st ? NAN : worst_ratio(&c->ref, &c->got, 1e-5, 1e-5);
}

static void check_planted(shape s, bool backward) {
    mutant_case c = {.backward = backward};
    if (!make(&c.ref, backward, DFG_F32, s) || !make(&c.got, backward, DFG_F32, s)) return;
    const char *why = "";
    bool ok = backward ? dfg_sdpa_backward_desc(c.got.n, &c.d, &why) : dfg_sdpa_forward_desc(c.got.n, &c.d, &why);
    CHECK(ok, "descriptor: %s", why);
    if (!ok || !draw(&c.ref, backward, DFG_F32, s) || !run_cpu(&c.ref)) goto out;
    copy_inputs(&c.got, &c.ref);
    double base = run_mutant(&c, &c.d);
    CHECK(base <= 1.0, "the true descriptor: worst error %.3g of the tolerance", base);
    /* the planted bug: K's token stride C (y's) instead of 3C (qkv's) */
    dfg_sdpa_desc bad = c.d;
    int64_t C = (int64_t)s.H * s.D;
    bad.t[DFG_SDPA_K].stride[2] = C;
    double w = run_mutant(&c, &bad);
    CHECK(!(w <= 1.0), "%s: K's token stride C instead of 3C went unnoticed", dfg_op_name(c.ref.n->op));
    printf("%s: planted K token stride C instead of 3C: caught, worst error %.3g x the tolerance (true layout %.3f)\n",
           dfg_op_name(c.ref.n->op), w, base);
    /* every stride along an axis of extent > 1, and every nonzero offset, halved (stride 1: 0) */
    int mutants = 0, caught = 0;
    double least = INFINITY;
    for (int k = 0; k < (backward ? DFG_SDPA_N_OPERANDS : DFG_SDPA_STATS + 1); k++) {
        int64_t ext[4] = {s.B, s.H, s.T, k == DFG_SDPA_STATS ? 1 : s.D};
        for (int a = -1; a < 4; a++) {
            dfg_sdpa_desc m = c.d;
            int64_t *v = a < 0 ? &m.t[k].offset : &m.t[k].stride[a];
            if (a < 0 ? *v == 0 : ext[a] < 2) continue;
            *v = *v > 1 ? *v / 2 : 0;
            double e = run_mutant(&c, &m);
            mutants++;
            bool seen = !(e <= 1.0);
            caught += seen;
            least = seen && e < least ? e : least;
            CHECK(seen, "%s: %s's %s %s halved went unnoticed (worst error %.3g of the tolerance)",
                  dfg_op_name(c.ref.n->op), operand_name(k), a < 0 ? "offset" : "stride",
                  a < 0 ? "" : (const char *[]){"b", "h", "s", "d"}[a], e);
        }
    }
    printf("%s: %d/%d single-field layout mutations caught (the smallest %.3g x the tolerance)\n",
           dfg_op_name(c.ref.n->op), caught, mutants, least);
out:
    unmake(&c.ref), unmake(&c.got);
}

/* ---------------------------------------------------------------- capture */
/* Inside a capture the call is recorded (outputs untouched); the graph's replay computes it. */
static void check_capture(shape s) {
    node ref, got;
    if (!make(&ref, true, DFG_F32, s)) return;
    if (!make(&got, true, DFG_F32, s)) {
        unmake(&ref);
        return;
    }
    dfg_sdpa_desc d;
    const char *why;
    if (draw(&ref, true, DFG_F32, s) && run_cpu(&ref) && dfg_sdpa_backward_desc(got.n, &d, &why)) {
        copy_inputs(&got, &ref);
        poison_outputs(&got);
        char err[512] = "";
        void *graph = NULL;
        CHECK(dfg_simt_capture_begin() == 0, "capture begins");
        dfg_status st = run_desc(&got, &d, err, sizeof(err));
        CHECK(st == DFG_OK, "a call inside the capture: %s", err);
        CHECK(isnan(dfg_load(got.out[0], DFG_F32, 0)), "a captured call ran instead of being recorded");
        CHECK(dfg_simt_capture_end(&graph) == 0, "capture ends: %s", dfg_simt_last_message());
        for (int r = 0; r < 2 && graph; r++) {
            poison_outputs(&got);
            CHECK(dfg_simt_graph_launch(graph) == 0, "replay: %s", dfg_simt_last_message());
            double w = worst_ratio(&ref, &got, 1e-5, 1e-5);
            CHECK(w <= 1.0, "replay %d of the captured backward: worst error %.3g of the tolerance", r, w);
        }
        if (graph) dfg_simt_graph_destroy(graph);
        printf("captured attention_bwd call: recorded, and its replays equal the CPU\n");
    }
    unmake(&ref), unmake(&got);
}

/* ---------------------------------------------------------------- left padding bypasses SDPA */
static void check_padded_bypass(shape s) {
    int64_t C = (int64_t)s.H * s.D;
    for (int backward = 0; backward < 2; backward++) {
        dfg_program *p = dfg_program_new("padded");
        dfg_graph *g = dfg_graph_new(p, "g");
        dfg_tensor *qkv = dfg_input(g, "qkv", DFG_F32, DFG_SHAPE(s.B, s.T, 3 * C));
        dfg_tensor *start = dfg_input(g, "start", DFG_I32, DFG_SHAPE(s.B));
        dfg_tensor *fy = dfg_attention_padded(g, qkv, start, s.H);
        dfg_tensor *in[5] = {dfg_input(g, "dy", DFG_F32, DFG_SHAPE(s.B, s.T, C)), qkv, fy, fy->producer->out[1], start};
        dfg_attrs a = {.attention = {s.H}};
        dfg_node *n = backward ? dfg_node_add(g, DFG_OP_ATTENTION_BWD, in, 5, &a, 1) : fy->producer;
        CHECK(n && !dfg_program_status(p), "padded node: %s", dfg_program_error(p));
        if (!n || dfg_program_status(p)) {
            dfg_program_free(p);
            return;
        }
        dfg_sdpa_desc d;
        const char *why = NULL;
        bool taken = backward ? dfg_sdpa_backward_desc(n, &d, &why) : dfg_sdpa_forward_desc(n, &d, &why);
        CHECK(!taken && why && strstr(why, "left-padded"), "%s with a start: descriptor refused (%s)", dfg_op_name(n->op),
              why ? why : "no reason");
        /* buffers: the forward's inputs and outputs first (the backward reads y and lse from them) */
        void *buf[8] = {0};
        const dfg_tensor *ts[8] = {qkv, start, fy, fy->producer->out[1], in[0], NULL, NULL, NULL};
        int nb = 5;
        if (backward) ts[nb++] = n->out[0];
        for (int i = 0; i < nb; i++) buf[i] = malloc(dfg_tensor_bytes(ts[i]) + 4);
        dfg_test_fill_uniform(buf[0], dfg_tensor_numel(qkv), -2.0f, 2.0f);
        for (int b = 0; b < s.B; b++) ((int32_t *)buf[1])[b] = b == 0 ? s.T - 1 : dfg_test_int(0, s.T - 1);
        dfg_test_fill_uniform(buf[4], dfg_tensor_numel(in[0]), -2.0f, 2.0f);
        char err[1024] = "";
        dfg_cpu_ctx cc = {.n_threads = 1, .err = err, .err_len = sizeof(err)};
        cc.scratch_per_thread = dfg_cpu_scratch_bytes(n) + dfg_cpu_scratch_bytes(fy->producer);
        cc.scratch = malloc(cc.scratch_per_thread);
        dfg_status st =
            dfg_cpu_kernels[DFG_OP_ATTENTION](fy->producer, (void *[]){buf[0], buf[1]}, (void *[]){buf[2], buf[3]}, &cc);
        void *ref = malloc(dfg_tensor_bytes(n->out[0])), *got = backward ? buf[5] : buf[2];
        void *bin[5] = {buf[4], buf[0], buf[2], buf[3], buf[1]};
        if (backward && !st) st = dfg_cpu_kernels[n->op](n, bin, (void *[]){ref}, &cc);
        if (!backward) memcpy(ref, buf[2], dfg_tensor_bytes(n->out[0]));
        CHECK(st == DFG_OK, "CPU: %s", err);
        int flags = 0, before = sdpa_calls;
        dfg_cuda_ctx ctx = {.flags = &flags, .gemm = dfg_cuda_gemm_interpret, .sdpa = failing_sdpa, .sm_count = 132,
                            .err = err, .err_len = sizeof(err)};
        ctx.scratch_bytes = dfg_emu_scratch_bytes(n);
        ctx.scratch = ctx.scratch_bytes ? malloc(ctx.scratch_bytes) : NULL;
        dfg_test_poison(got, dfg_tensor_bytes(n->out[0]));
        if (!backward) dfg_test_poison(buf[3], dfg_tensor_bytes(ts[3]));
        st = backward ? dfg_emu_kernels[n->op](n, bin, (void *[]){got}, &ctx)
                      : dfg_emu_kernels[n->op](n, (void *[]){buf[0], buf[1]}, (void *[]){buf[2], buf[3]}, &ctx);
        CHECK(st == DFG_OK && sdpa_calls == before && flags == 0, "%s with a start and an SDPA that fails: %s",
              dfg_op_name(n->op), err);
        double worst = 0.0;
        for (int64_t e = 0, ne = dfg_tensor_numel(n->out[0]); e < ne; e++) {
            double r = ((float *)ref)[e], v = ((float *)got)[e], d = fabs(r - v) / (1e-5 + 2e-5 * fabs(r));
            worst = isnan(d) ? INFINITY : fmax(worst, d);
        }
        CHECK(worst <= 1.0, "%s with a start, hand-written kernels: worst error %.3g of the tolerance", dfg_op_name(n->op),
              worst);
        printf("%s with a start: SDPA refused (\"%s\"), hand-written kernels = CPU (worst %.3f of the tolerance)\n",
               dfg_op_name(n->op), why ? why : "", worst);
        free(ctx.scratch), free(cc.scratch), free(ref);
        for (int i = 0; i < nb; i++) free(buf[i]);
        dfg_program_free(p);
    }
}

/* ---------------------------------------------------------------- cuDNN's side, without a GPU */
/* An H100 SXM's device properties in the JSON that cuDNN 9.19's device property descriptor reads
 * (its keys as the library's own messages name them), for cuDNN's deviceless planning. */
static const char H100_JSON[] =
    "{\"deviceName\": \"NVIDIA H100 80GB HBM3\", \"cudaDeviceId\": 0, \"deviceVer\": 900, \"driverVer\": 13000, "
    "\"multiProcessorCount\": 132, \"totalGlobalMem\": 85520809984, \"maxGridSize\": [2147483647, 65535, 65535], "
    "\"maxBlockSize\": [1024, 1024, 64], \"regsPerBlock\": 65536, \"warpSize\": 32, \"maxSharedMemoryPerBlock\": 49152, "
    "\"maxSharedMemoryPerBlockOptin\": 232448, \"reservedSharedMemoryPerBlock\": 1024, \"maxRegistersPerSM\": 65536, "
    "\"maxCtasPerSM\": 32, \"maxThreadsPerBlock\": 1024, \"maxThreadsPerSM\": 2048, \"pciDeviceId\": 9008, "
    "\"isTccDriver\": 0, \"supportCoopLaunch\": 1, \"smClockRateKHz\": 1980000, \"memClockRateKHz\": 2619000, "
    "\"l2CacheSize\": 52428800}";

/* The graphs runtime/cuda/sdpa_cudnn.c gives cuDNN, planned for that H100 without one: every
 * descriptor and the operation graph finalize, cuDNN's heuristics offer engine configurations for
 * them (they match its fused flash attention), the first deterministic one's kernels compile
 * (loading them needs a driver: the toolkit's stub libcuda stands in, so they cannot load), and
 * the workspace it asks for fits what the device's scratch rule plans. Skipped where a GPU driver
 * is (tools/gpu-check.sh builds and runs the plans for real there) or cuDNN is not. */
static void check_cudnn_deviceless(void) {
    if (!dfg_sdpa_cudnn_open_deviceless) {
        printf("cuDNN planning without a GPU: skipped (no cuDNN in this build)\n");
        return;
    }
#if defined(__SANITIZE_ADDRESS__)
    /* cuDNN loads its engine libraries itself, each with its own static libstdc++, whose
     * exception pool (72704 bytes) LeakSanitizer reports from the unloaded module; the release
     * build runs this check */
    printf("cuDNN planning without a GPU: skipped under AddressSanitizer (cuDNN's own libraries)\n");
    return;
#endif
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
        printf("cuDNN planning without a GPU: skipped (a GPU driver is here)\n");
        return;
    }
    static const char *const stubs[] = {"/usr/local/cuda/lib64/stubs/libcuda.so",
                                        "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so", NULL};
    void *stub = NULL;
    for (int i = 0; stubs[i] && !stub; i++) stub = dlopen(stubs[i], RTLD_NOW | RTLD_GLOBAL); /* soname libcuda.so.1 */
    dfg_sdpa_cudnn *s = NULL;
    char err[512] = "";
    if (!stub || dfg_sdpa_cudnn_open_deviceless(&s, H100_JSON, err, sizeof(err))) {
        printf("cuDNN planning without a GPU: skipped (%s)\n", stub ? err : "no stub libcuda in the CUDA toolkit");
        return;
    }
    /* GPT-2 124M's attention at T = 1024, odd sequence lengths, one query */
    const shape shapes[] = {{4, 1024, 12, 64}, {3, 77, 5, 32}, {2, 1, 2, 64}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int bwd = 0; bwd < 2; bwd++) {
            shape sh = shapes[i];
            dfg_program *p = dfg_program_new("cudnn");
            dfg_node *n = build(dfg_graph_new(p, "g"), bwd, DFG_BF16, sh);
            dfg_sdpa_desc d;
            const char *why = "";
            if (!n || !(bwd ? dfg_sdpa_backward_desc(n, &d, &why) : dfg_sdpa_forward_desc(n, &d, &why))) {
                CHECK(false, "descriptor: %s", why);
                dfg_program_free(p);
                continue;
            }
            size_t ws = dfg_sdpa_cudnn_workspace(n);
            const dfg_sdpa_cudnn_report *r = dfg_sdpa_cudnn_plan(s, &d, bwd, ws);
            CHECK(r && r->configs > 0 && r->refused == 0 && r->over_workspace == 0 && (r->planned || r->no_driver > 0),
                  "cuDNN %s B%d T%d H%d D%d: %s", dfg_op_name(n->op), sh.B, sh.T, sh.H, sh.D, r ? r->why : "out of memory");
            if (r)
                printf("cuDNN (deviceless, H100) %-13s B%d T%-4d H%-2d D%d: pattern matched, a deterministic engine's kernels "
                       "compile, workspace %lld of %zu planned\n",
                       dfg_op_name(n->op), sh.B, sh.T, sh.H, sh.D, r->workspace, ws);
            dfg_program_free(p);
        }
    dfg_sdpa_cudnn_close(s);
}

/* ---------------------------------------------------------------- what cuDNN takes */
static void check_support(void) {
    shape ok_shape = {2, 16, 2, 64}, odd = {2, 16, 2, 17}, wide = {1, 8, 1, 136};
    node n;
    dfg_sdpa_desc d;
    const char *why = "";
    if (!make(&n, true, DFG_BF16, ok_shape)) return;
    CHECK(dfg_sdpa_backward_desc(n.n, &d, &why), "bwd descriptor: %s", why);
    void *ptrs[DFG_SDPA_N_OPERANDS];
    void *in[4], *out[1];
    for (int j = 0; j < 4; j++) in[j] = (void *)(uintptr_t)(4096 * (j + 1)); /* aligned addresses, never read */
    out[0] = (void *)(uintptr_t)(4096 * 8);
    dfg_sdpa_buffers(n.n, in, out, ptrs);
    CHECK(dfg_sdpa_cudnn_supports(&d, true, ptrs, &why), "bf16 D=64, aligned: cuDNN should take it (%s)", why);
    CHECK(dfg_sdpa_cudnn_supports(&d, false, NULL, &why), "bf16 D=64 forward layout: cuDNN should take it (%s)", why);
    in[1] = (void *)(uintptr_t)(4096 * 2 + 2); /* qkv one bf16 off 16 bytes */
    dfg_sdpa_buffers(n.n, in, out, ptrs);
    CHECK(!dfg_sdpa_cudnn_supports(&d, true, ptrs, &why), "a misaligned qkv: refused");
    dfg_sdpa_desc f = d;
    f.dtype = DFG_F32;
    CHECK(!dfg_sdpa_cudnn_supports(&f, true, NULL, &why), "f32: refused");
    unmake(&n);
    /* odd sequence lengths and one query: stats heads of T floats, any number of bytes apart */
    shape taken[3] = {{3, 77, 5, 32}, {2, 1, 2, 64}, {1, 13, 3, 8}};
    for (int i = 0; i < 3; i++)
        for (int bwd = 0; bwd < 2; bwd++) {
            if (!make(&n, bwd, DFG_BF16, taken[i])) return;
            CHECK(bwd ? dfg_sdpa_backward_desc(n.n, &d, &why) : dfg_sdpa_forward_desc(n.n, &d, &why), "descriptor: %s", why);
            CHECK(dfg_sdpa_cudnn_supports(&d, bwd, NULL, &why), "bf16 B%d T%d H%d D%d: cuDNN should take it (%s)",
                  taken[i].B, taken[i].T, taken[i].H, taken[i].D, why);
            unmake(&n);
        }
    shape refused[2] = {odd, wide};
    for (int i = 0; i < 2; i++) {
        if (!make(&n, false, DFG_BF16, refused[i])) return;
        CHECK(dfg_sdpa_forward_desc(n.n, &d, &why), "fwd descriptor: %s", why);
        CHECK(!dfg_sdpa_cudnn_supports(&d, false, NULL, &why), "head dim %d: refused", refused[i].D);
        unmake(&n);
    }
    /* a descriptor from the wrong op is refused, with a reason */
    if (!make(&n, true, DFG_F32, ok_shape)) return;
    why = NULL;
    CHECK(!dfg_sdpa_forward_desc(n.n, &d, &why) && why, "a forward descriptor of attention_bwd: refused");
    unmake(&n);
    /* the fused qkv layout itself (the mapping the GPU's call gets) */
    if (!make(&n, false, DFG_BF16, (shape){3, 5, 4, 8})) return;
    CHECK(dfg_sdpa_forward_desc(n.n, &d, &why), "fwd descriptor: %s", why);
    const dfg_sdpa_layout *q = &d.t[DFG_SDPA_Q], *k = &d.t[DFG_SDPA_K], *v = &d.t[DFG_SDPA_V], *o = &d.t[DFG_SDPA_O];
    CHECK(q->offset == 0 && k->offset == 32 && v->offset == 64, "Q, K, V at 0, C, 2C of qkv");
    CHECK(q->stride[0] == 5 * 96 && q->stride[1] == 8 && q->stride[2] == 96 && q->stride[3] == 1,
          "Q strides (T*3C, D, 3C, 1)");
    CHECK(!memcmp(k->stride, q->stride, sizeof(q->stride)) && !memcmp(v->stride, q->stride, sizeof(q->stride)),
          "K and V strided as Q");
    CHECK(o->stride[0] == 5 * 32 && o->stride[1] == 8 && o->stride[2] == 32 && o->stride[3] == 1, "O strides (T*C, D, C, 1)");
    CHECK(d.t[DFG_SDPA_STATS].stride[0] == 20 && d.t[DFG_SDPA_STATS].stride[1] == 5 && d.t[DFG_SDPA_STATS].stride[2] == 1,
          "stats strides (H*T, T, 1)");
    CHECK(d.causal && d.stats && fabsf(d.scale - 1.0f / sqrtf(8.0f)) < 1e-7f, "causal, stats kept, scale 1/sqrt(D)");
    unmake(&n);
}
#endif

int main(void) {
    dfg_test_init("test_cuda_sdpa");
#ifdef DFG_NO_CUDA_EMU
    printf("test_cuda_sdpa: skipped (no SIMT emulator in this build)\n");
    return DFG_TEST_SKIP;
#else
    /* B, T, H, D: T = 1, head dims odd and 1, T past a 64-row tile, several batches and heads */
    const shape cases[] = {
        {1, 1, 2, 4}, {2, 5, 3, 4}, {1, 70, 3, 17}, {2, 33, 2, 7}, {1, 3, 5, 1},
        {2, 64, 2, 32}, {1, 129, 2, 64}, {1, 65, 1, 128}, {3, 9, 4, 8}, {2, 1, 3, 5},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int bwd = 0; bwd < 2; bwd++) {
            check_case(cases[i], bwd, DFG_F32);
            check_case(cases[i], bwd, DFG_BF16);
        }
    check_planted((shape){2, 6, 3, 5}, false);
    check_planted((shape){2, 6, 3, 5}, true);
    check_capture((shape){2, 7, 2, 3});
    check_fallback((shape){2, 9, 2, 8}, false);
    check_fallback((shape){2, 9, 2, 8}, true);
    check_support();
    check_padded_bypass((shape){3, 70, 2, 8});
    check_cudnn_deviceless(); /* last: it may load the stub libcuda */
    printf("test_cuda_sdpa: %d calls of ctx->sdpa from the launchers\n", sdpa_calls);
    return dfg_test_finish();
#endif
}
