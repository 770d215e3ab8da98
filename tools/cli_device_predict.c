/* cli_device_predict.c - a plan's predicted step time on a device: each kernel run's roofline,
 * max(FLOPs / peak, bytes / bandwidth) from ops.def's cost column, summed per stage run, and
 * the stages' runs per step. The peak is the device's bf16 tensor-core one for the GEMMs (ops.def's
 * GEMM flag: matmul, attention, the fused head) whose first input is bf16 or f16, its f32 one for
 * every other FLOP; each kernel run also costs the device's kernel_s (launch, dispatch). On the
 * measured CPU a GEMM-like node's FLOPs run at the rate measured for its GEMM shape and its bytes
 * at the bandwidth measured for their size (cli_cpu_rates). Host stages are not predicted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../ops/op.h"
#include "cli_device.h"

static bool half_gemm(const dfg_node *n) {
    if (!dfg_op_flag(n->op, DFG_OPF_GEMM) || n->n_in < 1 || !n->in[0]) return false;
    return n->in[0]->dtype == DFG_BF16 || n->in[0]->dtype == DFG_F16;
}

/* The bytes a kernel run reads and writes: the cost column's, but for slice_assign (the KV
 * cache's append), whose output is its destination's bytes (in place, ops.def's KEEPS) and whose
 * kernels copy the slice alone, not the whole destination the cost column counts as read and
 * written: 16.7 MB a layer and decode run at the bench's `small` config against 65 KB moved. */
static double moved_bytes(const dfg_node *n, dfg_cost c) {
    if (n->op == DFG_OP_SLICE_ASSIGN && n->n_in >= 2 && n->in[1]) return 2.0 * (double)dfg_tensor_bytes(n->in[1]);
    return c.bytes_read + c.bytes_written;
}

/* The GEMM shape a GEMM-like node's CPU kernel runs, and whether it runs it on one thread inside
 * a loop over `jobs` split over the threads (attention: one batch row and head a job, its
 * products too small to split) or on all the run's threads (matmul, the fused head's vocabulary
 * blocks). Attention's two products, Q K^T (T x keys x D) and P V (T x D x keys), do equal FLOPs:
 * shape2 is the second. false: not a GEMM the CPU model knows (its peak is used). */
typedef struct {
    double m, n, k, m2, n2, k2; /* the two products (equal when there is one) */
    bool one_thread;
    double jobs;
} gemm_shape;

static bool attention_shape(const dfg_node *n, gemm_shape *g) {
    bool bwd = n->op == DFG_OP_ATTENTION_BWD || n->op == DFG_OP_ATTENTION_PREFIX_BWD;
    const dfg_tensor *x = n->in[bwd ? 1 : 0]; /* (B, T, 3C) or q (B, T, C) */
    double B = (double)x->shape.d[0], T = (double)x->shape.d[1], C = (double)n->out[0]->shape.d[2], keys = T;
    if (n->op == DFG_OP_ATTENTION || bwd) C = (double)x->shape.d[2] / 3.0; /* qkv packed */
    if (n->op == DFG_OP_ATTENTION_CACHED) C = (double)x->shape.d[2], keys = (double)n->in[1]->shape.d[1];
    if (n->op == DFG_OP_ATTENTION_PREFIX || n->op == DFG_OP_ATTENTION_PREFIX_BWD)
        keys = T + (double)n->in[bwd ? 2 : 1]->shape.d[1];
    double H = n->attr->attention.n_head > 0 ? n->attr->attention.n_head : 1, D = C / H;
    *g = (gemm_shape){T, keys, D, T, D, keys, true, B * H};
    return true;
}

static bool gemm_shape_of(const dfg_node *n, gemm_shape *g) {
    switch (n->op) {
    case DFG_OP_MATMUL: {
        dfg_mm_dims d;
        const char *why;
        if (!dfg_matmul_dims(n, &d, &why)) return false;
        bool fold = n->in[0]->shape.rank > 2 && n->in[1]->shape.rank <= 2; /* a shared B: the batch is rows */
        double m = (double)d.M * (fold ? (double)d.batch : 1.0);
        *g = (gemm_shape){m, (double)d.N, (double)d.K, m, (double)d.N, (double)d.K, false, 1};
        return true;
    }
    case DFG_OP_ATTENTION:
    case DFG_OP_ATTENTION_BWD:
    case DFG_OP_ATTENTION_CACHED:
    case DFG_OP_ATTENTION_PREFIX:
    case DFG_OP_ATTENTION_PREFIX_BWD: return attention_shape(n, g);
    case DFG_OP_LINEAR_LOGPROB:
    case DFG_OP_LINEAR_LOGPROB_BWD: { /* a row chunk against DFG_LOGPROB_V_BLOCK vocabulary entries a GEMM */
        const dfg_tensor *h = n->in[n->op == DFG_OP_LINEAR_LOGPROB_BWD ? 1 : 0];
        double c = (double)h->shape.d[h->shape.rank - 1], rows = (double)dfg_shape_numel(h->shape) / c;
        double rc = n->attr->logprob.rows_chunk > 0 && n->attr->logprob.rows_chunk < rows ? (double)n->attr->logprob.rows_chunk : rows;
        *g = (gemm_shape){rc, DFG_LOGPROB_V_BLOCK, c, rc, DFG_LOGPROB_V_BLOCK, c, false, 1};
        return true;
    }
    default: return false;
    }
}

