/* grpo_tail.c - the decode loop's tail on the rows still generating (examples/grpo/grpo.c,
 * decode_tail): once at most n of the batch's N rows have not written their EOS, the batch
 * decode ends (its end flag), the live rows (and, to fill n, some finished ones) are gathered
 * with their KV caches into an n-row batch (dfg_grpo_tail_gather), a copy of the decode graph
 * built for n rows runs until those end, and their rows are written back
 * (dfg_grpo_tail_scatter). Each gathered row draws as its row of the whole batch (the sampler's
 * per-row indices), so the tokens are the full loop's: a rambling row costs n rows' decode, not
 * N. With tools (a multi-turn rollout) the tail runs in every round of calls that ends with few
 * rows generating (or starts so: decode.live), and a row waiting for its tool costs nothing there;
 * its rows go back whole (their columns, flags and caches), as the next round needs them. There
 * the tail is a ladder of widths, N/2, N/4, ... down to n (copies built for widths, as length
 * buckets are): the round goes on in the narrowest width that holds its live rows, and moves to
 * a narrower one (back to the batch, then gathered again) whenever that one holds them.
 * Written with dfg's public DSL only. */
#include "dfg_grpo_data.h"
#include "dfg_nn.h"

#include <stdio.h>
#include <stdlib.h>

static dfg_tensor *state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape s) {
    return dfg_state(p, name, dt, s, DFG_ROLE_ROLLOUT, dfg_init_zeros());
}

int dfg_grpo_tail_widths(int64_t N, int64_t n, bool ladder, int64_t *widths) {
    int k = 0;
    for (int64_t w = N / 2; ladder && w > n && k < DFG_GRPO_MAX_TAILS - 1; w /= 2) widths[k++] = w;
    widths[k++] = n;
    return k;
}

void dfg_grpo_tail_stage(char *buf, size_t len, const char *base, const dfg_grpo_tail *t, int i) {
    if (i == t->n_widths - 1) snprintf(buf, len, "%s", base);
    else snprintf(buf, len, "%s[%lld]", base, (long long)t->w[i].n);
}

int dfg_grpo_tail_stages(int64_t N, int64_t n, bool ladder, char (*names)[32]) {
    dfg_grpo_tail t = {.n_widths = 0};
    int64_t w[DFG_GRPO_MAX_TAILS];
    t.n_widths = dfg_grpo_tail_widths(N, n, ladder, w);
    static const char *const base[3] = {"decode.compact", "decode.tail", "decode.merge"};
    for (int i = 0; i < t.n_widths; i++) t.w[i].n = w[i];
    for (int i = 0; i < 3 * t.n_widths; i++) dfg_grpo_tail_stage(names[i], sizeof(names[i]), base[i % 3], &t, i / 3);
    return 3 * t.n_widths;
}

/* width i's tensors: "tail.NAME" for the narrowest, "tail<w>.NAME" for a wider one */
static dfg_tensor *width_state(dfg_program *p, const dfg_grpo_tail *t, int i, const char *name, dfg_dtype dt, dfg_shape s) {
    char full[64];
    if (i == t->n_widths - 1) snprintf(full, sizeof(full), "tail.%s", name);
    else snprintf(full, sizeof(full), "tail%lld.%s", (long long)t->w[i].n, name);
    return state(p, full, dt, s);
}

