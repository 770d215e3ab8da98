/* test_fuse.c - the fuse pass (passes/fuse.c) and its fused ops (ops/logprob.c, ops/bias_gelu.c)
 * against the unfused graphs a user writes.
 *
 * Agreement: each case is built twice, compiled with and without (no_fuse) the pass, given the
 * same random INPUTs, PARAMs and float STATEs, run on the CPU (the fused one in check mode), and
 * every dfg_output (values, gradients) and float PARAM/STATE (reference log-probs, gradient
 * buffers) must agree: max |fused - unfused| / max |unfused| <= 1e-5. Shapes are random
 * (DFG_TEST_SEED replays). Cases: GPT-2 with its tied lm_head (wte also the embedding), with
 * and without temperature, gradients returned or accumulated into dfg_nn_grad_buffers (the
 * 6-input linear_logprob_bwd; buffers start non-zero, two steps); an untied (C, V) head after
 * bias_add + gelu, with chunks forced small so that V % v_chunk != 0 and rows % rows_chunk != 0,
 * a fully masked sequence (exactly zero input gradient), the loss not read (dce drops take before
 * the pass runs); logprob alone (vocabulary bias, logits or scaled logits read elsewhere); GRPO's
 * shape (a no-grad reference graph assigning log-probs to a STATE, per-token log-probs feeding a
 * masked sum, an exp() ratio and a KL term); bias_gelu alone.
 * Structure: fused counts, the ops left in the staged graphs, no reads of removed tensors, the
 * fused nodes' attributes; no fusion when the full log-softmax is used elsewhere (exp-summed,
 * output, taken twice), when take's output is bf16, or bias_add's output is read elsewhere; the
 * bf16 path through cast(., f32) fires on the cuda target (planning only). Memory: on a
 * vocabulary-sized problem no live TEMP ends in the vocabulary, no logits bytes are live at the
 * peak and the largest temporary is far below the logits' size. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/nn/dfg_nn.h"
#include "passes/plan.h"
#include "testutil.h"

/* ---------------------------------------------------------------- deterministic data */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A splitmix64 stream: each tensor's values come from its name and the case's seed. */
static uint64_t dr_u64(uint64_t *s) { return mix64(*s += 0x9E3779B97F4A7C15ull); }
static double dr_unit(uint64_t *s) { return (double)(dr_u64(s) >> 11) * (1.0 / 9007199254740992.0); }
static float dr_normal(uint64_t *s) {
    double u1 = dr_unit(s) + 1e-300, u2 = dr_unit(s);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---------------------------------------------------------------- graph queries */
/* Every node of every staged graph, in schedule order: FOR_NODES(p, g, node) { ... } */
#define FOR_NODES(p, gr, node)                                                                  \
    for (int s_ = 0; s_ < (p)->n_stages; s_++)                                                  \
        for (const dfg_graph *gr = (p)->stages[s_].graph; gr; gr = NULL)                        \
            for (int i_ = 0; (p)->stages[s_].kind == DFG_STAGE_GRAPH && i_ < gr->n_nodes; i_++) \
                for (const dfg_node *node = gr->nodes[i_]; node; node = NULL)

static int count_op(const dfg_program *p, dfg_op op) {
    int n = 0;
    FOR_NODES(p, g, node) n += node->op == op;
    return n;
}

static const dfg_node *find_op(const dfg_program *p, dfg_op op, int n_in) {
    FOR_NODES(p, g, node) if (node->op == op && (n_in < 0 || node->n_in == n_in)) return node;
    return NULL;
}

/* Scheduled nodes that read a tensor whose producer was removed (a reader a rewrite forgot). */
static int dead_reads(const dfg_program *p) {
    int n = 0;
    FOR_NODES(p, g, node) for (int j = 0; j < node->n_in; j++) {
        const dfg_tensor *t = node->in[j];
        const dfg_node *m = t->producer;
        bool dead =
            (t->flags & DFG_TF_DEAD) || (t->kind == DFG_TEMP && m && (m->id >= g->n_nodes || g->nodes[m->id] != m));
        if (dead) fprintf(stderr, "  %s reads '%s', whose producer is gone\n", node->name, t->name);
        n += dead;
    }
    return n;
}

static bool last_dim_is(const dfg_tensor *t, int64_t v) { return t->shape.rank && t->shape.d[t->shape.rank - 1] == v; }

/* Forward nodes of op whose output's last dim is v (logits-sized scales, casts, ...). */
static int count_fwd_vocab(const dfg_program *p, dfg_op op, int64_t v) {
    int n = 0;
    FOR_NODES(p, g, node) n += node->op == op && !(node->flags & DFG_NF_BACKWARD) && last_dim_is(node->out[0], v);
    return n;
}

/* Live TEMPs (made by a scheduled node) whose last dim is v; workspaces count unless skipped. */
static int temps_with_last_dim(const dfg_program *p, int64_t v, bool skip_workspace) {
    int n = 0;
    FOR_NODES(p, g, node) for (int k = 0; k < node->n_out; k++) {
        const dfg_tensor *t = node->out[k];
        if (!(skip_workspace && (t->flags & DFG_TF_WORKSPACE)))
            n += t->kind == DFG_TEMP && !(t->flags & DFG_TF_DEAD) && last_dim_is(t, v);
    }
    return n;
}

/* ---------------------------------------------------------------- the fused/unfused harness */
typedef void (*build_fn)(dfg_program *p, const void *cfg);

typedef struct {
    const char *label;
    build_fn build;
    const void *cfg;
    int vocab;      /* i32 INPUTs are drawn from [0, vocab) */
    int64_t budget; /* memory budget of the fused compile (chooses linear_logprob's chunks) */
    int steps;      /* runs of the step */
    int fused[3];   /* expected report counts of the fused compile */
} fcase;

typedef struct {
    dfg_program *p;
    dfg_runtime *rt;
    bool ok;
} variant;

/* Same values for the same tensor name in both programs. Masks (names starting "mask", (B, T))
 * are 0/1 with sequence 1 entirely 0 and token 0 of sequence 0 always 1; advantages are
 * negative (so that GRPO's scalar loss is not a cancelling sum, whose relative error says
 * nothing); i32 inputs are tokens in [0, vocab); gradient buffers and
 * other float STATEs start non-zero so that "+=" and "=" differ. */
static void fill_data(variant *v, const fcase *c, uint64_t seed) {
    dfg_program *p = v->p;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (!dfg_is_persistent(t) || t->kind == DFG_CONST) continue;
        if (t->kind == DFG_STATE && t->dtype == DFG_I32) continue; /* counters keep their init */
        dfg_buffer b;
        if (dfg_runtime_buffer(v->rt, t->name, &b)) continue;
        uint64_t r = seed ^ name_hash(t->name);
        int64_t n = dfg_shape_numel(t->shape);
        if (t->dtype == DFG_I32) {
            for (int64_t k = 0; k < n; k++) ((int32_t *)b.data)[k] = (int32_t)(dr_u64(&r) % (uint64_t)c->vocab);
            continue;
        }
        if (t->dtype != DFG_F32) continue;
        float *x = b.data;
        if (!strncmp(t->name, "mask", 4)) {
            int64_t cols = t->shape.d[t->shape.rank - 1];
            for (int64_t k = 0; k < n; k++) x[k] = (k / cols == 1) ? 0.0f : (dr_unit(&r) < 0.75 ? 1.0f : 0.0f);
            x[0] = 1.0f;                          /* sequence 0 always counts */
        } else if (!strncmp(t->name, "adv", 3)) { /* one sign: GRPO's loss then sums without cancelling */
            for (int64_t k = 0; k < n; k++) x[k] = (float)(-1.5 + dr_unit(&r));
        } else if (!strncmp(t->name, "ref", 3) || !strncmp(t->name, "old", 3)) {
            for (int64_t k = 0; k < n; k++) x[k] = (float)(-4.0 + 3.5 * dr_unit(&r)); /* log-probs */
        } else {
            for (int64_t k = 0; k < n; k++) x[k] = 0.5f * dr_normal(&r);
        }
    }
}

