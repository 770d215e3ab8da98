/* device_cuda.c - the device layer on a real GPU: the CUDA runtime (one non-blocking stream,
 * stream capture into CUDA Graphs), the nvcc-built kernels, GEMMs through cuBLASLt from the
 * pure descriptors of ops/cuda/gemm.h, and attention through cuDNN's fused SDPA from those of
 * ops/cuda/sdpa.h (sdpa_cudnn.c; DFG_CUDNN_SDPA=0 turns it off). Every call is checked; a
 * failure returns a status with the library's message (cudaGetErrorString,
 * cublasLtGetStatusString, cudnnGetErrorString), never aborts.
 *
 * This file is compiled wherever the CUDA toolkit is, and has run on no GPU yet (README, "GPU
 * status"): tools/gpu-check.sh is its first test on real hardware. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

/* cuBLASLt's recommended workspace on Hopper (32 MiB); planned beside the arena. */
#define GEMM_WORKSPACE ((size_t)32 << 20)
#define GEMM_CACHE 256

typedef struct {
    dfg_gemm_desc d;
    cublasLtMatmulAlgo_t algo;
    bool found;
} gemm_algo;

typedef struct {
    cudaStream_t stream;
    size_t free_at_open; /* cudaMemGetInfo's free bytes once the context exists */
    cublasLtHandle_t lt;
    gemm_algo cache[GEMM_CACHE]; /* heuristics chosen once per GEMM shape, then reused */
    int n_cache;
    bool capturing;
#ifdef DFG_HAVE_CUDNN
    dfg_sdpa_cudnn *sdpa; /* cuDNN's handle and attention plans; NULL: DFG_CUDNN_SDPA=0 */
#endif
} gpu;

#define CUDA_TRY(call, what)                                                                                   \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            if (err && len) snprintf(err, len, "%s: %s (%s)", what, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
            return DFG_ERR_RUNTIME;                                                                            \
        }                                                                                                      \
    } while (0)

static dfg_status gpu_open(void **dev, int *sm_count, char *desc, size_t desc_len, char *err, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, len, "no CUDA device here (%s); --emulate-gpu runs the plan on the CPU",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return DFG_ERR_UNSUPPORTED;
    }
    gpu *g = calloc(1, sizeof(*g));
    if (!g) return snprintf(err, len, "out of memory"), DFG_ERR_NOMEM;
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(0)) || (e = cudaGetDeviceProperties(&prop, 0)) ||
        (e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking))) {
        snprintf(err, len, "opening GPU 0: %s", cudaGetErrorString(e));
        free(g);
        return DFG_ERR_RUNTIME;
    }
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, len, "cublasLtCreate: %s", cublasLtGetStatusString(s));
        cudaStreamDestroy(g->stream);
        free(g);
        return DFG_ERR_RUNTIME;
    }
#ifdef DFG_HAVE_CUDNN
    dfg_status ds = dfg_sdpa_cudnn_open(&g->sdpa, err, len);
    if (ds) {
        cublasLtDestroy(g->lt);
        cudaStreamDestroy(g->stream);
        free(g);
        return ds;
    }
#endif
    size_t total = 0;
    cudaFree(NULL); /* the context exists before the baseline is read */
    if (cudaMemGetInfo(&g->free_at_open, &total) != cudaSuccess) g->free_at_open = 0;
    *sm_count = prop.multiProcessorCount;
    snprintf(desc, desc_len, "%s, sm_%d%d, %d SMs, %.1f GiB", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (1 << 30));
    *dev = g;
    return DFG_OK;
}

static void gpu_close(void *dev) {
    gpu *g = dev;
    if (!g) return;
#ifdef DFG_HAVE_CUDNN
    dfg_sdpa_cudnn_close(g->sdpa);
#endif
    cublasLtDestroy(g->lt);
    cudaStreamDestroy(g->stream);
    free(g);
}

static void *gpu_alloc(void *dev, size_t bytes) {
    (void)dev;
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void gpu_release(void *dev, void *p) {
    (void)dev;
    cudaFree(p);
}

/* Measured, not counted: the device's free memory when the context was made (the context's own
 * memory is thus not included) minus its free memory now. The driver hands out memory in pages,
 * so this is the planned allocation rounded up to its granularity. */
static size_t gpu_allocated(void *dev) {
    gpu *g = dev;
    size_t free_now = 0, total = 0;
    if (cudaMemGetInfo(&free_now, &total) != cudaSuccess || free_now > g->free_at_open) return 0;
    return g->free_at_open - free_now;
}

static void *gpu_alloc_host(void *dev, size_t bytes) {
    (void)dev;
    void *p = NULL;
    return cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void gpu_release_host(void *dev, void *p) {
    (void)dev;
    cudaFreeHost(p);
}

static dfg_status gpu_copy(gpu *g, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, char *err,
                           size_t len) {
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, g->stream), "cudaMemcpyAsync");
    CUDA_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize");
    return DFG_OK;
}