static dfg_status width_state_all(dfg_program *p, const dfg_model *m, int64_t tkv, bool logp, bool tools, bool start,
                                  dfg_grpo_tail *t, int i) {
    dfg_grpo_tail_width *w = &t->w[i];
    int64_t n = w->n;
    char prefix[32];
    if (i == t->n_widths - 1) snprintf(prefix, sizeof(prefix), "tail.");
    else snprintf(prefix, sizeof(prefix), "tail%lld.", (long long)n);
    dfg_status st = dfg_model_kv_cache(p, prefix, m, n, tkv, &w->kv);
    if (st) return st;
    w->rows = width_state(p, t, i, "rows", DFG_I32, DFG_SHAPE(n));
    w->back = width_state(p, t, i, "back", DFG_I32, DFG_SHAPE(t->N));
    w->tokens = width_state(p, t, i, "tokens", DFG_I32, DFG_SHAPE(n, t->T));
    w->mask = width_state(p, t, i, "mask", DFG_F32, DFG_SHAPE(n, t->T));
    w->logp = logp ? width_state(p, t, i, "sampling_logp", DFG_F32, DFG_SHAPE(n, t->T)) : NULL;
    w->done = width_state(p, t, i, "done", DFG_F32, DFG_SHAPE(n));
    w->waiting = tools ? width_state(p, t, i, "waiting", DFG_F32, DFG_SHAPE(n)) : NULL;
    w->pos = tools ? width_state(p, t, i, "pos", DFG_I32, DFG_SHAPE(n)) : NULL;
    w->token = width_state(p, t, i, "token", DFG_I32, DFG_SHAPE(n, 1));
    w->kv.start = start ? width_state(p, t, i, "prompt_start", DFG_I32, DFG_SHAPE(n)) : NULL;
    w->finished = width_state(p, t, i, "finished", DFG_F32, DFG_SCALAR);
    w->stop = w->next ? width_state(p, t, i, "stop", DFG_F32, DFG_SCALAR) : w->finished;
    return dfg_program_status(p);
}

dfg_status dfg_grpo_tail_state(dfg_program *p, const dfg_model *m, const dfg_model_kv *kv, int64_t N, int64_t n,
                               int64_t T, bool logp, bool tools, dfg_grpo_tail *t) {
    int64_t widths[DFG_GRPO_MAX_TAILS];
    t->N = N, t->T = T;
    t->n_widths = dfg_grpo_tail_widths(N, n, tools, widths);
    int64_t tkv = dfg_tensor_shape(kv->k[0]).d[1];
    dfg_status st = DFG_OK;
    for (int i = 0; i < t->n_widths; i++) {
        t->w[i].n = widths[i], t->w[i].next = i + 1 < t->n_widths ? widths[i + 1] : 0;
        if (!st) st = width_state_all(p, m, tkv, logp, tools, kv->start != NULL, t, i);
    }
    if (st) return st;
    t->go = state(p, "tail.go", DFG_F32, DFG_SCALAR);
    t->entered = state(p, "tail.entered", DFG_F32, DFG_SCALAR);
    t->stop = state(p, "gen.stop", DFG_F32, DFG_SCALAR);
    return dfg_grpo_order_consts(p, "tail", N, &t->before, &t->index);
}

static dfg_tensor *scalar(dfg_graph *g, float v) { return dfg_fill(g, DFG_F32, DFG_SCALAR, v); }

/* () f32 the rows live (not done, and with tools not waiting): the sum of ones, exact in f32 */
static dfg_tensor *live_rows(dfg_graph *g, dfg_tensor *done, dfg_tensor *waiting) {
    dfg_tensor *idle = waiting ? dfg_maximum(g, done, waiting) : done;
    return dfg_sum(g, dfg_affine(g, idle, -1.0f, 1.0f), 0);
}

/* () f32 1 when 0 < live <= at */
static dfg_tensor *within(dfg_graph *g, dfg_tensor *live, int64_t at) {
    dfg_tensor *few = dfg_equal(g, dfg_minimum(g, live, scalar(g, (float)at)), live);
    dfg_tensor *some = dfg_affine(g, dfg_equal(g, live, scalar(g, 0.0f)), -1.0f, 1.0f);
    return dfg_mul(g, few, some);
}

/* () f32 the live rows when the widest width holds them (at least one), else 0 */
static dfg_tensor *few_live(dfg_graph *g, const dfg_grpo_tail *t, dfg_tensor *done, dfg_tensor *waiting) {
    dfg_tensor *live = live_rows(g, done, waiting);
    return dfg_mul(g, live, within(g, live, t->w[0].n));
}

