/* test_weights_dir.c - dfg_runtime_load_safetensors on model directories as transformers'
 * save_pretrained writes them: DIR/model.safetensors, or DIR/model.safetensors.index.json and
 * its shards. A tiny GPT-2 (Hugging Face names, "transformer." prefix, attn.bias buffers) is
 * loaded from one file, 2 and 3 shards, and bf16/f16 shards, and must get the same values; every
 * malformed directory is refused with status and a one-line message, leaving the runtime as it
 * was. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/dtype.h"
#include "runtime/dfg_runtime.h"
#include "runtime/formats/safetensors.h"
#include "testutil.h"

#define MAX_T 64

/* ---------------------------------------------------------------- the model and its values */
static dfg_model *model;

static dfg_program *make_program(void) {
    dfg_model_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 11, .block_size = 6, .ln_eps = 1e-5f,
                           .dtype = DFG_F32};
    dfg_program *p = dfg_program_new("wdir");
    model = calloc(1, sizeof(*model));
    CHECK(dfg_model_params(p, "", cfg, model) == DFG_OK, "gpt2: %s", dfg_program_error(p));
    CHECK(model->n_params <= MAX_T - 4, "%d params", model->n_params);
    return p;
}

static dfg_runtime *make_runtime(dfg_program *p, uint64_t seed) {
    dfg_run_options o = dfg_run_options_default();
    o.seed = seed, o.n_threads = 1;
    dfg_runtime *rt = NULL;
    CHECK(dfg_runtime_create(p, &o, &rt) == DFG_OK, "runtime: %s", dfg_runtime_error(rt));
    return rt;
}

/* Every param's f32 values, in HF order: one buffer per param. */
typedef struct {
    float *v[MAX_T];
} snap;

static snap take(dfg_runtime *rt) {
    snap s;
    for (int i = 0; i < model->n_params; i++) {
        size_t b = dfg_tensor_bytes(model->params[i]);
        s.v[i] = malloc(b);
        CHECK(dfg_runtime_read(rt, dfg_tensor_name(model->params[i]), s.v[i], b) == DFG_OK, "read: %s", dfg_runtime_error(rt));
    }
    return s;
}

/* Fresh random values in every param, so that no two runtimes (and no init) agree. */
static void randomize(dfg_runtime *rt) {
    for (int i = 0; i < model->n_params; i++) {
        size_t b = dfg_tensor_bytes(model->params[i]);
        float *v = malloc(b);
        dfg_test_fill_normal(v, (int64_t)(b / 4), 1.0f);
        CHECK(dfg_runtime_write(rt, dfg_tensor_name(model->params[i]), v, b) == DFG_OK, "write: %s", dfg_runtime_error(rt));
        free(v);
    }
}

static void drop(snap *s) {
    for (int i = 0; i < model->n_params; i++) free(s->v[i]);
}

static int n_differ(const snap *a, const snap *b) {
    int d = 0;
    for (int i = 0; i < model->n_params; i++) d += memcmp(a->v[i], b->v[i], dfg_tensor_bytes(model->params[i])) != 0;
    return d;
}

/* ---------------------------------------------------------------- writing directories */
/* The tensors transformers would save for the model: each param as "transformer.<name>" in
 * dtype dt (values of s rounded to it), plus the attn.bias causal-mask buffers. */
typedef struct {
    dfg_st_tensor t[MAX_T];
    char names[MAX_T][96];
    void *bufs[MAX_T];
    int n;
} file_set;

