/* weights_dir.c - a weights path as a set of safetensors files (see weights_dir.h).
 *
 * The index is hostile input like a safetensors header: its size is bounded before it is read,
 * its JSON values are counted before cJSON builds a tree, and every shard name must be a plain
 * file name in the directory (no '/', no "..") so that an index cannot make dfg read a file
 * elsewhere. Shards are checked against weight_map both ways. transformers loads whatever each
 * shard holds, so a tensor that sits in a shard the map does not name for it, or in two shards,
 * would take the value of whichever shard came last; dfg refuses that ambiguity instead of
 * guessing. Every message is one line "<file>: <what>". */
#include <errno.h>
#include <fcntl.h>
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
#include "weights_dir.h"

#define WD_MAX_INDEX_BYTES (32u << 20) /* real indexes are ~100 KB (9 MB for a 90k-tensor MoE) */
#define WD_MAX_JSON_VALUES (1 << 21)   /* bounds cJSON's tree (~80 bytes a value) */
#define WD_MAX_SHARDS 65536
#define WD_QUOTE_MAX 120

typedef dfg_errline wd_ctx;

#define wd_fail dfg_errline_fail

/* A name as it can appear in a one-line message: control bytes become '?', long names are cut
 * (at a UTF-8 boundary) and marked with "...". */
static const char *wd_quote(const char *s, char buf[WD_QUOTE_MAX + 4]) { return dfg_errline_quote(s, buf, WD_QUOTE_MAX); }

/* dir + "/" + name, without doubling a trailing slash; NULL when out of memory. */
static char *wd_join(const char *dir, const char *name) {
    size_t d = strlen(dir), n = strlen(name);
    char *p = malloc(d + n + 2);
    if (!p) return NULL;
    memcpy(p, dir, d);
    if (d && dir[d - 1] != '/') p[d++] = '/';
    memcpy(p + d, name, n + 1);
    return p;
}

/* ---------------------------------------------------------------- the index as parsed */
typedef struct {
    const char *name;  /* the file name, pointing into the JSON tree */
    int idx;           /* position in the set's files */
    int n_listed;      /* tensors weight_map lists for it, and the first: for messages */
    const char *first;
    UT_hash_handle hh;
} wd_shard;

typedef struct {
    const char *name; /* the tensor name, pointing into the JSON tree */
    wd_shard *shard;
    UT_hash_handle hh;
} wd_mapped;

typedef struct {
    cJSON *root;
    wd_shard *shards, *shard_by_name; /* array of n_shards, hashed by file name */
    int n_shards;
    wd_mapped *mapped, *by_name; /* array of n_mapped, hashed by tensor name */
    int n_mapped;
} wd_index;

static void wd_index_free(wd_index *ix) {
    HASH_CLEAR(hh, ix->shard_by_name);
    HASH_CLEAR(hh, ix->by_name);
    free(ix->shards);
    free(ix->mapped);
    cJSON_Delete(ix->root);
}

/* ---------------------------------------------------------------- reading and parsing the index */

/* Reads the whole index file, refusing one larger than any real index before allocating. */
static dfg_status wd_read_index(const wd_ctx *c, const char *path, char **text, size_t *len) {
    return dfg_file_read(path, c->label, WD_MAX_INDEX_BYTES, "an index", text, len, c->err, c->err_len);
}

/* No NUL byte (no valid JSON holds one) and a bounded number of JSON values: every value but
 * the first follows a ',', '[' or '{' outside a string. */
static dfg_status wd_scan_json(const wd_ctx *c, const char *t, size_t n) {
    return dfg_errline_scan_json(c, t, n, WD_MAX_JSON_VALUES, false);
}

