/* cli_inspect.h - what dfg inspect reports beyond the compiler's dfg_report: per memory
 * category and per stage facts read from the compiled plan (cli_inspect_why.c). */
#ifndef DFG_CLI_INSPECT_H
#define DFG_CLI_INSPECT_H

#include "../passes/plan.h"
#include "cli.h"

typedef struct {
    size_t peak_bytes;     /* live at the report's peak step (the report's peak[c]) */
    int peak_tensors;      /* buffers live there */
    int64_t numel;         /* their elements */
    const dfg_buf *largest; /* the largest of them, or NULL */
    size_t max_bytes;      /* the most the category holds at any step */
    int max_step;          /* the first step where it does */
    int n_tensors;         /* buffers of the category over the whole step */
} cli_category_facts;

typedef struct {
    double bytes_moved;     /* bytes its kernels read and write, x repeat (op cost model) */
    size_t peak_live_bytes; /* most bytes live at one of its steps */
} cli_stage_facts;

/* The stage that holds timeline step `step` of a compiled program, or -1. */
int cli_stage_at(const dfg_program *p, int step);
/* false when out of memory */
bool cli_category_facts_of(const dfg_program *p, cli_category_facts f[DFG_CAT_COUNT]);
bool cli_stage_facts_of(const dfg_program *p, cli_stage_facts *out /* [p->n_stages] */);
/* One sentence: what category c's bytes at the peak are and why they are there. */
char *cli_category_why(const dfg_program *p, const cli_category_facts *all, dfg_category c, char *buf, size_t len);

#endif
