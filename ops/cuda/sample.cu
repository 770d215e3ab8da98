// sample.cu - categorical sampling with TRL's settings: repetition penalty, temperature, top-k,
// top-p, min-p (ops/index.c's sample; reference kernel ops/cpu/sample.c), drawing the same Philox
// uniforms (ops/philox.h) and picking the SAME token as the CPU for the same logits, bit for bit.
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
// gives the CPU's value: here a 4-pass radix select on the float bits. Top-p's smallest kept order
// key a (the least key whose strictly larger tokens' blocked weight sum is below top_p times the
// top-k total) is found by 8 passes of 4-bit digits, each summing the 15 candidate keys' blocked
// sums at once in the CPU's order: the CPU's bisection finds the same key, since the blocked sum
// is the same function on both. The repetition penalty reads the row's counted ids as a bitmap in
// shared memory (V bits beside the block sums).
//
// Row r draws its uniform at Philox position {counter, row0 + r}: row0 (the node's optional third
// input, read from device memory so a replayed CUDA Graph sees its current value; nullptr: 0) is
// the batch index of the call's first row, as on the CPU; with one element per row, each row's
// batch index (rows gathered from anywhere in the batch).
//
// A block of 256 threads per row: the penalty's bitmap; pass 1 the argmax (first index of the max)
// and a NaN check; top-k: 4 histogram passes; top-p: the top-k total, then 8 digit passes; pass 2 the block sums (warp per block, 16-byte loads when the rows
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

// The repetition penalty on token j's logit x (transformers': z < 0 ? z * p : z / p, in f32), for
// the ids set in the row's bitmap (NULL: none)
struct Penalty {
    const unsigned *seen;
    float p;
    __device__ __forceinline__ float operator()(int64_t j, float x) const {
        if (seen && (seen[j >> 5] >> (j & 31) & 1u)) x = x < 0.0f ? __fmul_rn(x, p) : __fdiv_rn(x, p);
        return x;
    }
};