/* The JSON tree and its weight_map object (metadata, e.g. total_size, is not needed). */
static dfg_status wd_parse_json(const wd_ctx *c, const char *t, size_t n, wd_index *ix, const cJSON **wm) {
    const char *end = NULL;
    ix->root = cJSON_ParseWithLengthOpts(t, n, &end, 0);
    if (!ix->root) {
        size_t at = end && end >= t ? (size_t)(end - t) : 0;
        return wd_fail(c, DFG_ERR_FORMAT, "not valid JSON (error near byte %zu of %zu)", at, n);
    }
    if (!cJSON_IsObject(ix->root)) return wd_fail(c, DFG_ERR_FORMAT, "not a JSON object");
    *wm = cJSON_GetObjectItemCaseSensitive(ix->root, "weight_map");
    if (!*wm) return wd_fail(c, DFG_ERR_FORMAT, "no 'weight_map' (the object mapping tensor names to shard files)");
    if (!cJSON_IsObject(*wm)) return wd_fail(c, DFG_ERR_FORMAT, "'weight_map' is not a JSON object");
    if (!(*wm)->child) return wd_fail(c, DFG_ERR_FORMAT, "'weight_map' lists no tensors");
    return DFG_OK;
}

/* A shard must be a file in the directory itself: no path separator, no parent reference. */
static bool wd_plain_file_name(const char *s) {
    if (!*s || strchr(s, '/') || strstr(s, "..") || strcmp(s, ".") == 0) return false;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20) return false;
    return true;
}

/* The shard named `file`, added at the end of the shard list the first time it is named. */
static dfg_status wd_shard_of(const wd_ctx *c, wd_index *ix, const char *file, const char *tensor, wd_shard **out) {
    wd_shard *sh = NULL;
    HASH_FIND_STR(ix->shard_by_name, file, sh);
    if (!sh) {
        if (ix->n_shards >= WD_MAX_SHARDS)
            return wd_fail(c, DFG_ERR_FORMAT, "'weight_map' names more than %d shard files", WD_MAX_SHARDS);
        bool hash_oom = false;
        sh = &ix->shards[ix->n_shards];
        *sh = (wd_shard){.name = file, .idx = ix->n_shards, .first = tensor};
        HASH_ADD_KEYPTR(hh, ix->shard_by_name, sh->name, strlen(sh->name), sh);
        if (hash_oom) return wd_fail(c, DFG_ERR_NOMEM, "out of memory indexing shard names");
        ix->n_shards++;
    }
    sh->n_listed++;
    *out = sh;
    return DFG_OK;
}

/* Walks weight_map: one entry per tensor, each a string naming a file in the directory. */
static dfg_status wd_map_entries(const wd_ctx *c, const cJSON *wm, wd_index *ix) {
    int n = cJSON_GetArraySize(wm); /* bounded by the value count */
    ix->shards = calloc((size_t)n, sizeof(*ix->shards));
    ix->mapped = calloc((size_t)n, sizeof(*ix->mapped));
    if (!ix->shards || !ix->mapped) return wd_fail(c, DFG_ERR_NOMEM, "out of memory reading 'weight_map'");
    char qt[WD_QUOTE_MAX + 4], qs[WD_QUOTE_MAX + 4];
    bool hash_oom = false;
    for (const cJSON *x = wm->child; x; x = x->next) {
        const char *tensor = x->string ? x->string : "";
        if (!cJSON_IsString(x))
            return wd_fail(c, DFG_ERR_FORMAT, "weight_map value of '%s' is not a string", wd_quote(tensor, qt));
        if (!wd_plain_file_name(x->valuestring))
            return wd_fail(c, DFG_ERR_FORMAT, "weight_map maps '%s' to '%s', which is not a file name in the directory "
                           "(names with '/' or '..' are refused)", wd_quote(tensor, qt), wd_quote(x->valuestring, qs));
        wd_mapped *m = NULL;
        HASH_FIND_STR(ix->by_name, tensor, m);
        if (m) return wd_fail(c, DFG_ERR_FORMAT, "tensor '%s' is listed twice in 'weight_map'", wd_quote(tensor, qt));
        m = &ix->mapped[ix->n_mapped];
        m->name = tensor;
        dfg_status s = wd_shard_of(c, ix, x->valuestring, tensor, &m->shard);
        if (s) return s;
        HASH_ADD_KEYPTR(hh, ix->by_name, m->name, strlen(m->name), m);
        if (hash_oom) return wd_fail(c, DFG_ERR_NOMEM, "out of memory indexing 'weight_map'");
        ix->n_mapped++;
    }
    return DFG_OK;
}

