/* fuzz_replay.c - runs the libFuzzer entry point without libFuzzer, as a ctest: every file of a
 * corpus directory, then a fixed number of deterministic mutations of them (bit flips,
 * truncations, insertions, deletions, header-length tweaks, JSON-significant bytes, splices).
 * Usage: fuzz_safetensors_replay CORPUS_DIR [MUTATIONS] [SEED]. Each seed must parse; the
 * counts of mutants that parsed and that failed are printed and must both be non-zero, so the
 * mutations reach the checks rather than all dying at the first one. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_SEEDS 256
#define REPLAY_MAX_INPUT (1 << 16)

typedef struct {
    unsigned char *b;
    size_t n;
} blob;

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static size_t rng_below(uint64_t *s, size_t n) { return n ? (size_t)(rng_next(s) % n) : 0; }

static int load_corpus(const char *dir, blob *seeds) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < REPLAY_MAX_SEEDS;) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        blob b = {malloc(REPLAY_MAX_INPUT), 0};
        b.n = fread(b.b, 1, REPLAY_MAX_INPUT, f);
        fclose(f);
        seeds[n++] = b;
    }
    closedir(d);
    return n;
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* One mutation of buf (length *n, capacity REPLAY_MAX_INPUT) in place. */
static void mutate(uint64_t *s, unsigned char *buf, size_t *n, const blob *seeds, int n_seeds) {
    static const char interesting[] = "\"{}[],:-.0123456789eE\\ \x00\xff\xc3\x80nulltruefalse";
    switch (rng_below(s, 8)) {
    case 0: /* bit flips */
        for (size_t k = 1 + rng_below(s, 4); k-- && *n;) buf[rng_below(s, *n)] ^= (unsigned char)(1u << rng_below(s, 8));
        break;
    case 1: /* truncation */
        *n = rng_below(s, *n + 1);
        break;
    case 2: { /* insertion of random bytes */
        size_t k = 1 + rng_below(s, 8), at = rng_below(s, *n + 1);
        if (*n + k > REPLAY_MAX_INPUT) break;
        memmove(buf + at + k, buf + at, *n - at);
        for (size_t i = 0; i < k; i++) buf[at + i] = (unsigned char)rng_next(s);
        *n += k;
        break;
    }
    case 3: { /* deletion of a range */
        if (!*n) break;
        size_t at = rng_below(s, *n), k = 1 + rng_below(s, *n - at);
        memmove(buf + at, buf + at + k, *n - at - k);
        *n -= k;
        break;
    }
    case 4: { /* header-length tweaks: small deltas, the whole file, zero, huge */
        if (*n < 8) break;
        uint64_t h = get_u64(buf), choices[6] = {h + 1, h - 1, h + 8 * (1 + rng_below(s, 4)), *n - 8, 0, rng_next(s)};
        put_u64(buf, choices[rng_below(s, 6)]);
        break;
    }
    case 5: /* a JSON-significant byte over a random one */
        if (*n) buf[rng_below(s, *n)] = (unsigned char)interesting[rng_below(s, sizeof(interesting) - 1)];
        break;
    case 6: { /* a digit changed (offsets, dims) */
        size_t start = rng_below(s, *n + 1);
        for (size_t i = start; i < *n; i++)
            if (buf[i] >= '0' && buf[i] <= '9') {
                buf[i] = (unsigned char)('0' + rng_below(s, 10));
                break;
            }
        break;
    }
    default: { /* splice: the tail of another seed */
        const blob *o = &seeds[rng_below(s, (size_t)n_seeds)];
        size_t at = rng_below(s, *n + 1), from = rng_below(s, o->n + 1), k = o->n - from;
        if (at + k > REPLAY_MAX_INPUT) k = REPLAY_MAX_INPUT - at;
        memcpy(buf + at, o->b + from, k);
        *n = at + k;
        break;
    }
    }
}

static bool parses(const unsigned char *b, size_t n) {
    dfg_safetensors *st = NULL;
    char err[64];
    dfg_status s = dfg_st_parse(b, n, &st, err, sizeof(err));
    dfg_st_free(st);
    return s == DFG_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS] [SEED]\n", argv[0]);
        return 2;
    }
    long iters = argc > 2 ? atol(argv[2]) : 20000;
    uint64_t rng = argc > 3 ? strtoull(argv[3], NULL, 0) : 20240601u;
    blob seeds[REPLAY_MAX_SEEDS];
    int n_seeds = load_corpus(argv[1], seeds);
    if (n_seeds <= 0) {
        fprintf(stderr, "%s: no corpus files in '%s'\n", argv[0], argv[1]);
        return 1;
    }
    int failures = 0;
    for (int i = 0; i < n_seeds; i++) {
        LLVMFuzzerTestOneInput(seeds[i].b, seeds[i].n);
        if (!parses(seeds[i].b, seeds[i].n)) fprintf(stderr, "seed %d does not parse\n", i), failures++;
    }
    unsigned char *buf = malloc(REPLAY_MAX_INPUT);
    long ok = 0;
    for (long it = 0; it < iters; it++) {
        const blob *b = &seeds[rng_below(&rng, (size_t)n_seeds)];
        size_t n = b->n;
        memcpy(buf, b->b, n);
        for (size_t k = 1 + rng_below(&rng, 3); k--;) mutate(&rng, buf, &n, seeds, n_seeds);
        /* an exact-size copy, so a sanitizer sees reads past the end */
        unsigned char *in = malloc(n ? n : 1);
        memcpy(in, buf, n);
        LLVMFuzzerTestOneInput(in, n);
        ok += parses(in, n);
        free(in);
    }
    printf("fuzz_safetensors_replay: %d seeds, %ld mutants: %ld parsed, %ld rejected\n", n_seeds, iters, ok, iters - ok);
    if (iters > 100 && (ok == 0 || ok == iters)) fprintf(stderr, "mutants all parsed or all failed\n"), failures++;
    free(buf);
    for (int i = 0; i < n_seeds; i++) free(seeds[i].b);
    return failures ? 1 : 0;
}
