// test_simt.cpp - the SIMT emulator's tests: each kernel of the .cu files (the same sources nvcc
// builds) run under several schedule seeds against a host reference, and each planted bug
// reported with kernel, block and thread. `test_simt NAME` runs one test; ctest runs each.
#include "dfg_simt.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "simt_test.h"

namespace {

// seed 0 is in order; the others draw the order of ready threads; one more is fresh each run
std::vector<uint64_t> seeds() {
    std::vector<uint64_t> s = {0, 1, 2, 3, 0x5eed5eedull};
    s.push_back(dfg_simt_test_u64() | 1);
    return s;
}

bool has(const char *msg, const char *needle) { return strstr(msg, needle) != nullptr; }

float nonzero_uniform() {
    const float v = dfg_simt_test_uniform(-1.0f, 1.0f);
    return v == 0.0f ? 0.5f : v;
}

// A launch must fail with `status`, and its message contain every needle.
void expect_report(cudaError_t err, int status, std::initializer_list<const char *> needles) {
    const char *msg = dfg_simt_last_message();
    const int got = dfg_simt_get_last_status();
    SIMT_CHECK(err != cudaSuccess, "the launch succeeded; expected status %d", status);
    SIMT_CHECK(got == status, "status %d, expected %d (%s)", got, status, msg);
    SIMT_CHECK(dfg_simt_get_last_status() == DFG_SIMT_OK, "the last status is not reset by reading it");
    for (const char *n : needles) SIMT_CHECK(has(msg, n), "message lacks \"%s\": %s", n, msg);
}

void expect_ok(cudaError_t err, const char *what) {
    SIMT_CHECK(err == cudaSuccess, "%s: %s", what, dfg_simt_last_message());
    dfg_simt_get_last_status();
}

// ---------------------------------------------------------------- reductions
void test_rowsum_bf16() {
    struct Shape {
        int rows, cols, threads;
    };
    // rows not multiples of 32, a single element, rows longer than a block, partial warps
    const Shape shapes[] = {{7, 1, 256}, {5, 31, 256},  {3, 33, 256}, {9, 255, 256}, {4, 1000, 256}, {3, 4097, 256},
                            {2, 100, 40}, {3, 70, 96}, {2, 5, 1},    {2, 17, 20},   {1, 3000, 1024}};
    for (const Shape &s : shapes) {
        std::vector<__nv_bfloat16> x((size_t)s.rows * s.cols);
        for (auto &v : x) v = __float2bfloat16(nonzero_uniform());
        std::vector<double> ref(s.rows, 0.0), mag(s.rows, 0.0);
        for (int r = 0; r < s.rows; r++)
            for (int c = 0; c < s.cols; c++) {
                ref[r] += __bfloat162float(x[(size_t)r * s.cols + c]);
                mag[r] += fabs(__bfloat162float(x[(size_t)r * s.cols + c]));
            }
        std::vector<float> first;
        for (uint64_t seed : seeds()) {
            dfg_simt_set_seed(seed);
            std::vector<float> out(s.rows);
            dfg_simt_test_poison(out.data(), out.size() * sizeof(float));
            expect_ok(dfg_simt_test_rowsum_bf16(x.data(), out.data(), s.rows, s.cols, s.threads), "rowsum");
            for (int r = 0; r < s.rows; r++)
                SIMT_CHECK(fabs(out[r] - ref[r]) <= 1e-5 * mag[r] + 1e-6,
                           "rows %d cols %d threads %d seed %llu: row %d sum %.9g, reference %.9g", s.rows, s.cols,
                           s.threads, (unsigned long long)seed, r, out[r], ref[r]);
            if (first.empty())
                first = out;
            else
                SIMT_CHECK(memcmp(first.data(), out.data(), out.size() * sizeof(float)) == 0,
                           "rows %d cols %d: seed %llu gives other bits than seed 0", s.rows, s.cols,
                           (unsigned long long)seed);
        }
    }
}

// n elements reduced in blocks of `threads`: both kernels, several seeds, identical bits
void check_tree(int n, int threads, bool dynamic) {
    std::vector<float> x(n);
    for (float &v : x) v = nonzero_uniform();
    const int blocks = (n + threads - 1) / threads;
    std::vector<double> ref(blocks, 0.0), mag(blocks, 0.0);
    for (int i = 0; i < n; i++) {
        ref[i / threads] += x[i];
        mag[i / threads] += fabs(x[i]);
    }
    std::vector<float> first;
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        std::vector<float> out(blocks);
        dfg_simt_test_poison(out.data(), out.size() * sizeof(float));
        expect_ok(dynamic ? dfg_simt_test_tree_reduce_dyn(x.data(), out.data(), n, threads)
                          : dfg_simt_test_tree_reduce(x.data(), out.data(), n),
                  "tree reduce");
        for (int b = 0; b < blocks; b++)
            SIMT_CHECK(fabs(out[b] - ref[b]) <= 1e-5 * mag[b] + 1e-6, "n %d threads %d%s seed %llu: block %d %.9g vs %.9g",
                       n, threads, dynamic ? " (dynamic)" : "", (unsigned long long)seed, b, out[b], ref[b]);
        if (first.empty())
            first = out;
        else
            SIMT_CHECK(memcmp(first.data(), out.data(), out.size() * sizeof(float)) == 0,
                       "n %d threads %d: seed %llu gives other bits", n, threads, (unsigned long long)seed);
    }
}

