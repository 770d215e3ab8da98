/* test_philox.c - the Philox4x32-10 generator against the published Random123 known-answer
 * vectors, and the properties sampling relies on (uniforms in [0, 1), distinct rows). */
#include "ops/philox.h"
#include "testutil.h"

typedef struct {
    uint32_t ctr[4], key[2], want[4];
} kat;

static const kat kats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

int main(void) {
    dfg_test_init("test_philox");
    for (size_t i = 0; i < sizeof(kats) / sizeof(kats[0]); i++) {
        dfg_philox_ctr c = {{kats[i].ctr[0], kats[i].ctr[1], kats[i].ctr[2], kats[i].ctr[3]}};
        dfg_philox_ctr r = dfg_philox4x32(c, kats[i].key[0], kats[i].key[1]);
        for (int j = 0; j < 4; j++)
            CHECK(r.v[j] == kats[i].want[j], "vector %zu word %d: got %08x want %08x", i, j, r.v[j], kats[i].want[j]);
    }
    /* uniforms: never 1.0, mean near 1/2 over many draws, rows of one call differ */
    uint32_t k0 = (uint32_t)dfg_test_u64(), k1 = (uint32_t)dfg_test_u64();
    uint64_t ctr = dfg_test_u64();
    double sum = 0.0;
    int n = 200000, same = 0;
    float prev = -1.0f;
    for (int r = 0; r < n; r++) {
        float u = dfg_philox_uniform(dfg_philox4x32(dfg_philox_row_ctr(ctr, (uint64_t)r), k0, k1).v[0]);
        CHECK(u >= 0.0f && u < 1.0f, "uniform %g out of [0, 1)", u);
        same += u == prev;
        prev = u;
        sum += u;
    }
    double mean = sum / n; /* std of the mean is 1/sqrt(12 n) ~ 6.5e-4 */
    CHECK(mean > 0.5 - 0.004 && mean < 0.5 + 0.004, "mean of %d uniforms is %g", n, mean);
    CHECK(same < 5, "%d consecutive rows drew the same uniform", same);
    return dfg_test_finish();
}
