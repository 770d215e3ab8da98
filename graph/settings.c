/* settings.c - a program's settings: key/value pairs saved in the plan; a table key's value
 * checked and recorded as canonical text when it is set (settings_table.c parses it); the typed
 * reads of pipelines (which record a default as the value and mark the key used, so that `dfg
 * compile` can reject a --set key no pipeline code asked for) and of built programs (runtime,
 * exporters, tools: the parsed value, or the table's default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "settings.h"

static int setting_index(const dfg_program *p, const char *key) {
    for (int i = 0; i < p->n_settings; i++)
        if (!strcmp(p->settings[i].key, key)) return i;
    return -1;
}

/* Makes room for one more setting; new slots are zeroed. */
static bool settings_reserve(dfg_program *p) {
    if (p->n_settings < p->cap_settings) return true;
    int nc = p->cap_settings ? p->cap_settings * 2 : 16;
    dfg_setting *ns = realloc(p->settings, (size_t)nc * sizeof(*ns));
    if (!ns) return false;
    memset(ns + p->cap_settings, 0, (size_t)(nc - p->cap_settings) * sizeof(*ns));
    p->settings = ns;
    p->cap_settings = nc;
    return true;
}

/* Records a parsed value: the canonical text, the typed fields, a list's items. */
static bool store(dfg_program *p, dfg_setting *s, const dfg_setting_parsed *v, const char *canon) {
    char *text = dfg_program_strdup(p, canon);
    char **items = NULL;
    double *nums = NULL;
    if (!text) return false;
    if (v->n) {
        items = dfg_arena_alloc(&p->arena, (size_t)v->n * sizeof(*items));
        nums = dfg_arena_alloc(&p->arena, (size_t)v->n * sizeof(*nums));
        if (!items || !nums) return false;
        const char *at = canon;
        for (int k = 0; k < v->n; k++) { /* canonical items hold no ',' */
            size_t n = strcspn(at, ",");
            char one[256];
            snprintf(one, sizeof(one), "%.*s", (int)n, at);
            if (!(items[k] = dfg_program_strdup(p, one))) return false;
            nums[k] = v->nums[k];
            at += n + (at[n] == ',');
        }
    }
    s->value = text, s->i = v->i, s->f = v->f, s->n_items = v->n, s->items = items, s->nums = nums;
    return true;
}

dfg_status dfg_program_set(dfg_program *p, const char *key, const char *value) {
    if (!p) return DFG_ERR_ARG;
    if (p->status) return p->status;
    if (!key || !*key || !value) return dfg_program_err(p, DFG_ERR_ARG, "setting: a key and a value are required");
    const dfg_setting_spec *spec = dfg_setting_spec_find(key);
    dfg_setting_parsed v = {0};
    size_t canon_len = dfg_setting_canon_size(value);
    char *canon = malloc(canon_len), err[1024];
    if (!canon) return dfg_program_err(p, DFG_ERR_NOMEM, "setting '%s': out of memory", key);
    if (!spec) snprintf(canon, canon_len, "%s", value); /* the pipeline's own key: typed by its read */
    else if (!dfg_setting_parse(key, spec, spec->type, value, &v, canon, canon_len, err, sizeof(err))) {
        free(canon);
        return dfg_program_err(p, DFG_ERR_ARG, "%s", err);
    }
    int i = setting_index(p, key);
    if (i < 0) {
        char *k = dfg_program_strdup(p, key);
        if (!k || !settings_reserve(p)) {
            free(canon);
            return dfg_program_err(p, DFG_ERR_NOMEM, "setting '%s': out of memory", key);
        }
        i = p->n_settings++;
        p->settings[i] = (dfg_setting){.key = k, .spec = spec};
    }
    bool ok = store(p, &p->settings[i], &v, canon);
    free(canon);
    return ok ? DFG_OK : dfg_program_err(p, DFG_ERR_NOMEM, "setting '%s': out of memory", key);
}

const char *dfg_program_setting(const dfg_program *p, const char *key) {
    if (!p || !key) return NULL;
    int i = setting_index(p, key);
    return i >= 0 ? p->settings[i].value : NULL;
}

bool dfg_program_has(const dfg_program *p, const char *key) { return p && key && setting_index(p, key) >= 0; }

int dfg_program_setting_count(const dfg_program *p) { return p ? p->n_settings : 0; }

const char *dfg_program_setting_key(const dfg_program *p, int i) {
    return p && i >= 0 && i < p->n_settings ? p->settings[i].key : NULL;
}

bool dfg_program_setting_used(const dfg_program *p, const char *key) {
    if (!p || !key) return false;
    int i = setting_index(p, key);
    return i >= 0 && p->settings[i].used;
}