void test_tree_reduce() {
    for (int n : {1, 255, 256, 257, 1000, 4099}) check_tree(n, 256, false);
    for (int threads : {32, 64, 128, 256, 1024})
        for (int n : {1, 33, 1000, 4099}) check_tree(n, threads, true);
}

// ---------------------------------------------------------------- planted bugs
// thread 5 returns after others reach the barrier (in order); thread 0 before any does
void test_early_return() {
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        std::vector<float> out(3 * 64);
        expect_report(dfg_simt_test_early_return(out.data(), 5), DFG_SIMT_ERR_BARRIER,
                      {"dfg_simt_test_early_return_kernel", "block (2,0,0)", "thread (5,0,0)", "__syncthreads",
                       "bug_kernels.cu"});
        expect_report(dfg_simt_test_early_return(out.data(), 0), DFG_SIMT_ERR_BARRIER,
                      {"dfg_simt_test_early_return_kernel", "block (2,0,0) thread (0,0,0): exited without"});
    }
}

void test_missing_lane() {
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        std::vector<float> out(40);
        expect_report(dfg_simt_test_missing_lane(out.data()), DFG_SIMT_ERR_WARP,
                      {"dfg_simt_test_missing_lane_kernel", "block (0,0,0)", "thread (3", "mask 0xffffffff",
                       "do not exist", "__shfl_xor_sync"});
        // the same exchange with right masks is fine, and exact
        dfg_simt_test_poison(out.data(), out.size() * sizeof(float));
        expect_ok(dfg_simt_test_partial_warp_ok(out.data()), "partial warp");
        for (int i = 0; i < 40; i++)
            SIMT_CHECK(out[i] == (float)(i + (i ^ 1)), "lane %d: %g, expected %d", i, out[i], i + (i ^ 1));
    }
}

void test_dropped_lane() {
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        std::vector<float> out(32);
        expect_report(dfg_simt_test_dropped_lane(out.data()), DFG_SIMT_ERR_WARP,
                      {"dfg_simt_test_dropped_lane_kernel", "thread (31,0,0)", "mask 0x7fffffff",
                       "leaves out the calling lane 31"});
    }
}

void test_divergent_barriers() {
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        std::vector<float> out(64);
        expect_report(dfg_simt_test_divergent_barriers(out.data()), DFG_SIMT_ERR_BARRIER,
                      {"dfg_simt_test_divergent_barriers_kernel", "block (0,0,0) thread (", "while thread"});
    }
}

void test_deadlock() {
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        std::vector<float> out(32);
        expect_report(dfg_simt_test_warp_vs_barrier(out.data()), DFG_SIMT_ERR_DEADLOCK,
                      {"dfg_simt_test_warp_vs_barrier_kernel", "deadlock", "__shfl_sync", "lane 31",
                       "(31,0,0)", "waits at the __syncthreads"});
        expect_report(dfg_simt_test_exit_in_warp(out.data()), DFG_SIMT_ERR_WARP,
                      {"dfg_simt_test_exit_in_warp_kernel", "(31,0,0)", "exited", "__syncwarp"});
    }
}

