/* planfile_plan.c - the plan section of a plan file (format in planfile.h): the schedule and
 * memory plan dfg compile made. Here: taking the record of a compiled program, checking a
 * record read from a file on its own (ids, bounds, no two live buffers sharing a byte), and
 * checking that this dfg compiles the loaded program into exactly the recorded plan. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../passes/plan.h"
#include "planfile_internal.h"

dfg_plan_record *dfg_plan_record_new(void) { return calloc(1, sizeof(dfg_plan_record)); }

void dfg_plan_record_free(dfg_plan_record *rec) {
    if (!rec) return;
    dfg_arena_free_all(&rec->arena);
    free(rec);
}

static void *rec_alloc(dfg_plan_record *rec, size_t n, size_t elem) {
    return dfg_arena_alloc(&rec->arena, (n ? n : 1) * elem);
}

/* ---------------------------------------------------------------- the record of a compiled program */
static bool record_schedule(dfg_plan_record *rec, const dfg_program *p) {
    rec->n_graphs = (uint32_t)p->n_graphs;
    rec->n_nodes = rec_alloc(rec, rec->n_graphs, sizeof(*rec->n_nodes));
    rec->nodes = rec_alloc(rec, rec->n_graphs, sizeof(*rec->nodes));
    if (!rec->n_nodes || !rec->nodes) return false;
    for (int gi = 0; gi < p->n_graphs; gi++) {
        const dfg_graph *g = p->graphs[gi];
        rec->n_nodes[gi] = (uint32_t)g->n_nodes;
        if (!(rec->nodes[gi] = rec_alloc(rec, (size_t)g->n_nodes, sizeof(dfg_plan_sched_rec)))) return false;
        for (int i = 0; i < g->n_nodes; i++) { /* names are copied: the record outlives the program */
            size_t k = strlen(g->nodes[i]->name) + 1;
            char *name = dfg_arena_alloc(&rec->arena, k);
            if (!name) return false;
            rec->nodes[gi][i] = (dfg_plan_sched_rec){(uint32_t)g->nodes[i]->op, memcpy(name, g->nodes[i]->name, k)};
        }
    }
    return true;
}

/* Buffers placed in another (in place) are not recorded: their tensors map to the one they
 * were placed in, whose lifetime the planner stretched over theirs. */
static bool record_buffers(dfg_plan_record *rec, const dfg_program *p) {
    const dfg_plan *plan = p->plan;
    int *index = calloc((size_t)(plan->n_bufs ? plan->n_bufs : 1), sizeof(int));
    rec->bufs = rec_alloc(rec, (size_t)plan->n_bufs, sizeof(*rec->bufs));
    rec->n_tensors = (uint32_t)p->n_tensors;
    rec->tensor_buf = rec_alloc(rec, rec->n_tensors, sizeof(*rec->tensor_buf));
    rec->tensor_bytes = rec_alloc(rec, rec->n_tensors, sizeof(*rec->tensor_bytes));
    if (!index || !rec->bufs || !rec->tensor_buf || !rec->tensor_bytes) {
        free(index);
        return false;
    }
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *x = &plan->bufs[b];
        if (x->merged_into >= 0) continue;
        index[b] = (int)rec->n_bufs + 1;
        rec->bufs[rec->n_bufs++] = (dfg_plan_buf_rec){(uint32_t)x->owner, x->offset, x->size, x->life.first, x->life.last};
    }
    for (int i = 0; i < p->n_tensors; i++) {
        int b = dfg_plan_buf_root(plan, i);
        rec->tensor_buf[i] = b >= 0 ? (uint32_t)index[b] : 0u;
        rec->tensor_bytes[i] = dfg_tensor_bytes(p->tensors[i]);
    }
    free(index);
    return true;
}

/* A copy of remat's log in the record's arena (the record outlives the program). */
static bool record_remat(dfg_plan_record *rec, const dfg_remat_log *log) {
    dfg_remat_log *x = rec_alloc(rec, 1, sizeof(*x));
    if (!x) return false;
    *x = *log;
    x->copies = rec_alloc(rec, log->n_copies, sizeof(*x->copies));
    x->redirects = rec_alloc(rec, log->n_redirects, sizeof(*x->redirects));
    x->n_order = rec_alloc(rec, log->n_graphs, sizeof(*x->n_order));
    x->order = rec_alloc(rec, log->n_graphs, sizeof(*x->order));
    if (!x->copies || !x->redirects || !x->n_order || !x->order) return false;
    for (uint32_t i = 0; i < log->n_copies; i++) {
        x->copies[i] = log->copies[i];
        if (!(x->copies[i].in = rec_alloc(rec, log->copies[i].n_in, sizeof(uint32_t)))) return false;
        memcpy(x->copies[i].in, log->copies[i].in, sizeof(uint32_t) * log->copies[i].n_in);
    }
    if (log->n_redirects) memcpy(x->redirects, log->redirects, sizeof(*x->redirects) * log->n_redirects);
    for (uint32_t g = 0; g < log->n_graphs; g++) {
        x->n_order[g] = log->n_order[g];
        if (!(x->order[g] = rec_alloc(rec, log->n_order[g], sizeof(uint32_t)))) return false;
        if (log->n_order[g]) memcpy(x->order[g], log->order[g], sizeof(uint32_t) * log->n_order[g]);
    }
    rec->remat = x;
    return true;
}

