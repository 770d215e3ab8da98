/* test_safetensors.c - the safetensors reader and writer: a round trip of every dtype, the
 * on-disk layout, atomic replacement, and a table of malformed files that must each fail with
 * the right status and a one-line message naming the tensor or field at fault. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/formats/safetensors.h"
#include "testutil.h"

/* A file image: 8-byte little-endian length, header text, dlen data bytes (i % 251). */
static unsigned char *make_file(const char *json, size_t dlen, size_t *len) {
    size_t h = strlen(json);
    *len = 8 + h + dlen;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, json, h);
    for (size_t i = 0; i < dlen; i++) b[8 + h + i] = (unsigned char)(i % 251);
    return b;
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len ? *len : 1);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static void write_file(const char *path, const void *b, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f) fwrite(b, 1, len, f), fclose(f);
}

/* The message is one line, starts with the source label and mentions every wanted string. */
static void check_message(const char *what, const char *err, const char *label, const char *const *want) {
    CHECK(strncmp(err, label, strlen(label)) == 0 && strncmp(err + strlen(label), ": ", 2) == 0,
          "%s: message '%s' does not start with '%s: '", what, err, label);
    CHECK(!strchr(err, '\n'), "%s: message '%s' spans lines", what, err);
    for (int i = 0; want[i]; i++) CHECK(strstr(err, want[i]), "%s: message '%s' lacks '%s'", what, err, want[i]);
}

/* ---------------------------------------------------------------- round trip */

typedef struct {
    dfg_st_tensor t;
    unsigned char *buf;
} owned_tensor;

static owned_tensor random_tensor(const char *name, dfg_dtype dt, const char *dtype_name, size_t elem, dfg_shape s) {
    owned_tensor o = {.t = {.name = name, .dtype = dt, .dtype_name = dtype_name, .shape = s}};
    o.t.bytes = (size_t)dfg_shape_numel(s) * elem;
    o.buf = malloc(o.t.bytes ? o.t.bytes : 1);
    for (size_t i = 0; i < o.t.bytes; i++) o.buf[i] = (unsigned char)dfg_test_u64();
    o.t.data = o.buf;
    return o;
}

static int count_dir_entries(void) {
    DIR *d = opendir(dfg_test_tmpdir());
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.' || (e->d_name[1] && e->d_name[1] != '.');
    if (d) closedir(d);
    return n;
}

