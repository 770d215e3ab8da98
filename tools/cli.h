/* cli.h - the dfg command-line tool's commands and the small helpers they share. */
#ifndef DFG_CLI_H
#define DFG_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "../runtime/dfg_runtime.h"
#include "../runtime/formats/dfg_formats.h"
#include "../runtime/formats/planfile.h"
#include "../runtime/formats/safetensors.h"
#include "../runtime/host/dfg_env.h"
#include "../runtime/host/dfg_reward.h"
#include "../runtime/weights/dfg_weights.h"
#include "dot/dfg_dot.h"

/* Exit codes: what a script can rely on. CLI_NO_FIT: dfg fit found no plan within the budget. */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2, CLI_NO_FIT = 3 };

/* Each command takes its own arguments (argv[0] is the command name) and returns an exit code. */
int cli_compile(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_dot(int argc, char **argv);
int cli_plot(int argc, char **argv);
/* The Graphviz module's functions (tools/dot, libdfg-dot.so), opened on first use; NULL after
 * printing why it cannot be (cli_dot.c). */
const dfg_dot_api *cli_dot_module(const char *cmd);
int cli_fit(int argc, char **argv);
/* What dfg fit ranks by (cli_fit_cost.c's cli_fit_step_cost_on, cli_device.h): a step's FLOPs
 * without recompute, remat's extra FLOPs, and its estimated seconds on a device, each stage at its
 * runs and, of the variants gated on one value (dfg_stage_when), one interval's: the dearest. */
typedef struct {
    double flops, extra_flops, seconds;
} cli_step_cost;

/* "dfg <cmd>: <message>" on stderr; returns code. */
int cli_error(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* printf for what a command reports on stdout as it goes; nothing when cli_quiet (dfg run
 * --quiet). Errors and warnings go to stderr whatever it says. */
extern bool cli_quiet;
void cli_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Options. A command walks argv with cli_next: each call classifies argv[*i] and advances *i.
 * Long options take their value as "--name=value" or as the next argument. */
typedef struct {
    const char *name;  /* "--steps", "-o" */
    bool has_value;
} cli_option;

typedef struct {
    const char *cmd;           /* for messages */
    const cli_option *options; /* terminated by {NULL} */
    int argc;
    char **argv;
    int i;          /* next argument */
    bool only_positional; /* after "--" */
} cli_args;

typedef enum { CLI_ARG_END, CLI_ARG_OPTION, CLI_ARG_POSITIONAL, CLI_ARG_ERROR } cli_arg_kind;

/* Returns the next argument's kind; for an option *opt is its name as in the table and *value
 * its value (NULL when it takes none); for a positional *value is the argument. On an unknown
 * option or a missing value it prints the error (naming the valid options) and returns
 * CLI_ARG_ERROR. */
cli_arg_kind cli_next(cli_args *a, const char **opt, const char **value);
/* Strict integer in [lo, hi]; prints "dfg <cmd>: <what> must be ..." and returns false otherwise. */
bool cli_parse_i64(const char *cmd, const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out);

/* This process's resident memory (Linux /proc/self/status): VmRSS now and VmHWM, its peak since
 * the start or since cli_rss_reset_peak. false where the system does not say. */
bool cli_rss(size_t *now, size_t *peak);
void cli_rss_reset_peak(void);

/* A fresh private directory under $TMPDIR (or /tmp); false with a message on failure. */
bool cli_make_tempdir(const char *cmd, char *dir, size_t len);
/* Removes dir/name (when name is not NULL) and then dir. */
void cli_remove_temp(const char *dir, const char *name);
/* Reads a whole regular file into a malloc'd buffer (NUL-terminated after n bytes); false with a
 * message on failure. */
bool cli_read_file(const char *cmd, const char *path, void **out, size_t *n);
/* Writes bytes to path atomically, with dfg's one file mode (runtime/formats/fileio.h); false with
 * a message on failure. */
bool cli_write_file(const char *cmd, const char *path, const void *data, size_t n);

/* Loads a plan and compiles it with the target and options it records, as dfg run does before
 * running. Returns an exit code (2: the file cannot be read or its program does not compile;
 * 1: out of memory) after printing the message; on success free *p and *info. */
int cli_load_plan(const char *cmd, const char *path, dfg_program **p, dfg_plan_info *info);
/* The compiling half of cli_load_plan, for a program already rebuilt from plan bytes; label
 * names it in messages ("label: remat: the memory budget of ... does not fit; ..."). */
int cli_compile_plan(const char *cmd, const char *label, dfg_program **p, dfg_plan_info *info);
/* "arena 14.5 MiB, lower bound 12.0 MiB (x1.21), naive 40.3 MiB (planning saves 64%)" */
char *cli_memory_summary(const dfg_report *r, char *buf, size_t len);
/* The fuse pass's rewrites by kind, in dfg_report.fused's order (also the JSON keys). */
extern const char *const cli_fused_kinds[3];
/* "2 linear_logprob, 24 bias_gelu" or "none" */
char *cli_fused_str(const dfg_report *r, char *buf, size_t len);
/* "124 M parameters", or for a LoRA plan "1.09 M trained parameters (LoRA adapters) on a 494 M base" */
char *cli_params_str(const dfg_program *p, char *buf, size_t len);
/* "67 nodes, +3.8% flops (5.77e10)"; "none" under a budget met without recompute; "no budget" */
char *cli_remat_str(const dfg_report *r, int64_t budget, char *buf, size_t len);

/* ---------------------------------------------------------------- building pipelines
 * tools/cli_pipeline.c: what dfg compile and dfg fit share. */
/* The pipeline's notes (dfg_program_note) and, for a plan that trains only on rollout files,
 * why: one "note: ..." line each, on stdout. */
void cli_print_notes(const dfg_program *p);
typedef struct {
    const char *cmd;                /* "compile", "fit": for messages */
    const char *pipeline;           /* PIPELINE.c */
    const char *target_name;        /* "cpu" or "cuda": the setting 'target' */
    const char *const *sets;        /* "key=value": the user's --set values, each checked for use */
    int n_sets;
    const char *const *extra;       /* "key=value" dfg fit adds (settings the pipeline declared) */
    int n_extra;
} cli_pipeline;
/* "examples/gpt2_train.c" -> "gpt2_train" */
void cli_stem_of(const char *path, char *out, size_t len);
/* "The compiler is cc (override with $DFG_CC); headers come from ...": for usage texts. */
void cli_pipeline_usage_note(FILE *f);
/* Edit distance of two short strings (64 characters or longer count as far apart): the nearest
 * known name in a refusal. */
int cli_edit_distance(const char *a, const char *b);
/* The arguments dfg compile and dfg fit share: the pipeline, --set (repeatable), --target,
 * --memory-budget, --no-fuse, -o/--output. */
#define CLI_MAX_SETS 256
typedef struct {
    const char *pipeline, *output, *target_name;
    dfg_target target;
    const char *sets[CLI_MAX_SETS]; /* "key=value" as given */
    int n_sets;
    int64_t memory_budget;          /* 0: none */
    bool no_fuse;
} cli_build_args;
void cli_build_args_init(cli_build_args *b);
/* Takes one argument (cli_next's kind, option and value) when it is one of those: *taken says
 * whether it was. Returns an exit code (CLI_USAGE after printing why the value is wrong). */
int cli_build_option(const char *cmd, cli_arg_kind k, const char *opt, const char *val, cli_build_args *b, bool *taken);
/* The plan's path: -o, or PIPELINE's stem + ".dfg" in the current directory. */
void cli_build_output(const cli_build_args *b, char *out, size_t len);
/* Builds c->pipeline into the shared object so_path with the C compiler (its diagnostics go to
 * stderr); then loads it and finds its entry point. Each returns an exit code. */
int cli_pipeline_compile_so(const cli_pipeline *c, const char *so_path);
int cli_pipeline_load(const cli_pipeline *c, const char *so, void **lib, dfg_pipeline_fn *fn);
/* Runs the entry point on a fresh program with the settings; a --set key the pipeline did not
 * read, or a host stage the library does not export, is refused. *host: the program has host
 * stages (the plan must carry the shared object). */
int cli_pipeline_build(const cli_pipeline *c, void *lib, dfg_pipeline_fn fn, dfg_program **out, bool *host);
/* Writes the plan of p with the compile options of opts (target, align, no_reuse, keep_order,
 * no_fuse, memory_budget, memory_min), embedding the shared object so when not NULL, after
 * compiling it as dfg run will; prints what was written and its memory plan. */
int cli_pipeline_save(const cli_pipeline *c, const dfg_program *p, const char *so, const dfg_plan_info *opts,
                      const char *out);

/* ---------------------------------------------------------------- dfg run's parts
 * tools/cli_run.c drives a run; cli_run_ckpt.c saves and resumes checkpoints and writes
 * safetensors from runtime tensors; cli_run_rollouts.c loads fixed rollouts and writes dumps;
 * cli_run_progress.c draws the progress line. */

/* Reads the named runtime tensors (file name i holds tensors[i]) and writes them with
 * dfg_st_write, atomically, with the metadata pairs meta_kv. Returns an exit code; the message
 * goes to err (one line) when err is given, else it is printed. */
int cli_st_save(dfg_runtime *rt, const char *path, const char *const *file_names, const dfg_tensor *const *tensors,
                int n, const char *const *meta_kv, int n_meta, char *err, size_t err_len);

/* The checkpoint of a run: every PARAM and STATE of the program in D/checkpoint.safetensors,
 * with the steps done and the seed in its metadata (dfg.step, dfg.seed). */
#define CLI_CKPT_FILE "checkpoint.safetensors"
/* Creates dir when missing and locks it for this process (another run using it is refused;
 * the lock goes with the process, kill -9 included), then removes partial checkpoint files a
 * killed writer left (dfg_st_write's ".checkpoint.safetensors.XXXXXX"). Unless resuming, a
 * directory that already holds a checkpoint is refused. *lock_fd: close it to unlock. Returns an
 * exit code. */
int cli_ckpt_prepare(const char *dir, bool resuming, int *lock_fd);
/* The frozen base a LoRA run's adapters train on: the digest of its weights as loaded
 * (dfg_weights_base_digest; "" for a plan without one) and where they came from (--weights),
 * recorded in every checkpoint so that a resume on another base is refused. */
typedef struct {
    char digest[40];
    const char *from;
} cli_base;
/* Writes the checkpoint (path gets its file name). A failure (a full disk, say) leaves the
 * previous checkpoint whole (dfg_st_write replaces it only by a rename) and returns an exit code
 * with the reason in err, printing nothing: the caller says what survived. */
int cli_ckpt_save(dfg_runtime *rt, const char *dir, const char *file, uint64_t seed, const cli_base *base, char *path,
                  size_t path_len, char *err, size_t err_len); /* file: NULL for CLI_CKPT_FILE */
/* Opens what --resume names (a checkpoint directory, or a checkpoint file) and reads its
 * metadata: *step (required) and *seed (*has_seed false when absent). */
int cli_ckpt_open(const char *resume, dfg_safetensors **st, char *path, size_t path_len, int64_t *step,
                  uint64_t *seed, bool *has_seed);
/* Loads every PARAM and STATE from st (each must be there with the program's dtype and shape,
 * and nothing else) and sets the step counter. */
int cli_ckpt_restore(dfg_runtime *rt, const dfg_safetensors *st, const char *path, int64_t step);

/* The last good state (cli_run_ckpt.c): keep before every step; after a step that failed with
 * DFG_ERR_NUMERIC (non-finite gradients, caught before any update), restore puts back the
 * optimizer's step counters and zeroes the gradient buffers, leaving the state of the last
 * good step for the checkpoint. Each returns an exit code. */
typedef struct cli_guard cli_guard;
int cli_guard_create(dfg_runtime *rt, cli_guard **out);
int cli_guard_keep(cli_guard *g);
int cli_guard_restore(cli_guard *g);
void cli_guard_free(cli_guard *g);

/* The live progress line (cli_run_progress.c): drawn on stderr when it is a terminal and the
 * run is not --quiet; cleared before other output. */
typedef struct {
    dfg_runtime *rt;
    int64_t first, total; /* the steps done before this run, and this run's steps */
    bool on, drawn;
    double last_draw;     /* elapsed seconds at the last draw; < 0: none yet */
    int metric[3], n_metrics;
} cli_progress;
void cli_progress_init(cli_progress *pr, dfg_runtime *rt, int64_t first, int64_t total, bool quiet);
void cli_progress_update(cli_progress *pr, int64_t step, double elapsed, double tok_s, bool force);
void cli_progress_clear(cli_progress *pr);

/* Fixed rollouts (--rollouts R): load reads the tensors the pipeline declared (dfg_declare_rollout)
 * and checks them against the plan (before a runtime exists, so bad input fails first); apply
 * switches off the declared stages; write fills the tensors before a step. */
typedef struct cli_rollouts cli_rollouts;
int cli_rollouts_load(const dfg_program *p, const char *plan, const char *path, cli_rollouts **out);
int cli_rollouts_apply(dfg_runtime *rt, const cli_rollouts *r);
int cli_rollouts_write(dfg_runtime *rt, const cli_rollouts *r);
void cli_rollouts_free(cli_rollouts *r);
/* --dump OUT: the pipeline's dfg_declare_dump entries and every PARAM. check: before the run, so
 * that a plan with nothing to dump fails before any step; write: after the last step. */
int cli_dump_check(const dfg_program *p, const char *plan);
int cli_dump_write(dfg_runtime *rt, const char *path, const char *const *meta_kv, int n_meta);

#endif