/* The index's text into ix: bounded like the file, checked before cJSON builds a tree. */
static dfg_status wd_parse_text(const wd_ctx *c, const char *text, size_t len, wd_index *ix) {
    if (len > WD_MAX_INDEX_BYTES)
        return wd_fail(c, DFG_ERR_FORMAT, "%zu bytes, more than the %u-byte limit of an index", len, WD_MAX_INDEX_BYTES);
    const cJSON *wm = NULL;
    dfg_status s = wd_scan_json(c, text, len);
    if (!s) s = wd_parse_json(c, text, len, ix, &wm);
    if (!s) s = wd_map_entries(c, wm, ix);
    return s;
}

static dfg_status wd_parse_index(const wd_ctx *c, const char *path, wd_index *ix) {
    char *text = NULL;
    size_t len = 0;
    dfg_status s = wd_read_index(c, path, &text, &len);
    if (!s) s = wd_parse_text(c, text, len, ix);
    free(text);
    return s;
}

dfg_status dfg_wd_parse_index(const char *text, size_t len, int *n_tensors, int *n_shards, char *err, size_t err_len) {
    wd_ctx c = {DFG_WD_INDEX " buffer", err, err_len};
    if (!text && len) return wd_fail(&c, DFG_ERR_ARG, "text is NULL");
    wd_index ix = {0};
    dfg_status s = wd_parse_text(&c, text ? text : "", len, &ix);
    if (n_tensors) *n_tensors = s ? 0 : ix.n_mapped;
    if (n_shards) *n_shards = s ? 0 : ix.n_shards;
    wd_index_free(&ix);
    return s;
}

/* ---------------------------------------------------------------- the shards */

/* Opens every shard. A missing one is named against the index (it is the index that is wrong
 * or incomplete); a damaged one by the reader, against the shard. */
static dfg_status wd_open_shards(const wd_ctx *c, const char *dir, const wd_index *ix, dfg_wd_set *set) {
    char qs[WD_QUOTE_MAX + 4], qt[WD_QUOTE_MAX + 4];
    set->files = calloc((size_t)ix->n_shards, sizeof(*set->files));
    if (!set->files) return wd_fail(c, DFG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < ix->n_shards; i++) {
        const wd_shard *sh = &ix->shards[i];
        dfg_wd_file *f = &set->files[set->n++];
        if (!(f->path = wd_join(dir, sh->name))) return wd_fail(c, DFG_ERR_NOMEM, "out of memory");
        struct stat sb;
        if (stat(f->path, &sb) != 0 && errno == ENOENT)
            return wd_fail(c, DFG_ERR_IO, "shard '%s' (listed for %d tensor%s, e.g. '%s') is missing", wd_quote(sh->name, qs),
                           sh->n_listed, sh->n_listed > 1 ? "s" : "", wd_quote(sh->first, qt));
        dfg_status s = dfg_st_open(f->path, &f->st, c->err, c->err_len);
        if (s) return s;
    }
    return DFG_OK;
}

/* Every tensor of every shard is mapped to that shard (which also rules out a tensor in two
 * shards), and every mapped tensor is in its shard. */
