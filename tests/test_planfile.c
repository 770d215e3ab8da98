/* test_planfile.c - plan files (runtime/formats/planfile.h): a GPT-2 training program saved and loaded
 * back is the same program (tensors with their flags and scopes, nodes with theirs, attributes,
 * stages, settings, compile options), compiles to the same memory plan and trains to
 * bit-identical metrics and parameters; a compiled program and files of older versions are
 * refused; every damaged, truncated, foreign or future file is refused with one clear line;
 * files whose checksums were fixed up after damage never crash the reader, semantic damage
 * is caught by the rebuild's own checks, and a recorded memory plan that overlaps live
 * tensors, leaves the arena or differs from what this dfg compiles is refused. The attention ops
 * with their optional start input (left padding: one more input than without) round-trip too.
 *
 * The GPT-2 program comes from examples/gpt2_train.c, built as the module
 * gpt2_train_pipeline.so next to this executable (tests/cli/CMakeLists.txt) and dlopened here
 * exactly as `dfg compile` and `dfg run` do. */
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/ir.h"
#include "ops/op.h"
#include "passes/plan.h"
#include "runtime/formats/planfile_internal.h"
#include "testutil.h"

/* ---------------------------------------------------------------- the GPT-2 pipeline module */
/* A small GPT-2 training program (1 layer, short rows) with some settings overridden. */
static dfg_program *gpt2_program(void *lib) {
    static const char *const settings[] = {"n_layer", "1", "seq", "16", "batch", "4", NULL};
    dfg_status st;
    dfg_program *p = dfg_test_gpt2_program(lib, settings, &st);
    /* the host writes the mask in stage 'data' and 'train' reads it: a scope that changes nothing
     * in the run but must survive the file */
    if (!st) st = dfg_set_scope(p, dfg_find(p, "mask"), "data", "train");
    CHECK(st == DFG_OK && !dfg_program_status(p), "pipeline: %s", dfg_program_error(p));
    return p;
}

/* ---------------------------------------------------------------- a tiny program of every kind */
static const unsigned char fake_lib[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 'n', 'o', 't', ' ', 'r', 'e', 'a', 'l'};

static dfg_program *tiny_program(void) {
    dfg_program *p = dfg_program_new("tiny");
    dfg_setting_int(p, "width", 3);
    dfg_setting_str(p, "task", "copy");
    float cdata[3] = {1, 2, 3};
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(2, 3), dfg_init_normal(0, 0.5f));
    dfg_tensor *c = dfg_const(p, "c", DFG_F32, DFG_SHAPE(3), cdata);
    dfg_tensor *acc = dfg_state(p, "acc", DFG_F32, DFG_SHAPE(2, 3), DFG_ROLE_GRAD, dfg_init_zeros());
    dfg_set_role(w, DFG_ROLE_REF_MODEL);
    dfg_init_from(p, dfg_state(p, "w_copy", DFG_F32, DFG_SHAPE(2, 3), DFG_ROLE_OPTIM, dfg_init_zeros()), w);
    dfg_graph *g = dfg_graph_new(p, "main");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(2, 3));
    dfg_set_scope(p, x, "main", "main"); /* the host's input is dead in stage 'second' */
    dfg_tensor *y = dfg_name(dfg_mul(g, dfg_add(g, x, c), w), "y");
    dfg_tensor *t = dfg_transpose(g, dfg_reshape(g, y, DFG_SHAPE(3, 2)), 0, 1);
    dfg_tensor *z = dfg_output(g, dfg_matmul(g, t, w, true, false), "z");
    dfg_tensor *gw; /* GRAD-flagged, made by BACKWARD-flagged nodes */
    dfg_backward(g, dfg_sum(g, dfg_sum(g, z, 0), 0), &w, 1, &gw);
    dfg_output(g, gw, "grad_w");
    dfg_accumulate(g, acc, y);
    dfg_metric(g, "total", dfg_sum(g, dfg_sum(g, acc, 0), 0));
    dfg_graph *g2 = dfg_graph_new(p, "second");
    dfg_assign(g2, acc, dfg_scale(g2, acc, 0.5f));
    dfg_stage_host(p, "feed", "tiny_feed");
    dfg_stage_graph(p, g, 1);
    dfg_stage_graph(p, g2, 2);
    dfg_stage_steps(p, g2->name, 3, 9); /* a step range must survive the round trip */
    CHECK(!dfg_program_status(p), "tiny program: %s", dfg_program_error(p));
    return p;
}

static dfg_plan_info tiny_info(void) {
    dfg_plan_info info = {.target = DFG_TARGET_CPU, .align = 128, .keep_order = true,
                          .no_fuse = true, .memory_budget = (int64_t)3 << 32, /* over 32 bits: all 8 bytes travel */
                          .memory_min = true,
                          .host_lib = (void *)fake_lib, .host_lib_size = sizeof(fake_lib)};
    snprintf(info.source, sizeof(info.source), "tiny.c");
    return info;
}

static unsigned char *serialize(const dfg_program *p, const dfg_plan_info *info, size_t *n) {
    void *b = NULL;
    char err[512];
    dfg_status st = dfg_plan_serialize(p, info, &b, n, err, sizeof(err));
    CHECK(st == DFG_OK, "serialize: %s", err);
    return b;
}

/* ---------------------------------------------------------------- structural equality */
static int id_of(const dfg_tensor *t) { return t ? t->id : -1; }

static bool same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static bool tensors_equal(const dfg_tensor *a, const dfg_tensor *b) {
    bool same = a->id == b->id && a->kind == b->kind && a->dtype == b->dtype && a->role == b->role &&
                dfg_shape_equal(a->shape, b->shape) && !strcmp(a->name, b->name) && a->flags == b->flags &&
                id_of(a->storage) == id_of(b->storage) && id_of(a->version_of) == id_of(b->version_of) &&
                id_of(a->view_of) == id_of(b->view_of) && (a->graph ? a->graph->id : -1) == (b->graph ? b->graph->id : -1) &&
                (a->producer ? a->producer->id : -1) == (b->producer ? b->producer->id : -1) &&
                a->producer_slot == b->producer_slot && same_str(a->scope_first, b->scope_first) &&
                same_str(a->scope_last, b->scope_last) && id_of(a->grad_wrt) == id_of(b->grad_wrt) &&
                id_of(a->init_from) == id_of(b->init_from);
    if (a->kind == DFG_PARAM || a->kind == DFG_STATE)
        same = same && a->init.kind == b->init.kind && a->init.a == b->init.a && a->init.b == b->init.b;
    if (a->kind == DFG_CONST) same = same && !memcmp(a->data, b->data, dfg_tensor_bytes(a));
    return same;
}