// Ascending uint order of floats (no NaN): flip the sign bit of positives, every bit of negatives.
static __device__ __forceinline__ unsigned order_key(float x) {
    const unsigned b = __float_as_uint(x);
    return b & 0x80000000u ? ~b : b | 0x80000000u;
}
static __device__ __forceinline__ float key_value(unsigned k) {
    return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

// What keeps a token's weight: z >= thr (top-k), order_key(z) >= key_min (top-p), weight >= w_min
// (min-p); m the row's max, inv_t = 1 / (double)T, divided on the host (a division per token would
// be slower, and its slow path spills)
struct Filter {
    float thr, m;
    unsigned key_min;
    double w_min, inv_t;
};

// token weight under top-k alone: exp((z - m) / T) when z >= thr, else 0
static __device__ __forceinline__ double weight_k(float z, const Filter &f) {
    if (!(z >= f.thr)) return 0.0;
    return sample_exp(__dmul_rn(__dadd_rn((double)z, -(double)f.m), f.inv_t));
}
// token weight: 0 unless it passes every filter (the CPU's weight)
static __device__ __forceinline__ double weight(float z, const Filter &f) {
    if (order_key(z) < f.key_min) return 0.0;
    const double w = weight_k(z, f);
    return w >= f.w_min ? w : 0.0;
}
// whether a token of penalised logit z and weight w passes every filter (the CPU's kept)
static __device__ __forceinline__ bool kept(float z, double w, const Filter &f) {
    return z >= f.thr && order_key(z) >= f.key_min && (f.w_min == 0.0 || w > 0.0);
}

// ---------------------------------------------------------------- loads
// The 8 logits of a lane's slot (tokens j .. j+7) as floats, penalised. VEC: the row is 16-byte
// aligned and v a multiple of the vector (the values are the same either way).
template <class T, bool VEC>
static __device__ __forceinline__ void lane_logits(const T *row, int64_t j, int64_t v, const Penalty &pen, float *x) {
    if (VEC && j + kPerLane <= v) {
        dfg_ld16(row + j, x);
        if (dfg_vec16<T>::n == 4) dfg_ld16(row + j + 4, x + 4);
    } else {
#pragma unroll
        for (int i = 0; i < kPerLane; i++) x[i] = j + i < v ? dfg_ld(row, j + i) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; i++)
        if (j + i < v) x[i] = pen(j + i, x[i]);
}

// A lane's logits x, weights w and their in-order sum (the CPU's lane_sum: only tokens < v added).
template <class T, bool VEC>
static __device__ __forceinline__ double lane_weights(const T *row, int64_t j, int64_t v, const Penalty &pen,
                                                      const Filter &f, float *x, double *w) {
    lane_logits<T, VEC>(row, j, v, pen, x);
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < kPerLane; i++) {
        w[i] = j + i < v ? weight(x[i], f) : 0.0;
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

// The k-th largest penalised value of the row (1 <= k <= v): radix select from the top byte of the
// order key, one histogram (shared integer atomics: exact counts) per byte. Every thread gets it.
template <class T>
static __device__ __forceinline__ float kth_largest(const T *row, int64_t v, int64_t k, const Penalty &pen, unsigned *hist,
                                                    unsigned *sel) {
    unsigned prefix = 0, mask = 0;
    int64_t kk = k; // rank still wanted among the keys matching prefix under mask
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[threadIdx.x] = 0; // 256 threads, 256 bins
        __syncthreads();
        dfg_row_visit<T, kThreads, true>(row, v, (int)threadIdx.x, [&](int64_t j, float x) {
            const unsigned key = order_key(pen(j, x));
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

// The block sums of the row's weights under f, a warp per 256-token block (the xor butterfly
// from offset 16: the CPU's halving tree), into run[b]; then thread 0 makes them running sums in
// vocabulary order and returns the total (other threads: 0). Ends with a barrier.
template <class T, bool VEC>
static __device__ __forceinline__ double block_sums(const T *row, int64_t v, const Penalty &pen, const Filter &f,
                                                    double *run) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nb = (v + kBlock - 1) / kBlock;
    for (int64_t b = warp; b < nb; b += kWarps) {
        float x[kPerLane];
        double w[kPerLane];
        const double s = dfg_warp_reduce(lane_weights<T, VEC>(row, b * kBlock + lane * kPerLane, v, pen, f, x, w), AddRn());
        if (lane == 0) run[b] = s;
    }
    __syncthreads();
    double total = 0.0;
    if (threadIdx.x == 0)
        for (int64_t b = 0; b < nb; b++) run[b] = total = __dadd_rn(total, run[b]);
    __syncthreads();
    return total;
}

constexpr int kDigits = 15; // top-p's candidate keys a pass: the digit values 0 .. 14 (15 needs no sum)

// Top-p's smallest kept order key: the least key a with S(a) < bound, S(a) the blocked sum (the
// CPU's order) of the top-k weights of tokens whose key exceeds a. 8 passes fix a's 4-bit digits
// from the top: candidate d's key is the prefix, d, then all ones below; a's digit is the least d
// whose S is below bound (S never rises with the key). Every thread gets a.
template <class T, bool VEC>
static __device__ __forceinline__ unsigned top_p_key(const T *row, int64_t v, const Penalty &pen, const Filter &f,
                                                     double bound, double (*part)[kDigits], double *tot,
                                                     unsigned *s_prefix) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nb = (v + kBlock - 1) / kBlock;
    unsigned prefix = 0;
    for (int shift = 28; shift >= 0; shift -= 4) {
        const unsigned low = (1u << shift) - 1u; // shift 28: the bits below the top digit
        if (threadIdx.x < kDigits) tot[threadIdx.x] = 0.0;
        for (int64_t b0 = 0; b0 < nb; b0 += kWarps) { // kWarps blocks at a time, added in block order
            const int64_t b = b0 + warp, j = b * kBlock + lane * kPerLane;
            double acc[kDigits];
#pragma unroll
            for (int d = 0; d < kDigits; d++) acc[d] = 0.0;
            if (b < nb) {
                float x[kPerLane];
                lane_logits<T, VEC>(row, j, v, pen, x);
                for (int i = 0; i < kPerLane && j + i < v; i++) {
                    const double w = weight_k(x[i], f);
                    const unsigned key = order_key(x[i]);
#pragma unroll
                    for (int d = 0; d < kDigits; d++)
                        acc[d] = __dadd_rn(acc[d], key > (prefix | ((unsigned)d << shift) | low) ? w : 0.0);
                }
            }
#pragma unroll
            for (int d = 0; d < kDigits; d++) {
                const double sd = dfg_warp_reduce(acc[d], AddRn());
                if (lane == 0) part[warp][d] = sd; // 0 past the last block: adding it changes nothing
            }
            __syncthreads();
            if (threadIdx.x < kDigits)
                for (int w = 0; w < kWarps; w++) tot[threadIdx.x] = __dadd_rn(tot[threadIdx.x], part[w][threadIdx.x]);
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            unsigned d = 0;
            while (d < kDigits && !(tot[d] < bound)) d++;
            *s_prefix = prefix | (d << shift);
        }
        __syncthreads();
        prefix = *s_prefix;
        __syncthreads(); // s_prefix and tot are rewritten by the next pass
    }
    return prefix;
}

// The kernel's arguments, one struct (a launch passes it by value)
struct SampleArgs {
    const int32_t *rng;     // (4) key lo, key hi, counter lo, counter hi
    const int32_t *row0;    // () the batch index of row 0, (rows) each row's, or nullptr (0)
    bool per_row;           // row0 holds one index per row
    const int32_t *hist;    // (rows, H) the penalty's ids, or nullptr
    int64_t H;
    const int32_t *hist_len; // () or (rows): the ids of columns < it count
    bool len_per_row;
    int32_t skip;           // an id never counted
    int32_t *tok;           // (rows)
    float *logp;            // (rows) the tokens' sampling log-probs, or nullptr
    int64_t v;
    float temp, top_p, min_p, penalty;
    double inv_t;
    int top_k;
    int *flags; // (1) set on a row holding a NaN (its token: 0)
};

template <class T, bool VEC>
static __global__ void __launch_bounds__(kThreads) sample_kernel(const T *logits, // (rows, V)
                                                                 const SampleArgs a) {
    DFG_SHARED_DYNAMIC(double, run); // (ceil(V / 256)) block sums, then running sums; the bitmap after
    __shared__ Cand s_best[kWarps];
    __shared__ unsigned hist[256], sel[2];
    __shared__ double s_target, s_total, part[kWarps][kDigits], tot[kDigits];
    __shared__ int64_t s_block;
    const int64_t r = blockIdx.x, v = a.v, nb = (v + kBlock - 1) / kBlock;
    const T *row = logits + r * v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // the penalty's bitmap: the row's counted ids
    Penalty pen = {nullptr, a.penalty};
    if (a.hist) {
        unsigned *seen = reinterpret_cast<unsigned *>(run + nb);
        const int64_t words = (v + 31) / 32, l = a.hist_len[a.len_per_row ? r : 0], len = l < 0 ? 0 : l > a.H ? a.H : l;
        for (int64_t i = threadIdx.x; i < words; i += kThreads) seen[i] = 0u;
        __syncthreads();
        for (int64_t t = threadIdx.x; t < len; t += kThreads) {
            const int32_t id = a.hist[r * a.H + t];
            if (id != a.skip && id >= 0 && id < v) atomicOr(&seen[id >> 5], 1u << (id & 31));
        }
        __syncthreads();
        pen.seen = seen;
    }

    // pass 1: the first maximum of the penalised logits, and any NaN
    const FirstMax first_max;
    Cand best = {-INFINITY, INT_MAX};
    bool nan = false;
    dfg_row_visit<T, kThreads, true>(row, v, (int)threadIdx.x, [&](int64_t j, float x) {
        if (x != x) nan = true;
        else best = first_max(best, Cand{pen(j, x), (int)j});
    });
    if (__syncthreads_or(nan)) {
        if (threadIdx.x == 0) {
            atomicOr(a.flags, 1);
            a.tok[r] = 0;
            if (a.logp) a.logp[r] = 0.0f;
        }
        return;
    }
    best = dfg_block_fold<kWarps>(best, s_best, Cand{-INFINITY, INT_MAX}, first_max);
    Filter f = {-INFINITY, best.v, 0u, 0.0, a.inv_t};
    if (!(a.temp > 0.0f) || fabsf(f.m) == INFINITY) { // greedy; all -inf; an +inf max (as the CPU)
        if (threadIdx.x == 0) {
            a.tok[r] = (int32_t)best.i;
            if (a.logp) a.logp[r] = 0.0f;
        }
        return;
    }
    if (a.top_k > 0 && a.top_k < v) f.thr = kth_largest(row, v, a.top_k, pen, hist, sel);
    if (a.top_p > 0.0f && a.top_p < 1.0f) {
        const double total_k = block_sums<T, VEC>(row, v, pen, f, run);
        if (threadIdx.x == 0) s_total = total_k;
        __syncthreads();
        f.key_min = top_p_key<T, VEC>(row, v, pen, f, __dmul_rn((double)a.top_p, s_total), part, tot, sel);
    }
    if (a.min_p > 0.0f) f.w_min = (double)a.min_p;

    // pass 2: block sums, running sums, the draw
    const double total = block_sums<T, VEC>(row, v, pen, f, run);
    if (threadIdx.x == 0) {
        const int64_t row_i = a.per_row ? (int64_t)a.row0[r] : (a.row0 ? (int64_t)*a.row0 : 0) + r; // as the CPU
        const dfg_philox_ctr c = dfg_philox4x32(
            dfg_philox_row_ctr((uint64_t)(uint32_t)a.rng[2] | ((uint64_t)(uint32_t)a.rng[3] << 32), (uint64_t)row_i),
            (uint32_t)a.rng[0], (uint32_t)a.rng[1]);
        s_target = __dmul_rn((double)dfg_philox_uniform(c.v[0]), total);
        s_total = total;
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
    const double s = lane_weights<T, VEC>(row, j0, v, pen, f, x, w);
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
        if (j0 + i < v && kept(x[i], w[i], f)) last = j0 + i;
    const unsigned cross = __ballot_sync(0xffffffffu, after > target && (lane == 0 || !(before > target)));
    int64_t pick = -1;
    if (cross) { // the running sums never decrease: one lane crosses
        if (lane == __ffs(cross) - 1) {
            double q = before;
            pick = last >= 0 ? last : j0;
            for (int i = 0; i < kPerLane && j0 + i < v; i++) {
                q = __dadd_rn(q, w[i]);
                if (q > target) {
                    pick = j0 + i;
                    break;
                }
            }
        }
    } else { // rounding left no crossing lane: the block's last kept token
        const int64_t bl = dfg_warp_reduce(last, DfgMax());
        if (lane == 0) pick = bl >= 0 ? bl : b * kBlock;
    }
    if (pick >= 0) {
        a.tok[r] = (int32_t)pick;
        if (a.logp) // log w - log total, as the CPU: the weight's exponent, exactly
            a.logp[r] = (float)(__dmul_rn(__dadd_rn((double)pen(pick, dfg_ld(row, pick)), -(double)f.m), f.inv_t) -
                                log(s_total));
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
    const dfg_attrs_sample *at = &n->attr->sample;
    const int64_t v = xs.d[xs.rank - 1], rows = dfg_shape_numel(xs) / v;
    const bool penalise = n->n_in == 5 && at->repetition_penalty > 0.0f && at->repetition_penalty != 1.0f; // as the CPU
    SampleArgs a = {};
    a.rng = (const int32_t *)in[1];
    a.row0 = n->n_in > 2 ? (const int32_t *)in[2] : nullptr;
    a.per_row = a.row0 && rows > 1 && dfg_shape_numel(n->in[2]->shape) == rows;
    a.hist = penalise ? (const int32_t *)in[3] : nullptr;
    a.H = penalise ? n->in[3]->shape.d[1] : 0;
    a.hist_len = penalise ? (const int32_t *)in[4] : nullptr;
    a.len_per_row = penalise && dfg_shape_numel(n->in[4]->shape) == rows && rows > 1; // as the CPU
    a.skip = at->history_skip;
    a.tok = (int32_t *)out[0];
    a.logp = n->n_out > 2 ? (float *)out[2] : nullptr;
    a.v = v, a.temp = at->temperature, a.top_k = at->top_k;
    a.top_p = at->top_p, a.min_p = at->min_p, a.penalty = at->repetition_penalty;
    a.inv_t = 1.0 / (double)at->temperature; // as the CPU: one correctly rounded division
    a.flags = ctx->flags;
    const size_t smem = sizeof(double) * (size_t)((v + kBlock - 1) / kBlock) +
                        (penalise ? sizeof(unsigned) * (size_t)((v + 31) / 32) : 0);
    const cudaStream_t stream = (cudaStream_t)ctx->stream;
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
                    e = DFG_LAUNCH((sample_kernel<T, true>), (unsigned)rows, kThreads, smem, stream, (const T *)in[0], a);
            } else {
                if (smem > 48u * 1024u) e = DFG_SET_MAX_DYNAMIC_SMEM((sample_kernel<T, false>), smem);
                if (e == cudaSuccess)
                    e = DFG_LAUNCH((sample_kernel<T, false>), (unsigned)rows, kThreads, smem, stream, (const T *)in[0], a);
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
