/* dfg_weights.h - weights and checkpoints in and out of a runtime, in Hugging Face's, PEFT's and
 * bitsandbytes' formats (runtime/weights): safetensors files and sharded model directories,
 * Hugging Face model directories written back, PEFT adapter directories, 4-bit (NF4) base
 * weights quantised as they load. Built only on the runtime's public calls (dfg_runtime.h):
 * every call reads or writes a runtime's tensors by name, and a failure leaves a one-line message
 * in dfg_runtime_error(). What it knows of each architecture is the architecture table's
 * (dfg_arch_info, dfg_nn.h). Every file is written atomically, with one file mode
 * (runtime/formats/fileio.h). */
#ifndef DFG_WEIGHTS_H
#define DFG_WEIGHTS_H

#include "dfg_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- checkpoints (safetensors)
 * Loading matches file tensors to PARAM/STATE names, also after stripping an architecture's
 * module prefix ("transformer."); an architecture's buffers (GPT-2's attn.bias /
 * attn.masked_bias) and a tied lm_head.weight are skipped. f32/bf16/f16 values convert to the
 * tensor's dtype. With `strict`, every PARAM must be found and every other file tensor must be
 * known; *n_loaded (may be NULL) counts the tensors set. path is a safetensors file or a model
 * directory as transformers' save_pretrained writes it: DIR/model.safetensors, else
 * DIR/model.safetensors.index.json and the shards its weight_map names, loaded as if they were
 * one file. Each shard must hold exactly the tensors the index maps to it, and shard names must
 * be files in DIR. Every file is checked before any tensor is set: a refused file or directory
 * leaves the runtime as it was, with a one-line message. */
DFG_API dfg_status dfg_runtime_load_safetensors(dfg_runtime *rt, const char *path, bool strict, int *n_loaded);
/* Writes every PARAM (and every STATE when with_state), atomically. */
DFG_API dfg_status dfg_runtime_save_safetensors(dfg_runtime *rt, const char *path, bool with_state);
/* Writes the PARAMs as a Hugging Face model directory that transformers' from_pretrained loads
 * (created when missing): config.json (the source model's, from the setting "model", else one
 * made from the model settings; torch_dtype set to the parameters' dtype) and model.safetensors,
 * or shards of at most max_shard_bytes (0: 5 GB, save_pretrained's default) with
 * model.safetensors.index.json, and the source directory's generation_config.json and tokenizer
 * files (tokenizer.json, tokenizer_config.json, vocab.json, merges.txt, chat_template.jinja, ...),
 * so that the directory loads as a whole model. */
DFG_API dfg_status dfg_runtime_save_model_dir(dfg_runtime *rt, const char *dir, size_t max_shard_bytes);
/* LoRA plans (a policy with frozen base weights, role base_model, and adapters as its PARAMs), in
 * PEFT's format:
 * dfg_runtime_load_adapter reads DIR/adapter_config.json (peft_type LORA; its r, lora_alpha and
 * use_rslora must be the plan's lora_r, lora_alpha and use_rslora) and DIR/adapter_model.safetensors
 * (PEFT's names, "base_model.model.<module>.lora_A.weight"; every adapter of the plan and nothing
 * else); dfg_runtime_save_adapter writes what PEFT's save_pretrained and a trainer's save_model
 * write: those two files, a README.md model card, and the base model directory's tokenizer files,
 * so that the directory loads with PeftModel.from_pretrained and AutoTokenizer;
 * dfg_runtime_save_merged writes the base with every adapter merged into its weight
 * (W + scale B A, as merge_and_unload) as dfg_runtime_save_model_dir does. */
DFG_API dfg_status dfg_runtime_load_adapter(dfg_runtime *rt, const char *dir, int *n_loaded);
DFG_API dfg_status dfg_runtime_save_adapter(dfg_runtime *rt, const char *dir);
DFG_API dfg_status dfg_runtime_save_merged(dfg_runtime *rt, const char *dir, size_t max_shard_bytes);
/* The files a save of program p copies from its source model directory (the setting "model"):
 * for a model directory (adapter false) or an adapter directory (true, the tokenizer's alone),
 * ", " between them in buf; "" when none (a model made from settings alone). Returns buf. */
DFG_API const char *dfg_weights_copied_files(const dfg_program *p, bool adapter, char *buf, size_t len);

/* ---------------------------------------------------------------- the frozen base of a LoRA plan
 * A digest of the base weights as loaded (every STATE of role base_model, in program order: its
 * name, dtype, shape and bytes; NF4 codes as quantised), "xxh64:<16 hex digits>", in out; "" for
 * a plan without a frozen base. A checkpoint records it, so that a resumed run can refuse another
 * base (dfg_weights_check_base). */
DFG_API dfg_status dfg_weights_base_digest(dfg_runtime *rt, char *out, size_t len);
/* Whether the runtime's base is the one `recorded` (a digest from dfg_weights_base_digest;
 * NULL or "": nothing recorded, accepted) names. On a mismatch: DFG_ERR_ARG and one line in the
 * runtime's error naming both, "<checkpoint> was trained on base <recorded> (<recorded_from>),
 * --weights <weights> is <digest>: resume with the same base". */
DFG_API dfg_status dfg_weights_check_base(dfg_runtime *rt, const char *recorded, const char *recorded_from,
                                          const char *checkpoint, const char *weights);

#ifdef __cplusplus
}
#endif
#endif