static bool nodes_equal(const dfg_node *a, const dfg_node *b) {
    if (a->op != b->op || a->flags != b->flags || (a->grad_of ? a->grad_of->id : -1) != (b->grad_of ? b->grad_of->id : -1) ||
        a->after || b->after || strcmp(a->name, b->name) || a->n_in != b->n_in || a->n_out != b->n_out ||
        !dfg_attrs_equal(dfg_op_attrs(a->op), a->attr, b->attr))
        return false;
    for (int j = 0; j < a->n_in; j++)
        if (a->in[j]->id != b->in[j]->id) return false;
    for (int k = 0; k < a->n_out; k++)
        if (a->out[k]->id != b->out[k]->id) return false;
    return true;
}

static void check_programs_equal(const dfg_program *a, const dfg_program *b, const char *what) {
    CHECK(!strcmp(a->name, b->name), "%s: program name", what);
    CHECK(a->n_settings == b->n_settings, "%s: %d settings vs %d", what, a->n_settings, b->n_settings);
    for (int i = 0; i < a->n_settings && i < b->n_settings; i++)
        CHECK(!strcmp(a->settings[i].key, b->settings[i].key) && !strcmp(a->settings[i].value, b->settings[i].value) &&
                  a->settings[i].used == b->settings[i].used,
              "%s: setting %d '%s'", what, i, a->settings[i].key);
    CHECK(a->n_tensors == b->n_tensors, "%s: %d tensors vs %d", what, a->n_tensors, b->n_tensors);
    for (int i = 0; i < a->n_tensors && i < b->n_tensors; i++)
        CHECK(tensors_equal(a->tensors[i], b->tensors[i]), "%s: tensor %d '%s' differs", what, i, a->tensors[i]->name);
    CHECK(a->n_graphs == b->n_graphs, "%s: graph count", what);
    for (int g = 0; g < a->n_graphs && g < b->n_graphs; g++) {
        const dfg_graph *ga = a->graphs[g], *gb = b->graphs[g];
        CHECK(!strcmp(ga->name, gb->name) && ga->n_nodes == gb->n_nodes, "%s: graph %d", what, g);
        for (int i = 0; i < ga->n_nodes && i < gb->n_nodes; i++)
            CHECK(nodes_equal(ga->nodes[i], gb->nodes[i]), "%s: graph '%s' node %d '%s' differs", what, ga->name, i,
                  ga->nodes[i]->name);
    }
    CHECK(a->n_stages == b->n_stages, "%s: stage count", what);
    for (int s = 0; s < a->n_stages && s < b->n_stages; s++) {
        const dfg_stage *sa = &a->stages[s], *sb = &b->stages[s];
        bool same = sa->kind == sb->kind && !strcmp(sa->name, sb->name) && sa->repeat == sb->repeat &&
                    sa->first_step == sb->first_step && sa->last_step == sb->last_step;
        if (sa->kind == DFG_STAGE_GRAPH) same = same && sa->graph->id == sb->graph->id;
        else same = same && !strcmp(sa->symbol, sb->symbol);
        same = same && id_of(sa->until) == id_of(sb->until) && id_of(sa->when) == id_of(sb->when) &&
               id_of(sa->runs) == id_of(sb->runs) && sa->when_lo == sb->when_lo && sa->when_hi == sb->when_hi;
        CHECK(same, "%s: stage %d '%s' differs", what, s, sa->name);
    }
}

/* ---------------------------------------------------------------- round trips */
/* How many tensors carry the gradient tag and a scope, and how many nodes the backward tag:
 * the facts beyond shapes that a plan file must keep. */
typedef struct {
    int grads, scoped, backward, grad_wrt, grad_of, init_from;
} tags;

static tags tags_of(const dfg_program *p) {
    tags t = {0};
    for (int i = 0; i < p->n_tensors; i++) {
        t.grads += (p->tensors[i]->flags & DFG_TF_GRAD) != 0;
        t.scoped += p->tensors[i]->scope_first != NULL;
        t.grad_wrt += p->tensors[i]->grad_wrt != NULL;
        t.init_from += p->tensors[i]->init_from != NULL;
    }
    for (int g = 0; g < p->n_graphs; g++)
        for (int i = 0; i < p->graphs[g]->n_nodes; i++) {
            t.backward += (p->graphs[g]->nodes[i]->flags & DFG_NF_BACKWARD) != 0;
            t.grad_of += p->graphs[g]->nodes[i]->grad_of != NULL;
        }
    return t;
}

/* p saved with tiny_info() and loaded back as "<what>.dfg": the load must equal p and save again to
 * the same bytes (n); check(p, q, back, n) adds the test's own facts. Frees p. */
typedef void (*loaded_fn)(const dfg_program *p, dfg_program *q, const dfg_plan_info *back, size_t n);
static void round_trip(dfg_program *p, const char *what, loaded_fn check) {
    dfg_plan_info info = tiny_info(), back;
    size_t n, n2;
    unsigned char *b = serialize(p, &info, &n);
    dfg_program *q = NULL;
    char err[512], file[64];
    snprintf(file, sizeof(file), "%s.dfg", what);
    dfg_status st = dfg_plan_parse(b, n, file, &q, &back, err, sizeof(err));
    CHECK(st == DFG_OK, "%s: %s", what, err);
    if (q) {
        check_programs_equal(p, q, what);
        check(p, q, &back, n);
        unsigned char *b2 = serialize(q, &info, &n2);
        CHECK(n2 == n && !memcmp(b, b2, n), "%s: saving the loaded program gives other bytes", what);
        free(b2);
    }
    dfg_program_free(q);
    dfg_plan_info_free(&back);
    free(b);
    dfg_program_free(p);
}

