/* model_config.h - a Hugging Face model directory's config.json as pipeline settings (the public
 * entry point is dfg_model_dir_settings in dfg_runtime.h). Internal to the runtime. */
#ifndef DFG_MODEL_CONFIG_H
#define DFG_MODEL_CONFIG_H

#include <stddef.h>

#include "../../graph/dfg_graph.h"

#define DFG_MC_FILE "config.json"
/* Real config.json files are 1-3 KB; the bound keeps a hostile file from taking memory. */
#define DFG_MC_MAX_BYTES (4u << 20)

/* The part of dfg_model_dir_settings after the file is read, on a buffer (the fuzz harness's and
 * the tests' entry point): text (len bytes, no NUL needed) is checked and, when every key dfg
 * reads is valid and supported, the settings are set on p; otherwise p is left as it was.
 * `label` is the file name messages start with ("<label>: <what>", one line). */
dfg_status dfg_mc_settings_from_text(dfg_program *p, const char *text, size_t len, const char *label, char *err,
                                     size_t err_len);

#endif
