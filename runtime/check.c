/* check.c - the checking mode (DFG_CHECK=1, or dfg_run_options.check): catches planner bugs
 * before they become wrong numbers.
 *
 * The unit is a plan buffer after in-place merging (a storage owner with its views, versions and
 * the outputs placed in it). The checker walks the plan's timeline with the executor and keeps,
 * per buffer, whether it is live and a checksum of its bytes as the last writer left them:
 *   - after a kernel, each output's bytes are summed (persistent tensors written in place too);
 *   - before a kernel, each input's bytes (a view's: its storage's) are summed again and must
 *     match; they must also sit where the writer put them (a view placed apart from its storage
 *     reads other bytes);
 *   - when a buffer's lifetime ends, its bytes are filled with a poison pattern, so a buffer the
 *     plan let die too early is caught at its next read, and a tensor overlapping it sees its
 *     checksum change;
 *   - the host may rewrite persistent tensors between steps and inside host stages: every live
 *     buffer is checked before a host stage and at the end of the step, and recorded again after
 *     a host stage and when a step begins.
 * A repeated stage runs its body's plan steps once per run: a temporary born in the body dies in
 * every run; what was live before the stage (persistent or scoped tensors) only after the last.
 * At creation it also checks, with the runtime's own offsets and independently of the passes'
 * verify_plan, that no two buffers live at the same step share a byte.
 * Cost: O(bytes) per read and write, like the kernels themselves; it is a debug mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/plan.h"
#include "runtime_internal.h"

typedef struct {
    uint64_t sum;       /* checksum of [off, off + bytes) after the last write */
    int64_t off, bytes; /* where the last write went, in the runtime's offsets */
    int step;           /* plan step of the last write; -1: before the step began */
    const char *writer; /* a node's name, or what else wrote it */
    int value;          /* tensor id of the storage owner whose value the bytes hold: an output
                         * placed in place over a dying input makes it its own */
    bool live;
    int died_at;        /* plan step after which its bytes were poisoned (this step); -1: none */
} ck_buf;

struct dfg_check {
    const dfg_plan *plan;
    int *root;                /* [tensor id] buffer after in-place merges, or -1 */
    ck_buf *b;                /* [buffer]; only roots are used */
    bool *temp;               /* [buffer] owned by a TEMP (dies inside each run of its stage) */
    /* [buffer] its lifetime ends with a loop of stages (dfg_stage_loop; the planner spans it over
     * the whole loop): it dies when the loop ends, not after the last stage of each pass */
    bool *held;
    int *birth_start, *birth; /* by step: scoped persistent buffers whose lifetime starts there */
    int *death_start, *death; /* by step: buffers whose lifetime ends there, before the last step */
    unsigned char *scratch;   /* staging for arenas the host cannot address */
};

enum { CK_CHUNK = 1 << 20 };

static bool host_addressable(const dfg_runtime *rt) { return rt->be == &dfg_backend_cpu; }

/* ---------------------------------------------------------------- checksums and poison */
static inline uint64_t ck_mix(uint64_t h, uint64_t w) {
    h ^= w * 0x9E3779B97F4A7C15ull;
    h = (h << 27) | (h >> 37);
    return h * 0xC2B2AE3D27D4EB4Full + 0x165667B19E3779F9ull;
}

/* Continues hash h over n bytes; n is a multiple of 8 except on the last call. */
static uint64_t ck_hash_bytes(uint64_t h, const unsigned char *p, size_t n) {
    size_t i = 0;
    uint64_t w;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = ck_mix(h, w);
    }
    if (i < n) {
        w = 0;
        memcpy(&w, p + i, n - i);
        h = ck_mix(h, w ^ ((uint64_t)(n - i) << 56));
    }
    return h;
}

static uint64_t ck_sum(dfg_runtime *rt, int64_t off, int64_t bytes) {
    uint64_t h = 0x84222325CBF29CE4ull ^ (uint64_t)bytes;
    if (host_addressable(rt)) return ck_hash_bytes(h, (const unsigned char *)rt->arena + off, (size_t)bytes);
    for (int64_t k = 0; k < bytes; k += CK_CHUNK) {
        size_t n = (size_t)(bytes - k < CK_CHUNK ? bytes - k : CK_CHUNK);
        if (rt->be->download(rt->be_state, rt->check->scratch, rt->arena + off + k, n)) return ~h; /* never matches */
        h = ck_hash_bytes(h, rt->check->scratch, n);
    }
    return h;
}

