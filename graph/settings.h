/* settings.h - the graph layer's one parser of setting values (settings_table.c), shared by
 * dfg_program_set (table keys, when set) and the typed reads (keys of a pipeline's own). */
#ifndef DFG_SETTINGS_H
#define DFG_SETTINGS_H

#include <string.h>

#include "dfg_graph.h"

#define DFG_SETTING_MAX_ITEMS 64 /* the most items any list of the table takes */

typedef struct {
    int64_t i; /* BOOL 0/1, INT (DFG_SETTING_AUTO for auto), ENUM index */
    double f;  /* FLOAT */
    int n;     /* lists: item count */
    double nums[DFG_SETTING_MAX_ITEMS];
} dfg_setting_parsed;

/* Parses v as a value of `spec` (a table row), or of `type` for a key of the pipeline's own
 * (spec NULL). On success fills *out and the canonical text (canon_len must hold it: lists and
 * numbers can be longer than v; dfg_setting_canon_size gives enough); on failure writes one line
 * naming key, value and what is accepted. */
bool dfg_setting_parse(const char *key, const dfg_setting_spec *spec, dfg_setting_type type, const char *v,
                       dfg_setting_parsed *out, char *canon, size_t canon_len, char *err, size_t err_len);
static inline size_t dfg_setting_canon_size(const char *v) { return 25 * strlen(v) + 64; }
/* The shortest %g text that reads back as exactly x. */
void dfg_setting_format_double(double x, char *buf, size_t len);

#endif
