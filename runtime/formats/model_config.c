/* model_config.c - a Hugging Face model directory's config.json as pipeline settings
 * (dfg_model_dir_settings, dfg_runtime.h).
 *
 * config.json is hostile input like a weights index (runtime/formats/weights_dir.c): its size is bounded
 * before it is read, its JSON values are counted before cJSON builds a tree, nothing may follow
 * the top-level object, and a key dfg reads may appear only once (Python's json keeps the last
 * of two, cJSON finds the first: the two would build different models). Only the keys of the
 * tables below are read. Each is type-checked, and a config whose model dfg would compute
 * differently from transformers (another activation, scaled RoPE, a sliding window, an untied
 * GPT-2 head, ...) is refused in one line naming the key and its value, instead of silently
 * becoming another model. Every check runs before the first setting is made, so a refused
 * config leaves the program as it was. Messages are one line "<file>: <what>". */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dfg_formats.h"
#include "dfg_nn.h"
#include "errline.h"
#include "fileio.h"
#include "model_config.h"

#define MC_MAX_JSON_VALUES (1 << 18) /* real configs hold ~30-200; bounds cJSON's tree (~64 B a value) */
#define MC_QUOTE_MAX 80
#define MC_SHOW_MAX (MC_QUOTE_MAX + 8)
#define MC_MAX_STAGED (MC_MAX_TABLE + 1)
#define MC_VALUE_MAX 96

typedef dfg_errline mc_ctx;

#define mc_fail dfg_errline_fail

/* ---------------------------------------------------------------- values as messages show them */

/* Text from the file as it can appear in a one-line message: control bytes become '?', long
 * text is cut (at a UTF-8 boundary) and marked with "...". */
static const char *mc_quote(const char *s, char buf[MC_QUOTE_MAX + 4]) { return dfg_errline_quote(s, buf, MC_QUOTE_MAX); }

/* "%.9g", or more digits when that does not read back as exactly x: the setting holds the
 * file's double, as short as it reads ("1e-06", "0.1"), and without the exponent that fewer
 * digits would give integral values ("1000000", not "1e+06"). */
