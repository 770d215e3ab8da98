/* cli_fit.h - what dfg fit's files share (cli_fit.c searches, cli_fit_parts.c reads a compiled
 * candidate, cli_fit_cost.c estimates its step time). */
#ifndef DFG_CLI_FIT_H
#define DFG_CLI_FIT_H

#include "cli.h"

/* The persistent bytes of a plan (report.c's persistent_bytes) by what they hold: the model's
 * state (weights, their gradients, the optimizer's state, a reference model), which no setting
 * fit knows of changes, and the rest (inputs, rollout buffers, RNG and metric state). */
typedef struct {
    int64_t weights, grads, optim, ref, base, other, total; /* base: a LoRA plan's frozen base model */
    int64_t n_params; /* the trained parameters (values) */
} persistent_parts;

persistent_parts cli_fit_persistent_of(const dfg_program *p);
/* The model's state: what no setting of batch, length, micro-batches, rollout sub-batches or
 * remat shrinks. */
int64_t cli_fit_model_state(const persistent_parts *s);
/* cuda: the arena's device workspace (kernel scratch, GEMM library); 0 for cpu. */
int64_t cli_fit_workspace_of(const dfg_program *p, dfg_target target);
void cli_fit_remat_note(const dfg_remat_result *r, char *buf, size_t len);
void cli_fit_parts_str(const persistent_parts *s, char *buf, size_t len);

#endif
