/* test_checkpoint.c - saving and loading a runtime's PARAM/STATE tensors as safetensors: a
 * bit-exact round trip between runtimes with different seeds, Hugging Face naming (the
 * "transformer." prefix, GPT-2 buffers), strictness, shape and dtype errors that name the
 * tensor, float conversions with nearest-even rounding, and with_state. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/dfg_runtime.h"
#include "runtime/formats/safetensors.h"
#include "testutil.h"

/* ---------------------------------------------------------------- the program under test */
typedef struct {
    const char *name;
    bool param;
    dfg_dtype dtype;
    dfg_shape shape;
} spec;

static const spec specs[] = {
    {"wte.weight", true, DFG_F32, {2, {7, 5}}},
    {"h.0.attn.c_attn.weight", true, DFG_F32, {2, {5, 15}}},
    {"h.0.attn.c_attn.bias", true, DFG_F32, {1, {15}}},
    {"ln_f.weight", true, DFG_F32, {1, {5}}},
    {"adam.m.wte.weight", false, DFG_F32, {2, {7, 5}}},
    {"adam.step", false, DFG_I32, {0, {0}}},
    {"rollout.mask", false, DFG_U8, {2, {3, 4}}},
};
#define N_SPECS ((int)(sizeof(specs) / sizeof(specs[0])))
#define N_PARAMS 4

static dfg_program *make_program(void) {
    dfg_program *p = dfg_program_new("ckpt");
    for (int i = 0; i < N_SPECS; i++) {
        if (specs[i].param) dfg_param(p, specs[i].name, specs[i].dtype, specs[i].shape, dfg_init_normal(0.0f, 0.02f));
        else dfg_state(p, specs[i].name, specs[i].dtype, specs[i].shape, DFG_ROLE_OPTIM, dfg_init_zeros());
    }
    CHECK(dfg_program_status(p) == DFG_OK, "program: %s", dfg_program_error(p));
    return p;
}

static dfg_runtime *make_runtime(dfg_program *p, uint64_t seed) {
    dfg_run_options o = dfg_run_options_default();
    o.seed = seed;
    o.n_threads = 1;
    dfg_runtime *rt = NULL;
    dfg_status s = dfg_runtime_create(p, &o, &rt);
    CHECK(s == DFG_OK, "runtime: %s", dfg_runtime_error(rt));
    return rt;
}

static size_t spec_bytes(const spec *s) {
    size_t e = s->dtype == DFG_U8 ? 1 : s->dtype == DFG_BF16 || s->dtype == DFG_F16 ? 2 : 4;
    size_t n = 1;
    for (int i = 0; i < s->shape.rank; i++) n *= (size_t)s->shape.d[i];
    return n * e;
}

/* Every tensor's bytes, in spec order, into one buffer per tensor. */
static void snapshot(dfg_runtime *rt, unsigned char *out[N_SPECS]) {
    for (int i = 0; i < N_SPECS; i++) {
        out[i] = malloc(spec_bytes(&specs[i]));
        CHECK(dfg_runtime_read(rt, specs[i].name, out[i], spec_bytes(&specs[i])) == DFG_OK, "read '%s': %s",
              specs[i].name, dfg_runtime_error(rt));
    }
}

static void free_snapshot(unsigned char *s[N_SPECS]) {
    for (int i = 0; i < N_SPECS; i++) free(s[i]);
}

/* Fresh random values in every tensor (floats, non-zero integers), so nothing equals its init. */
static void randomize(dfg_runtime *rt) {
    for (int i = 0; i < N_SPECS; i++) {
        size_t b = spec_bytes(&specs[i]);
        unsigned char *v = malloc(b);
        if (specs[i].dtype == DFG_F32) dfg_test_fill_normal((float *)v, (int64_t)(b / 4), 1.0f);
        else
            for (size_t k = 0; k < b; k++) v[k] = (unsigned char)dfg_test_int(1, 255);
        CHECK(dfg_runtime_write(rt, specs[i].name, v, b) == DFG_OK, "write '%s'", specs[i].name);
        free(v);
    }
}

/* Count of tensors whose bytes differ between two snapshots (restricted to the first n specs). */
static int n_differ(unsigned char *a[N_SPECS], unsigned char *b[N_SPECS], int n) {
    int d = 0;
    for (int i = 0; i < n; i++) d += memcmp(a[i], b[i], spec_bytes(&specs[i])) != 0;
    return d;
}

