/* planfile_read.c - reads a plan file (format in planfile.h) without trusting it: the header and
 * every section are checked against the bytes present, payloads are decoded into records with
 * every count capped, and planfile_build.c rebuilds the program from the records through the
 * public construction calls. Every failure is one line: "<file>: <what is wrong>". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../passes/plan.h"
#include "planfile_internal.h"

/* Caps on counts the file declares. Each is also checked against the bytes left, so an
 * allocation is never larger than a small multiple of the file. */
#define MAX_NAME 4096u
#define MAX_VALUE (1u << 20)
#define MAX_SETTINGS 4096u
#define MAX_TENSORS (1u << 24)
#define MAX_GRAPHS 4096u
#define MAX_NODES (1u << 24)
#define MAX_NODE_IO (1u << 20)
#define MAX_STAGES 4096u

void dfg_plan_one_line(char *msg) {
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

dfg_status dfg_reader_err(dfg_plan_reader *r, dfg_status s, const char *fmt, ...) {
    if (r->status) return r->status;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    dfg_plan_one_line(msg);
    if (r->err && r->err_len) snprintf(r->err, r->err_len, "%s: %s", r->label, msg);
    r->status = s;
    return s;
}

/* ---------------------------------------------------------------- the payload cursor */
typedef struct {
    dfg_plan_reader *r;
    const unsigned char *b;
    size_t n, off;
    const char *sec; /* the section's name, for messages */
} cursor;

/* True when k more bytes are present; otherwise records "<what> needs k bytes, m left". */
static bool need(cursor *c, uint64_t k, const char *what) {
    if (c->r->status) return false;
    if (k <= c->n - c->off) return true;
    dfg_reader_err(c->r, DFG_ERR_FORMAT, "section '%s' is malformed: %s needs %llu bytes, %zu left", c->sec, what,
                   (unsigned long long)k, c->n - c->off);
    return false;
}

static uint64_t get_le(cursor *c, int bytes, const char *what) {
    if (!need(c, (uint64_t)bytes, what)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)c->b[c->off + (size_t)i] << (8 * i);
    c->off += (size_t)bytes;
    return v;
}
static unsigned get_u8(cursor *c, const char *what) { return (unsigned)get_le(c, 1, what); }
static uint32_t get_u32(cursor *c, const char *what) { return (uint32_t)get_le(c, 4, what); }
static uint64_t get_u64(cursor *c, const char *what) { return get_le(c, 8, what); }
static float get_f32(cursor *c, const char *what) {
    uint32_t u = get_u32(c, what);
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* A string as a NUL-terminated copy in the reader's arena; NULL on error. */
static const char *get_str(cursor *c, uint32_t max, const char *what) {
    uint32_t k = get_u32(c, what);
    if (c->r->status) return NULL;
    if (k > max) {
        dfg_reader_err(c->r, DFG_ERR_FORMAT, "section '%s' is malformed: %s is %u bytes long (at most %u)", c->sec, what,
                       k, max);
        return NULL;
    }
    if (!need(c, k, what)) return NULL;
    if (memchr(c->b + c->off, 0, k)) {
        dfg_reader_err(c->r, DFG_ERR_FORMAT, "section '%s' is malformed: %s contains a NUL byte", c->sec, what);
        return NULL;
    }
    char *s = dfg_arena_alloc(&c->r->arena, (size_t)k + 1);
    if (!s) {
        dfg_reader_err(c->r, DFG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(s, c->b + c->off, k);
    c->off += k;
    return s;
}

/* A count of records of at least min_rec bytes each: capped, and checked against what is left. */
static uint32_t get_count(cursor *c, uint32_t max, size_t min_rec, const char *what) {
    uint32_t n = get_u32(c, what);
    if (c->r->status) return 0;
    if (n > max || (uint64_t)n * min_rec > c->n - c->off) {
        dfg_reader_err(c->r, DFG_ERR_FORMAT, "section '%s' is malformed: %u %s cannot fit (cap %u, %zu bytes left)",
                       c->sec, n, what, max, c->n - c->off);
        return 0;
    }
    return n;
}

static void *alloc_array(dfg_plan_reader *r, size_t n, size_t elem) {
    void *a = dfg_arena_alloc(&r->arena, (n ? n : 1) * elem);
    if (!a) dfg_reader_err(r, DFG_ERR_NOMEM, "out of memory");
    return a;
}

static bool end_of_section(cursor *c) {
    if (c->r->status) return false;
    if (c->off == c->n) return true;
    dfg_reader_err(c->r, DFG_ERR_FORMAT, "section '%s' is malformed: %zu unexpected bytes at its end", c->sec,
                   c->n - c->off);
    return false;
}

/* ---------------------------------------------------------------- sections */
static void read_info(dfg_plan_reader *r, cursor *c) {
    uint32_t target = get_u32(c, "the target");
    const char *name = get_str(c, MAX_NAME, "the program name");
    const char *source = get_str(c, MAX_NAME, "the source file name");
    const char *version = get_str(c, MAX_NAME, "the writer's version");
    get_u32(c, "the op count"); /* informational: each node's op is checked by name */
    uint32_t align = get_u32(c, "the alignment");
    uint32_t flags = get_u32(c, "the compile flags");
    int64_t budget = (int64_t)get_u64(c, "the memory budget");
    if (!end_of_section(c)) return;
    if (align > DFG_PLAN_MAX_ALIGN || (align & (align - 1)) || (flags & ~(uint32_t)DFG_PLAN_OPT_ALL) || budget < 0)
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT,
                                    "section 'info' is malformed: alignment %u, compile flags %#x, memory budget %lld",
                                    align, flags, (long long)budget);
    if (target >= DFG_TARGET_COUNT)
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT, "unknown target %u (this dfg knows cpu and cuda)", target);
    r->name = name;
    r->info.target = (dfg_target)target;
    snprintf(r->info.source, sizeof(r->info.source), "%s", source);
    snprintf(r->info.dfg_version, sizeof(r->info.dfg_version), "%s", version);
    r->info.align = align;
    r->info.no_reuse = (flags & DFG_PLAN_OPT_NO_REUSE) != 0;
    r->info.keep_order = (flags & DFG_PLAN_OPT_KEEP_ORDER) != 0;
    r->info.no_fuse = (flags & DFG_PLAN_OPT_NO_FUSE) != 0;
    r->info.memory_min = (flags & DFG_PLAN_OPT_MEMORY_MIN) != 0;
    r->info.memory_budget = budget;
}

static void read_settings(dfg_plan_reader *r, cursor *c) {
    r->n_settings = get_count(c, MAX_SETTINGS, 9, "settings");
    r->settings = alloc_array(r, r->n_settings, sizeof(*r->settings));
    for (uint32_t i = 0; i < r->n_settings && !r->status; i++) {
        dfg_plan_setting_rec *s = &r->settings[i];
        s->key = get_str(c, MAX_NAME, "a setting's key");
        s->value = get_str(c, MAX_VALUE, "a setting's value");
        unsigned used = get_u8(c, "a setting's used flag");
        if (!r->status && (!*s->key || used > 1))
            dfg_reader_err(r, DFG_ERR_FORMAT, "section 'settings' is malformed: setting %u has an empty key or a bad flag",
                           i);
        s->used = used == 1;
    }
    end_of_section(c);
}

/* Ranks, dims and element counts as the program's constructors accept them. */
static bool shape_ok(dfg_shape s) {
    if (s.rank < 0 || s.rank > DFG_MAX_RANK) return false;
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++) {
        if (s.d[i] < 1 || s.d[i] > DFG_PLAN_MAX_DIM || n > DFG_PLAN_MAX_DIM / s.d[i]) return false;
        n *= s.d[i];
    }
    return true;
}

/* Both names or neither: a scope is a range of stages (dfg_set_scope checks the rest). */
static void read_scope(dfg_plan_reader *r, cursor *c, uint32_t i, dfg_plan_tensor_rec *t) {
    const char *first = get_str(c, MAX_NAME, "a scope's first stage");
    const char *last = get_str(c, MAX_NAME, "a scope's last stage");
    if (r->status) return;
    if (!*first != !*last)
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT, "section 'tensors' is malformed: tensor %u '%s' has a scope "
                                    "with one end", i, t->name);
    if (*first) t->scope_first = first, t->scope_last = last;
}

