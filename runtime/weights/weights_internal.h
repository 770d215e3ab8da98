/* weights_internal.h - shared by runtime/weights' files: a runtime's tensors gathered into host
 * memory, the model directory writer, the NF4 loader, the architecture of a plan. Every runtime
 * access goes through dfg_runtime.h's public calls. */
#ifndef DFG_WEIGHTS_INTERNAL_H
#define DFG_WEIGHTS_INTERNAL_H

#include "../../graph/ir.h"
#include "../formats/safetensors.h"
#include "dfg_nn.h"
#include "dfg_weights.h"

#define dfg_wt_fail dfg_runtime_fail

/* Tensors read out of a runtime into one host buffer (each at a 16-byte boundary), described for
 * the safetensors writer; names[i] is an owned name (PEFT's, a merged weight's) or NULL. */
typedef struct {
    dfg_st_tensor *ts;
    char **names;
    char *host;
    int n;
} dfg_wt_set;

typedef bool (*dfg_wt_pick)(const dfg_tensor *t, const void *arg);
/* Reads every persistent tensor of the program that `pick` keeps, in program order. */
dfg_status dfg_wt_gather(dfg_runtime *rt, dfg_wt_pick pick, const void *arg, dfg_wt_set *out);
void dfg_wt_set_free(dfg_wt_set *s);
/* "format": "pt", "producer": "dfg", "dfg.step": the steps done, for a safetensors file's metadata */
dfg_status dfg_wt_write_tensors(dfg_runtime *rt, const char *path, const dfg_st_tensor *ts, int n);

/* The architecture a program was built for (its setting model_type; GPT-2 without one). */
const dfg_arch_info *dfg_wt_arch(const dfg_program *p);
/* Whether the program has a frozen base (a LoRA plan). */
bool dfg_wt_lora_plan(const dfg_program *p);

/* model_export.c: dir created when missing; text or a source file written atomically; ts (n,
 * Hugging Face's names) written as a model directory: the weights (sharded above max_shard_bytes,
 * 0: 5 GB), the source's tokenizer and generation files, config.json. */
dfg_status dfg_wt_make_dir(dfg_runtime *rt, const char *dir);
dfg_status dfg_wt_write_text(dfg_runtime *rt, const char *path, const char *text);
/* o printed as JSON to dir/name, atomically (o stays the caller's). */
struct cJSON;
dfg_status dfg_wt_write_json(dfg_runtime *rt, const char *dir, const char *name, const struct cJSON *o);
dfg_status dfg_wt_write_model_dir(dfg_runtime *rt, const char *dir, const dfg_st_tensor *ts, int n, size_t max_shard_bytes);
/* Copies the source model directory's files a model directory (adapter false) or an adapter
 * directory (true: the tokenizer's) holds into dir; one the source lacks is removed from dir. */
dfg_status dfg_wt_copy_source_files(dfg_runtime *rt, const char *dir, bool adapter);

/* nf4_load.c: a load_in_4bit plan's weights. packed: t is a weight's NF4 codes ("<w>.nf4"); part:
 * t is one of its absmax tensors; for: the codes of weight name, or NULL; shape: the weight's
 * shape the plan's dequantisations record (false: none reads it); check: file tensor f fits
 * them; load: quantises f into the codes and absmax tensors and writes them. */
bool dfg_wt_nf4_packed(const dfg_tensor *t);
bool dfg_wt_nf4_part(const dfg_tensor *t);
const dfg_tensor *dfg_wt_nf4_for(const dfg_program *p, const char *name);
bool dfg_wt_nf4_shape(const dfg_program *p, const dfg_tensor *packed, dfg_shape *shape);
dfg_status dfg_wt_nf4_check(dfg_runtime *rt, const char *path, const dfg_st_tensor *f, const dfg_tensor *packed);
dfg_status dfg_wt_nf4_load(dfg_runtime *rt, const char *path, const dfg_st_tensor *f, const dfg_tensor *packed);

/* checkpoint.c: a PEFT adapter file into a LoRA plan's adapters, strictly both ways. */
dfg_status dfg_wt_load_adapter_file(dfg_runtime *rt, const char *path, int *n_loaded);

/* adapter_card.c: PEFT's README.md model card of an adapter directory. */
dfg_status dfg_wt_write_adapter_card(dfg_runtime *rt, const char *dir);

#endif
