/* test_errors.c - the error model (DESIGN.md section 3): a bad call never crashes or aborts; it
 * sets a sticky error whose message names the op, the node, every input's name, dtype and shape
 * and the user's debug names; later builder calls return a poison tensor and add nothing; the
 * program and the runtime report the first error. Runs under ASan+UBSan in CI, so every case
 * here is also a memory-safety check of the failure path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_runtime.h"
#include "ir.h" /* node and tensor counts: proof that a refused call added nothing */
#include "ops/op.h" /* dfg_node_add: a node with more inputs than its op takes, as a plan file could hold */
#include "testutil.h"

static bool contains(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

/* Checks that graph g failed with status st and that its message holds every needle. */
#define EXPECT_FAIL(g, st, ...)                                                                           \
    do {                                                                                                  \
        const char *needles_[] = {__VA_ARGS__};                                                           \
        CHECK(dfg_graph_status(g) == (st), "status %s, want %s (%s)", dfg_status_name(dfg_graph_status(g)), \
              dfg_status_name(st), dfg_graph_error(g));                                                    \
        for (size_t i_ = 0; i_ < sizeof(needles_) / sizeof(needles_[0]); i_++)                           \
            CHECK(contains(dfg_graph_error(g), needles_[i_]), "message lacks \"%s\": %s", needles_[i_],    \
                  dfg_graph_error(g));                                                                     \
    } while (0)

static bool is_poison(const dfg_tensor *t) { return t && !strcmp(dfg_tensor_name(t), "<poison>"); }

/* A float scalar: the sum of every element (what a loss is). */
static dfg_tensor *total(dfg_graph *g, dfg_tensor *x) { return dfg_sum(g, dfg_reshape(g, x, DFG_SHAPE(-1)), 0); }

/* ---------------------------------------------------------------- the message of a shape error */
static void test_shape_message(void) {
    dfg_program *p = dfg_program_new("errors");
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *w = dfg_param(p, "h.0.w_proj", DFG_F32, DFG_SHAPE(64, 16), dfg_init_normal(0, 0.02f));
    dfg_tensor *emb = dfg_input(g, "tok_emb", DFG_F32, DFG_SHAPE(8, 48));
    dfg_tensor *x = dfg_name(dfg_scale(g, emb, 2.0f), "x_norm");
    CHECK(!strcmp(dfg_tensor_name(x), "x_norm"), "dfg_name sets the debug name");
    dfg_tensor *y = dfg_matmul(g, x, w, false, false); /* (8,48) @ (64,16): inner dims 48 vs 64 */
    CHECK(is_poison(y), "a failed builder returns the poison tensor, got '%s'", dfg_tensor_name(y));
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "matmul 'matmul#1' in graph 'train'", "inner dims differ",
                "#0 'x_norm' f32 (8,48)", "#1 'h.0.w_proj' f32 (64,16)");
    char first[1024];
    snprintf(first, sizeof(first), "%s", dfg_graph_error(g));

    /* sticky: nothing is added, every later call returns poison or the first status */
    int nodes = g->n_nodes, tensors = p->n_tensors;
    CHECK(is_poison(dfg_add(g, x, x)), "add after the error returns poison");
    CHECK(is_poison(dfg_reshape(g, x, DFG_SHAPE(5, 5))), "a call that would fail differently returns poison too");
    CHECK(is_poison(dfg_input(g, "late_input", DFG_F32, DFG_SHAPE(2))), "dfg_input returns poison");
    CHECK(dfg_find(p, "late_input") == NULL, "and creates no tensor");
    CHECK(is_poison(dfg_output(g, x, "late_output")), "dfg_output returns poison");
    CHECK(!strcmp(dfg_tensor_name(x), "x_norm") && dfg_find(p, "late_output") == NULL, "and renames nothing");
    CHECK(dfg_metric(g, "loss", x) == DFG_ERR_SHAPE && dfg_find(p, "metric.loss") == NULL,
          "dfg_metric returns the first status and creates no metric");
    dfg_tensor *grads[1] = {NULL};
    CHECK(dfg_backward(g, x, &w, 1, grads) == DFG_ERR_SHAPE && grads[0] == NULL, "dfg_backward does nothing");
    dfg_tensor *gl[1] = {x};
    CHECK(is_poison(dfg_clip_grad_norm(g, gl, 1, 1.0f)) && gl[0] == x, "clip_grad_norm leaves grads alone");
    CHECK(g->n_nodes == nodes && p->n_tensors == tensors, "node count %d -> %d, tensor count %d -> %d", nodes,
          g->n_nodes, tensors, p->n_tensors);
    CHECK(!strcmp(dfg_graph_error(g), first), "the message stays the first one: %s", dfg_graph_error(g));
    CHECK(dfg_graph_status(g) == DFG_ERR_SHAPE, "and so does the status");
    CHECK(dfg_program_status(p) == DFG_ERR_SHAPE && !strcmp(dfg_program_error(p), first),
          "dfg_program_error reports the graph's first error: %s", dfg_program_error(p));

    /* the poison carried into another graph fails there, naming where it came from */
    dfg_graph *g2 = dfg_graph_new(p, "eval");
    CHECK(is_poison(dfg_neg(g2, y)), "poison in, poison out");
    EXPECT_FAIL(g2, DFG_ERR_STATE, "neg", "graph 'train'", "inner dims differ");
    CHECK(!strcmp(dfg_program_error(p), first), "the program keeps reporting the first error");

    /* an errored program cannot run */
    dfg_stage_graph(p, g, 1);
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_runtime_create(p, NULL, &rt);
    CHECK(st == DFG_ERR_STATE && rt && contains(dfg_runtime_error(rt), "inner dims differ"),
          "runtime_create on an errored program: %s / %s", dfg_status_name(st), dfg_runtime_error(rt));
    CHECK(dfg_runtime_step(rt) != DFG_OK, "and the half-made runtime refuses to step");
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* More mismatches, each naming the op and the inputs' names, dtypes and shapes. */
static void test_more_mismatches(void) {
    dfg_program *p = dfg_program_new("mismatch");
    dfg_tensor *a = dfg_param(p, "a", DFG_F32, DFG_SHAPE(2, 3), dfg_init_zeros());
    dfg_tensor *b = dfg_param(p, "b", DFG_F32, DFG_SHAPE(4), dfg_init_zeros());
    dfg_tensor *i = dfg_param(p, "i", DFG_I32, DFG_SHAPE(2, 3), dfg_init_zeros());
    dfg_tensor *qkv = dfg_param(p, "qkv", DFG_F32, DFG_SHAPE(1, 4, 30), dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "g1");
    dfg_add(g, a, b);
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "add 'add#0'", "do not broadcast", "'a' f32 (2,3)", "'b' f32 (4)");
    g = dfg_graph_new(p, "g2");
    dfg_mul(g, a, i);
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "mul", "dtypes differ", "'a' f32 (2,3)", "'i' i32 (2,3)");
    g = dfg_graph_new(p, "g3");
    dfg_attention(g, qkv, 3); /* C = 10 does not split into 3 heads */
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "attention", "C=10 does not split into 3 heads", "'qkv' f32 (1,4,30)");
    g = dfg_graph_new(p, "g4");
    dfg_layernorm(g, a, b, b, 1e-5f);
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "layernorm", "weight and bias must be (3)", "'b' f32 (4)");
    g = dfg_graph_new(p, "g5");
    dfg_embed(g, a, a); /* ids must be i32 */
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "embed", "ids must be i32");
    /* sample's optional row0 (dfg_sample_rows): an i32 scalar, rank 0 or one element */
    dfg_tensor *rng = dfg_state(p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros());
    dfg_tensor *f0 = dfg_param(p, "f0", DFG_F32, DFG_SCALAR, dfg_init_zeros());
    dfg_tensor *r0 = dfg_param(p, "r0", DFG_I32, DFG_SCALAR, dfg_init_zeros());
    dfg_tensor *r1 = dfg_param(p, "r1", DFG_I32, DFG_SHAPE(1, 1), dfg_init_zeros());
    g = dfg_graph_new(p, "g6");
    CHECK(is_poison(dfg_sample_rows(g, a, rng, i, 1.0f, 0)), "sample with a (2,3) row0 is poison");
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "sample 'sample#0' in graph 'g6'", "row0 'i' must be an i32 scalar", "got i32 (2,3)",
                "#0 'a' f32 (2,3)", "#1 'rng' i32 (4)", "#2 'i' i32 (2,3)");
    g = dfg_graph_new(p, "g7");
    dfg_sample_rows(g, a, rng, f0, 1.0f, 0); /* a scalar, but f32 */
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "sample", "row0 'f0' must be an i32 scalar", "got f32 ()", "#2 'f0' f32 ()");
    g = dfg_graph_new(p, "g8");
    dfg_sample_rows(g, a, rng, b, 1.0f, 0);
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "sample", "row0 'b' must be an i32 scalar", "got f32 (4)");
    /* controls: rank 0 and (1,1) build, with 3 inputs; NULL is dfg_sample's 2 */
    g = dfg_graph_new(p, "g9");
    dfg_tensor *t0 = dfg_sample_rows(g, a, rng, r0, 1.0f, 0), *t1 = dfg_sample_rows(g, a, rng, r1, 0.5f, 3),
               *t2 = dfg_sample_rows(g, a, rng, NULL, 1.0f, 0);
    CHECK(dfg_graph_status(g) == DFG_OK, "sample with an i32 row0 of rank 0 or (1,1) builds: %s", dfg_graph_error(g));
    CHECK(!is_poison(t0) && !is_poison(t1) && !is_poison(t2) && t0->producer->n_in == 3 && t1->producer->n_in == 3 &&
              t2->producer->n_in == 2,
          "row0 adds a third input, NULL none");
    /* 1 or 4 inputs (what a damaged plan file could ask for: its loader builds through dfg_node_add) */
    g = dfg_graph_new(p, "g10");
    dfg_attrs sa = {.sample = {1.0f, 0}};
    CHECK(dfg_node_add(g, DFG_OP_SAMPLE, (dfg_tensor *[]){a, rng, r0, r0}, 4, &sa, 2) == NULL, "sample with 4 inputs");
    EXPECT_FAIL(g, DFG_ERR_ARG, "sample", "takes logits and rng, 3 inputs with row0 or 5 with the history; got 4");
    g = dfg_graph_new(p, "g11");
    CHECK(dfg_node_add(g, DFG_OP_SAMPLE, (dfg_tensor *[]){a}, 1, &sa, 2) == NULL, "sample with 1 input");
    EXPECT_FAIL(g, DFG_ERR_ARG, "sample", "got 1");
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- NULL everywhere */
static void test_null(void) {
    dfg_program *p = dfg_program_new("null");
    dfg_tensor *a = dfg_param(p, "a", DFG_F32, DFG_SHAPE(2, 3), dfg_init_zeros());
    dfg_tensor *rng = dfg_state(p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros());
    dfg_graph *g;
    g = dfg_graph_new(p, "n1");
    CHECK(is_poison(dfg_add(g, NULL, a)), "add(NULL, a) is poison");
    EXPECT_FAIL(g, DFG_ERR_ARG, "add: input #0 is NULL");
    g = dfg_graph_new(p, "n2");
    dfg_matmul(g, a, NULL, false, true);
    EXPECT_FAIL(g, DFG_ERR_ARG, "matmul: input #1 is NULL");
    g = dfg_graph_new(p, "n3");
    dfg_layernorm(g, a, NULL, NULL, 1e-5f);
    EXPECT_FAIL(g, DFG_ERR_ARG, "layernorm: input #1 is NULL");
    g = dfg_graph_new(p, "n4");
    dfg_sample(g, a, NULL, 1.0f, 0);
    EXPECT_FAIL(g, DFG_ERR_ARG, "sample: input #1 is NULL");
    g = dfg_graph_new(p, "n5");
    dfg_tensor *parts[3] = {a, NULL, a};
    dfg_concat(g, parts, 3, 0);
    EXPECT_FAIL(g, DFG_ERR_ARG, "concat: input #1 is NULL");
    g = dfg_graph_new(p, "n6");
    dfg_concat(g, NULL, 0, 0);
    EXPECT_FAIL(g, DFG_ERR_ARG, "concat: needs at least one input");
    g = dfg_graph_new(p, "n7");
    dfg_permute(g, a, NULL);
    EXPECT_FAIL(g, DFG_ERR_ARG, "perm is NULL");
    g = dfg_graph_new(p, "n8");
    dfg_slice_assign_at(g, a, a, 0, NULL);
    EXPECT_FAIL(g, DFG_ERR_ARG, "pos is NULL");
    g = dfg_graph_new(p, "n9");
    dfg_adamw(g, &a, NULL, &a, &a, 1, NULL, (dfg_adamw_config){1e-3f, 0.9f, 0.999f, 1e-8f, 0});
    EXPECT_FAIL(g, DFG_ERR_ARG, "adamw");
    g = dfg_graph_new(p, "n10");
    dfg_adamw(g, &a, &a, &a, &a, 1, NULL, (dfg_adamw_config){1e-3f, 0.9f, 0.999f, 1e-8f, 0});
    EXPECT_FAIL(g, DFG_ERR_ARG, "adamw: input #0 is NULL");
    g = dfg_graph_new(p, "n11");
    dfg_clip_grad_norm(g, NULL, 1, 1.0f);
    EXPECT_FAIL(g, DFG_ERR_ARG, "clip_grad_norm");
    g = dfg_graph_new(p, "n12");
    dfg_tensor *grads[1];
    CHECK(dfg_backward(g, NULL, &a, 1, grads) == DFG_ERR_ARG, "backward of a NULL loss");
    EXPECT_FAIL(g, DFG_ERR_ARG, "the loss must be a float scalar", "NULL");
    g = dfg_graph_new(p, "n13");
    dfg_tensor *loss = total(g, a);
    CHECK(dfg_backward(g, loss, NULL, 1, grads) == DFG_ERR_ARG, "backward with no wrt");
    g = dfg_graph_new(p, "n14");
    dfg_tensor *wrt_null[1] = {NULL};
    CHECK(dfg_backward(g, total(g, a), wrt_null, 1, grads) == DFG_ERR_ARG, "backward with wrt[0] NULL");
    EXPECT_FAIL(g, DFG_ERR_ARG, "wrt[0] is NULL");
    g = dfg_graph_new(p, "n15");
    CHECK(is_poison(dfg_output(g, NULL, "out")), "output of NULL");
    EXPECT_FAIL(g, DFG_ERR_ARG, "output 'out'");
    g = dfg_graph_new(p, "n16");
    dfg_sample(g, a, rng, 1.0f, 0); /* not NULL, but a (2,3) f32 is fine as logits: a control */
    CHECK(dfg_graph_status(g) == DFG_OK, "sample of (2,3) logits builds: %s", dfg_graph_error(g));

    /* a NULL graph or program: NULL or an error status back, never a crash */
    CHECK(dfg_add(NULL, a, a) == NULL && dfg_matmul(NULL, a, a, 0, 0) == NULL && dfg_fill(NULL, DFG_F32, DFG_SHAPE(1), 0) == NULL,
          "builders on a NULL graph return NULL");
    CHECK(dfg_permute(NULL, NULL, NULL) == NULL && dfg_transpose(NULL, a, 0, 1) == NULL &&
              dfg_concat(NULL, NULL, 0, 0) == NULL && dfg_clip_grad_norm(NULL, NULL, 0, 1) == NULL,
          "shape builders on a NULL graph return NULL");
    CHECK(dfg_backward(NULL, a, &a, 1, grads) == DFG_ERR_ARG && dfg_adamw(NULL, NULL, NULL, NULL, NULL, 0, NULL,
                                                                       (dfg_adamw_config){0}) == DFG_ERR_ARG,
          "NULL graph: DFG_ERR_ARG");
    CHECK(dfg_graph_status(NULL) == DFG_ERR_ARG && dfg_graph_error(NULL) != NULL, "graph queries on NULL");
    CHECK(dfg_param(NULL, "x", DFG_F32, DFG_SHAPE(1), dfg_init_zeros()) == NULL && dfg_graph_new(NULL, "g") == NULL,
          "program builders on NULL");
    CHECK(dfg_program_status(NULL) == DFG_ERR_ARG && dfg_program_error(NULL) != NULL, "program queries on NULL");
    CHECK(dfg_name(NULL, "x") == NULL && !strcmp(dfg_tensor_name(NULL), "") && dfg_tensor_numel(NULL) == 0,
          "tensor queries on NULL");
    CHECK(dfg_stage_graph(NULL, NULL, 1) == DFG_ERR_ARG && dfg_runtime_step(NULL) == DFG_ERR_ARG &&
              dfg_runtime_create(p, NULL, NULL) == DFG_ERR_ARG,
          "staging and running NULL");
    dfg_runtime *rt = NULL;
    CHECK(dfg_runtime_create(NULL, NULL, &rt) == DFG_ERR_ARG && rt && contains(dfg_runtime_error(rt), "NULL"),
          "runtime of a NULL program: %s", dfg_runtime_error(rt));
    dfg_runtime_free(rt);
    dfg_runtime_free(NULL);
    dfg_program_free(NULL);
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- tensors from elsewhere */
static void test_foreign(void) {
    dfg_program *p = dfg_program_new("home"), *q = dfg_program_new("away");
    dfg_tensor *a = dfg_param(p, "a", DFG_F32, DFG_SHAPE(3), dfg_init_zeros());
    /* q holds more tensors than p, so a bounds check by id alone would not catch its ids */
    for (int i = 0; i < 40; i++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "pad%d", i);
        dfg_param(q, nm, DFG_F32, DFG_SHAPE(1), dfg_init_zeros());
    }
    dfg_tensor *far = dfg_param(q, "far", DFG_F32, DFG_SHAPE(3), dfg_init_zeros());
    dfg_graph *g1 = dfg_graph_new(p, "producer"), *g2 = dfg_graph_new(p, "consumer");
    dfg_tensor *t = dfg_name(dfg_scale(g1, a, 2.0f), "doubled");
    dfg_add(g2, t, a);
    EXPECT_FAIL(g2, DFG_ERR_ARG, "add: input #0 'doubled' is computed in graph 'producer', not 'consumer'",
                "through persistent tensors");
    CHECK(dfg_graph_status(g1) == DFG_OK, "the producing graph is not blamed");
    dfg_graph *g3 = dfg_graph_new(p, "g3");
    dfg_add(g3, a, far);
    EXPECT_FAIL(g3, DFG_ERR_ARG, "input #1 'far' belongs to another program");
    /* backward with respect to another program's tensor */
    dfg_graph *g4 = dfg_graph_new(p, "g4");
    dfg_tensor *loss = total(g4, dfg_mul(g4, a, a)), *grads[2] = {NULL, NULL}, *wrt[2] = {a, far};
    CHECK(dfg_backward(g4, loss, wrt, 2, grads) == DFG_ERR_ARG, "backward wrt another program's tensor: %s",
          dfg_graph_error(g4));
    CHECK(contains(dfg_graph_error(g4), "'far'") && contains(dfg_graph_error(g4), "another program"),
          "and the message names it: %s", dfg_graph_error(g4));
    /* a loss from another graph */
    dfg_graph *g5 = dfg_graph_new(p, "g5");
    CHECK(dfg_backward(g5, loss, &a, 1, grads) == DFG_ERR_ARG, "backward of another graph's loss");
    EXPECT_FAIL(g5, DFG_ERR_ARG, "computed in graph 'g5'");
    /* outputs and stages from elsewhere */
    dfg_graph *g6 = dfg_graph_new(p, "g6");
    CHECK(is_poison(dfg_output(g6, t, "t_out")), "output of another graph's tensor");
    EXPECT_FAIL(g6, DFG_ERR_ARG, "output 't_out'");
    dfg_graph *gq = dfg_graph_new(q, "q_graph");
    CHECK(dfg_stage_graph(p, gq, 1) == DFG_ERR_ARG && contains(dfg_program_error(p), "another program"),
          "staging another program's graph: %s", dfg_program_error(p));
    dfg_program_free(p);
    dfg_program_free(q);
}

