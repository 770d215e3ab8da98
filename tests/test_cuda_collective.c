/* test_cuda_collective.c - the CUDA allreduce, all_gather and rank (ops/cuda/collective.cu) against
 * the CPU kernels (ops/cpu/collective.c) and against the values the ranks' data says they give.
 *
 * World 1 (no communicator: every collective is a copy) runs through the harness
 * (tests/cuda_harness.h: f32 and bf16, schedule seeds, the GPU when there is one). A world of W
 * ranks runs through a fake in-process communicator (ops/comm.h) standing in for rank r of W: the
 * other ranks' data is a seeded hash of (rank, call, element), so what every rank must get is
 * known. The same fake serves the CPU kernel and the emulated CUDA launcher (under emulation device
 * memory is host memory, and the launcher calls the communicator itself). Checked: CPU and CUDA
 * f32 bit-identical and both the expected values, CUDA bf16 within bf16 rounding of them,
 * persistent inputs reduced in place and temporaries into new outputs (the input untouched), a
 * gradient bucket (dfg_allreduce_last) enqueued on the communicator's side stream (forked once,
 * joined by the backend, not the launcher) and nothing else on it, and the refusals: a node built
 * for another world, and a communicator that fails. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/comm.h"
#include "ops/cpu/cpu.h"
#include "ops/cuda/cuda.h"
#include "ops/dfg_ops.h"
#include "ops/dtype.h"

/* ---------------------------------------------------------------- a fake communicator */
typedef struct {
    void *buf;
    int64_t count;
    dfg_dtype dt;
    int op;
} deferred;

typedef struct {
    uint64_t seed;
    int calls; /* allreduce and all_gather calls so far: the call index in the peers' data */
    bool fail; /* every call fails as a peer that did not arrive */
    /* grouped (the CUDA runs): as NCCL, all-reduces made between group begin and end run at the
     * end, so a launcher that enqueued work on their results inside the group computes wrong values */
    bool grouped, open;
    int n_deferred, groups;
    deferred pending[8];
    /* side (the CUDA runs): offers fork/join as NCCL's communicator does; the all-reduces are
     * counted by the stream they were enqueued on (a gradient bucket's must be the side one) */
    bool side;
    char side_stream; /* its address is the side stream's handle */
    int forks, joins, on_side, on_main;
} fake;

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static uint64_t peer_hash(uint64_t seed, int q, int call, int64_t i) {
    return mix(seed ^ mix((uint64_t)q << 56 ^ (uint64_t)call << 48 ^ (uint64_t)i));
}
/* peer q's element i in its call-th allreduce: [-2, 2) on a grid of 2^-22 (exact in f32) */
static float peer_value(uint64_t seed, int q, int call, int64_t i) {
    return (float)((double)(peer_hash(seed, q, call, i) >> 40) / 4194304.0 - 2.0);
}
/* byte j of peer q's send buffer in its call-th all_gather */
static uint8_t peer_byte(uint64_t seed, int q, int call, int64_t j) {
    return (uint8_t)(peer_hash(seed ^ 0x9e3779b97f4a7c15ull, q, call, j) >> 56);
}

static dfg_status reduce_now(dfg_comm *c, void *buf, int64_t count, dfg_dtype dt, int op, char *err, size_t len);

static dfg_status fake_allreduce(dfg_comm *c, void *buf, int64_t count, dfg_dtype dt, int op, void *stream, char *err,
                                 size_t len) {
    fake *f = c->impl;
    if (stream == &f->side_stream) f->on_side++; /* else NULL: the contexts below have no stream */
    else f->on_main++;
    if (f->open && !f->fail) {
        if (f->n_deferred == 8) return snprintf(err, len, "fake group: more than 8 calls"), DFG_ERR_ARG;
        f->pending[f->n_deferred++] = (deferred){buf, count, dt, op};
        return DFG_OK;
    }
    return reduce_now(c, buf, count, dt, op, err, len);
}