static void read_tensor(dfg_plan_reader *r, cursor *c, uint32_t i, dfg_plan_tensor_rec *t) {
    t->kind = get_u8(c, "a tensor's kind");
    t->dtype = get_u8(c, "a tensor's dtype");
    t->role = get_u8(c, "a tensor's role");
    t->flags = get_u8(c, "a tensor's flags");
    unsigned rank = get_u8(c, "a tensor's rank");
    if (r->status) return;
    if (t->kind >= DFG_KIND_COUNT || t->dtype >= DFG_DTYPE_COUNT || t->role >= DFG_ROLE_COUNT ||
        (t->flags & ~(unsigned)DFG_PLAN_TF_ALL) || rank > DFG_MAX_RANK)
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT,
                                    "section 'tensors' is malformed: tensor %u has kind %u, dtype %u, role %u, flags %u, "
                                    "rank %u",
                                    i, t->kind, t->dtype, t->role, t->flags, rank);
    t->shape.rank = (int)rank;
    for (unsigned d = 0; d < rank; d++) t->shape.d[d] = (int64_t)get_u64(c, "a tensor's dim");
    t->name = get_str(c, MAX_NAME, "a tensor's name");
    if (r->status) return;
    if (!shape_ok(t->shape)) {
        char sb[160];
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT, "section 'tensors' is malformed: tensor %u '%s' has shape %s",
                                    i, t->name, dfg_shape_str(t->shape, sb, sizeof(sb)));
    }
    if (t->kind == DFG_STATE || t->kind == DFG_INPUT) read_scope(r, c, i, t);
    if (t->kind == DFG_PARAM || t->kind == DFG_STATE) {
        unsigned k = get_u8(c, "an init kind");
        t->init.a = get_f32(c, "an init value");
        t->init.b = get_f32(c, "an init value");
        t->init_from = get_u32(c, "an init source");
        if (!r->status && k >= DFG_INIT_COUNT)
            return (void)dfg_reader_err(r, DFG_ERR_FORMAT, "section 'tensors' is malformed: tensor %u '%s' has init kind %u",
                                        i, t->name, k);
        t->init.kind = (dfg_init_kind)k;
    } else if (t->kind == DFG_CONST) {
        uint64_t bytes = get_u64(c, "a constant's size");
        uint64_t want = (uint64_t)dfg_shape_numel(t->shape) * dfg_dtype_size((dfg_dtype)t->dtype);
        if (!r->status && bytes != want)
            return (void)dfg_reader_err(r, DFG_ERR_FORMAT,
                                        "section 'tensors' is malformed: constant '%s' holds %llu bytes, its shape needs "
                                        "%llu",
                                        t->name, (unsigned long long)bytes, (unsigned long long)want);
        if (!need(c, bytes, "a constant's data")) return;
        t->data = c->b + c->off;
        c->off += (size_t)bytes;
    }
    t->grad_wrt = get_u32(c, "a gradient's tensor");
}

