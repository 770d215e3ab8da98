/* safetensors.h - reading and writing the safetensors format (8-byte little-endian header
 * length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {..}}, then the
 * data). The reader checks everything before trusting it: header size, JSON, dtypes, shapes,
 * offsets inside the data and consistent with dtype x shape, no overlaps. */
#ifndef DFG_SAFETENSORS_H
#define DFG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../../graph/dfg_graph.h"

typedef struct {
    const char *name;
    dfg_dtype dtype;        /* DFG_DTYPE_COUNT when the file's dtype has no dfg equivalent */
    const char *dtype_name; /* as in the file: "F32", "BF16", "I64", ... */
    dfg_shape shape;       /* a 0-dim file tensor has rank 0 */
    const void *data;      /* points into the file's bytes; not necessarily aligned: memcpy it */
    size_t bytes;
} dfg_st_tensor;

typedef struct dfg_safetensors dfg_safetensors;

/* Parses a file (read fully into memory) or a buffer (copied). On failure returns the status
 * (DFG_ERR_FORMAT, DFG_ERR_IO, DFG_ERR_NOMEM), writes one line naming the file and the tensor or
 * field at fault to err, and sets *out to NULL. A tensor whose dtype is known to safetensors but
 * has no dfg equivalent (I64, F64, ...) is kept with dtype DFG_DTYPE_COUNT. */
dfg_status dfg_st_open(const char *path, dfg_safetensors **out, char *err, size_t err_len);
dfg_status dfg_st_parse(const void *bytes, size_t len, dfg_safetensors **out, char *err, size_t err_len);
void dfg_st_free(dfg_safetensors *st);

int dfg_st_count(const dfg_safetensors *st);
const dfg_st_tensor *dfg_st_get(const dfg_safetensors *st, int i);          /* in file order */
const dfg_st_tensor *dfg_st_find(const dfg_safetensors *st, const char *name); /* NULL when absent */
const char *dfg_st_metadata(const dfg_safetensors *st, const char *key);     /* NULL when absent */

/* Writes n tensors in the given order and n_meta metadata pairs (meta_kv[2i] = key,
 * meta_kv[2i + 1] = value) atomically: a temp file in the same directory, fsync, rename, fsync
 * of the directory. A tensor with dtype DFG_DTYPE_COUNT is written under its dtype_name. */
dfg_status dfg_st_write(const char *path, const dfg_st_tensor *tensors, int n, const char *const *meta_kv, int n_meta,
                        char *err, size_t err_len);

#endif
