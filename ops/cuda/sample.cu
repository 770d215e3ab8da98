// sample.cu - categorical sampling with temperature and top-k (ops/index.c's sample; reference
// kernel ops/cpu/sample.c), drawing the same Philox uniforms (ops/philox.h) and picking the SAME
// token as the CPU for the same logits, bit for bit.
//
// That needs the CPU's floating-point steps exactly. ops/cpu/sample.c defines them for this: the
// weights exp((z - max) / T) come from sample_exp (correctly rounded +, -, *, / and rint only;
// here spelled with __dadd_rn/__dmul_rn so nvcc contracts nothing into an FMA), and
// the sums run in a blocked order a warp reproduces: the vocabulary in blocks of 256; in a block,
// lane l sums tokens 8l .. 8l+7 in order and the 32 lane sums meet in the xor butterfly (the
// CPU's halving tree); the blocks' sums are added in vocabulary order. The walk: the first block
// whose running sum passes u * total, in it the first lane (lane sums added in order), in that
// lane the first token; where rounding leaves no crossing, the last kept token of that block or
// lane. The k-th largest logit (top-k's threshold) is an order statistic, so any exact method
// gives the CPU's value: here a 4-pass radix select on the float bits.
//
// Row r draws its uniform at Philox position {counter, row0 + r}: row0 (the node's optional third
// input, read from device memory so a replayed CUDA Graph sees its current value; nullptr: 0) is
// the batch index of the call's first row, as on the CPU; with one element per row, each row's
// batch index (rows gathered from anywhere in the batch).
//
// A block of 256 threads per row: pass 1 the argmax (first index of the max) and a NaN check;
// top-k: 4 histogram passes; pass 2 the block sums (warp per block, 16-byte loads when the rows
// are aligned); one thread turns them into running sums; the crossing block is found by all
// threads, the lane and the token by warp 0. A second one-thread launch advances the RNG counter
// after every row has read it (the state is updated in place).
#include "common.cuh"

#include <limits.h>

#include "../philox.h"

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kBlock = 256, kPerLane = 8; // the CPU's SAMPLE_BLOCK and SAMPLE_PER_LANE

// ---------------------------------------------------------------- the CPU's arithmetic
// exp(x) for x <= 0 (0 below -708, -inf and NaN), operation for operation ops/cpu/sample.c's.
static __device__ __forceinline__ double sample_exp(double x) {
    if (!(x > -708.0)) return 0.0;
    const double k = rint(__dmul_rn(x, 1.4426950408889634));
    double r = __dadd_rn(x, -__dmul_rn(k, 6.93147180369123816490e-01));
    r = __dadd_rn(r, -__dmul_rn(k, 1.90821492927058770002e-10));
    double p = 2.08767569878681e-09; // 1/12!, then Horner down to 1/0!
    p = __dadd_rn(__dmul_rn(p, r), 2.505210838544172e-08);
    p = __dadd_rn(__dmul_rn(p, r), 2.755731922398589e-07);
    p = __dadd_rn(__dmul_rn(p, r), 2.7557319223985893e-06);
    p = __dadd_rn(__dmul_rn(p, r), 2.48015873015873e-05);
    p = __dadd_rn(__dmul_rn(p, r), 0.0001984126984126984);
    p = __dadd_rn(__dmul_rn(p, r), 0.001388888888888889);
    p = __dadd_rn(__dmul_rn(p, r), 0.008333333333333333);
    p = __dadd_rn(__dmul_rn(p, r), 0.041666666666666664);
    p = __dadd_rn(__dmul_rn(p, r), 0.16666666666666666);
    p = __dadd_rn(__dmul_rn(p, r), 0.5);
    p = __dadd_rn(__dmul_rn(p, r), 1.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0);
    return __dmul_rn(p, __longlong_as_double((long long)((int64_t)k + 1023) << 52));
}

// token weight: exp((z - m) / T) when kept (z >= thr), else 0; inv_t = 1 / (double)T, divided on the
// host (a division per token would be slower, and its slow path spills)
static __device__ __forceinline__ double weight(float z, float thr, float m, double inv_t) {
    if (!(z >= thr)) return 0.0;
    return sample_exp(__dmul_rn(__dadd_rn((double)z, -(double)m), inv_t));
}

