/* test_remat.c - rematerialisation under a memory budget (passes/remat.c) and the byte-size
 * parser the budget is given with (dfg_parse_bytes).
 *
 *   - dfg_parse_bytes: binary and decimal units, plain numbers, fractions; rejects empty,
 *     negative, unknown units and a unit without a number.
 *   - A small GPT-2 training step (forward, cross-entropy over a mask, backward accumulated
 *     into grad buffers, AdamW), compiled without a budget and with budgets between its
 *     persistent bytes and its arena: the tightest budget that fits recomputes several nodes,
 *     fits (report and runtime arena <= budget), reports extra_flops > 0 with flops unchanged,
 *     and two training steps on the CPU give bit-identical outputs, gradient buffers, moments
 *     and parameters to the no-budget plan. A budget at or above the no-budget arena changes
 *     nothing (no recompute, same arena, same node count).
 *   - A budget below anything reachable fails with DFG_ERR_ARG and a message that states the
 *     smallest plan found (and that budget then fits) and names the categories at its peak.
 *   - The structured result (dfg_program_remat), what dfg fit reads instead of the message: no
 *     budget, remat did not run; a budget that fits, fits with the plan's arena and recompute
 *     count; a budget nothing reaches, does not fit, kept after the failed compile, with the
 *     least arena, persistent bytes, recompute count and peak categories the message states
 *     (the same numbers, as printed), and that least arena as the budget compiles and fits.
 *   - A graph whose tokens come from dfg_sample: under a budget that makes remat recompute, no
 *     recomputed node (DFG_NF_RECOMPUTED) is a SAMPLE, and results (the RNG state included)
 *     stay bit-identical.
 *   - examples/gpt2_124m.c planned for DFG_TARGET_CUDA (GPT-2 124M, planning only): with the
 *     budget persistent_bytes + peak[activations] / 2 of its no-budget plan, the plan fits and
 *     extra_flops / flops <= 0.05. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/nn/dfg_nn.h"
#include "passes/plan.h"
#include "pipeline_module.h"

/* ---------------------------------------------------------------- deterministic data by name */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Fills every INPUT and every f32 PARAM (the same values for the same name in every program):
 * i32 inputs with tokens in [0, vocab), masks ("mask*") with 0/1, floats with N(0, 0.1)-ish
 * values (a sum of uniforms). STATEs keep their init (zeros; the RNG key from the seed). */