static void test_round_trip(void) {
    enum { N = 9 };
    owned_tensor o[N] = {
        random_tensor("wte.weight", DFG_F32, NULL, 4, DFG_SHAPE(7, 5)),
        random_tensor("h.0.attn.c_attn.bias", DFG_BF16, NULL, 2, DFG_SHAPE(15)),
        random_tensor("h.0.ln_1.weight \"quoted\\\" \xc3\xa9", DFG_F16, NULL, 2, DFG_SHAPE(3, 1)),
        random_tensor("step", DFG_I32, NULL, 4, DFG_SCALAR),
        random_tensor("mask", DFG_U8, NULL, 1, DFG_SHAPE(3)), /* leaves the next tensor unaligned */
        random_tensor("empty", DFG_F32, NULL, 4, DFG_SHAPE(0, 3)),
        random_tensor("ids", DFG_DTYPE_COUNT, "I64", 8, DFG_SHAPE(2, 2)),
        random_tensor("rank6", DFG_F32, NULL, 4, DFG_SHAPE(1, 2, 1, 2, 1, 2)),
        random_tensor("last", DFG_U8, NULL, 1, DFG_SHAPE(5)),
    };
    dfg_st_tensor ts[N];
    for (int i = 0; i < N; i++) ts[i] = o[i].t;
    const char *meta[] = {"format", "pt", "note", "line1\nline2 \"q\""};
    char err[1024] = "";
    const char *path = dfg_test_tmp_path("rt.safetensors");
    dfg_status s = dfg_st_write(path, ts, N, meta, 2, err, sizeof(err));
    CHECK(s == DFG_OK, "write failed: %s", err);
    CHECK(count_dir_entries() == 1, "the temporary file was left behind (%d entries)", count_dir_entries());

    size_t len = 0;
    unsigned char *raw = read_file(path, &len);
    uint64_t hlen = 0;
    for (int i = 7; raw && len >= 8 && i >= 0; i--) hlen = (hlen << 8) | raw[i];
    CHECK(raw && len >= 8 && hlen % 8 == 0 && raw[8] == '{', "header length %llu is not 8-byte aligned JSON",
          (unsigned long long)hlen);
    size_t data_bytes = 0;
    for (int i = 0; i < N; i++) data_bytes += ts[i].bytes;
    CHECK(len == 8 + hlen + data_bytes, "file is %zu bytes, expected %llu", len,
          (unsigned long long)(8 + hlen + data_bytes));
    free(raw);

    dfg_safetensors *st = NULL;
    s = dfg_st_open(path, &st, err, sizeof(err));
    CHECK(s == DFG_OK && st, "open failed: %s", err);
    if (!st) return;
    CHECK(dfg_st_count(st) == N, "count %d, expected %d", dfg_st_count(st), N);
    for (int i = 0; i < N && i < dfg_st_count(st); i++) {
        const dfg_st_tensor *r = dfg_st_get(st, i);
        CHECK(strcmp(r->name, ts[i].name) == 0, "tensor %d is '%s', expected '%s'", i, r->name, ts[i].name);
        CHECK(r->dtype == ts[i].dtype, "'%s': dtype %d, expected %d", ts[i].name, r->dtype, ts[i].dtype);
        const char *want_dn = ts[i].dtype_name ? ts[i].dtype_name
                                               : (const char *[]){"F32", "BF16", "F16", "I32", "U8"}[ts[i].dtype];
        CHECK(strcmp(r->dtype_name, want_dn) == 0, "'%s': dtype name %s, expected %s", ts[i].name, r->dtype_name, want_dn);
        CHECK(r->shape.rank == ts[i].shape.rank &&
                  memcmp(r->shape.d, ts[i].shape.d, sizeof(int64_t) * (size_t)ts[i].shape.rank) == 0,
              "'%s': shape differs", ts[i].name);
        CHECK(r->bytes == ts[i].bytes && (!r->bytes || memcmp(r->data, ts[i].data, r->bytes) == 0),
              "'%s': bytes differ", ts[i].name);
        CHECK(dfg_st_find(st, ts[i].name) == r, "find('%s') does not return entry %d", ts[i].name, i);
    }
    CHECK(dfg_st_find(st, "absent") == NULL, "find of an absent name returned an entry");
    CHECK(dfg_st_metadata(st, "format") && strcmp(dfg_st_metadata(st, "format"), "pt") == 0, "metadata 'format' lost");
    CHECK(dfg_st_metadata(st, "note") && strcmp(dfg_st_metadata(st, "note"), meta[3]) == 0, "metadata 'note' lost");
    CHECK(dfg_st_metadata(st, "absent") == NULL, "absent metadata key found");
    dfg_st_free(st);

    /* replacing the file: the new contents, not a mix, and still no temporary left */
    s = dfg_st_write(path, ts + 3, 1, NULL, 0, err, sizeof(err));
    CHECK(s == DFG_OK, "rewrite failed: %s", err);
    s = dfg_st_open(path, &st, err, sizeof(err));
    CHECK(s == DFG_OK && dfg_st_count(st) == 1 && strcmp(dfg_st_get(st, 0)->name, "step") == 0 &&
              dfg_st_metadata(st, "format") == NULL,
          "rewritten file does not hold exactly the new tensor: %s", err);
    dfg_st_free(st);
    CHECK(count_dir_entries() == 1, "a temporary file was left behind after the rewrite");
    unlink(path);
    for (int i = 0; i < N; i++) free(o[i].buf);
}

/* ---------------------------------------------------------------- writer errors */