static void mc_format_double(double x, char *buf, size_t len) {
    for (int prec = 9; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* A JSON value for "got ..." in a message: numbers and literals as JSON writes them, strings in
 * double quotes, containers by kind (their text could be megabytes). */
static const char *mc_show(const cJSON *v, char buf[MC_SHOW_MAX]) {
    char q[MC_QUOTE_MAX + 4];
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0.0;
    if (cJSON_IsNumber(v) && d == floor(d) && fabs(d) < 1e15) snprintf(buf, MC_SHOW_MAX, "%.0f", d); /* 3000000000 */
    else if (cJSON_IsNumber(v)) mc_format_double(d, buf, MC_SHOW_MAX);
    else if (cJSON_IsString(v)) snprintf(buf, MC_SHOW_MAX, "\"%s\"", mc_quote(v->valuestring, q));
    else if (cJSON_IsTrue(v)) snprintf(buf, MC_SHOW_MAX, "true");
    else if (cJSON_IsFalse(v)) snprintf(buf, MC_SHOW_MAX, "false");
    else if (cJSON_IsNull(v)) snprintf(buf, MC_SHOW_MAX, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, MC_SHOW_MAX, "a list");
    else snprintf(buf, MC_SHOW_MAX, "an object");
    return buf;
}

/* ---------------------------------------------------------------- what dfg reads
 * The architectures, the keys each reads and the rules its configs must pass are the
 * architecture table's (ops/nn/arch.def, nn_arch.c). */
#define MC_MAX_TABLE 64 /* keys or rules of one architecture */

/* The settings a config makes, checked and formatted, before any is set on the program. */
typedef struct {
    const char *key;
    char value[MC_VALUE_MAX];
} mc_setting;

typedef struct {
    mc_setting s[MC_MAX_STAGED];
    int n;
} mc_staged;

/* ---------------------------------------------------------------- parsing */

/* No NUL byte (no valid JSON holds one), no NUL character written as \u0000 (cJSON's strings
 * end there: "n_layer\u0000" would read as the key n_layer, which Python's json does not), and
 * a bounded number of JSON values: every value but the first follows a ',', '[' or '{' outside
 * a string. */
static dfg_status mc_scan_json(const mc_ctx *c, const char *t, size_t n) {
    return dfg_errline_scan_json(c, t, n, MC_MAX_JSON_VALUES, true);
}

/* The JSON tree of the whole text: one object and nothing after it but white space (cJSON stops
 * at the end of the first value and would accept "{...} garbage"). */
static dfg_status mc_parse_json(const mc_ctx *c, const char *t, size_t n, cJSON **root) {
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(t, n, &end, 0);
    if (!*root) {
        size_t at = end && end >= t ? (size_t)(end - t) : 0;
        return mc_fail(c, DFG_ERR_FORMAT, "not valid JSON (error near byte %zu of %zu)", at, n);
    }
    size_t at = end && end >= t && end <= t + n ? (size_t)(end - t) : n;
    while (at < n && (t[at] == ' ' || t[at] == '\t' || t[at] == '\n' || t[at] == '\r')) at++;
    if (at < n)
        return mc_fail(c, DFG_ERR_FORMAT, "not valid JSON (text after the end of the value, at byte %zu of %zu)", at, n);
    if (!cJSON_IsObject(*root))
        return mc_fail(c, DFG_ERR_FORMAT, "not a JSON object (a model's config.json is one object of settings)");
    return DFG_OK;
}

/* The top-level value of `key` (NULL when absent); a key given twice is refused, since JSON
 * readers disagree on which of the two counts. */
static dfg_status mc_get(const mc_ctx *c, const cJSON *root, const char *key, const cJSON **out) {
    int n = 0;
    *out = NULL;
    for (const cJSON *x = root->child; x; x = x->next)
        if (x->string && !strcmp(x->string, key) && n++ == 0) *out = x;
    if (n > 1) return mc_fail(c, DFG_ERR_FORMAT, "'%s' appears %d times (which one counts is ambiguous)", key, n);
    return DFG_OK;
}

static dfg_status mc_unsupported(const mc_ctx *c, const char *name) {
    char q[MC_QUOTE_MAX + 4];
    return mc_fail(c, DFG_ERR_UNSUPPORTED, "architecture '%s' is not supported (dfg runs %s)", mc_quote(name, q),
                   dfg_arch_class_list());
}

/* The model class: architectures[0] (what transformers saved), else model_type. When both name
 * a class dfg knows, they must agree: AutoModelForCausalLM picks the class by model_type, other
 * readers by architectures. */
static dfg_status mc_arch_of(const mc_ctx *c, const cJSON *root, const dfg_arch_info **out) {
    const cJSON *archs, *type;
    char v[MC_SHOW_MAX];
    dfg_status s = mc_get(c, root, "architectures", &archs);
    if (!s) s = mc_get(c, root, "model_type", &type);
    if (s) return s;
    if (type && !cJSON_IsNull(type) && !cJSON_IsString(type))
        return mc_fail(c, DFG_ERR_FORMAT, "'model_type' must be a string, got %s", mc_show(type, v));
    const dfg_arch_info *by_type = type && cJSON_IsString(type) ? dfg_arch_find(type->valuestring, false) : NULL;
    if (archs && !cJSON_IsNull(archs)) {
        const cJSON *first = cJSON_IsArray(archs) ? archs->child : NULL;
        if (!first || !cJSON_IsString(first))
            return mc_fail(c, DFG_ERR_FORMAT, "'architectures' must be a list of model class names, got %s",
                           first ? "a list whose first item is not a string" : mc_show(archs, v));
        if (!(*out = dfg_arch_find(first->valuestring, true))) return mc_unsupported(c, first->valuestring);
        if (by_type && by_type != *out)
            return mc_fail(c, DFG_ERR_FORMAT, "'architectures' names %s but 'model_type' is \"%s\" (which model is it?)",
                           (*out)->hf_class, by_type->model_type);
        return DFG_OK;
    }
    if (!type || cJSON_IsNull(type))
        return mc_fail(c, DFG_ERR_FORMAT, "neither 'architectures' nor 'model_type' says which model this is "
                       "(dfg runs %s)", dfg_arch_class_list());
    if (!(*out = by_type)) return mc_unsupported(c, type->valuestring);
    return DFG_OK;
}

/* One refusal rule against the file's value (absent: the default, which dfg computes). */
static dfg_status mc_check_rule(const mc_ctx *c, const cJSON *root, const dfg_arch_rule *r) {
    const cJSON *x;
    char v[MC_SHOW_MAX];
    dfg_status s = mc_get(c, root, r->key, &x);
    if (s || !x) return s;
    switch (r->kind) {
    case DFG_ARCH_RULE_STRING: {
        if (!cJSON_IsString(x)) return mc_fail(c, DFG_ERR_FORMAT, "'%s' must be a string, got %s", r->key, mc_show(x, v));
        size_t n = strlen(x->valuestring);
        for (const char *a = r->allowed; *a;) { /* walk the '|'-separated names */
            size_t k = strcspn(a, "|");
            if (k == n && !strncmp(a, x->valuestring, n)) return DFG_OK;
            a += k + (a[k] == '|');
        }
        break;
    }
    case DFG_ARCH_RULE_BOOL:
        if (!cJSON_IsBool(x)) return mc_fail(c, DFG_ERR_FORMAT, "'%s' must be true or false, got %s", r->key, mc_show(x, v));
        if (cJSON_IsTrue(x) != r->refused) return DFG_OK;
        break;
    case DFG_ARCH_RULE_ZERO:
        if (!cJSON_IsNumber(x)) return mc_fail(c, DFG_ERR_FORMAT, "'%s' must be a number, got %s", r->key, mc_show(x, v));
        if (x->valuedouble == 0.0) return DFG_OK;
        break;
    case DFG_ARCH_RULE_NULL: {
        if (cJSON_IsNull(x)) return DFG_OK;
        /* name the scaling: {"rope_type": "llama3", ...}, or "type" in older files */
        const cJSON *t = cJSON_IsObject(x) ? cJSON_GetObjectItemCaseSensitive(x, "rope_type") : NULL;
        if (!t && cJSON_IsObject(x)) t = cJSON_GetObjectItemCaseSensitive(x, "type");
        char tv[MC_SHOW_MAX];
        if (t) snprintf(v, sizeof(v), "set (type %s)", mc_show(t, tv));
        else snprintf(v, sizeof(v), "set (%s)", cJSON_IsObject(x) ? "an object without 'rope_type'" : mc_show(x, tv));
        return mc_fail(c, DFG_ERR_UNSUPPORTED, "'%s' is %s: not supported (%s)", r->key, v, r->why);
    }
    }
    return mc_fail(c, DFG_ERR_UNSUPPORTED, "'%s' is %s: not supported (%s)", r->key, mc_show(x, v), r->why);
}

/* The value of a copied key as setting text, type-checked: integers positive and within int32
 * (every one is a size or a count), floats finite and positive (epsilons, rope_theta). */
static dfg_status mc_format_key(const mc_ctx *c, const dfg_arch_key *k, const cJSON *x, char out[MC_VALUE_MAX]) {
    char v[MC_SHOW_MAX];
    switch (k->kind) {
    case DFG_ARCH_KEY_INT: {
        double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        if (!(d > 0 && d <= INT32_MAX && d == floor(d)))
            return mc_fail(c, DFG_ERR_FORMAT, "'%s' must be a positive integer, got %s", k->key, mc_show(x, v));
        snprintf(out, MC_VALUE_MAX, "%lld", (long long)d);
        return DFG_OK;
    }
    case DFG_ARCH_KEY_FLOAT: {
        double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        if (!(d > 0 && isfinite(d)))
            return mc_fail(c, DFG_ERR_FORMAT, "'%s' must be a positive number, got %s", k->key, mc_show(x, v));
        mc_format_double(d, out, MC_VALUE_MAX);
        return DFG_OK;
    }
    case DFG_ARCH_KEY_BOOL:
        if (!cJSON_IsBool(x)) return mc_fail(c, DFG_ERR_FORMAT, "'%s' must be true or false, got %s", k->key, mc_show(x, v));
        snprintf(out, MC_VALUE_MAX, "%s", cJSON_IsTrue(x) ? "true" : "false");
        return DFG_OK;    case DFG_ARCH_KEY_IDS:
    case DFG_ARCH_KEY_ID: {
        int n = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : 1, len = 0;
        bool ok = n >= 1 && n <= 8;
        for (int i = 0; ok && i < (k->kind == DFG_ARCH_KEY_ID ? 1 : n); i++) {
            const cJSON *e = cJSON_IsArray(x) ? cJSON_GetArrayItem(x, i) : x;
            double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            ok = d >= 0 && d <= INT32_MAX && d == floor(d);
            if (ok) len += snprintf(out + len, MC_VALUE_MAX - (size_t)len, "%s%lld", i ? "," : "", (long long)d);
        }
        if (!ok)
            return mc_fail(c, DFG_ERR_FORMAT, "'%s' must be a token id or a list of 1 .. 8 of them, got %s", k->key, mc_show(x, v));
        return DFG_OK;
    }
    }
    return DFG_ERR_ARG;
}

/* A number the file gives within the settings table's range for its key (graph/settings.def):
 * the table would refuse it when set, after other keys were set; refused here first, naming the
 * range. Lists of ids are checked item by item. */
static dfg_status mc_check_range(const mc_ctx *c, const char *key, const char *value) {
    const dfg_setting_spec *spec = dfg_setting_spec_find(key);
    bool number = spec && (spec->type == DFG_SETTING_INT || spec->type == DFG_SETTING_FLOAT ||
                           spec->type == DFG_SETTING_INTS || spec->type == DFG_SETTING_FLOATS);
    for (const char *v = value; number && *v;) {
        char *end = NULL;
        double d = strtod(v, &end); /* the text mc_format_key just wrote, not the file's */
        if (d < spec->min || d > spec->max) {
            char accepted[160];
            dfg_setting_accepted(spec, accepted, sizeof(accepted));
            return mc_fail(c, DFG_ERR_FORMAT, "'%s' is %s, outside what dfg accepts (%s)", key, value, accepted);
        }
        v = *end == ',' ? end + 1 : end + strlen(end);
    }
    return DFG_OK;
}

/* A setting's value as the pipeline will see it: the user's (already on p) or the staged one. */
static const char *mc_effective(const dfg_program *p, const mc_staged *st, const char *key) {
    const char *v = dfg_program_has(p, key) ? dfg_program_str(p, key) : NULL; /* canonical text, copied */
    for (int i = 0; !v && i < st->n; i++)
        if (!strcmp(st->s[i].key, key)) v = st->s[i].value;
    return v;
}

static void mc_stage(mc_staged *st, const char *key, const char *value) {
    if (st->n == MC_MAX_STAGED) return; /* cannot happen: at most 1 + MC_MAX_TABLE entries */
    st->s[st->n].key = key;
    snprintf(st->s[st->n].value, MC_VALUE_MAX, "%s", value);
    st->n++;
}

/* Stages every key of the tables for the architecture that the user did not set. */
static dfg_status mc_stage_keys(const mc_ctx *c, const dfg_program *p, const cJSON *root, const dfg_arch_info *a,
                                mc_staged *st) {
    if (!dfg_program_has(p, "model_type")) mc_stage(st, "model_type", a->model_type);
    const dfg_arch_key *keys[MC_MAX_TABLE];
    int n = dfg_arch_config_keys(a->arch, keys, MC_MAX_TABLE);
    for (int i = 0; i < n; i++) {
        const dfg_arch_key *k = keys[i];
        if (k->from || dfg_program_has(p, k->key)) continue; /* export-only, or the user's */
        const cJSON *x;
        dfg_status s = mc_get(c, root, k->key, &x);
        if (s) return s;
        if (x && !(k->null_skips && cJSON_IsNull(x))) {
            char value[MC_VALUE_MAX];
            if ((s = mc_format_key(c, k, x, value)) || (s = mc_check_range(c, k->key, value))) return s;
            mc_stage(st, k->key, value);
        } else if (k->absent) {
            mc_stage(st, k->key, k->absent);
        } else if (k->absent_as) {
            /* a user value too long to be a count is left to the pipeline's check of absent_as */
            const char *v = mc_effective(p, st, k->absent_as);
            if (v && strlen(v) < MC_VALUE_MAX) mc_stage(st, k->key, v);
        }
    }
    return DFG_OK;
}

/* Every check, then every setting: nothing is set unless the whole config is accepted. */
static dfg_status mc_settings_from_tree(const mc_ctx *c, dfg_program *p, const cJSON *root) {
    const dfg_arch_info *a = NULL;
    const dfg_arch_rule *rules[MC_MAX_TABLE];
    dfg_status s = mc_arch_of(c, root, &a);
    int n = s ? 0 : dfg_arch_config_rules(a->arch, rules, MC_MAX_TABLE);
    for (int i = 0; !s && i < n; i++) s = mc_check_rule(c, root, rules[i]);
    mc_staged st = {.n = 0};
    if (!s) s = mc_stage_keys(c, p, root, a, &st);
    for (int i = 0; !s && i < st.n; i++)
        if (dfg_program_set(p, st.s[i].key, st.s[i].value))
            s = mc_fail(c, dfg_program_status(p), "cannot set '%s': %s", st.s[i].key, dfg_program_error(p));
    return s;
}

dfg_status dfg_mc_settings_from_text(dfg_program *p, const char *text, size_t len, const char *label, char *err,
                                     size_t err_len) {
    mc_ctx c = {label ? label : DFG_MC_FILE, err, err_len};
    if (err && err_len) err[0] = '\0';
    if (!p) return mc_fail(&c, DFG_ERR_ARG, "the program is NULL");
    if (!text && len) return mc_fail(&c, DFG_ERR_ARG, "text is NULL");
    if (dfg_program_status(p)) return mc_fail(&c, DFG_ERR_STATE, "the program already failed: %s", dfg_program_error(p));
    if (len > DFG_MC_MAX_BYTES)
        return mc_fail(&c, DFG_ERR_FORMAT, "%zu bytes, more than the %u-byte limit of a config.json", len, DFG_MC_MAX_BYTES);
    cJSON *root = NULL;
    dfg_status s = mc_scan_json(&c, text ? text : "", len);
    if (!s) s = mc_parse_json(&c, text ? text : "", len, &root);
    if (!s) s = mc_settings_from_tree(&c, p, root);
    cJSON_Delete(root);
    return s;
}

/* ---------------------------------------------------------------- the directory */

/* Reads the whole file, refusing one larger than any real config before allocating. */
static dfg_status mc_read_file(const mc_ctx *c, const char *path, char **text, size_t *len) {
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return mc_fail(c, DFG_ERR_IO, "missing (a Hugging Face model directory holds its config.json)");
    return dfg_file_read(path, c->label, DFG_MC_MAX_BYTES, "a config.json", text, len, c->err, c->err_len);
}

dfg_status dfg_model_dir_settings(dfg_program *p, const char *dir, char *err, size_t err_len) {
    mc_ctx c = {dir, err, err_len};
    if (err && err_len) err[0] = '\0';
    if (!dir || !*dir) {
        c.label = "model directory";
        return mc_fail(&c, DFG_ERR_ARG, "the path is empty");
    }
    if (!p) return mc_fail(&c, DFG_ERR_ARG, "the program is NULL");
    struct stat sb;
    if (stat(dir, &sb) != 0) return mc_fail(&c, DFG_ERR_IO, "cannot open the model directory: %s", strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return mc_fail(&c, DFG_ERR_IO, "not a directory (a model directory holds config.json and the weights)");
    size_t d = strlen(dir);
    char *path = malloc(d + sizeof("/" DFG_MC_FILE));
    if (!path) return mc_fail(&c, DFG_ERR_NOMEM, "out of memory");
    /* dir + "/config.json", without doubling a trailing slash */
    snprintf(path, d + sizeof("/" DFG_MC_FILE), "%s%s" DFG_MC_FILE, dir, dir[d - 1] == '/' ? "" : "/");
    c.label = path;
    char *text = NULL;
    size_t len = 0;
    dfg_status s = mc_read_file(&c, path, &text, &len);
    if (!s) s = dfg_mc_settings_from_text(p, text, len, path, err, err_len);
    free(text);
    free(path);
    return s;
}
