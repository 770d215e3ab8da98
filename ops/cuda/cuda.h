/* cuda.h - the CUDA kernels of dfg's ops, for C callers (the CUDA backend, tests).
 *
 * Every op whose ops.def cuda column says yes has a launcher, named by its kernel column, in
 * ops/cuda/<family>.cu: the host half of that file, which reads the node's shapes and attributes
 * and enqueues CUDA C kernels (or, for matmuls, a GEMM through ctx->gemm) on ctx->stream. A
 * launcher never allocates, never synchronises and never reads device memory on the host, so a
 * stage's launches can be captured as one CUDA Graph; bad values found on the device (a token id
 * out of range) are written to ctx->flags (device memory) for the backend to check after the stage.
 *
 * Each .cu file is compiled twice: by nvcc (sm_80, sm_90) into the real kernels, named
 * dfg_cuda_<name>, and by the host C++ compiler against the SIMT emulator (runtime/cuda/emu/simt) into
 * kernels run on the CPU, named dfg_emu_<name>, so that both can live in one process (dfg run
 * --emulate-gpu next to a real GPU run). Tensors are in device memory (emulation: host memory),
 * f32 or bf16 (bf16 storage, f32 arithmetic), laid out as the node's shapes say, row-major. */
#ifndef DFG_CUDA_H
#define DFG_CUDA_H

#include "../op.h"
#include "gemm.h"
#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dfg_cuda_ctx dfg_cuda_ctx;

/* Runs one GEMM on the context's stream: cuBLASLt on a GPU, the column-major interpreter
 * (gemm.h) under emulation. Returns DFG_OK or a status with the library's message in ctx->err. */
typedef dfg_status (*dfg_cuda_gemm_fn)(dfg_cuda_ctx *ctx, const dfg_gemm_desc *d, const void *a, const void *b, void *c,
                                       const void *bias);
/* Runs one fused attention (sdpa.h), forward or backward, on the context's stream: ptrs[k] is
 * operand k's buffer (dfg_sdpa_buffers). cuDNN on a GPU, the interpreter under emulation.
 * DFG_ERR_UNSUPPORTED (nothing enqueued) when the implementation does not take the descriptor:
 * the attention launchers then run dfg's own kernels. */
typedef dfg_status (*dfg_cuda_sdpa_fn)(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs);

struct dfg_cuda_ctx {
    void *stream;          /* cudaStream_t (NULL: the default stream; unused under emulation) */
    void *scratch;         /* device workspace of dfg_cuda_scratch_bytes(n) bytes for this node */
    size_t scratch_bytes;
    int *flags;            /* device int: a kernel sets it nonzero when it finds a bad value */
    dfg_cuda_gemm_fn gemm;
    void *gemm_state;      /* the GEMM implementation's handle (cuBLASLt), or NULL */
    void *gemm_workspace;  /* device workspace the GEMM may use (planned beside the arena) */
    size_t gemm_workspace_bytes;
    int sm_count;          /* multiprocessors, for grid sizing (132 on H100 SXM) */
    char *err;             /* where a launcher writes why it failed */
    size_t err_len;
    /* Fused attention for attention and attention_bwd: NULL runs dfg's own kernels. Its state
     * (cuDNN's handle and plans), and its workspace: the node's scratch (dfg_sdpa_workspace_bytes
     * is part of the device's scratch rule where cuDNN runs). */
    dfg_cuda_sdpa_fn sdpa;
    void *sdpa_state;
    /* The data-parallel run's communicator on device memory (ops/comm.h: NCCL on a GPU, MPI as a
     * stream node under emulation), its calls ordered on `stream`; NULL: one process. */
    struct dfg_comm *comm;
    /* The plan is batch-invariant (dfg_declare_batch_invariant): the forward matmuls, attention
     * and the fused log-prob's logits run invariant.cu's kernels, in one order per element. */
    bool invariant;
};

typedef dfg_status (*dfg_cuda_fn)(const dfg_node *n, void *const *in, void *const *out, dfg_cuda_ctx *ctx);
typedef size_t (*dfg_cuda_scratch_fn)(const dfg_node *n);

/* The launchers, indexed by op id; NULL where ops.def says none. */
extern const dfg_cuda_fn dfg_cuda_kernels[DFG_OP_COUNT]; /* nvcc build (libdfg_cuda_kernels) */
extern const dfg_cuda_fn dfg_emu_kernels[DFG_OP_COUNT];  /* emulated build (libdfg_emu_kernels) */
/* Device workspace a node's launcher needs (0 for most): its cuda_scratch rule. */
size_t dfg_cuda_scratch_bytes(const dfg_node *n);
size_t dfg_emu_scratch_bytes(const dfg_node *n);

/* Formats "<op> '<node>': <reason>" into ctx->err and returns s (gemm.c). */
dfg_status dfg_cuda_fail(dfg_cuda_ctx *ctx, const dfg_node *n, dfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The emulated GEMM (runtime/cuda/emu/gemm_emu.c: the emulated device's): runs the descriptor with OpenBLAS in f32 (bf16 operands widened,
 * a bf16 result rounded to nearest even), as cuBLAS defines it. */
dfg_status dfg_cuda_gemm_interpret(dfg_cuda_ctx *ctx, const dfg_gemm_desc *d, const void *a, const void *b, void *c,
                                   const void *bias);
/* The emulated SDPA (runtime/cuda/emu/sdpa_emu.c): the semantics of sdpa.h in f32, every operand read and written
 * through the descriptor's offsets and strides; takes any shape and float dtype. Recorded into the
 * emulator's stream capture like a kernel. */
dfg_status dfg_cuda_sdpa_interpret(dfg_cuda_ctx *ctx, const dfg_sdpa_desc *d, bool backward, void *const *ptrs);

#ifdef __cplusplus
}
#endif
#endif
