/* dataset.c - a JSONL prompt dataset in memory (dfg_dataset.h; the format is docs/rewards.md's).
 *
 * The file is hostile input like a config.json (runtime/formats/model_config.c): its size is bounded
 * before it is read, and each line's JSON values are counted before cJSON builds a tree of it.
 * The file is read a line at a time (getline: no limit on a line but the file's), so besides
 * the rows themselves reading holds one line and its tree. Rows go into three growing arrays,
 * not one allocation each: the ids of every prompt back to back, the field texts (each the
 * line's object without prompt_ids, printed compact and NUL-terminated) back to back, and a
 * table of offsets. Every refusal is one line "<file>:<line>: <what>" through errline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dataset.h"
#include "dfg_runtime.h"
#include "../formats/errline.h"
#include "../formats/fileio.h"

_Static_assert(sizeof(size_t) >= 8, "a prompt dataset may be 4 GiB");
_Static_assert(DFG_DATASET_MAX_BYTES / 19 < INT32_MAX, "the order is int32: fewer rows than that");

#define DS_KEY "prompt_ids"
#define DS_QUOTE_MAX 60
#define DS_SHOW_MAX (DS_QUOTE_MAX + 8)

typedef struct {
    size_t ids_at, n_ids; /* into ids */
    size_t fields_at;     /* into fields */
    int64_t line;         /* 1-based */
} ds_row;

struct dfg_dataset {
    ds_row *rows; /* (n_rows) */
    size_t n_rows, cap_rows;
    int32_t *ids; /* (n_ids): every prompt back to back */
    size_t n_ids, cap_ids;
    char *fields; /* every row's field text, NUL-terminated, back to back */
    size_t n_fields, cap_fields;
    size_t max_len;
    uint64_t hash;
    int32_t *perm; /* (n_rows): the order of (perm_seed, perm_epoch) once perm_valid */
    bool perm_valid;
    uint64_t perm_seed;
    int64_t perm_epoch;
};

/* One reading: the dataset being filled and where its messages go. */
typedef struct {
    dfg_dataset *ds;
    const char *path;
    int64_t vocab_size;
    char *err;
    size_t err_len;
    char *label; /* "<path>:<line>", rewritten for each line */
    size_t label_len;
    int64_t lines; /* lines seen, blank ones too */
} ds_reader;

/* ---------------------------------------------------------------- growing arrays and the hash */

/* Makes room for `need` elements of `elem` bytes in *p (capacity *cap), doubling. */
static bool ds_reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return false;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q, *cap = c;
    return true;
}

#define DS_FNV_OFFSET 0xcbf29ce484222325ull
#define DS_FNV_PRIME 0x100000001b3ull

static uint64_t ds_fnv(uint64_t h, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * DS_FNV_PRIME;
    return h;
}

/* x as k little-endian bytes, so that the hash is the same on every machine */
static uint64_t ds_fnv_le(uint64_t h, uint64_t x, int k) {
    for (int i = 0; i < k; i++) h = (h ^ (unsigned char)(x >> (8 * i))) * DS_FNV_PRIME;
    return h;
}

/* A row into the hash: its id count, its ids, its field text's length and bytes. */
static uint64_t ds_hash_row(uint64_t h, const int32_t *ids, size_t n, const char *fields, size_t n_fields) {
    h = ds_fnv_le(h, n, 8);
    for (size_t i = 0; i < n; i++) h = ds_fnv_le(h, (uint32_t)ids[i], 4);
    h = ds_fnv_le(h, n_fields, 8);
    return ds_fnv(h, (const unsigned char *)fields, n_fields);
}

/* ---------------------------------------------------------------- values as messages show them */

/* A JSON value for a message: numbers as short as they read back, strings quoted and cut,
 * containers by kind (their text could be megabytes). */
static const char *ds_show(const cJSON *v, char buf[DS_SHOW_MAX]) {
    char q[DS_QUOTE_MAX + 4];
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) < 1e15) snprintf(buf, DS_SHOW_MAX, "%.0f", d);
        else
            for (int prec = 6; prec <= 17; prec++) { /* the shortest that reads back: 1.5, not 1.5000... */
                snprintf(buf, DS_SHOW_MAX, "%.*g", prec, d);
                if (strtod(buf, NULL) == d) break;
            }
    } else if (cJSON_IsString(v)) snprintf(buf, DS_SHOW_MAX, "\"%s\"", dfg_errline_quote(v->valuestring, q, DS_QUOTE_MAX));
    else if (cJSON_IsTrue(v)) snprintf(buf, DS_SHOW_MAX, "true");
    else if (cJSON_IsFalse(v)) snprintf(buf, DS_SHOW_MAX, "false");
    else if (cJSON_IsNull(v)) snprintf(buf, DS_SHOW_MAX, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, DS_SHOW_MAX, "a list");
    else snprintf(buf, DS_SHOW_MAX, "an object");
    return buf;
}