static void read_tensors(dfg_plan_reader *r, cursor *c) {
    r->n_tensors = get_count(c, MAX_TENSORS, 13, "tensors");
    r->tensors = alloc_array(r, r->n_tensors, sizeof(*r->tensors));
    for (uint32_t i = 0; i < r->n_tensors && !r->status; i++) read_tensor(r, c, i, &r->tensors[i]);
    end_of_section(c);
}

#define NODE_MIN_BYTES (4 + 4 + 4 + 1 + 4 + 4 + 4 + 4 + 4)

static void read_node(dfg_plan_reader *r, cursor *c, dfg_plan_node_rec *n) {
    n->op = get_u32(c, "a node's op");
    n->op_name = get_str(c, MAX_NAME, "a node's op name");
    n->name = get_str(c, MAX_NAME, "a node's name");
    n->flags = get_u8(c, "a node's flags");
    if (!r->status && (n->flags & ~(unsigned)DFG_PLAN_NF_ALL))
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT, "section 'graphs' is malformed: node '%s' has flags %#x", n->name,
                                    n->flags);
    n->grad_of = get_u32(c, "a node's forward node");
    n->n_in = get_count(c, MAX_NODE_IO, 4, "node inputs");
    n->in = alloc_array(r, n->n_in, sizeof(*n->in));
    for (uint32_t j = 0; j < n->n_in && !r->status; j++) n->in[j] = get_u32(c, "a node's input id");
    n->n_out = get_u32(c, "a node's output count");
    n->first_out = get_u32(c, "a node's first output id");
    n->attr_len = get_count(c, DFG_ATTRS_MAX_ENCODED, 1, "attribute bytes");
    if (!need(c, n->attr_len, "a node's attributes")) return;
    n->attr = c->b + c->off; /* decoded against the op's layout when the node is rebuilt */
    c->off += n->attr_len;
}

