/* safetensors.c - the safetensors reader and atomic writer (see safetensors.h).
 *
 * The reader treats every byte as hostile: it bounds the header before allocating for it,
 * validates UTF-8 and bounds the number of JSON values before cJSON builds a tree (a 100 MB
 * header of "[0,0,0,..." would otherwise cost gigabytes of nodes), and checks each entry's
 * dtype, shape and offsets before any pointer into the data is formed. Every failure writes one
 * line "<file>: <what>" naming the tensor or field at fault. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* uthash must report a failed allocation instead of calling exit() */
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (hash_oom = true)
#include <uthash.h>

#include "errline.h"
#include "fileio.h"
#include "safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as is"
#endif

#define ST_MAX_HEADER 100000000ull   /* the reference implementation's limit */
#define ST_MAX_JSON_VALUES (1 << 21) /* bounds cJSON's tree (~80 bytes a value) */
#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: beyond it a JSON number is not an exact integer */
#define ST_META_KEY "__metadata__"

/* ---------------------------------------------------------------- dtypes
 * Every dtype whose element size is known, so that a file holding tensors dfg cannot use (I64
 * token ids, F64 statistics) still parses and its other tensors stay usable. */
typedef struct {
    const char *name;
    size_t size;
    dfg_dtype dtype; /* DFG_DTYPE_COUNT: no dfg equivalent */
} st_dtype_info;

static const st_dtype_info st_dtypes[] = {
    {"F32", 4, DFG_F32},           {"BF16", 2, DFG_BF16},         {"F16", 2, DFG_F16},
    {"I32", 4, DFG_I32},           {"U8", 1, DFG_U8},             {"F64", 8, DFG_DTYPE_COUNT},
    {"I64", 8, DFG_DTYPE_COUNT},   {"U64", 8, DFG_DTYPE_COUNT},   {"U32", 4, DFG_DTYPE_COUNT},
    {"I16", 2, DFG_DTYPE_COUNT},   {"U16", 2, DFG_DTYPE_COUNT},   {"I8", 1, DFG_DTYPE_COUNT},
    {"BOOL", 1, DFG_DTYPE_COUNT},  {"F8_E4M3", 1, DFG_DTYPE_COUNT}, {"F8_E5M2", 1, DFG_DTYPE_COUNT},
};
#define ST_N_DTYPES ((int)(sizeof(st_dtypes) / sizeof(st_dtypes[0])))
_Static_assert(DFG_DTYPE_COUNT == 5, "a new dfg dtype needs its safetensors name in st_dtypes");

static const st_dtype_info *st_dtype_by_name(const char *name) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (name && strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

static const st_dtype_info *st_dtype_by_dfg(dfg_dtype dt) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (st_dtypes[i].dtype == dt && dt != DFG_DTYPE_COUNT) return &st_dtypes[i];
    return NULL;
}

/* ---------------------------------------------------------------- the parsed file */
typedef struct {
    dfg_st_tensor t;
    uint64_t begin, end; /* data_offsets, relative to the data section */
    UT_hash_handle hh;
} st_entry;

typedef struct {
    char *key, *value;
} st_meta;

struct dfg_safetensors {
    unsigned char *bytes; /* the whole file, owned */
    size_t len;
    st_entry *entries; /* file order */
    int n;
    st_entry *by_name; /* uthash head over entries */
    st_meta *meta;
    int n_meta;
};

/* Where messages go and which file they name. */
typedef dfg_errline st_ctx;

#define st_fail dfg_errline_fail

/* A name as it can appear in a one-line message: control bytes become '?', long names are cut
 * (at a UTF-8 boundary) and marked with "...". */
#define ST_QUOTE_MAX 120
static const char *st_quote(const char *s, char buf[ST_QUOTE_MAX + 4]) { return dfg_errline_quote(s, buf, ST_QUOTE_MAX); }

/* ---------------------------------------------------------------- header checks before cJSON */

/* Length of the well-formed UTF-8 sequence at p (1..4), or 0 (overlong, surrogate, > U+10FFFF,
 * truncated, stray continuation byte). */