/* Writes a safetensors file from the snapshot's PARAMs under the given names (NULL: skip),
 * plus extra tensors. */
static void write_params(const char *path, unsigned char *snap[N_SPECS], const char *const names[N_PARAMS],
                         const dfg_st_tensor *extra, int n_extra) {
    dfg_st_tensor ts[N_PARAMS + 8];
    int n = 0;
    for (int i = 0; i < N_PARAMS; i++)
        if (names[i])
            ts[n++] = (dfg_st_tensor){.name = names[i], .dtype = specs[i].dtype, .shape = specs[i].shape, .data = snap[i],
                                      .bytes = spec_bytes(&specs[i])};
    for (int i = 0; i < n_extra; i++) ts[n++] = extra[i];
    char err[1024];
    CHECK(dfg_st_write(path, ts, n, NULL, 0, err, sizeof(err)) == DFG_OK, "write %s: %s", path, err);
}

static const char *const plain_names[N_PARAMS] = {"wte.weight", "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias",
                                                  "ln_f.weight"};

/* ---------------------------------------------------------------- tests */

static void test_round_trip(dfg_program *p) {
    dfg_runtime *a = make_runtime(p, 1), *b = make_runtime(p, 2);
    if (!a || !b) return;
    randomize(a);
    CHECK(dfg_runtime_step(a) == DFG_OK, "step: %s", dfg_runtime_error(a)); /* steps done = 1 */
    const char *params = dfg_test_tmp_path("params.safetensors"), *full = dfg_test_tmp_path("full.safetensors");
    CHECK(dfg_runtime_save_safetensors(a, params, false) == DFG_OK, "save: %s", dfg_runtime_error(a));
    CHECK(dfg_runtime_save_safetensors(a, full, true) == DFG_OK, "save with state: %s", dfg_runtime_error(a));

    /* the files: every PARAM (and STATE with with_state), program dtypes, the metadata */
    char err[1024];
    dfg_safetensors *sp = NULL, *sf = NULL;
    CHECK(dfg_st_open(params, &sp, err, sizeof(err)) == DFG_OK, "%s", err);
    CHECK(dfg_st_open(full, &sf, err, sizeof(err)) == DFG_OK, "%s", err);
    if (sp && sf) {
        CHECK(dfg_st_count(sp) == N_PARAMS, "params file holds %d tensors", dfg_st_count(sp));
        CHECK(dfg_st_count(sf) == N_SPECS, "full file holds %d tensors", dfg_st_count(sf));
        CHECK(dfg_st_find(sp, "adam.m.wte.weight") == NULL, "a STATE was saved without with_state");
        for (int i = 0; i < N_SPECS; i++) {
            const dfg_st_tensor *t = dfg_st_find(sf, specs[i].name);
            CHECK(t && t->dtype == specs[i].dtype && t->shape.rank == specs[i].shape.rank && t->bytes == spec_bytes(&specs[i]),
                  "'%s' missing or with the wrong dtype/shape in the file", specs[i].name);
        }
        const char *fmt = dfg_st_metadata(sf, "format"), *prod = dfg_st_metadata(sf, "producer"),
                   *step = dfg_st_metadata(sf, "dfg.step");
        CHECK(fmt && strcmp(fmt, "pt") == 0 && prod && strcmp(prod, "dfg") == 0, "format/producer metadata wrong");
        CHECK(step && strcmp(step, "1") == 0, "dfg.step is '%s', expected '1'", step ? step : "(absent)");
    }
    dfg_st_free(sp);
    dfg_st_free(sf);

    unsigned char *sa[N_SPECS], *sb[N_SPECS], *sc[N_SPECS];
    snapshot(a, sa);
    snapshot(b, sb);
    CHECK(n_differ(sa, sb, N_SPECS) == N_SPECS, "runtimes with different seeds agree before loading");
    int n = -1;
    CHECK(dfg_runtime_load_safetensors(b, full, true, &n) == DFG_OK, "load: %s", dfg_runtime_error(b));
    CHECK(n == N_SPECS, "loaded %d tensors, expected %d", n, N_SPECS);
    free_snapshot(sb);
    snapshot(b, sb);
    for (int i = 0; i < N_SPECS; i++)
        CHECK(memcmp(sa[i], sb[i], spec_bytes(&specs[i])) == 0, "'%s' is not bit-identical after the round trip",
              specs[i].name);

    /* a params-only file sets the PARAMs and leaves the STATEs alone */
    dfg_runtime *c = make_runtime(p, 3);
    unsigned char *before[N_SPECS];
    snapshot(c, before);
    CHECK(dfg_runtime_load_safetensors(c, params, true, &n) == DFG_OK && n == N_PARAMS, "params load: %s (%d)",
          dfg_runtime_error(c), n);
    snapshot(c, sc);
    CHECK(n_differ(sa, sc, N_PARAMS) == 0, "PARAMs differ after loading the params file");
    for (int i = N_PARAMS; i < N_SPECS; i++)
        CHECK(memcmp(before[i], sc[i], spec_bytes(&specs[i])) == 0, "STATE '%s' changed by a params-only load",
              specs[i].name);
    free_snapshot(before);
    free_snapshot(sa);
    free_snapshot(sb);
    free_snapshot(sc);
    dfg_runtime_free(a);
    dfg_runtime_free(b);
    dfg_runtime_free(c);
    unlink(params);
    unlink(full);
}

