/* gemm.h - one GEMM as cuBLAS(Lt) sees it: a pure description made from a node, executed by
 * cuBLASLt on a GPU and by an interpreter of the same semantics under emulation (runtime/cuda/emu/gemm_emu.c), so the
 * mapping of dfg's row-major tensors onto cuBLAS's column-major calls is tested without a GPU.
 *
 * Semantics (cuBLAS's, column-major): for each batch entry i,
 *     C_i = alpha * op(A_i) op(B_i) + beta * C_i        (then the epilogue)
 * op(X) = X or X^T; C_i is m x n with leading dimension ldc; op(A_i) is m x k, op(B_i) k x n;
 * X_i = X + i * stride_x (stride 0: one matrix shared by every entry). The epilogue adds a bias
 * of m entries to every column (BIAS), then applies GELU (tanh form) (GELU_BIAS). Operands are
 * f32 or bf16; arithmetic is f32; C is f32 or bf16 (rounded to nearest even).
 *
 * A row-major (R, Cc) tensor is the column-major (Cc, R) matrix with the same bytes, so the
 * row-major product C = A B is the column-major C^T = B^T A^T: descriptors swap the operands and
 * transposes accordingly (dfg_gemm_matmul). */
#ifndef DFG_GEMM_H
#define DFG_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "../../graph/dfg_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DFG_GEMM_EPI_NONE, DFG_GEMM_EPI_BIAS, DFG_GEMM_EPI_GELU_BIAS } dfg_gemm_epilogue;

typedef struct {
    int64_t m, n, k;
    bool trans_a, trans_b;
    int64_t lda, ldb, ldc;
    int64_t batch;
    int64_t stride_a, stride_b, stride_c; /* elements between batch entries; 0: shared */
    dfg_dtype a_type, b_type, c_type, bias_type;
    float alpha, beta;
    dfg_gemm_epilogue epilogue;
} dfg_gemm_desc;

struct dfg_node;
/* The GEMM of a matmul node (op(a) @ op(b), batched, a rank-2 operand shared): false with why
 * set for shapes the node's shape rule would refuse. */
bool dfg_gemm_matmul(const struct dfg_node *n, dfg_gemm_desc *d, const char **why);
/* Row-major C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C as one GEMM: lda/ldb/ldc are the
 * row-major leading dimensions (elements between rows). The helper the fused kernels use for
 * their chunks (a (rows, C) block of hidden states against a block of the vocabulary). */
dfg_gemm_desc dfg_gemm_row_major(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                                 int64_t ldc, dfg_dtype ab_type, dfg_dtype c_type, float alpha, float beta);
/* "m=.. n=.. k=.. opA=T ... " for messages. */
char *dfg_gemm_str(const dfg_gemm_desc *d, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
