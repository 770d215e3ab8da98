/* test_cuda_state.c - the CUDA assign, accumulate, assign_fill, slice_assign, adamw and
 * clip_grad_norm (ops/cuda/state.cu) against the CPU kernels.
 *
 * The harness (tests/cuda_harness.h) covers f32 and bf16 (adamw's bf16 build mixes the dtypes of
 * parameters and moments). What the harness cannot express runs through raw_check below: integer
 * and f16 tensors, float conversions required bit-exact, pointers off 16-byte alignment, outputs
 * in place over their inputs (clip), nodes with more tensors than one launch's table (> 72), and
 * the values the CPU kernel refuses (a start row out of range, a step below 1, a gradient norm that
 * is not finite), where the CUDA kernel must raise ctx->flags and write what its comment says.
 * slice_assign_at also takes one start a row (pos (B) along axis 1): each row at its own start,
 * and one row out of range raises the flag with nothing written. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "runtime/cuda/emu/simt/dfg_simt_ctl.h"
#include "ops/dfg_ops.h"
#include "ops/dtype.h"

typedef struct {
    int op;
    dfg_shape dst, src;  /* slice_assign: src's shape; else unused */
    dfg_dtype dt;        /* the destination's dtype (0, f32: the harness build's) */
    int src_dt;          /* assign: the source's dtype + 1 (0: the destination's) */
    int axis;
    int64_t start;       /* slice_assign; -1: dynamic, from the pos input */
    int64_t pos;         /* dynamic slice_assign: the pos value (may be out of range); kAnyPos: drawn */
    bool rows;           /* dynamic slice_assign: pos (B) one a row, drawn; pos (if not kAnyPos) the last row's */
    float value;         /* assign_fill; clip: max_norm */
    int n_params;        /* adamw, clip */
    int mix;             /* adamw's bf16 build: 0 all bf16, 1 p bf16 + f32 moments, 2 p f32 + bf16 m + f16 v */
    float wd;            /* adamw weight decay */
    int32_t step;        /* adamw raw: the step (0: drawn in [1, 50]) */
    int lr;              /* adamw: 1 the rate from an f32 scalar input (a schedule's), 2 that rate negative */
    bool persistent;     /* clip: gradients are STATE (outputs in place) */
    bool nan_grad;       /* clip raw: one gradient holds a NaN */
} st_case;

#define kAnyPos INT64_MIN

