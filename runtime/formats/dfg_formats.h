/* dfg_formats.h - the public functions of dfg's file formats (runtime/formats) that are not the
 * plan file's (planfile.h): a Hugging Face model directory's config.json as pipeline settings. */
#ifndef DFG_FORMATS_H
#define DFG_FORMATS_H

#include <stddef.h>

#include "dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- model directories
 * The model of a Hugging Face directory as pipeline settings (Hugging Face's names), read from
 * DIR/config.json: what `dfg compile --set model=DIR` does before the pipeline runs.
 * architectures[0] (else model_type) sets model_type: "gpt2" (GPT2LMHeadModel), "llama"
 * (LlamaForCausalLM), "qwen2" (Qwen2ForCausalLM) or "qwen3" (Qwen3ForCausalLM); any other model
 * is refused. Copied when the file holds them:
 *   gpt2: n_layer, n_head, n_embd, vocab_size, n_positions, layer_norm_epsilon, n_inner (null:
 *         not set, meaning 4*n_embd)
 *   llama, qwen2, qwen3: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads
 *         (absent: the num_attention_heads value), intermediate_size, head_dim (null: not set),
 *         vocab_size, max_position_embeddings, rms_norm_eps, rope_theta, tie_word_embeddings
 *         (absent: false), and for llama attention_bias (absent: false)
 *   every architecture: eos_token_id (one id or a list of up to 8, as "1,2,3") and pad_token_id
 *         (one id; a list gives its first), not set when absent or null
 * as text: integers "%lld", floats the shortest "%.*g" that reads back as the file's double,
 * booleans "true"/"false". A key already set on p (the user's --set) is kept, its file value not
 * read. Integers must be positive and within int32, floats finite and positive. A config of a
 * model dfg would compute differently is refused naming the key and value: for gpt2 an
 * activation_function other than gelu_new/gelu_pytorch_tanh, tie_word_embeddings false,
 * scale_attn_weights false, scale_attn_by_inverse_layer_idx true; for the others hidden_act
 * other than silu, rope_scaling not null, mlp_bias true, use_sliding_window true, attention_bias
 * true (qwen3), attention_dropout not 0. On any failure nothing is set and err (may be NULL)
 * gets one line "DIR/config.json: <what>" (or "DIR: <what>"). Statuses: DFG_ERR_IO (no
 * directory, no or unreadable config.json), DFG_ERR_FORMAT (not one JSON object, over 4 MiB, a
 * key of the wrong type or given twice), DFG_ERR_UNSUPPORTED (a model dfg does not run),
 * DFG_ERR_NOMEM, DFG_ERR_ARG (p NULL, dir empty), DFG_ERR_STATE (p already failed). torch_dtype
 * (dfg's setting of that name is the compute dtype), bos_token_id and generation_config.json are
 * not read. */
DFG_API dfg_status dfg_model_dir_settings(dfg_program *p, const char *dir, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
