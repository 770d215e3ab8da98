/* planfile_internal.h - the plan reader's records, shared by planfile_read.c (decoding the
 * sections) and planfile_build.c (rebuilding the program from them). */
#ifndef DFG_PLANFILE_INTERNAL_H
#define DFG_PLANFILE_INTERNAL_H

#include "../graph/ir.h"
#include "planfile.h"

/* The largest dim and element count the program's constructors accept (as program.c). */
#define DFG_PLAN_MAX_DIM ((int64_t)1 << 40)

typedef struct {
    const char *key, *value;
    bool used;
} dfg_plan_setting_rec;

typedef struct {
    unsigned kind, dtype, role, flags;
    dfg_shape shape;
    const char *name;
    dfg_init init;         /* PARAM, STATE */
    const void *data;      /* CONST: points into the file's bytes */
} dfg_plan_tensor_rec;

typedef struct {
    uint32_t op;
    const char *op_name, *name;
    uint32_t n_in, *in;
    uint32_t n_out, first_out;
    unsigned char attr[sizeof(dfg_attrs)]; /* raw: checked per op before it is read as a dfg_attrs */
    uint32_t graph, index;                 /* where the node sits */
} dfg_plan_node_rec;

typedef struct {
    const char *name;
    uint32_t n_nodes;
    dfg_plan_node_rec *nodes;
} dfg_plan_graph_rec;

typedef struct {
    unsigned kind; /* 0 graph, 1 host */
    const char *name, *symbol;
    uint32_t graph, repeat;
} dfg_plan_stage_rec;

typedef struct {
    const char *label; /* the file name, first word of every message */
    char *err;
    size_t err_len;
    dfg_status status;
    dfg_arena arena; /* the records; freed when reading ends */
    struct {
        const unsigned char *b;
        size_t n;
    } sec[DFG_PLAN_SEC_END];
    dfg_plan_info info;
    const char *name;
    dfg_plan_setting_rec *settings;
    uint32_t n_settings;
    dfg_plan_tensor_rec *tensors;
    uint32_t n_tensors;
    dfg_plan_graph_rec *graphs;
    uint32_t n_graphs;
    dfg_plan_stage_rec *stages;
    uint32_t n_stages;
    const unsigned char *hostlib;
    size_t hostlib_size;
} dfg_plan_reader;

/* Records "<label>: <message>" as the reader's error (the first one sticks); returns s. */
dfg_status dfg_plan_fail_(dfg_plan_reader *r, dfg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Rebuilds the program from the records; NULL (with the reader's error set) when it fails. */
dfg_program *dfg_plan_build_(dfg_plan_reader *r);

#endif
