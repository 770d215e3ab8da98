/* dtype.h - scalar conversions between dfg's storage dtypes (round-to-nearest-even for 16-bit
 * floats, as the GPU converts). */
#ifndef DFG_DTYPE_H
#define DFG_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../graph/dfg_graph.h"

static inline uint32_t dfg_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float dfg_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t dfg_f32_to_bf16(float f) {
    uint32_t u = dfg_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float dfg_bf16_to_f32(uint16_t h) { return dfg_bits_f32((uint32_t)h << 16); }

static inline float dfg_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return dfg_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return dfg_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t dfg_f32_to_f16(float f) {
    uint32_t u = dfg_f32_bits(f), sign = (u >> 16) & 0x8000u;
    float a = fabsf(f);
    if (a != a) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity */
    if (a < 6.103515625e-05f) {                           /* subnormal: multiples of 2^-24 */
        float q = nearbyintf(a * 16777216.0f);
        return (uint16_t)(sign | (uint32_t)q);
    }
    uint32_t au = dfg_f32_bits(a);
    au += 0xfffu + ((au >> 13) & 1u); /* round the 13 dropped mantissa bits to nearest even */
    return (uint16_t)(sign | (((au >> 23) - 112u) << 10) | ((au >> 13) & 0x3ffu));
}

/* Element i of a buffer of dtype dt, as a double. */
static inline double dfg_load(const void *p, dfg_dtype dt, int64_t i) {
    switch (dt) {
    case DFG_F32: return ((const float *)p)[i];
    case DFG_BF16: return dfg_bf16_to_f32(((const uint16_t *)p)[i]);
    case DFG_F16: return dfg_f16_to_f32(((const uint16_t *)p)[i]);
    case DFG_I32: return ((const int32_t *)p)[i];
    case DFG_U8: return ((const uint8_t *)p)[i];
    default: return 0.0;
    }
}

/* Stores v as element i; integers saturate and truncate toward zero as C casts do. */
static inline void dfg_store(void *p, dfg_dtype dt, int64_t i, double v) {
    switch (dt) {
    case DFG_F32: ((float *)p)[i] = (float)v; break;
    case DFG_BF16: ((uint16_t *)p)[i] = dfg_f32_to_bf16((float)v); break;
    case DFG_F16: ((uint16_t *)p)[i] = dfg_f32_to_f16((float)v); break;
    case DFG_I32: ((int32_t *)p)[i] = v != v ? 0 : v >= 2147483647.0 ? 2147483647 : v <= -2147483648.0 ? INT32_MIN : (int32_t)v; break;
    case DFG_U8: ((uint8_t *)p)[i] = v != v ? 0 : v >= 255.0 ? 255 : v <= 0.0 ? 0 : (uint8_t)v; break;
    default: break;
    }
}

#endif