static variant make_variant(const fcase *c, bool fuse, uint64_t seed) {
    variant v = {dfg_program_new(c->label), NULL, false};
    c->build(v.p, c->cfg);
    CHECK(!dfg_program_status(v.p), "%s: build: %s", c->label, dfg_program_error(v.p));
    if (dfg_program_status(v.p)) return v;
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.no_fuse = !fuse;
    o.memory_budget = fuse ? c->budget : 0;
    dfg_status st = dfg_compile(v.p, &o);
    CHECK(st == DFG_OK, "%s (%s): compile: %s", c->label, fuse ? "fused" : "unfused", dfg_program_error(v.p));
    if (st) return v;
    dfg_run_options ro = dfg_run_options_default();
    ro.n_threads = 2;
    ro.seed = 7;
    ro.check = fuse; /* DFG_CHECK: a fused plan that reads bytes outside their lifetime fails the step */
    st = dfg_runtime_create(v.p, &ro, &v.rt);
    CHECK(st == DFG_OK, "%s: create: %s", c->label, dfg_runtime_error(v.rt));
    if (st) return v;
    fill_data(&v, c, seed);
    for (int k = 0; k < c->steps && !st; k++) {
        st = dfg_runtime_step(v.rt);
        CHECK(st == DFG_OK, "%s (%s): step %d: %s", c->label, fuse ? "fused" : "unfused", k, dfg_runtime_error(v.rt));
    }
    v.ok = !st;
    return v;
}

static void free_variant(variant *v) {
    dfg_runtime_free(v->rt);
    dfg_program_free(v->p);
}

/* Compares every f32 dfg_output and PARAM/STATE of the two runs by name; returns how many. */
static int compare(const fcase *c, variant *fu, variant *un) {
    int n = 0;
    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < un->p->n_tensors; i++) {
        const dfg_tensor *t = un->p->tensors[i];
        bool out = (t->flags & DFG_TF_OUTPUT) && !(t->flags & DFG_TF_DEAD);
        if (!out && ((t->kind != DFG_PARAM && t->kind != DFG_STATE) || t->dtype != DFG_F32)) continue;
        const char *name = t->name;
        dfg_buffer a, b;
        dfg_status sa = dfg_runtime_buffer(fu->rt, name, &a), sb = dfg_runtime_buffer(un->rt, name, &b);
        CHECK(!sa && !sb, "%s: '%s' missing (fused %s, unfused %s)", c->label, name, dfg_status_name(sa),
              dfg_status_name(sb));
        if (sa || sb) continue;
        CHECK(a.bytes == b.bytes && a.dtype == DFG_F32 && b.dtype == DFG_F32, "%s: '%s' differs in size or dtype",
              c->label, name);
        if (a.bytes != b.bytes || a.dtype != DFG_F32) continue;
        double e = dfg_test_max_rel_err(a.data, b.data, (int64_t)(b.bytes / 4), 1e-30);
        CHECK(e <= 1e-5, "%s: '%s' fused vs unfused: max rel err %.3g > 1e-5", c->label, name, e);
        if (!(e <= worst)) worst = e, worst_name = name;
        n++;
    }
    printf("%s: %d tensors agree, worst %.2g (%s)\n", c->label, n, worst, worst_name);
    return n;
}

typedef struct {
    variant fu, un;
    bool ok;
} pair;

/* Runs both variants, checks the fused counts and that everything agrees. */
static pair run_pair(const fcase *c, int min_compared) {
    uint64_t seed = dfg_test_u64();
    pair r = {make_variant(c, true, seed), make_variant(c, false, seed), false};
    r.ok = r.fu.ok && r.un.ok;
    if (!r.ok) return r;
    const dfg_report *rf = dfg_program_report(r.fu.p), *ru = dfg_program_report(r.un.p);
    for (int k = 0; k < 3; k++) {
        CHECK(rf->fused[k] == c->fused[k], "%s: fused[%d] = %d, expected %d", c->label, k, rf->fused[k], c->fused[k]);
        CHECK(ru->fused[k] == 0, "%s: the no_fuse compile fused %d patterns of kind %d", c->label, ru->fused[k], k);
    }
    CHECK(rf->recomputed_nodes == 0, "%s: the budget made remat recompute %d nodes", c->label, rf->recomputed_nodes);
    CHECK(dead_reads(r.fu.p) == 0, "%s: the fused program reads tensors whose producers were removed", c->label);
    int n = compare(c, &r.fu, &r.un);
    CHECK(n >= min_compared, "%s: compared %d tensors, expected at least %d", c->label, n, min_compared);
    return r;
}

static void free_pair(pair *r) {
    free_variant(&r->fu);
    free_variant(&r->un);
}

/* A memory budget whose 1/256 is a (min(rows, 1024), vc) f32 workspace: what makes the fuse pass
 * walk the vocabulary in small chunks. */
static int64_t budget_for_chunks(int64_t rows, int64_t vc) { return 256 * (rows < 1024 ? rows : 1024) * 4 * vc; }

/* The v_chunk the fuse pass picks for `rows` rows under `budget` (a vocabulary of 4096): read
 * from a minimal program's linear_logprob, so the cases can choose V % v_chunk != 0 whatever
 * rounding the pass applies. 0 when it did not fuse. */
static int64_t probe_v_chunk(int64_t rows, int64_t budget) {
    dfg_program *p = dfg_program_new("probe");
    dfg_tensor *w = dfg_param(p, "w", DFG_F32, DFG_SHAPE(4096, 1), dfg_init_zeros());
    dfg_tensor *out = dfg_state(p, "out", DFG_F32, DFG_SHAPE(rows), DFG_ROLE_NONE, dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(rows, 1));
    dfg_tensor *t = dfg_input(g, "t", DFG_I32, DFG_SHAPE(rows));
    dfg_assign(g, out, dfg_take(g, dfg_log_softmax(g, dfg_matmul(g, x, w, false, true)), t));
    dfg_stage_graph(p, g, 1);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.memory_budget = budget;
    dfg_status st = dfg_compile(p, &o);
    CHECK(st == DFG_OK, "probe: %s", dfg_program_error(p));
    const dfg_node *lin = st ? NULL : find_op(p, DFG_OP_LINEAR_LOGPROB, 3);
    int64_t vc = lin ? lin->attr->logprob.v_chunk : 0;
    CHECK(vc >= 1 && vc <= 1024, "probe: rows %lld, budget %lld: v_chunk %lld is not a small chunk", (long long)rows,
          (long long)budget, (long long)vc);
    dfg_program_free(p);
    return vc >= 1 && vc <= 1024 ? vc : 256;
}