static void fill_data(dfg_runtime *rt, const dfg_program *p, int vocab, uint64_t seed) {
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (!dfg_is_persistent(t) || (t->kind != DFG_INPUT && t->kind != DFG_PARAM)) continue;
        dfg_buffer b;
        if (dfg_runtime_buffer(rt, t->name, &b)) continue;
        uint64_t s = seed ^ name_hash(t->name);
        int64_t n = dfg_shape_numel(t->shape);
        for (int64_t k = 0; k < n; k++) {
            uint64_t r = mix64(s += 0x9E3779B97F4A7C15ull);
            if (t->dtype == DFG_I32)
                ((int32_t *)b.data)[k] = (int32_t)(r % (uint64_t)vocab);
            else if (t->dtype == DFG_F32 && !strncmp(t->name, "mask", 4))
                ((float *)b.data)[k] = (r & 3) ? 1.0f : 0.0f;
            else if (t->dtype == DFG_F32)
                ((float *)b.data)[k] = 0.1f * (float)((double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0) +
                                       0.1f * (float)((double)(mix64(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
        }
    }
}

/* Every PARAM, STATE and live dfg_output of a run, byte for byte, in tensor order. */
typedef struct {
    unsigned char *bytes;
    size_t n;
    int n_tensors;
} snapshot;

static void snap(dfg_runtime *rt, const dfg_program *p, snapshot *s) {
    *s = (snapshot){0};
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        bool out = (t->flags & DFG_TF_OUTPUT) && !(t->flags & DFG_TF_DEAD);
        if (!out && t->kind != DFG_PARAM && t->kind != DFG_STATE) continue;
        dfg_buffer b;
        if (dfg_runtime_buffer(rt, t->name, &b)) continue;
        s->bytes = realloc(s->bytes, s->n + b.bytes);
        memcpy(s->bytes + s->n, b.data, b.bytes);
        s->n += b.bytes;
        s->n_tensors++;
    }
}

/* ---------------------------------------------------------------- the small training program */
typedef struct {
    int B, T, C, V, L, H;
    bool sample; /* tokens drawn with dfg_sample from INPUT "token_logits" instead of INPUT "tokens" */
} train_cfg;

static void build_train(dfg_program *p, const train_cfg *c) {
    dfg_model *m = calloc(1, sizeof(*m));
    dfg_model_config mc = {.n_layer = c->L, .n_head = c->H, .n_embd = c->C, .vocab_size = c->V, .block_size = c->T, .ln_eps = 1e-5f};
    if (!m || dfg_model_params(p, "", mc, m)) {
        free(m);
        return;
    }
    dfg_graph *g = dfg_graph_new(p, "train");
    dfg_tensor *tok;
    if (c->sample) {
        /* a cheap draw over 3 candidates per position: a recompute would draw again */
        dfg_tensor *rng = dfg_state(p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros());
        dfg_tensor *tl = dfg_input(g, "token_logits", DFG_F32, DFG_SHAPE(c->B, c->T, 3));
        tok = dfg_sample(g, tl, rng, 1.0f, 0); /* not a dfg_output: outputs are never recomputed */
    } else {
        tok = dfg_input(g, "tokens", DFG_I32, DFG_SHAPE(c->B, c->T));
    }
    dfg_tensor *tgt = dfg_input(g, "targets", DFG_I32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *mask = dfg_input(g, "mask", DFG_F32, DFG_SHAPE(c->B, c->T));
    dfg_tensor *logp = dfg_take(g, dfg_log_softmax(g, dfg_model_logits(g, m, tok)), tgt); /* (B, T) */
    dfg_tensor *loss = dfg_scale(g, dfg_sum(g, dfg_masked_sum(g, logp, mask, 1), 0), -1.0f / (float)(c->B * c->T));
    dfg_output(g, loss, "loss");
    dfg_tensor *buf[4 + DFG_MODEL_PARAMS_PER_BLOCK * 16]; /* up to 16 layers */
    dfg_nn_grad_buffers(p, m->params, m->n_params, "", buf);
    dfg_backward_accumulate(g, loss, m->params, m->n_params, buf);
    dfg_adamw_config cfg = {1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f};
    dfg_nn_adamw_step(p, g, m->params, buf, m->n_params, cfg, "");
    dfg_stage_graph(p, g, 1);
    free(m);
}

/* Builds and compiles with the given budget; NULL (the program freed) when compile fails, with
 * the status and message in *st / msg. */
static dfg_program *compile_train(const train_cfg *c, int64_t budget, dfg_status *st, char *msg, size_t msg_len) {
    dfg_program *p = dfg_program_new("remat train");
    build_train(p, c);
    CHECK(!dfg_program_status(p), "build: %s", dfg_program_error(p));
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.memory_budget = budget;
    *st = dfg_compile(p, &o);
    if (msg) snprintf(msg, msg_len, "%s", dfg_program_error(p));
    if (*st) {
        dfg_program_free(p);
        return NULL;
    }
    return p;
}

/* Two steps on the CPU from the same data; false when something failed. */
static bool run_steps(dfg_program *p, const char *label, int vocab, uint64_t seed, snapshot *s, size_t *arena) {
    dfg_run_options ro = dfg_run_options_default();
    ro.n_threads = 2;
    ro.seed = 11;
    dfg_runtime *rt = NULL;
    dfg_status st = dfg_runtime_create(p, &ro, &rt);
    CHECK(st == DFG_OK, "%s: create: %s", label, dfg_runtime_error(rt));
    if (!st) fill_data(rt, p, vocab, seed);
    for (int k = 0; k < 2 && !st; k++) {
        st = dfg_runtime_step(rt);
        CHECK(st == DFG_OK, "%s: step %d: %s", label, k, dfg_runtime_error(rt));
    }
    if (!st) snap(rt, p, s), *arena = dfg_runtime_arena_bytes(rt);
    dfg_runtime_free(rt);
    return !st;
}

/* Nodes flagged DFG_NF_RECOMPUTED, how many of them are `op`, and their op names in ops. */
static int count_recomputed(const dfg_program *p, dfg_op op, int *n_sample, char *ops, size_t len) {
    int n = 0;
    size_t at = 0;
    *n_sample = 0;
    ops[0] = '\0';
    for (int s = 0; s < p->n_stages; s++)
        if (p->stages[s].kind == DFG_STAGE_GRAPH)
            for (int i = 0; i < p->stages[s].graph->n_nodes; i++) {
                const dfg_node *node = p->stages[s].graph->nodes[i];
                if (!(node->flags & DFG_NF_RECOMPUTED)) continue;
                if (at + 32 < len)
                    at += (size_t)snprintf(ops + at, len - at, "%s%s", n ? " " : "", dfg_ops[node->op].name);
                n++;
                *n_sample += node->op == op;
            }
    return n;
}

/* The tightest of a few budgets between the persistent bytes and the arena that compiles. */
static int64_t tight_budget(const train_cfg *c, const dfg_report *r0) {
    static const double fracs[] = {0.35, 0.45, 0.55, 0.65, 0.75, 0.85};
    int64_t per = (int64_t)r0->persistent_bytes, span = (int64_t)r0->arena_bytes - per;
    for (size_t k = 0; k < sizeof(fracs) / sizeof(fracs[0]); k++) {
        int64_t b = per + (int64_t)(fracs[k] * (double)span);
        dfg_status st;
        dfg_program *p = compile_train(c, b, &st, NULL, 0);
        if (!p) continue;
        int n = dfg_program_report(p)->recomputed_nodes;
        dfg_program_free(p);
        if (n >= 3) return b;
    }
    return 0;
}

/* linear_logprob's v_chunk in a compiled program, or 0 when there is none */
static int64_t v_chunk_of(const dfg_program *p) {
    for (int gi = 0; gi < p->n_graphs; gi++)
        for (int i = 0; i < p->graphs[gi]->n_nodes; i++)
            if (p->graphs[gi]->nodes[i]->op == DFG_OP_LINEAR_LOGPROB) return p->graphs[gi]->nodes[i]->attr->logprob.v_chunk;
    return 0;
}

/* With chunks_differ, the budget must also change linear_logprob's vocabulary chunk (the fuse
 * pass sizes it by the budget): results must not depend on the chunk size either. */
static void test_training(train_cfg c, const char *label, bool chunks_differ, bool batched) {
    bool sample = c.sample;
    dfg_status st;
    char msg[1024];
    dfg_program *p0 = compile_train(&c, 0, &st, msg, sizeof(msg));
    CHECK(p0, "%s: compile without a budget: %s", label, msg);
    if (!p0) return;
    dfg_report r0 = *dfg_program_report(p0);
    CHECK(r0.recomputed_nodes == 0 && r0.extra_flops == 0.0, "%s: no budget, yet %d recomputed", label,
          r0.recomputed_nodes);
    int64_t budget = tight_budget(&c, &r0);
    CHECK(budget > 0, "%s: no budget between persistent %zu and arena %zu fits with >= 3 recomputes", label,
          r0.persistent_bytes, r0.arena_bytes);
    dfg_program *p1 = budget ? compile_train(&c, budget, &st, msg, sizeof(msg)) : NULL;
    if (budget) CHECK(p1, "%s: budget %lld: %s", label, (long long)budget, msg);
    if (p1) {
        const dfg_report *r1 = dfg_program_report(p1);
        char ops[2048];
        int n_sample = 0, n_rec = count_recomputed(p1, DFG_OP_SAMPLE, &n_sample, ops, sizeof(ops));
        printf(
            "%s: arena %zu -> %zu under budget %lld (persistent %zu); %d recomputed (%s), extra %.3g flops of %.3g\n",
            label, r0.arena_bytes, r1->arena_bytes, (long long)budget, r0.persistent_bytes, r1->recomputed_nodes, ops,
            r1->extra_flops, r1->flops);
        CHECK(r1->recomputed_nodes >= 3 && n_rec == r1->recomputed_nodes, "%s: %d recomputed, %d flagged nodes", label,
              r1->recomputed_nodes, n_rec);
        /* more candidates than a round tries: cheap copies are kept several at a time (and the
         * bit-identical runs below check what that made); a small program: one at a time */
        const dfg_remat_result *rr = dfg_program_remat(p1);
        printf("%s: %d planning rounds, %d kept a batch of cheap copies\n", label, rr->rounds, rr->batched_rounds);
        CHECK(batched ? rr->batched_rounds > 0 : rr->batched_rounds == 0, "%s: %d of %d rounds batched", label,
              rr->batched_rounds, rr->rounds);
        CHECK((int64_t)r1->arena_bytes <= budget && r1->arena_bytes < r0.arena_bytes, "%s: arena %zu, budget %lld",
              label, r1->arena_bytes, (long long)budget);
        CHECK(r1->extra_flops > 0.0, "%s: recomputes reported no extra flops", label);
        CHECK(fabs(r1->flops - r0.flops) <= 1e-9 * r0.flops, "%s: flops %.17g with remat, %.17g without", label,
              r1->flops, r0.flops);
        CHECK(n_sample == 0, "%s: %d SAMPLE nodes were recomputed", label, n_sample);
        CHECK(r1->n_nodes == r0.n_nodes + r1->recomputed_nodes, "%s: %d nodes with remat, %d without, %d recomputed",
              label, r1->n_nodes, r0.n_nodes, r1->recomputed_nodes);
        if (chunks_differ)
            CHECK(v_chunk_of(p0) != v_chunk_of(p1) && v_chunk_of(p1) > 0, "%s: v_chunk %lld without and %lld with the budget",
                  label, (long long)v_chunk_of(p0), (long long)v_chunk_of(p1));
        /* bit-identical runs */
        uint64_t seed = dfg_test_u64();
        snapshot s0, s1;
        size_t a0 = 0, a1 = 0;
        if (run_steps(p0, label, c.V, seed, &s0, &a0) && run_steps(p1, label, c.V, seed, &s1, &a1)) {
            CHECK(s0.n_tensors == s1.n_tensors && s0.n == s1.n && s0.n_tensors > 4 * c.L * DFG_MODEL_PARAMS_PER_BLOCK,
                  "%s: snapshots of %d / %d tensors (%zu / %zu bytes)", label, s0.n_tensors, s1.n_tensors, s0.n, s1.n);
            CHECK(s0.n == s1.n && !memcmp(s0.bytes, s1.bytes, s0.n),
                  "%s: outputs, gradients, moments or parameters differ with remat", label);
            CHECK((int64_t)a1 <= budget, "%s: the runtime allocated %zu bytes over the budget %lld", label, a1,
                  (long long)budget);
            free(s0.bytes), free(s1.bytes);
        }
        dfg_program_free(p1);
    }
    /* a budget the plan already fits changes nothing */
    dfg_program *p2 = compile_train(&c, (int64_t)r0.arena_bytes + (sample ? 4096 : 0), &st, msg, sizeof(msg));
    CHECK(p2, "%s: budget = arena: %s", label, msg);
    if (p2) {
        const dfg_report *r2 = dfg_program_report(p2);
        /* the budget also bounds linear_logprob's workspace: with chunks_differ that can only shrink
         * the arena, never grow it */
        bool arena_ok = chunks_differ ? r2->arena_bytes <= r0.arena_bytes : r2->arena_bytes == r0.arena_bytes;
        CHECK(r2->recomputed_nodes == 0 && arena_ok && r2->n_nodes == r0.n_nodes && r2->extra_flops == 0.0,
              "%s: a budget >= the arena recomputed %d nodes (arena %zu vs %zu, %d vs %d nodes)", label,
              r2->recomputed_nodes, r2->arena_bytes, r0.arena_bytes, r2->n_nodes, r0.n_nodes);
        dfg_program_free(p2);
    }
    dfg_program_free(p0);
}

/* ---------------------------------------------------------------- a budget nothing reaches */
static void test_too_small(void) {
    train_cfg c = {4, 32, 64, 97, 2, 4, false};
    dfg_status st;
    char msg[1024];
    dfg_program *p0 = compile_train(&c, 0, &st, msg, sizeof(msg));
    CHECK(p0, "too small: compile: %s", msg);
    if (!p0) return;
    dfg_report r0 = *dfg_program_report(p0);
    dfg_program_free(p0);
    int64_t budget = (int64_t)r0.persistent_bytes + 1024;
    dfg_program *p = compile_train(&c, budget, &st, msg, sizeof(msg));
    CHECK(!p && st == DFG_ERR_ARG, "too small: budget %lld compiled (status %s)", (long long)budget,
          dfg_status_name(st));
    dfg_program_free(p);
    if (p || st != DFG_ERR_ARG) return;
    printf("too small: %s\n", msg);
    /* "... the smallest plan found needs 1.9 MiB ...; at its peak: params 0.4 MiB, ..." */
    const char *at = strstr(msg, "needs ");
    double found = at ? strtod(at + 6, NULL) : -1.0;
    CHECK(at && strstr(at, "MiB"), "too small: the message does not state the smallest budget: %s", msg);
    CHECK(found * 1048576.0 >= (double)r0.persistent_bytes - 0.05 * 1048576.0 &&
              found * 1048576.0 <= (double)r0.arena_bytes + 0.05 * 1048576.0,
          "too small: smallest %.1f MiB is not between persistent %zu and the arena %zu bytes", found,
          r0.persistent_bytes, r0.arena_bytes);
    int named = 0;
    for (int k = 0; k < DFG_CAT_COUNT; k++) {
        char pat[64];
        snprintf(pat, sizeof(pat), "%s ", dfg_category_name((dfg_category)k));
        const char *q = strstr(msg, pat);
        named += q && strstr(q, "MiB") != NULL;
    }
    CHECK(named >= 2, "too small: the message names %d categories with their sizes: %s", named, msg);
    CHECK(strstr(msg, "params ") != NULL, "too small: params (the largest persistent category) not named: %s", msg);
    /* the budget it states is reachable: rounded up to the next 0.1 MiB it compiles */
    int64_t stated = (int64_t)ceil((found + 0.1) * 1048576.0);
    p = compile_train(&c, stated, &st, msg, sizeof(msg));
    CHECK(p, "too small: the stated smallest budget (%lld bytes) does not compile: %s", (long long)stated, msg);
    if (p) {
        CHECK((int64_t)dfg_program_report(p)->arena_bytes <= stated && dfg_program_report(p)->recomputed_nodes > 0,
              "too small: at the stated budget: arena %zu, %d recomputed", dfg_program_report(p)->arena_bytes,
              dfg_program_report(p)->recomputed_nodes);
        dfg_program_free(p);
    }
}

/* ---------------------------------------------------------------- the structured result */
/* Builds and compiles the training program under budget; the program, compiled or not. */
static dfg_program *compile_kept(const train_cfg *c, int64_t budget, dfg_status *st) {
    dfg_program *p = dfg_program_new("remat result");
    build_train(p, c);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    o.memory_budget = budget;
    *st = dfg_compile(p, &o);
    return p;
}

static void test_result(void) {
    train_cfg c = {4, 32, 64, 97, 2, 4, false};
    dfg_status st;
    dfg_program *p0 = compile_kept(&c, 0, &st);
    const dfg_remat_result *r = dfg_program_remat(p0);
    CHECK(!st && r && !r->ran, "no budget: compile %s, remat %s", dfg_status_name(st),
          r ? (r->ran ? "ran" : "did not run") : "no result");
    if (st || !r) {
        dfg_program_free(p0);
        return;
    }
    dfg_report r0 = *dfg_program_report(p0);
    dfg_program_free(p0);
    dfg_program *fresh = dfg_program_new("not compiled");
    CHECK(dfg_program_remat(fresh) == NULL && dfg_program_remat(NULL) == NULL, "a result before any compile");
    dfg_program_free(fresh);

    /* a budget that fits after recomputing */
    int64_t tight = tight_budget(&c, &r0);
    CHECK(tight > 0, "result: no budget between the persistent bytes and the arena made remat recompute");
    if (tight > 0) {
        dfg_program *p = compile_kept(&c, tight, &st);
        r = dfg_program_remat(p);
        const dfg_report *rep = dfg_program_report(p);
        CHECK(!st && r && rep && r->ran && r->fits && r->budget == tight && r->arena_bytes <= tight &&
                  r->arena_bytes == (int64_t)rep->arena_bytes && r->recomputed == rep->recomputed_nodes &&
                  r->recomputed > 0 && r->persistent_bytes == (int64_t)rep->persistent_bytes,
              "fits: compile %s; result ran %d fits %d budget %lld arena %lld (plan %zu) recomputed %d (plan %d)",
              dfg_status_name(st), r && r->ran, r && r->fits, r ? (long long)r->budget : 0LL,
              r ? (long long)r->arena_bytes : 0LL, rep ? rep->arena_bytes : 0, r ? r->recomputed : 0,
              rep ? rep->recomputed_nodes : 0);
        dfg_program_free(p);
    }

    /* a budget nothing reaches: the result outlives the failed compile and says what the message says */
    int64_t budget = (int64_t)r0.persistent_bytes + 1024;
    dfg_program *p = compile_kept(&c, budget, &st);
    r = dfg_program_remat(p);
    CHECK(st == DFG_ERR_ARG && r && r->ran && !r->fits && r->budget == budget,
          "too small: compile %s, result %s", dfg_status_name(st),
          r ? (r->ran ? (r->fits ? "fits" : "does not fit") : "did not run") : "none");
    if (st == DFG_ERR_ARG && r && r->ran && !r->fits) {
        const char *msg = dfg_program_error(p);
        char want[256];
        snprintf(want, sizeof(want),
                 "does not fit; the smallest plan found needs %.1f MiB (persistent tensors %.1f MiB, %d activations "
                 "recomputed)",
                 (double)r->arena_bytes / 1048576.0, (double)r->persistent_bytes / 1048576.0, r->recomputed);
        CHECK(strstr(msg, want) != NULL, "too small: the message is not the result's: '%s' lacks '%s'", msg, want);
        CHECK(r->arena_bytes > budget && r->arena_bytes <= (int64_t)r0.arena_bytes &&
                  r->persistent_bytes == (int64_t)r0.persistent_bytes && r->recomputed > 0,
              "too small: least arena %lld (budget %lld, no-budget arena %zu), persistent %lld (%zu), %d recomputed",
              (long long)r->arena_bytes, (long long)budget, r0.arena_bytes, (long long)r->persistent_bytes,
              r0.persistent_bytes, r->recomputed);
        size_t peak_sum = 0;
        for (int k = 0; k < DFG_CAT_COUNT; k++) peak_sum += r->peak[k];
        CHECK(r->peak[DFG_CAT_PARAMS] > 0 && peak_sum > 0 && (int64_t)peak_sum <= r->arena_bytes,
              "too small: peak by category (params %zu, sum %zu) against the least arena %lld", r->peak[DFG_CAT_PARAMS],
              peak_sum, (long long)r->arena_bytes);
        /* the least arena is a budget that fits */
        int64_t least = r->arena_bytes;
        dfg_program *q = compile_kept(&c, least, &st);
        const dfg_remat_result *rq = dfg_program_remat(q);
        CHECK(!st && rq && rq->fits && rq->arena_bytes <= least, "the least arena %lld as the budget: %s", (long long)least,
              dfg_program_error(q));
        dfg_program_free(q);
    }
    dfg_program_free(p);
}

/* ---------------------------------------------------------------- dfg_parse_bytes */
static void test_parse_bytes(void) {
    static const struct {
        const char *text;
        int64_t bytes;
    } ok[] = {{"6GiB", 6ll << 30}, {"512MiB", 512ll << 20}, {"1.5GB", 1500000000ll}, {"4096", 4096},
              {"4k", 4096},        {"64KiB", 65536},        {"2MB", 2000000}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int64_t b = -7;
        bool r = dfg_parse_bytes(ok[i].text, &b);
        CHECK(r && b == ok[i].bytes, "parse_bytes(\"%s\") = %d, %lld; expected %lld", ok[i].text, r, (long long)b,
              (long long)ok[i].bytes);
    }
    static const char *const bad[] = {"", "-1", "12XB", "GiB", "0", "1.5.2GB", "nan", "6 GiB extra"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t b = -7;
        CHECK(!dfg_parse_bytes(bad[i], &b), "parse_bytes(\"%s\") accepted (%lld)", bad[i], (long long)b);
    }
    int64_t b = 0;
    CHECK(!dfg_parse_bytes(NULL, &b), "parse_bytes(NULL) accepted");
}

/* ---------------------------------------------------------------- GPT-2 124M, planned for cuda */
static dfg_program *build_124m(void *lib) {
    dfg_pipeline_fn fn;
    *(void **)&fn = dlsym(lib, DFG_PIPELINE_SYMBOL);
    CHECK(fn, "gpt2_124m: no %s symbol", DFG_PIPELINE_SYMBOL);
    if (!fn) return NULL;
    dfg_program *p = dfg_program_new("gpt2_124m");
    dfg_program_set(p, "target", "cuda");
    dfg_status st = fn(p);
    CHECK(st == DFG_OK && !dfg_program_status(p), "gpt2_124m: pipeline: %s", dfg_program_error(p));
    return p;
}

static void test_124m(void) {
    char src[1200];
    snprintf(src, sizeof(src), "%s/examples/gpt2_124m.c", pm_source_dir());
    void *lib = pm_build(src, "gpt2_124m");
    if (!lib) return;
    dfg_program *p0 = build_124m(lib);
    dfg_options o = dfg_options_default(DFG_TARGET_CUDA);
    CHECK(p0 && dfg_compile(p0, &o) == DFG_OK, "gpt2_124m: compile: %s", p0 ? dfg_program_error(p0) : "");
    const dfg_report *r0 = dfg_program_report(p0);
    if (r0) {
        int64_t budget = (int64_t)r0->persistent_bytes + (int64_t)r0->peak[DFG_CAT_ACTIVATIONS] / 2;
        dfg_program *p1 = build_124m(lib);
        o.memory_budget = budget;
        clock_t t0 = clock();
        dfg_status st = p1 ? dfg_compile(p1, &o) : DFG_ERR_STATE;
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        CHECK(st == DFG_OK, "gpt2_124m: budget %.1f MiB (persistent %.1f + activations %.1f / 2): %s",
              budget / 1048576.0, r0->persistent_bytes / 1048576.0, r0->peak[DFG_CAT_ACTIVATIONS] / 1048576.0,
              p1 ? dfg_program_error(p1) : "");
        const dfg_report *r1 = st ? NULL : dfg_program_report(p1);
        if (r1) {
            double ratio = r1->extra_flops / r1->flops;
            printf("gpt2_124m cuda: arena %.1f MiB -> %.1f MiB under %.1f MiB; %d recomputed, extra flops %.4f of %.3g "
                   "(%.1f s)\n",
                   r0->arena_bytes / 1048576.0, r1->arena_bytes / 1048576.0, budget / 1048576.0, r1->recomputed_nodes,
                   ratio, r1->flops, secs);
            CHECK((int64_t)r1->arena_bytes <= budget, "gpt2_124m: arena %zu over the budget %lld", r1->arena_bytes,
                  (long long)budget);
            CHECK(r1->recomputed_nodes > 0 && r1->extra_flops > 0.0, "gpt2_124m: nothing recomputed");
            CHECK(dfg_program_remat(p1)->batched_rounds > 0, "gpt2_124m: no round kept a batch of cheap copies");
            CHECK(ratio <= 0.05, "gpt2_124m: extra_flops / flops = %.4f > 0.05", ratio);
            CHECK(fabs(r1->flops - r0->flops) <= 1e-9 * r0->flops, "gpt2_124m: flops changed: %.17g vs %.17g",
                  r1->flops, r0->flops);
        }
        dfg_program_free(p1);
    }
    dfg_program_free(p0);
}

int main(void) {
    dfg_test_init("test_remat");
    if (!dfg_test_tmpdir_create("dfg_remat")) return 1;
    test_parse_bytes();
    test_training((train_cfg){4, 32, 32, 61, 2, 2, false}, "gpt2 train", false, false);
    test_training((train_cfg){4, 32, 32, 61, 2, 2, true}, "sampled tokens", false, false);
    /* a vocabulary large enough that the budget shrinks the logprob chunk: 1531 % 256 != 0 */
    test_training((train_cfg){4, 32, 32, 1531, 2, 2, false}, "large vocabulary", true, false);
    /* twelve layers: more candidates at the peak than a round tries */
    test_training((train_cfg){2, 16, 16, 61, 12, 2, false}, "twelve layers", false, true);
    test_too_small();
    test_result();
    test_124m();
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