static dfg_shape param_shape(int i) {
    static const dfg_shape s[] = {DFG_SHAPE(1), DFG_SHAPE(5), DFG_SHAPE(4099), DFG_SHAPE(3, 5),
                                  DFG_SHAPE(4096 + 3), DFG_SHAPE(2, 4096), DFG_SHAPE(33, 7)};
    return s[i % 7];
}

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const st_case *c = user;
    dfg_program *p = dfg_graph_program(g);
    const dfg_dtype d = c->dt ? c->dt : dt, sd = c->src_dt ? (dfg_dtype)(c->src_dt - 1) : d;
    dfg_tensor *y = NULL;
    switch (c->op) {
    case DFG_OP_ASSIGN:
    case DFG_OP_ACCUMULATE: {
        dfg_tensor *dst = dfg_state(p, "dst", d, c->dst, DFG_ROLE_NONE, dfg_init_zeros());
        dfg_tensor *src = dfg_input(g, "src", sd, c->dst);
        y = c->op == DFG_OP_ASSIGN ? dfg_assign(g, dst, src) : dfg_accumulate(g, dst, src);
        break;
    }
    case DFG_OP_ASSIGN_FILL:
        y = dfg_assign_fill(g, dfg_state(p, "dst", d, c->dst, DFG_ROLE_NONE, dfg_init_zeros()), c->value);
        break;
    case DFG_OP_SLICE_ASSIGN: {
        dfg_tensor *dst = dfg_state(p, "dst", d, c->dst, DFG_ROLE_KV_CACHE, dfg_init_zeros());
        dfg_tensor *src = dfg_input(g, "src", d, c->src);
        y = c->start >= 0 ? dfg_slice_assign(g, dst, src, c->axis, c->start)
                          : dfg_slice_assign_at(g, dst, src, c->axis,
                                                dfg_input(g, "pos", DFG_I32, c->rows ? DFG_SHAPE(c->dst.d[0]) : DFG_SCALAR));
        break;
    }
    case DFG_OP_ADAMW: {
        dfg_tensor *ps[200], *gs[200], *ms[200], *vs[200];
        /* the bf16 build mixes dtypes: an f32 master weight with bf16 moments, or the reverse */
        dfg_dtype pd = d, md = d, vd = d;
        if (d == DFG_BF16 && c->mix == 1) md = vd = DFG_F32;
        if (d == DFG_BF16 && c->mix == 2) pd = DFG_F32, vd = DFG_F16;
        for (int i = 0; i < c->n_params; i++) {
            char name[32];
            snprintf(name, sizeof(name), "p%d", i);
            ps[i] = dfg_param(p, name, pd, param_shape(i), dfg_init_zeros());
            snprintf(name, sizeof(name), "g%d", i);
            gs[i] = dfg_input(g, name, d, param_shape(i));
            snprintf(name, sizeof(name), "m%d", i);
            ms[i] = dfg_state(p, name, md, param_shape(i), DFG_ROLE_OPTIM, dfg_init_zeros());
            snprintf(name, sizeof(name), "v%d", i);
            vs[i] = dfg_state(p, name, vd, param_shape(i), DFG_ROLE_OPTIM, dfg_init_zeros());
        }
        dfg_tensor *step = dfg_state(p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, dfg_init_zeros());
        dfg_adamw_config cfg = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = c->wd};
        dfg_tensor *lr = c->lr ? dfg_input(g, "lr", DFG_F32, DFG_SCALAR) : NULL;
        if (lr ? dfg_adamw_lr(g, ps, gs, ms, vs, c->n_params, step, lr, cfg)
               : dfg_adamw(g, ps, gs, ms, vs, c->n_params, step, cfg))
            return NULL;
        return g->nodes[g->n_nodes - 1];
    }
    default: { /* clip */
        dfg_tensor *gs[200];
        for (int i = 0; i < c->n_params; i++) {
            char name[32];
            snprintf(name, sizeof(name), "g%d", i);
            gs[i] = c->persistent ? dfg_state(p, name, d, param_shape(i), DFG_ROLE_GRAD, dfg_init_zeros())
                                  : dfg_neg(g, dfg_input(g, name, d, param_shape(i))); /* a TEMP: new outputs */
        }
        y = dfg_clip_grad_norm(g, gs, c->n_params, c->value);
    }
    }
    return dfg_graph_status(g) || !y ? NULL : y->producer;
}

/* values in an input of the f32 build (harness) or of its own dtype (raw): steps from 1, second
 * moments >= 0, a start row that fits; floats of many magnitudes for the conversions */
static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const st_case *c = user;
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (c->op == DFG_OP_SLICE_ASSIGN && slot == 2) {
            bool given = c->pos != kAnyPos && (!c->rows || i == n - 1);
            v = given ? (double)c->pos : dfg_test_int(0, (int)(c->dst.d[c->axis] - c->src.d[c->axis]));
        } else if (t->dtype == DFG_I32) {
            if (c->op == DFG_OP_ADAMW) v = c->step ? c->step : dfg_test_int(1, 50);
            else v = dfg_test_int(-5, 5) + (dfg_test_int(0, 3) == 0 ? 2147483640.0 : 0.0); /* accumulate saturates */
        } else if (t->dtype == DFG_U8) {
            v = dfg_test_int(0, 255);
        } else if (c->op == DFG_OP_ADAMW && c->lr && slot == 1 + 4 * c->n_params) { /* not the attribute's 1e-2 */
            v = c->lr == 2 ? -1e-3 : dfg_test_uniform(0.0f, 0.05f);
        } else if (c->op == DFG_OP_ADAMW && (slot - 1) % 4 == 3) {
            v = dfg_test_uniform(0.0f, 2.0f);
        } else if (c->op == DFG_OP_ASSIGN && c->src_dt) {
            v = dfg_test_uniform(-1.0f, 1.0f) * ldexp(1.0, dfg_test_int(-30, 20)); /* f16 subnormals to overflow */
        } else {
            v = dfg_test_uniform(-2.0f, 2.0f);
        }
        if (c->nan_grad && slot == 1 && i == n / 2) v = NAN;
        dfg_store(data, t->dtype, i, v);
    }
}