static void test_write_errors(void) {
    float x[4] = {1, 2, 3, 4};
    dfg_st_tensor t = {.name = "x", .dtype = DFG_F32, .shape = DFG_SHAPE(4), .data = x, .bytes = sizeof(x)};
    char err[1024] = "";
    dfg_status s = dfg_st_write("/nonexistent-dfg-dir/a.safetensors", &t, 1, NULL, 0, err, sizeof(err));
    CHECK(s == DFG_ERR_IO, "write into a missing directory: status %s", dfg_status_name(s));
    check_message("missing dir", err, "/nonexistent-dfg-dir/a.safetensors", (const char *[]){"temporary", NULL});

    dfg_st_tensor two[2] = {t, t};
    const char *path = dfg_test_tmp_path("bad.safetensors");
    s = dfg_st_write(path, two, 2, NULL, 0, err, sizeof(err));
    CHECK(s == DFG_ERR_ARG, "duplicate names: status %s", dfg_status_name(s));
    check_message("dup write", err, path, (const char *[]){"'x'", "twice", NULL});

    dfg_st_tensor wrong = t;
    wrong.bytes = 12;
    s = dfg_st_write(path, &wrong, 1, NULL, 0, err, sizeof(err));
    CHECK(s == DFG_ERR_ARG, "size mismatch: status %s", dfg_status_name(s));
    check_message("size write", err, path, (const char *[]){"'x'", "12 bytes", "needs 16", NULL});

    wrong = t;
    wrong.dtype = DFG_DTYPE_COUNT, wrong.dtype_name = "C64";
    s = dfg_st_write(path, &wrong, 1, NULL, 0, err, sizeof(err));
    CHECK(s == DFG_ERR_ARG, "unknown dtype: status %s", dfg_status_name(s));
    check_message("dtype write", err, path, (const char *[]){"'x'", "C64", NULL});
    wrong = t;
    wrong.name = NULL;
    s = dfg_st_write(path, two, 1, NULL, 0, err, sizeof(err)); /* a valid write first, then a NULL name */
    CHECK(s == DFG_OK, "single write failed: %s", err);
    dfg_st_tensor with_null[2] = {t, wrong};
    s = dfg_st_write(path, with_null, 2, NULL, 0, err, sizeof(err));
    CHECK(s == DFG_ERR_ARG, "NULL name: status %s", dfg_status_name(s));
    check_message("null name", err, path, (const char *[]){"missing", NULL});
    dfg_safetensors *st = NULL;
    CHECK(dfg_st_open(path, &st, err, sizeof(err)) == DFG_OK && dfg_st_count(st) == 1,
          "a failed write damaged the existing file: %s", err);
    dfg_st_free(st);
    unlink(path);
    CHECK(access(path, F_OK) != 0, "a failed write created the file");
    CHECK(count_dir_entries() == 0, "a failed write left files behind");
}

/* ---------------------------------------------------------------- truncation */

static void test_truncation(void) {
    float a[6];
    dfg_test_fill_normal(a, 6, 1.0f);
    uint16_t b[3] = {1, 2, 3};
    dfg_st_tensor ts[2] = {{.name = "a", .dtype = DFG_F32, .shape = DFG_SHAPE(2, 3), .data = a, .bytes = sizeof(a)},
                           {.name = "b", .dtype = DFG_BF16, .shape = DFG_SHAPE(3), .data = b, .bytes = sizeof(b)}};
    const char *meta[] = {"format", "pt"};
    const char *path = dfg_test_tmp_path("small.safetensors");
    char err[1024] = "";
    CHECK(dfg_st_write(path, ts, 2, meta, 1, err, sizeof(err)) == DFG_OK, "write failed: %s", err);
    size_t len = 0;
    unsigned char *full = read_file(path, &len);
    unlink(path);
    int failed_cleanly = 0;
    for (size_t n = 0; full && n <= len; n++) {
        dfg_safetensors *st = (dfg_safetensors *)&failed_cleanly; /* must be reset to NULL on failure */
        err[0] = '\0';
        dfg_status s = dfg_st_parse(full, n, &st, err, sizeof(err));
        if (n < len) {
            CHECK(s == DFG_ERR_FORMAT && st == NULL && err[0], "truncated to %zu of %zu bytes: status %s, msg '%s'", n, len,
                  dfg_status_name(s), err);
            failed_cleanly += s == DFG_ERR_FORMAT;
        } else {
            CHECK(s == DFG_OK && st && dfg_st_count(st) == 2, "the full %zu-byte file failed: %s", len, err);
        }
        if (s == DFG_OK) dfg_st_free(st);
    }
    CHECK(full && failed_cleanly == (int)len, "%d of %zu truncations failed cleanly", failed_cleanly, len);
    free(full);
}

