/* weights_dir.h - the safetensors files a weights path names: one file, or a model directory as
 * transformers' save_pretrained writes it (DIR/model.safetensors, or
 * DIR/model.safetensors.index.json and the shards its weight_map lists). Every file is opened
 * and the shards are checked against the index and against each other before the caller sets
 * anything, so a malformed directory is refused whole. Internal to the runtime. */
#ifndef DFG_WEIGHTS_DIR_H
#define DFG_WEIGHTS_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "safetensors.h"

#define DFG_WD_SINGLE "model.safetensors"
#define DFG_WD_INDEX "model.safetensors.index.json"

typedef struct {
    char *path; /* the file as messages name it (DIR/shard for a directory) */
    dfg_safetensors *st;
} dfg_wd_file;

typedef struct {
    dfg_wd_file *files; /* a single file, or the shards in the order the index first names them */
    int n;
    bool sharded; /* read through an index: the tensors are spread over files */
} dfg_wd_set;

/* Opens path: a safetensors file, or a directory holding model.safetensors (taken first, as
 * transformers does) or model.safetensors.index.json. For an index, every tensor of weight_map
 * must be in the shard it names, and every tensor of a shard must be mapped to that shard (so
 * no tensor is in two shards). On failure returns the status, writes one line
 * "<file>: <what>" to err, and leaves *out empty. */
dfg_status dfg_wd_open(const char *path, dfg_wd_set *out, char *err, size_t err_len);
void dfg_wd_close(dfg_wd_set *w);

/* The index part of dfg_wd_open on a buffer, opening no shard (the fuzz harness's entry point):
 * size and JSON bounds, weight_map, shard names. *n_tensors and *n_shards (either may be NULL)
 * count weight_map's entries and its distinct files; 0 on failure. */
dfg_status dfg_wd_parse_index(const char *text, size_t len, int *n_tensors, int *n_shards, char *err, size_t err_len);

#endif