dfg_plan_record *dfg_plan_record_of(const dfg_program *p) {
    dfg_plan_record *rec = dfg_plan_record_new();
    if (!rec) return NULL;
    const dfg_plan *plan = p->plan;
    rec->arena_bytes = plan->mem.arena_bytes;
    rec->align = (uint32_t)plan->opt.align;
    rec->n_steps = (uint32_t)plan->n_steps;
    if (!record_schedule(rec, p) || !record_buffers(rec, p) || (plan->remat_log && !record_remat(rec, plan->remat_log))) {
        dfg_plan_record_free(rec);
        return NULL;
    }
    return rec;
}

/* ---------------------------------------------------------------- the record on its own */
#define FAIL(...) (dfg_reader_err(r, DFG_ERR_FORMAT, "section 'plan' is invalid: " __VA_ARGS__), false)

/* "tensor 12 'h.0.qkv'" for a tensor the tensors section names, "compiled tensor 4012" past it. */
static const char *tensor_label(const dfg_plan_reader *r, uint32_t id, char *buf, size_t len) {
    if (id < r->n_tensors) snprintf(buf, len, "tensor %u '%s'", id, r->tensors[id].name);
    else snprintf(buf, len, "compiled tensor %u", id);
    return buf;
}

static bool check_header(dfg_plan_reader *r, const dfg_plan_record *rec) {
    uint32_t want_align = (uint32_t)r->info.align;
    if (!want_align) want_align = r->info.target == DFG_TARGET_CUDA ? 256u : 64u;
    if (rec->align != want_align)
        return FAIL("alignment %u, but the compile options ask for %u", rec->align, want_align);
    if (rec->n_graphs != r->n_graphs) return FAIL("%u graphs scheduled, the program has %u", rec->n_graphs, r->n_graphs);
    if (rec->n_tensors < r->n_tensors)
        return FAIL("%u compiled tensors, fewer than the %u the program was built with", rec->n_tensors, r->n_tensors);
    for (uint32_t g = 0; g < rec->n_graphs; g++)
        for (uint32_t i = 0; i < rec->n_nodes[g]; i++)
            if (rec->nodes[g][i].op >= DFG_OP_COUNT)
                return FAIL("node %u of graph '%s' ('%s') has op id %u (this dfg has %d ops)", i, r->graphs[g].name,
                            rec->nodes[g][i].name, rec->nodes[g][i].op, (int)DFG_OP_COUNT);
    return true;
}

static bool check_buffer_bounds(dfg_plan_reader *r, const dfg_plan_record *rec) {
    char tb[600];
    for (uint32_t b = 0; b < rec->n_bufs; b++) {
        const dfg_plan_buf_rec *x = &rec->bufs[b];
        if (x->owner >= rec->n_tensors)
            return FAIL("buffer %u is owned by tensor %u of %u", b, x->owner, rec->n_tensors);
        tensor_label(r, x->owner, tb, sizeof(tb));
        if (x->offset < 0 || x->size < 0 || x->offset % rec->align || (uint64_t)x->offset > rec->arena_bytes ||
            (uint64_t)x->size > rec->arena_bytes - (uint64_t)x->offset)
            return FAIL("the buffer of %s at offset %lld (+%lld bytes) is misaligned or outside the %llu-byte arena", tb,
                        (long long)x->offset, (long long)x->size, (unsigned long long)rec->arena_bytes);
        bool never = x->first == -1 && x->last == -1;
        if (!never && (x->first < 0 || x->first > x->last || (uint32_t)x->last >= rec->n_steps))
            return FAIL("the buffer of %s is live at steps %d-%d of a %u-step timeline", tb, x->first, x->last,
                        rec->n_steps);
        if (rec->tensor_buf[x->owner] != b + 1)
            return FAIL("buffer %u is owned by %s, which is not placed in it", b, tb);
    }
    return true;
}