void test_trap() {
    std::vector<float> out(64);
    expect_report(dfg_simt_test_trap(out.data()), DFG_SIMT_ERR_TRAP,
                  {"dfg_simt_test_trap_kernel", "block (1,0,0) thread (7,0,0)", "__trap()"});
    // the emulator is usable after any failure: stacks left mid-kernel are reset
    std::vector<float> x(5000), y(5000);
    for (float &v : x) v = nonzero_uniform();
    expect_ok(dfg_simt_test_tail_copy(x.data(), y.data(), 5000, 0), "copy after a trap");
    SIMT_CHECK(memcmp(x.data(), y.data(), sizeof(float) * 5000) == 0, "copy after a trap differs");
}

// ---------------------------------------------------------------- launch limits
void test_launch_limits() {
    int out = 0;
    expect_ok(dfg_simt_test_config(&out, 1, 1024), "1024 threads");
    expect_ok(dfg_simt_test_config(&out, 1, dim3(4, 4, 64)), "block.z 64");
    expect_ok(dfg_simt_test_config(&out, dim3(1, 65535, 1), 1), "grid.y 65535");
    expect_report(dfg_simt_test_config(&out, 1, 1025), DFG_SIMT_ERR_CONFIG,
                  {"dfg_simt_test_config_kernel", "1025 threads", "limit of 1024", "bug_kernels.cu"});
    SIMT_CHECK(dfg_simt_test_config(&out, 1, 1025) == cudaErrorInvalidConfiguration, "not cudaErrorInvalidConfiguration");
    dfg_simt_get_last_status();
    expect_report(dfg_simt_test_config(&out, 1, dim3(32, 32, 2)), DFG_SIMT_ERR_CONFIG, {"2048 threads"});
    expect_report(dfg_simt_test_config(&out, 1, dim3(1, 1, 65)), DFG_SIMT_ERR_CONFIG, {"(1,1,65)", "(1024,1024,64)"});
    expect_report(dfg_simt_test_config(&out, 1, dim3(2048, 1, 1)), DFG_SIMT_ERR_CONFIG, {"(2048,1,1)"});
    expect_report(dfg_simt_test_config(&out, dim3(1, 65536, 1), 32), DFG_SIMT_ERR_CONFIG, {"grid (1,65536,1)"});
    expect_report(dfg_simt_test_config(&out, dim3(1, 1, 65536), 32), DFG_SIMT_ERR_CONFIG, {"grid (1,1,65536)"});
    expect_report(dfg_simt_test_config(&out, 0, 32), DFG_SIMT_ERR_CONFIG, {"zero"});
    expect_report(dfg_simt_test_config(&out, 4, dim3(0, 1, 1)), DFG_SIMT_ERR_CONFIG, {"zero"});

    // dynamic shared memory: 48 KB without the opt-in, then 100 KB and 227 KB with it; each
    // block finds it poisoned (0xff bytes)
    int sm[2] = {-1, -1};
    expect_ok(dfg_simt_test_smem(sm, 64, 48 * 1024), "48 KB without opt-in");
    SIMT_CHECK(sm[0] == ((48 * 1024 - 1) & 0xff) && sm[1] == 0xff, "48 KB: read back %d, first byte %d", sm[0], sm[1]);
    expect_report(dfg_simt_test_smem(sm, 64, 49 * 1024), DFG_SIMT_ERR_SMEM,
                  {"dfg_simt_test_smem_kernel", "50176 bytes", "without the opt-in"});
    SIMT_CHECK(dfg_simt_test_smem_optin(100 * 1024) == cudaSuccess, "opt-in to 100 KB refused");
    sm[0] = sm[1] = -1;
    expect_ok(dfg_simt_test_smem(sm, 64, 100 * 1024), "100 KB with opt-in");
    SIMT_CHECK(sm[0] == ((100 * 1024 - 1) & 0xff) && sm[1] == 0xff, "100 KB: read back %d, first byte %d", sm[0], sm[1]);
    expect_report(dfg_simt_test_smem(sm, 64, 101 * 1024), DFG_SIMT_ERR_SMEM, {"over the kernel's opt-in"});
    SIMT_CHECK(dfg_simt_test_smem_optin(228 * 1024) == cudaErrorInvalidValue, "opt-in to 228 KB accepted");
    SIMT_CHECK(has(dfg_simt_last_message(), "233472 bytes"), "%s", dfg_simt_last_message());
    dfg_simt_get_last_status();
    expect_report(dfg_simt_test_smem(sm, 64, 228 * 1024), DFG_SIMT_ERR_SMEM, {"233472 bytes"});
    SIMT_CHECK(dfg_simt_test_smem_optin(227 * 1024) == cudaSuccess, "opt-in to 227 KB refused");
    expect_ok(dfg_simt_test_smem(sm, 1024, 227 * 1024), "227 KB with opt-in");
    // sm_80's smaller limit
    dfg_simt_set_smem_optin_limit(163 * 1024);
    SIMT_CHECK(dfg_simt_test_smem_optin(164 * 1024) == cudaErrorInvalidValue, "sm_80: opt-in to 164 KB accepted");
    expect_report(dfg_simt_test_smem(sm, 64, 200 * 1024), DFG_SIMT_ERR_SMEM, {"over the device's limit"});
    dfg_simt_set_smem_optin_limit(227 * 1024);
}