static void fill_poison(unsigned char *p, size_t n) {
    const uint32_t v = DFG_CHECK_POISON;
    const unsigned char pat[4] = {v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF, v >> 24}; /* little-endian word */
    for (size_t i = 0; i < n; i++) p[i] = pat[i % 4];
}

static void ck_poison(dfg_runtime *rt, int64_t off, int64_t bytes) {
    if (host_addressable(rt)) {
        fill_poison((unsigned char *)rt->arena + off, (size_t)bytes);
        return;
    }
    fill_poison(rt->check->scratch, CK_CHUNK);
    for (int64_t k = 0; k < bytes; k += CK_CHUNK)
        rt->be->upload(rt->be_state, rt->arena + off + k, rt->check->scratch,
                       (size_t)(bytes - k < CK_CHUNK ? bytes - k : CK_CHUNK));
}

/* ---------------------------------------------------------------- set-up */
static int64_t t_off(const dfg_runtime *rt, const dfg_tensor *t) { return rt->plan.offset[t->id]; }
static int64_t t_bytes(const dfg_tensor *t) { return (int64_t)dfg_tensor_bytes(t); }
static bool spans_meet(dfg_span a, dfg_span b) { return a.first <= b.last && b.first <= a.last; }
static bool bytes_meet(int64_t a, int64_t an, int64_t b, int64_t bn) { return a < b + bn && b < a + an; }

static bool is_root(const dfg_plan *plan, int b) {
    return plan->bufs[b].merged_into < 0 && plan->bufs[b].life.first >= 0 && plan->bufs[b].life.last < plan->n_steps;
}

/* CSR lists by step: births (scoped STATE/INPUT buffers, by first step) or deaths (buffers
 * whose lifetime ends before the last step, by last step). */
static bool by_step(const dfg_check *c, int n_steps, int n_bufs, bool births, int **start, int **list) {
    const dfg_plan *plan = c->plan;
    *start = calloc((size_t)n_steps + 1, sizeof(int));
    *list = malloc(sizeof(int) * (size_t)(n_bufs ? n_bufs : 1));
    int *fill = calloc((size_t)n_steps + 1, sizeof(int));
    bool ok = *start && *list && fill;
    for (int pass = 0; pass < 2 && ok; pass++) {
        for (int b = 0; b < n_bufs; b++) {
            const dfg_buf *x = &plan->bufs[b];
            if (!is_root(plan, b)) continue;
            /* births: scoped STATE/INPUT (their value starts with the scope); deaths: all but
             * what lives to the end of the step (persistent tensors, outputs) */
            bool want = births ? !x->persistent && !c->temp[b] : x->life.last < n_steps - 1 && !c->held[b];
            int s = births ? x->life.first : x->life.last;
            if (!want) continue;
            if (pass == 0) (*start)[s + 1]++;
            else (*list)[(*start)[s] + fill[s]++] = b;
        }
        if (pass == 0)
            for (int s = 0; s < n_steps; s++) (*start)[s + 1] += (*start)[s];
    }
    free(fill);
    return ok;
}

/* One tensor's bytes in the runtime's arena, with the lifetime of its buffer. */
typedef struct {
    int64_t off, end;
    int tensor, root;
} ck_range;

static int by_off(const void *x, const void *y) {
    const ck_range *a = x, *b = y;
    if (a->off != b->off) return a->off < b->off ? -1 : 1;
    return a->tensor < b->tensor ? -1 : a->tensor > b->tensor;
}