static int by_offset(const void *x, const void *y, void *ctx) {
    const dfg_plan_buf_rec *bufs = ctx, *a = &bufs[*(const uint32_t *)x], *b = &bufs[*(const uint32_t *)y];
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* Sorted by offset, each live buffer is compared with those that start inside it. */
static bool check_overlaps(dfg_plan_reader *r, const dfg_plan_record *rec) {
    uint32_t *idx = malloc(sizeof(uint32_t) * (rec->n_bufs ? rec->n_bufs : 1)), n = 0;
    if (!idx) return dfg_reader_err(r, DFG_ERR_NOMEM, "out of memory"), false;
    for (uint32_t b = 0; b < rec->n_bufs; b++)
        if (rec->bufs[b].first >= 0 && rec->bufs[b].size > 0) idx[n++] = b;
    qsort_r(idx, n, sizeof(uint32_t), by_offset, rec->bufs);
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; i++) {
        const dfg_plan_buf_rec *a = &rec->bufs[idx[i]];
        for (uint32_t j = i + 1; j < n && ok && rec->bufs[idx[j]].offset < a->offset + a->size; j++) {
            const dfg_plan_buf_rec *b = &rec->bufs[idx[j]];
            if (a->first <= b->last && b->first <= a->last) {
                char ta[600], tb[600];
                ok = FAIL("%s and %s are live together (steps %d-%d and %d-%d) but share bytes at offset %lld",
                          tensor_label(r, a->owner, ta, sizeof(ta)), tensor_label(r, b->owner, tb, sizeof(tb)),
                          a->first, a->last, b->first, b->last, (long long)b->offset);
            }
        }
    }
    free(idx);
    return ok;
}

/* Every tensor fits its buffer, and the tensors the file describes take what their shapes say. */
static bool check_tensor_bytes(dfg_plan_reader *r, const dfg_plan_record *rec) {
    char tb[600];
    for (uint32_t i = 0; i < rec->n_tensors; i++) {
        uint32_t b = rec->tensor_buf[i];
        if (b > rec->n_bufs) return FAIL("%s is placed in buffer %u of %u", tensor_label(r, i, tb, sizeof(tb)), b - 1, rec->n_bufs);
        if (b && rec->tensor_bytes[i] > (uint64_t)rec->bufs[b - 1].size)
            return FAIL("%s takes %llu bytes, more than its %lld-byte buffer", tensor_label(r, i, tb, sizeof(tb)),
                        (unsigned long long)rec->tensor_bytes[i], (long long)rec->bufs[b - 1].size);
        if (i < r->n_tensors) {
            const dfg_plan_tensor_rec *t = &r->tensors[i];
            uint64_t want = (uint64_t)dfg_shape_numel(t->shape) * dfg_dtype_size((dfg_dtype)t->dtype);
            if (rec->tensor_bytes[i] != want)
                return FAIL("%s takes %llu bytes, but its shape and dtype need %llu", tensor_label(r, i, tb, sizeof(tb)),
                            (unsigned long long)rec->tensor_bytes[i], (unsigned long long)want);
        }
    }
    return true;
}

void dfg_plan_record_validate(dfg_plan_reader *r) {
    const dfg_plan_record *rec = r->plan;
    if (r->status || !rec) return;
    if (check_header(r, rec) && check_tensor_bytes(r, rec) && check_buffer_bounds(r, rec)) check_overlaps(r, rec);
}

/* ---------------------------------------------------------------- the record against this dfg's compile */
typedef struct {
    const dfg_program *p;
    const char *label;
    char *err;
    size_t len;
} mismatch;

