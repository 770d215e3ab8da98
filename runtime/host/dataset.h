/* dataset.h - the prompt dataset reader on a buffer (the public entry point is
 * dfg_dataset_open in dfg_dataset.h). Internal to the runtime. */
#ifndef DFG_DATASET_INTERNAL_H
#define DFG_DATASET_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dfg_dataset.h"

/* The largest dataset file: refused before reading. The smallest row, {"prompt_ids":[0]} and its
 * newline, takes 19 bytes, so a file this size has fewer than 2^31 rows (the order is int32). */
#define DFG_DATASET_MAX_BYTES ((size_t)4 << 30)
/* JSON values on one line, counted before cJSON builds its tree (~64 bytes a value): a prompt
 * of 4M tokens, a tree of 256 MiB at most. */
#define DFG_DATASET_MAX_LINE_VALUES ((size_t)1 << 22)

/* dfg_dataset_open on text (len bytes, no NUL needed) instead of a file: the fuzz harness's and
 * the tests' entry point. `label` is the file name messages start with ("<label>:<line>: <what>"). */
dfg_status dfg_dataset_from_text(const char *text, size_t len, const char *label, int64_t vocab_size,
                                 dfg_dataset **out, char *err, size_t err_len);

#endif