static void read_graphs(dfg_plan_reader *r, cursor *c) {
    r->n_graphs = get_count(c, MAX_GRAPHS, 8, "graphs");
    r->graphs = alloc_array(r, r->n_graphs, sizeof(*r->graphs));
    for (uint32_t gi = 0; gi < r->n_graphs && !r->status; gi++) {
        dfg_plan_graph_rec *g = &r->graphs[gi];
        g->name = get_str(c, MAX_NAME, "a graph's name");
        g->n_nodes = get_count(c, MAX_NODES, NODE_MIN_BYTES, "nodes");
        g->nodes = alloc_array(r, g->n_nodes, sizeof(*g->nodes));
        for (uint32_t i = 0; i < g->n_nodes && !r->status; i++) {
            g->nodes[i].graph = gi;
            g->nodes[i].index = i;
            read_node(r, c, &g->nodes[i]);
        }
    }
    end_of_section(c);
}

static void read_stages(dfg_plan_reader *r, cursor *c) {
    r->n_stages = get_count(c, MAX_STAGES, 9, "stages");
    r->stages = alloc_array(r, r->n_stages, sizeof(*r->stages));
    for (uint32_t i = 0; i < r->n_stages && !r->status; i++) {
        dfg_plan_stage_rec *s = &r->stages[i];
        s->kind = get_u8(c, "a stage's kind");
        s->name = get_str(c, MAX_NAME, "a stage's name");
        if (s->kind == 0) {
            s->graph = get_u32(c, "a stage's graph");
            s->repeat = get_u32(c, "a stage's repeat count");
        } else if (s->kind == 1) {
            s->symbol = get_str(c, MAX_NAME, "a host stage's function");
        } else if (!r->status) {
            dfg_reader_err(r, DFG_ERR_FORMAT, "section 'stages' is malformed: stage %u has kind %u", i, s->kind);
        }
        s->first_step = (int64_t)get_u64(c, "a stage's first step");
        s->last_step = (int64_t)get_u64(c, "a stage's last step");
        s->until = get_u32(c, "a stage's end flag");
        s->when = get_u32(c, "a stage's condition");
        uint64_t lo = get_u64(c, "a stage's condition's low end"), hi = get_u64(c, "a stage's condition's high end");
        memcpy(&s->when_lo, &lo, sizeof(lo));
        memcpy(&s->when_hi, &hi, sizeof(hi));
        s->runs = get_u32(c, "a stage's run count");
        s->loop_to = get_u32(c, "a stage's loop");
        s->loop_max = get_u32(c, "a stage's loop's returns");
        s->loop_until = get_u32(c, "a stage's loop's end flag");
    }
    end_of_section(c);
}

static void read_declarations(dfg_plan_reader *r, cursor *c) {
    dfg_plan_decl_rec *d = &r->decl;
    d->host_init = get_str(c, MAX_NAME, "the host state's init function");
    d->host_release = get_str(c, MAX_NAME, "the host state's release function");
    d->n_stages = get_count(c, MAX_STAGES, 4, "rollout stages");
    d->stages = alloc_array(r, d->n_stages, sizeof(*d->stages));
    for (uint32_t i = 0; i < d->n_stages && !r->status; i++) d->stages[i] = get_str(c, MAX_NAME, "a rollout stage");
    d->n_tensors = get_count(c, MAX_TENSORS, 4, "rollout tensors");
    d->tensors = alloc_array(r, d->n_tensors, sizeof(*d->tensors));
    for (uint32_t i = 0; i < d->n_tensors && !r->status; i++) d->tensors[i] = get_u32(c, "a rollout tensor");
    d->shared = get_u32(c, "the shared-prompt tokens");
    d->shared_len = (int64_t)get_u64(c, "the shared prompt length");
    d->shared_group = (int64_t)get_u64(c, "the shared prompt group");
    d->n_dumps = get_count(c, MAX_TENSORS, 8, "dump entries");
    d->dump_names = alloc_array(r, d->n_dumps, sizeof(*d->dump_names));
    d->dumps = alloc_array(r, d->n_dumps, sizeof(*d->dumps));
    for (uint32_t i = 0; i < d->n_dumps && !r->status; i++) {
        d->dump_names[i] = get_str(c, MAX_NAME, "a dump entry's name");
        d->dumps[i] = get_u32(c, "a dump entry's tensor");
    }
    d->rollouts_only = get_str(c, MAX_NAME, "why the plan trains only on rollout files");
    d->batch_invariant = get_u8(c, "the numerics");
    if (d->batch_invariant > 1 && !r->status)
        dfg_reader_err(r, DFG_ERR_FORMAT, "the numerics are %u (0: fastest kernels, 1: batch-invariant)", d->batch_invariant);
    d->prompt_tokens = get_u32(c, "the rollout prompt's tokens");
    d->prompt_len = (int64_t)get_u64(c, "the rollout prompt's width");
    end_of_section(c);
}