/* No two buffers live at the same step share a byte, with the offsets this runtime uses. */
static dfg_status check_overlaps(dfg_runtime *rt) {
    const dfg_program *p = rt->p;
    const dfg_check *c = rt->check;
    ck_range *r = malloc(sizeof(*r) * (size_t)(p->n_tensors ? p->n_tensors : 1));
    if (!r) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "DFG_CHECK: out of memory");
    int n = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        if (c->root[i] < 0) continue;
        int64_t off = rt->plan.offset[i], end = off + t_bytes(p->tensors[i]);
        if (off < 0 || end > (int64_t)rt->plan.arena_bytes) {
            free(r);
            return dfg_rt_fail(rt, DFG_ERR_STATE, true, "DFG_CHECK: '%s' (bytes [%lld, %lld)) lies outside the %zu-byte arena",
                               p->tensors[i]->name, (long long)off, (long long)end, rt->plan.arena_bytes);
        }
        r[n++] = (ck_range){off, end, i, c->root[i]};
    }
    qsort(r, (size_t)n, sizeof(*r), by_off);
    dfg_status st = DFG_OK;
    for (int i = 0; i < n && !st; i++)
        for (int j = i + 1; j < n && r[j].off < r[i].end && !st; j++) {
            dfg_span a = c->plan->bufs[r[i].root].life, b = c->plan->bufs[r[j].root].life;
            if (r[i].root == r[j].root || !spans_meet(a, b)) continue;
            st = dfg_rt_fail(rt, DFG_ERR_STATE, true,
                             "DFG_CHECK: the plan puts '%s' (bytes [%lld, %lld), plan steps %d-%d) and '%s' (bytes [%lld, "
                             "%lld), plan steps %d-%d) in the same bytes while both are live",
                             p->tensors[r[i].tensor]->name, (long long)r[i].off, (long long)r[i].end, a.first, a.last,
                             p->tensors[r[j].tensor]->name, (long long)r[j].off, (long long)r[j].end, b.first, b.last);
        }
    free(r);
    return st;
}

bool dfg_check_wanted(const dfg_run_options *o) {
    const char *env = getenv("DFG_CHECK");
    return o->check || (env && *env && strcmp(env, "0") != 0);
}

dfg_status dfg_check_create(dfg_runtime *rt) {
    const dfg_program *p = rt->p;
    const dfg_plan *plan = p->plan;
    dfg_check *c = calloc(1, sizeof(*c));
    if (!c) return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "DFG_CHECK: out of memory");
    rt->check = c;
    c->plan = plan;
    int nt = p->n_tensors, nb = plan->n_bufs;
    c->root = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
    c->b = calloc((size_t)(nb ? nb : 1), sizeof(*c->b));
    c->temp = calloc((size_t)(nb ? nb : 1), sizeof(*c->temp));
    c->held = calloc((size_t)(nb ? nb : 1), sizeof(*c->held));
    if (!host_addressable(rt)) c->scratch = malloc(CK_CHUNK);
    if (!c->root || !c->b || !c->temp || !c->held || (!host_addressable(rt) && !c->scratch))
        return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "DFG_CHECK: out of memory");
    for (int b = 0; b < nb; b++) c->temp[b] = p->tensors[plan->bufs[b].owner]->kind == DFG_TEMP;
    for (int s = 0; s < p->n_stages; s++) /* loops: what the planner kept for the whole loop */
        if (p->stages[s].loop_to >= 0)
            for (int b = 0; b < nb; b++)
                c->held[b] |= !c->temp[b] && !plan->bufs[b].persistent && plan->bufs[b].life.last < plan->n_steps - 1 &&
                              plan->bufs[b].life.first <= plan->stage_step[p->stages[s].loop_to] &&
                              plan->bufs[b].life.last == plan->stage_step[s + 1] - 1;
    for (int i = 0; i < nt; i++) {
        int b = plan->buf_of[i];
        for (int hops = 0; b >= 0 && plan->bufs[b].merged_into >= 0 && hops < nb; hops++) b = plan->bufs[b].merged_into;
        c->root[i] = b >= 0 && is_root(plan, b) ? b : -1;
    }
    if (!by_step(c, plan->n_steps, nb, true, &c->birth_start, &c->birth) ||
        !by_step(c, plan->n_steps, nb, false, &c->death_start, &c->death))
        return dfg_rt_fail(rt, DFG_ERR_NOMEM, true, "DFG_CHECK: out of memory");
    return check_overlaps(rt);
}

void dfg_check_free(dfg_check *c) {
    if (!c) return;
    free(c->root), free(c->b), free(c->temp), free(c->held);
    free(c->birth_start), free(c->birth), free(c->death_start), free(c->death);
    free(c->scratch);
    free(c);
}

/* ---------------------------------------------------------------- bookkeeping */
static void record(dfg_runtime *rt, int b, int64_t off, int64_t bytes, int step, const char *writer, int value) {
    ck_buf *x = &rt->check->b[b];
    *x = (ck_buf){ck_sum(rt, off, bytes), off, bytes, step, writer, value, true, -1};
}

static void record_owner(dfg_runtime *rt, int b, int step, const char *writer) {
    const dfg_buf *pb = &rt->check->plan->bufs[b];
    record(rt, b, t_off(rt, rt->p->tensors[pb->owner]), pb->bytes, step, writer, pb->owner);
}