static void run(st_case c, const char *what, bool bf16, double rtol) {
    char label[200], s1[64];
    snprintf(label, sizeof(label), "%s %s dst%s", dfg_op_name(c.op), what, dfg_shape_str(c.dst, s1, sizeof(s1)));
    cuda_case k = {.label = label, .build = build, .user = &c, .fill = fill, .bf16 = bf16, .rtol = rtol};
    cuda_check(&k);
}

/* ---------------------------------------------------------------- raw buffers */
typedef struct {
    int nb;
    const dfg_tensor **storage;
    void **blocks, **data; /* data = block + shift */
} bufs;

static int buf_of(bufs *b, const dfg_tensor *t, size_t shift) {
    for (int i = 0; i < b->nb; i++)
        if (b->storage[i] == t->storage) return i;
    size_t bytes = dfg_tensor_bytes(t->storage);
    b->storage[b->nb] = t->storage;
    b->blocks[b->nb] = aligned_alloc(16, (bytes + shift + 16) / 16 * 16);
    b->data[b->nb] = (char *)b->blocks[b->nb] + shift;
    return b->nb++;
}

static bool same_value(const dfg_tensor *t, const void *a, const void *b, int64_t i, double rtol) {
    if (!dfg_is_float(t->dtype) || rtol == 0.0) {
        size_t e = dfg_dtype_size(t->dtype);
        if (!memcmp((const char *)a + i * e, (const char *)b + i * e, e)) return true;
        if (!dfg_is_float(t->dtype)) return false;
    }
    double x = dfg_load(a, t->dtype, i), y = dfg_load(b, t->dtype, i);
    if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
    return fabs(x - y) <= 1e-6 + rtol * fabs(x);
}

/* The f32-or-not node of c on the CPU and under the emulator (schedule seeds 0 and another), every
 * pointer `shift` bytes past a 16-byte boundary, outputs over their inputs where the node says so.
 * flag_before: the flag is already up when the kernel starts. expect_flag: the CPU refuses the
 * inputs; the CUDA kernel must raise the flag and leave every output not in `written` as it was. */
