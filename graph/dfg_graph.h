/* dfg_graph.h - the IR half of dfg's public DSL: programs, graphs, tensors, settings, stages.
 *
 * The op builders are in dfg_ops.h (ops/), autodiff, metrics and the model builders in
 * dfg_nn.h (ops/nn/); dfg.h (runtime/) includes every public header, and is what a pipeline
 * includes. Nothing runs while a graph is built: builder calls check shapes and append nodes.
 * Errors are sticky (cairo/sqlite style): the first error on a graph is kept, later builder
 * calls on that graph return a poison tensor and do nothing, and dfg_graph_error() names the
 * op, its inputs' shapes and the tensors' names. The library never aborts on bad input.
 *
 * State is imperative: an op that writes a persistent tensor (assign, slice_assign, adamw,
 * sample's RNG, clip_grad_norm) makes later builder calls in the same graph read the new value,
 * exactly as C statements would. Holding on to an older value after it was overwritten is an
 * error, so the builder's order is always a valid schedule.
 */
#ifndef DFG_GRAPH_H
#define DFG_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public API: the library is built with hidden visibility, so only these symbols
 * leave libdfg.so (and the dfg tool, for the pipelines it loads). */
#if defined(__GNUC__)
#define DFG_API __attribute__((visibility("default")))
#else
#define DFG_API
#endif

#define DFG_VERSION_STRING "0.1.0"
#define DFG_MAX_RANK 6

typedef enum {
    DFG_OK = 0,
    DFG_ERR_ARG,         /* a bad argument (NULL, out-of-range axis, unknown name) */
    DFG_ERR_SHAPE,       /* shapes or dtypes do not fit the op */
    DFG_ERR_STATE,       /* the object is already in an error state, or used out of order */
    DFG_ERR_NOMEM,       /* an allocation failed */
    DFG_ERR_IO,          /* a file could not be read or written */
    DFG_ERR_FORMAT,      /* a file's contents are malformed */
    DFG_ERR_RANGE,       /* a value read at run time is out of range (token id, position) */
    DFG_ERR_UNSUPPORTED, /* valid, but not implemented for this backend or dtype */
    DFG_ERR_NUMERIC,     /* NaN or Inf where a finite value is required */
    DFG_ERR_RUNTIME,     /* a backend or host function failed */
    DFG_STATUS_COUNT
} dfg_status;

typedef enum { DFG_F32, DFG_BF16, DFG_F16, DFG_I32, DFG_U8, DFG_DTYPE_COUNT } dfg_dtype;

/* PARAM: trainable, persistent. STATE: persistent, written by the program. INPUT: written by the
 * host before a stage. CONST: data fixed at build time. TEMP: produced by exactly one node. */
typedef enum { DFG_PARAM, DFG_STATE, DFG_INPUT, DFG_CONST, DFG_TEMP, DFG_KIND_COUNT } dfg_kind;

/* What a persistent tensor is for: the memory report groups bytes by role. */
typedef enum {
    DFG_ROLE_NONE,
    DFG_ROLE_PARAM,     /* trainable weights */
    DFG_ROLE_GRAD,      /* gradient accumulators */
    DFG_ROLE_OPTIM,     /* optimizer moments and counters */
    DFG_ROLE_REF_MODEL, /* frozen reference-model weights */
    DFG_ROLE_KV_CACHE,  /* attention key/value caches */
    DFG_ROLE_ROLLOUT,   /* generated tokens, masks, rewards, advantages */
    DFG_ROLE_RNG,       /* random-number-generator counters */
    DFG_ROLE_METRIC,    /* scalars the runtime reports after each step */
    DFG_ROLE_BASE_MODEL, /* a parameter-efficient policy's frozen base weights (LoRA): no gradient,
                            no optimizer state; a Hugging Face checkpoint fills them */
    DFG_ROLE_COUNT
} dfg_role;

typedef struct {
    int rank;
    int64_t d[DFG_MAX_RANK];
} dfg_shape;

/* DFG_SHAPE(4, 19, 48): a shape literal; more than DFG_MAX_RANK dims does not compile. */
#define DFG_SHAPE(...) \
    ((dfg_shape){.rank = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .d = {__VA_ARGS__}})
#define DFG_SCALAR ((dfg_shape){.rank = 0})

typedef enum { DFG_INIT_ZEROS, DFG_INIT_ONES, DFG_INIT_CONSTANT, DFG_INIT_NORMAL, DFG_INIT_UNIFORM, DFG_INIT_COUNT } dfg_init_kind;