// ---------------------------------------------------------------- the schedule itself
// seed 0 runs threads in order; other seeds in orders that differ, and replay exactly; and
// atomics interleave: under fuzzing another thread may run between two atomics of one thread
void test_schedule_fuzzing() {
    const int blocks = 3, threads = 200, n = blocks * threads;
    std::vector<int> order(2 * n), counter(blocks), again(2 * n);
    auto run = [&](uint64_t seed, std::vector<int> &o) {
        dfg_simt_set_seed(seed);
        std::fill(counter.begin(), counter.end(), 0);
        expect_ok(dfg_simt_test_order(o.data(), counter.data(), blocks, threads), "order");
    };
    run(0, order);
    for (int i = 0; i < n; i++)
        SIMT_CHECK(order[i] == 2 * (i % threads) && order[n + i] == order[i] + 1, "seed 0: thread %d drew %d, %d", i,
                   order[i], order[n + i]);
    std::vector<int> prev;
    for (uint64_t seed : {1ull, 2ull, 0xfeedull}) {
        run(seed, order);
        run(seed, again);
        SIMT_CHECK(order == again, "seed %llu does not replay the same order", (unsigned long long)seed);
        int in_place = 0, interleaved = 0;
        for (int i = 0; i < n; i++) {
            in_place += order[i] == 2 * (i % threads);
            interleaved += order[n + i] != order[i] + 1;
        }
        SIMT_CHECK(in_place < n / 10, "seed %llu: %d of %d threads ran at their in-order rank", (unsigned long long)seed,
                   in_place, n);
        SIMT_CHECK(interleaved > n / 10, "seed %llu: only %d threads were interleaved between two atomics",
                   (unsigned long long)seed, interleaved);
        SIMT_CHECK(order != prev, "seeds give the same order");
        for (int b = 0; b < blocks; b++) { // each block's tickets are 0 .. 2 threads - 1, once each
            std::vector<int> sorted(order.begin() + b * threads, order.begin() + (b + 1) * threads);
            sorted.insert(sorted.end(), order.begin() + n + b * threads, order.begin() + n + (b + 1) * threads);
            std::sort(sorted.begin(), sorted.end());
            for (int i = 0; i < 2 * threads; i++) SIMT_CHECK(sorted[i] == i, "block %d tickets are not a permutation", b);
        }
        prev = order;
    }
}

// a race in-order execution cannot see (each thread's left neighbour has always run) and every
// fuzzed order exposes
void test_neighbour_race() {
    const int n = 4 * 256;
    std::vector<float> x(n), y(n);
    for (float &v : x) v = nonzero_uniform();
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        dfg_simt_test_poison(y.data(), n * sizeof(float));
        expect_ok(dfg_simt_test_neighbour_race(x.data(), y.data(), n), "neighbour race");
        int wrong = 0;
        for (int i = 0; i < n; i++) wrong += !(y[i] == (i % 256 ? x[i - 1] : 0.0f));
        if (seed == 0)
            SIMT_CHECK(wrong == 0, "in order, %d reads saw the race", wrong);
        else
            SIMT_CHECK(wrong > 0, "seed %llu did not expose the missing barrier", (unsigned long long)seed);
    }
}

// ---------------------------------------------------------------- warp semantics
// CUDA's documented shuffle semantics, per lane of a full warp, with PTX's b[4:0]
int shfl_ref(int mode, int lane, int arg, int width) {
    const int b = arg & 31, seg = lane / width * width, li = lane % width;
    switch (mode) {
    case 0: return seg + b % width;                               // idx: srcLane modulo width
    case 1: return li >= b ? lane - b : lane;                      // up: below the segment keeps its own
    case 2: return li + b < width ? lane + b : lane;               // down: past the segment keeps its own
    default: return ((lane ^ b) / width > lane / width) ? lane : (lane ^ b); // xor: later groups keep own
    }
}

