/* testutil.h - assertions and fresh random inputs for dfg's C tests.
 *
 * Checks record a failure and go on, so one run reports everything that is wrong; main returns
 * dfg_test_finish(). Random inputs come from a seed that differs run to run unless
 * DFG_TEST_SEED is set; the seed is printed so any failure can be replayed. */
#ifndef DFG_TESTUTIL_H
#define DFG_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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

#endif
