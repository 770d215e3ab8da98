/* test_cuda_matmul.c - the CUDA matmul (a GEMM descriptor: row-major tensors mapped onto the
 * column-major GEMM, batched strides, a shared operand folded into one GEMM) and bias_add,
 * against the CPU kernels (tests/cuda_harness.h). */
#include "cuda_harness.h"

typedef struct {
    int64_t batch_a, batch_b, M, N, K; /* batch 0: a rank-2 operand */
    bool ta, tb;
} mm_case;

static dfg_node *build_matmul(dfg_graph *g, dfg_dtype dt, void *user) {
    const mm_case *m = user;
    int64_t ar = m->ta ? m->K : m->M, ac = m->ta ? m->M : m->K, br = m->tb ? m->N : m->K, bc = m->tb ? m->K : m->N;
    dfg_shape sa = m->batch_a ? DFG_SHAPE(m->batch_a, ar, ac) : DFG_SHAPE(ar, ac);
    dfg_shape sb = m->batch_b ? DFG_SHAPE(m->batch_b, br, bc) : DFG_SHAPE(br, bc);
    dfg_tensor *y = dfg_matmul(g, dfg_input(g, "a", dt, sa), dfg_input(g, "b", dt, sb), m->ta, m->tb);
    return dfg_graph_status(g) ? NULL : y->producer;
}

static dfg_node *build_bias_add(dfg_graph *g, dfg_dtype dt, void *user) {
    const int64_t *s = user; /* rows, C */
    dfg_tensor *y = dfg_bias_add(g, dfg_input(g, "x", dt, DFG_SHAPE(s[0], s[1])), dfg_input(g, "b", dt, DFG_SHAPE(s[1])));
    return dfg_graph_status(g) ? NULL : y->producer;
}

int main(void) {
    if (!cuda_test_begin("test_cuda_matmul")) return DFG_TEST_SKIP;
    /* odd sizes, every transpose, batched on either side or both, a shared operand */
    const mm_case mm[] = {
        {0, 0, 1, 1, 1, false, false},  {0, 0, 7, 5, 3, false, false},  {0, 0, 7, 5, 3, true, false},
        {0, 0, 7, 5, 3, false, true},   {0, 0, 7, 5, 3, true, true},    {3, 3, 4, 6, 5, false, false},
        {3, 3, 4, 6, 5, true, true},    {2, 0, 33, 17, 9, false, false}, {2, 0, 33, 17, 9, false, true},
        {2, 0, 9, 17, 33, true, false}, {0, 4, 5, 6, 7, false, false},  {0, 4, 5, 6, 7, true, true},
        {1, 1, 65, 3, 129, false, true},
        /* the CPU's few-rows path (ops/cpu/matmul.c: invariant kernels, not OpenBLAS), checked here
         * against the GEMM descriptor's interpreter: NT up to 32 rows, NN up to 8, with K and N of
         * at least 64; a batch folded into 8 rows; a batch on both sides; and just past each limit */
        {0, 0, 8, 80, 96, false, true}, {0, 0, 8, 80, 96, false, false}, {4, 0, 2, 72, 130, false, true},
        {2, 2, 5, 70, 66, false, true}, {0, 0, 32, 64, 64, false, true}, {0, 0, 33, 64, 64, false, true},
        {0, 0, 9, 65, 70, false, false}, {0, 0, 3, 200, 63, false, true},
    };
    for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++) {
        char label[160];
        snprintf(label, sizeof(label), "matmul a%s(%lld,M%lld,K%lld)%s b%s(%lld,K,N%lld)%s", mm[i].ta ? "^T" : "",
                 (long long)mm[i].batch_a, (long long)mm[i].M, (long long)mm[i].K, "", mm[i].tb ? "^T" : "",
                 (long long)mm[i].batch_b, (long long)mm[i].N, "");
        cuda_case c = {.label = label, .build = build_matmul, .user = (void *)&mm[i], .bf16 = true, .rtol = 1e-5,
                       .atol = 1e-5, .seeds = 1};
        cuda_check(&c);
    }
    const int64_t ba[][2] = {{1, 1}, {3, 5}, {7, 64}, {33, 100}, {2, 1025}};
    for (size_t i = 0; i < sizeof(ba) / sizeof(ba[0]); i++) {
        char label[96];
        snprintf(label, sizeof(label), "bias_add (%lld, %lld)", (long long)ba[i][0], (long long)ba[i][1]);
        cuda_case c = {.label = label, .build = build_bias_add, .user = (void *)ba[i], .bf16 = true};
        cuda_check(&c);
    }
    return cuda_test_end();
}