static dfg_status fake_group(dfg_comm *c, bool begin, char *err, size_t len) {
    fake *f = c->impl;
    if (begin == f->open) return snprintf(err, len, "fake group: %s twice", begin ? "begin" : "end"), DFG_ERR_STATE;
    f->open = begin;
    if (begin) return f->groups++, DFG_OK;
    dfg_status st = DFG_OK;
    for (int k = 0; k < f->n_deferred && !st; k++)
        st = reduce_now(c, f->pending[k].buf, f->pending[k].count, f->pending[k].dt, f->pending[k].op, err, len);
    f->n_deferred = 0;
    return st;
}

static dfg_status reduce_now(dfg_comm *c, void *buf, int64_t count, dfg_dtype dt, int op, char *err, size_t len) {
    fake *f = c->impl;
    if (f->fail) return snprintf(err, len, "rank %d did not arrive within 1 s", (c->rank + 1) % c->size), DFG_ERR_RUNTIME;
    if ((dt != DFG_F32 && dt != DFG_BF16) || (op != DFG_COLL_SUM && op != DFG_COLL_MIN && op != DFG_COLL_MAX)) {
        snprintf(err, len, "fake allreduce: %s with reduction %d (a communicator takes f32/bf16 sum, min, max)",
                 dfg_dtype_name(dt), op);
        return DFG_ERR_ARG;
    }
    int call = f->calls++;
    for (int64_t i = 0; i < count; i++) { /* own value, then the peers in rank order, in f32 */
        float acc = (float)dfg_load(buf, dt, i);
        for (int q = 0; q < c->size; q++) {
            if (q == c->rank) continue;
            float v = peer_value(f->seed, q, call, i);
            acc = op == DFG_COLL_SUM ? acc + v : op == DFG_COLL_MIN ? fminf(acc, v) : fmaxf(acc, v);
        }
        dfg_store(buf, dt, i, acc);
    }
    return DFG_OK;
}

static dfg_status fake_all_gather(dfg_comm *c, const void *send, void *recv, size_t bytes, void *stream, char *err,
                                  size_t len) {
    (void)stream;
    fake *f = c->impl;
    if (f->fail) return snprintf(err, len, "rank %d did not arrive within 1 s", (c->rank + 1) % c->size), DFG_ERR_RUNTIME;
    int call = f->calls++;
    for (int q = 0; q < c->size; q++) {
        uint8_t *block = (uint8_t *)recv + (size_t)q * bytes;
        if (q == c->rank) memcpy(block, send, bytes);
        else
            for (size_t j = 0; j < bytes; j++) block[j] = peer_byte(f->seed, q, call, (int64_t)j);
    }
    return DFG_OK;
}

static dfg_status fake_broadcast(dfg_comm *c, void *buf, size_t bytes, int root, void *stream, char *err, size_t len) {
    (void)c, (void)buf, (void)bytes, (void)root, (void)stream;
    snprintf(err, len, "fake broadcast: no kernel broadcasts");
    return DFG_ERR_STATE;
}

static void *fake_fork(dfg_comm *c, void *stream, char *err, size_t len) {
    (void)stream, (void)err, (void)len;
    fake *f = c->impl;
    f->forks++;
    return &f->side_stream;
}
static dfg_status fake_join(dfg_comm *c, void *stream, char *err, size_t len) {
    (void)stream, (void)err, (void)len;
    ((fake *)c->impl)->joins++;
    return DFG_OK;
}

static dfg_comm fake_comm(fake *f, int rank, int size) {
    return (dfg_comm){.rank = rank, .size = size, .impl = f, .allreduce = fake_allreduce,
                      .all_gather = fake_all_gather, .broadcast = fake_broadcast,
                      .group = f->grouped ? fake_group : NULL, .fork = f->side ? fake_fork : NULL,
                      .join = f->side ? fake_join : NULL};
}