static size_t st_utf8_len(const unsigned char *p, size_t avail) {
    unsigned char b = p[0];
    if (b < 0x80) return 1;
    size_t k;
    uint32_t cp, min;
    if ((b & 0xE0) == 0xC0) k = 2, cp = b & 0x1Fu, min = 0x80;
    else if ((b & 0xF0) == 0xE0) k = 3, cp = b & 0x0Fu, min = 0x800;
    else if ((b & 0xF8) == 0xF0) k = 4, cp = b & 0x07u, min = 0x10000;
    else return 0;
    if (k > avail) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

/* The header must be UTF-8 without NUL bytes (no valid JSON holds one) and hold a bounded
 * number of JSON values: every value but the first follows a ',' ,'[' or '{' outside a string. */
static dfg_status st_scan_header(const st_ctx *c, const unsigned char *h, size_t n) {
    size_t values = 1;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < n;) {
        unsigned char b = h[i];
        if (b == 0) return st_fail(c, DFG_ERR_FORMAT, "header holds a NUL byte at byte %zu", i);
        if (b >= 0x80) {
            size_t k = st_utf8_len(h + i, n - i);
            if (!k) return st_fail(c, DFG_ERR_FORMAT, "header is not valid UTF-8 at byte %zu", i);
            i += k;
            esc = false;
            continue;
        }
        if (in_str) {
            if (esc) esc = false;
            else if (b == '\\') esc = true;
            else if (b == '"') in_str = false;
        } else if (b == '"') in_str = true;
        else if (b == ',' || b == '[' || b == '{') values++;
        i++;
    }
    if (values > ST_MAX_JSON_VALUES)
        return st_fail(c, DFG_ERR_FORMAT, "header holds more than %d JSON values", ST_MAX_JSON_VALUES);
    return DFG_OK;
}

/* Reads the 8-byte length field and bounds it by the limit and by the bytes present. */
static dfg_status st_header_length(const st_ctx *c, const unsigned char *b, size_t len, size_t *hlen) {
    if (len < 8)
        return st_fail(c, DFG_ERR_FORMAT, "file is %zu bytes, shorter than the 8-byte header length field", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
    if (n > ST_MAX_HEADER)
        return st_fail(c, DFG_ERR_FORMAT, "header length %" PRIu64 " exceeds the %llu-byte limit", n, ST_MAX_HEADER);
    if (n > len - 8)
        return st_fail(c, DFG_ERR_FORMAT, "header length %" PRIu64 " exceeds the %zu bytes after the length field (truncated file?)",
                       n, len - 8);
    if (n < 2) return st_fail(c, DFG_ERR_FORMAT, "header length %" PRIu64 " is too short for a JSON object", n);
    *hlen = (size_t)n;
    return DFG_OK;
}

/* Parses the header text; only JSON whitespace may follow the object (writers pad with spaces). */
static dfg_status st_parse_json(const st_ctx *c, const unsigned char *h, size_t n, cJSON **out) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)h, n, &end, 0);
    if (!root) {
        size_t at = end && end >= (const char *)h ? (size_t)(end - (const char *)h) : 0;
        return st_fail(c, DFG_ERR_FORMAT, "header is not valid JSON (error near byte %zu of %zu)", at, n);
    }
    for (size_t i = (size_t)(end - (const char *)h); i < n; i++)
        if (h[i] != ' ' && h[i] != '\t' && h[i] != '\n' && h[i] != '\r') {
            cJSON_Delete(root);
            return st_fail(c, DFG_ERR_FORMAT, "header has bytes after its JSON value, at byte %zu", i);
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return st_fail(c, DFG_ERR_FORMAT, "header is not a JSON object");
    }
    *out = root;
    return DFG_OK;
}

/* ---------------------------------------------------------------- one tensor entry */

/* A JSON number that is an exact non-negative integer (<= 2^53). */
static bool st_json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_EXACT) || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

