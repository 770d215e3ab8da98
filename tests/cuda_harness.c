/* cuda_harness.c - see cuda_harness.h. */
#include "cuda_harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "ops/dtype.h"
#include "ops/cuda/cuda.h"
#include "runtime/cuda/emu/simt/dfg_simt_ctl.h"

#ifdef DFG_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda/device.h"
#endif

/* ---------------------------------------------------------------- data */
bool cuda_fill_floats(const dfg_tensor *t, void *data, int64_t n) {
    if (!dfg_is_float(t->dtype)) return false;
    dfg_test_fill_uniform(data, n, -2.0f, 2.0f);
    return true;
}

void cuda_fill_range(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    (void)slot;
    const float *r = user;
    if (t->dtype == DFG_I32)
        for (int64_t i = 0; i < n; i++) ((int32_t *)data)[i] = dfg_test_int((int)r[0], (int)r[1] - 1);
    else
        dfg_test_fill_uniform(data, n, r[0], r[1]);
}

#ifndef DFG_NO_CUDA_EMU
static int cases_run, gpu_runs;
static bool covered[DFG_OP_COUNT]; /* ops whose CUDA kernel a case compared */
/* per op and dtype (f32, bf16), over the emulated runs' float outputs: the largest |CUDA - CPU|,
 * and the largest |CUDA - CPU| / (atol + rtol |CPU|), the share of the tolerance used (cuda_report) */
static struct {
    double diff, share;
    bool seen;
} worst[DFG_OP_COUNT][2];
#ifdef DFG_HAVE_CUDA
static int gpu_state = -1; /* -1 unknown, 0 none, 1 present */
#endif

/* ---------------------------------------------------------------- one build of the node */
typedef struct {
    dfg_program *p;
    dfg_node *n;
    int n_bufs;
    const dfg_tensor *storage[64]; /* distinct storages of the node's inputs and outputs */
    void *data[64];                 /* one allocation each, exactly the tensor's bytes */
    int in_buf[32], out_buf[32];    /* [slot] -> buffer */
} build;

static int buf_of(build *b, const dfg_tensor *t) {
    for (int i = 0; i < b->n_bufs; i++)
        if (b->storage[i] == t->storage) return i;
    b->storage[b->n_bufs] = t->storage;
    b->data[b->n_bufs] = calloc(1, dfg_tensor_bytes(t->storage) ? dfg_tensor_bytes(t->storage) : 1);
    return b->n_bufs++;
}

static bool make(const cuda_case *c, dfg_dtype dt, build *b) {
    memset(b, 0, sizeof(*b));
    b->p = dfg_program_new(c->label);
    dfg_graph *g = dfg_graph_new(b->p, "case");
    b->n = g ? c->build(g, dt, c->user) : NULL;
    CHECK(b->n && !dfg_program_status(b->p), "%s (%s): the case does not build: %s", c->label, dfg_dtype_name(dt),
          dfg_program_error(b->p));
    if (!b->n || dfg_program_status(b->p)) return false;
    CHECK(b->n->n_in <= 32 && b->n->n_out <= 32, "%s: too many inputs or outputs for the harness", c->label);
    for (int j = 0; j < b->n->n_in; j++) b->in_buf[j] = buf_of(b, b->n->in[j]);
    for (int k = 0; k < b->n->n_out; k++) b->out_buf[k] = buf_of(b, b->n->out[k]);
    return true;
}

static void unmake(build *b) {
    for (int i = 0; i < b->n_bufs; i++) free(b->data[i]);
    dfg_program_free(b->p);
}

static bool is_input_buf(const build *b, int buf) {
    for (int j = 0; j < b->n->n_in; j++)
        if (b->in_buf[j] == buf) return true;
    return false;
}

/* ---------------------------------------------------------------- data */

static void fill_default(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    (void)slot, (void)user;
    if (t->dtype == DFG_I32)
        for (int64_t i = 0; i < n; i++) ((int32_t *)data)[i] = dfg_test_int(0, 7);
    else if (t->dtype == DFG_U8)
        for (int64_t i = 0; i < n; i++) ((uint8_t *)data)[i] = (uint8_t)dfg_test_int(0, 1);
    else
        dfg_test_fill_uniform(data, n, -2.0f, 2.0f);
}

