/* planfile_write.c - serialises a program into the plan format of planfile.h and writes it
 * atomically (fileio.h's one writer). The writer checks the invariants the reader relies on (ids
 * in order, outputs of a node on consecutive ids) so that a bug elsewhere gives a clear refusal,
 * not an unreadable file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/op.h"
#include "../../passes/plan.h"
#include "fileio.h"
#include "planfile_internal.h"

/* ---------------------------------------------------------------- a growable byte buffer */
typedef struct {
    unsigned char *b;
    size_t n, cap;
    bool oom;
} wbuf;

static void put(wbuf *w, const void *data, size_t k) {
    if (w->oom) return;
    if (k > SIZE_MAX - w->n) {
        w->oom = true;
        return;
    }
    if (w->n + k > w->cap) {
        size_t nc = w->cap ? w->cap : 4096;
        while (nc < w->n + k) nc = nc > SIZE_MAX / 2 ? w->n + k : nc * 2;
        unsigned char *nb = realloc(w->b, nc);
        if (!nb) {
            w->oom = true;
            return;
        }
        w->b = nb;
        w->cap = nc;
    }
    if (k) memcpy(w->b + w->n, data, k);
    w->n += k;
}

static void put_le(wbuf *w, uint64_t v, int bytes) {
    unsigned char b[8];
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}
static void put_u8(wbuf *w, unsigned v) { put_le(w, v, 1); }
static void put_u32(wbuf *w, uint32_t v) { put_le(w, v, 4); }
static void put_u64(wbuf *w, uint64_t v) { put_le(w, v, 8); }
static void put_f64(wbuf *w, double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof(bits));
    put_u64(w, bits);
}
static void put_f32(wbuf *w, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    put_u32(w, u);
}
static void put_str(wbuf *w, const char *s) {
    size_t k = s ? strlen(s) : 0;
    put_u32(w, (uint32_t)k);
    put(w, s, k);
}

/* Patches a little-endian u32/u64 at offset `at` (space reserved earlier). */
static void patch_le(wbuf *w, size_t at, uint64_t v, int bytes) {
    if (w->oom) return;
    for (int i = 0; i < bytes; i++) w->b[at + (size_t)i] = (unsigned char)(v >> (8 * i));
}

/* Sections: the header is reserved first and patched once the payload is written. */
static size_t section_begin(wbuf *w, dfg_plan_section kind) {
    put_u32(w, (uint32_t)kind);
    size_t at = w->n;
    put_u64(w, 0);
    put_u32(w, 0);
    return at;
}

static void section_end(wbuf *w, size_t at) {
    if (w->oom) return;
    size_t start = at + 12, len = w->n - start;
    patch_le(w, at, len, 8);
    patch_le(w, at + 8, dfg_plan_crc32(w->b + start, len), 4);
}