/* Finds the three fields of an entry; any other field, or one given twice, is an error. */
static dfg_status st_entry_fields(const st_ctx *c, const char *qn, const cJSON *e, const cJSON *f[3]) {
    static const char *const names[3] = {"dtype", "shape", "data_offsets"};
    char qb[ST_QUOTE_MAX + 4];
    f[0] = f[1] = f[2] = NULL;
    if (!cJSON_IsObject(e)) return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': entry is not a JSON object", qn);
    for (const cJSON *x = e->child; x; x = x->next) {
        int k = 0;
        while (k < 3 && strcmp(x->string ? x->string : "", names[k]) != 0) k++;
        if (k == 3)
            return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': unexpected field '%s'", qn, st_quote(x->string, qb));
        if (f[k]) return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': field '%s' appears twice", qn, names[k]);
        f[k] = x;
    }
    for (int k = 0; k < 3; k++)
        if (!f[k]) return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': missing field '%s'", qn, names[k]);
    return DFG_OK;
}

/* Reads "shape" into t->shape and the byte size it implies, refusing overflow. */
static dfg_status st_entry_shape(const st_ctx *c, const char *qn, const cJSON *js, size_t elem, dfg_shape *shape,
                                 uint64_t *bytes) {
    if (!cJSON_IsArray(js)) return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': field 'shape' is not an array", qn);
    int rank = cJSON_GetArraySize(js);
    if (rank > DFG_MAX_RANK)
        return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': shape has rank %d; dfg supports rank <= %d", qn, rank, DFG_MAX_RANK);
    *shape = (dfg_shape){.rank = rank};
    bool zero = false;
    int i = 0;
    for (const cJSON *d = js->child; d; d = d->next, i++) {
        uint64_t v;
        if (!st_json_uint(d, &v)) {
            if (cJSON_IsNumber(d))
                return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': shape[%d] = %.17g is not a non-negative integer", qn, i,
                               d->valuedouble);
            return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': shape[%d] is not a number", qn, i);
        }
        shape->d[i] = (int64_t)v;
        zero |= v == 0;
    }
    /* a zero dim makes the tensor empty however large the others are */
    uint64_t n = zero ? 0 : elem;
    for (i = 0; i < rank && !zero; i++)
        if (__builtin_mul_overflow(n, (uint64_t)shape->d[i], &n) || n > (uint64_t)INT64_MAX) {
            char sb[160];
            return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': shape %s is too large (its byte size overflows 64 bits)", qn,
                           dfg_shape_str(*shape, sb, sizeof(sb)));
        }
    *bytes = n;
    return DFG_OK;
}

/* Reads "data_offsets" and checks them against the data section and the shape's size. */
static dfg_status st_entry_offsets(const st_ctx *c, const char *qn, const cJSON *jo, uint64_t data_len, uint64_t need,
                                   const char *dtype, dfg_shape shape, st_entry *e) {
    uint64_t b = 0, en = 0;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !st_json_uint(jo->child, &b) ||
        !st_json_uint(jo->child->next, &en))
        return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': data_offsets is not [begin, end] with non-negative integers", qn);
    if (b > en)
        return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] have begin > end", qn, b, en);
    if (en > data_len)
        return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] exceed the %" PRIu64
                       "-byte data section", qn, b, en, data_len);
    if (en - b != need) {
        char sb[160];
        return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                       " bytes but %s %s needs %" PRIu64, qn, b, en, en - b, dtype, dfg_shape_str(shape, sb, sizeof(sb)), need);
    }
    e->begin = b, e->end = en;
    return DFG_OK;
}

/* Fills e from the JSON entry named `name`; data points into the data section. */
static dfg_status st_parse_entry(const st_ctx *c, const cJSON *je, const unsigned char *data, uint64_t data_len,
                                 st_entry *e) {
    char qb[ST_QUOTE_MAX + 4], qd[ST_QUOTE_MAX + 4];
    const char *qn = st_quote(je->string, qb);
    const cJSON *f[3];
    dfg_status st = st_entry_fields(c, qn, je, f);
    if (st) return st;
    if (!cJSON_IsString(f[0])) return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': field 'dtype' is not a string", qn);
    const st_dtype_info *di = st_dtype_by_name(f[0]->valuestring);
    if (!di) return st_fail(c, DFG_ERR_FORMAT, "tensor '%s': unknown dtype '%s'", qn, st_quote(f[0]->valuestring, qd));
    uint64_t bytes = 0;
    if ((st = st_entry_shape(c, qn, f[1], di->size, &e->t.shape, &bytes))) return st;
    if ((st = st_entry_offsets(c, qn, f[2], data_len, bytes, di->name, e->t.shape, e))) return st;
    e->t.name = strdup(je->string);
    if (!e->t.name) return st_fail(c, DFG_ERR_NOMEM, "out of memory reading the header");
    e->t.dtype = di->dtype;
    e->t.dtype_name = di->name;
    e->t.data = data + e->begin;
    e->t.bytes = (size_t)bytes;
    return DFG_OK;
}

