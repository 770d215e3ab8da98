/* base_digest.c - which frozen base a LoRA plan's adapters were trained on: a digest of the base
 * weights as loaded (dfg_weights_base_digest), recorded in a run's checkpoint, so that resuming
 * on another base is refused instead of training the adapters on top of weights they were not
 * made for. The digest is XXH64 (Yann Collet's xxHash, 64-bit; not cryptographic: it tells bases
 * apart, it does not authenticate them), over every base tensor's name, dtype, shape and bytes in
 * program order: the hash of an 8B base is a few seconds, not the minutes of SHA-256 in C. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weights_internal.h"

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

typedef struct {
    uint64_t v[4], total;
    unsigned char buf[32];
    size_t used;
} xxh64;

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t read64(const unsigned char *p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | p[i]; /* little-endian on every host */
    return x;
}
static uint32_t read32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t round64(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static uint64_t merge64(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * P1 + P4; }

static void xxh_init(xxh64 *h) {
    *h = (xxh64){.v = {P1 + P2, P2, 0, (uint64_t)0 - P1}};
}

static void xxh_stripe(xxh64 *h, const unsigned char *p) {
    for (int i = 0; i < 4; i++) h->v[i] = round64(h->v[i], read64(p + 8 * i));
}

static void xxh_update(xxh64 *h, const void *data, size_t n) {
    const unsigned char *p = data;
    h->total += n;
    if (h->used) {
        size_t k = 32 - h->used < n ? 32 - h->used : n;
        memcpy(h->buf + h->used, p, k), h->used += k, p += k, n -= k;
        if (h->used < 32) return;
        xxh_stripe(h, h->buf), h->used = 0;
    }
    for (; n >= 32; p += 32, n -= 32) xxh_stripe(h, p);
    memcpy(h->buf, p, n), h->used = n;
}

static uint64_t xxh_final(const xxh64 *h) {
    uint64_t acc = h->total >= 32 ? rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) + rotl(h->v[3], 18) : h->v[2] + P5;
    if (h->total >= 32)
        for (int i = 0; i < 4; i++) acc = merge64(acc, h->v[i]);
    acc += h->total;
    const unsigned char *p = h->buf;
    size_t n = h->used;
    for (; n >= 8; p += 8, n -= 8) acc = rotl(acc ^ round64(0, read64(p)), 27) * P1 + P4;
    if (n >= 4) acc = rotl(acc ^ (uint64_t)read32(p) * P1, 23) * P2 + P3, p += 4, n -= 4;
    for (; n; p++, n--) acc = rotl(acc ^ *p * P5, 11) * P1;
    acc ^= acc >> 33, acc *= P2, acc ^= acc >> 29, acc *= P3;
    return acc ^ (acc >> 32);
}

/* A tensor's description into the digest, the same bytes on every host. */
static void digest_header(xxh64 *h, const dfg_tensor *t) {
    unsigned char le[8];
    xxh_update(h, t->name, strlen(t->name) + 1);
    le[0] = (unsigned char)t->dtype, le[1] = (unsigned char)t->shape.rank;
    xxh_update(h, le, 2);
    for (int d = 0; d < t->shape.rank; d++) {
        for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)t->shape.d[d] >> (8 * i));
        xxh_update(h, le, 8);
    }
}

dfg_status dfg_weights_base_digest(dfg_runtime *rt, char *out, size_t len) {
    if (!rt || !out || len < 24) return DFG_ERR_ARG;
    out[0] = '\0';
    const dfg_program *p = dfg_runtime_program(rt);
    size_t largest = 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->role == DFG_ROLE_BASE_MODEL && dfg_tensor_bytes(p->tensors[i]) > largest)
            largest = dfg_tensor_bytes(p->tensors[i]);
    if (!largest) return DFG_OK; /* no frozen base */
    void *host = malloc(largest);
    if (!host) return dfg_wt_fail(rt, DFG_ERR_NOMEM, false, "base digest: out of memory (%zu bytes)", largest);
    xxh64 h;
    xxh_init(&h);
    dfg_status s = DFG_OK;
    for (int i = 0; i < p->n_tensors && !s; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->role != DFG_ROLE_BASE_MODEL) continue;
        if ((s = dfg_runtime_read(rt, t->name, host, dfg_tensor_bytes(t)))) break;
        digest_header(&h, t);
        xxh_update(&h, host, dfg_tensor_bytes(t));
    }
    free(host);
    if (s) return dfg_wt_fail(rt, s, false, "base digest: reading the base weights failed: %s", dfg_runtime_error(rt));
    snprintf(out, len, "xxh64:%016llx", (unsigned long long)xxh_final(&h));
    return DFG_OK;
}

dfg_status dfg_weights_check_base(dfg_runtime *rt, const char *recorded, const char *recorded_from,
                                  const char *checkpoint, const char *weights) {
    if (!rt) return DFG_ERR_ARG;
    if (!recorded || !*recorded) return DFG_OK; /* a checkpoint from before digests, or of no LoRA plan */
    char now[32];
    dfg_status s = dfg_weights_base_digest(rt, now, sizeof(now));
    if (s || !strcmp(now, recorded)) return s;
    return dfg_wt_fail(rt, DFG_ERR_ARG, false,
                       "%s was trained on base %s (%s), --weights %s is %s: resume with the same base",
                       checkpoint ? checkpoint : "the checkpoint", recorded,
                       recorded_from && *recorded_from ? recorded_from : "weights not named", weights ? weights : "(none)",
                       now[0] ? now : "no frozen base");
}
