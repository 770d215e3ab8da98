/* test_cuda_table.c - the cuda column of ops/ops.def is true: every op that names a CUDA launcher
 * has one in the emulated build (and in the nvcc build when there is one), every op without one
 * is in the deliberate list below (empty: every op has its kernel), and every op's kernel was
 * compared with the CPU by a test_cuda_<family> test that passed (they write the ops they
 * compared to DFG_CUDA_COVERAGE_DIR; ctest runs them first, as this test's fixture). */
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"
#include "ops/cuda/cuda.h"

/* Ops that deliberately have no CUDA kernel (their cuda column says none). */
static const char *const no_kernel[] = {NULL};

static bool deliberate(const char *name) {
    for (int i = 0; no_kernel[i]; i++)
        if (!strcmp(no_kernel[i], name)) return true;
    return false;
}

/* Whether some test_cuda_* coverage file in dir lists op `name`. */
static bool compared(const char *dir, const char *name) {
    static const char *const tests[] = {"test_cuda_elementwise", "test_cuda_layout", "test_cuda_reduce",
                                        "test_cuda_norm",        "test_cuda_state",  "test_cuda_index",
                                        "test_cuda_logprob",     "test_cuda_sample", "test_cuda_attention",
                                        "test_cuda_matmul",      "test_cuda_rope",   "test_cuda_entropy",
                                        "test_cuda_collective",  "test_cuda_nf4",    "test_cuda_attention_shared",
                                        NULL};
    char path[1024], line[128];
    for (int t = 0; tests[t]; t++) {
        snprintf(path, sizeof(path), "%s/%s.txt", dir, tests[t]);
        FILE *f = fopen(path, "r");
        bool found = false;
        while (f && !found && fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = '\0';
            found = !strcmp(line, name);
        }
        if (f) fclose(f);
        if (found) return true;
    }
    return false;
}

int main(void) {
    if (!cuda_test_begin("test_cuda_table")) return DFG_TEST_SKIP;
    const char *dir = getenv("DFG_CUDA_COVERAGE_DIR");
    int with = 0, checked = 0;
    for (int op = 0; op < DFG_OP_COUNT; op++) {
        const char *name = dfg_ops[op].name;
        if (!dfg_ops[op].has_cuda) {
            CHECK(deliberate(name), "op '%s' has no CUDA kernel (cuda column none) and is not in the deliberate list", name);
            continue;
        }
        CHECK(!deliberate(name), "op '%s' is in the no-kernel list but its cuda column names a launcher", name);
        CHECK(dfg_emu_kernels[op] != NULL, "op '%s': ops.def names a CUDA launcher the emulated build does not have", name);
#ifdef DFG_HAVE_CUDA
        CHECK(dfg_cuda_kernels[op] != NULL, "op '%s': ops.def names a CUDA launcher the nvcc build does not have", name);
#endif
        with++;
        if (dir && *dir) {
            CHECK(compared(dir, name), "op '%s': no test_cuda_* test compared its CUDA kernel with the CPU (and passed)",
                  name);
            checked++;
        }
    }
    printf("test_cuda_table: %d of %d ops have CUDA kernels; %d compared with the CPU by the family tests%s\n", with,
           DFG_OP_COUNT, checked, dir && *dir ? "" : " (coverage not checked: DFG_CUDA_COVERAGE_DIR unset)");
    return dfg_test_finish();
}