template <class T, class Launch>
void check_shfl(const char *type, Launch launch, T (*make)(int)) {
    const int n = 128;
    std::vector<T> in(n), out(4 * n);
    for (int i = 0; i < n; i++) in[i] = make(i);
    for (int width : {32, 16, 8, 4, 2, 1})
        for (int arg : {0, 1, 2, 3, 5, 8, 15, 16, 31, 33, -1}) {
            dfg_simt_set_seed(dfg_simt_test_u64() % 3);
            dfg_simt_test_poison(out.data(), out.size() * sizeof(T));
            expect_ok(launch(in.data(), out.data(), n, arg, width), type);
            for (int mode = 0; mode < 4; mode++)
                for (int i = 0; i < n; i++) {
                    const int src = (i & ~31) + shfl_ref(mode, i & 31, arg, width);
                    SIMT_CHECK(memcmp(&out[mode * n + i], &in[src], sizeof(T)) == 0,
                               "%s mode %d width %d arg %d: thread %d did not get thread %d's value", type, mode,
                               width, arg, i, src);
                }
        }
}

void test_shuffles() {
    check_shfl<int>("int", dfg_simt_test_shfl_i32, [](int i) { return i * 1000 - 7; });
    check_shfl<unsigned>("unsigned", dfg_simt_test_shfl_u32, [](int i) { return 0x80000000u + (unsigned)i; });
    check_shfl<long long>("long long", dfg_simt_test_shfl_i64, [](int i) { return -(1ll << 40) * (i + 1); });
    check_shfl<unsigned long long>("unsigned long long", dfg_simt_test_shfl_u64,
                                   [](int i) { return (0xabcdull << 44) | (unsigned long long)i; });
    check_shfl<float>("float", dfg_simt_test_shfl_f32, [](int i) { return 0.5f + (float)i * 1.25f; });
    check_shfl<double>("double", dfg_simt_test_shfl_f64, [](int i) { return 1e300 / (i + 1); });
    check_shfl<__nv_bfloat16>("bf16", dfg_simt_test_shfl_bf16, [](int i) { return __float2bfloat16(i - 60.5f); });
    check_shfl<__nv_bfloat162>("bf16x2", dfg_simt_test_shfl_bf16x2,
                               [](int i) { return __floats2bfloat162_rn((float)i, -(float)i - 0.5f); });
}

void test_block3d() {
    for (dim3 block : {dim3(8, 4, 3), dim3(5, 3, 3), dim3(1, 1, 64), dim3(33, 1, 2)}) {
        const int threads = block.x * block.y * block.z, blocks = 2, n = blocks * threads;
        std::vector<int> out(4 * n);
        for (uint64_t seed : seeds()) {
            dfg_simt_set_seed(seed);
            dfg_simt_test_poison(out.data(), out.size() * sizeof(int));
            expect_ok(dfg_simt_test_block3d(out.data(), blocks, block), "3-D block");
            for (int i = 0; i < n; i++) {
                const int lin = i % threads;
                const int want[4] = {lin % (int)block.x, lin / (int)block.x % (int)block.y,
                                     lin / (int)(block.x * block.y), lin & ~31};
                for (int k = 0; k < 4; k++)
                    SIMT_CHECK(out[k * n + i] == want[k], "block (%u,%u,%u) thread %d: value %d is %d, expected %d",
                               block.x, block.y, block.z, i, k, out[k * n + i], want[k]);
            }
        }
    }
}

void test_shfl_outside_mask() {
    std::vector<int> out(64);
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        dfg_simt_test_poison(out.data(), out.size() * sizeof(int));
        for (int &v : out) v = 0;
        expect_ok(dfg_simt_test_shfl_outside_mask(out.data()), "shuffle outside the mask");
        for (int i = 0; i < 64; i++)
            SIMT_CHECK(out[i] == ((i & 31) < 16 ? -1 : 7), "thread %d read %d", i, out[i]);
    }
}

