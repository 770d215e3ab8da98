// attention_common.cuh - what the attention kernel files share (attention.cu's tiled forward and
// backward, attention_prefix.cu, attention_decode.cu's decoding kernels): the block size, the
// alignment rule of the 4-element vector path (common.cuh's dfg_ld4 / dfg_st4) and the launch
// helper that opts into large dynamic shared memory.
#ifndef DFG_CUDA_ATTENTION_COMMON_CUH
#define DFG_CUDA_ATTENTION_COMMON_CUH

#include "common.cuh"

namespace {

constexpr int ATT_THREADS = 128;

// ---------------------------------------------------------------- host side
static inline bool aligned_for(const void *p, size_t bytes) { return !p || (uintptr_t)p % bytes == 0; }

// 1 when rows may move 4 elements at a time: D % 4 == 0 (row starts stay aligned), tensors aligned.
static inline int att_vec(int D, size_t elem, const void *p0, const void *p1, const void *p2, const void *p3 = nullptr,
                          const void *p4 = nullptr) {
    size_t a = 4 * elem;
    return D % 4 == 0 && aligned_for(p0, a) && aligned_for(p1, a) && aligned_for(p2, a) && aligned_for(p3, a) &&
           aligned_for(p4, a);
}

// Launches kernel with `floats` floats of dynamic shared memory, opting in above 48 KB.
#define ATT_LAUNCH(kernel, grid, floats, ...)                                                             \
    do {                                                                                                 \
        size_t bytes_ = (size_t)(floats) * sizeof(float);                                                \
        cudaError_t e_ = bytes_ > 48 * 1024 ? DFG_SET_MAX_DYNAMIC_SMEM(kernel, bytes_) : cudaSuccess;   \
        if (e_ == cudaSuccess) e_ = DFG_LAUNCH(kernel, grid, ATT_THREADS, bytes_, stream, __VA_ARGS__); \
        dfg_status st_ = dfg_cuda_launched(ctx, n, e_, #kernel);                                         \
        if (st_) return st_;                                                                             \
    } while (0)

} // namespace

#endif