/* The inputs' values as the f32 build holds them: base[buf] for every input buffer. */
static void draw_inputs(const cuda_case *c, build *f32, void **base) {
    cuda_fill_fn fill = c->fill ? c->fill : fill_default;
    for (int i = 0; i < f32->n_bufs; i++) {
        base[i] = NULL;
        if (!is_input_buf(f32, i)) continue;
        const dfg_tensor *t = f32->storage[i];
        /* float inputs are drawn as f32 whatever their dtype (load_inputs converts them) */
        size_t bytes = dfg_is_float(t->dtype) ? sizeof(float) * (size_t)dfg_tensor_numel(t) : dfg_tensor_bytes(t);
        base[i] = malloc(bytes ? bytes : 1);
        int slot = 0;
        while (f32->in_buf[slot] != i) slot++;
        fill(slot, t, base[i], dfg_tensor_numel(t), c->user);
    }
}

/* Input buffer values for a build of dtype dt: the f32 values rounded to what dt's tensor holds
 * (the CPU reference then computes on exactly those values). */
static void load_inputs(build *into, const build *f32, void *const *base, const build *dtype_of) {
    for (int i = 0; i < into->n_bufs; i++) {
        if (!base[i]) {
            dfg_test_poison(into->data[i], dfg_tensor_bytes(into->storage[i]));
            continue;
        }
        const dfg_tensor *t = f32->storage[i], *as = dtype_of->storage[i], *dst = into->storage[i];
        int64_t n = dfg_tensor_numel(t);
        if (!dfg_is_float(t->dtype)) {
            memcpy(into->data[i], base[i], dfg_tensor_bytes(t));
            continue;
        }
        for (int64_t e = 0; e < n; e++) {
            double v = dfg_load(base[i], DFG_F32, e);
            if (as->dtype == DFG_BF16) v = dfg_bf16_to_f32(dfg_f32_to_bf16((float)v));
            dfg_store(into->data[i], dst->dtype, e, v);
        }
    }
}

/* ---------------------------------------------------------------- running */
/* The kernels' argument arrays: b's buffers in the node's slot order. */
static void args_of(const build *b, void **in, void **out) {
    for (int j = 0; j < b->n->n_in; j++) in[j] = b->data[b->in_buf[j]];
    for (int k = 0; k < b->n->n_out; k++) out[k] = b->data[b->out_buf[k]];
}

static bool run_cpu(const cuda_case *c, build *b) {
    void *in[32], *out[32];
    args_of(b, in, out);
    return cuda_run_cpu(c->label, b->n, in, out);
}

static bool run_emulated(const cuda_case *c, build *b, uint64_t seed) {
    char label[256];
    snprintf(label, sizeof(label), "%s (%s)", c->label, dfg_dtype_name(b->n->out[0]->dtype));
    void *in[32], *out[32];
    args_of(b, in, out);
    int flags = cuda_run_emulated(label, b->n, in, out, 132, seed);
    CHECK(flags <= 0, "%s: the CUDA kernel flagged a bad value (%d) in valid inputs", c->label, flags);
    return flags == 0;
}

