/* errline.c - one-line messages about an untrusted file (see errline.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

dfg_status dfg_errline_read_file(const dfg_errline *c, const char *path, size_t max, const char *what, char **text,
                                 size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dfg_errline_fail(c, DFG_ERR_IO, "cannot open: %s", strerror(errno));
    struct stat sb;
    dfg_status s = DFG_OK;
    if (fstat(fd, &sb) != 0) s = dfg_errline_fail(c, DFG_ERR_IO, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(sb.st_mode)) s = dfg_errline_fail(c, DFG_ERR_IO, "not a regular file");
    else if ((uint64_t)sb.st_size > max)
        s = dfg_errline_fail(c, DFG_ERR_FORMAT, "%lld bytes, more than the %zu-byte limit of %s", (long long)sb.st_size,
                             max, what);
    size_t n = s ? 0 : (size_t)sb.st_size, got = 0;
    char *b = s ? NULL : malloc(n + 1);
    if (!s && !b) s = dfg_errline_fail(c, DFG_ERR_NOMEM, "cannot allocate %zu bytes to read it", n);
    while (!s && got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            s = dfg_errline_fail(c, DFG_ERR_IO, "read failed after %zu of %zu bytes: %s", got, n,
                                 r == 0 ? "the file shrank" : strerror(errno));
        else got += (size_t)r;
    }
    close(fd);
    if (s) {
        free(b);
        return s;
    }
    b[n] = '\0';
    *text = b, *len = n;
    return DFG_OK;
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