static dfg_status gpu_to_device(void *dev, void *dst, const void *src, size_t bytes, char *err, size_t len) {
    return gpu_copy(dev, dst, src, bytes, cudaMemcpyHostToDevice, err, len);
}

static dfg_status gpu_to_host(void *dev, void *dst, const void *src, size_t bytes, char *err, size_t len) {
    return gpu_copy(dev, dst, src, bytes, cudaMemcpyDeviceToHost, err, len);
}

static dfg_status gpu_fill(void *dev, void *dst, int byte, size_t bytes, char *err, size_t len) {
    gpu *g = dev;
    CUDA_TRY(cudaMemsetAsync(dst, byte, bytes, g->stream), "cudaMemsetAsync");
    CUDA_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize");
    return DFG_OK;
}

static dfg_status gpu_sync(void *dev, char *err, size_t len) {
    gpu *g = dev;
    CUDA_TRY(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize");
    return DFG_OK;
}

static dfg_status gpu_capture_begin(void *dev, char *err, size_t len) {
    gpu *g = dev;
    /* thread-local mode: a synchronising call from this thread during the capture is an error */
    CUDA_TRY(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    g->capturing = true;
    return DFG_OK;
}

static dfg_status gpu_capture_end(void *dev, void **graph, char *err, size_t len) {
    gpu *g = dev;
    cudaGraph_t gr = NULL;
    cudaGraphExec_t ex = NULL;
    g->capturing = false;
    CUDA_TRY(cudaStreamEndCapture(g->stream, &gr), "cudaStreamEndCapture");
    cudaError_t e = cudaGraphInstantiate(&ex, gr, 0);
    cudaGraphDestroy(gr);
    if (e != cudaSuccess) return snprintf(err, len, "cudaGraphInstantiate: %s", cudaGetErrorString(e)), DFG_ERR_RUNTIME;
    *graph = ex;
    return DFG_OK;
}

static dfg_status gpu_graph_launch(void *dev, void *graph, char *err, size_t len) {
    gpu *g = dev;
    CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, g->stream), "cudaGraphLaunch");
    return DFG_OK;
}