/* How the runtime fills a PARAM or STATE before the first step (from the run's seed). */
typedef struct {
    dfg_init_kind kind;
    float a; /* CONSTANT: value; NORMAL: mean; UNIFORM: low */
    float b; /* NORMAL: std; UNIFORM: high */
} dfg_init;

static inline dfg_init dfg_init_zeros(void) { return (dfg_init){DFG_INIT_ZEROS, 0.0f, 0.0f}; }
static inline dfg_init dfg_init_ones(void) { return (dfg_init){DFG_INIT_ONES, 1.0f, 0.0f}; }
static inline dfg_init dfg_init_constant(float v) { return (dfg_init){DFG_INIT_CONSTANT, v, 0.0f}; }
static inline dfg_init dfg_init_normal(float mean, float std) { return (dfg_init){DFG_INIT_NORMAL, mean, std}; }
static inline dfg_init dfg_init_uniform(float lo, float hi) { return (dfg_init){DFG_INIT_UNIFORM, lo, hi}; }

typedef struct dfg_program dfg_program;
typedef struct dfg_graph dfg_graph;
typedef struct dfg_tensor dfg_tensor;
typedef struct dfg_node dfg_node;

/* ---------------------------------------------------------------- names and enums */
DFG_API const char *dfg_status_name(dfg_status s);
DFG_API const char *dfg_dtype_name(dfg_dtype t);
DFG_API const char *dfg_kind_name(dfg_kind k);
DFG_API const char *dfg_role_name(dfg_role r);
DFG_API size_t dfg_dtype_size(dfg_dtype t);
DFG_API int64_t dfg_shape_numel(dfg_shape s);
DFG_API bool dfg_shape_equal(dfg_shape a, dfg_shape b);
/* Writes "(4,19,48)" into buf; returns buf. */
DFG_API char *dfg_shape_str(dfg_shape s, char *buf, size_t len);
/* Writes a byte count for people ("512 B", "4.00 KiB", "2.51 GiB") into buf; returns buf. */
DFG_API char *dfg_bytes_str(double bytes, char *buf, size_t len);

/* ---------------------------------------------------------------- programs */
DFG_API dfg_program *dfg_program_new(const char *name); /* NULL only when out of memory */
DFG_API void dfg_program_free(dfg_program *p);
DFG_API const char *dfg_program_name(const dfg_program *p);
/* The first error of the program or of any of its graphs; DFG_OK and "" when there is none. */
DFG_API dfg_status dfg_program_status(const dfg_program *p);
DFG_API const char *dfg_program_error(const dfg_program *p);

/* Persistent tensors. Names are unique within a program (checkpoints use them). */
DFG_API dfg_tensor *dfg_param(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_init init);
DFG_API dfg_tensor *dfg_state(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, dfg_role role,
                      dfg_init init);
/* data holds numel * dtype_size bytes and is copied. */
DFG_API dfg_tensor *dfg_const(dfg_program *p, const char *name, dfg_dtype dt, dfg_shape shape, const void *data);
DFG_API dfg_tensor *dfg_find(const dfg_program *p, const char *name); /* persistent and output tensors */
/* Declares that a STATE or INPUT only needs its value from the start of stage `first_stage` to
 * the end of `last_stage` (stage names; the stages may be added later). Outside that range the
 * planner gives its bytes to other tensors, so its contents are undefined when the range begins
 * each step: e.g. a KV cache written by the rollout is dead during training. */
DFG_API dfg_status dfg_set_scope(dfg_program *p, dfg_tensor *t, const char *first_stage, const char *last_stage);
/* dst (a PARAM or STATE) starts as a copy of src (a PARAM or STATE of the same shape),
 * converted to dst's dtype: when the runtime is created, and again whenever a checkpoint load
 * sets src but not dst. For f32 master weights of bf16 parameters and for a frozen reference
 * copy of the policy: no graph work at all, and loaded weights reach the copies. */
DFG_API dfg_status dfg_init_from(dfg_program *p, dfg_tensor *dst, dfg_tensor *src);
/* Sets a persistent tensor's role (e.g. a PARAM copy that is the frozen reference model). */
DFG_API dfg_status dfg_set_role(dfg_tensor *t, dfg_role role);