/* ---------------------------------------------------------------- checks */
static dfg_status fail(char *err, size_t len, dfg_status s, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static dfg_status fail(char *err, size_t len, dfg_status s, const char *fmt, ...) {
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return s;
}

#define NAME_MAX_BYTES 4096u

static bool name_ok(const char *s) { return s && strlen(s) <= NAME_MAX_BYTES; }

static uint32_t ref(const dfg_tensor *t) { return t ? (uint32_t)t->id + 1u : 0u; }

/* The reader rebuilds nodes from their first output's id; that needs these invariants. */
static dfg_status check_program(const dfg_program *p, char *err, size_t len) {
    if (dfg_program_status(p))
        return fail(err, len, DFG_ERR_STATE, "the program has an error: %s", dfg_program_error(p));
    /* dce and schedule rewrote the node lists: what the builders made is no longer there */
    if (p->plan)
        return fail(err, len, DFG_ERR_STATE, "program '%s' is compiled; a plan file holds the program as built (save it "
                                             "before dfg_compile)", p->name);
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        bool scope_ok = !t->scope_first || (name_ok(t->scope_first) && name_ok(t->scope_last));
        if (t->id != i || !name_ok(t->name) || !scope_ok)
            return fail(err, len, DFG_ERR_STATE, "tensor %d has an inconsistent id or a name over %u bytes", i,
                        NAME_MAX_BYTES);
        if (t->kind == DFG_TEMP && (!t->producer || t->producer->out[t->producer_slot] != t))
            return fail(err, len, DFG_ERR_STATE, "temporary '%s' has no producing node", t->name);
    }
    for (int gi = 0; gi < p->n_graphs; gi++) {
        const dfg_graph *g = p->graphs[gi];
        if (g->id != gi || !name_ok(g->name)) return fail(err, len, DFG_ERR_STATE, "graph %d is inconsistent", gi);
        for (int i = 0; i < g->n_nodes; i++) {
            const dfg_node *n = g->nodes[i];
            for (int k = 1; k < n->n_out; k++)
                if (n->out[k]->id != n->out[0]->id + k)
                    return fail(err, len, DFG_ERR_STATE, "node '%s' in graph '%s': outputs are not consecutive tensors",
                                n->name, g->name);
            if (n->grad_of && (n->grad_of->graph != g || n->grad_of->id >= i || g->nodes[n->grad_of->id] != n->grad_of))
                return fail(err, len, DFG_ERR_STATE, "node '%s' in graph '%s' differentiates a node that is not before it",
                            n->name, g->name);
        }
    }
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        if (st->kind == DFG_STAGE_GRAPH && (!st->graph || st->graph->program != p))
            return fail(err, len, DFG_ERR_STATE, "stage '%s' runs a graph of another program", st->name);
        if (!name_ok(st->name) || (st->kind == DFG_STAGE_HOST && !name_ok(st->symbol)))
            return fail(err, len, DFG_ERR_STATE, "stage %d has a name over %u bytes", s, NAME_MAX_BYTES);
    }
    return DFG_OK;
}

/* ---------------------------------------------------------------- sections */
static uint32_t option_flags(const dfg_plan_info *info) {
    return (info->no_reuse ? DFG_PLAN_OPT_NO_REUSE : 0u) | (info->keep_order ? DFG_PLAN_OPT_KEEP_ORDER : 0u) |
           (info->no_fuse ? DFG_PLAN_OPT_NO_FUSE : 0u) | (info->memory_min ? DFG_PLAN_OPT_MEMORY_MIN : 0u);
}

static void write_info(wbuf *w, const dfg_program *p, const dfg_plan_info *info) {
    size_t at = section_begin(w, DFG_PLAN_SEC_INFO);
    put_u32(w, (uint32_t)info->target);
    put_str(w, p->name);
    put_str(w, info->source);
    put_str(w, DFG_VERSION_STRING);
    put_u32(w, (uint32_t)DFG_OP_COUNT);
    put_u32(w, (uint32_t)info->align);
    put_u32(w, option_flags(info));
    put_u64(w, (uint64_t)info->memory_budget);
    section_end(w, at);
}

static void write_settings(wbuf *w, const dfg_program *p) {
    size_t at = section_begin(w, DFG_PLAN_SEC_SETTINGS);
    put_u32(w, (uint32_t)p->n_settings);
    for (int i = 0; i < p->n_settings; i++) {
        put_str(w, p->settings[i].key);
        put_str(w, p->settings[i].value);
        put_u8(w, p->settings[i].used ? 1u : 0u);
    }
    section_end(w, at);
}

/* POISON never reaches the tensor table and DEAD is compile's: neither is stored. */
static unsigned tensor_flags(const dfg_tensor *t) {
    return ((t->flags & DFG_TF_OUTPUT) ? DFG_PLAN_TF_OUTPUT : 0u) | ((t->flags & DFG_TF_GRAD) ? DFG_PLAN_TF_GRAD : 0u) |
           ((t->flags & DFG_TF_NULLABLE) ? DFG_PLAN_TF_NULLABLE : 0u);
}

