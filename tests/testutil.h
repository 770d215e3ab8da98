/* testutil.h - assertions, fresh random inputs, a temporary directory and a one-program
 * fixture for dfg's C tests.
 *
 * Checks record a failure and go on, so one run reports everything that is wrong; main returns
 * dfg_test_finish(). Random inputs come from a seed that differs run to run unless
 * DFG_TEST_SEED is set; the seed is printed so any failure can be replayed. */
#ifndef DFG_TESTUTIL_H
#define DFG_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dfg.h"
#include "dfg_runtime.h"

#define DFG_TEST_SKIP 77 /* exit code ctest reports as "skipped" */

extern int dfg_test_failures;

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                               \
            dfg_test_failures++;                                                 \
        }                                                                        \
    } while (0)

/* Seeds the generator (from DFG_TEST_SEED or the clock) and prints the seed. */
uint64_t dfg_test_init(const char *test_name);
/* Prints a summary and returns the process exit code. */
int dfg_test_finish(void);

uint64_t dfg_test_u64(void);
float dfg_test_uniform(float lo, float hi);  /* uniform in [lo, hi) */
float dfg_test_normal(void);                 /* standard normal */
int dfg_test_int(int lo, int hi);            /* uniform in [lo, hi] */
void dfg_test_fill_uniform(float *x, int64_t n, float lo, float hi);
void dfg_test_fill_normal(float *x, int64_t n, float std);
/* A float bit pattern that no kernel produces, written over outputs before a run so that an
 * element a kernel forgot to write cannot look right. */
void dfg_test_poison(void *x, size_t bytes);

/* max |a - b| / max(max |b|, floor) over n elements (NaN when a difference is NaN); _ref: against a
 * reference in double */
double dfg_test_max_rel_err(const float *a, const float *b, int64_t n, double floor);
double dfg_test_max_rel_err_ref(const float *a, const double *ref, int64_t n, double floor);

/* torch.quantile(x[m != 0], q) from its definition, written apart from ops/quantile.h: the selected
 * values sorted in the floats' total order (-0.0 before +0.0, NaNs at the ends by sign), rank
 * q (k - 1), torch's lerp in double (at an integral rank the element itself); +inf when nothing
 * is selected */
float dfg_test_quantile(const float *x, const float *m, int64_t n, float q);

/* ---------------------------------------------------------------- temporary files */
/* Creates a fresh directory /tmp/<prefix>_XXXXXX for the test's files; false (after saying so
 * on stderr) when it cannot. dfg_test_tmpdir() is its path, dfg_test_tmp_path() a file in it
 * (the last 4 results stay valid), and dfg_test_tmpdir_remove() removes it once it is empty. */
bool dfg_test_tmpdir_create(const char *prefix);
const char *dfg_test_tmpdir(void);
char *dfg_test_tmp_path(const char *name);
void dfg_test_tmpdir_remove(void);
/* Writes n bytes to path (a new file); a failure is a CHECK. */
void dfg_test_write_file(const char *path, const void *data, size_t n);

/* Writes each of the n parameters uniform values in [-0.5, 0.5), plus 1 in the rank-1 ones (norm
 * gains near 1): not the init's ones and zeros, so that every norm gain and bias counts. */
void dfg_test_write_random_params(dfg_runtime *rt, dfg_tensor *const *params, int n);

/* ---------------------------------------------------------------- a decode loop's state
 * The persistent tensors of a graph that decodes B sequences one token a run: pos (i32 scalar,
 * 0), the KV caches kc and vc (B, tmax, ckv), whose rows not yet written hold 50 (which would
 * swamp any score that read them), and out (B, T, C), the outputs. dfg_test_kv_store adds to g:
 * y (B, 1, C) into row pos of out, and pos advanced by one. */
typedef struct {
    dfg_tensor *pos, *kc, *vc, *out;
} dfg_test_kv;
dfg_test_kv dfg_test_kv_state(dfg_program *p, int64_t B, int64_t T, int64_t tmax, int64_t C, int64_t ckv);
void dfg_test_kv_store(dfg_graph *g, const dfg_test_kv *kv, dfg_tensor *y);

/* ---------------------------------------------------------------- small random models
 * dfg_test_model_config: a 2-layer config of arch (n_embd 16, vocabulary V, block positions):
 * GPT-2's 2 heads, or random KV heads (1-2), query heads per KV head (1-3), head dims (4-12, so
 * that n_head * head_dim need not be n_embd), MLP width, rope theta, tied embeddings and attention
 * bias. dfg_test_model_program: a new program `name` with the parameters of a model of cfg (*m,
 * allocated), its KV caches for N sequences of T (*kv) and the token table "tok" (N, T) i32, which
 * it returns. */
dfg_model_config dfg_test_model_config(dfg_arch arch, int V, int block);
dfg_tensor *dfg_test_model_program(const char *name, dfg_model_config cfg, int N, int T, dfg_program **p,
                                   dfg_model **m, dfg_model_kv *kv);

/* ---------------------------------------------------------------- the GPT-2 pipeline module
 * gpt2_train_pipeline.so, built beside the test executables (tests/cli/CMakeLists.txt), or the
 * file $DFG_GPT2_PIPELINE names: dlopened, NULL after a failed CHECK. dfg_test_gpt2_program makes
 * a new program "gpt2_train" for the CPU, applies the settings (name, value, ..., NULL; NULL: none)
 * and runs the module's dfg_pipeline on it; *st is its status (the caller checks it). */
void *dfg_test_gpt2_pipeline(void);
dfg_program *dfg_test_gpt2_program(void *lib, const char *const *settings, dfg_status *st);

/* ---------------------------------------------------------------- fixture: one program, one graph
 * A program with one graph g (named "g") and the CPU runtime made from it:
 *
 *     dfg_fx f;
 *     dfg_fx_begin(&f, "name");
 *     ... build f.g (and persistent tensors of f.p) ...
 *     if (dfg_fx_run(&f)) { dfg_fx_read(&f, "y", y, sizeof(y)); ... }
 *     dfg_fx_end(&f);
 *
 * Every failure is reported as a CHECK with the builder's or the runtime's message (build,
 * create, step, read 'name', write 'name'); the bool results say whether to go on. */
typedef struct {
    dfg_program *p;
    dfg_graph *g;
    dfg_runtime *rt; /* NULL until created */
} dfg_fx;

void dfg_fx_begin(dfg_fx *f, const char *name);
/* Checks the program built, stages f->g `repeat` times (repeat <= 0: the caller staged the
 * stages itself) and creates a runtime with 2 threads seeded from dfg_test_u64(), or `seed`. */
bool dfg_fx_create(dfg_fx *f, int repeat);
bool dfg_fx_create_seeded(dfg_fx *f, int repeat, uint64_t seed);
bool dfg_fx_step(dfg_fx *f);
bool dfg_fx_run(dfg_fx *f); /* dfg_fx_create(f, 1) and one dfg_fx_step */
void dfg_fx_read(dfg_fx *f, const char *name, void *dst, size_t bytes);
void dfg_fx_write(dfg_fx *f, const char *name, const void *src, size_t bytes);
void dfg_fx_end(dfg_fx *f); /* frees the runtime and the program */
/* A CONST f32 tensor of f->p holding a copy of data. */
dfg_tensor *dfg_fx_const_f32(dfg_fx *f, const char *name, dfg_shape s, const float *data);

#endif
