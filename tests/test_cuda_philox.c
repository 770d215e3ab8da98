/* test_cuda_philox.c - the GPU's Philox stream equals the CPU's bit for bit (the contract that
 * lets CPU and GPU sample the same tokens). Skipped (exit 77) without CUDA or without a GPU. */
#include "testutil.h"

#ifndef DFG_HAVE_CUDA
int main(void) {
    printf("test_cuda_philox: skipped (built without CUDA)\n");
    return DFG_TEST_SKIP;
}
#else
#include <cuda_runtime.h>
#include <stdlib.h>

#include "ops/cuda/philox_cuda.h"
#include "ops/philox.h"

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_cuda_philox: skipped (no CUDA device)\n");
        return DFG_TEST_SKIP;
    }
    dfg_test_init("test_cuda_philox");
    const int64_t n = 1 << 16;
    uint32_t k0 = (uint32_t)dfg_test_u64(), k1 = (uint32_t)dfg_test_u64();
    uint64_t ctr = dfg_test_u64(), stream = dfg_test_u64();
    uint32_t *dev = NULL, *host = malloc(sizeof(uint32_t) * 4 * (size_t)n);
    CHECK(host != NULL, "malloc");
    CHECK(cudaMalloc((void **)&dev, sizeof(uint32_t) * 4 * (size_t)n) == cudaSuccess, "cudaMalloc");
    if (!host || !dev) return dfg_test_finish();
    dfg_test_poison(host, sizeof(uint32_t) * 4 * (size_t)n);
    CHECK(cudaMemset(dev, 0xAB, sizeof(uint32_t) * 4 * (size_t)n) == cudaSuccess, "memset");
    CHECK(dfg_cuda_philox_stream(dev, n, ctr, stream, k0, k1, NULL) == 0, "launch");
    CHECK(cudaMemcpy(host, dev, sizeof(uint32_t) * 4 * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        dfg_philox_ctr c = dfg_philox_row_ctr(ctr + (uint64_t)i, 0);
        c.v[2] = (uint32_t)stream, c.v[3] = (uint32_t)(stream >> 32);
        dfg_philox_ctr r = dfg_philox4x32(c, k0, k1);
        for (int j = 0; j < 4; j++) bad += host[4 * i + j] != r.v[j];
    }
    CHECK(bad == 0, "%lld of %lld words differ between GPU and CPU", (long long)bad, (long long)(4 * n));
    cudaFree(dev);
    free(host);
    return dfg_test_finish();
}
#endif