/* ---------------------------------------------------------------- whole-file checks */

static dfg_status st_parse_metadata(const st_ctx *c, const cJSON *jm, dfg_safetensors *st) {
    char qb[ST_QUOTE_MAX + 4];
    if (st->meta) return st_fail(c, DFG_ERR_FORMAT, "'%s' appears twice", ST_META_KEY);
    if (!cJSON_IsObject(jm)) return st_fail(c, DFG_ERR_FORMAT, "'%s' is not a JSON object", ST_META_KEY);
    int n = cJSON_GetArraySize(jm);
    st->meta = calloc((size_t)(n ? n : 1), sizeof(*st->meta));
    if (!st->meta) return st_fail(c, DFG_ERR_NOMEM, "out of memory reading the header");
    for (const cJSON *x = jm->child; x; x = x->next) {
        if (!cJSON_IsString(x))
            return st_fail(c, DFG_ERR_FORMAT, "'%s' value of '%s' is not a string", ST_META_KEY, st_quote(x->string, qb));
        st_meta *m = &st->meta[st->n_meta++];
        m->key = strdup(x->string ? x->string : "");
        m->value = strdup(x->valuestring);
        if (!m->key || !m->value) return st_fail(c, DFG_ERR_NOMEM, "out of memory reading the header");
    }
    return DFG_OK;
}