/* Hugging Face names: "transformer." prefixes, attention-mask buffers and a tied lm_head. */
static void test_hf_names(dfg_program *p) {
    dfg_runtime *a = make_runtime(p, 11), *b = make_runtime(p, 12);
    if (!a || !b) return;
    unsigned char *sa[N_SPECS], *sb[N_SPECS];
    snapshot(a, sa);
    static float mask[16], lm_head[35];
    dfg_st_tensor extra[3] = {
        {.name = "transformer.h.0.attn.bias", .dtype = DFG_F32, .shape = DFG_SHAPE(1, 1, 4, 4), .data = mask, .bytes = 64},
        {.name = "h.0.attn.masked_bias", .dtype = DFG_F32, .shape = DFG_SCALAR, .data = mask, .bytes = 4},
        {.name = "lm_head.weight", .dtype = DFG_F32, .shape = DFG_SHAPE(7, 5), .data = lm_head, .bytes = sizeof(lm_head)},
    };
    const char *names[N_PARAMS] = {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
                                   "transformer.h.0.attn.c_attn.bias", "transformer.ln_f.weight"};
    const char *path = dfg_test_tmp_path("hf.safetensors");
    write_params(path, sa, names, extra, 3);
    int n = -1;
    CHECK(dfg_runtime_load_safetensors(b, path, true, &n) == DFG_OK, "HF-named load: %s", dfg_runtime_error(b));
    CHECK(n == N_PARAMS, "HF-named load set %d tensors, expected %d", n, N_PARAMS);
    snapshot(b, sb);
    CHECK(n_differ(sa, sb, N_PARAMS) == 0, "PARAMs differ after the HF-named load");

    /* the same weight under both names is ambiguous */
    dfg_st_tensor dup = {.name = "wte.weight", .dtype = DFG_F32, .shape = DFG_SHAPE(7, 5), .data = lm_head, .bytes = 140};
    write_params(path, sa, names, &dup, 1);
    dfg_status s = dfg_runtime_load_safetensors(b, path, false, &n);
    CHECK(s == DFG_ERR_FORMAT && strstr(dfg_runtime_error(b), "transformer.wte.weight") &&
              strstr(dfg_runtime_error(b), "both load into 'wte.weight'"),
          "duplicate mapping: %s: %s", dfg_status_name(s), dfg_runtime_error(b));
    free_snapshot(sa);
    free_snapshot(sb);
    dfg_runtime_free(a);
    dfg_runtime_free(b);
    unlink(path);
}

