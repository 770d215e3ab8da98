/* simt_test.h - the launchers of the SIMT emulator's test kernels (defined in the .cu files, which
 * nvcc also builds), and the checks and random inputs of the emulated tests.
 *
 * Under emulation the pointers are host memory; under nvcc they would be device memory (nothing
 * here runs on a GPU: the nvcc build proves the .cu files are real CUDA). */
#ifndef DFG_SIMT_TEST_H
#define DFG_SIMT_TEST_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <cstdint>

/* ---- reduce_kernels.cu */
/* out[r] = sum of x[r, :], a block per row, fp32 accumulation: shuffles and two barriers */
cudaError_t dfg_simt_test_rowsum_bf16(const __nv_bfloat16 *x /* (rows, cols) */, float *out /* (rows) */,
                                      int rows, int cols, int threads);
/* classic shared-memory tree reduction, 256 threads: partial[b] = sum of x[256 b .. 256 b + 255] */
cudaError_t dfg_simt_test_tree_reduce(const float *x /* (n) */, float *partial /* (ceil(n / 256)) */, int n);
/* the same with dynamic shared memory and any power-of-two block */
cudaError_t dfg_simt_test_tree_reduce_dyn(const float *x /* (n) */, float *partial /* (ceil(n / threads)) */, int n,
                                          int threads);

/* ---- warp_kernels.cu */
/* out (4, n): for each thread, __shfl_sync(in, arg), __shfl_up_sync(in, arg),
 * __shfl_down_sync(in, arg), __shfl_xor_sync(in, arg), all with `width`, full warps */
#define DFG_SIMT_TEST_SHFL_DECL(T, suffix)                                                                 \
    cudaError_t dfg_simt_test_shfl_##suffix(const T *in /* (n) */, T *out /* (4, n) */, int n, int arg, \
                                            int width)
DFG_SIMT_TEST_SHFL_DECL(int, i32);
DFG_SIMT_TEST_SHFL_DECL(unsigned, u32);
DFG_SIMT_TEST_SHFL_DECL(long long, i64);
DFG_SIMT_TEST_SHFL_DECL(unsigned long long, u64);
DFG_SIMT_TEST_SHFL_DECL(float, f32);
DFG_SIMT_TEST_SHFL_DECL(double, f64);
DFG_SIMT_TEST_SHFL_DECL(__nv_bfloat16, bf16);
DFG_SIMT_TEST_SHFL_DECL(__nv_bfloat162, bf16x2);
/* out (8, n), n threads in blocks of `threads` (any size: the last warp may be partial);
 * pred (n): per lane, ballot/any/all/match/reduce over the warp's existing lanes, and a
 * half-warp exchange through shared memory guarded by __syncwarp(half mask) */
cudaError_t dfg_simt_test_votes(const int *pred /* (n) */, unsigned *out /* (8, n) */, int n, int threads);
/* what __syncthreads_count/and/or of pred returned to each thread */
cudaError_t dfg_simt_test_syncthreads_ops(const int *pred /* (blocks, threads) */, int *out /* (3, blocks, threads) */,
                                          int blocks, int threads);
/* out (4, blocks, threads): threadIdx.x/y/z and the warp's first linear id, from a shuffle */
cudaError_t dfg_simt_test_block3d(int *out /* (4, blocks, block.x * block.y * block.z) */, int blocks, dim3 block);
/* out (64): lanes 0..15 of each warp shuffle from lanes outside their mask: poison (-1) */
cudaError_t dfg_simt_test_shfl_outside_mask(int *out /* (64) */);
/* every atomic on counters (see warp_kernels.cu for what each slot holds) */
struct dfg_simt_test_atomics {
    int add_i, sub_i, max_i, min_i, or_i, and_i, cas_i;
    unsigned add_u, max_u, min_u, inc_u, exch_u;
    unsigned long long add_ull;
    float add_f;
    double add_d;
    __nv_bfloat16 add_bf16;
};
cudaError_t dfg_simt_test_atomics_run(dfg_simt_test_atomics *c /* (1) */, int blocks, int threads);

/* ---- bug_kernels.cu: kernels with planted bugs the emulator must report */
cudaError_t dfg_simt_test_early_return(float *out /* (3, 64) */, int who); /* block 2 thread who returns */
cudaError_t dfg_simt_test_missing_lane(float *out /* (40) */);          /* full mask, 40-thread block */
cudaError_t dfg_simt_test_partial_warp_ok(float *out /* (40) */);       /* the same, masks right */
cudaError_t dfg_simt_test_dropped_lane(float *out /* (32) */);          /* mask 0x7fffffff, 32 threads */
cudaError_t dfg_simt_test_divergent_barriers(float *out /* (64) */);    /* two __syncthreads lines */
cudaError_t dfg_simt_test_warp_vs_barrier(float *out /* (32) */);       /* lane 31 at a barrier */
cudaError_t dfg_simt_test_exit_in_warp(float *out /* (32) */);          /* lane 31 returns, others syncwarp */
cudaError_t dfg_simt_test_trap(float *out /* (64) */);                  /* thread 7 of block 1 traps */
/* writes smem_bytes - 1 into the last byte of dynamic shared memory and reads it back into out[0];
 * out[1] = the first byte as the block found it */
cudaError_t dfg_simt_test_smem(int *out /* (2) */, int threads, int smem_bytes);
cudaError_t dfg_simt_test_smem_optin(int smem_bytes);
cudaError_t dfg_simt_test_config(int *out /* (1) */, dim3 grid, dim3 block);
/* y[i] = x[i - 1] within each block of 256, but without the barrier between write and read */
cudaError_t dfg_simt_test_neighbour_race(const float *x /* (n) */, float *y /* (n) */, int n);
/* order (2, blocks, threads): the tickets each thread drew with two atomics in a row */
cudaError_t dfg_simt_test_order(int *order /* (2, blocks, threads) */, int *counter /* (blocks) */, int blocks,
                                int threads);
/* y[i] = x[i] for i < n, grid-stride; `off_by_one` makes the tail bound <= n (the planted bug) */
cudaError_t dfg_simt_test_tail_copy(const float *x /* (n) */, float *y /* (n) */, int n, int off_by_one);

/* ---- bench_kernels.cu */
cudaError_t dfg_simt_test_axpb(const float *x /* (n) */, float *y /* (n) */, int n, float a, float b, int threads);
/* out[b * 32 + t] = base + 3 t: a two-parameter template kernel, DFG_LAUNCH((kernel<T, K>), ...) */
cudaError_t dfg_simt_test_ramp(long long *out /* (blocks * 32) */, long long base, int blocks);

#if DFG_SIMT_EMULATED
/* ---------------------------------------------------------------- test helpers (emulation only) */
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern int dfg_simt_test_failures;
#define SIMT_CHECK(cond, ...)                                                            \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
            dfg_simt_test_failures++;                                                    \
        }                                                                                \
    } while (0)

/* random inputs from DFG_TEST_SEED, else the clock; the seed is printed so a failure replays */
uint64_t dfg_simt_test_init(const char *name);
uint64_t dfg_simt_test_u64(void);
float dfg_simt_test_uniform(float lo, float hi);
/* NaN in every byte pattern a test reads back: an output never written stays NaN */
void dfg_simt_test_poison(void *p, size_t bytes);
#endif

#endif /* DFG_SIMT_TEST_H */