static void make_tensors(file_set *fs, const snap *s, dfg_dtype dt) {
    memset(fs, 0, sizeof(*fs));
    for (int i = 0; i < model->n_params; i++) {
        const dfg_tensor *t = model->params[i];
        int64_t n = dfg_shape_numel(dfg_tensor_shape(t));
        void *b = malloc((size_t)n * dfg_dtype_size(dt));
        for (int64_t k = 0; k < n; k++) dfg_store(b, dt, k, s->v[i][k]);
        snprintf(fs->names[fs->n], sizeof(fs->names[0]), "transformer.%s", dfg_tensor_name(t));
        fs->t[fs->n] = (dfg_st_tensor){.name = fs->names[fs->n], .dtype = dt, .shape = dfg_tensor_shape(t), .data = b,
                                       .bytes = (size_t)n * dfg_dtype_size(dt)};
        fs->bufs[fs->n++] = b;
    }
    for (int l = 0; l < model->cfg.n_layer; l++) { /* (1,1,T,T) masks, skipped by the loader */
        int64_t T = model->cfg.block_size;
        float *b = calloc((size_t)(T * T), sizeof(float));
        snprintf(fs->names[fs->n], sizeof(fs->names[0]), "transformer.h.%d.attn.bias", l);
        fs->t[fs->n] = (dfg_st_tensor){.name = fs->names[fs->n], .dtype = DFG_F32, .shape = DFG_SHAPE(1, 1, T, T),
                                       .data = b, .bytes = (size_t)(T * T) * 4};
        fs->bufs[fs->n++] = b;
    }
}

static void free_tensors(file_set *fs) {
    for (int i = 0; i < fs->n; i++) free(fs->bufs[i]);
}

static char *path_in(const char *dir, const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
    return p;
}

static char *make_dir(const char *name) {
    char *d = strdup(dfg_test_tmp_path(name));
    CHECK(mkdir(d, 0755) == 0, "mkdir %s", d);
    return d;
}

static void shard_name(char *out, size_t n, int k, int n_shards) {
    snprintf(out, n, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f, "cannot write %s", path);
    if (f) fputs(text, f), fclose(f);
}

/* Writes fs's tensors into n_shards shards (tensor i into shard_of[i], or i % n_shards when
 * shard_of is NULL) and the index mapping each to its shard. */