static void ck_kill(dfg_runtime *rt, int b, int step) {
    ck_buf *x = &rt->check->b[b];
    if (!x->live) { /* never written in this run: poison where its owner lies */
        const dfg_buf *pb = &rt->check->plan->bufs[b];
        x->off = t_off(rt, rt->p->tensors[pb->owner]);
        x->bytes = pb->bytes;
    }
    ck_poison(rt, x->off, x->bytes);
    x->live = false;
    x->died_at = step;
}

dfg_status dfg_check_step_begin(dfg_runtime *rt) {
    dfg_check *c = rt->check;
    const dfg_plan *plan = c->plan;
    for (int b = 0; b < plan->n_bufs; b++) {
        if (!is_root(plan, b)) continue;
        if (plan->bufs[b].persistent) record_owner(rt, b, -1, "the host (before the step)");
        else {
            /* outputs and scoped tensors that lived to the end of the last step are dead until
             * written (or their scope begins) again. Not poisoned: the host may have written a
             * scoped INPUT for a scope that starts with the step, and check mode must not change
             * what a run computes. */
            c->b[b].live = false;
            c->b[b].died_at = -1;
        }
    }
    return DFG_OK;
}

/* The tensors other than buffer `self`'s whose planned bytes overlap [off, off + bytes) and whose
 * lifetimes meet the steps `when`: who could have written there. */
static void sharers(dfg_runtime *rt, int self, int64_t off, int64_t bytes, dfg_span when, char *out, size_t len) {
    const dfg_program *p = rt->p;
    const dfg_check *c = rt->check;
    int seen[3], n_seen = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int pass = 0; pass < 2 && !n_seen; pass++) /* pass 1: any overlap, whatever the lifetime */
        for (int i = 0; i < p->n_tensors && n_seen < 3; i++) {
            int b = c->root[i];
            if (b < 0 || b == self || !bytes_meet(t_off(rt, p->tensors[i]), t_bytes(p->tensors[i]), off, bytes)) continue;
            dfg_span l = c->plan->life[i];
            if (l.first < 0 || (pass == 0 && !spans_meet(l, when))) continue;
            bool dup = false;
            for (int k = 0; k < n_seen; k++) dup |= seen[k] == b;
            if (dup) continue;
            seen[n_seen++] = b;
            if (used < len)
                used += (size_t)snprintf(out + used, len - used, "%s'%s' (plan steps %d-%d)", n_seen > 1 ? ", " : "",
                                         p->tensors[i]->name, l.first, l.last);
        }
    if (!n_seen) snprintf(out, len, "no other tensor per the plan (a kernel or the host wrote outside its tensor?)");
}

/* "step 3, graph 'train' (run 2 of 4)" */
static const char *where(const dfg_runtime *rt, int si, int run, char *buf, size_t len) {
    const dfg_stage *s = &rt->p->stages[si];
    int k = snprintf(buf, len, "step %lld, %s '%s'", (long long)rt->step + 1, s->kind == DFG_STAGE_HOST ? "host stage" : "graph",
                     s->name);
    if (s->repeat > 1 && k > 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, " (run %d of %d)", run + 1, s->repeat);
    return buf;
}

/* Checks that live buffer b still holds what its last writer left. `what` describes the read. */
static dfg_status verify(dfg_runtime *rt, int b, int now, const char *ctx, const char *what) {
    ck_buf *x = &rt->check->b[b];
    if (ck_sum(rt, x->off, x->bytes) == x->sum) return DFG_OK;
    char since[96], who[512];
    if (x->step >= 0) snprintf(since, sizeof(since), "plan step %d", x->step);
    else snprintf(since, sizeof(since), "the step began");
    /* written later in the timeline than now: in an earlier run of a repeated stage */
    dfg_span when = x->step > now ? (dfg_span){0, rt->check->plan->n_steps - 1} : (dfg_span){x->step >= 0 ? x->step : 0, now};
    sharers(rt, b, x->off, x->bytes, when, who, sizeof(who));
    return dfg_rt_fail(rt, DFG_ERR_STATE, true, "DFG_CHECK: %s: %s changed since %s (written by '%s'); its bytes [%lld, %lld) are shared with %s",
                       ctx, what, since, x->writer, (long long)x->off, (long long)(x->off + x->bytes), who);
}