/* ---------------------------------------------------------------- cases */
typedef struct {
    int op;             /* DFG_OP_ALLREDUCE, DFG_OP_ALL_GATHER or DFG_OP_RANK */
    int n;              /* allreduce: tensors in the bucket (<= 4) */
    dfg_shape shape[4]; /* the inputs' shapes */
    unsigned state;     /* allreduce: bit i set: input i is persistent STATE (in place); else a TEMP */
    dfg_coll_op coll;   /* allreduce's reduction */
    dfg_dtype dt;       /* all_gather: its input's dtype; the others take the build's */
    int world;          /* the world the node is built for */
    bool late;          /* allreduce of STATE only: dfg_allreduce_last (a gradient bucket) */
} coll_case;

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const coll_case *c = user;
    dfg_tensor *y = NULL;
    if (c->op == DFG_OP_RANK) y = dfg_rank(g, c->world);
    else if (c->op == DFG_OP_ALL_GATHER) y = dfg_all_gather(g, dfg_input(g, "x", c->dt, c->shape[0]), c->world);
    else {
        dfg_tensor *xs[4];
        for (int i = 0; i < c->n; i++) {
            char name[16];
            snprintf(name, sizeof(name), "g%d", i);
            xs[i] = c->state >> i & 1
                        ? dfg_state(dfg_graph_program(g), name, dt, c->shape[i], DFG_ROLE_GRAD, dfg_init_zeros())
                        : dfg_neg(g, dfg_input(g, name, dt, c->shape[i])); /* a TEMP */
        }
        if ((c->late ? dfg_allreduce_last : dfg_allreduce_n)(g, xs, c->n, c->coll, c->world)) return NULL;
        y = xs[0];
    }
    return dfg_graph_status(g) || !y ? NULL : y->producer;
}

/* ---------------------------------------------------------------- raw buffers */
typedef struct {
    dfg_program *p;
    dfg_node *n;
    void *in[4], *out[4]; /* out[k] == in[k] where the output is in place */
    void *drawn[4];       /* the inputs' values before the run */
} bufs;

/* The node of c in dtype dt, its inputs fresh random values (from: those of another build,
 * rounded to dt), its other outputs poisoned. */
static bool make(const coll_case *c, dfg_dtype dt, const bufs *from, bufs *b) {
    memset(b, 0, sizeof(*b));
    b->p = dfg_program_new("collective");
    b->n = build(dfg_graph_new(b->p, "g"), dt, (void *)c);
    CHECK(b->n != NULL, "%s: does not build: %s", dfg_op_name(c->op), dfg_program_error(b->p));
    if (!b->n) return false;
    for (int j = 0; j < b->n->n_in; j++) {
        const dfg_tensor *t = b->n->in[j];
        size_t bytes = dfg_tensor_bytes(t);
        b->in[j] = malloc(bytes), b->drawn[j] = malloc(bytes);
        for (int64_t e = 0; e < dfg_tensor_numel(t); e++) {
            double v = from ? dfg_load(from->drawn[j], from->n->in[j]->dtype, e)
                            : t->dtype == DFG_I32 ? (double)(dfg_test_int(1, 1 << 30) * (dfg_test_int(0, 1) ? 1 : -1))
                                                  : dfg_test_uniform(-2.0f, 2.0f);
            dfg_store(b->in[j], t->dtype, e, v);
        }
        memcpy(b->drawn[j], b->in[j], bytes);
    }
    for (int k = 0; k < b->n->n_out; k++) {
        const dfg_tensor *t = b->n->out[k];
        if (k < b->n->n_in && t->storage == b->n->in[k]->storage) b->out[k] = b->in[k];
        else dfg_test_poison(b->out[k] = malloc(dfg_tensor_bytes(t)), dfg_tensor_bytes(t));
    }
    return true;
}

static void unmake(bufs *b) {
    for (int k = 0; b->n && k < b->n->n_out; k++)
        if (k >= b->n->n_in || b->out[k] != b->in[k]) free(b->out[k]);
    for (int j = 0; j < 4; j++) free(b->in[j]), free(b->drawn[j]);
    dfg_program_free(b->p);
}

static dfg_status run_cpu(bufs *b, dfg_comm *comm, char *err, size_t len) {
    dfg_cpu_ctx ctx = {.n_threads = 1, .err = err, .err_len = len, .comm = comm};
    return dfg_cpu_kernels[b->n->op](b->n, b->in, b->out, &ctx);
}

