/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

double dfg_test_max_rel_err_ref(const float *a, const double *ref, int64_t n, double floor) {
    double maxr = floor, maxd = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (isnan(d)) return NAN;
        maxd = fmax(maxd, d);
        maxr = fmax(maxr, fabs(ref[i]));
    }
    return maxd / maxr;
}

/* the floats' total order: a float's bits with negatives flipped whole and non-negatives offset */
static int total_order_cmp(const void *a, const void *b) {
    uint32_t u[2];
    memcpy(&u[0], a, 4), memcpy(&u[1], b, 4);
    for (int i = 0; i < 2; i++) u[i] = (u[i] >> 31) ? ~u[i] : u[i] | 0x80000000u;
    return (u[0] > u[1]) - (u[0] < u[1]);
}

float dfg_test_quantile(const float *x, const float *m, int64_t n, float q) {
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (m[i] != 0.0f) v[k++] = x[i];
    float out = INFINITY;
    if (k > 0) {
        qsort(v, (size_t)k, sizeof(float), total_order_cmp);
        /* torch on a float32 tensor: the rank q (k - 1) and the lerp in float32 */
        float pos = q * (float)(k - 1), lo = floorf(pos), w = pos - lo;
        int64_t i = (int64_t)lo < k - 1 ? (int64_t)lo : k - 1;
        if ((int64_t)lo >= k - 1) w = 0.0f;
        float a = v[i], b = v[i + 1 < k ? i + 1 : i];
        /* at an integral rank the element itself (-0.0 stays -0.0, -inf stays -inf: torch's lerp
         * would make -inf + 0 * inf a NaN), as the op defines it */
        out = w == 0.0f ? v[i] : w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
    }
    free(v);
    return out;
}

/* ---------------------------------------------------------------- temporary files */
static char tmpdir_[64];

bool dfg_test_tmpdir_create(const char *prefix) {
    snprintf(tmpdir_, sizeof(tmpdir_), "/tmp/%s_XXXXXX", prefix);
    if (!mkdtemp(tmpdir_)) {
        fprintf(stderr, "cannot create a temporary directory\n");
        return false;
    }
    return true;
}

const char *dfg_test_tmpdir(void) { return tmpdir_; }

char *dfg_test_tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 256, "%s/%s", tmpdir_, name);
    return p;
}

void dfg_test_tmpdir_remove(void) { rmdir(tmpdir_); }

/* ---------------------------------------------------------------- fixture */
void dfg_fx_begin(dfg_fx *f, const char *name) {
    f->p = dfg_program_new(name);
    f->g = dfg_graph_new(f->p, "g");
    f->rt = NULL;
}

bool dfg_fx_create_seeded(dfg_fx *f, int repeat, uint64_t seed) {
    CHECK(dfg_program_status(f->p) == DFG_OK, "build: %s", dfg_program_error(f->p));
    if (repeat > 0 && dfg_stage_graph(f->p, f->g, repeat) != DFG_OK) return false;
    dfg_run_options o = dfg_run_options_default();
    o.seed = seed;
    o.n_threads = 2;
    dfg_status st = dfg_runtime_create(f->p, &o, &f->rt);
    CHECK(st == DFG_OK, "create: %s", dfg_runtime_error(f->rt));
    return st == DFG_OK;
}

bool dfg_fx_create(dfg_fx *f, int repeat) { return dfg_fx_create_seeded(f, repeat, dfg_test_u64()); }

bool dfg_fx_step(dfg_fx *f) {
    dfg_status st = dfg_runtime_step(f->rt);
    CHECK(st == DFG_OK, "step: %s", dfg_runtime_error(f->rt));
    return st == DFG_OK;
}

bool dfg_fx_run(dfg_fx *f) { return dfg_fx_create(f, 1) && dfg_fx_step(f); }

void dfg_fx_read(dfg_fx *f, const char *name, void *dst, size_t bytes) {
    dfg_status st = dfg_runtime_read(f->rt, name, dst, bytes);
    CHECK(st == DFG_OK, "read '%s': %s", name, dfg_runtime_error(f->rt));
}

void dfg_fx_write(dfg_fx *f, const char *name, const void *src, size_t bytes) {
    dfg_status st = dfg_runtime_write(f->rt, name, src, bytes);
    CHECK(st == DFG_OK, "write '%s': %s", name, dfg_runtime_error(f->rt));
}

void dfg_fx_end(dfg_fx *f) {
    dfg_runtime_free(f->rt);
    dfg_program_free(f->p);
}

dfg_tensor *dfg_fx_const_f32(dfg_fx *f, const char *name, dfg_shape s, const float *data) {
    return dfg_const(f->p, name, DFG_F32, s, data);
}

