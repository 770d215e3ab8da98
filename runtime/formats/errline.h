/* errline.h - one-line messages about an untrusted file, shared by its readers (safetensors,
 * a sharded model's index, config.json): "<label>: <what>", with any text taken from the file
 * made safe to print on one line. Reading the file itself is fileio.h's dfg_file_read. */
#ifndef DFG_ERRLINE_H
#define DFG_ERRLINE_H

#include <stdbool.h>
#include <stddef.h>

#include "../../graph/dfg_graph.h"

/* Where a reader's messages go and which file they name. */
typedef struct {
    const char *label; /* the file messages name */
    char *err;         /* may be NULL: no message */
    size_t err_len;
} dfg_errline;

/* Writes "<label>: <fmt ...>" into c->err (when there is one) and returns s. */
dfg_status dfg_errline_fail(const dfg_errline *c, dfg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Text from the file as it can appear in a one-line message, in buf (max + 4 bytes): control
 * bytes become '?', text longer than max bytes is cut at a UTF-8 boundary and marked "...". */
const char *dfg_errline_quote(const char *s, char *buf, size_t max);

/* Before cJSON builds a tree of untrusted JSON text t (n bytes): no NUL byte (no valid JSON holds
 * one), with refuse_u0000 no NUL character written as \u0000 either (cJSON's strings end there),
 * and at most max_values JSON values (every value but the first follows a ',', '[' or '{'
 * outside a string). */
dfg_status dfg_errline_scan_json(const dfg_errline *c, const char *t, size_t n, size_t max_values, bool refuse_u0000);

#endif