static dfg_status run_cuda(bufs *b, dfg_comm *comm, char *err, size_t len) {
    int flags = 0;
    dfg_cuda_ctx ctx = {.flags = &flags, .sm_count = 132, .err = err, .err_len = len, .comm = comm};
    dfg_status st = dfg_emu_kernels[b->n->op](b->n, b->in, b->out, &ctx);
    CHECK(flags == 0, "%s: the CUDA launcher raised the flag (%d)", dfg_op_name(b->n->op), flags);
    return st;
}

/* ---------------------------------------------------------------- expected values */
/* b's outputs as rank r of W must have them (peers from seed), within atol + rtol |want|. */
static void check_expected(const coll_case *c, const bufs *b, uint64_t seed, int W, int r, double rtol, double atol,
                           const char *label) {
    const dfg_node *n = b->n;
    if (c->op == DFG_OP_RANK) {
        CHECK(*(const int32_t *)b->out[0] == (W > 1 ? r : 0), "%s: rank %d", label, *(const int32_t *)b->out[0]);
        return;
    }
    if (c->op == DFG_OP_ALL_GATHER) { /* block q: rank q's send bytes */
        size_t bytes = dfg_tensor_bytes(n->in[0]);
        uint8_t *want = malloc(bytes);
        for (int q = 0; q < W; q++) {
            for (size_t j = 0; j < bytes; j++) want[j] = q == r ? ((uint8_t *)b->drawn[0])[j] : peer_byte(seed, q, 0, j);
            CHECK(!memcmp((uint8_t *)b->out[0] + q * bytes, want, bytes), "%s: block %d is not rank %d's", label, q, q);
        }
        free(want);
        return;
    }
    for (int k = 0; k < n->n_out; k++) { /* allreduce: tensor k is the communicator's call k */
        const dfg_tensor *t = n->out[k];
        bool in_place = c->state >> k & 1;
        CHECK(in_place == (b->out[k] == b->in[k]), "%s: output %d %s in place", label, k, in_place ? "is not" : "is");
        if (!in_place)
            CHECK(!memcmp(b->in[k], b->drawn[k], dfg_tensor_bytes(t)), "%s: input %d (a TEMP) was written", label, k);
        int64_t bad = -1;
        double want = 0.0, got = 0.0;
        for (int64_t e = 0; e < dfg_tensor_numel(t) && bad < 0; e++) {
            want = dfg_load(b->drawn[k], t->dtype, e);
            for (int q = 0; q < W; q++) {
                double v = q == r ? want : peer_value(seed, q, k, e);
                if (q == r) continue;
                want = c->coll == DFG_COLL_MIN ? fmin(want, v) : c->coll == DFG_COLL_MAX ? fmax(want, v) : want + v;
            }
            if (c->coll == DFG_COLL_MEAN) want /= W;
            got = dfg_load(b->out[k], t->dtype, e);
            if (!(fabs(got - want) <= atol + rtol * fabs(want))) bad = e;
        }
        CHECK(bad < 0, "%s: output %d element %lld: want %.9g, got %.9g", label, k, (long long)bad, want, got);
    }
}

static int expected_calls(const coll_case *c) {
    return c->op == DFG_OP_ALLREDUCE ? c->n : c->op == DFG_OP_ALL_GATHER ? 1 : 0;
}

/* c as rank r of a world of W (W = 1: no communicator): CPU f32, CUDA f32 (bit-identical to the
 * CPU) and, for allreduce, CUDA bf16, each against the expected values. */