static int st_cmp_begin(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* No two non-empty tensors may share a byte (a writer bug or a crafted aliasing file). */
static dfg_status st_check_overlap(const st_ctx *c, dfg_safetensors *st) {
    const st_entry **order = malloc((size_t)(st->n ? st->n : 1) * sizeof(*order));
    if (!order) return st_fail(c, DFG_ERR_NOMEM, "out of memory checking tensor offsets");
    int m = 0;
    for (int i = 0; i < st->n; i++)
        if (st->entries[i].end > st->entries[i].begin) order[m++] = &st->entries[i];
    qsort(order, (size_t)m, sizeof(*order), st_cmp_begin);
    dfg_status s = DFG_OK;
    for (int i = 1; i < m && !s; i++)
        if (order[i]->begin < order[i - 1]->end) {
            char qa[ST_QUOTE_MAX + 4], qb[ST_QUOTE_MAX + 4];
            s = st_fail(c, DFG_ERR_FORMAT,
                        "tensors '%s' and '%s' overlap: data_offsets [%" PRIu64 ", %" PRIu64 "] and [%" PRIu64 ", %" PRIu64 "]",
                        st_quote(order[i - 1]->t.name, qa), st_quote(order[i]->t.name, qb), order[i - 1]->begin,
                        order[i - 1]->end, order[i]->begin, order[i]->end);
        }
    free(order);
    return s;
}

/* Indexes the entries by name; a name given twice is an error. */
static dfg_status st_index_names(const st_ctx *c, dfg_safetensors *st) {
    bool hash_oom = false;
    for (int i = 0; i < st->n; i++) {
        st_entry *e = &st->entries[i], *dup = NULL;
        const char *name = e->t.name;
        HASH_FIND_STR(st->by_name, name, dup);
        if (dup) {
            char qb[ST_QUOTE_MAX + 4];
            return st_fail(c, DFG_ERR_FORMAT, "duplicate tensor name '%s'", st_quote(name, qb));
        }
        HASH_ADD_KEYPTR(hh, st->by_name, name, strlen(name), e);
        if (hash_oom) return st_fail(c, DFG_ERR_NOMEM, "out of memory indexing tensor names");
    }
    return DFG_OK;
}

/* Room for one more entry. The array grows as entries pass their checks rather than being
 * sized from the header's member count, so a header of a million bogus members costs nothing
 * before it fails; it is hashed only once complete, so moving it is safe. */
static dfg_status st_reserve_entry(const st_ctx *c, dfg_safetensors *st, int *cap) {
    if (st->n < *cap) return DFG_OK;
    int nc = *cap ? 2 * *cap : 16;
    st_entry *ne = realloc(st->entries, (size_t)nc * sizeof(*ne));
    if (!ne) return st_fail(c, DFG_ERR_NOMEM, "out of memory reading the header");
    memset(ne + *cap, 0, (size_t)(nc - *cap) * sizeof(*ne));
    st->entries = ne, *cap = nc;
    return DFG_OK;
}

/* Walks the header object: tensor entries in file order, then the whole-file checks. */
static dfg_status st_parse_entries(const st_ctx *c, const cJSON *root, const unsigned char *data, uint64_t data_len,
                                   dfg_safetensors *st) {
    int cap = 0;
    dfg_status s = DFG_OK;
    for (const cJSON *x = root->child; x && !s; x = x->next) {
        if (!x->string) s = st_fail(c, DFG_ERR_FORMAT, "header entry without a name");
        else if (strcmp(x->string, ST_META_KEY) == 0) s = st_parse_metadata(c, x, st);
        else if (!(s = st_reserve_entry(c, st, &cap)) && !(s = st_parse_entry(c, x, data, data_len, &st->entries[st->n])))
            st->n++;
    }
    if (!s) s = st_index_names(c, st);
    if (!s) s = st_check_overlap(c, st);
    return s;
}

/* Parses a file image that st already owns (st->bytes, st->len). */
static dfg_status st_parse_owned(const st_ctx *c, dfg_safetensors *st) {
    size_t hlen = 0;
    dfg_status s = st_header_length(c, st->bytes, st->len, &hlen);
    if (!s) s = st_scan_header(c, st->bytes + 8, hlen);
    cJSON *root = NULL;
    if (!s) s = st_parse_json(c, st->bytes + 8, hlen, &root);
    if (!s) s = st_parse_entries(c, root, st->bytes + 8 + hlen, st->len - 8 - hlen, st);
    cJSON_Delete(root);
    return s;
}

/* ---------------------------------------------------------------- public reader */

void dfg_st_free(dfg_safetensors *st) {
    if (!st) return;
    HASH_CLEAR(hh, st->by_name);
    for (int i = 0; st->entries && i < st->n; i++) free((char *)st->entries[i].t.name);
    for (int i = 0; i < st->n_meta; i++) free(st->meta[i].key), free(st->meta[i].value);
    free(st->entries);
    free(st->meta);
    free(st->bytes);
    free(st);
}

/* Takes ownership of bytes (even on failure) and parses them. */
static dfg_status st_open_bytes(const st_ctx *c, unsigned char *bytes, size_t len, dfg_safetensors **out) {
    dfg_safetensors *st = calloc(1, sizeof(*st));
    if (!st) {
        free(bytes);
        return st_fail(c, DFG_ERR_NOMEM, "out of memory");
    }
    st->bytes = bytes, st->len = len;
    dfg_status s = st_parse_owned(c, st);
    if (s) dfg_st_free(st);
    else *out = st;
    return s;
}

dfg_status dfg_st_parse(const void *bytes, size_t len, dfg_safetensors **out, char *err, size_t err_len) {
    st_ctx c = {"safetensors buffer", err, err_len};
    if (!out) return st_fail(&c, DFG_ERR_ARG, "out is NULL");
    *out = NULL;
    if (!bytes && len) return st_fail(&c, DFG_ERR_ARG, "bytes is NULL");
    /* exactly len bytes, so that a sanitizer sees any read past the input */
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy) return st_fail(&c, DFG_ERR_NOMEM, "out of memory copying %zu bytes", len);
    if (len) memcpy(copy, bytes, len);
    return st_open_bytes(&c, copy, len, out);
}

dfg_status dfg_st_open(const char *path, dfg_safetensors **out, char *err, size_t err_len) {
    st_ctx c = {path ? path : "(null)", err, err_len};
    if (!out) return st_fail(&c, DFG_ERR_ARG, "out is NULL");
    *out = NULL;
    if (!path) return st_fail(&c, DFG_ERR_ARG, "path is NULL");
    char *b = NULL;
    size_t n = 0;
    dfg_status s = dfg_file_read(path, NULL, SIZE_MAX, "a safetensors file", &b, &n, err, err_len);
    return s ? s : st_open_bytes(&c, (unsigned char *)b, n, out);
}