/* ---------------------------------------------------------------- comparing */
static bool compare(const cuda_case *c, const build *ref, const build *got, dfg_dtype dt, const char *what) {
    bool ok = true;
    double rtol = dt == DFG_BF16 ? (c->rtol_bf16 ? c->rtol_bf16 : 1e-2) : (c->rtol ? c->rtol : 1e-5);
    double atol = dt == DFG_BF16 ? (c->atol_bf16 ? c->atol_bf16 : 1e-2) : (c->atol ? c->atol : 1e-6);
    for (int k = 0; k < ref->n->n_out && ok; k++) {
        if (c->skip_outputs & (1u << k)) continue;
        const dfg_tensor *rt = ref->n->out[k], *gt = got->n->out[k];
        const void *r = ref->data[ref->out_buf[k]], *g = got->data[got->out_buf[k]];
        int64_t n = dfg_tensor_numel(rt);
        for (int64_t e = 0; e < n && ok; e++) {
            double a = dfg_load(r, rt->dtype, e), b = dfg_load(g, gt->dtype, e);
            /* equal (inf == inf), within the tolerances, or NaN on both sides */
            bool same = a == b || (dfg_is_float(rt->dtype) && (fabs(a - b) <= atol + rtol * fabs(a) || (isnan(a) && isnan(b))));
            if (dfg_is_float(rt->dtype) && isnan(a) != isnan(b)) same = false;
            if (dfg_is_float(rt->dtype) && isfinite(a) && isfinite(b) && !strcmp(what, "emulated")) {
                int op = ref->n->op, d = dt == DFG_BF16;
                double diff = fabs(a - b), share = diff / (atol + rtol * fabs(a));
                worst[op][d].diff = diff > worst[op][d].diff ? diff : worst[op][d].diff;
                worst[op][d].share = share > worst[op][d].share ? share : worst[op][d].share;
                worst[op][d].seen = true;
            }
            if (!same) {
                char sb[96];
                CHECK(same, "%s (%s, %s): output %d '%s' %s element %lld: CPU %.9g, CUDA %.9g (rtol %g, atol %g)",
                      c->label, dfg_dtype_name(dt), what, k, rt->name, dfg_shape_str(rt->shape, sb, sizeof(sb)),
                      (long long)e, a, b, rtol, atol);
                ok = false;
            }
        }
    }
    return ok;
}