/* A string copied into the record, which outlives the reader's arena. */
static const char *get_rec_str(cursor *c, dfg_plan_record *rec, const char *what) {
    const char *s = get_str(c, MAX_NAME, what);
    if (!s) return NULL;
    size_t k = strlen(s) + 1;
    char *d = dfg_arena_alloc(&rec->arena, k);
    if (!d) return dfg_reader_err(c->r, DFG_ERR_NOMEM, "out of memory"), NULL;
    return memcpy(d, s, k);
}

static void *rec_array(dfg_plan_reader *r, dfg_plan_record *rec, size_t n, size_t elem) {
    void *a = dfg_arena_alloc(&rec->arena, (n ? n : 1) * elem);
    if (!a) dfg_reader_err(r, DFG_ERR_NOMEM, "out of memory");
    return a;
}

static void read_schedule(dfg_plan_reader *r, cursor *c, dfg_plan_record *rec) {
    rec->n_graphs = get_count(c, MAX_GRAPHS, 4, "scheduled graphs");
    rec->n_nodes = rec_array(r, rec, rec->n_graphs, sizeof(*rec->n_nodes));
    rec->nodes = rec_array(r, rec, rec->n_graphs, sizeof(*rec->nodes));
    for (uint32_t g = 0; g < rec->n_graphs && !r->status; g++) {
        rec->n_nodes[g] = get_count(c, MAX_NODES, 8, "scheduled nodes");
        rec->nodes[g] = rec_array(r, rec, rec->n_nodes[g], sizeof(dfg_plan_sched_rec));
        for (uint32_t i = 0; i < rec->n_nodes[g] && !r->status; i++) {
            rec->nodes[g][i].op = get_u32(c, "a scheduled node's op");
            rec->nodes[g][i].name = get_rec_str(c, rec, "a scheduled node's name");
        }
    }
}

static void read_buffers(dfg_plan_reader *r, cursor *c, dfg_plan_record *rec) {
    rec->n_bufs = get_count(c, MAX_TENSORS, 28, "buffers");
    rec->bufs = rec_array(r, rec, rec->n_bufs, sizeof(*rec->bufs));
    for (uint32_t b = 0; b < rec->n_bufs && !r->status; b++) {
        dfg_plan_buf_rec *x = &rec->bufs[b];
        x->owner = get_u32(c, "a buffer's owner");
        x->offset = (int64_t)get_u64(c, "a buffer's offset");
        x->size = (int64_t)get_u64(c, "a buffer's size");
        x->first = (int32_t)get_u32(c, "a buffer's first step");
        x->last = (int32_t)get_u32(c, "a buffer's last step");
    }
}

/* remat's decisions: every count checked against what is left; ids are checked when they are
 * applied (passes/remat_log.c), against the rebuilt program. */
