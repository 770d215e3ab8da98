// philox.cu - the Philox4x32-10 stream on the GPU, from the same header the CPU uses
// (ops/philox.h). DFG_CUDA_FN(philox_stream) is what test_cuda_philox compares bit for bit with the
// CPU (emulated always, on a GPU when there is one); the sampling kernel draws its per-row
// uniforms through the same functions.
#include "common.cuh"

#include "../philox.h"
#include "philox_cuda.h"

// out (n, 4): the Philox block for counter {ctr + i (64-bit), stream (64-bit)} and key.
static __global__ void philox_stream_kernel(uint32_t *out, int64_t n, uint64_t ctr, uint64_t stream, uint32_t k0,
                                            uint32_t k1) {
    int64_t i = dfg_thread_index();
    if (i >= n) return;
    dfg_philox_ctr c = dfg_philox_row_ctr(ctr + (uint64_t)i, 0);
    c.v[2] = (uint32_t)stream;
    c.v[3] = (uint32_t)(stream >> 32);
    dfg_philox_ctr r = dfg_philox4x32(c, k0, k1);
    for (int j = 0; j < 4; j++) out[4 * i + j] = r.v[j];
}

extern "C" int DFG_CUDA_FN(philox_stream)(uint32_t *dev_out, int64_t n, uint64_t ctr, uint64_t stream, uint32_t k0,
                                          uint32_t k1, void *cuda_stream) {
    if (n <= 0) return 0;
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    return (int)DFG_LAUNCH(philox_stream_kernel, (unsigned)blocks, threads, 0, (cudaStream_t)cuda_stream, dev_out, n,
                           ctr, stream, k0, k1);
}