static void check_rank(coll_case c, int W, int r) {
    char label[160], s[64];
    snprintf(label, sizeof(label), "%s %s %s%s state 0x%x%s, rank %d of %d", dfg_op_name(c.op),
             c.op == DFG_OP_ALLREDUCE ? (const char *[]){"sum", "mean", "min", "max"}[c.coll] : "",
             dfg_dtype_name(c.dt), dfg_shape_str(c.shape[0], s, sizeof(s)), c.state, c.late ? " (last repeat)" : "",
             r, W);
    c.world = W;
    uint64_t seed = dfg_test_u64();
    fake fc = {.seed = seed}, fg = {.seed = seed, .grouped = true, .side = true},
         fb = {.seed = seed, .grouped = true, .side = true};
    dfg_comm cc = fake_comm(&fc, r, W), cg = fake_comm(&fg, r, W), cb = fake_comm(&fb, r, W);
    bufs cpu, gpu, b16;
    bool bf16 = c.op == DFG_OP_ALLREDUCE;
    if (!make(&c, DFG_F32, NULL, &cpu) || !make(&c, DFG_F32, &cpu, &gpu) || (bf16 && !make(&c, DFG_BF16, &cpu, &b16)))
        return;
    char err[512] = "";
    dfg_status st = run_cpu(&cpu, W > 1 ? &cc : NULL, err, sizeof(err));
    CHECK(st == DFG_OK, "%s: the CPU kernel failed: %s", label, err);
    check_expected(&c, &cpu, seed, W, r, 1e-6, 2e-6, label);
    st = run_cuda(&gpu, W > 1 ? &cg : NULL, err, sizeof(err));
    CHECK(st == DFG_OK, "%s: the CUDA launcher failed: %s", label, err);
    check_expected(&c, &gpu, seed, W, r, 1e-6, 2e-6, label);
    for (int k = 0; k < cpu.n->n_out; k++)
        CHECK(!memcmp(cpu.out[k], gpu.out[k], dfg_tensor_bytes(cpu.n->out[k])), "%s: output %d: CUDA != CPU bits",
              label, k);
    CHECK(fc.calls == (W > 1 ? expected_calls(&c) : 0) && fg.calls == fc.calls,
          "%s: %d communicator calls on the CPU, %d on CUDA", label, fc.calls, fg.calls);
    CHECK(!fg.open && fg.groups == (W > 1 && c.op == DFG_OP_ALLREDUCE), "%s: CUDA made %d groups%s", label, fg.groups,
          fg.open ? ", one left open" : "");
    bool side = c.late && W > 1; /* a gradient bucket: on the side stream, forked once; nothing else is */
    CHECK(fg.forks == side && fg.on_side == (side ? c.n : 0) && fg.joins == 0,
          "%s: CUDA forked %d times, %d all-reduces on the side stream, %d on the main one (the backend joins)", label,
          fg.forks, fg.on_side, fg.on_main);
    if (bf16) {
        st = run_cuda(&b16, W > 1 ? &cb : NULL, err, sizeof(err));
        CHECK(st == DFG_OK, "%s (bf16): the CUDA launcher failed: %s", label, err);
        check_expected(&c, &b16, seed, W, r, 1e-2, 1e-5, label);
        unmake(&b16);
    }
    unmake(&cpu), unmake(&gpu);
}

/* ---------------------------------------------------------------- refusals */
/* A node built for `world` run by a communicator of `size` (1: none), or by one whose peers never
 * arrive (fail): both backends return the status with a message naming the op and the reason,
 * without calling the communicator (refused) or writing the outputs. */
static void check_refused(int op, int world, int size, bool fail) {
    coll_case c = {.op = op, .n = 2, .shape = {DFG_SHAPE(5, 3), DFG_SHAPE(7)}, .dt = DFG_F32, .world = world};
    char want[128], label[128];
    if (fail) snprintf(want, sizeof(want), "rank 1 did not arrive");
    else
        snprintf(want, sizeof(want), "built for %d rank%s, running in %d process%s", world, world == 1 ? "" : "s", size,
                 size == 1 ? "" : "es");
    snprintf(label, sizeof(label), "%s built for %d, %d process%s%s", dfg_op_name(op), world, size,
             size == 1 ? "" : "es", fail ? ", a peer missing" : "");
    for (int backend = 0; backend < 2; backend++) {
        bufs b;
        if (!make(&c, DFG_F32, NULL, &b)) return;
        fake f = {.seed = dfg_test_u64(), .fail = fail};
        dfg_comm comm = fake_comm(&f, 0, size);
        char err[512] = "";
        dfg_status st = (backend ? run_cuda : run_cpu)(&b, size > 1 ? &comm : NULL, err, sizeof(err));
        const char *be = backend ? "CUDA" : "CPU";
        CHECK(st == (fail ? DFG_ERR_RUNTIME : DFG_ERR_STATE), "%s (%s): status %d", label, be, (int)st);
        CHECK(strstr(err, dfg_op_name(op)) == err && strstr(err, want), "%s (%s): message '%s'", label, be, err);
        CHECK(fail || f.calls == 0, "%s (%s): the communicator was called", label, be);
        size_t bytes = dfg_tensor_bytes(b.n->out[0]);
        uint8_t *poison = malloc(bytes);
        dfg_test_poison(poison, bytes);
        CHECK(fail || !memcmp(b.out[0], poison, bytes), "%s (%s): the output was written", label, be);
        free(poison);
        unmake(&b);
    }
}

