/* fileio.c - the one whole-file reader and the one atomic writer (see fileio.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"

#define FILEIO_TEMP_TRIES 64

static dfg_status fio_fail(char *err, size_t err_len, const char *label, dfg_status s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static dfg_status fio_fail(char *err, size_t err_len, const char *label, dfg_status s, const char *fmt, ...) {
    if (!err || !err_len) return s;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(err, err_len, "%s: %s", label, msg);
    return s;
}

/* ---------------------------------------------------------------- reading */

dfg_status dfg_file_read(const char *path, const char *label, size_t max, const char *what, char **text, size_t *len,
                         char *err, size_t err_len) {
    if (!label) label = path ? path : "(null)";
    if (!path || !text || !len) return fio_fail(err, err_len, label, DFG_ERR_ARG, "no path or no place for the text");
    *text = NULL, *len = 0;
    /* O_NONBLOCK: opening a FIFO does not wait for a writer; it is refused below */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fio_fail(err, err_len, label, DFG_ERR_IO, "cannot open: %s", strerror(errno));
    struct stat sb;
    dfg_status s = DFG_OK;
    if (fstat(fd, &sb) != 0) s = fio_fail(err, err_len, label, DFG_ERR_IO, "cannot stat: %s", strerror(errno));
    else if (!S_ISREG(sb.st_mode)) s = fio_fail(err, err_len, label, DFG_ERR_IO, "not a regular file");
    else if ((uint64_t)sb.st_size > max)
        s = fio_fail(err, err_len, label, DFG_ERR_FORMAT, "%lld bytes, more than the %zu-byte limit of %s",
                     (long long)sb.st_size, max, what ? what : "the file");
    size_t n = s ? 0 : (size_t)sb.st_size, got = 0;
    char *b = s ? NULL : malloc(n + 1);
    if (!s && !b) s = fio_fail(err, err_len, label, DFG_ERR_NOMEM, "cannot allocate %zu bytes to read it", n);
    while (!s && got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0)
            s = fio_fail(err, err_len, label, DFG_ERR_IO, "read failed after %zu of %zu bytes: %s", got, n,
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

/* ---------------------------------------------------------------- writing */

void dfg_file_abort(dfg_file_out *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->tmp && f->fd >= 0) unlink(f->tmp);
    free(f->path), free(f->tmp), free(f->dir);
    *f = (dfg_file_out){.fd = -1};
}

/* Six characters of a temp name (as mkstemp's XXXXXX; tools/cli_run_ckpt.c recognises a killed
 * run's leftovers by that length), different per process, call and moment. */
static void fio_temp_suffix(char out[7], unsigned attempt) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static _Atomic unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t z = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                 ((uint64_t)counter++ << 8) ^ attempt;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; /* splitmix64's finaliser */
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (int i = 0; i < 6; i++, z /= 62) out[i] = alphabet[z % 62];
    out[6] = '\0';
}

dfg_status dfg_file_begin(dfg_file_out *f, const char *path, char *err, size_t err_len) {
    *f = (dfg_file_out){.fd = -1};
    if (!path || !*path) return fio_fail(err, err_len, "(null)", DFG_ERR_ARG, "no path to write");
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) : 0;
    const char *base = slash ? slash + 1 : path;
    f->path = strdup(path);
    f->dir = malloc(dlen + 2);
    f->tmp = malloc(dlen + strlen(base) + 16);
    if (!f->path || !f->dir || !f->tmp) {
        dfg_file_abort(f);
        return fio_fail(err, err_len, path, DFG_ERR_NOMEM, "out of memory");
    }
    if (!slash) strcpy(f->dir, ".");
    else if (dlen == 0) strcpy(f->dir, "/");
    else memcpy(f->dir, path, dlen), f->dir[dlen] = '\0';
    /* O_EXCL with the mode: the kernel applies the umask, the one policy (fileio.h) */
    for (unsigned i = 0; f->fd < 0 && i < FILEIO_TEMP_TRIES; i++) {
        char suffix[7];
        fio_temp_suffix(suffix, i);
        sprintf(f->tmp, "%s/.%s.%s", f->dir, base, suffix);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, DFG_FILE_MODE);
        if (f->fd < 0 && errno != EEXIST) break;
    }
    if (f->fd < 0) {
        int e = errno;
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", f->dir);
        dfg_file_abort(f);
        return fio_fail(err, err_len, path, DFG_ERR_IO, "cannot create a temporary file in '%s': %s", dir, strerror(e));
    }
    return DFG_OK;
}

