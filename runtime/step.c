/* step.c - one step of a plan (dfg_runtime_step): the stages in order, a graph stage's runs
 * through the backend (captured as a graph and replayed, on a backend with graphs), host stages,
 * and the work that follows real lengths: a stage that runs only when a value an earlier stage
 * wrote is in its range (dfg_stage_when: length buckets), a repeated stage that ends once a
 * flag its graph writes is set (dfg_stage_until: decode, when every row has ended), and one that
 * runs a count of times an earlier stage wrote (dfg_stage_runs: the chunks a width holds). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../ops/op.h"
#include "runtime_internal.h"

/* The runs of a stage that ends early go in chunks of this many, captured once and replayed,
 * with one read of the flag between chunks: the reads cost a device round trip each, the chunk
 * at most this many runs past the end (whose writes the stage's graph makes harmless). */
#define DFG_UNTIL_CHUNK 8

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A device call the host waits on: its time counts as device time, not host time. */
static dfg_status waited(dfg_runtime *rt, dfg_status (*fn)(void *, char *, size_t), char *why, size_t len) {
    double t0 = now_s();
    dfg_status st = fn(rt->be_state, why, len);
    rt->wait_s += now_s() - t0;
    return st;
}

/* Check mode around one plan step: the sticky error is set by check.c. */
#define CHECKED(call)                                   \
    do {                                                \
        if (rt->check) {                                \
            dfg_status check_st_ = (call);              \
            if (check_st_) return check_st_;            \
        }                                               \
    } while (0)

/* The scalar persistent tensor t as a double: read in place from a host arena, downloaded from
 * a device one (the host waits for the device: device time). */
static dfg_status read_scalar(dfg_runtime *rt, const dfg_tensor *t, double *v) {
    unsigned char bytes[4];
    if (rt->be->host_memory) memcpy(bytes, dfg_rt_ptr(rt, t), sizeof(bytes));
    else {
        double t0 = now_s();
        dfg_status st = rt->be->download(rt->be_state, bytes, dfg_rt_ptr(rt, t), sizeof(bytes));
        rt->wait_s += now_s() - t0;
        if (st) return st;
    }
    if (t->dtype == DFG_I32) {
        int32_t i;
        memcpy(&i, bytes, sizeof(i));
        *v = (double)i;
    } else {
        float f;
        memcpy(&f, bytes, sizeof(f));
        *v = (double)f;
    }
    return DFG_OK;
}

/* Runs r0 .. r1-1 of stage si, every node through the backend (or, while a graph is captured,
 * into it). */
static dfg_status exec_runs(dfg_runtime *rt, int si, int r0, int r1) {
    const dfg_stage *s = &rt->p->stages[si];
    const dfg_graph *g = s->graph;
    char why[768];
    for (int r = r0; r < r1; r++) {
        if (!g->n_nodes) { /* an empty graph still has its plan step: lifetimes begin and end there */
            CHECKED(dfg_check_before(rt, si, r, 0));
            CHECKED(dfg_check_after(rt, si, r, 0));
        }
        for (int i = 0; i < g->n_nodes; i++) {
            const dfg_node *n = g->nodes[i];
            if (!dfg_node_runs_on(n, r, s->repeat)) continue; /* a gradient bucket before the last micro-batch */
            CHECKED(dfg_check_before(rt, si, r, i));
            for (int j = 0; j < n->n_in; j++) rt->in_ptrs[j] = dfg_rt_ptr(rt, n->in[j]);
            for (int k = 0; k < n->n_out; k++) rt->out_ptrs[k] = dfg_rt_ptr(rt, n->out[k]);
            why[0] = '\0';
            dfg_status st = rt->be->exec(rt->be_state, n, rt->in_ptrs, rt->out_ptrs, why, sizeof(why));
            if (st)
                return dfg_rt_fail(rt, st, true, "step %lld, stage '%s' (run %d of %d): %s", (long long)rt->step + 1, s->name,
                                   r + 1, s->repeat, why[0] ? why : dfg_status_name(st));
            CHECKED(dfg_check_after(rt, si, r, i));
        }
    }
    return DFG_OK;
}

/* Runs r0 .. r1-1 of stage si as the backend's graph `slot`, capturing it the first time: every
 * run of a stage is one graph (slot si), a stage that ends early has a chunk (slot si) and a
 * shorter last chunk (slot si + n_stages). */