/* ---------------------------------------------------------------- the GPT-2 pipeline module */
void *dfg_test_gpt2_pipeline(void) {
    char exe[PATH_MAX], path[PATH_MAX + 64];
    const char *env = getenv("DFG_GPT2_PIPELINE");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (env) snprintf(path, sizeof(path), "%s", env);
    else if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(path, sizeof(path), "%s/gpt2_train_pipeline.so", exe);
    } else snprintf(path, sizeof(path), "gpt2_train_pipeline.so");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "cannot load %s (build the target gpt2_train_pipeline): %s", path, dlerror());
    return lib;
}

dfg_program *dfg_test_gpt2_program(void *lib, const char *const *settings, dfg_status *st) {
    dfg_pipeline_fn fn;
    *(void **)&fn = dlsym(lib, "dfg_pipeline");
    dfg_program *p = dfg_program_new("gpt2_train");
    dfg_program_set(p, "target", "cpu");
    for (int i = 0; settings && settings[i]; i += 2) dfg_program_set(p, settings[i], settings[i + 1]);
    *st = fn ? fn(p) : DFG_ERR_ARG;
    return p;
}

void dfg_test_write_random_params(dfg_runtime *rt, dfg_tensor *const *params, int n) {
    for (int i = 0; i < n && rt; i++) {
        int64_t cnt = dfg_tensor_numel(params[i]);
        float *w = malloc(sizeof(float) * (size_t)cnt);
        const float gain = dfg_tensor_shape(params[i]).rank == 1;
        for (int64_t e = 0; e < cnt; e++) w[e] = dfg_test_uniform(-0.5f, 0.5f) + gain;
        dfg_runtime_write(rt, dfg_tensor_name(params[i]), w, sizeof(float) * (size_t)cnt);
        free(w);
    }
}

/* ---------------------------------------------------------------- a decode loop's state */
dfg_test_kv dfg_test_kv_state(dfg_program *p, int64_t B, int64_t T, int64_t tmax, int64_t C, int64_t ckv) {
    dfg_test_kv kv;
    kv.pos = dfg_state(p, "pos", DFG_I32, DFG_SCALAR, DFG_ROLE_NONE, dfg_init_zeros());
    kv.kc = dfg_state(p, "kc", DFG_F32, DFG_SHAPE(B, tmax, ckv), DFG_ROLE_KV_CACHE, dfg_init_constant(50));
    kv.vc = dfg_state(p, "vc", DFG_F32, DFG_SHAPE(B, tmax, ckv), DFG_ROLE_KV_CACHE, dfg_init_constant(50));
    kv.out = dfg_state(p, "out", DFG_F32, DFG_SHAPE(B, T, C), DFG_ROLE_NONE, dfg_init_zeros());
    return kv;
}

void dfg_test_kv_store(dfg_graph *g, const dfg_test_kv *kv, dfg_tensor *y) {
    dfg_slice_assign_at(g, kv->out, y, 1, kv->pos);
    dfg_assign(g, kv->pos, dfg_add(g, kv->pos, dfg_fill(g, DFG_I32, DFG_SCALAR, 1)));
}

/* ---------------------------------------------------------------- small random models */
dfg_model_config dfg_test_model_config(dfg_arch arch, int V, int block) {
    dfg_model_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = V, .block_size = block,
                            .ln_eps = 1e-5f, .dtype = DFG_F32, .arch = arch};
    if (arch != DFG_ARCH_GPT2) {
        cfg.n_kv_head = dfg_test_int(1, 2);
        cfg.n_head = cfg.n_kv_head * dfg_test_int(1, 3);
        cfg.head_dim = 2 * dfg_test_int(2, 6);
        cfg.n_inner = dfg_test_int(8, 40);
        cfg.rope_theta = dfg_test_uniform(50.0f, 1e6f);
        cfg.tie_word_embeddings = dfg_test_int(0, 1);
        cfg.attention_bias = dfg_test_int(0, 1);
    }
    return cfg;
}

dfg_tensor *dfg_test_model_program(const char *name, dfg_model_config cfg, int N, int T, dfg_program **p,
                                   dfg_model **m, dfg_model_kv *kv) {
    *p = dfg_program_new(name);
    *m = calloc(1, sizeof(**m));
    dfg_model_params(*p, "", cfg, *m);
    dfg_model_kv_cache(*p, "", *m, N, T, kv);
    return dfg_state(*p, "tok", DFG_I32, DFG_SHAPE(N, T), DFG_ROLE_ROLLOUT, dfg_init_zeros());
}

void dfg_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s: %s", path, strerror(errno));
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n, "short write to %s", path);
    fclose(f);
}