dfg_tensor *dfg_grpo_tail_switch(dfg_graph *g, const dfg_grpo_tail *t, dfg_tensor *done, dfg_tensor *waiting,
                                 dfg_tensor *pos, dfg_tensor *finished) {
    dfg_tensor *go = few_live(g, t, done, waiting);
    if (!waiting) { /* a column is left to write: pos (the last written) before T - 1 (with tools a live row has one) */
        dfg_tensor *at_end = dfg_equal(g, dfg_cast(g, pos, DFG_F32), scalar(g, (float)(t->T - 1)));
        go = dfg_mul(g, go, dfg_affine(g, at_end, -1.0f, 1.0f));
    }
    dfg_assign(g, t->go, go);
    dfg_assign_fill(g, t->entered, 0.0f);
    dfg_assign(g, t->stop, dfg_maximum(g, finished, dfg_clamp(g, go, 0.0f, 1.0f)));
    return t->stop;
}

void dfg_grpo_tail_width_switch(dfg_graph *g, const dfg_grpo_tail *t, int i) {
    const dfg_grpo_tail_width *w = &t->w[i];
    if (!w->next) return; /* the narrowest: its loop ends when its rows are idle */
    dfg_tensor *live = live_rows(g, w->done, w->waiting);
    dfg_assign(g, t->go, live); /* every live row is among its rows: at most its width */
    dfg_assign(g, w->stop, dfg_maximum(g, w->finished, within(g, live, w->next)));
}

dfg_status dfg_grpo_tail_live(dfg_program *p, const dfg_grpo_tail *t, dfg_tensor *done, dfg_tensor *waiting) {
    dfg_graph *g = dfg_graph_new(p, "decode.live");
    dfg_assign(g, t->go, few_live(g, t, done, waiting));
    dfg_assign_fill(g, t->entered, 0.0f);
    return dfg_graph_status(g) ? dfg_graph_status(g) : dfg_stage_graph(p, g, 1);
}

/* x (N, ...) -> the rows `rows` (n) i32 of it, (n, ...) of x's dtype (i32 through f32: exact
 * below 2^24, token ids and positions) */
static dfg_tensor *rows_of(dfg_graph *g, dfg_tensor *x, dfg_tensor *rows) {
    dfg_shape s = dfg_tensor_shape(x);
    int64_t N = s.d[0], rest = dfg_tensor_numel(x) / N;
    dfg_dtype dt = dfg_tensor_dtype(x);
    dfg_tensor *table = dfg_reshape(g, dt == DFG_I32 ? dfg_cast(g, x, DFG_F32) : x, DFG_SHAPE(N, rest));
    dfg_tensor *out = dfg_embed(g, table, rows); /* (n, rest) */
    s.d[0] = dfg_tensor_shape(rows).d[0];
    out = dfg_reshape(g, out, s);
    return dt == DFG_I32 ? dfg_cast(g, out, DFG_I32) : out;
}

