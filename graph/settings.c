/* settings.c - a program's settings: string key/value pairs saved in the plan, the typed
 * accessors pipelines read them with, and the "used" marks that let `dfg compile` reject a
 * --set key no pipeline code asked for (a typo would otherwise be silently ignored). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

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

dfg_status dfg_program_set(dfg_program *p, const char *key, const char *value) {
    if (!p) return DFG_ERR_ARG;
    if (p->status) return p->status;
    if (!key || !*key || !value) return dfg_program_err(p, DFG_ERR_ARG, "setting: a key and a value are required");
    char *v = dfg_program_strdup(p, value);
    if (!v) return dfg_program_err(p, DFG_ERR_NOMEM, "setting '%s': out of memory", key);
    int i = setting_index(p, key);
    if (i >= 0) {
        p->settings[i].value = v;
        return DFG_OK;
    }
    char *k = dfg_program_strdup(p, key);
    if (!k || !settings_reserve(p)) return dfg_program_err(p, DFG_ERR_NOMEM, "setting '%s': out of memory", key);
    p->settings[p->n_settings++] = (dfg_setting){k, v, false};
    return DFG_OK;
}

const char *dfg_program_setting(const dfg_program *p, const char *key) {
    if (!p || !key) return NULL;
    int i = setting_index(p, key);
    return i >= 0 ? p->settings[i].value : NULL;
}

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

/* ---------------------------------------------------------------- typed accessors */

/* The value of key for a typed accessor: the set value, or `def_text` recorded as the value.
 * Marks the key used. NULL when the program is in an error state (or p/key are NULL). */
static const char *lookup(dfg_program *p, const char *key, const char *def_text) {
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
    return p->settings[i].value;
}

/* strtoll/strtod skip leading blanks, which a strict parse must not. */
static bool starts_like_number(const char *s) { return *s && !isspace((unsigned char)*s); }

int64_t dfg_setting_int(dfg_program *p, const char *key, int64_t def) {
    char text[32];
    snprintf(text, sizeof(text), "%lld", (long long)def);
    const char *v = lookup(p, key, text);
    if (!v) return def;
    char *end = NULL;
    errno = 0;
    long long x = starts_like_number(v) ? strtoll(v, &end, 10) : 0;
    if (!end || end == v || *end) {
        dfg_program_err(p, DFG_ERR_ARG, "setting '%s': '%s' is not an integer", key, v);
        return def;
    }
    if (errno == ERANGE) {
        dfg_program_err(p, DFG_ERR_RANGE, "setting '%s': %s is out of the 64-bit integer range", key, v);
        return def;
    }
    return (int64_t)x;
}

/* The shortest %g text that reads back as exactly x, so the plan records the value used. */
static void format_double(double x, char *buf, size_t len) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

double dfg_setting_float(dfg_program *p, const char *key, double def) {
    char text[40];
    format_double(def, text, sizeof(text));
    const char *v = lookup(p, key, text);
    if (!v) return def;
    char *end = NULL;
    double x = starts_like_number(v) ? strtod(v, &end) : 0.0;
    if (!end || end == v || *end) {
        dfg_program_err(p, DFG_ERR_ARG, "setting '%s': '%s' is not a number", key, v);
        return def;
    }
    if (!isfinite(x)) {
        dfg_program_err(p, DFG_ERR_RANGE, "setting '%s': '%s' is not a finite number", key, v);
        return def;
    }
    return x;
}

const char *dfg_setting_str(dfg_program *p, const char *key, const char *def) {
    const char *v = lookup(p, key, def ? def : "");
    return v ? v : (def ? def : "");
}

bool dfg_setting_bool(dfg_program *p, const char *key, bool def) {
    const char *v = lookup(p, key, def ? "true" : "false");
    if (!v) return def;
    static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcmp(v, yes[i])) return true;
        if (!strcmp(v, no[i])) return false;
    }
    dfg_program_err(p, DFG_ERR_ARG, "setting '%s': '%s' is not a boolean (true/false, 1/0, yes/no, on/off)", key, v);
    return def;
}
