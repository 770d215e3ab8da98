/* cli_fit_cost.c - what dfg fit ranks its candidates by: a step's FLOPs, remat's extra FLOPs, and
 * its predicted seconds on the device fit was given (cli_device_predict.c: each kernel run's
 * roofline of the op cost table and the device's per-kernel time, recomputed copies included).
 * A step is counted in the worst case the plan is sized for: every stage at its most runs, of
 * the variants of a stage (a prompt-width bucket's, a length bucket's copies) the dearest. */
#include "../ops/op.h"
#include "cli_device.h"

/* One run's FLOPs of a graph stage, without recompute and of the recomputed copies alone. */
static void stage_flops(const dfg_stage *st, double *flops, double *extra) {
    *flops = *extra = 0;
    for (int k = 0; k < st->graph->n_nodes; k++) {
        const dfg_node *n = st->graph->nodes[k];
        double f = dfg_ops[n->op].cost(n).flops;
        if (n->flags & DFG_NF_RECOMPUTED) *extra += f;
        else *flops += f;
    }
}

cli_step_cost cli_fit_step_cost_on(const dfg_program *p, const cli_device *d) {
    cli_step_cost s = {0};
    cli_step_time t;
    if (!cli_step_time_of(p, d, NULL, &t)) return s; /* out of memory: 0 s ranks it first; compile would have failed first */
    for (int i = 0; i < p->n_stages; i++) {
        if (!t.counted[i]) continue;
        double f, x;
        stage_flops(&p->stages[i], &f, &x);
        s.flops += f * t.runs[i], s.extra_flops += x * t.runs[i];
    }
    s.seconds = t.step_s;
    cli_step_time_free(&t);
    return s;
}
