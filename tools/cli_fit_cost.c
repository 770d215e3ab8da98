/* cli_fit_cost.c - what dfg fit ranks its candidates by: a step's FLOPs, remat's extra FLOPs,
 * and an estimate of its seconds, a roofline of the op cost table (ops.def's cost column: FLOPs
 * and bytes of every kernel run, recomputed copies included) on a nominal device of the target,
 * plus a fixed cost per kernel launch: a ratio between plans of one program, not a prediction of
 * milliseconds. A step is counted as it runs: of the variants of a stage gated on one value (a
 * prompt-width or length bucket's copies, dfg_stage_when), one interval's run, not all. */
#include <math.h>
#include <stdbool.h>

#include "../graph/ir.h"
#include "../ops/op.h"
#include "cli.h"

/* A nominal device per target: tensor-core FLOP/s (the FLOPs of the ops ops.def flags GEMM: matmul,
 * attention, the fused head) and other FLOP/s,
 * memory bandwidth, and the cost of one kernel launch (a CUDA Graph node; a CPU kernel call).
 * The cuda figures are an H100's order of magnitude (798 TFLOP/s bf16 and 3.0 TB/s were
 * measured on one, tools/bench/results; kernels at these sizes reach about half), the cpu ones
 * a few cores'. */
typedef struct {
    double tensor_flops, flops, bandwidth, launch_s;
} est_device;

static est_device device_of(dfg_target t) {
    if (t == DFG_TARGET_CUDA) return (est_device){400e12, 30e12, 2.5e12, 3e-6};
    return (est_device){100e9, 20e9, 10e9, 2e-6};
}

/* What a step costs: FLOPs without recompute, remat's extra FLOPs, and the estimated seconds. */
static void add_cost(cli_step_cost *to, cli_step_cost c) {
    to->flops += c.flops, to->extra_flops += c.extra_flops, to->seconds += c.seconds;
}

/* One graph stage at all its runs (repeat: the most; a flag or a count may end it earlier). */
static cli_step_cost stage_cost(const dfg_stage *st, est_device d) {
    cli_step_cost s = {0};
    for (int k = 0; k < st->graph->n_nodes; k++) {
        const dfg_node *n = st->graph->nodes[k];
        dfg_cost c = dfg_ops[n->op].cost(n);
        double compute = c.flops / (dfg_op_flag(n->op, DFG_OPF_GEMM) ? d.tensor_flops : d.flops);
        double memory = (c.bytes_read + c.bytes_written) / d.bandwidth;
        if (n->flags & DFG_NF_RECOMPUTED) s.extra_flops += c.flops * st->repeat;
        else s.flops += c.flops * st->repeat;
        s.seconds += (fmax(compute, memory) + d.launch_s) * st->repeat;
    }
    return s;
}

static bool graph_stage(const dfg_stage *st) { return st->kind == DFG_STAGE_GRAPH; }

/* The stages gated on one value (dfg_stage_when: a prompt-width or length bucket's variants) run
 * those of one interval in a step, the data choosing which: the group costs what its dearest
 * interval's stages cost together, not the sum of every variant. first: the group's first stage. */
static cli_step_cost variants_cost(const dfg_program *p, int first, est_device d) {
    const dfg_tensor *key = p->stages[first].when;
    cli_step_cost worst = {0};
    for (int i = first; i < p->n_stages; i++) {
        const dfg_stage *a = &p->stages[i];
        bool seen = false; /* this interval was costed with an earlier stage of the group */
        for (int j = first; j < i && !seen; j++)
            seen = graph_stage(&p->stages[j]) && p->stages[j].when == key && p->stages[j].when_lo == a->when_lo &&
                   p->stages[j].when_hi == a->when_hi;
        if (!graph_stage(a) || a->when != key || seen) continue;
        cli_step_cost one = {0};
        for (int k = i; k < p->n_stages; k++) {
            const dfg_stage *b = &p->stages[k];
            if (graph_stage(b) && b->when == key && b->when_lo == a->when_lo && b->when_hi == a->when_hi)
                add_cost(&one, stage_cost(b, d));
        }
        if (one.seconds > worst.seconds) worst = one;
    }
    return worst;
}

/* A step as it runs: every graph stage at its runs, and of each group of variants gated on one
 * value only one interval's (the figure fit ranks by: the report's FLOPs count every variant). */
cli_step_cost cli_fit_step_cost(const dfg_program *p, dfg_target target) {
    est_device d = device_of(target);
    cli_step_cost s = {0};
    for (int i = 0; i < p->n_stages; i++) {
        const dfg_stage *st = &p->stages[i];
        if (!graph_stage(st)) continue;
        if (!st->when) {
            add_cost(&s, stage_cost(st, d));
            continue;
        }
        bool later = false; /* not the group's first stage: the first one costed it */
        for (int j = 0; j < i && !later; j++) later = graph_stage(&p->stages[j]) && p->stages[j].when == st->when;
        if (!later) add_cost(&s, variants_cost(p, i, d));
    }
    return s;
}