static dfg_status replay_runs(dfg_runtime *rt, int si, int slot, int r0, int r1) {
    char why[768] = "";
    if (!rt->captured[slot]) {
        dfg_status st = rt->be->capture_begin(rt->be_state, slot, why, sizeof(why));
        if (!st) st = exec_runs(rt, si, r0, r1);
        dfg_status end = rt->be->capture_end(rt->be_state, slot, why + strlen(why), sizeof(why) - strlen(why));
        if (st) return st;
        if (end)
            return dfg_rt_fail(rt, end, true, "step %lld, stage '%s': capturing it as a graph failed: %s",
                               (long long)rt->step + 1, rt->p->stages[si].name, why);
        rt->captured[slot] = true;
    }
    dfg_status st = rt->be->replay(rt->be_state, slot, why, sizeof(why));
    if (st) return dfg_rt_fail(rt, st, true, "step %lld, stage '%s': %s", (long long)rt->step + 1, rt->p->stages[si].name, why);
    return DFG_OK;
}

/* A stage with an end flag: chunks of runs, the flag read after each; eagerly (no graphs, or
 * check mode) the flag is read after every run. */
static dfg_status run_until(dfg_runtime *rt, int si, bool graphs) {
    const dfg_stage *s = &rt->p->stages[si];
    int chunk = graphs ? (s->repeat < DFG_UNTIL_CHUNK ? s->repeat : DFG_UNTIL_CHUNK) : 1;
    for (int r = 0; r < s->repeat; r += chunk) {
        int end = r + chunk < s->repeat ? r + chunk : s->repeat;
        dfg_status st = !graphs ? exec_runs(rt, si, r, end)
                                : replay_runs(rt, si, end - r == chunk ? si : si + rt->p->n_stages, r, end);
        if (st) return st;
        rt->stage_runs[si] = end;
        double flag = 0;
        if ((st = read_scalar(rt, s->until, &flag)))
            return dfg_rt_fail(rt, st, true, "step %lld, stage '%s': reading its end flag '%s' failed",
                               (long long)rt->step + 1, s->name, s->until->name);
        if (flag != 0) break;
    }
    return DFG_OK;
}

/* A stage with a run count: the count is read when it starts; with graphs one run is captured
 * and replayed count times (every run is the same graph: verify refuses last-run nodes). */
static dfg_status run_counted(dfg_runtime *rt, int si, bool graphs) {
    const dfg_stage *s = &rt->p->stages[si];
    double v = 0;
    dfg_status st = read_scalar(rt, s->runs, &v);
    if (st)
        return dfg_rt_fail(rt, st, true, "step %lld, stage '%s': reading its run count '%s' failed", (long long)rt->step + 1,
                           s->name, s->runs->name);
    int n = !(v > 0) ? 0 : v >= (double)s->repeat ? s->repeat : (int)v;
    for (int r = 0; r < n && !st; r++) st = graphs ? replay_runs(rt, si, si, r, r + 1) : exec_runs(rt, si, r, r + 1);
    rt->stage_runs[si] = n;
    return st;
}

/* On a backend with graphs the stage is captured once (every repeat unrolled: a training
 * micro-batch loop is one graph) and replayed; check mode and opt.eager run node by node.
 * Kernels' bad-value flags are read after the stage. */
static dfg_status run_graph(dfg_runtime *rt, int si) {
    const char *name = rt->p->stages[si].name;
    char why[768] = "";
    bool graphs = rt->be->capture_begin && !rt->check && !rt->opt.eager;
    dfg_status st = rt->p->stages[si].until ? run_until(rt, si, graphs)
                    : rt->p->stages[si].runs ? run_counted(rt, si, graphs)
                    : graphs                 ? replay_runs(rt, si, si, 0, rt->p->stages[si].repeat)
                                             : exec_runs(rt, si, 0, rt->p->stages[si].repeat);
    if (st) return st;
    if (rt->be->check_flags) st = waited(rt, rt->be->check_flags, why, sizeof(why));
    if (st) return dfg_rt_fail(rt, st, true, "step %lld, stage '%s': %s", (long long)rt->step + 1, name, why);
    return DFG_OK;
}

static dfg_status run_host(dfg_runtime *rt, int si) {
    dfg_host_ctx ctx = {rt, si};
    CHECKED(dfg_check_before(rt, si, 0, 0));
    rt->error[0] = '\0';
    if (!rt->be->host_memory) { /* the host reads what the device wrote */
        double t0 = now_s();
        dfg_status sy = rt->be->sync(rt->be_state);
        rt->wait_s += now_s() - t0;
        if (sy) return dfg_rt_fail(rt, sy, true, "step %lld, before host stage '%s': the device failed (%s)",
                                   (long long)rt->step + 1, rt->p->stages[si].name, dfg_status_name(sy));
    }
    rt->in_host_stage = true;
    dfg_status st = rt->host[si](&ctx);
    rt->in_host_stage = false;
    dfg_status flushed = rt->be->host_memory ? DFG_OK : dfg_rt_staging_flush(rt);
    if (!st) st = flushed;
    if (st && !rt->error[0]) dfg_rt_fail(rt, st, true, "step %lld, host stage '%s' failed: %s", (long long)rt->step + 1,
                                         rt->p->stages[si].name, dfg_status_name(st));
    if (st) rt->status = st;
    if (!st) CHECKED(dfg_check_after(rt, si, 0, 0));
    return st;
}