/* A GEMM-like node's FLOP/s on the measured CPU: the grid's rate at its shape (the harmonic mean
 * of its two products'), times the threads its one-thread jobs keep busy. */
static double shaped_gemm_rate(const dfg_node *n, const cli_device *d) {
    gemm_shape g;
    if (!gemm_shape_of(n, &g)) return d->f32_flops;
    double r1 = cli_gemm_rate(&d->rates, g.one_thread, g.m, g.n, g.k);
    double r2 = cli_gemm_rate(&d->rates, g.one_thread, g.m2, g.n2, g.k2);
    double busy = g.one_thread ? fmin((double)d->rates.threads, fmax(g.jobs, 1.0)) : 1.0;
    return busy * 2.0 / (1.0 / r1 + 1.0 / r2);
}

/* Whether a kernel's FLOPs (its cost column's) are mostly exp, tanh, log: the transcendental ops,
 * softmax's and the log-probs' exp an element. */
static bool transcendental(const dfg_node *n) {
    dfg_cost (*f)(const dfg_node *) = dfg_ops[n->op].cost;
    return f == dfg_cost_transcend || f == dfg_cost_softmax || f == dfg_cost_logprob;
}

/* A node's compute and memory seconds: on the measured CPU its GEMMs at their shape's rate, its
 * other FLOPs at the rate dfg's gelu (transcendental) or layernorm (the rest) runs its cost
 * column's (vector code, far below a GEMM's rate), its bytes at their size's bandwidth; else
 * the device's peaks. */
static void node_seconds(const dfg_node *n, const cli_device *d, double flops, double bytes, double *compute, double *memory) {
    if (d->shaped && n->op == DFG_OP_ADAMW) { /* its bytes at AdamW's measured rate, each parameter's share at its threads' */
        double total = 0;
        for (int i = 1; i + 3 < n->n_in; i += 4) total += (double)dfg_shape_numel(n->in[i]->shape);
        *compute = flops / cli_vector_rate(&d->rates, false, bytes), *memory = 0;
        for (int i = 1; total > 0 && i + 3 < n->n_in; i += 4) {
            double el = (double)dfg_shape_numel(n->in[i]->shape);
            *memory += bytes * (el / total) / cli_update_rate(&d->rates, el);
        }
        return;
    }
    if (d->shaped) {
        *compute = flops / (dfg_op_flag(n->op, DFG_OPF_GEMM) ? shaped_gemm_rate(n, d) : cli_vector_rate(&d->rates, transcendental(n), bytes));
        *memory = bytes / cli_copy_rate(&d->rates, bytes);
        return;
    }
    *compute = flops / (half_gemm(n) ? d->bf16_flops : d->f32_flops), *memory = bytes / d->bandwidth;
}

cli_stage_time cli_stage_time_of(const dfg_stage *st, const cli_device *d) {
    cli_stage_time t = {0};
    if (st->kind != DFG_STAGE_GRAPH) return t;
    for (int k = 0; k < st->graph->n_nodes; k++) {
        const dfg_node *n = st->graph->nodes[k];
        dfg_cost c = dfg_ops[n->op].cost(n);
        double bytes = moved_bytes(n, c), compute, memory;
        node_seconds(n, d, c.flops, bytes, &compute, &memory);
        t.roofline_s += fmax(compute, memory);
        t.compute_s += compute, t.memory_s += memory;
        if (compute > memory) t.compute_bound_s += compute;
        t.flops += c.flops, t.bytes += bytes;
        t.kernels++;
    }
    t.s = t.roofline_s + t.kernels * d->kernel_s;
    return t;
}

const char *cli_stage_bound(const cli_stage_time *t) {
    return t->compute_bound_s * 2 > t->roofline_s ? "compute" : "memory";
}

static bool graph_stage(const dfg_stage *st) { return st->kind == DFG_STAGE_GRAPH; }

static bool same_interval(const dfg_stage *a, const dfg_stage *b) {
    return graph_stage(a) && graph_stage(b) && a->when == b->when && a->when_lo == b->when_lo && a->when_hi == b->when_hi;
}

/* The stages gated on one value (dfg_stage_when: a prompt-width bucket's variants) run those of
 * one interval in a step, the data choosing which: the group is counted at its dearest interval's
 * stages, not every variant's. An interval with a stage that also loops until a flag (the decode
 * tail: 0|1-N) takes over the remaining runs of the loop before it, which is counted at all its
 * runs: with the longest completions it never runs, and is not counted. first: the group's first stage. */
