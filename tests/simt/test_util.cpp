// test_util.cpp - random inputs and checks of the SIMT emulator's tests.
#include "dfg_simt.h"

#include <ctime>

#include "simt_test.h"

int dfg_simt_test_failures = 0;

static uint64_t g_state;

uint64_t dfg_simt_test_init(const char *name) {
    const char *s = getenv("DFG_TEST_SEED");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t seed = s ? strtoull(s, nullptr, 0) : (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    g_state = seed;
    printf("%s: DFG_TEST_SEED=%llu\n", name, (unsigned long long)seed);
    return seed;
}

uint64_t dfg_simt_test_u64(void) {
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float dfg_simt_test_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((dfg_simt_test_u64() >> 40) * (1.0 / 16777216.0));
}

void dfg_simt_test_poison(void *p, size_t bytes) { memset(p, 0xff, bytes); }