static void gpu_graph_destroy(void *dev, void *graph) {
    (void)dev;
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static void *gpu_stream(void *dev) { return ((gpu *)dev)->stream; }
static void *gpu_gemm_state(void *dev) { return dev; }

/* ---------------------------------------------------------------- cuDNN attention (sdpa_cudnn.c) */
static dfg_cuda_sdpa_fn gpu_sdpa(void *dev, void **state) {
#ifdef DFG_HAVE_CUDNN
    gpu *g = dev;
    *state = g->sdpa;
    return g->sdpa ? dfg_sdpa_cudnn_run : NULL;
#else
    (void)dev;
    *state = NULL;
    return NULL;
#endif
}

/* A node's workspace: its kernels', or what cuDNN's attention call may use, whichever is more
 * (an attention cuDNN refuses at run time falls back to the kernels, so both must fit). */
static size_t gpu_scratch_bytes(const dfg_node *n) {
    size_t own = dfg_cuda_scratch_bytes(n);
#ifdef DFG_HAVE_CUDNN
    size_t lib = dfg_sdpa_cudnn_workspace(n);
    if (lib > own) own = lib;
#endif
    return own;
}

/* ---------------------------------------------------------------- cuBLASLt */
static cudaDataType_t lt_type(dfg_dtype t) { return t == DFG_BF16 ? CUDA_R_16BF : t == DFG_F16 ? CUDA_R_16F : CUDA_R_32F; }

#define LT_TRY(call, what)                                                                       \
    do {                                                                                         \
        cublasStatus_t s_ = (call);                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                       \
            st = DFG_ERR_RUNTIME;                                                                \
            if (ctx->err) snprintf(ctx->err, ctx->err_len, "%s: %s", what, cublasLtGetStatusString(s_)); \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

/* A column-major layout of rows x cols (leading dimension ld), batched by the descriptor. */
static cublasStatus_t lt_layout(cublasLtMatrixLayout_t *l, dfg_dtype t, int64_t rows, int64_t cols, int64_t ld,
                                int64_t batch, int64_t stride) {
    cublasStatus_t s = cublasLtMatrixLayoutCreate(l, lt_type(t), (uint64_t)rows, (uint64_t)cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS || batch <= 1) return s;
    int32_t count = (int32_t)batch;
    s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
    return s;
}

static dfg_status gpu_gemm(dfg_cuda_ctx *ctx, const dfg_gemm_desc *d, const void *a, const void *b, void *c,
                           const void *bias) {
    gpu *g = ctx->gemm_state;
    dfg_status st = DFG_OK;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t ta = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
    if (d->epilogue != DFG_GEMM_EPI_NONE) {
        cublasLtEpilogue_t epi = d->epilogue == DFG_GEMM_EPI_GELU_BIAS ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = lt_type(d->bias_type);
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "EPILOGUE");
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS_POINTER");
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)), "BIAS_DATA_TYPE");
    }
    LT_TRY(lt_layout(&la, d->a_type, d->trans_a ? d->k : d->m, d->trans_a ? d->m : d->k, d->lda, d->batch, d->stride_a),
           "layout A");
    LT_TRY(lt_layout(&lb, d->b_type, d->trans_b ? d->n : d->k, d->trans_b ? d->k : d->n, d->ldb, d->batch, d->stride_b),
           "layout B");
    LT_TRY(lt_layout(&lc, d->c_type, d->m, d->n, d->ldc, d->batch, d->stride_c), "layout C");
    /* the algorithm: chosen the first time this GEMM's shape is seen (while the first step is
     * captured), then reused */
    gemm_algo *hit = NULL;
    for (int i = 0; i < g->n_cache && !hit; i++)
        if (!memcmp(&g->cache[i].d, d, sizeof(*d))) hit = &g->cache[i];
    gemm_algo fresh = {.d = *d};
    if (!hit) {
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        size_t ws = ctx->gemm_workspace_bytes;
        LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
               "MAX_WORKSPACE_BYTES");
        LT_TRY(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, lc, lc, pref, 1, &res, &found), "AlgoGetHeuristic");
        if (!found) {
            st = DFG_ERR_UNSUPPORTED;
            if (ctx->err) snprintf(ctx->err, ctx->err_len, "cuBLASLt has no algorithm for this GEMM");
            goto done;
        }
        fresh.algo = res.algo, fresh.found = true;
        hit = g->n_cache < GEMM_CACHE ? &g->cache[g->n_cache++] : &fresh;
        *hit = fresh;
    }
    LT_TRY(cublasLtMatmul(g->lt, op, &d->alpha, a, la, b, lb, &d->beta, c, lc, c, lc, &hit->algo, ctx->gemm_workspace,
                          ctx->gemm_workspace_bytes, (cudaStream_t)ctx->stream),
           "cublasLtMatmul");
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
    return st;
}

/* ---------------------------------------------------------------- data parallel (comm_nccl.c) */
#ifdef DFG_HAVE_NCCL
static dfg_status gpu_comm_open(void *dev, dfg_comm *host, dfg_comm **out, char *err, size_t len) {
    return dfg_comm_nccl_open(((gpu *)dev)->stream, host, out, err, len);
}
#endif

const dfg_device dfg_device_cuda = {
    .name = "cuda",
    .open = gpu_open,
    .close = gpu_close,
    .alloc = gpu_alloc,
    .allocated = gpu_allocated,
    .release = gpu_release,
    .alloc_host = gpu_alloc_host,
    .release_host = gpu_release_host,
    .to_device = gpu_to_device,
    .to_host = gpu_to_host,
    .fill = gpu_fill,
    .sync = gpu_sync,
    .capture_begin = gpu_capture_begin,
    .capture_end = gpu_capture_end,
    .graph_launch = gpu_graph_launch,
    .graph_destroy = gpu_graph_destroy,
    .stream = gpu_stream,
    .kernels = dfg_cuda_kernels,
    .scratch_bytes = gpu_scratch_bytes,
    .gemm = gpu_gemm,
    .gemm_state = gpu_gemm_state,
    .gemm_workspace = GEMM_WORKSPACE,
    .sdpa = gpu_sdpa,
#ifdef DFG_HAVE_NCCL
    .comm_open = gpu_comm_open,
    .comm_close = dfg_comm_nccl_close,
    .comm_wait = dfg_comm_nccl_wait,
#endif
};