static dfg_status verify_all_live(dfg_runtime *rt, int now, const char *ctx) {
    const dfg_check *c = rt->check;
    char what[320];
    for (int b = 0; b < c->plan->n_bufs; b++) {
        if (!is_root(c->plan, b) || !c->b[b].live) continue;
        snprintf(what, sizeof(what), "'%s'", rt->p->tensors[c->plan->bufs[b].owner]->name);
        dfg_status st = verify(rt, b, now, ctx, what);
        if (st) return st;
    }
    return DFG_OK;
}

/* Scoped tensors whose scope begins at `step` hold whatever their bytes hold: their value is
 * undefined until written, and the checker only needs a starting sum. */
static void births(dfg_runtime *rt, int step) {
    const dfg_check *c = rt->check;
    for (int k = c->birth_start[step]; k < c->birth_start[step + 1]; k++) record_owner(rt, c->birth[k], step, "(scope start)");
}

/* Buffers whose lifetime ends at `step` die: in every run of a repeated stage when a temporary
 * of that stage owns them, else after the last run. */
static void deaths(dfg_runtime *rt, int si, int run, int step) {
    const dfg_check *c = rt->check;
    const dfg_stage *s = &rt->p->stages[si];
    int stage_first = c->plan->stage_step[si];
    for (int k = c->death_start[step]; k < c->death_start[step + 1]; k++) {
        int b = c->death[k];
        if (run == s->repeat - 1 || (c->temp[b] && c->plan->bufs[b].life.first >= stage_first)) ck_kill(rt, b, step);
    }
}

/* After a stage's runs of a step, or when it did not run: every buffer whose lifetime ends in
 * the stage dies if it is still live. A stage that ended early (dfg_stage_until) had no last
 * run, and a skipped one (its condition, its step range) none, so deaths() did not see them.
 * A skipped stage's scope starts still happen: a scoped tensor whose first stage is one of
 * several copies (prompt buckets' prefill) is born there whichever copy runs. */
void dfg_check_stage_end(dfg_runtime *rt, int si, bool ran) {
    const dfg_check *c = rt->check;
    for (int step = c->plan->stage_step[si]; step < c->plan->stage_step[si + 1]; step++) {
        if (!ran) births(rt, step);
        for (int k = c->death_start[step]; k < c->death_start[step + 1]; k++)
            if (c->b[c->death[k]].live) ck_kill(rt, c->death[k], step);
    }
}

/* After a loop's last stage si when the step goes back: the temporaries of the pass are dead (a
 * temporary of the program's last stage is otherwise left live to the step's end). */
void dfg_check_loop_back(dfg_runtime *rt, int si) {
    const dfg_check *c = rt->check;
    int first = c->plan->stage_step[rt->p->stages[si].loop_to], last = c->plan->stage_step[si + 1] - 1;
    for (int b = 0; b < c->plan->n_bufs; b++) {
        dfg_span l = c->plan->bufs[b].life;
        if (c->temp[b] && is_root(c->plan, b) && c->b[b].live && l.first >= first && l.last <= last) ck_kill(rt, b, l.last);
    }
}

/* After a loop's last stage si when the step does not go back: what lived through the loop dies. */
void dfg_check_loop_end(dfg_runtime *rt, int si) {
    const dfg_check *c = rt->check;
    for (int b = 0; b < c->plan->n_bufs; b++) {
        int last = c->plan->bufs[b].life.last;
        if (c->held[b] && is_root(c->plan, b) && c->b[b].live && last >= c->plan->stage_step[si] &&
            last < c->plan->stage_step[si + 1])
            ck_kill(rt, b, last);
    }
}