/* ---------------------------------------------------------------- malformed files */

typedef struct {
    const char *what;
    const char *json;
    size_t data_len;
    dfg_status status; /* DFG_OK: must parse */
    const char *want[4];
} bad_case;

static const bad_case bad_cases[] = {
    {"invalid JSON", "{\"w\": {\"dtype\": \"F32\",", 0, DFG_ERR_FORMAT, {"not valid JSON"}},
    {"not an object", "[1, 2]", 0, DFG_ERR_FORMAT, {"not a JSON object"}},
    {"trailing bytes", "{} x", 0, DFG_ERR_FORMAT, {"after its JSON value"}},
    {"invalid UTF-8", "{\"w\xff\": 1}", 0, DFG_ERR_FORMAT, {"UTF-8", "byte 3"}},
    {"overlong UTF-8", "{\"w\xc0\xaf\": 1}", 0, DFG_ERR_FORMAT, {"UTF-8"}},
    {"entry not an object", "{\"w\": 5}", 0, DFG_ERR_FORMAT, {"tensor 'w'", "not a JSON object"}},
    {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, DFG_ERR_FORMAT,
     {"tensor 'w'", "'dtype' is not a string"}},
    {"shape not an array", "{\"w\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, DFG_ERR_FORMAT,
     {"tensor 'w'", "'shape' is not an array"}},
    {"shape of strings", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, DFG_ERR_FORMAT,
     {"tensor 'w'", "shape[0] is not a number"}},
    {"missing field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, DFG_ERR_FORMAT,
     {"tensor 'w'", "missing field 'data_offsets'"}},
    {"extra field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"foo\":1}}", 8, DFG_ERR_FORMAT,
     {"tensor 'w'", "unexpected field 'foo'"}},
    {"field twice", "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     DFG_ERR_FORMAT, {"tensor 'w'", "'dtype' appears twice"}},
    {"offsets out of range", "{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9999999]}}",
     16, DFG_ERR_FORMAT, {"tensor 'h.0.attn.c_attn.weight'", "data_offsets [0, 9999999] exceed the 16-byte data section"}},
    {"begin > end", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, DFG_ERR_FORMAT,
     {"tensor 'w'", "[8, 4]", "begin > end"}},
    {"offsets arity", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 8, DFG_ERR_FORMAT,
     {"tensor 'w'", "data_offsets is not [begin, end]"}},
    {"negative offset", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-4,0]}}", 8, DFG_ERR_FORMAT,
     {"tensor 'w'", "data_offsets"}},
    {"size mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16, DFG_ERR_FORMAT,
     {"tensor 'w'", "hold 12 bytes but F32 (2,2) needs 16"}},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
     24, DFG_ERR_FORMAT, {"'a' and 'b' overlap", "[0, 16]", "[8, 24]"}},
    {"duplicate name",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, DFG_ERR_FORMAT, {"duplicate tensor name 'w'"}},
    {"rank 7", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, DFG_ERR_FORMAT,
     {"tensor 'w'", "rank 7", "rank <= 6"}},
    {"negative dim", "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,-1],\"data_offsets\":[0,0]}}", 0, DFG_ERR_FORMAT,
     {"tensor 'w'", "shape[1] = -1"}},
    {"fractional dim", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 2, DFG_ERR_FORMAT,
     {"tensor 'w'", "shape[0] = 1.5"}},
    {"dim beyond 2^53", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,1]}}", 2, DFG_ERR_FORMAT,
     {"tensor 'w'", "shape[0] = 1"}},
    {"dim product overflow",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
     DFG_ERR_FORMAT, {"tensor 'w'", "(4294967296,4294967296,4294967296)", "overflows"}},
    {"unknown dtype", "{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, DFG_ERR_FORMAT,
     {"tensor 'w'", "unknown dtype 'Q7'"}},
    {"metadata not an object", "{\"__metadata__\":\"x\"}", 0, DFG_ERR_FORMAT, {"'__metadata__' is not a JSON object"}},
    {"metadata value not a string", "{\"__metadata__\":{\"k\":1}}", 0, DFG_ERR_FORMAT,
     {"'__metadata__'", "'k' is not a string"}},
    {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, DFG_ERR_FORMAT, {"'__metadata__' appears twice"}},
    {"control bytes in a name are not printed",
     "{\"a\\nb\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, DFG_ERR_FORMAT, {"tensor 'a?b'"}},
    /* valid corner cases */
    {"empty header", "{}", 0, DFG_OK, {NULL}},
    {"padded header", "{\"__metadata__\":{\"k\":\"v\"}}      \n", 0, DFG_OK, {NULL}},
    {"empty tensors share offsets",
     "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]},"
     "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}",
     4, DFG_OK, {NULL}},
    {"gap between tensors", "{\"s\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}", 8, DFG_OK, {NULL}},
};

