/* philox.h - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
 * the counter-based generator behind dfg's sampling and initialisation. Header-only and usable
 * from C and CUDA, so the CPU and the GPU draw the same stream from the same (key, counter). */
#ifndef DFG_PHILOX_H
#define DFG_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define DFG_HD __host__ __device__ __forceinline__
#else
#define DFG_HD static inline
#endif

typedef struct {
    uint32_t v[4];
} dfg_philox_ctr;

DFG_HD void dfg_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* Ten rounds of the Philox S-box with the key schedule (Weyl sequence) between rounds. */
DFG_HD dfg_philox_ctr dfg_philox4x32(dfg_philox_ctr c, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        dfg_philox_mulhilo(0xD2511F53u, c.v[0], &hi0, &lo0);
        dfg_philox_mulhilo(0xCD9E8D57u, c.v[2], &hi1, &lo1);
        dfg_philox_ctr n;
        n.v[0] = hi1 ^ c.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ c.v[3] ^ k1;
        n.v[3] = lo0;
        c = n;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

/* A uniform float in [0, 1) from the top 24 bits of x (exactly representable). */
DFG_HD float dfg_philox_uniform(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* The stream position used by sampling: row r of a call with 64-bit counter `ctr`. */
DFG_HD dfg_philox_ctr dfg_philox_row_ctr(uint64_t ctr, uint64_t row) {
    dfg_philox_ctr c;
    c.v[0] = (uint32_t)ctr;
    c.v[1] = (uint32_t)(ctr >> 32);
    c.v[2] = (uint32_t)row;
    c.v[3] = (uint32_t)(row >> 32);
    return c;
}

#endif
