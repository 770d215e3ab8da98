/* settings_table.c - the settings table (settings.def) and the one parser of setting values:
 * text in, a checked value and its canonical text out, or one line saying what is accepted. Every
 * typed read of a setting goes through dfg_setting_parse (graph/settings.c), at the moment the
 * value is set for a table key, at the pipeline's read for a key of its own. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"

static const dfg_setting_spec table[] = {
#define DFG_SETTING(key, type, def, min, max, max_items, values, owner, doc) \
    {#key, DFG_SETTING_##type, def, min, max, max_items, values, DFG_SETTING_##owner, doc},
#include "settings.def"
#undef DFG_SETTING
};
#define N_SPECS (int)(sizeof(table) / sizeof(table[0]))

int dfg_setting_spec_count(void) { return N_SPECS; }

const dfg_setting_spec *dfg_setting_spec_at(int i) { return i >= 0 && i < N_SPECS ? &table[i] : NULL; }

const dfg_setting_spec *dfg_setting_spec_find(const char *key) {
    for (int i = 0; key && i < N_SPECS; i++)
        if (!strcmp(table[i].key, key)) return &table[i];
    return NULL;
}

const char *dfg_setting_type_name(dfg_setting_type t) {
    static const char *const names[DFG_SETTING_TYPE_COUNT] = {"bool", "int", "float", "enum", "string", "ints", "floats", "names"};
    return (unsigned)t < DFG_SETTING_TYPE_COUNT ? names[t] : "?";
}

const char *dfg_setting_owner_name(dfg_setting_owner o) {
    static const char *const names[DFG_SETTING_OWNER_COUNT] = {"engine", "model", "data", "grpo", "optimizer", "lora"};
    return (unsigned)o < DFG_SETTING_OWNER_COUNT ? names[o] : "?";
}

/* ---------------------------------------------------------------- numbers as text */

/* The shortest %g text that reads back as exactly x (what the plan records); a whole number below
 * 1e15 in full ("10000", not "1e+04", as config.json writes rope_theta). */
void dfg_setting_format_double(double x, char *buf, size_t len) {
    if (x == floor(x) && fabs(x) < 1e15) {
        snprintf(buf, len, "%.0f", x);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* A bound as a message shows it: integers in full, others shortest. */
static void format_bound(double x, char *buf, size_t len) {
    if (x == floor(x) && fabs(x) < 1e16) snprintf(buf, len, "%.0f", x);
    else dfg_setting_format_double(x, buf, len);
}

void dfg_setting_accepted(const dfg_setting_spec *s, char *buf, size_t len) {
    char lo[40], hi[40];
    if (!buf || !len) return;
    buf[0] = '\0';
    if (!s) return;
    format_bound(s->min, lo, sizeof(lo));
    format_bound(s->max, hi, sizeof(hi));
    size_t n = 0;
    switch (s->type) {
    case DFG_SETTING_BOOL: snprintf(buf, len, "true/false, 1/0, yes/no, on/off"); return;
    case DFG_SETTING_INT:
    case DFG_SETTING_FLOAT:
        snprintf(buf, len, "%s%s .. %s", s->values[0] ? "auto or " : "", lo, hi);
        return;
    case DFG_SETTING_ENUM: /* "grpo, bnpo" ; spellings of one value joined by '/' */
        for (const char *v = s->values; *v && n + 1 < len; v++) {
            const char *add = *v == '|' ? ", " : *v == ',' ? "/" : NULL;
            n += add ? (size_t)snprintf(buf + n, len - n, "%s", add) : (size_t)snprintf(buf + n, len - n, "%c", *v);
        }
        return;
    case DFG_SETTING_STR: snprintf(buf, len, "any text"); return;
    case DFG_SETTING_INTS: snprintf(buf, len, "up to %d integers in %s .. %s, separated by ','", s->max_items, lo, hi); return;
    case DFG_SETTING_FLOATS: snprintf(buf, len, "up to %d numbers in %s .. %s, separated by ','", s->max_items, lo, hi); return;
    case DFG_SETTING_NAMES:
        snprintf(buf, len, "up to %d names of %s .. %s characters, separated by ','", s->max_items, lo, hi);
        return;
    case DFG_SETTING_TYPE_COUNT: break;
    }
}

/* ---------------------------------------------------------------- parsing */

typedef struct {
    const char *key;
    const dfg_setting_spec *spec; /* or NULL */
    char *err;
    size_t err_len;
} parse_ctx;

static bool fail(const parse_ctx *c, const char *value, const char *what) {
    char acc[512];
    dfg_setting_accepted(c->spec, acc, sizeof(acc));
    if (c->err && c->err_len)
        snprintf(c->err, c->err_len, "setting '%s': '%s' %s%s%s%s", c->key, value, what, acc[0] ? " (" : "", acc,
                 acc[0] ? ")" : "");
    return false;
}

/* strtoll/strtod skip leading blanks, which a strict parse must not. */
static bool starts_like_number(const char *s) { return *s && !isspace((unsigned char)*s); }

static bool in_range(const parse_ctx *c, double x) { return !c->spec || (x >= c->spec->min && x <= c->spec->max); }

static bool parse_int(const parse_ctx *c, const char *v, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long x = starts_like_number(v) ? strtoll(v, &end, 10) : 0;
    if (!end || end == v || *end) return fail(c, v, "is not an integer");
    if (errno == ERANGE) return fail(c, v, "is out of the 64-bit integer range");
    if (!in_range(c, (double)x)) return fail(c, v, "is out of range");
    *out = (int64_t)x;
    return true;
}

static bool parse_float(const parse_ctx *c, const char *v, double *out) {
    char *end = NULL;
    double x = starts_like_number(v) ? strtod(v, &end) : 0.0;
    if (!end || end == v || *end) return fail(c, v, "is not a number");
    if (!isfinite(x)) return fail(c, v, "is not a finite number");
    if (!in_range(c, x)) return fail(c, v, "is out of range");
    *out = x;
    return true;
}

static bool parse_bool(const parse_ctx *c, const char *v, int64_t *out) {
    static const char *const yes[] = {"true", "1", "yes", "on"}, *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcmp(v, yes[i])) return *out = 1, true;
        if (!strcmp(v, no[i])) return *out = 0, true;
    }
    if (c->err && c->err_len) /* the table's wording, for a key of the pipeline's own too */
        snprintf(c->err, c->err_len, "setting '%s': '%s' is not a boolean (true/false, 1/0, yes/no, on/off)", c->key, v);
    return false;
}

