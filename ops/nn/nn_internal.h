/* nn_internal.h - what the files of ops/nn share beyond the public dfg_nn.h: the LoRA pieces
 * nn_model.c builds a model with (ops/nn/nn_lora.c). */
#ifndef DFG_NN_INTERNAL_H
#define DFG_NN_INTERNAL_H

#include "dfg_nn.h"

/* alpha / r, or alpha / sqrt(r) with rslora */
float dfg_lora_scale(const dfg_lora_config *c);
/* Does the module at path (e.g. "model.layers.0.self_attn.q_proj") take an adapter? */
bool dfg_lora_targets(const dfg_lora_config *c, const char *path);
/* Fails the program naming the first target that matches no linear of the model. */
dfg_status dfg_lora_check_targets(dfg_program *p, const dfg_model_config *cfg);
/* The adapter of m's linear (layer, slot) of in -> out features, when the config targets it:
 * PARAMs A (r, in) and B (out, r), appended to m->params. */
dfg_status dfg_lora_add(dfg_program *p, dfg_model *m, int layer, dfg_linear_slot slot, int64_t in, int64_t out);
/* x (..., in) -> (..., out): x w^T + b (x w + b for GPT-2's Conv1D w (in, out)), plus the adapter
 * scale (x A^T) B^T when ad has one. */
dfg_tensor *dfg_lora_linear(dfg_graph *g, dfg_tensor *x, dfg_tensor *w, dfg_tensor *b, const dfg_lora_adapter *ad,
                            bool conv1d);

#endif