static dfg_status wd_cross_check(const wd_ctx *c, const wd_index *ix, const dfg_wd_set *set) {
    char qt[WD_QUOTE_MAX + 4], qa[WD_QUOTE_MAX + 4], qb[WD_QUOTE_MAX + 4];
    for (int i = 0; i < set->n; i++) {
        const wd_shard *here = &ix->shards[i];
        for (int k = 0; k < dfg_st_count(set->files[i].st); k++) {
            const char *name = dfg_st_get(set->files[i].st, k)->name;
            wd_mapped *m = NULL;
            HASH_FIND_STR(ix->by_name, name, m);
            if (!m)
                return wd_fail(c, DFG_ERR_FORMAT, "shard '%s' holds tensor '%s', which 'weight_map' does not list",
                               wd_quote(here->name, qa), wd_quote(name, qt));
            if (m->shard == here) continue;
            if (dfg_st_find(set->files[m->shard->idx].st, name))
                return wd_fail(c, DFG_ERR_FORMAT, "tensor '%s' is in two shards, '%s' and '%s'", wd_quote(name, qt),
                               wd_quote(m->shard->name, qa), wd_quote(here->name, qb));
            return wd_fail(c, DFG_ERR_FORMAT, "tensor '%s' is in shard '%s' but 'weight_map' maps it to '%s' (ambiguous)",
                           wd_quote(name, qt), wd_quote(here->name, qa), wd_quote(m->shard->name, qb));
        }
    }
    for (int i = 0; i < ix->n_mapped; i++) {
        const wd_mapped *m = &ix->mapped[i];
        if (!dfg_st_find(set->files[m->shard->idx].st, m->name))
            return wd_fail(c, DFG_ERR_FORMAT, "'weight_map' maps tensor '%s' to shard '%s', which does not hold it",
                           wd_quote(m->name, qt), wd_quote(m->shard->name, qa));
    }
    return DFG_OK;
}

static dfg_status wd_open_indexed(const char *dir, const char *index_path, dfg_wd_set *set, char *err, size_t err_len) {
    wd_ctx c = {index_path, err, err_len};
    wd_index ix = {0};
    dfg_status s = wd_parse_index(&c, index_path, &ix);
    if (!s) s = wd_open_shards(&c, dir, &ix, set);
    if (!s) s = wd_cross_check(&c, &ix, set);
    set->sharded = true;
    wd_index_free(&ix);
    return s;
}

/* ---------------------------------------------------------------- the entry point */

static dfg_status wd_open_single(const char *path, dfg_wd_set *set, char *err, size_t err_len) {
    set->files = calloc(1, sizeof(*set->files));
    if (!set->files || !(set->files[0].path = strdup(path))) {
        snprintf(err, err_len, "%s: out of memory", path);
        return DFG_ERR_NOMEM;
    }
    set->n = 1;
    return dfg_st_open(path, &set->files[0].st, err, err_len);
}

static bool wd_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

dfg_status dfg_wd_open(const char *path, dfg_wd_set *out, char *err, size_t err_len) {
    if (!out) return DFG_ERR_ARG;
    *out = (dfg_wd_set){0};
    if (!path) {
        snprintf(err, err_len, "(null): path is NULL");
        return DFG_ERR_ARG;
    }
    struct stat sb;
    char *single = wd_join(path, DFG_WD_SINGLE), *index = wd_join(path, DFG_WD_INDEX);
    dfg_status s;
    /* not a directory (or nothing there): the reader says what is wrong with the file */
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) s = wd_open_single(path, out, err, err_len);
    else if (!single || !index) {
        snprintf(err, err_len, "%s: out of memory", path);
        s = DFG_ERR_NOMEM;
    } else if (wd_is_file(single)) s = wd_open_single(single, out, err, err_len); /* transformers' order */
    else if (wd_is_file(index)) s = wd_open_indexed(path, index, out, err, err_len);
    else {
        snprintf(err, err_len, "%s: a directory without " DFG_WD_SINGLE " or " DFG_WD_INDEX " (not a model directory)", path);
        s = DFG_ERR_IO;
    }
    free(single);
    free(index);
    if (s) dfg_wd_close(out);
    return s;
}

void dfg_wd_close(dfg_wd_set *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->files[i].path);
        dfg_st_free(w->files[i].st);
    }
    free(w->files);
    *w = (dfg_wd_set){0};
}