/* ENUM: the index of the value one of whose spellings v is; its first spelling into canon. */
static bool parse_enum(const parse_ctx *c, const char *v, int64_t *out, char *canon, size_t canon_len) {
    int index = 0;
    for (const char *a = c->spec->values; *a; index++) {
        size_t value_len = strcspn(a, "|");
        for (const char *sp = a; sp < a + value_len;) {
            size_t n = strcspn(sp, ",|");
            if (n == strlen(v) && !strncmp(sp, v, n)) {
                snprintf(canon, canon_len, "%.*s", (int)strcspn(a, ",|"), a);
                *out = index;
                return true;
            }
            sp += n + (sp[n] == ',');
        }
        a += value_len + (a[value_len] == '|');
    }
    return fail(c, v, "is not one of the values");
}

/* A list: items split at ',', blanks around them dropped, each checked; canonical text is the
 * items joined by ','. */
static bool parse_list(const parse_ctx *c, const char *v, dfg_setting_parsed *out, char *canon, size_t canon_len) {
    const dfg_setting_spec *s = c->spec;
    size_t at = 0;
    out->n = 0;
    canon[0] = '\0';
    if (!*v) return true; /* no items */
    for (const char *item = v;;) {
        size_t n = strcspn(item, ","), b = 0;
        while (b < n && isspace((unsigned char)item[b])) b++;
        while (n > b && isspace((unsigned char)item[n - 1])) n--;
        char one[256];
        if (n - b >= sizeof(one)) return fail(c, v, "has an item too long");
        snprintf(one, sizeof(one), "%.*s", (int)(n - b), item + b);
        if (!one[0]) return fail(c, v, "has an empty item");
        if (out->n == s->max_items || out->n == DFG_SETTING_MAX_ITEMS) return fail(c, v, "has too many items");
        char text[256];
        if (s->type == DFG_SETTING_INTS) {
            int64_t x;
            if (!parse_int(c, one, &x)) return false;
            out->nums[out->n] = (double)x;
            snprintf(text, sizeof(text), "%lld", (long long)x);
        } else if (s->type == DFG_SETTING_FLOATS) {
            if (!parse_float(c, one, &out->nums[out->n])) return false;
            dfg_setting_format_double(out->nums[out->n], text, sizeof(text));
        } else {
            size_t len = strlen(one);
            for (const char *ch = one; *ch; ch++)
                if ((unsigned char)*ch < 0x20) return fail(c, v, "has a control character");
            if ((double)len < s->min || (double)len > s->max) return fail(c, v, "has a name of the wrong length");
            snprintf(text, sizeof(text), "%s", one);
        }
        at += (size_t)snprintf(canon + at, at < canon_len ? canon_len - at : 0, "%s%s", out->n ? "," : "", text);
        out->n++;
        item += strcspn(item, ",");
        if (!*item) break;
        item++;
    }
    if (at >= canon_len) return fail(c, v, "is too long");
    return true;
}

bool dfg_setting_parse(const char *key, const dfg_setting_spec *spec, dfg_setting_type type, const char *v,
                       dfg_setting_parsed *out, char *canon, size_t canon_len, char *err, size_t err_len) {
    parse_ctx c = {key, spec, err, err_len};
    memset(out, 0, sizeof(*out));
    if (spec) type = spec->type;
    switch (type) {
    case DFG_SETTING_BOOL:
        if (!parse_bool(&c, v, &out->i)) return false;
        snprintf(canon, canon_len, "%s", out->i ? "true" : "false");
        return true;
    case DFG_SETTING_INT:
        if (spec && !strcmp(spec->values, "auto") && !strcmp(v, "auto")) {
            out->i = DFG_SETTING_AUTO;
            snprintf(canon, canon_len, "auto");
            return true;
        }
        if (!parse_int(&c, v, &out->i)) return false;
        snprintf(canon, canon_len, "%lld", (long long)out->i);
        return true;
    case DFG_SETTING_FLOAT:
        if (!parse_float(&c, v, &out->f)) return false;
        dfg_setting_format_double(out->f, canon, canon_len);
        return true;
    case DFG_SETTING_ENUM: return spec ? parse_enum(&c, v, &out->i, canon, canon_len) : false;
    case DFG_SETTING_STR: snprintf(canon, canon_len, "%s", v); return true;
    case DFG_SETTING_INTS:
    case DFG_SETTING_FLOATS:
    case DFG_SETTING_NAMES: return spec ? parse_list(&c, v, out, canon, canon_len) : false;
    case DFG_SETTING_TYPE_COUNT: break;
    }
    return false;
}