static void write_sharded(const char *dir, const file_set *fs, int n_shards, const int *shard_of) {
    char *idx = malloc(65536), sn[64], err[1024];
    size_t o = (size_t)snprintf(idx, 65536, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {");
    for (int k = 0; k < n_shards; k++) {
        dfg_st_tensor ts[MAX_T];
        int n = 0;
        for (int i = 0; i < fs->n; i++)
            if ((shard_of ? shard_of[i] : i % n_shards) == k) ts[n++] = fs->t[i];
        shard_name(sn, sizeof(sn), k, n_shards);
        const char *meta[] = {"format", "pt"};
        CHECK(dfg_st_write(path_in(dir, sn), ts, n, meta, 1, err, sizeof(err)) == DFG_OK, "write shard: %s", err);
    }
    for (int i = 0; i < fs->n; i++) {
        shard_name(sn, sizeof(sn), shard_of ? shard_of[i] : i % n_shards, n_shards);
        o += (size_t)snprintf(idx + o, 65536 - o, "%s\n    \"%s\": \"%s\"", i ? "," : "", fs->t[i].name, sn);
    }
    snprintf(idx + o, 65536 - o, "\n  }\n}\n");
    write_text(path_in(dir, "model.safetensors.index.json"), idx);
    free(idx);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* ---------------------------------------------------------------- loads that must succeed */
static snap src; /* the values written to every directory */

static void expect_same_as_src(dfg_program *p, const char *path, const char *what) {
    dfg_runtime *rt = make_runtime(p, 99);
    int n = 0;
    CHECK(dfg_runtime_load_safetensors(rt, path, true, &n) == DFG_OK, "%s: %s", what, dfg_runtime_error(rt));
    CHECK(n == model->n_params, "%s: %d tensors loaded, expected %d", what, n, model->n_params);
    snap got = take(rt);
    CHECK(n_differ(&got, &src) == 0, "%s: %d params differ from the single file's", what, n_differ(&got, &src));
    drop(&got);
    dfg_runtime_free(rt);
}

static void test_loads(dfg_program *p) {
    file_set fs;
    make_tensors(&fs, &src, DFG_F32);
    char err[1024];
    const char *one = dfg_test_tmp_path("one.safetensors");
    CHECK(dfg_st_write(one, fs.t, fs.n, NULL, 0, err, sizeof(err)) == DFG_OK, "write: %s", err);
    expect_same_as_src(p, one, "one file");

    char *single = make_dir("single"), *d2 = make_dir("d2"), *d3 = make_dir("d3");
    CHECK(dfg_st_write(path_in(single, "model.safetensors"), fs.t, fs.n, NULL, 0, err, sizeof(err)) == DFG_OK, "%s", err);
    expect_same_as_src(p, single, "DIR/model.safetensors");
    write_sharded(d2, &fs, 2, NULL);
    expect_same_as_src(p, d2, "2 shards");
    int blocks[MAX_T]; /* 3 shards cut as transformers cuts them: consecutive runs */
    for (int i = 0; i < fs.n; i++) blocks[i] = i * 3 / fs.n;
    write_sharded(d3, &fs, 3, blocks);
    char slash[600];
    snprintf(slash, sizeof(slash), "%s/", d3);
    expect_same_as_src(p, slash, "3 shards (path with a trailing slash)");
    free_tensors(&fs);
    free(single), free(d2), free(d3);
}

/* A bf16 shard and an f16 shard: each value loads as its stored bits say, exactly. */
static void test_half_shards(dfg_program *p) {
    file_set fb, fh;
    make_tensors(&fb, &src, DFG_BF16);
    make_tensors(&fh, &src, DFG_F16);
    file_set mixed = fb;
    int shard_of[MAX_T];
    for (int i = 0; i < fb.n; i++) {
        shard_of[i] = i % 2;
        if (i % 2) mixed.t[i] = fh.t[i];
    }
    char *d = make_dir("half");
    write_sharded(d, &mixed, 2, shard_of);
    dfg_runtime *rt = make_runtime(p, 5);
    int n = 0;
    CHECK(dfg_runtime_load_safetensors(rt, d, true, &n) == DFG_OK && n == model->n_params, "bf16/f16 shards: %s",
          dfg_runtime_error(rt));
    snap got = take(rt);
    int bad = 0, changed = 0;
    for (int i = 0; i < model->n_params; i++) {
        int64_t ne = dfg_shape_numel(dfg_tensor_shape(model->params[i]));
        for (int64_t k = 0; k < ne; k++) {
            float want = (float)dfg_load(mixed.t[i].data, mixed.t[i].dtype, k);
            bad += got.v[i][k] != want;
            changed += want != src.v[i][k];
        }
    }
    CHECK(bad == 0, "%d values differ from the bf16/f16 shards' values", bad);
    CHECK(changed > 0, "rounding to bf16/f16 changed nothing: the test cannot tell a conversion from a copy");
    drop(&got);
    dfg_runtime_free(rt);
    free_tensors(&fb), free_tensors(&fh);
    free(d);
}

/* ---------------------------------------------------------------- refusals */
static dfg_runtime *victim; /* holds values no directory has; a refusal must leave them */
static snap before;

static void expect_refused(const char *dir, const char *what, const char *const *want) {
    int n = -1;
    dfg_status s = dfg_runtime_load_safetensors(victim, dir, true, &n);
    const char *e = dfg_runtime_error(victim);
    CHECK(s != DFG_OK, "%s: loaded", what);
    CHECK(n == 0, "%s: %d tensors reported loaded", what, n);
    CHECK(e && !strchr(e, '\n'), "%s: message '%s' is not one line", what, e ? e : "(null)");
    for (int i = 0; e && want[i]; i++) CHECK(strstr(e, want[i]), "%s: message '%s' lacks '%s'", what, e, want[i]);
    snap now = take(victim);
    CHECK(n_differ(&now, &before) == 0, "%s: %d params were changed by a refused load", what, n_differ(&now, &before));
    drop(&now);
    printf("refused, %s: %s\n", what, e);
}

/* A fresh 2-shard directory of fs (tensor i in shard i % 2). */
static char *fresh2(const char *name, const file_set *fs) {
    char *d = make_dir(name);
    write_sharded(d, fs, 2, NULL);
    return d;
}

static void test_refusals(void) {
    file_set fs;
    make_tensors(&fs, &src, DFG_F32);
    const char *s1 = "model-00001-of-00002.safetensors", *s2 = "model-00002-of-00002.safetensors";
    char *d, buf[4096], err[1024];

    d = make_dir("empty");
    expect_refused(d, "a directory with neither file", (const char *[]){d, "without model.safetensors or model.safetensors.index.json", NULL});
    free(d);

    d = fresh2("notjson", &fs);
    write_text(path_in(d, "model.safetensors.index.json"), "{\"weight_map\": {\"a\": ");
    expect_refused(d, "index not JSON", (const char *[]){"model.safetensors.index.json: ", "not valid JSON", NULL});
    free(d);

    d = fresh2("nomap", &fs);
    write_text(path_in(d, "model.safetensors.index.json"), "{\"metadata\": {\"total_size\": 1}}");
    expect_refused(d, "no weight_map", (const char *[]){"index.json: ", "no 'weight_map'", NULL});
    free(d);

    d = fresh2("nonstring", &fs);
    write_text(path_in(d, "model.safetensors.index.json"), "{\"weight_map\": {\"transformer.wte.weight\": 1}}");
    expect_refused(d, "weight_map value not a string",
                   (const char *[]){"weight_map value of 'transformer.wte.weight' is not a string", NULL});
    free(d);

    const char *escapes[] = {"../model-00001-of-00002.safetensors", "sub/model.safetensors", "/etc/passwd", ".."};
    for (int k = 0; k < 4; k++) {
        d = fresh2(k == 0 ? "esc0" : k == 1 ? "esc1" : k == 2 ? "esc2" : "esc3", &fs);
        snprintf(buf, sizeof(buf), "{\"weight_map\": {\"transformer.wte.weight\": \"%s\"}}", escapes[k]);
        write_text(path_in(d, "model.safetensors.index.json"), buf);
        expect_refused(d, "a shard path leaving DIR", (const char *[]){escapes[k], "not a file name in the directory", NULL});
        free(d);
    }

    d = fresh2("missing", &fs);
    unlink(path_in(d, s2));
    expect_refused(d, "a missing shard", (const char *[]){"index.json: ", s2, "is missing", NULL});
    free(d);

    /* weight_map lists a tensor for shard 1 that shard 1 does not hold */
    d = fresh2("absent", &fs);
    file_set extra = fs;
    snprintf(extra.names[extra.n], sizeof(extra.names[0]), "transformer.h.7.ln_1.weight");
    extra.t[extra.n] = extra.t[0];
    extra.t[extra.n++].name = extra.names[fs.n];
    int shard_of[MAX_T];
    for (int i = 0; i < extra.n; i++) shard_of[i] = i % 2;
    write_sharded(d, &extra, 2, shard_of);
    dfg_st_tensor only[MAX_T];
    int n1 = 0;
    for (int i = 0; i < fs.n; i++)
        if (i % 2 == 0) only[n1++] = fs.t[i];
    CHECK(dfg_st_write(path_in(d, s1), only, n1, NULL, 0, err, sizeof(err)) == DFG_OK, "%s", err);
    expect_refused(d, "a listed tensor absent from its shard",
                   (const char *[]){"maps tensor 'transformer.h.7.ln_1.weight' to shard", "which does not hold it", NULL});
    free(d);

    /* shard 2 holds a tensor the index maps to shard 1 */
    d = fresh2("elsewhere", &fs);
    for (int i = 0; i < fs.n; i++) shard_of[i] = i % 2;
    shard_of[1] = 0; /* the index says shard 1; the files keep it in shard 2 */
    file_set moved = fs;
    char idx[65536];
    size_t o = (size_t)snprintf(idx, sizeof(idx), "{\"weight_map\": {");
    for (int i = 0; i < fs.n; i++)
        o += (size_t)snprintf(idx + o, sizeof(idx) - o, "%s\"%s\": \"%s\"", i ? "," : "", moved.t[i].name,
                              shard_of[i] ? s2 : s1);
    snprintf(idx + o, sizeof(idx) - o, "}}");
    write_text(path_in(d, "model.safetensors.index.json"), idx);
    char want[256];
    snprintf(want, sizeof(want), "tensor '%s' is in shard '%s' but 'weight_map' maps it to '%s' (ambiguous)", fs.t[1].name,
             s2, s1);
    expect_refused(d, "a tensor in another shard than the index says", (const char *[]){want, NULL});
    free(d);

    /* the same tensor in both shards */
    d = fresh2("twice", &fs);
    n1 = 0;
    for (int i = 0; i < fs.n; i++)
        if (i % 2 == 0 || i == 1) only[n1++] = fs.t[i];
    CHECK(dfg_st_write(path_in(d, s1), only, n1, NULL, 0, err, sizeof(err)) == DFG_OK, "%s", err);
    snprintf(want, sizeof(want), "tensor '%s' is in two shards", fs.t[1].name);
    expect_refused(d, "the same tensor in two shards", (const char *[]){want, NULL});
    free(d);

    /* a shard holds a tensor weight_map does not list */
    d = fresh2("unlisted", &fs);
    only[n1 = 0] = extra.t[fs.n];
    for (int i = 0; i < fs.n; i++)
        if (i % 2 == 0) only[++n1] = fs.t[i];
    CHECK(dfg_st_write(path_in(d, s1), only, n1 + 1, NULL, 0, err, sizeof(err)) == DFG_OK, "%s", err);
    expect_refused(d, "a shard tensor the index does not list",
                   (const char *[]){"holds tensor 'transformer.h.7.ln_1.weight', which 'weight_map' does not list", NULL});
    free(d);

    d = fresh2("dupkey", &fs);
    snprintf(buf, sizeof(buf), "{\"weight_map\": {\"%s\": \"%s\", \"%s\": \"%s\"}}", fs.t[0].name, s1, fs.t[0].name, s2);
    write_text(path_in(d, "model.safetensors.index.json"), buf);
    expect_refused(d, "a tensor listed twice in the index", (const char *[]){"is listed twice in 'weight_map'", NULL});
    free(d);

    /* a truncated shard: the reader's own check, naming the shard */
    d = fresh2("trunc", &fs);
    struct stat sb;
    stat(path_in(d, s2), &sb);
    CHECK(truncate(path_in(d, s2), sb.st_size - 4) == 0, "truncate"); /* the last tensor loses its last bytes */
    snprintf(want, sizeof(want), "%s: ", s2);
    expect_refused(d, "a truncated shard", (const char *[]){want, "exceed the", NULL});
    free(d);

    /* a wrong shape in a shard: names the shard, the tensor and both shapes */
    d = make_dir("shape");
    file_set bad = fs;
    float nine[9] = {0};
    int ln = -1;
    for (int i = 0; i < fs.n; i++)
        if (strcmp(fs.t[i].name, "transformer.h.1.ln_1.weight") == 0) ln = i;
    CHECK(ln >= 0, "no h.1.ln_1.weight");
    if (ln >= 0) bad.t[ln] = (dfg_st_tensor){.name = fs.t[ln].name, .dtype = DFG_F32, .shape = DFG_SHAPE(9), .data = nine,
                                             .bytes = sizeof(nine)};
    write_sharded(d, &bad, 2, NULL);
    snprintf(want, sizeof(want), "%s: tensor 'transformer.h.1.ln_1.weight' has shape (9) in the file but (8) in the program",
             ln % 2 ? s2 : s1);
    expect_refused(d, "a wrong shape", (const char *[]){want, NULL});
    free(d);

    /* strict over all shards together: a param in no shard, a tensor no param matches */
    d = make_dir("lacking");
    file_set less = fs;
    less.t[0] = less.t[--less.n];
    write_sharded(d, &less, 2, NULL);
    expect_refused(d, "a param in no shard", (const char *[]){"1 param missing from the shards (strict load): 'wte.weight'", NULL});
    free(d);
    d = make_dir("unknown");
    write_sharded(d, &extra, 2, NULL);
    expect_refused(d, "a tensor no param matches",
                   (const char *[]){"tensor 'transformer.h.7.ln_1.weight' matches no param or state of the program", NULL});
    free(d);
    free_tensors(&fs);
}

int main(void) {
    dfg_test_init("test_weights_dir");
    if (!dfg_test_tmpdir_create("dfg_wdir")) return 1;
    dfg_program *p = make_program();
    dfg_runtime *a = make_runtime(p, 1);
    if (!a) return dfg_test_finish();
    randomize(a);
    src = take(a);
    test_loads(p);
    test_half_shards(p);
    victim = make_runtime(p, 7);
    randomize(victim);
    before = take(victim);
    CHECK(n_differ(&before, &src) == model->n_params, "the victim shares params with the directories: a refusal could not be seen");
    test_refusals();
    drop(&before), drop(&src);
    dfg_runtime_free(victim);
    dfg_runtime_free(a);
    dfg_program_free(p);
    free(model);
    nftw(dfg_test_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return dfg_test_finish();
}