static void read_remat(dfg_plan_reader *r, cursor *c, dfg_plan_record *rec) {
    dfg_remat_log *log = rec->remat = rec_array(r, rec, 1, sizeof(*log));
    if (!log) return;
    log->rounds = (int32_t)get_u32(c, "remat's rounds");
    log->batched_rounds = (int32_t)get_u32(c, "remat's batched rounds");
    log->n_copies = get_count(c, MAX_TENSORS, 16, "recomputed copies");
    log->copies = rec_array(r, rec, log->n_copies, sizeof(*log->copies));
    for (uint32_t i = 0; i < log->n_copies && !r->status; i++) {
        dfg_remat_copy *x = &log->copies[i];
        x->graph = get_u32(c, "a copy's graph");
        x->src = get_u32(c, "the node a copy copies");
        x->after = get_u32(c, "the node a copy follows");
        x->n_in = get_count(c, 16, 4, "inputs of a copy");
        x->in = rec_array(r, rec, x->n_in, sizeof(uint32_t));
        for (uint32_t j = 0; j < x->n_in && !r->status; j++) x->in[j] = get_u32(c, "a copy's input");
    }
    log->n_redirects = get_count(c, MAX_TENSORS, 12, "redirected reads");
    log->redirects = rec_array(r, rec, log->n_redirects, sizeof(*log->redirects));
    for (uint32_t i = 0; i < log->n_redirects && !r->status; i++) {
        log->redirects[i].reader = get_u32(c, "a redirected reader");
        log->redirects[i].slot = get_u32(c, "a redirected input");
        log->redirects[i].tensor = get_u32(c, "what a reader reads instead");
    }
    log->n_graphs = get_count(c, MAX_GRAPHS, 4, "graphs remat ordered");
    log->n_order = rec_array(r, rec, log->n_graphs, sizeof(uint32_t));
    log->order = rec_array(r, rec, log->n_graphs, sizeof(uint32_t *));
    for (uint32_t g = 0; g < log->n_graphs && !r->status; g++) {
        log->n_order[g] = get_count(c, MAX_TENSORS, 4, "nodes remat ordered");
        log->order[g] = rec_array(r, rec, log->n_order[g], sizeof(uint32_t));
        for (uint32_t i = 0; i < log->n_order[g] && !r->status; i++) log->order[g][i] = get_u32(c, "a node remat ordered");
    }
}

static void read_plan(dfg_plan_reader *r, cursor *c) {
    dfg_plan_record *rec = r->plan = dfg_plan_record_new();
    if (!rec) return (void)dfg_reader_err(r, DFG_ERR_NOMEM, "out of memory");
    rec->arena_bytes = get_u64(c, "the arena size");
    rec->align = get_u32(c, "the alignment");
    rec->n_steps = get_u32(c, "the timeline length");
    rec->n_tensors = get_u32(c, "the compiled tensor count");
    if (!r->status && (rec->align == 0 || rec->align > DFG_PLAN_MAX_ALIGN || (rec->align & (rec->align - 1)) ||
                       rec->arena_bytes > (uint64_t)INT64_MAX))
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT, "section 'plan' is malformed: alignment %u, arena %llu bytes",
                                    rec->align, (unsigned long long)rec->arena_bytes);
    read_schedule(r, c, rec);
    read_buffers(r, c, rec);
    if (r->status) return;
    /* the tensor table: its length is the count declared up front, checked against what is left */
    if ((rec->n_tensors > MAX_TENSORS || (uint64_t)rec->n_tensors * 12u + 1u > c->n - c->off))
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT,
                                    "section 'plan' is malformed: %u compiled tensors need %llu bytes, %zu left",
                                    rec->n_tensors, (unsigned long long)rec->n_tensors * 12u, c->n - c->off);
    rec->tensor_buf = rec_array(r, rec, rec->n_tensors, sizeof(*rec->tensor_buf));
    rec->tensor_bytes = rec_array(r, rec, rec->n_tensors, sizeof(*rec->tensor_bytes));
    for (uint32_t i = 0; i < rec->n_tensors && !r->status; i++) {
        rec->tensor_buf[i] = get_u32(c, "a tensor's buffer");
        rec->tensor_bytes[i] = get_u64(c, "a tensor's size");
    }
    if (get_u8(c, "whether remat ran")) read_remat(r, c, rec);
    end_of_section(c);
}

static void read_hostlib(dfg_plan_reader *r, cursor *c) {
    static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
    if (c->n < sizeof(elf) || memcmp(c->b, elf, sizeof(elf)))
        return (void)dfg_reader_err(r, DFG_ERR_FORMAT, "section 'hostlib' does not hold a shared object");
    r->hostlib = c->b;
    r->hostlib_size = c->n;
}

/* ---------------------------------------------------------------- the container */
#define HEADER_BYTES 16u
#define SECTION_HEADER_BYTES 16u