/* ---------------------------------------------------------------- world 1 through the harness */
static void harness(coll_case c, bool bf16) {
    char label[128], s[64];
    snprintf(label, sizeof(label), "%s %s%s state 0x%x world 1", dfg_op_name(c.op), dfg_dtype_name(c.dt),
             dfg_shape_str(c.shape[0], s, sizeof(s)), c.state);
    c.world = 1;
    cuda_case k = {.label = label, .build = build, .user = &c, .bf16 = bf16};
    cuda_check(&k);
}

int main(void) {
    if (!cuda_test_begin("test_cuda_collective")) return DFG_TEST_SKIP;
    const dfg_shape shapes[] = {DFG_SHAPE(1), DFG_SHAPE(7), DFG_SHAPE(3, 5), DFG_SHAPE(33, 17), DFG_SHAPE(4099),
                                DFG_SHAPE(2, 3, 4)};
    const int n_shapes = sizeof(shapes) / sizeof(shapes[0]);
    /* buckets of 1 to 4 tensors: all TEMPs, all STATE, mixed */
    const struct {
        int n;
        unsigned state;
        bool late;
    } buckets[] = {{1, 0, false}, {1, 1, false}, {3, 0, false}, {3, 7, false}, {4, 5, false}, {4, 0xa, false},
                   {1, 1, true}, {4, 0xf, true}};
    const int n_buckets = sizeof(buckets) / sizeof(buckets[0]);
    const dfg_dtype gather_dt[] = {DFG_F32, DFG_I32, DFG_BF16};
    for (int W = 1; W <= 3; W++)
        for (int r = 0; r < W; r++) {
            for (int coll = DFG_COLL_SUM; coll <= DFG_COLL_MAX; coll++)
                for (int b = 0; b < n_buckets; b++) {
                    coll_case c = {.op = DFG_OP_ALLREDUCE, .n = buckets[b].n, .state = buckets[b].state,
                                   .coll = coll, .dt = DFG_F32, .late = buckets[b].late};
                    for (int i = 0; i < c.n; i++) c.shape[i] = shapes[(b + coll + i) % n_shapes];
                    check_rank(c, W, r);
                    if (W == 1) harness(c, true);
                }
            for (int s = 0; s < n_shapes; s++) {
                coll_case c = {.op = DFG_OP_ALL_GATHER, .shape = {shapes[s]}, .dt = gather_dt[s % 3]};
                check_rank(c, W, r);
                if (W == 1) harness(c, false);
            }
            check_rank((coll_case){.op = DFG_OP_RANK, .dt = DFG_I32}, W, r);
        }
    harness((coll_case){.op = DFG_OP_RANK, .dt = DFG_I32}, false);
    const int ops[] = {DFG_OP_ALLREDUCE, DFG_OP_ALL_GATHER, DFG_OP_RANK};
    for (int i = 0; i < 3; i++) {
        int op = ops[i];
        check_refused(op, 2, 1, false); /* no communicator */
        check_refused(op, 2, 3, false); /* another world */
        check_refused(op, 1, 2, false); /* world 1 given a communicator of 2 */
        if (op != DFG_OP_RANK) check_refused(op, 2, 2, true); /* the peer never arrives */
    }
    return cuda_test_end();
}
