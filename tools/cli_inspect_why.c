/* cli_inspect_why.c - the facts behind dfg inspect's memory categories and stages: for every
 * category, what is live at the peak (bytes, tensors, the largest), the most it holds at any
 * step and where, and one sentence saying what the bytes are for; for every stage, the bytes its
 * kernels move and the most bytes live while it runs. Read from the compiled plan's buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_inspect.h"

int cli_stage_at(const dfg_program *p, int step) {
    for (int s = 0; s < p->n_stages; s++)
        if (step >= p->plan->stage_step[s] && step < p->plan->stage_step[s + 1]) return s;
    return -1;
}

static bool live_at(const dfg_buf *b, int step) { return b->merged_into < 0 && b->life.first <= step && step <= b->life.last; }

/* Per category: bytes live at every step (a difference array summed), the maximum and its step. */
static bool category_maxima(const dfg_plan *plan, cli_category_facts *f) {
    size_t n = (size_t)plan->n_steps + 1;
    int64_t *diff = calloc(n * DFG_CAT_COUNT, sizeof(int64_t));
    if (!diff) return false;
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *x = &plan->bufs[b];
        if (x->merged_into >= 0 || x->life.first < 0) continue;
        diff[(size_t)x->cat * n + (size_t)x->life.first] += x->size;
        diff[(size_t)x->cat * n + (size_t)x->life.last + 1] -= x->size;
    }
    for (int c = 0; c < DFG_CAT_COUNT; c++) {
        int64_t run = 0;
        for (int s = 0; s < plan->n_steps; s++) {
            run += diff[(size_t)c * n + (size_t)s];
            if (run > (int64_t)f[c].max_bytes) f[c].max_bytes = (size_t)run, f[c].max_step = s;
        }
    }
    free(diff);
    return true;
}

bool cli_category_facts_of(const dfg_program *p, cli_category_facts f[DFG_CAT_COUNT]) {
    const dfg_plan *plan = p->plan;
    int peak = plan->report.peak_step;
    memset(f, 0, sizeof(*f) * DFG_CAT_COUNT);
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *x = &plan->bufs[b];
        if (x->merged_into >= 0) continue;
        cli_category_facts *c = &f[x->cat];
        c->n_tensors++;
        if (!live_at(x, peak)) continue;
        c->numel += dfg_shape_numel(p->tensors[x->owner]->shape);
        c->peak_bytes += (size_t)x->size;
        c->peak_tensors++;
        if (!c->largest || x->size > c->largest->size) c->largest = x;
    }
    return category_maxima(plan, f);
}

/* ---------------------------------------------------------------- why */
/* "'matmul#12' f32 (64,9,256), 576.0 KiB" */
static const char *tensor_str(const dfg_program *p, const dfg_buf *b, char *buf, size_t len) {
    const dfg_tensor *t = p->tensors[b->owner];
    char shape[96], bytes[32];
    snprintf(buf, len, "'%s' %s %s, %s", t->name, dfg_dtype_name(t->dtype), dfg_shape_str(t->shape, shape, sizeof(shape)),
             dfg_bytes_str((double)b->size, bytes, sizeof(bytes)));
    return buf;
}

static const char *count_str(double x, char *buf, size_t len) {
    if (x >= 1e9) snprintf(buf, len, "%.3g G", x * 1e-9);
    else if (x >= 1e6) snprintf(buf, len, "%.3g M", x * 1e-6);
    else if (x >= 1e3) snprintf(buf, len, "%.3g k", x * 1e-3);
    else snprintf(buf, len, "%.0f", x);
    return buf;
}

/* For a category with nothing live at the peak: where it was, if anywhere. */
static void elsewhere(const dfg_program *p, const cli_category_facts *f, char *buf, size_t len) {
    char b[32];
    int s = cli_stage_at(p, f->max_step);
    if (!f->max_bytes) snprintf(buf, len, "none in this program");
    else snprintf(buf, len, "none at the peak; at most %s, at step %d (stage '%s'), free again by the peak",
                  dfg_bytes_str((double)f->max_bytes, b, sizeof(b)), f->max_step, s >= 0 ? p->stages[s].name : "?");
}

/* No logits at the peak: whether any exist at another step, and what the fuse pass did about them.
 * A logprob fused op stores no softmax outputs but still reads stored logits; only linear_logprob
 * (the lm_head fused in) means none are stored. */
static void logits_elsewhere(const dfg_program *p, const cli_category_facts *f, const dfg_report *r, char *buf, size_t len) {
    if (!f->max_bytes && r->fused[1]) {
        snprintf(buf, len, "none: %d linear_logprob fused ops compute log-probabilities from the hidden states, "
                 "walking the vocabulary in chunks, so (rows x vocabulary) logits are never stored", r->fused[1]);
        return;
    }
    elsewhere(p, f, buf, len);
    size_t used = strlen(buf);
    if (f->max_bytes && r->fused[0] && used < len)
        snprintf(buf + used, len - used, "; %d logprob fused ops read them without storing softmax outputs%s", r->fused[0],
                 r->fused[1] ? "" : " (linear_logprob, which never stores them, did not apply: another op reads the logits, or the lm_head "
                 "is not a matmul the fuse pass can take in)");
}

