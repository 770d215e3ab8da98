/* planfile_internal.h - the plan reader's records, shared by planfile_read.c (decoding the
 * sections) and planfile_build.c (rebuilding the program from them). */
#ifndef DFG_PLANFILE_INTERNAL_H
#define DFG_PLANFILE_INTERNAL_H

#include "../graph/ir.h"
#include "../ops/attrs.h"
#include "planfile.h"

/* The largest dim and element count the program's constructors accept (as program.c). */
#define DFG_PLAN_MAX_DIM ((int64_t)1 << 40)
/* The largest alignment a plan may ask for (a power of two; the targets use 64 and 256). */
#define DFG_PLAN_MAX_ALIGN ((size_t)1 << 20)

/* Flag bits as the file stores them: fixed by the format, whatever the in-memory enums become. */
enum { DFG_PLAN_TF_OUTPUT = 1u, DFG_PLAN_TF_GRAD = 2u, DFG_PLAN_TF_NULLABLE = 4u, DFG_PLAN_TF_ALL = 7u };
enum { DFG_PLAN_NF_BACKWARD = 1u, DFG_PLAN_NF_ALL = 1u };
enum { DFG_PLAN_OPT_NO_REUSE = 1u, DFG_PLAN_OPT_KEEP_ORDER = 2u, DFG_PLAN_OPT_NO_FUSE = 4u,
       DFG_PLAN_OPT_MEMORY_MIN = 8u, DFG_PLAN_OPT_ALL = 15u };

typedef struct {
    const char *key, *value;
    bool used;
} dfg_plan_setting_rec;

typedef struct {
    unsigned kind, dtype, role, flags; /* flags: DFG_PLAN_TF_* */
    dfg_shape shape;
    const char *name;
    const char *scope_first, *scope_last; /* STATE, INPUT; NULL: no scope */
    uint32_t init_from, grad_wrt;         /* refs: tensor id + 1, 0 for none */
    dfg_init init;         /* PARAM, STATE */
    const void *data;      /* CONST: points into the file's bytes */
} dfg_plan_tensor_rec;

typedef struct {
    uint32_t op;
    const char *op_name, *name;
    unsigned flags;   /* DFG_PLAN_NF_* */
    uint32_t grad_of; /* index + 1 of the forward node it differentiates, 0 for none */
    uint32_t n_in, *in;
    uint32_t n_out, first_out;
    const unsigned char *attr; /* the encoded attributes (dfg_attrs_encode), in the file's bytes */
    uint32_t attr_len;
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
    int64_t first_step, last_step;
    uint32_t until, when, runs; /* refs, 0: none */
    double when_lo, when_hi;
    uint32_t loop_to, loop_max, loop_until; /* dfg_stage_loop: the first stage's index + 1 (0: no loop), refs */
} dfg_plan_stage_rec;

typedef struct {
    const char *host_init, *host_release; /* "" for none */
    uint32_t n_stages, n_tensors, n_dumps;
    const char **stages;
    uint32_t *tensors;       /* refs */
    uint32_t shared;         /* ref, 0: no shared-prompt rule */
    int64_t shared_len, shared_group;
    const char **dump_names;
    uint32_t *dumps;         /* refs */
    const char *rollouts_only; /* "" for none */
    unsigned batch_invariant;  /* 0 or 1 */
    uint32_t prompt_tokens;    /* ref, 0: no rollout prompt width declared */
    int64_t prompt_len;
} dfg_plan_decl_rec;

/* ---------------------------------------------------------------- the plan section */
typedef struct {
    uint32_t op;
    const char *name;
} dfg_plan_sched_rec; /* one scheduled node */

typedef struct {
    uint32_t owner;        /* compiled tensor id of the storage owner */
    int64_t offset, size;  /* bytes of the arena it takes */
    int32_t first, last;   /* timeline steps it is live, inclusive; -1, -1: never */
} dfg_plan_buf_rec;

struct dfg_plan_record {
    dfg_arena arena; /* everything below */
    uint64_t arena_bytes;
    uint32_t align, n_steps, n_tensors, n_graphs, n_bufs;
    uint32_t *n_nodes;            /* [graph] */
    dfg_plan_sched_rec **nodes;   /* [graph][position]: the schedule */
    dfg_plan_buf_rec *bufs;       /* [buffer] */
    uint32_t *tensor_buf;         /* [compiled tensor]: buffer index + 1, 0: no bytes */
    uint64_t *tensor_bytes;       /* [compiled tensor] */
    struct dfg_remat_log *remat;  /* remat's decisions (passes/plan.h), in the arena; NULL: remat did not run */
};

/* A new empty record (NULL when out of memory); dfg_plan_record_free releases it. */
dfg_plan_record *dfg_plan_record_new(void);
void dfg_plan_record_free(dfg_plan_record *rec);
/* The record of a compiled program (NULL when out of memory). */
dfg_plan_record *dfg_plan_record_of(const dfg_program *compiled);

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
    dfg_plan_decl_rec decl;
    const unsigned char *hostlib;
    size_t hostlib_size;
    dfg_plan_record *plan; /* section 7, owned by the reader until it is handed to the info */
    bool plan_optional;    /* the writer reading its own sections 1-6 back to compile a copy */
} dfg_plan_reader;

/* Records "<label>: <message>" as the reader's error (the first one sticks); returns s. */
dfg_status dfg_reader_err(dfg_plan_reader *r, dfg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Messages quote names and versions from the file: control characters become '?', so that a
 * refusal stays one line whatever those hold. */
void dfg_plan_one_line(char *msg);
/* Rebuilds the program from the records; NULL (with the reader's error set) when it fails. */
dfg_program *dfg_plan_build(dfg_plan_reader *r);
/* Checks the plan section on its own and against the tensors and graphs sections. */
void dfg_plan_record_validate(dfg_plan_reader *r);
/* dfg_plan_parse, accepting a file without a plan section when plan_optional (the writer). */
dfg_status dfg_plan_parse_bytes(const void *bytes, size_t n, const char *label, bool plan_optional, dfg_program **out,
                           dfg_plan_info *info, char *err, size_t len);

#endif