static void write_tensor(wbuf *w, const dfg_tensor *t) {
    put_u8(w, (unsigned)t->kind);
    put_u8(w, (unsigned)t->dtype);
    put_u8(w, (unsigned)t->role);
    put_u8(w, tensor_flags(t));
    put_u8(w, (unsigned)t->shape.rank);
    for (int d = 0; d < t->shape.rank; d++) put_u64(w, (uint64_t)t->shape.d[d]);
    put_str(w, t->name);
    if (t->kind == DFG_STATE || t->kind == DFG_INPUT) {
        put_str(w, t->scope_first ? t->scope_first : "");
        put_str(w, t->scope_first ? t->scope_last : "");
    }
    if (t->kind == DFG_PARAM || t->kind == DFG_STATE) {
        put_u8(w, (unsigned)t->init.kind);
        put_f32(w, t->init.a);
        put_f32(w, t->init.b);
        put_u32(w, ref(t->init_from));
    } else if (t->kind == DFG_CONST) {
        size_t bytes = dfg_tensor_bytes(t);
        put_u64(w, bytes);
        put(w, t->data, bytes);
    }
    put_u32(w, ref(t->grad_wrt));
}

static void write_tensors(wbuf *w, const dfg_program *p) {
    size_t at = section_begin(w, DFG_PLAN_SEC_TENSORS);
    put_u32(w, (uint32_t)p->n_tensors);
    for (int i = 0; i < p->n_tensors; i++) write_tensor(w, p->tensors[i]);
    section_end(w, at);
}

static void write_node(wbuf *w, const dfg_node *n) {
    put_u32(w, (uint32_t)n->op);
    put_str(w, dfg_op_name(n->op));
    put_str(w, n->name);
    put_u8(w, (n->flags & DFG_NF_BACKWARD) ? DFG_PLAN_NF_BACKWARD : 0u);
    put_u32(w, n->grad_of ? (uint32_t)n->grad_of->id + 1u : 0u);
    put_u32(w, (uint32_t)n->n_in);
    for (int j = 0; j < n->n_in; j++) put_u32(w, (uint32_t)n->in[j]->id);
    put_u32(w, (uint32_t)n->n_out);
    put_u32(w, (uint32_t)n->out[0]->id);
    /* field by field through the op's layout: the same node always gives the same bytes */
    unsigned char attr[DFG_ATTRS_MAX_ENCODED];
    size_t k = dfg_attrs_encode(dfg_op_attrs(n->op), n->attr, attr);
    put_u32(w, (uint32_t)k);
    put(w, attr, k);
}

static void write_graphs(wbuf *w, const dfg_program *p) {
    size_t at = section_begin(w, DFG_PLAN_SEC_GRAPHS);
    put_u32(w, (uint32_t)p->n_graphs);
    for (int gi = 0; gi < p->n_graphs; gi++) {
        const dfg_graph *g = p->graphs[gi];
        put_str(w, g->name);
        put_u32(w, (uint32_t)g->n_nodes);
        for (int i = 0; i < g->n_nodes; i++) write_node(w, g->nodes[i]);
    }
    section_end(w, at);
}

static void write_stages(wbuf *w, const dfg_program *p) {
    size_t at = section_begin(w, DFG_PLAN_SEC_STAGES);
    put_u32(w, (uint32_t)p->n_stages);
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        put_u8(w, st->kind == DFG_STAGE_GRAPH ? 0u : 1u);
        put_str(w, st->name);
        if (st->kind == DFG_STAGE_GRAPH) {
            put_u32(w, (uint32_t)st->graph->id);
            put_u32(w, (uint32_t)st->repeat);
        } else {
            put_str(w, st->symbol);
        }
        put_u64(w, (uint64_t)st->first_step);
        put_u64(w, (uint64_t)st->last_step);
        put_u32(w, ref(st->until));
        put_u32(w, ref(st->when));
        put_f64(w, st->when ? st->when_lo : 0.0);
        put_f64(w, st->when ? st->when_hi : 0.0);
        put_u32(w, ref(st->runs));
        put_u32(w, (uint32_t)(st->loop_to + 1));
        put_u32(w, st->loop_to >= 0 ? (uint32_t)st->loop_max : 0u);
        put_u32(w, ref(st->loop_until));
    }
    section_end(w, at);
}