/* A load that fails leaves every tensor as it was, and its message names the tensor. */
static void expect_load_error(dfg_runtime *rt, const char *path, bool strict, dfg_status want, const char *const *needles) {
    unsigned char *before[N_SPECS], *after[N_SPECS];
    snapshot(rt, before);
    int n = -1;
    dfg_status s = dfg_runtime_load_safetensors(rt, path, strict, &n);
    const char *msg = dfg_runtime_error(rt);
    CHECK(s == want, "%s: status '%s', expected '%s' (%s)", path, dfg_status_name(s), dfg_status_name(want), msg);
    CHECK(n == 0, "%s: a failed load reports %d tensors set", path, n);
    CHECK(strncmp(msg, path, strlen(path)) == 0, "message '%s' does not name the file", msg);
    for (int i = 0; needles[i]; i++) CHECK(strstr(msg, needles[i]), "message '%s' lacks '%s'", msg, needles[i]);
    snapshot(rt, after);
    CHECK(n_differ(before, after, N_SPECS) == 0, "%s: a failed load changed the runtime", path);
    free_snapshot(before);
    free_snapshot(after);
}

static void test_errors(dfg_program *p) {
    dfg_runtime *a = make_runtime(p, 21), *b = make_runtime(p, 22);
    if (!a || !b) return;
    unsigned char *sa[N_SPECS];
    snapshot(a, sa);
    const char *path = dfg_test_tmp_path("bad.safetensors");

    /* shape mismatch, after tensors that do fit (nothing may be written) */
    const char *names[N_PARAMS] = {"h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "ln_f.weight", NULL};
    dfg_st_tensor wrong = {.name = "wte.weight", .dtype = DFG_F32, .shape = DFG_SHAPE(5, 7), .data = sa[0], .bytes = 140};
    const char *reordered[N_PARAMS] = {NULL, names[0], names[1], names[2]};
    write_params(path, sa, reordered, &wrong, 1);
    expect_load_error(b, path, false, DFG_ERR_SHAPE, (const char *[]){"'wte.weight'", "(5,7)", "(7,5)", NULL});

    /* strict: a missing PARAM is named; without strict the rest loads */
    const char *no_ln[N_PARAMS] = {"wte.weight", "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", NULL};
    write_params(path, sa, no_ln, NULL, 0);
    expect_load_error(b, path, true, DFG_ERR_FORMAT, (const char *[]){"1 param missing", "'ln_f.weight'", NULL});
    int n = -1;
    CHECK(dfg_runtime_load_safetensors(b, path, false, &n) == DFG_OK && n == N_PARAMS - 1, "non-strict partial load: %s (%d)",
          dfg_runtime_error(b), n);

    /* strict: an unknown extra tensor is named; without strict it is ignored */
    static float junk[3];
    dfg_st_tensor extra = {.name = "h.9.foo", .dtype = DFG_F32, .shape = DFG_SHAPE(3), .data = junk, .bytes = 12};
    write_params(path, sa, plain_names, &extra, 1);
    expect_load_error(b, path, true, DFG_ERR_FORMAT, (const char *[]){"'h.9.foo'", "strict", NULL});
    CHECK(dfg_runtime_load_safetensors(b, path, false, &n) == DFG_OK && n == N_PARAMS, "non-strict load with extra: %s",
          dfg_runtime_error(b));

    /* integers must match exactly: an f32 or I64 file tensor cannot fill the i32 step */
    float fstep = 3.0f;
    dfg_st_tensor fs = {.name = "adam.step", .dtype = DFG_F32, .shape = DFG_SCALAR, .data = &fstep, .bytes = 4};
    write_params(path, sa, plain_names, &fs, 1);
    expect_load_error(b, path, false, DFG_ERR_SHAPE, (const char *[]){"'adam.step'", "F32", "i32", NULL});
    int64_t istep = 3;
    dfg_st_tensor is = {.name = "adam.step", .dtype = DFG_DTYPE_COUNT, .dtype_name = "I64", .shape = DFG_SCALAR,
                        .data = &istep, .bytes = 8};
    write_params(path, sa, plain_names, &is, 1);
    expect_load_error(b, path, false, DFG_ERR_SHAPE, (const char *[]){"'adam.step'", "I64", NULL});

    /* a malformed file and a missing one */
    FILE *f = fopen(path, "wb");
    if (f) fwrite("\x10\0\0\0\0\0\0\0{", 1, 9, f), fclose(f);
    expect_load_error(b, path, false, DFG_ERR_FORMAT, (const char *[]){"header length 16", NULL});
    unlink(path);
    expect_load_error(b, path, false, DFG_ERR_IO, (const char *[]){"cannot open", NULL});

    /* saving into a directory that does not exist */
    dfg_status s = dfg_runtime_save_safetensors(a, "/nonexistent-dfg-dir/x.safetensors", true);
    CHECK(s == DFG_ERR_IO && strstr(dfg_runtime_error(a), "/nonexistent-dfg-dir"), "save to a missing dir: %s: %s",
          dfg_status_name(s), dfg_runtime_error(a));
    free_snapshot(sa);
    dfg_runtime_free(a);
    dfg_runtime_free(b);
}

/* Nearest-even f32 -> bf16, computed independently of the library: pick the closer of the two
 * bf16 neighbours in double precision, ties to the even one. */
static uint16_t ref_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    uint32_t ul = (uint32_t)lo << 16, uh = (uint32_t)hi << 16;
    float fl, fh;
    memcpy(&fl, &ul, 4);
    memcpy(&fh, &uh, 4);
    /* past the largest finite bf16 the upper neighbour is infinity, which rounds as 2^128 */
    double dfh = (hi & 0x7FFF) == 0x7F80 ? copysign(ldexp(1.0, 128), (double)x) : (double)fh;
    double dl = fabs((double)x - fl), dh = fabs(dfh - x);
    return dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
}