static void tiny_loaded(const dfg_program *p, dfg_program *q, const dfg_plan_info *back, size_t n) {
    (void)n;
    tags tp = tags_of(p), tq = tags_of(q);
    CHECK(tp.grads == 1 && tp.scoped == 1 && tp.backward > 2 && tp.grad_wrt > 2 && tp.grad_of > 2 && tp.init_from == 1,
          "tiny: built with %d grads, %d scopes, %d backward nodes, %d/%d gradient links, %d copies", tp.grads,
          tp.scoped, tp.backward, tp.grad_wrt, tp.grad_of, tp.init_from);
    CHECK(!memcmp(&tq, &tp, sizeof(tp)), "tiny: tags lost");
    CHECK(!dfg_program_batch_invariant(q), "tiny: loaded as batch-invariant");
    CHECK(back->target == DFG_TARGET_CPU && !strcmp(back->source, "tiny.c") &&
              !strcmp(back->dfg_version, DFG_VERSION_STRING),
          "tiny: info fields");
    dfg_options o = dfg_plan_options(back);
    CHECK(back->align == 128 && !back->no_reuse && back->keep_order && o.align == 128 && o.keep_order && !o.no_reuse &&
              o.target == DFG_TARGET_CPU && back->no_fuse && o.no_fuse && back->memory_budget == (int64_t)3 << 32 &&
              o.memory_budget == back->memory_budget && back->memory_min && o.memory_min,
          "tiny: compile options (align %zu, no_reuse %d, keep_order %d, no_fuse %d, memory budget %lld, "
          "memory_min %d)",
          back->align, back->no_reuse, back->keep_order, back->no_fuse, (long long)back->memory_budget,
          back->memory_min);
    CHECK(back->host_lib_size == sizeof(fake_lib) && !memcmp(back->host_lib, fake_lib, sizeof(fake_lib)),
          "tiny: host lib");
    dfg_plan_info neg = tiny_info();
    neg.memory_budget = -1;
    void *b3 = NULL;
    size_t n3 = 0;
    char err[512];
    dfg_status st = dfg_plan_serialize(q, &neg, &b3, &n3, err, sizeof(err));
    CHECK(st == DFG_ERR_ARG && strstr(err, "memory budget -1 is negative") && !b3, "tiny: a negative budget: %d '%s'",
          st, err);
    free(b3);
}

static void test_tiny_round_trip(void) { round_trip(tiny_program(), "tiny", tiny_loaded); }

/* Stages whose run count is decided at run time: a loop that ends on a flag, copies of a stage
 * for widths (the one whose range holds a value runs), and a loop that runs a counted number of
 * times. The references and the range's bounds must survive the round trip. */
