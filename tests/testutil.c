/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dfg_test_failures = 0;
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static const char *test_name_ = "test";

uint64_t dfg_test_init(const char *name) {
    test_name_ = name;
    const char *env = getenv("DFG_TEST_SEED");
    uint64_t seed;
    if (env && *env) seed = strtoull(env, NULL, 0);
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    rng_state = seed ? seed : 1;
    printf("%s: seed %llu (replay with DFG_TEST_SEED=%llu)\n", name, (unsigned long long)seed,
           (unsigned long long)seed);
    return seed;
}

int dfg_test_finish(void) {
    if (dfg_test_failures) {
        printf("%s: %d check(s) failed\n", test_name_, dfg_test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", test_name_);
    return 0;
}

uint64_t dfg_test_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float dfg_test_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(dfg_test_u64() >> 11) * (1.0 / 9007199254740992.0));
}

float dfg_test_normal(void) {
    double u1 = ((double)(dfg_test_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(dfg_test_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int dfg_test_int(int lo, int hi) { return lo + (int)(dfg_test_u64() % (uint64_t)(hi - lo + 1)); }

void dfg_test_fill_uniform(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = dfg_test_uniform(lo, hi);
}

void dfg_test_fill_normal(float *x, int64_t n, float std) {
    for (int64_t i = 0; i < n; i++) x[i] = std * dfg_test_normal();
}

void dfg_test_poison(void *x, size_t bytes) {
    /* 0xFFC0DEAD as f32 is a NaN with a recognisable payload */
    const unsigned char pat[4] = {0xAD, 0xDE, 0xC0, 0xFF};
    for (size_t i = 0; i < bytes; i++) ((unsigned char *)x)[i] = pat[i % 4];
}

double dfg_test_max_rel_err(const float *a, const float *b, int64_t n, double floor) {
    double maxb = floor, maxd = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs((double)b[i]) > maxb) maxb = fabs((double)b[i]);
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return NAN; /* a NaN anywhere fails every tolerance */
        if (d > maxd) maxd = d;
    }
    return maxd / maxb;
}
