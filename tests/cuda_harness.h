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
/* Runs the case; failures are CHECKs (the test's exit code). Returns true when it passed. */
bool cuda_check(const cuda_case *c);

/* Generators for cuda_case.fill's common needs: floats uniform in [lo, hi) through user ->
 * (float[2]){lo, hi}; positive floats for log/sqrt. */
void cuda_fill_range(int slot, const dfg_tensor *t, void *data, int64_t n, void *user);
/* The summary line a test prints at the end: cases run, and whether the GPU half ran. */
void cuda_report(const char *test);

#endif