/* ---------------------------------------------------------------- settings
 * Settings are key/value pairs saved with the program (the pipeline's --set values, config.json's
 * model keys, task options). Every key dfg knows has one row in the settings table
 * (graph/settings.def): its type, default, range, owner and a one-line doc. A value of such a key
 * is parsed and checked once, when it is set (dfg_program_set refuses a bad one in one line
 * naming the key and the accepted values) and recorded as canonical text ("1", "yes" and "on"
 * are recorded as "true"); the typed reads below return the parsed value and never parse text
 * again. A pipeline may read keys of its own too: those are typed by its read. */
typedef enum {
    DFG_SETTING_BOOL,   /* true/false, 1/0, yes/no, on/off */
    DFG_SETTING_INT,    /* a decimal integer in [min, max] (or "auto" where the row allows it) */
    DFG_SETTING_FLOAT,  /* a finite number in [min, max] */
    DFG_SETTING_ENUM,   /* one of the row's values */
    DFG_SETTING_STR,    /* any text (a path) */
    DFG_SETTING_INTS,   /* comma-separated integers in [min, max], at most max_items */
    DFG_SETTING_FLOATS, /* comma-separated numbers in [min, max], at most max_items */
    DFG_SETTING_NAMES,  /* comma-separated names of min .. max characters, at most max_items */
    DFG_SETTING_TYPE_COUNT
} dfg_setting_type;

typedef enum {
    DFG_SETTING_ENGINE, /* the compiler and the runtime */
    DFG_SETTING_MODEL,  /* the model: config.json's keys */
    DFG_SETTING_DATA,   /* prompts, datasets and rewards */
    DFG_SETTING_GRPO,   /* the GRPO pipeline (examples/grpo/grpo.c): batch, rollout, loss */
    DFG_SETTING_OPTIM,  /* AdamW and clipping */
    DFG_SETTING_LORA,   /* PEFT's LoRA and bitsandbytes' 4-bit base */
    DFG_SETTING_OWNER_COUNT
} dfg_setting_owner;

/* A row of the settings table. */
typedef struct {
    const char *key;
    dfg_setting_type type;
    const char *def;    /* the default's text; NULL where it follows from other settings (see doc) */
    double min, max;    /* a number's range; a list's items' range (NAMES: their length) */
    int max_items;      /* lists: the most items */
    const char *values; /* ENUM: "a|b,b2|c" ('|' between values, ',' between one value's spellings,
                         * the first recorded); INT: "auto" when auto is a value; else "" */
    dfg_setting_owner owner;
    const char *doc;
} dfg_setting_spec;

#define DFG_SETTING_AUTO INT64_MIN /* what an INT setting whose value is "auto" reads as */

DFG_API int dfg_setting_spec_count(void);
DFG_API const dfg_setting_spec *dfg_setting_spec_at(int i);          /* NULL past the end */
DFG_API const dfg_setting_spec *dfg_setting_spec_find(const char *key); /* NULL: not a table key */
DFG_API const char *dfg_setting_type_name(dfg_setting_type t);       /* "bool", "int", ... */
DFG_API const char *dfg_setting_owner_name(dfg_setting_owner o);     /* "engine", "model", ... */
/* What a row accepts, as messages and docs say it ("1 .. 128", "grpo, bnpo, dapo", ...). */
DFG_API void dfg_setting_accepted(const dfg_setting_spec *s, char *buf, size_t len);

/* Setting a key again replaces its value. A table key's value is checked here: a bad one is the
 * program's sticky error ("setting 'use_rslora': 'maybe' is not a boolean (true/false, 1/0,
 * yes/no, on/off)") and the setting is left as it was. */
DFG_API dfg_status dfg_program_set(dfg_program *p, const char *key, const char *value);
/* The recorded (canonical) text; NULL when absent. For showing, and for whether a key is set:
 * code that needs a value uses a typed read. */
DFG_API const char *dfg_program_setting(const dfg_program *p, const char *key);
/* Whether the key is set (by --set, config.json, or a pipeline's read that recorded its default). */
DFG_API bool dfg_program_has(const dfg_program *p, const char *key);
/* Typed reads of a built or loaded program's settings (runtime, exporters, tools): the value as
 * parsed when it was set; when the key is not set, the table's default (0, false or "" where the
 * table has none). A key outside the table is parsed with the same parser (0 if it does not
 * parse). These never mark a key used and never fail. */