dfg_status dfg_file_put(dfg_file_out *f, const void *data, size_t n, char *err, size_t err_len) {
    const char *q = data;
    while (n) {
        ssize_t w = write(f->fd, q, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return fio_fail(err, err_len, f->path, DFG_ERR_IO, "writing '%s' failed: %s", f->tmp,
                            w < 0 ? strerror(errno) : "no progress");
        q += w, n -= (size_t)w;
    }
    return DFG_OK;
}

/* Makes the rename durable; filesystems that cannot fsync a directory (EINVAL) are accepted. */
static dfg_status fio_sync_dir(const dfg_file_out *f, char *err, size_t err_len) {
    int fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fio_fail(err, err_len, f->path, DFG_ERR_IO, "cannot open directory '%s' to sync it: %s", f->dir,
                        strerror(errno));
    int r = fsync(fd), e = errno;
    close(fd);
    if (r != 0 && e != EINVAL)
        return fio_fail(err, err_len, f->path, DFG_ERR_IO, "fsync of directory '%s' failed: %s", f->dir, strerror(e));
    return DFG_OK;
}

dfg_status dfg_file_commit(dfg_file_out *f, char *err, size_t err_len) {
    dfg_status s = DFG_OK;
    if (fsync(f->fd) != 0) s = fio_fail(err, err_len, f->path, DFG_ERR_IO, "fsync of '%s' failed: %s", f->tmp, strerror(errno));
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0 && !s) s = fio_fail(err, err_len, f->path, DFG_ERR_IO, "closing '%s' failed: %s", f->tmp, strerror(errno));
    if (!s && rename(f->tmp, f->path) != 0)
        s = fio_fail(err, err_len, f->path, DFG_ERR_IO, "cannot rename '%s' into place: %s", f->tmp, strerror(errno));
    if (s) unlink(f->tmp);
    else s = fio_sync_dir(f, err, err_len);
    dfg_file_abort(f);
    return s;
}

dfg_status dfg_file_write(const char *path, const void *data, size_t n, char *err, size_t err_len) {
    dfg_file_out f;
    dfg_status s = dfg_file_begin(&f, path, err, err_len);
    if (s) return s;
    if ((s = dfg_file_put(&f, data, n, err, err_len))) {
        dfg_file_abort(&f);
        return s;
    }
    return dfg_file_commit(&f, err, err_len);
}

dfg_status dfg_file_copy(const char *src, const char *dst, char *err, size_t err_len) {
    int in = open(src, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (in < 0)
        return fio_fail(err, err_len, src, DFG_ERR_IO, "cannot copy it: %s",
                        errno == ENOENT ? "a symbolic link to nothing" : strerror(errno));
    if (fstat(in, &sb) || !S_ISREG(sb.st_mode)) {
        close(in);
        return fio_fail(err, err_len, src, DFG_ERR_IO, "cannot copy it: not a regular file");
    }
    dfg_file_out f;
    dfg_status s = dfg_file_begin(&f, dst, err, err_len);
    char buf[1 << 16];
    for (ssize_t n; !s && (n = read(in, buf, sizeof(buf))) != 0;) {
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) s = fio_fail(err, err_len, src, DFG_ERR_IO, "cannot copy it to %s: %s", dst, strerror(errno));
        else s = dfg_file_put(&f, buf, (size_t)n, err, err_len);
    }
    close(in);
    if (s) {
        dfg_file_abort(&f);
        return s;
    }
    return dfg_file_commit(&f, err, err_len);
}