static void count_dearest_interval(const dfg_program *p, int first, cli_step_time *t) {
    const dfg_tensor *key = p->stages[first].when;
    int best = -1;
    double worst = -1;
    for (int i = first; i < p->n_stages; i++) {
        const dfg_stage *a = &p->stages[i];
        bool seen = false; /* this interval was costed with an earlier stage of the group */
        for (int j = first; j < i && !seen; j++) seen = same_interval(&p->stages[j], a);
        if (!graph_stage(a) || a->when != key || seen) continue;
        double s = 0;
        bool continues_loop = false;
        for (int k = i; k < p->n_stages; k++)
            if (same_interval(&p->stages[k], a)) s += t->stage[k].s * t->runs[k], continues_loop |= p->stages[k].until != NULL;
        if (!continues_loop && s > worst) worst = s, best = i;
    }
    for (int k = first; best >= 0 && k < p->n_stages; k++) t->counted[k] = same_interval(&p->stages[k], &p->stages[best]);
}

/* Consecutive stages that each run a count of times (dfg_stage_runs) with one most (repeat):
 * the copies of one pass per length bucket, whose chunks together are at most repeat. The worst
 * case, every row in the widest bucket, counts the dearest copy at all its runs; returns the
 * stage after the group. */
static int count_dearest_copy(const dfg_program *p, int first, cli_step_time *t) {
    int end = first, best = first;
    while (end < p->n_stages && graph_stage(&p->stages[end]) && p->stages[end].runs && !p->stages[end].when &&
           p->stages[end].repeat == p->stages[first].repeat)
        end++;
    for (int k = first; k < end; k++)
        if (t->stage[k].s > t->stage[best].s) best = k;
    t->counted[best] = true;
    return end;
}

bool cli_step_time_of(const dfg_program *p, const cli_device *d, const double *runs_per_step, cli_step_time *out) {
    size_t n = (size_t)p->n_stages + 1;
    *out = (cli_step_time){.stage = calloc(n, sizeof(cli_stage_time)), .runs = calloc(n, sizeof(double)),
                           .counted = calloc(n, sizeof(bool)), .from_metrics = runs_per_step != NULL};
    if (!out->stage || !out->runs || !out->counted) {
        cli_step_time_free(out);
        return false;
    }
    for (int i = 0; i < p->n_stages; i++) {
        const dfg_stage *st = &p->stages[i];
        out->stage[i] = cli_stage_time_of(st, d);
        out->runs[i] = runs_per_step ? runs_per_step[i] : graph_stage(st) ? st->repeat : 1;
    }
    for (int i = 0; i < p->n_stages;) {
        const dfg_stage *st = &p->stages[i];
        if (runs_per_step || !graph_stage(st) || (!st->when && !st->runs)) { /* a run's counts say which variants ran */
            out->counted[i++] = graph_stage(st);
            continue;
        }
        if (!st->when) {
            i = count_dearest_copy(p, i, out);
            continue;
        }
        bool later = false; /* not the group's first stage: the first one counted it */
        for (int j = 0; j < i && !later; j++) later = graph_stage(&p->stages[j]) && p->stages[j].when == st->when;
        if (!later) count_dearest_interval(p, i, out);
        i++;
    }
    for (int i = 0; i < p->n_stages; i++) {
        if (!out->counted[i] && !runs_per_step && graph_stage(&p->stages[i])) out->runs[i] = 0; /* not run in the worst case */
        if (out->counted[i])
            out->step_s += out->stage[i].s * out->runs[i], out->roofline_step_s += out->stage[i].roofline_s * out->runs[i];
    }
    return true;
}

void cli_step_time_free(cli_step_time *t) {
    free(t->stage), free(t->runs), free(t->counted);
    *t = (cli_step_time){0};
}

/* ---------------------------------------------------------------- a run's counts */
static int stage_index(const dfg_program *p, const char *name) {
    for (int s = 0; s < p->n_stages; s++)
        if (!strcmp(p->stages[s].name, name)) return s;
    return -1;
}

bool cli_step_runs_from_metrics(const char *cmd, const char *path, const dfg_program *p, double *runs) {
    void *bytes = NULL;
    size_t n = 0;
    if (!cli_read_file(cmd, path, &bytes, &n)) return false;
    char *text = bytes, *line = text;
    int lines = 0;
    bool ok = true;
    memset(runs, 0, (size_t)p->n_stages * sizeof(double));
    while (ok && line < text + n && *line) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        if (line[strspn(line, " \t\r")]) {
            cJSON *o = cJSON_Parse(line);
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "stage_runs"), *e;
            if (!cJSON_IsObject(r)) {
                fprintf(stderr, "dfg %s: %s line %d: not a dfg run --metrics line (no stage_runs object)\n", cmd, path,
                        lines + 1);
                ok = false;
            } else {
                cJSON_ArrayForEach(e, r) {
                    int s = stage_index(p, e->string);
                    if (s >= 0 && cJSON_IsNumber(e)) runs[s] += e->valuedouble;
                }
            }
            cJSON_Delete(o);
            lines++;
        }
        line = end ? end + 1 : text + n;
    }
    free(bytes);
    if (ok && !lines) {
        fprintf(stderr, "dfg %s: %s has no metrics lines (dfg run --metrics FILE writes one per step)\n", cmd, path);
        ok = false;
    }
    for (int s = 0; ok && s < p->n_stages; s++) runs[s] /= lines;
    return ok;
}
