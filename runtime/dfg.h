/* dfg.h - the one header a pipeline or an application includes: every public header of dfg,
 * layer by layer (each directory on the include path: graph, ops, ops/nn, passes, runtime).
 *
 *   dfg_graph.h    programs, graphs, tensors, settings, stages       (graph/)
 *   dfg_ops.h      the op builders                                    (ops/)
 *   dfg_nn.h       autodiff, metrics, GPT-2, training helpers, GRPO   (ops/nn/)
 *   dfg_passes.h   compiling: targets, options, the memory report     (passes/)
 *   dfg_runtime.h  running: runtimes, host stages, data parallel      (runtime/)
 *   dfg_weights.h  weights, checkpoints, adapters in and out           (runtime/weights/)
 *   dfg_dataset.h  prompt datasets (JSONL) and their epoch order       (runtime/)
 */
#ifndef DFG_H
#define DFG_H

#include "dfg_graph.h"
#include "dfg_ops.h"
#include "dfg_nn.h"
#include "dfg_passes.h"
#include "dfg_runtime.h"
#include "dfg_weights.h"
#include "dfg_dataset.h"
#include "dfg_formats.h"
#include "dfg_reward.h"

#endif