static void test_bad_cases(void) {
    for (size_t k = 0; k < sizeof(bad_cases) / sizeof(bad_cases[0]); k++) {
        const bad_case *c = &bad_cases[k];
        size_t len = 0;
        unsigned char *b = make_file(c->json, c->data_len, &len);
        dfg_safetensors *st = NULL;
        char err[1024] = "";
        dfg_status s = dfg_st_parse(b, len, &st, err, sizeof(err));
        CHECK(s == c->status, "%s: status '%s', expected '%s' (%s)", c->what, dfg_status_name(s),
              dfg_status_name(c->status), err);
        if (c->status != DFG_OK) {
            CHECK(st == NULL, "%s: *out not NULL on failure", c->what);
            check_message(c->what, err, "safetensors buffer", c->want);
        }
        dfg_st_free(st);
        free(b);
    }
}

/* Length-field and size cases a JSON string cannot express. */
static void test_bad_framing(void) {
    char err[1024];
    dfg_safetensors *st = NULL;
    unsigned char b[32] = {0};
    dfg_status s = dfg_st_parse(b, 5, &st, err, sizeof(err));
    CHECK(s == DFG_ERR_FORMAT && !st, "5-byte file: %s", dfg_status_name(s));
    check_message("short", err, "safetensors buffer", (const char *[]){"5 bytes", "8-byte", NULL});

    b[0] = 0xe8, b[1] = 0x03; /* 1000 */
    memcpy(b + 8, "{}", 2);
    s = dfg_st_parse(b, 10, &st, err, sizeof(err));
    CHECK(s == DFG_ERR_FORMAT && !st, "header > file: %s", dfg_status_name(s));
    check_message("header > file", err, "safetensors buffer", (const char *[]){"header length 1000", "exceeds the 2 bytes", NULL});

    memset(b, 0xff, 8);
    s = dfg_st_parse(b, 10, &st, err, sizeof(err));
    CHECK(s == DFG_ERR_FORMAT && !st, "absurd header length: %s", dfg_status_name(s));
    check_message("absurd", err, "safetensors buffer", (const char *[]){"18446744073709551615", "100000000-byte limit", NULL});

    memset(b, 0, 8);
    s = dfg_st_parse(b, 8, &st, err, sizeof(err));
    CHECK(s == DFG_ERR_FORMAT && !st, "zero header length: %s", dfg_status_name(s));
    check_message("zero", err, "safetensors buffer", (const char *[]){"too short", NULL});

    b[0] = 4;
    memcpy(b + 8, "{ \0}", 4);
    s = dfg_st_parse(b, 12, &st, err, sizeof(err));
    CHECK(s == DFG_ERR_FORMAT && !st, "NUL in header: %s", dfg_status_name(s));
    check_message("nul", err, "safetensors buffer", (const char *[]){"NUL byte at byte 2", NULL});

    /* more JSON values than the reader lets cJSON build (bounds its memory) */
    size_t nz = 2200000, jl = 64 + 2 * nz;
    char *json = malloc(jl);
    size_t o = (size_t)sprintf(json, "{\"w\":{\"dtype\":\"U8\",\"shape\":[");
    for (size_t i = 0; i < nz; i++) json[o++] = '0', json[o++] = ',';
    strcpy(json + o - 1, "],\"data_offsets\":[0,0]}}");
    size_t len = 0;
    unsigned char *big = make_file(json, 0, &len);
    s = dfg_st_parse(big, len, &st, err, sizeof(err));
    CHECK(s == DFG_ERR_FORMAT && !st, "2.2M-value header: %s", dfg_status_name(s));
    check_message("many values", err, "safetensors buffer", (const char *[]){"JSON values", NULL});
    free(big);
    free(json);
}

