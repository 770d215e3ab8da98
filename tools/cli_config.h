/* cli_config.h - dfg compile --config FILE: a TRL GRPOConfig written as JSON or YAML, read into
 * dfg's settings through the table of TRL's fields (tools/trl_fields.def). */
#ifndef DFG_CLI_CONFIG_H
#define DFG_CLI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* ---------------------------------------------------------------- the reader (cli_config_read.c)
 * The subset of JSON and YAML a GRPOConfig file uses: one flat mapping of fields to scalars and
 * lists of scalars. A nested mapping is read (so that its field can be named) but not kept. The
 * reader knows nothing of dfg; tests/fuzz/fuzz_config.c feeds it arbitrary bytes. */
typedef enum { CFG_NULL, CFG_BOOL, CFG_NUMBER, CFG_STRING, CFG_LIST, CFG_MAP } cfg_kind;

typedef struct {
    cfg_kind kind;  /* CFG_NULL .. CFG_STRING */
    char *text;     /* "true"/"false" for a bool, the number as written, the string unquoted */
} cfg_scalar;

typedef struct {
    char *key;
    int line;             /* 1-based, where the field starts */
    cfg_kind kind;
    cfg_scalar value;     /* scalars */
    cfg_scalar *items;    /* CFG_LIST */
    int n_items;
} cfg_field;

typedef struct {
    cfg_field *fields;
    int n;
    bool json;            /* read as JSON (the text starts with '{'), else YAML */
} cfg_doc;

/* Reads text[0..n) (which need not be NUL-terminated). On failure returns false with one line in
 * err, "LINE: what is wrong", and leaves *doc empty. A key given twice is refused. */
bool cfg_parse(const char *text, size_t n, cfg_doc *doc, char *err, size_t err_len);
void cfg_free(cfg_doc *doc);
/* "null", "a bool", "a number", "a string", "a list", "a mapping" */
const char *cfg_kind_name(cfg_kind k);

/* ---------------------------------------------------------------- the mapping (cli_config.c) */
/* Reads FILE and appends the dfg settings its fields give to sets[*n_sets] (at most max), in the
 * table's row order, strings that live until the process ends. A field dfg does not support
 * (at a value other than TRL's default), a field TRL does not have, and a field whose setting an
 * earlier --set gives another value are refused: one line, exit code CLI_USAGE. The fields that
 * are dfg run's options are printed as the run's command line. */
int cli_config_apply(const char *cmd, const char *path, const char **sets, int *n_sets, int max);
/* The table as docs/cli.md's "TRL GRPOConfig fields" section (Markdown). */
void cli_config_print_fields(FILE *f);

#endif
