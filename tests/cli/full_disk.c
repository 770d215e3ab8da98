/* full_disk.c - an LD_PRELOAD shim for the CLI tests: a full disk, at chosen checkpoint saves.
 *
 *   cc -shared -fPIC -O2 tests/cli/full_disk.c -o full_disk.so -ldl
 *   FULL_DISK_SAVES=2,3 LD_PRELOAD=./full_disk.so dfg run ... --checkpoint-dir D --save-every K
 *
 * Every write() into a checkpoint's temporary file (dfg_st_write's ".checkpoint.safetensors.XXXXXX",
 * which a save renames over D/checkpoint.safetensors when it is whole) fails with ENOSPC during the
 * saves FULL_DISK_SAVES lists, counted from 1 in the order the process writes them; other files and
 * other saves are untouched. So a test sees exactly what a disk that filled up during those saves
 * would do to dfg, on any machine and without root. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEMP_PREFIX ".checkpoint.safetensors."

static int saves;             /* checkpoint temp files seen so far */
static char current[256];     /* the name of the last one */

/* Is save k (from 1) in the comma-separated list FULL_DISK_SAVES? */
static int listed(int k) {
    const char *s = getenv("FULL_DISK_SAVES");
    while (s && *s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s) return 0;
        if (v == k) return 1;
        s = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* Counts a new checkpoint temp file behind fd; 1 when writes to it are to fail. */
static int full(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, TEMP_PREFIX, strlen(TEMP_PREFIX))) return 0;
    if (strcmp(base, current)) {
        saves++;
        snprintf(current, sizeof(current), "%s", base);
    }
    return listed(saves);
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "write");
    if (full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real(fd, buf, n);
}
