/* cli_device_rates.c - the measured CPU's rates at a shape or a size: log-space interpolation of
 * the grid cli_device.c measures (a GEMM's FLOP/s against log M, log N, log K; a kernel's bytes
 * per second against log bytes). Log space, because the grid's points are powers apart and the
 * rates change by factors, not by steps. Outside the grid the nearest edge's rate holds: a shape
 * bigger than the largest point runs at least as well as it, and a guess beyond it would be one. */
#include <math.h>

#include "cli_device.h"

const double cli_grid_m[CLI_GRID_M] = {1, 8, 64, 512};
const double cli_grid_nk[CLI_GRID_NK] = {64, 256, 1024};
const double cli_copy_bytes[2] = {256.0 * 1024, 128.0 * 1024 * 1024};

/* Where x falls on the axis (n points, increasing): the point below (*i) and the fraction of
 * the way to the next in log space; clamped to the ends. */
static void locate(const double *axis, int n, double x, int *i, double *f) {
    *i = 0, *f = 0;
    if (!(x > axis[0])) return; /* also a NaN or a zero dimension: the first point */
    if (x >= axis[n - 1]) {
        *i = n - 1;
        return;
    }
    while (*i < n - 2 && x >= axis[*i + 1]) (*i)++;
    *f = (log(x) - log(axis[*i])) / (log(axis[*i + 1]) - log(axis[*i]));
}

/* The log of the grid's rate at (i, j, k), the indices clamped to the grid. */
static double log_at(const double g[CLI_GRID_M][CLI_GRID_NK][CLI_GRID_NK], int i, int j, int k) {
    i = i < CLI_GRID_M ? i : CLI_GRID_M - 1, j = j < CLI_GRID_NK ? j : CLI_GRID_NK - 1, k = k < CLI_GRID_NK ? k : CLI_GRID_NK - 1;
    return log(g[i][j][k]);
}

double cli_gemm_rate(const cli_cpu_rates *r, bool one_thread, double M, double N, double K) {
    int i, j, k;
    double fi, fj, fk, sum = 0;
    locate(cli_grid_m, CLI_GRID_M, M, &i, &fi);
    locate(cli_grid_nk, CLI_GRID_NK, N, &j, &fj);
    locate(cli_grid_nk, CLI_GRID_NK, K, &k, &fk);
    for (int c = 0; c < 8; c++) { /* the cell's 8 corners, each weighted by its share (trilinear) */
        int di = c & 1, dj = (c >> 1) & 1, dk = (c >> 2) & 1;
        double w = (di ? fi : 1 - fi) * (dj ? fj : 1 - fj) * (dk ? fk : 1 - fk);
        if (w > 0) sum += w * log_at(r->gemm[one_thread], i + di, j + dj, k + dk);
    }
    return exp(sum);
}

double cli_copy_rate(const cli_cpu_rates *r, double bytes) {
    const double *bw = r->copy[bytes < CLI_ONE_THREAD_BYTES];
    int i;
    double f;
    locate(cli_copy_bytes, 2, bytes, &i, &f);
    return i == 1 ? bw[1] : exp((1 - f) * log(bw[0]) + f * log(bw[1]));
}

double cli_vector_rate(const cli_cpu_rates *r, bool transcendental, double bytes) {
    return r->vector[!transcendental][bytes < CLI_ONE_THREAD_BYTES];
}

double cli_update_rate(const cli_cpu_rates *r, double elements) { return r->update[elements <= CLI_ADAMW_ONE_THREAD]; }
