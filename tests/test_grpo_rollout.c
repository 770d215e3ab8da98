/* test_grpo_rollout.c - the GRPO decode loop's bookkeeping (dfg_grpo_sample_step) on the CPU
 * runtime: with temperature 0 and with temperature -> 0 (1e-3) the tokens written are the argmax
 * of each step's logits; the completion mask of a row is 1 from its first generated token up to
 * and including its first EOS and 0 after it, whatever the row comes after (a second EOS, other
 * rows stopping at other steps, rows that never stop); done marks exactly the rows that stopped;
 * the prompt is never touched; a row already done gets the pad token; a second rollout in the
 * same runtime starts clean; and with two EOS ids (a model config's list) a row stops at
 * whichever comes first. With every row stopping, the decode stage ends early on the `finished`
 * flag (dfg_stage_until) and leaves the tensors the whole loop leaves: pos and the rng counter
 * are where the loop ended, the tokens and mask those of the full loop.
 *
 * The logits of every step come from a table the test writes (steps, N, V), sliced at the run-
 * time position, so the test decides which token each row produces at each step. */
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"
#include "testutil.h"

enum { N = 7, LP = 3, STEPS = 5, T = LP + STEPS, V = 9, EOS = 1, EOS2 = V - 1, PAD = 0, NEVER = -1 };

/* 2: the model's config names two EOS ids (EOS and EOS2) and a row stops at either */
static int n_eos = 1;
/* every row stops by step LAST_STOP, and decode ends on the finished flag */
static bool early = false;
enum { LAST_STOP = 2 };

typedef struct {
    int32_t want[STEPS][N]; /* the token each row produces at each step */
    int stop[N];            /* the step of each row's first EOS, or NEVER */
    float table[STEPS][N][V];
    int32_t prompt[N][T];
    int32_t rng_before; /* the rng counter before the rollout */
} rollout_case;

/* Logits whose argmax is want[s][r] by a margin of at least 1 (so temperature 1e-3 is greedy). */
static void make_case(rollout_case *c) {
    /* stops at the first and at the last step, in between, never; shuffled over the rows */
    int stops[N] = {0, STEPS - 1, 2, NEVER, 1, NEVER, 3};
    if (early)
        for (int r = 0; r < N; r++) stops[r] = r % (LAST_STOP + 1);
    for (int i = N - 1; i > 0; i--) {
        int j = dfg_test_int(0, i), t = stops[i];
        stops[i] = stops[j], stops[j] = t;
    }
    for (int r = 0; r < N; r++) {
        c->stop[r] = stops[r];
        for (int s = 0; s < STEPS; s++) {
            int32_t tok = dfg_test_int(2, V - 2); /* a token that is no EOS id */
            if (s == stops[r]) tok = n_eos == 2 && dfg_test_int(0, 1) ? EOS2 : EOS;
            else if (stops[r] != NEVER && s > stops[r] && dfg_test_int(0, 1)) tok = EOS; /* a later EOS changes nothing */
            c->want[s][r] = tok;
            float *x = c->table[s][r], hi = -1e30f;
            dfg_test_fill_normal(x, V, 2.0f);
            for (int v = 0; v < V; v++) hi = x[v] > hi ? x[v] : hi;
            x[tok] = hi + 1.0f + dfg_test_uniform(0.0f, 1.0f);
        }
        /* -7: never a token, written over; ending early needs pad where no step writes */
        for (int t = 0; t < T; t++) c->prompt[r][t] = t < LP ? dfg_test_int(2, V - 1) : early ? PAD : -7;
    }
}

/* Program: "start" (as a prefill leaves things: the last prompt token, pos = LP - 1, nothing
 * done, an empty mask), then "decode" STEPS times on the logits table at the current step. */
static bool build(dfg_fx *f, float temperature) {
    dfg_fx_begin(f, "rollout");
    dfg_program *p = f->p;
    dfg_grpo_rollout r = {
        .tokens = dfg_state(p, "tokens", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT, dfg_init_zeros()),
        .mask = dfg_state(p, "mask", DFG_F32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT, dfg_init_zeros()),
        .done = dfg_state(p, "done", DFG_F32, DFG_SHAPE(N), DFG_ROLE_ROLLOUT, dfg_init_zeros()),
        .token = dfg_state(p, "token", DFG_I32, DFG_SHAPE(N, 1), DFG_ROLE_ROLLOUT, dfg_init_zeros()),
        .pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_ROLLOUT, dfg_init_zeros()),
        .rng = dfg_state(p, "rng", DFG_I32, DFG_SHAPE(4), DFG_ROLE_RNG, dfg_init_zeros()),
        .pad = PAD,
        .finished = early ? dfg_state(p, "finished", DFG_F32, DFG_SCALAR, DFG_ROLE_ROLLOUT, dfg_init_zeros()) : NULL,
    };
    dfg_tensor *table = dfg_state(p, "table", DFG_F32, DFG_SHAPE(STEPS, N, V), DFG_ROLE_ROLLOUT, dfg_init_zeros());

    dfg_graph *g = f->g; /* start */
    dfg_assign(g, r.token, dfg_slice(g, r.tokens, 1, LP - 1, 1));
    dfg_assign_fill(g, r.pos, (float)(LP - 1));
    dfg_assign_fill(g, r.done, 0.0f);
    dfg_assign_fill(g, r.mask, 0.0f);
    if (early) dfg_assign_fill(g, r.finished, 0.0f);
    if (dfg_graph_status(g) || dfg_stage_graph(p, g, 1)) return dfg_fx_create(f, 0);

    dfg_graph *d = dfg_graph_new(p, "decode");
    dfg_tensor *step = dfg_add_scalar(d, r.pos, -(float)(LP - 1));                       /* i32 () */
    dfg_tensor *logits = dfg_reshape(d, dfg_slice_at(d, table, 0, step, 1), DFG_SHAPE(N, 1, V)); /* (N, 1, V) */
    CHECK(dfg_grpo_sample_step(d, &r, logits, (dfg_sampling){.temperature = temperature}, (int32_t[]){EOS, EOS2}, n_eos) == DFG_OK, "sample step: %s", dfg_graph_error(d));
    if (!dfg_graph_status(d)) dfg_stage_graph(p, d, STEPS);
    if (early && !dfg_graph_status(d)) CHECK(dfg_stage_until(p, "decode", r.finished) == DFG_OK, "until: %s", dfg_program_error(p));
    return dfg_fx_create(f, 0);
}