DFG_API bool dfg_program_bool(const dfg_program *p, const char *key);
DFG_API int64_t dfg_program_int(const dfg_program *p, const char *key);     /* DFG_SETTING_AUTO for auto */
DFG_API double dfg_program_float(const dfg_program *p, const char *key);
DFG_API const char *dfg_program_str(const dfg_program *p, const char *key); /* never NULL */
/* Lists (INTS, FLOATS, NAMES): how many items, the i-th item's text, the i-th item's number. */
DFG_API int dfg_program_list_count(const dfg_program *p, const char *key);
DFG_API const char *dfg_program_list_item(const dfg_program *p, const char *key, int i); /* NULL past the end */
DFG_API double dfg_program_list_number(const dfg_program *p, const char *key, int i);
DFG_API int dfg_program_setting_count(const dfg_program *p);
DFG_API const char *dfg_program_setting_key(const dfg_program *p, int i);
/* Whether a dfg_setting_* accessor read the key (the CLI rejects --set keys nobody read). */
DFG_API bool dfg_program_setting_used(const dfg_program *p, const char *key);

/* Typed settings for pipelines. Each returns the key's value when it is set (by `dfg compile
 * --set key=value`), parsed strictly: a value that is not entirely a number of the right kind
 * sets the program's sticky error naming the key and the value, and the default is returned.
 * When the key is absent, the default is recorded as its value, so the saved plan lists every
 * setting the pipeline used. Either way the key is marked used.
 *   int:   decimal, optional sign ("12", "-3")
 *   float: a finite C floating-point literal ("1e-3", "0.5")
 *   bool:  true/false, 1/0, yes/no, on/off
 *   str:   any text; the returned string lives as long as the program (def NULL means "") */
DFG_API int64_t dfg_setting_int(dfg_program *p, const char *key, int64_t def);
DFG_API double dfg_setting_float(dfg_program *p, const char *key, double def);
DFG_API const char *dfg_setting_str(dfg_program *p, const char *key, const char *def);
DFG_API bool dfg_setting_bool(dfg_program *p, const char *key, bool def);
/* For table keys the accessor must match the row's type (a wrong one is the program's error):
 * int for INT (a value "auto" reads as DFG_SETTING_AUTO through dfg_setting_int_auto only), str
 * for STR and ENUM, and these: */
DFG_API int64_t dfg_setting_int_auto(dfg_program *p, const char *key, int64_t def); /* def may be DFG_SETTING_AUTO */
DFG_API int dfg_setting_enum(dfg_program *p, const char *key, const char *def);   /* the value's index; -1 on error */
/* A list: its item count (-1 on error); its items through dfg_program_list_item/_number. */
DFG_API int dfg_setting_list(dfg_program *p, const char *key, const char *def);

/* Sets the program's sticky error (the first one is kept) and returns s: how a pipeline
 * reports a setting out of range ("n_head 5 does not divide n_embd 64"). */