// ---------------------------------------------------------------- loads
// The 8 logits of a lane's slot (tokens j .. j+7) as floats; valid[i]: j + i < v. VEC: the row is
// 16-byte aligned and v a multiple of the vector (the values are the same either way).
template <class T, bool VEC>
static __device__ __forceinline__ void lane_logits(const T *row, int64_t j, int64_t v, float *x) {
    if (VEC && j + kPerLane <= v) {
        dfg_ld16(row + j, x);
        if (dfg_vec16<T>::n == 4) dfg_ld16(row + j + 4, x + 4);
        return;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; i++) x[i] = j + i < v ? dfg_ld(row, j + i) : 0.0f;
}

// A lane's logits x, weights w and their in-order sum (the CPU's lane_sum: only tokens < v added).
template <class T, bool VEC>
static __device__ __forceinline__ double lane_weights(const T *row, int64_t j, int64_t v, float thr, float m, double inv_t,
                                                      float *x, double *w) {
    lane_logits<T, VEC>(row, j, v, x);
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < kPerLane; i++) {
        w[i] = j + i < v ? weight(x[i], thr, m, inv_t) : 0.0;
        if (j + i < v) s = __dadd_rn(s, w[i]);
    }
    return s;
}

// ---------------------------------------------------------------- block helpers
// the block's first maximum: (value, index), larger value first, then smaller index (indices fit
// an int: the block sums' shared memory caps the vocabulary far below 2^31)
struct Cand {
    float v;
    int i;
};
struct FirstMax {
    __device__ __forceinline__ Cand operator()(Cand a, Cand b) const {
        return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
    }
};
// the CPU's pairwise step of a lane sum: correctly rounded, never contracted
struct AddRn {
    __device__ __forceinline__ double operator()(double a, double b) const { return __dadd_rn(a, b); }
};

// Ascending uint order of floats (no NaN): flip the sign bit of positives, every bit of negatives.
static __device__ __forceinline__ unsigned order_key(float x) {
    const unsigned b = __float_as_uint(x);
    return b & 0x80000000u ? ~b : b | 0x80000000u;
}
static __device__ __forceinline__ float key_value(unsigned k) {
    return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

// The k-th largest value of the row (1 <= k <= v): radix select from the top byte of the order
// key, one histogram (shared integer atomics: exact counts) per byte. Every thread gets it.
template <class T>
static __device__ __forceinline__ float kth_largest(const T *row, int64_t v, int64_t k, unsigned *hist, unsigned *sel) {
    unsigned prefix = 0, mask = 0;
    int64_t kk = k; // rank still wanted among the keys matching prefix under mask
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[threadIdx.x] = 0; // 256 threads, 256 bins
        __syncthreads();
        dfg_row_visit<T, kThreads, true>(row, v, (int)threadIdx.x, [&](int64_t, float x) {
            const unsigned key = order_key(x);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        });
        __syncthreads();
        if (threadIdx.x < 32) { // warp 0: lane l holds digits 255-8l down to 248-8l
            const int lane = threadIdx.x;
            unsigned c = 0;
            for (int i = 0; i < 8; i++) c += hist[255 - 8 * lane - i];
            unsigned above = c; // inclusive scan from lane 0 (the top digits)
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned t = __shfl_up_sync(0xffffffffu, above, o);
                if (lane >= o) above += t;
            }
            above -= c;
            if ((int64_t)above < kk && kk <= (int64_t)(above + c)) {
                int64_t cum = above;
                for (int i = 0; i < 8; i++) {
                    const unsigned h = hist[255 - 8 * lane - i];
                    if (cum + h >= kk) {
                        sel[0] = 255u - 8u * lane - i;
                        sel[1] = (unsigned)(kk - cum);
                        break;
                    }
                    cum += h;
                }
            }
        }
        __syncthreads();
        prefix |= sel[0] << shift;
        mask |= 255u << shift;
        kk = sel[1];
        __syncthreads(); // hist and sel are rewritten by the next pass
    }
    return key_value(prefix);
}