/* A vocabulary of 1 to 3 chunks of vc plus a partial one. */
static int vocab_with_partial_chunk(int64_t vc) {
    return (int)(dfg_test_int(1, 3) * vc + dfg_test_int(1, (int)vc - 1));
}

/* Reads all of a tensor (the size must match); a failed read is a failed check. */
static bool read_all(variant *v, const char *name, void *dst, size_t bytes) {
    dfg_status st = dfg_runtime_read(v->rt, name, dst, bytes);
    CHECK(st == DFG_OK, "read %s (%zu bytes): %s", name, bytes, dfg_runtime_error(v->rt));
    return st == DFG_OK;
}

/* The linear_logprob node of a fused program: weight layout, 1/T, the chunks the probe said
 * (V % v_chunk != 0), its (rows_chunk, v_chunk) planned workspace. */
static const dfg_node *check_linear(const char *label, const dfg_program *p, bool trans_b, float temp, int64_t rows,
                                    int64_t vc, int64_t V) {
    const dfg_node *lin = find_op(p, DFG_OP_LINEAR_LOGPROB, 3);
    CHECK(lin && lin->attr->logprob.trans_b == trans_b, "%s: no linear_logprob with trans_b %d", label, trans_b);
    if (!lin) return NULL;
    int64_t rc = lin->attr->logprob.rows_chunk, v_chunk = lin->attr->logprob.v_chunk, want_rc = rows < 1024 ? rows : 1024;
    const dfg_tensor *ws = lin->out[2];
    CHECK(fabsf(lin->attr->logprob.inv_temp * temp - 1.0f) < 1e-6f, "%s: inv_temp %g for temp %g", label,
          lin->attr->logprob.inv_temp, temp);
    CHECK(rc == want_rc && v_chunk == vc && V % v_chunk != 0,
          "%s: chunks (%lld, %lld), expected (%lld, %lld) for V %lld", label, (long long)rc, (long long)v_chunk,
          (long long)want_rc, (long long)vc, (long long)V);
    CHECK(ws->shape.rank == 2 && ws->shape.d[0] == rc && ws->shape.d[1] == v_chunk && (ws->flags & DFG_TF_WORKSPACE),
          "%s: the workspace is not a (rows_chunk, v_chunk) planned workspace", label);
    return lin;
}

/* ================================================================ case: GPT-2 with the tied lm_head */
typedef struct {
    int B, T, C, V, L;
    float temp; /* 1: no scale node */
    bool accumulate;
    bool frozen_head; /* wte (the tied lm_head) takes no gradient, as LoRA's base: no dW made */
} gpt2_cfg;

