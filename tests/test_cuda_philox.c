/* test_cuda_philox.c - the CUDA Philox stream equals the CPU's bit for bit (the contract that lets
 * CPU and GPU sample the same tokens): the kernel's source run by the SIMT emulator always, and
 * the nvcc-built kernel on a GPU when there is one (reported as skipped otherwise). */
#include <stdlib.h>

#include "ops/cuda/philox_cuda.h"
#include "ops/philox.h"
#include "testutil.h"

#ifdef DFG_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* Words of out (n x 4) that differ from the CPU's stream. */
static int64_t mismatches(const uint32_t *out, int64_t n, uint64_t ctr, uint64_t stream, uint32_t k0, uint32_t k1) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        dfg_philox_ctr c = dfg_philox_row_ctr(ctr + (uint64_t)i, 0);
        c.v[2] = (uint32_t)stream, c.v[3] = (uint32_t)(stream >> 32);
        dfg_philox_ctr r = dfg_philox4x32(c, k0, k1);
        for (int j = 0; j < 4; j++) bad += out[4 * i + j] != r.v[j];
    }
    return bad;
}

/* 1 when the real kernel ran on a GPU, 0 when there is none (or no CUDA build). */
static int run_on_gpu(int64_t n, uint64_t ctr, uint64_t stream, uint32_t k0, uint32_t k1) {
#ifdef DFG_HAVE_CUDA
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 0;
    size_t bytes = sizeof(uint32_t) * 4 * (size_t)n;
    uint32_t *dev = NULL, *host = malloc(bytes);
    CHECK(host && cudaMalloc((void **)&dev, bytes) == cudaSuccess, "cudaMalloc");
    if (!host || !dev) return 1;
    CHECK(cudaMemset(dev, 0xAB, bytes) == cudaSuccess, "memset");
    CHECK(dfg_cuda_philox_stream(dev, n, ctr, stream, k0, k1, NULL) == 0, "launch");
    CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
    int64_t bad = mismatches(host, n, ctr, stream, k0, k1);
    CHECK(bad == 0, "GPU: %lld of %lld words differ from the CPU", (long long)bad, (long long)(4 * n));
    cudaFree(dev);
    free(host);
    return 1;
#else
    (void)n, (void)ctr, (void)stream, (void)k0, (void)k1;
    return 0;
#endif
}

int main(void) {
    dfg_test_init("test_cuda_philox");
    const int64_t n = 5000; /* not a multiple of the block */
    uint32_t k0 = (uint32_t)dfg_test_u64(), k1 = (uint32_t)dfg_test_u64();
    uint64_t ctr = dfg_test_u64(), stream = dfg_test_u64();
    uint32_t *out = malloc(sizeof(uint32_t) * 4 * (size_t)n);
    CHECK(out != NULL, "malloc");
    if (!out) return dfg_test_finish();
    dfg_test_poison(out, sizeof(uint32_t) * 4 * (size_t)n);
    CHECK(dfg_emu_philox_stream(out, n, ctr, stream, k0, k1, NULL) == 0, "emulated launch");
    int64_t bad = mismatches(out, n, ctr, stream, k0, k1);
    CHECK(bad == 0, "emulated: %lld of %lld words differ from the CPU", (long long)bad, (long long)(4 * n));
    free(out);
    if (!run_on_gpu(1 << 16, ctr, stream, k0, k1)) printf("test_cuda_philox: the GPU half skipped (no CUDA device)\n");
    return dfg_test_finish();
}