// ---------------------------------------------------------------- the kernels
template <class T, bool VEC>
static __global__ void __launch_bounds__(kThreads)
    sample_kernel(const T *logits,       // (rows, V)
                  const int32_t *rng,    // (4) key lo, key hi, counter lo, counter hi
                  const int32_t *row0,   // () the batch index of row 0, (rows) each row's, or nullptr (0)
                  bool per_row,          // row0 holds one index per row
                  int32_t *tok,          // (rows)
                  int64_t v, float temp, double inv_t, int top_k,
                  int *flags) {          // (1) set on a row holding a NaN (its token: 0)
    DFG_SHARED_DYNAMIC(double, run);     // (ceil(V / 256)) block sums, then running sums
    __shared__ Cand s_best[kWarps];
    __shared__ unsigned hist[256], sel[2];
    __shared__ double s_target;
    __shared__ int64_t s_block;
    const int64_t r = blockIdx.x;
    const T *row = logits + r * v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // pass 1: the first maximum and any NaN
    const FirstMax first_max;
    Cand best = {-INFINITY, INT_MAX};
    bool nan = false;
    dfg_row_visit<T, kThreads, true>(row, v, (int)threadIdx.x, [&](int64_t j, float x) {
        if (x != x) nan = true;
        else best = first_max(best, Cand{x, (int)j});
    });
    if (__syncthreads_or(nan)) {
        if (threadIdx.x == 0) {
            atomicOr(flags, 1);
            tok[r] = 0;
        }
        return;
    }
    best = dfg_block_fold<kWarps>(best, s_best, Cand{-INFINITY, INT_MAX}, first_max);
    const float m = best.v;
    if (!(temp > 0.0f) || fabsf(m) == INFINITY) { // greedy; all -inf; an +inf max (as the CPU)
        if (threadIdx.x == 0) tok[r] = (int32_t)best.i;
        return;
    }
    const float thr = top_k > 0 && top_k < v ? kth_largest(row, v, top_k, hist, sel) : -INFINITY;

    // pass 2: block sums (a warp per 256-token block), then running sums in vocabulary order
    const int64_t nb = (v + kBlock - 1) / kBlock;
    for (int64_t b = warp; b < nb; b += kWarps) {
        float x[kPerLane];
        double w[kPerLane];
        double s = lane_weights<T, VEC>(row, b * kBlock + lane * kPerLane, v, thr, m, inv_t, x, w);
        s = dfg_warp_reduce(s, AddRn()); // the xor butterfly from offset 16: the CPU's halving tree
        if (lane == 0) run[b] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int64_t b = 0; b < nb; b++) run[b] = total = __dadd_rn(total, run[b]);
        const int64_t row = per_row ? (int64_t)row0[r] : (row0 ? (int64_t)*row0 : 0) + r; // as the CPU
        const dfg_philox_ctr c = dfg_philox4x32(
            dfg_philox_row_ctr((uint64_t)(uint32_t)rng[2] | ((uint64_t)(uint32_t)rng[3] << 32), (uint64_t)row),
            (uint32_t)rng[0], (uint32_t)rng[1]);
        s_target = __dmul_rn((double)dfg_philox_uniform(c.v[0]), total);
        s_block = nb - 1; // no crossing (cannot happen: target < total): the last block, as the CPU
    }
    __syncthreads();
    const double target = s_target;
    for (int64_t b = threadIdx.x; b < nb; b += kThreads) // the running sums never decrease: one crossing
        if (run[b] > target && (b == 0 || !(run[b - 1] > target))) s_block = b;
    __syncthreads();
    if (warp != 0) return; // no barrier below

    // warp 0: the crossing lane of the block, then its token
    const int64_t b = s_block, j0 = b * kBlock + lane * kPerLane;
    float x[kPerLane];
    double w[kPerLane];
    const double s = lane_weights<T, VEC>(row, j0, v, thr, m, inv_t, x, w);
    double p = b ? run[b - 1] : 0.0, before = p, after = p; // running sums before and after this lane
    for (int l = 0; l < 32; l++) { // lane sums added in lane order, as the CPU; every lane the same sums
        const double sl = __shfl_sync(0xffffffffu, s, l);
        if (l == lane) before = p;
        p = __dadd_rn(p, sl);
        if (l == lane) after = p;
    }
    int64_t last = -1; // this lane's last kept token