static void build_gpt2(dfg_program *p, const void *vcfg) {
    const gpt2_cfg *c = vcfg;
    dfg_model *m = calloc(1, sizeof(*m));
    dfg_model_config mc = {.n_layer = c->L, .n_head = 2, .n_embd = c->C, .vocab_size = c->V, .block_size = c->T, .ln_eps = 1e-5f};
    if (dfg_model_params(p, "", mc, m)) {
        free(m);
        return;
    }
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *tok = dfg_input(g, "tokens", DFG_I32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *tgt = dfg_input(g, "targets", DFG_I32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *mask = dfg_input(g, "mask", DFG_F32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *logits = dfg_model_logits(g, m, tok); /* (B, T, V) */
    if (c->temp != 1.0f) logits = dfg_scale(g, logits, 1.0f / c->temp);
    dfg_tensor *logp = dfg_take(g, dfg_log_softmax(g, logits), tgt); /* (B, T) */
    dfg_tensor *loss = dfg_scale(g, dfg_sum(g, dfg_masked_sum(g, logp, mask, 1), 0), -1.0f / (float)(c->B * c->T));
    /* a training step that reads nothing but the gradients: dce drops take, the fuse pass must
     * still find the pattern */
    if (!c->accumulate) dfg_output(g, logp, "logp"), dfg_output(g, loss, "loss");
    if (c->accumulate) {
        dfg_tensor *buf[4 + DFG_MODEL_PARAMS_PER_BLOCK * 4];
        dfg_nn_grad_buffers(p, m->params, m->n_params, "", buf);
        dfg_backward_accumulate(g, loss, m->params, m->n_params, buf);
    } else {
        dfg_tensor *grads[4 + DFG_MODEL_PARAMS_PER_BLOCK * 4], *wrt[4 + DFG_MODEL_PARAMS_PER_BLOCK * 4];
        int n = 0;
        for (int i = 0; i < m->n_params; i++)
            if (!c->frozen_head || strcmp(dfg_tensor_name(m->params[i]), "wte.weight")) wrt[n++] = m->params[i];
        if (!dfg_backward(g, loss, wrt, n, grads))
            for (int i = 0; i < n; i++) {
                char name[300];
                snprintf(name, sizeof(name), "d.%s", dfg_tensor_name(wrt[i]));
                dfg_output(g, grads[i], name);
            }
    }
    dfg_stage_graph(p, g, 1);
    free(m);
}

static void test_gpt2_tied(bool accumulate, float temp, bool frozen_head) {
    gpt2_cfg c = {dfg_test_int(2, 3), dfg_test_int(5, 9), 16, 0, dfg_test_int(1, 2), temp, accumulate, frozen_head};
    int64_t rows = (int64_t)c.B * c.T, budget = budget_for_chunks(rows, dfg_test_int(1, 2) * 256);
    int64_t vc = probe_v_chunk(rows, budget);
    c.V = vocab_with_partial_chunk(vc);
    char label[160];
    snprintf(label, sizeof(label), "gpt2 tied B=%d T=%d V=%d L=%d temp=%g %s%s", c.B, c.T, c.V, c.L, temp,
             accumulate ? "accumulate" : "backward", frozen_head ? " frozen head" : "");
    fcase fc = {label, build_gpt2, &c, c.V, budget, accumulate ? 2 : 1, {0, 1, c.L}};
    /* PARAMs, and the grads of 4 + 12 L params (outputs, or buffers) + logp, loss when output */
    int n_params = 4 + DFG_MODEL_PARAMS_PER_BLOCK * c.L;
    pair r = run_pair(&fc, (accumulate ? 0 : 2) + 2 * n_params - (frozen_head ? 1 : 0));
    if (r.ok) {
        const dfg_program *p = r.fu.p;
        const dfg_node *lin = check_linear(label, p, true, temp, rows, vc, c.V);
        if (lin)
            CHECK(strcmp(lin->in[1]->name, "wte.weight") == 0, "%s: linear_logprob's weight is '%s', not wte", label,
                  lin->in[1]->name);
        CHECK(count_op(p, DFG_OP_LOG_SOFTMAX) == 0 && count_op(p, DFG_OP_TAKE) == 0 &&
                  count_fwd_vocab(p, DFG_OP_AFFINE, c.V) == 0 && count_op(p, DFG_OP_LOG_SOFTMAX_BWD) == 0 &&
                  count_op(p, DFG_OP_TAKE_BWD) == 0,
              "%s: unfused log-softmax ops left after fusion", label);
        CHECK(count_op(p, DFG_OP_BIAS_GELU) == c.L && count_op(p, DFG_OP_GELU) == 0 &&
                  count_op(p, DFG_OP_BIAS_GELU_BWD) == c.L && count_op(p, DFG_OP_GELU_BWD) == 0,
              "%s: bias_gelu %d (bwd %d), gelu %d (bwd %d)", label, count_op(p, DFG_OP_BIAS_GELU),
              count_op(p, DFG_OP_BIAS_GELU_BWD), count_op(p, DFG_OP_GELU), count_op(p, DFG_OP_GELU_BWD));
        /* the accumulating form adds dW into the buffer: no separate dW of wte, and it is the
         * node's own output 1 that is the buffer's new version */
        const dfg_node *bwd6 = find_op(p, DFG_OP_LINEAR_LOGPROB_BWD, 6),
                       *bwd5 = find_op(p, DFG_OP_LINEAR_LOGPROB_BWD, 5);
        if (accumulate) {
            CHECK(bwd6 && !bwd5, "%s: expected the 6-input linear_logprob_bwd only (6: %p, 5: %p)", label, (void *)bwd6,
                  (void *)bwd5);
            if (bwd6)
                CHECK(bwd6->out[1]->version_of && !strcmp(bwd6->out[1]->version_of->name, "grad.wte.weight"),
                      "%s: the accumulating bwd writes '%s'", label,
                      bwd6->out[1]->version_of ? bwd6->out[1]->version_of->name : "(not a state)");
        } else {
            CHECK(bwd5 && !bwd6, "%s: expected the 5-input linear_logprob_bwd (dfg_backward returns dW)", label);
        }
        /* a frozen head: the backward leaves dW out (a one-float stand-in), else dW is (V, C) */
        const dfg_node *bwd = bwd6 ? bwd6 : bwd5;
        if (bwd)
            CHECK(bwd->attr->logprob.no_dweight == frozen_head &&
                      dfg_tensor_numel(bwd->out[1]) == (frozen_head ? 1 : (int64_t)c.V * c.C),
                  "%s: linear_logprob_bwd no_dweight %d, dW of %lld elements", label, bwd->attr->logprob.no_dweight,
                  (long long)dfg_tensor_numel(bwd->out[1]));
        if (accumulate) {
            free_pair(&r);
            return;
        }
        float logp[64];
        bool finite_neg = read_all(&r.fu, "logp", logp, sizeof(float) * (size_t)rows);
        for (int64_t k = 0; k < rows; k++) finite_neg &= isfinite(logp[k]) && logp[k] < 0.0f;
        CHECK(finite_neg, "%s: per-token log-probs must be finite and < 0", label);
        float loss = NAN;
        read_all(&r.fu, "loss", &loss, sizeof(loss));
        CHECK(isfinite(loss) && loss > 0.0f, "%s: loss %g", label, loss);
    }
    free_pair(&r);
}

/* ================================================================ case: untied (C, V) head after bias_add + gelu */
typedef struct {
    int B, T, C0, C, V;
    float temp;
    int variant; /* 0: linear_logprob; 1: logits also dfg_output'd; 2: vocabulary bias; 3: scaled logits output'd;
                  * 4: linear_logprob, the loss not output (dce removes take before fuse runs) */
} head_cfg;

static void build_head(dfg_program *p, const void *vcfg) {
    const head_cfg *c = vcfg;
    dfg_tensor *w1 = dfg_param(p, "w1", DFG_F32, DFG_SHAPE(c->C0, c->C), dfg_init_normal(0, 0.5f));
    dfg_tensor *b1 = dfg_param(p, "b1", DFG_F32, DFG_SHAPE(c->C), dfg_init_zeros());
    dfg_tensor *w = dfg_param(p, "w_head", DFG_F32, DFG_SHAPE(c->C, c->V), dfg_init_normal(0, 0.5f));
    dfg_tensor *bv = c->variant == 2 ? dfg_param(p, "b_vocab", DFG_F32, DFG_SHAPE(c->V), dfg_init_zeros()) : NULL;
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(c->B, c->T, c->C0));
    dfg_tensor *tgt = dfg_input(g, "targets", DFG_I32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *mask = dfg_input(g, "mask", DFG_F32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *h = dfg_gelu(g, dfg_bias_add(g, dfg_matmul(g, x, w1, false, false), b1)); /* (B, T, C) */
    dfg_tensor *logits = dfg_matmul(g, h, w, false, false);                               /* (B, T, V) */
    if (c->variant == 1) dfg_output(g, logits, "logits");
    if (bv) logits = dfg_bias_add(g, logits, bv);
    if (c->temp != 1.0f) logits = dfg_scale(g, logits, 1.0f / c->temp);
    if (c->variant == 3) dfg_output(g, logits, "scaled_logits");
    dfg_tensor *logp = dfg_take(g, dfg_log_softmax(g, logits), tgt);
    dfg_tensor *loss = dfg_scale(g, dfg_sum(g, dfg_masked_sum(g, logp, mask, 1), 0), -1.0f / (float)(c->B * c->T));
    if (c->variant != 4) dfg_output(g, loss, "loss");
    dfg_tensor *wrt[5] = {x, w1, b1, w, bv}, *grads[5];
    static const char *const names[5] = {"dx", "dw1", "db1", "dw_head", "db_vocab"};
    int n = bv ? 5 : 4;
    if (!dfg_backward(g, loss, wrt, n, grads))
        for (int i = 0; i < n; i++) dfg_output(g, grads[i], names[i]);
    dfg_stage_graph(p, g, 1);
}

static void test_head(int variant, bool many_rows) {
    head_cfg c = {
        .B = dfg_test_int(2, 4), .T = dfg_test_int(3, 12), .C0 = dfg_test_int(5, 12), .C = dfg_test_int(8, 20)};
    c.temp = dfg_test_int(0, 1) ? 1.0f : dfg_test_uniform(0.3f, 2.0f);
    c.variant = variant;
    if (many_rows) c.B = 4, c.T = dfg_test_int(257, 320); /* rows in (1024, 1280]: two row chunks */
    int64_t rows = (int64_t)c.B * c.T, budget = budget_for_chunks(rows, dfg_test_int(1, 2) * 256), vc = 0;
    if (variant == 0 || variant == 4)
        c.V = vocab_with_partial_chunk(vc = probe_v_chunk(rows, budget));
    else
        c.V = dfg_test_int(20, 300);
    char label[200];
    static const char *const vname[] = {"linear", "logits read elsewhere", "vocab bias", "scaled logits read elsewhere",
                                        "linear, gradients only"};
    snprintf(label, sizeof(label), "untied head (%s) B=%d T=%d C=%d V=%d temp=%g", vname[variant], c.B, c.T, c.C, c.V,
             c.temp);
    bool linear = variant == 0 || variant == 4;
    fcase fc = {label, build_head, &c, c.V, linear ? budget : 0, 1, {linear ? 0 : 1, linear, 1}};
    pair r = run_pair(&fc, 3 + 3 + (variant != 4) + (variant == 2 ? 2 : 0) + (variant == 1 || variant == 3));
    if (!r.ok) {
        free_pair(&r);
        return;
    }
    const dfg_program *p = r.fu.p;
    if (linear) {
        const dfg_node *lin = check_linear(label, p, false, c.temp, rows, vc, c.V);
        if (lin && many_rows)
            CHECK(rows % lin->attr->logprob.rows_chunk != 0 && rows > lin->attr->logprob.rows_chunk,
                  "%s: rows %lld fit one chunk of %lld", label, (long long)rows,
                  (long long)lin->attr->logprob.rows_chunk);
        CHECK(count_op(p, DFG_OP_MATMUL) == 3 && count_op(p, DFG_OP_LOGPROB) == 0 && count_op(p, DFG_OP_TAKE) == 0,
              "%s: %d matmuls (expected the first layer's and its two gradients), %d logprob", label,
              count_op(p, DFG_OP_MATMUL), count_op(p, DFG_OP_LOGPROB));
    } else {
        const dfg_node *lp = find_op(p, DFG_OP_LOGPROB, 2);
        CHECK(lp && count_op(p, DFG_OP_LINEAR_LOGPROB) == 0, "%s: expected logprob and no linear_logprob", label);
        CHECK(count_op(p, DFG_OP_LOGPROB_BWD) == 1 && count_op(p, DFG_OP_LOG_SOFTMAX) == 0,
              "%s: logprob_bwd %d, log_softmax %d", label, count_op(p, DFG_OP_LOGPROB_BWD),
              count_op(p, DFG_OP_LOG_SOFTMAX));
        if (lp) {
            /* a scale read elsewhere stays a node: logprob then works on its output, at 1/T = 1 */
            float want = variant == 3 ? 1.0f : 1.0f / c.temp;
            CHECK(fabsf(lp->attr->logprob.inv_temp - want) <= 1e-6f * want, "%s: inv_temp %g, expected %g", label,
                  lp->attr->logprob.inv_temp, want);
            CHECK(count_fwd_vocab(p, DFG_OP_AFFINE, c.V) == (variant == 3 && c.temp != 1.0f),
                  "%s: %d logits scales left", label, count_fwd_vocab(p, DFG_OP_AFFINE, c.V));
        }
    }
    /* sequence 1 is fully masked: d loss / d x is exactly zero there, and not elsewhere */
    int64_t per_seq = (int64_t)c.T * c.C0;
    float *dx = calloc((size_t)(rows * c.C0), sizeof(float));
    bool zero = read_all(&r.fu, "dx", dx, sizeof(float) * (size_t)(rows * c.C0)), other_nonzero = false;
    for (int64_t k = 0; k < per_seq; k++) zero &= dx[per_seq + k] == 0.0f;
    for (int64_t k = 0; k < per_seq; k++) other_nonzero |= dx[k] != 0.0f;
    CHECK(zero, "%s: the fully masked sequence has a non-zero input gradient", label);
    CHECK(other_nonzero, "%s: sequence 0's input gradient is all zero", label);
    free(dx);
    free_pair(&r);
}

/* ================================================================ case: GRPO's reference graph and reused log-probs */
typedef struct {
    int B, T, C, V;
    float temp, beta;
} grpo_cfg;

static void build_grpo(dfg_program *p, const void *vcfg) {
    const grpo_cfg *c = vcfg;
    dfg_tensor *lnw = dfg_param(p, "ln.w", DFG_F32, DFG_SHAPE(c->C), dfg_init_ones());
    dfg_tensor *lnb = dfg_param(p, "ln.b", DFG_F32, DFG_SHAPE(c->C), dfg_init_zeros());
    dfg_tensor *w = dfg_param(p, "w_head", DFG_F32, DFG_SHAPE(c->V, c->C), dfg_init_normal(0, 0.5f));
    dfg_tensor *w_ref =
        dfg_state(p, "ref.w_head", DFG_F32, DFG_SHAPE(c->V, c->C), DFG_ROLE_REF_MODEL, dfg_init_zeros());
    dfg_tensor *ref_logp = dfg_state(p, "ref_logp", DFG_F32, DFG_SHAPE(c->B, c->T), DFG_ROLE_ROLLOUT, dfg_init_zeros());
    /* ref: no gradient anywhere; the log-probs go to a STATE */
    dfg_graph *rg = dfg_graph_new(p, "ref");
    dfg_tensor *x = dfg_input(rg, "x", DFG_F32, DFG_SHAPE(c->B, c->T, c->C));
    dfg_tensor *tgt = dfg_input(rg, "targets", DFG_I32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *mask = dfg_input(rg, "mask", DFG_F32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *old = dfg_input(rg, "old_logp", DFG_F32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *adv = dfg_input(rg, "advantages", DFG_F32, DFG_SHAPE(c->B, 1));
    dfg_tensor *h_ref = dfg_layernorm(rg, x, lnw, lnb, 1e-5f);
    dfg_tensor *zr = dfg_scale(rg, dfg_matmul(rg, h_ref, w_ref, false, true), 1.0f / c->temp);
    dfg_assign(rg, ref_logp, dfg_take(rg, dfg_log_softmax(rg, zr), tgt));
    dfg_stage_graph(p, rg, 1);
    /* train: logp feeds a masked sum, a ratio exp(logp - old) and the k3 KL term */
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *h = dfg_layernorm(g, x, lnw, lnb, 1e-5f);
    dfg_tensor *z = dfg_scale(g, dfg_matmul(g, h, w, false, true), 1.0f / c->temp);
    dfg_tensor *logp = dfg_output(g, dfg_take(g, dfg_log_softmax(g, z), tgt), "logp"); /* (B, T) */
    dfg_tensor *d = dfg_mul(g, dfg_sub(g, ref_logp, logp), mask);
    dfg_tensor *kl = dfg_add_scalar(g, dfg_sub(g, dfg_exp(g, d), d), -1.0f);
    dfg_tensor *ratio = dfg_exp(g, dfg_mul(g, dfg_sub(g, logp, old), mask));
    dfg_tensor *per_token = dfg_sub(g, dfg_scale(g, kl, c->beta), dfg_mul(g, ratio, adv));
    dfg_tensor *scale = dfg_scale(g, dfg_masked_sum(g, logp, mask, 1), -0.01f); /* a plain masked sum of logp too */
    dfg_tensor *loss = dfg_add(g, dfg_sum(g, dfg_masked_sum(g, per_token, mask, 1), 0), dfg_sum(g, scale, 0));
    loss = dfg_output(g, dfg_scale(g, loss, 1.0f / (float)(c->B * c->T)), "loss");
    dfg_tensor *wrt[3] = {lnw, lnb, w}, *grads[3];
    static const char *const names[3] = {"d.ln.w", "d.ln.b", "d.w_head"};
    if (!dfg_backward(g, loss, wrt, 3, grads))
        for (int i = 0; i < 3; i++) dfg_output(g, grads[i], names[i]);
    dfg_stage_graph(p, g, 1);
}

static void test_grpo(void) {
    grpo_cfg c = {
        .B = dfg_test_int(2, 4), .T = dfg_test_int(4, 10), .C = dfg_test_int(8, 24), .V = dfg_test_int(40, 300)};
    c.temp = dfg_test_uniform(0.5f, 1.5f), c.beta = 0.04f;
    char label[160];
    snprintf(label, sizeof(label), "grpo ref+train B=%d T=%d C=%d V=%d temp=%g", c.B, c.T, c.C, c.V, c.temp);
    fcase fc = {label, build_grpo, &c, c.V, 0, 1, {0, 2, 0}};
    pair r = run_pair(&fc, 3 + 2 + 2 + 3); /* PARAMs, ref STATEs, logp + loss, 3 grads */
    if (r.ok) {
        const dfg_program *p = r.fu.p;
        /* one linear_logprob per graph; only the train graph differentiates it */
        int per_graph[2] = {0, 0};
        int bwd_in_ref = 0;
        FOR_NODES(p, g, node) {
            if (node->op == DFG_OP_LINEAR_LOGPROB) per_graph[strcmp(g->name, "ref") != 0]++;
            bwd_in_ref += node->op == DFG_OP_LINEAR_LOGPROB_BWD && strcmp(g->name, "ref") == 0;
        }
        CHECK(bwd_in_ref == 0, "%s: %d linear_logprob_bwd in the no-grad ref graph", label, bwd_in_ref);
        CHECK(per_graph[0] == 1 && per_graph[1] == 1, "%s: linear_logprob in ref %d, in train %d", label, per_graph[0],
              per_graph[1]);
        CHECK(count_op(p, DFG_OP_LINEAR_LOGPROB_BWD) == 1, "%s: %d linear_logprob_bwd", label,
              count_op(p, DFG_OP_LINEAR_LOGPROB_BWD));
        /* the reference log-probs are real log-probabilities, not what fill_data wrote */
        float *ref = calloc((size_t)(c.B * c.T), sizeof(float));
        bool ok = read_all(&r.fu, "ref_logp", ref, sizeof(float) * (size_t)(c.B * c.T));
        for (int k = 0; k < c.B * c.T; k++) ok &= ref[k] < 0.0f && ref[k] > -60.0f;
        CHECK(ok, "%s: ref_logp holds values that are not log-probabilities", label);
        free(ref);
    }
    free_pair(&r);
}

/* ================================================================ case: bias_gelu alone */
typedef struct {
    int R, N;
} bg_cfg;

static void build_bias_gelu(dfg_program *p, const void *vcfg) {
    const bg_cfg *c = vcfg;
    dfg_tensor *b = dfg_param(p, "bias", DFG_F32, DFG_SHAPE(c->N), dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(2, c->R, c->N));
    dfg_tensor *wgt = dfg_input(g, "weights", DFG_F32, DFG_SHAPE(2, c->R, c->N));
    dfg_tensor *y = dfg_output(g, dfg_gelu(g, dfg_bias_add(g, x, b)), "y");
    dfg_tensor *loss = dfg_sum(g, dfg_sum(g, dfg_sum(g, dfg_mul(g, y, wgt), 2), 1), 0);
    dfg_tensor *wrt[2] = {x, b}, *grads[2];
    if (!dfg_backward(g, loss, wrt, 2, grads)) dfg_output(g, grads[0], "dx"), dfg_output(g, grads[1], "dbias");
    dfg_stage_graph(p, g, 1);
}

static void test_bias_gelu(void) {
    bg_cfg c = {dfg_test_int(1, 40), dfg_test_int(1, 70)};
    char label[80];
    snprintf(label, sizeof(label), "bias_gelu R=%d N=%d", c.R, c.N);
    fcase fc = {label, build_bias_gelu, &c, 1, 0, 1, {0, 0, 1}};
    pair r = run_pair(&fc, 4);
    if (r.ok) {
        CHECK(count_op(r.fu.p, DFG_OP_BIAS_GELU) == 1 && count_op(r.fu.p, DFG_OP_BIAS_GELU_BWD) == 1 &&
                  count_op(r.fu.p, DFG_OP_GELU) == 0 && count_op(r.fu.p, DFG_OP_BIAS_ADD) == 0,
              "%s: expected bias_gelu and its bwd in place of bias_add and gelu", label);
        /* independent values: y = gelu(x + b) element by element, in double */
        dfg_buffer xb, bb, yb;
        bool have = !dfg_runtime_buffer(r.fu.rt, "x", &xb) && !dfg_runtime_buffer(r.fu.rt, "bias", &bb) &&
                    !dfg_runtime_buffer(r.fu.rt, "y", &yb);
        CHECK(have, "%s: x, bias or y not readable", label);
        double worst = have ? 0.0 : 1.0;
        for (int64_t k = 0; have && k < 2 * c.R * c.N; k++) {
            double u = (double)((float *)xb.data)[k] + ((float *)bb.data)[k % c.N];
            double want = 0.5 * u * (1.0 + tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)));
            double e = fabs(((float *)yb.data)[k] - want) / (1.0 + fabs(want));
            if (!(e <= worst)) worst = e;
        }
        CHECK(worst <= 1e-6, "%s: bias_gelu's y differs from gelu(x + b) by %g", label, worst);
    }
    free_pair(&r);
}

/* ================================================================ patterns that must not fire (planning only) */
typedef struct {
    dfg_program *p;
    dfg_graph *g;
    dfg_tensor *h, *w, *tgt, *mask, *lnw, *lnb;
} small;

static small small_begin(const char *name, dfg_dtype dt, int B, int T, int C, int V) {
    small s;
    s.p = dfg_program_new(name);
    s.w = dfg_param(s.p, "w_head", dt, DFG_SHAPE(V, C), dfg_init_normal(0, 0.5f));
    s.lnw = dfg_param(s.p, "ln.w", dt, DFG_SHAPE(C), dfg_init_ones());
    s.lnb = dfg_param(s.p, "ln.b", dt, DFG_SHAPE(C), dfg_init_zeros());
    s.g = dfg_graph_new(s.p, "train");
    dfg_tensor *x = dfg_input(s.g, "x", dt, DFG_SHAPE(B, T, C));
    s.tgt = dfg_input(s.g, "targets", DFG_I32, DFG_SHAPE(B, T));
    s.mask = dfg_input(s.g, "mask", DFG_F32, DFG_SHAPE(B, T));
    s.h = dfg_layernorm(s.g, x, s.lnw, s.lnb, 1e-5f);
    return s;
}

/* Differentiates loss w.r.t. the three PARAMs, stages and compiles; returns the report or NULL. */
static const dfg_report *small_end(small *s, dfg_tensor *loss, dfg_target target, bool accumulate) {
    dfg_tensor *wrt[3] = {s->w, s->lnw, s->lnb}, *grads[3];
    if (accumulate) {
        dfg_tensor *buf[3];
        dfg_nn_grad_buffers(s->p, wrt, 3, "", buf);
        dfg_backward_accumulate(s->g, loss, wrt, 3, buf);
    } else if (!dfg_backward(s->g, loss, wrt, 3, grads)) {
        dfg_output(s->g, grads[0], "dw"), dfg_output(s->g, grads[1], "dlnw"), dfg_output(s->g, grads[2], "dlnb");
    }
    dfg_stage_graph(s->p, s->g, 1);
    dfg_options o = dfg_options_default(target);
    dfg_status st = dfg_compile(s->p, &o);
    CHECK(st == DFG_OK, "%s: compile: %s", dfg_program_name(s->p), dfg_program_error(s->p));
    return st ? NULL : dfg_program_report(s->p);
}

static dfg_tensor *masked_mean(small *s, dfg_tensor *logp) {
    return dfg_scale(s->g, dfg_sum(s->g, dfg_masked_sum(s->g, logp, s->mask, 1), 0), -0.1f);
}

static void test_no_fire(void) {
    int B = 2, T = 5, C = 8, V = 37;
    /* the full log-softmax is also exp()-summed (an entropy-like term), a dfg_output, or taken
     * twice; take's output is bf16 (a bf16 log-softmax keeps its dtype; cuda plan); control:
     * nothing else reads it, and linear_logprob fires */
    static const char *const what[] = {"exp-summed", "output", "taken twice", "bf16 take", "control"};
    for (int k = 0; k < 5; k++) {
        small s = small_begin(what[k], k == 3 ? DFG_BF16 : DFG_F32, B, T, C, V);
        dfg_tensor *ls = dfg_log_softmax(s.g, dfg_matmul(s.g, s.h, s.w, false, true));
        if (k == 1) dfg_output(s.g, ls, "lsm");
        dfg_tensor *lp = dfg_take(s.g, ls, s.tgt);
        if (k == 3) CHECK(dfg_tensor_dtype(lp) == DFG_BF16, "bf16 take gives %s", dfg_dtype_name(dfg_tensor_dtype(lp)));
        dfg_tensor *loss = masked_mean(&s, k == 3 ? dfg_cast(s.g, lp, DFG_F32) : lp);
        if (k == 0) loss = dfg_add(s.g, loss, dfg_sum(s.g, dfg_sum(s.g, dfg_sum(s.g, dfg_exp(s.g, ls), 2), 1), 0));
        if (k == 2)
            loss = dfg_add(s.g, loss,
                           masked_mean(&s, dfg_take(s.g, ls, dfg_input(s.g, "targets2", DFG_I32, DFG_SHAPE(B, T)))));
        const dfg_report *r = small_end(&s, loss, k == 3 ? DFG_TARGET_CUDA : DFG_TARGET_CPU, false);
        int fire = k == 4;
        if (r)
            CHECK(r->fused[0] == 0 && r->fused[1] == fire && count_op(s.p, DFG_OP_LOG_SOFTMAX) == !fire &&
                      count_op(s.p, DFG_OP_LINEAR_LOGPROB) == fire && count_op(s.p, DFG_OP_LOGPROB) == 0,
                  "log-softmax %s: fused %d/%d, log_softmax %d (expected %s)", what[k], r->fused[0], r->fused[1],
                  count_op(s.p, DFG_OP_LOG_SOFTMAX), fire ? "fused" : "unfused");
        dfg_program_free(s.p);
    }
    /* (e) bias_add's output read elsewhere: no bias_gelu */
    {
        dfg_program *p = dfg_program_new("bias_add read elsewhere");
        dfg_tensor *b = dfg_param(p, "b", DFG_F32, DFG_SHAPE(C), dfg_init_zeros());
        dfg_graph *g = dfg_graph_new(p, "g");
        dfg_tensor *x = dfg_input(g, "x", DFG_F32, DFG_SHAPE(B, C));
        dfg_tensor *u = dfg_bias_add(g, x, b);
        dfg_tensor *loss = dfg_sum(g, dfg_sum(g, dfg_add(g, dfg_gelu(g, u), u), 1), 0);
        dfg_tensor *gb;
        dfg_backward(g, loss, &b, 1, &gb);
        dfg_output(g, gb, "db");
        dfg_stage_graph(p, g, 1);
        dfg_options o = dfg_options_default(DFG_TARGET_CPU);
        CHECK(dfg_compile(p, &o) == DFG_OK, "bias_add elsewhere: %s", dfg_program_error(p));
        const dfg_report *r = dfg_program_report(p);
        if (r)
            CHECK(r->fused[2] == 0 && count_op(p, DFG_OP_GELU_BWD) == 1 &&
                      count_op(p, DFG_OP_BIAS_GELU) + count_op(p, DFG_OP_BIAS_GELU_BWD) == 0,
                  "bias_add read elsewhere: fused %d, gelu %d", r->fused[2], count_op(p, DFG_OP_GELU));
        dfg_program_free(p);
    }
}

/* ================================================================ bf16 through cast(., f32) on the cuda target */
static void test_bf16_cuda_plan(void) {
    int B = 2, T = 7, C = 16, V = 1000;
    float temp = 0.8f;
    small s = small_begin("bf16 cast cuda", DFG_BF16, B, T, C, V);
    dfg_tensor *z = dfg_cast(s.g, dfg_matmul(s.g, s.h, s.w, false, true), DFG_F32);
    z = dfg_scale(s.g, z, 1.0f / temp);
    dfg_tensor *lp = dfg_take(s.g, dfg_log_softmax(s.g, z), s.tgt);
    const dfg_report *r = small_end(&s, masked_mean(&s, lp), DFG_TARGET_CUDA, true);
    if (r) {
        CHECK(r->fused[1] == 1 && r->fused[0] == 0, "bf16 cuda: fused %d/%d", r->fused[0], r->fused[1]);
        const dfg_node *lin = find_op(s.p, DFG_OP_LINEAR_LOGPROB, 3);
        CHECK(lin && lin->in[0]->dtype == DFG_BF16 && lin->in[1]->dtype == DFG_BF16 && lin->out[0]->dtype == DFG_F32,
              "bf16 cuda: linear_logprob should read the bf16 hidden and weight and give f32 log-probs");
        if (lin)
            CHECK(fabsf(lin->attr->logprob.inv_temp * temp - 1.0f) < 1e-6f, "bf16 cuda: inv_temp %g",
                  lin->attr->logprob.inv_temp);
        CHECK(count_op(s.p, DFG_OP_CAST) == 0 && count_op(s.p, DFG_OP_LOG_SOFTMAX) == 0 &&
                  count_fwd_vocab(s.p, DFG_OP_AFFINE, V) == 0 && count_op(s.p, DFG_OP_MATMUL) == 0,
              "bf16 cuda: cast %d, log_softmax %d, logits scale %d, matmul %d left", count_op(s.p, DFG_OP_CAST),
              count_op(s.p, DFG_OP_LOG_SOFTMAX), count_fwd_vocab(s.p, DFG_OP_AFFINE, V), count_op(s.p, DFG_OP_MATMUL));
        const dfg_node *b6 = find_op(s.p, DFG_OP_LINEAR_LOGPROB_BWD, 6);
        CHECK(b6 && b6->out[1]->dtype == DFG_BF16, "bf16 cuda: expected the accumulating bf16 linear_logprob_bwd");
        CHECK(temps_with_last_dim(s.p, V, true) == 0, "bf16 cuda: %d live TEMPs end in the vocabulary",
              temps_with_last_dim(s.p, V, true));
    }
    dfg_program_free(s.p);
}

/* ================================================================ memory: a vocabulary-sized problem (planning only) */
/* untied: the head is its own (V, C) parameter, as Llama's and Qwen's lm_head.weight */
static void plan_vocab(bool fuse, bool untied, int64_t rows_b, int64_t T, int64_t C, int64_t V, dfg_program **out) {
    dfg_program *p = dfg_program_new(fuse ? "vocab fused" : "vocab unfused");
    dfg_tensor *wte = dfg_param(p, "wte.weight", DFG_F32, DFG_SHAPE(V, C), dfg_init_normal(0, 0.02f));
    dfg_tensor *head = untied ? dfg_param(p, "lm_head.weight", DFG_F32, DFG_SHAPE(V, C), dfg_init_normal(0, 0.02f)) : wte;
    dfg_tensor *lnw = dfg_param(p, "ln.w", DFG_F32, DFG_SHAPE(C), dfg_init_ones());
    dfg_tensor *lnb = dfg_param(p, "ln.b", DFG_F32, DFG_SHAPE(C), dfg_init_zeros());
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *tok = dfg_input(g, "tokens", DFG_I32, DFG_SHAPE(rows_b, T));
    dfg_tensor *tgt = dfg_input(g, "targets", DFG_I32, DFG_SHAPE(rows_b, T));
    dfg_tensor *mask = dfg_input(g, "mask", DFG_F32, DFG_SHAPE(rows_b, T));
    dfg_tensor *h = dfg_layernorm(g, dfg_embed(g, wte, tok), lnw, lnb, 1e-5f);
    dfg_tensor *lp = dfg_take(g, dfg_log_softmax(g, dfg_matmul(g, h, head, false, true)), tgt);
    dfg_tensor *loss = dfg_sum(g, dfg_masked_sum(g, lp, mask, 1), 0);
    dfg_tensor *params[4] = {wte, lnw, lnb, head}, *buf[4];
    int n_params = untied ? 4 : 3;
    dfg_nn_grad_buffers(p, params, n_params, "", buf);
    dfg_backward_accumulate(g, loss, params, n_params, buf);
    dfg_stage_graph(p, g, 1);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.no_fuse = !fuse;
    CHECK(dfg_compile(p, &o) == DFG_OK, "%s: %s", dfg_program_name(p), dfg_program_error(p));
    *out = p;
}

static void test_memory_effect(bool untied) {
    const char *lab = untied ? "vocab-sized, untied head" : "vocab-sized";
    int64_t B = 16, T = 256, C = 64, V = 50257, rows = B * T;
    size_t logits_bytes = (size_t)(rows * V * 4);
    dfg_program *pf, *pu;
    plan_vocab(true, untied, B, T, C, V, &pf);
    plan_vocab(false, untied, B, T, C, V, &pu);
    const dfg_report *rf = dfg_program_report(pf), *ru = dfg_program_report(pu);
    if (rf && ru) {
        printf(
            "%s: logits %.1f MiB; largest temp fused %.2f MiB ('%s'), unfused %.1f MiB; arena fused %.1f MiB, "
            "unfused %.1f MiB\n",
            lab, logits_bytes / 1048576.0, rf->largest_temp_bytes / 1048576.0,
            rf->largest_temp ? rf->largest_temp->name : "-", ru->largest_temp_bytes / 1048576.0,
            rf->arena_bytes / 1048576.0, ru->arena_bytes / 1048576.0);
        CHECK(rf->fused[1] == 1, "%s: linear_logprob did not fire", lab);
        CHECK(ru->largest_temp_bytes >= logits_bytes,
              "%s: unfused largest temp %zu < logits %zu (vacuous test)", lab, ru->largest_temp_bytes,
              logits_bytes);
        CHECK(rf->largest_temp_bytes * 16 <= logits_bytes,
              "%s: fused largest temp %zu is not far below logits %zu", lab, rf->largest_temp_bytes, logits_bytes);
        CHECK(rf->peak[DFG_CAT_LOGITS] == 0, "%s: %zu bytes of logits live at the fused peak", lab,
              rf->peak[DFG_CAT_LOGITS]);
        CHECK(ru->peak[DFG_CAT_LOGITS] >= logits_bytes, "%s: the unfused peak holds only %zu bytes of logits", lab,
              ru->peak[DFG_CAT_LOGITS]);
        /* the lm_head's own output is logits in the report, tied or untied */
        const dfg_node *mm = NULL;
        FOR_NODES(pu, g, node) if (node->op == DFG_OP_MATMUL && node->attr->matmul.trans_b &&
                                   node->out[0]->shape.d[node->out[0]->shape.rank - 1] == V) mm = node;
        int hb = mm ? pu->plan->buf_of[mm->out[0]->id] : -1;
        CHECK(hb >= 0 && pu->plan->bufs[hb].cat == DFG_CAT_LOGITS, "%s: the unfused lm_head's output is in category %d, "
              "not logits", lab, hb >= 0 ? (int)pu->plan->bufs[hb].cat : -1);
        CHECK(temps_with_last_dim(pf, V, false) == 0, "%s: %d live TEMPs end in the vocabulary after fusion", lab,
              temps_with_last_dim(pf, V, false));
        CHECK(temps_with_last_dim(pu, V, false) >= 2,
              "%s: the unfused plan has %d vocabulary TEMPs (vacuous test)", lab,
              temps_with_last_dim(pu, V, false));
        CHECK(rf->arena_bytes + logits_bytes <= ru->arena_bytes, "%s: arena fused %zu vs unfused %zu", lab,
              rf->arena_bytes, ru->arena_bytes);
        const dfg_node *lin = find_op(pf, DFG_OP_LINEAR_LOGPROB, 3);
        if (lin) {
            size_t ws = dfg_tensor_bytes(lin->out[2]);
            CHECK(ws <= (32u << 20) && lin->attr->logprob.v_chunk < V, "%s: workspace %zu bytes, v_chunk %lld", lab,
                  ws, (long long)lin->attr->logprob.v_chunk);
        }
    }
    dfg_program_free(pf);
    dfg_program_free(pu);
}

int main(void) {
    dfg_test_init("test_fuse");
    test_gpt2_tied(false, 1.0f, false);
    test_gpt2_tied(false, dfg_test_uniform(0.4f, 1.6f), false);
    test_gpt2_tied(true, dfg_test_uniform(0.4f, 1.6f), false);
    test_gpt2_tied(false, dfg_test_uniform(0.4f, 1.6f), true);
    for (int v = 0; v < 5; v++) test_head(v, false);
    test_head(dfg_test_int(0, 1) ? 0 : 4, true);
    test_grpo();
    test_bias_gelu();
    test_no_fire();
    test_bf16_cuda_plan();
    test_memory_effect(false);
    test_memory_effect(true); /* an untied head's logits are logits too (the memory report) */
    return dfg_test_finish();
}