void dfg_grpo_tail_gather(dfg_graph *g, const dfg_grpo_tail *ladder, int i, const dfg_model_kv *kv,
                          const dfg_grpo_tail_from *from) {
    const dfg_grpo_tail_width *t = &ladder->w[i];
    int64_t N = ladder->N, n = t->n;
    /* the live rows first, in order, then the finished ones: a stable sort by done; the tail
     * takes the first n places (with tools, rows waiting for their tool count as finished) */
    dfg_tensor *slot, *at; /* (N) each row's place; (N, N) [place][row] */
    dfg_tensor *idle = from->waiting ? dfg_maximum(g, from->done, from->waiting) : from->done;
    dfg_grpo_stable_sort(g, idle, ladder->before, ladder->index, &slot, &at);
    dfg_tensor *order = dfg_sum(g, dfg_mul(g, at, dfg_reshape(g, ladder->index, DFG_SHAPE(1, N))), 1); /* (N) row at a place */
    dfg_tensor *rows = dfg_cast(g, dfg_slice(g, order, 0, 0, n), DFG_I32);
    dfg_assign(g, t->rows, rows);
    /* where each batch row's final values come from in concat(tail rows, batch rows) */
    dfg_tensor *last = dfg_fill(g, DFG_F32, DFG_SCALAR, (float)(n - 1));
    dfg_tensor *in_tail = dfg_equal(g, dfg_minimum(g, slot, last), slot); /* (N) place < n */
    dfg_tensor *back = dfg_add(g, dfg_mul(g, in_tail, slot),
                               dfg_mul(g, dfg_affine(g, in_tail, -1.0f, 1.0f), dfg_add_scalar(g, ladder->index, (float)n)));
    dfg_assign(g, t->back, dfg_cast(g, back, DFG_I32));
    for (int l = 0; l < kv->n_layer; l++) {
        dfg_assign(g, t->kv.k[l], rows_of(g, kv->k[l], rows));
        dfg_assign(g, t->kv.v[l], rows_of(g, kv->v[l], rows));
    }
    dfg_assign(g, t->tokens, rows_of(g, from->tokens, rows));
    dfg_assign(g, t->mask, rows_of(g, from->mask, rows));
    if (t->logp) dfg_assign(g, t->logp, rows_of(g, from->logp, rows));
    dfg_assign(g, t->done, rows_of(g, from->done, rows));
    if (t->waiting) dfg_assign(g, t->waiting, rows_of(g, from->waiting, rows));
    if (t->pos) dfg_assign(g, t->pos, rows_of(g, from->pos, rows));
    dfg_assign(g, t->token, rows_of(g, from->token, rows));
    if (t->kv.start) dfg_assign(g, t->kv.start, rows_of(g, kv->start, rows));
    dfg_assign_fill(g, t->finished, 0.0f);
    if (t->stop != t->finished) dfg_assign_fill(g, t->stop, 0.0f);
    dfg_assign_fill(g, ladder->entered, (float)n); /* its merge runs after its loop */
}

/* dst (N, T) = its rows with the tail's written back: row r from concat(src, dst)[back[r]] */
static void merge(dfg_graph *g, const dfg_grpo_tail_width *t, dfg_tensor *dst, dfg_tensor *src) {
    dfg_tensor *both = dfg_concat(g, (dfg_tensor *[]){src, dst}, 2, 0); /* (n + N, T) */
    dfg_assign(g, dst, rows_of(g, both, t->back));
}

/* The tail's rows of the caches back to their batch rows: row rows[j] of each cache, n copies of
 * a row (the other rows' columns are not read or copied) */
static void merge_caches(dfg_graph *g, const dfg_grpo_tail_width *t, const dfg_model_kv *kv) {
    for (int64_t j = 0; j < t->n; j++) {
        dfg_tensor *row = dfg_slice(g, t->rows, 0, j, 1); /* (1) i32 */
        for (int l = 0; l < kv->n_layer; l++) {
            dfg_slice_assign_at(g, kv->k[l], dfg_slice(g, t->kv.k[l], 0, j, 1), 0, row);
            dfg_slice_assign_at(g, kv->v[l], dfg_slice(g, t->kv.v[l], 0, j, 1), 0, row);
        }
    }
}

void dfg_grpo_tail_scatter(dfg_graph *g, const dfg_grpo_tail *ladder, int i, const dfg_model_kv *kv,
                           const dfg_grpo_tail_from *to) {
    const dfg_grpo_tail_width *t = &ladder->w[i];
    merge(g, t, to->tokens, t->tokens);
    merge(g, t, to->mask, t->mask);
    if (t->logp) merge(g, t, to->logp, t->logp);
    if (!t->waiting) return; /* without tools nothing decodes after the tail */
    merge(g, t, to->done, t->done);
    merge(g, t, to->waiting, t->waiting);
    merge(g, t, to->pos, t->pos);
    merge(g, t, to->token, t->token);
    merge_caches(g, t, kv);
}