/* remat's decisions (format in planfile.h): u8 0 when remat did not run. */
static void write_remat(wbuf *w, const dfg_remat_log *log) {
    put_u8(w, log ? 1u : 0u);
    if (!log) return;
    put_u32(w, (uint32_t)log->rounds);
    put_u32(w, (uint32_t)log->batched_rounds);
    put_u32(w, log->n_copies);
    for (uint32_t i = 0; i < log->n_copies; i++) {
        const dfg_remat_copy *c = &log->copies[i];
        put_u32(w, c->graph);
        put_u32(w, c->src);
        put_u32(w, c->after);
        put_u32(w, c->n_in);
        for (uint32_t j = 0; j < c->n_in; j++) put_u32(w, c->in[j]);
    }
    put_u32(w, log->n_redirects);
    for (uint32_t r = 0; r < log->n_redirects; r++) {
        put_u32(w, log->redirects[r].reader);
        put_u32(w, log->redirects[r].slot);
        put_u32(w, log->redirects[r].tensor);
    }
    put_u32(w, log->n_graphs);
    for (uint32_t g = 0; g < log->n_graphs; g++) {
        put_u32(w, log->n_order[g]);
        for (uint32_t i = 0; i < log->n_order[g]; i++) put_u32(w, log->order[g][i]);
    }
}

/* The schedule and memory plan (format in planfile.h); lifetimes -1 are stored as their bits. */
static void write_plan(wbuf *w, const dfg_plan_record *rec) {
    size_t at = section_begin(w, DFG_PLAN_SEC_PLAN);
    put_u64(w, rec->arena_bytes);
    put_u32(w, rec->align);
    put_u32(w, rec->n_steps);
    put_u32(w, rec->n_tensors);
    put_u32(w, rec->n_graphs);
    for (uint32_t g = 0; g < rec->n_graphs; g++) {
        put_u32(w, rec->n_nodes[g]);
        for (uint32_t i = 0; i < rec->n_nodes[g]; i++) {
            put_u32(w, rec->nodes[g][i].op);
            put_str(w, rec->nodes[g][i].name);
        }
    }
    put_u32(w, rec->n_bufs);
    for (uint32_t b = 0; b < rec->n_bufs; b++) {
        const dfg_plan_buf_rec *x = &rec->bufs[b];
        put_u32(w, x->owner);
        put_u64(w, (uint64_t)x->offset);
        put_u64(w, (uint64_t)x->size);
        put_u32(w, (uint32_t)x->first);
        put_u32(w, (uint32_t)x->last);
    }
    for (uint32_t i = 0; i < rec->n_tensors; i++) {
        put_u32(w, rec->tensor_buf[i]);
        put_u64(w, rec->tensor_bytes[i]);
    }
    write_remat(w, rec->remat);
    section_end(w, at);
}

/* What the pipeline declared (graph/declare.c): rebuilt through the same calls on load. */
static void write_declarations(wbuf *w, const dfg_program *p) {
    const dfg_declarations *d = &p->decl;
    size_t at = section_begin(w, DFG_PLAN_SEC_DECLARATIONS);
    put_str(w, d->host_init ? d->host_init : "");
    put_str(w, d->host_release ? d->host_release : "");
    put_u32(w, (uint32_t)d->n_rollout_stages);
    for (int i = 0; i < d->n_rollout_stages; i++) put_str(w, d->rollout_stages[i]);
    put_u32(w, (uint32_t)d->n_rollout_tensors);
    for (int i = 0; i < d->n_rollout_tensors; i++) put_u32(w, ref(d->rollout_tensors[i]));
    put_u32(w, ref(d->shared_tokens));
    put_u64(w, (uint64_t)d->shared_len);
    put_u64(w, (uint64_t)d->shared_group);
    put_u32(w, (uint32_t)d->n_dumps);
    for (int i = 0; i < d->n_dumps; i++) {
        put_str(w, d->dumps[i].name);
        put_u32(w, ref(d->dumps[i].t));
    }
    put_str(w, d->rollouts_only ? d->rollouts_only : "");
    put_u8(w, d->batch_invariant ? 1u : 0u);
    put_u32(w, ref(d->prompt_tokens));
    put_u64(w, (uint64_t)d->prompt_len);
    section_end(w, at);
}