/* ---------------------------------------------------------------- stale versions */
static void test_stale(void) {
    dfg_program *p = dfg_program_new("stale");
    dfg_tensor *s = dfg_state(p, "s", DFG_F32, DFG_SHAPE(4, 3), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *c = dfg_param(p, "c", DFG_F32, DFG_SHAPE(4, 3), dfg_init_ones());
    /* a reshape view taken before the write still points at the old bytes */
    dfg_graph *g = dfg_graph_new(p, "view");
    dfg_tensor *flat = dfg_reshape(g, s, DFG_SHAPE(12));
    dfg_tensor *copy = dfg_scale(g, s, 2.0f); /* a computed value: it owns its bytes and stays valid */
    dfg_assign(g, s, c);
    dfg_tensor *ok = dfg_add(g, copy, s);
    CHECK(dfg_graph_status(g) == DFG_OK && !is_poison(ok), "a value computed before the write stays usable: %s",
          dfg_graph_error(g));
    dfg_sum(g, flat, 0);
    EXPECT_FAIL(g, DFG_ERR_STATE, "sum", "reads 's' as it was before node 'assign#", "overwrote it",
                "f32 (12)");
    /* a version held from before a second write */
    g = dfg_graph_new(p, "version");
    dfg_tensor *v1 = dfg_assign(g, s, c);
    dfg_tensor *v2 = dfg_accumulate(g, s, c);
    CHECK(v1 != v2 && !is_poison(v2), "each write makes a new version");
    dfg_add(g, v1, c);
    EXPECT_FAIL(g, DFG_ERR_STATE, "add: input #0", "reads 's'", "overwrote it");
    /* a view of a version, taken before a later write */
    g = dfg_graph_new(p, "view_of_version");
    dfg_tensor *v = dfg_reshape(g, dfg_assign(g, s, c), DFG_SHAPE(3, 4));
    dfg_assign_fill(g, s, 1.0f);
    dfg_neg(g, v);
    EXPECT_FAIL(g, DFG_ERR_STATE, "neg", "reads 's'");
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- writing what cannot be written */
static void test_bad_writes(void) {
    dfg_program *p = dfg_program_new("writes");
    const float one[3] = {1, 1, 1};
    dfg_tensor *k = dfg_const(p, "k", DFG_F32, DFG_SHAPE(3), one);
    dfg_tensor *s = dfg_state(p, "s", DFG_F32, DFG_SHAPE(3), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "w1");
    dfg_assign(g, k, s);
    EXPECT_FAIL(g, DFG_ERR_ARG, "assign", "'k' is a const and cannot be written");
    g = dfg_graph_new(p, "w2");
    dfg_tensor *in = dfg_input(g, "in", DFG_F32, DFG_SHAPE(3));
    dfg_accumulate(g, in, s);
    EXPECT_FAIL(g, DFG_ERR_ARG, "accumulate", "'in' is a", "cannot be written; only PARAM and STATE can");
    g = dfg_graph_new(p, "w3");
    dfg_tensor *tmp = dfg_scale(g, s, 1.0f);
    dfg_slice_assign(g, tmp, dfg_slice(g, s, 0, 0, 1), 0, 0);
    EXPECT_FAIL(g, DFG_ERR_ARG, "slice_assign", "is written in place, so it must be a PARAM or STATE");
    g = dfg_graph_new(p, "w4");
    dfg_assign_fill(g, dfg_reshape(g, s, DFG_SHAPE(1, 3)), 0.0f); /* a view is not the state itself */
    EXPECT_FAIL(g, DFG_ERR_ARG, "must be a PARAM or STATE");
    g = dfg_graph_new(p, "w5");
    const int32_t key[4] = {1, 2, 0, 0};
    dfg_sample(g, s, dfg_const(p, "rng_const", DFG_I32, DFG_SHAPE(4), key), 1.0f, 0);
    EXPECT_FAIL(g, DFG_ERR_ARG, "sample", "'rng_const' is a const");
    g = dfg_graph_new(p, "w6");
    dfg_tensor *grads[1] = {k};
    dfg_clip_grad_norm(g, grads, 1, 1.0f);
    EXPECT_FAIL(g, DFG_ERR_ARG, "clip_grad_norm", "'k' is a const");
    /* one node writing one state twice has no defined result */
    g = dfg_graph_new(p, "w7");
    dfg_tensor *two[2] = {s, s};
    dfg_clip_grad_norm(g, two, 2, 1.0f);
    EXPECT_FAIL(g, DFG_ERR_ARG, "clip_grad_norm", "'s' is written twice by one node");
    /* hyperparameters out of range are refused when the node is built, not when it runs */
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(3), dfg_init_zeros());
    dfg_tensor *m = dfg_state(p, "m", DFG_F32, DFG_SHAPE(3), DFG_ROLE_OPTIM, dfg_init_zeros());
    dfg_tensor *step = dfg_state(p, "step", DFG_I32, DFG_SCALAR, DFG_ROLE_OPTIM, dfg_init_zeros());
    g = dfg_graph_new(p, "w8");
    CHECK(dfg_adamw(g, &w, &s, &m, &s, 1, step, (dfg_adamw_config){1e-3f, 1.0f, 0.999f, 1e-8f, 0}) == DFG_ERR_ARG,
          "beta1 = 1 is refused");
    EXPECT_FAIL(g, DFG_ERR_ARG, "adamw", "hyperparameters out of range", "betas 1 0.999");
    g = dfg_graph_new(p, "w9");
    dfg_clip_grad_norm(g, grads, 1, 0.0f);
    EXPECT_FAIL(g, DFG_ERR_ARG, "clip_grad_norm", "max_norm must be > 0");
    g = dfg_graph_new(p, "w10");
    dfg_layernorm(g, s, s, s, 0.0f);
    EXPECT_FAIL(g, DFG_ERR_ARG, "layernorm", "eps must be > 0");
    g = dfg_graph_new(p, "w11");
    dfg_clamp(g, s, 1.0f, -1.0f);
    EXPECT_FAIL(g, DFG_ERR_ARG, "clamp", "lo 1 > hi -1");
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- names and shapes */
static void test_names_and_shapes(void) {
    dfg_program *p = dfg_program_new("names");
    CHECK(dfg_param(p, "w", DFG_F32, DFG_SHAPE(2), dfg_init_zeros()) != NULL, "the first 'w'");
    CHECK(dfg_state(p, "w", DFG_F32, DFG_SHAPE(2), DFG_ROLE_NONE, dfg_init_zeros()) == NULL, "a second 'w' is refused");
    CHECK(dfg_program_status(p) == DFG_ERR_ARG && contains(dfg_program_error(p), "state 'w': a tensor with this name already exists"),
          "duplicate name: %s", dfg_program_error(p));
    CHECK(dfg_graph_new(p, "late") == NULL, "a failed program makes no more graphs");
    dfg_program_free(p);

    p = dfg_program_new("names2");
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(2), dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "g");
    CHECK(is_poison(dfg_input(g, "w", DFG_F32, DFG_SHAPE(2))), "an input may not reuse a name");
    EXPECT_FAIL(g, DFG_ERR_ARG, "input 'w': a tensor with this name already exists");
    dfg_program_free(p);

    p = dfg_program_new("names3");
    w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(2), dfg_init_zeros());
    g = dfg_graph_new(p, "g");
    dfg_output(g, dfg_neg(g, w), "w");
    EXPECT_FAIL(g, DFG_ERR_ARG, "output 'w': a tensor with this name already exists");
    dfg_program_free(p);

    const dfg_shape bad[3] = {DFG_SHAPE(3, 0), DFG_SHAPE(-1, 2), {.rank = -1}};
    const char *bad_str[2] = {"invalid shape (3,0)", "invalid shape (-1,2)"};
    for (int i = 0; i < 3; i++) {
        p = dfg_program_new("shapes");
        CHECK(dfg_param(p, "z", DFG_F32, bad[i], dfg_init_zeros()) == NULL, "param of bad shape %d", i);
        CHECK(dfg_program_status(p) == DFG_ERR_SHAPE && contains(dfg_program_error(p), "param 'z'") &&
                  (i == 2 || contains(dfg_program_error(p), bad_str[i])),
              "bad shape %d: %s", i, dfg_program_error(p));
        dfg_program_free(p);
    }
    p = dfg_program_new("shapes_input");
    g = dfg_graph_new(p, "i0");
    CHECK(is_poison(dfg_input(g, "empty", DFG_F32, DFG_SHAPE(0))), "an input with a 0 dim");
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "input 'empty'", "invalid shape (0)");
    dfg_program_free(p);

    p = dfg_program_new("shapes2");
    dfg_tensor *x = dfg_param(p, "x", DFG_F32, DFG_SHAPE(4, 6), dfg_init_zeros());
    dfg_tensor *x3 = dfg_param(p, "x3", DFG_F32, DFG_SHAPE(2, 3, 4), dfg_init_zeros());
    g = dfg_graph_new(p, "f0");
    dfg_fill(g, DFG_F32, DFG_SHAPE(2, 0), 1.0f);
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "fill", "empty dim");
    g = dfg_graph_new(p, "e0");
    dfg_expand(g, dfg_reshape(g, x, DFG_SHAPE(24, 1)), DFG_SHAPE(24, 0));
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "expand", "empty dim");
    g = dfg_graph_new(p, "e1");
    dfg_expand(g, x, DFG_SHAPE(4, 3));
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "expand", "does not broadcast to the target shape", "'x' f32 (4,6)");

    /* axes */
    g = dfg_graph_new(p, "a0");
    dfg_sum(g, x, 2);
    EXPECT_FAIL(g, DFG_ERR_ARG, "sum", "axis 2 out of range", "'x' f32 (4,6)");
    g = dfg_graph_new(p, "a1");
    dfg_mean(g, x, -3);
    EXPECT_FAIL(g, DFG_ERR_ARG, "mean", "axis -3 out of range");
    g = dfg_graph_new(p, "a2");
    dfg_slice(g, x, 5, 0, 1);
    EXPECT_FAIL(g, DFG_ERR_ARG, "slice", "axis 5 out of range");
    g = dfg_graph_new(p, "a3");
    dfg_slice(g, x, 1, 4, 3);
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "slice", "range [4, 7) does not fit dim 1 of size 6");
    g = dfg_graph_new(p, "a4");
    dfg_concat(g, (dfg_tensor *[]){x, x}, 2, 2);
    EXPECT_FAIL(g, DFG_ERR_ARG, "concat", "axis 2 out of range");
    g = dfg_graph_new(p, "a5");
    dfg_transpose(g, x, 0, 4);
    EXPECT_FAIL(g, DFG_ERR_ARG, "transpose", "axes 0 and 4 do not fit rank 2 of 'x'");
    g = dfg_graph_new(p, "a6");
    dfg_masked_sum(g, x, x, -5);
    EXPECT_FAIL(g, DFG_ERR_ARG, "masked_sum", "axis -5 out of range");

    /* permutations */
    g = dfg_graph_new(p, "p0");
    dfg_permute(g, x3, (const int[]){0, 0, 1});
    EXPECT_FAIL(g, DFG_ERR_ARG, "permute", "perm is not a permutation of 0..2", "'x3' f32 (2,3,4)");
    g = dfg_graph_new(p, "p1");
    dfg_permute(g, x3, (const int[]){0, 1, 3});
    EXPECT_FAIL(g, DFG_ERR_ARG, "perm is not a permutation of 0..2");
    g = dfg_graph_new(p, "p2");
    dfg_permute(g, x3, (const int[]){-1, 1, 2});
    EXPECT_FAIL(g, DFG_ERR_ARG, "perm is not a permutation");

    /* reshape element counts */
    g = dfg_graph_new(p, "r0");
    dfg_reshape(g, x, DFG_SHAPE(5, 5));
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "reshape 'reshape#0' in graph 'r0'", "elements", "24", "'x' f32 (4,6)");
    g = dfg_graph_new(p, "r1");
    dfg_reshape(g, x, DFG_SHAPE(-1, 5));
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "reshape", "24 elements do not split by 5");
    g = dfg_graph_new(p, "r2");
    dfg_reshape(g, x, DFG_SHAPE(-1, -1));
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "reshape", "target dim 1 is -1");
    g = dfg_graph_new(p, "r3");
    dfg_reshape(g, x, DFG_SHAPE(0, 4));
    EXPECT_FAIL(g, DFG_ERR_SHAPE, "reshape", "target dim 0 is 0");

    /* staging */
    g = dfg_graph_new(p, "s0");
    CHECK(dfg_stage_graph(p, g, 0) == DFG_ERR_ARG && contains(dfg_program_error(p), "repeat must be >= 1, got 0"),
          "repeat 0: %s", dfg_program_error(p));
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- autodiff errors */
static void test_backward_errors(void) {
    dfg_program *p = dfg_program_new("ad");
    dfg_tensor *q = dfg_param(p, "q", DFG_F32, DFG_SHAPE(1, 2, 8), dfg_init_normal(0, 1));
    dfg_tensor *kc = dfg_state(p, "kc", DFG_F32, DFG_SHAPE(1, 4, 8), DFG_ROLE_KV_CACHE, dfg_init_zeros());
    dfg_tensor *pos = dfg_const(p, "pos", DFG_I32, DFG_SCALAR, &(int32_t){0});
    dfg_tensor *qkv = dfg_param(p, "qkv", DFG_F32, DFG_SHAPE(1, 3, 12), dfg_init_normal(0, 1));
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(3), dfg_init_normal(0, 1));
    dfg_tensor *s = dfg_state(p, "s", DFG_F32, DFG_SHAPE(3), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_tensor *grads[1] = {NULL};

    dfg_graph *g = dfg_graph_new(p, "cached");
    dfg_tensor *loss = total(g, dfg_attention_cached(g, q, kc, kc, pos, 2));
    CHECK(dfg_backward(g, loss, &q, 1, grads) == DFG_ERR_ARG, "backward through attention_cached");
    EXPECT_FAIL(g, DFG_ERR_ARG, "attention_cached 'attention_cached#0'", "is not differentiable", "'q'");

    /* second order through attention's backward op */
    g = dfg_graph_new(p, "second_order");
    dfg_tensor *y = dfg_attention(g, qkv, 2);
    loss = total(g, dfg_mul(g, y, y));
    CHECK(dfg_backward(g, loss, &qkv, 1, grads) == DFG_OK, "first order: %s", dfg_graph_error(g));
    dfg_tensor *loss2 = total(g, dfg_mul(g, grads[0], grads[0]));
    int nodes = g->n_nodes;
    CHECK(dfg_backward(g, loss2, &qkv, 1, grads) == DFG_ERR_ARG, "backward through attention_bwd");
    EXPECT_FAIL(g, DFG_ERR_ARG, "attention_bwd", "is not differentiable", "'qkv'");
    CHECK(g->n_nodes >= nodes, "a failed backward may leave nodes but the graph is poisoned: %d", g->n_nodes);

    /* through an assign: the state's new value depends on w, but the write is not differentiable */
    g = dfg_graph_new(p, "assign");
    dfg_assign(g, s, dfg_scale(g, w, 2.0f));
    loss = total(g, dfg_mul(g, s, s));
    CHECK(dfg_backward(g, loss, &w, 1, grads) == DFG_ERR_ARG, "backward through assign");
    EXPECT_FAIL(g, DFG_ERR_ARG, "assign 'assign#1'", "is not differentiable", "'w'");

    /* the loss must be a float scalar */
    g = dfg_graph_new(p, "vector_loss");
    dfg_tensor *vec = dfg_name(dfg_mul(g, w, w), "sq");
    CHECK(dfg_backward(g, vec, &w, 1, grads) == DFG_ERR_ARG, "backward of a (3) loss");
    EXPECT_FAIL(g, DFG_ERR_ARG, "the loss must be a float scalar", "'sq' f32 (3)");
    g = dfg_graph_new(p, "int_loss");
    dfg_tensor *ia = dfg_argmax(g, dfg_reshape(g, w, DFG_SHAPE(1, 3)));
    CHECK(dfg_backward(g, ia, &w, 1, grads) == DFG_ERR_ARG, "backward of an i32 loss");
    EXPECT_FAIL(g, DFG_ERR_ARG, "the loss must be a float scalar", "i32");
    g = dfg_graph_new(p, "param_loss");
    CHECK(dfg_backward(g, w, &w, 1, grads) == DFG_ERR_ARG, "a PARAM is not a computed loss");
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- runtime refusals */
static void test_runtime_errors(void) {
    /* the CPU runs f32: a bf16 matmul is refused at create, naming the node */
    dfg_program *p = dfg_program_new("bf16");
    dfg_tensor *a = dfg_param(p, "a", DFG_BF16, DFG_SHAPE(4, 8), dfg_init_normal(0, 1));
    dfg_tensor *b = dfg_param(p, "b", DFG_BF16, DFG_SHAPE(8, 3), dfg_init_normal(0, 1));
    dfg_graph *g = dfg_graph_new(p, "fwd");
    /* kept as an output: dce removes nodes whose results nothing reads */
    dfg_output(g, dfg_name(dfg_matmul(g, a, b, false, false), "lm_head"), "logits");
    dfg_stage_graph(p, g, 1);
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_runtime_create(p, NULL, &rt);
    CHECK(st == DFG_ERR_UNSUPPORTED, "bf16 matmul on the CPU: %s", dfg_status_name(st));
    CHECK(contains(dfg_runtime_error(rt), "matmul 'logits'") && contains(dfg_runtime_error(rt), "bf16") &&
              contains(dfg_runtime_error(rt), "graph 'fwd'"),
          "the message names the node, its graph and the dtype: %s", dfg_runtime_error(rt));
    dfg_runtime_free(rt);
    dfg_program_free(p);

    /* a host stage whose function does not exist fails at create, naming the symbol */
    p = dfg_program_new("host");
    CHECK(dfg_stage_host(p, "reward", "dfg_test_no_such_host_fn") == DFG_OK, "stage_host: %s", dfg_program_error(p));
    rt = NULL;
    st = dfg_runtime_create(p, NULL, &rt);
    CHECK(st == DFG_ERR_ARG && contains(dfg_runtime_error(rt), "'dfg_test_no_such_host_fn'") &&
              contains(dfg_runtime_error(rt), "'reward'"),
          "missing host symbol: %s / %s", dfg_status_name(st), dfg_runtime_error(rt));
    dfg_runtime_free(rt);
    dfg_program_free(p);
    p = dfg_program_new("host2");
    CHECK(dfg_stage_host(p, "x", NULL) == DFG_ERR_ARG, "a host stage needs a symbol");
    dfg_program_free(p);

    /* reads and writes check the name and the byte count, and do not make the runtime fail */
    p = dfg_program_new("io");
    g = dfg_graph_new(p, "g");
    dfg_tensor *in = dfg_input(g, "in", DFG_F32, DFG_SHAPE(3));
    dfg_output(g, dfg_neg(g, in), "out");
    dfg_stage_graph(p, g, 1);
    rt = NULL;
    if (dfg_runtime_create(p, NULL, &rt) == DFG_OK) {
        float buf[4] = {1, 2, 3, 4};
        CHECK(dfg_runtime_write(rt, "in", buf, sizeof(buf)) == DFG_ERR_ARG &&
                  contains(dfg_runtime_error(rt), "'in' holds 12 bytes, not 16"),
              "a short write: %s", dfg_runtime_error(rt));
        CHECK(dfg_runtime_read(rt, "nope", buf, 4) == DFG_ERR_ARG && contains(dfg_runtime_error(rt), "no tensor named 'nope'"),
              "an unknown name: %s", dfg_runtime_error(rt));
        CHECK(dfg_runtime_write(rt, "in", NULL, 12) == DFG_ERR_ARG, "a NULL buffer");
        CHECK(dfg_runtime_write(rt, "in", buf, 12) == DFG_OK && dfg_runtime_step(rt) == DFG_OK,
              "the runtime still works after refused reads and writes: %s", dfg_runtime_error(rt));
        CHECK(dfg_runtime_read(rt, "out", buf, 12) == DFG_OK && buf[0] == -1.0f && buf[2] == -3.0f, "out = -in");
    } else {
        CHECK(false, "create: %s", dfg_runtime_error(rt));
    }
    dfg_runtime_free(rt);
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- run rules of stages */
/* stage_until, stage_when, stage_runs: a wrong tensor or stage is one named error, nothing set */
static void test_stage_rules(void) {
    struct {
        int rule; /* 0 until, 1 when, 2 runs */
        const char *stage, *tensor;
        double lo, hi;
        const char *want;
    } cases[] = {
        {0, "host", "flag", 0, 0, "stage_until 'host': a host stage runs once a step"},
        {2, "host", "flag", 0, 0, "stage_runs 'host': a host stage runs once a step"},
        {0, "loop", "wide", 0, 0, "stage_until 'loop': the flag must be a scalar f32 or i32 STATE"},
        {2, "loop", "weight", 0, 0, "stage_runs 'loop': the count must be a scalar f32 or i32 STATE"},
        {1, "loop", "half", 0, 0, "stage_when 'loop': the value must be a scalar f32 or i32 STATE"},
        {1, "loop", "flag", 2, 1, "stage_when 'loop': (2, 1] is not a range"},
        {1, "loop", "flag", NAN, 1, "is not a range"},
        {0, "nowhere", "flag", 0, 0, "nowhere"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        dfg_program *p = dfg_program_new("rules");
        dfg_state(p, "flag", DFG_F32, DFG_SHAPE(1), DFG_ROLE_ROLLOUT, dfg_init_zeros());
        dfg_state(p, "wide", DFG_I32, DFG_SHAPE(2), DFG_ROLE_ROLLOUT, dfg_init_zeros());
        dfg_state(p, "half", DFG_BF16, DFG_SHAPE(1), DFG_ROLE_ROLLOUT, dfg_init_zeros());
        dfg_param(p, "weight", DFG_F32, DFG_SHAPE(1), dfg_init_normal(0, 1));
        dfg_tensor *flag = dfg_find(p, "flag");
        dfg_graph *g = dfg_graph_new(p, "loop");
        dfg_assign(g, flag, dfg_scale(g, flag, 2.0f));
        dfg_stage_host(p, "host", "some_symbol");
        dfg_stage_graph(p, g, 4);
        dfg_tensor *t = dfg_find(p, cases[i].tensor);
        dfg_status st = cases[i].rule == 0   ? dfg_stage_until(p, cases[i].stage, t)
                        : cases[i].rule == 1 ? dfg_stage_when(p, cases[i].stage, t, cases[i].lo, cases[i].hi)
                                             : dfg_stage_runs(p, cases[i].stage, t);
        CHECK(st == DFG_ERR_ARG && contains(dfg_program_error(p), cases[i].want), "case %zu: %s, '%s'", i,
              dfg_status_name(st), dfg_program_error(p));
        CHECK(!p->stages[1].until && !p->stages[1].when && !p->stages[1].runs, "case %zu: a refused rule was set", i);
        dfg_program_free(p);
    }
}

int main(void) {
    dfg_test_init("test_errors");
    test_stage_rules();
    test_shape_message();
    test_more_mismatches();
    test_null();
    test_foreign();
    test_stale();
    test_bad_writes();
    test_names_and_shapes();
    test_backward_errors();
    test_runtime_errors();
    return dfg_test_finish();
}