dfg_status dfg_program_fail(dfg_program *p, dfg_status s, const char *fmt, ...) {
    if (!p) return DFG_ERR_ARG;
    if (s == DFG_OK || (unsigned)s >= DFG_STATUS_COUNT) s = DFG_ERR_ARG;
    if (p->status) return p->status;
    char msg[sizeof(p->error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt ? fmt : "(no message)", ap);
    va_end(ap);
    return dfg_program_err(p, s, "%s", msg);
}

void dfg_program_note(dfg_program *p, const char *fmt, ...) {
    if (!p || !fmt) return;
    size_t used = strlen(p->notes), room = sizeof(p->notes) - used;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    for (char *c = line; *c; c++)
        if (*c == '\n') *c = ' '; /* one line each */
    if (strlen(line) + 2 <= room) snprintf(p->notes + used, room, "%s\n", line);
}

const char *dfg_program_notes(const dfg_program *p) { return p ? p->notes : ""; }

/* ---------------------------------------------------------------- a pipeline's typed reads */

/* The setting behind a typed read: the set one, or def_text recorded as its value (checked as
 * any value is). Marks the key used. NULL when the program is in an error state. */
static dfg_setting *lookup(dfg_program *p, const char *key, const char *def_text) {
    if (!p || p->status) return NULL;
    if (!key || !*key) {
        dfg_program_err(p, DFG_ERR_ARG, "setting: a key is required");
        return NULL;
    }
    int i = setting_index(p, key);
    if (i < 0) {
        if (dfg_program_set(p, key, def_text)) return NULL;
        i = p->n_settings - 1;
    }
    p->settings[i].used = true;
    return &p->settings[i];
}

/* A table key read with an accessor of another type is the pipeline's mistake, said as such. */
static bool type_ok(dfg_program *p, const dfg_setting *s, dfg_setting_type want, dfg_setting_type also, const char *accessor) {
    if (!s->spec || s->spec->type == want || s->spec->type == also) return true;
    dfg_program_err(p, DFG_ERR_ARG, "setting '%s' is of type %s in the settings table (graph/settings.def), but the "
                    "pipeline reads it with %s", s->key, dfg_setting_type_name(s->spec->type), accessor);
    return false;
}

/* A key of the pipeline's own, parsed as `type` (the program's error when it does not parse). */
static bool parse_own(dfg_program *p, const dfg_setting *s, dfg_setting_type type, dfg_setting_parsed *v) {
    char canon[64], err[1024];
    if (dfg_setting_parse(s->key, NULL, type, s->value, v, canon, sizeof(canon), err, sizeof(err))) return true;
    dfg_program_err(p, DFG_ERR_ARG, "%s", err);
    return false;
}

/* A number read as int: INT values, and "auto" only where the caller takes it. */
static int64_t read_int(dfg_program *p, const char *key, int64_t def, bool auto_ok, const char *accessor) {
    char text[32];
    if (def == DFG_SETTING_AUTO) snprintf(text, sizeof(text), "auto");
    else snprintf(text, sizeof(text), "%lld", (long long)def);
    dfg_setting *s = lookup(p, key, text);
    if (!s || !type_ok(p, s, DFG_SETTING_INT, DFG_SETTING_INT, accessor)) return def;
    dfg_setting_parsed v;
    if (!s->spec && !parse_own(p, s, DFG_SETTING_INT, &v)) return def;
    int64_t x = s->spec ? s->i : v.i;
    if (x == DFG_SETTING_AUTO && !auto_ok) {
        dfg_program_err(p, DFG_ERR_ARG, "setting '%s': auto is a value here, but the pipeline reads it with %s", key, accessor);
        return def;
    }
    return x;
}

int64_t dfg_setting_int(dfg_program *p, const char *key, int64_t def) { return read_int(p, key, def, false, "dfg_setting_int"); }

int64_t dfg_setting_int_auto(dfg_program *p, const char *key, int64_t def) {
    return read_int(p, key, def, true, "dfg_setting_int_auto");
}

double dfg_setting_float(dfg_program *p, const char *key, double def) {
    char text[40];
    dfg_setting_format_double(def, text, sizeof(text));
    dfg_setting *s = lookup(p, key, text);
    if (!s || !type_ok(p, s, DFG_SETTING_FLOAT, DFG_SETTING_FLOAT, "dfg_setting_float")) return def;
    dfg_setting_parsed v;
    if (!s->spec && !parse_own(p, s, DFG_SETTING_FLOAT, &v)) return def;
    return s->spec ? s->f : v.f;
}

bool dfg_setting_bool(dfg_program *p, const char *key, bool def) {
    dfg_setting *s = lookup(p, key, def ? "true" : "false");
    if (!s || !type_ok(p, s, DFG_SETTING_BOOL, DFG_SETTING_BOOL, "dfg_setting_bool")) return def;
    dfg_setting_parsed v;
    if (!s->spec && !parse_own(p, s, DFG_SETTING_BOOL, &v)) return def;
    return (s->spec ? s->i : v.i) != 0;
}

const char *dfg_setting_str(dfg_program *p, const char *key, const char *def) {
    dfg_setting *s = lookup(p, key, def ? def : "");
    if (!s || !type_ok(p, s, DFG_SETTING_STR, DFG_SETTING_ENUM, "dfg_setting_str")) return def ? def : "";
    return s->value;
}

int dfg_setting_enum(dfg_program *p, const char *key, const char *def) {
    if (!dfg_setting_spec_find(key) && p && !p->status)
        return dfg_program_err(p, DFG_ERR_ARG, "setting '%s': dfg_setting_enum reads keys of the settings table only", key), -1;
    dfg_setting *s = lookup(p, key, def ? def : "");
    return s && type_ok(p, s, DFG_SETTING_ENUM, DFG_SETTING_ENUM, "dfg_setting_enum") ? (int)s->i : -1;
}

int dfg_setting_list(dfg_program *p, const char *key, const char *def) {
    const dfg_setting_spec *spec = dfg_setting_spec_find(key);
    if (p && !p->status && (!spec || spec->type < DFG_SETTING_INTS))
        return dfg_program_err(p, DFG_ERR_ARG, "setting '%s': dfg_setting_list reads the table's lists only", key), -1;
    dfg_setting *s = lookup(p, key, def ? def : "");
    return s ? s->n_items : -1;
}

/* ---------------------------------------------------------------- reads of a built program */

/* The parsed value of key: the set one, else the table's default (zeros where there is none or
 * the key is not a table key). Text of a pipeline's own key is parsed as `type`. */
static dfg_setting_parsed program_value(const dfg_program *p, const char *key, dfg_setting_type type) {
    dfg_setting_parsed v = {0};
    char canon[2048];
    int i = p && key ? setting_index(p, key) : -1;
    const dfg_setting_spec *spec = dfg_setting_spec_find(key);
    if (i >= 0 && p->settings[i].spec) {
        const dfg_setting *s = &p->settings[i];
        v.i = s->i, v.f = s->f, v.n = s->n_items;
        for (int k = 0; k < s->n_items && k < DFG_SETTING_MAX_ITEMS; k++) v.nums[k] = s->nums[k];
        return v;
    }
    const char *text = i >= 0 ? p->settings[i].value : spec ? spec->def : NULL;
    if (text && dfg_setting_parse(key, i >= 0 ? NULL : spec, type, text, &v, canon, sizeof(canon), NULL, 0)) return v;
    return (dfg_setting_parsed){0};
}

bool dfg_program_bool(const dfg_program *p, const char *key) { return program_value(p, key, DFG_SETTING_BOOL).i != 0; }
int64_t dfg_program_int(const dfg_program *p, const char *key) { return program_value(p, key, DFG_SETTING_INT).i; }
double dfg_program_float(const dfg_program *p, const char *key) { return program_value(p, key, DFG_SETTING_FLOAT).f; }

const char *dfg_program_str(const dfg_program *p, const char *key) {
    const char *v = dfg_program_setting(p, key);
    const dfg_setting_spec *spec = v ? NULL : dfg_setting_spec_find(key);
    return v ? v : spec && spec->def ? spec->def : "";
}

/* The setting of a list key that is set, or NULL. */
static const dfg_setting *set_list(const dfg_program *p, const char *key) {
    int i = p && key ? setting_index(p, key) : -1;
    return i >= 0 && p->settings[i].spec && p->settings[i].spec->type >= DFG_SETTING_INTS ? &p->settings[i] : NULL;
}

int dfg_program_list_count(const dfg_program *p, const char *key) {
    const dfg_setting *s = set_list(p, key);
    return s ? s->n_items : program_value(p, key, DFG_SETTING_NAMES).n;
}

const char *dfg_program_list_item(const dfg_program *p, const char *key, int i) {
    const dfg_setting *s = set_list(p, key);
    return s && i >= 0 && i < s->n_items ? s->items[i] : NULL;
}

double dfg_program_list_number(const dfg_program *p, const char *key, int i) {
    const dfg_setting *s = set_list(p, key);
    if (s) return i >= 0 && i < s->n_items ? s->nums[i] : 0.0;
    dfg_setting_parsed v = program_value(p, key, DFG_SETTING_FLOATS);
    return i >= 0 && i < v.n ? v.nums[i] : 0.0;
}