/* Whether stage s runs this step: its step range, dfg_runtime_skip_stage, and its condition. */
static dfg_status stage_runs(dfg_runtime *rt, int si, bool *runs) {
    const dfg_stage *stage = &rt->p->stages[si];
    *runs = !rt->skip[si] && rt->step >= stage->first_step && (stage->last_step < 0 || rt->step <= stage->last_step);
    if (!*runs || !stage->when) return DFG_OK;
    double v = 0;
    dfg_status st = read_scalar(rt, stage->when, &v);
    if (st)
        return dfg_rt_fail(rt, st, true, "step %lld, stage '%s': reading its condition '%s' failed", (long long)rt->step + 1,
                           stage->name, stage->when->name);
    *runs = v > stage->when_lo && v <= stage->when_hi;
    return DFG_OK;
}

/* After stage si: a loop's last stage goes back to its first while its flag reads 0 and returns
 * are left (dfg_stage_loop); *next is then the stage before the first (the caller's s++). */
static dfg_status loop_back(dfg_runtime *rt, int si, int *loops, int *next) {
    const dfg_stage *s = &rt->p->stages[si];
    if (s->loop_to < 0) return DFG_OK;
    double flag = 0;
    dfg_status st = read_scalar(rt, s->loop_until, &flag);
    if (st)
        return dfg_rt_fail(rt, st, true, "step %lld, stage '%s': reading its loop's end flag '%s' failed",
                           (long long)rt->step + 1, s->name, s->loop_until->name);
    if (flag != 0 || *loops >= s->loop_max) {
        *loops = 0;
        return DFG_OK;
    }
    (*loops)++;
    *next = s->loop_to - 1;
    return DFG_OK;
}

dfg_status dfg_runtime_step(dfg_runtime *rt) {
    if (!rt) return DFG_ERR_ARG;
    if (rt->status) return rt->status;
    CHECKED(dfg_check_step_begin(rt));
    rt->step_t0 = now_s();
    rt->wait_s = 0;
    rt->updated = false;
    for (int s = 0; s < rt->p->n_stages; s++) rt->stage_runs[s] = 0, rt->stage_ms[s] = -1.0;
    int loops = 0; /* the returns made by the step's loop (loops neither nest nor overlap) */
    for (int s = 0; s < rt->p->n_stages; s++) {
        bool runs = false;
        dfg_status st = stage_runs(rt, s, &runs);
        if (st) return st;
        if (runs) {
            int before = rt->stage_runs[s]; /* earlier passes of a loop: runs and time add up */
            double t0 = now_s(), ms = rt->stage_ms[s] > 0 ? rt->stage_ms[s] : 0.0;
            rt->stage_runs[s] = 0;
            rt->updated = rt->updated || rt->stage_updates[s]; /* set before: a failure inside may have written */
            st = rt->p->stages[s].kind == DFG_STAGE_GRAPH ? run_graph(rt, s) : run_host(rt, s);
            rt->stage_ms[s] = ms + 1e3 * (now_s() - t0); /* a device backend's graph stages: their launch time */
            if (st) return st;
            if (rt->check) dfg_check_stage_end(rt, s, true);
            if (!rt->stage_runs[s] && !rt->p->stages[s].runs)
                rt->stage_runs[s] = rt->p->stages[s].kind == DFG_STAGE_GRAPH ? rt->p->stages[s].repeat : 1;
            rt->stage_runs[s] += before;
        } else if (rt->check) dfg_check_stage_end(rt, s, false);
        int at = s;
        if (runs && (st = loop_back(rt, s, &loops, &s))) return st; /* a skipped last stage: no loop this step */
        if (rt->check && rt->p->stages[at].loop_to >= 0) /* the checker's lifetimes of the loop */
            s == at ? dfg_check_loop_end(rt, at) : dfg_check_loop_back(rt, at);
    }
    double t_sync = now_s();
    dfg_status st = rt->be->sync(rt->be_state);
    rt->wait_s += now_s() - t_sync;
    if (st) return dfg_rt_fail(rt, st, true, "step %lld: device synchronisation failed", (long long)rt->step + 1);
    rt->last_step_ms = 1e3 * (now_s() - rt->step_t0);
    rt->last_wait_ms = 1e3 * rt->wait_s;
    CHECKED(dfg_check_step_end(rt));
    rt->step++;
    return DFG_OK;
}