/* The plan of the program the sections written so far describe: they are read back (the
 * program is const here, and compiling seals a program) and the copy is compiled as a loader
 * will compile it. A compile error comes back with compile's status and message. */
static dfg_status plan_by_compiling(const wbuf *w, const dfg_plan_info *info, dfg_plan_record **out, char *err,
                                    size_t len) {
    dfg_program *q = NULL;
    dfg_status st = dfg_plan_parse_bytes(w->b, w->n, "plan", true, &q, NULL, err, len);
    if (st) return st;
    dfg_options o = dfg_plan_options(info);
    st = dfg_compile(q, &o);
    if (info->times && q->plan) *info->times = q->plan->report.times; /* kept when the compile fails too */
    if (st) fail(err, len, st, "%s", dfg_program_error(q));
    else if (!(*out = dfg_plan_record_of(q))) st = fail(err, len, DFG_ERR_NOMEM, "plan: out of memory");
    dfg_program_free(q);
    return st;
}

dfg_status dfg_plan_serialize(const dfg_program *p, const dfg_plan_info *info, void **out, size_t *out_len, char *err,
                              size_t len) {
    if (!p || !info || !out || !out_len) return fail(err, len, DFG_ERR_ARG, "plan: NULL argument");
    *out = NULL;
    *out_len = 0;
    if ((unsigned)info->target >= DFG_TARGET_COUNT) return fail(err, len, DFG_ERR_ARG, "plan: unknown target %d", (int)info->target);
    if (!info->host_lib != !info->host_lib_size)
        return fail(err, len, DFG_ERR_ARG, "plan: host library bytes and size disagree");
    if (info->align > DFG_PLAN_MAX_ALIGN || (info->align & (info->align - 1)))
        return fail(err, len, DFG_ERR_ARG, "plan: alignment %zu is not a power of two up to %zu", info->align,
                    DFG_PLAN_MAX_ALIGN);
    if (info->memory_budget < 0)
        return fail(err, len, DFG_ERR_ARG, "plan: memory budget %lld is negative", (long long)info->memory_budget);
    dfg_status st = check_program(p, err, len);
    if (st) return st;
    wbuf w = {0};
    uint32_t n_sections = info->host_lib ? 7u : 6u; /* and the plan */
    put(&w, DFG_PLAN_MAGIC, 8); /* the 7 letters and their NUL */
    put_u32(&w, DFG_PLAN_VERSION);
    put_u32(&w, n_sections);
    write_info(&w, p, info);
    write_settings(&w, p);
    write_tensors(&w, p);
    write_graphs(&w, p);
    write_stages(&w, p);
    write_declarations(&w, p);
    if (info->host_lib) {
        size_t at = section_begin(&w, DFG_PLAN_SEC_HOSTLIB);
        put(&w, info->host_lib, info->host_lib_size);
        section_end(&w, at);
    }
    dfg_plan_record *made = NULL;
    if (!info->plan && !w.oom && (st = plan_by_compiling(&w, info, &made, err, len))) {
        free(w.b);
        return st;
    }
    const dfg_plan_record *rec = info->plan ? info->plan : made;
    if (rec) write_plan(&w, rec); /* NULL only after running out of memory */
    dfg_plan_record_free(made);
    patch_le(&w, 12, n_sections + 1, 4);
    if (w.oom) {
        free(w.b);
        return fail(err, len, DFG_ERR_NOMEM, "plan: out of memory serialising the program");
    }
    *out = w.b;
    *out_len = w.n;
    return DFG_OK;
}

/* ---------------------------------------------------------------- the file */
dfg_status dfg_plan_save(const dfg_program *p, const dfg_plan_info *info, const char *path, char *err, size_t len) {
    if (!path || !*path) return fail(err, len, DFG_ERR_ARG, "plan: no output path");
    void *bytes = NULL;
    size_t n = 0;
    dfg_status st = dfg_plan_serialize(p, info, &bytes, &n, err, len);
    if (st) return st;
    st = dfg_file_write(path, bytes, n, err, len);
    free(bytes);
    return st;
}
