/* test_cuda_backend.c - the CUDA backend's orchestration on the emulated device:
 *   - a stage graph replays to the same bits as eager launches, step after step, also for a stage
 *     that draws random numbers (the RNG counter lives on the device, so each replay draws anew);
 *   - a host read, a host write or an allocation planted inside a captured stage (a backend whose
 *     exec also copies to the host, or allocates) fails the step with one message naming the step,
 *     the stage and the call -- what a GPU's stream capture would refuse;
 *   - a cuda plan's runtime holds exactly one device allocation: the arena plus the workspace;
 *   - a plan declared batch-invariant is accepted (ops/cuda/invariant.cu; test_cuda_invariant and
 *     tests/cli/invariant_cuda_test.sh check what its kernels compute). */
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "runtime/runtime_internal.h"

/* x (8, 16) param -> h = gelu(x @ w) -> a token per row sampled from h (RNG state advanced),
 * and an accumulation into a state: several kinds of launch, an in-place write, a GEMM. */
static dfg_program *program_with(bool invariant) {
    dfg_program *p = dfg_program_new("backend");
    dfg_tensor *x = dfg_param(p, "x", DFG_F32, DFG_SHAPE(8, 16), dfg_init_normal(0, 1));
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(16, 12), dfg_init_normal(0, 0.3f));
    dfg_tensor *acc = dfg_state(p, "acc", DFG_F32, DFG_SHAPE(8, 12), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *rng = dfg_state(p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_constant(7));
    dfg_tensor *tok = dfg_state(p, "tok", DFG_I32, DFG_SHAPE(8), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "work");
    dfg_tensor *h = dfg_gelu(g, dfg_matmul(g, x, w, false, false));
    dfg_accumulate(g, acc, h);
    dfg_assign(g, tok, dfg_sample(g, h, rng, 1.0f, 0));
    dfg_stage_graph(p, g, 3); /* three runs per step, unrolled into one graph */
    if (invariant) dfg_declare_batch_invariant(p);
    dfg_options o = dfg_options_default(DFG_TARGET_CUDA);
    CHECK(!dfg_compile(p, &o), "compile: %s", dfg_program_error(p));
    return p;
}

static dfg_program *program(void) { return program_with(false); }

static dfg_runtime *runtime(dfg_program *p, bool eager) {
    dfg_run_options o = dfg_run_options_default();
    o.target = DFG_TARGET_CUDA;
    o.emulate_gpu = true;
    o.eager = eager;
    o.seed = 42;
    dfg_runtime *rt = NULL;
    CHECK(!dfg_runtime_create(p, &o, &rt), "runtime: %s", rt ? dfg_runtime_error(rt) : "?");
    return rt;
}

static void test_replay_equals_eager(void) {
    dfg_program *p = program(), *q = program();
    dfg_runtime *graphs = runtime(p, false), *eager = runtime(q, true);
    float a[96], b[96];
    int32_t ta[8], tb[8], first[8];
    bool drew_anew = false;
    for (int step = 0; step < 4 && graphs && eager; step++) {
        CHECK(!dfg_runtime_step(graphs), "graph step: %s", dfg_runtime_error(graphs));
        CHECK(!dfg_runtime_step(eager), "eager step: %s", dfg_runtime_error(eager));
        dfg_runtime_read(graphs, "acc", a, sizeof(a));
        dfg_runtime_read(eager, "acc", b, sizeof(b));
        dfg_runtime_read(graphs, "tok", ta, sizeof(ta));
        dfg_runtime_read(eager, "tok", tb, sizeof(tb));
        CHECK(!memcmp(a, b, sizeof(a)) && !memcmp(ta, tb, sizeof(ta)), "step %d: graph replay differs from eager", step + 1);
        if (step == 0) memcpy(first, ta, sizeof(first));
        else drew_anew |= memcmp(first, ta, sizeof(first)) != 0;
    }
    CHECK(drew_anew, "replays drew the same tokens every step: the RNG counter did not advance on the device");
    printf("graph replay = eager launches over 4 steps (3 unrolled runs each), tokens drawn anew each step\n");
    dfg_runtime_free(graphs), dfg_runtime_free(eager);
    dfg_program_free(p), dfg_program_free(q);
}

/* ---------------------------------------------------------------- planted calls inside a capture */
static dfg_backend planted;        /* the emulated CUDA backend with its exec replaced */
static const char *plant;          /* "read", "write" or "alloc" */
static char host_bytes[64];

static dfg_status exec_with_plant(void *state, const dfg_node *n, void *const *in, void *const *out, char *err, size_t len) {
    dfg_status st = dfg_backend_cuda_emulated.exec(state, n, in, out, err, len);
    if (st) return st;
    if (!strcmp(plant, "read")) return dfg_backend_cuda_emulated.download(state, host_bytes, in[0], 4) ? DFG_OK : DFG_OK;
    if (!strcmp(plant, "write")) return dfg_backend_cuda_emulated.upload(state, out[0], host_bytes, 4) ? DFG_OK : DFG_OK;
    void *extra = dfg_backend_cuda_emulated.alloc(state, 1024); /* NULL inside a capture */
    if (extra) dfg_backend_cuda_emulated.free(state, extra);
    return DFG_OK;
}

static void expect_planted(const char *what, const char *call) {
    dfg_program *p = program();
    dfg_runtime *rt = runtime(p, false);
    if (!rt) return;
    planted = *rt->be;
    planted.exec = exec_with_plant;
    plant = what;
    rt->be = &planted;
    dfg_status st = dfg_runtime_step(rt);
    const char *msg = dfg_runtime_error(rt);
    CHECK(st != DFG_OK && strstr(msg, "step 1, stage 'work'") && strstr(msg, call) && !strchr(msg, '\n'),
          "planted %s: expected a one-line failure naming the stage and '%s', got %d: %s", what, call, (int)st, msg);
    printf("planted %s inside a captured stage: %s\n", what, msg);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

static void test_one_allocation(void) {
    dfg_program *p = program();
    dfg_runtime *rt = runtime(p, false);
    if (!rt) return;
    size_t dev = dfg_runtime_device_bytes(rt), ws = dfg_runtime_workspace_bytes(rt);
    CHECK(dev == dfg_program_report(p)->arena_bytes + ws, "device holds %zu bytes; plan arena %zu + workspace %zu", dev,
          dfg_program_report(p)->arena_bytes, ws);
    printf("device memory: %zu bytes = arena %zu + workspace %zu\n", dev, dfg_program_report(p)->arena_bytes, ws);
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

static void test_batch_invariant_accepted(void) {
    dfg_program *p = program_with(true);
    dfg_run_options o = dfg_run_options_default();
    o.target = DFG_TARGET_CUDA;
    o.emulate_gpu = true;
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_runtime_create(p, &o, &rt);
    CHECK(st == DFG_OK, "a batch-invariant cuda plan: status %d, '%s'", (int)st, rt ? dfg_runtime_error(rt) : "");
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_backend")) return DFG_TEST_SKIP;
    test_replay_equals_eager();
    expect_planted("read", "a copy to the host was made inside the capture");
    expect_planted("write", "a copy to the device was made inside the capture");
    expect_planted("alloc", "an allocation was made inside the capture");
    test_one_allocation();
    test_batch_invariant_accepted();
    return dfg_test_finish();
}