static bool same_bits(const cuda_case *c, const build *a, const build *b, uint64_t seed) {
    for (int k = 0; k < a->n->n_out; k++) {
        if (c->skip_outputs & (1u << k)) continue;
        size_t bytes = dfg_tensor_bytes(a->n->out[k]);
        if (memcmp(a->data[a->out_buf[k]], b->data[b->out_buf[k]], bytes)) {
            CHECK(false, "%s (%s): output %d differs between schedule seeds 0 and %llu (a race or a missing barrier)",
                  c->label, dfg_dtype_name(a->n->out[0]->dtype), k, (unsigned long long)seed);
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------- the GPU half */
#ifdef DFG_HAVE_CUDA
static bool have_gpu(void) {
    if (gpu_state < 0) {
        int n = 0;
        gpu_state = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    }
    return gpu_state == 1;
}

/* The GPU device layer the backend uses (runtime/cuda/device_cuda.c): its stream and its
 * cuBLASLt GEMM, so the matmul family runs on the GPU as in a real run. */
static void *gpu_dev;
static void *gpu_gemm_ws;

static bool open_gpu(dfg_cuda_ctx *ctx) {
    if (!gpu_dev) {
        int sm = 0;
        char desc[256], err[256];
        if (dfg_device_cuda.open(&gpu_dev, &sm, desc, sizeof(desc), err, sizeof(err))) {
            CHECK(false, "opening the GPU: %s", err);
            return false;
        }
        if (cudaMalloc(&gpu_gemm_ws, dfg_device_cuda.gemm_workspace) != cudaSuccess) gpu_gemm_ws = NULL;
        printf("GPU: %s\n", desc);
    }
    ctx->stream = dfg_device_cuda.stream(gpu_dev);
    ctx->gemm = dfg_device_cuda.gemm;
    ctx->gemm_state = dfg_device_cuda.gemm_state(gpu_dev);
    ctx->gemm_workspace = gpu_gemm_ws;
    ctx->gemm_workspace_bytes = gpu_gemm_ws ? dfg_device_cuda.gemm_workspace : 0;
    return true;
}

/* The nvcc-built kernel on the device, on the inputs of `host` (whose outputs it then holds). */
static bool run_gpu(const cuda_case *c, build *host) {
    dfg_cuda_fn fn = dfg_cuda_kernels[host->n->op];
    if (!fn) return false;
    void *dev[64] = {0};
    bool ok = true;
    for (int i = 0; i < host->n_bufs && ok; i++) {
        size_t bytes = dfg_tensor_bytes(host->storage[i]);
        ok = cudaMalloc(&dev[i], bytes ? bytes : 1) == cudaSuccess &&
             cudaMemcpy(dev[i], host->data[i], bytes, cudaMemcpyHostToDevice) == cudaSuccess;
    }
    int *flags = NULL;
    char err[1024] = "";
    dfg_cuda_ctx ctx = {.err = err, .err_len = sizeof(err), .sm_count = 132};
    ok = ok && open_gpu(&ctx);
    ctx.scratch_bytes = dfg_cuda_scratch_bytes(host->n);
    ok = ok && cudaMalloc((void **)&flags, sizeof(int)) == cudaSuccess && cudaMemset(flags, 0, sizeof(int)) == cudaSuccess;
    ok = ok && (!ctx.scratch_bytes || cudaMalloc(&ctx.scratch, ctx.scratch_bytes) == cudaSuccess);
    ctx.flags = flags;
    void *in[32], *out[32];
    for (int j = 0; j < host->n->n_in; j++) in[j] = dev[host->in_buf[j]];
    for (int k = 0; k < host->n->n_out; k++) out[k] = dev[host->out_buf[k]];
    /* cudaMemcpy from pageable memory may return before its DMA lands, and the kernels run on the
     * device layer's non-blocking stream, which does not wait for the legacy stream: without this
     * a kernel can read inputs (and an in-place output) before they arrive (the H100 showed it) */
    ok = ok && cudaDeviceSynchronize() == cudaSuccess;
    dfg_status st = ok ? fn(host->n, in, out, &ctx) : DFG_ERR_NOMEM;
    ok = ok && st == DFG_OK && cudaDeviceSynchronize() == cudaSuccess;
    CHECK(ok, "%s (GPU): %s", c->label, err[0] ? err : cudaGetErrorString(cudaGetLastError()));
    for (int i = 0; i < host->n_bufs && ok; i++)
        cudaMemcpy(host->data[i], dev[i], dfg_tensor_bytes(host->storage[i]), cudaMemcpyDeviceToHost);
    for (int i = 0; i < host->n_bufs; i++) cudaFree(dev[i]);
    cudaFree(flags);
    cudaFree(ctx.scratch);
    return ok;
}
#endif

/* ---------------------------------------------------------------- one dtype */
static bool check_dtype(const cuda_case *c, dfg_dtype dt, build *f32) {
    build ref, got, again;
    if (!make(c, DFG_F32, &ref)) return false;
    if (!make(c, dt, &got) || !make(c, dt, &again)) {
        unmake(&ref);
        return false;
    }
    void *base[64];
    draw_inputs(c, f32, base);
    bool ok = true;
    load_inputs(&ref, f32, base, &got);
    ok = run_cpu(c, &ref);
    load_inputs(&got, f32, base, &got);
    ok = ok && run_emulated(c, &got, 0) && compare(c, &ref, &got, dt, "emulated");
    int seeds = c->seeds ? c->seeds : 3;
    for (int s = 1; s <= seeds && ok; s++) {
        uint64_t seed = dfg_test_u64() | 1;
        load_inputs(&again, f32, base, &got);
        ok = run_emulated(c, &again, seed) && same_bits(c, &got, &again, seed);
    }
#ifdef DFG_HAVE_CUDA
    if (ok && have_gpu()) {
        load_inputs(&again, f32, base, &got);
        ok = run_gpu(c, &again) && compare(c, &ref, &again, dt, "GPU");
        gpu_runs++;
    }
#endif
    for (int i = 0; i < f32->n_bufs; i++) free(base[i]);
    unmake(&ref), unmake(&got), unmake(&again);
    return ok;
}

/* ---------------------------------------------------------------- direct runs */
int cuda_run_emulated(const char *label, const dfg_node *n, void *const *in, void *const *out, int sm_count,
                      uint64_t seed) {
    dfg_cuda_fn fn = dfg_emu_kernels[n->op];
    CHECK(fn != NULL, "%s: op '%s' has no CUDA kernel", label, dfg_op_name(n->op));
    if (!fn) return -1;
    char err[1024] = "";
    int flags = 0;
    dfg_cuda_ctx ctx = {.flags = &flags, .gemm = dfg_cuda_gemm_interpret, .sm_count = sm_count ? sm_count : 132,
                        .err = err, .err_len = sizeof(err)};
    ctx.scratch_bytes = dfg_emu_scratch_bytes(n);
    ctx.scratch = ctx.scratch_bytes ? malloc(ctx.scratch_bytes) : NULL;
    if (ctx.scratch) dfg_test_poison(ctx.scratch, ctx.scratch_bytes);
    dfg_simt_set_seed(seed);
    dfg_status st = fn(n, in, out, &ctx);
    dfg_simt_set_seed(0);
    free(ctx.scratch);
    CHECK(st == DFG_OK, "%s (schedule seed %llu): the CUDA kernel failed: %s", label, (unsigned long long)seed, err);
    return st == DFG_OK ? flags : -1;
}
#else
int cuda_run_emulated(const char *label, const dfg_node *n, void *const *in, void *const *out, int sm_count,
                      uint64_t seed) {
    (void)n, (void)in, (void)out, (void)sm_count, (void)seed;
    CHECK(false, "%s: no SIMT emulator in this build", label);
    return -1;
}
#endif /* DFG_NO_CUDA_EMU */

dfg_shape cuda_rows_shape(dfg_shape s) {
    s.rank--;
    return s;
}

dfg_node *cuda_node_alone(cuda_build_fn build, void *user, dfg_dtype dt, const char *label, dfg_program **p) {
    *p = dfg_program_new(label);
    dfg_node *n = build(dfg_graph_new(*p, "g"), dt, user);
    CHECK(n != NULL, "%s: the node does not build: %s", label, dfg_program_error(*p));
    if (!n) dfg_program_free(*p), *p = NULL;
    return n;
}

bool cuda_run_cpu(const char *label, const dfg_node *n, void *const *in, void *const *out) {
    char err[512] = "";
    dfg_cpu_ctx ctx = {.n_threads = 1, .err = err, .err_len = sizeof(err)};
    ctx.scratch_per_thread = dfg_cpu_scratch_bytes(n);
    ctx.scratch = ctx.scratch_per_thread ? malloc(ctx.scratch_per_thread) : NULL;
    dfg_status st = dfg_cpu_kernels[n->op](n, in, out, &ctx);
    free(ctx.scratch);
    CHECK(st == DFG_OK, "%s: the CPU kernel failed: %s", label, err);
    return st == DFG_OK;
}

bool cuda_emulator_built(void) {
#ifdef DFG_NO_CUDA_EMU
    return false;
#else
    return true;
#endif
}

bool cuda_check(const cuda_case *c) {
#ifdef DFG_NO_CUDA_EMU
    (void)c;
    return false;
#else
    build f32;
    if (!make(c, DFG_F32, &f32)) return false;
    covered[f32.n->op] = true;
    bool ok = check_dtype(c, DFG_F32, &f32);
    if (c->bf16) ok = check_dtype(c, DFG_BF16, &f32) && ok;
    unmake(&f32);
    cases_run++;
    return ok;
#endif
}

static const char *test_name = "test_cuda";

bool cuda_test_begin(const char *test) {
    test_name = test;
    dfg_test_init(test);
    if (cuda_emulator_built()) return true;
    printf("%s: skipped (no SIMT emulator in this build)\n", test);
    return false;
}

int cuda_test_end(void) {
    cuda_report(test_name);
    return dfg_test_finish();
}

void cuda_report(const char *test) {
#ifdef DFG_NO_CUDA_EMU
    printf("%s: skipped (no SIMT emulator in this build)\n", test);
#else
    printf("%s: %d cases under the SIMT emulator%s\n", test, cases_run,
           gpu_runs ? "" : "; the GPU half skipped (no CUDA device)");
    if (gpu_runs) printf("%s: %d runs on the GPU\n", test, gpu_runs);
    for (int op = 0; op < DFG_OP_COUNT; op++)
        for (int d = 0; d < 2; d++)
            if (worst[op][d].seen)
                printf("%s: %s (%s): worst |CUDA - CPU| %.3g, %.3g of the tolerance\n", test, dfg_op_name(op),
                       d ? "bf16" : "f32", worst[op][d].diff, worst[op][d].share);
    /* the ops this test compared, for test_cuda_table's coverage check */
    const char *dir = getenv("DFG_CUDA_COVERAGE_DIR");
    if (dir && *dir) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s.txt", dir, test);
        FILE *f = fopen(path, "w");
        for (int op = 0; f && op < DFG_OP_COUNT; op++)
            if (covered[op] && dfg_test_failures == 0) fprintf(f, "%s\n", dfg_op_name(op));
        if (f) fclose(f);
    }
#endif
}
