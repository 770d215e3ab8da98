/* errline.c - one-line messages about an untrusted file (see errline.h). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errline.h"

dfg_status dfg_errline_fail(const dfg_errline *c, dfg_status s, const char *fmt, ...) {
    if (!c->err || !c->err_len) return s;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(c->err, c->err_len, "%s: %s", c->label, msg);
    return s;
}

const char *dfg_errline_quote(const char *s, char *buf, size_t max) {
    size_t n = 0;
    for (; s && s[n] && n < max; n++) buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    if (s && s[n]) {
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

dfg_status dfg_errline_scan_json(const dfg_errline *c, const char *t, size_t n, size_t max_values, bool refuse_u0000) {
    size_t values = 1;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        char b = t[i];
        if (b == 0)
            return dfg_errline_fail(c, DFG_ERR_FORMAT, "holds a NUL byte at byte %zu%s", i,
                                    refuse_u0000 ? " (not a JSON text)" : "");
        if (in_str) {
            if (refuse_u0000 && esc && b == 'u' && n - i > 4 && !memcmp(t + i + 1, "0000", 4))
                return dfg_errline_fail(c, DFG_ERR_FORMAT,
                                        "a string holds \\u0000 at byte %zu (NUL characters are refused)", i - 1);
            if (esc) esc = false;
            else if (b == '\\') esc = true;
            else if (b == '"') in_str = false;
        } else if (b == '"') in_str = true;
        else if (b == ',' || b == '[' || b == '{') values++;
    }
    if (values > max_values) return dfg_errline_fail(c, DFG_ERR_FORMAT, "holds more than %zu JSON values", max_values);
    return DFG_OK;
}