static float bf16_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void) {
    /* bf16 file -> f32 params: every value widens exactly */
    dfg_program *p = dfg_program_new("bf16");
    dfg_param(p, "w", DFG_F32, DFG_SHAPE(8, 9), dfg_init_zeros());
    dfg_param(p, "h", DFG_BF16, DFG_SHAPE(16), dfg_init_zeros());
    dfg_runtime *rt = make_runtime(p, 5);
    if (!rt) return;
    float w[72], back[72];
    uint16_t wb[72];
    dfg_test_fill_normal(w, 72, 3.0f);
    for (int i = 0; i < 72; i++) wb[i] = ref_bf16(w[i]);
    /* f32 file -> bf16 param: halfway cases must round to even */
    uint32_t hb[16] = {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F807FFFu, 0x3F808001u, 0x7F7FFFFFu, 0x00000001u, 0x80000000u};
    for (int i = 8; i < 16; i++) {
        float x = dfg_test_normal();
        memcpy(&hb[i], &x, 4);
    }
    dfg_st_tensor ts[2] = {{.name = "w", .dtype = DFG_BF16, .shape = DFG_SHAPE(8, 9), .data = wb, .bytes = sizeof(wb)},
                           {.name = "h", .dtype = DFG_F32, .shape = DFG_SHAPE(16), .data = hb, .bytes = sizeof(hb)}};
    const char *path = dfg_test_tmp_path("bf16.safetensors");
    char err[1024];
    CHECK(dfg_st_write(path, ts, 2, NULL, 0, err, sizeof(err)) == DFG_OK, "%s", err);
    int n = -1;
    CHECK(dfg_runtime_load_safetensors(rt, path, true, &n) == DFG_OK && n == 2, "bf16 load: %s", dfg_runtime_error(rt));
    CHECK(dfg_runtime_read(rt, "w", back, sizeof(back)) == DFG_OK, "read w");
    int bad = 0;
    for (int i = 0; i < 72; i++) bad += memcmp(&back[i], &(float){bf16_f32(wb[i])}, 4) != 0;
    CHECK(bad == 0, "%d of 72 bf16 values did not widen exactly to f32", bad);
    uint16_t h[16];
    CHECK(dfg_runtime_read(rt, "h", h, sizeof(h)) == DFG_OK, "read h");
    for (int i = 0; i < 16; i++) {
        float x;
        memcpy(&x, &hb[i], 4);
        CHECK(h[i] == ref_bf16(x), "f32 0x%08x -> bf16 0x%04x, expected 0x%04x", hb[i], h[i], ref_bf16(x));
    }
    CHECK(h[0] == 0x3F80 && h[1] == 0x3F82 && h[2] == 0xBF80, "ties did not round to even: %04x %04x %04x", h[0], h[1], h[2]);
    dfg_runtime_free(rt);
    dfg_program_free(p);
    unlink(path);
}

int main(void) {
    dfg_test_init("test_checkpoint");
    if (!dfg_test_tmpdir_create("dfg_ckpt")) return 1;
    dfg_program *p = make_program();
    test_round_trip(p);
    test_hf_names(p);
    test_errors(p);
    test_bf16();
    dfg_program_free(p);
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
