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

/* max |a - b| / max(max |b|, floor) over n elements */
double dfg_test_max_rel_err(const float *a, const float *b, int64_t n, double floor);

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