static void raw_check(st_case c, const char *what, size_t shift, double rtol, bool flag_before, bool expect_flag,
                      unsigned written) {
    char label[200], s1[64];
    snprintf(label, sizeof(label), "%s %s dst%s (raw, +%zu bytes)", dfg_op_name(c.op), what,
             dfg_shape_str(c.dst, s1, sizeof(s1)), shift);
    dfg_program *p = dfg_program_new("raw");
    dfg_node *n = build(dfg_graph_new(p, "g"), c.dt ? c.dt : DFG_F32, &c);
    CHECK(n != NULL, "%s: does not build: %s", label, dfg_program_error(p));
    if (!n) {
        dfg_program_free(p);
        return;
    }
    const int nt = n->n_in + n->n_out;
    bufs run[3]; /* 0: the CPU's, 1 and 2: the emulator's under two schedules */
    void **before = calloc((size_t)nt, sizeof(void *));
    void **in = calloc((size_t)nt, sizeof(void *)), **out = in + n->n_in;
    for (int r = 0; r < 3; r++) {
        run[r].nb = 0;
        run[r].storage = calloc((size_t)nt, sizeof(void *));
        run[r].blocks = calloc((size_t)nt, sizeof(void *));
        run[r].data = calloc((size_t)nt, sizeof(void *));
        for (int j = 0; j < n->n_in; j++) buf_of(&run[r], n->in[j], r ? shift : 0);
        for (int k = 0; k < n->n_out; k++) buf_of(&run[r], n->out[k], r ? shift : 0);
    }
    for (int i = 0; i < run[0].nb; i++) { /* inputs drawn once; outputs of their own poisoned */
        const dfg_tensor *t = run[0].storage[i];
        int slot = -1;
        for (int j = 0; j < n->n_in && slot < 0; j++)
            if (n->in[j]->storage == t) slot = j;
        size_t bytes = dfg_tensor_bytes(t);
        if (slot >= 0) fill(slot, t, run[0].data[i], dfg_tensor_numel(t), &c);
        else dfg_test_poison(run[0].data[i], bytes);
        for (int r = 1; r < 3; r++) memcpy(run[r].data[i], run[0].data[i], bytes);
        before[i] = malloc(bytes ? bytes : 1);
        memcpy(before[i], run[0].data[i], bytes);
    }
    char err[512] = "";
    if (!expect_flag) {
        for (int j = 0; j < n->n_in; j++) in[j] = run[0].data[buf_of(&run[0], n->in[j], 0)];
        for (int k = 0; k < n->n_out; k++) out[k] = run[0].data[buf_of(&run[0], n->out[k], 0)];
        cuda_run_cpu(label, n, in, out);
    }
    for (int r = 1; r < 3; r++) {
        for (int j = 0; j < n->n_in; j++) in[j] = run[r].data[buf_of(&run[r], n->in[j], shift)];
        for (int k = 0; k < n->n_out; k++) out[k] = run[r].data[buf_of(&run[r], n->out[k], shift)];
        int flags = flag_before ? 1 : 0;
        dfg_cuda_ctx gc = {.flags = &flags, .sm_count = 132, .err = err, .err_len = sizeof(err)};
        gc.scratch_bytes = dfg_emu_scratch_bytes(n);
        gc.scratch = gc.scratch_bytes ? malloc(gc.scratch_bytes) : NULL;
        if (gc.scratch) dfg_test_poison(gc.scratch, gc.scratch_bytes);
        dfg_simt_set_seed(r == 1 ? 0 : dfg_test_u64() | 1);
        dfg_status st = dfg_emu_kernels[n->op] ? dfg_emu_kernels[n->op](n, in, out, &gc) : DFG_ERR_UNSUPPORTED;
        dfg_simt_set_seed(0);
        free(gc.scratch);
        CHECK(st == DFG_OK, "%s: the CUDA kernel failed: %s", label, err);
        CHECK((flags != 0) == (expect_flag || flag_before), "%s: flag %d", label, flags);
    }
    /* outputs: the CPU's (or, refused, their values before), and one schedule's bits as the other's */
    for (int k = 0; k < n->n_out; k++) {
        const dfg_tensor *t = n->out[k];
        int b = buf_of(&run[0], t, 0);
        const void *want = expect_flag || flag_before ? before[b] : run[0].data[b];
        if (expect_flag && (written >> k & 1)) want = before[buf_of(&run[0], n->in[k - 1], 0)]; /* clip: unscaled */
        if (expect_flag && n->op == DFG_OP_CLIP_GRAD_NORM && k == 0) { /* the norm, written for the message */
            CHECK(isnan(*(const float *)run[1].data[b]), "%s: the norm is %g", label, *(const float *)run[1].data[b]);
            continue;
        }
        int64_t cnt = dfg_tensor_numel(t), bad = -1;
        for (int64_t i = 0; i < cnt && bad < 0; i++)
            if (!same_value(t, want, run[1].data[b], i, rtol)) bad = i;
        CHECK(bad < 0, "%s: output %d '%s' element %lld: want %.9g, CUDA %.9g", label, k, t->name, (long long)bad,
              bad < 0 ? 0.0 : dfg_load(want, t->dtype, bad), bad < 0 ? 0.0 : dfg_load(run[1].data[b], t->dtype, bad));
        CHECK(!memcmp(run[1].data[b], run[2].data[b], dfg_tensor_bytes(t)), "%s: output %d differs between schedules",
              label, k);
    }
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < run[r].nb; i++) free(run[r].blocks[i]);
        free(run[r].storage), free(run[r].blocks), free(run[r].data);
    }
    for (int i = 0; i < run[0].nb; i++) free(before[i]);
    free(before), free(in);
    dfg_program_free(p);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_state")) return DFG_TEST_SKIP;
    /* ---- harness: f32 and bf16 */
    const dfg_shape sizes[] = {DFG_SHAPE(1), DFG_SHAPE(7), DFG_SHAPE(3, 5), DFG_SHAPE(33, 17), DFG_SHAPE(1024),
                               DFG_SHAPE(4099)};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        run((st_case){.op = DFG_OP_ASSIGN, .dst = sizes[i]}, "", true, 0);
        run((st_case){.op = DFG_OP_ACCUMULATE, .dst = sizes[i]}, "", true, 0);
        run((st_case){.op = DFG_OP_ASSIGN_FILL, .dst = sizes[i], .value = 7.25f}, "7.25", true, 0);
        run((st_case){.op = DFG_OP_ASSIGN_FILL, .dst = sizes[i], .value = -1e-3f}, "-1e-3", true, 0);
    }
    /* f32 into a bf16 destination (the bf16 build converts) */
    run((st_case){.op = DFG_OP_ASSIGN, .dst = DFG_SHAPE(9, 100), .src_dt = DFG_F32 + 1}, "from f32", true, 0);
    const struct {
        dfg_shape dst, src;
        int axis;
        int64_t start;
    } sl[] = {{DFG_SHAPE(4, 10, 6), DFG_SHAPE(4, 3, 6), 1, 2},  {DFG_SHAPE(4, 10, 6), DFG_SHAPE(4, 3, 6), 1, 7},
              {DFG_SHAPE(5, 3), DFG_SHAPE(2, 3), 0, 0},          {DFG_SHAPE(3, 9), DFG_SHAPE(3, 4), 1, 5},
              {DFG_SHAPE(2, 3, 20, 64), DFG_SHAPE(2, 3, 1, 64), 2, 11}, {DFG_SHAPE(7), DFG_SHAPE(7), 0, 0},
              {DFG_SHAPE(4, 10, 6), DFG_SHAPE(4, 3, 6), 1, -1}, {DFG_SHAPE(2, 3, 20, 64), DFG_SHAPE(2, 3, 4, 64), 2, -1},
              {DFG_SHAPE(3, 9), DFG_SHAPE(3, 1), 1, -1}};
    for (size_t i = 0; i < sizeof(sl) / sizeof(sl[0]); i++)
        run((st_case){.op = DFG_OP_SLICE_ASSIGN, .dst = sl[i].dst, .src = sl[i].src, .axis = sl[i].axis,
                      .start = sl[i].start, .pos = kAnyPos},
            sl[i].start < 0 ? "dynamic" : "static", true, 0);
    /* one start a row: rows of one element, of 16-byte words, a single row, a wide row */
    const struct {
        dfg_shape dst, src;
    } sr[] = {{DFG_SHAPE(5, 10, 6), DFG_SHAPE(5, 3, 6)}, {DFG_SHAPE(3, 9), DFG_SHAPE(3, 1)},
              {DFG_SHAPE(4, 20, 2, 64), DFG_SHAPE(4, 1, 2, 64)}, {DFG_SHAPE(1, 7, 8), DFG_SHAPE(1, 2, 8)},
              {DFG_SHAPE(300, 12, 4), DFG_SHAPE(300, 1, 4)}};
    for (size_t i = 0; i < sizeof(sr) / sizeof(sr[0]); i++)
        run((st_case){.op = DFG_OP_SLICE_ASSIGN, .dst = sr[i].dst, .src = sr[i].src, .axis = 1, .start = -1,
                      .pos = kAnyPos, .rows = true},
            "a start a row", true, 0);
    for (int np = 1; np <= 7; np += 3)
        for (int mix = 0; mix < 3; mix++) {
            char what[64];
            snprintf(what, sizeof(what), "%d params, bf16 mix %d", np, mix);
            run((st_case){.op = DFG_OP_ADAMW, .n_params = np, .mix = mix, .wd = mix ? 0.1f : 0.0f}, what, true, 0);
        }
    for (int mix = 0; mix < 3; mix++) /* a scheduled rate, with weight decay: 1 - lr wd from it */
        run((st_case){.op = DFG_OP_ADAMW, .n_params = 4, .mix = mix, .wd = 0.1f, .lr = 1}, "lr input", true, 0);
    for (int np = 1; np <= 7; np += 2) {
        run((st_case){.op = DFG_OP_CLIP_GRAD_NORM, .n_params = np, .value = 0.5f}, "clipping", true, 0);
        run((st_case){.op = DFG_OP_CLIP_GRAD_NORM, .n_params = np, .value = 1e6f}, "not clipping", true, 0);
    }
    /* ---- raw: other dtypes, exact conversions, alignment, aliasing, many tensors, refusals */
    const dfg_dtype fl[] = {DFG_F32, DFG_BF16, DFG_F16};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            if (a != b)
                for (size_t s = 0; s < 2; s++)
                    raw_check((st_case){.op = DFG_OP_ASSIGN, .dst = s ? DFG_SHAPE(1024) : DFG_SHAPE(3, 5),
                                        .dt = fl[a], .src_dt = fl[b] + 1},
                              dfg_dtype_name(fl[b]), s ? 4 : 0, 0, false, false, 0);
    const dfg_dtype any[] = {DFG_I32, DFG_U8, DFG_F16, DFG_F32};
    const dfg_shape odd[] = {DFG_SHAPE(7), DFG_SHAPE(33), DFG_SHAPE(64), DFG_SHAPE(3, 1000)};
    for (int a = 0; a < 4; a++)
        for (int s = 0; s < 4; s++) {
            raw_check((st_case){.op = DFG_OP_ASSIGN, .dst = odd[s], .dt = any[a]}, dfg_dtype_name(any[a]),
                      (size_t)(s & 1), 0, false, false, 0);
            if (any[a] != DFG_U8)
                raw_check((st_case){.op = DFG_OP_ACCUMULATE, .dst = odd[s], .dt = any[a]}, dfg_dtype_name(any[a]),
                          s == 2 ? 4 : 0, 0, false, false, 0);
        }
    const float fills[] = {7.9f, -3.5f, 1e10f, -1e10f, 300.0f, NAN, 70000.0f, 1.0f / 3.0f};
    for (int a = 0; a < 4; a++)
        for (size_t v = 0; v < sizeof(fills) / sizeof(fills[0]); v++)
            raw_check((st_case){.op = DFG_OP_ASSIGN_FILL, .dst = odd[v % 4], .dt = any[a], .value = fills[v]},
                      dfg_dtype_name(any[a]), v % 3 == 1 ? dfg_dtype_size(any[a]) : 0, 0, false, false, 0);
    raw_check((st_case){.op = DFG_OP_ASSIGN_FILL, .dst = DFG_SHAPE(100), .dt = DFG_BF16, .value = 1.0f / 3.0f}, "bf16",
              0, 0, false, false, 0);
    /* slice_assign of other dtypes and misaligned; a dynamic start out of range writes nothing */
    for (int a = 0; a < 4; a++) {
        raw_check((st_case){.op = DFG_OP_SLICE_ASSIGN, .dst = DFG_SHAPE(3, 9, 5), .src = DFG_SHAPE(3, 2, 5),
                            .dt = any[a], .axis = 1, .start = 4},
                  dfg_dtype_name(any[a]), 2, 0, false, false, 0);
        raw_check((st_case){.op = DFG_OP_SLICE_ASSIGN, .dst = DFG_SHAPE(2, 8, 8), .src = DFG_SHAPE(2, 3, 8),
                            .dt = any[a], .axis = 1, .start = -1, .pos = 5},
                  dfg_dtype_name(any[a]), 0, 0, false, false, 0);
    }
    /* a start a row: other dtypes, misaligned by 4 bytes (the i32 pos stays an i32's alignment, as
     * the arena gives it: 2 made its loads misaligned, which UBSan refuses) */
    for (int a = 0; a < 4; a++)
        raw_check((st_case){.op = DFG_OP_SLICE_ASSIGN, .dst = DFG_SHAPE(3, 8, 5), .src = DFG_SHAPE(3, 2, 5),
                            .dt = any[a], .axis = 1, .start = -1, .pos = kAnyPos, .rows = true},
                  dfg_dtype_name(any[a]), a & 1 ? 4 : 0, 0, false, false, 0);
    const int64_t bad_pos[] = {6, -1, 100};
    for (int i = 0; i < 3; i++) {
        raw_check((st_case){.op = DFG_OP_SLICE_ASSIGN, .dst = DFG_SHAPE(2, 8, 8), .src = DFG_SHAPE(2, 3, 8),
                            .dt = DFG_F32, .axis = 1, .start = -1, .pos = bad_pos[i]},
                  "pos out of range", 0, 0, false, true, 0);
        /* the last row's start out of range, the others in range: nothing written, every row's
         * (more rows than a block's threads: the check spans the whole pos) */
        raw_check((st_case){.op = DFG_OP_SLICE_ASSIGN, .dst = DFG_SHAPE(300, 8, 4), .src = DFG_SHAPE(300, 3, 4),
                            .dt = DFG_F32, .axis = 1, .start = -1, .pos = bad_pos[i], .rows = true},
                  "a row's pos out of range", 0, 0, false, true, 0);
    }
    /* adamw: more parameters than one launch's table, misaligned; step 0; a flag already up */
    raw_check((st_case){.op = DFG_OP_ADAMW, .n_params = 150, .dt = DFG_F32, .wd = 0.1f}, "150 params", 0, 1e-5, false,
              false, 0);
    raw_check((st_case){.op = DFG_OP_ADAMW, .n_params = 7, .dt = DFG_F32, .wd = 0.1f}, "7 params", 4, 1e-5, false,
              false, 0);
    raw_check((st_case){.op = DFG_OP_ADAMW, .n_params = 4, .dt = DFG_F32, .step = -3}, "step -3", 0, 0, false, true, 0);
    raw_check((st_case){.op = DFG_OP_ADAMW, .n_params = 4, .dt = DFG_F32, .step = 5}, "flag up", 0, 0, true, false, 0);
    /* a rate from an input: many tensors, misaligned; a negative one raises the flag, nothing written */
    raw_check((st_case){.op = DFG_OP_ADAMW, .n_params = 150, .dt = DFG_F32, .wd = 0.1f, .lr = 1}, "150 params, lr input",
              4, 1e-5, false, false, 0);
    raw_check((st_case){.op = DFG_OP_ADAMW, .n_params = 4, .dt = DFG_F32, .wd = 0.1f, .lr = 2}, "lr -1e-3", 0, 0, false,
              true, 0);
    /* clip: in place, many gradients (several launches), misaligned; a NaN: the flag, g unscaled */
    raw_check((st_case){.op = DFG_OP_CLIP_GRAD_NORM, .n_params = 5, .dt = DFG_F32, .value = 0.5f, .persistent = true},
              "in place", 0, 1e-5, false, false, 0);
    raw_check((st_case){.op = DFG_OP_CLIP_GRAD_NORM, .n_params = 100, .dt = DFG_F32, .value = 0.5f, .persistent = true},
              "100 in place", 4, 1e-5, false, false, 0);
    raw_check((st_case){.op = DFG_OP_CLIP_GRAD_NORM, .n_params = 3, .dt = DFG_F32, .value = 0.5f, .persistent = true,
                        .nan_grad = true},
              "NaN", 0, 0, false, true, 0xeu);
    return cuda_test_end();
}
