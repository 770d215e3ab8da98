/* test_device_rates.c - the measured CPU's rates at a shape or a size (tools/cli_device_rates.c)
 * on made-up grids whose answers are known, no measurement and no wall time: a grid that is a
 * power law in M, N and K is linear in log space, so its interpolation is exact between the
 * points; a shape outside the grid takes the nearest edge's rate; the copy's rate takes one
 * thread's column below the size dfg's kernels split, and interpolates in log(bytes); the other
 * kernels' FLOP rate is their class's, one thread's below that size. */
#include <math.h>

#include "../tools/cli_device.h"
#include "testutil.h"

/* rate = 1e9 * M^0.5 * N^0.25 * K^0.125 (one_thread: a tenth of it) */
static double law(double M, double N, double K) { return 1e9 * pow(M, 0.5) * pow(N, 0.25) * pow(K, 0.125); }

static cli_cpu_rates power_law_grid(void) {
    cli_cpu_rates r = {.threads = 4};
    for (int i = 0; i < CLI_GRID_M; i++)
        for (int j = 0; j < CLI_GRID_NK; j++)
            for (int k = 0; k < CLI_GRID_NK; k++) {
                r.gemm[0][i][j][k] = law(cli_grid_m[i], cli_grid_nk[j], cli_grid_nk[k]);
                r.gemm[1][i][j][k] = 0.1 * r.gemm[0][i][j][k];
            }
    r.copy[0][0] = 40e9, r.copy[0][1] = 10e9; /* the run's threads: in cache, not */
    r.copy[1][0] = 20e9, r.copy[1][1] = 5e9;  /* one thread */
    r.vector[0][0] = 3e9, r.vector[0][1] = 1e9; /* transcendental: the run's threads, one */
    r.vector[1][0] = 8e9, r.vector[1][1] = 2e9; /* the rest */
    return r;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

static void test_gemm_rate(void) {
    cli_cpu_rates r = power_law_grid();
    /* at the points, and between them (a power law is exact in log space) */
    const double in[][3] = {{1, 64, 64}, {512, 1024, 1024}, {8, 256, 64}, {64, 1024, 256}, {3, 100, 700}, {200, 128, 512}};
    for (size_t s = 0; s < sizeof(in) / sizeof(in[0]); s++) {
        double M = in[s][0], N = in[s][1], K = in[s][2], got = cli_gemm_rate(&r, false, M, N, K);
        CHECK(near(got, law(M, N, K)), "(%g, %g, %g): %.17g FLOP/s, the law %.17g", M, N, K, got, law(M, N, K));
        got = cli_gemm_rate(&r, true, M, N, K);
        CHECK(near(got, 0.1 * law(M, N, K)), "(%g, %g, %g) on one thread: %.17g, the law's tenth %.17g", M, N, K, got,
              0.1 * law(M, N, K));
    }
    /* outside the grid: the nearest edge, each axis on its own */
    CHECK(near(cli_gemm_rate(&r, false, 4096, 50257, 768), law(512, 1024, 768)), "past M and N: their last points");
    CHECK(near(cli_gemm_rate(&r, false, 0.5, 8, 2), law(1, 64, 64)), "below every axis: the first point");
    CHECK(near(cli_gemm_rate(&r, false, 0, 64, 64), law(1, 64, 64)), "a zero dimension: the first point, not a NaN");
    CHECK(near(cli_gemm_rate(&r, false, 64, 1e9, 16), law(64, 1024, 64)), "N clamped high, K low");
}

static void test_copy_rate(void) {
    cli_cpu_rates r = power_law_grid();
    double lo = cli_copy_bytes[0], hi = cli_copy_bytes[1], mid = sqrt(lo * hi);
    CHECK(near(cli_copy_rate(&r, hi), 10e9) && near(cli_copy_rate(&r, 4 * hi), 10e9), "out of cache: the large copy's rate");
    CHECK(near(cli_copy_rate(&r, mid), 20e9), "half way in log(bytes): the geometric mean, %.17g", cli_copy_rate(&r, mid));
    CHECK(lo >= CLI_ONE_THREAD_BYTES, "the cache point is a size dfg's kernels split over the threads");
    CHECK(near(cli_copy_rate(&r, lo), 40e9), "at the cache point: the run's threads' in-cache rate");
    CHECK(near(cli_copy_rate(&r, CLI_ONE_THREAD_BYTES / 2), 20e9), "below the split: one thread's in-cache rate");
    CHECK(near(cli_copy_rate(&r, 64), 20e9), "a few bytes: one thread's, clamped to the cache point");
}

static void test_vector_rate(void) {
    cli_cpu_rates r = power_law_grid();
    double big = CLI_ONE_THREAD_BYTES * 4, small = CLI_ONE_THREAD_BYTES / 4;
    CHECK(cli_vector_rate(&r, true, big) == 3e9 && cli_vector_rate(&r, false, big) == 8e9,
          "split over the threads: each class's rate on the run's threads");
    CHECK(cli_vector_rate(&r, true, small) == 1e9 && cli_vector_rate(&r, false, small) == 2e9,
          "below the split: each class's one-thread rate");
}

int main(void) {
    dfg_test_init("test_device_rates");
    test_gemm_rate();
    test_copy_rate();
    test_vector_rate();
    return dfg_test_finish();
}
