// test_simt_planted.cpp - the planted race: reduce_kernels.cu built with DFG_TEST_PLANT_MISSING_SYNC,
// which drops the __syncthreads inside the tree reduction's loop. The kernel still runs without
// a reported error (it is a race, not a divergence); the schedule must expose it: under every
// seed tried, some block's sum differs from the reference. The correct build of the same kernel
// passes test_simt's tree_reduce under the same seeds.
#include "dfg_simt.h"

#include <cmath>
#include <vector>

#include "simt_test.h"

#ifndef DFG_TEST_PLANT_MISSING_SYNC
#error "build this test with reduce_kernels.cu compiled with DFG_TEST_PLANT_MISSING_SYNC"
#endif

static int detect(bool dynamic) {
    const int n = 16 * 256, threads = 256, blocks = n / threads;
    std::vector<float> x(n);
    for (float &v : x) {
        v = dfg_simt_test_uniform(-1.0f, 1.0f);
        if (v == 0.0f) v = 0.5f;
    }
    std::vector<double> ref(blocks, 0.0), mag(blocks, 0.0);
    for (int i = 0; i < n; i++) {
        ref[i / threads] += x[i];
        mag[i / threads] += fabs(x[i]);
    }
    int detected = 0;
    const uint64_t seeds[] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (uint64_t seed : seeds) {
        dfg_simt_set_seed(seed);
        std::vector<float> out(blocks);
        dfg_simt_test_poison(out.data(), out.size() * sizeof(float));
        const cudaError_t err = dynamic ? dfg_simt_test_tree_reduce_dyn(x.data(), out.data(), n, threads)
                                        : dfg_simt_test_tree_reduce(x.data(), out.data(), n);
        SIMT_CHECK(err == cudaSuccess, "the race is not an error the emulator reports: %s", dfg_simt_last_message());
        int wrong = 0;
        for (int b = 0; b < blocks; b++) wrong += !(fabs(out[b] - ref[b]) <= 1e-5 * mag[b] + 1e-6);
        printf("%s tree reduction without its loop barrier, seed %llu: %d of %d block sums wrong\n",
               dynamic ? "dynamic-smem" : "static-smem", (unsigned long long)seed, wrong, blocks);
        detected += wrong > 0;
    }
    return detected;
}

int main() {
    dfg_simt_test_init("planted_missing_sync");
    for (bool dynamic : {false, true}) {
        const int d = detect(dynamic);
        SIMT_CHECK(d == 8, "the missing __syncthreads was exposed under %d of 8 seeds only", d);
    }
    return dfg_simt_test_failures ? 1 : 0;
}