static uint64_t le(const unsigned char *b, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* Checks the header and every section's bounds and checksum; fills r->sec[kind]. */
static dfg_status read_container(dfg_plan_reader *r, const unsigned char *b, size_t n) {
    size_t have = n < 8 ? n : 8;
    if (n == 0) return dfg_reader_err(r, DFG_ERR_FORMAT, "not a dfg plan file (it is empty)");
    if (memcmp(b, DFG_PLAN_MAGIC, have)) return dfg_reader_err(r, DFG_ERR_FORMAT, "not a dfg plan file (bad magic)");
    if (n < HEADER_BYTES)
        return dfg_reader_err(r, DFG_ERR_FORMAT, "the header is truncated (needs %u bytes, %zu present)", HEADER_BYTES, n);
    uint32_t version = (uint32_t)le(b + 8, 4), count = (uint32_t)le(b + 12, 4);
    if (version > DFG_PLAN_VERSION)
        return dfg_reader_err(r, DFG_ERR_FORMAT, "format version %u is newer than this dfg (%u); use a newer dfg",
                              version, DFG_PLAN_VERSION);
    if (version < 1) return dfg_reader_err(r, DFG_ERR_FORMAT, "format version %u is not valid", version);
    if (version < DFG_PLAN_VERSION) /* why old versions are not read: planfile.h */
        return dfg_reader_err(r, DFG_ERR_FORMAT,
                              "format version %u is older than this dfg's (%u) and lacks %s; re-run dfg compile on the "
                              "pipeline",
                              version, DFG_PLAN_VERSION,
                              version == 1   ? "scopes, gradient flags and compile options"
                              : version == 2 ? "the memory budget and the no-fuse option"
                              : version == 3 ? "stage step ranges"
                              : version == 4 ? "the schedule and memory plan"
                              : version == 5 ? "op attributes stored field by field and the pipeline's declarations"
                              : version == 6 ? "the entropy and quantile ops and linear_logprob's entropy output"
                              : version == 7 ? "metrics that may have no value and plans that train only on rollout files"
                              : version == 8 ? "stages that end early or run on a condition (decode's early end, length "
                                               "buckets)"
                              : version == 9 ? "batch-invariant plans"
                              : version == 10 ? "LoRA's frozen base weights and NF4 dequantisation"
                              : version == 11 ? "remat's recorded decisions (it would search again at every load)"
                                              : "loops of stages (multi-turn rollouts)");
    uint32_t fewest = r->plan_optional ? 6u : 7u;
    if (count < fewest || count > 8u)
        return dfg_reader_err(r, DFG_ERR_FORMAT, "the header declares %u sections (a plan has 7 or 8)", count);
    size_t off = HEADER_BYTES;
    for (uint32_t i = 0; i < count; i++) {
        if (n - off < SECTION_HEADER_BYTES)
            return dfg_reader_err(r, DFG_ERR_FORMAT,
                                  "the file is truncated: section %u of %u needs a %u-byte header, %zu bytes left", i + 1,
                                  count, SECTION_HEADER_BYTES, n - off);
        uint32_t kind = (uint32_t)le(b + off, 4), crc = (uint32_t)le(b + off + 12, 4);
        uint64_t len = le(b + off + 4, 8);
        off += SECTION_HEADER_BYTES;
        if (kind == 0 || kind >= DFG_PLAN_SEC_END)
            return dfg_reader_err(r, DFG_ERR_FORMAT, "section %u of %u has unknown kind %u", i + 1, count, kind);
        const char *nm = dfg_plan_section_name(kind);
        if (len > n - off)
            return dfg_reader_err(r, DFG_ERR_FORMAT, "section '%s' is truncated (needs %llu bytes, %zu left)", nm,
                                  (unsigned long long)len, n - off);
        if (r->sec[kind].b) return dfg_reader_err(r, DFG_ERR_FORMAT, "section '%s' appears twice", nm);
        if (dfg_plan_crc32(b + off, (size_t)len) != crc)
            return dfg_reader_err(r, DFG_ERR_FORMAT, "checksum mismatch in section '%s' (the file is damaged)", nm);
        r->sec[kind].b = b + off;
        r->sec[kind].n = (size_t)len;
        off += (size_t)len;
    }
    if (off != n)
        return dfg_reader_err(r, DFG_ERR_FORMAT, "%zu unexpected bytes after the last section", n - off);
    for (uint32_t k = DFG_PLAN_SEC_INFO; k < DFG_PLAN_SEC_END; k++)
        if (!r->sec[k].b && k != DFG_PLAN_SEC_HOSTLIB && !(k == DFG_PLAN_SEC_PLAN && r->plan_optional))
            return dfg_reader_err(r, DFG_ERR_FORMAT, "section '%s' is missing", dfg_plan_section_name(k));
    return DFG_OK;
}

static void read_section(dfg_plan_reader *r, uint32_t kind, void (*fn)(dfg_plan_reader *, cursor *)) {
    if (r->status || !r->sec[kind].b) return;
    cursor c = {r, r->sec[kind].b, r->sec[kind].n, 0, dfg_plan_section_name(kind)};
    fn(r, &c);
}

dfg_status dfg_plan_parse(const void *bytes, size_t n, const char *label, dfg_program **out, dfg_plan_info *info,
                          char *err, size_t len) {
    return dfg_plan_parse_bytes(bytes, n, label, false, out, info, err, len);
}

dfg_status dfg_plan_parse_bytes(const void *bytes, size_t n, const char *label, bool plan_optional, dfg_program **out,
                           dfg_plan_info *info, char *err, size_t len) {
    if (err && len) err[0] = '\0';
    if (out) *out = NULL;
    if (info) *info = (dfg_plan_info){0};
    dfg_plan_reader r = {.label = label ? label : "plan", .err = err, .err_len = len, .plan_optional = plan_optional};
    if (!out || (!bytes && n)) return dfg_reader_err(&r, DFG_ERR_ARG, "NULL argument");
    if (!read_container(&r, bytes, n)) {
        read_section(&r, DFG_PLAN_SEC_INFO, read_info);
        read_section(&r, DFG_PLAN_SEC_SETTINGS, read_settings);
        read_section(&r, DFG_PLAN_SEC_TENSORS, read_tensors);
        read_section(&r, DFG_PLAN_SEC_GRAPHS, read_graphs);
        read_section(&r, DFG_PLAN_SEC_STAGES, read_stages);
        read_section(&r, DFG_PLAN_SEC_DECLARATIONS, read_declarations);
        read_section(&r, DFG_PLAN_SEC_HOSTLIB, read_hostlib);
        read_section(&r, DFG_PLAN_SEC_PLAN, read_plan);
    }
    dfg_program *p = r.status ? NULL : dfg_plan_build(&r);
    /* the plan is checked against a program known to be valid, so its messages can trust names */
    dfg_plan_record_validate(&r);
    if (p && r.status) {
        dfg_program_free(p);
        p = NULL;
    }
    if (p && r.hostlib && info) {
        r.info.host_lib = malloc(r.hostlib_size);
        if (!r.info.host_lib) {
            dfg_reader_err(&r, DFG_ERR_NOMEM, "out of memory for the %zu-byte host library", r.hostlib_size);
            dfg_program_free(p);
            p = NULL;
        } else {
            memcpy(r.info.host_lib, r.hostlib, r.hostlib_size);
            r.info.host_lib_size = r.hostlib_size;
        }
    }
    dfg_arena_free_all(&r.arena);
    if (!p) {
        dfg_plan_record_free(r.plan);
        return r.status ? r.status : DFG_ERR_FORMAT;
    }
    *out = p;
    if (info) {
        r.info.plan = r.plan;
        *info = r.info;
    } else {
        dfg_plan_record_free(r.plan);
    }
    return DFG_OK;
}

/* ---------------------------------------------------------------- files */
static dfg_status read_file(const char *path, unsigned char **out, size_t *n, char *err, size_t len) {
    *out = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, len, "%s: cannot open: %s", path, strerror(errno));
        return DFG_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, len, "%s: not a regular file", path);
        close(fd);
        return DFG_ERR_IO;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *b = malloc(size ? size : 1);
    if (!b) {
        snprintf(err, len, "%s: out of memory reading %zu bytes", path, size);
        close(fd);
        return DFG_ERR_NOMEM;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t k = read(fd, b + got, size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != size) {
        snprintf(err, len, "%s: read %zu of %zu bytes: %s", path, got, size, strerror(errno));
        free(b);
        return DFG_ERR_IO;
    }
    *out = b;
    *n = size;
    return DFG_OK;
}

dfg_status dfg_plan_load(const char *path, dfg_program **out, dfg_plan_info *info, char *err, size_t len) {
    char dummy[8];
    if (!err || !len) err = dummy, len = sizeof(dummy);
    err[0] = '\0';
    if (out) *out = NULL;
    if (info) *info = (dfg_plan_info){0};
    if (!path || !out) {
        snprintf(err, len, "plan: NULL argument");
        return DFG_ERR_ARG;
    }
    unsigned char *b;
    size_t n;
    dfg_status st = read_file(path, &b, &n, err, len);
    if (st) return st;
    st = dfg_plan_parse(b, n, path, out, info, err, len);
    free(b);
    return st;
}