#pragma unroll
    for (int i = 0; i < kPerLane; i++)
        if (j0 + i < v && x[i] >= thr) last = j0 + i;
    const unsigned cross = __ballot_sync(0xffffffffu, after > target && (lane == 0 || !(before > target)));
    if (cross) { // the running sums never decrease: one lane crosses
        if (lane == __ffs(cross) - 1) {
            double q = before;
            int64_t pick = last >= 0 ? last : j0;
            for (int i = 0; i < kPerLane && j0 + i < v; i++) {
                q = __dadd_rn(q, w[i]);
                if (q > target) {
                    pick = j0 + i;
                    break;
                }
            }
            tok[r] = (int32_t)pick;
        }
    } else { // rounding left no crossing lane: the block's last kept token
        const int64_t bl = dfg_warp_reduce(last, DfgMax());
        if (lane == 0) tok[r] = (int32_t)(bl >= 0 ? bl : b * kBlock);
    }
}

// rng_out = rng with the 64-bit counter + by, after every row read rng (they may be one tensor)
static __global__ void __launch_bounds__(32) rng_advance_kernel(const int32_t *rng, // (4)
                                                                int32_t *rng_out,   // (4)
                                                                uint64_t by) {
    if (threadIdx.x != 0) return;
    const uint64_t ctr = ((uint64_t)(uint32_t)rng[2] | ((uint64_t)(uint32_t)rng[3] << 32)) + by;
    rng_out[0] = rng[0], rng_out[1] = rng[1];
    rng_out[2] = (int32_t)(uint32_t)ctr, rng_out[3] = (int32_t)(uint32_t)(ctr >> 32);
}

} // namespace

DFG_CUDA_SCRATCH(sample) {
    (void)n;
    return 0;
}

DFG_CUDA_LAUNCHER(sample) {
    const dfg_shape xs = n->in[0]->shape;
    const int64_t v = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / v;
    const float temp = n->attr->sample.temperature;
    const double inv_t = 1.0 / (double)temp; // as the CPU: one correctly rounded division
    const int top_k = n->attr->sample.top_k;
    const size_t smem = sizeof(double) * (size_t)((v + kBlock - 1) / kBlock);
    const cudaStream_t stream = (cudaStream_t)ctx->stream;
    const int32_t *row0 = n->n_in > 2 ? (const int32_t *)in[2] : nullptr;
    const bool per_row = row0 && rows > 1 && dfg_shape_numel(n->in[2]->shape) == rows;
    cudaError_t e = cudaSuccess;
    if (smem > 200u * 1024u)
        return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "a vocabulary of %lld is beyond the kernel's shared memory",
                             (long long)v);
    if (rows > 0) {
        DFG_CUDA_FLOAT_DISPATCH(ctx, n, n->in[0], T, {
            const bool vec = v % dfg_vec16<T>::n == 0 && (uintptr_t)in[0] % 16 == 0;
            if (vec) {
                if (smem > 48u * 1024u) e = DFG_SET_MAX_DYNAMIC_SMEM((sample_kernel<T, true>), smem);
                if (e == cudaSuccess)
                    e = DFG_LAUNCH((sample_kernel<T, true>), (unsigned)rows, kThreads, smem, stream, (const T *)in[0],
                                   (const int32_t *)in[1], row0, per_row, (int32_t *)out[0], v, temp, inv_t, top_k,
                                   ctx->flags);
            } else {
                if (smem > 48u * 1024u) e = DFG_SET_MAX_DYNAMIC_SMEM((sample_kernel<T, false>), smem);
                if (e == cudaSuccess)
                    e = DFG_LAUNCH((sample_kernel<T, false>), (unsigned)rows, kThreads, smem, stream, (const T *)in[0],
                                   (const int32_t *)in[1], row0, per_row, (int32_t *)out[0], v, temp, inv_t, top_k,
                                   ctx->flags);
            }
        });
        dfg_status st = dfg_cuda_launched(ctx, n, e, "sample_kernel");
        if (st) return st;
    }
    e = DFG_LAUNCH(rng_advance_kernel, 1, 32, 0, stream, (const int32_t *)in[1], (int32_t *)out[1], (uint64_t)1);
    return dfg_cuda_launched(ctx, n, e, "rng_advance_kernel");
}

// RNG_ADVANCE: the counter moves on by n draws, in place (a decode loop that ended early)
DFG_CUDA_LAUNCHER(rng_advance) {
    const cudaError_t e = DFG_LAUNCH(rng_advance_kernel, 1, 32, 0, (cudaStream_t)ctx->stream, (const int32_t *)in[0],
                                     (int32_t *)out[0], (uint64_t)n->attr->rng_advance.n);
    return dfg_cuda_launched(ctx, n, e, "rng_advance_kernel");
}