/* ---------------------------------------------------------------- files on disk */

static void test_open_errors(void) {
    char err[1024];
    dfg_safetensors *st = NULL;
    const char *missing = dfg_test_tmp_path("missing.safetensors");
    dfg_status s = dfg_st_open(missing, &st, err, sizeof(err));
    CHECK(s == DFG_ERR_IO && !st, "missing file: %s", dfg_status_name(s));
    check_message("missing", err, missing, (const char *[]){"cannot open", NULL});

    s = dfg_st_open(dfg_test_tmpdir(), &st, err, sizeof(err));
    CHECK(s == DFG_ERR_IO && !st, "directory: %s", dfg_status_name(s));
    check_message("directory", err, dfg_test_tmpdir(), (const char *[]){"not a regular file", NULL});

    /* the example of a good message: the file, the tensor, the offsets and the data size */
    char json[160];
    snprintf(json, sizeof(json), "{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9999999]}}");
    size_t len = 0;
    unsigned char *b = make_file(json, 4096, &len);
    const char *path = dfg_test_tmp_path("model.safetensors");
    write_file(path, b, len);
    free(b);
    s = dfg_st_open(path, &st, err, sizeof(err));
    char want[512];
    snprintf(want, sizeof(want), "%s: tensor 'h.0.attn.c_attn.weight': data_offsets [0, 9999999] exceed the 4096-byte data section",
             path);
    CHECK(s == DFG_ERR_FORMAT && strcmp(err, want) == 0, "message '%s', expected '%s'", err, want);
    unlink(path);
}

/* A dtype safetensors knows and dfg does not stays readable with dtype DFG_DTYPE_COUNT. */
static void test_foreign_dtype(void) {
    const char *json = "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                       "\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[16,20]},"
                       "\"m\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[20,23]}}";
    size_t len = 0;
    unsigned char *b = make_file(json, 23, &len);
    dfg_safetensors *st = NULL;
    char err[1024] = "";
    dfg_status s = dfg_st_parse(b, len, &st, err, sizeof(err));
    CHECK(s == DFG_OK, "I64 file failed: %s", err);
    const dfg_st_tensor *ids = dfg_st_find(st, "ids"), *w = dfg_st_find(st, "w"), *m = dfg_st_find(st, "m");
    CHECK(ids && ids->dtype == DFG_DTYPE_COUNT && strcmp(ids->dtype_name, "I64") == 0 && ids->bytes == 16 &&
              ids->shape.rank == 1 && ids->shape.d[0] == 2,
          "I64 entry wrong");
    CHECK(ids && ((const unsigned char *)ids->data)[15] == 15, "I64 data does not point at its bytes");
    CHECK(w && w->dtype == DFG_BF16 && ((const unsigned char *)w->data)[0] == 16, "BF16 entry wrong");
    CHECK(m && m->dtype == DFG_DTYPE_COUNT && strcmp(m->dtype_name, "F8_E4M3") == 0 && m->bytes == 3, "F8 entry wrong");
    dfg_st_free(st);
    free(b);
}

int main(void) {
    dfg_test_init("test_safetensors");
    if (!dfg_test_tmpdir_create("dfg_st")) return 1;
    test_round_trip();
    test_write_errors();
    test_truncation();
    test_bad_cases();
    test_bad_framing();
    test_open_errors();
    test_foreign_dtype();
    dfg_test_tmpdir_remove();
    return dfg_test_finish();
}
