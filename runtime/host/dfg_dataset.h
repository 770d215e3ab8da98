/* dfg_dataset.h - prompt datasets: a JSONL file of prompts as token ids (docs/rewards.md,
 * "Prompt datasets (JSONL)") read once into memory, and the order an epoch visits its rows in.
 *
 * One JSON object per line, UTF-8: {"prompt_ids": [5, 9, 3, 14], "answer": "395", "id": 17}.
 * - prompt_ids (required, once): a non-empty list of integer token ids, each in 0 .. vocab_size-1
 *   (0 .. 2147483647 when vocab_size is 0). A number whose value is integral counts as that
 *   integer (1.0 and 1e2 are 1 and 100); 1.5, strings and the like are refused.
 * - Every other field is kept as one compact JSON object text (cJSON reprints it: white space
 *   goes, numbers are doubles, so an integer beyond 2^53 loses digits).
 * - Blank lines (only spaces, tabs or '\r') are skipped but counted in line numbers; a line may
 *   end in "\r\n"; a UTF-8 byte order mark before the first line is skipped.
 * Refused, with one line "PATH:LINE: what": a line that is not valid JSON, not one JSON object,
 * or has anything after it; not UTF-8 or holding a control byte (other than tab and '\r'); a NUL
 * byte, or a NUL character written as \u0000; more than 4194304 JSON values on one line; no,
 * a repeated or an empty "prompt_ids", or a bad id in it. Also refused ("PATH: what"): a file
 * that cannot be read, that is not a regular file, over 4 GiB, or without a row.
 * Memory: the ids, the field texts and a row table, proportional to the file; reading holds one
 * line and its JSON tree at a time besides. */
#ifndef DFG_DATASET_H
#define DFG_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dfg_dataset dfg_dataset;

/* Reads a JSONL prompt dataset. vocab_size > 0: every id must be < vocab_size; 0: unchecked
 * (any int32 id >= 0). On failure *out is NULL and err (may be NULL) gets one line
 * "PATH:LINE: what" (or "PATH: what"). Statuses: DFG_ERR_IO (cannot open or read, not a regular
 * file), DFG_ERR_FORMAT (a malformed line, over 4 GiB, no rows), DFG_ERR_ARG (path NULL or
 * empty, out NULL, vocab_size < 0), DFG_ERR_NOMEM. */
DFG_API dfg_status dfg_dataset_open(const char *path, int64_t vocab_size, dfg_dataset **out, char *err, size_t err_len);
DFG_API void dfg_dataset_free(dfg_dataset *ds);
DFG_API int64_t dfg_dataset_rows(const dfg_dataset *ds); /* >= 1; 0 for NULL */
DFG_API int64_t dfg_dataset_max_prompt_len(const dfg_dataset *ds); /* the longest prompt's ids */
/* The prompt of a row (0-based, in file order): its ids, and their count in *len (may be NULL);
 * NULL (and *len 0) for a row outside 0 .. rows-1. Valid until dfg_dataset_free. */
DFG_API const int32_t *dfg_dataset_prompt(const dfg_dataset *ds, int64_t row, int64_t *len);
/* The row's other fields as one compact JSON object text ("{}" when there are none); NULL outside. */
DFG_API const char *dfg_dataset_fields(const dfg_dataset *ds, int64_t row);
/* The row's 1-based line number in the file (blank lines counted); -1 outside. */
DFG_API int64_t dfg_dataset_line(const dfg_dataset *ds, int64_t row);
/* FNV-1a (64-bit) of the rows' content in order: each row's ids and field text, not its line
 * number or the file's white space. Equal on every machine; a resumed run compares it with the
 * checkpoint's to notice a changed file. */
DFG_API uint64_t dfg_dataset_hash(const dfg_dataset *ds);
/* The row that draw k (0-based) of epoch `epoch` (>= 0) takes. shuffle: a permutation of
 * 0 .. rows-1 that depends only on (seed, epoch): Fisher-Yates driven by dfg_host_rand
 * (dfg_runtime.h), its state seed ^ dfg_host_rand(&e) with e = epoch. Without shuffle: k.
 * -1 for k outside 0 .. rows-1, a negative epoch or ds NULL. The permutation of the last
 * (seed, epoch) asked for is kept in ds, so consecutive draws of one epoch cost O(1) and a new
 * epoch O(rows), without allocating; hence ds is not const, and one ds must not be used by
 * two threads at once. */
DFG_API int64_t dfg_dataset_order(dfg_dataset *ds, uint64_t seed, int64_t epoch, int64_t k, bool shuffle);

#ifdef __cplusplus
}
#endif
#endif
