// registry.cu - the CUDA launcher table, generated from ops.def (cuda.h): dfg_cuda_kernels in the
// nvcc build, dfg_emu_kernels in the emulated build, named by the kernel column; NULL where the cuda
// column says none.
#include "common.cuh"

// every launcher and scratch rule ops.def names: one that is missing does not link
#define DFG_CUDA_PENDING
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) \
    DFG_UNLESS_NONE(cuda)(extern "C" DFG_CUDA_PENDING dfg_status DFG_CUDA_FN(kernel)(const dfg_node *, void *const *,    \
                                                                                   void *const *, dfg_cuda_ctx *);)    \
    DFG_UNLESS_NONE(cuda_scratch)(extern "C" DFG_CUDA_PENDING size_t DFG_CUDA_FN(scratch_##cuda_scratch)(const dfg_node *);)
#include "../ops.def"
#undef X

#if DFG_SIMT_EMULATED
#define DFG_CUDA_TABLE dfg_emu_kernels
#define DFG_CUDA_SCRATCH_BYTES dfg_emu_scratch_bytes
#define DFG_CUDA_OR_NULL(cuda, kernel) DFG_FN_IF(cuda, dfg_emu_, kernel)
#define DFG_CUDA_SCRATCH_OR_NULL(x) DFG_FN_OR_NULL(dfg_emu_scratch_, x)
#else
#define DFG_CUDA_TABLE dfg_cuda_kernels
#define DFG_CUDA_SCRATCH_BYTES dfg_cuda_scratch_bytes
#define DFG_CUDA_OR_NULL(cuda, kernel) DFG_FN_IF(cuda, dfg_cuda_, kernel)
#define DFG_CUDA_SCRATCH_OR_NULL(x) DFG_FN_OR_NULL(dfg_cuda_scratch_, x)
#endif

// in op-id order (C++ has no designated array initialisers; ops.def's order is the enum's)
extern "C" const dfg_cuda_fn DFG_CUDA_TABLE[DFG_OP_COUNT] = {
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) \
    DFG_CUDA_OR_NULL(cuda, kernel),
#include "../ops.def"
#undef X
};

static const dfg_cuda_scratch_fn scratch_fns[DFG_OP_COUNT] = {
#define X(E, name, nin, nout, gk, infer, grad, cost, attrs, inplace, dtypes, random, mem, flags, kernel, scratch, cuda, cuda_scratch) \
    DFG_CUDA_SCRATCH_OR_NULL(cuda_scratch),
#include "../ops.def"
#undef X
};

extern "C" size_t DFG_CUDA_SCRATCH_BYTES(const dfg_node *n) {
    return n->op < DFG_OP_COUNT && scratch_fns[n->op] ? scratch_fns[n->op](n) : 0;
}