static dfg_status differs(const mismatch *m, const dfg_plan_info *info, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dfg_status differs(const mismatch *m, const dfg_plan_info *info, const char *fmt, ...) {
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (!m->err || !m->len) return DFG_ERR_FORMAT;
    snprintf(m->err, m->len,
             "%s: this dfg (%s) plans the program differently from the dfg that compiled it (%s): %s; re-run dfg "
             "compile on the pipeline",
             m->label, DFG_VERSION_STRING, info->dfg_version[0] ? info->dfg_version : "unknown", what);
    dfg_plan_one_line(m->err);
    return DFG_ERR_FORMAT;
}

static dfg_status compare_schedule(const mismatch *m, const dfg_plan_info *info, const dfg_plan_record *f,
                                   const dfg_plan_record *h) {
    for (uint32_t g = 0; g < h->n_graphs; g++) {
        const char *gname = m->p->graphs[g]->name;
        if (f->n_nodes[g] != h->n_nodes[g])
            return differs(m, info, "graph '%s' schedules %u nodes in the file, %u here", gname, f->n_nodes[g], h->n_nodes[g]);
        for (uint32_t i = 0; i < h->n_nodes[g]; i++) {
            const dfg_plan_sched_rec *a = &f->nodes[g][i], *b = &h->nodes[g][i];
            if (a->op != b->op || strcmp(a->name, b->name))
                return differs(m, info, "node %u of graph '%s' is '%s' (%s) in the file, '%s' (%s) here", i, gname,
                               a->name, dfg_op_name((dfg_op)a->op), b->name, dfg_op_name((dfg_op)b->op));
        }
    }
    return DFG_OK;
}

static dfg_status compare_memory(const mismatch *m, const dfg_plan_info *info, const dfg_plan_record *f,
                                 const dfg_plan_record *h) {
    if (f->n_bufs != h->n_bufs) return differs(m, info, "%u buffers in the file, %u here", f->n_bufs, h->n_bufs);
    for (uint32_t b = 0; b < h->n_bufs; b++) {
        const dfg_plan_buf_rec *x = &f->bufs[b], *y = &h->bufs[b];
        if (x->owner != y->owner || x->offset != y->offset || x->size != y->size || x->first != y->first ||
            x->last != y->last)
            return differs(m, info,
                           "the buffer of '%s' is at offset %lld (+%lld), steps %d-%d in the file; here '%s' at %lld "
                           "(+%lld), steps %d-%d",
                           x->owner < h->n_tensors ? m->p->tensors[x->owner]->name : "?", (long long)x->offset,
                           (long long)x->size, x->first, x->last, m->p->tensors[y->owner]->name, (long long)y->offset,
                           (long long)y->size, y->first, y->last);
    }
    for (uint32_t i = 0; i < h->n_tensors; i++)
        if (f->tensor_buf[i] != h->tensor_buf[i] || f->tensor_bytes[i] != h->tensor_bytes[i])
            return differs(m, info, "tensor '%s' is in buffer %u (%llu bytes) in the file, buffer %u (%llu bytes) here",
                           m->p->tensors[i]->name, f->tensor_buf[i], (unsigned long long)f->tensor_bytes[i],
                           h->tensor_buf[i], (unsigned long long)h->tensor_bytes[i]);
    return DFG_OK;
}

dfg_status dfg_plan_check(const dfg_program *p, const dfg_plan_info *info, const char *label, char *err, size_t len) {
    mismatch m = {p, label ? label : "plan", err, len};
    if (!dfg_is_compiled(p) || !info) {
        if (err && len) snprintf(err, len, "%s: plan check: the program is not compiled", m.label);
        return DFG_ERR_STATE;
    }
    if (!info->plan) {
        if (err && len) snprintf(err, len, "%s: the plan file records no memory plan", m.label);
        return DFG_ERR_FORMAT;
    }
    dfg_plan_record *h = dfg_plan_record_of(p);
    if (!h) {
        if (err && len) snprintf(err, len, "%s: out of memory", m.label);
        return DFG_ERR_NOMEM;
    }
    const dfg_plan_record *f = info->plan;
    dfg_status st = DFG_OK;
    if (f->arena_bytes != h->arena_bytes || f->align != h->align || f->n_steps != h->n_steps)
        st = differs(&m, info, "a %llu-byte arena (alignment %u) over %u steps in the file, %llu bytes (%u) over %u here",
                     (unsigned long long)f->arena_bytes, f->align, f->n_steps, (unsigned long long)h->arena_bytes,
                     h->align, h->n_steps);
    else if (f->n_tensors != h->n_tensors || f->n_graphs != h->n_graphs)
        st = differs(&m, info, "%u tensors in %u graphs in the file, %u in %u here", f->n_tensors, f->n_graphs,
                     h->n_tensors, h->n_graphs);
    if (!st) st = compare_schedule(&m, info, f, h);
    if (!st) st = compare_memory(&m, info, f, h);
    dfg_plan_record_free(h);
    return st;
}

dfg_status dfg_plan_compile(dfg_program *p, const dfg_plan_info *info, const char *label, char *err, size_t len) {
    dfg_options o = dfg_plan_options(info);
    dfg_status st = dfg_compile(p, &o);
    if (st) {
        if (err && len) snprintf(err, len, "%s: %s", label ? label : "plan", dfg_program_error(p)), dfg_plan_one_line(err);
        return st;
    }
    return dfg_plan_check(p, info, label, err, len);
}