DFG_API dfg_status dfg_program_fail(dfg_program *p, dfg_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A line for the person compiling, which dfg compile prints as "note: ...": what the settings
 * imply that they may not expect (a default that changed with another setting, what a run will
 * need). Not an error, and not stored in the plan; notes past 2 KiB are dropped. */
DFG_API void dfg_program_note(dfg_program *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
DFG_API const char *dfg_program_notes(const dfg_program *p); /* "" or lines, each ending in '\n' */

/* Stages run in order, once per step. A graph stage runs its graph `repeat` times (decode
 * steps, micro-batches); a host stage calls a C function by symbol name: one exported by the
 * pipeline's shared object, or a built-in. Stages talk only through persistent tensors. */
DFG_API dfg_status dfg_stage_graph(dfg_program *p, dfg_graph *g, int repeat);
DFG_API dfg_status dfg_stage_host(dfg_program *p, const char *name, const char *symbol);
/* The stage runs only in steps first..last (counted from 0; last < 0: no end), e.g. a supervised
 * warm-up before the RL stages take over. Memory is planned as if every stage ran. */
DFG_API dfg_status dfg_stage_steps(dfg_program *p, const char *stage, int64_t first, int64_t last);
/* Work that follows the real lengths, with memory still planned for the worst case:
 * dfg_stage_until: a repeated graph stage ends early: after each run the scalar `flag` (an f32
 * or i32 STATE, which the stage's graph writes) is read, and a nonzero value ends the stage's
 * runs for this step (decode, once every row has ended). A stage whose nodes run on its last
 * repeat only (dfg_allreduce_last) cannot end early. On a device the runs go in captured chunks
 * with one read of the flag between chunks.
 * dfg_stage_when: the stage runs in a step only when the scalar `value` (an f32 or i32 STATE an
 * earlier stage wrote) is in (lo, hi]: one of several copies of a stage built for widths (length
 * buckets), the one that holds the batch.
 * dfg_stage_runs: a repeated graph stage runs `count` times this step (a scalar STATE an earlier
 * stage wrote, clamped to 0 .. its repeat): of several copies of a loop built for widths, each
 * runs the chunks of the batch its width holds. The runs of such a stage are the same graph (a
 * device captures one and replays it); stages that end early or run a variable count may not
 * hold collectives (ranks could run them a different number of times). */
DFG_API dfg_status dfg_stage_until(dfg_program *p, const char *stage, dfg_tensor *flag);
DFG_API dfg_status dfg_stage_runs(dfg_program *p, const char *stage, dfg_tensor *count);
DFG_API dfg_status dfg_stage_when(dfg_program *p, const char *stage, dfg_tensor *value, double lo, double hi);
/* A loop of stages first .. last (in the order they were added): after `last` runs, while the
 * scalar `until` (an f32 or i32 STATE) reads 0 and fewer than max_loops returns were made this
 * step, the step goes back to `first` (a step that skips `last` does not loop); each stage in the loop keeps its own rules
 * (until, when, runs) on every pass. A multi-turn rollout: decode until every row has ended its
 * turn, a host stage answering the turns' tool calls, and again until every episode is over.
 * Memory is planned so that what lives across the loop's stages lives through the whole loop.
 * Loops neither nest nor overlap, and hold no collectives (ranks could loop a different number
 * of times). */
DFG_API dfg_status dfg_stage_loop(dfg_program *p, const char *first, const char *last, dfg_tensor *until, int max_loops);

/* ---------------------------------------------------------------- declarations
 * What a pipeline tells the tools that run its program (the dfg tool, or an application): stored
 * in the plan and rebuilt with it, so nothing is inferred from names or parsed from settings. */

/* Host state: when a runtime is created, dfg calls the pipeline's exported
 *     dfg_status init(dfg_program *p, void **user)
 * once, before any step: it reads and validates the settings it needs with the typed
 * dfg_setting_* calls (the same code the pipeline ran at compile time) and keeps them, typed, in
 * *user; every host stage reads that pointer with dfg_host_user(), and
 *     void release(void *user)
 * is called when the runtime is freed (release_symbol may be NULL). A failing init fails
 * dfg_runtime_create with its message. */
DFG_API dfg_status dfg_host_state(dfg_program *p, const char *init_symbol, const char *release_symbol);
/* `dfg run --rollouts FILE`: the stages that make a rollout (skipped when a file supplies one;
 * compiling checks that each exists) and the STATE tensors of the whole step that a rollout file
 * sets. */
DFG_API dfg_status dfg_declare_rollout(dfg_program *p, const char *const *stages, int n_stages,
                                       dfg_tensor *const *tensors, int n_tensors);
/* The rows of `tokens` (a rollout tensor, i32 (N, T)) come in groups of `group` rows that share
 * their first `prompt_len` columns: the program computes a group's prompt once, so a rollout
 * file whose groups disagree there is refused. */
DFG_API dfg_status dfg_declare_shared_prompts(dfg_program *p, dfg_tensor *tokens, int64_t prompt_len, int64_t group);
/* The first prompt_len columns of `tokens` (a rollout tensor, i32 (N, T)) are the prompt, left-
 * padded when the rollout has prompt_start: `dfg run --rollouts` checks a file's prompts (and
 * turns TRL's attention_mask into prompt_start) against this width, never a setting's name. */
DFG_API dfg_status dfg_declare_rollout_prompt(dfg_program *p, dfg_tensor *tokens, int64_t prompt_len);
/* The program's own rollout stages cannot run with its settings (say, a built-in task whose
 * prompts do not fit max_prompt_length): it trains only on rollout files (`dfg run --rollouts`).
 * `why` (one line) is what dfg compile prints as a note and dfg run without --rollouts refuses
 * with, before any step. Needs dfg_declare_rollout. */
DFG_API dfg_status dfg_declare_rollouts_only(dfg_program *p, const char *why);
/* `dfg run --dump FILE` writes the persistent tensor t (not a PARAM: every PARAM is written
 * anyway, under its own name) under `name`. */
DFG_API dfg_status dfg_declare_dump(dfg_program *p, const char *name, dfg_tensor *t);
DFG_API const char *dfg_program_rollouts_only(const dfg_program *p); /* the why, or NULL */
/* The program's kernels must be batch-invariant: every row of a forward matmul, attention or
 * log-prob computed in one order of its own, whatever the rows beside it, so a token's log-prob
 * while decoding (one row against the KV cache) and in a training forward are the same float.
 * The CPU backend has such kernels (slower than OpenBLAS's); the CUDA backend refuses the plan. */
DFG_API dfg_status dfg_declare_batch_invariant(dfg_program *p);
DFG_API bool dfg_program_batch_invariant(const dfg_program *p);

/* `dfg fit`: an integer setting that may take any of `values` (1 to DFG_MAX_FIT_VALUES of them).
 * keeps_math true: every value trains the same step, the same loss, gradients and updates up to
 * float rounding, and changes only how it is computed (micro-batches, sub-batches); list them
 * in the order they save memory and cost time (dfg fit assumes the arena does not grow along
 * the list, and checks the plan it picks). keeps_math false: a value changes what is trained
 * (batch size, lengths): dfg fit never changes it, but when nothing fits it names the first of
 * `values` (list them nearest the current value first) that would. The setting's own value
 * need not be in the list. Not stored in plans: dfg fit reads the program the pipeline builds. */
#define DFG_MAX_FIT_KNOBS 8
#define DFG_MAX_FIT_VALUES 32
typedef struct {
    const char *setting;
    int64_t values[DFG_MAX_FIT_VALUES];
    int n_values;
    bool keeps_math;
} dfg_fit_knob;
DFG_API dfg_status dfg_declare_fit_knob(dfg_program *p, const char *setting, const int64_t *values, int n_values,
                                        bool keeps_math);
DFG_API int dfg_program_fit_knob_count(const dfg_program *p);
DFG_API const dfg_fit_knob *dfg_program_fit_knob(const dfg_program *p, int i); /* NULL when out of range */

/* ---------------------------------------------------------------- graphs */
DFG_API dfg_graph *dfg_graph_new(dfg_program *p, const char *name);
DFG_API dfg_status dfg_graph_status(const dfg_graph *g);
DFG_API const char *dfg_graph_error(const dfg_graph *g);
DFG_API dfg_program *dfg_graph_program(const dfg_graph *g);

/* Host-written input of a graph's stage (tokens, targets, masks). */
DFG_API dfg_tensor *dfg_input(dfg_graph *g, const char *name, dfg_dtype dt, dfg_shape shape);
/* Keeps a tensor readable by name after the step (tests, debugging); returns t. */
DFG_API dfg_tensor *dfg_output(dfg_graph *g, dfg_tensor *t, const char *name);
/* Sets the debug name used in errors, reports and dumps; returns t. */
DFG_API dfg_tensor *dfg_name(dfg_tensor *t, const char *name);

/* ---------------------------------------------------------------- tensor queries */
DFG_API const char *dfg_tensor_name(const dfg_tensor *t);
DFG_API dfg_shape dfg_tensor_shape(const dfg_tensor *t);
DFG_API dfg_dtype dfg_tensor_dtype(const dfg_tensor *t);
DFG_API dfg_kind dfg_tensor_kind(const dfg_tensor *t);
DFG_API int64_t dfg_tensor_numel(const dfg_tensor *t);
DFG_API size_t dfg_tensor_bytes(const dfg_tensor *t);

/* ---------------------------------------------------------------- pipelines
 * A pipeline is a C file that `dfg compile PIPELINE.c` builds into a shared object and loads.
 * It defines the entry point
 *
 *     dfg_status dfg_pipeline(dfg_program *p);
 *
 * which reads its settings (dfg_setting_*; the setting "target" holds "cpu" or "cuda" before
 * the call), creates tensors, graphs and stages on p, and returns DFG_OK or an error (details
 * go to the program's sticky error, e.g. through dfg_program_fail). Host-stage functions
 * (`dfg_status fn(dfg_host_ctx *ctx)`, see dfg_runtime.h) are exported from the same file; the
 * plan embeds the shared object so that `dfg run` finds them. See examples/gpt2_train.c. */
DFG_API dfg_status dfg_pipeline(dfg_program *p); /* declared so that a pipeline's definition is type-checked */
typedef dfg_status (*dfg_pipeline_fn)(dfg_program *p);
#define DFG_PIPELINE_SYMBOL "dfg_pipeline"

#ifdef __cplusplus
}
#endif
#endif