static dfg_program *staged_program(void) {
    dfg_program *p = dfg_program_new("staged");
    dfg_tensor *len = dfg_state(p, "len", DFG_F32, DFG_SHAPE(1), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_tensor *count = dfg_state(p, "count", DFG_I32, DFG_SHAPE(1), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_tensor *done = dfg_state(p, "done", DFG_F32, DFG_SHAPE(1), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_tensor *acc = dfg_state(p, "acc", DFG_F32, DFG_SHAPE(4), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    dfg_graph *loop = dfg_graph_new(p, "loop");
    dfg_assign(loop, acc, dfg_scale(loop, acc, 0.5f));
    dfg_assign(loop, done, dfg_scale(loop, done, 2.0f));
    dfg_graph *narrow = dfg_graph_new(p, "narrow");
    dfg_assign(narrow, acc, dfg_scale(narrow, acc, 3.0f));
    dfg_graph *chunks = dfg_graph_new(p, "chunks");
    dfg_assign(chunks, acc, dfg_scale(chunks, acc, 1.5f));
    dfg_stage_host(p, "lengths", "staged_lengths");
    dfg_stage_graph(p, loop, 8);
    dfg_stage_graph(p, narrow, 1);
    dfg_stage_graph(p, chunks, 4);
    dfg_stage_until(p, "loop", done);
    dfg_stage_when(p, "narrow", len, -0.25, 16.5); /* bounds that are not integers */
    dfg_stage_runs(p, "chunks", count);
    dfg_declare_batch_invariant(p); /* the numerics survive too */
    CHECK(!dfg_program_status(p), "staged program: %s", dfg_program_error(p));
    return p;
}

static void staged_loaded(const dfg_program *p, dfg_program *q, const dfg_plan_info *back, size_t n) {
    (void)back, (void)n;
    CHECK(q->n_stages == 4 && q->stages[1].until && !strcmp(q->stages[1].until->name, "done") && q->stages[2].when &&
              !strcmp(q->stages[2].when->name, "len") && q->stages[2].when_lo == -0.25 &&
              q->stages[2].when_hi == 16.5 && q->stages[3].runs && !strcmp(q->stages[3].runs->name, "count") &&
              !q->stages[1].when && !q->stages[1].runs && !q->stages[3].until,
          "staged: run rules lost (%d stages)", q->n_stages);
    CHECK(p->stages[1].until && p->stages[2].when && p->stages[3].runs, "staged: built without its run rules");
    CHECK(dfg_program_batch_invariant(q), "staged: the batch-invariant declaration was lost");
}

static void test_staged_round_trip(void) { round_trip(staged_program(), "staged", staged_loaded); }

/* The attention ops with and without their optional start (left padding), forward and backward:
 * a node's input count is the builder's (-1 in ops.def), so the file must carry it. */
static dfg_program *padded_program(void) {
    dfg_program *p = dfg_program_new("padded");
    dfg_tensor *qkv = dfg_param(p, "qkv", DFG_F32, DFG_SHAPE(4, 5, 12), dfg_init_normal(0, 1));
    dfg_tensor *pre = dfg_param(p, "prefix", DFG_F32, DFG_SHAPE(2, 3, 12), dfg_init_normal(0, 1));
    dfg_tensor *kc = dfg_state(p, "k", DFG_F32, DFG_SHAPE(4, 9, 2), DFG_ROLE_KV_CACHE, dfg_init_zeros());
    dfg_tensor *vc = dfg_state(p, "v", DFG_F32, DFG_SHAPE(4, 9, 2), DFG_ROLE_KV_CACHE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "main");
    dfg_tensor *start = dfg_input(g, "start", DFG_I32, DFG_SHAPE(4)), *pstart = dfg_input(g, "pstart", DFG_I32, DFG_SHAPE(2));
    dfg_tensor *pos = dfg_input(g, "pos", DFG_I32, DFG_SCALAR), *q = dfg_input(g, "q", DFG_F32, DFG_SHAPE(4, 1, 4));
    dfg_tensor *y = dfg_add(g, dfg_attention_padded(g, qkv, start, 2), dfg_attention(g, qkv, 2));
    y = dfg_add(g, y, dfg_attention_prefix_padded(g, qkv, pre, pstart, 2));
    dfg_tensor *wrt[2] = {qkv, pre}, *gr[2];
    dfg_backward(g, dfg_sum(g, dfg_reshape(g, y, DFG_SHAPE(-1)), 0), wrt, 2, gr);
    dfg_output(g, gr[0], "grad_qkv"), dfg_output(g, gr[1], "grad_prefix");
    dfg_output(g, dfg_attention_cached_padded(g, q, kc, vc, pos, start, 2), "y_cached");
    dfg_stage_graph(p, g, 1);
    CHECK(!dfg_program_status(p), "padded program: %s", dfg_program_error(p));
    return p;
}

static void padded_loaded(const dfg_program *p, dfg_program *q, const dfg_plan_info *back, size_t n) {
    (void)p, (void)back;
    int with[DFG_OP_COUNT] = {0};
    const dfg_graph *g = q->graphs[0];
    for (int i = 0; i < g->n_nodes; i++) {
        const dfg_node *nd = g->nodes[i];
        int plain = -1; /* the op's inputs without a start */
        switch (nd->op) {
        case DFG_OP_ATTENTION: plain = 1; break;
        case DFG_OP_ATTENTION_PREFIX: plain = 2; break;
        case DFG_OP_ATTENTION_BWD:
        case DFG_OP_ATTENTION_CACHED: plain = 4; break;
        case DFG_OP_ATTENTION_PREFIX_BWD: plain = 5; break;
        default: break;
        }
        if (plain >= 0 && nd->n_in == plain + 1 && nd->in[plain]->dtype == DFG_I32) with[nd->op]++;
    }
    CHECK(with[DFG_OP_ATTENTION] == 1 && with[DFG_OP_ATTENTION_BWD] == 1 && with[DFG_OP_ATTENTION_PREFIX] == 1 &&
              with[DFG_OP_ATTENTION_PREFIX_BWD] == 1 && with[DFG_OP_ATTENTION_CACHED] == 1,
          "padded: the loaded program's attention nodes with a start: %d %d %d %d %d", with[DFG_OP_ATTENTION],
          with[DFG_OP_ATTENTION_BWD], with[DFG_OP_ATTENTION_PREFIX], with[DFG_OP_ATTENTION_PREFIX_BWD],
          with[DFG_OP_ATTENTION_CACHED]);
    printf("padded: attention, attention_bwd, attention_prefix(_bwd), attention_cached with a start saved and "
           "loaded (%zu bytes, identical when saved again)\n", n);
}

static void test_padded_round_trip(void) { round_trip(padded_program(), "padded", padded_loaded); }

/* Runs p for `steps` steps; returns every metric of every step and, at the end, the bytes of
 * every persistent tensor, concatenated. */
static unsigned char *train(dfg_program *p, void *lib, int steps, size_t *n) {
    dfg_run_options o = dfg_run_options_default();
    o.seed = 77;
    o.n_threads = 1;
    o.host_lib = lib;
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_runtime_create(p, &o, &rt);
    CHECK(st == DFG_OK, "runtime: %s", dfg_runtime_error(rt));
    size_t cap = 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->kind != DFG_TEMP) cap += dfg_tensor_bytes(p->tensors[i]);
    cap += (size_t)steps * 64 * sizeof(float);
    unsigned char *out = calloc(1, cap);
    size_t used = 0;
    for (int s = 0; s < steps && !st; s++) {
        st = dfg_runtime_step(rt);
        CHECK(st == DFG_OK, "step %d: %s", s, dfg_runtime_error(rt));
        for (int m = 0; m < dfg_runtime_metric_count(rt) && m < 64; m++) {
            float v = dfg_runtime_metric_value(rt, m);
            memcpy(out + used, &v, sizeof(v));
            used += sizeof(v);
        }
    }
    for (int i = 0; i < p->n_tensors && !st; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->kind == DFG_TEMP) continue;
        st = dfg_runtime_read(rt, t->name, out + used, dfg_tensor_bytes(t));
        used += dfg_tensor_bytes(t);
    }
    dfg_runtime_free(rt);
    *n = used;
    return out;
}

/* Two compiled programs have the same memory plan: every tensor at the same offset. */
static void check_plans_equal(const dfg_program *a, const dfg_program *b, const char *what) {
    CHECK(dfg_is_compiled(a) && dfg_is_compiled(b), "%s: not compiled", what);
    if (!dfg_is_compiled(a) || !dfg_is_compiled(b)) return;
    const dfg_report *ra = dfg_program_report(a), *rb = dfg_program_report(b);
    CHECK(ra->arena_bytes == rb->arena_bytes && ra->lower_bound_bytes == rb->lower_bound_bytes &&
              ra->naive_bytes == rb->naive_bytes && ra->n_inplace == rb->n_inplace && ra->n_nodes == rb->n_nodes &&
              !memcmp(ra->peak, rb->peak, sizeof(ra->peak)),
          "%s: reports differ (arena %zu vs %zu, lower bound %zu vs %zu)", what, ra->arena_bytes, rb->arena_bytes,
          ra->lower_bound_bytes, rb->lower_bound_bytes);
    CHECK(ra->peak[DFG_CAT_GRADS] > 0, "%s: no gradient bytes at the peak: the GRAD tags are missing", what);
    const dfg_memplan *ma = &a->plan->mem, *mb = &b->plan->mem;
    CHECK(ma->n_tensors == mb->n_tensors && !memcmp(ma->offset, mb->offset, sizeof(int64_t) * (size_t)ma->n_tensors),
          "%s: tensor offsets differ", what);
}

static void test_gpt2_round_trip(void *lib, unsigned char **plan, size_t *plan_len) {
    dfg_program *p = gpt2_program(lib);
    dfg_plan_info info = {.target = DFG_TARGET_CPU};
    snprintf(info.source, sizeof(info.source), "examples/gpt2_train.c");
    char path[] = "/tmp/dfg-test-planfile-XXXXXX", err[512];
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    dfg_status st = dfg_plan_save(p, &info, path, err, sizeof(err));
    CHECK(st == DFG_OK, "save: %s", err);
    dfg_program *q = NULL;
    dfg_plan_info back;
    st = dfg_plan_load(path, &q, &back, err, sizeof(err));
    CHECK(st == DFG_OK && q, "load: %s", err);
    unlink(path);
    if (!q) return;
    check_programs_equal(p, q, "gpt2");
    tags tp = tags_of(p);
    CHECK(tp.grads == 16 && tp.scoped == 1 && tp.backward > 40 && tp.grad_wrt > 30 && tp.grad_of > 40,
          "gpt2: built with %d grads, %d scopes, %d backward nodes, %d/%d gradient links", tp.grads, tp.scoped, tp.backward,
          tp.grad_wrt, tp.grad_of);
    CHECK(!strcmp(back.source, "examples/gpt2_train.c") && !back.host_lib, "gpt2: info");
    *plan = serialize(p, &info, plan_len); /* before training compiles p */
    /* both programs compile to the same plan and train identically, bit for bit */
    size_t na, nb;
    unsigned char *ra = train(p, lib, 3, &na), *rb = train(q, lib, 3, &nb);
    CHECK(na == nb && na > 0 && !memcmp(ra, rb, na), "gpt2: the loaded program trains differently (%zu vs %zu bytes)", na, nb);
    free(ra);
    free(rb);
    check_plans_equal(p, q, "gpt2");
    /* a compiled program no longer holds what the builders made */
    void *b = NULL;
    size_t n = 0;
    st = dfg_plan_serialize(p, &info, &b, &n, err, sizeof(err));
    CHECK(st == DFG_ERR_STATE && !b && strstr(err, "is compiled"), "gpt2: saving a compiled program: %s", err);
    free(b);
    dfg_program_free(q);
    dfg_program_free(p);
    dfg_plan_info_free(&back); /* the recorded plan */
}

/* ---------------------------------------------------------------- refusals */
/* Parses n bytes and expects a refusal whose message contains `want` (any when NULL). */
static void expect_refused(const unsigned char *b, size_t n, const char *want, const char *what) {
    dfg_program *q = (dfg_program *)1;
    char err[512];
    dfg_status st = dfg_plan_parse(b, n, "P.dfg", &q, NULL, err, sizeof(err));
    CHECK(st != DFG_OK && q == NULL, "%s: accepted", what);
    CHECK(!strncmp(err, "P.dfg: ", 7) && !strchr(err, '\n'), "%s: message '%s' is not one line naming the file", what, err);
    if (want) CHECK(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", what, err, want);
    if (st == DFG_OK) dfg_program_free(q);
}

typedef struct {
    uint32_t kind;
    size_t payload, len; /* offset and length of the payload */
} section;

static uint64_t rd_le(const unsigned char *b, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static int sections_of(const unsigned char *b, size_t n, section *out) {
    int count = (int)rd_le(b + 12, 4);
    size_t off = 16;
    for (int i = 0; i < count && off + 16 <= n; i++) {
        out[i] = (section){(uint32_t)rd_le(b + off, 4), off + 16, (size_t)rd_le(b + off + 4, 8)};
        off += 16 + out[i].len;
    }
    return count;
}

static void fix_crcs(unsigned char *b, size_t n) {
    section s[8];
    int count = sections_of(b, n, s);
    for (int i = 0; i < count && i < 8; i++) {
        uint32_t crc = dfg_plan_crc32(b + s[i].payload, s[i].len);
        for (int k = 0; k < 4; k++) b[s[i].payload - 4 + (size_t)k] = (unsigned char)(crc >> (8 * k));
    }
}

static void test_damage(const unsigned char *plan, size_t n, const char *what) {
    unsigned char *b = malloc(n);
    section s[8];
    int count = sections_of(plan, n, s);
    CHECK(count >= 5, "%s: %d sections", what, count);
    for (int i = 0; i < count && i < 8; i++) { /* one flipped byte inside each section */
        char want[96], label[96];
        memcpy(b, plan, n);
        b[s[i].payload + s[i].len / 2] ^= 0x5A;
        snprintf(want, sizeof(want), "checksum mismatch in section '%s'", dfg_plan_section_name(s[i].kind));
        snprintf(label, sizeof(label), "%s: damaged section '%s'", what, dfg_plan_section_name(s[i].kind));
        expect_refused(b, n, want, label);
    }
    memcpy(b, plan, n);
    b[8] = 14; /* format version */
    expect_refused(b, n, "format version 14 is newer than this dfg (13)", "future version");
    memcpy(b, plan, n);
    b[8] = 1; /* the format before scopes and gradient flags */
    expect_refused(b, n, "format version 1 is older than this dfg's (13)", "version 1");
    expect_refused(b, n, "re-run dfg compile", "version 1 says what to do");
    b[8] = 2; /* the format before the memory budget and no_fuse */
    expect_refused(b, n, "format version 2 is older than this dfg's (13) and lacks the memory budget", "version 2");
    expect_refused(b, n, "re-run dfg compile", "version 2 says what to do");
    b[8] = 3; /* the format before stage step ranges */
    expect_refused(b, n, "format version 3 is older than this dfg's (13) and lacks stage step ranges", "version 3");
    b[8] = 4; /* the format before the plan section */
    expect_refused(b, n, "format version 4 is older than this dfg's (13) and lacks the schedule and memory plan",
                   "version 4");
    b[8] = 5; /* the format before attributes were stored field by field */
    expect_refused(b, n, "format version 5 is older than this dfg's (13) and lacks op attributes stored field by field",
                   "version 5");
    b[8] = 6; /* the format before the entropy and quantile ops */
    expect_refused(b, n, "format version 6 is older than this dfg's (13) and lacks the entropy and quantile ops",
                   "version 6");
    b[8] = 7; /* the format before nullable metrics and rollouts-only plans */
    expect_refused(b, n, "format version 7 is older than this dfg's (13) and lacks metrics that may have no value",
                   "version 7");
    b[8] = 8; /* the format before stages that end early or run on a condition */
    expect_refused(b, n, "format version 8 is older than this dfg's (13) and lacks stages that end early", "version 8");
    b[8] = 9; /* the format before batch-invariant plans */
    expect_refused(b, n, "format version 9 is older than this dfg's (13) and lacks batch-invariant plans", "version 9");
    b[8] = 10; /* the format before LoRA's base_model role and NF4 */
    expect_refused(b, n, "format version 10 is older than this dfg's (13) and lacks LoRA's frozen base weights", "version 10");
    b[8] = 11; /* the format before remat's recorded decisions */
    expect_refused(b, n, "format version 11 is older than this dfg's (13) and lacks remat's recorded decisions", "version 11");
    b[8] = 12; /* the format before loops of stages */
    expect_refused(b, n, "format version 12 is older than this dfg's (13) and lacks loops of stages", "version 12");
    memcpy(b, plan, n);
    b[0] = 'X';
    expect_refused(b, n, "not a dfg plan file (bad magic)", "bad magic");
    memcpy(b, plan, n);
    b[s[2].payload - 12 + 7] = 0x40; /* a section length in the exabytes */
    expect_refused(b, n, "is truncated (needs", "huge section length");
    free(b);
    b = malloc(n + 3);
    memcpy(b, plan, n);
    memset(b + n, 0, 3);
    expect_refused(b, n + 3, "3 unexpected bytes after the last section", "trailing bytes");
    free(b);
}

/* Every prefix of the file is refused (lengths `stride` apart, plus each section boundary +-1). */
static void test_truncation(const unsigned char *plan, size_t n, size_t stride, const char *what) {
    char label[96];
    for (size_t len = 0; len < n; len += stride) {
        snprintf(label, sizeof(label), "%s truncated to %zu of %zu bytes", what, len, n);
        expect_refused(plan, len, NULL, label);
    }
    section s[8];
    int count = sections_of(plan, n, s);
    for (int i = 0; i < count && i < 8; i++)
        for (int d = -1; d <= 1; d++) {
            size_t len = s[i].payload + s[i].len + (size_t)d;
            if (len >= n) continue;
            snprintf(label, sizeof(label), "%s truncated to %zu bytes (near the end of '%s')", what, len,
                     dfg_plan_section_name(s[i].kind));
            expect_refused(plan, len, "truncated", label);
        }
}

/* Random damage with the checksums fixed up afterwards reaches the decoder and the rebuild: the
 * file must be refused cleanly or load as a valid program (some bytes, e.g. an init value, are
 * free). Sanitizer builds turn any out-of-bounds read or overflow here into a failure. */
static void test_fuzz(const unsigned char *plan, size_t n, int rounds, const char *what) {
    unsigned char *b = malloc(n);
    section s[8];
    int count = sections_of(plan, n, s), loaded = 0, refused = 0, compiled = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(b, plan, n);
        int flips = dfg_test_int(1, 4);
        for (int f = 0; f < flips; f++) {
            const section *sec = &s[dfg_test_int(0, count - 1)];
            if (!sec->len) continue;
            size_t at = sec->payload + (size_t)dfg_test_int(0, (int)sec->len - 1);
            b[at] = dfg_test_int(0, 3) ? (unsigned char)dfg_test_int(0, 255) : (unsigned char)(b[at] ^ 0x80);
        }
        fix_crcs(b, n);
        dfg_program *q = NULL;
        char err[512] = "";
        dfg_plan_info info;
        if (dfg_plan_parse(b, n, "P.dfg", &q, &info, err, sizeof(err)) == DFG_OK) {
            loaded++;
            CHECK(q && !dfg_program_status(q), "%s fuzz %d: loaded an invalid program", what, r);
            void *again = NULL;
            size_t n2 = 0;
            CHECK(q && dfg_plan_serialize(q, &info, &again, &n2, err, sizeof(err)) == DFG_OK,
                  "%s fuzz %d: a loaded program does not save: %s", what, r, err);
            free(again);
            /* compiling it either reproduces the recorded plan or is refused in one line */
            if (q && dfg_plan_compile(q, &info, "P.dfg", err, sizeof(err)) == DFG_OK) compiled++;
            else CHECK(!strncmp(err, "P.dfg: ", 7) && !strchr(err, '\n'), "%s fuzz %d: refusal '%s'", what, r, err);
            dfg_program_free(q);
            dfg_plan_info_free(&info);
        } else {
            refused++;
            CHECK(!strncmp(err, "P.dfg: ", 7) && !q, "%s fuzz %d: refusal without a message", what, r);
        }
    }
    printf("%s fuzz: %d loaded (%d compiled to the recorded plan), %d refused\n", what, loaded, compiled, refused);
    CHECK(refused > rounds / 2, "%s fuzz: only %d of %d damaged files were refused", what, refused, rounds);
    free(b);
}

/* Damage the checksum cannot see: a program altered in memory, then saved (the writer does not
 * re-validate nodes), must be refused by the rebuild with a message naming the problem. */
static void expect_semantic_refusal(dfg_program *p, const char *want, const char *what) {
    /* the altered program does not compile, so the writer is given the plan of the unaltered one */
    dfg_plan_info info = {.target = DFG_TARGET_CPU};
    size_t n = 0;
    dfg_program *ok = tiny_program(), *back = NULL;
    unsigned char *b = serialize(ok, &info, &n);
    char err[512];
    dfg_plan_info planned;
    CHECK(b && dfg_plan_parse(b, n, "P.dfg", &back, &planned, err, sizeof(err)) == DFG_OK, "%s: %s", what, err);
    free(b);
    b = NULL;
    CHECK(dfg_plan_serialize(p, &planned, (void **)&b, &n, err, sizeof(err)) == DFG_OK, "%s: serialize: %s", what, err);
    if (b) expect_refused(b, n, want, what);
    free(b);
    dfg_program_free(p);
    dfg_program_free(ok);
    dfg_program_free(back);
    dfg_plan_info_free(&planned);
}

static dfg_node *find_node(dfg_program *p, dfg_op op) {
    for (int g = 0; g < p->n_graphs; g++)
        for (int i = 0; i < p->graphs[g]->n_nodes; i++)
            if (p->graphs[g]->nodes[i]->op == op) return p->graphs[g]->nodes[i];
    return NULL;
}

/* The encoded attributes of node `node` of op `op` in a plan's bytes (planfile.h's node record:
 * u32 op | str op name | str node name | u8 flags | u32 grad_of | u32 n_in | ids | u32 n_out |
 * u32 first output | u32 attribute bytes | the bytes); NULL when not found. */
static unsigned char *node_attrs(unsigned char *b, size_t n, const char *op, const char *node, uint32_t *len) {
    size_t ko = strlen(op), kn = strlen(node);
    for (size_t i = 4; i + ko + 4 + kn + 17 < n; i++) {
        if (rd_le(b + i - 4, 4) != ko || memcmp(b + i, op, ko)) continue;
        size_t at = i + ko;
        if (rd_le(b + at, 4) != kn || memcmp(b + at + 4, node, kn)) continue;
        at += 4 + kn + 1 + 4;
        uint32_t n_in = (uint32_t)rd_le(b + at, 4);
        at += 4 + 4 * (size_t)n_in + 8;
        if (at + 4 > n) return NULL;
        *len = (uint32_t)rd_le(b + at, 4);
        return at + 4 + *len <= n ? b + at + 4 : NULL;
    }
    return NULL;
}

static dfg_node *find_node(dfg_program *p, dfg_op op);

/* The tiny plan's bytes with attribute byte `byte` of its first `op` node set to v (CRCs
 * repaired) are refused with want. */
static void expect_attr_refusal(dfg_op op, uint32_t byte, unsigned char v, const char *want, const char *what) {
    dfg_program *p = tiny_program();
    dfg_plan_info info = tiny_info();
    size_t n = 0;
    unsigned char *b = serialize(p, &info, &n);
    uint32_t len = 0;
    const char *node = find_node(p, op)->name;
    unsigned char *a = b ? node_attrs(b, n, dfg_op_name(op), node, &len) : NULL;
    CHECK(a && byte < len, "%s: no attribute byte %u of node '%s' in the plan", what, byte, node);
    if (a && byte < len) {
        a[byte] = v;
        fix_crcs(b, n);
        expect_refused(b, n, want, what);
    }
    free(b);
    dfg_program_free(p);
}

static void test_semantic_damage(void) {
    /* attributes are decoded against the op's layout before the shape rules see them */
    expect_attr_refusal(DFG_OP_MATMUL, 0, 2, "attributes: 'trans_a' is 2, not a flag", "bool attribute of 2");
    expect_attr_refusal(DFG_OP_PERMUTE, 1, 9, "attributes: 'perm' entry 1 is 9", "permutation entry out of range");

    dfg_program *p = tiny_program();
    ((dfg_attrs *)find_node(p, DFG_OP_PERMUTE)->attr)->permute.perm[0] = 0; /* (0, 0): not a permutation */
    expect_semantic_refusal(p, "perm is not a permutation", "bad permutation");

    p = tiny_program();
    ((dfg_attrs *)find_node(p, DFG_OP_RESHAPE)->attr)->reshape.shape = DFG_SHAPE((int64_t)1 << 39, (int64_t)1 << 39);
    expect_semantic_refusal(p, "over 2^40 elements", "overflowing reshape");

    p = tiny_program();
    dfg_node *add = find_node(p, DFG_OP_ADD);
    add->in[0] = p->tensors[p->n_tensors - 1]; /* reads a tensor made later */
    expect_semantic_refusal(p, "which does not exist yet", "input from the future");

    p = tiny_program();
    find_node(p, DFG_OP_MUL)->out[0]->shape.d[0] = 5;
    expect_semantic_refusal(p, "the file says f32 (5,3)", "recorded output shape disagrees");

    p = tiny_program();
    find_node(p, DFG_OP_AFFINE)->op = (dfg_op)(DFG_OP_COUNT + 5);
    expect_semantic_refusal(p, "which this dfg does not have", "unknown op id");

    p = tiny_program();
    find_node(p, DFG_OP_AFFINE)->op = DFG_OP_ADD; /* one input where add takes two */
    expect_semantic_refusal(p, "add: called with 1 inputs", "op of another arity");

    p = tiny_program();
    dfg_find(p, "c")->name = "w"; /* duplicate persistent name */
    expect_semantic_refusal(p, "already exists", "duplicate tensor name");

    p = tiny_program();
    p->stages[1].repeat = 0;
    expect_semantic_refusal(p, "with repeat 0", "stage repeat 0");
}

/* ---------------------------------------------------------------- the recorded plan */
typedef enum { OVERLAP, OUTSIDE, MISALIGNED, TENSOR_BYTES, BAD_BUFFER, LATE_STEP, BIG_ARENA, RENAMED_NODE } plan_damage;

/* Two live buffers (sizes > 0) whose step ranges meet: placing one on the other is an overlap. */
static bool live_pair(const dfg_plan_record *rec, uint32_t *a, uint32_t *b) {
    for (uint32_t i = 0; i < rec->n_bufs; i++)
        for (uint32_t j = i + 1; j < rec->n_bufs; j++) {
            const dfg_plan_buf_rec *x = &rec->bufs[i], *y = &rec->bufs[j];
            if (x->first >= 0 && y->first >= 0 && x->size > 0 && y->size > 0 && x->first <= y->last &&
                y->first <= x->last && x->offset != y->offset) {
                *a = i, *b = j;
                return true;
            }
        }
    return false;
}

/* Alters the record of a loaded plan, saves the program with it and loads the bytes back: the
 * loader must refuse the file (want) or, when the record is valid on its own but is not what
 * this dfg plans, dfg_plan_compile must (want_compile). */
static void expect_plan_refused(const unsigned char *plan, size_t n, plan_damage d, const char *want,
                                const char *want_compile, const char *what) {
    dfg_program *q = NULL;
    dfg_plan_info info;
    char err[512];
    CHECK(dfg_plan_parse(plan, n, "P.dfg", &q, &info, err, sizeof(err)) == DFG_OK, "%s: %s", what, err);
    if (!q) return;
    dfg_plan_record *rec = info.plan;
    uint32_t a = 0, b = 0, t = rec->n_bufs ? rec->bufs[0].owner : 0;
    switch (d) {
    case OVERLAP: CHECK(live_pair(rec, &a, &b), "%s: no two live buffers", what); rec->bufs[b].offset = rec->bufs[a].offset; break;
    case OUTSIDE: rec->bufs[1].offset = (int64_t)rec->arena_bytes; break;
    case MISALIGNED: rec->bufs[1].offset += 4; break;
    case TENSOR_BYTES: rec->tensor_bytes[t] -= 4; break;
    case BAD_BUFFER: rec->tensor_buf[rec->n_tensors - 1] = rec->n_bufs + 7; break;
    case LATE_STEP: rec->bufs[rec->n_bufs - 1].last = (int32_t)rec->n_steps; break;
    case BIG_ARENA: rec->arena_bytes += rec->align; break;
    case RENAMED_NODE: rec->nodes[0][1].name = rec->nodes[0][0].name; break;
    }
    void *bytes = NULL;
    size_t len = 0;
    CHECK(dfg_plan_serialize(q, &info, &bytes, &len, err, sizeof(err)) == DFG_OK, "%s: serialize: %s", what, err);
    dfg_program_free(q);
    dfg_plan_info_free(&info);
    if (want) {
        if (bytes) expect_refused(bytes, len, want, what);
        free(bytes);
        return;
    }
    dfg_status st = bytes ? dfg_plan_parse(bytes, len, "P.dfg", &q, &info, err, sizeof(err)) : DFG_ERR_ARG;
    free(bytes);
    CHECK(st == DFG_OK, "%s: a record valid on its own is refused: %s", what, err);
    if (st) return;
    st = dfg_plan_compile(q, &info, "P.dfg", err, sizeof(err));
    CHECK(st == DFG_ERR_FORMAT && strstr(err, "plans the program differently") && strstr(err, want_compile) &&
              strstr(err, "re-run dfg compile") && !strchr(err, '\n'),
          "%s: dfg_plan_compile said %d '%s'", what, (int)st, err);
    dfg_program_free(q);
    dfg_plan_info_free(&info);
}

static void test_plan_section(const unsigned char *plan, size_t n) {
    expect_plan_refused(plan, n, OVERLAP, "are live together", NULL, "overlapping live buffers");
    expect_plan_refused(plan, n, OUTSIDE, "is misaligned or outside the", NULL, "buffer past the arena");
    expect_plan_refused(plan, n, MISALIGNED, "is misaligned or outside the", NULL, "misaligned buffer");
    expect_plan_refused(plan, n, TENSOR_BYTES, "but its shape and dtype need", NULL, "tensor bytes");
    expect_plan_refused(plan, n, BAD_BUFFER, "is placed in buffer", NULL, "buffer index out of range");
    expect_plan_refused(plan, n, LATE_STEP, "-step timeline", NULL, "lifetime past the timeline");
    expect_plan_refused(plan, n, BIG_ARENA, NULL, "arena", "a larger arena than this dfg plans");
    expect_plan_refused(plan, n, RENAMED_NODE, NULL, "node 1 of graph", "another schedule");
    /* the unaltered record compiles to itself */
    dfg_program *q = NULL;
    dfg_plan_info info;
    char err[512];
    CHECK(dfg_plan_parse(plan, n, "P.dfg", &q, &info, err, sizeof(err)) == DFG_OK && info.plan, "plan: %s", err);
    CHECK(q && dfg_plan_compile(q, &info, "P.dfg", err, sizeof(err)) == DFG_OK, "the recorded plan: %s", err);
    dfg_program_free(q);
    dfg_plan_info_free(&info);
}

int main(void) {
    dfg_test_init("test_planfile");
    test_tiny_round_trip();
    test_staged_round_trip();
    test_padded_round_trip();
    test_semantic_damage();
    dfg_program *tiny = tiny_program();
    dfg_plan_info info = tiny_info();
    size_t tiny_len;
    unsigned char *tiny_plan = serialize(tiny, &info, &tiny_len);
    if (tiny_plan) {
        test_damage(tiny_plan, tiny_len, "tiny");
        test_truncation(tiny_plan, tiny_len, 1, "tiny"); /* every length */
        test_fuzz(tiny_plan, tiny_len, 20000, "tiny");
    }
    free(tiny_plan);
    dfg_program_free(tiny);

    void *lib = dfg_test_gpt2_pipeline();
    if (!lib) return dfg_test_finish();
    unsigned char *plan = NULL;
    size_t plan_len = 0;
    test_gpt2_round_trip(lib, &plan, &plan_len);
    if (plan) {
        test_damage(plan, plan_len, "gpt2");
        test_plan_section(plan, plan_len);
        test_truncation(plan, plan_len, 97, "gpt2");
        test_fuzz(plan, plan_len, 2000, "gpt2");
    }
    free(plan);
    dlclose(lib);
    return dfg_test_finish();
}