int dfg_st_count(const dfg_safetensors *st) { return st ? st->n : 0; }

const dfg_st_tensor *dfg_st_get(const dfg_safetensors *st, int i) {
    return st && i >= 0 && i < st->n ? &st->entries[i].t : NULL;
}

const dfg_st_tensor *dfg_st_find(const dfg_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    st_entry *e = NULL;
    HASH_FIND_STR(st->by_name, name, e);
    return e ? &e->t : NULL;
}

const char *dfg_st_metadata(const dfg_safetensors *st, const char *key) {
    for (int i = 0; st && key && i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

/* ---------------------------------------------------------------- writer: the header text */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} st_buf;

static void st_put(st_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void st_putf(st_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void st_putf(st_buf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) st_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string literal; s is valid UTF-8 (checked by the caller), so only quotes, backslashes
 * and control bytes need escapes. */
static void st_put_json_string(st_buf *b, const char *s) {
    st_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') st_putf(b, "\\%c", ch);
        else if (ch < 0x20) st_putf(b, "\\u%04x", ch);
        else st_put(b, s, 1);
    }
    st_put(b, "\"", 1);
}

static bool st_valid_utf8(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = st_utf8_len((const unsigned char *)s + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

/* Checks one tensor the caller gave and returns its safetensors dtype. */
static dfg_status st_check_out_tensor(const st_ctx *c, const dfg_st_tensor *t, const st_dtype_info **di) {
    char qb[ST_QUOTE_MAX + 4], sb[160];
    if (!t->name || !st_valid_utf8(t->name) || strcmp(t->name, ST_META_KEY) == 0)
        return st_fail(c, DFG_ERR_ARG, "tensor name '%s' is missing, not UTF-8 or reserved", st_quote(t->name, qb));
    const char *qn = st_quote(t->name, qb);
    *di = t->dtype == DFG_DTYPE_COUNT ? st_dtype_by_name(t->dtype_name) : st_dtype_by_dfg(t->dtype);
    if (!*di) return st_fail(c, DFG_ERR_ARG, "tensor '%s': dtype %d ('%s') has no safetensors name", qn, (int)t->dtype,
                             t->dtype_name ? t->dtype_name : "");
    if (t->shape.rank < 0 || t->shape.rank > DFG_MAX_RANK)
        return st_fail(c, DFG_ERR_ARG, "tensor '%s': rank %d is out of range", qn, t->shape.rank);
    uint64_t need = (*di)->size;
    for (int i = 0; i < t->shape.rank; i++)
        if (t->shape.d[i] < 0 || __builtin_mul_overflow(need, (uint64_t)t->shape.d[i], &need))
            return st_fail(c, DFG_ERR_ARG, "tensor '%s': bad shape %s", qn, dfg_shape_str(t->shape, sb, sizeof(sb)));
    if (need != t->bytes || (!t->data && t->bytes))
        return st_fail(c, DFG_ERR_ARG, "tensor '%s': %zu bytes given but %s %s needs %" PRIu64, qn, t->bytes,
                       (*di)->name, dfg_shape_str(t->shape, sb, sizeof(sb)), need);
    return DFG_OK;
}

typedef struct {
    const char *name;
    UT_hash_handle hh;
} st_seen;

/* Rejects a tensor name given twice (the file could not be read back). */
static dfg_status st_check_unique(const st_ctx *c, const dfg_st_tensor *ts, int n) {
    st_seen *seen = calloc((size_t)(n ? n : 1), sizeof(*seen)), *head = NULL, *dup = NULL;
    if (!seen) return st_fail(c, DFG_ERR_NOMEM, "out of memory");
    bool hash_oom = false;
    dfg_status s = DFG_OK;
    for (int i = 0; i < n && !s; i++) {
        HASH_FIND_STR(head, ts[i].name, dup);
        if (dup) {
            char qb[ST_QUOTE_MAX + 4];
            s = st_fail(c, DFG_ERR_ARG, "tensor name '%s' is given twice", st_quote(ts[i].name, qb));
            break;
        }
        seen[i].name = ts[i].name;
        HASH_ADD_KEYPTR(hh, head, seen[i].name, strlen(seen[i].name), &seen[i]);
        if (hash_oom) s = st_fail(c, DFG_ERR_NOMEM, "out of memory");
    }
    HASH_CLEAR(hh, head);
    free(seen);
    return s;
}

/* Builds the header text, padded with spaces to a multiple of 8 bytes so the data that follows
 * the 8-byte length field starts 8-byte aligned. */
static dfg_status st_build_header(const st_ctx *c, const dfg_st_tensor *ts, int n, const char *const *kv, int n_meta,
                                  st_buf *b) {
    dfg_status s = DFG_OK;
    const st_dtype_info *di = NULL;
    for (int i = 0; i < n && !s; i++) s = st_check_out_tensor(c, &ts[i], &di);
    if (!s) s = st_check_unique(c, ts, n); /* names are known non-NULL now */
    st_put(b, "{", 1);
    if (n_meta > 0) {
        st_put(b, "\"" ST_META_KEY "\":{", strlen(ST_META_KEY) + 4);
        for (int i = 0; i < n_meta && !s; i++) {
            const char *k = kv[2 * i], *v = kv[2 * i + 1];
            if (!k || !v || !st_valid_utf8(k) || !st_valid_utf8(v))
                return st_fail(c, DFG_ERR_ARG, "metadata pair %d is NULL or not UTF-8", i);
            st_put_json_string(b, k);
            st_put(b, ":", 1);
            st_put_json_string(b, v);
            st_put(b, i + 1 < n_meta ? "," : "}", 1);
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n && !s; i++) {
        di = ts[i].dtype == DFG_DTYPE_COUNT ? st_dtype_by_name(ts[i].dtype_name) : st_dtype_by_dfg(ts[i].dtype);
        st_put(b, i > 0 || n_meta > 0 ? "," : "", i > 0 || n_meta > 0);
        st_put_json_string(b, ts[i].name);
        st_putf(b, ":{\"dtype\":\"%s\",\"shape\":[", di->name);
        for (int d = 0; d < ts[i].shape.rank; d++) st_putf(b, d ? ",%" PRId64 : "%" PRId64, ts[i].shape.d[d]);
        st_putf(b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + ts[i].bytes);
        off += ts[i].bytes;
    }
    st_put(b, "}", 1);
    while (!s && !b->oom && b->n % 8) st_put(b, " ", 1);
    if (!s && b->oom) s = st_fail(c, DFG_ERR_NOMEM, "out of memory building the header");
    return s;
}

/* ---------------------------------------------------------------- writer: the file */

/* The file's contents, written atomically (fileio.h): length field, header, each tensor's bytes
 * in order. */
static dfg_status st_write_atomic(const st_ctx *c, const char *path, const st_buf *h, const dfg_st_tensor *ts, int n) {
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
    dfg_file_out f;
    dfg_status s = dfg_file_begin(&f, path, c->err, c->err_len);
    if (s) return s;
    s = dfg_file_put(&f, len8, 8, c->err, c->err_len);
    if (!s) s = dfg_file_put(&f, h->p, h->n, c->err, c->err_len);
    for (int i = 0; i < n && !s; i++)
        if (ts[i].bytes) s = dfg_file_put(&f, ts[i].data, ts[i].bytes, c->err, c->err_len);
    if (s) {
        dfg_file_abort(&f);
        return s;
    }
    return dfg_file_commit(&f, c->err, c->err_len);
}

dfg_status dfg_st_write(const char *path, const dfg_st_tensor *tensors, int n, const char *const *meta_kv, int n_meta,
                        char *err, size_t err_len) {
    st_ctx c = {path ? path : "(null)", err, err_len};
    if (!path || !*path || n < 0 || (n > 0 && !tensors) || n_meta < 0 || (n_meta > 0 && !meta_kv))
        return st_fail(&c, DFG_ERR_ARG, "bad arguments (path, tensors or metadata missing)");
    st_buf h = {0};
    dfg_status s = st_build_header(&c, tensors, n, meta_kv, n_meta, &h);
    if (!s) s = st_write_atomic(&c, path, &h, tensors, n);
    free(h.p);
    return s;
}
