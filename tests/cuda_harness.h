/* cuda_harness.h - checks one op's CUDA kernel against its CPU kernel (tests/test_cuda_*.c).
 *
 * A case builds one node with the public builders, twice: in f32 (the CPU kernel's reference,
 * and the CUDA kernel in f32) and in bf16 (the CUDA kernel in bf16, when the case allows it). The
 * harness gives every input its own allocation of exactly its bytes (so ASan catches an
 * out-of-bounds access), fills it with fresh random values from the case's generator (never
 * zeros), poisons every output (NaN bytes), runs the CPU kernel once and the emulated CUDA kernel
 * under several schedule seeds of the SIMT emulator, and requires:
 *   - every seed's outputs bit-identical to seed 0's (a missing barrier or a race shows here);
 *   - each output within the tolerances of the CPU's (f32: rtol 1e-5; bf16: 1e-2, by default),
 *     integer outputs equal;
 *   - no launch error (divergent barrier, bad shuffle mask, launch limits: the emulator's message).
 * bf16 inputs are the f32 inputs rounded to bf16, and the CPU reference runs on those rounded
 * values, so the comparison measures the kernel's arithmetic and its output rounding only.
 * With a GPU (a build with nvcc and a device), the nvcc-built kernel runs on the same inputs and
 * is held to the same tolerances; without one that part reports "skipped". */
#ifndef DFG_CUDA_HARNESS_H
#define DFG_CUDA_HARNESS_H

#include "graph/ir.h"
#include "ops/op.h"
#include "testutil.h"

/* Fills input `slot` (n elements of an f32 or i32 tensor as the f32 build has it) for case data. */
typedef void (*cuda_fill_fn)(int slot, const dfg_tensor *t, void *data, int64_t n, void *user);

typedef struct {
    const char *label;
    /* Builds the node under test in g with float tensors of dtype dt; returns it (NULL: the
     * builder failed, which fails the check). */
    dfg_node *(*build)(dfg_graph *g, dfg_dtype dt, void *user);
    void *user;
    cuda_fill_fn fill;    /* NULL: floats uniform in [-2, 2), i32 uniform in [0, 8) */
    bool bf16;            /* also run in bf16 */
    double rtol, atol;    /* f32 tolerances; 0: 1e-5 and 1e-6 */
    double rtol_bf16, atol_bf16; /* 0: 1e-2 and 1e-2 */
    int seeds;            /* schedule seeds besides in-order; 0: 3 */
    /* Outputs (bit k) the comparison skips: e.g. a workspace whose contents are not a result. */
    unsigned skip_outputs;
} cuda_case;

/* False when this build has no SIMT emulator (no CUDA headers): the test then exits
 * DFG_TEST_SKIP, which ctest reports as skipped. */
bool cuda_emulator_built(void);
/* The start of a test_cuda_* main: dfg_test_init(test); false, having said "skipped", when this
 * build has no SIMT emulator (main then returns DFG_TEST_SKIP). */
bool cuda_test_begin(const char *test);
/* The end of a family test's main: cuda_report(test) and dfg_test_finish()'s exit code. */
int cuda_test_end(void);
/* Runs the case; failures are CHECKs (the test's exit code). Returns true when it passed. */
bool cuda_check(const cuda_case *c);

/* The default fill of a float input (uniform in [-2, 2)), true; false for other dtypes, which the
 * caller's fill then fills. */
bool cuda_fill_floats(const dfg_tensor *t, void *data, int64_t n);
/* Generators for cuda_case.fill's common needs: floats uniform in [lo, hi) through user ->
 * (float[2]){lo, hi}; positive floats for log/sqrt. */
void cuda_fill_range(int slot, const dfg_tensor *t, void *data, int64_t n, void *user);
/* The shape of one value a row: s less its last axis. */
dfg_shape cuda_rows_shape(dfg_shape s);
/* The summary line a test prints at the end: cases run, and whether the GPU half ran. */
void cuda_report(const char *test);

/* ---------------------------------------------------------------- direct runs
 * For the checks that lay out a node's buffers themselves (outputs over inputs, misaligned
 * pointers, bad values): the node alone, and one run of either kernel on given buffers. */
typedef dfg_node *(*cuda_build_fn)(dfg_graph *g, dfg_dtype dt, void *user);
/* The node build(g, dt, user) makes, alone in a new program *p (free it with dfg_program_free); NULL
 * after a failed CHECK naming label (*p freed). */
dfg_node *cuda_node_alone(cuda_build_fn build, void *user, dfg_dtype dt, const char *label, dfg_program **p);
/* n's CPU kernel on in/out: one thread, the scratch it asks for. A failure is a CHECK naming label. */
bool cuda_run_cpu(const char *label, const dfg_node *n, void *const *in, void *const *out);
/* n's emulated CUDA kernel on in/out: sm_count SMs (0: 132), GEMMs interpreted, the scratch it asks
 * for (poisoned), under schedule seed `seed` (0: in order). A launch failure is a CHECK naming
 * label. Returns the device flags the kernel raised, -1 when the launch failed. */
int cuda_run_emulated(const char *label, const dfg_node *n, void *const *in, void *const *out, int sm_count,
                      uint64_t seed);

#endif