static void check_rollout(dfg_fx *f, const rollout_case *c, const char *what) {
    int32_t tokens[N][T], pos = -1, rng[4];
    float mask[N][T], done[N];
    dfg_test_poison(tokens, sizeof(tokens));
    dfg_test_poison(mask, sizeof(mask));
    dfg_test_poison(done, sizeof(done));
    dfg_fx_read(f, "tokens", tokens, sizeof(tokens));
    dfg_fx_read(f, "mask", mask, sizeof(mask));
    dfg_fx_read(f, "done", done, sizeof(done));
    dfg_fx_read(f, "pos", &pos, sizeof(pos));
    dfg_fx_read(f, "rng", rng, sizeof(rng));
    int runs = early ? LAST_STOP + 1 : STEPS; /* the loop ends after the run where the last row stops */
    CHECK(pos == LP - 1 + runs, "%s: pos after the loop = %d, expected %d", what, pos, LP - 1 + runs);
    CHECK(rng[2] == c->rng_before + runs && rng[3] == 0, "%s: the rng counter moved from %d to %d, not by %d", what,
          c->rng_before, rng[2], runs);
    int bad_tok = 0, bad_mask = 0, bad_done = 0, bad_prompt = 0;
    for (int r = 0; r < N; r++) {
        for (int t = 0; t < LP; t++) {
            bad_prompt += tokens[r][t] != c->prompt[r][t];
            bad_mask += mask[r][t] != 0.0f;
        }
        for (int s = 0; s < STEPS; s++) {
            float m = (c->stop[r] == NEVER || s <= c->stop[r]) ? 1.0f : 0.0f;
            bad_tok += tokens[r][LP + s] != (c->stop[r] != NEVER && s > c->stop[r] ? PAD : c->want[s][r]);
            if (mask[r][LP + s] != m) {
                bad_mask++;
                fprintf(stderr, "  %s: row %d (stops at step %d): mask at step %d is %g, expected %g\n", what, r,
                        c->stop[r], s, mask[r][LP + s], m);
            }
        }
        bad_done += done[r] != (c->stop[r] == NEVER ? 0.0f : 1.0f);
    }
    CHECK(bad_tok == 0, "%s: %d generated tokens are not the argmax of their logits (or pad after EOS)", what, bad_tok);
    CHECK(bad_mask == 0, "%s: %d completion-mask entries wrong", what, bad_mask);
    CHECK(bad_done == 0, "%s: done wrong for %d rows", what, bad_done);
    CHECK(bad_prompt == 0, "%s: %d prompt tokens changed", what, bad_prompt);
}

static void test_rollout(float temperature, const char *what) {
    dfg_fx f;
    rollout_case *c = malloc(sizeof(*c));
    if (build(&f, temperature)) {
        for (int rollout = 0; rollout < 3; rollout++) { /* the same runtime, fresh rollouts */
            make_case(c);
            dfg_fx_write(&f, "table", c->table, sizeof(c->table));
            dfg_fx_write(&f, "tokens", c->prompt, sizeof(c->prompt));
            int32_t rng[4];
            dfg_fx_read(&f, "rng", rng, sizeof(rng));
            c->rng_before = rng[2];
            if (!dfg_fx_step(&f)) break;
            char label[64];
            snprintf(label, sizeof(label), "%s, rollout %d", what, rollout);
            check_rollout(&f, c, label);
        }
    }
    dfg_fx_end(&f);
    free(c);
}

int main(void) {
    dfg_test_init("test_grpo_rollout");
    test_rollout(0.0f, "greedy");
    test_rollout(1e-3f, "temperature 1e-3");
    n_eos = 2;
    test_rollout(0.0f, "greedy, two EOS ids");
    n_eos = 1, early = true;
    test_rollout(0.0f, "greedy, ending early");
    test_rollout(1e-3f, "temperature 1e-3, ending early");
    return dfg_test_finish();
}