/* ---------------------------------------------------------------- one line */

static bool ds_blank(const char *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] != ' ' && t[i] != '\t' && t[i] != '\r') return false;
    return true;
}

/* UTF-8 (no overlong form, no surrogate, nothing past U+10FFFF) without control bytes but tab
 * and '\r' (JSON white space; '\n' ends the line). cJSON copies string bytes as they are and
 * takes any byte up to ' ' for white space, so without this a field could reach a reward
 * program as text its JSON reader refuses. */
static dfg_status ds_scan_text(const dfg_errline *c, const unsigned char *t, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned b = t[i];
        if (b < 0x80) {
            if (b < 0x20 && b != '\t' && b != '\r')
                return dfg_errline_fail(c, DFG_ERR_FORMAT, "holds the control byte 0x%02x at byte %zu", b, i);
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if (b >= 0xC2 && b <= 0xDF) k = 1, cp = b & 0x1F, min = 0x80;
        else if ((b & 0xF0) == 0xE0) k = 2, cp = b & 0x0F, min = 0x800;
        else if (b >= 0xF0 && b <= 0xF4) k = 3, cp = b & 0x07, min = 0x10000;
        else return dfg_errline_fail(c, DFG_ERR_FORMAT, "not UTF-8 (byte %zu is 0x%02x)", i, b);
        bool ok = n - i > k;
        for (size_t j = 1; ok && j <= k; j++) {
            ok = (t[i + j] & 0xC0) == 0x80;
            cp = cp << 6 | (t[i + j] & 0x3F);
        }
        if (!ok || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return dfg_errline_fail(c, DFG_ERR_FORMAT, "not UTF-8 (a bad sequence at byte %zu)", i);
        i += k + 1;
    }
    return DFG_OK;
}

/* The line's one JSON object, with nothing after it but white space (cJSON stops at the end of
 * the first value and would accept "{...} garbage"). */
static dfg_status ds_parse(const dfg_errline *c, const char *t, size_t n, cJSON **root) {
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(t, n, &end, 0);
    if (!*root) {
        size_t at = end && end >= t && end <= t + n ? (size_t)(end - t) : 0;
        return dfg_errline_fail(c, DFG_ERR_FORMAT, "not valid JSON (error near byte %zu of the line)", at);
    }
    size_t at = end && end >= t && end <= t + n ? (size_t)(end - t) : n;
    while (at < n && (t[at] == ' ' || t[at] == '\t' || t[at] == '\r')) at++;
    if (at < n)
        return dfg_errline_fail(c, DFG_ERR_FORMAT, "not valid JSON (text after the end of the value, at byte %zu)", at);
    if (!cJSON_IsObject(*root)) {
        char v[DS_SHOW_MAX];
        return dfg_errline_fail(c, DFG_ERR_FORMAT, "not a JSON object (%s; each line is one object with \"" DS_KEY "\")",
                                ds_show(*root, v));
    }
    return DFG_OK;
}

/* The object's one "prompt_ids": a non-empty list. */
static dfg_status ds_find_ids(const dfg_errline *c, const cJSON *root, cJSON **out) {
    int n = 0;
    *out = NULL;
    for (cJSON *x = root->child; x; x = x->next)
        if (x->string && !strcmp(x->string, DS_KEY) && n++ == 0) *out = x;
    char v[DS_SHOW_MAX];
    if (n > 1)
        return dfg_errline_fail(c, DFG_ERR_FORMAT, "\"" DS_KEY "\" appears %d times (which one counts is ambiguous)", n);
    if (!*out) { /* a text or TRL conversational dataset: what to run on it */
        const char *text = cJSON_GetObjectItemCaseSensitive(root, "prompt") ? "prompt"
                         : cJSON_GetObjectItemCaseSensitive(root, "messages") ? "messages" : NULL;
        const cJSON *t = text ? cJSON_GetObjectItemCaseSensitive(root, text) : NULL;
        bool chat = cJSON_IsArray(t) && cJSON_IsObject(t->child);
        if (text && (chat || cJSON_IsString(t)))
            return dfg_errline_fail(c, DFG_ERR_FORMAT, "no \"" DS_KEY "\", but a \"%s\" that is %s: dfg reads token ids; "
                                    "tools/prepare_prompts.py tokenizes it%s", text,
                                    chat ? "a conversation (a list of messages)" : "text",
                                    chat ? " with the tokenizer's chat template" : "");
        return dfg_errline_fail(c, DFG_ERR_FORMAT, "no \"" DS_KEY "\" (each line is one object with it: the prompt's "
                                "token ids)");
    }
    if (!cJSON_IsArray(*out))
        return dfg_errline_fail(c, DFG_ERR_FORMAT, "\"" DS_KEY "\" must be a list of token ids, got %s", ds_show(*out, v));
    if (!(*out)->child) return dfg_errline_fail(c, DFG_ERR_FORMAT, "\"" DS_KEY "\" is empty (a prompt needs a token)");
    return DFG_OK;
}

/* Appends the list's ids to ds->ids (committed by the caller), each an integer in range. */
static dfg_status ds_take_ids(const dfg_errline *c, const ds_reader *r, const cJSON *list, size_t *n_out) {
    dfg_dataset *ds = r->ds;
    size_t n = 0;
    for (const cJSON *x = list->child; x; x = x->next) n++;
    if (!ds_reserve((void **)&ds->ids, &ds->cap_ids, ds->n_ids + n, sizeof(int32_t)))
        return dfg_errline_fail(c, DFG_ERR_NOMEM, "cannot allocate room for %zu more token ids", n);
    /* the largest id: the vocabulary's, else int32's */
    bool vocab = r->vocab_size > 0 && r->vocab_size - 1 <= INT32_MAX;
    double hi = vocab ? (double)(r->vocab_size - 1) : (double)INT32_MAX;
    int32_t *dst = ds->ids + ds->n_ids;
    size_t i = 0;
    for (const cJSON *x = list->child; x; x = x->next, i++) {
        char v[DS_SHOW_MAX];
        double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        if (!(d == floor(d))) /* NaN too: not a number */
            return dfg_errline_fail(c, DFG_ERR_FORMAT, DS_KEY "[%zu] is %s, not an integer token id", i, ds_show(x, v));
        if (!(d >= 0 && d <= hi)) {
            if (vocab)
                return dfg_errline_fail(c, DFG_ERR_FORMAT, DS_KEY "[%zu] is %s, outside the vocabulary (0 .. %lld)", i,
                                        ds_show(x, v), (long long)hi);
            return dfg_errline_fail(c, DFG_ERR_FORMAT, DS_KEY "[%zu] is %s, outside the token ids of int32 (0 .. %d)", i,
                                    ds_show(x, v), INT32_MAX);
        }
        dst[i] = (int32_t)d;
    }
    *n_out = n;
    return DFG_OK;
}

/* The object without prompt_ids as compact JSON text, appended to ds->fields with its NUL. */
static dfg_status ds_take_fields(const dfg_errline *c, dfg_dataset *ds, cJSON *root, cJSON *ids, size_t *len) {
    cJSON_Delete(cJSON_DetachItemViaPointer(root, ids));
    char *text = cJSON_PrintUnformatted(root);
    if (!text) return dfg_errline_fail(c, DFG_ERR_NOMEM, "cannot print the line's other fields");
    size_t n = strlen(text);
    bool ok = ds_reserve((void **)&ds->fields, &ds->cap_fields, ds->n_fields + n + 1, 1);
    if (ok) memcpy(ds->fields + ds->n_fields, text, n + 1);
    free(text);
    if (!ok) return dfg_errline_fail(c, DFG_ERR_NOMEM, "cannot allocate room for %zu more bytes of fields", n + 1);
    *len = n;
    return DFG_OK;
}

/* One line of the file (t: n bytes, without its '\n'): skipped when blank, else one row. */
static dfg_status ds_add_line(ds_reader *r, const char *t, size_t n, int64_t line) {
    r->lines = line;
    if (line == 1 && n >= 3 && !memcmp(t, "\xEF\xBB\xBF", 3)) t += 3, n -= 3; /* a byte order mark */
    if (ds_blank(t, n)) return DFG_OK;
    snprintf(r->label, r->label_len, "%s:%lld", r->path, (long long)line);
    dfg_errline c = {r->label, r->err, r->err_len};
    dfg_dataset *ds = r->ds;
    if (!ds_reserve((void **)&ds->rows, &ds->cap_rows, ds->n_rows + 1, sizeof(ds_row)))
        return dfg_errline_fail(&c, DFG_ERR_NOMEM, "cannot allocate row %zu", ds->n_rows + 1);
    dfg_status s = dfg_errline_scan_json(&c, t, n, DFG_DATASET_MAX_LINE_VALUES, true);
    if (!s) s = ds_scan_text(&c, (const unsigned char *)t, n);
    cJSON *root = NULL, *ids = NULL;
    if (!s) s = ds_parse(&c, t, n, &root);
    if (!s) s = ds_find_ids(&c, root, &ids);
    size_t n_ids = 0, n_fields = 0;
    if (!s) s = ds_take_ids(&c, r, ids, &n_ids);
    if (!s) s = ds_take_fields(&c, ds, root, ids, &n_fields);
    cJSON_Delete(root);
    if (s) return s;
    ds_row *row = &ds->rows[ds->n_rows++];
    *row = (ds_row){.ids_at = ds->n_ids, .n_ids = n_ids, .fields_at = ds->n_fields, .line = line};
    ds->hash = ds_hash_row(ds->hash, ds->ids + ds->n_ids, n_ids, ds->fields + ds->n_fields, n_fields);
    ds->n_ids += n_ids;
    ds->n_fields += n_fields + 1;
    if (n_ids > ds->max_len) ds->max_len = n_ids;
    return DFG_OK;
}

/* ---------------------------------------------------------------- a whole file */

static dfg_status ds_begin(ds_reader *r, const char *path, int64_t vocab_size, char *err, size_t err_len) {
    *r = (ds_reader){.path = path, .vocab_size = vocab_size, .err = err, .err_len = err_len};
    dfg_errline c = {path, err, err_len};
    r->label_len = strlen(path) + 24;
    r->label = malloc(r->label_len);
    r->ds = calloc(1, sizeof(dfg_dataset));
    if (!r->label || !r->ds) {
        free(r->label), free(r->ds);
        r->label = NULL, r->ds = NULL;
        return dfg_errline_fail(&c, DFG_ERR_NOMEM, "out of memory");
    }
    r->ds->hash = DS_FNV_OFFSET;
    return DFG_OK;
}

/* On success hands the dataset to *out; frees what is left either way (r->ds NULL: the reading
 * never began). */
static dfg_status ds_end(ds_reader *r, dfg_status s, dfg_dataset **out) {
    dfg_errline c = {r->path, r->err, r->err_len};
    dfg_dataset *ds = r->ds;
    free(r->label);
    if (!ds) return s;
    if (!s && ds->n_rows == 0) {
        if (r->lines == 0) s = dfg_errline_fail(&c, DFG_ERR_FORMAT, "no rows (the file is empty)");
        else
            s = dfg_errline_fail(&c, DFG_ERR_FORMAT, "no rows (%s %lld line%s blank)", r->lines == 1 ? "its" : "all its",
                                 (long long)r->lines, r->lines == 1 ? " is" : "s are");
    }
    if (!s) { /* give back the arrays' slack (up to half of each); a failed shrink keeps the block */
        int32_t *ids = realloc(ds->ids, ds->n_ids * sizeof(int32_t));
        char *fields = realloc(ds->fields, ds->n_fields);
        ds_row *rows = realloc(ds->rows, ds->n_rows * sizeof(ds_row));
        if (ids) ds->ids = ids, ds->cap_ids = ds->n_ids;
        if (fields) ds->fields = fields, ds->cap_fields = ds->n_fields;
        if (rows) ds->rows = rows, ds->cap_rows = ds->n_rows;
    }
    if (!s && !(ds->perm = malloc(ds->n_rows * sizeof(int32_t))))
        s = dfg_errline_fail(&c, DFG_ERR_NOMEM, "cannot allocate the order of %zu rows", ds->n_rows);
    if (s) {
        dfg_dataset_free(ds);
        return s;
    }
    *out = ds;
    return DFG_OK;
}

static dfg_status ds_check_args(const dfg_errline *c, const char *path, int64_t vocab_size, dfg_dataset **out) {
    if (!out) return dfg_errline_fail(c, DFG_ERR_ARG, "out is NULL");
    *out = NULL;
    if (!path || !*path) return dfg_errline_fail(c, DFG_ERR_ARG, "the path is empty");
    if (vocab_size < 0)
        return dfg_errline_fail(c, DFG_ERR_ARG, "vocab_size is %lld (0: unchecked, else the model's vocabulary)",
                                (long long)vocab_size);
    return DFG_OK;
}

dfg_status dfg_dataset_from_text(const char *text, size_t len, const char *label, int64_t vocab_size,
                                 dfg_dataset **out, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    dfg_errline c = {label && *label ? label : "prompt dataset", err, err_len};
    dfg_status s = ds_check_args(&c, label, vocab_size, out);
    if (!s && !text && len) s = dfg_errline_fail(&c, DFG_ERR_ARG, "text is NULL");
    if (!s && len > DFG_DATASET_MAX_BYTES)
        s = dfg_errline_fail(&c, DFG_ERR_FORMAT, "%zu bytes, more than the %zu-byte limit of a prompt dataset", len,
                             DFG_DATASET_MAX_BYTES);
    if (s) return s;
    ds_reader r;
    s = ds_begin(&r, label, vocab_size, err, err_len);
    int64_t line = 0;
    for (size_t at = 0; !s && at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        s = ds_add_line(&r, text + at, n, ++line);
        at += n + 1;
    }
    return ds_end(&r, s, out);
}

/* The whole file through the one reader (runtime/formats/fileio.h), then parsed as text. */
dfg_status dfg_dataset_open(const char *path, int64_t vocab_size, dfg_dataset **out, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    dfg_errline c = {path && *path ? path : "prompt dataset", err, err_len};
    dfg_status s = ds_check_args(&c, path, vocab_size, out);
    if (s) return s;
    char *text = NULL;
    size_t len = 0;
    s = dfg_file_read(path, NULL, DFG_DATASET_MAX_BYTES, "a prompt dataset", &text, &len, err, err_len);
    if (!s) s = dfg_dataset_from_text(text, len, path, vocab_size, out, err, err_len);
    free(text);
    return s;
}

/* ---------------------------------------------------------------- access */

void dfg_dataset_free(dfg_dataset *ds) {
    if (!ds) return;
    free(ds->rows);
    free(ds->ids);
    free(ds->fields);
    free(ds->perm);
    free(ds);
}

int64_t dfg_dataset_rows(const dfg_dataset *ds) { return ds ? (int64_t)ds->n_rows : 0; }

int64_t dfg_dataset_max_prompt_len(const dfg_dataset *ds) { return ds ? (int64_t)ds->max_len : 0; }

static const ds_row *ds_row_at(const dfg_dataset *ds, int64_t row) {
    return ds && row >= 0 && (uint64_t)row < ds->n_rows ? &ds->rows[row] : NULL;
}

const int32_t *dfg_dataset_prompt(const dfg_dataset *ds, int64_t row, int64_t *len) {
    const ds_row *r = ds_row_at(ds, row);
    if (len) *len = r ? (int64_t)r->n_ids : 0;
    return r ? ds->ids + r->ids_at : NULL;
}

const char *dfg_dataset_fields(const dfg_dataset *ds, int64_t row) {
    const ds_row *r = ds_row_at(ds, row);
    return r ? ds->fields + r->fields_at : NULL;
}

int64_t dfg_dataset_line(const dfg_dataset *ds, int64_t row) {
    const ds_row *r = ds_row_at(ds, row);
    return r ? r->line : -1;
}

uint64_t dfg_dataset_hash(const dfg_dataset *ds) { return ds ? ds->hash : 0; }

/* ---------------------------------------------------------------- the order of an epoch */

/* Uniform in 0 .. bound-1 (bound > 0) without modulo bias: draws below 2^64 mod bound, the
 * values that would make the low residues likelier, are drawn again. */
static uint64_t ds_below(uint64_t *state, uint64_t bound) {
    uint64_t reject_below = (0 - bound) % bound;
    for (;;) {
        uint64_t x = dfg_host_rand(state);
        if (x >= reject_below) return x % bound;
    }
}

/* Fisher-Yates over 0 .. rows-1 from the state seed ^ dfg_host_rand(&epoch). */
static void ds_shuffle(dfg_dataset *ds, uint64_t seed, int64_t epoch) {
    uint64_t e = (uint64_t)epoch, state = seed ^ dfg_host_rand(&e);
    int32_t *p = ds->perm;
    for (size_t i = 0; i < ds->n_rows; i++) p[i] = (int32_t)i;
    for (size_t i = ds->n_rows - 1; i > 0; i--) {
        size_t j = (size_t)ds_below(&state, (uint64_t)i + 1);
        int32_t t = p[i];
        p[i] = p[j], p[j] = t;
    }
    ds->perm_valid = true, ds->perm_seed = seed, ds->perm_epoch = epoch;
}

int64_t dfg_dataset_order(dfg_dataset *ds, uint64_t seed, int64_t epoch, int64_t k, bool shuffle) {
    if (!ds || epoch < 0 || k < 0 || (uint64_t)k >= ds->n_rows) return -1;
    if (!shuffle) return k;
    if (!ds->perm_valid || ds->perm_seed != seed || ds->perm_epoch != epoch) ds_shuffle(ds, seed, epoch);
    return ds->perm[k];
}