void test_votes() {
    for (int threads : {32, 40, 64, 96, 20, 1}) {
        const int blocks = 3, n = blocks * threads;
        std::vector<int> pred(n);
        for (int &p : pred) p = (int)(dfg_simt_test_u64() % 7) - 3;
        if (threads >= 32)
            for (int i = 0; i < 32; i++) pred[i] = i + 1; // one warp all true
        std::vector<unsigned> out(8 * n);
        for (uint64_t seed : seeds()) {
            dfg_simt_set_seed(seed);
            dfg_simt_test_poison(out.data(), out.size() * sizeof(unsigned));
            expect_ok(dfg_simt_test_votes(pred.data(), out.data(), n, threads), "votes");
            for (int i = 0; i < n; i++) {
                const int t = i % threads, wbase = i - t % 32, in_warp = std::min(32, threads - t / 32 * 32);
                const int lane = t % 32;
                unsigned ballot = 0, match = 0, sum = 0;
                int mn = 1 << 30;
                for (int l = 0; l < in_warp; l++) {
                    const int q = pred[wbase + l];
                    ballot |= (unsigned)(q != 0) << l;
                    match |= (unsigned)(q % 3 == pred[i] % 3) << l;
                    sum += (unsigned)q;
                    mn = std::min(mn, q);
                }
                const unsigned full = in_warp == 32 ? 0xffffffffu : (1u << in_warp) - 1;
                const int partner = lane ^ 1;
                const unsigned want[8] = {ballot,
                                          ballot != 0,
                                          ballot == full,
                                          match,
                                          sum,
                                          (unsigned)mn,
                                          partner < in_warp ? (unsigned)(pred[wbase + partner] * 7 + partner) : 0xdeadbeefu,
                                          (unsigned)pred[wbase]};
                for (int k = 0; k < 8; k++)
                    SIMT_CHECK(out[k * n + i] == want[k], "threads %d seed %llu: thread %d result %d is 0x%x, expected 0x%x",
                               threads, (unsigned long long)seed, i, k, out[k * n + i], want[k]);
            }
        }
    }
}

void test_syncthreads_ops() {
    const int blocks = 4, threads = 100, n = blocks * threads;
    std::vector<int> pred(n), out(3 * n);
    for (int i = 0; i < n; i++) pred[i] = (int)(dfg_simt_test_u64() % 3) == 0 ? 5 : 0;
    for (int i = 0; i < threads; i++) pred[i] = -1;          // block 0: all true
    for (int i = threads; i < 2 * threads; i++) pred[i] = 0; // block 1: all false
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        dfg_simt_test_poison(out.data(), out.size() * sizeof(int));
        expect_ok(dfg_simt_test_syncthreads_ops(pred.data(), out.data(), blocks, threads), "syncthreads ops");
        for (int b = 0; b < blocks; b++) {
            int count = 0;
            for (int t = 0; t < threads; t++) count += pred[b * threads + t] != 0;
            for (int t = 0; t < threads; t++) {
                const int i = b * threads + t;
                SIMT_CHECK(out[i] == count && out[n + i] == (count == threads) && out[2 * n + i] == (count > 0),
                           "block %d thread %d: count %d and %d or %d, expected %d %d %d", b, t, out[i], out[n + i],
                           out[2 * n + i], count, count == threads, count > 0);
            }
        }
    }
}

void test_atomics() {
    const int blocks = 5, threads = 96, T = blocks * threads;
    int vmax = -1000, vmin = 1000, or_bits = 0, and_bits = -1;
    unsigned usum = 0;
    for (int t = 0; t < T; t++) {
        const int v = (t * 7919) % 1000 - 500;
        vmax = std::max(vmax, v);
        vmin = std::min(vmin, v);
        or_bits |= 1 << (t % 31);
        and_bits &= ~(1 << (t % 29));
        usum += (unsigned)t;
    }
    for (uint64_t seed : seeds()) {
        dfg_simt_set_seed(seed);
        dfg_simt_test_atomics c;
        memset(&c, 0, sizeof c);
        c.add_i = 10;
        c.max_i = -600;
        c.min_i = 600;
        c.or_i = 1 << 31;
        c.and_i = -1;
        c.cas_i = 7;
        c.min_u = 100;
        c.add_f = 1.0f;
        c.add_bf16 = __float2bfloat16(0.0f);
        expect_ok(dfg_simt_test_atomics_run(&c, blocks, threads), "atomics");
        const unsigned long long ull = (unsigned long long)T << 40;
        SIMT_CHECK(c.add_i == 10 + T && c.sub_i == -2 * T && c.cas_i == 7 + 3 * T, "seed %llu: add %d sub %d cas %d",
                   (unsigned long long)seed, c.add_i, c.sub_i, c.cas_i);
        SIMT_CHECK(c.max_i == vmax && c.min_i == vmin, "max %d min %d, expected %d %d", c.max_i, c.min_i, vmax, vmin);
        SIMT_CHECK(c.or_i == (or_bits | (1 << 31)) && c.and_i == and_bits, "or 0x%x and 0x%x", c.or_i, c.and_i);
        SIMT_CHECK(c.add_u == usum && c.max_u == 3u * (T - 1) && c.min_u == 5u, "add_u %u max_u %u min_u %u", c.add_u,
                   c.max_u, c.min_u);
        SIMT_CHECK(c.inc_u == (unsigned)(T % 10), "atomicInc wrapped to %u, expected %d", c.inc_u, T % 10);
        SIMT_CHECK(c.exch_u >= 1 && c.exch_u <= (unsigned)T, "atomicExch left %u", c.exch_u);
        SIMT_CHECK(c.add_ull == ull, "add_ull %llu", c.add_ull);
        SIMT_CHECK(c.add_f == 1.0f + 0.25f * T && c.add_d == 0.5 * T, "add_f %g add_d %g", c.add_f, c.add_d);
        SIMT_CHECK(__bfloat162float(c.add_bf16) == 100.0f, "add_bf16 %g", __bfloat162float(c.add_bf16));
    }
}

