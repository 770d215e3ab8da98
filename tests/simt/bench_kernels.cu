// bench_kernels.cu - an elementwise kernel with no synchronisation, for the SIMT emulator's
// timing (the block reduction timed beside it is reduce_kernels.cu's row sum); and a template
// kernel with two parameters, launched through DFG_LAUNCH's parenthesised form on both builds.
#include "dfg_simt.h"

#include "simt_test.h"

// y = a x + b, one element per thread
__global__ void dfg_simt_test_axpb_kernel(const float *__restrict__ x /* (n) */, float *__restrict__ y /* (n) */,
                                          int n, float a, float b) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

cudaError_t dfg_simt_test_axpb(const float *x /* (n) */, float *y /* (n) */, int n, float a, float b, int threads) {
    return DFG_LAUNCH(dfg_simt_test_axpb_kernel, (n + threads - 1) / threads, threads, 0, 0, x, y, n, a, b);
}

// out[i] = base + K * threadIdx.x
template <class T, int K>
__global__ void dfg_simt_test_ramp_kernel(T *__restrict__ out /* (gridDim.x * blockDim.x) */, T base) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = base + (T)(K * threadIdx.x);
}

cudaError_t dfg_simt_test_ramp(long long *out /* (blocks * 32) */, long long base, int blocks) {
    return DFG_LAUNCH((dfg_simt_test_ramp_kernel<long long, 3>), blocks, 32, 0, 0, out, base);
}
