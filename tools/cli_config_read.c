/* cli_config_read.c - the reader of a TRL config file (dfg compile --config): a flat JSON object,
 * or the YAML that `trl grpo --config grpo_config.yaml` files use (a mapping of fields to plain,
 * quoted, flow-list or block-list scalars, with comments), and nothing more: anchors, tags,
 * block scalars and multi-document files are refused with their line, so a file is never half
 * understood. Plain YAML scalars are typed as PyYAML's safe_load types them (YAML 1.1: yes/no
 * are bools), except that 1e-6 is a number (PyYAML reads a string, which TRL's argument parser
 * then converts). No dfg call: tests/fuzz/fuzz_config.c includes this file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_config.h"

enum { CFG_MAX_DEPTH = 64 }; /* nested JSON values skipped: deeper is refused, not recursed into */

typedef struct {
    const char *s;
    size_t n, i;
    int line;
    char *err;
    size_t err_len;
    cfg_doc *doc;
} reader;

static bool fail(reader *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(reader *r, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(r->err, r->err_len, "%d: %s", line, msg);
    return false;
}

const char *cfg_kind_name(cfg_kind k) {
    static const char *const names[] = {"null", "a bool", "a number", "a string", "a list", "a mapping"};
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = '\0';
    return d;
}

static void scalar_free(cfg_scalar *v) { free(v->text), v->text = NULL; }

void cfg_free(cfg_doc *doc) {
    for (int i = 0; i < doc->n; i++) {
        cfg_field *f = &doc->fields[i];
        free(f->key);
        scalar_free(&f->value);
        for (int k = 0; k < f->n_items; k++) scalar_free(&f->items[k]);
        free(f->items);
    }
    free(doc->fields);
    *doc = (cfg_doc){0};
}

/* A new field named key (taken over); a key given twice is refused. */
static cfg_field *add_field(reader *r, char *key, int line) {
    if (!*key) {
        free(key);
        fail(r, line, "a field with an empty name");
        return NULL;
    }
    for (const char *c = key; *c; c++)
        if ((unsigned char)*c < 0x20) { /* names go into one-line messages */
            fail(r, line, "a field name holds a control character");
            free(key);
            return NULL;
        }
    for (int i = 0; i < r->doc->n; i++)
        if (!strcmp(r->doc->fields[i].key, key)) {
            fail(r, line, "'%s' is given twice (first on line %d)", key, r->doc->fields[i].line);
            free(key);
            return NULL;
        }
    cfg_field *nf = realloc(r->doc->fields, (size_t)(r->doc->n + 1) * sizeof(*nf));
    if (!nf) {
        free(key);
        fail(r, line, "out of memory");
        return NULL;
    }
    r->doc->fields = nf;
    cfg_field *f = &nf[r->doc->n++];
    *f = (cfg_field){.key = key, .line = line};
    return f;
}

static bool add_item(reader *r, cfg_field *f, cfg_scalar v, int line) {
    cfg_scalar *ni = realloc(f->items, (size_t)(f->n_items + 1) * sizeof(*ni));
    if (!ni) {
        scalar_free(&v);
        return fail(r, line, "out of memory");
    }
    f->items = ni;
    f->items[f->n_items++] = v;
    return true;
}

/* ---------------------------------------------------------------- JSON */

static void json_ws(reader *r) {
    for (; r->i < r->n && strchr(" \t\r\n", r->s[r->i]) && r->s[r->i]; r->i++)
        if (r->s[r->i] == '\n') r->line++;
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t utf8_put(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)), o[2] = (char)(0x80 | (cp & 63)), 3;
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63)), o[2] = (char)(0x80 | (cp >> 6 & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A JSON string at r->i (its opening quote); *out its malloc'd text. */
static bool json_string(reader *r, char **out) {
    size_t start = ++r->i, o = 0;
    char *t = malloc(r->n - start + 1); /* escapes never lengthen the text */
    if (!t) return fail(r, r->line, "out of memory");
    while (r->i < r->n && r->s[r->i] != '"') {
        unsigned char c = (unsigned char)r->s[r->i];
        if (c < 0x20) return free(t), fail(r, r->line, "a control character inside a string (end the string first)");
        if (c != '\\') {
            t[o++] = (char)c, r->i++;
            continue;
        }
        if (r->i + 1 >= r->n) break;
        char e = r->s[r->i + 1];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = e ? strchr(from, e) : NULL;
        if (at) {
            t[o++] = to[at - from], r->i += 2;
            continue;
        }
        int cp = e == 'u' && r->i + 6 <= r->n ? hex4(r->s + r->i + 2) : -1;
        if (cp < 0 && (unsigned char)e > 0x20 && (unsigned char)e < 0x7f)
            return free(t), fail(r, r->line, "a bad escape '\\%c' in a string", e);
        if (cp < 0) return free(t), fail(r, r->line, "a bad escape in a string ('\\' and byte 0x%02x)", (unsigned char)e);
        r->i += 6;
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
            int lo = r->i + 6 <= r->n && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u' ? hex4(r->s + r->i + 2) : -1;
            if (lo < 0xDC00 || lo >= 0xE000) return free(t), fail(r, r->line, "an unpaired surrogate \\u%04X in a string", cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), r->i += 6;
        } else if ((cp >= 0xDC00 && cp < 0xE000) || cp == 0) {
            return free(t), fail(r, r->line, "\\u%04X is not a character a field may hold", cp);
        }
        o += utf8_put(t + o, (unsigned)cp);
    }
    if (r->i >= r->n) return free(t), fail(r, r->line, "a string does not end (no closing '\"')");
    r->i++;
    t[o] = '\0';
    *out = t;
    return true;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* A scalar (string, number, true, false, null) at r->i. */
static bool json_scalar(reader *r, cfg_scalar *v) {
    *v = (cfg_scalar){0};
    const char *p = r->s + r->i;
    size_t left = r->n - r->i;
    if (*p == '"') return v->kind = CFG_STRING, json_string(r, &v->text);
    static const struct { const char *word; cfg_kind kind; } words[] = {{"true", CFG_BOOL}, {"false", CFG_BOOL}, {"null", CFG_NULL}};
    for (size_t k = 0; k < 3; k++) {
        size_t wl = strlen(words[k].word);
        if (left >= wl && !memcmp(p, words[k].word, wl)) {
            r->i += wl;
            v->kind = words[k].kind;
            return (v->text = dup_n(words[k].word, wl)) ? true : fail(r, r->line, "out of memory");
        }
    }
    size_t j = 0;
    if (j < left && p[j] == '-') j++;
    if (j < left && p[j] == '0') j++;
    else if (j < left && is_digit(p[j])) while (j < left && is_digit(p[j])) j++;
    else if ((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f) return fail(r, r->line, "'%c' starts no JSON value", *p);
    else return fail(r, r->line, "byte 0x%02x starts no JSON value", (unsigned char)*p);
    if (j < left && p[j] == '.') {
        if (!(++j < left && is_digit(p[j]))) return fail(r, r->line, "a number needs digits after its '.'");
        while (j < left && is_digit(p[j])) j++;
    }
    if (j < left && (p[j] == 'e' || p[j] == 'E')) {
        if (++j < left && (p[j] == '+' || p[j] == '-')) j++;
        if (!(j < left && is_digit(p[j]))) return fail(r, r->line, "a number needs digits after its exponent");
        while (j < left && is_digit(p[j])) j++;
    }
    r->i += j;
    v->kind = CFG_NUMBER;
    return (v->text = dup_n(p, j)) ? true : fail(r, r->line, "out of memory");
}

static bool json_expect(reader *r, char c, const char *what) {
    json_ws(r);
    if (r->i < r->n && r->s[r->i] == c) return r->i++, true;
    if (r->i >= r->n) return fail(r, r->line, "the file ends where %s was expected", what);
    unsigned char got = (unsigned char)r->s[r->i];
    if (got > 0x20 && got < 0x7f) return fail(r, r->line, "'%c' where %s was expected", got, what);
    return fail(r, r->line, "byte 0x%02x where %s was expected", got, what);
}

/* Any value, checked and dropped: a nested object or list (not a GRPOConfig value dfg reads). */
static bool json_skip(reader *r, int depth) {
    json_ws(r);
    if (depth > CFG_MAX_DEPTH) return fail(r, r->line, "values nested deeper than %d", CFG_MAX_DEPTH);
    if (r->i >= r->n) return fail(r, r->line, "the file ends where a value was expected");
    char open = r->s[r->i], close = open == '{' ? '}' : ']';
    if (open != '{' && open != '[') {
        cfg_scalar v;
        bool ok = json_scalar(r, &v);
        scalar_free(&v);
        return ok;
    }
    r->i++;
    json_ws(r);
    if (r->i < r->n && r->s[r->i] == close) return r->i++, true;
    for (;;) {
        if (open == '{') {
            char *key;
            json_ws(r);
            if (r->i >= r->n || r->s[r->i] != '"') return fail(r, r->line, "a key (a string) was expected");
            if (!json_string(r, &key)) return false;
            free(key);
            if (!json_expect(r, ':', "':'")) return false;
        }
        if (!json_skip(r, depth + 1)) return false;
        json_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        return json_expect(r, close, close == '}' ? "',' or '}'" : "',' or ']'");
    }
}

static bool json_value(reader *r, cfg_field *f) {
    json_ws(r);
    if (r->i >= r->n) return fail(r, r->line, "the file ends where the value of '%s' was expected", f->key);
    char c = r->s[r->i];
    if (c == '{') return f->kind = CFG_MAP, json_skip(r, 1);
    if (c != '[') {
        if (!json_scalar(r, &f->value)) return false;
        f->kind = f->value.kind;
        return true;
    }
    f->kind = CFG_LIST;
    r->i++;
    json_ws(r);
    if (r->i < r->n && r->s[r->i] == ']') return r->i++, true;
    for (;;) {
        json_ws(r);
        if (r->i < r->n && (r->s[r->i] == '[' || r->s[r->i] == '{'))
            return fail(r, r->line, "'%s' is a list of lists or mappings; dfg reads lists of plain values", f->key);
        cfg_scalar v;
        if (r->i >= r->n) return fail(r, r->line, "the file ends inside the list of '%s'", f->key);
        if (!json_scalar(r, &v) || !add_item(r, f, v, r->line)) return false;
        json_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        return json_expect(r, ']', "',' or ']'");
    }
}

static bool json_parse(reader *r) {
    if (!json_expect(r, '{', "'{'")) return false;
    json_ws(r);
    if (r->i < r->n && r->s[r->i] == '}') r->i++;
    else
        for (;;) {
            json_ws(r);
            if (r->i >= r->n || r->s[r->i] != '"') return fail(r, r->line, "a field name (a string) was expected");
            int line = r->line;
            char *key;
            if (!json_string(r, &key)) return false;
            cfg_field *f = add_field(r, key, line);
            if (!f || !json_expect(r, ':', "':'") || !json_value(r, f)) return false;
            json_ws(r);
            if (r->i < r->n && r->s[r->i] == ',') {
                r->i++;
                continue;
            }
            if (!json_expect(r, '}', "',' or '}'")) return false;
            break;
        }
    json_ws(r);
    if (r->i < r->n) return fail(r, r->line, "text after the closing '}'");
    return true;
}

/* ---------------------------------------------------------------- YAML */

typedef struct {
    const char *p; /* the line, its comment cut off and its end trimmed */
    size_t len;
    int indent, number;
} yaml_line;

/* Where a comment starts ('#' at the start or after a blank, outside quotes), else len. A quote
 * opens a string only where a value or item starts (don't in a plain value is an apostrophe). */
static size_t comment_at(const char *p, size_t len) {
    char quote = 0;
    for (size_t k = 0; k < len; k++) {
        if (quote) {
            if (p[k] == quote) quote = 0;
        } else if ((p[k] == '"' || p[k] == '\'') && (k == 0 || strchr(" [,{:-", p[k - 1]))) {
            quote = p[k];
        } else if (p[k] == '#' && (k == 0 || p[k - 1] == ' ' || p[k - 1] == '\t')) {
            return k;
        }
    }
    return len;
}

/* The next line with content, from r->i; false at the end of the text or on an error (err set). */
static bool yaml_next(reader *r, yaml_line *l, bool *ok) {
    *ok = true;
    while (r->i < r->n) {
        size_t end = r->i;
        while (end < r->n && r->s[end] != '\n') end++;
        const char *p = r->s + r->i;
        size_t len = end - r->i;
        l->number = ++r->line;
        r->i = end < r->n ? end + 1 : end;
        if (memchr(p, '\0', len)) return *ok = fail(r, l->number, "a NUL byte"), false;
        size_t ind = 0;
        while (ind < len && p[ind] == ' ') ind++;
        if (ind < len && p[ind] == '\t') return *ok = fail(r, l->number, "a tab in the indentation (YAML indents with spaces)"), false;
        len = comment_at(p, len);
        while (len > ind && strchr(" \t\r", p[len - 1])) len--;
        if (len == ind) continue;
        *l = (yaml_line){p + ind, len - ind, (int)ind, l->number};
        return true;
    }
    return false;
}

/* A plain scalar typed as YAML 1.1 does: null, a bool, a number, or a string. */
static bool yaml_plain(reader *r, const char *p, size_t len, int line, cfg_scalar *v) {
    static const char *const nulls[] = {"null", "Null", "NULL", "~"};
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *const falses[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    *v = (cfg_scalar){.kind = CFG_STRING};
    const char *canon = NULL;
    if (len == 0) v->kind = CFG_NULL, canon = "null";
    for (size_t k = 0; k < 4 && !canon; k++)
        if (strlen(nulls[k]) == len && !memcmp(p, nulls[k], len)) v->kind = CFG_NULL, canon = "null";
    for (size_t k = 0; k < 9 && !canon; k++) {
        if (strlen(trues[k]) == len && !memcmp(p, trues[k], len)) v->kind = CFG_BOOL, canon = "true";
        if (strlen(falses[k]) == len && !memcmp(p, falses[k], len)) v->kind = CFG_BOOL, canon = "false";
    }
    if (!canon) { /* [-+]digits[.digits][e[-+]digits], or .5 */
        size_t j = 0, digits = 0;
        if (j < len && (p[j] == '-' || p[j] == '+')) j++;
        for (; j < len && is_digit(p[j]); j++) digits++;
        if (j < len && p[j] == '.')
            for (j++; j < len && is_digit(p[j]); j++) digits++;
        if (digits && j < len && (p[j] == 'e' || p[j] == 'E')) {
            size_t e = j + 1;
            if (e < len && (p[e] == '-' || p[e] == '+')) e++;
            if (e < len && is_digit(p[e])) {
                while (e < len && is_digit(p[e])) e++;
                j = e;
            }
        }
        if (digits && j == len) v->kind = CFG_NUMBER;
    }
    v->text = canon ? dup_n(canon, strlen(canon)) : dup_n(p, len);
    return v->text ? true : fail(r, line, "out of memory");
}

/* A quoted scalar at p (its quote); *used: the characters it took. */
static bool yaml_quoted(reader *r, const char *p, size_t len, int line, cfg_scalar *v, size_t *used) {
    char q = p[0];
    char *t = malloc(len + 1);
    size_t o = 0, k = 1;
    if (!t) return fail(r, line, "out of memory");
    for (; k < len; k++) {
        if (p[k] == q) {
            if (q == '\'' && k + 1 < len && p[k + 1] == '\'') { /* '' is one ' */
                t[o++] = '\'', k++;
                continue;
            }
            break;
        }
        if (q == '"' && p[k] == '\\') {
            const char *from = "\"\\/nt", *to = "\"\\/\n\t", *at = k + 1 < len && p[k + 1] ? strchr(from, p[k + 1]) : NULL;
            if (!at) return free(t), fail(r, line, "an escape dfg does not read in a quoted string (\\\", \\\\, \\/, \\n, \\t)");
            t[o++] = to[at - from], k++;
            continue;
        }
        t[o++] = p[k];
    }
    if (k >= len) return free(t), fail(r, line, "a quoted string does not end on its line");
    t[o] = '\0';
    *v = (cfg_scalar){.kind = CFG_STRING, .text = t};
    *used = k + 1;
    return true;
}

/* One scalar, the whole of p[0..len): quoted, or plain. */
static bool yaml_scalar(reader *r, const char *p, size_t len, int line, cfg_scalar *v) {
    if (len && strchr("&*!|>%@`", p[0]))
        return fail(r, line, "'%c' starts an anchor, alias, tag or block scalar, which dfg's reader does not take", p[0]);
    if (len && (p[0] == '"' || p[0] == '\'')) {
        size_t used;
        if (!yaml_quoted(r, p, len, line, v, &used)) return false;
        while (used < len && p[used] == ' ') used++;
        if (used < len) return scalar_free(v), fail(r, line, "text after a quoted string");
        return true;
    }
    if (len && (p[0] == '[' || p[0] == '{'))
        return fail(r, line, "a nested list or mapping where a plain value was expected");
    return yaml_plain(r, p, len, line, v);
}

/* [a, "b", 3]: a flow list of scalars, on one line. */
static bool yaml_flow_list(reader *r, cfg_field *f, const char *p, size_t len, int line) {
    f->kind = CFG_LIST;
    if (p[len - 1] != ']') return fail(r, line, "the list of '%s' must close with ']' on its line", f->key);
    size_t k = 1, end = len - 1;
    while (k < end && p[k] == ' ') k++;
    if (k == end) return true;
    while (k <= end) {
        while (k < end && p[k] == ' ') k++;
        cfg_scalar v;
        size_t stop = k;
        if (k < end && (p[k] == '"' || p[k] == '\'')) {
            size_t used;
            if (!yaml_quoted(r, p + k, end - k, line, &v, &used)) return false;
            stop = k + used;
            while (stop < end && p[stop] == ' ') stop++;
            if (stop < end && p[stop] != ',') return scalar_free(&v), fail(r, line, "text after a quoted item of '%s'", f->key);
        } else {
            while (stop < end && p[stop] != ',') stop++;
            size_t e = stop;
            while (e > k && p[e - 1] == ' ') e--;
            if (e == k) return fail(r, line, "an empty item in the list of '%s'", f->key);
            if (!yaml_scalar(r, p + k, e - k, line, &v)) return false;
        }
        if (!add_item(r, f, v, line)) return false;
        k = stop + 1;
    }
    return true;
}

/* {a: 1}: a flow mapping, on one line; read to be named, not kept. */
static bool yaml_flow_map(reader *r, cfg_field *f, const char *p, size_t len, int line) {
    f->kind = CFG_MAP;
    int depth = 0;
    char quote = 0;
    for (size_t k = 0; k < len; k++) {
        if (quote) quote = p[k] == quote ? 0 : quote;
        else if (p[k] == '"' || p[k] == '\'') quote = p[k];
        else if (p[k] == '{' || p[k] == '[') depth++;
        else if ((p[k] == '}' || p[k] == ']') && --depth == 0 && k + 1 < len) return fail(r, line, "text after the mapping of '%s'", f->key);
    }
    if (depth || quote) return fail(r, line, "the mapping of '%s' must close on its line", f->key);
    return true;
}

/* Is this line "key: ..." (a mapping entry)? */
static bool looks_like_entry(const char *p, size_t len) {
    for (size_t k = 0; k < len; k++)
        if (p[k] == ':' && (k + 1 == len || p[k + 1] == ' ')) return true;
    return false;
}

/* The lines indented under a field given no value on its own line: a block list ("- item"),
 * a nested mapping (kept as CFG_MAP), or a plain scalar folded over lines. *l: the first line
 * after the block on return (*more false at the end). */
static bool yaml_block(reader *r, cfg_field *f, yaml_line *l, bool *more) {
    bool ok;
    *more = yaml_next(r, l, &ok);
    if (!ok) return false;
    if (!*more || l->indent == 0) return f->kind = CFG_NULL, (f->value.text = dup_n("null", 4)) ? true : fail(r, l->number, "out of memory");
    int indent = l->indent;
    bool list = l->p[0] == '-' && (l->len == 1 || l->p[1] == ' ');
    f->kind = list ? CFG_LIST : looks_like_entry(l->p, l->len) ? CFG_MAP : CFG_STRING;
    char *folded = NULL;
    size_t folded_len = 0;
    int first = l->number;
    while (*more && l->indent > 0) {
        if (f->kind == CFG_LIST) {
            if (l->indent != indent || l->p[0] != '-' || (l->len > 1 && l->p[1] != ' '))
                return fail(r, l->number, "each item of '%s' is a line '- value' at the same indentation", f->key);
            size_t k = 1;
            while (k < l->len && l->p[k] == ' ') k++;
            cfg_scalar v;
            if (k < l->len && l->p[k] == '-') return fail(r, l->number, "'%s' is a list of lists; dfg reads lists of plain values", f->key);
            if (k < l->len && looks_like_entry(l->p + k, l->len - k) && l->p[k] != '"' && l->p[k] != '\'')
                return fail(r, l->number, "'%s' is a list of mappings; dfg reads lists of plain values", f->key);
            if (!yaml_scalar(r, l->p + k, l->len - k, l->number, &v) || !add_item(r, f, v, l->number)) return false;
        } else if (f->kind == CFG_STRING) {
            if (l->p[0] == '"' || l->p[0] == '\'' || l->p[0] == '-' || looks_like_entry(l->p, l->len))
                return free(folded), fail(r, l->number, "the value of '%s' goes on: a plain value over lines takes no quotes, "
                                          "'- ' or 'key:'", f->key);
            char *nf = realloc(folded, folded_len + l->len + 2);
            if (!nf) return free(folded), fail(r, l->number, "out of memory");
            folded = nf;
            if (folded_len) folded[folded_len++] = ' ';
            memcpy(folded + folded_len, l->p, l->len);
            folded_len += l->len;
        } /* CFG_MAP: its lines are skipped */
        *more = yaml_next(r, l, &ok);
        if (!ok) return free(folded), false;
    }
    if (f->kind != CFG_STRING) return true;
    bool typed = yaml_scalar(r, folded, folded_len, first, &f->value);
    free(folded);
    if (typed) f->kind = f->value.kind;
    return typed;
}

/* "key: value" at indentation 0. */
static bool yaml_entry(reader *r, yaml_line *l, bool *more) {
    const char *p = l->p;
    size_t len = l->len, k;
    char *key;
    if (p[0] == '-') return fail(r, l->number, "the file must be a mapping of fields ('name: value'), not a list");
    if (p[0] == '"' || p[0] == '\'') {
        cfg_scalar q;
        if (!yaml_quoted(r, p, len, l->number, &q, &k)) return false;
        key = q.text;
    } else {
        for (k = 0; k < len && !(p[k] == ':' && (k + 1 == len || p[k + 1] == ' ')); k++)
            if (strchr("[]{},&*!|>'\"%@`?", p[k])) return fail(r, l->number, "'%c' in a field name", p[k]);
        size_t e = k;
        while (e > 0 && p[e - 1] == ' ') e--; /* "name : value" */
        if (!(key = dup_n(p, e))) return fail(r, l->number, "out of memory");
    }
    if (k >= len || p[k] != ':' || (k + 1 < len && p[k + 1] != ' '))
        return free(key), fail(r, l->number, "a line 'name: value' was expected");
    cfg_field *f = add_field(r, key, l->number);
    if (!f) return false;
    k++;
    while (k < len && p[k] == ' ') k++;
    const char *v = p + k;
    size_t vlen = len - k;
    if (vlen == 0) return yaml_block(r, f, l, more);
    bool ok = v[0] == '[' ? yaml_flow_list(r, f, v, vlen, l->number)
              : v[0] == '{' ? yaml_flow_map(r, f, v, vlen, l->number)
                            : yaml_scalar(r, v, vlen, l->number, &f->value);
    if (ok && v[0] != '[' && v[0] != '{') f->kind = f->value.kind;
    if (!ok) return false;
    *more = yaml_next(r, l, &ok);
    if (ok && *more && l->indent > 0)
        return fail(r, l->number, "an indented line after '%s', which already has its value", f->key);
    return ok;
}

static bool yaml_parse(reader *r) {
    yaml_line l;
    bool ok, more = yaml_next(r, &l, &ok);
    if (!ok) return false;
    if (more && l.len == 3 && !memcmp(l.p, "---", 3)) {
        more = yaml_next(r, &l, &ok);
        if (!ok) return false;
    }
    while (more) {
        if (l.len >= 3 && (!memcmp(l.p, "---", 3) || !memcmp(l.p, "...", 3)) && l.indent == 0)
            return fail(r, l.number, "a second YAML document ('%.3s'); a config file is one mapping", l.p);
        if (l.indent > 0) return fail(r, l.number, "an indented line where a field 'name: value' was expected");
        if (!yaml_entry(r, &l, &more)) return false;
    }
    return true;
}

bool cfg_parse(const char *text, size_t n, cfg_doc *doc, char *err, size_t err_len) {
    *doc = (cfg_doc){0};
    reader r = {.s = text, .n = n, .line = 1, .err = err, .err_len = err_len, .doc = doc};
    size_t k = 0;
    while (k < n && strchr(" \t\r\n", text[k]) && text[k]) k++;
    doc->json = k < n && text[k] == '{';
    bool ok;
    if (doc->json) ok = json_parse(&r);
    else r.line = 0, ok = yaml_parse(&r);
    if (!ok) {
        bool json = doc->json;
        cfg_free(doc);
        doc->json = json;
    }
    return ok;
}