// ---------------------------------------------------------------- the launch macro itself
__global__ void dfg_simt_test_count_kernel(int *out /* (1) */, int v) { atomicAdd(out, v); }

template <class T, int K>
__global__ void dfg_simt_test_template_kernel(T *out /* (gridDim.x * blockDim.x) */, T base) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = base + (T)(K * threadIdx.x);
}

int g_evaluations = 0;
int next_value() { return ++g_evaluations; }

void test_launch_macro() {
    // an argument is evaluated once, at the launch, however many threads read it
    int out = 0;
    g_evaluations = 0;
    expect_ok(DFG_LAUNCH(dfg_simt_test_count_kernel, 2, 32, 0, 0, &out, next_value() + 4), "count");
    SIMT_CHECK(g_evaluations == 1 && out == 64 * 5, "argument evaluated %d times, sum %d", g_evaluations, out);
    // a temporary's data(): captured by value at the launch, before the temporary dies
    std::vector<long> v(96, -1);
    expect_ok(DFG_LAUNCH((dfg_simt_test_template_kernel<long, 3>), 3, 32, 0, 0, v.data(), std::vector<long>(1, 7)[0]),
              "template kernel");
    for (int i = 0; i < 96; i++) SIMT_CHECK(v[i] == 7 + 3 * (i % 32), "v[%d] = %ld", i, v[i]);
    // the same form in a .cu file nvcc builds too
    std::vector<long long> r(64, -1);
    expect_ok(dfg_simt_test_ramp(r.data(), -5, 2), "ramp");
    for (int i = 0; i < 64; i++) SIMT_CHECK(r[i] == -5 + 3 * (i % 32), "r[%d] = %lld", i, r[i]);
}

struct Test {
    const char *name;
    void (*fn)();
};
const Test kTests[] = {
    {"rowsum_bf16", test_rowsum_bf16},
    {"tree_reduce", test_tree_reduce},
    {"early_return", test_early_return},
    {"missing_lane", test_missing_lane},
    {"dropped_lane", test_dropped_lane},
    {"divergent_barriers", test_divergent_barriers},
    {"deadlock", test_deadlock},
    {"trap", test_trap},
    {"launch_limits", test_launch_limits},
    {"shuffles", test_shuffles},
    {"shfl_outside_mask", test_shfl_outside_mask},
    {"block3d", test_block3d},
    {"votes", test_votes},
    {"syncthreads_ops", test_syncthreads_ops},
    {"atomics", test_atomics},
    {"launch_macro", test_launch_macro},
    {"schedule_fuzzing", test_schedule_fuzzing},
    {"neighbour_race", test_neighbour_race},
};

} // namespace

int main(int argc, char **argv) {
    int ran = 0;
    for (const Test &t : kTests) {
        if (argc > 1 && strcmp(argv[1], t.name) != 0) continue;
        dfg_simt_test_init(t.name);
        t.fn();
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "test_simt: no test named %s\n", argv[1]);
        return 2;
    }
    if (dfg_simt_test_failures) fprintf(stderr, "test_simt: %d check(s) failed\n", dfg_simt_test_failures);
    return dfg_simt_test_failures ? 1 : 0;
}