/* ---------------------------------------------------------------- around kernels */
static dfg_status check_input(dfg_runtime *rt, int si, int run, const dfg_node *n, const dfg_tensor *t, int now) {
    const dfg_check *c = rt->check;
    char ctx[256], what[512];
    int b = c->root[t->id];
    where(rt, si, run, ctx, sizeof(ctx));
    if (b < 0)
        return dfg_rt_fail(rt, DFG_ERR_STATE, true, "DFG_CHECK: %s: input '%s' of '%s' (plan step %d) has no planned bytes", ctx,
                           t->name, n->name, now);
    const ck_buf *x = &c->b[b];
    dfg_span life = c->plan->bufs[b].life;
    if (!x->live) {
        if (x->died_at >= 0)
            return dfg_rt_fail(rt, DFG_ERR_STATE, true,
                               "DFG_CHECK: %s: input '%s' of '%s' (plan step %d) is read after its buffer's lifetime "
                               "(plan steps %d-%d) ended; its bytes were poisoned after plan step %d",
                               ctx, t->name, n->name, now, life.first, life.last, x->died_at);
        return dfg_rt_fail(rt, DFG_ERR_STATE, true,
                           "DFG_CHECK: %s: input '%s' of '%s' (plan step %d) is read before anything wrote it (its buffer "
                           "lives plan steps %d-%d)",
                           ctx, t->name, n->name, now, life.first, life.last);
    }
    if (t->storage->id != x->value)
        return dfg_rt_fail(rt, DFG_ERR_STATE, true,
                           "DFG_CHECK: %s: input '%s' of '%s' (plan step %d) was overwritten in place by '%s' at plan "
                           "step %d: the plan gave that output the bytes of '%s' (plan steps %d-%d) before their last read",
                           ctx, t->name, n->name, now, x->writer, x->step, t->storage->name,
                           c->plan->life[t->storage->id].first, c->plan->life[t->storage->id].last);
    if (t_off(rt, t) != x->off || t_bytes(t) != x->bytes)
        return dfg_rt_fail(rt, DFG_ERR_STATE, true,
                           "DFG_CHECK: %s: input '%s' of '%s' (plan step %d) is at bytes [%lld, %lld), but '%s' wrote "
                           "its storage at [%lld, %lld): views, versions and in-place outputs must share their storage's bytes",
                           ctx, t->name, n->name, now, (long long)t_off(rt, t), (long long)(t_off(rt, t) + t_bytes(t)),
                           x->writer, (long long)x->off, (long long)(x->off + x->bytes));
    snprintf(what, sizeof(what), "input '%s' of '%s' (plan step %d)", t->name, n->name, now);
    return verify(rt, b, now, ctx, what);
}

dfg_status dfg_check_before(dfg_runtime *rt, int si, int run, int index) {
    const dfg_stage *s = &rt->p->stages[si];
    int now = rt->check->plan->stage_step[si] + index;
    if (run == 0) births(rt, now);
    if (s->kind == DFG_STAGE_HOST) {
        char ctx[256];
        snprintf(ctx, sizeof(ctx), "step %lld, before host stage '%s'", (long long)rt->step + 1, s->name);
        return verify_all_live(rt, now, ctx);
    }
    if (index >= s->graph->n_nodes) return DFG_OK; /* an empty graph's one step */
    const dfg_node *n = s->graph->nodes[index];
    for (int j = 0; j < n->n_in; j++) {
        dfg_status st = check_input(rt, si, run, n, n->in[j], now);
        if (st) return st;
    }
    return DFG_OK;
}

dfg_status dfg_check_after(dfg_runtime *rt, int si, int run, int index) {
    const dfg_check *c = rt->check;
    const dfg_stage *s = &rt->p->stages[si];
    int now = c->plan->stage_step[si] + index;
    if (s->kind == DFG_STAGE_HOST) {
        /* the host may have written any persistent or output tensor */
        for (int b = 0; b < c->plan->n_bufs; b++)
            if (is_root(c->plan, b) && c->b[b].live) record(rt, b, c->b[b].off, c->b[b].bytes, now, s->name, c->b[b].value);
    } else if (index < s->graph->n_nodes) {
        const dfg_node *n = s->graph->nodes[index];
        char ctx[256];
        for (int k = 0; k < n->n_out; k++) {
            const dfg_tensor *o = n->out[k];
            if (o->view_of) continue; /* a view writes nothing: its storage's sum stands */
            int b = c->root[o->id];
            if (b < 0 || now < c->plan->bufs[b].life.first || now > c->plan->bufs[b].life.last)
                return dfg_rt_fail(rt, DFG_ERR_STATE, true,
                                   "DFG_CHECK: %s: '%s' (plan step %d) writes '%s' outside its buffer's lifetime (plan steps %d-%d)",
                                   where(rt, si, run, ctx, sizeof(ctx)), n->name, now, o->name,
                                   b < 0 ? -1 : c->plan->bufs[b].life.first, b < 0 ? -1 : c->plan->bufs[b].life.last);
            record(rt, b, t_off(rt, o), t_bytes(o), now, n->name, o->storage->id);
        }
    }
    deaths(rt, si, run, now);
    return DFG_OK;
}

dfg_status dfg_check_step_end(dfg_runtime *rt) {
    char ctx[96];
    snprintf(ctx, sizeof(ctx), "step %lld, at the end of the step", (long long)rt->step + 1);
    return verify_all_live(rt, rt->check->plan->n_steps - 1, ctx);
}
