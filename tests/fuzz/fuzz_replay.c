/* fuzz_replay.c - runs a harness's libFuzzer entry point without libFuzzer, as a ctest: every
 * file of a corpus directory, then a fixed number of deterministic mutations of them (bit
 * flips, truncations, insertions, deletions, integer tweaks, the format's significant bytes,
 * digits, splices). One driver for every harness: linked with fuzz_safetensors.c it is
 * fuzz_safetensors_replay, with fuzz_plan.c fuzz_plan_replay (fuzz_target.h says what a harness
 * tells it). Usage: NAME CORPUS_DIR [MUTATIONS] [SEED]. Each seed must be accepted (but for
 * regress_* files: inputs that once crashed a reader, kept as they were found); the counts of
 * mutants the reader accepted and refused are printed and must both be non-zero, so the
 * mutations reach the checks rather than all dying at the first one. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"

#define REPLAY_MAX_SEEDS 256
#define REPLAY_MAX_INPUT (1 << 16)

typedef struct {
    unsigned char *b;
    size_t n;
    bool must_accept; /* false for regress_* files: inputs that once crashed, often refused */
} blob;

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static size_t rng_below(uint64_t *s, size_t n) { return n ? (size_t)(rng_next(s) % n) : 0; }

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The corpus files in name order (the mutations depend on the order, so it must not be the
 * file system's). */
static int load_corpus(const char *dir, blob *seeds) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char *names[REPLAY_MAX_SEEDS];
    int n_names = 0;
    for (struct dirent *e; (e = readdir(d)) && n_names < REPLAY_MAX_SEEDS;)
        if (e->d_name[0] != '.' && (names[n_names] = strdup(e->d_name))) n_names++;
    closedir(d);
    qsort(names, (size_t)n_names, sizeof(*names), by_name);
    int n = 0;
    for (int i = 0; i < n_names; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (f) {
            blob b = {malloc(REPLAY_MAX_INPUT), 0, strncmp(names[i], "regress_", 8) != 0};
            b.n = fread(b.b, 1, REPLAY_MAX_INPUT, f);
            fclose(f);
            seeds[n++] = b;
        }
        free(names[i]);
    }
    return n;
}

static uint64_t get_le(const unsigned char *p, int k) {
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static void put_le(unsigned char *p, uint64_t v, int k) {
    for (int i = 0; i < k; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A little-endian integer: the target's integer field one time in two (safetensors' header
 * length), otherwise 1, 2, 4 or 8 bytes anywhere. New value: a small delta, the count of the
 * bytes after it, zero, all ones, the top bit alone, or random. */
static void tweak_int(uint64_t *s, unsigned char *buf, size_t n, const fuzz_target *t) {
    static const int widths[4] = {1, 2, 4, 8};
    int k = widths[rng_below(s, 4)];
    size_t at;
    if (t->int_field >= 0 && (size_t)t->int_field + (size_t)t->int_width <= n && rng_below(s, 2)) {
        at = (size_t)t->int_field, k = t->int_width;
    } else {
        if (n < (size_t)k) return;
        at = rng_below(s, n - (size_t)k + 1);
    }
    uint64_t v = get_le(buf + at, k), top = (uint64_t)1 << (8 * k - 1);
    uint64_t choices[8] = {v + 1, v - 1, v + 8 * (1 + rng_below(s, 4)), n - at - (size_t)k, 0, ~(uint64_t)0, top,
                           rng_next(s)};
    put_le(buf + at, choices[rng_below(s, 8)], k);
}

/* One mutation of buf (length *n, capacity REPLAY_MAX_INPUT) in place. */
static void mutate(uint64_t *s, unsigned char *buf, size_t *n, const blob *seeds, int n_seeds, const fuzz_target *t) {
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
    case 4:
        tweak_int(s, buf, *n, t);
        break;
    case 5: /* a byte that means something in the format over a random one */
        if (*n && t->n_tokens) buf[rng_below(s, *n)] = (unsigned char)t->tokens[rng_below(s, t->n_tokens)];
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
    const fuzz_target *t = &fuzz_this_target;
    for (int i = 0; i < n_seeds; i++) {
        LLVMFuzzerTestOneInput(seeds[i].b, seeds[i].n);
        if (seeds[i].must_accept && !t->accepts(seeds[i].b, seeds[i].n))
            fprintf(stderr, "%s: seed %d is refused\n", t->name, i), failures++;
    }
    unsigned char *buf = malloc(REPLAY_MAX_INPUT);
    long ok = 0;
    for (long it = 0; it < iters; it++) {
        const blob *b = &seeds[rng_below(&rng, (size_t)n_seeds)];
        size_t n = b->n;
        memcpy(buf, b->b, n);
        for (size_t k = 1 + rng_below(&rng, 3); k--;) mutate(&rng, buf, &n, seeds, n_seeds, t);
        /* an exact-size copy, so a sanitizer sees reads past the end */
        unsigned char *in = malloc(n ? n : 1);
        memcpy(in, buf, n);
        LLVMFuzzerTestOneInput(in, n);
        ok += t->accepts(in, n);
        free(in);
    }
    printf("%s_replay: %d seeds, %ld mutants: %ld accepted, %ld refused\n", t->name, n_seeds, iters, ok, iters - ok);
    if (iters > 100 && (ok == 0 || ok == iters))
        fprintf(stderr, "%s_replay: the mutants were all accepted or all refused\n", t->name), failures++;
    free(buf);
    for (int i = 0; i < n_seeds; i++) free(seeds[i].b);
    return failures ? 1 : 0;
}
