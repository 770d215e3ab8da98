// test_simt_asan.cpp - an out-of-bounds global access in an emulated kernel is caught by
// AddressSanitizer: this program is always built with -fsanitize=address (with its own ASan
// build of the emulator). `test_simt_asan off_by_one` runs a tail loop that reads and writes one
// element past buffers allocated separately with exactly n floats; ctest expects ASan's
// heap-buffer-overflow report naming the kernel. `test_simt_asan correct` runs the right bound
// and must finish clean, so the report cannot come from the emulator itself.
#include "dfg_simt.h"

#include <vector>

#include "simt_test.h"

int main(int argc, char **argv) {
    const bool bug = argc > 1 && strcmp(argv[1], "off_by_one") == 0;
    const int n = 1000;
    // separate heap blocks of exactly n floats: ASan's redzones sit right after the last element
    float *x = (float *)malloc(n * sizeof(float));
    float *y = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) x[i] = (float)i;
    dfg_simt_set_seed(1);
    printf("launching the %s tail copy\n", bug ? "off-by-one" : "correct");
    fflush(stdout);
    const cudaError_t err = dfg_simt_test_tail_copy(x, y, n, bug);
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += y[i] != x[i];
    printf("launch status %d, %d wrong\n", (int)err, wrong);
    free(x);
    free(y);
    return err == cudaSuccess && wrong == 0 ? 0 : 1;
}