char *cli_category_why(const dfg_program *p, const cli_category_facts *all, dfg_category c, char *buf, size_t len) {
    const cli_category_facts *f = &all[c];
    const dfg_report *r = &p->plan->report;
    char n[32], big[256];
    if (!f->peak_tensors && c != DFG_CAT_LOGITS) {
        elsewhere(p, f, buf, len);
        return buf;
    }
    if (f->largest) tensor_str(p, f->largest, big, sizeof(big));
    switch (c) {
    case DFG_CAT_PARAMS:
        snprintf(buf, len, "%d tensors, %s values: the trained weights%s, live all step", f->peak_tensors,
                 count_str((double)f->numel, n, sizeof(n)), all[DFG_CAT_BASE_MODEL].peak_tensors ? " (LoRA adapters)" : "");
        break;
    case DFG_CAT_BASE_MODEL:
        snprintf(buf, len, "%d tensors, %s parameters: the frozen base model (LoRA): its bytes only, no gradients, moments "
                 "or master copies; the reference model is this base with the adapters off; largest %s", f->peak_tensors,
                 count_str((double)dfg_base_params(p), n, sizeof(n)), big); /* NF4: dequantised counts */
        break;
    case DFG_CAT_GRADS:
        snprintf(buf, len, "%d tensors: one gradient per trained weight, kept from the backward to the update "
                 "(accumulated over micro-batches when there are several)", f->peak_tensors);
        break;
    case DFG_CAT_OPTIMIZER:
        snprintf(buf, len, "%d tensors, %.2f x the weights' bytes: the optimizer's moments and step counters",
                 f->peak_tensors, all[DFG_CAT_PARAMS].peak_bytes ? (double)f->peak_bytes / (double)all[DFG_CAT_PARAMS].peak_bytes : 0.0);
        break;
    case DFG_CAT_REF_MODEL:
        snprintf(buf, len, "%d tensors: a frozen copy of the weights, the reference the KL term is measured against",
                 f->peak_tensors);
        break;
    case DFG_CAT_KV_CACHE:
        snprintf(buf, len, "%d tensors: keys and values of every layer for decoding; largest %s", f->peak_tensors, big);
        break;
    case DFG_CAT_ACTIVATIONS:
        snprintf(buf, len, "%d tensors: forward results kept for the backward, and the backward's own; largest %s",
                 f->peak_tensors, big);
        break;
    case DFG_CAT_LOGITS:
        if (f->peak_tensors)
            snprintf(buf, len, "%d (rows x vocabulary) tensors; largest %s%s", f->peak_tensors, big,
                     r->fused[1] ? "" : " (the fuse pass removes them: compile without --no-fuse)");
        else logits_elsewhere(p, f, r, buf, len);
        break;
    case DFG_CAT_WORKSPACE:
        snprintf(buf, len, "%d tensors: kernel and library scratch, planned like any tensor; largest %s",
                 f->peak_tensors, big);
        break;
    default:
        snprintf(buf, len, "%d tensors: inputs, rollout buffers, RNG and metric state; largest %s", f->peak_tensors, big);
    }
    return buf;
}

/* ---------------------------------------------------------------- stages */
bool cli_stage_facts_of(const dfg_program *p, cli_stage_facts *out) {
    const dfg_plan *plan = p->plan;
    int64_t *live = calloc((size_t)plan->n_steps + 1, sizeof(int64_t));
    if (!live) return false;
    for (int b = 0; b < plan->n_bufs; b++) {
        const dfg_buf *x = &plan->bufs[b];
        if (x->merged_into >= 0 || x->life.first < 0) continue;
        live[x->life.first] += x->size;
        live[x->life.last + 1] -= x->size;
    }
    int64_t run = 0;
    for (int s = 0; s < p->n_stages; s++) {
        cli_stage_facts *f = &out[s];
        *f = (cli_stage_facts){0};
        for (int step = plan->stage_step[s]; step < plan->stage_step[s + 1]; step++) {
            run += live[step];
            if (run > (int64_t)f->peak_live_bytes) f->peak_live_bytes = (size_t)run;
        }
        const dfg_stage *st = &p->stages[s];
        if (st->kind != DFG_STAGE_GRAPH) continue;
        for (int i = 0; i < st->graph->n_nodes; i++) {
            const dfg_node *node = st->graph->nodes[i];
            dfg_cost cost = dfg_ops[node->op].cost(node);
            f->bytes_moved += (cost.bytes_read + cost.bytes_written) * st->repeat;
        }
    }
    free(live);
    return true;
}
